//! A collector's sign of life, and what `flowsieve results` makes of it.
//!
//! Nothing else on the server tells a running collector from a stopped
//! one. Its durable consumers outlive it (that is how its successor takes
//! its digests over), and its pull requests outlive a killed collector by
//! their expiry. So a collector writes a beat, under each shard it owns
//! ([`beat_key`]), when it starts, every `collect --heartbeat` period
//! while it runs, and once more, marked stopped, when it ends cleanly.
//! `results` reads the beats and says which shards have a collector
//! running, which one stopped, and which one went silent (killed, or cut
//! off from the server), so an operator learns that windows are not being
//! written before the missing windows show it.
//!
//! A beat also claims its shards. A collector is refused shards whose beat
//! is another running collector's ([`taken_shards`]), and every beat is
//! a compare and set on the revision the collector last wrote, so that
//! of two collectors claiming a shard at once one finds the other's beat,
//! and a collector whose shards were taken over while it was cut off
//! stops at its next beat rather than write beside its successor.

use serde::{Deserialize, Serialize};

/// A beat older than this many periods is silence: the collector beats
/// every period, and two lost beats in a row can be a slow server; a
/// third cannot.
pub const SILENT_AFTER_BEATS: u64 = 3;

/// One collector's beat, stored under each shard it owns.
///
/// ```
/// use flowsieve::network::collector_beat::{CollectorBeat, CollectorState};
/// let beat = CollectorBeat {
///     collector: "edge-7:4242".into(),
///     shards: "0-7".into(),
///     started_ms: 1_000,
///     beat_ms: 10_000,
///     every_ms: 3_000,
///     stopped: false,
///     start_ticks: Some(5_123),
/// };
/// assert_eq!(beat.state(12_000), CollectorState::Running);
/// assert_eq!(beat.state(19_000), CollectorState::Running); // three periods
/// assert_eq!(beat.state(19_001), CollectorState::Silent);
/// // A beat ahead of the reader's clock (another machine's) is recent.
/// assert_eq!(beat.state(9_000), CollectorState::Running);
/// assert_eq!(CollectorBeat { stopped: true, ..beat }.state(12_000), CollectorState::Stopped);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectorBeat {
    /// Who: the host's name and the process id (`host:pid`).
    pub collector: String,
    /// The shards it owns, as `collect --shards` takes them.
    pub shards: String,
    /// When it started, Unix milliseconds on its own clock.
    pub started_ms: u64,
    /// When it wrote this beat, Unix milliseconds on its own clock.
    pub beat_ms: u64,
    /// Its period (`collect --heartbeat`), milliseconds.
    pub every_ms: u64,
    /// It ended cleanly (Ctrl-C, SIGTERM, `--exit-when-done`) and wrote
    /// this beat on its way out.
    pub stopped: bool,
    /// When its process started, in clock ticks after its host booted
    /// (`/proc/PID/stat`'s 22nd field, [`process_at`]). With the process
    /// id it tells the collector from a later process that was given the
    /// same id after the collector ended. `None` where it could not be
    /// read, and in the beats of collectors from before it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ticks: Option<u64>,
}

/// What a shard's last beat says of its collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CollectorState {
    /// It beat within [`SILENT_AFTER_BEATS`] periods.
    Running,
    /// It said it stopped.
    Stopped,
    /// Its last beat is older than [`SILENT_AFTER_BEATS`] periods and did
    /// not say it stopped: killed, crashed, or cut off from the server.
    Silent,
}

