//! Shared helpers for the integration tests: locating `../shared/traces`,
//! reading its manifest, and running a file through reader + dissector.

#![allow(dead_code)]

pub mod network;
pub mod pcapng;
pub mod skip;

use flowsieve::dissect::{Dissector, FlowKey, SkipCounts};
use flowsieve::hash::flow_hash;
use flowsieve::ingest::{IngestError, Timestamp, TraceReader};
use flowsieve::truth::FlowTable;
use std::path::{Path, PathBuf};

/// A gzip copy of the file `from`, written to `to`: a trace whose size on
/// disk is not what a run reads.
pub fn gzip_file(from: &Path, to: &Path) {
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(to).unwrap(),
        flate2::Compression::fast(),
    );
    std::io::copy(&mut std::fs::File::open(from).unwrap(), &mut enc).unwrap();
    enc.finish().unwrap();
}

/// `bytes` gzip-compressed, at gzip's fastest level.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, bytes).unwrap();
    enc.finish().unwrap()
}

/// A JSON report without the figures that may differ between two runs of
/// the same work: the timing sections (`throughput`, `stages`, `capture`)
/// and the trace's read time and rate. The throughput issue's rule is that
/// an optimisation changes these and nothing else, so the tests that
/// prove it compare what is left.
pub fn without_timing(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(o) = v.as_object_mut() {
        for k in ["throughput", "stages", "capture"] {
            o.remove(k);
        }
        if let Some(t) = o
            .get_mut("trace")
            .and_then(serde_json::Value::as_object_mut)
        {
            for k in ["read_seconds", "packets_per_sec"] {
                t.remove(k);
            }
            // How many packets `--dissect-threads` helpers prepared: work.
            if let Some(files) = t.get_mut("files").and_then(serde_json::Value::as_array_mut) {
                for f in files
                    .iter_mut()
                    .filter_map(serde_json::Value::as_object_mut)
                {
                    f.remove("dissected_ahead");
                }
            }
        }
    }
    v
}

/// [`without_timing`] of a pipeline report's JSON.
pub fn report_without_timing(r: &flowsieve::report::PipelineReport) -> serde_json::Value {
    without_timing(serde_json::from_str(&r.to_json()).expect("a report is JSON"))
}

/// `../shared/traces` beside the crate, or `None` (with a message saying
/// the test is skipped) when it is absent; a panic instead of the skip
/// when `FLOWSIEVE_REQUIRE_SHARED` asks for the real captures
/// ([`skip::Need::Shared`]: `.ci/run` sets it, so CI cannot go green
/// without them).
pub fn shared_traces(test: &str) -> Option<PathBuf> {
    locate_shared(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/traces"),
        test,
        skip::Need::Shared.required(),
    )
}

/// [`shared_traces`] for a given folder and requirement.
pub fn locate_shared(dir: &Path, test: &str, required: bool) -> Option<PathBuf> {
    if dir.join("manifest.json").is_file() {
        return Some(dir.to_path_buf());
    }
    skip::unless(
        skip::Need::Shared,
        required,
        test,
        &format!(
            "{} not found beside the crate (the real-capture tests need it)",
            dir.display()
        ),
    );
    None
}

/// One manifest entry.
pub struct ManifestEntry {
    pub file: String,
    pub stats: serde_json::Value,
}

