//! The B_h counting Bloom filter (000 §VI, after Einziger and Friedman's
//! B_h-CBF): each of the `k` entries an element hashes to keeps a
//! fixed-increment counter `c` and a variable-increment counter `a`, to
//! which the element adds a value chosen by a second hash from a B_h
//! sequence `D`. In a B_h sequence all sums of up to `h` elements (as
//! multisets of each size) are distinct, so while `c <= h` the multiset of
//! addends behind `a` is unique and the element's own value's multiplicity
//! `y` can be read back: a sharper count than `c`.
//!
//! [`BhCountingFilter::delta`] is Theorem 5's `delta` (`ell * y` for
//! decodable entries, `c` otherwise) and [`BhCountingFilter::posterior`]
//! its membership probability. No false negatives: a member's own value is
//! always among the addends, so `y >= 1` whenever `c <= h`.
//!
//! ```
//! use flowsieve::filter::BhSequence;
//! // 000 Fig. 6: D = {1, 2, 4} is a B_2 sequence.
//! let d = BhSequence::new(vec![1, 2, 4], 2).unwrap();
//! // a = 8 from c = 2 addends is 4 + 4: the multiplicity of 4 is 2.
//! assert_eq!(d.multiplicity(8, 2, 4), Some(2));
//! // a = 3 from 2 addends is 1 + 2.
//! assert_eq!(d.multiplicity(3, 2, 1), Some(1));
//! ```

use crate::hash::{PartitionedIndexer, fmix64};
use crate::model::paradox;

/// A B_h sequence: distinct positive values whose multisets of each size
/// up to `h` have distinct sums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BhSequence {
    values: Vec<u64>,
    h: u32,
}

/// Why a sequence is not B_h.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BhSequenceError {
    #[error("a B_h sequence needs at least one value and h >= 1")]
    /// The sequence is empty.
    Empty,
    #[error("two multisets of {size} values share the sum {sum}")]
    /// Two subsets share a sum.
    Collision {
        /// The subset size.
        size: u32,
        /// The colliding sum.
        sum: u64,
    },
}

/// All multisets of `size` values of `d` (as count vectors), visited.
fn for_each_multiset(len: usize, size: u32, f: &mut impl FnMut(&[u32])) {
    fn go(counts: &mut Vec<u32>, i: usize, left: u32, f: &mut impl FnMut(&[u32])) {
        if i + 1 == counts.len() {
            counts[i] = left;
            f(counts);
            counts[i] = 0;
            return;
        }
        for c in 0..=left {
            counts[i] = c;
            go(counts, i + 1, left - c, f);
        }
        counts[i] = 0;
    }
    if len > 0 {
        go(&mut vec![0; len], 0, size, f);
    }
}

impl BhSequence {
    /// Validates a B_h sequence (exhaustively: keep `len` and `h` small).
    pub fn new(values: Vec<u64>, h: u32) -> Result<BhSequence, BhSequenceError> {
        if values.is_empty() || h == 0 || values.contains(&0) {
            return Err(BhSequenceError::Empty);
        }
        for size in 1..=h {
            let mut seen = std::collections::HashSet::new();
            let mut clash = None;
            for_each_multiset(values.len(), size, &mut |counts| {
                let sum: u64 = counts
                    .iter()
                    .zip(&values)
                    .map(|(&c, &v)| u64::from(c) * v)
                    .sum();
                if !seen.insert(sum) && clash.is_none() {
                    clash = Some(sum);
                }
            });
            if let Some(sum) = clash {
                return Err(BhSequenceError::Collision { size, sum });
            }
        }
        Ok(BhSequence { values, h })
    }

    /// The sequence `1, h+1, (h+1)^2, ...` of `ell` values: B_h because a
    /// multiset of at most `h` of them is a base-`(h+1)` number.
    pub fn powers(ell: usize, h: u32) -> BhSequence {
        let base = u64::from(h) + 1;
        BhSequence {
            values: (0..ell as u32).map(|i| base.pow(i)).collect(),
            h: h.max(1),
        }
    }

