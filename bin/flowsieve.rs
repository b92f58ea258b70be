//! `flowsieve`: the command-line front end. It parses flags, calls the
//! library, and renders what the library returns; all logic lives in the
//! `flowsieve` crate.

use clap::{Args, Parser, Subcommand, ValueEnum};
use flowsieve::class::Classifier;
use flowsieve::replay::{replay, ReplayConfig, ReplayObserver};
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
    Replay(ReplayArgs),
    /// Write a seeded synthetic trace with Zipf-distributed flow sizes.
    GenTrace(GenTraceArgs),
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
    /// Skip the exact flow table (saves memory; no flow counts or top flows).
    #[arg(long)]
    no_truth: bool,
    /// Write the summary as JSON (schema_version 1) to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Do not print the text summary.
    #[arg(short, long)]
    quiet: bool,
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

fn run_replay(args: ReplayArgs) -> i32 {
    let classifier = match Classifier::from_spec(&args.classes) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("flowsieve: error: {e}");
            return exit_code::FAILURE;
        }
    };
    let traces = if args.traces.is_empty() {
        vec![default_trace()]
    } else {
        args.traces
    };
    let cfg = ReplayConfig {
        bidirectional: args.bidirectional,
        truth: !args.no_truth,
        max_packets: args.count,
        top: args.top,
        classifier,
    };
    let summary = replay(&traces, &cfg, &mut Progress { bar: None });
    for e in &summary.errors {
        eprintln!("flowsieve: error: {e}");
    }
    for w in &summary.warnings {
        eprintln!("flowsieve: warning: {w}");
    }
    if !args.quiet {
        print!("{}", summary.render_text());
    }
    if let Some(path) = &args.json {
        let json = summary.to_json();
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
    summary.exit_code()
}

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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        None => run_replay(cli.replay),
        Some(Command::Replay(a)) => run_replay(a),
        Some(Command::GenTrace(a)) => run_gen_trace(a),
    };
    ExitCode::from(code as u8)
}
