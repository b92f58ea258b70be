//! The heavy-flow stage: heavy flows by count thresholding (003) in a counting Bloom
//! filter cleared at every window boundary.
//!
//! Each shard owns one [`CountingBloomFilter`] of `counters / shards`
//! counters; a flow always lands in the same shard, so the shards together
//! behave as one filter partitioned by the flow hash, and no counter is
//! ever written by two threads (no lock, no atomic read-modify-write).
//!
//! A flow is reported the first time its estimate (the minimum of its `k`
//! counters after its own packet is counted) reaches `theta` in a window.
//! Without ground truth the shard remembers only the flows it reported in
//! the current window, so its memory grows with heavy flows, not with all
//! flows. With ground truth it keeps every flow's exact count for the
//! window and, at the window's end, scores it: a false positive is a flow
//! reported with fewer than `theta` packets, a false negative a flow with
//! `theta` or more that was never reported (impossible without saturation,
//! since an estimate is never below the count).

use super::config::{ConfigError, defaults, in_range};
use super::event::{Event, EventKind, HeavyEvent};
use super::export::ShardExporter;
use super::keyed::{FlowMap, HashSet};
use super::rate::{binomial_se, opt_ratio, ratio};
use super::record::{PacketRecord, RecordBatch};
use super::stage::{ReportContext, ShardContext, ShardStage, Stage, Tally};
use super::window::{PeriodCursor, WindowSpec};
use crate::dissect::FlowKey;
use crate::filter::{
    BlockedCountingFilter, CounterLayout, CounterWidth, CountingBloomFilter, InsertionLog, MAX_K,
};
use crate::model::{blocked, threshold};
use crate::report::{HeavyConfigInfo, HeavyNote, HeavyRates, HeavyReport};
use std::sync::atomic::Ordering;

/// The heavy-flow stage's parameters. Sizes are totals over all shards.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeavyConfig {
    /// The window after which the filter is cleared.
    pub window: WindowSpec,
    /// The count threshold.
    pub theta: u64,
    /// Counters in all (split evenly across shards).
    pub counters: usize,
    /// Bits per counter.
    pub width: CounterWidth,
    /// Hash functions (counters per flow); `None`: `k_opt(theta)` of 003
    /// Theorem 1 for `load` insertions per window.
    pub k: Option<usize>,
    /// Insertions per window that the model's `k` is tuned for; `None`: the
    /// window's length when it counts packets, else
    /// [`defaults::HEAVY_LOAD`].
    pub load: Option<u64>,
    /// Conservative update (only the minimal counters move).
    pub conservative: bool,
    /// How a flow's counters lie in memory. [`CounterLayout::Blocked`]
    /// changes the false-positive rate by design (its model is
    /// [`crate::model::blocked`]), so it is never the default.
    pub layout: CounterLayout,
    /// Whether the report carries the model columns (`true`, the default):
    /// 003 eq. (2) online, or the blocked layout's (B2), and with truth the
    /// compound model. `false` leaves them out, with
    /// [`HeavyNote::ModelNotAsked`], and computes none of them; every other
    /// figure and every event is the same.
    ///
    /// Why: the models are evaluated at every shard-window's close, on the
    /// worker that holds the packets, all of it for a report figure: on
    /// the benchmark traces 0.8-1.7 % of the samples, and 2.3 % of the
    /// instructions with truth off, 8.4 % with truth (the compound model;
    /// BENCHMARKS.md, ninety-ninth round).
    /// The binary turns the model off when nothing reads the report (`-q`
    /// with no `--json`, `--csv` or `--plot`), as it does
    /// [`crate::pipeline::NewFlowConfig::model`].
    pub model: bool,
}

impl Default for HeavyConfig {
    fn default() -> HeavyConfig {
        HeavyConfig {
            window: WindowSpec::Time(defaults::HEAVY_WINDOW_NS),
            theta: defaults::THETA,
            counters: defaults::CBF_COUNTERS,
            width: defaults::CBF_WIDTH,
            k: None,
            load: None,
            conservative: false,
            layout: CounterLayout::Partitioned,
            model: true,
        }
    }
}

impl HeavyConfig {
    /// The load `k_opt` is tuned for: [`HeavyConfig::load`], else the
    /// packet window's length, else [`defaults::HEAVY_LOAD`].
    pub fn model_load(&self) -> u64 {
        self.load.unwrap_or(match self.window {
            WindowSpec::Packets(n) => n,
            WindowSpec::Time(_) => defaults::HEAVY_LOAD,
        })
    }

