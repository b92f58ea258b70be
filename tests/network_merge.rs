//! The network mode without a server: the digest codec, the merge and the
//! collector's bookkeeping. Probes are simulated by running the pipeline on
//! disjoint splits of a trace and taking the heavy stage's window exports
//! in process; the merged result is compared with one run on the whole
//! trace.

use flowsieve::class::Classifier;
use flowsieve::dissect::FlowKey;
use flowsieve::filter::{BloomFilter, CounterWidth, Counters, CountingBloomFilter};
use flowsieve::network::book::{ConsumerView, STORED_SPANS_MAX, shard_waits};
use flowsieve::network::{
    Book, Digest, DigestError, NetworkConfig, ProbeState, ShardWindowMerge, ShardWindowResult,
    Verdict,
};
use flowsieve::pipeline::{Candidate, PipelineConfig, StageList, StageName};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common;

use common::network::{TRACE, assert_merged_is_whole, digest, probe_run, split_trace, whole_trace};

fn base_config(conservative: bool) -> PipelineConfig {
    let mut c = PipelineConfig::new(Classifier::ports());
    c.stages = StageList::none();
    c.stages.set(StageName::Heavy, true);
    c.replay.truth = false;
    c.threads = 2;
    c.shards = 4;
    c.heavy.counters = 1 << 16;
    c.heavy.conservative = conservative;
    c.epoch_windows = true;
    c
}

fn net_config(cfg: &PipelineConfig, probes: u32) -> NetworkConfig {
    let heavy = cfg.heavy.validate(cfg.shards).unwrap();
    NetworkConfig {
        version: 1,
        shards: cfg.shards as u32,
        window_ns: cfg.heavy.window.span(),
        theta: cfg.heavy.theta,
        counters: cfg.heavy.counters as u64,
        counter_bits: cfg.heavy.width.bits(),
        k: heavy.k() as u32,
        conservative: cfg.heavy.conservative,
        presence_bits: 1 << 14,
        presence_k: 4,
        hash_key: cfg.replay.hash_key.to_string(),
        probes,
        classes: cfg.replay.classifier.names().to_vec(),
    }
}

#[test]
fn four_probes_merge_to_the_whole_trace() {
    let dir = tempfile::tempdir().unwrap();
    let splits = split_trace(Path::new(TRACE), 4, dir.path());
    let cfg = base_config(false);
    let net = net_config(&cfg, 4);
    let (whole, counts) = whole_trace(&cfg, &net);
    let mut book: Book<usize> = Book::new(net.clone(), (0..4).collect());
    let mut token = 0;
    for (i, f) in splits.iter().enumerate() {
        for w in probe_run(&cfg, &net, std::slice::from_ref(f)) {
            let d = digest(&net, &format!("p{i}"), &w);
            let bytes = d.encode();
            let back = Digest::decode(&bytes).unwrap();
            let (v, t) = book.offer(&back, token, 0, None);
            assert_eq!(v, Verdict::Merged);
            assert!(t.is_none());
            token += 1;
        }
    }
    let probes: Vec<ProbeState> = (0..4)
        .map(|i| state(&format!("p{i}"), u64::MAX, true))
        .collect();
    let results = book.ready(&probes, 0, u64::MAX);
    assert_eq!(book.pending(), 0);
    assert_eq!(
        results.len(),
        whole.len(),
        "one result per shard-window with packets"
    );
    let held: usize = results.iter().map(|(_, t)| t.len()).sum();
    assert_eq!(held, token, "every digest is acknowledged with its window");
    let by_key: BTreeMap<(u64, u32), _> = results
        .iter()
        .map(|(r, _)| ((r.window, r.shard), r))
        .collect();
    let mut heavy_true = 0;
    for w in &whole {
        let r = by_key[&(w.window, w.shard as u32)];
        heavy_true += assert_merged_is_whole(w, r, &counts, net.theta);
    }
    assert!(
        heavy_true > 50,
        "the trace has heavy flows to find ({heavy_true})"
    );
}

/// A shard-window's counters hold `k` counts a packet (plain update; none
/// of these windows saturates), each candidate's estimate is read back
/// from them, and they code to the bytes of the whole array, whether the
/// shard handed them out as the cells its logged insertions set or as a
/// copy of the array. The trace has windows of both kinds.
#[test]
fn window_counters_hold_every_packet_as_cells_or_whole() {
    use flowsieve::filter::{CounterSnapshot, compress_counting};
    let cfg = base_config(false);
    let net = net_config(&cfg, 1);
    let windows = probe_run(&cfg, &net, &[PathBuf::from(TRACE)]);
    let (mut cells, mut whole) = (0, 0);
    for w in &windows {
        let (mut sum, mut saturated) = (0u64, false);
        let max = w.counters.width().max();
        w.counters.for_each_nonzero(|_, v| {
            sum += v;
            saturated |= v == max;
        });
        assert!(!saturated, "window {} shard {}", w.window, w.shard);
        assert_eq!(
            sum,
            w.packets * u64::from(net.k),
            "window {} shard {}: {} packets",
            w.window,
            w.shard,
            w.packets
        );
        for c in &w.candidates {
            assert_eq!(w.counters.estimate(c.hash), c.estimate);
        }
        let dense = CounterSnapshot::Dense(w.counters.clone().into_dense());
        assert_eq!(dense.compress(), w.counters.compress());
        assert_eq!(
            w.counters.compress(),
            compress_counting(&dense.into_dense())
        );
        match w.counters {
            CounterSnapshot::Sparse(_) => cells += 1,
            CounterSnapshot::Dense(_) => whole += 1,
        }
    }
    assert!(cells > 0 && whole > 0, "{cells} as cells, {whole} whole");
}

