//! How a recycling Bloom filter lays out a message's bits in memory.

/// The memory layout of a [`super::RecyclingBloomFilter`]'s bits.
///
/// ```
/// use flowsieve::filter::BitLayout;
/// assert_eq!("blocked".parse::<BitLayout>().unwrap(), BitLayout::Blocked);
/// assert_eq!(BitLayout::default().to_string(), "scattered");
/// assert!("partitioned".parse::<BitLayout>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BitLayout {
    /// A message's `k` positions anywhere among the phase's `m` bits (004's
    /// analysed filter): `k` cache lines per new message.
    #[default]
    Scattered,
    /// A message's `k` positions in one block of [`BIT_BLOCK_BITS`] bits,
    /// one 64-byte cache line: one line per new message, a higher
    /// false-positive rate at the same size
    /// ([`crate::model::blocked_recycling`]).
    Blocked,
}

/// Bits in a block of the blocked layout: one 64-byte cache line.
pub const BIT_BLOCK_BITS: usize = 512;

/// Why a bit layout name could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("layout must be 'scattered' or 'blocked' (got '{0}')")]
pub struct BitLayoutError(pub String);

impl std::str::FromStr for BitLayout {
    type Err = BitLayoutError;
    fn from_str(s: &str) -> Result<BitLayout, BitLayoutError> {
        match s.trim() {
            "scattered" => Ok(BitLayout::Scattered),
            "blocked" => Ok(BitLayout::Blocked),
            _ => Err(BitLayoutError(s.to_string())),
        }
    }
}

impl std::fmt::Display for BitLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BitLayout::Scattered => "scattered",
            BitLayout::Blocked => "blocked",
        })
    }
}

crate::serialize_as_display!(BitLayout);
