//! The partitioned counting Bloom filter (Fan et al., Summary Cache, 001),
//! with 4-, 8- or 16-bit counters packed in 64-bit words.
//!
//! - **Saturation** (001): a counter at its maximum stays there; a delete
//!   never decrements a saturated counter. So saturation can never cause a
//!   false negative: a member's counters are at least its own count or
//!   saturated, and a saturated counter is never lowered back to 0.
//! - **Count thresholding** (003): [`CountingBloomFilter::count_at_least`]
//!   answers "all `k` counters `>= theta`" with false-positive rate
//!   [`crate::model::threshold::fpr_poisson`] and no false negatives while
//!   nothing saturates or is deleted.
//! - **Conservative update** increments only the counters equal to the
//!   minimum of the `k` (Estan and Varghese): estimates stay upper bounds but
//!   grow more slowly; a conservative filter must not be used with deletes.
//!
//! ```
//! use flowsieve::filter::{CounterWidth, Counters, CountingBloomFilter};
//! let mut f = CountingBloomFilter::new(4096, 4, CounterWidth::W4);
//! for _ in 0..20 { f.insert(42); }
//! assert_eq!(f.estimate(42), 15);            // saturated at 2^4 - 1
//! assert!(f.count_at_least(42, 15));
//! f.delete(42);
//! assert_eq!(f.estimate(42), 15);            // saturated counters stay
//! ```

use super::bloom::ShapeMismatch;
use super::{CounterWidth, Counters, Membership};
use crate::hash::PartitionedIndexer;

/// Bumps the `k` counters of hash `$h` held one per `$unit` in `$units`
/// (see `CountingBloomFilter::insert_plain`): each unless saturated,
/// counting a counter that reaches the maximum in `$saturated`; evaluates
/// to the minimum of the new values, as `CounterWidth::bump_fixed` does
/// word by word.
#[cfg(target_endian = "little")]
macro_rules! bump_units {
    ($units:expr, $indexer:expr, $h:expr, $saturated:expr, $unit:ty) => {{
        let (units, saturated) = ($units, &mut $saturated);
        let mut est = u64::MAX;
        $indexer.for_each($h, |i| {
            debug_assert!(i < units.len());
            // SAFETY: `PartitionedIndexer::for_each` yields indices below
            // `k * partition_len`, and `CountingBloomFilter::new` sizes the
            // words to hold that many counters (rounded up to whole words);
            // neither the indexer nor the words' length changes after, so
            // `i` is in bounds. Why unchecked: the bounds check, and the
            // second base register it kept, were 4 of the loop's 21
            // instructions a counter; this loop and `bump_unit`'s
            // one-test step take it to 15, about 60 instructions a packet fewer at
            // k = 11 (callgrind; BENCHMARKS.md, twenty-second round).
            let c = unsafe { units.get_unchecked_mut(i) };
            let next = super::counter_width::bump_unit(c, <$unit>::MAX, saturated);
            est = est.min(u64::from(next));
        });
        est
    }};
}

/// [`CountingBloomFilter::add`]'s plain pass over counters of one unit
/// each (`u8`, `u16`): each of the key's counters to `min(c + n, max)`,
/// a saturation event for each that reaches the maximum from below, and
/// the estimate.
macro_rules! add_units {
    ($units:expr, $indexer:expr, $h:expr, $n:expr, $saturated:expr, $unit:ty) => {{
        let (units, saturated) = ($units, &mut $saturated);
        let max = u64::from(<$unit>::MAX);
        let mut est = u64::MAX;
        $indexer.for_each($h, |i| {
            if let Some(c) = units.get_mut(i) {
                let v = u64::from(*c).saturating_add($n).min(max);
                if u64::from(*c) < max && v == max {
                    *saturated += 1;
                }
                // `v` is at most the unit's maximum.
                *c = v as $unit;
                est = est.min(v);
            }
        });
        est
    }};
}

/// A partitioned counting Bloom filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountingBloomFilter {
    words: Vec<u64>,
    width: CounterWidth,
    indexer: PartitionedIndexer,
    conservative: bool,
    saturated: u64,
}

