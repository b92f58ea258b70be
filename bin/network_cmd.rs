//! `flowsieve probe`, `collect` and `results`: the network-wide mode's
//! front end (the library's `network` module does the work).

use super::{Progress, RunArgs, emit_report, exit, fail, traces_or_default};
use clap::Args;
use flowsieve::filter::CounterLayout;
use flowsieve::ingest::{DurationNs, TraceFilter};
use flowsieve::network::NetworkConfig;
use flowsieve::network::collector::{CollectOptions, collect};
use flowsieve::network::collector_beat::{CollectorState, ShardCollector};
use flowsieve::network::probe::{Exporter, ProbeOptions};
use flowsieve::network::results::assemble;
use flowsieve::network::transport::{self, NetError, check_probe_id};
use flowsieve::network::uncollected_shard::{shard_list, shards_by};
use flowsieve::network::unmerged_shard::UnmergedShard;
use flowsieve::pipeline::{
    FileSource, NoEvents, PipelineSink, StageName, ValidatedConfig, WindowSpec, run,
};
use flowsieve::report::Section;
use std::path::PathBuf;
use std::time::Duration;

/// Where the server is and how to talk to it.
/// How this process talks to the server once connected: shared by
/// `probe`/`live` (where the server is optional) and `collect`/`results`
/// (where it is required).
#[derive(Args)]
pub(crate) struct ServerArgs {
    /// Copies of the stream and buckets, when this process creates them
    /// (3 on a three-node cluster).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=5), help_heading = "Network")]
    replicas: u16,
    /// Timeout of one server request.
    #[arg(
        long,
        default_value = "5s",
        value_name = "DURATION",
        help_heading = "Network"
    )]
    request_timeout: DurationNs,
}

#[derive(Args)]
pub(crate) struct NatsArgs {
    /// The NATS server (JetStream enabled), such as nats://127.0.0.1:4222,
    /// or several of a cluster separated by commas.
    #[arg(long, value_name = "URL", value_parser = nats_servers, help_heading = "Network")]
    nats: String,
    #[command(flatten)]
    server: ServerArgs,
}

/// What a probe exports and where: `flowsieve probe`'s flags, and
/// `flowsieve live`'s when it runs as a probe (`--nats` given). `--nats`
/// and `--probe-id` go together (checked before any work).
#[derive(Args)]
pub(crate) struct ExportArgs {
    /// The NATS server (JetStream enabled), such as nats://127.0.0.1:4222,
    /// or several of a cluster separated by commas.
    #[arg(long = "nats", value_name = "URL", value_parser = nats_servers, help_heading = "Network")]
    url: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
    /// This probe's id: 1 to 64 of letters, digits, '_' and '-'.
    #[arg(long, value_name = "ID", help_heading = "Network")]
    probe_id: Option<String>,
    /// Probes in the network, P: a flow is exported as a candidate when
    /// its local estimate reaches ceil(theta / P).
    #[arg(long, default_value_t = 1, value_name = "P", value_parser = clap::value_parser!(u32).range(1..=65_536), help_heading = "Network")]
    probes: u32,
    /// Bits of the per-window presence filter (flows seen), over all shards.
    #[arg(long, default_value_t = 1 << 20, value_name = "N", value_parser = clap::value_parser!(u64).range(64..=(1u64 << 32)), help_heading = "Network")]
    presence_bits: u64,
    /// Hash functions of the presence filter.
    #[arg(long, default_value_t = 4, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=32), help_heading = "Network")]
    presence_k: u32,
    /// Windows of digests kept while the server is unreachable; older ones
    /// are dropped and their windows reported as partial. (A replay with
    /// the server answering waits at this bound instead of dropping.)
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000), help_heading = "Network")]
    buffer_windows: u64,
    /// How long to keep trying to deliver after the input ended.
    #[arg(
        long,
        default_value = "30s",
        value_name = "DURATION",
        help_heading = "Network"
    )]
    flush_timeout: DurationNs,
    /// Digests larger than this many bytes are stored in the object store
    /// bucket flowsieve-digests and the stream carries a pointer (default:
    /// the server's max_payload less 1 KiB, which is also the ceiling).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1024..=(8u64 << 20)), help_heading = "Network")]
    max_message: Option<u64>,
}

