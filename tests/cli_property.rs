//! A property test over the whole command line: every flag of every
//! subcommand (found in the binary's own `--help`, so a new flag is covered
//! the day it is added) gets extreme and malformed values, and random ones,
//! on a tiny trace. Whatever the value, the real binary must exit with a
//! documented code (0 to 4, or 130 after Ctrl-C), never 101 (a panic), never
//! a signal, and never run past a time bound. Flags that legitimately scale
//! the work (packets to generate, bench rounds, a capture's duration) may
//! run long; then a Ctrl-C must stop them at once with 130.

use proptest::prelude::*;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// The documented exit codes (README, `flowsieve --help`).
const DOCUMENTED: [i32; 6] = [0, 1, 2, 3, 4, 130];

/// How long one run may take before it counts as a hang.
const BOUND: Duration = Duration::from_secs(20);

/// Extreme and malformed values every flag gets.
const SPECIAL: &[&str] = &[
    "0",
    "1",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "NaN",
    "inf",
    "-inf",
    "1e308",
    "4.9e-324",
    "2.2e-308",
    "0.5",
    "",
    "x",
    "1,2,3",
    ",,",
    "=1",
    "bpe=",
    "alpha=1e300",
    "k=0",
    "0p",
    "18446744073709551615p",
    "1ns",
    "99999999999h",
    "sigma:",
    "sigma:nan",
    "sigma:1",
    "n:0",
    "time:0s",
    "99999999999999999999T",
    "1G",
    "/dev/zero",
    // A path under a folder that does not exist, relative to the run's own
    // temporary directory: output flags that create their folder do so
    // there. (It was "/nonexistent/x", and `--csv` made that folder at the
    // root of the machine running the tests.)
    "missing-folder/x",
    "random",
    "ffffffffffffffffffffffffffffffff",
    "heavy,heavy",
    "\u{feff}1",
];

/// One flag of one subcommand.
#[derive(Clone, Debug)]
struct Flag {
    command: Vec<&'static str>,
    name: String,
    takes_value: bool,
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_flowsieve")
}

/// The flags `flowsieve <command> --help` lists.
fn flags_of(command: &[&'static str]) -> Vec<Flag> {
    let out = Command::new(bin())
        .args(command)
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut flags = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if !t.starts_with('-') || line.len() == t.len() {
            continue;
        }
        // "-i, --interface <IFACE>", "--top <N>", "-c <N>", "--bidirectional"
        let spec = t.split("  ").next().unwrap_or("");
        let mut name = None;
        let mut takes_value = false;
        for part in spec.split([',', ' ']).filter(|p| !p.is_empty()) {
            if part.starts_with("--") || (part.starts_with('-') && part.len() == 2) {
                name = Some(part.to_string());
            } else if part.starts_with('<') {
                takes_value = true;
            }
        }
        if let Some(n) = name
            && n != "--help"
            && n != "-h"
            && n != "--version"
            && n != "-V"
        {
            flags.push(Flag {
                command: command.to_vec(),
                name: n,
                takes_value,
            });
        }
    }
    flags
}

