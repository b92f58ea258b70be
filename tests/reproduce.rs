//! `flowsieve reproduce`: every experiment's quick run, its verdicts, and
//! its figures.

use crate::common;

use flowsieve::reproduce::{CHANCE_BAND_SE, Check, Options, Outcome, Verdict, experiments, select};

fn run(id: &str) -> Outcome {
    let e = experiments().iter().find(|e| e.id == id).expect(id);
    let mut opts = Options::quick();
    if id == "000-fig9" {
        opts.traces = common::shared_traces("reproduce_000_fig9");
    }
    let mut last = 0.0;
    let out = (e.run)(&opts, &mut |f| {
        assert!((0.0..=1.0).contains(&f), "progress {f}");
        last = f;
    });
    assert!(last > 0.99, "{id}: progress ended at {last}");
    out
}

/// The row with this label and quantity.
fn row<'a>(out: &'a Outcome, label: &str, quantity: &str) -> &'a Check {
    out.checks
        .iter()
        .find(|c| c.label == label && c.quantity == quantity)
        .unwrap_or_else(|| panic!("{}: no row {label} {quantity}", out.id))
}

/// No row deviates; rows explained by chance (3 to 4 standard errors) are
/// few (about 1 in 370 at 3 SE; allow 2% of the simulated rows, at least
/// one); every figure has two distinct series or a note.
fn assert_sound(out: &Outcome) {
    let deviating: Vec<_> = out
        .checks
        .iter()
        .filter(|c| matches!(c.verdict, Verdict::Deviates(_)))
        .map(|c| format!("{} {} {}: {:?}", c.table, c.label, c.quantity, c.verdict))
        .collect();
    assert!(
        deviating.is_empty(),
        "{}:\n{}",
        out.id,
        deviating.join("\n")
    );
    let simulated = out.checks.iter().filter(|c| c.sim.is_some()).count();
    let chance = out
        .checks
        .iter()
        .filter(|c| matches!(&c.verdict, Verdict::Explained(r) if r.contains("by chance")))
        .count();
    assert!(
        chance as f64 <= (0.02 * simulated as f64).max(1.0),
        "{}: {chance} of {simulated} simulated rows outside 3 SE",
        out.id
    );
    // Every simulated row really is within the band. (The range coder's
    // rows are judged by size against the entropy bound, not by standard
    // errors.)
    for c in out
        .checks
        .iter()
        .filter(|c| c.sim.is_some() && c.model.is_some() && c.table != "range coder")
    {
        let z = c.sim.unwrap().z(c.model.unwrap());
        assert!(z.abs() <= CHANCE_BAND_SE, "{} {}: {z}", out.id, c.label);
    }
    assert!(!out.figures.is_empty(), "{}: no figure", out.id);
    for f in &out.figures {
        assert!(!f.is_degenerate(), "{}: {} is degenerate", out.id, f.name);
    }
}

#[test]
fn summary_cache_table_agrees_except_its_two_typos() {
    let out = run("001-fp-table");
    assert_sound(&out);
    let table: Vec<_> = out.checks.iter().filter(|c| c.table == "Table").collect();
    assert_eq!(table.len(), 411);
    let explained: Vec<_> = table
        .iter()
        .filter(|c| matches!(c.verdict, Verdict::Explained(_)))
        .map(|c| c.label.as_str())
        .collect();
    assert_eq!(explained, ["m/n=30 k=15", "m/n=30 k=16"]);
    // Every other printed entry rounds to the formula.
    assert!(
        table
            .iter()
            .filter(|c| !explained.contains(&c.label.as_str()))
            .all(|c| c.verdict == Verdict::Agrees
                && c.paper.as_ref().unwrap().agrees(c.model.unwrap()))
    );
    assert!(
        out.checks
            .iter()
            .filter(|c| c.table == "simulation")
            .count()
            >= 16
    );
}

#[test]
fn compressed_tables_and_the_range_coder() {
    let out = run("002-tables");
    assert_sound(&out);
    // Six rows, two printed columns each, all within the printed rounding.
    let printed: Vec<_> = out.checks.iter().filter(|c| c.paper.is_some()).collect();
    assert_eq!(printed.len(), 12);
    assert!(printed.iter().all(|c| c.verdict == Verdict::Agrees));
    // The coder is within 1% of the entropy of what it coded.
    let coder: Vec<_> = out
        .checks
        .iter()
        .filter(|c| c.table == "range coder")
        .collect();
    assert_eq!(coder.len(), 6);
    for c in coder {
        let (sim, bound) = (c.sim.unwrap().mean, c.model.unwrap());
        assert!(
            sim >= bound * 0.999 && sim <= bound * 1.01,
            "{}: {sim} vs {bound}",
            c.label
        );
    }
}

#[test]
fn kappa_star_table_agrees_to_the_printed_digit() {
    let out = run("003-kappa");
    assert_sound(&out);
    // 30 rows of three values, then Fig. 6's bound past theta = 30.
    assert_eq!(out.checks.len(), 91);
    assert!(out.checks.iter().all(|c| c.verdict == Verdict::Agrees));
    let fig6 = &out.checks[90];
    assert_eq!(
        (fig6.table.as_str(), fig6.label.as_str()),
        ("Fig. 6", "theta=31..65535")
    );
    // Table 1's last row is -0.0197 at theta = 30, and the error shrinks
    // from there: the worst past 30 is just below it.
    let worst = fig6.model.unwrap();
    assert!(worst > 0.015 && worst < 0.0197, "{worst}");
}

