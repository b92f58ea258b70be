//! The staged pipeline's results as plain data (JSON schema version 2,
//! `docs/json-schema.md`). Every field is filled by
//! [`crate::pipeline::run`]; rendering lives beside (text, CSV, plots).
//!
//! Fields that need ground truth are `null` without it. Timing figures are
//! confined to `trace.read_seconds`, `trace.packets_per_sec`, `stages` and
//! `throughput`: everything else is identical for any thread count.

use super::ReplaySummary;
use super::table::Table;
use crate::filter::RecyclePolicy;
use crate::pipeline::{DirectoryKind, QueryUnit, SweepParam, Variant, WindowSpec};
use serde::Serialize;
use serde::ser::SerializeMap;
use std::any::Any;
use std::fmt::{self, Debug};
use std::sync::Arc;

/// A stage's section of the report: data that serialises to JSON and
/// describes itself as a heading, tables and lines for the text and CSV
/// renderers. The built-in sections are [`HeavyReport`],
/// [`NewFlowReport`] and [`SelectiveReport`]; a stage of a library user's
/// brings its own.
pub trait Section: SectionData {
    /// The section's first text line.
    fn heading(&self) -> String;
    /// Its tables (each also a CSV file).
    fn tables(&self) -> Vec<Table>;
    /// Lines after the tables (summaries and notes), without indentation.
    fn lines(&self) -> Vec<String> {
        Vec::new()
    }

    /// The text rendering every report uses for a section (a replay's
    /// stages and `flowsieve results` alike): the heading, each table with
    /// a row to show, then the lines, indented by two spaces.
    fn render_text(&self, out: &mut String) {
        out.push_str(&self.heading());
        out.push('\n');
        for t in self.tables() {
            if t.rows.iter().any(|r| !r.quiet) {
                t.render_text(out);
            }
        }
        for line in self.lines() {
            out.push_str("  ");
            out.push_str(&line);
            out.push('\n');
        }
    }

    /// The CSV rendering: one `(file name, contents)` per table, every row
    /// included (quiet ones too).
    fn csv_files(&self) -> Vec<(String, String)> {
        self.tables().iter().map(Table::csv_file).collect()
    }
}

/// Writes CSV files (`(file name, contents)`, as [`Section::csv_files`]
/// gives them) into `dir`, created if missing; returns the files written.
pub fn write_csv_files(
    dir: &std::path::Path,
    files: Vec<(String, String)>,
) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for (name, contents) in files {
        let path = dir.join(name);
        super::write_atomically(&path, contents.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}

/// What every section is, implemented for any serialisable type: its JSON
/// value and a view for downcasting.
pub trait SectionData: Any + Send + Sync + Debug {
    /// The section as JSON.
    fn to_json_value(&self) -> serde_json::Value;
    /// The section as [`Any`], for [`PipelineReport::section`].
    fn as_any(&self) -> &dyn Any;
}

impl<T: Serialize + Any + Send + Sync + Debug> SectionData for T {
    fn to_json_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One stage's section under its name.
#[derive(Clone, Debug)]
pub struct StageSection {
    /// The stage's name (its JSON key).
    pub name: &'static str,
    /// The section.
    pub section: Arc<dyn Section>,
}

/// The whole result of a pipeline run: the replay's fields, the pipeline's
/// shape, one section per stage, per-stage latency and throughput.
///
/// In JSON the replay's fields come first, then `pipeline`, then each
/// stage's section under its name (`heavy`, `new_flows` and `selective`
/// are `null` when that stage did not run), then `stages` and
/// `throughput`.
#[derive(Clone, Debug)]
pub struct PipelineReport {
    /// What was read.
    pub replay: ReplaySummary,
    /// The pipeline's shape.
    pub pipeline: PipelineInfo,
    /// The stages' sections, in pipeline order.
    pub sections: Vec<StageSection>,
    /// Per-batch latency of each stage and of the queues.
    pub stages: Vec<StageLatency>,
    /// Throughput figures.
    pub throughput: Throughput,
    /// A live capture's `capture` section (interfaces, drops, filter), set
    /// by the caller after a live run; `None` for a replay.
    pub capture: Option<serde_json::Value>,
}

/// The built-in stages' JSON keys, present (as `null`) even when the stage
/// did not run.
const BUILT_IN_SECTIONS: [&str; 3] = ["heavy", "new_flows", "selective"];

impl Serialize for PipelineReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let replay = serde_json::to_value(&self.replay).map_err(serde::ser::Error::custom)?;
        let mut map = s.serialize_map(None)?;
        if let serde_json::Value::Object(fields) = replay {
            for (k, v) in fields {
                map.serialize_entry(&k, &v)?;
            }
        }
        map.serialize_entry("pipeline", &self.pipeline)?;
        for name in BUILT_IN_SECTIONS {
            if !self.sections.iter().any(|x| x.name == name) {
                map.serialize_entry(name, &serde_json::Value::Null)?;
            }
        }
        for x in &self.sections {
            map.serialize_entry(x.name, &x.section.to_json_value())?;
        }
        map.serialize_entry("stages", &self.stages)?;
        map.serialize_entry("throughput", &self.throughput)?;
        if let Some(c) = &self.capture {
            map.serialize_entry("capture", c)?;
        }
        map.end()
    }
}

