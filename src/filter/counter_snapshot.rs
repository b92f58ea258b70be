//! A counting filter's counters as a window hands them out and a snapshot
//! carries them: the whole array, or, when few are set, the non-zero cells
//! alone ([`SparseCounters`]).
//!
//! Both forms code to the same bytes ([`CounterSnapshot::compress`]) and
//! compare equal when they hold the same counters, so which one a probe
//! made or a collector decoded never shows in a result: it only decides
//! what the window costs.
//!
//! ```
//! use flowsieve::filter::{
//!     CounterSnapshot, CounterWidth, Counters, CountingBloomFilter, compress_counting,
//! };
//! let mut f = CountingBloomFilter::new(1 << 12, 4, CounterWidth::W8);
//! for h in [3, 5, 3] { f.insert(h); }
//! let first_of_3 = f.counter_index(3, 0);
//! let sparse = CounterSnapshot::Sparse(f.nonzero_of(&[3, 5]).unwrap());
//! let dense = CounterSnapshot::from(f);
//! assert_eq!(sparse, dense);
//! assert_eq!(sparse.compress(), dense.compress());
//! assert_eq!(sparse.compress(), compress_counting(&dense.clone().into_dense()));
//! assert_eq!(sparse.counter(first_of_3), dense.counter(first_of_3));
//! ```

use super::{CounterWidth, Counters, CountingBloomFilter, SparseCounters};

/// A counting filter's counters, whole or as their non-zero cells.
#[derive(Clone, Debug)]
pub enum CounterSnapshot {
    /// The whole filter.
    Dense(CountingBloomFilter),
    /// The non-zero counters alone.
    Sparse(SparseCounters),
}

impl From<CountingBloomFilter> for CounterSnapshot {
    fn from(f: CountingBloomFilter) -> CounterSnapshot {
        CounterSnapshot::Dense(f)
    }
}

impl CounterSnapshot {
    /// Counters of the filter.
    pub fn m(&self) -> usize {
        match self {
            CounterSnapshot::Dense(f) => f.m(),
            CounterSnapshot::Sparse(s) => s.m(),
        }
    }

    /// Hash functions.
    pub fn k(&self) -> usize {
        match self {
            CounterSnapshot::Dense(f) => f.k(),
            CounterSnapshot::Sparse(s) => s.k(),
        }
    }

    /// Counter width.
    pub fn width(&self) -> CounterWidth {
        match self {
            CounterSnapshot::Dense(f) => f.width(),
            CounterSnapshot::Sparse(s) => s.width(),
        }
    }

    /// The value of counter `i` (0 outside the filter).
    pub fn counter(&self, i: usize) -> u64 {
        match self {
            CounterSnapshot::Dense(f) => Counters::counter(f, i),
            CounterSnapshot::Sparse(s) => s.counter(i),
        }
    }

    /// Counters that are non-zero.
    pub fn nonzero_counters(&self) -> u64 {
        match self {
            CounterSnapshot::Dense(f) => f.nonzero_counters(),
            CounterSnapshot::Sparse(s) => s.nonzero_counters(),
        }
    }

    /// Non-zero counters, counted up to `cap`: `min(nonzero_counters(),
    /// cap)`, with a whole filter's walk stopped once `cap` are found.
    ///
    /// ```
    /// use flowsieve::filter::{CounterSnapshot, CounterWidth, CountingBloomFilter};
    /// let mut f = CountingBloomFilter::new(1 << 12, 4, CounterWidth::W8);
    /// f.insert(7);
    /// let s = CounterSnapshot::from(f);
    /// assert_eq!(s.nonzero_counters_up_to(100), 4);
    /// assert_eq!(s.nonzero_counters_up_to(3), 3);
    /// ```
    pub fn nonzero_counters_up_to(&self, cap: u64) -> u64 {
        match self {
            CounterSnapshot::Dense(f) => f.nonzero_counters_up_to(cap),
            CounterSnapshot::Sparse(s) => s.nonzero_counters().min(cap),
        }
    }

    /// Calls `each(i, v)` for every non-zero counter, in increasing `i`.
    pub fn for_each_nonzero(&self, each: impl FnMut(usize, u64)) {
        match self {
            CounterSnapshot::Dense(f) => f.for_each_nonzero(each),
            CounterSnapshot::Sparse(s) => s.for_each_nonzero(each),
        }
    }

    /// The counters' `FSCC` snapshot ([`super::compress_counting`] of the
    /// concrete form: the same bytes from either).
    pub fn compress(&self) -> Vec<u8> {
        match self {
            CounterSnapshot::Dense(f) => super::compress_counting(f),
            CounterSnapshot::Sparse(s) => super::compress_counting(s),
        }
    }

    /// The whole filter (a sparse snapshot's counters written into a new
    /// one).
    pub fn into_dense(self) -> CountingBloomFilter {
        match self {
            CounterSnapshot::Dense(f) => f,
            CounterSnapshot::Sparse(s) => {
                let mut f = CountingBloomFilter::new(s.m(), s.k(), s.width());
                s.for_each_nonzero(|i, v| f.set_counter(i, v));
                f
            }
        }
    }
}

/// Equal when the shape and every counter are: the form does not count.
impl PartialEq for CounterSnapshot {
    fn eq(&self, other: &CounterSnapshot) -> bool {
        if (self.m(), self.k(), self.width()) != (other.m(), other.k(), other.width()) {
            return false;
        }
        if let (CounterSnapshot::Sparse(a), CounterSnapshot::Sparse(b)) = (self, other) {
            return a == b;
        }
        let mut a = Vec::new();
        self.for_each_nonzero(|i, v| a.push((i, v)));
        let mut b = Vec::with_capacity(a.len());
        other.for_each_nonzero(|i, v| b.push((i, v)));
        a == b
    }
}

/// Estimates and counter products read from a snapshot as from the filter
/// it was taken of: the same partitioned indexing for its `m` and `k`.
impl Counters for CounterSnapshot {
    fn hashes(&self) -> usize {
        self.k()
    }

    fn counter(&self, i: usize) -> u64 {
        CounterSnapshot::counter(self, i)
    }

    fn counter_index(&self, h: u64, j: usize) -> usize {
        match self {
            CounterSnapshot::Dense(f) => f.counter_index(h, j),
            CounterSnapshot::Sparse(s) => {
                crate::hash::PartitionedIndexer::new(s.m(), s.k()).index(h, j)
            }
        }
    }
}