impl ExportArgs {
    /// Whether these flags ask for a probe (`--nats` or `--probe-id`
    /// given; [`start_export`] then insists on both).
    pub(crate) fn is_probe(&self) -> bool {
        self.url.is_some() || self.probe_id.is_some()
    }
}

/// `flowsieve probe`.
#[derive(Args)]
pub(crate) struct ProbeArgs {
    /// Trace files to replay as this probe (default: the bundled trace).
    traces: Vec<PathBuf>,
    #[command(flatten)]
    read: super::ReadArg,
    #[command(flatten)]
    export: ExportArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Write heavy-flow and new-flow events as JSON lines to FILE (`-` for
    /// stdout, which then carries them alone, without the text report).
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    events: Option<PathBuf>,
    #[command(flatten)]
    filter: super::TraceFilterArg,
}

/// `flowsieve collect`.
#[derive(Args)]
pub(crate) struct CollectArgs {
    #[command(flatten)]
    nats: NatsArgs,
    /// The shards this collector owns: a range such as 0-3, or a list
    /// such as 0,2,5.
    #[arg(long, value_name = "LIST")]
    shards: String,
    /// How long a window waits for missing probes before it is written as
    /// partial. A digest that comes after its window was written is not
    /// merged; its probe is noted in the result's `late` list, which
    /// `flowsieve results` shows.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    lateness: DurationNs,
    /// How long to wait for a probe to write the shared configuration.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    config_wait: DurationNs,
    /// Exit once every declared probe has finished, nothing is pending here
    /// or at the server (no digest undelivered or unacknowledged), and no
    /// digest came for this long (default: run until Ctrl-C).
    #[arg(long, value_name = "DURATION")]
    exit_when_done: Option<DurationNs>,
    /// A line on stderr per shard-window written.
    #[arg(short, long)]
    verbose: bool,
    /// How often the collector writes its beat to the server (100ms to
    /// 1h): `flowsieve results` takes a collector whose last beat is more
    /// than three periods old, and that did not say it stopped, for
    /// silent (killed, or cut off from the server).
    #[arg(long, default_value = "3s", value_name = "DURATION")]
    heartbeat: DurationNs,
    /// Take the shards of a collector that still counts as running rather
    /// than refuse them (with a warning naming it): for one known to be
    /// gone, such as one killed on another host, whose beats count as
    /// running for three periods. If it does still run, it stops at its
    /// next beat (exit 1), and until then the two split those shards'
    /// digests.
    #[arg(long)]
    take_over: bool,
}

/// The shortest and longest `collect --heartbeat`.
const HEARTBEAT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(3600);

/// `flowsieve results`.
#[derive(Args)]
pub(crate) struct ResultsArgs {
    #[command(flatten)]
    nats: NatsArgs,
    /// Only this window (its index from the Unix epoch). Reads only its
    /// results and the window before it's (for its new flows).
    #[arg(long, value_name = "W")]
    window: Option<u64>,
    /// Write the report as JSON to FILE (`-` for stdout, which then carries
    /// it alone, without the text report).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the report's tables as CSV files into DIR, as replay's
    /// `--csv DIR` does: network_windows.csv, network_heavy.csv (every
    /// heavy flow) and network_classes.csv.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// Write figures over windows (packets; distinct and new flows; heavy
    /// flows and candidates) as CSV, SVG and PNG into DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Heavy flows listed per window in the text report.
    #[arg(long, default_value_t = 10, value_name = "N")]
    top: usize,
    /// Do not print the text report.
    #[arg(short, long)]
    quiet: bool,
}

fn runtime() -> Result<tokio::runtime::Runtime, u8> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            fail(
                exit::FAILURE,
                format!("cannot start the network runtime: {e}"),
            )
        })
}

fn timeout(d: DurationNs) -> Duration {
    Duration::from_nanos(d.0)
}

