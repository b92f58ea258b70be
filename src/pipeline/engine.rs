//! The engine: a source on the calling thread, a dispatcher that batches
//! records per shard, and worker threads that take the turns of shards
//! with work ([`super::schedule`]) and run every registered stage on their
//! batches.

use super::config::{StageName, ValidatedConfig};
use super::event::{Event, EventKind, PipelineSink, WindowEndEvent};
use super::latency::Latency;
use super::record::{PacketRecord, RecordBatch};
use super::refill::Refill;
use super::schedule::{FAILURE_POLL, FailOnPanic, Next, Scheduler};
use super::source::Source;
use super::stage::{Broadcast, DynCoordinator, DynShard, ReportContext, ShardContext};
use super::trace_order::TraceOrder;
use super::window::{PeriodCursor, WindowSpec};
use crate::class::ClassId;
use crate::dissect::FlowKey;
use crate::hash::{FlowHasher, shard_of};
use crate::ingest::Timestamp;
use crate::replay::{PacketSink, ReplayObserver, fill_truth};
use crate::report::{PipelineInfo, PipelineReport, StageSection, Throughput};
use crate::truth::{FlowTable, RecordTruth, TablePacket, TableSummary, record_chunk};
use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use std::any::Any;
use std::time::Instant;

/// `getrusage(who)`: the resource usage of the process
/// (`RUSAGE_SELF`) or of the calling thread (`RUSAGE_THREAD`, Linux);
/// `None` when the call fails.
fn resource_usage(who: libc::c_int) -> Option<libc::rusage> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`; getrusage only writes
    // into it and reports failure through its return value.
    let rc = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    // SAFETY: getrusage returned 0, so it initialised the struct (and it was
    // zeroed before, so every field is initialised either way).
    (rc == 0).then(|| unsafe { usage.assume_init() })
}

/// The minor page faults the calling thread has taken so far (Linux; `None`
/// elsewhere or when the call fails). Faults that a `madvise` populate
/// takes count as well.
fn thread_minor_faults() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        resource_usage(libc::RUSAGE_THREAD).map(|u| u.ru_minflt as u64)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// A worker's allowance for faulting its shards' filter memory in: a fixed
/// start ([`PREFAULT_BUDGET_BYTES`]) plus what the records it takes and its
/// own on-demand faults earn ([`PREFAULT_BYTES_PER_RECORD`],
/// [`PREFAULT_PAGES_PER_FAULT`]).
struct PrefaultBudget {
    /// Bytes left to fault in.
    bytes: usize,
    /// The thread's minor faults when the budget was last topped up, or
    /// last spent: faults past this were taken by the packets.
    faults_seen: Option<u64>,
}

impl PrefaultBudget {
    fn new() -> PrefaultBudget {
        PrefaultBudget {
            bytes: PREFAULT_BUDGET_BYTES,
            faults_seen: thread_minor_faults(),
        }
    }

    /// Tops the budget up for `records` records about to be run.
    #[inline]
    fn earn(&mut self, records: usize) {
        let earned = records.saturating_mul(PREFAULT_BYTES_PER_RECORD);
        self.bytes = self.bytes.saturating_add(earned);
    }

    /// Tops the budget up by the faults taken since it was last looked at,
    /// lets `state` fault in what fits, and takes the faults that took as
    /// seen (so that populating earns nothing).
    fn populate(&mut self, state: &mut ShardState) {
        let now = thread_minor_faults();
        if let (Some(now), Some(seen)) = (now, self.faults_seen) {
            let page = crate::pages::page_size().unwrap_or(4096);
            let earned = now
                .saturating_sub(seen)
                .saturating_mul(PREFAULT_PAGES_PER_FAULT);
            let earned = usize::try_from(earned).unwrap_or(usize::MAX);
            self.bytes = self.bytes.saturating_add(earned.saturating_mul(page));
        }
        state.populate(&mut self.bytes);
        self.faults_seen = thread_minor_faults();
    }
}

/// A `timeval` in seconds.
fn timeval_seconds(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 * 1e-6
}

/// CPU time (user + system) of the process so far, in seconds.
pub fn cpu_seconds() -> f64 {
    resource_usage(libc::RUSAGE_SELF).map_or(0.0, |u| {
        timeval_seconds(u.ru_utime) + timeval_seconds(u.ru_stime)
    })
}

/// CPU time (user + system) of the calling thread so far, in seconds;
/// `None` where the thread's clock cannot be read.
///
/// The engine reads it at the start and end of the source's loop and of
/// each worker, so that a report says which side a run's CPU went to
/// ([`Throughput::source_cpu_seconds`], [`Throughput::worker_cpu_seconds`]).
///
/// ```
/// let before = flowsieve::pipeline::thread_cpu_seconds().unwrap();
/// let mut x = 0u64;
/// for i in 0..1_000_000u64 {
///     x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
/// }
/// assert!(flowsieve::pipeline::thread_cpu_seconds().unwrap() >= before);
/// ```
pub fn thread_cpu_seconds() -> Option<f64> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable `timespec`; clock_gettime only
    // writes into it and reports failure through its return value.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    (rc == 0).then_some(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
}

