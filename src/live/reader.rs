//! One ring's reader thread: waits on the ring, walks each retired block,
//! dissects, classifies and hashes every frame in place, and sends compact
//! records (plus the frame bytes when `-w` is on) to the merger.

use super::counters::InterfaceCounters;
use crate::class::{ClassId, Classifier};
use crate::dissect::{Dissector, FlowKey, SkipReason};
use crate::hash::FlowHasher;
use crate::ingest::live::{Interface, PacketRing, TAG_BYTES, restore_vlan_tag};
use crate::ingest::{LinkType, Timestamp};
use crossbeam_channel::{Receiver, SendTimeoutError, Sender, TrySendError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a reader waits on a full merger queue before it looks at its
/// ring's backlog again. A 64 KiB block of small frames fills in about a
/// millisecond at 0.6 Mpps, and a quarter of the smallest sensible ring
/// is tens of blocks, so the ring cannot fill between two looks.
const ROOM_POLL: Duration = Duration::from_millis(1);

/// A reader sends its batch to the merger once it holds this many frames
/// (checked after each whole block).
const SEND_AT_FRAMES: usize = 4096;

/// Read inline, a step reads blocks until it has read this many frames
/// (released, or in shed blocks) or 64 blocks. Why a step at all, and
/// not a block: the merger's loop around each step (the stop and
/// duration checks, the interval clock, the counters' publication) is
/// worth amortizing over small blocks. Why no more: those checks should still run every few
/// hundred microseconds. A default 1 MiB block holds thousands of small
/// frames, so the step is one block.
const INLINE_STEP_FRAMES: usize = 1024;

/// Read inline, the ring's backlog (in blocks, counting the one about to
/// be read) at which that block is shed, for a `--shed-at` mark of
/// `shed_at_blocks`: the mark, but at least 2, so that a block is shed
/// only with another waiting behind it. (At a mark of 0 or 1 every block
/// would be shed, the last one too, and an idle link's trickle would
/// never reach the pipeline.) `shed_policy`'s text follows this.
pub(crate) fn inline_shed_mark(shed_at_blocks: u32) -> u32 {
    shed_at_blocks.max(2)
}

/// The frames a new batch has room for, for blocks of `block_bytes`:
/// [`SEND_AT_FRAMES`] and a block's worth more (a frame takes at least
/// 64 bytes of a block: its `tpacket3_hdr` and link address alone), at
/// most [`SEND_AT_FRAMES`] more. Why not grow as it fills: a batch grown
/// from empty doubled its way to 8,192 frames, and past glibc's mmap
/// threshold a doubling is an `mremap`, with a TLB flush on every core
/// (the ring thread's profile draining a full ring; BENCHMARKS.md,
/// sixty-third round).
pub(crate) fn batch_frames(block_bytes: u32) -> usize {
    SEND_AT_FRAMES + (block_bytes as usize / 64).min(SEND_AT_FRAMES)
}

/// A frame as the merger needs it.
///
/// Why `keyed` and `skip` side by side and not one `Result<Keyed,
/// SkipReason>`: as a `Result`, the skip reason took the niche of
/// `ports_truncated` and overlapped the key's first byte, and the reader
/// wrote each frame into its batch as that byte alone and the key's other
/// 39 bytes copied from the dissection on its stack by loads that straddle
/// the stores that had just written them. The store buffer cannot forward
/// such a load, and the one that ended the copy held a tenth to a fifth
/// of the reader's samples draining a full ring (BENCHMARKS.md, sixty-fourth
/// round). Side by side, the key is copied whole, from where it starts,
/// and the frame is still 96 bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveFrame {
    pub(crate) ts: Timestamp,
    pub(crate) wire_len: u32,
    pub(crate) captured: u32,
    pub(crate) link_type: LinkType,
    /// The frame's flow; [`Keyed::NONE`] when `skip` says why it has none.
    keyed: Keyed,
    skip: Option<SkipReason>,
    /// Byte range of the frame in the batch's byte buffer (with `-w`).
    pub(crate) bytes: (u32, u32),
}