impl PipelineReport {
    /// The section a stage named `name` wrote, if it ran and its section is
    /// a `T`.
    pub fn section<T: Section>(&self, name: &str) -> Option<&T> {
        self.sections
            .iter()
            .find(|x| x.name == name)
            .and_then(|x| x.section.as_any().downcast_ref::<T>())
    }
    /// The heavy-flow stage's section.
    pub fn heavy(&self) -> Option<&HeavyReport> {
        self.section("heavy")
    }
    /// The new-flow stage's section.
    pub fn new_flows(&self) -> Option<&NewFlowReport> {
        self.section("new_flows")
    }
    /// The selective-query stage's section.
    pub fn selective(&self) -> Option<&SelectiveReport> {
        self.section("selective")
    }
}

/// Where the heavy-flow figures stray from the model's assumptions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HeavyNote {
    /// A share of insertions repeat a flow already counted in its window.
    RepeatedInsertions {
        /// `repeated_insertions / packets`.
        share: f64,
    },
    /// Without ground truth the model is weighted by packets.
    ModelWeightedByPackets,
    /// Some shard-windows saturated a counter.
    Saturation {
        /// Shard-windows with a saturated counter.
        windows: u64,
        /// Saturated counters over those windows.
        counters: u64,
        /// The counters' maximum.
        cap: u64,
    },
    /// Theta is above what the compound model evaluates.
    CompoundThetaTooLarge {
        /// The largest theta it evaluates.
        limit: u64,
    },
    /// The blocked layout has its own model and no compound column.
    BlockedLayoutModel,
    /// The run asked for no model columns
    /// ([`crate::pipeline::HeavyConfig::model`] is `false`).
    ModelNotAsked,
}

/// Where the new-flow model does not apply.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NewFlowNote {
    /// 004 has no model for time-bounded recycling.
    NoModelForTimePolicy,
    /// 004's N-bounded average is for one phase.
    NoModelForTwoPhaseInsertions,
    /// The blocked layout is modelled for sigma-bounded filters only.
    NoModelForBlockedInsertions,
    /// The chain has no solution for this sigma (retaining with sigma below k).
    NoModelForSigma,
    /// A horizon makes idle flows new again; the model knows no horizon.
    HorizonNotModelled,
    /// The run asked for no model rate
    /// ([`crate::pipeline::NewFlowConfig::model`] is `false`).
    ModelNotAsked,
}

/// What limits the selective-query figures.
#[derive(Clone, Debug, PartialEq)]
pub enum SelectiveNote {
    /// A window held more distinct flows than the exact sets' cap.
    Flooded {
        /// Shard-rounds that reached the cap.
        shard_rounds: u64,
        /// The cap per shard.
        cap: u64,
        /// The lowest share of flows kept.
        rate: f64,
    },
    /// Classes with too few prior samples used the default prior.
    StarvedPriors {
        /// How many classes.
        classes: usize,
        /// The default prior they used.
        default_prior: f64,
    },
    /// No class's prior is below its Theorem 1 threshold: selective
    /// querying cannot pay at these settings.
    NoClassInParadox {
        /// The class nearest to the regime.
        class: String,
        /// The bits per element below which it would enter it.
        below_bpe: f64,
        /// The alpha below which it would enter it.
        below_alpha: f64,
    },
}

