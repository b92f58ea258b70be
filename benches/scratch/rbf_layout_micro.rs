//! The recycling filter alone, scattered against blocked (BENCHMARKS.md,
//! sixty-first round): 4 M distinct messages through a sigma-bounded
//! filter of M bits (k = 4, sigma M/2), tested one by one (`ahead 0`) or,
//! as the new-flow stage does, with each message prepared 8 ahead (its
//! positions worked out and their lines fetched). Three rounds.
//!
//!     cp benches/scratch/rbf_layout_micro.rs examples/
//!     cargo run --release --example rbf_layout_micro -- 1048576
//!     cargo run --release --example rbf_layout_micro -- 268435456
//!     rm examples/rbf_layout_micro.rs
use flowsieve::filter::{BitLayout, PreparedMessage, RecyclePolicy, RecyclingBloomFilter};
use flowsieve::model::recycling::Hashing;

fn main() {
    let m: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1 << 20);
    let n: u64 = 4_000_000;
    for round in 0..3 {
        for layout in [BitLayout::Scattered, BitLayout::Blocked] {
            for ahead in [0usize, 8] {
                let mut f = RecyclingBloomFilter::new(
                    m,
                    4,
                    RecyclePolicy::Sigma(m as u64 / 2),
                    Hashing::Colliding,
                    false,
                    false,
                )
                .with_layout(layout);
                let hs: Vec<u64> = (0..n)
                    .map(|i| flowsieve::hash::fmix64(i + 1 + round * n))
                    .collect();
                let mut prep = vec![PreparedMessage::default(); 16];
                let t = std::time::Instant::now();
                let mut new = 0u64;
                for (i, &h) in hs.iter().enumerate() {
                    if ahead > 0 {
                        if let Some(&next) = hs.get(i + ahead) {
                            f.prepare(next, &mut prep[(i + ahead) % 16]);
                        }
                        new += u64::from(f.test_and_insert_prepared(h, &prep[i % 16]));
                    } else {
                        new += u64::from(f.test_and_insert(h));
                    }
                }
                let ns = t.elapsed().as_nanos() as f64 / n as f64;
                println!(
                    "m {m} {layout} ahead {ahead}: {ns:.1} ns a message, {new} new, {} recycles",
                    f.stats().recycles
                );
            }
        }
    }
}
