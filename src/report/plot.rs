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

use super::{PipelineReport, SweepPoint};
use crate::pipeline::SweepParam;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// A named series of points.
type Series = (String, Vec<(f64, f64)>);

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn bounds(series: &[Series]) -> ((f64, f64), (f64, f64)) {
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    let pad = |a: f64, b: f64| {
        if (b - a).abs() < 1e-12 {
            (a - 0.5 * a.abs().max(1e-3), b + 0.5 * b.abs().max(1e-3))
        } else {
            (a - 0.05 * (b - a), b + 0.05 * (b - a))
        }
    };
    (pad(x0, x1), pad(y0, y1))
}

/// Series that coincide point for point are drawn once, labelled with
/// every name ("plain = selective-query"), and each merge and each flat
/// axis gets a note drawn on the chart: a reader never sees one line where
/// there are several, or a flat line, without being told why.
fn merge_identical(series: &[Series]) -> (Vec<Series>, Vec<String>) {
    let mut out: Vec<Series> = Vec::new();
    let mut notes = Vec::new();
    for (name, pts) in series.iter().filter(|s| !s.1.is_empty()) {
        match out.iter_mut().find(|o| &o.1 == pts) {
            Some(o) => {
                notes.push(format!(
                    "note: {name} is identical to {}",
                    o.0.split(" = ").next().unwrap_or("")
                ));
                o.0 = format!("{} = {name}", o.0);
            }
            None => out.push((name.clone(), pts.clone())),
        }
    }
    let flat = |f: fn(&(f64, f64)) -> f64| {
        let mut v = out.iter().flat_map(|s| s.1.iter().map(f));
        match v.next() {
            Some(first) => v
                .all(|x| (x - first).abs() <= 1e-12 * first.abs().max(1.0))
                .then_some(first),
            None => None,
        }
    };
    if let Some(y) = flat(|p| p.1) {
        notes.push(format!("note: every point has the same value ({y:.4e}): the plotted quantity does not change over this range"));
    }
    if let Some(x) = flat(|p| p.0) {
        notes.push(format!(
            "note: every point is at the same x ({x}): only one setting was measured"
        ));
    }
    (out, notes)
}

fn chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), String> {
    if series.iter().all(|s| s.1.is_empty()) {
        return Ok(());
    }
    let (series, notes) = merge_identical(series);
    let series = &series[..];
    let ((x0, x1), (y0, y1)) = bounds(series);
    let root = SVGBackend::new(path, (800, 560)).into_drawing_area();
    let e = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        c.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        c.draw_series(PointSeries::of_element(
            pts.iter().copied(),
            4,
            color.filled(),
            &|p, s, st| Circle::new(p, s, st),
        ))
        .map_err(|x| e(&x))?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    for (i, n) in notes.iter().enumerate() {
        root.draw(&Text::new(
            n.clone(),
            (90, 60 + 18 * i as i32),
            ("sans-serif", 14).into_font().color(&RED),
        ))
        .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
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
