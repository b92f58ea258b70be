//! The selective-query stage: selective query against a flow-cache directory (000).
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
//! Class priors `Pr(x in S)` are estimated as 000 §IV-D suggests, over all
//! shards: the stage's coordinator (`PriorCoordinator`, on the source
//! thread) checks a sample of each class's queries against the exact set
//! ([`PriorSampler`]: by hash, so a flow is sampled in the cache window
//! exactly when it is sampled as a query; at least `prior_sample` of the
//! queries and about `prior_min_samples` per class and round), pools the
//! rounds ([`RoundPriors`]: a Jeffreys estimate with its standard error)
//! and sends every shard the same priors when a round's query window
//! opens, and again each time a class's samples in the round reach 32, 64,
//! 128, ... (the estimate then includes the round's own earlier queries).
//! Every shard switches at the same record, so the answers are the same
//! whatever the number of threads; a class with no sample yet uses
//! `prior_default` (0.5), which no threshold reaches, so it is answered as
//! by the plain filter.
//!
//! The exact set `S` is part of the system being simulated (a flow cache
//! holds its flows; the directory summarises it), so this stage scores its
//! answers with or without ground truth. Its memory is bounded by the
//! distinct flows of one cache window and one query window, not by the
//! trace.
//!
//! Sweeps re-run the decision on the same queries with other parameters:
//! `alpha` (cost against alpha), `k` and the counter-product threshold (the
//! false-positive/false-negative trade-off of 000 Fig. 9), and `bpe` (cost
//! against bits per element). Each extra `(bpe, k)` is its own filter built
//! over the same `S`.
//!
//! The directories are the library's selective filters: a
//! [`SelectiveBloomFilter`] answering plain and Selective query, a second
//! one built by Selective insertion, and a [`SelectiveCountingFilter`] for
//! the posterior and the counter-product rule.

use super::capped::{Admission, CappedFlowSet};
use super::config::{ConfigError, defaults, in_range};
use super::event::Event;
use super::flow_set::FlowSet;
use super::lookahead::{SampleLookahead, Sampled};
use super::rate::ratio;
use super::record::{PacketRecord, RecordBatch};
use super::stage::{Broadcast, Coordinator};
use super::stage::{ReportContext, ShardContext, ShardStage, Stage, Tally};
use super::window::{PeriodCursor, WindowSpec};
use crate::class::ClassId;
use crate::filter::{
    BlockedBloomFilter, BloomFilter, CounterLayout, CounterWidth, CountingBloomFilter, MAX_K,
    Membership, PriorEstimate, PriorSampler, RoundPriors, SelectiveBloomFilter,
    SelectiveCountingFilter, Selectivity,
};
use crate::model::blocked;
use crate::model::bloom;
use crate::model::paradox;
use crate::report::{
    ClassAlpha, ClassPrior, SelectiveConfigInfo, SelectiveFlood, SelectiveNote, SelectiveRates,
    SelectiveReport, SelectiveVariant, SweepPoint,
};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The directory's filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectoryKind {
    /// A Bloom filter of `bpe` bits per element (`bf`).
    Bloom,
    /// A counting filter of `bpe` 8-bit counters per element (`cbf`; its
    /// plain answer equals a Bloom filter's of `bpe` bits per element).
    Counting,
}

/// What a query is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryUnit {
    /// Each distinct flow of the query window, once (`flow`).
    Flow,
    /// Every packet of the query window (`packet`).
    Packet,
}

/// Why a selective-stage value could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectiveParseError(String);

impl fmt::Display for DirectoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DirectoryKind::Bloom => "bf",
            DirectoryKind::Counting => "cbf",
        })
    }
}

impl FromStr for DirectoryKind {
    type Err = SelectiveParseError;
    /// `bf` or `cbf`.
    fn from_str(s: &str) -> Result<DirectoryKind, SelectiveParseError> {
        match s.trim() {
            "bf" => Ok(DirectoryKind::Bloom),
            "cbf" => Ok(DirectoryKind::Counting),
            other => Err(SelectiveParseError(format!(
                "directory must be bf or cbf (got '{other}')"
            ))),
        }
    }
}

impl fmt::Display for QueryUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QueryUnit::Flow => "flow",
            QueryUnit::Packet => "packet",
        })
    }
}

impl FromStr for QueryUnit {
    type Err = SelectiveParseError;
    /// `flow` or `packet`.
    fn from_str(s: &str) -> Result<QueryUnit, SelectiveParseError> {
        match s.trim() {
            "flow" => Ok(QueryUnit::Flow),
            "packet" => Ok(QueryUnit::Packet),
            other => Err(SelectiveParseError(format!(
                "query unit must be flow or packet (got '{other}')"
            ))),
        }
    }
}

/// A swept parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepParam {
    /// The cost ratio, the same for every class.
    Alpha,
    /// The directory's hash count.
    K,
    /// The directory's bits per element.
    Bpe,
    /// The counter-product threshold (000 §V-C).
    Product,
}

impl fmt::Display for SweepParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SweepParam::Alpha => "alpha",
            SweepParam::K => "k",
            SweepParam::Bpe => "bpe",
            SweepParam::Product => "product",
        })
    }
}

/// How an evaluator answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The filter's answer (`plain`).
    Plain,
    /// Selective query: low-prior classes answered negative without asking
    /// (`selective-query`).
    SelectiveQuery,
    /// The Selective-insertion filter's answer (`selective-insertion`).
    SelectiveInsertion,
    /// Selective query on the Selective-insertion filter (`both`).
    Both,
    /// The Theorem 2/4 posterior of the counting filter (`posterior`).
    Posterior,
    /// Positive iff the counter product reaches the swept threshold
    /// (`product`).
    Product,
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Variant::Plain => "plain",
            Variant::SelectiveQuery => "selective-query",
            Variant::SelectiveInsertion => "selective-insertion",
            Variant::Both => "both",
            Variant::Posterior => "posterior",
            Variant::Product => "product",
        })
    }
}

crate::serialize_as_display!(DirectoryKind, QueryUnit, SweepParam, Variant);

impl Variant {
    /// A Bloom variant's answer, `(positive, skipped)`, from the plain
    /// filter's answer, the Selective-insertion filter's, and whether
    /// Selective query skips the query's class (000 §IV-C); `None` for the
    /// variants that read the counters of a counting directory.
    fn bloom_answer(self, plain: bool, insertion: bool, skips: bool) -> Option<(bool, bool)> {
        match self {
            Variant::Plain => Some((plain, false)),
            Variant::SelectiveQuery => Some((plain && !skips, skips)),
            Variant::SelectiveInsertion => Some((insertion, false)),
            Variant::Both => Some((insertion && !skips, skips)),
            Variant::Posterior | Variant::Product => None,
        }
    }
}

/// One sweep: a parameter and its values.
///
/// ```
/// use flowsieve::pipeline::{SweepParam, SweepSpec};
/// let s: SweepSpec = "bpe=2,4,8".parse().unwrap();
/// assert_eq!((s.param, s.values), (SweepParam::Bpe, vec![2.0, 4.0, 8.0]));
/// assert!("k=2.5".parse::<SweepSpec>().is_err());
/// assert!("bpe=1,x".parse::<SweepSpec>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct SweepSpec {
    /// The parameter.
    pub param: SweepParam,
    /// Its values (positive, finite; whole numbers up to the filters' most
    /// hashes for `k`).
    pub values: Vec<f64>,
}

impl FromStr for SweepSpec {
    type Err = SelectiveParseError;
    /// `alpha=1,2,5`, `k=4,5,6`, `bpe=10,20,30` or `product=1,2,4,8`.
    fn from_str(s: &str) -> Result<SweepSpec, SelectiveParseError> {
        let err = |m: String| SelectiveParseError(m);
        let (param, list) = s
            .split_once('=')
            .ok_or_else(|| err(format!("sweep: expected PARAM=LIST, got '{s}'")))?;
        let param = match param.trim() {
            "alpha" => SweepParam::Alpha,
            "k" => SweepParam::K,
            "bpe" => SweepParam::Bpe,
            "product" => SweepParam::Product,
            other => {
                return Err(err(format!(
                    "sweep: unknown parameter '{other}' (expected alpha, k, bpe or product)"
                )));
            }
        };
        let values: Vec<f64> = list
            .split(',')
            .map(|v| v.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|_| err(format!("sweep {param}: bad number in '{list}'")))?;
        if values.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(err(format!(
                "sweep {param}: values must be positive finite numbers"
            )));
        }
        if param == SweepParam::K && values.iter().any(|v| v.fract() != 0.0 || *v > MAX_K as f64) {
            return Err(err(format!(
                "sweep k: values must be whole numbers from 1 to {MAX_K}"
            )));
        }
        // The same value twice would run the same point twice and print
        // its rows twice.
        if let Some(v) = values
            .iter()
            .enumerate()
            .find_map(|(i, v)| values[..i].contains(v).then_some(v))
        {
            return Err(err(format!(
                "sweep {param}: {} is given twice; each value runs once",
                crate::model::query::shown(*v)
            )));
        }
        Ok(SweepSpec { param, values })
    }
}

