//! Average false-positive rates of recycling Bloom filters (Dozier,
//! Salamatian, Rubenstein, "Modeling Average False Positive Rates of
//! Recycling Bloom Filters", paper 004).
//!
//! A sigma-bounded filter of `M` bits recycles when a new message would
//! leave more than `sigma` bits set. Its state is the number of set bits;
//! the chain (004 §IV) moves forward by the bits each new message sets and
//! back at a recycle: to 0 when *non-retaining* (the triggering message is
//! dropped), or to the bits that message sets in an empty filter when
//! *retaining*. Hashes are *colliding* (k independent positions) or
//! *non-colliding* (k distinct positions).
//!
//! The chain regenerates at every recycle, so this module computes it as a
//! renewal process: the expected number of arrivals that find the filter
//! in state `i` during one cycle, `V_i`, follows 004 eq. (15) forward from
//! the cycle's start state, and
//!
//! ```text
//! pi_i = V_i / sum V                              stationary distribution (15)
//! f1   = sum pi_i rho(i)                          one-phase rate (18)
//! E[N] = sum V                                    new messages per cycle (23)
//! F_i  = V_i Pr(recycle from i)                   frozen half at a swap (24), (25)
//! f2   = 1 - (1 - f1)(1 - sum F_i rho(i))         two-phase rate (26)
//! ```
//!
//! with `rho(i) = (i/M)^k` (colliding) or `C(i,k)/C(M,k)` (non-colliding;
//! the extracted text of 004 eq. (17) prints `i/M`, which is only right for
//! `k = 1`: a message is a false positive when all its `k` distinct
//! positions are among the `i` set bits).
//!
//! Two differences from the paper's wording, both so the model counts what
//! a simulation of the filter counts: `E[N]` includes the message that
//! triggers the recycle (eq. (22) stops the count when `sigma` is reached),
//! and for two-phase filters `M` here is the size of one half.
//!
//! ```
//! use flowsieve::model::recycling::{Hashing, RecyclingModel};
//! let m = RecyclingModel::new(1000, 1, 500, Hashing::Colliding, false).unwrap();
//! // k = 1 has a closed form, 004 eq. (19).
//! let closed: f64 = (0..=500u32).map(|i| f64::from(i) / (1000.0 * f64::from(1000 - i))).sum::<f64>()
//!     / (0..=500u32).map(|j| 1.0 / f64::from(1000 - j)).sum::<f64>();
//! assert!((m.one_phase_fpr() - closed).abs() < 1e-12);
//! ```

/// How a message's `k` positions are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hashing {
    /// `k` independent uniform positions (they may coincide).
    Colliding,
    /// `k` distinct uniform positions (sampling without replacement).
    NonColliding,
}

/// Why a recycling model cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecyclingModelError {
    #[error("k must be at least 1")]
    ZeroK,
    #[error("the filter needs at least k bits (m = {m}, k = {k})")]
    TooFewBits { m: u64, k: u32 },
    #[error("sigma must be below m (sigma = {sigma}, m = {m})")]
    SigmaTooLarge { sigma: u64, m: u64 },
    #[error("a retaining filter needs sigma >= k, or one message could recycle it forever (sigma = {sigma}, k = {k})")]
    RetainingSigmaBelowK { sigma: u64, k: u32 },
}

/// The solved chain for one configuration.
#[derive(Clone, Debug)]
pub struct RecyclingModel {
    m: u64,
    k: u32,
    sigma: u64,
    hashing: Hashing,
    retaining: bool,
    /// Expected arrivals per cycle finding `i` bits set.
    visits: Vec<f64>,
    /// Probability that a new message arriving at `i` bits triggers a recycle.
    recycle: Vec<f64>,
}

/// The forward transitions of one new message from `i` bits (004 eqs.
/// (4)-(8) colliding, (11)-(13) non-colliding): `(p[j - i], p_recycle)` for
/// `j` in `i ..= min(i + k, sigma)`.
pub fn transitions(m: u64, k: u32, sigma: u64, hashing: Hashing, i: u64) -> (Vec<f64>, f64) {
    let mut dist = vec![0.0; k as usize + 1];
    let recycle = transitions_into(m, k, sigma, hashing, i, &mut dist);
    (dist, recycle)
}

