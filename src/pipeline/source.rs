//! Sources: what feeds keyed packets into the engine.
//!
//! A source reads its input (trace files here; a live interface is another
//! source), dissects and hashes every packet, and pushes the keyed packets
//! into the engine's dispatcher through [`PacketSink`]. It reports per-file
//! (or per-interface) facts to the same [`ReplayObserver`] and returns the
//! [`ReplaySummary`] of what it read. The dispatcher, the shards and the
//! report are the same for every source.

use super::config::ValidatedConfig;
use crate::class::ClassId;
use crate::dissect::FlowKey;
use crate::ingest::Timestamp;
use crate::replay::{NoObserver, PacketSink, ReplayConfig, ReplayObserver, replay_into};
use crate::report::ReplaySummary;
use std::path::PathBuf;

/// Produces keyed packets for the engine.
pub trait Source {
    /// Reads the input, handing every keyed packet to `sink` in order, and
    /// stops early when [`PacketSink::stopped`] says so.
    fn run<P: PacketSink>(self, observer: &mut dyn ReplayObserver, sink: &mut P) -> ReplaySummary;

    /// Whether the source leaves the exact flow table to the sink: it then
    /// keeps none, hands every packet's captured length on, and returns a
    /// summary without the truth fields, which the engine fills from its
    /// shard workers' tables. False unless a source says otherwise.
    fn truth_in_sink(&self) -> bool {
        false
    }

    /// Whether the source must be back at its input as soon as one batch
    /// buffer is free again: a live capture, whose ring fills while the
    /// source sleeps, and which sheds frames itself only while it is
    /// awake. The engine then waits on the buffers' channel for each one.
    /// A file waits for nothing, so the engine lets a file's source sleep
    /// until a quarter of the queues' buffers are back
    /// ([`super::refill`]). False unless a source says otherwise.
    fn needs_prompt_buffers(&self) -> bool {
        false
    }

    /// Whether the engine hands events to the sink in trace order: by the
    /// index of the packet that caused them, the same order whatever the
    /// threads, shards or batches (see `pipeline::trace_order`). Holding
    /// an event until every shard has got past its packet costs a file
    /// nothing that matters, but a live link's shards fill their batches at
    /// the traffic's pace, and a quiet shard would hold every other's
    /// events back. True unless a source says otherwise.
    fn events_in_trace_order(&self) -> bool {
        true
    }
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
    ///
    /// Where the table's thread would have no core, the table is kept by
    /// the shard workers instead ([`ReplayConfig::truth_in_sink`]): each
    /// records a batch's packets into the table of the batch's shard, after
    /// the stages have run on it, so the source thread, the pipeline's
    /// critical path, only copies each packet's key out once.
    /// With the workers' queues deep enough to absorb their imbalance
    /// ([`super::defaults::QUEUE_BATCHES`]) the default job took 3-12 %
    /// less wall time and 6-9 % less CPU time on two cores; with shallow
    /// queues it gained little, since the work moves to workers that share
    /// the same two cores (BENCHMARKS.md, eleventh round). Nothing reported
    /// changes: a flow's packets all go to one shard, and the summary's
    /// truth fields are sums and a top list in a total order
    /// ([`crate::truth::top_of`]).
    pub fn new(paths: Vec<PathBuf>, cfg: &ValidatedConfig) -> FileSource {
        let mut replay = cfg.config().replay.clone();
        let own_core = truth_thread_has_a_core(cfg);
        replay.truth_thread &= own_core;
        replay.truth_in_sink &= !own_core;
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

    fn truth_in_sink(&self) -> bool {
        self.replay.truth && self.replay.truth_in_sink
    }
}

/// One keyed packet, as a source hands it to the engine's dispatcher.
#[derive(Clone, Copy, Debug)]
pub struct KeyedPacket {
    /// The flow key.
    pub key: FlowKey,
    /// [`crate::hash::flow_hash`] of the key (as the replay keyed it).
    pub hash: u64,
    /// The flow's class.
    pub class: ClassId,
    /// The capture time.
    pub ts: Timestamp,
    /// The length on the wire.
    pub wire_len: u32,
    /// The length captured.
    pub captured_len: u32,
}

/// Trace files read, dissected, hashed and classified once, kept in memory,
/// and handed to the engine from there as often as wanted.
///
/// Why this exists: on a machine with few cores a file run's source thread
/// (reading, dissecting, hashing) takes a core the workers would otherwise
/// use, so a file run cannot show how the sharded stages scale with worker
/// threads. Replayed from memory the source only hands packets on, and
/// what is left is the engine and the stages (`flowsieve bench`'s
/// "preloaded" rows, `benches/pipeline.rs`). Every run reports the summary
/// of the one real read.
///
/// ```no_run
/// use flowsieve::class::Classifier;
/// use flowsieve::pipeline::{NoEvents, PipelineConfig, Preloaded, run};
/// use flowsieve::replay::NoObserver;
/// let cfg = PipelineConfig::new(Classifier::ports()).validate().unwrap();
/// let trace = ["traces/default.pcap".into()];
/// let packets = Preloaded::read(&trace, &cfg.config().replay, 1 << 20).unwrap();
/// for _ in 0..3 {
///     run(&packets, &cfg, &mut NoObserver, &mut NoEvents).unwrap();
/// }
/// ```
#[derive(Clone, Debug)]
pub struct Preloaded {
    packets: Vec<KeyedPacket>,
    summary: ReplaySummary,
}

/// Why files could not be preloaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PreloadError {
    /// The files hold more keyed packets than the limit.
    #[error("more than {limit} keyed packets: too many to hold in memory")]
    TooMany {
        /// The limit.
        limit: usize,
    },
    /// A file was damaged or could not be read.
    #[error("{0}")]
    Input(String),
}

