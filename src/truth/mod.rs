//! Ground truth: the exact per-flow table.
//!
//! A hash table keyed by [`FlowKey`], probed with the flow hash the pipeline
//! already computed (so each packet is hashed once). It costs memory in
//! proportion to the number of flows (a 96-byte entry a flow, plus a
//! 16-byte index slot and the index's slack), which is why replay can run
//! without it.
//! The sources record into it through [`BatchedRecorder`], a batch of
//! packets at a time (that type says why), or hand it batches recorded on
//! a thread of its own ([`record_on_own_thread`]).
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
use crate::pages::{TableArena, TableVec};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::num::NonZeroUsize;

mod batched;
mod slots;
mod table_summary;
mod threaded;
pub use batched::{BATCH, BatchedRecorder, RecordTruth};
pub(crate) use batched::{TablePacket, record_chunk};
pub use slots::FlowSlots;
pub(crate) use slots::{LinearSlots, double_in_place, over_load, slots_for};
pub use table_summary::TableSummary;
pub use threaded::{SEND_BATCH, record_on_own_thread};

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
    /// The flow's counts.
    pub stats: FlowStats,
}

/// A flow's entry as the table stores it: [`FlowEntry`]'s figures in 96
/// bytes, where [`FlowEntry`] with its two [`Timestamp`]s (16 bytes each,
/// 12 of them used) takes 104, and took 112 with the flow hash beside it.
///
/// Why 96: entries are laid end to end, and at 96 bytes every entry covers
/// exactly two cache lines (it starts at byte 0 or 32 of a line), where at
/// 112 half of them started 32 or 48 bytes in and covered three. So a
/// packet's update misses in two lines instead of two and a half on
/// average, and 100 k flows take 9.6 MB of entries instead of 11.2
/// (BENCHMARKS.md, forty-ninth round). The hash is not kept: the index's
/// slots hold it, and nothing reads it from an entry.
#[derive(Clone, Copy, Debug)]
struct StoredFlow {
    key: FlowKey,
    packets: u64,
    wire_bytes: u64,
    captured_bytes: u64,
    first_secs: i64,
    last_secs: i64,
    first_nanos: u32,
    last_nanos: u32,
    class: ClassId,
}

impl StoredFlow {
    /// A flow's entry after its first packet.
    #[inline]
    fn first(
        key: FlowKey,
        class: ClassId,
        ts: Timestamp,
        wire_len: u32,
        captured_len: u32,
    ) -> StoredFlow {
        StoredFlow {
            key,
            packets: 1,
            wire_bytes: u64::from(wire_len),
            captured_bytes: u64::from(captured_len),
            first_secs: ts.secs(),
            last_secs: ts.secs(),
            first_nanos: ts.subsec_nanos(),
            last_nanos: ts.subsec_nanos(),
            class,
        }
    }

    /// Counts one more packet of the flow, as [`FlowStats`] would: sums,
    /// and the earliest and latest timestamps in [`Timestamp`]'s order.
    #[inline]
    fn add(&mut self, ts: Timestamp, wire_len: u32, captured_len: u32) {
        self.packets += 1;
        self.wire_bytes += u64::from(wire_len);
        self.captured_bytes += u64::from(captured_len);
        let first = self.first_ts().min(ts);
        let last = self.last_ts().max(ts);
        (self.first_secs, self.first_nanos) = (first.secs(), first.subsec_nanos());
        (self.last_secs, self.last_nanos) = (last.secs(), last.subsec_nanos());
    }

    /// The earliest timestamp.
    #[inline]
    fn first_ts(&self) -> Timestamp {
        // The parts came from a `Timestamp`, so the nanoseconds are below
        // one second.
        Timestamp::from_checked(self.first_secs, self.first_nanos)
    }

    /// The latest timestamp.
    #[inline]
    fn last_ts(&self) -> Timestamp {
        Timestamp::from_checked(self.last_secs, self.last_nanos)
    }

    /// Its figures.
    fn stats(&self) -> FlowStats {
        FlowStats {
            packets: self.packets,
            wire_bytes: self.wire_bytes,
            captured_bytes: self.captured_bytes,
            first_ts: self.first_ts(),
            last_ts: self.last_ts(),
            class: self.class,
        }
    }

