//! One AF_PACKET socket with a TPACKET_V3 receive ring.
//!
//! The kernel fills fixed-size blocks of a memory-mapped ring with frames
//! and hands a block to user space when it is full or when its retire
//! timeout fires. The reader walks a retired block's frames in place and
//! gives the block back at once, so one wake-up covers many packets and no
//! frame is copied unless a VLAN tag has to be put back (see
//! [`super::vlan`]). This is the layout libpcap uses on Linux
//! (`pcap-linux.c`, `pcap_read_linux_mmap_v3`).

use super::error::LiveError;
use super::filter::SocketFilter;
use super::iface::Interface;
use crate::ingest::Timestamp;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering, fence};

/// Ring geometry: block size, block count and the block retire timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGeometry {
    /// Bytes per block (a multiple of the page size).
    pub block_bytes: u32,
    /// Blocks in the ring.
    pub blocks: u32,
    /// Milliseconds after which the kernel retires a block that is not full.
    pub retire_ms: u32,
}

/// Smallest block: one page.
pub const MIN_BLOCK_BYTES: u64 = 4096;
/// Largest block the kernel accepts for a ring (order-10 pages on x86_64).
pub const MAX_BLOCK_BYTES: u64 = 4 << 20;
/// Block retire timeouts outside 1 ms ..= 1 s make no sense for monitoring.
pub const RETIRE_MS_RANGE: std::ops::RangeInclusive<u64> = 1..=1000;

impl RingGeometry {
    /// A ring of about `ring_bytes` in blocks of `block_bytes`, retiring
    /// blocks after `retire_ms`. Errors name the problem (sizes that are
    /// not page multiples, a ring smaller than two blocks, and so on).
    pub fn new(ring_bytes: u64, block_bytes: u64, retire_ms: u64) -> Result<RingGeometry, String> {
        if !(MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&block_bytes) {
            return Err(format!(
                "block size {block_bytes} B is outside {MIN_BLOCK_BYTES} B ..= {MAX_BLOCK_BYTES} B"
            ));
        }
        if !block_bytes.is_multiple_of(MIN_BLOCK_BYTES) {
            return Err(format!(
                "block size {block_bytes} B is not a multiple of the 4 KiB page"
            ));
        }
        let blocks = ring_bytes / block_bytes;
        if blocks < 2 {
            return Err(format!(
                "a ring of {ring_bytes} B holds fewer than two blocks of {block_bytes} B"
            ));
        }
        let blocks = u32::try_from(blocks)
            .ok()
            .filter(|b| u64::from(*b) * block_bytes <= 1 << 34)
            .ok_or_else(|| format!("a ring of {ring_bytes} B is larger than 16 GiB"))?;
        if !RETIRE_MS_RANGE.contains(&retire_ms) {
            return Err(format!(
                "block timeout {retire_ms} ms is outside 1 ms ..= 1000 ms"
            ));
        }
        Ok(RingGeometry {
            block_bytes: block_bytes as u32,
            blocks,
            retire_ms: retire_ms as u32,
        })
    }

    /// Bytes the ring maps.
    pub fn bytes(&self) -> u64 {
        u64::from(self.block_bytes) * u64::from(self.blocks)
    }
}

/// What the kernel gave about one frame, with the frame's bytes.
#[derive(Clone, Copy, Debug)]
pub struct RingFrame<'a> {
    /// Kernel receive time.
    pub ts: Timestamp,
    /// Length on the wire (`tp_len`), without a stripped VLAN tag.
    pub wire_len: u32,
    /// The captured bytes (`tp_snaplen` of them), from the MAC header on.
    pub data: &'a [u8],
    /// The stripped VLAN tag, as (TPID, TCI), when the kernel took one off.
    pub vlan: Option<(u16, u16)>,
}

/// The socket counters (`PACKET_STATISTICS`), which the kernel resets on
/// every read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Frames the socket accepted or dropped since the last read.
    pub packets: u64,
    /// Frames dropped because the ring was full.
    pub drops: u64,
    /// Times the ring was frozen (all blocks in user space).
    pub freezes: u64,
}

