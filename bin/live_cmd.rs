//! `flowsieve live` and `flowsieve inject`: flags, the interval printer,
//! the event sink that counts per class, signals, and the final report.

use super::{RunArgs, emit_report, exit, fail};
use clap::Args;
use flowsieve::ingest::{DurationNs, ShedAt};
use flowsieve::live::LONGEST_QUIET_TURN_MS;
use flowsieve::pipeline::defaults;
use std::num::{NonZeroU32, NonZeroU64};
use std::path::PathBuf;

/// Capture direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Direction {
    /// Frames received and sent.
    Both,
    /// Frames received only.
    In,
}

#[derive(Args)]
pub struct LiveArgs {
    /// Interface to capture on; repeat for several (each once: an interface
    /// given twice, or under two of its names, is refused).
    #[arg(
        short = 'i',
        long = "interface",
        value_name = "IFACE",
        required_unless_present = "list_interfaces",
        value_parser = interface_name
    )]
    pub interfaces: Vec<String>,
    /// List the interfaces -i can name (index, name, state and the link
    /// type of their frames, or why they cannot be captured), as `tcpdump
    /// -D` does, and exit. It comes alone: beside other flags it would
    /// leave them unused.
    #[arg(
        short = 'D',
        long = "list-interfaces",
        exclusive = true,
        help_heading = "Capture"
    )]
    pub list_interfaces: bool,
    #[command(flatten)]
    pub run: RunArgs,
    /// Capture filter in tcpdump's syntax, compiled by libpcap (needs
    /// libpcap0.8 installed) and run in the kernel.
    #[arg(
        short = 'f',
        long = "filter",
        value_name = "EXPR",
        help_heading = "Capture"
    )]
    pub filter: Option<String>,
    /// Read the capture filter from FILE, as `tcpdump -F FILE` does (its
    /// lines joined; `#` starts a comment to the end of the line).
    #[arg(
        short = 'F',
        long = "filter-file",
        value_name = "FILE",
        conflicts_with = "filter",
        help_heading = "Capture"
    )]
    pub filter_file: Option<PathBuf>,
    /// The capture filter as tcpdump takes it, in the words after the
    /// options: `live -i eth0 tcp port 80` is `live -i eth0 -f 'tcp port
    /// 80'`.
    #[arg(value_name = "EXPR")]
    pub expression: Vec<String>,
    /// Bytes kept of each frame, 64 to 262144 (the default holds the
    /// deepest headers flowsieve reads); 0 keeps whole frames (262144), as
    /// tcpdump's -s 0.
    #[arg(short = 's', long = "snaplen", default_value_t = defaults::LIVE_SNAPLEN, value_parser = parse_snaplen, value_name = "BYTES", help_heading = "Capture")]
    pub snaplen: u32,
    /// Sockets per interface in one PACKET_FANOUT_HASH group, each with its
    /// own reader thread (one ring without -w is read on the pipeline's
    /// own thread).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64), value_name = "N", help_heading = "Capture")]
    pub fanout: u16,
    /// Ring size per socket, MiB.
    #[arg(long, default_value_t = defaults::LIVE_RING_MIB, value_parser = clap::value_parser!(u64).range(1..=16384), value_name = "MIB", help_heading = "Capture")]
    pub ring_mb: u64,
    /// Ring block size, KiB (a multiple of 4, at most 4096).
    #[arg(long, default_value_t = defaults::LIVE_BLOCK_KIB, value_parser = clap::value_parser!(u64).range(4..=4096), value_name = "KIB", help_heading = "Capture")]
    pub block_kb: u64,
    /// Block retire timeout: a block that is not full reaches the reader
    /// after this long (1ms to 1s).
    #[arg(
        long,
        default_value_t = DurationNs(defaults::LIVE_BLOCK_TIMEOUT_MS * 1_000_000),
        value_name = "DURATION",
        help_heading = "Capture"
    )]
    pub block_timeout: DurationNs,
    /// Ring fill (0 to 1) at which a reader whose queue to the pipeline is
    /// full sheds the frames it holds instead of waiting: below it the
    /// ring absorbs a burst whole, later; 0 sheds at once (the queues
    /// still delay; --max-delay bounds that); 1 waits until the ring is
    /// full (then the kernel drops). One ring without -w is read on the
    /// pipeline's thread with no queue: it sheds its oldest block while
    /// this fill of the ring waits (0: while a block waits behind it).
    #[arg(long, default_value = "0.75", value_parser = parse_shed_at, value_name = "FILL", help_heading = "Capture")]
    pub shed_at: ShedAt,
    /// Shed (and count) every frame older than this when the pipeline
    /// would get it, so that an engine slower than the link never reports
    /// on traffic this old (such as 200ms; off by default: every frame the
    /// readers keep is handled, however late).
    #[arg(long, value_name = "DURATION", help_heading = "Capture")]
    pub max_delay: Option<DurationNs>,
    /// Which frames to capture.
    #[arg(long, value_enum, default_value_t = Direction::Both, help_heading = "Capture")]
    pub direction: Direction,
    /// Do not put the interfaces into promiscuous mode.
    #[arg(short = 'p', long = "no-promiscuous", help_heading = "Capture")]
    pub no_promiscuous: bool,
    /// Stop after this long (wall clock).
    #[arg(long, value_name = "DURATION", help_heading = "Capture")]
    pub duration: Option<DurationNs>,
    /// Print one compact block per interval, of at least 100ms; 0 (or 0s,
    /// in any unit) turns it off. An interval ends at the capture loop's
    /// first turn after it (within --block-timeout, or 100ms, on a quiet
    /// link), and each block gives its own length. SIGUSR1 (`kill -USR1
    /// PID`) ends the current interval at once, also with 0.
    #[arg(long, default_value_t = ReportEvery(Some(DurationNs(defaults::LIVE_REPORT_EVERY_S * 1_000_000_000))), value_name = "DURATION", value_parser = parse_every, help_heading = "Capture")]
    pub report_every: ReportEvery,
    /// Write intervals and heavy/new-flow events as JSON lines (`-` for stdout).
    #[arg(long, value_name = "FILE", help_heading = "Capture")]
    pub json_lines: Option<PathBuf>,
    /// Write every captured frame to a file (nanosecond timestamps, VLAN
    /// tags restored): pcapng with each interface's name when FILE ends in
    /// .pcapng, else pcap; `-` for pcap on stdout.
    #[arg(
        short = 'w',
        long = "write",
        value_name = "FILE",
        help_heading = "Capture"
    )]
    pub write: Option<PathBuf>,
    /// Packet-buffered -w, as tcpdump -U: hand the frames to the file or
    /// pipe as soon as the ring releases them (every block, or every
    /// --block-timeout on a quiet link), not when an 8 KiB buffer fills.
    #[arg(short = 'U', long = "packet-buffered", help_heading = "Capture")]
    pub packet_buffered: bool,
    /// Split -w into files of about SIZE, as tcpdump -C: before a frame,
    /// a file that holds more than SIZE million bytes (or KiB, MiB, GiB
    /// with K, M, G: 300K) is closed and the next one opened, named FILE1,
    /// FILE2, … (FILE0… with -W).
    #[arg(short = 'C', long = "file-size", value_name = "SIZE", value_parser = parse_file_size, help_heading = "Capture")]
    pub file_size: Option<NonZeroU64>,
    /// Start a new -w file when a frame comes SECONDS or more after the
    /// current one began, as tcpdump -G; -w's name is a strftime pattern,
    /// in local time (-w 'cap-%Y%m%d-%H%M%S.pcap').
    #[arg(
        short = 'G',
        long = "rotate-seconds",
        value_name = "SECONDS",
        help_heading = "Capture"
    )]
    pub rotate_seconds: Option<NonZeroU32>,
    /// With -C: a ring of N files (FILE0…), the oldest replaced by the
    /// newest. With -G alone: the capture ends when a frame would start
    /// file N + 1. As tcpdump -W.
    #[arg(
        short = 'W',
        long = "file-count",
        value_name = "N",
        help_heading = "Capture"
    )]
    pub file_count: Option<NonZeroU32>,
    /// Run COMMAND FILE on each file -C or -G closes, as tcpdump -z (such
    /// as -z gzip or -z xz), at the lowest CPU priority, not waited for;
    /// the last file, closed by the capture's end, is left as it is.
    #[arg(
        short = 'z',
        long = "postrotate-command",
        value_name = "COMMAND",
        help_heading = "Capture"
    )]
    pub postrotate_command: Option<std::ffi::OsString>,
    /// Serve Prometheus metrics on ADDR at /metrics: HOST:PORT (such as
    /// 127.0.0.1:9899, [::1]:9899 or localhost:9899), or :PORT for every
    /// IPv4 address, as Prometheus exporters take it. Port 0 picks a free
    /// one, printed at start.
    #[arg(long, value_name = "ADDR", value_parser = listen_addr, help_heading = "Capture")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Run as a probe of a network (with --nats and --probe-id): each
    /// window's digests go to NATS JetStream as `flowsieve probe` sends
    /// them, without ever holding up the capture.
    #[command(flatten)]
    pub export: super::network_cmd::ExportArgs,
}