impl CollectorBeat {
    /// How long ago, at `now_ms` on the reader's clock, the beat was
    /// written: 0 for a beat ahead of that clock.
    pub fn age_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.beat_ms)
    }

    /// The collector's state at `now_ms`. The two clocks are different
    /// machines' (the collector's and the reader's), so a skew between
    /// them moves the line between running and silent by as much.
    pub fn state(&self, now_ms: u64) -> CollectorState {
        if self.stopped {
            CollectorState::Stopped
        } else if self.age_ms(now_ms) > self.every_ms.saturating_mul(SILENT_AFTER_BEATS) {
            CollectorState::Silent
        } else {
            CollectorState::Running
        }
    }

    /// Whether the collector that wrote this beat is known to have ended
    /// without its stopped beat (killed): it ran on `this_host`, and
    /// `process` (what this host says of a process id, [`process_at`])
    /// says no process has its id, or that the one that has it started at
    /// another tick than the beat's, so was given the id after the
    /// collector ended. A beat of another host, or one without its
    /// process's start whose id a process has, is not known to have ended.
    ///
    /// ```
    /// use flowsieve::network::collector_beat::{CollectorBeat, ProcessAt};
    /// let beat = CollectorBeat {
    ///     collector: "edge-7:4242".into(),
    ///     shards: "0-7".into(),
    ///     started_ms: 1_000,
    ///     beat_ms: 10_000,
    ///     every_ms: 3_000,
    ///     stopped: false,
    ///     start_ticks: Some(500),
    /// };
    /// let started_at = |t| move |_| ProcessAt::Present { start_ticks: Some(t) };
    /// assert!(!beat.ended_on("edge-7", started_at(500))); // its own process
    /// assert!(beat.ended_on("edge-7", started_at(900))); // its id, taken again
    /// assert!(beat.ended_on("edge-7", |_| ProcessAt::Absent));
    /// assert!(!beat.ended_on("edge-8", |_| ProcessAt::Absent)); // another host's
    /// // Without the start on either side, a process with the id is taken for it.
    /// let unknown = |_| ProcessAt::Present { start_ticks: None };
    /// assert!(!beat.ended_on("edge-7", unknown));
    /// let old = CollectorBeat { start_ticks: None, ..beat };
    /// assert!(!old.ended_on("edge-7", started_at(900)));
    /// assert!(old.ended_on("edge-7", |_| ProcessAt::Absent));
    /// ```
    pub fn ended_on(&self, this_host: &str, process: impl Fn(u32) -> ProcessAt) -> bool {
        let Some((host, pid)) = self.collector.rsplit_once(':') else {
            return false;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            return false;
        };
        if host != this_host {
            return false;
        }
        match process(pid) {
            ProcessAt::Absent => true,
            ProcessAt::Present { start_ticks } => {
                matches!((self.start_ticks, start_ticks), (Some(a), Some(b)) if a != b)
            }
        }
    }
}

/// What a host says of a process id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessAt {
    /// No process has it.
    Absent,
    /// A process has it, which started at this many clock ticks after the
    /// host booted (`None` where that could not be read).
    Present {
        /// `/proc/PID/stat`'s `starttime`.
        start_ticks: Option<u64>,
    },
}

/// What this host says of process `pid`, from `/proc/PID` (Linux):
/// [`ProcessAt::Absent`] where there is no such directory.
///
/// The start is `starttime`, the 22nd field of `/proc/PID/stat`. It is
/// counted from boot, so a step of the wall clock does not move it, and
/// it is read after the process's name, which may hold spaces and `)`.
///
/// ```
/// use flowsieve::network::collector_beat::{ProcessAt, process_at};
/// let me = process_at(std::process::id());
/// assert!(matches!(me, ProcessAt::Present { start_ticks: Some(_) }));
/// assert_eq!(process_at(std::process::id()), me); // the same every time
/// assert_eq!(process_at(u32::MAX), ProcessAt::Absent); // past pid_max
/// ```
pub fn process_at(pid: u32) -> ProcessAt {
    let dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    match std::fs::read_to_string(dir.join("stat")) {
        Ok(stat) => ProcessAt::Present {
            start_ticks: start_ticks_of_stat(&stat),
        },
        Err(_) if dir.exists() => ProcessAt::Present { start_ticks: None },
        Err(_) => ProcessAt::Absent,
    }
}