/// Offsets inside a block and a frame header, from `<linux/if_packet.h>`.
/// `tpacket_block_desc` is `{ version: u32, offset_to_priv: u32, hdr }` and
/// `hdr` is `tpacket_hdr_v1`, whose first three fields are
/// `block_status`, `num_pkts` and `offset_to_first_pkt`.
mod offsets {
    pub const BLOCK_STATUS: usize = 8;
    pub const BLOCK_NUM_PKTS: usize = 12;
    pub const BLOCK_FIRST_PKT: usize = 16;
    pub const BLOCK_LEN: usize = 20;
    /// The block descriptor's size; the first frame is never before it.
    pub const BLOCK_HEADER: usize = 48;
}

/// One AF_PACKET socket bound to an interface, with its mapped ring.
#[derive(Debug)]
pub struct PacketRing {
    fd: OwnedFd,
    map: *mut u8,
    geometry: RingGeometry,
    next_block: u32,
}

// SAFETY: the ring is owned by one `PacketRing`; the kernel is the only
// other party and synchronises through the block status word. Moving the
// owner to another thread moves the whole ring with it.
unsafe impl Send for PacketRing {}

/// `PACKET_FANOUT` option: group id in the low 16 bits, mode in the high.
fn fanout_arg(group: u16) -> libc::c_int {
    (u32::from(group) | (libc::PACKET_FANOUT_HASH << 16)) as libc::c_int
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of the size given; the kernel
    // only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Options of one capture socket.
#[derive(Clone, Debug)]
pub struct RingOptions {
    /// Ring geometry.
    pub geometry: RingGeometry,
    /// Put the interface in promiscuous mode while the socket is open.
    pub promiscuous: bool,
    /// Leave out frames this host sends.
    pub incoming_only: bool,
    /// Fanout group to join (`PACKET_FANOUT_HASH`), if any.
    pub fanout_group: Option<u16>,
}

impl PacketRing {
    /// Opens a socket on `iface`, attaches `filter` before any frame can
    /// arrive, maps the ring, binds, and joins the fanout group.
    pub fn open(
        iface: &Interface,
        filter: &SocketFilter,
        opts: &RingOptions,
    ) -> Result<PacketRing, LiveError> {
        let ctx = |what: &'static str| {
            let name = iface.name.clone();
            move |e: io::Error| LiveError::from_os(&name, what, e)
        };
        // Protocol 0: the socket receives nothing until it is bound, so the
        // filter and ring are in place before the first frame.
        // SAFETY: plain socket(2) call; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(ctx("open a packet socket")(io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
            .map_err(ctx("select TPACKET_V3"))?;
        filter
            .attach(&fd)
            .map_err(ctx("attach the capture filter"))?;
        if opts.incoming_only {
            let one: libc::c_int = 1;
            setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one)
                .map_err(ctx("ignore outgoing frames"))?;
        }
        let g = opts.geometry;
        let req = libc::tpacket_req3 {
            tp_block_size: g.block_bytes,
            tp_block_nr: g.blocks,
            // Frames are variable-sized in V3; the kernel only checks that
            // frame_size * frame_nr covers the ring.
            tp_frame_size: 2048,
            tp_frame_nr: (g.bytes() / 2048) as u32,
            tp_retire_blk_tov: g.retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
            .map_err(ctx("set up the receive ring"))?;
        // SAFETY: maps the ring the kernel just allocated for this socket,
        // with the size it was given; the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                g.bytes() as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                fd.as_raw_fd(),
                0,
            )
        };
        let map = if map == libc::MAP_FAILED {
            // MAP_LOCKED fails under a low RLIMIT_MEMLOCK; the ring works
            // unlocked too.
            // SAFETY: as above, without MAP_LOCKED.
            let m = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    g.bytes() as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return Err(ctx("map the receive ring")(io::Error::last_os_error()));
            }
            m
        } else {
            map
        };
        let ring = PacketRing {
            fd,
            map: map.cast(),
            geometry: g,
            next_block: 0,
        };
        if opts.promiscuous {
            let mreq = libc::packet_mreq {
                mr_ifindex: iface.index,
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            setsockopt(
                &ring.fd,
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                &mreq,
            )
            .map_err(ctx("enter promiscuous mode"))?;
        }
        // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter
        // are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = iface.index;
        // SAFETY: `sll` is a valid sockaddr_ll of the length given.
        let rc = unsafe {
            libc::bind(
                ring.fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(ctx("bind to the interface")(io::Error::last_os_error()));
        }
        if let Some(group) = opts.fanout_group {
            setsockopt(
                &ring.fd,
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                &fanout_arg(group),
            )
            .map_err(ctx("join the fanout group"))?;
        }
        // Frames counted before the bind completed (none, with protocol 0)
        // are not this capture's: start the counters from zero.
        let _ = ring.stats();
        Ok(ring)
    }

    /// Reads and resets the socket's counters.
    pub fn stats(&self) -> io::Result<RingStats> {
        let mut s = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `s` is writable and `len` says how large it is.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut s as *mut libc::tpacket_stats_v3).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(RingStats {
            packets: u64::from(s.tp_packets),
            drops: u64::from(s.tp_drops),
            freezes: u64::from(s.tp_freeze_q_cnt),
        })
    }

    /// A pending socket error (`ENETDOWN` when the interface went down).
    pub fn socket_error(&self) -> Option<io::Error> {
        let mut err: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `err` is a writable c_int and `len` its size.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (rc == 0 && err != 0).then(|| io::Error::from_raw_os_error(err))
    }

    fn block_ptr(&self, index: u32) -> *mut u8 {
        // SAFETY: index < blocks, so the offset stays inside the mapping.
        unsafe {
            self.map
                .add(index as usize * self.geometry.block_bytes as usize)
        }
    }

    fn status_word(&self, index: u32) -> &AtomicU32 {
        // SAFETY: the block status is a naturally aligned u32 at a fixed
        // offset inside the mapped block (blocks are page aligned); the
        // kernel and this process both access it, hence the atomic view.
        unsafe {
            &*self
                .block_ptr(index)
                .add(offsets::BLOCK_STATUS)
                .cast::<AtomicU32>()
        }
    }

    /// Waits up to `timeout_ms` for the next retired block. Returns false
    /// when none came (a timeout, or a signal).
    pub fn wait(&self, timeout_ms: i32) -> io::Result<bool> {
        if self.status_word(self.next_block).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0 {
            return Ok(true);
        }
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN | libc::POLLERR,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        if pfd.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0
            && let Some(e) = self.socket_error()
        {
            return Err(e);
        }
        Ok(self.status_word(self.next_block).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0)
    }

    /// Whether at least `blocks` retired blocks wait for the reader.
    ///
    /// The kernel retires blocks in ring order, and the reader hands each
    /// one back before it moves on, so the blocks in user space are one run
    /// that starts at the next block to read. That run is at least `blocks`
    /// long exactly when the block `blocks - 1` past the next one is
    /// retired: one load, whatever the ring's size. `0` is always reached;
    /// more than the ring holds never is.
    pub fn backlog_reaches(&self, blocks: u32) -> bool {
        if blocks == 0 {
            return true;
        }
        if blocks > self.geometry.blocks {
            return false;
        }
        let index = (self.next_block + (blocks - 1)) % self.geometry.blocks;
        self.status_word(index).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Walks the next block if the kernel has retired it: calls `each` on
    /// every frame, then hands the block back. Returns the number of
    /// frames, or `None` when the next block still belongs to the kernel.
    pub fn read_block(&mut self, mut each: impl FnMut(RingFrame<'_>)) -> Option<u32> {
        let index = self.next_block;
        let status = self.status_word(index);
        if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return None;
        }
        let block_bytes = self.geometry.block_bytes as usize;
        // SAFETY: the block is in user space (TP_STATUS_USER, read with
        // acquire ordering) until its status is written back below, so the
        // kernel does not touch these bytes meanwhile.
        let block = unsafe { std::slice::from_raw_parts(self.block_ptr(index), block_bytes) };
        let seen = walk_block(block, &mut each);
        // Hand the block back: every read of it happens before the kernel
        // may write it again.
        fence(Ordering::Release);
        status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next_block = (index + 1) % self.geometry.blocks;
        Some(seen)
    }
}

