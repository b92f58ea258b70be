//! Runs one ingest mode over a trace, for instruction counting under
//! callgrind (deterministic where wall-clock time on a shared machine is
//! not) and for profiling:
//!
//! ```sh
//! cargo build --release --example ingest_modes
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/ingest_modes dissect TRACE
//! ```
//!
//! Modes: `walk` (records only), `dissect` (dissect + hash), `walk-runs`
//! and `dissect-runs` (the same through `TraceReader::read_packets`, as
//! the replay reads), `etherparse`
//! (etherparse `SlicedPacket` + hash), `replay` (library replay, truth off),
//! `truth` (library replay, truth on). Prints packets, a checksum, the wall
//! time and packets per second (one run; use criterion for comparisons).

use flowsieve::class::Classifier;
use flowsieve::dissect::Dissector;
use flowsieve::hash::flow_hash;
use flowsieve::ingest::{IngestError, TraceReader};
use flowsieve::replay::{NoObserver, ReplayConfig, replay};
use std::time::Instant;

#[path = "../benches/shared/etherparse_baseline.rs"]
mod etherparse_baseline;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(path)) = (args.next(), args.next()) else {
        return Err(
            "usage: ingest_modes walk|walk-runs|dissect|dissect-runs|etherparse|replay|truth TRACE"
                .into(),
        );
    };
    let started = Instant::now();
    // Each mode in a function of its own, so that the inlining of one does
    // not depend on how many other modes there are.
    let (n, acc) = match mode.as_str() {
        "walk" => walk(TraceReader::open(&path)?)?,
        "walk-runs" => walk_runs(TraceReader::open(&path)?)?,
        "dissect" => dissect(TraceReader::open(&path)?)?,
        "dissect-runs" => dissect_runs(TraceReader::open(&path)?)?,
        "etherparse" => etherparse(TraceReader::open(&path)?)?,
        "replay" | "truth" => {
            let mut cfg = ReplayConfig::new(Classifier::ports());
            cfg.truth = mode == "truth";
            let s = replay(&[path.into()], &cfg, &mut NoObserver);
            (s.trace.packets, s.trace.flows.unwrap_or(0))
        }
        other => return Err(format!("unknown mode {other}").into()),
    };
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{mode}: {n} packets, checksum {acc}, {secs:.3} s, {:.1} Mpps",
        n as f64 / secs / 1e6
    );
    Ok(())
}

type Counted = Result<(u64, u64), IngestError>;

#[inline(never)]
fn walk(mut r: TraceReader) -> Counted {
    let (mut n, mut acc) = (0u64, 0u64);
    while let Some(p) = r.next_packet()? {
        n += 1;
        acc = acc.wrapping_add(p.data.len() as u64);
    }
    Ok((n, acc))
}

#[inline(never)]
fn walk_runs(mut r: TraceReader) -> Counted {
    let (mut n, mut acc) = (0u64, 0u64);
    while r.read_packets(256, |p| {
        n += 1;
        acc = acc.wrapping_add(p.data.len() as u64);
        true
    })? > 0
    {}
    Ok((n, acc))
}

#[inline(never)]
fn dissect(mut r: TraceReader) -> Counted {
    let d = Dissector::default();
    let (mut n, mut acc) = (0u64, 0u64);
    while let Some(p) = r.next_packet()? {
        n += 1;
        if let Ok(x) = d.dissect(p.link_type, p.data) {
            acc = acc.wrapping_add(flow_hash(&x.key));
        }
    }
    Ok((n, acc))
}

#[inline(never)]
fn dissect_runs(mut r: TraceReader) -> Counted {
    let d = Dissector::default();
    let (mut n, mut acc) = (0u64, 0u64);
    while r.read_packets(256, |p| {
        n += 1;
        if let Ok(x) = d.dissect(p.link_type, p.data) {
            acc = acc.wrapping_add(flow_hash(&x.key));
        }
        true
    })? > 0
    {}
    Ok((n, acc))
}

#[inline(never)]
fn etherparse(mut r: TraceReader) -> Counted {
    let (mut n, mut acc) = (0u64, 0u64);
    while let Some(p) = r.next_packet()? {
        n += 1;
        if let Some(h) = etherparse_baseline::sliced_hash(p.data) {
            acc = acc.wrapping_add(h);
        }
    }
    Ok((n, acc))
}
