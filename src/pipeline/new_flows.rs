//! The new-flow stage: new flows, flagged by a recycling Bloom filter (004).
//!
//! Each shard owns a [`RecyclingBloomFilter`] of `bits / shards` bits (a
//! two-phase filter splits those into an active and a frozen half). A
//! packet is *new* when the filter had not seen its key (some position
//! unset, in both halves for two phases); every packet is inserted.
//!
//! Ground truth (optional) remembers, per flow, when it was last seen: a
//! packet is truly new when its key was never seen or was idle for longer
//! than the horizon. A false positive is a truly new packet the filter
//! called seen; a false negative is a packet of a live flow the filter
//! called new (it forgot the flow when it recycled). The three averaging
//! variants of 004 §II-E are reported: count-instance `ΣF_i / Σ1` (false
//! positives over truly new flows), count-first `ΣF_i / Ση(i)` (over all
//! packets) and count-each `ΣF_i η(i) / Ση(i)` (every packet of a flow
//! instance whose first packet was a false positive, over all packets).

use super::config::{ConfigError, defaults, in_range};
use super::deferred::Deferred;
use super::event::{Event, EventKind, NewFlowEvent};
use super::rate::{binomial_se, opt_ratio};
use super::record::{PacketRecord, RecordBatch};
use super::stage::{ReportContext, ShardContext, ShardStage, Stage, Tally};
use crate::dissect::FlowKey;
use crate::filter::{BitLayout, MAX_K, PreparedMessage, RecyclePolicy, RecyclingBloomFilter};
use crate::ingest::Timestamp;
use crate::model::blocked_recycling;
use crate::model::recycling::{self, Hashing, SizingMethod};
use crate::report::{NewFlowConfigInfo, NewFlowNote, NewFlowRates, NewFlowReport};
use crate::truth::FlowSlots;

/// How a recycling filter decides to recycle, before it is resolved for a
/// number of shards.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RecycleSpec {
    /// Bits set in a shard's active half: a fraction of its bits when below
    /// 1, otherwise a total over all shards (split evenly).
    Sigma(f64),
    /// Bit-setting insertions, in all shards together (split evenly).
    Insertions(u64),
    /// Nanoseconds of trace time (the same in every shard).
    Time(u64),
    /// The largest sigma whose model average rate (004 eq. 18 or 26) is at
    /// most this.
    TargetFpr(f64),
}

/// Why a recycle policy could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad recycle policy '{0}': expected sigma:S (a fraction below 1 or a bit count), n:N or time:T (such as time:10s)"
)]
pub struct RecycleSpecError(pub String);