/// The calling thread's CPU time in the kernel (system time) so far, in
/// seconds; `None` where it cannot be read (flowsieve reads a thread's
/// own usage on Linux only).
///
/// The engine reads it beside [`thread_cpu_seconds`], so that a report
/// says how much of each side's CPU was the kernel's
/// ([`Throughput::source_system_cpu_seconds`],
/// [`Throughput::worker_system_cpu_seconds`]). On the source thread that
/// is mostly the kernel mapping the trace's pages into the process and
/// out again, which costs per 4 KiB page of the page cache, so a trace
/// just written (cached in 4 KiB pages) costs more of it than one read
/// back from disk (cached in large folios).
///
/// How exact: Linux splits a thread's run time between user and system
/// in the proportion of the timer ticks (every 4 ms at 250 Hz) that found
/// it in each, unless the kernel was built with full accounting
/// (`CONFIG_VIRT_CPU_ACCOUNTING_GEN`), and the run time it splits is the
/// one it last brought up to date, up to a tick behind the thread clock.
/// So the split of a 100 ms run rests on about 25 samples: right on
/// average, a few milliseconds off in one run. It is what `time` and
/// `getrusage` report for a whole process.
///
/// ```
/// use flowsieve::pipeline::{thread_cpu_seconds, thread_system_cpu_seconds};
/// use std::time::{Duration, Instant};
/// // The kernel's part and the whole of 100 ms of `work` on this thread.
/// let split = |work: &dyn Fn()| {
///     let (sys0, all0) = (thread_system_cpu_seconds().unwrap(), thread_cpu_seconds().unwrap());
///     let start = Instant::now();
///     while start.elapsed() < Duration::from_millis(100) {
///         work();
///     }
///     (thread_system_cpu_seconds().unwrap() - sys0, thread_cpu_seconds().unwrap() - all0)
/// };
/// // System calls: much of the time is the kernel's (55-87 % in 30 runs
/// // on the test machine, 39 % in one run beside other tests).
/// let (sys, all) = split(&|| {
///     for _ in 0..1000 {
///         // SAFETY: getppid has no arguments and cannot fail.
///         std::hint::black_box(unsafe { libc::getppid() });
///     }
/// });
/// // A part of the thread's time, give or take the one timer tick (10 ms
/// // at the slowest, 100 Hz) by which the usage figures can lag the
/// // thread clock.
/// assert!(sys > all / 10.0 && sys <= all + 0.01, "system calls: {sys} s of {all} s");
/// // Arithmetic: none of it is (0 % in 10 runs).
/// let (sys, all) = split(&|| {
///     let mut x = 0u64;
///     for i in 0..100_000u64 {
///         x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
///     }
/// });
/// assert!(sys < all / 4.0, "arithmetic: {sys} s of {all} s in the kernel");
/// ```
pub fn thread_system_cpu_seconds() -> Option<f64> {
    #[cfg(target_os = "linux")]
    {
        resource_usage(libc::RUSAGE_THREAD).map(|u| timeval_seconds(u.ru_stime))
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// A thread's CPU clocks read at once: all its time, and the kernel's part.
#[derive(Clone, Copy)]
struct ThreadClocks {
    all: Option<f64>,
    system: Option<f64>,
}

impl ThreadClocks {
    /// The calling thread's clocks now.
    fn now() -> ThreadClocks {
        ThreadClocks {
            all: thread_cpu_seconds(),
            system: thread_system_cpu_seconds(),
        }
    }

    /// The calling thread's CPU since `self` was read, each figure when
    /// both its readings are there.
    fn since(self) -> ThreadCpu {
        let now = ThreadClocks::now();
        let delta = |a: Option<f64>, b: Option<f64>| Some((b? - a?).max(0.0));
        ThreadCpu {
            seconds: delta(self.all, now.all),
            system_seconds: delta(self.system, now.system),
        }
    }
}

/// A thread's CPU over a stretch of its life (see [`ThreadClocks`]).
#[derive(Clone, Copy, Debug)]
struct ThreadCpu {
    /// All of it ([`thread_cpu_seconds`]).
    seconds: Option<f64>,
    /// The kernel's part ([`thread_system_cpu_seconds`]).
    system_seconds: Option<f64>,
}

/// Why a run failed outright (input problems are in the report instead).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The event sink failed; the run stopped.
    #[error("the event sink failed: {0}")]
    Sink(std::io::Error),
    /// A worker thread died.
    #[error("a pipeline worker stopped unexpectedly: {0}")]
    Worker(String),
    /// Thread `thread` of the `of` the run needs (the workers and the one
    /// starting them) could not be started: the limit on processes and
    /// threads (`ulimit -u`), or memory for their stacks.
    #[error("could not start thread {thread} of the {of} the pipeline needs: {source}")]
    Spawn {
        /// Which thread, from 1: the starting thread, then the workers.
        thread: usize,
        /// The threads the run needs: the workers and the starting one.
        of: usize,
        /// Why it could not start.
        source: std::io::Error,
    },
}

/// One item of a shard's queue, handled in order during the shard's turns
/// ([`super::schedule`]).
enum Work {
    /// A batch of the shard's records.
    Records(Batch),
    /// The stream reached `(time_ns, seq)`: close the windows it passed,
    /// and acknowledge tick number `tick`.
    Tick {
        time_ns: u64,
        seq: u64,
        tick: u64,
        sent: Instant,
    },
    /// The stream ended: finish the shard's stages.
    Finish,
}

impl Work {
    /// When the source queued it, for the queue's latency figure.
    fn sent(&self) -> Option<Instant> {
        match self {
            Work::Records(batch) => Some(batch.sent),
            Work::Tick { sent, .. } => Some(*sent),
            Work::Finish => None,
        }
    }

    /// The records it carries (none but a batch's).
    fn records(&self) -> usize {
        match self {
            Work::Records(batch) => batch.records.len(),
            Work::Tick { .. } | Work::Finish => 0,
        }
    }
}

/// A batch of one shard's records on its way to whichever worker takes the
/// shard's turn.
struct Batch {
    records: Vec<PacketRecord>,
    /// The records' flow keys, in a keyed run ([`ShardContext::keyed`]);
    /// empty otherwise.
    keys: Vec<FlowKey>,
    /// What the exact table needs of each record beyond the record, when
    /// the workers keep it ([`Source::truth_in_sink`]); empty otherwise.
    truth: Vec<RecordTruth>,
    /// Coordinators' updates, each in its place among the records.
    updates: Vec<StagedUpdate>,
    sent: Instant,
}

/// A coordinator's update for one stage of a shard, in its place in the
/// shard's batch: its stage applies it after the batch's records before
/// `at` and before those from `at` on.
///
/// Why inside the batch and not as a queue item of its own: an update
/// must reach every shard between the records that came before it in the
/// stream and those after, and as an item of its own it had to cut every
/// shard's pending batch there. On a sparse trace the selective stage's
/// coordinator sends one at nearly every packet (a new round or phase),
/// so every batch held one record, and each update cost every shard a
/// queue item and a worker's turn: `Dispatcher::broadcast` and what it
/// caused were most of a one-day trace's run (BENCHMARKS.md, seventeenth
/// round). In its place in the batch, each stage sees the same records
/// and updates in the same order as before, so no figure can change.
struct StagedUpdate {
    at: usize,
    stage: usize,
    update: Broadcast,
}

/// The most updates a shard's pending batch holds: one more sends the
/// batch, however few records it has, so that a shard without traffic
/// never piles updates up (each is a pointer to a payload all shards
/// share).
const MAX_STAGED_UPDATES: usize = 64;

/// A batch's record, key, truth and update buffers, handed back by a
/// worker for reuse.
type BatchBuffers = (
    Vec<PacketRecord>,
    Vec<FlowKey>,
    Vec<RecordTruth>,
    Vec<StagedUpdate>,
);

/// One shard: its stages and, when the workers keep the exact table, the
/// table of its flows. It moves between workers with the shard's turns.
struct ShardState {
    shard: usize,
    stages: Vec<Box<dyn DynShard>>,
    table: Option<FlowTable>,
    /// The length of the top list and the classes of the table's summary,
    /// made when the shard finishes ([`FlowTable::summary`]).
    summary_shape: (usize, usize),
    /// The stages whose memory is not yet faulted in (see
    /// [`PREFAULT_PAGES_PER_FAULT`]).
    unpopulated: Vec<usize>,
}

impl ShardState {
    /// Faults in the memory of each stage not yet populated whose arrays
    /// fit in what is left of `*budget` ([`DynShard::prefault`]).
    fn populate(&mut self, budget: &mut usize) {
        let stages = &mut self.stages;
        self.unpopulated
            .retain(|&i| stages.get_mut(i).is_some_and(|s| !s.prefault(budget)));
    }
}

/// The scheduler of this engine's shards.
type Shards = Scheduler<ShardState, Work>;

/// What a worker sends back, tagged with the shard it ran: the shard's
/// events, in order, then (after a tick) the tick's number, so that
/// everything the tick closed precedes the acknowledgement.
struct WorkerMessage {
    events: Vec<Event>,
    tick_done: Option<u64>,
    /// Whether the message ends a batch or a tick of the shard's (for
    /// [`TraceOrder`], which hears of every one).
    work_done: bool,
}

/// Follows the heavy stage's windows on the source thread and turns their
/// ends into [`WindowEndEvent`]s, each delivered once every worker has
/// closed the window (so after all of the window's heavy-flow events).
struct WindowEnds {
    spec: WindowSpec,
    /// Places each packet in its window without a division a packet.
    cursor: PeriodCursor,
    /// The window the stream is in, once a packet arrived.
    current: Option<u64>,
    /// Keyed packets dispatched into `current`.
    packets: u64,
    /// Closed windows waiting for the workers: the tick that closed them,
    /// and the packet index the stream had reached.
    waiting: std::collections::VecDeque<(u64, u64, WindowEndEvent)>,
    /// Heavy events seen per window, not yet handed out.
    heavy: std::collections::BTreeMap<u64, u64>,
    /// Each shard's last acknowledged tick.
    acked: Vec<u64>,
    /// How many shards last acknowledged each tick: its first key is the
    /// tick every shard has got past, read in O(log) an acknowledgement
    /// rather than as a minimum over thousands of shards each time (at
    /// `--shards 4096` that minimum was 16 % of a run's samples;
    /// BENCHMARKS.md, seventy-fourth round).
    acks_at: std::collections::BTreeMap<u64, usize>,
}

impl WindowEnds {
    /// Closes `current` and the empty windows up to (not including)
    /// `next`, with the stream at packet index `seq`; the event waits for
    /// tick `tick`.
    fn close_until(&mut self, next: u64, tick: u64, seq: u64) {
        if let Some(w) = self.current.filter(|&w| w < next) {
            self.waiting.push_back((
                tick,
                seq,
                WindowEndEvent {
                    window: w,
                    last_window: next - 1,
                    packets: self.packets,
                    heavy: 0,
                    end: next.saturating_mul(self.spec.span()),
                },
            ));
        }
        self.current = Some(next);
        self.packets = 0;
    }

    /// Shard `shard` acknowledged tick `tick`.
    fn acknowledge(&mut self, shard: usize, tick: u64) {
        let Some(a) = self.acked.get_mut(shard) else {
            return;
        };
        let old = std::mem::replace(a, tick);
        if let Some(n) = self.acks_at.get_mut(&old) {
            *n -= 1;
            if *n == 0 {
                self.acks_at.remove(&old);
            }
        }
        *self.acks_at.entry(tick).or_insert(0) += 1;
    }

    /// The window events every shard has got past, with their heavy
    /// counts, each with the packet index it was closed at.
    fn ready(&mut self) -> Vec<(u64, WindowEndEvent)> {
        let done = self.acks_at.keys().next().copied().unwrap_or(0);
        let mut out = Vec::new();
        while let Some((tick, _, _)) = self.waiting.front() {
            if *tick > done {
                break;
            }
            let Some((_, seq, mut e)) = self.waiting.pop_front() else {
                break;
            };
            let later = self.heavy.split_off(&(e.last_window.saturating_add(1)));
            e.heavy = std::mem::replace(&mut self.heavy, later).values().sum();
            out.push((seq, e));
        }
        out
    }
}

/// What a worker gives back: the tallies (one per stage) and exact table of
/// each shard it finished, and its latency figures.
struct WorkerResult {
    finished: Vec<FinishedShard>,
    latency: Latency,
    /// The worker thread's CPU.
    cpu: ThreadCpu,
}

/// What the source's side of a run hands back once the workers are joined.
struct SourceEnd {
    summary: crate::report::ReplaySummary,
    latency: Latency,
    /// Keyed packets dispatched.
    packets: u64,
    /// Each coordinator's tally, by stage index.
    coordinated: Vec<(usize, Box<dyn Any + Send>)>,
    /// When the first keyed packet came, if one did.
    first_at: Option<Instant>,
    /// The source thread's CPU, from its first record to its end of
    /// stream.
    cpu: ThreadCpu,
}

/// A finished shard: its number, its stages' tallies and its exact table.
struct FinishedShard {
    shard: usize,
    tallies: Vec<Box<dyn Any + Send>>,
    /// The shard's exact table, with its summary, when the workers keep
    /// the tables.
    table: Option<(FlowTable, TableSummary)>,
}

/// The source side: turns keyed packets into records and per-shard batches.
struct Dispatcher<'a> {
    shards: usize,
    batch: usize,
    pending: Vec<Vec<PacketRecord>>,
    /// The pending records' keys, in a keyed run.
    pending_keys: Vec<Vec<FlowKey>>,
    /// Whether batches carry keys ([`ShardContext::keyed`]).
    keyed: bool,
    /// The pending records' packets for the exact table, when the workers
    /// keep it.
    pending_truth: Vec<Vec<RecordTruth>>,
    /// Coordinators' updates waiting in each shard's pending batch.
    pending_updates: Vec<Vec<StagedUpdate>>,
    /// Whether the workers keep the exact table ([`Source::truth_in_sink`]).
    truth: bool,
    /// Whether the processor can claim batch slots ahead ([`write_ahead`]).
    write_ahead: bool,
    filling_since: Vec<Option<Instant>>,
    /// The shards' queues, and which worker runs which shard.
    scheduler: &'a Shards,
    /// Batch buffers the source may still make before it must wait for
    /// one to come back through `free`.
    buffers_left: usize,
    free: Receiver<BatchBuffers>,
    /// The source's sleep while no buffer is free, until `refill_want`
    /// are ([`Refill`]).
    refill: &'a Refill,
    /// How many free buffers end that sleep: a quarter of what the
    /// workers' queues hold, at least one. `None` for a source that waits
    /// on the channel for each buffer, as the engine did before the
    /// sleep (a live capture, [`Source::needs_prompt_buffers`]).
    refill_want: Option<usize>,
    events: Receiver<(usize, WorkerMessage)>,
    sink: &'a mut dyn PipelineSink,
    sink_error: Option<std::io::Error>,
    first_ns: Option<i128>,
    /// When the first keyed packet arrived (for the start-up figure).
    first_at: Option<Instant>,
    time_ns: u64,
    seq: u64,
    latency: Latency,
    workers_gone: bool,
    /// The stages' coordinators, with their stage's index.
    coordinators: Vec<(usize, Box<dyn DynCoordinator>)>,
    /// Ticks sent so far.
    ticks: u64,
    /// Window ends, when the heavy stage runs and the sink wants them.
    windows: Option<WindowEnds>,
    /// The events held back until they can go out in trace order, when the
    /// sink wants events and the source is not a live one
    /// ([`Source::events_in_trace_order`]).
    order: Option<TraceOrder>,
    /// Set while the dispatcher sends a batch that held the events back
    /// ([`TraceOrder::blocking_batch`]).
    unblocking: bool,
}

