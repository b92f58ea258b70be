//! Classic pcap and pcapng from bytes: the reader never panics, always
//! ends, and delivers at most one packet per 12 input bytes.
#![no_main]
use flowsieve::ingest::TraceReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let len = data.len();
    let Ok(mut r) = TraceReader::from_bytes("fuzz", data.to_vec()) else {
        return;
    };
    let mut n = 0usize;
    while let Ok(Some(p)) = r.next_packet() {
        assert!(p.data.len() <= len);
        n += 1;
        assert!(n <= len / 12 + 1, "more packets than the bytes can hold");
    }
    let _ = (r.offset(), r.anomalies(), r.snaplen(), r.file_link_type());
});
