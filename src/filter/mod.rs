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

/// `len` zero words whose memory pages are already this process's own.
///
/// Why not `vec![0; len]`: a large zeroed allocation comes from `calloc`,
/// which maps fresh pages and leaves them untouched. A filter reads each
/// counter before it writes it, so the first access to every 4 KiB page is
/// a read, which maps the kernel's shared zero page, and the first write
/// after it has to replace that mapping and flush it from the TLB of every
/// other core the process runs on: an inter-processor interrupt, and a
/// hypervisor exit in a VM. On the benchmark trace that cost 5-6 % of an
/// all-stages run's CPU, all in the first window (`perf`: `do_wp_page`,
/// `flush_tlb_mm_range`, `smp_call_function_many_cond` under the counting
/// filter's insert). Writing one word of every page here makes each
/// page's first touch a write, which needs no flush.
pub(crate) fn owned_zeroed_words(len: usize) -> Vec<u64> {
    const WORDS_PER_PAGE: usize = 4096 / std::mem::size_of::<u64>();
    let mut words = vec![0u64; len];
    for w in words.iter_mut().step_by(WORDS_PER_PAGE) {
        // `black_box` so the store of a zero into zeroed memory is kept.
        *w = std::hint::black_box(0);
    }
    words
}

/// Cache prefetch hint for word `w` of `words`; never faults.
/// Hints the CPU to fetch word `w` of `words` (never faults; see
/// [`crate::prefetch`]).
#[inline(always)]
pub(crate) fn prefetch_word(words: &[u64], w: usize) {
    crate::prefetch::prefetch(words.as_ptr().wrapping_add(w).cast::<u8>());
}
