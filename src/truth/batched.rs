//! Recording packets into the exact table a batch at a time.
//!
//! Why this exists: with 100 k flows the table is about 13 MB, beyond L2, so
//! most packets' probes miss the cache. When the source thread records each
//! packet as it reads it, every miss sits between a read, a dissection and a
//! dispatch that fill the out-of-order window, and the miss is paid in full
//! (a quarter of the default job's samples on the benchmark trace). Held
//! back and recorded [`BATCH`] at a time in a tight loop, the probes of
//! consecutive packets are independent, so the core overlaps their misses.
//! In a loop of its own the table costs about 30 ns a packet (the `truth`
//! criterion bench); in the default job the flush measured 14-26 % of the
//! samples, and the job 9 % less wall time (BENCHMARKS.md, fifth round).
//!
//! Nothing about the result changes: the table's statistics are sums,
//! minima and maxima per flow, which do not depend on when a packet is
//! added, and the order in which packets reach the table is the order they
//! were pushed. The table must not be read while packets are held back,
//! which the borrow enforces: the recorder holds the table mutably until it
//! is dropped (or [`BatchedRecorder::flush`]ed), and dropping records what
//! is left.

use super::FlowTable;
use crate::class::ClassId;
use crate::dissect::FlowKey;
use crate::ingest::Timestamp;
use crossbeam_channel::{Receiver, Sender};

/// How many packets are held back before they are recorded. 64 records are
/// about 5 KB, well inside L1; 16 and 256 measured the same.
pub const BATCH: usize = 64;

/// One packet waiting to be recorded here, or on the table's own thread
/// ([`super::record_on_own_thread`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    pub(crate) key: FlowKey,
    pub(crate) hash: u64,
    pub(crate) ts: Timestamp,
    pub(crate) wire_len: u32,
    pub(crate) captured_len: u32,
    pub(crate) class: ClassId,
}

/// A packet as the exact table counts it: whatever holds these six
/// figures can be recorded by [`record_chunk`].
///
/// Why a trait and not one struct: the pipeline's shard workers, when
/// they keep the table, already have each packet's hash, class and wire
/// length in its `PacketRecord`, and take only the rest beside it
/// ([`RecordTruth`]); the source thread writes every byte of that, and the
/// worker reads it back, so the bytes not repeated are bytes neither
/// thread waits for.
pub(crate) trait TablePacket {
    fn key(&self) -> &FlowKey;
    fn hash(&self) -> u64;
    fn class(&self) -> ClassId;
    fn ts(&self) -> Timestamp;
    fn wire_len(&self) -> u32;
    fn captured_len(&self) -> u32;
}

impl TablePacket for &Held {
    #[inline(always)]
    fn key(&self) -> &FlowKey {
        &self.key
    }
    #[inline(always)]
    fn hash(&self) -> u64 {
        self.hash
    }
    #[inline(always)]
    fn class(&self) -> ClassId {
        self.class
    }
    #[inline(always)]
    fn ts(&self) -> Timestamp {
        self.ts
    }
    #[inline(always)]
    fn wire_len(&self) -> u32 {
        self.wire_len
    }
    #[inline(always)]
    fn captured_len(&self) -> u32 {
        self.captured_len
    }
}

/// What the exact table needs of a packet beyond what its pipeline record
/// carries (the hash, the class and the wire length): the key, the
/// timestamp and the captured length. The pipeline's source writes one
/// beside each record when the shard workers keep the table.
///
/// 56 bytes, where the whole packet a [`BatchedRecorder`] holds is 80
/// (and 32 of those are already in the record): the timestamp is kept as
/// its two parts, since a [`Timestamp`] field would pad to 16 bytes and
/// this struct to 64. In the default job on the benchmark trace this cut
/// the bytes the source writes and a worker reads back by 24 a packet,
/// and the run's CPU by up to 6 % (BENCHMARKS.md, thirty-second round).
///
/// ```
/// use flowsieve::dissect::FlowKey;
/// use flowsieve::ingest::Timestamp;
/// use flowsieve::truth::RecordTruth;
/// assert_eq!(std::mem::size_of::<RecordTruth>(), 56);
/// let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 17);
/// let ts = Timestamp::new(-3, 999_999_999).unwrap();
/// let t = RecordTruth::new(k, ts, 1514);
/// assert_eq!((*t.key(), t.ts(), t.captured_len()), (k, ts, 1514));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RecordTruth {
    key: FlowKey,
    secs: i64,
    nanos: u32,
    captured_len: u32,
}

