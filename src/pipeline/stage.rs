//! The stage interface: what a stage is to the engine.
//!
//! A stage is one file and one registration. The file defines three types:
//!
//! - a [`Stage`]: the stage's validated configuration for a run. The engine
//!   asks it for one [`ShardStage`] per shard and, at the end, turns the
//!   shards' merged tallies into the stage's report section;
//! - a [`ShardStage`]: the stage's state in one shard. It processes batches
//!   of records in trace order, emits typed [`Event`]s into a buffer,
//!   closes windows, and finishes into a [`Tally`];
//! - a [`Tally`]: plain counts that merge. Tallies are merged in shard
//!   order, so floating-point sums, and with them the whole report, are the
//!   same for any number of threads.
//!
//! The registration is one call: [`super::ValidatedConfig::with_stage`]
//! for a stage of a library user's, or one line in
//! [`super::PipelineConfig::validate`] for a built-in one. The engine
//! never names a stage: it times each by its [`Stage::NAME`], hands it the
//! shard's records, and places its section in the report under that name.
//!
//! ```
//! use flowsieve::class::Classifier;
//! use flowsieve::pipeline::{
//!     run, Event, FileSource, NoEvents, PipelineConfig, RecordBatch, ReportContext,
//!     ShardContext, ShardStage, Stage, StageList, Tally,
//! };
//! use flowsieve::replay::NoObserver;
//! use flowsieve::report::{Section, Table};
//!
//! /// Counts packets per shard: the smallest useful stage.
//! struct Count;
//! struct CountShard(Packets);
//! struct Packets(u64);
//! #[derive(Debug, serde::Serialize)]
//! struct CountSection { packets: u64 }
//! impl Tally for Packets { fn merge(&mut self, other: Packets) { self.0 += other.0 } }
//! impl ShardStage for CountShard {
//!     type Tally = Packets;
//!     fn process(&mut self, batch: RecordBatch<'_>, _: &mut Vec<Event>) {
//!         self.0 .0 += batch.len() as u64;
//!     }
//!     fn finish(self) -> Packets { self.0 }
//! }
//! impl Section for CountSection {
//!     fn heading(&self) -> String { format!("count: {} packets", self.packets) }
//!     fn tables(&self) -> Vec<Table> { Vec::new() }
//! }
//! impl Stage for Count {
//!     const NAME: &'static str = "count";
//!     type Shard = CountShard;
//!     type Section = CountSection;
//!     fn shard(&self, _: &ShardContext) -> CountShard { CountShard(Packets(0)) }
//!     fn report(&self, tally: Packets, _: &ReportContext) -> CountSection {
//!         CountSection { packets: tally.0 }
//!     }
//! }
//!
//! let mut cfg = PipelineConfig::new(Classifier::ports());
//! cfg.stages = StageList::none();
//! let validated = cfg.validate().unwrap().with_stage(Count);
//! let source = FileSource::new(vec!["traces/default.pcap".into()], &validated);
//! let report = run(source, &validated, &mut NoObserver, &mut NoEvents).unwrap();
//! let section = report.section::<CountSection>("count").unwrap();
//! assert_eq!(section.packets, report.pipeline.packets);
//! ```

use super::event::{Event, EventKind};
use super::record::{PacketRecord, RecordBatch};
use crate::class::Classifier;
use crate::report::Section;
use std::any::Any;
use std::sync::Arc;

/// Counts that add up across shards.
pub trait Tally: Send + 'static {
    /// Adds another shard's tally into this one.
    fn merge(&mut self, other: Self);
}

/// What a shard's stage knows about its place in the run.
#[derive(Clone, Debug)]
pub struct ShardContext {
    /// This shard's index, `0..shards`.
    pub shard: usize,
    /// Shards in the run (filter sizes given as totals are split this many
    /// ways).
    pub shards: usize,
    /// Flow classes (class ids index these names).
    pub classes: usize,
    /// Whether ground truth is kept.
    pub truth: bool,
    /// The event kinds the sink wants; a stage collects only these.
    /// Batches carry flow keys when a flow-naming kind is wanted
    /// ([`ShardContext::keyed`]).
    pub events: Vec<EventKind>,
    /// Where to publish live figures, when a live run asks for them
    /// (see [`super::gauges`]); `None` in a replay.
    pub gauges: Option<Arc<super::gauges::Gauges>>,
    /// The window export tap, when the run exports digests (see
    /// [`super::export`]); `None` otherwise.
    pub export: Option<super::WindowExport>,
}