impl LiveFrame {
    /// The frame's flow, or why it has none.
    #[inline]
    pub(crate) fn outcome(&self) -> Result<&Keyed, SkipReason> {
        match self.skip {
            None => Ok(&self.keyed),
            Some(reason) => Err(reason),
        }
    }
}

/// The work done on a keyed frame.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keyed {
    pub(crate) key: FlowKey,
    pub(crate) hash: u64,
    pub(crate) class: ClassId,
    pub(crate) ports_truncated: bool,
}

impl Keyed {
    /// What a skipped frame holds in place of a flow (never read).
    const NONE: Keyed = Keyed {
        key: FlowKey::ZERO,
        hash: 0,
        class: 0,
        ports_truncated: false,
    };
}

/// What a reader sends: frames in ring order, and the watermark: no later
/// frame of this reader has a timestamp below it.
#[derive(Debug, Default)]
pub(crate) struct ReaderBatch {
    pub(crate) reader: usize,
    pub(crate) frames: Vec<LiveFrame>,
    pub(crate) bytes: Vec<u8>,
    pub(crate) watermark_ns: i128,
}

/// What a reader thread needs.
pub(crate) struct Reader {
    pub(crate) index: usize,
    pub(crate) ring: PacketRing,
    pub(crate) iface: Interface,
    pub(crate) counters: Arc<super::LiveCounters>,
    pub(crate) iface_index: usize,
    pub(crate) classifier: Classifier,
    pub(crate) hasher: FlowHasher,
    pub(crate) dissector: Dissector,
    pub(crate) keep_bytes: bool,
    pub(crate) to_merger: Sender<ReaderBatch>,
    pub(crate) free: Receiver<ReaderBatch>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) retire_ms: u32,
    /// The ring's backlog, in blocks, at which a reader with a full queue
    /// sheds ([`crate::ingest::ShedAt::blocks`]).
    pub(crate) shed_at_blocks: u32,
    /// The frames a new batch has room for ([`batch_frames`]).
    pub(crate) batch_frames: usize,
    /// Where the reader runs.
    pub(crate) place: ReaderPlace,
}

/// Where a ring's reader runs, which decides how much it reads at a time
/// and how it sheds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReaderPlace {
    /// On a thread of its own (several rings, or `-w`): up to 64 blocks a
    /// step, and a batch shed when the merger's queue is full while the
    /// ring's backlog is at the `--shed-at` mark ([`Reader::send`]).
    Thread,
    /// On the merger's thread (the capture's only ring, no `-w`): a block
    /// a step, or a few small ones ([`INLINE_STEP_FRAMES`]), each frame
    /// released to the pipeline from the ring's block as it is read
    /// ([`Reader::read_inline`]), and a block shed whenever the ring's
    /// backlog, counting it, is at the mark ([`inline_shed_mark`]). There
    /// is no queue, so the ring is the only buffer; see `reader_place` for
    /// why.
    Inline,
}

/// What an inline step did.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InlineStep {
    /// No later frame of the ring has a time (ns) below this.
    pub(crate) watermark_ns: i128,
    /// False once the capture is stopping and the ring is empty: the
    /// reader is done.
    pub(crate) more: bool,
}

/// A reader's batch in the making, and the latest frame time it has read.
pub(crate) struct ReaderState {
    batch: ReaderBatch,
    scratch: Vec<u8>,
    max_ts: i128,
    /// Blocks read since the socket's counters were last read.
    blocks_unstated: u32,
}

/// Now on the wall clock, ns since the epoch: the clock of the kernel's
/// frame timestamps.
pub(crate) fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

impl Reader {
    fn counters(&self) -> &InterfaceCounters {
        &self.counters.interfaces[self.iface_index]
    }