impl fmt::Display for HeavyNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            HeavyNote::RepeatedInsertions { share } => write!(f, "{:.1}% of insertions repeat a flow already counted in its window: the model (003's, or the blocked layout's) assumes every insertion is a distinct element, so model_fp_rate is not expected to match; model_fp_rate_compound (partitioned layout) accounts for the window's flow sizes", share * 100.0),
            HeavyNote::ModelWeightedByPackets => f.write_str("without ground truth, model_fp_rate is weighted by packets and assumes every packet is a distinct element"),
            HeavyNote::Saturation { windows, counters, cap } => write!(f, "{windows} shard-windows ended with saturated counters ({counters} counters in all): estimates there are capped at {cap}"),
            HeavyNote::CompoundThetaTooLarge { limit } => write!(f, "theta is too large for the compound model (above {limit})"),
            HeavyNote::BlockedLayoutModel => f.write_str("blocked layout: model_fp_rate is the blocked filter's own model (a Poisson mixture over the block load, model::blocked B2); the compound model is derived for the partitioned layout only, so there is no compound column"),
            HeavyNote::ModelNotAsked => f.write_str("the run asked for no model columns (nothing reads its report), so none were computed"),
        }
    }
}

impl fmt::Display for NewFlowNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NewFlowNote::NoModelForTimePolicy => f.write_str("004 models sigma- and N-bounded filters; a time-bounded filter has no model rate"),
            NewFlowNote::NoModelForTwoPhaseInsertions => f.write_str("004's N-bounded average (eq. 3) is for one phase; a two-phase N-bounded filter has no model rate"),
            NewFlowNote::NoModelForBlockedInsertions => f.write_str("the blocked layout's model (model::blocked_recycling) is for sigma-bounded filters; an N-bounded blocked filter has no model rate"),
            NewFlowNote::NoModelForSigma => f.write_str("004's chain has no solution for this sigma (a retaining filter needs sigma >= k)"),
            NewFlowNote::HorizonNotModelled => f.write_str("with a horizon, a flow idle longer than the horizon starts a new instance; the model knows no horizon"),
            NewFlowNote::ModelNotAsked => f.write_str("the run asked for no model rate (nothing reads its report), so none was computed"),
        }
    }
}

impl fmt::Display for SelectiveNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectiveNote::Flooded {
                shard_rounds,
                cap,
                rate,
            } => write!(
                f,
                "flooded: in {shard_rounds} shard-rounds a window held more than {cap} distinct flows per shard; the exact sets then kept a hash sample of the flows (down to {:.3}%) and the figures cover that sample (see flood for what was shed)",
                rate * 100.0
            ),
            SelectiveNote::StarvedPriors {
                classes,
                default_prior,
            } => write!(
                f,
                "{classes} classes had queries but no sampled query before the trace ended; they used the default prior {default_prior} and were answered as by the plain filter"
            ),
            SelectiveNote::NoClassInParadox {
                class,
                below_bpe,
                below_alpha,
            } => write!(
                f,
                "no class's prior is below its Theorem 1 threshold, so selective querying cannot pay here; the first to enter that regime would be {class}, below {below_bpe:.2} bits per element or below alpha {below_alpha:.3e}"
            ),
        }
    }
}

crate::serialize_as_display!(HeavyNote, NewFlowNote, SelectiveNote);

/// The pipeline's shape.
#[derive(Clone, Debug, Serialize)]
pub struct PipelineInfo {
    /// Shards.
    pub shards: usize,
    /// Records per batch.
    pub batch: usize,
    /// Keyed packets that went through the stages.
    pub packets: u64,
    /// Time windows counted from the Unix epoch (`--epoch-windows`, and
    /// every probe) instead of from the first keyed packet: the same
    /// trace then closes its windows at other instants, and so can report
    /// other heavy flows.
    pub epoch_windows: bool,
}

/// The heavy-flow stage's configuration as it ran.
#[derive(Clone, Debug, Serialize)]
pub struct HeavyConfigInfo {
    /// `1s`, `250ms`, `50000 packets`.
    pub window: WindowSpec,
    /// The count threshold.
    pub theta: u64,
    /// Counters in all.
    pub counters: usize,
    /// Counters in each shard.
    pub counters_per_shard: usize,
    /// Bits per counter.
    pub counter_bits: u32,
    /// Hash functions.
    pub k: usize,
    /// Whether `k` came from `k_opt(theta)` (003 Theorem 1).
    pub k_from_model: bool,
    /// Insertions per window `k_opt` is (or would be) tuned for.
    pub k_model_load: u64,
    /// Conservative update.
    pub conservative: bool,
    /// Counter layout (`partitioned`, 003's; or `blocked`, one cache line
    /// per flow, whose model is `model::blocked`).
    pub layout: crate::filter::CounterLayout,
}