/// [`transitions`] into a caller's buffer of `k + 1` entries (no
/// allocation: the chain is solved state by state, hundreds of thousands of
/// times for a large filter). Returns the recycle probability.
fn transitions_into(m: u64, k: u32, sigma: u64, hashing: Hashing, i: u64, dist: &mut [f64]) -> f64 {
    let mf = m as f64;
    let kk = (k as usize).min(dist.len().saturating_sub(1));
    dist.fill(0.0);
    dist[0] = 1.0;
    let mut recycle = 0.0;
    for h in 0..kk {
        // Offsets only grow by one per position: walk them downwards so each
        // entry is read before the step writes into it.
        for off in (0..=h).rev() {
            let p = dist[off];
            if p == 0.0 {
                continue;
            }
            let b = (i + off as u64) as f64;
            let (stay, advance) = match hashing {
                Hashing::Colliding => (b / mf, (mf - b) / mf),
                Hashing::NonColliding => {
                    ((b - h as f64) / (mf - h as f64), (mf - b) / (mf - h as f64))
                }
            };
            dist[off] = p * stay;
            if i + off as u64 + 1 > sigma {
                recycle += p * advance;
            } else {
                dist[off + 1] += p * advance;
            }
        }
    }
    recycle
}

/// `rho(i)`: the probability that a new message finds all its positions set
/// when `i` of `m` bits are set (004 eq. (17), non-colliding corrected).
pub fn rho(m: u64, k: u32, hashing: Hashing, i: u64) -> f64 {
    match hashing {
        Hashing::Colliding => (i as f64 / m as f64).powi(k as i32),
        Hashing::NonColliding => (0..u64::from(k))
            .map(|h| {
                if i > h {
                    (i - h) as f64 / (m - h) as f64
                } else {
                    0.0
                }
            })
            .product(),
    }
}

impl RecyclingModel {
    /// Solves the chain for `m` bits (one half, for a two-phase filter),
    /// `k` hashes and threshold `sigma`.
    pub fn new(
        m: u64,
        k: u32,
        sigma: u64,
        hashing: Hashing,
        retaining: bool,
    ) -> Result<RecyclingModel, RecyclingModelError> {
        if k == 0 {
            return Err(RecyclingModelError::ZeroK);
        }
        if m < u64::from(k) {
            return Err(RecyclingModelError::TooFewBits { m, k });
        }
        if sigma >= m {
            return Err(RecyclingModelError::SigmaTooLarge { sigma, m });
        }
        if retaining && sigma < u64::from(k) {
            return Err(RecyclingModelError::RetainingSigmaBelowK { sigma, k });
        }
        let states = sigma as usize + 1;
        let mut inflow = vec![0.0; states];
        if retaining {
            // A cycle starts with the retained message in an empty filter.
            let (from_empty, _) = transitions(m, k, sigma, hashing, 0);
            for (off, p) in from_empty.iter().enumerate() {
                if off < states {
                    inflow[off] += p;
                }
            }
        } else {
            inflow[0] = 1.0;
        }
        let mut visits = vec![0.0; states];
        let mut recycle = vec![0.0; states];
        let mut dist = vec![0.0; k as usize + 1];
        for i in 0..states {
            let rec = transitions_into(m, k, sigma, hashing, i as u64, &mut dist);
            recycle[i] = rec;
            let leave = 1.0 - dist[0];
            visits[i] = if leave > 0.0 { inflow[i] / leave } else { 0.0 };
            for (off, p) in dist.iter().enumerate().skip(1) {
                if i + off < states {
                    inflow[i + off] += visits[i] * p;
                }
            }
        }
        Ok(RecyclingModel {
            m,
            k,
            sigma,
            hashing,
            retaining,
            visits,
            recycle,
        })
    }

    /// The stationary distribution of the number of set bits, as seen by
    /// arriving new messages (004 eq. (15)).
    pub fn stationary(&self) -> Vec<f64> {
        let total: f64 = self.visits.iter().sum();
        self.visits.iter().map(|v| v / total).collect()
    }

    /// One-phase long-term average false-positive rate, count-instance
    /// (004 eq. (18)).
    pub fn one_phase_fpr(&self) -> f64 {
        let total: f64 = self.visits.iter().sum();
        self.visits
            .iter()
            .enumerate()
            .map(|(i, v)| v * rho(self.m, self.k, self.hashing, i as u64))
            .sum::<f64>()
            / total
    }

