//! A message's recycling-filter positions, worked out a few packets before
//! its test.

use super::recycling::MAX_K;

/// What [`super::RecyclingBloomFilter::prepare`] leaves for a message's
/// later [`super::RecyclingBloomFilter::test_and_insert_prepared`]: its
/// hash, and its `k` positions when the front cache was not going to answer
/// it (the positions' words have then been asked for).
///
/// Positions depend on the hash and the filter's shape alone, never on its
/// bits, epoch or cache, so positions prepared for a hash are right
/// whenever they are used with the filter that prepared them, however much
/// happened in between; a test whose preparation does not match its hash
/// works the positions out afresh.
///
/// ```
/// use flowsieve::filter::{PreparedMessage, RecyclePolicy, RecyclingBloomFilter};
/// use flowsieve::model::recycling::Hashing;
/// let policy = RecyclePolicy::Insertions(1_000);
/// let mut plain = RecyclingBloomFilter::new(4096, 4, policy, Hashing::Colliding, true, false);
/// let mut ahead = plain.clone();
/// let mut prepared = PreparedMessage::default();
/// for h in [3u64, 9, 3, 0x5eed, 9] {
///     ahead.prepare(h, &mut prepared);
///     assert_eq!(ahead.test_and_insert_prepared(h, &prepared), plain.test_and_insert(h));
/// }
/// // A preparation for another hash is not used.
/// ahead.prepare(1, &mut prepared);
/// assert_eq!(ahead.test_and_insert_prepared(2, &prepared), plain.test_and_insert(2));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct PreparedMessage {
    pub(super) hash: u64,
    /// True when `positions` holds the hash's positions.
    pub(super) ready: bool,
    pub(super) positions: [usize; MAX_K],
}

impl Default for PreparedMessage {
    fn default() -> PreparedMessage {
        PreparedMessage {
            hash: 0,
            ready: false,
            positions: [0; MAX_K],
        }
    }
}

impl PreparedMessage {
    /// The positions prepared for `h`, if these are its.
    #[inline]
    pub(super) fn positions_of(&self, h: u64) -> Option<&[usize; MAX_K]> {
        (self.ready && self.hash == h).then_some(&self.positions)
    }
}
