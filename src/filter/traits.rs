//! What the filters have in common, as traits: a [`Membership`] filter
//! adds hashes and answers whether it holds one; a filter with
//! [`Counters`] also exposes the `k` counters of a hash, from which the
//! estimate, count thresholding (003) and the counter product of the Bloom
//! paradox (000 Theorem 2) all follow. The selective filters are generic
//! over these, and every counting filter answers those queries through one
//! implementation.
//!
//! ```
//! use flowsieve::filter::{BloomFilter, CounterWidth, Counters, CountingBloomFilter, Membership};
//! fn holds<F: Membership>(f: &mut F) -> bool {
//!     f.insert(7);
//!     f.contains(7)
//! }
//! assert!(holds(&mut BloomFilter::new(1024, 4)));
//! let mut c = CountingBloomFilter::new(1024, 4, CounterWidth::W8);
//! assert!(holds(&mut c));
//! assert_eq!(c.estimate(7), 1);
//! assert_eq!(c.counters(7), vec![1; 4]);
//! ```

/// A filter that holds a set of 64-bit flow hashes.
pub trait Membership {
    /// Adds an element.
    fn insert(&mut self, h: u64);
    /// Whether the filter answers "member" (no false negatives; false
    /// positives at the filter's rate).
    fn contains(&self, h: u64) -> bool;
    /// Empties the filter.
    fn clear(&mut self);
    /// Cells (bits or counters) in use.
    fn m(&self) -> usize;
    /// Cells per element.
    fn k(&self) -> usize;
    /// The model false-positive rate after `n` distinct insertions: 001's
    /// partitioned rate `(1 - (1 - k/m)^n)^k` unless the filter's layout
    /// has its own model ([`super::BlockedBloomFilter`]'s).
    fn model_fpr(&self, n: u64) -> f64 {
        crate::model::bloom::fpr_partitioned(self.m() as u64, n, self.k() as u32)
    }
}

/// Read access to a counting filter's counters.
pub trait Counters {
    /// Cells per element.
    fn hashes(&self) -> usize;
    /// The value of counter `i` (0 outside the filter).
    fn counter(&self, i: usize) -> u64;
    /// The index of the `j`-th counter of hash `h`.
    fn counter_index(&self, h: u64, j: usize) -> usize;

    /// The `k` counters of a hash, in partition order.
    fn counters(&self, h: u64) -> Vec<u64> {
        (0..self.hashes())
            .map(|j| self.counter(self.counter_index(h, j)))
            .collect()
    }

    /// The minimum of the hash's counters: an upper bound on its count
    /// (exact or above, unless deletes of non-members corrupted it).
    #[inline]
    fn estimate(&self, h: u64) -> u64 {
        (0..self.hashes())
            .map(|j| self.counter(self.counter_index(h, j)))
            .min()
            .unwrap_or(0)
    }

    /// Count thresholding (003): all `k` counters `>= theta`.
    #[inline]
    fn count_at_least(&self, h: u64, theta: u64) -> bool {
        self.estimate(h) >= theta
    }

    /// The natural log of the product of the hash's `k` counters (the
    /// statistic of 000 Theorem 2); negative infinity if a counter is 0.
    #[inline]
    fn ln_counter_product(&self, h: u64) -> f64 {
        let mut sum = 0.0;
        for j in 0..self.hashes() {
            let c = self.counter(self.counter_index(h, j));
            if c == 0 {
                return f64::NEG_INFINITY;
            }
            sum += ln_count(c);
        }
        sum
    }
}

/// `ln(c)` of a counter value, bit for bit `(c as f64).ln()`.
///
/// Why a table: with a counting directory (`--directory cbf`) the
/// selective stage takes this product at every positive query, `k`
/// logarithms each (0.41 % of the instructions of such a run on a
/// 150 k-packet trace, callgrind; BENCHMARKS.md, twentieth round), and
/// counters are small integers. The table holds the values
/// `f64::ln` itself returned for 0..256, so a lookup is the same number
/// as computing it, and the sum above is taken in the same order: the
/// reported products, posteriors and decisions do not move.
#[inline]
fn ln_count(c: u64) -> f64 {
    static TABLE: std::sync::LazyLock<[f64; 256]> =
        std::sync::LazyLock::new(|| std::array::from_fn(|c| (c as f64).ln()));
    match usize::try_from(c).ok().and_then(|i| TABLE.get(i)) {
        Some(&v) => v,
        None => (c as f64).ln(),
    }
}

/// A counting filter's shape and its non-zero counters in index order:
/// what a counter snapshot codes ([`super::compress_counting`]), whether
/// the counters are a whole filter or its non-zero cells alone.
pub trait CounterCells {
    /// Counters of the filter.
    fn m(&self) -> usize;
    /// Hash functions.
    fn k(&self) -> usize;
    /// Counter width.
    fn width(&self) -> super::CounterWidth;
    /// Calls `each(i, v)` for every non-zero counter, in increasing `i`.
    fn for_each_nonzero(&self, each: impl FnMut(usize, u64));
}

macro_rules! counter_cells_by_inherent {
    ($($t:ty),*) => {$(
        impl CounterCells for $t {
            fn m(&self) -> usize {
                <$t>::m(self)
            }
            fn k(&self) -> usize {
                <$t>::k(self)
            }
            fn width(&self) -> super::CounterWidth {
                <$t>::width(self)
            }
            fn for_each_nonzero(&self, each: impl FnMut(usize, u64)) {
                <$t>::for_each_nonzero(self, each)
            }
        }
    )*};
}

// Not for `CounterSnapshot`: a coder generic over the enum walks both forms
// in one function, and its dense loop ran 35-45 % slower that way
// (`cargo bench --bench network`, `encode/125000`). The snapshot codes its
// concrete form instead (`CounterSnapshot::compress`).
counter_cells_by_inherent!(super::CountingBloomFilter, super::SparseCounters);
