//! The open-addressing table of exact per-flow state (`truth::FlowSlots`):
//! as a map, after any sequence of lookups, insertions and clears it holds
//! exactly what a `HashMap` given the same sequence holds; as a multi-map
//! (the exact table's index), every value added under a hash is found by
//! its predicate. Both with hashes that share their first slot (and so
//! probe past each other), that start in the last slots (and so wrap
//! around), the hash 0 and all ones, across every growth; and at the
//! sizes of a real run, where the slots are on huge pages.

use flowsieve::truth::FlowSlots;
use proptest::prelude::*;
use std::collections::HashMap;

/// One step of a sequence.
#[derive(Clone, Debug)]
enum Op {
    /// `get_or_insert_with(h, || start)` then add 1 to the value.
    Bump(u64, u32),
    /// `get(h)`.
    Get(u64),
    /// `clear()`.
    Clear,
}

/// Hashes drawn so that many share their low bits (the first slot) or are
/// 0 or all ones, beside spread ones.
fn hash() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0u64..64).prop_map(|x| x << 40), // one home slot for up to 2^40 slots
        (0u64..4096).prop_map(|x| x.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        // The last slots of any size: runs that wrap around to slot 0.
        (0u64..64).prop_map(|x| u64::MAX - x),
        Just(0u64),
        Just(u64::MAX),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (hash(), any::<u32>()).prop_map(|(h, v)| Op::Bump(h, v)),
        5 => hash().prop_map(Op::Get),
        1 => Just(Op::Clear),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_map_is_a_hash_map_given_the_same_steps(ops in prop::collection::vec(op(), 0..2500)) {
        let mut slots: FlowSlots<u64> = FlowSlots::default();
        let mut reference: HashMap<u64, u64> = HashMap::new();
        for op in &ops {
            match *op {
                Op::Bump(h, start) => {
                    let (v, inserted) = slots.get_or_insert_with(h, || u64::from(start));
                    let expect_inserted = !reference.contains_key(&h);
                    prop_assert_eq!(inserted, expect_inserted);
                    *v += 1;
                    *reference.entry(h).or_insert(u64::from(start)) += 1;
                }
                Op::Get(h) => prop_assert_eq!(slots.get(h), reference.get(&h)),
                Op::Clear => {
                    slots.clear();
                    reference.clear();
                }
            }
            prop_assert_eq!(slots.len(), reference.len());
        }
        for (h, v) in &reference {
            prop_assert_eq!(slots.get(*h), Some(v));
        }
        prop_assert_eq!(slots.is_empty(), reference.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// As the exact table's index uses it: values added under hashes that
    /// repeat, each then found by its own predicate, whatever was added
    /// after it and however often the table grew.
    #[test]
    fn every_value_added_under_a_hash_is_found(
        hashes in prop::collection::vec(hash(), 0..2000),
        presized in 0usize..64,
    ) {
        let mut t: FlowSlots<usize> = FlowSlots::with_capacity(presized);
        for (i, &h) in hashes.iter().enumerate() {
            t.insert_new(h, i);
            prop_assert_eq!(t.len(), i + 1);
        }
        for (i, &h) in hashes.iter().enumerate() {
            prop_assert_eq!(t.find(h, |&v| v == i), Some(&i));
            // The first value under the hash is the first added under it:
            // growth, in place or not, keeps the values of a hash in the
            // order they were added.
            let first = hashes.iter().position(|&x| x == h);
            prop_assert_eq!(t.get(h).copied(), first);
        }
        prop_assert_eq!(t.find(0x5555, |&v| v == usize::MAX), None);
    }
}

/// Prefetching is only a hint: on an empty map, a full one and for absent
/// hashes it changes nothing and reads nothing it should not.
#[test]
fn prefetch_changes_nothing() {
    let mut m: FlowSlots<u8> = FlowSlots::default();
    m.prefetch(1);
    for h in 0..1000u64 {
        m.prefetch(h << 32);
        m.get_or_insert_with(h << 32, || 1);
    }
    for h in 0..2000u64 {
        m.prefetch(h << 32);
    }
    assert_eq!(m.len(), 1000);
    assert_eq!(m.get(999 << 32), Some(&1));
    assert_eq!(m.get(1000 << 32), None);
}

/// Growth at the sizes of a real run: 600 k spread hashes and 3,000 that
/// share a first slot near the end, inserted one by one, so that the
/// table doubles from 16 slots to 1 M (16 MiB of slots, on huge pages)
/// with runs that wrap around; every value is then found under its hash,
/// and an absent hash is not.
#[test]
fn growth_keeps_every_value_of_a_large_table() {
    let spread = |i: u64| (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let crowded = |i: u64| (i << 40) | 0xffff_ffff_fff0;
    let mut t: FlowSlots<u64> = FlowSlots::default();
    for i in 0..600_000u64 {
        t.insert_new(spread(i), i);
        if i < 3_000 {
            t.insert_new(crowded(i), u64::MAX - i);
        }
    }
    assert_eq!(t.len(), 603_000);
    let lost = (0..600_000u64)
        .filter(|&i| t.find(spread(i), |&v| v == i).is_none())
        .count();
    let lost_crowded = (0..3_000u64)
        .filter(|&i| t.find(crowded(i), |&v| v == u64::MAX - i).is_none())
        .count();
    assert_eq!((lost, lost_crowded), (0, 0), "values lost in growth");
    assert_eq!(t.get(spread(600_000)), None);
}