impl SweepSpec {
    /// Refuses a parameter swept twice, as `--sweep alpha=1 --sweep
    /// alpha=2`: [`Sweeps::set`] keeps the last list, so the first would
    /// be dropped without a word. One list per parameter says it all.
    ///
    /// ```
    /// use flowsieve::pipeline::SweepSpec;
    /// let a: SweepSpec = "alpha=1".parse().unwrap();
    /// let b: SweepSpec = "alpha=2,5".parse().unwrap();
    /// let k: SweepSpec = "k=4".parse().unwrap();
    /// assert!(SweepSpec::check_each_once(&[a.clone(), k]).is_ok());
    /// let e = SweepSpec::check_each_once(&[a, b]).unwrap_err();
    /// assert!(e.to_string().contains("alpha is swept twice"));
    /// ```
    pub fn check_each_once(specs: &[SweepSpec]) -> Result<(), SelectiveParseError> {
        match specs
            .iter()
            .enumerate()
            .find(|(i, s)| specs[..*i].iter().any(|t| t.param == s.param))
        {
            Some((_, s)) => {
                // The lists run together, each value once, as the one
                // list the user likely meant.
                let mut merged: Vec<f64> = Vec::new();
                for v in specs
                    .iter()
                    .filter(|t| t.param == s.param)
                    .flat_map(|t| &t.values)
                {
                    if !merged.contains(v) {
                        merged.push(*v);
                    }
                }
                let list: Vec<String> = merged
                    .iter()
                    .map(|v| crate::model::query::shown(*v))
                    .collect();
                Err(SelectiveParseError(format!(
                    "--sweep: {0} is swept twice; give one list, such as --sweep {0}={1}",
                    s.param,
                    list.join(",")
                )))
            }
            None => Ok(()),
        }
    }
}

/// The values a sweep runs over (empty: no sweep).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sweeps {
    /// Cost ratios.
    pub alpha: Vec<f64>,
    /// Hash counts.
    pub k: Vec<usize>,
    /// Bits per element.
    pub bpe: Vec<f64>,
    /// Counter-product thresholds (000 §V-C): positive iff the product of
    /// the `k` counters reaches the threshold.
    pub product: Vec<f64>,
}

impl Sweeps {
    /// Sets one parameter's values (a later sweep of the same parameter
    /// replaces an earlier one).
    pub fn set(&mut self, spec: &SweepSpec) {
        match spec.param {
            SweepParam::Alpha => self.alpha = spec.values.clone(),
            SweepParam::K => self.k = spec.values.iter().map(|v| *v as usize).collect(),
            SweepParam::Bpe => self.bpe = spec.values.clone(),
            SweepParam::Product => self.product = spec.values.clone(),
        }
    }
}

/// The most bits (or counters) per element a directory may have.
pub const MAX_BPE: f64 = 1e4;

/// The selective-query stage's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectiveConfig {
    /// The window whose distinct flows form the set `S`.
    pub cache_window: WindowSpec,
    /// Longer than the cache window, on the same axis.
    pub query_window: WindowSpec,
    /// The directory's filter.
    pub directory: DirectoryKind,
    /// The Bloom directory's layout: partitioned (000 §III, 001's model)
    /// or blocked (a key's `k` bits in one 64-byte line,
    /// [`BlockedBloomFilter`], modelled by (B1) of
    /// [`crate::model::blocked`] at `theta = 1`). The counting directory
    /// is partitioned only: Theorem 2's posterior assumes its `k`
    /// independent subarrays.
    pub layout: CounterLayout,
    /// Bits (or counters) per element of `S`.
    pub bpe: f64,
    /// Hash functions; `None`: the optimum `bpe ln 2` (001).
    pub k: Option<usize>,
    /// What a query is.
    pub query_unit: QueryUnit,
    /// The least fraction of each class's queries checked against the
    /// exact set for the priors.
    pub prior_sample: f64,
    /// Weight of the newest round in the pooled prior counts: past rounds
    /// are kept with weight `1 - prior_smoothing` per round.
    pub prior_smoothing: f64,
    /// Samples per class and round the sampler aims for: a class with
    /// fewer queries than this in the last round has all of its queries
    /// checked (see [`PriorSampler`]).
    pub prior_min_samples: u64,
    /// The prior of a class with no sample yet.
    pub prior_default: f64,
    /// Cost of a false negative relative to a false positive, per class.
    pub alpha: Vec<f64>,
    /// The sweeps.
    pub sweeps: Sweeps,
    /// The most distinct flows the exact sets of one window may hold, over
    /// all shards (each shard holds `max_flows / shards`). Past it a set
    /// keeps a hash sample of its flows ([`super::CappedFlowSet`]) and the
    /// report says how much was shed: a flood cannot grow memory.
    pub max_flows: usize,
    /// Score every evaluator at each query, as it is answered, instead of
    /// counting the filters' answers per class and scoring them when a
    /// skip decision changes (the default, `false`, and the faster:
    /// [`SelectiveShard`]'s `outcomes`). The report is the same
    /// either way; this is the reference the tests compare the default
    /// with, and no command-line flag sets it.
    pub score_each_query: bool,
    /// How many sampled records the prior coordinator holds back, their
    /// flow-set slots fetched, before it answers them
    /// ([`super::lookahead`]): a few, so that the source thread does not
    /// wait on the sets' cache misses. 0 answers each record as it comes,
    /// the reference the tests compare the default with; the report is the
    /// same either way, and no command-line flag sets it.
    pub prior_lookahead: usize,
}

impl SelectiveConfig {
    /// The defaults with these per-class cost ratios.
    pub fn with_alpha(alpha: Vec<f64>) -> SelectiveConfig {
        SelectiveConfig {
            cache_window: WindowSpec::Time(defaults::CACHE_WINDOW_NS),
            query_window: WindowSpec::Time(defaults::QUERY_WINDOW_NS),
            directory: DirectoryKind::Bloom,
            layout: CounterLayout::Partitioned,
            bpe: defaults::DIR_BPE,
            k: None,
            query_unit: QueryUnit::Flow,
            prior_sample: defaults::PRIOR_SAMPLE,
            prior_smoothing: defaults::PRIOR_SMOOTHING,
            prior_min_samples: defaults::PRIOR_MIN_SAMPLES,
            prior_default: 0.5,
            alpha,
            sweeps: Sweeps::default(),
            max_flows: defaults::SELECTIVE_MAX_FLOWS,
            score_each_query: false,
            prior_lookahead: defaults::PRIOR_LOOKAHEAD,
        }
    }

    /// The main directory's `k`.
    pub fn main_k(&self) -> usize {
        self.k_for(self.bpe)
    }

    fn k_for(&self, bpe: f64) -> usize {
        self.k
            .unwrap_or_else(|| bloom::optimal_k(bpe) as usize)
            .clamp(1, MAX_K)
    }

    fn alpha_of(&self, class: usize) -> f64 {
        self.alpha.get(class).copied().unwrap_or(defaults::ALPHA)
    }

    /// Checks the stage's fields.
    pub fn validate(&self) -> Result<SelectiveStage, ConfigError> {
        let (cache, query) = (self.cache_window, self.query_window);
        if !cache.same_axis(&query) || query.span() <= cache.span() {
            return Err(ConfigError::invalid(
                "selective.query_window",
                format!(
                    "({query}) must be longer than the cache window ({cache}) and on the same axis (both time or both packets)"
                ),
            ));
        }
        let period = cache.span().checked_add(query.span()).ok_or_else(|| {
            ConfigError::invalid(
                "selective.query_window",
                format!("a cache window ({cache}) plus a query window ({query}) is longer than 2^64 units"),
            )
        })?;
        let bpe_ok = |b: f64| b.is_finite() && b > 0.0 && b <= MAX_BPE;
        if !bpe_ok(self.bpe) {
            return Err(ConfigError::invalid(
                "selective.bpe",
                format!(
                    "must be in (0, {MAX_BPE}] (got {})",
                    crate::model::query::shown(self.bpe)
                ),
            ));
        }
        if let Some(b) = self.sweeps.bpe.iter().find(|b| !bpe_ok(**b)) {
            return Err(ConfigError::invalid(
                "selective.sweeps.bpe",
                format!(
                    "values must be in (0, {MAX_BPE}] (got {})",
                    crate::model::query::shown(*b)
                ),
            ));
        }
        if let Some(k) = self.k {
            in_range("selective.k", k, 1, MAX_K)?;
        }
        for &k in &self.sweeps.k {
            in_range("selective.sweeps.k", k, 1, MAX_K)?;
        }
        for (field, values) in [
            ("selective.alpha", &self.alpha),
            ("selective.sweeps.alpha", &self.sweeps.alpha),
            ("selective.sweeps.product", &self.sweeps.product),
        ] {
            if let Some(a) = values.iter().find(|a| !(a.is_finite() && **a > 0.0)) {
                return Err(ConfigError::invalid(
                    field,
                    format!(
                        "values must be positive and finite (got {})",
                        crate::model::query::shown(*a)
                    ),
                ));
            }
        }
        for (field, v) in [
            ("selective.prior_sample", self.prior_sample),
            ("selective.prior_default", self.prior_default),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(ConfigError::invalid(
                    field,
                    format!("must be in [0, 1] (got {})", crate::model::query::shown(v)),
                ));
            }
        }
        if self.layout == CounterLayout::Blocked && self.directory == DirectoryKind::Counting {
            return Err(ConfigError::invalid(
                "selective.layout",
                "blocked is for the Bloom directory (--directory bf): the counting directory's posterior (000 Theorem 2) assumes k independent subarrays".to_string(),
            ));
        }
        in_range(
            "selective.max_flows",
            self.max_flows,
            1,
            defaults::SELECTIVE_MAX_FLOWS_LIMIT,
        )?;
        if !(self.prior_smoothing > 0.0 && self.prior_smoothing <= 1.0) {
            return Err(ConfigError::invalid(
                "selective.prior_smoothing",
                format!("must be in (0, 1] (got {})", self.prior_smoothing),
            ));
        }
        Ok(SelectiveStage {
            cfg: self.clone(),
            plan: Plan::new(self),
            period,
        })
    }
}

