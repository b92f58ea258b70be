//! The pipeline's configuration: plain public fields with one set of
//! defaults ([`defaults`]), and one [`PipelineConfig::validate`] that
//! checks every bound with checked arithmetic, states the memory the run
//! will take before anything is allocated, and returns a
//! [`ValidatedConfig`] whose fields are private: a run can only start from
//! a configuration that passed.
//!
//! Errors name configuration fields (`heavy.counters`), never command-line
//! flags: the library does not know how its caller spells them.

use super::heavy::{HeavyConfig, HeavyStage};
use super::new_flows::{NewFlowConfig, NewFlowStage};
use super::record::PacketRecord;
use super::selective::{SelectiveConfig, SelectiveStage};
use super::stage::{DynStage, Stage};
use super::window::WindowSpec;
use crate::class::Classifier;
use crate::dissect::FlowKey;
use crate::replay::ReplayConfig;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The defaults, defined once: [`PipelineConfig::new`] and the command
/// line both use these.
pub mod defaults {
    use crate::filter::CounterWidth;

    /// Shards (results depend on it, never on the thread count).
    pub const SHARDS: usize = 8;
    /// Records per batch sent to a worker.
    pub const BATCH: usize = 512;
    /// Batches queued per worker thread before the source waits: the
    /// source makes at most `shards + threads * (QUEUE_BATCHES + 1) + 1`
    /// batch buffers, and when they are all out, whichever shards' queues
    /// hold them, it sleeps until a quarter of the queues' worth has come
    /// back (`pipeline::refill` says why).
    ///
    /// Why this many (measured when each worker had a queue of its own,
    /// which the shard scheduler replaced in the fourteenth round): the
    /// source waited whenever one worker's queue was full, even while the
    /// other worker had nothing to do, and on a skewed trace one worker's
    /// shards held the largest flows. On two
    /// cores with 16, and the exact table in the workers, the source
    /// thread went to sleep on a full queue about 280 times in a default
    /// job on the throughput trace while a fifth of the two cores stayed
    /// idle; 64 took 7-10 % off that job's wall time and 4 % off the
    /// all-stages run with truth off, and 128 did no better (BENCHMARKS.md,
    /// eleventh round). A queue of 64 batches of 512 records is 2-10 MiB a
    /// worker, within the stated batch memory.
    pub const QUEUE_BATCHES: usize = 64;
    /// Heavy-flow window: one second of trace time.
    pub const HEAVY_WINDOW_NS: u64 = 1_000_000_000;
    /// Heavy-flow count threshold.
    pub const THETA: u64 = 10;
    /// Heavy-flow counters in all.
    pub const CBF_COUNTERS: usize = 1 << 22;
    /// Bits per heavy-flow counter.
    pub const CBF_WIDTH: CounterWidth = CounterWidth::W8;
    /// Insertions per window that the default `k` (`k_opt`) is tuned for,
    /// when the window is a span of time.
    pub const HEAVY_LOAD: u64 = 1 << 20;
    /// Recycling-filter bits in all.
    pub const RBF_BITS: usize = 1 << 23;
    /// Positions per key in the recycling filter.
    pub const RBF_K: usize = 4;
    /// Slots per shard of the new-flow stage's exact front cache.
    pub const FRONT_CACHE_SLOTS: usize = 1024;
    /// The average false-positive rate the recycling filter is sized for.
    pub const TARGET_FPR: f64 = 0.01;
    /// Whether the key that triggers a recycle is re-inserted.
    pub const RETAINING: bool = false;
    /// Selective-query cache window: one second.
    pub const CACHE_WINDOW_NS: u64 = 1_000_000_000;
    /// Selective-query query window: five seconds.
    pub const QUERY_WINDOW_NS: u64 = 5_000_000_000;
    /// Bits (or counters) per element of the directory.
    pub const DIR_BPE: f64 = 10.0;
    /// The least fraction of queries checked against the exact set for the
    /// priors.
    pub const PRIOR_SAMPLE: f64 = 0.01;
    /// Distinct flows the selective stage's exact sets hold per window over
    /// all shards, before they shed by hash sampling: 2^19, about 26 MiB
    /// for the cache and query sets together at hashbrown's load, so that a
    /// flood stays inside the 64 MiB beyond the filters that a run with
    /// truth off may take. A normal trace's windows are far below it.
    pub const SELECTIVE_MAX_FLOWS: usize = 1 << 19;
    /// The largest `--selective-max-flows` accepted.
    pub const SELECTIVE_MAX_FLOWS_LIMIT: usize = 1 << 30;
    /// Checks per class and round the prior sampler aims for (all of a
    /// class's queries below that).
    pub const PRIOR_MIN_SAMPLES: u64 = 1000;
    /// Sampled records the prior coordinator holds back while their
    /// flow-set slots are fetched (`SelectiveConfig::prior_lookahead`).
    pub const PRIOR_LOOKAHEAD: usize = 8;
    /// Weight of the newest round in the pooled priors.
    pub const PRIOR_SMOOTHING: f64 = 0.2;
    /// Cost of a false negative relative to a false positive.
    pub const ALPHA: f64 = 1.0;
    /// How many of the largest flows the replay lists.
    pub const TOP: usize = 10;
    /// Live capture: bytes kept of each frame. The deepest headers the
    /// dissector reads (Ethernet, two VLAN tags, IPv6 with extension
    /// headers, ports) fit with room.
    pub const LIVE_SNAPLEN: u32 = 256;
    /// Live capture: ring size per socket, MiB.
    pub const LIVE_RING_MIB: u64 = 64;
    /// Live capture: ring block size, KiB.
    pub const LIVE_BLOCK_KIB: u64 = 1024;
    /// Live capture: block retire timeout, ms.
    pub const LIVE_BLOCK_TIMEOUT_MS: u64 = 50;
    /// Live capture: seconds between interval reports.
    pub const LIVE_REPORT_EVERY_S: u64 = 10;
    /// The bits per element the default job (no trace given) sweeps, to
    /// show where selective querying starts to pay.
    pub const DEMO_SWEEP_BPE: [f64; 5] = [2.0, 4.0, 6.0, 8.0, 10.0];
    /// The cost ratios the default job sweeps.
    pub const DEMO_SWEEP_ALPHA: [f64; 3] = [0.01, 0.1, 1.0];
}

