//! The staged, sharded pipeline: source → dissect + hash → dispatch by flow
//! hash to shards → per-shard stages → report.
//!
//! - The **source** (the calling thread) reads the traces with
//!   [`crate::replay`], which dissects packets borrowed from the mapped file
//!   and hashes their keys. Only what the stages need crosses a thread: a
//!   compact [`PacketRecord`] (key, hash, class, time, sequence, length).
//! - Records are **dispatched** by flow hash to `shards` shards; shard `s`
//!   lives on worker `s % threads`. Each worker has a bounded crossbeam
//!   channel of batches ([`PipelineConfig::batch`] records), so a slow
//!   worker holds the source back instead of growing a queue; emptied
//!   batch buffers travel back on a second channel and are reused.
//! - Each shard runs the three **stages** ([`heavy`], [`new_flows`],
//!   [`selective`]) on its records in trace order. A shard is owned by one
//!   thread, so its filters need no lock and no atomic read-modify-write.
//! - The **report** sums the shards' tallies in shard order. Nothing in it
//!   depends on which thread ran which shard, so for a given configuration
//!   (and shard count) the report is identical for any number of threads,
//!   apart from the timing figures.
//!
//! Results go to a [`PipelineSink`] (events) and come back as a
//! [`PipelineReport`] (plain data); the engine never formats output.
//!
//! ```
//! use flowsieve::class::Classifier;
//! use flowsieve::pipeline::{run, NoEvents, PipelineConfig};
//! use flowsieve::replay::NoObserver;
//! let mut cfg = PipelineConfig::new(Classifier::ports());
//! cfg.threads = 2;
//! let report = run(&["traces/default.pcap".into()], &cfg, &mut NoObserver, &mut NoEvents);
//! let heavy = report.heavy.as_ref().unwrap();
//! // With ground truth: a flow is never missed unless a counter saturated.
//! assert_eq!(heavy.false_negatives_unsaturated, Some(0));
//! assert_eq!(report.pipeline.packets, report.replay.trace.ip_packets);
//! ```

mod event;
pub mod heavy;
mod keyed;
mod latency;
pub mod new_flows;
mod record;
pub mod selective;
mod summary;
mod window;

pub use event::{HeavyEvent, NewFlowEvent, NoEvents, PipelineSink};
pub use heavy::{HeavyConfig, HeavyShard, HeavyTally};
pub use latency::{Latency, STAGE_NAMES};
pub use new_flows::{NewFlowConfig, NewFlowShard, NewFlowTally, RecycleSpec, ResolvedNewFlow};
pub use record::PacketRecord;
pub use selective::{
    DirectoryKind, QueryUnit, SelectiveConfig, SelectiveShard, SelectiveTally, Sweeps,
};
pub use summary::cpu_seconds;
pub use window::{parse_duration_ns, WindowParseError, WindowSpec};

use crate::class::{ClassId, Classifier};
use crate::dissect::FlowKey;
use crate::filter::CounterWidth;
use crate::hash::shard_of;
use crate::ingest::Timestamp;
use crate::model::recycling::Hashing;
use crate::replay::{replay_into, PacketSink, ReplayConfig, ReplayObserver};
use crate::report::PipelineReport;
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use std::path::PathBuf;
use std::time::Instant;

/// Which stages run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageSet {
    pub heavy: bool,
    pub new_flows: bool,
    pub selective: bool,
}

impl StageSet {
    /// All three stages.
    pub const ALL: StageSet = StageSet {
        heavy: true,
        new_flows: true,
        selective: true,
    };
}

/// Everything a pipeline run needs.
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// Reading, dissection, classes, exact flow table (`truth` also turns on
    /// the stages' ground truth).
    pub replay: ReplayConfig,
    /// Worker threads for the shards (at least 1; the source is the calling
    /// thread).
    pub threads: usize,
    /// Shards (independent of `threads`; results depend on it).
    pub shards: usize,
    /// Records per batch.
    pub batch: usize,
    /// Batches a worker's queue holds before the source waits.
    pub queue_batches: usize,
    pub stages: StageSet,
    pub heavy: HeavyConfig,
    pub new_flows: NewFlowConfig,
    pub selective: SelectiveConfig,
}