/// Walks the frames of one TPACKET_V3 block (its header, then each
/// `tpacket3_hdr` chained by `tp_next_offset`), calling `each` on every
/// frame; returns how many. Every offset and length the kernel wrote is
/// checked against the block before it is used, so any bytes at all (a
/// damaged block, or a fuzzer's) end the walk early instead of reading
/// past the block.
///
/// Always inlined: `each` is a `dyn` callback, and only where the walk is
/// inlined into its caller does the compiler see the closure and call it
/// directly. Once the ring reader's step became callable from two places
/// (its thread and the merger's loop), the walk stayed a function, each
/// frame an indirect call, and the reader ran 9 % more instructions
/// (callgrind, one drain; BENCHMARKS.md, sixty-fifth round).
#[inline(always)]
pub fn walk_block(block: &[u8], each: &mut dyn FnMut(RingFrame<'_>)) -> u32 {
    let word = |at: usize| -> u32 {
        block
            .get(at..at + 4)
            .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    let count = word(offsets::BLOCK_NUM_PKTS);
    let used = (word(offsets::BLOCK_LEN) as usize).min(block.len());
    let mut at = word(offsets::BLOCK_FIRST_PKT) as usize;
    let mut seen = 0;
    while seen < count && at >= offsets::BLOCK_HEADER && at < used {
        let Some(frame) = parse_frame(block, at) else {
            break;
        };
        seen += 1;
        let next = frame.1;
        each(frame.0);
        if next == 0 {
            break;
        }
        at = at.saturating_add(next as usize);
    }
    seen
}

/// One frame at `at` of a block: the frame and `tp_next_offset`. Every
/// length the kernel wrote is checked against the block before the bytes
/// are sliced, so a damaged block ends the walk instead of reading past it.
fn parse_frame(block: &[u8], at: usize) -> Option<(RingFrame<'_>, u32)> {
    let hdr_len = std::mem::size_of::<libc::tpacket3_hdr>();
    let hdr_bytes = block.get(at..at.checked_add(hdr_len)?)?;
    // SAFETY: `hdr_bytes` holds a whole tpacket3_hdr (checked above), and
    // read_unaligned does not need alignment.
    let hdr: libc::tpacket3_hdr =
        unsafe { std::ptr::read_unaligned(hdr_bytes.as_ptr().cast::<libc::tpacket3_hdr>()) };
    let start = at.checked_add(usize::from(hdr.tp_mac))?;
    let data = block.get(start..start.checked_add(hdr.tp_snaplen as usize)?)?;
    let vlan =
        (hdr.tp_status & libc::TP_STATUS_VLAN_VALID != 0 || hdr.hv1.tp_vlan_tci != 0).then(|| {
            let tpid = if hdr.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                hdr.hv1.tp_vlan_tpid
            } else {
                0x8100
            };
            (tpid, hdr.hv1.tp_vlan_tci as u16)
        });
    let ts = Timestamp::new(i64::from(hdr.tp_sec), hdr.tp_nsec.min(999_999_999))?;
    Some((
        RingFrame {
            ts,
            wire_len: hdr.tp_len,
            data,
            vlan,
        },
        hdr.tp_next_offset,
    ))
}

impl Drop for PacketRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; no slice of it
        // outlives `read_block`'s call.
        unsafe {
            libc::munmap(self.map.cast(), self.geometry.bytes() as usize);
        }
    }
}
