//! Average false-positive rates of sigma-bounded recycling Bloom filters
//! in the cache-line-blocked layout ([`crate::filter::BitLayout::Blocked`]):
//! 004's chain with Putze, Sanders and Singler's Poisson mixture over a
//! block's load ("Cache-, hash- and space-efficient Bloom filters", 2007,
//! §3). It is flowsieve's own derivation, not a paper's; the tests check it
//! against simulation of the filter.
//!
//! # Derivation
//!
//! A phase of `m` bits is cut into `B = m / s` blocks of `s = 512` bits (one
//! cache line); a message picks one block uniformly and its `k` positions in
//! it, independent (colliding) or distinct. After `n` messages since the
//! phase was clear, a block holds `L ~ Binomial(n, 1/B)` of them, which for
//! `B` in the hundreds and more is `Poisson(lambda)`, `lambda = n / B`.
//! Given `L = l`, the block's set bits `X_l` are those `l` messages' `k l`
//! positions, and a new message is a false positive when its own `k`
//! positions all fall on set bits:
//!
//! ```text
//! q(l)     = E[(X_l / s)^k]                (colliding)
//!          = E[C(X_l, k) / C(s, k)]        (non-colliding)
//! rho_B(n) = sum_l Poisson(l; n/B) q(l)                                    (R1)
//! ```
//!
//! against 004's `rho(i) = (i/m)^k` at `i` set bits. `q(l)` is exact: the
//! distribution of `X_l` is walked message by message (an occupancy chain
//! over the block's `s + 1` fill levels).
//!
//! Each message leaves a fraction `c` of a block's clear bits clear in
//! expectation, `c = (1 - 1/s)^k` (colliding) or `1 - k/s` (non-colliding),
//! so the expected fill after `n` messages is
//!
//! ```text
//! E[set bits] / m = 1 - exp(-lambda (1 - c))                               (R2)
//! ```
//!
//! A sigma-bounded filter recycles when a message would leave more than
//! `sigma` bits set. Its fill concentrates (its standard deviation is of
//! order `sqrt(m)` bits), so a cycle ends when (R2) reaches `sigma / m`:
//! after `lambda* = -ln(1 - sigma/m) / (1 - c)` messages a block, `E[N] =
//! lambda* B` new messages a cycle (004 eq. (23)'s counterpart). Every new
//! message places its bits, a false positive included (its bits are all
//! set already), so the arrivals of a cycle see `lambda` run evenly over
//! `[0, lambda*)`, and the one-phase rate (004 eq. (18)'s counterpart) is
//! the average of (R1) over it. With `integral_0^x Poisson(l; t) dt =
//! P(Poisson(x) > l)`:
//!
//! ```text
//! f1 = (1 / lambda*) sum_l q(l) P(Poisson(lambda*) > l)                    (R3)
//! ```
//!
//! A two-phase filter's frozen half holds a whole cycle, and the halves are
//! independent (every message goes to the active half), so as in 004 eq.
//! (26):
//!
//! ```text
//! f2 = 1 - (1 - f1) (1 - rho_B(lambda* B))                                 (R4)
//! ```
//!
//! # What it leaves out
//!
//! - Like 004's continuum limit ([`super::recycling::continuum_rates`]),
//!   the recycle point is taken at its mean, and retention (the triggering
//!   message re-inserted, one message a cycle) is neglected; both matter
//!   only when a cycle holds few messages.
//! - With one block (`m < 1024`: the last block takes the remainder past
//!   the whole 512-bit blocks) the layout is 004's filter, and
//!   [`blocked_average_fpr`] and [`blocked_sigma_for_target`] answer with
//!   004's chain.
//! - N- and time-bounded policies have no blocked model.
//!
//! ```
//! use flowsieve::model::blocked_recycling::blocked_average_fpr;
//! use flowsieve::model::recycling::{average_fpr, Hashing};
//! // 2^20 bits, k = 4, recycling at half full: blocking costs accuracy.
//! let blocked = blocked_average_fpr(1 << 20, 4, 1 << 19, Hashing::Colliding, false, false).unwrap();
//! let scattered = average_fpr(1 << 20, 4, 1 << 19, Hashing::Colliding, false, false).unwrap();
//! assert!(blocked > scattered && blocked < 2.0 * scattered);
//! ```

use super::recycling::{self, Hashing, RecyclingModelError, SigmaSizing, SizingMethod};
use super::special::{ln_binomial, ln_factorial};
use crate::filter::BIT_BLOCK_BITS;