/// Everything to exercise: each subcommand's flags.
fn all_flags() -> Vec<Flag> {
    let commands: &[&[&'static str]] = &[
        &["replay"],
        &["gen-trace"],
        &["bench"],
        &["model", "bloom"],
        &["model", "threshold"],
        &["model", "paradox"],
        &["model", "cbf-posterior"],
        &["model", "query-order"],
        &["model", "recycle"],
        &["model", "compressed"],
        &["reproduce"],
        &["live"],
        &["inject"],
        &["probe"],
        &["collect"],
        &["results"],
    ];
    let mut all = Vec::new();
    for c in commands {
        let f = flags_of(c);
        assert!(!f.is_empty(), "no flags found in `flowsieve {c:?} --help`");
        all.extend(f);
    }
    all
}

/// Flags that scale the work: a long run is legitimate, but Ctrl-C must
/// stop it.
fn scales_work(f: &Flag) -> bool {
    matches!(
        (f.command[0], f.name.as_str()),
        ("gen-trace", "--packets" | "--flows")
            | (
                "bench",
                "--rounds" | "--threads-list" | "--cbf-counters" | "--rbf-bits"
            )
            | ("reproduce", _)
            | ("live", "--duration" | "-c" | "--report-every")
            | ("inject", "--pps" | "--speed" | "--loop")
            | ("probe", "--flush-timeout")
            | (
                "replay",
                "--cbf-counters" | "--rbf-bits" | "--dir-bpe" | "--sweep"
            )
    )
}

/// Arguments that make each command run on the tiny trace without the
/// fuzzed flags; a fuzzed flag replaces a base flag of the same name.
fn base(command: &[&'static str], fuzzed: &[&Flag], dir: &Path, tiny: &Path) -> Vec<String> {
    let t = tiny.display().to_string();
    let out = dir.join("out.pcap").display().to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut args = match command {
        ["replay"] => s(&["-q", &t]),
        ["gen-trace"] => s(&["-o", &out, "--flows", "10", "--packets", "20"]),
        ["bench"] => s(&[
            "--rounds",
            "1",
            "--no-tcpdump",
            "--no-memory",
            "--threads-list",
            "1",
            &t,
        ]),
        ["model", "bloom"] => s(&["--k", "3", "--m-over-n", "10"]),
        ["model", "threshold"] => s(&["--theta", "5", "--m-over-n", "10"]),
        ["model", "paradox"] => s(&["--alpha", "1", "--m-over-n", "10"]),
        ["model", "cbf-posterior"] => s(&[
            "--counters",
            "1,2,3",
            "--prior",
            "0.1",
            "--m",
            "1000",
            "--n",
            "100",
        ]),
        ["model", "query-order"] => s(&[
            "--probs",
            "0.5,0.2",
            "--costs",
            "1,2",
            "--special-cost",
            "10",
        ]),
        ["model", "recycle"] => s(&["--m", "10000", "--k", "3", "--sigma", "100"]),
        ["model", "compressed"] => s(&["--bits-per-element", "8"]),
        ["reproduce"] => s(&[
            "--quick",
            "-q",
            "--out",
            &dir.join("r").display().to_string(),
        ]),
        // No such interface: these exit 1 once their flags are checked, so
        // a fuzzed value can never start a real capture.
        ["live"] => s(&["-i", "fsnone0", "--duration", "1s"]),
        ["inject"] => s(&["-i", "fsnone0", &t]),
        // Port 1 refuses at once: the probe monitors locally and gives up
        // delivering after the flush timeout; collect and results exit 1
        // once their flags are checked.
        ["probe"] => s(&[
            "--nats",
            "nats://127.0.0.1:1",
            "--probe-id",
            "p",
            "--flush-timeout",
            "1ms",
            // One window: a digest per shard to encode, not sixty.
            "--window",
            "1h",
            "-q",
            "--no-truth",
            &t,
        ]),
        ["collect"] => s(&["--nats", "nats://127.0.0.1:1", "--shards", "0-3"]),
        ["results"] => s(&["--nats", "nats://127.0.0.1:1"]),
        _ => Vec::new(),
    };
    for f in fuzzed {
        if let Some(i) = args.iter().position(|a| *a == f.name) {
            args.remove(i);
            if i < args.len() && !args[i].starts_with('-') {
                args.remove(i);
            }
        }
    }
    args
}

/// What one run did.
#[derive(Debug)]
struct Outcome {
    code: Option<i32>,
    stderr: String,
    interrupted: bool,
}

fn run_bounded(args: &[String], bound: Duration) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("err");
    let mut child = Command::new(bin())
        .args(args)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let mut interrupted = false;
    let status = match crate::common::wait_for_exit(&mut child, bound) {
        Some(s) => Some(s),
        None => {
            // SAFETY: kill(2) with a valid signal on our own child's pid,
            // not yet reaped (wait_for_exit returned None), so it names no
            // other process.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            interrupted = true;
            crate::common::wait_for_exit(&mut child, Duration::from_secs(5)).or_else(|| {
                let _ = child.kill();
                let _ = child.wait();
                None
            })
        }
    };
    Outcome {
        code: status.and_then(|s| s.code()),
        stderr: std::fs::read_to_string(err).unwrap_or_default(),
        interrupted,
    }
}

/// One case: flags of one command, each with a value (or none for a
/// switch).
type Case = Vec<(Flag, Option<String>)>;

/// A value for `--nats` becomes the port (or the rest) of a loopback URL:
/// a bare value such as `1` or `x` names a host, and the client would send
/// to 0.0.0.1 or ask DNS for `x`. The tests send to no address but
/// 127.0.0.1, and the URL's port and path still get every value.
///
/// Each of a list's servers gets the loopback host (`1,2,3` named hosts 2
/// and 3, which the client tried at 0.0.0.2 and 0.0.0.3), and an `@` is
/// escaped, since the host follows the last `@` (`1@x` named host `x`).
///
/// `live --metrics` looks a host name up as it reads the flag (`sigma:1`
/// asked DNS for `sigma`): a name that is not an address literal becomes
/// `localhost`, which `/etc/hosts` answers, and the port keeps the value.
fn on_loopback(f: &Flag, v: &str) -> String {
    match f.name.as_str() {
        "--nats" => v
            .split(',')
            .map(|one| format!("nats://127.0.0.1:{}", one.replace('@', "%40")))
            .collect::<Vec<_>>()
            .join(","),
        "--metrics" => match v.rsplit_once(':') {
            Some((host, port))
                if !host.is_empty()
                    && !host.starts_with('[')
                    && host.parse::<std::net::IpAddr>().is_err() =>
            {
                format!("localhost:{port}")
            }
            _ => v.to_string(),
        },
        _ => v.to_string(),
    }
}

/// Runs one case; returns a description of a failure.
fn check(case: &Case, dir: &Path, tiny: &Path) -> Option<String> {
    let command = case[0].0.command.clone();
    let fuzzed: Vec<&Flag> = case.iter().map(|(f, _)| f).collect();
    let mut args: Vec<String> = command.iter().map(|s| s.to_string()).collect();
    let mut flags = Vec::new();
    for (f, value) in case {
        let value = value.as_deref().map(|v| on_loopback(f, v));
        // `--flag=value`, so that values starting with '-' are values.
        match value {
            Some(v) if f.name.starts_with("--") => flags.push(format!("{}={v}", f.name)),
            Some(v) => flags.extend([f.name.clone(), v]),
            None => flags.push(f.name.clone()),
        }
    }
    args.extend(flags);
    args.extend(base(&command, &fuzzed, dir, tiny));
    let bound = if command[0] == "reproduce" {
        Duration::from_secs(3)
    } else {
        BOUND
    };
    let o = run_bounded(&args, bound);
    let shown = format!("flowsieve {}", args.join(" "));
    let long_ok = case.iter().any(|(f, _)| scales_work(f));
    match o.code {
        None => Some(format!("{shown}: ended by a signal or never ended")),
        Some(101) => Some(format!("{shown}: panicked: {}", o.stderr.trim())),
        Some(c) if !DOCUMENTED.contains(&c) => Some(format!("{shown}: undocumented exit {c}")),
        Some(130) if !o.interrupted => Some(format!("{shown}: 130 without an interrupt")),
        Some(_) if o.interrupted && !long_ok => {
            Some(format!("{shown}: ran past {bound:?} (hang?)"))
        }
        Some(c) if c != 0 && error_lines(&o.stderr) > 1 && c != 3 && c != 4 => Some(format!(
            "{shown}: exit {c} with more than one line:\n{}",
            o.stderr
        )),
        _ => None,
    }
}

/// Lines of stderr other than warnings and notes (a probe that cannot
/// reach its server warns once before it monitors locally, notes that its
/// flush is waiting when that takes over a second, then fails on one
/// line).
fn error_lines(stderr: &str) -> usize {
    stderr
        .trim()
        .lines()
        .filter(|l| !l.starts_with("flowsieve: warning:") && !l.starts_with("flowsieve: note:"))
        .count()
}

fn tiny_trace(dir: &Path) -> PathBuf {
    let p = dir.join("tiny.pcap");
    let st = Command::new(bin())
        .args([
            "gen-trace",
            "-o",
            p.to_str().unwrap(),
            "--flows",
            "50",
            "--packets",
            "300",
        ])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    p
}

/// Runs `cases` on two threads, collecting failures.
fn run_all(cases: Vec<Case>, dir: &Path, tiny: &Path) -> Vec<String> {
    let queue = Mutex::new(cases.into_iter().collect::<VecDeque<_>>());
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let Some(case) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    if let Some(e) = check(&case, dir, tiny) {
                        failures.lock().unwrap().push(e);
                    }
                }
            });
        }
    });
    failures.into_inner().unwrap()
}

