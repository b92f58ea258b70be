//! What the stages tell the outside world while they run, and the sink
//! that hears it.
//!
//! Like ripgrep's `Sink`, the sink's method returns a `Result`: a sink that
//! cannot keep up its end (a full disk under an event file) stops the run,
//! and the run returns that error instead of finishing with events lost.

use crate::class::ClassId;
use crate::dissect::FlowKey;

/// A flow whose estimate reached theta in a window (the heavy-flow stage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeavyEvent {
    /// The flow.
    pub key: FlowKey,
    /// Its class.
    pub class: ClassId,
    /// Trace time of the packet that crossed theta, in nanoseconds since
    /// the first keyed packet.
    pub time_ns: u64,
    /// That packet's index among the keyed packets (0-based).
    pub seq: u64,
    /// The filter's estimate after that packet (at least theta).
    pub estimate: u64,
    /// The window's index (0-based).
    pub window: u64,
}

/// A packet the recycling filter classified as the start of a new flow
/// (the new-flow stage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewFlowEvent {
    /// The flow.
    pub key: FlowKey,
    /// Its class.
    pub class: ClassId,
    /// Nanoseconds since the first keyed packet.
    pub time_ns: u64,
    /// The packet's index among the keyed packets.
    pub seq: u64,
}

/// The heavy-flow stage's window ended (the engine's event, for every
/// window, including windows no packet fell in).
///
/// Windows end when the stream passes their end: a packet of a later
/// window, or, on a live link, the clock. A run of windows that held no
/// packet comes as one event (`window` to `last_window`, `packets` 0), so
/// a gap of a day in a trace is one line, not millions. The event comes
/// after every heavy-flow event of the windows it closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowEndEvent {
    /// The first window index closed (0-based).
    pub window: u64,
    /// The last window index closed (equal to `window` unless a run of
    /// empty windows followed it).
    pub last_window: u64,
    /// Keyed packets in `window` (the later windows of the run had none).
    pub packets: u64,
    /// Heavy-flow events in these windows (the flows reported).
    pub heavy: u64,
    /// The end of `last_window` along the window's axis: nanoseconds since
    /// the first keyed packet for time windows, keyed packets for packet
    /// windows.
    pub end: u64,
}

/// The kinds of [`Event`], for [`PipelineSink::wants`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventKind {
    /// [`Event::Heavy`]: a few per window.
    Heavy,
    /// [`Event::NewFlow`]: one per new flow, costly on large traces.
    NewFlow,
    /// [`Event::WindowEnd`]: one per heavy-flow window.
    WindowEnd,
}

/// One event from a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A flow reached theta in a window.
    Heavy(HeavyEvent),
    /// A packet was called the start of a new flow.
    NewFlow(NewFlowEvent),
    /// Heavy-flow windows ended.
    WindowEnd(WindowEndEvent),
}

impl Event {
    /// The event's kind.
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Heavy(_) => EventKind::Heavy,
            Event::NewFlow(_) => EventKind::NewFlow,
            Event::WindowEnd(_) => EventKind::WindowEnd,
        }
    }
}

/// Receives the stages' events. The engine calls it on the thread that
/// runs the pipeline.
///
/// From a trace, events come in trace order: by the index of the packet
/// that raised them ([`HeavyEvent::seq`], [`NewFlowEvent::seq`]), a
/// packet's heavy-flow event before its new-flow event, and a window's
/// end before the events of the packet that began the next window. The
/// order is then the same whatever the threads, shards and batch size.
/// From a live capture ([`super::Source::events_in_trace_order`]) they
/// come as workers finish batches, sooner: events of one shard in trace
/// order, events of different shards interleaved in an order that depends
/// on scheduling. The report depends on neither.
pub trait PipelineSink {
    /// Whether to collect events of this kind at all (stages skip the work
    /// for kinds nobody wants).
    fn wants(&self, _kind: EventKind) -> bool {
        false
    }

    /// One event. An error stops the run: the source stops reading, the
    /// workers drain, and the run returns the error.
    fn event(&mut self, _event: &Event) -> std::io::Result<()> {
        Ok(())
    }
}

/// A sink that wants nothing.
pub struct NoEvents;
impl PipelineSink for NoEvents {}

/// One event as a JSON object (one line of an event file): `event`
/// (`heavy` or `new_flow`), the flow's `src`, `dst`, `sport`, `dport`,
/// `proto`, its `class` id and `time_s` (seconds since the first keyed
/// packet), then `estimate`, `window` and `packet` (the keyed-packet index
/// of the packet that reached theta) for a heavy flow, or `packet` for a
/// new flow. A window end is `event` `window` with the [`WindowEndEvent`]
/// fields.
impl serde::Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let (name, key, class, time_ns) = match self {
            Event::Heavy(e) => ("heavy", e.key, e.class, e.time_ns),
            Event::NewFlow(e) => ("new_flow", e.key, e.class, e.time_ns),
            Event::WindowEnd(w) => {
                let mut m = s.serialize_map(Some(6))?;
                m.serialize_entry("event", "window")?;
                m.serialize_entry("window", &w.window)?;
                m.serialize_entry("last_window", &w.last_window)?;
                m.serialize_entry("packets", &w.packets)?;
                m.serialize_entry("heavy", &w.heavy)?;
                m.serialize_entry("end", &w.end)?;
                return m.end();
            }
        };
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("event", name)?;
        m.serialize_entry("src", &key.src().to_string())?;
        m.serialize_entry("dst", &key.dst().to_string())?;
        m.serialize_entry("sport", &key.sport())?;
        m.serialize_entry("dport", &key.dport())?;
        m.serialize_entry("proto", &key.proto())?;
        m.serialize_entry("class", &class)?;
        m.serialize_entry("time_s", &(time_ns as f64 * 1e-9))?;
        match self {
            Event::Heavy(e) => {
                m.serialize_entry("estimate", &e.estimate)?;
                m.serialize_entry("window", &e.window)?;
                m.serialize_entry("packet", &e.seq)?;
            }
            Event::NewFlow(e) => m.serialize_entry("packet", &e.seq)?,
            Event::WindowEnd(_) => {}
        }
        m.end()
    }
}

/// A sink that writes every event as a JSON line and counts them.
#[derive(Debug)]
pub struct JsonLinesSink<W: std::io::Write> {
    out: W,
    /// Heavy-flow events written.
    pub heavy: u64,
    /// New-flow events written.
    pub new_flows: u64,
    /// Window-end events written.
    pub windows: u64,
}

impl<W: std::io::Write> JsonLinesSink<W> {
    /// Writes to `out` (wrap a file in a `BufWriter`).
    pub fn new(out: W) -> JsonLinesSink<W> {
        JsonLinesSink {
            out,
            heavy: 0,
            new_flows: 0,
            windows: 0,
        }
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: std::io::Write> PipelineSink for JsonLinesSink<W> {
    fn wants(&self, _kind: EventKind) -> bool {
        true
    }
    fn event(&mut self, event: &Event) -> std::io::Result<()> {
        match event {
            Event::Heavy(_) => self.heavy += 1,
            Event::NewFlow(_) => self.new_flows += 1,
            Event::WindowEnd(_) => self.windows += 1,
        }
        serde_json::to_writer(&mut self.out, event)?;
        self.out.write_all(b"\n")
    }
}
