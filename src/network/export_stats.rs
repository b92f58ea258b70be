//! The export figures a probe's exporter thread updates as it goes, and
//! their snapshot: read by a live probe's interval line, its JSON lines and
//! its Prometheus metrics. Plain atomics, outside the NATS-side modules, so
//! that live capture builds and reports them whether or not the `network`
//! feature (the NATS client) is compiled in.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Export figures, updated by the exporter thread as it goes.
#[derive(Debug, Default)]
pub struct ExportStats {
    /// Digests acknowledged by the stream.
    pub published: AtomicU64,
    /// Bytes of those digests.
    pub published_bytes: AtomicU64,
    /// Of those, digests sent through the object store (over the message
    /// limit).
    pub objects: AtomicU64,
    /// Digests waiting in the queue.
    pub queued: AtomicU64,
    /// Publish attempts that failed (each is retried with the same id).
    pub failed_attempts: AtomicU64,
    /// Digests dropped (full channel or full buffer).
    pub dropped: AtomicU64,
    /// Windows recorded as lost.
    pub lost_windows: AtomicU64,
    /// Nanoseconds the exporter spent encoding digests.
    pub encode_ns: AtomicU64,
    /// Whether the last server request succeeded.
    pub connected: AtomicBool,
    /// The watermark last written.
    pub watermark: AtomicU64,
}

/// The export figures at one moment (a live probe's interval line,
/// JSON-lines intervals and Prometheus metrics).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ExportSnapshot {
    /// Digests acknowledged by the stream so far.
    pub published: u64,
    /// Their bytes.
    pub published_bytes: u64,
    /// Of those, digests sent through the object store.
    pub objects: u64,
    /// Digests waiting in the queue.
    pub queued: u64,
    /// Publish attempts that failed (each retried with the same id).
    pub failed_attempts: u64,
    /// Digests dropped (full hand-off or full buffer).
    pub dropped: u64,
    /// Windows recorded as lost.
    pub lost_windows: u64,
    /// The watermark last written.
    pub watermark: u64,
    /// Whether the last server request succeeded.
    pub server_up: bool,
    /// CPU seconds spent encoding digests.
    pub encode_seconds: f64,
}

impl ExportStats {
    /// The figures now (each read on its own: a snapshot taken while the
    /// exporter runs may be between two of its updates).
    pub fn snapshot(&self) -> ExportSnapshot {
        let o = Ordering::Relaxed;
        ExportSnapshot {
            published: self.published.load(o),
            published_bytes: self.published_bytes.load(o),
            objects: self.objects.load(o),
            queued: self.queued.load(o),
            failed_attempts: self.failed_attempts.load(o),
            dropped: self.dropped.load(o),
            lost_windows: self.lost_windows.load(o),
            watermark: self.watermark.load(o),
            server_up: self.connected.load(o),
            encode_seconds: self.encode_ns.load(o) as f64 * 1e-9,
        }
    }
}
