//! The models as questions and answers: one query type per model, with
//! the parameters a user gives, a `validate`-and-answer method whose errors
//! name the parameters, and a typed answer that serialises to JSON and
//! displays as text. The command line's `flowsieve model ...` is these
//! types and nothing more: each query derives `clap::Args`, so its fields
//! are the subcommand's flags (this module is the library's one place
//! that knows them), while its errors name the fields.
//!
//! **Naming rule for rates.** `fpr` is always the rate in the form asked
//! for: the exact form when `exact` is set, the approximate (Poisson) form
//! otherwise. `fpr_approx` is always the approximate form; `fpr_exact` is
//! the exact form whenever it was computed. (Before this rule, `model
//! threshold --exact` printed the Poisson form as `fpr`; `fpr_exact` keeps
//! its meaning, so scripts that read it are unaffected.)
//!
//! ```
//! use flowsieve::model::query::ThresholdQuery;
//! let q = ThresholdQuery { theta: 3, k: Some(4), exact: true, n: Some(1000), m: Some(8000), ..Default::default() };
//! let a = q.answer().unwrap();
//! assert_eq!(a.fpr, a.fpr_exact.unwrap());
//! assert!((a.fpr - a.fpr_approx).abs() < 0.1 * a.fpr_approx);
//! ```

use super::sigma_arg::SigmaArg;
use super::{blocked, blocked_recycling, bloom, compressed, paradox, recycling, threshold};
use serde::Serialize;
use std::fmt;

/// Why a model query cannot be answered.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A parameter is out of its domain.
    #[error("{param}: {problem}")]
    Invalid {
        /// The parameter's name (`m_over_n`, `k`, ...).
        param: &'static str,
        /// What is wrong, with the value.
        problem: String,
    },
    /// A required parameter (or one of a set of alternatives) is missing.
    #[error("give {0}")]
    Missing(&'static str),
}

fn invalid(param: &'static str, problem: impl Into<String>) -> ModelError {
    ModelError::Invalid {
        param,
        problem: problem.into(),
    }
}

/// A number given on the command line, shown back in a message: as Rust
/// writes it plainly (`0.5`, `10`, `0.3333333333333333`), or in exponent
/// form (`1e-300`, `1e300`) past the magnitudes where the plain form runs
/// to hundreds of digits, so that an answer or an error stays one short
/// line.
///
/// ```
/// use flowsieve::model::query::shown;
/// assert_eq!(shown(0.5), "0.5");
/// assert_eq!(shown(10.0), "10");
/// assert_eq!(shown(1e-300), "1e-300");
/// assert_eq!(shown(-1e300), "-1e300");
/// assert_eq!(shown(f64::NAN), "NaN");
/// ```
pub fn shown(x: f64) -> String {
    if short_range(x) {
        x.to_string()
    } else {
        format!("{x:e}")
    }
}

/// Whether [`shown`] prints `x` positionally: zero, NaN, an infinity, or a
/// magnitude in `[1e-6, 1e15)`.
fn short_range(x: f64) -> bool {
    !(x.is_finite() && x != 0.0 && !(1e-6..1e15).contains(&x.abs()))
}

/// `x` to six decimals where [`shown`] would print it positionally, and in
/// exponent form (6 significant decimals) where it would not: an expected
/// cost of 1e300 is not 300 digits, and one of 1e-9 is not `0.000000`.
///
/// ```
/// use flowsieve::model::query::fixed6;
/// assert_eq!(fixed6(1.5), "1.500000");
/// assert_eq!(fixed6(1e300), "1.000000e300");
/// assert_eq!(fixed6(1e-9), "1.000000e-9");
/// ```
pub fn fixed6(x: f64) -> String {
    if short_range(x) {
        format!("{x:.6}")
    } else {
        format!("{x:.6e}")
    }
}

/// A rate to 7 significant digits in exponent form, as `{:.6e}` prints it,
/// taken from its natural logarithm `ln` where the rate itself is below
/// the smallest normal `f64` (`e^-17,000` is not `0.000000e0`), or any
/// other value where it is past the largest (`inf`).
///
/// ```
/// use flowsieve::model::query::rate_with_ln;
/// assert_eq!(rate_with_ln(2.5e-7, 2.5e-7_f64.ln()), "2.500000e-7");
/// assert_eq!(rate_with_ln(0.0, -1000.0 * std::f64::consts::LN_10), "1.000000e-1000");
/// assert_eq!(rate_with_ln(0.0, f64::NEG_INFINITY), "0.000000e0");
/// assert_eq!(rate_with_ln(f64::INFINITY, 400.0 * std::f64::consts::LN_10), "1.000000e400");
/// // 9.99999998e-400 rounds to the next power of ten, as `{:.6e}` would.
/// let ln = (-399.0 - 1e-9) * std::f64::consts::LN_10;
/// assert_eq!(rate_with_ln(0.0, ln), "1.000000e-399");
/// assert_eq!(format!("{:.6e}", 9.99999998e-300), "1.000000e-299");
/// ```
pub fn rate_with_ln(rate: f64, ln: f64) -> String {
    if (rate >= f64::MIN_POSITIVE && rate.is_finite()) || !ln.is_finite() {
        return format!("{rate:.6e}");
    }
    let log10 = ln / std::f64::consts::LN_10;
    let mut exponent = log10.floor();
    let mut mantissa = 10f64.powf(log10 - exponent);
    // Rounding to 6 decimals can carry the mantissa to 10.
    if format!("{mantissa:.6}").starts_with("10") {
        mantissa /= 10.0;
        exponent += 1.0;
    }
    format!("{mantissa:.6}e{exponent}")
}

/// `x` to three decimals where [`shown`] would print it positionally, in
/// exponent form (4 significant decimals) where it would not.
fn fixed3(x: f64) -> String {
    if short_range(x) {
        format!("{x:.3}")
    } else {
        format!("{x:.4e}")
    }
}

fn probability(param: &'static str, p: f64) -> Result<f64, ModelError> {
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(invalid(
            param,
            format!("must be a probability in [0, 1], got {}", shown(p)),
        ))
    }
}

fn positive(param: &'static str, x: f64) -> Result<f64, ModelError> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(invalid(
            param,
            format!("must be a positive number, got {}", shown(x)),
        ))
    }
}

/// The most bits (or counters) per element a model is asked about. Past a
/// million per element every rate here underflows to 0 and `k_opt` (about
/// `0.69 m/n`) stops being a hash count anyone can run, so larger ratios
/// are refused rather than answered with an infinite `k`.
pub const MAX_M_OVER_N: f64 = 1e6;

