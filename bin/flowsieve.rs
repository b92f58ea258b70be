//! `flowsieve`: the command-line front end. It parses flags into the
//! library's configuration types, runs the library, renders what it
//! returns, and maps outcomes to exit codes. Every default, parser,
//! validator and model lives in the `flowsieve` crate.

/// `eprintln!` that loses its line when standard error cannot be written,
/// instead of panicking. With both streams piped into a reader that went
/// away (`flowsieve ... 2>&1 | head -0`) the one error line has nowhere to
/// go, and std's `eprintln!` turned that into a panic (exit 101) in place
/// of the run's own exit code. Defined before the modules, so that it
/// stands in for std's in all of them.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod live_cmd;
mod network_cmd;
mod progress;

use clap::{Args, Parser, Subcommand};
use flowsieve::class::Classifier;
use flowsieve::filter::{BitLayout, CounterLayout, CounterWidth};
use flowsieve::hash::HashKey;
use flowsieve::ingest::{DurationNs, ReadMode, TraceFilter, TraceFilterError};
use flowsieve::model::query::{
    BloomQuery, CbfPosteriorQuery, CompressedQuery, ModelError, ParadoxQuery, QueryOrderQuery,
    RecycleQuery, ThresholdQuery,
};
use flowsieve::model::recycling::Hashing;
use flowsieve::pages::HugePageChoice;
use flowsieve::pipeline::{
    ByteSize, DirectoryKind, FileSource, JsonLinesSink, NoEvents, PipelineConfig, PipelineSink,
    QueryUnit, RecycleSpec, StageList, SweepSpec, ValidatedConfig, WindowSpec, defaults, run,
};
use flowsieve::report::Outcome;
use flowsieve::report::writes_stdout;
use flowsieve::synth::{
    OutputFormat, ProtoMix, SizeModel, SynthConfig, SynthError, generate_with_progress,
};
use indicatif::{ProgressBar, ProgressStyle};
use progress::Progress;
use serde::Serialize;
use std::fmt::Display;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit codes (documented in the README and `--help`).
pub(crate) mod exit {
    pub const OK: u8 = 0;
    pub const FAILURE: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const DAMAGED_INPUT: u8 = 3;
    pub const ANOMALIES: u8 = 4;
    /// Ctrl-C or SIGTERM stopped a long job (gen-trace, bench) before it
    /// finished, and nothing was written under the output's name; or
    /// stopped a replay, whose report covers what it read, or a probe,
    /// whose published windows do.
    pub const INTERRUPTED: u8 = 130;
}

/// Registers SIGINT, SIGTERM and SIGHUP (the last unless it is ignored, as
/// under nohup): the process exits with 130 on a signal once the returned
/// flag is set. With `graceful`, the first signal only sets the flag, so
/// that a long job stops at its next check instead of dying mid-write, and
/// a later one (100 ms or more after the first, see [`SAME_INTERRUPT_NS`])
/// exits at once, in case a check is far away; without, the flag starts
/// set, so the first signal exits at once. So does any signal
/// once the job has set the flag itself (a live capture that ended by
/// `--duration`, waiting on its exporter).
///
/// The exit says so on one line ([`interrupted_line`]): a replay stopped
/// by `timeout` or Ctrl-C used to end with exit 130 and nothing on stderr,
/// so a log showed an empty report and no reason.
fn on_interrupt(graceful: bool) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(!graceful));
    // When the first signal came (CLOCK_MONOTONIC nanoseconds; 0: none
    // yet), shared by the three signals.
    let first_ns = std::sync::Arc::new(AtomicU64::new(0));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        // A hang-up (the terminal or ssh session went away) stops a job as
        // Ctrl-C does, so a live capture still writes its report, as
        // tcpdump does; but under nohup, which set SIGHUP to be ignored,
        // it stays ignored (tcpdump's "cooperate with nohup").
        if sig == signal_hook::consts::SIGHUP && !disposition_is_default(sig) {
            continue;
        }
        let line = interrupted_line(sig, graceful);
        let delivering = delivering_line(sig);
        let flag = std::sync::Arc::clone(&stop);
        let first_ns = std::sync::Arc::clone(&first_ns);
        // SAFETY: the action runs in the signal handler and does only
        // what is async-signal-safe there: atomic loads and stores,
        // clock_gettime(2), write(2) of a static buffer and _exit(2) (what
        // signal_hook's own conditional shutdown does, with the write
        // before it).
        let _ = unsafe {
            signal_hook::low_level::register(sig, move || {
                let now = monotonic_ns();
                if !flag.load(Ordering::SeqCst) {
                    // The first: the job stops at its next check.
                    FIRST_SIGNAL.store(sig, Ordering::SeqCst);
                    first_ns.store(now.max(1), Ordering::SeqCst);
                    flag.store(true, Ordering::SeqCst);
                    return;
                }
                let first = first_ns.load(Ordering::SeqCst);
                if first != 0 && now.saturating_sub(first) < SAME_INTERRUPT_NS {
                    // The same request again (see SAME_INTERRUPT_NS).
                    return;
                }
                let line = if DELIVERING.load(Ordering::SeqCst) {
                    delivering
                } else {
                    line
                };
                let _ = libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), line.len());
                signal_hook::low_level::exit(i32::from(exit::INTERRUPTED));
            })
        };
    }
    stop
}

/// Set while a probe waits for its exporter to deliver the last digests
/// (`network_cmd::finish_export`): a signal then ends the process with
/// [`delivering_line`], which says what is lost, instead of the plain
/// "while stopping" line. A probe is not stopping then but delivering,
/// and what the user gives up by ending it is the digests still queued.
static DELIVERING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks the start of a probe's final delivery (see [`DELIVERING`]).
fn delivering_started() {
    DELIVERING.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The signal that set a graceful job's stop flag ([`on_interrupt`]); 0
/// before any.
static FIRST_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Whether a signal set a graceful job's stop flag (the job may set it
/// itself, to make the next signal end it at once).
fn interrupt_came() -> bool {
    FIRST_SIGNAL.load(std::sync::atomic::Ordering::SeqCst) != 0
}

/// The name of the signal that stopped a graceful job, for its last line.
fn first_signal_name() -> &'static str {
    match FIRST_SIGNAL.load(std::sync::atomic::Ordering::SeqCst) {
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGHUP => "SIGHUP",
        _ => "SIGTERM",
    }
}

/// The flag SIGUSR1 sets: a request for one progress line, as `kill -USR1`
/// asks `dd` and tcpdump for their counts. Registered once, before a
/// command runs, for every command but `live` (which registers its own
/// for its interval report), so that SIGUSR1, whose default action ends
/// a process, never ends one: a replay, `probe`, `gen-trace`, `collect`,
/// `inject`, `bench` and `reproduce` (these two from a thread of their
/// own) answer it with a line, the others ignore it.
fn progress_requests() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    static FLAG: std::sync::OnceLock<std::sync::Arc<std::sync::atomic::AtomicBool>> =
        std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let _ =
            signal_hook::flag::register(signal_hook::consts::SIGUSR1, std::sync::Arc::clone(&flag));
        flag
    })
    .clone()
}

/// The line a replay ends with when an interrupt came while a read of
/// `file` waited for data past [`progress::STALL`].
fn stalled_read_line(signal: &str, file: &str) -> String {
    stalled_line(signal, file, "with no report")
}

/// [`stalled_read_line`] for a probe, which also publishes nothing more:
/// the windows it had not published yet, the last one's too, are not.
fn stalled_probe_line(signal: &str, file: &str) -> String {
    stalled_line(signal, file, "with no report, and nothing more published")
}

fn stalled_line(signal: &str, file: &str, left: &str) -> String {
    format!(
        "interrupted by {signal} while reading {file}, which gave no data for {} s: stopped at once, {left}",
        progress::STALL.as_secs()
    )
}

/// Signals this close after the first are the same request, not a second
/// one that ends a graceful job at once. GNU `timeout` sends its signal to
/// the process and then to its process group, so the process often gets
/// it twice within microseconds: taken as a second Ctrl-C, `timeout 60
/// flowsieve gen-trace -o F ...` ended at once and left its temporary
/// file behind, every time. No one presses Ctrl-C twice within 100 ms.
const SAME_INTERRUPT_NS: u64 = 100_000_000;

/// CLOCK_MONOTONIC in nanoseconds (async-signal-safe: clock_gettime(2)).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, which lives
    // on this stack frame; it is on POSIX's async-signal-safe list.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The line an interrupt that ends the process at once writes: the first
/// signal for a command without a graceful stop; for one with, a signal
/// that comes while it stops (the second, as the first makes the job stop
/// at its next check and say so itself, or any during a live probe's
/// final flush). Static, as a signal handler can only write a ready
/// buffer.
fn interrupted_line(sig: i32, graceful: bool) -> &'static [u8] {
    use signal_hook::consts::{SIGHUP, SIGINT};
    match (sig, graceful) {
        (SIGINT, false) => b"flowsieve: error: interrupted by SIGINT before the run finished\n",
        (SIGHUP, false) => b"flowsieve: error: interrupted by SIGHUP before the run finished\n",
        (_, false) => b"flowsieve: error: interrupted by SIGTERM before the run finished\n",
        (SIGINT, true) => {
            b"flowsieve: error: interrupted by SIGINT while stopping: stopped at once\n"
        }
        (SIGHUP, true) => {
            b"flowsieve: error: interrupted by SIGHUP while stopping: stopped at once\n"
        }
        (_, true) => b"flowsieve: error: interrupted by SIGTERM while stopping: stopped at once\n",
    }
}

/// The line an interrupt during a probe's final delivery ends the process
/// with (see [`DELIVERING`]). Static, as [`interrupted_line`]'s are.
fn delivering_line(sig: i32) -> &'static [u8] {
    use signal_hook::consts::{SIGHUP, SIGINT};
    match sig {
        SIGINT => b"flowsieve: error: interrupted by SIGINT while delivering the probe's last digests: stopped at once, and those not yet delivered are lost\n",
        SIGHUP => b"flowsieve: error: interrupted by SIGHUP while delivering the probe's last digests: stopped at once, and those not yet delivered are lost\n",
        _ => b"flowsieve: error: interrupted by SIGTERM while delivering the probe's last digests: stopped at once, and those not yet delivered are lost\n",
    }
}

/// Whether `sig` still has its default action (not ignored, as nohup
/// leaves SIGHUP, nor caught). Where that cannot be read, it is taken as
/// not default, so a signal is left as the process found it.
fn disposition_is_default(sig: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current
    // one into `old`, a zeroed (valid) struct on this stack frame.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_DFL
    }
}

/// A progress bar on stderr for `total` units, drawn only when stderr is a
/// terminal (indicatif hides it otherwise, so logs and tests see nothing).
fn progress_bar(total: u64, unit: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(&format!(
        "{{bar:40}} {{pos}}/{{len}} {unit}  {{elapsed}} (eta {{eta}})"
    )) {
        bar.set_style(style);
    }
    bar
}

fn outcome_code(o: Outcome) -> u8 {
    match o {
        Outcome::Clean => exit::OK,
        Outcome::CouldNotOpen => exit::FAILURE,
        Outcome::DamagedInput => exit::DAMAGED_INPUT,
        Outcome::Anomalies => exit::ANOMALIES,
    }
}

/// What went wrong in this run, for the one error line `main` prints
/// when the command returns ([`print_error_line`]).
///
/// Collected rather than printed at once because one run can fail in
/// more than one place: the text report to a closed standard output, then
/// the JSON report to a full disk, then the line saying where the events
/// went. Each used to print its own `error:` line; now the user gets one
/// line that names every failure, in the order they happened. A command
/// that fails returns at once, so nothing waits behind a long job. Not a
/// hot path: a run fails a handful of times at most.
///
/// A report's own errors (a damaged file, a live capture's fatal error)
/// join the same line, after the report: printed with the report, they
/// made a second line when an output then failed.
static ERRORS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Records `msg` for the run's one error line, then returns the exit code.
/// The same failure twice (standard output refusing the report, then the
/// line after it; a live capture's error, then the report it is in) is
/// named once.
fn fail(code: u8, msg: impl Display) -> u8 {
    record_error(msg.to_string());
    code
}

fn record_error(msg: String) {
    match ERRORS.lock() {
        Ok(mut errors) => {
            if !errors.contains(&msg) {
                errors.push(msg);
            }
        }
        // Only a panic while the list was held could poison it, and none
        // can: print the line at once rather than lose it.
        Err(_) => eprintln!("flowsieve: error: {msg}"),
    }
}

/// Prints the failures [`fail`] recorded as one line on stderr, joined by
/// `; `, and forgets them.
fn print_error_line() {
    let errors = ERRORS
        .lock()
        .map(|mut e| std::mem::take(&mut *e))
        .unwrap_or_default();
    if !errors.is_empty() {
        eprintln!("flowsieve: error: {}", errors.join("; "));
    }
}

/// Writes `text` to standard output. `print!` panics when it cannot
/// write, which a reader that went away (`flowsieve model ... | head -0`,
/// a `bench` piped into `head`) made happen; here that ends the run with
/// one line and exit 1, as `gen-trace -o -` and `--events -` do.
fn print_out(text: impl Display) -> Result<(), u8> {
    write_stdout(text).map_err(|e| fail(exit::FAILURE, stdout_failed(e)))
}

/// Writes `text` to standard output and flushes it.
fn write_stdout(text: impl Display) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    write!(out, "{text}").and_then(|()| out.flush())
}

