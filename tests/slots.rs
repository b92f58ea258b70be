//! The open-addressing table of exact per-flow state (`truth::FlowSlots`):
//! as a map, after any sequence of lookups, insertions and clears it holds
//! exactly what a `HashMap` given the same sequence holds; as a multi-map
//! (the exact table's index), every value added under a hash is found by
//! its predicate. Both with hashes that share their first slot (and so
//! probe past each other), the hash 0 and all ones, across every growth.

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
            // The first value under the hash is one that was added under it.
            let first = t.get(h).copied();
            prop_assert!(first.is_some_and(|v| hashes.get(v) == Some(&h)));
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
