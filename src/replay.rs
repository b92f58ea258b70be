//! The replay engine: reads trace files in order, dissects and hashes every
//! packet, classifies flows, and (optionally) keeps the exact flow table.
//!
//! The engine produces a [`ReplaySummary`] (plain data) and reports progress
//! and per-file results to a [`ReplayObserver`]; it never formats output.
//! Damage in one file ends that file (everything before it is counted) and
//! the replay moves on to the next file.
//!
//! ```no_run
//! use flowsieve::class::Classifier;
//! use flowsieve::replay::{replay, NoObserver, ReplayConfig};
//! let cfg = ReplayConfig::new(Classifier::ports());
//! let summary = replay(&["traces/default.pcap".into()], &cfg, &mut NoObserver);
//! println!("{} packets, {:?} flows", summary.trace.packets, summary.trace.flows);
//! ```

use crate::ahead::{Ahead, Layout, Prepared};
use crate::class::{ClassId, Classifier};
use crate::dissect::{Dissector, FlowKey, SkipCounts, SkipReason};
use crate::hash::{FlowHasher, HashKey};
use crate::ingest::{
    Compression, IngestError, LinkType, LinkTypeCounts, ReadMode, TimeOrder, Timestamp,
    TraceFilter, TraceReader,
};
use crate::report::{
    AnomalySummary, ClassSummary, FileSummary, LinkTypeCount, OptionsInfo, ReplaySummary,
    SCHEMA_VERSION, ToolInfo, TopFlow, TraceSummary,
};
use crate::truth::{BatchedRecorder, FlowTable, TableSummary, record_on_own_thread};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How often (in packets) the observer hears about progress.
const PROGRESS_EVERY: u64 = 1 << 16;

/// Packets read per [`TraceReader::read_packets`] run: enough that a run's
/// set-up is nothing per packet, few enough that the progress report (made
/// between runs) is never far behind. A sink's stop is still seen after
/// the very packet that caused it: the visitor checks it every packet.
const READ_RUN: usize = 256;

/// What a replay does.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    /// Canonicalise keys so both directions share a flow.
    pub bidirectional: bool,
    /// Keep the exact flow table (flows, top flows, per-class flows).
    pub truth: bool,
    /// Stop after this many packets in all (`-c`).
    pub max_packets: Option<u64>,
    /// How many top flows to report.
    pub top: usize,
    /// The flow classifier.
    pub classifier: Classifier,
    /// How plain files are read (mapped and guarded by default; through a
    /// buffer on request).
    pub read_mode: ReadMode,
    /// The flow hash's key ([`HashKey::FIXED`]: the unkeyed, reproducible
    /// hash).
    pub hash_key: HashKey,
    /// Record into the exact table on a thread of its own when the machine
    /// has two or more CPUs ([`crate::truth::record_on_own_thread`]); the
    /// table is the same either way. On by default.
    pub truth_thread: bool,
    /// Let a sink that keeps the exact table itself ([`PacketSink::keeps_truth`]:
    /// the pipeline's shard workers, each the flows of its own shards) keep
    /// it, instead of this reader; the summary's truth fields are then the
    /// sink owner's to fill (the pipeline engine fills them from its
    /// workers' tables), and they come out the same.
    /// On by default; a sink that keeps no table leaves it to the reader
    /// whatever this says.
    pub truth_in_sink: bool,
    /// Helper threads that dissect, classify and hash a mapped classic
    /// pcap or pcapng file's records ahead of the reader
    /// ([`crate::ahead`]); 0 (the default) for none. Other files are read
    /// by the reader alone. The results are the same either way.
    pub dissect_threads: usize,
    /// Bytes of the file each helper share holds ([`crate::ahead::SHARE`]
    /// by default). Smaller shares put more guessed boundaries in a file,
    /// which is what tests want; no figure depends on it.
    pub dissect_share: usize,
    /// Keep only the records this `tcpdump` expression keeps (`replay
    /// -f`); the rest are counted as filtered out and appear in no other
    /// figure, so the run is the run over `tcpdump -r FILE -w OUT EXPR`'s
    /// output. `None` (the default) keeps every record.
    pub filter: Option<TraceFilter>,
}

