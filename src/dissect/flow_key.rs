//! The directional 5-tuple flow key.

use std::cmp::Ordering;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IP version of a flow key's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpVersion {
    /// IPv4.
    V4 = 4,
    /// IPv6.
    V6 = 6,
}

/// A directional 5-tuple from the outermost IP header: source and
/// destination address, source and destination port, IP protocol.
///
/// Ports are 0 for protocols without ports and for non-first fragments.
/// The protocol is the upper-layer protocol after any IPv6 extension headers
/// that were walked. IPv4 addresses are held in the low 32 bits of the
/// 128-bit fields, with the version recorded, so an IPv4 key never equals an
/// IPv6 key (not even an IPv4-mapped one).
///
/// ```
/// use flowsieve::dissect::FlowKey;
/// let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 1234, 80, 6);
/// assert_eq!(k.to_string(), "10.0.0.1:1234 -> 10.0.0.2:80 proto 6");
/// assert_eq!(k.reversed().canonical(), k.canonical());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    // Addresses as [high, low] 64-bit halves rather than `u128`: a `u128`
    // is 16-byte aligned, which pads the key to 48 bytes and every packet
    // record and flow-table entry that holds one to the next 16; as two
    // halves the key is 40 bytes, 8-byte aligned. Ordered as arrays, the
    // halves order as the 128-bit numbers do.
    src: [u64; 2],
    dst: [u64; 2],
    sport: u16,
    dport: u16,
    proto: u8,
    version: IpVersion,
}

impl FlowKey {
    /// An IPv4 key.
    pub fn v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> FlowKey {
        FlowKey {
            src: halves(u128::from(u32::from_be_bytes(src))),
            dst: halves(u128::from(u32::from_be_bytes(dst))),
            sport,
            dport,
            proto,
            version: IpVersion::V4,
        }
    }

    /// An IPv6 key.
    pub fn v6(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, proto: u8) -> FlowKey {
        FlowKey {
            src: halves(u128::from_be_bytes(src)),
            dst: halves(u128::from_be_bytes(dst)),
            sport,
            dport,
            proto,
            version: IpVersion::V6,
        }
    }

    /// A key from standard-library addresses; both must be the same version.
    pub fn from_addrs(
        src: IpAddr,
        dst: IpAddr,
        sport: u16,
        dport: u16,
        proto: u8,
    ) -> Option<FlowKey> {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                Some(FlowKey::v4(s.octets(), d.octets(), sport, dport, proto))
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                Some(FlowKey::v6(s.octets(), d.octets(), sport, dport, proto))
            }
            _ => None,
        }
    }

    /// The IP version.
    pub fn version(&self) -> IpVersion {
        self.version
    }

    /// Source address as a 128-bit number (IPv4 in the low 32 bits).
    pub fn src_bits(&self) -> u128 {
        whole(self.src)
    }

    /// Destination address as a 128-bit number (IPv4 in the low 32 bits).
    pub fn dst_bits(&self) -> u128 {
        whole(self.dst)
    }

    /// Source address.
    pub fn src(&self) -> IpAddr {
        addr(whole(self.src), self.version)
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        addr(whole(self.dst), self.version)
    }

    /// Source port (0 where the protocol has none).
    pub fn sport(&self) -> u16 {
        self.sport
    }

    /// Destination port (0 where the protocol has none).
    pub fn dport(&self) -> u16 {
        self.dport
    }

    /// IP protocol number (upper-layer protocol).
    pub fn proto(&self) -> u8 {
        self.proto
    }

    /// The same flow seen in the other direction.
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..*self
        }
    }

    /// Canonical order for bidirectional keys: the (address, port) pair that
    /// sorts lower becomes the source.
    pub fn canonical(&self) -> FlowKey {
        match (self.src, self.sport).cmp(&(self.dst, self.dport)) {
            Ordering::Greater => self.reversed(),
            _ => *self,
        }
    }
}

/// A 128-bit address as its [high, low] halves.
#[inline]
fn halves(bits: u128) -> [u64; 2] {
    [(bits >> 64) as u64, bits as u64]
}

/// The 128-bit address of [high, low] halves.
#[inline]
fn whole(h: [u64; 2]) -> u128 {
    (u128::from(h[0]) << 64) | u128::from(h[1])
}

fn addr(bits: u128, version: IpVersion) -> IpAddr {
    match version {
        IpVersion::V4 => IpAddr::V4(Ipv4Addr::from(bits as u32)),
        IpVersion::V6 => IpAddr::V6(Ipv6Addr::from(bits)),
    }
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.version {
            IpVersion::V4 => write!(
                f,
                "{}:{} -> {}:{} proto {}",
                self.src(),
                self.sport,
                self.dst(),
                self.dport,
                self.proto
            ),
            IpVersion::V6 => write!(
                f,
                "[{}]:{} -> [{}]:{} proto {}",
                self.src(),
                self.sport,
                self.dst(),
                self.dport,
                self.proto
            ),
        }
    }
}
