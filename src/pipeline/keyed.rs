//! Hash maps keyed by flow hashes.
//!
//! The stages' exact sets are keyed by the 64-bit flow hash, the identity
//! the filters themselves see (two keys with one hash are one element to a
//! filter, so they are one flow to its ground truth too; with `n` flows that
//! happens with probability about `n^2 / 2^65`). The hash is already a
//! strong mix, so the map uses it as is instead of hashing it again.

use crate::pages::TableArena;
use std::hash::{BuildHasherDefault, Hasher};

/// A [`Hasher`] for keys that are already uniform 64-bit hashes.
#[derive(Default, Clone, Copy)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is expected; fold anything else in.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

/// A map from flow hashes.
pub type HashMap<V> = hashbrown::HashMap<u64, V, BuildHasherDefault<PassThrough>>;
/// A set of flow hashes.
pub type HashSet = hashbrown::HashSet<u64, BuildHasherDefault<PassThrough>>;

/// A map from flow hashes to `V`, laid out as [`HashMap`] lays it out (the
/// same buckets in the same order for the same insertions, so whatever sums
/// a stage takes over its values come out bit for bit the same), that can
/// also prefetch the entry of a hash a few records before it is looked up.
///
/// Why: a stage's exact per-flow state (the heavy stage's window counts)
/// is a lookup a packet, and on a trace of many flows the tables outgrow
/// the caches; a [`HashMap`] lookup is a load, whose miss holds up every
/// instruction behind it, where a prefetch retires at once. On 2 M
/// one-packet flows the new-flow stage took 15 % less per batch with it
/// (BENCHMARKS.md, seventh round). The prefetch still has to load the
/// control bytes to find the entry, so a stage that never folds values in
/// the table's order does better with [`crate::truth::FlowSlots`], whose
/// slot address needs no load (the new-flow stage moved there in the ninth
/// round); the heavy stage sums model terms in this table's order, so it
/// stays. Its buckets live in the exact tables' region
/// ([`crate::pages::TableArena`]), on huge pages; the allocator does not
/// change the table's order.
#[derive(Clone, Debug)]
pub struct FlowMap<V> {
    table: hashbrown::HashTable<(u64, V), TableArena>,
}

impl<V> Default for FlowMap<V> {
    fn default() -> FlowMap<V> {
        FlowMap {
            table: hashbrown::HashTable::new_in(TableArena),
        }
    }
}

impl<V> FlowMap<V> {
    /// The value of `h`, inserting `make()` first if there is none; true
    /// when it was inserted.
    #[inline]
    pub fn get_or_insert_with(&mut self, h: u64, make: impl FnOnce() -> V) -> (&mut V, bool) {
        match self.table.entry(h, |e| e.0 == h, |e| e.0) {
            hashbrown::hash_table::Entry::Occupied(o) => (&mut o.into_mut().1, false),
            hashbrown::hash_table::Entry::Vacant(v) => {
                (&mut v.insert((h, make())).into_mut().1, true)
            }
        }
    }

    /// Hints the cache to bring in the entry of `h`, if there is one. It
    /// reads the control bytes only (the probe stops at the first empty
    /// group, as a lookup of an absent hash does); changes nothing.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        let _ = self.table.find(h, |e| {
            crate::prefetch::prefetch(std::ptr::from_ref(e).cast::<u8>());
            false
        });
    }

    /// The values, in the table's order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.table.iter().map(|e| &e.1)
    }

    /// Number of hashes.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Removes everything, keeping the memory.
    pub fn clear(&mut self) {
        self.table.clear();
    }
}