impl ReplayConfig {
    /// Truth on, directional keys, no packet limit, top 10.
    pub fn new(classifier: Classifier) -> ReplayConfig {
        ReplayConfig {
            bidirectional: false,
            truth: true,
            max_packets: None,
            top: 10,
            classifier,
            read_mode: ReadMode::default(),
            hash_key: HashKey::FIXED,
            truth_thread: true,
            truth_in_sink: true,
            dissect_threads: 0,
            dissect_share: crate::ahead::SHARE,
            filter: None,
        }
    }
}

/// Hears about a replay as it runs.
pub trait ReplayObserver {
    /// A file is about to be read; `size` is its size on disk.
    fn file_started(&mut self, _path: &Path, _size: Option<u64>) {}
    /// The file [`ReplayObserver::file_started`] named is open, and its
    /// compression known: a compressed file's offsets are into its
    /// decompressed data. Not called for a file that could not be opened.
    fn file_opened(&mut self, _compression: Compression) {}
    /// Every 65,536 packets: packets of this file so far and the byte offset
    /// reached (decompressed offset for compressed files).
    fn progress(&mut self, _packets: u64, _offset: u64) {}
    /// A file is done (completely or up to damage).
    fn file_finished(&mut self, _file: &FileSummary) {}
    /// After each run of up to 256 records: packets of this file so far
    /// and the byte offset reached, as for [`ReplayObserver::progress`].
    /// Returns whether to go on reading. `false` (an interrupt asked the
    /// replay to stop) ends the read there: the file is reported with
    /// [`FileSummary::interrupted`] set, no later file is opened, and the
    /// pipeline finishes its report over the packets read.
    ///
    /// Asked between runs, not per packet, so that a replay pays one call
    /// every 256 records for it, and cheap enough to be asked that often:
    /// a check of a flag set by a signal handler.
    fn keep_reading(&mut self, _packets: u64, _offset: u64) -> bool {
        true
    }
}

/// An observer that ignores everything.
pub struct NoObserver;
impl ReplayObserver for NoObserver {}

/// Receives every packet the engine could key, in trace order, with the
/// work already done on it: the flow key, its hash and its class. The
/// packet's bytes are not passed on: whatever a sink keeps must be copied
/// out of these fields (the staged pipeline copies them into compact
/// records, see [`crate::pipeline`]).
pub trait PacketSink {
    /// One keyed packet: its key, hash and class, its timestamp, and its
    /// length on the wire and as captured.
    fn packet(
        &mut self,
        key: &FlowKey,
        hash: u64,
        class: ClassId,
        ts: Timestamp,
        wire_len: u32,
        captured_len: u32,
    );

    /// Whether the sink keeps the exact flow table itself, from the packets
    /// it is handed; with [`ReplayConfig::truth_in_sink`] the replay then
    /// keeps none and leaves the summary's truth fields empty.
    fn keeps_truth(&self) -> bool {
        false
    }

    /// The source's clock reached `ts` with no packet since the last one (a
    /// live source on an idle link): windows that end before `ts` can
    /// close. A file replay never calls it.
    fn clock(&mut self, _ts: Timestamp) {}

    /// Whether the sink wants no more packets (its consumer failed); the
    /// replay then stops reading, and the file it was reading is reported
    /// as not complete.
    #[inline]
    fn stopped(&self) -> bool {
        false
    }
}

/// A sink that ignores every packet (plain replay).
pub struct NoPackets;
impl PacketSink for NoPackets {
    #[inline]
    fn packet(&mut self, _: &FlowKey, _: u64, _: ClassId, _: Timestamp, _: u32, _: u32) {}
}

/// Totals gathered while reading (by the replay, and by a live source).
#[derive(Default)]
pub(crate) struct Totals {
    pub(crate) packets: u64,
    pub(crate) ip_packets: u64,
    pub(crate) wire_bytes: u64,
    pub(crate) captured_bytes: u64,
    pub(crate) truncated_packets: u64,
    pub(crate) ports_truncated: u64,
    pub(crate) first_ts: Option<Timestamp>,
    pub(crate) last_ts: Option<Timestamp>,
    pub(crate) skips: SkipCounts,
    pub(crate) link_types: LinkTypeCounts,
    pub(crate) class_packets: Vec<u64>,
    pub(crate) class_bytes: Vec<u64>,
    /// Records a trace filter did not keep (`replay -f`).
    pub(crate) filtered_out: u64,
}

