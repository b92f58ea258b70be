//! Live figures the stages publish while they run: what a live capture's
//! interval reports and `/metrics` show between the start and the final
//! report.
//!
//! A replay never asks for them ([`crate::pipeline::run`] passes none), so
//! they cost a file replay nothing. When a live run asks, each stage
//! publishes once per batch or per window, never per packet, into relaxed
//! atomics: a reader sees each figure whole, and figures of different
//! shards or stages may be a batch apart. Nothing here takes a lock on the
//! packet path; each section is set up once, by the first shard that
//! needs it, through a `OnceLock`.
//!
//! The final report stays the authority: it is computed from the shards'
//! own tallies, and these gauges reach the same totals once every batch
//! has been processed (the live tests check that they do).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Every stage's live figures.
#[derive(Debug, Default)]
pub struct Gauges {
    /// The heavy-flow stage's.
    pub heavy: OnceLock<HeavyGauges>,
    /// The new-flow stage's.
    pub new_flows: OnceLock<NewFlowGauges>,
    /// The selective-query stage's.
    pub selective: OnceLock<SelectiveGauges>,
    /// Per-batch latency quantiles, per worker.
    pub latency: OnceLock<LatencyGauges>,
}

fn zeros(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// The heavy-flow stage: its counting filters' fill and saturation.
#[derive(Debug)]
pub struct HeavyGauges {
    /// Counters per shard.
    pub counters_per_shard: u64,
    /// Per shard: non-zero counters when its last window closed.
    pub nonzero_at_close: Vec<AtomicU64>,
    /// Counters that reached their maximum, over the run (each counts once
    /// per window it saturated in).
    pub saturation_events: AtomicU64,
}

impl HeavyGauges {
    /// For `shards` shards of `counters_per_shard` counters.
    pub fn new(shards: usize, counters_per_shard: u64) -> HeavyGauges {
        HeavyGauges {
            counters_per_shard,
            nonzero_at_close: zeros(shards),
            saturation_events: AtomicU64::new(0),
        }
    }

    /// The fraction of counters non-zero at the last window close, over
    /// all shards.
    pub fn fill(&self) -> f64 {
        let total = self.counters_per_shard * self.nonzero_at_close.len() as u64;
        let nonzero: u64 = self.nonzero_at_close.iter().map(get).sum();
        if total == 0 {
            0.0
        } else {
            nonzero as f64 / total as f64
        }
    }
}

/// The new-flow stage: its recycling filters' fill and recycles.
#[derive(Debug)]
pub struct NewFlowGauges {
    /// Bits per shard (one phase).
    pub bits_per_shard: u64,
    /// Per shard: bits set in the active phase now.
    pub active_bits: Vec<AtomicU64>,
    /// Per shard: recycles so far.
    pub recycles: Vec<AtomicU64>,
}

impl NewFlowGauges {
    /// For `shards` shards of `bits_per_shard` bits.
    pub fn new(shards: usize, bits_per_shard: u64) -> NewFlowGauges {
        NewFlowGauges {
            bits_per_shard,
            active_bits: zeros(shards),
            recycles: zeros(shards),
        }
    }

    /// The fraction of active bits set, over all shards.
    pub fn fill(&self) -> f64 {
        let total = self.bits_per_shard * self.active_bits.len() as u64;
        let set: u64 = self.active_bits.iter().map(get).sum();
        if total == 0 {
            0.0
        } else {
            set as f64 / total as f64
        }
    }

    /// Recycles over all shards.
    pub fn recycles(&self) -> u64 {
        self.recycles.iter().map(get).sum()
    }
}

/// The selective-query stage: per class, the queries, the exact members,
/// the estimated prior, and each main variant's errors.
#[derive(Debug)]
pub struct SelectiveGauges {
    /// The main variants' names (`plain`, `selective-query`, ...), without
    /// sweeps.
    pub variants: Vec<String>,
    /// Each class's cost of a false negative (a false positive costs 1).
    pub alphas: Vec<f64>,
    /// Per class: queries answered.
    pub queries: Vec<AtomicU64>,
    /// Per class: queries whose flow was in the set (exact).
    pub members: Vec<AtomicU64>,
    /// Per class: the prior in force (`f64` bits), from the coordinator.
    pub priors: Vec<AtomicU64>,
    /// `[variant][class]`: false positives, false negatives, skipped.
    pub errors: Vec<Vec<[AtomicU64; 3]>>,
}

/// One variant's totals over every class.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct VariantCost {
    /// The variant.
    pub variant: String,
    /// False positives.
    pub false_positives: u64,
    /// False negatives.
    pub false_negatives: u64,
    /// False positives plus each class's alpha times its false negatives.
    pub cost: f64,
}

impl SelectiveGauges {
    /// For these main variants and per-class alphas.
    pub fn new(variants: Vec<String>, alphas: Vec<f64>) -> SelectiveGauges {
        let classes = alphas.len();
        SelectiveGauges {
            errors: variants
                .iter()
                .map(|_| {
                    (0..classes)
                        .map(|_| [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)])
                        .collect()
                })
                .collect(),
            variants,
            queries: zeros(classes),
            members: zeros(classes),
            priors: zeros(classes),
            alphas,
        }
    }

    /// The prior in force for a class.
    pub fn prior(&self, class: usize) -> f64 {
        self.priors
            .get(class)
            .map_or(0.0, |p| f64::from_bits(get(p)))
    }

    /// A class's false positives, false negatives and skipped queries under
    /// a variant.
    pub fn errors(&self, variant: usize, class: usize) -> [u64; 3] {
        self.errors
            .get(variant)
            .and_then(|v| v.get(class))
            .map_or([0; 3], |e| [get(&e[0]), get(&e[1]), get(&e[2])])
    }

    /// A class's cost under a variant: FP + alpha FN.
    pub fn cost(&self, variant: usize, class: usize) -> f64 {
        let [fp, fneg, _] = self.errors(variant, class);
        fp as f64 + self.alphas.get(class).copied().unwrap_or(1.0) * fneg as f64
    }

    /// Every variant's totals over the classes.
    pub fn totals(&self) -> Vec<VariantCost> {
        (0..self.variants.len())
            .map(|v| {
                let mut t = VariantCost {
                    variant: self.variants[v].clone(),
                    ..VariantCost::default()
                };
                for c in 0..self.alphas.len() {
                    let [fp, fneg, _] = self.errors(v, c);
                    t.false_positives += fp;
                    t.false_negatives += fneg;
                    t.cost += self.cost(v, c);
                }
                t
            })
            .collect()
    }
}

/// Per worker and latency row (`source`, `queue`, then the stages): the
/// per-batch p50 and p99 in nanoseconds, as of the worker's last update.
#[derive(Debug)]
pub struct LatencyGauges {
    /// The rows' names.
    pub rows: Vec<&'static str>,
    /// `[worker][row]`: p50, p99.
    pub quantiles: Vec<Vec<[AtomicU64; 2]>>,
}

impl LatencyGauges {
    /// For `workers` workers and these rows.
    pub fn new(workers: usize, rows: Vec<&'static str>) -> LatencyGauges {
        LatencyGauges {
            quantiles: (0..workers)
                .map(|_| {
                    rows.iter()
                        .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                        .collect()
                })
                .collect(),
            rows,
        }
    }

    /// A worker's p50 and p99 for a row, in nanoseconds.
    pub fn get(&self, worker: usize, row: usize) -> [u64; 2] {
        self.quantiles
            .get(worker)
            .and_then(|w| w.get(row))
            .map_or([0; 2], |q| [get(&q[0]), get(&q[1])])
    }
}
