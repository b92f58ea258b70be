//! Selective filters (000): filters that take the a priori membership
//! probability of an element's class into account, because a positive
//! answer for an element of low prior is more likely a false positive than
//! a member (the Bloom paradox).
//!
//! - [`SelectiveBloomFilter`] (000 §IV-C): *selective insertion* does not
//!   insert elements whose prior is below the Theorem 1 threshold;
//!   *selective query* answers negative for them without asking the filter.
//! - [`SelectiveCountingFilter`] (000 §V): answers by the Theorem 2
//!   posterior from the product of the element's counters against
//!   `1/(alpha+1)` (Theorem 4), i.e. a minimal counter product.
//!
//! Both trade false positives for false negatives: a skipped member is a
//! false negative by design, worth it when `alpha` (the cost of a false
//! negative relative to a false positive) is small enough.
//!
//! ```
//! use flowsieve::filter::{Selectivity, SelectiveBloomFilter};
//! // 10 bits per element: the Theorem 1 threshold at alpha = 1 is ~8e-3.
//! let mut f = SelectiveBloomFilter::new(10_000, 7, 1000, 1.0, Selectivity::Query);
//! f.insert(7, 0.5);
//! assert!(f.query(7, 0.5));        // a likely member: ask the filter
//! assert!(!f.query(7, 1e-4));      // a prior below the threshold: no
//! ```

use super::{BloomFilter, CounterWidth, Counters, CountingBloomFilter, Membership};
use crate::model::paradox;

/// Where a Selective Bloom filter uses the priors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selectivity {
    /// Neither: a plain Bloom filter.
    None,
    /// Skip low-prior elements at insertion.
    Insertion,
    /// Answer negative for low-prior elements without querying.
    Query,
    /// Both.
    Both,
}

/// A Bloom filter with Selective insertion and/or query (000 §IV-C).
///
/// The Theorem 1 threshold depends on the filter's false-positive rate at
/// its expected load, computed once at construction
/// ([`Membership::model_fpr`]: 001's for the partitioned filter, (B1) at
/// theta = 1 for the blocked one), and on the cost ratio `alpha`: the filter's own
/// `alpha` for [`SelectiveBloomFilter::insert`] and
/// [`SelectiveBloomFilter::query`], or a caller's per-class or swept one
/// for the `*_for` methods.
///
/// It works over any [`Membership`] filter (a [`BloomFilter`] by default;
/// a counting filter's plain answer is a Bloom filter's of as many bits).
#[derive(Clone, Debug)]
pub struct SelectiveBloomFilter<F: Membership = BloomFilter> {
    filter: F,
    fpr: f64,
    alpha: f64,
    selectivity: Selectivity,
    skipped_inserts: u64,
    skipped_queries: u64,
}

impl SelectiveBloomFilter {
    /// A filter of `m` bits and `k` hashes, expecting about `expected_n`
    /// insertions (for the threshold's bits per element), with cost ratio
    /// `alpha = W_FN / W_FP`.
    pub fn new(
        m: usize,
        k: usize,
        expected_n: usize,
        alpha: f64,
        selectivity: Selectivity,
    ) -> SelectiveBloomFilter {
        SelectiveBloomFilter::over(BloomFilter::new(m, k), expected_n, alpha, selectivity)
    }
}

impl<F: Membership> SelectiveBloomFilter<F> {
    /// Selective answers over an empty `filter`, expecting about
    /// `expected_n` insertions, with cost ratio `alpha`.
    pub fn over(
        filter: F,
        expected_n: usize,
        alpha: f64,
        selectivity: Selectivity,
    ) -> SelectiveBloomFilter<F> {
        let fpr = filter.model_fpr(expected_n.max(1) as u64);
        SelectiveBloomFilter {
            filter,
            fpr,
            alpha,
            selectivity,
            skipped_inserts: 0,
            skipped_queries: 0,
        }
    }

    /// The Theorem 1 threshold for this filter's false-positive rate at the
    /// expected load (`P < fpr / (fpr + alpha)`).
    pub fn threshold(&self) -> f64 {
        self.threshold_for(self.alpha)
    }

    /// The Theorem 1 threshold for another cost ratio.
    pub fn threshold_for(&self, alpha: f64) -> f64 {
        paradox::prior_threshold_for_fpr(alpha, self.fpr)
    }

