//! `flowsieve reproduce`: each paper's tables and figures, rerun.
//!
//! Every experiment prints, row by row, the paper's printed value (where
//! it prints one), flowsieve's model, flowsieve's simulation on its own
//! filters, the deviations and a verdict, and returns its figures (CSV,
//! SVG and PNG through [`Figure`]).
//!
//! Verdicts ([`Verdict`]):
//!
//! - the model against a printed *analytical* value must agree within the
//!   paper's rounding (half a unit of the last printed digit);
//! - against a printed *simulated* value (the paper's own Monte Carlo run)
//!   within a tolerance the experiment states, since the paper gives no
//!   error bars;
//! - flowsieve's simulation against the model within 3 standard errors
//!   (between 3 and 4 the row says so and is counted as chance: with a few
//!   hundred rows, one or two are expected there; beyond 4 it deviates);
//! - a printed value that cannot be right is [`Verdict::Explained`], with
//!   the reason, never silently accepted or silently dropped.
//!
//! The experiments are deterministic (seeded); `quick` runs a smaller
//! simulation of each (the tests run them all), the full run is what
//! `docs/reproduction.md` shows.
//!
//! ```
//! use flowsieve::reproduce::{experiments, Options};
//! let e = experiments().iter().find(|e| e.id == "003-kappa").unwrap();
//! let out = (e.run)(&Options::quick(), &mut |_| {});
//! assert!(out.checks.iter().all(|c| c.verdict.is_ok()));
//! ```

mod bloom;
mod compressed;
mod paradox;
mod printed;
mod recycling;
mod stats;
mod threshold;
mod trace;

pub use bloom::{SUMMARY_CACHE, SUMMARY_CACHE_TYPOS};
pub use compressed::COMPRESSED_TABLES;
pub use paradox::PARADOX_TABLE_2;
pub use printed::Printed;
pub use recycling::{RecyclingShape, simulate_recycling};
pub use stats::Measured;
pub use threshold::KAPPA_TABLE_1;

use crate::report::Figure;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How an experiment runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// A smaller simulation (the tests' setting; under a minute for all).
    pub quick: bool,
    /// Seed of every simulation.
    pub seed: u64,
    /// Where the shared captures are (for the trace experiment); `None`
    /// runs it on the synthetic trace only.
    pub traces: Option<PathBuf>,
}

impl Options {
    /// The full run: larger simulations, the shared captures if found.
    pub fn full() -> Options {
        Options {
            quick: false,
            seed: 1,
            traces: None,
        }
    }

    /// The quick run.
    pub fn quick() -> Options {
        Options {
            quick: true,
            ..Options::full()
        }
    }

    /// `quick` or `full` of a count.
    fn size(&self, quick: usize, full: usize) -> usize {
        if self.quick { quick } else { full }
    }
}

/// One experiment.
pub struct Experiment {
    /// Its name on the command line, such as `001-fp-table`.
    pub id: &'static str,
    /// The paper (`000` .. `004`).
    pub paper: &'static str,
    /// What it reproduces.
    pub title: &'static str,
    /// Runs it; the callback gets the fraction done (0 to 1).
    pub run: fn(&Options, &mut dyn FnMut(f64)) -> Outcome,
}

/// Every experiment, in paper order.
pub fn experiments() -> &'static [Experiment] {
    &[
        Experiment {
            id: "001-fp-table",
            paper: "001",
            title: "Summary Cache: the false-positive table (m/n = 2..32, k = 1..)",
            run: bloom::fp_table,
        },
        Experiment {
            id: "002-tables",
            paper: "002",
            title: "Compressed Bloom filters: Tables 1 and 2, and the range coder against the entropy bound",
            run: compressed::tables,
        },
        Experiment {
            id: "003-kappa",
            paper: "003",
            title: "Count thresholding: Table 1 (kappa*) and the linear fit",
            run: threshold::kappa_table,
        },
        Experiment {
            id: "003-fp-vs-k",
            paper: "003",
            title: "Count thresholding: false positives against k for theta = 1..5 (Fig. 1, Fig. 7), eq. (2) and eq. (3) against simulation",
            run: threshold::fp_vs_k,
        },
        Experiment {
            id: "004-rate-vs-sigma",
            paper: "004",
            title: "Recycling filters: average rate and E[N0] against sigma, one- and two-phase, colliding and non-colliding (Fig. 3)",
            run: recycling::rate_vs_sigma,
        },
        Experiment {
            id: "000-table2",
            paper: "000",
            title: "The Bloom paradox: Table II (plain, selective insertion, query, both)",
            run: paradox::table_2,
        },
        Experiment {
            id: "000-table3",
            paper: "000",
            title: "The Bloom paradox: Table III (counting filter, the Theorem 4 query)",
            run: paradox::table_3,
        },
        Experiment {
            id: "000-fig8",
            paper: "000",
            title: "The Bloom paradox: Fig. 8 (membership against the counter product, Theorem 2)",
            run: paradox::fig_8,
        },
        Experiment {
            id: TRACE_EXPERIMENT,
            paper: "000",
            title: "The Bloom paradox: Fig. 9 on traces (trade-off, cost against alpha and bpe, per address class)",
            run: trace::fig_9,
        },
    ]
}

