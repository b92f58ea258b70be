//! `flowsieve`: the command-line front end. It parses flags, calls the
//! library, and renders what the library returns; all logic lives in the
//! `flowsieve` crate.

use clap::{Args, Parser, Subcommand, ValueEnum};
use flowsieve::class::Classifier;
use flowsieve::filter::CounterWidth;
use flowsieve::model::recycling::Hashing;
use flowsieve::pipeline::{
    parse_duration_ns, try_run_validated, DirectoryKind, HeavyConfig, HeavyEvent, NewFlowConfig,
    NewFlowEvent, NoEvents, PipelineConfig, PipelineSink, QueryUnit, RecycleSpec, ResolvedNewFlow,
    StageSet, WindowSpec,
};
use flowsieve::replay::ReplayObserver;
use flowsieve::report::exit_code;
use flowsieve::synth::{generate, OutputFormat, SizeModel, SynthConfig, SynthError};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The bundled default trace, found from the crate root or the working
/// directory.
fn default_trace() -> PathBuf {
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/default.pcap");
    if bundled.exists() {
        bundled
    } else {
        PathBuf::from("traces/default.pcap")
    }
}

#[derive(Parser)]
#[command(
    name = "flowsieve",
    version,
    about = "Probabilistic flow monitoring over pcap/pcapng traces",
    long_about = "Probabilistic flow monitoring over pcap/pcapng traces.\n\n\
        With no subcommand, replays the bundled default trace (traces/default.pcap).\n\n\
        Exit codes: 0 ok; 1 could not run (file missing, bad config, cannot write); \
        2 bad command line; 3 damaged input (a file ended early; results cover what was read); \
        4 input anomalies (every record read, some odd: see the warnings).",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Replay flags, accepted without the `replay` subcommand.
    #[command(flatten)]
    replay: ReplayArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Read traces and summarise packets, flows, skip reasons and classes.
    Replay(Box<ReplayArgs>),
    /// Write a seeded synthetic trace with Zipf-distributed flow sizes.
    GenTrace(GenTraceArgs),
    /// Measure throughput: the dissect+hash path alone, then the whole
    /// pipeline (truth off) at each thread count, side by side, repeated.
    Bench(Box<BenchArgs>),
    /// Evaluate the analytical models from the papers.
    #[command(subcommand)]
    Model(ModelCommand),
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Bloom filter false-positive rate (Summary Cache): approximate for
    /// --m-over-n, or for --m/--n (exact with --exact).
    Bloom(BloomArgs),
    /// Counting-filter count thresholding (Kim et al. 2019): kappa*(theta),
    /// its linear fit, k_opt, and the false-positive rate.
    Threshold(ThresholdArgs),
    /// The Bloom paradox (Theorem 1): the prior below which a positive
    /// answer should be ignored (--m-over-n), or the bits per element needed
    /// to escape it (--prior).
    Paradox(ParadoxArgs),
    /// Membership probability from a counting filter's counters (Theorem 2),
    /// and with --alpha the cost-optimal decision (Theorem 4).
    CbfPosterior(CbfPosteriorArgs),
    /// Optimal order of queries across proxies with a special proxy that
    /// has everything (Theorems 6 and 7), and its expected cost.
    QueryOrder(QueryOrderArgs),
    /// Recycling Bloom filters (Dozier et al.): the long-term average
    /// false-positive rate for --sigma, the N-bounded rates for --n-bounded,
    /// or the sizing for --target-fpr.
    Recycle(RecycleArgs),
    /// Compressed Bloom filters (Mitzenmacher): the (m/n, k) with the lowest
    /// false-positive rate whose compressed size fits a transmission budget.
    Compressed(CompressedArgs),
}

