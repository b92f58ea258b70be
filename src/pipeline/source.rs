//! Sources: what feeds keyed packets into the engine.
//!
//! A source reads its input (trace files here; a live interface is another
//! source), dissects and hashes every packet, and pushes the keyed packets
//! into the engine's dispatcher through [`PacketSink`]. It reports per-file
//! (or per-interface) facts to the same [`ReplayObserver`] and returns the
//! [`ReplaySummary`] of what it read. The dispatcher, the shards and the
//! report are the same for every source.

use super::config::ValidatedConfig;
use crate::replay::{PacketSink, ReplayConfig, ReplayObserver, replay_into};
use crate::report::ReplaySummary;
use std::path::PathBuf;

/// Produces keyed packets for the engine.
pub trait Source {
    /// Reads the input, handing every keyed packet to `sink` in order, and
    /// stops early when [`PacketSink::stopped`] says so.
    fn run<P: PacketSink>(self, observer: &mut dyn ReplayObserver, sink: &mut P) -> ReplaySummary;
}

/// Trace files (pcap or pcapng, plain, gzip or zstd), read in order.
#[derive(Clone, Debug)]
pub struct FileSource {
    paths: Vec<PathBuf>,
    replay: ReplayConfig,
}

impl FileSource {
    /// The files, read with a validated configuration's replay settings
    /// (classes, key direction, ground truth, packet limit).
    ///
    /// The exact table gets a thread of its own
    /// ([`ReplayConfig::truth_thread`]) only when that thread would have a
    /// core to itself beside the source thread and the busy workers. On
    /// two cores with every stage running, the table's thread only
    /// competed with the others: the default job measured the same wall
    /// time or a little worse; with no stages it cut the wall time of a
    /// truth-on replay by a third (BENCHMARKS.md, eighth round).
    pub fn new(paths: Vec<PathBuf>, cfg: &ValidatedConfig) -> FileSource {
        let mut replay = cfg.config().replay.clone();
        replay.truth_thread &= truth_thread_has_a_core(cfg);
        FileSource { paths, replay }
    }

    /// The files, read with explicit replay settings.
    pub fn with_replay(paths: Vec<PathBuf>, replay: ReplayConfig) -> FileSource {
        FileSource { paths, replay }
    }
}

/// Whether the machine has a core for the exact table's thread beside the
/// source thread and every worker that runs a stage.
fn truth_thread_has_a_core(cfg: &ValidatedConfig) -> bool {
    let c = cfg.config();
    let busy_workers = if cfg.stage_names().is_empty() {
        0
    } else {
        c.threads.min(c.shards).max(1)
    };
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= busy_workers + 2)
}

impl Source for FileSource {
    fn run<P: PacketSink>(self, observer: &mut dyn ReplayObserver, sink: &mut P) -> ReplaySummary {
        replay_into(&self.paths, &self.replay, observer, sink)
    }
}
