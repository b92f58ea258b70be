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
//! Modes: `walk` (records only), `dissect` (dissect + hash), `etherparse`
//! (etherparse `SlicedPacket` + hash), `replay` (library replay, truth off),
//! `truth` (library replay, truth on). Prints packets, a checksum, the wall
//! time and packets per second (one run; use criterion for comparisons).

use flowsieve::class::Classifier;
use flowsieve::dissect::Dissector;
use flowsieve::hash::flow_hash;
use flowsieve::ingest::TraceReader;
use flowsieve::replay::{NoObserver, ReplayConfig, replay};
use std::time::Instant;

#[path = "../benches/shared/etherparse_baseline.rs"]
mod etherparse_baseline;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(path)) = (args.next(), args.next()) else {
        return Err("usage: ingest_modes walk|dissect|etherparse|replay|truth TRACE".into());
    };
    let started = Instant::now();
    let mut r = TraceReader::open(&path)?;
    let d = Dissector::default();
    let (mut n, mut acc) = (0u64, 0u64);
    match mode.as_str() {
        "walk" => {
            while let Some(p) = r.next_packet()? {
                n += 1;
                acc = acc.wrapping_add(p.data.len() as u64);
            }
        }
        "dissect" => {
            while let Some(p) = r.next_packet()? {
                n += 1;
                if let Ok(x) = d.dissect(p.link_type, p.data) {
                    acc = acc.wrapping_add(flow_hash(&x.key));
                }
            }
        }
        "etherparse" => {
            while let Some(p) = r.next_packet()? {
                n += 1;
                if let Some(h) = etherparse_baseline::sliced_hash(p.data) {
                    acc = acc.wrapping_add(h);
                }
            }
        }
        "replay" | "truth" => {
            let mut cfg = ReplayConfig::new(Classifier::ports());
            cfg.truth = mode == "truth";
            let s = replay(&[path.into()], &cfg, &mut NoObserver);
            n = s.trace.packets;
            acc = s.trace.flows.unwrap_or(0);
        }
        other => return Err(format!("unknown mode {other}").into()),
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{mode}: {n} packets, checksum {acc}, {secs:.3} s, {:.1} Mpps",
        n as f64 / secs / 1e6
    );
    Ok(())
}