/// One way of answering the queries, evaluated on all of them.
#[derive(Clone, Debug, PartialEq)]
pub struct EvaluatorSpec {
    /// How it answers.
    pub variant: Variant,
    /// The sweep it belongs to (`None`: a main variant).
    pub sweep: Option<SweepParam>,
    /// The swept value (the product threshold for [`Variant::Product`]).
    pub value: f64,
    /// Its directory's bits per element.
    pub bpe: f64,
    /// Its directory's hash count.
    pub k: usize,
    /// `alpha` for every class, overriding the per-class values.
    pub alpha: Option<f64>,
    directory: usize,
}

impl EvaluatorSpec {
    /// An evaluator on directory `directory`; its `bpe` and `k` are filled
    /// in once the plan's shapes are laid out.
    fn at(
        variant: Variant,
        sweep: Option<SweepParam>,
        value: f64,
        directory: usize,
        alpha: Option<f64>,
    ) -> EvaluatorSpec {
        EvaluatorSpec {
            variant,
            sweep,
            value,
            bpe: 0.0,
            k: 0,
            alpha,
            directory,
        }
    }
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
        let with_products = counting || !cfg.sweeps.product.is_empty();
        let mut shapes = vec![DirectoryShape {
            bpe: cfg.bpe,
            k: cfg.main_k(),
            counting: with_products,
            selective_insertion: true,
        }];
        let mut shape = |bpe: f64, k: usize, with_counts: bool| {
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
        // Each evaluator's bpe and k are filled from its directory's shape
        // once every shape is laid out.
        let mut ev: Vec<EvaluatorSpec> = Vec::new();
        let mains = [
            Variant::Plain,
            Variant::SelectiveQuery,
            Variant::SelectiveInsertion,
            Variant::Both,
        ];
        for v in mains
            .into_iter()
            .chain(counting.then_some(Variant::Posterior))
        {
            ev.push(EvaluatorSpec::at(v, None, 0.0, 0, None));
        }
        // Every sweep point answers with the plain filter, Selective query
        // and, for a counting directory, the posterior.
        let point_variants: Vec<Variant> = [Variant::Plain, Variant::SelectiveQuery]
            .into_iter()
            .chain(counting.then_some(Variant::Posterior))
            .collect();
        let point = |ev: &mut Vec<EvaluatorSpec>, param, value, d, alpha| {
            for &v in &point_variants {
                ev.push(EvaluatorSpec::at(v, Some(param), value, d, alpha));
            }
        };
        for &a in &cfg.sweeps.alpha {
            point(&mut ev, SweepParam::Alpha, a, 0, Some(a));
        }
        let mut k_dirs = vec![0];
        for &k in &cfg.sweeps.k {
            let k = k.clamp(1, MAX_K);
            let d = shape(cfg.bpe, k, with_products);
            if !k_dirs.contains(&d) {
                k_dirs.push(d);
            }
            point(&mut ev, SweepParam::K, k as f64, d, None);
        }
        for &b in &cfg.sweeps.bpe {
            let d = shape(b, cfg.k_for(b), counting);
            point(&mut ev, SweepParam::Bpe, b, d, None);
        }
        for &d in &k_dirs {
            for &t in &cfg.sweeps.product {
                ev.push(EvaluatorSpec::at(
                    Variant::Product,
                    Some(SweepParam::Product),
                    t,
                    d,
                    None,
                ));
            }
        }
        for e in &mut ev {
            e.bpe = shapes[e.directory].bpe;
            e.k = shapes[e.directory].k;
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
    /// Queries.
    pub queries: u64,
    /// Queries whose flow was in `S`.
    pub members: u64,
    /// Sum of the prior estimate in force at each query.
    pub prior_sum: f64,
    /// Sampled queries (checked against the exact set for the prior).
    pub sampled: u64,
    /// Members among the sampled queries.
    pub sampled_members: u64,
    /// The pooled estimate after the last round (coordinator only).
    pub prior_final: Option<PriorEstimate>,
}

/// One evaluator's errors in one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorTally {
    /// Non-members answered positive.
    pub false_positives: u64,
    /// Members answered negative.
    pub false_negatives: u64,
    /// Queries answered without asking the filter (selective query).
    pub skipped: u64,
}

/// The selective-query stage's whole tally.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SelectiveTally {
    /// Indexed by class id.
    pub classes: Vec<QueryClassTally>,
    /// `[evaluator][class]`.
    pub errors: Vec<Vec<ErrorTally>>,
    /// Shard-rounds whose directory was built.
    pub directories_built: u64,
    /// Elements of `S` summed over shard-rounds.
    pub set_elements: u64,
    /// Elements left out by selective insertion, over shard-rounds.
    pub insertion_skipped: u64,
    /// What the flow-set cap shed.
    pub flood: FloodTally,
}

/// What the cap on the exact flow sets shed ([`SelectiveConfig::max_flows`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloodTally {
    /// Shard-rounds in which a set reached its cap.
    pub shard_rounds: u64,
    /// Cache-window packets of flows not admitted to `S`.
    pub cache_packets_shed: u64,
    /// Query-window packets not queried because their flow was shed.
    pub query_packets_shed: u64,
    /// Members dropped from a set when its sampling level rose.
    pub flows_evicted: u64,
    /// The highest sampling level reached (the sets then held a
    /// `2^-level` sample of the window's flows).
    pub max_level: u32,
    /// Rounds in which the prior coordinator's own sample sets reached the
    /// cap (its priors then come from a hash sample of its samples).
    pub prior_rounds: u64,
}

impl FloodTally {
    fn add(&mut self, o: &FloodTally) {
        self.shard_rounds += o.shard_rounds;
        self.cache_packets_shed += o.cache_packets_shed;
        self.query_packets_shed += o.query_packets_shed;
        self.flows_evicted += o.flows_evicted;
        self.max_level = self.max_level.max(o.max_level);
        self.prior_rounds += o.prior_rounds;
    }
}

