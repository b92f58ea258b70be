//! The exact table's index: flow hash to entry position.

use crate::prefetch::prefetch;

/// The fewest slots a non-empty [`FlowIndex`] has.
const MIN_SLOTS: usize = 16;

/// The index holds at most `MAX_LOAD_NUM / MAX_LOAD_DEN` of its slots.
const MAX_LOAD_NUM: usize = 3;
const MAX_LOAD_DEN: usize = 4;

/// One slot: a flow hash and the position of its entry, or empty.
#[derive(Clone, Copy, Debug)]
struct Slot {
    hash: u64,
    /// The entry's position; [`EMPTY`] for an empty slot.
    entry: usize,
}

/// The `entry` of an empty slot (no table has that many entries).
const EMPTY: usize = usize::MAX;

/// Flow hash to entry position: open addressing with linear probing over
/// a power-of-two number of 16-byte slots, at most three-quarters full,
/// with no deletion (the table never forgets a flow).
///
/// Why not hashbrown's table, which this replaced: a hashbrown lookup
/// loads the hash's control group, and only then the slot it points to,
/// two dependent misses on a table larger than the caches, neither of
/// which the recorder could start early. Here the first slot of hash `h`
/// is `h mod slots`, computed without reading anything, so the recorder
/// prefetches a whole batch's first slots ([`FlowIndex::prefetch`]) before
/// it locates any of them. Four slots share a 64-byte line, and at the
/// load kept here a lookup of a known flow finds its slot within the first
/// two or three (Knuth's 1/2 (1 + 1/(1 - a)) at a = 3/4), so mostly in that
/// one line.
///
/// Several slots may hold the same hash (different flows whose 64-bit
/// hashes collide); [`FlowIndex::find`] tells them apart with the caller's
/// key compare, as the table did before. The entries' order, which the
/// report follows, is the entry vector's, not the index's: the layout here
/// changes no figure.
#[derive(Clone, Debug, Default)]
pub(super) struct FlowIndex {
    slots: Vec<Slot>,
    len: usize,
}

impl FlowIndex {
    /// An index with room for `flows` flows before it grows.
    pub(super) fn with_capacity(flows: usize) -> FlowIndex {
        let mut index = FlowIndex::default();
        if flows > 0 {
            index.resize(slots_for(flows));
        }
        index
    }

    /// The first slot `h` may occupy (the index is non-empty).
    #[inline]
    fn home(&self, h: u64) -> usize {
        (h as usize) & (self.slots.len() - 1)
    }

    /// The entry position of the first slot, from `h`'s first slot on,
    /// whose hash is `h` and for which `matches(entry)` holds.
    #[inline]
    pub(super) fn find(&self, h: u64, mut matches: impl FnMut(usize) -> bool) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        // Terminates: at most three-quarters of the slots are taken, so the
        // walk reaches an empty one.
        loop {
            let s = self.slots.get(i)?;
            if s.entry == EMPTY {
                return None;
            }
            if s.hash == h && matches(s.entry) {
                return Some(s.entry);
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `h` at entry position `entry` (a flow the index does not have).
    pub(super) fn insert(&mut self, h: u64, entry: usize) {
        if (self.len + 1) * MAX_LOAD_DEN > self.slots.len() * MAX_LOAD_NUM {
            self.resize(slots_for(self.len + 1).max(self.slots.len() * 2));
        }
        self.place(h, entry);
        self.len += 1;
    }

    /// Puts `h` in the first empty slot from its first slot on.
    fn place(&mut self, h: u64, entry: usize) {
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        while let Some(s) = self.slots.get_mut(i) {
            if s.entry == EMPTY {
                *s = Slot { hash: h, entry };
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Moves every slot into a fresh array of `size` slots (a power of two
    /// above the load bound).
    #[cold]
    fn resize(&mut self, size: usize) {
        let empty = Slot {
            hash: 0,
            entry: EMPTY,
        };
        let old = std::mem::replace(&mut self.slots, vec![empty; size]);
        for s in old.into_iter().filter(|s| s.entry != EMPTY) {
            self.place(s.hash, s.entry);
        }
    }

    /// Asks the CPU to fetch the first slot of `h`. Reads nothing, changes
    /// nothing.
    #[inline]
    pub(super) fn prefetch(&self, h: u64) {
        if !self.slots.is_empty() {
            prefetch(self.slots.as_ptr().wrapping_add(self.home(h)).cast::<u8>());
        }
    }
}

/// The slots for `flows` flows within the load bound: a power of two.
fn slots_for(flows: usize) -> usize {
    (flows.saturating_mul(MAX_LOAD_DEN) / MAX_LOAD_NUM + 1)
        .next_power_of_two()
        .max(MIN_SLOTS)
}