/// The one line for an error writing standard output.
fn stdout_failed(e: std::io::Error) -> String {
    format!("standard output: cannot write: {e}")
}

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
        4 input anomalies (every record read, some odd: see the warnings), or for `reproduce` a row that deviates without a known reason; \
        130 interrupted (Ctrl-C) before a long job finished.",
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
    /// Read traces and run the pipeline's stages over them.
    Replay(Box<ReplayArgs>),
    /// Write a seeded synthetic trace with Zipf-distributed flow sizes.
    GenTrace(GenTraceArgs),
    /// Measure throughput: the dissect+hash path alone, then the whole
    /// pipeline (truth off) at each thread count, side by side, repeated.
    Bench(Box<BenchArgs>),
    /// Evaluate the analytical models from the papers.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Rerun the papers' tables and figures: printed value, model,
    /// simulation, deviation and verdict per row; CSV, SVG and PNG per
    /// figure.
    Reproduce(ReproduceArgs),
    /// Capture from network interfaces (Linux, AF_PACKET TPACKET_V3 rings)
    /// and run the same pipeline and report as replay, with interval
    /// reports, drop accounting and Prometheus metrics.
    Live(Box<live_cmd::LiveArgs>),
    /// Send a trace's frames onto an interface, paced (the project's own
    /// tcpreplay, for testing live capture).
    Inject(live_cmd::InjectArgs),
    /// Replay traces as one probe of a network: run the pipeline locally
    /// and publish each window's digests to NATS JetStream.
    Probe(Box<network_cmd::ProbeArgs>),
    /// Merge the probes' digests for a set of shards, exactly once per
    /// probe and window, and write the merged windows.
    Collect(Box<network_cmd::CollectArgs>),
    /// Read the merged network-wide report.
    Results(Box<network_cmd::ResultsArgs>),
}

#[derive(Args)]
struct ReproduceArgs {
    /// An experiment (such as 000-table2), a paper (000 .. 004), or `all`.
    #[arg(value_name = "EXPERIMENT|PAPER|all")]
    experiment: String,
    /// Where the CSV files and plots go (created if missing).
    #[arg(long, value_name = "DIR", default_value = "reproduce-out")]
    out: PathBuf,
    /// Smaller simulations (the tests' setting; all of them in under a minute).
    #[arg(long)]
    quick: bool,
    /// The shared captures folder for the trace experiment (default:
    /// ../shared/traces when it exists); refused if it holds none of the
    /// captures that experiment reads.
    #[arg(long, value_name = "DIR")]
    traces: Option<PathBuf>,
    /// Seed of every simulation.
    #[arg(long, default_value_t = 1, value_name = "N")]
    seed: u64,
    /// Print every row, not only those that do not simply agree.
    #[arg(long)]
    all_rows: bool,
    /// Do not draw a progress bar.
    #[arg(short, long)]
    quiet: bool,
}

fn run_reproduce(a: ReproduceArgs) -> u8 {
    use flowsieve::reproduce;
    let Some(chosen) = reproduce::select(&a.experiment) else {
        let names: Vec<&str> = reproduce::experiments().iter().map(|e| e.id).collect();
        return fail(
            exit::USAGE,
            format!(
                "unknown experiment {:?}: one of {}, a paper 000..004, or all",
                a.experiment,
                names.join(", ")
            ),
        );
    };
    let traces = match a.traces {
        Some(t) if !t.is_dir() => {
            return fail(
                exit::USAGE,
                format!("--traces {}: not a directory", t.display()),
            );
        }
        // A folder given by name that holds none of the captures is a
        // wrong path, not a partial set: the trace experiment would run
        // on its synthetic trace alone and say so only in its notes.
        Some(t)
            if chosen.iter().any(|e| e.reads_traces())
                && reproduce::trace_captures()
                    .iter()
                    .all(|c| !t.join(c).is_file()) =>
        {
            return fail(
                exit::USAGE,
                format!(
                    "--traces {}: holds none of the captures {} reads ({})",
                    t.display(),
                    reproduce::TRACE_EXPERIMENT,
                    reproduce::trace_captures().join(", ")
                ),
            );
        }
        Some(t) => Some(t),
        None => {
            let guess = Path::new("../shared/traces");
            guess.is_dir().then(|| guess.to_path_buf())
        }
    };
    if let Err(code) = check_output_dirs(&[(Some(&a.out), "tables and figures")], &[]) {
        return code;
    }
    if let Err(e) = std::fs::create_dir_all(&a.out) {
        return fail(exit::FAILURE, format!("{}: {e}", a.out.display()));
    }
    let opts = reproduce::Options {
        quick: a.quick,
        seed: a.seed,
        traces,
    };
    let steps = 1000u64;
    let bar = (!a.quiet && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(steps * chosen.len() as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg:18} [{bar:30}] {percent}% ({elapsed}, eta {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    });
    let at = std::sync::Arc::new(ReproduceProgress {
        experiment: std::sync::atomic::AtomicUsize::new(0),
        fraction_bits: std::sync::atomic::AtomicU64::new(0),
        ids: chosen.iter().map(|e| e.id).collect(),
        started: std::time::Instant::now(),
    });
    answer_progress(bar.clone(), {
        let at = std::sync::Arc::clone(&at);
        move || at.line()
    });
    let mut deviations = 0;
    for (i, e) in chosen.iter().enumerate() {
        if let Some(b) = &bar {
            b.set_message(e.id);
        }
        at.experiment.store(i, std::sync::atomic::Ordering::Relaxed);
        at.fraction_bits
            .store(0, std::sync::atomic::Ordering::Relaxed);
        let base = steps * i as u64;
        let mut tick = |f: f64| {
            let f = f.clamp(0.0, 1.0);
            at.fraction_bits
                .store(f.to_bits(), std::sync::atomic::Ordering::Relaxed);
            if let Some(b) = &bar {
                b.set_position(base + (f * steps as f64) as u64);
            }
        };
        let outcome = (e.run)(&opts, &mut tick);
        let text = format!("{}\n", outcome.to_text(a.all_rows));
        let printed = match &bar {
            Some(b) => b.suspend(|| print_out(&text)),
            None => print_out(&text),
        };
        if let Err(code) = printed {
            return code;
        }
        deviations += outcome.counts().2;
        if let Err(err) = outcome.write(&a.out) {
            return fail(exit::FAILURE, err);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Err(code) = print_out(format_args!(
        "wrote {} (one CSV of rows per experiment; CSV, SVG and PNG per figure)\n",
        a.out.display()
    )) {
        return code;
    }
    if deviations > 0 {
        eprintln!(
            "flowsieve: warning: {deviations} row(s) deviate without a known reason (see DEVIATES above)"
        );
        exit::ANOMALIES
    } else {
        exit::OK
    }
}

#[derive(Args)]
struct ReplayArgs {
    /// Trace files (pcap, pcapng, optionally .gz/.zst), read in order.
    /// Default: the bundled trace.
    traces: Vec<PathBuf>,
    #[command(flatten)]
    read: ReadArg,
    #[command(flatten)]
    run: RunArgs,
    /// Write heavy-flow and new-flow events as JSON lines to FILE (`-` for
    /// stdout, which then carries them alone, without the text report).
    /// Refused if FILE is an input trace or holds a capture.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    events: Option<PathBuf>,
    /// Memory-map plain trace files (the default): packets are lent from
    /// the map, with no copy. A file truncated while it is read ends in a
    /// one-line error, as with --no-mmap.
    #[arg(long, overrides_with = "no_mmap", help_heading = "Input")]
    mmap: bool,
    /// Read plain trace files through a buffer instead of mapping them
    /// (one copy by the kernel; for filesystems where mapping is slow).
    #[arg(long, help_heading = "Input")]
    no_mmap: bool,
    /// Helper threads that dissect, classify and hash a mapped classic
    /// pcap or pcapng file ahead of the reader, each taking 1 MiB shares
    /// (0: none). Can pay only when the reader sets the pace, with more
    /// cores than the workers use; on two cores it made runs slower.
    /// Compressed files are read by the reader alone. No figure changes,
    /// only the work.
    #[arg(long, default_value_t = 0, value_name = "N", help_heading = "Input",
          value_parser = clap::value_parser!(u16).range(0..=flowsieve::ahead::MAX_DISSECT_THREADS as i64))]
    dissect_threads: u16,
    #[command(flatten)]
    filter: TraceFilterArg,
}

/// `-f EXPR` of the commands that read traces (`replay`, `probe`).
#[derive(Args)]
struct TraceFilterArg {
    /// Keep only the records this tcpdump filter expression keeps, as
    /// `tcpdump -r FILE EXPR` keeps them (libpcap's own compiler and
    /// interpreter, loaded at run time: apt-get install libpcap0.8). The
    /// rest are counted as filtered out and are in no other figure, and -c
    /// counts the records kept.
    #[arg(
        short = 'f',
        long = "filter",
        value_name = "EXPR",
        help_heading = "Input"
    )]
    expression: Option<String>,
    /// Read the filter expression from FILE, as `tcpdump -F FILE` does
    /// (its lines joined; `#` starts a comment to the end of the line).
    #[arg(
        short = 'F',
        long = "filter-file",
        value_name = "FILE",
        conflicts_with = "expression",
        help_heading = "Input"
    )]
    file: Option<PathBuf>,
}

impl TraceFilterArg {
    /// The expression given: `-f`'s, or the one `-F` names.
    fn given(&self) -> Result<Option<String>, u8> {
        match &self.file {
            Some(path) => filter_file_expression(path).map(Some),
            None => Ok(self.expression.clone()),
        }
    }

    /// The flag that gave the expression, for messages.
    fn flag(&self) -> &'static str {
        if self.file.is_some() { "-F FILE" } else { "-f" }
    }

    /// Where the expression came from, as an error names it: `-f`, or
    /// `-F` with its file.
    fn source(&self) -> String {
        match &self.file {
            Some(path) => format!("-F {}", path.display()),
            None => "-f".into(),
        }
    }
}

/// The longest filter file read (`-F`): far past any expression, and a
/// bound on what a wrong name (`/dev/zero`, a trace) costs.
const MAX_FILTER_FILE_BYTES: u64 = 1 << 20;

