//! A table keyed by flow hashes whose slot for a hash is known before any
//! load, so that its user can have it fetched ahead.

use crate::pages::{TableArena, TableVec, table_vec};
use crate::prefetch::{CACHE_LINE, prefetch};

/// The fewest slots a non-empty table has (this one and
/// [`crate::pipeline::FlowSet`], which shares its load rule).
const MIN_SLOTS: usize = 16;

/// A table holds at most `MAX_LOAD_NUM / MAX_LOAD_DEN` of its slots.
const MAX_LOAD_NUM: usize = 3;
const MAX_LOAD_DEN: usize = 4;

/// A table from 64-bit flow hashes to `V`: open addressing with linear
/// probing over a power-of-two number of slots, at most three-quarters
/// full, with no deletion. The exact state of flows that is looked up once
/// a packet lives in it: the exact table's index (hash to entry position,
/// [`super::FlowTable`]) and the new-flow stage's last-seen times.
///
/// Why not hashbrown's table, which both used before: a hashbrown lookup
/// loads the hash's control group, and only then the slot it points to,
/// two dependent misses on a table larger than the caches, and neither
/// can be started ahead of time, because only the first load says where
/// the second is. Here the first slot of hash `h` is `h mod slots`, an
/// address computed without reading anything, so [`FlowSlots::prefetch`]
/// is a true prefetch. At the load kept here a lookup of a present hash
/// finds it within two or three slots on average (Knuth's
/// 1/2 (1 + 1/(1 - a)) at a = 3/4), mostly in the line fetched. Memory is
/// about hashbrown's: a slot is `Option<(u64, V)>` (16 bytes for the
/// index's non-zero positions, 24 for the last-seen times), at 3/8 to 3/4
/// load. The slots live in the exact tables' region
/// ([`crate::pages::TableArena`]), on huge pages.
///
/// The price is the order: [`FlowSlots`] has no iteration, and a stage
/// whose figures fold floating-point values in a table's iteration order
/// keeps hashbrown's (the heavy stage's window map does).
///
/// As a map, [`FlowSlots::get_or_insert_with`] keeps one value per hash.
/// As a multi-map, [`FlowSlots::insert_new`] adds a value beside those
/// already under the hash (the exact table's index: two flows whose 64-bit
/// hashes collide) and [`FlowSlots::find`] picks one by a predicate. The
/// flow hash is already a strong mix, and the pipeline's shard is chosen
/// from a second mix of it, so the low bits used here are uniform within a
/// shard.
///
/// ```
/// use flowsieve::truth::FlowSlots;
/// let mut m: FlowSlots<u32> = FlowSlots::default();
/// let (v, new) = m.get_or_insert_with(7, || 1);
/// assert!(new);
/// *v += 1;
/// assert_eq!(m.get_or_insert_with(7, || 0), (&mut 2, false));
/// assert_eq!((m.len(), m.get(8)), (1, None));
/// m.insert_new(7, 10); // a second value under the same hash
/// assert_eq!(m.find(7, |&v| v > 5), Some(&10));
/// ```
#[derive(Clone, Debug)]
pub struct FlowSlots<V> {
    slots: TableVec<Option<(u64, V)>>,
    len: usize,
}

impl<V> Default for FlowSlots<V> {
    fn default() -> FlowSlots<V> {
        FlowSlots {
            slots: TableVec::new_in(TableArena),
            len: 0,
        }
    }
}

impl<V> FlowSlots<V> {
    /// A table with room for `n` values before it grows.
    pub fn with_capacity(n: usize) -> FlowSlots<V> {
        let mut t = FlowSlots::default();
        if n > 0 {
            t.resize(slots_for(n));
        }
        t
    }

    /// The first slot `h` may occupy (the table is non-empty).
    #[inline]
    fn home(&self, h: u64) -> usize {
        (h as usize) & (self.slots.len() - 1)
    }

