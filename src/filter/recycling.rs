//! Recycling Bloom filters: Bloom filters that forget by clearing, for
//! telling new flows from seen ones on an endless stream (Dozier,
//! Salamatian, Rubenstein, paper 004).
//!
//! - **Policy**: recycle when a new message would leave more than `sigma`
//!   bits set ([`RecyclePolicy::Sigma`]), after `N` bit-setting insertions
//!   ([`RecyclePolicy::Insertions`]), or when a time span has passed since the
//!   last recycle ([`RecyclePolicy::Time`]).
//! - **Phases**: one-phase filters clear on recycle. Two-phase filters keep
//!   an *active* and a *frozen* half of `m` bits each; a message is seen if
//!   either half has it, and a recycle clears the frozen half and swaps the
//!   roles (004 §II-C).
//! - **Retaining** filters insert the message that triggered a recycle into
//!   the fresh filter; non-retaining ones drop it (004 §IV-B).
//! - **Hashing**: colliding (`k` independent positions over the `m` bits) or
//!   non-colliding (`k` distinct positions), as 004 models them.
//!
//! A sigma-bounded filter checks *before* setting bits whether a message
//! would cross `sigma`, so the half that is frozen at a swap holds exactly
//! the bits set before the triggering message (004 eq. (24)).
//!
//! False positives: a new message whose positions are all set (in either
//! half) is reported as seen. False negatives: a message seen before the
//! last recycle (one phase) or the last two (two phase) is reported as new.
//!
//! Every message goes to the active half, as 004 §II-C describes ("incoming
//! messages are hashed and added to the active filter"); that is a no-op
//! for a message the active half already has. In a two-phase filter it
//! refreshes a message only the frozen half remembered, so long-lived flows
//! survive swaps, and it is what 004's model assumes (the active half
//! evolves with every new arrival, independently of the frozen half).
//! Skipping such messages instead would let the active half fill only the
//! frozen half's complement; with `k = 1` and `sigma >= m/2` every message
//! would then match one half and the filter would never recycle again.
//!
//! ```
//! use flowsieve::filter::{RecyclePolicy, RecyclingBloomFilter};
//! use flowsieve::model::recycling::Hashing;
//! let mut f = RecyclingBloomFilter::new(1024, 3, RecyclePolicy::Sigma(512), Hashing::Colliding, false, false);
//! assert!(f.test_and_insert(0x1234_5678_9abc_def0));  // new
//! assert!(!f.test_and_insert(0x1234_5678_9abc_def0)); // seen
//! assert_eq!(f.stats().recycles, 0);
//! ```

use super::{BIT_BLOCK_BITS, BitArray, BitLayout, InsertionLog, PreparedMessage};
use crate::hash::fmix64;
use crate::ingest::Timestamp;
use crate::model::recycling::Hashing;

/// When a recycling filter clears. Written (and serialised) as
/// `sigma:S`, `n:N` or `time:T`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecyclePolicy {
    /// When a new message would leave more than this many bits set.
    Sigma(u64),
    /// After this many bit-setting insertions.
    Insertions(u64),
    /// When this many nanoseconds of (trace) time have passed since the last
    /// recycle, checked at each message.
    Time(u64),
}

impl std::fmt::Display for RecyclePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            RecyclePolicy::Sigma(s) => write!(f, "sigma:{s}"),
            RecyclePolicy::Insertions(n) => write!(f, "n:{n}"),
            RecyclePolicy::Time(ns) => write!(f, "time:{}", crate::ingest::DurationNs(ns)),
        }
    }
}

/// Counters of a recycling filter's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecyclingStats {
    /// Messages reported new.
    pub new_messages: u64,
    /// Messages reported seen.
    pub seen_messages: u64,
    /// Recycles (clears or swaps).
    pub recycles: u64,
    /// Messages that triggered a recycle and were dropped (non-retaining).
    pub dropped_triggers: u64,
    /// Bits set, over the filter's life.
    pub bits_set: u64,
}

/// The most hash positions a message may have.
pub const MAX_K: usize = 32;

