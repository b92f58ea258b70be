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

use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Distinct flows in the flood: the figure.
const FLOWS: u32 = 10_000_000;

/// What the issue allows beyond the filters.
const ALLOWANCE: u64 = 64 << 20;

/// Ethernet (14) + IPv4 (20) + UDP (8) + 22 bytes of payload.
const FRAME_LEN: usize = 64;
const IPV4_OFFSET: usize = 14;
const IPV4_LEN: usize = 20;
const UDP_LEN: usize = 8;

/// The flood, as a classic microsecond pcap: flow `i` sends one frame from
/// 10.0.0.0 + `i`, and the arrivals are 6 µs apart (a minute in all).
fn write_flood(out: impl Write) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, out);
    // Magic, version 2.4, zone, sigfigs, snaplen, link type 1 (Ethernet).
    w.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
    w.write_all(&2u16.to_le_bytes())?;
    w.write_all(&4u16.to_le_bytes())?;
    w.write_all(&[0; 8])?;
    w.write_all(&65535u32.to_le_bytes())?;
    w.write_all(&1u32.to_le_bytes())?;
    let mut frame = [0u8; FRAME_LEN];
    frame[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = IPV4_OFFSET;
    frame[ip] = 0x45;
    frame[ip + 2..ip + 4].copy_from_slice(&((FRAME_LEN - IPV4_OFFSET) as u16).to_be_bytes());
    frame[ip + 8] = 64; // TTL
    frame[ip + 9] = 17; // UDP
    frame[ip + 16..ip + 20].copy_from_slice(&[192, 0, 2, 1]);
    let udp = IPV4_OFFSET + IPV4_LEN;
    frame[udp..udp + 2].copy_from_slice(&40000u16.to_be_bytes());
    frame[udp + 2..udp + 4].copy_from_slice(&53u16.to_be_bytes());
    frame[udp + 4..udp + 6].copy_from_slice(&((FRAME_LEN - udp) as u16).to_be_bytes());
    debug_assert!(udp + UDP_LEN <= FRAME_LEN);
    for i in 0..FLOWS {
        let src = 0x0a00_0000u32 + i;
        frame[ip + 12..ip + 16].copy_from_slice(&src.to_be_bytes());
        frame[ip + 10..ip + 12].fill(0);
        let sum = ipv4_checksum(&frame[ip..ip + IPV4_LEN]);
        frame[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
        let us = u64::from(i) * 6;
        let secs = 1_700_000_000 + (us / 1_000_000) as u32;
        w.write_all(&secs.to_le_bytes())?;
        w.write_all(&((us % 1_000_000) as u32).to_le_bytes())?;
        w.write_all(&(FRAME_LEN as u32).to_le_bytes())?;
        w.write_all(&(FRAME_LEN as u32).to_le_bytes())?;
        w.write_all(&frame)?;
    }
    w.flush()
}

/// RFC 791's header checksum (the field itself zeroed by the caller).
fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks_exact(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
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
