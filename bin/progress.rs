//! What a replay shows while it reads: a progress bar on a terminal, one
//! progress line on stderr on SIGUSR1, and the graceful stop that an
//! interrupt asks for.
//!
//! The engine asks its observer between runs of records
//! ([`ReplayObserver::keep_reading`]); this one answers from two flags
//! that signal handlers set. A replay never blocks a signal, and never
//! checks a flag per packet.

use flowsieve::ingest::Compression;
use flowsieve::replay::ReplayObserver;
use flowsieve::report::{FileSummary, ReplaySummary};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a replay may go without reaching its next check once an
/// interrupt asked it to stop, while it is reading a file, before the
/// process ends at once. A regular file's reads never wait that long; a
/// pipe's can wait forever for its writer.
pub(crate) const STALL: Duration = Duration::from_secs(1);

/// What a progress line says besides how far the read is: the file as
/// messages name it (with its compression), what its offsets count, the
/// size they are a share of (a plain regular file's), and the packets of
/// the files before it.
#[derive(Clone)]
struct LineHead {
    file: String,
    offset_label: &'static str,
    plain_size: Option<u64>,
    packets_before: u64,
}

impl LineHead {
    /// Before any file: no name, and plain offsets.
    fn before_any_file() -> LineHead {
        LineHead {
            file: String::new(),
            offset_label: Compression::None.offset_label(),
            plain_size: None,
            packets_before: 0,
        }
    }

    /// The one progress line SIGUSR1 asks for, as `dd` and tcpdump answer
    /// it: the file, how far into it, and the packets in all, `seconds`
    /// into the run.
    fn line(&self, file_packets: u64, offset: u64, seconds: f64) -> String {
        let of = match self.plain_size {
            Some(size) if size > 0 && offset <= size => {
                format!(" of {size} ({:.1} %)", offset as f64 * 100.0 / size as f64)
            }
            _ => String::new(),
        };
        let all = self.packets_before + file_packets;
        format!(
            "flowsieve: progress: {}: {file_packets} packets, {} {offset}{of}; {all} packets in all in {seconds:.2} s ({:.0} packets/s)",
            self.file,
            self.offset_label,
            all as f64 / seconds.max(1e-9)
        )
    }
}

/// What the observer tells the watchdog ([`watch_for_stalls`]).
pub(crate) struct ReadState {
    /// A file is open for reading (between `file_started` and
    /// `file_finished`).
    in_file: AtomicBool,
    /// The read loop has seen the stop and is finishing.
    stopping: AtomicBool,
    /// The file being read, for the watchdog's line.
    file: Mutex<String>,
    /// For the progress line the watchdog prints when SIGUSR1 comes while
    /// a read waits: the line's head (set as each file opens), the packets
    /// and offset at the read's last check, and when that check came
    /// (nanoseconds after `started`). Locked only as a file starts or
    /// opens, and by the watchdog; the read loop stores the three numbers.
    head: Mutex<LineHead>,
    packets: AtomicU64,
    offset: AtomicU64,
    checked_ns: AtomicU64,
    started: Instant,
    /// The file's progress bar, if it has one, for the watchdog to print
    /// above.
    bar: Mutex<Option<ProgressBar>>,
}

impl ReadState {
    fn new(started: Instant) -> ReadState {
        ReadState {
            in_file: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            file: Mutex::new(String::new()),
            head: Mutex::new(LineHead::before_any_file()),
            packets: AtomicU64::new(0),
            offset: AtomicU64::new(0),
            checked_ns: AtomicU64::new(0),
            started,
            bar: Mutex::new(None),
        }
    }

    /// Notes that the read reached a check now, `packets` packets and
    /// `offset` bytes into its file.
    fn checked(&self, packets: u64, offset: u64) {
        self.packets.store(packets, Ordering::Relaxed);
        self.offset.store(offset, Ordering::Relaxed);
        let now = self.started.elapsed().as_nanos() as u64;
        self.checked_ns.store(now, Ordering::Relaxed);
    }

