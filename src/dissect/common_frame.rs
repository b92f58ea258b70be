//! The common frame's straight path: Ethernet II (VLAN tags included), a
//! Linux cooked header (v1 or v2, as `tcpdump -i any` writes) or raw IP,
//! then an IPv4 header, or an IPv6 header with no extension header, each
//! read from named offsets after one length check.
//!
//! Why a second path: nearly every packet of a backbone or data-centre trace
//! is such a frame, and the general path ([`super::link`] then [`super::ip`])
//! builds etherparse's header slices and their error values through three
//! calls, about 140 instructions a packet, a quarter of the source thread's
//! (BENCHMARKS.md, thirty-first round). This path answers only where every
//! check the general path makes passes, with the fields the general path
//! reads. Any other frame (another link layer, MPLS, an IPv6 extension
//! header, a short or malformed header) gets `None` and goes the general
//! way, which also names the [`super::SkipReason`]. So its answer is the
//! general path's whenever it gives one: `tests/dissect.rs` checks that on
//! every shared capture and on arbitrary bytes.

use super::FlowKey;
use super::ip::{IpDissection, is_walked_extension, ports};
use super::link::{
    ARPHRD_NETLINK, Network, SLL_ARPHRD, SLL_HEADER_LEN, SLL_PROTO, SLL2_ARPHRD, SLL2_HEADER_LEN,
    SLL2_PROTO, ether_type,
};
use crate::ingest::LinkType;

/// The Ethernet II header: two addresses and the ether type.
const ETHERNET_HEADER_LEN: usize = 14;
/// Where the Ethernet II header holds the ether type.
const ETHER_TYPE_AT: usize = 12;
/// An 802.1Q (or 802.1ad, QinQ) tag: the tag control and the ether type.
const VLAN_TAG_LEN: usize = 4;
/// Where a VLAN tag holds the ether type of what follows it.
const VLAN_ETHER_TYPE_AT: usize = 2;

/// The IPv4 header without options.
const IPV4_MIN_HEADER_LEN: usize = 20;
/// Where the IPv4 header holds the flags and the fragment offset.
const IPV4_FRAGMENT_AT: usize = 6;
/// The fragment offset's bits of that 16-bit field.
const IPV4_FRAGMENT_OFFSET_MASK: u16 = 0x1fff;
/// Where the IPv4 header holds the protocol.
const IPV4_PROTOCOL_AT: usize = 9;
/// Where the IPv4 header holds the source address.
const IPV4_SOURCE_AT: usize = 12;
/// Where the IPv4 header holds the destination address.
const IPV4_DESTINATION_AT: usize = 16;

/// The IPv6 fixed header.
const IPV6_HEADER_LEN: usize = 40;
/// Where the IPv6 header holds the next header.
const IPV6_NEXT_HEADER_AT: usize = 6;
/// Where the IPv6 header holds the source address.
const IPV6_SOURCE_AT: usize = 8;
/// Where the IPv6 header holds the destination address.
const IPV6_DESTINATION_AT: usize = 24;

/// The key of a frame this path takes, or `None` for any other frame (the
/// general path then decides).
#[inline(always)]
pub(crate) fn dissect(link: LinkType, data: &[u8]) -> Option<IpDissection> {
    let network = match link {
        LinkType::ETHERNET => ethernet(data)?,
        LinkType::LINUX_SLL => cooked::<SLL_HEADER_LEN>(data, SLL_PROTO, SLL_ARPHRD)?,
        LinkType::LINUX_SLL2 => cooked::<SLL2_HEADER_LEN>(data, SLL2_PROTO, SLL2_ARPHRD)?,
        // The link types the general path reads by the version nibble.
        LinkType::RAW_12 | LinkType::RAW_14 | LinkType::RAW | LinkType::IPV4 | LinkType::IPV6 => {
            match data.first()? >> 4 {
                4 => Network::V4(data),
                6 => Network::V6(data),
                _ => return None,
            }
        }
        _ => return None,
    };
    match network {
        Network::V4(ip) => ipv4(ip),
        Network::V6(ip) => ipv6(ip),
    }
}

/// The IP header behind an Ethernet II header and any VLAN tags, as the
/// version its ether type announces.
#[inline(always)]
fn ethernet(data: &[u8]) -> Option<Network<'_>> {
    // No panic: the ether type is read from the 14 bytes checked here.
    let header: &[u8; ETHERNET_HEADER_LEN] = data.first_chunk()?;
    let ether = u16::from_be_bytes([header[ETHER_TYPE_AT], header[ETHER_TYPE_AT + 1]]);
    tagged(ether, &data[ETHERNET_HEADER_LEN..])
}

