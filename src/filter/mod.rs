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
//! - [`InsertionLog`]: the hashes a filter took since it was clear, so a
//!   sparse filter is cleared by what it holds, not by a sweep.
//! - [`CounterSnapshot`]: a counting filter's counters whole, or as its
//!   non-zero cells ([`SparseCounters`]) when a window took few.
//! - [`compress_bloom`] / [`decompress_bloom`] and deltas: arithmetic-coded
//!   snapshots near `m H(p)` bits (002).

mod atomic_counting;
mod bh_counting;
mod bit_array;
mod bit_layout;
mod blocked_bloom;
mod blocked_counting;
mod bloom;
mod compressed;
mod compressed_counting;
mod counter_layout;
mod counter_snapshot;
mod counter_width;
mod counting;
mod gap_coding;
mod insertion_log;
mod line_words;
mod prepared_message;
mod prior;
mod recycling;
mod selective;
mod sparse_counters;
mod traits;

/// The atomics [`AtomicCountingBloomFilter`] is built on. tests/loom.rs
/// compiles `atomic_counting.rs` again beside a `sync` of its own that
/// holds loom's types, so the model checker runs the filter's own source
/// within the normal test build, not in a build of every crate of its own.
mod sync {
    pub(super) use std::sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    };
}

pub use atomic_counting::{AtomicCountingBloomFilter, CbfReader, CbfWriter};
pub use bh_counting::{BhCountingFilter, BhSequence, BhSequenceError};
pub use bit_array::BitArray;
pub use bit_layout::{BIT_BLOCK_BITS, BitLayout, BitLayoutError};
pub use blocked_bloom::BlockedBloomFilter;
pub use blocked_counting::{BlockedCountingFilter, COUNTER_BLOCK_BYTES};
pub use bloom::{BloomFilter, ShapeMismatch};
pub use compressed::{
    CompressedError, DEFAULT_DECODE_MAX_BITS, MAX_SNAPSHOT_BITS, apply_delta, compress_bloom,
    compress_delta, decompress_bloom, decompress_bloom_within,
};
pub use compressed_counting::{
    ESCAPE as COUNTER_ESCAPE, SPARSE_SHARE as COUNTER_SPARSE_SHARE, compress_counting,
    decompress_counter_snapshot, decompress_counting,
};
pub use counter_layout::{CounterLayout, CounterLayoutError};
pub use counter_snapshot::CounterSnapshot;
pub use counter_width::{CounterWidth, CounterWidthError};
pub use counting::CountingBloomFilter;
pub use insertion_log::{InsertionLog, SCATTERED_LINE_COST};
pub use prepared_message::PreparedMessage;
pub use prior::{PriorEstimate, PriorSampler, RoundPriors};
pub use recycling::{MAX_K, RecyclePolicy, RecyclingBloomFilter, RecyclingStats};
pub use selective::{SelectiveAnswer, SelectiveBloomFilter, SelectiveCountingFilter, Selectivity};
pub use sparse_counters::SparseCounters;
pub use traits::{CounterCells, Counters, Membership};

/// Faults in every memory page of `words` as writable, changing no value,
/// if the whole slice fits in `*budget` bytes, and takes its size from the
/// budget. Returns whether it fitted.
///
/// Why: a large `vec![0; n]` comes from `calloc`, whose pages stay
/// untouched until used. The filters read each word before they write it,
/// so the first access to every page is a read, which maps the kernel's
/// shared zero page, and the first write after it has to replace that
/// mapping and flush it from the TLB of every other core the process runs
/// on: an inter-processor interrupt, and a hypervisor exit in a VM. On the
/// benchmark trace that cost 5-6 % of an all-stages run's CPU, all in the
/// first window (`perf`: `do_wp_page`, `flush_tlb_mm_range`,
/// `smp_call_function_many_cond` under the counting filter's insert). A
/// page whose first touch is a write needs no flush. The shard workers
/// call this (through the filters' `prefault`) when they build a shard, at
/// its first batch, so it never delays the source's first packet,
/// and the budget keeps a run over a few packets from paying for touching
/// a huge filter it will barely use.
pub(crate) fn prefault_words(words: &mut [u64], budget: &mut usize) -> bool {
    let bytes = std::mem::size_of_val(words);
    if bytes > *budget {
        return false;
    }
    *budget -= bytes;
    populate_writable(words);
    true
}

/// Asks the kernel to fault in the whole pages inside `words` as writable
/// (`MADV_POPULATE_WRITE`, Linux 5.14): what writing to each page would do,
/// without reading or changing a byte. Reading first is what must not
/// happen (it maps the zero page), which rules out rewriting each word's
/// own value from Rust.
#[cfg(target_os = "linux")]
fn populate_writable(words: &mut [u64]) {
    let Some(page) = crate::pages::page_size() else {
        return;
    };
    let start = words.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(words);
    let (first, last) = (start.next_multiple_of(page), end / page * page);
    if last <= first {
        return;
    }
    // SAFETY: `first..last` lies inside `words`, which is borrowed mutably
    // here, so nothing else reads or writes it meanwhile. POPULATE_WRITE
    // only maps the range's pages in, writable, and changes no byte of
    // them; a kernel without it answers EINVAL and nothing happens, which
    // only leaves the first touches to the packets, as without this call.
    let _ = unsafe {
        libc::madvise(
            first as *mut libc::c_void,
            last - first,
            libc::MADV_POPULATE_WRITE,
        )
    };
}

#[cfg(not(target_os = "linux"))]
fn populate_writable(_words: &mut [u64]) {}

/// Hints the CPU to fetch word `w` of `words` (never faults; see
/// [`crate::prefetch`]).
#[inline(always)]
pub(crate) fn prefetch_word(words: &[u64], w: usize) {
    crate::prefetch::prefetch(words.as_ptr().wrapping_add(w).cast::<u8>());
}
