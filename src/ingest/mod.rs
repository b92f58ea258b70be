//! Trace sources: classic pcap and pcapng files, plain (memory-mapped) or
//! gzip/zstd-compressed (streamed), detected by magic number, never by file
//! name.
//!
//! [`TraceReader::next_packet`] is a lending iterator: each [`Packet`]
//! borrows its bytes straight from the map (or the stream buffer) and is
//! valid until the next call, so nothing is copied on the way to the
//! dissector.
//!
//! ```no_run
//! use flowsieve::ingest::TraceReader;
//! let mut reader = TraceReader::open("traces/default.pcap")?;
//! let mut packets = 0;
//! while let Some(packet) = reader.next_packet()? {
//!     packets += 1;
//!     let _ = (packet.link_type, packet.data.len());
//! }
//! println!("{packets} packets");
//! # Ok::<(), flowsieve::ingest::IngestError>(())
//! ```

mod anomaly;
mod error;
mod frame;
pub(crate) mod libpcap;
mod link_type;
mod link_type_counts;
#[cfg(target_os = "linux")]
pub mod live;
mod map_guard;
mod page_cache;
pub mod pcap;
pub mod pcapng;
mod read_ahead;
mod shed_at;
mod source;
pub mod split;
pub mod split_ng;
mod time_order;
mod timestamp;
mod trace_filter;

pub use anomaly::{AnomalyEntry, AnomalyLog};
// `ReadMode` is defined below, beside the reader that uses it.
pub use error::{Anomaly, AnomalyKind, IngestError, PcapError, PcapNgError, Position};
pub use link_type::LinkType;
pub use link_type_counts::LinkTypeCounts;
pub use page_cache::{PageCacheState, page_cache_state};
pub use pcap::PcapVariant;
pub use shed_at::ShedAt;
pub use time_order::TimeOrder;
pub use timestamp::{DurationError, DurationNs, Timestamp};
pub use trace_filter::{TraceFilter, TraceFilterError};

use frame::Framed;
use map_guard::GuardedMap;
use pcap::PcapFramer;
use pcapng::PcapNgFramer;
use source::{MapFault, Source, Whole};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One captured packet, borrowed from the reader.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    /// Capture time. For a pcapng Simple Packet Block (which has none) the
    /// previous packet's time, with `timestamped` false.
    pub ts: Timestamp,
    /// False only for packets that carry no timestamp of their own.
    pub timestamped: bool,
    /// Link-layer type of the interface the packet was captured on.
    pub link_type: LinkType,
    /// Length on the wire (the record's original length).
    pub wire_len: u32,
    /// The captured bytes (possibly fewer than `wire_len`).
    pub data: &'a [u8],
    /// pcapng interface index (0 for classic pcap).
    pub interface: u32,
    /// The interface's name: a pcapng `if_name` option, where present.
    pub interface_name: Option<&'a str>,
}

/// The container format, as announced by the magic number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerFormat {
    /// Classic pcap.
    Pcap(PcapVariant),
    /// pcapng.
    PcapNg,
}

impl ContainerFormat {
    /// A short name for reports: `pcap`, `pcap-ns`, `pcap-modified` or
    /// `pcapng`, with `-be` for big-endian classic pcap.
    pub fn name(&self) -> String {
        match self {
            ContainerFormat::PcapNg => "pcapng".into(),
            ContainerFormat::Pcap(v) => {
                let mut s = String::from("pcap");
                if v.modified {
                    s.push_str("-modified");
                }
                if v.nanosecond {
                    s.push_str("-ns");
                }
                if v.big_endian {
                    s.push_str("-be");
                }
                s
            }
        }
    }
}

/// Compression wrapped around the container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Plain.
    None,
    /// gzip.
    Gzip,
    /// zstd.
    Zstd,
}

impl Compression {
    /// The name a report and a message give it: `"none"`, `"gzip"` or
    /// `"zstd"`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }

    /// A file as messages name it: the path, followed for a compressed
    /// file by its compression, so that a message's offsets are read as
    /// the decompressed data's.
    ///
    /// ```
    /// use flowsieve::ingest::Compression;
    /// assert_eq!(Compression::None.file_label("t.pcap".as_ref()), "t.pcap");
    /// assert_eq!(Compression::Gzip.file_label("t.pcap.gz".as_ref()), "t.pcap.gz (gzip)");
    /// ```
    pub fn file_label(self, path: &Path) -> String {
        match self {
            Compression::None => path.display().to_string(),
            _ => format!("{} ({})", path.display(), self.name()),
        }
    }

