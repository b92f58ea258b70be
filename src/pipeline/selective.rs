//! Stage 3: selective query against a flow-cache directory (000).
//!
//! The stream is cut into rounds, each a *cache window* followed by a longer
//! *query window* (000 §VIII-C: insert the flows of a short interval, query
//! the distinct flows of a longer later one). The cache window's distinct
//! flows form the set `S`; when the query window opens, each shard builds
//! its directory filter over its part of `S`, sized at `bpe` bits (or
//! counters) per element. Every distinct flow of the query window (or every
//! packet, with [`QueryUnit::Packet`]) is then a query, answered by each
//! variant:
//!
//! - **plain**: the filter's answer;
//! - **selective-query** (000 §IV-C): negative without asking when the
//!   class prior is below the Theorem 1 threshold `fpr / (fpr + alpha)`;
//! - **selective-insertion**: a second filter that left out, at insertion,
//!   the flows whose class prior (as estimated up to the end of the
//!   previous round) was below the threshold;
//! - **both**;
//! - **posterior** (counting directory only): the Theorem 2 posterior from
//!   the product of the `k` counters, positive iff it reaches
//!   `1/(alpha+1)` (Theorem 4).
//!
//! A false positive (a non-member answered positive) costs 1 and a false
//! negative (a member answered negative) costs the class's `alpha`.
//!
//! Class priors `Pr(x in S)` are estimated as 000 §IV-D suggests: a sampled
//! fraction of queries (chosen by hash, so deterministically) is checked
//! against the exact set, and each class keeps an exponentially weighted
//! moving average ([`PriorEstimator`], read by the rule of succession
//! so that a few samples cannot drive a prior to 0); a class with too few samples uses the
//! default prior, 0.5 unless configured, which never falls below a
//! threshold, so such a class is answered as by the plain filter. Each
//! shard estimates from its own queries, so the estimates do not depend on
//! the number of threads.
//!
//! The exact set `S` is part of the system being simulated (a flow cache
//! holds its flows; the directory summarises it), so this stage scores its
//! answers with or without `--truth`. Its memory is bounded by the distinct
//! flows of one cache window and one query window, not by the trace.
//!
//! Sweeps re-run the decision on the same queries with other parameters:
//! `alpha` (cost against alpha), `k` and the counter-product threshold (the
//! false-positive/false-negative trade-off of 000 Fig. 9), and `bpe` (cost
//! against bits per element). Each extra `(bpe, k)` is its own filter built
//! over the same `S`.

use super::keyed::{HashMap, HashSet};
use super::record::PacketRecord;
use super::window::WindowSpec;
use crate::class::ClassId;
use crate::filter::{BloomFilter, CounterWidth, CountingBloomFilter, PriorEstimator};
use crate::model::{bloom, paradox};

/// The directory's filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectoryKind {
    /// A Bloom filter of `bpe` bits per element.
    Bloom,
    /// A counting filter of `bpe` 8-bit counters per element (its plain
    /// answer equals a Bloom filter's of `bpe` bits per element).
    Counting,
}

/// What a query is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryUnit {
    /// Each distinct flow of the query window, once.
    Flow,
    /// Every packet of the query window.
    Packet,
}

/// The values a sweep runs over (empty: no sweep).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sweeps {
    pub alpha: Vec<f64>,
    pub k: Vec<usize>,
    pub bpe: Vec<f64>,
    /// Counter-product thresholds (000 §V-C): positive iff the product of
    /// the `k` counters reaches the threshold.
    pub product: Vec<f64>,
}

