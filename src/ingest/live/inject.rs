//! `flowsieve inject`: puts a trace's frames onto an interface through an
//! AF_PACKET socket, paced, so that tests and users need no other replay
//! tool.

use super::error::LiveError;
use super::iface::Interface;
use crate::ingest::{IngestError, TraceReader};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How frames are spaced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pace {
    /// A fixed rate in frames per second.
    PacketsPerSecond(f64),
    /// The trace's own timing, sped up by this factor.
    Speed(f64),
    /// A fixed rate in megabits (10^6 bits) per second of the frames'
    /// bytes as sent, as tcpreplay's `--mbps`: each frame is due when the
    /// bytes before it would have gone out at that rate.
    MegabitsPerSecond(f64),
    /// As fast as the socket takes them.
    TopSpeed,
}

/// What an injection did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct InjectSummary {
    /// Frames the socket accepted.
    pub sent: u64,
    /// Frames the socket refused (longer than the MTU, shorter than a link
    /// header, ...), by reason.
    pub refused: std::collections::BTreeMap<String, u64>,
    /// Bytes sent.
    pub bytes: u64,
    /// Seconds from the first frame to the last.
    pub seconds: f64,
    /// Frames per second achieved.
    pub packets_per_sec: f64,
    /// Stopped (Ctrl-C, SIGTERM) before every frame of every loop went
    /// out: the counts above are of what did.
    pub interrupted: bool,
}

/// An injection's counts so far, as [`Injector::inject_answering`] gives
/// them when asked.
#[derive(Clone, Debug, PartialEq)]
pub struct InjectProgress {
    /// The counts so far; `seconds` and `packets_per_sec` up to now.
    pub summary: InjectSummary,
    /// The pass over the trace under way, from 1.
    pub this_loop: u64,
    /// Passes asked for (`--loop`, at least 1).
    pub loops: u64,
}

impl InjectProgress {
    /// The counts as one line (without the program's prefix).
    ///
    /// ```
    /// use flowsieve::ingest::live::{InjectProgress, InjectSummary};
    /// let mut summary = InjectSummary { sent: 120, bytes: 9_600, seconds: 1.5, packets_per_sec: 80.0, ..Default::default() };
    /// summary.refused.insert("longer than the MTU".into(), 2);
    /// let p = InjectProgress { summary, this_loop: 2, loops: 3 };
    /// assert_eq!(
    ///     p.line(),
    ///     "inject: 120 frames (9600 bytes) sent in 1.5 s, 80 pps; refused 2; loop 2 of 3"
    /// );
    /// ```
    pub fn line(&self) -> String {
        let s = &self.summary;
        format!(
            "inject: {} frames ({} bytes) sent in {:.1} s, {:.0} pps; refused {}; loop {} of {}",
            s.sent,
            s.bytes,
            s.seconds,
            s.packets_per_sec,
            s.refused.values().sum::<u64>(),
            self.this_loop,
            self.loops
        )
    }
}

/// Where a request for the counts comes in, and whom it goes to.
struct Asked<'a> {
    flag: &'a AtomicBool,
    answer: &'a mut dyn FnMut(&InjectProgress),
    started: Instant,
    loops: u64,
    this_loop: u64,
}

impl Asked<'_> {
    /// Answers a request, if one came: a load first, so that the frame
    /// loop pays no read-modify-write while nobody asks.
    fn answer_if_asked(&mut self, summary: &InjectSummary) {
        if self.flag.load(Ordering::Relaxed) && self.flag.swap(false, Ordering::Relaxed) {
            (self.answer)(&InjectProgress {
                summary: finish(summary.clone(), self.started),
                this_loop: self.this_loop,
                loops: self.loops,
            });
        }
    }
}

/// A send socket bound to one interface.
#[derive(Debug)]
pub struct Injector {
    fd: OwnedFd,
    iface: Interface,
    /// Frames carry a virtio-net header (`PACKET_VNET_HDR`): TCP frames
    /// longer than the MTU go out as segmentation-offload super-frames.
    gso: bool,
    /// Take at most this many frames from the trace, over every loop.
    limit: Option<u64>,
}

