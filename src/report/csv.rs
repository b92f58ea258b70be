//! `--csv DIR`: one CSV file per table of a pipeline report, from the same
//! column specifications as the text report.
//!
//! Files: `heavy.csv`, `new_flows.csv`, `selective.csv` (one row per
//! variant and class, `all` for the overall row), `sweeps.csv`,
//! `stages.csv`, and one per table of any other stage. Empty cells mean
//! "not measured" (no ground truth).

use super::PipelineReport;
use std::path::{Path, PathBuf};

impl PipelineReport {
    /// The CSV tables as `(file name, contents)`.
    pub fn csv_tables(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .sections
            .iter()
            .flat_map(|s| s.section.csv_files())
            .collect();
        let latency = self.latency_table();
        out.push((format!("{}.csv", latency.name), latency.render_csv()));
        out
    }

    /// Writes [`PipelineReport::csv_tables`] into `dir` (created if
    /// missing); returns the files written.
    pub fn write_csv(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        super::write_csv_files(dir, self.csv_tables())
    }
}
