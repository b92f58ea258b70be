//! A lock-free counting Bloom filter for sharded pipelines: the counters of
//! [`super::CountingBloomFilter`] in `AtomicU64` words, in two modes.
//!
//! - **Single writer, many readers**: [`AtomicCountingBloomFilter::single_writer`]
//!   returns the only [`CbfWriter`] (not `Clone`, so exactly one thread
//!   writes) and a cloneable [`CbfReader`]. The writer updates words with
//!   plain relaxed loads and stores; a reader may see a count one increment
//!   old, never a torn counter (a counter lives inside one word).
//! - **Many writers**: [`AtomicCountingBloomFilter::insert`] on a shared
//!   filter updates each counter with a compare-and-swap on its word, so
//!   concurrent increments are never lost and a counter saturates exactly at
//!   its maximum, whatever the interleaving. The estimate an insert
//!   *returns* is the minimum of the values it wrote, and is not
//!   linearisable: two concurrent inserts of one key can both return 1
//!   (each was first on one of the key's counters and second on the
//!   other), though the filter then holds 2. Judge a threshold crossing by
//!   [`Counters::estimate`] after the inserts, or use the single-writer
//!   mode, as the pipeline does (each shard owns its filter). tests/loom.rs
//!   checks all three statements under every interleaving.
//!
//! No mutex or read-write lock anywhere.

use super::{CounterWidth, Counters};
// The atomics and Arc come from the parent's `sync`: std's here, loom's
// where tests/loom.rs compiles this file again under a root of its own,
// so that loom explores every interleaving of this very source.
use super::sync::{Arc, AtomicU64, Relaxed};
use crate::hash::PartitionedIndexer;

/// The shared counters.
#[derive(Debug)]
pub struct AtomicCountingBloomFilter {
    words: Vec<AtomicU64>,
    width: CounterWidth,
    indexer: PartitionedIndexer,
}

/// The one writer of a single-writer filter.
#[derive(Debug)]
pub struct CbfWriter {
    filter: Arc<AtomicCountingBloomFilter>,
}

/// A reader of a single-writer filter.
#[derive(Clone, Debug)]
pub struct CbfReader {
    filter: Arc<AtomicCountingBloomFilter>,
}

impl AtomicCountingBloomFilter {
    /// `m` counters in `k` partitions of `width`-bit counters, all 0.
    pub fn new(m: usize, k: usize, width: CounterWidth) -> AtomicCountingBloomFilter {
        let indexer = PartitionedIndexer::new(m.max(1), k);
        let counters = indexer.partition_len() * indexer.k();
        AtomicCountingBloomFilter {
            words: (0..counters.div_ceil(width.per_word()))
                .map(|_| AtomicU64::new(0))
                .collect(),
            width,
            indexer,
        }
    }

    /// A single-writer filter: its writer and a reader.
    pub fn single_writer(m: usize, k: usize, width: CounterWidth) -> (CbfWriter, CbfReader) {
        let filter = Arc::new(AtomicCountingBloomFilter::new(m, k, width));
        (
            CbfWriter {
                filter: filter.clone(),
            },
            CbfReader { filter },
        )
    }

    /// Counters in use.
    pub fn m(&self) -> usize {
        self.indexer.partition_len() * self.indexer.k()
    }

    /// Hash functions.
    pub fn k(&self) -> usize {
        self.indexer.k()
    }

    /// Many-writer increment: a CAS loop per counter; saturation is exact
    /// under any interleaving. Returns the new estimate.
    #[inline]
    pub fn insert(&self, h: u64) -> u64 {
        let max = self.width.max();
        let mut est = u64::MAX;
        for i in 0..self.k() {
            let (w, s) = self.width.locate(self.indexer.index(h, i));
            let Some(word) = self.words.get(w) else {
                continue;
            };
            let mut v = 0;
            let _ = word.fetch_update(Relaxed, Relaxed, |x| {
                let c = (x >> s) & max;
                v = c;
                (c < max).then(|| {
                    v = c + 1;
                    x + (1 << s)
                })
            });
            est = est.min(v);
        }
        est
    }

    /// All counters to 0.
    pub fn clear(&self) {
        for w in &self.words {
            w.store(0, Relaxed);
        }
    }
}

impl CbfWriter {
    /// Single-writer increment: relaxed load, add, relaxed store per
    /// counter (no read-modify-write needed with one writer). Returns the
    /// new estimate.
    #[inline]
    pub fn insert(&mut self, h: u64) -> u64 {
        let f = &*self.filter;
        let max = f.width.max();
        let mut est = u64::MAX;
        for i in 0..f.k() {
            let (w, s) = f.width.locate(f.indexer.index(h, i));
            let Some(word) = f.words.get(w) else { continue };
            let x = word.load(Relaxed);
            let c = (x >> s) & max;
            let v = if c < max {
                word.store(x + (1 << s), Relaxed);
                c + 1
            } else {
                c
            };
            est = est.min(v);
        }
        est
    }

    /// All counters to 0 (a window boundary).
    pub fn clear(&mut self) {
        self.filter.clear();
    }

    /// A reader of this filter.
    pub fn reader(&self) -> CbfReader {
        CbfReader {
            filter: self.filter.clone(),
        }
    }
}

impl Counters for AtomicCountingBloomFilter {
    fn hashes(&self) -> usize {
        self.indexer.k()
    }
    #[inline]
    fn counter(&self, i: usize) -> u64 {
        let (w, s) = self.width.locate(i);
        self.words
            .get(w)
            .map_or(0, |x| (x.load(Relaxed) >> s) & self.width.max())
    }
    #[inline]
    fn counter_index(&self, h: u64, j: usize) -> usize {
        self.indexer.index(h, j)
    }
}

/// A reader sees the shared counters (relaxed loads).
impl Counters for CbfReader {
    fn hashes(&self) -> usize {
        self.filter.hashes()
    }
    #[inline]
    fn counter(&self, i: usize) -> u64 {
        self.filter.counter(i)
    }
    #[inline]
    fn counter_index(&self, h: u64, j: usize) -> usize {
        self.filter.counter_index(h, j)
    }
}