/// The most shards a run may have (shard ids travel as `u16`).
pub const MAX_SHARDS: usize = 4096;
/// The most worker threads.
pub const MAX_THREADS: usize = 1024;
/// The most records per batch.
pub const MAX_BATCH: usize = 1 << 16;
/// The most batches queued per worker thread.
pub const MAX_QUEUE_BATCHES: usize = 1024;

/// The worker threads used when none are configured: the machine's cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(MAX_THREADS)
}

/// The memory the machine can give without swapping (`MemAvailable` of
/// `/proc/meminfo`), in bytes; `None` where it cannot be read.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A number of bytes, written plain (`1048576`) or with a binary suffix
/// (`512K`, `64M`, `2G`, `1.5T`; `KiB`, `MiB`... and `B` also accepted).
///
/// ```
/// use flowsieve::pipeline::ByteSize;
/// assert_eq!("64M".parse::<ByteSize>().unwrap().0, 64 << 20);
/// assert_eq!("1.5G".parse::<ByteSize>().unwrap().0, 3 << 29);
/// assert!("20000000T".parse::<ByteSize>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// Why a byte size could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad size '{0}': expected bytes such as 1048576, 512K, 64M or 2G (below 16E)")]
pub struct ByteSizeError(pub String);

impl FromStr for ByteSize {
    type Err = ByteSizeError;
    fn from_str(s: &str) -> Result<ByteSize, ByteSizeError> {
        let err = || ByteSizeError(s.to_string());
        let t = s.trim();
        let t = t
            .strip_suffix("iB")
            .or_else(|| t.strip_suffix('B'))
            .unwrap_or(t);
        let (num, shift) = match t.chars().last() {
            Some('K' | 'k') => (&t[..t.len() - 1], 10),
            Some('M' | 'm') => (&t[..t.len() - 1], 20),
            Some('G' | 'g') => (&t[..t.len() - 1], 30),
            Some('T' | 't') => (&t[..t.len() - 1], 40),
            _ => (t, 0),
        };
        if let Ok(n) = num.trim().parse::<u64>() {
            return n.checked_mul(1u64 << shift).map(ByteSize).ok_or_else(err);
        }
        let x: f64 = num.trim().parse().map_err(|_| err())?;
        let bytes = x * (1u64 << shift) as f64;
        if !(0.0..1.8e19).contains(&bytes) {
            return Err(err());
        }
        Ok(ByteSize(bytes.round() as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The built-in stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StageName {
    /// Heavy flows by count thresholding.
    Heavy,
    /// New flows by a recycling filter.
    NewFlows,
    /// Selective query against a flow-cache directory.
    Selective,
}

impl StageName {
    /// Every built-in stage, in pipeline order.
    pub const ALL: [StageName; 3] = [StageName::Heavy, StageName::NewFlows, StageName::Selective];

    /// The stage's name in the report and in a [`StageList`].
    pub fn as_str(self) -> &'static str {
        match self {
            StageName::Heavy => HeavyStage::NAME,
            StageName::NewFlows => NewFlowStage::NAME,
            StageName::Selective => SelectiveStage::NAME,
        }
    }
}

/// Which built-in stages run, in pipeline order.
///
/// ```
/// use flowsieve::pipeline::{StageList, StageName};
/// let l: StageList = "selective,heavy".parse().unwrap();
/// assert_eq!(l.stages(), &[StageName::Heavy, StageName::Selective]);
/// assert_eq!("none".parse::<StageList>().unwrap(), StageList::none());
/// assert!("heavy,nope".parse::<StageList>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageList(Vec<StageName>);

impl StageList {
    /// All three stages.
    pub fn all() -> StageList {
        StageList(StageName::ALL.to_vec())
    }
    /// No stage (the source and dispatch only).
    pub fn none() -> StageList {
        StageList(Vec::new())
    }
    /// The listed stages, in pipeline order.
    pub fn stages(&self) -> &[StageName] {
        &self.0
    }
    /// Whether a stage is listed.
    pub fn contains(&self, s: StageName) -> bool {
        self.0.contains(&s)
    }
    /// Adds or removes a stage, keeping pipeline order.
    pub fn set(&mut self, s: StageName, on: bool) {
        let mut v: Vec<StageName> = StageName::ALL
            .into_iter()
            .filter(|&x| if x == s { on } else { self.0.contains(&x) })
            .collect();
        std::mem::swap(&mut self.0, &mut v);
    }
}

impl Default for StageList {
    fn default() -> StageList {
        StageList::all()
    }
}

impl fmt::Display for StageList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = self.0.iter().map(|s| s.as_str()).collect();
        f.write_str(&names.join(","))
    }
}

/// Why a stage list could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown stage '{0}' (expected heavy, new, selective, all or none)")]
pub struct StageListError(pub String);

impl FromStr for StageList {
    type Err = StageListError;
    /// Comma-separated `heavy`, `new` (or `new_flows`, `new-flows`),
    /// `selective`, `all` or `none`.
    fn from_str(s: &str) -> Result<StageList, StageListError> {
        let mut list = StageList::none();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "heavy" => list.set(StageName::Heavy, true),
                "new" | "new_flows" | "new-flows" => list.set(StageName::NewFlows, true),
                "selective" => list.set(StageName::Selective, true),
                "all" => list = StageList::all(),
                "none" => {}
                other => return Err(StageListError(other.to_string())),
            }
        }
        Ok(list)
    }
}