#[derive(Args)]
struct CompressedArgs {
    /// Transmitted bits per element (after compression).
    #[arg(long)]
    bits_per_element: f64,
    /// Largest uncompressed array, in bits per element (memory limit).
    #[arg(long, default_value_t = 1e6)]
    max_m_over_n: f64,
    /// Largest number of hash functions considered.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=64))]
    max_k: u32,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RecycleArgs {
    /// Total memory in bits (a two-phase filter has two halves of m/2).
    #[arg(long)]
    m: u64,
    /// Positions per message.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    k: u32,
    /// Recycle when more than sigma bits would be set (in the active half).
    #[arg(long, conflicts_with_all = ["n_bounded", "target_fpr"])]
    sigma: Option<u64>,
    /// N-bounded: recycle after N bit-setting insertions (f_w, f_o, f_a).
    #[arg(long, conflicts_with = "target_fpr")]
    n_bounded: Option<u64>,
    /// The largest sigma (and N) whose average rate stays at or below F.
    #[arg(long)]
    target_fpr: Option<f64>,
    /// Two-phase filter (active and frozen halves).
    #[arg(long)]
    two_phase: bool,
    /// k distinct positions per message (default: independent positions).
    #[arg(long)]
    non_colliding: bool,
    /// Re-insert the message that triggers a recycle.
    #[arg(long)]
    retaining: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ParadoxArgs {
    /// Cost of a false negative relative to a false positive.
    #[arg(long)]
    alpha: f64,
    /// Bits per element of the filter (gives prior_threshold).
    #[arg(long, conflicts_with = "prior", required_unless_present = "prior")]
    m_over_n: Option<f64>,
    /// A priori membership probability (gives min_bits_per_element).
    #[arg(long)]
    prior: Option<f64>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CbfPosteriorArgs {
    /// The k counter values, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    counters: Vec<u64>,
    /// A priori membership probability.
    #[arg(long)]
    prior: f64,
    /// Counters in the filter (k subarrays of m/k).
    #[arg(long)]
    m: u64,
    /// Elements in the filter.
    #[arg(long)]
    n: u64,
    /// Cost ratio: adds the decision and the minimal counter product.
    #[arg(long)]
    alpha: Option<f64>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct QueryOrderArgs {
    /// Success probability of each regular proxy, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    probs: Vec<f64>,
    /// Query cost of each regular proxy, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    costs: Vec<f64>,
    /// Query cost of the special proxy that holds every element.
    #[arg(long)]
    special_cost: f64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

fn check_probability(name: &str, p: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(format!("{name} must be a probability in [0, 1], got {p}"))
    }
}

fn check_positive(name: &str, x: f64) -> Result<(), String> {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        Err(format!("{name} must be a positive number, got {x}"))
    }
}

#[derive(Args)]
struct BloomArgs {
    /// Bits per element.
    #[arg(long, conflicts_with_all = ["m", "n"])]
    m_over_n: Option<f64>,
    /// Bits in the filter.
    #[arg(long, requires = "n")]
    m: Option<u64>,
    /// Elements inserted.
    #[arg(long, requires = "m")]
    n: Option<u64>,
    /// Hash functions.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    k: u32,
    /// Use (1 - (1 - 1/m)^{kn})^k rather than (1 - e^{-kn/m})^k (needs --m, --n).
    #[arg(long, requires = "m")]
    exact: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ThresholdArgs {
    /// Count threshold (all k counters >= theta).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    theta: u64,
    /// Counters per element.
    #[arg(long)]
    m_over_n: Option<f64>,
    /// Hash functions (default: k_opt).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    k: Option<u32>,
    /// Also the exact binomial rate, eq. (2), for --n elements in --m counters.
    #[arg(long, requires_all = ["n", "m"])]
    exact: bool,
    /// Elements inserted (with --exact).
    #[arg(long)]
    n: Option<u64>,
    /// Counters (with --exact).
    #[arg(long)]
    m: Option<u64>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ReplayArgs {
    /// Trace files (pcap, pcapng, optionally .gz/.zst), read in order.
    /// Default: the bundled trace.
    traces: Vec<PathBuf>,
    /// Stop after N packets in all.
    #[arg(short = 'c', value_name = "N")]
    count: Option<u64>,
    /// How many of the largest flows to list.
    #[arg(long, default_value_t = 10, value_name = "N")]
    top: usize,
    /// One flow for both directions (canonical key order).
    #[arg(long)]
    bidirectional: bool,
    /// Flow classes: `ports`, `ipclass`, or a TOML file of CIDR/protocol/port rules.
    #[arg(long, default_value = "ports", value_name = "ports|ipclass|FILE")]
    classes: String,
    /// Keep ground truth: the exact flow table and each stage's exact
    /// counts, so measured rates appear beside the estimates (the default).
    #[arg(long, overrides_with = "no_truth")]
    truth: bool,
    /// Skip all ground truth (memory then does not grow with the number of
    /// flows; rates that need truth are reported as null).
    #[arg(long, overrides_with = "truth")]
    no_truth: bool,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Write the report as JSON (schema_version 2) to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write one CSV per table into DIR.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// Write SVG trade-off and cost curves into DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Write heavy-flow and new-flow events as JSON lines to FILE.
    #[arg(long, value_name = "FILE")]
    events: Option<PathBuf>,
    /// Do not print the text report.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Args, Clone)]
struct PipelineArgs {
    /// Stages to run: any of heavy, new, selective (comma-separated), or none.
    #[arg(
        long,
        default_value = "heavy,new,selective",
        value_name = "LIST",
        help_heading = "Pipeline"
    )]
    stages: String,
    /// Worker threads for the shards (default: the machine's cores).
    #[arg(long, value_name = "N", help_heading = "Pipeline")]
    threads: Option<usize>,
    /// Shards; results depend on it, never on --threads.
    #[arg(long, default_value_t = 8, value_name = "S", help_heading = "Pipeline")]
    shards: usize,
    /// Records per batch sent to a worker.
    #[arg(
        long,
        default_value_t = 512,
        value_name = "N",
        help_heading = "Pipeline"
    )]
    batch: usize,

    /// Heavy-flow window: trace time (1s, 250ms) or packets (50000p).
    #[arg(
        long,
        default_value = "1s",
        value_name = "SPAN",
        help_heading = "Stage 1: heavy flows"
    )]
    window: String,
    /// Heavy-flow window of N packets (same as --window Np).
    #[arg(long, value_name = "N", help_heading = "Stage 1: heavy flows")]
    window_packets: Option<u64>,
    /// Report a flow when its estimate reaches THETA packets in a window.
    #[arg(long, default_value_t = 10, help_heading = "Stage 1: heavy flows")]
    theta: u64,
    /// Counters in all (split evenly across shards).
    #[arg(long, default_value_t = 1 << 22, value_name = "N", help_heading = "Stage 1: heavy flows")]
    cbf_counters: usize,
    /// Bits per counter: 4, 8 or 16.
    #[arg(
        long,
        default_value_t = 8,
        value_name = "BITS",
        help_heading = "Stage 1: heavy flows"
    )]
    cbf_width: u32,
    /// Hash functions (default: k_opt(theta), 003 Theorem 1, for --cbf-load).
    #[arg(long, value_name = "K", help_heading = "Stage 1: heavy flows")]
    cbf_k: Option<usize>,
    /// Packets per window the default k is tuned for (default: the packet
    /// window, else 2^20).
    #[arg(long, value_name = "N", help_heading = "Stage 1: heavy flows")]
    cbf_load: Option<u64>,
    /// Conservative update: only the minimal counters move.
    #[arg(long, help_heading = "Stage 1: heavy flows")]
    conservative: bool,

    /// Recycling-filter bits in all (split across shards; two-phase halves).
    #[arg(long, default_value_t = 1 << 23, value_name = "BITS", help_heading = "Stage 2: new flows")]
    rbf_bits: usize,
    /// Positions per key.
    #[arg(
        long,
        default_value_t = 4,
        value_name = "K",
        help_heading = "Stage 2: new flows"
    )]
    rbf_k: usize,
    /// Recycle policy: sigma:S (fraction below 1, or bits in all), n:N, time:T.
    #[arg(
        long,
        value_name = "POLICY",
        conflicts_with = "target_fpr",
        help_heading = "Stage 2: new flows"
    )]
    recycle: Option<String>,
    /// Size sigma so the model's average false-positive rate is at most F
    /// (the default policy, with F = 0.01).
    #[arg(long, value_name = "F", help_heading = "Stage 2: new flows")]
    target_fpr: Option<f64>,
    /// Two phases: active and frozen halves.
    #[arg(long, help_heading = "Stage 2: new flows")]
    two_phase: bool,
    /// Re-insert the key that triggered a recycle.
    #[arg(long, help_heading = "Stage 2: new flows")]
    retaining: bool,
    /// k distinct positions per key.
    #[arg(long, help_heading = "Stage 2: new flows")]
    non_colliding: bool,
    /// Ground truth: a key idle longer than this starts a new flow (default:
    /// only a key's first packet is new).
    #[arg(long, value_name = "DURATION", help_heading = "Stage 2: new flows")]
    horizon: Option<String>,

    /// Cache window (the set the directory summarises): time or packets.
    #[arg(
        long,
        default_value = "1s",
        value_name = "SPAN",
        help_heading = "Stage 3: selective query"
    )]
    cache_window: String,
    /// Query window that follows it (longer, same unit).
    #[arg(
        long,
        default_value = "5s",
        value_name = "SPAN",
        help_heading = "Stage 3: selective query"
    )]
    query_window: String,
    /// Directory filter: bf (Bloom) or cbf (counting, adds the posterior variant).
    #[arg(
        long,
        default_value = "bf",
        value_name = "bf|cbf",
        help_heading = "Stage 3: selective query"
    )]
    directory: String,
    /// Bits (counters for cbf) per element of the summarised set.
    #[arg(
        long,
        default_value_t = 10.0,
        value_name = "BPE",
        help_heading = "Stage 3: selective query"
    )]
    dir_bpe: f64,
    /// Hash functions of the directory (default: bpe ln 2).
    #[arg(long, value_name = "K", help_heading = "Stage 3: selective query")]
    dir_k: Option<usize>,
    /// What a query is: flow (each distinct flow once) or packet.
    #[arg(
        long,
        default_value = "flow",
        value_name = "flow|packet",
        help_heading = "Stage 3: selective query"
    )]
    query_unit: String,
    /// Fraction of queries checked against the exact set to estimate priors.
    #[arg(
        long,
        default_value_t = 0.01,
        value_name = "F",
        help_heading = "Stage 3: selective query"
    )]
    prior_sample: f64,
    /// Cost of a false negative relative to a false positive (a class's
    /// `alpha` in the --classes file overrides it).
    #[arg(long, default_value_t = 1.0, help_heading = "Stage 3: selective query")]
    alpha: f64,
    /// Sweep: alpha=1,2,5 | k=4,5,6 | bpe=10,20,30 | product=1,2,4,8 (repeatable).
    #[arg(
        long,
        value_name = "PARAM=LIST",
        help_heading = "Stage 3: selective query"
    )]
    sweep: Vec<String>,
}