    /// Checks the stage's fields for a run of `shards` shards.
    pub fn validate(&self, shards: usize) -> Result<HeavyStage, ConfigError> {
        in_range("heavy.theta", self.theta, 1, self.width.max())?;
        if let WindowSpec::Time(0) | WindowSpec::Packets(0) = self.window {
            return Err(ConfigError::invalid(
                "heavy.window",
                "must be longer than 0",
            ));
        }
        let load = self.model_load();
        in_range("heavy.load", load, 1, u64::MAX)?;
        let per_block = BlockedCountingFilter::counters_per_block(self.width);
        let max_k = match self.layout {
            CounterLayout::Partitioned => MAX_K,
            CounterLayout::Blocked => MAX_K.min(per_block),
        };
        let k = match self.k {
            Some(k) => {
                in_range("heavy.k", k, 1, max_k)?;
                k
            }
            None => match self.layout {
                CounterLayout::Partitioned => default_k(self.theta, self.counters, load),
                CounterLayout::Blocked => blocked::k_opt_blocked(
                    self.theta,
                    load,
                    (self.counters / per_block).max(1) as u64,
                    per_block as u64,
                    max_k as u32,
                ) as usize,
            },
        };
        let mut per_shard = self.counters / shards.max(1);
        if self.layout == CounterLayout::Blocked {
            // Whole 64-byte blocks: a shard's counters round down to them.
            if per_shard < per_block {
                return Err(ConfigError::invalid(
                    "heavy.counters",
                    format!(
                        "{} counters leave {per_shard} per shard for {shards} shards, less than one {}-counter block",
                        self.counters, per_block
                    ),
                ));
            }
            per_shard -= per_shard % per_block;
        }
        if per_shard < k {
            return Err(ConfigError::invalid(
                "heavy.counters",
                format!(
                    "{} counters leave {per_shard} per shard for {shards} shards, fewer than k = {k}",
                    self.counters
                ),
            ));
        }
        let counted = match self.layout {
            CounterLayout::Partitioned => self.counters as u64,
            CounterLayout::Blocked => (per_shard as u64).saturating_mul(shards.max(1) as u64),
        };
        let bytes = counted
            .checked_mul(u64::from(self.width.bits()))
            .map(|b| b.div_ceil(8))
            .ok_or(ConfigError::MemoryOverflow)?;
        Ok(HeavyStage {
            cfg: *self,
            k,
            load,
            per_shard,
            bytes,
        })
    }
}

/// The heavy-flow stage, validated: one counting filter of `per_shard`
/// counters and `k` hashes in each shard.
#[derive(Clone, Debug)]
pub struct HeavyStage {
    cfg: HeavyConfig,
    k: usize,
    load: u64,
    per_shard: usize,
    bytes: u64,
}

impl HeavyStage {
    /// The hash count in use.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes of counters over all shards.
    pub fn memory_bytes(&self) -> u64 {
        self.bytes
    }
}

impl Stage for HeavyStage {
    const NAME: &'static str = "heavy";
    type Shard = HeavyShard;
    type Section = HeavyReport;

    fn shard(&self, ctx: &ShardContext) -> HeavyShard {
        let mut shard = HeavyShard::new(
            &self.cfg,
            self.k,
            self.per_shard,
            ctx.classes,
            ctx.truth,
            ctx.wants(EventKind::Heavy),
        );
        shard.online_terms = threshold::OnlineTerms::for_shards(ctx.shards);
        shard.gauges = ctx.gauges.clone().map(|g| {
            let m = shard.filter.m() as u64;
            g.heavy
                .get_or_init(|| super::gauges::HeavyGauges::new(ctx.shards, m));
            (g, ctx.shard)
        });
        // The digest's counters are the partitioned filter's; the network
        // mode refuses the blocked layout before a run starts.
        if matches!(shard.filter, HeavyFilter::Partitioned(_)) {
            shard.export = ctx
                .export
                .as_ref()
                .map(|x| ShardExporter::new(x, ctx.shard, ctx.shards));
        }
        shard
    }

    fn report(&self, t: HeavyTally, ctx: &ReportContext) -> HeavyReport {
        let truth = ctx.truth;
        let mut all = HeavyClassTally::default();
        for c in &t.classes {
            all.add(c);
        }
        let h = &self.cfg;
        let repeated_share = truth.then(|| ratio(t.repeated_insertions, all.packets));
        let mut notes = Vec::new();
        // The notes below, saturation aside, say how the model columns are
        // to be read; a report without them says only that.
        if !h.model {
            notes.push(HeavyNote::ModelNotAsked);
        } else {
            match repeated_share {
                Some(share) if share > 0.01 => notes.push(HeavyNote::RepeatedInsertions { share }),
                Some(_) => {}
                None => notes.push(HeavyNote::ModelWeightedByPackets),
            }
        }
        if t.saturated_windows > 0 {
            notes.push(HeavyNote::Saturation {
                windows: t.saturated_windows,
                counters: t.saturated_counters,
                cap: h.width.max(),
            });
        }
        if h.model && h.layout == CounterLayout::Blocked {
            notes.push(HeavyNote::BlockedLayoutModel);
        }
        if t.compound_skipped > 0 {
            notes.push(HeavyNote::CompoundThetaTooLarge {
                limit: COMPOUND_MAX_THETA,
            });
        }
        let names = ctx.classifier.names();
        HeavyReport {
            config: HeavyConfigInfo {
                window: h.window,
                theta: h.theta,
                counters: h.counters,
                counters_per_shard: self.per_shard,
                counter_bits: h.width.bits(),
                k: self.k,
                k_from_model: h.k.is_none(),
                k_model_load: self.load,
                conservative: h.conservative,
                layout: h.layout,
            },
            overall: heavy_rates(None, &all, truth),
            classes: names
                .iter()
                .zip(&t.classes)
                .map(|(n, c)| heavy_rates(Some(n.clone()), c, truth))
                .collect(),
            shard_windows: t.shard_windows,
            saturation_events: t.saturated_counters,
            saturated_windows: t.saturated_windows,
            repeated_insertions: truth.then_some(t.repeated_insertions),
            repeated_share,
            false_negatives_unsaturated: truth.then_some(t.false_negatives_unsaturated),
            notes,
        }
    }
}

/// The largest theta the compound model is evaluated for.
pub const COMPOUND_MAX_THETA: u64 = 4096;

