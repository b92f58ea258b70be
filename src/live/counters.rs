//! What a live capture counts, shared by its readers, its merger, the event
//! sink and the metrics server.
//!
//! Every counter is an atomic that one thread adds to and others read with
//! relaxed ordering: the figures are monotone totals, read for reports and
//! scrapes, and never used to synchronise anything. No lock is taken on the
//! packet path; the one mutex holds the first fatal reader error.

use crate::ingest::live::DeviceCounters;
use serde::Serialize;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// One interface's counters (the atomics behind an `InterfaceSnapshot`).
#[derive(Debug, Default)]
pub struct InterfaceCounters {
    /// Its name.
    pub name: String,
    /// Frames read from its rings (before any shedding).
    pub received: AtomicU64,
    /// Wire bytes of those frames.
    pub bytes: AtomicU64,
    /// Frames the kernel dropped because a ring was full.
    pub kernel_drops: AtomicU64,
    /// Times a ring froze.
    pub kernel_freezes: AtomicU64,
    /// Frames the socket accepted or dropped, per `PACKET_STATISTICS`.
    pub socket_packets: AtomicU64,
    /// Frames read but shed: the pipeline's queue was full, or (with
    /// `--max-delay`) they were too old ([`InterfaceCounters::shed_late`]).
    pub shed: AtomicU64,
    /// Of `shed`: frames older than `--max-delay` when the merger reached
    /// them.
    pub shed_late: AtomicU64,
    /// GSO/GRO super-frames (longer than the MTU plus link header).
    pub super_frames: AtomicU64,
    /// VLAN tags put back.
    pub vlan_restored: AtomicU64,
}

impl InterfaceCounters {
    /// Every counter, each read once.
    pub fn snapshot(&self) -> InterfaceSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        InterfaceSnapshot {
            received: get(&self.received),
            bytes: get(&self.bytes),
            kernel_drops: get(&self.kernel_drops),
            kernel_freezes: get(&self.kernel_freezes),
            socket_packets: get(&self.socket_packets),
            shed: get(&self.shed),
            shed_late: get(&self.shed_late),
            super_frames: get(&self.super_frames),
            vlan_restored: get(&self.vlan_restored),
        }
    }
}

crate::ingest::live::counter_set! {
    /// One interface's counters at one moment (or their growth), summed
    /// over its sockets.
    pub struct InterfaceSnapshot {
        /// Frames read from the rings (before any shedding).
        pub received,
        /// Their wire bytes.
        pub bytes,
        /// Frames the kernel dropped (ring full).
        pub kernel_drops,
        /// Ring freezes.
        pub kernel_freezes,
        /// Frames the sockets accepted or dropped (`PACKET_STATISTICS`).
        pub socket_packets,
        /// Frames shed: the pipeline's queue was full, or (with
        /// `--max-delay`) they were too old.
        pub shed,
        /// Of `shed`: frames older than `--max-delay` when the merger
        /// reached them.
        pub shed_late,
        /// GSO/GRO super-frames.
        pub super_frames,
        /// VLAN tags put back.
        pub vlan_restored,
    }
}

/// A live capture's shared counters.
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// Per interface, in `-i` order.
    pub interfaces: Vec<InterfaceCounters>,
    /// Keyed packets handed to the pipeline; the merger adds them every
    /// 4,096 frames and after each round of releases, not one by one.
    pub pipeline_packets: AtomicU64,
    /// Per class: heavy-flow events.
    pub heavy_events: Vec<AtomicU64>,
    /// Per class: new-flow events.
    pub new_flow_events: Vec<AtomicU64>,
    /// Heavy-flow windows ended (empty ones too).
    pub windows: AtomicU64,
    /// Class names, for labels.
    pub class_names: Vec<String>,
    /// The first fatal reader error (an interface that went down).
    pub fatal: Mutex<Option<String>>,
    /// The kernel timestamp (ns since the epoch) of the first keyed packet
    /// handed to the pipeline, the origin of the events' `time_ns`;
    /// `i64::MIN` until then.
    pub first_keyed_ns: std::sync::atomic::AtomicI64,
    /// What the stages publish while they run (filter fill, recycles,
    /// priors, the selective stage's errors and cost, batch latency).
    pub stages: std::sync::Arc<crate::pipeline::Gauges>,
    /// A live probe's export figures, once its exporter runs.
    pub export: std::sync::OnceLock<std::sync::Arc<crate::network::ExportStats>>,
}