impl ManifestEntry {
    pub fn u64(&self, field: &str) -> u64 {
        self.stats[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: manifest has no stats.{field}", self.file))
    }
    pub fn f64(&self, field: &str) -> Option<f64> {
        self.stats[field].as_f64()
    }
    pub fn errors(&self) -> Vec<String> {
        self.stats["errors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }
    pub fn format(&self) -> &str {
        self.stats["format"].as_str().unwrap_or("")
    }
}

pub fn manifest(dir: &Path) -> Vec<ManifestEntry> {
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest.json readable");
    let v: serde_json::Value = serde_json::from_str(&text).expect("manifest.json is JSON");
    v.as_array()
        .expect("manifest is an array")
        .iter()
        .map(|e| ManifestEntry {
            file: e["file"].as_str().unwrap_or("").to_string(),
            stats: e["stats"].clone(),
        })
        .collect()
}

/// Everything a scan of one file found.
pub struct Scan {
    pub packets: u64,
    pub table: FlowTable,
    pub skips: SkipCounts,
    pub first_ts: Option<Timestamp>,
    pub last_ts: Option<Timestamp>,
    pub error: Option<IngestError>,
    pub reader: Option<TraceReader>,
    pub keys_in_order: Vec<Option<FlowKey>>,
    /// Packets per link type, counted one packet at a time in a plain map.
    pub link_types: std::collections::BTreeMap<u16, u64>,
}

/// Reads a whole file through the reader and dissector.
pub fn scan(path: &Path, dissector: Dissector) -> Scan {
    let mut s = Scan {
        packets: 0,
        table: FlowTable::default(),
        skips: SkipCounts::default(),
        first_ts: None,
        last_ts: None,
        error: None,
        reader: None,
        keys_in_order: Vec::new(),
        link_types: Default::default(),
    };
    let mut reader = match TraceReader::open(path) {
        Ok(r) => r,
        Err(e) => {
            s.error = Some(e);
            return s;
        }
    };
    loop {
        match reader.next_packet() {
            Ok(Some(p)) => {
                s.packets += 1;
                *s.link_types.entry(p.link_type.0).or_insert(0) += 1;
                if p.timestamped {
                    s.first_ts = Some(s.first_ts.map_or(p.ts, |t| t.min(p.ts)));
                    s.last_ts = Some(s.last_ts.map_or(p.ts, |t| t.max(p.ts)));
                }
                match dissector.dissect(p.link_type, p.data) {
                    Ok(d) => {
                        s.table.record(
                            d.key,
                            flow_hash(&d.key),
                            0,
                            p.ts,
                            p.wire_len,
                            p.data.len() as u32,
                        );
                        s.keys_in_order.push(Some(d.key));
                    }
                    Err(r) => {
                        s.skips.add(r);
                        s.keys_in_order.push(None);
                    }
                }
            }
            Ok(None) => break,
            Err(e) => {
                s.error = Some(e);
                break;
            }
        }
    }
    s.reader = Some(reader);
    s
}

/// One flow as (key, packets, wire bytes, captured bytes, first ns, last ns).
pub type FlowRow = (String, u64, u64, u64, i128, i128);

/// A flow table as a sorted list, for comparing tables.
pub fn sorted_flows(t: &FlowTable, with_times: bool) -> Vec<FlowRow> {
    let mut v: Vec<_> = t
        .iter()
        .map(|e| {
            let (a, b) = if with_times {
                (e.stats.first_ts.as_nanos(), e.stats.last_ts.as_nanos())
            } else {
                (0, 0)
            };
            (
                e.key.to_string(),
                e.stats.packets,
                e.stats.wire_bytes,
                e.stats.captured_bytes,
                a,
                b,
            )
        })
        .collect();
    v.sort();
    v
}

/// GET /metrics from inside network namespace `ns` (its loopback is its
/// own), with Python's standard library as an independent client.
pub fn scrape_in_netns(ns: &str, port: u16) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-c"])
        .arg(format!(
            "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics',timeout=5).read().decode(),end='')"
        ))
        .output()
        .expect("python3 for the scrape");
    assert!(
        out.status.success(),
        "scrape failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Three synthetic pcap files in `dir` (seeds 0, 1, 2; 20 k flows and 60 k
/// packets of 64-128 bytes each): a trace split across files, for tests
/// that compare two ways of running over several files.
pub fn three_synthetic_parts(dir: &Path) -> Vec<PathBuf> {
    use flowsieve::synth::{SizeModel, SynthConfig, generate};
    (0..3)
        .map(|seed| {
            let path = dir.join(format!("part{seed}.pcap"));
            let cfg = SynthConfig {
                flows: 20_000,
                packets: 60_000,
                sizes: SizeModel::Uniform { min: 64, max: 128 },
                seed,
                ..SynthConfig::default()
            };
            let f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
            generate(&cfg, f).expect("generate");
            path
        })
        .collect()
}

/// Every file the shared folder's manifest lists (damaged and compressed
/// ones included), as paths; there are more than a hundred.
pub fn manifest_paths(dir: &Path) -> Vec<PathBuf> {
    let paths: Vec<PathBuf> = manifest(dir).iter().map(|e| dir.join(&e.file)).collect();
    assert!(paths.len() > 100, "the manifest lists the captures");
    paths
}

/// Runs `f` on a thread of its own and fails the test, saying `hang`, if
/// it takes longer than `limit`: for the lock-free hand-offs, whose lost
/// turn or wake-up would otherwise hang the test instead of failing it.
pub fn within<T: Send + 'static>(
    limit: std::time::Duration,
    hang: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(_) => panic!("{hang}: the run did not end within {limit:?}"),
    }
}

/// A fresh pseudo-terminal: its leader, which must stay open while the
/// follower is in use, and its follower, to hand a child as a terminal
/// standard input or output.
pub fn pseudo_terminal() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let (mut leader, mut follower) = (0, 0);
    // SAFETY: both pointers are to live `c_int`s; the name, termios and
    // window size are optional and passed as null.
    let opened = unsafe {
        libc::openpty(
            &mut leader,
            &mut follower,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty returned two fresh descriptors that nothing else owns.
    unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(leader),
            std::os::fd::OwnedFd::from_raw_fd(follower),
        )
    }
}

/// `ln P(Poisson(mean) >= theta)` summed the plain way, to check the
/// models' tails against: the `terms` terms from `theta` on as
/// logarithms, added by a log-sum-exp with no early stop.
pub fn ln_poisson_tail_plain(theta: u64, mean: f64, terms: u64) -> f64 {
    use flowsieve::model::special::ln_factorial;
    let logs: Vec<f64> = (theta..theta + terms)
        .map(|l| l as f64 * mean.ln() - mean - ln_factorial(l))
        .collect();
    let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    top + logs.iter().map(|x| (x - top).exp()).sum::<f64>().ln()
}

/// Every word inside backticks in `text`: `selective.flood` gives
/// `selective` and `flood`, `P* = f` gives `P` and `f`.
pub fn backticked_words(text: &str) -> std::collections::BTreeSet<String> {
    let mut words = std::collections::BTreeSet::new();
    for (i, quoted) in text.split('`').enumerate() {
        if i % 2 == 1 {
            words.extend(
                quoted
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
                    .map(str::to_string),
            );
        }
    }
    words
}

/// Every object key in a JSON value, at any depth.
pub fn json_field_names(v: &serde_json::Value) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(o) => {
                names.extend(o.keys().cloned());
                stack.extend(o.values());
            }
            serde_json::Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    names
}

