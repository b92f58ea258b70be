//! Live capture as a pipeline source (Linux).
//!
//! ```text
//! ring (per socket) ──► reader thread ──records──► merger ──► Dispatcher ──► shards
//!   TPACKET_V3 blocks    dissect, classify, hash    (calling thread: merges by
//!                        in place; VLAN tags back   timestamp, truth, -w, intervals)
//! ```
//!
//! **Why a thread per socket with `poll`, not tokio's `AsyncFd`.** A
//! reader has one descriptor and one job: sleep until a block retires, walk
//! it, hand it back. A blocking `poll` with a timeout of the block retire
//! time is exactly that, costs one system call per block (not per packet),
//! and keeps the reader on its own core; an async runtime would add a
//! scheduler between the kernel and the ring and buy nothing, since no
//! reader ever waits on anything else.
//!
//! **One ring: no reader thread.** A capture of one ring (one interface,
//! no fanout) without `-w` reads it on the merger's own thread, a block
//! (or a few small ones) at a time, each frame released to the pipeline
//! as the block's walk reaches it (`ReaderPlace::Inline`, `reader_place`):
//! there is nothing to merge, and handing every frame to another core
//! through a queue was the capture side's largest cost. There is no queue
//! then, so the ring is the only buffer, and the block read is shed
//! (counted, not dissected) while the `--shed-at` share of the ring waits
//! (at least two blocks). With `-w` the ring keeps
//! its thread, so that a slow disk or pipe stalls the merger, not the
//! ring's reading.
//!
//! **Order.** Each socket's frames come in kernel order. With `--fanout N`
//! or several interfaces the merger restores one order: it releases frames
//! by timestamp up to the lowest watermark of all readers (a reader's
//! watermark is its newest timestamp, or, when its ring is empty, the
//! clock less the block timeout). The pipeline therefore sees the same
//! stream whatever the fanout, and `-w` writes that stream. With one
//! reader (one interface, no fanout) that order is the reader's own, and
//! the merger walks its frames in turn, with no search over the readers.
//!
//! **Full queues.** When the merger's queue is full a reader waits for room
//! while its ring still has room: the ring is the capture's buffer, and a
//! burst it can hold reaches the engine whole once the engine catches up,
//! as with tcpdump. Once three quarters of the ring's blocks wait unread
//! (`--shed-at`, [`ShedAt`]), or the capture is stopping, the reader sheds
//! the batch it holds instead (counts it as `shed`, by interface) and goes
//! on draining its ring. Stalling past that mark would let the ring fill
//! and the kernel drop whatever arrives, at random across flows; shedding
//! keeps the loss at one place, counted, and the last quarter of the ring
//! free. (Up to the forty-first round a reader shed as soon as the queue
//! was full, and a burst of a million frames into a stopped 512 MiB ring
//! lost a fifth to a third of them with the ring nearly empty:
//! BENCHMARKS.md, forty-second round.)
//!
//! **Old frames (`--max-delay`).** The ring fill bounds space, not time:
//! an engine slower than the link for a while works through its ring and
//! queues (up to 64 batches of 4,096 frames between the readers and the
//! merger, and the pipeline's own queues after it) and reports events
//! seconds after their packets, even with `--shed-at 0`. With
//! `--max-delay D` the merger sheds and counts (as `shed`, by interface)
//! every frame that arrived more than `D` before the merger reaches it,
//! before `-w`, truth or the pipeline see it, so that under overload the
//! engine spends itself on recent traffic. The clock is read once per
//! round of releases and every 4,096 frames within one, not per frame.
//! What the pipeline's queues add after the merger is not bounded by it
//! (BENCHMARKS.md, forty-third round, measures both).

mod counters;
pub mod metrics;
mod pcap_out;
mod reader;
pub mod rotation;
mod savefiles;

pub use crate::ingest::ShedAt;
pub use rotation::Rotation;

/// The longest a turn of the capture loop waits on a quiet ring, in
/// milliseconds: `--block-timeout`, capped here so that a stop, a window
/// on the clock or an interval report is never held up longer. It is also
/// the shortest `live --report-every`: an interval ends at the first turn
/// after it, so a shorter one could not be kept.
pub const LONGEST_QUIET_TURN_MS: u32 = 100;

pub use counters::{
    CaptureSummary, CountersSnapshot, EventLatency, EventLatencySummary, InterfaceCounters,
    InterfaceSummary, IntervalReport, LiveCounters,
};

use crate::dissect::Dissector;
use crate::ingest::live::{
    DeviceCounters, Interface, LiveError, PacketRing, RingGeometry, RingOptions, SocketFilter,
};
use crate::ingest::{LinkType, Timestamp};
use crate::pipeline::gauges::VariantCost;
use crate::pipeline::{Source, defaults};
use crate::replay::{PacketSink, Read, ReplayConfig, ReplayObserver, Totals, summarize};
use crate::report::ReplaySummary;
use crate::truth::{BatchedRecorder, FlowTable};
use crossbeam_channel::{RecvTimeoutError, bounded};
use pcap_out::PcapOut;
use reader::{LiveFrame, Reader, ReaderBatch, ReaderPlace};
use savefiles::{Saved, Savefiles};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Reader batches the merger's queue holds per reader.
pub const QUEUE_BATCHES: usize = 64;