/// Stage 1's figures for one class or overall.
#[derive(Clone, Debug, Serialize)]
pub struct HeavyRates {
    /// The class (absent for the overall row).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Packets counted.
    pub packets: u64,
    /// Flow-windows with a true count below theta.
    pub flows_below: Option<u64>,
    /// Flow-windows with a true count of theta or more.
    pub flows_above: Option<u64>,
    /// Heavy-flow events (flow-windows reported).
    pub reported: u64,
    /// Reported, but below theta.
    pub false_positives: Option<u64>,
    /// At or above theta, never reported.
    pub false_negatives: Option<u64>,
    /// `false_positives / flows_below`.
    pub fp_rate: Option<f64>,
    /// Standard error of `fp_rate` (binomial).
    pub fp_rate_se: Option<f64>,
    /// `false_negatives / flows_above`.
    pub fn_rate: Option<f64>,
    /// 003 eq. (2), read online, every insertion a distinct element.
    pub model_fp_rate: Option<f64>,
    /// The compound model for repeated keys (window's flow sizes).
    pub model_fp_rate_compound: Option<f64>,
}

/// The heavy-flow stage's section.
#[derive(Clone, Debug, Serialize)]
pub struct HeavyReport {
    /// The configuration as it ran.
    pub config: HeavyConfigInfo,
    /// All classes together.
    pub overall: HeavyRates,
    /// One row per class.
    pub classes: Vec<HeavyRates>,
    /// Shard-windows closed.
    pub shard_windows: u64,
    /// Counters that reached their maximum, summed over shard-windows (each
    /// stays saturated until its window's clear).
    pub saturation_events: u64,
    /// Shard-windows that ended with a saturated counter.
    pub saturated_windows: u64,
    /// Packets that repeated a key within its window (truth only).
    pub repeated_insertions: Option<u64>,
    /// `repeated_insertions / packets`.
    pub repeated_share: Option<f64>,
    /// False negatives in windows with no saturated counter (always 0).
    pub false_negatives_unsaturated: Option<u64>,
    /// Where the trace breaks the model's assumptions, said plainly.
    pub notes: Vec<HeavyNote>,
}

/// The new-flow stage's configuration as it ran.
#[derive(Clone, Debug, Serialize)]
pub struct NewFlowConfigInfo {
    /// Bits in all.
    pub bits: usize,
    /// Bits per shard and phase.
    pub bits_per_shard_phase: usize,
    /// Positions per key.
    pub k: usize,
    /// `sigma:S`, `n:N` or `time:T`, per shard.
    pub policy: RecyclePolicy,
    /// Two phases.
    pub two_phase: bool,
    /// Retaining.
    pub retaining: bool,
    /// Colliding positions.
    pub colliding: bool,
    /// Bit layout (`scattered`, 004's; or `blocked`, a message's bits in
    /// one cache line, modelled by `model::blocked_recycling`).
    pub layout: crate::filter::BitLayout,
    /// The idle horizon, in seconds.
    pub horizon_s: Option<f64>,
    /// How `model_fp_rate` is computed for a sigma policy, explicit or
    /// sized by a target rate: 004's chain solved exactly (`chain`), its
    /// continuum limit for a chain too large to solve before the report
    /// (`continuum`, relative error of order `k / m`), or the blocked
    /// layout's mixture (`blocked_mixture`); `None` for `n:N` and `time:T`,
    /// and wherever `model_fp_rate` is `None`.
    pub model_method: Option<crate::model::recycling::SizingMethod>,
}

