//! Count thresholding in the cache-line-blocked counting filter
//! ([`crate::filter::BlockedCountingFilter`]): a derivation in the manner of
//! Putze, Sanders and Singler's analysis of blocked Bloom filters
//! ("Cache-, hash- and space-efficient Bloom filters", 2007, §3), extended
//! from "all `k` bits set" to "all `k` counters `>= theta`" (003's
//! question). It is flowsieve's own result, not a paper's; the tests check
//! it against simulation.
//!
//! # Derivation
//!
//! `B` blocks of `c` counters; a key takes one block and one counter in
//! each of the block's `k` sub-blocks of `s = floor(c / k)` counters. After
//! `n` distinct insertions a key's block holds `L ~ Binomial(n, 1/B)` other
//! keys, which for `B` in the thousands is `Poisson(lambda)`, `lambda =
//! n/B` (as Putze et al. take it). Given `L = l`, each of those keys lands
//! on the key's counter in sub-block `j` with probability `1/s`,
//! independently of the other sub-blocks, so the `k` counters are
//! independent `Binomial(l, 1/s)` given `l`, and
//!
//! ```text
//! FP(theta) = sum_l Poisson(l; n/B) * P(Binomial(l, 1/s) >= theta)^k        (B1)
//! ```
//!
//! against 003's `P(Binomial(n, k/m) >= theta)^k` for independent
//! partitions (eq. (2), partitioned). The mixture is what costs accuracy:
//! the block's load varies, and `x -> P(...)^k` is convex where it matters,
//! so the blocked rate is higher at the same `m`, `k` and `n`.
//!
//! Read online as the heavy stage uses the filter (a key is reported when
//! its own insertion leaves every counter `>= theta`; see
//! [`super::threshold::fpr_online_partitioned`]), a key arriving after `i`
//! others needs `theta - 1` from them:
//!
//! ```text
//! FP_online(theta) = (1/n) sum_{i<n} sum_l Poisson(l; i/B) P(Binomial(l, 1/s) >= theta - 1)^k   (B2)
//! ```
//!
//! with the same 256-point midpoint rule over `i` as the partitioned form.
//!
//! ```
//! use flowsieve::model::{blocked, threshold};
//! // 2^16 counters of 8 bits (1024 blocks of 64), k = 4, theta = 3.
//! let b = blocked::fpr_blocked(3, 4, 20_000, 1024, 64);
//! let p = threshold::fpr_binomial_partitioned(3, 4, 20_000, 1 << 16);
//! assert!(b > p); // the block load's variance costs accuracy
//! ```

use super::special::{binomial_tail, ln_factorial};
use super::threshold::OnlineTerms;

/// `sum_l Poisson(l; lambda) * tail(l)` for a `tail` that is 0 below
/// `from` and at most 1, summed outward from the Poisson mode so that
/// neither a huge nor a tiny `lambda` underflows the starting term.
pub(super) fn poisson_mixture(lambda: f64, from: u64, tail: &mut dyn FnMut(u64) -> f64) -> f64 {
    if lambda.is_nan() || lambda <= 0.0 {
        return if from == 0 { tail(0) } else { 0.0 };
    }
    let ln_pmf = |l: u64| l as f64 * lambda.ln() - lambda - ln_factorial(l);
    let start = (lambda.floor() as u64).max(from);
    let mut sum = 0.0;
    // Upward from the start (the terms fall once past the mode).
    let mut p = ln_pmf(start).exp();
    let mut l = start;
    loop {
        let t = p * tail(l);
        sum += t;
        if (p < 1e-18 && l as f64 > lambda) || l > start + 1_000_000 {
            break;
        }
        l += 1;
        p *= lambda / l as f64;
    }
    // Downward to `from`.
    let mut p = ln_pmf(start).exp();
    let mut l = start;
    while l > from {
        p *= l as f64 / lambda;
        l -= 1;
        sum += p * tail(l);
        if p < 1e-18 {
            break;
        }
    }
    sum.min(1.0)
}