    /// Adds the socket's counters (which the kernel resets on each read).
    fn read_stats(&self) {
        if let Ok(s) = self.ring.stats() {
            let c = self.counters();
            c.kernel_drops.fetch_add(s.drops, Ordering::Relaxed);
            c.kernel_freezes.fetch_add(s.freezes, Ordering::Relaxed);
            c.socket_packets.fetch_add(s.packets, Ordering::Relaxed);
        }
    }

    /// Runs until `stop` is set or the ring fails; drains what the ring
    /// holds before returning.
    pub(crate) fn run(mut self) {
        let mut state = self.start();
        while self.step(&mut state) {}
        self.finish();
    }

    /// The reader's last count of its socket's counters.
    pub(crate) fn finish(&self) {
        self.read_stats();
    }

    /// The reader's state between steps. Inline, it has no batch.
    pub(crate) fn start(&mut self) -> ReaderState {
        ReaderState {
            batch: match self.place {
                ReaderPlace::Thread => self.fresh(),
                ReaderPlace::Inline => ReaderBatch::default(),
            },
            scratch: Vec::new(),
            max_ts: i128::MIN,
            blocks_unstated: 0,
        }
    }

    /// Waits on the ring (up to its retire timeout) and returns whether
    /// the capture was already stopping before the wait. Inline, the
    /// merger calls it, then [`Reader::read_inline`].
    pub(crate) fn wait(&mut self) -> bool {
        let poll_ms = self.retire_ms.clamp(1, super::LONGEST_QUIET_TURN_MS) as i32;
        let stopping = self.stop.load(Ordering::Relaxed);
        match self.ring.wait(if stopping { 0 } else { poll_ms }) {
            Ok(_) => {}
            Err(e) => {
                self.counters.set_fatal(
                    crate::ingest::live::LiveError::from_os(&self.iface.name, "read the ring", e)
                        .to_string(),
                );
                self.stop.store(true, Ordering::Relaxed);
            }
        }
        stopping
    }

    /// After a step of `blocks` blocks: reads the socket's counters when
    /// due, and returns the step's watermark.
    fn end_step(&mut self, st: &mut ReaderState, blocks: u32) -> i128 {
        // The socket's counters (a system call) after every step of a
        // reader thread, as up to the sixty-fourth round; inline, where a
        // step is a block or a few, after 64 blocks or an empty ring.
        st.blocks_unstated += blocks;
        if self.place == ReaderPlace::Thread || blocks == 0 || st.blocks_unstated >= 64 {
            self.read_stats();
            st.blocks_unstated = 0;
        }
        // An empty ring: every frame received before the retire timeout
        // (plus slack) is already in a retired block, so the clock may
        // move on to there.
        if blocks == 0 {
            st.max_ts
                .max(now_ns() - i128::from(self.retire_ms) * 1_000_000 - 20_000_000)
        } else {
            st.max_ts
        }
    }

    /// A reader thread's step: waits on the ring, reads what it holds (at
    /// most 64 blocks) and sends it to the merger with the watermark.
    /// False once the capture is stopping and the ring is empty: the
    /// reader is done.
    ///
    /// Why never inlined: once `run` was its only caller, the compiler
    /// inlined it there, and a reader thread ran 6 instructions a frame
    /// more than before; as a function of its own, 0 to 2 (callgrind, two
    /// readers; BENCHMARKS.md, sixty-sixth round).
    #[inline(never)]
    fn step(&mut self, st: &mut ReaderState) -> bool {
        let stopping = self.wait();
        let mut blocks = 0;
        while blocks < 64 {
            let batch = &mut st.batch;
            let keep = self.keep_bytes;
            let taken = self.take_block(&mut st.scratch, &mut st.max_ts, false, |frame, data| {
                let mut frame = frame;
                if keep {
                    let start = batch.bytes.len() as u32;
                    batch.bytes.extend_from_slice(data);
                    frame.bytes = (start, batch.bytes.len() as u32);
                }
                batch.frames.push(frame);
            });
            if taken.is_none() {
                break;
            }
            blocks += 1;
            if st.batch.frames.len() >= SEND_AT_FRAMES {
                self.send(&mut st.batch, st.max_ts);
            }
        }
        let watermark = self.end_step(st, blocks);
        self.send(&mut st.batch, watermark);
        !(stopping && blocks == 0)
    }