/// The IP header behind a Linux cooked header of `N` bytes (v1 or v2) and
/// any VLAN tags, as the version its protocol field announces. A netlink
/// capture, or a protocol that is not an ether type this path follows
/// (a re-injected Ethernet frame, 802.2, MPLS, ...), gets `None`.
#[inline(always)]
fn cooked<const N: usize>(data: &[u8], proto_at: usize, arphrd_at: usize) -> Option<Network<'_>> {
    // No panic: both fields are read from the `N` bytes checked here, and
    // `proto_at + 1` and `arphrd_at + 1` are below `N` for both versions.
    let header: &[u8; N] = data.first_chunk()?;
    let arphrd = u16::from_be_bytes([header[arphrd_at], header[arphrd_at + 1]]);
    if arphrd == ARPHRD_NETLINK {
        return None;
    }
    let proto = u16::from_be_bytes([header[proto_at], header[proto_at + 1]]);
    tagged(proto, &data[N..])
}

/// The IP header behind an ether type and any VLAN tags that follow it.
#[inline(always)]
fn tagged(mut ether: u16, mut rest: &[u8]) -> Option<Network<'_>> {
    loop {
        match ether {
            ether_type::IPV4 => return Some(Network::V4(rest)),
            ether_type::IPV6 => return Some(Network::V6(rest)),
            ether_type::VLAN_8021Q
            | ether_type::VLAN_8021AD
            | ether_type::VLAN_QINQ_9100
            | ether_type::VLAN_QINQ_9200 => {
                // No panic: the tag's ether type is in the 4 bytes checked here.
                let tag: &[u8; VLAN_TAG_LEN] = rest.first_chunk()?;
                ether = u16::from_be_bytes([tag[VLAN_ETHER_TYPE_AT], tag[VLAN_ETHER_TYPE_AT + 1]]);
                rest = &rest[VLAN_TAG_LEN..];
            }
            _ => return None,
        }
    }
}

/// Four bytes of a header, from `at`.
#[inline(always)]
fn four<const N: usize>(header: &[u8; N], at: usize) -> [u8; 4] {
    [header[at], header[at + 1], header[at + 2], header[at + 3]]
}

/// An IPv4 header with a valid version and length, options included.
#[inline(always)]
fn ipv4(ip: &[u8]) -> Option<IpDissection> {
    // No panic: every field below is read from the 20 bytes checked here.
    let fixed: &[u8; IPV4_MIN_HEADER_LEN] = ip.first_chunk()?;
    let header_len = usize::from(fixed[0] & 0x0f) * 4;
    if fixed[0] >> 4 != 4 || header_len < IPV4_MIN_HEADER_LEN {
        return None;
    }
    // The transport header starts after the options, which must be there.
    let l4 = ip.get(header_len..)?;
    let proto = fixed[IPV4_PROTOCOL_AT];
    let fragment = u16::from_be_bytes([fixed[IPV4_FRAGMENT_AT], fixed[IPV4_FRAGMENT_AT + 1]]);
    let first_fragment = fragment & IPV4_FRAGMENT_OFFSET_MASK == 0;
    let (sport, dport, ports_truncated) = ports(proto, first_fragment, l4);
    Some(IpDissection {
        key: FlowKey::v4(
            four(fixed, IPV4_SOURCE_AT),
            four(fixed, IPV4_DESTINATION_AT),
            sport,
            dport,
            proto,
        ),
        ports_truncated,
    })
}

/// An IPv6 header whose next header is not one the general path walks as
/// an extension header.
#[inline(always)]
fn ipv6(ip: &[u8]) -> Option<IpDissection> {
    // No panic: every field below is read from the 40 bytes checked here.
    let fixed: &[u8; IPV6_HEADER_LEN] = ip.first_chunk()?;
    let next = fixed[IPV6_NEXT_HEADER_AT];
    if fixed[0] >> 4 != 6 || is_walked_extension(next) {
        return None;
    }
    let (sport, dport, ports_truncated) = ports(next, true, &ip[IPV6_HEADER_LEN..]);
    let address = |at: usize| -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&fixed[at..at + 16]);
        a
    };
    Some(IpDissection {
        key: FlowKey::v6(
            address(IPV6_SOURCE_AT),
            address(IPV6_DESTINATION_AT),
            sport,
            dport,
            next,
        ),
        ports_truncated,
    })
}
