//! Compressed Bloom filters (Mitzenmacher, "Compressed Bloom Filters", paper
//! 002): when a filter is sent over a network, what matters is its size
//! after compression, not its size in memory.
//!
//! A filter of `m/n` bits per element and `k` hashes has a fraction
//! `p = e^{-k/(m/n)}` of zero bits; an optimal compressor sends it in
//! `m H(p)` bits, `H` the binary entropy. For a transmission budget of
//! `z/n` bits per element, the best filter minimises `(1 - p)^k` subject to
//! `(m/n) H(p) <= z/n`; with no limit on the uncompressed size the optimum
//! is a large, sparse filter with few hashes (002 §2-3).
//!
//! ```
//! use flowsieve::model::compressed;
//! // 002 Table 1: m/n = 14, k = 2 sends 7.923 bits per element, fpr 0.0177.
//! assert!((compressed::transmitted_bits_per_element(14.0, 2) - 7.923).abs() < 0.001);
//! assert!((flowsieve::model::bloom::fpr_approx(14.0, 2) - 0.0177).abs() < 5e-5);
//! ```

use super::bloom::{fpr_approx, ln_fpr_approx};

/// Binary entropy `H(p) = -p log2 p - (1-p) log2 (1-p)`, in bits.
pub fn entropy(p: f64) -> f64 {
    if p <= 0.0 || p >= 1.0 {
        return 0.0;
    }
    -(p * p.log2() + (1.0 - p) * (1.0 - p).log2())
}

/// The fraction of zero bits, `e^{-k/(m/n)}` (002 §2).
pub fn zero_fraction(m_over_n: f64, k: u32) -> f64 {
    (-f64::from(k) / m_over_n).exp()
}

/// Bits per element after optimal compression, `(m/n) H(p)` (002 §2).
///
/// With `y = k/(m/n)`, `p = e^{-y}` and `1 - p = -expm1(-y)`, so `H(p) =
/// (p y - (1 - p) ln(1 - p)) / ln 2` is formed without `1 - p` or `ln p`
/// rounding away: for a sparse filter (`m/n` in the thousands and up)
/// [`entropy`] of the rounded `p` lost every digit, and a budget of 1e300
/// bits per element was "sent" in 0 bits.
///
/// ```
/// use flowsieve::model::compressed::{entropy, transmitted_bits_per_element, zero_fraction};
/// let direct = 14.0 * entropy(zero_fraction(14.0, 2));
/// assert!((transmitted_bits_per_element(14.0, 2) - direct).abs() < 1e-12);
/// // 10^12 bits per element, k = 2: about 2 (log2(5e11) + log2 e) bits.
/// let sparse = transmitted_bits_per_element(1e12, 2);
/// assert!((sparse - 2.0 * ((5e11f64).log2() + std::f64::consts::LOG2_E)).abs() < 1e-6);
/// ```
pub fn transmitted_bits_per_element(m_over_n: f64, k: u32) -> f64 {
    let y = f64::from(k) / m_over_n;
    if y.is_nan() || y <= 0.0 || y == f64::INFINITY {
        return 0.0;
    }
    let zeros = (-y).exp();
    let ones = -(-y).exp_m1();
    m_over_n * (zeros * y - ones * ones.ln()) / std::f64::consts::LN_2
}

/// A filter shape and what it costs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompressedChoice {
    /// Bits per element.
    pub m_over_n: f64,
    /// Hash functions.
    pub k: u32,
    /// False-positive rate.
    pub fpr: f64,
    /// Its natural logarithm ([`super::bloom::ln_fpr_approx`]), also where
    /// the rate underflows to 0.
    pub ln_fpr: f64,
    /// Bits per element sent after compression.
    pub transmitted_bits_per_element: f64,
}

/// The `(m/n, k)` with the lowest false-positive rate whose compressed size
/// fits `z_over_n` bits per element, with `m/n` at most `max_m_over_n` and
/// `k` at most `max_k` (002 §3). For each `k`, the transmitted size grows
/// with `m/n`, so the largest `m/n` within budget is found by bisection;
/// then the best `k` wins, compared by the rates' logarithms (at budgets
/// in the thousands of bits every rate is +0). `None` if nothing fits.
pub fn optimize(z_over_n: f64, max_m_over_n: f64, max_k: u32) -> Option<CompressedChoice> {
    let mut best: Option<CompressedChoice> = None;
    for k in 1..=max_k.max(1) {
        // Smallest sensible m/n: every bit set half the time or so.
        let lo = f64::from(k) / 16.0;
        if transmitted_bits_per_element(lo, k) > z_over_n {
            continue;
        }
        let mut hi = max_m_over_n;
        let fits = |x: f64| transmitted_bits_per_element(x, k) <= z_over_n;
        let m = if fits(hi) {
            hi
        } else {
            let mut good = lo;
            for _ in 0..200 {
                let mid = 0.5 * (good + hi);
                if fits(mid) {
                    good = mid;
                } else {
                    hi = mid;
                }
            }
            good
        };
        let c = CompressedChoice {
            m_over_n: m,
            k,
            fpr: fpr_approx(m, k),
            ln_fpr: ln_fpr_approx(m, k),
            transmitted_bits_per_element: transmitted_bits_per_element(m, k),
        };
        if best.is_none_or(|b| c.ln_fpr < b.ln_fpr) {
            best = Some(c);
        }
    }
    best
}

/// The uncompressed baseline at the same budget: `m/n = z/n` bits per
/// element with the optimal `k` (001).
pub fn standard(z_over_n: f64) -> CompressedChoice {
    let k = super::bloom::optimal_k(z_over_n);
    CompressedChoice {
        m_over_n: z_over_n,
        k,
        fpr: fpr_approx(z_over_n, k),
        ln_fpr: ln_fpr_approx(z_over_n, k),
        transmitted_bits_per_element: z_over_n,
    }
}