/// Stage 2's figures for one class or overall.
#[derive(Clone, Debug, Serialize)]
pub struct NewFlowRates {
    /// The class (absent for the overall row).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Packets.
    pub packets: u64,
    /// Truly new packets.
    pub true_new: Option<u64>,
    /// Packets called new.
    pub reported_new: u64,
    /// Truly new, called seen.
    pub false_positives: Option<u64>,
    /// Called new, but the flow was live.
    pub false_negatives: Option<u64>,
    /// Count-instance (004 §II-E): FP / truly new.
    pub fp_rate_instance: Option<f64>,
    /// Standard error of `fp_rate_instance`.
    pub fp_rate_instance_se: Option<f64>,
    /// Count-first: FP / packets.
    pub fp_rate_first: Option<f64>,
    /// Count-each: packets of FP instances / packets.
    pub fp_rate_each: Option<f64>,
    /// FN / packets of live flows.
    pub fn_rate: Option<f64>,
    /// Recycles of the whole sharded filter (the same in every class).
    pub recycles: u64,
    /// 004's average count-instance rate for this filter (not per class).
    pub model_fp_rate: Option<f64>,
}

/// The new-flow stage's section.
#[derive(Clone, Debug, Serialize)]
pub struct NewFlowReport {
    /// The configuration as it ran.
    pub config: NewFlowConfigInfo,
    /// All classes together.
    pub overall: NewFlowRates,
    /// One row per class.
    pub classes: Vec<NewFlowRates>,
    /// Triggers dropped at recycles (non-retaining).
    pub dropped_triggers: u64,
    /// False negatives before a shard's first recycle (always 0).
    pub false_negatives_before_first_recycle: Option<u64>,
    /// Where the model does not apply.
    pub notes: Vec<NewFlowNote>,
}

/// The selective-query stage's configuration as it ran.
#[derive(Clone, Debug, Serialize)]
pub struct SelectiveConfigInfo {
    /// The cache window.
    pub cache_window: WindowSpec,
    /// The query window.
    pub query_window: WindowSpec,
    /// `bf` or `cbf`.
    pub directory: DirectoryKind,
    /// The Bloom directory's layout (`partitioned`, or `blocked`: a key's
    /// bits in one cache line, modelled by `model::blocked`'s (B1) at
    /// theta = 1).
    pub layout: crate::filter::CounterLayout,
    /// Bits (counters) per element.
    pub bpe: f64,
    /// Hash functions.
    pub k: usize,
    /// `flow` or `packet`.
    pub query_unit: QueryUnit,
    /// Fraction of queries sampled for the priors.
    pub prior_sample: f64,
    /// The prior of a class with too few samples.
    pub prior_default: f64,
    /// Checks per class and round the prior sampler aims for.
    pub prior_min_samples: u64,
    /// Weight of the newest round in the pooled priors.
    pub prior_smoothing: f64,
    /// Each class's cost ratio.
    pub alpha: Vec<ClassAlpha>,
}

/// A class's prior against its Theorem 1 threshold (000): where selective
/// querying pays.
#[derive(Clone, Debug, Serialize)]
pub struct ClassPrior {
    /// The class.
    pub class: String,
    /// Its cost ratio.
    pub alpha: f64,
    /// `P* = f / (f + alpha)` for the directory's model rate `f`: a prior
    /// below it makes a positive answer more likely false (Theorem 1).
    pub threshold: f64,
    /// Queries of the class.
    pub queries: u64,
    /// Mean prior in force at its queries (the default before any sample).
    pub prior_est: f64,
    /// The pooled estimate after the last round (null without samples).
    pub prior: Option<f64>,
    /// Its standard error.
    pub prior_se: Option<f64>,
    /// Queries checked against the exact set.
    pub samples: u64,
    /// Members among them.
    pub sampled_members: u64,
    /// `members / queries` (ground truth only).
    pub prior_true: Option<f64>,
    /// The estimate lies below the threshold: the paradox regime, where
    /// selective query skips the class.
    pub paradox: Option<bool>,
    /// The class enters the regime below this many bits per element (at
    /// the optimal k).
    pub paradox_below_bpe: Option<f64>,
    /// The class enters the regime below this alpha.
    pub paradox_below_alpha: Option<f64>,
}

/// A class's cost ratio.
#[derive(Clone, Debug, Serialize)]
pub struct ClassAlpha {
    /// The class.
    pub class: String,
    /// Its alpha.
    pub alpha: f64,
}

