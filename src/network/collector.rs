//! The collector: owns a fixed set of shards, merges their digests per
//! window, writes each merged shard-window once, and acknowledges the
//! digests only after the write.
//!
//! Each owned shard has a durable pull consumer (`collect-s<shard>`)
//! filtered on `flowsieve.v1.digest.<shard>.>`, so any number of
//! collectors can split the shards, and a collector that restarts resumes
//! from what it had not acknowledged: the digests of every window it had
//! not written come again (within [`ACK_WAIT`]; until they have, their
//! shard writes nothing, see [`Book::ready_unless`]) and merge to the
//! identical result, and the
//! digests of a window it had written but not yet acknowledged are found
//! in the results bucket and acknowledged without merging (see
//! [`super::book`]).

use super::book::{Book, ConsumerView, Verdict, shard_waits};
use super::collector_beat::{CollectorBeat, ProcessAt, process_at};
use super::digest::Digest;
use super::merge::ShardWindowResult;
use super::transport::{
    self, Nats, NetError, RESULTS_BUCKET, STREAM, StoredResult, result_key, result_subject,
    shard_filter,
};
use super::uncollected_shard::shard_list;
use async_nats::jetstream::{AckKind, Message, consumer, kv};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How a collector runs.
#[derive(Clone, Debug)]
pub struct CollectOptions {
    /// The server.
    pub url: String,
    /// The shards it owns.
    pub shards: Vec<u32>,
    /// How long a window waits for missing probes before it is written
    /// as partial.
    pub lateness: Duration,
    /// Copies of the stream and buckets, if this collector creates them.
    pub replicas: usize,
    /// How long to wait for the shared configuration to appear.
    pub config_wait: Duration,
    /// Stop once every declared probe finished, nothing is pending here,
    /// the server says every owned consumer is empty (nothing undelivered
    /// or unacknowledged), and no message came for this long (`None`: run
    /// until stopped).
    pub exit_when_done: Option<Duration>,
    /// Timeout of one server request.
    pub request_timeout: Duration,
    /// Print a line per written shard-window to stderr.
    pub verbose: bool,
    /// How often it writes its beat ([`super::collector_beat`]).
    pub heartbeat: Duration,
    /// A flag that asks for one progress line on stderr (set by SIGUSR1
    /// in `flowsieve collect`), answered at the start of the next round
    /// and cleared.
    pub progress: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Take the shards of a collector that still counts as running
    /// instead of refusing them (`--take-over`): for an operator who knows
    /// it is gone, killed on another host before its beats age into
    /// silence. If it does still run, it stops at its next beat
    /// ([`NetError::TakenOver`]); until then the two split those shards'
    /// digests.
    pub take_over: bool,
}

/// What a collector did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CollectSummary {
    /// Digests merged.
    pub merged: u64,
    /// Digests of a probe already merged into their shard-window.
    pub duplicates: u64,
    /// Digests that arrived after their shard-window was written.
    pub late: u64,
    /// Digests refused (damaged, other configuration or shape, or a
    /// missing object).
    pub rejected: u64,
    /// Digests read from the object store (over the message limit).
    pub objects: u64,
    /// Shard-windows written.
    pub written: u64,
    /// Of those, partial.
    pub partial: u64,
    /// Whether an interrupt found the collector waiting on a server that
    /// did not answer within [`STOP_GRACE`], so it ended without finishing
    /// its round: it wrote no stopped beat, and the digests it held
    /// unwritten go to the next collector of its shards after
    /// [`ACK_WAIT`].
    pub cut_off: bool,
}

impl CollectSummary {
    /// The counts, as the summary line and the progress line give them.
    ///
    /// ```
    /// let s = flowsieve::network::collector::CollectSummary {
    ///     written: 3,
    ///     merged: 6,
    ///     ..Default::default()
    /// };
    /// assert_eq!(
    ///     s.counts(),
    ///     "3 shard-windows written (0 partial), 6 digests merged, 0 duplicates, 0 late, 0 refused, 0 read from the object store"
    /// );
    /// ```
    pub fn counts(&self) -> String {
        format!(
            "{} shard-windows written ({} partial), {} digests merged, {} duplicates, {} late, {} refused, {} read from the object store",
            self.written,
            self.partial,
            self.merged,
            self.duplicates,
            self.late,
            self.rejected,
            self.objects
        )
    }
}

/// How long a collector's connection may stay down before it warns of it,
/// once an outage (and notes the connection's return).
pub const DISCONNECTED_WARNING: Duration = Duration::from_secs(5);

/// Watches the client's connection, and says once an outage, after
/// [`DISCONNECTED_WARNING`], that it is down, and when it is back.
///
/// A collector cut off from its server retries every request without end
/// (nothing is lost: no digest is acknowledged before its window is
/// written), and a request waits up to its timeout, some reads ten times
/// over: without this, the collector said nothing however long the
/// outage lasted, unless run with `-v`.
async fn watch_connection(client: async_nats::Client, shards: String) {
    use async_nats::connection::State;
    let mut down: Option<(Instant, bool)> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if client.connection_state() == State::Connected {
            if let Some((since, true)) = down {
                eprintln!(
                    "flowsieve: note: collect: connected to the server again, after {:.1} s",
                    since.elapsed().as_secs_f64()
                );
            }
            down = None;
            continue;
        }
        let (since, warned) = down.get_or_insert((Instant::now(), false));
        if !*warned && since.elapsed() >= DISCONNECTED_WARNING {
            *warned = true;
            eprintln!(
                "flowsieve: warning: collect: no connection to the server for {:.1} s: still trying; no window of shard(s) {shards} is written meanwhile, and nothing is lost",
                since.elapsed().as_secs_f64()
            );
        }
    }
}

