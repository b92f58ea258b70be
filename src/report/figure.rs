//! One figure: named series of points, drawn to SVG and PNG with the same
//! code (plotters), and written as CSV, so that what a plot shows can be
//! read back as numbers.
//!
//! A figure never shows a misleading picture without saying so: series
//! that coincide point for point are drawn once, labelled with every name,
//! and a flat axis or a merge gets a note drawn on the chart
//! ([`Figure::notes`]). A figure with fewer than two distinct series and
//! no note is what [`Figure::is_degenerate`] reports; the rendering tests
//! assert that no figure flowsieve writes is.
//!
//! Text is drawn with DejaVu Sans, compiled in (the `dejavu` crate), so a
//! PNG looks the same on a machine without fonts.
//!
//! ```
//! use flowsieve::report::{Figure, Series};
//! let mut f = Figure::new("fpr", "False positives", "k", "rate");
//! f.push(Series::line("model", vec![(1.0, 0.2), (2.0, 0.1)]));
//! f.push(Series::marks("simulation", vec![(1.0, 0.21), (2.0, 0.09)]));
//! assert!(!f.is_degenerate());
//! let csv = f.to_csv();
//! assert!(csv.starts_with("series,x,y,y_se\n"));
//! ```

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeriesStyle {
    /// A line through the points with a dot at each (a model's curve).
    Line,
    /// Marks only, with error bars when standard errors are given (a
    /// measurement or a paper's printed values).
    Marks,
}

/// A named series of `(x, y)` points, with optional standard errors of `y`.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The legend entry.
    pub name: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64)>,
    /// One standard error per point (drawn as a bar of plus or minus two
    /// standard errors), or empty.
    pub se: Vec<f64>,
    /// How it is drawn.
    pub style: SeriesStyle,
}

impl Series {
    /// A model curve.
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            se: Vec::new(),
            style: SeriesStyle::Line,
        }
    }

    /// Measured or printed values, drawn as marks.
    pub fn marks(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            se: Vec::new(),
            style: SeriesStyle::Marks,
        }
    }

    /// Measured values with a standard error each.
    pub fn measured(name: impl Into<String>, points: Vec<(f64, f64, f64)>) -> Series {
        Series {
            name: name.into(),
            se: points.iter().map(|p| p.2).collect(),
            points: points.into_iter().map(|p| (p.0, p.1)).collect(),
            style: SeriesStyle::Marks,
        }
    }
}

/// A figure: title, axes and series.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// File stem (`NAME.svg`, `NAME.png`, `NAME.csv`).
    pub name: String,
    /// Title drawn above the chart.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis (points with `x <= 0` are left out of the chart,
    /// not of the CSV).
    pub x_log: bool,
    /// Logarithmic y axis (likewise for `y <= 0`).
    pub y_log: bool,
    /// The series.
    pub series: Vec<Series>,
    /// Notes drawn on the chart besides the automatic ones.
    pub extra_notes: Vec<String>,
}

