//! Exact flow sets with a hard size limit, shed by hash sampling beyond it.
//!
//! The selective stage keeps the distinct flows of a cache window (the set
//! `S` its directory summarises) and of a query window. On a normal trace
//! these are a few thousand flows; under a flood of spoofed sources every
//! packet is a new flow and an unbounded set grows with the flood. A
//! [`CappedFlowSet`] holds at most `cap` flows. When one more would pass the
//! cap, it raises its *sampling level*: from then on it admits only flows
//! whose (re-mixed) hash has `level` leading zero bits, a fraction
//! `2^-level`, and drops the members that no longer qualify. This is
//! distinct sampling (Gibbons and Tirthapura's adaptive sampling): what is
//! kept is a uniform sample of the window's distinct flows, decided by the
//! hash alone, so the same flow is kept or shed consistently in every set
//! that uses the same level, and whatever the order of arrival.
//!
//! The level only grows within a window; [`CappedFlowSet::clear`] resets
//! it for the next. Nothing is dropped silently: the caller counts what was
//! shed and the report states it. Below the cap the set is exact and
//! nothing changes, which is why a normal trace's report is the same with
//! or without the cap.
//!
//! ```
//! use flowsieve::pipeline::CappedFlowSet;
//! let mut s: CappedFlowSet<()> = CappedFlowSet::new(1000);
//! for h in 0..100_000u64 {
//!     s.insert(h.wrapping_mul(0x9e37_79b9_7f4a_7c15), ());
//! }
//! assert!(s.len() <= 1000);
//! assert!(s.level() >= 7); // 100 000 / 2^7 < 1000
//! ```

use super::flow_set::FlowSet;
use crate::hash::fmix64;

/// The salt that makes the sampling bits independent of the bits that
/// chose the shard and the filter positions.
const SAMPLING_SALT: u64 = 0x5851_f42d_4c95_7f2d;

/// What [`CappedFlowSet::insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A new member.
    Inserted,
    /// Already a member.
    Present,
    /// Not admitted at the current sampling level.
    Shed,
}

/// A flow-hash map of at most `cap` entries; see the module docs.
#[derive(Clone, Debug)]
pub struct CappedFlowSet<V> {
    map: FlowSet<V>,
    cap: usize,
    level: u32,
    /// Members dropped when the level rose, this window.
    evicted: u64,
}

impl<V: Copy + Default> CappedFlowSet<V> {
    /// An empty set of at most `cap` flows (at least 1).
    pub fn new(cap: usize) -> CappedFlowSet<V> {
        CappedFlowSet {
            map: FlowSet::default(),
            cap: cap.max(1),
            level: 0,
            evicted: 0,
        }
    }

    /// True when flow hash `h` is admitted at the current level.
    #[inline]
    pub fn admits(&self, h: u64) -> bool {
        admitted_at(h, self.level)
    }

    /// Inserts `h` (with `value` if new), raising the level first when the
    /// set is full.
    // Always inlined: the prior coordinator calls it for most packets of a
    // cache window, and as a call it was 45 instructions a time on the
    // source thread (BENCHMARKS.md, twenty-first round).
    #[inline(always)]
    pub fn insert(&mut self, h: u64, value: V) -> Admission {
        if !self.admits(h) {
            return Admission::Shed;
        }
        if self.map.contains(h) {
            return Admission::Present;
        }
        if self.map.len() >= self.cap && !self.make_room_for(h) {
            return Admission::Shed;
        }
        self.map.insert(h, value);
        Admission::Inserted
    }

    /// Raises the level until the set is below its cap, shedding the
    /// members that no longer qualify; false if `h` itself no longer
    /// qualifies. Apart from [`CappedFlowSet::insert`]: it runs only in a
    /// flood, and kept inline its loop made `insert` too large to inline,
    /// so every insertion on a normal trace paid a call (the selective
    /// stage's prior coordinator inserts most packets on the source
    /// thread; BENCHMARKS.md, twenty-first round).
    #[cold]
    #[inline(never)]
    fn make_room_for(&mut self, h: u64) -> bool {
        while self.map.len() >= self.cap {
            self.level += 1;
            let level = self.level;
            self.evicted += self.map.retain(|k, _| admitted_at(k, level)) as u64;
            if !admitted_at(h, level) {
                return false;
            }
        }
        true
    }

    /// True when `h` is a member.
    #[inline]
    pub fn contains(&self, h: u64) -> bool {
        self.map.contains(h)
    }

    /// Asks the CPU to fetch what an insertion or lookup of `h` reads
    /// ([`FlowSet::prefetch`]). Changes nothing.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        self.map.prefetch(h);
    }

    /// Members.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The sampling level: members are a `2^-level` sample of the window's
    /// distinct flows (0: all of them).
    pub fn level(&self) -> u32 {
        self.level
    }

    /// Members dropped when the level rose since the last clear.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// The members and their values, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.map.iter()
    }

    /// Empties the set and resets the level, for a new window. The table's
    /// allocation is kept ([`FlowSet::bytes_for`] `cap` at most).
    pub fn clear(&mut self) {
        self.map.clear();
        self.level = 0;
        self.evicted = 0;
    }
}

/// True when `h` has `level` leading zero bits after re-mixing.
#[inline]
pub fn admitted_at(h: u64, level: u32) -> bool {
    level == 0 || (level < 64 && fmix64(h ^ SAMPLING_SALT) >> (64 - level) == 0)
}