/// What a live capture does.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// Interfaces, in `-i` order.
    pub interfaces: Vec<String>,
    /// Sockets per interface, in one `PACKET_FANOUT_HASH` group.
    pub fanout: usize,
    /// Ring geometry per socket.
    pub geometry: RingGeometry,
    /// Bytes kept of each frame.
    pub snaplen: u32,
    /// A tcpdump filter expression.
    pub filter: Option<String>,
    /// Leave out frames this host sends.
    pub incoming_only: bool,
    /// Put interfaces in promiscuous mode.
    pub promiscuous: bool,
    /// Stop after this long (wall clock).
    pub duration: Option<Duration>,
    /// Interval between interval reports.
    pub report_every: Option<Duration>,
    /// When set (a signal handler sets it), the current interval ends at
    /// the capture loop's next turn with its report, whatever
    /// `report_every` says, and the flag is cleared: `flowsieve live`
    /// sets it on SIGUSR1, on which tcpdump prints its counts.
    pub report_now: Option<Arc<AtomicBool>>,
    /// Write every captured frame to this file: pcapng (one interface
    /// block per `-i`, with its name) when it ends in `.pcapng`, else
    /// classic pcap; nanosecond timestamps either way. `-` (or
    /// `/dev/stdout`) writes classic pcap to standard output, appended to
    /// whatever it already holds.
    pub write: Option<PathBuf>,
    /// Hand `write`'s frames to the file after every round of frames the
    /// merger releases, as `tcpdump -U` does after every packet, instead
    /// of when its buffer fills: a reader at the other end of `-w -` sees
    /// each frame as soon as the ring hands it over. (A frame leaves the
    /// ring only with its block, so flushing after each frame would show
    /// nothing sooner.)
    pub packet_buffered: bool,
    /// How `write` is split into several files (tcpdump's `-C`, `-G` and
    /// `-W`; [`Rotation`]). With `-G` the name is a `strftime` pattern.
    pub rotation: Rotation,
    /// Run this command with each file the rotation closes as its one
    /// argument, as `tcpdump -z gzip` does (at the lowest CPU priority,
    /// not waited for; the last file, which the capture's end closes, is
    /// left as it is, as tcpdump leaves it).
    pub post_rotate: Option<std::ffi::OsString>,
    /// The ring fill at which a reader whose queue to the merger is full
    /// sheds instead of waiting; a ring read on the merger's thread (one
    /// ring, no `-w`) sheds its oldest block at it instead.
    pub shed_at: ShedAt,
    /// Frames older than this (from their kernel timestamp) when the
    /// merger reaches them are shed and counted instead of handed to the
    /// pipeline, so that an engine slower than the link never works on,
    /// or reports events from, traffic this old.
    pub max_delay: Option<Duration>,
}

impl LiveConfig {
    /// Defaults for these interfaces.
    pub fn new(interfaces: Vec<String>) -> LiveConfig {
        LiveConfig {
            interfaces,
            fanout: 1,
            geometry: RingGeometry::new(
                defaults::LIVE_RING_MIB << 20,
                defaults::LIVE_BLOCK_KIB << 10,
                defaults::LIVE_BLOCK_TIMEOUT_MS,
            )
            .expect("the default geometry is valid"),
            snaplen: defaults::LIVE_SNAPLEN,
            filter: None,
            incoming_only: false,
            promiscuous: true,
            duration: None,
            report_every: None,
            report_now: None,
            write: None,
            packet_buffered: false,
            rotation: Rotation::default(),
            post_rotate: None,
            shed_at: ShedAt::DEFAULT,
            max_delay: None,
        }
    }
}

/// Where the rings' readers run: on the merger's thread when the capture
/// has one ring and no `-w`, else each on a thread of its own.
///
/// Why inline: with one ring there is nothing to merge, and a reader
/// thread only hands its frames to the merger on another core, through a
/// queue. Draining a full ring of a million frames (`benches/live_drain.sh`,
/// three paired runs of the committed builds; BENCHMARKS.md, sixty-fifth
/// round), reading the ring on the merger's thread took the drain with
/// all stages from 194.0, 180.6 and 226.6 ms to 129.9, 156.6 and 183.8,
/// and the capture side's CPU (reader and merger) from 124, 143 and 162 ns
/// a frame to 89, 106 and 137.
///
/// The price is buffering: the merger's queue (64 batches of a block's
/// frames) no longer stands in front of the ring, so an engine slower
/// than the link for seconds sheds sooner, and its events come sooner.
/// With the engine held to 2 % of a CPU under a 6-second stream of
/// 300 kpps (`benches/live_stall.sh`), the default `--shed-at` shed 23 %
/// of the frames where the reader thread had shed none, and the events'
/// median delay went from 3.6 to 2.0 s. A larger `--ring-mb` buys the
/// buffer back, where it is visible to the kernel's counters.
///
/// Why not always: several rings need the merge, whose order waits on
/// every reader's watermark. And with `-w` the merger writes every frame
/// before the pipeline gets it; a slow disk or a stalled pipe would then
/// stop the ring's reading, and the kernel would drop where a reader
/// thread sheds and counts (the `stalled_burst` tests in `tests/live.rs`).
fn reader_place(rings: usize, writes: bool) -> ReaderPlace {
    if rings == 1 && !writes {
        ReaderPlace::Inline
    } else {
        ReaderPlace::Thread
    }
}

