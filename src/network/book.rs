//! The collector's bookkeeping, without I/O: which shard-windows are being
//! merged, which are complete, and what each arriving digest is.
//!
//! # When a window is complete
//!
//! A probe publishes a shard-window's digest only when that shard had
//! packets in the window, and after all of a window's digests are
//! acknowledged by the stream it raises its **watermark** (kept in the
//! `flowsieve-probes` bucket): every window below it is fully published.
//! The collector reads the watermarks *first* and only then drains its
//! consumers, so every digest published before a watermark it read has
//! been delivered to it. A shard-window `w` is therefore complete when
//! every probe expected for `w` has a watermark above `w`; a probe that
//! sent no digest for it had no packets there.
//!
//! A probe is expected for `w` when it is registered, its first window is
//! at most `w`, and it has not finished before `w`. Until as many probes
//! are registered as the configuration declares, no window completes on
//! its own; after `lateness` it is written as partial, naming the probes
//! still missing.
//!
//! "Delivered" must mean delivered *here*: digests a crashed collector
//! held unacknowledged are redelivered only when the server's
//! acknowledgement wait runs out. A shard with digests out elsewhere
//! completes nothing until they are back ([`Book::ready_except`]).
//! Nor does a drain that ends on an empty fetch prove that everything was
//! delivered: a fetch can expire with digests still in the stream. A shard
//! whose consumer has not delivered through the stream's last sequence,
//! read after the watermarks, completes nothing either ([`shard_waits`]).
//! That bound is the end of the whole backlog when a collector starts
//! after a long replay, so each probe also records, with each watermark
//! raise, the sequence its digests of the windows it covers are at or
//! below ([`StoredSpan`]); a window waits only for its own digests
//! ([`Book::stored_bound`]).
//!
//! # Exactly once
//!
//! The collector acknowledges a window's messages only after its result
//! is written. A digest for a shard-window that already has a result is
//! acknowledged and not merged: a *duplicate* when the result lists its
//! probe (a probe's re-send, or a redelivery after a crash between the
//! write and the acknowledgements), *late* otherwise. Within a window in
//! progress a second digest of the same probe is held (so it is
//! acknowledged with the window) but not merged.

use super::config::NetworkConfig;
use super::digest::Digest;
use super::merge::{MergeError, ShardWindowMerge, ShardWindowResult};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A probe's registration and progress, as kept in the probes bucket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeState {
    /// The probe.
    pub probe: String,
    /// Its first window.
    pub from_window: u64,
    /// Every window below this is fully published.
    pub watermark: u64,
    /// The probe's input ended: no window at or after the watermark will
    /// come from it.
    pub finished: bool,
    /// Windows whose digests the probe had to drop (its buffer was full);
    /// they are partial.
    pub lost_windows: Vec<u64>,
    /// Where the stream held this probe's digests when its watermark rose:
    /// one span per raise, oldest first, at most [`STORED_SPANS_MAX`].
    /// Empty in a state written by a probe that predates the field; then
    /// every window waits for the stream's last sequence, as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stored: Vec<StoredSpan>,
}

/// Windows `from..to` of one probe: every digest of theirs that the probe
/// published is at a stream sequence at or below `sequence`.
///
/// The probe raises its watermark from `from` to `to` only after the
/// stream acknowledged each of those digests, and `sequence` is the
/// largest sequence any acknowledgement gave it up to then, or the
/// stream's last sequence when the probe started, whichever is larger
/// (that covers digests of these windows an earlier run of the same probe
/// stored). A collector whose consumer has delivered through `sequence`
/// therefore holds every digest of those windows and may write them
/// without waiting for the rest of a backlog ([`Book::stored_bound`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSpan {
    /// The first window covered.
    pub from: u64,
    /// The first window not covered.
    pub to: u64,
    /// No digest of these windows is past this stream sequence.
    pub sequence: u64,
}

