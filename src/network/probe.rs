//! The probe's exporter: the thread that turns the heavy stage's closed
//! shard-windows into digests and publishes them, never holding up the
//! packet path.
//!
//! - The shards hand their windows to a bounded channel with `try_send`
//!   ([`ExportSink`]); the source thread forwards window ends the same way
//!   ([`ProbeSink`]). A full channel drops the digest, and the window is
//!   recorded as lost (the collector then writes it as partial): capture
//!   is never slowed by the network.
//! - The exporter thread encodes each digest, queues it, and publishes the
//!   queue in window order on its own small tokio runtime, each message
//!   with the id `<probe>.<shard>.<window>`, so a re-send after a failure
//!   is dropped by the stream if the first copy did land.
//! - While the server is unreachable the queue holds at most
//!   `buffer_windows` windows; past that the oldest window is dropped and
//!   recorded as lost. The counts are in [`ExportStats`], which the probe
//!   prints in its interval line and final report. A replay
//!   ([`ProbeOptions::blocking`]) with the server answering drops
//!   nothing: the queue stops taking digests at that bound until they are
//!   published, and the replay waits on the hand-off meanwhile.
//! - After every digest of the windows below `W` is acknowledged, the
//!   probe raises its watermark to `W` in the probes bucket; collectors
//!   close a window only when every expected probe's watermark passed it
//!   (see [`super::book`]).

use super::book::ProbeState;
use super::config::NetworkConfig;
use super::digest::Digest;
use super::export_stats::ExportStats;
use super::transport::{self, Nats, NetError, PROBES_BUCKET, digest_msg_id, digest_subject};
use crate::pipeline::{
    Event, EventKind, PipelineSink, ShardWindow, WindowDigestSink, WindowExport,
};
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded, unbounded};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a probe exports.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// The server.
    pub url: String,
    /// This probe's id.
    pub probe: String,
    /// Copies of the stream and buckets, when this probe creates them.
    pub replicas: usize,
    /// Windows the queue holds while the server is unreachable.
    pub buffer_windows: usize,
    /// How long the probe keeps trying to deliver after its input ended.
    pub flush_timeout: Duration,
    /// Timeout of one server request.
    pub request_timeout: Duration,
    /// Wait for the exporter when its hand-off is full (a replay: nothing
    /// is lost by waiting) instead of dropping the digest (a live
    /// capture). The wait is for encoding, and, while the server answers,
    /// for publishing the queue once it holds `buffer_windows` windows;
    /// never for a server that does not answer (beyond the first
    /// connection's request timeout, once).
    pub blocking: bool,
    /// Digests larger than this many bytes go to the object store (the
    /// limit is also never above the server's; `None`: the server's).
    pub max_message: Option<usize>,
}

/// What the exporter did, when it stopped.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ExportSummary {
    /// The probe.
    pub probe: String,
    /// Digests acknowledged.
    pub published: u64,
    /// Their bytes.
    pub published_bytes: u64,
    /// Of those, digests sent through the object store.
    pub objects: u64,
    /// Digests never delivered (the flush timed out).
    pub undelivered: u64,
    /// Publish attempts that failed and were retried.
    pub failed_attempts: u64,
    /// Digests dropped.
    pub dropped: u64,
    /// Windows recorded as lost.
    pub lost_windows: Vec<u64>,
    /// The last watermark written (every window below it is published).
    pub watermark: u64,
    /// Whether the final state (finished, watermark) reached the server.
    pub finished_written: bool,
    /// CPU time of encoding, seconds.
    pub encode_seconds: f64,
    /// Why exporting stopped early, if it did.
    pub error: Option<String>,
}

enum Control {
    WindowEnd { first: u64, last: u64 },
    Finish,
}

/// The shards' side: a non-blocking hand-off.
pub struct ExportSink {
    tx: Sender<Box<ShardWindow>>,
    lost: Sender<u64>,
    stats: Arc<ExportStats>,
    blocking: bool,
}

