//! The ingest error tree. It mirrors the container formats: a problem with
//! the file as a whole ([`IngestError`]), inside a classic pcap
//! ([`PcapError`]) or inside a pcapng ([`PcapNgError`]), plus the recoverable
//! [`Anomaly`] kinds that let reading continue.
//!
//! Every message is one line and names the file, the record (1-based, counting
//! every record or block read so far) and the byte offset where the problem
//! starts. For `.gz`/`.zst` input the offset is into the decompressed stream,
//! and the message says so: the file is named with its compression
//! (`t.pcap.gz (gzip)`) and the offset is a "decompressed byte offset", which
//! the file's own size or a hex dump of it cannot be mistaken for.

use std::io;
use std::path::PathBuf;

use super::Compression;

/// "1 byte" or "N bytes", for the messages below.
fn bytes(n: u64) -> String {
    if n == 1 {
        "1 byte".into()
    } else {
        format!("{n} bytes")
    }
}

/// "1 byte remains" or "N bytes remain".
fn bytes_remain(n: u64) -> String {
    if n == 1 {
        "1 byte remains".into()
    } else {
        format!("{n} bytes remain")
    }
}

/// Where in a file a problem was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// 1-based number of the record (pcap) or block (pcapng) being read.
    pub record: u64,
    /// Byte offset of that record or block from the start of the
    /// (decompressed) file.
    pub offset: u64,
}

/// Damage inside a classic pcap file. Reading stops at the first one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PcapError {
    /// Fewer than 24 bytes: the global header is cut off.
    #[error("file header truncated: {len} of 24 bytes")]
    TruncatedFileHeader {
        /// The length.
        len: usize,
    },
    /// The file ends inside a record header.
    #[error("record header truncated: {have} of {need} bytes before end of file")]
    TruncatedRecordHeader {
        /// Bytes present.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The file ends inside the packet bytes of a record.
    #[error("packet data truncated: caplen {caplen} but only {}", bytes_remain(*remaining))]
    TruncatedRecordData {
        /// The captured length.
        caplen: u32,
        /// Bytes left in the file.
        remaining: u64,
    },
    /// A captured length no capture could have produced (a damaged record
    /// header); reading further would be guessing.
    #[error("implausible caplen {caplen} (snaplen {snaplen}, limit {limit})")]
    ImplausibleCaplen {
        /// The captured length.
        caplen: u32,
        /// The snapshot length.
        snaplen: u32,
        /// The largest accepted value.
        limit: u32,
    },
}

/// Damage inside a pcapng file. Reading stops at the first one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PcapNgError {
    /// The file ends inside a block header.
    #[error("block header truncated: {have} of {need} bytes before end of file")]
    TruncatedBlockHeader {
        /// Bytes present.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The file ends inside a block.
    #[error("block truncated: block length {len} but only {}", bytes_remain(*remaining))]
    TruncatedBlock {
        /// The length.
        len: u32,
        /// Bytes left in the file.
        remaining: u64,
    },
    /// A block length below the 12-byte minimum or the block type's minimum.
    #[error("block type {block_type:#x} too short: length {len}, minimum {min}")]
    BlockTooShort {
        /// The block type.
        block_type: u32,
        /// The length.
        len: u32,
        /// The minimum.
        min: u32,
    },
    /// Block lengths must be multiples of 4.
    #[error("block length {len} is not a multiple of 4")]
    BlockLengthNotAligned {
        /// The length.
        len: u32,
    },
    /// A block larger than any capture writes.
    #[error("implausible block length {len} (limit {limit})")]
    BlockTooLarge {
        /// The length.
        len: u32,
        /// The largest accepted value.
        limit: u32,
    },
    /// The trailing copy of the block length disagrees with the leading one.
    #[error("block length {leading} does not match its trailing copy {trailing}")]
    TrailerMismatch {
        /// The leading length.
        leading: u32,
        /// The trailing length.
        trailing: u32,
    },
    /// A Section Header Block whose byte-order magic is neither order.
    #[error("bad byte-order magic {magic:#010x} in section header")]
    BadByteOrderMagic {
        /// The magic number found.
        magic: u32,
    },
    /// A packet names an interface that no Interface Description Block in
    /// this section declared.
    #[error(
        "packet on interface {interface} but the section declares {}",
        declared_interfaces(*count)
    )]
    UnknownInterface {
        /// The interface id.
        interface: u32,
        /// How many.
        count: usize,
    },
    /// An Enhanced/Obsolete Packet Block whose caplen exceeds its own block.
    #[error("caplen {caplen} exceeds the {} of packet data in the block", bytes(u64::from(*room)))]
    CaplenExceedsBlock {
        /// The captured length.
        caplen: u32,
        /// Bytes of packet data the block has.
        room: u32,
    },
}

/// A recoverable oddity: the record is kept, reading continues, and the
/// anomaly is reported (and makes the run exit with code 4).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnomalyKind {
    /// A timestamp fraction at or above one second; it is carried into the
    /// seconds.
    #[error("timestamp fraction {frac} out of range (must be below {limit}); carried into seconds")]
    TimestampFractionOutOfRange {
        /// The fraction found.
        frac: u32,
        /// The largest accepted value.
        limit: u32,
    },
    /// The pcap link-type field has reserved upper bits set; only the low 16
    /// bits are used, as libpcap does.
    #[error("link-type field {raw:#010x} has reserved bits set; using link type {used}")]
    LinkTypeReservedBits {
        /// The raw field.
        raw: u32,
        /// The link type used.
        used: u16,
    },
    /// A record captured more bytes than the file's snaplen allows; the bytes
    /// are kept.
    #[error("caplen {caplen} exceeds the snaplen {snaplen}; record kept")]
    CaplenExceedsSnaplen {
        /// The captured length.
        caplen: u32,
        /// The snapshot length.
        snaplen: u32,
    },
    /// A pcapng `if_tsresol` option that no clock can have (more than 10^19 or
    /// 2^63 units per second); microseconds are used instead.
    #[error("interface {interface}: unusable if_tsresol {value:#04x}; using microseconds")]
    BadTsResol {
        /// The interface id.
        interface: u32,
        /// The value found.
        value: u8,
    },
}