/// The expression in a filter file (`-F FILE`), as tcpdump reads one: its
/// lines joined by spaces, each cut at a `#` (a comment to the end of the
/// line, as tcpdump 4.99 takes it). A file that cannot be read, is not
/// text, or is longer than [`MAX_FILTER_FILE_BYTES`] is a run that cannot
/// go: exit 1, on one line naming it. The file is read up to that bound
/// and no further, so a device that never ends (`/dev/zero`) or a FIFO
/// (`-F <(echo tcp)`) is read like any file.
fn filter_file_expression(path: &Path) -> Result<String, u8> {
    use std::io::Read;
    let failed = |why: String| {
        fail(
            exit::FAILURE,
            format!(
                "{}: cannot read the filter file (-F): {why}",
                path.display()
            ),
        )
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILTER_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| failed(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILTER_FILE_BYTES {
        return Err(failed(format!(
            "longer than {} MiB, which no filter expression is",
            MAX_FILTER_FILE_BYTES >> 20
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        failed(format!(
            "not text: byte {} is not UTF-8",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let words: Vec<&str> = text
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter(|line| !line.is_empty())
        .collect();
    Ok(words.join(" "))
}

/// The compiled filter, checked before any work: an expression libpcap
/// refuses is a bad command line (exit 2), named with `source` (`-f`, or
/// `-F FILE`), a missing libpcap a run that cannot go (exit 1), each on
/// one line.
fn compile_filter(expression: Option<&str>, source: &str) -> Result<Option<TraceFilter>, u8> {
    match expression.map(TraceFilter::new).transpose() {
        Ok(f) => Ok(f),
        Err(TraceFilterError::Invalid {
            expression,
            message,
        }) => Err(fail(
            exit::USAGE,
            format!("{source} {expression:?}: {message}"),
        )),
        Err(e @ TraceFilterError::NoCompiler(_)) => Err(fail(exit::FAILURE, e)),
    }
}

/// A filter's size in counters or bits: a whole number, or one with a
/// suffix K, M, G or T (or Ki, Mi, Gi, Ti), powers of 1024 as in
/// `--max-memory`, so that `4M` is the default 4194304 counters. Filter
/// sizes are powers of two by habit, and their digits are easy to get
/// wrong by one.
fn parse_filter_size(s: &str) -> Result<usize, String> {
    const FORMS: &str = "expected a whole number such as 4194304, or one with K, M, G or T (powers of 1024) such as 4M";
    let t = s.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let shift = match unit {
        "" => 0,
        "K" | "k" | "Ki" | "ki" => 10,
        "M" | "m" | "Mi" | "mi" => 20,
        "G" | "g" | "Gi" | "gi" => 30,
        "T" | "t" | "Ti" | "ti" => 40,
        _ => return Err(FORMS.into()),
    };
    if digits.is_empty() {
        return Err(FORMS.into());
    }
    // Digits only, so the one way to fail is a number past u64.
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| format!("{t} is more than this machine can address"))
}

/// A `-c` value: a whole number of packets, 1 or more.
fn parse_packet_count(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("a count of no packets reads no trace; give 1 or more, or leave -c out to read every packet".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a packet count: {e}")),
    }
}

/// What `replay` and `live` share: keys, classes, truth, the pipeline and
/// the report's outputs.
#[derive(Args)]
struct RunArgs {
    /// Stop after N packets in all (1 or more, as tcpdump's -c: a run of
    /// no packets would report no trace at all).
    #[arg(short = 'c', value_name = "N", value_parser = parse_packet_count)]
    count: Option<u64>,
    /// Addresses and ports as numbers, as tcpdump's -n asks: flowsieve
    /// resolves no names, so that is what it always prints. Taken so that
    /// tcpdump's `-nr FILE` and `-ni IFACE` work as typed.
    #[arg(short = 'n', long = "numeric")]
    _numeric: bool,
    /// How many of the largest flows to list.
    #[arg(long, default_value_t = defaults::TOP, value_name = "N")]
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
    /// Write the report as JSON (schema_version 2) to FILE (`-` for stdout,
    /// which then carries it alone, without the text report). Refused if
    /// FILE is an input trace or holds a capture.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    json: Option<PathBuf>,
    /// Write one CSV per table into DIR (created if missing, with its parents).
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    csv: Option<PathBuf>,
    /// Write SVG trade-off and cost curves into DIR (created if missing, with its parents).
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    plot: Option<PathBuf>,
    /// Do not print the text report.
    #[arg(short, long, help_heading = "Output")]
    quiet: bool,
}

impl RunArgs {
    /// Whether any output carries the report: the text report, `--json`,
    /// `--csv` or `--plot`. Without one (`-q`, perhaps with `--events`),
    /// neither the new-flow stage's model rate
    /// ([`flowsieve::pipeline::NewFlowConfig::model`]) nor the heavy
    /// stage's model columns ([`flowsieve::pipeline::HeavyConfig::model`])
    /// are computed: for an explicit sigma the chain would take a core from
    /// the packets for nothing, and the heavy model a worker's time at
    /// every window's close.
    fn report_is_read(&self) -> bool {
        !self.quiet || self.json.is_some() || self.csv.is_some() || self.plot.is_some()
    }

    /// The outputs that are directories, for [`check_output_dirs`].
    fn dir_outputs(&self) -> [(Option<&Path>, &'static str); 2] {
        [
            (self.csv.as_deref(), "CSV tables"),
            (self.plot.as_deref(), "plots"),
        ]
    }

    /// The validated configuration; `edit` adds what the command sets.
    /// `trace_bytes`: the traces' total size when known before the run
    /// ([`flowsieve::ingest::plain_trace_bytes`]), for `--huge-pages auto`.
    fn configure(
        &self,
        trace_bytes: Option<u64>,
        edit: impl FnOnce(&mut PipelineConfig),
    ) -> Result<ValidatedConfig, u8> {
        configure(&self.classes, &self.pipeline, trace_bytes, |c| {
            c.replay.truth = !self.no_truth;
            c.replay.max_packets = self.count;
            c.replay.top = self.top;
            c.replay.bidirectional = self.bidirectional;
            edit(c);
        })
    }
}

#[derive(Args)]
struct PipelineArgs {
    /// Stages to run: any of heavy, new, selective (comma-separated), all or none.
    #[arg(long, default_value_t = StageList::all(), value_name = "LIST", help_heading = "Pipeline")]
    stages: StageList,
    /// Worker threads for the shards (default: the machine's cores).
    #[arg(long, value_name = "N", help_heading = "Pipeline")]
    threads: Option<usize>,
    /// Shards; results depend on it, never on --threads.
    #[arg(long, default_value_t = defaults::SHARDS, value_name = "S", help_heading = "Pipeline")]
    shards: usize,
    /// Records per batch sent to a worker.
    #[arg(long, default_value_t = defaults::BATCH, value_name = "N", help_heading = "Pipeline")]
    batch: usize,
    /// Batches queued per worker thread before the source waits (1 to
    /// 1024). Fewer bound how far a live capture's engine can run behind
    /// its packets (with --max-delay); results never depend on it.
    #[arg(long, default_value_t = defaults::QUEUE_BATCHES, value_name = "N", help_heading = "Pipeline")]
    queue_batches: usize,
    /// Refuse to start when the filters and batches would take more than
    /// this (such as 2G; default: the machine's available memory).
    #[arg(long, value_name = "BYTES", help_heading = "Pipeline")]
    max_memory: Option<ByteSize>,
    /// Key the flow hash: 32 hex digits, or `random` (drawn from the OS and
    /// printed in the report, or on a note line when `-q` leaves no report,
    /// so the run can be repeated). Without it the
    /// hash is the fixed, public one: reproducible, but its collisions can
    /// be crafted by anyone who reads the constants.
    #[arg(long, value_name = "HEX|random", help_heading = "Pipeline")]
    hash_key: Option<HashKeyArg>,
    /// Count time windows from the Unix epoch instead of from the first
    /// packet, as probes do (so a replay's windows line up with `flowsieve
    /// results`). A run with no time window (heavy and selective windows
    /// in packets, or those stages left out) is refused.
    #[arg(long, help_heading = "Pipeline")]
    epoch_windows: bool,
    /// Transparent huge pages for the tables: on puts the exact tables
    /// (truth) in one region advised as huge pages and advises the
    /// selective stage's sets; off leaves every table to the system
    /// allocator's pages. auto is on, but on a virtual machine whose memory
    /// balloon hands free memory back to its host (virtio-balloon free page
    /// reporting) it runs traces under 128 MiB (plain files) without them,
    /// and otherwise times each fresh huge page and turns huge pages off at
    /// the first one that takes over 1 ms to fault in. Results are the same
    /// either way.
    #[arg(
        long,
        value_enum,
        default_value_t = HugePagesArg::Auto,
        value_name = "auto|on|off",
        help_heading = "Pipeline"
    )]
    huge_pages: HugePagesArg,
    /// The same as --huge-pages off (kept for older command lines).
    #[arg(long, conflicts_with = "huge_pages", help_heading = "Pipeline")]
    no_huge_pages: bool,
    #[command(flatten)]
    heavy: HeavyArgs,
    #[command(flatten)]
    new_flows: NewFlowArgs,
    #[command(flatten)]
    selective: SelectiveArgs,
}

/// The values of `--huge-pages`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum HugePagesArg {
    Auto,
    On,
    Off,
}

#[derive(Args)]
#[command(next_help_heading = "Stage 1: heavy flows")]
struct HeavyArgs {
    /// Heavy-flow window: trace time (1s, 250ms) or packets (50000p).
    #[arg(long, default_value_t = WindowSpec::Time(defaults::HEAVY_WINDOW_NS), value_name = "SPAN")]
    window: WindowSpec,
    /// Heavy-flow window of N packets (same as --window Np; not with
    /// --window, which it would override).
    #[arg(long, value_name = "N", conflicts_with = "window")]
    window_packets: Option<u64>,
    /// Report a flow when its estimate reaches THETA packets in a window.
    #[arg(long, default_value_t = defaults::THETA)]
    theta: u64,
    /// Counters in all (split evenly across shards): a whole number, or
    /// with K, M or G (powers of 1024): 4M is 4194304.
    #[arg(long, default_value_t = defaults::CBF_COUNTERS, value_name = "N", value_parser = parse_filter_size)]
    cbf_counters: usize,
    /// Bits per counter: 4, 8 or 16.
    #[arg(long, default_value_t = defaults::CBF_WIDTH, value_name = "BITS")]
    cbf_width: CounterWidth,
    /// Hash functions (default: k_opt(theta), 003 Theorem 1, for --cbf-load).
    #[arg(long, value_name = "K")]
    cbf_k: Option<usize>,
    /// Packets per window the default k is tuned for (default: the packet
    /// window, else 2^20).
    #[arg(long, value_name = "N")]
    cbf_load: Option<u64>,
    /// Conservative update: only the minimal counters move.
    #[arg(long)]
    conservative: bool,
    /// Counter layout: partitioned (003's; k cache lines per packet) or
    /// blocked (all k counters in one 64-byte line: faster, a higher
    /// false-positive rate, modelled by model::blocked; default k then
    /// minimises that model).
    #[arg(
        long,
        default_value = "partitioned",
        value_name = "partitioned|blocked"
    )]
    layout: CounterLayout,
}

#[derive(Args)]
#[command(next_help_heading = "Stage 2: new flows")]
struct NewFlowArgs {
    /// Recycling-filter bits in all (split across shards; two-phase
    /// halves): a whole number, or with K, M or G (powers of 1024): 8M is
    /// 8388608.
    #[arg(long, default_value_t = defaults::RBF_BITS, value_name = "BITS", value_parser = parse_filter_size)]
    rbf_bits: usize,
    /// Positions per key.
    #[arg(long, default_value_t = defaults::RBF_K, value_name = "K")]
    rbf_k: usize,
    /// Recycle policy: sigma:S (fraction below 1, or bits in all), n:N, time:T.
    #[arg(long, value_name = "POLICY", conflicts_with = "target_fpr")]
    recycle: Option<RecycleSpec>,
    /// Size sigma so the model's average false-positive rate is at most F
    /// (the default policy, with F = 0.01).
    #[arg(long, value_name = "F")]
    target_fpr: Option<f64>,
    /// Two phases: active and frozen halves.
    #[arg(long)]
    two_phase: bool,
    /// Re-insert the key that triggered a recycle.
    #[arg(long)]
    retaining: bool,
    /// k distinct positions per key.
    #[arg(long)]
    non_colliding: bool,
    /// Bit layout: scattered (004's; k cache lines per new flow) or blocked
    /// (a key's k bits in one 64-byte line: one miss, a higher
    /// false-positive rate, modelled and sized by
    /// model::blocked_recycling).
    #[arg(long, default_value = "scattered", value_name = "scattered|blocked")]
    rbf_layout: BitLayout,
    /// Ground truth: a key idle longer than this starts a new flow (default:
    /// only a key's first packet is new).
    #[arg(long, value_name = "DURATION")]
    horizon: Option<DurationNs>,
    /// Slots per shard of the filter's exact front cache of recently seen
    /// flows (0: none). It changes no figure, only the work.
    #[arg(long, default_value_t = defaults::FRONT_CACHE_SLOTS, value_name = "SLOTS")]
    front_cache: usize,
}

#[derive(Args)]
#[command(next_help_heading = "Stage 3: selective query")]
struct SelectiveArgs {
    /// Cache window (the set the directory summarises): time or packets.
    #[arg(long, default_value_t = WindowSpec::Time(defaults::CACHE_WINDOW_NS), value_name = "SPAN")]
    cache_window: WindowSpec,
    /// Query window that follows it (longer, same unit).
    #[arg(long, default_value_t = WindowSpec::Time(defaults::QUERY_WINDOW_NS), value_name = "SPAN")]
    query_window: WindowSpec,
    /// Directory filter: bf (Bloom) or cbf (counting, adds the posterior variant).
    #[arg(long, default_value_t = DirectoryKind::Bloom, value_name = "bf|cbf")]
    directory: DirectoryKind,
    /// Bloom directory layout: partitioned (000's; k cache lines per query)
    /// or blocked (a key's k bits in one 64-byte line: one miss, a higher
    /// false-positive rate, modelled by model::blocked's (B1) at theta = 1;
    /// bf only).
    #[arg(
        long,
        default_value = "partitioned",
        value_name = "partitioned|blocked"
    )]
    dir_layout: CounterLayout,
    /// Bits (counters for cbf) per element of the summarised set.
    #[arg(long, default_value_t = defaults::DIR_BPE, value_name = "BPE")]
    dir_bpe: f64,
    /// Hash functions of the directory (default: bpe ln 2).
    #[arg(long, value_name = "K")]
    dir_k: Option<usize>,
    /// What a query is: flow (each distinct flow once) or packet.
    #[arg(long, default_value_t = QueryUnit::Flow, value_name = "flow|packet")]
    query_unit: QueryUnit,
    /// The least fraction (0 to 1) of each class's queries checked against
    /// the exact set to estimate priors; a class with few queries is
    /// checked more, about 1,000 a round (0: only those).
    #[arg(long, default_value_t = defaults::PRIOR_SAMPLE, value_name = "F")]
    prior_sample: f64,
    /// Cost of a false negative relative to a false positive (a class's
    /// `alpha` in the --classes file overrides it).
    #[arg(long, default_value_t = defaults::ALPHA)]
    alpha: f64,
    /// Sweep: alpha=1,2,5 | k=4,5,6 | bpe=10,20,30 | product=1,2,4,8 (repeatable, once per
    /// parameter; each value once).
    #[arg(long, value_name = "PARAM=LIST")]
    sweep: Vec<SweepSpec>,
    /// Distinct flows the exact cache and query sets hold per window (over
    /// all shards) before they keep a hash sample instead; the report's
    /// `flood` section says what was shed.
    #[arg(long, default_value_t = defaults::SELECTIVE_MAX_FLOWS, value_name = "N")]
    selective_max_flows: usize,
}

impl PipelineArgs {
    /// What `--huge-pages` (or `--no-huge-pages`) asks for.
    fn huge_page_choice(&self) -> HugePageChoice {
        if self.no_huge_pages {
            return HugePageChoice::Off;
        }
        match self.huge_pages {
            HugePagesArg::Auto => HugePageChoice::Auto,
            HugePagesArg::On => HugePageChoice::On,
            HugePagesArg::Off => HugePageChoice::Off,
        }
    }

    /// The library configuration these flags describe.
    fn config(&self, classifier: Classifier) -> PipelineConfig {
        let mut cfg = PipelineConfig::new(classifier);
        cfg.stages = self.stages.clone();
        if let Some(t) = self.threads {
            cfg.threads = t;
        }
        cfg.shards = self.shards;
        cfg.batch = self.batch;
        cfg.queue_batches = self.queue_batches;
        cfg.max_memory = self.max_memory.map(|b| b.0);
        cfg.replay.hash_key = self.hash_key.map_or(HashKey::FIXED, |k| k.key);
        cfg.epoch_windows = self.epoch_windows;
        let (h, hc) = (&self.heavy, &mut cfg.heavy);
        hc.window = h.window_packets.map_or(h.window, WindowSpec::Packets);
        hc.theta = h.theta;
        hc.counters = h.cbf_counters;
        hc.width = h.cbf_width;
        hc.k = h.cbf_k;
        hc.load = h.cbf_load;
        hc.conservative = h.conservative;
        hc.layout = h.layout;
        let (n, nc) = (&self.new_flows, &mut cfg.new_flows);
        nc.bits = n.rbf_bits;
        nc.front_cache = n.front_cache;
        nc.k = n.rbf_k;
        if let Some(r) = n.recycle {
            nc.recycle = r;
        } else if let Some(f) = n.target_fpr {
            nc.recycle = RecycleSpec::TargetFpr(f);
        }
        nc.two_phase = n.two_phase;
        nc.retaining = n.retaining;
        if n.non_colliding {
            nc.hashing = Hashing::NonColliding;
        }
        nc.layout = n.rbf_layout;
        nc.horizon_ns = n.horizon.map(|d| d.0);
        let (s, sc) = (&self.selective, &mut cfg.selective);
        sc.cache_window = s.cache_window;
        sc.query_window = s.query_window;
        sc.directory = s.directory;
        sc.layout = s.dir_layout;
        sc.bpe = s.dir_bpe;
        sc.k = s.dir_k;
        sc.query_unit = s.query_unit;
        sc.prior_sample = s.prior_sample;
        sc.max_flows = s.selective_max_flows;
        sc.alpha = cfg.replay.classifier.alphas(s.alpha);
        for sweep in &s.sweep {
            sc.sweeps.set(sweep);
        }
        cfg
    }
}

/// Lets every option that takes a value take a negative number, in every
/// subcommand. Without it `--alpha -1` ends in clap's "unexpected argument
/// '-1' found", which names no option, and whose tip (`-- -1`) would make
/// the number a trace; with it the option's own check answers ("must be
/// positive", "invalid digit"). Positional arguments are left alone: `-5`
/// there is still a flag, not a trace named `-5`.
fn negative_numbers_as_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        if !a.is_positional() && a.get_action().takes_values() {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    })
    .mut_subcommands(negative_numbers_as_values)
}