#[derive(Args)]
struct BenchArgs {
    /// Trace files (default: the bundled trace; use a large one, e.g. from
    /// gen-trace, already in the page cache).
    traces: Vec<PathBuf>,
    /// Thread counts to run the pipeline at.
    #[arg(long, default_value = "1,2", value_name = "LIST")]
    threads_list: String,
    /// Rounds; each figure is the median over rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Flow classes.
    #[arg(long, default_value = "ports", value_name = "ports|ipclass|FILE")]
    classes: String,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Write the figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Pcap,
    PcapNs,
    Pcapng,
}

#[derive(Args)]
struct GenTraceArgs {
    /// Output file.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Distinct flows.
    #[arg(long, default_value_t = 10_000)]
    flows: u64,
    /// Packets in all (at least --flows).
    #[arg(long, default_value_t = 100_000)]
    packets: u64,
    /// Zipf exponent of flow sizes.
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Share of IPv6 flows.
    #[arg(long, default_value_t = 0.2)]
    ipv6_share: f64,
    /// Share of flows with an 802.1Q tag.
    #[arg(long, default_value_t = 0.1)]
    vlan_share: f64,
    /// Relative weights of TCP, UDP and ICMP flows.
    #[arg(long, default_value = "0.8,0.17,0.03", value_name = "TCP,UDP,ICMP")]
    proto_mix: String,
    /// Frame sizes: `realistic`, or `MIN-MAX` for uniform lengths in bytes.
    #[arg(long, default_value = "realistic")]
    sizes: String,
    /// Bytes stored per frame (0: whole frames).
    #[arg(long, default_value_t = 0)]
    snaplen: u32,
    /// Seconds over which arrivals are spread.
    #[arg(long, default_value_t = 60.0)]
    span: f64,
    /// Start time, seconds since the epoch.
    #[arg(long, default_value_t = 1_700_000_000.0)]
    start: f64,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output container.
    #[arg(long, value_enum, default_value = "pcap")]
    format: FormatArg,
}

/// Progress on stderr, only when stderr is a terminal.
struct Progress {
    bar: Option<ProgressBar>,
}

