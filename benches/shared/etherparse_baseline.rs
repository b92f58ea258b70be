//! The straightforward etherparse path used as a baseline by the ingest
//! bench and the `ingest_modes` example: slice every layer with
//! `SlicedPacket::from_ethernet`, then build the same flow key flowsieve
//! builds and hash it. Shared by `#[path]` so both measure identical code.

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use flowsieve::dissect::FlowKey;
use flowsieve::hash::flow_hash;

/// The flow hash of an Ethernet frame via `SlicedPacket`, or `None`.
#[inline]
pub fn sliced_hash(frame: &[u8]) -> Option<u64> {
    let s = SlicedPacket::from_ethernet(frame).ok()?;
    let (sport, dport) = match &s.transport {
        Some(TransportSlice::Tcp(t)) => (t.source_port(), t.destination_port()),
        Some(TransportSlice::Udp(u)) => (u.source_port(), u.destination_port()),
        _ => (0, 0),
    };
    let key = match &s.net {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header();
            FlowKey::v4(h.source(), h.destination(), sport, dport, h.protocol().0)
        }
        Some(NetSlice::Ipv6(ip)) => {
            let h = ip.header();
            FlowKey::v6(
                h.source(),
                h.destination(),
                sport,
                dport,
                ip.payload().ip_number.0,
            )
        }
        _ => return None,
    };
    Some(flow_hash(&key))
}