    /// What a message calls an offset into the file: `"byte offset"`, or
    /// in a compressed file `"decompressed byte offset"`. Every offset the
    /// reader gives counts the bytes the framer saw; in a compressed file
    /// those are not the file's own, which `dd` or a hex dump would show.
    ///
    /// ```
    /// use flowsieve::ingest::Compression;
    /// assert_eq!(Compression::None.offset_label(), "byte offset");
    /// assert_eq!(Compression::Zstd.offset_label(), "decompressed byte offset");
    /// ```
    pub fn offset_label(self) -> &'static str {
        match self {
            Compression::None => "byte offset",
            _ => "decompressed byte offset",
        }
    }
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// What the first bytes of a file say it holds, when they are a trace
/// container or a compression this reader opens: `"pcap"`, `"pcapng"`,
/// `"gzip"` or `"zstd"`; `None` for anything else, or for fewer bytes than
/// the magic needs.
///
/// The outputs use it to refuse writing a report over a capture
/// ([`crate::report::check_output_target`]).
///
/// ```
/// use flowsieve::ingest::container_magic;
/// assert_eq!(container_magic(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0]), Some("pcap"));
/// assert_eq!(container_magic(&[0x0a, 0x0d, 0x0d, 0x0a]), Some("pcapng"));
/// assert_eq!(container_magic(&[0x1f, 0x8b, 8]), Some("gzip"));
/// assert_eq!(container_magic(b"{\n  \"schema"), None);
/// assert_eq!(container_magic(&[0xd4, 0xc3]), None);
/// ```
pub fn container_magic(first: &[u8]) -> Option<&'static str> {
    if first.starts_with(&GZIP_MAGIC) {
        return Some("gzip");
    }
    let magic: [u8; 4] = first.get(..4)?.try_into().ok()?;
    if magic == PCAPNG_MAGIC {
        Some("pcapng")
    } else if magic == ZSTD_MAGIC {
        Some("zstd")
    } else {
        PcapVariant::from_magic(magic).map(|_| "pcap")
    }
}

/// The traces' total size in bytes, when it is known before they are
/// read: every one is a regular file that opens and starts as a plain pcap
/// or pcapng ([`container_magic`]). `None` for no traces, for standard
/// input ([`STDIN_PATH`]), for a compressed trace (its size on disk is not
/// what the run reads), for anything but a regular file (a named pipe is
/// not opened), and for any path that cannot be opened or read; the run
/// itself then says what is wrong with it.
///
/// The command line gives it to [`crate::pages::apply_huge_page_choice_for`],
/// which runs short traces without huge pages on some virtual machines.
///
/// ```
/// use flowsieve::ingest::plain_trace_bytes;
/// let dir = std::env::temp_dir().join(format!("plain-bytes-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let pcap = dir.join("a.pcap");
/// let mut bytes = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
/// bytes.resize(24, 0);
/// std::fs::write(&pcap, &bytes).unwrap();
/// let gz = dir.join("b.pcap.gz");
/// std::fs::write(&gz, [0x1f, 0x8b, 8, 0]).unwrap();
/// assert_eq!(plain_trace_bytes(&[&pcap, &pcap]), Some(48));
/// assert_eq!(plain_trace_bytes(&[&pcap, &gz]), None);
/// assert_eq!(plain_trace_bytes(&[std::path::Path::new("-")]), None);
/// assert_eq!(plain_trace_bytes::<&std::path::Path>(&[]), None);
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn plain_trace_bytes<P: AsRef<Path>>(paths: &[P]) -> Option<u64> {
    if paths.is_empty() {
        return None;
    }
    paths.iter().try_fold(0u64, |total, path| {
        let path = path.as_ref();
        if path.as_os_str() == STDIN_PATH {
            return None;
        }
        // Asked of the path before it is opened: opening a named pipe would
        // wait for its writer, and closing it again could leave the writer
        // with no reader before the run opens it.
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_file() {
            return None;
        }
        let mut file = File::open(path).ok()?;
        let mut first = [0u8; 4];
        file.read_exact(&mut first).ok()?;
        matches!(container_magic(&first), Some("pcap" | "pcapng"))
            .then(|| total.saturating_add(meta.len()))
    })
}

enum Framer {
    Pcap(PcapFramer),
    PcapNg(PcapNgFramer),
}

/// A record a framer's fast path took, of either format.
#[derive(Clone, Copy, Debug)]
enum FastFramed {
    /// A classic pcap record, and the file's link type.
    Pcap(pcap::FastRecord, LinkType),
    /// A pcapng Enhanced Packet Block.
    PcapNg(pcapng::FastBlock),
}

