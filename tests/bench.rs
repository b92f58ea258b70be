//! `flowsieve bench`'s memory chase (`bench::chase_cycle`,
//! `bench::random_access_ns`): the buffer's lines form one cycle, so a lap
//! visits every line once, and successive chases carry on round it from
//! where the last one stopped (a chase that restarted at the same line
//! would time the same few lines again, whatever the buffer's size).
//!
//! And the interval of its round-by-round comparison with tcpdump
//! (`bench::median_interval`): the order statistics whose coverage,
//! against exact binomial sums worked out here in integers, is the largest
//! that reaches 95 %.

use flowsieve::bench::{
    BenchAt, BenchError, BenchPart, MEDIAN_INTERVAL_COVERAGE, MEMORY_RUN, PARALLEL_LANES,
    bench_until, chase_cycle, chase_cycle_with_lanes, median_interval, parallel_access_ns,
    random_access_ns, short_trace_note, unkeyed_note,
};
use flowsieve::class::Classifier;
use flowsieve::pipeline::PipelineConfig;
use proptest::prelude::*;
use std::sync::atomic::AtomicBool;

/// Words per 64-byte line.
const WORDS_PER_LINE: usize = 64 / std::mem::size_of::<usize>();

#[test]
fn a_lap_visits_every_line_once_and_chases_carry_on() {
    for bytes in [128usize, 4096, 1 << 20] {
        let cycle = chase_cycle(bytes);
        let lines = bytes / 64;
        assert_eq!(cycle.len(), lines * WORDS_PER_LINE);
        let mut seen = vec![false; lines];
        let mut at = 0;
        for _ in 0..lines {
            assert_eq!(
                at % WORDS_PER_LINE,
                0,
                "a step lands on a line's first word"
            );
            let line = at / WORDS_PER_LINE;
            assert!(
                !seen[line],
                "line {line} of {lines} visited twice in one lap"
            );
            seen[line] = true;
            let ns = random_access_ns(&cycle, &mut at, 1);
            assert!(ns.is_finite() && ns >= 0.0);
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(at, 0, "a lap ends where it began");
        // Three chases of a quarter lap end where one of three quarters does.
        let (mut split, mut whole) = (0, 0);
        for _ in 0..3 {
            random_access_ns(&cycle, &mut split, lines / 4);
        }
        random_access_ns(&cycle, &mut whole, 3 * (lines / 4));
        assert_eq!(split, whole);
    }
}

#[test]
fn the_parallel_lanes_split_the_cycle_evenly_and_each_chases_it() {
    for bytes in [128usize, 64 * 9, 4096, 1 << 20, 3 << 20] {
        let (cycle, lanes) = chase_cycle_with_lanes(bytes);
        assert_eq!(cycle, chase_cycle(bytes), "the same cycle as chase_cycle's");
        let lines = (bytes / 64).max(2);
        // Lane l + 1 is lines * (l + 1) / LANES - lines * l / LANES steps
        // after lane l, and the last lane's share ends at the first lane.
        for l in 0..PARALLEL_LANES {
            let mut at = lanes[l];
            let steps = lines * (l + 1) / PARALLEL_LANES - lines * l / PARALLEL_LANES;
            random_access_ns(&cycle, &mut at, steps);
            assert_eq!(
                at,
                lanes[(l + 1) % PARALLEL_LANES],
                "{bytes} bytes: lane {l} + {steps} steps"
            );
        }
        // Chased together, each lane ends where it would alone, and two
        // chases carry on as one.
        let steps = lines / 3 + 1;
        let mut together = lanes;
        parallel_access_ns(&cycle, &mut together, steps / 2);
        let ns = parallel_access_ns(&cycle, &mut together, steps - steps / 2);
        assert!(ns.is_finite() && ns >= 0.0);
        for (l, &start) in lanes.iter().enumerate() {
            let mut alone = start;
            random_access_ns(&cycle, &mut alone, steps);
            assert_eq!(together[l], alone, "{bytes} bytes: lane {l}");
        }
    }
}

/// `P(B < k)` for `B ~ Binomial(n, 1/2)`, as an exact fraction over `2^n`
/// (integers, so independent of the library's floating-point walk).
fn below(n: u32, k: u32) -> f64 {
    let mut c: u128 = 1; // C(n, 0)
    let mut sum: u128 = 0;
    for i in 0..k {
        sum += c;
        c = c * u128::from(n - i) / u128::from(i + 1);
    }
    sum as f64 / 2f64.powi(n as i32)
}

#[test]
fn the_median_interval_is_the_widest_order_statistic_that_reaches_95_percent() {
    for n in 1u32..=100 {
        let values: Vec<f64> = (0..n).map(f64::from).collect();
        let i = median_interval(&values).unwrap();
        // The interval is [x_k, x_(n+1-k)] on 0, 1, ..., n-1: low = k - 1.
        let k = i.low as u32 + 1;
        assert_eq!(i.high as u32, n - k, "n = {n}: not symmetric");
        let exact = 1.0 - 2.0 * below(n, k);
        assert!(
            (i.coverage - exact).abs() < 1e-9,
            "n = {n}, k = {k}: coverage {} against {exact}",
            i.coverage
        );
        if n >= 6 {
            assert!(i.coverage >= MEDIAN_INTERVAL_COVERAGE, "n = {n}");
            // The next order statistic inwards would fall short.
            assert!(
                k + 1 > n.div_ceil(2) || 1.0 - 2.0 * below(n, k + 1) < MEDIAN_INTERVAL_COVERAGE,
                "n = {n}: k = {k} is not the largest"
            );
        } else {
            // Too few for 95 %: the widest interval there is.
            assert_eq!(k, 1, "n = {n}");
            assert!(i.coverage < MEDIAN_INTERVAL_COVERAGE, "n = {n}");
        }
        assert_eq!(i.median, f64::from(n / 2), "n = {n}");
    }
    // The sign test's interval as its tables give it:
    // 6 rounds 96.9 %, 10 rounds 97.9 % (k = 2), 20 rounds 95.9 % (k = 6).
    let cov = |n: u32| median_interval(&vec![1.0; n as usize]).unwrap().coverage;
    assert!((cov(6) - 0.96875).abs() < 1e-12);
    assert!((cov(10) - (1.0 - 2.0 * 11.0 / 1024.0)).abs() < 1e-12);
    assert!((cov(20) - 0.958_610_534_667_968_8).abs() < 1e-9);
    assert!(median_interval(&[]).is_none());
}

proptest! {
    #[test]
    fn the_median_lies_in_its_interval_whatever_the_order(
        mut values in prop::collection::vec(0.01f64..100.0, 1..60),
        rotate in 0usize..60,
    ) {
        let i = median_interval(&values).unwrap();
        prop_assert!(i.low <= i.median && i.median <= i.high);
        for end in [i.low, i.high, i.median] {
            prop_assert!(values.contains(&end), "{end} is not one of the values");
        }
        let len = values.len();
        values.rotate_left(rotate % len);
        prop_assert_eq!(median_interval(&values), Some(i));
    }
}

/// A bench of traces without a packet stops with
/// [`BenchError::NoPackets`], naming them, before any run; a bench of a
/// short trace runs and carries the note [`short_trace_note`] gives for
/// its packet count.
#[test]
fn traces_without_packets_are_refused_and_short_ones_noted() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pcap");
    pcap_file::pcap::PcapWriter::new(std::fs::File::create(&empty).unwrap()).unwrap();
    let cfg = PipelineConfig::new(Classifier::ports()).validate().unwrap();
    let stop = AtomicBool::new(false);
    let mut runs = 0;
    match bench_until(
        std::slice::from_ref(&empty),
        &cfg,
        &[1],
        2,
        &[],
        &stop,
        &mut |_| runs += 1,
    ) {
        Err(e @ BenchError::NoPackets(_)) => {
            assert_eq!(
                e.to_string().split(':').next(),
                Some(empty.to_str().unwrap())
            );
        }
        other => panic!("{:?}", other.map(|r| r.packets)),
    }
    assert_eq!(runs, 0, "a run started");
    let default = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/default.pcap");
    let r = bench_until(&[empty, default], &cfg, &[1], 1, &[], &stop, &mut |_| {}).unwrap();
    assert_eq!(r.packets, 40_000);
    assert_eq!(r.short_trace_note, short_trace_note(40_000));
    assert!(r.short_trace_note.is_some());
}

