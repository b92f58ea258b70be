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
        Some(Ahead {
            work,
            helpers: handles,
            spare: Some(spare),
            done,
            early: (0..in_flight).map(|_| None).collect(),
            current: None,
            cursor: 0,
            wanted: 0,
            hits: 0,
        })
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

#[cfg(test)]
mod tests {
    //! The lookup alone, on shares made by hand: the one place where a
    //! prepared record is matched to the reader's, and where a mistake
    //! would hand the sink another packet's key. (The integration tests in
    //! `tests/ahead.rs` run real helpers, whose guesses on real and
    //! synthetic traces are almost always right, so they rarely reach the
    //! branches a wrong guess takes.)
    use super::*;

    fn keyed(n: u8) -> Prepared {
        Prepared::Keyed {
            key: FlowKey::v4([10, 0, 0, n], [10, 0, 0, 1], 1, 2, 6),
            hash: u64::from(n),
            class: 0,
            ports_truncated: false,
        }
    }

    /// An `Ahead` over `file` whose helpers already sent `shares` (index,
    /// start, end, entry offsets); no helper thread runs.
    fn ahead_over(file: &'static [u8], shares: &[(usize, usize, usize, &[usize])]) -> Ahead {
        let shape = RecordShape::of_file(file).expect("a pcap header");
        let (spare, _permits) = bounded(8);
        let (finished, done) = unbounded();
        for &(index, start, end, offsets) in shares {
            let entries = offsets
                .iter()
                .map(|&record| Entry {
                    record,
                    prepared: keyed(record as u8),
                })
                .collect();
            finished
                .send(Share {
                    index,
                    start,
                    end,
                    entries,
                })
                .unwrap();
        }
        Ahead {
            work: Arc::new(Work {
                file,
                shape,
                dissector: Dissector::new(false),
                classifier: Classifier::ports(),
                hasher: FlowHasher::new(crate::hash::HashKey::FIXED),
                share: 100,
                shares: shares.len(),
                next: AtomicUsize::new(0),
                stop: AtomicBool::new(false),
            }),
            helpers: Vec::new(),
            spare: Some(spare),
            done,
            early: (0..4).map(|_| None).collect(),
            current: None,
            cursor: 0,
            wanted: 0,
            hits: 0,
        }
    }

    /// The data of the record starting at `record` (16-byte headers).
    fn data_of(file: &[u8], record: usize) -> &[u8] {
        &file[record + 16..record + 20]
    }

    fn hash_of(p: Option<&Prepared>) -> Option<u64> {
        p.map(|p| match p {
            Prepared::Keyed { hash, .. } => *hash,
            Prepared::Skipped(_) => u64::MAX,
        })
    }

    #[test]
    fn only_a_record_at_the_same_offset_is_taken() {
        let mut bytes = vec![0u8; 400];
        bytes[..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        let file: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        // Share 0 walked 24, 60, 96 (aligned); share 1 guessed wrong and
        // walked 154, 190 while the reader's records are 150, 186, 222;
        // share 2 walked 222.
        let mut a = ahead_over(
            file,
            &[
                (1, 154, 222, &[154, 190]),
                (0, 24, 132, &[24, 60, 96]),
                (2, 222, 400, &[222]),
            ],
        );
        assert_eq!(hash_of(a.lookup(data_of(file, 24))), Some(24));
        assert_eq!(hash_of(a.lookup(data_of(file, 60))), Some(60));
        assert_eq!(hash_of(a.lookup(data_of(file, 96))), Some(96));
        // Between share 0's end and share 1's first guessed record.
        assert_eq!(hash_of(a.lookup(data_of(file, 140))), None);
        // A helper's record four bytes on is another record.
        assert_eq!(hash_of(a.lookup(data_of(file, 150))), None);
        assert_eq!(hash_of(a.lookup(data_of(file, 186))), None);
        // The next share, arrived before it was wanted, is found in order.
        assert_eq!(hash_of(a.lookup(data_of(file, 222))), Some(222));
        // Past every share, and bytes from elsewhere: none.
        assert_eq!(hash_of(a.lookup(data_of(file, 300))), None);
        assert_eq!(hash_of(a.lookup(&[1, 2, 3])), None);
        assert_eq!(a.hits, 4);
    }
}
