//! Prometheus metrics for a live capture: `/metrics` in the text
//! exposition format, served by `tiny_http` on its own thread.
//!
//! Each scrape builds a fresh `prometheus-client` registry from the shared
//! atomic counters ([`LiveCounters`]): the packet path never touches the
//! registry (whose label families take a lock), and a scrape costs the
//! scraper's thread only.

use super::LiveCounters;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

type Labels = Vec<(String, String)>;

fn family(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Counter> {
    let f = Family::<Labels, Counter>::default();
    registry.register(name, help, f.clone());
    f
}

/// Reads a `--metrics` address: a socket address (`127.0.0.1:9899`,
/// `[::1]:9899`), `:PORT` for every IPv4 address (as Prometheus
/// exporters such as node_exporter take `:9100`), or a host name and port
/// (`localhost:9899`), looked up here, so that one that does not resolve
/// is a bad flag value rather than a failure after the capture started.
/// Port 0 asks the kernel for a free one.
///
/// ```
/// use flowsieve::live::metrics::parse_listen_addr;
/// assert_eq!(parse_listen_addr("127.0.0.1:9899").unwrap().port(), 9899);
/// assert_eq!(parse_listen_addr(":9100").unwrap().to_string(), "0.0.0.0:9100");
/// assert!(parse_listen_addr("localhost:0").unwrap().ip().is_loopback());
/// assert!(parse_listen_addr("9100").unwrap_err().contains("no port"));
/// assert!(parse_listen_addr(":99999").unwrap_err().contains("not a port"));
/// assert!(parse_listen_addr("localhost:http").is_err());
/// ```
pub fn parse_listen_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::{SocketAddr, ToSocketAddrs};
    let expected = "expected HOST:PORT such as 127.0.0.1:9899, [::1]:9899 or localhost:9899, or :PORT for every IPv4 address";
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some(port) = s.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("'{port}' is not a port from 0 to 65535; {expected}"))?;
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!("no port; {expected}"));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(expected.to_string());
    }
    match s.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("'{host}' has no address")),
        Err(e) => Err(format!("'{host}': {e}")),
    }
}

/// The exposition text for the counters now.
///
/// ```
/// use flowsieve::live::{metrics::render, LiveCounters};
/// let c = LiveCounters::new(&["eth0".into()], vec!["web".into()]);
/// c.interfaces[0].received.store(7, std::sync::atomic::Ordering::Relaxed);
/// let text = render(&c);
/// assert!(text.contains("flowsieve_packets_total{interface=\"eth0\"} 7"));
/// assert!(text.ends_with("# EOF\n"));
/// ```
pub fn render(c: &LiveCounters) -> String {
    let mut r = Registry::default();
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let packets = family(
        &mut r,
        "flowsieve_packets",
        "Frames read from the capture rings",
    );
    let bytes = family(&mut r, "flowsieve_bytes", "Wire bytes of the frames read");
    let kdrops = family(
        &mut r,
        "flowsieve_kernel_drops",
        "Frames the kernel dropped because a ring was full",
    );
    let freezes = family(
        &mut r,
        "flowsieve_kernel_freezes",
        "Times a ring froze (all blocks in user space)",
    );
    let shed = family(
        &mut r,
        "flowsieve_shed_packets",
        "Frames read but shed because the pipeline queue was full (or, with --max-delay, the frame was too old)",
    );
    let shed_late = family(
        &mut r,
        "flowsieve_shed_late_packets",
        "Of the frames shed, those older than --max-delay when they would have reached the pipeline",
    );
    let supers = family(
        &mut r,
        "flowsieve_super_frames",
        "GSO/GRO frames longer than the MTU",
    );
    for i in &c.interfaces {
        let l = vec![("interface".to_string(), i.name.clone())];
        let s = i.snapshot();
        packets.get_or_create(&l).inc_by(s.received);
        bytes.get_or_create(&l).inc_by(s.bytes);
        kdrops.get_or_create(&l).inc_by(s.kernel_drops);
        freezes.get_or_create(&l).inc_by(s.kernel_freezes);
        shed.get_or_create(&l).inc_by(s.shed);
        shed_late.get_or_create(&l).inc_by(s.shed_late);
        supers.get_or_create(&l).inc_by(s.super_frames);
    }
    let pipeline = Counter::<u64>::default();
    pipeline.inc_by(get(&c.pipeline_packets));
    r.register(
        "flowsieve_pipeline_packets",
        "Keyed packets handed to the pipeline",
        pipeline,
    );
    let heavy = family(
        &mut r,
        "flowsieve_heavy_flow_events",
        "Flows that reached theta in a window, by class",
    );
    let new = family(
        &mut r,
        "flowsieve_new_flow_events",
        "Packets called the start of a new flow, by class",
    );
    for (k, name) in c.class_names.iter().enumerate() {
        let l = vec![("class".to_string(), name.clone())];
        if let Some(a) = c.heavy_events.get(k) {
            heavy.get_or_create(&l).inc_by(get(a));
        }
        if let Some(a) = c.new_flow_events.get(k) {
            new.get_or_create(&l).inc_by(get(a));
        }
    }
    let windows = Counter::<u64>::default();
    windows.inc_by(get(&c.windows));
    r.register(
        "flowsieve_heavy_windows",
        "Heavy-flow windows ended, empty ones included",
        windows,
    );
    render_stages(&mut r, c);
    if let Some(x) = c.export.get() {
        render_export(&mut r, &x.snapshot());
    }
    let up = Gauge::<i64>::default();
    up.set(i64::from(c.fatal().is_none()));
    r.register(
        "flowsieve_capture_up",
        "1 while every interface captures, 0 after a failure",
        up,
    );
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}

