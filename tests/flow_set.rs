//! The selective stage's flow-hash set (`pipeline::FlowSet`): after any
//! sequence of insertions, lookups, retains and clears it holds exactly
//! what a `HashMap` given the same sequence holds, with hashes that share
//! their first slot (and so probe past each other), that start in the last
//! slots (and so wrap around), the hash 0 (which an empty slot holds, so it
//! lives beside the arrays) and all ones, across every growth (each an
//! in-place doubling); a retain keeps every kept member findable however
//! the removed ones were interleaved with it; and the arrays never pass the
//! size the stage's memory bound states.

use flowsieve::pipeline::FlowSet;
use proptest::prelude::*;
use std::collections::HashMap;

/// One step of a sequence.
#[derive(Clone, Debug)]
enum Op {
    /// `insert(h, v)`.
    Insert(u64, u16),
    /// `contains(h)`.
    Contains(u64),
    /// `retain` of the members whose hash, mixed, has bit `b` clear.
    Retain(u32),
    /// `clear()`.
    Clear,
}

/// Hashes drawn so that many share their low bits (the first slot) or are
/// 0 or all ones, beside spread ones.
fn hash() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0u64..64).prop_map(|x| x << 40), // one home slot for up to 2^40 slots
        (0u64..64).prop_map(|x| (x << 40) | 0xf), // a second crowded home
        (0u64..4096).prop_map(|x| x.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        // The last slots of any size: runs that wrap around to slot 0,
        // across an in-place doubling too.
        (1u64..64).prop_map(|x| u64::MAX - x),
        Just(0u64),
        Just(u64::MAX),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (hash(), any::<u16>()).prop_map(|(h, v)| Op::Insert(h, v)),
        6 => hash().prop_map(Op::Contains),
        2 => (0u32..64).prop_map(Op::Retain),
        1 => Just(Op::Clear),
    ]
}

/// The retain predicate of [`Op::Retain`]: about half of any hashes.
fn kept(h: u64, bit: u32) -> bool {
    (h.wrapping_mul(0xff51_afd7_ed55_8ccd) >> bit) & 1 == 0
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_set_is_a_hash_map_given_the_same_steps(ops in prop::collection::vec(op(), 0..2500)) {
        let mut set: FlowSet<u16> = FlowSet::default();
        let mut reference: HashMap<u64, u16> = HashMap::new();
        let mut most = 0;
        for op in &ops {
            match *op {
                Op::Insert(h, v) => {
                    let added = set.insert(h, v);
                    prop_assert_eq!(added, !reference.contains_key(&h));
                    reference.entry(h).or_insert(v);
                }
                Op::Contains(h) => prop_assert_eq!(set.contains(h), reference.contains_key(&h)),
                Op::Retain(bit) => {
                    let before = reference.len();
                    reference.retain(|&h, _| kept(h, bit));
                    let removed = set.retain(|h, _| kept(h, bit));
                    prop_assert_eq!(removed, before - reference.len());
                }
                Op::Clear => {
                    set.clear();
                    reference.clear();
                }
            }
            prop_assert_eq!(set.len(), reference.len());
            most = most.max(set.len());
            // The memory kept is what the most members so far needed.
            prop_assert!(set.bytes() <= FlowSet::<u16>::bytes_for(most));
        }
        // Every member is found, with the value of its first insertion,
        // and iteration yields each exactly once.
        for h in reference.keys() {
            prop_assert!(set.contains(*h));
        }
        let mut listed: Vec<(u64, u16)> = set.iter().map(|(h, &v)| (h, v)).collect();
        let mut expected: Vec<(u64, u16)> = reference.iter().map(|(&h, &v)| (h, v)).collect();
        listed.sort_unstable();
        expected.sort_unstable();
        prop_assert_eq!(listed, expected);
        prop_assert_eq!(set.is_empty(), reference.is_empty());
    }
}

/// A retain over a crowded run of slots: members that share a first slot
/// sit one after another, and removing every other one leaves gaps that a
/// naive removal would let end the later members' probes early.
#[test]
fn a_retain_keeps_the_members_behind_the_removed_ones_findable() {
    let mut set: FlowSet<()> = FlowSet::default();
    // 40 hashes with one first slot in any table below 2^40 slots, then 40
    // with the next one, so the two runs interleave after growth.
    let crowded: Vec<u64> = (1..=40u64)
        .map(|x| x << 40)
        .chain((1..=40u64).map(|x| (x << 40) | 1))
        .collect();
    for &h in &crowded {
        assert!(set.insert(h, ()));
    }
    let removed = set.retain(|h, _| (h >> 40) % 2 == 0);
    assert_eq!(removed, 40);
    for &h in &crowded {
        assert_eq!(set.contains(h), (h >> 40) % 2 == 0, "hash {h:#x}");
    }
    // The freed slots are reused, and nothing is lost after a growth.
    for &h in &crowded {
        set.insert(h, ());
    }
    assert_eq!(set.len(), 80);
    assert!(crowded.iter().all(|&h| set.contains(h)));
}

/// The set's arrays reach exactly the size its memory bound states, and
/// no more, when filled to that many members with spread hashes.
#[test]
fn the_arrays_stay_within_the_stated_bytes() {
    for n in [1usize, 12, 13, 1000, 49_152, 49_153, 65_536] {
        let mut set: FlowSet<u16> = FlowSet::default();
        for i in 1..=n as u64 {
            set.insert(i.wrapping_mul(0x9e37_79b9_7f4a_7c15), 1);
        }
        assert_eq!(set.len(), n);
        let bytes = FlowSet::<u16>::bytes_for(n);
        assert_eq!(set.bytes(), bytes, "{n} members");
        // 12 members fit 16 slots at three-quarters, 13 need 32; 49 152
        // fit 2^16, 49 153 need 2^17.
        let slots = bytes / 10;
        let expected = match n {
            1 | 12 => 16,
            13 => 32,
            1000 => 2048,
            49_152 => 1 << 16,
            _ => 1 << 17,
        };
        assert_eq!(slots, expected, "{n} members");
    }
}
