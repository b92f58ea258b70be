//! A collector's beat (`flowsieve::network::collector_beat`): what a beat
//! says of its collector at a given time, and which shards a collector
//! about to start is refused, checked as properties over arbitrary beats.

use flowsieve::network::collector_beat::{
    CollectorBeat, CollectorState, ProcessAt, SILENT_AFTER_BEATS, process_at, taken_shards,
};
use proptest::prelude::*;
use std::collections::BTreeSet;

/// A beat of collector `c{who}` (a few names, so that collectors own
/// several shards), within a minute of `t = 60 s`.
fn beat() -> impl Strategy<Value = CollectorBeat> {
    (0u8..4, 0u64..60_000, 1u64..20_000, any::<bool>()).prop_map(
        |(who, beat_ms, every_ms, stopped)| CollectorBeat {
            collector: format!("c{who}"),
            shards: String::new(),
            started_ms: 0,
            beat_ms,
            every_ms,
            stopped,
            start_ticks: None,
        },
    )
}

proptest! {
    /// A stopped beat is stopped; any other is running up to
    /// SILENT_AFTER_BEATS periods after it and silent from then on, on a
    /// clock ahead of or behind the collector's alike.
    #[test]
    fn a_beat_is_silent_exactly_past_three_periods(b in beat(), now in 0u64..200_000) {
        let state = b.state(now);
        if b.stopped {
            prop_assert_eq!(state, CollectorState::Stopped);
        } else if now > b.beat_ms + SILENT_AFTER_BEATS * b.every_ms {
            prop_assert_eq!(state, CollectorState::Silent);
            // And stays silent.
            prop_assert_eq!(b.state(now + 1), CollectorState::Silent);
        } else {
            prop_assert_eq!(state, CollectorState::Running);
        }
        prop_assert_eq!(b.age_ms(now), now.saturating_sub(b.beat_ms));
    }

    /// `taken_shards` names exactly the shards whose beat is another
    /// collector's, running and not known gone; each such collector once,
    /// with its beat and its shards in the order found.
    #[test]
    fn the_shards_refused_are_those_of_other_running_collectors(
        beats in proptest::collection::vec(beat(), 0..24),
        me in 0u8..5,
        gone in proptest::collection::btree_set(0u8..4, 0..3),
        now in 0u64..120_000,
    ) {
        let me = format!("c{me}");
        let gone: BTreeSet<String> = gone.iter().map(|g| format!("c{g}")).collect();
        let found: Vec<(u32, CollectorBeat)> =
            beats.into_iter().enumerate().map(|(s, b)| (s as u32, b)).collect();
        let taken = taken_shards(found.iter().map(|(s, b)| (*s, b)), &me, now, |b| gone.contains(&b.collector));
        let expected: Vec<u32> = found
            .iter()
            .filter(|(_, b)| {
                b.collector != me
                    && !b.stopped
                    && now <= b.beat_ms + SILENT_AFTER_BEATS * b.every_ms
                    && !gone.contains(&b.collector)
            })
            .map(|(s, _)| *s)
            .collect();
        let mut named: Vec<u32> = taken.iter().flat_map(|(_, s)| s.iter().copied()).collect();
        named.sort_unstable();
        prop_assert_eq!(&named, &expected);
        let collectors: BTreeSet<&str> = taken.iter().map(|(b, _)| b.collector.as_str()).collect();
        prop_assert_eq!(collectors.len(), taken.len());
        for (b, shards) in &taken {
            prop_assert!(shards.windows(2).all(|w| w[0] < w[1]));
            for s in shards {
                prop_assert_eq!(&found[*s as usize].1.collector, &b.collector);
            }
            // The beat given is that of the collector's first shard named.
            prop_assert_eq!(&found[shards[0] as usize].1, *b);
        }
    }
}

/// Seconds since boot, from `/proc/uptime`.
fn uptime_s() -> f64 {
    let up = std::fs::read_to_string("/proc/uptime").unwrap();
    up.split_whitespace().next().unwrap().parse().unwrap()
}

/// `process_at` reads a process's start as the kernel counts it: a child
/// spawned between two readings of the uptime started, by its ticks,
/// between them (a field next to `starttime` read instead, such as the
/// priority or the virtual size, would not), and it is read the same
/// while the child runs. Once the child is reaped its id has no process.
/// A beat naming the child's id with its own start is its, and with
/// another start is a process that had the id before it.
#[test]
fn a_process_start_is_read_in_ticks_since_boot() {
    // SAFETY: sysconf reads a constant of the system and has no
    // preconditions.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    assert!(ticks_per_s > 0.0);
    let before = uptime_s();
    // Killed if an assertion fails before the end.
    let child = crate::common::KilledAtEnd::new(
        std::process::Command::new("sleep")
            .arg("600")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let after = uptime_s();
    let pid = child.id();
    let at = process_at(pid);
    let ProcessAt::Present {
        start_ticks: Some(ticks),
    } = at
    else {
        panic!("{at:?}");
    };
    let started = ticks as f64 / ticks_per_s;
    // One tick either side: the count is whole ticks.
    let tick = 1.0 / ticks_per_s;
    assert!(
        (before - tick..=after + tick).contains(&started),
        "started {started} s after boot, spawned between {before} and {after}"
    );
    assert_eq!(process_at(pid), at);
    let host = "here";
    let beat = CollectorBeat {
        collector: format!("{host}:{pid}"),
        shards: "0".into(),
        started_ms: 0,
        beat_ms: 0,
        every_ms: 3_000,
        stopped: false,
        start_ticks: Some(ticks),
    };
    assert!(!beat.ended_on(host, process_at));
    let earlier = CollectorBeat {
        start_ticks: Some(ticks - 1),
        ..beat.clone()
    };
    assert!(earlier.ended_on(host, process_at));
    let mut child = child.take();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(process_at(pid), ProcessAt::Absent);
    assert!(beat.ended_on(host, process_at));
}

/// A beat written by a collector from before beats carried the process's
/// start reads with none, and is judged by the process id alone; a beat
/// without a start is written without the field, as such a collector
/// wrote it.
#[test]
fn a_beat_without_its_process_start_still_reads() {
    let old = r#"{"collector":"here:1","shards":"0-3","started_ms":5,"beat_ms":9,"every_ms":3000,"stopped":false}"#;
    let beat: CollectorBeat = serde_json::from_str(old).unwrap();
    assert_eq!(beat.start_ticks, None);
    assert_eq!(
        (beat.collector.as_str(), beat.shards.as_str(), beat.beat_ms),
        ("here:1", "0-3", 9)
    );
    assert_eq!(serde_json::to_string(&beat).unwrap(), old);
    let present = |_| ProcessAt::Present {
        start_ticks: Some(7),
    };
    assert!(!beat.ended_on("here", present));
    assert!(beat.ended_on("here", |_| ProcessAt::Absent));
    let new = CollectorBeat {
        start_ticks: Some(7),
        ..beat
    };
    assert_eq!(
        serde_json::to_string(&new).unwrap(),
        old.replace('}', r#","start_ticks":7}"#)
    );
}