impl Dispatcher<'_> {
    /// Sends a coordinator's update to every shard, after every record
    /// dispatched so far: into each shard's pending batch, after its
    /// records (see [`StagedUpdate`]).
    ///
    /// `current` is the shard whose pending batch already ends with the
    /// record the coordinator just observed: there the update goes before
    /// that record, as if it had not been queued yet, and the batch is not
    /// sent here (the caller sends it once every coordinator has seen the
    /// record), so that the update can never arrive after it.
    fn broadcast(&mut self, stage: usize, update: Broadcast, current: usize) {
        for shard in 0..self.shards {
            let mut at = self.pending[shard].len();
            if shard == current {
                at -= 1;
            }
            self.pending_updates[shard].push(StagedUpdate {
                at,
                stage,
                update: update.clone(),
            });
            if shard != current && self.pending_updates[shard].len() >= MAX_STAGED_UPDATES {
                self.send(shard);
            }
        }
    }

    /// Queues `work` for `shard`. A worker only dies early if it panicked;
    /// the run then stops and reports the failure.
    fn push(&mut self, shard: usize, work: Work) {
        if self.workers_gone {
            return;
        }
        if self.scheduler.push(shard, work).is_err() {
            self.workers_gone = true;
        }
    }

    /// Gives shard `shard`'s pending buffers, empty and never allocated,
    /// their room for a batch. Every buffer the dispatcher makes starts so
    /// (each shard's first, and each new one `fresh_buffers` makes), and
    /// this is the one place that sizes them: once a buffer at most, when
    /// it takes its first record, so the records' pushes never grow one.
    ///
    /// Why not allocated up front: at `--shards 4096` the three buffers of
    /// every shard were about 10 ms before the first packet (BENCHMARKS.md,
    /// fifty-fifth round), for shards a short trace may never use.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, shard: usize) {
        self.pending[shard].reserve_exact(self.batch);
        if self.keyed {
            self.pending_keys[shard].reserve_exact(self.batch);
        }
        if self.truth {
            self.pending_truth[shard].reserve_exact(self.batch);
        }
    }

    fn send(&mut self, shard: usize) {
        let (fresh, fresh_keys, fresh_truth, fresh_updates) = self.fresh_buffers();
        let records = std::mem::replace(&mut self.pending[shard], fresh);
        let keys = std::mem::replace(&mut self.pending_keys[shard], fresh_keys);
        let truth = std::mem::replace(&mut self.pending_truth[shard], fresh_truth);
        let updates = std::mem::replace(&mut self.pending_updates[shard], fresh_updates);
        // One clock read ends the batch's filling and starts its wait.
        let sent = Instant::now();
        if let Some(t) = self.filling_since[shard].take() {
            self.latency.record(
                0,
                sent.saturating_duration_since(t).as_nanos() as u64,
                records.len() as u64,
            );
        }
        if let Some(o) = self.order.as_mut() {
            o.sent(shard, records.first().map_or(self.seq, |r| r.seq));
        }
        let batch = Batch {
            records,
            keys,
            truth,
            updates,
            sent,
        };
        self.push(shard, Work::Records(batch));
        self.drain_events();
    }

    /// Emptied buffers for a shard's next batch: handed back by a worker,
    /// or new while the budget lasts; otherwise it sleeps until the
    /// workers have handed `refill_want` back (the records in flight are
    /// at their bound), so that it is woken once for that many batches,
    /// not for each ([`Refill`] says why). A live capture waits on the
    /// channel for each buffer instead.
    fn fresh_buffers(&mut self) -> BatchBuffers {
        loop {
            if let Ok(b) = self.free.try_recv() {
                return b;
            }
            if self.buffers_left > 0 || self.workers_gone {
                self.buffers_left = self.buffers_left.saturating_sub(1);
                // Empty: `make_room` sizes it at its first record.
                return BatchBuffers::default();
            }
            let free = &self.free;
            let back = match self.refill_want {
                Some(want) => self.refill.wait(want, FAILURE_POLL, || free.len()),
                None => match free.recv_timeout(FAILURE_POLL) {
                    Ok(b) => return b,
                    Err(_) => false,
                },
            };
            // A failed worker never hands its batch back: the run stops.
            if !back && self.scheduler.has_failed() {
                self.workers_gone = true;
            }
        }
    }

    fn drain_events(&mut self) {
        while let Ok((shard, m)) = self.events.try_recv() {
            self.deliver(shard, m);
        }
        // Once, not from the `send` below, whose own drain comes back here.
        if !self.unblocking
            && let Some(shard) = self.order.as_mut().and_then(|o| o.blocking_batch())
        {
            self.unblocking = true;
            self.send(shard);
            self.unblocking = false;
        }
    }

    fn deliver(&mut self, shard: usize, m: WorkerMessage) {
        if let Some(w) = self.windows.as_mut() {
            for e in &m.events {
                if let Event::Heavy(h) = e {
                    *w.heavy.entry(h.window).or_insert(0) += 1;
                }
            }
        }
        let mut ready = Vec::new();
        if let (Some(t), Some(w)) = (m.tick_done, self.windows.as_mut()) {
            w.acknowledge(shard, t);
            ready = w.ready();
        }
        let Some(order) = self.order.as_mut() else {
            self.emit(&m.events);
            let ready: Vec<Event> = ready
                .into_iter()
                .map(|(_, e)| Event::WindowEnd(e))
                .collect();
            self.emit(&ready);
            return;
        };
        // Every event of this work is held before the work counts as done,
        // and a window end is held before the watermark can pass it (it is
        // ready once every shard acknowledged its tick, which is when the
        // last shard's tick stops holding the watermark back).
        order.arrived(shard, m.events, m.work_done);
        for (seq, e) in ready {
            order.hold_window_end(seq, Event::WindowEnd(e));
        }
        let (sink, failed) = (&mut *self.sink, &mut self.sink_error);
        order.release(|e| emit_one(sink, failed, e));
    }

    fn emit(&mut self, events: &[Event]) {
        for e in events {
            emit_one(&mut *self.sink, &mut self.sink_error, e);
        }
    }

    /// Sends every shard a tick at the stream's position, after every
    /// record dispatched so far.
    fn tick(&mut self) {
        self.flush();
        self.ticks += 1;
        let sent = Instant::now();
        for shard in 0..self.shards {
            let tick = Work::Tick {
                time_ns: self.time_ns,
                seq: self.seq,
                tick: self.ticks,
                sent,
            };
            if let Some(o) = self.order.as_mut() {
                o.sent(shard, self.seq);
            }
            self.push(shard, tick);
        }
        self.drain_events();
    }

    /// Sends every shard the end of the stream, after every record
    /// dispatched so far.
    fn finish(&mut self) {
        for shard in 0..self.shards {
            self.push(shard, Work::Finish);
        }
    }

    /// Closes the heavy windows the stream has moved past (a packet at
    /// `(time_ns, seq)` or the clock), with a tick so that the workers close
    /// them too and say so.
    #[inline]
    fn follow_windows(&mut self, time_ns: u64, seq: u64) -> bool {
        let Some(w) = self.windows.as_mut() else {
            return false;
        };
        let next = w.cursor.locate(w.spec.position(time_ns, seq)).0;
        match w.current {
            Some(c) if c < next => {
                w.close_until(next, self.ticks + 1, seq);
                self.tick();
                true
            }
            None => {
                w.current = Some(next);
                false
            }
            _ => false,
        }
    }

    /// After the workers finished: the last window ends (the shards closed
    /// it in `finish`), and the events held for trace order go out.
    fn end_of_stream(&mut self) {
        if let Some(w) = self.windows.as_mut() {
            // A window that no packet reached yet has not begun: only a
            // window holding packets ends with the stream.
            if let Some(c) = w.current.filter(|_| w.packets > 0) {
                w.close_until(c + 1, 0, self.seq);
            }
            w.acked.fill(u64::MAX);
            w.acks_at = [(u64::MAX, w.acked.len())].into();
            let ready = w.ready();
            match self.order.as_mut() {
                Some(o) => {
                    for (seq, e) in ready {
                        o.hold_window_end(seq, Event::WindowEnd(e));
                    }
                }
                None => {
                    let ready: Vec<Event> = ready
                        .into_iter()
                        .map(|(_, e)| Event::WindowEnd(e))
                        .collect();
                    self.emit(&ready);
                }
            }
        }
        // Every shard finished: whatever is held is final.
        if let Some(o) = self.order.as_mut() {
            let (sink, failed) = (&mut *self.sink, &mut self.sink_error);
            o.release_all(|e| emit_one(sink, failed, e));
        }
    }

    fn flush(&mut self) {
        for s in 0..self.shards {
            if !self.pending[s].is_empty() || !self.pending_updates[s].is_empty() {
                self.send(s);
            }
        }
    }
}

