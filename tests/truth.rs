//! The exact flow table against a plain ordered map.

use flowsieve::dissect::FlowKey;
use flowsieve::hash::flow_hash;
use flowsieve::ingest::Timestamp;
use flowsieve::truth::{BATCH, BatchedRecorder, FlowTable};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

proptest! {
    #[test]
    fn table_equals_a_naive_model(events in prop::collection::vec((0u8..40, 0u64..1_000_000, 40u32..1600, 0u32..100), 0..600)) {
        let mut t = FlowTable::default();
        // key index -> (packets, wire, captured, first, last, first-packet count)
        let mut model: BTreeMap<u8, (u64, u64, u64, i128, i128)> = BTreeMap::new();
        for (i, ts, wire, cut) in &events {
            let k = FlowKey::v4([10, 0, 0, *i], [10, 0, 1, 1], 1000 + u16::from(*i % 3), 80, 6);
            let cap = wire.saturating_sub(*cut);
            // Seconds on both sides of the epoch: the table keeps a
            // timestamp's seconds and nanoseconds apart.
            let when = Timestamp::new(*ts as i64 / 1000 - 500, (*ts % 1000) as u32 * 1_000_000)
                .expect("below one second");
            let new = t.record(k, flow_hash(&k), 0, when, *wire, cap);
            prop_assert_eq!(new, !model.contains_key(i));
            let e = model.entry(*i).or_insert((0, 0, 0, i128::MAX, i128::MIN));
            e.0 += 1;
            e.1 += u64::from(*wire);
            e.2 += u64::from(cap);
            e.3 = e.3.min(when.as_nanos());
            e.4 = e.4.max(when.as_nanos());
        }
        prop_assert_eq!(t.len(), model.len());
        for (i, m) in &model {
            let k = FlowKey::v4([10, 0, 0, *i], [10, 0, 1, 1], 1000 + u16::from(*i % 3), 80, 6);
            let s = t.get(&k).expect("present");
            prop_assert_eq!((s.packets, s.wire_bytes, s.captured_bytes, s.first_ts.as_nanos(), s.last_ts.as_nanos()), *m);
        }
        // Top flows: by packets then bytes, the same multiset as the model's.
        let top = t.top(5);
        let mut want: Vec<(u64, u64)> = model.values().map(|m| (m.0, m.1)).collect();
        want.sort_by(|a, b| b.cmp(a));
        want.truncate(5);
        let got: Vec<(u64, u64)> = top.iter().map(|e| (e.stats.packets, e.stats.wire_bytes)).collect();
        prop_assert_eq!(got, want);
    }
}

