//! Per-batch latency histograms (HDR), one per named row: `source`,
//! `queue`, then one per stage, keyed by the stage's name.

use crate::report::StageLatency;
use hdrhistogram::Histogram;

/// The source's row: reading, dissecting, hashing and filling a batch.
pub const SOURCE: &str = "source";
/// The queues' row: the wait between a batch's send and its receipt.
pub const QUEUE: &str = "queue";

/// One histogram per row, in nanoseconds.
///
/// Each row starts small and grows with the largest time it has seen, up
/// to [`Latency::MAX_NS`]. Why: a histogram allocated for an hour at three
/// significant digits holds 33,792 counts (264 KiB), and the default job's
/// fifteen rows (the source's and, per worker, the queue's and each
/// stage's) wrote 4 MiB before the first packet; batch times stay under a
/// millisecond, a few thousand counts. A growing row reads exactly as a
/// row bounded at an hour would for every time up to an hour (a property
/// test checks it).
#[derive(Clone, Debug)]
pub struct Latency {
    rows: Vec<(&'static str, Histogram<u64>)>,
}

impl Latency {
    /// The largest time a row records, in nanoseconds: an hour. A longer
    /// time is recorded as an hour.
    pub const MAX_NS: u64 = 3_600_000_000_000;

    /// Empty histograms (1 ns up, three significant digits, growing to an
    /// hour) for `source`, `queue` and each of `stages`.
    pub fn new(stages: &[&'static str]) -> Latency {
        // A constant, valid precision: this cannot fail whatever the input.
        let h = Histogram::new(3).expect("three significant digits are valid");
        Latency {
            rows: [SOURCE, QUEUE]
                .iter()
                .chain(stages)
                .map(|&n| (n, h.clone()))
                .collect(),
        }
    }

    /// Records one batch's time in row `i` (0 `source`, 1 `queue`, then
    /// the stages in order).
    #[inline]
    pub fn record(&mut self, i: usize, ns: u64) {
        if let Some((_, h)) = self.rows.get_mut(i) {
            // Not `saturating_record`: it clamps to a growing row's
            // *current* top, so a first 2,048 ns batch after 1 ns ones
            // would read as 2 ns. The row clamps to its own bound and
            // grows to it; recording a value within it cannot fail (a
            // failure would only lose a timing figure).
            let _ = h.record(ns.clamp(1, Self::MAX_NS));
        }
    }

    /// Adds another set of histograms with the same rows.
    pub fn merge(&mut self, other: &Latency) {
        for ((_, a), (_, b)) in self.rows.iter_mut().zip(&other.rows) {
            // Same bounds on both sides, so adding cannot fail; a failure
            // would only lose timing figures.
            let _ = a.add(b);
        }
    }

    /// The rows' names, in order.
    pub fn rows(&self) -> Vec<&'static str> {
        self.rows.iter().map(|(n, _)| *n).collect()
    }

    /// Stores each row's p50 and p99 (nanoseconds) into `out`, row by row.
    pub fn publish(&self, out: &[[std::sync::atomic::AtomicU64; 2]]) {
        use std::sync::atomic::Ordering::Relaxed;
        for ((_, h), q) in self.rows.iter().zip(out) {
            if !h.is_empty() {
                q[0].store(h.value_at_quantile(0.5), Relaxed);
                q[1].store(h.value_at_quantile(0.99), Relaxed);
            }
        }
    }

    /// p50/p99/max per row that saw at least one batch.
    pub fn summary(&self) -> Vec<StageLatency> {
        self.rows
            .iter()
            .filter(|(_, h)| !h.is_empty())
            .map(|(name, h)| StageLatency {
                name: (*name).to_string(),
                batches: h.len(),
                p50_ns: h.value_at_quantile(0.5),
                p99_ns: h.value_at_quantile(0.99),
                max_ns: h.max(),
            })
            .collect()
    }
}
