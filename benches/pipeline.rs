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
//! the ones a file run uses; only [`Source`] differs.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flowsieve::class::{ClassId, Classifier};
use flowsieve::dissect::FlowKey;
use flowsieve::ingest::Timestamp;
use flowsieve::pipeline::{NoEvents, PipelineConfig, RecycleSpec, Source, ValidatedConfig, run};
use flowsieve::replay::{NoObserver, PacketSink, ReplayObserver, replay_into};
use flowsieve::report::ReplaySummary;
use std::hint::black_box;
use std::time::Duration;

#[path = "shared/bench_trace.rs"]
mod bench_trace;

/// One keyed packet, as a source hands it to the engine's dispatcher.
#[derive(Clone, Copy)]
struct Keyed {
    key: FlowKey,
    hash: u64,
    class: ClassId,
    ts: Timestamp,
    wire_len: u32,
}

/// Keeps every keyed packet a replay produces, in order.
struct Collect(Vec<Keyed>);

impl PacketSink for Collect {
    fn packet(&mut self, key: &FlowKey, hash: u64, class: ClassId, ts: Timestamp, wire_len: u32) {
        self.0.push(Keyed {
            key: *key,
            hash,
            class,
            ts,
            wire_len,
        });
    }
}

/// Hands stored packets to the engine and returns the summary of the
/// replay that produced them.
struct MemorySource<'a> {
    packets: &'a [Keyed],
    summary: &'a ReplaySummary,
}

impl Source for MemorySource<'_> {
    fn run<P: PacketSink>(self, _: &mut dyn ReplayObserver, sink: &mut P) -> ReplaySummary {
        for p in self.packets {
            sink.packet(&p.key, p.hash, p.class, p.ts, p.wire_len);
        }
        self.summary.clone()
    }
}

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
    let mut collect = Collect(Vec::with_capacity(bench_trace::PACKETS as usize));
    let summary = replay_into(
        &[trace],
        &base.config().replay,
        &mut NoObserver,
        &mut collect,
    );
    let packets = collect.0;
    let mut g = c.benchmark_group("stages_from_memory_1.5M_pkts");
    g.throughput(Throughput::Elements(packets.len() as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    for threads in [1, 2] {
        let cfg = config(threads);
        g.bench_function(format!("all_stages_{threads}_worker"), |b| {
            b.iter(|| {
                let source = MemorySource {
                    packets: &packets,
                    summary: &summary,
                };
                let r = run(source, &cfg, &mut NoObserver, &mut NoEvents).expect("run");
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