impl Tally for SelectiveTally {
    fn merge(&mut self, o: SelectiveTally) {
        for (a, b) in self.classes.iter_mut().zip(&o.classes) {
            a.queries += b.queries;
            a.members += b.members;
            a.prior_sum += b.prior_sum;
            a.sampled += b.sampled;
            a.sampled_members += b.sampled_members;
            a.prior_final = a.prior_final.or(b.prior_final);
        }
        self.flood.add(&o.flood);
        // The coordinator's tally (merged first) has no evaluators.
        if self.errors.is_empty() {
            self.errors = o.errors;
            self.directories_built += o.directories_built;
            self.set_elements += o.set_elements;
            self.insertion_skipped += o.insertion_skipped;
            return;
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

/// The selective-query stage, validated.
#[derive(Clone, Debug)]
pub struct SelectiveStage {
    cfg: SelectiveConfig,
    plan: Plan,
    /// A cache window plus a query window (no overflow: checked).
    period: u64,
}

impl SelectiveStage {
    /// The evaluators and directories every shard runs.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The most memory the stage can take over `shards` shards, in bytes:
    /// the capped flow sets of each shard (at most `max_flows / shards`
    /// members each: [`FlowSet::bytes_for`], 10 bytes a slot for the cache
    /// set's hash and class, 8 for the query set's hash), the
    /// coordinator's two sample sets (`max_flows` each, 8 bytes a slot),
    /// and every directory built over a full set (bits per element times
    /// the cap; a counting directory one byte a counter). A bound, not a
    /// measurement: a normal trace's windows take far less.
    pub fn memory_bytes(&self, shards: usize) -> u64 {
        let per_shard = (self.cfg.max_flows / shards.max(1)).max(1);
        let sets = FlowSet::<ClassId>::bytes_for(per_shard)
            .saturating_add(FlowSet::<()>::bytes_for(per_shard));
        let per_shard = per_shard as u64;
        let directories: u64 = self
            .plan
            .shapes
            .iter()
            .map(|d| {
                let cells = (d.bpe * per_shard as f64).ceil() as u64;
                let bits = cells.saturating_mul(1 + u64::from(d.selective_insertion));
                bits.div_ceil(8)
                    .saturating_add(if d.counting { cells } else { 0 })
            })
            .fold(0u64, u64::saturating_add);
        let coordinator = FlowSet::<()>::bytes_for(self.cfg.max_flows).saturating_mul(2);
        sets.saturating_add(directories)
            .saturating_mul(shards as u64)
            .saturating_add(coordinator)
    }
}

impl Stage for SelectiveStage {
    const NAME: &'static str = "selective";
    type Shard = SelectiveShard;
    type Section = SelectiveReport;

    fn shard(&self, ctx: &ShardContext) -> SelectiveShard {
        let mut shard = SelectiveShard::new(self, ctx.classes, ctx.shards);
        shard.live = self.gauges(ctx).map(|gauges| LivePublish {
            gauges,
            errors: shard.tally.errors[..self.main_variants()].to_vec(),
            queries: vec![(0, 0); ctx.classes],
        });
        shard
    }

    fn coordinator(&self, ctx: &ShardContext) -> Option<Box<dyn Coordinator<SelectiveTally>>> {
        let mut c = PriorCoordinator::new(self, ctx.classes);
        c.gauges = self.gauges(ctx);
        Some(Box::new(c))
    }

    fn report(&self, t: SelectiveTally, ctx: &ReportContext) -> SelectiveReport {
        let s = &self.cfg;
        let names = ctx.classifier.names();
        let class_alpha = |c: usize| s.alpha_of(c);
        let mut variants: Vec<SelectiveVariant> = Vec::new();
        let mut sweeps = Vec::new();
        for (e, spec) in self.plan.evaluators.iter().enumerate() {
            let fixed = spec.alpha;
            let alpha = move |c: usize| fixed.unwrap_or_else(|| class_alpha(c));
            let errors = &t.errors[e];
            match spec.sweep {
                None => variants.push(SelectiveVariant {
                    name: spec.variant,
                    overall: selective_rates(None, &t, errors, &alpha),
                    classes: names
                        .iter()
                        .enumerate()
                        .map(|(c, n)| selective_rates(Some((c, n.clone())), &t, errors, &alpha))
                        .collect(),
                }),
                Some(param) => {
                    let r = selective_rates(None, &t, errors, &alpha);
                    sweeps.push(SweepPoint {
                        parameter: param,
                        value: spec.value,
                        variant: spec.variant,
                        bpe: spec.bpe,
                        k: spec.k,
                        alpha: spec.alpha,
                        queries: r.queries,
                        members: r.members,
                        fp_rate: r.fp_rate,
                        fn_rate: r.fn_rate,
                        cost: r.cost,
                    })
                }
            }
        }
        // Cost reductions against the plain filter, class by class.
        if let Some(plain) = variants.iter().find(|v| v.name == Variant::Plain).cloned() {
            let reduce = |r: &mut SelectiveRates, base: &SelectiveRates| {
                r.cost_reduction = if base.cost > 0.0 {
                    1.0 - r.cost / base.cost
                } else {
                    0.0
                };
            };
            for v in variants.iter_mut() {
                reduce(&mut v.overall, &plain.overall);
                for (r, b) in v.classes.iter_mut().zip(&plain.classes) {
                    reduce(r, b);
                }
            }
        }
        // Theorem 1 per class at the main directory's model rate (001,
        // partitioned, or the blocked layout's (B1) at theta = 1, at bpe and
        // k), against the pooled estimate.
        let fpr = match s.layout {
            CounterLayout::Partitioned => bloom::fpr_approx(s.bpe, s.main_k() as u32),
            CounterLayout::Blocked => blocked::fpr_bloom_blocked(s.bpe, s.main_k() as u32),
        };
        let priors: Vec<ClassPrior> = names
            .iter()
            .enumerate()
            .map(|(c, name)| {
                let ct = &t.classes[c];
                let alpha = class_alpha(c);
                let threshold = paradox::prior_threshold_for_fpr(alpha, fpr);
                let est = ct.prior_final;
                ClassPrior {
                    class: name.clone(),
                    alpha,
                    threshold,
                    queries: ct.queries,
                    prior_est: if ct.queries > 0 {
                        ct.prior_sum / ct.queries as f64
                    } else {
                        s.prior_default
                    },
                    prior: est.map(|e| e.prior),
                    prior_se: est.map(|e| e.se),
                    samples: ct.sampled,
                    sampled_members: ct.sampled_members,
                    prior_true: (ctx.truth && ct.queries > 0)
                        .then(|| ratio(ct.members, ct.queries)),
                    paradox: est.map(|e| e.prior < threshold),
                    paradox_below_bpe: est.map(|e| match s.layout {
                        CounterLayout::Partitioned => paradox::min_bits_per_element(alpha, e.prior),
                        CounterLayout::Blocked => {
                            blocked::min_bits_per_element_bloom_blocked(alpha, e.prior, MAX_BPE)
                        }
                    }),
                    paradox_below_alpha: est
                        .filter(|e| e.prior > 0.0)
                        .map(|e| fpr * (1.0 - e.prior) / e.prior),
                }
            })
            .collect();
        let mut notes = Vec::new();
        let starved = priors
            .iter()
            .filter(|p| p.queries > 0 && p.prior.is_none())
            .count();
        if starved > 0 {
            notes.push(SelectiveNote::StarvedPriors {
                classes: starved,
                default_prior: s.prior_default,
            });
        }
        let active = || priors.iter().filter(|p| p.queries > 0 && p.prior.is_some());
        if active().count() > 0 && !active().any(|p| p.paradox == Some(true)) {
            // The class nearest to the regime: the one that enters it at
            // the most bits per element.
            if let Some(p) = active().max_by(|a, b| {
                a.paradox_below_bpe
                    .unwrap_or(0.0)
                    .total_cmp(&b.paradox_below_bpe.unwrap_or(0.0))
            }) {
                notes.push(SelectiveNote::NoClassInParadox {
                    class: p.class.clone(),
                    below_bpe: p.paradox_below_bpe.unwrap_or(0.0),
                    below_alpha: p.paradox_below_alpha.unwrap_or(0.0),
                });
            }
        }
        let flood = SelectiveFlood {
            cap_flows_per_shard: (s.max_flows / ctx.shards.max(1)).max(1) as u64,
            shard_rounds: t.flood.shard_rounds,
            cache_packets_shed: t.flood.cache_packets_shed,
            query_packets_shed: t.flood.query_packets_shed,
            flows_evicted: t.flood.flows_evicted,
            lowest_sample_rate: 0.5f64.powi(t.flood.max_level as i32),
            prior_rounds: t.flood.prior_rounds,
        };
        if flood.shard_rounds > 0 || flood.prior_rounds > 0 {
            notes.push(SelectiveNote::Flooded {
                shard_rounds: flood.shard_rounds,
                cap: flood.cap_flows_per_shard,
                rate: flood.lowest_sample_rate,
            });
        }
        SelectiveReport {
            config: SelectiveConfigInfo {
                cache_window: s.cache_window,
                query_window: s.query_window,
                directory: s.directory,
                layout: s.layout,
                bpe: s.bpe,
                k: s.main_k(),
                query_unit: s.query_unit,
                prior_sample: s.prior_sample,
                prior_default: s.prior_default,
                prior_min_samples: s.prior_min_samples,
                prior_smoothing: s.prior_smoothing,
                alpha: names
                    .iter()
                    .enumerate()
                    .map(|(c, n)| ClassAlpha {
                        class: n.clone(),
                        alpha: class_alpha(c),
                    })
                    .collect(),
            },
            directory_fpr: fpr,
            priors,
            variants,
            sweeps,
            directories_built: t.directories_built,
            set_elements: t.set_elements,
            insertion_skipped: t.insertion_skipped,
            flood,
            notes,
        }
    }
}

/// Rates of one evaluator over a class (`None`: all classes).
fn selective_rates(
    class: Option<(usize, String)>,
    t: &SelectiveTally,
    errors: &[ErrorTally],
    alpha: &dyn Fn(usize) -> f64,
) -> SelectiveRates {
    let idx: Vec<usize> = match &class {
        Some((c, _)) => vec![*c],
        None => (0..t.classes.len()).collect(),
    };
    let (mut q, mut m, mut ps, mut fp, mut fnn, mut skipped, mut cost) = (0, 0, 0.0, 0, 0, 0, 0.0);
    for &c in &idx {
        let ct = &t.classes[c];
        let e = errors.get(c).copied().unwrap_or_default();
        q += ct.queries;
        m += ct.members;
        ps += ct.prior_sum;
        fp += e.false_positives;
        fnn += e.false_negatives;
        skipped += e.skipped;
        cost += e.false_positives as f64 + alpha(c) * e.false_negatives as f64;
    }
    SelectiveRates {
        class: class.map(|c| c.1),
        queries: q,
        members: m,
        prior_est: if q > 0 { ps / q as f64 } else { 0.0 },
        prior_true: ratio(m, q),
        false_positives: fp,
        false_negatives: fnn,
        fp_rate: ratio(fp, q - m),
        fn_rate: ratio(fnn, m),
        cost,
        cost_reduction: 0.0,
        skipped,
    }
}

/// A built directory for one round: the library's selective filters over
/// this shard's part of `S`.
#[derive(Debug)]
struct Directory {
    /// Plain and Selective-query answers.
    query: SelectiveBloomFilter<DirectoryBits>,
    /// Built by Selective insertion (the main shape only).
    insertion: Option<SelectiveBloomFilter<DirectoryBits>>,
    /// Counters for the posterior and the product rule.
    counting: Option<SelectiveCountingFilter>,
}

/// A Bloom directory's bits in the configured layout.
#[derive(Clone, Debug)]
enum DirectoryBits {
    Partitioned(BloomFilter),
    Blocked(BlockedBloomFilter),
}

impl DirectoryBits {
    fn new(layout: CounterLayout, m: usize, k: usize) -> DirectoryBits {
        match layout {
            CounterLayout::Partitioned => DirectoryBits::Partitioned(BloomFilter::new(m, k)),
            CounterLayout::Blocked => DirectoryBits::Blocked(BlockedBloomFilter::new(m, k)),
        }
    }
}

impl Membership for DirectoryBits {
    fn insert(&mut self, h: u64) {
        match self {
            DirectoryBits::Partitioned(f) => {
                f.insert(h);
            }
            DirectoryBits::Blocked(f) => {
                f.insert(h);
            }
        }
    }
    // Always inlined: every query asks it (without, the partitioned
    // directory's test became a call, 17 instructions a packet more on the
    // benchmark trace's selective stage, callgrind).
    #[inline(always)]
    fn contains(&self, h: u64) -> bool {
        match self {
            DirectoryBits::Partitioned(f) => f.contains(h),
            DirectoryBits::Blocked(f) => f.contains(h),
        }
    }
    fn clear(&mut self) {
        match self {
            DirectoryBits::Partitioned(f) => f.clear(),
            DirectoryBits::Blocked(f) => f.clear(),
        }
    }
    fn m(&self) -> usize {
        match self {
            DirectoryBits::Partitioned(f) => f.m(),
            DirectoryBits::Blocked(f) => f.m(),
        }
    }
    fn k(&self) -> usize {
        match self {
            DirectoryBits::Partitioned(f) => f.k(),
            DirectoryBits::Blocked(f) => f.k(),
        }
    }
    fn model_fpr(&self, n: u64) -> f64 {
        match self {
            DirectoryBits::Partitioned(f) => f.model_fpr(n),
            DirectoryBits::Blocked(f) => f.model_fpr(n),
        }
    }
}

/// One directory's answers to one query, shared by its evaluators.
#[derive(Clone, Copy, Debug)]
struct Probe {
    plain: bool,
    insertion: bool,
    ln_product: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Cache,
    Query,
}

/// The selective-query stage in one shard.
#[derive(Debug)]
pub struct SelectiveShard {
    cfg: SelectiveConfig,
    plan: Plan,
    /// Rounds of a cache window and a query window.
    rounds: PeriodCursor,
    state: Option<(u64, Phase)>,
    cache: CappedFlowSet<ClassId>,
    queried: CappedFlowSet<()>,
    directories: Vec<Directory>,
    /// Per evaluator, per class: the prior below which selective query
    /// skips (this round).
    thresholds: Vec<Vec<f64>>,
    /// The priors in force this round, from the coordinator.
    priors: Vec<f64>,
    /// The same priors with their logarithms for the posterior (000
    /// Theorem 2), taken when the priors change rather than at each query;
    /// kept only when the plan has a posterior evaluator (empty
    /// otherwise), since on a sparse trace the priors change often against
    /// the queries.
    prior_logs: Vec<paradox::PriorLogs>,
    /// Per evaluator: the log-space bound of a product evaluator's
    /// threshold (`ln_product_bound` of its value; unused by the others),
    /// taken once here instead of a logarithm per query.
    product_bounds: Vec<f64>,
    tally: SelectiveTally,
    /// The filters' answers to this query, per directory, for the
    /// evaluators scored at each query (empty when there are none).
    probes: Vec<Probe>,
    /// The Bloom evaluators (plain, Selective query, Selective insertion,
    /// both), scored from `outcomes` by [`SelectiveShard::score_outcomes`];
    /// empty with [`SelectiveConfig::score_each_query`].
    scored_later: Vec<usize>,
    /// The evaluators scored at each query: the posterior and the product
    /// rule, which read a counting directory's counters (every evaluator
    /// with [`SelectiveConfig::score_each_query`]).
    scored_each_query: Vec<usize>,
    /// Per directory and class (cell `d * classes + c`): how many queries
    /// since the last [`SelectiveShard::score_outcomes`] got each
    /// combination of answers ([`outcome_index`]).
    outcomes: Vec<[u64; 8]>,
    /// Some cell of `outcomes` is not zero.
    outcomes_pending: bool,
    /// Per evaluator and class (cell `e * classes + c`): whether Selective
    /// query skips the class at the priors and thresholds in force; set by
    /// [`SelectiveShard::refresh_skips`] for the evaluators in
    /// `scored_later`.
    skips: Vec<bool>,
    /// In a live run: the gauges, and what this shard published so far
    /// (the main variants' errors, then per class queries and members).
    live: Option<LivePublish>,
}

/// A shard's share of the selective gauges: it adds what its tally grew
/// by since the last batch.
#[derive(Debug)]
struct LivePublish {
    gauges: Arc<super::gauges::Gauges>,
    errors: Vec<Vec<ErrorTally>>,
    queries: Vec<(u64, u64)>,
}

impl LivePublish {
    fn publish(&mut self, tally: &SelectiveTally) {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(g) = self.gauges.selective.get() else {
            return;
        };
        for (v, (published, now)) in self.errors.iter_mut().zip(&tally.errors).enumerate() {
            for (c, (p, n)) in published.iter_mut().zip(now).enumerate() {
                if p != n {
                    if let Some(e) = g.errors.get(v).and_then(|v| v.get(c)) {
                        e[0].fetch_add(n.false_positives - p.false_positives, Relaxed);
                        e[1].fetch_add(n.false_negatives - p.false_negatives, Relaxed);
                        e[2].fetch_add(n.skipped - p.skipped, Relaxed);
                    }
                    *p = *n;
                }
            }
        }
        for (c, (p, n)) in self.queries.iter_mut().zip(&tally.classes).enumerate() {
            if p.0 != n.queries {
                if let (Some(q), Some(m)) = (g.queries.get(c), g.members.get(c)) {
                    q.fetch_add(n.queries - p.0, Relaxed);
                    m.fetch_add(n.members - p.1, Relaxed);
                }
                *p = (n.queries, n.members);
            }
        }
    }
}

impl SelectiveShard {
    fn new(stage: &SelectiveStage, classes: usize, shards: usize) -> SelectiveShard {
        let cfg = &stage.cfg;
        let cap = (cfg.max_flows / shards.max(1)).max(1);
        let plan = stage.plan.clone();
        let evaluators = plan.evaluators.len();
        let (scored_each_query, scored_later): (Vec<usize>, Vec<usize>) = (0..evaluators)
            .partition(|&e| {
                cfg.score_each_query
                    || matches!(
                        plan.evaluators[e].variant,
                        Variant::Posterior | Variant::Product
                    )
            });
        SelectiveShard {
            rounds: PeriodCursor::new(stage.period),
            priors: vec![cfg.prior_default; classes],
            prior_logs: if plan
                .evaluators
                .iter()
                .any(|e| e.variant == Variant::Posterior)
            {
                vec![paradox::PriorLogs::new(cfg.prior_default); classes]
            } else {
                Vec::new()
            },
            tally: SelectiveTally {
                classes: vec![QueryClassTally::default(); classes],
                errors: vec![vec![ErrorTally::default(); classes]; evaluators],
                ..SelectiveTally::default()
            },
            thresholds: vec![vec![0.0; classes]; evaluators],
            product_bounds: plan
                .evaluators
                .iter()
                .map(|e| SelectiveCountingFilter::<CountingBloomFilter>::ln_product_bound(e.value))
                .collect(),
            probes: Vec::with_capacity(plan.shapes.len()),
            outcomes: vec![[0; 8]; plan.shapes.len() * classes],
            outcomes_pending: false,
            skips: vec![false; evaluators * classes],
            scored_later,
            scored_each_query,
            plan,
            cfg: cfg.clone(),
            state: None,
            cache: CappedFlowSet::new(cap),
            queried: CappedFlowSet::new(cap),
            directories: Vec::new(),
            live: None,
        }
    }

    /// Handles one packet.
    #[inline]
    fn handle(&mut self, r: &PacketRecord) {
        let pos = self.cfg.cache_window.position(r.time_ns, r.seq);
        let (round, offset) = self.rounds.locate(pos);
        let phase = if offset < self.cfg.cache_window.span() {
            Phase::Cache
        } else {
            Phase::Query
        };
        if self.state != Some((round, phase)) {
            if self.state.map(|s| s.0) != Some(round) {
                self.end_round();
                self.directories.clear();
            }
            if phase == Phase::Query {
                self.build();
            }
            self.state = Some((round, phase));
        }
        match phase {
            Phase::Cache => {
                if self.cache.insert(r.hash, r.class) == Admission::Shed {
                    self.tally.flood.cache_packets_shed += 1;
                }
            }
            Phase::Query => {
                // Only flows the cache set still admits are queried: a shed
                // flow may have been in the cache window, and its
                // membership is no longer known exactly.
                let admitted = self.cache.admits(r.hash)
                    && match self.cfg.query_unit {
                        QueryUnit::Flow => match self.queried.insert(r.hash, ()) {
                            Admission::Inserted => true,
                            Admission::Present => return,
                            Admission::Shed => false,
                        },
                        QueryUnit::Packet => self.queried.admits(r.hash),
                    };
                if !admitted {
                    self.tally.flood.query_packets_shed += 1;
                    return;
                }
                self.query(r.hash, r.class);
            }
        }
    }

    /// Accounts for the flow-set cap in the round that ends, and empties
    /// the sets for the next.
    fn end_round(&mut self) {
        let level = self.cache.level().max(self.queried.level());
        if level > 0 {
            let f = &mut self.tally.flood;
            f.shard_rounds += 1;
            f.max_level = f.max_level.max(level);
            f.flows_evicted += self.cache.evicted() + self.queried.evicted();
        }
        self.cache.clear();
        self.queried.clear();
    }

    /// Builds this round's directories over the cache window's flows.
    fn build(&mut self) {
        let n = self.cache.len();
        let classes = self.priors.len();
        let priors = &self.priors;
        self.directories.clear();
        let mut skipped = 0;
        for shape in &self.plan.shapes {
            let k = shape.k;
            let m = ((shape.bpe * n as f64).ceil() as usize).max(k);
            let layout = self.cfg.layout;
            let mut query = SelectiveBloomFilter::over(
                DirectoryBits::new(layout, m, k),
                n,
                defaults::ALPHA,
                Selectivity::Query,
            );
            let mut insertion = shape.selective_insertion.then(|| {
                SelectiveBloomFilter::over(
                    DirectoryBits::new(layout, m, k),
                    n,
                    defaults::ALPHA,
                    Selectivity::Both,
                )
            });
            let mut counting = shape
                .counting
                .then(|| SelectiveCountingFilter::new(m, k, CounterWidth::W8, defaults::ALPHA));
            for (h, &class) in self.cache.iter() {
                query.insert(h, 1.0);
                if let Some(c) = counting.as_mut() {
                    c.insert(h);
                }
                if let Some(s) = insertion.as_mut() {
                    let c = usize::from(class);
                    let prior = priors.get(c).copied().unwrap_or(1.0);
                    if !s.insert_for(h, prior, self.cfg.alpha_of(c)) {
                        skipped += 1;
                    }
                }
            }
            self.directories.push(Directory {
                query,
                insertion,
                counting,
            });
        }
        for (e, spec) in self.plan.evaluators.iter().enumerate() {
            let d = &self.directories[spec.directory];
            for c in 0..classes {
                let alpha = spec.alpha.unwrap_or_else(|| self.cfg.alpha_of(c));
                self.thresholds[e][c] = d.query.threshold_for(alpha);
            }
        }
        self.refresh_skips();
        self.tally.directories_built += 1;
        self.tally.set_elements += n as u64;
        self.tally.insertion_skipped += skipped;
    }

    /// Answers one query with every evaluator.
    ///
    /// A Bloom evaluator's answer depends only on the two Bloom filters'
    /// answers and on whether Selective query skips the query's class,
    /// which can change only when the priors or the thresholds do. So a
    /// query is only counted here, in its class's cell of `outcomes` for
    /// each directory, and [`SelectiveShard::score_outcomes`] scores each
    /// cell once for every Bloom evaluator before a skip decision changes
    /// ([`SelectiveShard::refresh_skips`]). The sums are of integers, so every tally is the one that
    /// scoring each query as it comes would give
    /// ([`SelectiveConfig::score_each_query`], which the tests compare
    /// with); it saves the loop over the evaluators, about half of a
    /// query's instructions (BENCHMARKS.md, sixty-seventh round).
    fn query(&mut self, h: u64, class: ClassId) {
        let c = usize::from(class);
        let classes = self.tally.classes.len();
        if c >= classes {
            return;
        }
        let member = self.cache.contains(h);
        let prior = self.priors.get(c).copied().unwrap_or(1.0);
        let t = &mut self.tally.classes[c];
        t.queries += 1;
        t.members += u64::from(member);
        t.prior_sum += prior;
        let reference = self.cfg.score_each_query;
        let probe_counters = !self.scored_each_query.is_empty();
        self.probes.clear();
        for (i, d) in self.directories.iter().enumerate() {
            let plain = d.query.filter().contains(h);
            // The Selective-insertion filter has the query filter's shape
            // and holds a subset of its members, so each of its set bits is
            // set in the query filter too: it answers positive only where
            // the query filter does, and is asked only then (the reference
            // asks it always).
            let insertion = (plain || reference)
                && d.insertion.as_ref().is_some_and(|s| s.filter().contains(h));
            if let Some(cell) = self.outcomes.get_mut(i * classes + c) {
                cell[outcome_index(plain, insertion, member)] += 1;
            }
            if probe_counters {
                let ln_product = match d.counting.as_ref() {
                    Some(cbf) if plain => cbf.ln_counter_product(h),
                    _ => f64::NEG_INFINITY,
                };
                self.probes.push(Probe {
                    plain,
                    insertion,
                    ln_product,
                });
            }
        }
        self.outcomes_pending = true;
        for &e in &self.scored_each_query {
            let Some(spec) = self.plan.evaluators.get(e) else {
                continue;
            };
            let (Some(d), Some(&p)) = (
                self.directories.get(spec.directory),
                self.probes.get(spec.directory),
            ) else {
                continue;
            };
            let (positive, skipped) = match spec.variant {
                Variant::Posterior => {
                    let alpha = spec.alpha.unwrap_or_else(|| self.cfg.alpha_of(c));
                    // The logs kept for this class's prior, or (never in
                    // a plan with a posterior evaluator, which keeps them
                    // current) taken afresh: the answer never rests on
                    // the cache being current.
                    let logs = match self.prior_logs.get(c) {
                        Some(&l) if l.prior().to_bits() == prior.to_bits() => l,
                        _ => paradox::PriorLogs::new(prior),
                    };
                    let decided = d
                        .counting
                        .as_ref()
                        .is_some_and(|f| f.decide_with_prior_logs(p.ln_product, logs, alpha));
                    (decided, false)
                }
                Variant::Product => (
                    SelectiveCountingFilter::<CountingBloomFilter>::reaches_ln_bound(
                        p.ln_product,
                        self.product_bounds[e],
                    ),
                    false,
                ),
                bloom => {
                    let skips = d.query.skips(prior, self.thresholds[e][c]);
                    bloom
                        .bloom_answer(p.plain, p.insertion, skips)
                        .unwrap_or((false, false))
                }
            };
            let err = &mut self.tally.errors[e][c];
            err.false_positives += u64::from(positive && !member);
            err.false_negatives += u64::from(!positive && member);
            err.skipped += u64::from(skipped);
        }
    }

    /// Scores the queries counted in `outcomes` for every Bloom evaluator,
    /// with the skip decisions in force when they were answered, and
    /// empties the cells. Called before a skip decision changes
    /// ([`SelectiveShard::refresh_skips`]), before the live gauges read
    /// the tally, and at the end.
    fn score_outcomes(&mut self) {
        if !self.outcomes_pending {
            return;
        }
        self.outcomes_pending = false;
        let classes = self.tally.classes.len();
        for &e in &self.scored_later {
            let (Some(spec), Some(errors)) =
                (self.plan.evaluators.get(e), self.tally.errors.get_mut(e))
            else {
                continue;
            };
            for (c, err) in errors.iter_mut().enumerate() {
                let Some(cell) = self.outcomes.get(spec.directory * classes + c) else {
                    continue;
                };
                let skips = self.skips.get(e * classes + c).copied().unwrap_or(false);
                for (i, &n) in cell.iter().enumerate() {
                    let (plain, insertion, member) = (i & 1 != 0, i & 2 != 0, i & 4 != 0);
                    if let Some((positive, skipped)) =
                        spec.variant.bloom_answer(plain, insertion, skips)
                    {
                        err.false_positives += n * u64::from(positive && !member);
                        err.false_negatives += n * u64::from(!positive && member);
                        err.skipped += n * u64::from(skipped);
                    }
                }
            }
        }
        self.outcomes.fill([0; 8]);
    }

    /// Sets `skips` for the Bloom evaluators from the priors and the
    /// thresholds in force, after scoring the queries counted so far if
    /// any decision changes. Called whenever the priors or the thresholds
    /// change. The counts only wait for a change of decision, not of the
    /// priors: queries answered under the same decisions score alike, and
    /// on a sparse trace the priors change many times a round (about 16
    /// on the bundled trace tiled, BENCHMARKS.md's sixty-seventh round)
    /// while the decisions mostly stay. A directory not built yet (a cache window)
    /// leaves its evaluators' cells as they are: no query reads them
    /// before [`SelectiveShard::build`] sets them.
    fn refresh_skips(&mut self) {
        let classes = self.tally.classes.len();
        let changed = self.scored_later.iter().any(|&e| {
            (0..classes).any(|c| {
                matches!(self.decides_skip(e, c),
                    Some(s) if self.skips.get(e * classes + c) != Some(&s))
            })
        });
        if !changed {
            return;
        }
        self.score_outcomes();
        for i in 0..self.scored_later.len() {
            let e = self.scored_later[i];
            for c in 0..classes {
                if let (Some(s), Some(cell)) =
                    (self.decides_skip(e, c), self.skips.get_mut(e * classes + c))
                {
                    *cell = s;
                }
            }
        }
    }

    /// Whether Selective query skips class `c`'s queries for evaluator
    /// `e` at the priors and thresholds in force (000 §IV-C); `None`
    /// before the evaluator's directory is built.
    fn decides_skip(&self, e: usize, c: usize) -> Option<bool> {
        let spec = self.plan.evaluators.get(e)?;
        let d = self.directories.get(spec.directory)?;
        let threshold = *self.thresholds.get(e)?.get(c)?;
        let prior = self.priors.get(c).copied().unwrap_or(1.0);
        Some(d.query.skips(prior, threshold))
    }
}

/// The cell of [`SelectiveShard`]'s `outcomes` for a query's answers: the
/// plain filter's (bit 0), the Selective-insertion filter's (bit 1), and
/// whether the flow is a member (bit 2).
#[inline]
fn outcome_index(plain: bool, insertion: bool, member: bool) -> usize {
    usize::from(plain) | usize::from(insertion) << 1 | usize::from(member) << 2
}

/// How many records ahead the selective stage prefetches a record's slots
/// in its flow sets (into L2: [`FlowSet::prefetch`]).
///
/// Measured on the benchmark trace (`--threads 1`, all stages, truth off,
/// the report's per-stage p50 over 512, medians of 7 alternating runs;
/// BENCHMARKS.md, forty-eighth round): 4 ahead into L1, as before, 41.7 ns
/// a packet; 12 ahead into L1 36.5; 12, 16 and 24 ahead into L2 34.9,
/// 35.4 and 35.3.
const PREFETCH_AHEAD: usize = 12;

impl ShardStage for SelectiveShard {
    type Tally = SelectiveTally;

    #[inline]
    fn process(&mut self, batch: RecordBatch<'_>, _events: &mut Vec<Event>) {
        let records = batch.records();
        for (i, r) in records.iter().enumerate() {
            if let Some(next) = records.get(i + PREFETCH_AHEAD) {
                // Both sets: a record of the cache window inserts into the
                // cache set, one of the query window looks it up there and
                // (per-flow queries) inserts into the query set; which
                // window the record falls in is not known until it is
                // handled, and a needless prefetch costs only its issue.
                self.cache.prefetch(next.hash);
                self.queried.prefetch(next.hash);
            }
            self.handle(r);
        }
        if self.live.is_some() {
            self.score_outcomes();
        }
        if let Some(live) = self.live.as_mut() {
            live.publish(&self.tally);
        }
    }

    fn apply(&mut self, update: &(dyn std::any::Any + Send + Sync)) {
        if let Some(u) = update.downcast_ref::<PriorUpdate>() {
            for (p, &v) in self.priors.iter_mut().zip(&u.priors) {
                *p = v;
            }
            // Empty unless a posterior evaluator will read them.
            for (logs, &v) in self.prior_logs.iter_mut().zip(&u.priors) {
                *logs = paradox::PriorLogs::new(v);
            }
            self.refresh_skips();
        }
    }

    fn finish(mut self) -> SelectiveTally {
        self.score_outcomes();
        self.end_round();
        self.tally
    }
}

impl SelectiveStage {
    /// The main variants (no sweeps) come first in the plan.
    fn main_variants(&self) -> usize {
        self.plan
            .evaluators
            .iter()
            .take_while(|e| e.sweep.is_none())
            .count()
    }

    /// The live gauges, their selective section set up, in a live run.
    fn gauges(&self, ctx: &ShardContext) -> Option<Arc<super::gauges::Gauges>> {
        let g = ctx.gauges.clone()?;
        g.selective.get_or_init(|| {
            let main = &self.plan.evaluators[..self.main_variants()];
            let g = super::gauges::SelectiveGauges::new(
                main.iter().map(|e| e.variant.to_string()).collect(),
                (0..ctx.classes).map(|c| self.cfg.alpha_of(c)).collect(),
            );
            for p in &g.priors {
                p.store(
                    self.cfg.prior_default.to_bits(),
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
            g
        });
        Some(g)
    }
}

/// The priors for a round, sent by the coordinator to every shard when the
/// round's query window opens.
#[derive(Clone, Debug)]
struct PriorUpdate {
    priors: Vec<f64>,
}

/// The selective stage's coordinator: it samples queries over all shards,
/// keeps the pooled per-class priors ([`RoundPriors`]), and sends each
/// round's priors to every shard when the round's query window opens.
/// Every shard therefore answers a round with the same priors, estimated
/// from every shard's samples of the rounds before, whatever the number of
/// threads.
struct PriorCoordinator {
    cache_window: WindowSpec,
    /// Rounds of a cache window and a query window.
    rounds: PeriodCursor,
    query_unit: QueryUnit,
    default: f64,
    state: Option<(u64, Phase)>,
    /// The phase of `state` (the cache window before the first record).
    phase: Phase,
    /// The positions of `state`'s phase: a record in `phase_start..
    /// phase_end` needs no [`PriorCoordinator::advance`] (empty before the
    /// first record).
    phase_start: u64,
    phase_end: u64,
    sampler: PriorSampler,
    priors: RoundPriors,
    /// Sampled flows of this round's cache window.
    cache: CappedFlowSet<()>,
    /// Sampled flows already queried this round (per-flow queries).
    queried: CappedFlowSet<()>,
    /// Query packets per class this round (to plan the next one's rates).
    round_queries: Vec<u64>,
    /// Per class, the round's sample count at which the priors are sent
    /// again (doubling from [`FIRST_UPDATE_SAMPLES`]).
    next_update: Vec<u64>,
    /// A class reached its mark: the priors go out before the next record.
    update_due: bool,
    /// Sampled records whose slots are being fetched, answered in order
    /// ([`super::lookahead`]).
    lookahead: SampleLookahead,
    tally: SelectiveTally,
    /// In a live run: where the priors in force are published.
    gauges: Option<Arc<super::gauges::Gauges>>,
}

/// Within a query window the coordinator re-sends the priors each time a
/// class's samples in the round reach 32, 64, 128, ...: a first round is
/// then answered with what its own earlier queries showed, as 000 §IV-D's
/// running estimate would, instead of the uninformed default throughout.
/// Doubling keeps the broadcasts (each an entry in every shard's pending
/// batch) to a few per class and round. The update is sent before the record that
/// would cross the mark is dispatched, so a query never sees its own
/// membership.
const FIRST_UPDATE_SAMPLES: u64 = 32;

impl PriorCoordinator {
    fn new(stage: &SelectiveStage, classes: usize) -> PriorCoordinator {
        let cfg = &stage.cfg;
        PriorCoordinator {
            cache_window: cfg.cache_window,
            rounds: PeriodCursor::new(stage.period),
            query_unit: cfg.query_unit,
            default: cfg.prior_default,
            state: None,
            phase: Phase::Cache,
            phase_start: 0,
            phase_end: 0,
            sampler: PriorSampler::new(classes, cfg.prior_sample, cfg.prior_min_samples),
            priors: RoundPriors::new(classes, 1.0 - cfg.prior_smoothing),
            cache: CappedFlowSet::new(cfg.max_flows),
            queried: CappedFlowSet::new(cfg.max_flows),
            round_queries: vec![0; classes],
            next_update: vec![FIRST_UPDATE_SAMPLES; classes],
            update_due: false,
            lookahead: SampleLookahead::new(cfg.prior_lookahead, classes),
            tally: SelectiveTally {
                classes: vec![QueryClassTally::default(); classes],
                ..SelectiveTally::default()
            },
            gauges: None,
        }
    }
}

impl PriorCoordinator {
    /// The priors every shard uses from now on: the pooled rounds and the
    /// current round's samples so far, or the default for a class with none.
    fn update(&self) -> Broadcast {
        let priors = (0..self.round_queries.len())
            .map(|c| {
                self.priors
                    .estimate_live(c)
                    .map_or(self.default, |e| e.prior)
            })
            .collect::<Vec<f64>>();
        if let Some(g) = self.gauges.as_ref().and_then(|g| g.selective.get()) {
            for (a, p) in g.priors.iter().zip(&priors) {
                a.store(p.to_bits(), std::sync::atomic::Ordering::Relaxed);
            }
        }
        Arc::new(PriorUpdate { priors })
    }

    /// Places `pos` in its round and phase when it left the phase the last
    /// record was in, or an update is due: closes a round that ended,
    /// opens the new phase, and returns the priors to send, if any. The
    /// phase's span of positions is kept in `phase_start..phase_end`, so
    /// that [`Coordinator::observe`] calls this only at a boundary. (A
    /// position before the span, which the engine's monotone trace time
    /// and sequence numbers never give, would be placed afresh here.)
    #[inline(never)]
    fn advance(&mut self, pos: u64) -> Option<Broadcast> {
        let (round, offset) = self.rounds.locate(pos);
        let span = self.cache_window.span();
        let phase = if offset < span {
            Phase::Cache
        } else {
            Phase::Query
        };
        let mut update = None;
        if self.state != Some((round, phase)) {
            if self.state.map(|s| s.0) != Some(round) {
                if self.state.is_some() {
                    self.priors.end_round();
                    self.sampler.plan(&self.round_queries);
                    self.round_queries.fill(0);
                }
                if self.cache.level().max(self.queried.level()) > 0 {
                    self.tally.flood.prior_rounds += 1;
                }
                self.cache.clear();
                self.queried.clear();
                self.next_update.fill(FIRST_UPDATE_SAMPLES);
            }
            if phase == Phase::Query {
                update = Some(self.update());
            }
            self.update_due = false;
            self.state = Some((round, phase));
        } else if self.update_due {
            self.update_due = false;
            update = Some(self.update());
        }
        // The round is `[start, start + period)` and its cache window the
        // first `span` positions of it; both ends saturate, as the cursor's
        // do, so that a position past them is placed afresh, never wrongly.
        let start = pos - offset;
        let end = start.saturating_add(self.rounds.period());
        let cache_end = start.saturating_add(span).min(end);
        (self.phase_start, self.phase_end) = match phase {
            Phase::Cache => (start, cache_end),
            Phase::Query => (cache_end, end),
        };
        self.phase = phase;
        update
    }

    /// [`Coordinator::observe`] for a record that left the last record's
    /// phase, or with an update due: apart, so that the common path keeps
    /// no value across a call and saves no registers.
    #[inline(never)]
    fn observe_at_boundary(&mut self, r: &PacketRecord, pos: u64) -> Option<Broadcast> {
        // A new phase or round reads and clears what the held-back records
        // change: they are answered first.
        self.answer_held();
        let update = self.advance(pos);
        self.count(r);
        update
    }

    /// A record's own part, in the phase [`PriorCoordinator::advance`]
    /// placed it in: a query is counted for its class, and a sampled
    /// record goes to the cache set or is checked against it.
    #[inline(always)]
    fn count(&mut self, r: &PacketRecord) {
        let c = usize::from(r.class);
        match self.phase {
            Phase::Cache => {
                if self.sampler.sampled(c, r.hash) {
                    self.hold_cache_sampled(r.hash);
                }
            }
            Phase::Query => {
                if let Some(q) = self.round_queries.get_mut(c) {
                    *q += 1;
                }
                // The sampling test first: the per-flow dedup set is only
                // touched for sampled flows.
                if self.sampler.sampled(c, r.hash) {
                    self.hold_query_sampled(c, r.hash);
                }
            }
        }
    }

    /// A sampled record of a cache window: its slot in the cache set is
    /// fetched and the record held back; the oldest held record is
    /// answered when the lookahead is full.
    #[inline(never)]
    fn hold_cache_sampled(&mut self, h: u64) {
        self.cache.prefetch(h);
        if let Some(oldest) = self.lookahead.push(Sampled::Cache(h)) {
            self.answer(oldest);
        }
    }

    /// A sampled query: held back like a cache record, unless the
    /// class's samples could reach its update mark with it and the
    /// class's queries already held. Then every held record is answered
    /// and this one too, at once: the update it may make due goes out
    /// before the next record, as it did when each record was answered as
    /// it came, and a held query can never make one due.
    #[inline(never)]
    fn hold_query_sampled(&mut self, c: usize, h: u64) {
        let mark = self.next_update.get(c).copied().unwrap_or(0);
        let reach = self.priors.round_samples(c) + self.lookahead.queued_queries(c) + 1;
        if reach >= mark || self.lookahead.capacity() == 0 {
            self.answer_held();
            self.query_sampled(c, h);
            return;
        }
        self.cache.prefetch(h);
        if self.query_unit == QueryUnit::Flow {
            self.queried.prefetch(h);
        }
        if let Some(oldest) = self.lookahead.push(Sampled::Query { class: c, hash: h }) {
            self.answer(oldest);
        }
    }

    /// Answers a held record.
    #[inline]
    fn answer(&mut self, s: Sampled) {
        match s {
            Sampled::Cache(h) => self.cache_sampled(h),
            Sampled::Query { class, hash } => {
                self.query_sampled(class, hash);
                debug_assert!(!self.update_due, "a held query reached its mark");
            }
        }
    }

    /// Answers every held record, oldest first.
    fn answer_held(&mut self) {
        while let Some(s) = self.lookahead.pop() {
            self.answer(s);
        }
    }

    /// A sampled record of a cache window: its flow joins the round's set.
    #[inline(never)]
    fn cache_sampled(&mut self, h: u64) {
        self.cache.insert(h, ());
    }

    /// A sampled query: checked against the round's cache set once per
    /// query unit, counted into the priors, and an update marked due when
    /// the class's samples reach their next mark.
    #[inline(never)]
    fn query_sampled(&mut self, c: usize, h: u64) {
        if self.cache.admits(h)
            && match self.query_unit {
                QueryUnit::Packet => self.queried.admits(h),
                QueryUnit::Flow => self.queried.insert(h, ()) == Admission::Inserted,
            }
        {
            let member = self.cache.contains(h);
            self.priors.record(c, member);
            if let Some(t) = self.tally.classes.get_mut(c) {
                t.sampled += 1;
                t.sampled_members += u64::from(member);
            }
            // Only this class's count moved: check its mark alone, and send
            // the update before the next record.
            if let Some(next) = self.next_update.get_mut(c)
                && self.priors.round_samples(c) >= *next
            {
                *next = next.saturating_mul(2);
                self.update_due = true;
            }
        }
    }
}

impl Coordinator<SelectiveTally> for PriorCoordinator {
    // The source thread calls this for every keyed record, through two
    // dynamic calls. What most records need is two comparisons (still in
    // the phase the last record was in, no update due), a class count and
    // the sampling test; everything else (a new phase or round, an update
    // to send, a sampled record) is in functions of its own, so that the
    // common path is a leaf that saves no registers. As one body, placing
    // every record in its round and phase afresh and saving the registers
    // its rare paths use, it took 95 instructions a record on the
    // benchmark trace, sampled records included; split, 61 (callgrind;
    // BENCHMARKS.md, thirty-fourth round).
    fn observe(&mut self, r: &PacketRecord) -> Option<Broadcast> {
        let pos = self.cache_window.position(r.time_ns, r.seq);
        if pos < self.phase_start || pos >= self.phase_end || self.update_due {
            return self.observe_at_boundary(r, pos);
        }
        self.count(r);
        None
    }

    fn finish(mut self: Box<Self>) -> SelectiveTally {
        self.answer_held();
        if self.cache.level().max(self.queried.level()) > 0 {
            self.tally.flood.prior_rounds += 1;
        }
        self.priors.end_round();
        for (c, t) in self.tally.classes.iter_mut().enumerate() {
            t.prior_final = self.priors.estimate(c);
        }
        self.tally
    }
}
