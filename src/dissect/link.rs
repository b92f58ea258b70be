//! Link layers down to the outermost IP header.
//!
//! Ethernet and VLAN tags are read with etherparse's header slices. Linux
//! cooked headers, PPP, PPPoE, Cisco HDLC, BSD loopback and MPLS are read
//! here from named offsets after an explicit length check, because
//! etherparse either lacks them or (for SLL) rejects real hardware types
//! such as `ARPHRD_NONE` that tun devices report.

use super::SkipReason;
use crate::ingest::LinkType;
use etherparse::{Ethernet2Header, Ethernet2HeaderSlice, SingleVlanHeader, SingleVlanHeaderSlice};

/// The outermost network-layer header found under the link layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Network<'a> {
    V4(&'a [u8]),
    V6(&'a [u8]),
}

/// EtherTypes this walker follows.
pub(crate) mod ether_type {
    pub const IPV4: u16 = 0x0800;
    pub const IPV6: u16 = 0x86dd;
    pub const VLAN_8021Q: u16 = 0x8100;
    pub const VLAN_8021AD: u16 = 0x88a8;
    /// Pre-standard QinQ outer tags.
    pub const VLAN_QINQ_9100: u16 = 0x9100;
    pub const VLAN_QINQ_9200: u16 = 0x9200;
    pub const MPLS_UNICAST: u16 = 0x8847;
    pub const MPLS_MULTICAST: u16 = 0x8848;
    pub const PPPOE_SESSION: u16 = 0x8864;
    /// Linux `ETH_P_LOOP`: in a cooked capture, a whole Ethernet frame
    /// re-injected through a loopback socket follows.
    pub const LINUX_LOOP: u16 = 0x0060;
}

/// PPP protocol numbers this walker follows.
mod ppp_proto {
    pub const IPV4: u16 = 0x0021;
    pub const IPV6: u16 = 0x0057;
    pub const MPLS_UNICAST: u16 = 0x0281;
    pub const MPLS_MULTICAST: u16 = 0x0283;
}

/// PPP in HDLC-like framing starts with these address and control bytes.
const PPP_ADDRESS: u8 = 0xff;
const PPP_CONTROL: u8 = 0x03;

/// PPPoE session header: version/type (1), code (1), session id (2),
/// length (2), then the PPP protocol (2).
const PPPOE_HEADER_LEN: usize = 6;

/// Cisco HDLC: address (1), control (1), EtherType (2).
const CHDLC_HEADER_LEN: usize = 4;
const CHDLC_PROTO: usize = 2;

/// Linux cooked v1: packet type (2), ARPHRD type (2), address length (2),
/// address (8), protocol (2).
pub(crate) const SLL_HEADER_LEN: usize = 16;
pub(crate) const SLL_ARPHRD: usize = 2;
pub(crate) const SLL_PROTO: usize = 14;
/// Linux cooked v2: protocol (2), reserved (2), interface index (4), ARPHRD
/// type (2), packet type (1), address length (1), address (8).
pub(crate) const SLL2_HEADER_LEN: usize = 20;
pub(crate) const SLL2_PROTO: usize = 0;
pub(crate) const SLL2_ARPHRD: usize = 8;
/// `ARPHRD_NETLINK`: the protocol field is a netlink family, not an
/// EtherType.
pub(crate) const ARPHRD_NETLINK: u16 = 824;

/// BSD loopback: a 4-byte address family.
const NULL_HEADER_LEN: usize = 4;
const AF_INET: u32 = 2;
/// `AF_INET6` differs by OS: Linux, NetBSD/OpenBSD, FreeBSD, Darwin.
const AF_INET6: [u32; 4] = [10, 24, 28, 30];

/// MPLS label stack entry length and its bottom-of-stack bit (in byte 2).
const MPLS_ENTRY_LEN: usize = 4;
const MPLS_BOTTOM_OF_STACK: u8 = 0x01;

#[inline]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_be_bytes([s[0], s[1]]))
}

/// Finds the outermost IP header of a frame of the given link type.
#[inline]
pub(crate) fn network_layer(link: LinkType, data: &[u8]) -> Result<Network<'_>, SkipReason> {
    match link {
        LinkType::ETHERNET => ethernet(data),
        LinkType::RAW_12 | LinkType::RAW_14 | LinkType::RAW | LinkType::IPV4 | LinkType::IPV6 => {
            by_version(data)
        }
        LinkType::LINUX_SLL => cooked(data, SLL_HEADER_LEN, SLL_PROTO, SLL_ARPHRD),
        LinkType::LINUX_SLL2 => cooked(data, SLL2_HEADER_LEN, SLL2_PROTO, SLL2_ARPHRD),
        LinkType::NULL | LinkType::LOOP => loopback(data),
        LinkType::PPP | LinkType::PPP_HDLC => ppp(data),
        LinkType::C_HDLC => {
            let proto = be16(data, CHDLC_PROTO).ok_or(SkipReason::TruncatedLinkHeader)?;
            ether_payload(proto, data.get(CHDLC_HEADER_LEN..).unwrap_or(&[]))
        }
        _ => Err(SkipReason::UnsupportedLinkType),
    }
}

/// Raw IP link types: the IP version field says which. For `LINKTYPE_IPV4`
/// and `LINKTYPE_IPV6` too, since real files (one is in the test corpus)
/// carry the other version under them, and the header's own version field is
/// not a guess.
#[inline]
fn by_version(data: &[u8]) -> Result<Network<'_>, SkipReason> {
    match data.first().map(|b| b >> 4) {
        Some(4) => Ok(Network::V4(data)),
        Some(6) => Ok(Network::V6(data)),
        Some(_) => Err(SkipReason::BadIpVersion),
        None => Err(SkipReason::TruncatedIpHeader),
    }
}

