//! `replay -f EXPR` (`flowsieve::ingest::TraceFilter`): the run over the
//! records a filter keeps is, figure for figure, the run over
//! `tcpdump -r FILE -w OUT EXPR`'s output, and its counts add up to the
//! manifest's.
//!
//! libpcap and tcpdump are needed (`.ci/run` installs both); without them
//! the tests skip with a message, unless `FLOWSIEVE_REQUIRE_LIVE` is set.

use crate::common::{self, report_without_timing};
use flowsieve::class::Classifier;
use flowsieve::ingest::{LinkType, TraceFilter, TraceFilterError};
use flowsieve::pipeline::{FileSource, NoEvents, PipelineConfig, StageList, run};
use flowsieve::replay::NoObserver;
use flowsieve::report::PipelineReport;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether libpcap and tcpdump are here; a skip says so, and fails when
/// `FLOWSIEVE_REQUIRE_LIVE` asks for them.
fn tools_present(test: &str) -> bool {
    common::skip::libpcap_or_skip(test)
        && common::skip::programs_or_skip(common::skip::Need::Live, test, &["tcpdump"])
}

/// The shared captures, when libpcap, tcpdump and they are all here.
fn tools_and_shared_traces(test: &str) -> Option<PathBuf> {
    if tools_present(test) {
        common::shared_traces(test)
    } else {
        None
    }
}

