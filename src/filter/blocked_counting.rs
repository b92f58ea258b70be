//! The cache-line-blocked counting Bloom filter: all `k` counters of a key
//! in one 64-byte block, so an insertion costs one cache miss instead of
//! `k` (the layout Putze, Sanders and Singler analysed for plain Bloom
//! filters, "Cache-, hash- and space-efficient Bloom filters", 2007).
//!
//! A key picks one block; the block's counters are cut into `k` sub-blocks
//! and the key takes one counter in each ([`crate::hash::BlockedIndexer`]).
//! Counters saturate as in [`super::CountingBloomFilter`], and the estimate
//! is the minimum of the key's `k` counters, so a key's estimate is never
//! below its count while nothing saturates.
//!
//! The false-positive rate of count thresholding is no longer 003's
//! formula: the counters of one block share the block's load, which is
//! random. [`crate::model::blocked`] gives it as a Poisson mixture over the
//! block load.
//!
//! ```
//! use flowsieve::filter::{BlockedCountingFilter, CounterWidth};
//! let mut f = BlockedCountingFilter::new(4096, 4, CounterWidth::W8);
//! for _ in 0..20 { f.insert(42); }
//! assert_eq!(f.estimate(42), 20);
//! assert_eq!(f.m(), 4096);
//! ```

use super::CounterWidth;
use super::line_words::{LINE_WORDS, LineWords};
use crate::hash::BlockedIndexer;

/// Bytes in a block: one cache line.
pub const COUNTER_BLOCK_BYTES: usize = 64;

/// Words of 64 bits in a block: one cache line's.
const BLOCK_WORDS: usize = LINE_WORDS;

/// One block's words.
type Block = [u64; BLOCK_WORDS];

/// The block `b` of `words`, if there is one. A free function, not a
/// method, so that it borrows the words alone and the saturation count
/// can be bumped meanwhile.
#[inline(always)]
fn block_mut(words: &mut LineWords, b: usize) -> Option<&mut Block> {
    words
        .as_mut_slice()
        .as_chunks_mut::<BLOCK_WORDS>()
        .0
        .get_mut(b)
}

/// A counting Bloom filter with every key's counters in one cache line.
///
/// The blocks are `LineWords`: each starts a cache line, and a fresh
/// filter's pages stay untouched until used (or until
/// [`BlockedCountingFilter::prefault`]), as the partitioned filter's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedCountingFilter {
    /// `blocks * BLOCK_WORDS` words, block `b` at `BLOCK_WORDS * b`.
    words: LineWords,
    width: CounterWidth,
    indexer: BlockedIndexer,
    conservative: bool,
    saturated: u64,
}

impl BlockedCountingFilter {
    /// About `m` counters (rounded up to whole blocks) of `width` bits, `k`
    /// per key (clamped to `1..=` the counters in a block).
    pub fn new(m: usize, k: usize, width: CounterWidth) -> BlockedCountingFilter {
        let per_block = Self::counters_per_block(width);
        let blocks = m.div_ceil(per_block).clamp(1, 1 << 32);
        BlockedCountingFilter {
            words: LineWords::zeroed(blocks * BLOCK_WORDS),
            width,
            indexer: BlockedIndexer::new(blocks, per_block, k.min(super::MAX_K)),
            conservative: false,
            saturated: 0,
        }
    }

    /// Counters in one block of `width`-bit counters.
    pub fn counters_per_block(width: CounterWidth) -> usize {
        COUNTER_BLOCK_BYTES * 8 / width.bits() as usize
    }

    /// The same filter with conservative update.
    pub fn conservative(mut self) -> BlockedCountingFilter {
        self.conservative = true;
        self
    }

    /// Counters in all (whole blocks).
    pub fn m(&self) -> usize {
        self.blocks() * Self::counters_per_block(self.width)
    }

    /// Blocks.
    pub fn blocks(&self) -> usize {
        self.words.len() / BLOCK_WORDS
    }

    /// Counters per key.
    pub fn k(&self) -> usize {
        self.indexer.k()
    }

    /// Counters in each of a block's `k` sub-blocks.
    pub fn sub_block_len(&self) -> usize {
        self.indexer.sub_block_len()
    }

    /// Counter width.
    pub fn width(&self) -> CounterWidth {
        self.width
    }

