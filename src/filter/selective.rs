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

use super::{BloomFilter, CounterWidth, CountingBloomFilter};
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
#[derive(Clone, Debug)]
pub struct SelectiveBloomFilter {
    filter: BloomFilter,
    expected_n: usize,
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
        SelectiveBloomFilter {
            filter: BloomFilter::new(m, k),
            expected_n: expected_n.max(1),
            alpha,
            selectivity,
            skipped_inserts: 0,
            skipped_queries: 0,
        }
    }

    /// The Theorem 1 threshold for this filter's false-positive rate at the
    /// expected load (`P < fpr / (fpr + alpha)`).
    pub fn threshold(&self) -> f64 {
        let fpr = crate::model::bloom::fpr_partitioned(
            self.filter.m() as u64,
            self.expected_n as u64,
            self.filter.k() as u32,
        );
        paradox::prior_threshold_for_fpr(self.alpha, fpr)
    }

    /// Inserts an element of the given class prior (skipped under selective
    /// insertion when the prior is below the threshold). Returns whether it
    /// was inserted.
    pub fn insert(&mut self, h: u64, prior: f64) -> bool {
        if matches!(self.selectivity, Selectivity::Insertion | Selectivity::Both)
            && prior < self.threshold()
        {
            self.skipped_inserts += 1;
            return false;
        }
        self.filter.insert(h);
        true
    }

    /// Answers a membership query for an element of the given prior.
    pub fn query(&mut self, h: u64, prior: f64) -> bool {
        if matches!(self.selectivity, Selectivity::Query | Selectivity::Both)
            && prior < self.threshold()
        {
            self.skipped_queries += 1;
            return false;
        }
        self.filter.contains(h)
    }

    /// Insertions skipped and queries answered without the filter.
    pub fn skipped(&self) -> (u64, u64) {
        (self.skipped_inserts, self.skipped_queries)
    }

    /// The underlying filter.
    pub fn filter(&self) -> &BloomFilter {
        &self.filter
    }

    /// All bits to 0 (a new window); counters of skipped work are kept.
    pub fn clear(&mut self) {
        self.filter.clear();
    }
}

/// A counting filter answering by the Theorem 2/4 posterior (000 §V).
#[derive(Clone, Debug)]
pub struct SelectiveCountingFilter {
    filter: CountingBloomFilter,
    inserted: u64,
    alpha: f64,
}

impl SelectiveCountingFilter {
    /// `m` counters of `width` bits, `k` hashes, cost ratio `alpha`.
    pub fn new(m: usize, k: usize, width: CounterWidth, alpha: f64) -> SelectiveCountingFilter {
        SelectiveCountingFilter {
            filter: CountingBloomFilter::new(m, k, width),
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
        let product: f64 = self.filter.counters(h).iter().map(|&c| c as f64).product();
        product > 0.0 && product >= min_product
    }

    /// Elements inserted.
    pub fn inserted(&self) -> u64 {
        self.inserted
    }

    /// The underlying filter.
    pub fn filter(&self) -> &CountingBloomFilter {
        &self.filter
    }

    /// All counters to 0 (a new window).
    pub fn clear(&mut self) {
        self.filter.clear();
        self.inserted = 0;
    }
}