/// Parses the command line into [`Cli`] and the matches behind it.
fn parse_command_line() -> Result<(Cli, clap::ArgMatches), clap::Error> {
    let command = negative_numbers_as_values(<Cli as clap::CommandFactory>::command());
    let parse = |args: &[std::ffi::OsString]| {
        command.clone().try_get_matches_from(args).and_then(|m| {
            let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&m)?;
            Ok((cli, m))
        })
    };
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match parse(&args) {
        Err(e) if e.kind() == clap::error::ErrorKind::UnknownArgument => {
            match hyphen_values_joined(&command, &args) {
                Some(joined) => parse(&joined),
                None => Err(e),
            }
        }
        parsed => parsed,
    }
}

/// The command line with each option that takes a value joined to a
/// following value that starts with one hyphen (`--window -1s` as
/// `--window=-1s`, `-c -5k` as `-c=-5k`, `--alpha -inf` as
/// `--alpha=-inf`), or `None` when it has none.
///
/// Why: clap takes `-1s` for short flags and answers "unexpected argument
/// '-1' found", naming no option, with a tip (`-- -1`) that would make the
/// value a trace. [`negative_numbers_as_values`] covers plain numbers;
/// a duration, a size or `-inf` is not one. Joined, the option's own check
/// answers ("bad window '-1s': expected a duration ...", "--alpha: values
/// must be positive and finite (got -inf)"). This runs only after clap has
/// refused the line with an unknown argument, so no line that parses
/// changes meaning. clap stops at the first error, so an option followed
/// by a flag's own name (`--json -q`) has already been answered "a value
/// is required" and never reaches here; a word with two hyphens is never
/// joined, and a positional `-5` is left alone as before.
fn hyphen_values_joined(
    command: &clap::Command,
    args: &[std::ffi::OsString],
) -> Option<Vec<std::ffi::OsString>> {
    fn value_options(cmd: &clap::Command, out: &mut Vec<String>) {
        for a in cmd.get_arguments() {
            if !a.is_positional() && a.get_action().takes_values() {
                out.extend(a.get_long().map(|l| format!("--{l}")));
                out.extend(a.get_short().map(|c| format!("-{c}")));
            }
        }
        for sub in cmd.get_subcommands() {
            value_options(sub, out);
        }
    }
    let mut options = Vec::new();
    value_options(command, &mut options);
    let hyphen_value = |a: &std::ffi::OsString| {
        let b = a.as_encoded_bytes();
        b.len() > 1 && b[0] == b'-' && b[1] != b'-'
    };
    let mut joined = Vec::with_capacity(args.len());
    let mut changed = false;
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        if a == "--" {
            joined.push(a.clone());
            joined.extend(rest.cloned());
            break;
        }
        let takes_value = a.to_str().is_some_and(|s| options.iter().any(|o| o == s));
        match rest.clone().next() {
            Some(value) if takes_value && hyphen_value(value) => {
                let mut both = a.clone();
                both.push("=");
                both.push(value);
                joined.push(both);
                rest.next();
                changed = true;
            }
            _ => joined.push(a.clone()),
        }
    }
    changed.then_some(joined)
}

/// The line for a command group given without its command (`flowsieve
/// model`): the group and the commands it takes (`None` when the line
/// names no group).
///
/// Why not clap's own answer: it prints the group's whole help and was
/// taken as a success (exit 0), so a script that ran `flowsieve model`
/// with its query left out went on as if it had an answer. This is a
/// usage error like any other: exit 2 and one line, which lists what to
/// give.
fn missing_subcommand_line() -> Option<String> {
    let mut group = <Cli as clap::CommandFactory>::command();
    let mut path = Vec::new();
    // The words of the command line that name subcommands, in turn: the
    // group is the last one reached.
    for word in std::env::args_os().skip(1) {
        let Some(word) = word.to_str() else { break };
        let Some(sub) = group.find_subcommand(word).cloned() else {
            continue;
        };
        path.push(sub.get_name().to_string());
        group = sub;
    }
    let commands: Vec<&str> = group
        .get_subcommands()
        .map(|c| c.get_name())
        .filter(|&n| n != "help")
        .collect();
    if path.is_empty() || commands.is_empty() {
        return None;
    }
    let name = path.join(" ");
    Some(format!(
        "{name}: give one of its commands: {} (`flowsieve {name} --help` says what each does)",
        commands.join(", ")
    ))
}

/// clap's message on one line, without its "error: " prefix, its usage and
/// its pointer to --help. The lines before the usage are kept, joined: a
/// missing argument is named on the line after "the following required
/// arguments were not provided:", and the values an option takes on the
/// line after "invalid value".
fn clap_error_on_one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut one = String::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if line.is_empty() {
            continue;
        }
        let line = line.strip_prefix("error: ").unwrap_or(line);
        if !one.is_empty() {
            let continues = one.ends_with(':') || line.starts_with('[');
            one.push_str(if continues { " " } else { "; " });
        }
        one.push_str(line);
    }
    if one.is_empty() {
        one.push_str("bad command line");
    }
    one
}

/// `--hash-key`: a key given in hex, or one drawn from the operating
/// system (`random`), which exists nowhere but in this run's outputs.
#[derive(Clone, Copy, Debug)]
struct HashKeyArg {
    key: HashKey,
    drawn: bool,
}

impl std::str::FromStr for HashKeyArg {
    type Err = flowsieve::hash::HashKeyError;
    fn from_str(s: &str) -> Result<HashKeyArg, Self::Err> {
        Ok(HashKeyArg {
            key: s.parse()?,
            drawn: s == "random",
        })
    }
}

/// Why `--epoch-windows` is refused for `cfg`, which has no time window:
/// the windows of the stages that run, or that none of those stages has
/// windows.
fn epoch_windows_without_time(cfg: &PipelineConfig) -> String {
    let windows: Vec<String> = cfg
        .stage_windows()
        .into_iter()
        .map(|(name, w)| format!("{name} {w}"))
        .collect();
    let what = if windows.is_empty() {
        "neither the heavy nor the selective stage runs".to_string()
    } else {
        windows.join(", ")
    };
    format!(
        "--epoch-windows aligns time windows, and this run has none ({what}); give a time window or leave the flag out"
    )
}

/// The classifier and the validated configuration; a bad class file is
/// exit code 1, a bad value exit code 2. `trace_bytes` is the traces'
/// total size when known before the run, which `--huge-pages auto` looks
/// at ([`flowsieve::pages::apply_huge_page_choice_for`]).
fn configure(
    classes: &str,
    pipeline: &PipelineArgs,
    trace_bytes: Option<u64>,
    edit: impl FnOnce(&mut PipelineConfig),
) -> Result<ValidatedConfig, u8> {
    SweepSpec::check_each_once(&pipeline.selective.sweep).map_err(|e| fail(exit::USAGE, e))?;
    let classifier = Classifier::from_spec(classes).map_err(|e| fail(exit::FAILURE, e))?;
    // With no rule there is one class, the default, and its name is the
    // only one.
    let no_rules = classifier.has_no_rules().then(|| {
        format!(
            "--classes {classes}: no [[class]] rule, so every flow is in the default class {:?}",
            classifier.name(0)
        )
    });
    // Process-wide, and before any table is made: blocks are told apart by
    // address, so this only decides where the run's tables go.
    flowsieve::pages::apply_huge_page_choice_for(pipeline.huge_page_choice(), trace_bytes);
    let mut cfg = pipeline.config(classifier);
    edit(&mut cfg);
    // The flag moves time windows only. With none in the run it would
    // change nothing, and a user who asked for windows that line up with
    // `flowsieve results` would compare windows that never did.
    if pipeline.epoch_windows && !cfg.has_time_window() {
        return Err(fail(exit::USAGE, epoch_windows_without_time(&cfg)));
    }
    let validated = cfg
        .validate()
        .map_err(|e| fail(exit::USAGE, config_error_line(e)))?;
    if let Ok(mut notes) = STAGE_NOTES.lock() {
        *notes = notes_on_stages_left_out(&cfg.stages);
        notes.extend(notes_on_truth_flags_without_truth(&cfg));
        notes.extend(note_on_unreachable_theta(&cfg));
        notes.extend(note_on_events_without_their_stages(&cfg));
        if let Some(note) = &no_rules {
            notes.push(note.clone());
        }
    }
    Ok(validated)
}

/// For each configuration field a check can refuse, the flags (by clap
/// id) that set it: the first of them given on the command line names the
/// error, or the first when none was (a default that another flag made
/// wrong, such as the cache window's default against `--query-window
/// 500ms`, names `--query-window`). A field missing here (one no flag
/// sets) keeps its own name.
const FLAGS_OF_FIELDS: &[(&str, &[&str])] = &[
    ("shards", &["shards"]),
    ("threads", &["threads"]),
    ("batch", &["batch"]),
    ("queue_batches", &["queue_batches"]),
    ("heavy.theta", &["theta"]),
    ("heavy.k", &["cbf_k"]),
    ("heavy.counters", &["cbf_counters"]),
    ("heavy.load", &["cbf_load", "window_packets"]),
    ("heavy.window", &["window", "window_packets"]),
    ("new_flows.k", &["rbf_k"]),
    ("new_flows.bits", &["rbf_bits"]),
    ("new_flows.horizon_ns", &["horizon"]),
    ("new_flows.front_cache", &["front_cache"]),
    ("new_flows.recycle", &["target_fpr", "recycle"]),
    ("selective.k", &["dir_k"]),
    ("selective.bpe", &["dir_bpe"]),
    ("selective.layout", &["dir_layout", "directory"]),
    ("selective.max_flows", &["selective_max_flows"]),
    ("selective.query_window", &["query_window", "cache_window"]),
    ("selective.alpha", &["alpha"]),
    ("selective.prior_sample", &["prior_sample"]),
];

/// A refused configuration's line, naming the flag as typed (`--theta`)
/// where the library names its field (`heavy.theta`): the promise is one
/// line naming the flag, the value and the allowed range.
fn config_error_line(e: flowsieve::pipeline::ConfigError) -> String {
    let flowsieve::pipeline::ConfigError::Invalid { field, problem } = &e else {
        return e.to_string();
    };
    // `--sweep PARAM=LIST`: the parameter, as typed.
    if let Some(param) = field.strip_prefix("selective.sweeps.") {
        return format!("--sweep {param}: {problem}");
    }
    let Some((_, ids)) = FLAGS_OF_FIELDS.iter().find(|(f, _)| f == field) else {
        return e.to_string();
    };
    let given = GIVEN_FLAGS.get();
    let id = ids
        .iter()
        .find(|id| given.is_some_and(|g| g.iter().any(|g| g == *id)))
        .unwrap_or(&ids[0]);
    let cmd = PipelineArgs::augment_args(clap::Command::new("pipeline"));
    match cmd
        .get_arguments()
        .find(|a| a.get_id().as_str() == *id)
        .and_then(|a| a.get_long())
    {
        Some(long) => format!("--{long}: {problem}"),
        None => e.to_string(),
    }
}