impl ReplayObserver for Progress {
    fn file_started(&mut self, path: &Path, size: Option<u64>) {
        if !std::io::stderr().is_terminal() {
            return;
        }
        let bar = match size {
            Some(s) if path.extension().is_none_or(|e| e != "gz" && e != "zst") => {
                ProgressBar::new(s)
            }
            _ => ProgressBar::new_spinner(),
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ({eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(path.display().to_string());
        self.bar = Some(bar);
    }

    fn progress(&mut self, _packets: u64, offset: u64) {
        if let Some(b) = &self.bar {
            b.set_position(offset);
        }
    }

    fn file_finished(&mut self, _file: &flowsieve::report::FileSummary) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// Builds the pipeline configuration from the command line; a bad value is
/// one line for stderr.
fn pipeline_config(
    p: &PipelineArgs,
    classifier: Classifier,
    truth: bool,
    count: Option<u64>,
    top: usize,
    bidirectional: bool,
) -> Result<(PipelineConfig, ResolvedNewFlow), String> {
    let mut cfg = PipelineConfig::new(classifier);
    cfg.replay.truth = truth;
    cfg.replay.max_packets = count;
    cfg.replay.top = top;
    cfg.replay.bidirectional = bidirectional;
    cfg.threads = p.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    cfg.shards = p.shards;
    cfg.batch = p.batch;
    let mut stages = StageSet {
        heavy: false,
        new_flows: false,
        selective: false,
    };
    for s in p.stages.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match s {
            "heavy" => stages.heavy = true,
            "new" | "new_flows" | "new-flows" => stages.new_flows = true,
            "selective" => stages.selective = true,
            "none" => {}
            "all" => stages = StageSet::ALL,
            other => {
                return Err(format!(
                "--stages: unknown stage '{other}' (expected heavy, new, selective, all or none)"
            ))
            }
        }
    }
    cfg.stages = stages;
    // Stage 1.
    let window: WindowSpec = match p.window_packets {
        Some(0) => return Err("--window-packets must be at least 1".into()),
        Some(n) => WindowSpec::Packets(n),
        None => p.window.parse().map_err(|e| format!("--window: {e}"))?,
    };
    let width = CounterWidth::from_bits(p.cbf_width)
        .ok_or_else(|| format!("--cbf-width must be 4, 8 or 16 (got {})", p.cbf_width))?;
    let load = p.cbf_load.unwrap_or(match window {
        WindowSpec::Packets(n) => n,
        WindowSpec::Time(_) => flowsieve::pipeline::DEFAULT_HEAVY_LOAD,
    });
    if p.theta == 0 {
        return Err("--theta must be at least 1".into());
    }
    cfg.heavy = HeavyConfig {
        window,
        theta: p.theta,
        counters: p.cbf_counters,
        width,
        k: match p.cbf_k {
            Some(0) => return Err("--cbf-k must be at least 1".into()),
            Some(k) => k.min(flowsieve::filter::MAX_K),
            None => flowsieve::pipeline::heavy::default_k(p.theta, p.cbf_counters, load),
        },
        conservative: p.conservative,
    };
    // Stage 2.
    let recycle = match (&p.recycle, p.target_fpr) {
        (Some(r), _) => r
            .parse::<RecycleSpec>()
            .map_err(|e| format!("--recycle: {e}"))?,
        (None, Some(f)) if f > 0.0 && f < 1.0 => RecycleSpec::TargetFpr(f),
        (None, Some(f)) => return Err(format!("--target-fpr must be in (0, 1) (got {f})")),
        (None, None) => RecycleSpec::TargetFpr(0.01),
    };
    if p.rbf_k == 0 {
        return Err("--rbf-k must be at least 1".into());
    }
    cfg.new_flows =
        NewFlowConfig {
            bits: p.rbf_bits,
            k: p.rbf_k,
            recycle,
            two_phase: p.two_phase,
            retaining: p.retaining,
            hashing: if p.non_colliding {
                Hashing::NonColliding
            } else {
                Hashing::Colliding
            },
            horizon_ns: match &p.horizon {
                None => None,
                Some(h) => Some(parse_duration_ns(h).filter(|&n| n > 0).ok_or_else(|| {
                    format!("--horizon: bad duration '{h}' (such as 60s, 500ms)")
                })?),
            },
        };
    // Stage 3.
    let s = &mut cfg.selective;
    s.cache_window = p
        .cache_window
        .parse()
        .map_err(|e| format!("--cache-window: {e}"))?;
    s.query_window = p
        .query_window
        .parse()
        .map_err(|e| format!("--query-window: {e}"))?;
    s.directory = match p.directory.as_str() {
        "bf" => DirectoryKind::Bloom,
        "cbf" => DirectoryKind::Counting,
        other => return Err(format!("--directory must be bf or cbf (got '{other}')")),
    };
    if !(p.dir_bpe.is_finite() && p.dir_bpe > 0.0 && p.dir_bpe <= 1e4) {
        return Err(format!(
            "--dir-bpe must be in (0, 10000] (got {})",
            p.dir_bpe
        ));
    }
    s.bpe = p.dir_bpe;
    s.k = match p.dir_k {
        Some(0) => return Err("--dir-k must be at least 1".into()),
        k => k,
    };
    s.query_unit = match p.query_unit.as_str() {
        "flow" => QueryUnit::Flow,
        "packet" => QueryUnit::Packet,
        other => {
            return Err(format!(
                "--query-unit must be flow or packet (got '{other}')"
            ))
        }
    };
    if !(0.0..=1.0).contains(&p.prior_sample) {
        return Err(format!(
            "--prior-sample must be in [0, 1] (got {})",
            p.prior_sample
        ));
    }
    s.prior_sample = p.prior_sample;
    if !(p.alpha.is_finite() && p.alpha > 0.0) {
        return Err(format!("--alpha must be positive (got {})", p.alpha));
    }
    s.alpha = cfg.replay.classifier.alphas(p.alpha);
    for sw in &p.sweep {
        let (param, list) = sw
            .split_once('=')
            .ok_or_else(|| format!("--sweep: expected PARAM=LIST, got '{sw}'"))?;
        let values: Vec<f64> = list
            .split(',')
            .map(|v| v.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|_| format!("--sweep {param}: bad number in '{list}'"))?;
        if values.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(format!("--sweep {param}: values must be positive numbers"));
        }
        match param {
            "alpha" => s.sweeps.alpha = values,
            "k" => {
                if values.iter().any(|v| v.fract() != 0.0 || *v > 32.0) {
                    return Err("--sweep k: values must be whole numbers from 1 to 32".into());
                }
                s.sweeps.k = values.iter().map(|v| *v as usize).collect();
            }
            "bpe" => s.sweeps.bpe = values,
            "product" => s.sweeps.product = values,
            other => {
                return Err(format!(
                    "--sweep: unknown parameter '{other}' (expected alpha, k, bpe or product)"
                ))
            }
        }
    }
    let resolved = cfg.validate().map_err(|e| e.to_string())?;
    Ok((cfg, resolved))
}

/// Writes events as JSON lines.
struct EventWriter {
    out: BufWriter<std::fs::File>,
    failed: Option<std::io::Error>,
    heavy: u64,
    new: u64,
}

impl EventWriter {
    fn line(&mut self, v: serde_json::Value) {
        if self.failed.is_none() {
            if let Err(e) = writeln!(self.out, "{v}") {
                self.failed = Some(e);
            }
        }
    }
}

impl PipelineSink for EventWriter {
    fn wants_heavy_flows(&self) -> bool {
        true
    }
    fn wants_new_flows(&self) -> bool {
        true
    }
    fn heavy_flow(&mut self, e: &HeavyEvent) {
        self.heavy += 1;
        self.line(serde_json::json!({
            "event": "heavy", "src": e.key.src().to_string(), "dst": e.key.dst().to_string(),
            "sport": e.key.sport(), "dport": e.key.dport(), "proto": e.key.proto(),
            "class": e.class, "time_s": e.time_ns as f64 * 1e-9, "estimate": e.estimate,
            "window": e.window,
        }));
    }
    fn new_flow(&mut self, e: &NewFlowEvent) {
        self.new += 1;
        self.line(serde_json::json!({
            "event": "new_flow", "src": e.key.src().to_string(), "dst": e.key.dst().to_string(),
            "sport": e.key.sport(), "dport": e.key.dport(), "proto": e.key.proto(),
            "class": e.class, "time_s": e.time_ns as f64 * 1e-9, "packet": e.seq,
        }));
    }
}

/// The classifier named on the command line and the traces to read (the
/// bundled one when none is given); a bad classifier is exit code 1.
fn classifier_and_traces(
    classes: &str,
    traces: &[PathBuf],
) -> Result<(Classifier, Vec<PathBuf>), i32> {
    let classifier = Classifier::from_spec(classes).map_err(|e| {
        eprintln!("flowsieve: error: {e}");
        exit_code::FAILURE
    })?;
    let traces = if traces.is_empty() {
        vec![default_trace()]
    } else {
        traces.to_vec()
    };
    Ok((classifier, traces))
}

fn run_replay(args: ReplayArgs) -> i32 {
    let (classifier, traces) = match classifier_and_traces(&args.classes, &args.traces) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let (cfg, resolved) = match pipeline_config(
        &args.pipeline,
        classifier,
        !args.no_truth,
        args.count,
        args.top,
        args.bidirectional,
    ) {
        Ok(c) => c,
        Err(e) => return usage_error(&e),
    };
    let mut writer = match &args.events {
        None => None,
        Some(path) => match std::fs::File::create(path) {
            Ok(f) => Some(EventWriter {
                out: BufWriter::new(f),
                failed: None,
                heavy: 0,
                new: 0,
            }),
            Err(e) => {
                eprintln!("flowsieve: error: {}: cannot create: {e}", path.display());
                return exit_code::FAILURE;
            }
        },
    };
    let mut no_events = NoEvents;
    let sink: &mut dyn PipelineSink = match writer.as_mut() {
        Some(w) => w,
        None => &mut no_events,
    };
    let report =
        match try_run_validated(&traces, &cfg, &resolved, &mut Progress { bar: None }, sink) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("flowsieve: error: {e}");
                return exit_code::FAILURE;
            }
        };
    for e in &report.replay.errors {
        eprintln!("flowsieve: error: {e}");
    }
    for w in &report.replay.warnings {
        eprintln!("flowsieve: warning: {w}");
    }
    if !args.quiet {
        print!("{}", report.render_text());
    }
    if let (Some(w), Some(path)) = (writer.as_mut(), &args.events) {
        let flushed = w.out.flush();
        if let Some(e) = w.failed.take().or(flushed.err()) {
            eprintln!(
                "flowsieve: error: {}: cannot write events: {e}",
                path.display()
            );
            return exit_code::FAILURE;
        }
        if !args.quiet {
            println!(
                "events: {} heavy, {} new-flow written to {}",
                w.heavy,
                w.new,
                path.display()
            );
        }
    }
    if let Some(path) = &args.json {
        let json = report.to_json();
        let written = if path.as_os_str() == "-" {
            writeln!(std::io::stdout(), "{json}")
        } else {
            std::fs::write(path, json + "\n")
        };
        if let Err(e) = written {
            eprintln!(
                "flowsieve: error: {}: cannot write JSON: {e}",
                path.display()
            );
            return exit_code::FAILURE;
        }
    }
    if let Some(dir) = &args.csv {
        if let Err(e) = report.write_csv(dir) {
            eprintln!("flowsieve: error: {}: cannot write CSV: {e}", dir.display());
            return exit_code::FAILURE;
        }
    }
    if let Some(dir) = &args.plot {
        if let Err(e) = report.write_plots(dir) {
            eprintln!("flowsieve: error: cannot write plots: {e}");
            return exit_code::FAILURE;
        }
    }
    report.exit_code()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn run_bench(args: BenchArgs) -> i32 {
    let (classifier, traces) = match classifier_and_traces(&args.classes, &args.traces) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let threads: Vec<usize> = match args
        .threads_list
        .split(',')
        .map(|t| t.trim().parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(t) if !t.is_empty() && t.iter().all(|&n| n > 0) => t,
        _ => return usage_error("--threads-list: expected positive numbers such as 1,2"),
    };
    let (base, resolved) =
        match pipeline_config(&args.pipeline, classifier.clone(), false, None, 10, false) {
            Ok(c) => c,
            Err(e) => return usage_error(&e),
        };
    let rounds = args.rounds.max(1);
    // (name, wall Mpps per round, CPU Mpps per round)
    let mut rows: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    let mut push = |name: String, wall: f64, cpu: f64| match rows.iter_mut().find(|r| r.0 == name) {
        Some(r) => {
            r.1.push(wall);
            r.2.push(cpu);
        }
        None => rows.push((name, vec![wall], vec![cpu])),
    };
    let mut packets = 0;
    for _ in 0..rounds {
        // The dissect+hash path alone: read, dissect, hash, classify.
        let mut cfg = base.replay.clone();
        cfg.truth = false;
        let (c0, t0) = (
            flowsieve::pipeline::cpu_seconds(),
            std::time::Instant::now(),
        );
        let s = flowsieve::replay::replay(&traces, &cfg, &mut flowsieve::replay::NoObserver);
        let (wall, cpu) = (
            t0.elapsed().as_secs_f64(),
            flowsieve::pipeline::cpu_seconds() - c0,
        );
        if !s.errors.is_empty() || s.could_not_open {
            for e in &s.errors {
                eprintln!("flowsieve: error: {e}");
            }
            return exit_code::FAILURE;
        }
        packets = s.trace.packets;
        push(
            "dissect+hash".into(),
            packets as f64 / wall / 1e6,
            packets as f64 / cpu.max(1e-9) / 1e6,
        );
        for &t in &threads {
            let mut cfg = base.clone();
            cfg.threads = t;
            let r = match try_run_validated(
                &traces,
                &cfg,
                &resolved,
                &mut NoObserverBin,
                &mut NoEvents,
            ) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("flowsieve: error: {e}");
                    return exit_code::FAILURE;
                }
            };
            push(
                format!("pipeline, {t} thread{}", if t == 1 { "" } else { "s" }),
                r.throughput.packets_per_sec / 1e6,
                r.throughput.packets_per_cpu_sec / 1e6,
            );
        }
    }
    let base_wall = median(rows[0].1.clone());
    let one = rows
        .iter()
        .find(|r| r.0 == "pipeline, 1 thread")
        .map(|r| median(r.1.clone()));
    println!(
        "flowsieve bench: {} packets, {} rounds (medians), truth off, stages {}",
        packets, rounds, args.pipeline.stages
    );
    println!(
        "  {:<22} {:>10} {:>16} {:>14} {:>12}",
        "path", "Mpps", "Mpps per CPU-s", "vs dissect", "vs 1 thread"
    );
    let mut out = Vec::new();
    for (name, wall, cpu) in &rows {
        let (w, c) = (median(wall.clone()), median(cpu.clone()));
        let scale = one.filter(|_| name.starts_with("pipeline")).map(|o| w / o);
        println!(
            "  {:<22} {:>10.2} {:>16.2} {:>13.2}x {:>12}",
            name,
            w,
            c,
            w / base_wall,
            scale.map_or("-".into(), |s| format!("{s:.2}x"))
        );
        out.push(serde_json::json!({
            "path": name, "mpps": w, "mpps_per_cpu_sec": c,
            "ratio_to_dissect_hash": w / base_wall, "scaling_vs_1_thread": scale,
            "rounds_mpps": wall,
        }));
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({ "packets": packets, "rounds": rounds, "results": out });
        if let Err(e) = std::fs::write(path, format!("{doc:#}\n")) {
            eprintln!(
                "flowsieve: error: {}: cannot write JSON: {e}",
                path.display()
            );
            return exit_code::FAILURE;
        }
    }
    exit_code::OK
}