impl LiveArgs {
    /// The capture filter's expression: `-f`'s, the one in `-F`'s file, or
    /// the words after the options joined by spaces, as tcpdump joins
    /// them. Exit 2 with one line when the words come beside `-f` or `-F`
    /// (which clap keeps apart), exit 1 when `-F`'s file cannot be read.
    fn capture_filter(&self) -> Result<Option<String>, u8> {
        let given = match &self.filter_file {
            Some(path) => Some(super::filter_file_expression(path)?),
            None => self.filter.clone(),
        };
        if self.expression.is_empty() {
            return Ok(given);
        }
        let words = self.expression.join(" ");
        if given.is_some() {
            let flag = if self.filter_file.is_some() {
                "-F FILE"
            } else {
                "-f"
            };
            return Err(fail(
                exit::USAGE,
                format!(
                    "live: a capture filter twice: {flag} and the words after the options ({words}); give one"
                ),
            ));
        }
        Ok(Some(words))
    }
}

/// `--report-every`: a duration, or 0 for none.
#[derive(Clone, Copy, Debug)]
pub struct ReportEvery(Option<DurationNs>);

impl std::fmt::Display for ReportEvery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(d) => d.fmt(f),
            None => f.write_str("0"),
        }
    }
}

/// How many of the frames shed were too old (`--max-delay`), for the text
/// lines beside their `shed` count; nothing when none were.
fn late(shed_late: u64) -> String {
    if shed_late == 0 {
        String::new()
    } else {
        format!(" (late {shed_late})")
    }
}

