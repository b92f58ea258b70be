//! The prior coordinator's lookahead queue (`pipeline::lookahead`) against
//! a plain double-ended queue: the same records out, in the same order,
//! and the same count of queued queries per class, for any sequence of
//! pushes and pops and any capacity. (tests/pipeline.rs checks that the
//! coordinator's report is the same with the queue and without it.)

use flowsieve::pipeline::lookahead::{SampleLookahead, Sampled};
use proptest::prelude::*;
use std::collections::VecDeque;

/// One step: push a record (a cache record or a query of a class, some
/// out of range), or pop (`None`).
fn step() -> impl Strategy<Value = Option<Sampled>> {
    prop_oneof![
        any::<u64>().prop_map(|h| Some(Sampled::Cache(h))),
        (0usize..5, any::<u64>()).prop_map(|(class, hash)| Some(Sampled::Query { class, hash })),
        Just(None),
    ]
}

/// Queries of `class` in the reference queue.
fn queued(model: &VecDeque<Sampled>, class: usize) -> u64 {
    model
        .iter()
        .filter(|s| matches!(s, Sampled::Query { class: c, .. } if *c == class))
        .count() as u64
}

proptest! {
    #[test]
    fn the_lookahead_is_a_bounded_fifo_that_counts_queries_per_class(
        capacity in 0usize..12,
        steps in proptest::collection::vec(step(), 0..300),
    ) {
        // Four classes: class 4 is out of range, counted as 0.
        let mut q = SampleLookahead::new(capacity, 4);
        let mut model: VecDeque<Sampled> = VecDeque::new();
        prop_assert_eq!(q.capacity(), capacity);
        for s in steps {
            match s {
                None => prop_assert_eq!(q.pop(), model.pop_front()),
                Some(s) => {
                    model.push_back(s);
                    let expected = if model.len() > capacity { model.pop_front() } else { None };
                    prop_assert_eq!(q.push(s), expected);
                }
            }
            prop_assert_eq!(q.is_empty(), model.is_empty());
            for class in 0..4 {
                prop_assert_eq!(q.queued_queries(class), queued(&model, class));
            }
            prop_assert_eq!(q.queued_queries(4), 0);
        }
        // Emptied, oldest first.
        while let Some(s) = model.pop_front() {
            prop_assert_eq!(q.pop(), Some(s));
        }
        prop_assert_eq!(q.pop(), None);
    }
}

/// A capacity of 0 holds nothing: every record comes straight back.
#[test]
fn a_lookahead_of_zero_hands_every_record_straight_back() {
    let mut q = SampleLookahead::new(0, 2);
    let s = Sampled::Query { class: 1, hash: 5 };
    assert_eq!(q.push(s), Some(s));
    assert_eq!(q.queued_queries(1), 0);
    assert!(q.is_empty());
    assert_eq!(q.pop(), None);
}
