//! 003 (count thresholding): Table 1 (`kappa*`, its linear fit and their
//! relative error), and the false-positive rate against `k` for several
//! `theta` (Fig. 1, Fig. 7), eq. (2) and eq. (3) against flowsieve's
//! counting filter.

use super::{Check, Measured, Options, Outcome, PaperKind, Printed, Verdict};
use crate::filter::{CounterWidth, Counters, CountingBloomFilter};
use crate::model::threshold;
use crate::report::{Figure, Series};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// 003 Table 1: `(theta, kappa*, linear fit, relative error)` as printed.
#[rustfmt::skip]
pub const KAPPA_TABLE_1: [(u64, &str, &str, &str); 30] = [
    (1, "0.6931", "1.1213", "-0.6177"),
    (2, "0.9326", "1.3250", "-0.4207"),
    (3, "1.1635", "1.5287", "-0.3139"),
    (4, "1.3893", "1.7324", "-0.2469"),
    (5, "1.6117", "1.9361", "-0.2013"),
    (6, "1.8317", "2.1398", "-0.1682"),
    (7, "2.0498", "2.3435", "-0.1433"),
    (8, "2.2664", "2.5472", "-0.1239"),
    (9, "2.4818", "2.7509", "-0.1084"),
    (10, "2.6963", "2.9546", "-0.0958"),
    (11, "2.9099", "3.1583", "-0.0854"),
    (12, "3.1228", "3.3620", "-0.0766"),
    (13, "3.3351", "3.5657", "-0.0691"),
    (14, "3.5469", "3.7694", "-0.0627"),
    (15, "3.7582", "3.9731", "-0.0572"),
    (16, "3.9690", "4.1768", "-0.0524"),
    (17, "4.1795", "4.3805", "-0.0481"),
    (18, "4.3896", "4.5842", "-0.0443"),
    (19, "4.5995", "4.7879", "-0.0410"),
    (20, "4.8090", "4.9916", "-0.0380"),
    (21, "5.0183", "5.1953", "-0.0353"),
    (22, "5.2274", "5.3990", "-0.0328"),
    (23, "5.4362", "5.6027", "-0.0306"),
    (24, "5.6448", "5.8064", "-0.0286"),
    (25, "5.8533", "6.0101", "-0.0268"),
    (26, "6.0616", "6.2138", "-0.0251"),
    (27, "6.2697", "6.4175", "-0.0236"),
    (28, "6.4776", "6.6212", "-0.0222"),
    (29, "6.6854", "6.8249", "-0.0209"),
    (30, "6.8931", "7.0286", "-0.0197"),
];

/// The largest theta of the Fig. 6 check: the heavy stage's largest, with
/// 16-bit counters.
const FIG_6_LAST_THETA: u64 = 65_535;

/// Table 1 against the root of `g(theta, kappa)` and the fit
/// `0.2037 theta + 0.9176`; past the table, Fig. 6's bound on their
/// relative error.
pub(super) fn kappa_table(_opts: &Options, progress: &mut dyn FnMut(f64)) -> Outcome {
    let mut out = Outcome::new(
        "003-kappa",
        "Count thresholding: Table 1 (kappa*) and the linear fit",
    );
    let mut exact = Vec::new();
    let mut linear = Vec::new();
    let mut printed_pts = Vec::new();
    for (theta, kstar, klin, rel) in KAPPA_TABLE_1 {
        let k = threshold::kappa_star(theta);
        let l = threshold::kappa_star_linear(theta);
        // The table prints (kappa* - fit) / kappa*.
        let r = (k - l) / k;
        for (q, p, m) in [
            ("kappa*", kstar, k),
            ("fit", klin, l),
            ("rel. error", rel, r),
        ] {
            out.checks.push(Check::judge(
                "Table 1",
                format!("theta={theta}"),
                q,
                Some((Printed::new(p), PaperKind::Analytical)),
                Some(m),
                None,
                None,
            ));
        }
        exact.push((theta as f64, k));
        linear.push((theta as f64, l));
        printed_pts.push((theta as f64, Printed::new(kstar).value()));
    }
    // 003 §3.3 and Fig. 6: past theta = 30 the fit is within "about 2
    // percent" of kappa*. Checked at every theta up to 8-bit counters'
    // largest (255) and at doublings up to 16-bit counters' (65535): the
    // range where a root search on g alone underflowed and answered
    // kappa* = 1e-9 (from theta = 35).
    let mut worst: (f64, u64) = (0.0, 0);
    let doublings = (9..16).map(|b| 1u64 << b);
    for theta in (31..=255).chain(doublings).chain([FIG_6_LAST_THETA]) {
        let k = threshold::kappa_star(theta);
        let r = ((k - threshold::kappa_star_linear(theta)) / k).abs();
        if r.is_nan() || r > worst.0 {
            worst = (r, theta);
        }
        // The figure goes on to 255 (the doublings would squeeze Table
        // 1's range into the axis's first pixels).
        if theta <= 255 {
            exact.push((theta as f64, k));
            linear.push((theta as f64, threshold::kappa_star_linear(theta)));
        }
    }
    out.checks.push(Check {
        table: "Fig. 6".into(),
        label: format!("theta=31..{FIG_6_LAST_THETA}"),
        quantity: "max |rel. error|".into(),
        paper: Some(Printed::new("0.02")),
        model: Some(worst.0),
        sim: None,
        verdict: if worst.0 < 0.02 {
            Verdict::Agrees
        } else {
            Verdict::Deviates(format!(
                "{:.4} at theta = {} is not within the printed 2%",
                worst.0, worst.1
            ))
        },
    });
    progress(1.0);
    let mut fig = Figure::new(
        "003-kappa",
        "003 Table 1 / Fig. 5: kappa*(theta) and its linear fit",
        "count threshold theta",
        "kappa* = k n / m at the optimum",
    );
    fig.push(Series::line("kappa*: root of g (model)", exact));
    fig.push(Series::line("fit 0.2037 theta + 0.9176", linear));
    fig.push(Series::marks("printed (Table 1)", printed_pts));
    out.figures.push(fig);
    out
}