/// The largest `-s`, and what `-s 0` means: tcpdump's and libpcap's
/// largest snapshot length.
const MAX_SNAPLEN: u32 = 262_144;

/// A `-s` value: 64 to [`MAX_SNAPLEN`] bytes, or 0 for whole frames, as
/// `tcpdump -s 0` (refused as out of range before, so a tcpdump user's
/// habit met an error).
fn parse_snaplen(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Ok(MAX_SNAPLEN),
        Ok(n) if (64..=MAX_SNAPLEN).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s:?} is not a snap length: give 64 to {MAX_SNAPLEN} bytes, or 0 for whole frames"
        )),
    }
}

/// A `-C` value: millions of bytes, as tcpdump's; or KiB, MiB or GiB
/// with a `K`, `M` or `G` (either case), as newer tcpdumps take them.
fn parse_file_size(s: &str) -> Result<NonZeroU64, String> {
    let t = s.trim();
    let (digits, unit) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1_000_000),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a file size: give millions of bytes (10), or K, M or G after the number (300K)"))?;
    n.checked_mul(unit)
        .and_then(NonZeroU64::new)
        .ok_or_else(|| match n {
            0 => format!("{s:?} is not a file size: a file of 0 bytes holds no frame"),
            _ => format!("{s:?} is past the largest file size, 2^64 - 1 bytes"),
        })
}

/// Whether `command` would run: an executable file where it names a
/// path, else one in a directory of `PATH`, as `execvp` finds it.
fn runnable(command: &std::ffi::OsStr) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = std::path::Path::new(command);
    if command.as_encoded_bytes().contains(&b'/') {
        return executable(path);
    }
    !command.is_empty()
        && std::env::var_os("PATH")
            .is_some_and(|dirs| std::env::split_paths(&dirs).any(|d| executable(&d.join(path))))
}

/// A `--shed-at` value: a fraction from 0 to 1.
fn parse_shed_at(s: &str) -> Result<ShedAt, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .and_then(ShedAt::new)
        .ok_or_else(|| format!("{s:?} is not a ring fill from 0 to 1"))
}

fn parse_every(s: &str) -> Result<ReportEvery, String> {
    // Any zero span is off, as `0` is: `0s` used to be refused as not
    // positive although the help says 0 turns the reports off.
    if flowsieve::pipeline::parse_duration_ns(s) == Some(0) {
        return Ok(ReportEvery(None));
    }
    let every = s.parse::<DurationNs>().map_err(|e| e.to_string())?;
    // Why a floor: an interval ends at the capture loop's next turn, and
    // on a quiet link a turn waits on the ring for up to 100 ms. A shorter
    // span was taken and gave an interval per turn instead, about every
    // 50 ms with the default --block-timeout, whatever was asked.
    if every.0 < MIN_REPORT_EVERY_NS {
        return Err(format!(
            "{s:?} is shorter than {LONGEST_QUIET_TURN_MS}ms, the least interval the capture loop keeps (0 turns the reports off)"
        ));
    }
    Ok(ReportEvery(Some(every)))
}

/// The shortest `--report-every`: the capture loop's longest wait on a
/// quiet ring.
const MIN_REPORT_EVERY_NS: u64 = LONGEST_QUIET_TURN_MS as u64 * 1_000_000;