impl Totals {
    /// Empty totals for `classes` classes.
    pub(crate) fn new(classes: usize) -> Totals {
        Totals {
            class_packets: vec![0; classes],
            class_bytes: vec![0; classes],
            ..Totals::default()
        }
    }

    /// Counts a keyed packet of `class`.
    #[inline]
    pub(crate) fn keyed(&mut self, class: ClassId, wire_len: u32, ports_truncated: bool) {
        self.ip_packets += 1;
        self.ports_truncated += u64::from(ports_truncated);
        let c = usize::from(class);
        if c < self.class_packets.len() {
            self.class_packets[c] += 1;
            self.class_bytes[c] += u64::from(wire_len);
        }
    }
}

/// Replays the files in order.
pub fn replay(
    paths: &[PathBuf],
    cfg: &ReplayConfig,
    observer: &mut dyn ReplayObserver,
) -> ReplaySummary {
    replay_into(paths, cfg, observer, &mut NoPackets)
}

/// Replays the files in order and hands every keyed packet to `sink`.
pub fn replay_into<P: PacketSink>(
    paths: &[PathBuf],
    cfg: &ReplayConfig,
    observer: &mut dyn ReplayObserver,
    sink: &mut P,
) -> ReplaySummary {
    let started = Instant::now();
    let dissector = Dissector::new(cfg.bidirectional);
    let mut totals = Totals::new(cfg.classifier.names().len());
    let table_here = cfg.truth && !(cfg.truth_in_sink && sink.keeps_truth());
    let mut table = table_here.then(|| FlowTable::with_hasher(FlowHasher::new(cfg.hash_key)));
    let totals_ref = &mut totals;
    // One recorder type whichever way the table is fed, so the read loop
    // below has one instance: a second one (a recorder type each) made the
    // compiler stop inlining the dissector and the record reader into it,
    // which cost 10 % of the CPU of a run with truth off (measured: `perf
    // stat`, three alternating pairs).
    let (files, errors, warnings, could_not_open) = match table.as_mut() {
        Some(t) if cfg.truth_thread && two_or_more_cpus() => record_on_own_thread(t, |r| {
            read_files(paths, cfg, &dissector, totals_ref, Some(r), observer, sink)
        }),
        Some(t) => {
            // Dropped at the end of this block, and so flushed, before
            // anything reads the table.
            let mut r = BatchedRecorder::new(t);
            read_files(
                paths,
                cfg,
                &dissector,
                totals_ref,
                Some(&mut r),
                observer,
                sink,
            )
        }
        None => read_files(paths, cfg, &dissector, totals_ref, None, observer, sink),
    };
    summarize(
        cfg,
        totals,
        table.as_ref(),
        Read {
            files,
            errors,
            warnings,
            could_not_open,
            read_seconds: started.elapsed().as_secs_f64(),
        },
    )
}

/// Whether the machine runs two or more threads at once (where the exact
/// table's own thread can help: see [`ReplayConfig::truth_thread`]).
fn two_or_more_cpus() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
}

/// The per-file summaries, errors and warnings of [`replay_into`], and
/// whether some file could not be opened.
type FilesRead = (Vec<FileSummary>, Vec<String>, Vec<String>, bool);

