//! A map from flow hashes whose slot for a hash is known before any load,
//! so that a stage can have it fetched records ahead.

use crate::prefetch::prefetch;

/// The fewest slots a non-empty [`FlowSlots`] has.
const MIN_SLOTS: usize = 16;

/// A map from 64-bit flow hashes to `V`: open addressing with linear
/// probing over a power-of-two number of slots, kept at most half full.
///
/// Why not the stages' `FlowMap` (hashbrown's table): a hashbrown lookup
/// starts by loading the hash's control group, and only that load says
/// where the entry is, so the best a stage could do ahead of time was to
/// *load* the control bytes a couple of records early, a miss that stalls
/// all the same. Here the first slot of hash `h` is `h mod slots`, an
/// address computed without reading anything, so
/// [`FlowSlots::prefetch`] is a true prefetch, and at half load a lookup
/// finds its hash in the first slot or the next one, in the same 64-byte
/// line most of the time.
///
/// The price is the order: iteration follows the slots, not hashbrown's
/// buckets. A stage whose figures fold floating-point values in iteration
/// order must keep `FlowMap`; one that only looks values up (the
/// new-flow stage's last-seen times) can use this.
///
/// The flow hash is already a strong mix (the stages' filters use its bits
/// as they are), and the shard is chosen from a second mix of it, so the
/// low bits used here are uniform within a shard.
///
/// ```
/// use flowsieve::pipeline::FlowSlots;
/// let mut m: FlowSlots<u32> = FlowSlots::default();
/// let (v, new) = m.get_or_insert_with(7, || 1);
/// assert!(new);
/// *v += 1;
/// assert_eq!(m.get_or_insert_with(7, || 0), (&mut 2, false));
/// assert_eq!((m.len(), m.get(8)), (1, None));
/// m.clear();
/// assert!(m.is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct FlowSlots<V> {
    slots: Vec<Option<(u64, V)>>,
    len: usize,
}

impl<V> Default for FlowSlots<V> {
    fn default() -> FlowSlots<V> {
        FlowSlots {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<V> FlowSlots<V> {
    /// The first slot `h` may occupy (the table is non-empty).
    #[inline]
    fn home(&self, h: u64) -> usize {
        (h as usize) & (self.slots.len() - 1)
    }

    /// The slot holding `h`, or the empty slot where it would go.
    #[inline]
    fn probe(&self, h: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        // Terminates: the table is at most half full, so an empty slot
        // exists, and every step moves to the next slot.
        loop {
            match self.slots.get(i) {
                Some(Some((k, _))) if *k != h => i = (i + 1) & mask,
                _ => return i,
            }
        }
    }

    /// The value of `h`, inserting `make()` first if there is none; true
    /// when it was inserted.
    #[inline]
    pub fn get_or_insert_with(&mut self, h: u64, make: impl FnOnce() -> V) -> (&mut V, bool) {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let i = self.probe(h);
        // `probe` returns an index below the length (the table is not
        // empty after `grow`).
        let slot = &mut self.slots[i];
        let inserted = slot.is_none();
        self.len += usize::from(inserted);
        let (_, v) = slot.get_or_insert_with(|| (h, make()));
        (v, inserted)
    }

    /// The value of `h`, if present.
    #[inline]
    pub fn get(&self, h: u64) -> Option<&V> {
        if self.slots.is_empty() {
            return None;
        }
        match self.slots.get(self.probe(h)) {
            Some(Some((_, v))) => Some(v),
            _ => None,
        }
    }

    /// Asks the CPU to fetch the first slot of `h`. Reads nothing, changes
    /// nothing.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        if !self.slots.is_empty() {
            prefetch(self.slots.as_ptr().wrapping_add(self.home(h)).cast::<u8>());
        }
    }

    /// Number of hashes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes everything, keeping the memory.
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
        self.len = 0;
    }

    /// Doubles the slots and places every entry again.
    #[cold]
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, (0..size).map(|_| None).collect());
        for (h, v) in old.into_iter().flatten() {
            let i = self.probe(h);
            if let Some(slot) = self.slots.get_mut(i) {
                *slot = Some((h, v));
            }
        }
    }
}