/// How many [`StoredSpan`]s a probe state keeps. A long replay raises its
/// watermark once a round; past this many spans, the adjacent pair that
/// covers the fewest stream sequences merges (a merged span keeps the
/// larger sequence, so it stays true and only gets coarser), and the
/// state stays under 20 KB.
pub const STORED_SPANS_MAX: usize = 256;

impl ProbeState {
    /// Whether this probe is expected to report window `w`.
    pub fn expected_for(&self, w: u64) -> bool {
        self.from_window <= w && !(self.finished && self.watermark <= w)
    }

    /// Whether this probe is expected for some window at or after `from`
    /// (any window, while `from` is not known yet): then a probe that
    /// starts at `from` reports beside it.
    ///
    /// A finished probe is expected for its windows `from_window ..
    /// watermark` ([`ProbeState::expected_for`]); an unfinished one for
    /// every window from its first on, so it is always beside.
    ///
    /// ```
    /// use flowsieve::network::book::ProbeState;
    /// let done = ProbeState {
    ///     probe: "a".into(), from_window: 10, watermark: 20,
    ///     finished: true, lost_windows: vec![], stored: vec![],
    /// };
    /// assert!(done.reports_beside(Some(19)));
    /// assert!(done.reports_beside(Some(5)));
    /// assert!(!done.reports_beside(Some(20)));
    /// assert!(!done.reports_beside(None));
    /// let running = ProbeState { finished: false, ..done };
    /// assert!(running.reports_beside(Some(1_000)));
    /// assert!(running.reports_beside(None));
    /// ```
    pub fn reports_beside(&self, from: Option<u64>) -> bool {
        match from {
            _ if !self.finished => true,
            None => false,
            Some(f) => f.max(self.from_window) < self.watermark,
        }
    }

    /// The stream sequence at or below which all this probe's digests of
    /// window `w` are, if a span says so.
    ///
    /// ```
    /// use flowsieve::network::book::{ProbeState, StoredSpan};
    /// let mut p = ProbeState {
    ///     probe: "a".into(), from_window: 10, watermark: 10,
    ///     finished: false, lost_windows: vec![], stored: vec![],
    /// };
    /// p.record_stored(10, 12, 40);
    /// p.record_stored(12, 15, 90);
    /// assert_eq!(p.stored_through(11), Some(40));
    /// assert_eq!(p.stored_through(14), Some(90));
    /// assert_eq!(p.stored_through(15), None);
    /// assert_eq!(p.stored_through(9), None);
    /// ```
    pub fn stored_through(&self, w: u64) -> Option<u64> {
        self.stored
            .iter()
            .find(|s| s.from <= w && w < s.to)
            .map(|s| s.sequence)
    }

    /// Records that windows `from..to` are stored at or below `sequence`
    /// (a watermark raise), merging spans past [`STORED_SPANS_MAX`].
    pub fn record_stored(&mut self, from: u64, to: u64, sequence: u64) {
        if from >= to {
            return;
        }
        match self.stored.last_mut() {
            // Nothing new stored since the last raise: one span says both.
            Some(last) if last.to == from && last.sequence == sequence => last.to = to,
            _ => self.stored.push(StoredSpan { from, to, sequence }),
        }
        while self.stored.len() > STORED_SPANS_MAX {
            // Merge the adjacent pair whose merged span covers the fewest
            // sequences, so the spans stay even in stream sequence, which
            // is what a collector holds in memory while it waits for a
            // span's end. (Halving every pair instead left the oldest span
            // covering most of a long replay: 2,236 of 3,600 windows.)
            let mut best: Option<(u64, usize)> = None;
            for i in 0..self.stored.len() - 1 {
                let below = match i.checked_sub(1).and_then(|j| self.stored.get(j)) {
                    Some(p) => p.sequence,
                    None => 0,
                };
                let Some(b) = self.stored.get(i + 1) else {
                    break;
                };
                let cost = b.sequence.saturating_sub(below);
                if best.is_none_or(|(c, _)| cost < c) {
                    best = Some((cost, i));
                }
            }
            let Some((_, i)) = best else {
                break;
            };
            let b = self.stored.remove(i + 1);
            if let Some(a) = self.stored.get_mut(i) {
                // Spans of one probe run are adjacent; a gap (never made
                // by one run) is covered too, which only loosens it.
                a.to = a.to.max(b.to);
                a.sequence = a.sequence.max(b.sequence);
            }
        }
    }
}