impl ShardContext {
    /// Whether the sink wants events of this kind.
    pub fn wants(&self, kind: EventKind) -> bool {
        self.events.contains(&kind)
    }

    /// Whether this shard's batches carry flow keys
    /// ([`RecordBatch::key`]): when the sink wants heavy-flow or new-flow
    /// events, or the run exports digests (candidates carry keys), the
    /// things that name flows.
    pub fn keyed(&self) -> bool {
        self.wants(EventKind::Heavy) || self.wants(EventKind::NewFlow) || self.export.is_some()
    }
}

/// What a stage knows when it writes its report section.
#[derive(Clone, Debug)]
pub struct ReportContext {
    /// The run's classifier (class names, per-class alpha).
    pub classifier: Classifier,
    /// Whether ground truth was kept.
    pub truth: bool,
    /// Shards in the run.
    pub shards: usize,
}

/// One stage's state in one shard.
pub trait ShardStage: Send + 'static {
    /// What the shard finishes into.
    type Tally: Tally;

    /// Processes one batch of this shard's records, in trace order. Events
    /// go into `events`; the engine hands them to the sink. The batch
    /// carries flow keys when [`ShardContext::keyed`] said so.
    fn process(&mut self, batch: RecordBatch<'_>, events: &mut Vec<Event>);

    /// The stream has reached `(time_ns, seq)` without a record for this
    /// shard: close any window that ends before it. A file replay never
    /// needs it (the next record or [`ShardStage::finish`] closes windows
    /// in the same way); a live source calls it so that an idle link still
    /// closes windows on the clock.
    fn close_window(&mut self, _time_ns: u64, _seq: u64, _events: &mut Vec<Event>) {}

    /// Takes an update that the stage's [`Coordinator`] broadcast. It
    /// arrives after every record that came before it in the stream and
    /// before every record after it.
    fn apply(&mut self, _update: &(dyn Any + Send + Sync)) {}

    /// Called on the worker thread before a batch, until it answers true:
    /// fault the memory pages of the shard's large zeroed arrays in as
    /// writable if they fit in `*budget` bytes (taking what it used from
    /// the budget), so that no page's first touch is a read (see
    /// `filter::BitArray::prefault` for why that matters). Answers true
    /// once everything the stage would populate is populated (or there is
    /// nothing to populate), and is then not called again; an array that
    /// did not fit is tried again before a later batch, with the budget the
    /// worker has earned by then. Must change no state a report can see.
    fn prefault(&mut self, _budget: &mut usize) -> bool {
        true
    }

    /// Closes the last window and returns the tally. Runs on the worker
    /// thread, so the last window's scoring and models run in parallel.
    fn finish(self) -> Self::Tally;
}

/// An update a [`Coordinator`] sends to every shard of its stage.
pub type Broadcast = Arc<dyn Any + Send + Sync>;

/// A stage's part on the source thread. It sees every keyed record in
/// trace order, before the record is dispatched, and may broadcast an
/// update to all of its stage's shards. This is how a stage shares state
/// across shards (the selective stage's class priors, merged over all
/// shards at round boundaries) without a lock, and without its result
/// depending on the number of threads: the update's place in the stream
/// is fixed by the records, not by scheduling.
pub trait Coordinator<T: Tally>: Send {
    /// Sees one record; an update returned here reaches every shard before
    /// this record does.
    fn observe(&mut self, record: &PacketRecord) -> Option<Broadcast>;

    /// The coordinator's own counts, merged before the shards' tallies.
    fn finish(self: Box<Self>) -> T;
}

/// A stage's validated configuration for one run.
pub trait Stage: Send + Sync + 'static {
    /// The stage's name: its latency row and its key in the report.
    const NAME: &'static str;
    /// One shard's state.
    type Shard: ShardStage;
    /// The stage's report section.
    type Section: Section;

    /// Builds the stage's state for one shard. The engine calls it once a
    /// shard, on the worker thread that takes the shard's first batch,
    /// while the source is already reading (and other workers may build
    /// other shards), so it must depend on `self` and `ctx` alone; a panic
    /// here ends the run with the worker error.
    fn shard(&self, ctx: &ShardContext) -> Self::Shard;

    /// The stage's part on the source thread, if it has one.
    fn coordinator(
        &self,
        _ctx: &ShardContext,
    ) -> Option<Box<dyn Coordinator<<Self::Shard as ShardStage>::Tally>>> {
        None
    }

    /// Writes the section from the tally merged over all shards.
    fn report(
        &self,
        tally: <Self::Shard as ShardStage>::Tally,
        ctx: &ReportContext,
    ) -> Self::Section;
}