#[test]
fn with_conservative_update_merged_estimates_are_never_lower() {
    let dir = tempfile::tempdir().unwrap();
    let splits = split_trace(Path::new(TRACE), 4, dir.path());
    let cfg = base_config(true);
    let net = net_config(&cfg, 4);
    let (whole, counts) = whole_trace(&cfg, &net);
    let mut merges: BTreeMap<(u64, u32), ShardWindowMerge> = BTreeMap::new();
    for (i, f) in splits.iter().enumerate() {
        for w in probe_run(&cfg, &net, std::slice::from_ref(f)) {
            let d = digest(&net, &format!("p{i}"), &w);
            merges
                .entry((w.window, w.shard as u32))
                .or_insert_with(|| ShardWindowMerge::new(&net, w.shard as u32, w.window))
                .add(&d)
                .unwrap();
        }
    }
    let mut checked = 0;
    for w in &whole {
        let m = &merges[&(w.window, w.shard as u32)];
        let r = m.finish(vec![]);
        let merged: BTreeSet<u64> = r
            .heavy
            .iter()
            .map(|f| u64::from_str_radix(&f.hash, 16).unwrap())
            .collect();
        for c in &w.candidates {
            // Each probe's conservative estimate bounds its own count, so
            // the sum bounds the whole count, and the whole run's
            // conservative estimate is the tightest of these bounds.
            assert!(m.estimate(c.hash) >= c.estimate, "{:?}", c.key);
            let n = counts.get(&(w.window, c.hash)).copied().unwrap_or(0);
            assert!(m.estimate(c.hash) >= n);
            if n >= net.theta {
                assert!(
                    merged.contains(&c.hash),
                    "true heavy flow {:?} missed",
                    c.key
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 50);
}

#[test]
fn a_probe_merged_once_is_never_merged_twice() {
    let cfg = base_config(false);
    let net = net_config(&cfg, 2);
    let runs = probe_run(&cfg, &net, &[PathBuf::from(TRACE)]);
    let w = &runs[0];
    let d = digest(&net, "a", w);
    let mut book: Book<u32> = Book::new(net.clone(), vec![w.shard as u32]);
    assert_eq!(book.offer(&d, 1, 0, None), (Verdict::Merged, None));
    // A redelivery within the window: held (acknowledged with the window)
    // but not merged.
    assert_eq!(
        book.offer(&d, 2, 0, None),
        (Verdict::Duplicate { held: true }, None)
    );
    let states = |wm_b: u64| vec![state("a", w.window + 1, false), state("b", wm_b, false)];
    // Probe b has not passed the window: nothing is ready before the
    // lateness ...
    assert!(book.ready(&states(w.window), 10, 1_000).is_empty());
    // ... and once it has, the window is complete without a digest of b
    // (b had no packets in this shard).
    let done = book.ready(&states(w.window + 1), 20, 1_000);
    assert_eq!(done.len(), 1);
    let (r, tokens) = &done[0];
    assert_eq!(tokens, &vec![1, 2]);
    assert!(!r.partial);
    assert_eq!(r.packets, w.packets);
    // After the write: a re-send is a duplicate, a newcomer is late; both
    // are acknowledged at once and neither is merged.
    assert_eq!(
        book.offer(&d, 3, 30, Some(&r.probes)),
        (Verdict::Duplicate { held: false }, Some(3))
    );
    let other = digest(&net, "c", w);
    assert_eq!(
        book.offer(&other, 4, 30, Some(&r.probes)),
        (Verdict::Late, Some(4))
    );
    assert_eq!(book.pending(), 0);
}

#[test]
fn a_window_past_the_lateness_is_written_partial_naming_the_missing() {
    let cfg = base_config(false);
    let net = net_config(&cfg, 3);
    let runs = probe_run(&cfg, &net, &[PathBuf::from(TRACE)]);
    let w = &runs[0];
    let mut book: Book<u32> = Book::new(net.clone(), vec![w.shard as u32]);
    book.offer(&digest(&net, "a", w), 1, 0, None);
    let states = vec![state("a", w.window + 1, false), state("b", 0, false)];
    assert!(book.ready(&states, 999, 1_000).is_empty());
    let done = book.ready(&states, 1_000, 1_000);
    assert_eq!(done.len(), 1);
    assert!(done[0].0.partial);
    assert_eq!(
        done[0].0.missing,
        vec!["b".to_string(), "(1 undeclared)".to_string()]
    );
}

#[test]
fn digests_of_another_configuration_are_refused() {
    let cfg = base_config(false);
    let net = net_config(&cfg, 2);
    let runs = probe_run(&cfg, &net, &[PathBuf::from(TRACE)]);
    let mut other = net.clone();
    other.theta += 1;
    let d = digest(&other, "a", &runs[0]);
    let mut m = ShardWindowMerge::new(&net, runs[0].shard as u32, runs[0].window);
    assert!(m.add(&d).is_err());
    assert!(m.probes().is_empty());
    let diff = net.differences(&other);
    assert_eq!(diff.len(), 1);
    assert_eq!(
        diff[0].to_string(),
        format!(
            "theta is {} in the shared configuration but {} here",
            net.theta, other.theta
        )
    );
}

/// A shard with digests delivered elsewhere (a crashed collector's, not
/// yet redelivered) completes nothing, not even past the lateness, while
/// the other shards go on; `held` counts what the book holds per shard, so
/// the collector can compare it with the server's unacknowledged count.
#[test]
fn a_blocked_shard_completes_nothing_until_its_digests_are_back() {
    let cfg = base_config(false);
    let net = net_config(&cfg, 1);
    let runs = probe_run(&cfg, &net, &[PathBuf::from(TRACE)]);
    let first = &runs[0];
    let other = runs
        .iter()
        .find(|w| w.shard != first.shard)
        .expect("a window of another shard");
    let shards = vec![first.shard as u32, other.shard as u32];
    let mut book: Book<u32> = Book::new(net.clone(), shards.clone());
    book.offer(&digest(&net, "a", first), 1, 0, None);
    book.offer(&digest(&net, "a", first), 2, 0, None);
    book.offer(&digest(&net, "a", other), 3, 0, None);
    assert_eq!(book.held(first.shard as u32), 2);
    assert_eq!(book.held(other.shard as u32), 1);
    assert_eq!(book.held_tokens().count(), 3);
    let done_all = vec![state("a", u64::MAX, true)];
    let mut ready = book.shards_ready(&done_all, 0, 1_000);
    ready.sort_unstable();
    let mut want = shards.clone();
    want.sort_unstable();
    assert_eq!(ready, want);
    // Past the lateness too: the blocked shard stays.
    let blocked = [first.shard as u32];
    let done = book.ready_except(&done_all, 5_000, 1_000, &blocked);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].0.shard, other.shard as u32);
    assert_eq!(book.held(first.shard as u32), 2);
    assert!(book.is_pending(first.window, first.shard as u32));
    // Once nothing is out elsewhere, it completes, with every digest.
    let done = book.ready_except(&done_all, 5_000, 1_000, &[]);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].1, vec![1, 2]);
    assert!(!done[0].0.partial);
    assert_eq!(done[0].0.packets, first.packets);
    assert_eq!(book.pending(), 0);
}

