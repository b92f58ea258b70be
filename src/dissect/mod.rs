//! Packets to flow keys.
//!
//! [`Dissector::dissect`] takes a link type and the captured bytes and
//! returns the directional 5-tuple of the outermost IP header, or the
//! [`SkipReason`] why there is none. It never panics and never reads past
//! the captured bytes: every header is length-checked before its fields are
//! read (by etherparse's header slices, or here against named offsets). The
//! common frames take a straight path of their own (`common_frame.rs`), which
//! answers exactly as the general path does.
//!
//! ```
//! use flowsieve::dissect::{Dissector, FlowKey};
//! use flowsieve::ingest::LinkType;
//! // A raw IPv4/UDP header: 10.0.0.1:53 -> 10.0.0.2:4000.
//! let mut pkt = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
//! pkt.extend_from_slice(&[0, 53, 0x0f, 0xa0, 0, 8, 0, 0]);
//! let d = Dissector::default().dissect(LinkType::RAW, &pkt).unwrap();
//! assert_eq!(d.key, FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 53, 4000, 17));
//! ```

mod common_frame;
mod flow_key;
pub mod ip;
mod link;
mod skip_reason;

pub use flow_key::{FlowKey, IpVersion};
pub use ip::IpDissection;
pub use skip_reason::{SkipCounts, SkipReason};

use crate::ingest::LinkType;
use link::Network;

/// Dissection options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dissector {
    /// Canonicalise keys so both directions of a conversation share one key.
    pub bidirectional: bool,
}

impl Dissector {
    /// A dissector producing directional (`false`) or canonical (`true`) keys.
    pub fn new(bidirectional: bool) -> Dissector {
        Dissector { bidirectional }
    }

    /// The flow key of one captured frame.
    ///
    /// The common frames (Ethernet II, VLAN tags included, a Linux cooked
    /// header, or raw IP, then IPv4, or IPv6 with no extension header) take
    /// a straight path read from named offsets
    /// ([`Dissector::dissect_straight`]); every other frame, and every
    /// frame that path does not accept, takes the general path
    /// ([`Dissector::dissect_general`]). The answer is the general path's
    /// either way.
    #[inline]
    pub fn dissect(&self, link: LinkType, data: &[u8]) -> Result<IpDissection, SkipReason> {
        let d = match common_frame::dissect(link, data) {
            Some(d) => d,
            None => general(link, data)?,
        };
        Ok(self.oriented(d))
    }

    /// The flow key of one captured frame by the straight path alone:
    /// `Some` for a common frame (Ethernet II, VLAN tags included, a Linux
    /// cooked header v1 or v2, or raw IP, then IPv4, or IPv6 with no
    /// extension header), the key [`Dissector::dissect`] gives it; `None`
    /// for every frame this path leaves to the general one. Public so that
    /// a test can check which frames it takes, not only that its answers
    /// are the general path's.
    ///
    /// ```
    /// use flowsieve::dissect::Dissector;
    /// use flowsieve::ingest::LinkType;
    /// // Linux cooked v2 (as `tcpdump -i any` writes), IPv4/UDP.
    /// let mut frame = vec![0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 4, 6, 2, 0, 0, 0, 0, 1, 0, 0];
    /// frame.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    /// frame.extend_from_slice(&[0, 53, 0x0f, 0xa0, 0, 8, 0, 0]);
    /// let d = Dissector::new(false);
    /// let straight = d.dissect_straight(LinkType::LINUX_SLL2, &frame).unwrap();
    /// assert_eq!(Ok(straight), d.dissect_general(LinkType::LINUX_SLL2, &frame));
    /// // A netlink capture (ARPHRD 824) is left to the general path.
    /// frame[8..10].copy_from_slice(&824u16.to_be_bytes());
    /// assert_eq!(d.dissect_straight(LinkType::LINUX_SLL2, &frame), None);
    /// ```
    #[inline]
    pub fn dissect_straight(&self, link: LinkType, data: &[u8]) -> Option<IpDissection> {
        common_frame::dissect(link, data).map(|d| self.oriented(d))
    }

    /// The flow key of one captured frame by the general path alone: every
    /// link layer through etherparse's header slices or named offsets, the
    /// IPv6 extension walk, and the reason for every frame with no key.
    /// [`Dissector::dissect`] answers the same for every frame, faster;
    /// this is public so that anyone can check that.
    ///
    /// ```
    /// use flowsieve::dissect::Dissector;
    /// use flowsieve::ingest::LinkType;
    /// // Ethernet II, IPv4/UDP 10.0.0.1:53 -> 10.0.0.2:4000.
    /// let mut frame = vec![0; 12];
    /// frame.extend_from_slice(&[0x08, 0x00]);
    /// frame.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    /// frame.extend_from_slice(&[0, 53, 0x0f, 0xa0, 0, 8, 0, 0]);
    /// let d = Dissector::new(true);
    /// assert_eq!(d.dissect(LinkType::ETHERNET, &frame), d.dissect_general(LinkType::ETHERNET, &frame));
    /// // Cut inside the IPv4 header: no key, for the same reason both ways.
    /// assert_eq!(d.dissect(LinkType::ETHERNET, &frame[..30]), d.dissect_general(LinkType::ETHERNET, &frame[..30]));
    /// assert!(d.dissect(LinkType::ETHERNET, &frame[..30]).is_err());
    /// ```
    pub fn dissect_general(&self, link: LinkType, data: &[u8]) -> Result<IpDissection, SkipReason> {
        Ok(self.oriented(general(link, data)?))
    }

    /// The key as this dissector gives it: canonical for bidirectional
    /// flows, as read otherwise.
    #[inline(always)]
    fn oriented(&self, mut d: IpDissection) -> IpDissection {
        if self.bidirectional {
            d.key = d.key.canonical();
        }
        d
    }
}

/// Any frame the straight path ([`common_frame::dissect`]) does not take: every link
/// layer, MPLS, PPPoE, IPv6 extension headers and every malformed header,
/// with its reason. Kept out of line, so that the straight path's caller
/// does not save registers for it on every packet.
#[inline(never)]
fn general(link: LinkType, data: &[u8]) -> Result<IpDissection, SkipReason> {
    match link::network_layer(link, data)? {
        Network::V4(ip) => ip::ipv4(ip),
        Network::V6(ip) => ip::ipv6(ip),
    }
}