impl std::str::FromStr for RecycleSpec {
    type Err = RecycleSpecError;
    /// `sigma:S`, `n:N`, `time:T` (a duration such as `10s`).
    ///
    /// ```
    /// use flowsieve::pipeline::RecycleSpec;
    /// assert_eq!("sigma:0.5".parse(), Ok(RecycleSpec::Sigma(0.5)));
    /// assert_eq!("time:10s".parse(), Ok(RecycleSpec::Time(10_000_000_000)));
    /// assert!("sigma:-1".parse::<RecycleSpec>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<RecycleSpec, RecycleSpecError> {
        let bad = || RecycleSpecError(s.to_string());
        let (kind, v) = s.split_once(':').ok_or_else(bad)?;
        match kind {
            "sigma" => {
                let x: f64 = v.parse().map_err(|_| bad())?;
                if !x.is_finite() || x <= 0.0 {
                    return Err(bad());
                }
                Ok(RecycleSpec::Sigma(x))
            }
            "n" => match v.parse::<u64>() {
                Ok(n) if n > 0 => Ok(RecycleSpec::Insertions(n)),
                _ => Err(bad()),
            },
            "time" => match super::window::parse_duration_ns(v) {
                Some(ns) if ns > 0 => Ok(RecycleSpec::Time(ns)),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

/// The new-flow stage's parameters. Sizes are totals over all shards.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NewFlowConfig {
    /// Bits in all (split across shards, then into two halves if two-phase).
    pub bits: usize,
    /// Positions per key.
    pub k: usize,
    /// When each shard's filter recycles.
    pub recycle: RecycleSpec,
    /// Two phases (an active and a frozen half).
    pub two_phase: bool,
    /// Re-insert the key that triggered a recycle.
    pub retaining: bool,
    /// Colliding or non-colliding positions.
    pub hashing: Hashing,
    /// Where a key's positions lie: anywhere in the phase (004's filter) or
    /// in one 512-bit block (see [`RecyclingBloomFilter::with_layout`]),
    /// with its own model ([`crate::model::blocked_recycling`]).
    pub layout: BitLayout,
    /// Idle gap after which a key's next packet is truly new again (truth);
    /// `None`: only a key's first packet in the trace is new.
    pub horizon_ns: Option<u64>,
    /// Slots per shard of the filter's exact front cache (0: none). It
    /// changes no answer, only the work (see
    /// [`RecyclingBloomFilter::with_front_cache`]).
    pub front_cache: usize,
    /// Whether the report carries 004's model rate (`true`, the default).
    /// `false` leaves it out, with [`NewFlowNote::ModelNotAsked`], and
    /// starts no computation for it; every other figure is the same.
    ///
    /// Why: for an explicit sigma the model is 004's chain, which runs on
    /// a thread of its own while the packets are read (about 16 ms of CPU
    /// at the default 8 Mi bits and `sigma:0.5`, BENCHMARKS.md's
    /// ninety-eighth round). On a two-core machine
    /// that thread takes its time from the source and the workers. The
    /// binary turns the model off when nothing reads the report (`-q`
    /// with no `--json`, `--csv` or `--plot`), as with `-q --events`.
    pub model: bool,
}

impl Default for NewFlowConfig {
    fn default() -> NewFlowConfig {
        NewFlowConfig {
            bits: defaults::RBF_BITS,
            k: defaults::RBF_K,
            recycle: RecycleSpec::TargetFpr(defaults::TARGET_FPR),
            two_phase: false,
            retaining: defaults::RETAINING,
            hashing: Hashing::Colliding,
            layout: BitLayout::Scattered,
            horizon_ns: None,
            front_cache: defaults::FRONT_CACHE_SLOTS,
            model: true,
        }
    }
}

/// The most front-cache slots a shard may have (16 MiB of slots).
pub const MAX_FRONT_CACHE_SLOTS: usize = 1 << 20;

/// The new-flow stage, validated and resolved for a number of shards:
/// each shard's filter and the model's prediction for it.
#[derive(Clone, Debug, PartialEq)]
pub struct NewFlowStage {
    cfg: NewFlowConfig,
    /// Bits per phase of one shard's filter.
    phase_bits: usize,
    policy: RecyclePolicy,
    /// 004's long-term average false-positive rate (count-instance) for
    /// this filter, when the model covers its policy.
    model_fp_rate: Deferred<Option<f64>>,
    /// How that rate is computed, for a sigma policy (explicit or sized).
    model_method: Option<SizingMethod>,
    bytes: u64,
}

impl NewFlowStage {
    /// Bits per phase of one shard's filter.
    pub fn phase_bits(&self) -> usize {
        self.phase_bits
    }
    /// Each shard's recycle policy.
    pub fn policy(&self) -> RecyclePolicy {
        self.policy
    }
    /// 004's average false-positive rate for this filter, where the model
    /// covers the policy.
    pub fn model_fp_rate(&self) -> Option<f64> {
        self.model_fp_rate.get()
    }
    /// Bytes of filter bits over all shards.
    pub fn memory_bytes(&self) -> u64 {
        self.bytes
    }
}

impl NewFlowConfig {
    /// Checks the stage's fields, splits the filter across `shards`, sizes
    /// sigma for a target rate, and computes the model's rate.
    pub fn validate(&self, shards: usize) -> Result<NewFlowStage, ConfigError> {
        let shards = shards.max(1);
        in_range("new_flows.k", self.k, 1, MAX_K)?;
        if let Some(h) = self.horizon_ns {
            in_range("new_flows.horizon_ns", h, 1, u64::MAX)?;
        }
        let per_shard = self.bits / shards;
        let m = if self.two_phase {
            per_shard / 2
        } else {
            per_shard
        };
        let k = self.k;
        if m < 2 * k {
            return Err(ConfigError::invalid(
                "new_flows.bits",
                format!(
                    "{} bits leave {m} per shard{} for {shards} shards, fewer than 2k = {}",
                    self.bits,
                    if self.two_phase { " and phase" } else { "" },
                    2 * k
                ),
            ));
        }
        let (mm, kk) = (m as u64, k as u32);
        let (hashing, retaining, two_phase) = (self.hashing, self.retaining, self.two_phase);
        let blocked = self.layout == BitLayout::Blocked;
        let chain = move |sigma: u64| {
            recycling::average_fpr(mm, kk, sigma, hashing, retaining, two_phase).ok()
        };
        // The chain costs O(sigma k^2): about 8 ms at 2^18 bits per phase,
        // k = 4 and sigma near m (`flowsieve model recycle`). Past a millisecond's work (2^14 bits at
        // k = 4) it runs in the background, so the first packet never waits
        // for a figure only the report needs. Past `EXACT_CHAIN_MAX_WORK`
        // it is not solved at all: the report would wait for it (20 s for
        // a 2^24-bit phase at k = 32 and sigma:0.9), and its continuum
        // limit is the same figure to about k/m, which `flowsieve model
        // recycle` gives there too.
        let fpr = |sigma: u64| {
            // Not asked for: no thread is started (see `NewFlowConfig::model`).
            if !self.model {
                return (Deferred::ready(None), None);
            }
            if blocked {
                // (R3) or (R4): a mixture over the block loads, a
                // millisecond or so at a usual sigma but up to tens of ms
                // for one near m (its cycles hold thousands of messages a
                // block): in the background, as the chain.
                let model = Deferred::spawn(None, move || {
                    blocked_recycling::blocked_average_fpr(
                        mm, kk, sigma, hashing, retaining, two_phase,
                    )
                    .ok()
                });
                return (model, Some(SizingMethod::BlockedMixture));
            }
            let method = recycling::explicit_sigma_method(mm, kk, sigma);
            let model = match method {
                Some(SizingMethod::Chain)
                    if mm.saturating_mul(u64::from(kk).pow(2)) > (1 << 14) * 16 =>
                {
                    Deferred::spawn(None, move || chain(sigma))
                }
                Some(SizingMethod::Chain) => Deferred::ready(chain(sigma)),
                Some(SizingMethod::Continuum) => {
                    Deferred::ready(Some(recycling::continuum_rates(mm, kk, sigma, two_phase).0))
                }
                // Not reached with k <= MAX_K (see `explicit_sigma_method`).
                _ => Deferred::ready(None),
            };
            (model, method)
        };
        let (policy, (model, model_method)) = match self.recycle {
            RecycleSpec::Sigma(x) => {
                let sigma = if x < 1.0 {
                    (x * m as f64).round()
                } else {
                    (x / shards as f64).round()
                };
                if sigma.is_nan() || sigma >= mm as f64 {
                    return Err(ConfigError::invalid(
                        "new_flows.recycle",
                        format!(
                            "sigma {} per shard is not below the {mm} bits of a shard's phase",
                            crate::model::query::shown(sigma)
                        ),
                    ));
                }
                // A sigma of 0 would recycle at every insertion: a filter
                // that remembers nothing and calls every packet new.
                if sigma < 1.0 {
                    let read = if x < 1.0 {
                        format!("of a shard's {mm} bits rounds to 0")
                    } else {
                        format!(
                            "is read as bits in all (a fraction is below 1), 0 per shard for {shards} shards"
                        )
                    };
                    return Err(ConfigError::invalid(
                        "new_flows.recycle",
                        format!(
                            "sigma:{} {read}: the filter would recycle at every insertion",
                            crate::model::query::shown(x)
                        ),
                    ));
                }
                let sigma = sigma as u64;
                (RecyclePolicy::Sigma(sigma), fpr(sigma))
            }
            RecycleSpec::TargetFpr(target) => {
                if !(target > 0.0 && target < 1.0) {
                    return Err(ConfigError::invalid(
                        "new_flows.recycle",
                        format!(
                            "a target rate must be in (0, 1) (got {})",
                            crate::model::query::shown(target)
                        ),
                    ));
                }
                let size = if blocked {
                    blocked_recycling::blocked_sigma_for_target
                } else {
                    recycling::sigma_for_target
                };
                let sized = size(
                    mm,
                    kk,
                    self.hashing,
                    self.retaining,
                    self.two_phase,
                    target,
                )
                .ok_or_else(|| {
                    ConfigError::invalid(
                        "new_flows.recycle",
                        format!("no sigma reaches a target rate of {target} with {mm} bits per shard phase and k = {k}"),
                    )
                })?;
                (
                    RecyclePolicy::Sigma(sized.sigma),
                    (Deferred::ready(Some(sized.avg_fpr)), Some(sized.method)),
                )
            }
            RecycleSpec::Insertions(n_all) => {
                let n = n_all / shards as u64;
                if n == 0 {
                    return Err(ConfigError::invalid(
                        "new_flows.recycle",
                        format!(
                            "n:{n_all} leaves 0 insertions per shard for {shards} shards (give at least {shards})"
                        ),
                    ));
                }
                // eq. (3): the average rate of an N-bounded one-phase filter.
                // The blocked layout has no N-bounded model.
                let model = (!self.two_phase && !blocked).then(|| recycling::f_average(mm, kk, n));
                (RecyclePolicy::Insertions(n), (Deferred::ready(model), None))
            }
            RecycleSpec::Time(ns) => (RecyclePolicy::Time(ns), (Deferred::ready(None), None)),
        };
        // A sized sigma's rate comes free with the sizing, but a report
        // that asked for no model gets none, whatever the policy.
        let (model, model_method) = if self.model {
            (model, model_method)
        } else {
            (Deferred::ready(None), None)
        };
        in_range(
            "new_flows.front_cache",
            self.front_cache,
            0,
            MAX_FRONT_CACHE_SLOTS,
        )?;
        // The filter's bits, plus each shard's cache slots (16 bytes each).
        let bytes = (self.bits as u64).div_ceil(8).saturating_add(
            (self.front_cache.next_power_of_two() as u64 * 16).saturating_mul(shards as u64)
                * u64::from(self.front_cache > 0),
        );
        Ok(NewFlowStage {
            cfg: *self,
            phase_bits: m,
            policy,
            model_fp_rate: model,
            model_method,
            bytes,
        })
    }
}

impl Stage for NewFlowStage {
    const NAME: &'static str = "new_flows";
    type Shard = NewFlowShard;
    type Section = NewFlowReport;

    fn shard(&self, ctx: &ShardContext) -> NewFlowShard {
        let mut shard =
            NewFlowShard::new(self, ctx.classes, ctx.truth, ctx.wants(EventKind::NewFlow));
        shard.gauges = ctx.gauges.clone().map(|g| {
            let m = shard.filter.m() as u64;
            g.new_flows
                .get_or_init(|| super::gauges::NewFlowGauges::new(ctx.shards, m));
            (g, ctx.shard)
        });
        shard
    }

    fn report(&self, t: NewFlowTally, ctx: &ReportContext) -> NewFlowReport {
        let truth = ctx.truth;
        let mut all = NewFlowClassTally::default();
        for c in &t.classes {
            all.add(c);
        }
        let n = &self.cfg;
        let model = self.model_fp_rate.get();
        let mut notes = Vec::new();
        if !n.model {
            notes.push(NewFlowNote::ModelNotAsked);
        } else if model.is_none() {
            notes.push(match self.policy {
                RecyclePolicy::Time(_) => NewFlowNote::NoModelForTimePolicy,
                RecyclePolicy::Insertions(_) if n.layout == BitLayout::Blocked => {
                    NewFlowNote::NoModelForBlockedInsertions
                }
                RecyclePolicy::Insertions(_) => NewFlowNote::NoModelForTwoPhaseInsertions,
                RecyclePolicy::Sigma(_) => NewFlowNote::NoModelForSigma,
            });
        }
        if n.horizon_ns.is_some() {
            notes.push(NewFlowNote::HorizonNotModelled);
        }
        let names = ctx.classifier.names();
        NewFlowReport {
            config: NewFlowConfigInfo {
                bits: n.bits,
                bits_per_shard_phase: self.phase_bits,
                k: n.k,
                policy: self.policy,
                two_phase: n.two_phase,
                retaining: n.retaining,
                colliding: n.hashing == Hashing::Colliding,
                layout: n.layout,
                horizon_s: n.horizon_ns.map(|h| h as f64 * 1e-9),
                // No method where the chain has no solution (a retaining
                // filter with sigma below k): there is no rate to explain.
                model_method: model.and(self.model_method),
            },
            overall: new_flow_rates(None, &all, truth, t.recycles, model),
            classes: names
                .iter()
                .zip(&t.classes)
                .map(|(name, c)| new_flow_rates(Some(name.clone()), c, truth, t.recycles, model))
                .collect(),
            dropped_triggers: t.dropped_triggers,
            false_negatives_before_first_recycle: truth
                .then_some(t.false_negatives_before_first_recycle),
            notes,
        }
    }
}

fn new_flow_rates(
    class: Option<String>,
    t: &NewFlowClassTally,
    truth: bool,
    recycles: u64,
    model: Option<f64>,
) -> NewFlowRates {
    let inst = opt_ratio(t.false_positives, t.true_new).filter(|_| truth);
    NewFlowRates {
        class,
        packets: t.packets,
        true_new: truth.then_some(t.true_new),
        reported_new: t.reported_new,
        false_positives: truth.then_some(t.false_positives),
        false_negatives: truth.then_some(t.false_negatives),
        fp_rate_instance: inst,
        fp_rate_instance_se: inst.map(|p| binomial_se(p, t.true_new)),
        fp_rate_first: opt_ratio(t.false_positives, t.packets).filter(|_| truth),
        fp_rate_each: opt_ratio(t.fp_each, t.packets).filter(|_| truth),
        fn_rate: opt_ratio(t.false_negatives, t.packets.saturating_sub(t.true_new))
            .filter(|_| truth),
        recycles,
        model_fp_rate: model,
    }
}

/// Per-class tallies of the new-flow stage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewFlowClassTally {
    /// Packets seen.
    pub packets: u64,
    /// Packets the filter called new.
    pub reported_new: u64,
    /// Truly new packets (truth only).
    pub true_new: u64,
    /// Truly new, called seen.
    pub false_positives: u64,
    /// Called new, but the flow was live.
    pub false_negatives: u64,
    /// Packets of flow instances whose first packet was a false positive
    /// (count-each numerator).
    pub fp_each: u64,
}

impl NewFlowClassTally {
    /// Adds another tally.
    fn add(&mut self, o: &NewFlowClassTally) {
        self.packets += o.packets;
        self.reported_new += o.reported_new;
        self.true_new += o.true_new;
        self.false_positives += o.false_positives;
        self.false_negatives += o.false_negatives;
        self.fp_each += o.fp_each;
    }
}

/// The new-flow stage's whole tally.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewFlowTally {
    /// Indexed by class id.
    pub classes: Vec<NewFlowClassTally>,
    /// Recycles (clears or swaps) over all shards.
    pub recycles: u64,
    /// Messages that triggered a recycle and were dropped (non-retaining).
    pub dropped_triggers: u64,
    /// False negatives before the shard's first recycle (must be 0).
    pub false_negatives_before_first_recycle: u64,
}

