//! Classic pcap and pcapng from a file, through the buffered reader
//! (`--no-mmap`) and the guarded memory map (the default): the same packets
//! either way.
#![no_main]
use flowsieve::ingest::{ReadMode, TraceReader};
use libfuzzer_sys::fuzz_target;
use std::io::Write;

fn packets(path: &std::path::Path, mode: ReadMode) -> Vec<(usize, u32)> {
    let Ok(mut r) = TraceReader::open_with(path, mode) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Ok(Some(p)) = r.next_packet() {
        out.push((p.data.len(), p.wire_len));
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(mut f) = tempfile::NamedTempFile::new() else {
        return;
    };
    if f.write_all(data).is_err() || f.flush().is_err() {
        return;
    }
    let read = packets(f.path(), ReadMode::Read);
    let mapped = packets(f.path(), ReadMode::Mmap);
    assert_eq!(read, mapped, "buffered and mapped reads differ");
});
