//! The stage and source interfaces, used as a library user would: a fourth
//! stage written as one file (`stages/packet_count.rs`) and registered with
//! one line, a source of the test's own that ticks the clock, and a sink
//! that fails; and when the workers build the shards' states.

#[path = "stages/build_order.rs"]
mod build_order;
#[path = "stages/packet_count.rs"]
mod packet_count;
#[path = "stages/panicking.rs"]
mod panicking;
#[path = "stages/prefault_probe.rs"]
mod prefault_probe;

use crate::common;
use flowsieve::class::Classifier;
use flowsieve::dissect::FlowKey;
use flowsieve::hash::flow_hash;
use flowsieve::ingest::Timestamp;
use flowsieve::pipeline::{
    Event, EventKind, FileSource, NoEvents, PipelineConfig, PipelineError, PipelineSink, Source,
    StageList, ValidatedConfig, run,
};
use flowsieve::replay::{NoObserver, PacketSink, ReplayObserver};
use flowsieve::report::{PipelineReport, ReplaySummary};
use packet_count::{PacketCount, PacketCountSection};
use std::path::{Path, PathBuf};

fn default_trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/default.pcap")
}

fn replay_with(cfg: &ValidatedConfig) -> PipelineReport {
    let source = FileSource::new(vec![default_trace()], cfg);
    run(source, cfg, &mut NoObserver, &mut NoEvents).unwrap()
}

#[test]
fn a_fourth_stage_is_one_file_and_one_registration() {
    let mut cfg = PipelineConfig::new(Classifier::ports());
    cfg.threads = 2;
    cfg.shards = 5;
    let validated = cfg.validate().unwrap().with_stage(PacketCount); // the registration
    assert_eq!(
        validated.stage_names(),
        ["heavy", "new_flows", "selective", "packet_count"]
    );
    let r = replay_with(&validated);
    let s = r.section::<PacketCountSection>("packet_count").unwrap();
    // Its counts equal the replay's own per-class counts, kept by another
    // path (the source's totals, before any shard).
    assert_eq!(s.packets, r.replay.trace.ip_packets);
    assert_eq!(s.packets, 40_000);
    for ((name, packets, bytes), class) in s.classes.iter().zip(&r.replay.classes) {
        assert_eq!(name, &class.class);
        assert_eq!(*packets, class.packets, "{name}");
        assert_eq!(*bytes, class.bytes, "{name}");
    }
    // A file replay never ticks the clock.
    assert_eq!(s.closes, 0);
    // It renders like any stage: JSON under its name, a text section, a
    // CSV table, a latency row; the built-in sections are unchanged.
    let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(v["packet_count"]["packets"], 40_000);
    assert!(v["heavy"]["overall"]["reported"].as_u64().unwrap() > 0);
    let text = r.render_text();
    assert!(text.contains("packet count (40000 packets)"), "{text}");
    let csv = r.csv_tables();
    let table = &csv.iter().find(|(n, _)| n == "packet_count.csv").unwrap().1;
    assert!(
        table.starts_with("class,packets,wire_bytes\nweb,15827,"),
        "{table}"
    );
    assert!(
        r.stages
            .iter()
            .any(|l| l.name == "packet_count" && l.batches > 0)
    );
}

#[test]
fn the_fourth_stage_is_deterministic_across_thread_counts() {
    let mut reference: Option<serde_json::Value> = None;
    for threads in [1, 3] {
        let mut cfg = PipelineConfig::new(Classifier::ipclass());
        cfg.threads = threads;
        cfg.shards = 6;
        cfg.stages = StageList::none();
        let r = replay_with(&cfg.validate().unwrap().with_stage(PacketCount));
        let v = common::report_without_timing(&r);
        match &reference {
            None => reference = Some(v),
            Some(first) => assert_eq!(first, &v, "{threads} threads"),
        }
    }
}

/// A source of the test's own: a few packets, an idle gap announced by the
/// clock, more packets. It stands in for a live capture on an idle link.
struct Ticking {
    keys: Vec<FlowKey>,
    ticks: bool,
}

