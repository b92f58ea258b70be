//! `--csv DIR`: one CSV file per table of a pipeline report.
//!
//! Files: `heavy.csv`, `new_flows.csv`, `selective.csv` (one row per
//! variant and class, `all` for the overall row), `sweeps.csv`,
//! `stages.csv`. Empty cells mean "not measured" (no ground truth).

use super::PipelineReport;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn cell<T: ToString>(x: Option<T>) -> String {
    x.map_or(String::new(), |v| v.to_string())
}

/// Quotes a text cell when it needs it.
fn text(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

impl PipelineReport {
    /// The CSV tables as `(file name, contents)`.
    pub fn csv_tables(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(h) = &self.heavy {
            let mut s = String::from("class,packets,flows_below,flows_above,reported,false_positives,false_negatives,fp_rate,fp_rate_se,fn_rate,model_fp_rate,model_fp_rate_compound\n");
            for r in h.classes.iter().chain(std::iter::once(&h.overall)) {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{},{},{},{}",
                    text(r.class.as_deref().unwrap_or("all")),
                    r.packets,
                    cell(r.flows_below),
                    cell(r.flows_above),
                    r.reported,
                    cell(r.false_positives),
                    cell(r.false_negatives),
                    cell(r.fp_rate),
                    cell(r.fp_rate_se),
                    cell(r.fn_rate),
                    cell(r.model_fp_rate),
                    cell(r.model_fp_rate_compound)
                );
            }
            out.push(("heavy.csv", s));
        }
        if let Some(n) = &self.new_flows {
            let mut s = String::from("class,packets,true_new,reported_new,false_positives,false_negatives,fp_rate_instance,fp_rate_instance_se,fp_rate_first,fp_rate_each,fn_rate,recycles,model_fp_rate\n");
            for r in n.classes.iter().chain(std::iter::once(&n.overall)) {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    text(r.class.as_deref().unwrap_or("all")),
                    r.packets,
                    cell(r.true_new),
                    r.reported_new,
                    cell(r.false_positives),
                    cell(r.false_negatives),
                    cell(r.fp_rate_instance),
                    cell(r.fp_rate_instance_se),
                    cell(r.fp_rate_first),
                    cell(r.fp_rate_each),
                    cell(r.fn_rate),
                    r.recycles,
                    cell(r.model_fp_rate)
                );
            }
            out.push(("new_flows.csv", s));
        }
        if let Some(sel) = &self.selective {
            let mut s = String::from("variant,class,queries,members,prior_est,prior_true,false_positives,false_negatives,fp_rate,fn_rate,cost,cost_reduction,skipped\n");
            for v in &sel.variants {
                for r in v.classes.iter().chain(std::iter::once(&v.overall)) {
                    let _ = writeln!(
                        s,
                        "{},{},{},{},{},{},{},{},{},{},{},{},{}",
                        text(&v.name),
                        text(r.class.as_deref().unwrap_or("all")),
                        r.queries,
                        r.members,
                        r.prior_est,
                        r.prior_true,
                        r.false_positives,
                        r.false_negatives,
                        r.fp_rate,
                        r.fn_rate,
                        r.cost,
                        r.cost_reduction,
                        r.skipped
                    );
                }
            }
            out.push(("selective.csv", s));
            let mut s = String::from(
                "parameter,value,variant,bpe,k,alpha,queries,members,fp_rate,fn_rate,cost\n",
            );
            for p in &sel.sweeps {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{},{},{}",
                    text(&p.parameter),
                    p.value,
                    text(&p.variant),
                    p.bpe,
                    p.k,
                    cell(p.alpha),
                    p.queries,
                    p.members,
                    p.fp_rate,
                    p.fn_rate,
                    p.cost
                );
            }
            out.push(("sweeps.csv", s));
        }
        let mut s = String::from("stage,batches,p50_ns,p99_ns,max_ns\n");
        for st in &self.stages {
            let _ = writeln!(
                s,
                "{},{},{},{},{}",
                text(&st.name),
                st.batches,
                st.p50_ns,
                st.p99_ns,
                st.max_ns
            );
        }
        out.push(("stages.csv", s));
        out
    }

    /// Writes [`PipelineReport::csv_tables`] into `dir` (created if
    /// missing); returns the files written.
    pub fn write_csv(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let mut written = Vec::new();
        for (name, contents) in self.csv_tables() {
            let path = dir.join(name);
            std::fs::write(&path, contents)?;
            written.push(path);
        }
        Ok(written)
    }
}