impl LiveCounters {
    /// Counters for these interfaces and classes.
    pub fn new(interfaces: &[String], class_names: Vec<String>) -> LiveCounters {
        LiveCounters {
            interfaces: interfaces
                .iter()
                .map(|n| InterfaceCounters {
                    name: n.clone(),
                    ..InterfaceCounters::default()
                })
                .collect(),
            heavy_events: class_names.iter().map(|_| AtomicU64::new(0)).collect(),
            new_flow_events: class_names.iter().map(|_| AtomicU64::new(0)).collect(),
            class_names,
            first_keyed_ns: std::sync::atomic::AtomicI64::new(i64::MIN),
            ..LiveCounters::default()
        }
    }

    /// Records the first fatal error.
    pub fn set_fatal(&self, message: String) {
        if let Ok(mut f) = self.fatal.lock() {
            f.get_or_insert(message);
        }
    }

    /// The fatal error, if any.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().ok().and_then(|f| f.clone())
    }

    /// Every total, each read once; the interfaces' counters summed.
    pub fn snapshot(&self) -> CountersSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut frames = InterfaceSnapshot::default();
        for i in &self.interfaces {
            frames += i.snapshot();
        }
        CountersSnapshot {
            frames,
            pipeline_packets: get(&self.pipeline_packets),
            heavy_events: self.heavy_events.iter().map(get).sum(),
            new_flow_events: self.new_flow_events.iter().map(get).sum(),
            windows: get(&self.windows),
        }
    }
}

/// Totals at one moment (or their growth over an interval).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CountersSnapshot {
    /// Every interface's counters, summed (flattened into this object).
    #[serde(flatten)]
    pub frames: InterfaceSnapshot,
    /// Keyed packets handed to the pipeline.
    pub pipeline_packets: u64,
    /// Heavy-flow events.
    pub heavy_events: u64,
    /// New-flow events.
    pub new_flow_events: u64,
    /// Heavy-flow windows ended, empty ones included.
    pub windows: u64,
}

impl CountersSnapshot {
    /// The growth from `earlier`.
    pub fn since(&self, e: &CountersSnapshot) -> CountersSnapshot {
        CountersSnapshot {
            frames: self.frames.since(&e.frames),
            pipeline_packets: self.pipeline_packets.saturating_sub(e.pipeline_packets),
            heavy_events: self.heavy_events.saturating_sub(e.heavy_events),
            new_flow_events: self.new_flow_events.saturating_sub(e.new_flow_events),
            windows: self.windows.saturating_sub(e.windows),
        }
    }
}

/// One interval of a live capture (`--report-every`), as printed and as a
/// JSON line (`"type": "interval"`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IntervalReport {
    /// Interval index (0-based).
    pub interval: u64,
    /// Wall-clock seconds since the capture started, at the interval's end.
    pub elapsed_s: f64,
    /// Wall-clock seconds the interval lasted.
    pub seconds: f64,
    /// The interval's growth of every counter.
    pub delta: CountersSnapshot,
    /// Frames read per second in the interval.
    pub packets_per_sec: f64,
    /// Frames filtered out in the interval: the devices' frame counters'
    /// growth less the sockets' (an estimate: other sockets and counter
    /// timing blur it).
    pub filtered_out: u64,
    /// The devices' own counters' growth in the interval, summed.
    pub device: DeviceCounters,
    /// The selective stage's errors and cost in the interval, per main
    /// variant (empty when the stage is off).
    pub selective: Vec<crate::pipeline::gauges::VariantCost>,
}

