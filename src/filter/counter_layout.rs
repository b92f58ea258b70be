//! How a counting filter lays out a key's counters in memory (and the
//! selective stage's Bloom directory its bits).

/// The memory layout of a counting filter's counters, or of a Bloom
/// filter's bits (the selective stage's `--dir-layout`:
/// [`super::BloomFilter`] or [`super::BlockedBloomFilter`]).
///
/// ```
/// use flowsieve::filter::CounterLayout;
/// assert_eq!("blocked".parse::<CounterLayout>().unwrap(), CounterLayout::Blocked);
/// assert_eq!(CounterLayout::default().to_string(), "partitioned");
/// assert!("striped".parse::<CounterLayout>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CounterLayout {
    /// `k` partitions of `m/k` counters, one counter per partition (003's
    /// analysed layout; [`super::CountingBloomFilter`]): `k` cache lines
    /// per insertion.
    #[default]
    Partitioned,
    /// All `k` counters in one 64-byte block
    /// ([`super::BlockedCountingFilter`]): one cache line per insertion, a
    /// higher false-positive rate at the same size
    /// ([`crate::model::blocked`]).
    Blocked,
}

/// Why a layout name could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("layout must be 'partitioned' or 'blocked' (got '{0}')")]
pub struct CounterLayoutError(pub String);

impl std::str::FromStr for CounterLayout {
    type Err = CounterLayoutError;
    fn from_str(s: &str) -> Result<CounterLayout, CounterLayoutError> {
        match s.trim() {
            "partitioned" => Ok(CounterLayout::Partitioned),
            "blocked" => Ok(CounterLayout::Blocked),
            _ => Err(CounterLayoutError(s.to_string())),
        }
    }
}

impl std::fmt::Display for CounterLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CounterLayout::Partitioned => "partitioned",
            CounterLayout::Blocked => "blocked",
        })
    }
}

crate::serialize_as_display!(CounterLayout);
