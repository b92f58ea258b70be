//! A thread that decompresses a trace ahead of its framer.
//!
//! Why: a replay's source thread is the one thread every packet passes
//! through, and decompressing a gzip trace there cost more than framing,
//! dissecting and hashing it. On a thread of its own the decompression runs
//! on whichever core has room: a gzip copy of the 1.5 M-packet
//! trace replays in 15 % less wall time on two cores (BENCHMARKS.md,
//! twelfth round).
//!
//! Plain files are not read ahead. There the work moved would be the
//! kernel's copy of the file, and on two cores that measured no faster:
//! the run is bound by the CPU time of all its threads, not by the source
//! thread alone, and the bytes, copied on another core, reached the
//! framer from a farther cache (same BENCHMARKS.md section).
//!
//! The chunks come back to the framer's side whole, with no second copy:
//! each chunk keeps [`FRONT`] bytes free before its data, and the unread
//! tail of the previous chunk (the start of a record that straddles the
//! two) is copied into that room. Only a tail longer than the room (a
//! record of more than [`FRONT`] bytes cut by a chunk's end) makes the
//! reader join the two by copying.

use crossbeam_channel::{Receiver, Sender, bounded};
use std::io::{self, Read};

/// Bytes of stream data a chunk holds at most: what each read asks the
/// decompressor for (gzip and zstd often give less).
pub(crate) const CHUNK: usize = 1 << 20;

/// Room kept free at the front of every chunk for the unread tail of the
/// chunk before it.
pub(crate) const FRONT: usize = 64 << 10;

/// Filled chunks that may wait for the framer. With the one being read
/// and the one being framed, about four MiB are in flight.
const AHEAD: usize = 2;

/// What the reading thread sends: a chunk and the end of its data, which
/// starts at [`FRONT`], or the error that ended the stream. The channel's
/// end is the stream's end. A chunk keeps its full length whatever a read
/// gave (decompressors give less than asked), so that refilling it never
/// zeroes its tail again.
type Filled = io::Result<(Vec<u8>, usize)>;

/// The framer's side of a stream read ahead on a thread of its own.
pub(crate) struct ReadAhead {
    filled: Receiver<Filled>,
    /// Chunks the framer is done with, for the thread to fill again.
    spare: Sender<Vec<u8>>,
}

impl ReadAhead {
    /// Starts a thread that reads `reader` ahead. When no thread can be
    /// started, gives the reader back, to be read in place.
    pub(crate) fn spawn(reader: Box<dyn Read + Send>) -> Result<ReadAhead, Box<dyn Read + Send>> {
        // The thread is started first and handed the reader after, so that a
        // failed start still has the reader to give back.
        let (hand_over, take) = bounded::<Box<dyn Read + Send>>(1);
        let (filled_tx, filled) = bounded::<Filled>(AHEAD);
        let (spare, spare_rx) = bounded::<Vec<u8>>(AHEAD + 2);
        let started = std::thread::Builder::new()
            .name("flowsieve-read".into())
            .spawn(move || {
                if let Ok(reader) = take.recv() {
                    read_chunks(reader, &filled_tx, &spare_rx);
                }
            });
        match started {
            Ok(_) => match hand_over.send(reader) {
                Ok(()) => Ok(ReadAhead { filled, spare }),
                Err(back) => Err(back.into_inner()),
            },
            Err(_) => Err(reader),
        }
    }

    /// The next chunk and the end of its data, which starts at [`FRONT`]:
    /// `Ok(None)` at the end of the stream, the read's error if one ended
    /// it.
    pub(crate) fn next_chunk(&self) -> io::Result<Option<(Vec<u8>, usize)>> {
        match self.filled.recv() {
            Ok(Ok(chunk)) => Ok(Some(chunk)),
            Ok(Err(e)) => Err(e),
            Err(_) => Ok(None),
        }
    }

    /// Hands a chunk back to be filled again (dropped when enough wait).
    pub(crate) fn recycle(&self, chunk: Vec<u8>) {
        let _ = self.spare.try_send(chunk);
    }
}

/// The reading thread's loop: fills chunks until the end of the stream, an
/// error, or the framer's side going away (a replay that stopped early),
/// whichever comes first. The thread is never joined: a stream such as a
/// pipe may block in `read` for as long as its writer likes, and the
/// framer's side must not wait for that when it stops early.
fn read_chunks(
    mut reader: Box<dyn Read + Send>,
    filled: &Sender<Filled>,
    spare: &Receiver<Vec<u8>>,
) {
    loop {
        // A fresh chunk comes zeroed from the allocator (fresh pages, no
        // memset); a recycled one has kept its length.
        let mut chunk = spare.try_recv().unwrap_or_else(|_| vec![0; FRONT + CHUNK]);
        if chunk.len() < FRONT + CHUNK {
            chunk.resize(FRONT + CHUNK, 0);
        }
        let n = loop {
            match reader.read(&mut chunk[FRONT..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        match n {
            Ok(0) => return,
            Ok(n) => {
                if filled.send(Ok((chunk, FRONT + n))).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = filled.send(Err(e));
                return;
            }
        }
    }
}
