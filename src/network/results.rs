//! The network-wide report: the collectors' merged shard-windows put
//! together per window.
//!
//! It renders through the replay's own renderers: it is a report
//! [`Section`] (a heading, [`Table`]s and lines), so its text and its CSV
//! files come from the same column lists by the same code as a replay's
//! stage sections, its JSON is the same serde rendering, and its plots are
//! the replay's [`crate::report::Figure`]s.

use super::collector_beat::{CollectorState, ShardCollector};
use super::config::NetworkConfig;
use super::merge::{HeavyFlow, ShardWindowResult, cardinality_estimate};
use super::uncollected_shard::UncollectedShard;
use super::unmerged_shard::UnmergedShard;
use crate::filter::BloomFilter;
use crate::report::{Cell, Column, Section, Table};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One window over all shards.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetworkWindow {
    /// The window (from the Unix epoch).
    pub window: u64,
    /// Its start, seconds since the Unix epoch.
    pub start_s: f64,
    /// Shards with a result (a shard without traffic has none).
    pub shards: u32,
    /// Probes that contributed to some shard.
    pub probes: Vec<String>,
    /// Whether some shard of it is partial.
    pub partial: bool,
    /// Probes missing from some shard.
    pub missing: Vec<String>,
    /// Probes whose digest for some shard came after that shard-window was
    /// written, so its packets are not in this window's figures
    /// ([`ShardWindowResult::late`]). Empty in correct operation.
    pub late: Vec<String>,
    /// Packets over all probes and shards.
    pub packets: u64,
    /// Packets per class, by name.
    pub class_packets: BTreeMap<String, u64>,
    /// Distinct flows, estimated from the merged presence filters.
    pub flows_estimate: f64,
    /// Flows new to the network: in this window's merged presence filters
    /// but not in the previous window's, estimated per shard as
    /// `n(this OR previous) - n(previous)` (Swamidass-Baldi estimates of
    /// the OR-ed filters) and summed. `None` when the previous window has
    /// no result at all (the first window collected, or not yet merged).
    pub new_flows_estimate: Option<f64>,
    /// Distinct candidates the probes offered.
    pub candidates: u64,
    /// Heavy flows: merged estimate at least θ, by estimate.
    pub heavy: Vec<HeavyFlow>,
    /// Counter cells saturated in some probe's digest.
    pub saturated_cells: u64,
}

/// The `network` section.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetworkSection {
    /// The shared configuration.
    pub config: NetworkConfig,
    /// Every probe that contributed.
    pub probes: Vec<String>,
    /// Windows with a result.
    pub windows: u64,
    /// The partial ones.
    pub partial_windows: Vec<u64>,
    /// The windows some shard of which lacks a late digest (see
    /// [`NetworkWindow::late`]).
    pub late_windows: Vec<u64>,
    /// Shards whose digests no collector has taken, so that their packets
    /// are in no window (filled by `flowsieve results` from the server;
    /// empty from [`assemble`]).
    pub uncollected_shards: Vec<UncollectedShard>,
    /// Shards whose collector's consumer still holds digests that are in
    /// no written window yet: windows still open, or a collector that
    /// stopped (filled by `flowsieve results` from the server; empty from
    /// [`assemble`]).
    pub unmerged_shards: Vec<UnmergedShard>,
    /// Each shard's collector as its last beat says: running, stopped or
    /// silent ([`crate::network::collector_beat`]; filled by `flowsieve
    /// results` from the server; empty from [`assemble`]).
    pub collectors: Vec<ShardCollector>,
}

/// The whole network report (JSON schema version 2, `network` section).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetworkReport {
    /// The JSON schema version (2).
    pub schema_version: u32,
    /// Who contributed, what is partial.
    pub network: NetworkSection,
    /// Per window, oldest first.
    pub windows: Vec<NetworkWindow>,
    /// Heavy flows listed per window in the text rendering (the CSV and
    /// JSON list them all); 10 unless set.
    #[serde(skip)]
    pub listed_per_window: usize,
}