/// The one experiment that reads the shared captures (`--traces`).
pub const TRACE_EXPERIMENT: &str = "000-fig9";

/// The captures [`TRACE_EXPERIMENT`] reads, relative to the traces folder.
///
/// ```
/// use flowsieve::reproduce::{select, trace_captures, TRACE_EXPERIMENT};
/// assert_eq!(trace_captures().len(), 3);
/// assert!(select(TRACE_EXPERIMENT).unwrap()[0].reads_traces());
/// assert!(!select("003-kappa").unwrap()[0].reads_traces());
/// assert_eq!(select("000").unwrap().iter().filter(|e| e.reads_traces()).count(), 1);
/// ```
pub fn trace_captures() -> &'static [&'static str] {
    trace::CAPTURES
}

impl Experiment {
    /// Whether it reads the shared captures given by `--traces`.
    pub fn reads_traces(&self) -> bool {
        self.id == TRACE_EXPERIMENT
    }
}

/// The experiments an argument names: an id, a paper (`000`), or `all`.
pub fn select(name: &str) -> Option<Vec<&'static Experiment>> {
    let all = experiments();
    let chosen: Vec<_> = all
        .iter()
        .filter(|e| name == "all" || e.id == name || e.paper == name)
        .collect();
    (!chosen.is_empty()).then_some(chosen)
}

/// The verdict on one row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every comparison the row has agrees.
    Agrees,
    /// Something differs, for a reason stated: a printed value that cannot
    /// be right, or a paper's simulation that differs from both the model
    /// and flowsieve's simulation.
    Explained(String),
    /// Something differs and no reason is known: a finding.
    Deviates(String),
}

impl Verdict {
    /// Agrees or explained.
    pub fn is_ok(&self) -> bool {
        !matches!(self, Verdict::Deviates(_))
    }

    fn word(&self) -> &'static str {
        match self {
            Verdict::Agrees => "agrees",
            Verdict::Explained(_) => "explained",
            Verdict::Deviates(_) => "DEVIATES",
        }
    }

    fn reason(&self) -> &str {
        match self {
            Verdict::Agrees => "",
            Verdict::Explained(r) | Verdict::Deviates(r) => r,
        }
    }
}

/// A simulation more than this many standard errors from the model
/// deviates. Between 3 and this it is reported as explained by chance: a
/// run of a few hundred rows at 3 SE expects about one such row.
pub const CHANCE_BAND_SE: f64 = 4.0;

/// What kind of value a paper prints, which sets how closely the model must
/// match it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PaperKind {
    /// Computed from a formula: within the printed rounding.
    Analytical,
    /// The paper's own simulation: within this relative tolerance.
    Simulated(f64),
}

/// One row of an experiment.
#[derive(Clone, Debug)]
pub struct Check {
    /// The table or figure (`Table 3`, `Fig. 8`).
    pub table: String,
    /// The row (`m/n=4 k=3`).
    pub label: String,
    /// The quantity (`fpr`).
    pub quantity: String,
    /// The printed value.
    pub paper: Option<Printed>,
    /// flowsieve's model.
    pub model: Option<f64>,
    /// flowsieve's simulation.
    pub sim: Option<Measured>,
    /// The verdict.
    pub verdict: Verdict,
}

impl Check {
    /// Judges a row: the model against the printed value (by `kind`), the
    /// simulation against the model within 3 standard errors. `known` is
    /// the reason for a known disagreement with the paper, if any.
    #[allow(clippy::too_many_arguments)]
    pub fn judge(
        table: &str,
        label: String,
        quantity: &str,
        paper: Option<(Printed, PaperKind)>,
        model: Option<f64>,
        sim: Option<Measured>,
        known: Option<&str>,
    ) -> Check {
        let mut problems = Vec::new();
        let mut chance = None;
        if let (Some(m), Some(s)) = (model, sim) {
            let z = s.z(m);
            if z.abs() > CHANCE_BAND_SE {
                problems.push(format!(
                    "simulation {:.4e} is {z:.1} SE from the model",
                    s.mean
                ));
            } else if !s.agrees_with(m) {
                chance = Some(format!(
                    "simulation {z:+.1} SE from the model: outside 3 SE, inside {CHANCE_BAND_SE}; about 1 row in 370 lands there by chance"
                ));
            }
        }
        let mut paper_off = None;
        if let (Some((p, kind)), Some(m)) = (&paper, model) {
            let ok = match kind {
                PaperKind::Analytical => p.agrees(m),
                PaperKind::Simulated(tol) => (m - p.value()).abs() <= tol * p.value().abs(),
            };
            if !ok {
                paper_off = Some(format!(
                    "model {m:.4e} vs printed {} ({:+.1}%)",
                    p.text(),
                    100.0 * (m - p.value()) / p.value()
                ));
            }
        }
        let verdict = match (paper_off, problems.is_empty()) {
            (None, true) => chance.map_or(Verdict::Agrees, Verdict::Explained),
            (Some(off), true) => match known {
                Some(why) => Verdict::Explained(format!("{why} ({off})")),
                None => Verdict::Deviates(off),
            },
            (off, false) => {
                let mut all = problems;
                all.extend(off);
                Verdict::Deviates(all.join("; "))
            }
        };
        Check {
            table: table.to_string(),
            label,
            quantity: quantity.to_string(),
            paper: paper.map(|p| p.0),
            model,
            sim,
            verdict,
        }
    }
}