/// Registers the compiled-in font once; plotters draws all text with it.
fn register_font() {
    static FONT: Once = Once::new();
    FONT.call_once(|| {
        // The bytes are a valid TrueType font shipped by the `dejavu`
        // crate; a failure here would leave text undrawn, never panic.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

impl Figure {
    /// An empty figure with linear axes.
    pub fn new(name: &str, title: &str, x_label: &str, y_label: &str) -> Figure {
        Figure {
            name: name.to_string(),
            title: title.to_string(),
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            x_log: false,
            y_log: false,
            series: Vec::new(),
            extra_notes: Vec::new(),
        }
    }

    /// Adds a series (an empty one is kept out).
    pub fn push(&mut self, s: Series) {
        if !s.points.is_empty() {
            self.series.push(s);
        }
    }

    /// With a logarithmic y axis.
    pub fn log_y(mut self) -> Figure {
        self.y_log = true;
        self
    }

    /// With a logarithmic x axis.
    pub fn log_x(mut self) -> Figure {
        self.x_log = true;
        self
    }

    /// Adds a note drawn on the chart.
    pub fn note(&mut self, note: impl Into<String>) {
        self.extra_notes.push(note.into());
    }

    /// The series as drawn: those identical point for point merged into
    /// one, named "a == b".
    pub fn drawn_series(&self) -> Vec<Series> {
        let mut out: Vec<Series> = Vec::new();
        for s in &self.series {
            match out.iter_mut().find(|o| o.points == s.points) {
                Some(o) => o.name = format!("{}{MERGED}{}", o.name, s.name),
                None => out.push(s.clone()),
            }
        }
        out
    }

    /// Every note the chart carries: the figure's own, one per merge of
    /// identical series, and one for an axis on which every point has the
    /// same value.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self.extra_notes.clone();
        for s in self.drawn_series() {
            let names: Vec<&str> = s.name.split(MERGED).collect();
            if names.len() > 1 {
                notes.push(format!(
                    "note: {} are identical, drawn as one line",
                    names.join(", ")
                ));
            }
        }
        let flat = |f: fn(&(f64, f64)) -> f64| {
            let mut v = self.series.iter().flat_map(|s| s.points.iter().map(f));
            let first = v.next()?;
            v.all(|x| (x - first).abs() <= 1e-12 * first.abs().max(1.0))
                .then_some(first)
        };
        if let Some(y) = flat(|p| p.1) {
            notes.push(format!(
                "note: every point has the same value ({y:.4e}): the plotted quantity does not change over this range"
            ));
        }
        if let Some(x) = flat(|p| p.0) {
            notes.push(format!(
                "note: every point is at the same x ({x}): only one setting was measured"
            ));
        }
        notes
    }

    /// True when the chart would show fewer than two distinct series, or
    /// a flat or single-x axis, without a note saying so. Never true for a
    /// figure flowsieve writes.
    pub fn is_degenerate(&self) -> bool {
        let distinct = self.drawn_series().len();
        distinct == 0 || (distinct < 2 && self.notes().is_empty())
    }

    /// The points as CSV: `series,x,y,y_se` (empty `y_se` without one).
    pub fn to_csv(&self) -> String {
        let mut out = String::from("series,x,y,y_se\n");
        for s in &self.series {
            let name = if s.name.contains([',', '"']) {
                format!("\"{}\"", s.name.replace('"', "\"\""))
            } else {
                s.name.clone()
            };
            for (i, (x, y)) in s.points.iter().enumerate() {
                let se = s.se.get(i).map(|v| v.to_string()).unwrap_or_default();
                out.push_str(&format!("{name},{x},{y},{se}\n"));
            }
        }
        out
    }

    /// Writes `NAME.csv`, `NAME.svg` and `NAME.png` into `dir`; returns the
    /// paths, or a one-line error naming the file.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let csv = dir.join(format!("{}.csv", self.name));
        super::write_atomically(&csv, self.to_csv().as_bytes())
            .map_err(|e| format!("{}: {e}", csv.display()))?;
        let svg = dir.join(format!("{}.svg", self.name));
        self.write_svg(&svg)?;
        let png = dir.join(format!("{}.png", self.name));
        self.write_png(&png)?;
        Ok(vec![csv, svg, png])
    }

    /// Draws the figure as SVG.
    pub fn write_svg(&self, path: &Path) -> Result<(), String> {
        register_font();
        super::write_atomically_to_path(path, |tmp| {
            let root = SVGBackend::new(tmp, SIZE).into_drawing_area();
            self.draw(&root)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            root.present()
                .map_err(|e| format!("{}: {e}", path.display()))
        })
    }

    /// Draws the figure as PNG.
    pub fn write_png(&self, path: &Path) -> Result<(), String> {
        register_font();
        super::write_atomically_to_path(path, |tmp| {
            let root = BitMapBackend::new(tmp, SIZE).into_drawing_area();
            self.draw(&root)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            root.present()
                .map_err(|e| format!("{}: {e}", path.display()))
        })
    }

    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let keep = |&(x, y): &(f64, f64)| {
            x.is_finite() && y.is_finite() && (!self.x_log || x > 0.0) && (!self.y_log || y > 0.0)
        };
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for s in &self.series {
            for (i, p) in s.points.iter().enumerate() {
                if !keep(p) {
                    continue;
                }
                let se = s.se.get(i).copied().unwrap_or(0.0) * 2.0;
                x0 = x0.min(p.0);
                x1 = x1.max(p.0);
                let lo = if self.y_log && p.1 - se <= 0.0 {
                    p.1
                } else {
                    p.1 - se
                };
                y0 = y0.min(lo);
                y1 = y1.max(p.1 + se);
            }
        }
        if x0 > x1 {
            return ((0.0, 1.0), (0.0, 1.0));
        }
        let pad = |a: f64, b: f64, log: bool| {
            if log {
                let (la, lb) = (a.log10(), b.log10());
                let d = if (lb - la).abs() < 1e-9 {
                    0.5
                } else {
                    0.05 * (lb - la)
                };
                (10f64.powf(la - d), 10f64.powf(lb + d))
            } else if (b - a).abs() < 1e-12 {
                (a - 0.5 * a.abs().max(1e-3), b + 0.5 * b.abs().max(1e-3))
            } else {
                (a - 0.05 * (b - a), b + 0.05 * (b - a))
            }
        };
        (pad(x0, x1, self.x_log), pad(y0, y1, self.y_log))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let ((x0, x1), (y0, y1)) = self.ranges();
        match (self.x_log, self.y_log) {
            (false, false) => self.draw_in(root, x0..x1, y0..y1),
            (true, false) => self.draw_in(root, (x0..x1).log_scale(), y0..y1),
            (false, true) => self.draw_in(root, x0..x1, (y0..y1).log_scale()),
            (true, true) => self.draw_in(root, (x0..x1).log_scale(), (y0..y1).log_scale()),
        }
    }

    fn draw_in<DB, X, Y>(&self, root: &DrawingArea<DB, Shift>, x: X, y: Y) -> Result<(), String>
    where
        DB: DrawingBackend,
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let mut c = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(80)
            .build_cartesian_2d(x, y)
            .map_err(|x| e(&x))?;
        c.configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .y_label_formatter(&|v| format_tick(*v))
            .x_label_formatter(&|v| format_tick(*v))
            .draw()
            .map_err(|x| e(&x))?;
        let drawable = |p: &(f64, f64)| {
            p.0.is_finite()
                && p.1.is_finite()
                && (!self.x_log || p.0 > 0.0)
                && (!self.y_log || p.1 > 0.0)
        };
        for (i, s) in self.drawn_series().iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(drawable).collect();
            match s.style {
                SeriesStyle::Line => {
                    c.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                        .map_err(|x| e(&x))?
                        .label(s.name.clone())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                        });
                    c.draw_series(pts.iter().map(|&p| Circle::new(p, 2, color.filled())))
                        .map_err(|x| e(&x))?;
                }
                SeriesStyle::Marks => {
                    c.draw_series(
                        pts.iter()
                            .map(|&p| TriangleMarker::new(p, 6, color.stroke_width(2))),
                    )
                    .map_err(|x| e(&x))?
                    .label(s.name.clone())
                    .legend(move |(x, y)| {
                        TriangleMarker::new((x + 9, y), 6, color.stroke_width(2))
                    });
                    let bars: Vec<_> = s
                        .points
                        .iter()
                        .zip(&s.se)
                        .filter(|(p, se)| drawable(p) && **se > 0.0)
                        .map(|(&(x, y), &se)| {
                            let lo = if self.y_log {
                                (y - 2.0 * se).max(y * 1e-3)
                            } else {
                                y - 2.0 * se
                            };
                            PathElement::new(
                                vec![(x, lo), (x, y + 2.0 * se)],
                                color.stroke_width(1),
                            )
                        })
                        .collect();
                    c.draw_series(bars).map_err(|x| e(&x))?;
                }
            }
        }
        c.configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        for (i, n) in self.notes().iter().enumerate() {
            root.draw(&Text::new(
                n.clone(),
                (96, 52 + 16 * i as i32),
                ("sans-serif", 13).into_font().color(&RED),
            ))
            .map_err(|x| e(&x))?;
        }
        Ok(())
    }
}

const SIZE: (u32, u32) = (880, 580);

/// Joins the names of series drawn as one.
const MERGED: &str = " == ";

/// Tick labels that stay short on both small rates and large costs.
fn format_tick(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.1e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}
