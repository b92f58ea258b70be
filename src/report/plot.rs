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

/// One chart `--plot` can draw: its file name, title, axis labels and
/// series (a chart with no points is not drawn).
struct PlotSpec {
    name: &'static str,
    title: &'static str,
    x_label: String,
    y_label: &'static str,
    series: Vec<Series>,
}

impl PlotSpec {
    fn has_points(&self) -> bool {
        self.series.iter().any(|s| !s.1.is_empty())
    }
}

/// Every chart `--plot` can draw, in the order it draws them.
const PLOT_NAMES: [&str; 4] = [
    "tradeoff.svg",
    "cost_alpha.svg",
    "cost_bpe.svg",
    "heavy_fp.svg",
];

impl PipelineReport {
    /// Writes the plots that have data into `dir` (created if missing);
    /// returns the files written, or a one-line error.
    /// [`plots_left_out`](Self::plots_left_out) says why any other was not.
    pub fn write_plots(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut written = Vec::new();
        for p in self.plot_specs().into_iter().filter(PlotSpec::has_points) {
            let path = dir.join(p.name);
            chart(&path, p.title, &p.x_label, p.y_label, &p.series)?;
            written.push(path);
        }
        Ok(written)
    }

    /// One line for each chart of `PLOT_NAMES` that
    /// [`write_plots`](Self::write_plots) leaves out of this report, naming
    /// it and what it needs; empty when every chart is drawn. A user who
    /// asks for `--plot DIR` and finds it empty, or without the trade-off
    /// curve, is told why rather than left to guess (the command line
    /// prints each as a note).
    pub fn plots_left_out(&self) -> Vec<String> {
        let specs = self.plot_specs();
        PLOT_NAMES
            .iter()
            .filter(|name| !specs.iter().any(|p| p.name == **name && p.has_points()))
            .map(|name| format!("{name}: {}", self.why_no_plot(name)))
            .collect()
    }

    /// What the chart `name` needs that this report lacks.
    fn why_no_plot(&self, name: &str) -> &'static str {
        if name == "heavy_fp.svg" {
            match self.heavy() {
                None => "the heavy stage did not run (--stages)",
                // Without truth no class counts its flows below theta.
                Some(h) if h.classes.iter().all(|r| r.flows_below.is_none()) => {
                    "needs ground truth for the measured rates (the run had --no-truth)"
                }
                Some(_) => {
                    "no class had a flow below theta in any window, so none could be a false positive"
                }
            }
        } else if self.selective().is_none() {
            "the selective stage did not run (--stages)"
        } else {
            match name {
                "tradeoff.svg" => "needs --sweep product=LIST, alpha=LIST or k=LIST",
                "cost_alpha.svg" => "needs --sweep alpha=LIST",
                _ => "needs --sweep bpe=LIST",
            }
        }
    }

    /// The charts this report's stages and sweeps give, in
    /// [`PLOT_NAMES`]'s order; some may have no points.
    fn plot_specs(&self) -> Vec<PlotSpec> {
        let mut specs = Vec::new();
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
            specs.push(PlotSpec {
                name: "tradeoff.svg",
                title: "Directory trade-off: false positives against false negatives",
                x_label: "false-negative rate".into(),
                y_label: "false-positive rate",
                series: tradeoff,
            });
            specs.push(PlotSpec {
                name: "cost_alpha.svg",
                title: "Total cost against alpha (FP costs 1, FN costs alpha)",
                x_label: "alpha".into(),
                y_label: "total cost",
                series: group(
                    &s.sweeps,
                    SweepParam::Alpha,
                    |p| p.variant.to_string(),
                    |p| (p.value, p.cost),
                ),
            });
            specs.push(PlotSpec {
                name: "cost_bpe.svg",
                title: "Total cost against bits per element of the directory",
                x_label: "bits per element".into(),
                y_label: "total cost",
                series: group(
                    &s.sweeps,
                    SweepParam::Bpe,
                    |p| p.variant.to_string(),
                    |p| (p.value, p.cost),
                ),
            });
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
            specs.push(PlotSpec {
                name: "heavy_fp.svg",
                title: "Heavy flows: measured and model false-positive rates by class",
                x_label: format!("class ({})", names.join(", ")),
                y_label: "false-positive rate",
                series: vec![
                    ("measured".into(), measured),
                    ("model, distinct elements (003)".into(), model),
                    ("model, compound (flow sizes)".into(), compound),
                ],
            });
        }
        specs
    }
}
