//! Numerical building blocks for the models: log-factorials, binomial and
//! Poisson tails computed without cancellation, and a bisection root finder.

/// Below this, `ln(n!)` is the sum of logarithms, read from a table.
const LN_FACTORIAL_TABLE: usize = 256;

/// `ln(n!)` for `n < 256`, each entry the left-to-right sum
/// `ln 2 + ln 3 + ... + ln n` that [`ln_factorial_summed`] computes.
///
/// A running sum adds the same terms in the same order as the summation
/// itself, so each entry is bit-identical to it (a test checks all 256).
/// Why a table: the models evaluate `ln C(n, l)` for small `l` hundreds of
/// times per window (003 eq. (2) at 256 loads per shard-window), and
/// summing up to 255 logarithms each time was most of a run's model cost.
fn ln_factorial_table() -> &'static [f64; LN_FACTORIAL_TABLE] {
    static TABLE: std::sync::OnceLock<[f64; LN_FACTORIAL_TABLE]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0.0; LN_FACTORIAL_TABLE];
        let mut sum = ln_factorial_summed(1);
        for (n, e) in t.iter_mut().enumerate() {
            if n >= 2 {
                sum += (n as f64).ln();
                *e = sum;
            } else {
                *e = ln_factorial_summed(n as u64);
            }
        }
        t
    })
}

/// `ln(n!)` as the plain sum of logarithms (the definition the table is
/// checked against).
pub fn ln_factorial_summed(n: u64) -> f64 {
    (2..=n).map(|i| (i as f64).ln()).sum()
}

/// `ln(n!)`, exact summation below 256 (from a table) and Stirling's series
/// above.
pub fn ln_factorial(n: u64) -> f64 {
    if let Some(&v) = usize::try_from(n)
        .ok()
        .and_then(|i| ln_factorial_table().get(i))
    {
        v
    } else {
        let x = n as f64;
        x * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI * x).ln() + 1.0 / (12.0 * x)
            - 1.0 / (360.0 * x * x * x)
    }
}

/// `ln C(n, l)`.
pub fn ln_binomial(n: u64, l: u64) -> f64 {
    if l > n {
        return f64::NEG_INFINITY;
    }
    ln_factorial(n) - ln_factorial(l) - ln_factorial(n - l)
}

/// A logarithm below which a tail sum's term, and every term after it, is
/// `+0`, for terms whose logarithms are computed from quantities of size at
/// most `magnitude` (their absolute sum).
///
/// Why the tails need it: [`binomial_tail`] and [`poisson_tail`] add terms
/// from `theta` on, where they only decrease, and stop when a term is
/// negligible against the sum so far (`t < sum * 1e-17`). Deep in a tail
/// every term underflows to `+0`, the sum stays `+0`, and that test never
/// holds: the loop ran on to `trials` (or 10,000 terms past `theta`), an
/// `exp` and up to two logarithms a term, for a sum of zeros. The heavy
/// stage's online model met exactly this at `--theta` 90 and above, where
/// the tail at a window's small loads is below `1e-308`: a run took four
/// to five times as long as at `--theta` 80, and ten times the default
/// job's (BENCHMARKS.md, thirty-fifth round).
///
/// Why stopping there changes no bit: `exp(x)` is `+0` for every `x` below
/// `ln(2^-1075)` ≈ −745.13, and adding `+0` to a sum of non-negative terms
/// leaves it as it was. The exact logarithms decrease from `theta` on; the
/// computed ones carry a rounding error of at most a few units in the last
/// place of `magnitude`, so a later computed one can exceed an earlier by
/// at most twice that. The bound is −800, far below the underflow, less
/// `1e-12 · magnitude`, far more than twice the rounding: a term whose
/// logarithm is below it is `+0`, and so is every later one.
/// `tests/model.rs` checks both tails bit for bit against the sums that
/// do not stop early, at thetas where the terms underflow.
fn zero_term_bound(magnitude: f64) -> f64 {
    -800.0 - 1e-12 * magnitude.abs()
}