/// Everything a pipeline run needs.
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// Reading, dissection, classes, exact flow table (`truth` also turns on
    /// the stages' ground truth).
    pub replay: ReplayConfig,
    /// Worker threads for the shards (the source is the calling thread).
    pub threads: usize,
    /// Shards (independent of `threads`; results depend on it).
    pub shards: usize,
    /// Records per batch.
    pub batch: usize,
    /// Batches queued per worker thread before the source waits
    /// ([`defaults::QUEUE_BATCHES`]).
    pub queue_batches: usize,
    /// The built-in stages that run.
    pub stages: StageList,
    /// The heavy-flow stage.
    pub heavy: HeavyConfig,
    /// The new-flow stage.
    pub new_flows: NewFlowConfig,
    /// The selective-query stage.
    pub selective: SelectiveConfig,
    /// The most memory the stages' filters and the batches may take, in
    /// bytes; `None`: the machine's available memory.
    pub max_memory: Option<u64>,
    /// Windows counted from the Unix epoch instead of from the first
    /// keyed packet, so that runs on different machines (the network
    /// mode's probes) close the same windows at the same instants.
    pub epoch_windows: bool,
    /// The heavy stage's window digests, handed out at each window close
    /// (the network mode's probe); `None` for a plain run.
    pub export: Option<super::WindowExport>,
    /// Bytes of a live capture's rings, all sockets together: the kernel
    /// holds them for the whole run, so they join the stated memory and
    /// the [`PipelineConfig::max_memory`] check. 0 for a trace.
    pub capture_rings: u64,
}