/// A model's error with each parameter named as the flag that gives it
/// (`--m-over-n`, where the library says `m_over_n`), for the flags `Q`
/// takes; a word that is no flag of `Q` is left as it is.
fn model_error_line<Q: clap::Args>(e: &ModelError) -> String {
    let cmd = Q::augment_args(clap::Command::new("model"));
    let flag = |word: &str| {
        let long = word.replace('_', "-");
        cmd.get_arguments()
            .any(|a| a.get_long() == Some(long.as_str()))
            .then(|| format!("--{long}"))
    };
    match e {
        ModelError::Invalid { param, problem } => match flag(param) {
            Some(f) => format!("{f}: {problem}"),
            None => e.to_string(),
        },
        // "m_over_n (or exact with n and m)": each word that names a flag.
        ModelError::Missing(what) => {
            let mut out = String::from("give ");
            let mut word = String::new();
            for c in what.chars().chain(std::iter::once(' ')) {
                if c.is_ascii_alphanumeric() || c == '_' {
                    word.push(c);
                    continue;
                }
                if !word.is_empty() {
                    out.push_str(&flag(&word).unwrap_or_else(|| word.clone()));
                    word.clear();
                }
                out.push(c);
            }
            out.pop();
            out
        }
    }
}

/// The flags given on the command line (not defaults), by clap id, of the
/// command that runs; set once in `main`.
static GIVEN_FLAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Records which flags of the running (sub)command were typed, for
/// [`note_flags_of_stages_left_out`].
fn remember_given_flags(matches: &clap::ArgMatches) {
    let mut m = matches;
    while let Some((_, sub)) = m.subcommand() {
        m = sub;
    }
    let given = m
        .ids()
        .filter(|id| m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| id.to_string())
        .collect();
    let _ = GIVEN_FLAGS.set(given);
}

/// What [`notes_on_stages_left_out`] found for the run's configuration,
/// and the charts `--plot` left out, printed once the run is over (not
/// beside an error, which is its one line alone). Set while the flags are
/// read and once the report is written, never on the packet path.
static STAGE_NOTES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// A stage's own flags change nothing when `--stages` leaves the stage
/// out; the run goes on (the throughput issue's own command line is
/// `--stages none --recycle sigma:0.5`), and one line a stage on stderr,
/// after the run, says which flags it did not use, so that none is
/// ignored without a word.
fn notes_on_stages_left_out(stages: &StageList) -> Vec<String> {
    let mut notes = Vec::new();
    let Some(given) = GIVEN_FLAGS.get() else {
        return notes;
    };
    let groups = [
        (
            flowsieve::pipeline::StageName::Heavy,
            "heavy-flow",
            HeavyArgs::augment_args(clap::Command::new("heavy")),
        ),
        (
            flowsieve::pipeline::StageName::NewFlows,
            "new-flow",
            NewFlowArgs::augment_args(clap::Command::new("new")),
        ),
        (
            flowsieve::pipeline::StageName::Selective,
            "selective",
            SelectiveArgs::augment_args(clap::Command::new("selective")),
        ),
    ];
    for (stage, what, cmd) in groups {
        if stages.stages().contains(&stage) {
            continue;
        }
        let unused: Vec<String> = cmd
            .get_arguments()
            .filter(|a| given.iter().any(|g| g == a.get_id().as_str()))
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        if !unused.is_empty() {
            let one = unused.len() == 1;
            notes.push(format!(
                "{} {} to the {what} stage, which --stages leaves out: {} nothing in this run",
                unused.join(", "),
                if one { "applies" } else { "apply" },
                if one { "it changes" } else { "they change" },
            ));
        }
    }
    notes
}

/// Flags that shape only the ground truth, which `--no-truth` does not
/// keep: given with it, each changes nothing, and one note says so, as
/// for a stage's flags when `--stages` leaves it out. `--top` lists the
/// exact flow table's largest flows; `--horizon` says when the exact
/// table starts a flow anew (a `--horizon` the left-out new-flow stage
/// would take is named by that stage's note instead).
fn notes_on_truth_flags_without_truth(cfg: &PipelineConfig) -> Vec<String> {
    let Some(given) = GIVEN_FLAGS.get() else {
        return Vec::new();
    };
    if cfg.replay.truth {
        return Vec::new();
    }
    let new_flows_run = cfg
        .stages
        .stages()
        .contains(&flowsieve::pipeline::StageName::NewFlows);
    let mut notes = Vec::new();
    if given.iter().any(|g| g == "top") {
        notes.push("--top lists the largest flows of the exact flow table, which --no-truth does not keep: it changes nothing in this run".to_string());
    }
    if new_flows_run && given.iter().any(|g| g == "horizon") {
        notes.push("--horizon says when the exact flow table starts a flow anew, and this run keeps no exact table (truth is off): it changes nothing in this run".to_string());
    }
    notes
}

/// A heavy-flow window of fewer packets than `--theta` can never hold a
/// flow at the threshold, so the stage reports nothing by construction:
/// a run with `--window 5p` and the default theta of 10 printed an empty
/// heavy section and no reason. One note says so; the run goes on, as its
/// other stages and its counts still stand.
fn note_on_unreachable_theta(cfg: &PipelineConfig) -> Option<String> {
    let runs = cfg
        .stages
        .stages()
        .contains(&flowsieve::pipeline::StageName::Heavy);
    match cfg.heavy.window {
        WindowSpec::Packets(n) if runs && cfg.heavy.theta > n => Some(format!(
            "--theta {}: a heavy-flow window holds {n} packet{}, so no flow can reach the threshold and the heavy stage reports none",
            cfg.heavy.theta,
            if n == 1 { "" } else { "s" }
        )),
        _ => None,
    }
}

/// `--events` writes the heavy-flow and new-flow stages' events (and the
/// heavy stage's window ends); with neither stage in `--stages` the file
/// is written empty. A run with `--stages selective --events FILE` left an
/// empty file and no reason: one note says so, as the plots' notes do
/// for a figure whose stage did not run.
fn note_on_events_without_their_stages(cfg: &PipelineConfig) -> Option<String> {
    use flowsieve::pipeline::StageName;
    let given = GIVEN_FLAGS.get()?;
    let stages = cfg.stages.stages();
    (given.iter().any(|g| g == "events")
        && !stages.contains(&StageName::Heavy)
        && !stages.contains(&StageName::NewFlows))
    .then(|| {
        "--events writes the heavy-flow and new-flow stages' events, and --stages leaves both out: it writes none in this run".to_string()
    })
}

impl ReplayArgs {
    /// The traces named, with `-r` or as arguments.
    fn named_traces(&self) -> &[PathBuf] {
        self.read.named(&self.traces)
    }

    /// The trace filter's expression (see [`ReadArg::filter_expression`]).
    fn filter_expression(&self) -> Result<Option<String>, u8> {
        self.read.filter_expression(&self.traces, &self.filter)
    }
}

/// `-r FILE`, as tcpdump and tshark take a trace: for `replay`, `bench`
/// and `probe`, so that a command typed for tcpdump reads the same files.
#[derive(Args)]
struct ReadArg {
    /// Read this trace, as `tcpdump -r` and `tshark -r` do (repeatable,
    /// read in order; the same as naming the files). As with tcpdump, words
    /// after `-r FILE` are a filter expression (the same as -f): `-r FILE
    /// tcp port 53`.
    #[arg(short = 'r', value_name = "FILE")]
    read: Vec<PathBuf>,
}

impl ReadArg {
    /// The traces named: with `-r`, or else the command's arguments.
    fn named<'a>(&'a self, arguments: &'a [PathBuf]) -> &'a [PathBuf] {
        if self.read.is_empty() {
            arguments
        } else {
            &self.read
        }
    }

    /// Whether the command's arguments are the words of a filter
    /// expression, as after `tcpdump -r FILE`.
    fn arguments_are_expression(&self, arguments: &[PathBuf]) -> bool {
        !self.read.is_empty() && !arguments.is_empty()
    }

    /// The trace filter's expression: `-f`'s (or `-F`'s file's), or, as
    /// `tcpdump -r FILE EXPR` takes it, the words after the `-r` traces.
    /// Exit 2 with one line when both are given, or when a word after
    /// `-r` is a file (traces are named with `-r` or as arguments, never
    /// both: the second file would be read as an expression).
    fn filter_expression(
        &self,
        arguments: &[PathBuf],
        filter: &TraceFilterArg,
    ) -> Result<Option<String>, u8> {
        if !self.arguments_are_expression(arguments) {
            return filter.given();
        }
        if let Some(file) = arguments.iter().find(|t| t.is_file()) {
            return Err(fail(
                exit::USAGE,
                format!(
                    "{}: a trace named after -r FILE; name every trace with -r (-r A -r B) or none, since words after -r FILE are a filter expression, as with tcpdump",
                    file.display()
                ),
            ));
        }
        let words: Vec<String> = arguments
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        if filter.expression.is_some() || filter.file.is_some() {
            return Err(fail(
                exit::USAGE,
                format!(
                    "a filter expression twice: {} and the words after -r FILE ({}); give one",
                    filter.flag(),
                    words.join(" ")
                ),
            ));
        }
        Ok(Some(words.join(" ")))
    }
}

fn traces_or_default(traces: &[PathBuf]) -> Vec<PathBuf> {
    if traces.is_empty() {
        vec![default_trace()]
    } else {
        traces.to_vec()
    }
}

/// A file's device and inode: one identity for a file and every link to
/// it, for outputs and stream inputs alike.
fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    (
        std::os::unix::fs::MetadataExt::dev(m),
        std::os::unix::fs::MetadataExt::ino(m),
    )
}

/// Refuses, with exit 2 and one line before any work starts, a stream
/// given twice as a trace: `-` twice, `-` and `/dev/stdin`, or one FIFO
/// under two names. A stream is read once; the second reading found it
/// empty and ended the run as damaged input (exit 3). Streams are known by
/// their device and inode, as the outputs are; a regular file may be given
/// twice (the run warns that its packets go back in time).
fn check_streams_once(traces: &[PathBuf]) -> Result<(), u8> {
    let mut seen: Vec<((u64, u64), &Path)> = Vec::new();
    for t in traces {
        let id = if t.as_os_str() == flowsieve::ingest::STDIN_PATH {
            // `-` is read as a stream whatever it is (a file redirected
            // with `<` is read to its end and not rewound), so two are
            // always one too many.
            std::fs::metadata("/dev/stdin")
                .map(|m| identity(&m))
                .unwrap_or((u64::MAX, u64::MAX))
        } else {
            match std::fs::metadata(t) {
                Ok(m) if !m.is_file() && !m.is_dir() => identity(&m),
                _ => continue,
            }
        };
        if let Some((_, first)) = seen.iter().find(|(i, _)| *i == id) {
            let what = if first == t {
                format!("{} is given twice", t.display())
            } else {
                format!("{} and {} are one stream", first.display(), t.display())
            };
            return Err(fail(
                exit::USAGE,
                format!("{what}: standard input, a pipe or a FIFO can be read once; give it once"),
            ));
        }
        seen.push((id, t));
    }
    Ok(())
}