#[derive(Args)]
pub struct InjectArgs {
    /// Interface to send on.
    #[arg(short = 'i', long = "interface", value_name = "IFACE", value_parser = interface_name)]
    pub interface: String,
    /// The trace whose frames to send.
    pub trace: PathBuf,
    /// Frames per second (0.001 to 1e9).
    #[arg(long, value_name = "N", conflicts_with_all = ["speed", "topspeed", "mbps"])]
    pub pps: Option<f64>,
    /// Megabits per second of the frames' bytes (0.001 to 1e6), as
    /// tcpreplay's --mbps (-M).
    #[arg(short = 'M', long, value_name = "N", conflicts_with_all = ["speed", "topspeed"])]
    pub mbps: Option<f64>,
    /// A multiple of the trace's own timing (1 = as captured; 0.001 to
    /// 1e9); tcpreplay's --multiplier (-x) is the same.
    #[arg(
        short = 'x',
        long,
        visible_alias = "multiplier",
        value_name = "X",
        conflicts_with = "topspeed"
    )]
    pub speed: Option<f64>,
    /// As fast as the socket takes frames (tcpreplay's -t).
    #[arg(short = 't', long)]
    pub topspeed: bool,
    /// Send the trace this many times (tcpreplay's -l).
    #[arg(short = 'l', long = "loop", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000), value_name = "N")]
    pub loops: u64,
    /// Send at most N frames in all, over every loop (tcpreplay's -L):
    /// the trace's first N, or with -l its loops until N.
    #[arg(short = 'L', long = "limit", value_parser = clap::value_parser!(u64).range(1..), value_name = "N")]
    pub limit: Option<u64>,
    /// Send TCP frames longer than the MTU as segmentation-offload
    /// super-frames (the kernel is asked to segment them, as a host with
    /// TSO does); without it they are refused as longer than the MTU.
    #[arg(long)]
    pub gso: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[cfg(not(target_os = "linux"))]
pub fn run_live(_: LiveArgs) -> u8 {
    fail(exit::FAILURE, "live capture needs Linux (AF_PACKET)")
}

/// A `--metrics` address (`HOST:PORT` or `:PORT`).
#[cfg(target_os = "linux")]
use flowsieve::live::metrics::parse_listen_addr as listen_addr;
#[cfg(not(target_os = "linux"))]
fn listen_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    s.parse().map_err(|e| format!("{e}"))
}

/// An `-i` value that can name an interface (the kernel's rule), kept
/// as given; one that cannot is a bad flag value, refused before any
/// work.
fn interface_name(s: &str) -> Result<String, String> {
    #[cfg(target_os = "linux")]
    flowsieve::ingest::live::check_interface_name(s)?;
    Ok(s.to_string())
}

#[cfg(not(target_os = "linux"))]
pub fn run_inject(_: InjectArgs) -> u8 {
    fail(exit::FAILURE, "inject needs Linux (AF_PACKET)")
}

#[cfg(target_os = "linux")]
pub use linux::{run_inject, run_live};

#[cfg(target_os = "linux")]
mod linux {
    use super::*;
    use flowsieve::ingest::live::{Injector, Interface, Pace, RingGeometry};
    use flowsieve::live::metrics::MetricsServer;
    use flowsieve::live::{
        EventLatency, IntervalReport, LiveCapture, LiveConfig, LiveCounters, LiveObserver,
    };
    use flowsieve::pipeline::{Event, EventKind, PipelineSink, run_with_gauges};
    use flowsieve::replay::NoObserver;
    use flowsieve::report::writes_stdout;
    use std::cell::RefCell;
    use std::io::{BufWriter, Write};
    use std::rc::Rc;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    type Shared = Rc<RefCell<Box<dyn Write>>>;

    /// Counts events per class for intervals and metrics, and writes them
    /// as JSON lines when asked.
    struct LiveEvents {
        counters: Arc<LiveCounters>,
        out: Option<Shared>,
        /// Arrival to heavy-flow event, for the `capture` section.
        latency: EventLatency,
    }

    impl PipelineSink for LiveEvents {
        fn wants(&self, _kind: EventKind) -> bool {
            true
        }
        fn event(&mut self, event: &Event) -> std::io::Result<()> {
            let per_class = match event {
                Event::Heavy(e) => {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as i64);
                    let first = self.counters.first_keyed_ns.load(Ordering::Relaxed);
                    self.latency.record(first, e.time_ns, now);
                    Some((&self.counters.heavy_events, e.class))
                }
                Event::NewFlow(e) => Some((&self.counters.new_flow_events, e.class)),
                Event::WindowEnd(w) => {
                    let windows = w.last_window - w.window + 1;
                    self.counters.windows.fetch_add(windows, Ordering::Relaxed);
                    None
                }
                _ => return Ok(()),
            };
            if let Some(a) = per_class.and_then(|(list, class)| list.get(usize::from(class))) {
                a.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(out) = &self.out {
                let mut w = out.borrow_mut();
                serde_json::to_writer(&mut *w, event)?;
                w.write_all(b"\n")?;
            }
            Ok(())
        }
    }

    /// Prints the readiness line and the interval blocks.
    struct Printer {
        text: bool,
        out: Option<Shared>,
        /// The `--json-lines` path `out` writes to, for its error line.
        lines_path: Option<std::path::PathBuf>,
        /// A live probe's export figures.
        export: Option<Arc<flowsieve::network::ExportStats>>,
    }