impl PipelineConfig {
    /// The [`defaults`], all three stages, ground truth on, and the
    /// machine's cores as worker threads.
    pub fn new(classifier: Classifier) -> PipelineConfig {
        let alpha = classifier.alphas(defaults::ALPHA);
        let mut replay = ReplayConfig::new(classifier);
        replay.top = defaults::TOP;
        PipelineConfig {
            replay,
            threads: default_threads(),
            shards: defaults::SHARDS,
            batch: defaults::BATCH,
            queue_batches: defaults::QUEUE_BATCHES,
            stages: StageList::all(),
            heavy: HeavyConfig::default(),
            new_flows: NewFlowConfig::default(),
            selective: SelectiveConfig::with_alpha(alpha),
            max_memory: None,
            epoch_windows: false,
            export: None,
            capture_rings: 0,
        }
    }

    /// The windows of the listed built-in stages, named: the heavy stage's
    /// window and the selective stage's cache window (its query window is
    /// on the same axis). The new-flow stage has none: its `time:T`
    /// recycling counts from its own first message.
    ///
    /// ```
    /// use flowsieve::class::Classifier;
    /// use flowsieve::pipeline::{PipelineConfig, StageList, WindowSpec};
    /// let mut c = PipelineConfig::new(Classifier::ports());
    /// c.heavy.window = WindowSpec::Packets(100);
    /// assert_eq!(
    ///     c.stage_windows(),
    ///     [
    ///         ("heavy window", WindowSpec::Packets(100)),
    ///         ("selective cache window", WindowSpec::Time(1_000_000_000)),
    ///     ]
    /// );
    /// c.stages = "new".parse::<StageList>().unwrap();
    /// assert!(c.stage_windows().is_empty());
    /// ```
    pub fn stage_windows(&self) -> Vec<(&'static str, WindowSpec)> {
        let mut windows = Vec::new();
        if self.stages.contains(StageName::Heavy) {
            windows.push(("heavy window", self.heavy.window));
        }
        if self.stages.contains(StageName::Selective) {
            windows.push(("selective cache window", self.selective.cache_window));
        }
        windows
    }

    /// Whether a [stage window](PipelineConfig::stage_windows) is one of
    /// trace time, the only thing [`PipelineConfig::epoch_windows`] moves.
    /// Packet windows count keyed packets from the first, so they do not
    /// move with the epoch.
    ///
    /// ```
    /// use flowsieve::class::Classifier;
    /// use flowsieve::pipeline::{PipelineConfig, StageList, WindowSpec};
    /// let mut c = PipelineConfig::new(Classifier::ports());
    /// assert!(c.has_time_window());
    /// c.heavy.window = WindowSpec::Packets(100);
    /// assert!(c.has_time_window()); // the selective stage's 1 s cache window
    /// c.selective.cache_window = WindowSpec::Packets(10);
    /// c.selective.query_window = WindowSpec::Packets(20);
    /// assert!(!c.has_time_window());
    /// c.heavy.window = WindowSpec::Time(1_000_000_000);
    /// c.stages = "new,selective".parse::<StageList>().unwrap();
    /// assert!(!c.has_time_window()); // the heavy stage does not run
    /// ```
    pub fn has_time_window(&self) -> bool {
        self.stage_windows()
            .iter()
            .any(|(_, w)| matches!(w, WindowSpec::Time(_)))
    }