/// What the report says a reader does when its queue to the merger is full
/// (or, read inline, when its ring's backlog is at the mark), and what the
/// merger does with frames older than `--max-delay`.
fn shed_policy(
    shed_at: ShedAt,
    blocks: u32,
    max_delay: Option<Duration>,
    place: ReaderPlace,
) -> String {
    let mark = shed_at.blocks(blocks);
    let mut policy = if place == ReaderPlace::Inline {
        if mark < reader::inline_shed_mark(mark) {
            format!(
                "the ring is read on the pipeline's thread, block by block: a block with another waiting behind it is shed and counted (--shed-at {}), so the ring keeps draining",
                shed_at.fill()
            )
        } else {
            format!(
                "the ring is read on the pipeline's thread, block by block: while {mark} of its {blocks} blocks are full (--shed-at {}), the oldest is shed and counted, so the ring keeps draining",
                shed_at.fill()
            )
        }
    } else if mark == 0 {
        "a reader whose merger queue is full sheds the batch it holds at once and counts it (--shed-at 0); the ring keeps draining".to_string()
    } else {
        format!(
            "a reader whose merger queue is full waits while fewer than {mark} of its ring's {blocks} blocks are full (--shed-at {}), then sheds the batch it holds and counts it; the ring keeps draining",
            shed_at.fill()
        )
    };
    if let Some(d) = max_delay {
        policy.push_str(&format!(
            "; the merger sheds and counts every frame that arrived more than {} ms before it reaches the frame (--max-delay)",
            d.as_secs_f64() * 1e3
        ));
    }
    policy
}

/// The arrival time (ns since the epoch) before which a frame is older
/// than `max_delay` now; `i128::MIN`, which no frame is before, without one.
fn stale_cutoff(max_delay: Option<Duration>) -> i128 {
    max_delay.map_or(i128::MIN, |d| reader::now_ns() - d.as_nanos() as i128)
}

/// Hears about a live capture as it runs (the command line prints and
/// writes these; the capture never formats anything).
pub trait LiveObserver {
    /// Every socket is bound: frames from now on are captured.
    fn ready(&mut self, _interfaces: &[Interface]) {}
    /// One interval ended. An error ends the capture: it becomes the
    /// capture's fatal error (`stopped_by` "error"), its text the report's
    /// error line, so it should name the output that failed.
    fn interval(&mut self, _report: &IntervalReport) -> std::io::Result<()> {
        Ok(())
    }
}

/// An observer that ignores everything.
pub struct NoLiveObserver;
impl LiveObserver for NoLiveObserver {}

/// An open live capture: every socket bound and filtered, ready to run as
/// a [`Source`]. Opening does all the checks (interfaces, permissions,
/// filter), so a bad argument fails before the pipeline starts.
pub struct LiveCapture<'o> {
    cfg: LiveConfig,
    replay: ReplayConfig,
    interfaces: Vec<Interface>,
    rings: Vec<(usize, PacketRing)>,
    counters: Arc<LiveCounters>,
    stop: Arc<AtomicBool>,
    observer: &'o mut dyn LiveObserver,
    outcome: Arc<std::sync::Mutex<Option<CaptureSummary>>>,
}

/// Where the final capture section lands once the source has run.
pub type CaptureSlot = Arc<std::sync::Mutex<Option<CaptureSummary>>>;

