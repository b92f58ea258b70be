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
//! `truth` (library replay, truth on). Prints packets and a checksum.

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use flowsieve::class::Classifier;
use flowsieve::dissect::{Dissector, FlowKey};
use flowsieve::hash::flow_hash;
use flowsieve::ingest::TraceReader;
use flowsieve::replay::{replay, NoObserver, ReplayConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(path)) = (args.next(), args.next()) else {
        return Err("usage: ingest_modes walk|dissect|etherparse|replay|truth TRACE".into());
    };
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
                let Ok(s) = SlicedPacket::from_ethernet(p.data) else {
                    continue;
                };
                let (sp, dp) = match &s.transport {
                    Some(TransportSlice::Tcp(t)) => (t.source_port(), t.destination_port()),
                    Some(TransportSlice::Udp(u)) => (u.source_port(), u.destination_port()),
                    _ => (0, 0),
                };
                let key = match &s.net {
                    Some(NetSlice::Ipv4(ip)) => {
                        let h = ip.header();
                        FlowKey::v4(h.source(), h.destination(), sp, dp, h.protocol().0)
                    }
                    Some(NetSlice::Ipv6(ip)) => {
                        let h = ip.header();
                        FlowKey::v6(
                            h.source(),
                            h.destination(),
                            sp,
                            dp,
                            ip.payload().ip_number.0,
                        )
                    }
                    _ => continue,
                };
                acc = acc.wrapping_add(flow_hash(&key));
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
    println!("{mode}: {n} packets, checksum {acc}");
    Ok(())
}
