//! The three stages on one and on two worker threads, fed from memory.
//!
//! `cargo bench --bench pipeline`. Figures are in BENCHMARKS.md
//! ("Throughput, eighth round").
//!
//! Why from memory: on a two-core machine a file run with one worker
//! already keeps both cores busy (the source thread reads, dissects and
//! hashes; the worker runs the stages), so a second worker only shares the
//! same two cores and `flowsieve bench` shows no scaling. Here the trace is
//! read, dissected, hashed and classified once, before timing, and the
//! source only hands the stored packets to the dispatcher. The source's
//! share of the CPU then falls from about 40 % to the dispatch alone, and
//! what remains is whether the sharded stages themselves scale from one
//! worker to two: shards share no state and no lock, so they should, up to
//! the cores left beside the source thread.
//!
//! The engine, the dispatcher, the batches, the channels and the stages are
//! the ones a file run uses; only the source differs
//! ([`flowsieve::pipeline::Preloaded`], which `flowsieve bench`'s
//! "preloaded" rows use too).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flowsieve::class::Classifier;
use flowsieve::pipeline::{NoEvents, PipelineConfig, Preloaded, RecycleSpec, ValidatedConfig, run};
use flowsieve::replay::NoObserver;
use std::hint::black_box;
use std::time::Duration;

#[path = "shared/bench_trace.rs"]
mod bench_trace;

/// The "all stages, truth off" configuration: the defaults with
/// `--no-truth --recycle sigma:0.5`.
fn config(threads: usize) -> ValidatedConfig {
    let mut cfg = PipelineConfig::new(Classifier::ports());
    cfg.replay.truth = false;
    cfg.new_flows.recycle = RecycleSpec::Sigma(0.5);
    cfg.threads = threads;
    cfg.validate().expect("a valid configuration")
}

fn benches(c: &mut Criterion) {
    let trace = bench_trace::trace();
    let base = config(1);
    let packets = Preloaded::read(&[trace], &base.config().replay, 1 << 22).expect("preload");
    let mut g = c.benchmark_group("stages_from_memory_1.5M_pkts");
    g.throughput(Throughput::Elements(packets.len() as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    for threads in [1, 2] {
        let cfg = config(threads);
        g.bench_function(format!("all_stages_{threads}_worker"), |b| {
            b.iter(|| {
                let r = run(&packets, &cfg, &mut NoObserver, &mut NoEvents).expect("run");
                black_box(r.throughput.packets_per_sec)
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = pipeline;
    // No plots: criterion's plotting backend needs system fonts that a
    // fresh machine does not have, and panics without them.
    config = Criterion::default().without_plots();
    targets = benches
}
criterion_main!(pipeline);
