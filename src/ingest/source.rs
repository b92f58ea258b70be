//! Byte sources for the framers: a whole file memory-mapped (or held in
//! memory), or a decompressing stream read through a reusable buffer.

use memmap2::Mmap;
use std::io::{self, Read};

/// Bytes read from a stream per refill. Large enough to amortise the
/// decompressor's per-call cost, small enough to stay in L2.
const STREAM_CHUNK: usize = 1 << 20;

/// A whole file's bytes.
pub(crate) enum Whole {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Whole {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Whole::Mapped(m) => m,
            Whole::Owned(v) => v,
        }
    }
}

/// Where a reader's bytes come from.
pub(crate) enum Source {
    /// All bytes available at once; `pos` is the next unread byte.
    Whole { whole: Whole, pos: usize },
    /// A stream with a sliding buffer: `buf[start..end]` is unread.
    Stream {
        reader: Box<dyn Read + Send>,
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
        Source::Whole { whole, pos: 0 }
    }

    pub(crate) fn stream(reader: Box<dyn Read + Send>) -> Source {
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
            Source::Whole { whole, pos } => {
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
            Source::Whole { pos, .. } => *pos += n,
            Source::Stream { start, offset, .. } => {
                *start += n;
                *offset += n as u64;
            }
        }
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
        Ok(())
    }
}
