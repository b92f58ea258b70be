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

/// One packet waiting to be recorded (here, or in the pipeline's shard
/// workers when they keep the table: [`crate::pipeline`]'s engine).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    pub(crate) key: FlowKey,
    pub(crate) hash: u64,
    pub(crate) ts: Timestamp,
    pub(crate) wire_len: u32,
    pub(crate) captured_len: u32,
    pub(crate) class: ClassId,
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
    for chunk in held.chunks(BATCH) {
        for h in chunk {
            table.prefetch_slot(h.hash);
        }
        let mut located = [None; BATCH];
        for (at, h) in located.iter_mut().zip(chunk) {
            *at = table.locate(h.hash);
        }
        for (h, at) in chunk.iter().zip(located) {
            let counted =
                at.is_some_and(|p| table.record_at(p, &h.key, h.ts, h.wire_len, h.captured_len));
            if !counted {
                table.record(h.key, h.hash, h.class, h.ts, h.wire_len, h.captured_len);
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