impl PacketSink for Dispatcher<'_> {
    // Always inlined into the source's read loop: as a call, LLVM saved and
    // restored a dozen registers around it for every packet. Inlined, the
    // source takes about 30 fewer instructions a packet (callgrind,
    // `--stages none` with truth off: 87.0 M -> 81.9 M on a 150 k-packet
    // trace; BENCHMARKS.md, twenty-first round).
    #[inline(always)]
    fn packet(
        &mut self,
        key: &FlowKey,
        hash: u64,
        class: ClassId,
        ts: Timestamp,
        wire_len: u32,
        captured_len: u32,
    ) {
        // Trace time since the first keyed packet, held monotone so every
        // shard agrees on window boundaries.
        let ns = ts.as_nanos();
        if self.first_at.is_none() {
            self.first_at = Some(Instant::now());
        }
        let first = *self.first_ns.get_or_insert(ns);
        let since = u64::try_from((ns - first).max(0)).unwrap_or(u64::MAX);
        // Held in locals, not read back from `self`: rebuilding the record
        // from the two fields just stored made the compiler load them as
        // one 16-byte value, which cannot be forwarded from two 8-byte
        // stores and stalled every packet (the dispatcher's hottest
        // instruction in a profile).
        let time_ns = self.time_ns.max(since);
        let seq = self.seq;
        self.time_ns = time_ns;
        self.follow_windows(time_ns, seq);
        if let Some(w) = self.windows.as_mut() {
            w.packets += 1;
        }
        let shard = shard_of(hash, self.shards);
        if self.pending[shard].is_empty() {
            self.filling_since[shard] = Some(Instant::now());
            if self.pending[shard].capacity() == 0 {
                self.make_room(shard);
            }
            if let Some(o) = self.order.as_mut() {
                o.filling(shard, seq);
            }
        }
        // The record is written once, straight into its batch, and the
        // coordinators read it there. Built on the stack for them and then
        // copied into the batch, it was loaded as two 16-byte values, which
        // cannot be forwarded from the narrower stores that had just written
        // it: the source thread's hottest instruction in a profile. An
        // update a coordinator makes still goes before this record (see
        // `broadcast`), as when the record was queued after the updates.
        let at = self.pending[shard].len();
        self.pending[shard].push(PacketRecord {
            hash,
            time_ns,
            seq,
            wire_len,
            class,
            shard: shard as u16,
        });
        if self.write_ahead {
            write_ahead(&self.pending[shard], at);
        }
        if self.keyed {
            if self.write_ahead {
                write_ahead(&self.pending_keys[shard], at);
            }
            self.pending_keys[shard].push(*key);
        }
        if self.truth {
            if self.write_ahead {
                write_ahead(&self.pending_truth[shard], at);
            }
            self.pending_truth[shard].push(RecordTruth::new(*key, ts, captured_len));
        }
        self.seq = seq + 1;
        for i in 0..self.coordinators.len() {
            let record = &self.pending[shard][at];
            if let Some(update) = self.coordinators[i].1.observe(record) {
                let stage = self.coordinators[i].0;
                self.broadcast(stage, update, shard);
            }
        }
        if self.pending[shard].len() >= self.batch
            || self.pending_updates[shard].len() >= MAX_STAGED_UPDATES
        {
            self.send(shard);
        }
    }

    fn clock(&mut self, ts: Timestamp) {
        let Some(first) = self.first_ns else {
            return;
        };
        let since = u64::try_from((ts.as_nanos() - first).max(0)).unwrap_or(u64::MAX);
        if since <= self.time_ns {
            return;
        }
        self.time_ns = since;
        // Pending records go first, so every stage sees them before the
        // tick (which closes windows, and says which).
        if !self.follow_windows(self.time_ns, self.seq) {
            self.tick();
        }
    }

    #[inline]
    fn stopped(&self) -> bool {
        self.sink_error.is_some() || self.workers_gone
    }

    fn keeps_truth(&self) -> bool {
        self.truth
    }
}