/// A spawned task, aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long an interrupted collector waits for its round to end before it
/// ends without it.
///
/// A round checks the stop at its end, which takes at most a drain
/// (`DRAIN_BUDGET`) and the writes of what is complete while the server
/// answers. A server that went away answers nothing: every request then
/// waits for its timeout and the round's failure paths retry, so without
/// this bound the first Ctrl-C went unheard for as long as the server
/// stayed away.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// How long the server waits for a delivered digest's acknowledgement
/// before it delivers it again: how soon a crashed collector's digests
/// reach the collector that replaces it.
pub const ACK_WAIT: Duration = Duration::from_secs(10);

/// How often a collector tells the server it is still working on the
/// digests it holds (well inside [`ACK_WAIT`]).
const PROGRESS_EVERY: Duration = Duration::from_secs(3);

/// How long one round drains the shards' consumers (a wave of fetches, one
/// a shard, at a time) before it turns to writing what is complete.
const DRAIN_BUDGET: Duration = Duration::from_secs(1);

/// Makes the allocator hand each merge's buffers back to the system when
/// its window is written (glibc; elsewhere it does nothing). Call it once,
/// before a collector starts.
///
/// Why: a dense merge (a window with more than 1/32 of its cells
/// non-zero) allocates 2 MiB of cells and 512 KiB of saturation flags,
/// and glibc, after the first such block is freed, raises its threshold
/// for serving blocks from their own mapping above that size. From then on
/// the merges come from its heaps, which fragment and keep what is freed:
/// a collector draining an hour's backlog (26,595 digests) peaked at
/// 3.4 GB of resident memory. With the threshold fixed at glibc's initial
/// 128 KiB, the same collector peaked at 396 MB,
/// for about 21 s more system time (page faults on the fresh mappings)
/// against 160 s of decoding and merging (BENCHMARKS.md, "A collector's
/// memory on a backlog"; every merge was dense then).
pub fn release_merges_eagerly() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a parameter of glibc's allocator, under
    // the allocator's own lock; no memory is touched.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// How many digests of one shard a round's drain stops at, when the last
/// round wrote some of that shard's windows (else the drain goes on to
/// [`DRAIN_BUDGET`], so that a window waiting for digests further on
/// always gets them). A held window's merge costs up to 2.5 MiB here (the
/// merge's 2^19 four-byte cells and their saturation flags, once more than
/// 1/32 of them are non-zero; a few bytes a non-zero cell below that), and
/// a drain for the whole budget can take in hundreds of digests a shard,
/// though the probes' spans let most windows be written a few dozen
/// digests further on (see `Book::stored_bound`).
const DRAIN_HELD_MAX: usize = 64;

/// Digests one wave of fetches asks for, split evenly over the shards
/// still draining (a wave fetches every such shard at once). The last of
/// a wave waits for the others to be decoded before it is held (and so
/// acknowledged as in progress): 64 at up to 11-16 ms each (decode and
/// merge of a full 2^19-counter shard-window, BENCHMARKS.md, twenty-sixth
/// round; 0.05 ms for a nearly empty one) take under a second, far inside
/// [`ACK_WAIT`]; 256 took up to 3 s when every digest cost 5-11 ms. A
/// wave of 64 digests a shard would hold eight shards' dense digests for
/// up to 8 s.
const FETCH_BATCH: usize = 64;

/// Requests to the server a collector keeps in flight at once for the
/// reads of a fetch's new windows, a round's result writes and their
/// acknowledgements. One at a time, a backlog of nearly empty windows was
/// paced by the round trips (four a shard-window: 36.5 s of wall time for
/// 12.9 s of CPU on a one-hour trace; BENCHMARKS.md, twenty-seventh
/// round).
const IN_FLIGHT: usize = 64;

/// Tells the server that the collector is still working on every digest
/// it holds. Fire and forget: one that is lost lets a digest come back,
/// which is held as a duplicate and changes nothing.
async fn progress(book: &Book<Message>) {
    for m in book.held_tokens() {
        let _ = m.ack_with(AckKind::Progress).await;
    }
}