/// `P(X >= theta)` for `X ~ Poisson(mean)`, the regularised lower
/// incomplete gamma function `P(theta, mean) = 1 - Gamma(theta, mean) /
/// Gamma(theta)`. Summed from whichever side avoids cancellation.
pub fn poisson_tail(theta: u64, mean: f64) -> f64 {
    if theta == 0 {
        return 1.0;
    }
    if mean.is_nan() || mean <= 0.0 {
        return 0.0;
    }
    let ln_term = |l: u64| l as f64 * mean.ln() - mean - ln_factorial(l);
    if mean < theta as f64 {
        // Terms decrease from l = theta on: sum the tail directly.
        // The loop adds at most the terms `theta..=last`.
        let last = theta.saturating_add(10_001);
        let zero_below = zero_term_bound(last as f64 * mean.ln().abs() + mean + ln_factorial(last));
        let mut sum = 0.0;
        let mut l = theta;
        loop {
            let ln = ln_term(l);
            if ln < zero_below {
                // This term and every later one are +0 (see
                // `zero_term_bound`): the sum is what it is.
                break;
            }
            let t = ln.exp();
            sum += t;
            if t < sum * 1e-17 || l >= last {
                break;
            }
            l += 1;
        }
        sum.min(1.0)
    } else {
        let head: f64 = (0..theta).map(|l| ln_term(l).exp()).sum();
        (1.0 - head).max(0.0)
    }
}

/// `ln P(X >= theta)` for `X ~ Poisson(mean)` with `mean < theta`, as the
/// pair `(ln P(X = theta), S)` with `P(X >= theta) = P(X = theta) S` and
/// `S = sum_{j >= 0} mean^j theta! / (theta + j)!`. Each term of `S` is
/// the last times `mean / (theta + j) < 1`, so `S` is summed scaled by its
/// first term and never underflows, however small the tail.
pub(crate) fn poisson_tail_from_theta(theta: u64, mean: f64) -> (f64, f64) {
    let th = theta as f64;
    let mut sum = 1.0_f64;
    let mut term = 1.0_f64;
    let mut j = 1u64;
    // Past j = 2 sqrt(theta) * 20 or so the terms are below 1e-17 of the
    // sum even at mean = theta.
    loop {
        term *= mean / (th + j as f64);
        sum += term;
        if term <= sum * 1e-17 {
            break;
        }
        j += 1;
    }
    (th * mean.ln() - mean - ln_factorial(theta), sum)
}

/// `ln P(X >= theta)` for `X ~ Poisson(mean)`: [`poisson_tail`]'s
/// logarithm, also where the tail is below the smallest `f64`. `0` at
/// `theta = 0`, `-infinity` at a mean of 0 or less.
///
/// ```
/// use flowsieve::model::special::{ln_poisson_tail, poisson_tail};
/// let t = poisson_tail(10, 3.0);
/// assert!((ln_poisson_tail(10, 3.0) - t.ln()).abs() < 1e-13);
/// // P(Poisson(21.2) >= 100) is about 1e-35: representable, but its
/// // 212th power (003 eq. (3) at k_opt for m/n = 10) is not.
/// assert_eq!(poisson_tail(100, 21.2).powi(212), 0.0);
/// assert!(212.0 * ln_poisson_tail(100, 21.2) > -20_000.0);
/// ```
pub fn ln_poisson_tail(theta: u64, mean: f64) -> f64 {
    if theta == 0 {
        return 0.0;
    }
    if mean.is_nan() || mean <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if mean < theta as f64 {
        let (ln_first, sum) = poisson_tail_from_theta(theta, mean);
        ln_first + sum.ln()
    } else {
        // At or above the mean's floor the tail is at least about a half.
        poisson_tail(theta, mean).ln()
    }
}

/// Above this many trials, `binomial_ln_pmf` takes `ln(trials!) -
/// ln((trials - l)!)` from the difference of Stirling's series rather than
/// by subtracting the two: each is about `trials ln trials`, over 9e10
/// here, whose rounding (1.5e-5 and growing with `trials`) is all of the
/// difference's error. At 2e14 trials it made eq. (2) at `theta = 100`
/// wrong by a factor of 10^7 (its logarithm by 16 of 16,800). Below it the
/// subtraction is kept, bit for bit, so that every rate the report's model
/// columns take from windows of up to four billion insertions is as it was.
pub const STIRLING_DIFFERENCE_TRIALS: u64 = 1 << 32;

/// `ln(n!) - ln((n - l)!)`, the logarithm of the falling factorial, for
/// `n - l >= 256` (where [`ln_factorial`] is Stirling's series), from the
/// difference of the two series term by term. With `r = ln(1 - l/n)`:
/// `n ln n - m ln m = l ln m - n r` (`m = n - l`), the `0.5 ln(2 pi x)`
/// terms differ by `-r/2`, and the `1/(12x)` and `1/(360x^3)` terms are
/// subtracted as they are, each far below the others' rounding.
fn ln_falling_factorial(n: u64, l: u64) -> f64 {
    let (nf, mf) = (n as f64, (n - l) as f64);
    let lf = l as f64;
    let r = (-lf / nf).ln_1p();
    lf * mf.ln() - nf * r - lf - 0.5 * r + (1.0 / (12.0 * nf) - 1.0 / (12.0 * mf))
        - (1.0 / (360.0 * nf * nf * nf) - 1.0 / (360.0 * mf * mf * mf))
}

