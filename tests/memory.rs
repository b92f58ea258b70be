//! The throughput issue's memory bound: with truth off, the process's peak
//! resident set stays within the filters' configured size plus 64 MiB on
//! any trace, a flood of 10 M distinct flows included. Nothing per flow may
//! outlive its window or its stage's cap when no exact answer is asked for.
//!
//! The flood is written by the test itself (one 64-byte IPv4/UDP frame per
//! flow, each from its own source address), so the test needs neither a
//! shared capture nor `gen-trace`'s Zipf machinery. The peak is the one
//! the report states, `throughput.peak_resident_bytes` (the kernel's
//! `VmHWM` for the process), which counts the file pages a mapped trace
//! keeps resident as well as the heap. Not `wait4(2)`'s `ru_maxrss`: that
//! figure survives `exec`, so a child of this test binary reports the
//! harness's own peak (391 MiB in a full run) as its own. The filters'
//! size is the report's `throughput.memory`, whose exactness against the
//! configured sizes `tests/pipeline.rs` checks.

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapPacket, PcapWriter};
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Distinct flows in the flood: the figure.
const FLOWS: u32 = 10_000_000;

/// What the issue allows beyond the filters.
const ALLOWANCE: u64 = 64 << 20;

/// Ethernet (14) + IPv4 (20) + UDP (8) + 22 bytes of payload.
const FRAME_LEN: usize = 64;
const PAYLOAD: [u8; 22] = [0; 22];

/// The flood, as a classic microsecond pcap: flow `i` sends one frame from
/// 10.0.0.0 + `i`, and the arrivals are 6 µs apart (a minute in all).
/// etherparse builds each frame (checksums included), pcap-file frames it.
fn write_flood(out: impl Write) -> std::io::Result<()> {
    let w = BufWriter::with_capacity(1 << 20, out);
    let mut pcap = PcapWriter::new(w).map_err(std::io::Error::other)?;
    let mut frame = Vec::with_capacity(FRAME_LEN);
    for i in 0..FLOWS {
        frame.clear();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4((0x0a00_0000u32 + i).to_be_bytes(), [192, 0, 2, 1], 64)
            .udp(40000, 53)
            .write(&mut frame, &PAYLOAD)
            .map_err(std::io::Error::other)?;
        debug_assert_eq!(frame.len(), FRAME_LEN);
        let us = u64::from(i) * 6;
        let at = Duration::from_secs(1_700_000_000) + Duration::from_micros(us);
        pcap.write_packet(&PcapPacket::new(at, FRAME_LEN as u32, &frame))
            .map_err(std::io::Error::other)?;
    }
    pcap.into_writer().flush()
}

/// What one run of the binary gave: its report and its peak resident set.
struct Measured {
    report: serde_json::Value,
    peak_rss_bytes: u64,
}

/// Starts `flowsieve -q --no-truth --json - TRACE`, the report on stdout.
fn start(trace: &str, stdin: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_flowsieve"))
        .args(["-q", "--no-truth", "--json", "-", trace])
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts")
}

/// Reads the child's report and its peak, the report's
/// `throughput.peak_resident_bytes`.
fn finish(mut child: Child) -> Measured {
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "the run failed: {stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("the report is JSON");
    let peak_rss_bytes = report["throughput"]["peak_resident_bytes"]
        .as_u64()
        .expect("the report states its peak");
    Measured {
        report,
        peak_rss_bytes,
    }
}

/// Every flood packet was read and dissected, and the peak stayed within
/// the filters plus the allowance.
fn check(m: &Measured, how: &str) {
    let trace = &m.report["trace"];
    assert_eq!(trace["packets"], u64::from(FLOWS), "{how}: {trace}");
    assert_eq!(trace["ip_packets"], u64::from(FLOWS), "{how}: {trace}");
    let skipped = trace["skipped"].as_object().unwrap();
    assert!(skipped.values().all(|n| n == 0), "{how}: {skipped:?}");
    let memory = &m.report["throughput"]["memory"];
    let filters = memory["heavy"].as_u64().unwrap() + memory["new_flows"].as_u64().unwrap();
    // The default sizes: 4 MiB of heavy counters, 1.1 MiB of recycling
    // bits. A default that grew would loosen the bound unnoticed.
    assert!(
        filters <= 8 << 20,
        "{how}: the default filters take {filters} bytes"
    );
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    eprintln!(
        "{how}: peak RSS {:.1} MiB, filters {:.1} MiB, bound {:.1} MiB",
        mib(m.peak_rss_bytes),
        mib(filters),
        mib(filters + ALLOWANCE)
    );
    assert!(
        m.peak_rss_bytes <= filters + ALLOWANCE,
        "{how}: peak RSS {:.1} MiB, over the filters' {:.1} MiB plus 64 MiB",
        mib(m.peak_rss_bytes),
        mib(filters)
    );
}

/// The flood streamed through a pipe (`… | flowsieve -`): the streaming
/// reader's buffers, the records in flight and the stages' state.
#[test]
fn a_flood_of_ten_million_flows_through_a_pipe_stays_within_the_bound() {
    let mut child = start("-", Stdio::piped());
    let stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || write_flood(stdin));
    let m = finish(child);
    writer.join().unwrap().expect("the flood is written whole");
    check(&m, "a pipe");
}

/// The flood as a file (about 800 MB), read through the map: the file's
/// pages must be let go as the reader passes them, or they alone would
/// break the bound.
#[test]
fn a_flood_of_ten_million_flows_from_a_file_stays_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flood.pcap");
    write_flood(std::fs::File::create(&path).unwrap()).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(size, 24 + u64::from(FLOWS) * (16 + FRAME_LEN as u64));
    assert!(size > 10 * ALLOWANCE, "the file must dwarf the allowance");
    let m = finish(start(path_str(&path), Stdio::null()));
    check(&m, "a file");
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}
