//! A set of flow hashes, each with a small value, whose hashes sit in an
//! array of their own so that a lookup walks 8 of them a cache line.

use crate::pages::advise_spare_huge;
use crate::pages::huge_vec;
use crate::prefetch::{CACHE_LINE, prefetch_to_l2};
use crate::truth::{LinearSlots, double_in_place, over_load, slots_for};
use std::mem::size_of;

/// The hash an empty slot holds. Hash 0 itself is kept beside the arrays.
const EMPTY: u64 = 0;

/// A set of 64-bit flow hashes with a value of type `V` each: open
/// addressing with linear probing over a power-of-two number of slots, at
/// most three-quarters full, the hashes in one array and the values in a
/// second. The selective stage's capped flow sets ([`super::CappedFlowSet`])
/// live in it: a lookup or an insertion a packet, and an iteration only
/// when a window's directory is built.
///
/// Why not hashbrown's table, which they used before: a hashbrown lookup
/// first loads the hash's control group, and only that load says where the
/// entry is, so on a set larger than the caches (a cache window of a few
/// hundred thousand flows) every packet waited on that miss, and a
/// prefetch could not be issued without taking it (BENCHMARKS.md, ninth
/// round). Here the first slot of hash `h` is `h mod slots`, an address
/// computed without reading anything, so [`FlowSet::prefetch`] is a true
/// prefetch. And why not [`crate::truth::FlowSlots`], whose slots are the
/// same idea: its slot is `Option<(u64, V)>`, 24 bytes for a class and 16
/// for no value, where hashbrown takes 17 and 9 a bucket. A hash array
/// with 0 for an empty slot takes 8 bytes, plus the value's size in the
/// second array: 10 bytes for a class, 8 for none. At the stage's default
/// cap that is less memory than hashbrown's (see
/// [`FlowSet::bytes_for`]), and the probe walks hashes only, 8 a line.
///
/// Order is not kept: iteration follows the slots. The selective stage's
/// uses are order-free (directory insertions commute, and a counting
/// directory's saturating increments do too).
///
/// ```
/// use flowsieve::pipeline::FlowSet;
/// let mut s: FlowSet<u16> = FlowSet::default();
/// assert!(s.insert(7, 3));
/// assert!(!s.insert(7, 4)); // present: the value stays
/// assert!(s.insert(0, 1)); // hash 0 is a member like any other
/// assert_eq!((s.len(), s.contains(7), s.contains(8)), (2, true, false));
/// assert_eq!(s.retain(|h, _| h != 7), 1);
/// let members: Vec<(u64, u16)> = s.iter().map(|(h, &v)| (h, v)).collect();
/// assert_eq!(members, vec![(0, 1)]);
/// ```
#[derive(Clone, Debug)]
pub struct FlowSet<V> {
    /// The member in each slot, or [`EMPTY`].
    hashes: Vec<u64>,
    /// The value of the member in the same slot (anything for an empty
    /// slot).
    values: Vec<V>,
    /// Members in the slots.
    in_slots: usize,
    /// Hash 0's value, when 0 is a member.
    zero: Option<V>,
}

impl<V> Default for FlowSet<V> {
    fn default() -> FlowSet<V> {
        FlowSet {
            hashes: Vec::new(),
            values: Vec::new(),
            in_slots: 0,
            zero: None,
        }
    }
}

impl<V: Copy + Default> FlowSet<V> {
    /// The most bytes the arrays of a set of at most `n` members take: the
    /// slots it grows to before the `n`-th member, each a hash and a value.
    /// (The set only grows when a member is added, so this is exact for a
    /// set that reached `n`.)
    ///
    /// ```
    /// use flowsieve::pipeline::FlowSet;
    /// // 65 536 members need 87 382 slots at three-quarters: 2^17 of them.
    /// assert_eq!(FlowSet::<u16>::bytes_for(65_536), (1 << 17) * 10);
    /// assert_eq!(FlowSet::<()>::bytes_for(65_536), (1 << 17) * 8);
    /// ```
    pub fn bytes_for(n: usize) -> u64 {
        let slots = if n == 0 { 0 } else { slots_for(n) };
        (slots as u64).saturating_mul((size_of::<u64>() + size_of::<V>()) as u64)
    }

    /// The first slot `h` may occupy (the set has slots).
    #[inline]
    fn home(&self, h: u64) -> usize {
        (h as usize) & (self.hashes.len() - 1)
    }

    /// The slot that holds `h`, or else the first empty slot from `h`'s
    /// first slot on (the set has slots; `h` is not [`EMPTY`]).
    #[inline]
    fn probe(&self, h: u64) -> usize {
        let mask = self.hashes.len() - 1;
        let mut i = self.home(h);
        // Terminates: at most three-quarters of the slots are taken, so the
        // walk reaches an empty one, one slot a step.
        loop {
            match self.hashes.get(i) {
                Some(&k) if k != h && k != EMPTY => i = (i + 1) & mask,
                _ => return i,
            }
        }
    }

    /// True when `h` is a member.
    #[inline]
    pub fn contains(&self, h: u64) -> bool {
        if h == EMPTY {
            return self.zero.is_some();
        }
        !self.hashes.is_empty() && self.hashes.get(self.probe(h)) == Some(&h)
    }

    /// Adds `h` with `value` unless it is a member; true when it was added
    /// (a member keeps its value).
    #[inline]
    pub fn insert(&mut self, h: u64, value: V) -> bool {
        if h == EMPTY {
            let added = self.zero.is_none();
            if added {
                self.zero = Some(value);
            }
            return added;
        }
        if self.contains(h) {
            return false;
        }
        if over_load(self.in_slots + 1, self.hashes.len()) {
            self.resize(slots_for(self.in_slots + 1).max(self.hashes.len() * 2));
        }
        self.place(h, value);
        true
    }

