//! Per-batch latency histograms (HDR), one per named row: `source`,
//! `queue`, then one per stage, keyed by the stage's name.

use crate::report::StageLatency;
use hdrhistogram::Histogram;

/// The source's row: reading, dissecting, hashing and filling a batch.
pub const SOURCE: &str = "source";
/// The queues' row: the wait between a batch's send and its receipt.
pub const QUEUE: &str = "queue";
/// The workers' exact flow table's row, after the stages' (runs with ground
/// truth kept by the workers): recording a batch's packets into it.
pub const TRUTH: &str = "truth";

/// One histogram per row, in nanoseconds, with the row's exact total
/// time and records.
///
/// Each row starts small and grows with the largest time it has seen, up
/// to [`Latency::MAX_NS`]. Why: a histogram allocated for an hour at three
/// significant digits holds 33,792 counts (264 KiB), and the default job's
/// fifteen rows (the source's and, per worker, the queue's and each
/// stage's) wrote 4 MiB before the first packet; batch times stay under a
/// millisecond, a few thousand counts. A growing row reads exactly as a
/// row bounded at an hour would for every time up to an hour (a property
/// test checks it).
///
/// Why the totals beside the histograms: a batch's quantiles say how long
/// a batch waits, not where a packet's time goes. A stage row's total
/// over its records is the stage's time a packet on the workers, exact
/// (no histogram bucket rounds it), which is what `flowsieve bench` and
/// the report's `ns/pkt` column give per stage.
///
/// Why times are held back before they reach the histograms: a worker
/// records four or five times a batch, each into a histogram that the
/// batch's stage work (megabytes of filter lines) has pushed out of cache,
/// so each record waited on a miss or three (the histogram's fields and
/// its count). Held in one small array and recorded `HELD_TIMES` at a
/// time, the histograms are fetched once a flush and their misses
/// overlap: the histograms' share of a replay's CPU fell from 1.22 % to
/// 0.36 % in a profile (BENCHMARKS.md, ninety-third round). Every reading
/// flushes first, so no figure changes.
#[derive(Clone, Debug)]
pub struct Latency {
    rows: Vec<Row>,
    /// Times recorded but not yet in their row's histogram: (row, ns).
    held: Vec<(usize, u64)>,
}

/// How many times [`Latency`] holds before it records them.
const HELD_TIMES: usize = 64;

/// One row of [`Latency`].
#[derive(Clone, Debug)]
struct Row {
    name: &'static str,
    histogram: Histogram<u64>,
    /// Every batch's time, summed (saturating).
    total_ns: u64,
    /// Every batch's records, summed.
    records: u64,
}

impl Latency {
    /// The largest time a row records, in nanoseconds: an hour. A longer
    /// time is recorded as an hour.
    pub const MAX_NS: u64 = 3_600_000_000_000;

    /// Empty histograms (1 ns up, three significant digits, growing to an
    /// hour) for `source`, `queue` and each of `stages` (in the engine,
    /// the stages and then `truth` when the workers keep the exact
    /// table).
    pub fn new(stages: &[&'static str]) -> Latency {
        // A constant, valid precision: this cannot fail whatever the input.
        let h = Histogram::new(3).expect("three significant digits are valid");
        Latency {
            rows: [SOURCE, QUEUE]
                .iter()
                .chain(stages)
                .map(|&name| Row {
                    name,
                    histogram: h.clone(),
                    total_ns: 0,
                    records: 0,
                })
                .collect(),
            held: Vec::with_capacity(HELD_TIMES),
        }
    }

    /// Records one batch of `records` records that took `ns` nanoseconds
    /// in row `i` (0 `source`, 1 `queue`, then the stages in order).
    ///
    /// ```
    /// use flowsieve::pipeline::Latency;
    /// let mut l = Latency::new(&["heavy"]);
    /// l.record(2, 5_000, 100);
    /// l.record(2, 7_000, 50);
    /// let heavy = &l.summary()[0];
    /// assert_eq!((heavy.batches, heavy.records, heavy.total_ns), (2, 150, 12_000));
    /// assert_eq!(heavy.ns_per_record(), Some(80.0));
    /// ```
    #[inline]
    pub fn record(&mut self, i: usize, ns: u64, records: u64) {
        if let Some(row) = self.rows.get_mut(i) {
            row.total_ns = row.total_ns.saturating_add(ns);
            row.records = row.records.saturating_add(records);
            self.held.push((i, ns));
            if self.held.len() >= HELD_TIMES {
                self.flush();
            }
        }
    }

    /// Records the held times into their rows' histograms.
    fn flush(&mut self) {
        for (i, ns) in self.held.drain(..) {
            if let Some(row) = self.rows.get_mut(i) {
                Self::into_histogram(&mut row.histogram, ns);
            }
        }
    }

    /// Records one time into a row's histogram.
    fn into_histogram(histogram: &mut Histogram<u64>, ns: u64) {
        // Not `saturating_record`: it clamps to a growing row's *current*
        // top, so a first 2,048 ns batch after 1 ns ones would read as
        // 2 ns. The row clamps to its own bound and grows to it; recording
        // a value within it cannot fail (a failure would only lose a
        // timing figure).
        let _ = histogram.record(ns.clamp(1, Self::MAX_NS));
    }

    /// Adds another set of histograms with the same rows.
    pub fn merge(&mut self, other: &Latency) {
        self.flush();
        for &(i, ns) in &other.held {
            if let Some(row) = self.rows.get_mut(i) {
                Self::into_histogram(&mut row.histogram, ns);
            }
        }
        for (a, b) in self.rows.iter_mut().zip(&other.rows) {
            // Same bounds on both sides, so adding cannot fail; a failure
            // would only lose timing figures.
            let _ = a.histogram.add(&b.histogram);
            a.total_ns = a.total_ns.saturating_add(b.total_ns);
            a.records = a.records.saturating_add(b.records);
        }
    }

    /// The rows' names, in order.
    pub fn rows(&self) -> Vec<&'static str> {
        self.rows.iter().map(|r| r.name).collect()
    }

    /// Stores each row's p50 and p99 (nanoseconds) into `out`, row by row.
    pub fn publish(&mut self, out: &[[std::sync::atomic::AtomicU64; 2]]) {
        use std::sync::atomic::Ordering::Relaxed;
        self.flush();
        for (row, q) in self.rows.iter().zip(out) {
            let h = &row.histogram;
            if !h.is_empty() {
                q[0].store(h.value_at_quantile(0.5), Relaxed);
                q[1].store(h.value_at_quantile(0.99), Relaxed);
            }
        }
    }

    /// p50/p99/max per row that saw at least one batch.
    pub fn summary(&mut self) -> Vec<StageLatency> {
        self.flush();
        self.rows
            .iter()
            .filter(|r| !r.histogram.is_empty())
            .map(|r| StageLatency {
                name: r.name.to_string(),
                batches: r.histogram.len(),
                p50_ns: r.histogram.value_at_quantile(0.5),
                p99_ns: r.histogram.value_at_quantile(0.99),
                max_ns: r.histogram.max(),
                records: r.records,
                total_ns: r.total_ns,
            })
            .collect()
    }
}
