//! A stage that panics in one shard after a number of packets: a stage's
//! bug, as the engine must survive it (the run ends in an error, not a
//! hang). `tests/stage.rs` registers it.

use flowsieve::pipeline::{
    Event, RecordBatch, ReportContext, ShardContext, ShardStage, Stage, Tally,
};
use flowsieve::report::{Section, Table};
use serde::Serialize;

/// Panics in shard `shard` once it has seen `after` packets.
pub struct PanicIn {
    pub shard: usize,
    pub after: u64,
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
        PanicInShard {
            armed: ctx.shard == self.shard,
            left: self.after,
        }
    }

    fn report(&self, _t: NoTally, _ctx: &ReportContext) -> Nothing {
        Nothing
    }
}