    impl LiveObserver for Printer {
        fn ready(&mut self, interfaces: &[Interface]) {
            let names: Vec<String> = interfaces
                .iter()
                .map(|i| format!("{} ({})", i.name, i.link_type.name()))
                .collect();
            eprintln!("flowsieve: listening on {}", names.join(", "));
        }

        fn interval(&mut self, r: &IntervalReport) -> std::io::Result<()> {
            // Each error names its output: it becomes the capture's error
            // line and the report's `capture.error`.
            self.text_block(r)
                .map_err(|e| std::io::Error::new(e.kind(), crate::stdout_failed(e)))?;
            self.json_line(r).map_err(|e| {
                std::io::Error::new(e.kind(), lines_failed(self.lines_path.as_deref(), &e))
            })
        }
    }

    impl Printer {
        /// The interval's text block on standard output, unless `-q`.
        fn text_block(&self, r: &IntervalReport) -> std::io::Result<()> {
            if self.text {
                use std::io::Write;
                // A reader that went away fails the sink, and the run
                // ends with one line, not println!'s panic.
                let mut stdout = std::io::stdout().lock();
                let d = &r.delta;
                let cost: Vec<String> = r
                    .selective
                    .iter()
                    .map(|v| format!("{} {:.0}", v.variant, v.cost))
                    .collect();
                writeln!(
                    stdout,
                    "[{:>8.1}s] packets {} ({:.0} pps)  drops: kernel {} shed {}{} filtered {} device {}  heavy {} (windows {})  new flows {}{}",
                    r.elapsed_s,
                    d.frames.received,
                    r.packets_per_sec,
                    d.frames.kernel_drops,
                    d.frames.shed,
                    late(d.frames.shed_late),
                    r.filtered_out,
                    r.device.rx_dropped,
                    d.heavy_events,
                    d.windows,
                    d.new_flow_events,
                    if cost.is_empty() {
                        String::new()
                    } else {
                        format!("  cost: {}", cost.join(", "))
                    }
                )?;
                if let Some(x) = self.export.as_ref().map(|x| x.snapshot()) {
                    writeln!(
                        stdout,
                        "           export: {} published ({} via the object store), {} queued, {} dropped, {} windows lost, watermark {}, server {}",
                        x.published,
                        x.objects,
                        x.queued,
                        x.dropped,
                        x.lost_windows,
                        x.watermark,
                        if x.server_up { "up" } else { "unreachable" }
                    )?;
                }
            }
            Ok(())
        }

        /// The interval as a JSON line, with `--json-lines`.
        fn json_line(&self, r: &IntervalReport) -> std::io::Result<()> {
            if let Some(out) = &self.out {
                let mut w = out.borrow_mut();
                let mut v = serde_json::to_value(r)?;
                if let Some(o) = v.as_object_mut() {
                    o.insert("type".into(), "interval".into());
                    if let Some(x) = &self.export {
                        o.insert("export".into(), serde_json::to_value(x.snapshot())?);
                    }
                }
                serde_json::to_writer(&mut *w, &v)?;
                w.write_all(b"\n")?;
                w.flush()?;
            }
            Ok(())
        }
    }

    /// The line for a `--json-lines` output (`path`) that could not be
    /// written: its path, or standard output for `-` and `/dev/stdout`.
    fn lines_failed(path: Option<&std::path::Path>, e: &dyn std::fmt::Display) -> String {
        match path {
            Some(p) if !writes_stdout(p) => {
                format!("{}: cannot write JSON lines: {e}", p.display())
            }
            _ => format!("standard output: cannot write JSON lines: {e}"),
        }
    }

