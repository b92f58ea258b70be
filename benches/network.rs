//! The network mode's per-digest costs at the default sizes: a probe's
//! encoding of one shard-window (counters coded as FSCC, presence bits as
//! FSCB) and a collector's decode + merge of one digest, for windows of
//! light, default and heavy load.
//!
//! `cargo bench --bench network`; figures in BENCHMARKS.md ("Network
//! mode") and docs/scale-out.md.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use flowsieve::dissect::FlowKey;
use flowsieve::filter::{
    BloomFilter, CounterSnapshot, CounterWidth, CountingBloomFilter, InsertionLog,
};
use flowsieve::hash::fmix64;
use flowsieve::network::{Digest, NetworkConfig, ShardWindowMerge};
use flowsieve::pipeline::{Candidate, defaults};
use std::hint::black_box;
use std::time::Duration;

/// The CLI's defaults: 8 shards of 2^22 / 8 8-bit counters, k = 11
/// (k_opt(10) at the default load), presence 2^20 bits / 8, k = 4.
fn config() -> NetworkConfig {
    NetworkConfig {
        version: 1,
        shards: defaults::SHARDS as u32,
        window_ns: defaults::HEAVY_WINDOW_NS,
        theta: defaults::THETA,
        counters: defaults::CBF_COUNTERS as u64,
        counter_bits: 8,
        k: 11,
        conservative: false,
        presence_bits: 1 << 20,
        presence_k: 4,
        hash_key: "0".into(),
        probes: 4,
        classes: vec!["all".into()],
    }
}

/// One probe's digest of one shard-window with `packets` packets over
/// `flows` flows.
fn digest(cfg: &NetworkConfig, probe: &str, packets: u64, flows: u64) -> Digest {
    let per_shard = (cfg.counters / u64::from(cfg.shards)) as usize;
    let mut counters = CountingBloomFilter::new(per_shard, cfg.k as usize, CounterWidth::W8);
    let mut presence = BloomFilter::new(
        (cfg.presence_bits / u64::from(cfg.shards)) as usize,
        cfg.presence_k as usize,
    );
    let mut candidates = Vec::new();
    // The heavy shard's insertion log: a window it held whole goes out as
    // the cells its hashes set, as a probe sends it.
    let mut log = InsertionLog::for_filter(per_shard, cfg.k as usize);
    for i in 0..packets {
        // Zipf-like: flow i % flows, with the low flows repeated.
        let f = fmix64((i * i) % flows.max(1) + 1);
        log.record(f);
        let e = counters.insert(f);
        presence.insert(f);
        if e == cfg.candidate_theta() {
            let key = FlowKey::v4((f as u32).to_be_bytes(), [10, 0, 0, 1], 1, 2, 6);
            candidates.push(Candidate {
                key,
                hash: f,
                class: 0,
                estimate: e,
            });
        }
    }
    Digest {
        fingerprint: cfg.fingerprint(),
        probe: probe.into(),
        shard: 0,
        window: 1,
        packets,
        class_packets: vec![packets],
        counters: match log.complete().and_then(|h| counters.nonzero_of(h)) {
            Some(cells) => CounterSnapshot::Sparse(cells),
            None => CounterSnapshot::Dense(counters),
        },
        presence,
        candidates,
    }
}

fn network(c: &mut Criterion) {
    let cfg = config();
    let mut g = c.benchmark_group("network");
    g.measurement_time(Duration::from_secs(3));
    // Packets per shard-window: 10 (a nearly idle link: `sparse1h` holds
    // 3.8 a shard-window), 1 k (a quiet link), 25 k (the 1.5 M-packet
    // benchmark trace's busiest second over 8 shards), 125 k (1 Mpps).
    for (packets, flows) in [
        (10u64, 10u64),
        (1_000, 500),
        (25_000, 5_000),
        (125_000, 25_000),
    ] {
        let d = digest(&cfg, "p0", packets, flows);
        let bytes = d.encode();
        eprintln!(
            "network: {packets} packets/shard-window: digest {} bytes ({} candidates)",
            bytes.len(),
            d.candidates.len()
        );
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::new("encode", packets), &d, |b, d| {
            b.iter(|| black_box(d.encode()))
        });
        g.bench_with_input(
            BenchmarkId::new("decode+merge", packets),
            &bytes,
            |b, bytes| {
                b.iter(|| {
                    let mut m = ShardWindowMerge::new(&cfg, 0, 1);
                    let d = Digest::decode(bytes).unwrap();
                    m.add(&d).unwrap();
                    black_box(m.finish(Vec::new()).heavy.len())
                })
            },
        );
        // A window as a collector sees it with the configuration's four
        // probes: four digests decoded and merged, and one result made
        // (the row above makes a result for every digest). Throughput in
        // digests, so the figure is a collector core's digests a second.
        let four: Vec<Vec<u8>> = (0..cfg.probes)
            .map(|p| digest(&cfg, &format!("p{p}"), packets, flows).encode())
            .collect();
        g.throughput(Throughput::Elements(four.len() as u64));
        g.bench_with_input(
            BenchmarkId::new("window_of_4", packets),
            &four,
            |b, four| {
                b.iter(|| {
                    let mut m = ShardWindowMerge::new(&cfg, 0, 1);
                    for bytes in four {
                        let d = Digest::decode(bytes).unwrap();
                        m.add(&d).unwrap();
                    }
                    black_box(m.finish(Vec::new()).heavy.len())
                })
            },
        );
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).without_plots();
    targets = network
}
criterion_main!(benches);