impl<'o> LiveCapture<'o> {
    /// Opens every socket. `stop` ends the capture when set (a signal
    /// handler sets it); `observer` hears readiness and intervals.
    pub fn open(
        cfg: LiveConfig,
        replay: ReplayConfig,
        stop: Arc<AtomicBool>,
        observer: &'o mut dyn LiveObserver,
    ) -> Result<LiveCapture<'o>, LiveError> {
        let interfaces = cfg
            .interfaces
            .iter()
            .map(|n| Interface::by_name(n))
            .collect::<Result<Vec<_>, _>>()?;
        // By index, not by name: an interface's alternative names
        // (`ip link property add … altname`) resolve to the same one.
        for (j, later) in interfaces.iter().enumerate() {
            if let Some(first) = interfaces[..j].iter().find(|i| i.index == later.index) {
                return Err(LiveError::SameInterfaceTwice {
                    first: first.name.clone(),
                    second: later.name.clone(),
                });
            }
        }
        if cfg
            .write
            .as_deref()
            .is_some_and(|w| !PcapOut::wants_pcapng(w))
            && let Some(other) = interfaces
                .iter()
                .find(|i| i.link_type != interfaces[0].link_type)
        {
            return Err(LiveError::MixedLinkTypes {
                first: interfaces[0].name.clone(),
                other: other.name.clone(),
            });
        }
        // After the command line's own errors, as tcpdump ("That device
        // is not up"): a capture on a down interface printed "listening
        // on", then failed with "went down during the capture", although
        // it never was up.
        if let Some(down) = interfaces.iter().find(|i| !i.is_up()) {
            return Err(LiveError::NotUp {
                iface: down.name.clone(),
            });
        }
        let mut rings = Vec::new();
        // A fanout group id per interface, unique to this process.
        let base = (std::process::id() as u16).wrapping_mul(31);
        for (i, iface) in interfaces.iter().enumerate() {
            let filter = match &cfg.filter {
                Some(expr) => SocketFilter::compile(
                    expr,
                    &iface.name,
                    iface.link_type == LinkType::RAW,
                    cfg.snaplen,
                )?,
                None => SocketFilter::accept_all(cfg.snaplen),
            };
            let opts = RingOptions {
                geometry: cfg.geometry,
                promiscuous: cfg.promiscuous,
                incoming_only: cfg.incoming_only,
                fanout_group: (cfg.fanout > 1).then(|| base.wrapping_add(i as u16)),
            };
            for _ in 0..cfg.fanout.max(1) {
                rings.push((i, PacketRing::open(iface, &filter, &opts)?));
            }
        }
        let counters = Arc::new(LiveCounters::new(
            &cfg.interfaces,
            replay.classifier.names().to_vec(),
        ));
        Ok(LiveCapture {
            cfg,
            replay,
            interfaces,
            rings,
            counters,
            stop,
            observer,
            outcome: Arc::default(),
        })
    }

    /// The shared counters (for the metrics server and the event sink).
    pub fn counters(&self) -> Arc<LiveCounters> {
        Arc::clone(&self.counters)
    }

    /// Where the `capture` section appears when the run is over.
    pub fn summary_slot(&self) -> CaptureSlot {
        Arc::clone(&self.outcome)
    }

    /// The interfaces opened.
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }
}

/// Per reader: frames not yet released, and its watermark.
struct Pending {
    batches: VecDeque<(ReaderBatch, usize)>,
    watermark: i128,
}

impl Pending {
    fn head_ts(&self) -> Option<i128> {
        self.batches
            .front()
            .and_then(|(b, i)| b.frames.get(*i))
            .map(|f| f.ts.as_nanos())
    }
}

