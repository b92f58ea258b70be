//! The cache-line-blocked Bloom filter: all `k` bits of a key in one
//! 512-bit block, one 64-byte line (Putze, Sanders and Singler, "Cache-,
//! hash- and space-efficient Bloom filters", 2007), so a query costs one
//! cache miss instead of `k`.
//!
//! A key picks one block and one bit in each of the block's `k` sub-blocks
//! of `floor(512 / k)` bits ([`crate::hash::BlockedIndexer`], the counting
//! filter's blocked layout with a bit per cell). No false negatives. The
//! false-positive rate is not 001's: the blocks' loads vary, and (B1) of
//! [`crate::model::blocked`] at `theta = 1` gives it as a Poisson mixture
//! over a block's load, which [`super::Membership::model_fpr`] answers.
//!
//! ```
//! use flowsieve::filter::{BlockedBloomFilter, Membership};
//! let mut f = BlockedBloomFilter::new(1 << 16, 7);
//! f.insert(0xdead_beef);
//! assert!(f.contains(0xdead_beef));
//! assert_eq!((f.m(), f.blocks()), (1 << 16, 128));
//! // At 10 bits per element it is above the partitioned filter's rate.
//! let partitioned = flowsieve::filter::BloomFilter::new(1 << 16, 7);
//! assert!(f.model_fpr(6554) > partitioned.model_fpr(6554));
//! ```

use super::{BIT_BLOCK_BITS, BitArray};
use crate::hash::BlockedIndexer;

/// A Bloom filter with every key's bits in one cache line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedBloomFilter {
    bits: BitArray,
    indexer: BlockedIndexer,
}

impl BlockedBloomFilter {
    /// About `m` bits (rounded up to whole 512-bit blocks), `k` per key
    /// (clamped to `1..=` [`super::MAX_K`]).
    pub fn new(m: usize, k: usize) -> BlockedBloomFilter {
        let blocks = m.div_ceil(BIT_BLOCK_BITS).clamp(1, 1 << 32);
        BlockedBloomFilter {
            bits: BitArray::new(blocks * BIT_BLOCK_BITS),
            indexer: BlockedIndexer::new(blocks, BIT_BLOCK_BITS, k.clamp(1, super::MAX_K)),
        }
    }

    /// Bits (whole blocks).
    pub fn m(&self) -> usize {
        self.bits.len()
    }

    /// Bits per key.
    pub fn k(&self) -> usize {
        self.indexer.k()
    }

    /// Blocks of 512 bits.
    pub fn blocks(&self) -> usize {
        self.indexer.blocks()
    }

    /// Adds a hash; returns true if some bit was 0 (the hash was new).
    #[inline]
    pub fn insert(&mut self, h: u64) -> bool {
        let base = self.indexer.block(h) * BIT_BLOCK_BITS;
        let bits = &mut self.bits;
        let mut new = false;
        self.indexer.for_each_cell(h, |c| new |= bits.set(base + c));
        new
    }

    /// True if every bit of the hash is set, stopping at the first clear
    /// one (most keys asked are not members).
    #[inline]
    pub fn contains(&self, h: u64) -> bool {
        let base = self.indexer.block(h) * BIT_BLOCK_BITS;
        self.indexer.all_cells(h, |c| self.bits.get(base + c))
    }

    /// Bits set.
    pub fn count_ones(&self) -> u64 {
        self.bits.count_ones()
    }

    /// All bits to 0.
    pub fn clear(&mut self) {
        self.bits.clear();
    }

    /// The bit array (block `b` is bits `512 b .. 512 b + 512`).
    pub fn bits(&self) -> &BitArray {
        &self.bits
    }
}

impl super::Membership for BlockedBloomFilter {
    fn insert(&mut self, h: u64) {
        BlockedBloomFilter::insert(self, h);
    }
    fn contains(&self, h: u64) -> bool {
        BlockedBloomFilter::contains(self, h)
    }
    fn clear(&mut self) {
        BlockedBloomFilter::clear(self);
    }
    fn m(&self) -> usize {
        BlockedBloomFilter::m(self)
    }
    fn k(&self) -> usize {
        BlockedBloomFilter::k(self)
    }
    /// (B1) of [`crate::model::blocked`] at `theta = 1`: a key never
    /// inserted has its bit set in each of its `k` sub-blocks.
    fn model_fpr(&self, n: u64) -> f64 {
        crate::model::blocked::fpr_bloom_blocked_at_load(
            n as f64 / self.blocks() as f64,
            self.k() as u32,
        )
    }
}
