//! The compact copy of a packet that crosses from the source thread to a
//! shard worker.

use crate::class::ClassId;
use crate::dissect::FlowKey;

/// Everything the stages need from one keyed packet, copied out of the
/// mapped trace: the flow key (for events), its hash, its class, its
/// position in trace time and in the packet sequence, and its length.
///
/// `time_ns` is trace time since the first keyed packet, made monotone by
/// the source (a packet stamped earlier than one before it is placed at the
/// later time), so that every shard agrees on window boundaries whatever
/// order the capture's clock produced.
#[derive(Clone, Copy, Debug)]
pub struct PacketRecord {
    /// The flow key.
    pub key: FlowKey,
    /// [`crate::hash::flow_hash`] of the key.
    pub hash: u64,
    /// Nanoseconds of trace time since the first keyed packet (monotone).
    pub time_ns: u64,
    /// Index of this packet among the keyed packets (0-based).
    pub seq: u64,
    /// Length on the wire.
    pub wire_len: u32,
    /// The flow's class.
    pub class: ClassId,
    /// The shard that owns the flow.
    pub shard: u16,
}
