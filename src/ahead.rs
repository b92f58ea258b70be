//! Packets dissected, classified and hashed ahead of the reader, by helper
//! threads that each take a share of one classic pcap file
//! (`replay --dissect-threads N`).
//!
//! Why: the replay's reader is the one thread every packet passes through.
//! Per packet it frames the record, dissects it, classifies and hashes its
//! key, then counts it and hands it to the sink; the engine's workers scale
//! with cores, the reader does not, and with enough workers it sets the
//! pace. Dissecting and hashing is the part of its work that depends on
//! nothing but the packet's bytes, so it can be done anywhere, in any
//! order. Everything that depends on order (counts, anomalies, errors, the
//! packet budget, the sink) stays on the reader, which still walks every
//! record itself.
//!
//! How the work is shared without being trusted: the file is cut into
//! [`SHARE`]-byte shares. A helper takes the next share, guesses where its
//! first record starts ([`RecordShape::first_boundary`]; the first share
//! starts after the file header), and walks records from there to the
//! share's end, preparing each. The reader, for each record it frames
//! itself, takes the prepared result only when a helper walked a record
//! starting at the very same offset: the same bytes, so the same key, hash
//! and class. A wrong guess, a record the helpers' walk would not take, or
//! a damaged stretch costs only a *miss*: the reader prepares that record
//! itself, as it does without helpers. No reported figure can depend on the
//! helpers, only the work does ([`crate::report::FileSummary::dissected_ahead`]
//! says how much of it they did).
//!
//! The helpers read the reader's own map (no second map, no copy); they stay
//! at most two shares each, and 17 in all, ahead of it, so the pages they
//! touch are the ones the reader is about to read, and what they add to the
//! resident memory is bounded (about 25 MiB, however many helpers).

use crate::class::{ClassId, Classifier};
use crate::dissect::{Dissector, FlowKey, SkipReason};
use crate::hash::FlowHasher;
use crate::ingest::split::RecordShape;
use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

/// Bytes of the file per share: about 7,000 packets of an average backbone
/// trace, so that a share's set-up (a boundary guess, two channel messages)
/// is nothing per packet, while the helpers' lead over the reader (a few
/// shares) stays within a few MiB of the map.
pub const SHARE: usize = 1 << 20;

/// Shares a helper may have finished or be working on ahead of the reader.
const IN_FLIGHT_PER_HELPER: usize = 2;

/// Shares in flight at most, whatever the number of helpers: each holds
/// about half a MiB of prepared entries and keeps a MiB of the map
/// resident ahead of the reader, so this bounds what helpers add to the
/// resident memory (about 25 MiB) however many there are.
const MAX_IN_FLIGHT: usize = 17;

/// The most helper threads a replay starts.
pub const MAX_DISSECT_THREADS: usize = 64;

/// Records a helper walks between looks at the stop flag.
const STOP_CHECK_EVERY: usize = 1024;

/// What a helper prepared for one record: what the reader would have
/// computed from its bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Prepared {
    /// The packet has a flow key.
    Keyed {
        key: FlowKey,
        hash: u64,
        class: ClassId,
        ports_truncated: bool,
    },
    /// The packet has no key, for this reason.
    Skipped(SkipReason),
}

/// A record's offset in the file and what was prepared for it.
struct Entry {
    record: usize,
    prepared: Prepared,
}

/// One share as a helper walked it: records starting in `start..end`.
struct Share {
    index: usize,
    start: usize,
    end: usize,
    entries: Vec<Entry>,
}

/// What every helper reads.
struct Work {
    file: &'static [u8],
    shape: RecordShape,
    dissector: Dissector,
    classifier: Classifier,
    hasher: FlowHasher,
    /// Bytes per share, and how many shares the file has.
    share: usize,
    shares: usize,
    next: AtomicUsize,
    stop: AtomicBool,
}

/// The reader's side: the shares in file order, and the lookup by offset.
/// Dropping it stops and joins the helpers.
pub(crate) struct Ahead {
    work: Arc<Work>,
    helpers: Vec<JoinHandle<()>>,
    /// Empty entry lists for the helpers to fill; each is a permit to be
    /// one share ahead.
    spare: Option<Sender<Vec<Entry>>>,
    done: Receiver<Share>,
    /// Shares that arrived before the reader wanted them, by index modulo
    /// their number.
    early: Vec<Option<Share>>,
    current: Option<Share>,
    cursor: usize,
    /// The index of the share after `current`.
    wanted: usize,
    /// Records the reader took prepared.
    pub(crate) hits: u64,
}

