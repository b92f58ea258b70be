//! What a run's report takes from its exact tables.

use super::{FlowEntry, rank};

/// What the report needs of one exact table, or of several that together
/// hold every flow of a run: the flows, the best `n` of them in
/// [`super::FlowTable::top`]'s order, and the flows of each class.
///
/// Why a summary and not the tables: the pipeline's shard workers each
/// summarise their own shards' tables as they finish them
/// ([`super::FlowTable::summary`], one pass over the entries), in parallel
/// and while other shards are still running, and the source thread only
/// merges the parts. Before, the source walked every table twice (top
/// flows, then classes) after the last worker had finished: 1.6-2.2 ms of
/// the default job's serial tail on the benchmark trace, where a worker
/// now takes about 0.12 ms a shard (BENCHMARKS.md, seventieth round).
///
/// ```
/// use flowsieve::dissect::FlowKey;
/// use flowsieve::hash::flow_hash;
/// use flowsieve::ingest::Timestamp;
/// use flowsieve::truth::{FlowTable, TableSummary};
/// let (mut a, mut b, mut all) = (FlowTable::default(), FlowTable::default(), FlowTable::default());
/// for (port, packets, class) in [(1u16, 3, 0), (2, 5, 1), (3, 4, 1), (4, 1, 0)] {
///     let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], port, 80, 6);
///     let part = if port % 2 == 0 { &mut a } else { &mut b };
///     for _ in 0..packets {
///         part.record(k, flow_hash(&k), class, Timestamp::ZERO, 100, 100);
///         all.record(k, flow_hash(&k), class, Timestamp::ZERO, 100, 100);
///     }
/// }
/// let merged = TableSummary::merge([a.summary(3, 2), b.summary(3, 2)], 3);
/// assert_eq!(merged, all.summary(3, 2));
/// assert_eq!((merged.flows, merged.flows_by_class), (4, vec![2, 2]));
/// assert_eq!(merged.top[0].stats.packets, 5);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableSummary {
    /// Distinct flows.
    pub flows: u64,
    /// The largest flows, best first ([`super::FlowTable::top`]).
    pub top: Vec<FlowEntry>,
    /// Flows of each class, by class id (classes past the length the
    /// summary was asked for are not counted).
    pub flows_by_class: Vec<u64>,
}

impl TableSummary {
    /// The summary of tables that hold disjoint sets of flows, from theirs,
    /// keeping the best `n`: the answer [`super::FlowTable::summary`]
    /// gives on one table holding all of them. The order of the top list is
    /// total, so the best `n` of the union are among the best `n` of each
    /// part, and sorting those picks the same ones in the same order
    /// whatever the parts were; the counts are sums.
    pub fn merge(parts: impl IntoIterator<Item = TableSummary>, n: usize) -> TableSummary {
        let mut all = TableSummary::default();
        for part in parts {
            all.flows += part.flows;
            all.top.extend(part.top);
            if all.flows_by_class.len() < part.flows_by_class.len() {
                all.flows_by_class.resize(part.flows_by_class.len(), 0);
            }
            for (sum, f) in all.flows_by_class.iter_mut().zip(part.flows_by_class) {
                *sum += f;
            }
        }
        all.top.sort_by(rank);
        all.top.truncate(n);
        all
    }
}