    /// Asks the CPU to fetch the key's block. Changes nothing.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        self.words.prefetch(self.indexer.block(h) * BLOCK_WORDS);
    }

    /// Adds one occurrence of a hash; returns the new estimate (the minimum
    /// of its counters).
    #[inline(always)]
    pub fn insert(&mut self, h: u64) -> u64 {
        if !self.conservative {
            // The width matched once, not per counter (as the partitioned
            // filter's plain insert does).
            return match self.width {
                CounterWidth::W4 => self.insert_plain::<4>(h),
                CounterWidth::W8 => self.insert_plain::<8>(h),
                CounterWidth::W16 => self.insert_plain::<16>(h),
            };
        }
        self.insert_conservative(h)
    }

    /// The plain (not conservative) insert for counters of `BITS` bits.
    ///
    /// Why apart from [`BlockedCountingFilter::add`]'s pass: the heavy
    /// stage calls it for every packet. On a little-endian machine an 8-
    /// (16-) bit counter `c` of a block is byte (16-bit unit) `c` of the
    /// block's memory, as for the partitioned filter's insert, so it is
    /// bumped in place without a word's shifts and masks; the cells come
    /// from [`BlockedIndexer::for_each_cell`], not through an array. The
    /// same counters, saturation events and estimate as `add(h, 1)`, which
    /// goes through the words (`filter::blocked_layout` tests it against
    /// that). Before, this
    /// took about 270 instructions for `k = 4` (BENCHMARKS.md, fifty-ninth
    /// round).
    #[inline(always)]
    fn insert_plain<const BITS: u32>(&mut self, h: u64) -> u64 {
        let indexer = self.indexer;
        let Some(block) = block_mut(&mut self.words, indexer.block(h)) else {
            return 0;
        };
        let saturated = &mut self.saturated;
        let mut est = u64::MAX;
        // A cell is below the block's counters (`k` sub-blocks of
        // `per_block / k` cells), so the masks below never change one:
        // they only let the compiler see the index is in bounds.
        #[cfg(target_endian = "little")]
        match BITS {
            8 => {
                let units: &mut [u8; COUNTER_BLOCK_BYTES] = bytemuck::cast_mut(block);
                indexer.for_each_cell(h, |cell| {
                    let c = &mut units[cell % COUNTER_BLOCK_BYTES];
                    est = est.min(u64::from(super::counter_width::bump_unit(
                        c,
                        u8::MAX,
                        saturated,
                    )));
                });
                return est;
            }
            16 => {
                let units: &mut [u16; COUNTER_BLOCK_BYTES / 2] = bytemuck::cast_mut(block);
                indexer.for_each_cell(h, |cell| {
                    let c = &mut units[cell % (COUNTER_BLOCK_BYTES / 2)];
                    est = est.min(u64::from(super::counter_width::bump_unit(
                        c,
                        u16::MAX,
                        saturated,
                    )));
                });
                return est;
            }
            _ => {}
        }
        let words = block;
        indexer.for_each_cell(h, |cell| {
            if let Some(c) = CounterWidth::bump_fixed::<BITS>(words, cell, saturated) {
                est = est.min(c);
            }
        });
        est
    }

    /// Conservative update: only the key's minimal counters move.
    fn insert_conservative(&mut self, h: u64) -> u64 {
        let max = self.width.max();
        let k = self.k();
        let indexer = self.indexer;
        let width = self.width;
        let Some(words) = block_mut(&mut self.words, indexer.block(h)) else {
            return 0;
        };
        let mut cells = [0usize; super::MAX_K];
        indexer.cells(h, &mut cells[..k]);
        let cells = &cells[..k];
        let mut est = u64::MAX;
        let read = |words: &[u64; BLOCK_WORDS], cell: usize| {
            let (w, s) = width.locate(cell);
            words.get(w).map_or(0, |x| (x >> s) & max)
        };
        let min = cells.iter().map(|&c| read(words, c)).min().unwrap_or(0);
        for &cell in cells {
            let (w, s) = width.locate(cell);
            let Some(word) = words.get_mut(w) else {
                continue;
            };
            let c = (*word >> s) & max;
            let v = if c == min {
                width.bump(word, s, &mut self.saturated)
            } else {
                c
            };
            est = est.min(v);
        }
        est
    }

    /// Adds `n` occurrences of a hash at once: the same counters, the same
    /// saturation events and the same estimate as `n` calls of
    /// [`BlockedCountingFilter::insert`] in a row (the reasoning of
    /// [`crate::filter::CountingBloomFilter::add`]: a key's `k` cells are
    /// distinct, one a sub-block). With `n = 0` nothing changes.
    ///
    /// ```
    /// use flowsieve::filter::{BlockedCountingFilter, CounterWidth};
    /// let mut one_by_one = BlockedCountingFilter::new(1 << 12, 4, CounterWidth::W8);
    /// let mut at_once = one_by_one.clone();
    /// let mut last = 0;
    /// for _ in 0..3 { last = one_by_one.insert(7); }
    /// assert_eq!(at_once.add(7, 3), last);
    /// assert_eq!(at_once, one_by_one);
    /// ```
    pub fn add(&mut self, h: u64, n: u64) -> u64 {
        // Conservative: every counter to at least the key's minimum plus `n`.
        let floor = self
            .conservative
            .then(|| self.estimate(h).saturating_add(n).min(self.width.max()));
        let (width, k) = (self.width, self.k());
        let mut cells = [0usize; super::MAX_K];
        self.indexer.cells(h, &mut cells[..k]);
        let Some(block) = block_mut(&mut self.words, self.indexer.block(h)) else {
            return 0;
        };
        let mut est = u64::MAX;
        for &cell in &cells[..k] {
            let (w, s) = width.locate(cell);
            if let Some(word) = block.get_mut(w) {
                let v = match floor {
                    Some(target) => width.raise_to(word, s, target, &mut self.saturated),
                    None => width.add(word, s, n, &mut self.saturated),
                };
                est = est.min(v);
            }
        }
        est
    }

    /// The key's estimate: the minimum of its counters.
    pub fn estimate(&self, h: u64) -> u64 {
        let max = self.width.max();
        let Some(block) = self
            .words
            .as_slice()
            .as_chunks::<BLOCK_WORDS>()
            .0
            .get(self.indexer.block(h))
        else {
            return 0;
        };
        let mut cells = [0usize; super::MAX_K];
        let cells = &mut cells[..self.k()];
        self.indexer.cells(h, cells);
        cells
            .iter()
            .map(|&cell| {
                let (w, s) = self.width.locate(cell);
                block.get(w).map_or(0, |x| (x >> s) & max)
            })
            .min()
            .unwrap_or(0)
    }

    /// All counters to 0 (the saturation count is kept: it counts events).
    pub fn clear(&mut self) {
        self.words.as_mut_slice().fill(0);
    }

    /// Sets to 0 the block of each of `hashes`: one cache line a hash.
    ///
    /// When every insertion since the filter was last all-zero is among
    /// `hashes` (a complete [`super::InsertionLog`]), this leaves the
    /// filter exactly as [`BlockedCountingFilter::clear`] does. The
    /// saturation count is kept.
    ///
    /// ```
    /// use flowsieve::filter::{BlockedCountingFilter, CounterWidth};
    /// let mut f = BlockedCountingFilter::new(1 << 12, 4, CounterWidth::W4);
    /// let empty = f.clone();
    /// for h in [1, 2, 1] { f.insert(h); }
    /// f.clear_inserted(&[1, 2]);
    /// assert_eq!(f, empty);
    /// ```
    pub fn clear_inserted(&mut self, hashes: &[u64]) {
        for &h in hashes {
            if let Some(b) = block_mut(&mut self.words, self.indexer.block(h)) {
                *b = [0; BLOCK_WORDS];
            }
        }
    }

    /// Faults the blocks' memory pages in as writable now, if they fit in
    /// `*budget` bytes (which they then take from the budget); returns
    /// whether they fitted. Changes no counter (see
    /// [`super::BitArray::prefault`]).
    ///
    /// ```
    /// use flowsieve::filter::{BlockedCountingFilter, CounterWidth};
    /// let mut f = BlockedCountingFilter::new(1 << 20, 4, CounterWidth::W8);
    /// f.insert(9);
    /// let mut budget = 2 << 20;
    /// assert!(f.prefault(&mut budget));
    /// assert_eq!(budget, 1 << 20); // 2^20 counters of a byte
    /// assert_eq!(f.estimate(9), 1);
    /// ```
    pub fn prefault(&mut self, budget: &mut usize) -> bool {
        self.words.prefault(budget)
    }

    /// Counters that reached saturation, over the filter's life.
    pub fn saturation_events(&self) -> u64 {
        self.saturated
    }

    /// Counters that are non-zero.
    pub fn nonzero_counters(&self) -> u64 {
        let (bits, max) = (self.width.bits(), self.width.max());
        self.words
            .as_slice()
            .iter()
            .map(|&w| {
                (0..64 / bits)
                    .filter(|i| (w >> (i * bits)) & max != 0)
                    .count() as u64
            })
            .sum()
    }
}
