//! Filter operations per element, side by side with the fastbloom crate at
//! equal m and k, for arrays from L1-resident to far beyond the last-level
//! cache: single and batched insert/query of the partitioned Bloom filter,
//! counting-filter insert and threshold query per counter width, a flow's
//! train inserted packet by packet or held back and added at once, the
//! recycling filter's test-and-insert, the many-writer counting filter on
//! 1 and 2 threads, and a window's clear by a sweep against by its logged
//! hashes.
//!
//! `cargo bench --bench filters`; figures in BENCHMARKS.md.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use flowsieve::filter::{
    AtomicCountingBloomFilter, BlockedCountingFilter, BloomFilter, CounterWidth, Counters,
    CountingBloomFilter, RecyclePolicy, RecyclingBloomFilter,
};
use flowsieve::hash::fmix64;
use flowsieve::model::recycling::Hashing;
use std::hint::black_box;
use std::time::Duration;

/// Hashes per measured iteration.
const OPS: usize = 4096;
/// k for the Bloom filters: optimal at 10 bits per element.
const K: usize = 7;

/// Array sizes in bits: 4 KiB (L1), 256 KiB (L2), 8 MiB, 128 MiB (DRAM).
const SIZES: [(usize, &str); 4] = [
    (1 << 15, "4KiB"),
    (1 << 21, "256KiB"),
    (1 << 26, "8MiB"),
    (1 << 30, "128MiB"),
];

fn hashes(seed: u64, n: usize) -> Vec<u64> {
    (0..n as u64)
        .map(|i| fmix64(i ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect()
}

/// Advances a cursor to the next window of `OPS` probe hashes.
fn next_window(at: &mut usize) -> usize {
    *at = (*at + OPS) % (OPS * 64);
    *at
}

fn config<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(OPS as u64));
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(300));
    g.measurement_time(Duration::from_secs(1));
    g
}

fn bloom(c: &mut Criterion) {
    let mut g = config(c, "bloom");
    for (m, label) in SIZES {
        let fill = hashes(1, m / 10);
        let probe = hashes(2, OPS * 64);
        let mut ours = BloomFilter::new(m, K);
        let mut fast = fastbloom::BloomFilter::with_num_bits(m).hashes(K as u32);
        for &h in &fill {
            ours.insert(h);
            fast.insert_hash(h);
        }
        let mut at = 0usize;
        g.bench_with_input(BenchmarkId::new("insert/flowsieve", label), &m, |b, _| {
            b.iter(|| {
                let s = next_window(&mut at);
                for &h in &probe[s..s + OPS] {
                    black_box(ours.insert(h));
                }
            })
        });
        g.bench_with_input(
            BenchmarkId::new("insert_batch/flowsieve", label),
            &m,
            |b, _| {
                b.iter(|| {
                    let s = next_window(&mut at);
                    ours.insert_batch(black_box(&probe[s..s + OPS]));
                })
            },
        );
        g.bench_with_input(BenchmarkId::new("insert/fastbloom", label), &m, |b, _| {
            b.iter(|| {
                let s = next_window(&mut at);
                for &h in &probe[s..s + OPS] {
                    black_box(fast.insert_hash(h));
                }
            })
        });
        let mut out = vec![false; OPS];
        g.bench_with_input(BenchmarkId::new("query/flowsieve", label), &m, |b, _| {
            b.iter(|| {
                let s = next_window(&mut at);
                let mut hits = 0;
                for &h in &probe[s..s + OPS] {
                    hits += usize::from(ours.contains(h));
                }
                black_box(hits)
            })
        });
        g.bench_with_input(
            BenchmarkId::new("query_batch/flowsieve", label),
            &m,
            |b, _| {
                b.iter(|| {
                    let s = next_window(&mut at);
                    ours.contains_batch(&probe[s..s + OPS], &mut out);
                    black_box(out[0])
                })
            },
        );
        g.bench_with_input(BenchmarkId::new("query/fastbloom", label), &m, |b, _| {
            b.iter(|| {
                let s = next_window(&mut at);
                let mut hits = 0;
                for &h in &probe[s..s + OPS] {
                    hits += usize::from(fast.contains_hash(h));
                }
                black_box(hits)
            })
        });
    }
    g.finish();
}