fn now_ms(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

/// Runs a collector until `stop` says so, or (with
/// [`CollectOptions::exit_when_done`]) until the probes are done.
///
/// A stop ends the collector at its round's end, or [`STOP_GRACE`] after
/// the stop if the round has not ended by then (a server that does not
/// answer): [`CollectSummary::cut_off`] says which. Ending mid-round loses
/// nothing the server holds: a digest is acknowledged only after its
/// window is written, and one written but not yet acknowledged is found
/// written by the next collector (see [`super::book`]).
pub async fn collect(
    opts: &CollectOptions,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<CollectSummary, NetError> {
    use futures_util::future::{Either, select};
    let mut summary = CollectSummary::default();
    let cut_off = {
        let rounds = std::pin::pin!(collect_rounds(opts, stop, &mut summary));
        let unanswered = std::pin::pin!(stop_unanswered(stop));
        match select(rounds, unanswered).await {
            Either::Left((done, _)) => {
                done?;
                false
            }
            Either::Right(((), _)) => true,
        }
    };
    summary.cut_off = cut_off;
    Ok(summary)
}

/// Resolves [`STOP_GRACE`] after `stop` first says so.
async fn stop_unanswered(stop: &(dyn Fn() -> bool + Sync)) {
    while !stop() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(STOP_GRACE).await;
}

/// The collector's work: its set-up, then rounds of drain and write until
/// a stop or the probes are done, counted in `summary`.
async fn collect_rounds(
    opts: &CollectOptions,
    stop: &(dyn Fn() -> bool + Sync),
    summary: &mut CollectSummary,
) -> Result<(), NetError> {
    let nats = transport::connect(
        &opts.url,
        "flowsieve-collector",
        false,
        opts.request_timeout,
    )
    .await?;
    let _watch = AbortOnDrop(tokio::spawn(watch_connection(
        nats.client.clone(),
        shard_list(&opts.shards),
    )));
    // A cluster that just lost a node, or is still electing, answers
    // stream and consumer requests with timeouts for a while: retry them
    // until the configuration wait runs out.
    let waited = Instant::now();
    let retry = |e: NetError| {
        if waited.elapsed() >= opts.config_wait || stop() {
            Err(e)
        } else {
            Ok(())
        }
    };
    while let Err(e) = nats.ensure(opts.replicas).await {
        retry(e)?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cfg = loop {
        match nats.shared_config().await {
            Ok(Some(c)) => break c,
            Ok(None) => {}
            Err(e) => retry(e)?,
        }
        if waited.elapsed() >= opts.config_wait || stop() {
            return Err(NetError::Nats {
                what: "read configuration",
                detail: format!(
                    "no probe wrote the shared configuration within {:?}",
                    opts.config_wait
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if let Some(s) = opts.shards.iter().find(|&&s| s >= cfg.shards) {
        return Err(NetError::Config(format!(
            "shard {s} is past the {} shards of the shared configuration",
            cfg.shards
        )));
    }
    let beats = loop {
        match nats.bucket(transport::COLLECTORS_BUCKET).await {
            Ok(b) => break b,
            Err(e) => {
                retry(e)?;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    let me = format!("{}:{}", host_name(), std::process::id());
    // Before any consumer is touched: a shard another collector runs for
    // is refused (see collector_beat::taken_shards).
    let found = loop {
        match nats.beats_of(&beats, &opts.shards).await {
            Ok(f) => break f,
            Err(e) => {
                retry(e)?;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    refuse_taken(&found, &me, opts.take_over)?;
    // Each owned shard's beat revision as last read or written: every
    // beat is a compare and set on it (see write_beats).
    let mut revisions: HashMap<u32, Option<u64>> = opts
        .shards
        .iter()
        .map(|&s| (s, found.iter().find(|f| f.0 == s).map(|f| f.2)))
        .collect();
    let mut consumers = Vec::new();
    for &s in &opts.shards {
        let name = format!("collect-s{s}");
        let config = consumer::pull::Config {
            durable_name: Some(name.clone()),
            filter_subject: shard_filter(s),
            ack_policy: consumer::AckPolicy::Explicit,
            // A window's digests stay unacknowledged until it is written;
            // the collector keeps them from redelivery with progress
            // acknowledgements every PROGRESS_EVERY, so a short wait here
            // only decides how soon a crashed collector's digests come
            // back to its successor.
            ack_wait: ACK_WAIT,
            max_ack_pending: 1 << 20,
            ..Default::default()
        };
        let c: consumer::PullConsumer = loop {
            let made = match nats.js.get_stream(STREAM).await {
                Ok(stream) => stream
                    .get_or_create_consumer(&name, config.clone())
                    .await
                    .map_err(|e| transport::nats_err("create consumer")(&e)),
                Err(e) => Err(transport::nats_err("open stream")(&e)),
            };
            match made {
                Ok(c) => break c,
                Err(e) => {
                    retry(e)?;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        };
        consumers.push(c);
    }
    let results = loop {
        match nats.bucket(RESULTS_BUCKET).await {
            Ok(b) => break b,
            Err(e) => {
                retry(e)?;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    let mut beat = CollectorBeat {
        collector: me.clone(),
        shards: shard_list(&opts.shards),
        started_ms: unix_ms(),
        beat_ms: unix_ms(),
        every_ms: opts.heartbeat.as_millis().try_into().unwrap_or(u64::MAX),
        stopped: false,
        start_ticks: match process_at(std::process::id()) {
            ProcessAt::Present { start_ticks } => start_ticks,
            ProcessAt::Absent => None,
        },
    };
    // The first beat before any digest is taken: from here on `results`
    // knows these shards have a collector. A beat that another collector
    // wrote since the check above is a collector started at the same
    // moment: refused as above if it runs, taken over if it stopped.
    for _ in 0..3 {
        let changed = write_beats(&nats, &beats, &beat, &mut revisions, opts).await;
        if changed.is_empty() {
            break;
        }
        refuse_taken(&changed, &me, opts.take_over)?;
        for (s, _, r) in changed {
            revisions.insert(s, Some(r));
        }
    }
    let mut last_beat = Instant::now();
    let mut book: Book<Message> = Book::new(cfg.clone(), opts.shards.clone());
    // Of each written shard-window, only its probes (what tells a
    // duplicate from a late digest) and whether it was partial: not the
    // whole result, whose presence filter alone is 11 KB in base64.
    let mut written: HashMap<(u64, u32), WrittenWindow> = HashMap::new();
    // Windows written complete that then got a late digest, warned of.
    let late_warnings = AtomicU64::new(0);
    let start = Instant::now();
    let mut last_message = Instant::now();
    let mut last_progress = Instant::now();
    let mut warned_elsewhere: Vec<u32> = Vec::new();
    let mut warned_crowded = false;
    // Shards that held DRAIN_HELD_MAX digests or more after a round that
    // wrote none of their windows: their next drain is not capped.
    let mut stalled: Vec<u32> = Vec::new();
    loop {
        if opts
            .progress
            .as_ref()
            .is_some_and(|p| p.swap(false, Ordering::Relaxed))
        {
            eprintln!(
                "flowsieve: progress: collect: shard(s) {}, {:.1} s: {}; {} digests of {} shard-windows held until those are written",
                shard_list(&opts.shards),
                start.elapsed().as_secs_f64(),
                summary.counts(),
                book.held_tokens().count(),
                book.pending()
            );
        }
        // A beat that fails is retried at the next round; `results` takes
        // a collector for silent only after SILENT_AFTER_BEATS periods.
        if last_beat.elapsed() >= opts.heartbeat {
            beat.beat_ms = unix_ms();
            let changed = write_beats(&nats, &beats, &beat, &mut revisions, opts).await;
            if !changed.is_empty() {
                return Err(taken_over(&changed));
            }
            last_beat = Instant::now();
        }
        // Watermarks first, then drain: see super::book.
        // After a node is lost, requests time out until the cluster has
        // moved its leaders: wait and try again (nothing was acknowledged,
        // nothing is lost).
        let probes = match nats.probe_states().await {
            Ok(p) => p,
            Err(e) => {
                transient(&e, opts);
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        // Once: more probes share a window than the network declares (two
        // that joined at the same moment both found room).
        if !warned_crowded
            && let Some((w, at)) = super::book::most_probes_at_once(&probes)
            && at.len() > cfg.probes as usize
        {
            warned_crowded = true;
            eprintln!(
                "collect: warning: {} probes ({}) report window {w}, but the shared configuration declares {}: a heavy flow split over more probes than that can be missed (the candidate bound ceil(theta/P)); stop one of them",
                at.len(),
                at.join(", "),
                cfg.probes
            );
        }
        let mut got = 0u64;
        // The drain stops after DRAIN_BUDGET, and the held digests'
        // progress acknowledgements go out as they fall due, also in the
        // middle of a drain. A drain that ran to the consumers' end before
        // either used to outlast ACK_WAIT on a backlog (a collector started
        // after the probes replayed a long trace): the server then
        // delivered the first digests again while the drain went on, and
        // the drain never ended. Stopping early is safe: a drain could
        // always end at an empty or failed fetch, and `shard_waits` keeps
        // a shard's windows from being written while its consumer may
        // still hold digests the watermarks promise.
        //
        // The shards' fetches go out together, in waves of FETCH_BATCH
        // digests over the shards still draining, and a shard leaves the
        // drain at its first empty or failed fetch. A
        // fetch that finds nothing waits for its expiry, and when the
        // shards were fetched one after the other the idle shards' waits
        // paced the busy ones: 7 x 50 ms a round for the 64 digests of the
        // last shard of a backlog (BENCHMARKS.md, twenty-seventh round).
        let drain_until = Instant::now() + DRAIN_BUDGET;
        let mut draining: Vec<usize> = (0..consumers.len()).collect();
        loop {
            draining.retain(|&i| {
                let shard = opts.shards[i];
                book.held(shard) < DRAIN_HELD_MAX || stalled.contains(&shard)
            });
            if draining.is_empty() {
                break;
            }
            let each = (FETCH_BATCH / draining.len()).max(1);
            let wave = futures_util::future::join_all(
                draining
                    .iter()
                    .map(|&i| fetch_batch(&consumers[i], each, opts, i)),
            )
            .await;
            let mut decoded = Vec::new();
            for (i, batch) in wave {
                let n = batch.as_ref().map_or(0, Vec::len);
                if n == 0 {
                    draining.retain(|&d| d != i);
                }
                got += n as u64;
                for m in batch.into_iter().flatten() {
                    if let Some(d) = decode(&nats, summary, m, opts).await {
                        decoded.push(d);
                    }
                }
            }
            let mut fresh = look_up_written(&results, &book, &mut written, &decoded, opts).await;
            let mut given_back = Vec::new();
            for (d, m) in decoded {
                given_back.extend(offer(
                    &mut book,
                    &written,
                    &mut fresh,
                    summary,
                    &d,
                    m,
                    now_ms(start),
                    opts,
                ));
                if last_progress.elapsed() >= PROGRESS_EVERY {
                    progress(&book).await;
                    last_progress = Instant::now();
                }
            }
            settle(&results, given_back, opts, stop, &late_warnings).await;
            if Instant::now() >= drain_until {
                break;
            }
        }
        if got > 0 {
            last_message = Instant::now();
        }
        if last_progress.elapsed() >= PROGRESS_EVERY {
            progress(&book).await;
            last_progress = Instant::now();
        }
        // Shards with digests delivered but not here (a crashed
        // predecessor's) complete nothing until those come back.
        // Asked only for shards with a window to write, so an idle
        // collector sends no requests.
        let now = now_ms(start);
        let lateness = opts.lateness.as_millis() as u64;
        let ready = book.shards_ready(&probes, now, lateness);
        // The drain above stops at the first empty or failed fetch, which
        // does not prove the consumer empty: see shard_waits for what
        // the stream's last sequence, read after the watermarks, decides.
        let covered = if ready.is_empty() {
            None
        } else {
            match nats.stream_last_sequence().await {
                Ok(last) => Some(last),
                Err(e) => {
                    transient(&e, opts);
                    None
                }
            }
        };
        // Each ready shard's consumer, as the server sees it, and what is
        // held here; a shard missing from this map (its consumer could
        // not be asked) writes nothing this round.
        // Asked together: one round trip for all, not one a shard.
        let infos = futures_util::future::join_all(ready.into_iter().filter_map(|s| {
            let c = opts
                .shards
                .iter()
                .position(|&o| o == s)
                .and_then(|i| consumers.get(i))?;
            Some(async move { (s, c.get_info().await) })
        }))
        .await;
        let mut views: HashMap<u32, (ConsumerView, u64)> = HashMap::new();
        for (s, info) in infos {
            let held = book.held_distinct(s, stream_sequence);
            match info {
                Ok(info) => {
                    if info.num_ack_pending > held {
                        if !warned_elsewhere.contains(&s) {
                            eprintln!(
                                "collect: shard {s}: {} digests delivered but not acknowledged are not here (a crashed collector's, redelivered within {:?}; or another collector owns this shard too); its windows wait for them",
                                info.num_ack_pending - held,
                                ACK_WAIT
                            );
                            warned_elsewhere.push(s);
                        }
                    } else {
                        warned_elsewhere.retain(|&w| w != s);
                    }
                    let view = ConsumerView {
                        ack_pending: info.num_ack_pending as u64,
                        undelivered: info.num_pending,
                        delivered_through: info.delivered.stream_sequence,
                    };
                    views.insert(s, (view, held as u64));
                }
                Err(e) => transient(&transport::nats_err("consumer info")(&e), opts),
            }
        }
        // A window waits for the stream's last sequence unless its probes'
        // spans bound its digests tighter (see Book::stored_bound): after
        // a long replay the front windows are written as the drain reaches
        // them, not after the whole backlog.
        let waits = |s: u32, bound: Option<u64>| {
            let Some(&(view, held)) = views.get(&s) else {
                return true;
            };
            let through = match (bound, covered) {
                (Some(b), Some(c)) => Some(b.min(c)),
                (Some(b), None) => Some(b),
                (None, c) => c,
            };
            shard_waits(view, held, through)
        };
        let ready = book.ready_unless(&probes, now, lateness, waits);
        stalled = opts
            .shards
            .iter()
            .copied()
            .filter(|&s| book.held(s) >= DRAIN_HELD_MAX && !ready.iter().any(|(r, _)| r.shard == s))
            .collect();
        if !write_results(&nats, &results, ready, &mut written, summary, opts, stop).await? {
            break;
        }
        if stop() {
            break;
        }
        if let Some(idle) = opts.exit_when_done {
            let all_done = probes.len() >= cfg.probes as usize && probes.iter().all(|p| p.finished);
            if all_done
                && book.pending() == 0
                && last_message.elapsed() >= idle
                && consumers_empty(&consumers, opts).await
            {
                break;
            }
        }
        if got == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // A clean end says so, so that `results` tells a stopped collector
    // from a silent one. (One that fails, or is killed, writes nothing:
    // its beats age into silence.)
    // A shard another collector took over keeps that one's beat.
    beat.beat_ms = unix_ms();
    beat.stopped = true;
    write_beats(&nats, &beats, &beat, &mut revisions, opts).await;
    Ok(())
}

/// Writes `beat` under each shard of `revisions` whose stored beat is
/// still at the revision there (this collector's last, or the one it read
/// before its first), and records the new revision. Returns the shards
/// whose beat another collector wrote instead, with that beat and its
/// revision, unwritten.
///
/// A write that failed is retried at the next beat (`results` takes a
/// collector for silent only after SILENT_AFTER_BEATS periods). One that
/// landed though its answer was lost leaves this collector's own beat
/// at a revision it does not know: the next write finds it changed, reads
/// it, sees its own name and takes the revision.
async fn write_beats(
    nats: &Nats,
    store: &kv::Store,
    beat: &CollectorBeat,
    revisions: &mut HashMap<u32, Option<u64>>,
    opts: &CollectOptions,
) -> Vec<(u32, CollectorBeat, u64)> {
    let encoded = match transport::encode_beat(beat) {
        Ok(b) => b,
        Err(e) => {
            transient(&e, opts);
            return Vec::new();
        }
    };
    let writes = futures_util::future::join_all(opts.shards.iter().map(|&s| {
        let last = revisions.get(&s).copied().flatten();
        let encoded = encoded.clone();
        async move { (s, nats.beat_if_unchanged(store, encoded, s, last).await) }
    }))
    .await;
    let mut changed = Vec::new();
    for (s, write) in writes {
        match write {
            Ok(transport::BeatWrite::Written(r)) => {
                revisions.insert(s, Some(r));
            }
            Ok(transport::BeatWrite::Changed) => changed.push(s),
            Err(e) => transient(&e, opts),
        }
    }
    if changed.is_empty() {
        return Vec::new();
    }
    let stored = match nats.beats_of(store, &changed).await {
        Ok(b) => b,
        Err(e) => {
            transient(&e, opts);
            return Vec::new();
        }
    };
    let mut others = Vec::new();
    for (s, stored_beat, r) in stored {
        if stored_beat.collector == beat.collector {
            revisions.insert(s, Some(r));
        } else {
            others.push((s, stored_beat, r));
        }
    }
    others
}

/// Refuses, with [`NetError::ShardsTaken`], the shards of `found` (their
/// stored beats) whose collector is another one, still running
/// ([`super::collector_beat::taken_shards`]); with `take_over`, warns of
/// them on one line and takes them.
fn refuse_taken(
    found: &[(u32, CollectorBeat, u64)],
    me: &str,
    take_over: bool,
) -> Result<(), NetError> {
    let now = unix_ms();
    let host = host_name();
    let taken = super::collector_beat::taken_shards(
        found.iter().map(|(s, b, _)| (*s, b)),
        me,
        now,
        |beat| beat.ended_on(&host, process_at),
    );
    if taken.is_empty() {
        return Ok(());
    }
    // Each collector on one piece: its shards, then what the line says of
    // them, then its name and last beat.
    let each = |says: &str| -> String {
        let pieces: Vec<String> = taken
            .iter()
            .map(|(b, shards)| {
                format!(
                    "shard(s) {} {says} {} (last beat {:.1} s ago, every {} s)",
                    shard_list(shards),
                    b.collector,
                    b.age_ms(now) as f64 / 1e3,
                    b.every_ms as f64 / 1e3
                )
            })
            .collect();
        pieces.join("; ")
    };
    if take_over {
        eprintln!(
            "flowsieve: warning: collect: taking over {}, which counts as running (--take-over): if it still runs, it stops at its next beat, and until then the two split those shards' digests",
            each("from")
        );
        return Ok(());
    }
    Err(NetError::ShardsTaken(format!(
        "{}: two collectors of one shard split its digests, and each writes its windows partial; stop that one, or give --shards without those (a collector killed on another host counts as running until {} periods after its last beat; --take-over takes its shards at once)",
        each("already have a running collector,"),
        super::collector_beat::SILENT_AFTER_BEATS
    )))
}

/// The error of a running collector whose shards' beats another
/// collector wrote (`changed`, from [`write_beats`]): that one took them
/// over, most likely while this one was cut off from the server long
/// enough to look silent.
fn taken_over(changed: &[(u32, CollectorBeat, u64)]) -> NetError {
    let by = super::uncollected_shard::shards_by(changed.iter().map(|(s, b, _)| (*s, b)), |b| {
        b.collector.clone()
    });
    let each: Vec<String> = by
        .iter()
        .map(|(b, shards)| format!("shard(s) {} by {}", shard_list(shards), b.collector))
        .collect();
    NetError::TakenOver(format!(
        "{} were taken over (their beats are that collector's now): this collector stops, so that each shard has one collector; the digests it held unwritten go to that one within {ACK_WAIT:?}",
        each.join("; ")
    ))
}

/// Unix time in milliseconds, on this machine's clock (0 before 1970).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis().try_into().unwrap_or(u64::MAX))
}

/// This machine's host name (`?` where it cannot be read), which names a
/// collector in its beats with its process id.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "?".into())
}

/// What a collector keeps of a written shard-window.
struct WrittenWindow {
    /// The probes merged into it.
    probes: Vec<String>,
    /// Whether it was written partial (some probes missing).
    partial: bool,
}

impl WrittenWindow {
    fn of(r: &ShardWindowResult) -> Self {
        WrittenWindow {
            probes: r.probes.clone(),
            partial: r.partial,
        }
    }
}

/// The stream sequence of a delivered message: what tells a message
/// delivered twice from two messages (see [`Book::held_distinct`]).
fn stream_sequence(m: &Message) -> Option<u64> {
    m.info().ok().map(|i| i.stream_sequence)
}

/// Whether the server says every one of `consumers` has nothing left:
/// no digest undelivered and none delivered but unacknowledged. What
/// `--exit-when-done` waits for besides its quiet spell, since neither an
/// empty drain nor the quiet proves it: a fetch can expire with digests
/// still in the stream (under load, or from a consumer just created), and
/// a crashed predecessor's digests come back only after [`ACK_WAIT`].
/// A consumer that cannot be asked counts as not empty.
async fn consumers_empty(consumers: &[consumer::PullConsumer], opts: &CollectOptions) -> bool {
    let infos = futures_util::future::join_all(consumers.iter().map(|c| c.get_info())).await;
    infos.into_iter().all(|info| match info {
        Ok(info) => info.num_pending == 0 && info.num_ack_pending == 0,
        Err(e) => {
            transient(&transport::nats_err("consumer info")(&e), opts);
            false
        }
    })
}

/// One fetch of up to `max` digests from consumer `c` (the `i`-th),
/// gathered; `None` when the fetch failed (the shard then leaves this
/// round's drain, as at an empty fetch).
async fn fetch_batch(
    c: &consumer::PullConsumer,
    max: usize,
    opts: &CollectOptions,
    i: usize,
) -> (usize, Option<Vec<Message>>) {
    let batch = c
        .fetch()
        .max_messages(max)
        .expires(Duration::from_millis(50))
        .messages()
        .await;
    let mut batch = match batch {
        Ok(b) => b,
        Err(e) => {
            transient(&transport::nats_err("fetch")(&e), opts);
            return (i, None);
        }
    };
    let mut got = Vec::with_capacity(max);
    while let Some(m) = batch.next().await {
        if let Ok(m) = m {
            got.push(m);
        }
    }
    (i, Some(got))
}

/// The digest a message carries (from the object store when the message
/// names one), or `None` when it was refused: damaged, or its object is
/// gone. A refused message is terminated so that it never comes back.
async fn decode(
    nats: &Nats,
    summary: &mut CollectSummary,
    mut m: Message,
    opts: &CollectOptions,
) -> Option<(Digest, Message)> {
    // A digest over the message limit is in the object store; the message
    // names it.
    let object = m
        .headers
        .as_ref()
        .and_then(|h| h.get(transport::OBJECT_HEADER))
        .map(|v| v.as_str().to_string());
    let stored;
    let payload: &[u8] = match &object {
        None => &m.payload,
        Some(name) => loop {
            match nats.digest_object(name).await {
                Ok(Some(bytes)) => {
                    summary.objects += 1;
                    stored = bytes;
                    break &stored;
                }
                Ok(None) => {
                    eprintln!(
                        "collect: {}: refused: its digest object '{name}' is not in the {} bucket",
                        m.subject,
                        transport::DIGESTS_BUCKET
                    );
                    summary.rejected += 1;
                    let _ = m.ack_with(AckKind::Term).await;
                    return None;
                }
                Err(e) => {
                    transient(&e, opts);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        },
    };
    let d = match Digest::decode(payload) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("collect: {}: refused: {e}", m.subject);
            summary.rejected += 1;
            let _ = m.ack_with(AckKind::Term).await;
            return None;
        }
    };
    // The message is kept only to be acknowledged once its window is
    // written. Its payload is a slice of the client's read buffer
    // (async-nats splits it off, sharing the allocation), and keeping the
    // slice would keep that whole buffer for as long as the window waits.
    m.message.payload = Default::default();
    Some((d, m))
}

/// Reads from the results bucket whether the windows of `digests` that are
/// neither in progress here nor known written were written (by a
/// predecessor, before a restart), and notes those that were in
/// `written`. Only the first digest of a window asks; the reads of one
/// fetch go out together, [`IN_FLIGHT`] at a time, so a backlog of
/// nearly empty windows is not paced by one round trip each. A read that
/// fails is retried until it answers: a window must not be merged again
/// over a result it has.
///
/// Returns the results read, with their revisions, for this fetch only:
/// a late digest's note starts from its window's ([`note_late`]) rather
/// than reading it a second time.
async fn look_up_written(
    results: &kv::Store,
    book: &Book<Message>,
    written: &mut HashMap<(u64, u32), WrittenWindow>,
    digests: &[(Digest, Message)],
    opts: &CollectOptions,
) -> HashMap<(u64, u32), StoredResult> {
    let mut keys: Vec<(u64, u32)> = digests
        .iter()
        .map(|(d, _)| (d.window, d.shard))
        .filter(|&(w, s)| !written.contains_key(&(w, s)) && !book.is_pending(w, s))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let found: Vec<_> = futures_util::stream::iter(keys.into_iter().map(|(w, s)| async move {
        loop {
            match transport::read_result(results, w, s).await {
                Ok(r) => return ((w, s), r),
                Err(e) => {
                    transient(&e, opts);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }))
    .buffer_unordered(IN_FLIGHT)
    .collect()
    .await;
    let mut fresh = HashMap::new();
    for (key, r) in found {
        if let Some(r) = r {
            written.insert(key, WrittenWindow::of(&r.result));
            fresh.insert(key, r);
        }
    }
    fresh
}

/// Offers a decoded digest to the book (its window's result, if written,
/// is in `written` already, and in `fresh` if this fetch read it:
/// [`look_up_written`]). A digest the book gives back (a duplicate, a late
/// or a refused one) is returned, to be acknowledged by [`settle`] with
/// the others of its fetch; a late one takes its window's result from
/// `fresh`, so that noting it starts from that read.
#[allow(clippy::too_many_arguments)]
fn offer(
    book: &mut Book<Message>,
    written: &HashMap<(u64, u32), WrittenWindow>,
    fresh: &mut HashMap<(u64, u32), StoredResult>,
    summary: &mut CollectSummary,
    d: &Digest,
    m: Message,
    now: u64,
    opts: &CollectOptions,
) -> Option<GivenBack> {
    let key = (d.window, d.shard);
    // For the verbose line only: which delivery of which message it was.
    let delivery = opts
        .verbose
        .then(|| m.info().ok().map(|i| (i.stream_sequence, i.delivered)))
        .flatten();
    let was_written = written.get(&key);
    let (verdict, back) = book.offer(d, m, now, was_written.map(|w| w.probes.as_slice()));
    match &verdict {
        Verdict::Merged => summary.merged += 1,
        Verdict::Duplicate { .. } => summary.duplicates += 1,
        Verdict::Late => summary.late += 1,
        Verdict::NotMine => {}
        Verdict::Rejected(e) => {
            eprintln!("collect: digest refused: {e}");
            summary.rejected += 1;
        }
    }
    if opts.verbose
        && let Verdict::Duplicate { .. } | Verdict::Late = verdict
    {
        let (sequence, delivery) = delivery.unwrap_or_default();
        eprintln!(
            "collect: window {} shard {} probe {}: {:?} (stream sequence {sequence}, delivery {delivery}), not merged",
            d.window, d.shard, d.probe, verdict
        );
    }
    let message = back?;
    let late = match (&verdict, was_written) {
        (Verdict::Late, Some(w)) => Some(LateDigest {
            window: d.window,
            shard: d.shard,
            probe: d.probe.clone(),
            written_complete_from: (!w.partial).then(|| w.probes.join(",")),
            read: fresh.remove(&key),
        }),
        _ => None,
    };
    Some(GivenBack {
        message,
        refused: matches!(verdict, Verdict::Rejected(_)),
        late,
    })
}

/// A digest the book gave back, to be acknowledged.
struct GivenBack {
    message: Message,
    /// Refused: acknowledged as terminated, never to be redelivered.
    refused: bool,
    /// Late for a written window: its probe is noted in the window's
    /// stored result first ([`note_late`]).
    late: Option<LateDigest>,
}

/// A digest that came after its shard-window was written.
struct LateDigest {
    window: u64,
    shard: u32,
    probe: String,
    /// The window's probes, when it was written complete.
    written_complete_from: Option<String>,
    /// The window's result as this fetch read it, if it did: the first
    /// late digest of a window in a fetch takes it, and the others read
    /// the result afresh.
    read: Option<StoredResult>,
}

/// How many windows written complete that then got a late digest the
/// collector names on stderr one by one without `-v`; one line says the
/// rest are not listed.
const LATE_WARNINGS_LISTED: u64 = 20;

/// Acknowledges the digests the book gave back in one fetch, [`IN_FLIGHT`]
/// at a time: a late one after its probe is noted in its window's stored
/// result, so that the result says what it lacks before the digest is
/// gone. One request after another, a backlog of late digests (a probe
/// back after an outage longer than `--lateness`) was paced by three
/// round trips each.
async fn settle(
    results: &kv::Store,
    given_back: Vec<GivenBack>,
    opts: &CollectOptions,
    stop: &(dyn Fn() -> bool + Sync),
    late_warnings: &AtomicU64,
) {
    futures_util::stream::iter(given_back.into_iter().map(|mut g| async move {
        if let Some(l) = g.late.as_mut() {
            let noted = note_late(results, l, opts, stop).await;
            if noted == LateNote::Stopped {
                // Not acknowledged: the digest goes to whoever runs next,
                // who notes it.
                return;
            }
            // A late digest for a window written partial is what partial
            // announced. One for a window written complete means that
            // result lacks it: said whether or not -v is on, once (a
            // digest delivered again, already noted, says nothing).
            // Past LATE_WARNINGS_LISTED (without -v) one line says the
            // rest are not listed: a fault such as two collectors owning a
            // shard makes one per shard-window, thousands an hour.
            if let Some(probes) = &l.written_complete_from
                && noted != LateNote::AlreadyNoted
            {
                let n = late_warnings.fetch_add(1, Ordering::Relaxed);
                if opts.verbose || n < LATE_WARNINGS_LISTED {
                    eprintln!(
                        "collect: warning: window {} shard {} was written complete from probes {probes}, but probe {}'s digest came after it: that result lacks it, and now lists it as late (two collectors owning one shard?)",
                        l.window, l.shard, l.probe
                    );
                } else if n == LATE_WARNINGS_LISTED {
                    eprintln!(
                        "collect: warning: more windows written complete lack a late digest; they are not listed one by one (-v lists each): `flowsieve results` names each window's late probes, and the summary line counts the late digests"
                    );
                }
            }
        }
        let r = if g.refused {
            g.message.ack_with(AckKind::Term).await
        } else {
            g.message.double_ack().await
        };
        if let Err(e) = r {
            transient(&transport::nats_err("acknowledge")(&e), opts);
        }
    }))
    .buffer_unordered(IN_FLIGHT)
    .collect::<Vec<()>>()
    .await;
}

/// What came of noting a late digest in its window's stored result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LateNote {
    /// Its probe is now listed as late.
    Noted,
    /// Its probe was listed already (a digest delivered again).
    AlreadyNoted,
    /// The result is not in the bucket, or cannot be read: said on
    /// stderr.
    NotNoted,
    /// `stop` said so while the bucket did not answer.
    Stopped,
}

/// Notes a late digest's probe in its window's stored result
/// ([`transport::note_late_result`]), retrying a request that fails until
/// it answers or `stop` says so.
async fn note_late(
    results: &kv::Store,
    d: &mut LateDigest,
    opts: &CollectOptions,
    stop: &(dyn Fn() -> bool + Sync),
) -> LateNote {
    loop {
        let read = d.read.take();
        match transport::note_late_result(results, d.window, d.shard, &d.probe, read).await {
            Ok(Some((_, true))) => return LateNote::Noted,
            Ok(Some((_, false))) => return LateNote::AlreadyNoted,
            Ok(None) => {
                eprintln!(
                    "collect: warning: window {} shard {}: probe {}'s digest came after the window was written, but its result is not in the {RESULTS_BUCKET} bucket to note it in",
                    d.window, d.shard, d.probe
                );
                return LateNote::NotNoted;
            }
            Err(e @ NetError::Stored { .. }) => {
                eprintln!(
                    "collect: warning: {e}; probe {}'s late digest is not noted in it",
                    d.probe
                );
                return LateNote::NotNoted;
            }
            Err(e) => {
                transient(&e, opts);
                if stop() {
                    return LateNote::Stopped;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Writes the round's finished shard-windows: each result to the bucket,
/// then to its subject, then its digests' acknowledgements (a crash before
/// an acknowledgement redelivers the digests, which find the result
/// written). The writes go out together, [`IN_FLIGHT`] at a time, and so
/// do the acknowledgements; the subject sees the results in the book's
/// order. Returns `false` when `stop` said so while a write was failing:
/// the windows not written are left to be redelivered.
async fn write_results(
    nats: &Nats,
    results: &kv::Store,
    ready: Vec<(ShardWindowResult, Vec<Message>)>,
    written: &mut HashMap<(u64, u32), WrittenWindow>,
    summary: &mut CollectSummary,
    opts: &CollectOptions,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<bool, NetError> {
    let mut encoded = Vec::with_capacity(ready.len());
    for (r, tokens) in ready {
        let bytes: bytes::Bytes = serde_json::to_vec(&r)
            .map_err(|e| transport::nats_err("encode result")(&e))?
            .into();
        encoded.push((r, tokens, bytes));
    }
    let stored: Vec<bool> =
        futures_util::stream::iter(encoded.iter().map(|(r, _, bytes)| async move {
            let key = result_key(r.window, r.shard);
            loop {
                match results.put(key.as_str(), bytes.clone()).await {
                    Ok(_) => return true,
                    Err(e) => {
                        transient(&transport::nats_err("write result")(&e), opts);
                        if stop() {
                            return false;
                        }
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        }))
        .buffered(IN_FLIGHT)
        .collect()
        .await;
    let mut acks = Vec::new();
    for ((r, tokens, bytes), stored) in encoded.into_iter().zip(&stored) {
        if !stored {
            continue;
        }
        let _ = nats
            .client
            .publish(result_subject(r.window, r.shard), bytes)
            .await;
        // Only now: a crash before this line redelivers the digests,
        // which merge to the same result (or find it written).
        acks.extend(tokens);
        summary.written += 1;
        summary.partial += u64::from(r.partial);
        if opts.verbose {
            eprintln!(
                "collect: window {} shard {}: {} probes, {} packets, {} heavy{}",
                r.window,
                r.shard,
                r.probes.len(),
                r.packets,
                r.heavy.len(),
                if r.partial { " (partial)" } else { "" }
            );
        }
        written.insert((r.window, r.shard), WrittenWindow::of(&r));
    }
    // An acknowledgement that does not arrive leaves the digest to be
    // redelivered, found written, and acknowledged then.
    futures_util::stream::iter(acks.into_iter().map(|m| async move {
        if let Err(e) = m.double_ack().await {
            transient(&transport::nats_err("acknowledge")(&e), opts);
        }
    }))
    .buffer_unordered(IN_FLIGHT)
    .collect::<Vec<()>>()
    .await;
    Ok(stored.iter().all(|&s| s))
}

/// A request that failed but will be retried.
fn transient(e: &NetError, opts: &CollectOptions) {
    if opts.verbose {
        eprintln!("collect: {e}; retrying");
    }
}