fn heavy_rates(class: Option<String>, t: &HeavyClassTally, truth: bool) -> HeavyRates {
    let fp_rate = opt_ratio(t.false_positives, t.flows_below).filter(|_| truth);
    HeavyRates {
        class,
        packets: t.packets,
        flows_below: truth.then_some(t.flows_below),
        flows_above: truth.then_some(t.flows_above),
        reported: t.reported,
        false_positives: truth.then_some(t.false_positives),
        false_negatives: truth.then_some(t.false_negatives),
        fp_rate,
        fp_rate_se: fp_rate.map(|p| binomial_se(p, t.flows_below)),
        fn_rate: opt_ratio(t.false_negatives, t.flows_above).filter(|_| truth),
        model_fp_rate: (t.model_weight > 0.0).then(|| t.model_sum / t.model_weight),
        model_fp_rate_compound: (t.compound_weight > 0.0)
            .then(|| t.compound_sum / t.compound_weight),
    }
}

/// The default `k`: `k_opt(theta)` of 003 Theorem 1 for `counters` counters
/// and `expected` insertions per window.
pub fn default_k(theta: u64, counters: usize, expected: u64) -> usize {
    let ratio = counters as f64 / expected.max(1) as f64;
    threshold::k_opt(theta.max(1), ratio).clamp(1, MAX_K as u32) as usize
}

/// Per-class tallies of the heavy-flow stage (one shard's, or summed).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeavyClassTally {
    /// Packets counted.
    pub packets: u64,
    /// Flow-windows with a true count below theta (truth only).
    pub flows_below: u64,
    /// Flow-windows with a true count of theta or more (truth only).
    pub flows_above: u64,
    /// Heavy-flow events.
    pub reported: u64,
    /// Reported, but below theta (truth only).
    pub false_positives: u64,
    /// At or above theta, never reported (truth only).
    pub false_negatives: u64,
    /// Sum over scored flows of the distinct-element model's probability
    /// (or over packets, without truth).
    pub model_sum: f64,
    /// What `model_sum` is weighted by.
    pub model_weight: f64,
    /// Sum over flows below theta of the compound model's probability.
    pub compound_sum: f64,
    /// Flows the compound model was evaluated for.
    pub compound_weight: f64,
}

impl HeavyClassTally {
    /// Adds another tally.
    pub fn add(&mut self, o: &HeavyClassTally) {
        self.packets += o.packets;
        self.flows_below += o.flows_below;
        self.flows_above += o.flows_above;
        self.reported += o.reported;
        self.false_positives += o.false_positives;
        self.false_negatives += o.false_negatives;
        self.model_sum += o.model_sum;
        self.model_weight += o.model_weight;
        self.compound_sum += o.compound_sum;
        self.compound_weight += o.compound_weight;
    }
}

/// The heavy-flow stage's whole tally.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeavyTally {
    /// Indexed by class id.
    pub classes: Vec<HeavyClassTally>,
    /// Shard-windows closed (a shard that saw no packet in a window does not
    /// count it).
    pub shard_windows: u64,
    /// Counters saturated at window ends, summed over windows. A saturated
    /// counter never moves before the window's clear, so these are also
    /// the saturation events.
    pub saturated_counters: u64,
    /// Shard-windows that ended with a saturated counter.
    pub saturated_windows: u64,
    /// Packets that repeated a key already counted in their window (truth
    /// only): insertions that break 003's distinct-element assumption.
    pub repeated_insertions: u64,
    /// Shard-windows whose theta was too large for the compound model.
    pub compound_skipped: u64,
    /// False negatives in windows without any saturated counter (must be 0).
    pub false_negatives_unsaturated: u64,
}

impl HeavyTally {
    fn new(classes: usize) -> HeavyTally {
        HeavyTally {
            classes: vec![HeavyClassTally::default(); classes],
            ..HeavyTally::default()
        }
    }

    /// Adds another shard's tally.
    fn add(&mut self, o: &HeavyTally) {
        if self.classes.len() < o.classes.len() {
            self.classes
                .resize(o.classes.len(), HeavyClassTally::default());
        }
        for (a, b) in self.classes.iter_mut().zip(&o.classes) {
            a.add(b);
        }
        self.shard_windows += o.shard_windows;
        self.saturated_counters += o.saturated_counters;
        self.saturated_windows += o.saturated_windows;
        self.repeated_insertions += o.repeated_insertions;
        self.compound_skipped += o.compound_skipped;
        self.false_negatives_unsaturated += o.false_negatives_unsaturated;
    }
}

impl Tally for HeavyTally {
    fn merge(&mut self, other: HeavyTally) {
        self.add(&other);
    }
}

/// One flow's exact count in the current window.
#[derive(Clone, Copy, Debug)]
struct WindowFlow {
    packets: u64,
    class: u16,
    reported: bool,
}

/// The heavy-flow stage in one shard.
#[derive(Debug)]
pub struct HeavyShard {
    cfg: HeavyConfig,
    filter: HeavyFilter,
    /// Places each packet in its window without a division a packet.
    windows: PeriodCursor,
    window: Option<u64>,
    window_packets: u64,
    window_class_packets: Vec<u64>,
    saturation_at_start: u64,
    truth: Option<FlowMap<WindowFlow>>,
    reported: HashSet,
    tally: HeavyTally,
    events: bool,
    /// Live figures and this shard's index, in a live run.
    gauges: Option<(std::sync::Arc<super::gauges::Gauges>, usize)>,
    /// The window export tap, when the run exports digests.
    export: Option<ShardExporter>,
    /// An empty memory of the online model's per-load terms with this run's
    /// bound: the template of this thread's memory ([`THREAD_TERMS`]).
    online_terms: threshold::OnlineTerms,
    /// The window's insertions that found a counter at zero (in practice
    /// its distinct flows), while few enough that clearing the filter by
    /// them is cheaper than a sweep (see [`InsertionLog`]).
    log: InsertionLog,
    /// The window's flow-size histogram (kept to be refilled each window).
    sizes: Vec<u64>,
    /// The compound model's answer for the window being closed, copied out
    /// of this thread's memory ([`THREAD_COMPOUND`]).
    compound: Vec<f64>,
    /// The last record's flow and the packets of it held back since (see
    /// [`HeldRepeats`]); `None` at a window's start.
    last: Option<HeldRepeats>,
}