/// Progress is not shown while benchmarking.
struct NoObserverBin;
impl ReplayObserver for NoObserverBin {}

fn parse_sizes(s: &str) -> Result<SizeModel, String> {
    if s == "realistic" {
        return Ok(SizeModel::Realistic);
    }
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("--sizes: expected `realistic` or MIN-MAX, got {s:?}"))?;
    let min = a
        .trim()
        .parse()
        .map_err(|_| format!("--sizes: bad minimum {a:?}"))?;
    let max = b
        .trim()
        .parse()
        .map_err(|_| format!("--sizes: bad maximum {b:?}"))?;
    Ok(SizeModel::Uniform { min, max })
}

fn run_gen_trace(args: GenTraceArgs) -> i32 {
    let sizes = match parse_sizes(&args.sizes) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("flowsieve: error: {e}");
            return exit_code::USAGE;
        }
    };
    let weights: Vec<f64> = args
        .proto_mix
        .split(',')
        .filter_map(|w| w.trim().parse().ok())
        .collect();
    let [tcp, udp, icmp] = weights[..] else {
        eprintln!(
            "flowsieve: error: --proto-mix: expected three numbers TCP,UDP,ICMP, got {:?}",
            args.proto_mix
        );
        return exit_code::USAGE;
    };
    let cfg = SynthConfig {
        flows: args.flows,
        packets: args.packets,
        zipf_exponent: args.zipf,
        ipv6_share: args.ipv6_share,
        vlan_share: args.vlan_share,
        proto_weights: [tcp, udp, icmp],
        sizes,
        snaplen: args.snaplen,
        start_secs: args.start,
        span_secs: args.span,
        seed: args.seed,
        format: match args.format {
            FormatArg::Pcap => OutputFormat::Pcap,
            FormatArg::PcapNs => OutputFormat::PcapNs,
            FormatArg::Pcapng => OutputFormat::PcapNg,
        },
    };
    let file = match std::fs::File::create(&args.output) {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "flowsieve: error: {}: cannot create: {e}",
                args.output.display()
            );
            return exit_code::FAILURE;
        }
    };
    match generate(&cfg, BufWriter::with_capacity(1 << 20, file)) {
        Ok(s) => {
            println!(
                "wrote {}: {} packets, {} flows (largest {} packets), {} wire bytes, {} captured bytes",
                args.output.display(),
                s.packets,
                s.flows,
                s.largest_flow,
                s.wire_bytes,
                s.captured_bytes
            );
            exit_code::OK
        }
        Err(e) => {
            eprintln!("flowsieve: error: {}: {e}", args.output.display());
            match e {
                SynthError::Config(_) => exit_code::USAGE,
                SynthError::Write(_) => exit_code::FAILURE,
            }
        }
    }
}

