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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a replay may go without reaching its next check once an
/// interrupt asked it to stop, while it is reading a file, before the
/// process ends at once. A regular file's reads never wait that long; a
/// pipe's can wait forever for its writer.
pub(crate) const STALL: Duration = Duration::from_secs(1);

/// What the observer tells the watchdog ([`watch_for_stalls`]).
#[derive(Default)]
pub(crate) struct ReadState {
    /// A file is open for reading (between `file_started` and
    /// `file_finished`).
    in_file: AtomicBool,
    /// The read loop has seen the stop and is finishing.
    stopping: AtomicBool,
    /// The file being read, for the watchdog's line.
    file: Mutex<String>,
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
    /// The file being read, its size when that is the size of what is read
    /// (neither compressed nor a stream), and the packets of the files
    /// before it.
    file: String,
    plain_size: Option<u64>,
    /// The compression of the file being read, once it is open.
    compression: Compression,
    packets_before: u64,
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
        Progress {
            bar: None,
            stop,
            info,
            file: String::new(),
            plain_size: None,
            compression: Compression::None,
            packets_before: 0,
            stopped_at: None,
            started: Instant::now(),
            state: Arc::default(),
        }
    }

    /// What the watchdog needs to know of this observer's reading.
    pub(crate) fn read_state(&self) -> Arc<ReadState> {
        Arc::clone(&self.state)
    }

    /// The byte offset the read had reached when the interrupt stopped it,
    /// if it did.
    pub(crate) fn stopped_at_offset(&self) -> Option<u64> {
        self.stopped_at.map(|(_, offset)| offset)
    }

    /// The one progress line SIGUSR1 asks for, as `dd` and tcpdump answer
    /// it: the file, how far into it, and the packets in all.
    fn line(&self, file_packets: u64, offset: u64) -> String {
        let of = match self.plain_size {
            Some(size) if size > 0 && offset <= size => {
                format!(" of {size} ({:.1} %)", offset as f64 * 100.0 / size as f64)
            }
            _ => String::new(),
        };
        let all = self.packets_before + file_packets;
        let seconds = self.started.elapsed().as_secs_f64();
        format!(
            "flowsieve: progress: {}: {file_packets} packets, {} {offset}{of}; {all} packets in all in {seconds:.2} s ({:.0} packets/s)",
            self.compression.file_label(self.file.as_ref()),
            self.compression.offset_label(),
            all as f64 / seconds.max(1e-9)
        )
    }
}

impl ReplayObserver for Progress {
    fn file_started(&mut self, path: &Path, size: Option<u64>) {
        self.file = path.display().to_string();
        if let Ok(mut f) = self.state.file.lock() {
            f.clone_from(&self.file);
        }
        self.state.in_file.store(true, Ordering::SeqCst);
        // A stream's (standard input's, a FIFO's) size says nothing of
        // what will be read.
        let regular = std::fs::metadata(path).is_ok_and(|m| m.is_file());
        self.plain_size = size.filter(|_| regular);
        self.compression = Compression::None;
    }

    fn file_opened(&mut self, compression: Compression) {
        // The reader's offsets count decompressed bytes, which the size
        // on disk does not bound: no share of it, and no bar to fill.
        self.compression = compression;
        if compression != Compression::None {
            self.plain_size = None;
        }
        if !std::io::stderr().is_terminal() {
            return;
        }
        let bar = match self.plain_size {
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
        self.bar = Some(bar);
    }

    fn progress(&mut self, _packets: u64, offset: u64) {
        if let Some(b) = &self.bar {
            b.set_position(offset);
        }
    }

    fn keep_reading(&mut self, packets: u64, offset: u64) -> bool {
        if self
            .info
            .as_ref()
            .is_some_and(|i| i.swap(false, Ordering::Relaxed))
        {
            let line = self.line(packets, offset);
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
        self.packets_before += file.packets;
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// The line a replay (or a probe) that an interrupt stopped ends with
/// (exit 130), its report written: which signal, where reading stopped,
/// and what `covering` (such as "the report covers") covers. `None` when
/// no file was stopped (the interrupt came after the last record was
/// read, while the report was being made).
pub(crate) fn interrupted_replay_line(
    signal: &str,
    report: &ReplaySummary,
    offset: Option<u64>,
    covering: &str,
) -> Option<String> {
    let file = report.trace.files.iter().find(|f| f.interrupted)?;
    let at = match offset {
        // A compressed file's offset is its decompressed data's.
        Some(o) if file.compression != "none" => format!(" (decompressed byte offset {o})"),
        Some(o) => format!(" (byte offset {o})"),
        None => String::new(),
    };
    Some(format!(
        "interrupted by {signal} after packet {} of {}{at}: {covering} the {} packets read, and no later packet or file",
        file.packets, file.path, report.trace.packets
    ))
}

/// Starts the thread that ends a replay at once when an interrupt asked it
/// to stop and it reaches no check for [`STALL`] while reading a file: a
/// read from a pipe or FIFO whose writer sends nothing (`flowsieve -` fed
/// by a command that waits) would otherwise never come back, and the
/// replay would hang. Outside a file (the report being made after the
/// last one) it waits for the replay however long that takes. `line`
/// gives the exit's one line from the signal's name and the file.
pub(crate) fn watch_for_stalls(
    stop: Arc<AtomicBool>,
    state: Arc<ReadState>,
    line: fn(&str, &str) -> String,
    signal_name: fn() -> &'static str,
) {
    let watch = move || {
        let mut stalled_since: Option<Instant> = None;
        loop {
            std::thread::sleep(Duration::from_millis(20));
            if !stop.load(Ordering::SeqCst) || state.stopping.load(Ordering::SeqCst) {
                continue;
            }
            if !state.in_file.load(Ordering::SeqCst) {
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
    // Without the thread, the replay still stops at its next check; only
    // a stalled read would then wait.
    let _ = std::thread::Builder::new()
        .name("stall-watch".into())
        .spawn(watch);
}
