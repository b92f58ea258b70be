//! Byte sources for the framers: a whole file memory-mapped (or held in
//! memory), or a stream through a sliding buffer: a plain file or standard
//! input read in place, a decompressor read ahead on a thread of its own.

use super::map_guard::{GuardedMap, NO_FAULT, TOUCH_AHEAD};
use super::read_ahead::{FRONT, ReadAhead};
use std::io::{self, Read};
use std::sync::atomic::{AtomicUsize, Ordering, compiler_fence};

/// How far ahead of the cursor a mapped source asks the CPU to prefetch (one
/// page). Records are walked strictly in order, but the map's pages are
/// scattered in physical memory, so the hardware prefetcher stops at each
/// 4 KiB page boundary; profiling showed the walk stalling on every record
/// header without this.
const PREFETCH_AHEAD: usize = 4096;

/// A mapped source hands consumed pages back to the kernel in steps of this
/// size, so resident memory stays flat however large the trace is.
const RELEASE_STEP: usize = 8 << 20;

/// Bytes read from a stream read in place (a plain file, standard input)
/// per refill. The kernel copies them into the buffer and the framer reads
/// them right after: at 256 KiB they are still in L2 when it does. 1 MiB
/// measured 1-3 % slower in wall time and 1-4 % in CPU time (BENCHMARKS.md,
/// twelfth round). The extra `read` calls cost little: about 850 for a
/// 222 MB trace. Decompressors, which want larger calls, are read ahead in
/// chunks of their own (`read_ahead::CHUNK`).
const STREAM_CHUNK: usize = 256 << 10;

/// A whole file's bytes.
pub(crate) enum Whole {
    Mapped(GuardedMap),
    Owned(Vec<u8>),
}

impl Whole {
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Whole::Mapped(m) => m.bytes(),
            Whole::Owned(v) => v,
        }
    }
}

/// What a guarded map's reader learns from a fault (`map_guard`).
pub(crate) enum MapFault {
    /// The file shrank: the source now ends at its new size (or at the
    /// cursor, if that is further), and the framer reports the shrink as
    /// it does for a buffered read.
    Shrunk,
    /// The file did not shrink: the page at this offset could not be read.
    Unreadable { offset: u64, source: io::Error },
}

/// Where a reader's bytes come from.
pub(crate) enum Source {
    /// All bytes available at once; `pos` is the next unread byte and
    /// `released` the end of the prefix handed back to the kernel.
    Whole {
        whole: Whole,
        pos: usize,
        released: usize,
        /// Where a guarded map's next touch starts (`usize::MAX` for bytes
        /// held in memory, which are never touched).
        touched: usize,
        /// The map's fault note (`map_guard`), or one that never changes
        /// for bytes held in memory: one load tells whether the bytes are
        /// sound, with no match on the kind of source.
        fault: &'static AtomicUsize,
    },
    /// A stream with a sliding buffer: `buf[start..end]` is unread.
    Stream {
        reader: StreamReader,
        buf: Vec<u8>,
        start: usize,
        end: usize,
        eof: bool,
        /// Stream offset of `buf[start]`.
        offset: u64,
    },
}

impl Source {
    pub(crate) fn whole(whole: Whole) -> Source {
        let (touched, fault) = match &whole {
            Whole::Mapped(m) => (0, m.fault_note()),
            Whole::Owned(_) => (usize::MAX, &NEVER_FAULTS),
        };
        Source::Whole {
            whole,
            pos: 0,
            released: 0,
            touched,
            fault,
        }
    }

    /// For a guarded map: makes its pages resident past `end` if they are
    /// not yet, and says whether the map is sound (no fault noted since
    /// the last [`Source::settle_map_fault`]); the reader checks it before
    /// lending a record that ends at `end`. Every other source is sound.
    ///
    /// Why past `end`, by [`PAST_RECORD`] at least: a file cut inside the
    /// record's last page faults nowhere in that page (the kernel reads its
    /// tail past the new end as zeros); only the pages wholly past the new
    /// end fault. So the page after the record's last one must be made
    /// resident too, for a cut inside the record to be noted before the
    /// record is lent.
    #[inline(always)]
    pub(crate) fn map_sound_to(&mut self, end: usize) -> bool {
        match self {
            Source::Whole {
                whole,
                touched,
                fault,
                ..
            } => {
                if end + PAST_RECORD > *touched {
                    *touched = touch(whole, *touched, end + TOUCH_AHEAD);
                }
                sound(fault)
            }
            Source::Stream { .. } => true,
        }
    }