/// Past this `q(l)` is taken as 1 (it only rises with `l`).
const Q_ONE: f64 = 1.0 - 1e-15;

/// The block fill chain: the distribution of a block's set bits after `l`
/// messages, walked message by message, and `q(l)` for every `l` walked.
#[derive(Clone, Debug)]
pub struct BlockOccupancy {
    s: usize,
    k: usize,
    hashing: Hashing,
    /// `P(X = x)` after `q.len()` messages.
    dist: Vec<f64>,
    /// Non-colliding: `P(d new bits | x set)` at `x (k + 1) + d`.
    hyper: Vec<f64>,
    /// `q(l)` for the `l` walked so far.
    q: Vec<f64>,
    /// The fill levels `dist` can hold mass at, `lo..=hi`: every level
    /// outside is 0 (levels whose mass fell below [`NEGLIGIBLE`] at the
    /// edges are set to 0 and left out). After many messages the fill
    /// concentrates on a few dozen levels, so each step walks those
    /// instead of all 513.
    lo: usize,
    hi: usize,
}

/// Mass below which an edge fill level is dropped: far under what any
/// rate here can resolve (1e-15 of a rate at least 1e-300 away).
const NEGLIGIBLE: f64 = 1e-40;

impl BlockOccupancy {
    /// The chain of a block of `s` bits and `k` positions a message (`k`
    /// at most `s`).
    pub fn new(s: usize, k: usize, hashing: Hashing) -> BlockOccupancy {
        let (s, k) = (s.max(1), k.clamp(1, s.max(1)));
        let mut dist = vec![0.0; s + 1];
        dist[0] = 1.0;
        let hyper = match hashing {
            Hashing::Colliding => Vec::new(),
            Hashing::NonColliding => {
                let (su, ku) = (s as u64, k as u64);
                let all = ln_binomial(su, ku);
                let mut h = vec![0.0; (s + 1) * (k + 1)];
                for x in 0..=su {
                    for d in 0..=ku {
                        let (clear, kept) = (su - x, ku - d);
                        if d <= clear && kept <= x {
                            h[x as usize * (k + 1) + d as usize] =
                                (ln_binomial(clear, d) + ln_binomial(x, kept) - all).exp();
                        }
                    }
                }
                h
            }
        };
        BlockOccupancy {
            s,
            k,
            hashing,
            dist,
            hyper,
            q: Vec::new(),
            lo: 0,
            hi: 0,
        }
    }

    /// `q(l)`: the probability that a new message's positions are all set
    /// in a block that `l` messages have written.
    pub fn q(&mut self, l: u64) -> f64 {
        let Ok(l) = usize::try_from(l) else {
            return 1.0;
        };
        while self.q.len() <= l {
            if self.q.last().is_some_and(|&q| q >= Q_ONE) || self.q.len() > 1 << 20 {
                return 1.0;
            }
            let q = self.fp_now();
            self.q.push(q);
            self.place_one();
        }
        self.q[l]
    }

    /// The false-positive probability at the current fill distribution.
    fn fp_now(&self) -> f64 {
        let s = self.s as f64;
        let k = self.k;
        let sum: f64 = self.dist[self.lo..=self.hi]
            .iter()
            .zip(self.lo..)
            .map(|(&p, x)| {
                if p == 0.0 {
                    return 0.0;
                }
                let all_set = match self.hashing {
                    Hashing::Colliding => (x as f64 / s).powi(k as i32),
                    Hashing::NonColliding => (0..k)
                        .map(|j| {
                            if x > j {
                                (x - j) as f64 / (self.s - j) as f64
                            } else {
                                0.0
                            }
                        })
                        .product(),
                };
                p * all_set
            })
            .sum();
        sum.clamp(0.0, 1.0)
    }

    /// Walks the fill distribution on by one message.
    fn place_one(&mut self) {
        let s = self.s;
        match self.hashing {
            Hashing::Colliding => {
                let sf = s as f64;
                for _ in 0..self.k {
                    // One position: a clear bit with probability (s - x)/s.
                    let top = (self.hi + 1).min(s);
                    for x in (self.lo..=top).rev() {
                        let stay = self.dist[x] * x as f64 / sf;
                        let up = if x > 0 {
                            self.dist[x - 1] * (s - x + 1) as f64 / sf
                        } else {
                            0.0
                        };
                        self.dist[x] = stay + up;
                    }
                    self.hi = top;
                    self.trim();
                }
            }
            Hashing::NonColliding => {
                let k = self.k;
                let mut next = vec![0.0; s + 1];
                for x in self.lo..=self.hi {
                    let p = self.dist[x];
                    if p == 0.0 {
                        continue;
                    }
                    for d in 0..=k.min(s - x) {
                        next[x + d] += p * self.hyper[x * (k + 1) + d];
                    }
                }
                self.dist = next;
                self.hi = (self.hi + k).min(s);
                self.trim();
            }
        }
    }