impl FastFramed {
    /// The record's length, where its data starts, and its caplen.
    fn extent(&self) -> (usize, usize, usize) {
        match self {
            FastFramed::Pcap(r, _) => (r.total, r.data_start, r.caplen),
            FastFramed::PcapNg(b) => (b.total, pcapng::EPB_DATA_START, b.caplen),
        }
    }

    /// The packet the record lends, its captured bytes being `data`.
    fn lend<'a>(self, framer: &'a Framer, data: &'a [u8]) -> Packet<'a> {
        match (self, framer) {
            (FastFramed::PcapNg(b), Framer::PcapNg(f)) => f.lend(b, data),
            (FastFramed::Pcap(r, link_type), _) => r.lend(link_type, data),
            // A block is only ever framed by a pcapng framer; lent without
            // its interface's name were it not.
            (FastFramed::PcapNg(b), Framer::Pcap(_)) => b.lend(data, None),
        }
    }
}

/// Frames records by `fast` (a framer's fast path) within the source's
/// [`source::RunView`], handing each to `visit`, up to `max`; consumes what
/// it framed. `extent` gives a record's length, data offset and caplen,
/// `lend` its packet. Returns the packets handed, whether `visit` asked to
/// stop, and a record framed but not lent because the map noted a fault
/// meanwhile (its bytes not consumed).
///
/// Per record it checks only what can change between records: the
/// record's own header (in `fast`) and the map's fault note.
#[inline(always)]
fn run_records<F, R: Copy>(
    source: &mut Source,
    framer: &mut F,
    max: usize,
    visit: &mut impl FnMut(Packet<'_>) -> bool,
    mut fast: impl FnMut(&mut F, &[u8]) -> Option<R>,
    extent: impl Fn(&R) -> (usize, usize, usize),
    lend: impl for<'a> Fn(&'a F, R, &'a [u8]) -> Packet<'a>,
) -> (usize, bool, Option<R>) {
    let Some(view) = source.run_view() else {
        return (0, false, None);
    };
    let mut at = view.at;
    let mut handed = 0;
    let mut stopped = false;
    let mut faulted = None;
    while handed < max && at < view.start_before && view.sound() {
        let Some(r) = view
            .bytes
            .get(at..view.frame_end)
            .and_then(|b| fast(framer, b))
        else {
            break;
        };
        // The header was read: checked again, as `next_packet` checks
        // once the record is framed.
        if !view.sound() {
            faulted = Some(r);
            break;
        }
        let (total, data_start, caplen) = extent(&r);
        let start = at + data_start;
        at += total;
        view.prefetch_ahead(at);
        handed += 1;
        let data = view.bytes.get(start..start + caplen).unwrap_or(&[]);
        if !visit(lend(framer, r, data)) {
            stopped = true;
            break;
        }
    }
    let consumed = at - view.at;
    source.consume(consumed);
    (handed, stopped, faulted)
}

/// How a plain trace file's bytes reach the framers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadMode {
    /// `read` into a reusable buffer (one copy, by the kernel). A
    /// truncation is an early end of file, reported as damage with its
    /// offset.
    Read,
    /// Memory-map the file and lend packets straight from the map (no
    /// copy). The default. The map is guarded (`map_guard`): a file
    /// truncated while it is read ends in the same one-line error as with
    /// [`ReadMode::Read`], never in SIGBUS. A compressed file, a file that
    /// cannot be mapped, or a map beyond the guard's slots is read as with
    /// [`ReadMode::Read`] instead, with the same results.
    #[default]
    Mmap,
}

/// The path that means standard input.
pub const STDIN_PATH: &str = "-";

/// The size a pipe the trace arrives through is widened to (Linux's
/// default ceiling for an unprivileged process, `/proc/sys/fs/pipe-max-size`).
///
/// Why: at the default 64 KiB the writer (`zcat`, `cat`, `gen-trace -o -`)
/// and flowsieve take turns at every 64 KiB, each woken by the other.
/// With 1 MiB the writer runs ahead while the engine works, and the reader
/// finds a full 256 KiB chunk at each `read`. `cat b15.pcap | flowsieve -q
/// --no-truth -` (`benches/pipe_size.py`), eight runs each: 0.264 s wall
/// at 64 KiB, 0.226 at
/// 256 KiB, 0.220 at 1 MiB. Widened by flowsieve itself, paired against
/// the build before over 11 runs: 0.89x the wall time and the CPU time of
/// both processes; the default job 0.96x (BENCHMARKS.md, seventy-second
/// round).
pub const PIPE_BYTES: usize = 1 << 20;

