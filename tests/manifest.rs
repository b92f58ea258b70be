//! Every curated capture in `../shared/traces/manifest.json` against the
//! manifest's independent parser: packet and flow counts, time span, and for
//! damaged files the packets read before the damage and where it is.

use crate::common;

use common::{manifest, scan, shared_traces};
use flowsieve::class::Classifier;
use flowsieve::dissect::{Dissector, SkipReason};
use flowsieve::ingest::{IngestError, Position};
use flowsieve::replay::{NoObserver, ReplayConfig, replay};
use std::collections::BTreeMap;

/// Files where flowsieve's flow count differs from the manifest on purpose.
/// Each asserts flowsieve's own exact numbers instead, so it still fails if
/// they move.
struct Exception {
    file: &'static str,
    why: &'static str,
    flows: u64,
    skipped: &'static [(SkipReason, u64)],
}

const EXCEPTIONS: &[Exception] = &[
    Exception {
        file: "formats/wits100/100_sll_wrapping_ethernet.pcap",
        why: "Linux SLL protocol 0x0060 (ETH_P_LOOP) wraps a whole Ethernet frame; flowsieve decodes it \
              (61 flows, the same as the other wits100 containers), the manifest's parser stops at SLL (0)",
        flows: 61,
        skipped: &[],
    },
    Exception {
        file: "formats/big_endian_691pkts.pcap",
        why: "fuzzed capture: one IPv4 header with IHL 1 and one EtherType-IPv4 frame whose version nibble is 6; \
              flowsieve rejects both (bad_ip_header, bad_ip_version), the manifest's parser keys their garbage (294)",
        flows: 292,
        skipped: &[
            (SkipReason::NonIp, 78),
            (SkipReason::BadIpVersion, 6),
            (SkipReason::BadIpHeader, 1),
        ],
    },
    Exception {
        file: "l3_edge/mpls_6in6_broken.pcap",
        why: "15 frames whose MPLS payload ends inside the IPv6 header; flowsieve counts truncated_ip_header, \
              the manifest's parser keys the partial addresses (452)",
        flows: 440,
        skipped: &[
            (SkipReason::TruncatedIpHeader, 15),
            (SkipReason::BadIpVersion, 22),
        ],
    },
];

