//! The machine's load-to-use latency at the stages' working-set sizes.
//!
//! `cargo bench --bench memory`. Each iteration follows a random cycle of
//! pointers through a buffer of the given size, one 64-byte line per step,
//! so every load waits for the one before: the time per step is the
//! latency of a random access at that size, which is what the filters pay
//! per counter or bit they touch beyond the core's caches. The
//! `parallel_chase` rows do as many accesses as 8 chases at once
//! (`bench::PARALLEL_LANES`), which do not wait for each other, as a
//! packet's filter lines do not. The cycle and the chases are
//! `flowsieve::bench`'s, which `flowsieve bench` runs once a round for its
//! `memory:` lines.
//!
//! Why it is here: the stages' per-packet figures follow this latency more
//! than they follow the code. On the same 2-vCPU guest the latency at
//! 4 MiB (the heavy filters' size with default flags) moved between about
//! 15 and 145 ns from one hour to the next, as other tenants used the
//! shared L3, and the same binary's default job moved from 1.02 to 0.82 of
//! tcpdump's speed with it (BENCHMARKS.md, "Throughput, ninth round"). Run
//! this beside a throughput comparison to tell a slower build from a
//! busier host.

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use flowsieve::bench::{
    PARALLEL_LANES, chase_cycle_with_lanes, parallel_access_ns, random_access_ns,
};
use std::time::Duration;

/// Steps per iteration.
const STEPS: usize = 1 << 16;

fn latency(c: &mut Criterion) {
    let mut g = c.benchmark_group("memory_latency");
    g.throughput(Throughput::Elements(STEPS as u64));
    g.measurement_time(Duration::from_secs(2));
    for kib in [32usize, 256, 1024, 2048, 4096, 8192, 65536] {
        let (cycle, mut lanes) = chase_cycle_with_lanes(kib << 10);
        // Carried across iterations, so that they go round the whole cycle.
        let mut at = 0;
        g.bench_with_input(
            BenchmarkId::new("random_chase_kib", kib),
            &cycle,
            |b, cycle| b.iter(|| random_access_ns(cycle, &mut at, STEPS)),
        );
        // The same number of accesses, `PARALLEL_LANES` in flight at once
        // (`flowsieve bench`'s second memory line).
        g.bench_with_input(
            BenchmarkId::new("parallel_chase_kib", kib),
            &cycle,
            |b, cycle| b.iter(|| parallel_access_ns(cycle, &mut lanes, STEPS / PARALLEL_LANES)),
        );
    }
    g.finish();
}

/// `L` lane starts evenly spaced round `cycle`, found by one untimed lap.
fn spaced<const L: usize>(cycle: &[usize]) -> [usize; L] {
    let lines = cycle.len() / 8;
    let mut starts = [0usize; L];
    let mut at = 0;
    for (l, start) in starts.iter_mut().enumerate() {
        *start = at;
        random_access_ns(cycle, &mut at, lines * (l + 1) / L - lines * l / L);
    }
    starts
}

/// Why `bench`'s 8 lanes are not the host's ceiling, and why they hit at
/// 4 MiB where one chase misses: the same accesses with 1, 2, 4, 8, 16 and
/// 64 chases at once (BENCHMARKS.md, fifty-second and fifty-third rounds).
/// A shared L3 that keeps only the lines touched again soon holds the
/// buffer for the lanes that lap it fast enough, and the rows either side
/// of that speed differ many times over.
fn lanes(c: &mut Criterion) {
    let mut g = c.benchmark_group("memory_lanes");
    g.throughput(Throughput::Elements(STEPS as u64));
    g.measurement_time(Duration::from_secs(2));
    for kib in [4096usize, 16384] {
        let (cycle, _) = chase_cycle_with_lanes(kib << 10);
        lanes_row::<1>(&mut g, kib, &cycle);
        lanes_row::<2>(&mut g, kib, &cycle);
        lanes_row::<4>(&mut g, kib, &cycle);
        lanes_row::<8>(&mut g, kib, &cycle);
        lanes_row::<16>(&mut g, kib, &cycle);
        lanes_row::<64>(&mut g, kib, &cycle);
    }
    g.finish();
}

/// One row of [`lanes`]: `L` chases spaced round `cycle`, `STEPS` accesses
/// an iteration.
fn lanes_row<const L: usize>(g: &mut BenchmarkGroup<'_, WallTime>, kib: usize, cycle: &[usize]) {
    let mut at = spaced::<L>(cycle);
    g.bench_function(BenchmarkId::new(format!("kib_{kib}"), L), |b| {
        b.iter(|| parallel_access_ns(cycle, &mut at, STEPS / L))
    });
}

criterion_group! {
    name = benches;
    // criterion's plot backend panics on a machine without system fonts.
    config = Criterion::default().without_plots();
    targets = latency, lanes
}
criterion_main!(benches);
