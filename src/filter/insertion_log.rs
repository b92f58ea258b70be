//! A bounded log of the hashes a filter took since it was last all-zero, so
//! that a filter that took few can be cleared by the words those hashes
//! touched instead of by a sweep of its whole memory.
//!
//! Why: the heavy stage clears its counting filter at every window's end
//! and the new-flow stage clears a recycling filter's half at every
//! recycle. On a dense trace a window fills much of the filter and a sweep
//! (a `memset`, streaming whole cache lines) is the cheapest clear. On a
//! sparse one (a link at tens of packets a second, one-second windows) a
//! window holds a few dozen insertions, and sweeping 512 KiB to undo them
//! was the largest part of the run: on a one-hour trace of 28 packets a
//! second, 43 % of the default job's samples were the sweeps' `memset`
//! (`perf`; BENCHMARKS.md, seventeenth round). Writing only the words a
//! window's hashes touched costs what the window held.
//!
//! A user logs only the insertions that changed a zero: a recycling
//! filter's messages that set a bit, the heavy stage's packets whose
//! estimate after the bump is at most 1 (one of their counters was zero). Every
//! cell that is not zero was first changed by such an insertion, so
//! clearing by them still clears it, and a window of few flows and many
//! packets logs only its flows. The heavy stage logged every packet until
//! the thirty-second round of the throughput work; on a trace of 10 k
//! flows at 2,500 packets a second, a third of its shard-windows passed
//! the limit on repeated packets alone and were swept (BENCHMARKS.md).
//!
//! The log stops growing past its limit and then reports itself
//! incomplete ([`InsertionLog::complete`] is `None`): the filter is then
//! cleared by a sweep, as before. The limit is where the two clears cost
//! the same ([`InsertionLog::for_filter`]), so the log never makes a clear
//! slower than the sweep by more than a bounded constant.
//!
//! ```
//! use flowsieve::filter::InsertionLog;
//! let mut log = InsertionLog::new(2);
//! log.record(7);
//! log.record(9);
//! assert_eq!(log.complete(), Some(&[7, 9][..]));
//! log.record(11);
//! assert_eq!(log.complete(), None); // past the limit: sweep instead
//! log.reset();
//! assert_eq!(log.complete(), Some(&[][..]));
//! ```

/// Cache lines a streaming clear writes in the time a clear by hash writes
/// one (rounded up): a scattered store lands on a line of its own, a
/// sweep's stores are sequential and prefetched.
///
/// Measured, not guessed: `cargo bench --bench filters -- window_clear`
/// inserts `n` hashes into a 512 KiB, `k = 11` filter and clears it both
/// ways. Clearing by hash won at 250 insertions (13.6 against 17.3 µs),
/// tied at 400 (21.4 against 22.3) and lost at 700 (36.2 against 32.4):
/// a scattered line cost about 1.5 streamed ones (BENCHMARKS.md,
/// seventeenth round). Rounding up to 2 keeps a log at its limit on the
/// winning side of the tie.
pub const SCATTERED_LINE_COST: usize = 2;

/// Bytes in a cache line, for [`InsertionLog::for_filter`].
const LINE_BYTES: usize = 64;

/// The hashes inserted since a filter was last all-zero, up to a limit.
///
/// The default log has a limit of 0: it is complete only while empty.
#[derive(Clone, Debug)]
pub struct InsertionLog {
    /// `limit + 1` slots, allocated once: the first `len` hold the logged
    /// hashes, and a hash in the last one marks the log incomplete.
    slots: Box<[u64]>,
    /// Hashes logged, at most `limit + 1`.
    len: usize,
    limit: usize,
}

impl Default for InsertionLog {
    fn default() -> InsertionLog {
        InsertionLog::new(0)
    }
}

/// Two logs are equal when they have the same limit and logged the same
/// hashes: what the slots past `len` hold is not part of the log.
impl PartialEq for InsertionLog {
    fn eq(&self, other: &InsertionLog) -> bool {
        self.limit == other.limit && self.logged() == other.logged()
    }
}

impl Eq for InsertionLog {}

impl InsertionLog {
    /// A log of at most `limit` hashes, its memory allocated now so that a
    /// [`InsertionLog::record`] never allocates.
    pub fn new(limit: usize) -> InsertionLog {
        InsertionLog {
            slots: vec![0; limit.saturating_add(1)].into_boxed_slice(),
            len: 0,
            limit,
        }
    }

    /// The log for a filter of `bytes` bytes whose insertion writes
    /// `lines_per_hash` cache lines: its limit is where clearing by the
    /// logged hashes writes as much as a sweep would, at
    /// [`SCATTERED_LINE_COST`] streamed lines a scattered one.
    ///
    /// ```
    /// use flowsieve::filter::InsertionLog;
    /// // The heavy stage's default shard: 512 KiB of counters, k = 11.
    /// assert_eq!(InsertionLog::for_filter(512 << 10, 11).limit(), 372);
    /// // A new-flow half of 1 Mbit, k = 4.
    /// assert_eq!(InsertionLog::for_filter(1 << 17, 4).limit(), 256);
    /// ```
    pub fn for_filter(bytes: usize, lines_per_hash: usize) -> InsertionLog {
        let lines = bytes / LINE_BYTES;
        InsertionLog::new(lines / SCATTERED_LINE_COST.saturating_mul(lines_per_hash.max(1)))
    }

    /// The most hashes the log keeps.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Logs an insertion of `h` (nothing once the log is past its limit).
    #[inline]
    pub fn record(&mut self, h: u64) {
        self.record_if(h, true);
    }

    /// Logs an insertion of `h` when `changed` (nothing once the log is
    /// past its limit): [`InsertionLog::record`] behind an `if changed`,
    /// with no branch on `changed`.
    ///
    /// Why: the heavy stage logs a packet when its estimate after the bump
    /// is at most 1, which on a trace of many flows is true for some
    /// packets and false for others in no pattern a branch predictor can
    /// learn (a branch-predictor simulation charged that test with a
    /// mispredicted branch every third packet; BENCHMARKS.md,
    /// fifty-eighth round). Here the hash is written to the next free
    /// slot either way and the length moves by `changed`; the only branch
    /// left, whether the log is past its limit, changes once a window.
    ///
    /// ```
    /// use flowsieve::filter::InsertionLog;
    /// let mut log = InsertionLog::new(2);
    /// log.record_if(7, true);
    /// log.record_if(8, false);
    /// log.record_if(9, true);
    /// assert_eq!(log.complete(), Some(&[7, 9][..]));
    /// log.record_if(10, false);
    /// assert_eq!(log.complete(), Some(&[7, 9][..]));
    /// log.record_if(11, true);
    /// assert_eq!(log.complete(), None); // past the limit: sweep instead
    /// ```
    #[inline]
    pub fn record_if(&mut self, h: u64, changed: bool) {
        if let Some(slot) = self.slots.get_mut(self.len) {
            *slot = h;
            self.len += usize::from(changed);
        }
    }

    /// Every hash logged since the last [`InsertionLog::reset`], or `None`
    /// when there were more than the limit.
    pub fn complete(&self) -> Option<&[u64]> {
        (self.len <= self.limit).then(|| self.logged())
    }

    /// The hashes logged, the one past the limit included.
    fn logged(&self) -> &[u64] {
        self.slots.get(..self.len).unwrap_or_default()
    }

    /// Empties the log (the filter was cleared).
    pub fn reset(&mut self) {
        self.len = 0;
    }
}