/// Widens the pipe behind `fd` to [`PIPE_BYTES`], if it is a pipe and is
/// narrower. Anything else, and a refusal (a lower ceiling, a user's pipe
/// quota), leaves it as it was: only the pace changes, never what is read.
#[cfg(target_os = "linux")]
pub fn widen_pipe(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    let raw = fd.as_raw_fd();
    // SAFETY: `raw` is borrowed open for the call. F_GETPIPE_SZ reads the
    // pipe's size and fails without effect (EBADF, EINVAL) on anything
    // that is not a pipe.
    let now = unsafe { libc::fcntl(raw, libc::F_GETPIPE_SZ) };
    if now < 0 || now as usize >= PIPE_BYTES {
        return;
    }
    // SAFETY: as above; F_SETPIPE_SZ takes the new size as an int, and a
    // refusal (EPERM, EBUSY) changes nothing.
    let _ = unsafe { libc::fcntl(raw, libc::F_SETPIPE_SZ, PIPE_BYTES as libc::c_int) };
}

/// Elsewhere there is no pipe size to set.
#[cfg(not(target_os = "linux"))]
pub fn widen_pipe(_fd: std::os::fd::BorrowedFd<'_>) {}

/// Reads the packets of one trace file.
pub struct TraceReader {
    path: PathBuf,
    format: ContainerFormat,
    compression: Compression,
    source: Source,
    framer: Framer,
    anomalies: AnomalyLog,
    packets: u64,
    failed: bool,
    /// The size of a plain file read through a buffer, when it was opened:
    /// reaching the end before it means the file shrank.
    opened_len: Option<u64>,
}

impl TraceReader {
    /// Opens a trace with the default [`ReadMode`]: a plain file mapped
    /// and guarded, a compressed one streamed through a decompressor. A
    /// file that another process truncates or rewrites while it is read
    /// ends in an error (or in odd records the framers report), never in a
    /// crash.
    pub fn open(path: impl AsRef<Path>) -> Result<TraceReader, IngestError> {
        Self::open_with(path, ReadMode::default())
    }

    /// Whether `path` names a trace that [`TraceReader::open`] could
    /// open, without reading it: the errors `open` gives for a missing,
    /// unreadable or directory path, `Ok` for anything else. A FIFO or a
    /// device is not opened (opening a FIFO waits for a writer, and a
    /// writer's first bytes would go to this check), nor is `-`.
    ///
    /// ```
    /// use flowsieve::ingest::TraceReader;
    /// assert!(TraceReader::check_openable("traces/default.pcap").is_ok());
    /// let e = TraceReader::check_openable("no-such.pcap").unwrap_err();
    /// assert!(e.to_string().starts_with("no-such.pcap: cannot open: "));
    /// assert!(TraceReader::check_openable("src").is_err());
    /// ```
    pub fn check_openable(path: impl AsRef<Path>) -> Result<(), IngestError> {
        let path = path.as_ref();
        if path.as_os_str() == STDIN_PATH {
            return Ok(());
        }
        let open_err = |source| IngestError::Open {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(open_err)?;
        if meta.is_dir() {
            return Err(IngestError::NotAFile {
                path: path.to_path_buf(),
                what: "a directory",
            });
        }
        if meta.is_file() {
            File::open(path).map_err(open_err)?;
        }
        Ok(())
    }

    /// Opens a trace in the given mode.
    pub fn open_with(path: impl AsRef<Path>, mode: ReadMode) -> Result<TraceReader, IngestError> {
        let path = path.as_ref().to_path_buf();
        if path.as_os_str() == STDIN_PATH {
            // `-` is standard input, read as a stream (as `tcpdump -r -`).
            widen_pipe(std::os::fd::AsFd::as_fd(&std::io::stdin()));
            let reader = std::io::BufReader::with_capacity(1 << 16, std::io::stdin());
            return Self::from_stream(path, reader, None);
        }
        let open_err = |source| IngestError::Open {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        if meta.is_dir() {
            return Err(IngestError::NotAFile {
                path,
                what: "a directory",
            });
        }
        // A FIFO, a pipe such as `/dev/stdin`, a character device: no size
        // to check against and nothing to map, so it is read as a stream.
        if !meta.is_file() {
            widen_pipe(std::os::fd::AsFd::as_fd(&file));
            let reader = std::io::BufReader::with_capacity(1 << 16, file);
            return Self::from_stream(path, reader, None);
        }
        let len = meta.len();
        if len == 0 {
            return Err(IngestError::Empty {
                path,
                compression: Compression::None,
            });
        }
        if mode == ReadMode::Mmap {
            // A map that cannot be had is read through a buffer below.
            if let Ok(map) = GuardedMap::map(&file) {
                // A compressed file is streamed: the decompressor copies
                // its input anyway, and it reads on a thread of its own,
                // where a fault would not be checked.
                let head = map.bytes();
                if !head.starts_with(&GZIP_MAGIC) && !head.starts_with(&ZSTD_MAGIC) {
                    #[cfg(unix)]
                    let _ = map.mmap().advise(memmap2::Advice::Sequential);
                    let mut r = Self::with_source(
                        path,
                        Source::whole(Whole::Mapped(map)),
                        Compression::None,
                    )?;
                    r.opened_len = Some(len);
                    return Ok(r);
                }
            }
        }
        let reader = std::io::BufReader::with_capacity(1 << 16, file);
        Self::from_stream(path, reader, Some(len))
    }

    /// Reads a trace from a buffered stream: peeks at the magic without
    /// consuming it, then hands the same reader to the decompressor or the
    /// framer. `plain_len` is a regular file's size when opened, so that a
    /// plain trace ending before it is reported as shrunk.
    fn from_stream<R: std::io::BufRead + Send + 'static>(
        path: PathBuf,
        mut reader: R,
        plain_len: Option<u64>,
    ) -> Result<TraceReader, IngestError> {
        let head = reader.fill_buf().map_err(|source| IngestError::Read {
            path: path.clone(),
            compression: Compression::None,
            offset: 0,
            source,
        })?;
        if head.starts_with(&GZIP_MAGIC) {
            let decoder = flate2::read::MultiGzDecoder::new(reader);
            Self::with_source(
                path,
                Source::read_ahead(Box::new(decoder)),
                Compression::Gzip,
            )
        } else if head.starts_with(&ZSTD_MAGIC) {
            let decoder = zstd::stream::read::Decoder::with_buffer(reader).map_err(|source| {
                IngestError::Read {
                    path: path.clone(),
                    compression: Compression::Zstd,
                    offset: 0,
                    source,
                }
            })?;
            Self::with_source(
                path,
                Source::read_ahead(Box::new(decoder)),
                Compression::Zstd,
            )
        } else {
            let mut r =
                Self::with_source(path, Source::stream(Box::new(reader)), Compression::None)?;
            r.opened_len = plain_len;
            Ok(r)
        }
    }

    /// Reads a trace held in memory; `name` is used in messages.
    pub fn from_bytes(
        name: impl Into<PathBuf>,
        bytes: Vec<u8>,
    ) -> Result<TraceReader, IngestError> {
        let path = name.into();
        if bytes.is_empty() {
            return Err(IngestError::Empty {
                path,
                compression: Compression::None,
            });
        }
        Self::from_whole(path, Whole::Owned(bytes))
    }

    fn from_whole(path: PathBuf, whole: Whole) -> Result<TraceReader, IngestError> {
        let head = whole.bytes();
        if head.starts_with(&GZIP_MAGIC) {
            let decoder = flate2::read::MultiGzDecoder::new(WholeReader { whole, pos: 0 });
            Self::with_source(
                path,
                Source::read_ahead(Box::new(decoder)),
                Compression::Gzip,
            )
        } else if head.starts_with(&ZSTD_MAGIC) {
            let decoder = zstd::stream::read::Decoder::new(WholeReader { whole, pos: 0 }).map_err(
                |source| IngestError::Read {
                    path: path.clone(),
                    compression: Compression::Zstd,
                    offset: 0,
                    source,
                },
            )?;
            Self::with_source(
                path,
                Source::read_ahead(Box::new(decoder)),
                Compression::Zstd,
            )
        } else {
            Self::with_source(path, Source::whole(whole), Compression::None)
        }
    }

    fn with_source(
        path: PathBuf,
        mut source: Source,
        compression: Compression,
    ) -> Result<TraceReader, IngestError> {
        source.fill(4).map_err(|source| IngestError::Read {
            path: path.clone(),
            compression,
            offset: 0,
            source,
        })?;
        let (w, _, _) = source.window();
        if w.is_empty() {
            return Err(IngestError::Empty { path, compression });
        }
        let mut magic = [0u8; 4];
        let n = w.len().min(4);
        magic[..n].copy_from_slice(&w[..n]);
        let format = if n == 4 && magic == PCAPNG_MAGIC {
            ContainerFormat::PcapNg
        } else if let Some(v) = PcapVariant::from_magic(magic).filter(|_| n == 4) {
            ContainerFormat::Pcap(v)
        } else {
            let hex: String = w[..n].iter().map(|b| format!("{b:02x}")).collect();
            return Err(IngestError::UnknownFormat {
                path,
                compression,
                magic: hex,
            });
        };
        let framer = match format {
            ContainerFormat::Pcap(v) => Framer::Pcap(PcapFramer::new(v)),
            ContainerFormat::PcapNg => Framer::PcapNg(PcapNgFramer::new()),
        };
        Ok(TraceReader {
            path,
            format,
            compression,
            source,
            framer,
            anomalies: AnomalyLog::default(),
            packets: 0,
            failed: false,
            opened_len: None,
        })
    }

    /// The next packet, `Ok(None)` at a clean end of file. After an error
    /// every further call returns `Ok(None)`: the packets before the damage
    /// have been delivered and nothing after it is trusted.
    #[inline]
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, IngestError> {
        // Fast path: a plain record of a classic pcap that lies whole in
        // the bytes at hand (mapped or buffered). Anything unusual (end of
        // the bytes at hand, damage, an anomaly, a page range to release)
        // goes to the general path, which reports it.
        // A guarded map is touched ahead and checked for a fault first
        // (`map_guard`, in `run_view`); a fault goes to the general path,
        // which settles it. Other sources are always sound.
        let fast = match (&mut self.framer, self.source.run_view()) {
            (Framer::Pcap(f), Some(view)) if !self.failed => f
                .fast_record(view.bytes.get(view.at..).unwrap_or(&[]))
                .map(|r| (r, view.at + r.data_start, f.link_type())),
            _ => None,
        };
        // Checked again once the record is framed, in case its own bytes
        // faulted (a cut behind the touches); a record that reaches within
        // 64 KiB of the touches' frontier (rare: over 448 KiB) first has
        // the pages past its end made resident.
        if let Some((r, start, _)) = fast
            && !self.source.map_sound_to(start + r.caplen)
        {
            self.fault_spares((start - r.data_start) as u64, start + r.caplen)?;
        }
        match fast {
            Some((r, start, link_type)) => {
                self.source.consume(r.total);
                self.packets += 1;
                Ok(Some(r.lend(link_type, self.source.slice(start, r.caplen))))
            }
            None => self.next_packet_general(),
        }
    }

    /// Reads up to `max` packets, handing each to `visit` in trace order,
    /// and returns how many it handed: 0 only at a clean end of the trace
    /// (or for a `max` of 0). `visit` returns false to stop after the packet
    /// it was handed. The packets, their order and every error are those of
    /// [`TraceReader::next_packet`] called as often; an error is returned
    /// after the packets before it were handed (and they are not in the
    /// count it replaces).
    ///
    /// Why a run: `next_packet` finds, for every record, the kind of
    /// framer, the kind of byte source, whether the map is due a touch or a
    /// release, and returns the packet through a `Result<Option<_>>`, which
    /// callgrind counted at about 150 instructions a record, more than the
    /// dissection and hash after it. A run settles all of that once and
    /// then frames the records of a classic pcap, or the Enhanced Packet
    /// Blocks of a pcapng, in one loop, checking per record only what can
    /// change between records: the record's own header and the map's
    /// fault note. Anything else (another pcapng block, the end of the
    /// bytes at hand, a record the fast path does not take, a release due)
    /// ends the run, and the next call takes that record through
    /// `next_packet`.
    ///
    /// ```
    /// # let mut pcap = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
    /// # pcap.extend([0; 8]);
    /// # pcap.extend(65535u32.to_le_bytes());
    /// # pcap.extend(1u32.to_le_bytes());
    /// # for (sec, len) in [(1u32, 60u32), (2, 64), (3, 70)] {
    /// #     pcap.extend(sec.to_le_bytes());
    /// #     pcap.extend(0u32.to_le_bytes());
    /// #     pcap.extend(len.to_le_bytes());
    /// #     pcap.extend(len.to_le_bytes());
    /// #     pcap.extend(std::iter::repeat_n(0u8, len as usize));
    /// # }
    /// use flowsieve::ingest::TraceReader;
    /// // A classic pcap of three records of 60, 64 and 70 bytes.
    /// let mut r = TraceReader::from_bytes("three.pcap", pcap).unwrap();
    /// let mut lens = Vec::new();
    /// while r.read_packets(2, |p| { lens.push(p.data.len()); true }).unwrap() > 0 {}
    /// assert_eq!(lens, [60, 64, 70]);
    /// assert_eq!(r.packets(), 3);
    /// ```
    // Always inlined: with a loop for each format its body grew past what
    // the compiler inlines by itself, and out of line it cost a classic
    // pcap replay 12 more instructions a packet (callgrind), the visitor's
    // state going through memory.
    #[inline(always)]
    pub fn read_packets(
        &mut self,
        max: usize,
        mut visit: impl FnMut(Packet<'_>) -> bool,
    ) -> Result<usize, IngestError> {
        if max == 0 {
            return Ok(0);
        }
        let (handed, stopped, faulted) = self.fast_run(max, &mut visit);
        if let Some(r) = faulted {
            // The map noted a fault once this record was framed: settle
            // it as `next_packet` does, and lend the record if it is intact.
            let (total, data_start, caplen) = r.extent();
            let start = self.source.cursor() + data_start;
            self.fault_spares(self.source.cursor() as u64, start + caplen)?;
            self.source.consume(total);
            self.packets += 1;
            visit(r.lend(&self.framer, self.source.slice(start, caplen)));
            return Ok(handed + 1);
        }
        if handed > 0 || stopped {
            return Ok(handed);
        }
        match self.next_packet()? {
            Some(p) => {
                visit(p);
                Ok(1)
            }
            None => Ok(0),
        }
    }

    /// The loop of [`TraceReader::read_packets`]: the records the framer's
    /// fast path takes ([`PcapFramer::fast_record`] for classic pcap,
    /// [`PcapNgFramer::fast_block`] for pcapng), within the source's
    /// [`source::RunView`]. Returns the packets handed, whether `visit`
    /// asked to stop, and a record framed but not lent because the map
    /// noted a fault meanwhile (its bytes not yet consumed).
    #[inline]
    fn fast_run(
        &mut self,
        max: usize,
        visit: &mut impl FnMut(Packet<'_>) -> bool,
    ) -> (usize, bool, Option<FastFramed>) {
        let TraceReader {
            source,
            framer,
            packets,
            failed,
            ..
        } = self;
        if *failed {
            return (0, false, None);
        }
        // One loop a format, each with its framer's fast path inlined.
        let (handed, stopped, faulted) = match framer {
            Framer::Pcap(f) => {
                let link_type = f.link_type();
                let (handed, stopped, faulted) = run_records(
                    source,
                    f,
                    max,
                    visit,
                    |f, b| f.fast_record(b),
                    |r| (r.total, r.data_start, r.caplen),
                    |_, r, data| r.lend(link_type, data),
                );
                (
                    handed,
                    stopped,
                    faulted.map(|r| FastFramed::Pcap(r, link_type)),
                )
            }
            Framer::PcapNg(f) => {
                let (handed, stopped, faulted) = run_records(
                    source,
                    f,
                    max,
                    visit,
                    |f, b| f.fast_block(b),
                    |b| (b.total, pcapng::EPB_DATA_START, b.caplen),
                    |f, b, data| f.lend(b, data),
                );
                (handed, stopped, faulted.map(FastFramed::PcapNg))
            }
        };
        *packets += handed as u64;
        (handed, stopped, faulted)
    }

    /// Every case, for every format and source.
    #[inline(never)]
    fn next_packet_general(&mut self) -> Result<Option<Packet<'_>>, IngestError> {
        if self.failed {
            return Ok(None);
        }
        match self.source.settle_map_fault() {
            // The source now ends where the file does; framing goes on.
            None | Some(MapFault::Shrunk) => {}
            Some(MapFault::Unreadable { offset, source }) => {
                self.failed = true;
                return Err(IngestError::Read {
                    path: self.path.clone(),
                    compression: self.compression,
                    offset,
                    source,
                });
            }
        }
        self.source.release_consumed();
        let found = loop {
            let (window, offset, eof) = self.source.window();
            let step = match &mut self.framer {
                Framer::Pcap(f) => f.next(window, offset, eof, &mut self.anomalies),
                Framer::PcapNg(f) => f.next(window, offset, eof, &mut self.anomalies),
            };
            match step {
                Ok(Framed::Packet(p)) => {
                    let start = self.source.cursor() + p.data_start;
                    if !self.source.map_sound_to(start + p.caplen) {
                        self.fault_spares(offset, start + p.caplen)?;
                    }
                    self.source.consume(p.consumed);
                    break Some((p, start));
                }
                Ok(Framed::Skip { consumed }) => self.source.consume(consumed),
                Ok(Framed::NeedMore { needed }) => {
                    if let Err(source) = self.source.fill(needed) {
                        self.failed = true;
                        return Err(IngestError::Read {
                            path: self.path.clone(),
                            compression: self.compression,
                            offset,
                            source,
                        });
                    }
                }
                Ok(Framed::End) => {
                    if let Some(size) = self.opened_len.filter(|&size| offset < size) {
                        self.failed = true;
                        return Err(IngestError::Shrunk {
                            path: self.path.clone(),
                            offset,
                            size,
                        });
                    }
                    break None;
                }
                Err(e) => {
                    self.failed = true;
                    return Err(e.with_path(self.path.clone(), self.compression));
                }
            }
        };
        Ok(found.map(|(p, start)| {
            self.packets += 1;
            let interface_name = match &self.framer {
                Framer::PcapNg(f) => f.interface_name(p.interface),
                Framer::Pcap(_) => None,
            };
            Packet {
                ts: p.ts,
                timestamped: p.timestamped,
                link_type: p.link_type,
                wire_len: p.wire_len,
                data: self.source.slice(start, p.caplen),
                interface: p.interface,
                interface_name,
            }
        }))
    }

    /// A guarded map noted a fault while the record at `offset`, whose
    /// bytes end at `end`, was framed (its pages made resident, or its
    /// header read): a cut of the file, or an I/O error. Settles it. A
    /// record that lies wholly before the file's new end is intact (only
    /// pages past the end fault) and may be lent; otherwise the reader
    /// stops at the record with [`IngestError::Shrunk`] (or
    /// [`IngestError::Read`] when the file did not shrink). A buffered
    /// read would name the same offset, as a record cut short.
    #[cold]
    #[inline(never)]
    fn fault_spares(&mut self, offset: u64, end: usize) -> Result<(), IngestError> {
        let err = match self.source.settle_map_fault() {
            None | Some(MapFault::Shrunk) if end <= self.source.whole_len() => return Ok(()),
            Some(MapFault::Unreadable { source, .. }) => IngestError::Read {
                path: self.path.clone(),
                compression: self.compression,
                offset,
                source,
            },
            _ => IngestError::Shrunk {
                path: self.path.clone(),
                offset,
                size: self.opened_len.unwrap_or(0),
            },
        };
        self.failed = true;
        Err(err)
    }

    /// The whole file's bytes, for a classic pcap or pcapng file that is
    /// mapped (or held in memory) and not compressed: what
    /// [`crate::ahead`]'s helper threads walk ahead of this reader. `None`
    /// for anything else.
    pub(crate) fn whole_file(&self) -> Option<&[u8]> {
        match self.compression {
            Compression::None => self.source.whole_bytes(),
            _ => None,
        }
    }

    /// The file this reader reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The container format.
    pub fn format(&self) -> ContainerFormat {
        self.format
    }

    /// The compression around the container.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Packets delivered so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Byte offset of the next unread byte (into the decompressed stream for
    /// compressed input).
    pub fn offset(&self) -> u64 {
        self.source.window().1
    }

    /// Recoverable anomalies seen so far.
    pub fn anomalies(&self) -> &AnomalyLog {
        &self.anomalies
    }

    /// Classic pcap snaplen (`None` for pcapng, where it is per interface).
    pub fn snaplen(&self) -> Option<u32> {
        match &self.framer {
            Framer::Pcap(f) => Some(f.snaplen()),
            Framer::PcapNg(_) => None,
        }
    }

    /// Classic pcap link type (`None` for pcapng).
    pub fn file_link_type(&self) -> Option<LinkType> {
        match &self.framer {
            Framer::Pcap(f) => Some(f.link_type()),
            Framer::PcapNg(_) => None,
        }
    }

    /// pcapng sections started so far (0 for classic pcap).
    pub fn sections(&self) -> u64 {
        match &self.framer {
            Framer::Pcap(_) => 0,
            Framer::PcapNg(f) => f.sections(),
        }
    }
}

/// Feeds a compressed whole file to a decompressor without copying it.
struct WholeReader {
    whole: Whole,
    pos: usize,
}

impl Read for WholeReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let rest = self.whole.bytes().get(self.pos..).unwrap_or(&[]);
        let n = rest.len().min(out.len());
        out[..n].copy_from_slice(&rest[..n]);
        self.pos += n;
        Ok(n)
    }
}