    /// The first slot from `h`'s first slot on that is empty or holds `h`
    /// with a value `matches` accepts (the table is non-empty).
    #[inline]
    fn probe(&self, h: u64, mut matches: impl FnMut(&V) -> bool) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        // Terminates: at most three-quarters of the slots are taken, so the
        // walk reaches an empty one, one slot a step.
        loop {
            match self.slots.get(i) {
                Some(Some((k, v))) if *k != h || !matches(v) => i = (i + 1) & mask,
                _ => return i,
            }
        }
    }

    /// Grows the table if one more value would pass the load bound.
    #[inline]
    fn reserve_one(&mut self) {
        if over_load(self.len + 1, self.slots.len()) {
            self.resize(slots_for(self.len + 1).max(self.slots.len() * 2));
        }
    }

    /// The value of `h`, inserting `make()` first if there is none; true
    /// when it was inserted.
    #[inline]
    pub fn get_or_insert_with(&mut self, h: u64, make: impl FnOnce() -> V) -> (&mut V, bool) {
        self.reserve_one();
        let i = self.probe(h, |_| true);
        // `probe` returns an index below the length, and the table is not
        // empty after `reserve_one`.
        let slot = &mut self.slots[i];
        let inserted = slot.is_none();
        self.len += usize::from(inserted);
        let (_, v) = slot.get_or_insert_with(|| (h, make()));
        (v, inserted)
    }

    /// Adds `value` under `h`, beside any values already under it.
    pub fn insert_new(&mut self, h: u64, value: V) {
        self.reserve_one();
        self.place(h, value);
        self.len += 1;
    }

    /// The first value under `h` (in probe order), if any.
    #[inline]
    pub fn get(&self, h: u64) -> Option<&V> {
        self.find(h, |_| true)
    }

    /// The first value under `h` (in probe order) that `matches` accepts.
    #[inline]
    pub fn find(&self, h: u64, matches: impl FnMut(&V) -> bool) -> Option<&V> {
        if self.slots.is_empty() {
            return None;
        }
        match self.slots.get(self.probe(h, matches)) {
            Some(Some((_, v))) => Some(v),
            _ => None,
        }
    }

    /// Asks the CPU to fetch the first slot of `h` and the cache line after
    /// it. Reads nothing, changes nothing.
    ///
    /// Why two lines: a hash that is not in the table walks on until an
    /// empty slot, on average 8.5 slots at the load bound (Knuth's
    /// 1/2 (1 + 1/(1 - a)^2) at a = 3/4) and about 3 at the average load
    /// after a doubling; at 16 or 24 bytes a slot that walk leaves the first
    /// line most of the time. On 2 M one-packet flows, where every packet
    /// of the new-flow stage is such a miss, fetching the first line alone
    /// left 41 % of the stage's samples on the walk's next load; with the
    /// next line fetched too the stage went from 109 to 79 ns a packet
    /// (BENCHMARKS.md, tenth round). The line past the end of the array is
    /// never read (a prefetch does not fault).
    #[inline]
    pub fn prefetch(&self, h: u64) {
        if !self.slots.is_empty() {
            let first = self.slots.as_ptr().wrapping_add(self.home(h)).cast::<u8>();
            prefetch(first);
            prefetch(first.wrapping_add(CACHE_LINE));
        }
    }

    /// Number of values.
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

    /// Puts `value` in the first empty slot from `h`'s first slot on.
    fn place(&mut self, h: u64, value: V) {
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        while let Some(slot) = self.slots.get_mut(i) {
            if slot.is_none() {
                *slot = Some((h, value));
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Grows the table to `size` slots (a power of two above the load
    /// bound): in place when it doubles a non-empty table
    /// ([`double_in_place`]), else by moving every value into a fresh
    /// array, in the old slots' order.
    #[cold]
    fn resize(&mut self, size: usize) {
        let old = self.slots.len();
        if old > 0 && size == 2 * old && double_in_place(self) {
            return;
        }
        let old = std::mem::replace(&mut self.slots, table_vec(size, || None));
        for (h, v) in old.into_iter().flatten() {
            self.place(h, v);
        }
    }
}

impl<V> LinearSlots for FlowSlots<V> {
    type Value = V;

    fn slot_count(&self) -> usize {
        self.slots.len()
    }

    fn is_free(&self, i: usize) -> bool {
        matches!(self.slots.get(i), Some(None))
    }

    fn take(&mut self, i: usize) -> Option<(u64, V)> {
        self.slots.get_mut(i).and_then(Option::take)
    }

    fn put(&mut self, i: usize, h: u64, value: V) {
        if let Some(slot) = self.slots.get_mut(i) {
            *slot = Some((h, value));
        }
    }

    fn double_slots(&mut self) {
        let n = self.slots.len();
        self.slots.resize_with(2 * n, || None);
    }
}

/// An open-addressing table with linear probing over a power-of-two
/// number of slots, whose first slot for hash `h` is `h mod slots`, as
/// [`double_in_place`] sees it: [`FlowSlots`] and the selective stage's
/// [`crate::pipeline::FlowSet`].
pub(crate) trait LinearSlots {
    /// What a slot holds beside its hash.
    type Value;
    /// The number of slots (a power of two).
    fn slot_count(&self) -> usize;
    /// True when slot `i` exists and is empty.
    fn is_free(&self, i: usize) -> bool;
    /// Empties slot `i`, returning what it held.
    fn take(&mut self, i: usize) -> Option<(u64, Self::Value)>;
    /// Fills slot `i` (empty) with `h` and `value`.
    fn put(&mut self, i: usize, h: u64, value: Self::Value);
    /// Appends as many empty slots as there are, where the slots are (the
    /// allocator's `realloc`, or [`crate::pages::TableArena`]'s, moves a
    /// large block's pages instead of copying them).
    fn double_slots(&mut self);
}

/// Doubles `table`'s slots without a second array: the slots grow where
/// they are ([`LinearSlots::double_slots`]), and the values are rehashed
/// within them. False, with nothing changed, if the table has no slot or
/// no empty one (a table kept within a load bound always has one).
///
/// Why: a doubling into a fresh array touches the new array's pages while
/// the old one's are still held, so a table that doubled its way to `S`
/// bytes had touched about `2 S`, every page a first-touch fault. On the
/// benchmark trace the exact table's index and the new-flow stage's
/// last-seen times made 42 % of the default job's page faults that way
/// (`perf record -e page-faults`); in place only the new upper half is
/// fresh, and on 2 M one-packet flows with huge pages off the default job
/// made 103 k page faults instead of 138 k and took 0.92 of the CPU
/// (BENCHMARKS.md, forty-ninth round).
///
/// Why it is correct. With `n` old slots, a value whose first slot was
/// `i` now has `i` or `i + n` (one more bit of its hash). The old slots
/// are visited once each, in probe order, starting just after an empty
/// slot `e`, so that no run of occupied slots is entered in its middle;
/// each value is taken out and placed again from its new first slot.
/// - A value that stays in the lower half starts at its old first slot,
///   which lies between `e` and its old slot along the run, so every slot
///   its walk passes was visited already, and its old slot, just emptied,
///   stops the walk at the latest. A visited slot is never emptied again,
///   so the walk that placed it stays unbroken. (A run that wrapped past
///   the last old slot walks on into the upper half instead, where the
///   doubled table has those slots.)
/// - The upper half only ever receives values.
/// - A walk that would wrap past the last new slot into the lower half,
///   where slots not yet visited may still be emptied, is held back and
///   placed once every old slot has been visited.
///
/// So every value can be reached from its first slot without crossing an
/// empty one, as a fresh rehash leaves it. Values under one hash keep
/// their order along the walk: they are met in that order, and a
/// held-back one is followed by every later one of its hash. (This is the
/// argument of [`crate::pipeline::FlowSet::retain`], Knuth's deletion from
/// linear probing applied to every member at once.)
pub(crate) fn double_in_place<T: LinearSlots>(table: &mut T) -> bool {
    let n = table.slot_count();
    let Some(e) = (0..n).find(|&i| table.is_free(i)) else {
        return false;
    };
    table.double_slots();
    let mask = 2 * n - 1;
    let mut held_back = Vec::new();
    for j in 1..n {
        let i = (e + j) & (n - 1);
        let Some((h, v)) = table.take(i) else {
            continue;
        };
        let at = ((h as usize) & mask..2 * n).find(|&at| table.is_free(at));
        match at {
            Some(at) => table.put(at, h, v),
            None => held_back.push((h, v)),
        }
    }
    for (h, v) in held_back {
        // Terminates: at most `n - 1` values are in `2 n` slots.
        let mut at = (h as usize) & mask;
        while !table.is_free(at) {
            at = (at + 1) & mask;
        }
        table.put(at, h, v);
    }
    true
}

/// True when `n` values are more than an open-addressing table of
/// `slots` slots may hold (three-quarters of them).
#[inline]
pub(crate) fn over_load(n: usize, slots: usize) -> bool {
    n.saturating_mul(MAX_LOAD_DEN) > slots.saturating_mul(MAX_LOAD_NUM)
}

/// The fewest slots, a power of two, that hold `n` values within the load
/// bound ([`over_load`]).
pub(crate) fn slots_for(n: usize) -> usize {
    n.saturating_mul(MAX_LOAD_DEN)
        .div_ceil(MAX_LOAD_NUM)
        .next_power_of_two()
        .max(MIN_SLOTS)
}