/// A trace of `arp` ARP frames and `ip` IPv4/UDP frames (each its own
/// flow), interleaved.
fn arp_and_ip_trace(path: &std::path::Path, arp: usize, ip: usize) {
    use pcap_file::pcap::{PcapPacket, PcapWriter};
    let mut w = PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    for i in 0..arp + ip {
        let mut frame = vec![0u8; 42];
        let ts = std::time::Duration::from_micros(i as u64);
        // Alternating while both last, then the rest of the other.
        let pairs = arp.min(ip);
        let is_ip = if i < 2 * pairs { i % 2 == 1 } else { ip > arp };
        if is_ip {
            frame[12..14].copy_from_slice(&[0x08, 0x00]);
            frame[14] = 0x45;
            frame[16..18].copy_from_slice(&28u16.to_be_bytes());
            frame[22] = 64;
            frame[23] = 17;
            frame[26..30].copy_from_slice(&[10, 0, (i >> 8) as u8, i as u8]);
            frame[30..34].copy_from_slice(&[192, 0, 2, 1]);
            frame[34..36].copy_from_slice(&(i as u16).to_be_bytes());
            frame[36..38].copy_from_slice(&53u16.to_be_bytes());
            frame[38..40].copy_from_slice(&8u16.to_be_bytes());
        } else {
            frame[0..6].copy_from_slice(&[0xff; 6]);
            frame[12..14].copy_from_slice(&[0x08, 0x06]);
            // Ethernet, IPv4, 6 and 4 byte addresses, a request.
            frame[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        }
        w.write_packet(&PcapPacket::new(ts, 42, &frame)).unwrap();
    }
}

/// `bench` says when fewer than half of the packets carry a flow key:
/// the rows count every packet read, but only keyed ones reach the
/// stages. `keyed_packets` is the count of IPv4 frames written; the note
/// is set at 200 of 500 and not at 250 of 500. A trace of ARP alone runs
/// (its packets are read) and gets the note with 0 keyed.
#[test]
fn bench_says_when_few_packets_carry_a_flow_key() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = PipelineConfig::new(Classifier::ports()).validate().unwrap();
    let stop = AtomicBool::new(false);
    for (arp, ip, noted) in [(300, 200, true), (250, 250, false), (400, 0, true)] {
        let path = dir.path().join(format!("arp{arp}-ip{ip}.pcap"));
        arp_and_ip_trace(&path, arp, ip);
        let r = bench_until(
            std::slice::from_ref(&path),
            &cfg,
            &[1],
            1,
            &[],
            &stop,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!((r.packets, r.keyed_packets), ((arp + ip) as u64, ip as u64));
        assert_eq!(r.unkeyed_note.is_some(), noted, "{arp} ARP, {ip} IP");
        assert_eq!(r.unkeyed_note, unkeyed_note(r.packets, r.keyed_packets));
        let text = r.to_string();
        assert_eq!(text.contains("carry an IP flow key"), noted, "{text}");
    }
}

/// `bench` says which run it is about to start (what SIGUSR1's progress
/// line reports): every run of every round, in the order it runs them,
/// each named as the report's row for it is named, and the memory chase
/// as a run of its own only when it is asked for. A stop set from a run's
/// announcement ends the bench before that run, with the rounds done.
#[test]
fn bench_names_each_run_before_it_starts() {
    let default = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/default.pcap");
    let cfg = PipelineConfig::new(Classifier::ports()).validate().unwrap();
    let stop = AtomicBool::new(false);
    let mut runs: Vec<(BenchPart, usize, usize, String)> = Vec::new();
    let r = bench_until(
        std::slice::from_ref(&default),
        &cfg,
        &[1, 2],
        2,
        &[64 << 10],
        &stop,
        &mut |at: BenchAt<'_>| runs.push((at.part, at.round, at.rounds, at.run.to_string())),
    )
    .unwrap();
    let rows: Vec<&str> = r.results.iter().map(|row| row.path.as_str()).collect();
    assert_eq!(
        rows,
        [
            "dissect+hash",
            "pipeline, 1 thread",
            "pipeline, 2 threads",
            "preloaded, 1 thread",
            "preloaded, 2 threads"
        ]
    );
    let expected: Vec<(BenchPart, usize, usize, String)> = (1..=2)
        .flat_map(|round| {
            rows.iter()
                .copied()
                .chain([MEMORY_RUN])
                .map(move |run| (BenchPart::InProcess, round, 2, run.to_string()))
        })
        .collect();
    assert_eq!(runs, expected);
    // No memory chase asked for: no such run. A stop set when the second
    // round's pipeline run is announced ends the bench there.
    let mut runs = Vec::new();
    let stop_at = AtomicBool::new(false);
    let out = bench_until(
        std::slice::from_ref(&default),
        &cfg,
        &[1],
        3,
        &[],
        &stop_at,
        &mut |at: BenchAt<'_>| {
            runs.push(at.line());
            if at.round == 2 && at.run == "pipeline, 1 thread" {
                stop_at.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        },
    );
    assert!(
        matches!(out, Err(BenchError::Interrupted { rounds: 1, of: 3 })),
        "{:?}",
        out.map(|r| r.packets)
    );
    assert_eq!(
        runs,
        [
            "round 1 of 3 of the in-process runs: dissect+hash",
            "round 1 of 3 of the in-process runs: pipeline, 1 thread",
            "round 1 of 3 of the in-process runs: preloaded, 1 thread",
            "round 2 of 3 of the in-process runs: dissect+hash",
            "round 2 of 3 of the in-process runs: pipeline, 1 thread",
        ]
    );
}