/// Hands `event` to `sink` unless it failed before; its first error is
/// kept in `failed` and stops the run.
fn emit_one(sink: &mut dyn PipelineSink, failed: &mut Option<std::io::Error>, event: &Event) {
    if failed.is_none()
        && let Err(err) = sink.event(event)
    {
        *failed = Some(err);
    }
}

/// How many slots past the one just written [`write_ahead`] claims.
const WRITE_AHEAD_SLOTS: usize = 8;

/// Claims for writing the cache line of the slot [`WRITE_AHEAD_SLOTS`]
/// past `at` in a batch buffer (within its capacity or not: the hint never
/// faults).
///
/// Why: the buffers a batch is built in come back from the worker that
/// read them, so their lines are in that worker's cache, and each first
/// store to a line has to take it from the other core. Stores leave the
/// store buffer in order, so one such store holds up every store after
/// it. That is the reading the profile fits: a third of the source
/// thread's samples sat on the first instructions of the prior
/// coordinator's `observe`, which reads the record just written, and
/// the share went with this hint. Asked for a few records ahead, the line
/// is there when the record is written. A worker's reads of the batch
/// need no such hint: it reads front to back, a stream the hardware
/// prefetcher follows, while the source thread writes the shards' buffers
/// interleaved (BENCHMARKS.md, forty-seventh round, with the variants that
/// did not pay).
#[inline(always)]
fn write_ahead<T>(buffer: &[T], at: usize) {
    crate::prefetch::prefetch_write_slot(buffer, at + WRITE_AHEAD_SLOTS);
}

/// Batches between a worker's latency publications (live runs only).
const LATENCY_PUBLISH_EVERY: u64 = 64;

/// How much of its shards' filter memory a worker may fault in, writable,
/// before its first batch (see `filter::BitArray::prefault`): the default
/// filters take 5 MiB in all, 2.5 MiB a worker with two.
const PREFAULT_BUDGET_BYTES: usize = 8 << 20;

/// How much more filter memory a worker may fault in for each record it
/// takes, and how many pages for each page its packets faulted in on
/// demand ([`PrefaultBudget`]). A filter that did not fit is faulted in,
/// whole, before the first batch of its shard that finds budget enough.
///
/// Why populate filters at all: a page of a fresh filter first *read* maps
/// the kernel's zero page, and the first write after it has to replace that
/// mapping and flush it from the other cores' TLBs by interrupt (a
/// hypervisor exit in a VM). The filters read every counter and bit before
/// writing it, so every page pays that once: about 18 us a page here with
/// two workers, against about 2.4 us for a page faulted in writable
/// (`MADV_POPULATE_WRITE`). With 2^26 or 2^28 counters the workers spent
/// 0.24 s or 1.2 s in the kernel on those faults on the benchmark trace
/// (BENCHMARKS.md, sixty-second round).
///
/// Why a budget that is earned, not all of it at once: a run of a few
/// packets over a huge filter touches a few pages of it and should not pay
/// for all of them. Records say how much a run may touch: a record touches
/// at most `k` new pages of a stage (11 at the default, 32 in the heavy
/// stage with 2^28 counters), and 64 KiB is 16 pages, so a shard's first
/// full batch (512 records at the default `--batch`) earns 32 MiB, and a
/// long run populates filters up to that size before their shard's first
/// batch. Faults say how much a run did touch, where records alone were
/// not enough yet (larger filters): with 8 pages earned a fault, a run that
/// goes on to touch a whole filter takes about an eighth of its pages on
/// demand. A short run populates at most 16 pages a record plus 8 a page
/// its packets faulted in. A run of few flows, whose repeats the stages'
/// front caches keep off the filters, may so populate pages its packets
/// would never have touched, up to the filters' size (about 0.6 ms a MiB
/// here).
const PREFAULT_BYTES_PER_RECORD: usize = 64 << 10;

/// See [`PREFAULT_BYTES_PER_RECORD`].
const PREFAULT_PAGES_PER_FAULT: u64 = 8;