/// A recycling Bloom filter; see the module documentation.
#[derive(Clone, Debug)]
pub struct RecyclingBloomFilter {
    m: usize,
    k: usize,
    policy: RecyclePolicy,
    hashing: Hashing,
    retaining: bool,
    /// Where a message's positions lie (see [`RecyclingBloomFilter::with_layout`]).
    layout: BitLayout,
    /// Blocks of the blocked layout: `max(1, m / BIT_BLOCK_BITS)`, the
    /// last one taking the remainder.
    blocks: usize,
    active: BitArray,
    active_ones: u64,
    frozen: Option<BitArray>,
    insertions: u64,
    cycle_start: Option<Timestamp>,
    stats: RecyclingStats,
    /// The exact front cache, when enabled (see
    /// [`RecyclingBloomFilter::with_front_cache`]).
    cache: Vec<CachedMessage>,
    /// The messages that set bits in the active half since it was clear,
    /// and likewise for the frozen half: a recycle clears a half by its
    /// log's positions while the log is complete, and by a sweep
    /// otherwise (see [`InsertionLog`]). A message that set no bit needs
    /// no entry: every bit it has was set by a logged one.
    active_log: InsertionLog,
    frozen_log: InsertionLog,
}

/// A message known to be in the active half: its hash, and the recycle
/// epoch (`recycles + 1`; 0 marks an empty slot) in which it was.
#[derive(Clone, Copy, Debug, Default)]
struct CachedMessage {
    hash: u64,
    epoch: u64,
}

impl RecyclingBloomFilter {
    /// A filter of `m` bits per phase (two-phase filters use `2m` in all),
    /// `k` positions per message (at most [`MAX_K`] and at most `m`).
    pub fn new(
        m: usize,
        k: usize,
        policy: RecyclePolicy,
        hashing: Hashing,
        retaining: bool,
        two_phase: bool,
    ) -> RecyclingBloomFilter {
        let m = m.max(1);
        let k = k.clamp(1, MAX_K.min(m));
        // A message's positions are `k` scattered words of one half.
        let log = InsertionLog::for_filter(m.div_ceil(64) * 8, k);
        RecyclingBloomFilter {
            m,
            k,
            policy,
            hashing,
            retaining,
            layout: BitLayout::Scattered,
            blocks: (m / BIT_BLOCK_BITS).max(1),
            active: BitArray::new(m),
            active_ones: 0,
            frozen: two_phase.then(|| BitArray::new(m)),
            insertions: 0,
            cycle_start: None,
            stats: RecyclingStats::default(),
            cache: Vec::new(),
            frozen_log: log.clone(),
            active_log: log,
        }
    }

    /// The same filter with an exact front cache of `slots` entries
    /// (rounded up to a power of two; 0 disables it).
    ///
    /// The cache remembers, direct-mapped by hash, messages that are in the
    /// active half, tagged with the recycle epoch they were seen in. Bits
    /// are only ever cleared by a recycle, which starts a new epoch, so a
    /// message found in the cache with the current epoch has all its
    /// positions set in the active half: the filter would answer "seen"
    /// and change nothing but the seen count, which is what the cache does
    /// without computing a position. Every answer and every statistic is
    /// therefore the same with or without the cache (a property test checks
    /// it for every policy); only the work differs. A time-bounded filter
    /// still checks the clock first, so a due recycle happens before the
    /// cache is asked.
    ///
    /// ```
    /// use flowsieve::filter::{RecyclePolicy, RecyclingBloomFilter};
    /// use flowsieve::model::recycling::Hashing;
    /// let mut f = RecyclingBloomFilter::new(1024, 3, RecyclePolicy::Insertions(2), Hashing::Colliding, false, false)
    ///     .with_front_cache(64);
    /// assert!(f.test_and_insert(1));
    /// assert!(!f.test_and_insert(1)); // from the cache
    /// assert!(f.test_and_insert(2)); // the second insertion recycles
    /// assert!(f.test_and_insert(1)); // a new epoch: the cache does not answer
    /// ```
    pub fn with_front_cache(mut self, slots: usize) -> RecyclingBloomFilter {
        self.cache = if slots == 0 {
            Vec::new()
        } else {
            vec![CachedMessage::default(); slots.next_power_of_two()]
        };
        self
    }