/// A bad model parameter: one line on stderr, exit code 2.
fn usage_error(msg: &str) -> i32 {
    eprintln!("flowsieve: error: {msg}");
    exit_code::USAGE
}

fn print_answer(json: bool, fields: serde_json::Value, text: &str) -> i32 {
    if json {
        println!("{fields}");
    } else {
        println!("{text}");
    }
    exit_code::OK
}

fn run_model(cmd: ModelCommand) -> i32 {
    use flowsieve::model::{bloom, threshold};
    match cmd {
        ModelCommand::Bloom(a) => {
            let (fpr, desc) = match (a.m_over_n, a.m, a.n) {
                (Some(x), _, _) => {
                    if !(x.is_finite() && x > 0.0) {
                        return usage_error(&format!(
                            "--m-over-n must be a positive number, got {x}"
                        ));
                    }
                    (bloom::fpr_approx(x, a.k), format!("m/n = {x}, k = {}", a.k))
                }
                (None, Some(m), Some(n)) => {
                    if m < u64::from(a.k) {
                        return usage_error(&format!("--m ({m}) must be at least --k ({})", a.k));
                    }
                    let f = if a.exact {
                        bloom::fpr_exact(m, n, a.k)
                    } else {
                        bloom::fpr_approx(m as f64 / n.max(1) as f64, a.k)
                    };
                    (
                        f,
                        format!(
                            "m = {m}, n = {n}, k = {}{}",
                            a.k,
                            if a.exact { " (exact)" } else { "" }
                        ),
                    )
                }
                _ => return usage_error("give --m-over-n, or --m and --n"),
            };
            print_answer(
                a.json,
                serde_json::json!({ "fpr": fpr }),
                &format!("Bloom filter, {desc}: false-positive rate {fpr:.6e}"),
            )
        }
        ModelCommand::Threshold(a) => {
            let Some(x) = a
                .m_over_n
                .or_else(|| a.m.zip(a.n).map(|(m, n)| m as f64 / n.max(1) as f64))
            else {
                return usage_error("give --m-over-n (or --exact --n N --m M)");
            };
            if !(x.is_finite() && x > 0.0) {
                return usage_error(&format!("--m-over-n must be a positive number, got {x}"));
            }
            if let (Some(m), Some(k)) = (a.m, a.k) {
                if m < u64::from(k) {
                    return usage_error(&format!("--m ({m}) must be at least --k ({k})"));
                }
            }
            let kappa_star = threshold::kappa_star(a.theta);
            let kappa_star_linear = threshold::kappa_star_linear(a.theta);
            let k_opt = threshold::k_opt(a.theta, x);
            let k = a.k.unwrap_or(k_opt);
            let fpr = threshold::fpr_poisson(a.theta, k, x);
            let mut fields = serde_json::json!({
                "kappa_star": kappa_star,
                "kappa_star_linear": kappa_star_linear,
                "k_opt": k_opt,
                "k": k,
                "fpr": fpr,
            });
            let mut text = format!(
                "count threshold theta = {}, m/n = {x}:\n  kappa* = {kappa_star:.4} (linear fit {kappa_star_linear:.4})\n  k_opt = {k_opt}\n  false-positive rate at k = {k}: {fpr:.6e} (Poisson, eq. 3)",
                a.theta
            );
            if a.exact {
                if let (Some(n), Some(m)) = (a.n, a.m) {
                    let exact = threshold::fpr_binomial(a.theta, k, n, m);
                    fields["fpr_exact"] = serde_json::json!(exact);
                    text.push_str(&format!(
                        "\n  exact (binomial, eq. 2, n = {n}, m = {m}): {exact:.6e}"
                    ));
                }
            }
            print_answer(a.json, fields, &text)
        }
        ModelCommand::Paradox(a) => run_paradox(a),
        ModelCommand::CbfPosterior(a) => run_cbf_posterior(a),
        ModelCommand::QueryOrder(a) => run_query_order(a),
        ModelCommand::Recycle(a) => run_recycle(a),
        ModelCommand::Compressed(a) => run_compressed(a),
    }
}