impl PipelineConfig {
    /// The defaults the command line uses: 8 shards, 2 threads, 512-record
    /// batches; stage 1 with 1 s windows, theta 10, 2^22 8-bit counters and
    /// `k_opt(10)` for 2^20 packets per window; stage 2 with 2^23 bits,
    /// k = 4, sigma sized for a 1% average rate, one phase, retaining,
    /// colliding; stage 3 with 1 s cache and 5 s query windows, a Bloom
    /// directory of 10 bits per element, 1% prior sampling and alpha 1.
    pub fn new(classifier: Classifier) -> PipelineConfig {
        let alpha = classifier.alphas(1.0);
        let counters = 1 << 22;
        let replay = ReplayConfig::new(classifier);
        PipelineConfig {
            replay,
            threads: 2,
            shards: 8,
            batch: 512,
            queue_batches: 16,
            stages: StageSet::ALL,
            heavy: HeavyConfig {
                window: WindowSpec::Time(1_000_000_000),
                theta: 10,
                counters,
                width: CounterWidth::W8,
                k: heavy::default_k(10, counters, DEFAULT_HEAVY_LOAD),
                conservative: false,
            },
            new_flows: NewFlowConfig {
                bits: 1 << 23,
                k: 4,
                recycle: RecycleSpec::TargetFpr(0.01),
                two_phase: false,
                retaining: true,
                hashing: Hashing::Colliding,
                horizon_ns: None,
            },
            selective: SelectiveConfig {
                cache_window: WindowSpec::Time(1_000_000_000),
                query_window: WindowSpec::Time(5_000_000_000),
                directory: DirectoryKind::Bloom,
                bpe: 10.0,
                k: None,
                query_unit: QueryUnit::Flow,
                prior_sample: 0.01,
                prior_smoothing: 0.02,
                prior_min_samples: 5,
                prior_default: 0.5,
                alpha,
                sweeps: Sweeps::default(),
            },
        }
    }
}

/// The insertions per window the default `k` is tuned for.
pub const DEFAULT_HEAVY_LOAD: u64 = 1 << 20;

/// Why a configuration cannot run.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PipelineConfigError {
    #[error("--shards must be between 1 and 4096 (got {0})")]
    Shards(usize),
    #[error("--threads must be at least 1 (got {0})")]
    Threads(usize),
    #[error("--theta must be at least 1")]
    Theta,
    #[error("--theta {theta} cannot be reached by {bits}-bit counters (they saturate at {max})")]
    ThetaAboveCounter { theta: u64, bits: u32, max: u64 },
    #[error("--cbf-counters {counters} leaves fewer than k = {k} counters per shard")]
    TooFewCounters { counters: usize, k: usize },
    #[error(transparent)]
    NewFlows(#[from] new_flows::NewFlowConfigError),
    #[error("--query-window ({query}) must be longer than --cache-window ({cache}) and on the same axis (both time or both packets)")]
    Windows { cache: String, query: String },
    #[error("--dir-bpe must be positive (got {0})")]
    Bpe(f64),
    #[error("alpha must be positive (got {0})")]
    Alpha(f64),
}

impl PipelineConfig {
    /// Checks the configuration and resolves the new-flow filter's sizes.
    pub fn validate(&self) -> Result<ResolvedNewFlow, PipelineConfigError> {
        if self.shards == 0 || self.shards > 4096 {
            return Err(PipelineConfigError::Shards(self.shards));
        }
        if self.threads == 0 {
            return Err(PipelineConfigError::Threads(self.threads));
        }
        let h = &self.heavy;
        if h.theta == 0 {
            return Err(PipelineConfigError::Theta);
        }
        if h.theta > h.width.max() {
            return Err(PipelineConfigError::ThetaAboveCounter {
                theta: h.theta,
                bits: h.width.bits(),
                max: h.width.max(),
            });
        }
        if h.counters / self.shards < h.k.max(1) {
            return Err(PipelineConfigError::TooFewCounters {
                counters: h.counters,
                k: h.k,
            });
        }
        let s = &self.selective;
        if !s.cache_window.same_axis(&s.query_window)
            || s.query_window.span() <= s.cache_window.span()
        {
            return Err(PipelineConfigError::Windows {
                cache: s.cache_window.to_string(),
                query: s.query_window.to_string(),
            });
        }
        if s.bpe.is_nan() || s.bpe <= 0.0 {
            return Err(PipelineConfigError::Bpe(s.bpe));
        }
        for &a in s.alpha.iter().chain(&s.sweeps.alpha) {
            if a.is_nan() || a <= 0.0 {
                return Err(PipelineConfigError::Alpha(a));
            }
        }
        Ok(self.new_flows.resolve(self.shards)?)
    }
}