impl Tally for NewFlowTally {
    fn merge(&mut self, o: NewFlowTally) {
        if self.classes.len() < o.classes.len() {
            self.classes
                .resize(o.classes.len(), NewFlowClassTally::default());
        }
        for (a, b) in self.classes.iter_mut().zip(&o.classes) {
            a.add(b);
        }
        self.recycles += o.recycles;
        self.dropped_triggers += o.dropped_triggers;
        self.false_negatives_before_first_recycle += o.false_negatives_before_first_recycle;
    }
}

/// What the ground truth remembers of a key.
#[derive(Clone, Copy, Debug)]
struct KeyState {
    last_ns: u64,
    /// The current instance's first packet was a false positive.
    fp_instance: bool,
}

/// The new-flow stage in one shard.
#[derive(Debug)]
pub struct NewFlowShard {
    filter: RecyclingBloomFilter,
    timed: bool,
    horizon_ns: Option<u64>,
    truth: Option<FlowSlots<KeyState>>,
    tally: NewFlowTally,
    events: bool,
    /// Live figures and this shard's index, in a live run.
    gauges: Option<(std::sync::Arc<super::gauges::Gauges>, usize)>,
    /// The next records' prepared tests, record `i` at `i % PREPARED`
    /// (see [`RecyclingBloomFilter::prepare`]).
    prepared: Box<[PreparedMessage; PREPARED]>,
}