/// The flow of a shard's last record, its estimate after that record, and
/// how many of its packets that followed back to back are not yet in the
/// counters.
///
/// Why: a flow's packets often come in trains, and each costs `k` counter
/// updates, about 15 instructions apiece. The share of records that follow
/// one of their own flow in the same shard is about a third in the shared
/// Auckland backbone capture, seven in ten in the TLS mix and an eighth on
/// the throughput trace (`benches/trains.py`). A packet of the flow the
/// last record was of changes only that flow's `k` counters, which are
/// distinct, so its estimate after the bump is the last one plus 1, capped
/// at the maximum, under plain and conservative update alike
/// ([`CountingBloomFilter::add`]). It is held back and added with the
/// train's others in one pass ([`HeavyFilter::add`]) before anything else
/// reads the counters: the next record of another flow, or the window's
/// close. Every estimate, event, log entry, saturation count and digest is
/// the one the packets would give one by one.
///
/// What it saves: a train of `r` packets costs one insert and one pass of
/// `add` instead of `r` inserts, and a held packet alone is added by the
/// insert itself; so a train of two costs what it did, and each packet
/// past the second saves an insert. Callgrind, the whole process (`-q
/// --no-truth --threads 1`): the Auckland capture tiled 30 times, 4.0 %
/// fewer instructions; the TLS mix tiled 100 times (trains of 5.5 packets
/// on average), 12.3 % fewer; the throughput trace (trains of 2.8), level:
/// there the check a packet and the added passes cost about what the held
/// packets save (BENCHMARKS.md, fifty-fourth round).
///
/// Why only the last flow: a packet of another flow reads counters that a
/// held flow may share, so holding back any flow would in general need
/// each record's counters compared with every held flow's. Flows already
/// reported in the window are the exception (their counters are all at
/// `theta` or more, so a read that lacks their packets decides the same),
/// and holding those was built and measured: a third of the stage's
/// instructions out on the benchmark trace, but no time in the whole
/// pipeline (BENCHMARKS.md, sixtieth round).
#[derive(Clone, Copy, Debug)]
struct HeldRepeats {
    /// The flow hash of the shard's last record.
    hash: u64,
    /// Its estimate after the last record, held packets included.
    estimate: u64,
    /// Its packets not yet added to the counters.
    held: u64,
}

/// The compound model's answers ([`threshold::fpr_compound_online`]),
/// remembered by the window's flow-size histogram.
///
/// Why: the model costs `O(32 θ²)` a shard-window however few flows the
/// window held, and on a sparse trace (one-second windows, tens of packets
/// each) that was a fifth of a run with truth (`perf`: 18.6 % in
/// `fpr_compound_online`, 3.7 % in its `powi`; BENCHMARKS.md, seventeenth
/// round). The answer is a pure function of `θ`, `k`, `m` and the
/// histogram, so a remembered answer is the same, bit for bit, as a fresh
/// one; and sparse windows repeat few histograms (a handful of flows of
/// one or two packets).
///
/// One memory per worker thread ([`THREAD_COMPOUND`]), for every filter
/// shape its shards have, as the online model's terms are kept
/// ([`THREAD_TERMS`]): every shard of a run has the same shape, so a memory
/// per shard computed each histogram once per shard: 804 evaluations on a
/// sparse hour-long trace, where one thread's eight shards sharing a memory
/// make 272 (BENCHMARKS.md, thirty-fourth round).
///
/// The memory holds at most [`CompoundMemo::NUMBERS`] numbers, keys and
/// answers together; an answer that would pass it empties the memory
/// first, so the last answer is always kept.
#[derive(Debug, Default)]
struct CompoundMemo {
    answers: hashbrown::HashMap<Vec<u64>, Option<Vec<f64>>>,
    numbers: usize,
}

impl CompoundMemo {
    /// The most numbers (histogram counts and answers) remembered.
    const NUMBERS: usize = 16384;

    /// The model's answer for the histogram `sizes`, from memory or from
    /// `compute`, appended to `out`; false if the model has none. A
    /// remembered answer costs one lookup (one hash of the histogram).
    fn answer_into(
        &mut self,
        sizes: &[u64],
        compute: impl FnOnce(&[u64]) -> Option<Vec<f64>>,
        out: &mut Vec<f64>,
    ) -> bool {
        if let Some(remembered) = self.answers.get(sizes) {
            return remembered
                .as_ref()
                .map(|a| out.extend_from_slice(a))
                .is_some();
        }
        let answer = compute(sizes);
        let cost = sizes.len() + answer.as_ref().map_or(0, Vec::len);
        if self.numbers + cost > Self::NUMBERS {
            self.answers.clear();
            self.numbers = 0;
        }
        self.numbers += cost;
        let found = answer.as_ref().map(|a| out.extend_from_slice(a)).is_some();
        self.answers.insert(sizes.to_vec(), answer);
        found
    }
}