    /// Checks every field, sizes the listed stages (the new-flow stage's
    /// sigma is solved here, and only when that stage runs), states the
    /// memory, and refuses a run that would take more than
    /// [`PipelineConfig::max_memory`].
    pub fn validate(&self) -> Result<ValidatedConfig, ConfigError> {
        let started = std::time::Instant::now();
        in_range("shards", self.shards, 1, MAX_SHARDS)?;
        in_range("threads", self.threads, 1, MAX_THREADS)?;
        in_range("batch", self.batch, 1, MAX_BATCH)?;
        in_range("queue_batches", self.queue_batches, 1, MAX_QUEUE_BATCHES)?;
        let mut memory = MemoryEstimate {
            batches: batch_bytes(self)?,
            capture_rings: self.capture_rings,
            ..MemoryEstimate::default()
        };
        let mut validated = ValidatedConfig {
            cfg: self.clone(),
            stages: Vec::new(),
            memory,
            validate_seconds: 0.0,
        };
        // The registrations of the built-in stages: one line each.
        for name in self.stages.stages() {
            match name {
                StageName::Heavy => {
                    let s = self.heavy.validate(self.shards)?;
                    memory.heavy = s.memory_bytes();
                    validated = validated.with_stage(s);
                }
                StageName::NewFlows => {
                    let s = self.new_flows.validate(self.shards)?;
                    memory.new_flows = s.memory_bytes();
                    validated = validated.with_stage(s);
                }
                StageName::Selective => {
                    let s = self.selective.validate()?;
                    memory.selective = s.memory_bytes(self.shards);
                    validated = validated.with_stage(s);
                }
            }
        }
        memory.total = memory.sum()?;
        let limit = self.max_memory.or_else(available_memory);
        if let Some(limit) = limit
            && memory.total > limit
        {
            return Err(ConfigError::Memory {
                needed: memory.total,
                limit,
                estimate: memory,
            });
        }
        validated.memory = memory;
        validated.validate_seconds = started.elapsed().as_secs_f64();
        Ok(validated)
    }
}

/// Bytes of the records in flight: the batches queued for the shards
/// (`queue` per worker thread, [`defaults::QUEUE_BATCHES`]), the batch each
/// worker holds, and the source's pending batch per shard. The pool of
/// emptied buffers adds nothing: the source allocates a buffer only when
/// that pool is empty, so at every allocation each buffer that exists is
/// pending, queued or held by a worker, and there are at most
/// `shards + threads * (queue + 1) + 1` of them. Each record is
/// counted with a flow key beside it: whether a run carries keys
/// ([`super::ShardContext::keyed`]) depends on the events its sink wants,
/// which validation does not know, and this figure is a bound. With truth
/// on, each record is also counted with the packet the shard workers
/// record into their exact tables ([`crate::truth::RecordTruth`]), for the same reason:
/// whether the workers keep the table depends on the source and the
/// machine's cores.
fn batch_bytes(cfg: &PipelineConfig) -> Result<u64, ConfigError> {
    let truth = if cfg.replay.truth {
        std::mem::size_of::<crate::truth::RecordTruth>()
    } else {
        0
    };
    let threads = cfg.threads.min(cfg.shards) as u64;
    let buffers = (cfg.queue_batches as u64)
        .checked_add(1)
        .and_then(|q| q.checked_mul(threads))
        .and_then(|q| q.checked_add(cfg.shards as u64 + 1))
        .ok_or(ConfigError::MemoryOverflow)?;
    buffers
        .checked_mul(cfg.batch as u64)
        .and_then(|r| {
            r.checked_mul(
                (std::mem::size_of::<PacketRecord>() + std::mem::size_of::<FlowKey>() + truth)
                    as u64,
            )
        })
        .ok_or(ConfigError::MemoryOverflow)
}

/// `Ok` when `lo <= v <= hi`, else an error naming the field.
pub(crate) fn in_range<T: PartialOrd + fmt::Display>(
    field: &'static str,
    v: T,
    lo: T,
    hi: T,
) -> Result<(), ConfigError> {
    if v < lo || v > hi {
        return Err(ConfigError::invalid(
            field,
            format!("must be between {lo} and {hi} (got {v})"),
        ));
    }
    Ok(())
}

