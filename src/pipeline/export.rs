//! The window export tap: what the heavy stage hands out at each window
//! close when a run exports digests (the network mode's probe, see
//! `crate::network`).
//!
//! The tap lives inside the heavy stage's shard rather than in a stage of
//! its own, because the digest's main part *is* the heavy stage's counting
//! filter at the window's close: a separate stage would count every packet
//! into a second copy of the same filter, doubling the stage's cost. What
//! the tap adds per packet is one insertion into a small presence Bloom
//! filter (the flows seen in the window, OR-able across probes) and, for
//! flows whose local estimate reached the candidate threshold `⌈θ/P⌉`, one
//! hash-map entry holding the key.
//!
//! At the window's close the shard snapshots its counters (a copy, before
//! the clear), takes the presence filter and the candidates, and hands
//! them to the [`WindowDigestSink`] without waiting: the sink must not
//! block (the probe's sink is a bounded channel with `try_send`, and counts
//! what it could not take).

use super::keyed::HashMap;
use super::record::PacketRecord;
use crate::dissect::FlowKey;
use crate::filter::{BloomFilter, CounterSnapshot, CountingBloomFilter};
use std::fmt;
use std::sync::Arc;

/// One candidate heavy flow of a shard-window: its local estimate reached
/// the candidate threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The flow.
    pub key: FlowKey,
    /// Its flow hash (the one the filters index by).
    pub hash: u64,
    /// Its class id.
    pub class: u16,
    /// Its local estimate at the window's close.
    pub estimate: u64,
}

/// What one shard hands out for one window that held packets.
#[derive(Clone, Debug)]
pub struct ShardWindow {
    /// The shard, `0..shards`.
    pub shard: usize,
    /// The window's index (from the Unix epoch when the run's windows are
    /// epoch-aligned).
    pub window: u64,
    /// Packets counted in the window.
    pub packets: u64,
    /// Packets per class id.
    pub class_packets: Vec<u64>,
    /// The counting filter at the window's close: its non-zero cells when
    /// the window's insertions were few enough to be logged, else a copy.
    pub counters: CounterSnapshot,
    /// The flows seen in the window.
    pub presence: BloomFilter,
    /// The flows whose local estimate reached the candidate threshold, in
    /// the order they reached it.
    pub candidates: Vec<Candidate>,
}

/// Takes shard-windows as the shards close them. Called on worker
/// threads; must return at once.
pub trait WindowDigestSink: Send + Sync {
    /// One closed shard-window.
    fn shard_window(&self, w: ShardWindow);
}

/// What a run exports, set in [`super::PipelineConfig::export`].
#[derive(Clone)]
pub struct WindowExport {
    /// A flow becomes a candidate when its local estimate reaches this
    /// (`⌈θ/P⌉` for `P` probes).
    pub candidate_theta: u64,
    /// Bits of the presence filter over all shards (split evenly).
    pub presence_bits: usize,
    /// Hash functions of the presence filter.
    pub presence_k: usize,
    /// Where closed shard-windows go.
    pub sink: Arc<dyn WindowDigestSink>,
}

impl fmt::Debug for WindowExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowExport")
            .field("candidate_theta", &self.candidate_theta)
            .field("presence_bits", &self.presence_bits)
            .field("presence_k", &self.presence_k)
            .finish()
    }
}

/// The tap's state in one heavy shard.
pub(crate) struct ShardExporter {
    shard: usize,
    candidate_theta: u64,
    presence: BloomFilter,
    candidates: HashMap<Candidate>,
    order: Vec<u64>,
    sink: Arc<dyn WindowDigestSink>,
}

impl fmt::Debug for ShardExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardExporter")
            .field("shard", &self.shard)
            .field("candidates", &self.candidates.len())
            .finish()
    }
}

impl ShardExporter {
    pub(crate) fn new(x: &WindowExport, shard: usize, shards: usize) -> ShardExporter {
        let bits = (x.presence_bits / shards.max(1)).max(x.presence_k.max(1));
        ShardExporter {
            shard,
            candidate_theta: x.candidate_theta.max(1),
            presence: BloomFilter::new(bits, x.presence_k.max(1)),
            candidates: HashMap::default(),
            order: Vec::new(),
            sink: x.sink.clone(),
        }
    }

    /// One packet of flow `key`, counted with local estimate `estimate`.
    /// An exporting run's batches always carry keys
    /// ([`super::ShardContext::keyed`]).
    #[inline]
    pub(crate) fn observe(&mut self, r: &PacketRecord, key: Option<&FlowKey>, estimate: u64) {
        self.presence.insert(r.hash);
        if estimate >= self.candidate_theta
            && let Some(&key) = key
            && !self.candidates.contains_key(&r.hash)
        {
            self.candidates.insert(
                r.hash,
                Candidate {
                    key,
                    hash: r.hash,
                    class: r.class,
                    estimate,
                },
            );
            self.order.push(r.hash);
        }
    }

    /// Hands out the window's digest parts and starts the next window.
    /// `logged` is every hash the counters took in the window, when the
    /// shard's [`crate::filter::InsertionLog`] held them all: the counters
    /// then go out as the cells those hashes set, not as a copy of the
    /// whole array (on a quiet link, a few cells of 2^19).
    pub(crate) fn close(
        &mut self,
        window: u64,
        packets: u64,
        class_packets: &[u64],
        counters: &CountingBloomFilter,
        logged: Option<&[u64]>,
    ) {
        let mut candidates = Vec::with_capacity(self.order.len());
        for h in self.order.drain(..) {
            if let Some(mut c) = self.candidates.get(&h).copied() {
                c.estimate = crate::filter::Counters::estimate(counters, h);
                candidates.push(c);
            }
        }
        self.candidates.clear();
        let fresh = BloomFilter::new(self.presence.m(), self.presence.k());
        let presence = std::mem::replace(&mut self.presence, fresh);
        self.sink.shard_window(ShardWindow {
            shard: self.shard,
            window,
            packets,
            class_packets: class_packets.to_vec(),
            counters: match logged.and_then(|h| counters.nonzero_of(h)) {
                Some(cells) => CounterSnapshot::Sparse(cells),
                None => CounterSnapshot::Dense(counters.clone()),
            },
            presence,
            candidates,
        });
    }
}