    /// The model false-positive rate at the expected load.
    pub fn fpr(&self) -> f64 {
        self.fpr
    }

    /// Inserts an element of the given class prior (skipped under selective
    /// insertion when the prior is below the threshold). Returns whether it
    /// was inserted.
    pub fn insert(&mut self, h: u64, prior: f64) -> bool {
        self.insert_for(h, prior, self.alpha)
    }

    /// [`SelectiveBloomFilter::insert`] with the element's own cost ratio.
    pub fn insert_for(&mut self, h: u64, prior: f64, alpha: f64) -> bool {
        if matches!(self.selectivity, Selectivity::Insertion | Selectivity::Both)
            && prior < self.threshold_for(alpha)
        {
            self.skipped_inserts += 1;
            return false;
        }
        self.filter.insert(h);
        true
    }

    /// Answers a membership query for an element of the given prior.
    pub fn query(&mut self, h: u64, prior: f64) -> bool {
        let a = self.answer(h, prior, self.alpha);
        self.skipped_queries += u64::from(a.skipped);
        a.positive
    }

    /// The answer to a query for an element of the given prior and cost
    /// ratio, without counting it; a skipped query never asks the filter.
    pub fn answer(&self, h: u64, prior: f64, alpha: f64) -> SelectiveAnswer {
        if self.skips(prior, self.threshold_for(alpha)) {
            return SelectiveAnswer {
                positive: false,
                skipped: true,
            };
        }
        SelectiveAnswer {
            positive: self.filter.contains(h),
            skipped: false,
        }
    }

    /// Whether a query of this prior is answered negative without asking,
    /// given the threshold (from [`SelectiveBloomFilter::threshold_for`]):
    /// the decision a caller that already holds the filter's plain answer
    /// combines with it.
    #[inline]
    pub fn skips(&self, prior: f64, threshold: f64) -> bool {
        matches!(self.selectivity, Selectivity::Query | Selectivity::Both) && prior < threshold
    }

    /// Insertions skipped and queries answered without the filter.
    pub fn skipped(&self) -> (u64, u64) {
        (self.skipped_inserts, self.skipped_queries)
    }

    /// The underlying filter.
    pub fn filter(&self) -> &F {
        &self.filter
    }

    /// All bits to 0 (a new window); counters of skipped work are kept.
    pub fn clear(&mut self) {
        self.filter.clear();
    }
}

/// A selective filter's answer to one query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectiveAnswer {
    /// Answered positive.
    pub positive: bool,
    /// Answered negative without asking the filter (selective query).
    pub skipped: bool,
}

/// A counting filter answering by the Theorem 2/4 posterior (000 §V),
/// over any filter with [`Counters`] (a [`CountingBloomFilter`] by
/// default).
#[derive(Clone, Debug)]
pub struct SelectiveCountingFilter<F: Counters + Membership = CountingBloomFilter> {
    filter: F,
    inserted: u64,
    alpha: f64,
}

impl SelectiveCountingFilter {
    /// `m` counters of `width` bits, `k` hashes, cost ratio `alpha`.
    pub fn new(m: usize, k: usize, width: CounterWidth, alpha: f64) -> SelectiveCountingFilter {
        SelectiveCountingFilter::over(CountingBloomFilter::new(m, k, width), alpha)
    }
}

impl<F: Counters + Membership> SelectiveCountingFilter<F> {
    /// Posterior answers over an empty `filter`, with cost ratio `alpha`.
    pub fn over(filter: F, alpha: f64) -> SelectiveCountingFilter<F> {
        SelectiveCountingFilter {
            filter,
            inserted: 0,
            alpha,
        }
    }

    /// Inserts an element (every element: the posterior uses `n`).
    pub fn insert(&mut self, h: u64) {
        self.filter.insert(h);
        self.inserted += 1;
    }

    /// The Theorem 2 posterior for an element of the given prior.
    pub fn posterior(&self, h: u64, prior: f64) -> f64 {
        paradox::cbf_posterior(
            &self.filter.counters(h),
            prior,
            self.filter.m() as u64,
            self.inserted.max(1),
        )
    }

    /// The natural log of the product of the element's `k` counters
    /// (`-inf` when one is 0): what the posterior and the product
    /// threshold depend on.
    pub fn ln_counter_product(&self, h: u64) -> f64 {
        self.filter.ln_counter_product(h)
    }

