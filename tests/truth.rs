//! The exact flow table against a plain ordered map.

use flowsieve::dissect::FlowKey;
use flowsieve::hash::flow_hash;
use flowsieve::ingest::Timestamp;
use flowsieve::truth::FlowTable;
use proptest::prelude::*;
use std::collections::BTreeMap;

proptest! {
    #[test]
    fn table_equals_a_naive_model(events in prop::collection::vec((0u8..40, 0u64..1_000_000, 40u32..1600, 0u32..100), 0..600)) {
        let mut t = FlowTable::default();
        // key index -> (packets, wire, captured, first, last, first-packet count)
        let mut model: BTreeMap<u8, (u64, u64, u64, i128, i128)> = BTreeMap::new();
        for (i, ts, wire, cut) in &events {
            let k = FlowKey::v4([10, 0, 0, *i], [10, 0, 1, 1], 1000 + u16::from(*i % 3), 80, 6);
            let cap = wire.saturating_sub(*cut);
            let when = Timestamp::from_units(*ts, 1000);
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