/// [`positive`], and at most [`MAX_M_OVER_N`].
fn per_element(param: &'static str, x: f64) -> Result<f64, ModelError> {
    let x = positive(param, x)?;
    if x > MAX_M_OVER_N {
        return Err(invalid(
            param,
            format!("must be at most {MAX_M_OVER_N:e}, got {}", shown(x)),
        ));
    }
    Ok(x)
}

fn at_least_k(m: u64, k: u32) -> Result<(), ModelError> {
    if m < u64::from(k) {
        return Err(invalid("m", format!("must be at least k ({k}), got {m}")));
    }
    Ok(())
}

/// The largest hash count a model query accepts.
pub const MAX_MODEL_K: u32 = 1 << 16;
/// The largest count threshold a model query accepts.
pub const MAX_MODEL_THETA: u64 = 1 << 20;

fn k_in_range(k: u32) -> Result<u32, ModelError> {
    if k == 0 || k > MAX_MODEL_K {
        return Err(invalid(
            "k",
            format!("must be between 1 and {MAX_MODEL_K}, got {k}"),
        ));
    }
    Ok(k)
}

/// Bloom filter false-positive rate (001, Summary Cache).
#[derive(Clone, Debug, Default, PartialEq, clap::Args)]
pub struct BloomQuery {
    /// Bits per element (alternative to `m` and `n`).
    #[arg(long, conflicts_with_all = ["m", "n"])]
    pub m_over_n: Option<f64>,
    /// Bits in the filter.
    #[arg(long, requires = "n")]
    pub m: Option<u64>,
    /// Elements inserted.
    #[arg(long, requires = "m")]
    pub n: Option<u64>,
    /// Hash functions.
    #[arg(long)]
    pub k: u32,
    /// `(1 - (1 - 1/m)^{kn})^k` instead of `(1 - e^{-kn/m})^k` (needs `m`,
    /// `n`); `fpr` is then the exact form.
    #[arg(long, requires = "m")]
    pub exact: bool,
    /// Also give the cache-line-blocked layout's rate (512-bit blocks;
    /// `model::blocked`'s (B1) at theta = 1), the selective stage's
    /// `--dir-layout blocked`.
    #[arg(long)]
    pub blocked: bool,
}

/// The answer to a [`BloomQuery`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BloomAnswer {
    /// The rate in the form asked for.
    pub fpr: f64,
    /// The approximate form.
    pub fpr_approx: f64,
    /// The exact form, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fpr_exact: Option<f64>,
    /// The natural logarithm of `fpr`, also where `fpr` underflows to 0.
    pub ln_fpr: f64,
    #[serde(skip)]
    ln_fpr_approx: f64,
    /// The blocked layout's rate at the same bits per element, with
    /// `blocked`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fpr_blocked: Option<f64>,
    #[serde(skip)]
    shape: String,
}

impl BloomQuery {
    /// Checks the parameters and evaluates the model.
    pub fn answer(&self) -> Result<BloomAnswer, ModelError> {
        let k = k_in_range(self.k)?;
        let (x, shape, exact) = match (self.m_over_n, self.m, self.n) {
            (Some(x), _, _) => {
                if self.exact {
                    return Err(invalid("exact", "needs m and n, not m_over_n"));
                }
                let x = per_element("m_over_n", x)?;
                (x, format!("m/n = {}, k = {k}", shown(x)), None)
            }
            (None, Some(m), Some(n)) => {
                at_least_k(m, k)?;
                // n = 0: nothing inserted, so no false positive; the ratio
                // is infinite and eq. (approx) gives exactly 0.
                let x = if n == 0 {
                    f64::INFINITY
                } else {
                    m as f64 / n as f64
                };
                let exact = self
                    .exact
                    .then(|| (bloom::fpr_exact(m, n, k), bloom::ln_fpr_exact(m, n, k)));
                (x, format!("m = {m}, n = {n}, k = {k}"), exact)
            }
            _ => return Err(ModelError::Missing("m_over_n, or m and n")),
        };
        let approx = bloom::fpr_approx(x, k);
        let ln_approx = bloom::ln_fpr_approx(x, k);
        Ok(BloomAnswer {
            fpr: exact.map_or(approx, |e| e.0),
            fpr_approx: approx,
            fpr_exact: exact.map(|e| e.0),
            ln_fpr: exact.map_or(ln_approx, |e| e.1),
            ln_fpr_approx: ln_approx,
            fpr_blocked: self.blocked.then(|| blocked::fpr_bloom_blocked(x, k)),
            shape,
        })
    }
}

impl fmt::Display for BloomAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Bloom filter, {}: false-positive rate {}{}",
            self.shape,
            rate_with_ln(self.fpr, self.ln_fpr),
            if self.fpr_exact.is_some() {
                format!(
                    " (exact; approximate {})",
                    rate_with_ln(self.fpr_approx, self.ln_fpr_approx)
                )
            } else {
                String::new()
            },
        )?;
        if let Some(b) = self.fpr_blocked {
            write!(
                f,
                "\n  blocked layout (512-bit blocks, (B1) at theta = 1): {b:.6e}"
            )?;
        }
        Ok(())
    }
}

/// Counting-filter count thresholding (003).
#[derive(Clone, Debug, Default, PartialEq, clap::Args)]
pub struct ThresholdQuery {
    /// Count threshold (all k counters at least theta).
    #[arg(long)]
    pub theta: u64,
    /// Counters per element (else `m / n`).
    #[arg(long)]
    pub m_over_n: Option<f64>,
    /// Hash functions (default: `k_opt`).
    #[arg(long)]
    pub k: Option<u32>,
    /// The exact binomial rate, eq. (2), for `n` elements in `m` counters
    /// (then `fpr` is that rate; `fpr_approx` stays the Poisson form).
    #[arg(long, requires_all = ["n", "m"])]
    pub exact: bool,
    /// Elements inserted.
    #[arg(long)]
    pub n: Option<u64>,
    /// Counters.
    #[arg(long)]
    pub m: Option<u64>,
    /// Also give the cache-line-blocked layout's rates (`model::blocked`,
    /// B1 and B2) for `n` elements in `m` counters of `--counter-bits`.
    #[arg(long, requires_all = ["n", "m"])]
    pub blocked: bool,
    /// Bits per counter for `--blocked` (4, 8 or 16: 128, 64 or 32
    /// counters per 64-byte block; default 8). Only with `--blocked`: the
    /// other rates do not depend on it.
    #[arg(long, requires = "blocked")]
    pub counter_bits: Option<u32>,
}