/// Stage 3's figures for one variant in one class or overall.
#[derive(Clone, Debug, Serialize)]
pub struct SelectiveRates {
    /// The class (absent for the overall row).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Queries.
    pub queries: u64,
    /// Queries whose flow was a member.
    pub members: u64,
    /// Mean prior estimate in force at the queries.
    pub prior_est: f64,
    /// `members / queries`.
    pub prior_true: f64,
    /// Non-members answered positive.
    pub false_positives: u64,
    /// Members answered negative.
    pub false_negatives: u64,
    /// `false_positives / (queries - members)`.
    pub fp_rate: f64,
    /// `false_negatives / members`.
    pub fn_rate: f64,
    /// `false_positives + alpha * false_negatives`.
    pub cost: f64,
    /// `1 - cost / plain cost` (0 for the plain filter).
    pub cost_reduction: f64,
    /// Queries answered without the filter.
    pub skipped: u64,
}

/// One variant's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SelectiveVariant {
    /// The variant.
    pub name: Variant,
    /// All classes together.
    pub overall: SelectiveRates,
    /// One row per class.
    pub classes: Vec<SelectiveRates>,
}

/// One point of a sweep (overall figures).
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    /// `alpha`, `k`, `bpe` or `product`.
    pub parameter: SweepParam,
    /// The swept value.
    pub value: f64,
    /// The variant.
    pub variant: Variant,
    /// The directory's bits per element.
    pub bpe: f64,
    /// The directory's hash count.
    pub k: usize,
    /// The alpha the costs use (null: each class's own).
    pub alpha: Option<f64>,
    /// Queries.
    pub queries: u64,
    /// Members among them.
    pub members: u64,
    /// False-positive rate.
    pub fp_rate: f64,
    /// False-negative rate.
    pub fn_rate: f64,
    /// Total cost.
    pub cost: f64,
}

/// The selective-query stage's section.
#[derive(Clone, Debug, Serialize)]
pub struct SelectiveReport {
    /// The configuration as it ran.
    pub config: SelectiveConfigInfo,
    /// The main directory's model false-positive rate (001, at bpe and k).
    pub directory_fpr: f64,
    /// Per class: prior, threshold, regime.
    pub priors: Vec<ClassPrior>,
    /// The main variants.
    pub variants: Vec<SelectiveVariant>,
    /// The sweep points.
    pub sweeps: Vec<SweepPoint>,
    /// Shard-rounds whose directory was built.
    pub directories_built: u64,
    /// Elements of the summarised sets, over shard-rounds.
    pub set_elements: u64,
    /// Elements selective insertion left out, over shard-rounds.
    pub insertion_skipped: u64,
    /// What the cap on the exact flow sets shed (all zero unless a window
    /// held more distinct flows than the cap, as in a flood).
    pub flood: SelectiveFlood,
    /// What limits the figures.
    pub notes: Vec<SelectiveNote>,
}

/// What the selective stage's flow-set cap shed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SelectiveFlood {
    /// Distinct flows each shard's set holds per window before it samples.
    pub cap_flows_per_shard: u64,
    /// Shard-rounds in which a set reached the cap.
    pub shard_rounds: u64,
    /// Cache-window packets of flows left out of `S`.
    pub cache_packets_shed: u64,
    /// Query-window packets not queried (their flow was shed).
    pub query_packets_shed: u64,
    /// Flows dropped from a set when its sampling level rose.
    pub flows_evicted: u64,
    /// The smallest share of a window's distinct flows that was kept
    /// (`2^-level`; 1 when nothing was shed).
    pub lowest_sample_rate: f64,
    /// Rounds in which the prior coordinator's sample sets reached the cap.
    pub prior_rounds: u64,
}

/// Per-batch latency of one stage, from an HDR histogram.
#[derive(Clone, Debug, Serialize)]
pub struct StageLatency {
    /// `source` (read, dissect, hash, fill a batch), `queue` (wait between
    /// send and receive), `heavy`, `new_flows`, `selective`.
    pub name: String,
    /// Batches timed.
    pub batches: u64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Maximum.
    pub max_ns: u64,
    /// Records in the row's batches, summed.
    pub records: u64,
    /// The row's batch times, summed (exact, not from the histogram). For
    /// a stage's row and `truth`, the workers' time in that work, so
    /// `total_ns / records` is its time a packet
    /// ([`StageLatency::ns_per_record`]). For `source` (a batch's span from
    /// its first record to its send, while the source fills the other
    /// shards' batches too) and `queue` (a wait), the spans overlap one
    /// another and are not a cost.
    pub total_ns: u64,
}