/// A stage with its types erased, as the engine holds it.
pub(crate) trait DynStage: Send + Sync {
    fn name(&self) -> &'static str;
    fn shard(&self, ctx: &ShardContext) -> Box<dyn DynShard>;
    fn coordinator(&self, ctx: &ShardContext) -> Option<Box<dyn DynCoordinator>>;
    fn report(
        &self,
        tallies: Vec<Box<dyn Any + Send>>,
        ctx: &ReportContext,
    ) -> Option<Arc<dyn Section>>;
}

/// A shard's stage with its types erased.
pub(crate) trait DynShard: Send {
    fn process(&mut self, batch: RecordBatch<'_>, events: &mut Vec<Event>);
    fn close_window(&mut self, time_ns: u64, seq: u64, events: &mut Vec<Event>);
    fn apply(&mut self, update: &(dyn Any + Send + Sync));
    fn prefault(&mut self, budget: &mut usize) -> bool;
    fn finish(self: Box<Self>) -> Box<dyn Any + Send>;
}

/// A coordinator with its tally type erased.
pub(crate) trait DynCoordinator: Send {
    fn observe(&mut self, record: &PacketRecord) -> Option<Broadcast>;
    fn finish(self: Box<Self>) -> Box<dyn Any + Send>;
}

/// Wraps a typed coordinator.
struct ErasedCoordinator<T: Tally>(Box<dyn Coordinator<T>>);

impl<T: Tally> DynCoordinator for ErasedCoordinator<T> {
    #[inline]
    fn observe(&mut self, record: &PacketRecord) -> Option<Broadcast> {
        self.0.observe(record)
    }
    fn finish(self: Box<Self>) -> Box<dyn Any + Send> {
        Box::new(self.0.finish())
    }
}

impl<S: ShardStage> DynShard for S {
    #[inline]
    fn process(&mut self, batch: RecordBatch<'_>, events: &mut Vec<Event>) {
        ShardStage::process(self, batch, events);
    }
    fn close_window(&mut self, time_ns: u64, seq: u64, events: &mut Vec<Event>) {
        ShardStage::close_window(self, time_ns, seq, events);
    }
    fn apply(&mut self, update: &(dyn Any + Send + Sync)) {
        ShardStage::apply(self, update);
    }
    fn prefault(&mut self, budget: &mut usize) -> bool {
        ShardStage::prefault(self, budget)
    }
    fn finish(self: Box<Self>) -> Box<dyn Any + Send> {
        Box::new(ShardStage::finish(*self))
    }
}

impl<S: Stage> DynStage for S {
    fn name(&self) -> &'static str {
        S::NAME
    }
    fn shard(&self, ctx: &ShardContext) -> Box<dyn DynShard> {
        Box::new(Stage::shard(self, ctx))
    }
    fn coordinator(&self, ctx: &ShardContext) -> Option<Box<dyn DynCoordinator>> {
        Stage::coordinator(self, ctx)
            .map(|c| Box::new(ErasedCoordinator(c)) as Box<dyn DynCoordinator>)
    }
    fn report(
        &self,
        tallies: Vec<Box<dyn Any + Send>>,
        ctx: &ReportContext,
    ) -> Option<Arc<dyn Section>> {
        // Every tally came from this stage's own shards, so each downcast
        // succeeds; one that did not would only drop that shard's counts.
        let mut merged: Option<<S::Shard as ShardStage>::Tally> = None;
        for t in tallies {
            if let Ok(t) = t.downcast::<<S::Shard as ShardStage>::Tally>() {
                match merged.as_mut() {
                    Some(m) => m.merge(*t),
                    None => merged = Some(*t),
                }
            }
        }
        merged.map(|t| Arc::new(Stage::report(self, t, ctx)) as Arc<dyn Section>)
    }
}
