//! A file's time order: its earliest and latest timestamps, and how often
//! and how far a record is stamped before the one just ahead of it.

use super::Timestamp;

/// What a file's timestamps did, seen one record at a time.
///
/// A capture in strict time order (capinfos' "strict time order: True")
/// never steps back; merged or multi-queue captures do, by microseconds,
/// and a file stitched from others can step back by hours. The pipeline
/// counts a packet stamped before one it already counted at the latest
/// time so far, so a replay reports these steps beside the file.
///
/// [`TimeOrder::see`] is on the reader's path for every record. A record
/// at or after the latest one so far, the common case, costs one
/// comparison and two stores; everything else (the first record, a step
/// back, a new earliest time) is out of line. The state before the first
/// record (`newest` at [`Timestamp::MAX`]) sends the first record that
/// way too, so no separate "seen anything" test runs per record.
///
/// ```
/// use flowsieve::ingest::{TimeOrder, Timestamp};
/// let at = |s| Timestamp::new(s, 0).unwrap();
/// let mut order = TimeOrder::new();
/// for s in [5, 7, 6, 6, 9, 2] {
///     order.see(at(s));
/// }
/// // 7 -> 6 and 9 -> 2 step back; 6 -> 6 does not.
/// assert_eq!(order.steps_back(), 2);
/// assert_eq!(order.largest_step_back_ns(), 7_000_000_000);
/// assert_eq!(order.span(), Some((at(2), at(9))));
/// assert_eq!(TimeOrder::new().span(), None);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TimeOrder {
    /// The latest timestamp so far ([`Timestamp::MAX`] before the first).
    newest: Timestamp,
    /// The record just seen, when it is not `newest`.
    previous: Timestamp,
    /// Whether the record just seen is `newest` (then `previous` is stale).
    previous_is_newest: bool,
    /// Whether the out-of-line path has taken a first record.
    started: bool,
    /// The earliest timestamp so far ([`Timestamp::MAX`] before the first).
    earliest: Timestamp,
    steps_back: u64,
    largest_step_back_ns: i128,
}

impl Default for TimeOrder {
    fn default() -> TimeOrder {
        TimeOrder::new()
    }
}

impl TimeOrder {
    /// Nothing seen yet.
    pub const fn new() -> TimeOrder {
        TimeOrder {
            newest: Timestamp::MAX,
            previous: Timestamp::MAX,
            previous_is_newest: false,
            started: false,
            earliest: Timestamp::MAX,
            steps_back: 0,
            largest_step_back_ns: 0,
        }
    }

    /// The next timestamped record.
    #[inline(always)]
    pub fn see(&mut self, ts: Timestamp) {
        if ts >= self.newest {
            self.newest = ts;
            self.previous_is_newest = true;
        } else {
            self.behind(ts);
        }
    }

    /// The first record, or one stamped before the latest so far.
    #[cold]
    #[inline(never)]
    fn behind(&mut self, ts: Timestamp) {
        // Before the first record `newest` is MAX, so every first record
        // but one stamped MAX itself comes here; one stamped MAX went the
        // common way and set `previous_is_newest`, and this one steps back
        // from it.
        if !self.started && !self.previous_is_newest {
            self.started = true;
            self.newest = ts;
            self.earliest = ts;
            self.previous_is_newest = true;
            return;
        }
        self.started = true;
        let previous = if self.previous_is_newest {
            self.newest
        } else {
            self.previous
        };
        if ts < previous {
            self.steps_back += 1;
            self.largest_step_back_ns = self
                .largest_step_back_ns
                .max(previous.as_nanos() - ts.as_nanos());
        }
        self.earliest = self.earliest.min(ts);
        self.previous = ts;
        self.previous_is_newest = false;
    }

    /// Records stamped before the record just ahead of them.
    pub fn steps_back(&self) -> u64 {
        self.steps_back
    }

    /// The largest of those steps, in nanoseconds (0 when there is none).
    pub fn largest_step_back_ns(&self) -> i128 {
        self.largest_step_back_ns
    }

    /// The earliest and the latest timestamp, or `None` before any.
    pub fn span(&self) -> Option<(Timestamp, Timestamp)> {
        (self.started || self.previous_is_newest).then_some((self.earliest, self.newest))
    }
}