/// Stage 3's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectiveConfig {
    pub cache_window: WindowSpec,
    /// Longer than the cache window, on the same axis.
    pub query_window: WindowSpec,
    pub directory: DirectoryKind,
    /// Bits (or counters) per element of `S`.
    pub bpe: f64,
    /// Hash functions; `None`: the optimum `bpe ln 2` (001).
    pub k: Option<usize>,
    pub query_unit: QueryUnit,
    /// Fraction of queries checked against the exact set for the priors.
    pub prior_sample: f64,
    /// EWMA weight of each sample.
    pub prior_smoothing: f64,
    /// Samples a class needs before its estimate is used.
    pub prior_min_samples: u64,
    /// The prior of a class with too few samples.
    pub prior_default: f64,
    /// Cost of a false negative relative to a false positive, per class.
    pub alpha: Vec<f64>,
    pub sweeps: Sweeps,
}

impl SelectiveConfig {
    /// The main directory's `k`.
    pub fn main_k(&self) -> usize {
        self.k_for(self.bpe)
    }

    fn k_for(&self, bpe: f64) -> usize {
        self.k
            .unwrap_or_else(|| bloom::optimal_k(bpe) as usize)
            .clamp(1, crate::filter::MAX_K)
    }

    fn alpha_of(&self, class: usize) -> f64 {
        self.alpha.get(class).copied().unwrap_or(1.0)
    }
}

/// How an evaluator answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    /// The filter's answer.
    Plain,
    /// Selective query: skip low-prior classes.
    SelectiveQuery,
    /// The selective-insertion filter's answer.
    SelectiveInsertion,
    /// Selective query on the selective-insertion filter.
    Both,
    /// The Theorem 2/4 posterior of the counting filter.
    Posterior,
    /// Positive iff the counter product reaches this.
    Product(f64),
}

/// One way of answering the queries, evaluated on all of them.
#[derive(Clone, Debug, PartialEq)]
pub struct EvaluatorSpec {
    /// The variant's name (`plain`, `selective-query`, ...).
    pub variant: &'static str,
    pub rule: Rule,
    /// The sweep it belongs to (`None`: a main variant).
    pub sweep: Option<&'static str>,
    /// The swept value.
    pub value: f64,
    /// Its directory's bits per element and hash count.
    pub bpe: f64,
    pub k: usize,
    /// `alpha` for every class, overriding the per-class values.
    pub alpha: Option<f64>,
    directory: usize,
}

/// A directory shape.
#[derive(Clone, Copy, Debug, PartialEq)]
struct DirectoryShape {
    bpe: f64,
    k: usize,
    counting: bool,
    selective_insertion: bool,
}

/// The evaluators and directory shapes of a configuration (the same for
/// every shard).
#[derive(Clone, Debug)]
pub struct Plan {
    shapes: Vec<DirectoryShape>,
    /// Every evaluator, main variants first.
    pub evaluators: Vec<EvaluatorSpec>,
}

