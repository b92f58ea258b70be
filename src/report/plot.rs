//! `--plot DIR`: SVG trade-off and cost curves (plotters), readable on
//! their own: each has a title, labelled axes and a legend.
//!
//! - `tradeoff.svg`: false-positive rate against false-negative rate, one
//!   curve per `k` over the counter-product thresholds (000 Fig. 9), or
//!   over alpha when no product sweep ran;
//! - `cost_alpha.svg`: total cost against alpha, per variant;
//! - `cost_bpe.svg`: total cost against bits per element, per variant;
//! - `heavy_fp.svg`: measured and model false-positive rates of stage 1
//!   per class (with ground truth).

use super::figure::{Figure, Series as FigureSeries};
use super::{PipelineReport, SweepPoint};
use crate::pipeline::SweepParam;
use std::path::{Path, PathBuf};

/// A named series of points.
type Series = (String, Vec<(f64, f64)>);

/// Draws one chart through [`Figure`], so identical series are merged and
/// named and flat axes noted on the chart.
fn chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), String> {
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("plot");
    let mut fig = Figure::new(name, title, x_label, y_label);
    for (n, pts) in series {
        fig.push(FigureSeries::line(n.clone(), pts.clone()));
    }
    if fig.series.is_empty() {
        return Ok(());
    }
    fig.write_svg(path)
}

/// Groups sweep points of one parameter into series keyed by a label.
fn group(
    points: &[SweepPoint],
    parameter: SweepParam,
    label: impl Fn(&SweepPoint) -> String,
    xy: impl Fn(&SweepPoint) -> (f64, f64),
) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for p in points.iter().filter(|p| p.parameter == parameter) {
        let l = label(p);
        match out.iter_mut().find(|s| s.0 == l) {
            Some(s) => s.1.push(xy(p)),
            None => out.push((l, vec![xy(p)])),
        }
    }
    for s in &mut out {
        s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

impl PipelineReport {
    /// Writes the plots that have data into `dir` (created if missing);
    /// returns the files written, or a one-line error.
    pub fn write_plots(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut written = Vec::new();
        let mut emit = |name: &str, title: &str, x: &str, y: &str, series: Vec<Series>| {
            if series.iter().any(|s| !s.1.is_empty()) {
                let path = dir.join(name);
                chart(&path, title, x, y, &series)?;
                written.push(path);
            }
            Ok::<(), String>(())
        };
        if let Some(s) = self.selective() {
            let mut tradeoff = group(
                &s.sweeps,
                SweepParam::Product,
                |p| format!("k = {} (counter-product threshold)", p.k),
                |p| (p.fn_rate, p.fp_rate),
            );
            if tradeoff.is_empty() {
                tradeoff = group(
                    &s.sweeps,
                    SweepParam::Alpha,
                    |p| format!("{} over alpha", p.variant),
                    |p| (p.fn_rate, p.fp_rate),
                );
            }
            tradeoff.extend(group(
                &s.sweeps,
                SweepParam::K,
                |p| format!("{} over k", p.variant),
                |p| (p.fn_rate, p.fp_rate),
            ));
            emit(
                "tradeoff.svg",
                "Directory trade-off: false positives against false negatives",
                "false-negative rate",
                "false-positive rate",
                tradeoff,
            )?;
            emit(
                "cost_alpha.svg",
                "Total cost against alpha (FP costs 1, FN costs alpha)",
                "alpha",
                "total cost",
                group(
                    &s.sweeps,
                    SweepParam::Alpha,
                    |p| p.variant.to_string(),
                    |p| (p.value, p.cost),
                ),
            )?;
            emit(
                "cost_bpe.svg",
                "Total cost against bits per element of the directory",
                "bits per element",
                "total cost",
                group(
                    &s.sweeps,
                    SweepParam::Bpe,
                    |p| p.variant.to_string(),
                    |p| (p.value, p.cost),
                ),
            )?;
        }
        if let Some(h) = self.heavy() {
            let rows: Vec<_> = h
                .classes
                .iter()
                .filter(|r| r.fp_rate.is_some() && r.flows_below.unwrap_or(0) > 0)
                .collect();
            let idx = |i: usize| i as f64;
            let measured = rows
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.fp_rate.map(|v| (idx(i), v)))
                .collect();
            let model = rows
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.model_fp_rate.map(|v| (idx(i), v)))
                .collect();
            let compound = rows
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.model_fp_rate_compound.map(|v| (idx(i), v)))
                .collect();
            let names: Vec<String> = rows
                .iter()
                .enumerate()
                .map(|(i, r)| format!("{i}={}", r.class.as_deref().unwrap_or("?")))
                .collect();
            emit(
                "heavy_fp.svg",
                "Heavy flows: measured and model false-positive rates by class",
                &format!("class ({})", names.join(", ")),
                "false-positive rate",
                vec![
                    ("measured".into(), measured),
                    ("model, distinct elements (003)".into(), model),
                    ("model, compound (flow sizes)".into(), compound),
                ],
            )?;
        }
        Ok(written)
    }
}