/// The shared configuration this probe's flags describe, or why they
/// cannot run as a probe (exit 2).
fn network_config(args: &ExportArgs, cfg: &ValidatedConfig) -> Result<NetworkConfig, String> {
    let c = cfg.config();
    if !c.stages.contains(StageName::Heavy) {
        return Err("a probe needs the heavy stage (--stages must include heavy)".into());
    }
    let WindowSpec::Time(window_ns) = c.heavy.window else {
        return Err(
            "a probe needs a time window (--window-packets does not align across probes)".into(),
        );
    };
    if c.heavy.layout != CounterLayout::Partitioned {
        return Err("a probe exports the partitioned layout only (drop --layout blocked)".into());
    }
    let heavy = c.heavy.validate(c.shards).map_err(|e| e.to_string())?;
    let n = NetworkConfig {
        version: 1,
        shards: c.shards as u32,
        window_ns,
        theta: c.heavy.theta,
        counters: c.heavy.counters as u64,
        counter_bits: c.heavy.width.bits(),
        k: heavy.k() as u32,
        conservative: c.heavy.conservative,
        presence_bits: args.presence_bits,
        presence_k: args.presence_k,
        hash_key: c.replay.hash_key.to_string(),
        probes: args.probes,
        classes: c.replay.classifier.names().to_vec(),
    };
    n.validate()?;
    Ok(n)
}

/// Agrees on the shared configuration (when the server answers), starts
/// the exporter, and validates the run's configuration with the export
/// tap and epoch windows. `blocking`: the shards wait for the exporter
/// (a replay) instead of dropping a digest (a live capture).
/// `capture_rings`: a live capture's ring bytes, stated and checked with
/// the rest (0 for a replay).
pub(crate) fn start_export(
    x: &ExportArgs,
    run: &RunArgs,
    traces: &[PathBuf],
    filter: Option<TraceFilter>,
    blocking: bool,
    capture_rings: u64,
) -> Result<(Exporter, ValidatedConfig), u8> {
    let (Some(url), Some(probe_id)) = (&x.url, &x.probe_id) else {
        return Err(fail(
            exit::USAGE,
            "a probe needs both --nats URL and --probe-id ID",
        ));
    };
    check_probe_id(probe_id).map_err(|e| fail(exit::USAGE, e))?;
    // A live probe passes no traces, and so no size.
    let trace_bytes = flowsieve::ingest::plain_trace_bytes(traces);
    let plain = run.configure(trace_bytes, |c| {
        c.epoch_windows = true;
        c.capture_rings = capture_rings;
        // Read for the network's settings only, never run: no thread for
        // a model rate that no report of it will carry.
        c.new_flows.model = false;
        c.heavy.model = false;
    })?;
    let net = network_config(x, &plain).map_err(|e| fail(exit::USAGE, e))?;
    // A probe joins the network before it reads: a trace it cannot open
    // would have it wait out --flush-timeout for an unreachable server and
    // then declare itself finished with nothing. So a path that cannot be
    // opened ends the run here, after the flags and before any connection,
    // as `tcpdump -r` does.
    for t in traces {
        flowsieve::ingest::TraceReader::check_openable(t).map_err(|e| fail(exit::FAILURE, e))?;
    }
    let rt = runtime()?;
    let request_timeout = timeout(x.server.request_timeout);
    // Agree on the configuration before any work when the server is up; a
    // probe that cannot reach it monitors locally and checks on connect.
    let agreed = rt.block_on(async {
        let n = transport::connect(
            url,
            "flowsieve-probe",
            false,
            request_timeout.min(Duration::from_secs(2)),
        )
        .await?;
        n.ensure(usize::from(x.server.replicas)).await?;
        let shared = n.agree_config(&net).await?;
        // Only the probes still running are known to be in the way
        // before the first window; the rest is checked when it is known.
        n.check_room(&shared, probe_id, None).await
    });
    match agreed {
        Ok(()) => {}
        Err(e @ (NetError::Config(_) | NetError::TooManyProbes { .. })) => {
            return Err(fail(exit::USAGE, format!("{url}: {e}")));
        }
        Err(e) => eprintln!(
            "flowsieve: warning: {e}; monitoring locally, up to {} windows of digests are kept until the server answers",
            x.buffer_windows
        ),
    }
    drop(rt);
    let exporter = Exporter::start(
        net,
        ProbeOptions {
            url: url.clone(),
            probe: probe_id.clone(),
            replicas: usize::from(x.server.replicas),
            buffer_windows: x.buffer_windows as usize,
            flush_timeout: timeout(x.flush_timeout),
            request_timeout,
            blocking,
            max_message: x.max_message.map(|b| b as usize),
        },
    )
    .map_err(|e| fail(exit::FAILURE, e))?;
    let export = exporter.window_export();
    let cfg = run.configure(trace_bytes, |c| {
        c.epoch_windows = true;
        c.capture_rings = capture_rings;
        c.export = Some(export);
        c.replay.filter = filter;
        c.new_flows.model = run.report_is_read();
        c.heavy.model = run.report_is_read();
    })?;
    Ok((exporter, cfg))
}