/// The memory a validated run takes, in bytes: the filters and batches it
/// allocates before the first packet, and the most the selective stage's
/// capped per-window sets can grow to. Ground truth grows with the traffic
/// and is not included (run with truth off for a bounded footprint).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryEstimate {
    /// The heavy-flow stage's counters.
    pub heavy: u64,
    /// The new-flow stage's bits and front caches.
    pub new_flows: u64,
    /// The selective stage's capped flow sets and directories, at most
    /// (see `SelectiveStage::memory_bytes`).
    pub selective: u64,
    /// Records in flight, each counted with its flow key (a bound: a run
    /// that names no flows carries no keys).
    pub batches: u64,
    /// A live capture's rings ([`PipelineConfig::capture_rings`]); left
    /// out of a trace's report, where it is 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub capture_rings: u64,
    /// The sum.
    pub total: u64,
}

impl MemoryEstimate {
    /// The parts added up, without wrapping.
    fn sum(&self) -> Result<u64, ConfigError> {
        self.heavy
            .checked_add(self.new_flows)
            .and_then(|t| t.checked_add(self.selective))
            .and_then(|t| t.checked_add(self.batches))
            .and_then(|t| t.checked_add(self.capture_rings))
            .ok_or(ConfigError::MemoryOverflow)
    }

    /// ` + capture rings N` when there are rings, for the messages that
    /// list the parts.
    fn rings_part(&self) -> String {
        match self.capture_rings {
            0 => String::new(),
            n => format!(" + capture rings {n}"),
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why a configuration cannot run.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A field's value is out of bounds or inconsistent with another.
    #[error("{field}: {problem}")]
    Invalid {
        /// The field, as a path (`heavy.counters`).
        field: &'static str,
        /// What is wrong, with the value.
        problem: String,
    },
    /// The run would take more memory than allowed.
    #[error("the configuration needs {needed} bytes (heavy {} + new flows {} + selective at most {} + batches {}{}), more than the limit of {limit} bytes", estimate.heavy, estimate.new_flows, estimate.selective, estimate.batches, estimate.rings_part())]
    Memory {
        /// Bytes needed.
        needed: u64,
        /// Bytes allowed.
        limit: u64,
        /// Where they go.
        estimate: MemoryEstimate,
    },
    /// The sizes multiply past 2^64 bytes.
    #[error("the configured sizes add up to more than 2^64 bytes")]
    MemoryOverflow,
}

impl ConfigError {
    /// An [`ConfigError::Invalid`] for `field`.
    pub fn invalid(field: &'static str, problem: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            field,
            problem: problem.into(),
        }
    }
}

/// A configuration that passed [`PipelineConfig::validate`]: the stages to
/// run, sized, and the memory they take. Its fields are private; the only
/// way to get one is to validate.
#[derive(Clone)]
pub struct ValidatedConfig {
    cfg: PipelineConfig,
    stages: Vec<Arc<dyn DynStage>>,
    memory: MemoryEstimate,
    /// Seconds [`PipelineConfig::validate`] took (sizing included): the
    /// part of start-up before the engine runs.
    validate_seconds: f64,
}

impl fmt::Debug for ValidatedConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValidatedConfig")
            .field("cfg", &self.cfg)
            .field("stages", &self.stage_names())
            .field("memory", &self.memory)
            .finish()
    }
}

impl ValidatedConfig {
    /// Seconds that validation took (sigma sizing and models included).
    pub fn validate_seconds(&self) -> f64 {
        self.validate_seconds
    }

    /// Registers one more stage, after the built-in ones.
    pub fn with_stage<S: Stage>(mut self, stage: S) -> ValidatedConfig {
        self.stages.push(Arc::new(stage));
        self
    }

    /// The configuration that was validated.
    pub fn config(&self) -> &PipelineConfig {
        &self.cfg
    }

    /// The memory the run takes before it reads a packet.
    pub fn memory(&self) -> MemoryEstimate {
        self.memory
    }

    /// The stages that run, in order.
    pub fn stage_names(&self) -> Vec<&'static str> {
        self.stages.iter().map(|s| s.name()).collect()
    }

    /// The same configuration on another number of worker threads (the
    /// report does not depend on it).
    pub fn with_threads(mut self, threads: usize) -> Result<ValidatedConfig, ConfigError> {
        in_range("threads", threads, 1, MAX_THREADS)?;
        self.cfg.threads = threads;
        self.memory.batches = batch_bytes(&self.cfg)?;
        self.memory.total = self.memory.sum()?;
        Ok(self)
    }

    pub(crate) fn dyn_stages(&self) -> &[Arc<dyn DynStage>] {
        &self.stages
    }
}