/// Reads the files in order into `totals`, `truth` and `sink`.
fn read_files<P: PacketSink>(
    paths: &[PathBuf],
    cfg: &ReplayConfig,
    dissector: &Dissector,
    totals: &mut Totals,
    mut truth: Option<&mut BatchedRecorder<'_>>,
    observer: &mut dyn ReplayObserver,
    sink: &mut P,
) -> FilesRead {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut could_not_open = false;
    // One filter for every file, so each link type is compiled once.
    let mut filter = cfg.filter.clone();
    for path in paths {
        if cfg.max_packets.is_some_and(|m| totals.packets >= m) || sink.stopped() {
            break;
        }
        let size = std::fs::metadata(path).ok().map(|m| m.len());
        observer.file_started(path, size);
        let (file, unopened) = replay_file(
            path,
            cfg,
            dissector,
            totals,
            truth.as_deref_mut(),
            observer,
            sink,
            &mut FileFilter(filter.as_mut().map(|filter| Filtering {
                filter,
                path,
                dropped: 0,
                error: None,
            })),
        );
        could_not_open |= unopened;
        errors.extend(file.error.clone());
        warnings.extend(file.anomalies.iter().map(|a| a.message.clone()));
        if let Some(early) = file.starts_before_previous_end_s {
            // The pipeline's trace time is held monotone, so these packets
            // fall into the window the earlier files ended in: the run's
            // windows are not the traces' own.
            warnings.push(format!(
                "{}: starts {early:.6} s before the traces read ahead of it end; its packets stamped before that end are counted at it, so the windows are not the traces' own (give the traces in time order, or merge them with mergecap)",
                file.path
            ));
        }
        observer.file_finished(&file);
        // A filter that cannot be compiled for a file's link type ends the
        // run there, as tcpdump ends it; so does an interrupt.
        let stop = file.stopped_by_filter || file.interrupted;
        files.push(file);
        if stop {
            break;
        }
    }
    (files, errors, warnings, could_not_open)
}

/// What a source read besides its totals: per-file summaries, errors,
/// warnings, and how long it took.
pub(crate) struct Read {
    pub(crate) files: Vec<FileSummary>,
    pub(crate) errors: Vec<String>,
    pub(crate) warnings: Vec<String>,
    pub(crate) could_not_open: bool,
    pub(crate) read_seconds: f64,
}

/// The summary of a read: totals, the flow table's answers, and the files.
pub(crate) fn summarize(
    cfg: &ReplayConfig,
    totals: Totals,
    table: Option<&FlowTable>,
    read: Read,
) -> ReplaySummary {
    let Read {
        files,
        errors,
        warnings,
        could_not_open,
        read_seconds,
    } = read;
    let classes = cfg
        .classifier
        .names()
        .iter()
        .enumerate()
        .map(|(i, name)| ClassSummary {
            class: name.clone(),
            flows: None,
            packets: totals.class_packets[i],
            bytes: totals.class_bytes[i],
        })
        .collect();
    let skipped = SkipReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), totals.skips.get(*r)))
        .collect();
    let (first, last) = (
        totals.first_ts.map(|t| t.as_secs_f64()),
        totals.last_ts.map(|t| t.as_secs_f64()),
    );
    let mut summary = ReplaySummary {
        schema_version: SCHEMA_VERSION,
        tool: ToolInfo {
            name: "flowsieve".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        options: OptionsInfo {
            bidirectional: cfg.bidirectional,
            truth: cfg.truth,
            classes: cfg.classifier.describe(),
            max_packets: cfg.max_packets,
            top: cfg.top,
            hash_key: (cfg.hash_key != HashKey::FIXED).then(|| cfg.hash_key.to_string()),
            filter: cfg.filter.as_ref().map(|f| f.expression().to_string()),
        },
        trace: TraceSummary {
            files,
            link_types: totals
                .link_types
                .iter()
                .map(|(lt, packets)| LinkTypeCount {
                    link_type: lt.0,
                    name: lt.name().into(),
                    packets,
                })
                .collect(),
            packets: totals.packets,
            ip_packets: totals.ip_packets,
            flows: None,
            wire_bytes: totals.wire_bytes,
            captured_bytes: totals.captured_bytes,
            truncated_packets: totals.truncated_packets,
            filtered_out: cfg.filter.as_ref().map(|_| totals.filtered_out),
            ports_truncated: totals.ports_truncated,
            first_ts: first,
            last_ts: last,
            duration_s: totals
                .first_ts
                .zip(totals.last_ts)
                .map(|(a, b)| (b.as_nanos() - a.as_nanos()) as f64 * 1e-9),
            skipped,
            read_seconds,
            packets_per_sec: if read_seconds > 0.0 {
                totals.packets as f64 / read_seconds
            } else {
                0.0
            },
        },
        flows_top: Vec::new(),
        classes,
        errors,
        warnings,
        could_not_open,
    };
    if let Some(t) = table {
        let part = t.summary(summary.options.top, summary.classes.len());
        fill_truth(&mut summary, part);
    }
    summary
}

