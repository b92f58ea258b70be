//! The filter module: recycling Bloom filters' policies and guarantees.

use flowsieve::filter::{RecyclePolicy, RecyclingBloomFilter};
use flowsieve::ingest::Timestamp;
use flowsieve::model::recycling::Hashing;
use rand::{Rng, SeedableRng};

fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

#[test]
fn no_false_negatives_before_the_first_recycle() {
    for (hashing, two_phase) in [(Hashing::Colliding, false), (Hashing::NonColliding, true)] {
        let mut f = RecyclingBloomFilter::new(
            50_000,
            4,
            RecyclePolicy::Sigma(20_000),
            hashing,
            false,
            two_phase,
        );
        let mut r = rng(1);
        let keys: Vec<u64> = (0..3000).map(|_| r.random()).collect();
        for &k in &keys {
            f.test_and_insert(k);
        }
        assert_eq!(f.stats().recycles, 0);
        for &k in &keys {
            assert!(
                !f.test_and_insert(k),
                "a key inserted before any recycle is always seen"
            );
        }
    }
}

#[test]
fn sigma_bound_is_never_exceeded_and_recycles_are_counted() {
    let mut f = RecyclingBloomFilter::new(
        4096,
        3,
        RecyclePolicy::Sigma(1000),
        Hashing::Colliding,
        true,
        false,
    );
    let mut r = rng(2);
    let mut max_bits = 0;
    for _ in 0..20_000 {
        f.test_and_insert(r.random());
        max_bits = max_bits.max(f.active_bits());
    }
    assert!(max_bits <= 1000);
    assert!(f.stats().recycles > 10);
    assert_eq!(
        f.stats().dropped_triggers,
        0,
        "retaining keeps every trigger"
    );
    let s = f.stats();
    assert_eq!(s.new_messages + s.seen_messages, 20_000);
}

#[test]
fn non_retaining_drops_the_trigger_and_retaining_keeps_it() {
    for retaining in [false, true] {
        let mut f = RecyclingBloomFilter::new(
            1000,
            4,
            RecyclePolicy::Sigma(100),
            Hashing::NonColliding,
            retaining,
            false,
        );
        let mut r = rng(3);
        let mut trigger = None;
        for _ in 0..1000 {
            let key = r.random();
            let before = f.stats().recycles;
            f.test_and_insert(key);
            if f.stats().recycles > before {
                trigger = Some(key);
                break;
            }
        }
        let key = trigger.expect("a recycle within 1000 messages");
        assert_eq!(f.active_bits(), if retaining { 4 } else { 0 });
        assert_eq!(!f.test_and_insert(key), retaining, "retaining={retaining}");
    }
}

#[test]
fn insertion_bound_recycles_after_n_bit_setting_messages() {
    let mut f = RecyclingBloomFilter::new(
        100_000,
        3,
        RecyclePolicy::Insertions(500),
        Hashing::Colliding,
        false,
        false,
    );
    let mut r = rng(4);
    for _ in 0..1_500 {
        f.test_and_insert(r.random());
    }
    assert_eq!((f.stats().recycles, f.active_bits()), (3, 0));
    // Repeats set no bits and do not count towards N.
    let k = r.random();
    assert!(f.test_and_insert(k));
    for _ in 0..1000 {
        assert!(!f.test_and_insert(k));
    }
    assert_eq!((f.stats().recycles, f.active_bits()), (3, 3));
    for _ in 0..499 {
        f.test_and_insert(r.random());
    }
    assert_eq!(f.stats().recycles, 4);
}

#[test]
fn time_bound_recycles_on_trace_time() {
    let mut f = RecyclingBloomFilter::new(
        10_000,
        3,
        RecyclePolicy::Time(1_000_000_000),
        Hashing::Colliding,
        false,
        false,
    );
    let at = |s: u64| Timestamp::from_units(s, 10);
    assert!(f.test_and_insert_at(7, at(0)));
    assert!(!f.test_and_insert_at(7, at(9))); // 0.9 s later: same cycle
    assert!(f.test_and_insert_at(7, at(10))); // 1.0 s: recycled, new again
    assert_eq!(f.stats().recycles, 1);
}

#[test]
fn two_phase_remembers_across_one_swap_and_forgets_after_two() {
    let mut f = RecyclingBloomFilter::new(
        2000,
        3,
        RecyclePolicy::Insertions(100),
        Hashing::NonColliding,
        false,
        true,
    );
    let mut r = rng(5);
    let early: Vec<u64> = (0..100).map(|_| r.random()).collect();
    for &k in &early {
        f.test_and_insert(k);
    }
    assert_eq!(f.stats().recycles, 1);
    // After one swap the early keys are in the frozen half: still seen...
    let seen = early.iter().filter(|&&k| !f.test_and_insert(k)).count();
    assert_eq!(seen, 100);
    // ...and that refreshed them into the active half (004 §II-C), which
    // counted as insertions and filled it: another swap, still seen.
    assert_eq!(f.stats().recycles, 2);
    assert_eq!(
        early.iter().filter(|&&k| !f.test_and_insert(k)).count(),
        100
    );
    // A one-phase filter forgets them at the first recycle.
    let mut one = RecyclingBloomFilter::new(
        2000,
        3,
        RecyclePolicy::Insertions(100),
        Hashing::NonColliding,
        false,
        false,
    );
    for &k in &early {
        one.test_and_insert(k);
    }
    assert!(early.iter().filter(|&&k| one.test_and_insert(k)).count() > 95);
}

#[test]
fn two_phase_with_one_hash_does_not_deadlock() {
    // Regression: skipping messages only the frozen half knew let the active
    // half fill the frozen half's complement; with k = 1 and sigma >= m/2
    // every message then matched one half and the filter never recycled.
    let mut f = RecyclingBloomFilter::new(
        1000,
        1,
        RecyclePolicy::Sigma(600),
        Hashing::Colliding,
        false,
        true,
    );
    let mut r = rng(6);
    for _ in 0..200_000 {
        f.test_and_insert(r.random());
    }
    assert!(f.stats().recycles > 150, "{:?}", f.stats());
}
