//! The helper threads of `--dissect-threads` (`flowsieve::ahead`) on any
//! file: a replay with helpers hands its sink the very packets, keys,
//! hashes, classes, times and lengths, in the same order, and reports the
//! same summary, as the replay without them. Only the work may move.
//!
//! The helpers start at guessed record or block boundaries
//! (`ingest::split`, `ingest::split_ng`) in the middle of a file, so their
//! code reads bytes the reader never trusted; a wrong guess must cost a
//! miss, never a different packet, and never a panic.
//!
//! Input: two bytes of settings, then the file.
//! - byte 0: helpers (`1 + b % 3`); bit 7 picks a class rule that names
//!   interfaces, so that the interface-name check is exercised too;
//! - byte 1: the share a helper takes, `28 + 8 * b` bytes (28 to 2068), so
//!   that even a small input is cut into many shares.
#![no_main]
use flowsieve::class::{ClassConfig, ClassId, Classifier};
use flowsieve::dissect::FlowKey;
use flowsieve::ingest::Timestamp;
use flowsieve::replay::{replay_into, NoObserver, PacketSink, ReplayConfig};
use libfuzzer_sys::fuzz_target;
use std::io::Write;
use std::path::Path;

/// Every packet a sink was handed, as the sink saw it.
#[derive(Default, PartialEq)]
struct Everything(Vec<(FlowKey, u64, ClassId, Timestamp, u32, u32)>);

impl PacketSink for Everything {
    fn packet(
        &mut self,
        key: &FlowKey,
        hash: u64,
        class: ClassId,
        ts: Timestamp,
        wire: u32,
        cap: u32,
    ) {
        self.0.push((*key, hash, class, ts, wire, cap));
    }
}

fn classifier(by_name: bool) -> Classifier {
    if !by_name {
        return Classifier::ports();
    }
    let rules = "[[class]]\nname = \"up-dns\"\niface = [\"eth0\"]\nports = [53]\n\
                 [[class]]\nname = \"dns\"\nports = [53]\n";
    Classifier::from_config(ClassConfig::parse("fuzz.toml", rules).expect("a fixed class rule"))
}

/// The summary's JSON without what a replay's work may change: the read
/// time and rate, and how many packets the helpers prepared.
fn without_work(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(t) = v["trace"].as_object_mut() {
        t.remove("read_seconds");
        t.remove("packets_per_sec");
        if let Some(files) = t.get_mut("files").and_then(serde_json::Value::as_array_mut) {
            for f in files
                .iter_mut()
                .filter_map(serde_json::Value::as_object_mut)
            {
                f.remove("dissected_ahead");
            }
        }
    }
    v
}

fn replay(
    path: &Path,
    helpers: usize,
    share: usize,
    by_name: bool,
) -> (Everything, serde_json::Value) {
    let mut cfg = ReplayConfig::new(classifier(by_name));
    cfg.dissect_threads = helpers;
    cfg.dissect_share = share;
    let mut sink = Everything::default();
    let summary = replay_into(&[path.to_path_buf()], &cfg, &mut NoObserver, &mut sink);
    let json = serde_json::to_value(&summary).expect("a summary is JSON");
    (sink, without_work(json))
}

fuzz_target!(|data: &[u8]| {
    let [settings, share, file @ ..] = data else {
        return;
    };
    let helpers = 1 + usize::from(settings & 0x7f) % 3;
    let by_name = settings & 0x80 != 0;
    let share = 28 + 8 * usize::from(*share);
    let Ok(mut f) = tempfile::NamedTempFile::new() else {
        return;
    };
    if f.write_all(file).is_err() || f.flush().is_err() {
        return;
    }
    let path = f.path();
    let (plain_sink, plain) = replay(path, 0, share, by_name);
    let (helped_sink, helped) = replay(path, helpers, share, by_name);
    assert_eq!(
        plain, helped,
        "the summary differs with {helpers} helpers in shares of {share}"
    );
    assert!(
        plain_sink == helped_sink,
        "the sink saw other packets with {helpers} helpers in shares of {share}"
    );
});