/// A recoverable anomaly and where it was first seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    /// Where it was first seen.
    pub position: Position,
    /// What it is.
    pub kind: AnomalyKind,
}

/// What stopped the reading of a file (or prevented it).
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The file could not be opened or mapped.
    #[error("{}: cannot open: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The path names something that holds no trace: a directory, say.
    #[error("{}: cannot read a trace from {what}", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is instead ("a directory").
        what: &'static str,
    },
    /// A read from a stream failed (including decompression errors).
    #[error("{}: read error at {} {offset}: {source}", compression.file_label(path), compression.offset_label())]
    Read {
        /// The file.
        path: PathBuf,
        /// The compression around the trace (the offset counts
        /// decompressed bytes unless it is [`Compression::None`]).
        compression: Compression,
        /// Byte offset.
        offset: u64,
        /// The I/O error.
        source: io::Error,
    },
    /// The file is empty, or decompresses to nothing.
    #[error("{}", empty_message(path, *compression))]
    Empty {
        /// The file.
        path: PathBuf,
        /// The compression around the trace.
        compression: Compression,
    },
    /// The first four bytes (decompressed, for a compressed file) are no
    /// known capture format.
    #[error("{}", unknown_format_message(path, *compression, magic))]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// The compression around the trace.
        compression: Compression,
        /// The magic number found.
        magic: String,
    },
    /// Damage inside a classic pcap.
    #[error("{}: record {} at {} {}: {kind}", compression.file_label(path), at.record, compression.offset_label(), at.offset)]
    Pcap {
        /// The file.
        path: PathBuf,
        /// The compression around the trace.
        compression: Compression,
        /// Where.
        at: Position,
        /// What it is.
        kind: PcapError,
    },
    /// Damage inside a pcapng.
    #[error("{}: block {} at {} {}: {kind}", compression.file_label(path), at.record, compression.offset_label(), at.offset)]
    PcapNg {
        /// The file.
        path: PathBuf,
        /// The compression around the trace.
        compression: Compression,
        /// Where.
        at: Position,
        /// What it is.
        kind: PcapNgError,
    },
    /// The file got shorter while it was read (another process truncated
    /// it): reading ended at a record boundary before the size it had when
    /// it was opened.
    #[error("{}: byte offset {offset}: the file shrank while it was read (it had {} when opened)", path.display(), bytes(*size))]
    Shrunk {
        /// The file.
        path: PathBuf,
        /// Byte offset.
        offset: u64,
        /// The file size when it was opened.
        size: u64,
    },
}

impl IngestError {
    /// True when the file was opened and recognised and the error is damage
    /// found part-way (exit code 3), as opposed to a file that could not be
    /// used at all.
    pub fn is_damage(&self) -> bool {
        !matches!(
            self,
            IngestError::Open { .. } | IngestError::NotAFile { .. }
        )
    }
}

/// A framing error before the file name is attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FrameError {
    Pcap(Position, PcapError),
    PcapNg(Position, PcapNgError),
}

impl FrameError {
    pub(crate) fn with_path(self, path: PathBuf, compression: Compression) -> IngestError {
        match self {
            FrameError::Pcap(at, kind) => IngestError::Pcap {
                path,
                compression,
                at,
                kind,
            },
            FrameError::PcapNg(at, kind) => IngestError::PcapNg {
                path,
                compression,
                at,
                kind,
            },
        }
    }
}

/// [`IngestError::Empty`]'s message: a plain file of 0 bytes, or a
/// compressed one whose data decompress to none (the file itself is not
/// empty, so "0 bytes" alone would contradict `ls`).
fn empty_message(path: &std::path::Path, compression: Compression) -> String {
    match compression {
        Compression::None => format!("{}: empty file (0 bytes)", path.display()),
        _ => format!("{}: decompresses to 0 bytes", compression.file_label(path)),
    }
}

/// [`IngestError::UnknownFormat`]'s message. Inside a compressed file the
/// magic is the decompressed data's, and the compression is known, so the
/// list of formats tried names only the containers.
fn unknown_format_message(path: &std::path::Path, compression: Compression, magic: &str) -> String {
    match compression {
        Compression::None => format!(
            "{}: byte offset 0: unknown file format (magic {magic}): not pcap, pcapng, gzip or zstd",
            path.display()
        ),
        _ => format!(
            "{}: decompressed byte offset 0: unknown format (magic {magic}): not pcap or pcapng",
            compression.file_label(path)
        ),
    }
}

/// How many interfaces a section declares, as the unknown-interface error
/// words it: "no interface", "1 interface (id 0)", "3 interfaces (ids 0-2)".
fn declared_interfaces(count: usize) -> String {
    match count {
        0 => "no interface".into(),
        1 => "1 interface (id 0)".into(),
        n => format!("{n} interfaces (ids 0-{})", n - 1),
    }
}
