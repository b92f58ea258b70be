//! Classic pcap and pcapng from bytes: the reader never panics, always
//! ends, and delivers at most one packet per 12 input bytes; read in runs
//! (`TraceReader::read_packets`, of a size taken from the input) it
//! delivers exactly what one packet a call delivers, and the same error.
#![no_main]
use flowsieve::ingest::TraceReader;
use libfuzzer_sys::fuzz_target;

/// What a reading saw: each packet's time, wire length and bytes, then the
/// error that ended it, the packet count and the final offset.
type Seen = (Vec<(String, u32, Vec<u8>)>, Option<String>, u64, u64);

fn one_a_call(data: &[u8]) -> Option<Seen> {
    let len = data.len();
    let mut r = TraceReader::from_bytes("fuzz", data.to_vec()).ok()?;
    let mut packets = Vec::new();
    let error = loop {
        match r.next_packet() {
            Ok(Some(p)) => {
                assert!(p.data.len() <= len);
                packets.push((p.ts.to_string(), p.wire_len, p.data.to_vec()));
                assert!(
                    packets.len() <= len / 12 + 1,
                    "more packets than the bytes can hold"
                );
            }
            Ok(None) => break None,
            Err(e) => break Some(e.to_string()),
        }
    };
    let _ = (r.anomalies(), r.snaplen(), r.file_link_type());
    Some((packets, error, r.packets(), r.offset()))
}

fn in_runs(data: &[u8], run: usize) -> Option<Seen> {
    let mut r = TraceReader::from_bytes("fuzz", data.to_vec()).ok()?;
    let mut packets = Vec::new();
    let error = loop {
        match r.read_packets(run, |p| {
            packets.push((p.ts.to_string(), p.wire_len, p.data.to_vec()));
            true
        }) {
            Ok(0) => break None,
            Ok(_) => {}
            Err(e) => break Some(e.to_string()),
        }
    };
    Some((packets, error, r.packets(), r.offset()))
}

fuzz_target!(|data: &[u8]| {
    let run = usize::from(data.last().copied().unwrap_or(0)) + 1;
    assert_eq!(one_a_call(data), in_runs(data, run));
});