    /// Drops negligible mass at the support's two edges.
    fn trim(&mut self) {
        while self.lo < self.hi && self.dist[self.lo] < NEGLIGIBLE {
            self.dist[self.lo] = 0.0;
            self.lo += 1;
        }
        while self.hi > self.lo && self.dist[self.hi] < NEGLIGIBLE {
            self.dist[self.hi] = 0.0;
            self.hi -= 1;
        }
    }
}

/// The shape the blocked model sees: `(s, B, c)`, bits a block, blocks
/// (as a real number: `m / s`) and the fraction of a block's clear bits a
/// message leaves clear; `None` with one block (then the layout is 004's).
fn shape(m: u64, k: u32, hashing: Hashing) -> Option<(usize, f64, f64)> {
    let s = BIT_BLOCK_BITS as u64;
    if m / s < 2 {
        return None;
    }
    let sf = s as f64;
    let c = match hashing {
        Hashing::Colliding => (1.0 - 1.0 / sf).powi(k as i32),
        Hashing::NonColliding => 1.0 - f64::from(k) / sf,
    };
    Some((s as usize, m as f64 / sf, c))
}

/// `lambda*`, messages a block at which (R2) reaches the fill `x`.
fn lambda_at_fill(x: f64, c: f64) -> f64 {
    -(-x).ln_1p() / (1.0 - c)
}

/// (R1): the rate at which a new message is a false positive after `n`
/// messages into a phase of `m` bits with `k` positions (blocked layout;
/// 004's `(i/m)^k`, at the expected fill, with one block).
pub fn blocked_fpr_after(m: u64, k: u32, hashing: Hashing, n: f64) -> f64 {
    match shape(m, k, hashing) {
        Some((s, blocks, _)) => {
            let mut occ = BlockOccupancy::new(s, k as usize, hashing);
            rho_b(&mut occ, n / blocks)
        }
        None => {
            let x = 1.0 - (1.0 - 1.0 / m.max(1) as f64).powf(n * f64::from(k));
            x.powi(k as i32)
        }
    }
}

/// (R1) at `lambda` messages a block.
fn rho_b(occ: &mut BlockOccupancy, lambda: f64) -> f64 {
    super::blocked::poisson_mixture(lambda, 0, &mut |l| occ.q(l))
}

/// (R3): the one-phase average over a cycle of `lambda*` messages a block.
fn f1_over_cycle(occ: &mut BlockOccupancy, lambda: f64) -> f64 {
    if lambda.is_nan() || lambda <= 0.0 {
        return 0.0;
    }
    // Poisson(lambda)'s mass lies in `first..=last` (beyond 12 standard
    // deviations and 40 either side it is below 1e-30); below `first`,
    // P(Poisson > l) is 1. The probabilities in the window come by the
    // recurrence from the mode, one exponential in all.
    let spread = 12.0 * lambda.sqrt() + 40.0;
    let first = (lambda - spread).max(0.0).floor() as u64;
    let last = (lambda + spread).ceil() as u64;
    let mode = (lambda.floor() as u64).clamp(first, last);
    let width = usize::try_from(last - first)
        .unwrap_or(usize::MAX)
        .min(1 << 24);
    let mut pmf = vec![0.0f64; width + 1];
    let at_mode = (mode as f64 * lambda.ln() - lambda - ln_factorial(mode)).exp();
    let m = (mode - first) as usize;
    if let Some(p) = pmf.get_mut(m) {
        *p = at_mode;
    }
    for i in m + 1..=width {
        pmf[i] = pmf[i - 1] * lambda / (first + i as u64) as f64;
    }
    for i in (0..m).rev() {
        pmf[i] = pmf[i + 1] * (first + i as u64 + 1) as f64 / lambda;
    }
    let mut sum: f64 = (0..first).map(|l| occ.q(l)).sum();
    let mut cdf = 0.0f64;
    for (i, &p) in pmf.iter().enumerate() {
        cdf += p;
        // P(Poisson(lambda) > l).
        let above = (1.0 - cdf).max(0.0);
        if above == 0.0 {
            break;
        }
        sum += occ.q(first + i as u64) * above;
    }
    (sum / lambda).clamp(0.0, 1.0)
}

