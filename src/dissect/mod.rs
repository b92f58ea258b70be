//! Packets to flow keys.
//!
//! [`Dissector::dissect`] takes a link type and the captured bytes and
//! returns the directional 5-tuple of the outermost IP header, or the
//! [`SkipReason`] why there is none. It never panics and never reads past
//! the captured bytes: every header is length-checked before its fields are
//! read (by etherparse's header slices, or here against named offsets).
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
    #[inline]
    pub fn dissect(&self, link: LinkType, data: &[u8]) -> Result<IpDissection, SkipReason> {
        let mut d = match link::network_layer(link, data)? {
            Network::V4(ip) => ip::ipv4(ip)?,
            Network::V6(ip) => ip::ipv6(ip)?,
        };
        if self.bidirectional {
            d.key = d.key.canonical();
        }
        Ok(d)
    }
}
