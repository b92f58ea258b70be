//! The compact copy of a packet that crosses from the source thread to a
//! shard worker, and the batch a stage processes.

use crate::class::ClassId;
use crate::dissect::FlowKey;

/// Everything the stages need from one keyed packet, copied out of the
/// trace: its flow hash, its class, its position in trace time and in the
/// packet sequence, and its length. 32 bytes, so that a batch of 512 stays
/// within a core's L1 cache while every stage walks it.
///
/// The 40-byte flow key is not in the record: only events and digest
/// export name flows, so the key travels beside the records
/// ([`RecordBatch::key`]) only in a run that needs it.
///
/// `time_ns` is trace time since the first keyed packet, made monotone by
/// the source (a packet stamped earlier than one before it is placed at the
/// later time), so that every shard agrees on window boundaries whatever
/// order the capture's clock produced.
///
/// ```
/// assert_eq!(std::mem::size_of::<flowsieve::pipeline::PacketRecord>(), 32);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketRecord {
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

/// One shard's records in trace order, as a stage processes them, with
/// their flow keys when the run needs keys.
///
/// The engine sends keys exactly when a shard's [`super::ShardContext`]
/// asks for events or digest export ([`super::ShardContext::keyed`]); a
/// stage that emits events or exports candidates therefore always finds
/// them, and a run that does neither copies no keys.
///
/// ```
/// use flowsieve::dissect::FlowKey;
/// use flowsieve::pipeline::{PacketRecord, RecordBatch};
/// let key = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 6);
/// let r = PacketRecord {
///     hash: flowsieve::hash::flow_hash(&key),
///     time_ns: 0,
///     seq: 0,
///     wire_len: 60,
///     class: 0,
///     shard: 0,
/// };
/// let keyed = RecordBatch::with_keys(std::slice::from_ref(&r), std::slice::from_ref(&key));
/// assert_eq!(keyed.key(0), Some(&key));
/// let bare = RecordBatch::new(std::slice::from_ref(&r));
/// assert_eq!((bare.len(), bare.key(0)), (1, None));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RecordBatch<'a> {
    records: &'a [PacketRecord],
    keys: &'a [FlowKey],
}

impl<'a> RecordBatch<'a> {
    /// Records without keys.
    pub fn new(records: &'a [PacketRecord]) -> RecordBatch<'a> {
        RecordBatch { records, keys: &[] }
    }

    /// Records with their keys: `keys[i]` is the flow key of `records[i]`.
    /// A key list of another length is taken as no keys at all, so that a
    /// key can never be paired with the wrong record.
    pub fn with_keys(records: &'a [PacketRecord], keys: &'a [FlowKey]) -> RecordBatch<'a> {
        let keys = if keys.len() == records.len() {
            keys
        } else {
            &[]
        };
        RecordBatch { records, keys }
    }

    /// The records, in trace order.
    #[inline]
    pub fn records(&self) -> &'a [PacketRecord] {
        self.records
    }

    /// The flow key of record `i`, when the batch carries keys.
    #[inline]
    pub fn key(&self, i: usize) -> Option<&'a FlowKey> {
        self.keys.get(i)
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True for a batch with no records.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}