/// Puts shard-window results together per window (only `only`, if set).
pub fn assemble(
    cfg: &NetworkConfig,
    results: &[ShardWindowResult],
    only: Option<u64>,
) -> NetworkReport {
    let mut by_window: BTreeMap<u64, Vec<&ShardWindowResult>> = BTreeMap::new();
    let mut by_key: BTreeMap<(u64, u32), &ShardWindowResult> = BTreeMap::new();
    let mut collected: BTreeSet<u64> = BTreeSet::new();
    for r in results {
        by_key.insert((r.window, r.shard), r);
        collected.insert(r.window);
        if only.is_none_or(|w| w == r.window) {
            by_window.entry(r.window).or_default().push(r);
        }
    }
    let mut all_probes = BTreeSet::new();
    let mut windows = Vec::with_capacity(by_window.len());
    for (w, rs) in by_window {
        let mut probes = BTreeSet::new();
        let mut missing = BTreeSet::new();
        let mut late = BTreeSet::new();
        let mut class_packets: BTreeMap<String, u64> = BTreeMap::new();
        let mut heavy = Vec::new();
        let (mut packets, mut flows, mut candidates, mut saturated) = (0, 0.0, 0, 0);
        // The previous window counts as known once some shard of it has a
        // result: a shard without one then had no packets anywhere.
        let previous_known = w.checked_sub(1).is_some_and(|p| collected.contains(&p));
        let mut new_flows = previous_known.then_some(0.0);
        for r in &rs {
            let previous = w.checked_sub(1).and_then(|p| by_key.get(&(p, r.shard)));
            let shard_new = new_since(r, previous.copied(), previous_known);
            new_flows = new_flows.zip(shard_new.flows()).map(|(a, b)| a + b);
            probes.extend(r.probes.iter().cloned());
            missing.extend(r.missing.iter().cloned());
            late.extend(r.late.iter().cloned());
            packets += r.packets;
            flows += r.flows_estimate;
            candidates += r.candidates;
            saturated += r.saturated_cells;
            for (i, &p) in r.class_packets.iter().enumerate() {
                let name = cfg
                    .classes
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("class{i}"));
                *class_packets.entry(name).or_insert(0) += p;
            }
            heavy.extend(r.heavy.iter().cloned().map(|mut f| {
                f.new = shard_new.is_new(&f);
                f
            }));
        }
        heavy.sort_by(|a, b| b.estimate.cmp(&a.estimate).then_with(|| a.cmp(b)));
        all_probes.extend(probes.iter().cloned());
        windows.push(NetworkWindow {
            window: w,
            start_s: w as f64 * cfg.window_ns as f64 * 1e-9,
            shards: rs.len() as u32,
            probes: probes.into_iter().collect(),
            partial: rs.iter().any(|r| r.partial),
            missing: missing.into_iter().collect(),
            late: late.into_iter().collect(),
            packets,
            class_packets,
            flows_estimate: flows,
            new_flows_estimate: new_flows,
            candidates,
            heavy,
            saturated_cells: saturated,
        });
    }
    NetworkReport {
        schema_version: 2,
        network: NetworkSection {
            config: cfg.clone(),
            probes: all_probes.into_iter().collect(),
            windows: windows.len() as u64,
            partial_windows: windows
                .iter()
                .filter(|w| w.partial)
                .map(|w| w.window)
                .collect(),
            late_windows: windows
                .iter()
                .filter(|w| !w.late.is_empty())
                .map(|w| w.window)
                .collect(),
            uncollected_shards: Vec::new(),
            unmerged_shards: Vec::new(),
            collectors: Vec::new(),
        },
        windows,
        listed_per_window: 10,
    }
}

/// What one shard-window says about flows new since the previous window.
enum NewSince {
    /// The previous window is unknown, or a filter cannot be read.
    Unknown,
    /// The previous window is known and this shard had no packets in it:
    /// every flow is new.
    AllNew(f64),
    /// The estimated new flows, and the previous window's filter to ask.
    Compared { flows: f64, before: BloomFilter },
}

impl NewSince {
    fn flows(&self) -> Option<f64> {
        match self {
            NewSince::Unknown => None,
            NewSince::AllNew(n) => Some(*n),
            NewSince::Compared { flows, .. } => Some(*flows),
        }
    }