/// The three stages of one shard.
#[derive(Debug)]
pub struct Shard {
    pub heavy: Option<HeavyShard>,
    pub new_flows: Option<NewFlowShard>,
    pub selective: Option<SelectiveShard>,
}

impl Shard {
    /// One shard of a validated configuration.
    pub fn new(cfg: &PipelineConfig, resolved: &ResolvedNewFlow, events: (bool, bool)) -> Shard {
        let classes = cfg.replay.classifier.names().len();
        let truth = cfg.replay.truth;
        Shard {
            heavy: cfg
                .stages
                .heavy
                .then(|| HeavyShard::new(cfg.heavy, cfg.shards, classes, truth, events.0)),
            new_flows: cfg
                .stages
                .new_flows
                .then(|| NewFlowShard::new(&cfg.new_flows, resolved, classes, truth, events.1)),
            selective: cfg
                .stages
                .selective
                .then(|| SelectiveShard::new(&cfg.selective, classes)),
        }
    }
}

/// A batch of records on its way to a worker.
struct Batch {
    records: Vec<PacketRecord>,
    sent: Instant,
}

/// Events a worker hands back.
type EventBatch = (Vec<HeavyEvent>, Vec<NewFlowEvent>);

/// The source side: turns keyed packets into records and batches.
struct Dispatcher<'a> {
    shards: usize,
    threads: usize,
    batch: usize,
    pending: Vec<Vec<PacketRecord>>,
    filling_since: Vec<Option<Instant>>,
    to_workers: Vec<Sender<Batch>>,
    free: Receiver<Vec<PacketRecord>>,
    events: Receiver<EventBatch>,
    sink: &'a mut dyn PipelineSink,
    first_ns: Option<i128>,
    time_ns: u64,
    seq: u64,
    latency: Latency,
    workers_gone: bool,
}

impl Dispatcher<'_> {
    fn send(&mut self, w: usize) {
        let fresh = self
            .free
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(self.batch));
        let records = std::mem::replace(&mut self.pending[w], fresh);
        if let Some(t) = self.filling_since[w].take() {
            self.latency.record(0, t.elapsed().as_nanos() as u64);
        }
        let batch = Batch {
            records,
            sent: Instant::now(),
        };
        // A worker only goes away early if it panicked; the run then ends
        // with what was processed, and `run` reports the failure.
        if self.to_workers[w].send(batch).is_err() {
            self.workers_gone = true;
        }
        self.drain_events();
    }

    fn drain_events(&mut self) {
        while let Ok((heavy, new)) = self.events.try_recv() {
            deliver(self.sink, heavy, new);
        }
    }

    fn flush(&mut self) {
        for w in 0..self.threads {
            if !self.pending[w].is_empty() {
                self.send(w);
            }
        }
    }
}

fn deliver(sink: &mut dyn PipelineSink, heavy: Vec<HeavyEvent>, new: Vec<NewFlowEvent>) {
    for e in &heavy {
        sink.heavy_flow(e);
    }
    for e in &new {
        sink.new_flow(e);
    }
}