    pub fn run_live(a: LiveArgs) -> u8 {
        if a.list_interfaces {
            let lines: String = flowsieve::ingest::live::InterfaceListing::all()
                .iter()
                .map(|l| format!("{l}\n"))
                .collect();
            return super::super::print_out(lines).err().unwrap_or(exit::OK);
        }
        // Every flag is checked before any socket opens.
        let filter = match a.capture_filter() {
            Ok(f) => f,
            Err(code) => return code,
        };
        // The capture file joins the check only on standard output, where
        // it must come alone; a file it names is replaced, as `tcpdump -w`
        // replaces one, even when it holds a capture.
        // It still may not share a path with another output, which would
        // replace the capture at the end of the run.
        let capture_on_stdout = a.write.as_deref().filter(|w| writes_stdout(w));
        let files = [
            (a.run.json.as_deref(), "JSON report"),
            (a.json_lines.as_deref(), "JSON lines"),
            (a.write.as_deref(), "capture (-w)"),
        ];
        if let Err(code) = super::super::check_outputs(
            &[
                (a.run.json.as_deref(), "JSON report"),
                (a.json_lines.as_deref(), "JSON lines"),
                (capture_on_stdout, "capture (-w)"),
            ],
            &[],
        )
        .and_then(|()| super::super::check_outputs_distinct(&files))
        .and_then(|()| super::super::check_output_dirs(&a.run.dir_outputs(), &files))
        {
            return code;
        }
        let rotation =
            match flowsieve::live::Rotation::new(a.file_size, a.rotate_seconds, a.file_count) {
                Ok(r) => r,
                Err(e) => return fail(exit::USAGE, format!("live: {e}")),
            };
        // With a rotation the files' names are the rotation's: the first
        // is checked for the capture, and a -G pattern must name one.
        let first_capture_file = match a.write.as_deref() {
            _ if rotation.is_off() => a.write.clone(),
            None => {
                return fail(
                    exit::USAGE,
                    "live: -C, -G and -W split the capture file, and there is no -w",
                );
            }
            Some(_) if capture_on_stdout.is_some() => {
                return fail(
                    exit::USAGE,
                    "live: -C, -G and -W split the capture into files, and -w - is one stream",
                );
            }
            Some(w) => match rotation.file_name(w, flowsieve::live::rotation::unix_now(), 0) {
                Ok(first) => Some(first),
                Err(e) => return fail(exit::USAGE, format!("live: {e}")),
            },
        };
        if let Some(w) = first_capture_file.as_deref()
            && let Err(e) = flowsieve::report::check_file_target(w, "capture (-w)")
        {
            return fail(exit::USAGE, e);
        }
        if let Some(command) = &a.postrotate_command {
            if rotation.is_off() {
                return fail(
                    exit::USAGE,
                    "live: -z runs on each file -C or -G closes, and neither is given",
                );
            }
            if !runnable(command) {
                return fail(
                    exit::USAGE,
                    format!(
                        "live: -z {}: no such command (not an executable file, nor one on PATH)",
                        std::path::Path::new(command).display()
                    ),
                );
            }
        }
        if a.packet_buffered && a.write.is_none() {
            return fail(
                exit::USAGE,
                "live: -U (--packet-buffered) applies to the capture file, and there is no -w",
            );
        }
        if capture_on_stdout.is_some() && std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            return fail(
                exit::USAGE,
                "live: standard output is a terminal; write the capture to a file (-w FILE) or a pipe (-w - | ...)",
            );
        }
        let retire_ms = a.block_timeout.0 / 1_000_000;
        let geometry = match RingGeometry::new(a.ring_mb << 20, a.block_kb << 10, retire_ms) {
            Ok(g) => g,
            Err(e) => return fail(exit::USAGE, format!("ring: {e}")),
        };
        // The kernel allocates every socket's ring when it is set up and
        // holds it to the end: it is memory the run takes, stated and
        // checked against --max-memory with the filters before any socket
        // opens (64 rings of 64 MiB are 4 GiB).
        let capture_rings = geometry
            .bytes()
            .saturating_mul(u64::from(a.fanout))
            .saturating_mul(a.interfaces.len() as u64);
        let (exporter, cfg) = match a.export.is_probe() {
            // A live probe drops a digest rather than wait for the
            // exporter: the capture never waits on the network.
            true => match super::super::network_cmd::start_export(
                &a.export,
                &a.run,
                &[],
                // A live probe's filter is the socket's (-f of live).
                None,
                false,
                capture_rings,
            ) {
                Ok((e, c)) => (Some(e), c),
                Err(code) => return code,
            },
            // No model figure for a report nobody reads (`-q` alone): the
            // heavy stage's is computed on the workers at every window's
            // close, beside the capture.
            false => match a.run.configure(None, |c| {
                c.capture_rings = capture_rings;
                c.new_flows.model = a.run.report_is_read();
                c.heavy.model = a.run.report_is_read();
            }) {
                Ok(c) => (None, c),
                Err(code) => return code,
            },
        };
        let mut live = LiveConfig::new(a.interfaces.clone());
        live.fanout = usize::from(a.fanout);
        live.geometry = geometry;
        live.snaplen = a.snaplen;
        live.filter = filter;
        live.incoming_only = a.direction == Direction::In;
        live.promiscuous = !a.no_promiscuous;
        live.duration = a.duration.map(|d| Duration::from_nanos(d.0));
        live.report_every = a.report_every.0.map(|d| Duration::from_nanos(d.0));
        // SIGUSR1 asks for an interval report now, as it asks tcpdump for
        // its counts; its default action would end the capture with no
        // report.
        let report_now = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let _ = signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&report_now));
        live.report_now = Some(report_now);
        live.write = a.write.clone();
        live.packet_buffered = a.packet_buffered;
        live.rotation = rotation;
        live.post_rotate = a.postrotate_command.clone();
        live.shed_at = a.shed_at;
        live.max_delay = a.max_delay.map(|d| Duration::from_nanos(d.0));
        let lines: Option<Shared> = match &a.json_lines {
            None => None,
            // Standard output through a duplicate of its descriptor: opening
            // `/dev/stdout` again would truncate a file that `>>` redirected
            // to and write over it from its start.
            Some(p) if writes_stdout(p) => match flowsieve::report::stdout_file() {
                Ok(f) => Some(Rc::new(RefCell::new(Box::new(BufWriter::new(f))))),
                Err(e) => return fail(exit::FAILURE, lines_failed(Some(p), &e)),
            },
            Some(p) => match std::fs::File::create(p) {
                Ok(f) => Some(Rc::new(RefCell::new(Box::new(BufWriter::new(f))))),
                Err(e) => {
                    return fail(
                        exit::FAILURE,
                        format!("{}: cannot create: {e}", p.display()),
                    );
                }
            },
        };
        // The JSON lines or the JSON report on standard output take it
        // alone: no text report, interval lines or capture summary there.
        let text =
            super::super::prints_text(&a.run, &[a.json_lines.as_deref(), a.write.as_deref()]);
        // The first signal ends the capture with its report. The capture
        // sets the same flag whenever it ends by itself (`--duration`,
        // `-c`, an error), so any signal after that, while the stop still
        // waits (on an exporter's flush, say), ends the process at once
        // and says so, as for every graceful job.
        let stop = crate::on_interrupt(true);
        let mut printer = Printer {
            text,
            out: lines.clone(),
            lines_path: a.json_lines.clone(),
            export: exporter.as_ref().map(|e| e.stats()),
        };
        let capture = match LiveCapture::open(
            live,
            cfg.config().replay.clone(),
            Arc::clone(&stop),
            &mut printer,
        ) {
            Ok(c) => c,
            Err(e) if e.is_usage() => return fail(exit::USAGE, e),
            Err(e) => return fail(exit::FAILURE, e),
        };
        let counters = capture.counters();
        if let Some(x) = &exporter {
            // Set once, before the metrics server can read it.
            let _ = counters.export.set(x.stats());
        }
        let slot = capture.summary_slot();
        let _metrics = match a.metrics {
            None => None,
            Some(addr) => match MetricsServer::start(addr, Arc::clone(&counters)) {
                Ok(m) => {
                    eprintln!("flowsieve: metrics on http://{}/metrics", m.addr());
                    Some(m)
                }
                Err(e) => return fail(exit::FAILURE, e),
            },
        };
        let mut events = LiveEvents {
            counters: Arc::clone(&counters),
            out: lines.clone(),
            latency: EventLatency::new(),
        };
        let gauges = Some(Arc::clone(&counters.stages));
        let run = match &exporter {
            Some(x) => {
                let mut sink = x.sink(&mut events);
                run_with_gauges(capture, &cfg, &mut NoObserver, &mut sink, gauges)
            }
            None => run_with_gauges(capture, &cfg, &mut NoObserver, &mut events, gauges),
        };
        let mut report = match run {
            Ok(r) => r,
            // The sink writes only the `--json-lines` output: name it.
            Err(flowsieve::pipeline::PipelineError::Sink(e)) => {
                return fail(exit::FAILURE, lines_failed(a.json_lines.as_deref(), &e));
            }
            Err(e) => return fail(exit::FAILURE, crate::run_failed(e, None)),
        };
        let summary = slot.lock().ok().and_then(|mut s| s.take());
        if let Some(s) = &summary {
            report.capture = serde_json::to_value(s).ok();
            if let Some(serde_json::Value::Object(c)) = report.capture.as_mut() {
                c.insert(
                    "heavy_event_latency".into(),
                    serde_json::to_value(events.latency.summary()).unwrap_or_default(),
                );
            }
        }
        // The last events are still in the buffer: a flush that fails
        // loses them, and says so (it used to end the run with exit 0).
        let lines_failed = lines
            .as_ref()
            .and_then(|out| out.borrow_mut().flush().err())
            .map(|e| fail(exit::FAILURE, lines_failed(a.json_lines.as_deref(), &e)));
        let mut code = emit_report(&report, &a.run, text);
        if let Some(failed) = lines_failed {
            code = failed;
        }
        if let Some(s) = &summary {
            if text {
                use std::fmt::Write;
                let t = &s.totals.frames;
                let mut o = String::new();
                let _ = writeln!(
                    o,
                    "\ncapture: {} s, stopped by {}",
                    format_args!("{:.1}", s.seconds),
                    s.stopped_by
                );
                for i in &s.interfaces {
                    let _ = writeln!(
                        o,
                        "  {:<12} received {:>10}  bytes {:>12}  kernel drops {:>8}  freezes {:>4}  shed {:>8}{}  super-frames {:>6}  vlan restored {:>6}  device rx {} dropped {}",
                        i.name,
                        i.counters.received,
                        i.counters.bytes,
                        i.counters.kernel_drops,
                        i.counters.kernel_freezes,
                        i.counters.shed,
                        late(i.counters.shed_late),
                        i.counters.super_frames,
                        i.counters.vlan_restored,
                        i.device.rx_packets,
                        i.device.rx_dropped
                    );
                }
                let _ = writeln!(
                    o,
                    "  total: received {}, to pipeline {}, kernel drops {}, shed {}{}, filtered out {} (device counters less socket counts)",
                    t.received,
                    t.received - t.shed,
                    t.kernel_drops,
                    t.shed,
                    late(t.shed_late),
                    s.filtered_out
                );
                if let Some(l) = events.latency.summary() {
                    let _ = writeln!(
                        o,
                        "  arrival to heavy-flow event: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} events",
                        l.p50_ms, l.p99_ms, l.max_ms, l.events
                    );
                }
                // A second failure of standard output, after the report's,
                // is the same failure and is named once.
                if let Err(e) = crate::write_stdout(&o) {
                    code = fail(exit::FAILURE, crate::stdout_failed(e));
                }
            }
            if let Some(e) = &s.error {
                // Named once: the report's own errors, printed with it,
                // hold it.
                code = fail(exit::FAILURE, e);
            }
        }
        match exporter {
            Some(e) => super::super::network_cmd::finish_export(e, &a.export, a.run.quiet, code),
            None => code,
        }
    }

    pub fn run_inject(a: InjectArgs) -> u8 {
        let pace = match (a.pps, a.mbps, a.speed, a.topspeed) {
            (Some(p), ..) if !(0.001..=1e9).contains(&p) => {
                return fail(
                    exit::USAGE,
                    format!(
                        "--pps {}: must be at least 0.001 and at most 1e9",
                        flowsieve::model::query::shown(p)
                    ),
                );
            }
            (_, Some(m), ..) if !(0.001..=1e6).contains(&m) => {
                return fail(
                    exit::USAGE,
                    format!(
                        "--mbps {}: must be at least 0.001 and at most 1e6",
                        flowsieve::model::query::shown(m)
                    ),
                );
            }
            (_, _, Some(x), _) if !(0.001..=1e9).contains(&x) => {
                return fail(
                    exit::USAGE,
                    format!(
                        "--speed {}: must be at least 0.001 and at most 1e9",
                        flowsieve::model::query::shown(x)
                    ),
                );
            }
            (Some(p), ..) => Pace::PacketsPerSecond(p),
            (_, Some(m), ..) => Pace::MegabitsPerSecond(m),
            (_, _, Some(x), _) => Pace::Speed(x),
            (.., true) => Pace::TopSpeed,
            _ => Pace::Speed(1.0),
        };
        if !a.trace.is_file() {
            return fail(
                exit::FAILURE,
                format!("{}: no such file", a.trace.display()),
            );
        }
        let iface = match Interface::by_name(&a.interface) {
            Ok(i) => i,
            Err(e) if e.is_usage() => return fail(exit::USAGE, e),
            Err(e) => return fail(exit::FAILURE, e),
        };
        // The same line as live's: the first send would fail with the
        // system's "Network is down" instead.
        if !iface.is_up() {
            return fail(
                exit::FAILURE,
                flowsieve::ingest::live::LiveError::NotUp { iface: iface.name },
            );
        }
        let injector = match Injector::open(&iface) {
            Ok(i) if a.gso => match i.with_gso() {
                Ok(i) => i,
                Err(e) => return fail(exit::FAILURE, e),
            },
            Ok(i) => i,
            Err(e) => return fail(exit::FAILURE, e),
        };
        let injector = match a.limit {
            Some(n) => injector.with_limit(n),
            None => injector,
        };
        let stop = crate::on_interrupt(true);
        // SIGUSR1 asks for the counts so far, as it asks `dd` and a
        // replay: one line on stderr, and the injection goes on.
        let asked = crate::progress_requests();
        let mut answer = |p: &flowsieve::ingest::live::InjectProgress| {
            eprintln!("flowsieve: progress: {}", p.line());
        };
        match injector.inject_answering(&a.trace, pace, a.loops, &stop, &asked, &mut answer) {
            Ok(s) => {
                let printed = if a.json {
                    let json = serde_json::to_string(&s).unwrap_or_default();
                    crate::print_out(format_args!("{json}\n"))
                } else {
                    use std::fmt::Write;
                    let refused: u64 = s.refused.values().sum();
                    let mut o = String::new();
                    let _ = writeln!(
                        o,
                        "sent {} frames ({} bytes) in {:.3} s, {:.0} pps; refused {}{}",
                        s.sent,
                        s.bytes,
                        s.seconds,
                        s.packets_per_sec,
                        refused,
                        if s.interrupted {
                            "; interrupted before the end of the trace"
                        } else {
                            ""
                        }
                    );
                    for (why, n) in &s.refused {
                        let _ = writeln!(o, "  refused {n}: {why}");
                    }
                    crate::print_out(&o)
                };
                if let Err(code) = printed {
                    return code;
                }
                // As gen-trace and bench: a job cut short by Ctrl-C exits
                // 130, so that a script does not take a part for the whole.
                if s.interrupted {
                    exit::INTERRUPTED
                } else {
                    exit::OK
                }
            }
            Err(e) => fail(exit::FAILURE, e),
        }
    }
}
