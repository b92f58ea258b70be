//! A stage that panics in one shard, or in its coordinator on the source
//! thread, after a number of packets: a stage's bug, as the engine must
//! survive it (the run ends in an error or a panic, not a hang).
//! `tests/stage.rs` registers it.

use flowsieve::pipeline::stage::{Broadcast, Coordinator};
use flowsieve::pipeline::{
    Event, PacketRecord, RecordBatch, ReportContext, ShardContext, ShardStage, Stage, Tally,
};
use flowsieve::report::{Section, Table};
use serde::Serialize;

/// Where the stage's bug is.
pub enum PanicIn {
    /// In shard `shard`, once it has seen `after` packets.
    Shard { shard: usize, after: u64 },
    /// In the coordinator, on the source thread, at the `after`-th packet.
    Coordinator { after: u64 },
    /// While shard `shard`'s state is built (on a worker thread).
    Build { shard: usize },
}

/// The coordinator that panics.
struct PanicInCoordinator {
    left: u64,
}

impl Coordinator<NoTally> for PanicInCoordinator {
    fn observe(&mut self, _r: &PacketRecord) -> Option<Broadcast> {
        if self.left == 0 {
            panic!("the coordinator's bug");
        }
        self.left -= 1;
        None
    }

    fn finish(self: Box<Self>) -> NoTally {
        NoTally
    }
}

/// One shard of it.
pub struct PanicInShard {
    armed: bool,
    left: u64,
}

/// Nothing to tally.
pub struct NoTally;

impl Tally for NoTally {
    fn merge(&mut self, _other: NoTally) {}
}

impl ShardStage for PanicInShard {
    type Tally = NoTally;

    fn process(&mut self, batch: RecordBatch<'_>, _events: &mut Vec<Event>) {
        let n = batch.records().len() as u64;
        if self.armed && n >= self.left {
            panic!("the stage's bug");
        }
        self.left = self.left.saturating_sub(n);
    }

    fn finish(self) -> NoTally {
        NoTally
    }
}

/// An empty section.
#[derive(Debug, Serialize)]
pub struct Nothing;

impl Section for Nothing {
    fn heading(&self) -> String {
        "nothing".into()
    }

    fn tables(&self) -> Vec<Table> {
        Vec::new()
    }
}

impl Stage for PanicIn {
    const NAME: &'static str = "panic_in";
    type Shard = PanicInShard;
    type Section = Nothing;

    fn shard(&self, ctx: &ShardContext) -> PanicInShard {
        match *self {
            PanicIn::Shard { shard, after } => PanicInShard {
                armed: ctx.shard == shard,
                left: after,
            },
            PanicIn::Coordinator { .. } => PanicInShard {
                armed: false,
                left: 0,
            },
            PanicIn::Build { shard } => {
                if ctx.shard == shard {
                    panic!("the stage's bug while building a shard");
                }
                PanicInShard {
                    armed: false,
                    left: 0,
                }
            }
        }
    }

    fn coordinator(&self, _ctx: &ShardContext) -> Option<Box<dyn Coordinator<NoTally>>> {
        match *self {
            PanicIn::Coordinator { after } => Some(Box::new(PanicInCoordinator { left: after })),
            PanicIn::Shard { .. } | PanicIn::Build { .. } => None,
        }
    }

    fn report(&self, _t: NoTally, _ctx: &ReportContext) -> Nothing {
        Nothing
    }
}
