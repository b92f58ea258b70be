//! The gzip and zstd stream paths: arbitrary bytes behind each magic, and
//! arbitrary (pcap-like) bytes compressed properly, then read to the end.
#![no_main]
use flowsieve::ingest::TraceReader;
use libfuzzer_sys::fuzz_target;
use std::io::Write;

fn drain(bytes: Vec<u8>) {
    let len = bytes.len();
    let Ok(mut r) = TraceReader::from_bytes("fuzz", bytes) else {
        return;
    };
    let mut n = 0u64;
    while let Ok(Some(_)) = r.next_packet() {
        n += 1;
        // Decompression can expand, but the fuzzer's inputs are small: a
        // bound far above any honest expansion catches a runaway loop.
        assert!(n < 1 << 24, "{n} packets from {len} bytes");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = match mode % 4 {
        0 => [&[0x1f, 0x8b][..], rest].concat(),
        1 => [&[0x28, 0xb5, 0x2f, 0xfd][..], rest].concat(),
        2 => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            let _ = e.write_all(rest);
            let Ok(mut v) = e.finish() else { return };
            // Optionally damage one byte of the valid stream.
            if let Some(&b) = rest.first() {
                let at = usize::from(b) % v.len();
                v[at] ^= rest.get(1).copied().unwrap_or(0);
            }
            v
        }
        _ => match zstd::encode_all(rest, 1) {
            Ok(v) => v,
            Err(_) => return,
        },
    };
    drain(bytes);
});
