//! Packets dissected, classified and hashed ahead of the reader, by helper
//! threads that each take a share of one classic pcap or pcapng file
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
//! first record starts ([`RecordShape::first_boundary`] for classic pcap,
//! [`BlockShape::first_boundary`] for pcapng; the first share starts after
//! the file's header), and walks records from there to the share's end,
//! preparing each. What a record's preparation yields is a function of its
//! captured bytes, its link type and (where the classifier reads it) its
//! interface's name, and nothing else. So the reader, for each packet it
//! frames itself, takes the prepared result only when a helper walked a
//! record starting at the very same offset, with captured bytes of the
//! same length there, on an interface it took for the same link type and
//! name: the same inputs, so the same key, hash and class. A wrong guess, a
//! record the helpers' walk would not take, an interface of a later pcapng
//! section, or a damaged stretch costs only a *miss*: the reader prepares
//! that record itself, as it does without helpers. No reported figure can
//! depend on the helpers, only the work does
//! ([`crate::report::FileSummary::dissected_ahead`] says how much of it
//! they did).
//!
//! The helpers read the reader's own map (no second map, no copy); they stay
//! at most two shares each, and 17 in all, ahead of it, so the pages they
//! touch are the ones the reader is about to read, and what they add to the
//! resident memory is bounded (about 25 MiB, however many helpers).

use crate::class::{ClassId, Classifier};
use crate::dissect::{Dissector, FlowKey, SkipReason};
use crate::hash::FlowHasher;
use crate::ingest::LinkType;
use crate::ingest::split::RecordShape;
use crate::ingest::split_ng::BlockShape;
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

/// A record's offset in the file, the inputs its preparation read besides
/// its offset, and what was prepared for it.
struct Entry {
    record: usize,
    /// Captured bytes the preparation read.
    caplen: u32,
    /// The link type the record was dissected as.
    link_type: LinkType,
    /// The interface whose name it was classified on: an index into
    /// the first section's interfaces ([`Layout::name`]), [`NO_INTERFACE`]
    /// for a classic pcap record.
    interface: u32,
    prepared: Prepared,
}

/// [`Entry::interface`] of a record with no interface (classic pcap).
const NO_INTERFACE: u32 = u32::MAX;

/// How the file the helpers walk lays its records out.
#[derive(Clone, Debug)]
pub(crate) enum Layout {
    /// Classic pcap: one link type, no interface names.
    Pcap(RecordShape),
    /// pcapng: the first section's interfaces.
    PcapNg(BlockShape),
}

/// A record as a helper's walk finds it: its length, and the packet in it
/// if it holds one the helpers prepare.
struct Walked {
    total: usize,
    packet: Option<WalkedPacket>,
}

/// Where a walked record's packet is and what it was captured on.
struct WalkedPacket {
    /// Offset of the captured bytes from the record's start.
    data_start: usize,
    caplen: usize,
    link_type: LinkType,
    /// As [`Entry::interface`].
    interface: u32,
}

impl Layout {
    /// The layout of a whole, uncompressed file: classic pcap or pcapng;
    /// `None` for anything else.
    pub(crate) fn of_file(file: &[u8]) -> Option<Layout> {
        RecordShape::of_file(file)
            .map(Layout::Pcap)
            .or_else(|| BlockShape::of_file(file).map(Layout::PcapNg))
    }

    /// Where the first share's walk starts: past the file's header.
    fn first_record(&self) -> usize {
        match self {
            Layout::Pcap(s) => s.first_record(),
            Layout::PcapNg(s) => s.first_record(),
        }
    }

    /// Offset of a prepared packet's captured bytes from its record's
    /// start.
    fn header_len(&self) -> usize {
        match self {
            Layout::Pcap(s) => s.header_len(),
            Layout::PcapNg(s) => s.header_len(),
        }
    }

    /// The name of interface `interface` of [`Entry::interface`].
    fn name(&self, interface: u32) -> Option<&str> {
        match self {
            Layout::Pcap(_) => None,
            Layout::PcapNg(s) => s.interfaces().get(interface as usize)?.1.as_deref(),
        }
    }

    /// The record at `at`, if the walk takes it.
    #[inline]
    fn walk_at(&self, file: &[u8], at: usize) -> Option<Walked> {
        match self {
            Layout::Pcap(s) => s.record_at(file, at).map(|r| Walked {
                total: r.total,
                packet: Some(WalkedPacket {
                    data_start: r.data_start,
                    caplen: r.caplen,
                    link_type: s.link_type(),
                    interface: NO_INTERFACE,
                }),
            }),
            Layout::PcapNg(s) => s.block_at(file, at).map(|b| Walked {
                total: b.total,
                packet: b.packet.map(|p| WalkedPacket {
                    data_start: p.data_start,
                    caplen: p.caplen,
                    link_type: p.link_type,
                    interface: p.interface,
                }),
            }),
        }
    }

