//! `--csv DIR`: one CSV file per table of a pipeline report, from the same
//! column specifications as the text report.
//!
//! Files: `top_flows.csv` and `classes.csv` (the trace's largest flows
//! and per-class totals), `heavy.csv`, `new_flows.csv`, `selective.csv`
//! (one row per variant and class, `all` for the overall row),
//! `sweeps.csv`, `stages.csv`, and one per table of any other stage.
//! Empty cells mean "not measured" (no ground truth).

use super::table::{Cell, Column, Table};
use super::{PipelineReport, ReplaySummary};
use std::path::{Path, PathBuf};

/// `top_flows.csv`: every field of a `flows_top[]` entry, with its rank.
/// (The text report's own list shows fewer, in wider columns, so it keeps
/// its own layout; the widths here are unused.)
const TOP_FLOW_COLUMNS: &[Column] = &[
    Column::new("rank", 4),
    Column::new("src", 39),
    Column::new("sport", 5),
    Column::new("dst", 39),
    Column::new("dport", 5),
    Column::new("proto", 5),
    Column::new("packets", 10),
    Column::new("bytes", 12),
    Column::new("captured_bytes", 12),
    Column::new("first_ts", 18),
    Column::new("last_ts", 18),
    Column::new("class", 16),
];

/// `classes.csv`: a `classes[]` entry.
const CLASS_COLUMNS: &[Column] = &[
    Column::new("class", 16),
    Column::new("flows", 10),
    Column::new("packets", 12),
    Column::new("bytes", 14),
];

impl ReplaySummary {
    /// The largest flows (`--top`), one row each; no rows without the
    /// exact table.
    pub fn top_flows_table(&self) -> Table {
        let mut t = Table::new("top_flows", TOP_FLOW_COLUMNS);
        for (rank, f) in (1u64..).zip(&self.flows_top) {
            t.push(vec![
                Cell::Count(Some(rank)),
                Cell::Text(f.src.clone()),
                Cell::Count(Some(u64::from(f.sport))),
                Cell::Text(f.dst.clone()),
                Cell::Count(Some(u64::from(f.dport))),
                Cell::Count(Some(u64::from(f.proto))),
                Cell::Count(Some(f.packets)),
                Cell::Count(Some(f.bytes)),
                Cell::Count(Some(f.captured_bytes)),
                Cell::Number(Some(f.first_ts)),
                Cell::Number(Some(f.last_ts)),
                Cell::Text(f.class.clone()),
            ]);
        }
        t
    }

    /// The per-class totals; `flows` empty without the exact table.
    pub fn classes_table(&self) -> Table {
        let mut t = Table::new("classes", CLASS_COLUMNS);
        for c in &self.classes {
            t.push(vec![
                Cell::Text(c.class.clone()),
                Cell::Count(c.flows),
                Cell::Count(Some(c.packets)),
                Cell::Count(Some(c.bytes)),
            ]);
        }
        t
    }
}

impl PipelineReport {
    /// The CSV tables as `(file name, contents)`.
    pub fn csv_tables(&self) -> Vec<(String, String)> {
        let mut out = vec![
            self.replay.top_flows_table().csv_file(),
            self.replay.classes_table().csv_file(),
        ];
        out.extend(self.sections.iter().flat_map(|s| s.section.csv_files()));
        out.push(self.latency_table().csv_file());
        out
    }

    /// Writes [`PipelineReport::csv_tables`] into `dir` (created if
    /// missing); returns the files written.
    pub fn write_csv(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        super::write_csv_files(dir, self.csv_tables())
    }
}