    /// How long the read has gone without a check.
    fn since_check(&self) -> Duration {
        let checked = Duration::from_nanos(self.checked_ns.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(checked)
    }

    /// Prints `line` on stderr, above the progress bar if there is one.
    fn print(&self, line: &str) {
        match self.bar.lock().ok().as_deref().and_then(Option::as_ref) {
            Some(b) => b.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }
}

/// A replay's observer: the progress bar, SIGUSR1's progress line and the
/// graceful stop.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    /// Set by the first interrupt of a replay that stops gracefully
    /// (`crate::on_interrupt(true)`); `None` where an interrupt ends the
    /// process at once.
    stop: Option<Arc<AtomicBool>>,
    /// Set by SIGUSR1: print one progress line at the next run.
    info: Option<Arc<AtomicBool>>,
    /// The file being read, as its path was given.
    file: String,
    /// The progress line's head for that file.
    head: LineHead,
    /// Where reading was when the stop was seen: packets of the file and
    /// its byte offset.
    stopped_at: Option<(u64, u64)>,
    started: Instant,
    /// Shared with the watchdog.
    state: Arc<ReadState>,
}

impl Progress {
    /// An observer that stops reading once `stop` is set and prints a
    /// progress line each time `info` is set.
    pub(crate) fn new(stop: Option<Arc<AtomicBool>>, info: Option<Arc<AtomicBool>>) -> Progress {
        let started = Instant::now();
        Progress {
            bar: None,
            stop,
            info,
            file: String::new(),
            head: LineHead::before_any_file(),
            stopped_at: None,
            started,
            state: Arc::new(ReadState::new(started)),
        }
    }

    /// What the watchdog needs to know of this observer's reading.
    pub(crate) fn read_state(&self) -> Arc<ReadState> {
        Arc::clone(&self.state)
    }

    /// The signal flag that asks for a progress line, for the watchdog to
    /// answer while a read waits.
    pub(crate) fn info_flag(&self) -> Option<Arc<AtomicBool>> {
        self.info.clone()
    }

    /// Where the read had reached when the interrupt stopped it, if it
    /// did: "byte offset N", or in a compressed file "decompressed byte
    /// offset N".
    pub(crate) fn stopped_at_place(&self) -> Option<String> {
        self.stopped_at
            .map(|(_, offset)| format!("{} {offset}", self.head.offset_label))
    }

    /// Hands the watchdog the line's head for the file now being read,
    /// and notes a check now, as the file starts or opens.
    fn share_head(&self) {
        if let Ok(mut head) = self.state.head.lock() {
            head.clone_from(&self.head);
        }
        self.state.checked(0, 0);
    }
}

impl ReplayObserver for Progress {
    fn file_started(&mut self, path: &Path, size: Option<u64>) {
        self.file = path.display().to_string();
        if let Ok(mut f) = self.state.file.lock() {
            f.clone_from(&self.file);
        }
        // A stream's (standard input's, a FIFO's) size says nothing of
        // what will be read.
        let regular = std::fs::metadata(path).is_ok_and(|m| m.is_file());
        self.head.file.clone_from(&self.file);
        self.head.plain_size = size.filter(|_| regular);
        self.head.offset_label = Compression::None.offset_label();
        self.share_head();
        self.state.in_file.store(true, Ordering::SeqCst);
    }