/// How long a probe's final flush may take before the run says it is
/// waiting (see [`finish_export`]).
const FLUSH_WAIT_NAMED_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits for the exporter to deliver (at most the flush timeout) and
/// returns the exit code: `code` when everything was delivered, else 1 with
/// one line saying what was not.
pub(crate) fn finish_export(exporter: Exporter, x: &ExportArgs, quiet: bool, code: u8) -> u8 {
    // With the server away the wait lasts the whole flush timeout (30 s
    // by default), and a run that printed nothing for that long after its
    // input ended, or after Ctrl-C, looked hung: a wait past a second is
    // named, whatever holds it up.
    // From here an interrupt's line says that digests are lost, not that
    // the probe was stopping.
    super::delivering_started();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let s = exporter.finish();
        let _ = done_tx.send(());
        s
    });
    if done_rx.recv_timeout(FLUSH_WAIT_NAMED_AFTER).is_err() {
        eprintln!(
            "flowsieve: note: probe {}: digests still to deliver to {}; waiting up to {} (--flush-timeout) in all (an interrupt ends the wait at once)",
            x.probe_id.as_deref().unwrap_or_default(),
            x.url.as_deref().unwrap_or_default(),
            x.flush_timeout
        );
    }
    let s = match waiter.join() {
        Ok(s) => s,
        Err(_) => return fail(exit::FAILURE, "the exporter's flush stopped unexpectedly"),
    };
    // An output that could not be written is on the run's error line
    // already; digests not delivered join it there rather than go unsaid.
    if let Some(e) = s.error {
        return fail(exit::FAILURE, format!("probe {}: {e}", s.probe));
    }
    if s.undelivered > 0 || !s.finished_written {
        return fail(
            exit::FAILURE,
            format!(
                "probe {}: {} digests not delivered to {} within the flush timeout of {} ({} published, {} dropped, lost windows {:?})",
                s.probe,
                s.undelivered,
                x.url.as_deref().unwrap_or_default(),
                x.flush_timeout,
                s.published,
                s.dropped,
                s.lost_windows
            ),
        );
    }
    if code == exit::FAILURE {
        return code;
    }
    if !quiet || !s.lost_windows.is_empty() {
        eprintln!(
            "probe {}: {} digests published ({} bytes, {} through the object store, {:.3} s encoding), watermark {}, {} dropped, {} failed attempts, lost windows {:?}",
            s.probe,
            s.published,
            s.published_bytes,
            s.objects,
            s.encode_seconds,
            s.watermark,
            s.dropped,
            s.failed_attempts,
            s.lost_windows
        );
    }
    code
}