/// One message delivered twice is one message pending at the server. The
/// collector holds both deliveries (a held duplicate within the window)
/// and must count them once when it sets what it holds against the
/// server's count: counted twice, they hide a digest still out with a
/// crashed collector, and the window it belongs to is written without it.
/// This happened with nats-server 2.9.10 (see `Book::held_distinct`).
#[test]
fn a_message_delivered_twice_hides_no_digest_held_elsewhere() {
    let cfg = base_config(false);
    let net = net_config(&cfg, 2);
    let runs = probe_run(&cfg, &net, &[PathBuf::from(TRACE)]);
    let first = &runs[0];
    let last = runs
        .iter()
        .rev()
        .find(|w| w.shard == first.shard && w.window > first.window)
        .expect("a later window of the same shard");
    let shard = first.shard as u32;
    // Tokens are (stream sequence, delivery). Probe a's digest of the first
    // window is here; b's is out with a crashed collector (sequence 2).
    // a's digest of the last window came twice, as the same message.
    let mut book: Book<(u64, u32)> = Book::new(net.clone(), vec![shard]);
    book.offer(&digest(&net, "a", first), (1, 3), 0, None);
    book.offer(&digest(&net, "a", last), (9, 1), 0, None);
    let (verdict, back) = book.offer(&digest(&net, "a", last), (9, 1), 0, None);
    assert!(matches!(verdict, Verdict::Duplicate { held: true }));
    assert!(back.is_none());
    let sequence = |&(seq, _): &(u64, u32)| Some(seq);
    assert_eq!(book.held(shard), 3);
    assert_eq!(book.held_distinct(shard, sequence), 2);
    // Without an identity, every delivery counts.
    assert_eq!(book.held_distinct(shard, |_| None::<u64>), 3);
    // The server: sequences 1, 2 and 9 delivered and not acknowledged.
    let view = ConsumerView {
        ack_pending: 3,
        undelivered: 0,
        delivered_through: 960,
    };
    assert!(!shard_waits(view, book.held(shard) as u64, Some(960)));
    assert!(shard_waits(
        view,
        book.held_distinct(shard, sequence) as u64,
        Some(960)
    ));
    let both = vec![state("a", u64::MAX, true), state("b", u64::MAX, true)];
    let held = book.held_distinct(shard, sequence) as u64;
    let ready = book.ready_unless(&both, 0, 60_000, |_, bound| {
        shard_waits(view, held, bound.or(Some(960)))
    });
    assert!(ready.is_empty(), "a window written without b's digest");
    // Once b's digest is back here, both windows complete, whole.
    book.offer(&digest(&net, "b", first), (2, 2), 0, None);
    let held = book.held_distinct(shard, sequence) as u64;
    assert_eq!(held, 3);
    let ready = book.ready_unless(&both, 0, 60_000, |_, bound| {
        shard_waits(view, held, bound.or(Some(960)))
    });
    assert_eq!(ready.len(), 2);
    let whole = ready
        .iter()
        .find(|(r, _)| r.window == first.window)
        .unwrap();
    assert!(!whole.0.partial);
    assert_eq!(whole.0.probes.len(), 2);
}

