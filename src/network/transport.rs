//! The NATS side shared by probe, collector and results: connection, the
//! stream and buckets, subjects and keys, the shared configuration and
//! the probes' states. Everything here runs on the caller's tokio
//! runtime; nothing on the packet path calls it.

use super::book::ProbeState;
use super::collector_beat::{CollectorBeat, beat_key, shard_of_key};
use super::config::{CONFIG_KEY, NetworkConfig};
use super::merge::ShardWindowResult;
use super::uncollected_shard::UncollectedShard;
use super::unmerged_shard::UnmergedShard;
use async_nats::jetstream::{self, kv, object_store, stream};
use futures_util::StreamExt;
use std::time::Duration;

/// The stream holding the digests.
pub const STREAM: &str = "FLOWSIEVE";
/// The bucket of the shared configuration.
pub const CONFIG_BUCKET: &str = "flowsieve-config";
/// The bucket of the probes' registrations and watermarks.
pub const PROBES_BUCKET: &str = "flowsieve-probes";
/// The bucket of merged shard-windows.
pub const RESULTS_BUCKET: &str = "flowsieve-results";
/// The bucket of the collectors' beats, one key a shard
/// ([`super::collector_beat`]).
pub const COLLECTORS_BUCKET: &str = "flowsieve-collectors";
/// How long the stream remembers message ids (re-sends within it are
/// dropped by the server; later ones by the collector's results check).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// The largest message the stream takes. A digest larger than the
/// message limit ([`Nats::message_limit`]) goes to [`DIGESTS_BUCKET`]
/// instead, and the stream carries a pointer to it.
pub const MAX_MESSAGE_BYTES: i32 = 8 << 20;
/// The object store bucket of digests too large for one message.
pub const DIGESTS_BUCKET: &str = "flowsieve-digests";
/// The header of a digest message whose digest is in [`DIGESTS_BUCKET`]:
/// its value is the object's name (the message id), and the message has
/// no payload.
pub const OBJECT_HEADER: &str = "Flowsieve-Object";
/// Bytes a digest message needs beside its payload (subject, headers,
/// protocol line), kept free under the server's limit.
const MESSAGE_OVERHEAD: usize = 1024;
/// The largest chunk of a stored object (async-nats' default).
const OBJECT_CHUNK_BYTES: usize = 128 << 10;
/// nats-server's `max_payload` when its configuration does not set one.
const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;

/// Why a network operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The server could not be reached or refused.
    #[error("NATS {what}: {detail}")]
    Nats {
        /// What was being done.
        what: &'static str,
        /// What the client said.
        detail: String,
    },
    /// The shared configuration differs from this process's.
    #[error("the shared configuration differs: {0}")]
    Config(String),
    /// As many probes as the shared configuration declares already report
    /// the windows this probe would ([`super::book::probes_beside`]).
    #[error(
        "the shared configuration declares {declared} probe{}, and {} already report{} these windows: one more would break the candidate bound ceil(theta/P), so a heavy flow split over the probes could be missed; run a probe again under its own id, or declare every probe of the network with --probes on a fresh server",
        if *declared == 1 { "" } else { "s" },
        beside.join(", "),
        if beside.len() == 1 { "s" } else { "" }
    )]
    TooManyProbes {
        /// The shared configuration's `probes`.
        declared: u32,
        /// The registered probes already reporting those windows.
        beside: Vec<String>,
    },
    /// Another collector runs for shards this one was to own
    /// ([`super::collector_beat::taken_shards`]).
    #[error("{0}")]
    ShardsTaken(String),
    /// Another collector took over shards this running one owned: their
    /// beats are that one's now.
    #[error("{0}")]
    TakenOver(String),
    /// A stored value could not be read.
    #[error("stored {what} {key}: {detail}")]
    Stored {
        /// Which value.
        what: &'static str,
        /// Its key.
        key: String,
        /// What is wrong.
        detail: String,
    },
}

pub(crate) fn nats_err(what: &'static str) -> impl Fn(&dyn std::fmt::Display) -> NetError {
    move |e| NetError::Nats {
        what,
        detail: e.to_string(),
    }
}