/// `struct virtio_net_hdr` (linux/virtio_net.h): flags, gso_type,
/// hdr_len, gso_size, csum_start, csum_offset, in host byte order.
const VNET_HDR_LEN: usize = 10;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;
const VIRTIO_NET_HDR_GSO_TCPV6: u8 = 4;
/// The TCP checksum's offset in the TCP header.
const TCP_CHECKSUM_OFFSET: u16 = 16;

/// The virtio-net header for a frame: all zero (send as is) unless the
/// frame is longer than `mtu` plus the Ethernet header and is TCP, which
/// the kernel is then asked to segment into `mtu`-sized packets, as a
/// sender with TCP segmentation offload does. The checksum is left to the
/// segmentation (`NEEDS_CSUM`); nothing here reaches a host's stack.
fn vnet_header(frame: &[u8], mtu: u32) -> [u8; VNET_HDR_LEN] {
    let mut h = [0u8; VNET_HDR_LEN];
    if frame.len() <= mtu as usize + 14 {
        return h;
    }
    let Ok(p) = etherparse::SlicedPacket::from_ethernet(frame) else {
        return h;
    };
    let (Some(net), Some(etherparse::TransportSlice::Tcp(tcp))) = (&p.net, &p.transport) else {
        return h;
    };
    let gso_type = match net {
        etherparse::NetSlice::Ipv4(_) => VIRTIO_NET_HDR_GSO_TCPV4,
        etherparse::NetSlice::Ipv6(_) => VIRTIO_NET_HDR_GSO_TCPV6,
        _ => return h,
    };
    let ip_start = match net {
        etherparse::NetSlice::Ipv4(v4) => v4.header().slice().as_ptr(),
        etherparse::NetSlice::Ipv6(v6) => v6.header().slice().as_ptr(),
        _ => return h,
    } as usize
        - frame.as_ptr() as usize;
    let tcp_start = tcp.header_slice().as_ptr() as usize - frame.as_ptr() as usize;
    let hdr_len = tcp_start + tcp.header_len();
    let segment = (mtu as usize).saturating_sub(hdr_len - ip_start);
    let (Ok(hdr_len), Ok(segment), Ok(csum_start)) = (
        u16::try_from(hdr_len),
        u16::try_from(segment),
        u16::try_from(tcp_start),
    ) else {
        return h;
    };
    if segment == 0 {
        return h;
    }
    h[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    h[1] = gso_type;
    h[2..4].copy_from_slice(&hdr_len.to_ne_bytes());
    h[4..6].copy_from_slice(&segment.to_ne_bytes());
    h[6..8].copy_from_slice(&csum_start.to_ne_bytes());
    h[8..10].copy_from_slice(&TCP_CHECKSUM_OFFSET.to_ne_bytes());
    h
}

impl Injector {
    /// Opens a send socket on `iface`.
    pub fn open(iface: &Interface) -> Result<Injector, LiveError> {
        // SAFETY: plain socket(2) call; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(LiveError::from_os(
                &iface.name,
                "open a packet socket",
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an all-zero sockaddr_ll is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = iface.index;
        // SAFETY: valid sockaddr_ll of the length given.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(LiveError::from_os(
                &iface.name,
                "bind to the interface",
                io::Error::last_os_error(),
            ));
        }
        // No PACKET_QDISC_BYPASS: it skips the taps too, so a capture on
        // the sending host would not see the frames (tests/live.rs
        // direction_in_leaves_out_what_the_host_sends relies on seeing them).
        Ok(Injector {
            fd,
            iface: iface.clone(),
            gso: false,
            limit: None,
        })
    }

    /// Sends TCP frames longer than the MTU as segmentation-offload
    /// super-frames (a virtio-net header on every frame), as a host with
    /// TSO hands them to a capture on its own interface; other frames go
    /// out unchanged. Without it such frames are refused as longer than
    /// the MTU.
    pub fn with_gso(mut self) -> Result<Injector, LiveError> {
        let one: libc::c_int = 1;
        // SAFETY: a valid int option of the length given.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_VNET_HDR,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(LiveError::from_os(
                &self.iface.name,
                "enable PACKET_VNET_HDR",
                io::Error::last_os_error(),
            ));
        }
        self.gso = true;
        Ok(self)
    }

    /// Ends [`Injector::inject`] once `frames` frames are taken from the
    /// trace, over every loop (sent or refused), as tcpreplay's `--limit`
    /// (`-L`) ends it.
    pub fn with_limit(mut self, frames: u64) -> Injector {
        self.limit = Some(frames);
        self
    }

    /// Sends a batch with `sendmmsg`, one system call for up to
    /// [`SEND_BATCH`] frames. A frame the kernel refuses is sent alone
    /// through [`Injector::send`], which names the reason; the rest of the
    /// batch goes on. Returns each frame's outcome, in order.
    fn send_batch(
        &self,
        batch: &FrameBatch,
        out: &mut Vec<Result<(), &'static str>>,
    ) -> io::Result<()> {
        let frames: Vec<&[u8]> = batch.frames().collect();
        let mut at = 0;
        while at < frames.len() {
            let mut iov: Vec<libc::iovec> = frames[at..]
                .iter()
                .map(|f| libc::iovec {
                    iov_base: f.as_ptr() as *mut libc::c_void,
                    iov_len: f.len(),
                })
                .collect();
            let mut msgs: Vec<libc::mmsghdr> = iov
                .iter_mut()
                .map(|v| {
                    // SAFETY: an all-zero mmsghdr is valid (no name, no
                    // control data).
                    let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                    m.msg_hdr.msg_iov = v;
                    m.msg_hdr.msg_iovlen = 1;
                    m
                })
                .collect();
            // SAFETY: `msgs` holds `msgs.len()` headers whose iovecs point
            // into `frames`, all alive for the call; sendmmsg only reads them.
            let n = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    msgs.len() as libc::c_uint,
                    0,
                )
            };
            if n > 0 {
                out.extend((0..n).map(|_| Ok(())));
                at += n as usize;
                continue;
            }
            if !transient(&io::Error::last_os_error()) {
                // The first frame is refused: let the single send say why.
                out.push(self.send(frames[at])?);
                at += 1;
            }
        }
        Ok(())
    }

    /// Sends one frame. `Ok(Err(reason))` means the kernel refused this
    /// frame (it is counted under `reason`); `Err` means the socket failed
    /// as a whole.
    fn send(&self, frame: &[u8]) -> io::Result<Result<(), &'static str>> {
        loop {
            // SAFETY: `frame` is valid for its length; send only reads it.
            let n =
                unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
            if n >= 0 {
                return Ok(Ok(()));
            }
            let e = io::Error::last_os_error();
            if transient(&e) {
                continue;
            }
            match e.raw_os_error() {
                Some(libc::EMSGSIZE) => return Ok(Err("longer than the MTU")),
                Some(libc::EINVAL) => return Ok(Err("shorter than the link header")),
                _ => return Err(e),
            }
        }
    }

    /// Sends every frame of `trace`, `loops` times, paced by `pace`, until
    /// done or `stop` is set. Frames of another link type than the
    /// interface's are refused and counted.
    ///
    /// With [`Injector::with_limit`], it ends once that many frames are
    /// taken from the trace.
    pub fn inject(
        &self,
        trace: &Path,
        pace: Pace,
        loops: u64,
        stop: &AtomicBool,
    ) -> Result<InjectSummary, InjectError> {
        let never = AtomicBool::new(false);
        self.inject_answering(
            trace,
            pace,
            loops,
            stop,
            &never,
            &mut |_: &InjectProgress| {},
        )
    }

    /// [`Injector::inject`], answering `progress`: each time it is set
    /// (SIGUSR1, as `dd` and tcpdump take it), it is cleared and
    /// `on_progress` gets the counts so far, within a tenth of a second even
    /// while a slow pace waits for its next frame.
    pub fn inject_answering(
        &self,
        trace: &Path,
        pace: Pace,
        loops: u64,
        stop: &AtomicBool,
        progress: &AtomicBool,
        on_progress: &mut dyn FnMut(&InjectProgress),
    ) -> Result<InjectSummary, InjectError> {
        let mut summary = InjectSummary::default();
        let started = Instant::now();
        let mut asked = Asked {
            flag: progress,
            answer: on_progress,
            started,
            loops: loops.max(1),
            this_loop: 1,
        };
        let mut sent_at_start = Instant::now();
        let mut index: u64 = 0;
        // Bytes of the frames before this one, over every loop (--mbps).
        let mut bytes_before: u64 = 0;
        let mut batch = FrameBatch::default();
        let mut outcomes = Vec::with_capacity(SEND_BATCH);
        let limit = self.limit.unwrap_or(u64::MAX);
        'loops: for this_loop in 1..=loops.max(1) {
            asked.this_loop = this_loop;
            let mut reader = TraceReader::open(trace).map_err(InjectError::Trace)?;
            let mut first_ts = None;
            let loop_start = Instant::now();
            while let Some(p) = reader.next_packet().map_err(InjectError::Trace)? {
                if index >= limit {
                    break 'loops;
                }
                if stop.load(Ordering::Relaxed) {
                    self.flush(&mut batch, &mut outcomes, &mut summary, stop, &mut asked)?;
                    summary.interrupted = true;
                    return Ok(finish(summary, started));
                }
                asked.answer_if_asked(&summary);
                let due = match pace {
                    Pace::TopSpeed => None,
                    Pace::PacketsPerSecond(pps) => {
                        Some(sent_at_start + Duration::from_secs_f64(due_secs(index as f64 / pps)))
                    }
                    Pace::Speed(x) => {
                        let first = *first_ts.get_or_insert(p.ts.as_nanos());
                        let offset = (p.ts.as_nanos() - first).max(0) as f64 * 1e-9 / x;
                        Some(loop_start + Duration::from_secs_f64(due_secs(offset)))
                    }
                    Pace::MegabitsPerSecond(mbps) => Some(
                        sent_at_start
                            + Duration::from_secs_f64(due_secs(
                                bytes_before as f64 * 8.0 / (mbps * 1e6),
                            )),
                    ),
                };
                bytes_before += p.data.len() as u64;
                // A frame due later than the batch's slack goes in the next
                // batch: the batch leaves when its first frame is due, so no
                // frame leaves more than BATCH_SLACK early.
                if let (Some(due), Some(first)) = (due, batch.due)
                    && due > first + BATCH_SLACK
                {
                    self.flush(&mut batch, &mut outcomes, &mut summary, stop, &mut asked)?;
                }
                if index == 0 {
                    sent_at_start = Instant::now();
                }
                index += 1;
                if p.link_type != self.iface.link_type {
                    *summary
                        .refused
                        .entry(format!(
                            "link type {} on a {} interface",
                            p.link_type.name(),
                            self.iface.link_type.name()
                        ))
                        .or_insert(0) += 1;
                    continue;
                }
                if batch.is_empty() {
                    batch.due = due;
                }
                if self.gso {
                    batch.push_with_header(&vnet_header(p.data, self.iface.mtu), p.data);
                } else {
                    batch.push(p.data);
                }
                if batch.len() >= SEND_BATCH {
                    self.flush(&mut batch, &mut outcomes, &mut summary, stop, &mut asked)?;
                }
            }
        }
        self.flush(&mut batch, &mut outcomes, &mut summary, stop, &mut asked)?;
        // A stop during the last batch's wait dropped that batch.
        summary.interrupted = stop.load(Ordering::Relaxed);
        Ok(finish(summary, started))
    }

    /// Waits until the batch is due, sends it, and counts the outcomes. A
    /// `stop` while it waits drops the batch unsent: Ctrl-C ends a slow
    /// pace at once, as it ends tcpreplay.
    fn flush(
        &self,
        batch: &mut FrameBatch,
        outcomes: &mut Vec<Result<(), &'static str>>,
        summary: &mut InjectSummary,
        stop: &AtomicBool,
        asked: &mut Asked<'_>,
    ) -> Result<(), InjectError> {
        if batch.is_empty() {
            return Ok(());
        }
        if let Some(due) = batch.due
            && !wait_until(due, stop, &mut || asked.answer_if_asked(summary))
        {
            batch.clear();
            return Ok(());
        }
        outcomes.clear();
        self.send_batch(batch, outcomes)
            .map_err(|e| InjectError::Send(self.iface.name.clone(), e))?;
        for (outcome, frame) in outcomes.iter().zip(batch.frames()) {
            match outcome {
                Ok(()) => {
                    summary.sent += 1;
                    summary.bytes += (frame.len() - batch.header) as u64;
                }
                Err(reason) => *summary.refused.entry(reason.to_string()).or_insert(0) += 1,
            }
        }
        batch.clear();
        Ok(())
    }
}

