//! Replay results as data ([`ReplaySummary`]) and their renderings: a human
//! summary ([`ReplaySummary::render_text`]) and versioned JSON
//! ([`ReplaySummary::to_json`], schema in `docs/json-schema.md`).

mod csv;
mod pipeline;
mod pipeline_text;
mod plot;
mod sections;
mod table;
mod text;

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
    pub schema_version: u32,
    pub tool: ToolInfo,
    pub options: OptionsInfo,
    pub trace: TraceSummary,
    pub flows_top: Vec<TopFlow>,
    pub classes: Vec<ClassSummary>,
    /// One line per damaged or unreadable file.
    pub errors: Vec<String>,
    /// One line per kind of anomaly per file.
    pub warnings: Vec<String>,
    #[serde(skip)]
    pub could_not_open: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct OptionsInfo {
    pub bidirectional: bool,
    pub truth: bool,
    pub classes: String,
    pub max_packets: Option<u64>,
    pub top: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct TraceSummary {
    pub files: Vec<FileSummary>,
    pub link_types: Vec<LinkTypeCount>,
    /// All records read.
    pub packets: u64,
    /// Records that yielded a flow key.
    pub ip_packets: u64,
    /// Distinct flow keys (null without truth).
    pub flows: Option<u64>,
    pub wire_bytes: u64,
    pub captured_bytes: u64,
    /// Records captured shorter than on the wire (snaplen).
    pub truncated_packets: u64,
    /// Keyed packets whose ports were cut off by the capture (ports 0).
    pub ports_truncated: u64,
    /// Earliest timestamp, seconds since the epoch (null if none).
    pub first_ts: Option<f64>,
    /// Latest timestamp.
    pub last_ts: Option<f64>,
    pub duration_s: Option<f64>,
    /// Every skip reason with its count (zeros included).
    pub skipped: BTreeMap<String, u64>,
    pub read_seconds: f64,
    pub packets_per_sec: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FileSummary {
    pub path: String,
    /// `pcap`, `pcap-ns`, `pcap-modified`, `pcapng` (with `-be` for
    /// big-endian classic pcap); empty if the file was not recognised.
    pub format: String,
    /// `none`, `gzip` or `zstd`.
    pub compression: String,
    pub link_types: Vec<u16>,
    pub packets: u64,
    pub wire_bytes: u64,
    pub captured_bytes: u64,
    /// Read to a clean end of file.
    pub complete: bool,
    pub error: Option<String>,
    pub anomalies: Vec<AnomalySummary>,
}

#[derive(Clone, Debug, Serialize)]
pub struct AnomalySummary {
    pub record: u64,
    pub offset: u64,
    pub count: u64,
    pub message: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct LinkTypeCount {
    pub link_type: u16,
    pub name: String,
    pub packets: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TopFlow {
    pub src: String,
    pub dst: String,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub packets: u64,
    /// Wire bytes.
    pub bytes: u64,
    pub captured_bytes: u64,
    pub first_ts: f64,
    pub last_ts: f64,
    pub class: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassSummary {
    pub class: String,
    /// Distinct flows (null without truth).
    pub flows: Option<u64>,
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