    fn is_new(&self, f: &HeavyFlow) -> Option<bool> {
        match self {
            NewSince::Unknown => None,
            NewSince::AllNew(_) => Some(true),
            NewSince::Compared { before, .. } => f.hash_value().map(|h| !before.contains(h)),
        }
    }
}

/// Flows of `r` new since `previous` (the same shard one window before):
/// all of them when the previous window is known but this shard had no
/// result in it; `n(r OR previous) - n(previous)` and a presence query per
/// heavy flow when it had one (a Bloom filter has no false negatives, so a
/// flow called new truly had no packet in the previous window; one that
/// did not may rarely be called not new, at the filter's false-positive
/// rate); nothing when the previous window is unknown or a filter cannot
/// be read.
fn new_since(
    r: &ShardWindowResult,
    previous: Option<&ShardWindowResult>,
    previous_known: bool,
) -> NewSince {
    if !previous_known {
        return NewSince::Unknown;
    }
    let Some(prev) = previous else {
        return NewSince::AllNew(r.flows_estimate);
    };
    let (Some(now), Some(before)) = (r.presence_filter(), prev.presence_filter()) else {
        return NewSince::Unknown;
    };
    let mut union = now;
    if union.union(&before).is_err() {
        return NewSince::Unknown;
    }
    let (m, k) = (before.m() as u64, before.k() as u64);
    let both = cardinality_estimate(m, k, union.count_ones());
    let old = cardinality_estimate(m, k, before.count_ones());
    NewSince::Compared {
        flows: (both - old).max(0.0),
        before,
    }
}

impl NetworkReport {
    /// The text rendering (the [`Section`] renderer every report uses),
    /// heavy flows listed up to [`NetworkReport::listed_per_window`] per
    /// window.
    pub fn text(&self) -> String {
        let mut out = String::new();
        self.render_text(&mut out);
        out
    }

    /// The figures `flowsieve results --plot DIR` draws, over windows
    /// (x: seconds since the first window): packets; distinct and new
    /// flows (estimated); heavy flows and candidates.
    ///
    /// ```
    /// use flowsieve::network::results::assemble;
    /// use flowsieve::network::NetworkConfig;
    /// # let cfg: NetworkConfig = serde_json::from_str(r#"{"version":1,"shards":1,"window_ns":1000000000,"theta":10,"counters":1024,"counter_bits":8,"k":3,"conservative":false,"presence_bits":1024,"presence_k":4,"hash_key":"fixed","probes":1,"classes":[]}"#).unwrap();
    /// let report = assemble(&cfg, &[], None);
    /// let names: Vec<String> = report.figures().iter().map(|f| f.name.clone()).collect();
    /// assert_eq!(names, ["network_packets", "network_flows", "network_heavy"]);
    /// ```
    pub fn figures(&self) -> Vec<crate::report::Figure> {
        use crate::report::{Figure, Series};
        let t0 = self.windows.first().map_or(0.0, |w| w.start_s);
        let at = |w: &NetworkWindow| w.start_s - t0;
        let series = |name: &str, f: &dyn Fn(&NetworkWindow) -> Option<f64>| {
            Series::line(
                name,
                self.windows
                    .iter()
                    .filter_map(|w| f(w).map(|y| (at(w), y)))
                    .collect(),
            )
        };
        let x = "seconds since the first window";
        let mut packets = Figure::new(
            "network_packets",
            "Packets per window, all probes",
            x,
            "packets",
        );
        packets.push(series("packets", &|w| Some(w.packets as f64)));
        let mut flows = Figure::new(
            "network_flows",
            "Distinct and new flows per window (estimated from the merged presence filters)",
            x,
            "flows",
        );
        flows.push(series("distinct flows", &|w| Some(w.flows_estimate)));
        flows.push(series("new to the network", &|w| w.new_flows_estimate));
        let mut heavy = Figure::new(
            "network_heavy",
            "Heavy flows (merged estimate >= theta) and candidates per window",
            x,
            "flows",
        );
        heavy.push(series("heavy", &|w| Some(w.heavy.len() as f64)));
        heavy.push(series("candidates", &|w| Some(w.candidates as f64)));
        let partial: Vec<(f64, f64)> = self
            .windows
            .iter()
            .filter(|w| w.partial)
            .map(|w| (at(w), w.packets as f64))
            .collect();
        packets.push(Series::marks("partial window", partial));
        vec![packets, flows, heavy]
    }
}