fn counting(c: &mut Criterion) {
    let mut g = config(c, "counting");
    for (m, label) in [SIZES[1], SIZES[3]] {
        for width in [CounterWidth::W4, CounterWidth::W8, CounterWidth::W16] {
            // m bits of memory: m / width counters.
            let counters = m / width.bits() as usize;
            let mut f = CountingBloomFilter::new(counters, 4, width);
            let probe = hashes(3, OPS * 64);
            let mut at = 0;
            g.bench_with_input(
                BenchmarkId::new(format!("insert/w{}", width.bits()), label),
                &m,
                |b, _| {
                    b.iter(|| {
                        let s = next_window(&mut at);
                        for &h in &probe[s..s + OPS] {
                            black_box(f.insert(h));
                        }
                    })
                },
            );
            g.bench_with_input(
                BenchmarkId::new(format!("count_at_least/w{}", width.bits()), label),
                &m,
                |b, _| {
                    b.iter(|| {
                        let s = next_window(&mut at);
                        let mut hits = 0;
                        for &h in &probe[s..s + OPS] {
                            hits += usize::from(f.count_at_least(h, 2));
                        }
                        black_box(hits)
                    })
                },
            );
        }
    }
    g.finish();
}

/// The heavy stage's filter at its default shape (2^22 8-bit counters,
/// 4 MiB), partitioned at k_opt(10) = 11 against the blocked layout at its
/// own k_opt = 4: one cache line per insertion instead of eleven.
fn counting_layouts(c: &mut Criterion) {
    let mut g = config(c, "counting_layout_4MiB");
    let probe = hashes(5, OPS * 64);
    let mut partitioned = CountingBloomFilter::new(1 << 22, 11, CounterWidth::W8);
    let mut blocked = BlockedCountingFilter::new(1 << 22, 4, CounterWidth::W8);
    let mut at = 0;
    g.bench_function("insert/partitioned_k11", |b| {
        b.iter(|| {
            let s = next_window(&mut at);
            for &h in &probe[s..s + OPS] {
                black_box(partitioned.insert(h));
            }
        })
    });
    g.bench_function("insert/blocked_k4", |b| {
        b.iter(|| {
            let s = next_window(&mut at);
            for &h in &probe[s..s + OPS] {
                black_box(blocked.insert(h));
            }
        })
    });
    g.finish();
}

/// A flow's train of `r` packets into a heavy-stage shard's filter (2^19
/// 8-bit counters, 512 KiB, k = 11): `r` inserts, against what the stage
/// does since it holds a train back (`HeldRepeats` in `pipeline::heavy`):
/// one insert, the estimate worked out for each packet after it, and the
/// rest added in one pass (`CountingBloomFilter::add`). Per packet, each
/// iteration's flows cleared by their hashes after it, as a window of few
/// flows is (both sides alike).
fn counting_trains(c: &mut Criterion) {
    let mut g = config(c, "counting_trains_512KiB_k11");
    let probe = hashes(6, OPS * 64);
    let mut each = CountingBloomFilter::new(1 << 19, 11, CounterWidth::W8);
    let mut held = each.clone();
    let mut at = 0;
    for train in [2usize, 4, 8] {
        let flows = OPS / train;
        g.bench_function(BenchmarkId::new("insert_each", train), |b| {
            b.iter(|| {
                let s = next_window(&mut at);
                for &h in &probe[s..s + flows] {
                    for _ in 0..train {
                        black_box(each.insert(h));
                    }
                }
                each.clear_inserted(&probe[s..s + flows]);
            })
        });
        g.bench_function(BenchmarkId::new("insert_then_add", train), |b| {
            b.iter(|| {
                let s = next_window(&mut at);
                for &h in &probe[s..s + flows] {
                    let mut estimate = held.insert(h);
                    for _ in 1..train {
                        estimate = (estimate + 1).min(255);
                        black_box(estimate);
                    }
                    black_box(held.add(h, train as u64 - 1));
                }
                held.clear_inserted(&probe[s..s + flows]);
            })
        });
    }
    g.finish();
}

