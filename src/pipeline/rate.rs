//! The arithmetic every stage's report uses for measured rates.

/// `num / den`, 0 when nothing was measured.
pub(crate) fn ratio(num: u64, den: u64) -> f64 {
    opt_ratio(num, den).unwrap_or(0.0)
}

/// `num / den`, `None` when nothing was measured.
pub(crate) fn opt_ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

/// The binomial standard error of a rate `p` measured over `n` trials.
pub(crate) fn binomial_se(p: f64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        (p * (1.0 - p) / n as f64).sqrt()
    }
}