/// Every flag with every special value (and alone, for switches).
#[test]
fn every_flag_with_every_extreme_value_exits_with_a_documented_code() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = tiny_trace(dir.path());
    let flags = all_flags();
    assert!(flags.len() > 80, "only {} flags found", flags.len());
    let mut cases = Vec::new();
    for f in &flags {
        if f.name == "-i" || f.name == "--interface" {
            continue; // never a real interface (see `base`)
        }
        if f.takes_value {
            for v in SPECIAL {
                // reproduce runs for a while whatever its flags: a few values.
                if f.command[0] == "reproduce" && !["0", "x", "", "/dev/zero"].contains(v) {
                    continue;
                }
                cases.push(vec![(f.clone(), Some(v.to_string()))]);
            }
        } else {
            cases.push(vec![(f.clone(), None)]);
        }
    }
    eprintln!("{} flags, {} runs", flags.len(), cases.len());
    let failures = run_all(cases, dir.path(), &tiny);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn random_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:e}")),
        (
            any::<u32>(),
            prop::sample::select(vec!["p", "ns", "us", "ms", "s", "m", "h", "K", "M", "G"])
        )
            .prop_map(|(v, u)| format!("{v}{u}")),
        (
            prop::sample::select(vec!["sigma", "n", "time", "bpe", "alpha", "k", "product"]),
            any::<f64>()
        )
            .prop_map(|(k, v)| format!("{k}:{v}")),
        (
            prop::sample::select(vec!["bpe", "alpha", "k", "product"]),
            prop::collection::vec(any::<f32>(), 0..4)
        )
            .prop_map(|(k, v)| format!(
                "{k}={}",
                v.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            )),
        "[ -~]{0,12}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random values on up to three random flags of one command at once
    /// (the pipeline and model commands, which are quick on the tiny
    /// trace): combinations such as a huge `--k` with a huge `--sigma`
    /// that no single flag shows.
    #[test]
    fn random_values_on_random_flags_exit_with_a_documented_code(
        picks in prop::collection::vec(any::<prop::sample::Index>(), 1..4),
        values in prop::collection::vec(random_value(), 3),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let tiny = tiny_trace(dir.path());
        let flags: Vec<Flag> = all_flags()
            .into_iter()
            .filter(|f| f.takes_value && !matches!(f.command[0], "reproduce" | "live" | "inject"))
            .filter(|f| f.name != "-i")
            .collect();
        let first = picks[0].get(&flags).clone();
        let same: Vec<Flag> = flags.iter().filter(|f| f.command == first.command).cloned().collect();
        let mut case: Case = vec![(first.clone(), Some(values[0].clone()))];
        for (p, v) in picks[1..].iter().zip(&values[1..]) {
            let f = p.get(&same).clone();
            if case.iter().all(|(g, _)| g.name != f.name) {
                case.push((f, Some(v.clone())));
            }
        }
        let failures = run_all(vec![case], dir.path(), &tiny);
        prop_assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