/// Frames per `sendmmsg` call.
const SEND_BATCH: usize = 64;

/// How far ahead of its due time a paced frame may leave with its batch.
const BATCH_SLACK: Duration = Duration::from_micros(200);

/// Frames copied out of the trace (the reader lends one at a time) to go
/// out in one system call.
#[derive(Debug, Default)]
struct FrameBatch {
    /// Bytes before each frame (the virtio-net header with GSO).
    header: usize,
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// When the first frame is due (`None`: at once).
    due: Option<Instant>,
}

impl FrameBatch {
    fn push_with_header(&mut self, header: &[u8], frame: &[u8]) {
        self.header = header.len();
        self.bytes.extend_from_slice(header);
        self.push(frame);
    }
    fn push(&mut self, frame: &[u8]) {
        self.bytes.extend_from_slice(frame);
        self.ends.push(self.bytes.len());
    }
    fn len(&self) -> usize {
        self.ends.len()
    }
    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.due = None;
    }
    fn frames(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(a, b)| &self.bytes[a..b])
    }
}

/// Whether a send failed for a moment only (a signal, or a full device
/// queue, which it waits 50 µs for, as tcpreplay does): then it is retried.
fn transient(e: &io::Error) -> bool {
    match e.raw_os_error() {
        Some(libc::EINTR) => true,
        Some(libc::ENOBUFS) | Some(libc::EAGAIN) => {
            std::thread::sleep(Duration::from_micros(50));
            true
        }
        _ => false,
    }
}