const WINDOW_COLUMNS: &[Column] = &[
    Column::new("window", 11),
    Column::new("start_s", 15),
    Column::new("packets", 10),
    Column::titled("flows_estimate", "flows", 8),
    Column::titled("new_flows_estimate", "new", 8),
    Column::new("heavy", 6),
    Column::new("candidates", 10),
    Column::new("shards", 6),
    Column::new("probes", 6),
    Column::titled("saturated_cells", "saturated", 9),
    Column::new("partial", 7),
    Column::new("missing", 8),
    Column::new("late", 0),
];

const HEAVY_COLUMNS: &[Column] = &[
    Column::new("window", 11),
    Column::new("estimate", 9),
    Column::new("src", 15),
    Column::new("sport", 5),
    Column::new("dst", 15),
    Column::new("dport", 5),
    Column::new("proto", 5),
    Column::new("class", 10),
    Column::new("new", 5),
    Column::new("partial", 7),
];

const CLASS_COLUMNS: &[Column] = &[
    Column::new("window", 11),
    Column::new("class", 14),
    Column::new("packets", 10),
];

fn yes_no(b: bool) -> Cell {
    Cell::Text(if b { "yes" } else { "no" }.into())
}

impl NetworkReport {
    /// One line per collector and state in `network.collectors`, its
    /// shards together, in the order of their first shard:
    /// `collector edge-1:4242 of shard(s) 0-7: running, last beat 1.2 s ago, every 3 s`.
    ///
    /// ```
    /// use flowsieve::network::collector_beat::{CollectorBeat, ShardCollector};
    /// use flowsieve::network::results::assemble;
    /// # let cfg: flowsieve::network::NetworkConfig = serde_json::from_str(r#"{"version":1,"shards":4,"window_ns":1000000000,"theta":10,"counters":1024,"counter_bits":8,"k":3,"conservative":false,"presence_bits":1024,"presence_k":4,"hash_key":"fixed","probes":1,"classes":[]}"#).unwrap();
    /// let mut report = assemble(&cfg, &[], None);
    /// let beat = |who: &str, beat_ms, stopped| CollectorBeat {
    ///     collector: who.into(),
    ///     shards: String::new(),
    ///     started_ms: 0,
    ///     beat_ms,
    ///     every_ms: 3_000,
    ///     stopped,
    ///     start_ticks: None,
    /// };
    /// let now = 20_000;
    /// report.network.collectors = vec![
    ///     ShardCollector::of(0, &beat("a:1", 18_800, false), now),
    ///     ShardCollector::of(1, &beat("a:1", 18_800, false), now),
    ///     ShardCollector::of(2, &beat("b:2", 5_000, false), now),
    ///     ShardCollector::of(3, &beat("a:1", 18_800, false), now),
    /// ];
    /// assert_eq!(
    ///     report.collector_lines(),
    ///     [
    ///         "collector a:1 of shard(s) 0-1,3: running, last beat 1.2 s ago, every 3 s",
    ///         "collector b:2 of shard(s) 2: silent, last beat 15.0 s ago, every 3 s",
    ///     ]
    /// );
    /// ```
    pub fn collector_lines(&self) -> Vec<String> {
        super::uncollected_shard::shards_by(
            self.network.collectors.iter().map(|c| (c.shard, c)),
            |c| (c.collector.clone(), c.state),
        )
        .into_iter()
        .map(|(c, shards)| {
            let state = match c.state {
                CollectorState::Running => "running",
                CollectorState::Stopped => "stopped",
                CollectorState::Silent => "silent",
            };
            format!(
                "collector {} of shard(s) {}: {state}, last beat {:.1} s ago, every {} s",
                c.collector,
                super::uncollected_shard::shard_list(&shards),
                c.last_beat_s,
                c.heartbeat_s
            )
        })
        .collect()
    }
}

