//! Ingest, dissection and hashing throughput, side by side in one run:
//! walking records, a plain etherparse `SlicedPacket` path, flowsieve's
//! dissect + hash one packet a call (`next_packet`) and in runs
//! (`read_packets`, the `_runs` rows, as the replay reads; one of them on
//! the same packets as a pcapng), replay with and without the exact flow
//! table, a gzip stream, and
//! `tcpdump -r FILE -w /dev/null` on the same file.
//!
//! `cargo bench --bench ingest`. The 1.5M-packet trace (64-200-byte frames,
//! 100k flows, Zipf 1.1) is generated once into `target/bench-traces/` and
//! read from the page cache, cached as a trace read from disk is; the
//! `_just_written` rows read a fresh copy, cached in 4 KiB pages as a trace
//! just written is (`shared/bench_trace.rs` says why it matters). Figures
//! and ratios are in BENCHMARKS.md.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flowsieve::class::Classifier;
use flowsieve::dissect::Dissector;
use flowsieve::hash::flow_hash;
use flowsieve::ingest::{ReadMode, TraceReader};
use flowsieve::replay::{NoObserver, ReplayConfig, replay};
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "shared/bench_trace.rs"]
mod bench_trace;
#[path = "shared/etherparse_baseline.rs"]
mod etherparse_baseline;
use bench_trace::{PACKETS, bench_dir, trace, trace_as, trace_just_written};
use flowsieve::synth::OutputFormat;

fn gz_trace(plain: &Path) -> PathBuf {
    let path = bench_dir().join("bench-1500k-64-200.pcap.gz");
    if !path.exists() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        gz.write_all(&std::fs::read(plain).expect("read"))
            .expect("gzip");
        std::fs::write(&path, gz.finish().expect("gzip")).expect("write");
    }
    let _ = std::fs::read(&path);
    path
}

fn walk(path: &Path, mode: ReadMode) -> u64 {
    let mut r = TraceReader::open_with(path, mode).expect("open");
    let mut bytes = 0u64;
    while let Some(p) = r.next_packet().expect("read") {
        bytes += p.data.len() as u64;
    }
    bytes
}

fn dissect_hash(path: &Path, mode: ReadMode) -> u64 {
    let mut r = TraceReader::open_with(path, mode).expect("open");
    let d = Dissector::default();
    let mut acc = 0u64;
    while let Some(p) = r.next_packet().expect("read") {
        if let Ok(x) = d.dissect(p.link_type, p.data) {
            acc = acc.wrapping_add(flow_hash(&x.key));
        }
    }
    acc
}

/// [`dissect_hash`] through `read_packets`, the runs the replay reads in.
fn dissect_hash_runs(path: &Path, mode: ReadMode) -> u64 {
    let mut r = TraceReader::open_with(path, mode).expect("open");
    let d = Dissector::default();
    let mut acc = 0u64;
    while r
        .read_packets(256, |p| {
            if let Ok(x) = d.dissect(p.link_type, p.data) {
                acc = acc.wrapping_add(flow_hash(&x.key));
            }
            true
        })
        .expect("read")
        > 0
    {}
    acc
}

/// The etherparse baseline over a whole trace.
fn etherparse_sliced_hash(path: &Path) -> u64 {
    let mut r = TraceReader::open(path).expect("open");
    let mut acc = 0u64;
    while let Some(p) = r.next_packet().expect("read") {
        if let Some(h) = etherparse_baseline::sliced_hash(p.data) {
            acc = acc.wrapping_add(h);
        }
    }
    acc
}

fn benches(c: &mut Criterion) {
    let path = trace();
    let written = trace_just_written(&path);
    let gz = gz_trace(&path);
    let mut g = c.benchmark_group("ingest_1.5M_pkts_64-200B");
    g.throughput(Throughput::Elements(PACKETS));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    // Buffered reads (the default) and mapped reads (--mmap), side by side.
    g.bench_function("walk_records", |b| {
        b.iter(|| black_box(walk(&path, ReadMode::Read)))
    });
    g.bench_function("walk_records_mmap", |b| {
        b.iter(|| black_box(walk(&path, ReadMode::Mmap)))
    });
    // The same bytes cached in 4 KiB pages, as a trace just written sits
    // (see `bench_trace`): the mapped reads pay a TLB walk per page.
    g.bench_function("walk_records_mmap_just_written", |b| {
        b.iter(|| black_box(walk(&written, ReadMode::Mmap)))
    });
    g.bench_function("etherparse_sliced_hash", |b| {
        b.iter(|| black_box(etherparse_sliced_hash(&path)))
    });
    g.bench_function("dissect_hash", |b| {
        b.iter(|| black_box(dissect_hash(&path, ReadMode::Read)))
    });
    g.bench_function("dissect_hash_mmap", |b| {
        b.iter(|| black_box(dissect_hash(&path, ReadMode::Mmap)))
    });
    g.bench_function("dissect_hash_mmap_runs", |b| {
        b.iter(|| black_box(dissect_hash_runs(&path, ReadMode::Mmap)))
    });
    g.bench_function("dissect_hash_runs", |b| {
        b.iter(|| black_box(dissect_hash_runs(&path, ReadMode::Read)))
    });
    // The same packets in a pcapng (one interface, nanosecond clock), as
    // Wireshark and dumpcap write: its blocks are framed in runs too.
    let pcapng = trace_as(OutputFormat::PcapNg, "bench-1500k-64-200.pcapng");
    g.bench_function("dissect_hash_mmap_runs_pcapng", |b| {
        b.iter(|| black_box(dissect_hash_runs(&pcapng, ReadMode::Mmap)))
    });
    g.bench_function("dissect_hash_mmap_just_written", |b| {
        b.iter(|| black_box(dissect_hash(&written, ReadMode::Mmap)))
    });
    let paths = vec![path.clone()];
    let mut cfg = ReplayConfig::new(Classifier::ports());
    cfg.truth = false;
    g.bench_function("replay_no_truth", |b| {
        b.iter(|| black_box(replay(&paths, &cfg, &mut NoObserver).trace.packets))
    });
    cfg.truth = true;
    g.bench_function("replay_truth", |b| {
        b.iter(|| black_box(replay(&paths, &cfg, &mut NoObserver).trace.flows))
    });
    g.bench_function("dissect_hash_gzip_stream", |b| {
        b.iter(|| black_box(dissect_hash(&gz, ReadMode::Read)))
    });
    let tcpdump = Command::new("tcpdump")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if tcpdump.is_ok_and(|s| s.success()) {
        g.bench_function("tcpdump_r_w_devnull", |b| {
            b.iter(|| {
                let s = Command::new("tcpdump")
                    .arg("-r")
                    .arg(&path)
                    .args(["-w", "/dev/null"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .expect("tcpdump runs");
                assert!(s.success());
            })
        });
    } else {
        eprintln!("tcpdump not found: skipping the side-by-side (apt-get install tcpdump)");
    }
    g.finish();
}

criterion_group! {
    name = ingest;
    // No plots: criterion's plotting backend needs system fonts that a
    // fresh machine does not have, and panics without them.
    config = Criterion::default().without_plots();
    targets = benches
}
criterion_main!(ingest);
