//! Simulation estimates with their standard errors.

/// A simulated value and its standard error.
///
/// ```
/// use flowsieve::reproduce::Measured;
/// let m = Measured::from_replicates(&[0.10, 0.12, 0.11, 0.09]);
/// assert!((m.mean - 0.105).abs() < 1e-12);
/// assert!(m.agrees_with(0.11) && !m.agrees_with(0.2));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// The estimate.
    pub mean: f64,
    /// Its standard error.
    pub se: f64,
}

impl Measured {
    /// The mean of independent replicates and its standard error.
    pub fn from_replicates(xs: &[f64]) -> Measured {
        let n = xs.len() as f64;
        if xs.is_empty() {
            return Measured {
                mean: f64::NAN,
                se: f64::NAN,
            };
        }
        let mean = xs.iter().sum::<f64>() / n;
        let var = if xs.len() > 1 {
            xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        Measured {
            mean,
            se: (var / n).sqrt(),
        }
    }

    /// A rate from `hits` of `trials` in `replicates` independent filters:
    /// the standard error is the larger of the replicates' own and the
    /// binomial one. With few replicates the sample spread can come out
    /// small by chance; the binomial term is a floor that keeps a 3 SE
    /// verdict honest.
    pub fn rate(per_replicate: &[(u64, u64)]) -> Measured {
        let rates: Vec<f64> = per_replicate
            .iter()
            .map(|&(h, t)| if t == 0 { 0.0 } else { h as f64 / t as f64 })
            .collect();
        let m = Measured::from_replicates(&rates);
        let (hits, trials) = per_replicate
            .iter()
            .fold((0u64, 0u64), |a, &(h, t)| (a.0 + h, a.1 + t));
        if trials == 0 {
            return m;
        }
        let p = hits as f64 / trials as f64;
        // At p = 0 the binomial SE is 0; use the rule of three's scale
        // (one event in the trials) so that a zero count is not "exact".
        let p_floor = p.max(1.0 / trials as f64);
        let binomial = (p_floor * (1.0 - p_floor) / trials as f64).sqrt();
        Measured {
            mean: p,
            se: m.se.max(binomial),
        }
    }

    /// The mean of independent replicates that each carry their own
    /// sampling error: the standard error is the replicates' spread, or the
    /// mean sampling error over `sqrt(replicates)` when that is larger (the
    /// same floor as [`Measured::rate`]).
    ///
    /// ```
    /// use flowsieve::reproduce::Measured;
    /// let same = Measured { mean: 10.0, se: 2.0 };
    /// let m = Measured::pooled(&[same, same, same, same]);
    /// assert_eq!((m.mean, m.se), (10.0, 1.0));
    /// ```
    pub fn pooled(replicates: &[Measured]) -> Measured {
        let means: Vec<f64> = replicates.iter().map(|r| r.mean).collect();
        let m = Measured::from_replicates(&means);
        let r = replicates.len().max(1) as f64;
        let sampling = replicates.iter().map(|x| x.se).sum::<f64>() / r / r.sqrt();
        Measured {
            mean: m.mean,
            se: m.se.max(sampling),
        }
    }

    /// Scaled by a constant (a rate times a population).
    pub fn scale(self, by: f64) -> Measured {
        Measured {
            mean: self.mean * by,
            se: self.se * by.abs(),
        }
    }

    /// The sum of independent estimates.
    pub fn sum(parts: impl IntoIterator<Item = Measured>) -> Measured {
        let (mut mean, mut var) = (0.0, 0.0);
        for p in parts {
            mean += p.mean;
            var += p.se * p.se;
        }
        Measured {
            mean,
            se: var.sqrt(),
        }
    }

    /// How many standard errors `model` is from the estimate (0 when both
    /// are equal, infinite for a difference with no error).
    pub fn z(&self, model: f64) -> f64 {
        let d = self.mean - model;
        // Replicates that all counted the same leave no spread to judge
        // by; such a value is exact to its counts, so a relative
        // difference of 1e-3 is agreement.
        if d.abs() <= 1e-12 * model.abs()
            || (self.se == 0.0 && d.abs() <= 1e-3 * model.abs() + 1e-9)
        {
            0.0
        } else if self.se > 0.0 {
            d / self.se
        } else {
            f64::INFINITY.copysign(d)
        }
    }

    /// Within 3 standard errors of `model` (or equal, up to rounding).
    pub fn agrees_with(&self, model: f64) -> bool {
        self.z(model).abs() <= 3.0 || (self.mean - model).abs() <= 1e-12 * model.abs().max(1e-300)
    }
}