impl Section for NetworkReport {
    fn heading(&self) -> String {
        let c = &self.network.config;
        format!(
            "network: {} probes ({}), {} windows of {} s, theta {} (candidates at {}), {} shards, {} partial",
            self.network.probes.len(),
            self.network.probes.join(", "),
            self.network.windows,
            c.window_ns as f64 * 1e-9,
            c.theta,
            c.candidate_theta(),
            c.shards,
            self.network.partial_windows.len()
        )
    }

    /// Three tables: `network_windows` (one row per window),
    /// `network_heavy` (one row per window and heavy flow, by estimate; the
    /// text lists [`NetworkReport::listed_per_window`] of each window) and
    /// `network_classes` (packets per window and class; CSV only).
    fn tables(&self) -> Vec<Table> {
        let mut windows = Table::new("network_windows", WINDOW_COLUMNS);
        let mut heavy = Table::new("network_heavy", HEAVY_COLUMNS);
        let mut classes = Table::new("network_classes", CLASS_COLUMNS);
        let class_name = |id: u16| {
            self.network
                .config
                .classes
                .get(usize::from(id))
                .cloned()
                .unwrap_or_else(|| format!("class{id}"))
        };
        for w in &self.windows {
            windows.push(vec![
                Cell::Count(Some(w.window)),
                Cell::Number(Some(w.start_s)),
                Cell::Count(Some(w.packets)),
                Cell::Estimate(Some(w.flows_estimate)),
                Cell::Estimate(w.new_flows_estimate),
                Cell::Count(Some(w.heavy.len() as u64)),
                Cell::Count(Some(w.candidates)),
                Cell::Count(Some(u64::from(w.shards))),
                Cell::Count(Some(w.probes.len() as u64)),
                Cell::Count(Some(w.saturated_cells)),
                yes_no(w.partial),
                Cell::Text(w.missing.join(" ")),
                Cell::Text(w.late.join(" ")),
            ]);
            for (i, f) in w.heavy.iter().enumerate() {
                heavy.push_row(
                    vec![
                        Cell::Count(Some(w.window)),
                        Cell::Count(Some(f.estimate)),
                        Cell::Text(f.src.clone()),
                        Cell::Count(Some(u64::from(f.sport))),
                        Cell::Text(f.dst.clone()),
                        Cell::Count(Some(u64::from(f.dport))),
                        Cell::Count(Some(u64::from(f.proto))),
                        Cell::Text(class_name(f.class)),
                        Cell::Text(f.new.map_or("-", |n| if n { "yes" } else { "no" }).into()),
                        yes_no(w.partial),
                    ],
                    i >= self.listed_per_window,
                );
            }
            for (class, packets) in &w.class_packets {
                classes.push_row(
                    vec![
                        Cell::Count(Some(w.window)),
                        Cell::Text(class.clone()),
                        Cell::Count(Some(*packets)),
                    ],
                    true,
                );
            }
        }
        vec![windows, heavy, classes]
    }

    fn lines(&self) -> Vec<String> {
        let mut out = self.collector_lines();
        let cut: usize = self
            .windows
            .iter()
            .map(|w| w.heavy.len().saturating_sub(self.listed_per_window))
            .sum();
        if cut > 0 {
            out.push(format!(
                "heavy flows beyond {} per window: {cut} more, in the JSON and CSV (--top N lists more)",
                self.listed_per_window
            ));
        }
        for w in self.windows.iter().filter(|w| w.partial) {
            out.push(format!(
                "window {} is partial: no digest from {} (marked after --lateness)",
                w.window,
                w.missing.join(", ")
            ));
        }
        for w in self.windows.iter().filter(|w| !w.late.is_empty()) {
            out.push(format!(
                "window {} lacks the digests of {} in some shard: they came after it was written, and are not in its figures",
                w.window,
                w.late.join(", ")
            ));
        }
        out
    }
}
