//! Ground truth: the exact per-flow table.
//!
//! A hash table keyed by [`FlowKey`], probed with the flow hash the pipeline
//! already computed (so each packet is hashed once). It costs memory in
//! proportion to the number of flows (a 112-byte entry a flow, plus the
//! hash table's slack), which is why replay can run without it.
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

/// The exact flow table.
#[derive(Clone, Debug, Default)]
pub struct FlowTable {
    table: HashTable<FlowEntry>,
    /// The hash the pipeline uses (keyed or not), for [`FlowTable::get`].
    hasher: FlowHasher,
}

impl FlowTable {
    /// A table with room for `flows` flows before it grows.
    pub fn with_capacity(flows: usize) -> FlowTable {
        FlowTable {
            table: HashTable::with_capacity(flows),
            hasher: FlowHasher::default(),
        }
    }

    /// An empty table for flows hashed by `hasher` (a keyed run's).
    pub fn with_hasher(hasher: FlowHasher) -> FlowTable {
        FlowTable {
            table: HashTable::new(),
            hasher,
        }
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
        if let Some(e) = self.table.find_mut(hash, |e| e.key == key) {
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
        self.table
            .insert_unique(hash, FlowEntry { key, hash, stats }, |e| e.hash);
        true
    }

    /// Hints the cache to bring in the entry that `hash` finds, if any,
    /// and reads nothing else. The probe walks the control bytes (which for
    /// 100 k flows are 128 KiB, resident in L2) and stops at the first empty
    /// slot, as a lookup of an absent key does; every entry whose tag
    /// matches gets a prefetch of its first and last line (an entry is 112
    /// bytes, and the key compare touches the first while the update
    /// touches the last) instead of a load. [`BatchedRecorder::flush`] calls
    /// it for a whole batch before recording any of it, which is what lets
    /// the batch's misses overlap (see there).
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let _ = self.table.find(hash, |e| {
            let first = std::ptr::from_ref(e).cast::<u8>();
            crate::prefetch::prefetch(first);
            crate::prefetch::prefetch(first.wrapping_add(std::mem::size_of::<FlowEntry>() - 1));
            false
        });
    }

    /// Number of distinct flows.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True when no packet was recorded.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The statistics of one flow.
    pub fn get(&self, key: &FlowKey) -> Option<&FlowStats> {
        let h = self.hasher.hash(key);
        self.table.find(h, |e| e.key == *key).map(|e| &e.stats)
    }

    /// All flows, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &FlowEntry> {
        self.table.iter()
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
        let mut all: Vec<&FlowEntry> = self.table.iter().collect();
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