    /// A whole source's bytes, all of them (`None` for a stream).
    pub(crate) fn whole_bytes(&self) -> Option<&[u8]> {
        match self {
            Source::Whole { whole, .. } => Some(whole.bytes()),
            Source::Stream { .. } => None,
        }
    }

    /// The bytes a whole source lends (`usize::MAX` for a stream).
    pub(crate) fn whole_len(&self) -> usize {
        match self {
            Source::Whole { whole, .. } => whole.bytes().len(),
            Source::Stream { .. } => usize::MAX,
        }
    }

    /// Takes a guarded map's noted fault, if any, and settles it: asks the
    /// file for its size, and if it shrank, ends the source there (or at
    /// the cursor, if that is further), so that framing goes on up to the
    /// new end and reports the shrink as a buffered read does.
    pub(crate) fn settle_map_fault(&mut self) -> Option<MapFault> {
        let Source::Whole {
            whole: Whole::Mapped(m),
            pos,
            ..
        } = self
        else {
            return None;
        };
        let at = m.take_fault()?;
        match m.file_len() {
            // A fault at or past the file's end is a shrink even when the
            // map already ends there: helper threads reading ahead
            // (`--dissect-threads`) walk the map as it was opened, and one
            // may touch a page past the end after this reader has cut the
            // map at an earlier fault. That page faulted because the file
            // is shorter, not because the device failed; taken for an I/O
            // error, it ended the file at a different record than a run
            // without helpers (`tests/pipeline.rs`,
            // `a_trace_truncated_during_a_replay_is_reported_as_damage`,
            // failed about one run in five).
            Ok(now) if now < m.bytes().len() as u64 || at as u64 >= now => {
                // `now` is below the map's length or at most `at`, so it
                // fits in usize.
                m.cut((now as usize).max(*pos));
                Some(MapFault::Shrunk)
            }
            Ok(_) => Some(MapFault::Unreadable {
                offset: at as u64,
                source: io::Error::other(
                    "the mapped file could not be read there, though it did not shrink \
                     (SIGBUS: an I/O error on the device)",
                ),
            }),
            Err(source) => Some(MapFault::Unreadable {
                offset: at as u64,
                source,
            }),
        }
    }

    /// A stream read in place: `read` calls on the framer's thread.
    pub(crate) fn stream(reader: Box<dyn Read + Send>) -> Source {
        Self::stream_from(StreamReader::InPlace(reader))
    }

    /// A stream read ahead on a thread of its own ([`ReadAhead`]), or in
    /// place when no thread can be started. For decompressors, whose work
    /// is worth a thread; see `read_ahead` for why plain files are not.
    pub(crate) fn read_ahead(reader: Box<dyn Read + Send>) -> Source {
        Self::stream_from(match ReadAhead::spawn(reader) {
            Ok(ahead) => StreamReader::Ahead(ahead),
            Err(reader) => StreamReader::InPlace(reader),
        })
    }

    fn stream_from(reader: StreamReader) -> Source {
        Source::Stream {
            reader,
            buf: Vec::new(),
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
        }
    }

    /// The unread bytes, the offset of the first, and whether they run to
    /// the end of the input.
    pub(crate) fn window(&self) -> (&[u8], u64, bool) {
        match self {
            Source::Whole { whole, pos, .. } => {
                let b = whole.bytes();
                (&b[(*pos).min(b.len())..], *pos as u64, true)
            }
            Source::Stream {
                buf,
                start,
                end,
                eof,
                offset,
                ..
            } => (&buf[*start..*end], *offset, *eof),
        }
    }

    /// Index into the underlying buffer of the first unread byte; stays valid
    /// for [`Source::slice`] until the next [`Source::fill`].
    pub(crate) fn cursor(&self) -> usize {
        match self {
            Source::Whole { pos, .. } => *pos,
            Source::Stream { start, .. } => *start,
        }
    }

    pub(crate) fn consume(&mut self, n: usize) {
        match self {
            Source::Whole { whole, pos, .. } => {
                *pos += n;
                prefetch_ahead(whole.bytes(), *pos);
            }
            Source::Stream { start, offset, .. } => {
                *start += n;
                *offset += n as u64;
            }
        }
    }

