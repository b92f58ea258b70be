//! The machine's load-to-use latency at the stages' working-set sizes.
//!
//! `cargo bench --bench memory`. Each iteration follows a random cycle of
//! pointers through a buffer of the given size, one 64-byte line per step,
//! so every load waits for the one before: the time per step is the
//! latency of a random access at that size, which is what the filters pay
//! per counter or bit they touch beyond the core's caches.
//!
//! Why it is here: the stages' per-packet figures follow this latency more
//! than they follow the code. On the same 2-vCPU guest the latency at
//! 4 MiB (the heavy filters' size with default flags) moved between about
//! 15 and 145 ns from one hour to the next, as other tenants used the
//! shared L3, and the same binary's default job moved from 1.02 to 0.82 of
//! tcpdump's speed with it (BENCHMARKS.md, "Throughput, ninth round"). Run
//! this beside a throughput comparison to tell a slower build from a
//! busier host.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use std::hint::black_box;
use std::time::Duration;

/// One cache line: the chase's next index, padded to 64 bytes so that each
/// step touches a line of its own.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line {
    next: usize,
    _pad: [usize; 7],
}

/// Steps per iteration.
const STEPS: usize = 1 << 16;

/// A buffer of `bytes` in one random cycle through all its lines.
fn cycle(bytes: usize) -> Vec<Line> {
    let lines = (bytes / std::mem::size_of::<Line>()).max(2);
    let mut order: Vec<usize> = (0..lines).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(7));
    let mut buf = vec![
        Line {
            next: 0,
            _pad: [0; 7]
        };
        lines
    ];
    for (i, &at) in order.iter().enumerate() {
        buf[at].next = order[(i + 1) % lines];
    }
    buf
}

fn latency(c: &mut Criterion) {
    let mut g = c.benchmark_group("memory_latency");
    g.throughput(Throughput::Elements(STEPS as u64));
    g.measurement_time(Duration::from_secs(2));
    for kib in [32usize, 256, 1024, 2048, 4096, 8192, 65536] {
        let buf = cycle(kib << 10);
        g.bench_with_input(BenchmarkId::new("random_chase_kib", kib), &buf, |b, buf| {
            let mut at = 0usize;
            b.iter(|| {
                for _ in 0..STEPS {
                    at = buf[at].next;
                }
                black_box(at)
            });
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    // criterion's plot backend panics on a machine without system fonts.
    config = Criterion::default().without_plots();
    targets = latency
}
criterion_main!(benches);
