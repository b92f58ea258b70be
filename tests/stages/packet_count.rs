//! A fourth stage, written as a library user would: it counts packets and
//! wire bytes per class, and the window closes it is told of. It is one
//! file; `tests/stage.rs` registers it with one line.

use flowsieve::pipeline::{
    Event, RecordBatch, ReportContext, ShardContext, ShardStage, Stage, Tally,
};
use flowsieve::report::{Cell, Column, Section, Table};
use serde::Serialize;

/// The stage's configuration: nothing to configure.
pub struct PacketCount;

/// One shard's counts.
pub struct PacketCountShard {
    tally: PacketCountTally,
}

/// Per-class packets and bytes, plus the window closes heard.
pub struct PacketCountTally {
    packets: Vec<u64>,
    bytes: Vec<u64>,
    closes: u64,
}

impl Tally for PacketCountTally {
    fn merge(&mut self, other: PacketCountTally) {
        for (a, b) in self.packets.iter_mut().zip(other.packets) {
            *a += b;
        }
        for (a, b) in self.bytes.iter_mut().zip(other.bytes) {
            *a += b;
        }
        self.closes += other.closes;
    }
}

impl ShardStage for PacketCountShard {
    type Tally = PacketCountTally;

    fn process(&mut self, batch: RecordBatch<'_>, _events: &mut Vec<Event>) {
        for r in batch.records() {
            let c = usize::from(r.class);
            self.tally.packets[c] += 1;
            self.tally.bytes[c] += u64::from(r.wire_len);
        }
    }

    fn close_window(&mut self, _time_ns: u64, _seq: u64, _events: &mut Vec<Event>) {
        self.tally.closes += 1;
    }

    fn finish(self) -> PacketCountTally {
        self.tally
    }
}

/// The stage's section of the report.
#[derive(Debug, Serialize)]
pub struct PacketCountSection {
    pub classes: Vec<(String, u64, u64)>,
    pub packets: u64,
    pub closes: u64,
}

const COLUMNS: &[Column] = &[
    Column::new("class", 12),
    Column::new("packets", 10),
    Column::titled("wire_bytes", "bytes", 12),
];

impl Section for PacketCountSection {
    fn heading(&self) -> String {
        format!("packet count ({} packets)", self.packets)
    }

    fn tables(&self) -> Vec<Table> {
        let mut t = Table::new("packet_count", COLUMNS);
        for (name, packets, bytes) in &self.classes {
            t.push(vec![
                Cell::Text(name.clone()),
                Cell::Count(Some(*packets)),
                Cell::Count(Some(*bytes)),
            ]);
        }
        vec![t]
    }
}

impl Stage for PacketCount {
    const NAME: &'static str = "packet_count";
    type Shard = PacketCountShard;
    type Section = PacketCountSection;

    fn shard(&self, ctx: &ShardContext) -> PacketCountShard {
        PacketCountShard {
            tally: PacketCountTally {
                packets: vec![0; ctx.classes],
                bytes: vec![0; ctx.classes],
                closes: 0,
            },
        }
    }

    fn report(&self, t: PacketCountTally, ctx: &ReportContext) -> PacketCountSection {
        PacketCountSection {
            classes: ctx
                .classifier
                .names()
                .iter()
                .zip(t.packets.iter().zip(&t.bytes))
                .map(|(n, (p, b))| (n.clone(), *p, *b))
                .collect(),
            packets: t.packets.iter().sum(),
            closes: t.closes,
        }
    }
}