    /// What the reader's fast path may frame: the bytes at hand and the
    /// cursor into them (see [`RunView`]); `None` when a consumed range of
    /// a whole source is due for [`Source::release_consumed`] or a fault is
    /// noted (both are left to the general path, which settles them).
    ///
    /// A guarded map is first touched [`TOUCH_AHEAD`] past the cursor, so
    /// that a cut of the file ahead faults before the cursor gets there.
    /// The view's `frame_end` lies [`PAST_RECORD`] before the touch
    /// frontier: a run frames only records that end by it, where
    /// [`Source::map_sound_to`] would touch nothing more, so only the fault
    /// note is left to check before each record is lent. One record at a
    /// time (`next_packet`) frames in all the bytes and calls
    /// `map_sound_to` itself.
    #[inline]
    pub(crate) fn run_view(&mut self) -> Option<RunView<'_>> {
        match self {
            Source::Whole {
                whole,
                pos,
                released,
                touched,
                fault,
            } => {
                touch_ahead(whole, *pos, touched);
                let bytes = whole.bytes();
                let start_before = *released + RELEASE_STEP;
                (*pos < start_before && sound(fault)).then(|| RunView {
                    frame_end: bytes.len().min(touched.saturating_sub(PAST_RECORD)),
                    bytes,
                    at: *pos,
                    start_before,
                    fault,
                })
            }
            Source::Stream {
                buf, start, end, ..
            } => Some(RunView {
                bytes: buf.get(..*end).unwrap_or(&[]),
                at: *start,
                frame_end: *end,
                start_before: usize::MAX,
                fault: &NEVER_FAULTS,
            }),
        }
    }

    /// Drops the page mappings of everything consumed, in whole
    /// [`RELEASE_STEP`]s, so that a replay's resident set does not grow with
    /// the trace. Must only be called while no slice of the source is
    /// borrowed (the reader calls it at the start of `next_packet`, which
    /// takes `&mut self`, so every packet it lent before has been dropped).
    pub(crate) fn release_consumed(&mut self) {
        let Source::Whole {
            whole,
            pos,
            released,
            ..
        } = self
        else {
            return;
        };
        let upto = *pos / RELEASE_STEP * RELEASE_STEP;
        if upto <= *released {
            return;
        }
        #[cfg(unix)]
        if let Whole::Mapped(guarded) = whole {
            let map = guarded.mmap();
            // SAFETY: the map is private and read-only and nothing ever
            // writes to it, so MADV_DONTNEED only drops page-table entries: a
            // later read of the range faults the same file bytes back in. No
            // reference into `released..upto` is alive: it lies before the
            // cursor, and the caller holds `&mut self`, so no lent packet
            // slice exists.
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    *released,
                    upto - *released,
                )
            };
        }
        #[cfg(not(unix))]
        let _ = whole;
        *released = upto;
    }

    /// A slice of the underlying buffer by absolute index (from
    /// [`Source::cursor`]); empty if out of range, never a panic.
    pub(crate) fn slice(&self, from: usize, len: usize) -> &[u8] {
        let b: &[u8] = match self {
            Source::Whole { whole, .. } => whole.bytes(),
            Source::Stream { buf, .. } => buf,
        };
        from.checked_add(len)
            .and_then(|to| b.get(from..to))
            .unwrap_or(&[])
    }

    /// Makes at least `needed` unread bytes available, or reaches end of
    /// stream. A whole source has nothing more to give.
    pub(crate) fn fill(&mut self, needed: usize) -> io::Result<()> {
        let Source::Stream {
            reader,
            buf,
            start,
            end,
            eof,
            ..
        } = self
        else {
            return Ok(());
        };
        if *end - *start >= needed || *eof {
            return Ok(());
        }
        match reader {
            StreamReader::Ahead(ahead) => {
                while *end - *start < needed {
                    let Some((mut chunk, data_end)) = ahead.next_chunk()? else {
                        *eof = true;
                        break;
                    };
                    let tail = *end - *start;
                    if tail <= FRONT {
                        // The usual case: the unread tail moves into the
                        // chunk's free front, and the chunk becomes the
                        // buffer.
                        chunk[FRONT - tail..FRONT].copy_from_slice(&buf[*start..*end]);
                        let done = std::mem::replace(buf, chunk);
                        *start = FRONT - tail;
                        *end = data_end;
                        if done.capacity() > 0 {
                            ahead.recycle(done);
                        }
                    } else {
                        // A record longer than the front, cut by the
                        // chunk's end: join the two.
                        buf.copy_within(*start..*end, 0);
                        buf.truncate(tail);
                        buf.extend_from_slice(&chunk[FRONT..data_end]);
                        *start = 0;
                        *end = buf.len();
                        ahead.recycle(chunk);
                    }
                }
            }
            StreamReader::InPlace(reader) => {
                // Slide the unread bytes to the front, then grow to fit.
                buf.copy_within(*start..*end, 0);
                *end -= *start;
                *start = 0;
                let want = needed.max(STREAM_CHUNK);
                if buf.len() < want {
                    buf.resize(want, 0);
                }
                while *end < needed {
                    match reader.read(&mut buf[*end..]) {
                        Ok(0) => {
                            *eof = true;
                            break;
                        }
                        Ok(n) => *end += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(())
    }
}

/// The bytes a run of the reader's fast path frames records in
/// ([`Source::run_view`]): records start at `at`, each must start before
/// `start_before` and end by `frame_end`, and `fault` must note no fault
/// when a record is lent ([`RunView::sound`]). The run then consumes what
/// it framed with [`Source::consume`].
pub(crate) struct RunView<'s> {
    /// The underlying buffer (indices as [`Source::cursor`]'s).
    pub(crate) bytes: &'s [u8],
    /// The first unread byte.
    pub(crate) at: usize,
    /// No framed record may end past this.
    pub(crate) frame_end: usize,
    /// No record may start at or past this (a whole source's next release).
    pub(crate) start_before: usize,
    fault: &'static AtomicUsize,
}

impl RunView<'_> {
    /// True while the source's fault note is clear (always, but for a
    /// guarded map that faulted).
    #[inline(always)]
    pub(crate) fn sound(&self) -> bool {
        sound(self.fault)
    }

    /// Hints the CPU to fetch the bytes a page past `pos`, as
    /// [`Source::consume`] does for each record.
    #[inline(always)]
    pub(crate) fn prefetch_ahead(&self, pos: usize) {
        prefetch_ahead(self.bytes, pos);
    }
}

/// Where a stream's bytes come from.
pub(crate) enum StreamReader {
    /// Chunks read ahead by a thread of their own.
    Ahead(ReadAhead),
    /// `read` calls on the framer's own thread, into the buffer.
    InPlace(Box<dyn Read + Send>),
}

/// How far past a record's end a guarded map's pages must be resident
/// before the record is lent ([`Source::map_sound_to`]): one page of any
/// size up to 64 KiB.
const PAST_RECORD: usize = 64 << 10;

/// A fault note that never changes, for bytes held in memory.
static NEVER_FAULTS: AtomicUsize = AtomicUsize::new(NO_FAULT);

/// True while `fault` notes no fault. The handler's store happens during
/// one of this thread's own loads; the fence keeps the compiler from moving
/// this load before those loads.
#[inline(always)]
fn sound(fault: &AtomicUsize) -> bool {
    compiler_fence(Ordering::SeqCst);
    fault.load(Ordering::Relaxed) == NO_FAULT
}

/// Touches a guarded map's pages from `from` to `to`; where the next touch
/// starts. Bytes held in memory are never touched.
#[cold]
#[inline(never)]
fn touch(whole: &Whole, from: usize, to: usize) -> usize {
    match whole {
        Whole::Mapped(m) => m.touch(from, to),
        Whole::Owned(_) => usize::MAX,
    }
}

/// Makes a guarded map's pages resident up to [`TOUCH_AHEAD`] past `pos`
/// if they are not yet, moving the frontier `touched`.
#[inline(always)]
fn touch_ahead(whole: &Whole, pos: usize, touched: &mut usize) {
    let ahead = pos + TOUCH_AHEAD;
    if ahead > *touched {
        *touched = touch(whole, *touched, ahead);
    }
}

/// Hints the CPU to fetch the two cache lines [`PREFETCH_AHEAD`] past `pos`.
///
/// Why two: the walk calls this once a record, and a record of the
/// benchmark trace's 64-200 B packets spans 2.3 lines on average, so one
/// line a record left more than half of the lines to the hardware
/// prefetcher, which starts over at each page. The reader's first load of a
/// record header was then a fifth of its samples. With two, the reader took
/// 0.91 of the CPU with `--stages none` (BENCHMARKS.md, forty-eighth
/// round); a line a record for every line walked (a high-water mark) cost
/// more in the loop than it saved, and for 1,000-1,500 B packets, where
/// two lines are a sixth of a record, the hint is no slower.
#[inline(always)]
pub(crate) fn prefetch_ahead(bytes: &[u8], pos: usize) {
    let ahead = bytes.as_ptr().wrapping_add(pos + PREFETCH_AHEAD);
    prefetch(ahead);
    prefetch(ahead.wrapping_add(crate::prefetch::CACHE_LINE));
}

use crate::prefetch::prefetch;