impl Source for Ticking {
    fn run<P: PacketSink>(self, _obs: &mut dyn ReplayObserver, sink: &mut P) -> ReplaySummary {
        let t = |s: i64| Timestamp::new(1_700_000_000 + s, 0).unwrap();
        for (i, k) in self.keys.iter().enumerate() {
            sink.packet(k, flow_hash(k), 0, t(i as i64 % 2), 100, 100);
        }
        if self.ticks {
            sink.clock(t(30)); // 30 s without a packet
            sink.clock(t(20)); // a clock behind the stream is ignored
        }
        for k in &self.keys {
            sink.packet(k, flow_hash(k), 0, t(31), 100, 100);
        }
        let cfg = flowsieve::replay::ReplayConfig::new(Classifier::ports());
        flowsieve::replay::replay(&[], &cfg, &mut NoObserver)
    }
}

#[test]
fn a_clock_tick_reaches_every_shard_and_changes_no_result() {
    let keys: Vec<FlowKey> = (0..200u16)
        .map(|i| {
            FlowKey::v4(
                [10, 0, (i >> 8) as u8, i as u8],
                [10, 1, 0, 1],
                1000 + i,
                80,
                6,
            )
        })
        .collect();
    let mut cfg = PipelineConfig::new(Classifier::ports());
    cfg.threads = 2;
    cfg.shards = 4;
    cfg.heavy.theta = 2;
    let validated = cfg.validate().unwrap().with_stage(PacketCount);
    let run_with = |ticks: bool| {
        let src = Ticking {
            keys: keys.clone(),
            ticks,
        };
        run(src, &validated, &mut NoObserver, &mut NoEvents).unwrap()
    };
    let (ticked, plain) = (run_with(true), run_with(false));
    let s = ticked
        .section::<PacketCountSection>("packet_count")
        .unwrap();
    assert_eq!(s.packets, 400);
    // One tick (the second clock reading is behind the stream), one close
    // per shard; none without ticks.
    assert_eq!(s.closes, 4);
    let p = plain.section::<PacketCountSection>("packet_count").unwrap();
    assert_eq!(p.closes, 0);
    // The heavy stage closed its windows of the first two seconds on the
    // tick instead of at the next packet: the same scores either way.
    let json = |r: &flowsieve::report::PipelineReport| {
        serde_json::to_string(
            &r.section::<flowsieve::report::HeavyReport>("heavy")
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(json(&ticked), json(&plain));
    let h = ticked.heavy().unwrap();
    assert_eq!(h.overall.flows_below, Some(400));
    assert_eq!(h.shard_windows, plain.heavy().unwrap().shard_windows);
}

/// A sink that fails at its first event stops the run with that error.
#[test]
fn a_failing_sink_stops_the_run() {
    struct Full;
    impl PipelineSink for Full {
        fn wants(&self, kind: EventKind) -> bool {
            kind == EventKind::NewFlow
        }
        fn event(&mut self, _: &Event) -> std::io::Result<()> {
            Err(std::io::Error::other("disk full"))
        }
    }
    let cfg = PipelineConfig::new(Classifier::ports()).validate().unwrap();
    let source = FileSource::new(vec![default_trace()], &cfg);
    match run(source, &cfg, &mut NoObserver, &mut Full) {
        Err(PipelineError::Sink(e)) => assert_eq!(e.to_string(), "disk full"),
        other => panic!(
            "expected the sink's error, got {:?}",
            other.map(|r| r.pipeline)
        ),
    }
}

/// A run with a [`panicking::PanicIn`] stage on its own thread, so that a
/// hang shows as a deadline passed rather than a test that never ends.
/// `None` if it has not finished after 60 s; otherwise what joining it
/// gave: the run's outcome, or the panic that ended it.
fn panicking_run(
    threads: usize,
    stage: panicking::PanicIn,
) -> Option<std::thread::Result<Result<PipelineReport, PipelineError>>> {
    let run_it = std::thread::spawn(move || {
        let mut cfg = PipelineConfig::new(Classifier::ports());
        cfg.threads = threads;
        cfg.shards = 8;
        cfg.batch = 64;
        cfg.queue_batches = 2;
        let cfg = cfg.validate().unwrap().with_stage(stage);
        let source = FileSource::new(vec![default_trace()], &cfg);
        run(source, &cfg, &mut NoObserver, &mut NoEvents)
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !run_it.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    run_it.is_finished().then(|| run_it.join())
}

/// A stage that panics in one shard ends the run with the worker error, at
/// any thread count, instead of hanging: the shard's state dies with its
/// worker, so the scheduler must stop the other workers and the source,
/// which would otherwise wait for that shard's batches to come back. The
/// same for a panic while a shard's state is built (at its first batch):
/// a later turn of that shard would otherwise wait for a state that never
/// comes.
#[test]
fn a_panicking_stage_ends_the_run_with_an_error() {
    for threads in [1, 2, 3] {
        for (stage, when) in [
            (
                panicking::PanicIn::Shard {
                    shard: 3,
                    after: 500,
                },
                "in a batch",
            ),
            (panicking::PanicIn::Build { shard: 5 }, "while built"),
        ] {
            match panicking_run(threads, stage) {
                Some(Ok(Err(PipelineError::Worker(_)))) => {}
                Some(Ok(other)) => panic!(
                    "{threads} threads, {when}: expected the worker error, got {:?}",
                    other.map(|r| r.pipeline)
                ),
                Some(Err(_)) => panic!("{threads} threads, {when}: the run panicked"),
                None => panic!("{threads} threads, {when}: the run hung after a worker panicked"),
            }
        }
    }
}

/// The workers build the shards' states while the source reads: every
/// shard is built after the source dispatched its first packet, at any
/// thread count and with more shards than a short trace fills, and the
/// run's results do not depend on it (every packet reaches a shard). The
/// source building them all first made `--shards 4096` wait 70-95 ms
/// before its first packet (BENCHMARKS.md, fifty-fifth round).
#[test]
fn the_workers_build_the_shards_while_the_source_reads() {
    for (threads, shards) in [(1, 4), (2, 64), (3, 1000)] {
        let mut cfg = PipelineConfig::new(Classifier::ports());
        cfg.threads = threads;
        cfg.shards = shards;
        let r = replay_with(
            &cfg.validate()
                .unwrap()
                .with_stage(build_order::BuildOrder::default()),
        );
        let s = r
            .section::<build_order::BuildOrderSection>("build_order")
            .unwrap();
        assert_eq!(
            (s.built_after_first_packet, s.built_before_first_packet),
            (shards as u64, 0),
            "{threads} threads, {shards} shards"
        );
        assert_eq!(s.packets, r.replay.trace.ip_packets);
        assert_eq!(s.packets, 40_000);
    }
}

/// A stage whose coordinator panics (a bug on the source thread) ends the
/// run with that panic, at any thread count, instead of hanging: the
/// workers wait for batches that will never come, so the source's unwind
/// must stop them before the engine's thread scope can join them.
#[test]
fn a_panicking_coordinator_ends_the_run_instead_of_hanging() {
    for threads in [1, 2, 3] {
        let stage = panicking::PanicIn::Coordinator { after: 500 };
        let Some(joined) = panicking_run(threads, stage) else {
            panic!("{threads} threads: the run hung after its source panicked");
        };
        let panic = joined.expect_err("the coordinator's panic must reach the caller");
        assert_eq!(
            panic.downcast_ref::<&str>(),
            Some(&"the coordinator's bug"),
            "{threads} threads: the caller must see the coordinator's own panic"
        );
    }
}

/// Many ticks (or broadcasts) with the smallest queues: workers hand empty
/// buffers back without waiting, so the engine never blocks on its own
/// buffer pool. (It did: a worker waiting to return a buffer stopped
/// draining its queue while the source waited on that queue.)
#[test]
fn many_ticks_with_tiny_queues_never_block_the_engine() {
    struct Storm;
    impl Source for Storm {
        fn run<P: PacketSink>(self, _: &mut dyn ReplayObserver, sink: &mut P) -> ReplaySummary {
            let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 6);
            for i in 0..20_000i64 {
                sink.packet(
                    &k,
                    flow_hash(&k),
                    0,
                    Timestamp::new(1_700_000_000 + 2 * i, 0).unwrap(),
                    60,
                    60,
                );
                sink.clock(Timestamp::new(1_700_000_001 + 2 * i, 0).unwrap());
            }
            let cfg = flowsieve::replay::ReplayConfig::new(Classifier::ports());
            flowsieve::replay::replay(&[], &cfg, &mut NoObserver)
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut cfg = PipelineConfig::new(Classifier::ports());
        cfg.threads = 2;
        cfg.shards = 4;
        cfg.queue_batches = 1;
        let v = cfg.validate().unwrap().with_stage(PacketCount);
        let r = run(Storm, &v, &mut NoObserver, &mut NoEvents).unwrap();
        let s = r.section::<PacketCountSection>("packet_count").unwrap();
        tx.send((s.packets, s.closes)).unwrap();
    });
    let (packets, closes) = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the engine finished (no deadlock)");
    assert_eq!(packets, 20_000);
    assert_eq!(closes, 20_000 * 4);
}

/// Collects window-end events (and counts heavy ones).
#[derive(Default)]
struct Windows {
    ends: Vec<flowsieve::pipeline::WindowEndEvent>,
    heavy: u64,
}

impl PipelineSink for Windows {
    fn wants(&self, _: EventKind) -> bool {
        true
    }
    fn event(&mut self, e: &Event) -> std::io::Result<()> {
        match e {
            Event::WindowEnd(w) => self.ends.push(*w),
            Event::Heavy(_) => self.heavy += 1,
            _ => {}
        }
        Ok(())
    }
}

#[test]
fn every_heavy_window_ends_once_idle_ones_included() {
    let keys: Vec<FlowKey> = (0..200u16)
        .map(|i| FlowKey::v4([10, 0, 0, i as u8], [10, 1, 0, 1], 1000 + i, 80, 6))
        .collect();
    let mut cfg = PipelineConfig::new(Classifier::ports());
    cfg.threads = 2;
    cfg.shards = 4;
    cfg.heavy.theta = 1;
    let validated = cfg.validate().unwrap();
    let ends = |ticks: bool| {
        let mut sink = Windows::default();
        let src = Ticking {
            keys: keys.clone(),
            ticks,
        };
        let r = run(src, &validated, &mut NoObserver, &mut sink).unwrap();
        assert_eq!(sink.heavy, r.heavy().unwrap().overall.reported);
        sink.ends
            .iter()
            .map(|w| (w.window, w.last_window, w.packets, w.heavy, w.end))
            .collect::<Vec<_>>()
    };
    const S: u64 = 1_000_000_000;
    // Packet 0 at 0 s; the other 199 at 1 s (the source's clock is made
    // monotone); at theta 1 each flow of a window is one heavy flow.
    // With the clock at 30 s, windows 1 to 29 end then, and window 30, in
    // which no packet fell, ends when the packets of 31 s arrive.
    assert_eq!(
        ends(true),
        vec![
            (0, 0, 1, 1, S),
            (1, 29, 199, 199, 30 * S),
            (30, 30, 0, 0, 31 * S),
            (31, 31, 200, 200, 32 * S),
        ]
    );
    // Without the clock the idle stretch ends as one run at the next packet.
    assert_eq!(
        ends(false),
        vec![
            (0, 0, 1, 1, S),
            (1, 30, 199, 199, 31 * S),
            (31, 31, 200, 200, 32 * S),
        ]
    );
}

#[test]
fn window_events_change_no_report_figure() {
    for (window, stages) in [("1s", "all"), ("2000p", "heavy"), ("250ms", "heavy,new")] {
        let mut cfg = PipelineConfig::new(Classifier::ports());
        cfg.threads = 2;
        cfg.shards = 3;
        cfg.heavy.window = window.parse().unwrap();
        cfg.stages = stages.parse().unwrap();
        let validated = cfg.validate().unwrap();
        let report = |with_windows: bool| {
            let source = FileSource::new(vec![default_trace()], &validated);
            let mut sink = Windows::default();
            let r = if with_windows {
                run(source, &validated, &mut NoObserver, &mut sink).unwrap()
            } else {
                run(source, &validated, &mut NoObserver, &mut NoEvents).unwrap()
            };
            let v = common::report_without_timing(&r);
            if with_windows {
                let packets: u64 = sink.ends.iter().map(|w| w.packets).sum();
                assert_eq!(packets, r.pipeline.packets, "{window}");
                let heavy: u64 = sink.ends.iter().map(|w| w.heavy).sum();
                assert_eq!(heavy, sink.heavy, "{window}");
                assert_eq!(heavy, r.heavy().unwrap().overall.reported, "{window}");
            }
            v
        };
        assert_eq!(report(true), report(false), "{window} {stages}");
    }
}

/// A stage whose coordinator sends an update before every record whose
/// place in the stream is a multiple of 5 or 7, carrying that place; each
/// shard checks that every record it sees comes after exactly the updates
/// sent before it. Updates ride in the shards' batches, each in its place
/// among the records; one applied early or late, or lost, shows here.
mod update_order {
    use flowsieve::pipeline::stage::{Broadcast, Coordinator};
    use flowsieve::pipeline::{
        Event, RecordBatch, ReportContext, ShardContext, ShardStage, Stage, Tally,
    };
    use serde::Serialize;
    use std::sync::Arc;

    /// `SECOND` makes a second stage of this kind, with a name and a
    /// schedule of its own, so that two coordinators can send at the same
    /// record.
    pub struct UpdateOrder<const SECOND: bool>;

    pub fn sends_before(second: bool, seq: u64) -> bool {
        if second {
            seq.is_multiple_of(3) || seq.is_multiple_of(11)
        } else {
            seq.is_multiple_of(5) || seq.is_multiple_of(7)
        }
    }

    #[derive(Default)]
    pub struct OrderTally {
        pub records: u64,
        pub misplaced: u64,
        pub applied: u64,
        pub sent: u64,
    }

    impl Tally for OrderTally {
        fn merge(&mut self, o: OrderTally) {
            self.records += o.records;
            self.misplaced += o.misplaced;
            self.applied += o.applied;
            self.sent += o.sent;
        }
    }

    pub struct OrderShard {
        second: bool,
        last: Option<u64>,
        tally: OrderTally,
    }

    impl ShardStage for OrderShard {
        type Tally = OrderTally;
        fn process(&mut self, batch: RecordBatch<'_>, _events: &mut Vec<Event>) {
            for r in batch.records() {
                // The last update before this record: the largest place at
                // or before it that sends one.
                let want = (0..=r.seq).rev().find(|&s| sends_before(self.second, s));
                self.tally.records += 1;
                self.tally.misplaced += u64::from(self.last != want);
            }
        }
        fn apply(&mut self, update: &(dyn std::any::Any + Send + Sync)) {
            if let Some(&seq) = update.downcast_ref::<u64>() {
                self.last = Some(seq);
                self.tally.applied += 1;
            }
        }
        fn finish(self) -> OrderTally {
            self.tally
        }
    }

    struct OrderCoordinator {
        second: bool,
        sent: u64,
    }

    impl Coordinator<OrderTally> for OrderCoordinator {
        fn observe(&mut self, r: &flowsieve::pipeline::PacketRecord) -> Option<Broadcast> {
            sends_before(self.second, r.seq).then(|| {
                self.sent += 1;
                Arc::new(r.seq) as Broadcast
            })
        }
        fn finish(self: Box<Self>) -> OrderTally {
            OrderTally {
                sent: self.sent,
                ..OrderTally::default()
            }
        }
    }

    #[derive(Debug, Serialize)]
    pub struct OrderSection {
        pub records: u64,
        pub misplaced: u64,
        pub applied: u64,
        pub sent: u64,
    }

    impl flowsieve::report::Section for OrderSection {
        fn heading(&self) -> String {
            "update order".into()
        }
        fn tables(&self) -> Vec<flowsieve::report::Table> {
            Vec::new()
        }
    }

    impl<const SECOND: bool> Stage for UpdateOrder<SECOND> {
        const NAME: &'static str = if SECOND {
            "update_order_2"
        } else {
            "update_order"
        };
        type Shard = OrderShard;
        type Section = OrderSection;
        fn shard(&self, _ctx: &ShardContext) -> OrderShard {
            OrderShard {
                second: SECOND,
                last: None,
                tally: OrderTally::default(),
            }
        }
        fn coordinator(&self, _ctx: &ShardContext) -> Option<Box<dyn Coordinator<OrderTally>>> {
            Some(Box::new(OrderCoordinator {
                second: SECOND,
                sent: 0,
            }))
        }
        fn report(&self, t: OrderTally, _ctx: &ReportContext) -> OrderSection {
            OrderSection {
                records: t.records,
                misplaced: t.misplaced,
                applied: t.applied,
                sent: t.sent,
            }
        }
    }
}

#[test]
fn every_update_reaches_every_shard_in_its_place_among_the_records() {
    use update_order::{OrderSection, UpdateOrder, sends_before};
    let sent = |second| (0..40_000u64).filter(|&s| sends_before(second, s)).count() as u64;
    // Batches of one record, of a few, and the default, at which a shard's
    // pending batch gathers more updates than it may hold and is sent
    // early. With one coordinator, and with two that often send at the same
    // record: the second's update must still go before that record, even
    // when the first's filled the record's batch.
    for (batch, threads, shards) in [(1, 2, 3), (7, 2, 8), (512, 1, 5), (512, 2, 8)] {
        for two in [false, true] {
            let mut cfg = PipelineConfig::new(Classifier::ports());
            cfg.batch = batch;
            cfg.threads = threads;
            cfg.shards = shards;
            cfg.stages = StageList::none();
            let mut validated = cfg.validate().unwrap().with_stage(UpdateOrder::<false>);
            if two {
                validated = validated.with_stage(UpdateOrder::<true>);
            }
            let r = replay_with(&validated);
            let mut names = vec![(false, "update_order")];
            if two {
                names.push((true, "update_order_2"));
            }
            for (second, name) in names {
                let s = r.section::<OrderSection>(name).unwrap();
                let what = format!("{name}: batch {batch}, {threads} threads, {shards} shards");
                assert_eq!(s.records, 40_000, "{what}");
                assert_eq!(s.sent, sent(second), "{what}");
                assert_eq!(s.applied, sent(second) * shards as u64, "{what}");
                assert_eq!(s.misplaced, 0, "{what}");
            }
        }
    }
}

/// The offers a [`prefault_probe::PrefaultProbe`] needing `need` bytes got
/// on the default trace, one shard and one worker, in batches of 512.
fn prefault_offers(need: usize, touch_pages: usize) -> prefault_probe::ProbeSection {
    let mut cfg = PipelineConfig::new(Classifier::ports());
    cfg.threads = 1;
    cfg.shards = 1;
    cfg.batch = 512;
    cfg.stages = StageList::none();
    let validated = cfg
        .validate()
        .unwrap()
        .with_stage(prefault_probe::PrefaultProbe { need, touch_pages });
    let r = replay_with(&validated);
    r.section::<prefault_probe::ProbeSection>("prefault_probe")
        .unwrap()
        .clone()
}

/// How a worker earns the budget it populates its shards' filters with
/// (`PrefaultBudget` in src/pipeline/engine.rs): 8 MiB to start and 64 KiB
/// for each record it takes, offered to a shard's stages before each batch
/// until they answer that they are populated, and never after. A stage
/// that never fits is offered a budget before every batch, which never
/// shrinks and grows by at least the records' share; one that needs 100
/// MiB takes it at the first offer that holds it, after about 1,500
/// records, and is not asked again.
#[test]
fn the_prefault_budget_grows_with_the_records_and_stops_at_done() {
    const MIB: usize = 1 << 20;
    const PER_RECORD: usize = 64 << 10;
    let never = prefault_offers(1 << 40, 0);
    assert_eq!(never.offers.len(), 1, "one shard");
    let offers = &never.offers[0];
    // 40,000 packets in batches of 512: one offer a batch.
    assert_eq!(
        offers.len() as u64,
        never.records.div_ceil(512),
        "{offers:?}"
    );
    assert_eq!(offers[0].records_before, 0);
    for (i, o) in offers.iter().enumerate() {
        let earned = 8 * MIB + PER_RECORD * (o.records_before as usize + 1);
        assert!(o.budget >= earned, "offer {i}: {o:?}, at least {earned}");
        // Faults earn too, but this stage takes none of its own: a few MiB
        // of slack for the worker's own allocations.
        let most = 8 * MIB + PER_RECORD * (o.records_before as usize + 512) + 32 * MIB;
        assert!(o.budget <= most, "offer {i}: {o:?}, at most {most}");
    }
    // Nothing taken, so each offer holds the one before and the next
    // batch's share (a record's at least).
    for pair in offers.windows(2) {
        assert!(pair[1].budget >= pair[0].budget + PER_RECORD, "{pair:?}");
    }
    assert_eq!(never.after_done, 0);

    let need = 100 * MIB;
    let once = prefault_offers(need, 0);
    let offers = &once.offers[0];
    let (done, before) = offers.split_last().unwrap();
    assert!(done.budget >= need, "{offers:?}");
    assert!(before.iter().all(|o| o.budget < need), "{offers:?}");
    // (100 - 8) MiB at 64 KiB a record: 1,472 records, granted with the
    // third batch of 512.
    assert_eq!(done.records_before, 1024, "{offers:?}");
    assert_eq!(once.after_done, 0, "asked again after it was populated");
    assert_eq!(once.records, never.records);
}

/// Pages a worker's packets fault in on demand earn it budget too: 8
/// pages a page. A stage that touches 2,048 fresh pages in each batch (a
/// read, then a write: at least one fault a page) makes each offer at
/// least 64 MiB larger than the one before, beyond the records' share.
#[cfg(target_os = "linux")]
#[test]
fn pages_faulted_in_on_demand_earn_prefault_budget() {
    const TOUCH: usize = 2048;
    let probe = prefault_offers(1 << 40, TOUCH);
    let offers = &probe.offers[0];
    assert!(offers.len() > 10, "{offers:?}");
    for pair in offers.windows(2) {
        assert!(
            pair[1].budget >= pair[0].budget + 8 * TOUCH * 4096,
            "{pair:?}"
        );
    }
}
