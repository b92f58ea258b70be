//! Per-batch latency histograms (HDR), one per stage.

use crate::report::StageLatency;
use hdrhistogram::Histogram;

/// The stages whose batches are timed, in report order.
pub const STAGE_NAMES: [&str; 5] = ["source", "queue", "heavy", "new_flows", "selective"];

/// One histogram per entry of [`STAGE_NAMES`], in nanoseconds.
#[derive(Clone, Debug)]
pub struct Latency {
    hists: Vec<Histogram<u64>>,
}

impl Default for Latency {
    fn default() -> Latency {
        Latency::new()
    }
}

impl Latency {
    /// Empty histograms from 1 ns to an hour, three significant digits.
    pub fn new() -> Latency {
        // Constant, valid bounds: this cannot fail whatever the input.
        let h = Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
            .expect("constant histogram bounds are valid");
        Latency {
            hists: vec![h; STAGE_NAMES.len()],
        }
    }

    /// Records one batch's time in stage `i` of [`STAGE_NAMES`].
    #[inline]
    pub fn record(&mut self, i: usize, ns: u64) {
        if let Some(h) = self.hists.get_mut(i) {
            h.saturating_record(ns.max(1));
        }
    }

    /// Adds another set of histograms.
    pub fn merge(&mut self, other: &Latency) {
        for (a, b) in self.hists.iter_mut().zip(&other.hists) {
            // Same bounds on both sides, so adding cannot fail; a failure
            // would only lose timing figures.
            let _ = a.add(b);
        }
    }

    /// p50/p99/max per stage that saw at least one batch.
    pub fn summary(&self) -> Vec<StageLatency> {
        STAGE_NAMES
            .iter()
            .zip(&self.hists)
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