/// `ln P(X = l)` for `X ~ Binomial(trials, p)`, `l <= trials`: `ln C(trials,
/// l)` with `ln(trials!)` taken out of the caller's loop, the same
/// operations in the same order as [`ln_binomial`], so the same bits, up
/// to [`STIRLING_DIFFERENCE_TRIALS`]; above it, from
/// [`ln_falling_factorial`].
fn binomial_ln_pmf(trials: u64, p: f64) -> impl Fn(u64) -> f64 {
    let (lp, lq) = (p.ln(), (-p).ln_1p());
    let ln_trials = ln_factorial(trials);
    let huge = trials > STIRLING_DIFFERENCE_TRIALS;
    move |l: u64| {
        let ln_choose = if huge && trials - l >= LN_FACTORIAL_TABLE as u64 {
            ln_falling_factorial(trials, l) - ln_factorial(l)
        } else {
            ln_trials - ln_factorial(l) - ln_factorial(trials - l)
        };
        ln_choose + l as f64 * lp + (trials - l) as f64 * lq
    }
}

/// The logarithm below which [`binomial_tail`] asks whether the rest of
/// its tail can still reach the `f64` range: `exp` is `+0` below about
/// −745.13, and the margin pays for the rounding that
/// [`rest_of_tail_is_below_f64`] allows for.
const UNDERFLOW_GATE: f64 = -800.0;

/// Whether every term of `Binomial(trials, p)` from `l` on, summed, is
/// below `e^-800`, far below the smallest subnormal `f64` (`2^-1074` ≈
/// `e^-744.4`), given `ln_term`, the computed logarithm of the term at
/// `l` (above the mean).
///
/// Why [`zero_term_bound`] is not enough: it allows for the rounding of
/// the largest quantity any term of the sum can be computed from,
/// `ln(trials!)` and `trials · |ln p|`. Above [`STIRLING_DIFFERENCE_TRIALS`]
/// the terms are computed from the falling factorial instead, whose
/// quantities are of size `l · ln(trials)`, not `trials · ln(trials)`:
/// the global bound was −5.7·10^8 for `model threshold --exact --theta
/// 65535 --n 10^15 --m 10^15` (`trials` = 1.3·10^19), while the terms
/// were `e^-52,000` and fell by 1.6 a term. The sum ran 3.5·10^8 terms,
/// every one `+0`, for three and a half seconds.
///
/// The bound here is on the true terms. Their ratio, `t(j+1)/t(j) =
/// (trials - j) p / ((j + 1) q)` with `q = 1 - p`, falls as `j` grows,
/// so once it is at most a half at `l`, the terms from `l` on sum to at
/// most `2 t(l)`. The computed logarithm of `t(l)` is off by at most a
/// few units in the last place of the quantities it is computed from
/// ([`ln_pmf_magnitude`]); `1e-12` of them is far more. So `ln_term <
/// −800 − 1e-12 · magnitude − ln 2` puts the rest of the true tail below
/// `e^-800`, which adds nothing to an `f64` sum. Where the ratio is above
/// a half (theta just above the mean) the caller goes on, and asks again
/// at the next term below the gate.
fn rest_of_tail_is_below_f64(ln_term: f64, trials: u64, p: f64, l: u64) -> bool {
    let ratio = (trials - l) as f64 * p / ((l as f64 + 1.0) * (1.0 - p));
    ratio <= 0.5
        && ln_term
            < UNDERFLOW_GATE - 1e-12 * ln_pmf_magnitude(trials, p, l) - std::f64::consts::LN_2
}

/// The absolute sum of the quantities `binomial_ln_pmf(trials, p)(l)` is
/// computed from, in the branch it takes for `l`: what its rounding is a
/// few units in the last place of.
fn ln_pmf_magnitude(trials: u64, p: f64, l: u64) -> f64 {
    let (lp, lq) = (p.ln(), (-p).ln_1p());
    let (lf, rest) = (l as f64, (trials - l) as f64);
    let outside = lf * lp.abs() + rest * lq.abs();
    if trials > STIRLING_DIFFERENCE_TRIALS && trials - l >= LN_FACTORIAL_TABLE as u64 {
        // `ln_falling_factorial`: `l ln(trials - l)`, `trials ·
        // |ln(1 - l/trials)|` (about `l`), `l`, and `ln(l!)`.
        let r = (-lf / trials as f64).ln_1p().abs();
        lf * rest.ln().abs() + trials as f64 * r + lf + r + ln_factorial(l) + outside
    } else {
        ln_factorial(trials) + ln_factorial(l) + ln_factorial(trials - l) + outside
    }
}