/// A thread's memory for one filter shape among those it keeps
/// ([`THREAD_TERMS`], [`THREAD_COMPOUND`]): found by its key, or made by
/// `fresh` and added. A run's shards share one shape, so the list holds
/// one entry in practice and a linear search is the cheapest.
fn memory_for<K: PartialEq, V>(
    memories: &mut Vec<(K, V)>,
    key: K,
    fresh: impl FnOnce() -> V,
) -> &mut V {
    let at = match memories.iter().position(|(k, _)| *k == key) {
        Some(at) => at,
        None => {
            memories.push((key, fresh()));
            memories.len() - 1
        }
    };
    &mut memories[at].1
}

/// What fixes the compound model's answers besides the histogram:
/// `(θ, k, m)`, the arguments of [`threshold::fpr_compound_online`].
type CompoundShape = (u64, u32, u64);

/// The compound model's answer for `sizes` under `shape`, from this
/// thread's memory or computed (and remembered), copied into `answer`;
/// false, with `answer` empty, where the model has none (`θ` past 4096).
fn compound_answer(shape: CompoundShape, sizes: &[u64], answer: &mut Vec<f64>) -> bool {
    let (theta, k, m) = shape;
    let compute = |s: &[u64]| threshold::fpr_compound_online(theta, k, m, s);
    answer.clear();
    THREAD_COMPOUND.with(|cell| match cell.try_borrow_mut() {
        Ok(mut memories) => memory_for(&mut memories, shape, CompoundMemo::default)
            .answer_into(sizes, compute, answer),
        // Never borrowed twice (nothing here calls back), but a model
        // figure is worth more than a panic: compute without memory.
        Err(_) => compute(sizes)
            .map(|a| answer.extend_from_slice(&a))
            .is_some(),
    })
}

/// What fixes a heavy filter's online-model terms: the layout, theta, `k`,
/// the counters (partitioned) or blocks and counters per block (blocked),
/// and the memory's bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TermsKey {
    blocked: bool,
    theta: u64,
    k: u32,
    cells: u64,
    per_block: u64,
    max_load: u64,
}

