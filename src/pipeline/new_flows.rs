//! Stage 2: new flows, flagged by a recycling Bloom filter (004).
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

use super::event::NewFlowEvent;
use super::keyed::HashMap;
use super::record::PacketRecord;
use crate::filter::{RecyclePolicy, RecyclingBloomFilter};
use crate::ingest::Timestamp;
use crate::model::recycling::{self, Hashing, RecyclingModel};

/// How a recycling filter decides to recycle, as given on the command line.
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

impl std::str::FromStr for RecycleSpec {
    type Err = String;
    /// `sigma:S`, `n:N`, `time:T` (a duration such as `10s`).
    fn from_str(s: &str) -> Result<RecycleSpec, String> {
        let bad = || {
            format!("bad recycle policy '{s}': expected sigma:S (a fraction below 1 or a bit count), n:N or time:T (such as time:10s)")
        };
        let (kind, v) = s.split_once(':').ok_or_else(bad)?;
        match kind {
            "sigma" => {
                let x: f64 = v.parse().map_err(|_| bad())?;
                if x.is_nan() || x <= 0.0 {
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

/// Stage 2's parameters. Sizes are totals over all shards.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NewFlowConfig {
    /// Bits in all (split across shards, then into two halves if two-phase).
    pub bits: usize,
    /// Positions per key.
    pub k: usize,
    pub recycle: RecycleSpec,
    pub two_phase: bool,
    pub retaining: bool,
    pub hashing: Hashing,
    /// Idle gap after which a key's next packet is truly new again (truth);
    /// `None`: only a key's first packet in the trace is new.
    pub horizon_ns: Option<u64>,
}

/// [`NewFlowConfig`] resolved for a number of shards: each shard's filter
/// and the model's prediction for it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResolvedNewFlow {
    /// Bits per phase of one shard's filter.
    pub phase_bits: usize,
    pub k: usize,
    pub policy: RecyclePolicy,
    /// 004's long-term average false-positive rate (count-instance) for
    /// this filter, when the model covers its policy.
    pub model_fp_rate: Option<f64>,
}

/// Why a new-flow configuration cannot run.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NewFlowConfigError {
    #[error("--rbf-bits {bits} is too small for {shards} shards of k = {k}{}", if *.two_phase { " with two phases" } else { "" })]
    TooFewBits {
        bits: usize,
        shards: usize,
        k: usize,
        two_phase: bool,
    },
    #[error("no sigma reaches --target-fpr {0} with this filter (raise --rbf-bits or the target)")]
    TargetUnreachable(f64),
    #[error("sigma {sigma} per shard is not below the {m} bits of a shard's phase")]
    SigmaTooLarge { sigma: u64, m: u64 },
}

impl NewFlowConfig {
    /// Splits the filter across `shards` and computes the model's rate.
    pub fn resolve(&self, shards: usize) -> Result<ResolvedNewFlow, NewFlowConfigError> {
        let shards = shards.max(1);
        let per_shard = self.bits / shards;
        let m = if self.two_phase {
            per_shard / 2
        } else {
            per_shard
        };
        let k = self.k.clamp(1, crate::filter::MAX_K);
        if m < 2 * k {
            return Err(NewFlowConfigError::TooFewBits {
                bits: self.bits,
                shards,
                k,
                two_phase: self.two_phase,
            });
        }
        let (mm, kk) = (m as u64, k as u32);
        let fpr = |sigma: u64| {
            RecyclingModel::new(mm, kk, sigma, self.hashing, self.retaining)
                .ok()
                .map(|r| {
                    if self.two_phase {
                        r.two_phase_fpr()
                    } else {
                        r.one_phase_fpr()
                    }
                })
        };
        let (policy, model) = match self.recycle {
            RecycleSpec::Sigma(x) => {
                let sigma = if x < 1.0 {
                    (x * m as f64).round() as u64
                } else {
                    (x / shards as f64).round() as u64
                };
                if sigma >= mm {
                    return Err(NewFlowConfigError::SigmaTooLarge { sigma, m: mm });
                }
                (RecyclePolicy::Sigma(sigma), fpr(sigma))
            }
            RecycleSpec::TargetFpr(target) => {
                let r = recycling::sigma_for_target(
                    mm,
                    kk,
                    self.hashing,
                    self.retaining,
                    self.two_phase,
                    target,
                )
                .ok_or(NewFlowConfigError::TargetUnreachable(target))?;
                let sigma = r.params().2;
                let rate = if self.two_phase {
                    r.two_phase_fpr()
                } else {
                    r.one_phase_fpr()
                };
                (RecyclePolicy::Sigma(sigma), Some(rate))
            }
            RecycleSpec::Insertions(n) => {
                let n = (n / shards as u64).max(1);
                // eq. (3): the average rate of an N-bounded one-phase filter.
                let model = (!self.two_phase).then(|| recycling::f_average(mm, kk, n));
                (RecyclePolicy::Insertions(n), model)
            }
            RecycleSpec::Time(ns) => (RecyclePolicy::Time(ns), None),
        };
        Ok(ResolvedNewFlow {
            phase_bits: m,
            k,
            policy,
            model_fp_rate: model,
        })
    }
}

/// Per-class tallies of stage 2.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewFlowClassTally {
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
    pub fn add(&mut self, o: &NewFlowClassTally) {
        self.packets += o.packets;
        self.reported_new += o.reported_new;
        self.true_new += o.true_new;
        self.false_positives += o.false_positives;
        self.false_negatives += o.false_negatives;
        self.fp_each += o.fp_each;
    }
}

/// Stage 2's whole tally.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewFlowTally {
    pub classes: Vec<NewFlowClassTally>,
    /// Recycles (clears or swaps) over all shards.
    pub recycles: u64,
    /// Messages that triggered a recycle and were dropped (non-retaining).
    pub dropped_triggers: u64,
    /// False negatives before the shard's first recycle (must be 0).
    pub false_negatives_before_first_recycle: u64,
}

