//! The filter module: recycling Bloom filters' policies and guarantees.

use flowsieve::filter::{Counters, RecyclePolicy, RecyclingBloomFilter};
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

// ---------- Bloom and counting Bloom filters ----------

use flowsieve::filter::{
    AtomicCountingBloomFilter, BloomFilter, CounterWidth, CountingBloomFilter,
};
use flowsieve::model::{bloom, threshold};
use proptest::prelude::*;
use std::collections::HashMap;

/// Measured rate and its standard error over `queries` fresh hashes.
fn rate(queries: usize, mut positive: impl FnMut(u64) -> bool, seed: u64) -> (f64, f64) {
    let mut r = rng(seed);
    let hits = (0..queries).filter(|_| positive(r.random())).count() as f64;
    let p = hits / queries as f64;
    (
        p,
        (p * (1.0 - p) / queries as f64)
            .sqrt()
            .max(1.0 / queries as f64),
    )
}

#[test]
fn bloom_false_positive_rate_matches_the_partitioned_model() {
    for (m, n, k) in [
        (1usize << 16, 6000usize, 7usize),
        (1 << 12, 500, 3),
        (100_000, 20_000, 4),
    ] {
        let mut f = BloomFilter::new(m, k);
        let mut r = rng(7);
        let keys: Vec<u64> = (0..n).map(|_| r.random()).collect();
        for &h in &keys {
            f.insert(h);
        }
        assert!(keys.iter().all(|&h| f.contains(h)), "no false negatives");
        let (p, se) = rate(300_000, |h| f.contains(h), 8);
        let model = bloom::fpr_partitioned(f.m() as u64, n as u64, k as u32);
        assert!(
            (p - model).abs() < 3.0 * se,
            "m={m} n={n} k={k}: measured {p:.5} +- {se:.5}, model {model:.5}"
        );
    }
}

#[test]
fn bloom_sizing_union_and_batches() {
    let mut f = BloomFilter::with_capacity(10_000, 0.01);
    let mut r = rng(9);
    let keys: Vec<u64> = (0..10_000).map(|_| r.random()).collect();
    f.insert_batch(&keys);
    let (p, se) = rate(200_000, |h| f.contains(h), 10);
    assert!((p - 0.01).abs() < 3.0 * se + 0.001, "sized for 1%: {p}");
    let mut out = vec![false; keys.len()];
    f.contains_batch(&keys, &mut out);
    assert!(out.iter().all(|&b| b));
    // Batch and single insertion build the same filter.
    let mut g = BloomFilter::with_capacity(10_000, 0.01);
    for &h in &keys {
        g.insert(h);
    }
    assert_eq!(f, g);
    // Union: every element of either set, and exactly the OR of the bits.
    let (mut a, mut b, mut both) = (
        BloomFilter::new(4096, 4),
        BloomFilter::new(4096, 4),
        BloomFilter::new(4096, 4),
    );
    for &h in &keys[..300] {
        a.insert(h);
        both.insert(h);
    }
    for &h in &keys[300..600] {
        b.insert(h);
        both.insert(h);
    }
    a.union(&b).unwrap();
    assert_eq!(a, both);
    assert!(a.union(&BloomFilter::new(4096, 3)).is_err());
    assert!((a.fill_ratio() - a.count_ones() as f64 / a.m() as f64).abs() < 1e-15);
}

