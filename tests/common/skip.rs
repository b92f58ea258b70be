//! Skipping a test that cannot run on this machine: loudly where a
//! developer runs `cargo test`, and as a failure where CI asks for every
//! test to run.
//!
//! Why one helper: the tests used to decide this each in their own way.
//! Some read a requirement variable as set when it held anything, others
//! only when it held something other than empty or `0`, so
//! `FLOWSIEVE_REQUIRE_LIVE=0` failed some tests and skipped others. And
//! some announced the skip with `eprintln!`, which the test harness
//! captures and shows only for a failing test: a test that skipped looked
//! like one that passed.

use std::ffi::OsStr;
use std::io::Write as _;

/// What a test needs that a machine may lack, with the environment
/// variable that turns its skip into a failure (`.ci/run` sets all three).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The real captures in `../shared/traces`.
    Shared,
    /// What capture and the system tests need: root, iproute2, libpcap,
    /// tcpdump, tshark, setpriv and prlimit, a tmpfs mount.
    Live,
    /// `nats-server`, for the network mode.
    Nats,
}

impl Need {
    /// The variable that asks for the tests needing this to run.
    pub fn variable(self) -> &'static str {
        match self {
            Need::Shared => "FLOWSIEVE_REQUIRE_SHARED",
            Need::Live => "FLOWSIEVE_REQUIRE_LIVE",
            Need::Nats => "FLOWSIEVE_REQUIRE_NATS",
        }
    }

    /// Whether this process's environment asks for these tests to run.
    pub fn required(self) -> bool {
        required_by(std::env::var_os(self.variable()).as_deref())
    }
}

/// Whether a requirement variable's value asks for the tests to run: set,
/// and to anything but empty or `0`.
pub fn required_by(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// Skips `test` because of `why`, or fails it when [`Need::required`].
pub fn unless_required(need: Need, test: &str, why: &str) {
    unless(need, need.required(), test, why);
}

/// [`unless_required`] with the requirement given.
pub fn unless(need: Need, required: bool, test: &str, why: &str) {
    assert!(
        !required,
        "{test}: {why}, and {} is set: this test must run here (.ci/run installs what it needs)",
        need.variable()
    );
    skipped(test, why);
}

/// Whether every one of `programs` runs here (`PROGRAM --version`);
/// otherwise `test` is skipped, naming the missing ones, or fails when
/// `need` is required. Each program is also its Debian package's name.
pub fn programs_or_skip(need: Need, test: &str, programs: &[&str]) -> bool {
    let missing = missing_programs(programs);
    if missing.is_empty() {
        return true;
    }
    unless_required(
        need,
        test,
        &format!(
            "{} not installed (apt-get install {})",
            missing.join(" and "),
            missing.join(" ")
        ),
    );
    false
}

/// Whether libpcap's filter compiler loads here (what `-f` needs);
/// otherwise `test` is skipped, or fails when `FLOWSIEVE_REQUIRE_LIVE` is
/// set.
pub fn libpcap_or_skip(test: &str) -> bool {
    if flowsieve::ingest::TraceFilter::new("ip").is_ok() {
        return true;
    }
    unless_required(
        Need::Live,
        test,
        "libpcap not installed (apt-get install libpcap0.8)",
    );
    false
}

/// Those of `programs` that do not run here (`PROGRAM --version`).
pub fn missing_programs<'a>(programs: &[&'a str]) -> Vec<&'a str> {
    programs
        .iter()
        .copied()
        .filter(|p| {
            std::process::Command::new(p)
                .arg("--version")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_err()
        })
        .collect()
}

/// Says that `test` (or the part of it named) is skipped because of `why`,
/// for a lack no requirement covers. Straight to the stderr handle, not
/// `eprintln!`, which the harness captures for passing tests: a skip must
/// be seen by whoever runs `cargo test`.
pub fn skipped(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}