impl NewFlowShard {
    fn new(stage: &NewFlowStage, classes: usize, truth: bool, events: bool) -> NewFlowShard {
        let cfg = &stage.cfg;
        NewFlowShard {
            filter: RecyclingBloomFilter::new(
                stage.phase_bits,
                cfg.k,
                stage.policy,
                cfg.hashing,
                cfg.retaining,
                cfg.two_phase,
            )
            .with_layout(cfg.layout)
            .with_front_cache(cfg.front_cache),
            timed: matches!(stage.policy, RecyclePolicy::Time(_)),
            horizon_ns: cfg.horizon_ns,
            truth: truth.then(FlowSlots::default),
            tally: NewFlowTally {
                classes: vec![NewFlowClassTally::default(); classes],
                ..NewFlowTally::default()
            },
            events,
            gauges: None,
            prepared: Box::new([PreparedMessage::default(); PREPARED]),
        }
    }

    /// Classifies and inserts one packet, whose test was prepared in slot
    /// `prepared` (`% PREPARED`) of the ring; a slot prepared for another
    /// hash is not used ([`RecyclingBloomFilter::test_and_insert_prepared`]).
    #[inline]
    fn classify(
        &mut self,
        r: &PacketRecord,
        key: Option<&FlowKey>,
        prepared: usize,
        events: &mut Vec<Event>,
    ) {
        let prepared = &self.prepared[prepared % PREPARED];
        // Only a time-bounded filter reads the clock.
        let is_new = if self.timed {
            let now = Timestamp::from_units(r.time_ns, 1_000_000_000);
            self.filter
                .test_and_insert_prepared_at(r.hash, now, prepared)
        } else {
            self.filter.test_and_insert_prepared(r.hash, prepared)
        };
        let Some(t) = self.tally.classes.get_mut(usize::from(r.class)) else {
            return;
        };
        t.packets += 1;
        t.reported_new += u64::from(is_new);
        if is_new
            && self.events
            && let Some(&key) = key
        {
            events.push(Event::NewFlow(NewFlowEvent {
                key,
                class: r.class,
                time_ns: r.time_ns,
                seq: r.seq,
            }));
        }
        let Some(truth) = self.truth.as_mut() else {
            return;
        };
        let horizon = self.horizon_ns;
        let mut fn_now = false;
        let (s, inserted) = truth.get_or_insert_with(r.hash, || KeyState {
            last_ns: r.time_ns,
            fp_instance: !is_new,
        });
        if inserted {
            t.true_new += 1;
            t.false_positives += u64::from(!is_new);
            t.fp_each += u64::from(!is_new);
        } else {
            let expired = horizon.is_some_and(|h| r.time_ns.saturating_sub(s.last_ns) > h);
            if expired {
                t.true_new += 1;
                t.false_positives += u64::from(!is_new);
                s.fp_instance = !is_new;
            } else if is_new {
                t.false_negatives += 1;
                fn_now = true;
            }
            t.fp_each += u64::from(s.fp_instance);
            s.last_ns = r.time_ns;
        }
        if fn_now && self.filter.stats().recycles == 0 {
            self.tally.false_negatives_before_first_recycle += 1;
        }
    }
}

