//! Per-batch latency histograms (HDR), one per named row: `source`,
//! `queue`, then one per stage, keyed by the stage's name.

use crate::report::StageLatency;
use hdrhistogram::Histogram;

/// The source's row: reading, dissecting, hashing and filling a batch.
pub const SOURCE: &str = "source";
/// The queues' row: the wait between a batch's send and its receipt.
pub const QUEUE: &str = "queue";

/// One histogram per row, in nanoseconds.
#[derive(Clone, Debug)]
pub struct Latency {
    rows: Vec<(&'static str, Histogram<u64>)>,
}

impl Latency {
    /// Empty histograms (1 ns to an hour, three significant digits) for
    /// `source`, `queue` and each of `stages`.
    pub fn new(stages: &[&'static str]) -> Latency {
        // Constant, valid bounds: this cannot fail whatever the input.
        let h = Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
            .expect("constant histogram bounds are valid");
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
            h.saturating_record(ns.max(1));
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
