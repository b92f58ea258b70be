//! Why a packet yielded no flow key, and per-reason counters.

use std::fmt;

/// Why a packet yielded no flow key. Every skipped packet is counted under
/// exactly one reason; the names are stable (they are JSON keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// The interface's link type is not one flowsieve decodes.
    UnsupportedLinkType = 0,
    /// The frame carries something other than IPv4/IPv6 (ARP, LLDP, STP,
    /// 802.2 LLC, ...).
    NonIp,
    /// The capture ends inside a link-layer header (Ethernet, VLAN tag, MPLS
    /// label, PPPoE, SLL, ...).
    TruncatedLinkHeader,
    /// The MPLS payload is neither IPv4 nor IPv6 (pseudowire, broken label
    /// stack).
    MplsNonIp,
    /// The capture ends inside the IPv4/IPv6 header.
    TruncatedIpHeader,
    /// The IP version field disagrees with the link layer, or is not 4 or 6.
    BadIpVersion,
    /// An IPv4 header length below 20 bytes.
    BadIpHeader,
}

impl SkipReason {
    /// Every reason, in report order.
    pub const ALL: [SkipReason; 7] = [
        SkipReason::UnsupportedLinkType,
        SkipReason::NonIp,
        SkipReason::TruncatedLinkHeader,
        SkipReason::MplsNonIp,
        SkipReason::TruncatedIpHeader,
        SkipReason::BadIpVersion,
        SkipReason::BadIpHeader,
    ];

    /// The stable snake_case name used in reports.
    pub fn name(&self) -> &'static str {
        match self {
            SkipReason::UnsupportedLinkType => "unsupported_link_type",
            SkipReason::NonIp => "non_ip",
            SkipReason::TruncatedLinkHeader => "truncated_link_header",
            SkipReason::MplsNonIp => "mpls_non_ip",
            SkipReason::TruncatedIpHeader => "truncated_ip_header",
            SkipReason::BadIpVersion => "bad_ip_version",
            SkipReason::BadIpHeader => "bad_ip_header",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Skipped-packet counters, one per [`SkipReason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkipCounts {
    counts: [u64; SkipReason::ALL.len()],
}

impl SkipCounts {
    /// Counts one skipped packet.
    #[inline]
    pub fn add(&mut self, reason: SkipReason) {
        self.counts[reason as usize] += 1;
    }

    /// The count for one reason.
    pub fn get(&self, reason: SkipReason) -> u64 {
        self.counts[reason as usize]
    }

    /// All skipped packets.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds another set of counters into this one.
    pub fn merge(&mut self, other: &SkipCounts) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
    }

    /// The reasons with a non-zero count, in report order.
    pub fn nonzero(&self) -> impl Iterator<Item = (SkipReason, u64)> + '_ {
        SkipReason::ALL
            .iter()
            .map(|r| (*r, self.get(*r)))
            .filter(|(_, n)| *n > 0)
    }
}
