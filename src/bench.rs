//! The throughput protocol behind `flowsieve bench`: the dissect+hash path
//! alone, then the whole pipeline (ground truth off) at each thread count,
//! side by side in every round, so that machine noise hits every row alike;
//! each figure is the median over rounds, and the rows are compared as
//! ratios.

use crate::pipeline::{
    ConfigError, FileSource, NoEvents, PipelineError, PreloadError, Preloaded, ValidatedConfig,
    cpu_seconds, run,
};
use crate::replay::{NoObserver, replay};
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// One row of a benchmark: a path through the code and its figures.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// `dissect+hash` or `pipeline, N threads`.
    pub path: String,
    /// Worker threads (`None` for the dissect+hash path).
    #[serde(skip)]
    pub threads: Option<usize>,
    /// Median million packets per wall second.
    pub mpps: f64,
    /// Median million packets per CPU second.
    pub mpps_per_cpu_sec: f64,
    /// `mpps` over the dissect+hash row's.
    pub ratio_to_dissect_hash: f64,
    /// `mpps` over the 1-thread pipeline row's (pipeline rows only).
    pub scaling_vs_1_thread: Option<f64>,
    /// Every round's `mpps`.
    pub rounds_mpps: Vec<f64>,
    /// Where a packet's time went (pipeline and preloaded rows; `None`
    /// for the dissect+hash row, or where a thread's clock could not be
    /// read).
    pub per_packet: Option<PacketCost>,
}

/// Where a packet's time went in a pipeline row: medians over the rounds,
/// in nanoseconds a packet, from each run's report
/// ([`crate::report::Throughput::source_cpu_seconds`],
/// [`crate::report::Throughput::source_system_cpu_seconds`],
/// [`crate::report::Throughput::worker_cpu_seconds`],
/// [`crate::report::StageLatency::ns_per_record`]).
///
/// Why in `bench`: packets per CPU-second says how much a packet costs in
/// all, not on which side. The source thread's cost bounds the wall rate
/// however many workers there are, and the workers' is what more workers
/// share; each stage's share says which stage to look at.
#[derive(Clone, Debug, Serialize)]
pub struct PacketCost {
    /// CPU of the thread that ran the source (reading, dissecting,
    /// hashing, the stages' coordinators, filling the batches).
    pub source_ns: f64,
    /// The part of `source_ns` spent in the kernel (system time: mostly
    /// mapping the trace's pages); `None` where it cannot be read.
    pub source_system_ns: Option<f64>,
    /// CPU of the workers, summed.
    pub workers_ns: f64,
    /// Each stage's time on the workers, in stage order.
    pub stages: Vec<StageCost>,
}

/// One stage's time a packet on the workers (see [`PacketCost`]).
#[derive(Clone, Debug, Serialize)]
pub struct StageCost {
    /// The stage's name (`heavy`, `new_flows`, `selective`).
    pub name: String,
    /// Median over the rounds, nanoseconds a packet.
    pub ns: f64,
}

/// One run's [`PacketCost`], before the medians.
fn packet_cost(r: &crate::report::PipelineReport) -> Option<PacketCost> {
    let packets = r.replay.trace.packets;
    if packets == 0 {
        return None;
    }
    let per = |secs: f64| secs * 1e9 / packets as f64;
    Some(PacketCost {
        source_ns: per(r.throughput.source_cpu_seconds?),
        source_system_ns: r.throughput.source_system_cpu_seconds.map(per),
        workers_ns: per(r.throughput.worker_cpu_seconds?),
        stages: r
            .stages
            .iter()
            .filter_map(|st| {
                st.ns_per_record().map(|ns| StageCost {
                    name: st.name.clone(),
                    ns,
                })
            })
            .collect(),
    })
}

/// The medians over the rounds of each figure of `runs` (the runs of one
/// row); `None` when any run has none, or the runs' stages differ.
fn median_cost(runs: &[Option<PacketCost>]) -> Option<PacketCost> {
    let runs: Vec<&PacketCost> = runs.iter().map(Option::as_ref).collect::<Option<_>>()?;
    let first = runs.first()?;
    let names: Vec<&str> = first.stages.iter().map(|s| s.name.as_str()).collect();
    if runs.iter().any(|r| {
        !r.stages
            .iter()
            .map(|s| s.name.as_str())
            .eq(names.iter().copied())
    }) {
        return None;
    }
    let of =
        |f: &dyn Fn(&PacketCost) -> f64| median(&runs.iter().map(|r| f(r)).collect::<Vec<_>>());
    Some(PacketCost {
        source_ns: of(&|r| r.source_ns),
        // Only when every run has it: a median of some runs would pass
        // for all of them.
        source_system_ns: runs
            .iter()
            .map(|r| r.source_system_ns)
            .collect::<Option<Vec<f64>>>()
            .map(|v| median(&v)),
        workers_ns: of(&|r| r.workers_ns),
        stages: names
            .iter()
            .enumerate()
            .map(|(i, name)| StageCost {
                name: (*name).to_string(),
                ns: of(&|r| r.stages.get(i).map_or(0.0, |s| s.ns)),
            })
            .collect(),
    })
}

/// A benchmark's result.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// Packets read per run.
    pub packets: u64,
    /// Of those, the packets with a flow key (IP), which the stages run
    /// on.
    pub keyed_packets: u64,
    /// Rounds.
    pub rounds: usize,
    /// The trace filter (`bench -f`/`-F`), when one was given: every row
    /// reads the records it keeps, and tcpdump is given it too.
    pub filter: Option<String>,
    /// Records the trace filter did not keep, per run (not in `packets`);
    /// absent without a filter.
    pub filtered_out: Option<u64>,
    /// The stages that ran.
    #[serde(skip)]
    pub stages: String,
    /// The rows.
    pub results: Vec<BenchRow>,
    /// Whole processes against tcpdump, when it could be run.
    pub tcpdump: Option<TcpdumpComparison>,
    /// Why there is no tcpdump comparison, when there is none.
    pub tcpdump_note: Option<String>,
    /// Why there are no preloaded rows, when there are none.
    pub preload_note: Option<String>,
    /// Set when the traces hold fewer than [`MIN_TIMED_PACKETS`] packets:
    /// what that does to the figures.
    pub short_trace_note: Option<String>,
    /// Set when fewer than half of the packets carry a flow key (see
    /// [`unkeyed_note`]).
    pub unkeyed_note: Option<String>,
    /// The machine's random-access latency at each working set asked for
    /// ([`LATENCY_WORKING_SETS`] by default, none with `bench
    /// --no-memory`), the median over the rounds.
    pub memory_latency: Vec<MemoryLatency>,
}

