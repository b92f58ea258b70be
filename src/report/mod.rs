//! Replay results as data ([`ReplaySummary`]) and their renderings: a human
//! summary ([`ReplaySummary::render_text`]) and versioned JSON
//! ([`ReplaySummary::to_json`], schema in `docs/json-schema.md`).

mod atomic;
mod csv;
mod figure;
mod kernel_fs;
mod output_target;
mod pipeline;
mod pipeline_text;
mod plot;
mod sections;
mod table;
mod text;

pub use atomic::{
    names_stdout, probe_writable, stdout_file, write_atomically, write_atomically_to_path,
    write_atomically_with, writes_stdout,
};
pub use figure::{Figure, Series, SeriesStyle};
pub use kernel_fs::kernel_file_system;
pub use output_target::{
    OutputTargetError, check_dir_apart_from_file, check_file_target, check_output_dir,
    check_output_target,
};
pub use pipeline::*;
pub use table::{Cell, Column, Row, Table};

use serde::Serialize;
use std::collections::BTreeMap;

/// The JSON schema version of [`ReplaySummary`].
pub const SCHEMA_VERSION: u32 = 2;

/// How reading went, worst first. The command line maps each to its exit
/// code; the library only says what happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// A file could not be opened at all.
    CouldNotOpen,
    /// At least one file ended early (or was not a capture); everything
    /// before the damage was read.
    DamagedInput,
    /// Every record was read, but some were odd (timestamp fractions out of
    /// range, reserved link-type bits, caplen above snaplen).
    Anomalies,
    /// Everything was read cleanly.
    Clean,
}

/// The whole result of a replay.
#[derive(Clone, Debug, Serialize)]
pub struct ReplaySummary {
    /// The JSON schema version.
    pub schema_version: u32,
    /// The tool that wrote it.
    pub tool: ToolInfo,
    /// The options it ran with.
    pub options: OptionsInfo,
    /// What was read.
    pub trace: TraceSummary,
    /// The largest flows.
    pub flows_top: Vec<TopFlow>,
    /// Per-class totals.
    pub classes: Vec<ClassSummary>,
    /// One line per damaged or unreadable file.
    pub errors: Vec<String>,
    /// One line per kind of anomaly per file.
    pub warnings: Vec<String>,
    #[serde(skip)]
    /// A file could not be opened at all (not serialised).
    pub could_not_open: bool,
}

#[derive(Clone, Debug, Serialize)]
/// The tool that wrote a report.
pub struct ToolInfo {
    /// The name.
    pub name: String,
    /// Its version.
    pub version: String,
}