/// The false-positive rate against `k` at `m/n = 4` for `theta = 1..5`:
/// eq. (2) (binomial), eq. (3) (Poisson), and flowsieve's counting filter
/// (partitioned, so its exact rate is eq. (2) with `Binomial(n, k/m)`
/// counters).
pub(super) fn fp_vs_k(opts: &Options, progress: &mut dyn FnMut(f64)) -> Outcome {
    let mut out = Outcome::new(
        "003-fp-vs-k",
        "Count thresholding: false positives against k for theta = 1..5 (Fig. 1, Fig. 7), eq. (2) and eq. (3) against simulation",
    );
    let thetas = 1..=5u64;
    // 003 §3.1, Fig. 2: at n = 1000, m = 4000 and k_opt, eq. (3) is within
    // 0.48% of eq. (2).
    let mut worst: f64 = 0.0;
    for theta in thetas.clone() {
        let k = threshold::k_opt(theta, 4.0);
        let exact = threshold::fpr_binomial(theta, k, 1000, 4000);
        let approx = threshold::fpr_poisson(theta, k, 4.0);
        worst = worst.max((approx - exact).abs() / exact);
    }
    out.checks.push(Check {
        table: "Fig. 2".into(),
        label: "n=1000 m=4000 at k_opt".into(),
        quantity: "max |(3)-(2)|/(2)".into(),
        paper: Some(Printed::new("0.0048")),
        model: Some(worst),
        sim: None,
        verdict: if worst < 0.0048 {
            Verdict::Agrees
        } else {
            Verdict::Deviates(format!("{worst:.5} is not below the printed bound 0.48%"))
        },
    });

    let n = opts.size(5_000, 20_000);
    let m = 4 * n;
    let queries = opts.size(10_000, 40_000) as u64;
    let replicates = opts.size(10, 20);
    let kmax = opts.size(10, 20) as u32;
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x003);
    // hits[theta-1][k-1] per replicate.
    let mut hits = vec![vec![Vec::new(); kmax as usize]; 5];
    for k in 1..=kmax {
        for _ in 0..replicates {
            let mut f = CountingBloomFilter::new(m, k as usize, CounterWidth::W8);
            for _ in 0..n {
                f.insert(rng.random());
            }
            let mut fp = [0u64; 5];
            for _ in 0..queries {
                let c = f.estimate(rng.random());
                for (t, slot) in fp.iter_mut().enumerate() {
                    *slot += u64::from(c > t as u64);
                }
            }
            for t in 0..5 {
                hits[t][k as usize - 1].push((fp[t], queries));
            }
        }
        progress(f64::from(k) / f64::from(kmax));
    }
    let mut fig = Figure::new(
        "003-fp-vs-k",
        "003 Fig. 1/7: false positives against k, m/n = 4",
        "hash functions k",
        "false-positive rate",
    )
    .log_y();
    let trials = queries * replicates as u64;
    for theta in thetas {
        let mut eq2 = Vec::new();
        let mut eq3 = Vec::new();
        let mut sim_pts = Vec::new();
        for k in 1..=kmax {
            let model = threshold::fpr_binomial_partitioned(theta, k, n as u64, m as u64);
            eq2.push((
                f64::from(k),
                threshold::fpr_binomial(theta, k, n as u64, m as u64),
            ));
            eq3.push((f64::from(k), threshold::fpr_poisson(theta, k, 4.0)));
            // A rate whose expected count is under 10 in all the queries
            // cannot be measured here (003 §4 says the same of its own
            // runs below 1e-7).
            if model * trials as f64 >= 10.0 {
                let sim = Measured::rate(&hits[theta as usize - 1][k as usize - 1]);
                sim_pts.push((f64::from(k), sim.mean, sim.se));
                out.checks.push(Check::judge(
                    "simulation",
                    format!("theta={theta} k={k}"),
                    "fpr",
                    None,
                    Some(model),
                    Some(sim),
                    None,
                ));
            }
        }
        fig.push(Series::line(format!("eq. (2), theta = {theta}"), eq2));
        fig.push(Series::line(format!("eq. (3), theta = {theta}"), eq3));
        fig.push(Series::measured(
            format!("flowsieve, theta = {theta}"),
            sim_pts,
        ));
    }
    fig.note(
        "note: eq. (2) and eq. (3) overlap within 0.5% at this size (003 Fig. 1 says the same)",
    );
    out.figures.push(fig);
    out.notes.push(format!(
        "simulation: counting filter of m = {m} counters in k subarrays, n = {n} distinct elements once each, {replicates} filters x {queries} non-member queries per k; rates with an expected count under 10 are not measured (the paper's Fig. 7 omits them likewise); the paper's own run used n = 10^7"
    ));
    out
}
