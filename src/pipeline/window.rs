//! Windows of trace time or of packets, shared by every stage.

use std::fmt;
use std::str::FromStr;

/// A span of the packet stream: trace time (nanoseconds) or a number of
/// keyed packets. Serialised as its text (`1s`, `50000 packets`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowSpec {
    /// This many nanoseconds of trace time.
    Time(u64),
    /// This many keyed packets.
    Packets(u64),
}

impl WindowSpec {
    /// The position of a packet along this window's axis: its time or its
    /// sequence number.
    #[inline]
    pub fn position(&self, time_ns: u64, seq: u64) -> u64 {
        match self {
            WindowSpec::Time(_) => time_ns,
            WindowSpec::Packets(_) => seq,
        }
    }

    /// The window's length along its axis (at least 1).
    #[inline]
    pub fn span(&self) -> u64 {
        match *self {
            WindowSpec::Time(n) | WindowSpec::Packets(n) => n.max(1),
        }
    }

    /// The index of the window holding a packet.
    #[inline]
    pub fn index(&self, time_ns: u64, seq: u64) -> u64 {
        self.position(time_ns, seq) / self.span()
    }

    /// Whether two windows measure the same axis.
    pub fn same_axis(&self, other: &WindowSpec) -> bool {
        matches!(
            (self, other),
            (WindowSpec::Time(_), WindowSpec::Time(_))
                | (WindowSpec::Packets(_), WindowSpec::Packets(_))
        )
    }
}

/// Why a window could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad window '{0}': expected a duration such as 1s, 250ms, 2m, 10us, or a packet count such as 50000p"
)]
pub struct WindowParseError(pub String);

/// Parses `1s`, `250ms`, `10us`, `500ns`, `2m`, `1h`, a bare number of
/// seconds (`0.5`), or a packet count with a `p`/`pkts`/`packets` suffix.
///
/// ```
/// use flowsieve::pipeline::WindowSpec;
/// assert_eq!("250ms".parse(), Ok(WindowSpec::Time(250_000_000)));
/// assert_eq!("5000p".parse(), Ok(WindowSpec::Packets(5000)));
/// assert!("-1s".parse::<WindowSpec>().is_err());
/// ```
impl FromStr for WindowSpec {
    type Err = WindowParseError;
    fn from_str(s: &str) -> Result<WindowSpec, WindowParseError> {
        let err = || WindowParseError(s.to_string());
        let t = s.trim();
        for suffix in ["packets", "pkts", "p"] {
            if let Some(n) = t.strip_suffix(suffix) {
                let n: u64 = n.trim().parse().map_err(|_| err())?;
                return if n == 0 {
                    Err(err())
                } else {
                    Ok(WindowSpec::Packets(n))
                };
            }
        }
        let ns = parse_duration_ns(t).ok_or_else(err)?;
        if ns == 0 {
            return Err(err());
        }
        Ok(WindowSpec::Time(ns))
    }
}

/// Parses a duration (`1s`, `250ms`, `10us`, `500ns`, `2m`, `1h`, or bare
/// seconds) into nanoseconds; `None` when malformed, negative or too long.
pub fn parse_duration_ns(s: &str) -> Option<u64> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60e9)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600e9)
    } else {
        (t, 1e9)
    };
    let v: f64 = num.trim().parse().ok()?;
    let ns = v * scale;
    if !(0.0..=1.8e19).contains(&ns) {
        return None;
    }
    Some(ns.round() as u64)
}

impl fmt::Display for WindowSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WindowSpec::Packets(n) => write!(f, "{n} packets"),
            WindowSpec::Time(ns) => write!(f, "{}", crate::ingest::DurationNs(ns)),
        }
    }
}
crate::serialize_as_display!(WindowSpec);