/// The subject of a digest.
pub fn digest_subject(shard: u32, window: u64, probe: &str) -> String {
    format!("flowsieve.v1.digest.{shard}.{window}.{probe}")
}

/// The subject a collector's consumer for `shard` filters on.
pub fn shard_filter(shard: u32) -> String {
    format!("flowsieve.v1.digest.{shard}.>")
}

/// The message id of a digest: the same on every re-send.
pub fn digest_msg_id(probe: &str, shard: u32, window: u64) -> String {
    format!("{probe}.{shard}.{window}")
}

/// The results key of a shard-window (zero-padded, so keys sort by
/// window then shard).
pub fn result_key(window: u64, shard: u32) -> String {
    format!("w{window:020}.s{shard:05}")
}

/// The subject live subscribers get each result on.
pub fn result_subject(window: u64, shard: u32) -> String {
    format!("flowsieve.v1.result.{window}.{shard}")
}

/// Checks a probe id: 1 to 64 of `A-Z a-z 0-9 _ -` (it is a subject
/// token and a key).
pub fn check_probe_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > super::digest::MAX_PROBE_ID {
        return Err(format!(
            "probe id '{id}' must be 1 to {} characters",
            super::digest::MAX_PROBE_ID
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "probe id '{id}' has '{c}': only letters, digits, '_' and '-' are allowed"
        ));
    }
    Ok(())
}

/// A connection with its JetStream context.
#[derive(Clone)]
pub struct Nats {
    /// The core client.
    pub client: async_nats::Client,
    /// JetStream.
    pub js: jetstream::Context,
    /// Timeout of one server request (also the longest wait for the next
    /// message of a bucket read).
    timeout: Duration,
}

/// How long the client waits before its `attempts`-th try to connect
/// (async-nats numbers the first try 1): none before the first, so that
/// a reachable server answers at once, then 100 ms more per failed try,
/// up to a second.
///
/// ```
/// use flowsieve::network::transport::reconnect_delay;
/// use std::time::Duration;
/// assert_eq!(reconnect_delay(1), Duration::ZERO);
/// assert_eq!(reconnect_delay(3), Duration::from_millis(200));
/// assert_eq!(reconnect_delay(usize::MAX), Duration::from_secs(1));
/// ```
pub fn reconnect_delay(attempts: usize) -> Duration {
    let failures = attempts.saturating_sub(1) as u64;
    Duration::from_millis(failures.saturating_mul(100).min(1000))
}

/// The servers a `--nats` value names: one URL, or several separated by
/// commas (as the `nats` command line takes them), each `nats://`,
/// `tls://`, `ws://` or `wss://` with a host (`nats://` and port 4222 when
/// left out). The client tries them in turn and learns a cluster's other
/// nodes from the one it reaches, so one is enough while it is up.
///
/// Checked where the flag is read, so a value that names no server ends
/// the run with exit 2 before any work, instead of a name lookup of `""`
/// or a connection to the "address" a bare number makes.
///
/// ```
/// use flowsieve::network::transport::server_addrs;
/// let two = server_addrs("nats://127.0.0.1:4222, 127.0.0.1:4223").unwrap();
/// assert_eq!(two.len(), 2);
/// assert_eq!((two[1].host(), two[1].port()), ("127.0.0.1", 4223));
/// assert!(server_addrs("http://127.0.0.1:4222").unwrap_err().contains("scheme"));
/// assert!(server_addrs("nats://").unwrap_err().contains("no host"));
/// assert!(server_addrs("nats://127.0.0.1:99999").is_err());
/// assert!(server_addrs("nats://a,,nats://b").unwrap_err().contains("empty"));
/// // A port alone, or a list's later ports, would name hosts 4222, 4223.
/// assert!(server_addrs("4222").unwrap_err().contains("127.0.0.1:4222"));
/// assert!(server_addrs("127.0.0.1:4222,4223").unwrap_err().contains("host 4223"));
/// assert!(server_addrs("nats://5:4222").unwrap_err().ends_with("such as 127.0.0.1:4222"));
/// assert!(server_addrs("nats://10.1.2.3:4222").is_ok());
/// ```
pub fn server_addrs(list: &str) -> Result<Vec<async_nats::ServerAddr>, String> {
    list.split(',')
        .map(|one| {
            let one = one.trim();
            if one.is_empty() {
                return Err(format!(
                    "'{list}' has an empty server: give nats://HOST:PORT, or several separated by commas"
                ));
            }
            let addr: async_nats::ServerAddr = one
                .parse()
                .map_err(|e: std::io::Error| format!("'{one}': {e}"))?;
            if addr.host().is_empty() {
                return Err(format!("'{one}' has no host: give nats://HOST:PORT"));
            }
            // A host of digits alone is a port typed without its host
            // (`--nats 4222`), or a comma-separated list's later ports
            // (`127.0.0.1:4222,4223`). The resolver reads such a name as
            // an IPv4 address in the old one-number form, 4222 as
            // 0.0.16.126, and the client would send its connection there,
            // off the machine, to wait out the timeout for a server that no
            // such address has.
            if addr.host().bytes().all(|b| b.is_ascii_digit()) {
                // The port to suggest: the one given, or, with none, the
                // digits themselves, which were the port meant.
                let rest = one.split_once("://").map_or(one, |(_, rest)| rest);
                let port = if rest.contains(':') {
                    addr.port().to_string()
                } else {
                    addr.host().to_string()
                };
                return Err(format!(
                    "'{one}' names the host {host}: digits alone are read as an IPv4 number, not a server's name; give HOST:PORT, such as 127.0.0.1:{port}",
                    host = addr.host()
                ));
            }
            Ok(addr)
        })
        .collect()
}