    /// The same filter with its bits laid out as `layout` (the default is
    /// [`BitLayout::Scattered`], 004's filter).
    ///
    /// In the blocked layout a message's `k` positions all lie in one
    /// block of [`BIT_BLOCK_BITS`] bits, one 64-byte cache line, which the
    /// message picks uniformly from the `max(1, m / 512)` blocks (the last
    /// one also takes the `m mod 512` bits past the others). Within the
    /// block the positions are drawn as the scattered layout draws them in
    /// the whole phase: independent (colliding) or distinct. So a message
    /// that the front cache does not answer costs one line instead of `k`,
    /// and its false-positive rate is no longer 004's: the blocks' loads
    /// vary, which [`crate::model::blocked_recycling`] models as a Poisson
    /// mixture over a block's load. Call it before the filter has seen a
    /// message: positions change with the layout.
    ///
    /// ```
    /// use flowsieve::filter::{BitLayout, RecyclePolicy, RecyclingBloomFilter};
    /// use flowsieve::model::recycling::Hashing;
    /// let mut f = RecyclingBloomFilter::new(1 << 16, 4, RecyclePolicy::Sigma(1 << 15), Hashing::Colliding, false, false)
    ///     .with_layout(BitLayout::Blocked);
    /// assert!(f.test_and_insert(7));
    /// assert!(!f.test_and_insert(7));
    /// // All of the message's bits are in one 512-bit block.
    /// let ones: Vec<usize> = f.halves().0.ones().collect();
    /// assert!(!ones.is_empty() && ones.iter().all(|&p| p / 512 == ones[0] / 512));
    /// ```
    pub fn with_layout(mut self, layout: BitLayout) -> RecyclingBloomFilter {
        self.layout = layout;
        let log = InsertionLog::for_filter(self.m.div_ceil(64) * 8, self.lines_per_message());
        self.frozen_log = log.clone();
        self.active_log = log;
        self
    }

    /// The layout of the filter's bits.
    pub fn layout(&self) -> BitLayout {
        self.layout
    }

    /// Cache lines a message's positions fall in: `k` scattered, one
    /// blocked (a block is one line).
    #[inline]
    fn lines_per_message(&self) -> usize {
        match self.layout {
            BitLayout::Scattered => self.k,
            BitLayout::Blocked => 1,
        }
    }

    /// The cache slot of a hash (the cache is non-empty).
    #[inline]
    fn slot(&self, h: u64) -> usize {
        (h as usize) & (self.cache.len() - 1)
    }

    /// Asks the CPU to fetch what a [`RecyclingBloomFilter::test_and_insert`]
    /// of `h` reads first, its front-cache slot. Changes nothing.
    ///
    /// Not the active half's words at the `k` positions as well: computing
    /// the positions a second time cost more than the misses it hid (the
    /// new-flow stage went from 16.6 to 22.2 ns a packet; BENCHMARKS.md,
    /// fourth throughput round).
    #[inline]
    pub fn prefetch(&self, h: u64) {
        if !self.cache.is_empty()
            && let Some(c) = self.cache.get(self.slot(h))
        {
            crate::prefetch::prefetch((c as *const CachedMessage).cast::<u8>());
        }
    }

    /// True when the front cache answers `h`: `h` is in its slot, from the
    /// current epoch.
    #[inline]
    fn cache_answers(&self, h: u64) -> bool {
        (!self.cache.is_empty())
            .then(|| self.cache.get(self.slot(h)).copied())
            .flatten()
            .is_some_and(|c| c.hash == h && c.epoch == self.stats.recycles + 1)
    }