impl Source for LiveCapture<'_> {
    /// Woken for each buffer, as before the engine's sleep for a quarter
    /// of the queues: while the engine is the limit, the source waits for
    /// one batch's work at a time. With the engine held to 2 % of a CPU
    /// under a 300 kpps stream, sleeps for 16 batches let the ring
    /// overflow before the source was back to shed: the kernel dropped
    /// frames (a median of 1 and of 4 in two runs of three) where a
    /// wake-up for each buffer dropped none (BENCHMARKS.md, sixty-eighth
    /// round).
    fn needs_prompt_buffers(&self) -> bool {
        true
    }

    /// Events go out as each shard hands them over: an event held for
    /// trace order would wait for the slowest-filling shard's batch, and
    /// a live user wants heavy flows as soon as they are seen.
    fn events_in_trace_order(&self) -> bool {
        false
    }

    fn run<P: PacketSink>(self, _observer: &mut dyn ReplayObserver, sink: &mut P) -> ReplaySummary {
        let LiveCapture {
            cfg,
            replay,
            interfaces,
            rings,
            counters,
            stop,
            observer,
            outcome,
        } = self;
        let started = Instant::now();
        let readers = rings.len();
        let reader_iface: Vec<usize> = rings.iter().map(|(i, _)| *i).collect();
        let (to_merger, from_readers) = bounded::<ReaderBatch>(QUEUE_BATCHES * readers);
        let (free_tx, free_rx) = bounded::<ReaderBatch>(QUEUE_BATCHES * readers);
        let device_start: Vec<DeviceCounters> = interfaces.iter().map(|i| i.counters()).collect();
        let rejects = Rejects {
            filtering: cfg.filter.is_some(),
            incoming_only: cfg.incoming_only,
        };
        let mut writer = cfg.write.as_ref().map(|path| {
            let now = rotation::unix_now();
            Savefiles::create(path, &interfaces, cfg.snaplen, cfg.rotation, now)
                .map(|f| f.post_rotate(cfg.post_rotate.clone()))
        });
        // Set when a frame would open a file past -W's count (with -G and
        // no -C): the capture ends there, as tcpdump's does, and that
        // frame and the ones after it are not taken.
        let mut files_full = false;
        if let Some(Err(e)) = &writer {
            counters.set_fatal(e.clone());
            stop.store(true, Ordering::Relaxed);
        }
        let mut totals = Totals::new(replay.classifier.names().len());
        let mut table = replay
            .truth
            .then(|| FlowTable::with_hasher(crate::hash::FlowHasher::new(replay.hash_key)));
        let mut pending: Vec<Pending> = (0..readers)
            .map(|_| Pending {
                batches: VecDeque::new(),
                watermark: i128::MIN,
            })
            .collect();
        let mut stopped_by = String::from("signal");
        // Per reader: frames the merger shed as older than --max-delay,
        // added to their interface's `shed` after each round of releases.
        let mut stale_shed = vec![0u64; readers];
        let place = reader_place(readers, cfg.write.is_some());
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            let mut inline_reader = None;
            for (index, (iface_index, ring)) in rings.into_iter().enumerate() {
                let mut r = Reader {
                    index,
                    ring,
                    iface: interfaces[iface_index].clone(),
                    counters: Arc::clone(&counters),
                    iface_index,
                    classifier: replay.classifier.clone(),
                    hasher: crate::hash::FlowHasher::new(replay.hash_key),
                    dissector: Dissector::new(replay.bidirectional),
                    keep_bytes: cfg.write.is_some(),
                    to_merger: to_merger.clone(),
                    free: free_rx.clone(),
                    stop: Arc::clone(&stop),
                    retire_ms: cfg.geometry.retire_ms,
                    shed_at_blocks: cfg.shed_at.blocks(cfg.geometry.blocks),
                    batch_frames: reader::batch_frames(cfg.geometry.block_bytes),
                    place,
                };
                if place == ReaderPlace::Inline {
                    let st = r.start();
                    inline_reader = Some((r, st));
                    continue;
                }
                match std::thread::Builder::new()
                    .name("flowsieve-ring".into())
                    .spawn_scoped(scope, move || r.run())
                {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        counters.set_fatal(format!("cannot start a ring reader: {e}"));
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            }
            drop(to_merger);
            observer.ready(&interfaces);
            let mut intervals = IntervalClock::new(
                cfg.report_every,
                cfg.report_now.clone(),
                rejects,
                started,
                &device_start,
            );
            let mut last_clock = Instant::now();
            let budget = replay.max_packets.unwrap_or(u64::MAX);
            let mut readers_gone = false;
            // Recorded in batches, as a file replay does (`BatchedRecorder`);
            // dropped, and so flushed, when this scope ends, before the
            // summary reads the table.
            let mut truth = table.as_mut().map(BatchedRecorder::new);
            // Whether a keyed frame has reached the pipeline yet (the first
            // sets the events' time origin), and the keyed frames not yet
            // added to `counters.pipeline_packets`. Why not one `fetch_add`
            // a frame: that locked add was a third of this loop's samples
            // draining a full ring (BENCHMARKS.md, sixty-third round). Only
            // this thread writes the counter, and it is published every
            // 4,096 frames and after each round of releases, before the
            // interval report reads it.
            let (mut origin_set, mut keyed_unpublished) = (false, 0u64);
            // The earliest and latest frame times so far, in ns, beside
            // `totals.first_ts` and `last_ts`: a frame is compared by the
            // time its merge loop already has, and the report's times are
            // written only when they move (as `Option<Timestamp>` minimum
            // and maximum a frame, 14 instructions; BENCHMARKS.md,
            // sixty-fourth round). A `Timestamp`'s nanoseconds are below a
            // second, so its order is its `as_nanos` order.
            let (mut first_ns, mut last_ns) = (i128::MAX, i128::MIN);
            loop {
                if cfg.duration.is_some_and(|d| started.elapsed() >= d)
                    && !stop.load(Ordering::Relaxed)
                {
                    stopped_by = "duration".into();
                    stop.store(true, Ordering::Relaxed);
                }
                if sink.stopped() {
                    stop.store(true, Ordering::Relaxed);
                }
                // Read inline, the reader's wait is this loop's wait (on
                // the ring, up to its retire timeout), before the clock is
                // read for the cutoff below.
                let inline_stopping = inline_reader.as_mut().map(|(r, _)| r.wait());
                let mut released = 0u64;
                // Frames that arrived before this are older than
                // --max-delay: shed here, not handed to the pipeline. The
                // clock is read once per 4,096 frames released.
                let mut cutoff = stale_cutoff(cfg.max_delay);
                let mut spent = totals.packets >= budget || files_full;
                // Releases frame `$f` of reader `$r`, whose batch's bytes are
                // `$bytes` and whose time is `$ns`: `f.ts.as_nanos()`, which
                // each loop already has for its bound check. (Worked out
                // again here, the two-reader merger ran 10 instructions a
                // frame more; BENCHMARKS.md, sixty-fourth round.) It goes
                // to -w, then is shed as stale or counted and handed
                // to truth and the pipeline. True once the packet budget is
                // spent. It reads the frame where the reader put it: in a
                // batch, or (inline) in the ring's walk. A macro, not a
                // closure: called from the inline step and both loops
                // below, a closure stayed a call in the two-reader one (7
                // instructions a frame more than writing it out there).
                macro_rules! release {
                    ($f:expr, $ns:expr, $bytes:expr, $r:expr) => {
                        'release: {
                            let (f, ns, bytes, r): (&LiveFrame, i128, &[u8], usize) =
                                ($f, $ns, $bytes, $r);
                            let stale = ns < cutoff;
                            if !stale && let Some(Ok(w)) = writer.as_mut() {
                                let bytes = bytes
                                    .get(f.bytes.0 as usize..f.bytes.1 as usize)
                                    .unwrap_or(&[]);
                                match w.write(reader_iface[r], f.ts, f.wire_len, bytes) {
                                    Ok(Saved::Written) => {}
                                    Ok(Saved::FileLimit) => {
                                        files_full = true;
                                        break 'release true;
                                    }
                                    Err(e) => {
                                        counters.set_fatal(e);
                                        stop.store(true, Ordering::Relaxed);
                                    }
                                }
                            }
                            released += 1;
                            if released.is_multiple_of(4096) {
                                cutoff = stale_cutoff(cfg.max_delay);
                                counters.pipeline_packets.fetch_add(
                                    std::mem::take(&mut keyed_unpublished),
                                    Ordering::Relaxed,
                                );
                            }
                            if stale {
                                stale_shed[r] += 1;
                                false
                            } else {
                                totals.packets += 1;
                                totals.wire_bytes += u64::from(f.wire_len);
                                totals.captured_bytes += u64::from(f.captured);
                                totals.truncated_packets += u64::from(f.captured < f.wire_len);
                                if ns < first_ns {
                                    first_ns = ns;
                                    totals.first_ts = Some(f.ts);
                                }
                                if ns > last_ns {
                                    last_ns = ns;
                                    totals.last_ts = Some(f.ts);
                                }
                                totals.link_types.add(f.link_type);
                                match f.outcome() {
                                    Ok(k) => {
                                        totals.keyed(k.class, f.wire_len, k.ports_truncated);
                                        if let Some(t) = truth.as_mut() {
                                            t.record(
                                                k.key, k.hash, k.class, f.ts, f.wire_len,
                                                f.captured,
                                            );
                                        }
                                        if !origin_set {
                                            // The dispatcher's time origin is this packet.
                                            let ns =
                                                ns.clamp(i64::MIN as i128 + 1, i64::MAX as i128);
                                            counters
                                                .first_keyed_ns
                                                .store(ns as i64, Ordering::Relaxed);
                                            origin_set = true;
                                        }
                                        keyed_unpublished += 1;
                                        sink.packet(
                                            &k.key, k.hash, k.class, f.ts, f.wire_len, f.captured,
                                        );
                                    }
                                    Err(reason) => totals.skips.add(reason),
                                }
                                totals.packets >= budget
                            }
                        }
                    };
                }
                // Read inline, the reader then releases each frame as it
                // reads it; with one reader every frame is at or below the
                // watermark, so none waits for the bound. With reader
                // threads, the wait is for one batch.
                let inline_now = if let (Some((r, st)), Some(stopping)) =
                    (inline_reader.as_mut(), inline_stopping)
                {
                    let step = r.read_inline(st, stopping, |f, ns| {
                        if !spent {
                            spent = release!(f, ns, &[], 0);
                        }
                    });
                    let p = &mut pending[0];
                    p.watermark = p.watermark.max(step.watermark_ns);
                    if !step.more {
                        r.finish();
                        inline_reader = None;
                    }
                    true
                } else {
                    false
                };
                // (The inline reader sends nothing; once it is done and
                // dropped with its sender, the next wait here sees the
                // queue disconnected.)
                if !inline_now {
                    match from_readers.recv_timeout(Duration::from_millis(20)) {
                        Ok(b) => {
                            let p = &mut pending[b.reader];
                            p.watermark = p.watermark.max(b.watermark_ns);
                            if b.frames.is_empty() {
                                let _ = free_tx.try_send(b);
                            } else {
                                p.batches.push_back((b, 0));
                            }
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        // Every reader has returned (each drops its sender) and
                        // its queue is empty.
                        Err(RecvTimeoutError::Disconnected) => readers_gone = true,
                    }
                }
                // Release frames in timestamp order up to every reader's
                // watermark (all of them once the readers are gone).
                let bound = if readers_gone {
                    i128::MAX
                } else {
                    pending
                        .iter()
                        .map(|p| p.watermark)
                        .min()
                        .unwrap_or(i128::MIN)
                };
                if let [only] = pending.as_mut_slice() {
                    // One reader (one interface, no fanout): the merge order
                    // is its own, so its frames go out in turn with no search
                    // over the readers (BENCHMARKS.md, sixty-third round).
                    'batches: while !spent {
                        let Some((batch, at)) = only.batches.front_mut() else {
                            break;
                        };
                        while let Some(f) = batch.frames.get(*at) {
                            let ns = f.ts.as_nanos();
                            if spent || ns > bound {
                                break 'batches;
                            }
                            *at += 1;
                            spent = release!(f, ns, &batch.bytes, 0);
                        }
                        if let Some((b, _)) = only.batches.pop_front() {
                            let _ = free_tx.try_send(b);
                        }
                    }
                } else {
                    while !spent {
                        let Some((r, ts)) = pending
                            .iter()
                            .enumerate()
                            .filter_map(|(i, p)| p.head_ts().map(|t| (i, t)))
                            .min_by_key(|&(i, t)| (t, i))
                        else {
                            break;
                        };
                        if ts > bound {
                            break;
                        }
                        let (batch, at) = pending[r]
                            .batches
                            .front_mut()
                            .expect("a head frame has a batch");
                        let Some(f) = batch.frames.get(*at) else {
                            break;
                        };
                        *at += 1;
                        spent = release!(f, ts, &batch.bytes, r);
                        if *at >= batch.frames.len()
                            && let Some((b, _)) = pending[r].batches.pop_front()
                        {
                            let _ = free_tx.try_send(b);
                        }
                    }
                }
                if cfg.packet_buffered
                    && released > 0
                    && let Some(Ok(w)) = writer.as_mut()
                    && let Err(e) = w.flush()
                {
                    counters.set_fatal(e);
                    stop.store(true, Ordering::Relaxed);
                }
                counters
                    .pipeline_packets
                    .fetch_add(std::mem::take(&mut keyed_unpublished), Ordering::Relaxed);
                for (r, n) in stale_shed.iter_mut().enumerate() {
                    if *n > 0 {
                        let c = &counters.interfaces[reader_iface[r]];
                        // `shed_late` first, so that a reader of both never
                        // sees more late frames than shed ones.
                        c.shed_late.fetch_add(*n, Ordering::Relaxed);
                        c.shed.fetch_add(std::mem::take(n), Ordering::Relaxed);
                    }
                }
                if totals.packets >= budget && !stop.load(Ordering::Relaxed) {
                    stopped_by = "count".into();
                    stop.store(true, Ordering::Relaxed);
                }
                if files_full && !stop.load(Ordering::Relaxed) {
                    stopped_by = "file limit".into();
                    stop.store(true, Ordering::Relaxed);
                }
                // An idle link still moves the clock, so windows close.
                if released == 0
                    && bound != i128::MIN
                    && bound != i128::MAX
                    && last_clock.elapsed()
                        >= Duration::from_millis(u64::from(cfg.geometry.retire_ms))
                {
                    if let Some(ts) = Timestamp::new(
                        (bound.div_euclid(1_000_000_000)) as i64,
                        bound.rem_euclid(1_000_000_000) as u32,
                    ) {
                        sink.clock(ts);
                    }
                    last_clock = Instant::now();
                }
                // An interval that cannot be written ends the capture as an
                // error, with the observer's own line (which names its
                // output): stopping without one left `stopped_by` at
                // "signal" and the exit code at 0.
                if let Some(report) = intervals.tick(&counters, &interfaces)
                    && let Err(e) = observer.interval(&report)
                {
                    counters.set_fatal(e.to_string());
                    stop.store(true, Ordering::Relaxed);
                }
                // Done once the readers are gone and everything they sent
                // is released (or the packet budget is spent).
                if readers_gone
                    && (totals.packets >= budget
                        || files_full
                        || pending.iter().all(|p| p.head_ts().is_none()))
                {
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
            for h in handles {
                let _ = h.join();
            }
        });
        if let Some(Ok(w)) = writer.take()
            && let Err(e) = w.finish()
        {
            counters.set_fatal(e);
        }
        let seconds = started.elapsed().as_secs_f64();
        let device_end: Vec<DeviceCounters> = interfaces.iter().map(|i| i.counters()).collect();
        let fatal = counters.fatal();
        if fatal.is_some() {
            stopped_by = "error".into();
        }
        let totals_snapshot = counters.snapshot();
        let device_sum = device_sum(&device_start, &device_end);
        let summary = CaptureSummary {
            interfaces: interfaces
                .iter()
                .enumerate()
                .map(|(i, iface)| InterfaceSummary {
                    name: iface.name.clone(),
                    link_type: iface.link_type.name(),
                    mtu: iface.mtu,
                    counters: counters.interfaces[i].snapshot(),
                    device: device_end[i].since(&device_start[i]),
                })
                .collect(),
            fanout: cfg.fanout,
            filter: cfg.filter.clone(),
            snaplen: cfg.snaplen,
            ring_bytes: cfg.geometry.bytes(),
            block_bytes: cfg.geometry.block_bytes,
            block_timeout_ms: cfg.geometry.retire_ms,
            totals: totals_snapshot,
            filtered_out: rejects.count(&device_sum, totals_snapshot.frames.socket_packets),
            seconds,
            stopped_by,
            error: fatal.clone(),
            shed_policy: shed_policy(cfg.shed_at, cfg.geometry.blocks, cfg.max_delay, place),
            max_delay_ms: cfg.max_delay.map(|d| d.as_secs_f64() * 1e3),
        };
        if let Ok(mut slot) = outcome.lock() {
            *slot = Some(summary);
        }
        let errors: Vec<String> = fatal.into_iter().collect();
        summarize(
            &replay,
            totals,
            table.as_ref(),
            Read {
                files: Vec::new(),
                errors,
                warnings: Vec::new(),
                could_not_open: false,
                read_seconds: seconds,
            },
        )
    }
}