/// Refuses, with exit 2 and one line before any work starts, a directory
/// output (`--csv DIR`, `--plot DIR`) that names a file or lies under one
/// ([`flowsieve::report::check_output_dir`]), is `-`, or is the path of
/// one of the run's file outputs `files` or lies under it
/// ([`flowsieve::report::check_dir_apart_from_file`]).
fn check_output_dirs(
    dirs: &[(Option<&Path>, &'static str)],
    files: &[(Option<&Path>, &'static str)],
) -> Result<(), u8> {
    for &(dir, what) in dirs {
        let Some(dir) = dir else {
            continue;
        };
        flowsieve::report::check_output_dir(dir, what).map_err(|e| fail(exit::USAGE, e))?;
        for &(file, file_what) in files {
            if let Some(file) = file {
                flowsieve::report::check_dir_apart_from_file(dir, what, file, file_what)
                    .map_err(|e| fail(exit::USAGE, e))?;
            }
        }
    }
    Ok(())
}

/// Refuses, with exit 2 and one line before any work starts, a report
/// output that is one of the run's `inputs` or already holds a capture
/// ([`flowsieve::report::check_output_target`]).
///
/// One path given to two outputs (`-` aside) is refused the same way: the
/// second written would replace the first.
fn check_outputs(outputs: &[(Option<&Path>, &'static str)], inputs: &[PathBuf]) -> Result<(), u8> {
    // Two documents on one stream could be read as neither.
    let to_stdout: Vec<&str> = outputs
        .iter()
        .filter(|(p, _)| p.is_some_and(writes_stdout))
        .map(|(_, what)| *what)
        .collect();
    if let [first, second, ..] = to_stdout[..] {
        return Err(fail(
            exit::USAGE,
            format!(
                "the {first} and the {second} both go to standard output; name a file for one of them"
            ),
        ));
    }
    for (path, what) in outputs {
        if let Some(path) = path {
            flowsieve::report::check_output_target(path, what, inputs)
                .map_err(|e| fail(exit::USAGE, e))?;
        }
    }
    check_outputs_distinct(outputs)
}

/// Refuses, with exit 2 and one line before any work starts, one path
/// given to two file outputs (`-` and character devices aside): the
/// second written would replace the first.
fn check_outputs_distinct(outputs: &[(Option<&Path>, &'static str)]) -> Result<(), u8> {
    let mut seen: Vec<(OutputIdentity, &'static str)> = Vec::new();
    for (path, what) in outputs {
        let Some(path) = path else {
            continue;
        };
        if path.as_os_str() == "-" {
            continue;
        }
        // An existing file is known by its device and inode, so that a
        // link and the file it leads to are one target; a new one by its
        // absolute path. A character device (`/dev/null`) takes any
        // number of writers, and nothing of one replaces another there.
        let meta = std::fs::metadata(path);
        if meta
            .as_ref()
            .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type()))
        {
            continue;
        }
        let target = match meta {
            Ok(m) => {
                let (dev, ino) = identity(&m);
                OutputIdentity::File(dev, ino)
            }
            Err(_) => OutputIdentity::Path(
                std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
            ),
        };
        if let Some((_, first)) = seen.iter().find(|(p, _)| *p == target) {
            return Err(fail(
                exit::USAGE,
                format!(
                    "{}: given for both the {first} and the {what}; one would replace the other",
                    path.display()
                ),
            ));
        }
        seen.push((target, what));
    }
    Ok(())
}

/// What an output path writes to, for telling two outputs given one
/// target apart in [`check_outputs`].
#[derive(PartialEq, Eq)]
enum OutputIdentity {
    /// An existing file: its device and inode.
    File(u64, u64),
    /// A file to be created: its absolute path.
    Path(PathBuf),
}

/// A replay. `stop` is the flag the first interrupt sets: reading then
/// stops at the next run of records, the report of what was read is
/// written as usual, and the exit is 130 with one line saying where
/// reading stopped. A read that waits past [`progress::STALL`] instead
/// (a pipe whose writer sends nothing) ends the process at once
/// ([`progress::watch_for_stalls`]).
fn run_replay(args: ReplayArgs, stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>) -> u8 {
    let traces = traces_or_default(args.named_traces());
    let files = [
        (args.run.json.as_deref(), "JSON report"),
        (args.events.as_deref(), "events"),
    ];
    if let Err(code) = check_outputs(&files, &traces)
        .and_then(|()| check_output_dirs(&args.run.dir_outputs(), &files))
        .and_then(|()| check_streams_once(&traces))
    {
        return code;
    }
    // A trace read from a terminal would wait for keystrokes that can never
    // make a capture: refused before any work, as zstd refuses a console.
    if traces
        .iter()
        .any(|t| t.as_os_str() == flowsieve::ingest::STDIN_PATH)
        && std::io::stdin().is_terminal()
    {
        return fail(
            exit::USAGE,
            "-: standard input is a terminal; pipe a trace into it (cat FILE | flowsieve -) or name the file",
        );
    }
    let filter = match args
        .filter_expression()
        .and_then(|e| compile_filter(e.as_deref(), &args.filter.source()))
    {
        Ok(f) => f,
        Err(code) => return code,
    };
    let trace_bytes = flowsieve::ingest::plain_trace_bytes(&traces);
    let cfg = match args.run.configure(trace_bytes, |c| {
        if args.no_mmap && !args.mmap {
            c.replay.read_mode = ReadMode::Read;
        }
        c.replay.dissect_threads = usize::from(args.dissect_threads);
        c.replay.filter = filter;
        c.new_flows.model = args.run.report_is_read();
        c.heavy.model = args.run.report_is_read();
        // The default job (no trace given) also sweeps bits per element and
        // alpha, so a new user sees where selective querying pays.
        if args.named_traces().is_empty() && args.run.pipeline.selective.sweep.is_empty() {
            c.selective.sweeps.bpe = defaults::DEMO_SWEEP_BPE.to_vec();
            c.selective.sweeps.alpha = defaults::DEMO_SWEEP_ALPHA.to_vec();
        }
    }) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut events = match open_events(args.events.as_deref()) {
        Ok(e) => e,
        Err(code) => return code,
    };
    let sink: &mut dyn PipelineSink = match events.as_mut() {
        Some(w) => w,
        None => &mut NoEvents,
    };
    let source = FileSource::new(traces, &cfg);
    let mut progress = Progress::new(stop.clone(), Some(progress_requests()));
    progress::watch_for_stalls(
        stop.clone(),
        progress.info_flag(),
        progress.read_state(),
        stalled_read_line,
        first_signal_name,
    );
    let report = match run(source, &cfg, &mut progress, sink) {
        Ok(r) => r,
        Err(e) => return fail(exit::FAILURE, run_failed(e, args.events.as_deref())),
    };
    let text = prints_text(&args.run, &[args.events.as_deref()]);
    let code = emit_report(&report, &args.run, text);
    let closed = close_events(events, args.events.as_deref(), !text);
    // Interrupted: the report of what was read is written (above), and the
    // exit says the run was cut short, and where.
    if stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst)) {
        let line = progress::interrupted_replay_line(
            first_signal_name(),
            &report.replay,
            progress.stopped_at_place(),
            "the report covers",
        )
        .unwrap_or_else(|| {
            format!(
                "interrupted by {} after the last packet was read: the report is complete",
                first_signal_name()
            )
        });
        return fail(exit::INTERRUPTED, line);
    }
    if let Err(code) = closed {
        return code;
    }
    code
}

/// Whether the text report (and the lines saying what was written) goes to
/// standard output: not with `-q`, and not when the JSON report or one of
/// `others` goes there (`-`, `/dev/stdout`), so that a reader of that
/// stream, such as `jq`, gets the document alone, as `live --json-lines -`
/// already did.
fn prints_text(run: &RunArgs, others: &[Option<&Path>]) -> bool {
    !run.quiet
        && !run.json.as_deref().is_some_and(writes_stdout)
        && !others.iter().flatten().any(|p| writes_stdout(p))
}

/// Writes a JSON document to `path` (`-`: stdout), atomically for a
/// file; exit 1 naming it when it cannot be written.
fn write_json(path: &Path, json: String) -> Result<(), u8> {
    let written = if path.as_os_str() == "-" {
        writeln!(std::io::stdout(), "{json}")
    } else {
        flowsieve::report::write_atomically(path, (json + "\n").as_bytes())
    };
    written.map_err(|e| {
        fail(
            exit::FAILURE,
            format!("{}: cannot write JSON: {e}", path.display()),
        )
    })
}

/// The `--events` file's sink.
type EventsFile = JsonLinesSink<BufWriter<std::fs::File>>;

/// Creates the `--events` file, if asked for; exit 1 naming it when it
/// cannot be created.
fn open_events(path: Option<&Path>) -> Result<Option<EventsFile>, u8> {
    let Some(path) = path else {
        return Ok(None);
    };
    let file = if writes_stdout(path) {
        flowsieve::report::stdout_file()
    } else {
        std::fs::File::create(path)
    };
    match file {
        Ok(f) => Ok(Some(JsonLinesSink::new(BufWriter::new(f)))),
        Err(e) => Err(fail(
            exit::FAILURE,
            format!("{}: cannot create: {e}", path.display()),
        )),
    }
}

/// The line for a run the pipeline stopped: a failed event sink is the
/// `--events` output, named as [`events_failed`] names it.
///
/// A thread that could not start gets the two ways out: fewer threads,
/// or a higher limit on them.
fn run_failed(e: flowsieve::pipeline::PipelineError, events: Option<&Path>) -> String {
    match (e, events) {
        (flowsieve::pipeline::PipelineError::Sink(e), Some(path)) => events_failed(path, &e),
        (e @ flowsieve::pipeline::PipelineError::Spawn { .. }, _) => {
            format!("{e}; give fewer --threads, or raise the limit on processes (ulimit -u)")
        }
        (e, _) => e.to_string(),
    }
}

/// The line for an `--events` output that could not be written: its
/// path, or standard output for `-` and `/dev/stdout`.
fn events_failed(path: &Path, e: &std::io::Error) -> String {
    if writes_stdout(path) {
        format!("standard output: cannot write events: {e}")
    } else {
        format!("{}: cannot write events: {e}", path.display())
    }
}

/// Flushes the `--events` file and says what it holds; exit 1 naming it
/// when it cannot be written.
fn close_events(events: Option<EventsFile>, path: Option<&Path>, quiet: bool) -> Result<(), u8> {
    let (Some(w), Some(path)) = (events, path) else {
        return Ok(());
    };
    let (heavy, new) = (w.heavy, w.new_flows);
    if let Err(e) = w.finish() {
        return Err(fail(exit::FAILURE, events_failed(path, &e)));
    }
    if !quiet {
        print_out(format_args!(
            "events: {heavy} heavy, {new} new-flow written to {}\n",
            path.display()
        ))?;
    }
    Ok(())
}

/// Prints the errors, warnings and (when `text`) the text report, writes
/// the JSON, CSV and plots the flags ask for, and returns the exit code.
fn emit_report(report: &flowsieve::report::PipelineReport, args: &RunArgs, text: bool) -> u8 {
    // On the run's one error line, at its end (see `ERRORS`).
    for e in &report.replay.errors {
        record_error(e.clone());
    }
    for w in &report.replay.warnings {
        eprintln!("flowsieve: warning: {w}");
    }
    // An output that cannot be written (standard output whose reader went
    // away, a full disk) does not keep the others from being written; the
    // run then exits 1, its one error line naming each that failed.
    let mut failed = false;
    if text {
        failed |= print_out(report.render_text()).is_err();
    }
    if let Some(path) = &args.json {
        failed |= write_json(path, report.to_json()).is_err();
    }
    // A drawn key is in the text report and the JSON. Without either, the
    // run's events, CSV and plots could never be made again.
    if let Some(k) = args.pipeline.hash_key.filter(|k| k.drawn)
        && !text
        && args.json.is_none()
        && let Ok(mut notes) = STAGE_NOTES.lock()
    {
        notes.push(format!(
            "--hash-key random drew {}; give it as --hash-key to repeat this run",
            k.key
        ));
    }
    if let Some(dir) = &args.csv
        && let Err(e) = report.write_csv(dir)
    {
        failed = true;
        fail(
            exit::FAILURE,
            format!("{}: cannot write CSV: {e}", dir.display()),
        );
    }
    if let Some(dir) = &args.plot {
        if let Err(e) = report.write_plots(dir) {
            failed = true;
            fail(exit::FAILURE, format!("cannot write plots: {e}"));
        }
        // Printed with the stage notes once the run has ended well: a run
        // that then fails (a probe whose digests were not delivered) has
        // its one error line alone.
        if let Ok(mut notes) = STAGE_NOTES.lock() {
            notes.extend(
                report
                    .plots_left_out()
                    .into_iter()
                    .map(|why| format!("--plot {}: no {why}", dir.display())),
            );
        }
    }
    if failed {
        exit::FAILURE
    } else {
        outcome_code(report.outcome())
    }
}

#[derive(Args)]
struct BenchArgs {
    /// Trace files (default: the bundled trace; use a large one, e.g. from
    /// gen-trace, already in the page cache).
    traces: Vec<PathBuf>,
    #[command(flatten)]
    read: ReadArg,
    /// Addresses and ports as numbers, as tcpdump's -n asks: taken so that
    /// `bench -nr FILE` works as typed for tcpdump (bench prints no
    /// addresses).
    #[arg(short = 'n', long = "numeric")]
    _numeric: bool,
    /// Thread counts to run the pipeline at.
    #[arg(
        long,
        default_value = "1,2",
        value_name = "LIST",
        value_delimiter = ','
    )]
    threads_list: Vec<usize>,
    /// Rounds; each figure is the median over rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Flow classes.
    #[arg(long, default_value = "ports", value_name = "ports|ipclass|FILE")]
    classes: String,
    /// Wait this long, untimed, before each command of the comparison with
    /// tcpdump (e.g. 3s; at most 60s). The default runs them back to back,
    /// as benchmark loops do; a few seconds time each as a single command
    /// typed on a quiet machine, which on a virtual machine whose memory
    /// balloon hands free memory back to its host costs more.
    #[arg(long, value_name = "DURATION")]
    gap: Option<DurationNs>,
    /// Skip the whole-process comparison with `tcpdump -r FILE -w /dev/null`.
    #[arg(long)]
    no_tcpdump: bool,
    /// Time `tshark -n -r FILE -w /dev/null` too, in the same rounds as
    /// the comparison with tcpdump, with each row's ratio to it. Wireshark's
    /// reader takes several times tcpdump's time, so it is asked for. Left
    /// out, with a note, where tshark is not installed (Debian: apt-get
    /// install tshark) and under a trace filter, which tshark does not take
    /// for files.
    #[arg(long, conflicts_with = "no_tcpdump")]
    tshark: bool,
    /// Skip the memory lines (a random access timed in five working sets,
    /// alone and eight at once: about 0.2 s, and 0.35 s a round, whatever
    /// the trace).
    #[arg(long)]
    no_memory: bool,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Write the figures as JSON to FILE (`-` for stdout, which then
    /// carries them alone, without the text report).
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    json: Option<PathBuf>,
    /// Memory-map plain trace files (the default, as replay's --mmap).
    #[arg(long, overrides_with = "no_mmap", help_heading = "Input")]
    mmap: bool,
    /// Read plain trace files through a buffer (as replay's --no-mmap).
    #[arg(long, help_heading = "Input")]
    no_mmap: bool,
    /// Time the records a trace filter keeps (as replay's -f and -F): every
    /// row reads them, and tcpdump is given the same filter.
    #[command(flatten)]
    filter: TraceFilterArg,
}

/// The command line after `bench`, without bench's own options and the
/// trace paths: the pipeline flags a whole-process run is given.
fn forwarded_pipeline_flags() -> Vec<String> {
    let argv: Vec<String> = std::env::args().collect();
    let start = argv
        .iter()
        .position(|a| a == "bench")
        .map_or(argv.len(), |i| i + 1);
    forwarded_of(&argv[start..], &bench_flag_spellings())
}

/// How one of `bench`'s flags is written, and whether a whole-process run
/// is given it.
struct BenchFlagSpelling {
    /// `--name`s, the aliases included.
    longs: Vec<String>,
    /// `-c`s, the aliases included.
    shorts: Vec<char>,
    takes_value: bool,
    forwarded: bool,
}

/// `bench`'s flags as clap declares them. Forwarded are those a replay
/// takes the same way: the pipeline's, the trace filter's, `--classes` and
/// the read mode. Every other flag is `bench`'s own, so a flag added to
/// `bench` later is kept from the runs it times unless it is made one of
/// these (a hand list of `bench`'s own flags once had to be kept in step,
/// and a flag missing from it made every run exit 2).
fn bench_flag_spellings() -> Vec<BenchFlagSpelling> {
    use clap::CommandFactory as _;
    let ids_of = |cmd: clap::Command| -> Vec<String> {
        cmd.get_arguments()
            .map(|a| a.get_id().as_str().to_string())
            .collect()
    };
    let mut forwarded = ids_of(PipelineArgs::augment_args(clap::Command::new("pipeline")));
    forwarded.extend(ids_of(TraceFilterArg::augment_args(clap::Command::new(
        "filter",
    ))));
    forwarded.extend(["classes", "mmap", "no_mmap"].map(String::from));
    let cli = Cli::command();
    let Some(bench) = cli.find_subcommand("bench") else {
        return Vec::new();
    };
    bench
        .get_arguments()
        .filter(|a| !a.is_positional())
        .map(|a| BenchFlagSpelling {
            longs: a
                .get_long()
                .into_iter()
                .chain(a.get_all_aliases().unwrap_or_default())
                .map(String::from)
                .collect(),
            shorts: a
                .get_short()
                .into_iter()
                .chain(a.get_all_short_aliases().unwrap_or_default())
                .collect(),
            takes_value: a.get_action().takes_values(),
            forwarded: forwarded.iter().any(|f| f == a.get_id().as_str()),
        })
        .collect()
}

/// The forwarded flags of `args` (a `bench` command line that clap has
/// taken, after the word `bench`), each with its value, as written:
/// `--name value`, `--name=value`, `-x value` or `-xvalue`. Words that are
/// no flag's value are traces, and so is every word after `--`.
fn forwarded_of(args: &[String], flags: &[BenchFlagSpelling]) -> Vec<String> {
    let mut out = Vec::new();
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if word == "--" {
            break;
        }
        let (flag, value_inline) = if let Some(long) = word.strip_prefix("--") {
            let (name, value) = long
                .split_once('=')
                .map_or((long, None), |(n, v)| (n, Some(v)));
            (
                flags.iter().find(|f| f.longs.iter().any(|l| l == name)),
                value.is_some(),
            )
        } else if let Some(cluster) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            out.extend(forwarded_of_cluster(cluster, &mut words, flags));
            continue;
        } else {
            continue;
        };
        let Some(flag) = flag else {
            // Not one of bench's flags: clap would have refused the line,
            // so this is not reached; passed on, the run says what it is.
            out.push(word.clone());
            continue;
        };
        let value = if flag.takes_value && !value_inline {
            words.next()
        } else {
            None
        };
        if flag.forwarded {
            out.push(word.clone());
            out.extend(value.cloned());
        }
    }
    out
}

/// The forwarded flags of one word of short flags, `-` taken off
/// (`nfudp` for `-nfudp`, as clap takes `-n -f udp`): a flag that takes a
/// value ends the word, its value the rest of the word or else the next
/// one. A word that is one forwarded flag is passed on as written;
/// otherwise each forwarded flag of the word goes on by itself.
fn forwarded_of_cluster<'a>(
    cluster: &str,
    words: &mut impl Iterator<Item = &'a String>,
    flags: &[BenchFlagSpelling],
) -> Vec<String> {
    let mut taken: Vec<(char, &BenchFlagSpelling, Option<String>)> = Vec::new();
    for (at, c) in cluster.char_indices() {
        let Some(flag) = flags.iter().find(|f| f.shorts.contains(&c)) else {
            // Not one of bench's flags: clap would have refused the line.
            return vec![format!("-{cluster}")];
        };
        if flag.takes_value {
            let rest = &cluster[at + c.len_utf8()..];
            let value = if rest.is_empty() {
                words.next().cloned()
            } else {
                Some(rest.to_string())
            };
            taken.push((c, flag, value));
            break;
        }
        taken.push((c, flag, None));
    }
    match taken.as_slice() {
        [(_, flag, value)] if flag.forwarded => {
            let mut one = vec![format!("-{cluster}")];
            // A value in the same word is in `cluster` already.
            if cluster.chars().count() == 1 {
                one.extend(value.clone());
            }
            one
        }
        _ => taken
            .into_iter()
            .filter(|(_, flag, _)| flag.forwarded)
            .flat_map(|(c, _, value)| std::iter::once(format!("-{c}")).chain(value))
            .collect(),
    }
}

/// Where a `bench` is, for the line SIGUSR1 asks for: set before each run
/// (a lock a run, never a packet), read by the thread that answers.
struct BenchProgress {
    at: std::sync::Mutex<String>,
    started: std::time::Instant,
}

impl BenchProgress {
    fn set(&self, line: String) {
        if let Ok(mut at) = self.at.lock() {
            *at = line;
        }
    }

    fn line(&self) -> String {
        let at = self.at.lock().map(|a| a.clone()).unwrap_or_default();
        format!(
            "flowsieve: progress: bench: {at}; {:.1} s",
            self.started.elapsed().as_secs_f64()
        )
    }
}

/// Answers SIGUSR1 at once with the line `line` makes, from a thread of
/// its own that sleeps until the signal comes (`bench`, `reproduce`).
/// Why not a flag checked between steps, as a replay checks one between
/// runs of records: a bench's run of a large trace, or an experiment's
/// simulation, takes seconds or more, and a thread polling a flag would
/// wake inside the runs `bench` times. Without the thread (the signal
/// cannot be hooked), SIGUSR1 is still caught by `progress_requests` and
/// ignored, as before.
fn answer_progress(
    bar: Option<indicatif::ProgressBar>,
    line: impl Fn() -> String + Send + 'static,
) {
    if let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR1]) {
        let _ = std::thread::Builder::new()
            .name("flowsieve-usr1".into())
            .spawn(move || {
                for _ in signals.forever() {
                    let line = line();
                    match &bar {
                        Some(b) => b.suspend(|| eprintln!("{line}")),
                        None => eprintln!("{line}"),
                    }
                }
            });
    }
}