/// The words of docs/json-schema.md's replay and pipeline sections (those
/// before the `model` section), by [`backticked_words`]: every field name
/// a replay or live report has must be among them.
pub fn replay_json_reference() -> std::collections::BTreeSet<String> {
    let doc = json_reference();
    let replay = doc
        .split("## `flowsieve model")
        .next()
        .expect("docs/json-schema.md has the replay sections first");
    backticked_words(replay)
}

/// The text of docs/json-schema.md, the JSON outputs' reference.
pub fn json_reference() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json-schema.md"),
    )
    .unwrap()
}

/// Asserts that every field name of `v` ([`json_field_names`]) is among
/// `documented`, naming those that are not and `what` was checked.
pub fn assert_documented(
    v: &serde_json::Value,
    documented: &std::collections::BTreeSet<String>,
    what: &str,
) {
    let undocumented: Vec<_> = json_field_names(v)
        .difference(documented)
        .cloned()
        .collect();
    assert!(
        undocumented.is_empty(),
        "{what}: not in the reference: {undocumented:?}"
    );
}

/// A probe's first words, with its server on loopback's port 1, which
/// refuses at once: the probe monitors locally and sends nothing anywhere.
pub const PROBE_TO_A_REFUSING_SERVER: [&str; 5] =
    ["probe", "--nats", "nats://127.0.0.1:1", "--probe-id", "p1"];

/// How the stderr of a [`PROBE_TO_A_REFUSING_SERVER`] begins: the refused
/// connection's warning (the OS's words follow), before it monitors locally.
pub const REFUSED_CONNECT_WARNING: &str = "flowsieve: warning: NATS connect: nats://127.0.0.1:1: ";

/// Waits (up to 10 s) until process `pid` catches `sig`: its bit in the
/// `SigCgt` mask of `/proc/PID/status`. A signal sent before the handler
/// is registered would get its default action.
pub fn wait_until_caught(pid: u32, sig: i32) {
    let start = std::time::Instant::now();
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & (1 << (sig - 1)) != 0);
        if caught {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{pid} never caught {sig}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A child killed and reaped when it is dropped, so that a failed
/// assertion leaves no child running (a collector, an injector), unless
/// the test took it back ([`KilledAtEnd::take`]) to wait for it.
pub struct KilledAtEnd(Option<std::process::Child>);

impl KilledAtEnd {
    pub fn new(child: std::process::Child) -> KilledAtEnd {
        KilledAtEnd(Some(child))
    }

    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, std::process::Child::id)
    }

    pub fn take(mut self) -> std::process::Child {
        self.0.take().expect("taken once")
    }
}

impl Drop for KilledAtEnd {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits up to `limit` for `child` to end and reaps it: its status, or
/// `None` if it is still running when the limit passes.
///
/// It sleeps in `poll(2)` on the child's pidfd, which becomes readable the
/// moment the child ends, so a run of a few milliseconds is seen as soon as
/// it ends. A loop of `try_wait` and a 5 ms sleep added 2.5 ms on average
/// to each of the property tests' ten thousand runs of a few milliseconds.
/// Where `pidfd_open(2)` is refused (a kernel before 5.3), it falls back to
/// that loop, at 1 ms.
pub fn wait_for_exit(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let start = std::time::Instant::now();
    // SAFETY: pidfd_open(2) takes a pid and a flags word and returns a new
    // descriptor or -1; the pid is our own child's, not yet reaped (the
    // `Child` reaps it only in `wait`/`try_wait`), so it names no other
    // process.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    // SAFETY: a non-negative return is a descriptor we now own.
    let pidfd = (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw as i32) });
    loop {
        if let Some(s) = child.try_wait().expect("try_wait on a child") {
            return Some(s);
        }
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            return None;
        }
        match &pidfd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
                // SAFETY: one valid pollfd, for the call's duration. An
                // interrupted or timed-out poll just loops.
                unsafe { libc::poll(&mut p, 1, ms) };
            }
            None => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    }
}
