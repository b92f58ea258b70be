//! Dissection for every link type flowsieve knows (and any other): never a
//! panic, and a flow key only from bytes that hold one.
#![no_main]
use flowsieve::dissect::Dissector;
use flowsieve::ingest::LinkType;
use libfuzzer_sys::fuzz_target;

/// Ethernet, raw IP (101, 12, 14), IPv4, IPv6, Linux cooked v1 and v2,
/// BSD loopback, OpenBSD loopback, PPP, 802.11 + radiotap, null.
const KNOWN: [u16; 13] = [1, 101, 12, 14, 228, 229, 113, 276, 0, 108, 9, 105, 127];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let link = if usize::from(pick) < KNOWN.len() {
        KNOWN[usize::from(pick)]
    } else if rest.len() >= 2 {
        u16::from_le_bytes([rest[0], rest[1]])
    } else {
        u16::from(pick)
    };
    for bidirectional in [false, true] {
        let d = Dissector::new(bidirectional);
        let _ = d.dissect(LinkType(link), rest);
    }
});