/// The blocked layout's rates for one sigma: (R3) or (R4), and `E[N]`.
fn rates_at(
    occ: &mut BlockOccupancy,
    blocks: f64,
    c: f64,
    fill: f64,
    two_phase: bool,
) -> (f64, f64) {
    let lambda = lambda_at_fill(fill, c);
    let f1 = f1_over_cycle(occ, lambda);
    let rate = if two_phase {
        super::recycling::either_phase(f1, rho_b(occ, lambda))
    } else {
        f1
    };
    (rate, lambda * blocks)
}

/// The long-term average false-positive rate of a sigma-bounded filter of
/// `m` bits a phase in the blocked layout, one-phase (R3) or two-phase
/// (R4); with one block, 004's chain ([`recycling::average_fpr`]).
pub fn blocked_average_fpr(
    m: u64,
    k: u32,
    sigma: u64,
    hashing: Hashing,
    retaining: bool,
    two_phase: bool,
) -> Result<f64, RecyclingModelError> {
    blocked_rates(m, k, sigma, hashing, retaining, two_phase).map(|(rate, _)| rate)
}

/// [`blocked_average_fpr`] and the expected new messages a cycle.
pub fn blocked_rates(
    m: u64,
    k: u32,
    sigma: u64,
    hashing: Hashing,
    retaining: bool,
    two_phase: bool,
) -> Result<(f64, f64), RecyclingModelError> {
    let Some((s, blocks, c)) = shape(m, k, hashing) else {
        let model = recycling::RecyclingModel::new(m, k, sigma, hashing, retaining)?;
        let rate = if two_phase {
            model.two_phase_fpr()
        } else {
            model.one_phase_fpr()
        };
        return Ok((rate, model.expected_messages()));
    };
    recycling::check_shape(m, k, sigma, retaining)?;
    let mut occ = BlockOccupancy::new(s, k as usize, hashing);
    Ok(rates_at(
        &mut occ,
        blocks,
        c,
        sigma as f64 / m as f64,
        two_phase,
    ))
}

/// Sizing in the blocked layout: the largest sigma whose average rate, (R3)
/// or (R4), is at most `target`, for a phase of `m` bits; `None` when no
/// sigma reaches it. With one block, 004's sizing
/// ([`recycling::sigma_for_target`]).
///
/// The rate only rises with sigma ((R1) rises with the load, and a larger
/// sigma averages it further out), so the fill is bisected.
///
/// ```
/// use flowsieve::model::blocked_recycling::{blocked_average_fpr, blocked_sigma_for_target};
/// use flowsieve::model::recycling::Hashing;
/// let s = blocked_sigma_for_target(1 << 20, 4, Hashing::Colliding, false, false, 0.01).unwrap();
/// let at = blocked_average_fpr(1 << 20, 4, s.sigma, Hashing::Colliding, false, false).unwrap();
/// let above = blocked_average_fpr(1 << 20, 4, s.sigma + 1, Hashing::Colliding, false, false).unwrap();
/// assert!(at <= 0.01 && above > 0.01);
/// ```
pub fn blocked_sigma_for_target(
    m: u64,
    k: u32,
    hashing: Hashing,
    retaining: bool,
    two_phase: bool,
    target: f64,
) -> Option<SigmaSizing> {
    let Some((s, blocks, c)) = shape(m, k, hashing) else {
        return recycling::sigma_for_target(m, k, hashing, retaining, two_phase, target);
    };
    let lo = if retaining { u64::from(k) } else { 0 };
    if k == 0 || lo >= m || target.is_nan() || target < 0.0 {
        return None;
    }
    let mut occ = BlockOccupancy::new(s, k as usize, hashing);
    let mut rate = |sigma: u64| rates_at(&mut occ, blocks, c, sigma as f64 / m as f64, two_phase);
    // Bisect on whole sigmas: `good` within the target, `bad` past it.
    if rate(lo).0 > target {
        return None;
    }
    let (mut good, mut bad) = (lo, m);
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if rate(mid).0 <= target {
            good = mid;
        } else {
            bad = mid;
        }
    }
    let (avg_fpr, expected_messages) = rate(good);
    Some(SigmaSizing {
        sigma: good,
        avg_fpr,
        expected_messages,
        method: SizingMethod::BlockedMixture,
    })
}