/// A backlog: a collector that starts after the probes have published
/// everything reads watermarks past every window, so the stream's last
/// sequence bounds them all, and it used to hold the whole backlog before
/// writing one window. With the probes' spans, a window waits only until
/// the consumer has delivered through the sequence its own digests are at
/// or below; a window of a probe without spans (or a partial one) still
/// waits for the stream's end.
#[test]
fn a_window_waits_only_for_the_sequence_its_own_digests_are_at() {
    let cfg = base_config(false);
    let net = net_config(&cfg, 2);
    let runs = probe_run(&cfg, &net, &[PathBuf::from(TRACE)]);
    // Two windows of one shard.
    let early = &runs[0];
    let late = runs
        .iter()
        .find(|r| r.shard == early.shard && r.window > early.window)
        .unwrap();
    let shard = early.shard as u32;
    let (e, l) = (early.window, late.window);
    let mut book: Book<u32> = Book::new(net.clone(), vec![shard]);
    book.offer(&digest(&net, "a", early), 1, 0, None);
    book.offer(&digest(&net, "b", early), 2, 0, None);
    book.offer(&digest(&net, "a", late), 3, 0, None);
    let mut a = state("a", l + 1, true);
    a.record_stored(0, e + 1, 10);
    a.record_stored(e + 1, l + 1, 50);
    let mut b = state("b", l + 1, true);
    b.record_stored(0, l + 1, 30);
    let probes = vec![a.clone(), b.clone()];
    assert_eq!(Book::<u32>::stored_bound(e, &probes), Some(30));
    assert_eq!(Book::<u32>::stored_bound(l, &probes), Some(50));
    // The consumer, as a collector sees it after a drain that stopped at
    // sequence `through`, with the stream's end at 400.
    let view = |through: u64| ConsumerView {
        ack_pending: 3,
        undelivered: 100,
        delivered_through: through,
    };
    let covered = Some(400);
    let ready = |book: &mut Book<u32>, probes: &[ProbeState], through: u64| {
        book.ready_unless(probes, 0, 1_000, |_, bound| {
            shard_waits(view(through), 3, bound.or(covered))
        })
        .into_iter()
        .map(|(r, tokens)| (r.window, tokens))
        .collect::<Vec<_>>()
    };
    // Delivered through 29: neither window is covered.
    assert!(ready(&mut book, &probes, 29).is_empty());
    // Through 30: the early window (both probes' digests of it are at or
    // below 30), not the late one (a's digests of it reach 50).
    assert_eq!(ready(&mut book, &probes, 30), vec![(e, vec![1, 2])]);
    assert!(ready(&mut book, &probes, 49).is_empty());
    assert_eq!(ready(&mut book, &probes, 50), vec![(l, vec![3])]);
    assert_eq!(book.pending(), 0);
    // Without b's spans, the early window waits for the stream's end.
    let mut book: Book<u32> = Book::new(net.clone(), vec![shard]);
    book.offer(&digest(&net, "a", early), 1, 0, None);
    let old_b = state("b", l + 1, true);
    let probes = vec![a, old_b];
    assert_eq!(Book::<u32>::stored_bound(e, &probes), None);
    assert!(ready(&mut book, &probes, 399).is_empty());
    assert_eq!(ready(&mut book, &probes, 400).len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A probe's spans, however many raises it records, stay at most
    /// STORED_SPANS_MAX, contiguous from its first window to its
    /// watermark, and never bound a window below the sequence its digests
    /// were acknowledged at.
    #[test]
    fn stored_spans_stay_few_contiguous_and_true(
        raises in proptest::collection::vec((1u64..20, 0u64..1000), 1..1200),
        start in 0u64..1_000_000,
    ) {
        let mut p = state("a", start, false);
        // (window, sequence of its last digest) as a probe stores them.
        let mut truth = Vec::new();
        let (mut wm, mut seq) = (start, 0u64);
        let widest_raise = raises.iter().map(|r| r.1).max().unwrap_or(0);
        for &(windows, stored) in &raises {
            for w in wm..wm + windows {
                // Each window's digests are stored before its raise.
                truth.push((w, seq + stored / (windows - (w - wm))));
            }
            seq += stored;
            p.record_stored(wm, wm + windows, seq);
            wm += windows;
        }
        prop_assert!(p.stored.len() <= STORED_SPANS_MAX);
        prop_assert_eq!(p.stored.first().map(|s| s.from), Some(start));
        prop_assert_eq!(p.stored.last().map(|s| s.to), Some(wm));
        for pair in p.stored.windows(2) {
            prop_assert_eq!(pair[0].to, pair[1].from);
            prop_assert!(pair[0].sequence <= pair[1].sequence);
        }
        // Even in sequence: a merge takes the cheapest of the adjacent
        // pairs, whose costs add up to at most twice the whole range, so
        // no span covers more than one raise did or 2/(MAX - 1) of the
        // range.
        let mut below = 0;
        for sp in &p.stored {
            let range = sp.sequence - below;
            prop_assert!(
                range <= widest_raise || range * (STORED_SPANS_MAX as u64 - 1) <= 2 * seq,
                "{:?}",
                p.stored
            );
            below = sp.sequence;
        }
        for &(w, s) in &truth {
            let bound = p.stored_through(w);
            prop_assert!(bound.is_some_and(|b| b >= s), "window {} at {}: {:?}", w, s, bound);
        }
        prop_assert_eq!(p.stored_through(wm), None);
        prop_assert_eq!(p.stored_through(start.wrapping_sub(1)), None);
        // The state stays small enough for a key-value entry.
        prop_assert!(serde_json::to_vec(&p).unwrap().len() < 20 * 1024);
    }
}

/// A probe's state: registered from window 0.
fn state(probe: &str, watermark: u64, finished: bool) -> ProbeState {
    ProbeState {
        probe: probe.into(),
        from_window: 0,
        watermark,
        finished,
        lost_windows: vec![],
        stored: vec![],
    }
}

fn arb_digest() -> impl Strategy<Value = Digest> {
    (
        (2usize..6, 1usize..40, 0usize..3),
        proptest::collection::vec(any::<u64>(), 0..3000),
        proptest::collection::vec((any::<[u8; 4]>(), any::<u16>(), any::<u16>()), 0..20),
        "[a-z0-9_-]{1,64}",
        any::<u64>(),
    )
        .prop_map(|((k, parts, width), hashes, cands, probe, fp)| {
            let width = [CounterWidth::W4, CounterWidth::W8, CounterWidth::W16][width];
            let mut counters = CountingBloomFilter::new(k * parts * 16, k, width);
            let mut presence = BloomFilter::new(4096, 3);
            for &h in &hashes {
                counters.insert(h);
                presence.insert(h);
            }
            let candidates = cands
                .iter()
                .map(|&(a, sp, dp)| {
                    let key = FlowKey::v4(a, [10, 0, 0, 1], sp, dp, 6);
                    let hash = flowsieve::hash::flow_hash(&key);
                    Candidate {
                        key,
                        hash,
                        class: sp % 7,
                        estimate: counters.estimate(hash),
                    }
                })
                .collect();
            Digest {
                fingerprint: fp,
                probe,
                shard: (fp % 64) as u32,
                window: fp >> 8,
                packets: hashes.len() as u64,
                class_packets: vec![hashes.len() as u64, 3, 0],
                counters: counters.into(),
                presence,
                candidates,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn digests_round_trip_exactly(d in arb_digest()) {
        let bytes = d.encode();
        let back = Digest::decode(&bytes).unwrap();
        // Every field, and every counter (the filter's count of saturation
        // events over its life is not part of a snapshot).
        prop_assert_eq!(&back.probe, &d.probe);
        prop_assert_eq!((back.fingerprint, back.shard, back.window, back.packets), (d.fingerprint, d.shard, d.window, d.packets));
        prop_assert_eq!(&back.class_packets, &d.class_packets);
        prop_assert_eq!(&back.presence, &d.presence);
        prop_assert_eq!(&back.candidates, &d.candidates);
        prop_assert_eq!((back.counters.m(), back.counters.k(), back.counters.width()), (d.counters.m(), d.counters.k(), d.counters.width()));
        for i in 0..d.counters.m() {
            prop_assert_eq!(back.counters.counter(i), d.counters.counter(i));
        }
        prop_assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn damaged_digests_are_refused(d in arb_digest(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut bytes = d.encode();
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        prop_assert!(Digest::decode(&bytes).is_err());
    }

    #[test]
    fn truncated_digests_are_refused(d in arb_digest(), at in any::<prop::sample::Index>()) {
        let bytes = d.encode();
        let cut = at.index(bytes.len());
        let e = Digest::decode(&bytes[..cut]).unwrap_err();
        let named = matches!(e, DigestError::Truncated { .. } | DigestError::BadMagic(_) | DigestError::Checksum { .. } | DigestError::Trailing(_));
        prop_assert!(named, "{e}");
    }
}

/// The export tap reads the heavy stage; it changes no reported figure.
#[test]
fn exporting_changes_no_reported_figure() {
    for conservative in [false, true] {
        let mut cfg = base_config(conservative);
        cfg.stages = StageList::all();
        cfg.replay.truth = true;
        let net = net_config(&cfg, 3);
        let plain = cfg.validate().unwrap();
        let report = |v: &flowsieve::pipeline::ValidatedConfig| {
            let r = flowsieve::pipeline::run(
                flowsieve::pipeline::FileSource::new(vec![PathBuf::from(TRACE)], v),
                v,
                &mut flowsieve::replay::NoObserver,
                &mut flowsieve::pipeline::NoEvents,
            )
            .unwrap();
            common::report_without_timing(&r)
        };
        let sink = Arc::new(common::network::Collect::default());
        let mut exporting = cfg.clone();
        exporting.export = Some(flowsieve::pipeline::WindowExport {
            candidate_theta: net.candidate_theta(),
            presence_bits: net.presence_bits as usize,
            presence_k: net.presence_k as usize,
            sink: sink.clone(),
        });
        let with = report(&exporting.validate().unwrap());
        assert!(report(&plain) == with, "the export tap changed the report");
        assert!(!sink.0.lock().unwrap().is_empty());
    }
}

/// Four probes on four splits of the bundled trace, merged: the network
/// report over all windows, and the whole trace's exact per-window flow
/// counts (`(window, flow hash) -> packets`).
fn four_probe_report() -> (
    flowsieve::network::results::NetworkReport,
    NetworkConfig,
    std::collections::HashMap<(u64, u64), u64>,
) {
    let (results, net, counts) = four_probe_results();
    (
        flowsieve::network::results::assemble(&net, &results, None),
        net,
        counts,
    )
}

/// The shard-window results [`four_probe_report`] puts together.
fn four_probe_results() -> (
    Vec<ShardWindowResult>,
    NetworkConfig,
    std::collections::HashMap<(u64, u64), u64>,
) {
    let dir = tempfile::tempdir().unwrap();
    let splits = split_trace(Path::new(TRACE), 4, dir.path());
    let cfg = base_config(false);
    let net = net_config(&cfg, 4);
    let (_, counts) = whole_trace(&cfg, &net);
    let mut book: Book<usize> = Book::new(net.clone(), (0..4).collect());
    for (i, f) in splits.iter().enumerate() {
        for w in probe_run(&cfg, &net, std::slice::from_ref(f)) {
            let d = Digest::decode(&digest(&net, &format!("p{i}"), &w).encode()).unwrap();
            assert_eq!(book.offer(&d, 0, 0, None).0, Verdict::Merged);
        }
    }
    let probes: Vec<ProbeState> = (0..4)
        .map(|i| state(&format!("p{i}"), u64::MAX, true))
        .collect();
    let results: Vec<_> = book
        .ready(&probes, 0, u64::MAX)
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    (results, net, counts)
}

/// A probe noted late in one shard-window's result is named by the network
/// report for that window alone: in its `late` list, in `late_windows`, in
/// the windows table's `late` column and in a line of its own, while every
/// figure stays as without the note. A result with no late probe stores no
/// `late` key (the stored bytes of correct operation do not change), and
/// one stored before the field reads as having none.
#[test]
fn a_late_probe_noted_in_a_result_is_named_by_the_network_report() {
    use flowsieve::network::results::assemble;
    use flowsieve::report::{Cell, Section};
    let (mut results, net, _) = four_probe_results();
    let plain = assemble(&net, &results, None);
    assert!(plain.network.late_windows.is_empty());
    let json = serde_json::to_value(&results[0]).unwrap();
    assert!(json.get("late").is_none(), "{json}");
    let mut old = json.clone();
    old.as_object_mut().unwrap().remove("late");
    assert_eq!(
        serde_json::from_value::<ShardWindowResult>(old).unwrap(),
        results[0]
    );

    let at = results.len() / 2;
    let (window, shard) = (results[at].window, results[at].shard);
    assert!(results[at].note_late("p9"));
    assert!(results[at].note_late("p1"));
    assert!(!results[at].note_late("p9"), "noted twice");
    assert_eq!(results[at].late, ["p1", "p9"]);
    let json = serde_json::to_value(&results[at]).unwrap();
    assert_eq!(json["late"], serde_json::json!(["p1", "p9"]));
    assert_eq!(
        serde_json::from_value::<ShardWindowResult>(json).unwrap(),
        results[at]
    );

    let noted = assemble(&net, &results, None);
    assert_eq!(noted.network.late_windows, [window]);
    assert_eq!(noted.network.partial_windows, plain.network.partial_windows);
    for (a, b) in plain.windows.iter().zip(&noted.windows) {
        let mut b = b.clone();
        if b.window == window {
            assert_eq!(b.late, ["p1", "p9"], "shard {shard}");
            b.late.clear();
        }
        assert!(b.late.is_empty(), "window {}", b.window);
        assert_eq!(*a, b);
    }
    let lines = noted.lines();
    let named: Vec<_> = lines.iter().filter(|l| l.contains("lacks")).collect();
    assert_eq!(
        named,
        [&format!(
            "window {window} lacks the digests of p1, p9 in some shard: they came after it was written, and are not in its figures"
        )]
    );
    assert!(!plain.lines().iter().any(|l| l.contains("lacks")));
    let tables = noted.tables();
    let rows = &tables[0];
    let late_column = rows
        .columns
        .iter()
        .position(|c| c.key == "late")
        .expect("a late column");
    let row = noted
        .windows
        .iter()
        .position(|w| w.window == window)
        .unwrap();
    for (i, r) in rows.rows.iter().enumerate() {
        let expected = if i == row { "p1 p9" } else { "" };
        assert_eq!(r.cells[late_column], Cell::Text(expected.into()), "row {i}");
    }
}

/// Flows new to the network: per window, the results' estimate of the
/// flows present now but in no probe's previous window is within the
/// presence filters' estimation error of the exact count read from the
/// trace; a heavy flow called new truly had no packet in the previous
/// window (a Bloom filter has no false negatives), and the first window,
/// with nothing before it, says it cannot tell.
#[test]
fn flows_new_to_the_network_are_estimated_and_plotted_per_window() {
    let (report, net, counts) = four_probe_report();
    // The exact flows of each window, network-wide.
    let mut flows: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for &(w, h) in counts.keys() {
        flows.entry(w).or_default().insert(h);
    }
    let first = report.windows.first().unwrap();
    assert_eq!(
        first.new_flows_estimate, None,
        "nothing before the first window"
    );
    assert!(first.heavy.iter().all(|f| f.new.is_none()));
    // The estimator's standard deviation at n flows in one shard's filter
    // (m bits, k hashes): sqrt(m/k^2 (e^{kn/m} - 1 - kn/m)).
    let m = (net.presence_bits / u64::from(net.shards)) as f64;
    let k = f64::from(net.presence_k);
    let sd = |n: f64| ((m / (k * k)) * ((k * n / m).exp() - 1.0 - k * n / m)).sqrt();
    let mut checked = 0;
    for w in &report.windows[1..] {
        let Some(before) = flows.get(&(w.window - 1)) else {
            continue;
        };
        let now = &flows[&w.window];
        let exact = now.difference(before).count() as f64;
        let est = w.new_flows_estimate.expect("the previous window is known");
        // Four standard deviations of both estimates in every shard, plus
        // one flow of rounding per shard.
        let per_shard_now = now.len() as f64 / f64::from(net.shards);
        let per_shard_union = now.union(before).count() as f64 / f64::from(net.shards);
        let per_shard_before = before.len() as f64 / f64::from(net.shards);
        let tolerance =
            f64::from(net.shards) * (4.0 * (sd(per_shard_union) + sd(per_shard_before)) + 1.0);
        assert!(
            (est - exact).abs() <= tolerance,
            "window {}: estimated {est:.1} new flows, exactly {exact} (tolerance {tolerance:.1}, {per_shard_now:.0} flows a shard)",
            w.window
        );
        for f in &w.heavy {
            let h = f.hash_value().unwrap();
            match f.new {
                Some(true) => assert!(!before.contains(&h), "{f:?} was in the previous window"),
                Some(false) => {}
                None => panic!("{f:?}: the previous window is known"),
            }
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} windows checked");
    // `results --plot`: one point per window, the new flows one fewer (the
    // first window has none), the packets those of the trace.
    let figures = report.figures();
    let series = |fig: &str, name: &str| {
        figures
            .iter()
            .find(|f| f.name == fig)
            .and_then(|f| f.series.iter().find(|s| s.name == name))
            .map(|s| s.points.iter().map(|p| p.1).collect::<Vec<f64>>())
            .unwrap_or_else(|| panic!("no {fig}/{name}"))
    };
    let n = report.windows.len();
    let packets = series("network_packets", "packets");
    assert_eq!(packets.len(), n);
    let total: u64 = counts.values().sum();
    assert_eq!(packets.iter().sum::<f64>(), total as f64);
    assert_eq!(series("network_flows", "distinct flows").len(), n);
    assert_eq!(series("network_flows", "new to the network").len(), n - 1);
    let heavy = series("network_heavy", "heavy");
    assert_eq!(
        heavy,
        report
            .windows
            .iter()
            .map(|w| w.heavy.len() as f64)
            .collect::<Vec<_>>()
    );
}

/// `flowsieve results` renders through the replay's section renderer: the
/// CSV files hold every window and every heavy flow with the report's own
/// figures (packets adding up to the trace's), and the text lists at most
/// `top` heavy flows a window, saying how many more the CSV holds.
#[test]
fn network_results_render_as_tables_like_a_replay() {
    use flowsieve::network::results::NetworkReport;
    use flowsieve::report::Section;
    let (report, _, counts) = four_probe_report();
    let total: u64 = counts.values().sum();
    let files = report.csv_files();
    let names: Vec<&str> = files.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "network_windows.csv",
            "network_heavy.csv",
            "network_classes.csv"
        ]
    );
    let rows = |name: &str| -> Vec<BTreeMap<String, String>> {
        let text = &files.iter().find(|f| f.0 == name).unwrap().1;
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        lines
            .map(|l| {
                header
                    .iter()
                    .zip(l.split(','))
                    .map(|(h, v)| (h.to_string(), v.to_string()))
                    .collect()
            })
            .collect()
    };
    let num = |r: &BTreeMap<String, String>, c: &str| -> u64 { r[c].parse().unwrap() };
    let windows = rows("network_windows.csv");
    assert_eq!(windows.len(), report.windows.len());
    assert_eq!(
        windows.iter().map(|r| num(r, "packets")).sum::<u64>(),
        total
    );
    for (r, w) in windows.iter().zip(&report.windows) {
        assert_eq!(num(r, "window"), w.window);
        assert_eq!(num(r, "heavy"), w.heavy.len() as u64);
        assert_eq!(
            r["flows_estimate"].parse::<f64>().unwrap(),
            w.flows_estimate
        );
    }
    let heavy = rows("network_heavy.csv");
    let want: Vec<(u64, u64, String)> = report
        .windows
        .iter()
        .flat_map(|w| {
            w.heavy
                .iter()
                .map(|f| (w.window, f.estimate, f.src.clone()))
        })
        .collect();
    let got: Vec<(u64, u64, String)> = heavy
        .iter()
        .map(|r| (num(r, "window"), num(r, "estimate"), r["src"].clone()))
        .collect();
    assert_eq!(got, want);
    assert!(
        want.len() > report.windows.len(),
        "some window has several heavy flows"
    );
    let classes = rows("network_classes.csv");
    assert_eq!(
        classes.iter().map(|r| num(r, "packets")).sum::<u64>(),
        total
    );

    // The text: the heavy table's rows, per window, at most `top`.
    let top = 2;
    let text = NetworkReport {
        listed_per_window: top,
        ..report.clone()
    }
    .text();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("window") && l.contains("estimate"))
        .expect("the heavy table's header");
    let mut listed: BTreeMap<u64, usize> = BTreeMap::new();
    for l in &lines[at + 1..] {
        let Some(w) = l
            .split_whitespace()
            .next()
            .and_then(|w| w.parse::<u64>().ok())
        else {
            break;
        };
        *listed.entry(w).or_default() += 1;
    }
    for w in &report.windows {
        assert_eq!(
            listed.get(&w.window).copied().unwrap_or(0),
            w.heavy.len().min(top),
            "window {}",
            w.window
        );
    }
    let cut: usize = report
        .windows
        .iter()
        .map(|w| w.heavy.len().saturating_sub(top))
        .sum();
    assert!(cut > 0);
    assert!(
        text.contains(&format!("heavy flows beyond {top} per window: {cut} more")),
        "{text}"
    );
    assert!(
        !text.contains("network_classes"),
        "the class table is CSV only"
    );
}

/// The reference a merge is checked against: every cell's sum over the
/// digests and whether any digest's counter was saturated there.
fn summed(digests: &[Digest]) -> (Vec<u32>, Vec<bool>) {
    let m = digests[0].counters.m();
    let mut sums = vec![0u32; m];
    let mut saturated = vec![false; m];
    for d in digests {
        let max = d.counters.width().max();
        for (i, (s, sat)) in sums.iter_mut().zip(saturated.iter_mut()).enumerate() {
            let v = d.counters.counter(i);
            *s = s.saturating_add(v as u32);
            *sat |= v == max;
        }
    }
    (sums, saturated)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A merge's cells are the digests' counters summed, its saturated
    /// cells those saturated in some digest, its checksum that of the sums
    /// and its estimates their minimum over a flow's cells: from windows of
    /// a few packets (held as a map) to full ones (a dense array), and
    /// across the move from one to the other (past m / 32 non-zero cells).
    #[test]
    fn merged_cells_are_the_digests_sums_in_either_form(
        loads in prop::collection::vec(prop_oneof![0usize..6, 0usize..1200], 1..5),
        (k, parts, width) in (2usize..6, 8usize..40, 0usize..3),
        heavy in 0usize..3,
        seed in any::<u64>(),
    ) {
        let width = [CounterWidth::W4, CounterWidth::W8, CounterWidth::W16][width];
        let m = k * parts * 16;
        let cfg = NetworkConfig {
            version: 1,
            shards: 1,
            window_ns: 1_000_000_000,
            theta: 4,
            counters: m as u64,
            counter_bits: width.bits(),
            k: k as u32,
            conservative: false,
            presence_bits: 1024,
            presence_k: 2,
            hash_key: "0".into(),
            probes: loads.len() as u32,
            classes: vec!["all".into()],
        };
        let digests: Vec<Digest> = loads
            .iter()
            .enumerate()
            .map(|(p, &n)| {
                let mut counters = CountingBloomFilter::new(m, k, width);
                let mut presence = BloomFilter::new(1024, 2);
                let mut h = seed ^ p as u64;
                for _ in 0..n {
                    h = flowsieve::hash::fmix64(h.wrapping_add(0x9e37_79b9_7f4a_7c15));
                    counters.insert(h);
                    presence.insert(h);
                }
                // Flows past a 4-bit counter's 15: saturated cells.
                for f in 0..heavy as u64 {
                    for _ in 0..20 {
                        counters.insert(f + 1);
                    }
                }
                Digest {
                    fingerprint: cfg.fingerprint(),
                    probe: format!("p{p}"),
                    shard: 0,
                    window: 7,
                    packets: n as u64,
                    class_packets: vec![n as u64],
                    counters: counters.into(),
                    presence,
                    candidates: vec![],
                }
            })
            .collect();
        let mut merge = ShardWindowMerge::new(&cfg, 0, 7);
        for d in &digests {
            prop_assert!(merge.add(d).unwrap());
        }
        let (sums, saturated) = summed(&digests);
        for (i, &s) in sums.iter().enumerate() {
            prop_assert_eq!(merge.cell(i), s, "cell {}", i);
        }
        prop_assert_eq!(merge.cell(m), 0);
        let result = merge.finish(vec![]);
        prop_assert_eq!(
            result.saturated_cells,
            saturated.iter().filter(|&&s| s).count() as u64
        );
        prop_assert_eq!(
            &result.counters_checksum,
            &format!("{:016x}", flowsieve::network::cells_checksum(&sums))
        );
        let indexer = flowsieve::hash::PartitionedIndexer::new(m, k);
        for q in 0..64u64 {
            let h = flowsieve::hash::fmix64(q ^ seed);
            let want = (0..k).map(|j| u64::from(sums[indexer.index(h, j)])).min().unwrap();
            prop_assert_eq!(merge.estimate(h), want);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A merge's presence filter is the OR of its digests' filters, and
    /// the result's snapshot, set bits and estimate are that filter's:
    /// from windows of a few flows (held as the set bits' positions) to
    /// full ones (the whole filter), across the move from one to the other
    /// (past m / 32 set bits), whatever order the loads come in.
    #[test]
    fn merged_presence_is_the_digests_or_in_either_form(
        loads in prop::collection::vec(prop_oneof![0usize..4, 0usize..40, 0usize..600], 1..6),
        (k, m) in (1usize..5, 64usize..4096),
        seed in any::<u64>(),
    ) {
        let cfg = NetworkConfig {
            version: 1,
            shards: 1,
            window_ns: 1_000_000_000,
            theta: 4,
            counters: 64,
            counter_bits: 8,
            k: 2,
            conservative: false,
            presence_bits: m as u64,
            presence_k: k as u32,
            hash_key: "0".into(),
            probes: loads.len() as u32,
            classes: vec!["all".into()],
        };
        let filters: Vec<BloomFilter> = loads
            .iter()
            .enumerate()
            .map(|(p, &n)| {
                let mut f = BloomFilter::new(m, k);
                let mut h = seed ^ (p as u64) << 40;
                for _ in 0..n {
                    h = flowsieve::hash::fmix64(h.wrapping_add(0x9e37_79b9_7f4a_7c15));
                    f.insert(h);
                }
                f
            })
            .collect();
        let mut merge = ShardWindowMerge::new(&cfg, 0, 3);
        let mut or = filters[0].clone();
        for (p, f) in filters.iter().enumerate() {
            let d = Digest {
                fingerprint: cfg.fingerprint(),
                probe: format!("p{p}"),
                shard: 0,
                window: 3,
                packets: 0,
                class_packets: vec![0],
                counters: CountingBloomFilter::new(64, 2, CounterWidth::W8).into(),
                presence: f.clone(),
                candidates: vec![],
            };
            prop_assert!(merge.add(&d).unwrap());
            or.union(f).unwrap();
            let merged = merge.presence().unwrap();
            prop_assert_eq!(merged.bits().words(), or.bits().words(), "after digest {}", p);
            prop_assert_eq!((merged.m(), merged.k()), (or.m(), or.k()));
        }
        let result = merge.finish(vec![]);
        prop_assert_eq!(result.presence_ones, or.count_ones());
        prop_assert_eq!(result.presence_bits, or.m() as u64);
        let back = result.presence_filter().unwrap();
        prop_assert_eq!(back.bits().words(), or.bits().words());
        prop_assert_eq!(
            result.flows_estimate.to_bits(),
            flowsieve::network::cardinality_estimate(or.m() as u64, k as u64, or.count_ones()).to_bits()
        );
    }
}