impl PacketSink for Dispatcher<'_> {
    #[inline]
    fn packet(&mut self, key: &FlowKey, hash: u64, class: ClassId, ts: Timestamp, wire_len: u32) {
        // Trace time since the first keyed packet, held monotone so every
        // shard agrees on window boundaries.
        let ns = ts.as_nanos();
        let first = *self.first_ns.get_or_insert(ns);
        let since = u64::try_from((ns - first).max(0)).unwrap_or(u64::MAX);
        self.time_ns = self.time_ns.max(since);
        let shard = shard_of(hash, self.shards);
        let w = shard % self.threads;
        if self.pending[w].is_empty() {
            self.filling_since[w] = Some(Instant::now());
        }
        self.pending[w].push(PacketRecord {
            key: *key,
            hash,
            time_ns: self.time_ns,
            seq: self.seq,
            wire_len,
            class,
            shard: shard as u16,
        });
        self.seq += 1;
        if self.pending[w].len() >= self.batch {
            self.send(w);
        }
    }
}

/// What a worker gives back.
struct WorkerResult {
    shards: Vec<(usize, Shard)>,
    latency: Latency,
}

/// A worker: runs its shards' stages over each batch, stage by stage.
fn worker(
    threads: usize,
    mut shards: Vec<(usize, Shard)>,
    batches: Receiver<Batch>,
    free: Sender<Vec<PacketRecord>>,
    events: Option<Sender<EventBatch>>,
) -> WorkerResult {
    let mut latency = Latency::new();
    for mut batch in batches {
        latency.record(1, batch.sent.elapsed().as_nanos() as u64);
        let local = |r: &PacketRecord| usize::from(r.shard) / threads;
        let t0 = Instant::now();
        if shards.first().is_some_and(|s| s.1.heavy.is_some()) {
            for r in &batch.records {
                if let Some(h) = shards.get_mut(local(r)).and_then(|s| s.1.heavy.as_mut()) {
                    h.process(r);
                }
            }
            latency.record(2, t0.elapsed().as_nanos() as u64);
        }
        let t1 = Instant::now();
        if shards.first().is_some_and(|s| s.1.new_flows.is_some()) {
            for r in &batch.records {
                if let Some(n) = shards
                    .get_mut(local(r))
                    .and_then(|s| s.1.new_flows.as_mut())
                {
                    n.process(r);
                }
            }
            latency.record(3, t1.elapsed().as_nanos() as u64);
        }
        let t2 = Instant::now();
        if shards.first().is_some_and(|s| s.1.selective.is_some()) {
            for r in &batch.records {
                if let Some(q) = shards
                    .get_mut(local(r))
                    .and_then(|s| s.1.selective.as_mut())
                {
                    q.process(r);
                }
            }
            latency.record(4, t2.elapsed().as_nanos() as u64);
        }
        if let Some(tx) = events.as_ref() {
            let mut heavy = Vec::new();
            let mut new = Vec::new();
            for (_, s) in shards.iter_mut() {
                if let Some(h) = s.heavy.as_mut() {
                    heavy.append(&mut h.take_events());
                }
                if let Some(n) = s.new_flows.as_mut() {
                    new.append(&mut n.take_events());
                }
            }
            if !heavy.is_empty() || !new.is_empty() {
                let _ = tx.send((heavy, new));
            }
        }
        batch.records.clear();
        // The source may be gone (end of input); the buffer is then dropped.
        let _ = free.send(std::mem::take(&mut batch.records));
    }
    WorkerResult { shards, latency }
}

/// Why a run failed outright (input problems are in the report instead).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Config(#[from] PipelineConfigError),
    #[error("a pipeline worker stopped unexpectedly: {0}")]
    Worker(String),
    #[error("could not start a worker thread: {0}")]
    Spawn(std::io::Error),
}

/// Runs the pipeline over the files, in order. Progress and per-file
/// results go to `observer`, events to `sink`; the result is the report.
///
/// Panics only if the configuration is invalid; [`try_run`] returns that
/// as an error instead.
pub fn run(
    paths: &[PathBuf],
    cfg: &PipelineConfig,
    observer: &mut dyn ReplayObserver,
    sink: &mut dyn PipelineSink,
) -> PipelineReport {
    match try_run(paths, cfg, observer, sink) {
        Ok(r) => r,
        Err(e) => panic!("flowsieve pipeline: {e}"),
    }
}