impl RecordTruth {
    /// The parts of a packet a record lacks.
    #[inline(always)]
    pub fn new(key: FlowKey, ts: Timestamp, captured_len: u32) -> RecordTruth {
        RecordTruth {
            key,
            secs: ts.secs(),
            nanos: ts.subsec_nanos(),
            captured_len,
        }
    }

    /// The flow key.
    pub fn key(&self) -> &FlowKey {
        &self.key
    }

    /// The capture timestamp, as it was given.
    #[inline(always)]
    pub fn ts(&self) -> Timestamp {
        // `nanos` came from a `Timestamp`, so it is below one second.
        Timestamp::from_checked(self.secs, self.nanos)
    }

    /// The captured length.
    #[inline(always)]
    pub fn captured_len(&self) -> u32 {
        self.captured_len
    }
}

/// Records packets into a [`FlowTable`], [`BATCH`] at a time, in the order
/// they are pushed.
///
/// ```
/// use flowsieve::dissect::FlowKey;
/// use flowsieve::hash::flow_hash;
/// use flowsieve::ingest::Timestamp;
/// use flowsieve::truth::{BatchedRecorder, FlowTable};
/// let mut table = FlowTable::default();
/// let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 17);
/// {
///     let mut r = BatchedRecorder::new(&mut table);
///     for _ in 0..3 {
///         r.record(k, flow_hash(&k), 0, Timestamp::ZERO, 100, 64);
///     }
/// } // dropped: everything held back is recorded
/// assert_eq!(table.get(&k).unwrap().packets, 3);
/// ```
///
/// [`super::record_on_own_thread`] lends one whose batches go to the
/// table's own thread instead.
pub struct BatchedRecorder<'t> {
    held: Vec<Held>,
    /// Packets held back before they are recorded or sent.
    limit: usize,
    target: Target<'t>,
}

/// Where a recorder's batches go.
enum Target<'t> {
    /// Into the table, on this thread.
    Table(&'t mut FlowTable),
    /// To the table's own thread (`None` once the channel is closed), with
    /// the emptied batches it hands back.
    Thread {
        to_table: Option<Sender<Vec<Held>>>,
        free: Receiver<Vec<Held>>,
    },
}

impl<'t> BatchedRecorder<'t> {
    /// A recorder into `table`.
    pub fn new(table: &'t mut FlowTable) -> BatchedRecorder<'t> {
        BatchedRecorder::with_target(Target::Table(table), BATCH)
    }

    /// A recorder whose batches of `limit` packets go to the table's own
    /// thread over `to_table`; `free` brings emptied batches back.
    pub(super) fn to_thread(
        to_table: Sender<Vec<Held>>,
        free: Receiver<Vec<Held>>,
        limit: usize,
    ) -> BatchedRecorder<'t> {
        BatchedRecorder::with_target(
            Target::Thread {
                to_table: Some(to_table),
                free,
            },
            limit,
        )
    }

