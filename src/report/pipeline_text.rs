//! The human-readable report of a pipeline run: the replay summary, then
//! each stage's section (heading, tables, lines), then latency and
//! throughput. Every section renders the same way, so a new stage's
//! section needs no change here.

use super::PipelineReport;
use super::table::{Cell, Column, Table};
use std::fmt::Write;

const LATENCY_COLUMNS: &[Column] = &[
    Column::titled("stage", "stage", 10),
    Column::new("batches", 9),
    Column::titled("p50_ns", "p50", 10),
    Column::titled("p99_ns", "p99", 10),
    Column::titled("max_ns", "max", 11),
    Column::titled("ns_per_packet", "ns/pkt", 8),
];

impl PipelineReport {
    /// The per-batch latency table.
    pub fn latency_table(&self) -> Table {
        let mut t = Table::new("stages", LATENCY_COLUMNS);
        for st in &self.stages {
            t.push(vec![
                Cell::Text(st.name.clone()),
                Cell::Count(Some(st.batches)),
                Cell::Count(Some(st.p50_ns)),
                Cell::Count(Some(st.p99_ns)),
                Cell::Count(Some(st.max_ns)),
                // A stage's (and the exact table's) time a packet; `-` for
                // the source's and the queue's overlapping spans.
                Cell::Text(
                    st.ns_per_record()
                        .map_or("-".into(), |ns| format!("{ns:.1}")),
                ),
            ]);
        }
        t
    }

    /// A readable report for a terminal.
    pub fn render_text(&self) -> String {
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        let mut o = self.replay.render_text();
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "pipeline: {} keyed packets, {} shards on {} threads, batches of {}; memory {:.1} MiB stated (filters {:.1}, selective sets at most {:.1}, batches {:.1}{})",
            self.pipeline.packets,
            self.pipeline.shards,
            self.throughput.threads,
            self.pipeline.batch,
            mib(self.throughput.memory.total),
            mib(self.throughput.memory.heavy + self.throughput.memory.new_flows),
            mib(self.throughput.memory.selective),
            mib(self.throughput.memory.batches),
            match self.throughput.memory.capture_rings {
                0 => String::new(),
                n => format!(", capture rings {:.1}", mib(n)),
            }
        );
        if self.pipeline.epoch_windows {
            let _ = writeln!(
                o,
                "  time windows counted from the Unix epoch (--epoch-windows), not from the first packet"
            );
        }
        for s in &self.sections {
            let _ = writeln!(o);
            s.section.render_text(&mut o);
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "latency per batch (ns)");
        self.latency_table().render_text(&mut o);
        let t = &self.throughput;
        let _ = writeln!(
            o,
            "throughput: {:.2} Mpps wall ({:.3} s), {:.2} Mpps per CPU-second ({:.3} s CPU)",
            t.packets_per_sec / 1e6,
            t.wall_seconds,
            t.packets_per_cpu_sec / 1e6,
            t.cpu_seconds
        );
        if let Some(line) = cpu_split(t, self.replay.trace.packets) {
            let _ = writeln!(o, "{line}");
        }
        if let Some(s) = t.startup_seconds {
            let _ = writeln!(o, "start-up: {:.1} ms before the first packet", s * 1e3);
        }
        let asked = huge_pages_asked(t);
        match t.anon_huge_page_bytes {
            Some(b) => {
                let _ = writeln!(
                    o,
                    "huge pages: {asked}; {:.1} MiB of anonymous memory in huge pages at the end of the run",
                    b as f64 / f64::from(1u32 << 20)
                );
            }
            None => {
                let _ = writeln!(o, "huge pages: {asked}");
            }
        }
        if let Some(b) = t.peak_resident_bytes {
            let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
            let _ = writeln!(
                o,
                "memory: {:.1} MiB resident at the peak; the configuration states {:.1} MiB for the {}",
                mib(b),
                mib(t.memory.total),
                if t.memory.capture_rings > 0 {
                    "filters, batches, flow sets and capture rings"
                } else {
                    "filters, batches and flow sets"
                }
            );
        }
        o
    }
}

/// The `cpu:` line: the source thread's and the workers' CPU, in all and a
/// packet, each with its kernel part where it was read; `None` when either
/// clock could not be read.
fn cpu_split(t: &super::Throughput, packets: u64) -> Option<String> {
    let (source, workers) = (t.source_cpu_seconds?, t.worker_cpu_seconds?);
    let per = |s: f64| {
        if packets > 0 {
            format!(", {:.1} ns a packet", s * 1e9 / packets as f64)
        } else {
            String::new()
        }
    };
    let kernel = |s: Option<f64>| match s {
        Some(s) => format!(" ({s:.3} s of it in the kernel)"),
        None => String::new(),
    };
    Some(format!(
        "cpu: source thread {:.3} s{}{}, workers {:.3} s{}{}; the rest of the process {:.3} s",
        source,
        kernel(t.source_system_cpu_seconds),
        per(source),
        workers,
        kernel(t.worker_system_cpu_seconds),
        per(workers),
        (t.cpu_seconds - source - workers).max(0.0)
    ))
}

/// The `huge pages:` line's first part: on or off, and why.
fn huge_pages_asked(t: &super::Throughput) -> String {
    use crate::pages::HugePageChoice;
    let Some(d) = t.huge_page_decision else {
        return if t.huge_pages { "on" } else { "off" }.to_string();
    };
    const MIB: f64 = (1u64 << 20) as f64;
    match (
        d.choice,
        d.host_reclaims_free_pages,
        d.short_run_trace_bytes,
        d.slow_huge_page_ms,
    ) {
        (HugePageChoice::On, ..) => "on (--huge-pages on)".to_string(),
        (HugePageChoice::Off, ..) => "off (--huge-pages off)".to_string(),
        (HugePageChoice::Auto, false, ..) => "on (auto)".to_string(),
        (HugePageChoice::Auto, true, Some(bytes), _) => format!(
            "off (auto: this virtual machine's memory balloon hands free memory back to its host, \
             and the traces total {:.1} MiB, under the {:.0} MiB where huge pages can make up \
             for a slow fresh one; --huge-pages on keeps them)",
            bytes as f64 / MIB,
            crate::pages::SHORT_RUN_BYTES as f64 / MIB
        ),
        (HugePageChoice::Auto, true, None, None) => format!(
            "on (auto: this virtual machine's memory balloon hands free memory back to its host, \
             but all {} fresh huge pages faulted in within {} ms)",
            d.fast_huge_pages,
            crate::pages::SLOW_HUGE_PAGE_MS
        ),
        (HugePageChoice::Auto, true, None, Some(ms)) => format!(
            "off after {} (auto: this virtual machine's memory balloon hands free memory back to its host, \
             and the next fresh huge page took {ms:.1} ms to fault in; --huge-pages on keeps them)",
            d.fast_huge_pages
        ),
    }
}
