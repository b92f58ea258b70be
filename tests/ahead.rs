//! Helper threads that dissect a classic pcap file ahead of the reader
//! (`flowsieve::ahead`), and the record-boundary guesses they start from
//! (`flowsieve::ingest::split`).
//!
//! The rule they live under: the replay with helpers hands the sink the
//! very packets, keys, hashes and classes, in the same order, and reports
//! the same figures, as the replay without them, on any input; only the
//! work moves. These tests check that on the shared captures (damaged ones
//! included), on synthetic traces cut into many small shares, and on
//! traces damaged at random; and that the helpers do take the work (a
//! replay where every record missed would pass the first check too).

use crate::common;
use flowsieve::class::{ClassId, Classifier};
use flowsieve::dissect::{Dissector, FlowKey};
use flowsieve::ingest::split::RecordShape;
use flowsieve::ingest::{Timestamp, TraceReader};
use flowsieve::replay::{NoObserver, PacketSink, ReplayConfig, replay_into};
use flowsieve::report::ReplaySummary;
use flowsieve::synth::{SizeModel, SynthConfig, generate};
use proptest::prelude::*;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Every packet a sink was handed, as the sink saw it.
#[derive(Default)]
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

/// A replay of `paths` with `helpers` helper threads in shares of `share`
/// bytes: what the sink saw, the summary's JSON without its timing and
/// work figures, and the packets the helpers prepared.
fn replay_with(
    paths: &[PathBuf],
    helpers: usize,
    share: usize,
) -> (Everything, serde_json::Value, u64) {
    let mut cfg = ReplayConfig::new(Classifier::ports());
    cfg.dissect_threads = helpers;
    cfg.dissect_share = share;
    let mut sink = Everything::default();
    let summary = replay_into(paths, &cfg, &mut NoObserver, &mut sink);
    let ahead = summary
        .trace
        .files
        .iter()
        .filter_map(|f| f.dissected_ahead)
        .sum();
    (sink, summary_without_work(&summary), ahead)
}

/// A summary's JSON without the figures a replay's work may change: its
/// read time and rate, and how many packets the helpers prepared.
fn summary_without_work(s: &ReplaySummary) -> serde_json::Value {
    let mut v = common::without_timing(serde_json::to_value(s).expect("a summary is JSON"));
    if let Some(files) = v["trace"]["files"].as_array_mut() {
        for f in files {
            if let Some(o) = f.as_object_mut() {
                o.remove("dissected_ahead");
            }
        }
    }
    v
}

/// A synthetic classic pcap trace at `path`.
fn synthetic(path: &Path, packets: u64, seed: u64, sizes: SizeModel, snaplen: u32) -> Vec<u8> {
    let cfg = SynthConfig {
        flows: (packets / 4).max(1),
        packets,
        sizes,
        snaplen,
        seed,
        ..SynthConfig::default()
    };
    let mut bytes = Vec::new();
    generate(&cfg, &mut bytes).expect("generate");
    std::fs::write(path, &bytes).expect("write");
    bytes
}

/// The offsets where the reader frames each record of a classic pcap file.
fn record_starts(path: &Path) -> Vec<usize> {
    let mut reader = TraceReader::open(path).expect("open");
    let mut starts = Vec::new();
    // The first record starts after the file header, which the reader
    // takes with the first record.
    let mut at = 24;
    while let Ok(Some(_)) = reader.next_packet() {
        starts.push(at);
        at = reader.offset() as usize;
    }
    starts
}