#[derive(Clone, Debug, Serialize)]
/// The options a replay ran with.
pub struct OptionsInfo {
    /// Keys canonicalised across directions.
    pub bidirectional: bool,
    /// Ground truth kept.
    pub truth: bool,
    /// Per-class totals.
    pub classes: String,
    /// The packet limit.
    pub max_packets: Option<u64>,
    /// Top flows listed.
    pub top: usize,
    /// The flow hash's key in hex, when the hash was keyed (`--hash-key`);
    /// absent for the fixed hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash_key: Option<String>,
    /// The trace filter's expression (`replay -f`); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
/// What was read, over all files.
pub struct TraceSummary {
    /// One entry per file.
    pub files: Vec<FileSummary>,
    /// Packets per link type.
    pub link_types: Vec<LinkTypeCount>,
    /// All records read.
    pub packets: u64,
    /// Records that yielded a flow key.
    pub ip_packets: u64,
    /// Distinct flow keys (null without truth).
    pub flows: Option<u64>,
    /// Bytes on the wire.
    pub wire_bytes: u64,
    /// Bytes captured.
    pub captured_bytes: u64,
    /// Records captured shorter than on the wire (snaplen).
    pub truncated_packets: u64,
    /// Records the trace filter did not keep (`replay -f`); absent without
    /// a filter. They are in no other figure: `packets` and every count
    /// after it are of the records kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filtered_out: Option<u64>,
    /// Keyed packets whose ports were cut off by the capture (ports 0).
    pub ports_truncated: u64,
    /// Earliest timestamp, seconds since the epoch (null if none).
    pub first_ts: Option<f64>,
    /// Latest timestamp.
    pub last_ts: Option<f64>,
    /// Last minus first timestamp, in seconds.
    pub duration_s: Option<f64>,
    /// Every skip reason with its count (zeros included).
    pub skipped: BTreeMap<String, u64>,
    /// Wall time of the read.
    pub read_seconds: f64,
    /// Records read per second.
    pub packets_per_sec: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
/// One file as read.
pub struct FileSummary {
    /// The file as given.
    pub path: String,
    /// `pcap`, `pcap-ns`, `pcap-modified`, `pcapng` (with `-be` for
    /// big-endian classic pcap); empty if the file was not recognised.
    pub format: String,
    /// `none`, `gzip` or `zstd`.
    pub compression: String,
    /// Packets per link type.
    pub link_types: Vec<u16>,
    /// Packets (those the trace filter kept, with `replay -f`).
    pub packets: u64,
    /// Records of this file the trace filter did not keep; absent without
    /// a filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filtered_out: Option<u64>,
    /// Bytes on the wire.
    pub wire_bytes: u64,
    /// Bytes captured.
    pub captured_bytes: u64,
    /// Read to a clean end of file.
    pub complete: bool,
    /// The error that ended the file, if any.
    pub error: Option<String>,
    /// Anomalies, one entry per kind.
    pub anomalies: Vec<AnomalySummary>,
    /// Records stamped earlier than the timestamped record just before them
    /// in the file: the file is not in strict time order (capinfos'
    /// "strict time order: False"). The pipeline counts each such packet
    /// at the latest time seen so far, so windows follow the file's order.
    pub time_steps_back: u64,
    /// The largest of those steps back, in seconds (0 when there is none).
    pub largest_step_back_s: f64,
    /// How far, in seconds, the file's earliest packet is stamped before
    /// the latest packet of the files read ahead of it (`None` when it
    /// starts at or after them, or is the first). The pipeline counts such
    /// packets at that later time, so a run warns: the traces were given
    /// out of time order (or one was given twice).
    pub starts_before_previous_end_s: Option<f64>,
    /// Packets that helper threads dissected and hashed ahead of the
    /// reader (`replay --dissect-threads`); absent when none ran. A figure
    /// of work, like `read_seconds`: every other figure is the same
    /// whatever it is ([`crate::ahead`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dissected_ahead: Option<u64>,
    /// The trace filter could not be compiled for a record's link type,
    /// so reading stopped there (`error` says where and why); the file is
    /// not damaged.
    #[serde(skip)]
    pub stopped_by_filter: bool,
    /// An interrupt (Ctrl-C, SIGTERM, a hang-up) stopped the replay in
    /// this file, after `packets` packets ([`crate::replay::ReplayObserver::keep_reading`]):
    /// the report covers the packets read up to there, and no later file
    /// was read.
    pub interrupted: bool,
}

#[derive(Clone, Debug, Serialize)]
/// One kind of anomaly in one file.
pub struct AnomalySummary {
    /// The first record it was seen at.
    pub record: u64,
    /// The byte offset of that record.
    pub offset: u64,
    /// Records with it.
    pub count: u64,
    /// The one-line warning.
    pub message: String,
}

#[derive(Clone, Debug, Serialize)]
/// Packets of one link type.
pub struct LinkTypeCount {
    /// The link type.
    pub link_type: u16,
    /// The name.
    pub name: String,
    /// Packets.
    pub packets: u64,
}

#[derive(Clone, Debug, Serialize)]
/// One of the largest flows.
pub struct TopFlow {
    /// Source address.
    pub src: String,
    /// Destination address.
    pub dst: String,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
    /// Packets.
    pub packets: u64,
    /// Wire bytes.
    pub bytes: u64,
    /// Bytes captured.
    pub captured_bytes: u64,
    /// First packet, seconds since the epoch.
    pub first_ts: f64,
    /// Last packet, seconds since the epoch.
    pub last_ts: f64,
    /// The class name.
    pub class: String,
}

#[derive(Clone, Debug, Serialize)]
/// One class's totals.
pub struct ClassSummary {
    /// The class name.
    pub class: String,
    /// Distinct flows (null without truth).
    pub flows: Option<u64>,
    /// Packets.
    pub packets: u64,
    /// Wire bytes.
    pub bytes: u64,
}

impl ReplaySummary {
    /// The JSON document (schema version [`SCHEMA_VERSION`]).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// How reading went.
    pub fn outcome(&self) -> Outcome {
        if self.could_not_open {
            Outcome::CouldNotOpen
        } else if !self.errors.is_empty() {
            Outcome::DamagedInput
        } else if !self.warnings.is_empty() {
            Outcome::Anomalies
        } else {
            Outcome::Clean
        }
    }
}