/// What an experiment found.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The experiment's id.
    pub id: &'static str,
    /// Its title.
    pub title: &'static str,
    /// Rows.
    pub checks: Vec<Check>,
    /// Figures.
    pub figures: Vec<Figure>,
    /// Lines printed after the table (setup, what was left out and why).
    pub notes: Vec<String>,
}

impl Outcome {
    fn new(id: &'static str, title: &'static str) -> Outcome {
        Outcome {
            id,
            title,
            checks: Vec::new(),
            figures: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Rows per verdict: `(agrees, explained, deviates)`.
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut c = (0, 0, 0);
        for x in &self.checks {
            match x.verdict {
                Verdict::Agrees => c.0 += 1,
                Verdict::Explained(_) => c.1 += 1,
                Verdict::Deviates(_) => c.2 += 1,
            }
        }
        c
    }

    /// The side-by-side text table. Rows that agree are summarised when
    /// there are many (`all_rows` prints every one).
    pub fn to_text(&self, all_rows: bool) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "== {}: {}", self.id, self.title);
        let _ = writeln!(
            out,
            "  {:<10} {:<26} {:<10} {:>12} {:>12} {:>22} {:>9} {:>7}  verdict",
            "table", "row", "quantity", "paper", "model", "simulation +- SE", "dev %", "dev SE"
        );
        let show_all = all_rows || self.checks.len() <= 40;
        let mut hidden = 0;
        for c in &self.checks {
            if !show_all && c.verdict == Verdict::Agrees {
                hidden += 1;
                continue;
            }
            let paper = c
                .paper
                .as_ref()
                .map_or("-".into(), |p| p.text().to_string());
            let model = c.model.map_or("-".into(), fmt);
            let sim = c
                .sim
                .map_or("-".into(), |s| format!("{} +- {}", fmt(s.mean), fmt(s.se)));
            let dev_pct = match (&c.paper, c.model) {
                (Some(p), Some(m)) if p.value() != 0.0 => {
                    format!("{:+.2}", 100.0 * (m - p.value()) / p.value())
                }
                _ => "-".into(),
            };
            let dev_se = match (c.sim, c.model) {
                (Some(s), Some(m)) => format!("{:+.2}", s.z(m)),
                _ => "-".into(),
            };
            let _ = writeln!(
                out,
                "  {:<10} {:<26} {:<10} {:>12} {:>12} {:>22} {:>9} {:>7}  {}{}",
                c.table,
                c.label,
                c.quantity,
                paper,
                model,
                sim,
                dev_pct,
                dev_se,
                c.verdict.word(),
                if c.verdict.reason().is_empty() {
                    String::new()
                } else {
                    format!(": {}", c.verdict.reason())
                }
            );
        }
        if hidden > 0 {
            let _ = writeln!(
                out,
                "  ... and {hidden} more rows that agree (--all-rows prints them; the CSV has every row)"
            );
        }
        for n in &self.notes {
            let _ = writeln!(out, "  {n}");
        }
        let (a, e, d) = self.counts();
        let _ = writeln!(
            out,
            "  verdict: {a} agree, {e} explained, {d} deviate; {} figure(s)",
            self.figures.len()
        );
        out
    }

    /// Every row as CSV.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "table,row,quantity,paper,model,simulation,simulation_se,verdict,reason\n",
        );
        let q = |s: &str| {
            if s.contains([',', '"']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.to_string()
            }
        };
        for c in &self.checks {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{}",
                q(&c.table),
                q(&c.label),
                q(&c.quantity),
                c.paper
                    .as_ref()
                    .map_or(String::new(), |p| p.text().to_string()),
                c.model.map_or(String::new(), |v| v.to_string()),
                c.sim.map_or(String::new(), |s| s.mean.to_string()),
                c.sim.map_or(String::new(), |s| s.se.to_string()),
                c.verdict.word(),
                q(c.verdict.reason())
            );
        }
        out
    }

    /// Writes `ID-rows.csv` (the rows) and each figure's CSV, SVG and PNG into
    /// `dir`; returns the paths.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let rows = dir.join(format!("{}-rows.csv", self.id));
        crate::report::write_atomically(&rows, self.to_csv().as_bytes())
            .map_err(|e| format!("{}: {e}", rows.display()))?;
        let mut written = vec![rows];
        for f in &self.figures {
            written.extend(f.write(dir)?);
        }
        Ok(written)
    }
}

/// Four significant figures, scientific when small or large.
fn fmt(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.4e}")
    } else {
        format!("{v:.5}")
    }
}
