//! Robustness over every capture in `../shared/traces`: the curated files and
//! the ~4,000 files of the `corpora/*.tar.xz` archives (unpacked to a
//! temporary folder). Each file is read through the reader and dissector on
//! its own thread with a deadline: no panic, no hang. Where the corpora's
//! independent statistics report a clean file, the packet count must match.

use crate::common;

use common::{scan, shared_traces};
use flowsieve::dissect::Dissector;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// Generous: the largest corpus file reads in well under a second.
const DEADLINE: Duration = Duration::from_secs(60);

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else if p.is_file() {
            out.push(p);
        }
    }
}

/// Packets per file from the corpora's `*.stats.jsonl`, for clean files only.
fn clean_packet_counts(dir: &Path) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return m;
    };
    for e in rd.flatten() {
        let p = e.path();
        if !p.to_string_lossy().ends_with(".stats.jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&p).unwrap_or_default().lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let clean = v["errors"].as_array().is_some_and(|a| a.is_empty());
            let fmt = v["format"].as_str().unwrap_or("");
            if clean
                && fmt.starts_with("pcap")
                && let (Some(f), Some(n)) = (v["file"].as_str(), v["packets"].as_u64())
            {
                m.insert(f.to_string(), n);
            }
        }
    }
    m
}

#[test]
fn every_capture_reads_without_panic_or_hang() {
    let Some(traces) = shared_traces("every_capture_reads_without_panic_or_hang") else {
        return;
    };
    let unpacked = tempfile::tempdir().expect("temp dir");
    let corpora = traces.join("corpora");
    let mut archives = 0;
    for e in std::fs::read_dir(&corpora)
        .expect("corpora folder")
        .flatten()
    {
        let p = e.path();
        if p.to_string_lossy().ends_with(".tar.xz") {
            let status = std::process::Command::new("tar")
                .arg("-xJf")
                .arg(&p)
                .arg("-C")
                .arg(unpacked.path())
                .status()
                .expect("tar runs");
            assert!(status.success(), "cannot unpack {}", p.display());
            archives += 1;
        }
    }
    let mut files = Vec::new();
    for sub in [
        "backbone_like",
        "many_flows",
        "formats",
        "l3_edge",
        "linktypes",
        "malformed",
    ] {
        files_under(&traces.join(sub), &mut files);
    }
    let curated = files.len();
    files_under(unpacked.path(), &mut files);
    assert!(
        archives >= 10 && files.len() > curated + 3000,
        "{archives} archives, {} files",
        files.len()
    );

    let expected = clean_packet_counts(&corpora);
    let mut failures = Vec::new();
    let (mut matched, mut damaged) = (0, 0);
    for path in &files {
        let (tx, rx) = mpsc::channel();
        let p = path.clone();
        let worker = std::thread::spawn(move || {
            let s = scan(&p, Dissector::default());
            let _ = tx.send((s.packets, s.error.map(|e| e.to_string())));
        });
        match rx.recv_timeout(DEADLINE) {
            Ok((packets, error)) => {
                let _ = worker.join();
                if let Some(e) = &error {
                    damaged += 1;
                    if e.contains('\n') {
                        failures.push(format!("multi-line error: {e}"));
                    }
                }
                let rel = path
                    .strip_prefix(unpacked.path())
                    .map(|r| r.to_string_lossy().to_string());
                if let Some(want) = rel.ok().and_then(|r| expected.get(&r).copied()) {
                    if packets == want {
                        matched += 1;
                    } else {
                        failures.push(format!(
                            "{}: {packets} packets, independent parser {want} ({error:?})",
                            path.display()
                        ));
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => failures.push(format!(
                "{}: no answer in {DEADLINE:?} (hang)",
                path.display()
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let msg = worker
                    .join()
                    .err()
                    .and_then(|p| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                failures.push(format!("{}: PANIC {msg}", path.display()));
            }
        }
    }
    eprintln!(
        "read {} files ({} curated, {} from {} archives): {} damaged or not captures, {} packet counts checked against the corpora statistics",
        files.len(),
        curated,
        files.len() - curated,
        archives,
        damaged,
        matched
    );
    assert!(matched > 3000, "only {matched} packet counts compared");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