/// The cache-line-blocked layout's figures (`model::blocked`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BlockedAnswer {
    /// 64-byte blocks in `m` counters.
    pub blocks: u64,
    /// Counters per block.
    pub counters_per_block: u64,
    /// The `k` that minimises (B1).
    pub k_opt: u32,
    /// The hash count the rates are for (`--k`, else `k_opt`).
    pub k: u32,
    /// (B1): a key never inserted, after `n` insertions.
    pub fpr: f64,
    /// The natural logarithm of (B1), also where `fpr` underflows to 0.
    pub ln_fpr: f64,
    /// (B2): a one-packet key at its own insertion, averaged over the
    /// window (the heavy stage's model column).
    pub fpr_online: f64,
    /// The natural logarithm of (B2), where `fpr_online` underflows to 0
    /// (else absent: it costs a search per load of the window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ln_fpr_online: Option<f64>,
}

/// The answer to a [`ThresholdQuery`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThresholdAnswer {
    /// `kappa*(theta)`, Theorem 1.
    pub kappa_star: f64,
    /// Its linear fit.
    pub kappa_star_linear: f64,
    /// The optimal hash count.
    pub k_opt: u32,
    /// The hash count the rates are for.
    pub k: u32,
    /// The rate in the form asked for (eq. (2) with `exact`, else eq. (3)).
    pub fpr: f64,
    /// The Poisson form, eq. (3).
    pub fpr_approx: f64,
    /// The binomial form, eq. (2), with `exact`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fpr_exact: Option<f64>,
    /// The natural logarithm of `fpr`, also where `fpr` underflows to 0
    /// (`-infinity`, shown as `null`, where the rate is 0: `theta > kn`).
    pub ln_fpr: f64,
    #[serde(skip)]
    ln_fpr_approx: f64,
    /// The blocked layout's rates, with `blocked`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<BlockedAnswer>,
    #[serde(skip)]
    theta: u64,
    #[serde(skip)]
    m_over_n: f64,
    #[serde(skip)]
    nm: Option<(u64, u64)>,
}

impl ThresholdQuery {
    /// Checks the parameters and evaluates the model.
    pub fn answer(&self) -> Result<ThresholdAnswer, ModelError> {
        if self.theta == 0 || self.theta > MAX_MODEL_THETA {
            return Err(invalid(
                "theta",
                format!(
                    "must be between 1 and {MAX_MODEL_THETA}, got {}",
                    self.theta
                ),
            ));
        }
        let x = match (self.m_over_n, self.m, self.n) {
            // Given both ways (as `--m-over-n X --exact --n N --m M`), the
            // Poisson rate would be for X and the exact one for M / N.
            (Some(x), Some(m), Some(n)) => {
                let ratio = m as f64 / n.max(1) as f64;
                if (x - ratio).abs() > 1e-9 * x.abs().max(ratio) {
                    return Err(invalid(
                        "m_over_n",
                        format!(
                            "{} disagrees with m / n = {m} / {n} = {}: give the same ratio, or leave --m-over-n out",
                            shown(x),
                            shown(ratio)
                        ),
                    ));
                }
                x
            }
            (Some(x), _, _) => x,
            (None, Some(m), Some(n)) => m as f64 / n.max(1) as f64,
            _ => return Err(ModelError::Missing("m_over_n (or exact with n and m)")),
        };
        let x = per_element("m_over_n", x)?;
        if self.counter_bits.is_some() && !self.blocked {
            return Err(invalid("counter_bits", "only with blocked"));
        }
        let counter_bits = self.counter_bits.unwrap_or(8);
        if let Some(k) = self.k {
            k_in_range(k)?;
        }
        if let (Some(m), Some(k)) = (self.m, self.k) {
            at_least_k(m, k)?;
        }
        let nm = if self.exact {
            match (self.n, self.m) {
                (Some(n), Some(m)) => Some((n, m)),
                _ => return Err(ModelError::Missing("n and m with exact")),
            }
        } else {
            None
        };
        let blocked = if self.blocked {
            let per_block = match counter_bits {
                4 => 128u64,
                8 => 64,
                16 => 32,
                b => {
                    return Err(invalid(
                        "counter_bits",
                        format!("must be 4, 8 or 16, got {b}"),
                    ));
                }
            };
            let (Some(n), Some(m)) = (self.n, self.m) else {
                return Err(ModelError::Missing("n and m with blocked"));
            };
            // A counter saturates at its largest value, so no key could
            // reach a larger theta: the heavy stage refuses the same pair.
            let most = (1u64 << counter_bits) - 1;
            if self.theta > most {
                return Err(invalid(
                    "theta",
                    format!(
                        "{} is more than a {counter_bits}-bit counter holds ({most}): give --counter-bits 8 or 16",
                        self.theta
                    ),
                ));
            }
            if m < per_block {
                return Err(invalid(
                    "m",
                    format!("must hold at least one block of {per_block} counters, got {m}"),
                ));
            }
            if let Some(k) = self.k
                && u64::from(k) > per_block.min(32)
            {
                return Err(invalid(
                    "k",
                    format!(
                        "must be at most {} in the blocked layout, got {k}",
                        per_block.min(32)
                    ),
                ));
            }
            let blocks = m / per_block;
            let k_opt = blocked::k_opt_blocked(self.theta, n, blocks, per_block, 32);
            let k = self.k.unwrap_or(k_opt);
            let fpr_online = blocked::fpr_blocked_online(self.theta, k, n, blocks, per_block);
            Some(BlockedAnswer {
                blocks,
                counters_per_block: per_block,
                k_opt,
                k,
                fpr: blocked::fpr_blocked(self.theta, k, n, blocks, per_block),
                ln_fpr: blocked::ln_fpr_blocked(self.theta, k, n, blocks, per_block),
                fpr_online,
                ln_fpr_online: (0.0..f64::MIN_POSITIVE)
                    .contains(&fpr_online)
                    .then(|| blocked::ln_fpr_blocked_online(self.theta, k, n, blocks, per_block)),
            })
        } else {
            None
        };
        let k_opt = threshold::k_opt(self.theta, x);
        let k = self.k.unwrap_or(k_opt);
        if let Some((n, _)) = nm
            && u64::from(k).checked_mul(n).is_none()
        {
            // eq. (2) has k n increments: past 2^64 they wrapped around.
            return Err(invalid(
                "n",
                format!(
                    "k n = {k} x {n} increments is more than 2^64 for the exact form: give a smaller --n (or --k)"
                ),
            ));
        }
        let approx = threshold::fpr_poisson(self.theta, k, x);
        let exact = nm.map(|(n, m)| threshold::fpr_binomial(self.theta, k, n, m));
        let ln_approx = threshold::ln_fpr_poisson(self.theta, k, x);
        let ln_exact = nm.map(|(n, m)| threshold::ln_fpr_binomial(self.theta, k, n, m));
        Ok(ThresholdAnswer {
            kappa_star: threshold::kappa_star(self.theta),
            kappa_star_linear: threshold::kappa_star_linear(self.theta),
            k_opt,
            k,
            fpr: exact.unwrap_or(approx),
            fpr_approx: approx,
            fpr_exact: exact,
            ln_fpr: ln_exact.unwrap_or(ln_approx),
            ln_fpr_approx: ln_approx,
            blocked,
            theta: self.theta,
            m_over_n: x,
            nm,
        })
    }
}