/// The cost of a random access within a working set, as the stages'
/// filters see it: one access at a time, and [`PARALLEL_LANES`] at once.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct MemoryLatency {
    /// Bytes of the working set.
    pub bytes: usize,
    /// Nanoseconds per access when each waits for the one before (median
    /// over the rounds): the latency.
    pub ns: f64,
    /// Nanoseconds per access when [`PARALLEL_LANES`] independent accesses
    /// are in flight at once (median over the rounds): what the memory
    /// system can overlap ([`parallel_access_ns`]).
    pub parallel_ns: f64,
}

/// The working sets `bench` measures a random access in: within L2, the
/// default filters' share of a worker, the whole default filter memory and
/// beyond, and past any L3.
pub const LATENCY_WORKING_SETS: [usize; 5] = [256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];

/// Steps of one latency measurement: at about 150 ns an access past the
/// caches, 20 ms.
const LATENCY_STEPS: usize = 1 << 17;

/// The most accesses of an untimed lap before a timed chase (the
/// latency's and the lanes'): four timed runs' worth, so that a working
/// set past the caches, whose whole lap would take a tenth of a second
/// and more, costs a round no more than that.
const MOST_UNTIMED_ACCESSES: usize = 4 * LATENCY_STEPS;

/// A buffer of `bytes` whose 64-byte lines form one random cycle: word 0 of
/// each line holds the index (in words) of the next line's word 0, for
/// [`random_access_ns`] (and `benches/memory.rs`).
///
/// Sattolo's algorithm gives a single cycle through every line, so a chase
/// visits each line once per lap and no prefetcher can guess the next.
pub fn chase_cycle(bytes: usize) -> Vec<usize> {
    chase_cycle_with_lanes(bytes).0
}

/// [`chase_cycle`], and where [`parallel_access_ns`]'s lanes start on it:
/// evenly spaced round the cycle (lane `l + 1` is a `1 / PARALLEL_LANES`
/// lap after lane `l`), so that within a lap no two lanes walk the same
/// lines.
///
/// ```
/// use flowsieve::bench::{PARALLEL_LANES, chase_cycle_with_lanes, random_access_ns};
/// let (cycle, lanes) = chase_cycle_with_lanes(1 << 16); // 1024 lines
/// let mut at = lanes[0];
/// random_access_ns(&cycle, &mut at, 1024 / PARALLEL_LANES);
/// assert_eq!(at, lanes[1]);
/// ```
pub fn chase_cycle_with_lanes(bytes: usize) -> (Vec<usize>, [usize; PARALLEL_LANES]) {
    use rand::{Rng, SeedableRng};
    const WORDS_PER_LINE: usize = 64 / std::mem::size_of::<usize>();
    let lines = (bytes / 64).max(2);
    let mut order: Vec<usize> = (0..lines).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5eed);
    for i in (1..lines).rev() {
        let j = rng.random_range(0..i);
        order.swap(i, j);
    }
    let mut words = vec![0usize; lines * WORDS_PER_LINE];
    for (i, &line) in order.iter().enumerate() {
        let next = order.get(i + 1).copied().unwrap_or(order[0]);
        if let Some(w) = words.get_mut(line * WORDS_PER_LINE) {
            *w = next * WORDS_PER_LINE;
        }
    }
    let lanes = std::array::from_fn(|lane| order[lines * lane / PARALLEL_LANES] * WORDS_PER_LINE);
    (words, lanes)
}

/// Independent chases [`parallel_access_ns`] keeps in flight at once.
///
/// Why 8: a packet's filter lines are independent of each other (the heavy
/// stage's `k_opt = 11` counters, the new-flow stage's 4 bits), so a core
/// can have them outstanding together, up to its miss buffers. With the
/// latency, the figure brackets what memory costs a packet: between the
/// figure and the latency for each line, depending on how much of it
/// overlaps. It is not the host's ceiling: more chases at once cost less
/// per access still, by how much varies with the working set and the host
/// (BENCHMARKS.md, fifty-second round), so a fixed count keeps the figure
/// comparable between runs and hosts.
///
/// `bench` times the lanes warm ([`PARALLEL_WARM_LAPS`]), and the gap to
/// the latency line is then not overlap alone: a host's shared L3 can keep
/// a working set that is touched again soon and drop one that is not, so
/// at some sizes the lanes hit where the single chase misses (4 MiB on the
/// guest of BENCHMARKS.md's fifty-third round: about 3 ns against 190).
pub const PARALLEL_LANES: usize = 8;

/// Untimed laps of the [`PARALLEL_LANES`] lanes before `bench` times
/// them, so that it times their steady state, as `benches/memory.rs`
/// does, not the way back from the latency chase before them.
///
/// Why laps are needed: on the 2-core guest of BENCHMARKS.md's
/// fifty-third round, the shared L3 kept a line only while it was touched
/// again within about a millisecond. One chase through 4 MiB comes back
/// to a line every 10 ms or so, and every access missed (about 190 ns);
/// eight lanes warm come back every 0.2 ms and hit (about 3 ns an access).
/// From the buffer the chase left, the lanes took a few laps to get
/// there; without these laps `bench` measured 16.6-24.0 ns at 4 MiB, a
/// figure of the way there, and with them 2.8-8.1 ns.
pub const PARALLEL_WARM_LAPS: usize = 4;

/// Steps per lane of the untimed laps before `bench` times the lanes in a
/// buffer of `lines` lines: [`PARALLEL_WARM_LAPS`] laps, at most as many
/// accesses as four timed runs (so that 64 MiB costs a round about 15 ms,
/// not 130).
///
/// ```
/// use flowsieve::bench::{PARALLEL_LANES, PARALLEL_WARM_LAPS, parallel_warm_up_steps};
/// // 4 MiB: four whole laps of the cycle, shared among the lanes.
/// let lines = (4 << 20) / 64;
/// assert_eq!(parallel_warm_up_steps(lines) * PARALLEL_LANES, PARALLEL_WARM_LAPS * lines);
/// // 64 MiB: capped below four laps.
/// assert!(parallel_warm_up_steps((64 << 20) / 64) * PARALLEL_LANES < PARALLEL_WARM_LAPS * (64 << 20) / 64);
/// ```
pub fn parallel_warm_up_steps(lines: usize) -> usize {
    (PARALLEL_WARM_LAPS * lines / PARALLEL_LANES).min(MOST_UNTIMED_ACCESSES / PARALLEL_LANES)
}

