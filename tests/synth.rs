//! The synthetic trace generator: exact counts, determinism, the Zipf head
//! against its analytical expectation, shares, sizes and times.

use crate::common;

use common::{scan, sorted_flows};
use flowsieve::dissect::{Dissector, IpVersion};
use flowsieve::synth::{OutputFormat, SizeModel, SynthConfig, generate};
use std::path::PathBuf;

fn write(cfg: &SynthConfig, dir: &tempfile::TempDir, name: &str) -> PathBuf {
    let path = dir.path().join(name);
    generate(cfg, std::fs::File::create(&path).unwrap()).unwrap();
    path
}

#[test]
fn exact_flow_and_packet_counts_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let mut tables = Vec::new();
    for (i, format) in [
        OutputFormat::Pcap,
        OutputFormat::PcapNs,
        OutputFormat::PcapNg,
    ]
    .into_iter()
    .enumerate()
    {
        let cfg = SynthConfig {
            flows: 3000,
            packets: 20_000,
            format,
            seed: 3,
            ..SynthConfig::default()
        };
        let s = scan(&write(&cfg, &dir, &format!("t{i}")), Dissector::default());
        assert!(s.error.is_none());
        assert_eq!((s.packets, s.table.len()), (20_000, 3000));
        assert_eq!(s.skips.total(), 0);
        tables.push(sorted_flows(&s.table, false));
    }
    assert_eq!(tables[0], tables[1]);
    assert_eq!(tables[0], tables[2]);
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let generate = |seed| {
        let mut v = Vec::new();
        generate(
            &SynthConfig {
                flows: 200,
                packets: 1000,
                seed,
                ..SynthConfig::default()
            },
            &mut v,
        )
        .unwrap();
        v
    };
    assert_eq!(generate(9), generate(9));
    assert_ne!(generate(9), generate(10));
}

/// The bundled trace regenerates byte for byte from the command
/// `traces/README.md` gives: the generator's output for a seed is pinned,
/// so a change to how it draws (or deduplicates) flows cannot slip in.
#[test]
fn the_bundled_trace_regenerates_byte_for_byte() {
    let bundled = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/traces/default.pcap"))
        .expect("the bundled trace");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flowsieve"))
        .args([
            "gen-trace",
            "-o",
            "-",
            "--flows",
            "12000",
            "--packets",
            "40000",
        ])
        .args([
            "--zipf",
            "1.1",
            "--snaplen",
            "64",
            "--span",
            "60",
            "--seed",
            "2026",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout.len(), bundled.len());
    assert!(out.stdout == bundled, "the generator's bytes changed");
}

/// Generalised harmonic number H(n, s).
fn harmonic(n: u64, s: f64) -> f64 {
    (1..=n).map(|i| (i as f64).powf(-s)).sum()
}

#[test]
fn largest_flow_matches_the_zipf_head() {
    // Every flow has one packet; the other P - F packets go to rank r with
    // probability r^-s / H(F, s). The largest flow is (almost surely) rank 1:
    // 1 + Binomial(P - F, 1/H).
    let dir = tempfile::tempdir().unwrap();
    for (s_exp, seed) in [(1.1, 21u64), (0.8, 22), (1.5, 23)] {
        let (f, p) = (5000u64, 60_000u64);
        let cfg = SynthConfig {
            flows: f,
            packets: p,
            zipf_exponent: s_exp,
            seed,
            ..SynthConfig::default()
        };
        let s = scan(&write(&cfg, &dir, "z.pcap"), Dissector::default());
        let largest = s.table.iter().map(|e| e.stats.packets).max().unwrap();
        let q = 1.0 / harmonic(f, s_exp);
        let mean = 1.0 + (p - f) as f64 * q;
        let sd = ((p - f) as f64 * q * (1.0 - q)).sqrt();
        assert!(
            (largest as f64 - mean).abs() < 5.0 * sd,
            "s={s_exp}: largest {largest}, expected {mean:.0} +- {sd:.0}"
        );
        // Second rank too: 1 + Binomial(P - F, 2^-s / H).
        let mut sizes: Vec<u64> = s.table.iter().map(|e| e.stats.packets).collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let q2 = 2f64.powf(-s_exp) * q;
        let (m2, sd2) = (
            1.0 + (p - f) as f64 * q2,
            ((p - f) as f64 * q2 * (1.0 - q2)).sqrt(),
        );
        assert!(
            (sizes[1] as f64 - m2).abs() < 5.0 * sd2 + 0.05 * m2,
            "s={s_exp}: second {} vs {m2:.0}",
            sizes[1]
        );
    }
}

#[test]
fn shares_sizes_snaplen_and_times() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig {
        flows: 10_000,
        packets: 30_000,
        ipv6_share: 0.3,
        vlan_share: 0.0,
        sizes: SizeModel::Uniform { min: 64, max: 200 },
        snaplen: 96,
        start_secs: 1_000_000.0,
        span_secs: 10.0,
        seed: 4,
        ..SynthConfig::default()
    };
    let path = write(&cfg, &dir, "s.pcap");
    let s = scan(&path, Dissector::default());
    let v6 = s
        .table
        .iter()
        .filter(|e| e.key.version() == IpVersion::V6)
        .count() as f64;
    let sd = (10_000.0f64 * 0.3 * 0.7).sqrt();
    assert!((v6 - 3000.0).abs() < 5.0 * sd, "{v6} IPv6 flows");
    let mut r = flowsieve::ingest::TraceReader::open(&path).unwrap();
    while let Some(p) = r.next_packet().unwrap() {
        // 64..=200 bytes, raised to the header length for IPv6 TCP (74).
        assert!((64..=200).contains(&p.wire_len), "{}", p.wire_len);
        assert_eq!(p.data.len() as u32, p.wire_len.min(96));
        assert!(p.ts.secs() >= 1_000_000 && p.ts.secs() < 1_000_010);
    }
    assert_eq!(r.snaplen(), Some(96));
}

#[test]
fn bad_settings_are_refused() {
    let bad = [
        SynthConfig {
            flows: 0,
            ..SynthConfig::default()
        },
        SynthConfig {
            flows: 10,
            packets: 5,
            ..SynthConfig::default()
        },
        SynthConfig {
            ipv6_share: 1.5,
            ..SynthConfig::default()
        },
        SynthConfig {
            zipf_exponent: f64::NAN,
            ..SynthConfig::default()
        },
        SynthConfig {
            proto_weights: [0.0, 0.0, 0.0],
            ..SynthConfig::default()
        },
        SynthConfig {
            sizes: SizeModel::Uniform { min: 300, max: 100 },
            ..SynthConfig::default()
        },
    ];
    for cfg in bad {
        assert!(generate(&cfg, Vec::new()).is_err(), "{cfg:?}");
    }
}