impl fmt::Display for ThresholdAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "count threshold theta = {}, m/n = {}:\n  kappa* = {:.4} (linear fit {:.4})\n  k_opt = {}\n  false-positive rate at k = {}: {} (Poisson, eq. 3)",
            self.theta,
            shown(self.m_over_n),
            self.kappa_star,
            self.kappa_star_linear,
            self.k_opt,
            self.k,
            rate_with_ln(self.fpr_approx, self.ln_fpr_approx)
        )?;
        if let (Some(e), Some((n, m))) = (self.fpr_exact, self.nm) {
            write!(
                f,
                "\n  exact (binomial, eq. 2, n = {n}, m = {m}): {}",
                rate_with_ln(e, self.ln_fpr)
            )?;
        }
        if let Some(b) = &self.blocked {
            write!(
                f,
                "\n  blocked layout ({} blocks of {} counters): k_opt = {}; at k = {}: {} (B1), online {} (B2)",
                b.blocks,
                b.counters_per_block,
                b.k_opt,
                b.k,
                rate_with_ln(b.fpr, b.ln_fpr),
                match b.ln_fpr_online {
                    Some(ln) => rate_with_ln(b.fpr_online, ln),
                    None => format!("{:.6e}", b.fpr_online),
                }
            )?;
        }
        Ok(())
    }
}

/// The Bloom paradox (000 Theorem 1): the prior threshold for a filter, or
/// the bits per element a prior needs.
#[derive(Clone, Debug, Default, PartialEq, clap::Args)]
pub struct ParadoxQuery {
    /// Cost of a false negative relative to a false positive.
    #[arg(long)]
    pub alpha: f64,
    /// Bits per element of the filter (gives `prior_threshold`).
    #[arg(long, conflicts_with = "prior", required_unless_present = "prior")]
    pub m_over_n: Option<f64>,
    /// A priori membership probability (gives `min_bits_per_element`).
    #[arg(long)]
    pub prior: Option<f64>,
}

/// The answer to a [`ParadoxQuery`].
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ParadoxAnswer {
    /// For a filter of given bits per element.
    Threshold {
        /// Priors below this make a positive answer more likely false.
        prior_threshold: f64,
        /// Its natural logarithm, also where it underflows to 0.
        ln_prior_threshold: f64,
        #[serde(skip)]
        /// The cost ratio asked for.
        alpha: f64,
        #[serde(skip)]
        /// Bits per element.
        m_over_n: f64,
    },
    /// For a given prior.
    Bits {
        /// The least bits per element that escape the paradox.
        min_bits_per_element: f64,
        #[serde(skip)]
        /// The cost ratio asked for.
        alpha: f64,
        #[serde(skip)]
        /// The prior asked for.
        prior: f64,
    },
}

impl ParadoxQuery {
    /// Checks the parameters and evaluates the model.
    pub fn answer(&self) -> Result<ParadoxAnswer, ModelError> {
        let alpha = positive("alpha", self.alpha)?;
        match (self.m_over_n, self.prior) {
            (Some(x), _) => {
                let x = per_element("m_over_n", x)?;
                Ok(ParadoxAnswer::Threshold {
                    prior_threshold: paradox::prior_threshold(alpha, x),
                    ln_prior_threshold: paradox::ln_prior_threshold(alpha, x),
                    alpha,
                    m_over_n: x,
                })
            }
            (None, Some(p)) => {
                let p = probability("prior", p)?;
                Ok(ParadoxAnswer::Bits {
                    min_bits_per_element: paradox::min_bits_per_element(alpha, p),
                    alpha,
                    prior: p,
                })
            }
            (None, None) => Err(ModelError::Missing("m_over_n or prior")),
        }
    }
}

impl fmt::Display for ParadoxAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParadoxAnswer::Threshold {
                prior_threshold,
                ln_prior_threshold,
                alpha,
                m_over_n,
            } => write!(
                f,
                "alpha = {}, m/n = {}: the Bloom paradox holds for priors below {} (Theorem 1)",
                shown(alpha),
                shown(m_over_n),
                rate_with_ln(prior_threshold, ln_prior_threshold)
            ),
            // At prior 0 no queried element is a member, so every positive
            // answer is false and no filter size escapes: said in words,
            // not as "at least inf bits" (the JSON's null).
            ParadoxAnswer::Bits {
                min_bits_per_element,
                alpha,
                prior,
            } if !min_bits_per_element.is_finite() => write!(
                f,
                "alpha = {}, prior = {}: no number of bits per element escapes the Bloom paradox (no queried element is a member, so every positive answer is false)",
                shown(alpha),
                shown(prior)
            ),
            ParadoxAnswer::Bits {
                min_bits_per_element,
                alpha,
                prior,
            } => write!(
                f,
                "alpha = {}, prior = {}: at least {min_bits_per_element:.3} bits per element escape the Bloom paradox",
                shown(alpha),
                shown(prior)
            ),
        }
    }
}