/// `starttime` of a `/proc/PID/stat` line: the 22nd field, the 20th after
/// the name in parentheses (the name's last `)` ends it).
///
/// ```
/// use flowsieve::network::collector_beat::start_ticks_of_stat;
/// let stat = "4242 (a) b) S 1 4242 4242 0 -1 4194560 99 0 0 0 1 2 0 0 20 0 1 0 8675309 1000 50";
/// assert_eq!(start_ticks_of_stat(stat), Some(8_675_309));
/// assert_eq!(start_ticks_of_stat("4242 (flowsieve) S 1 2"), None);
/// assert_eq!(start_ticks_of_stat("no name"), None);
/// ```
pub fn start_ticks_of_stat(stat: &str) -> Option<u64> {
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// The key of shard `shard`'s beat in the collectors bucket. A collector
/// started again for the same shards overwrites its predecessor's.
///
/// ```
/// assert_eq!(flowsieve::network::collector_beat::beat_key(12), "s12");
/// ```
pub fn beat_key(shard: u32) -> String {
    format!("s{shard}")
}

/// The shard a beat key names, if it is one.
///
/// ```
/// use flowsieve::network::collector_beat::shard_of_key;
/// assert_eq!(shard_of_key("s12"), Some(12));
/// assert_eq!(shard_of_key("x12"), None);
/// ```
pub fn shard_of_key(key: &str) -> Option<u32> {
    key.strip_prefix('s')?.parse().ok()
}

/// A shard's collector as `flowsieve results` reports it
/// (`network.collectors` in its JSON).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShardCollector {
    /// The shard.
    pub shard: u32,
    /// The collector that last beat for it (`host:pid`).
    pub collector: String,
    /// What that beat says.
    pub state: CollectorState,
    /// Seconds since that beat, on the reader's clock.
    pub last_beat_s: f64,
    /// The collector's period, seconds.
    pub heartbeat_s: f64,
}

impl ShardCollector {
    /// Shard `shard`'s collector at `now_ms`, from its last `beat`.
    pub fn of(shard: u32, beat: &CollectorBeat, now_ms: u64) -> ShardCollector {
        ShardCollector {
            shard,
            collector: beat.collector.clone(),
            state: beat.state(now_ms),
            last_beat_s: beat.age_ms(now_ms) as f64 / 1e3,
            heartbeat_s: beat.every_ms as f64 / 1e3,
        }
    }
}

/// Of the beats `found` under the shards a collector `me` is about to own,
/// those of another collector still running at `now_ms`, each with the
/// shards it holds, in the order first found.
///
/// Two collectors of one shard share its durable consumer, so the server
/// splits the shard's digests between them, and each writes its windows
/// partial with the other's digests missing. A collector is therefore
/// refused the shards another one runs for. `gone` says whether a
/// collector is known to have ended without its stopped beat (killed on
/// this host: its process is not there, or its process id is another
/// process's now, [`CollectorBeat::ended_on`]), so that one restarted at
/// once is not kept waiting for its predecessor's beat to age into
/// silence.
///
/// ```
/// use flowsieve::network::collector_beat::{CollectorBeat, taken_shards};
/// let beat = |who: &str, beat_ms, stopped| CollectorBeat {
///     collector: who.into(),
///     shards: "0-3".into(),
///     started_ms: 0,
///     beat_ms,
///     every_ms: 3_000,
///     stopped,
///     start_ticks: None,
/// };
/// let found = vec![
///     (0, beat("a:1", 10_000, false)), // running
///     (1, beat("a:1", 10_000, false)),
///     (2, beat("b:2", 10_000, true)),  // stopped
///     (3, beat("c:3", 1_000, false)),  // silent
///     (4, beat("me:9", 10_000, false)), // this collector's own
///     (5, beat("d:4", 10_000, false)), // known gone
/// ];
/// let taken = taken_shards(found.iter().map(|(s, b)| (*s, b)), "me:9", 12_000, |b| b.collector == "d:4");
/// assert_eq!(taken.len(), 1);
/// assert_eq!((taken[0].0.collector.as_str(), taken[0].1.clone()), ("a:1", vec![0, 1]));
/// ```
pub fn taken_shards<'a>(
    found: impl IntoIterator<Item = (u32, &'a CollectorBeat)>,
    me: &str,
    now_ms: u64,
    gone: impl Fn(&CollectorBeat) -> bool,
) -> Vec<(&'a CollectorBeat, Vec<u32>)> {
    let others = found.into_iter().filter(|(_, beat)| {
        beat.collector != me && beat.state(now_ms) == CollectorState::Running && !gone(beat)
    });
    super::uncollected_shard::shards_by(others, |beat| beat.collector.clone())
}
