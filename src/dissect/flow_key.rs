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
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    // Addresses as [high, low] 64-bit halves rather than `u128`: a `u128`
    // is 16-byte aligned, which pads the key to 48 bytes and every packet
    // record and flow-table entry that holds one to the next 16; as two
    // halves the key is 40 bytes, 8-byte aligned. Ordered as arrays, the
    // halves order as the 128-bit numbers do.
    src: [u64; 2],
    dst: [u64; 2],
    /// Ports, protocol and version in one word, as the hash encodes them
    /// (`crate::hash::encode`'s fifth word): `sport << 48 | dport << 32 |
    /// proto << 8 | version`. As four fields they were written by four
    /// narrow stores, and the hash read the two ports back as one 4-byte
    /// load, which the store buffer cannot forward from two 2-byte stores:
    /// a stall on every packet. One word is written by one store and read
    /// by one load.
    tail: u64,
}

/// Where each part of [`FlowKey`]'s `tail` word sits.
const SPORT_SHIFT: u32 = 48;
const DPORT_SHIFT: u32 = 32;
const PROTO_SHIFT: u32 = 8;
const VERSION_MASK: u64 = 0xff;

/// The `tail` word of a key.
#[inline(always)]
const fn tail(sport: u16, dport: u16, proto: u8, version: IpVersion) -> u64 {
    ((sport as u64) << SPORT_SHIFT)
        | ((dport as u64) << DPORT_SHIFT)
        | ((proto as u64) << PROTO_SHIFT)
        | version as u64
}

impl fmt::Debug for FlowKey {
    // The fields as they were before they shared a word, so that a key
    // prints as its parts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowKey")
            .field("src", &self.src)
            .field("dst", &self.dst)
            .field("sport", &self.sport())
            .field("dport", &self.dport())
            .field("proto", &self.proto())
            .field("version", &self.version())
            .finish()
    }
}

impl FlowKey {
    /// The all-zero key, of no IP version, which no packet gives: a
    /// placeholder where a frame has no flow (the live reader's skipped
    /// frames).
    pub(crate) const ZERO: FlowKey = FlowKey {
        src: [0; 2],
        dst: [0; 2],
        tail: 0,
    };

    /// An IPv4 key.
    pub fn v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> FlowKey {
        FlowKey {
            src: halves(u128::from(u32::from_be_bytes(src))),
            dst: halves(u128::from(u32::from_be_bytes(dst))),
            tail: tail(sport, dport, proto, IpVersion::V4),
        }
    }

    /// An IPv6 key.
    pub fn v6(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, proto: u8) -> FlowKey {
        FlowKey {
            src: halves(u128::from_be_bytes(src)),
            dst: halves(u128::from_be_bytes(dst)),
            tail: tail(sport, dport, proto, IpVersion::V6),
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
        // Only the constructors write `tail`, with 4 or 6 here.
        if self.tail & VERSION_MASK == IpVersion::V6 as u64 {
            IpVersion::V6
        } else {
            IpVersion::V4
        }
    }

    /// Ports, protocol and version as one word: `sport << 48 | dport << 32
    /// | proto << 8 | version` (4 or 6), the hash's fifth encoding word.
    ///
    /// ```
    /// use flowsieve::dissect::FlowKey;
    /// let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 1234, 80, 6);
    /// assert_eq!(k.tail_word(), 1234 << 48 | 80 << 32 | 6 << 8 | 4);
    /// ```
    #[inline]
    pub fn tail_word(&self) -> u64 {
        self.tail
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
        addr(whole(self.src), self.version())
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        addr(whole(self.dst), self.version())
    }

    /// Source port (0 where the protocol has none).
    pub fn sport(&self) -> u16 {
        (self.tail >> SPORT_SHIFT) as u16
    }

    /// Destination port (0 where the protocol has none).
    pub fn dport(&self) -> u16 {
        (self.tail >> DPORT_SHIFT) as u16
    }

    /// IP protocol number (upper-layer protocol).
    pub fn proto(&self) -> u8 {
        (self.tail >> PROTO_SHIFT) as u8
    }

    /// The same flow seen in the other direction.
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            tail: tail(self.dport(), self.sport(), self.proto(), self.version()),
        }
    }

    /// Canonical order for bidirectional keys: the (address, port) pair that
    /// sorts lower becomes the source.
    pub fn canonical(&self) -> FlowKey {
        match (self.src, self.sport()).cmp(&(self.dst, self.dport())) {
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
        match self.version() {
            IpVersion::V4 => write!(
                f,
                "{}:{} -> {}:{} proto {}",
                self.src(),
                self.sport(),
                self.dst(),
                self.dport(),
                self.proto()
            ),
            IpVersion::V6 => write!(
                f,
                "[{}]:{} -> [{}]:{} proto {}",
                self.src(),
                self.sport(),
                self.dst(),
                self.dport(),
                self.proto()
            ),
        }
    }
}