/// `tcpdump -r src -w out expr`; the records it kept.
fn tcpdump_filtered(src: &Path, expr: &str, out: &Path) {
    let o = Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(src)
        .arg("-w")
        .arg(out)
        .arg(expr)
        .output()
        .expect("tcpdump runs");
    assert!(
        o.status.success(),
        "tcpdump -r {} {expr}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The pipeline's report over `files`, kept by `filter`, with the
/// configuration `edit` leaves.
fn run_filtered(
    files: &[PathBuf],
    filter: Option<&str>,
    edit: impl FnOnce(&mut PipelineConfig),
) -> PipelineReport {
    let mut cfg = PipelineConfig::new(Classifier::ports());
    cfg.replay.filter = filter.map(|f| TraceFilter::new(f).expect("the expression compiles"));
    edit(&mut cfg);
    let cfg = cfg.validate().expect("a valid configuration");
    let source = FileSource::new(files.to_vec(), &cfg);
    run(source, &cfg, &mut NoObserver, &mut NoEvents).expect("the run completes")
}

/// The whole pipeline's report over `files`, kept by `filter`, with
/// `dissect_threads` helpers, timing aside.
fn report(files: &[PathBuf], filter: Option<&str>, dissect_threads: usize) -> serde_json::Value {
    report_without_timing(&run_filtered(files, filter, |c| {
        c.threads = 2;
        c.replay.dissect_threads = dissect_threads;
        c.replay.dissect_share = 64 << 10;
    }))
}

/// A report with what names the input and the filter taken out; the rest
/// must be the same for a filtered run and a run over tcpdump's output.
fn without_filter_and_paths(mut v: serde_json::Value) -> serde_json::Value {
    v["options"].as_object_mut().unwrap().remove("filter");
    let trace = v["trace"].as_object_mut().unwrap();
    trace.remove("filtered_out");
    for f in trace["files"].as_array_mut().unwrap() {
        let f = f.as_object_mut().unwrap();
        f.remove("filtered_out");
        f.remove("path");
    }
    v
}

#[test]
fn a_filtered_run_is_the_run_over_tcpdumps_output() {
    const TEST: &str = "trace_filter::a_filtered_run_is_the_run_over_tcpdumps_output";
    let Some(shared) = tools_and_shared_traces(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let default = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/default.pcap");
    let cases: [(PathBuf, &[&str]); 5] = [
        (
            default,
            &[
                "tcp",
                "udp port 53",
                "ip6 and not tcp",
                "icmp or icmp6",
                "greater 600",
            ],
        ),
        (
            shared.join("backbone_like/wand_isp_vlan_snaplen_10k.pcap"),
            &[
                "vlan and tcp",
                "vlan and (ip[6:2] & 0x3fff != 0)",
                "vlan and udp",
            ],
        ),
        (
            shared.join("backbone_like/auckland2000_uplink_rawip_hdr52.pcap"),
            &["tcp port 80", "tcp[tcpflags] & tcp-syn != 0", "udp"],
        ),
        (
            shared.join("linktypes/sll_113_linux_cooked.pcap"),
            &["tcp", "ip6"],
        ),
        (
            shared.join("l3_edge/pppoe_ipv4_ipv6.pcap"),
            &["pppoes and ip6"],
        ),
    ];
    let mut any_kept = 0;
    let mut any_dropped = 0;
    for (trace, exprs) in cases {
        let whole = report(std::slice::from_ref(&trace), None, 0);
        for expr in exprs {
            let out = dir.path().join("kept.pcap");
            tcpdump_filtered(&trace, expr, &out);
            let filtered = report(std::slice::from_ref(&trace), Some(expr), 0);
            let theirs = report(std::slice::from_ref(&out), None, 0);
            let case = format!("{} -f {expr:?}", trace.display());
            assert_eq!(
                without_filter_and_paths(filtered.clone()),
                without_filter_and_paths(theirs),
                "{case}"
            );
            // Kept and filtered out add up to the whole file, per file and
            // in all; the expression is in the options.
            let kept = filtered["trace"]["packets"].as_u64().unwrap();
            let out_n = filtered["trace"]["filtered_out"].as_u64().unwrap();
            assert_eq!(
                kept + out_n,
                whole["trace"]["packets"].as_u64().unwrap(),
                "{case}"
            );
            assert_eq!(
                filtered["trace"]["files"][0]["filtered_out"], out_n,
                "{case}"
            );
            assert_eq!(filtered["options"]["filter"], *expr, "{case}");
            assert!(whole["trace"].get("filtered_out").is_none(), "{case}");
            any_kept += u64::from(kept > 0);
            any_dropped += u64::from(out_n > 0);
            // Helper threads that dissect ahead skip the records the
            // filter drops: nothing changes.
            if trace.ends_with("default.pcap") {
                assert_eq!(
                    report(std::slice::from_ref(&trace), Some(expr), 2),
                    filtered,
                    "{case} with --dissect-threads 2"
                );
            }
        }
    }
    // The cases test something: filters that kept and that dropped.
    assert_eq!((any_kept, any_dropped), (14, 14));
}

/// Over every whole classic pcap of the shared captures: the records an
/// expression keeps are as many as tcpdump writes for it, and kept plus
/// filtered out is the manifest's count (its independent parser). An
/// expression and its negation may both drop a record: a packet too short
/// for the field tested fails both (libpcap's rule, which tcpdump shares;
/// one record of `many_flows/p2p_gnutella_600s.pcap` is such).
#[test]
fn kept_and_filtered_out_add_up_to_the_manifests_count() {
    const TEST: &str = "trace_filter::kept_and_filtered_out_add_up_to_the_manifests_count";
    let Some(shared) = tools_and_shared_traces(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let packets = |path: &Path, expr: Option<&str>| {
        let r = run_filtered(&[path.to_path_buf()], expr, |c| {
            c.stages = StageList::none();
            c.replay.truth = false;
        });
        (
            r.replay.trace.packets,
            r.replay.trace.filtered_out,
            r.replay.errors,
        )
    };
    let (mut checked, mut both_dropped, mut refused) = (0, 0, 0);
    for entry in common::manifest(&shared) {
        let path = shared.join(&entry.file);
        if !entry.errors().is_empty() || entry.format() != "pcap" || !path.exists() {
            continue;
        }
        let records = entry.u64("packets");
        let mut kept_by_either = 0;
        for expr in ["tcp", "not tcp"] {
            let theirs = dir.path().join("kept.pcap");
            let (kept, out, errors) = packets(&path, Some(expr));
            if let [error] = errors.as_slice() {
                // A link type libpcap cannot test IP on: tcpdump refuses
                // the file too.
                assert!(
                    error.contains(" cannot be compiled for link type "),
                    "{error}"
                );
                let o = Command::new("tcpdump")
                    .args(["-n", "-r"])
                    .arg(&path)
                    .arg("-w")
                    .arg(&theirs)
                    .arg(expr)
                    .output()
                    .unwrap();
                assert!(!o.status.success(), "{error}");
                refused += 1;
                continue;
            }
            assert!(errors.is_empty(), "{errors:?}");
            assert_eq!(
                Some(kept + out.unwrap()),
                Some(records),
                "{} {expr}",
                entry.file
            );
            tcpdump_filtered(&path, expr, &theirs);
            assert_eq!(
                kept,
                packets(&theirs, None).0,
                "{} {expr}: tcpdump kept another number",
                entry.file
            );
            kept_by_either += kept;
        }
        assert!(kept_by_either <= records, "{}", entry.file);
        both_dropped += records - kept_by_either;
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} captures checked");
    assert!(
        both_dropped >= 1,
        "no record failed both: the case above is gone"
    );
    assert!(refused >= 2, "no link type was refused: ipoib_242 was");
}

#[test]
fn an_expression_libpcap_refuses_is_named_with_its_message() {
    const TEST: &str = "trace_filter::an_expression_libpcap_refuses_is_named_with_its_message";
    if !tools_present(TEST) {
        return;
    }
    let e = TraceFilter::new("udp prot 53").unwrap_err();
    assert_eq!(
        e,
        TraceFilterError::Invalid {
            expression: "udp prot 53".into(),
            message: "can't parse filter expression: syntax error".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "filter \"udp prot 53\": can't parse filter expression: syntax error"
    );
    // Valid for some link types, not others: the check passes, and a
    // record of a link type it cannot be compiled for gets the error.
    let mut f = TraceFilter::new("ether host 1:2:3:4:5:6").unwrap();
    assert_eq!(f.keeps(LinkType::ETHERNET, &[0u8; 14], 14), Ok(false));
    let mut frame = [0u8; 14];
    frame[..6].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
    assert_eq!(f.keeps(LinkType::ETHERNET, &frame, 14), Ok(true));
    let e = f.keeps(LinkType::RAW, &[0x45; 20], 20).unwrap_err();
    assert!(
        e.starts_with(
            "filter \"ether host 1:2:3:4:5:6\" cannot be compiled for link type 101 (raw): "
        ),
        "{e}"
    );
    // An expression of a link layer flowsieve does not read compiles for
    // none of those it reads.
    let e = TraceFilter::new("wlan type mgt").unwrap_err();
    assert!(
        matches!(e, TraceFilterError::Invalid { ref message, .. } if message.contains("802.11")),
        "{e}"
    );
}

/// The command line: `-f` refuses a bad expression with exit 2 and one
/// line before any work, stops at a link type it cannot be compiled for
/// with exit 1 and one line naming the file, the packet and the link type
/// (as `tcpdump -r` refuses the file), and `-c` counts the records kept,
/// as tcpdump's does. The text report says how many were filtered out.
#[test]
fn the_command_line_filter_refuses_on_one_line_and_counts_what_it_keeps() {
    const TEST: &str =
        "trace_filter::the_command_line_filter_refuses_on_one_line_and_counts_what_it_keeps";
    if !tools_present(TEST) {
        return;
    }
    let flowsieve = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_flowsieve"))
            .args(args)
            .output()
            .unwrap()
    };
    let default = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/default.pcap");
    let o = flowsieve(&["-q", "-f", "udp prot 53", default]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "flowsieve: error: -f \"udp prot 53\": can't parse filter expression: syntax error\n"
    );

    // A raw-IP capture of one IPv4 header, where an Ethernet address
    // cannot be tested.
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.pcap");
    let mut bytes = Vec::new();
    for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 101] {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    for w in [1u32, 0, 20, 20] {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    bytes.extend_from_slice(&[
        0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    std::fs::write(&raw, &bytes).unwrap();
    let raw_s = raw.to_str().unwrap();
    let o = flowsieve(&[
        "-q",
        "-f",
        "ether host 1:2:3:4:5:6",
        default,
        raw_s,
        default,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!(
            "flowsieve: error: {raw_s}: packet 1: filter \"ether host 1:2:3:4:5:6\" cannot be compiled for link type 101 (raw): ethernet addresses supported only on ethernet/FDDI/token ring/802.11/ATM LANE/Fibre Channel\n"
        )
    );
    // The run stops at that file, as tcpdump's does: the third is not read.
    let o = flowsieve(&[
        "-f",
        "ether host 1:2:3:4:5:6",
        "--json",
        "-",
        default,
        raw_s,
        default,
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let files = v["trace"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    assert_eq!(files[1]["complete"], false);
    // The same file with an expression that compiles for it.
    let o = flowsieve(&["-q", "-f", "udp", "--json", "-", raw_s]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&v["trace"]["packets"], &v["trace"]["filtered_out"]),
        (&1.into(), &0.into())
    );

    // -c counts kept records: the run is tcpdump's -c run.
    let theirs = dir.path().join("first-100-tcp.pcap");
    let o = Command::new("tcpdump")
        .args(["-n", "-c", "100", "-r", default, "-w"])
        .arg(&theirs)
        .arg("tcp")
        .output()
        .unwrap();
    assert!(o.status.success());
    let json = |args: &[&str]| -> serde_json::Value {
        let o = flowsieve(args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        without_filter_and_paths(common::without_timing(
            serde_json::from_slice(&o.stdout).unwrap(),
        ))
    };
    let ours = json(&["-q", "-f", "tcp", "-c", "100", "--json", "-", default]);
    assert_eq!(ours["trace"]["packets"], 100);
    let mut reference = json(&["-q", "--json", "-", theirs.to_str().unwrap()]);
    // The options echo -c, which only the filtered run was given.
    reference["options"]["max_packets"] = 100.into();
    reference["trace"]["files"][0]["complete"] = false.into();
    assert_eq!(ours, reference);

    // tcpdump's own form: the words after -r FILE are the expression, the
    // same run as -f; given both ways, refused on one line.
    assert_eq!(
        json(&["-q", "--json", "-", "-r", default, "udp", "port", "53"]),
        json(&["-q", "--json", "-", "-r", default, "-f", "udp port 53"])
    );
    let both = code_and_stderr(&flowsieve(&["-q", "-r", default, "-f", "udp", "tcp"]));
    assert_eq!(
        both,
        (
            Some(2),
            "flowsieve: error: a filter expression twice: -f and the words after -r FILE (tcp); give one\n".to_string()
        )
    );

    // tcpdump's -F FILE: the file's lines joined, `#` to the end of a
    // line a comment. The run is the run over what `tcpdump -F FILE`
    // writes.
    let file = dir.path().join("web.filter");
    std::fs::write(
        &file,
        "# web traffic only\ntcp # the protocol\n  and port 80\n\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let theirs = dir.path().join("web.pcap");
    let o = Command::new("tcpdump")
        .args(["-n", "-r", default, "-F", f, "-w"])
        .arg(&theirs)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let by_file = json(&["-q", "--json", "-", "-F", f, default]);
    let kept = by_file["trace"]["packets"].as_u64().unwrap();
    assert!(kept > 0 && kept < 40_000, "{kept}");
    assert_eq!(
        by_file,
        json(&["-q", "--json", "-", theirs.to_str().unwrap()])
    );
    let o = flowsieve(&["-q", "--json", "-", "-F", f, default]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["options"]["filter"], "tcp and port 80");
    let bad = dir.path().join("bad.filter");
    std::fs::write(&bad, "tcp and # nothing after\nand\n").unwrap();
    let bad_s = bad.to_str().unwrap();
    let missing = dir.path().join("missing.filter");
    let missing_s = missing.to_str().unwrap();
    for (args, code, line) in [
        (
            vec!["-q", "-F", bad_s, default],
            2,
            format!("-F {bad_s} \"tcp and and\": can't parse filter expression: syntax error"),
        ),
        (
            vec!["-q", "-F", missing_s, default],
            1,
            format!(
                "{missing_s}: cannot read the filter file (-F): No such file or directory (os error 2)"
            ),
        ),
        // A device that never ends is read to a bound, not forever; a
        // file that is no text says so.
        (
            vec!["-q", "-F", "/dev/zero", default],
            1,
            "/dev/zero: cannot read the filter file (-F): longer than 1 MiB, which no filter expression is".to_string(),
        ),
        (
            vec!["-q", "-F", raw_s, default],
            1,
            format!("{raw_s}: cannot read the filter file (-F): not text: byte 0 is not UTF-8"),
        ),
        (
            vec!["-q", "-F", f, "-r", default, "udp"],
            2,
            "a filter expression twice: -F FILE and the words after -r FILE (udp); give one"
                .to_string(),
        ),
        (
            vec!["-q", "-F", f, "-f", "udp", default],
            2,
            "the argument '--filter-file <FILE>' cannot be used with '--filter <EXPR>'".to_string(),
        ),
    ] {
        assert_eq!(
            code_and_stderr(&flowsieve(&args)),
            (Some(code), format!("flowsieve: error: {line}\n")),
            "{args:?}"
        );
    }

    // The text report: the file's line and the trace's.
    let o = flowsieve(&["-f", "tcp", default]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(" 27631 packets (12369 filtered out) "),
        "{text}"
    );
    assert!(
        text.contains(
            "\n  filtered out            12369  (filter \"tcp\"; in no figure of this report)\n"
        ),
        "{text}"
    );
}

/// A run's exit code and standard error.
fn code_and_stderr(o: &std::process::Output) -> (Option<i32>, String) {
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}