    /// Prepares `h`'s test a few messages ahead: when the front cache is not
    /// going to answer it, works out its positions into `into` and asks the
    /// CPU to fetch the active half's words at them. Changes nothing in the
    /// filter. [`RecyclingBloomFilter::test_and_insert_prepared`] then takes
    /// the positions instead of working them out again.
    ///
    /// Why: a message the front cache does not know tests `k` bits at
    /// independent places in the active half, and on a shard's half larger
    /// than L2 each is a miss that the test waits for (the largest single
    /// stall of the new-flow stage, 8-10 % of a run's samples). Fetched a
    /// few messages ahead, the misses overlap the work between. Only
    /// messages the cache will not answer are prepared, which read the
    /// cache slot (fetched earlier still by
    /// [`RecyclingBloomFilter::prefetch`]), so a packet of a known flow
    /// costs one compare, and the positions are worked out once either way.
    #[inline]
    pub fn prepare(&self, h: u64, into: &mut PreparedMessage) {
        into.hash = h;
        into.ready = !self.cache_answers(h);
        if into.ready {
            self.positions(h, &mut into.positions);
            for &p in into.positions.iter().take(self.lines_per_message()) {
                self.active.prefetch(p);
            }
        }
    }

    /// [`RecyclingBloomFilter::test_and_insert`], with the positions that
    /// [`RecyclingBloomFilter::prepare`] left in `prepared` if they are
    /// `h`'s: the same answer and the same filter after.
    #[inline]
    pub fn test_and_insert_prepared(&mut self, h: u64, prepared: &PreparedMessage) -> bool {
        self.test_and_insert_inner(h, None, prepared.positions_of(h))
    }

    /// [`RecyclingBloomFilter::test_and_insert_at`] with prepared positions,
    /// as [`RecyclingBloomFilter::test_and_insert_prepared`].
    #[inline]
    pub fn test_and_insert_prepared_at(
        &mut self,
        h: u64,
        now: Timestamp,
        prepared: &PreparedMessage,
    ) -> bool {
        self.test_and_insert_inner(h, Some(now), prepared.positions_of(h))
    }

    /// Remembers that `h` is in the active half in the current epoch.
    #[inline]
    fn remember(&mut self, h: u64) {
        if !self.cache.is_empty() {
            let i = self.slot(h);
            let epoch = self.stats.recycles + 1;
            if let Some(c) = self.cache.get_mut(i) {
                *c = CachedMessage { hash: h, epoch };
            }
        }
    }

    /// The `k` positions of a message hash, each from its own output of a
    /// splitmix64 stream seeded by the hash and reduced by multiply-shift:
    /// independent uniform positions, as 004's model assumes. (Double
    /// hashing puts a message's positions in an arithmetic progression,
    /// which on arrays of a few thousand bits collides and correlates
    /// measurably more: a Monte Carlo run showed 13% more false positives
    /// than the model at k = 5, m = 1000.) For non-colliding hashing a
    /// position already taken is replaced by the stream's next value. In
    /// the blocked layout the stream's first output picks the block and the
    /// positions are drawn the same way within it.
    fn positions(&self, h: u64, out: &mut [usize; MAX_K]) {
        const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut state = h;
        // Where the positions are drawn: the whole phase, or the message's
        // block (picked by the stream's first output; see `with_layout`).
        let (base, span) = match self.layout {
            BitLayout::Scattered => (0, self.m),
            BitLayout::Blocked => {
                state = state.wrapping_add(GOLDEN);
                let block = ((u128::from(fmix64(state)) * self.blocks as u128) >> 64) as usize;
                let base = block * BIT_BLOCK_BITS;
                let span = if block + 1 == self.blocks {
                    self.m - base
                } else {
                    BIT_BLOCK_BITS
                };
                (base, span)
            }
        };
        let m = span as u128;
        let mut filled = 0;
        let mut draws = 0;
        while filled < self.k {
            state = state.wrapping_add(GOLDEN);
            let p = base + ((u128::from(fmix64(state)) * m) >> 64) as usize;
            draws += 1;
            if self.hashing == Hashing::NonColliding && out[..filled].contains(&p) {
                if draws > 64 * self.k {
                    // Unreachable in practice (k <= span: a block has at
                    // least min(m, 512) bits and k <= 32, k <= m); bounds
                    // the loop.
                    let mut q = p;
                    while out[..filled].contains(&q) {
                        q = base + (q - base + 1) % span;
                    }
                    out[filled] = q;
                    filled += 1;
                }
                continue;
            }
            out[filled] = p;
            filled += 1;
        }
    }

