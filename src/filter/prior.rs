//! Per-class a priori membership probabilities (000 §IV-D), estimated by
//! checking a sample of queries against the exact set.
//!
//! - [`PriorSampler`] decides which queries are checked: by the query's
//!   hash (bits independent of the filters' indices), so the choice is
//!   deterministic, costs no random-number state, and a flow is sampled in
//!   a cache window exactly when it is sampled as a query.
//! - [`RoundPriors`] pools the checked queries over rounds into an estimate
//!   with its standard error.

use crate::hash::fmix64;

/// Seed of the sampling decision, so that it is independent of the filters'
/// indices.
const SAMPLE_SEED: u64 = 0x5ab1_e5a3_91e0_d11d;

/// Which queries are checked against the exact set: per class, a fraction
/// fixed for the round, at least `base`, raised so that a class whose last
/// round had `q` queries gets about `min_samples` checks (all of them when
/// `q` is below that). The decision is by hash, so membership of a sampled
/// query is known from the sampled part of the set alone.
///
/// ```
/// use flowsieve::filter::PriorSampler;
/// let mut s = PriorSampler::new(2, 0.01, 100);
/// assert!((0..1000u64).all(|h| s.sampled(0, h)));     // no history: all
/// s.plan(&[10_000, 50]);                               // 1% and all
/// let n = (0..100_000u64).filter(|&h| s.sampled(0, h)).count();
/// assert!((800..1200).contains(&n), "{n}");
/// assert!((0..1000u64).all(|h| s.sampled(1, h)));
/// ```
#[derive(Clone, Debug)]
pub struct PriorSampler {
    base: f64,
    min_samples: u64,
    thresholds: Vec<u64>,
}

impl PriorSampler {
    /// `classes` classes, at least a fraction `base` of each class's
    /// queries, aiming at `min_samples` per class and round; every query is
    /// sampled until [`PriorSampler::plan`] is first called.
    pub fn new(classes: usize, base: f64, min_samples: u64) -> PriorSampler {
        PriorSampler {
            base: base.clamp(0.0, 1.0),
            min_samples,
            thresholds: vec![u64::MAX; classes],
        }
    }

    /// Sets each class's fraction for the next round from the queries the
    /// last round had.
    pub fn plan(&mut self, last_queries: &[u64]) {
        for (t, &q) in self.thresholds.iter_mut().zip(last_queries) {
            let rate = if q == 0 {
                1.0
            } else {
                (self.min_samples as f64 / q as f64).clamp(self.base, 1.0)
            };
            *t = if rate >= 1.0 {
                u64::MAX
            } else {
                (rate * u64::MAX as f64) as u64
            };
        }
    }

    /// Whether the query (or cache entry) with this hash is checked.
    #[inline]
    pub fn sampled(&self, class: usize, h: u64) -> bool {
        self.thresholds
            .get(class)
            .is_some_and(|&t| fmix64(h ^ SAMPLE_SEED) <= t)
    }
}

/// Per-class priors pooled over rounds (the selective stage's estimator).
///
/// Each round contributes its sampled queries `n_r` and the members among
/// them `x_r`; past rounds are kept with weight `keep` per round, so
/// `X = sum keep^age x`, `N = sum keep^age n`. The estimate is the Jeffreys
/// posterior mean
///
/// ```text
/// p = (X + 1/2) / (N + 1),   SE = sqrt(p (1 - p) / (N + 1))
/// ```
///
/// For a stationary prior `P` its bias is `(1/2 - P) / (N + 1)` (towards
/// one half, a third of a standard error at `P = 0.004`, `N = 500`) and its
/// variance `N P (1 - P) / (N + 1)^2`. Unlike a plain mean it never reads
/// 0 on a handful of samples, and unlike the rule of succession its pull
/// towards one half vanishes at the sample sizes that matter for small
/// priors: telling `P = 0.004` from a false-positive rate of `0.0125` takes
/// `N` of a few hundred, which the sampler below guarantees per class and
/// round.
///
/// ```
/// use flowsieve::filter::RoundPriors;
/// let mut p = RoundPriors::new(1, 1.0);
/// assert!(p.estimate(0).is_none());               // no sample yet
/// for i in 0..1000 { p.record(0, i % 250 == 0); } // 4 members in 1000
/// p.end_round();
/// let e = p.estimate(0).unwrap();
/// assert!((e.prior - 4.5 / 1001.0).abs() < 1e-12);
/// assert!(e.se > 0.0015 && e.se < 0.0025);
/// ```
#[derive(Clone, Debug)]
pub struct RoundPriors {
    keep: f64,
    pooled: Vec<(f64, f64)>,
    round: Vec<(u64, u64)>,
}

/// A class prior with its standard error.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PriorEstimate {
    /// The estimate.
    pub prior: f64,
    /// Its standard error.
    pub se: f64,
    /// The effective number of samples behind it.
    pub samples: f64,
}

impl RoundPriors {
    /// `classes` classes; each past round is kept with weight `keep` per
    /// round (1: pool every round equally).
    pub fn new(classes: usize, keep: f64) -> RoundPriors {
        RoundPriors {
            keep: keep.clamp(0.0, 1.0),
            pooled: vec![(0.0, 0.0); classes],
            round: vec![(0, 0); classes],
        }
    }

    /// One sampled query of the current round: was it a member?
    #[inline]
    pub fn record(&mut self, class: usize, member: bool) {
        if let Some(r) = self.round.get_mut(class) {
            r.0 += u64::from(member);
            r.1 += 1;
        }
    }

    /// Folds the current round into the pooled counts.
    pub fn end_round(&mut self) {
        for (p, r) in self.pooled.iter_mut().zip(self.round.iter_mut()) {
            p.0 = self.keep * p.0 + r.0 as f64;
            p.1 = self.keep * p.1 + r.1 as f64;
            *r = (0, 0);
        }
    }

    /// The estimate from the rounds folded so far; `None` without samples.
    pub fn estimate(&self, class: usize) -> Option<PriorEstimate> {
        let &(x, n) = self.pooled.get(class)?;
        Self::jeffreys(x, n)
    }

    /// The estimate from the rounds folded so far and the current round's
    /// samples up to now (the current round at full weight): what a query
    /// in the middle of a round can know.
    ///
    /// ```
    /// use flowsieve::filter::RoundPriors;
    /// let mut p = RoundPriors::new(1, 1.0);
    /// for i in 0..400 { p.record(0, i == 0); }
    /// assert!(p.estimate(0).is_none());             // nothing folded yet
    /// let live = p.estimate_live(0).unwrap();
    /// assert!((live.prior - 1.5 / 401.0).abs() < 1e-12);
    /// ```
    pub fn estimate_live(&self, class: usize) -> Option<PriorEstimate> {
        let &(x, n) = self.pooled.get(class)?;
        let &(rx, rn) = self.round.get(class)?;
        Self::jeffreys(x + rx as f64, n + rn as f64)
    }

    /// Samples of `class` in the current round so far.
    pub fn round_samples(&self, class: usize) -> u64 {
        self.round.get(class).map_or(0, |r| r.1)
    }

    fn jeffreys(x: f64, n: f64) -> Option<PriorEstimate> {
        if n <= 0.0 {
            return None;
        }
        let prior = (x + 0.5) / (n + 1.0);
        Some(PriorEstimate {
            prior,
            se: (prior * (1.0 - prior) / (n + 1.0)).sqrt(),
            samples: n,
        })
    }
}