/// Fills a summary's ground-truth fields (flows, top flows, flows per
/// class) from the summary of the exact tables that together hold every
/// flow of the run, each flow in one of them: the reader's one table, or
/// the shard workers' tables when they kept them
/// ([`ReplayConfig::truth_in_sink`]), merged ([`TableSummary::merge`]).
/// The figures are sums and a top list in a total order, so they do not
/// depend on how the flows were split. The tables are summarised with the
/// summary's own list length and classes (`options.top`, `classes`), so
/// the figures follow the reader's settings whoever fills them.
pub(crate) fn fill_truth(summary: &mut ReplaySummary, truth: TableSummary) {
    summary.trace.flows = Some(truth.flows);
    let classes = &summary.classes;
    let class_name = |id: ClassId| {
        classes
            .get(usize::from(id))
            .map_or_else(|| "?".to_string(), |c| c.class.clone())
    };
    summary.flows_top = truth
        .top
        .into_iter()
        .map(|e| TopFlow {
            src: e.key.src().to_string(),
            dst: e.key.dst().to_string(),
            sport: e.key.sport(),
            dport: e.key.dport(),
            proto: e.key.proto(),
            packets: e.stats.packets,
            bytes: e.stats.wire_bytes,
            captured_bytes: e.stats.captured_bytes,
            first_ts: e.stats.first_ts.as_secs_f64(),
            last_ts: e.stats.last_ts.as_secs_f64(),
            class: class_name(e.stats.class),
        })
        .collect();
    for (i, c) in summary.classes.iter_mut().enumerate() {
        c.flows = Some(truth.flows_by_class.get(i).copied().unwrap_or(0));
    }
}

/// Starts helper threads that prepare `reader`'s records ahead of it
/// ([`crate::ahead`]), when the configuration asks for them and the file
/// is a whole (mapped, uncompressed) classic pcap or pcapng file; `None`
/// otherwise.
fn start_ahead(
    reader: &TraceReader,
    cfg: &ReplayConfig,
    dissector: &Dissector,
    hasher: FlowHasher,
) -> Option<Ahead> {
    if cfg.dissect_threads == 0 {
        return None;
    }
    let file = reader.whole_file()?;
    let layout = Layout::of_file(file)?;
    // SAFETY: `file` is the reader's map (or its bytes in memory), which
    // lives as long as the reader; `replay_file` drops the helpers before
    // it returns (and so before the reader is dropped, also on unwinding:
    // the helpers' owner is declared after the reader). The map is never
    // written; a truncation replaces only pages past the file's new end,
    // where the reader lends no record.
    unsafe {
        Ahead::start(
            file,
            layout,
            *dissector,
            &cfg.classifier,
            hasher,
            cfg.dissect_threads,
            cfg.dissect_share,
        )
    }
}

/// Which records of one file a replay keeps: all of them (no `-f`), or
/// those a trace filter keeps, counting what it drops and keeping the
/// error that stopped it.
///
/// One type for both, so the read loop has one instance. As a type
/// parameter with a constant "keep" for the unfiltered case, the loop
/// became two instances, and the helpers they share lost the inlining a
/// single caller gets; with the filter's work inlined into the loop, the
/// unfiltered loop took 34 more instructions a packet. This form costs
/// the unfiltered loop 5 (+0.3 %, callgrind; no measurable time:
/// BENCHMARKS.md, eighty-eighth round).
struct FileFilter<'a>(Option<Filtering<'a>>);

/// A trace filter over one file: what it dropped, and why it stopped.
struct Filtering<'a> {
    filter: &'a mut TraceFilter,
    path: &'a Path,
    dropped: u64,
    error: Option<String>,
}

impl Filtering<'_> {
    /// [`FileFilter::keeps`] with a filter.
    #[inline]
    fn keeps(&mut self, link_type: LinkType, data: &[u8], wire_len: u32, kept: u64) -> bool {
        match self.filter.keeps(link_type, data, wire_len) {
            Ok(true) => true,
            Ok(false) => {
                self.dropped += 1;
                false
            }
            Err(why) => {
                self.error = Some(format!(
                    "{}: packet {}: {why}",
                    self.path.display(),
                    kept + self.dropped + 1
                ));
                false
            }
        }
    }
}

