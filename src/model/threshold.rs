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

use super::special::{
    binomial_tail, bisect, ln_binomial_tail, ln_factorial, ln_poisson_tail, poisson_tail,
    poisson_tail_from_theta,
};

/// eq. (3)/(4): `P(Poisson(kappa) >= theta)^k` with `kappa = k / (m/n)`.
pub fn fpr_poisson(theta: u64, k: u32, m_over_n: f64) -> f64 {
    if k == 0 || m_over_n.is_nan() || m_over_n <= 0.0 {
        return 1.0;
    }
    poisson_tail(theta, f64::from(k) / m_over_n).powi(k as i32)
}

/// The logarithm of [`fpr_poisson`], also where the rate is below the
/// smallest `f64`: at `theta = 100` and `m/n = 10`, eq. (3) at `k_opt` is
/// about `e^-17,000`, and every `k` near the optimum gives `+0` as a rate.
///
/// ```
/// use flowsieve::model::threshold::{fpr_poisson, ln_fpr_poisson};
/// assert!((ln_fpr_poisson(10, 7, 2.0) - fpr_poisson(10, 7, 2.0).ln()).abs() < 1e-12);
/// assert_eq!(fpr_poisson(100, 212, 10.0), 0.0);
/// assert!(ln_fpr_poisson(100, 212, 10.0).is_finite());
/// ```
pub fn ln_fpr_poisson(theta: u64, k: u32, m_over_n: f64) -> f64 {
    if k == 0 || m_over_n.is_nan() || m_over_n <= 0.0 {
        return 0.0;
    }
    f64::from(k) * ln_poisson_tail(theta, f64::from(k) / m_over_n)
}

/// eq. (2): `(1 - sum_{l<theta} b(l; kn, 1/m))^k`, `m` counters in one
/// array (the paper's layout).
/// The `kn` increments saturate at `2^64 - 1`.
pub fn fpr_binomial(theta: u64, k: u32, n: u64, m: u64) -> f64 {
    if k == 0 || m == 0 {
        return 1.0;
    }
    binomial_tail(theta, u64::from(k).saturating_mul(n), 1.0 / m as f64).powi(k as i32)
}