impl Ahead {
    /// Starts `helpers` threads (at most [`MAX_DISSECT_THREADS`]) that
    /// prepare the records of `file`, a whole classic pcap file of shape
    /// `shape`, as the reader would with `dissector`, `classifier` and
    /// `hasher`, in shares of `share` bytes. Returns `None` when not one could be started: the reader
    /// then prepares every record itself, as without helpers.
    ///
    /// # Safety
    /// `file`'s bytes must stay mapped, and unchanged wherever the reader
    /// lends a record, until the returned value is dropped (its drop joins
    /// the helpers). A [`crate::ingest::TraceReader`]'s map does: it lives
    /// as long as the reader, is never written, and a truncation replaces
    /// only pages past the file's new end, where the reader lends nothing.
    pub(crate) unsafe fn start(
        file: &[u8],
        shape: RecordShape,
        dissector: Dissector,
        classifier: &Classifier,
        hasher: FlowHasher,
        helpers: usize,
        share: usize,
    ) -> Option<Ahead> {
        // SAFETY: the caller keeps these bytes valid until this `Ahead` is
        // dropped, and its drop joins every thread that reads them.
        let file: &'static [u8] = unsafe { std::slice::from_raw_parts(file.as_ptr(), file.len()) };
        let body = file.len().saturating_sub(shape.first_record());
        let share = share.max(1);
        let work = Arc::new(Work {
            file,
            shape,
            dissector,
            classifier: classifier.clone(),
            hasher,
            share,
            shares: body.div_ceil(share),
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let helpers = helpers.clamp(1, MAX_DISSECT_THREADS);
        let in_flight = (helpers * IN_FLIGHT_PER_HELPER + 1).min(MAX_IN_FLIGHT);
        let (spare, permits) = bounded::<Vec<Entry>>(in_flight);
        let (finished, done) = unbounded::<Share>();
        let mut handles = Vec::with_capacity(helpers);
        for i in 0..helpers {
            let (work, permits, finished) = (work.clone(), permits.clone(), finished.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("dissect-{i}"))
                .spawn(move || help(&work, &permits, &finished));
            if let Ok(h) = spawned {
                handles.push(h);
            }
        }
        if handles.is_empty() {
            return None;
        }
        for _ in 0..in_flight - 1 {
            // Cannot fail while a helper runs: the channel has room for
            // `in_flight`; if every helper is gone, the reader's first
            // lookup finds no share and prepares records itself.
            let _ = spare.send(Vec::new());
        }
        Some(Ahead::reading(work, handles, spare, done, in_flight))
    }

    /// The reader's side of `helpers` working on `work`: permits go back
    /// through `spare`, shares come in through `done`, at most
    /// `in_flight` of them at once.
    fn reading(
        work: Arc<Work>,
        helpers: Vec<JoinHandle<()>>,
        spare: Sender<Vec<Entry>>,
        done: Receiver<Share>,
        in_flight: usize,
    ) -> Ahead {
        Ahead {
            work,
            helpers,
            spare: Some(spare),
            done,
            early: (0..in_flight).map(|_| None).collect(),
            current: None,
            cursor: 0,
            wanted: 0,
            hits: 0,
        }
    }

    /// What a helper prepared for the record whose captured bytes are
    /// `data`, lent from the same file, or `None` when no helper walked a
    /// record at that offset (the reader then prepares it itself).
    ///
    /// The reader's records come in file order, so this walks the shares
    /// and their entries forward only.
    #[inline]
    pub(crate) fn lookup(&mut self, data: &[u8]) -> Option<&Prepared> {
        let offset = (data.as_ptr() as usize).checked_sub(self.work.file.as_ptr() as usize)?;
        if offset > self.work.file.len() {
            return None;
        }
        let record = offset.checked_sub(self.work.shape.header_len())?;
        while self.current.as_ref().is_none_or(|s| record >= s.end) {
            if !self.advance() {
                return None;
            }
        }
        let share = self.current.as_ref()?;
        if record < share.start {
            return None;
        }
        let entries = &share.entries;
        while entries.get(self.cursor).is_some_and(|e| e.record < record) {
            self.cursor += 1;
        }
        let e = entries.get(self.cursor).filter(|e| e.record == record)?;
        self.cursor += 1;
        self.hits += 1;
        Some(&e.prepared)
    }

    /// Moves on to the next share, handing the current one's list back;
    /// false when there is none (past the last share, or the helpers are
    /// gone).
    #[cold]
    fn advance(&mut self) -> bool {
        if let Some(mut s) = self.current.take() {
            s.entries.clear();
            if let Some(spare) = &self.spare {
                let _ = spare.send(s.entries);
            }
        }
        self.cursor = 0;
        let want = self.wanted;
        if want >= self.work.shares {
            return false;
        }
        self.wanted += 1;
        let slots = self.early.len();
        loop {
            if let Some(s) = self.early[want % slots].take_if(|s| s.index == want) {
                self.current = Some(s);
                return true;
            }
            match self.done.recv() {
                Ok(s) => {
                    let slot = s.index % slots;
                    self.early[slot] = Some(s);
                }
                Err(_) => return false,
            }
        }
    }
}

impl Drop for Ahead {
    /// Stops the helpers (they end their share early and find no more
    /// permits) and joins them: after this no thread reads the file.
    fn drop(&mut self) {
        self.work.stop.store(true, Ordering::Relaxed);
        self.spare = None;
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}

/// A helper: takes a permit, then the next share, walks and prepares it,
/// and sends it; until the shares, the permits or the reader run out.
fn help(work: &Work, permits: &Receiver<Vec<Entry>>, finished: &Sender<Share>) {
    while let Ok(mut entries) = permits.recv() {
        if work.stop.load(Ordering::Relaxed) {
            return;
        }
        let index = work.next.fetch_add(1, Ordering::Relaxed);
        if index >= work.shares {
            return;
        }
        let (start, end) = walk_share(work, index, &mut entries);
        if finished
            .send(Share {
                index,
                start,
                end,
                entries,
            })
            .is_err()
        {
            return;
        }
    }
}

/// Walks share `index` into `entries`: from its first plausible record
/// to the first record that starts at or past its end (or that the walk
/// would not take). Returns where the walk started and ended.
fn walk_share(work: &Work, index: usize, entries: &mut Vec<Entry>) -> (usize, usize) {
    let file = work.file;
    let shape = &work.shape;
    let share_start = shape.first_record() + index * work.share;
    let share_end = share_start.saturating_add(work.share).min(file.len());
    let start = if index == 0 {
        share_start
    } else {
        let looks_like_a_packet =
            |data: &[u8]| work.dissector.dissect(shape.link_type(), data).is_ok();
        match shape.first_boundary(file, share_start, share_end, looks_like_a_packet) {
            Some(at) => at,
            None => return (share_end, share_end),
        }
    };
    let link_type = shape.link_type();
    let mut at = start;
    while at < share_end {
        let Some(r) = shape.record_at(file, at) else {
            break;
        };
        let from = at + r.data_start;
        let data = file.get(from..from + r.caplen).unwrap_or(&[]);
        let prepared = match work.dissector.dissect(link_type, data) {
            Ok(d) => Prepared::Keyed {
                key: d.key,
                hash: work.hasher.hash(&d.key),
                class: work.classifier.classify_on(&d.key, None),
                ports_truncated: d.ports_truncated,
            },
            Err(reason) => Prepared::Skipped(reason),
        };
        entries.push(Entry {
            record: at,
            prepared,
        });
        at += r.total;
        if entries.len().is_multiple_of(STOP_CHECK_EVERY) && work.stop.load(Ordering::Relaxed) {
            break;
        }
    }
    (start, at)
}

#[doc(hidden)]
pub mod testing {
    //! The lookup alone, on shares made by hand, for `tests/ahead.rs`: the
    //! one place where a prepared record is matched to the reader's, and
    //! where a mistake would hand the sink another packet's key. The
    //! integration tests there run real helpers, whose guesses on real and
    //! synthetic traces are almost always right, so they rarely reach the
    //! branches a wrong guess takes. Not an interface.
    use super::*;

    /// One share a helper might have sent: its index, where its walk
    /// started and ended, and the offsets of the records it walked.
    pub type HandMadeShare<'a> = (usize, usize, usize, &'a [usize]);

    /// Looks up, in order, the records starting at each of `records` (with
    /// 16-byte headers and 4 bytes of data, in `file`, a classic pcap
    /// file), as the reader would, in an `Ahead` whose helpers sent
    /// `shares` (in any order; no helper thread runs). Returns, for each,
    /// the offset of the helper's record it was matched to, if any; and
    /// the hits counted.
    pub fn look_up(
        file: &'static [u8],
        shares: &[HandMadeShare<'_>],
        records: &[usize],
    ) -> (Vec<Option<usize>>, u64) {
        let shape = RecordShape::of_file(file).expect("a pcap header");
        let in_flight = shares.len() + 1;
        let (spare, _permits) = bounded(in_flight);
        let (finished, done) = unbounded();
        for &(index, start, end, offsets) in shares {
            let entries = offsets
                .iter()
                .map(|&record| Entry {
                    record,
                    prepared: Prepared::Keyed {
                        key: FlowKey::v4([0; 4], [0; 4], 0, 0, 0),
                        hash: record as u64,
                        class: 0,
                        ports_truncated: false,
                    },
                })
                .collect();
            let _ = finished.send(Share {
                index,
                start,
                end,
                entries,
            });
        }
        let work = Arc::new(Work {
            file,
            shape,
            dissector: Dissector::new(false),
            classifier: Classifier::ports(),
            hasher: FlowHasher::new(crate::hash::HashKey::FIXED),
            share: 1,
            shares: shares.len(),
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let mut ahead = Ahead::reading(work, Vec::new(), spare, done, in_flight);
        let found = records
            .iter()
            .map(|&r| {
                let data = file.get(r + 16..r + 20).unwrap_or(&[]);
                ahead.lookup(data).map(|p| match p {
                    Prepared::Keyed { hash, .. } => *hash as usize,
                    Prepared::Skipped(_) => usize::MAX,
                })
            })
            .collect();
        (found, ahead.hits)
    }
}