    /// The flow and its figures.
    fn entry(&self) -> FlowEntry {
        FlowEntry {
            key: self.key,
            stats: self.stats(),
        }
    }
}

/// The exact flow table.
///
/// The entries are kept dense, in the order the flows first appeared,
/// behind a hash index of 16-byte slots ([`FlowSlots`] of positions, whose
/// slots hold the hashes, so the index grows without reading any entry).
/// Why not the entries in the hash table itself: a hash table grows by
/// allocating a table twice the size and moving every entry, so with
/// 112-byte entries (their size then) 100 k flows touched about 29 MB of
/// fresh pages (every size the table passed through), and on this
/// project's test machines the first touch of a page, zeroing it, was a
/// tenth of the default job's source thread, all of it spent while the
/// shard workers waited. The entries are appended, and only the index
/// (1/6 of the size) is rebuilt, in place (`double_in_place`), from the
/// hashes in its slots alone. (An
/// index whose slots held the entries themselves, 128 bytes each, so that
/// a packet took one lookup instead of slot then entry, measured no faster
/// and took twice the memory: BENCHMARKS.md, thirty-eighth round.)
///
/// Both the entries and the index live in the exact tables' region
/// ([`crate::pages::TableArena`]), on huge pages, where the vector's
/// growth copies its entries into a block twice the size while it is
/// smaller than a huge page, and past that moves their pages there
/// without a copy (`mremap`). With huge
/// pages off (`--huge-pages off`, or `auto` on a host that takes back free memory) they are on the global allocator, and the
/// vector grows by `realloc`, which moves a large block's pages instead.
#[derive(Clone, Debug)]
pub struct FlowTable {
    /// Flow hash to entry position plus one (non-zero, so that a slot is
    /// 16 bytes).
    index: FlowSlots<NonZeroUsize>,
    entries: TableVec<StoredFlow>,
    /// The hash the pipeline uses (keyed or not), for [`FlowTable::get`].
    hasher: FlowHasher,
}

impl Default for FlowTable {
    fn default() -> FlowTable {
        FlowTable::with_hasher(FlowHasher::default())
    }
}

impl FlowTable {
    /// The bytes a flow's entry takes (the index's slot aside): two cache
    /// lines, the key and the flow's figures.
    ///
    /// ```
    /// assert_eq!(flowsieve::truth::FlowTable::ENTRY_BYTES, 96);
    /// ```
    pub const ENTRY_BYTES: usize = std::mem::size_of::<StoredFlow>();

    /// A table with room for `flows` flows before it grows.
    pub fn with_capacity(flows: usize) -> FlowTable {
        FlowTable {
            index: FlowSlots::with_capacity(flows),
            entries: TableVec::with_capacity_in(flows, TableArena),
            hasher: FlowHasher::default(),
        }
    }

    /// An empty table for flows hashed by `hasher` (a keyed run's).
    pub fn with_hasher(hasher: FlowHasher) -> FlowTable {
        FlowTable {
            index: FlowSlots::default(),
            entries: TableVec::new_in(TableArena),
            hasher,
        }
    }

