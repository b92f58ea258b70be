//! Capture timestamps.

use std::fmt;

const NANOS_PER_SEC: u32 = 1_000_000_000;

/// A capture timestamp: whole seconds since the Unix epoch plus a nanosecond
/// fraction.
///
/// Seconds are signed 64-bit because pcapng's `if_tsoffset` may move a
/// timestamp before the epoch, and because a 64-bit count of microseconds (a
/// real file in the test corpus holds one close to 2^64) does not fit in a
/// 64-bit count of nanoseconds. Construction never panics and never
/// overflows: every conversion saturates.
///
/// ```
/// use flowsieve::ingest::Timestamp;
/// let t = Timestamp::from_units(1_500_000, 1_000_000); // 1.5 s in microseconds
/// assert_eq!((t.secs(), t.subsec_nanos()), (1, 500_000_000));
/// assert_eq!(t.as_secs_f64(), 1.5);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    secs: i64,
    nanos: u32,
}

impl Timestamp {
    /// The epoch.
    pub const ZERO: Timestamp = Timestamp { secs: 0, nanos: 0 };
    /// The earliest representable time.
    pub const MIN: Timestamp = Timestamp {
        secs: i64::MIN,
        nanos: 0,
    };
    /// The latest representable time.
    pub const MAX: Timestamp = Timestamp {
        secs: i64::MAX,
        nanos: NANOS_PER_SEC - 1,
    };

    /// Seconds and a fraction in `units_per_sec` units. A fraction at or above
    /// one second (a damaged record) is carried into the seconds, as
    /// `tcpdump` effectively does when it prints such a record.
    pub fn from_parts(secs: i64, frac: u64, units_per_sec: u64) -> Timestamp {
        let units_per_sec = units_per_sec.max(1);
        let carry = (frac / units_per_sec) as i64;
        let rem = frac % units_per_sec;
        let nanos =
            (u128::from(rem) * u128::from(NANOS_PER_SEC) / u128::from(units_per_sec)) as u32;
        Timestamp {
            secs: secs.saturating_add(carry),
            nanos,
        }
    }

    /// Seconds and nanoseconds; `None` if `nanos` is a second or more.
    pub fn new(secs: i64, nanos: u32) -> Option<Timestamp> {
        (nanos < NANOS_PER_SEC).then_some(Timestamp { secs, nanos })
    }

    /// The per-record fast path: the caller has checked `nanos < 10^9`.
    #[inline(always)]
    pub(crate) fn from_checked(secs: i64, nanos: u32) -> Timestamp {
        debug_assert!(nanos < NANOS_PER_SEC);
        Timestamp { secs, nanos }
    }

    /// A count of `units_per_sec` units since the epoch (pcapng's 64-bit
    /// timestamps with `if_tsresol`).
    pub fn from_units(units: u64, units_per_sec: u64) -> Timestamp {
        let units_per_sec = units_per_sec.max(1);
        Timestamp::from_parts(
            (units / units_per_sec) as i64,
            units % units_per_sec,
            units_per_sec,
        )
    }

    /// Whole seconds since the epoch.
    pub fn secs(&self) -> i64 {
        self.secs
    }

    /// Nanoseconds past [`Timestamp::secs`], always below 10^9.
    pub fn subsec_nanos(&self) -> u32 {
        self.nanos
    }

    /// Shift by whole seconds (pcapng `if_tsoffset`), saturating.
    pub fn saturating_add_secs(self, secs: i64) -> Timestamp {
        Timestamp {
            secs: self.secs.saturating_add(secs),
            nanos: self.nanos,
        }
    }

    /// Nanoseconds since the epoch, exactly.
    pub fn as_nanos(&self) -> i128 {
        i128::from(self.secs) * i128::from(NANOS_PER_SEC) + i128::from(self.nanos)
    }

    /// Seconds since the epoch as a float (the JSON report's `first_ts` and
    /// `last_ts`).
    pub fn as_secs_f64(&self) -> f64 {
        self.secs as f64 + f64::from(self.nanos) * 1e-9
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}", self.secs, self.nanos)
    }
}

/// A span of nanoseconds written in the largest unit that divides it
/// exactly: `1s`, `250ms`, `10us`, `7ns`.
///
/// ```
/// use flowsieve::ingest::DurationNs;
/// assert_eq!(DurationNs(1_500_000_000).to_string(), "1500ms");
/// assert_eq!(DurationNs(60_000_000_000).to_string(), "60s");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationNs(pub u64);

impl std::fmt::Display for DurationNs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ns = self.0;
        if ns.is_multiple_of(1_000_000_000) {
            write!(f, "{}s", ns / 1_000_000_000)
        } else if ns.is_multiple_of(1_000_000) {
            write!(f, "{}ms", ns / 1_000_000)
        } else if ns.is_multiple_of(1_000) {
            write!(f, "{}us", ns / 1_000)
        } else {
            write!(f, "{ns}ns")
        }
    }
}

/// Why a duration could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad duration '{0}': expected a positive span such as 60s, 500ms, 10us, 2m or 1h, of at least 1 ns and at most 2^64 ns (about 584 years)"
)]
pub struct DurationError(pub String);

impl std::str::FromStr for DurationNs {
    type Err = DurationError;
    /// `1s`, `250ms`, `10us`, `500ns`, `2m`, `1h`, or bare seconds; zero,
    /// negative and over-long spans are errors.
    fn from_str(s: &str) -> Result<DurationNs, DurationError> {
        crate::pipeline::parse_duration_ns(s)
            .filter(|&n| n > 0)
            .map(DurationNs)
            .ok_or_else(|| DurationError(s.to_string()))
    }
}
