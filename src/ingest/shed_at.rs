//! The live reader's shedding mark, a validated fraction of its ring.
//!
//! A plain value type outside the Linux-only capture code, so that the
//! command line parses `--shed-at` into it on every platform.

/// The ring fill at which a reader whose merger queue is full sheds the
/// batch it holds instead of waiting for room (`--shed-at`): a fraction
/// from 0 to 1.
///
/// Below it the ring is the capture's buffer and a burst it holds reaches
/// the engine whole, later; at it the reader sheds, so the ring keeps the
/// rest as headroom and the kernel does not drop at random across flows.
/// 0 sheds as soon as the queue is full (the least delay, and the policy
/// up to the forty-first round); 1 waits until the ring is full, after
/// which the kernel drops what arrives.
///
/// A capture's only ring, read without `-w`, is read on the pipeline's
/// thread and has no queue: it sheds its oldest block while this fill of
/// the ring waits (at least 2 blocks, so 0 sheds a block with another
/// behind it).
///
/// ```
/// use flowsieve::ingest::ShedAt;
/// let default = ShedAt::DEFAULT;
/// assert_eq!(default.fill(), 0.75);
/// assert_eq!(default.blocks(64), 48); // the default ring: 64 blocks of 1 MiB
/// assert_eq!(default.blocks(4), 3);
/// assert_eq!(default.blocks(2), 1); // the smallest ring: one block stays free
/// assert_eq!(ShedAt::new(0.0).unwrap().blocks(64), 0);
/// assert_eq!(ShedAt::new(1.0).unwrap().blocks(64), 64);
/// assert_eq!(ShedAt::new(0.001).unwrap().blocks(64), 1);
/// assert!(ShedAt::new(1.5).is_none() && ShedAt::new(f64::NAN).is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShedAt(f64);

impl ShedAt {
    /// Three quarters of the ring.
    pub const DEFAULT: ShedAt = ShedAt(0.75);

    /// `fill` if it is a fraction from 0 to 1 (not NaN).
    pub fn new(fill: f64) -> Option<ShedAt> {
        (0.0..=1.0).contains(&fill).then_some(ShedAt(fill))
    }

    /// The fraction.
    pub fn fill(self) -> f64 {
        self.0
    }

    /// The backlog, in blocks of a ring of `ring_blocks`, at which a
    /// reader sheds: the fill's share rounded up; for a fill strictly
    /// between 0 and 1, at least one block and at most all but one.
    pub fn blocks(self, ring_blocks: u32) -> u32 {
        if self.0 <= 0.0 {
            return 0;
        }
        if self.0 >= 1.0 {
            return ring_blocks;
        }
        let share = (self.0 * f64::from(ring_blocks)).ceil() as u32;
        share.min(ring_blocks.saturating_sub(1)).max(1)
    }
}
