//! False positives of a counting Bloom filter used for count thresholding:
//! "is this element's count at least `theta`?", answered yes when all `k`
//! counters are `>= theta` (Kim, Jeong, Lee, Lee, "Analysis of Counting Bloom
//! Filters Used for Count Thresholding", Electronics 2019; paper 003).
//!
//! With `kn` increments spread over the counters, a non-member's counter is
//! `>= theta` with probability `T`, and the false-positive rate is `T^k`:
//!
//! ```text
//! eq. (2)  binomial:  T = 1 - sum_{l<theta} b(l; kn, 1/m)
//! eq. (3)  Poisson:   T = 1 - e^{-kappa} sum_{l<theta} kappa^l / l!,   kappa = kn/m
//! eq. (4)  gamma:     T = 1 - Gamma(theta, kappa) / Gamma(theta, 0)
//! ```
//!
//! The optimum is unique (003 Theorem 1): `k_opt` is the floor or ceiling
//! of `kappa*(theta) m/n`, where `kappa*` is the root of (003, the equation
//! after (6))
//!
//! ```text
//! g(theta, kappa) = (1 - Q) ln(1 - Q) + kappa^theta e^{-kappa} / Gamma(theta),
//! Q = Gamma(theta, kappa) / Gamma(theta)
//! ```
//!
//! and for large `theta` `kappa* ~ 0.2037 theta + 0.9176` (003 §3.3).
//!
//! ```
//! use flowsieve::model::threshold;
//! assert!((threshold::kappa_star(5) - 1.6117).abs() < 5e-5); // 003 Table 1
//! assert_eq!(threshold::k_opt(1, 4.0), 3);                   // (m/n) ln 2 = 2.77
//! ```

use super::special::{binomial_tail, bisect, ln_factorial, poisson_tail};

/// eq. (3)/(4): `P(Poisson(kappa) >= theta)^k` with `kappa = k / (m/n)`.
pub fn fpr_poisson(theta: u64, k: u32, m_over_n: f64) -> f64 {
    if k == 0 || m_over_n.is_nan() || m_over_n <= 0.0 {
        return 1.0;
    }
    poisson_tail(theta, f64::from(k) / m_over_n).powi(k as i32)
}

/// eq. (2): `(1 - sum_{l<theta} b(l; kn, 1/m))^k`, `m` counters in one
/// array (the paper's layout).
pub fn fpr_binomial(theta: u64, k: u32, n: u64, m: u64) -> f64 {
    if k == 0 || m == 0 {
        return 1.0;
    }
    binomial_tail(theta, u64::from(k) * n, 1.0 / m as f64).powi(k as i32)
}

/// eq. (2) for flowsieve's partitioned layout: each of the `k` subarrays of
/// `m/k` counters receives exactly one increment per element, so a counter
/// is `Binomial(n, k/m)`. The Poisson limit (eq. 3) is the same.
pub fn fpr_binomial_partitioned(theta: u64, k: u32, n: u64, m: u64) -> f64 {
    if k == 0 || m < u64::from(k) {
        return 1.0;
    }
    let per = m / u64::from(k);
    binomial_tail(theta, n, 1.0 / per as f64).powi(k as i32)
}

/// `g(theta, kappa)` (003, the equation after (6)); its sign is the sign of
/// the derivative of `ln p_fp` in `k`.
pub fn g(theta: u64, kappa: f64) -> f64 {
    let t = poisson_tail(theta, kappa);
    if t <= 0.0 {
        return 0.0;
    }
    let density = (theta as f64 * kappa.ln() - kappa - ln_factorial(theta - 1)).exp();
    t * t.ln() + density
}

/// `kappa*(theta)`, the unique root of [`g`] (003 Theorem 1 and Table 1).
///
/// `g < 0` on `(0, kappa*)` and `g > 0` on `(kappa*, infinity)` (Lemmas
/// 3-5), so bisection on `(0, theta + 1]` finds it to machine precision.
pub fn kappa_star(theta: u64) -> f64 {
    let theta = theta.max(1);
    bisect(1e-9, theta as f64 + 1.0, |kappa| g(theta, kappa)).unwrap_or(f64::NAN)
}

/// The linear approximation `0.2037 theta + 0.9176` (003 §3.3).
pub fn kappa_star_linear(theta: u64) -> f64 {
    0.2037 * theta as f64 + 0.9176
}

/// `k_opt(theta)` for `m/n` counters per element: the floor or the ceiling
/// of `kappa* m/n` (003 Theorem 1), whichever has the lower [`fpr_poisson`];
/// at least 1.
pub fn k_opt(theta: u64, m_over_n: f64) -> u32 {
    let r = kappa_star(theta) * m_over_n;
    let lo = (r.floor().max(1.0)) as u32;
    let hi = (r.ceil().max(1.0)) as u32;
    if fpr_poisson(theta, hi, m_over_n) < fpr_poisson(theta, lo, m_over_n) {
        hi
    } else {
        lo
    }
}