impl Plan {
    /// Lays out the directories and evaluators for a configuration.
    pub fn new(cfg: &SelectiveConfig) -> Plan {
        let counting = cfg.directory == DirectoryKind::Counting;
        let main_k = cfg.main_k();
        let mut shapes = vec![DirectoryShape {
            bpe: cfg.bpe,
            k: main_k,
            counting: counting || !cfg.sweeps.product.is_empty(),
            selective_insertion: true,
        }];
        let shape = |bpe: f64, k: usize, with_counts: bool, shapes: &mut Vec<DirectoryShape>| {
            if let Some(i) = shapes.iter().position(|s| s.bpe == bpe && s.k == k) {
                shapes[i].counting |= with_counts;
                return i;
            }
            shapes.push(DirectoryShape {
                bpe,
                k,
                counting: with_counts,
                selective_insertion: false,
            });
            shapes.len() - 1
        };
        let mut ev = Vec::new();
        let spec = |variant, rule, sweep, value, d: usize, alpha, shapes: &[DirectoryShape]| {
            EvaluatorSpec {
                variant,
                rule,
                sweep,
                value,
                bpe: shapes[d].bpe,
                k: shapes[d].k,
                alpha,
                directory: d,
            }
        };
        ev.push(spec("plain", Rule::Plain, None, 0.0, 0, None, &shapes));
        ev.push(spec(
            "selective-query",
            Rule::SelectiveQuery,
            None,
            0.0,
            0,
            None,
            &shapes,
        ));
        ev.push(spec(
            "selective-insertion",
            Rule::SelectiveInsertion,
            None,
            0.0,
            0,
            None,
            &shapes,
        ));
        ev.push(spec("both", Rule::Both, None, 0.0, 0, None, &shapes));
        if counting {
            ev.push(spec(
                "posterior",
                Rule::Posterior,
                None,
                0.0,
                0,
                None,
                &shapes,
            ));
        }
        // Every sweep point answers with the plain filter, Selective query
        // and, for a counting directory, the posterior.
        let sweep_point = |ev: &mut Vec<EvaluatorSpec>,
                           sweep: &'static str,
                           value: f64,
                           d: usize,
                           alpha: Option<f64>,
                           shapes: &[DirectoryShape]| {
            ev.push(spec(
                "plain",
                Rule::Plain,
                Some(sweep),
                value,
                d,
                alpha,
                shapes,
            ));
            ev.push(spec(
                "selective-query",
                Rule::SelectiveQuery,
                Some(sweep),
                value,
                d,
                alpha,
                shapes,
            ));
            if counting {
                ev.push(spec(
                    "posterior",
                    Rule::Posterior,
                    Some(sweep),
                    value,
                    d,
                    alpha,
                    shapes,
                ));
            }
        };
        for &a in &cfg.sweeps.alpha {
            sweep_point(&mut ev, "alpha", a, 0, Some(a), &shapes);
        }
        let mut k_dirs = vec![0];
        for &k in &cfg.sweeps.k {
            let k = k.clamp(1, crate::filter::MAX_K);
            let d = shape(
                cfg.bpe,
                k,
                counting || !cfg.sweeps.product.is_empty(),
                &mut shapes,
            );
            if !k_dirs.contains(&d) {
                k_dirs.push(d);
            }
            sweep_point(&mut ev, "k", k as f64, d, None, &shapes);
        }
        for &b in &cfg.sweeps.bpe {
            let d = shape(b, cfg.k_for(b), counting, &mut shapes);
            sweep_point(&mut ev, "bpe", b, d, None, &shapes);
        }
        for &d in &k_dirs {
            for &t in &cfg.sweeps.product {
                ev.push(spec(
                    "product",
                    Rule::Product(t),
                    Some("product"),
                    t,
                    d,
                    None,
                    &shapes,
                ));
            }
        }
        Plan {
            shapes,
            evaluators: ev,
        }
    }
}

/// Per-class counts shared by every evaluator (they answer the same
/// queries).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueryClassTally {
    pub queries: u64,
    /// Queries whose flow was in `S`.
    pub members: u64,
    /// Sum of the prior estimate in force at each query.
    pub prior_sum: f64,
    /// Sampled queries (checked against the exact set for the prior).
    pub sampled: u64,
}

/// One evaluator's errors in one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorTally {
    pub false_positives: u64,
    pub false_negatives: u64,
    /// Queries answered without asking the filter (selective query).
    pub skipped: u64,
}

/// Stage 3's whole tally.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SelectiveTally {
    pub classes: Vec<QueryClassTally>,
    /// `[evaluator][class]`.
    pub errors: Vec<Vec<ErrorTally>>,
    /// Shard-rounds whose directory was built.
    pub directories_built: u64,
    /// Elements of `S` summed over shard-rounds.
    pub set_elements: u64,
    /// Elements left out by selective insertion, over shard-rounds.
    pub insertion_skipped: u64,
}

impl SelectiveTally {
    fn new(classes: usize, evaluators: usize) -> SelectiveTally {
        SelectiveTally {
            classes: vec![QueryClassTally::default(); classes],
            errors: vec![vec![ErrorTally::default(); classes]; evaluators],
            ..SelectiveTally::default()
        }
    }