/// Collects the keyed packets of a replay, up to a limit.
struct Collect {
    packets: Vec<KeyedPacket>,
    limit: usize,
    over: bool,
}

impl PacketSink for Collect {
    fn packet(
        &mut self,
        key: &FlowKey,
        hash: u64,
        class: ClassId,
        ts: Timestamp,
        wire_len: u32,
        captured_len: u32,
    ) {
        if self.packets.len() >= self.limit {
            self.over = true;
            return;
        }
        self.packets.push(KeyedPacket {
            key: *key,
            hash,
            class,
            ts,
            wire_len,
            captured_len,
        });
    }

    fn stopped(&self) -> bool {
        self.over
    }
}

impl Preloaded {
    /// Reads `paths` with `replay`'s settings and keeps their keyed
    /// packets, refusing (before holding more) past `limit` of them.
    pub fn read(
        paths: &[PathBuf],
        replay: &ReplayConfig,
        limit: usize,
    ) -> Result<Preloaded, PreloadError> {
        let mut collect = Collect {
            packets: Vec::new(),
            limit,
            over: false,
        };
        let summary = replay_into(paths, replay, &mut NoObserver, &mut collect);
        if collect.over {
            return Err(PreloadError::TooMany { limit });
        }
        if summary.could_not_open || !summary.errors.is_empty() {
            return Err(PreloadError::Input(summary.errors.join("; ")));
        }
        Ok(Preloaded {
            packets: collect.packets,
            summary,
        })
    }

    /// The keyed packets held.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// True when no packet is held.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// The records the files held, keyed or not (the read's
    /// `trace.packets`).
    pub fn records(&self) -> u64 {
        self.summary.trace.packets
    }
}

impl Source for &Preloaded {
    fn run<P: PacketSink>(self, _: &mut dyn ReplayObserver, sink: &mut P) -> ReplaySummary {
        for p in &self.packets {
            if sink.stopped() {
                break;
            }
            sink.packet(&p.key, p.hash, p.class, p.ts, p.wire_len, p.captured_len);
        }
        self.summary.clone()
    }
}
