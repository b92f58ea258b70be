//! Stage 1: heavy flows by count thresholding (003) in a counting Bloom
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

use super::event::HeavyEvent;
use super::keyed::{HashMap, HashSet};
use super::record::PacketRecord;
use super::window::WindowSpec;
use crate::filter::{CounterWidth, CountingBloomFilter};
use crate::model::threshold;

/// Stage 1's parameters. Sizes are totals over all shards.
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
    /// Hash functions (counters per flow).
    pub k: usize,
    /// Conservative update (only the minimal counters move).
    pub conservative: bool,
}

/// The default `k`: `k_opt(theta)` of 003 Theorem 1 for `counters` counters
/// and `expected` insertions per window.
pub fn default_k(theta: u64, counters: usize, expected: u64) -> usize {
    let ratio = counters as f64 / expected.max(1) as f64;
    threshold::k_opt(theta.max(1), ratio).clamp(1, 32) as usize
}

/// Per-class tallies of stage 1 (one shard's, or summed).
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

/// Stage 1's whole tally.
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
    pub fn add(&mut self, o: &HeavyTally) {
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

/// One flow's exact count in the current window.
#[derive(Clone, Copy, Debug)]
struct WindowFlow {
    packets: u64,
    class: u16,
    reported: bool,
}

/// Stage 1 for one shard.
#[derive(Debug)]
pub struct HeavyShard {
    cfg: HeavyConfig,
    filter: CountingBloomFilter,
    window: Option<u64>,
    window_packets: u64,
    window_class_packets: Vec<u64>,
    saturation_at_start: u64,
    truth: Option<HashMap<WindowFlow>>,
    reported: HashSet,
    tally: HeavyTally,
    events: Option<Vec<HeavyEvent>>,
}

impl HeavyShard {
    /// A shard of a stage split `shards` ways, for `classes` classes, with
    /// or without ground truth, collecting events or not.
    pub fn new(
        cfg: HeavyConfig,
        shards: usize,
        classes: usize,
        truth: bool,
        events: bool,
    ) -> HeavyShard {
        let m = (cfg.counters / shards.max(1)).max(cfg.k.max(1));
        let mut filter = CountingBloomFilter::new(m, cfg.k, cfg.width);
        if cfg.conservative {
            filter = filter.conservative();
        }
        HeavyShard {
            cfg,
            filter,
            window: None,
            window_packets: 0,
            window_class_packets: vec![0; classes],
            saturation_at_start: 0,
            truth: truth.then(HashMap::default),
            reported: HashSet::default(),
            tally: HeavyTally::new(classes),
            events: events.then(Vec::new),
        }
    }

    /// Counters in this shard's filter.
    pub fn counters(&self) -> usize {
        self.filter.m()
    }

    /// Counts one packet.
    #[inline]
    pub fn process(&mut self, r: &PacketRecord) {
        let w = self.cfg.window.index(r.time_ns, r.seq);
        if self.window != Some(w) {
            self.close_window();
            self.window = Some(w);
        }
        self.window_packets += 1;
        let class = usize::from(r.class);
        if let Some(c) = self.window_class_packets.get_mut(class) {
            *c += 1;
        }
        let estimate = self.filter.insert(r.hash);
        let crossed = estimate >= self.cfg.theta;
        let newly = match self.truth.as_mut() {
            Some(t) => {
                let e = t.entry(r.hash).or_insert(WindowFlow {
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
            if let Some(ev) = self.events.as_mut() {
                ev.push(HeavyEvent {
                    key: r.key,
                    class: r.class,
                    time_ns: r.time_ns,
                    estimate,
                    window: w,
                });
            }
        }
    }

    /// Scores and clears the current window (called at each boundary and
    /// once at the end).
    pub fn close_window(&mut self) {
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
        // 003 eq. (2), online, with every packet taken as a distinct element.
        let p_distinct = threshold::fpr_online_partitioned(theta, k, self.window_packets, m);
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
                    if let Some(t) = self.tally.classes.get_mut(c) {
                        t.model_sum += p_distinct * p as f64;
                        t.model_weight += p as f64;
                    }
                }
            }
            Some(flows) => {
                let cap = theta.min(4097) as usize;
                let mut sizes = vec![0u64; cap + 1];
                for f in flows.values() {
                    sizes[(f.packets as usize).min(cap)] += 1;
                }
                self.tally.repeated_insertions += self.window_packets - flows.len() as u64;
                let compound = threshold::fpr_compound_online(theta, k, m, &sizes);
                if compound.is_none() {
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
                        t.model_sum += p_distinct;
                        t.model_weight += 1.0;
                        if let Some(cp) = compound.as_ref() {
                            t.compound_sum += cp[f.packets as usize];
                            t.compound_weight += 1.0;
                        }
                    }
                }
                flows.clear();
            }
        }
        self.filter.clear();
        self.reported.clear();
        self.saturation_at_start = self.filter.saturation_events();
        self.window_packets = 0;
        self.window_class_packets.fill(0);
    }

    /// Takes the events collected since the last call.
    pub fn take_events(&mut self) -> Vec<HeavyEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Closes the last window and returns the tally.
    pub fn finish(mut self) -> HeavyTally {
        self.close_window();
        self.tally
    }
}