/// The devices' counters' growth from `start` to `end`, summed.
fn device_sum(start: &[DeviceCounters], end: &[DeviceCounters]) -> DeviceCounters {
    let mut s = DeviceCounters::default();
    for (a, b) in start.iter().zip(end) {
        s += b.since(a);
    }
    s
}

/// Frames the devices saw that no socket counted: the filter's rejects.
/// How the frames a capture filter rejected are counted.
#[derive(Clone, Copy, Debug)]
struct Rejects {
    /// A `-f` program is attached; without one the program accepts every
    /// frame and nothing is filtered out.
    filtering: bool,
    /// Only received frames reach the sockets.
    incoming_only: bool,
}

impl Rejects {
    /// Frames the devices saw that no socket counted: the filter's
    /// rejects. An estimate: the sockets' counters are read after each
    /// poll, the devices' when asked, and other sockets see the devices
    /// too.
    fn count(&self, device: &DeviceCounters, socket_packets: u64) -> u64 {
        if !self.filtering {
            return 0;
        }
        let seen = device.rx_packets
            + if self.incoming_only {
                0
            } else {
                device.tx_packets
            };
        seen.saturating_sub(socket_packets)
    }
}

/// Produces an [`IntervalReport`] when an interval has passed.
struct IntervalClock {
    every: Option<Duration>,
    /// Ends the current interval at once when set ([`LiveConfig::report_now`]).
    now: Option<Arc<AtomicBool>>,
    rejects: Rejects,
    started: Instant,
    last: Instant,
    last_counts: CountersSnapshot,
    last_device: Vec<DeviceCounters>,
    last_selective: Vec<VariantCost>,
    index: u64,
}

