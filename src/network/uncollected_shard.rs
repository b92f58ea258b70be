//! A shard whose digests no collector has taken.

use serde::Serialize;

/// A shard for which the digest stream holds digests but no collector has
/// ever been started (`flowsieve results` warns of it, and lists it in its
/// JSON as `network.uncollected_shards`): its packets are in no merged
/// window.
///
/// ```
/// use flowsieve::network::uncollected_shard::{UncollectedShard, shard_list};
/// let shards = [4, 5, 6, 7, 9].map(|shard| UncollectedShard { shard, digests: 1 });
/// assert_eq!(shard_list(&shards.map(|s| s.shard)), "4-7,9");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct UncollectedShard {
    /// The shard.
    pub shard: u32,
    /// Digests the stream holds for it.
    pub digests: u64,
}

/// Shards (in ascending order) as `collect --shards` takes them: runs of
/// consecutive shards as `A-B`, joined by commas (the uncollected and the
/// unmerged shards of `flowsieve results` alike).
pub fn shard_list(shards: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &s in shards {
        match runs.last_mut() {
            Some((_, end)) if end.checked_add(1) == Some(s) => *end = s,
            _ => runs.push((s, s)),
        }
    }
    runs.iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}
