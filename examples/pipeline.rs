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
        println!(
            "window {:>3}  t = {:>7.3}s  {}:{} -> {}:{} proto {}  estimate {}",
            e.window,
            e.time_ns as f64 * 1e-9,
            e.key.src(),
            e.key.sport(),
            e.key.dst(),
            e.key.dport(),
            e.key.proto(),
            e.estimate
        );
    }
    if let Some(h) = report.heavy() {
        println!(
            "{} heavy-flow events; false positives {:?}, false negatives {:?}, model FP rate {:?}",
            h.overall.reported,
            h.overall.false_positives,
            h.overall.false_negatives,
            h.overall.model_fp_rate
        );
    }
    if let Some(n) = report.new_flows() {
        println!(
            "{} packets called new, {:?} truly new; recycles {}",
            n.overall.reported_new, n.overall.true_new, n.overall.recycles
        );
    }
    Ok(())
}