impl CountingBloomFilter {
    /// `m` counters in `k` partitions (`k` clamped to `1..=MAX_K`), counters
    /// of `width` bits.
    pub fn new(m: usize, k: usize, width: CounterWidth) -> CountingBloomFilter {
        let indexer = PartitionedIndexer::new(m.max(1), k.min(super::MAX_K));
        let counters = indexer.partition_len() * indexer.k();
        CountingBloomFilter {
            words: vec![0; counters.div_ceil(width.per_word())],
            width,
            indexer,
            conservative: false,
            saturated: 0,
        }
    }

    /// The same filter with conservative update.
    pub fn conservative(mut self) -> CountingBloomFilter {
        self.conservative = true;
        self
    }

    /// Counters in use.
    pub fn m(&self) -> usize {
        self.indexer.partition_len() * self.indexer.k()
    }

    /// Hash functions.
    pub fn k(&self) -> usize {
        self.indexer.k()
    }

    /// Counter width.
    pub fn width(&self) -> CounterWidth {
        self.width
    }

    /// True with conservative update.
    pub fn is_conservative(&self) -> bool {
        self.conservative
    }

    #[inline]
    pub(super) fn set_counter(&mut self, i: usize, v: u64) {
        let (w, s) = self.width.locate(i);
        if let Some(x) = self.words.get_mut(w) {
            *x = (*x & !(self.width.max() << s)) | (v << s);
        }
    }

    /// Asks the CPU to fetch the words holding the `k` counters of `h` into
    /// L2, so that an [`CountingBloomFilter::insert`] a few records later
    /// finds them there rather than in memory. Changes nothing.
    ///
    /// Into L2, not L1: with `k` lines a record, a prefetch far enough
    /// ahead to hide a miss to memory has more lines in flight than the
    /// core's L1 miss buffers hold (see `crate::prefetch::prefetch_to_l2`).
    #[inline]
    pub fn prefetch(&self, h: u64) {
        let width = self.width;
        self.indexer.for_each(h, |i| {
            crate::prefetch::prefetch_to_l2(
                self.words.as_ptr().wrapping_add(width.locate(i).0).cast(),
            )
        });
    }

    /// Adds one occurrence of a hash. Returns the new estimate (the minimum
    /// counter).
    // Always inlined (the heavy stage calls it for every packet): as a
    // call it was about 45 instructions a packet more (callgrind;
    // BENCHMARKS.md, twenty-first round).
    #[inline(always)]
    pub fn insert(&mut self, h: u64) -> u64 {
        if !self.conservative {
            // One pass: read, bump unless saturated, write. The width is
            // matched once here, not per counter.
            return match self.width {
                CounterWidth::W4 => self.insert_plain::<4>(h),
                CounterWidth::W8 => self.insert_plain::<8>(h),
                CounterWidth::W16 => self.insert_plain::<16>(h),
            };
        }
        self.insert_conservative(h)
    }

