//! Per-class a priori membership probabilities, estimated by sampling
//! (000 §IV-D): a fraction of queries is checked against the exact set, and
//! each class keeps an exponentially weighted moving average of the
//! outcomes.
//!
//! Sampling is decided from the query's hash (bits independent of the
//! filter's indices), so it is deterministic and costs no random-number
//! state. A class with fewer than `min_samples` samples reports the
//! documented default instead of a noisy average.
//!
//! ```
//! use flowsieve::filter::PriorEstimator;
//! let mut p = PriorEstimator::new(2, 1.0, 0.05, 10, 0.5);
//! assert_eq!(p.prior(0), 0.5);               // too few samples: the default
//! for i in 0..100u64 { p.observe(0, i, i % 4 == 0); }
//! assert!((p.prior(0) - 0.25).abs() < 0.1);
//! ```

use crate::hash::fmix64;

/// Sampling plus a per-class exponentially weighted moving average.
#[derive(Clone, Debug)]
pub struct PriorEstimator {
    threshold: u64,
    smoothing: f64,
    min_samples: u64,
    default_prior: f64,
    ewma: Vec<f64>,
    samples: Vec<u64>,
}

/// Seed of the sampling decision, so it is independent of filter indices.
const SAMPLE_SEED: u64 = 0x5ab1_e5a3_91e0_d11d;

impl PriorEstimator {
    /// `classes` classes; sample a `fraction` of queries; EWMA weight
    /// `smoothing` per sample (0 < smoothing <= 1); below `min_samples` a
    /// class reports `default_prior`.
    pub fn new(
        classes: usize,
        fraction: f64,
        smoothing: f64,
        min_samples: u64,
        default_prior: f64,
    ) -> PriorEstimator {
        let fraction = fraction.clamp(0.0, 1.0);
        PriorEstimator {
            threshold: if fraction >= 1.0 {
                u64::MAX
            } else {
                (fraction * u64::MAX as f64) as u64
            },
            smoothing: smoothing.clamp(1e-9, 1.0),
            min_samples,
            default_prior: default_prior.clamp(0.0, 1.0),
            ewma: vec![0.0; classes],
            samples: vec![0; classes],
        }
    }

    /// Whether the query with this hash is sampled (checked against the
    /// exact set).
    #[inline]
    pub fn sampled(&self, h: u64) -> bool {
        fmix64(h ^ SAMPLE_SEED) <= self.threshold
    }

    /// Records a checked query: was its element in the set? Queries that are
    /// not [`PriorEstimator::sampled`] are ignored. Returns whether it was
    /// used.
    pub fn observe(&mut self, class: usize, h: u64, member: bool) -> bool {
        if !self.sampled(h) || class >= self.ewma.len() {
            return false;
        }
        let x = if member { 1.0 } else { 0.0 };
        let n = self.samples[class];
        // The first samples average exactly (weight 1/n) until the weight
        // falls to the smoothing factor, so early estimates are not biased
        // towards the initial 0.
        let w = (1.0 / (n + 1) as f64).max(self.smoothing);
        self.ewma[class] += w * (x - self.ewma[class]);
        self.samples[class] = n + 1;
        true
    }

    /// The class prior: the moving average, or the default below
    /// `min_samples`.
    pub fn prior(&self, class: usize) -> f64 {
        match self.samples.get(class) {
            Some(&n) if n >= self.min_samples => self.ewma[class],
            _ => self.default_prior,
        }
    }

    /// The class prior by the rule of succession over the moving average:
    /// `(ewma n + 1) / (n + 2)` with `n` the samples the average spans
    /// (at most `1 / smoothing`), or the default below `min_samples`.
    ///
    /// A plain average of a few samples can read 0 for a class whose prior
    /// is merely small, and a selective filter would then skip its members
    /// (false negatives) on no real evidence; this estimate only falls
    /// below `1/n` once `n` samples support it.
    ///
    /// ```
    /// use flowsieve::filter::PriorEstimator;
    /// let mut p = PriorEstimator::new(1, 1.0, 0.01, 5, 0.5);
    /// for i in 0..10u64 { p.observe(0, i, false); }
    /// assert_eq!(p.prior(0), 0.0);
    /// assert!((p.prior_smoothed(0) - 1.0 / 12.0).abs() < 1e-12);
    /// ```
    pub fn prior_smoothed(&self, class: usize) -> f64 {
        match self.samples.get(class) {
            Some(&n) if n >= self.min_samples => {
                let span = (n as f64).min(1.0 / self.smoothing);
                (self.ewma[class] * span + 1.0) / (span + 2.0)
            }
            _ => self.default_prior,
        }
    }

    /// Samples taken for a class.
    pub fn samples(&self, class: usize) -> u64 {
        self.samples.get(class).copied().unwrap_or(0)
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.ewma.len()
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
