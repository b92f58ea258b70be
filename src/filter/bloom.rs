//! The partitioned Bloom filter (Bloom 1970; the layout of 000 §III: each of
//! the `k` hashes owns a subarray of `m/k` bits).
//!
//! No false negatives. False-positive rate after `n` insertions
//! `(1 - (1 - k/m)^n)^k` ([`crate::model::bloom::fpr_partitioned`]),
//! minimised at `k ~ (m/n) ln 2` (001).
//!
//! ```
//! use flowsieve::filter::BloomFilter;
//! let mut f = BloomFilter::new(1 << 16, 7);
//! f.insert(0xdead_beef);
//! assert!(f.contains(0xdead_beef));
//! assert_eq!(f.count_ones(), 7);
//! ```

use super::BitArray;
use crate::hash::PartitionedIndexer;

/// Keys per batch in the batch operations: indices for the whole batch are
/// computed (and their cache lines prefetched) before any bit is touched.
pub(crate) const BATCH: usize = 16;

/// Below this many bits (1 MiB) a filter stays in cache and batching only
/// adds work: the batch operations fall back to one key at a time.
pub(crate) const BATCH_MIN_BITS: usize = 1 << 23;

/// A partitioned Bloom filter over 64-bit flow hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BloomFilter {
    bits: BitArray,
    indexer: PartitionedIndexer,
}

/// Why two filters cannot be combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("filters differ in shape: {left_m} bits / k = {left_k} vs {right_m} bits / k = {right_k}")]
pub struct ShapeMismatch {
    /// Cells of the left filter.
    pub left_m: usize,
    /// Hashes of the left filter.
    pub left_k: usize,
    /// Cells of the right filter.
    pub right_m: usize,
    /// Hashes of the right filter.
    pub right_k: usize,
}

impl BloomFilter {
    /// `k` partitions of `m / k` bits (`k` in `1..=MAX_K`, `m / k` at least
    /// 1; a larger `k` is clamped).
    pub fn new(m: usize, k: usize) -> BloomFilter {
        let indexer = PartitionedIndexer::new(m.max(1), k.min(super::MAX_K));
        BloomFilter {
            bits: BitArray::new(indexer.partition_len() * indexer.k()),
            indexer,
        }
    }

    /// A filter from its bits (a decoded snapshot); `bits.len()` is `m`,
    /// which must be `k` partitions (a remainder is ignored).
    pub fn from_bits(bits: BitArray, k: usize) -> BloomFilter {
        let indexer = PartitionedIndexer::new(bits.len().max(1), k.min(super::MAX_K));
        BloomFilter { bits, indexer }
    }

    /// Sized for `n` elements at false-positive rate `fpr`: `m = n ln(1/fpr)
    /// / ln^2 2` bits and `k = (m/n) ln 2` (001).
    pub fn with_capacity(n: usize, fpr: f64) -> BloomFilter {
        let fpr = fpr.clamp(1e-12, 0.5);
        let m = ((n.max(1) as f64) * (1.0 / fpr).ln() / (std::f64::consts::LN_2.powi(2))).ceil()
            as usize;
        let k = crate::model::bloom::optimal_k(m as f64 / n.max(1) as f64) as usize;
        BloomFilter::new(m, k)
    }

    /// Bits in use (`k` times the partition length).
    pub fn m(&self) -> usize {
        self.bits.len()
    }

    /// Hash functions.
    pub fn k(&self) -> usize {
        self.indexer.k()
    }

    /// Adds a hash; returns true if some bit was 0 (the hash was new).
    #[inline]
    pub fn insert(&mut self, h: u64) -> bool {
        let mut new = false;
        for i in 0..self.indexer.k() {
            new |= self.bits.set(self.indexer.index(h, i));
        }
        new
    }

    /// True if every bit of the hash is set.
    #[inline]
    pub fn contains(&self, h: u64) -> bool {
        (0..self.indexer.k()).all(|i| self.bits.get(self.indexer.index(h, i)))
    }

    /// Inserts many hashes. For filters beyond the cache, indices for a
    /// batch of keys are computed and their words prefetched before any bit
    /// is touched, so the cache misses overlap.
    pub fn insert_batch(&mut self, hashes: &[u64]) {
        if self.m() < BATCH_MIN_BITS {
            for &h in hashes {
                self.insert(h);
            }
            return;
        }
        let k = self.indexer.k();
        // Indices of one batch on the stack (k is at most MAX_K).
        let mut idx = [0usize; BATCH * super::MAX_K];
        for chunk in hashes.chunks(BATCH) {
            for (j, &h) in chunk.iter().enumerate() {
                self.indexer.indices(h, &mut idx[j * k..(j + 1) * k]);
                for &x in &idx[j * k..(j + 1) * k] {
                    super::prefetch_word(self.bits.words(), x / 64);
                }
            }
            for &x in &idx[..chunk.len() * k] {
                self.bits.set(x);
            }
        }
    }

    /// Queries many hashes into `out` (`out.len()` at least `hashes.len()`),
    /// batched and prefetched like [`BloomFilter::insert_batch`].
    pub fn contains_batch(&self, hashes: &[u64], out: &mut [bool]) {
        if self.m() < BATCH_MIN_BITS {
            for (o, &h) in out.iter_mut().zip(hashes) {
                *o = self.contains(h);
            }
            return;
        }
        let k = self.indexer.k();
        // Indices of one batch on the stack (k is at most MAX_K).
        let mut idx = [0usize; BATCH * super::MAX_K];
        for (c, chunk) in hashes.chunks(BATCH).enumerate() {
            for (j, &h) in chunk.iter().enumerate() {
                self.indexer.indices(h, &mut idx[j * k..(j + 1) * k]);
                for &x in &idx[j * k..(j + 1) * k] {
                    super::prefetch_word(self.bits.words(), x / 64);
                }
            }
            for j in 0..chunk.len() {
                if let Some(o) = out.get_mut(c * BATCH + j) {
                    *o = idx[j * k..(j + 1) * k].iter().all(|&x| self.bits.get(x));
                }
            }
        }
    }

    /// All bits to 0.
    pub fn clear(&mut self) {
        self.bits.clear();
    }

    /// Bitwise OR with a filter of the same shape: the union of the sets.
    pub fn union(&mut self, other: &BloomFilter) -> Result<(), ShapeMismatch> {
        if self.m() != other.m() || self.k() != other.k() {
            return Err(ShapeMismatch {
                left_m: self.m(),
                left_k: self.k(),
                right_m: other.m(),
                right_k: other.k(),
            });
        }
        self.bits.union_with(&other.bits);
        Ok(())
    }

    /// Bits set.
    pub fn count_ones(&self) -> u64 {
        self.bits.count_ones()
    }

    /// Fraction of bits set.
    pub fn fill_ratio(&self) -> f64 {
        self.count_ones() as f64 / self.m() as f64
    }

    /// The bit array (for compression and snapshots).
    pub fn bits(&self) -> &BitArray {
        &self.bits
    }
}

impl super::Membership for BloomFilter {
    fn insert(&mut self, h: u64) {
        BloomFilter::insert(self, h);
    }
    fn contains(&self, h: u64) -> bool {
        BloomFilter::contains(self, h)
    }
    fn clear(&mut self) {
        BloomFilter::clear(self);
    }
    fn m(&self) -> usize {
        BloomFilter::m(self)
    }
    fn k(&self) -> usize {
        BloomFilter::k(self)
    }
}
