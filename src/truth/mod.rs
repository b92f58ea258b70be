//! Ground truth: the exact per-flow table.
//!
//! A hash table keyed by [`FlowKey`], probed with the flow hash the pipeline
//! already computed (so each packet is hashed once). It costs memory in
//! proportion to the number of flows (a 112-byte entry a flow, plus a
//! 16-byte index slot and the index's slack), which is why replay can run
//! without it.
//! The sources record into it through [`BatchedRecorder`], a batch of
//! packets at a time (that type says why).
//!
//! ```
//! use flowsieve::dissect::FlowKey;
//! use flowsieve::hash::flow_hash;
//! use flowsieve::ingest::Timestamp;
//! use flowsieve::truth::FlowTable;
//! let mut t = FlowTable::default();
//! let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 17);
//! let ts = Timestamp::from_units(5, 1);
//! assert!(t.record(k, flow_hash(&k), 0, ts, 100, 64));
//! assert!(!t.record(k, flow_hash(&k), 0, ts, 100, 64));
//! assert_eq!(t.get(&k).unwrap().packets, 2);
//! ```

use crate::class::ClassId;
use crate::dissect::FlowKey;
use crate::hash::FlowHasher;
use crate::ingest::Timestamp;
use hashbrown::HashTable;

mod batched;
pub use batched::{BATCH, BatchedRecorder};

/// Exact statistics of one flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowStats {
    /// Packets.
    pub packets: u64,
    /// Bytes on the wire (the records' original lengths).
    pub wire_bytes: u64,
    /// Bytes captured.
    pub captured_bytes: u64,
    /// Earliest timestamp (traces may go backwards in time).
    pub first_ts: Timestamp,
    /// Latest timestamp.
    pub last_ts: Timestamp,
    /// The flow's class.
    pub class: ClassId,
}

/// A flow and its statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowEntry {
    /// The flow key.
    pub key: FlowKey,
    /// Its flow hash.
    pub hash: u64,
    /// The flow's counts.
    pub stats: FlowStats,
}

/// Where a flow's entry is: its hash (so the index can grow without
/// reading any entry) and its position in the entry vector.
#[derive(Clone, Copy, Debug)]
struct Slot {
    hash: u64,
    entry: usize,
}

/// The exact flow table.
///
/// The entries are kept dense, in the order the flows first appeared,
/// behind a hash index of 16-byte slots. Why not the entries in the hash
/// table itself: a hash table grows by allocating a table twice the size
/// and moving every entry, so with 112-byte entries 100 k flows touch
/// about 29 MB of fresh pages (every size the table passed through), and
/// on this project's test machines the first touch of a page, zeroing it,
/// was a tenth of the default job's source thread, all of it spent while
/// the shard workers waited. A vector grows by `realloc`, which for a large
/// block moves the pages instead of copying them; only the index (1/7 of
/// the size) is rebuilt, and from the hashes in its slots alone.
#[derive(Clone, Debug, Default)]
pub struct FlowTable {
    index: HashTable<Slot>,
    entries: Vec<FlowEntry>,
    /// The hash the pipeline uses (keyed or not), for [`FlowTable::get`].
    hasher: FlowHasher,
}

impl FlowTable {
    /// A table with room for `flows` flows before it grows.
    pub fn with_capacity(flows: usize) -> FlowTable {
        FlowTable {
            index: HashTable::with_capacity(flows),
            entries: Vec::with_capacity(flows),
            hasher: FlowHasher::default(),
        }
    }

    /// An empty table for flows hashed by `hasher` (a keyed run's).
    pub fn with_hasher(hasher: FlowHasher) -> FlowTable {
        FlowTable {
            index: HashTable::new(),
            entries: Vec::new(),
            hasher,
        }
    }