impl WindowDigestSink for ExportSink {
    fn shard_window(&self, w: ShardWindow) {
        let window = w.window;
        let sent = if self.blocking {
            self.tx.send(Box::new(w)).is_ok()
        } else {
            match self.tx.try_send(Box::new(w)) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
            }
        };
        if !sent {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            let _ = self.lost.send(window);
        }
    }
}

/// A running exporter.
pub struct Exporter {
    control: Sender<Control>,
    sink: Arc<ExportSink>,
    stats: Arc<ExportStats>,
    cfg: NetworkConfig,
    probe: String,
    handle: Option<std::thread::JoinHandle<ExportSummary>>,
    error: Arc<Mutex<Option<String>>>,
}

impl Exporter {
    /// Starts the exporter thread for `cfg` (already agreed with the
    /// server, or to be checked when it becomes reachable).
    pub fn start(cfg: NetworkConfig, opts: ProbeOptions) -> Result<Exporter, NetError> {
        // Each hand-off holds a shard's whole counter array: two windows'
        // worth, so the memory it takes is bounded by the filters' size.
        let (tx, rx) = bounded(2 * cfg.shards as usize);
        let (lost_tx, lost_rx) = unbounded();
        let (control, control_rx) = unbounded();
        let stats = Arc::new(ExportStats::default());
        let error = Arc::new(Mutex::new(None));
        let sink = Arc::new(ExportSink {
            tx,
            lost: lost_tx,
            stats: stats.clone(),
            blocking: opts.blocking,
        });
        let (c, s, e) = (cfg.clone(), stats.clone(), error.clone());
        let probe = opts.probe.clone();
        let handle = std::thread::Builder::new()
            .name("flowsieve-export".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(err) => {
                        return ExportSummary::failed(&opts.probe, format!("tokio runtime: {err}"));
                    }
                };
                rt.block_on(export_loop(c, opts, (rx, control_rx, lost_rx), s, e))
            })
            .map_err(|e| NetError::Nats {
                what: "start the exporter",
                detail: e.to_string(),
            })?;
        Ok(Exporter {
            control,
            sink,
            stats,
            cfg,
            probe,
            handle: Some(handle),
            error,
        })
    }

    /// What the pipeline's heavy stage exports into.
    pub fn window_export(&self) -> WindowExport {
        WindowExport {
            candidate_theta: self.cfg.candidate_theta(),
            presence_bits: self.cfg.presence_bits as usize,
            presence_k: self.cfg.presence_k as usize,
            sink: self.sink.clone(),
        }
    }

    /// The live figures.
    pub fn stats(&self) -> Arc<ExportStats> {
        self.stats.clone()
    }

    /// A fatal exporting error seen so far (the probe goes on locally).
    pub fn error(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }

    /// A sink that forwards window ends to the exporter, then to `inner`.
    pub fn sink<'a>(&self, inner: &'a mut dyn PipelineSink) -> ProbeSink<'a> {
        ProbeSink {
            tx: self.control.clone(),
            inner,
        }
    }

    /// Says the input ended, waits for the queue to drain (at most the
    /// flush timeout) and returns what happened.
    pub fn finish(mut self) -> ExportSummary {
        // Blocking is fine here: the packet path has ended.
        let _ = self.control.send(Control::Finish);
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(s)) => s,
            _ => ExportSummary::failed(&self.probe, "the exporter thread stopped".into()),
        }
    }
}

/// Forwards window ends to the exporter (without blocking), and every
/// event to the wrapped sink.
pub struct ProbeSink<'a> {
    tx: Sender<Control>,
    inner: &'a mut dyn PipelineSink,
}