/// A worker: takes the turns of shards with work (building a shard's state
/// with `build_state` at its first turn), runs every stage of each batch's
/// shard over the batch, stage by stage, and finishes each shard whose
/// stream ended into tallies.
fn worker(
    scheduler: &Shards,
    build_state: &(dyn Fn(usize) -> ShardState + Sync),
    hand_back: HandBack,
    index: usize,
    events: EventReturn,
    mut latency: Latency,
    gauges: Option<&super::gauges::LatencyGauges>,
) -> WorkerResult {
    // A panic below loses the state of the shard this worker holds; the
    // guard then stops the run instead of leaving it waiting on that shard.
    let _guard = FailOnPanic(scheduler);
    let clocks = ThreadClocks::now();
    let mut budget = PrefaultBudget::new();
    let mut buffer: Vec<Event> = Vec::new();
    let mut finished = Vec::new();
    let mut handled_total = 0u64;
    while let Next::Shard(shard) = scheduler.next(index) {
        // A shard's first turn builds its state.
        let Some(mut state) = scheduler.claim_or_make(shard, || build_state(shard)) else {
            break;
        };
        let due = scheduler.due(shard);
        let mut handled = 0;
        let mut ended = false;
        while handled < due {
            let Some(work) = scheduler.take(shard) else {
                break;
            };
            handled += 1;
            handled_total += 1;
            if let Some(q) = gauges
                .filter(|_| handled_total.is_multiple_of(LATENCY_PUBLISH_EVERY))
                .and_then(|g| g.quantiles.get(index))
            {
                latency.publish(q);
            }
            // Filter memory is populated before the clock is read: the
            // batch waits for it as it would for any other work of the
            // worker's, and no stage's time includes it.
            if let Work::Records(batch) = &work {
                budget.earn(batch.records.len());
                if !state.unpopulated.is_empty() {
                    budget.populate(&mut state);
                }
            }
            // One clock read ends the item's wait and starts its first
            // stage.
            let received = Instant::now();
            if let Some(sent) = work.sent() {
                latency.record(
                    1,
                    received.saturating_duration_since(sent).as_nanos() as u64,
                    work.records() as u64,
                );
            }
            let mut tick_done = None;
            match work {
                Work::Records(batch) => {
                    run_batch(&mut state, &batch, received, &mut latency, &mut buffer);
                    hand_back.recycle(batch);
                }
                Work::Tick {
                    time_ns, seq, tick, ..
                } => {
                    for stage in state.stages.iter_mut() {
                        stage.close_window(time_ns, seq, &mut buffer);
                    }
                    tick_done = Some(tick);
                }
                Work::Finish => ended = true,
            }
            // Events first, then the tick's acknowledgement after them, in
            // one message; every batch's end too when the source puts events
            // in trace order. The source may be gone (a failed sink); then
            // nobody waits, and the events are dropped with the run.
            if !buffer.is_empty() || tick_done.is_some() || (events.every_batch && !ended) {
                let _ = events.to_source.send((
                    shard,
                    WorkerMessage {
                        events: std::mem::take(&mut buffer),
                        tick_done,
                        work_done: !ended,
                    },
                ));
            }
            if ended {
                break;
            }
        }
        if ended {
            // Finish is the last item the source pushes to a shard: no turn
            // of it follows, and its state is done with.
            // The table is summarised here, on the worker, in parallel with
            // the other workers and while other shards may still run,
            // rather than on the source after the last shard (see
            // `TableSummary`).
            let (top, classes) = state.summary_shape;
            finished.push(FinishedShard {
                shard: state.shard,
                tallies: state.stages.into_iter().map(|st| st.finish()).collect(),
                table: state.table.map(|t| {
                    let summary = t.summary(top, classes);
                    (t, summary)
                }),
            });
            scheduler.retire();
        } else {
            scheduler.end_turn(shard, state, handled);
        }
    }
    WorkerResult {
        finished,
        latency,
        cpu: clocks.since(),
    }
}

/// Runs every stage of `state`'s shard over `batch`, then records the
/// batch's packets into the shard's exact table if it keeps one. `start`
/// is when the worker took the batch: each stage's time runs from the
/// previous stage's end, so a batch reads the clock once a stage.
fn run_batch(
    state: &mut ShardState,
    batch: &Batch,
    start: Instant,
    latency: &mut Latency,
    events: &mut Vec<Event>,
) {
    let mut start = start;
    let (records, keys) = (&batch.records[..], &batch.keys[..]);
    for (i, stage) in state.stages.iter_mut().enumerate() {
        // The records between this stage's updates, each update in its
        // place; a batch without updates is one piece.
        let mut from = 0;
        for u in batch.updates.iter().filter(|u| u.stage == i) {
            let to = u.at.min(records.len());
            if to > from {
                stage.process(piece(records, keys, from, to), events);
            }
            stage.apply(&*u.update);
            from = from.max(to);
        }
        if from < records.len() {
            stage.process(piece(records, keys, from, records.len()), events);
        }
        let end = Instant::now();
        latency.record(
            2 + i,
            end.saturating_duration_since(start).as_nanos() as u64,
            records.len() as u64,
        );
        start = end;
    }
    // After the stages, so that the table's misses do not delay the batch's
    // stage work (or its latency figures).
    if let Some(t) = state.table.as_mut() {
        // The dispatcher pushes a record's truth with the record, so the
        // two lists are one length.
        debug_assert_eq!(records.len(), batch.truth.len());
        let packets = records.iter().zip(&batch.truth).map(|(r, t)| InTable(r, t));
        record_chunk(t, packets);
        // Its own row, after the stages' (`latency::TRUTH`): what ground
        // truth costs beside the stages, in every report.
        latency.record(
            2 + state.stages.len(),
            start.elapsed().as_nanos() as u64,
            records.len() as u64,
        );
    }
}

/// A record and what the exact table needs beside it: one packet as the
/// shard's table counts it.
#[derive(Clone, Copy)]
struct InTable<'a>(&'a PacketRecord, &'a RecordTruth);

impl TablePacket for InTable<'_> {
    #[inline(always)]
    fn key(&self) -> &FlowKey {
        self.1.key()
    }
    #[inline(always)]
    fn hash(&self) -> u64 {
        self.0.hash
    }
    #[inline(always)]
    fn class(&self) -> ClassId {
        self.0.class
    }
    #[inline(always)]
    fn ts(&self) -> Timestamp {
        self.1.ts()
    }
    #[inline(always)]
    fn wire_len(&self) -> u32 {
        self.0.wire_len
    }
    #[inline(always)]
    fn captured_len(&self) -> u32 {
        self.1.captured_len()
    }
}

/// Records `from..to` of a batch, with their keys when it has them.
fn piece<'a>(
    records: &'a [PacketRecord],
    keys: &'a [FlowKey],
    from: usize,
    to: usize,
) -> RecordBatch<'a> {
    let records = records.get(from..to).unwrap_or(&[]);
    RecordBatch::with_keys(records, keys.get(from..to).unwrap_or(&[]))
}

/// A worker's way back to the source for its shards' events.
struct EventReturn {
    to_source: Sender<(usize, WorkerMessage)>,
    /// Whether every batch's end is sent, events or not (for
    /// [`TraceOrder`]); otherwise only events and ticks are.
    every_batch: bool,
}

/// A worker's way back to the source for emptied batch buffers.
struct HandBack<'a> {
    /// The pool of free buffers.
    free: Sender<BatchBuffers>,
    /// Wakes the source when it sleeps for buffers and enough are back.
    refill: &'a Refill,
}

impl HandBack<'_> {
    /// Hands a batch's buffers back for reuse, never waiting. The pool
    /// holds every buffer the source may make, so it is never full: the
    /// send fails only when the source is gone, and the buffers are then
    /// dropped. (A dropped buffer while the source runs would be a lost
    /// credit: the source counts the buffers it made and waits for them to
    /// come back.) That holds for a buffer never given room too (a shard's
    /// first, sent with updates only): it comes back as well, and gets its
    /// room when it next takes a record (`Dispatcher::make_room`).
    fn recycle(&self, mut batch: Batch) {
        batch.records.clear();
        batch.keys.clear();
        batch.truth.clear();
        batch.updates.clear();
        let free = &self.free;
        let _ = free.try_send((batch.records, batch.keys, batch.truth, batch.updates));
        self.refill.returned(|| free.len());
    }
}