fn recycling(c: &mut Criterion) {
    let mut g = config(c, "recycling");
    for (m, label) in [SIZES[1], SIZES[3]] {
        for two_phase in [false, true] {
            let mut f = RecyclingBloomFilter::new(
                m,
                5,
                RecyclePolicy::Sigma(m as u64 / 2),
                Hashing::Colliding,
                false,
                two_phase,
            );
            let probe = hashes(4, OPS * 64);
            let mut at = 0;
            let name = if two_phase {
                "test_and_insert/two_phase"
            } else {
                "test_and_insert/one_phase"
            };
            g.bench_with_input(BenchmarkId::new(name, label), &m, |b, _| {
                b.iter(|| {
                    let s = next_window(&mut at);
                    for &h in &probe[s..s + OPS] {
                        black_box(f.test_and_insert(h));
                    }
                })
            });
        }
    }
    g.finish();
}

fn many_writers(c: &mut Criterion) {
    let mut g = c.benchmark_group("many_writers");
    const PER_THREAD: usize = 1 << 18;
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(2));
    for threads in [1usize, 2] {
        g.throughput(Throughput::Elements((PER_THREAD * threads) as u64));
        let f = AtomicCountingBloomFilter::new(1 << 22, 4, CounterWidth::W8);
        let work: Vec<Vec<u64>> = (0..threads)
            .map(|t| hashes(10 + t as u64, PER_THREAD))
            .collect();
        g.bench_with_input(
            BenchmarkId::new("cas_insert", format!("{threads}_threads")),
            &threads,
            |b, _| {
                b.iter(|| {
                    std::thread::scope(|s| {
                        for w in &work {
                            let f = &f;
                            s.spawn(move || {
                                for &h in w {
                                    black_box(f.insert(h));
                                }
                            });
                        }
                    });
                })
            },
        );
    }
    g.finish();
}

/// A heavy window's end: `n` insertions into a shard's filter at the
/// default shape (2^19 8-bit counters, 512 KiB, k = 11), then a clear by
/// a sweep or by the `n` logged hashes. Eight filters in turn, as a worker
/// runs eight shards, so the sweep is not of a filter alone in the cache.
/// Where the two cross is the insertion log's bound
/// (`filter::SCATTERED_LINE_COST`).
fn window_clear(c: &mut Criterion) {
    let mut g = c.benchmark_group("window_clear_512KiB_k11");
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(300));
    g.measurement_time(Duration::from_secs(1));
    let mut filters: Vec<CountingBloomFilter> = (0..8)
        .map(|_| CountingBloomFilter::new(1 << 19, 11, CounterWidth::W8))
        .collect();
    for n in [50usize, 100, 200, 250, 400, 700] {
        g.throughput(Throughput::Elements(n as u64));
        let probe = hashes(6, n * 64);
        for by_log in [false, true] {
            let name = if by_log { "by_log" } else { "sweep" };
            let (mut at, mut shard) = (0usize, 0usize);
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, &n| {
                b.iter(|| {
                    at = (at + n) % (n * 64);
                    shard = (shard + 1) % filters.len();
                    let f = &mut filters[shard];
                    let window = &probe[at..at + n];
                    for &h in window {
                        black_box(f.insert(h));
                    }
                    if by_log {
                        f.clear_inserted(window);
                    } else {
                        f.clear();
                    }
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = filters;
    // No plots: criterion's plotting backend needs system fonts that a
    // fresh machine does not have, and panics without them.
    config = Criterion::default().without_plots();
    targets = bloom, counting, counting_layouts, counting_trains, recycling, many_writers, window_clear
}
criterion_main!(filters);