#[test]
fn count_threshold_false_positives_match_003() {
    // n distinct elements inserted once each; a non-member passes the
    // theta threshold with the partitioned binomial rate (003 eq. 2).
    for (theta, per) in [(2u64, 4usize), (3, 4), (2, 8)] {
        let n = 20_000usize;
        let k = threshold::k_opt(theta, per as f64) as usize;
        let mut f = CountingBloomFilter::new(n * per, k, CounterWidth::W8);
        let mut r = rng(11);
        for _ in 0..n {
            f.insert(r.random());
        }
        let (p, se) = rate(400_000, |h| f.count_at_least(h, theta), 12);
        let model = threshold::fpr_binomial_partitioned(theta, k as u32, n as u64, f.m() as u64);
        assert!(
            (p - model).abs() < 3.0 * se,
            "theta={theta} m/n={per} k={k}: {p:.6} +- {se:.6} vs {model:.6}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn saturation_never_causes_a_false_negative(ops in prop::collection::vec((0u64..40, any::<bool>()), 1..2000)) {
        // A tiny 4-bit filter so counters saturate; deletes only of present
        // elements. The estimate is never below min(true count, 15).
        let mut f = CountingBloomFilter::new(64, 3, CounterWidth::W4);
        let mut truth: HashMap<u64, u64> = HashMap::new();
        for (key, insert) in ops {
            let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let c = truth.entry(h).or_insert(0);
            if insert || *c == 0 {
                f.insert(h);
                *c += 1;
            } else {
                prop_assert!(f.delete(h));
                *c -= 1;
            }
            for (&x, &n) in &truth {
                prop_assert!(f.estimate(x) >= n.min(15), "estimate {} < true count {}", f.estimate(x), n);
            }
        }
    }

    #[test]
    fn conservative_update_stays_an_upper_bound_below_the_plain_estimate(keys in prop::collection::vec(0u64..200, 1..3000)) {
        let mut plain = CountingBloomFilter::new(512, 4, CounterWidth::W16);
        let mut cons = CountingBloomFilter::new(512, 4, CounterWidth::W16).conservative();
        let mut truth: HashMap<u64, u64> = HashMap::new();
        for k in keys {
            let h = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
            plain.insert(h);
            cons.insert(h);
            *truth.entry(h).or_insert(0) += 1;
        }
        for (&h, &n) in &truth {
            prop_assert!(cons.estimate(h) >= n);
            prop_assert!(cons.estimate(h) <= plain.estimate(h));
        }
    }
}

#[test]
fn counting_delete_union_and_widths() {
    for width in [CounterWidth::W4, CounterWidth::W8, CounterWidth::W16] {
        let mut f = CountingBloomFilter::new(1000, 4, width);
        assert!(!f.delete(5), "deleting an absent hash is refused");
        for _ in 0..3 {
            f.insert(5);
        }
        assert_eq!(f.estimate(5), 3);
        assert!(f.delete(5));
        assert_eq!(f.estimate(5), 2);
        // Saturation at 2^w - 1, sticky under delete.
        let mut g = CountingBloomFilter::new(1000, 4, width);
        let max = width.max();
        for _ in 0..(max + 10).min(70_000) {
            g.insert(9);
        }
        assert_eq!(g.estimate(9), max.min(70_000));
        if max < 70_000 {
            g.delete(9);
            assert_eq!(g.estimate(9), max);
            assert_eq!(g.saturated_counters(), 4);
        }
        // Union is a saturating counter-wise sum.
        let mut a = CountingBloomFilter::new(1000, 4, width);
        let mut b = CountingBloomFilter::new(1000, 4, width);
        for _ in 0..10 {
            a.insert(1);
            b.insert(1);
        }
        a.union(&b).unwrap();
        assert_eq!(a.estimate(1), 20u64.min(max));
    }
    assert!(
        CountingBloomFilter::new(100, 2, CounterWidth::W4)
            .union(&CountingBloomFilter::new(100, 2, CounterWidth::W8))
            .is_err()
    );
}

/// The plain insert's three cases, at every width: a counter below
/// `max - 1` steps up, the step to `max` counts one saturation event, and a
/// saturated counter stays where it is. One key into a fresh filter, so
/// its `k` counters move together: insert `j` returns `min(j, max)`, and
/// the events are 0 before insert `max` and `k` from then on.
#[test]
fn plain_insert_steps_saturates_once_and_stays() {
    for width in [CounterWidth::W4, CounterWidth::W8, CounterWidth::W16] {
        let k = 5;
        let mut f = CountingBloomFilter::new(1000, k, width);
        let max = width.max();
        for j in 1..=max + 3 {
            assert_eq!(f.insert(77), j.min(max), "insert {j} at {width:?}");
            let events = if j >= max { k as u64 } else { 0 };
            assert_eq!(f.saturation_events(), events, "insert {j} at {width:?}");
        }
        assert_eq!(f.counters(77), vec![max; k]);
    }
}

#[test]
fn many_writers_lose_no_increment_and_saturate_exactly() {
    // 4 threads hammer a small 4-bit filter (heavy contention, saturation),
    // then a 16-bit one (exact sums); the final counters equal a sequential
    // replay of the same inserts.
    let per_thread: Vec<Vec<u64>> = (0..4)
        .map(|t| {
            let mut r = rng(100 + t);
            (0..50_000)
                .map(|_| (r.random::<u64>() % 300).wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect()
        })
        .collect();
    for (m, k, width) in [(256, 3, CounterWidth::W4), (4096, 4, CounterWidth::W16)] {
        let f = AtomicCountingBloomFilter::new(m, k, width);
        std::thread::scope(|s| {
            for keys in &per_thread {
                let f = &f;
                s.spawn(move || {
                    for &h in keys {
                        f.insert(h);
                    }
                });
            }
        });
        let mut seq = CountingBloomFilter::new(m, k, width);
        for &h in per_thread.iter().flatten() {
            seq.insert(h);
        }
        for i in 0..seq.m() {
            assert_eq!(f.counter(i), seq.counter(i), "{width:?} counter {i}");
        }
    }
}

#[test]
fn single_writer_with_concurrent_readers() {
    let (mut writer, reader) = AtomicCountingBloomFilter::single_writer(1024, 3, CounterWidth::W8);
    let key = 0x1234_5678_u64;
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..2 {
            let reader = reader.clone();
            let done = &done;
            s.spawn(move || {
                // Counters only grow: a reader never sees an estimate fall.
                let mut last = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let e = reader.estimate(key);
                    assert!(e >= last && e <= 255, "{e} after {last}");
                    last = e;
                }
            });
        }
        let mut r = rng(12);
        for i in 0..200_000u32 {
            writer.insert(if i % 1000 == 0 { key } else { r.random() });
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(reader.estimate(key) >= 200);
}

// ---------- selective filters and priors (000) ----------

use flowsieve::filter::{
    PriorSampler, RoundPriors, SelectiveBloomFilter, SelectiveCountingFilter, Selectivity,
};
use flowsieve::hash::fmix64;
use flowsieve::model::paradox::{self, ElementClass, SelectiveVariant};

/// Element `j` of class `i` as a hash; the first 256 of each class are the
/// members (000 §VIII-A: 13 classes of 256 members in 2^11 .. 2^23).
fn element(i: u32, j: u64) -> u64 {
    fmix64((u64::from(i) << 40) ^ j ^ 0x00c0_ffee)
}

#[test]
fn selective_query_simulation_matches_the_model_and_table_ii() {
    let (bpe, alpha, n) = (4usize, 100.0, 3328usize);
    let k = bloom::optimal_k(bpe as f64) as usize;
    let priors: Vec<f64> = (1..=13)
        .map(|i| 256.0 / f64::from(1u32 << (10 + i)))
        .collect();
    let mut results = Vec::new();
    for sel in [Selectivity::None, Selectivity::Query] {
        let mut f = SelectiveBloomFilter::new(n * bpe, k, n, alpha, sel);
        for i in 1..=13u32 {
            for j in 0..256 {
                f.insert(element(i, j), priors[i as usize - 1]);
            }
        }
        let (mut fp, mut fneg) = (0u64, 0u64);
        for i in 1..=13u32 {
            for j in 0..(1u64 << (10 + i)) {
                let positive = f.query(element(i, j), priors[i as usize - 1]);
                if j < 256 && !positive {
                    fneg += 1;
                } else if j >= 256 && positive {
                    fp += 1;
                }
            }
        }
        results.push((fp as f64, fneg as f64, fp as f64 + alpha * fneg as f64));
    }
    let classes: Vec<ElementClass> = (1..=13)
        .map(|i| ElementClass {
            members: 256.0,
            universe: f64::from(1u32 << (10 + i)),
        })
        .collect();
    for ((fp, fneg, cost), variant) in results
        .iter()
        .zip([SelectiveVariant::Plain, SelectiveVariant::Query])
    {
        let (mfp, mfneg, mcost) =
            paradox::selective_bloom_cost(&classes, (n * bpe) as f64, k as u32, alpha, variant);
        assert_eq!(*fneg, mfneg, "{variant:?}: whole classes are skipped");
        assert!(
            (fp - mfp).abs() < 4.0 * mfp.sqrt() + 0.02 * mfp,
            "{variant:?}: {fp} false positives, model {mfp:.0}"
        );
        assert!(
            (cost - mcost).abs() / mcost < 0.03,
            "{variant:?}: cost {cost} vs model {mcost}"
        );
    }
    // 000 Table II (alpha = 100, bpe = 4): plain 2.46e6, selective query 1.90e5, fnr 0.462.
    assert!((results[0].2 - 2.46e6).abs() / 2.46e6 < 0.03);
    assert!((results[1].2 - 1.90e5).abs() / 1.90e5 < 0.05);
    assert!((results[1].1 / n as f64 - 0.462).abs() < 0.001);
}

#[test]
fn sampled_priors_converge_to_the_class_priors() {
    // Five classes, 1% of queries checked (the sampler's floor, reached once
    // a class has 100 times more queries than the 80 samples aimed for), the
    // rounds pooled with weight 1.
    let true_priors = [0.5, 0.25, 0.1, 0.02, 0.0];
    let mut sampler = PriorSampler::new(5, 0.01, 80);
    let mut pooled = RoundPriors::new(5, 1.0);
    let mut r = rng(20);
    let mut checked = [0u64; 5];
    for round in 0..10 {
        let mut queries = [0u64; 5];
        for _ in 0..40_000 {
            let class = r.random_range(0..5usize);
            let member = r.random::<f64>() < true_priors[class];
            queries[class] += 1;
            if sampler.sampled(class, r.random()) {
                pooled.record(class, member);
                if round > 0 {
                    checked[class] += 1;
                }
            }
        }
        pooled.end_round();
        sampler.plan(&queries);
    }
    for (c, &p) in true_priors.iter().enumerate() {
        // Rounds 1..9 at 1% of ~8,000 queries each.
        assert!(
            (640..=800).contains(&checked[c]),
            "class {c}: {} samples of ~720",
            checked[c]
        );
        let e = pooled.estimate(c).unwrap();
        assert!(
            (e.prior - p).abs() <= 3.0 * e.se + 1e-3,
            "class {c}: {} +- {} vs {p}",
            e.prior,
            e.se
        );
    }
    // A class never sampled has no estimate (the stage then uses its
    // default), and one member in 1,000 reads (1 + 1/2) / 1001.
    let mut fresh = RoundPriors::new(2, 0.8);
    assert!(fresh.estimate(1).is_none());
    for i in 0..1000 {
        fresh.record(0, i == 0);
    }
    fresh.end_round();
    assert!((fresh.estimate(0).unwrap().prior - 1.5 / 1001.0).abs() < 1e-15);
}

/// For every value with at least 150 queries (value -> (members, queries)),
/// the fraction of members matches `theory(value)` within 3.5 standard
/// errors plus 0.02. Returns how many values were checked.
fn check_member_fractions(
    by_value: &HashMap<u64, (u64, u64)>,
    what: &str,
    theory: impl Fn(u64) -> f64,
) -> usize {
    let mut checked = 0;
    for (&value, &(members, total)) in by_value {
        if total < 150 {
            continue;
        }
        let p = members as f64 / total as f64;
        let se = (p * (1.0 - p) / total as f64)
            .sqrt()
            .max(1.0 / total as f64);
        let t = theory(value);
        assert!(
            (p - t).abs() < 3.5 * se + 0.02,
            "{what} {value}: {p:.3} of {total} vs {t:.3}"
        );
        checked += 1;
    }
    checked
}

#[test]
fn theorem_2_posterior_holds_on_the_filter() {
    // 000 Fig. 8: elements of prior 1/8 queried against a counting filter;
    // among queries whose counters multiply to pi, the fraction of members
    // is the Theorem 2 posterior.
    let (n, per, k) = (3328usize, 8usize, 6usize);
    let prior = 0.125;
    let mut by_product: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut m_used = 0;
    // Four independent filters (different element sets) pooled.
    for rep in 1..=4u32 {
        let mut f = SelectiveCountingFilter::new(n * per, k, CounterWidth::W8, 0.25);
        m_used = f.filter().m();
        for j in 0..n as u64 {
            f.insert(element(rep, j));
        }
        // Members and non-members in the prior's proportion: 1 to 7.
        for j in 0..(n as u64 * 8) {
            let member = j < n as u64;
            let product: u64 = f.filter().counters(element(rep, j)).iter().product();
            if product > 0 {
                let e = by_product.entry(product).or_insert((0, 0));
                e.0 += u64::from(member);
                e.1 += 1;
            }
        }
    }
    let checked = check_member_fractions(&by_product, "Theorem 2 at product", |pi| {
        paradox::posterior_from_ln_product(
            (pi as f64).ln(),
            k as u32,
            prior,
            m_used as u64,
            n as u64,
        )
    });
    eprintln!("Theorem 2 checked at {checked} counter products");
    assert!(checked >= 4, "only {checked} products with enough queries");
    // Theorem 4 with alpha = 1/4 (posterior >= 0.8): product >= 5 (Fig. 8).
    assert_eq!(
        paradox::min_counter_product(k as u32, prior, 0.25, m_used as u64, n as u64),
        5.0
    );
}

// ---------- B_h counting filter (000 §VI) ----------

use flowsieve::filter::{BhCountingFilter, BhSequence};

#[test]
fn bh_decoding_reproduces_fig_6() {
    let d = BhSequence::new(vec![1, 2, 4], 2).unwrap();
    // x: entries (c, a) = (1, 2) and (2, 8), its increments 2 and 4.
    let y1 = d.multiplicity(2, 1, 2).unwrap();
    let y2 = d.multiplicity(8, 2, 4).unwrap();
    assert_eq!((y1, y2), (1, 2));
    assert_eq!(paradox::bh_delta(&[1, 2], &[Some(y1), Some(y2)], 3), 18.0);
    // z: entries (2, 3) and (4, 7), its increments 1 and 2; c = 4 > h.
    let y1 = d.multiplicity(3, 2, 1).unwrap();
    assert_eq!(d.multiplicity(7, 4, 2), None);
    assert_eq!(paradox::bh_delta(&[2, 4], &[Some(y1), None], 3), 12.0);
    // B_h validation: 1 + 3 = 2 + 2, so {1, 2, 3} is not B_2.
    assert!(BhSequence::new(vec![1, 2, 3], 2).is_err());
    // Powers of h + 1 are B_h (base-(h+1) digits at most h).
    assert_eq!(
        BhSequence::new(vec![1, 4, 16, 64, 256], 3).unwrap(),
        BhSequence::powers(5, 3)
    );
}

#[test]
fn bh_filter_has_no_false_negatives_and_theorem_5_holds() {
    let (n, m, k) = (2000usize, 16_000usize, 4usize);
    let prior = 0.125;
    let mut by_delta: HashMap<u64, (u64, u64)> = HashMap::new();
    for rep in 10..14u32 {
        let mut f = BhCountingFilter::new(m, k, BhSequence::new(vec![1, 2, 4], 2).unwrap());
        for j in 0..n as u64 {
            f.insert(element(rep, j));
        }
        for j in 0..(n as u64 * 8) {
            let member = j < n as u64;
            let delta = f.delta(element(rep, j));
            if member {
                assert!(delta > 0.0, "a member is never ruled out");
            }
            if delta > 0.0 {
                let e = by_delta.entry(delta as u64).or_insert((0, 0));
                e.0 += u64::from(member);
                e.1 += 1;
            }
        }
    }
    let checked = check_member_fractions(&by_delta, "Theorem 5 at delta", |delta| {
        paradox::bh_posterior(delta as f64, k as u32, prior, m as u64, n as u64)
    });
    eprintln!("Theorem 5 checked at {checked} values of delta");
    assert!(checked >= 4);
}

// ---------- compressed snapshots (002) ----------

use flowsieve::filter::{
    CompressedError, apply_delta, compress_bloom, compress_delta, decompress_bloom,
};
use flowsieve::model::compressed;

fn random_filter(m: usize, k: usize, n: usize, seed: u64) -> BloomFilter {
    let mut f = BloomFilter::new(m, k);
    let mut r = rng(seed);
    for _ in 0..n {
        f.insert(r.random());
    }
    f
}

#[test]
fn compressed_size_is_within_2_percent_of_m_h_p() {
    for (m, k, n) in [
        (1usize << 20, 1usize, 10_000usize),
        (1 << 20, 2, 40_000),
        (1 << 18, 4, 20_000),
        (1 << 16, 6, 8_000),
        (100_000, 3, 50_000),
        (1 << 20, 4, 10),
        (1 << 17, 4, 500),
    ] {
        let f = random_filter(m, k, n, m as u64 + n as u64);
        let bytes = compress_bloom(&f);
        let p = f.fill_ratio();
        let ideal = f.m() as f64 * compressed::entropy(p) / 8.0;
        assert!(
            (bytes.len() as f64) <= 1.02 * ideal + 48.0,
            "m={m} k={k} n={n}: {} bytes, m H(p) = {ideal:.0}",
            bytes.len()
        );
        assert_eq!(decompress_bloom(&bytes).unwrap(), f);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn snapshots_and_deltas_round_trip_bit_exactly(m in 64usize..20_000, k in 1usize..8, n in 0usize..3000, more in 0usize..500, seed in any::<u64>()) {
        let old = random_filter(m, k, n, seed);
        prop_assert_eq!(&decompress_bloom(&compress_bloom(&old)).unwrap(), &old);
        let mut new = old.clone();
        let mut r = rng(seed ^ 1);
        for _ in 0..more {
            new.insert(r.random());
        }
        let delta = compress_delta(&old, &new).unwrap();
        prop_assert_eq!(apply_delta(&old, &delta).unwrap(), new);
    }

    #[test]
    fn damaged_snapshots_are_errors_not_panics(cut in 0usize..400, flip in 0usize..400, val in 1u8..=255, junk in prop::collection::vec(any::<u8>(), 0..300)) {
        let f = random_filter(4000, 3, 300, 77);
        let good = compress_bloom(&f);
        // Every truncation is an error.
        if cut < good.len() {
            prop_assert!(decompress_bloom(&good[..cut]).is_err());
        }
        // A changed byte is an error (the checksum covers bits and k).
        if flip < good.len() {
            let mut bad = good.clone();
            bad[flip] ^= val;
            prop_assert!(decompress_bloom(&bad).is_err(), "byte {} flipped decoded cleanly", flip);
        }
        // Arbitrary bytes, and arbitrary bytes behind a valid header.
        let _ = decompress_bloom(&junk);
        let mut framed = good[..40].to_vec();
        framed.extend_from_slice(&junk);
        let _ = decompress_bloom(&framed);
        let _ = apply_delta(&f, &framed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Any set of one bits round-trips, clustered or spread, from none to
    /// all, including runs far longer than the gap model expects (a
    /// quotient that runs on), the first bit and the last.
    #[test]
    fn any_bits_round_trip(m in 1usize..6000, k in 1usize..5, spread in prop::collection::vec(any::<u16>(), 0..300), runs in prop::collection::vec((any::<u16>(), 1usize..400), 0..4), first in any::<bool>(), last in any::<bool>()) {
        let mut bits = flowsieve::filter::BitArray::new(m);
        for s in spread {
            bits.set(usize::from(s) % m);
        }
        for (at, len) in runs {
            for i in usize::from(at) % m..(usize::from(at) % m + len).min(m) {
                bits.set(i);
            }
        }
        if first {
            bits.set(0);
        }
        if last {
            bits.set(m - 1);
        }
        let f = BloomFilter::from_bits(bits, k.min(m));
        let bytes = compress_bloom(&f);
        prop_assert_eq!(bytes[4], 2);
        prop_assert_eq!(&decompress_bloom(&bytes).unwrap(), &f);
    }
}

#[test]
fn empty_full_and_nearly_empty_snapshots_round_trip_and_stay_small() {
    let m = 1usize << 20;
    let empty = BloomFilter::new(m, 4);
    let mut full = flowsieve::filter::BitArray::new(m);
    for i in 0..m {
        full.set(i);
    }
    let full = BloomFilter::from_bits(full, 4);
    let mut last = flowsieve::filter::BitArray::new(m);
    last.set(m - 1);
    let last = BloomFilter::from_bits(last, 4);
    for f in [empty, full, last] {
        let bytes = compress_bloom(&f);
        // 40 header bytes and the coder's 5, and what the model leaves: a
        // single bit's place is log2(2^20) = 20 bits; a full filter's 2^20
        // certain gaps cost 23 bits at the coder's least probability of
        // 2^-16, and up to 1/256 of the range lost to rounding a decision,
        // 16 bytes as measured.
        assert!(
            bytes.len() <= 40 + 5 + 24,
            "{} ones: {} bytes",
            f.count_ones(),
            bytes.len()
        );
        assert_eq!(decompress_bloom(&bytes).unwrap(), f);
    }
}

/// The bytes of a fixture written as hexadecimal text.
fn hex_bytes(text: &str) -> Vec<u8> {
    let text = text.trim();
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Snapshots written in version 1 (every bit coded), as `c859b77` wrote
/// them (tests/fixtures, also the fuzz target's seeds), still decode to the
/// filter they were made from: stored results carry such snapshots.
#[test]
fn version_1_bloom_snapshots_still_decode() {
    let bytes = hex_bytes(include_str!("fixtures/snapshot-v1-bloom.hex"));
    assert_eq!(bytes[4], 1, "the fixture is a version 1 snapshot");
    let mut f = BloomFilter::new(2048, 3);
    for i in 0..150u64 {
        f.insert(flowsieve::hash::fmix64(i + 7));
    }
    assert_eq!(decompress_bloom(&bytes).unwrap(), f);
    // And it is refused when damaged, as a version 2 snapshot is.
    let mut bad = bytes.clone();
    let at = bad.len() - 3;
    bad[at] ^= 0x10;
    assert!(decompress_bloom(&bad).is_err());
}

#[test]
fn snapshot_errors_say_what_is_wrong() {
    let f = random_filter(1000, 2, 50, 3);
    let good = compress_bloom(&f);
    assert!(matches!(
        decompress_bloom(&good[..10]),
        Err(CompressedError::ShortHeader { have: 10, need: 40 })
    ));
    let mut bad = good.clone();
    bad[0] = b'X';
    assert!(matches!(
        decompress_bloom(&bad),
        Err(CompressedError::BadMagic(_))
    ));
    let mut bad = good.clone();
    bad[4] = 9;
    assert_eq!(
        decompress_bloom(&bad),
        Err(CompressedError::UnsupportedVersion(9))
    );
    assert_eq!(
        CompressedError::UnsupportedVersion(9).to_string(),
        "unsupported snapshot version 9 (this build reads versions 1 and 2)"
    );
    let mut bad = good.clone();
    bad[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        decompress_bloom(&bad),
        Err(CompressedError::BadSizes { .. })
    ));
    assert!(matches!(
        decompress_bloom(&good[..good.len() - 1]),
        Err(CompressedError::ShortPayload { .. })
    ));
    let delta = compress_delta(&f, &f).unwrap();
    assert!(matches!(
        decompress_bloom(&delta),
        Err(CompressedError::WrongKind {
            found: 1,
            expected: 0
        })
    ));
    assert!(matches!(
        apply_delta(&random_filter(2000, 2, 1, 4), &delta),
        Err(CompressedError::DeltaShape { .. })
    ));
    assert!(compress_delta(&f, &BloomFilter::new(1000, 3)).is_err());
}

#[test]
fn k_above_max_is_clamped_consistently() {
    // Every path (single, batch, estimate) uses the same k.
    let mut f = BloomFilter::new(1 << 16, 40);
    assert_eq!(f.k(), flowsieve::filter::MAX_K);
    f.insert_batch(&[1, 2, 3]);
    assert!([1u64, 2, 3].iter().all(|&h| f.contains(h)));
    let mut c = CountingBloomFilter::new(1 << 12, 40, CounterWidth::W8);
    assert_eq!(c.k(), flowsieve::filter::MAX_K);
    c.insert(9);
    assert_eq!(c.estimate(9), 1);
}

// ---------- the filter traits ----------

use flowsieve::filter::Membership;

/// No false negatives, through the trait, for every membership filter;
/// and a cleared filter holds nothing it was given.
fn membership_holds_what_it_was_given<F: Membership>(f: &mut F, keys: &[u64]) {
    for &k in keys {
        f.insert(k);
    }
    assert!(keys.iter().all(|&k| f.contains(k)));
    f.clear();
    assert!(keys.iter().all(|&k| !f.contains(k)), "cleared");
}

#[test]
fn every_membership_filter_answers_through_one_trait() {
    let keys: Vec<u64> = (0..500u64)
        .map(|i| flowsieve::hash::fmix64(i + 1))
        .collect();
    membership_holds_what_it_was_given(&mut flowsieve::filter::BloomFilter::new(8192, 5), &keys);
    membership_holds_what_it_was_given(
        &mut flowsieve::filter::CountingBloomFilter::new(
            8192,
            5,
            flowsieve::filter::CounterWidth::W4,
        ),
        &keys,
    );
}

/// The plain, atomic many-writer and single-writer counting filters answer
/// counter queries through one implementation: the same inserts give the
/// same counters, estimates and products.
#[test]
fn every_counting_filter_answers_counter_queries_alike() {
    use flowsieve::filter::{AtomicCountingBloomFilter, CounterWidth, CountingBloomFilter};
    let mut plain = CountingBloomFilter::new(4096, 4, CounterWidth::W8);
    let shared = AtomicCountingBloomFilter::new(4096, 4, CounterWidth::W8);
    let (mut writer, reader) = AtomicCountingBloomFilter::single_writer(4096, 4, CounterWidth::W8);
    for i in 0..3000u64 {
        let h = flowsieve::hash::fmix64(i % 700);
        plain.insert(h);
        shared.insert(h);
        writer.insert(h);
    }
    for i in 0..1000u64 {
        let h = flowsieve::hash::fmix64(i);
        let want = plain.counters(h);
        assert_eq!(shared.counters(h), want);
        assert_eq!(reader.counters(h), want);
        assert_eq!(plain.estimate(h), *want.iter().min().unwrap());
        let ln: f64 = want.iter().map(|&c| (c as f64).ln()).sum();
        let got = reader.ln_counter_product(h);
        assert!(if want.contains(&0) {
            got == f64::NEG_INFINITY
        } else {
            got.to_bits() == ln.to_bits()
        });
        assert_eq!(shared.count_at_least(h, 4), want.iter().all(|&c| c >= 4));
    }
}

/// The log-product is bit for bit the sum of `f64::ln` of the counters in
/// partition order, for counters below 256 (where a table answers) and
/// above (where the logarithm is computed): the selective stage's
/// posteriors and decisions rest on it.
#[test]
fn the_log_product_is_the_sum_of_the_counters_logarithms_bit_for_bit() {
    use flowsieve::filter::{CounterWidth, CountingBloomFilter};
    let mut f = CountingBloomFilter::new(2048, 3, CounterWidth::W16);
    // Counts from 1 to 1200 on one key each, so that the counters take
    // values on both sides of 256 (and collide into sums).
    for key in 0..40u64 {
        for _ in 0..(1 + key * 30) {
            f.insert(flowsieve::hash::fmix64(key));
        }
    }
    let (mut below, mut above) = (0, 0);
    for key in 0..400u64 {
        let h = flowsieve::hash::fmix64(key);
        let counters = f.counters(h);
        let got = f.ln_counter_product(h);
        if counters.contains(&0) {
            assert_eq!(got, f64::NEG_INFINITY);
            continue;
        }
        let mut want = 0.0f64;
        for &c in &counters {
            want += (c as f64).ln();
        }
        assert_eq!(got.to_bits(), want.to_bits(), "counters {counters:?}");
        below += counters.iter().filter(|&&c| c < 256).count();
        above += counters.iter().filter(|&&c| c >= 256).count();
    }
    assert!(
        below > 0 && above > 0,
        "{below} counters below 256, {above} above"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
    /// The plain insert, specialised per counter width, against a
    /// reference built from `PartitionedIndexer::index` one counter at a
    /// time: the same returned estimate at every insert, the same
    /// counters and the same count of saturation events at the end
    /// (tiny filters, repeated keys, all three widths).
    #[test]
    fn plain_insert_matches_a_counter_by_counter_reference(
        bits in proptest::sample::select(vec![4u32, 8, 16]),
        m in 1usize..300,
        k in 1usize..14,
        keys in proptest::collection::vec(0u64..50, 1..1500),
    ) {
        use flowsieve::hash::PartitionedIndexer;
        let width = CounterWidth::from_bits(bits).unwrap();
        let mut f = CountingBloomFilter::new(m, k, width);
        let ix = PartitionedIndexer::new(m.max(1), k);
        let mut cells = vec![0u64; ix.partition_len() * ix.k()];
        let mut saturated = 0u64;
        for key in keys {
            let h = flowsieve::hash::fmix64(key);
            let mut want = u64::MAX;
            for j in 0..ix.k() {
                let c = &mut cells[ix.index(h, j)];
                saturated += u64::from(*c + 1 == width.max());
                *c = (*c + 1).min(width.max());
                want = want.min(*c);
            }
            proptest::prop_assert_eq!(f.insert(h), want);
        }
        proptest::prop_assert_eq!(f.saturation_events(), saturated);
        for key in 0u64..50 {
            let h = flowsieve::hash::fmix64(key);
            let want: Vec<u64> = (0..ix.k()).map(|j| cells[ix.index(h, j)]).collect();
            proptest::prop_assert_eq!(f.counters(h), want);
        }
    }

    /// Counter locations by shift and mask are the division's.
    #[test]
    fn counter_locate_is_division_and_remainder(i in 0usize..(1 << 40)) {
        for w in [CounterWidth::W4, CounterWidth::W8, CounterWidth::W16] {
            let per = w.per_word();
            proptest::prop_assert_eq!(w.locate(i), (i / per, (i % per) as u32 * w.bits()));
        }
    }
}

mod blocked_layout {
    use flowsieve::filter::{BlockedCountingFilter, CounterWidth};
    use flowsieve::model::blocked;
    use rand::{Rng, SeedableRng};

    /// (B1) of `model::blocked` against the filter: keys never inserted
    /// whose `k` counters all reach theta, within 3 standard errors.
    #[test]
    fn offline_rate_matches_the_poisson_mixture() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for (theta, k, n) in [(3u64, 4usize, 40_000u64), (2, 3, 20_000), (5, 2, 60_000)] {
            let mut f = BlockedCountingFilter::new(1 << 16, k, CounterWidth::W8);
            assert_eq!(f.blocks(), 1024);
            for _ in 0..n {
                f.insert(rng.random());
            }
            let trials = 200_000u64;
            let hits = (0..trials)
                .filter(|_| f.estimate(rng.random()) >= theta)
                .count() as f64;
            let measured = hits / trials as f64;
            let model = blocked::fpr_blocked(theta, k as u32, n, 1024, 64);
            let se = (model * (1.0 - model) / trials as f64).sqrt();
            assert!(
                (measured - model).abs() <= 3.0 * se,
                "theta {theta} k {k} n {n}: measured {measured}, model {model}, se {se}"
            );
        }
    }

    /// (B2): one-packet keys reported at their own insertion.
    #[test]
    fn online_rate_matches_the_poisson_mixture() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
        for (theta, k, n) in [(4u64, 4usize, 60_000u64), (3, 3, 30_000)] {
            let (mut hits, mut total) = (0u64, 0u64);
            let model = blocked::fpr_blocked_online(theta, k as u32, n, 1024, 64);
            for _ in 0..5 {
                let mut f = BlockedCountingFilter::new(1 << 16, k, CounterWidth::W8);
                for _ in 0..n {
                    hits += u64::from(f.insert(rng.random()) >= theta);
                    total += 1;
                }
            }
            let measured = hits as f64 / total as f64;
            let se = (model * (1.0 - model) / total as f64).sqrt();
            assert!(
                (measured - model).abs() <= 3.0 * se,
                "theta {theta} k {k} n {n}: measured {measured}, model {model}, se {se}"
            );
        }
    }

    /// Estimates are never below the count while nothing saturates, and
    /// each key touches exactly one 64-byte block.
    #[test]
    fn estimates_bound_counts_from_above() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(13);
        let keys: Vec<u64> = (0..500).map(|_| rng.random()).collect();
        let mut totals = Vec::new();
        for conservative in [false, true] {
            let mut f = BlockedCountingFilter::new(1 << 12, 5, CounterWidth::W16);
            if conservative {
                f = f.conservative();
            }
            let mut counts = std::collections::HashMap::new();
            let mut total_est = 0u64;
            for i in 0..20_000usize {
                let h = keys[(i * 7919) % keys.len()];
                *counts.entry(h).or_insert(0u64) += 1;
                let est = f.insert(h);
                assert!(est >= counts[&h], "conservative {conservative}");
                assert_eq!(est, f.estimate(h));
            }
            for (&h, &c) in &counts {
                assert!(f.estimate(h) >= c);
                total_est += f.estimate(h);
            }
            totals.push(total_est);
            assert_eq!(f.saturation_events(), 0);
            f.clear();
            assert_eq!(f.nonzero_counters(), 0);
        }
        // Conservative update only moves minimal counters, so its estimates
        // are tighter than plain update's (64 blocks for 500 keys collide
        // often); both are at least the 20,000 packets counted.
        assert!(totals[1] < totals[0] && totals[1] >= 20_000, "{totals:?}");
    }

    proptest::proptest! {
        /// The plain insert, which bumps 8- and 16-bit counters as whole
        /// bytes (units) of the block, is a one-step `add`, which bumps
        /// them in their 64-bit words by shift and mask: after every insert
        /// of a stream with repeats (few blocks and narrow counters, so
        /// that counters share words and saturate), the same counters, the
        /// same estimate and the same saturation events. Fails when a unit
        /// is taken from the wrong byte of its word, or a saturated counter
        /// is bumped or counted again.
        #[test]
        fn plain_insert_is_a_one_step_add_at_every_width(
            bits in proptest::sample::select(vec![4u32, 8, 16]),
            m in 64usize..1_000,
            k in 1usize..12,
            keys in proptest::collection::vec(0u64..50, 1..3_000),
        ) {
            let width = CounterWidth::from_bits(bits).unwrap();
            let mut by_insert = BlockedCountingFilter::new(m, k, width);
            let mut by_add = by_insert.clone();
            for &x in &keys {
                let h = flowsieve::hash::fmix64(x + 1);
                let e = by_insert.insert(h);
                proptest::prop_assert_eq!(e, by_add.add(h, 1));
                proptest::prop_assert_eq!(e, by_insert.estimate(h));
                proptest::prop_assert_eq!(by_insert.saturation_events(), by_add.saturation_events());
            }
            proptest::prop_assert_eq!(&by_insert, &by_add);
        }
    }
}

/// The recycling filter a proptest's parameters name: `policy` 0, 1 or 2
/// picks a σ bound (kept below `m`), an insertion count or a time span,
/// each from `limit`.
fn recycling_filter(
    (m, k): (usize, usize),
    (policy, limit): (u8, u64),
    two_phase: bool,
    retaining: bool,
    non_colliding: bool,
) -> RecyclingBloomFilter {
    let policy = match policy {
        0 => RecyclePolicy::Sigma(limit.min(m as u64 - 1)),
        1 => RecyclePolicy::Insertions(limit),
        _ => RecyclePolicy::Time(limit * 1_000),
    };
    let hashing = if non_colliding {
        Hashing::NonColliding
    } else {
        Hashing::Colliding
    };
    RecyclingBloomFilter::new(m, k, policy, hashing, retaining, two_phase)
}

/// 3,000 messages for the recycling filter's proptests: flow hashes of
/// `keys` keys (few, so that they repeat; spread over all 64 bits), at
/// times that advance by 0-49 ns. Also the generator, for more draws.
fn recycling_messages(seed: u64, keys: u64) -> (Vec<(u64, Timestamp)>, rand_chacha::ChaCha8Rng) {
    let mut r = rng(seed);
    let mut now = 0u64;
    let messages = (0..3_000)
        .map(|_| {
            let h = flowsieve::hash::fmix64(r.random_range(0..keys) + 1);
            now += r.random_range(0..50);
            (h, Timestamp::from_units(now, 1_000_000_000))
        })
        .collect();
    (messages, r)
}

proptest::proptest! {
    /// The recycling filter's front cache changes no answer and no
    /// statistic, for every policy, phase count, retention and hashing, on
    /// streams that repeat keys and cross many recycles.
    #[test]
    fn front_cache_answers_exactly_as_the_filter(
        shape in (16usize..600, 1usize..6),
        policy in (0u8..3, 1u64..400),
        two_phase: bool,
        retaining: bool,
        non_colliding: bool,
        slots in 1usize..64,
        keys in 1u64..300,
        seed: u64,
    ) {
        let make = || recycling_filter(shape, policy, two_phase, retaining, non_colliding);
        let (mut plain, mut cached) = (make(), make().with_front_cache(slots));
        for (h, t) in recycling_messages(seed, keys).0 {
            proptest::prop_assert_eq!(plain.test_and_insert_at(h, t), cached.test_and_insert_at(h, t));
            proptest::prop_assert_eq!(plain.stats(), cached.stats());
            proptest::prop_assert_eq!(plain.active_bits(), cached.active_bits());
        }
    }

    /// Tests prepared ahead (`prepare`, then `test_and_insert_prepared_at`,
    /// as the new-flow stage does a few records ahead) answer exactly as
    /// plain ones and leave the same filter, for every policy, phase count,
    /// retention, hashing and front cache, whatever the distance, with
    /// recycles and cache evictions between a preparation and its test, and
    /// with preparations made for another message (which must be ignored).
    #[test]
    fn prepared_tests_answer_exactly_as_plain_ones(
        shape in (16usize..600, 1usize..6),
        policy in (0u8..3, 1u64..400),
        two_phase: bool,
        retaining: bool,
        non_colliding: bool,
        slots in 0usize..64,
        keys in 1u64..300,
        ahead in 0usize..12,
        seed: u64,
    ) {
        use flowsieve::filter::PreparedMessage;
        let make = || {
            recycling_filter(shape, policy, two_phase, retaining, non_colliding)
                .with_front_cache(slots)
        };
        let (mut plain, mut prepared) = (make(), make());
        let (stream, mut r) = recycling_messages(seed, keys);
        let mut ring = [PreparedMessage::default(); 16];
        for (i, &(h, _)) in stream.iter().enumerate().take(ahead) {
            prepared.prepare(h, &mut ring[i % 16]);
        }
        for (i, &(h, t)) in stream.iter().enumerate() {
            if let Some(&(next, _)) = stream.get(i + ahead) {
                // Now and then a preparation for a message that is not the
                // one tested in this slot.
                let next = if r.random_range(0..20) == 0 { next ^ 1 } else { next };
                prepared.prepare(next, &mut ring[(i + ahead) % 16]);
            }
            let want = plain.test_and_insert_at(h, t);
            let got = prepared.test_and_insert_prepared_at(h, t, &ring[i % 16]);
            proptest::prop_assert_eq!(want, got, "message {}", i);
            proptest::prop_assert_eq!(plain.stats(), prepared.stats());
            proptest::prop_assert_eq!(plain.active_bits(), prepared.active_bits());
        }
    }
}

// ---------- compressed counting-filter snapshots ----------

mod compressed_counting {
    use super::rng;
    use flowsieve::filter::{
        COUNTER_ESCAPE, CompressedError, CounterSnapshot, CounterWidth, Counters,
        CountingBloomFilter, compress_counting, decompress_counter_snapshot, decompress_counting,
    };
    use proptest::prelude::*;
    use rand::Rng;

    fn filled(
        m: usize,
        k: usize,
        width: CounterWidth,
        n: usize,
        heavy: usize,
        seed: u64,
    ) -> CountingBloomFilter {
        let mut f = CountingBloomFilter::new(m, k, width);
        let mut r = rng(seed);
        for _ in 0..n {
            f.insert(r.random());
        }
        // A few heavy flows, some past the escape and to saturation.
        for h in 0..heavy as u64 {
            for _ in 0..(40 * (h + 1)) {
                f.insert(h.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            }
        }
        f
    }

    fn same(a: &CountingBloomFilter, b: &CountingBloomFilter) -> bool {
        a.m() == b.m()
            && a.k() == b.k()
            && a.width() == b.width()
            && (0..a.m()).all(|i| a.counter(i) == b.counter(i))
    }

    /// The entropy of the counter distribution, in bits per counter, with
    /// counters at or past the escape costed at their raw width.
    fn entropy_bits(f: &CountingBloomFilter) -> f64 {
        let m = f.m() as f64;
        let mut h = vec![0u64; COUNTER_ESCAPE + 1];
        for i in 0..f.m() {
            h[(f.counter(i) as usize).min(COUNTER_ESCAPE)] += 1;
        }
        let mut bits = 0.0;
        for (j, &c) in h.iter().enumerate() {
            if c > 0 {
                let p = c as f64 / m;
                bits += c as f64 * -p.log2();
                if j == COUNTER_ESCAPE {
                    bits += c as f64 * f64::from(f.width().bits());
                }
            }
        }
        bits
    }

    /// The payload is within 1 % (plus the coder's few bytes) of the
    /// entropy of the counter distribution, at loads from sparse to past
    /// one insertion per counter, for 4-, 8- and 16-bit counters.
    #[test]
    fn counter_snapshots_come_within_1_percent_of_the_entropy() {
        for (m, k, width, n) in [
            (1usize << 16, 4usize, CounterWidth::W8, 2_000usize),
            (1 << 16, 4, CounterWidth::W8, 16_000),
            (1 << 18, 8, CounterWidth::W4, 40_000),
            (1 << 16, 11, CounterWidth::W16, 12_000),
            (1 << 20, 11, CounterWidth::W8, 100_000),
            (1 << 19, 11, CounterWidth::W8, 4),
            (1 << 19, 11, CounterWidth::W8, 1_000),
        ] {
            let f = filled(m, k, width, n, 8, m as u64 ^ n as u64);
            let bytes = compress_counting(&f);
            let header = 32 + 8 * (COUNTER_ESCAPE + 1);
            let payload = (bytes.len() - header) as f64;
            let ideal = entropy_bits(&f) / 8.0;
            assert!(
                payload <= 1.01 * ideal + 16.0,
                "m={m} k={k} n={n}: {payload} bytes against an entropy of {ideal:.0}"
            );
            eprintln!(
                "m={m} k={k} {width:?} n={n}: {payload} bytes, entropy {ideal:.0} ({:.3} bits/counter, raw {})",
                payload * 8.0 / m as f64,
                width.bits()
            );
            assert!(same(&decompress_counting(&bytes, m as u64).unwrap(), &f));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn counter_snapshots_round_trip_exactly(parts in 1usize..200, k in 1usize..12, bits in prop::sample::select(vec![4u32, 8, 16]), n in 0usize..5000, heavy in 0usize..6, seed in any::<u64>()) {
            let width = CounterWidth::from_bits(bits).unwrap();
            let f = filled(parts * k, k, width, n, heavy, seed);
            let bytes = compress_counting(&f);
            prop_assert!(same(&decompress_counting(&bytes, 1 << 20).unwrap(), &f));
        }

        /// The word-skipping walk a collector merges with visits exactly
        /// the non-zero counters, in order, with their values, whatever the
        /// width, including a last word the counters only partly fill.
        #[test]
        fn nonzero_counters_are_visited_in_order_and_only_they(parts in 1usize..300, k in 1usize..12, bits in prop::sample::select(vec![4u32, 8, 16]), n in 0usize..3000, heavy in 0usize..4, seed in any::<u64>()) {
            let width = CounterWidth::from_bits(bits).unwrap();
            let f = filled(parts * k, k, width, n, heavy, seed);
            let want: Vec<(usize, u64)> = (0..f.m())
                .map(|i| (i, f.counter(i)))
                .filter(|&(_, v)| v != 0)
                .collect();
            let mut got = Vec::new();
            f.for_each_nonzero(|i, v| got.push((i, v)));
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(f.nonzero_counters(), want.len() as u64);
        }

        /// The cells found from a window's insertions are the filter's
        /// non-zero counters, with or without conservative update, from one
        /// insertion to past saturation; they code to the filter's own
        /// bytes; and the bytes decode back as cells exactly when at most
        /// one counter in 32 is set, equal to the filter either way.
        #[test]
        fn cells_found_from_the_insertions_are_the_filters_own(parts in 1usize..400, k in 1usize..12, bits in prop::sample::select(vec![4u32, 8, 16]), conservative in any::<bool>(), flows in 1u64..60, picks in prop::collection::vec(any::<prop::sample::Index>(), 0..400), seed in any::<u64>()) {
            let width = CounterWidth::from_bits(bits).unwrap();
            let mut f = CountingBloomFilter::new(parts * k, k, width);
            if conservative {
                f = f.conservative();
            }
            // Repeated flows, so that counters grow past the escape and, for
            // 4-bit counters, saturate.
            let hashes: Vec<u64> = picks
                .iter()
                .map(|i| flowsieve::hash::fmix64(seed ^ i.index(flows as usize) as u64))
                .collect();
            for &h in &hashes {
                f.insert(h);
            }
            let cells = f.nonzero_of(&hashes).unwrap();
            let mut want = Vec::new();
            f.for_each_nonzero(|i, v| want.push((i, v)));
            let mut got = Vec::new();
            cells.for_each_nonzero(|i, v| got.push((i, v)));
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(cells.nonzero_counters(), f.nonzero_counters());
            prop_assert!((0..f.m() + 3).all(|i| cells.counter(i) == f.counter(i)));
            let sparse = CounterSnapshot::Sparse(cells);
            let bytes = compress_counting(&f);
            prop_assert_eq!(&sparse.compress(), &bytes);
            let back = decompress_counter_snapshot(&bytes, 1 << 20).unwrap();
            prop_assert_eq!(
                matches!(back, CounterSnapshot::Sparse(_)),
                f.nonzero_counters() <= f.m() as u64 / 32
            );
            prop_assert!(back == sparse);
            prop_assert!(back == CounterSnapshot::from(f.clone()));
            prop_assert!((0..f.m()).all(|i| back.counter(i) == f.counter(i)));
            for &h in hashes.iter().take(8) {
                prop_assert_eq!(back.estimate(h), f.estimate(h));
            }
            prop_assert!(same(&back.into_dense(), &f));
        }

        #[test]
        fn damaged_counter_snapshots_are_errors(cut in 0usize..600, flip in 0usize..600, val in 1u8..=255, junk in prop::collection::vec(any::<u8>(), 0..400)) {
            let f = filled(4 * 256, 4, CounterWidth::W8, 900, 3, 5);
            let good = compress_counting(&f);
            if cut < good.len() {
                prop_assert!(decompress_counting(&good[..cut], 1 << 20).is_err());
            }
            if flip < good.len() {
                let mut bad = good.clone();
                bad[flip] ^= val;
                prop_assert!(decompress_counting(&bad, 1 << 20).is_err(), "byte {} flipped decoded cleanly", flip);
            }
            // A nearly empty filter, whose snapshot decodes as cells.
            let mut few = CountingBloomFilter::new(4 * 1024, 4, CounterWidth::W8);
            for h in 0..20u64 {
                few.insert(flowsieve::hash::fmix64(h % 7));
            }
            let good = compress_counting(&few);
            prop_assert!(matches!(decompress_counter_snapshot(&good, 1 << 20), Ok(CounterSnapshot::Sparse(_))));
            if cut < good.len() {
                prop_assert!(decompress_counter_snapshot(&good[..cut], 1 << 20).is_err());
            }
            if flip < good.len() {
                let mut bad = good.clone();
                bad[flip] ^= val;
                prop_assert!(decompress_counter_snapshot(&bad, 1 << 20).is_err(), "byte {} flipped decoded cleanly as cells", flip);
            }
            let _ = decompress_counter_snapshot(&junk, 1 << 20);
            let _ = decompress_counting(&junk, 1 << 20);
            let mut framed = good[..good.len().min(296)].to_vec();
            framed.extend_from_slice(&junk);
            let _ = decompress_counting(&framed, 1 << 20);
        }
    }

    /// The wire format does not move unnoticed: these filters' version 2
    /// snapshots hash to the values the gap coder gave when it was written,
    /// and the checksum field is the documented chain over the non-zero
    /// counters, recomputed here from `counter(i)`.
    #[test]
    fn counter_snapshots_keep_their_bytes() {
        use flowsieve::hash::fmix64;
        let pinned: [(usize, usize, CounterWidth, usize, u64); 5] = [
            (1 << 16, 4, CounterWidth::W8, 2_000, PIN[0]),
            (1 << 16, 4, CounterWidth::W8, 16_000, PIN[1]),
            (1 << 18, 8, CounterWidth::W4, 40_000, PIN[2]),
            (3 * 1000 + 3, 3, CounterWidth::W16, 12_000, PIN[3]),
            (1 << 20, 11, CounterWidth::W8, 100_000, PIN[4]),
        ];
        let mut got = Vec::new();
        for (m, k, width, n, pin) in pinned {
            let f = filled(m, k, width, n, 8, m as u64 ^ n as u64);
            let bytes = compress_counting(&f);
            let digest = bytes.chunks(8).fold(bytes.len() as u64, |h, c| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                fmix64(h ^ u64::from_le_bytes(w))
            });
            eprintln!("m={m} k={k} {width:?} n={n}: {digest:#018x}");
            let mut sum = fmix64(0x1319_8a2e_0370_7345 ^ k as u64 ^ (u64::from(width.bits()) << 8));
            for i in (0..f.m()).filter(|&i| f.counter(i) != 0) {
                sum = fmix64(sum ^ f.counter(i)).wrapping_add(i as u64);
            }
            assert_eq!(bytes[4], 2, "version");
            assert_eq!(bytes[16..24], sum.to_le_bytes(), "m={m} k={k} {width:?}");
            got.push((digest, pin));
        }
        let (digests, pins): (Vec<u64>, Vec<u64>) = got.into_iter().unzip();
        assert_eq!(digests, pins);
    }
    const PIN: [u64; 5] = [
        0xdeca_27a2_89e5_b95d,
        0xf563_ad1b_9292_1612,
        0xe00b_1a7f_1077_8476,
        0xd440_57af_dbf4_4e4e,
        0xc225_83f1_60ff_c361,
    ];

    /// Snapshots written in version 1 (every counter's run coded), as
    /// `c859b77` wrote them, still decode exactly: digests of probes not yet
    /// upgraded stay mergeable. Counters up to 120, past the escape.
    #[test]
    fn version_1_counter_snapshots_still_decode() {
        use flowsieve::hash::fmix64;
        let bytes = super::hex_bytes(include_str!("fixtures/snapshot-v1-counting.hex"));
        assert_eq!(bytes[4], 1, "the fixture is a version 1 snapshot");
        let mut f = CountingBloomFilter::new(512, 4, CounterWidth::W8);
        for i in 0..300u64 {
            f.insert(fmix64(i + 1));
        }
        for h in 1..=3u64 {
            for _ in 0..(40 * h) {
                f.insert(fmix64(1000 + h));
            }
        }
        let g = decompress_counting(&bytes, 1 << 20).unwrap();
        assert!(same(&g, &f));
        // The fixture holds counters past the escape (120 packets of one
        // flow, 122 where another shares the cell).
        assert_eq!((0..f.m()).map(|i| f.counter(i)).max(), Some(122));
        // Re-encoded, it is version 2 and decodes to the same counters.
        let again = compress_counting(&g);
        assert_eq!(again[4], 2);
        assert!(same(&decompress_counting(&again, 1 << 20).unwrap(), &f));
        let mut bad = bytes.clone();
        let at = bad.len() - 3;
        bad[at] ^= 0x10;
        assert!(decompress_counting(&bad, 1 << 20).is_err());
    }

    /// The declared size is checked against the caller's limit before any
    /// decoding.
    #[test]
    fn a_counter_snapshot_past_the_limit_is_refused_before_decoding() {
        let f = filled(1 << 16, 4, CounterWidth::W8, 100, 0, 1);
        let bytes = compress_counting(&f);
        assert_eq!(
            decompress_counting(&bytes, 1 << 15).unwrap_err(),
            CompressedError::TooLarge {
                m: 1 << 16,
                limit: 1 << 15
            }
        );
    }
}

// ---------- pre-faulted filter memory ----------

proptest::proptest! {
    /// `prefault` changes no bit and no counter, whatever was inserted
    /// before it, and takes exactly the words' size from the budget when
    /// they fit (nothing when they do not).
    #[test]
    fn prefault_changes_nothing_and_keeps_its_budget(
        bits in 1usize..600_000,
        counters in 1usize..300_000,
        k in 1usize..12,
        keys in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..50),
        budget in 0usize..200_000,
    ) {
        let mut a = flowsieve::filter::BitArray::new(bits);
        for &h in &keys {
            a.set((h % bits as u64) as usize);
        }
        let before = a.clone();
        let bytes = bits.div_ceil(64) * 8;
        let mut left = budget;
        let fitted = a.prefault(&mut left);
        proptest::prop_assert_eq!(fitted, bytes <= budget);
        proptest::prop_assert_eq!(left, if fitted { budget - bytes } else { budget });
        proptest::prop_assert!(a == before);

        let width = flowsieve::filter::CounterWidth::W8;
        let mut f = flowsieve::filter::CountingBloomFilter::new(counters, k, width);
        let mut g = f.clone();
        for &h in &keys {
            f.insert(h);
            g.insert(h);
        }
        let mut left = usize::MAX;
        f.prefault(&mut left);
        proptest::prop_assert_eq!(f.nonzero_counters(), g.nonzero_counters());
        for &h in &keys {
            proptest::prop_assert_eq!(f.estimate(h), g.estimate(h));
        }
    }

    /// The blocked counting filter and the recycling filter: `prefault`
    /// takes the whole memory from the budget or nothing, and changes no
    /// counter and no bit. The recycling filter's two phases fit together
    /// or not at all, so a stage never stays half populated.
    #[test]
    fn prefault_of_the_blocked_and_recycling_filters_is_all_or_nothing(
        counters in 1usize..300_000,
        bits in 1usize..600_000,
        k in 1usize..8,
        two_phase: bool,
        keys in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..50),
        budget in 0usize..200_000,
    ) {
        use flowsieve::filter::{
            BlockedCountingFilter, CounterWidth, RecyclePolicy, RecyclingBloomFilter,
        };
        use flowsieve::model::recycling::Hashing;
        let mut f = BlockedCountingFilter::new(counters, k, CounterWidth::W8);
        for &h in &keys {
            f.insert(h);
        }
        let before = f.clone();
        // A block is 64 one-byte counters.
        let bytes = f.blocks() * 64;
        let mut left = budget;
        let fitted = f.prefault(&mut left);
        proptest::prop_assert_eq!(fitted, bytes <= budget);
        proptest::prop_assert_eq!(left, if fitted { budget - bytes } else { budget });
        proptest::prop_assert!(f == before);

        let policy = RecyclePolicy::Sigma((bits as u64 / 2).max(1));
        let mut r =
            RecyclingBloomFilter::new(bits, k, policy, Hashing::Colliding, false, two_phase);
        for &h in &keys {
            r.test_and_insert(h);
        }
        let (active, frozen) = r.halves();
        let (active, frozen) = (active.clone(), frozen.cloned());
        let halves = if two_phase { 2 } else { 1 };
        let bytes = halves * bits.div_ceil(64) * 8;
        let mut left = budget;
        let fitted = r.prefault(&mut left);
        proptest::prop_assert_eq!(fitted, bytes <= budget);
        proptest::prop_assert_eq!(left, if fitted { budget - bytes } else { budget });
        proptest::prop_assert!(r.halves().0 == &active);
        proptest::prop_assert!(r.halves().1 == frozen.as_ref());
    }
}

/// The process's resident set, in bytes.
#[cfg(target_os = "linux")]
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Held by each test that measures the resident set, so that the other's
/// 256 MiB does not land in its window.
#[cfg(target_os = "linux")]
static RESIDENT_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `prefault` really maps the pages in: a fresh 256 MiB array is not
/// resident (calloc leaves its pages untouched) and is after the call.
/// Measured on the process's resident set, with a wide margin for what
/// other tests allocate and free meanwhile.
#[cfg(target_os = "linux")]
#[test]
fn prefault_makes_a_fresh_array_resident() {
    let _alone = RESIDENT_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    const BYTES: usize = 256 << 20;
    let mut a = flowsieve::filter::BitArray::new(BYTES * 8);
    let before = resident_bytes();
    let mut budget = BYTES;
    assert!(a.prefault(&mut budget));
    let after = resident_bytes();
    assert_eq!(budget, 0);
    assert!(
        after >= before + (200 << 20),
        "resident {before} -> {after} bytes: the pages were not faulted in"
    );
    assert_eq!(a.count_ones(), 0);
}

/// A fresh blocked counting filter takes no memory until it is used or
/// populated, as the partitioned one: building 256 MiB of blocks leaves
/// the resident set where it was (it once wrote every block at creation),
/// and `prefault` then makes them resident, every counter still 0.
#[cfg(target_os = "linux")]
#[test]
fn a_fresh_blocked_counting_filter_is_not_resident_until_populated() {
    let _alone = RESIDENT_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    use flowsieve::filter::{BlockedCountingFilter, CounterWidth};
    const BYTES: usize = 256 << 20;
    let before = resident_bytes();
    let mut f = BlockedCountingFilter::new(BYTES, 4, CounterWidth::W8);
    let built = resident_bytes();
    assert!(
        built < before + (64 << 20),
        "resident {before} -> {built} bytes: building the filter touched its pages"
    );
    let mut budget = BYTES;
    assert!(f.prefault(&mut budget));
    assert_eq!(budget, 0);
    let after = resident_bytes();
    assert!(
        after >= built + (200 << 20),
        "resident {built} -> {after} bytes: the pages were not faulted in"
    );
    assert_eq!(f.nonzero_counters(), 0);
}

// ---------- clearing by the logged insertions ----------

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(120))]
    /// A counting filter cleared by the hashes it took (in any order, with
    /// repeats) is the filter a whole clear leaves: both layouts, the three
    /// counter widths, plain and conservative update, saturating counters.
    /// A log that leaves one inserted hash out is not enough, and the test
    /// says so whenever that hash's counters are not shared with another's.
    ///
    /// The heavy stage logs only the insertions whose estimate after the
    /// bump is at most 1, on the claim that these are exactly the
    /// insertions that found one of their counters at zero, and that
    /// clearing by them alone is a whole clear: both checked here too, and
    /// that such a log holds no key twice. Logging at an estimate of 0
    /// alone fails it.
    #[test]
    fn clearing_by_the_inserted_hashes_is_a_whole_clear(
        bits in proptest::sample::select(vec![4u32, 8, 16]),
        blocked: bool,
        conservative: bool,
        m in 64usize..5_000,
        k in 1usize..12,
        keys in proptest::collection::vec(0u64..40, 1..600),
        order_seed: u64,
    ) {
        use flowsieve::filter::{BlockedCountingFilter, CounterWidth, Counters, CountingBloomFilter};
        use rand::seq::SliceRandom;
        let width = CounterWidth::from_bits(bits).unwrap();
        let hashes: Vec<u64> = keys.iter().map(|&x| flowsieve::hash::fmix64(x + 1)).collect();
        // The heavy stage's log: the insertions that found a zero.
        let mut zero_log = Vec::new();
        // The log: every inserted hash, shuffled, some of them twice.
        let mut log = hashes.clone();
        log.extend(hashes.iter().step_by(3));
        log.shuffle(&mut rng(order_seed));
        if blocked {
            let mut f = BlockedCountingFilter::new(m, k, width);
            if conservative { f = f.conservative(); }
            for &h in &hashes {
                let found_zero = f.estimate(h) == 0;
                let after = f.insert(h);
                proptest::prop_assert_eq!(after <= 1, found_zero);
                if after <= 1 { zero_log.push(h); }
            }
            let mut by_zeros = f.clone();
            by_zeros.clear_inserted(&zero_log);
            proptest::prop_assert_eq!(by_zeros.nonzero_counters(), 0);
            let mut swept = f.clone();
            swept.clear();
            f.clear_inserted(&log);
            proptest::prop_assert_eq!(&f, &swept);
            proptest::prop_assert_eq!(f.nonzero_counters(), 0);
        } else {
            let mut f = CountingBloomFilter::new(m, k, width);
            if conservative { f = f.conservative(); }
            for &h in &hashes {
                let found_zero = Counters::estimate(&f, h) == 0;
                let after = f.insert(h);
                proptest::prop_assert_eq!(after <= 1, found_zero);
                if after <= 1 { zero_log.push(h); }
            }
            let mut by_zeros = f.clone();
            by_zeros.clear_inserted(&zero_log);
            proptest::prop_assert_eq!(by_zeros.nonzero_counters(), 0);
            let mut swept = f.clone();
            swept.clear();
            let mut partial = f.clone();
            f.clear_inserted(&log);
            proptest::prop_assert_eq!(&f, &swept);
            proptest::prop_assert_eq!(f.nonzero_counters(), 0);
            // Without the last key's hash, its counters stay unless some
            // other logged hash shares their words.
            let last = *hashes.last().unwrap();
            let rest: Vec<u64> = log.iter().copied().filter(|&h| h != last).collect();
            partial.clear_inserted(&rest);
            let words_of = |h: u64| -> Vec<usize> {
                (0..partial.k()).map(|j| width.locate(partial.counter_index(h, j)).0).collect()
            };
            let shared = words_of(last).iter().all(|w| rest.iter().any(|&o| words_of(o).contains(w)));
            proptest::prop_assert_eq!(partial.nonzero_counters() == 0, shared);
        }
        // Repeats are left out: the zero log holds each key at most once.
        let mut distinct = zero_log.clone();
        distinct.sort_unstable();
        distinct.dedup();
        proptest::prop_assert_eq!(distinct.len(), zero_log.len());
    }

    /// `add(h, n)` is `n` inserts of `h` in a row: the same counters, the
    /// same saturation events and the same estimate, on both layouts,
    /// every width and both update rules, from a filter other keys have
    /// filled (so that some of `h`'s counters are above its minimum, and
    /// 4-bit counters saturate). And the heavy stage's shortcut holds: each
    /// insert of a train after the first gives the one before plus 1,
    /// capped at the maximum. Fails when a conservative add raises every
    /// counter by `n`, or a plain one counts a saturated counter again.
    #[test]
    fn adding_n_at_once_is_n_inserts_in_a_row(
        bits in proptest::sample::select(vec![4u32, 8, 16]),
        blocked: bool,
        conservative: bool,
        m in 16usize..3_000,
        k in 1usize..12,
        before in proptest::collection::vec(0u64..30, 0..400),
        key in 0u64..30,
        n in 0u64..40,
    ) {
        use flowsieve::filter::{BlockedCountingFilter, CounterWidth, CountingBloomFilter};
        let width = CounterWidth::from_bits(bits).unwrap();
        let hash = |x: u64| flowsieve::hash::fmix64(x + 1);
        let h = hash(key);
        let max = width.max();
        // One insert at a time, checking each estimate against the
        // shortcut; then all at once from the same start.
        macro_rules! check {
            ($f:expr) => {{
                let mut f = $f;
                if conservative { f = f.conservative(); }
                for &x in &before { f.insert(hash(x)); }
                let mut at_once = f.clone();
                let mut last: Option<u64> = None;
                for _ in 0..n {
                    let e = f.insert(h);
                    if let Some(l) = last {
                        proptest::prop_assert_eq!(e, (l + 1).min(max));
                    }
                    last = Some(e);
                }
                let e = at_once.add(h, n);
                if let Some(l) = last {
                    proptest::prop_assert_eq!(e, l);
                }
                proptest::prop_assert_eq!(at_once.saturation_events(), f.saturation_events());
                proptest::prop_assert_eq!(&at_once, &f);
            }};
        }
        if blocked {
            check!(BlockedCountingFilter::new(m.max(64), k, width));
        } else {
            check!(CountingBloomFilter::new(m, k, width));
        }
    }

    /// However a recycle clears its half (by the logged messages or by a
    /// sweep), the half is empty after it, a two-phase filter's frozen
    /// half is the old active one, and the active bit count always matches
    /// the active half's bits. Half sizes reach 256 Kbit so that the log's
    /// limit (up to 256 messages) is both met and passed between recycles.
    #[test]
    fn a_recycle_clears_its_half_however_it_clears(
        m_log2 in 10u32..19,
        k in 1usize..8,
        policy in 0u8..3,
        limit in 1u64..400,
        two_phase: bool,
        retaining: bool,
        keys in 1u64..2_000,
        seed: u64,
    ) {
        let m = 1usize << m_log2;
        let policy = match policy {
            0 => RecyclePolicy::Sigma(limit * 4),
            1 => RecyclePolicy::Insertions(limit),
            _ => RecyclePolicy::Time(limit * 1_000),
        };
        let mut f = RecyclingBloomFilter::new(m, k, policy, Hashing::Colliding, retaining, two_phase);
        let mut r = rng(seed);
        let mut now = 0u64;
        for step in 0..2_000 {
            let h = flowsieve::hash::fmix64(r.random_range(0..keys) + 1);
            now += r.random_range(0..20);
            f.test_and_insert_at(h, Timestamp::from_units(now, 1_000_000_000));
            proptest::prop_assert_eq!(f.active_bits(), f.halves().0.count_ones());
            if step % 97 == 0 {
                let before = f.halves().0.clone();
                f.recycle();
                let (active, frozen) = f.halves();
                proptest::prop_assert_eq!(active.count_ones(), 0);
                proptest::prop_assert_eq!(f.active_bits(), 0);
                if let Some(frozen) = frozen {
                    proptest::prop_assert_eq!(frozen, &before);
                }
            }
        }
    }
}