/// Nanoseconds per access of `L` chases through a [`chase_cycle`] at
/// once, `steps` steps each, from the positions in `at` on (and `at` left
/// where they ended; [`chase_cycle_with_lanes`] gives [`PARALLEL_LANES`]
/// starts spaced round the cycle, `bench`'s count; `benches/memory.rs`
/// also times other counts).
///
/// Each lane's next address is its own last load's value, as in
/// [`random_access_ns`], but the lanes do not wait for each other: the
/// core issues the `L` loads of a step together, and the time per access
/// is the latency divided by the overlap the memory system gives. That is
/// what a packet's independent filter lines pay at best.
///
/// ```
/// use flowsieve::bench::{chase_cycle_with_lanes, parallel_access_ns};
/// let (cycle, mut at) = chase_cycle_with_lanes(1 << 20);
/// let ns = parallel_access_ns(&cycle, &mut at, 1 << 12);
/// assert!(ns.is_finite() && ns > 0.0);
/// ```
pub fn parallel_access_ns<const L: usize>(
    cycle: &[usize],
    at: &mut [usize; L],
    steps: usize,
) -> f64 {
    let mut lanes = *at;
    let t0 = Instant::now();
    for _ in 0..steps {
        for lane in lanes.iter_mut() {
            *lane = cycle.get(*lane).copied().unwrap_or(0);
        }
    }
    let ns = t0.elapsed().as_secs_f64() * 1e9 / (steps.max(1) * L.max(1)) as f64;
    *at = std::hint::black_box(lanes);
    ns
}

/// Nanoseconds per step of a chase of `steps` steps through a
/// [`chase_cycle`], from `*at` on (and `*at` left where it ended): each
/// load's address is the load before's value, so every step waits for the
/// one before, and the time per step is the latency of a random access in
/// that working set.
///
/// Why the position is kept: a chase that restarted at the same line each
/// time would walk the same `steps` lines again and again, a working set
/// of `steps` lines however large the buffer, which the caches would hold.
/// Carried on, successive chases go round the whole cycle.
///
/// ```
/// use flowsieve::bench::{chase_cycle, random_access_ns};
/// let (near, far) = (chase_cycle(32 << 10), chase_cycle(64 << 20));
/// let (mut a, mut b) = (0, 0);
/// random_access_ns(&near, &mut a, 1 << 12); // in cache from here on
/// let near_ns = random_access_ns(&near, &mut a, 1 << 16);
/// let far_ns = random_access_ns(&far, &mut b, 1 << 16);
/// assert!(near_ns > 0.0 && far_ns > near_ns);
/// ```
pub fn random_access_ns(cycle: &[usize], at: &mut usize, steps: usize) -> f64 {
    let mut i = *at;
    let t0 = Instant::now();
    for _ in 0..steps {
        i = cycle.get(i).copied().unwrap_or(0);
    }
    let ns = t0.elapsed().as_secs_f64() * 1e9 / steps.max(1) as f64;
    *at = std::hint::black_box(i);
    ns
}

/// The most keyed packets `bench` holds in memory for its preloaded rows
/// (about 80 bytes each: 640 MB).
pub const MAX_PRELOAD_PACKETS: usize = 8 << 20;

/// Why a benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A trace could not be read cleanly.
    #[error("{0}")]
    Input(String),
    /// A thread count is out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The pipeline failed.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The traces hold no packet: there is nothing to time.
    #[error(
        "{0}: no packets to time (bench needs a trace with packets; `flowsieve gen-trace` writes one)"
    )]
    NoPackets(String),
    /// Stopped (Ctrl-C) before all rounds ran.
    #[error("interrupted after {rounds} of {of} rounds")]
    Interrupted {
        /// Rounds completed.
        rounds: usize,
        /// Rounds asked for.
        of: usize,
    },
}

/// Below this many packets `bench` says that its figures are low: each
/// run's fixed costs (threads started, filters cleared and faulted in,
/// windows set up) are then a large part of its time, whatever the
/// pipeline's speed. On the benchmark trace's shape
/// (`gen-trace --sizes 64-200`, 15 packets a flow), one worker's Mpps per
/// CPU-second from the file read 0.43 of a 1 M-packet trace's at 10 k
/// packets, 0.52 at 50 k and 0.86 at 200 k (BENCHMARKS.md,
/// seventy-third round).
pub const MIN_TIMED_PACKETS: u64 = 500_000;

/// The note [`BenchReport::short_trace_note`] carries for `packets`
/// packets, `None` from [`MIN_TIMED_PACKETS`] on.
///
/// ```
/// use flowsieve::bench::{short_trace_note, MIN_TIMED_PACKETS};
/// assert!(short_trace_note(40_000).unwrap().contains("40000 packets"));
/// assert!(short_trace_note(MIN_TIMED_PACKETS - 1).is_some());
/// assert!(short_trace_note(MIN_TIMED_PACKETS).is_none());
/// ```
pub fn short_trace_note(packets: u64) -> Option<String> {
    (packets < MIN_TIMED_PACKETS).then(|| {
        format!(
            "a short trace ({packets} packets, under {MIN_TIMED_PACKETS}): each run's fixed costs \
             (threads, filters cleared and faulted in) weigh in every figure, which reads low; \
             time throughput on a longer one, such as `flowsieve gen-trace -o FILE --flows 100000 \
             --packets 1500000 --sizes 64-200`"
        )
    })
}

/// The note [`BenchReport::unkeyed_note`] carries when fewer than half
/// of `packets` are `keyed` (carry an IP flow key). The pipeline rows count
/// every packet read, as tcpdump's figures do, but only keyed packets reach
/// the stages: on a trace of ARP, or of a link type with no IP, the rows
/// time the reading and an idle engine, and read as a speed the stages
/// never had.
///
/// ```
/// use flowsieve::bench::unkeyed_note;
/// assert!(unkeyed_note(1000, 0).unwrap().contains("0 of the 1000 packets"));
/// assert!(unkeyed_note(1000, 499).is_some());
/// assert!(unkeyed_note(1000, 500).is_none());
/// assert!(unkeyed_note(0, 0).is_none());
/// ```
pub fn unkeyed_note(packets: u64, keyed: u64) -> Option<String> {
    (keyed.saturating_mul(2) < packets).then(|| {
        let share = keyed as f64 / packets as f64 * 100.0;
        format!(
            "only {keyed} of the {packets} packets ({share:.1} %) carry an IP flow key: the rows \
             count every packet read, but the stages ran on those alone, so the figures say \
             little of the stages' speed"
        )
    })
}

/// The most rounds `bench` runs (each round replays every trace once per
/// thread count and once more for dissect+hash).
pub const MAX_ROUNDS: usize = 1000;

/// The longest quiet gap `bench --gap` takes before each whole-process run
/// ([`compare_with_tcpdump`]): a minute, far past the few seconds that
/// decide how a process starts, and short enough that a mistyped value
/// does not leave the command sleeping for hours.
pub const MAX_GAP: std::time::Duration = std::time::Duration::from_secs(60);

/// Which of `bench`'s two parts a run belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchPart {
    /// The runs inside this process ([`bench_until`]): dissect+hash, the
    /// pipeline rows, the preloaded rows, the memory chase.
    InProcess,
    /// The whole-process runs side by side with tcpdump
    /// ([`compare_with_tcpdump`]).
    WholeProcess,
}

