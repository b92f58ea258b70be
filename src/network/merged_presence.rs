//! A shard-window merge's presence bits: the set positions while few are
//! set, the whole filter after.
//!
//! Why: a collector holds a merge for every window it has digests of and
//! cannot write yet, thousands of them on a backlog. At the default sizes
//! a shard's presence filter is 2^17 bits, 16 KiB, and each merge held a
//! copy of its first digest's filter however few flows the window saw.
//! Draining an hour's quiet backlog (26,595 shard-windows of 3.8 packets
//! on average), those copies were 54 MB of the collector's 67 MB heap at
//! its peak (`heaptrack flowsieve collect …`, BENCHMARKS.md, twenty-eighth
//! round). A window of a few flows sets a few dozen bits, which its
//! positions hold in a few hundred bytes. Past `m / 32` set bits the
//! positions (four bytes each) would outgrow the filter, and the merge
//! moves to it.
//!
//! The merged filter is the same in either form: the bits OR-ed over the
//! digests. [`MergedPresence::to_filter`] builds it whole for the result,
//! so the result's snapshot, its count of set bits and its estimate are
//! computed exactly as before.

use crate::filter::{BitArray, BloomFilter};

/// The positions are kept while at most `m / SPARSE_SHARE` bits are set.
const SPARSE_SHARE: usize = 32;

/// The OR of the digests' presence filters of one shard-window.
#[derive(Clone, Debug)]
pub(super) struct MergedPresence {
    m: usize,
    k: usize,
    form: Form,
}

#[derive(Clone, Debug)]
enum Form {
    /// The set bits' positions, increasing.
    Sparse(Vec<u32>),
    /// The whole filter.
    Dense(BloomFilter),
}

impl MergedPresence {
    /// The merge of one digest's filter.
    pub(super) fn new(first: &BloomFilter) -> MergedPresence {
        let (m, k) = (first.m(), first.k());
        let form = if few(first.count_ones(), m) {
            Form::Sparse(set_positions(first).collect())
        } else {
            Form::Dense(first.clone())
        };
        MergedPresence { m, k, form }
    }

    /// Bits of the filter.
    pub(super) fn m(&self) -> usize {
        self.m
    }

    /// Hash functions of the filter.
    pub(super) fn k(&self) -> usize {
        self.k
    }

    /// ORs in another digest's filter, of the same `m` and `k` (the caller
    /// checks the shape; a filter of another size is ignored).
    pub(super) fn union(&mut self, other: &BloomFilter) {
        if other.m() != self.m {
            return;
        }
        match &mut self.form {
            Form::Dense(f) => {
                let _ = f.union(other);
            }
            Form::Sparse(positions) => {
                // Merged as two increasing lists while both are few; the
                // union stays sparse while it is few too.
                let merged = few(other.count_ones(), self.m).then(|| {
                    let mut merged = Vec::with_capacity(positions.len());
                    let mut mine = positions.iter().copied().peekable();
                    for p in set_positions(other) {
                        while let Some(&q) = mine.peek()
                            && q < p
                        {
                            merged.push(q);
                            mine.next();
                        }
                        if mine.peek() == Some(&p) {
                            mine.next();
                        }
                        merged.push(p);
                    }
                    merged.extend(mine);
                    merged
                });
                match merged {
                    Some(merged) if few(merged.len() as u64, self.m) => *positions = merged,
                    _ => {
                        let mut whole = self.to_filter();
                        let _ = whole.union(other);
                        self.form = Form::Dense(whole);
                    }
                }
            }
        }
    }

    /// The merged filter, whole.
    pub(super) fn to_filter(&self) -> BloomFilter {
        match &self.form {
            Form::Dense(f) => f.clone(),
            Form::Sparse(positions) => {
                let mut bits = BitArray::new(self.m);
                for &p in positions {
                    bits.set(p as usize);
                }
                BloomFilter::from_bits(bits, self.k)
            }
        }
    }
}

/// Whether `ones` set bits of `m` are few enough to be kept as positions
/// (whose indices must fit 32 bits).
fn few(ones: u64, m: usize) -> bool {
    u32::try_from(m).is_ok() && ones <= (m / SPARSE_SHARE) as u64
}

/// The positions of a filter's set bits, increasing (below `m`, which
/// [`few`] checked fits 32 bits).
fn set_positions(f: &BloomFilter) -> impl Iterator<Item = u32> + '_ {
    f.bits().ones().map(|at| at as u32)
}