/// A probe over traces. The first interrupt sets its stop flag: as in a
/// replay, reading then stops at the next run of records, and the
/// windows of what was read are closed and published as at a trace's end;
/// the exit is 130 with one line saying where reading stopped. Once
/// reading is over and the report written, any interrupt ends the flush
/// at once (a second one, 100 ms or more after the first, too), so a probe
/// whose server has gone never holds Ctrl-C for the flush timeout.
///
/// Why not end at once, as the probe did: the windows already closed wait
/// in the exporter's queue, and the last one in the shards; ended at once,
/// a probe stopped on a long trace took them with it, and the collectors
/// learnt neither those windows nor that the probe had finished.
pub(crate) fn run_probe(args: ProbeArgs) -> u8 {
    let stop = super::on_interrupt(true);
    let traces = traces_or_default(args.read.named(&args.traces));
    let files = [
        (args.run.json.as_deref(), "JSON report"),
        (args.events.as_deref(), "events"),
    ];
    if let Err(code) = super::check_outputs(&files, &traces)
        .and_then(|()| super::check_output_dirs(&args.run.dir_outputs(), &files))
        .and_then(|()| super::check_streams_once(&traces))
    {
        return code;
    }
    let filter = match args
        .read
        .filter_expression(&args.traces, &args.filter)
        .and_then(|e| super::compile_filter(e.as_deref(), &args.filter.source()))
    {
        Ok(f) => f,
        Err(code) => return code,
    };
    let (exporter, cfg) = match start_export(&args.export, &args.run, &traces, filter, true, 0) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let mut events = match super::open_events(args.events.as_deref()) {
        Ok(e) => e,
        Err(code) => return code,
    };
    let inner: &mut dyn PipelineSink = match events.as_mut() {
        Some(w) => w,
        None => &mut NoEvents,
    };
    let source = FileSource::new(traces, &cfg);
    let mut sink = exporter.sink(inner);
    let mut progress = Progress::new(
        Some(std::sync::Arc::clone(&stop)),
        Some(super::progress_requests()),
    );
    super::progress::watch_for_stalls(
        Some(std::sync::Arc::clone(&stop)),
        progress.info_flag(),
        progress.read_state(),
        super::stalled_probe_line,
        super::first_signal_name,
    );
    let report = match run(source, &cfg, &mut progress, &mut sink) {
        Ok(r) => r,
        Err(e) => return fail(exit::FAILURE, super::run_failed(e, args.events.as_deref())),
    };
    drop(sink);
    let text = super::prints_text(&args.run, &[args.events.as_deref()]);
    let mut code = emit_report(&report, &args.run, text);
    if let Err(c) = super::close_events(events, args.events.as_deref(), !text) {
        code = c;
    }
    // From here any interrupt ends the flush at once (the handler exits
    // when it finds the flag already set); whether one came before is the
    // first signal's record, not the flag.
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let code = finish_export(exporter, &args.export, args.run.quiet, code);
    if !super::interrupt_came() || code == exit::FAILURE {
        return code;
    }
    let line = super::progress::interrupted_replay_line(
        super::first_signal_name(),
        &report.replay,
        progress.stopped_at_place(),
        "the windows published cover",
    )
    .unwrap_or_else(|| {
        format!(
            "interrupted by {} after the last packet was read: every window is published",
            super::first_signal_name()
        )
    });
    fail(exit::INTERRUPTED, line)
}

/// A `--nats` value that names servers ([`transport::server_addrs`]),
/// kept as given.
fn nats_servers(s: &str) -> Result<String, String> {
    transport::server_addrs(s).map(|_| s.to_string())
}

/// `0-3` or `0,2,5`.
fn parse_shards(s: &str) -> Result<Vec<u32>, String> {
    let bad =
        || format!("bad shard list '{s}': expected a range such as 0-3 or a list such as 0,2,5");
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (u32, u32) = (
                a.trim().parse().map_err(|_| bad())?,
                b.trim().parse().map_err(|_| bad())?,
            );
            if a > b || b as usize >= flowsieve::pipeline::MAX_SHARDS {
                return Err(bad());
            }
            out.extend(a..=b);
        } else {
            let v: u32 = part.parse().map_err(|_| bad())?;
            if v as usize >= flowsieve::pipeline::MAX_SHARDS {
                return Err(bad());
            }
            out.push(v);
        }
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

