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

/// Items of shards grouped by `key`, in the order of each group's first
/// item: that item, and the group's shards in the order given (for
/// [`shard_list`]). Collectors with their shards, for `collect`'s
/// refusals and `results`' lines and warnings.
///
/// ```
/// use flowsieve::network::uncollected_shard::shards_by;
/// let groups = shards_by([(0, "a"), (1, "b"), (2, "a")], |who| *who);
/// assert_eq!(groups, [("a", vec![0, 2]), ("b", vec![1])]);
/// ```
pub fn shards_by<T, K: PartialEq>(
    items: impl IntoIterator<Item = (u32, T)>,
    key: impl Fn(&T) -> K,
) -> Vec<(T, Vec<u32>)> {
    let mut groups: Vec<(K, T, Vec<u32>)> = Vec::new();
    for (shard, item) in items {
        let k = key(&item);
        match groups.iter_mut().find(|(g, _, _)| *g == k) {
            Some((_, _, shards)) => shards.push(shard),
            None => groups.push((k, item, vec![shard])),
        }
    }
    groups
        .into_iter()
        .map(|(_, item, shards)| (item, shards))
        .collect()
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