mod insertion_log {
    use flowsieve::filter::InsertionLog;
    use proptest::prelude::*;

    proptest! {
        /// `record_if` (no branch on its test) logs what `record` behind an
        /// `if` would: the changed hashes in order while there are at most
        /// `limit` of them, and an incomplete log from the one past it on.
        /// A reset log logs afresh, and logs that logged the same hashes
        /// are equal whatever their slots held before.
        #[test]
        fn record_if_logs_what_a_branch_would(
            limit in 0usize..40,
            steps in proptest::collection::vec((any::<u64>(), any::<bool>()), 0..120),
            split in 0usize..120,
        ) {
            let mut log = InsertionLog::new(limit);
            let mut model: Vec<u64> = Vec::new();
            let split = split.min(steps.len());
            for &(h, changed) in &steps[..split] {
                log.record_if(h, changed);
                if changed {
                    model.push(h);
                }
            }
            log.reset();
            model.clear();
            let mut branching = InsertionLog::new(limit);
            for &(h, changed) in &steps[split..] {
                log.record_if(h, changed);
                if changed {
                    branching.record(h);
                    model.push(h);
                }
                let want = (model.len() <= limit).then_some(model.as_slice());
                prop_assert_eq!(log.complete(), want);
                prop_assert_eq!(&log, &branching);
            }
        }
    }
}

