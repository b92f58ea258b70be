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
        let mut out = Vec::new();
        for s in &self.sections {
            for t in s.section.tables() {
                out.push((format!("{}.csv", t.name), t.render_csv()));
            }
        }
        let latency = self.latency_table();
        out.push((format!("{}.csv", latency.name), latency.render_csv()));
        out
    }

    /// Writes [`PipelineReport::csv_tables`] into `dir` (created if
    /// missing); returns the files written.
    pub fn write_csv(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let mut written = Vec::new();
        for (name, contents) in self.csv_tables() {
            let path = dir.join(name);
            super::write_atomically(&path, contents.as_bytes())?;
            written.push(path);
        }
        Ok(written)
    }
}