#[test]
fn guesses_on_the_shared_captures_land_on_the_next_record() {
    let Some(dir) = common::shared_traces("guesses_on_the_shared_captures_land_on_the_next_record")
    else {
        return;
    };
    let dissector = Dissector::new(false);
    let (mut probes, mut exact, mut wrong, mut files) = (0u64, 0u64, Vec::new(), 0);
    for entry in common::manifest(&dir) {
        let path = dir.join(&entry.file);
        if entry.format() != "pcap" || !entry.errors().is_empty() || entry.file.ends_with(".gz") {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let Some(shape) = RecordShape::of_file(&bytes) else {
            continue;
        };
        let starts = record_starts(&path);
        if starts.len() < 20 {
            continue;
        }
        files += 1;
        let ok = |data: &[u8]| dissector.dissect(shape.link_type(), data).is_ok();
        // 64 places spread over the file, each probed where it falls.
        for i in 0..64 {
            let from = shape.first_record() + (bytes.len() - shape.first_record()) * i / 64;
            let next_true = starts.iter().copied().find(|&s| s >= from);
            let guess = shape.first_boundary(&bytes, from, bytes.len(), ok);
            probes += 1;
            if guess == next_true {
                exact += 1;
            } else if let Some(g) = guess.filter(|g| starts.binary_search(g).is_err()) {
                wrong.push(format!("{} from {from}: {g}", entry.file));
            }
        }
    }
    assert!(
        files > 40,
        "the manifest lists many classic pcap captures ({files})"
    );
    // The figure itself, seen with `-- --nocapture` (as the skips are).
    let _ = writeln!(
        std::io::stderr(),
        "guesses: {exact} of {probes} were the next record, {} no record at all, in {files} captures",
        wrong.len()
    );
    // A guess is a guess (the module's comment), but on real captures it
    // should mostly be the next record (the misses are later records, in
    // captures whose packets mostly have no flow key: IPoIB, PPPoE
    // discovery, a garbage link type; 92 % when this was written), and
    // almost never a place that is no record at all.
    assert!(
        exact * 100 >= probes * 88,
        "{exact} of {probes} guesses were the next record"
    );
    assert!(
        (wrong.len() as u64) * 100 <= probes,
        "{} of {probes} guesses were not a record: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

#[test]
fn a_guess_in_a_full_capture_is_not_fooled_by_the_header_four_bytes_on() {
    // With caplen equal to the wire length, a walk four bytes into a
    // header is a chain of plausible headers to the end of the file (the
    // module's comment); the data test must reject it.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("full.pcap");
    // Dense, as a backbone link is: packets microseconds apart, so that
    // the fractions read as seconds are close enough to chain.
    let cfg = SynthConfig {
        flows: 500,
        packets: 3000,
        sizes: SizeModel::Uniform { min: 64, max: 200 },
        span_secs: 0.01,
        seed: 5,
        ..SynthConfig::default()
    };
    let mut bytes = Vec::new();
    generate(&cfg, &mut bytes).expect("generate");
    std::fs::write(&path, &bytes).expect("write");
    let shape = RecordShape::of_file(&bytes).expect("a classic pcap");
    let starts = record_starts(&path);
    let shifted = starts[100] + 4;
    let r = shape
        .record_at(&bytes, shifted)
        .expect("the shifted header is plausible");
    assert!(shape.record_at(&bytes, shifted + r.total).is_some());
    let dissector = Dissector::new(false);
    let ok = |data: &[u8]| dissector.dissect(shape.link_type(), data).is_ok();
    assert_eq!(
        shape.first_boundary(&bytes, shifted, bytes.len(), ok),
        Some(starts[101])
    );
    // Without the data test the shifted chain is taken.
    assert_eq!(
        shape.first_boundary(&bytes, shifted, bytes.len(), |_| true),
        Some(shifted)
    );
}

#[test]
fn the_shared_captures_replay_the_same_with_helpers() {
    let Some(dir) = common::shared_traces("the_shared_captures_replay_the_same_with_helpers")
    else {
        return;
    };
    let (mut packets, mut ahead) = (0u64, 0u64);
    for path in common::manifest_paths(&dir) {
        let paths = [path.clone()];
        let (plain_sink, plain, _) = replay_with(&paths, 0, 4096);
        // Small shares, so that most captures have many, and three helpers.
        let (sink, helped, prepared) = replay_with(&paths, 3, 4096);
        assert_eq!(helped, plain, "{}: the summary changed", path.display());
        assert!(
            sink.0 == plain_sink.0,
            "{}: the sink saw other packets",
            path.display()
        );
        let is_plain_pcap = plain["trace"]["files"][0]["format"]
            .as_str()
            .is_some_and(|f| f.starts_with("pcap") && !f.starts_with("pcapng"))
            && plain["trace"]["files"][0]["compression"] == "none";
        if is_plain_pcap {
            packets += plain["trace"]["packets"].as_u64().unwrap_or(0);
            ahead += prepared;
        } else {
            assert_eq!(
                prepared,
                0,
                "{}: only classic pcap files are helped",
                path.display()
            );
        }
    }
    assert!(
        packets > 100_000,
        "the classic pcap captures hold {packets} packets"
    );
    assert!(
        ahead * 100 >= packets * 90,
        "the helpers prepared {ahead} of {packets} packets"
    );
}

#[test]
fn a_synthetic_trace_is_prepared_whole_in_default_shares() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.pcap");
    let bytes = synthetic(&path, 60_000, 9, SizeModel::Realistic, 0);
    assert!(bytes.len() > 4 * flowsieve::ahead::SHARE, "several shares");
    let paths = [path];
    let (plain_sink, plain, _) = replay_with(&paths, 0, flowsieve::ahead::SHARE);
    // 64: more helpers than shares in flight, most of them waiting.
    for helpers in [1, 2, 5, 64] {
        let (sink, helped, prepared) = replay_with(&paths, helpers, flowsieve::ahead::SHARE);
        assert_eq!(helped, plain);
        assert!(sink.0 == plain_sink.0, "{helpers} helpers: other packets");
        assert_eq!(prepared, 60_000, "{helpers} helpers prepared every packet");
    }
}

#[test]
fn a_packet_budget_and_several_files_replay_the_same_with_helpers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let parts = common::three_synthetic_parts(dir.path());
    for max in [None, Some(1), Some(59_999), Some(60_001), Some(130_000)] {
        let run = |helpers| {
            let mut cfg = ReplayConfig::new(Classifier::ports());
            cfg.dissect_threads = helpers;
            cfg.dissect_share = 8192;
            cfg.max_packets = max;
            let mut sink = Everything::default();
            let s = replay_into(&parts, &cfg, &mut NoObserver, &mut sink);
            (sink.0, summary_without_work(&s))
        };
        let (a, b) = (run(0), run(2));
        assert!(a.0 == b.0, "-c {max:?}: other packets");
        assert_eq!(a.1, b.1, "-c {max:?}: another summary");
    }
}

#[test]
fn a_pipeline_report_is_the_same_with_helpers() {
    use flowsieve::pipeline::{FileSource, NoEvents, PipelineConfig, run};
    use flowsieve::replay::NoObserver;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p.pcap");
    synthetic(
        &path,
        40_000,
        3,
        SizeModel::Uniform { min: 64, max: 300 },
        0,
    );
    let report = |helpers: usize| {
        let mut cfg = PipelineConfig::new(Classifier::ports());
        cfg.replay.dissect_threads = helpers;
        cfg.replay.dissect_share = 64 << 10;
        let v = cfg.validate().expect("valid");
        let source = FileSource::new(vec![path.clone()], &v);
        let r = run(source, &v, &mut NoObserver, &mut NoEvents).expect("run");
        // `report_without_timing` sets `dissected_ahead` aside with the
        // timing figures; read it first, so that a run where the helpers
        // did nothing cannot pass.
        (
            r.replay.trace.files[0].dissected_ahead,
            common::report_without_timing(&r),
        )
    };
    let (plain_ahead, plain) = report(0);
    let (helped_ahead, helped) = report(2);
    assert_eq!(plain_ahead, None);
    assert_eq!(
        helped_ahead,
        Some(40_000),
        "the helpers prepared every packet"
    );
    assert_eq!(plain, helped);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any synthetic trace, cut short or overwritten anywhere, in shares of
    /// any size: the same packets to the sink and the same summary, errors
    /// and anomalies included.
    #[test]
    fn damaged_traces_replay_the_same_with_helpers(
        packets in 1u64..3000,
        seed in 0u64..1000,
        snaplen in prop_oneof![Just(0u32), 60u32..200],
        share in 16usize..20_000,
        helpers in 1usize..4,
        damage in prop_oneof![
            Just(None),
            (0.0f64..1.0).prop_map(|at| Some((at, 0usize, 0u8))),
            (0.0f64..1.0, 1usize..64, any::<u8>()).prop_map(|(at, n, b)| Some((at, n, b))),
        ],
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.pcap");
        let mut bytes = synthetic(&path, packets, seed, SizeModel::Uniform { min: 40, max: 400 }, snaplen);
        if let Some((at, n, b)) = damage {
            let at = 24 + ((bytes.len() - 24) as f64 * at) as usize;
            if n == 0 {
                bytes.truncate(at);
            } else {
                let end = (at + n).min(bytes.len());
                bytes[at..end].fill(b);
            }
            std::fs::write(&path, &bytes).expect("write");
        }
        let paths = [path];
        let (plain_sink, plain, _) = replay_with(&paths, 0, share);
        let (sink, helped, prepared) = replay_with(&paths, helpers, share);
        prop_assert_eq!(&helped, &plain);
        prop_assert!(sink.0 == plain_sink.0, "other packets");
        // Undamaged, every record is one the helpers walk (caplen within
        // the wire length, packets that dissect), so every guess must be
        // found and every packet prepared, however small the shares.
        if damage.is_none() {
            prop_assert_eq!(Some(prepared), plain["trace"]["packets"].as_u64());
        }
    }
}

#[test]
fn only_a_record_at_the_same_offset_is_taken() {
    let mut bytes = vec![0u8; 400];
    bytes[..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    let file: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    // Share 0 walked 24, 60, 96 (aligned); share 1 guessed wrong and walked
    // 154 and 190, while the reader's records are 150, 186, 222; share 2,
    // sent before share 0, walked 222.
    let shares: [flowsieve::ahead::testing::HandMadeShare<'_>; 3] = [
        (1, 154, 222, &[154, 190]),
        (2, 222, 400, &[222]),
        (0, 24, 132, &[24, 60, 96]),
    ];
    let (found, hits) =
        flowsieve::ahead::testing::look_up(file, &shares, &[24, 60, 96, 140, 150, 186, 222, 300]);
    assert_eq!(
        found,
        [
            Some(24),
            Some(60),
            Some(96),
            // Between share 0's end and share 1's first guessed record.
            None,
            // A helper's record four bytes on is another record.
            None,
            None,
            // The share that came early is found in its turn.
            Some(222),
            // Past the last record a helper walked.
            None,
        ]
    );
    assert_eq!(hits, 4);
}