    /// The position of `key`'s entry (`hash` is its hash). A slot's stored
    /// hash is compared first, so an entry is read only when the full hash
    /// matches.
    #[inline]
    fn find(&self, key: &FlowKey, hash: u64) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(hash, |&at| {
                entries.get(position(at)).is_some_and(|e| e.key == *key)
            })
            .map(|&at| position(at))
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
            e.add(ts, wire_len, captured_len);
            return false;
        }
        let entry = self.entries.len();
        self.entries
            .push(StoredFlow::first(key, class, ts, wire_len, captured_len));
        self.index
            .insert_new(hash, NonZeroUsize::MIN.saturating_add(entry));
        true
    }

    /// The position of the first entry whose stored hash is `hash`, if any,
    /// with a prefetch of every cache line the entry covers. It reads only
    /// the index (for 100 k flows 2 MiB of slots), never an entry. Entries
    /// never move within the vector, so the position stays good while more
    /// flows are inserted. [`BatchedRecorder::flush`] locates a whole batch
    /// this way before it records any of it, which lets the batch's misses
    /// overlap (see there).
    ///
    /// Why two prefetches: an entry is 96 bytes ([`StoredFlow`]), so it
    /// starts at byte 0 or 32 of a line and covers exactly two, the one it
    /// starts in and the one its last byte is in. (At 112 bytes, entries
    /// starting 32 or 48 bytes in covered three, and the middle one, which
    /// the key compare reads, needed a third prefetch: BENCHMARKS.md,
    /// fifteenth round. 64-byte-aligned entries of 128 bytes, two lines
    /// each, measured slower there, with 14 % more memory to miss in.)
    #[inline]
    pub(crate) fn locate(&self, hash: u64) -> Option<usize> {
        let entry = position(*self.index.get(hash)?);
        let first = self.entries.as_ptr().wrapping_add(entry).cast::<u8>();
        crate::prefetch::prefetch(first);
        crate::prefetch::prefetch(first.wrapping_add(Self::ENTRY_BYTES - 1));
        Some(entry)
    }

    /// Asks the CPU to fetch the index slot where a lookup of `hash`
    /// starts; reads nothing ([`BatchedRecorder::flush`] does it for a
    /// whole batch before [`FlowTable::locate`]).
    #[inline]
    pub(crate) fn prefetch_slot(&self, hash: u64) {
        self.index.prefetch(hash);
    }

    /// Counts one packet into the entry at `position` (from
    /// [`FlowTable::locate`]) if that entry's key is `key`, as
    /// [`FlowTable::record`] would; false, with nothing changed, if it is
    /// another flow's (one whose hash is the same) or out of range.
    #[inline]
    pub(crate) fn record_at(
        &mut self,
        position: usize,
        key: &FlowKey,
        ts: Timestamp,
        wire_len: u32,
        captured_len: u32,
    ) -> bool {
        match self.entries.get_mut(position) {
            Some(e) if e.key == *key => {
                e.add(ts, wire_len, captured_len);
                true
            }
            _ => false,
        }
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
    pub fn get(&self, key: &FlowKey) -> Option<FlowStats> {
        let h = self.hasher.hash(key);
        self.find(key, h)
            .and_then(|i| self.entries.get(i))
            .map(StoredFlow::stats)
    }

    /// All flows, in the order of their first packets.
    pub fn iter(&self) -> impl Iterator<Item = FlowEntry> + '_ {
        self.entries.iter().map(StoredFlow::entry)
    }

    /// The number of flows of each class (`counts[c]` for class `c`;
    /// classes past the slice's end are not counted).
    pub fn count_classes(&self, counts: &mut [u64]) {
        for e in self.entries.iter() {
            if let Some(c) = counts.get_mut(usize::from(e.class)) {
                *c += 1;
            }
        }
    }

    /// The `n` largest flows by packets, then bytes; ties broken by key so
    /// the order is deterministic.
    ///
    /// One pass over the entries keeps the best `n` so far in a heap whose
    /// top is the worst of them, so almost every flow costs one compare of
    /// its packet count against that top, and nothing is copied but the `n`
    /// returned. (Sorting copies of all entries, then 112 bytes, cost 11 MB of fresh
    /// pages for 100 k flows; selecting over references still took about
    /// 3 ms of the default job's serial tail in the partition's random
    /// reads.) The order is total, keys being unique, so the result does
    /// not depend on the table's order.
    pub fn top(&self, n: usize) -> Vec<FlowEntry> {
        self.best_of(n, |_| {})
    }

    /// The figures a report takes from the table ([`TableSummary`]): its
    /// flows, its `n` largest ([`FlowTable::top`]) and its flows of each
    /// of `classes` classes ([`FlowTable::count_classes`]), in one pass
    /// over the entries.
    ///
    /// ```
    /// use flowsieve::dissect::FlowKey;
    /// use flowsieve::hash::flow_hash;
    /// use flowsieve::ingest::Timestamp;
    /// use flowsieve::truth::FlowTable;
    /// let mut t = FlowTable::default();
    /// for port in 1..=4u16 {
    ///     let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], port, 80, 6);
    ///     for _ in 0..port {
    ///         t.record(k, flow_hash(&k), port % 2, Timestamp::ZERO, 100, 100);
    ///     }
    /// }
    /// let s = t.summary(2, 3);
    /// assert_eq!((s.flows, s.flows_by_class), (4, vec![2, 2, 0]));
    /// assert_eq!(s.top, t.top(2));
    /// ```
    pub fn summary(&self, n: usize, classes: usize) -> TableSummary {
        let mut flows_by_class = vec![0; classes];
        let top = self.best_of(n, |e| {
            if let Some(c) = flows_by_class.get_mut(usize::from(e.class)) {
                *c += 1;
            }
        });
        TableSummary {
            flows: self.len() as u64,
            top,
            flows_by_class,
        }
    }

    /// [`FlowTable::top`], calling `each` on every entry on the way.
    fn best_of(&self, n: usize, mut each: impl FnMut(&StoredFlow)) -> Vec<FlowEntry> {
        let mut best: BinaryHeap<Ranked<'_>> = BinaryHeap::with_capacity(n.min(self.len()) + 1);
        for e in &self.entries {
            each(e);
            if best.len() < n {
                best.push(Ranked(e));
            } else if best.peek().is_some_and(|worst| Ranked(e) < *worst) {
                best.pop();
                best.push(Ranked(e));
            }
        }
        best.into_sorted_vec()
            .into_iter()
            .map(|r| r.0.entry())
            .collect()
    }
}