/// The byte offset in a manifest error such as "truncated packet data at 114
/// (caplen 16896)" or "implausible caplen N at offset 228".
fn manifest_error_offset(e: &str) -> Option<u64> {
    let after = e.rsplit_once(" at ").map(|(_, t)| t)?;
    after
        .trim_start_matches("offset ")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn error_position(e: &IngestError) -> Option<Position> {
    match e {
        IngestError::Pcap { at, .. } | IngestError::PcapNg { at, .. } => Some(*at),
        _ => None,
    }
}

#[test]
fn curated_files_match_the_independent_parser() {
    let Some(dir) = shared_traces("curated_files_match_the_independent_parser") else {
        return;
    };
    let mut checked = 0;
    let mut failures = Vec::new();
    for entry in manifest(&dir) {
        if !entry.format().starts_with("pcap") {
            continue; // the test suite's .txt descriptions, and a file with no header at all (below)
        }
        let s = scan(&dir.join(&entry.file), Dissector::default());
        let (want_packets, want_flows) = (entry.u64("packets"), entry.u64("flows_5tuple"));
        let errors = entry.errors();
        checked += 1;
        if s.packets != want_packets {
            failures.push(format!(
                "{}: packets {} != manifest {}",
                entry.file, s.packets, want_packets
            ));
        }
        if errors.is_empty() {
            if let Some(e) = &s.error {
                failures.push(format!("{}: unexpected error {e}", entry.file));
            }
            if let Some(x) = EXCEPTIONS.iter().find(|x| x.file == entry.file) {
                if s.table.len() as u64 != x.flows {
                    failures.push(format!(
                        "{}: flows {} != {} (listed exception: {})",
                        entry.file,
                        s.table.len(),
                        x.flows,
                        x.why
                    ));
                }
                for &(reason, n) in x.skipped {
                    if s.skips.get(reason) != n {
                        failures.push(format!(
                            "{}: {} {} != {}",
                            entry.file,
                            reason,
                            s.skips.get(reason),
                            n
                        ));
                    }
                }
            } else if s.table.len() as u64 != want_flows {
                failures.push(format!(
                    "{}: flows {} != manifest {}",
                    entry.file,
                    s.table.len(),
                    want_flows
                ));
            }
            // Time span: the manifest's t_first/t_last are the min and max
            // timestamps; a wrong if_tsresol or byte order shows up here.
            if let (Some(a), Some(b), Some(first), Some(last)) = (
                entry.f64("t_first"),
                entry.f64("t_last"),
                s.first_ts,
                s.last_ts,
            ) {
                let tol = 2e-6 * a.abs().max(1.0).log10().max(1.0);
                if (first.as_secs_f64() - a).abs() > tol || (last.as_secs_f64() - b).abs() > tol {
                    failures.push(format!(
                        "{}: time span {:.6}..{:.6} != manifest {a:.6}..{b:.6}",
                        entry.file,
                        first.as_secs_f64(),
                        last.as_secs_f64()
                    ));
                }
            }
        } else {
            // Damaged: the same packets before the damage, and the error at
            // the byte offset the independent parser names.
            match (&s.error, manifest_error_offset(&errors[0])) {
                (Some(e), Some(offset)) => {
                    let at = error_position(e).map(|p| p.offset);
                    if at != Some(offset) {
                        failures.push(format!(
                            "{}: error at {at:?}, manifest says offset {offset} ({})",
                            entry.file, errors[0]
                        ));
                    }
                    let line = e.to_string();
                    if line.contains('\n')
                        || !line.contains(&entry.file)
                        || !line.contains(&format!("offset {offset}"))
                    {
                        failures.push(format!(
                            "{}: error message is not one line naming file and offset: {line}",
                            entry.file
                        ));
                    }
                }
                (None, _) => failures.push(format!(
                    "{}: no error, manifest says {}",
                    entry.file, errors[0]
                )),
                (Some(_), None) => failures.push(format!(
                    "{}: cannot read an offset from manifest error {}",
                    entry.file, errors[0]
                )),
            }
        }
    }
    assert!(checked >= 100, "only {checked} curated captures found");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The replay's packets per link type (counted by runs,
/// `ingest::LinkTypeCounts`) are what a plain map counts one packet at a
/// time, on every curated capture, including the pcapng files whose
/// interfaces of different link types interleave. Each file's list of link
/// types holds every type its packets had, and only types the independent
/// parser found in the file.
#[test]
fn replay_counts_packets_per_link_type_as_a_packet_at_a_time_count() {
    let Some(dir) =
        shared_traces("replay_counts_packets_per_link_type_as_a_packet_at_a_time_count")
    else {
        return;
    };
    let cfg = ReplayConfig::new(Classifier::ports());
    let (mut checked, mut mixed) = (0, 0);
    let mut failures = Vec::new();
    for entry in manifest(&dir) {
        if !entry.format().starts_with("pcap") {
            continue;
        }
        let path = dir.join(&entry.file);
        let want = scan(&path, Dissector::default()).link_types;
        let got = replay(std::slice::from_ref(&path), &cfg, &mut NoObserver);
        let counted: BTreeMap<u16, u64> = got
            .trace
            .link_types
            .iter()
            .map(|c| (c.link_type, c.packets))
            .collect();
        if counted != want {
            failures.push(format!("{}: replay {counted:?} != {want:?}", entry.file));
        }
        let listed: Vec<u16> = got
            .trace
            .files
            .first()
            .map(|f| f.link_types.clone())
            .unwrap_or_default();
        if want.keys().any(|lt| !listed.contains(lt)) {
            failures.push(format!(
                "{}: file lists {listed:?}, packets had {want:?}",
                entry.file
            ));
        }
        let independent: Vec<u16> = entry.stats["linktypes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_u64())
                    .map(|v| v as u16)
                    .collect()
            })
            .unwrap_or_default();
        if !independent.is_empty() && listed.iter().any(|lt| !independent.contains(lt)) {
            failures.push(format!(
                "{}: file lists {listed:?}, the manifest {independent:?}",
                entry.file
            ));
        }
        checked += 1;
        mixed += usize::from(want.len() > 1);
    }
    assert!(checked >= 100, "only {checked} curated captures found");
    assert!(
        mixed >= 3,
        "only {mixed} captures with packets of several link types"
    );
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Each file's count of packets stamped before the packet ahead of it is
/// the independent parser's `ts_nonmonotonic`, on every curated capture,
/// damaged ones included (both count up to the damage); a largest step
/// back is given exactly when there is a step. A file alone never warns:
/// the steps are a figure of the file, not an anomaly.
#[test]
fn replay_counts_steps_back_in_time_as_the_independent_parser() {
    let Some(dir) = shared_traces("replay_counts_steps_back_in_time_as_the_independent_parser")
    else {
        return;
    };
    let cfg = ReplayConfig::new(Classifier::ports());
    let (mut checked, mut stepping, mut stepping_once) = (0, 0, 0);
    let mut failures = Vec::new();
    for entry in manifest(&dir) {
        if !entry.format().starts_with("pcap") {
            continue;
        }
        let path = dir.join(&entry.file);
        let got = replay(std::slice::from_ref(&path), &cfg, &mut NoObserver);
        let f = &got.trace.files[0];
        let want = entry.u64("ts_nonmonotonic");
        if f.time_steps_back != want {
            failures.push(format!(
                "{}: {} steps back != manifest {want}",
                entry.file, f.time_steps_back
            ));
        }
        if (f.time_steps_back > 0) != (f.largest_step_back_s > 0.0) {
            failures.push(format!(
                "{}: {} steps back, the largest {} s",
                entry.file, f.time_steps_back, f.largest_step_back_s
            ));
        }
        if f.starts_before_previous_end_s.is_some()
            || got
                .warnings
                .iter()
                .any(|w| w.contains("before the traces read ahead"))
        {
            failures.push(format!("{}: a lone file overlaps no other", entry.file));
        }
        // The text report says so under the file exactly when it steps.
        // One packet in the singular ("1 packets ... of them" was printed).
        let said = match f.time_steps_back {
            1 => "not in time order: 1 packet stamped before the one ahead of it".to_string(),
            n => format!("not in time order: {n} packets stamped before the one ahead of them"),
        };
        if got.render_text().contains(&said) != (want > 0) {
            failures.push(format!(
                "{}: the text report's line for {want} steps",
                entry.file
            ));
        }
        checked += 1;
        stepping += usize::from(want > 0);
        stepping_once += usize::from(want == 1);
    }
    assert!(checked >= 100, "only {checked} curated captures found");
    assert!(stepping >= 5, "only {stepping} captures step back in time");
    assert!(stepping_once >= 1, "no capture steps back exactly once");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Traces given out of time order warn (exit 4), with how far the later
/// file reaches back, from the manifest's own first and last timestamps;
/// in time order they do not. The pipeline holds trace time monotone, so
/// the out-of-order file's packets would otherwise fall silently into the
/// earlier file's last window.
#[test]
fn traces_given_out_of_time_order_warn_with_the_overlap() {
    let Some(dir) = shared_traces("traces_given_out_of_time_order_warn_with_the_overlap") else {
        return;
    };
    let entries = manifest(&dir);
    let span = |file: &str| {
        let e = entries.iter().find(|e| e.file == file).expect(file);
        (e.f64("t_first").unwrap(), e.f64("t_last").unwrap())
    };
    let (older, newer) = (
        "backbone_like/wand_isp_vlan_snaplen_10k.pcap",
        "many_flows/tls_mix_145s.pcap",
    );
    let cfg = ReplayConfig::new(Classifier::ports());
    let run = |files: &[&str]| {
        let paths: Vec<_> = files.iter().map(|f| dir.join(f)).collect();
        replay(&paths, &cfg, &mut NoObserver)
    };
    let in_order = run(&[older, newer]);
    assert!(in_order.warnings.is_empty(), "{:?}", in_order.warnings);
    assert!(
        in_order
            .trace
            .files
            .iter()
            .all(|f| f.starts_before_previous_end_s.is_none())
    );
    assert_eq!(in_order.outcome(), flowsieve::report::Outcome::Clean);

    for (files, want) in [
        (&[newer, older][..], span(newer).1 - span(older).0),
        // The same file twice reaches back over its whole span.
        (&[newer, newer], span(newer).1 - span(newer).0),
    ] {
        let got = run(files);
        let early = got.trace.files[1]
            .starts_before_previous_end_s
            .unwrap_or_else(|| panic!("{files:?}: no overlap"));
        assert!((early - want).abs() < 1e-5, "{files:?}: {early} != {want}");
        assert!(got.trace.files[0].starts_before_previous_end_s.is_none());
        assert_eq!(got.warnings.len(), 1, "{files:?}: {:?}", got.warnings);
        assert!(
            got.warnings[0].contains(&format!("{}: starts {early:.6} s before", files[1])),
            "{:?}",
            got.warnings
        );
        assert_eq!(got.outcome(), flowsieve::report::Outcome::Anomalies);
    }
}

#[test]
fn a_file_without_a_global_header_is_an_unknown_format() {
    let Some(dir) = shared_traces("a_file_without_a_global_header_is_an_unknown_format") else {
        return;
    };
    let s = scan(
        &dir.join("malformed/pcapfix_no_global_header.pcap"),
        Dissector::default(),
    );
    let e = s.error.expect("an error");
    assert!(matches!(e, IngestError::UnknownFormat { .. }), "{e}");
    assert!(e.to_string().contains("byte offset 0"), "{e}");
    assert_eq!(s.packets, 0);
}

#[test]
fn exceptions_are_few_and_exist() {
    let Some(dir) = shared_traces("exceptions_are_few_and_exist") else {
        return;
    };
    assert!(EXCEPTIONS.len() <= 3);
    for x in EXCEPTIONS {
        assert!(dir.join(x.file).is_file(), "{} listed but missing", x.file);
    }
}

/// With `FLOWSIEVE_REQUIRE_SHARED` set (as `.ci/run` sets it), a missing
/// `../shared/traces` fails the test instead of skipping it.
#[test]
#[should_panic(expected = "FLOWSIEVE_REQUIRE_SHARED is set")]
fn a_missing_shared_folder_fails_when_required() {
    let missing = std::path::Path::new("/nonexistent/flowsieve-shared/traces");
    common::locate_shared(missing, "a_missing_shared_folder_fails_when_required", true);
}

/// Without the requirement the same folder is a skip, not a failure.
#[test]
fn a_missing_shared_folder_is_a_skip_when_not_required() {
    let missing = std::path::Path::new("/nonexistent/flowsieve-shared/traces");
    assert!(common::locate_shared(missing, "skip check", false).is_none());
}

/// A requirement variable asks for the tests to run when it is set to
/// anything but empty or `0`, the same for all three: `FLOWSIEVE_REQUIRE_LIVE=0`
/// once failed some tests and skipped others.
#[test]
fn a_requirement_is_any_value_but_empty_or_zero() {
    use common::skip::{Need, required_by};
    use std::ffi::OsStr;
    for (value, required) in [
        (None, false),
        (Some(""), false),
        (Some("0"), false),
        (Some("1"), true),
        (Some("yes"), true),
        (Some("00"), true),
    ] {
        assert_eq!(required_by(value.map(OsStr::new)), required, "{value:?}");
    }
    assert_eq!(
        [Need::Shared, Need::Live, Need::Nats].map(Need::variable),
        [
            "FLOWSIEVE_REQUIRE_SHARED",
            "FLOWSIEVE_REQUIRE_LIVE",
            "FLOWSIEVE_REQUIRE_NATS"
        ]
    );
}

/// A program is missing when it cannot be started, and only then (`sh`
/// runs everywhere these tests do; `false --version` exits 1 but runs).
#[test]
fn a_program_is_missing_when_it_cannot_start() {
    assert_eq!(
        common::skip::missing_programs(&["sh", "flowsieve-no-such-program", "false"]),
        ["flowsieve-no-such-program"]
    );
}

/// A skip where its requirement is set fails, naming the variable.
#[test]
#[should_panic(expected = "lacks a tool, and FLOWSIEVE_REQUIRE_NATS is set")]
fn a_required_skip_fails_naming_its_variable() {
    common::skip::unless(
        common::skip::Need::Nats,
        true,
        "required skip",
        "lacks a tool",
    );
}

/// A skip is seen by whoever runs `cargo test`, though the test passes:
/// the harness captures `eprintln!` of passing tests, so the line goes to
/// the stderr handle. The suite's own binary runs the skipping test above
/// alone, and its stderr must carry the line.
#[test]
fn a_skip_is_seen_past_the_harness_capture() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "manifest::a_missing_shared_folder_is_a_skip_when_not_required",
            "--exact",
            "--test-threads",
            "1",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert!(
        stderr.contains(
            "SKIPPED skip check: /nonexistent/flowsieve-shared/traces not found beside the crate"
        ),
        "{stderr}"
    );
}