    /// A guess at the first record in `from..to` (see [`crate::ingest::split`]).
    fn first_boundary(
        &self,
        file: &[u8],
        from: usize,
        to: usize,
        dissector: &Dissector,
    ) -> Option<usize> {
        match self {
            Layout::Pcap(s) => {
                let link_type = s.link_type();
                s.first_boundary(file, from, to, |data| {
                    dissector.dissect(link_type, data).is_ok()
                })
            }
            Layout::PcapNg(s) => s.first_boundary(file, from, to),
        }
    }
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
    layout: Layout,
    dissector: Dissector,
    classifier: Classifier,
    /// Whether the classifier reads interface names (so that the reader
    /// must check the helper took the packet's).
    check_names: bool,
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
    /// prepare the records of `file`, a whole classic pcap or pcapng file
    /// of layout `layout`, as the reader would with `dissector`,
    /// `classifier` and `hasher`, in shares of `share` bytes. Returns
    /// `None` when not one could be started: the reader then prepares
    /// every record itself, as without helpers.
    ///
    /// # Safety
    /// `file`'s bytes must stay mapped, and unchanged wherever the reader
    /// lends a record, until the returned value is dropped (its drop joins
    /// the helpers). A [`crate::ingest::TraceReader`]'s map does: it lives
    /// as long as the reader, is never written, and a truncation replaces
    /// only pages past the file's new end, where the reader lends nothing.
    pub(crate) unsafe fn start(
        file: &[u8],
        layout: Layout,
        dissector: Dissector,
        classifier: &Classifier,
        hasher: FlowHasher,
        helpers: usize,
        share: usize,
    ) -> Option<Ahead> {
        // SAFETY: the caller keeps these bytes valid until this `Ahead` is
        // dropped, and its drop joins every thread that reads them.
        let file: &'static [u8] = unsafe { std::slice::from_raw_parts(file.as_ptr(), file.len()) };
        let body = file.len().saturating_sub(layout.first_record());
        let share = share.max(1);
        let work = Arc::new(Work {
            file,
            layout,
            dissector,
            classifier: classifier.clone(),
            check_names: classifier.uses_interfaces(),
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

    /// What a helper prepared for the packet whose captured bytes are
    /// `data`, lent from the same file, of link type `link_type`, captured
    /// on the interface named `interface_name`; or `None` when no helper
    /// walked a record at that offset with those inputs (the reader then
    /// prepares it itself).
    ///
    /// The reader's records come in file order, so this walks the shares
    /// and their entries forward only.
    ///
    /// Why never inlined: inlined, its checks took registers in the
    /// reader's loop of every replay, helpers or not, which cost that loop
    /// 11 instructions a packet (callgrind, `-q --threads 1` on a 150
    /// k-packet trace: 286.4 M to 288.0 M); with helpers, the call is a
    /// small part of what a record prepared ahead saves.
    #[inline(never)]
    pub(crate) fn lookup(
        &mut self,
        data: &[u8],
        link_type: LinkType,
        interface_name: Option<&str>,
    ) -> Option<&Prepared> {
        let offset = (data.as_ptr() as usize).checked_sub(self.work.file.as_ptr() as usize)?;
        if offset > self.work.file.len() {
            return None;
        }
        let record = offset.checked_sub(self.work.layout.header_len())?;
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
        // The same offset is not enough in pcapng: a packet block and the
        // helper's (wrongly guessed) record there could read other lengths
        // or interfaces. The same inputs are.
        let same_inputs = e.caplen as usize == data.len()
            && e.link_type == link_type
            && (!self.work.check_names || self.work.layout.name(e.interface) == interface_name);
        if !same_inputs {
            return None;
        }
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
    let layout = &work.layout;
    let share_start = layout.first_record() + index * work.share;
    let share_end = share_start.saturating_add(work.share).min(file.len());
    let start = if index == 0 {
        share_start
    } else {
        match layout.first_boundary(file, share_start, share_end, &work.dissector) {
            Some(at) => at,
            None => return (share_end, share_end),
        }
    };
    let mut at = start;
    while at < share_end {
        let Some(r) = layout.walk_at(file, at) else {
            break;
        };
        if let Some(WalkedPacket {
            data_start,
            caplen,
            link_type,
            interface,
        }) = r.packet
        {
            let from = at + data_start;
            let data = file.get(from..from + caplen).unwrap_or(&[]);
            let prepared = match work.dissector.dissect(link_type, data) {
                Ok(d) => Prepared::Keyed {
                    key: d.key,
                    hash: work.hasher.hash(&d.key),
                    class: work.classifier.classify_on(&d.key, layout.name(interface)),
                    ports_truncated: d.ports_truncated,
                },
                Err(reason) => Prepared::Skipped(reason),
            };
            entries.push(Entry {
                record: at,
                caplen: data.len() as u32,
                link_type,
                interface,
                prepared,
            });
        }
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
        look_up_as(file, shares, records, 4, shape.link_type())
    }

    /// [`look_up`], with the reader's packets holding `data_len` bytes of
    /// link type `link_type` where the helpers prepared 4 bytes of the
    /// file's link type.
    pub fn look_up_as(
        file: &'static [u8],
        shares: &[HandMadeShare<'_>],
        records: &[usize],
        data_len: usize,
        link_type: LinkType,
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
                    caplen: 4,
                    link_type: shape.link_type(),
                    interface: NO_INTERFACE,
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
            layout: Layout::Pcap(shape),
            dissector: Dissector::new(false),
            classifier: Classifier::ports(),
            check_names: false,
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
                let data = file.get(r + 16..r + 16 + data_len).unwrap_or(&[]);
                ahead.lookup(data, link_type, None).map(|p| match p {
                    Prepared::Keyed { hash, .. } => *hash as usize,
                    Prepared::Skipped(_) => usize::MAX,
                })
            })
            .collect();
        (found, ahead.hits)
    }
}