    /// `ell`, the number of values.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Never empty once built.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `h`.
    pub fn h(&self) -> u32 {
        self.h
    }

    /// Value `i`.
    pub fn value(&self, i: usize) -> u64 {
        self.values[i % self.values.len()]
    }

    /// The multiplicity of `v` in the unique multiset of `c` values summing
    /// to `a`; `None` when `c > h` (not decodable) or no multiset matches
    /// (counters that a non-member never touched consistently).
    pub fn multiplicity(&self, a: u64, c: u64, v: u64) -> Option<u64> {
        if c > u64::from(self.h) {
            return None;
        }
        let idx = self.values.iter().position(|&x| x == v)?;
        let mut found = None;
        for_each_multiset(self.values.len(), c as u32, &mut |counts| {
            if found.is_none() {
                let sum: u64 = counts
                    .iter()
                    .zip(&self.values)
                    .map(|(&n, &x)| u64::from(n) * x)
                    .sum();
                if sum == a {
                    found = Some(u64::from(counts[idx]));
                }
            }
        });
        found
    }
}

/// The B_h counting Bloom filter; see the module documentation.
#[derive(Clone, Debug)]
pub struct BhCountingFilter {
    fixed: Vec<u32>,
    variable: Vec<u64>,
    indexer: PartitionedIndexer,
    seq: BhSequence,
    inserted: u64,
}

/// Seed of the second hash set G (which value of D an element adds).
const G_SEED: u64 = 0x6a09_e667_f3bc_c908;

impl BhCountingFilter {
    /// `m` entries in `k` partitions, increments from `seq`.
    pub fn new(m: usize, k: usize, seq: BhSequence) -> BhCountingFilter {
        let indexer = PartitionedIndexer::new(m.max(1), k);
        let len = indexer.partition_len() * indexer.k();
        BhCountingFilter {
            fixed: vec![0; len],
            variable: vec![0; len],
            indexer,
            seq,
            inserted: 0,
        }
    }

    /// The value of `D` the element adds in its `j`-th entry (hash set G).
    fn increment(&self, h: u64, j: usize) -> u64 {
        let g = fmix64(h ^ G_SEED ^ (j as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        self.seq
            .value(((u128::from(g) * self.seq.len() as u128) >> 64) as usize)
    }

    /// Inserts an element.
    pub fn insert(&mut self, h: u64) {
        for j in 0..self.indexer.k() {
            let e = self.indexer.index(h, j);
            self.fixed[e] = self.fixed[e].saturating_add(1);
            self.variable[e] = self.variable[e].saturating_add(self.increment(h, j));
        }
        self.inserted += 1;
    }

    /// Theorem 5's `delta` for an element: 0 if some entry proves it absent
    /// (a zero counter, or an entry decodable without its value).
    pub fn delta(&self, h: u64) -> f64 {
        let ell = self.seq.len() as u64;
        let mut delta = 1.0;
        for j in 0..self.indexer.k() {
            let e = self.indexer.index(h, j);
            let c = u64::from(self.fixed[e]);
            if c == 0 {
                return 0.0;
            }
            match self
                .seq
                .multiplicity(self.variable[e], c, self.increment(h, j))
            {
                Some(0) => return 0.0,
                Some(y) => delta *= (ell * y) as f64,
                None if c <= u64::from(self.seq.h()) => return 0.0,
                None => delta *= c as f64,
            }
        }
        delta
    }

    /// Theorem 5's membership probability for an element of the given prior.
    pub fn posterior(&self, h: u64, prior: f64) -> f64 {
        paradox::bh_posterior(
            self.delta(h),
            self.indexer.k() as u32,
            prior,
            self.m() as u64,
            self.inserted.max(1),
        )
    }

    /// Entries.
    pub fn m(&self) -> usize {
        self.fixed.len()
    }

    /// Elements inserted.
    pub fn inserted(&self) -> u64 {
        self.inserted
    }
}
