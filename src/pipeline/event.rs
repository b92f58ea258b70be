//! What the stages tell the outside world while they run, and the sink
//! trait that hears it.

use crate::class::ClassId;
use crate::dissect::FlowKey;

/// A flow whose estimate reached theta in a window (stage 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeavyEvent {
    pub key: FlowKey,
    pub class: ClassId,
    /// Trace time of the packet that crossed theta, in nanoseconds since
    /// the first keyed packet.
    pub time_ns: u64,
    /// The filter's estimate after that packet (at least theta).
    pub estimate: u64,
    /// The window's index (0-based).
    pub window: u64,
}

/// A packet the recycling filter classified as the start of a new flow
/// (stage 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewFlowEvent {
    pub key: FlowKey,
    pub class: ClassId,
    /// Nanoseconds since the first keyed packet.
    pub time_ns: u64,
    /// The packet's index among the keyed packets.
    pub seq: u64,
}

/// Receives the stages' events. The engine calls it on the thread that
/// called [`crate::pipeline::run`], in batches as workers finish them:
/// events of one shard arrive in trace order, events of different shards
/// interleave in an order that depends on scheduling. The report itself
/// does not depend on that order.
pub trait PipelineSink {
    /// Whether to deliver heavy-flow events (cheap: a few per window).
    fn wants_heavy_flows(&self) -> bool {
        false
    }
    /// Whether to deliver new-flow events (one per new flow: costly on
    /// large traces, so off unless asked for).
    fn wants_new_flows(&self) -> bool {
        false
    }
    /// A heavy-flow event.
    fn heavy_flow(&mut self, _event: &HeavyEvent) {}
    /// A new-flow event.
    fn new_flow(&mut self, _event: &NewFlowEvent) {}
}

/// A sink that wants nothing.
pub struct NoEvents;
impl PipelineSink for NoEvents {}