    /// Adds `n` occurrences of a hash at once: the same counters, the same
    /// saturation events and the same estimate as `n` calls of
    /// [`CountingBloomFilter::insert`] in a row, in one pass over the `k`
    /// counters. With `n = 0` nothing changes and the estimate is returned.
    ///
    /// Why it is exact: the `k` counters of a hash are distinct (one a
    /// partition), so under plain update each ends at `min(c + n, max)`;
    /// under conservative update each insert raises the counters at the
    /// key's minimum `m` together, so after `n` every counter is
    /// `max(c, min(m + n, max))`. The heavy stage holds back a flow's
    /// packets that arrive back to back in its shard and adds them here
    /// (`pipeline::heavy`).
    ///
    /// ```
    /// use flowsieve::filter::{CounterWidth, CountingBloomFilter};
    /// let mut one_by_one = CountingBloomFilter::new(1 << 10, 4, CounterWidth::W4).conservative();
    /// let mut at_once = one_by_one.clone();
    /// for h in [5, 9] { one_by_one.insert(h); at_once.insert(h); }
    /// let mut last = 0;
    /// for _ in 0..20 { last = one_by_one.insert(9); }
    /// assert_eq!(at_once.add(9, 20), last);
    /// assert_eq!(last, 15); // saturated: 4-bit counters
    /// assert_eq!(at_once, one_by_one);
    /// ```
    pub fn add(&mut self, h: u64, n: u64) -> u64 {
        // Plain update, 8- and 16-bit counters: each counter to
        // `min(c + n, max)` in place, as the plain insert bumps them.
        #[cfg(target_endian = "little")]
        if !self.conservative {
            match self.width {
                CounterWidth::W8 => {
                    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.words);
                    return add_units!(bytes, self.indexer, h, n, self.saturated, u8);
                }
                CounterWidth::W16 => {
                    let units: &mut [u16] = bytemuck::cast_slice_mut(&mut self.words);
                    return add_units!(units, self.indexer, h, n, self.saturated, u16);
                }
                CounterWidth::W4 => {}
            }
        }
        // Conservative: every counter to at least the key's minimum plus `n`.
        let floor = self.conservative.then(|| {
            Counters::estimate(self, h)
                .saturating_add(n)
                .min(self.width.max())
        });
        let (words, width, saturated) = (&mut self.words, self.width, &mut self.saturated);
        let mut est = u64::MAX;
        self.indexer.for_each(h, |i| {
            let (w, s) = width.locate(i);
            if let Some(word) = words.get_mut(w) {
                let v = match floor {
                    Some(target) => width.raise_to(word, s, target, saturated),
                    None => width.add(word, s, n, saturated),
                };
                est = est.min(v);
            }
        });
        est
    }

    /// [`CountingBloomFilter::insert`] under conservative update. Apart,
    /// so that inlining `insert` brings only the plain paths into its
    /// callers, not this one's index array and its zeroing.
    #[inline(never)]
    fn insert_conservative(&mut self, h: u64) -> u64 {
        let max = self.width.max();
        let k = self.k();
        let mut est = u64::MAX;
        // Conservative: only the minimal counters move.
        let mut idx = [0usize; super::MAX_K];
        self.indexer.indices(h, &mut idx[..k]);
        let min = idx[..k].iter().map(|&i| self.counter(i)).min().unwrap_or(0);
        for &i in &idx[..k] {
            let c = self.counter(i);
            let v = if c < max && c == min { c + 1 } else { c };
            if v != c {
                self.set_counter(i, v);
                if v == max {
                    self.saturated += 1;
                }
            }
            est = est.min(v);
        }
        est
    }

    /// The plain (not conservative) insert for counters of `BITS` bits.
    #[inline(always)]
    fn insert_plain<const BITS: u32>(&mut self, h: u64) -> u64 {
        // On a little-endian machine counter `i` of 8 (16) bits is byte
        // (16-bit unit) `i` of the words' memory: word `i / 8` at shift
        // `8 (i % 8)` is that byte. Bumping it in place is the same counter
        // and the same saturation, without the shifts and masks of a word:
        // about half the instructions of a k = 11 insert, which is most of
        // the heavy stage.
        #[cfg(target_endian = "little")]
        match BITS {
            8 => {
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.words);
                return bump_units!(bytes, self.indexer, h, self.saturated, u8);
            }
            16 => {
                let units: &mut [u16] = bytemuck::cast_slice_mut(&mut self.words);
                return bump_units!(units, self.indexer, h, self.saturated, u16);
            }
            _ => {}
        }
        let (words, saturated) = (&mut self.words, &mut self.saturated);
        let mut est = u64::MAX;
        self.indexer.for_each(h, |i| {
            if let Some(c) = CounterWidth::bump_fixed::<BITS>(words, i, saturated) {
                est = est.min(c);
            }
        });
        est
    }

    /// Removes one occurrence. Refused (false, nothing changed) when some
    /// counter is 0: the hash was never inserted. Saturated counters stay.
    pub fn delete(&mut self, h: u64) -> bool {
        let k = self.k();
        let mut idx = [0usize; super::MAX_K];
        self.indexer.indices(h, &mut idx[..k]);
        if idx[..k].iter().any(|&i| self.counter(i) == 0) {
            return false;
        }
        let max = self.width.max();
        for &i in &idx[..k] {
            let c = self.counter(i);
            if c < max {
                self.set_counter(i, c - 1);
            }
        }
        true
    }

    /// Counter-wise saturating sum with a filter of the same shape.
    pub fn union(&mut self, other: &CountingBloomFilter) -> Result<(), ShapeMismatch> {
        if self.m() != other.m() || self.k() != other.k() || self.width != other.width {
            return Err(ShapeMismatch {
                left_m: self.m(),
                left_k: self.k(),
                right_m: other.m(),
                right_k: other.k(),
            });
        }
        let max = self.width.max();
        for i in 0..self.m() {
            let (a, b) = (self.counter(i), other.counter(i));
            let v = (a + b).min(max);
            if v == max && a < max {
                self.saturated += 1;
            }
            self.set_counter(i, v);
        }
        Ok(())
    }

    /// All counters to 0 (the saturation count is kept: it counts events).
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    /// Sets to 0 every word that holds a counter of one of `hashes`.
    ///
    /// When every insertion since the filter was last all-zero is among
    /// `hashes` (an [`super::InsertionLog`] that is complete), every
    /// non-zero counter lies in such a word, so this leaves the filter
    /// exactly as [`CountingBloomFilter::clear`] does while writing `k`
    /// words a hash instead of all of them. Other counters in those words
    /// are zeroed too, which is what a clear wants. The saturation count is
    /// kept, as by `clear`.
    ///
    /// ```
    /// use flowsieve::filter::{CounterWidth, CountingBloomFilter};
    /// let mut f = CountingBloomFilter::new(1 << 12, 4, CounterWidth::W8);
    /// let empty = f.clone();
    /// for h in [3, 5, 3, 8] { f.insert(h); }
    /// f.clear_inserted(&[3, 5, 8]);
    /// assert_eq!(f, empty);
    /// ```
    pub fn clear_inserted(&mut self, hashes: &[u64]) {
        let (words, width) = (&mut self.words, self.width);
        for &h in hashes {
            self.indexer.for_each(h, |i| {
                if let Some(w) = words.get_mut(width.locate(i).0) {
                    *w = 0;
                }
            });
        }
    }

    /// Faults the counters' memory pages in as writable now, if they fit in
    /// `*budget` bytes (see [`super::BitArray::prefault`]); changes no
    /// counter.
    pub fn prefault(&mut self, budget: &mut usize) -> bool {
        super::prefault_words(&mut self.words, budget)
    }

    /// Counters that reached saturation, over the filter's life.
    pub fn saturation_events(&self) -> u64 {
        self.saturated
    }

    /// Counters currently saturated.
    pub fn saturated_counters(&self) -> u64 {
        (0..self.m())
            .filter(|&i| self.counter(i) == self.width.max())
            .count() as u64
    }

    /// Calls `each(i, v)` for every counter `i` whose value `v` is not
    /// zero, in increasing `i`. Zero words are skipped whole, so a sparse
    /// window's filter costs its non-zero words, not all `m` counters (a
    /// collector adds each probe's digest this way).
    ///
    /// ```
    /// use flowsieve::filter::{CounterWidth, Counters, CountingBloomFilter};
    /// let mut f = CountingBloomFilter::new(1 << 12, 4, CounterWidth::W4);
    /// f.insert(7);
    /// f.insert(7);
    /// let mut seen = Vec::new();
    /// f.for_each_nonzero(|i, v| seen.push((i, v)));
    /// assert_eq!(seen.len(), 4);
    /// assert!(seen.iter().all(|&(i, v)| v == 2 && f.counter(i) == 2));
    /// ```
    pub fn for_each_nonzero(&self, mut each: impl FnMut(usize, u64)) {
        let (per, bits, max) = (self.width.per_word(), self.width.bits(), self.width.max());
        for (n, &w) in self.words.iter().enumerate() {
            if w == 0 {
                continue;
            }
            for j in 0..per {
                let v = (w >> (j as u32 * bits)) & max;
                // Bits past the last counter are always zero.
                if v != 0 {
                    each(n * per + j, v);
                }
            }
        }
    }

    /// The non-zero counters as cells, found from `hashes`: every hash the
    /// filter took since it was last all-zero (the window's
    /// [`super::InsertionLog`]). Costs `O(k n log(k n))` for `n` hashes
    /// instead of a walk over all `m` counters. A counter set by a hash not
    /// in `hashes` is left out, so the list must be whole. `None` when the
    /// filter has more counters than 32-bit indices reach.
    ///
    /// ```
    /// use flowsieve::filter::{CounterWidth, CountingBloomFilter};
    /// let mut f = CountingBloomFilter::new(1 << 12, 4, CounterWidth::W8);
    /// f.insert(7);
    /// f.insert(7);
    /// let cells = f.nonzero_of(&[7, 7]).unwrap();
    /// assert_eq!(cells.nonzero_counters(), 4);
    /// ```
    pub fn nonzero_of(&self, hashes: &[u64]) -> Option<super::SparseCounters> {
        u32::try_from(self.m()).ok()?;
        let mut at: Vec<u32> = Vec::with_capacity(hashes.len() * self.k());
        for &h in hashes {
            // Below m, which fits 32 bits (checked above).
            self.indexer.for_each(h, |i| at.push(i as u32));
        }
        at.sort_unstable();
        at.dedup();
        let cells = at
            .into_iter()
            .filter_map(|i| {
                let v = super::Counters::counter(self, i as usize);
                // A counter is at most 16 bits wide.
                (v != 0).then_some((i, v as u16))
            })
            .collect();
        Some(super::SparseCounters::from_sorted(
            self.m(),
            self.k(),
            self.width,
            cells,
        ))
    }

    /// Counters that are non-zero.
    pub fn nonzero_counters(&self) -> u64 {
        self.nonzero_counters_up_to(u64::MAX)
    }

    /// Non-zero counters, counted up to `cap`: `min(nonzero_counters(),
    /// cap)`, the walk stopped at the first word that brings the count to
    /// `cap`.
    ///
    /// ```
    /// use flowsieve::filter::{CounterWidth, CountingBloomFilter};
    /// let mut f = CountingBloomFilter::new(1 << 12, 4, CounterWidth::W8);
    /// f.insert(7);
    /// assert_eq!(f.nonzero_counters_up_to(u64::MAX), 4);
    /// assert_eq!(f.nonzero_counters_up_to(2), 2);
    /// ```
    pub fn nonzero_counters_up_to(&self, cap: u64) -> u64 {
        let (per, bits, max) = (self.width.per_word(), self.width.bits(), self.width.max());
        let mut n = 0u64;
        for &w in &self.words {
            if n >= cap {
                break;
            }
            if w == 0 {
                continue;
            }
            for j in 0..per {
                // Bits past the last counter are always zero.
                n += u64::from((w >> (j as u32 * bits)) & max != 0);
            }
        }
        n.min(cap)
    }
}

impl Counters for CountingBloomFilter {
    fn hashes(&self) -> usize {
        self.indexer.k()
    }
    #[inline]
    fn counter(&self, i: usize) -> u64 {
        let (w, s) = self.width.locate(i);
        self.words.get(w).map_or(0, |x| (x >> s) & self.width.max())
    }
    #[inline]
    fn counter_index(&self, h: u64, j: usize) -> usize {
        self.indexer.index(h, j)
    }
}

impl Membership for CountingBloomFilter {
    fn insert(&mut self, h: u64) {
        CountingBloomFilter::insert(self, h);
    }
    fn contains(&self, h: u64) -> bool {
        self.estimate(h) > 0
    }
    fn clear(&mut self) {
        CountingBloomFilter::clear(self);
    }
    fn m(&self) -> usize {
        CountingBloomFilter::m(self)
    }
    fn k(&self) -> usize {
        CountingBloomFilter::k(self)
    }
}