    fn with_target(target: Target<'t>, limit: usize) -> BatchedRecorder<'t> {
        BatchedRecorder {
            held: Vec::with_capacity(limit),
            limit,
            target,
        }
    }

    /// Counts one packet, as [`FlowTable::record`] does, possibly later.
    #[inline]
    pub fn record(
        &mut self,
        key: FlowKey,
        hash: u64,
        class: ClassId,
        ts: Timestamp,
        wire_len: u32,
        captured_len: u32,
    ) {
        self.held.push(Held {
            key,
            hash,
            ts,
            wire_len,
            captured_len,
            class,
        });
        if self.held.len() >= self.limit {
            self.flush();
        }
    }

    /// Records every packet held back (or hands them to the table's own
    /// thread, which records them before its scope ends).
    ///
    /// Two passes. The first only locates each held packet's entry in the
    /// index and prefetches it (`FlowTable::locate`); the second records
    /// them in order, into the located entry when its key matches, and
    /// through [`FlowTable::record`] otherwise (a flow new to the table, or
    /// a different flow with the same hash). In one pass the entry load of
    /// each record is the first thing its key compare needs, and the branch
    /// on that compare, with the update behind it, keeps the out-of-order
    /// window from reaching more than a few records ahead: the annotated
    /// profile put 57 % of the flush's samples on that one load. Located a
    /// batch ahead, the 64 misses are in flight together, and a packet of a
    /// known flow probes the index once. `--stages none` with truth on took
    /// about 10 % less wall time (BENCHMARKS.md, seventh round); a sliding
    /// distance of 8, 16 or 32 records, or a prefetch as each packet is
    /// pushed, measured no better than the plain two passes.
    pub fn flush(&mut self) {
        if self.held.is_empty() {
            return;
        }
        match &mut self.target {
            Target::Table(table) => {
                record_held(table, &self.held);
                self.held.clear();
            }
            Target::Thread { to_table, free } => {
                let fresh = free
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(self.limit));
                let full = std::mem::replace(&mut self.held, fresh);
                if let Some(to_table) = to_table {
                    // The table's thread only stops when this sender is
                    // dropped, so a send fails only if that thread panicked;
                    // the panic is raised again when its scope joins it.
                    let _ = to_table.send(full);
                }
            }
        }
    }
}

/// Records `held` into `table` in order, [`BATCH`] at a time, in the two
/// passes [`BatchedRecorder::flush`] describes.
pub(crate) fn record_held(table: &mut FlowTable, held: &[Held]) {
    record_chunk(table, held.iter());
}

/// Records `packets` into `table` in order, [`BATCH`] at a time, each
/// [`BATCH`] in the two passes [`BatchedRecorder::flush`] describes: every
/// packet's index slot fetched, then located, then recorded. `packets` is
/// walked three times a [`BATCH`] (two clones, then itself), so it should
/// be a cheap iterator over borrowed packets.
///
/// The cutting into [`BATCH`]es is done here, for any length, so that
/// every packet takes the same path: before, callers cut their packets
/// and a longer list recorded the rest one at a time by a path no caller
/// took.
#[inline]
pub(crate) fn record_chunk<P: TablePacket>(
    table: &mut FlowTable,
    mut packets: impl Iterator<Item = P> + Clone,
) {
    loop {
        let mut any = false;
        for p in packets.clone().take(BATCH) {
            any = true;
            table.prefetch_slot(p.hash());
        }
        if !any {
            return;
        }
        let mut located = [None; BATCH];
        for (at, p) in located.iter_mut().zip(packets.clone()) {
            *at = table.locate(p.hash());
        }
        // `located` first: the zip then stops after its last entry without
        // taking a packet of the next batch.
        for (at, p) in located.into_iter().zip(packets.by_ref()) {
            let counted = at.is_some_and(|at| {
                table.record_at(at, p.key(), p.ts(), p.wire_len(), p.captured_len())
            });
            if !counted {
                table.record(
                    *p.key(),
                    p.hash(),
                    p.class(),
                    p.ts(),
                    p.wire_len(),
                    p.captured_len(),
                );
            }
        }
    }
}

impl Drop for BatchedRecorder<'_> {
    fn drop(&mut self) {
        self.flush();
        // Closing the channel ends the table's thread's loop.
        if let Target::Thread { to_table, .. } = &mut self.target {
            *to_table = None;
        }
    }
}
