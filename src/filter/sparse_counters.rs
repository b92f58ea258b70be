//! A counting filter's shape and its non-zero counters alone, in index
//! order: what a window that took few insertions holds.
//!
//! Why: the network mode's probe hands out its heavy-stage counters at
//! every window's close, and a collector decodes and merges them. On a
//! quiet link a shard-window holds a handful of packets, so 11 counters
//! each of 2^19 are set, and copying, walking and allocating the whole
//! array per window was most of both processes' time (`perf` on the probe
//! of a one-hour trace of 28 packets a second: 55 % in the counter coder's
//! two walks over the array, 15 % in the copy; BENCHMARKS.md,
//! twenty-seventh round). These cells cost what the window held.
//!
//! ```
//! use flowsieve::filter::{CounterWidth, CountingBloomFilter};
//! let mut f = CountingBloomFilter::new(1 << 12, 4, CounterWidth::W8);
//! for h in [3, 5, 3] { f.insert(h); }
//! // The hashes the filter took since it was clear locate every non-zero counter.
//! let cells = f.nonzero_of(&[3, 5, 3]).unwrap();
//! assert_eq!(cells.nonzero_counters(), f.nonzero_counters());
//! let mut dense = Vec::new();
//! f.for_each_nonzero(|i, v| dense.push((i, v)));
//! let mut sparse = Vec::new();
//! cells.for_each_nonzero(|i, v| sparse.push((i, v)));
//! assert_eq!(sparse, dense);
//! ```

use super::CounterWidth;

/// The non-zero counters of a counting filter of `m` counters in `k`
/// partitions, ascending by index, each with its value.
///
/// Every index is below `m` and every value between 1 and the width's
/// maximum: the constructors ([`super::CountingBloomFilter::nonzero_of`]
/// and the snapshot decoder) are the only ways to make one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SparseCounters {
    m: usize,
    k: usize,
    width: CounterWidth,
    /// `(index, value)`, indices strictly ascending. A counter is at most
    /// 16 bits wide; an index fits 32 bits (the constructors check).
    cells: Vec<(u32, u16)>,
}

impl SparseCounters {
    /// Cells of a filter of this shape, from cells the caller has put in
    /// strictly ascending index order below `m`, with values in
    /// `1..=width.max()`.
    pub(super) fn from_sorted(
        m: usize,
        k: usize,
        width: CounterWidth,
        cells: Vec<(u32, u16)>,
    ) -> SparseCounters {
        debug_assert!(cells.windows(2).all(|w| w[0].0 < w[1].0));
        debug_assert!(cells.iter().all(|&(i, v)| (i as usize) < m && v != 0));
        SparseCounters { m, k, width, cells }
    }

    /// Counters of the filter these cells are of.
    pub fn m(&self) -> usize {
        self.m
    }

    /// Its hash functions.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Its counter width.
    pub fn width(&self) -> CounterWidth {
        self.width
    }

    /// Counters that are non-zero.
    pub fn nonzero_counters(&self) -> u64 {
        self.cells.len() as u64
    }

    /// The value of counter `i` (0 when it is not among the cells or is
    /// outside the filter).
    pub fn counter(&self, i: usize) -> u64 {
        let Ok(i) = u32::try_from(i) else { return 0 };
        self.cells
            .binary_search_by_key(&i, |&(j, _)| j)
            .map_or(0, |at| u64::from(self.cells[at].1))
    }

    /// Calls `each(i, v)` for every non-zero counter, in increasing `i`.
    pub fn for_each_nonzero(&self, mut each: impl FnMut(usize, u64)) {
        for &(i, v) in &self.cells {
            each(i as usize, u64::from(v));
        }
    }
}