    /// True when the filter would report `h` as seen (its positions all
    /// set in the active half or, for a two-phase filter, the frozen one),
    /// without inserting it or counting it: a query only, as RedisBloom's
    /// `BF.EXISTS` is beside `BF.ADD`.
    ///
    /// ```
    /// use flowsieve::filter::{RecyclePolicy, RecyclingBloomFilter};
    /// use flowsieve::model::recycling::Hashing;
    /// let mut f = RecyclingBloomFilter::new(4096, 3, RecyclePolicy::Sigma(2048), Hashing::Colliding, false, false);
    /// assert!(!f.contains(5));
    /// f.test_and_insert(5);
    /// assert!(f.contains(5));
    /// assert_eq!(f.stats().new_messages, 1);
    /// ```
    pub fn contains(&self, h: u64) -> bool {
        let mut pos = [0usize; MAX_K];
        self.positions(h, &mut pos);
        let pos = &pos[..self.k];
        pos.iter().all(|&p| self.active.get(p))
            || self
                .frozen
                .as_ref()
                .is_some_and(|f| pos.iter().all(|&p| f.get(p)))
    }

    /// Reports whether the message with this hash is new, and remembers it.
    /// Time-bounded filters need [`RecyclingBloomFilter::test_and_insert_at`].
    #[inline]
    pub fn test_and_insert(&mut self, h: u64) -> bool {
        self.test_and_insert_inner(h, None, None)
    }

    /// As [`RecyclingBloomFilter::test_and_insert`], at a time (for
    /// [`RecyclePolicy::Time`]).
    #[inline]
    pub fn test_and_insert_at(&mut self, h: u64, now: Timestamp) -> bool {
        self.test_and_insert_inner(h, Some(now), None)
    }

    /// The test and insert, at `now` for a time-bounded filter, with `h`'s
    /// positions when they were prepared.
    #[inline]
    fn test_and_insert_inner(
        &mut self,
        h: u64,
        now: Option<Timestamp>,
        prepared: Option<&[usize; MAX_K]>,
    ) -> bool {
        if let (RecyclePolicy::Time(span), Some(now)) = (self.policy, now) {
            match self.cycle_start {
                None => self.cycle_start = Some(now),
                Some(start) if now.as_nanos() - start.as_nanos() >= i128::from(span) => {
                    self.recycle();
                    self.cycle_start = Some(now);
                }
                _ => {}
            }
        }
        if self.cache_answers(h) {
            self.stats.seen_messages += 1;
            return false;
        }
        self.test_and_insert_uncached(h, prepared)
    }

    /// The rest of [`RecyclingBloomFilter::test_and_insert_inner`], for a
    /// message the front cache did not answer. Apart so that the cache's
    /// answer inlines into the caller: whole, the function was a call for
    /// every packet, hits included (BENCHMARKS.md, twenty-first round).
    #[inline(never)]
    fn test_and_insert_uncached(&mut self, h: u64, prepared: Option<&[usize; MAX_K]>) -> bool {
        let mut worked_out = [0usize; MAX_K];
        let pos = match prepared {
            Some(p) => p,
            None => {
                self.positions(h, &mut worked_out);
                &worked_out
            }
        };
        let pos = &pos[..self.k];
        let in_active = pos.iter().all(|&p| self.active.get(p));
        if in_active {
            self.stats.seen_messages += 1;
            self.remember(h);
            return false;
        }
        let in_frozen = self
            .frozen
            .as_ref()
            .is_some_and(|f| pos.iter().all(|&p| f.get(p)));
        let is_new = !in_frozen;
        if is_new {
            self.stats.new_messages += 1;
        } else {
            self.stats.seen_messages += 1;
        }
        if let RecyclePolicy::Sigma(sigma) = self.policy {
            let mut fresh = 0u64;
            for (i, &p) in pos.iter().enumerate() {
                if !self.active.get(p) && !pos[..i].contains(&p) {
                    fresh += 1;
                }
            }
            if self.active_ones + fresh > sigma {
                self.recycle();
                if !self.retaining {
                    self.stats.dropped_triggers += 1;
                    return is_new;
                }
            }
        }
        let mut set = 0;
        for &p in pos {
            if self.active.set(p) {
                set += 1;
            }
        }
        self.active_ones += set;
        self.stats.bits_set += set;
        // A message that set no bit (all its bits were set already) is not
        // an insertion and needs no clearing; with no branch on it (see
        // `InsertionLog::record_if`).
        self.insertions += u64::from(set > 0);
        self.active_log.record_if(h, set > 0);
        if let RecyclePolicy::Insertions(n) = self.policy
            && self.insertions >= n
        {
            // The message's bits go with this recycle: not remembered.
            self.recycle();
            return is_new;
        }
        self.remember(h);
        is_new
    }

