//! The staged pipeline's results as plain data (JSON schema version 2,
//! `docs/json-schema.md`). Every field is filled by
//! [`crate::pipeline::run`]; rendering lives beside (text, CSV, plots).
//!
//! Fields that need ground truth are `null` without it. Timing figures are
//! confined to `trace.read_seconds`, `trace.packets_per_sec`, `stages` and
//! `throughput`: everything else is identical for any thread count.

use super::ReplaySummary;
use serde::Serialize;

/// The whole result of a pipeline run: the replay's fields plus one section
/// per stage.
#[derive(Clone, Debug, Serialize)]
pub struct PipelineReport {
    #[serde(flatten)]
    pub replay: ReplaySummary,
    pub pipeline: PipelineInfo,
    pub heavy: Option<HeavyReport>,
    pub new_flows: Option<NewFlowReport>,
    pub selective: Option<SelectiveReport>,
    /// Per-batch latency of each stage and of the queues.
    pub stages: Vec<StageLatency>,
    pub throughput: Throughput,
}

#[derive(Clone, Debug, Serialize)]
pub struct PipelineInfo {
    pub shards: usize,
    /// Records per batch.
    pub batch: usize,
    /// Keyed packets that went through the stages.
    pub packets: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct HeavyConfigInfo {
    /// `1s`, `250ms`, `50000 packets`.
    pub window: String,
    pub theta: u64,
    pub counters: usize,
    pub counters_per_shard: usize,
    pub counter_bits: u32,
    pub k: usize,
    /// Whether `k` came from `k_opt(theta)` (003 Theorem 1).
    pub k_from_model: bool,
    /// Insertions per window `k_opt` assumed.
    pub k_model_load: u64,
    pub conservative: bool,
}

/// Stage 1's figures for one class or overall.
#[derive(Clone, Debug, Serialize)]
pub struct HeavyRates {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    pub packets: u64,
    pub flows_below: Option<u64>,
    pub flows_above: Option<u64>,
    /// Heavy-flow events (flow-windows reported).
    pub reported: u64,
    pub false_positives: Option<u64>,
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

#[derive(Clone, Debug, Serialize)]
pub struct HeavyReport {
    pub config: HeavyConfigInfo,
    pub overall: HeavyRates,
    pub classes: Vec<HeavyRates>,
    pub shard_windows: u64,
    /// Counters that reached their maximum, summed over shard-windows (each
    /// stays saturated until its window's clear).
    pub saturation_events: u64,
    pub saturated_windows: u64,
    /// Packets that repeated a key within its window (truth only).
    pub repeated_insertions: Option<u64>,
    /// `repeated_insertions / packets`.
    pub repeated_share: Option<f64>,
    /// False negatives in windows with no saturated counter (always 0).
    pub false_negatives_unsaturated: Option<u64>,
    /// Where the trace breaks the model's assumptions, said plainly.
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct NewFlowConfigInfo {
    pub bits: usize,
    pub bits_per_shard_phase: usize,
    pub k: usize,
    /// `sigma:S`, `n:N` or `time:T`, per shard.
    pub policy: String,
    pub two_phase: bool,
    pub retaining: bool,
    pub colliding: bool,
    pub horizon_s: Option<f64>,
}

/// Stage 2's figures for one class or overall.
#[derive(Clone, Debug, Serialize)]
pub struct NewFlowRates {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    pub packets: u64,
    pub true_new: Option<u64>,
    pub reported_new: u64,
    pub false_positives: Option<u64>,
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

#[derive(Clone, Debug, Serialize)]
pub struct NewFlowReport {
    pub config: NewFlowConfigInfo,
    pub overall: NewFlowRates,
    pub classes: Vec<NewFlowRates>,
    pub dropped_triggers: u64,
    /// False negatives before a shard's first recycle (always 0).
    pub false_negatives_before_first_recycle: Option<u64>,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SelectiveConfigInfo {
    pub cache_window: String,
    pub query_window: String,
    /// `bf` or `cbf`.
    pub directory: String,
    pub bpe: f64,
    pub k: usize,
    /// `flow` or `packet`.
    pub query_unit: String,
    pub prior_sample: f64,
    pub prior_default: f64,
    pub prior_min_samples: u64,
    pub alpha: Vec<ClassAlpha>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassAlpha {
    pub class: String,
    pub alpha: f64,
}

/// Stage 3's figures for one variant in one class or overall.
#[derive(Clone, Debug, Serialize)]
pub struct SelectiveRates {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    pub queries: u64,
    pub members: u64,
    /// Mean prior estimate in force at the queries.
    pub prior_est: f64,
    /// `members / queries`.
    pub prior_true: f64,
    pub false_positives: u64,
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

#[derive(Clone, Debug, Serialize)]
pub struct SelectiveVariant {
    pub name: String,
    pub overall: SelectiveRates,
    pub classes: Vec<SelectiveRates>,
}

/// One point of a sweep (overall figures).
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    /// `alpha`, `k`, `bpe` or `product`.
    pub parameter: String,
    pub value: f64,
    pub variant: String,
    pub bpe: f64,
    pub k: usize,
    /// The alpha the costs use (null: each class's own).
    pub alpha: Option<f64>,
    pub queries: u64,
    pub members: u64,
    pub fp_rate: f64,
    pub fn_rate: f64,
    pub cost: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SelectiveReport {
    pub config: SelectiveConfigInfo,
    pub variants: Vec<SelectiveVariant>,
    pub sweeps: Vec<SweepPoint>,
    /// Shard-rounds whose directory was built.
    pub directories_built: u64,
    /// Elements of the summarised sets, over shard-rounds.
    pub set_elements: u64,
    /// Elements selective insertion left out, over shard-rounds.
    pub insertion_skipped: u64,
    pub notes: Vec<String>,
}

/// Per-batch latency of one stage, from an HDR histogram.
#[derive(Clone, Debug, Serialize)]
pub struct StageLatency {
    /// `source` (read, dissect, hash, fill a batch), `queue` (wait between
    /// send and receive), `heavy`, `new_flows`, `selective`.
    pub name: String,
    pub batches: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    /// Records read per second of wall-clock time.
    pub packets_per_sec: f64,
    pub threads: usize,
    pub shards: usize,
    pub wall_seconds: f64,
    /// CPU time of the process (user + system) during the run.
    pub cpu_seconds: f64,
    /// Records per CPU-second: throughput per core actually used.
    pub packets_per_cpu_sec: f64,
}

impl PipelineReport {
    /// The JSON document (schema version 2).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The process exit code (see [`super::exit_code`]).
    pub fn exit_code(&self) -> i32 {
        self.replay.exit_code()
    }
}
