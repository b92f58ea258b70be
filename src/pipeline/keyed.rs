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

/// A map from flow hashes to `V`, laid out as `HashMap` lays it out (the
/// same buckets in the same order for the same insertions, so whatever sums
/// a stage takes over its values come out bit for bit the same), that can
/// also prefetch where a hash's lookup will go a few records before it is
/// looked up.
///
/// Why: a stage's exact per-flow state (the heavy stage's window counts)
/// is a lookup a packet, and on a trace of many flows, or of long windows,
/// the tables outgrow the caches; a `HashMap` lookup is a load, whose
/// miss holds up every instruction behind it, where a prefetch retires at
/// once (BENCHMARKS.md, seventh round). Since the fiftieth round the
/// prefetch is by address ([`FlowMap::prefetch`]). A stage that never
/// folds values in the table's order does better still with
/// [`crate::truth::FlowSlots`], whose first slot is the lookup's only
/// likely miss (the new-flow stage moved there in the ninth round); the
/// heavy stage sums model terms in this table's order, so it stays. Its
/// buckets live in the exact tables' region ([`crate::pages::TableArena`]),
/// on huge pages; the allocator does not change the table's order.
///
/// ```
/// use flowsieve::pipeline::FlowMap;
/// let mut m: FlowMap<u32> = FlowMap::default();
/// *m.get_or_insert_with(7, || 0).0 += 5;
/// assert_eq!(m.get_or_insert_with(7, || 0), (&mut 5, false));
/// m.prefetch(9); // a hint: changes nothing
/// assert_eq!(m.values().copied().collect::<Vec<_>>(), [5]);
/// ```
#[derive(Clone, Debug)]
pub struct FlowMap<V> {
    table: hashbrown::HashTable<(u64, V), TableArena>,
    /// The address of the table's control bytes, learnt at the last
    /// insertion (0 before any); see [`FlowMap::prefetch`].
    control: usize,
}

impl<V> Default for FlowMap<V> {
    fn default() -> FlowMap<V> {
        FlowMap {
            table: hashbrown::HashTable::new_in(TableArena),
            control: 0,
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
                let mut entry = v.insert((h, make()));
                // Bucket `i` ends where the control bytes start, less `i`
                // buckets (hashbrown's layout; see `prefetch`).
                let at = std::ptr::from_mut(entry.get_mut()) as usize;
                let above = (entry.bucket_index() + 1) * std::mem::size_of::<(u64, V)>();
                self.control = at.wrapping_add(above);
                (&mut entry.into_mut().1, true)
            }
        }
    }

    /// Hints the cache to bring in the control bytes where a lookup of `h`
    /// starts and the bucket at that position, by address alone: it reads
    /// nothing and changes nothing.
    ///
    /// Why by address: the hint used to be a lookup (`find`) that
    /// prefetched the entry it found. That lookup is a load of the
    /// control bytes, and a miss there held up the packets behind it, so
    /// the hint cost what it was to save, and on a trace whose windows
    /// were small it was a second lookup a packet. hashbrown keeps bucket
    /// `i` just below the control bytes, less `i + 1` buckets, and a
    /// lookup of `h` starts at position `h mod buckets` of both; the
    /// control bytes' address is learnt from each insertion's bucket
    /// ([`FlowMap::get_or_insert_with`]). Each layout fact is checked by
    /// `tests/keyed.rs`; were one wrong, the hint would fetch useless
    /// lines, never change a result. Between a growth made by a lookup
    /// and the next insertion the address is the old table's, and the
    /// hints fetch nothing useful. On the benchmark trace the heavy stage
    /// took 56.5 ns a packet with this hint, against 79.1 with the lookup
    /// and 66.4 with none (the report's per-stage p50, `--threads 1`); with
    /// no hint, one-minute windows cost the whole process 3-7 % more CPU
    /// (BENCHMARKS.md, fiftieth round).
    #[inline]
    pub fn prefetch(&self, h: u64) {
        if let Some([control, bucket]) = self.hint_addresses(h) {
            crate::prefetch::prefetch(control as *const u8);
            crate::prefetch::prefetch(bucket as *const u8);
        }
    }

    /// The addresses [`FlowMap::prefetch`] fetches for `h`: where a
    /// lookup of `h` starts in the control bytes, and the bucket at that
    /// position. `None` before the first insertion.
    #[inline]
    pub fn hint_addresses(&self, h: u64) -> Option<[usize; 2]> {
        let buckets = self.table.num_buckets();
        if self.control == 0 || buckets == 0 {
            return None;
        }
        let at = (h as usize) & (buckets - 1);
        let below = (at + 1) * std::mem::size_of::<(u64, V)>();
        Some([
            self.control.wrapping_add(at),
            self.control.wrapping_sub(below),
        ])
    }

    /// The address of the bucket that holds `h`, if the map holds it (for
    /// tests of the hint's addresses).
    pub fn bucket_address(&self, h: u64) -> Option<usize> {
        self.table
            .find(h, |e| e.0 == h)
            .map(|e| std::ptr::from_ref(e) as usize)
    }

    /// The values, in the table's order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.table.iter().map(|e| &e.1)
    }

    /// Number of buckets (a power of two, or 0 before the first insertion).
    pub fn num_buckets(&self) -> usize {
        self.table.num_buckets()
    }

    /// Number of hashes.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True when the map holds no hash.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Removes everything, keeping the memory.
    pub fn clear(&mut self) {
        self.table.clear();
    }
}
