//! Recording packets into the exact table on a thread of its own.
//!
//! Why this exists: in the default job (truth on, every stage) the source
//! thread reads, dissects, hashes, records into the exact table and
//! dispatches, and it is the thread the whole run waits for: on the
//! benchmark trace it carried 54 % of the samples, the workers 46 %, with
//! the table's flush alone 12 % (BENCHMARKS.md, eighth round), and with no
//! stages it is nearly all of the run. The table
//! needs nothing from the packets but the order they come in, so the source
//! hands it batches of [`SEND_BATCH`] packets over a bounded channel (a
//! [`BatchedRecorder`] whose batches go there) and a scoped thread records
//! them, through the same two-pass flush. The table sees the same packets in the same
//! order, so every figure read from it afterwards is the same; the source
//! thread loses the table's cache misses.
//!
//! A thread that has no core to itself only adds hand-offs, so a replay
//! uses this only when the machine has two or more CPUs
//! ([`crate::replay::ReplayConfig::truth_thread`]), and a pipeline run only
//! when a core is left beside the source and the busy workers
//! ([`crate::pipeline::FileSource::new`]). With every stage running on
//! two cores it measured no faster; with no stages, a third less wall time
//! on the benchmark trace.
//!
//! ```
//! use flowsieve::dissect::FlowKey;
//! use flowsieve::hash::flow_hash;
//! use flowsieve::ingest::Timestamp;
//! use flowsieve::truth::{FlowTable, record_on_own_thread};
//! let mut table = FlowTable::default();
//! let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 17);
//! let pushed = record_on_own_thread(&mut table, |r| {
//!     for _ in 0..3 {
//!         r.record(k, flow_hash(&k), 0, Timestamp::ZERO, 100, 64);
//!     }
//!     3
//! }); // returns once the table's thread has recorded everything
//! assert_eq!(pushed, 3);
//! assert_eq!(table.get(&k).unwrap().packets, 3);
//! ```

use super::batched::{Held, record_held};
use super::{BatchedRecorder, FlowTable};
use crossbeam_channel::bounded;

/// Packets a batch hands to the table's thread: 1024 records of 80 bytes
/// are 80 KiB, so a batch stays in L2 between the two threads, and the
/// hand-off costs one channel operation per thousand packets.
pub const SEND_BATCH: usize = 1024;

/// Batches in flight between the source and the table's thread. The bound
/// makes a source that outruns the table wait instead of queueing without
/// limit (at most `QUEUE * SEND_BATCH` packets, 640 KiB, are held).
const QUEUE: usize = 8;

/// Runs `body` with a recorder whose packets a scoped thread records into
/// `table`, in order; returns `body`'s result once that thread has recorded
/// every packet, so the table is complete when this returns. When no
/// thread can be started the recorder records on the caller's thread, with
/// the same result.
///
/// A panic on the table's thread (a bug: recording cannot fail) is raised
/// again here.
pub fn record_on_own_thread<R>(
    table: &mut FlowTable,
    body: impl FnOnce(&mut BatchedRecorder<'_>) -> R,
) -> R {
    std::thread::scope(|scope| {
        // The table goes to the thread only once it is known to run, so
        // that a failed start leaves it here for the fallback.
        let (table_to_thread, table_arrives) = bounded::<&mut FlowTable>(1);
        let (to_table, batches) = bounded::<Vec<Held>>(QUEUE);
        let (give_back, free) = bounded::<Vec<Held>>(QUEUE + 2);
        let recording = std::thread::Builder::new()
            .name("flowsieve-truth".into())
            .spawn_scoped(scope, move || {
                let Ok(table) = table_arrives.recv() else {
                    return;
                };
                for mut batch in batches {
                    record_held(table, &batch);
                    batch.clear();
                    // A full free list only means the source allocated
                    // more batches than it reuses.
                    let _ = give_back.try_send(batch);
                }
            });
        let mut recorder = match &recording {
            Ok(_) => {
                let _ = table_to_thread.send(table);
                BatchedRecorder::to_thread(to_table, free, SEND_BATCH)
            }
            Err(_) => BatchedRecorder::new(table),
        };
        let out = body(&mut recorder);
        drop(recorder);
        if let Ok(handle) = recording
            && let Err(panic) = handle.join()
        {
            std::panic::resume_unwind(panic);
        }
        out
    })
}