pub(crate) fn run_collect(args: CollectArgs) -> u8 {
    let shards = match parse_shards(&args.shards) {
        Ok(s) => s,
        Err(e) => return fail(exit::USAGE, e),
    };
    if !HEARTBEAT_RANGE.contains(&timeout(args.heartbeat)) {
        return fail(
            exit::USAGE,
            format!(
                "--heartbeat {}: give a period from 100ms to 1h",
                args.heartbeat
            ),
        );
    }
    flowsieve::network::collector::release_merges_eagerly();
    let stop = super::on_interrupt(true);
    let rt = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let opts = CollectOptions {
        url: args.nats.nats.clone(),
        shards,
        lateness: timeout(args.lateness),
        replicas: usize::from(args.nats.server.replicas),
        config_wait: timeout(args.config_wait),
        exit_when_done: args.exit_when_done.map(timeout),
        request_timeout: timeout(args.nats.server.request_timeout),
        verbose: args.verbose,
        heartbeat: timeout(args.heartbeat),
        progress: Some(super::progress_requests()),
        take_over: args.take_over,
    };
    let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
    match rt.block_on(collect(&opts, &stopped)) {
        Ok(s) => {
            if s.cut_off {
                eprintln!(
                    "flowsieve: warning: collect: the server gave no answer within {:?} of the interrupt, so the collector stopped in the middle of its round: the digests it held unwritten go to the next collector of shards {} after {:?}",
                    flowsieve::network::collector::STOP_GRACE,
                    shard_list(&opts.shards),
                    flowsieve::network::collector::ACK_WAIT
                );
            }
            eprintln!("collect: {}", s.counts());
            if stopped() {
                exit::INTERRUPTED
            } else {
                exit::OK
            }
        }
        // Shards past the network's, or shards another running collector
        // beats for: a bad --shards for this network, found before any
        // consumer is made.
        Err(e @ (NetError::Config(_) | NetError::ShardsTaken(_))) => {
            fail(exit::USAGE, format!("collect: {e}"))
        }
        Err(e) => fail(exit::FAILURE, format!("collect: {e}")),
    }
}

