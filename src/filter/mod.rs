//! Probabilistic filters: plain data structures with no I/O. Each documents
//! its false-positive and false-negative behaviour and the paper it follows.
//! The [`Membership`] and [`Counters`] traits are what they share.
//!
//! - [`BloomFilter`]: partitioned Bloom filter (001).
//! - [`CountingBloomFilter`]: 4/8/16-bit saturating counters, count
//!   thresholding, conservative update (001, 003).
//! - [`AtomicCountingBloomFilter`]: the same, lock-free: single writer with
//!   concurrent readers, or many writers by compare-and-swap.
//! - [`RecyclingBloomFilter`]: new-flow detection on endless streams (004).
//! - [`SelectiveBloomFilter`], [`SelectiveCountingFilter`] and
//!   [`PriorSampler`] with [`RoundPriors`]: cost-aware answers that respect the a priori
//!   membership probability (the Bloom paradox, 000).
//! - [`BhCountingFilter`]: fixed plus B_h variable increments, Theorem 5's
//!   sharper posterior (000 §VI).
//! - [`compress_bloom`] / [`decompress_bloom`] and deltas: arithmetic-coded
//!   snapshots near `m H(p)` bits (002).

mod atomic_counting;
mod bh_counting;
mod bit_array;
mod blocked_counting;
mod bloom;
mod compressed;
mod compressed_counting;
mod counter_layout;
mod counter_width;
mod counting;
mod prior;
mod recycling;
mod selective;
mod traits;

pub use atomic_counting::{AtomicCountingBloomFilter, CbfReader, CbfWriter};
pub use bh_counting::{BhCountingFilter, BhSequence, BhSequenceError};
pub use bit_array::BitArray;
pub use blocked_counting::{BlockedCountingFilter, COUNTER_BLOCK_BYTES};
pub use bloom::{BloomFilter, ShapeMismatch};
pub use compressed::{
    CompressedError, DEFAULT_DECODE_MAX_BITS, MAX_SNAPSHOT_BITS, apply_delta, compress_bloom,
    compress_delta, decompress_bloom, decompress_bloom_within,
};
pub use compressed_counting::{ESCAPE as COUNTER_ESCAPE, compress_counting, decompress_counting};
pub use counter_layout::{CounterLayout, CounterLayoutError};
pub use counter_width::{CounterWidth, CounterWidthError};
pub use counting::CountingBloomFilter;
pub use prior::{PriorEstimate, PriorSampler, RoundPriors};
pub use recycling::{MAX_K, RecyclePolicy, RecyclingBloomFilter, RecyclingStats};
pub use selective::{SelectiveAnswer, SelectiveBloomFilter, SelectiveCountingFilter, Selectivity};
pub use traits::{Counters, Membership};

/// Cache prefetch hint for word `w` of `words`; never faults.
/// Hints the CPU to fetch word `w` of `words` (never faults; see
/// [`crate::prefetch`]).
#[inline(always)]
pub(crate) fn prefetch_word(words: &[u64], w: usize) {
    crate::prefetch::prefetch(words.as_ptr().wrapping_add(w).cast::<u8>());
}