// ---------- The recycling filter's blocked layout ----------

mod blocked_recycling_layout {
    use flowsieve::filter::{BitLayout, RecyclePolicy, RecyclingBloomFilter};
    use flowsieve::model::blocked_recycling::{
        BlockOccupancy, blocked_average_fpr, blocked_fpr_after, blocked_rates,
        blocked_sigma_for_target,
    };
    use flowsieve::model::recycling::{Hashing, average_fpr, sigma_for_target};
    use rand::{Rng, SeedableRng};

    /// A long run of distinct new messages through a sigma-bounded filter:
    /// the measured long-term false-positive rate (the fraction of new
    /// messages reported as seen) and its standard error, from the
    /// per-cycle counts (a ratio estimator over whole cycles, since the
    /// messages of one cycle are not independent), and the mean new
    /// messages a cycle.
    fn measured_rate(mut f: RecyclingBloomFilter, cycles: u64, seed: u64) -> (f64, f64, f64) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let (mut per_cycle, mut fp, mut n) = (Vec::new(), 0u64, 0u64);
        // The first cycle starts from an empty filter and a two-phase one's
        // frozen half is empty until the first swap: both are skipped.
        let skip = 2;
        while f.stats().recycles < cycles + skip {
            let before = f.stats().recycles;
            let new = f.test_and_insert(rng.random());
            if f.stats().recycles != before {
                if before >= skip {
                    per_cycle.push((fp as f64, n as f64));
                }
                (fp, n) = (0, 0);
            }
            fp += u64::from(!new);
            n += 1;
        }
        let c = per_cycle.len() as f64;
        let (sum_fp, sum_n) = per_cycle
            .iter()
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let rate = sum_fp / sum_n;
        let mean_n = sum_n / c;
        let var = per_cycle
            .iter()
            .map(|(x, y)| (x - rate * y).powi(2))
            .sum::<f64>()
            / (c - 1.0);
        (rate, (var / c).sqrt() / mean_n, mean_n)
    }

    fn filter(
        m: usize,
        k: usize,
        sigma: u64,
        hashing: Hashing,
        retaining: bool,
        two_phase: bool,
        layout: BitLayout,
    ) -> RecyclingBloomFilter {
        RecyclingBloomFilter::new(
            m,
            k,
            RecyclePolicy::Sigma(sigma),
            hashing,
            retaining,
            two_phase,
        )
        .with_layout(layout)
    }

    /// (R3) and (R4) of `model::blocked_recycling` against the filter, for
    /// one and two phases, colliding and distinct positions, with and
    /// without retention: the long-term rate within 3 standard errors, and
    /// the messages a cycle within 1 %.
    #[test]
    fn long_term_rate_matches_the_poisson_mixture() {
        for (m, k, fill, hashing, retaining, two_phase, seed) in [
            (
                1usize << 16,
                4usize,
                0.5,
                Hashing::Colliding,
                false,
                false,
                1u64,
            ),
            (1 << 17, 3, 0.6, Hashing::Colliding, false, true, 2),
            (1 << 16, 5, 0.45, Hashing::NonColliding, true, false, 3),
            (1 << 15, 2, 0.3, Hashing::NonColliding, false, true, 4),
        ] {
            let sigma = (fill * m as f64) as u64;
            let f = filter(
                m,
                k,
                sigma,
                hashing,
                retaining,
                two_phase,
                BitLayout::Blocked,
            );
            let (measured, se, per_cycle) = measured_rate(f, 60, seed);
            let (model, expected) =
                blocked_rates(m as u64, k as u32, sigma, hashing, retaining, two_phase).unwrap();
            let label = format!(
                "m {m} k {k} sigma {sigma} {hashing:?} retaining {retaining} two-phase {two_phase}"
            );
            assert!(
                (measured - model).abs() <= 3.0 * se,
                "{label}: measured {measured:.6} +- {se:.6}, model {model:.6}"
            );
            assert!(
                (per_cycle / expected - 1.0).abs() < 0.01,
                "{label}: {per_cycle} messages a cycle, model {expected}"
            );
        }
    }

    /// Blocking costs accuracy, and by what the model says: at the same
    /// size and sigma the blocked filter's measured rate is above the
    /// scattered one's by more than their errors, each within 3 standard
    /// errors of its own model (004's chain for the scattered layout).
    #[test]
    fn blocking_raises_the_rate_as_modelled() {
        let (m, k, sigma) = (1usize << 18, 4usize, 1u64 << 17);
        let run = |layout, seed| {
            let f = filter(m, k, sigma, Hashing::Colliding, false, false, layout);
            measured_rate(f, 40, seed)
        };
        let (blocked, se_b, _) = run(BitLayout::Blocked, 5);
        let (scattered, se_s, _) = run(BitLayout::Scattered, 6);
        let model_b =
            blocked_average_fpr(m as u64, k as u32, sigma, Hashing::Colliding, false, false)
                .unwrap();
        let model_s =
            average_fpr(m as u64, k as u32, sigma, Hashing::Colliding, false, false).unwrap();
        assert!(
            (blocked - model_b).abs() <= 3.0 * se_b,
            "{blocked} +- {se_b} vs {model_b}"
        );
        assert!(
            (scattered - model_s).abs() <= 3.0 * se_s,
            "{scattered} +- {se_s} vs {model_s}"
        );
        assert!(model_b > model_s * 1.03, "{model_b} vs {model_s}");
        assert!(
            blocked - scattered > 3.0 * (se_b * se_b + se_s * se_s).sqrt(),
            "blocked {blocked} +- {se_b}, scattered {scattered} +- {se_s}"
        );
    }

    /// (R1) after `n` messages, against a filter that never recycles.
    #[test]
    fn rate_after_n_messages_matches_the_mixture() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let (m, k) = (1usize << 16, 4usize);
        for n in [4_000u64, 12_000, 20_000] {
            let mut f = filter(
                m,
                k,
                m as u64 - 1,
                Hashing::Colliding,
                false,
                false,
                BitLayout::Blocked,
            );
            for _ in 0..n {
                f.test_and_insert(rng.random());
            }
            // Fresh messages, asked without inserting them.
            let trials = 200_000u64;
            let hits = (0..trials).filter(|_| f.contains(rng.random())).count() as f64;
            let measured = hits / trials as f64;
            let model = blocked_fpr_after(m as u64, k as u32, Hashing::Colliding, n as f64);
            let se = (model * (1.0 - model) / trials as f64).sqrt();
            assert!(
                (measured - model).abs() <= 3.0 * se,
                "n {n}: measured {measured}, model {model}, se {se}"
            );
        }
    }

    /// `q(l)` against closed forms where they exist, and its shape: it only
    /// rises, to 1.
    #[test]
    fn block_occupancy_closed_forms() {
        // Colliding, k = 1: after l single positions a block has each bit
        // set with probability 1 - (1 - 1/s)^l, so q(l) is that.
        let mut one = BlockOccupancy::new(512, 1, Hashing::Colliding);
        for l in [0u64, 1, 7, 100, 1000] {
            let want = 1.0 - (1.0 - 1.0f64 / 512.0).powi(l as i32);
            assert!(
                (one.q(l) - want).abs() < 1e-12,
                "l {l}: {} vs {want}",
                one.q(l)
            );
        }
        // Non-colliding, k = 2, one message: the new message's two bits
        // are the old one's with probability 1 / C(512, 2).
        let mut two = BlockOccupancy::new(512, 2, Hashing::NonColliding);
        assert_eq!(two.q(0), 0.0);
        assert!((two.q(1) - 1.0 / (512.0 * 511.0 / 2.0)).abs() < 1e-15);
        // Colliding, k = 2, one message: both new positions in the set
        // bits X, where X = 1 with probability 1/512 and 2 otherwise.
        let mut c2 = BlockOccupancy::new(512, 2, Hashing::Colliding);
        let s = 512.0f64;
        let want = (1.0 / s) * (1.0 / s).powi(2) + (1.0 - 1.0 / s) * (2.0 / s).powi(2);
        assert!((c2.q(1) - want).abs() < 1e-15, "{} vs {want}", c2.q(1));
        // q only rises, to 1.
        let mut four = BlockOccupancy::new(512, 4, Hashing::Colliding);
        let qs: Vec<f64> = (0..3000).map(|l| four.q(l)).collect();
        assert!(qs.windows(2).all(|w| w[1] >= w[0]));
        // (1 - e^(-4 * 2999 / 512))^4 is 1 - 2.7e-10.
        assert!(qs[2999] > 1.0 - 1e-9 && qs[2999] < 1.0);
        assert_eq!(four.q(100_000), 1.0);
    }

    /// Sizing for a target: the sigma found is the largest within it, and
    /// below 004's sigma for the same filter (blocking costs accuracy, so
    /// it recycles sooner); one block is 004's filter and its sizing.
    #[test]
    fn sizing_is_the_largest_sigma_within_the_target() {
        for (m, k, two_phase, target) in [
            (1u64 << 20, 4u32, false, 0.01),
            (1 << 18, 3, true, 0.02),
            (1 << 16, 6, false, 0.001),
        ] {
            let h = Hashing::Colliding;
            let s = blocked_sigma_for_target(m, k, h, false, two_phase, target).unwrap();
            let at = blocked_average_fpr(m, k, s.sigma, h, false, two_phase).unwrap();
            let above = blocked_average_fpr(m, k, s.sigma + 1, h, false, two_phase).unwrap();
            assert!(at <= target && above > target, "m {m} k {k}: {at} {above}");
            let scattered = sigma_for_target(m, k, h, false, two_phase, target).unwrap();
            assert!(
                s.sigma < scattered.sigma,
                "m {m}: {} vs {}",
                s.sigma,
                scattered.sigma
            );
        }
        let small = blocked_sigma_for_target(800, 3, Hashing::Colliding, false, false, 0.01);
        assert_eq!(
            small,
            sigma_for_target(800, 3, Hashing::Colliding, false, false, 0.01)
        );
    }

    /// Every message's positions lie in one 512-bit block (the last block
    /// taking the remainder), and the answers are those of a Bloom filter:
    /// no false negatives before a recycle.
    #[test]
    fn positions_stay_in_one_block() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for m in [512usize, 1000, 1536, 4096 + 300] {
            for hashing in [Hashing::Colliding, Hashing::NonColliding] {
                let mut f = filter(
                    m,
                    6,
                    m as u64 - 1,
                    hashing,
                    false,
                    false,
                    BitLayout::Blocked,
                );
                let blocks = (m / 512).max(1);
                let mut seen = Vec::new();
                for _ in 0..40 {
                    let h: u64 = rng.random();
                    let before: Vec<usize> = f.halves().0.ones().collect();
                    assert!(f.test_and_insert(h) || before.len() == f.halves().0.ones().count());
                    let after: Vec<usize> = f.halves().0.ones().collect();
                    let fresh: Vec<usize> = after
                        .iter()
                        .copied()
                        .filter(|p| !before.contains(p))
                        .collect();
                    if let Some(&first) = fresh.first() {
                        let block = (first / 512).min(blocks - 1);
                        assert!(
                            fresh.iter().all(|&p| (p / 512).min(blocks - 1) == block),
                            "m {m}: {fresh:?}"
                        );
                    }
                    seen.push(h);
                }
                if f.stats().recycles == 0 {
                    assert!(seen.iter().all(|&h| !f.test_and_insert(h)), "m {m}");
                }
            }
        }
    }
}

