//! A shard whose collector's consumer holds digests that are in no
//! written window yet.

use serde::Serialize;

/// A shard with a collector's consumer (`collect-s<shard>`) that still
/// holds digests: `flowsieve results` notes them on stderr and lists them
/// in its JSON as `network.unmerged_shards`. A collector acknowledges a
/// digest once the window it belongs to is written (or once it has noted
/// it late), so until then the digest's packets are in no window. While a
/// collector runs, these are the windows still open; once it has stopped,
/// they wait for the next `flowsieve collect` of the shard, which takes
/// them over ([`crate::network::uncollected_shard`] is the other case: a
/// shard no collector was ever started for).
///
/// ```
/// use flowsieve::network::unmerged_shard::UnmergedShard;
/// let s = UnmergedShard { shard: 3, undelivered: 2, unacknowledged: 5 };
/// assert_eq!(s.digests(), 7);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct UnmergedShard {
    /// The shard.
    pub shard: u32,
    /// Digests its consumer has not handed to a collector yet.
    pub undelivered: u64,
    /// Digests handed to a collector and not acknowledged: held for
    /// windows not written yet (or by a collector that stopped, until the
    /// server hands them to the next one).
    pub unacknowledged: u64,
}

impl UnmergedShard {
    /// Every digest of the shard that is in no written window yet.
    pub fn digests(&self) -> u64 {
        self.undelivered.saturating_add(self.unacknowledged)
    }
}