impl FileFilter<'_> {
    /// Whether to keep a record of `link_type`, with `kept` records of the
    /// file kept before it. False also when no answer can be given (no
    /// program for the link type): [`FileFilter::error`] then says why,
    /// and reading stops.
    #[inline(always)]
    fn keeps(&mut self, link_type: LinkType, data: &[u8], wire_len: u32, kept: u64) -> bool {
        match self.0.as_mut() {
            None => true,
            Some(f) => f.keeps(link_type, data, wire_len, kept),
        }
    }

    /// Records dropped so far in this file.
    fn dropped(&self) -> u64 {
        self.0.as_ref().map_or(0, |f| f.dropped)
    }

    /// Why reading had to stop, if it had to.
    fn error(&self) -> Option<&str> {
        self.0.as_ref().and_then(|f| f.error.as_deref())
    }
}

/// Reads one file into `totals` (and the table); returns its summary and
/// whether it could not be opened at all (as opposed to being damaged),
/// or the filter could not be compiled for its link type.
#[allow(clippy::too_many_arguments)]
fn replay_file<P: PacketSink>(
    path: &Path,
    cfg: &ReplayConfig,
    dissector: &Dissector,
    totals: &mut Totals,
    mut truth: Option<&mut BatchedRecorder<'_>>,
    observer: &mut dyn ReplayObserver,
    sink: &mut P,
    filter: &mut FileFilter<'_>,
) -> (FileSummary, bool) {
    let mut summary = FileSummary {
        path: path.display().to_string(),
        ..FileSummary::default()
    };
    let hasher = FlowHasher::new(cfg.hash_key);
    let mut reader = match TraceReader::open_with(path, cfg.read_mode) {
        Ok(r) => r,
        Err(e) => {
            summary.error = Some(e.to_string());
            return (summary, !e.is_damage());
        }
    };
    summary.format = reader.format().name();
    summary.compression = reader.compression().name().into();
    observer.file_opened(reader.compression());
    let mut link_types = LinkTypeCounts::default();
    let mut time_order = TimeOrder::new();
    let mut truncated = 0u64;
    let mut error: Option<IngestError> = None;
    let budget = cfg
        .max_packets
        .unwrap_or(u64::MAX)
        .saturating_sub(totals.packets);
    let mut ahead = start_ahead(&reader, cfg, dissector, hasher);
    while summary.packets < budget && !sink.stopped() {
        let want = usize::try_from(budget - summary.packets)
            .unwrap_or(usize::MAX)
            .min(READ_RUN);
        let before = summary.packets + filter.dropped();
        let read = reader.read_packets(
            want,
            #[inline(always)]
            |packet| {
                if !filter.keeps(
                    packet.link_type,
                    packet.data,
                    packet.wire_len,
                    summary.packets,
                ) {
                    // Dropped (counted by the filter), or no answer: then
                    // reading stops here.
                    return !sink.stopped() && filter.error().is_none();
                }
                summary.packets += 1;
                let captured = packet.data.len() as u32;
                summary.wire_bytes += u64::from(packet.wire_len);
                summary.captured_bytes += u64::from(captured);
                truncated += u64::from(captured < packet.wire_len);
                if packet.timestamped {
                    time_order.see(packet.ts);
                }
                link_types.add(packet.link_type);
                // Prepared by a helper, when one walked this very record
                // (`crate::ahead`: the same bytes, so the same answer), or
                // dissected here. The dissector's result is matched by
                // reference where the call wrote it: moved out of the
                // `Result`, or into a local declared before the match, it
                // was copied at once as 16-byte loads of what 8-byte stores
                // had just written, which the store buffer cannot forward
                // (a stall a packet, the hottest instruction here in a
                // profile). So both arms call the handing over, and it must
                // be inlined at both: without `#[inline(always)]` it was
                // not, and cost 48 instructions a packet (callgrind;
                // BENCHMARKS.md, forty-sixth and forty-seventh rounds).
                let mut hand_over = always_inlined(
                    #[inline(always)]
                    |key: &FlowKey, hash: u64, class: ClassId, ports_truncated: bool| {
                        totals.keyed(class, packet.wire_len, ports_truncated);
                        if let Some(t) = truth.as_deref_mut() {
                            t.record(*key, hash, class, packet.ts, packet.wire_len, captured);
                        }
                        sink.packet(key, hash, class, packet.ts, packet.wire_len, captured);
                    },
                );
                match ahead
                    .as_mut()
                    .and_then(|a| a.lookup(packet.data, packet.link_type, packet.interface_name))
                {
                    Some(Prepared::Keyed {
                        key,
                        hash,
                        class,
                        ports_truncated,
                    }) => hand_over(key, *hash, *class, *ports_truncated),
                    Some(Prepared::Skipped(reason)) => totals.skips.add(*reason),
                    None => match &dissector.dissect(packet.link_type, packet.data) {
                        Ok(d) => {
                            let class = cfg.classifier.classify_on(&d.key, packet.interface_name);
                            hand_over(&d.key, hasher.hash(&d.key), class, d.ports_truncated)
                        }
                        Err(reason) => totals.skips.add(*reason),
                    },
                }
                // The sink may stop the replay at any packet (an interrupt, a
                // live run's end): checked after each, as before runs.
                !sink.stopped()
            },
        );
        if filter.error().is_some() {
            break;
        }
        match read {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                error = Some(e);
                break;
            }
        }
        if before / PROGRESS_EVERY != (summary.packets + filter.dropped()) / PROGRESS_EVERY {
            observer.progress(summary.packets, reader.offset());
        }
        if !observer.keep_reading(summary.packets, reader.offset()) {
            summary.interrupted = true;
            break;
        }
    }
    // Joins the helpers: no thread reads the map after this.
    summary.dissected_ahead = ahead.take().map(|a| a.hits);
    totals.link_types.merge(&link_types);
    totals.packets += summary.packets;
    totals.wire_bytes += summary.wire_bytes;
    totals.captured_bytes += summary.captured_bytes;
    totals.truncated_packets += truncated;
    let filtered_out = filter.dropped();
    totals.filtered_out += filtered_out;
    if cfg.filter.is_some() {
        summary.filtered_out = Some(filtered_out);
    }
    summary.time_steps_back = time_order.steps_back();
    summary.largest_step_back_s = time_order.largest_step_back_ns() as f64 * 1e-9;
    if let Some((first_ts, last_ts)) = time_order.span() {
        if let Some(end) = totals.last_ts
            && first_ts < end
        {
            summary.starts_before_previous_end_s =
                Some((end.as_nanos() - first_ts.as_nanos()) as f64 * 1e-9);
        }
        totals.first_ts = Some(totals.first_ts.map_or(first_ts, |t| t.min(first_ts)));
        totals.last_ts = Some(totals.last_ts.map_or(last_ts, |t| t.max(last_ts)));
    }
    // A file's header names its link type even when no packet follows.
    if let Some(lt) = reader.file_link_type() {
        link_types.add_n(lt, 0);
    }
    summary.link_types = link_types.iter().map(|(lt, _)| lt.0).collect();
    summary.complete = error.is_none()
        && filter.error().is_none()
        && summary.packets < budget
        && !sink.stopped()
        && !summary.interrupted;
    summary.anomalies = reader
        .anomalies()
        .entries()
        .iter()
        .map(|a| {
            let offset_label = reader.compression().offset_label();
            let place = if a.first.position.record == 0 {
                format!("file header at {offset_label} {}", a.first.position.offset)
            } else {
                format!(
                    "record {} at {offset_label} {}",
                    a.first.position.record, a.first.position.offset
                )
            };
            AnomalySummary {
                record: a.first.position.record,
                offset: a.first.position.offset,
                count: a.count,
                message: format!(
                    "{}: {place}: {}{}",
                    reader.compression().file_label(path),
                    a.first.kind,
                    if a.count > 1 {
                        format!(" ({} records)", a.count)
                    } else {
                        String::new()
                    }
                ),
            }
        })
        .collect();
    if let Some(why) = filter.error().map(str::to_string) {
        // Not damage: the file may be whole, but this run cannot read it
        // (exit 1, as `tcpdump -r` refuses it).
        summary.stopped_by_filter = true;
        summary.error = Some(why);
        return (summary, true);
    }
    summary.error = error.map(|e| e.to_string());
    (summary, false)
}

/// The closure itself: a closure's `#[inline(always)]` is allowed only
/// where it is an argument.
#[inline(always)]
fn always_inlined<F: FnMut(&FlowKey, u64, ClassId, bool)>(f: F) -> F {
    f
}
