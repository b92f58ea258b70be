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

/// Which period of a fixed length a position falls in, and where in it:
/// `(pos / period, pos % period)`, with the division done only when the
/// position leaves the period it last found.
///
/// Why: every stage and the dispatcher place every packet in its window or
/// round, and a 64-bit division costs tens of cycles, several times a
/// packet, while a window holds thousands of packets. Positions are
/// monotone in a run (trace time is held monotone, sequence numbers count
/// up), so nearly every call is two comparisons; a position outside the
/// cached period, earlier or later, is divided afresh, so the answer is
/// the quotient and remainder for any sequence of positions.
///
/// ```
/// use flowsieve::pipeline::PeriodCursor;
/// let mut c = PeriodCursor::new(1000);
/// assert_eq!(c.locate(2500), (2, 500));
/// assert_eq!(c.locate(2999), (2, 999));
/// assert_eq!(c.locate(3000), (3, 0));
/// assert_eq!(c.locate(7), (0, 7)); // backwards is answered too
/// assert_eq!(c.period(), 1000);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct PeriodCursor {
    period: u64,
    index: u64,
    start: u64,
    /// One past the cached period's last position; `start == end` (the
    /// state before the first call) caches nothing.
    end: u64,
}

impl PeriodCursor {
    /// A cursor over periods of `period` positions (at least 1).
    pub fn new(period: u64) -> PeriodCursor {
        PeriodCursor {
            period: period.max(1),
            index: 0,
            start: 0,
            end: 0,
        }
    }

    /// The period's length (at least 1).
    pub fn period(&self) -> u64 {
        self.period
    }

    /// `(pos / period, pos % period)`.
    #[inline]
    pub fn locate(&mut self, pos: u64) -> (u64, u64) {
        if pos < self.start || pos >= self.end {
            self.relocate(pos);
        }
        (self.index, pos - self.start)
    }

    #[cold]
    fn relocate(&mut self, pos: u64) {
        self.index = pos / self.period;
        self.start = self.index * self.period;
        // The last period may end past u64::MAX: positions up to the
        // largest then stay cached, and only u64::MAX itself (never a
        // real time or sequence number) is divided each time.
        self.end = self.start.saturating_add(self.period);
    }
}

/// Why a window could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad window '{0}': expected a duration such as 1s, 250ms, 2m, 10us, of at most 2^64 ns (about 584 years), or a packet count such as 50000p"
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
/// seconds) into nanoseconds, to the nearest one; `None` when malformed,
/// negative, too long, or positive but under half a nanosecond.
///
/// Why the last: such a span rounds to zero, and zero means something of
/// its own to some flags (`live --report-every 0` turns the reports off).
/// `--report-every 0.0000000001` used to turn them off as `0` does,
/// instead of being refused like any other span under its floor.
///
/// ```
/// use flowsieve::pipeline::parse_duration_ns;
/// assert_eq!(parse_duration_ns("250ms"), Some(250_000_000));
/// assert_eq!(parse_duration_ns("0.6ns"), Some(1));
/// assert_eq!(parse_duration_ns("0s"), Some(0));
/// assert_eq!(parse_duration_ns("0.4ns"), None);
/// assert_eq!(parse_duration_ns("1e-320"), None);
/// assert_eq!(parse_duration_ns("-1s"), None);
/// ```
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
    let rounded = ns.round() as u64;
    if rounded == 0 && ns > 0.0 {
        return None;
    }
    Some(rounded)
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