/// The registered probes, other than `me`, that a probe starting at
/// window `from` (`None`: not known yet) would report beside, by id.
///
/// The network's candidate bound needs it: a flow is exported by a probe
/// whose local estimate reaches `⌈θ/P⌉`, which catches every flow of θ
/// packets only while at most `P` probes share a window (pigeonhole,
/// docs/scale-out.md). So a probe refuses to join when `P` others already
/// report beside it, rather than let the collectors merge windows in which
/// a heavy flow split over `P + 1` probes can be missed, or, once they are
/// written, call its digests late. A probe run again under its own id
/// replaces itself and is never counted.
///
/// ```
/// use flowsieve::network::book::{ProbeState, probes_beside};
/// let probe = |id: &str, finished| ProbeState {
///     probe: id.into(), from_window: 0, watermark: 60,
///     finished, lost_windows: vec![], stored: vec![],
/// };
/// let states = [probe("a", true), probe("b", false)];
/// assert_eq!(probes_beside(&states, "c", Some(10)), ["a", "b"]);
/// assert_eq!(probes_beside(&states, "c", Some(60)), ["b"]);
/// assert_eq!(probes_beside(&states, "c", None), ["b"]);
/// assert_eq!(probes_beside(&states, "a", Some(10)), ["b"]);
/// ```
pub fn probes_beside(states: &[ProbeState], me: &str, from: Option<u64>) -> Vec<String> {
    states
        .iter()
        .filter(|q| q.probe != me && q.reports_beside(from))
        .map(|q| q.probe.clone())
        .collect()
}

/// The largest set of registered probes expected for one window, by id,
/// and the first window they share (`None`: no probe registered).
///
/// Each probe is expected for its windows from its first on, to its
/// watermark once it finished ([`ProbeState::expected_for`]), so the most
/// that share a window share the first window of one of them. More than
/// the declared `probes` there breaks the candidate bound ⌈θ/P⌉; a probe
/// checks it when it joins ([`probes_beside`]), and two that join at the
/// same moment can pass that check together, which the collector names
/// with this.
///
/// ```
/// use flowsieve::network::book::{ProbeState, most_probes_at_once};
/// let probe = |id: &str, from, watermark, finished| ProbeState {
///     probe: id.into(), from_window: from, watermark,
///     finished, lost_windows: vec![], stored: vec![],
/// };
/// // a: 0..60 done; b: 30.. running; c: 60.. running.
/// let states = [probe("a", 0, 60, true), probe("b", 30, 30, false), probe("c", 60, 60, false)];
/// assert_eq!(most_probes_at_once(&states), Some((30, vec!["a".to_string(), "b".to_string()])));
/// assert_eq!(most_probes_at_once(&[]), None);
/// ```
pub fn most_probes_at_once(states: &[ProbeState]) -> Option<(u64, Vec<String>)> {
    let mut best: Option<(u64, Vec<String>)> = None;
    for p in states {
        let w = p.from_window;
        let at: Vec<String> = states
            .iter()
            .filter(|q| q.expected_for(w))
            .map(|q| q.probe.clone())
            .collect();
        if best
            .as_ref()
            .is_none_or(|(bw, b)| at.len() > b.len() || (at.len() == b.len() && w < *bw))
        {
            best = Some((w, at));
        }
    }
    best
}

/// What became of an offered digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Merged into a window in progress.
    Merged,
    /// Its probe was already merged into this shard-window: not merged
    /// again. `held`: the message waits for the window's acknowledgement.
    Duplicate {
        /// Held with its window (else: acknowledge it now).
        held: bool,
    },
    /// The shard-window already has a result without this probe:
    /// acknowledged, not merged.
    Late,
    /// Not one of this collector's shards.
    NotMine,
    /// Refused (another configuration or shape): never merged.
    Rejected(MergeError),
}

