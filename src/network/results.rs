//! The network-wide report: the collectors' merged shard-windows put
//! together per window, and its text, JSON and CSV renderings.

use super::config::NetworkConfig;
use super::merge::{HeavyFlow, ShardWindowResult};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

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
    /// Packets over all probes and shards.
    pub packets: u64,
    /// Packets per class, by name.
    pub class_packets: BTreeMap<String, u64>,
    /// Distinct flows, estimated from the merged presence filters.
    pub flows_estimate: f64,
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
}

/// Puts shard-window results together per window (only `only`, if set).
pub fn assemble(
    cfg: &NetworkConfig,
    results: &[ShardWindowResult],
    only: Option<u64>,
) -> NetworkReport {
    let mut by_window: BTreeMap<u64, Vec<&ShardWindowResult>> = BTreeMap::new();
    for r in results {
        if only.is_none_or(|w| w == r.window) {
            by_window.entry(r.window).or_default().push(r);
        }
    }
    let mut all_probes = BTreeSet::new();
    let mut windows = Vec::with_capacity(by_window.len());
    for (w, rs) in by_window {
        let mut probes = BTreeSet::new();
        let mut missing = BTreeSet::new();
        let mut class_packets: BTreeMap<String, u64> = BTreeMap::new();
        let mut heavy = Vec::new();
        let (mut packets, mut flows, mut candidates, mut saturated) = (0, 0.0, 0, 0);
        for r in &rs {
            probes.extend(r.probes.iter().cloned());
            missing.extend(r.missing.iter().cloned());
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
            heavy.extend(r.heavy.iter().cloned());
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
            packets,
            class_packets,
            flows_estimate: flows,
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
        },
        windows,
    }
}

impl NetworkReport {
    /// The text rendering: one block per window, heavy flows listed up to
    /// `top` per window.
    pub fn text(&self, top: usize) -> String {
        let mut s = String::new();
        let c = &self.network.config;
        let _ = writeln!(
            s,
            "network: {} probes ({}), {} windows of {} s, theta {} (candidates at {}), {} shards, {} partial",
            self.network.probes.len(),
            self.network.probes.join(", "),
            self.network.windows,
            c.window_ns as f64 * 1e-9,
            c.theta,
            c.candidate_theta(),
            c.shards,
            self.network.partial_windows.len()
        );
        for w in &self.windows {
            let _ = writeln!(
                s,
                "window {} (start {:.3} s): {} packets, ~{:.0} flows, {} heavy of {} candidates, probes {}{}",
                w.window,
                w.start_s,
                w.packets,
                w.flows_estimate,
                w.heavy.len(),
                w.candidates,
                w.probes.join(","),
                if w.partial {
                    format!(" PARTIAL (missing {})", w.missing.join(","))
                } else {
                    String::new()
                }
            );
            for f in w.heavy.iter().take(top) {
                let _ = writeln!(
                    s,
                    "  {:>10}  {}:{} -> {}:{} proto {}",
                    f.estimate, f.src, f.sport, f.dst, f.dport, f.proto
                );
            }
            if w.heavy.len() > top {
                let _ = writeln!(s, "  ... {} more", w.heavy.len() - top);
            }
        }
        s
    }

    /// The heavy flows as CSV: one row per window and flow.
    pub fn csv(&self) -> String {
        let mut s =
            String::from("window,start_s,src,dst,sport,dport,proto,class,estimate,partial\n");
        for w in &self.windows {
            for f in &w.heavy {
                let _ = writeln!(
                    s,
                    "{},{:.3},{},{},{},{},{},{},{},{}",
                    w.window,
                    w.start_s,
                    f.src,
                    f.dst,
                    f.sport,
                    f.dport,
                    f.proto,
                    f.class,
                    f.estimate,
                    w.partial
                );
            }
        }
        s
    }
}
