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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

type Labels = Vec<(String, String)>;

fn family(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Counter> {
    let f = Family::<Labels, Counter>::default();
    registry.register(name, help, f.clone());
    f
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
        "Frames read but shed because the pipeline queue was full",
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