/// Where a `reproduce` is, for the line SIGUSR1 asks for: the experiment
/// (its index in the chosen ones) and the fraction of it done, as the
/// experiments report it to their bar.
struct ReproduceProgress {
    experiment: std::sync::atomic::AtomicUsize,
    fraction_bits: std::sync::atomic::AtomicU64,
    ids: Vec<&'static str>,
    started: std::time::Instant,
}

impl ReproduceProgress {
    fn line(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let i = self.experiment.load(Relaxed);
        let fraction = f64::from_bits(self.fraction_bits.load(Relaxed));
        format!(
            "flowsieve: progress: reproduce: experiment {} of {}, {}, {:.0} % of it; {:.1} s",
            i + 1,
            self.ids.len(),
            self.ids.get(i).copied().unwrap_or("?"),
            fraction * 100.0,
            self.started.elapsed().as_secs_f64()
        )
    }
}

fn run_bench(args: BenchArgs) -> u8 {
    // bench runs the pipeline once per count of --threads-list, so a
    // --threads would be ignored without a word.
    if let Some(n) = args.pipeline.threads {
        return fail(
            exit::USAGE,
            format!(
                "bench: --threads does not apply: the pipeline runs at each count of --threads-list (such as --threads-list {n})"
            ),
        );
    }
    // Checked here so that the line names the flag given: the pipeline's
    // own check of each count said "threads".
    let max = flowsieve::pipeline::MAX_THREADS;
    if let Some(n) = args.threads_list.iter().find(|n| !(1..=max).contains(*n)) {
        return fail(
            exit::USAGE,
            format!("--threads-list: must be between 1 and {max} (got {n})"),
        );
    }
    if let Some(n) = args
        .threads_list
        .iter()
        .enumerate()
        .find_map(|(i, n)| args.threads_list[..i].contains(n).then_some(n))
    {
        return fail(
            exit::USAGE,
            format!("--threads-list: {n} is given twice; each count runs once"),
        );
    }
    let expression = match args.read.filter_expression(&args.traces, &args.filter) {
        Ok(e) => e,
        Err(code) => return code,
    };
    let filter = match compile_filter(expression.as_deref(), &args.filter.source()) {
        Ok(f) => f,
        Err(code) => return code,
    };
    // What tcpdump is given for the same filter.
    let tcpdump_filter: Vec<String> = match (&args.filter.file, &expression) {
        (Some(path), _) => vec!["-F".into(), path.display().to_string()],
        (None, Some(e)) => vec![e.clone()],
        (None, None) => Vec::new(),
    };
    // No size for `auto`: the rows run in this process back to back, and
    // keep the page policy every earlier round measured them with.
    let cfg = match configure(&args.classes, &args.pipeline, None, |c| {
        c.replay.truth = false;
        c.replay.filter = filter;
        if args.no_mmap && !args.mmap {
            c.replay.read_mode = ReadMode::Read;
        }
    }) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !(1..=flowsieve::bench::MAX_ROUNDS).contains(&args.rounds) {
        return fail(
            exit::USAGE,
            format!(
                "--rounds: must be between 1 and {} (got {})",
                flowsieve::bench::MAX_ROUNDS,
                args.rounds
            ),
        );
    }
    let gap = std::time::Duration::from_nanos(args.gap.map_or(0, |g| g.0));
    if let Some(g) = args.gap.filter(|_| gap > flowsieve::bench::MAX_GAP) {
        return fail(
            exit::USAGE,
            format!(
                "--gap: at most {}s (got {g})",
                flowsieve::bench::MAX_GAP.as_secs()
            ),
        );
    }
    let traces = traces_or_default(args.read.named(&args.traces));
    if let Err(code) = check_outputs(&[(args.json.as_deref(), "bench figures")], &traces) {
        return code;
    }
    // Each round reads every trace again, which a stream cannot give; and
    // opening a FIFO would wait for a writer before any check. (A directory
    // or a missing file is left to the reader's own one-line error.)
    for t in &traces {
        let stream = t.as_os_str() == flowsieve::ingest::STDIN_PATH
            || std::fs::metadata(t).is_ok_and(|m| !m.is_file() && !m.is_dir());
        if stream {
            return fail(
                exit::USAGE,
                format!(
                    "{}: bench reads each trace once per round, so it needs a regular file \
                     (not standard input, a FIFO or a device)",
                    t.display()
                ),
            );
        }
    }
    let stop = on_interrupt(true);
    let bar = progress_bar(args.rounds as u64, "rounds");
    let at = std::sync::Arc::new(BenchProgress {
        at: std::sync::Mutex::new("reading the traces into memory for the preloaded rows".into()),
        started: std::time::Instant::now(),
    });
    answer_progress(Some(bar.clone()), {
        let at = std::sync::Arc::clone(&at);
        move || at.line()
    });
    let mut on_run = |run: flowsieve::bench::BenchAt<'_>| {
        if run.part == flowsieve::bench::BenchPart::InProcess {
            bar.set_position(run.round as u64 - 1);
        }
        at.set(run.line());
    };
    let measured = flowsieve::bench::bench_until(
        &traces,
        &cfg,
        &args.threads_list,
        args.rounds,
        if args.no_memory {
            &[]
        } else {
            &flowsieve::bench::LATENCY_WORKING_SETS
        },
        &stop,
        &mut on_run,
    );
    bar.finish_and_clear();
    let mut report = match measured {
        Ok(r) => r,
        Err(flowsieve::bench::BenchError::Config(e)) => return fail(exit::USAGE, e),
        Err(e @ flowsieve::bench::BenchError::Interrupted { .. }) => {
            return fail(exit::INTERRUPTED, e);
        }
        Err(e) => return fail(exit::FAILURE, e),
    };
    if !args.no_tcpdump {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("flowsieve"));
        let mut forwarded = forwarded_pipeline_flags();
        // The words after -r FILE are no flag, so they are not among the
        // flags passed on: the runs get the expression as -f.
        if let Some(e) = expression
            .as_ref()
            .filter(|_| args.read.arguments_are_expression(&args.traces))
        {
            forwarded.extend(["-f".to_string(), e.clone()]);
        }
        match flowsieve::bench::compare_with_tcpdump(
            &exe,
            &forwarded,
            &tcpdump_filter,
            &traces,
            report.packets,
            args.rounds,
            gap,
            args.tshark,
            &stop,
            &mut on_run,
        ) {
            Ok(c) => report.tcpdump = Some(c),
            Err(e) => report.tcpdump_note = Some(e.0),
        }
    }
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return fail(exit::INTERRUPTED, "bench: interrupted");
    }
    // With the JSON on standard output (`--json -`), it goes there alone.
    // The JSON file is written even when standard output has no reader.
    let printed = if args.json.as_deref().is_some_and(writes_stdout) {
        Ok(())
    } else {
        print_out(&report)
    };
    if let Some(path) = &args.json
        && let Err(code) = write_json(
            path,
            serde_json::to_string_pretty(&report).unwrap_or_default(),
        )
    {
        return code;
    }
    printed.err().unwrap_or(exit::OK)
}