    /// Adds another shard's tally.
    pub fn add(&mut self, o: &SelectiveTally) {
        if self.classes.is_empty() {
            *self = o.clone();
            return;
        }
        for (a, b) in self.classes.iter_mut().zip(&o.classes) {
            a.queries += b.queries;
            a.members += b.members;
            a.prior_sum += b.prior_sum;
            a.sampled += b.sampled;
        }
        for (ea, eb) in self.errors.iter_mut().zip(&o.errors) {
            for (a, b) in ea.iter_mut().zip(eb) {
                a.false_positives += b.false_positives;
                a.false_negatives += b.false_negatives;
                a.skipped += b.skipped;
            }
        }
        self.directories_built += o.directories_built;
        self.set_elements += o.set_elements;
        self.insertion_skipped += o.insertion_skipped;
    }
}

/// A built directory for one round.
#[derive(Debug)]
struct Directory {
    bloom: BloomFilter,
    selective: Option<BloomFilter>,
    counting: Option<CountingBloomFilter>,
    /// Elements of `S` in this shard.
    n: u64,
    /// The model's false-positive rate of `bloom` at `n` (001).
    fpr: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Cache,
    Query,
}

/// Stage 3 for one shard.
#[derive(Debug)]
pub struct SelectiveShard {
    cfg: SelectiveConfig,
    plan: Plan,
    period: u64,
    state: Option<(u64, Phase)>,
    cache: HashMap<ClassId>,
    queried: HashSet,
    directories: Vec<Directory>,
    /// Per evaluator, per class: the prior below which selective query
    /// skips (this round).
    thresholds: Vec<Vec<f64>>,
    estimator: PriorEstimator,
    tally: SelectiveTally,
    answers: Vec<(bool, bool, f64)>,
}

impl SelectiveShard {
    /// One shard's stage for `classes` classes.
    pub fn new(cfg: &SelectiveConfig, classes: usize) -> SelectiveShard {
        let plan = Plan::new(cfg);
        let evaluators = plan.evaluators.len();
        SelectiveShard {
            period: cfg.cache_window.span() + cfg.query_window.span(),
            estimator: PriorEstimator::new(
                classes,
                cfg.prior_sample,
                cfg.prior_smoothing,
                cfg.prior_min_samples,
                cfg.prior_default,
            ),
            tally: SelectiveTally::new(classes, evaluators),
            thresholds: vec![vec![0.0; classes]; evaluators],
            answers: Vec::with_capacity(plan.shapes.len()),
            plan,
            cfg: cfg.clone(),
            state: None,
            cache: HashMap::default(),
            queried: HashSet::default(),
            directories: Vec::new(),
        }
    }

    /// Handles one packet.
    #[inline]
    pub fn process(&mut self, r: &PacketRecord) {
        let pos = self.cfg.cache_window.position(r.time_ns, r.seq);
        let round = pos / self.period;
        let phase = if pos % self.period < self.cfg.cache_window.span() {
            Phase::Cache
        } else {
            Phase::Query
        };
        if self.state != Some((round, phase)) {
            if self.state.map(|s| s.0) != Some(round) {
                self.cache.clear();
                self.queried.clear();
                self.directories.clear();
            }
            if phase == Phase::Query {
                self.build();
            }
            self.state = Some((round, phase));
        }
        match phase {
            Phase::Cache => {
                self.cache.insert(r.hash, r.class);
            }
            Phase::Query => {
                if self.cfg.query_unit == QueryUnit::Flow && !self.queried.insert(r.hash) {
                    return;
                }
                self.query(r.hash, r.class);
            }
        }
    }