/// A live probe's export figures (`flowsieve_export_*`).
fn render_export(r: &mut Registry, x: &crate::network::ExportSnapshot) {
    let counter = |r: &mut Registry, name: &str, help: &str, v: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        r.register(name, help, c);
    };
    let gauge = |r: &mut Registry, name: &str, help: &str, v: i64| {
        let g = Gauge::<i64>::default();
        g.set(v);
        r.register(name, help, g);
    };
    counter(
        r,
        "flowsieve_export_digests",
        "Digests the stream acknowledged",
        x.published,
    );
    counter(
        r,
        "flowsieve_export_digest_bytes",
        "Bytes of the digests acknowledged",
        x.published_bytes,
    );
    counter(
        r,
        "flowsieve_export_object_digests",
        "Digests sent through the object store (over the message limit)",
        x.objects,
    );
    counter(
        r,
        "flowsieve_export_dropped_digests",
        "Digests dropped: the exporter's hand-off or buffer was full",
        x.dropped,
    );
    counter(
        r,
        "flowsieve_export_lost_windows",
        "Windows recorded as lost (partial at the collectors)",
        x.lost_windows,
    );
    counter(
        r,
        "flowsieve_export_failed_attempts",
        "Publish attempts that failed and were retried with the same id",
        x.failed_attempts,
    );
    let encode = FloatCounter::default();
    encode.inc_by(x.encode_seconds);
    r.register(
        "flowsieve_export_encode_seconds",
        "CPU seconds spent encoding digests",
        encode,
    );
    gauge(
        r,
        "flowsieve_export_queued_digests",
        "Digests waiting to be published",
        i64::try_from(x.queued).unwrap_or(i64::MAX),
    );
    gauge(
        r,
        "flowsieve_export_watermark",
        "Every window below this one is published",
        i64::try_from(x.watermark).unwrap_or(i64::MAX),
    );
    gauge(
        r,
        "flowsieve_export_server_up",
        "1 while the last request to the server succeeded",
        i64::from(x.server_up),
    );
}

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;
type FloatCounter = Counter<f64, std::sync::atomic::AtomicU64>;