// ---------- The blocked Bloom filter ----------

mod blocked_bloom {
    use flowsieve::filter::{BlockedBloomFilter, BloomFilter, Membership};
    use flowsieve::model::blocked;
    use rand::{Rng, SeedableRng};

    /// The false-positive rate of keys never inserted, against (B1) at
    /// theta = 1, within 3 standard errors; no false negatives; every key's
    /// bits in one 512-bit block.
    #[test]
    fn false_positive_rate_matches_the_mixture() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
        for (m, n, k) in [
            (1usize << 16, 6_554u64, 7usize),
            (1 << 14, 4_000, 3),
            (100_000, 8_000, 9),
        ] {
            let mut f = BlockedBloomFilter::new(m, k);
            assert_eq!(f.m() % 512, 0);
            assert!(f.m() >= m && f.m() < m + 512);
            let keys: Vec<u64> = (0..n).map(|_| rng.random()).collect();
            // Each key's new bits lie in one block (checked on the first
            // 200 keys, while most of their bits are new).
            for &h in &keys[..200] {
                let before: Vec<usize> = f.bits().ones().collect();
                f.insert(h);
                let fresh: Vec<usize> = f.bits().ones().filter(|p| !before.contains(p)).collect();
                assert!(!fresh.is_empty() && fresh.len() <= k);
                assert!(fresh.iter().all(|p| p / 512 == fresh[0] / 512), "{fresh:?}");
            }
            for &h in &keys {
                f.insert(h);
            }
            assert!(keys.iter().all(|&h| f.contains(h)), "no false negatives");
            let trials = 300_000u64;
            let hits = (0..trials).filter(|_| f.contains(rng.random())).count() as f64;
            let measured = hits / trials as f64;
            let model = f.model_fpr(n);
            // The closed form of (B1) at theta = 1, against the general one.
            let general = blocked::fpr_blocked(1, k as u32, n, f.blocks() as u64, 512);
            assert!(
                (model - general).abs() < 1e-12 * general,
                "{model} vs {general}"
            );
            let se = (model * (1.0 - model) / trials as f64).sqrt();
            assert!(
                (measured - model).abs() <= 3.0 * se,
                "m {m} n {n} k {k}: measured {measured}, model {model}, se {se}"
            );
            // Blocking costs accuracy against the partitioned filter.
            assert!(model > BloomFilter::new(f.m(), k).model_fpr(n));
        }
    }
}