    /// The Theorem 2 posterior from a [`Self::ln_counter_product`] (0 for
    /// an element with a zero counter), so that one probe serves several
    /// priors and cost ratios.
    pub fn posterior_from_ln_product(&self, ln_product: f64, prior: f64) -> f64 {
        self.posterior_with_prior_logs(ln_product, paradox::PriorLogs::new(prior))
    }

    /// [`Self::posterior_from_ln_product`] with the prior's logarithms
    /// taken before ([`paradox::PriorLogs`]): the same number.
    pub fn posterior_with_prior_logs(&self, ln_product: f64, prior: paradox::PriorLogs) -> f64 {
        if !ln_product.is_finite() {
            return 0.0;
        }
        paradox::posterior_with_prior_logs(
            ln_product,
            self.filter.k() as u32,
            prior,
            self.filter.m() as u64,
            self.inserted.max(1),
        )
    }

    /// The Theorem 4 decision for another cost ratio, from a
    /// [`Self::ln_counter_product`].
    pub fn decide_for(&self, ln_product: f64, prior: f64, alpha: f64) -> bool {
        self.decide_with_prior_logs(ln_product, paradox::PriorLogs::new(prior), alpha)
    }

    /// [`Self::decide_for`] with the prior's logarithms taken before.
    pub fn decide_with_prior_logs(
        &self,
        ln_product: f64,
        prior: paradox::PriorLogs,
        alpha: f64,
    ) -> bool {
        ln_product.is_finite()
            && paradox::decide(self.posterior_with_prior_logs(ln_product, prior), alpha)
    }

    /// The fixed counter-product rule from a [`Self::ln_counter_product`]:
    /// positive iff the product reaches `min_product`.
    pub fn product_reaches(ln_product: f64, min_product: f64) -> bool {
        Self::reaches_ln_bound(ln_product, Self::ln_product_bound(min_product))
    }

    /// The bound in log space that [`Self::product_reaches`] compares a
    /// log-product with for `min_product` (with a `1e-9` allowance for the
    /// rounding of the sum of logarithms). A caller that asks about one
    /// threshold many times computes it once: the same number, so the
    /// same answers, without a logarithm per query.
    pub fn ln_product_bound(min_product: f64) -> f64 {
        min_product.ln() - 1e-9
    }

    /// [`Self::product_reaches`] against a bound from
    /// [`Self::ln_product_bound`].
    ///
    /// ```
    /// use flowsieve::filter::{CountingBloomFilter, SelectiveCountingFilter};
    /// type F = SelectiveCountingFilter<CountingBloomFilter>;
    /// let bound = F::ln_product_bound(12.0);
    /// for ln in [f64::NEG_INFINITY, 2.0, 12f64.ln(), 3.0] {
    ///     assert_eq!(F::reaches_ln_bound(ln, bound), F::product_reaches(ln, 12.0));
    /// }
    /// assert!(F::reaches_ln_bound(12f64.ln(), bound));
    /// assert!(!F::reaches_ln_bound(11f64.ln(), bound));
    /// ```
    pub fn reaches_ln_bound(ln_product: f64, bound: f64) -> bool {
        ln_product.is_finite() && ln_product >= bound
    }

    /// The Theorem 4 decision: positive iff the posterior reaches
    /// `1/(alpha+1)`, i.e. the counter product reaches
    /// [`paradox::min_counter_product`].
    pub fn query(&self, h: u64, prior: f64) -> bool {
        paradox::decide(self.posterior(h, prior), self.alpha)
    }

    /// Answers with a fixed counter-product threshold instead (the sweep
    /// of 000 Fig. 9(a)): positive iff the product of the counters is at
    /// least `min_product`.
    pub fn query_with_product(&self, h: u64, min_product: f64) -> bool {
        Self::product_reaches(self.ln_counter_product(h), min_product)
    }

    /// Elements inserted.
    pub fn inserted(&self) -> u64 {
        self.inserted
    }

    /// The underlying filter.
    pub fn filter(&self) -> &F {
        &self.filter
    }

    /// All counters to 0 (a new window).
    pub fn clear(&mut self) {
        self.filter.clear();
        self.inserted = 0;
    }
}