impl StageLatency {
    /// `total_ns / records`: for a stage's row and `truth`, the workers'
    /// time in it a packet; `None` without records, and for `source` and
    /// `queue`, whose batch spans overlap (see [`StageLatency::total_ns`]).
    pub fn ns_per_record(&self) -> Option<f64> {
        let overlapping = self.name == crate::pipeline::latency::SOURCE
            || self.name == crate::pipeline::latency::QUEUE;
        (self.records > 0 && !overlapping).then(|| self.total_ns as f64 / self.records as f64)
    }
}

/// Throughput of the run.
#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    /// Records read per second of wall-clock time.
    pub packets_per_sec: f64,
    /// Worker threads.
    pub threads: usize,
    /// Shards.
    pub shards: usize,
    /// Wall-clock seconds.
    pub wall_seconds: f64,
    /// CPU time of the process (user + system) during the run.
    pub cpu_seconds: f64,
    /// Records per CPU-second: throughput per core actually used.
    pub packets_per_cpu_sec: f64,
    /// The CPU seconds of the thread that ran the source (reading,
    /// dissecting, hashing, classifying, the stages' coordinators and
    /// filling the batches), from its first record to its end of stream;
    /// `None` where a thread's clock cannot be read.
    pub source_cpu_seconds: Option<f64>,
    /// The CPU seconds of the shard workers (the stages, and the exact
    /// table when they keep it), summed; `None` where a thread's clock
    /// cannot be read. With `source_cpu_seconds`, what `cpu_seconds` was
    /// spent on; the rest is the process's own (start, validation, the
    /// report, dissect-ahead helpers).
    pub worker_cpu_seconds: Option<f64>,
    /// The part of `source_cpu_seconds` the source thread spent in the
    /// kernel (system time): mostly mapping the trace's pages in and out,
    /// more for a trace cached in 4 KiB pages than in large folios.
    /// Linux splits a thread's time by timer ticks, so one short run's
    /// split is a few milliseconds rough
    /// ([`crate::pipeline::thread_system_cpu_seconds`]); `None` where it
    /// cannot be read.
    pub source_system_cpu_seconds: Option<f64>,
    /// The part of `worker_cpu_seconds` the workers spent in the kernel
    /// (faulting their filters and tables in, waking and sleeping),
    /// summed; as rough as `source_system_cpu_seconds`.
    pub worker_system_cpu_seconds: Option<f64>,
    /// Seconds before the first keyed packet entered the engine: from the
    /// process's start when the binary marked it
    /// ([`crate::pipeline::mark_process_start`]; the command line,
    /// validation, opening the inputs and the engine's own start all
    /// count), otherwise from the start of validation (sizing, models);
    /// `None` when no packet was keyed.
    pub startup_seconds: Option<f64>,
    /// Whether the run asked for transparent huge pages for its tables
    /// when it ended (false with `--huge-pages off`, or once `auto` met a
    /// slow fresh huge page; [`crate::pages::set_huge_pages`]).
    pub huge_pages: bool,
    /// What the command line asked (`--huge-pages`) and why the run asks
    /// for huge pages or not ([`crate::pages::apply_huge_page_choice`]);
    /// `None` when the run was not started from a command line.
    pub huge_page_decision: Option<crate::pages::HugePageDecision>,
    /// The process's anonymous memory in huge pages when the run ended,
    /// while the exact flow tables were still alive
    /// ([`crate::pages::anon_huge_page_bytes`]); what the kernel gave,
    /// whatever was asked. `None` where it cannot be read.
    pub anon_huge_page_bytes: Option<u64>,
    /// The process's peak resident memory when the run ended
    /// ([`crate::pages::peak_resident_bytes`], `VmHWM`), beside the
    /// memory the configuration stated below. `None` where it cannot be
    /// read.
    pub peak_resident_bytes: Option<u64>,
    /// The memory the configuration stated before it ran (filters,
    /// batches, and the most the selective stage's capped sets can take),
    /// as checked against `--max-memory`. It is here, with the run's
    /// resources, because the batches depend on the thread count, which no
    /// other figure of the report does.
    pub memory: crate::pipeline::MemoryEstimate,
}

impl PipelineReport {
    /// The JSON document (schema version 2).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// How reading went (the process exit code follows from it).
    pub fn outcome(&self) -> super::Outcome {
        self.replay.outcome()
    }
}