    /// Builds this round's directories over the cache window's flows.
    fn build(&mut self) {
        let n = self.cache.len() as u64;
        let classes = self.estimator.classes();
        let priors: Vec<f64> = (0..classes)
            .map(|c| self.estimator.prior_smoothed(c))
            .collect();
        self.directories.clear();
        let mut skipped = 0;
        for shape in &self.plan.shapes {
            let k = shape.k;
            let m = ((shape.bpe * n as f64).ceil() as usize).max(k);
            let fpr = bloom::fpr_partitioned(m as u64, n, k as u32);
            let mut bloom = BloomFilter::new(m, k);
            let mut selective = shape.selective_insertion.then(|| BloomFilter::new(m, k));
            let mut counting = shape
                .counting
                .then(|| CountingBloomFilter::new(m, k, CounterWidth::W8));
            for (&h, &class) in self.cache.iter() {
                bloom.insert(h);
                if let Some(c) = counting.as_mut() {
                    c.insert(h);
                }
                if let Some(s) = selective.as_mut() {
                    let c = usize::from(class);
                    let thr = paradox::prior_threshold_for_fpr(self.cfg.alpha_of(c), fpr);
                    if priors.get(c).copied().unwrap_or(1.0) < thr {
                        skipped += 1;
                    } else {
                        s.insert(h);
                    }
                }
            }
            self.directories.push(Directory {
                bloom,
                selective,
                counting,
                n,
                fpr,
            });
        }
        for (e, spec) in self.plan.evaluators.iter().enumerate() {
            let fpr = self.directories[spec.directory].fpr;
            for c in 0..classes {
                let alpha = spec.alpha.unwrap_or_else(|| self.cfg.alpha_of(c));
                self.thresholds[e][c] = paradox::prior_threshold_for_fpr(alpha, fpr);
            }
        }
        self.tally.directories_built += 1;
        self.tally.set_elements += n;
        self.tally.insertion_skipped += skipped;
    }

    /// Answers one query with every evaluator.
    fn query(&mut self, h: u64, class: ClassId) {
        let c = usize::from(class);
        if c >= self.tally.classes.len() {
            return;
        }
        let member = self.cache.contains_key(&h);
        let prior = self.estimator.prior_smoothed(c);
        let sampled = self.estimator.observe(c, h, member);
        let t = &mut self.tally.classes[c];
        t.queries += 1;
        t.members += u64::from(member);
        t.prior_sum += prior;
        t.sampled += u64::from(sampled);
        self.answers.clear();
        for d in &self.directories {
            let plain = d.bloom.contains(h);
            let selective = d.selective.as_ref().is_some_and(|s| s.contains(h));
            let ln_product = match d.counting.as_ref() {
                Some(cbf) if plain => cbf.ln_counter_product(h),
                _ => f64::NEG_INFINITY,
            };
            self.answers.push((plain, selective, ln_product));
        }
        for (e, spec) in self.plan.evaluators.iter().enumerate() {
            let d = &self.directories[spec.directory];
            let (plain, selective, ln_product) = self.answers[spec.directory];
            let low_prior = prior < self.thresholds[e][c];
            let (positive, skipped) = match spec.rule {
                Rule::Plain => (plain, false),
                Rule::SelectiveQuery => (plain && !low_prior, low_prior),
                Rule::SelectiveInsertion => (selective, false),
                Rule::Both => (selective && !low_prior, low_prior),
                Rule::Posterior => {
                    let alpha = spec.alpha.unwrap_or_else(|| self.cfg.alpha_of(c));
                    let m = d.counting.as_ref().map_or(1, |f| f.m() as u64);
                    let post = if ln_product.is_finite() {
                        paradox::posterior_from_ln_product(
                            ln_product,
                            spec.k as u32,
                            prior,
                            m,
                            d.n.max(1),
                        )
                    } else {
                        0.0
                    };
                    (
                        paradox::decide(post, alpha) && ln_product.is_finite(),
                        false,
                    )
                }
                Rule::Product(t) => (ln_product.is_finite() && ln_product >= t.ln() - 1e-9, false),
            };
            let err = &mut self.tally.errors[e][c];
            err.false_positives += u64::from(positive && !member);
            err.false_negatives += u64::from(!positive && member);
            err.skipped += u64::from(skipped);
        }
    }

    /// The plan this shard evaluates.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The tally so far.
    pub fn finish(self) -> SelectiveTally {
        self.tally
    }
}
