//! A shard-window merge's summed counters: a map while few cells are
//! non-zero, a dense array after.
//!
//! Why: a collector holds a merge for every window it has digests of and
//! cannot write yet, hundreds of them on a backlog. At the default sizes a
//! dense merge is 2^19 four-byte cells and as many saturation flags, and a
//! window that held a handful of packets still wrote a page of cells for
//! each of its non-zero counters (k = 11 pages a flow). The map holds such
//! a window in a few hundred bytes. Past `m / 32` non-zero cells the dense
//! array is smaller, and the merge moves to it.

use super::merge::checksum_cell;
use crate::filter::CounterSnapshot;
use crate::hash::fmix64;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The map holds at most `m / SPARSE_SHARE` cells.
const SPARSE_SHARE: usize = 32;

/// The map's hasher: a cell index through [`fmix64`], not the standard
/// library's SipHash.
///
/// Why: the map needs no protection from crafted keys (the indices come
/// from the probes' own filters, and colliding ones would only lengthen a
/// lookup), and it is on a collector's hot path: with SipHash, and the
/// table grown from empty as cells came, `perf` put 6 % of a digest's
/// decode and merge at 1,000 packets in the growth alone, and the two
/// changes together took `cargo bench --bench network --
/// decode+merge/1000` from 290-306 µs to 241-260 µs (BENCHMARKS.md,
/// twenty-eighth round). The result does not depend on the map's order:
/// [`MergedCells::summary`] combines the cells by XOR and a count.
#[derive(Default)]
struct CellIndexHasher(u64);

impl Hasher for CellIndexHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u32` is expected; fold anything else in.
        for &b in bytes {
            self.0 = fmix64(self.0 ^ u64::from(b));
        }
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.0 = fmix64(u64::from(i));
    }
}

/// Cells per bit of the dense form's record of the cells it added to:
/// 1,024 `u32` cells are one 4 KiB page. [`MergedCells::summary`] reads
/// only those: reading all 2.5 MiB cost a page fault for each page never
/// written (the kernel's zero page mapped in).
const TRACKED_CELLS: usize = 1024;

/// Summed counters of `m` cells, each also flagged when a digest's own
/// counter was saturated there.
#[derive(Clone, Debug)]
pub(super) struct MergedCells {
    m: usize,
    form: Form,
}

#[derive(Clone, Debug)]
enum Form {
    /// Non-zero cells: index to sum and saturation flag.
    Sparse(HashMap<u32, (u32, bool), BuildHasherDefault<CellIndexHasher>>),
    /// Every cell, with one bit per [`TRACKED_CELLS`] cells set where a
    /// digest added.
    Dense {
        cells: Vec<u32>,
        saturated: Vec<bool>,
        touched: Vec<u64>,
    },
}

impl MergedCells {
    /// `m` cells, all zero.
    pub(super) fn new(m: usize) -> MergedCells {
        MergedCells {
            m,
            form: Form::Sparse(HashMap::default()),
        }
    }

    /// Adds `v` (non-zero) to cell `i`, saturating at `u32::MAX`, and flags
    /// it when the digest's counter was `saturated`. A cell past the last
    /// is ignored.
    #[inline]
    pub(super) fn add(&mut self, i: usize, v: u32, saturated: bool) {
        if i >= self.m {
            return;
        }
        match &mut self.form {
            Form::Sparse(map) => {
                let e = map.entry(i as u32).or_insert((0, false));
                e.0 = e.0.saturating_add(v);
                e.1 |= saturated;
                if map.len() > self.m / SPARSE_SHARE {
                    self.densify();
                }
            }
            Form::Dense {
                cells,
                saturated: flags,
                touched,
            } => {
                cells[i] = cells[i].saturating_add(v);
                // Written only when set: a page of flags no counter
                // saturated stays unwritten, and so takes no memory.
                if saturated {
                    flags[i] = true;
                }
                let block = i / TRACKED_CELLS;
                touched[block / 64] |= 1 << (block % 64);
            }
        }
    }

    /// Makes room for the non-zero cells of `counters`, which are about to
    /// be added: moves to the dense form first when the map would pass its
    /// share, rather than filling the map only to copy it; otherwise the
    /// map makes room for them at once, not by doubling (and rehashing) as
    /// they come.
    ///
    /// The cells are counted only while the map holds them, and only as
    /// far as the decision needs (one past the map's room): a dense merge
    /// no longer walks every digest's counters once to count them and
    /// again to add them, and the first dense digest of a window stops
    /// counting at `m / 32`.
    pub(super) fn expect(&mut self, counters: &CounterSnapshot) {
        if let Form::Sparse(map) = &mut self.form {
            let room = (self.m / SPARSE_SHARE).saturating_sub(map.len());
            let n = counters.nonzero_counters_up_to(room as u64 + 1) as usize;
            if n > room {
                self.densify();
            } else {
                map.reserve(n);
            }
        }
    }

    fn densify(&mut self) {
        let Form::Sparse(map) = &self.form else {
            return;
        };
        let mut cells = vec![0u32; self.m];
        let mut saturated = vec![false; self.m];
        let mut touched = vec![0u64; self.m.div_ceil(TRACKED_CELLS).div_ceil(64)];
        for (&i, &(v, sat)) in map {
            let i = i as usize;
            cells[i] = v;
            if sat {
                saturated[i] = true;
            }
            let block = i / TRACKED_CELLS;
            touched[block / 64] |= 1 << (block % 64);
        }
        self.form = Form::Dense {
            cells,
            saturated,
            touched,
        };
    }

    /// Cell `i` (0 past the last).
    #[inline]
    pub(super) fn get(&self, i: usize) -> u32 {
        match &self.form {
            Form::Sparse(map) => map.get(&(i as u32)).map_or(0, |&(v, _)| v),
            Form::Dense { cells, .. } => cells.get(i).copied().unwrap_or(0),
        }
    }

    /// Calls `each(i, sum, saturated)` for every cell a digest added to
    /// (and, in the dense form, for zero cells beside them), in no set
    /// order.
    fn for_each_touched(&self, mut each: impl FnMut(usize, u32, bool)) {
        match &self.form {
            Form::Sparse(map) => {
                for (&i, &(v, sat)) in map {
                    each(i as usize, v, sat);
                }
            }
            Form::Dense {
                cells,
                saturated,
                touched,
            } => {
                for (n, &w) in touched.iter().enumerate() {
                    let mut w = w;
                    while w != 0 {
                        let block = n * 64 + w.trailing_zeros() as usize;
                        w &= w - 1;
                        let end = ((block + 1) * TRACKED_CELLS).min(self.m);
                        for i in block * TRACKED_CELLS..end {
                            each(i, cells[i], saturated[i]);
                        }
                    }
                }
            }
        }
    }

    /// [`super::cells_checksum`] of the cells, and how many are flagged
    /// saturated: one walk for both (each used to walk the touched cells
    /// on its own).
    pub(super) fn summary(&self) -> (u64, u64) {
        let mut h = self.m as u64;
        let mut saturated = 0;
        self.for_each_touched(|i, v, sat| {
            h = checksum_cell(h, i, u64::from(v));
            saturated += u64::from(sat);
        });
        (fmix64(h), saturated)
    }
}