/// [`run`], returning configuration and thread failures as errors.
pub fn try_run(
    paths: &[PathBuf],
    cfg: &PipelineConfig,
    observer: &mut dyn ReplayObserver,
    sink: &mut dyn PipelineSink,
) -> Result<PipelineReport, PipelineError> {
    let resolved = cfg.validate()?;
    try_run_validated(paths, cfg, &resolved, observer, sink)
}

/// [`try_run`] for a configuration already checked by
/// [`PipelineConfig::validate`] (sizing a recycling filter for a target
/// rate solves 004's model, which takes a moment on large filters).
pub fn try_run_validated(
    paths: &[PathBuf],
    cfg: &PipelineConfig,
    resolved: &ResolvedNewFlow,
    observer: &mut dyn ReplayObserver,
    sink: &mut dyn PipelineSink,
) -> Result<PipelineReport, PipelineError> {
    let resolved = *resolved;
    let threads = cfg.threads.min(cfg.shards).max(1);
    let batch = cfg.batch.max(1);
    let want = (sink.wants_heavy_flows(), sink.wants_new_flows());
    let wall = Instant::now();
    let cpu0 = summary::cpu_seconds();
    let mut per_worker: Vec<Vec<(usize, Shard)>> = (0..threads).map(|_| Vec::new()).collect();
    for s in 0..cfg.shards {
        per_worker[s % threads].push((s, Shard::new(cfg, &resolved, want)));
    }
    let (free_tx, free_rx) = bounded::<Vec<PacketRecord>>(threads * cfg.queue_batches.max(1) * 2);
    let (event_tx, event_rx) = unbounded::<EventBatch>();
    let events_on = want.0 || want.1;
    let mut results = Vec::with_capacity(threads);
    let (summary, source_latency, packets) = std::thread::scope(|scope| {
        let mut to_workers = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        for shards in per_worker.drain(..) {
            let (tx, rx) = bounded::<Batch>(cfg.queue_batches.max(1));
            to_workers.push(tx);
            let free = free_tx.clone();
            let events = events_on.then(|| event_tx.clone());
            let handle = std::thread::Builder::new()
                .name("flowsieve-shard".into())
                .spawn_scoped(scope, move || worker(threads, shards, rx, free, events))
                .map_err(PipelineError::Spawn)?;
            handles.push(handle);
        }
        drop(event_tx);
        drop(free_tx);
        let mut dispatcher = Dispatcher {
            shards: cfg.shards,
            threads,
            batch,
            pending: (0..threads).map(|_| Vec::with_capacity(batch)).collect(),
            filling_since: vec![None; threads],
            to_workers,
            free: free_rx,
            events: event_rx,
            sink,
            first_ns: None,
            time_ns: 0,
            seq: 0,
            latency: Latency::new(),
            workers_gone: false,
        };
        let summary = replay_into(paths, &cfg.replay, observer, &mut dispatcher);
        dispatcher.flush();
        dispatcher.to_workers.clear();
        for h in handles {
            match h.join() {
                Ok(r) => results.push(r),
                Err(_) => return Err(PipelineError::Worker("a shard worker panicked".into())),
            }
        }
        while let Ok((heavy, new)) = dispatcher.events.recv() {
            deliver(dispatcher.sink, heavy, new);
        }
        if dispatcher.workers_gone {
            return Err(PipelineError::Worker("a shard worker went away".into()));
        }
        Ok((summary, dispatcher.latency, dispatcher.seq))
    })?;
    let mut latency = source_latency;
    let mut shards: Vec<(usize, Shard)> = Vec::with_capacity(cfg.shards);
    for r in results {
        latency.merge(&r.latency);
        shards.extend(r.shards);
    }
    shards.sort_by_key(|s| s.0);
    let wall_seconds = wall.elapsed().as_secs_f64();
    let cpu_seconds = summary::cpu_seconds() - cpu0;
    Ok(summary::build(
        cfg,
        &resolved,
        summary,
        shards.into_iter().map(|s| s.1).collect(),
        packets,
        latency,
        summary::Timing {
            threads,
            wall_seconds,
            cpu_seconds,
        },
    ))
}