/// Membership probability from a counting filter's counters (000 Theorem
/// 2), and the cost-optimal decision (Theorem 4).
#[derive(Clone, Debug, Default, PartialEq, clap::Args)]
pub struct CbfPosteriorQuery {
    /// The k counter values, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub counters: Vec<u64>,
    /// A priori membership probability.
    #[arg(long)]
    pub prior: f64,
    /// Counters in the filter (k subarrays of m/k).
    #[arg(long)]
    pub m: u64,
    /// Elements in the filter.
    #[arg(long)]
    pub n: u64,
    /// Cost ratio: adds the decision and the minimal counter product.
    #[arg(long)]
    pub alpha: Option<f64>,
}

/// The answer to a [`CbfPosteriorQuery`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CbfPosteriorAnswer {
    /// `Pr(x in S | counters)`.
    pub posterior: f64,
    /// Answer positive (with `alpha`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<bool>,
    /// The least counter product answered positive (with `alpha`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_product: Option<f64>,
    /// The natural logarithm of the bound `min_product` rounds up (with
    /// `alpha`), also where that bound is past the largest `f64`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ln_min_product: Option<f64>,
    #[serde(skip)]
    counters: Vec<u64>,
    #[serde(skip)]
    alpha: Option<f64>,
}

impl CbfPosteriorQuery {
    /// Checks the parameters and evaluates the model.
    pub fn answer(&self) -> Result<CbfPosteriorAnswer, ModelError> {
        let k = u32::try_from(self.counters.len()).unwrap_or(u32::MAX);
        if k == 0 {
            return Err(invalid("counters", "needs at least one value (k >= 1)"));
        }
        k_in_range(k)?;
        let prior = probability("prior", self.prior)?;
        at_least_k(self.m, k)?;
        if self.n == 0 {
            return Err(invalid("n", "must be at least 1"));
        }
        let posterior = paradox::cbf_posterior(&self.counters, prior, self.m, self.n);
        let (decision, min_product, ln_min_product) = match self.alpha {
            Some(a) => {
                let a = positive("alpha", a)?;
                (
                    Some(paradox::decide(posterior, a)),
                    Some(paradox::min_counter_product(k, prior, a, self.m, self.n)),
                    Some(paradox::ln_min_counter_product(k, prior, a, self.m, self.n)),
                )
            }
            None => (None, None, None),
        };
        Ok(CbfPosteriorAnswer {
            posterior,
            decision,
            min_product,
            ln_min_product,
            counters: self.counters.clone(),
            alpha: self.alpha,
        })
    }
}

impl fmt::Display for CbfPosteriorAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Pr(x in S | counters {:?}) = {:.6e} (Theorem 2)",
            self.counters, self.posterior
        )?;
        if let (Some(alpha), Some(d), Some(p)) = (self.alpha, self.decision, self.min_product) {
            write!(
                f,
                "\n  threshold 1/(alpha+1) = {:.6e}: answer {} (Theorem 4)\n  minimal counter product: {}",
                1.0 / (alpha + 1.0),
                if d { "positive" } else { "negative" },
                match self.ln_min_product {
                    // Past the largest f64 (no counters reach it): from
                    // its logarithm, not "inf".
                    Some(ln) if p.is_infinite() => rate_with_ln(p, ln),
                    _ => shown(p),
                }
            )?;
        }
        Ok(())
    }
}

/// The optimal order of queries across proxies (000 Theorems 6 and 7).
#[derive(Clone, Debug, Default, PartialEq, clap::Args)]
pub struct QueryOrderQuery {
    /// Success probability of each regular proxy, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub probs: Vec<f64>,
    /// Query cost of each regular proxy, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub costs: Vec<f64>,
    /// Query cost of the special proxy that holds every element.
    #[arg(long)]
    pub special_cost: f64,
}

/// One step of a query order, as JSON: a proxy index or `"special"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum OrderStep {
    /// A regular proxy.
    Proxy(usize),
    /// The special proxy.
    Special(SpecialProxy),
}

/// The special proxy, serialised as `"special"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecialProxy {
    /// The special proxy.
    Special,
}

/// The answer to a [`QueryOrderQuery`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueryOrderAnswer {
    /// Proxy indices, then `"special"`.
    pub order: Vec<OrderStep>,
    /// The order's expected cost.
    pub expected_cost: f64,
}

impl QueryOrderQuery {
    /// Checks the parameters and evaluates the model.
    pub fn answer(&self) -> Result<QueryOrderAnswer, ModelError> {
        if self.probs.len() != self.costs.len() {
            return Err(invalid(
                "costs",
                format!(
                    "has {} values but probs has {}",
                    self.costs.len(),
                    self.probs.len()
                ),
            ));
        }
        for &p in &self.probs {
            probability("probs", p)?;
        }
        for &c in self.costs.iter().chain(std::iter::once(&self.special_cost)) {
            positive("costs", c)?;
        }
        let order = paradox::query_order(&self.probs, &self.costs, self.special_cost);
        let cost =
            paradox::expected_query_cost(&order, &self.probs, &self.costs, self.special_cost);
        Ok(QueryOrderAnswer {
            order: order
                .iter()
                .map(|t| match t {
                    paradox::QueryTarget::Proxy(i) => OrderStep::Proxy(*i),
                    paradox::QueryTarget::Special => OrderStep::Special(SpecialProxy::Special),
                })
                .collect(),
            expected_cost: cost,
        })
    }
}

impl fmt::Display for QueryOrderAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let steps: Vec<String> = self
            .order
            .iter()
            .map(|s| match s {
                OrderStep::Proxy(i) => format!("proxy {i}"),
                OrderStep::Special(_) => "special".into(),
            })
            .collect();
        write!(
            f,
            "query order: {} (Theorem 6)\nexpected cost: {}",
            steps.join(" -> "),
            fixed6(self.expected_cost)
        )
    }
}

/// What a [`RecycleQuery`] asks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RecycleAsk {
    /// The average rate of a sigma-bounded filter.
    Sigma(u64),
    /// The rates of an N-bounded filter.
    NBounded(u64),
    /// The largest sigma (and N) within a target average rate.
    TargetFpr(f64),
}