pub(crate) fn run_results(args: ResultsArgs) -> u8 {
    if let Err(code) =
        super::check_outputs(&[(args.json.as_deref(), "JSON report")], &[]).and_then(|()| {
            super::check_output_dirs(
                &[
                    (args.csv.as_deref(), "CSV tables"),
                    (args.plot.as_deref(), "plots"),
                ],
                &[(args.json.as_deref(), "JSON report")],
            )
        })
    {
        return code;
    }
    let rt = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let t = timeout(args.nats.server.request_timeout);
    let got = rt.block_on(async {
        let n = transport::connect(&args.nats.nats, "flowsieve-results", false, t).await?;
        let Some(cfg) = n.shared_config().await? else {
            return Ok::<_, NetError>((None, Vec::new(), Vec::new(), Vec::new(), Vec::new()));
        };
        let results = match args.window {
            Some(w) => n.results_near(w).await?,
            None => n.results().await?,
        };
        let (uncollected, unmerged) = n.waiting_digests(cfg.shards).await?;
        let beats = n.collector_beats().await?;
        Ok((Some(cfg), results, uncollected, unmerged, beats))
    });
    let (cfg, results, uncollected, unmerged, beats) = match got {
        Ok((Some(c), r, u, m, b)) => (c, r, u, m, b),
        Ok((None, _, _, _, _)) => {
            return fail(
                exit::FAILURE,
                format!(
                    "{}: no shared configuration: no probe has run",
                    args.nats.nats
                ),
            );
        }
        Err(e) => return fail(exit::FAILURE, format!("results: {e}")),
    };
    let mut report = assemble(&cfg, &results, args.window);
    report.listed_per_window = args.top;
    // Digests of shards no collector was ever started for are in no
    // window, and the windows' figures give no sign of it: a window of a
    // quiet link lacks shards that had no packets, too.
    if !uncollected.is_empty() {
        let shards = shard_list(&uncollected.iter().map(|u| u.shard).collect::<Vec<_>>());
        eprintln!(
            "flowsieve: warning: results: the stream holds {} digests of shard(s) {shards} that no collector has taken, so their packets are in no window; `flowsieve collect --shards {shards}` merges them",
            uncollected.iter().map(|u| u.digests).sum::<u64>()
        );
    }
    report.network.uncollected_shards = uncollected;
    // Digests a collector's consumer still holds are in no window yet,
    // and the windows' figures cannot show it either: while a collector
    // runs they are the windows still open; after one stopped, they wait
    // for the next collector of their shards.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let collectors: Vec<ShardCollector> = beats
        .iter()
        .filter(|(shard, _)| *shard < cfg.shards)
        .map(|(shard, beat)| ShardCollector::of(*shard, beat, now_ms))
        .collect();
    // A collector that went silent (killed, or cut off from the server)
    // writes no window of its shards, and nothing else on the server
    // says so: its consumers and its pull requests outlive it.
    for (who, shards) in collectors_in(&collectors, CollectorState::Silent) {
        let c = collectors.iter().find(|c| c.collector == who);
        eprintln!(
            "flowsieve: warning: results: the collector of shard(s) {shards} ({who}) last beat {:.1} s ago, and beats every {} s: it is not running, so no window of those shards is being written; `flowsieve collect --shards {shards}` takes them over",
            c.map_or(0.0, |c| c.last_beat_s),
            c.map_or(0.0, |c| c.heartbeat_s),
        );
    }
    if !unmerged.is_empty() {
        let sum = |f: fn(&UnmergedShard) -> u64| unmerged.iter().map(f).sum::<u64>();
        let shards = shard_list(&unmerged.iter().map(|u| u.shard).collect::<Vec<_>>());
        // Which of those shards have a collector running: their digests
        // are its open windows; the others' wait for a collector.
        let waiting: Vec<u32> = unmerged
            .iter()
            .map(|u| u.shard)
            .filter(|s| {
                !collectors
                    .iter()
                    .any(|c| c.shard == *s && c.state == CollectorState::Running)
            })
            .collect();
        let what_next = if waiting.is_empty() {
            "their collector is running: these are its open windows".to_string()
        } else {
            let w = shard_list(&waiting);
            format!(
                "no collector is running for shard(s) {w}: `flowsieve collect --shards {w}` merges them"
            )
        };
        eprintln!(
            "flowsieve: note: results: {} digests of shard(s) {shards} are in no written window yet ({} not yet taken by a collector, {} held by one until their windows are written); {what_next}",
            sum(UnmergedShard::digests),
            sum(|u| u.undelivered),
            sum(|u| u.unacknowledged),
        );
    }
    report.network.unmerged_shards = unmerged;
    report.network.collectors = collectors;
    // An empty report for a window asked by number says why, on stderr
    // (the report itself stays what it is: no windows), as a note with
    // the prefix every other note has.
    if let Some(w) = args.window
        && report.windows.is_empty()
    {
        eprintln!(
            "flowsieve: note: results: no result written for window {w}: none yet (a collector writes a window once every probe has passed it), or no probe had packets in it; windows are numbered from the Unix epoch, window W starting W window lengths after it"
        );
    }
    // With the JSON on standard output (`--json -`), it goes there alone.
    if !args.quiet
        && !args
            .json
            .as_deref()
            .is_some_and(flowsieve::report::writes_stdout)
        && let Err(code) = super::print_out(report.text())
    {
        return code;
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(code) = super::write_json(path, json) {
            return code;
        }
    }
    if let Some(dir) = &args.csv
        && let Err(e) = flowsieve::report::write_csv_files(dir, report.csv_files())
    {
        return fail(
            exit::FAILURE,
            format!("{}: cannot write CSV: {e}", dir.display()),
        );
    }
    if let Some(dir) = &args.plot {
        for f in report.figures() {
            if let Err(e) = f.write(dir) {
                return fail(exit::FAILURE, format!("cannot write plots: {e}"));
            }
        }
    }
    exit::OK
}

/// The collectors in `state`, each with its shards as `collect --shards`
/// takes them, in the order of their first shard.
fn collectors_in(collectors: &[ShardCollector], state: CollectorState) -> Vec<(String, String)> {
    let in_state = collectors
        .iter()
        .filter(|c| c.state == state)
        .map(|c| (c.shard, c));
    shards_by(in_state, |c| c.collector.clone())
        .into_iter()
        .map(|(c, shards)| (c.collector.clone(), shard_list(&shards)))
        .collect()
}
