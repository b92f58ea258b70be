//! The outermost IPv4/IPv6 header to a flow key.
//!
//! IPv6 extension headers are walked from an allow-list only (hop-by-hop,
//! routing, fragment, destination options, AH, mobility); any other next
//! header ends the walk and becomes the key's protocol, so an unknown header
//! is never guessed at. A walk cut short by the end of the capture keeps the
//! addresses and stops at the last next-header value it could read.

use super::{FlowKey, SkipReason};
use etherparse::err::ipv4::{HeaderError as V4HeaderError, HeaderSliceError as V4SliceError};
use etherparse::err::ipv6::{HeaderError as V6HeaderError, HeaderSliceError as V6SliceError};
use etherparse::{
    IpAuthHeaderSlice, Ipv4HeaderSlice, Ipv6FragmentHeaderSlice, Ipv6HeaderSlice,
    Ipv6RawExtHeaderSlice,
};

/// IP protocol numbers this module acts on.
pub mod ip_proto {
    /// IPv6 hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Authentication header.
    pub const AUTH: u8 = 51;
    /// IPv6 destination options.
    pub const DEST_OPTIONS: u8 = 60;
    /// SCTP.
    pub const SCTP: u8 = 132;
    /// IPv6 mobility header.
    pub const MOBILITY: u8 = 135;
    /// UDP-Lite.
    pub const UDP_LITE: u8 = 136;
}

/// The IPv6 fixed header length.
const IPV6_HEADER_LEN: usize = 40;
/// Source and destination port: the first four bytes of TCP, UDP, UDP-Lite
/// and SCTP headers alike.
const PORTS_LEN: usize = 4;

/// Extension headers followed per packet. Each is at least 8 bytes, so the
/// capture length already bounds the walk; this bounds the work on crafted
/// chains.
const MAX_EXTENSION_HEADERS: usize = 64;

/// A key and whether its ports were cut off by the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpDissection {
    /// The flow key.
    pub key: FlowKey,
    /// The protocol has ports, the packet is a first fragment, but the
    /// capture ends before the ports: they are recorded as 0.
    pub ports_truncated: bool,
}

#[inline]
fn has_ports(proto: u8) -> bool {
    matches!(
        proto,
        ip_proto::TCP | ip_proto::UDP | ip_proto::UDP_LITE | ip_proto::SCTP
    )
}

/// The next-header values the IPv6 walk ([`ipv6`]) follows as extension
/// headers: its allow-list. The common frames' straight path leaves a
/// packet with one of these to that walk.
#[inline(always)]
pub(crate) fn is_walked_extension(next: u8) -> bool {
    matches!(
        next,
        ip_proto::HOP_BY_HOP
            | ip_proto::ROUTING
            | ip_proto::FRAGMENT
            | ip_proto::AUTH
            | ip_proto::DEST_OPTIONS
            | ip_proto::MOBILITY
    )
}

/// Reads the ports of a first fragment; `(0, 0, truncated)` otherwise.
#[inline(always)]
pub(crate) fn ports(proto: u8, first_fragment: bool, l4: &[u8]) -> (u16, u16, bool) {
    if !first_fragment || !has_ports(proto) {
        return (0, 0, false);
    }
    match l4.get(..PORTS_LEN) {
        Some(p) => (
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
            false,
        ),
        None => (0, 0, true),
    }
}

/// An IPv4 packet to a key. The total-length field is not trusted (it is 0
/// under Linux BIG TCP and larger than the capture under a snaplen).
#[inline]
pub fn ipv4(data: &[u8]) -> Result<IpDissection, SkipReason> {
    let h = Ipv4HeaderSlice::from_slice(data).map_err(|e| match e {
        V4SliceError::Len(_) => SkipReason::TruncatedIpHeader,
        V4SliceError::Content(V4HeaderError::UnexpectedVersion { .. }) => SkipReason::BadIpVersion,
        V4SliceError::Content(_) => SkipReason::BadIpHeader,
    })?;
    let proto = h.protocol().0;
    let first_fragment = h.fragments_offset().value() == 0;
    let l4 = data.get(h.slice().len()..).unwrap_or(&[]);
    let (sport, dport, ports_truncated) = ports(proto, first_fragment, l4);
    Ok(IpDissection {
        key: FlowKey::v4(h.source(), h.destination(), sport, dport, proto),
        ports_truncated,
    })
}

/// An IPv6 packet to a key, walking the allow-listed extension headers.
#[inline]
pub fn ipv6(data: &[u8]) -> Result<IpDissection, SkipReason> {
    let h = Ipv6HeaderSlice::from_slice(data).map_err(|e| match e {
        V6SliceError::Len(_) => SkipReason::TruncatedIpHeader,
        V6SliceError::Content(V6HeaderError::UnexpectedVersion { .. }) => SkipReason::BadIpVersion,
    })?;
    let mut next = h.next_header().0;
    let mut rest = data.get(IPV6_HEADER_LEN..).unwrap_or(&[]);
    let mut first_fragment = true;
    let mut walk_cut = false;
    for _ in 0..MAX_EXTENSION_HEADERS {
        let advanced = match next {
            ip_proto::HOP_BY_HOP
            | ip_proto::ROUTING
            | ip_proto::DEST_OPTIONS
            | ip_proto::MOBILITY => Ipv6RawExtHeaderSlice::from_slice(rest)
                .ok()
                .map(|x| (x.next_header().0, x.slice().len())),
            ip_proto::AUTH => IpAuthHeaderSlice::from_slice(rest)
                .ok()
                .map(|x| (x.next_header().0, x.slice().len())),
            ip_proto::FRAGMENT => Ipv6FragmentHeaderSlice::from_slice(rest).ok().map(|x| {
                first_fragment = x.fragment_offset().value() == 0;
                (x.next_header().0, x.slice().len())
            }),
            _ => break,
        };
        match advanced {
            Some((n, len)) => {
                next = n;
                rest = rest.get(len..).unwrap_or(&[]);
                if !first_fragment {
                    break;
                }
            }
            None => {
                walk_cut = true;
                break;
            }
        }
    }
    let (sport, dport, ports_truncated) = if walk_cut {
        (0, 0, false)
    } else {
        ports(next, first_fragment, rest)
    };
    Ok(IpDissection {
        key: FlowKey::v6(h.source(), h.destination(), sport, dport, next),
        ports_truncated: ports_truncated || walk_cut,
    })
}