fn gauge_family(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, FloatGauge> {
    let f = Family::<Labels, FloatGauge>::default();
    registry.register(name, help, f.clone());
    f
}

fn label(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What the stages published: filter fill and saturation, recycles, the
/// priors, the selective stage's errors and cost, and batch latency.
fn render_stages(r: &mut Registry, c: &LiveCounters) {
    let g = &c.stages;
    if let Some(h) = g.heavy.get() {
        let fill = FloatGauge::default();
        fill.set(h.fill());
        r.register(
            "flowsieve_heavy_filter_fill_ratio",
            "Fraction of the heavy-flow counters non-zero when each shard's last window closed",
            fill,
        );
        let sat = Counter::<u64>::default();
        sat.inc_by(h.saturation_events.load(Ordering::Relaxed));
        r.register(
            "flowsieve_heavy_saturated_counters",
            "Heavy-flow counters that reached their maximum, summed over windows",
            sat,
        );
    }
    if let Some(n) = g.new_flows.get() {
        let fill = FloatGauge::default();
        fill.set(n.fill());
        r.register(
            "flowsieve_new_flow_filter_fill_ratio",
            "Fraction of the new-flow filters' active bits set",
            fill,
        );
        let recycles = Counter::<u64>::default();
        recycles.inc_by(n.recycles());
        r.register(
            "flowsieve_new_flow_recycles",
            "Recycles of the new-flow filters, over all shards",
            recycles,
        );
    }
    if let Some(s) = g.selective.get() {
        let queries = family(
            r,
            "flowsieve_selective_queries",
            "Membership queries answered by the selective stage, by class",
        );
        let estimated = gauge_family(
            r,
            "flowsieve_selective_prior_estimated",
            "The class prior in force (estimated from sampled queries)",
        );
        let truth = gauge_family(
            r,
            "flowsieve_selective_prior_true",
            "The exact fraction of the class's queries whose flow was a member",
        );
        let fps = family(
            r,
            "flowsieve_selective_false_positives",
            "Non-members answered positive, by class and variant",
        );
        let fns = family(
            r,
            "flowsieve_selective_false_negatives",
            "Members answered negative, by class and variant",
        );
        let cost = Family::<Labels, FloatCounter>::default();
        r.register(
            "flowsieve_selective_cost",
            "False positives plus alpha times false negatives, by class and variant",
            cost.clone(),
        );
        for (k, name) in c.class_names.iter().enumerate() {
            let l = label(&[("class", name)]);
            let q = s.queries.get(k).map_or(0, |a| a.load(Ordering::Relaxed));
            let m = s.members.get(k).map_or(0, |a| a.load(Ordering::Relaxed));
            queries.get_or_create(&l).inc_by(q);
            estimated.get_or_create(&l).set(s.prior(k));
            if q > 0 {
                truth.get_or_create(&l).set(m as f64 / q as f64);
            }
            for (v, variant) in s.variants.iter().enumerate() {
                let l = label(&[("class", name), ("variant", variant)]);
                let [fp, fneg, _] = s.errors(v, k);
                fps.get_or_create(&l).inc_by(fp);
                fns.get_or_create(&l).inc_by(fneg);
                cost.get_or_create(&l).inc_by(s.cost(v, k));
            }
        }
    }
    if let Some(l) = g.latency.get() {
        let q = gauge_family(
            r,
            "flowsieve_batch_latency_seconds",
            "Per-batch time by row (source, queue, stage) and worker: p50 and p99 so far",
        );
        for w in 0..l.quantiles.len() {
            for (i, row) in l.rows.iter().enumerate() {
                let [p50, p99] = l.get(w, i);
                if p99 == 0 {
                    continue;
                }
                let worker = w.to_string();
                for (quantile, ns) in [("0.5", p50), ("0.99", p99)] {
                    q.get_or_create(&label(&[
                        ("row", row),
                        ("worker", &worker),
                        ("quantile", quantile),
                    ]))
                    .set(ns as f64 * 1e-9);
                }
            }
        }
    }
}

/// A running metrics server.
pub struct MetricsServer {
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` (before any capture starts, so a taken port is an
    /// error at once) and serves `/metrics` until dropped.
    pub fn start(
        addr: std::net::SocketAddr,
        counters: Arc<LiveCounters>,
    ) -> Result<MetricsServer, String> {
        let server = tiny_http::Server::http(addr).map_err(|e| format!("--metrics {addr}: {e}"))?;
        let bound = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| format!("--metrics {addr}: not an IP address"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("flowsieve-metrics".into())
            .spawn(move || {
                while !stopping.load(Ordering::Relaxed) {
                    let Ok(Some(req)) = server.recv_timeout(std::time::Duration::from_millis(100))
                    else {
                        continue;
                    };
                    let resp = if req.url() == "/metrics" {
                        let header = tiny_http::Header::from_bytes(
                            &b"Content-Type"[..],
                            &b"application/openmetrics-text; version=1.0.0; charset=utf-8"[..],
                        )
                        .ok();
                        let mut r = tiny_http::Response::from_string(render(&counters));
                        if let Some(h) = header {
                            r = r.with_header(h);
                        }
                        r
                    } else {
                        tiny_http::Response::from_string("flowsieve: see /metrics\n")
                            .with_status_code(404)
                    };
                    let _ = req.respond(resp);
                }
            })
            .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
        Ok(MetricsServer {
            addr: bound,
            stop,
            handle: Some(handle),
        })
    }

    /// The address it listens on (the port, when 0 was asked for).
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
