//! The selective stage's capped flow sets (`pipeline::CappedFlowSet`): the
//! set is exactly the admitted sample of what was inserted, never larger
//! than its cap; below the cap a report does not change at all; above it
//! (a flood of one-packet flows) every packet is either queried or counted
//! as shed, and the report says the window was flooded.

use crate::common;
use flowsieve::class::Classifier;
use flowsieve::pipeline::{
    Admission, CappedFlowSet, FileSource, NoEvents, PipelineConfig, QueryUnit, StageList,
    StageName, WindowSpec, admitted_at, run,
};
use flowsieve::replay::NoObserver;
use flowsieve::report::PipelineReport;
use flowsieve::synth::{SynthConfig, generate};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// After any sequence of insertions the set holds exactly the distinct
    /// inserted hashes admitted at its final level, at most `cap` of them,
    /// and every insertion's answer agrees with that.
    #[test]
    fn the_set_is_the_admitted_sample_of_what_was_inserted(
        cap in 1usize..300,
        keys in prop::collection::vec(0u64..2000, 0..3000),
    ) {
        let mut s: CappedFlowSet<u64> = CappedFlowSet::new(cap);
        let mut inserted = BTreeSet::new();
        for &k in &keys {
            // Spread the small keys over the hash space.
            let h = k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xabcdef;
            let was_member = s.contains(h);
            let a = s.insert(h, k);
            inserted.insert(h);
            match a {
                Admission::Present => prop_assert!(was_member),
                Admission::Inserted => prop_assert!(!was_member && s.contains(h)),
                Admission::Shed => prop_assert!(!s.contains(h) && !s.admits(h)),
            }
            prop_assert!(s.len() <= cap);
        }
        let level = s.level();
        let expected: BTreeSet<u64> = inserted
            .iter()
            .copied()
            .filter(|&h| admitted_at(h, level))
            .collect();
        let got: BTreeSet<u64> = s.iter().map(|(h, _)| h).collect();
        prop_assert_eq!(&got, &expected);
        // The level is the least that fits: one lower would not have.
        if level > 0 {
            let below = inserted.iter().filter(|&&h| admitted_at(h, level - 1)).count();
            prop_assert!(below >= cap, "level {} was not needed ({} <= cap {})", level, below, cap);
        }
        s.clear();
        prop_assert_eq!(s.level(), 0);
        prop_assert!(s.is_empty());
    }
}

#[test]
fn sampling_keeps_about_two_to_the_minus_level() {
    // 2^20 distinct hashes into a cap of 4096: the level settles where the
    // sample fits, and the kept count is near 2^20 / 2^level.
    let mut s: CappedFlowSet<()> = CappedFlowSet::new(4096);
    let n = 1u64 << 20;
    for i in 0..n {
        s.insert(i.wrapping_mul(0x9e37_79b9_7f4a_7c15), ());
    }
    let expected = n as f64 / f64::from(1u32 << s.level());
    let sd = (expected * (1.0 - 0.5f64.powi(s.level() as i32))).sqrt();
    assert!(
        (s.len() as f64 - expected).abs() < 4.0 * sd,
        "kept {} at level {}, expected {expected:.0} ± {sd:.0}",
        s.len(),
        s.level()
    );
}

fn trace(dir: &Path, flows: u64, packets: u64, seed: u64) -> PathBuf {
    let path = dir.join(format!("t-{flows}-{packets}-{seed}.pcap"));
    let cfg = SynthConfig {
        flows,
        packets,
        seed,
        snaplen: 64,
        span_secs: 2.0,
        ..SynthConfig::default()
    };
    generate(&cfg, std::fs::File::create(&path).unwrap()).unwrap();
    path
}

fn selective_only(max_flows: usize, unit: QueryUnit, truth: bool) -> PipelineConfig {
    let mut cfg = PipelineConfig::new(Classifier::ports());
    let mut l = StageList::none();
    l.set(StageName::Selective, true);
    cfg.stages = l;
    cfg.threads = 2;
    cfg.replay.truth = truth;
    cfg.selective.max_flows = max_flows;
    cfg.selective.query_unit = unit;
    cfg.selective.cache_window = WindowSpec::Packets(20_000);
    cfg.selective.query_window = WindowSpec::Packets(60_000);
    cfg
}

fn run_cfg(path: &Path, cfg: &PipelineConfig) -> PipelineReport {
    let v = cfg.validate().unwrap();
    let source = FileSource::new(vec![path.to_path_buf()], &v);
    run(source, &v, &mut NoObserver, &mut NoEvents).unwrap()
}

fn json(r: &PipelineReport) -> serde_json::Value {
    let mut v = common::report_without_timing(r);
    v["selective"]["flood"]["cap_flows_per_shard"] = serde_json::Value::Null;
    v
}

#[test]
fn below_the_cap_no_figure_changes() {
    let dir = tempfile::tempdir().unwrap();
    let zipf = trace(dir.path(), 5_000, 200_000, 3);
    for t in [
        zipf,
        Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/default.pcap"),
    ] {
        for unit in [QueryUnit::Flow, QueryUnit::Packet] {
            let small = run_cfg(&t, &selective_only(1 << 16, unit, true));
            let huge = run_cfg(&t, &selective_only(1 << 24, unit, true));
            assert_eq!(json(&small), json(&huge), "{}", t.display());
            let s = small.selective().unwrap();
            assert_eq!(s.flood.shard_rounds, 0);
            assert_eq!(s.flood.lowest_sample_rate, 1.0);
        }
    }
}

#[test]
fn a_flood_is_sampled_accounted_for_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    // Every packet its own flow: 20 000 distinct flows per cache window,
    // against a cap of 2 048 over 8 shards (256 each).
    let flood = trace(dir.path(), 300_000, 300_000, 5);
    for truth in [true, false] {
        let all = run_cfg(&flood, &selective_only(1 << 24, QueryUnit::Packet, truth));
        let capped = run_cfg(&flood, &selective_only(2048, QueryUnit::Packet, truth));
        let (a, c) = (all.selective().unwrap(), capped.selective().unwrap());
        let queries = |r: &flowsieve::report::SelectiveReport| r.variants[0].overall.queries;
        // Every query-window packet is a query, or counted as shed.
        assert_eq!(queries(c) + c.flood.query_packets_shed, queries(a));
        assert!(c.flood.query_packets_shed > queries(c), "mostly shed");
        // Every cache-window packet is in S or was shed (one packet per
        // flow, so packets = flows), and S never passed the cap.
        assert_eq!(
            c.set_elements + c.flood.cache_packets_shed + c.flood.flows_evicted,
            a.set_elements
        );
        assert!(c.set_elements <= 256 * c.directories_built);
        assert!(c.flood.shard_rounds > 0);
        assert!(c.flood.lowest_sample_rate <= 1.0 / 16.0);
        assert!(
            c.notes.iter().any(|n| n.to_string().starts_with("flooded")),
            "{:?}",
            c.notes
        );
        // The sample is still a fair one: the plain directory's measured
        // false-positive rate is within 4 standard errors of the model
        // (001) it has uncapped.
        let p = &c.variants[0].overall;
        let non_members = (p.queries - p.members) as f64;
        let model = c.directory_fpr;
        let se = (model * (1.0 - model) / non_members).sqrt();
        assert!(
            (p.fp_rate - model).abs() < 4.0 * se + 1e-9,
            "fp {} against model {model} ± {se}",
            p.fp_rate
        );
    }
}