    fn file_opened(&mut self, compression: Compression) {
        // The reader's offsets count decompressed bytes, which the size
        // on disk does not bound: no share of it, and no bar to fill.
        self.head.file = compression.file_label(self.file.as_ref());
        self.head.offset_label = compression.offset_label();
        if compression != Compression::None {
            self.head.plain_size = None;
        }
        self.share_head();
        if !std::io::stderr().is_terminal() {
            return;
        }
        let bar = match self.head.plain_size {
            Some(s) => ProgressBar::new(s),
            None => ProgressBar::new_spinner(),
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ({eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(self.file.clone());
        if let Ok(mut shared) = self.state.bar.lock() {
            *shared = Some(bar.clone());
        }
        self.bar = Some(bar);
    }

    fn progress(&mut self, _packets: u64, offset: u64) {
        if let Some(b) = &self.bar {
            b.set_position(offset);
        }
    }

    fn keep_reading(&mut self, packets: u64, offset: u64) -> bool {
        self.state.checked(packets, offset);
        if self
            .info
            .as_ref()
            .is_some_and(|i| i.swap(false, Ordering::Relaxed))
        {
            let line = self
                .head
                .line(packets, offset, self.started.elapsed().as_secs_f64());
            match &self.bar {
                // Above the bar, which is redrawn below it.
                Some(b) => b.suspend(|| eprintln!("{line}")),
                None => eprintln!("{line}"),
            }
        }
        if self
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
        {
            self.stopped_at = Some((packets, offset));
            self.state.stopping.store(true, Ordering::SeqCst);
            return false;
        }
        true
    }

    fn file_finished(&mut self, file: &FileSummary) {
        self.state.in_file.store(false, Ordering::SeqCst);
        self.head.packets_before += file.packets;
        if let Ok(mut shared) = self.state.bar.lock() {
            *shared = None;
        }
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// The line a replay (or a probe) that an interrupt stopped ends with
/// (exit 130), its report written: which signal, where reading stopped
/// (`place`, from [`Progress::stopped_at_place`]), and what `covering`
/// (such as "the report covers") covers. `None` when no file was stopped
/// (the interrupt came after the last record was read, while the report
/// was being made).
pub(crate) fn interrupted_replay_line(
    signal: &str,
    report: &ReplaySummary,
    place: Option<String>,
    covering: &str,
) -> Option<String> {
    let file = report.trace.files.iter().find(|f| f.interrupted)?;
    let at = match place {
        Some(place) => format!(" ({place})"),
        None => String::new(),
    };
    Some(format!(
        "interrupted by {signal} after packet {} of {}{at}: {covering} the {} packets read, and no later packet or file",
        file.packets, file.path, report.trace.packets
    ))
}

/// Starts the thread that watches a replay's reading for what its own
/// checks cannot see, while a read waits for data that does not come (a
/// pipe or FIFO whose writer sends nothing: `flowsieve -` fed by a command
/// that waits). Such a read never reaches its next check, so:
///
/// - **An interrupt** (`stop` set) that the read has not answered for
///   [`STALL`] ends the process at once, with exit 130 and one line
///   (`line` gives it from the signal's name and the file); the replay
///   would otherwise hang. Outside a file (the report being made after
///   the last one) it waits for the replay however long that takes.
/// - **SIGUSR1** (`info` set) while the read has gone [`STALL`] or more
///   without a check gets its progress line from here, as of the last
///   check and saying how long the read has waited, as `dd` answers at
///   once whatever its read is doing. Otherwise the read's next check
///   answers it (within 256 records).
pub(crate) fn watch_for_stalls(
    stop: Option<Arc<AtomicBool>>,
    info: Option<Arc<AtomicBool>>,
    state: Arc<ReadState>,
    line: fn(&str, &str) -> String,
    signal_name: fn() -> &'static str,
) {
    let watch = move || {
        let mut stalled_since: Option<Instant> = None;
        loop {
            std::thread::sleep(Duration::from_millis(20));
            let reading =
                state.in_file.load(Ordering::SeqCst) && !state.stopping.load(Ordering::SeqCst);
            if let Some(info) = &info {
                let waited = state.since_check();
                if reading
                    && waited >= STALL
                    && info.load(Ordering::Relaxed)
                    && info.swap(false, Ordering::Relaxed)
                {
                    state.print(&stalled_progress_line(&state, waited));
                }
            }
            let stopped = stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst));
            if !(stopped && reading) {
                stalled_since = None;
                continue;
            }
            let since = *stalled_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= STALL && !state.stopping.load(Ordering::SeqCst) {
                let file = state.file.lock().map(|f| f.clone()).unwrap_or_default();
                eprintln!("flowsieve: error: {}", line(signal_name(), &file));
                std::process::exit(130);
            }
        }
    };
    // Without the thread, the replay still stops at its next check, and
    // answers SIGUSR1 there; only a stalled read would then wait.
    let _ = std::thread::Builder::new()
        .name("stall-watch".into())
        .spawn(watch);
}

/// SIGUSR1's progress line for a read that has `waited` since its last
/// check: the figures of that check, and the wait.
fn stalled_progress_line(state: &ReadState, waited: Duration) -> String {
    let packets = state.packets.load(Ordering::Relaxed);
    let offset = state.offset.load(Ordering::Relaxed);
    let seconds = state.started.elapsed().as_secs_f64();
    let line = match state.head.lock() {
        Ok(head) => head.line(packets, offset, seconds),
        Err(_) => format!("flowsieve: progress: {packets} packets"),
    };
    format!(
        "{line}; the read has waited {:.1} s for data",
        waited.as_secs_f64()
    )
}