/// Runs the pipeline: `source` feeds the dispatcher on the calling thread,
/// the validated configuration's stages run on its worker threads, events
/// go to `sink` and progress to `observer`; the result is the report.
///
/// ```
/// use flowsieve::class::Classifier;
/// use flowsieve::pipeline::{run, FileSource, NoEvents, PipelineConfig};
/// use flowsieve::replay::NoObserver;
/// let mut cfg = PipelineConfig::new(Classifier::ports());
/// cfg.threads = 2;
/// let validated = cfg.validate().unwrap();
/// let source = FileSource::new(vec!["traces/default.pcap".into()], &validated);
/// let report = run(source, &validated, &mut NoObserver, &mut NoEvents).unwrap();
/// let heavy = report.heavy().unwrap();
/// // With ground truth: a flow is never missed unless a counter saturated.
/// assert_eq!(heavy.false_negatives_unsaturated, Some(0));
/// assert_eq!(report.pipeline.packets, report.replay.trace.ip_packets);
/// ```
pub fn run<S: Source>(
    source: S,
    cfg: &ValidatedConfig,
    observer: &mut dyn ReplayObserver,
    sink: &mut dyn PipelineSink,
) -> Result<PipelineReport, PipelineError> {
    run_with_gauges(source, cfg, observer, sink, None)
}