/// The run a `bench` is about to start: what the progress line SIGUSR1
/// asks for says. A bench of a large trace runs for minutes, a run of it
/// for seconds or more, and its bar shows only rounds (and only on a
/// terminal).
///
/// ```
/// use flowsieve::bench::{BenchAt, BenchPart};
/// let at = BenchAt { part: BenchPart::InProcess, round: 2, rounds: 6, run: "pipeline, 2 threads" };
/// assert_eq!(at.line(), "round 2 of 6 of the in-process runs: pipeline, 2 threads");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchAt<'a> {
    /// The part the run is in.
    pub part: BenchPart,
    /// The round the run is in, from 1.
    pub round: usize,
    /// The part's rounds.
    pub rounds: usize,
    /// The run: its row's label (`dissect+hash`, `pipeline, 2 threads`,
    /// the command of a whole-process row), or [`MEMORY_RUN`].
    pub run: &'a str,
}

impl BenchAt<'_> {
    /// The run as one line's text, without the `flowsieve: progress:`
    /// prefix the command gives it.
    pub fn line(&self) -> String {
        let part = match self.part {
            BenchPart::InProcess => "in-process",
            BenchPart::WholeProcess => "whole-process",
        };
        format!(
            "round {} of {} of the {part} runs: {}",
            self.round, self.rounds, self.run
        )
    }
}

/// The name [`BenchAt::run`] gives the timed random accesses of a round
/// (the memory lines).
pub const MEMORY_RUN: &str = "memory latency";