    /// The inline reader's step after its [`Reader::wait`] (the merger
    /// loop's wait), given whether the capture was `stopping` before it:
    /// reads blocks until [`INLINE_STEP_FRAMES`] frames or 64 blocks, and
    /// calls `release` on each frame (with its time, ns) as the ring's
    /// walk reaches it. (Apart from the wait so that the merger reads the
    /// clock for `--max-delay` after the wait, not before it.)
    ///
    /// Why straight from the walk, and not through a batch as a reader
    /// thread sends them: a default block of small frames holds thousands,
    /// and their batch (96 bytes a frame, hundreds of KiB a block) was
    /// written by the walk only to be read back by the release a moment
    /// later, on the same core. Released from the walk, a frame is built
    /// on the stack and read from there: 8.1 % fewer instructions on the
    /// capture's thread draining a full ring (BENCHMARKS.md, sixty-sixth
    /// round). The price is that the block goes back to the kernel only
    /// once its frames are in the pipeline: one block of the ring, for as
    /// long as that takes.
    ///
    /// A block is shed, counted and not dissected, when the ring's
    /// backlog counting it reaches [`inline_shed_mark`] (never while the
    /// capture is stopping: then the ring is drained whole).
    pub(crate) fn read_inline(
        &mut self,
        st: &mut ReaderState,
        stopping: bool,
        mut release: impl FnMut(&LiveFrame, i128),
    ) -> InlineStep {
        let mark = (!stopping).then(|| inline_shed_mark(self.shed_at_blocks));
        let (mut blocks, mut frames) = (0, 0u64);
        while blocks < 64 && frames < INLINE_STEP_FRAMES as u64 {
            let shed = mark.is_some_and(|mark| self.ring.backlog_reaches(mark));
            let Some(n) = self.take_block(&mut st.scratch, &mut st.max_ts, shed, |frame, _| {
                release(&frame, frame.ts.as_nanos());
            }) else {
                break;
            };
            blocks += 1;
            frames += u64::from(n);
            if shed {
                // Read and counted as any block is (so the interface's
                // figures are those a reader thread gives), then shed.
                self.counters()
                    .shed
                    .fetch_add(u64::from(n), Ordering::Relaxed);
            }
        }
        InlineStep {
            watermark_ns: self.end_step(st, blocks),
            more: !(stopping && blocks == 0),
        }
    }

    fn fresh(&self) -> ReaderBatch {
        let mut b = self.free.try_recv().unwrap_or_else(|_| ReaderBatch {
            frames: Vec::with_capacity(self.batch_frames),
            ..ReaderBatch::default()
        });
        b.reader = self.index;
        b.frames.clear();
        b.bytes.clear();
        b
    }