struct Pending<T> {
    merge: ShardWindowMerge,
    since_ms: u64,
    tokens: Vec<T>,
}

/// The shard-windows in progress at one collector; `T` is whatever the
/// transport needs to acknowledge a message.
pub struct Book<T> {
    cfg: NetworkConfig,
    shards: Vec<u32>,
    pending: BTreeMap<(u64, u32), Pending<T>>,
}

impl<T> Book<T> {
    /// A book for the shards `shards` under `cfg`.
    pub fn new(cfg: NetworkConfig, shards: Vec<u32>) -> Book<T> {
        Book {
            cfg,
            shards,
            pending: BTreeMap::new(),
        }
    }

    /// Shard-windows in progress.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Whether a shard-window is being merged here (then it has no
    /// result yet: a collector owns its shards alone).
    pub fn is_pending(&self, window: u64, shard: u32) -> bool {
        self.pending.contains_key(&(window, shard))
    }

    /// One digest, delivered with `token`. `written` is the probes merged
    /// into the shard-window's written result, if it has one (only they
    /// are kept of a written window: a result's presence filter and heavy
    /// list would hold a long run's every window in memory). A token comes back from
    /// [`Book::ready`] when the verdict holds it; otherwise the caller
    /// acknowledges (or, for [`Verdict::Rejected`], terminates) it now.
    pub fn offer(
        &mut self,
        d: &Digest,
        token: T,
        now_ms: u64,
        written: Option<&[String]>,
    ) -> (Verdict, Option<T>) {
        if !self.shards.contains(&d.shard) {
            return (Verdict::NotMine, Some(token));
        }
        if let Some(probes) = written {
            return if probes.contains(&d.probe) {
                (Verdict::Duplicate { held: false }, Some(token))
            } else {
                (Verdict::Late, Some(token))
            };
        }
        let cfg = &self.cfg;
        let p = self
            .pending
            .entry((d.window, d.shard))
            .or_insert_with(|| Pending {
                merge: ShardWindowMerge::new(cfg, d.shard, d.window),
                since_ms: now_ms,
                tokens: Vec::new(),
            });
        match p.merge.add(d) {
            Ok(true) => {
                p.tokens.push(token);
                (Verdict::Merged, None)
            }
            Ok(false) => {
                p.tokens.push(token);
                (Verdict::Duplicate { held: true }, None)
            }
            Err(e) => {
                if p.merge.probes().is_empty() && p.tokens.is_empty() {
                    self.pending.remove(&(d.window, d.shard));
                }
                (Verdict::Rejected(e), Some(token))
            }
        }
    }

    /// Messages held here for `shard` (merged or held duplicates of its
    /// windows in progress), not yet acknowledged.
    pub fn held(&self, shard: u32) -> usize {
        self.pending
            .iter()
            .filter(|((_, s), _)| *s == shard)
            .map(|(_, p)| p.tokens.len())
            .sum()
    }

    /// The distinct messages held here for `shard`: tokens whose
    /// `identity` is the same (`Some` equal keys, such as the stream
    /// sequence) are one message delivered more than once, and count once;
    /// tokens without one count each.
    ///
    /// This, not [`Book::held`], is what to set against the server's count
    /// of a consumer's unacknowledged messages ([`shard_waits`]). A server
    /// can deliver one message twice (nats-server 2.9 did, to pull requests
    /// that expire within milliseconds; its issue 4460), and both deliveries
    /// are held here, as a duplicate within the window, while the server
    /// counts one message pending. Counted twice, they hid a message still
    /// out with a crashed collector, and its window was written without it
    /// (`tests/network_merge.rs` shows the case).
    pub fn held_distinct<K: Ord>(&self, shard: u32, identity: impl Fn(&T) -> Option<K>) -> usize {
        let mut keys = std::collections::BTreeSet::new();
        let mut anonymous = 0;
        for t in self
            .pending
            .iter()
            .filter(|((_, s), _)| *s == shard)
            .flat_map(|(_, p)| p.tokens.iter())
        {
            match identity(t) {
                Some(k) => {
                    keys.insert(k);
                }
                None => anonymous += 1,
            }
        }
        keys.len() + anonymous
    }

