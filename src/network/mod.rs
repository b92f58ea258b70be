//! The network-wide mode: probes export mergeable digests of their
//! windows through NATS JetStream, collectors merge them exactly once, and
//! `flowsieve results` reads the merged network-wide report.
//!
//! The parts, each one job:
//!
//! - [`config`]: the shared configuration (filter shapes, hash key, shard
//!   count, θ, window, declared probes) every participant compares with
//!   its own before it starts.
//! - [`digest`]: the binary digest of one probe's shard-window (counters
//!   coded as `FSCC`, presence bits as `FSCB`, candidate heavy flows,
//!   class tallies), versioned and checksummed.
//! - [`merge`]: adding counters, OR-ing bits and querying candidates, per
//!   shard-window, at most once per probe. Pure: no I/O.
//! - [`book`]: the collector's bookkeeping (which windows are complete,
//!   which are late, what was merged), also pure, so that exactly-once
//!   is tested without a server.
//! - [`results`]: the network-wide report assembled from merged
//!   shard-windows, also pure.
//! - `transport`, `probe`, `collector`: the NATS side, on a small tokio
//!   runtime of their own; the packet path never sees it. They are the
//!   only users of the NATS client (async-nats, and under it rustls, ring
//!   and tokio), and compile only with the `network` feature, which is on
//!   by default. A program that embeds the library for its filters and
//!   pipeline can leave the feature off, and with it about 70 crates.
//! - [`export_stats`]: the exporter's figures, which live capture reports
//!   with or without the feature.
//!
//! Subjects and buckets (the message key is the shard, so that another
//! log such as Kafka could carry the same messages partitioned the same
//! way):
//!
//! | what | where |
//! |---|---|
//! | digests | stream `FLOWSIEVE`, subject `flowsieve.v1.digest.<shard>.<window>.<probe>`, message id `<probe>.<shard>.<window>` |
//! | shared configuration | key-value bucket `flowsieve-config`, key `v1` |
//! | probes and their watermarks | key-value bucket `flowsieve-probes`, key `<probe>` |
//! | merged shard-windows | key-value bucket `flowsieve-results`, key `w<window>.s<shard>`; also published on `flowsieve.v1.result.<window>.<shard>` |
//!
//! docs/scale-out.md has the protocol, the candidate proof and the
//! capacity figures.

pub mod book;
#[cfg(feature = "network")]
pub mod collector;
pub mod collector_beat;
pub mod config;
pub mod digest;
pub mod export_stats;
pub mod merge;
mod merged_cells;
mod merged_presence;
#[cfg(feature = "network")]
pub mod probe;
pub mod results;
#[cfg(feature = "network")]
pub mod transport;
pub mod uncollected_shard;
pub mod unmerged_shard;

pub use book::{Book, ProbeState, Verdict};
pub use config::{CONFIG_KEY, ConfigDifference, MAX_PROBES, NetworkConfig};
pub use digest::{Digest, DigestError, MAX_DIGEST_CELLS, MAX_PROBE_ID};
pub use export_stats::{ExportSnapshot, ExportStats};
pub use merge::{
    HeavyFlow, MergeError, ShardWindowMerge, ShardWindowResult, cardinality_estimate,
    cells_checksum,
};