#[test]
fn top_is_deterministic_on_ties() {
    let mut t = FlowTable::default();
    for i in 0..50u8 {
        let k = FlowKey::v4([192, 0, 2, i], [198, 51, 100, 1], 1, 2, 17);
        t.record(k, flow_hash(&k), 0, Timestamp::ZERO, 100, 100);
    }
    let a: Vec<FlowKey> = t.top(10).iter().map(|e| e.key).collect();
    let b: Vec<FlowKey> = t.clone().top(10).iter().map(|e| e.key).collect();
    assert_eq!(a, b);
    assert_eq!(a[0].src().to_string(), "192.0.2.0", "ties broken by key");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    /// Enough flows to make the table grow many times, from empty or from
    /// a size below what it needs: every flow is found, counted once,
    /// iterated once, and `top` equals sorting all flows.
    #[test]
    fn thousands_of_flows_grow_the_table_and_stay_exact(
        seed in any::<u64>(),
        flows in 1usize..30_000,
        presize in any::<bool>(),
    ) {
        let key = |i: usize| {
            let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed;
            FlowKey::v4((x as u32).to_be_bytes(), [198, 51, 100, 7], (x >> 32) as u16, 443, 6)
        };
        let mut t = if presize { FlowTable::with_capacity(flows / 2) } else { FlowTable::default() };
        let mut model: HashMap<FlowKey, u64> = HashMap::new();
        for i in 0..flows + flows / 2 {
            // Flow i % flows, so the first `flows / 2` flows get two packets.
            let k = key(i % flows);
            let new = t.record(k, flow_hash(&k), 0, Timestamp::ZERO, 100, 100);
            let m = model.entry(k).or_insert(0);
            prop_assert_eq!(new, *m == 0);
            *m += 1;
        }
        prop_assert_eq!(t.len(), model.len());
        prop_assert!(!t.is_empty());
        let mut seen: Vec<(FlowKey, u64)> = t.iter().map(|e| (e.key, e.stats.packets)).collect();
        seen.sort_by_key(|s| (s.0.src_bits(), s.0.sport()));
        let mut want: Vec<(FlowKey, u64)> = model.iter().map(|(k, n)| (*k, *n)).collect();
        want.sort_by_key(|s| (s.0.src_bits(), s.0.sport()));
        prop_assert_eq!(seen, want);
        for (k, n) in &model {
            prop_assert_eq!(t.get(k).map(|s| s.packets), Some(*n));
        }
        let top: Vec<u64> = t.top(100).iter().map(|e| e.stats.packets).collect();
        let mut counts: Vec<u64> = model.values().copied().collect();
        counts.sort_by(|a, b| b.cmp(a));
        counts.truncate(100);
        prop_assert_eq!(top, counts);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Recording through a `BatchedRecorder` (held back, a batch at a time,
    /// with explicit flushes at arbitrary points) leaves exactly the table
    /// that recording each packet at once leaves: every flow's statistics,
    /// including the earliest and latest timestamps of a trace that goes
    /// backwards in time, and the top flows in order.
    #[test]
    fn batched_recording_leaves_the_same_table(
        events in prop::collection::vec((0u16..300, 0u64..2_000_000, 40u32..1600, 0u32..100, 0u16..4), 0..(4 * BATCH + 7)),
        flush_at in prop::collection::vec(0usize..(4 * BATCH + 7), 0..4),
    ) {
        let key = |i: u16| FlowKey::v4([10, 0, (i >> 8) as u8, i as u8], [10, 0, 1, 1], 1000 + i % 5, 80, 6);
        let mut direct = FlowTable::default();
        let mut batched = FlowTable::default();
        {
            let mut r = BatchedRecorder::new(&mut batched);
            for (n, (i, ts, wire, cut, class)) in events.iter().enumerate() {
                let k = key(*i);
                let cap = wire.saturating_sub(*cut);
                let when = Timestamp::from_units(*ts, 1000);
                direct.record(k, flow_hash(&k), *class, when, *wire, cap);
                r.record(k, flow_hash(&k), *class, when, *wire, cap);
                if flush_at.contains(&n) {
                    r.flush();
                }
            }
        } // dropped with up to BATCH - 1 packets still held
        prop_assert_eq!(batched.len(), direct.len());
        for e in direct.iter() {
            prop_assert_eq!(batched.get(&e.key), Some(e.stats));
        }
        let top = |t: &FlowTable| t.top(20).iter().map(|e| (e.key, e.stats)).collect::<Vec<_>>();
        prop_assert_eq!(top(&batched), top(&direct));
        // Flows per class: a flow's class is its first packet's. Three
        // counters for four classes: class 3 is not counted.
        let mut first_class: HashMap<u16, u16> = HashMap::new();
        for (i, _, _, _, class) in &events {
            first_class.entry(*i).or_insert(*class);
        }
        let mut want = [0u64; 3];
        for class in first_class.values() {
            if let Some(w) = want.get_mut(usize::from(*class)) {
                *w += 1;
            }
        }
        let mut counts = [0u64; 3];
        batched.count_classes(&mut counts);
        prop_assert_eq!(counts, want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// `top(n)` is the first `n` of the whole ordering, for every `n`, on
    /// a table with many ties in packets and bytes: the selection and the
    /// final sort agree on one total order (packets, bytes, then the key).
    #[test]
    fn top_n_is_the_prefix_of_the_whole_order(
        events in prop::collection::vec((0u16..200, 0u32..3), 1..600),
        n in 0usize..220,
    ) {
        let mut t = FlowTable::default();
        for (i, w) in &events {
            let k = FlowKey::v4([10, 1, (i >> 8) as u8, *i as u8], [10, 0, 1, 1], 7, 80, 17);
            t.record(k, flow_hash(&k), 0, Timestamp::ZERO, 100 + w, 64);
        }
        let all: Vec<FlowKey> = t.top(usize::MAX).iter().map(|e| e.key).collect();
        prop_assert_eq!(all.len(), t.len());
        let some: Vec<FlowKey> = t.top(n).iter().map(|e| e.key).collect();
        prop_assert_eq!(&some[..], &all[..n.min(all.len())]);
        for w in t.top(usize::MAX).windows(2) {
            let (a, b) = (&w[0].stats, &w[1].stats);
            prop_assert!((a.packets, a.wire_bytes) >= (b.packets, b.wire_bytes));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// `iter` yields every flow once, in the order of its first packet,
    /// however often the table grew in between.
    #[test]
    fn iter_is_in_first_packet_order(
        picks in prop::collection::vec(0u32..5_000, 1..3_000),
        presize in any::<bool>(),
    ) {
        let key = |i: u32| FlowKey::v4(i.to_be_bytes(), [203, 0, 113, 9], 53, 53, 17);
        let mut t = if presize { FlowTable::with_capacity(64) } else { FlowTable::default() };
        let mut first_seen: Vec<FlowKey> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for &i in &picks {
            let k = key(i);
            t.record(k, flow_hash(&k), 0, Timestamp::ZERO, 60, 60);
            if seen.insert(i) {
                first_seen.push(k);
            }
        }
        let order: Vec<FlowKey> = t.iter().map(|e| e.key).collect();
        prop_assert_eq!(order, first_seen);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// The flush's shortcut (count into the entry its first pass located by
    /// hash) falls back to the full lookup when that entry is another
    /// flow's: with hashes that collide on purpose (four values for up to
    /// 40 flows), batched recording still leaves, flow for flow and in the
    /// same order, the table that recording each packet at once leaves.
    #[test]
    fn batched_recording_survives_colliding_hashes(
        events in prop::collection::vec((0u8..40, 0u64..1_000, 40u32..1600), 0..(3 * BATCH)),
        flush_at in prop::collection::vec(0usize..(3 * BATCH), 0..3),
    ) {
        let key = |i: u8| FlowKey::v4([10, 9, 8, i], [10, 0, 1, 1], 4000, 80, 6);
        let colliding = |i: u8| u64::from(i % 4).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut direct = FlowTable::default();
        let mut batched = FlowTable::default();
        {
            let mut r = BatchedRecorder::new(&mut batched);
            for (n, (i, ts, wire)) in events.iter().enumerate() {
                let when = Timestamp::from_units(*ts, 1000);
                direct.record(key(*i), colliding(*i), 0, when, *wire, *wire);
                r.record(key(*i), colliding(*i), 0, when, *wire, *wire);
                if flush_at.contains(&n) {
                    r.flush();
                }
            }
        }
        let rows = |t: &FlowTable| t.iter().map(|e| (e.key, e.stats)).collect::<Vec<_>>();
        prop_assert_eq!(rows(&batched), rows(&direct));
        let distinct: std::collections::HashSet<u8> = events.iter().map(|e| e.0).collect();
        prop_assert_eq!(batched.len(), distinct.len());
    }
}

/// A replay's report as JSON, its timing fields set aside.
fn replay_json(
    paths: &[std::path::PathBuf],
    truth_thread: bool,
    max_packets: Option<u64>,
) -> serde_json::Value {
    use flowsieve::class::Classifier;
    use flowsieve::replay::{NoObserver, ReplayConfig, replay};
    let mut cfg = ReplayConfig::new(Classifier::ports());
    cfg.truth_thread = truth_thread;
    cfg.max_packets = max_packets;
    cfg.top = 1000;
    let mut v = serde_json::to_value(replay(paths, &cfg, &mut NoObserver)).expect("serialisable");
    v["trace"]["read_seconds"] = serde_json::Value::Null;
    v["trace"]["packets_per_sec"] = serde_json::Value::Null;
    v
}

/// The exact table recorded on its own thread is the table recorded on
/// the source's: the whole report, timing aside (flows, the top 1000 with
/// their first and last times, per-class flows), for every capture of
/// `../shared/traces` (damaged and compressed ones included), alone and
/// all in one run, and for a synthetic trace of 20 k flows across three
/// files cut short by a packet limit.
#[test]
fn recording_on_its_own_thread_changes_no_figure() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let synthetic = crate::common::three_synthetic_parts(dir.path());
    let whole = replay_json(&synthetic, false, None);
    assert!(
        whole["trace"]["flows"].as_u64().unwrap() > 20_000,
        "three seeds' flows"
    );
    assert_eq!(whole, replay_json(&synthetic, true, None));
    assert_eq!(
        replay_json(&synthetic, false, Some(150_000)),
        replay_json(&synthetic, true, Some(150_000))
    );
    let Some(shared) =
        crate::common::shared_traces("recording_on_its_own_thread_changes_no_figure")
    else {
        return;
    };
    let captures = crate::common::manifest_paths(&shared);
    for c in &captures {
        let one = std::slice::from_ref(c);
        assert_eq!(
            replay_json(one, false, None),
            replay_json(one, true, None),
            "{}",
            c.display()
        );
    }
    assert_eq!(
        replay_json(&captures, false, None),
        replay_json(&captures, true, None)
    );
}

proptest! {
    /// The top list of tables that split the flows between them is the
    /// top list of one table holding them all, whatever the split and
    /// however many ties (few distinct packet and byte counts).
    #[test]
    fn top_of_split_tables_is_the_top_of_the_whole(
        flows in proptest::collection::vec((any::<u16>(), 1u8..4, 0u8..3, 0u8..4), 1..300),
        n in 0usize..40,
    ) {
        use flowsieve::truth::top_of;
        let mut whole = FlowTable::default();
        let mut parts = vec![FlowTable::default(), FlowTable::default(), FlowTable::default(), FlowTable::default()];
        for &(port, packets, size, part) in &flows {
            let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], port, 80, 6);
            if whole.get(&k).is_some() {
                continue; // a flow lives in one part only
            }
            for _ in 0..packets {
                let len = 60 + u32::from(size);
                whole.record(k, flow_hash(&k), 0, Timestamp::ZERO, len, len);
                parts[usize::from(part)].record(k, flow_hash(&k), 0, Timestamp::ZERO, len, len);
            }
        }
        prop_assert_eq!(top_of(&parts, n), whole.top(n));
    }
}

proptest! {
    /// A table's one-pass summary is its flows, its top list and its
    /// flows per class as the separate calls give them; and the merged
    /// summaries of tables that split the flows between them are the
    /// summary of one table holding them all, whatever the split, the
    /// list's length and the classes asked for (some flows' classes past
    /// them, which are not counted).
    #[test]
    fn summaries_of_split_tables_merge_into_the_whole_tables(
        flows in proptest::collection::vec((any::<u16>(), 1u8..4, 0u8..3, 0u8..4, 0u16..6), 1..300),
        n in 0usize..40,
        classes in 0usize..6,
    ) {
        use flowsieve::truth::TableSummary;
        let mut whole = FlowTable::default();
        let mut parts: [FlowTable; 4] = Default::default();
        for &(port, packets, size, part, class) in &flows {
            let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], port, 80, 6);
            if whole.get(&k).is_some() {
                continue; // a flow lives in one part only
            }
            for _ in 0..packets {
                let len = 60 + u32::from(size);
                whole.record(k, flow_hash(&k), class, Timestamp::ZERO, len, len);
                parts[usize::from(part)].record(k, flow_hash(&k), class, Timestamp::ZERO, len, len);
            }
        }
        let s = whole.summary(n, classes);
        let mut by_class = vec![0u64; classes];
        whole.count_classes(&mut by_class);
        prop_assert_eq!(s.flows, whole.len() as u64);
        prop_assert_eq!(&s.top, &whole.top(n));
        prop_assert_eq!(&s.flows_by_class, &by_class);
        let merged = TableSummary::merge(parts.iter().map(|p| p.summary(n, classes)), n);
        prop_assert_eq!(merged, s);
    }
}