    /// Every message held here, for keeping them from being redelivered
    /// while their windows wait.
    pub fn held_tokens(&self) -> impl Iterator<Item = &T> {
        self.pending.values().flat_map(|p| p.tokens.iter())
    }

    /// The shard-windows that are complete, or late past `lateness_ms`
    /// (then partial), given the probes' states read *before* the last
    /// drain of the consumers. Each comes with the tokens to acknowledge
    /// once its result is written.
    pub fn ready(
        &mut self,
        probes: &[ProbeState],
        now_ms: u64,
        lateness_ms: u64,
    ) -> Vec<(ShardWindowResult, Vec<T>)> {
        self.ready_except(probes, now_ms, lateness_ms, &[])
    }

    /// [`Book::ready`], leaving the shards in `blocked` alone: shards with
    /// digests delivered but not here.
    ///
    /// The watermark rule above says every digest published before a
    /// watermark has been *delivered*; it does not say delivered to this
    /// collector. A collector that crashed holding a window's digests
    /// unacknowledged leaves them assigned to it until the server's
    /// acknowledgement wait runs out, and a restarted collector that
    /// completed the window meanwhile, from the digests that did arrive,
    /// would write it without them: a wrong result, not even partial. So
    /// the collector compares, per shard, the server's count of delivered
    /// but unacknowledged digests with what it holds, and a shard with
    /// more out than here waits (not even lateness writes it) until they
    /// are redelivered to it.
    pub fn ready_except(
        &mut self,
        probes: &[ProbeState],
        now_ms: u64,
        lateness_ms: u64,
        blocked: &[u32],
    ) -> Vec<(ShardWindowResult, Vec<T>)> {
        self.ready_unless(probes, now_ms, lateness_ms, |s, _| blocked.contains(&s))
    }

    /// [`Book::ready`], leaving alone each shard-window `(w, s)` for which
    /// `waits(s, bound)` says so. `bound` is [`Book::stored_bound`] of
    /// `w`: the collector passes it to [`shard_waits`] with the shard's
    /// consumer, so a window whose digests the consumer has delivered is
    /// written while later ones of a backlog are still in the stream.
    pub fn ready_unless(
        &mut self,
        probes: &[ProbeState],
        now_ms: u64,
        lateness_ms: u64,
        mut waits: impl FnMut(u32, Option<u64>) -> bool,
    ) -> Vec<(ShardWindowResult, Vec<T>)> {
        let done: Vec<((u64, u32), Vec<String>)> = self
            .pending
            .iter()
            .filter_map(|(&key, p)| {
                self.missing_if_done(key.0, p.since_ms, probes, now_ms, lateness_ms)
                    .map(|missing| (key, missing))
            })
            .filter(|((w, s), missing)| {
                let bound = if missing.is_empty() {
                    Self::stored_bound(*w, probes)
                } else {
                    None
                };
                !waits(*s, bound)
            })
            .collect();
        let mut out = Vec::with_capacity(done.len());
        for (key, missing) in done {
            if let Some(p) = self.pending.remove(&key) {
                out.push((p.merge.finish(missing), p.tokens));
            }
        }
        out
    }

    /// The stream sequence at or below which every digest of window `w`
    /// is, by the [`StoredSpan`]s of the probes expected for it; `None`
    /// when one of them has no span for `w` (or none is expected).
    ///
    /// Why: the watermarks alone say that a window's digests were stored
    /// before the watermarks were read, so at or below the stream's last
    /// sequence then. After a long replay that is the end of the whole
    /// backlog, and a collector held every digest of it in memory (9.9 GB
    /// for an hour's 26,595) before it could write the first window. The
    /// spans bound each window by where its own digests are.
    pub fn stored_bound(w: u64, probes: &[ProbeState]) -> Option<u64> {
        let mut bound = None;
        for p in probes.iter().filter(|p| p.expected_for(w)) {
            let s = p.stored_through(w)?;
            bound = Some(bound.map_or(s, |b: u64| b.max(s)));
        }
        bound
    }