fn finish(mut s: InjectSummary, started: Instant) -> InjectSummary {
    s.seconds = started.elapsed().as_secs_f64();
    s.packets_per_sec = if s.seconds > 0.0 {
        s.sent as f64 / s.seconds
    } else {
        0.0
    };
    s
}

/// The longest a frame is held back, in seconds (about 31 years): a due
/// time past it is this far off, so that no pace can overflow a
/// `Duration` or an `Instant` (the command line bounds the pace well
/// inside it).
const MAX_DUE_SECS: f64 = 1e9;

/// `secs` bounded to `0..=MAX_DUE_SECS`.
fn due_secs(secs: f64) -> f64 {
    if secs.is_nan() {
        return MAX_DUE_SECS;
    }
    secs.clamp(0.0, MAX_DUE_SECS)
}

/// How long one sleep of a wait lasts at most, so that `stop` is seen.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// Sleeps most of the way, then spins the last stretch (sleep alone
/// overshoots by tens of microseconds, which caps the rate). Sleeps in
/// slices of [`STOP_CHECK`] and gives up when `stop` is set: `false`.
fn wait_until(due: Instant, stop: &AtomicBool, between: &mut dyn FnMut()) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        between();
        let now = Instant::now();
        if now >= due {
            return true;
        }
        let left = due - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep((left - Duration::from_micros(100)).min(STOP_CHECK));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Why an injection stopped.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    /// The trace could not be read.
    #[error("{0}")]
    Trace(IngestError),
    /// The socket failed.
    #[error("{0}: send failed: {1}")]
    Send(String, io::Error),
}
