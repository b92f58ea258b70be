//! Bloom filter false-positive rates (Summary Cache, Fan et al., 001, the
//! Bloom filter section, and its Tables 3-5).
//!
//! After `n` insertions with `k` hashes into `m` bits, a bit is still 0 with
//! probability `(1 - 1/m)^{kn}`, so a query for a non-member finds all `k`
//! bits set with probability
//!
//! ```text
//! exact:        (1 - (1 - 1/m)^{kn})^k
//! approximate:  (1 - e^{-kn/m})^k          minimised at k = (m/n) ln 2
//! ```
//!
//! flowsieve's filters are partitioned (each hash owns `m/k` cells), where a
//! bit of a partition stays 0 with probability `(1 - k/m)^n`;
//! [`fpr_partitioned`] gives that form. All three agree as `m` grows.
//!
//! ```
//! use flowsieve::model::bloom;
//! // Summary Cache: m/n = 10, k = 4 -> 1.2 %; the optimum k = 5 (6.93) -> 0.9 %.
//! assert!((bloom::fpr_approx(10.0, 4) - 0.0118).abs() < 5e-5);
//! assert!((bloom::fpr_approx(10.0, 5) - 0.00943).abs() < 5e-6);
//! ```

/// `(1 - e^{-k/(m/n)})^k`, the approximate rate for `m/n` bits per element
/// (001; the formula behind Tables 3-5).
pub fn fpr_approx(m_over_n: f64, k: u32) -> f64 {
    if m_over_n.is_nan() || m_over_n <= 0.0 || k == 0 {
        return 1.0;
    }
    if m_over_n == f64::INFINITY {
        return 0.0;
    }
    let k = f64::from(k);
    (-(-k / m_over_n).exp_m1()).powf(k)
}

/// `(1 - (1 - 1/m)^{kn})^k` (001, before the `e` approximation).
pub fn fpr_exact(m: u64, n: u64, k: u32) -> f64 {
    if m == 0 || k == 0 {
        return 1.0;
    }
    if n == 0 {
        // Nothing inserted; also keeps `0 * ln(0)` (m = 1) out of the sum.
        return 0.0;
    }
    let zero = (f64::from(k) * n as f64 * (-1.0 / m as f64).ln_1p()).exp();
    (1.0 - zero).powi(k as i32)
}

/// The logarithm of [`fpr_approx`], also where the rate is below the
/// smallest `f64` (`m/n = 10^6`, `k = 100`: about `e^-921`).
///
/// ```
/// use flowsieve::model::bloom::{fpr_approx, ln_fpr_approx};
/// assert!((ln_fpr_approx(10.0, 4) - fpr_approx(10.0, 4).ln()).abs() < 1e-14);
/// assert_eq!(fpr_approx(1e6, 100), 0.0);
/// assert!((ln_fpr_approx(1e6, 100) - 100.0 * (1e-4f64).ln()).abs() < 0.01);
/// ```
pub fn ln_fpr_approx(m_over_n: f64, k: u32) -> f64 {
    if m_over_n.is_nan() || m_over_n <= 0.0 || k == 0 {
        return 0.0;
    }
    if m_over_n == f64::INFINITY {
        return f64::NEG_INFINITY;
    }
    let k = f64::from(k);
    k * (-(-k / m_over_n).exp_m1()).ln()
}

/// The logarithm of [`fpr_exact`], also where the rate is below the
/// smallest `f64`; `-infinity` with nothing inserted.
pub fn ln_fpr_exact(m: u64, n: u64, k: u32) -> f64 {
    if m == 0 || k == 0 {
        return 0.0;
    }
    if n == 0 {
        return f64::NEG_INFINITY;
    }
    let ln_zero = f64::from(k) * n as f64 * (-1.0 / m as f64).ln_1p();
    f64::from(k) * (-ln_zero.exp_m1()).ln()
}

/// `(1 - (1 - k/m)^n)^k`: the exact rate of a partitioned filter, `k`
/// subarrays of `m/k` bits, each hash setting one bit of its own subarray.
pub fn fpr_partitioned(m: u64, n: u64, k: u32) -> f64 {
    if m == 0 || k == 0 || u64::from(k) > m {
        return 1.0;
    }
    let per = (m / u64::from(k)) as f64;
    let zero = (n as f64 * (-1.0 / per).ln_1p()).exp();
    (1.0 - zero).powi(k as i32)
}

/// The real-valued optimum `(m/n) ln 2` (001).
pub fn optimal_k_real(m_over_n: f64) -> f64 {
    m_over_n * std::f64::consts::LN_2
}

/// The integer `k >= 1` with the lowest [`fpr_approx`]: the floor or the
/// ceiling of [`optimal_k_real`], compared by [`ln_fpr_approx`] (past
/// about 1,500 bits per element both rates are +0 as `f64`s).
pub fn optimal_k(m_over_n: f64) -> u32 {
    let r = optimal_k_real(m_over_n);
    let lo = (r.floor() as u32).max(1);
    let hi = (r.ceil() as u32).max(1);
    if ln_fpr_approx(m_over_n, hi) < ln_fpr_approx(m_over_n, lo) {
        hi
    } else {
        lo
    }
}
