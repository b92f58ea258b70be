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

use super::special::{binomial_tail, ln_add, ln_binomial_tail, ln_factorial};
use super::threshold::OnlineTerms;

/// `sum_l Poisson(l; lambda) * tail(l)` for a `tail` that is 0 below
/// `from` and at most 1, summed outward from the Poisson mode so that
/// neither a huge nor a tiny `lambda` underflows the starting term.
///
/// Each direction stops when the Poisson weight, which bounds every later
/// term there, is below `1e-17` of the sum so far (or is `+0`). It used to
/// stop at a weight below `1e-18` outright, which at a large `theta` cut
/// off the very terms the sum is made of: at `theta = 40`, 4 counters per
/// key and `k = 7` it answered `1.7e-175` for a rate of `3e-131`.
pub(super) fn poisson_mixture(lambda: f64, from: u64, tail: &mut dyn FnMut(u64) -> f64) -> f64 {
    if lambda.is_nan() || lambda <= 0.0 {
        return if from == 0 { tail(0) } else { 0.0 };
    }
    let ln_pmf = |l: u64| l as f64 * lambda.ln() - lambda - ln_factorial(l);
    let start = (lambda.floor() as u64).max(from);
    // A bound on the walk up. It was a million loads; at a lambda of 10^11
    // (`model threshold --blocked` near n = 2^64) that is 3 standard
    // deviations, and the sum of weights near 1 came out 0.998. 64
    // deviations leave out a weight below e^-2000; the stop on `sum`'s
    // last bit below ends the walk long before.
    let last = start.saturating_add((64.0 * lambda.sqrt()).max(1e6) as u64);
    let mut sum = 0.0;
    // Upward from the start (the terms fall once past the mode).
    let mut p = ln_pmf(start).exp();
    let mut l = start;
    loop {
        let t = p * tail(l);
        sum += t;
        // Past the mode the weights fall geometrically (by lambda / l), so
        // the rest is below p / (1 - lambda / l) and negligible.
        if (l as f64 > 2.0 * lambda && (p < sum * 1e-17 || p == 0.0)) || l > last {
            break;
        }
        // Past the mode every later term is at most its weight, which is
        // at most this one's: once that is below half the gap from `sum`
        // to the next `f64` up, adding any of them leaves `sum` as it is,
        // bit for bit, so the loop can stop without changing the answer.
        // The rule above waits for a load of twice lambda; at a lambda of
        // 10^5 (2 million keys in 16 blocks) that walked 10^5 loads past
        // weights of +0, a tail each, for each of the online form's 256
        // points: five seconds of a run's report.
        //
        // `sum * 2^-54` is below that half gap (`sum < 2^(e+1)` and the gap
        // is `2^(e-52)`) and exact. It is only formed where `sum` is far in
        // the normal range: a product or difference of subnormals costs a
        // microcode assist of a hundred cycles or more, and with `sum` at
        // 0 (tails of 0 at small loads) the half gap is subnormal. Asked
        // that way at every load, it doubled a run with 20 windows.
        if l as f64 > lambda && sum > 1e-290 && p < sum * HALF_ULP_BELOW {
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
        // Below the mode the weights fall as l does, and so do the tails.
        if p < sum * 1e-17 || p == 0.0 {
            break;
        }
    }
    sum.min(1.0)
}

/// `2^-54`: `x * HALF_ULP_BELOW` is below half the gap from a normal `x`
/// to the next `f64` up.
const HALF_ULP_BELOW: f64 = 1.0 / (1u64 << 54) as f64;

/// `P(Binomial(l, 1/s) >= theta)^k`, memoised by `l` for one `(theta, s, k)`.
struct TailPow {
    theta: u64,
    p: f64,
    k: i32,
    memo: Vec<f64>,
}

/// How many loads [`TailPow`] remembers (8 bytes each, grown only as far
/// as a mixture reaches): the online form asks for the same loads at each
/// of its 256 points.
const TAIL_MEMO_LOADS: usize = 1 << 20;

impl TailPow {
    fn new(theta: u64, sub: u64, k: u32) -> TailPow {
        TailPow {
            theta,
            p: 1.0 / sub.max(1) as f64,
            k: k as i32,
            memo: Vec::new(),
        }
    }

    /// Whether `binomial_tail(theta, l, p)` is exactly `1.0`, known
    /// without summing its head: where `theta` is 10 standard deviations
    /// (of a Poisson count, `sqrt(mu)`) below the mean `mu = l p`,
    /// Chernoff's bound `P(X <= (1 - d) mu) <= e^(-d^2 mu / 2)`, with `d
    /// sqrt(mu) = 10`, puts the head below `e^-50` (2·10^-22). Its terms
    /// are computed from logarithms accurate to far better than 10^-6, so
    /// their computed sum is below 3·10^-22 too, far below `2^-54`
    /// (5.6·10^-17); `1 - head` then rounds to `1.0`, and so does its
    /// `k`-th power: the value the sum would give, bit for bit. At a load
    /// of 10^5 and more the head is `theta` logarithms and exponentials a
    /// load, and it was most of a report's time with an overloaded
    /// `--layout blocked` filter.
    fn certainly_one(&self, l: u64) -> bool {
        let mean = l as f64 * self.p;
        mean - self.theta as f64 >= 10.0 * mean.sqrt()
    }

    fn at(&mut self, l: u64) -> f64 {
        match usize::try_from(l) {
            Ok(i) if i < TAIL_MEMO_LOADS => {
                // Only the loads asked for are computed (NaN marks the
                // rest; a tail is never NaN): a mixture around a load of
                // 64,000 asks for a few thousand, not the 64,000 below.
                if self.memo.len() <= i {
                    self.memo.resize(i + 1, f64::NAN);
                }
                if self.memo[i].is_nan() {
                    self.memo[i] = self.computed(l);
                }
                self.memo[i]
            }
            _ => self.computed(l),
        }
    }

    /// The tail at `l`, without the memo.
    fn computed(&self, l: u64) -> f64 {
        if self.certainly_one(l) {
            1.0
        } else {
            binomial_tail(self.theta, l, self.p).powi(self.k)
        }
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

/// `ln` of (B1), [`fpr_blocked`]'s logarithm, also where the rate is below
/// the smallest `f64`. Past `theta` of about 50 at a few counters per key,
/// (B1) is `+0` for every `k`, and a search for the best `k` on the rate
/// itself compared zeros; on the logarithm it compares the rates.
///
/// The mixture is summed in logarithms. Its terms are concave in the load
/// `l` (log Poisson weights are; the tail `P(Bin(l, p) >= theta)` is the
/// distribution function of a negative binomial waiting time, whose
/// weights are log-concave, and so is it), so from the larger of `theta`
/// and the Poisson mode they rise to one peak and fall. The peak is found
/// by a ternary search, both edges where the terms are 50 below it by
/// binary searches, and the loads between them are summed with the tail
/// carried from one to the next; below the mode, loads down to `theta`
/// are added until a term is 50 below the peak. Each term left out is
/// below `e^-50` of the sum, and they fall away geometrically.
///
/// ```
/// use flowsieve::model::blocked::{fpr_blocked, ln_fpr_blocked};
/// let f = fpr_blocked(3, 4, 20_000, 1024, 64);
/// assert!((ln_fpr_blocked(3, 4, 20_000, 1024, 64) - f.ln()).abs() < 1e-9 * f.ln().abs());
/// assert_eq!(fpr_blocked(100, 4, 1_000_000, 62_500, 64), 0.0);
/// assert!(ln_fpr_blocked(100, 4, 1_000_000, 62_500, 64).is_finite());
/// ```
pub fn ln_fpr_blocked(theta: u64, k: u32, n: u64, blocks: u64, per_block: u64) -> f64 {
    let Some(sub) = sub_block(k, per_block) else {
        return 0.0;
    };
    if theta == 0 {
        return 0.0;
    }
    let p = 1.0 / sub.max(1) as f64;
    let kf = f64::from(k);
    let ln_tail_pow = |l: u64| kf * ln_binomial_tail(theta, l, p);
    let lambda = n as f64 / blocks.max(1) as f64;
    if lambda.is_nan() || lambda <= 0.0 {
        // No load: every counter is 0, below any theta >= 1.
        return f64::NEG_INFINITY;
    }
    // A load so large that even 40 standard deviations below it (where the
    // Poisson weight is below e^-800) a counter's count is 40 of its own
    // deviations above theta: every term that counts has a tail of 1 to
    // within e^-800, and the weights sum to 1, so the rate is 1. Walking
    // the mixture there would take sqrt(lambda) steps, which at a
    // --cbf-load near 2^64 never ended.
    let l_low = lambda - 40.0 * lambda.sqrt();
    if l_low * p - theta as f64 >= 40.0 * (l_low * p).sqrt() {
        return 0.0;
    }
    let ln_pmf = |l: u64| l as f64 * lambda.ln() - lambda - ln_factorial(l);
    let start = (lambda.floor() as u64).max(theta);
    let term = |l: u64| ln_pmf(l) + ln_tail_pow(l);
    // Upward from `start` the terms rise to one peak and fall (the log of
    // the Poisson weight and of the binomial tail are both concave in l).
    // At a theta in the thousands the rise is tens of thousands of loads
    // long, and walking it made the heavy stage's start-up take half a
    // second; so the peak is found by a ternary search, and the sum walks
    // only the loads within MIXTURE_SPAN of it. `hi` is past the peak: no
    // term beyond a load whose weight is MIXTURE_SPAN below the start's
    // term can matter (a term is at most its weight).
    let floor = term(start) - MIXTURE_SPAN;
    let mut step = 1u64;
    while ln_pmf(start + step) >= floor && step < 1 << 40 {
        step *= 2;
    }
    let top = start + step;
    let (mut lo, mut hi) = (start, top);
    while hi - lo > 2 {
        let m1 = lo + (hi - lo) / 3;
        let m2 = hi - (hi - lo) / 3;
        if term(m1) < term(m2) {
            lo = m1 + 1;
        } else {
            hi = m2;
        }
    }
    let peak = (lo..=hi)
        .max_by(|a, b| term(*a).total_cmp(&term(*b)))
        .unwrap_or(start);
    let mut best = term(peak);
    // Down from the peak to where the terms are MIXTURE_SPAN below it: the
    // terms rise up to the peak, so a binary search finds the first load
    // within the span.
    let (mut left, mut right) = (start, peak);
    while left < right {
        let mid = left + (right - left) / 2;
        if term(mid) >= best - MIXTURE_SPAN {
            right = mid;
        } else {
            left = mid + 1;
        }
    }
    // The right edge: the last load within MIXTURE_SPAN of the peak.
    let (mut r_lo, mut r_hi) = (peak, top);
    while r_lo < r_hi {
        let mid = r_lo + (r_hi - r_lo).div_ceil(2);
        if term(mid) >= best - MIXTURE_SPAN {
            r_lo = mid;
        } else {
            r_hi = mid - 1;
        }
    }
    // Up from there, the tail carried from one load to the next:
    // P(Bin(l + 1, p) >= theta) = P(Bin(l, p) >= theta) + p P(Bin(l, p) =
    // theta - 1).
    let (lp, lq) = (p.ln(), (-p).ln_1p());
    let mut ln_tail = ln_binomial_tail(theta, left, p);
    let mut sum = f64::NEG_INFINITY;
    // To the right edge only: past it the terms keep falling (they are
    // log-concave), and the Poisson weight alone, which bounds them, can
    // stay far above them for tens of thousands of loads when the tail is
    // tiny.
    for l in left..=r_lo {
        let t = ln_pmf(l) + kf * ln_tail;
        sum = ln_add(sum, t);
        best = best.max(t);
        ln_tail = if p >= 1.0 {
            0.0
        } else {
            let j = theta - 1;
            let ln_at = ln_factorial(l) - ln_factorial(j) - ln_factorial(l - j)
                + j as f64 * lp
                + (l - j) as f64 * lq;
            ln_add(ln_tail, lp + ln_at).min(0.0)
        };
    }
    // Below the mode (when it is above theta), down to theta: the weights
    // and the tails both fall as the load does.
    let mut l = start;
    while l > theta {
        l -= 1;
        let t = ln_pmf(l) + ln_tail_pow(l);
        sum = ln_add(sum, t);
        if t < best - MIXTURE_SPAN {
            break;
        }
        best = best.max(t);
    }
    sum.min(0.0)
}

/// How far below the largest term [`ln_fpr_blocked`] stops adding: `e^-50`
/// is about `2e-22`, far below an `f64`'s precision relative to the sum.
const MIXTURE_SPAN: f64 = 50.0;

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

/// `ln` of (B2), [`fpr_blocked_online`]'s logarithm, also where the rate
/// is below the smallest `f64`: the same positions of the window averaged,
/// each load's term (B1) at `theta - 1` from [`ln_fpr_blocked`], added as
/// logarithms. Each term costs a search rather than a memoised tail, so
/// this is for answers (`flowsieve model threshold --blocked`), not for a
/// shard's every window.
///
/// ```
/// use flowsieve::model::blocked::{fpr_blocked_online, ln_fpr_blocked_online};
/// let f = fpr_blocked_online(3, 4, 20_000, 1024, 64);
/// assert!((ln_fpr_blocked_online(3, 4, 20_000, 1024, 64) - f.ln()).abs() < 1e-9 * f.ln().abs());
/// assert_eq!(fpr_blocked_online(100, 8, 1000, 156, 64), 0.0);
/// assert!(ln_fpr_blocked_online(100, 8, 1000, 156, 64).is_finite());
/// ```
pub fn ln_fpr_blocked_online(theta: u64, k: u32, n: u64, blocks: u64, per_block: u64) -> f64 {
    if n == 0 {
        return f64::NEG_INFINITY;
    }
    if theta <= 1 || sub_block(k, per_block).is_none() {
        return 0.0;
    }
    let ln_sum = super::threshold::online_points(n)
        .map(|i| ln_fpr_blocked(theta - 1, k, i, blocks, per_block))
        .fold(f64::NEG_INFINITY, ln_add);
    ln_sum - (n.min(super::threshold::ONLINE_POINTS) as f64).ln()
}

/// The `k` in `1..=max_k` (and at most a block's counters) that minimises
/// (B1) at `n` insertions: the blocked layout's counterpart of 003's
/// `k_opt`. Ties go to the smaller `k` (fewer counters touched). The rates
/// are compared as logarithms ([`ln_fpr_blocked`]): past `theta` of about
/// 50 they are all `+0` as `f64`s, and the comparison of the rates
/// themselves answered whichever `k` underflowed first.
pub fn k_opt_blocked(theta: u64, n: u64, blocks: u64, per_block: u64, max_k: u32) -> u32 {
    let top = max_k.min(per_block.min(u64::from(u32::MAX)) as u32).max(1);
    let mut best = (1, f64::INFINITY);
    for k in 1..=top {
        let f = ln_fpr_blocked(theta, k, n, blocks, per_block);
        if f < best.1 {
            best = (k, f);
        }
    }
    best.0
}

/// (B1) at `theta = 1` for a Bloom filter of `bits_per_element` bits per
/// inserted key in 512-bit blocks ([`crate::filter::BlockedBloomFilter`]):
/// a key never inserted finds its bit set in each of its `k` sub-blocks.
/// It depends on the load only through `lambda = 512 / bits_per_element`
/// keys a block, as 001's `fpr_approx` depends on `m/n` alone.
///
/// ```
/// use flowsieve::model::{blocked, bloom};
/// // 10 bits per element, k = 7: the block's load variance costs accuracy.
/// let b = blocked::fpr_bloom_blocked(10.0, 7);
/// assert!(b > bloom::fpr_approx(10.0, 7) && b < 2.0 * bloom::fpr_approx(10.0, 7));
/// ```
pub fn fpr_bloom_blocked(bits_per_element: f64, k: u32) -> f64 {
    if bits_per_element.is_nan() || bits_per_element <= 0.0 {
        return 1.0;
    }
    fpr_bloom_blocked_at_load(crate::filter::BIT_BLOCK_BITS as f64 / bits_per_element, k)
}

/// [`fpr_bloom_blocked`] at `lambda` keys a 512-bit block: (B1) at
/// `theta = 1`, whose tail has the closed form `P(Binomial(l, 1/s) >= 1)^k
/// = (1 - (1 - 1/s)^l)^k` for sub-blocks of `s = floor(512 / k)` bits, the
/// same values as `fpr_blocked(1, k, n, blocks, 512)` at `n / blocks =
/// lambda` up to rounding, without its per-load binomial tails.
///
/// ```
/// use flowsieve::model::blocked;
/// let (n, blocks) = (6_554u64, 128u64);
/// let closed = blocked::fpr_bloom_blocked_at_load(n as f64 / blocks as f64, 7);
/// let general = blocked::fpr_blocked(1, 7, n, blocks, 512);
/// assert!((closed - general).abs() < 1e-12 * general);
/// ```
pub fn fpr_bloom_blocked_at_load(lambda: f64, k: u32) -> f64 {
    const BLOCK: u64 = crate::filter::BIT_BLOCK_BITS as u64;
    let Some(sub) = sub_block(k, BLOCK) else {
        return 1.0;
    };
    let clear = 1.0 - 1.0 / sub as f64;
    let kk = k as i32;
    poisson_mixture(lambda, 1, &mut |l| {
        let l = i32::try_from(l).unwrap_or(i32::MAX);
        (1.0 - clear.powi(l)).powi(kk)
    })
}

/// The blocked counterpart of [`super::paradox::min_bits_per_element`]
/// (000 Fig. 2(b)): the fewest bits per element at which an element of
/// prior `P` escapes the paradox (`fpr (1 - P) <= alpha P`), with the
/// directory's default `k = bpe ln 2` and [`fpr_bloom_blocked`] as its
/// rate; 0 if it never falls in it. Bisected over `[0.1, max_bpe]` bits
/// per element, so at most `max_bpe`.
///
/// ```
/// use flowsieve::model::{blocked, paradox};
/// // A prior of 1 %, alpha 1: the blocked directory needs more bits.
/// let b = blocked::min_bits_per_element_bloom_blocked(1.0, 0.01, 1e4);
/// let p = paradox::min_bits_per_element(1.0, 0.01);
/// assert!(b > p && b < 1.5 * p);
/// assert_eq!(blocked::min_bits_per_element_bloom_blocked(1.0, 0.6, 1e4), 0.0);
/// ```
pub fn min_bits_per_element_bloom_blocked(alpha: f64, prior: f64, max_bpe: f64) -> f64 {
    if !(prior > 0.0 && alpha > 0.0 && max_bpe > 0.1) {
        return max_bpe.max(0.0);
    }
    let target = alpha * prior / (1.0 - prior);
    if target >= 1.0 {
        return 0.0;
    }
    let escapes = |bpe: f64| {
        let k = super::bloom::optimal_k(bpe).clamp(1, 32);
        fpr_bloom_blocked(bpe, k) <= target
    };
    let (mut lo, mut hi) = (0.1, max_bpe);
    if escapes(lo) {
        return lo;
    }
    if !escapes(hi) {
        return hi;
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if escapes(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}