/// Runs the pipeline with live figures published into `gauges` as it goes
/// (see [`super::gauges`]); otherwise as [`run`].
pub fn run_with_gauges<S: Source>(
    source: S,
    cfg: &ValidatedConfig,
    observer: &mut dyn ReplayObserver,
    sink: &mut dyn PipelineSink,
    gauges: Option<std::sync::Arc<super::gauges::Gauges>>,
) -> Result<PipelineReport, PipelineError> {
    let c = cfg.config();
    let stages = cfg.dyn_stages();
    let names: Vec<&'static str> = stages.iter().map(|s| s.name()).collect();
    let threads = c.threads.min(c.shards).max(1);
    let batch = c.batch.max(1);
    let wants: Vec<EventKind> = [EventKind::Heavy, EventKind::NewFlow, EventKind::WindowEnd]
        .into_iter()
        .filter(|&k| sink.wants(k))
        .collect();
    let classes = c.replay.classifier.names().len();
    let wall = Instant::now();
    let cpu0 = cpu_seconds();
    let ctx_for = |shard| ShardContext {
        shard,
        shards: c.shards,
        classes,
        truth: c.replay.truth,
        events: wants.clone(),
        gauges: gauges.clone(),
        export: c.export.clone(),
    };
    let keyed = ctx_for(0).keyed();
    let truth_in_workers = source.truth_in_sink();
    let ordered = !wants.is_empty() && source.events_in_trace_order();
    // The latency rows after `source` and `queue`: the stages', then the
    // exact table's when the workers keep it.
    let rows: Vec<&'static str> = names
        .iter()
        .copied()
        .chain(truth_in_workers.then_some(super::latency::TRUTH))
        .collect();
    let latency_gauges = gauges.as_ref().map(|g| {
        g.latency
            .get_or_init(|| super::gauges::LatencyGauges::new(threads, Latency::new(&rows).rows()))
    });
    // Coordinators see the stream as shard 0 of 1 would.
    let coordinators: Vec<(usize, Box<dyn DynCoordinator>)> = stages
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.coordinator(&ctx_for(0)).map(|c| (i, c)))
        .collect();
    // The worker that takes a shard's first turn builds its state, once
    // the source is reading and has work for it (a shard without records
    // is built for its end of stream). Built here instead, before the
    // source starts, they took about 20 us a shard before the first packet:
    // 21-27 ms at `--shards 1024` and 70-95 ms at 4096, past the 20 ms
    // start-up target (BENCHMARKS.md, fifty-fifth round). Built by every
    // worker for its home shards as it started, they were still 44-68 ms
    // at `--shards 4096 --threads 64` on two cores, the workers taking the
    // cores from the source. A state is the same wherever and whenever it
    // is built: it depends on the configuration and the shard's index
    // alone.
    let build_state = |shard| {
        let ctx = ctx_for(shard);
        ShardState {
            shard,
            stages: stages.iter().map(|s| s.shard(&ctx)).collect(),
            table: truth_in_workers
                .then(|| FlowTable::with_hasher(FlowHasher::new(c.replay.hash_key))),
            summary_shape: (c.replay.top, classes),
            unpopulated: (0..stages.len()).collect(),
        }
    };
    let queue = c.queue_batches.max(1);
    let scheduler = Scheduler::unparked(c.shards, threads);
    // The batch buffers in all: one pending per shard, and `queue` queued
    // plus one being handled per worker, as `config::batch_bytes` counts
    // them. The source makes no more, and waits for some to come back, so
    // this bounds the records in flight, whichever shards they are for.
    let buffers = c.shards + threads * (queue + 1) + 1;
    let (free_tx, free_rx) = bounded::<BatchBuffers>(buffers);
    // Made here, on the thread that runs the source below: the one it
    // wakes. The dispatcher cannot leave this thread: it holds the sink,
    // `&mut dyn PipelineSink`, which is not `Send`, so no source can hand
    // it to a thread of its own.
    let refill = Refill::for_current_thread();
    let refill = &refill;
    // A quarter of the queues' worth, or each buffer as it comes back for
    // a source that must be back at its input as soon as it can go on (a
    // live capture).
    let refill_want = (!source.needs_prompt_buffers()).then(|| (threads * queue / 4).max(1));
    let (event_tx, event_rx) = unbounded::<(usize, WorkerMessage)>();
    let mut results = Vec::with_capacity(threads);
    let end = std::thread::scope(|scope| {
        let scheduler = &scheduler;
        let build_state = &build_state;
        let rows = &rows;
        // The threads a spawn error counts: the starting one, then the
        // workers.
        let needed = threads + 1;
        // The workers are started by a thread of their own while the source
        // reads. Started here, one after the other before the first record,
        // they delayed it by about 0.2 ms a worker on two cores (each new
        // thread is scheduled as it is made): 50 ms at `--threads 256
        // --shards 256`, 250 ms at 1024, past the 20 ms start-up target
        // (BENCHMARKS.md, hundred-and-second round). The source needs no
        // worker to begin: its batches wait in their shards' queues, and a
        // worker that starts late takes its turns then. Results cannot
        // change: they depend on each shard's order of work, never on
        // which worker runs it or when ([`super::schedule`]).
        let spawner = std::thread::Builder::new()
            .name("flowsieve-spawn".into())
            .spawn_scoped(scope, move || {
                let mut handles = Vec::with_capacity(threads);
                for index in 0..threads {
                    let (free, events, latency) =
                        (free_tx.clone(), event_tx.clone(), Latency::new(rows));
                    let spawned = std::thread::Builder::new()
                        .name("flowsieve-shard".into())
                        .spawn_scoped(scope, move || {
                            worker(
                                scheduler,
                                build_state,
                                HandBack { free, refill },
                                index,
                                EventReturn {
                                    to_source: events,
                                    every_batch: ordered,
                                },
                                latency,
                                latency_gauges,
                            )
                        });
                    match spawned {
                        Ok(handle) => handles.push(handle),
                        Err(e) => {
                            // The workers already started wait for turns,
                            // and the source for them: stop both. The
                            // scope joins the workers.
                            scheduler.fail();
                            return Err((index, e));
                        }
                    }
                }
                Ok(handles)
            })
            .map_err(|source| PipelineError::Spawn {
                thread: 1,
                of: needed,
                source,
            })?;
        let mut dispatcher = Dispatcher {
            shards: c.shards,
            batch,
            // Empty, not yet allocated: a shard's buffers get their room
            // when its first record comes (`Dispatcher::make_room`), so
            // that thousands of shards do not delay the first packet.
            pending: (0..c.shards).map(|_| Vec::new()).collect(),
            pending_keys: (0..c.shards).map(|_| Vec::new()).collect(),
            keyed,
            pending_truth: (0..c.shards).map(|_| Vec::new()).collect(),
            pending_updates: (0..c.shards).map(|_| Vec::new()).collect(),
            truth: truth_in_workers,
            write_ahead: crate::prefetch::write_prefetch_supported(),
            filling_since: vec![None; c.shards],
            scheduler,
            free: free_rx,
            refill,
            refill_want,
            buffers_left: buffers - c.shards,
            events: event_rx,
            sink,
            sink_error: None,
            // Epoch-aligned windows measure time from 1970, so that every
            // probe of a network closes window w at the same instant.
            first_ns: c.epoch_windows.then_some(0),
            first_at: None,
            time_ns: 0,
            seq: 0,
            latency: Latency::new(rows),
            workers_gone: false,
            coordinators,
            ticks: 0,
            windows: (c.stages.contains(StageName::Heavy) && wants.contains(&EventKind::WindowEnd))
                .then(|| WindowEnds {
                    spec: c.heavy.window,
                    cursor: PeriodCursor::new(c.heavy.window.span()),
                    current: None,
                    packets: 0,
                    waiting: Default::default(),
                    heavy: Default::default(),
                    acked: vec![0; c.shards],
                    acks_at: [(0, c.shards)].into(),
                }),
            order: ordered.then(|| TraceOrder::new(c.shards)),
            unblocking: false,
        };
        // A panic on this thread (a coordinator's or a sink's bug) must stop
        // the workers too: they wait for batches that will never come, and
        // the scope would wait for them forever instead of passing the panic
        // on.
        let _stop_workers = FailOnPanic(scheduler);
        let source_clocks = ThreadClocks::now();
        let summary = source.run(observer, &mut dispatcher);
        if !dispatcher.stopped() {
            dispatcher.flush();
        }
        // Pushed even after a failed sink: the workers handle what is
        // queued, then finish, as when the stream ends.
        dispatcher.finish();
        let source_cpu = source_clocks.since();
        let handles = match spawner.join() {
            Ok(Ok(handles)) => handles,
            // Worker `index` is thread `index + 2`, after the starting one.
            Ok(Err((index, source))) => {
                return Err(PipelineError::Spawn {
                    thread: index + 2,
                    of: needed,
                    source,
                });
            }
            Err(_) => {
                return Err(PipelineError::Worker(
                    "the thread starting the workers panicked".into(),
                ));
            }
        };
        let mut panicked = false;
        for h in handles {
            match h.join() {
                Ok(r) => results.push(r),
                Err(_) => panicked = true,
            }
        }
        while let Ok((shard, m)) = dispatcher.events.recv() {
            dispatcher.deliver(shard, m);
        }
        if !panicked && !dispatcher.workers_gone {
            dispatcher.end_of_stream();
        }
        if panicked || dispatcher.workers_gone {
            return Err(PipelineError::Worker("a shard worker panicked".into()));
        }
        if let Some(e) = dispatcher.sink_error.take() {
            return Err(PipelineError::Sink(e));
        }
        let coordinated: Vec<(usize, Box<dyn Any + Send>)> = dispatcher
            .coordinators
            .drain(..)
            .map(|(i, c)| (i, c.finish()))
            .collect();
        Ok(SourceEnd {
            summary,
            latency: dispatcher.latency,
            packets: dispatcher.seq,
            coordinated,
            first_at: dispatcher.first_at,
            cpu: source_cpu,
        })
    })?;
    let SourceEnd {
        summary,
        latency: source_latency,
        packets,
        coordinated,
        first_at,
        cpu: source_cpu,
    } = end;
    // Tallies per stage, merged in shard order so that the report does not
    // depend on which worker ran which shard.
    let mut latency = source_latency;
    let mut by_shard: Vec<(usize, Vec<Box<dyn Any + Send>>)> = Vec::with_capacity(c.shards);
    let mut tables = Vec::new();
    let mut table_summaries = Vec::new();
    // None when any worker's clock could not be read: a partial sum would
    // pass for the whole.
    let worker_cpu_seconds = results.iter().map(|r| r.cpu.seconds).sum::<Option<f64>>();
    let worker_system_cpu_seconds = results
        .iter()
        .map(|r| r.cpu.system_seconds)
        .sum::<Option<f64>>();
    for r in results {
        latency.merge(&r.latency);
        for f in r.finished {
            by_shard.push((f.shard, f.tallies));
            if let Some((table, summary)) = f.table {
                tables.push(table);
                table_summaries.push(summary);
            }
        }
    }
    let mut summary = summary;
    if truth_in_workers {
        let truth = TableSummary::merge(table_summaries, summary.options.top);
        fill_truth(&mut summary, truth);
    }
    by_shard.sort_by_key(|s| s.0);
    let mut per_stage: Vec<Vec<Box<dyn Any + Send>>> = stages.iter().map(|_| Vec::new()).collect();
    for (i, t) in coordinated {
        per_stage[i].push(t);
    }
    for (_, tallies) in by_shard {
        for (i, t) in tallies.into_iter().enumerate() {
            per_stage[i].push(t);
        }
    }
    let ctx = ReportContext {
        classifier: c.replay.classifier.clone(),
        truth: c.replay.truth,
        shards: c.shards,
    };
    let sections = stages
        .iter()
        .zip(per_stage)
        .filter_map(|(s, tallies)| {
            s.report(tallies, &ctx).map(|section| StageSection {
                name: s.name(),
                section,
            })
        })
        .collect();
    let wall_seconds = wall.elapsed().as_secs_f64();
    let cpu_seconds = cpu_seconds() - cpu0;
    // Read while `tables` (the exact flow tables) are still alive.
    let anon_huge_page_bytes = crate::pages::anon_huge_page_bytes();
    let peak_resident_bytes = crate::pages::peak_resident_bytes();
    drop(tables);
    let read = summary.trace.packets;
    let per = |secs: f64| if secs > 0.0 { read as f64 / secs } else { 0.0 };
    Ok(PipelineReport {
        replay: summary,
        pipeline: PipelineInfo {
            shards: c.shards,
            batch,
            packets,
            epoch_windows: c.epoch_windows,
        },
        sections,
        stages: latency.summary(),
        throughput: Throughput {
            packets_per_sec: per(wall_seconds),
            threads,
            shards: c.shards,
            wall_seconds,
            cpu_seconds,
            packets_per_cpu_sec: per(cpu_seconds),
            source_cpu_seconds: source_cpu.seconds,
            worker_cpu_seconds,
            source_system_cpu_seconds: source_cpu.system_seconds,
            worker_system_cpu_seconds,
            // From the process's start when the binary marked it, so that
            // the command line, opening the inputs and everything between
            // validation and the engine count too; otherwise validation
            // plus the engine's own time before the first packet.
            startup_seconds: first_at.map(|t| match super::process_started() {
                Some(start) => t.saturating_duration_since(start).as_secs_f64(),
                None => cfg.validate_seconds() + t.duration_since(wall).as_secs_f64(),
            }),
            huge_pages: crate::pages::huge_pages(),
            huge_page_decision: crate::pages::huge_page_decision(),
            anon_huge_page_bytes,
            peak_resident_bytes,
            memory: cfg.memory(),
        },
        capture: None,
    })
}