fn run_compressed(a: CompressedArgs) -> i32 {
    use flowsieve::model::compressed;
    for (name, x) in [
        ("--bits-per-element", a.bits_per_element),
        ("--max-m-over-n", a.max_m_over_n),
    ] {
        if let Err(e) = check_positive(name, x) {
            return usage_error(&e);
        }
    }
    let std = compressed::standard(a.bits_per_element);
    let Some(opt) = compressed::optimize(
        a.bits_per_element,
        a.max_m_over_n.max(a.bits_per_element),
        a.max_k,
    ) else {
        return usage_error(&format!(
            "no filter fits {} bits per element",
            a.bits_per_element
        ));
    };
    let fields = serde_json::json!({
        "m_over_n": opt.m_over_n,
        "k": opt.k,
        "fpr": opt.fpr,
        "transmitted_bits_per_element": opt.transmitted_bits_per_element,
        "standard": {
            "m_over_n": std.m_over_n,
            "k": std.k,
            "fpr": std.fpr,
            "transmitted_bits_per_element": std.transmitted_bits_per_element,
        },
    });
    let text = format!(
        "budget {} transmitted bits per element:\n  compressed: m/n = {:.3}, k = {}, false-positive rate {:.6e} ({:.3} bits sent)\n  standard:   m/n = {}, k = {}, false-positive rate {:.6e}",
        a.bits_per_element, opt.m_over_n, opt.k, opt.fpr, opt.transmitted_bits_per_element, std.m_over_n, std.k, std.fpr
    );
    print_answer(a.json, fields, &text)
}

fn run_recycle(a: RecycleArgs) -> i32 {
    use flowsieve::model::recycling::{self as rbf, Hashing, RecyclingModel};
    let half = if a.two_phase { a.m / 2 } else { a.m };
    if half < u64::from(a.k) {
        return usage_error(&format!(
            "--m ({}) leaves {half} bits per phase, fewer than --k ({})",
            a.m, a.k
        ));
    }
    let hashing = if a.non_colliding {
        Hashing::NonColliding
    } else {
        Hashing::Colliding
    };
    let variant = format!(
        "{}, {}, {}",
        if a.two_phase {
            "two-phase"
        } else {
            "one-phase"
        },
        if a.non_colliding {
            "non-colliding"
        } else {
            "colliding"
        },
        if a.retaining {
            "retaining"
        } else {
            "non-retaining"
        }
    );
    if let Some(sigma) = a.sigma {
        if sigma >= half {
            return usage_error(&format!(
                "--sigma ({sigma}) must be below the {half} bits of a phase"
            ));
        }
        let model = match RecyclingModel::new(half, a.k, sigma, hashing, a.retaining) {
            Ok(m) => m,
            Err(e) => return usage_error(&e.to_string()),
        };
        let fpr = if a.two_phase {
            model.two_phase_fpr()
        } else {
            model.one_phase_fpr()
        };
        let msgs = model.expected_messages();
        return print_answer(
            a.json,
            serde_json::json!({ "avg_fpr": fpr, "expected_messages": msgs }),
            &format!("{variant}, m = {} ({half} per phase), k = {}, sigma = {sigma}:\n  long-term average false-positive rate {fpr:.6e}\n  expected new messages per cycle {msgs:.2}", a.m, a.k),
        );
    }
    if let Some(n) = a.n_bounded {
        let (w, o, av) = (
            rbf::f_worst(half, a.k, n),
            rbf::f_oracle(half, a.k, n),
            rbf::f_average(half, a.k, n),
        );
        return print_answer(
            a.json,
            serde_json::json!({ "f_w": w, "f_o": o, "f_a": av }),
            &format!("N-bounded, m = {half}, k = {}, N = {n}:\n  f_w (worst case, eq. 1) {w:.6e}\n  f_o (oracle average, eq. 2) {o:.6e}\n  f_a (average-case bound, eq. 3) {av:.6e}", a.k),
        );
    }
    if let Some(target) = a.target_fpr {
        if !(target > 0.0 && target < 1.0) {
            return usage_error(&format!(
                "--target-fpr must be a probability in (0, 1), got {target}"
            ));
        }
        let sized = rbf::sigma_for_target(half, a.k, hashing, a.retaining, a.two_phase, target);
        let (n_worst, n_avg) = rbf::n_for_target(half, a.k, target, 50 * half);
        let (sigma, msgs) = match &sized {
            Some(model) => (Some(model.params().2), Some(model.expected_messages())),
            None => (None, None),
        };
        let text = format!(
            "{variant}, m = {} ({half} per phase), k = {}, target {target}:\n  sigma = {}\n  expected new messages per cycle {}\n  N-bounded: n_worst = {}, n_avg = {}",
            a.m,
            a.k,
            sigma.map_or("none".into(), |s| s.to_string()),
            msgs.map_or("-".into(), |m| format!("{m:.2}")),
            n_worst.map_or("none".into(), |n| n.to_string()),
            n_avg.map_or("none".into(), |n| n.to_string()),
        );
        return print_answer(
            a.json,
            serde_json::json!({ "sigma": sigma, "expected_messages": msgs, "n_worst": n_worst, "n_avg": n_avg }),
            &text,
        );
    }
    usage_error("give --sigma S, --n-bounded N or --target-fpr F")
}