    /// Puts `h` (not a member, not [`EMPTY`]) in the first empty slot from
    /// its first slot on.
    fn place(&mut self, h: u64, value: V) {
        let i = self.probe(h);
        if let (Some(k), Some(v)) = (self.hashes.get_mut(i), self.values.get_mut(i)) {
            *k = h;
            *v = value;
            self.in_slots += 1;
        }
    }

    /// Keeps the members `keep` accepts and removes the others, in place;
    /// returns how many it removed.
    ///
    /// The walk starts just after a slot that is empty before it starts.
    /// No probe sequence crosses such a slot, so every member's first slot
    /// lies between that slot and the member's own, in the walk's order.
    /// Each member the walk reaches is taken out and, if kept, put back in
    /// the first empty slot from its first slot on: that is at or before
    /// the slot it was taken from, and the walk only empties slots after
    /// it, so every probe sequence stays unbroken (the proof of Knuth's
    /// deletion from linear probing, applied to all members at once).
    pub fn retain(&mut self, mut keep: impl FnMut(u64, &V) -> bool) -> usize {
        let mut removed = 0;
        if let Some(v) = self.zero
            && !keep(EMPTY, &v)
        {
            self.zero = None;
            removed += 1;
        }
        let n = self.hashes.len();
        let Some(start) = self.hashes.iter().position(|&k| k == EMPTY) else {
            return removed;
        };
        let mask = n - 1;
        for step in 1..=n {
            let i = (start + step) & mask;
            let (Some(&h), Some(&v)) = (self.hashes.get(i), self.values.get(i)) else {
                continue;
            };
            if h == EMPTY {
                continue;
            }
            if let Some(k) = self.hashes.get_mut(i) {
                *k = EMPTY;
            }
            self.in_slots -= 1;
            if keep(h, &v) {
                self.place(h, v);
            } else {
                removed += 1;
            }
        }
        removed
    }

    /// Asks the CPU to fetch into L2 what a lookup or insertion of `h`
    /// reads: the line of its first slot, the line after it (a walk to an
    /// empty slot is about 3 slots at the average load, 8.5 at the bound),
    /// and the line of its value. Reads nothing, changes nothing. Into L2,
    /// so that a caller can ask many records ahead (see
    /// `crate::prefetch::prefetch_to_l2`).
    #[inline]
    pub fn prefetch(&self, h: u64) {
        if self.hashes.is_empty() {
            return;
        }
        let i = self.home(h);
        let first = self.hashes.as_ptr().wrapping_add(i).cast::<u8>();
        prefetch_to_l2(first);
        prefetch_to_l2(first.wrapping_add(CACHE_LINE));
        if size_of::<V>() > 0 {
            prefetch_to_l2(self.values.as_ptr().wrapping_add(i).cast::<u8>());
        }
    }

    /// The members and their values, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.zero.iter().map(|v| (EMPTY, v)).chain(
            self.hashes
                .iter()
                .zip(&self.values)
                .filter(|(h, _)| **h != EMPTY)
                .map(|(&h, v)| (h, v)),
        )
    }

    /// The bytes its arrays take now (kept across [`FlowSet::clear`] and
    /// [`FlowSet::retain`]).
    pub fn bytes(&self) -> u64 {
        (self.hashes.len() as u64).saturating_mul((size_of::<u64>() + size_of::<V>()) as u64)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.in_slots + usize::from(self.zero.is_some())
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every member, keeping the memory.
    pub fn clear(&mut self) {
        self.hashes.fill(EMPTY);
        self.in_slots = 0;
        self.zero = None;
    }

    /// Grows the arrays to `size` slots (a power of two above the load
    /// bound): in place when that doubles them
    /// ([`crate::truth::double_in_place`]: only the new half is fresh
    /// memory), else by moving every member into fresh arrays.
    #[cold]
    fn resize(&mut self, size: usize) {
        let old = self.hashes.len();
        if old > 0 && size == 2 * old && double_in_place(self) {
            return;
        }
        let hashes = std::mem::replace(&mut self.hashes, huge_vec(size, || EMPTY));
        let values = std::mem::replace(&mut self.values, huge_vec(size, V::default));
        self.in_slots = 0;
        for (h, v) in hashes.into_iter().zip(values) {
            if h != EMPTY {
                self.place(h, v);
            }
        }
    }
}

impl<V: Copy + Default> LinearSlots for FlowSet<V> {
    type Value = V;

    fn slot_count(&self) -> usize {
        self.hashes.len()
    }

    fn is_free(&self, i: usize) -> bool {
        self.hashes.get(i) == Some(&EMPTY)
    }

    fn take(&mut self, i: usize) -> Option<(u64, V)> {
        let h = std::mem::replace(self.hashes.get_mut(i)?, EMPTY);
        (h != EMPTY)
            .then(|| self.values.get(i).copied().unwrap_or_default())
            .map(|v| (h, v))
    }

    fn put(&mut self, i: usize, h: u64, value: V) {
        if let (Some(k), Some(v)) = (self.hashes.get_mut(i), self.values.get_mut(i)) {
            *k = h;
            *v = value;
        }
    }

    fn double_slots(&mut self) {
        let n = self.hashes.len();
        // Advised before the new half is first touched, as `huge_vec`
        // advises a fresh array.
        self.hashes.reserve_exact(n);
        advise_spare_huge(&mut self.hashes);
        self.hashes.resize(2 * n, EMPTY);
        self.values.reserve_exact(n);
        advise_spare_huge(&mut self.values);
        self.values.resize(2 * n, V::default());
    }
}
