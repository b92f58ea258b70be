//! Model checking of the lock-free counting filter
//! (`filter::AtomicCountingBloomFilter`) with loom: every interleaving of
//! the threads below is explored, on loom's model of relaxed atomics.
//!
//! ```sh
//! cargo test --profile test-release --test loom
//! ```
//!
//! The filter's source file is compiled here a second time, as a module
//! of this crate, beside a `sync` module that gives it loom's `Arc` and
//! atomics where the library's gives std's (`src/filter/mod.rs`). So the
//! model checker runs the very code the library ships, inside the normal
//! test build; the usual `--cfg loom` would instead rebuild every crate
//! of the graph for it. (The stress tests in tests/filter.rs run the same
//! properties on real threads, on the library's own copy.)

use flowsieve::filter::{CounterWidth, Counters};
use loom::sync::Arc;
use loom::thread;

/// What `atomic_counting.rs` takes from `crate::hash`.
mod hash {
    pub use flowsieve::hash::PartitionedIndexer;
}

/// What `atomic_counting.rs` takes from its parent's `sync`: loom's types.
mod sync {
    pub use loom::sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    };
}

// The tests below use part of the filter's API; the rest is the library's.
#[allow(dead_code)]
#[path = "../src/filter/atomic_counting.rs"]
mod atomic_counting;

use atomic_counting::AtomicCountingBloomFilter;

/// A filter small enough for loom: 2 hash functions, 4-bit counters.
fn filter() -> AtomicCountingBloomFilter {
    AtomicCountingBloomFilter::new(16, 2, CounterWidth::W4)
}

const KEY: u64 = 0x9e37_79b9_7f4a_7c15;
/// A second key sharing words with the first (16 4-bit counters fit in
/// one 64-bit word), so the two writers contend on the same CAS.
const OTHER: u64 = 0x0123_4567_89ab_cdef;

/// Two writers incrementing the same key: no increment is lost. What each
/// insert *returns* is another matter, and loom shows it: the estimate is
/// the minimum over the `k` counters of the values this insert wrote, and
/// when the two inserts interleave counter by counter (A raises the first
/// counter to 1, B to 2; B raises the second to 1, A to 2) both return 1.
/// A threshold crossing judged from the returned value can then be missed
/// by both writers, which is why the pipeline gives every shard its own
/// filter (one writer) and the module documents it.
#[test]
fn two_writers_lose_no_increment() {
    static BOTH_SAW_ONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    loom::model(|| {
        let f = Arc::new(filter());
        let g = f.clone();
        let t = thread::spawn(move || g.insert(KEY));
        let mine = f.insert(KEY);
        let theirs = t.join().unwrap();
        assert!((1..=2).contains(&mine) && (1..=2).contains(&theirs));
        if mine == 1 && theirs == 1 {
            BOTH_SAW_ONE.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        // Whatever they returned, the filter holds both increments.
        assert_eq!(f.estimate(KEY), 2);
    });
    assert!(
        BOTH_SAW_ONE.load(std::sync::atomic::Ordering::Relaxed),
        "the interleaving in which both inserts return 1 exists"
    );
}

/// Two writers at the edge of saturation (the counter at max - 1): the
/// counter stops exactly at its maximum whatever the interleaving, and
/// exactly one of the writers is the one that reached it.
#[test]
fn compare_and_swap_saturates_exactly_with_two_writers() {
    loom::model(|| {
        let f = Arc::new(filter());
        let max = CounterWidth::W4.max();
        for _ in 0..max - 1 {
            f.insert(KEY);
        }
        let g = f.clone();
        let t = thread::spawn(move || (g.insert(KEY), g.insert(OTHER)));
        let mine = f.insert(KEY);
        let (theirs, _) = t.join().unwrap();
        assert_eq!(mine, max);
        assert_eq!(theirs, max);
        assert_eq!(f.estimate(KEY), max, "never past the maximum");
        // The other key's counters moved by exactly one where they are
        // not shared with KEY.
        assert!(f.estimate(OTHER) >= 1);
    });
}

/// The single writer and a reader: the reader never sees a torn or
/// decreasing counter, only a value between 0 and what was written.
#[test]
fn a_reader_of_the_single_writer_sees_whole_monotone_counts() {
    loom::model(|| {
        let (mut w, r) = AtomicCountingBloomFilter::single_writer(16, 2, CounterWidth::W4);
        let t = thread::spawn(move || {
            let first = r.estimate(KEY);
            let second = r.estimate(KEY);
            (first, second)
        });
        w.insert(KEY);
        w.insert(KEY);
        let (first, second) = t.join().unwrap();
        assert!(first <= 2 && second <= 2, "{first} {second}");
        assert!(
            second >= first,
            "a count went backwards: {first} then {second}"
        );
        assert_eq!(w.reader().estimate(KEY), 2);
    });
}