/// The `capture` section of a live run's final report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaptureSummary {
    /// Interfaces captured, in `-i` order.
    pub interfaces: Vec<InterfaceSummary>,
    /// Sockets per interface (`--fanout`).
    pub fanout: usize,
    /// The capture filter, if any.
    pub filter: Option<String>,
    /// Snap length.
    pub snaplen: u32,
    /// Ring bytes per socket.
    pub ring_bytes: u64,
    /// Block bytes.
    pub block_bytes: u32,
    /// Block retire timeout, ms.
    pub block_timeout_ms: u32,
    /// Totals over every interface.
    pub totals: CountersSnapshot,
    /// Frames filtered out (device growth less socket counts; an estimate).
    pub filtered_out: u64,
    /// Wall-clock seconds captured.
    pub seconds: f64,
    /// Why the capture stopped: `count`, `duration`, `signal`, `file
    /// limit` (`-G` with `-W` and no `-C` wrote its files), or `error` (an
    /// interface failed, or an output could not be written).
    pub stopped_by: String,
    /// The fatal error, when an interface or an output failed.
    pub error: Option<String>,
    /// The policy for full pipeline queues.
    pub shed_policy: String,
    /// `--max-delay`, milliseconds: frames older than this when the merger
    /// reaches them are shed (null: none are).
    pub max_delay_ms: Option<f64>,
}

/// One interface in the `capture` section.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InterfaceSummary {
    /// Name.
    pub name: String,
    /// Link type (pcap name).
    pub link_type: &'static str,
    /// MTU.
    pub mtu: u32,
    /// Its counters over the capture (flattened into this object).
    #[serde(flatten)]
    pub counters: InterfaceSnapshot,
    /// The device's counters' growth over the capture.
    pub device: DeviceCounters,
}

/// How long after its packet arrived a heavy-flow event reached the sink:
/// from the kernel's timestamp of the packet that took the flow to theta
/// to the moment the event sink got the event (ring, merger, dispatch,
/// queue, stage, event channel).
#[derive(Debug)]
pub struct EventLatency {
    micros: hdrhistogram::Histogram<u64>,
}

/// [`EventLatency`]'s figures, in the `capture` section as
/// `heavy_event_latency`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EventLatencySummary {
    /// Events measured.
    pub events: u64,
    /// Median, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// Largest, milliseconds.
    pub max_ms: f64,
}

impl Default for EventLatency {
    fn default() -> EventLatency {
        EventLatency::new()
    }
}

impl EventLatency {
    /// Empty (1 µs to an hour, three significant digits).
    pub fn new() -> EventLatency {
        EventLatency {
            micros: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("constant histogram bounds are valid"),
        }
    }

    /// Records an event whose packet arrived `time_ns` after `first_ns`
    /// (both as the pipeline counts them), seen at `now_ns`; all since
    /// the epoch but `time_ns`. An unset origin records nothing.
    ///
    /// ```
    /// use flowsieve::live::EventLatency;
    /// let mut l = EventLatency::new();
    /// l.record(1_000_000_000, 500_000, 1_002_500_000); // 2 ms after arrival
    /// let s = l.summary().unwrap();
    /// assert_eq!(s.events, 1);
    /// assert!((s.p50_ms - 2.0).abs() < 0.01);
    /// ```
    pub fn record(&mut self, first_ns: i64, time_ns: u64, now_ns: i64) {
        if first_ns == i64::MIN {
            return;
        }
        let arrived = i128::from(first_ns) + i128::from(time_ns);
        let waited = (i128::from(now_ns) - arrived).max(0) / 1000;
        self.micros
            .saturating_record(u64::try_from(waited).unwrap_or(u64::MAX).max(1));
    }

    /// The figures, once an event was recorded.
    pub fn summary(&self) -> Option<EventLatencySummary> {
        let h = &self.micros;
        (!h.is_empty()).then(|| EventLatencySummary {
            events: h.len(),
            p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
            p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
            max_ms: h.max() as f64 / 1000.0,
        })
    }
}