fn run_paradox(a: ParadoxArgs) -> i32 {
    use flowsieve::model::paradox;
    if let Err(e) = check_positive("--alpha", a.alpha) {
        return usage_error(&e);
    }
    match (a.m_over_n, a.prior) {
        (Some(x), _) => {
            if let Err(e) = check_positive("--m-over-n", x) {
                return usage_error(&e);
            }
            let t = paradox::prior_threshold(a.alpha, x);
            print_answer(
                a.json,
                serde_json::json!({ "prior_threshold": t }),
                &format!("alpha = {}, m/n = {x}: the Bloom paradox holds for priors below {t:.6e} (Theorem 1)", a.alpha),
            )
        }
        (None, Some(p)) => {
            if let Err(e) = check_probability("--prior", p) {
                return usage_error(&e);
            }
            let b = paradox::min_bits_per_element(a.alpha, p);
            print_answer(
                a.json,
                serde_json::json!({ "min_bits_per_element": b }),
                &format!("alpha = {}, prior = {p}: at least {b:.3} bits per element escape the Bloom paradox", a.alpha),
            )
        }
        (None, None) => usage_error("give --m-over-n or --prior"),
    }
}

fn run_cbf_posterior(a: CbfPosteriorArgs) -> i32 {
    use flowsieve::model::paradox;
    let k = a.counters.len() as u32;
    if k == 0 {
        return usage_error("--counters needs at least one value (k >= 1)");
    }
    if let Err(e) = check_probability("--prior", a.prior) {
        return usage_error(&e);
    }
    if a.m < u64::from(k) {
        return usage_error(&format!("--m ({}) must be at least k ({k})", a.m));
    }
    if a.n == 0 {
        return usage_error("--n must be at least 1");
    }
    let posterior = paradox::cbf_posterior(&a.counters, a.prior, a.m, a.n);
    let mut fields = serde_json::json!({ "posterior": posterior });
    let mut text = format!(
        "Pr(x in S | counters {:?}) = {posterior:.6e} (Theorem 2)",
        a.counters
    );
    if let Some(alpha) = a.alpha {
        if let Err(e) = check_positive("--alpha", alpha) {
            return usage_error(&e);
        }
        let decision = paradox::decide(posterior, alpha);
        let min_product = paradox::min_counter_product(k, a.prior, alpha, a.m, a.n);
        fields["decision"] = serde_json::json!(decision);
        fields["min_product"] = serde_json::json!(min_product);
        text.push_str(&format!(
            "\n  threshold 1/(alpha+1) = {:.6e}: answer {} (Theorem 4)\n  minimal counter product: {min_product}",
            1.0 / (alpha + 1.0),
            if decision { "positive" } else { "negative" }
        ));
    }
    print_answer(a.json, fields, &text)
}

fn run_query_order(a: QueryOrderArgs) -> i32 {
    use flowsieve::model::paradox::{self, QueryTarget};
    if a.probs.len() != a.costs.len() {
        return usage_error(&format!(
            "--probs has {} values but --costs has {}",
            a.probs.len(),
            a.costs.len()
        ));
    }
    for p in &a.probs {
        if let Err(e) = check_probability("--probs", *p) {
            return usage_error(&e);
        }
    }
    for c in a.costs.iter().chain(std::iter::once(&a.special_cost)) {
        if let Err(e) = check_positive("query costs", *c) {
            return usage_error(&e);
        }
    }
    let order = paradox::query_order(&a.probs, &a.costs, a.special_cost);
    let cost = paradox::expected_query_cost(&order, &a.probs, &a.costs, a.special_cost);
    let json_order: Vec<serde_json::Value> = order
        .iter()
        .map(|t| match t {
            QueryTarget::Proxy(i) => serde_json::json!(i),
            QueryTarget::Special => serde_json::json!("special"),
        })
        .collect();
    let text_order: Vec<String> = order
        .iter()
        .map(|t| match t {
            QueryTarget::Proxy(i) => format!("proxy {i}"),
            QueryTarget::Special => "special".to_string(),
        })
        .collect();
    print_answer(
        a.json,
        serde_json::json!({ "order": json_order, "expected_cost": cost }),
        &format!(
            "query order: {} (Theorem 6)\nexpected cost: {cost:.6}",
            text_order.join(" -> ")
        ),
    )
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        None => run_replay(cli.replay),
        Some(Command::Replay(a)) => run_replay(*a),
        Some(Command::GenTrace(a)) => run_gen_trace(a),
        Some(Command::Bench(a)) => run_bench(*a),
        Some(Command::Model(m)) => run_model(m),
    };
    ExitCode::from(code as u8)
}
