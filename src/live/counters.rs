//! What a live capture counts, shared by its readers, its merger, the event
//! sink and the metrics server.
//!
//! Every counter is an atomic that one thread adds to and others read with
//! relaxed ordering: the figures are monotone totals, read for reports and
//! scrapes, and never used to synchronise anything. No lock is taken on the
//! packet path; the one mutex holds the first fatal reader error.

use crate::ingest::live::DeviceCounters;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One interface's counters.
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
    /// Frames read but shed because the pipeline's queue was full.
    pub shed: AtomicU64,
    /// GSO/GRO super-frames (longer than the MTU plus link header).
    pub super_frames: AtomicU64,
    /// VLAN tags put back.
    pub vlan_restored: AtomicU64,
}

/// A live capture's shared counters.
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// Per interface, in `-i` order.
    pub interfaces: Vec<InterfaceCounters>,
    /// Keyed packets handed to the pipeline.
    pub pipeline_packets: AtomicU64,
    /// Per class: heavy-flow events.
    pub heavy_events: Vec<AtomicU64>,
    /// Per class: new-flow events.
    pub new_flow_events: Vec<AtomicU64>,
    /// Class names, for labels.
    pub class_names: Vec<String>,
    /// The first fatal reader error (an interface that went down).
    pub fatal: Mutex<Option<String>>,
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

    /// A consistent-enough copy of every total (each read once).
    pub fn snapshot(&self) -> CountersSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let sum = |f: fn(&InterfaceCounters) -> &AtomicU64| {
            self.interfaces.iter().map(|i| get(f(i))).sum::<u64>()
        };
        CountersSnapshot {
            received: sum(|i| &i.received),
            bytes: sum(|i| &i.bytes),
            kernel_drops: sum(|i| &i.kernel_drops),
            kernel_freezes: sum(|i| &i.kernel_freezes),
            shed: sum(|i| &i.shed),
            super_frames: sum(|i| &i.super_frames),
            pipeline_packets: get(&self.pipeline_packets),
            heavy_events: self.heavy_events.iter().map(get).sum(),
            new_flow_events: self.new_flow_events.iter().map(get).sum(),
            socket_packets: sum(|i| &i.socket_packets),
        }
    }
}

/// Totals at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CountersSnapshot {
    /// Frames read from the rings.
    pub received: u64,
    /// Their wire bytes.
    pub bytes: u64,
    /// Frames the kernel dropped (ring full).
    pub kernel_drops: u64,
    /// Ring freezes.
    pub kernel_freezes: u64,
    /// Frames shed because the pipeline's queue was full.
    pub shed: u64,
    /// GSO/GRO super-frames.
    pub super_frames: u64,
    /// Keyed packets handed to the pipeline.
    pub pipeline_packets: u64,
    /// Heavy-flow events.
    pub heavy_events: u64,
    /// New-flow events.
    pub new_flow_events: u64,
    /// Frames the sockets accepted or dropped.
    pub socket_packets: u64,
}

impl CountersSnapshot {
    /// The growth from `earlier`.
    pub fn since(&self, e: &CountersSnapshot) -> CountersSnapshot {
        CountersSnapshot {
            received: self.received - e.received.min(self.received),
            bytes: self.bytes - e.bytes.min(self.bytes),
            kernel_drops: self.kernel_drops - e.kernel_drops.min(self.kernel_drops),
            kernel_freezes: self.kernel_freezes - e.kernel_freezes.min(self.kernel_freezes),
            shed: self.shed - e.shed.min(self.shed),
            super_frames: self.super_frames - e.super_frames.min(self.super_frames),
            pipeline_packets: self.pipeline_packets - e.pipeline_packets.min(self.pipeline_packets),
            heavy_events: self.heavy_events - e.heavy_events.min(self.heavy_events),
            new_flow_events: self.new_flow_events - e.new_flow_events.min(self.new_flow_events),
            socket_packets: self.socket_packets - e.socket_packets.min(self.socket_packets),
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
    /// Why the capture stopped: `count`, `duration`, `signal`, or an
    /// interface error.
    pub stopped_by: String,
    /// The fatal error, when an interface failed.
    pub error: Option<String>,
    /// The policy for full pipeline queues.
    pub shed_policy: &'static str,
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
    /// Frames read from its rings.
    pub received: u64,
    /// Their wire bytes.
    pub bytes: u64,
    /// Kernel drops (ring full).
    pub kernel_drops: u64,
    /// Ring freezes.
    pub kernel_freezes: u64,
    /// Frames shed (pipeline queue full).
    pub shed: u64,
    /// GSO/GRO super-frames.
    pub super_frames: u64,
    /// VLAN tags put back.
    pub vlan_restored: u64,
    /// The device's counters' growth over the capture.
    pub device: DeviceCounters,
}