    /// The distribution of the frozen half's set bits at a swap (004 eqs.
    /// (24), (25)).
    pub fn frozen_distribution(&self) -> Vec<f64> {
        let raw: Vec<f64> = self
            .visits
            .iter()
            .zip(&self.recycle)
            .map(|(v, r)| v * r)
            .collect();
        let total: f64 = raw.iter().sum();
        raw.iter()
            .map(|x| if total > 0.0 { x / total } else { 0.0 })
            .collect()
    }

    /// Two-phase long-term average false-positive rate (004 eq. (26)): a
    /// message is a false positive when either half has all its positions.
    pub fn two_phase_fpr(&self) -> f64 {
        let frozen: f64 = self
            .frozen_distribution()
            .iter()
            .enumerate()
            .map(|(i, f)| f * rho(self.m, self.k, self.hashing, i as u64))
            .sum();
        1.0 - (1.0 - self.one_phase_fpr()) * (1.0 - frozen)
    }

    /// Expected new messages per cycle, the triggering one included (004
    /// eqs. (20)-(23), counted as a simulation of the filter counts them).
    pub fn expected_messages(&self) -> f64 {
        self.visits.iter().sum()
    }

    /// The configuration.
    pub fn params(&self) -> (u64, u32, u64, Hashing, bool) {
        (self.m, self.k, self.sigma, self.hashing, self.retaining)
    }
}

/// `f_w` (004 eq. (1)): the worst-case rate of the message after `n` in a
/// filter of `m` bits with colliding hashes, `[1 - (1 - 1/m)^{kn}]^k`.
pub fn f_worst(m: u64, k: u32, n: u64) -> f64 {
    let zero = (f64::from(k) * n as f64 * (-1.0 / m as f64).ln_1p()).exp();
    (1.0 - zero).powi(k as i32)
}

/// `f_i = P(F_i = 1)`, the `i`-th new message (1-based) arriving after
/// `i - 1` insertions, by eq. (1).
fn f_i(m: u64, k: u32, i: u64) -> f64 {
    f_worst(m, k, i - 1)
}

/// `f_o` (004 eq. (2)): the oracle N-bounded average, `sum_{i<=N} f_i / N`.
pub fn f_oracle(m: u64, k: u32, n: u64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    (1..=n).map(|i| f_i(m, k, i)).sum::<f64>() / n as f64
}

/// `f_a` (004 eq. (3)): the average-case N-bounded lower bound,
/// `sum f_i/(1-f_i) / sum (1 + f_i/(1-f_i))`.
pub fn f_average(m: u64, k: u32, n: u64) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for i in 1..=n {
        let f = f_i(m, k, i);
        let r = f / (1.0 - f);
        num += r;
        den += 1.0 + r;
    }
    if den > 0.0 {
        num / den
    } else {
        0.0
    }
}

/// The largest `x` in `lo..=hi` with `ok(x)`, for `ok` true up to a point
/// and false after (all rates here rise with the threshold).
fn largest(lo: u64, hi: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if !ok(lo) {
        return None;
    }
    let (mut good, mut bad) = (lo, hi + 1);
    if ok(hi) {
        return Some(hi);
    }
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if ok(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(good)
}

/// Sizing (004 §V): the largest `sigma` whose long-term average rate
/// (one- or two-phase) is at most `target`, with its model.
pub fn sigma_for_target(
    m: u64,
    k: u32,
    hashing: Hashing,
    retaining: bool,
    two_phase: bool,
    target: f64,
) -> Option<RecyclingModel> {
    let lo = if retaining { u64::from(k) } else { 0 };
    if m == 0 || lo >= m {
        return None;
    }
    let rate = |s: u64| {
        RecyclingModel::new(m, k, s, hashing, retaining)
            .map(|r| {
                if two_phase {
                    r.two_phase_fpr()
                } else {
                    r.one_phase_fpr()
                }
            })
            .unwrap_or(f64::INFINITY)
    };
    let s = largest(lo, m - 1, |s| rate(s) <= target)?;
    RecyclingModel::new(m, k, s, hashing, retaining).ok()
}

/// Sizing for N-bounded filters: the largest `N` whose [`f_worst`] is at
/// most `target` (`n_worst`), and the largest whose [`f_average`] is
/// (`n_avg`), searched up to `limit`.
pub fn n_for_target(m: u64, k: u32, target: f64, limit: u64) -> (Option<u64>, Option<u64>) {
    let n_worst = largest(1, limit, |n| f_worst(m, k, n) <= target);
    let n_avg = largest(1, limit, |n| f_average(m, k, n) <= target);
    (n_worst, n_avg)
}