impl PipelineSink for ProbeSink<'_> {
    fn wants(&self, kind: EventKind) -> bool {
        kind == EventKind::WindowEnd || self.inner.wants(kind)
    }
    fn event(&mut self, event: &Event) -> std::io::Result<()> {
        if let Event::WindowEnd(e) = event {
            // An unbounded channel of a few bytes per window: never full.
            let _ = self.tx.send(Control::WindowEnd {
                first: e.window,
                last: e.last_window,
            });
        }
        if self.inner.wants(event.kind()) {
            self.inner.event(event)?;
        }
        Ok(())
    }
}

impl ExportSummary {
    fn failed(probe: &str, error: String) -> ExportSummary {
        ExportSummary {
            probe: probe.into(),
            published: 0,
            published_bytes: 0,
            objects: 0,
            undelivered: 0,
            failed_attempts: 0,
            dropped: 0,
            lost_windows: Vec::new(),
            watermark: 0,
            finished_written: false,
            encode_seconds: 0.0,
            error: Some(error),
        }
    }
}

struct Outgoing {
    window: u64,
    shard: u32,
    bytes: bytes::Bytes,
}

/// The most lost windows a probe's state lists (older ones are counted
/// in the stats only).
const MAX_LOST_LISTED: usize = 1024;

async fn export_loop(
    cfg: NetworkConfig,
    opts: ProbeOptions,
    (rx, control_rx, lost_rx): (Receiver<Box<ShardWindow>>, Receiver<Control>, Receiver<u64>),
    stats: Arc<ExportStats>,
    error: Arc<Mutex<Option<String>>>,
) -> ExportSummary {
    let fingerprint = cfg.fingerprint();
    let mut queue: VecDeque<Outgoing> = VecDeque::new();
    let mut state = ProbeState {
        probe: opts.probe.clone(),
        from_window: u64::MAX,
        watermark: 0,
        finished: false,
        lost_windows: Vec::new(),
        stored: Vec::new(),
    };
    let mut written: Option<ProbeState> = None;
    // The largest stream sequence this probe's digests are at (see
    // `StoredSpan`); set when the probe registers.
    let mut stored_through = 0u64;
    let mut end_target = 0u64;
    let mut deadline: Option<Instant> = None;
    let mut fatal: Option<String> = None;
    let mut nats: Option<Nats> = None;
    let mut agreed = false;
    let mut next_try = Instant::now();
    // Whether the last round with the server went through (none yet
    // counts as going through): see `hold` below.
    let mut last_round_ok = true;
    // When the client was made (see `step`).
    let mut connecting_since = Instant::now();
    // Window ends and the finish, each with the number of digests that
    // must have been taken from the hand-off before it may count.
    let mut pending: VecDeque<(u64, Control)> = VecDeque::new();
    let mut taken = 0u64;
    loop {
        // Window ends first, then the digests. Every digest of a window
        // was handed over before its end was, so when a window end is
        // read, all its digests are already in the hand-off, whose
        // order is first in, first out: once as many more digests as it
        // held then have been taken, they are all in the queue. Only then
        // may the end raise the watermark (or the finish mark the probe
        // finished); until then it waits in `pending`. The probe's first
        // window claims nothing about delivery and is taken at once.
        let mut idle = true;
        for c in control_rx.try_iter() {
            idle = false;
            if let Control::WindowEnd { first, .. } = c {
                state.from_window = state.from_window.min(first);
            }
            pending.push_back((taken + rx.len() as u64, c));
        }
        // The connection as the last round left it, so the hand-off keeps
        // draining while the server is away (a disconnected client is
        // skipped without waiting). A client still making its first
        // connection counts as reachable for the request timeout (see
        // `step`).
        let reachable = nats
            .as_ref()
            .is_none_or(|n| match n.client.connection_state() {
                async_nats::connection::State::Connected => true,
                async_nats::connection::State::Pending => {
                    connecting_since.elapsed() < opts.request_timeout
                }
                async_nats::connection::State::Disconnected => false,
            });
        // A replay waits for the exporter rather than lose a digest
        // (`blocking`). While the server answers, the queue therefore
        // stops taking digests at its bound, and this round publishes
        // them, instead of dropping the oldest window: otherwise a
        // replay, which hands windows over far faster than they are
        // encoded, would keep this loop draining to the end of its input
        // and publish only its last `buffer_windows` windows. Before the
        // probe is registered (its first window end not yet read)
        // nothing can be published, so the queue keeps taking digests
        // then; and with the server away, the bound drops the oldest
        // window as in a live capture, so that a replay never waits for
        // the network.
        let answering = opts.blocking && reachable && last_round_ok && fatal.is_none();
        let hold = answering && state.from_window != u64::MAX;
        let bound = opts.buffer_windows.max(1);
        loop {
            if hold && distinct_windows(&queue) >= bound {
                break;
            }
            // A window end waits to be read: go read it. A replay refills
            // the hand-off as fast as this loop encodes, so without this
            // the loop ran to the end of the input before the first
            // window end was read. Until then the probe was not
            // registered, so the queue did not stop at its bound (the
            // whole replay sat encoded in memory) and the watermark rose
            // once, at the end (one span for the whole run: see
            // StoredSpan).
            if !control_rx.is_empty() {
                break;
            }
            let Ok(w) = rx.try_recv() else {
                break;
            };
            taken += 1;
            idle = false;
            let t = Instant::now();
            let w = *w;
            let d = Digest {
                fingerprint,
                probe: opts.probe.clone(),
                shard: w.shard as u32,
                window: w.window,
                packets: w.packets,
                class_packets: w.class_packets,
                counters: w.counters,
                presence: w.presence,
                candidates: w.candidates,
            };
            let bytes = d.encode();
            stats
                .encode_ns
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            queue.push_back(Outgoing {
                window: d.window,
                shard: d.shard,
                bytes: bytes.into(),
            });
            // Bound the queue by windows: drop the oldest.
            if !answering
                && distinct_windows(&queue) > bound
                && let Some(oldest) = queue.iter().map(|o| o.window).min()
            {
                let before = queue.len();
                queue.retain(|o| o.window != oldest);
                stats
                    .dropped
                    .fetch_add((before - queue.len()) as u64, Ordering::Relaxed);
                lose(&mut state, &stats, oldest);
            }
        }
        while let Some(&(due, _)) = pending.front()
            && due <= taken
        {
            let Some((_, c)) = pending.pop_front() else {
                break;
            };
            match c {
                Control::WindowEnd { last, .. } => {
                    end_target = end_target.max(last.saturating_add(1));
                }
                Control::Finish => {
                    deadline = Some(Instant::now() + opts.flush_timeout);
                }
            }
        }
        while let Ok(w) = lost_rx.try_recv() {
            lose(&mut state, &stats, w);
        }
        stats.queued.store(queue.len() as u64, Ordering::Relaxed);
        if !reachable {
            stats.connected.store(false, Ordering::Relaxed);
        }
        if fatal.is_none() && reachable && Instant::now() >= next_try {
            match step(
                &cfg,
                &opts,
                &mut nats,
                &mut agreed,
                &mut queue,
                &mut state,
                &mut written,
                &mut stored_through,
                end_target,
                deadline.is_some(),
                &stats,
                &mut connecting_since,
            )
            .await
            {
                Ok(true) => {
                    last_round_ok = true;
                    stats.connected.store(true, Ordering::Relaxed);
                }
                // Still connecting: neither up nor failed yet.
                Ok(false) => {}
                Err(e @ (NetError::Config(_) | NetError::TooManyProbes { .. })) => {
                    let msg = format!("export stopped: {e}");
                    if let Ok(mut g) = error.lock() {
                        *g = Some(msg.clone());
                    }
                    fatal = Some(msg);
                }
                Err(_) => {
                    last_round_ok = false;
                    stats.connected.store(false, Ordering::Relaxed);
                    stats.failed_attempts.fetch_add(1, Ordering::Relaxed);
                    next_try = Instant::now() + Duration::from_millis(250);
                }
            }
        }
        stats.queued.store(queue.len() as u64, Ordering::Relaxed);
        if let Some(d) = deadline {
            let done = queue.is_empty() && written.as_ref().is_some_and(|w| w.finished);
            if done || fatal.is_some() || Instant::now() >= d {
                break;
            }
        }
        if idle {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    ExportSummary {
        probe: opts.probe.clone(),
        published: stats.published.load(Ordering::Relaxed),
        published_bytes: stats.published_bytes.load(Ordering::Relaxed),
        objects: stats.objects.load(Ordering::Relaxed),
        undelivered: queue.len() as u64,
        failed_attempts: stats.failed_attempts.load(Ordering::Relaxed),
        dropped: stats.dropped.load(Ordering::Relaxed),
        lost_windows: state.lost_windows.clone(),
        watermark: written.as_ref().map_or(0, |w| w.watermark),
        finished_written: written.as_ref().is_some_and(|w| w.finished),
        encode_seconds: stats.encode_ns.load(Ordering::Relaxed) as f64 * 1e-9,
        error: fatal,
    }
}

fn lose(state: &mut ProbeState, stats: &ExportStats, window: u64) {
    if !state.lost_windows.contains(&window) {
        stats.lost_windows.fetch_add(1, Ordering::Relaxed);
        if state.lost_windows.len() < MAX_LOST_LISTED {
            state.lost_windows.push(window);
        }
    }
}

/// Windows in the queue. The shards close a window at slightly different
/// moments, so their digests interleave: count distinct windows, not runs.
fn distinct_windows(q: &VecDeque<Outgoing>) -> usize {
    q.iter()
        .map(|o| o.window)
        .collect::<std::collections::BTreeSet<u64>>()
        .len()
}

/// One round of talking to the server: connect and agree if not yet,
/// register, publish the queue in order, raise the watermark. `false`:
/// the client is still making its first connection, nothing was done.
#[allow(clippy::too_many_arguments)]
async fn step(
    cfg: &NetworkConfig,
    opts: &ProbeOptions,
    nats: &mut Option<Nats>,
    agreed: &mut bool,
    queue: &mut VecDeque<Outgoing>,
    state: &mut ProbeState,
    written: &mut Option<ProbeState>,
    stored_through: &mut u64,
    end_target: u64,
    finishing: bool,
    stats: &ExportStats,
    connecting_since: &mut Instant,
) -> Result<bool, NetError> {
    if nats.is_none() {
        let n = transport::connect(
            &opts.url,
            &format!("flowsieve-probe-{}", opts.probe),
            true,
            opts.request_timeout,
        )
        .await?;
        *nats = Some(n);
        *connecting_since = Instant::now();
    }
    let Some(n) = nats.as_ref() else {
        return Ok(false);
    };
    match n.client.connection_state() {
        async_nats::connection::State::Connected => {}
        // A client that retries its first connection comes back at once,
        // still connecting: for up to the request timeout that is not yet
        // a failure. Counted as one, the first round of every probe
        // failed, and a replay, whose windows pile up meanwhile, dropped
        // all but the last `buffer_windows` of them before the next round
        // (see `hold` in `export_loop`). Not waited for here either: the
        // loop goes on taking digests, and ends at the flush deadline.
        async_nats::connection::State::Pending
            if connecting_since.elapsed() < opts.request_timeout =>
        {
            return Ok(false);
        }
        _ => {
            return Err(NetError::Nats {
                what: "connect",
                detail: format!("{} does not answer", opts.url),
            });
        }
    }
    if !*agreed {
        n.ensure(opts.replicas).await?;
        n.agree_config(cfg).await?;
        *agreed = true;
    }
    // Nothing is published before the probe is registered with its first
    // window, so no collector waits on a probe it does not know.
    if state.from_window == u64::MAX {
        return Ok(true);
    }
    let probes = n.bucket(PROBES_BUCKET).await?;
    if written.is_none() {
        // Its first window is known now, so a probe that finished before
        // it is no longer in the way (the start checked only the running
        // ones).
        n.check_room(cfg, &opts.probe, Some(state.from_window))
            .await?;
        // Digests of these windows that an earlier run of this probe
        // stored are at or below the stream's end now.
        *stored_through = (*stored_through).max(n.stream_last_sequence().await?);
        let mut first = state.clone();
        first.watermark = first.from_window;
        put_state(&probes, &first, opts.request_timeout).await?;
        *written = Some(first);
    }
    let limit = n.message_limit(opts.max_message);
    while let Some(o) = queue.front() {
        let mut headers = async_nats::HeaderMap::new();
        let id = digest_msg_id(&opts.probe, o.shard, o.window);
        headers.insert("Nats-Msg-Id", id.as_str());
        // A digest over the message limit is stored first, under its
        // message id, and the message carries only the name: a re-send
        // stores the same bytes again and its message is dropped as a
        // duplicate like any other.
        let as_object = o.bytes.len() > limit;
        let payload = if as_object {
            match tokio::time::timeout(opts.request_timeout, n.put_digest_object(&id, &o.bytes))
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(NetError::Nats {
                        what: "store digest object",
                        detail: "no answer in time".into(),
                    });
                }
            }
            headers.insert(transport::OBJECT_HEADER, id.as_str());
            bytes::Bytes::new()
        } else {
            o.bytes.clone()
        };
        let subject = digest_subject(o.shard, o.window, &opts.probe);
        let ack = tokio::time::timeout(opts.request_timeout, async {
            n.js.publish_with_headers(subject, headers, payload)
                .await?
                .await
        })
        .await;
        match ack {
            Ok(Ok(ack)) => {
                // A duplicate's acknowledgement gives the sequence of the
                // copy stored first, which is where that digest is.
                *stored_through = (*stored_through).max(ack.sequence);
                stats.published.fetch_add(1, Ordering::Relaxed);
                stats
                    .objects
                    .fetch_add(u64::from(as_object), Ordering::Relaxed);
                stats
                    .published_bytes
                    .fetch_add(o.bytes.len() as u64, Ordering::Relaxed);
                queue.pop_front();
            }
            Ok(Err(e)) => return Err(transport::nats_err("publish")(&e)),
            Err(_) => {
                return Err(NetError::Nats {
                    what: "publish",
                    detail: "no acknowledgement in time".into(),
                });
            }
        }
    }
    let watermark = queue
        .iter()
        .map(|o| o.window)
        .min()
        .map_or(end_target, |w| w.min(end_target));
    let mut next = state.clone();
    let before = written.as_ref().map_or(0, |w| w.watermark);
    next.watermark = watermark.max(before);
    // Every digest of the windows the watermark passes now was
    // acknowledged: say where the stream holds them (StoredSpan), so that
    // a collector draining a backlog writes them without the rest.
    next.stored = written
        .as_ref()
        .map(|w| w.stored.clone())
        .unwrap_or_default();
    next.record_stored(before, next.watermark, *stored_through);
    next.finished = finishing && queue.is_empty();
    if written.as_ref() != Some(&next) {
        put_state(&probes, &next, opts.request_timeout).await?;
        stats.watermark.store(next.watermark, Ordering::Relaxed);
        *written = Some(next);
    }
    Ok(true)
}

async fn put_state(
    store: &async_nats::jetstream::kv::Store,
    s: &ProbeState,
    timeout: Duration,
) -> Result<(), NetError> {
    let bytes = serde_json::to_vec(s).map_err(|e| transport::nats_err("encode probe state")(&e))?;
    match tokio::time::timeout(timeout, store.put(s.probe.as_str(), bytes.into())).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(transport::nats_err("write probe state")(&e)),
        Err(_) => Err(NetError::Nats {
            what: "write probe state",
            detail: "no answer in time".into(),
        }),
    }
}