/// The logarithm of [`fpr_binomial`], also where the rate is below the
/// smallest `f64`; `-infinity` where the rate is 0 (`theta > kn`).
pub fn ln_fpr_binomial(theta: u64, k: u32, n: u64, m: u64) -> f64 {
    if k == 0 || m == 0 {
        return 0.0;
    }
    f64::from(k) * ln_binomial_tail(theta, u64::from(k).saturating_mul(n), 1.0 / m as f64)
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

/// `g(theta, kappa) / T`, where `T = P(Poisson(kappa) >= theta)`: it has
/// the sign of [`g`] at every `kappa > 0` (there `T > 0`), but it is
/// computed without forming `T`, which underflows to zero far from the
/// root. At `theta = 40` and `kappa = 1e-9`, `T` is about `1e-408`; [`g`]
/// then returns 0, and a root search on `g` alone stopped there.
///
/// Below `theta`, write `T = e^{-kappa} kappa^theta / theta! * S` with
/// `S = sum_{j >= 0} kappa^j theta! / (theta + j)!`, whose terms fall by
/// the factor `kappa / (theta + j) < 1`. Then `ln T` is a sum of logs, and
/// the density term of `g` divided by `T` is `theta / S`:
///
/// ```text
/// g / T = ln T + theta / S
/// ```
///
/// From `theta` on, `T` is at least about one half and [`g`]`/ T` is
/// formed directly.
///
/// ```
/// use flowsieve::model::threshold::{g, g_over_tail};
/// // The same sign as g where g is representable, and a sign where it is not.
/// assert!(g(5, 1.0) < 0.0 && g_over_tail(5, 1.0) < 0.0);
/// assert!(g(5, 2.0) > 0.0 && g_over_tail(5, 2.0) > 0.0);
/// assert_eq!(g(40, 1e-9), 0.0);
/// assert!(g_over_tail(40, 1e-9) < 0.0);
/// ```
pub fn g_over_tail(theta: u64, kappa: f64) -> f64 {
    let theta = theta.max(1);
    if kappa.is_nan() {
        return f64::NAN;
    }
    if kappa <= 0.0 {
        // g < 0 on (0, kappa*) (003 Lemma 3), and ln T -> -infinity.
        return f64::NEG_INFINITY;
    }
    let th = theta as f64;
    if kappa >= th {
        return g(theta, kappa) / poisson_tail(theta, kappa);
    }
    let (ln_first, sum) = poisson_tail_from_theta(theta, kappa);
    let ln_tail = ln_first + sum.ln();
    ln_tail + th / sum
}

/// `kappa*(theta)`, the unique root of [`g`] (003 Theorem 1 and Table 1).
///
/// `g < 0` on `(0, kappa*)` and `g > 0` on `(kappa*, infinity)` (Lemmas
/// 3-5), so bisection on `(0, theta + 1]` finds it to machine precision.
/// The bisection runs on [`g_over_tail`], which has `g`'s sign but does not
/// underflow: on `g` itself the search found a false root at its lower end
/// for every `theta` from 35 on, and `k_opt` fell to 1.
pub fn kappa_star(theta: u64) -> f64 {
    let theta = theta.max(1);
    bisect(1e-9, theta as f64 + 1.0, |kappa| g_over_tail(theta, kappa)).unwrap_or(f64::NAN)
}

/// The linear approximation `0.2037 theta + 0.9176` (003 §3.3).
pub fn kappa_star_linear(theta: u64) -> f64 {
    0.2037 * theta as f64 + 0.9176
}

/// `k_opt(theta)` for `m/n` counters per element: the floor or the ceiling
/// of `kappa* m/n` (003 Theorem 1), whichever has the lower rate; at
/// least 1. The two are compared as logarithms ([`ln_fpr_poisson`]): at
/// large `theta` both rates are `+0` as `f64`s, and the floor won every
/// such tie whether or not it was the optimum.
pub fn k_opt(theta: u64, m_over_n: f64) -> u32 {
    let r = kappa_star(theta) * m_over_n;
    let lo = (r.floor().max(1.0)) as u32;
    let hi = (r.ceil().max(1.0)) as u32;
    if ln_fpr_poisson(theta, hi, m_over_n) < ln_fpr_poisson(theta, lo, m_over_n) {
        hi
    } else {
        lo
    }
}

/// Points at which [`fpr_online_partitioned`] samples the window's load
/// when the window holds more insertions than this (the summand is smooth
/// and increasing, so the midpoint rule at 256 points is far inside the
/// binomial standard errors of any measured rate).
pub(crate) const ONLINE_POINTS: u64 = 256;

/// eq. (2) read *online*, for flowsieve's heavy-flow stage: a flow of one
/// packet is reported when its own insertion leaves all `k` of its
/// counters `>= theta`. If `i` insertions came before it in the window,
/// each of its counters is `1 + Binomial(i, k/m)` (partitioned layout, see
/// [`fpr_binomial_partitioned`]), so it is reported with probability
/// `P(Binomial(i, k/m) >= theta - 1)^k`. Averaged over its position
/// `i = 0..n-1` in a window of `n` distinct insertions, this is the rate
/// measured when every packet is its own flow. It stays below the rate of
/// a one-packet flow checked at the window's end, which is eq. (2) with
/// `theta - 1` at load `n - 1`.
///
/// Windows of more than 256 insertions are sampled at 256 evenly spaced
/// loads (midpoints); the summand is smooth and increasing in `i`.
///
/// ```
/// use flowsieve::model::threshold::{fpr_binomial_partitioned, fpr_online_partitioned};
/// let online = fpr_online_partitioned(2, 3, 1000, 4000);
/// assert!(online > 0.0 && online < fpr_binomial_partitioned(1, 3, 999, 4000));
/// ```
pub fn fpr_online_partitioned(theta: u64, k: u32, n: u64, m: u64) -> f64 {
    fpr_online_partitioned_with(theta, k, n, m, &mut OnlineTerms::none())
}

/// [`fpr_online_partitioned`] with its per-load terms remembered in
/// `terms` across calls (a shard's windows): the same value, bit for bit.
/// `terms` must only ever be used with one `(theta, k, m)`.
///
/// ```
/// use flowsieve::model::threshold::{fpr_online_partitioned, fpr_online_partitioned_with, OnlineTerms};
/// let mut terms = OnlineTerms::new();
/// for n in [3000, 3100, 2900, 100] {
///     let with = fpr_online_partitioned_with(10, 11, n, 1 << 19, &mut terms);
///     assert_eq!(with.to_bits(), fpr_online_partitioned(10, 11, n, 1 << 19).to_bits());
/// }
/// ```
pub fn fpr_online_partitioned_with(
    theta: u64,
    k: u32,
    n: u64,
    m: u64,
    terms: &mut OnlineTerms,
) -> f64 {
    if n == 0 {
        return 0.0;
    }
    if theta <= 1 {
        return 1.0;
    }
    if k == 0 || m < u64::from(k) {
        return 1.0;
    }
    let p = 1.0 / (m / u64::from(k)) as f64;
    online_average(n, |i| {
        terms.term(i, |i| binomial_tail(theta - 1, i, p).powi(k as i32))
    })
}

/// The per-load terms of an online model (eq. (2) online, or (B2)),
/// remembered across the windows of one shard.
///
/// Each window close evaluates its model at up to 256 loads, which
/// depend on the window's packet count; windows of similar counts share
/// most of them. On short windows this was most of the heavy stage's
/// model cost (binomial tails, logarithms and exponentials: 7 % of a
/// 1.5 M-packet run's CPU at 3 k packets per shard-window). A term is a
/// pure function of the load for a fixed filter shape, so a remembered
/// value is the value, bit for bit. Loads from the memory's bound up
/// ([`OnlineTerms::for_shards`]) are computed each time: there a window's
/// 256 evaluations are spread over so many packets that they cost little
/// per packet, and the memory stays small (9 bytes a load).
#[derive(Clone, Debug)]
pub struct OnlineTerms {
    values: Vec<f64>,
    known: Vec<bool>,
    max_load: u64,
}

impl Default for OnlineTerms {
    fn default() -> OnlineTerms {
        OnlineTerms::new()
    }
}

impl OnlineTerms {
    /// Loads below this are remembered by one memory.
    pub const MAX_LOAD: u64 = 1 << 14;

    /// Loads remembered by all of a run's shards together, at most: 2^18
    /// loads are 2.25 MiB.
    pub const RUN_LOADS: u64 = 1 << 18;

    /// An empty memory for loads below [`OnlineTerms::MAX_LOAD`].
    pub fn new() -> OnlineTerms {
        OnlineTerms::below(OnlineTerms::MAX_LOAD)
    }

    /// An empty memory for one of `shards` shards: [`OnlineTerms::MAX_LOAD`]
    /// loads each up to 16 shards, then a share of
    /// [`OnlineTerms::RUN_LOADS`] (never below 256, a window's evaluations).
    ///
    /// ```
    /// use flowsieve::model::threshold::OnlineTerms;
    /// assert_eq!(OnlineTerms::for_shards(8).max_load(), 1 << 14);
    /// assert_eq!(OnlineTerms::for_shards(64).max_load(), 1 << 12);
    /// assert_eq!(OnlineTerms::for_shards(65_536).max_load(), 256);
    /// ```
    pub fn for_shards(shards: usize) -> OnlineTerms {
        let share = OnlineTerms::RUN_LOADS / shards.max(1) as u64;
        OnlineTerms::below(share.clamp(256, OnlineTerms::MAX_LOAD))
    }

    fn below(max_load: u64) -> OnlineTerms {
        OnlineTerms {
            values: Vec::new(),
            known: Vec::new(),
            max_load,
        }
    }

    /// Loads from this one up are not remembered.
    pub fn max_load(&self) -> u64 {
        self.max_load
    }

    /// A memory that remembers nothing (one-off evaluations).
    pub fn none() -> OnlineTerms {
        OnlineTerms {
            values: Vec::new(),
            known: Vec::new(),
            max_load: 0,
        }
    }

    /// The term at load `i`: remembered, or `at(i)` (then remembered).
    #[inline]
    pub(crate) fn term(&mut self, i: u64, at: impl FnOnce(u64) -> f64) -> f64 {
        if i >= self.max_load {
            return at(i);
        }
        let slot = i as usize;
        if slot >= self.values.len() {
            self.values.resize(slot + 1, 0.0);
            self.known.resize(slot + 1, false);
        }
        if !self.known[slot] {
            self.values[slot] = at(i);
            self.known[slot] = true;
        }
        self.values[slot]
    }
}

/// The average of `at(i)` over a window's positions `i = 0..n` (`n > 0`):
/// exact up to [`ONLINE_POINTS`] positions, else the midpoint rule at that
/// many evenly spaced loads. Shared by the online models of every layout.
pub(crate) fn online_average(n: u64, at: impl FnMut(u64) -> f64) -> f64 {
    online_points(n).map(at).sum::<f64>() / n.min(ONLINE_POINTS) as f64
}

/// The positions [`online_average`] evaluates: every `i` in `0..n` up to
/// [`ONLINE_POINTS`] of them, else that many evenly spaced midpoints.
pub(crate) fn online_points(n: u64) -> impl Iterator<Item = u64> {
    let step = n as f64 / ONLINE_POINTS as f64;
    let every = n <= ONLINE_POINTS;
    (0..n.min(ONLINE_POINTS)).map(move |j| {
        if every {
            j
        } else {
            ((j as f64 + 0.5) * step) as u64
        }
    })
}

/// Points along the window at which [`fpr_compound_online`] evaluates the
/// other flows' load.
const COMPOUND_POINTS: usize = 32;

/// The compound model for repeated keys: eq. (2)'s counters when the
/// insertions are *packets of flows* rather than distinct elements.
///
/// `sizes[j]` is the number of flows in the window with `j` packets
/// (`sizes[theta]` counts every flow of `theta` packets or more; index 0 is
/// ignored); `m` counters, `k` partitions. A counter of a given flow
/// receives the other flows' packets as a compound Poisson sum: flows land
/// on it at rate `F k / m` (`F` flows in all), each bringing its whole size
/// drawn from `sizes`. A flow of `c < theta` packets is checked at its last
/// packet, taken to fall uniformly in the window, when it holds `c` of its
/// own and a fraction `u` of the others' load; it is reported if all `k`
/// counters reach `theta`:
///
/// `FP(c) = ∫_0^1 P(c + X_u >= theta)^k du`, `X_u ~ CP(u F k / m, sizes)`.
///
/// Returns `FP(c)` for `c = 0..theta` (index 0 is the rate of a flow never
/// inserted). The compound Poisson distribution is computed by Panjer's
/// recursion up to `theta - 1`, over the flow sizes the window has, so the
/// cost is `O(32 theta d)` for `d` distinct sizes below `theta`; `None` for
/// `theta > 4096`. This is an approximation (flows are treated as arriving
/// all at once), offered beside the distinct-element form, not a result of
/// the paper. With every flow of one packet it reduces to the Poisson limit
/// of [`fpr_online_partitioned`].
///
/// ```
/// use flowsieve::model::threshold::{fpr_compound_online, fpr_online_partitioned};
/// // 1000 one-packet flows in 4000 counters, theta = 3, k = 3.
/// let mut sizes = vec![0u64; 4];
/// sizes[1] = 1000;
/// let cp = fpr_compound_online(3, 3, 4000, &sizes).unwrap();
/// let online = fpr_online_partitioned(3, 3, 1000, 4000);
/// assert!((cp[1] - online).abs() / online < 0.05);
/// ```
pub fn fpr_compound_online(theta: u64, k: u32, m: u64, sizes: &[u64]) -> Option<Vec<f64>> {
    if theta > 4096 {
        return None;
    }
    let t = theta as usize;
    if t == 0 {
        return Some(Vec::new());
    }
    if k == 0 || m < u64::from(k) {
        return Some(vec![1.0; t]);
    }
    let flows: u64 = sizes.iter().skip(1).sum();
    let per = (m / u64::from(k)) as f64;
    // Jump distribution f_j = P(size = j) for j < theta; larger jumps only
    // matter as "reached theta", which the prefix sums below never count.
    // Panjer's terms need only the products j f_j, the same at every
    // point, so they are taken once here: `j as f64 * f[j] * g` is
    // `(j as f64 * f[j]) * g`, so the recursion's values do not change by a
    // bit (the `model` tests check it against the per-point form), and the
    // innermost loop loses a conversion and a multiplication per term.
    let mut jf = vec![0.0; t];
    if flows > 0 {
        for (j, jfj) in jf.iter_mut().enumerate().skip(1) {
            let fj = sizes.get(j).copied().unwrap_or(0) as f64 / flows as f64;
            *jfj = j as f64 * fj;
        }
    }
    // The sizes the window has, in increasing order: Panjer's sum takes
    // only their terms. A size with no flow adds `0 * g_{s-j}`, which is
    // +0 (every `g` is a finite probability), to a sum that starts at +0
    // and only grows, and adding +0 changes no bit: the sum over the
    // support is the full sum, bit for bit (the `model` tests check it).
    // Why: a window holds a few dozen distinct flow sizes at most, so at a
    // large theta the full sum was `O(32 theta^2)` work for nothing: 6.1 s
    // for a 150 k-packet trace at theta = 4096 (BENCHMARKS.md,
    // thirty-fourth round).
    // Most sizes present (a busy window at the default theta): the plain
    // loop over all of them, which takes fewer instructions per term.
    let present = jf.iter().skip(1).filter(|&&v| v != 0.0).count();
    let dense = 2 * present >= t;
    let support: Vec<(usize, f64)> = if dense {
        Vec::new()
    } else {
        jf.iter()
            .enumerate()
            .skip(1)
            .filter(|&(_, &v)| v != 0.0)
            .map(|(j, &v)| (j, v))
            .collect()
    };
    let mut out = vec![0.0; t];
    let mut g = vec![0.0; t];
    // Every point overwrites all of it, so one buffer serves them all.
    let mut cdf = vec![0.0; t];
    for point in 0..COMPOUND_POINTS {
        let u = (point as f64 + 0.5) / COMPOUND_POINTS as f64;
        let lambda = u * flows as f64 / per;
        // Panjer: g_0 = e^-λ, g_s = (λ/s) Σ_{j=1..s} j f_j g_{s-j}.
        g[0] = (-lambda).exp();
        // j = 1..=s against g_{s-1} down to g_0, in that order: every size,
        // or (fewer terms, each dearer) the window's own.
        if dense {
            for s in 1..t {
                let mut acc = 0.0;
                for (jfj, gsj) in jf[1..=s].iter().zip(g[..s].iter().rev()) {
                    acc += jfj * gsj;
                }
                g[s] = lambda / s as f64 * acc;
            }
        } else {
            for s in 1..t {
                let mut acc = 0.0;
                for &(j, jfj) in support.iter().take_while(|&&(j, _)| j <= s) {
                    acc += jfj * g[s - j];
                }
                g[s] = lambda / s as f64 * acc;
            }
        }
        // P(X <= x) prefix sums; FP(c) = (1 - P(X <= theta - c - 1))^k.
        let mut below = 0.0;
        for (s, gs) in g.iter().enumerate() {
            below += gs;
            cdf[s] = below.min(1.0);
        }
        for (c, o) in out.iter_mut().enumerate() {
            let need = t - c - 1; // X <= need keeps the counter below theta
            *o += (1.0 - cdf[need]).max(0.0).powi(k as i32);
        }
    }
    for o in &mut out {
        *o /= COMPOUND_POINTS as f64;
    }
    Some(out)
}
