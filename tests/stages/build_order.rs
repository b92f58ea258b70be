//! A stage that records when its shards are built: before or after the
//! source has read its first packet. `tests/stage.rs` registers it to check
//! that the engine's workers build the shards while the source reads,
//! instead of the source building them all before its first packet (which
//! made `--shards 4096` wait 70-95 ms before it).
//!
//! Its coordinator, on the source thread, marks the first packet. Building
//! a shard waits for that mark, up to a limit: when the source builds the
//! shards before it reads, the mark never comes, the first build gives up
//! after the limit, and every shard counts as built before the first
//! packet. Nothing here depends on timing otherwise.

use flowsieve::pipeline::stage::{Broadcast, Coordinator};
use flowsieve::pipeline::{
    Event, PacketRecord, RecordBatch, ReportContext, ShardContext, ShardStage, Stage, Tally,
};
use flowsieve::report::{Section, Table};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a build waits for the source's first packet at most.
const WAIT: Duration = Duration::from_secs(5);

/// The stage: the mark shared by its coordinator and its shards.
#[derive(Default)]
pub struct BuildOrder {
    first_packet_read: Arc<AtomicBool>,
    gave_up: Arc<AtomicBool>,
}

/// Marks the first packet the source dispatches.
struct MarkFirstPacket(Arc<AtomicBool>);

impl Coordinator<BuildTally> for MarkFirstPacket {
    fn observe(&mut self, _r: &PacketRecord) -> Option<Broadcast> {
        self.0.store(true, Ordering::Release);
        None
    }

    fn finish(self: Box<Self>) -> BuildTally {
        BuildTally::default()
    }
}

/// One shard: whether it was built after the first packet, and the
/// packets it saw.
pub struct BuildOrderShard {
    tally: BuildTally,
}

/// Shards built after and before the source's first packet, and packets.
#[derive(Default)]
pub struct BuildTally {
    after: u64,
    before: u64,
    packets: u64,
}

impl Tally for BuildTally {
    fn merge(&mut self, other: BuildTally) {
        self.after += other.after;
        self.before += other.before;
        self.packets += other.packets;
    }
}

impl ShardStage for BuildOrderShard {
    type Tally = BuildTally;

    fn process(&mut self, batch: RecordBatch<'_>, _events: &mut Vec<Event>) {
        self.tally.packets += batch.records().len() as u64;
    }

    fn finish(self) -> BuildTally {
        self.tally
    }
}

/// The stage's section: the tally.
#[derive(Debug, Serialize)]
pub struct BuildOrderSection {
    pub built_after_first_packet: u64,
    pub built_before_first_packet: u64,
    pub packets: u64,
}

impl Section for BuildOrderSection {
    fn heading(&self) -> String {
        format!(
            "build order ({} shards built after the first packet, {} before)",
            self.built_after_first_packet, self.built_before_first_packet
        )
    }

    fn tables(&self) -> Vec<Table> {
        Vec::new()
    }
}

impl Stage for BuildOrder {
    const NAME: &'static str = "build_order";
    type Shard = BuildOrderShard;
    type Section = BuildOrderSection;

    fn shard(&self, _ctx: &ShardContext) -> BuildOrderShard {
        let deadline = Instant::now() + WAIT;
        while !self.first_packet_read.load(Ordering::Acquire)
            && !self.gave_up.load(Ordering::Relaxed)
        {
            if Instant::now() > deadline {
                self.gave_up.store(true, Ordering::Relaxed);
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let after = self.first_packet_read.load(Ordering::Acquire);
        BuildOrderShard {
            tally: BuildTally {
                after: u64::from(after),
                before: u64::from(!after),
                packets: 0,
            },
        }
    }

    fn coordinator(&self, _ctx: &ShardContext) -> Option<Box<dyn Coordinator<BuildTally>>> {
        Some(Box::new(MarkFirstPacket(self.first_packet_read.clone())))
    }

    fn report(&self, t: BuildTally, _ctx: &ReportContext) -> BuildOrderSection {
        BuildOrderSection {
            built_after_first_packet: t.after,
            built_before_first_packet: t.before,
            packets: t.packets,
        }
    }
}
