//! The staged, sharded pipeline: source → dissect + hash → dispatch by flow
//! hash to shards → per-shard stages → report.
//!
//! - A [`Source`] (trace files: [`FileSource`]) reads, dissects and hashes
//!   on the calling thread. Only what the stages need crosses a thread: a
//!   compact [`PacketRecord`] (key, hash, class, time, sequence, length).
//! - The dispatcher batches records per shard ([`PipelineConfig::batch`]
//!   records) and queues each batch for its shard; emptied buffers travel
//!   back and are reused, and a bounded number of them holds the source
//!   back when the workers fall behind instead of growing the queues.
//! - The [`schedule`]r gives a shard with work to one worker at a time,
//!   its home worker first and an idle one when that is busy. The worker
//!   runs every registered [`Stage`] on each of the shard's batches, stage
//!   by stage, in the order they were queued. A shard's state is held by
//!   one thread at a time, so its filters need no lock and no atomic
//!   read-modify-write. At the end each shard is finished where its last
//!   turn runs, and only its [`Tally`]s come back.
//! - The tallies are merged in shard order and each stage writes its own
//!   section of the [`crate::report::PipelineReport`]. Nothing in the report depends on
//!   which thread ran which shard, so for a given configuration (and shard
//!   count) it is identical for any number of threads, apart from the
//!   timing figures.
//!
//! Configuration lives in [`PipelineConfig`] (plain fields, one set of
//! [`defaults`]); [`PipelineConfig::validate`] turns it into a
//! [`ValidatedConfig`], the only thing [`run`] accepts. Events go to a
//! [`PipelineSink`]; the engine never formats output.
//!
//! The built-in stages are [`heavy`] (count thresholding, 003),
//! [`new_flows`] (recycling filters, 004) and [`selective`] (the Bloom
//! paradox, 000); [`stage`] says how to write another.

mod capped;
mod config;
mod deferred;
mod engine;
mod event;
pub mod export;
mod flow_set;
pub mod gauges;
pub mod heavy;
mod keyed;
pub(crate) mod latency;
pub mod lookahead;
pub mod new_flows;
mod process_start;
mod rate;
mod record;
pub mod refill;
pub mod schedule;
pub mod selective;
mod source;
pub mod stage;
mod trace_order;
mod window;

pub use capped::{Admission, CappedFlowSet, admitted_at};
pub use config::{
    ByteSize, ByteSizeError, ConfigError, MAX_BATCH, MAX_QUEUE_BATCHES, MAX_SHARDS, MAX_THREADS,
    MemoryEstimate, PipelineConfig, StageList, StageListError, StageName, ValidatedConfig,
    available_memory, default_threads, defaults,
};
pub use deferred::Deferred;
pub use engine::{
    PipelineError, cpu_seconds, run, run_with_gauges, thread_cpu_seconds, thread_system_cpu_seconds,
};
pub use event::{
    Event, EventKind, HeavyEvent, JsonLinesSink, NewFlowEvent, NoEvents, PipelineSink,
    WindowEndEvent,
};
pub use export::{Candidate, ShardWindow, WindowDigestSink, WindowExport};
pub use flow_set::FlowSet;
pub use gauges::Gauges;
pub use heavy::{COMPOUND_MAX_THETA, HeavyConfig, HeavyStage, HeavyTally};
pub use keyed::FlowMap;
pub use latency::Latency;
pub use new_flows::{NewFlowConfig, NewFlowStage, NewFlowTally, RecycleSpec, RecycleSpecError};
pub use process_start::{mark_process_start, process_started};
pub use record::{PacketRecord, RecordBatch};
pub use selective::{
    DirectoryKind, QueryUnit, SelectiveConfig, SelectiveParseError, SelectiveStage, SelectiveTally,
    SweepParam, SweepSpec, Sweeps, Variant,
};
pub use source::{FileSource, KeyedPacket, PreloadError, Preloaded, Source};
pub use stage::{ReportContext, ShardContext, ShardStage, Stage, Tally};
pub use window::{PeriodCursor, WindowParseError, WindowSpec, parse_duration_ns};
