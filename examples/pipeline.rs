//! Driving the staged pipeline from a program, without the CLI: configure
//! the stages, collect heavy-flow events through a sink, and read the
//! report's numbers.
//!
//! ```sh
//! cargo run --release --example pipeline -- traces/default.pcap
//! ```

use flowsieve::class::Classifier;
use flowsieve::pipeline::{
    Event, EventKind, FileSource, HeavyEvent, PipelineConfig, PipelineSink, WindowSpec, run,
};
use flowsieve::replay::NoObserver;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Keeps the heavy-flow events; ignores new-flow events.
#[derive(Default)]
struct HeavyFlows {
    events: Vec<HeavyEvent>,
}

impl PipelineSink for HeavyFlows {
    fn wants(&self, kind: EventKind) -> bool {
        kind == EventKind::Heavy
    }
    fn event(&mut self, e: &Event) -> std::io::Result<()> {
        if let Event::Heavy(h) = e {
            self.events.push(*h);
        }
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    let paths: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    let paths = if paths.is_empty() {
        vec![PathBuf::from("traces/default.pcap")]
    } else {
        paths
    };
    let mut cfg = PipelineConfig::new(Classifier::ports());
    cfg.threads = 2;
    cfg.heavy.theta = 50;
    cfg.heavy.window = WindowSpec::Time(10_000_000_000);
    let mut sink = HeavyFlows::default();
    let validated = cfg.validate()?;
    let source = FileSource::new(paths, &validated);
    let report = run(source, &validated, &mut NoObserver, &mut sink)?;

    sink.events.sort_by_key(|e| (e.window, e.time_ns));
    for e in sink.events.iter().take(10) {
        // SocketAddr writes an IPv6 address in brackets, so its port
        // stays apart from it.
        println!(
            "window {:>3}  t = {:>7.3}s  {} -> {} proto {}  estimate {}",
            e.window,
            e.time_ns as f64 * 1e-9,
            SocketAddr::new(e.key.src(), e.key.sport()),
            SocketAddr::new(e.key.dst(), e.key.dport()),
            e.key.proto(),
            e.estimate
        );
    }
    // Each exact figure is there only when the run kept the truth, and
    // the model rate only when the configuration has one.
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "n/a".into());
    if let Some(h) = report.heavy() {
        println!(
            "{} heavy-flow events; false positives {}, false negatives {}, model FP rate {}",
            h.overall.reported,
            or_none(h.overall.false_positives.map(|v| v.to_string())),
            or_none(h.overall.false_negatives.map(|v| v.to_string())),
            or_none(h.overall.model_fp_rate.map(|r| r.to_string()))
        );
    }
    if let Some(n) = report.new_flows() {
        println!(
            "{} packets called new, {} truly new; recycles {}",
            n.overall.reported_new,
            or_none(n.overall.true_new.map(|v| v.to_string())),
            n.overall.recycles
        );
    }
    Ok(())
}