/// The `n` largest flows of several tables that hold disjoint sets of
/// flows (the pipeline's shard workers each keep the flows of their own
/// shards), in [`FlowTable::top`]'s order. It is the answer `top` gives on
/// one table holding all of them: that order is total, so the best `n` of
/// the union are among the best `n` of each part, and sorting those picks
/// the same ones in the same order whatever the parts were. It is the top
/// list of the tables' merged summaries ([`TableSummary::merge`]).
///
/// ```
/// use flowsieve::dissect::FlowKey;
/// use flowsieve::hash::flow_hash;
/// use flowsieve::ingest::Timestamp;
/// use flowsieve::truth::{FlowTable, top_of};
/// let (mut a, mut b, mut all) = (FlowTable::default(), FlowTable::default(), FlowTable::default());
/// for (port, packets) in [(1u16, 3), (2, 5), (3, 4), (4, 1)] {
///     let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], port, 80, 6);
///     let part = if port % 2 == 0 { &mut a } else { &mut b };
///     for _ in 0..packets {
///         part.record(k, flow_hash(&k), 0, Timestamp::ZERO, 100, 100);
///         all.record(k, flow_hash(&k), 0, Timestamp::ZERO, 100, 100);
///     }
/// }
/// assert_eq!(top_of(&[a, b], 3), all.top(3));
/// ```
pub fn top_of(tables: &[FlowTable], n: usize) -> Vec<FlowEntry> {
    TableSummary::merge(tables.iter().map(|t| t.summary(n, 0)), n).top
}

/// The entry position an index value stands for (the value is the position
/// plus one).
#[inline]
fn position(at: NonZeroUsize) -> usize {
    at.get() - 1
}

/// The order of [`FlowTable::top`]: more packets first, then more bytes,
/// then by key (version, addresses, ports, protocol).
fn rank(a: &FlowEntry, b: &FlowEntry) -> Ordering {
    rank_by(
        (a.stats.packets, a.stats.wire_bytes, &a.key),
        (b.stats.packets, b.stats.wire_bytes, &b.key),
    )
}

/// [`rank`] of two flows given as their packets, wire bytes and key.
fn rank_by(a: (u64, u64, &FlowKey), b: (u64, u64, &FlowKey)) -> Ordering {
    let ((a_packets, a_bytes, a), (b_packets, b_bytes, b)) = (a, b);
    b_packets
        .cmp(&a_packets)
        .then(b_bytes.cmp(&a_bytes))
        .then(a.version().cmp(&b.version()))
        .then(a.src_bits().cmp(&b.src_bits()))
        .then(a.dst_bits().cmp(&b.dst_bits()))
        .then(a.sport().cmp(&b.sport()))
        .then(a.dport().cmp(&b.dport()))
        .then(a.proto().cmp(&b.proto()))
}

/// A stored entry ordered by [`rank`]: the greatest is the one ranked
/// last.
struct Ranked<'a>(&'a StoredFlow);

impl Ord for Ranked<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.0, other.0);
        rank_by(
            (a.packets, a.wire_bytes, &a.key),
            (b.packets, b.wire_bytes, &b.key),
        )
    }
}

impl PartialOrd for Ranked<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Ranked<'_> {}