#[derive(Args)]
struct GenTraceArgs {
    /// Output file (`-`: standard output, which must not be a terminal).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Distinct flows.
    #[arg(long, default_value_t = SynthConfig::default().flows)]
    flows: u64,
    /// Packets in all (at least --flows).
    #[arg(long, default_value_t = SynthConfig::default().packets)]
    packets: u64,
    /// Zipf exponent of flow sizes.
    #[arg(long, default_value_t = SynthConfig::default().zipf_exponent)]
    zipf: f64,
    /// Share of IPv6 flows.
    #[arg(long, default_value_t = SynthConfig::default().ipv6_share)]
    ipv6_share: f64,
    /// Share of flows with an 802.1Q tag.
    #[arg(long, default_value_t = SynthConfig::default().vlan_share)]
    vlan_share: f64,
    /// Relative weights of TCP, UDP and ICMP flows.
    #[arg(long, default_value_t = ProtoMix(SynthConfig::default().proto_weights), value_name = "TCP,UDP,ICMP")]
    proto_mix: ProtoMix,
    /// Frame sizes: `realistic`, or `MIN-MAX` for uniform lengths in bytes
    /// (MAX at most 9000), each raised to its flow's headers where they are
    /// longer: 42 bytes for IPv4 UDP or ICMP to 78 for tagged IPv6 TCP.
    #[arg(long, default_value_t = SynthConfig::default().sizes)]
    sizes: SizeModel,
    /// Bytes stored per frame (0: whole frames).
    #[arg(long, default_value_t = SynthConfig::default().snaplen)]
    snaplen: u32,
    /// Seconds over which arrivals are spread.
    #[arg(long, default_value_t = SynthConfig::default().span_secs)]
    span: f64,
    /// Start time, seconds since the epoch.
    #[arg(long, default_value_t = SynthConfig::default().start_secs)]
    start: f64,
    /// Random seed.
    #[arg(long, default_value_t = SynthConfig::default().seed)]
    seed: u64,
    /// Output container: pcap, pcap-ns or pcapng.
    #[arg(long, default_value_t = SynthConfig::default().format)]
    format: OutputFormat,
}

/// A refused generator setting's line, naming the gen-trace flag that
/// sets it (`--zipf`, where the library names `zipf_exponent`).
fn synth_error_line(e: SynthError) -> String {
    let SynthError::Invalid { setting, problem } = &e else {
        return e.to_string();
    };
    let flag = match *setting {
        "flows" => "--flows",
        "packets" => "--packets",
        "zipf_exponent" => "--zipf",
        "ipv6_share" => "--ipv6-share",
        "vlan_share" => "--vlan-share",
        "proto_weights" => "--proto-mix",
        "start_secs" => "--start",
        "span_secs" => "--span",
        "start_secs + span_secs" => "--start + --span",
        "sizes" => "--sizes",
        _ => return e.to_string(),
    };
    format!("{flag}: {problem}")
}

fn run_gen_trace(a: GenTraceArgs) -> u8 {
    let cfg = SynthConfig {
        flows: a.flows,
        packets: a.packets,
        zipf_exponent: a.zipf,
        ipv6_share: a.ipv6_share,
        vlan_share: a.vlan_share,
        proto_weights: a.proto_mix.0,
        sizes: a.sizes,
        snaplen: a.snaplen,
        start_secs: a.start,
        span_secs: a.span,
        seed: a.seed,
        format: a.format,
    };
    // Checked before the output is created: a refused setting leaves no
    // file behind, and a failure part-way leaves no half-written trace
    // under the name asked for (written beside it, then renamed).
    if let Err(e) = cfg.validate() {
        return fail(exit::USAGE, synth_error_line(e));
    }
    // `-o -` streams the trace into a pipe (`gen-trace -o - | flowsieve -`),
    // as `tcpdump -w -` does. The summary line then goes to stderr, where it
    // cannot end up inside the trace, and a terminal is refused before any
    // work: a binary trace would only garble it.
    let to_stdout = writes_stdout(&a.output);
    if to_stdout && std::io::stdout().is_terminal() {
        return fail(
            exit::USAGE,
            "gen-trace: standard output is a terminal; write the trace to a file (-o FILE) or a pipe (-o - | ...)",
        );
    }
    // A directory, a folder that is not there, or one no file can be
    // created in: exit 2 before any work, as every other output's check
    // does (it used to be exit 1 after the generator had started, with
    // "entity not found").
    if !to_stdout && let Err(e) = flowsieve::report::check_file_target(&a.output, "trace") {
        return fail(exit::USAGE, e);
    }
    let name = if to_stdout {
        "standard output".to_owned()
    } else {
        a.output.display().to_string()
    };
    // Ctrl-C (or SIGTERM) stops at the next progress point; the temporary
    // file is removed, so nothing is left under the name asked for.
    let stop = on_interrupt(true);
    let bar = progress_bar(cfg.packets, "packets");
    let info = progress_requests();
    let started = std::time::Instant::now();
    let mut progress = |done: u64| {
        bar.set_position(done);
        // SIGUSR1: one line, as `dd` answers it (at the generator's next
        // progress point, every 65,536 packets).
        if info.swap(false, std::sync::atomic::Ordering::Relaxed) {
            let seconds = started.elapsed().as_secs_f64();
            let line = format!(
                "flowsieve: progress: {name}: {done} of {} packets in {seconds:.2} s",
                cfg.packets
            );
            bar.suspend(|| eprintln!("{line}"));
        }
        !stop.load(std::sync::atomic::Ordering::Relaxed)
    };
    // Standard output is written through a duplicate of its descriptor
    // (see `write_atomically_with`), never renamed over. It is named by
    // its `/proc` link: were that ever renamed over, the rename would fail
    // there, where over `/dev/stdout` it would replace the machine's link.
    let target = if to_stdout {
        Path::new("/proc/self/fd/1")
    } else {
        a.output.as_path()
    };
    let written = flowsieve::report::write_atomically_with(target, |w| {
        generate_with_progress(&cfg, w, &mut progress).map_err(std::io::Error::other)
    })
    .map_err(|e| {
        let message = e.to_string();
        match e.into_inner().map(|r| r.downcast::<SynthError>()) {
            Some(Ok(s)) => *s,
            _ => SynthError::Write(message),
        }
    });
    bar.finish_and_clear();
    match written {
        Ok(s) => {
            let summary = format!(
                "wrote {name}: {} packets, {} flows (largest {} packets), {} wire bytes, {} captured bytes",
                s.packets, s.flows, s.largest_flow, s.wire_bytes, s.captured_bytes
            );
            if to_stdout {
                eprintln!("{summary}");
            } else if let Err(code) = print_out(format_args!("{summary}\n")) {
                return code;
            }
            exit::OK
        }
        Err(e @ (SynthError::Config(_) | SynthError::Invalid { .. })) => {
            fail(exit::USAGE, synth_error_line(e))
        }
        Err(e @ SynthError::Interrupted { .. }) if to_stdout => fail(
            exit::INTERRUPTED,
            format!("{name}: {e}; the trace written so far stops short"),
        ),
        Err(e @ SynthError::Interrupted { .. }) => fail(
            exit::INTERRUPTED,
            format!("{name}: {e}; nothing was written"),
        ),
        Err(e) => fail(exit::FAILURE, format!("{name}: {e}")),
    }
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Bloom filter false-positive rate (Summary Cache): approximate for
    /// --m-over-n, or for --m/--n (exact with --exact).
    Bloom(WithJson<BloomQuery>),
    /// Counting-filter count thresholding (Kim et al. 2019): kappa*(theta),
    /// its linear fit, k_opt, and the false-positive rate.
    Threshold(WithJson<ThresholdQuery>),
    /// The Bloom paradox (Theorem 1): the prior below which a positive
    /// answer should be ignored (--m-over-n), or the bits per element needed
    /// to escape it (--prior).
    Paradox(WithJson<ParadoxQuery>),
    /// Membership probability from a counting filter's counters (Theorem 2),
    /// and with --alpha the cost-optimal decision (Theorem 4).
    CbfPosterior(WithJson<CbfPosteriorQuery>),
    /// Optimal order of queries across proxies with a special proxy that
    /// has everything (Theorems 6 and 7), and its expected cost.
    QueryOrder(WithJson<QueryOrderQuery>),
    /// Recycling Bloom filters (Dozier et al.): the long-term average
    /// false-positive rate for --sigma, the N-bounded rates for --n-bounded,
    /// or the sizing for --target-fpr.
    Recycle(WithJson<RecycleQuery>),
    /// Compressed Bloom filters (Mitzenmacher): the (m/n, k) with the lowest
    /// false-positive rate whose compressed size fits a transmission budget.
    Compressed(WithJson<CompressedQuery>),
}

/// A model query and `--json`.
#[derive(Args)]
struct WithJson<Q: Args> {
    #[command(flatten)]
    query: Q,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Prints a model's answer as text or one JSON object; an error names
/// the flags of `Q`, the query asked.
fn answer<Q: clap::Args, A: Serialize + Display>(json: bool, a: Result<A, ModelError>) -> u8 {
    match a {
        Ok(a) if json => {
            let json = serde_json::to_string(&a).unwrap_or_default();
            print_out(format_args!("{json}\n"))
                .err()
                .unwrap_or(exit::OK)
        }
        Ok(a) => print_out(format_args!("{a}\n")).err().unwrap_or(exit::OK),
        Err(e) => fail(exit::USAGE, model_error_line::<Q>(&e)),
    }
}

fn run_model(cmd: ModelCommand) -> u8 {
    match cmd {
        ModelCommand::Bloom(a) => answer::<BloomQuery, _>(a.json, a.query.answer()),
        ModelCommand::Threshold(a) => answer::<ThresholdQuery, _>(a.json, a.query.answer()),
        ModelCommand::Paradox(a) => answer::<ParadoxQuery, _>(a.json, a.query.answer()),
        ModelCommand::CbfPosterior(a) => answer::<CbfPosteriorQuery, _>(a.json, a.query.answer()),
        ModelCommand::QueryOrder(a) => answer::<QueryOrderQuery, _>(a.json, a.query.answer()),
        ModelCommand::Recycle(a) => answer::<RecycleQuery, _>(a.json, a.query.answer()),
        ModelCommand::Compressed(a) => answer::<CompressedQuery, _>(a.json, a.query.answer()),
    }
}

fn main() -> ExitCode {
    // First of all, so that a run's `start-up` counts the command line too.
    flowsieve::pipeline::mark_process_start();
    let cli = match parse_command_line() {
        Ok((c, m)) => {
            remember_given_flags(&m);
            c
        }
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::from(exit::OK);
            }
            let line = match e.kind() {
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    missing_subcommand_line().unwrap_or_else(|| clap_error_on_one_line(&e))
                }
                _ => clap_error_on_one_line(&e),
            };
            let code = fail(exit::USAGE, line);
            print_error_line();
            return ExitCode::from(code);
        }
    };
    // Commands without a graceful stop of their own end at once on Ctrl-C
    // or SIGTERM, with exit 130: their outputs are written atomically, so
    // nothing half-written is left. gen-trace and bench stop at their next
    // check instead, live prints its final report, and a replay stops
    // reading and reports what it read (or, stalled on a pipe, ends a
    // second later: see `progress::watch_for_stalls`); so does a probe
    // (it registers its own stop, as a collector does), which publishes
    // the windows of what it read.
    let replay_stop =
        matches!(cli.command, None | Some(Command::Replay(_))).then(|| on_interrupt(true));
    if matches!(
        cli.command,
        Some(Command::Model(_)) | Some(Command::Reproduce(_)) | Some(Command::Results(_))
    ) {
        on_interrupt(false);
    }
    if !matches!(cli.command, Some(Command::Live(_))) {
        progress_requests();
    }
    let code = match cli.command {
        None => run_replay(cli.replay, replay_stop),
        Some(Command::Replay(a)) => run_replay(*a, replay_stop),
        Some(Command::GenTrace(a)) => run_gen_trace(a),
        Some(Command::Bench(a)) => run_bench(*a),
        Some(Command::Model(m)) => run_model(m),
        Some(Command::Reproduce(a)) => run_reproduce(a),
        Some(Command::Live(a)) => live_cmd::run_live(*a),
        Some(Command::Inject(a)) => live_cmd::run_inject(a),
        Some(Command::Probe(a)) => network_cmd::run_probe(*a),
        Some(Command::Collect(a)) => network_cmd::run_collect(*a),
        Some(Command::Results(a)) => network_cmd::run_results(*a),
    };
    print_error_line();
    // After a run that went through (an error is its one line alone).
    if matches!(code, exit::OK | exit::DAMAGED_INPUT | exit::ANOMALIES) {
        let notes = STAGE_NOTES.lock().map(|n| n.clone()).unwrap_or_default();
        for n in notes {
            eprintln!("flowsieve: note: {n}");
        }
    }
    ExitCode::from(code)
}
