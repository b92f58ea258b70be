//! 004 (recycling Bloom filters): the average false-positive rate and the
//! expected messages per cycle `E[N0]` against `sigma`, one- and two-phase,
//! colliding and non-colliding hashing: the Markov model (eqs. (18), (26))
//! against flowsieve's filter, as 004 Fig. 3 does for its own.

use super::{Check, Measured, Options, Outcome};
use crate::filter::{RecyclePolicy, RecyclingBloomFilter};
use crate::model::recycling::{Hashing, RecyclingModel};
use crate::report::{Figure, Series};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The shape of a recycling filter to simulate.
#[derive(Clone, Copy, Debug)]
pub struct RecyclingShape {
    /// Bits.
    pub m: usize,
    /// Hashes.
    pub k: usize,
    /// Recycle when this many bits are set.
    pub sigma: u64,
    /// Colliding or non-colliding hashing.
    pub hashing: Hashing,
    /// Keep the last message's bits on a recycle.
    pub retaining: bool,
    /// Two filters, one frozen.
    pub two_phase: bool,
}

/// One replication: the count-instance false-positive rate and the
/// messages per cycle of flowsieve's recycling filter fed `messages`
/// distinct messages after a warm-up of two cycles, over whole cycles only
/// (from a recycle to a recycle), since a cycle cut short is biased
/// towards its early, emptier states. `(NaN, NaN)` when no cycle ended.
pub fn simulate_recycling(
    shape: RecyclingShape,
    messages: usize,
    rng: &mut ChaCha8Rng,
) -> (f64, f64) {
    let mut f = RecyclingBloomFilter::new(
        shape.m,
        shape.k,
        RecyclePolicy::Sigma(shape.sigma),
        shape.hashing,
        shape.retaining,
        shape.two_phase,
    );
    while f.stats().recycles < 2 {
        f.test_and_insert(rng.random());
    }
    let (mut fp, mut fp_at_last, mut last, mut cycles) = (0u64, 0u64, 0usize, 0u64);
    for i in 0..messages {
        let before = f.stats().recycles;
        if !f.test_and_insert(rng.random()) {
            fp += 1;
        }
        if f.stats().recycles > before {
            cycles += 1;
            last = i + 1;
            fp_at_last = fp;
        }
    }
    if cycles == 0 {
        return (f64::NAN, f64::NAN);
    }
    (fp_at_last as f64 / last as f64, last as f64 / cycles as f64)
}

pub(super) fn rate_vs_sigma(opts: &Options, progress: &mut dyn FnMut(f64)) -> Outcome {
    let mut out = Outcome::new(
        "004-rate-vs-sigma",
        "Recycling filters: average rate and E[N0] against sigma, one- and two-phase, colliding and non-colliding (Fig. 3)",
    );
    let (m, k) = (1000usize, 3usize);
    let sigmas: Vec<u64> = if opts.quick {
        vec![200, 400, 600]
    } else {
        (1..=8).map(|i| 100 * i).collect()
    };
    let replicates = opts.size(10, 20);
    let messages = opts.size(10_000, 40_000);
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x004);
    let mut rate_fig = Figure::new(
        "004-rate-vs-sigma",
        "004 Fig. 3: average false-positive rate against sigma (M = 1000, k = 3)",
        "sigma (set bits at which the filter recycles)",
        "average false-positive rate",
    )
    .log_y();
    let mut n0_fig = Figure::new(
        "004-messages-per-cycle",
        "004: expected messages per cycle E[N0] against sigma (M = 1000, k = 3)",
        "sigma",
        "messages per cycle",
    );
    let combos = [
        (false, Hashing::Colliding, "one-phase, colliding"),
        (false, Hashing::NonColliding, "one-phase, non-colliding"),
        (true, Hashing::Colliding, "two-phase, colliding"),
        (true, Hashing::NonColliding, "two-phase, non-colliding"),
    ];
    let total = combos.len() * sigmas.len();
    let mut done = 0;
    for (two_phase, hashing, name) in combos {
        let (mut model_rate, mut sim_rate, mut model_n0, mut sim_n0) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for &sigma in &sigmas {
            let Ok(model) = RecyclingModel::new(m as u64, k as u32, sigma, hashing, false) else {
                continue;
            };
            let want = if two_phase {
                model.two_phase_fpr()
            } else {
                model.one_phase_fpr()
            };
            let want_n0 = model.expected_messages();
            let runs: Vec<(f64, f64)> = (0..replicates)
                .map(|_| {
                    let shape = RecyclingShape {
                        m,
                        k,
                        sigma,
                        hashing,
                        retaining: false,
                        two_phase,
                    };
                    simulate_recycling(shape, messages, &mut rng)
                })
                .filter(|r| r.0.is_finite())
                .collect();
            let rate = Measured::from_replicates(&runs.iter().map(|r| r.0).collect::<Vec<_>>());
            let n0 = Measured::from_replicates(&runs.iter().map(|r| r.1).collect::<Vec<_>>());
            let label = format!("{name} sigma={sigma}");
            out.checks.push(Check::judge(
                "Fig. 3",
                label.clone(),
                "avg fpr",
                None,
                Some(want),
                Some(rate),
                None,
            ));
            out.checks.push(Check::judge(
                "E[N0]",
                label,
                "msgs/cycle",
                None,
                Some(want_n0),
                Some(n0),
                None,
            ));
            let x = sigma as f64;
            model_rate.push((x, want));
            sim_rate.push((x, rate.mean, rate.se));
            model_n0.push((x, want_n0));
            sim_n0.push((x, n0.mean, n0.se));
            done += 1;
            progress(done as f64 / total as f64);
        }
        rate_fig.push(Series::line(format!("model, {name}"), model_rate));
        rate_fig.push(Series::measured(format!("flowsieve, {name}"), sim_rate));
        if !two_phase {
            // E[N0] is a property of one filter's cycle: the two-phase
            // filter recycles each half on the same rule, so its curve is
            // the one-phase one (drawn once).
            n0_fig.push(Series::line(
                format!("model, {}", hashing_name(hashing)),
                model_n0,
            ));
        }
        n0_fig.push(Series::measured(format!("flowsieve, {name}"), sim_n0));
    }
    out.figures.push(rate_fig);
    out.figures.push(n0_fig);
    out.notes.push(format!(
        "simulation: {replicates} filters per point, {messages} distinct messages after a warm-up of two cycles, measured over whole cycles; 004 prints no numbers for Fig. 3 (its check is the same: model inside the simulation's confidence interval)"
    ));
    out
}

fn hashing_name(h: Hashing) -> &'static str {
    match h {
        Hashing::Colliding => "colliding",
        Hashing::NonColliding => "non-colliding",
    }
}