impl ShardStage for NewFlowShard {
    type Tally = NewFlowTally;

    fn prefault(&mut self, budget: &mut usize) -> bool {
        self.filter.prefault(budget)
    }

    #[inline]
    fn process(&mut self, batch: RecordBatch<'_>, events: &mut Vec<Event>) {
        let records = batch.records();
        for (i, r) in records.iter().enumerate().take(PREPARE_AHEAD) {
            self.filter
                .prepare(r.hash, &mut self.prepared[i % PREPARED]);
        }
        for (i, r) in records.iter().enumerate() {
            if let Some(next) = records.get(i + PREFETCH_AHEAD) {
                self.filter.prefetch(next.hash);
            }
            if let Some(next) = records.get(i + PREPARE_AHEAD) {
                let slot = (i + PREPARE_AHEAD) % PREPARED;
                self.filter.prepare(next.hash, &mut self.prepared[slot]);
            }
            if let Some(t) = self.truth.as_ref()
                && let Some(next) = records.get(i + TRUTH_AHEAD)
            {
                t.prefetch(next.hash);
            }
            self.classify(r, batch.key(i), i, events);
        }
        if let Some((g, shard)) = self.gauges.as_ref()
            && let Some(nf) = g.new_flows.get()
        {
            use std::sync::atomic::Ordering::Relaxed;
            if let (Some(a), Some(r)) = (nf.active_bits.get(*shard), nf.recycles.get(*shard)) {
                a.store(self.filter.active_bits(), Relaxed);
                r.store(self.filter.stats().recycles, Relaxed);
            }
        }
    }