/// A pipeline or preloaded row's label: `pipeline, 1 thread`,
/// `preloaded, 2 threads`.
fn row_label(kind: &str, threads: usize) -> String {
    format!(
        "{kind}, {threads} thread{}",
        if threads == 1 { "" } else { "s" }
    )
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs the protocol over `paths` with `cfg` (whose ground truth should be
/// off) at each of `threads`, for `rounds` rounds, with the memory line
/// over [`LATENCY_WORKING_SETS`].
pub fn bench(
    paths: &[PathBuf],
    cfg: &ValidatedConfig,
    threads: &[usize],
    rounds: usize,
) -> Result<BenchReport, BenchError> {
    bench_until(
        paths,
        cfg,
        threads,
        rounds,
        &LATENCY_WORKING_SETS,
        &AtomicBool::new(false),
        &mut |_| {},
    )
}

/// [`bench()`], timing a random access in each of `latency_sets` (bytes;
/// none, and no memory line, when it is empty), stopping with
/// [`BenchError::Interrupted`] at the next run once `stop` is set (a
/// Ctrl-C handler sets it), and calling `on_run` before each run with
/// where it is ([`BenchAt`], part [`BenchPart::InProcess`]; its round
/// less one is the rounds done, for a progress bar).
///
/// Why the memory lines can be left out: building their buffers takes
/// about 0.2 s and chasing them about 0.35 s a round, whatever the trace,
/// which is most of a bench of a small capture.
pub fn bench_until(
    paths: &[PathBuf],
    cfg: &ValidatedConfig,
    threads: &[usize],
    rounds: usize,
    latency_sets: &[usize],
    stop: &AtomicBool,
    on_run: &mut dyn FnMut(BenchAt<'_>),
) -> Result<BenchReport, BenchError> {
    let rounds = rounds.max(1);
    // Before each run: stopped with the rounds done once `stop` is set,
    // else the run is announced.
    let mut next_run = |done: usize, run: &str| {
        if stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted {
                rounds: done,
                of: rounds,
            });
        }
        on_run(BenchAt {
            part: BenchPart::InProcess,
            round: done + 1,
            rounds,
            run,
        });
        Ok(())
    };
    let labels: Vec<(String, String)> = threads
        .iter()
        .map(|&t| (row_label("pipeline", t), row_label("preloaded", t)))
        .collect();
    let configs: Vec<(usize, ValidatedConfig)> = threads
        .iter()
        .map(|&t| cfg.clone().with_threads(t).map(|c| (t, c)))
        .collect::<Result<_, _>>()?;
    let mut replay_cfg = cfg.config().replay.clone();
    replay_cfg.truth = false;
    // Read once, before any timing, for the preloaded rows.
    let (preloaded, preload_note) = match Preloaded::read(paths, &replay_cfg, MAX_PRELOAD_PACKETS) {
        Ok(p) => (Some(p), None),
        Err(e @ PreloadError::TooMany { .. }) => (None, Some(e.to_string())),
        Err(PreloadError::Input(e)) => return Err(BenchError::Input(e)),
    };
    // Nothing to time: said before the memory buffers are built and any
    // run starts. (Past the preload limit the traces hold packets.)
    if preloaded.as_ref().is_some_and(|p| p.records() == 0) {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(BenchError::NoPackets(names.join(", ")));
    }
    // Built once (which maps every page: each line is written), chased
    // once a round beside the runs, so that the latency figures sample the
    // same hour as the throughput ones.
    let (cycles, mut lanes_at): (Vec<Vec<usize>>, Vec<[usize; PARALLEL_LANES]>) = latency_sets
        .iter()
        .map(|&b| chase_cycle_with_lanes(b))
        .unzip();
    let mut chase_at = vec![0usize; cycles.len()];
    let mut latency = vec![Vec::new(); cycles.len()];
    let mut parallel = vec![Vec::new(); cycles.len()];
    let t = threads.len();
    // (wall, cpu) per round: the dissect+hash row, one per thread count
    // from the files, then one per thread count preloaded.
    let mut wall = vec![Vec::new(); 2 * t + 1];
    let mut cpu = vec![Vec::new(); 2 * t + 1];
    let mut costs: Vec<Vec<Option<PacketCost>>> = vec![Vec::new(); 2 * t + 1];
    let mut packets = 0;
    let mut filtered_out = None;
    let mut keyed_packets = 0;
    for round in 0..rounds {
        next_run(round, "dissect+hash")?;
        let (c0, t0) = (cpu_seconds(), Instant::now());
        let s = replay(paths, &replay_cfg, &mut NoObserver);
        let (w, c) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
        if s.could_not_open || !s.errors.is_empty() {
            return Err(BenchError::Input(s.errors.join("; ")));
        }
        packets = s.trace.packets;
        filtered_out = s.trace.filtered_out;
        wall[0].push(packets as f64 / w.max(1e-9) / 1e6);
        cpu[0].push(packets as f64 / c.max(1e-9) / 1e6);
        for (i, (_, c)) in configs.iter().enumerate() {
            next_run(round, &labels[i].0)?;
            let source = FileSource::new(paths.to_vec(), c);
            let r = run(source, c, &mut NoObserver, &mut NoEvents)?;
            keyed_packets = r.pipeline.packets;
            wall[i + 1].push(r.throughput.packets_per_sec / 1e6);
            cpu[i + 1].push(r.throughput.packets_per_cpu_sec / 1e6);
            costs[i + 1].push(packet_cost(&r));
        }
        if let Some(p) = &preloaded {
            for (i, (_, c)) in configs.iter().enumerate() {
                next_run(round, &labels[i].1)?;
                let r = run(p, c, &mut NoObserver, &mut NoEvents)?;
                wall[t + i + 1].push(r.throughput.packets_per_sec / 1e6);
                cpu[t + i + 1].push(r.throughput.packets_per_cpu_sec / 1e6);
                costs[t + i + 1].push(packet_cost(&r));
            }
        }
        if !cycles.is_empty() {
            next_run(round, MEMORY_RUN)?;
        }
        for (((c, at), l), (lanes, p)) in cycles
            .iter()
            .zip(chase_at.iter_mut())
            .zip(latency.iter_mut())
            .zip(lanes_at.iter_mut().zip(parallel.iter_mut()))
        {
            // The runs just evicted the buffer: a lap first (at most four
            // timed chases' worth), so that a working set the caches can
            // hold is timed in them, not on its way back, as
            // `benches/memory.rs` times it.
            random_access_ns(c, at, (c.len() / 8).min(MOST_UNTIMED_ACCESSES));
            l.push(random_access_ns(c, at, LATENCY_STEPS));
            // The same number of accesses, eight at a time, after laps of
            // their own: the lanes come back to a line far sooner than one
            // chase does, so a working set the caches drop under the chase
            // can stay in them under the lanes, and the way there takes
            // laps ([`PARALLEL_WARM_LAPS`]).
            parallel_access_ns(c, lanes, parallel_warm_up_steps(c.len() / 8));
            p.push(parallel_access_ns(c, lanes, LATENCY_STEPS / PARALLEL_LANES));
        }
    }
    let base = median(&wall[0]);
    let one_at = threads.iter().position(|&t| t == 1);
    let rows = if preloaded.is_some() {
        2 * t + 1
    } else {
        t + 1
    };
    let results = (0..rows)
        .map(|i| {
            // Row i: 0 dissect+hash, 1..=t from the files, then preloaded.
            let (kind, j) = match i.checked_sub(1) {
                None => ("dissect+hash", None),
                Some(j) if j < t => ("pipeline", Some(j)),
                Some(j) => ("preloaded", Some(j - t)),
            };
            let th = j.map(|j| threads[j]);
            // The 1-thread row of the same kind: `o` rows after its first.
            let one = j.zip(one_at).map(|(j, o)| median(&wall[i - j + o]));
            let m = median(&wall[i]);
            BenchRow {
                path: match th {
                    None => kind.into(),
                    Some(n) => row_label(kind, n),
                },
                threads: th,
                mpps: m,
                mpps_per_cpu_sec: median(&cpu[i]),
                ratio_to_dissect_hash: m / base.max(1e-12),
                scaling_vs_1_thread: th.and(one).map(|o| m / o.max(1e-12)),
                rounds_mpps: wall[i].clone(),
                per_packet: median_cost(&costs[i]),
            }
        })
        .collect();
    Ok(BenchReport {
        packets,
        rounds,
        filter: replay_cfg
            .filter
            .as_ref()
            .map(|f| f.expression().to_string()),
        filtered_out,
        stages: cfg.stage_names().join(","),
        results,
        tcpdump: None,
        tcpdump_note: None,
        preload_note,
        short_trace_note: short_trace_note(packets),
        keyed_packets,
        unkeyed_note: unkeyed_note(packets, keyed_packets),
        memory_latency: latency_sets
            .iter()
            .zip(latency.iter().zip(&parallel))
            .map(|(&bytes, (ns, parallel_ns))| MemoryLatency {
                bytes,
                ns: median(ns),
                parallel_ns: median(parallel_ns),
            })
            .collect(),
    })
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "flowsieve bench: {} packets{}, {} rounds (medians), truth off, stages {}",
            self.packets,
            match (&self.filter, self.filtered_out) {
                (Some(e), Some(out)) => format!(" kept by filter {e:?} ({out} filtered out)"),
                _ => String::new(),
            },
            self.rounds,
            if self.stages.is_empty() {
                "none"
            } else {
                &self.stages
            }
        )?;
        writeln!(
            f,
            "  {:<22} {:>10} {:>16} {:>14} {:>12}",
            "path", "Mpps", "Mpps per CPU-s", "vs dissect", "vs 1 thread"
        )?;
        for r in &self.results {
            writeln!(
                f,
                "  {:<22} {:>10.2} {:>16.2} {:>13.2}x {:>12}",
                r.path,
                r.mpps,
                r.mpps_per_cpu_sec,
                r.ratio_to_dissect_hash,
                r.scaling_vs_1_thread
                    .map_or("-".into(), |s| format!("{s:.2}x"))
            )?;
        }
        if self.results.iter().any(|r| r.path.starts_with("preloaded")) {
            writeln!(
                f,
                "  (preloaded: the packets dissected and hashed once, before timing; the engine and the stages alone)"
            )?;
        }
        if let Some(note) = &self.preload_note {
            writeln!(f, "no preloaded rows: {note}")?;
        }
        if let Some(note) = &self.short_trace_note {
            writeln!(f, "note: {note}")?;
        }
        if let Some(note) = &self.unkeyed_note {
            writeln!(f, "note: {note}")?;
        }
        self.fmt_costs(f)?;
        if !self.memory_latency.is_empty() {
            // "12.4 ns at 256 KiB, 46.2 ns at 1 MiB, ...", of one figure.
            let figures = |ns: fn(&MemoryLatency) -> f64| {
                self.memory_latency
                    .iter()
                    .map(|m| format!("{:.1} ns at {}", ns(m), working_set(m.bytes)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            writeln!(
                f,
                "memory: a random access takes {} (the stages follow these on a shared host)",
                figures(|m| m.ns)
            )?;
            writeln!(
                f,
                "memory: with {PARALLEL_LANES} independent random accesses in flight, one takes {} (a packet's filter lines are independent like these)",
                figures(|m| m.parallel_ns)
            )?;
        }
        if let Some(c) = &self.tcpdump {
            write!(f, "{c}")?;
        }
        if let Some(note) = &self.tcpdump_note {
            writeln!(f, "no tcpdump comparison: {note}")?;
        }
        Ok(())
    }
}

impl BenchReport {
    /// The table of where a packet's time went, row by row (nothing when
    /// no row has the figures).
    fn fmt_costs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: Vec<(&str, &PacketCost)> = self
            .results
            .iter()
            .filter_map(|r| Some((r.path.as_str(), r.per_packet.as_ref()?)))
            .collect();
        let Some((_, first)) = rows.first() else {
            return Ok(());
        };
        writeln!(
            f,
            "where a packet's time goes, ns a packet (medians): the CPU of the source thread (and the kernel's part of it) and of the workers, and each stage's time on the workers"
        )?;
        write!(
            f,
            "  {:<22} {:>10} {:>10} {:>10}",
            "path", "source", "(kernel)", "workers"
        )?;
        for st in &first.stages {
            write!(f, " {:>10}", st.name)?;
        }
        writeln!(f)?;
        for (path, c) in &rows {
            let kernel = c
                .source_system_ns
                .map_or_else(|| "-".to_string(), |ns| format!("{ns:.1}"));
            write!(
                f,
                "  {:<22} {:>10.1} {:>10} {:>10.1}",
                path, c.source_ns, kernel, c.workers_ns
            )?;
            for st in &c.stages {
                write!(f, " {:>10.1}", st.ns)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// `256 KiB`, `4 MiB`: a working set as the memory line names it.
fn working_set(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// One whole-process timing: a command and its median wall time.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessRow {
    /// What ran, as a user would type it to run it again: the trace's
    /// path and every argument as a shell takes them back
    /// ([`shell_word`]), `flowsieve` for this program.
    pub command: String,
    /// What the row stands for, for flowsieve's rows ("all stages, truth
    /// off", "the same, blocked counters", "the default job, truth on");
    /// `None` for tcpdump's and tshark's.
    pub label: Option<String>,
    /// Median wall seconds over the rounds, start-up and exit included.
    pub wall_seconds: f64,
    /// Packets per wall second, in millions.
    pub mpps: f64,
    /// tcpdump's median wall time over this row's (above 1: faster than
    /// tcpdump).
    pub vs_tcpdump: f64,
    /// The same comparison round by round: in each round tcpdump's wall
    /// time over this row's, and the median of those ratios with an
    /// interval ([`median_interval`]); `None` for tcpdump's own row.
    ///
    /// Why beside `vs_tcpdump`: the host's load drifts between minutes,
    /// and a drift moves the commands of one round alike, so the ratio
    /// taken within each round cancels it where two medians taken apart
    /// do not. On this project's benchmark guest the default job's CPU
    /// time moved by 40 % between sittings and tcpdump's by 25 %
    /// (BENCHMARKS.md, thirty-seventh round); whether the default job is
    /// "at least as fast as tcpdump" is a question for this interval.
    pub vs_tcpdump_paired: Option<MedianInterval>,
    /// tshark's median wall time over this row's (above 1: faster than
    /// tshark), when `bench --tshark` timed `tshark -n -r FILE -w
    /// /dev/null` in the same rounds; `None` otherwise.
    pub vs_tshark: Option<f64>,
}

/// The median of some values and an interval for it that holds the
/// median of the distribution they were drawn from with a known
/// probability, whatever that distribution (continuous) is.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MedianInterval {
    /// The median of the values (the upper of the middle two for an even
    /// count, as every median of `bench`).
    pub median: f64,
    /// The interval's low end: the `k`-th smallest value.
    pub low: f64,
    /// The interval's high end: the `k`-th largest value.
    pub high: f64,
    /// The probability that such an interval holds the true median:
    /// `1 - 2 P(B < k)` for `B` binomial with `n` trials of one half.
    pub coverage: f64,
}

/// The coverage [`median_interval`] aims for.
pub const MEDIAN_INTERVAL_COVERAGE: f64 = 0.95;

/// The median of `values` with its distribution-free interval: the `k`-th
/// smallest to the `k`-th largest value, for the largest `k` whose
/// coverage (the chance that the true median lies inside, `1 - 2 P(B <
/// k)` with `B ~ Binomial(n, 1/2)`) is at least
/// [`MEDIAN_INTERVAL_COVERAGE`]. With fewer than six values no `k`
/// reaches 95 %, and the interval is the smallest to the largest value
/// with the coverage it has (75 % for three, 94 % for five). `None` for
/// no values; values that are not numbers sort last.
///
/// Why order statistics and not a bootstrap: they need no random numbers
/// (the same times give the same interval) and their coverage is exact
/// for any continuous distribution, which suits a handful of rounds.
///
/// ```
/// use flowsieve::bench::median_interval;
/// // Six values: the smallest to the largest holds the median with
/// // probability 1 - 2/64.
/// let i = median_interval(&[1.04, 0.98, 1.10, 1.01, 1.07, 0.99]).unwrap();
/// assert_eq!((i.median, i.low, i.high), (1.04, 0.98, 1.10));
/// assert!((i.coverage - 62.0 / 64.0).abs() < 1e-12);
/// // Twenty values: the 6th smallest to the 6th largest (95.9 %; the 7th
/// // would cover only 88.5 %).
/// let v: Vec<f64> = (1..=20).map(f64::from).collect();
/// let i = median_interval(&v).unwrap();
/// assert_eq!((i.low, i.high), (6.0, 15.0));
/// assert!((i.coverage - 0.9586).abs() < 1e-4);
/// assert!(median_interval(&[]).is_none());
/// ```
pub fn median_interval(values: &[f64]) -> Option<MedianInterval> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    // `term` walks P(B = i) from P(B = 0) = 2^-n (n is at most
    // MAX_ROUNDS, so 2^-n stays a normal f64); `below` is P(B < k) for the
    // candidate `k`. k = 1 is the smallest to the largest value, kept
    // whatever its coverage.
    let mut term = 0.5f64.powi(n as i32);
    let mut below = 0.0;
    let (mut k, mut coverage) = (1, 1.0 - 2.0 * term);
    for candidate in 1..=n.div_ceil(2) {
        below += term;
        term *= (n - (candidate - 1)) as f64 / candidate as f64;
        let c = 1.0 - 2.0 * below;
        if c < MEDIAN_INTERVAL_COVERAGE {
            break;
        }
        (k, coverage) = (candidate, c);
    }
    let at = |i: usize| sorted.get(i).copied().unwrap_or(f64::NAN);
    Some(MedianInterval {
        median: median(values),
        low: at(k - 1),
        high: at(n - k),
        coverage,
    })
}

/// flowsieve against `tcpdump -r FILE -w /dev/null`, whole processes timed
/// side by side in every round, as users time them.
#[derive(Clone, Debug, Serialize)]
pub struct TcpdumpComparison {
    /// tcpdump's row first, then flowsieve's.
    pub rows: Vec<ProcessRow>,
    /// The quiet gap, untimed, before each command (`bench --gap`); 0 when
    /// they ran back to back.
    pub gap_seconds: f64,
    /// How the trace sat in the page cache after the rounds: a file cached
    /// in 4 KiB pages times up to a tenth slower than one mapped with
    /// 2 MiB entries, for every command alike
    /// ([`crate::ingest::page_cache_state`]).
    pub page_cache: Option<crate::ingest::PageCacheState>,
    /// Why the page cache's state is not known, when it is not.
    pub page_cache_note: Option<String>,
    /// Why tshark's row, asked for (`bench --tshark`), is not there.
    pub tshark_note: Option<String>,
}

/// Why there is no tcpdump comparison.
#[derive(Clone, Debug, Serialize)]
pub struct NoComparison(pub String);

/// Times `tcpdump -r trace -w /dev/null` against this flowsieve binary
/// (`exe`) run on the same trace: all stages with truth off, the same with
/// `--layout blocked` (unless `forwarded` names a layout already: the
/// option's own speed, which it exists for), and the default job with
/// truth on, each with the `forwarded` pipeline flags.
/// Each round runs every command once, in turn, so machine noise hits all
/// alike; figures are medians. Each command starts `gap` after the one
/// before ended (untimed): zero times them back to back, as a benchmark
/// loop does, and a few seconds as a user's single command starts, which
/// on a virtual machine whose memory balloon reports free pages is a
/// different cost (BENCHMARKS.md, forty-first round).
///
/// `tcpdump_filter` is what tcpdump is given after `-w /dev/null` for the
/// trace filter flowsieve's rows run with (in `forwarded`): the expression
/// as one word, or `-F FILE`; empty without one.
///
/// With `tshark`, the rounds also time `tshark -n -r trace -w /dev/null`,
/// Wireshark's reader, as the last row, and each row gets its ratio to it
/// ([`ProcessRow::vs_tshark`]). The row is left out, with
/// [`TcpdumpComparison::tshark_note`] saying why, where tshark is not
/// installed, and under a trace filter: tshark reads a file through
/// display filters, not tcpdump's expressions, so it would read packets
/// that the other rows do not.
///
/// Needs one uncompressed trace (tcpdump reads neither gzip nor zstd) and
/// tcpdump on the `PATH`. `on_run` is told of each run ([`BenchAt`], part
/// [`BenchPart::WholeProcess`], the row's command) before its gap.
#[allow(clippy::too_many_arguments)]
pub fn compare_with_tcpdump(
    exe: &std::path::Path,
    forwarded: &[String],
    tcpdump_filter: &[String],
    traces: &[PathBuf],
    packets: u64,
    rounds: usize,
    gap: std::time::Duration,
    tshark: bool,
    stop: &AtomicBool,
    on_run: &mut dyn FnMut(BenchAt<'_>),
) -> Result<TcpdumpComparison, NoComparison> {
    use std::process::{Command, Stdio};
    let [trace] = traces else {
        return Err(NoComparison(
            "tcpdump reads one file: give bench a single trace to compare".into(),
        ));
    };
    let file = trace.to_string_lossy().into_owned();
    if file.ends_with(".gz") || file.ends_with(".zst") {
        return Err(NoComparison(format!(
            "{file}: tcpdump cannot read compressed traces; decompress it to compare"
        )));
    }
    let found = |program: &str| {
        Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    if !found("tcpdump") {
        return Err(NoComparison(
            "tcpdump is not installed (Debian: apt-get install tcpdump); no comparison".into(),
        ));
    }
    // Each command, as run and as shown, with its row's label.
    let mut tcpdump_args: Vec<String> =
        vec!["-r".into(), file.clone(), "-w".into(), "/dev/null".into()];
    tcpdump_args.extend(tcpdump_filter.iter().cloned());
    let mut commands: Vec<WholeProcessRun> = vec![WholeProcessRun::new(
        "tcpdump",
        "tcpdump",
        tcpdump_args,
        None,
    )];
    let exe_s = exe.to_string_lossy().into_owned();
    let with = |extra: &[&str]| {
        let mut args = forwarded.to_vec();
        args.extend(extra.iter().map(|a| a.to_string()));
        args.push(file.clone());
        args
    };
    commands.push(WholeProcessRun::new(
        &exe_s,
        "flowsieve",
        with(&["-q", "--no-truth"]),
        Some("all stages, truth off"),
    ));
    let names_layout = forwarded
        .iter()
        .any(|f| f == "--layout" || f.starts_with("--layout="));
    if !names_layout {
        commands.push(WholeProcessRun::new(
            &exe_s,
            "flowsieve",
            with(&["-q", "--no-truth", "--layout", "blocked"]),
            Some("the same, blocked counters"),
        ));
    }
    // The default job as a user runs it: the text report is written (to
    // the null device here), so every figure it carries is computed. `-q`
    // would leave out the model columns nobody reads
    // (`HeavyConfig::model`), and the row would time less than the job.
    commands.push(WholeProcessRun::new(
        &exe_s,
        "flowsieve",
        with(&[]),
        Some("the default job, truth on"),
    ));
    let mut tshark_note = None;
    if tshark {
        if !tcpdump_filter.is_empty() {
            tshark_note = Some(
                "tshark reads a file through display filters, not tcpdump's expressions, so its row is left out under a trace filter".into(),
            );
        } else if !found("tshark") {
            tshark_note = Some(
                "tshark is not installed (Debian: apt-get install tshark); its row is left out"
                    .into(),
            );
        } else {
            commands.push(WholeProcessRun::new(
                "tshark",
                "tshark",
                vec![
                    "-n".into(),
                    "-r".into(),
                    file.clone(),
                    "-w".into(),
                    "/dev/null".into(),
                ],
                None,
            ));
        }
    }
    let tshark_row = (tshark && tshark_note.is_none()).then(|| commands.len() - 1);
    let mut walls = vec![Vec::new(); commands.len()];
    let rounds = rounds.max(1);
    for round in 1..=rounds {
        for (i, run) in commands.iter().enumerate() {
            let (program, args) = (&run.program, &run.args);
            on_run(BenchAt {
                part: BenchPart::WholeProcess,
                round,
                rounds,
                run: &run.shown(),
            });
            if !sleep_unless_stopped(gap, stop) {
                return Err(NoComparison("interrupted".into()));
            }
            let t0 = Instant::now();
            let status = Command::new(program)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let wall = t0.elapsed().as_secs_f64();
            match status {
                Ok(s) if s.success() => walls[i].push(wall),
                Ok(s) => {
                    return Err(NoComparison(format!(
                        "'{program} {}' exited with {s}",
                        args.join(" ")
                    )));
                }
                Err(e) => return Err(NoComparison(format!("cannot run {program}: {e}"))),
            }
        }
    }
    let medians: Vec<f64> = walls.iter().map(|w| median(w)).collect();
    let tcpdump = medians[0];
    let tshark = tshark_row.map(|i| medians[i]);
    // Each round's tcpdump time over each row's (none for tcpdump's own).
    let paired = walls.iter().enumerate().map(|(i, w)| {
        if i == 0 {
            return None;
        }
        let ratios: Vec<f64> = w
            .iter()
            .zip(&walls[0])
            .map(|(row, tcpdump)| tcpdump / row.max(1e-9))
            .collect();
        median_interval(&ratios)
    });
    let rows = commands
        .into_iter()
        .zip(medians)
        .zip(paired)
        .map(|((run, wall), paired)| ProcessRow {
            command: run.command,
            label: run.label.map(String::from),
            wall_seconds: wall,
            mpps: packets as f64 / wall.max(1e-9) / 1e6,
            vs_tcpdump: tcpdump / wall.max(1e-9),
            vs_tcpdump_paired: paired,
            vs_tshark: tshark.map(|t| t / wall.max(1e-9)),
        })
        .collect();
    let (page_cache, page_cache_note) = match crate::ingest::page_cache_state(trace) {
        Ok(state) => (Some(state), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Ok(TcpdumpComparison {
        rows,
        gap_seconds: gap.as_secs_f64(),
        page_cache,
        page_cache_note,
        tshark_note,
    })
}

/// One command of the whole-process rounds.
struct WholeProcessRun {
    /// The program started (flowsieve's own path for its rows).
    program: String,
    args: Vec<String>,
    /// As a user would type it ([`ProcessRow::command`]).
    command: String,
    label: Option<&'static str>,
}

impl WholeProcessRun {
    fn new(program: &str, typed: &str, args: Vec<String>, label: Option<&'static str>) -> Self {
        let command = std::iter::once(typed.to_string())
            .chain(args.iter().map(|a| shell_word(a)))
            .collect::<Vec<_>>()
            .join(" ");
        WholeProcessRun {
            program: program.to_string(),
            args,
            command,
            label,
        }
    }

    /// The command and its label, as the text and the progress line show
    /// them.
    fn shown(&self) -> String {
        match self.label {
            Some(label) => format!("{} ({label})", self.command),
            None => self.command.clone(),
        }
    }
}

/// Sleeps for `gap` in steps of at most 100 ms; false as soon as `stop` is
/// set, so that Ctrl-C is answered within a step.
fn sleep_unless_stopped(gap: std::time::Duration, stop: &AtomicBool) -> bool {
    let step = std::time::Duration::from_millis(100);
    let end = Instant::now() + gap;
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(step));
    }
}

/// `1.40x faster` or `1.16x slower`, for tcpdump's time over a row's.
fn speed(ratio: f64) -> String {
    if ratio >= 1.0 {
        format!("{ratio:.2}x faster")
    } else {
        format!("{:.2}x slower", 1.0 / ratio.max(1e-12))
    }
}

/// An interval of [`speed`]s: `1.30-1.42x faster`, or across even speed,
/// `1.05x slower-1.02x faster`.
fn speed_range(low: f64, high: f64) -> String {
    match (low >= 1.0, high >= 1.0) {
        (true, true) => format!("{low:.2}-{high:.2}x faster"),
        (false, false) => format!(
            "{:.2}-{:.2}x slower",
            1.0 / high.max(1e-12),
            1.0 / low.max(1e-12)
        ),
        _ => format!("{}-{}", speed(low), speed(high)),
    }
}

/// Bytes in a MiB, for the page-cache line.
const MIB: f64 = 1048576.0;

/// `word` as a shell takes it back: as it is when it holds nothing a
/// shell reads specially, else in single quotes (a filter expression such
/// as `udp port 53` is one word of the command shown).
///
/// ```
/// use flowsieve::bench::shell_word;
/// assert_eq!(shell_word("--layout"), "--layout");
/// assert_eq!(shell_word("udp port 53"), "'udp port 53'");
/// assert_eq!(shell_word("it's"), r"'it'\''s'");
/// assert_eq!(shell_word(""), "''");
/// ```
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

impl fmt::Display for TcpdumpComparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.gap_seconds > 0.0 {
            writeln!(
                f,
                "whole process, start-up included (medians, side by side in each round; \
                 each command after {:.1} s of quiet, untimed):",
                self.gap_seconds
            )?;
        } else {
            writeln!(
                f,
                "whole process, start-up included (medians, side by side in each round, back to back):"
            )?;
        }
        // tshark's column only when its row (the last) ran.
        let with_tshark = self.rows.iter().any(|r| r.vs_tshark.is_some());
        let last = self.rows.len().saturating_sub(1);
        writeln!(
            f,
            "  {:>9} {:>8} {:>12}{}  {:<36}  command",
            "wall s",
            "Mpps",
            "vs tcpdump",
            if with_tshark {
                format!(" {:>14}", "vs tshark")
            } else {
                String::new()
            },
            "round by round [interval]"
        )?;
        let mut coverage = None;
        for (i, r) in self.rows.iter().enumerate() {
            let vs = if i == 0 {
                "baseline".to_string()
            } else {
                speed(r.vs_tcpdump)
            };
            let paired = match r.vs_tcpdump_paired {
                // One round has no interval (its coverage is 0): the
                // ratio alone.
                Some(p) if p.coverage <= 0.0 => {
                    coverage = Some(p.coverage);
                    speed(p.median)
                }
                Some(p) => {
                    coverage = Some(p.coverage);
                    format!("{} [{}]", speed(p.median), speed_range(p.low, p.high))
                }
                None => String::new(),
            };
            writeln!(
                f,
                "  {:>9.3} {:>8.2} {:>12}{}  {:<36}  {}",
                r.wall_seconds,
                r.mpps,
                vs,
                match r.vs_tshark {
                    Some(_) if i == last => format!(" {:>14}", "baseline"),
                    Some(v) => format!(" {:>14}", speed(v)),
                    None => String::new(),
                },
                paired,
                match &r.label {
                    Some(label) => format!("{} ({label})", r.command),
                    None => r.command.clone(),
                }
            )?;
        }
        if coverage.is_some_and(|c| c <= 0.0) {
            writeln!(
                f,
                "  (round by round: each round's tcpdump time over the row's; one round gives no interval, \
                 3 rounds give one that holds the true median with probability 75 %, 6 or more 95 %)"
            )?;
        } else if let Some(c) = coverage {
            writeln!(
                f,
                "  (round by round: the median of each round's tcpdump time over the row's, which the host's drift between rounds does not move; \
                 the interval holds the true median with probability {:.1} %{})",
                100.0 * c,
                if c < MEDIAN_INTERVAL_COVERAGE {
                    "; 6 rounds or more give 95 %"
                } else {
                    ""
                }
            )?;
        }
        match (&self.page_cache, &self.page_cache_note) {
            (Some(s), _) => writeln!(
                f,
                "page cache: {:.1} of the trace's {:.1} MiB cached, {:.1} MiB of it in 2 MiB mappings \
                 (a trace just written sits in 4 KiB pages, and every command above runs up to a tenth slower from them)",
                s.cached_bytes as f64 / MIB,
                s.file_bytes as f64 / MIB,
                s.huge_mapped_bytes as f64 / MIB
            ),
            (None, Some(note)) => writeln!(f, "page cache: unknown ({note})"),
            (None, None) => Ok(()),
        }?;
        match &self.tshark_note {
            Some(note) => writeln!(f, "no tshark row: {note}"),
            None => Ok(()),
        }
    }
}