    /// The slot of `key`, whose hash is `hash`. The stored hash is compared
    /// first, so an entry is read only for a slot whose full hash matches.
    #[inline]
    fn find(&self, key: &FlowKey, hash: u64) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(hash, |s| {
                s.hash == hash && entries.get(s.entry).is_some_and(|e| e.key == *key)
            })
            .map(|s| s.entry)
    }

    /// Counts one packet of `key` (whose hash under the table's
    /// [`FlowHasher`] is `hash`). Returns true if this is the flow's first packet.
    #[inline]
    pub fn record(
        &mut self,
        key: FlowKey,
        hash: u64,
        class: ClassId,
        ts: Timestamp,
        wire_len: u32,
        captured_len: u32,
    ) -> bool {
        if let Some(e) = self.find(&key, hash).and_then(|i| self.entries.get_mut(i)) {
            let s = &mut e.stats;
            s.packets += 1;
            s.wire_bytes += u64::from(wire_len);
            s.captured_bytes += u64::from(captured_len);
            s.first_ts = s.first_ts.min(ts);
            s.last_ts = s.last_ts.max(ts);
            return false;
        }
        let stats = FlowStats {
            packets: 1,
            wire_bytes: u64::from(wire_len),
            captured_bytes: u64::from(captured_len),
            first_ts: ts,
            last_ts: ts,
            class,
        };
        let entry = self.entries.len();
        self.entries.push(FlowEntry { key, hash, stats });
        self.index
            .insert_unique(hash, Slot { hash, entry }, |s| s.hash);
        true
    }

    /// Hints the cache to bring in the entry that `hash` finds, if any,
    /// and reads nothing else. The probe walks the index (for 100 k flows
    /// 128 KiB of control bytes and 2 MiB of slots) and stops at the first
    /// empty slot, as a lookup of an absent key does; every slot whose hash
    /// matches gets a prefetch of its entry's first and last line (an entry
    /// is 112 bytes, and the key compare touches the first while the update
    /// touches the last) instead of a load. [`BatchedRecorder::flush`] calls
    /// it for a whole batch before recording any of it, which is what lets
    /// the batch's misses overlap (see there).
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let entries = self.entries.as_ptr();
        let _ = self.index.find(hash, |s| {
            if s.hash == hash {
                let first = entries.wrapping_add(s.entry).cast::<u8>();
                crate::prefetch::prefetch(first);
                crate::prefetch::prefetch(first.wrapping_add(std::mem::size_of::<FlowEntry>() - 1));
            }
            false
        });
    }

    /// Number of distinct flows.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no packet was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The statistics of one flow.
    pub fn get(&self, key: &FlowKey) -> Option<&FlowStats> {
        let h = self.hasher.hash(key);
        self.find(key, h)
            .and_then(|i| self.entries.get(i))
            .map(|e| &e.stats)
    }

    /// All flows, in the order of their first packets.
    pub fn iter(&self) -> impl Iterator<Item = &FlowEntry> {
        self.entries.iter()
    }

    /// The `n` largest flows by packets, then bytes; ties broken by key so
    /// the order is deterministic.
    ///
    /// The selection runs over references, 8 bytes a flow, and copies only
    /// the `n` it returns: copying every 112-byte entry first cost 11 MB of
    /// fresh pages (about 2,800 page faults) for 100 k flows. The order is
    /// total (keys are unique), so the result does not depend on the
    /// table's iteration order.
    pub fn top(&self, n: usize) -> Vec<FlowEntry> {
        let mut all: Vec<&FlowEntry> = self.entries.iter().collect();
        let order = |a: &&FlowEntry, b: &&FlowEntry| {
            b.stats
                .packets
                .cmp(&a.stats.packets)
                .then(b.stats.wire_bytes.cmp(&a.stats.wire_bytes))
                .then(a.key.version().cmp(&b.key.version()))
                .then(a.key.src_bits().cmp(&b.key.src_bits()))
                .then(a.key.dst_bits().cmp(&b.key.dst_bits()))
                .then(a.key.sport().cmp(&b.key.sport()))
                .then(a.key.dport().cmp(&b.key.dport()))
                .then(a.key.proto().cmp(&b.key.proto()))
        };
        if n < all.len() {
            all.select_nth_unstable_by(n, order);
            all.truncate(n);
        }
        all.sort_by(order);
        all.into_iter().copied().collect()
    }
}
