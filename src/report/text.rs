//! The human-readable replay summary.

use super::ReplaySummary;
use std::fmt::Write;

fn si(x: f64) -> String {
    let (v, unit) = if x >= 1e9 {
        (x / 1e9, "G")
    } else if x >= 1e6 {
        (x / 1e6, "M")
    } else if x >= 1e3 {
        (x / 1e3, "k")
    } else {
        (x, "")
    };
    if unit.is_empty() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}{unit}")
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

impl ReplaySummary {
    /// A readable multi-section summary for a terminal.
    pub fn render_text(&self) -> String {
        let mut o = String::new();
        let t = &self.trace;
        // A live capture reads no file; its capture section follows the
        // report instead.
        let what = if t.files.is_empty() { "live" } else { "replay" };
        let _ = writeln!(o, "flowsieve {} {what}", self.tool.version);
        // The key is what makes a run with `--hash-key random` repeatable:
        // a report that left it out would be the only record of a run that
        // nobody can run again.
        if let Some(key) = &self.options.hash_key {
            let _ = writeln!(o, "flow hash keyed: --hash-key {key}");
        }
        let _ = writeln!(o);
        if !t.files.is_empty() {
            let _ = writeln!(o, "files");
        }
        for f in &t.files {
            let state = match (&f.error, f.complete) {
                (Some(_), _) if f.stopped_by_filter => "stopped (-f)",
                (Some(_), _) => "DAMAGED",
                (None, true) => "complete",
                (None, false) if f.interrupted => "INTERRUPTED",
                (None, false) => "stopped (-c)",
            };
            let lts: Vec<String> = f.link_types.iter().map(|l| l.to_string()).collect();
            let fmt = if f.compression == "none" || f.compression.is_empty() {
                f.format.clone()
            } else {
                format!("{}+{}", f.format, f.compression)
            };
            let _ = writeln!(
                o,
                "  {}  [{}] link types {}  {} packets{}  {}B wire  {}",
                f.path,
                if fmt.is_empty() { "?".into() } else { fmt },
                if lts.is_empty() {
                    "-".into()
                } else {
                    lts.join(",")
                },
                f.packets,
                match f.filtered_out {
                    Some(n) => format!(" ({n} filtered out)"),
                    None => String::new(),
                },
                si(f.wire_bytes as f64),
                state
            );
            if f.time_steps_back > 0 {
                let _ = writeln!(
                    o,
                    "    not in time order: {} stamped before the one ahead of {} (largest step back {:.6} s); each counts at the latest time so far",
                    if f.time_steps_back == 1 {
                        "1 packet".to_string()
                    } else {
                        format!("{} packets", f.time_steps_back)
                    },
                    if f.time_steps_back == 1 { "it" } else { "them" },
                    f.largest_step_back_s
                );
            }
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "trace");
        let _ = writeln!(o, "  packets          {:>12}", t.packets);
        if let (Some(n), Some(expr)) = (t.filtered_out, &self.options.filter) {
            let _ = writeln!(
                o,
                "  filtered out     {n:>12}  (filter {expr:?}; in no figure of this report)"
            );
        }
        let _ = writeln!(
            o,
            "  ip packets       {:>12}  ({})",
            t.ip_packets,
            pct(t.ip_packets, t.packets)
        );
        match t.flows {
            Some(f) => {
                let _ = writeln!(o, "  flows            {:>12}", f);
            }
            None => {
                let _ = writeln!(
                    o,
                    "  flows            {:>12}  (exact table off: no ground truth)",
                    "-"
                );
            }
        }
        let _ = writeln!(
            o,
            "  wire bytes       {:>12}  ({}B)",
            t.wire_bytes,
            si(t.wire_bytes as f64)
        );
        let _ = writeln!(
            o,
            "  captured bytes   {:>12}  ({}B)",
            t.captured_bytes,
            si(t.captured_bytes as f64)
        );
        let _ = writeln!(
            o,
            "  truncated pkts   {:>12}  (caplen < wire length)",
            t.truncated_packets
        );
        if let (Some(a), Some(b), Some(d)) = (t.first_ts, t.last_ts, t.duration_s) {
            let _ = writeln!(o, "  time span        {a:.6} .. {b:.6}  ({d:.3} s)");
        }
        let _ = writeln!(
            o,
            "  read rate        {:>12}  packets/s  ({:.3} s)",
            si(t.packets_per_sec),
            t.read_seconds
        );
        let lts: Vec<String> = t
            .link_types
            .iter()
            .map(|l| format!("{} {}={}", l.link_type, l.name, l.packets))
            .collect();
        let _ = writeln!(
            o,
            "  link types       {}",
            if lts.is_empty() {
                "-".into()
            } else {
                lts.join("  ")
            }
        );
        let _ = writeln!(o);
        let skipped: u64 = t.skipped.values().sum();
        let _ = writeln!(o, "skipped (no flow key): {skipped}");
        for (reason, n) in t.skipped.iter().filter(|(_, n)| **n > 0) {
            let _ = writeln!(o, "  {reason:<24}{n:>10}");
        }
        if t.ports_truncated > 0 {
            let _ = writeln!(
                o,
                "  (keyed with ports 0, ports cut off by the snaplen: {})",
                t.ports_truncated
            );
        }
        if !self.flows_top.is_empty() {
            let _ = writeln!(o);
            let _ = writeln!(o, "top {} flows by packets", self.flows_top.len());
            let _ = writeln!(
                o,
                "  {:>3}  {:<39} {:>5}  {:<39} {:>5} {:>5} {:>10} {:>12}  class",
                "#", "src", "sport", "dst", "dport", "proto", "packets", "bytes"
            );
            for (i, f) in self.flows_top.iter().enumerate() {
                let _ = writeln!(
                    o,
                    "  {:>3}  {:<39} {:>5}  {:<39} {:>5} {:>5} {:>10} {:>12}  {}",
                    i + 1,
                    f.src,
                    f.sport,
                    f.dst,
                    f.dport,
                    f.proto,
                    f.packets,
                    f.bytes,
                    f.class
                );
            }
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "classes ({})", self.options.classes);
        // As wide as the longest class name (a `--classes` file's names
        // can be any length), so the counts stay under their titles.
        let w = self
            .classes
            .iter()
            .map(|c| c.class.chars().count())
            .fold(16, usize::max);
        let _ = writeln!(
            o,
            "  {:<w$} {:>10} {:>12} {:>14}",
            "class", "flows", "packets", "bytes"
        );
        for c in &self.classes {
            let flows = c.flows.map_or("-".to_string(), |f| f.to_string());
            let _ = writeln!(
                o,
                "  {:<w$} {:>10} {:>12} {:>14}",
                c.class, flows, c.packets, c.bytes
            );
        }
        o
    }
}