    fn finish(mut self) -> NewFlowTally {
        let s = self.filter.stats();
        self.tally.recycles = s.recycles;
        self.tally.dropped_triggers = s.dropped_triggers;
        self.tally
    }
}

/// How many records ahead the new-flow stage prefetches a record's
/// front-cache slot: twice [`PREPARE_AHEAD`], so that the preparation,
/// which reads the slot, finds it fetched.
const PREFETCH_AHEAD: usize = 2 * PREPARE_AHEAD;

/// How many records ahead the new-flow stage prepares a record's test
/// ([`RecyclingBloomFilter::prepare`]: the positions of a message the
/// front cache will not answer, their words fetched).
///
/// Measured on the benchmark trace (`--threads 1`, the report's per-stage
/// p50, medians of 5 alternating runs, as `benches/stage_p50.py` takes
/// them; BENCHMARKS.md, thirty-sixth round).
/// With the slot 2 ahead and nothing prepared, the stage took 44-47 ns a
/// packet with ground truth and 24-27 without. Fetching the words 3, 4, 6
/// and 8 ahead (the slot twice as far), but working the positions out
/// again at the test, gave 36, 34, 32 and 31 ns with truth; on 2 M
/// one-packet flows, where every message misses the cache, that cost 6 ns
/// more than nothing. Prepared 8 ahead and the positions handed over: 28
/// ns with truth, 20 without, and on the 2 M flows 38 against 43.
const PREPARE_AHEAD: usize = 8;

/// Prepared tests kept: more than [`PREPARE_AHEAD`], so that a record's
/// slot is not prepared again before its test, and a power of two, so that
/// `% PREPARED` is a mask.
const PREPARED: usize = 16;
const _: () = assert!(PREPARED > PREPARE_AHEAD && PREPARED.is_power_of_two());

/// How many records ahead the new-flow stage prefetches a record's slot in
/// the exact last-seen map.
const TRUTH_AHEAD: usize = 8;