    /// Clears (one phase) or clears the frozen half and swaps (two phase).
    ///
    /// The half is cleared by the words of its logged messages' positions
    /// when its log is complete, else by a sweep; either way it is all
    /// zero after.
    pub fn recycle(&mut self) {
        let k = self.k;
        let log_of_cleared = if self.frozen.is_some() {
            &mut self.frozen_log
        } else {
            &mut self.active_log
        };
        let mut log = std::mem::take(log_of_cleared);
        match log.complete() {
            Some(hashes) => {
                let mut pos = [0usize; MAX_K];
                for &h in hashes {
                    self.positions(h, &mut pos);
                    self.half_to_clear().clear_words_at(&pos[..k]);
                }
            }
            None => self.half_to_clear().clear(),
        }
        log.reset();
        match self.frozen.as_mut() {
            Some(frozen) => {
                // The cleared half becomes the active one, with the empty
                // log; the old active half is frozen with its log.
                std::mem::swap(frozen, &mut self.active);
                self.frozen_log = std::mem::replace(&mut self.active_log, log);
            }
            None => self.active_log = log,
        }
        self.active_ones = 0;
        self.insertions = 0;
        self.stats.recycles += 1;
    }

    /// The half a recycle clears: the frozen one, or the only one.
    fn half_to_clear(&mut self) -> &mut BitArray {
        match self.frozen.as_mut() {
            Some(frozen) => frozen,
            None => &mut self.active,
        }
    }

    /// The active half and, for a two-phase filter, the frozen one.
    pub fn halves(&self) -> (&BitArray, Option<&BitArray>) {
        (&self.active, self.frozen.as_ref())
    }

    /// Faults both halves' memory pages in as writable now, if together
    /// they fit in `*budget` bytes (which they then take from the budget);
    /// returns whether they fitted. Changes no bit (see
    /// [`BitArray::prefault`]).
    ///
    /// ```
    /// use flowsieve::filter::{RecyclePolicy, RecyclingBloomFilter};
    /// use flowsieve::model::recycling::Hashing;
    /// let policy = RecyclePolicy::Sigma(1000);
    /// let mut f = RecyclingBloomFilter::new(1 << 20, 4, policy, Hashing::Colliding, false, true);
    /// let mut budget = 200 << 10; // less than the two halves' 256 KiB
    /// assert!(!f.prefault(&mut budget));
    /// assert_eq!(budget, 200 << 10);
    /// budget = 1 << 20;
    /// assert!(f.prefault(&mut budget));
    /// assert_eq!(budget, (1 << 20) - (256 << 10));
    /// ```
    pub fn prefault(&mut self, budget: &mut usize) -> bool {
        let bytes = |a: &BitArray| std::mem::size_of_val(a.words());
        let need = bytes(&self.active) + self.frozen.as_ref().map_or(0, bytes);
        if need > *budget {
            return false;
        }
        *budget -= need;
        let mut unbounded = usize::MAX;
        self.active.prefault(&mut unbounded);
        if let Some(f) = self.frozen.as_mut() {
            f.prefault(&mut unbounded);
        }
        true
    }

    /// Bits set in the active half.
    pub fn active_bits(&self) -> u64 {
        self.active_ones
    }

    /// Bits per phase.
    pub fn m(&self) -> usize {
        self.m
    }

    /// Positions per message.
    pub fn k(&self) -> usize {
        self.k
    }

    /// True for a two-phase filter.
    pub fn two_phase(&self) -> bool {
        self.frozen.is_some()
    }

    /// The life counters.
    pub fn stats(&self) -> RecyclingStats {
        self.stats
    }
}
crate::serialize_as_display!(RecyclePolicy);
