//! Link-layer header types (the `LINKTYPE_*` registry of pcap and pcapng).

use std::fmt;

/// A link-layer header type as stored in a pcap file header or a pcapng
/// Interface Description Block, with the reserved upper bits of the pcap
/// field already removed.
///
/// ```
/// use flowsieve::ingest::LinkType;
/// assert_eq!(LinkType::ETHERNET.name(), "ethernet");
/// assert_eq!(LinkType(276).to_string(), "276 (linux-sll2)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkType(pub u16);

impl LinkType {
    /// BSD loopback: a 4-byte address family in the capturing host's order.
    pub const NULL: LinkType = LinkType(0);
    /// Ethernet II / 802.3.
    pub const ETHERNET: LinkType = LinkType(1);
    /// PPP, RFC 1661 (optionally with HDLC address/control bytes).
    pub const PPP: LinkType = LinkType(9);
    /// `DLT_RAW` as written by some BSDs: raw IPv4 or IPv6.
    pub const RAW_12: LinkType = LinkType(12);
    /// `DLT_RAW` as written by OpenBSD: raw IPv4 or IPv6.
    pub const RAW_14: LinkType = LinkType(14);
    /// PPP in HDLC-like framing, RFC 1662.
    pub const PPP_HDLC: LinkType = LinkType(50);
    /// `LINKTYPE_RAW`: raw IPv4 or IPv6.
    pub const RAW: LinkType = LinkType(101);
    /// Cisco HDLC: address, control, then an EtherType.
    pub const C_HDLC: LinkType = LinkType(104);
    /// OpenBSD loopback: a 4-byte address family in network order.
    pub const LOOP: LinkType = LinkType(108);
    /// Linux "cooked" capture, version 1.
    pub const LINUX_SLL: LinkType = LinkType(113);
    /// Raw IPv4.
    pub const IPV4: LinkType = LinkType(228);
    /// Raw IPv6.
    pub const IPV6: LinkType = LinkType(229);
    /// Linux "cooked" capture, version 2.
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// A short stable name for reports.
    pub fn name(&self) -> &'static str {
        match self.0 {
            0 => "null",
            1 => "ethernet",
            9 => "ppp",
            12 | 14 | 101 => "raw",
            50 => "ppp-hdlc",
            104 => "c-hdlc",
            105 => "ieee802.11",
            108 => "loop",
            113 => "linux-sll",
            127 => "radiotap",
            228 => "ipv4",
            229 => "ipv6",
            242 => "ipoib",
            274 => "ethernet-mpacket",
            276 => "linux-sll2",
            _ => "unknown",
        }
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.0, self.name())
    }
}