/// `P(X >= theta)` for `X ~ Binomial(trials, p)`, summed from whichever side
/// avoids cancellation.
pub fn binomial_tail(theta: u64, trials: u64, p: f64) -> f64 {
    if theta == 0 {
        return 1.0;
    }
    if theta > trials || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let ln_pmf = binomial_ln_pmf(trials, p);
    if (theta as f64) > trials as f64 * p {
        let (lp, lq) = (p.ln(), (-p).ln_1p());
        let magnitude = ln_factorial(trials) + trials as f64 * (lp.abs() + lq.abs());
        let zero_below = zero_term_bound(magnitude);
        let mut sum = 0.0;
        for l in theta..=trials {
            let ln = ln_pmf(l);
            if ln < zero_below {
                // This term and every later one are +0 (see
                // `zero_term_bound`): the sum is what it is.
                break;
            }
            if ln < UNDERFLOW_GATE && rest_of_tail_is_below_f64(ln, trials, p, l) {
                break;
            }
            let t = ln.exp();
            sum += t;
            if t < sum * 1e-17 {
                break;
            }
        }
        sum.min(1.0)
    } else {
        let head: f64 = (0..theta).map(|l| ln_pmf(l).exp()).sum();
        (1.0 - head).max(0.0)
    }
}

/// `ln P(X >= theta)` for `X ~ Binomial(trials, p)`: [`binomial_tail`]'s
/// logarithm, also where the tail is below the smallest `f64` (its terms
/// are added as logarithms, scaled by the first). `-infinity` when the tail
/// is 0 (`theta > trials` or `p <= 0`).
///
/// ```
/// use flowsieve::model::special::{binomial_tail, ln_binomial_tail};
/// let t = binomial_tail(20, 200, 1.0 / 64.0);
/// assert!((ln_binomial_tail(20, 200, 1.0 / 64.0) - t.ln()).abs() < 1e-12 * t.ln().abs());
/// // P(Binomial(500, 1/64) >= 300) is e^-917.611 (summed apart with
/// // lgamma): 0 as an f64, not as a log.
/// assert_eq!(binomial_tail(300, 500, 1.0 / 64.0), 0.0);
/// assert!((ln_binomial_tail(300, 500, 1.0 / 64.0) + 917.6114).abs() < 1e-3);
/// // Below the mean, the head is summed down from theta - 1.
/// let t = binomial_tail(100, 1000, 0.2);
/// assert!((ln_binomial_tail(100, 1000, 0.2) - t.ln()).abs() < 1e-15);
/// ```
pub fn ln_binomial_tail(theta: u64, trials: u64, p: f64) -> f64 {
    if theta == 0 || p >= 1.0 {
        return 0.0;
    }
    if theta > trials || p.is_nan() || p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    let ln_pmf = binomial_ln_pmf(trials, p);
    if (theta as f64) <= trials as f64 * p {
        // At or below the mean the tail is at least about a half, and the
        // head below theta is summed downward from theta - 1, where its
        // terms only fall, until they are negligible: a few widths of
        // the distribution rather than all theta terms (65,535 at the
        // largest theta, for every load the blocked model asks about).
        let mut head = 0.0;
        for l in (0..theta).rev() {
            let t = ln_pmf(l).exp();
            head += t;
            if t < head * 1e-17 {
                break;
            }
        }
        return (-head.min(1.0)).ln_1p();
    }
    // Above the mean the terms only fall: scale them by the first.
    let first = ln_pmf(theta);
    let mut scaled = 0.0;
    for l in theta..=trials {
        let t = (ln_pmf(l) - first).exp();
        scaled += t;
        if t < scaled * 1e-17 {
            break;
        }
    }
    first + scaled.ln()
}

/// `ln(e^a + e^b)`, exact where one of them is `-infinity`.
pub fn ln_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        return hi;
    }
    hi + (lo - hi).exp().ln_1p()
}

/// The root of `f` in `[lo, hi]` by bisection, given `f(lo)` and `f(hi)` of
/// opposite signs; `None` otherwise. Converges to the last representable
/// bit, so no tolerance to tune.
pub fn bisect(mut lo: f64, mut hi: f64, f: impl Fn(f64) -> f64) -> Option<f64> {
    let (flo, fhi) = (f(lo), f(hi));
    if flo == 0.0 {
        return Some(lo);
    }
    if fhi == 0.0 {
        return Some(hi);
    }
    if flo.signum() == fhi.signum() || flo.is_nan() || fhi.is_nan() {
        return None;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        let fm = f(mid);
        if fm == 0.0 {
            return Some(mid);
        }
        if fm.signum() == flo.signum() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(0.5 * (lo + hi))
}
