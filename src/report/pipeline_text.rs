//! The human-readable report of a pipeline run: the replay summary, then
//! one section per stage with a table per class.

use super::{HeavyRates, NewFlowRates, PipelineReport, SelectiveRates};
use std::fmt::Write;

fn rate(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.4}"))
}

fn count(x: Option<u64>) -> String {
    x.map_or("-".into(), |v| v.to_string())
}

fn heavy_row(o: &mut String, name: &str, r: &HeavyRates) {
    let _ = writeln!(
        o,
        "  {:<14} {:>10} {:>9} {:>8} {:>8} {:>6} {:>6} {:>8} {:>8} {:>9} {:>9}",
        name,
        r.packets,
        count(r.flows_below),
        count(r.flows_above),
        r.reported,
        count(r.false_positives),
        count(r.false_negatives),
        rate(r.fp_rate),
        rate(r.fn_rate),
        rate(r.model_fp_rate),
        rate(r.model_fp_rate_compound),
    );
}

fn new_row(o: &mut String, name: &str, r: &NewFlowRates) {
    let _ = writeln!(
        o,
        "  {:<14} {:>10} {:>9} {:>9} {:>7} {:>7} {:>9} {:>9} {:>9} {:>8}",
        name,
        r.packets,
        count(r.true_new),
        r.reported_new,
        count(r.false_positives),
        count(r.false_negatives),
        rate(r.fp_rate_instance),
        rate(r.fp_rate_first),
        rate(r.fp_rate_each),
        rate(r.fn_rate),
    );
}

fn sel_row(o: &mut String, name: &str, r: &SelectiveRates) {
    let _ = writeln!(
        o,
        "  {:<20} {:>9} {:>8} {:>7.4} {:>7.4} {:>8.4} {:>8.4} {:>10.1} {:>8.1}%",
        name,
        r.queries,
        r.members,
        r.prior_est,
        r.prior_true,
        r.fp_rate,
        r.fn_rate,
        r.cost,
        100.0 * r.cost_reduction,
    );
}

impl PipelineReport {
    /// A readable report for a terminal.
    pub fn render_text(&self) -> String {
        let mut o = self.replay.render_text();
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "pipeline: {} keyed packets, {} shards on {} threads, batches of {}",
            self.pipeline.packets,
            self.pipeline.shards,
            self.throughput.threads,
            self.pipeline.batch
        );
        if let Some(h) = &self.heavy {
            let c = &h.config;
            let _ = writeln!(o);
            let _ = writeln!(
                o,
                "heavy flows (count >= {} per {} window; {} x {}-bit counters, k = {}{}{})",
                c.theta,
                c.window,
                c.counters,
                c.counter_bits,
                c.k,
                if c.k_from_model { " = k_opt" } else { "" },
                if c.conservative { ", conservative" } else { "" }
            );
            let _ = writeln!(
                o,
                "  {:<14} {:>10} {:>9} {:>8} {:>8} {:>6} {:>6} {:>8} {:>8} {:>9} {:>9}",
                "class",
                "packets",
                "below",
                "above",
                "reported",
                "FP",
                "FN",
                "fp_rate",
                "fn_rate",
                "model",
                "compound"
            );
            for r in &h.classes {
                if r.packets > 0 {
                    heavy_row(&mut o, r.class.as_deref().unwrap_or("?"), r);
                }
            }
            heavy_row(&mut o, "all", &h.overall);
            let _ = writeln!(
                o,
                "  {} shard-windows; saturation: {} counters in {} windows",
                h.shard_windows, h.saturation_events, h.saturated_windows
            );
            for n in &h.notes {
                let _ = writeln!(o, "  note: {n}");
            }
        }
        if let Some(n) = &self.new_flows {
            let c = &n.config;
            let _ = writeln!(o);
            let _ = writeln!(
                o,
                "new flows (recycling filter: {} bits, {} per shard{}, k = {}, {}{}{})",
                c.bits,
                c.bits_per_shard_phase,
                if c.two_phase { " per phase" } else { "" },
                c.k,
                c.policy,
                if c.retaining { ", retaining" } else { "" },
                if c.colliding { "" } else { ", non-colliding" }
            );
            let _ = writeln!(
                o,
                "  {:<14} {:>10} {:>9} {:>9} {:>7} {:>7} {:>9} {:>9} {:>9} {:>8}",
                "class",
                "packets",
                "true_new",
                "reported",
                "FP",
                "FN",
                "instance",
                "first",
                "each",
                "fn_rate"
            );
            for r in &n.classes {
                if r.packets > 0 {
                    new_row(&mut o, r.class.as_deref().unwrap_or("?"), r);
                }
            }
            new_row(&mut o, "all", &n.overall);
            let _ = writeln!(
                o,
                "  recycles {}; model average rate (004, count-instance) {}",
                n.overall.recycles,
                rate(n.overall.model_fp_rate)
            );
            for note in &n.notes {
                let _ = writeln!(o, "  note: {note}");
            }
        }
        if let Some(s) = &self.selective {
            let c = &s.config;
            let _ = writeln!(o);
            let _ = writeln!(
                o,
                "selective query (directory {} at {} bits/element, k = {}; cache {} then query {}; queries per {})",
                c.directory, c.bpe, c.k, c.cache_window, c.query_window, c.query_unit
            );
            let _ = writeln!(
                o,
                "  {:<20} {:>9} {:>8} {:>7} {:>7} {:>8} {:>8} {:>10} {:>9}",
                "variant",
                "queries",
                "members",
                "P_est",
                "P_true",
                "fp_rate",
                "fn_rate",
                "cost",
                "saving"
            );
            for v in &s.variants {
                sel_row(&mut o, &v.name, &v.overall);
            }
            for v in &s.variants {
                let _ = writeln!(o, "  {} by class:", v.name);
                for r in &v.classes {
                    if r.queries > 0 {
                        sel_row(
                            &mut o,
                            &format!("  {}", r.class.as_deref().unwrap_or("?")),
                            r,
                        );
                    }
                }
            }
            if !s.sweeps.is_empty() {
                let _ = writeln!(o, "  sweeps:");
                let _ = writeln!(
                    o,
                    "  {:<8} {:>8} {:<16} {:>5} {:>3} {:>8} {:>8} {:>10}",
                    "param", "value", "variant", "bpe", "k", "fp_rate", "fn_rate", "cost"
                );
                for p in &s.sweeps {
                    let _ = writeln!(
                        o,
                        "  {:<8} {:>8} {:<16} {:>5} {:>3} {:>8.4} {:>8.4} {:>10.1}",
                        p.parameter, p.value, p.variant, p.bpe, p.k, p.fp_rate, p.fn_rate, p.cost
                    );
                }
            }
            for note in &s.notes {
                let _ = writeln!(o, "  note: {note}");
            }
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "latency per batch (ns)");
        for st in &self.stages {
            let _ = writeln!(
                o,
                "  {:<10} {:>8} batches  p50 {:>9}  p99 {:>9}  max {:>10}",
                st.name, st.batches, st.p50_ns, st.p99_ns, st.max_ns
            );
        }
        let t = &self.throughput;
        let _ = writeln!(
            o,
            "throughput: {:.2} Mpps wall ({:.3} s), {:.2} Mpps per CPU-second ({:.3} s CPU)",
            t.packets_per_sec / 1e6,
            t.wall_seconds,
            t.packets_per_cpu_sec / 1e6,
            t.cpu_seconds
        );
        o
    }
}
