//! Putting back the VLAN tag the kernel strips.
//!
//! On receive the kernel moves an 802.1Q/802.1ad tag out of the frame into
//! `tp_vlan_tci`/`tp_vlan_tpid`. A flow then keys differently live than in
//! a file of the same traffic, so the reader re-inserts the 4-byte tag
//! after the two MAC addresses, as libpcap does, and the frame, its
//! lengths and anything written with `-w` are those of the wire.

/// Bytes of the two MAC addresses, after which the tag goes.
const MAC_ADDRESSES: usize = 12;
/// Bytes of a tag: TPID and TCI.
pub const TAG_BYTES: u32 = 4;

/// Writes `frame` with the tag `(tpid, tci)` re-inserted into `out`
/// (cleared first). A frame shorter than the two MAC addresses is copied
/// unchanged and `false` returned.
///
/// ```
/// use flowsieve::ingest::live::restore_vlan_tag;
/// let frame = [1u8; 12].iter().chain(&[0x08, 0x00, 0x45]).copied().collect::<Vec<_>>();
/// let mut out = Vec::new();
/// assert!(restore_vlan_tag(&frame, 0x8100, 0x0064, &mut out));
/// assert_eq!(&out[12..18], &[0x81, 0x00, 0x00, 0x64, 0x08, 0x00]);
/// assert_eq!(out.len(), frame.len() + 4);
/// ```
pub fn restore_vlan_tag(frame: &[u8], tpid: u16, tci: u16, out: &mut Vec<u8>) -> bool {
    out.clear();
    if frame.len() < MAC_ADDRESSES {
        out.extend_from_slice(frame);
        return false;
    }
    out.reserve(frame.len() + TAG_BYTES as usize);
    out.extend_from_slice(&frame[..MAC_ADDRESSES]);
    out.extend_from_slice(&tpid.to_be_bytes());
    out.extend_from_slice(&tci.to_be_bytes());
    out.extend_from_slice(&frame[MAC_ADDRESSES..]);
    true
}