thread_local! {
    /// The online model's per-load terms, remembered by each thread for
    /// every filter shape it has closed windows of.
    ///
    /// Why per thread and not per shard: a term is a pure function of the
    /// filter's shape and the load, and every shard of a run has the same
    /// shape, but each shard's windows sample their own loads, so a memory
    /// per shard evaluated most loads once per shard (binomial tails, with
    /// their logarithms and exponentials: about 2.5 % of an all-stages
    /// run's samples). The shards a worker runs share its memory instead,
    /// with no lock (window closes run on the worker's thread) and the same
    /// values, bit for bit, as evaluating each term afresh.
    static THREAD_TERMS: std::cell::RefCell<Vec<(TermsKey, threshold::OnlineTerms)>> =
        const { std::cell::RefCell::new(Vec::new()) };

    /// The compound model's answers, remembered by each thread for every
    /// filter shape it has closed windows of (see [`CompoundMemo`]).
    static THREAD_COMPOUND: std::cell::RefCell<Vec<(CompoundShape, CompoundMemo)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl HeavyShard {
    fn new(
        cfg: &HeavyConfig,
        k: usize,
        counters: usize,
        classes: usize,
        truth: bool,
        events: bool,
    ) -> HeavyShard {
        let filter = HeavyFilter::new(cfg, counters, k);
        let log = filter.insertion_log();
        HeavyShard {
            cfg: *cfg,
            filter,
            windows: PeriodCursor::new(cfg.window.span()),
            window: None,
            window_packets: 0,
            window_class_packets: vec![0; classes],
            saturation_at_start: 0,
            truth: truth.then(FlowMap::default),
            reported: HashSet::default(),
            tally: HeavyTally::new(classes),
            events,
            gauges: None,
            export: None,
            online_terms: threshold::OnlineTerms::new(),
            log,
            sizes: Vec::new(),
            compound: Vec::new(),
            last: None,
        }
    }

    /// Bumps the counters of `h`, or holds the bump back when `h` is the
    /// last record's flow (see [`HeldRepeats`]); returns the estimate
    /// after it either way.
    #[inline(always)]
    fn bump(&mut self, h: u64) -> u64 {
        if let Some(last) = self.last.as_mut() {
            if last.hash == h {
                last.held += 1;
                last.estimate = (last.estimate + 1).min(self.cfg.width.max());
                return last.estimate;
            }
            if last.held > 0 {
                self.release_held();
            }
        }
        let estimate = self.filter.insert(h);
        self.last = Some(HeldRepeats {
            hash: h,
            estimate,
            held: 0,
        });
        estimate
    }

    /// Adds the held-back packets to the counters (see [`HeldRepeats`]).
    #[inline(never)]
    fn release_held(&mut self) {
        if let Some(last) = self.last.as_mut()
            && last.held > 0
        {
            // One held packet (a train of two, the most common) by the
            // insert inlined here: through `add`'s call it cost about 46
            // instructions a train more (BENCHMARKS.md, fifty-fourth round).
            let estimate = match last.held {
                1 => self.filter.insert(last.hash),
                n => self.filter.add(last.hash, n),
            };
            debug_assert_eq!(estimate, last.estimate);
            last.held = 0;
        }
    }

    /// Counts one packet.
    #[inline]
    fn count(&mut self, r: &PacketRecord, key: Option<&FlowKey>, events: &mut Vec<Event>) {
        let w = self
            .windows
            .locate(self.cfg.window.position(r.time_ns, r.seq))
            .0;
        if self.window != Some(w) {
            self.close_current();
            self.window = Some(w);
        }
        self.window_packets += 1;
        let class = usize::from(r.class);
        if let Some(c) = self.window_class_packets.get_mut(class) {
            *c += 1;
        }
        let estimate = self.bump(r.hash);
        // Only an insertion that found one of its counters at zero is
        // logged (see `HeavyFilter::insert`): every counter that is not
        // zero at the window's close was first bumped by such an
        // insertion, so clearing by the logged hashes still clears
        // every one. A flow's later packets, and a packet whose
        // counters other flows had all bumped already, add nothing to
        // clear, and left out they no longer push a busy window's log
        // past its limit into a sweep. The test takes no branch (see
        // `InsertionLog::record_if`).
        self.log.record_if(r.hash, estimate <= 1);
        if let Some(x) = self.export.as_mut() {
            x.observe(r, key, estimate);
        }
        let crossed = estimate >= self.cfg.theta;
        let newly = match self.truth.as_mut() {
            Some(t) => {
                let (e, _) = t.get_or_insert_with(r.hash, || WindowFlow {
                    packets: 0,
                    class: r.class,
                    reported: false,
                });
                e.packets += 1;
                if crossed && !e.reported {
                    e.reported = true;
                    true
                } else {
                    false
                }
            }
            None => crossed && self.reported.insert(r.hash),
        };
        if newly {
            if let Some(c) = self.tally.classes.get_mut(class) {
                c.reported += 1;
            }
            if self.events
                && let Some(&key) = key
            {
                events.push(Event::Heavy(HeavyEvent {
                    key,
                    class: r.class,
                    time_ns: r.time_ns,
                    seq: r.seq,
                    estimate,
                    window: w,
                }));
            }
        }
    }

    /// The current window's online rate, its terms remembered by this
    /// thread (see [`THREAD_TERMS`]).
    fn online_model(&self, theta: u64) -> f64 {
        let key = self.filter.terms_key(theta, self.online_terms.max_load());
        let fresh = || self.online_terms.clone();
        let n = self.window_packets;
        THREAD_TERMS.with(|cell| match cell.try_borrow_mut() {
            Ok(mut memories) => {
                self.filter
                    .online_model(theta, n, memory_for(&mut memories, key, fresh))
            }
            // Never borrowed twice (nothing here calls back), but a model
            // figure is worth more than a panic: compute without memory.
            Err(_) => self
                .filter
                .online_model(theta, n, &mut threshold::OnlineTerms::none()),
        })
    }

    /// Scores and clears the current window (called at each boundary and
    /// once at the end).
    fn close_current(&mut self) {
        // The counters are read below (saturation, gauges, digests) and
        // then cleared: the held packets go in first, and the next window
        // starts with none.
        self.release_held();
        self.last = None;
        if self.window.is_none() || self.window_packets == 0 {
            return;
        }
        let theta = self.cfg.theta;
        let m = self.filter.m() as u64;
        let k = self.filter.k() as u32;
        // A saturated counter never moves again until the window's clear
        // (no deletes, no unions here), so the counters saturated now are
        // exactly the saturation events of this window: no scan needed.
        let saturated = self.filter.saturation_events() - self.saturation_at_start;
        self.tally.saturated_counters += saturated;
        self.tally.saturated_windows += u64::from(saturated > 0);
        self.tally.shard_windows += 1;
        if let Some(g) = self
            .gauges
            .as_ref()
            .and_then(|(g, s)| Some((g.heavy.get()?, *s)))
        {
            // A scan of the counters, once per window and only live.
            let (heavy, shard) = g;
            if let Some(n) = heavy.nonzero_at_close.get(shard) {
                n.store(self.filter.nonzero_counters(), Ordering::Relaxed);
            }
            heavy
                .saturation_events
                .fetch_add(saturated, Ordering::Relaxed);
        }
        // 003 eq. (2) online (or its blocked form, model::blocked (B2)), with
        // every packet taken as a distinct element; none when the report
        // asks for no model (`HeavyConfig::model`), and then the weights
        // below stay 0 and the report leaves the columns out.
        let model = self.cfg.model;
        let p_distinct = if model { self.online_model(theta) } else { 0.0 };
        for (c, &p) in self.window_class_packets.iter().enumerate() {
            if let Some(t) = self.tally.classes.get_mut(c) {
                t.packets += p;
            }
        }
        match self.truth.as_mut() {
            None => {
                // Without truth the flows below theta are unknown: weight the
                // prediction by packets.
                for (c, &p) in self.window_class_packets.iter().enumerate() {
                    if let Some(t) = self.tally.classes.get_mut(c).filter(|_| model) {
                        t.model_sum += p_distinct * p as f64;
                        t.model_weight += p as f64;
                    }
                }
            }
            Some(flows) => {
                let cap = theta.min(COMPOUND_MAX_THETA + 1) as usize;
                let sizes = &mut self.sizes;
                sizes.clear();
                sizes.resize(cap + 1, 0);
                for f in flows.values() {
                    sizes[(f.packets as usize).min(cap)] += 1;
                }
                self.tally.repeated_insertions += self.window_packets - flows.len() as u64;
                // The compound model is derived for the partitioned layout.
                let compound = match self.filter {
                    HeavyFilter::Partitioned(_) if !model => None,
                    HeavyFilter::Partitioned(_) => {
                        compound_answer((theta, k, m), sizes, &mut self.compound)
                            .then_some(&self.compound[..])
                    }
                    HeavyFilter::Blocked(_) => None,
                };
                if model && compound.is_none() && matches!(self.filter, HeavyFilter::Partitioned(_))
                {
                    self.tally.compound_skipped += 1;
                }
                for f in flows.values() {
                    let Some(t) = self.tally.classes.get_mut(usize::from(f.class)) else {
                        continue;
                    };
                    if f.packets >= theta {
                        t.flows_above += 1;
                        if !f.reported {
                            t.false_negatives += 1;
                            if saturated == 0 {
                                self.tally.false_negatives_unsaturated += 1;
                            }
                        }
                    } else {
                        t.flows_below += 1;
                        t.false_positives += u64::from(f.reported);
                        if model {
                            t.model_sum += p_distinct;
                            t.model_weight += 1.0;
                        }
                        if let Some(cp) = compound {
                            t.compound_sum += cp[f.packets as usize];
                            t.compound_weight += 1.0;
                        }
                    }
                }
                flows.clear();
            }
        }
        if let (Some(x), HeavyFilter::Partitioned(f), Some(w)) =
            (self.export.as_mut(), &self.filter, self.window)
        {
            x.close(
                w,
                self.window_packets,
                &self.window_class_packets,
                f,
                self.log.complete(),
            );
        }
        // A window the log held whole is cleared word by word; any other
        // touched most lines (70 % of them on the benchmark trace), and a
        // `memset` of the whole filter is what clears those cheapest. A
        // lazy clear (a bitmap of fresh lines, a stale line zeroed at its
        // first write) took 3-29 % more CPU, paired: its test costs every
        // counter of every packet, each line it zeroes is a scattered
        // write to a line not yet in cache, and a build with no clear at
        // all bounds the gain at about 4 % (BENCHMARKS.md, seventy-first
        // round).
        match self.log.complete() {
            Some(hashes) => self.filter.clear_inserted(hashes),
            None => self.filter.clear(),
        }
        self.log.reset();
        self.reported.clear();
        self.saturation_at_start = self.filter.saturation_events();
        self.window_packets = 0;
        self.window_class_packets.fill(0);
    }
}

impl ShardStage for HeavyShard {
    type Tally = HeavyTally;

    #[inline]
    fn process(&mut self, batch: RecordBatch<'_>, events: &mut Vec<Event>) {
        let records = batch.records();
        for (i, r) in records.iter().enumerate() {
            // A record of the flow of the record before it touches the
            // lines that one's prefetch asked for (and is most likely held
            // back, see `HeldRepeats`): no second prefetch.
            if let Some(next) = records.get(i + PREFETCH_AHEAD)
                && records
                    .get(i + PREFETCH_AHEAD - 1)
                    .is_none_or(|before| before.hash != next.hash)
            {
                self.filter.prefetch(next.hash);
                if let Some(t) = self.truth.as_ref() {
                    t.prefetch(next.hash);
                }
            }
            self.count(r, batch.key(i), events);
        }
    }

    fn prefault(&mut self, budget: &mut usize) -> bool {
        match &mut self.filter {
            HeavyFilter::Partitioned(f) => f.prefault(budget),
            HeavyFilter::Blocked(f) => f.prefault(budget),
        }
    }

    fn close_window(&mut self, time_ns: u64, seq: u64, _events: &mut Vec<Event>) {
        if self.window != Some(self.cfg.window.index(time_ns, seq)) {
            self.close_current();
            self.window = None;
        }
    }

    fn finish(mut self) -> HeavyTally {
        self.close_current();
        self.tally
    }
}

/// How many records ahead the heavy stage prefetches a record's counters
/// (and, with ground truth, its exact per-window state).
///
/// Measured on the 1.5 M-packet benchmark trace, one worker, 8 shards of
/// 512 KiB. With the counters fetched into L1 (BENCHMARKS.md,
/// "Throughput"), 2 or 3 ahead took the stage from a median 76 to 64 ns per
/// packet, and 8 ahead was no better than none: k = 11 lines a record
/// times 8 records is more misses in flight than the core's L1 miss
/// buffers hold, and the early lines are evicted from L1 before use. Into
/// L2 ([`CountingBloomFilter::prefetch`]), the lead can be longer: on the
/// AMD EPYC guest of the forty-eighth round, 2 ahead into L1 gave 99.6 ns
/// a packet, 3 into L1 90.6, and 4, 6 and 8 into L2 79-81 (the stage
/// alone, truth off, `--threads 1`, the report's per-stage p50, medians of
/// 5 alternating runs); with all stages, 77.8 against 58.7.
const PREFETCH_AHEAD: usize = 6;

/// A shard's counting filter in the configured layout.
#[derive(Debug)]
enum HeavyFilter {
    Partitioned(CountingBloomFilter),
    Blocked(BlockedCountingFilter),
}

impl HeavyFilter {
    fn new(cfg: &HeavyConfig, counters: usize, k: usize) -> HeavyFilter {
        match cfg.layout {
            CounterLayout::Partitioned => {
                let f = CountingBloomFilter::new(counters.max(k), k, cfg.width);
                HeavyFilter::Partitioned(if cfg.conservative {
                    f.conservative()
                } else {
                    f
                })
            }
            CounterLayout::Blocked => {
                let f = BlockedCountingFilter::new(counters, k, cfg.width);
                HeavyFilter::Blocked(if cfg.conservative {
                    f.conservative()
                } else {
                    f
                })
            }
        }
    }

    /// Bumps the counters of `h` and returns its estimate after the bump:
    /// the minimum of its `k` counters.
    ///
    /// The estimate is 1 or less exactly when one of those counters was
    /// zero before the bump, which `HeavyShard::count` relies on to log
    /// only such insertions. Why: the `k` counters of a hash are distinct
    /// (one a partition, or one a sub-block of its block in the blocked
    /// layout), so a zero counter is bumped to exactly 1, and a plain
    /// insert bumps every other counter to at least 1 while a conservative
    /// one leaves the others above the old minimum of 0. With no zero
    /// counter the minimum was at least 1, and a bump takes it to at least
    /// 2 (the smallest counter maximum, 4 bits, is 15), while a
    /// conservative insert leaves every other counter above that minimum.
    /// `tests/filter.rs`
    /// (`clearing_by_the_inserted_hashes_is_a_whole_clear`)
    /// checks both the claim and its consequence on every layout, width and
    /// update rule: a filter cleared by the insertions logged this way is
    /// all zero. `tests/pipeline.rs`
    /// (`every_heavy_window_starts_from_an_empty_filter`) checks it in the
    /// stage, for windows cleared by their log and windows swept.
    #[inline]
    fn insert(&mut self, h: u64) -> u64 {
        match self {
            HeavyFilter::Partitioned(f) => f.insert(h),
            HeavyFilter::Blocked(f) => f.insert(h),
        }
    }

    /// Adds `n` occurrences of `h` at once, as `n` inserts in a row would
    /// ([`CountingBloomFilter::add`], [`BlockedCountingFilter::add`]).
    #[inline]
    fn add(&mut self, h: u64, n: u64) -> u64 {
        match self {
            HeavyFilter::Partitioned(f) => f.add(h, n),
            HeavyFilter::Blocked(f) => f.add(h, n),
        }
    }

    #[inline]
    fn prefetch(&self, h: u64) {
        match self {
            HeavyFilter::Partitioned(f) => f.prefetch(h),
            HeavyFilter::Blocked(f) => f.prefetch(h),
        }
    }

    fn clear(&mut self) {
        match self {
            HeavyFilter::Partitioned(f) => f.clear(),
            HeavyFilter::Blocked(f) => f.clear(),
        }
    }

    /// Clears by the window's logged insertions (see [`InsertionLog`]).
    fn clear_inserted(&mut self, hashes: &[u64]) {
        match self {
            HeavyFilter::Partitioned(f) => f.clear_inserted(hashes),
            HeavyFilter::Blocked(f) => f.clear_inserted(hashes),
        }
    }

    /// An empty log bounded for this filter: `k` lines an insertion in the
    /// partitioned layout, one in the blocked.
    fn insertion_log(&self) -> InsertionLog {
        let bytes = self.m() * self.width().bits() as usize / 8;
        let lines = match self {
            HeavyFilter::Partitioned(f) => f.k(),
            HeavyFilter::Blocked(_) => 1,
        };
        InsertionLog::for_filter(bytes, lines)
    }

    fn width(&self) -> CounterWidth {
        match self {
            HeavyFilter::Partitioned(f) => f.width(),
            HeavyFilter::Blocked(f) => f.width(),
        }
    }

    fn m(&self) -> usize {
        match self {
            HeavyFilter::Partitioned(f) => f.m(),
            HeavyFilter::Blocked(f) => f.m(),
        }
    }

    fn k(&self) -> usize {
        match self {
            HeavyFilter::Partitioned(f) => f.k(),
            HeavyFilter::Blocked(f) => f.k(),
        }
    }

    fn saturation_events(&self) -> u64 {
        match self {
            HeavyFilter::Partitioned(f) => f.saturation_events(),
            HeavyFilter::Blocked(f) => f.saturation_events(),
        }
    }

    fn nonzero_counters(&self) -> u64 {
        match self {
            HeavyFilter::Partitioned(f) => f.nonzero_counters(),
            HeavyFilter::Blocked(f) => f.nonzero_counters(),
        }
    }

    /// What fixes this filter's online-model terms (see [`TermsKey`]).
    fn terms_key(&self, theta: u64, max_load: u64) -> TermsKey {
        match self {
            HeavyFilter::Partitioned(f) => TermsKey {
                blocked: false,
                theta,
                k: f.k() as u32,
                cells: f.m() as u64,
                per_block: 0,
                max_load,
            },
            HeavyFilter::Blocked(f) => TermsKey {
                blocked: true,
                theta,
                k: f.k() as u32,
                cells: f.blocks() as u64,
                per_block: BlockedCountingFilter::counters_per_block(f.width()) as u64,
                max_load,
            },
        }
    }

    /// The online rate for a window of `n` distinct insertions: 003 eq. (2)
    /// online ([`threshold::fpr_online_partitioned`]) or its blocked form
    /// ((B2) of [`blocked`]).
    fn online_model(&self, theta: u64, n: u64, terms: &mut threshold::OnlineTerms) -> f64 {
        match self {
            HeavyFilter::Partitioned(f) => {
                threshold::fpr_online_partitioned_with(theta, f.k() as u32, n, f.m() as u64, terms)
            }
            HeavyFilter::Blocked(f) => blocked::fpr_blocked_online_with(
                theta,
                f.k() as u32,
                n,
                f.blocks() as u64,
                BlockedCountingFilter::counters_per_block(f.width()) as u64,
                terms,
            ),
        }
    }
}