impl NewFlowTally {
    /// Adds another shard's tally.
    pub fn add(&mut self, o: &NewFlowTally) {
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

/// Stage 2 for one shard.
#[derive(Debug)]
pub struct NewFlowShard {
    filter: RecyclingBloomFilter,
    timed: bool,
    horizon_ns: Option<u64>,
    truth: Option<HashMap<KeyState>>,
    tally: NewFlowTally,
    events: Option<Vec<NewFlowEvent>>,
}

impl NewFlowShard {
    /// One shard of a resolved configuration.
    pub fn new(
        cfg: &NewFlowConfig,
        resolved: &ResolvedNewFlow,
        classes: usize,
        truth: bool,
        events: bool,
    ) -> NewFlowShard {
        NewFlowShard {
            filter: RecyclingBloomFilter::new(
                resolved.phase_bits,
                resolved.k,
                resolved.policy,
                cfg.hashing,
                cfg.retaining,
                cfg.two_phase,
            ),
            timed: matches!(resolved.policy, RecyclePolicy::Time(_)),
            horizon_ns: cfg.horizon_ns,
            truth: truth.then(HashMap::default),
            tally: NewFlowTally {
                classes: vec![NewFlowClassTally::default(); classes],
                ..NewFlowTally::default()
            },
            events: events.then(Vec::new),
        }
    }

    /// Classifies and inserts one packet.
    #[inline]
    pub fn process(&mut self, r: &PacketRecord) {
        // Only a time-bounded filter reads the clock.
        let is_new = if self.timed {
            let now = Timestamp::from_units(r.time_ns, 1_000_000_000);
            self.filter.test_and_insert_at(r.hash, now)
        } else {
            self.filter.test_and_insert(r.hash)
        };
        let Some(t) = self.tally.classes.get_mut(usize::from(r.class)) else {
            return;
        };
        t.packets += 1;
        t.reported_new += u64::from(is_new);
        if is_new {
            if let Some(ev) = self.events.as_mut() {
                ev.push(NewFlowEvent {
                    key: r.key,
                    class: r.class,
                    time_ns: r.time_ns,
                    seq: r.seq,
                });
            }
        }
        let Some(truth) = self.truth.as_mut() else {
            return;
        };
        let horizon = self.horizon_ns;
        let mut fn_now = false;
        match truth.entry(r.hash) {
            hashbrown::hash_map::Entry::Vacant(v) => {
                t.true_new += 1;
                t.false_positives += u64::from(!is_new);
                t.fp_each += u64::from(!is_new);
                v.insert(KeyState {
                    last_ns: r.time_ns,
                    fp_instance: !is_new,
                });
            }
            hashbrown::hash_map::Entry::Occupied(mut o) => {
                let s = o.get_mut();
                let expired = horizon.is_some_and(|h| r.time_ns - s.last_ns > h);
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
        }
        if fn_now && self.filter.stats().recycles == 0 {
            self.tally.false_negatives_before_first_recycle += 1;
        }
    }

    /// Takes the events collected since the last call.
    pub fn take_events(&mut self) -> Vec<NewFlowEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The tally, with the filter's recycles.
    pub fn finish(mut self) -> NewFlowTally {
        let s = self.filter.stats();
        self.tally.recycles = s.recycles;
        self.tally.dropped_triggers = s.dropped_triggers;
        self.tally
    }
}
