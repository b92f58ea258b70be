//! Helpers of the network-mode tests: probes simulated in process, and
//! traces split into disjoint parts.

use flowsieve::network::{Digest, NetworkConfig};
use flowsieve::pipeline::{
    run, FileSource, NoEvents, PipelineConfig, ShardWindow, WindowDigestSink, WindowExport,
};
use flowsieve::replay::NoObserver;
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