/// Recycling Bloom filters (004): one of `sigma`, `n_bounded` or
/// `target_fpr`.
#[derive(Clone, Debug, Default, PartialEq, clap::Args)]
pub struct RecycleQuery {
    /// Total memory in bits (a two-phase filter has two halves of `m/2`).
    #[arg(long)]
    pub m: u64,
    /// Positions per message.
    #[arg(long)]
    pub k: u32,
    /// Recycle when more than sigma bits would be set (in the active half):
    /// a fraction of the phase's bits below 1 (0.5), or bits (60000), as
    /// the replay's `--recycle sigma:S`.
    #[arg(long, conflicts_with_all = ["n_bounded", "target_fpr"])]
    pub sigma: Option<SigmaArg>,
    /// N-bounded: recycle after N bit-setting insertions (f_w, f_o, f_a).
    #[arg(long, conflicts_with = "target_fpr")]
    pub n_bounded: Option<u64>,
    /// The largest sigma (and N) whose average rate stays at or below this.
    #[arg(long)]
    pub target_fpr: Option<f64>,
    /// Two phases (active and frozen halves); sigma and target only, as
    /// 004's N-bounded rates (eqs. 1-3) are for one phase (the replay's
    /// report says the same of a two-phase N-bounded filter).
    #[arg(long, conflicts_with = "n_bounded")]
    pub two_phase: bool,
    /// k distinct positions per message (default: independent positions);
    /// sigma and target only, as the N-bounded rates (eqs. 1-3) are for
    /// independent positions.
    #[arg(long, conflicts_with = "n_bounded")]
    pub non_colliding: bool,
    /// Re-insert the message that triggers a recycle; sigma and target
    /// only, as the N-bounded rates start each cycle empty.
    #[arg(long, conflicts_with = "n_bounded")]
    pub retaining: bool,
    /// Also give the cache-line-blocked layout's rate and sizing
    /// (`model::blocked_recycling`, (R3) and (R4)); sigma and target only.
    #[arg(long)]
    pub blocked: bool,
}

/// The cache-line-blocked layout's figures for a recycle query
/// (`model::blocked_recycling`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BlockedRecycleAnswer {
    /// Blocks of 512 bits a phase (`max(1, m / 512)`).
    pub blocks: u64,
    /// The sigma the figures are for: the one asked for, or the largest
    /// within the target in the blocked layout.
    pub sigma: Option<u64>,
    /// Long-term average false-positive rate at that sigma, (R3) or (R4).
    pub avg_fpr: Option<f64>,
    /// Expected new messages per cycle at that sigma.
    pub expected_messages: Option<f64>,
}

/// The answer to a [`RecycleQuery`].
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RecycleAnswer {
    /// For a sigma.
    Sigma {
        /// Long-term average false-positive rate, eq. (18) or (26).
        avg_fpr: f64,
        /// Expected new messages per cycle, eq. (23).
        expected_messages: f64,
        /// The exact chain, or its continuum limit when the chain's work
        /// (`sigma k^2`) is past [`recycling::EXACT_CHAIN_MAX_WORK`].
        method: recycling::SizingMethod,
        /// The sigma asked for, in bits of a phase (a fraction resolved).
        sigma: u64,
        #[serde(skip)]
        /// The sigma as given (a fraction, or bits).
        given: Option<SigmaArg>,
    },
    /// For N insertions.
    NBounded {
        /// `f_w`, eq. (1).
        f_w: f64,
        /// `f_o`, eq. (2).
        f_o: f64,
        /// `f_a`, eq. (3).
        f_a: f64,
        #[serde(skip)]
        /// The N asked for.
        n: u64,
    },
    /// For a target rate.
    Target {
        /// The largest sigma within the target.
        sigma: Option<u64>,
        /// Expected new messages per cycle at that sigma.
        expected_messages: Option<f64>,
        /// The largest N with `f_w` within the target.
        n_worst: Option<u64>,
        /// The largest N with `f_a` within the target.
        n_avg: Option<u64>,
        /// How sigma was sized: the exact chain, or its continuum limit
        /// for phases too large for the chain to be solved quickly.
        method: Option<recycling::SizingMethod>,
        #[serde(skip)]
        /// The target rate asked for.
        target: f64,
    },
}

/// A recycling answer with the query's shape, for display.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecycleReply {
    /// The answer.
    #[serde(flatten)]
    pub answer: RecycleAnswer,
    #[serde(skip)]
    variant: String,
    #[serde(skip)]
    m: u64,
    #[serde(skip)]
    half: u64,
    #[serde(skip)]
    k: u32,
    /// The blocked layout's figures, with `--blocked`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<BlockedRecycleAnswer>,
}

impl RecycleQuery {
    /// Bits of a phase: `m`, or its half for a two-phase filter.
    pub fn phase_bits(&self) -> u64 {
        if self.two_phase { self.m / 2 } else { self.m }
    }

    /// What is asked, with a sigma given as a fraction resolved to bits of
    /// a phase.
    pub fn ask(&self) -> Result<RecycleAsk, ModelError> {
        match (self.sigma, self.n_bounded, self.target_fpr) {
            (Some(s), None, None) => s
                .bits(self.phase_bits())
                .map(RecycleAsk::Sigma)
                .map_err(|e| invalid("sigma", e)),
            (None, Some(n), None) => Ok(RecycleAsk::NBounded(n)),
            (None, None, Some(f)) => Ok(RecycleAsk::TargetFpr(f)),
            _ => Err(ModelError::Missing(
                "exactly one of sigma, n_bounded or target_fpr",
            )),
        }
    }