/// `P(Binomial(l, 1/s) >= theta)^k`, memoised by `l` for one `(theta, s, k)`.
struct TailPow {
    theta: u64,
    p: f64,
    k: i32,
    memo: Vec<f64>,
}

impl TailPow {
    fn new(theta: u64, sub: u64, k: u32) -> TailPow {
        TailPow {
            theta,
            p: 1.0 / sub.max(1) as f64,
            k: k as i32,
            memo: Vec::new(),
        }
    }

    fn at(&mut self, l: u64) -> f64 {
        let Ok(i) = usize::try_from(l) else {
            return binomial_tail(self.theta, l, self.p).powi(self.k);
        };
        if i < 1 << 16 {
            while self.memo.len() <= i {
                let next = self.memo.len() as u64;
                self.memo
                    .push(binomial_tail(self.theta, next, self.p).powi(self.k));
            }
            return self.memo[i];
        }
        binomial_tail(self.theta, l, self.p).powi(self.k)
    }
}

/// The sub-block length `floor(per_block / k)`, or `None` when `k` is 0
/// or larger than a block.
fn sub_block(k: u32, per_block: u64) -> Option<u64> {
    (k > 0 && u64::from(k) <= per_block).then(|| per_block / u64::from(k))
}

/// (B1): the rate at which a key never inserted has all `k` counters `>=
/// theta` after `n` distinct insertions into `blocks` blocks of
/// `per_block` counters.
pub fn fpr_blocked(theta: u64, k: u32, n: u64, blocks: u64, per_block: u64) -> f64 {
    let Some(sub) = sub_block(k, per_block) else {
        return 1.0;
    };
    if theta == 0 {
        return 1.0;
    }
    let mut tail = TailPow::new(theta, sub, k);
    poisson_mixture(n as f64 / blocks.max(1) as f64, theta, &mut |l| tail.at(l))
}

/// (B2): the online rate, averaged over a window of `n` distinct
/// insertions, at which a one-packet key is reported at its own insertion.
pub fn fpr_blocked_online(theta: u64, k: u32, n: u64, blocks: u64, per_block: u64) -> f64 {
    fpr_blocked_online_with(theta, k, n, blocks, per_block, &mut OnlineTerms::none())
}

/// [`fpr_blocked_online`] with its per-load terms remembered in `terms`
/// across calls (a shard's windows): the same value, bit for bit. `terms`
/// must only ever be used with one `(theta, k, blocks, per_block)`.
pub fn fpr_blocked_online_with(
    theta: u64,
    k: u32,
    n: u64,
    blocks: u64,
    per_block: u64,
    terms: &mut OnlineTerms,
) -> f64 {
    if n == 0 {
        return 0.0;
    }
    if theta <= 1 {
        return 1.0;
    }
    let Some(sub) = sub_block(k, per_block) else {
        return 1.0;
    };
    let b = blocks.max(1) as f64;
    let mut tail = TailPow::new(theta - 1, sub, k);
    super::threshold::online_average(n, |i| {
        terms.term(i, |i| {
            poisson_mixture(i as f64 / b, theta - 1, &mut |l| tail.at(l))
        })
    })
}

/// The `k` in `1..=max_k` (and at most a block's counters) that minimises
/// (B1) at `n` insertions: the blocked layout's counterpart of 003's
/// `k_opt`. Ties go to the smaller `k` (fewer counters touched).
pub fn k_opt_blocked(theta: u64, n: u64, blocks: u64, per_block: u64, max_k: u32) -> u32 {
    let top = max_k.min(per_block.min(u64::from(u32::MAX)) as u32).max(1);
    let mut best = (1, f64::INFINITY);
    for k in 1..=top {
        let f = fpr_blocked(theta, k, n, blocks, per_block);
        if f < best.1 {
            best = (k, f);
        }
    }
    best.0
}