    /// Sends the batch (or only its watermark, when empty).
    ///
    /// When the merger's queue is full, a batch with frames waits for room
    /// while the ring still has room: the ring is the capture's buffer,
    /// and a burst it can hold is worth keeping whole (the engine catches
    /// up once the burst is over, as tcpdump's does). Only once
    /// `--shed-at` of the ring's blocks wait unread, or the capture
    /// is stopping, are the batch's frames shed and counted: past that mark
    /// the ring must keep draining, or it would fill and the kernel would
    /// drop at random across flows instead, uncounted by flow class.
    fn send(&mut self, batch: &mut ReaderBatch, watermark: i128) {
        batch.watermark_ns = watermark;
        let mut out = std::mem::replace(batch, self.fresh());
        let shed_at = self.shed_at_blocks;
        let result = loop {
            match self.to_merger.try_send(out) {
                Err(TrySendError::Full(b))
                    if !b.frames.is_empty()
                        && !self.stop.load(Ordering::Relaxed)
                        && !self.ring.backlog_reaches(shed_at) =>
                {
                    match self.to_merger.send_timeout(b, ROOM_POLL) {
                        Ok(()) => break Ok(()),
                        Err(SendTimeoutError::Timeout(b)) => out = b,
                        Err(SendTimeoutError::Disconnected(b)) => {
                            break Err(TrySendError::Disconnected(b));
                        }
                    }
                }
                other => break other,
            }
        };
        match result {
            Ok(()) => {}
            Err(TrySendError::Full(mut b)) => {
                self.counters()
                    .shed
                    .fetch_add(b.frames.len() as u64, Ordering::Relaxed);
                b.frames.clear();
                b.bytes.clear();
                *batch = b;
                batch.reader = self.index;
                // Blocking send for the watermark alone would stall; the
                // next batch carries it.
            }
            Err(TrySendError::Disconnected(_)) => self.stop.store(true, Ordering::Relaxed),
        }
    }

    /// Walks the ring's next block if the kernel has retired it: counts
    /// every frame on the interface, restores its VLAN tag, and (unless
    /// `shed`) dissects, classifies and hashes it and calls `emit` with the
    /// frame and its bytes. Returns the block's frame count, or `None`
    /// when the block is not retired yet.
    ///
    /// Generic over `emit`, not `dyn`: the ring's walk is inlined here
    /// (`walk_block`), and so is `emit`, once per caller.
    #[inline(always)]
    fn take_block(
        &mut self,
        scratch: &mut Vec<u8>,
        max_ts: &mut i128,
        shed: bool,
        mut emit: impl FnMut(LiveFrame, &[u8]),
    ) -> Option<u32> {
        let counters = Arc::clone(&self.counters);
        let c = &counters.interfaces[self.iface_index];
        let link_type = self.iface.link_type;
        let iface = &self.iface;
        let (dissector, classifier) = (&self.dissector, &self.classifier);
        let hasher = self.hasher;
        let iface_name = Some(self.iface.name.as_str());
        let (mut received, mut bytes, mut supers, mut vlans) = (0u64, 0u64, 0u64, 0u64);
        let n = self.ring.read_block(|f| {
            let (data, wire_len) = match f.vlan {
                Some((tpid, tci)) if link_type == LinkType::ETHERNET => {
                    restore_vlan_tag(f.data, tpid, tci, scratch);
                    vlans += 1;
                    (&scratch[..], f.wire_len.saturating_add(TAG_BYTES))
                }
                _ => (f.data, f.wire_len),
            };
            received += 1;
            bytes += u64::from(wire_len);
            supers += u64::from(iface.is_super_frame(data, wire_len));
            *max_ts = (*max_ts).max(f.ts.as_nanos());
            if shed {
                return;
            }
            let (keyed, skip) = match dissector.dissect(link_type, data) {
                Ok(d) => (
                    Keyed {
                        key: d.key,
                        hash: hasher.hash(&d.key),
                        class: classifier.classify_on(&d.key, iface_name),
                        ports_truncated: d.ports_truncated,
                    },
                    None,
                ),
                Err(reason) => (Keyed::NONE, Some(reason)),
            };
            emit(
                LiveFrame {
                    ts: f.ts,
                    wire_len,
                    captured: data.len() as u32,
                    link_type,
                    keyed,
                    skip,
                    bytes: (0, 0),
                },
                data,
            );
        });
        c.received.fetch_add(received, Ordering::Relaxed);
        c.bytes.fetch_add(bytes, Ordering::Relaxed);
        c.super_frames.fetch_add(supers, Ordering::Relaxed);
        c.vlan_restored.fetch_add(vlans, Ordering::Relaxed);
        n
    }
}