    /// Checks the parameters and evaluates the model.
    pub fn answer(&self) -> Result<RecycleReply, ModelError> {
        let k = k_in_range(self.k)?;
        let ask = self.ask()?;
        let half = self.phase_bits();
        if half < u64::from(k) {
            return Err(invalid(
                "m",
                format!(
                    "({}) leaves {half} bits per phase, fewer than k ({k})",
                    self.m
                ),
            ));
        }
        let hashing = if self.non_colliding {
            recycling::Hashing::NonColliding
        } else {
            recycling::Hashing::Colliding
        };
        let answer = match ask {
            RecycleAsk::Sigma(sigma) => {
                if sigma >= half {
                    return Err(invalid(
                        "sigma",
                        format!("({sigma}) must be below the {half} bits of a phase"),
                    ));
                }
                let method = recycling::explicit_sigma_method(half, k, sigma);
                if method == Some(recycling::SizingMethod::Chain) {
                    let model =
                        recycling::RecyclingModel::new(half, k, sigma, hashing, self.retaining)
                            .map_err(|e| invalid("sigma", e.to_string()))?;
                    RecycleAnswer::Sigma {
                        avg_fpr: if self.two_phase {
                            model.two_phase_fpr()
                        } else {
                            model.one_phase_fpr()
                        },
                        expected_messages: model.expected_messages(),
                        method: recycling::SizingMethod::Chain,
                        sigma,
                        given: self.sigma,
                    }
                } else if method.is_none() {
                    // The continuum's relative error is of order k/m: past
                    // 1 % it is no answer, and neither is a chain that takes
                    // minutes, so the question is refused.
                    let work = u128::from(sigma) * u128::from(k) * u128::from(k);
                    return Err(invalid(
                        "sigma",
                        format!(
                            "the exact chain is too large here (sigma k^2 = {work}, above {}) and its continuum limit is inaccurate at k/m = {:.3}; use a smaller k or a larger m",
                            recycling::EXACT_CHAIN_MAX_WORK,
                            f64::from(k) / half as f64
                        ),
                    ));
                } else {
                    let (avg_fpr, expected_messages) =
                        recycling::continuum_rates(half, k, sigma, self.two_phase);
                    RecycleAnswer::Sigma {
                        avg_fpr,
                        expected_messages,
                        method: recycling::SizingMethod::Continuum,
                        sigma,
                        given: self.sigma,
                    }
                }
            }
            RecycleAsk::NBounded(_) if self.two_phase || self.non_colliding || self.retaining => {
                return Err(invalid(
                    "n_bounded",
                    "its rates (eqs. 1-3) are for one phase, independent positions and cycles that start empty: not with two_phase, non_colliding or retaining",
                ));
            }
            RecycleAsk::NBounded(n) => RecycleAnswer::NBounded {
                f_w: recycling::f_worst(half, k, n),
                f_o: recycling::f_oracle(half, k, n),
                f_a: recycling::f_average(half, k, n),
                n,
            },
            RecycleAsk::TargetFpr(target) => {
                if !(target > 0.0 && target < 1.0) {
                    return Err(invalid(
                        "target_fpr",
                        format!("must be a probability in (0, 1), got {}", shown(target)),
                    ));
                }
                let sized = recycling::sigma_for_target(
                    half,
                    k,
                    hashing,
                    self.retaining,
                    self.two_phase,
                    target,
                );
                let (n_worst, n_avg) =
                    recycling::n_for_target(half, k, target, half.saturating_mul(50));
                RecycleAnswer::Target {
                    sigma: sized.map(|s| s.sigma),
                    expected_messages: sized.map(|s| s.expected_messages),
                    n_worst,
                    n_avg,
                    method: sized.map(|s| s.method),
                    target,
                }
            }
        };
        // After the answer, whose checks come first.
        let blocked = self
            .blocked
            .then(|| Self::blocked_answer(&ask, half, k, hashing, self.retaining, self.two_phase))
            .transpose()?;
        Ok(RecycleReply {
            answer,
            variant: format!(
                "{}, {}, {}",
                if self.two_phase {
                    "two-phase"
                } else {
                    "one-phase"
                },
                if self.non_colliding {
                    "non-colliding"
                } else {
                    "colliding"
                },
                if self.retaining {
                    "retaining"
                } else {
                    "non-retaining"
                }
            ),
            m: self.m,
            half,
            k,
            blocked,
        })
    }

    /// The blocked layout's answer to `ask`, for `--blocked`.
    fn blocked_answer(
        ask: &RecycleAsk,
        half: u64,
        k: u32,
        hashing: recycling::Hashing,
        retaining: bool,
        two_phase: bool,
    ) -> Result<BlockedRecycleAnswer, ModelError> {
        let blocks = (half / crate::filter::BIT_BLOCK_BITS as u64).max(1);
        let (sigma, rates) = match *ask {
            RecycleAsk::Sigma(sigma) => {
                let r =
                    blocked_recycling::blocked_rates(half, k, sigma, hashing, retaining, two_phase)
                        .map_err(|e| invalid("sigma", e.to_string()))?;
                (Some(sigma), Some(r))
            }
            RecycleAsk::TargetFpr(target) => {
                let sized = blocked_recycling::blocked_sigma_for_target(
                    half, k, hashing, retaining, two_phase, target,
                );
                (
                    sized.map(|s| s.sigma),
                    sized.map(|s| (s.avg_fpr, s.expected_messages)),
                )
            }
            RecycleAsk::NBounded(_) => {
                return Err(invalid(
                    "blocked",
                    "the blocked layout is modelled for sigma-bounded filters only (use --sigma or --target-fpr)",
                ));
            }
        };
        Ok(BlockedRecycleAnswer {
            blocks,
            sigma,
            avg_fpr: rates.map(|r| r.0),
            expected_messages: rates.map(|r| r.1),
        })
    }
}

impl fmt::Display for RecycleReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (m, half, k) = (self.m, self.half, self.k);
        match &self.answer {
            RecycleAnswer::Sigma {
                avg_fpr,
                expected_messages,
                method,
                sigma,
                given,
            } => write!(
                f,
                "{}, m = {m} ({half} per phase), k = {k}, sigma = {sigma}{}:\n  long-term average false-positive rate {avg_fpr:.6e}{}\n  expected new messages per cycle {expected_messages:.2}",
                self.variant,
                match given {
                    Some(SigmaArg::Fraction(x)) => format!(" ({x} of a phase)"),
                    _ => String::new(),
                },
                match method {
                    recycling::SizingMethod::Chain => "  (exact chain, 004 eq. (18)/(26))",
                    recycling::SizingMethod::Continuum =>
                        "  (continuum limit of the chain: sigma k^2 is too large to solve it exactly)",
                    recycling::SizingMethod::BlockedMixture =>
                        "  (blocked layout's Poisson mixture, model::blocked_recycling)",
                }
            ),
            RecycleAnswer::NBounded { f_w, f_o, f_a, n } => write!(
                f,
                "N-bounded, m = {half}, k = {k}, N = {n}:\n  f_w (worst case, eq. 1) {f_w:.6e}\n  f_o (oracle average, eq. 2) {f_o:.6e}\n  f_a (average-case bound, eq. 3) {f_a:.6e}"
            ),
            RecycleAnswer::Target {
                sigma,
                expected_messages,
                n_worst,
                n_avg,
                method,
                target,
            } => write!(
                f,
                "{}, m = {m} ({half} per phase), k = {k}, target {}:\n  sigma = {}{}\n  expected new messages per cycle {}\n  N-bounded: n_worst = {}, n_avg = {}",
                self.variant,
                shown(*target),
                sigma.map_or("none".into(), |s| s.to_string()),
                match method {
                    Some(recycling::SizingMethod::Chain) =>
                        "  (exact chain, 004 eqs. (15), (18), (26))",
                    Some(recycling::SizingMethod::Continuum) =>
                        "  (continuum limit of the chain: the phase is too large to solve it exactly)",
                    Some(recycling::SizingMethod::BlockedMixture) =>
                        "  (blocked layout's Poisson mixture, model::blocked_recycling)",
                    None => "",
                },
                expected_messages.map_or("-".into(), |m| format!("{m:.2}")),
                n_worst.map_or("none".into(), |n| n.to_string()),
                n_avg.map_or("none".into(), |n| n.to_string()),
            ),
        }?;
        if let Some(b) = &self.blocked {
            // Under two blocks a phase the layout is one block of the
            // whole phase: 004's own (`blocked_recycling`'s `shape`).
            let blocks = if b.blocks < 2 {
                format!("one block: the whole {half}-bit phase, as 004's layout")
            } else {
                format!("{} blocks of 512 bits a phase", b.blocks)
            };
            write!(
                f,
                "\n  blocked layout ({blocks}): sigma = {}, long-term average false-positive rate {} ((R3)/(R4)), expected new messages per cycle {}",
                b.sigma.map_or("none".into(), |s| s.to_string()),
                b.avg_fpr.map_or("-".into(), |r| format!("{r:.6e}")),
                b.expected_messages
                    .map_or("-".into(), |n| format!("{n:.2}")),
            )?;
        }
        Ok(())
    }
}

