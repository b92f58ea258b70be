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
    pub fn new(paths: Vec<PathBuf>, cfg: &ValidatedConfig) -> FileSource {
        FileSource {
            paths,
            replay: cfg.config().replay.clone(),
        }
    }

    /// The files, read with explicit replay settings.
    pub fn with_replay(paths: Vec<PathBuf>, replay: ReplayConfig) -> FileSource {
        FileSource { paths, replay }
    }
}

impl Source for FileSource {
    fn run<P: PacketSink>(self, observer: &mut dyn ReplayObserver, sink: &mut P) -> ReplaySummary {
        replay_into(&self.paths, &self.replay, observer, sink)
    }
}