/// A collector's beat as it is stored, once for all its shards.
pub fn encode_beat(beat: &CollectorBeat) -> Result<bytes::Bytes, NetError> {
    Ok(serde_json::to_vec(beat)
        .map_err(|e| nats_err("encode beat")(&e))?
        .into())
}

/// What [`Nats::beat_if_unchanged`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BeatWrite {
    /// The beat was written, at this revision.
    Written(u64),
    /// The stored beat was not the one expected: it was not written.
    Changed,
}

/// Connects to the servers `url` names ([`server_addrs`]). With `retry`,
/// returns at once and keeps trying in the background (a probe starts
/// monitoring whether or not the server is up); without, fails after
/// `timeout`.
pub async fn connect(
    url: &str,
    name: &str,
    retry: bool,
    timeout: Duration,
) -> Result<Nats, NetError> {
    let mut opts = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(timeout)
        .request_timeout(Some(timeout))
        // Called before every try, the first included (see the function).
        .reconnect_delay_callback(reconnect_delay);
    if retry {
        opts = opts.retry_on_initial_connect();
    }
    let servers = server_addrs(url).map_err(|detail| NetError::Nats {
        what: "connect",
        detail,
    })?;
    let client = if retry {
        opts.connect(servers).await
    } else {
        tokio::time::timeout(timeout, opts.connect(servers))
            .await
            .map_err(|_| NetError::Nats {
                what: "connect",
                detail: format!("no answer from {url} within {timeout:?}"),
            })?
    }
    // The error names the servers: with several given, or a mistyped
    // port, "Connection refused" alone does not say which.
    .map_err(|e| NetError::Nats {
        what: "connect",
        detail: format!("{url}: {e}"),
    })?;
    let mut js = jetstream::new(client.clone());
    js.set_timeout(timeout);
    Ok(Nats {
        client,
        js,
        timeout,
    })
}