/// Compressed Bloom filters (002): the best filter for a transmission
/// budget.
#[derive(Clone, Debug, PartialEq, clap::Args)]
pub struct CompressedQuery {
    /// Transmitted bits per element (after compression).
    #[arg(long)]
    pub bits_per_element: f64,
    /// Largest uncompressed array, in bits per element (memory limit).
    #[arg(long, default_value_t = 1e6)]
    pub max_m_over_n: f64,
    /// Largest number of hash functions considered.
    #[arg(long, default_value_t = 32)]
    pub max_k: u32,
}

/// A filter shape and its cost, as JSON.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CompressedShape {
    /// Bits per element of the uncompressed array.
    pub m_over_n: f64,
    /// Hash functions.
    pub k: u32,
    /// False-positive rate.
    pub fpr: f64,
    /// Its natural logarithm, also where the rate underflows to 0.
    pub ln_fpr: f64,
    /// Bits per element sent.
    pub transmitted_bits_per_element: f64,
}

impl From<compressed::CompressedChoice> for CompressedShape {
    fn from(c: compressed::CompressedChoice) -> CompressedShape {
        CompressedShape {
            m_over_n: c.m_over_n,
            k: c.k,
            fpr: c.fpr,
            ln_fpr: c.ln_fpr,
            transmitted_bits_per_element: c.transmitted_bits_per_element,
        }
    }
}

/// The answer to a [`CompressedQuery`]: the best compressed filter, with
/// the standard one beside it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompressedAnswer {
    /// The best compressed filter.
    #[serde(flatten)]
    pub best: CompressedShape,
    /// The standard (uncompressed) filter for the same budget.
    pub standard: CompressedShape,
    /// The search's bounds the best filter stands on: `max_k` when its
    /// `k` is `--max-k`, and `max_m_over_n` when its array is
    /// `--max-m-over-n` bits per element (it then sends less than the
    /// budget). A filter past a bound may have a lower rate, even below
    /// the standard filter's, whose `k` is unbounded; empty when the best
    /// filter is inside both.
    pub bounds_reached: Vec<&'static str>,
    #[serde(skip)]
    budget: f64,
    #[serde(skip)]
    max_k: u32,
    #[serde(skip)]
    max_m_over_n: f64,
}

impl CompressedQuery {
    /// Checks the parameters and evaluates the model.
    pub fn answer(&self) -> Result<CompressedAnswer, ModelError> {
        let z = positive("bits_per_element", self.bits_per_element)?;
        // The standard filter's k is (m/n) ln 2 (001), a 32-bit count.
        let most = f64::from(u32::MAX) / std::f64::consts::LN_2;
        if z > most {
            return Err(invalid(
                "bits_per_element",
                format!(
                    "must be at most {most:.4e} (the standard filter's k = (m/n) ln 2 is a 32-bit count), got {}",
                    shown(z)
                ),
            ));
        }
        let max = positive("max_m_over_n", self.max_m_over_n)?;
        if self.max_k == 0 || self.max_k > 64 {
            return Err(invalid(
                "max_k",
                format!("must be between 1 and 64, got {}", self.max_k),
            ));
        }
        let cap = max.max(z);
        let best = compressed::optimize(z, cap, self.max_k).ok_or_else(|| {
            invalid(
                "bits_per_element",
                format!("no filter fits {} bits per element", shown(z)),
            )
        })?;
        let mut bounds_reached = Vec::new();
        if best.k == self.max_k {
            bounds_reached.push("max_k");
        }
        // `optimize` takes the cap itself when the whole array fits.
        if best.m_over_n == cap {
            bounds_reached.push("max_m_over_n");
        }
        Ok(CompressedAnswer {
            best: best.into(),
            standard: compressed::standard(z).into(),
            bounds_reached,
            budget: z,
            max_k: self.max_k,
            max_m_over_n: cap,
        })
    }
}

impl fmt::Display for CompressedAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (o, s) = (&self.best, &self.standard);
        write!(
            f,
            "budget {} transmitted bits per element:\n  compressed: m/n = {}, k = {}, false-positive rate {} ({} bits sent)\n  standard:   m/n = {}, k = {}, false-positive rate {}",
            shown(self.budget),
            fixed3(o.m_over_n),
            o.k,
            rate_with_ln(o.fpr, o.ln_fpr),
            fixed3(o.transmitted_bits_per_element),
            shown(s.m_over_n),
            s.k,
            rate_with_ln(s.fpr, s.ln_fpr)
        )?;
        if self.bounds_reached.is_empty() {
            return Ok(());
        }
        let bounds: Vec<String> = self
            .bounds_reached
            .iter()
            .map(|&b| match b {
                "max_k" => format!("k = --max-k {}", self.max_k),
                _ => format!(
                    "m/n = --max-m-over-n {} ({} of {} bits sent)",
                    shown(self.max_m_over_n),
                    fixed3(o.transmitted_bits_per_element),
                    shown(self.budget)
                ),
            })
            .collect();
        write!(
            f,
            "\n  the compressed filter is at the search's bounds, past which its rate may be lower:\n    {}",
            bounds.join("; ")
        )
    }
}