#[test]
fn threshold_rates_against_k_agree_with_eq_2() {
    let out = run("003-fp-vs-k");
    assert_sound(&out);
    // The Fig. 2 bound, and at least one measurable point per theta (at
    // theta = 5 the best rate, ~1e-5, is below what the quick run can
    // count).
    assert_eq!(out.checks[0].table, "Fig. 2");
    assert_eq!(out.checks[0].verdict, Verdict::Agrees);
    for theta in 1..=4 {
        assert!(
            out.checks
                .iter()
                .any(|c| c.label.starts_with(&format!("theta={theta} "))),
            "theta {theta}"
        );
    }
}

#[test]
fn recycling_rates_and_cycle_lengths_agree_with_the_markov_model() {
    let out = run("004-rate-vs-sigma");
    assert_sound(&out);
    // 4 filter kinds x 3 sigmas x (rate, E[N0]).
    assert_eq!(out.checks.len(), 24);
    assert_eq!(out.figures.len(), 2);
}

#[test]
fn table_2_selective_variants() {
    let out = run("000-table2");
    assert_sound(&out);
    assert_eq!(out.checks.len(), 32 * 3);
    // Selective query and both skip whole classes: the false-negative rate
    // is a count of classes, and the model's equals the paper's where the
    // paper's class count is exact (query: 6, 5, 3, 2 of 13 at alpha 100).
    for (label, classes) in [
        ("a=100 bpe=4 query", 6.0),
        ("a=100 bpe=6 query", 5.0),
        ("a=100 bpe=8 query", 3.0),
        ("a=100 bpe=10 query", 2.0),
        ("a=5 bpe=4 both", 7.0),
        ("a=100 bpe=6 both", 3.0),
    ] {
        let c = row(&out, label, "fnr");
        assert!((c.model.unwrap() - classes / 13.0).abs() < 1e-12, "{label}");
        assert!(c.paper.as_ref().unwrap().agrees(classes / 13.0), "{label}");
    }
    // Selective insertion reproduces the paper's class counts too (3 of 13
    // at bpe 6, alpha 100: printed 2.24e-1 = 3/13 x (1 - fpr)).
    let c = row(&out, "a=100 bpe=6 insertion", "fnr");
    assert!(c.verdict == Verdict::Agrees, "{:?}", c.verdict);
}

#[test]
fn table_3_counting_filter_posterior() {
    let out = run("000-table3");
    assert_sound(&out);
    assert_eq!(out.checks.len(), 20);
    // The model is within 10% of every printed value of the table.
    assert!(out.checks.iter().all(|c| c.verdict == Verdict::Agrees));
}

#[test]
fn fig_8_minimal_products_and_theorem_2() {
    let out = run("000-fig8");
    assert_sound(&out);
    let mins: Vec<f64> = out
        .checks
        .iter()
        .filter(|c| c.quantity == "min product")
        .map(|c| c.model.unwrap())
        .collect();
    assert_eq!(mins, [5.0, 23.0, 91.0]);
    assert!(
        out.checks
            .iter()
            .filter(|c| c.quantity == "posterior")
            .count()
            > 20
    );
}

#[test]
fn fig_9_paper_setting_and_address_classes() {
    let out = run("000-fig9");
    assert_sound(&out);
    // The plain CBF rates of the paper's trace, within 10% of the model.
    for k in [4, 5, 6] {
        let c = row(&out, &format!("k={k} plain CBF"), "fpr");
        assert_eq!(c.verdict, Verdict::Agrees, "k={k}");
    }
    // The synthetic trace's class A is a scan: at alpha = 1 the Theorem 4
    // rule rejects its positives, and its cost falls far below the plain
    // filter's false positives, measured and in the model.
    let plain = row(&out, "synthetic--class-A A plain", "cost");
    let selective = row(&out, "synthetic--class-A A a=1", "cost");
    assert!(
        selective.sim.unwrap().mean * 5.0 < plain.sim.unwrap().mean,
        "{selective:?} vs {plain:?}"
    );
    assert!(selective.model.unwrap() * 5.0 < plain.model.unwrap());
    // One per-class figure for the synthetic trace and one per shared
    // capture.
    let per_class = out
        .figures
        .iter()
        .filter(|f| f.name.starts_with("000-fig9-classes-"))
        .count();
    let shared = !out.notes.iter().any(|n| n.contains("were not given"));
    assert_eq!(per_class, if shared { 4 } else { 1 });
}

#[test]
fn figures_are_written_as_csv_svg_and_png() {
    let dir = tempfile::tempdir().unwrap();
    let out = run("003-kappa");
    let files = out.write(dir.path()).unwrap();
    assert_eq!(files.len(), 1 + 3 * out.figures.len());
    let png = std::fs::read(dir.path().join("003-kappa.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let svg = std::fs::read_to_string(dir.path().join("003-kappa.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("kappa*"));
    let rows = std::fs::read_to_string(dir.path().join("003-kappa-rows.csv")).unwrap();
    assert_eq!(rows.lines().count(), 1 + 91, "the rows' CSV");
    let points = std::fs::read_to_string(dir.path().join("003-kappa.csv")).unwrap();
    // Table 1's 30 thetas in three series, then the model and the fit
    // on to theta = 255.
    assert_eq!(
        points.lines().count(),
        1 + 3 * 30 + 2 * 225,
        "the figure's CSV"
    );
}

#[test]
fn select_names_experiments_papers_and_all() {
    assert_eq!(select("all").unwrap().len(), experiments().len());
    assert_eq!(select("000").unwrap().len(), 4);
    assert_eq!(select("003-kappa").unwrap().len(), 1);
    assert!(select("005").is_none() && select("").is_none());
}