impl IntervalClock {
    /// Intervals of `every` from the capture's start (`started`, with the
    /// devices' counters then).
    fn new(
        every: Option<Duration>,
        now: Option<Arc<AtomicBool>>,
        rejects: Rejects,
        started: Instant,
        device_start: &[DeviceCounters],
    ) -> IntervalClock {
        IntervalClock {
            every,
            now,
            rejects,
            started,
            last: started,
            last_counts: CountersSnapshot::default(),
            last_device: device_start.to_vec(),
            last_selective: Vec::new(),
            index: 0,
        }
    }

    fn tick(
        &mut self,
        counters: &LiveCounters,
        interfaces: &[Interface],
    ) -> Option<IntervalReport> {
        let asked = self
            .now
            .as_ref()
            .is_some_and(|f| f.swap(false, Ordering::Relaxed));
        if !asked && self.every.is_none_or(|every| self.last.elapsed() < every) {
            return None;
        }
        let now = counters.snapshot();
        let device: Vec<DeviceCounters> = interfaces.iter().map(|i| i.counters()).collect();
        let dev = device_sum(&self.last_device, &device);
        let seconds = self.last.elapsed().as_secs_f64();
        let delta = now.since(&self.last_counts);
        let mut report = IntervalReport {
            interval: self.index,
            elapsed_s: self.started.elapsed().as_secs_f64(),
            seconds,
            delta,
            packets_per_sec: if seconds > 0.0 {
                delta.frames.received as f64 / seconds
            } else {
                0.0
            },
            filtered_out: self.rejects.count(&dev, delta.frames.socket_packets),
            device: dev,
            selective: Vec::new(),
        };
        if let Some(g) = counters.stages.selective.get() {
            let now = g.totals();
            report.selective = now
                .iter()
                .map(|v| {
                    let before = self
                        .last_selective
                        .iter()
                        .find(|b| b.variant == v.variant)
                        .cloned()
                        .unwrap_or_default();
                    VariantCost {
                        variant: v.variant.clone(),
                        false_positives: v.false_positives - before.false_positives,
                        false_negatives: v.false_negatives - before.false_negatives,
                        cost: v.cost - before.cost,
                    }
                })
                .collect();
            self.last_selective = now;
        }
        self.index += 1;
        self.last = Instant::now();
        self.last_counts = now;
        self.last_device = device;
        Some(report)
    }
}