    /// The shards with a window [`Book::ready`] would hand out now.
    pub fn shards_ready(&self, probes: &[ProbeState], now_ms: u64, lateness_ms: u64) -> Vec<u32> {
        let mut shards: Vec<u32> = self
            .pending
            .iter()
            .filter(|&(&(w, _), p)| {
                self.missing_if_done(w, p.since_ms, probes, now_ms, lateness_ms)
                    .is_some()
            })
            .map(|(&(_, s), _)| s)
            .collect();
        shards.sort_unstable();
        shards.dedup();
        shards
    }

    /// Whether window `w` (in progress since `since_ms`) is complete, or
    /// late past `lateness_ms`: then the probes it lacks.
    fn missing_if_done(
        &self,
        w: u64,
        since_ms: u64,
        probes: &[ProbeState],
        now_ms: u64,
        lateness_ms: u64,
    ) -> Option<Vec<String>> {
        let declared = self.cfg.probes as usize;
        let registered = probes.len();
        let mut missing: Vec<String> = probes
            .iter()
            .filter(|q| q.expected_for(w))
            .filter(|q| q.watermark <= w || q.lost_windows.contains(&w))
            .map(|q| q.probe.clone())
            .collect();
        let waiting = missing.iter().any(|m| {
            probes
                .iter()
                .any(|q| q.probe == *m && !q.lost_windows.contains(&w))
        }) || registered < declared;
        let late = now_ms.saturating_sub(since_ms) >= lateness_ms;
        if waiting && !late {
            return None;
        }
        if registered < declared {
            missing.push(format!("({} undeclared)", declared - registered));
        }
        Some(missing)
    }
}

/// What the server says of one shard's consumer, for [`shard_waits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsumerView {
    /// Digests delivered to some collector and not acknowledged.
    pub ack_pending: u64,
    /// Digests stored and not yet delivered to any collector.
    pub undelivered: u64,
    /// The stream sequence of the last digest delivered.
    pub delivered_through: u64,
}

/// Whether a shard with a window ready to write must wait instead.
///
/// `held` is how many of the shard's digests this collector holds;
/// `covered` is the stream's last sequence, read after the probes'
/// watermarks (`None`: it could not be read), or for one window, tighter,
/// its [`Book::stored_bound`]. Every digest a watermark covers was stored
/// before the watermark was written, so at or below `covered`. The shard
/// (or the window) waits when
///
/// - `covered` is unknown (nothing proves the consumer drained);
/// - digests are undelivered and the consumer has not delivered through
///   `covered`: some a watermark promises may not have arrived (a fetch
///   that expired while the cluster elected a leader, or under load,
///   returned nothing and ended the drain);
/// - more digests are delivered but unacknowledged than this collector
///   holds: a crashed predecessor's, until they are redelivered here.
///
/// ```
/// use flowsieve::network::book::{ConsumerView, shard_waits};
/// let drained = ConsumerView { ack_pending: 3, undelivered: 0, delivered_through: 90 };
/// assert!(!shard_waits(drained, 3, Some(100)));
/// // Newer digests only (the consumer delivered through what the watermarks cover).
/// let newer = ConsumerView { undelivered: 2, delivered_through: 100, ..drained };
/// assert!(!shard_waits(newer, 3, Some(100)));
/// // Undelivered digests that may be older than the watermarks.
/// let behind = ConsumerView { undelivered: 2, delivered_through: 99, ..drained };
/// assert!(shard_waits(behind, 3, Some(100)));
/// // A predecessor's digests still out.
/// assert!(shard_waits(drained, 2, Some(100)));
/// assert!(shard_waits(drained, 3, None));
/// ```
pub fn shard_waits(view: ConsumerView, held: u64, covered: Option<u64>) -> bool {
    let Some(covered) = covered else {
        return true;
    };
    (view.undelivered > 0 && view.delivered_through < covered) || view.ack_pending > held
}