impl Nats {
    /// Creates the stream and buckets where missing, with `replicas`
    /// copies each.
    pub async fn ensure(&self, replicas: usize) -> Result<(), NetError> {
        self.js
            .get_or_create_stream(stream::Config {
                name: STREAM.into(),
                subjects: vec!["flowsieve.v1.digest.>".into()],
                duplicate_window: DUPLICATE_WINDOW,
                num_replicas: replicas,
                max_message_size: MAX_MESSAGE_BYTES,
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .map_err(|e| nats_err("create stream")(&e))?;
        for bucket in [
            CONFIG_BUCKET,
            PROBES_BUCKET,
            RESULTS_BUCKET,
            COLLECTORS_BUCKET,
        ] {
            self.bucket_or_create(bucket, replicas).await?;
        }
        if self.js.get_object_store(DIGESTS_BUCKET).await.is_err() {
            self.js
                .create_object_store(object_store::Config {
                    bucket: DIGESTS_BUCKET.into(),
                    description: Some("flowsieve digests over the message limit".into()),
                    num_replicas: replicas,
                    storage: stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|e| nats_err("create object store")(&e))?;
        }
        Ok(())
    }

    /// The largest digest sent as one message: the server's `max_payload`
    /// (1 MiB unless configured) less room for the subject and headers, at
    /// most [`MAX_MESSAGE_BYTES`] and at most `configured` (a probe's
    /// `--max-message`).
    pub fn message_limit(&self, configured: Option<usize>) -> usize {
        // 0 until the server has said (the client's default info): assume
        // nats-server's own default.
        let server = match self.client.server_info().max_payload {
            0 => DEFAULT_MAX_PAYLOAD,
            n => n,
        };
        let mut limit = server
            .saturating_sub(MESSAGE_OVERHEAD)
            .min(MAX_MESSAGE_BYTES as usize);
        if let Some(c) = configured {
            limit = limit.min(c);
        }
        limit
    }

    /// Stores a digest too large for one message under `name`, in chunks
    /// that fit the server's messages.
    pub async fn put_digest_object(&self, name: &str, bytes: &[u8]) -> Result<(), NetError> {
        let store = self
            .js
            .get_object_store(DIGESTS_BUCKET)
            .await
            .map_err(|e| nats_err("open object store")(&e))?;
        let chunk = self.message_limit(None).clamp(1024, OBJECT_CHUNK_BYTES);
        let meta = object_store::ObjectMetadata {
            name: name.into(),
            chunk_size: Some(chunk),
            ..Default::default()
        };
        let mut reader = bytes;
        store
            .put(meta, &mut reader)
            .await
            .map(|_| ())
            .map_err(|e| nats_err("store digest object")(&e))
    }

    /// A digest stored by [`Nats::put_digest_object`]; `None` when there
    /// is no such object.
    pub async fn digest_object(&self, name: &str) -> Result<Option<Vec<u8>>, NetError> {
        use tokio::io::AsyncReadExt;
        // No bucket (removed by an operator): no object either, which the
        // collector refuses rather than waiting for it forever.
        let store = match self.js.get_object_store(DIGESTS_BUCKET).await {
            Ok(s) => s,
            Err(e) if e.to_string().contains("not found") => return Ok(None),
            Err(e) => return Err(nats_err("open object store")(&e)),
        };
        let mut object = match store.get(name).await {
            Ok(o) => o,
            Err(e) if e.kind() == object_store::GetErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(nats_err("read digest object")(&e)),
        };
        let mut out = Vec::new();
        object
            .read_to_end(&mut out)
            .await
            .map_err(|e| nats_err("read digest object")(&e))?;
        Ok(Some(out))
    }

    async fn bucket_or_create(&self, bucket: &str, replicas: usize) -> Result<kv::Store, NetError> {
        if let Ok(s) = self.js.get_key_value(bucket).await {
            return Ok(s);
        }
        // The bucket's stream, made the way the client's create_key_value
        // makes it. That call first asks for the account's limits, whose
        // answer the client cannot read from a nats-server 2.9 (Debian
        // 12's), and uses nothing from it for a bucket like these.
        let made = self
            .js
            .get_or_create_stream(stream::Config {
                name: format!("KV_{bucket}"),
                subjects: vec![format!("$KV.{bucket}.>")],
                max_messages_per_subject: 1,
                max_message_size: MAX_MESSAGE_BYTES,
                storage: stream::StorageType::File,
                allow_rollup: true,
                deny_delete: true,
                allow_direct: true,
                num_replicas: replicas,
                discard: stream::DiscardPolicy::New,
                ..Default::default()
            })
            .await;
        match made {
            Ok(_) => self.bucket(bucket).await,
            Err(e) => Err(nats_err("create bucket")(&e)),
        }
    }

    /// A bucket that [`Nats::ensure`] made.
    pub async fn bucket(&self, bucket: &str) -> Result<kv::Store, NetError> {
        self.js
            .get_key_value(bucket)
            .await
            .map_err(|e| nats_err("open bucket")(&e))
    }

    /// Writes `local` as the shared configuration if there is none;
    /// otherwise reads the shared one and refuses if it differs.
    pub async fn agree_config(&self, local: &NetworkConfig) -> Result<NetworkConfig, NetError> {
        let store = self.bucket(CONFIG_BUCKET).await?;
        let bytes = serde_json::to_vec(local).map_err(|e| nats_err("encode configuration")(&e))?;
        if store.create(CONFIG_KEY, bytes.into()).await.is_ok() {
            return Ok(local.clone());
        }
        let shared = self.shared_config().await?.ok_or(NetError::Nats {
            what: "read configuration",
            detail: "it exists but cannot be read".into(),
        })?;
        let diff = shared.differences(local);
        if !diff.is_empty() {
            let text: Vec<String> = diff.iter().map(|d| d.to_string()).collect();
            return Err(NetError::Config(text.join("; ")));
        }
        Ok(shared)
    }

    /// The shared configuration, if one was written.
    pub async fn shared_config(&self) -> Result<Option<NetworkConfig>, NetError> {
        // No bucket yet: no probe has written a configuration.
        let store = match self.js.get_key_value(CONFIG_BUCKET).await {
            Ok(s) => s,
            Err(e) if e.to_string().contains("not found") => return Ok(None),
            Err(e) => return Err(nats_err("open bucket")(&e)),
        };
        read_stored(&store, CONFIG_KEY, "configuration", "read configuration").await
    }

    /// The digest stream's last sequence: every digest stored so far is at
    /// or below it.
    pub async fn stream_last_sequence(&self) -> Result<u64, NetError> {
        let mut stream = self
            .js
            .get_stream(STREAM)
            .await
            .map_err(|e| nats_err("open stream")(&e))?;
        let info = stream
            .info()
            .await
            .map_err(|e| nats_err("stream info")(&e))?;
        Ok(info.state.last_sequence)
    }

    /// The digests below shard `shards` that no written window holds yet,
    /// from one look at the stream and its consumers, in ascending shard
    /// order:
    ///
    /// - the uncollected shards, which no collector has ever taken (the
    ///   stream has no durable consumer `collect-s<shard>` for them) but
    ///   for which the stream holds digests, with how many. Every shard a
    ///   collector has owned has its consumer, which outlives the
    ///   collector, so a shard is listed only while no `flowsieve collect`
    ///   has been started for it;
    /// - the unmerged shards, whose consumer still holds digests,
    ///   undelivered or handed out and not acknowledged (see
    ///   [`UnmergedShard`]).
    ///
    /// Shards with none of either are left out of both.
    pub async fn waiting_digests(
        &self,
        shards: u32,
    ) -> Result<(Vec<UncollectedShard>, Vec<UnmergedShard>), NetError> {
        let Ok(stream) = self.js.get_stream(STREAM).await else {
            // No stream: no probe has published, nothing waits.
            return Ok((Vec::new(), Vec::new()));
        };
        let mut names = std::collections::HashSet::new();
        let mut listed = stream.consumer_names();
        while let Some(name) = listed.next().await {
            names.insert(name.map_err(|e| nats_err("list consumers")(&e))?);
        }
        let (mut uncollected, mut unmerged) = (Vec::new(), Vec::new());
        for shard in 0..shards {
            let name = format!("collect-s{shard}");
            if names.contains(&name) {
                let info = stream
                    .consumer_info(&name)
                    .await
                    .map_err(|e| nats_err("consumer info")(&e))?;
                let s = UnmergedShard {
                    shard,
                    undelivered: info.num_pending,
                    unacknowledged: info.num_ack_pending as u64,
                };
                if s.digests() > 0 {
                    unmerged.push(s);
                }
                continue;
            }
            // One entry per digest subject (window and probe) of the shard.
            let mut subjects = stream
                .info_with_subjects(shard_filter(shard))
                .await
                .map_err(|e| nats_err("stream info")(&e))?;
            let mut digests = 0u64;
            while let Some(entry) = subjects.next().await {
                let (_, count) = entry.map_err(|e| nats_err("stream info")(&e))?;
                digests = digests.saturating_add(count as u64);
            }
            if digests > 0 {
                uncollected.push(UncollectedShard { shard, digests });
            }
        }
        Ok((uncollected, unmerged))
    }

    /// The beats stored under `shards` in the collectors bucket `store`,
    /// by shard, each with its revision; a shard with none is left out.
    pub async fn beats_of(
        &self,
        store: &kv::Store,
        shards: &[u32],
    ) -> Result<Vec<(u32, CollectorBeat, u64)>, NetError> {
        let got =
            futures_util::future::join_all(shards.iter().map(|&s| store.entry(beat_key(s)))).await;
        let mut out = Vec::new();
        for (&shard, entry) in shards.iter().zip(got) {
            let Some(entry) = entry.map_err(|e| nats_err("read beat")(&e))? else {
                continue;
            };
            if entry.operation != kv::Operation::Put {
                continue;
            }
            out.push((
                shard,
                decode_stored::<CollectorBeat>(&entry.value, "collector beat", &beat_key(shard))?,
                entry.revision,
            ));
        }
        Ok(out)
    }

    /// Writes a beat (`encoded` by [`encode_beat`]) under `shard` in the
    /// collectors bucket `store`, only if the beat stored there is still
    /// the one at revision `last` (`None`: there is none): a compare and
    /// set, so that of two collectors claiming one shard, one finds the
    /// other's beat instead of overwriting it.
    pub async fn beat_if_unchanged(
        &self,
        store: &kv::Store,
        encoded: bytes::Bytes,
        shard: u32,
        last: Option<u64>,
    ) -> Result<BeatWrite, NetError> {
        let key = beat_key(shard);
        match last {
            Some(revision) => match store.update(&key, encoded, revision).await {
                Ok(r) => Ok(BeatWrite::Written(r)),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    Ok(BeatWrite::Changed)
                }
                Err(e) => Err(nats_err("write beat")(&e)),
            },
            None => match store.create(&key, encoded).await {
                Ok(r) => Ok(BeatWrite::Written(r)),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(BeatWrite::Changed),
                Err(e) => Err(nats_err("write beat")(&e)),
            },
        }
    }

    /// Each shard's last collector beat, by shard; none where no
    /// collector of this version ever ran (no bucket yet).
    pub async fn collector_beats(&self) -> Result<Vec<(u32, CollectorBeat)>, NetError> {
        let store = match self.js.get_key_value(COLLECTORS_BUCKET).await {
            Ok(s) => s,
            Err(e) if e.to_string().contains("not found") => return Ok(Vec::new()),
            Err(e) => return Err(nats_err("open bucket")(&e)),
        };
        let mut out = Vec::new();
        for (key, v) in self.latest_values(&store, ">").await? {
            if let Some(shard) = shard_of_key(&key) {
                out.push((
                    shard,
                    decode_stored::<CollectorBeat>(&v, "collector beat", &key)?,
                ));
            }
        }
        out.sort_by_key(|(s, _)| *s);
        Ok(out)
    }

    /// Every registered probe's state, sorted by probe id.
    pub async fn probe_states(&self) -> Result<Vec<ProbeState>, NetError> {
        let store = self.bucket(PROBES_BUCKET).await?;
        let mut out = Vec::new();
        for (key, v) in self.latest_values(&store, ">").await? {
            out.push(decode_stored::<ProbeState>(&v, "probe state", &key)?);
        }
        out.sort_by(|a, b| a.probe.cmp(&b.probe));
        Ok(out)
    }

    /// Whether probe `me`, starting at window `from` (`None`: not known
    /// yet), has room in the network: fewer than the declared `probes`
    /// others already report beside it ([`super::book::probes_beside`]).
    ///
    /// Two probes that check at the same moment can both find room; the
    /// check is against a mistake (a probe started without `--probes`
    /// raised), not a race.
    pub async fn check_room(
        &self,
        cfg: &NetworkConfig,
        me: &str,
        from: Option<u64>,
    ) -> Result<(), NetError> {
        let beside = super::book::probes_beside(&self.probe_states().await?, me, from);
        if beside.len() >= cfg.probes as usize {
            return Err(NetError::TooManyProbes {
                declared: cfg.probes,
                beside,
            });
        }
        Ok(())
    }

    /// Every written shard-window result, by window then shard.
    pub async fn results(&self) -> Result<Vec<ShardWindowResult>, NetError> {
        self.results_under(&[">".to_string()]).await
    }

    /// The written results of window `window` and of the window before
    /// it, by window then shard: all that the report of one window reads
    /// (its new flows are counted against the window before).
    pub async fn results_near(&self, window: u64) -> Result<Vec<ShardWindowResult>, NetError> {
        let mut tails = vec![window_keys(window)];
        if let Some(before) = window.checked_sub(1) {
            tails.insert(0, window_keys(before));
        }
        self.results_under(&tails).await
    }

    /// The results under the key patterns `tails`, by window then shard.
    async fn results_under(&self, tails: &[String]) -> Result<Vec<ShardWindowResult>, NetError> {
        let store = self.bucket(RESULTS_BUCKET).await?;
        let mut out = Vec::new();
        for tail in tails {
            for (key, v) in self.latest_values(&store, tail).await? {
                out.push(decode_stored::<ShardWindowResult>(&v, "result", &key)?);
            }
        }
        out.sort_by_key(|r| (r.window, r.shard));
        Ok(out)
    }

    /// The latest value of every key of `store` that matches `tail` (a
    /// key, or a pattern such as `>`), deleted and purged keys left out.
    ///
    /// One pass of an ordered consumer that delivers the last message of
    /// each subject, where listing the keys and then a `get` a key took a
    /// round trip each (BENCHMARKS.md, "Network mode: a replay's windows,
    /// a collector's backlog and the results read"). It tries again a few
    /// times ([`KEY_LIST_TRIES`]) while a cluster that has just lost a node
    /// cannot create the consumer.
    async fn latest_values(
        &self,
        store: &kv::Store,
        tail: &str,
    ) -> Result<Vec<(String, bytes::Bytes)>, NetError> {
        let mut attempt = 0;
        loop {
            match self.latest_values_once(store, tail).await {
                Ok(v) => return Ok(v),
                Err(e) if attempt >= KEY_LIST_TRIES => return Err(e),
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    async fn latest_values_once(
        &self,
        store: &kv::Store,
        tail: &str,
    ) -> Result<Vec<(String, bytes::Bytes)>, NetError> {
        let consumer = store
            .stream
            .create_consumer(jetstream::consumer::push::OrderedConfig {
                deliver_subject: self.client.new_inbox(),
                description: Some("flowsieve bucket read".into()),
                filter_subject: format!("{}{tail}", store.prefix),
                replay_policy: jetstream::consumer::ReplayPolicy::Instant,
                deliver_policy: jetstream::consumer::DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await
            .map_err(|e| nats_err("read bucket")(&e))?;
        let mut out = Vec::new();
        // Nothing to deliver: the consumer would only wait for new writes.
        if consumer.cached_info().num_pending == 0 {
            return Ok(out);
        }
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| nats_err("read bucket")(&e))?;
        let ended = || NetError::Nats {
            what: "read bucket",
            detail: format!(
                "the read of {}{tail} ended before its last key",
                store.prefix
            ),
        };
        loop {
            let next = tokio::time::timeout(self.timeout, messages.next())
                .await
                .map_err(|_| ended())?;
            let m = next
                .ok_or_else(ended)?
                .map_err(|e| nats_err("read bucket")(&e))?;
            let pending = m.info().map_err(|e| nats_err("read bucket")(&*e))?.pending;
            let removed = m.headers.as_ref().is_some_and(|h| {
                h.get("KV-Operation")
                    .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"))
                    || h.get("Nats-Marker-Reason").is_some()
            });
            if !removed && let Some(key) = m.subject.strip_prefix(store.prefix.as_str()) {
                out.push((key.to_string(), m.payload.clone()));
            }
            // The last message there was when the consumer was made.
            if pending == 0 {
                return Ok(out);
            }
        }
    }
}

/// The key pattern of one window's results (see [`result_key`]).
fn window_keys(window: u64) -> String {
    format!("w{window:020}.>")
}

/// Tries of [`Nats::latest_values`]: the temporary consumer a bucket read
/// goes through may fail to be created for a few seconds after a cluster
/// lost a node.
const KEY_LIST_TRIES: u32 = 10;

/// A shard-window's result as read from the results bucket, with the
/// revision it was read at: a conditional write over it
/// ([`note_late_result`]) succeeds only if no other write came between.
#[derive(Debug, Clone)]
pub struct StoredResult {
    /// The result.
    pub result: ShardWindowResult,
    /// The bucket's revision of its key when it was read.
    pub revision: u64,
}

/// The written result of a shard-window in the results bucket `store`, if
/// there is one, with its revision: one request, on a bucket the caller
/// holds open (opening it is a request of its own).
pub async fn read_result(
    store: &kv::Store,
    window: u64,
    shard: u32,
) -> Result<Option<StoredResult>, NetError> {
    read_result_at(store, &result_key(window, shard)).await
}

/// [`read_result`] by key. A deleted or purged key holds no result.
async fn read_result_at(store: &kv::Store, key: &str) -> Result<Option<StoredResult>, NetError> {
    let entry = store
        .entry(key)
        .await
        .map_err(|e| nats_err("read result")(&e))?;
    let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
        return Ok(None);
    };
    Ok(Some(StoredResult {
        result: decode_stored(&entry.value, "result", key)?,
        revision: entry.revision,
    }))
}

/// Adds `probe` to the late probes ([`ShardWindowResult::late`]) of the
/// written result of `window` and `shard` in the results bucket `store`.
/// Returns the result as it now stands and whether `probe` was new to its
/// list, or `None` when the bucket holds no result there.
///
/// `read`, when the caller has it, is the result as read just before
/// ([`read_result`]): the note starts from it and saves a read. The write
/// is conditional on the revision read, so that a concurrent write of the
/// same key (a note of another late probe, or a second collector owning
/// the shard) is never overwritten: the key is read again and the note
/// tried again. A probe already listed writes nothing, so a digest
/// delivered again changes nothing. (Probes are only ever added to the
/// list, so one listed in a read that has since gone stale is listed
/// still.)
pub async fn note_late_result(
    store: &kv::Store,
    window: u64,
    shard: u32,
    probe: &str,
    mut read: Option<StoredResult>,
) -> Result<Option<(ShardWindowResult, bool)>, NetError> {
    let key = result_key(window, shard);
    loop {
        let stored = match read.take() {
            Some(s) => s,
            None => match read_result_at(store, &key).await? {
                Some(s) => s,
                None => return Ok(None),
            },
        };
        let mut r = stored.result;
        if !r.note_late(probe) {
            return Ok(Some((r, false)));
        }
        let bytes = serde_json::to_vec(&r).map_err(|e| nats_err("encode result")(&e))?;
        match store
            .update(key.as_str(), bytes.into(), stored.revision)
            .await
        {
            Ok(_) => return Ok(Some((r, true))),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => continue,
            Err(e) => return Err(nats_err("note a late digest in its result")(&e)),
        }
    }
}

/// The JSON value stored under `key` in `store`, if there is one; `what`
/// names the value and `reading` the request in errors.
async fn read_stored<T: serde::de::DeserializeOwned>(
    store: &kv::Store,
    key: &str,
    what: &'static str,
    reading: &'static str,
) -> Result<Option<T>, NetError> {
    let Some(v) = store.get(key).await.map_err(|e| nats_err(reading)(&e))? else {
        return Ok(None);
    };
    decode_stored(&v, what, key).map(Some)
}

/// The JSON value `bytes`, stored under `key`; `what` names it in the
/// error.
fn decode_stored<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &'static str,
    key: &str,
) -> Result<T, NetError> {
    serde_json::from_slice(bytes).map_err(|e| NetError::Stored {
        what,
        key: key.into(),
        detail: e.to_string(),
    })
}
