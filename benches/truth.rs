//! The exact flow table ([`flowsieve::truth::FlowTable`]) on the benchmark
//! trace's packets, grown from empty (as a run does: the flow count is not
//! known before the trace is read) and sized up front, side by side: the
//! difference is what growth costs.
//!
//! `cargo bench --bench truth`. The packets are dissected and hashed once,
//! before timing, so only the table is measured. Figures are in
//! BENCHMARKS.md ("Exact flow table").

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flowsieve::dissect::{Dissector, FlowKey};
use flowsieve::hash::flow_hash;
use flowsieve::ingest::{Timestamp, TraceReader};
use flowsieve::truth::{BatchedRecorder, FlowTable};
use std::hint::black_box;
use std::time::Duration;

#[path = "shared/bench_trace.rs"]
mod bench_trace;

/// One keyed packet, as the source thread hands it to the table.
struct Keyed {
    key: FlowKey,
    hash: u64,
    ts: Timestamp,
    wire_len: u32,
    captured: u32,
}

fn keyed_packets() -> Vec<Keyed> {
    let mut r = TraceReader::open(bench_trace::trace()).expect("open");
    let d = Dissector::default();
    let mut out = Vec::with_capacity(bench_trace::PACKETS as usize);
    while let Some(p) = r.next_packet().expect("read") {
        if let Ok(x) = d.dissect(p.link_type, p.data) {
            out.push(Keyed {
                key: x.key,
                hash: flow_hash(&x.key),
                ts: p.ts,
                wire_len: p.wire_len,
                captured: p.data.len() as u32,
            });
        }
    }
    out
}

fn flow_table(packets: &[Keyed], mut t: FlowTable) -> usize {
    for p in packets {
        t.record(p.key, p.hash, 0, p.ts, p.wire_len, p.captured);
    }
    t.len()
}

fn flow_table_batched(packets: &[Keyed], mut t: FlowTable) -> usize {
    {
        let mut r = BatchedRecorder::new(&mut t);
        for p in packets {
            r.record(p.key, p.hash, 0, p.ts, p.wire_len, p.captured);
        }
    }
    t.len()
}

fn benches(c: &mut Criterion) {
    let packets = keyed_packets();
    let flows = flow_table(&packets, FlowTable::default());
    let mut g = c.benchmark_group("truth_1.5M_pkts_100k_flows");
    g.throughput(Throughput::Elements(packets.len() as u64));
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(6));
    g.bench_function("flow_table_grown", |b| {
        b.iter(|| black_box(flow_table(&packets, FlowTable::default())))
    });
    g.bench_function("flow_table_presized", |b| {
        b.iter(|| black_box(flow_table(&packets, FlowTable::with_capacity(flows))))
    });
    g.bench_function("flow_table_grown_batched", |b| {
        b.iter(|| black_box(flow_table_batched(&packets, FlowTable::default())))
    });
    g.finish();
}

criterion_group! {
    name = truth;
    // No plots: criterion's plotting backend needs system fonts that a
    // fresh machine does not have, and panics without them.
    config = Criterion::default().without_plots();
    targets = benches
}
criterion_main!(truth);