#[inline]
fn ethernet(data: &[u8]) -> Result<Network<'_>, SkipReason> {
    let eth =
        Ethernet2HeaderSlice::from_slice(data).map_err(|_| SkipReason::TruncatedLinkHeader)?;
    ether_payload(
        eth.ether_type().0,
        data.get(Ethernet2Header::LEN..).unwrap_or(&[]),
    )
}

/// Follows an EtherType through VLAN tags, MPLS and PPPoE to IP.
///
/// There is no cap on the number of tags or labels: each one consumes four
/// captured bytes, so the capture length bounds the walk, and crafted stacks
/// (the test corpus has MPLS stacks of dozens of labels) still reach their IP
/// header as other dissectors do.
#[inline]
fn ether_payload(mut ether: u16, mut rest: &[u8]) -> Result<Network<'_>, SkipReason> {
    use ether_type::*;
    loop {
        match ether {
            IPV4 => return Ok(Network::V4(rest)),
            IPV6 => return Ok(Network::V6(rest)),
            VLAN_8021Q | VLAN_8021AD | VLAN_QINQ_9100 | VLAN_QINQ_9200 => {
                let tag = SingleVlanHeaderSlice::from_slice(rest)
                    .map_err(|_| SkipReason::TruncatedLinkHeader)?;
                ether = tag.ether_type().0;
                rest = rest.get(SingleVlanHeader::LEN..).unwrap_or(&[]);
            }
            MPLS_UNICAST | MPLS_MULTICAST => return mpls(rest),
            PPPOE_SESSION => {
                let proto = be16(rest, PPPOE_HEADER_LEN).ok_or(SkipReason::TruncatedLinkHeader)?;
                return ppp_payload(proto, rest.get(PPPOE_HEADER_LEN + 2..).unwrap_or(&[]));
            }
            _ => return Err(SkipReason::NonIp),
        }
    }
}

/// MPLS label stack: skip to the bottom-of-stack entry, then the first
/// nibble of the payload says IPv4 or IPv6 (MPLS carries no payload type).
#[inline]
fn mpls(mut rest: &[u8]) -> Result<Network<'_>, SkipReason> {
    loop {
        let entry = rest
            .get(..MPLS_ENTRY_LEN)
            .ok_or(SkipReason::TruncatedLinkHeader)?;
        rest = &rest[MPLS_ENTRY_LEN..];
        if entry[2] & MPLS_BOTTOM_OF_STACK != 0 {
            return match rest.first().map(|b| b >> 4) {
                Some(4) => Ok(Network::V4(rest)),
                Some(6) => Ok(Network::V6(rest)),
                Some(_) => Err(SkipReason::MplsNonIp),
                None => Err(SkipReason::TruncatedLinkHeader),
            };
        }
    }
}

/// Linux cooked captures: the protocol field is an EtherType except for
/// netlink captures and the small Linux-specific values (802.2, 802.3, CAN).
fn cooked(
    data: &[u8],
    header_len: usize,
    proto_at: usize,
    arphrd_at: usize,
) -> Result<Network<'_>, SkipReason> {
    if data.len() < header_len {
        return Err(SkipReason::TruncatedLinkHeader);
    }
    let proto = be16(data, proto_at).ok_or(SkipReason::TruncatedLinkHeader)?;
    let arphrd = be16(data, arphrd_at).ok_or(SkipReason::TruncatedLinkHeader)?;
    let rest = &data[header_len..];
    if arphrd == ARPHRD_NETLINK {
        return Err(SkipReason::NonIp);
    }
    if proto == ether_type::LINUX_LOOP {
        return ethernet(rest);
    }
    ether_payload(proto, rest)
}

/// BSD loopback (`NULL`, host byte order) and OpenBSD `LOOP` (network order).
/// The family is accepted in either order: files move between hosts.
fn loopback(data: &[u8]) -> Result<Network<'_>, SkipReason> {
    let head = data
        .get(..NULL_HEADER_LEN)
        .ok_or(SkipReason::TruncatedLinkHeader)?;
    let raw = [head[0], head[1], head[2], head[3]];
    let (le, be) = (u32::from_le_bytes(raw), u32::from_be_bytes(raw));
    let rest = &data[NULL_HEADER_LEN..];
    if le == AF_INET || be == AF_INET {
        Ok(Network::V4(rest))
    } else if AF_INET6.contains(&le) || AF_INET6.contains(&be) {
        Ok(Network::V6(rest))
    } else {
        Err(SkipReason::NonIp)
    }
}

/// PPP, with or without the HDLC address/control bytes, with a one- or
/// two-byte protocol field (RFC 1661 protocol-field compression: an odd first
/// byte is a one-byte protocol).
fn ppp(data: &[u8]) -> Result<Network<'_>, SkipReason> {
    let mut rest = data;
    if rest.len() >= 2 && rest[0] == PPP_ADDRESS && rest[1] == PPP_CONTROL {
        rest = &rest[2..];
    }
    let first = *rest.first().ok_or(SkipReason::TruncatedLinkHeader)?;
    if first & 1 == 1 {
        return ppp_payload(u16::from(first), &rest[1..]);
    }
    let proto = be16(rest, 0).ok_or(SkipReason::TruncatedLinkHeader)?;
    ppp_payload(proto, &rest[2..])
}

fn ppp_payload(proto: u16, rest: &[u8]) -> Result<Network<'_>, SkipReason> {
    match proto {
        ppp_proto::IPV4 => Ok(Network::V4(rest)),
        ppp_proto::IPV6 => Ok(Network::V6(rest)),
        ppp_proto::MPLS_UNICAST | ppp_proto::MPLS_MULTICAST => mpls(rest),
        _ => Err(SkipReason::NonIp),
    }
}
