//! Helpers of the network-mode tests: probes simulated in process, and
//! traces split into disjoint parts.

use flowsieve::network::{Digest, NetworkConfig, ShardWindowResult, cells_checksum};
use flowsieve::pipeline::{
    FileSource, NoEvents, PipelineConfig, ShardWindow, WindowDigestSink, WindowExport, run,
};
use flowsieve::replay::NoObserver;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Collects shard-windows in process (a test's stand-in for the exporter).
#[derive(Default)]
pub struct Collect(pub Mutex<Vec<ShardWindow>>);

impl WindowDigestSink for Collect {
    fn shard_window(&self, w: ShardWindow) {
        self.0.lock().unwrap().push(w);
    }
}

/// Runs the pipeline on `files` as one probe; its shard-windows.
pub fn probe_run(cfg: &PipelineConfig, net: &NetworkConfig, files: &[PathBuf]) -> Vec<ShardWindow> {
    let sink = Arc::new(Collect::default());
    let mut c = cfg.clone();
    c.export = Some(WindowExport {
        candidate_theta: net.candidate_theta(),
        presence_bits: net.presence_bits as usize,
        presence_k: net.presence_k as usize,
        sink: sink.clone(),
    });
    let v = c.validate().unwrap();
    let report = run(
        FileSource::new(files.to_vec(), &v),
        &v,
        &mut NoObserver,
        &mut NoEvents,
    )
    .unwrap();
    assert!(report.replay.errors.is_empty());
    let mut out = std::mem::take(&mut *sink.0.lock().unwrap());
    out.sort_by_key(|w| (w.window, w.shard));
    out
}

pub fn digest(net: &NetworkConfig, probe: &str, w: &ShardWindow) -> Digest {
    Digest {
        fingerprint: net.fingerprint(),
        probe: probe.into(),
        shard: w.shard as u32,
        window: w.window,
        packets: w.packets,
        class_packets: w.class_packets.clone(),
        counters: w.counters.clone(),
        presence: w.presence.clone(),
        candidates: w.candidates.clone(),
    }
}

/// The records of a little-endian microsecond pcap: (seconds, micros,
/// frame), read by hand so that records longer than the snap length (as
/// in the bundled trace) are kept as they are.
/// One pcap record: seconds, microseconds, frame.
pub type Record = (u32, u32, Vec<u8>);

pub fn records(src: &Path) -> (Vec<u8>, Vec<Record>) {
    let b = std::fs::read(src).unwrap();
    assert_eq!(
        &b[..4],
        &[0xd4, 0xc3, 0xb2, 0xa1],
        "little-endian microsecond pcap"
    );
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let (sec, usec, incl) = (u32_at(at), u32_at(at + 4), u32_at(at + 8) as usize);
        out.push((sec, usec, b[at + 16..at + 16 + incl].to_vec()));
        at += 16 + incl;
    }
    (b[..24].to_vec(), out)
}

/// Writes `parts` round-robin splits of a pcap (packet i to split i % parts).
pub fn split_trace(src: &Path, parts: usize, dir: &Path) -> Vec<PathBuf> {
    let b = std::fs::read(src).unwrap();
    let (header, _) = records(src);
    let paths: Vec<PathBuf> = (0..parts)
        .map(|i| dir.join(format!("split{i}.pcap")))
        .collect();
    let mut outs: Vec<Vec<u8>> = vec![header; parts];
    let mut at = 24;
    let mut i = 0;
    while at + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        outs[i % parts].extend_from_slice(&b[at..at + 16 + incl]);
        at += 16 + incl;
        i += 1;
    }
    for (p, o) in paths.iter().zip(outs) {
        std::fs::write(p, o).unwrap();
    }
    paths
}

/// The bundled trace the network tests split.
pub const TRACE: &str = "traces/default.pcap";

/// The whole trace run once, every flow a candidate (threshold 1), and the
/// exact packet count of every (window, flow hash), read from the trace
/// through the same dissector.
pub fn whole_trace(
    cfg: &PipelineConfig,
    net: &NetworkConfig,
) -> (Vec<ShardWindow>, HashMap<(u64, u64), u64>) {
    let mut all = net.clone();
    all.theta = 1;
    all.probes = 1;
    let whole = probe_run(cfg, &all, &[PathBuf::from(TRACE)]);
    let mut counts = HashMap::new();
    let hasher = flowsieve::hash::FlowHasher::new(cfg.replay.hash_key);
    let (header, recs) = records(Path::new(TRACE));
    let link = flowsieve::ingest::LinkType(u16::from_le_bytes([header[20], header[21]]));
    // The pipeline holds time monotone: a packet stamped before its
    // predecessor counts at the predecessor's time.
    let mut ns = 0u64;
    for (sec, usec, frame) in &recs {
        let Ok(d) = flowsieve::dissect::Dissector::new(false).dissect(link, frame) else {
            continue;
        };
        ns = ns.max(u64::from(*sec) * 1_000_000_000 + u64::from(*usec) * 1_000);
        *counts
            .entry((ns / net.window_ns, hasher.hash(&d.key)))
            .or_insert(0) += 1;
    }
    (whole, counts)
}

/// Checks a merged shard-window against the whole trace's: packets and
/// class packets, the counters cell for cell, the presence bits, each
/// heavy flow's estimate, and every flow with `theta` or more true packets
/// present. Returns how many such flows there were.
pub fn assert_merged_is_whole(
    w: &ShardWindow,
    r: &ShardWindowResult,
    counts: &HashMap<(u64, u64), u64>,
    theta: u64,
) -> usize {
    assert!(!r.partial, "{r:?}");
    assert_eq!(r.packets, w.packets);
    assert_eq!(r.class_packets, w.class_packets);
    let cells: Vec<u64> = (0..w.counters.m())
        .map(|i| flowsieve::filter::Counters::counter(&w.counters, i))
        .collect();
    assert_eq!(
        r.counters_checksum,
        format!("{:016x}", cells_checksum(&cells))
    );
    assert_eq!(r.presence_ones, w.presence.count_ones());
    // The merged heavy set: the whole run's flows at or above theta, among
    // the candidates, with the whole run's estimates ...
    let whole_heavy: BTreeMap<u64, u64> = w
        .candidates
        .iter()
        .filter(|c| c.estimate >= theta)
        .map(|c| (c.hash, c.estimate))
        .collect();
    let merged: BTreeSet<u64> = r
        .heavy
        .iter()
        .map(|f| {
            let h = u64::from_str_radix(&f.hash, 16).unwrap();
            assert_eq!(whole_heavy.get(&h), Some(&f.estimate), "{f:?}");
            h
        })
        .collect();
    // ... and every flow truly at or above theta is among them.
    let mut true_heavy = 0;
    for c in &w.candidates {
        let n = counts.get(&(w.window, c.hash)).copied().unwrap_or(0);
        if n >= theta {
            true_heavy += 1;
            assert!(
                merged.contains(&c.hash),
                "true heavy flow {:?} ({n} packets) missed",
                c.key
            );
        }
    }
    true_heavy
}
