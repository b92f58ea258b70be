//! What a framer hands back to the reader, shared by both container formats.

use super::{LinkType, Timestamp};

/// One step of an incremental framer over a window of bytes.
#[derive(Debug)]
pub(crate) enum Framed {
    /// A packet record.
    Packet(FramedPacket),
    /// A block or header that carries no packet; skip `consumed` bytes.
    Skip { consumed: usize },
    /// The window holds fewer than `needed` bytes of the next unit and the
    /// source is not at end of file.
    NeedMore { needed: usize },
    /// Clean end of file.
    End,
}

/// A packet found by a framer; ranges are relative to the window.
#[derive(Debug)]
pub(crate) struct FramedPacket {
    pub consumed: usize,
    pub data_start: usize,
    pub caplen: usize,
    pub wire_len: u32,
    pub ts: Timestamp,
    pub timestamped: bool,
    pub link_type: LinkType,
    pub interface: u32,
}

/// Reads a `u16`/`u32`/`u64` at a fixed offset in a given byte order.
///
/// Callers check the length first; these never panic because they go through
/// `get` and return 0 on a short slice (which a caller that checked never
/// sees).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ByteOrder {
    pub big_endian: bool,
}

impl ByteOrder {
    #[inline]
    pub fn u16(self, b: &[u8], at: usize) -> u16 {
        match b.get(at..at + 2) {
            Some(s) => {
                let a = [s[0], s[1]];
                if self.big_endian {
                    u16::from_be_bytes(a)
                } else {
                    u16::from_le_bytes(a)
                }
            }
            None => 0,
        }
    }

    #[inline]
    pub fn u32(self, b: &[u8], at: usize) -> u32 {
        match b.get(at..at + 4) {
            Some(s) => {
                let a = [s[0], s[1], s[2], s[3]];
                if self.big_endian {
                    u32::from_be_bytes(a)
                } else {
                    u32::from_le_bytes(a)
                }
            }
            None => 0,
        }
    }

    #[inline]
    pub fn u64(self, b: &[u8], at: usize) -> u64 {
        match b.get(at..at + 8) {
            Some(s) => {
                let mut a = [0u8; 8];
                a.copy_from_slice(s);
                if self.big_endian {
                    u64::from_be_bytes(a)
                } else {
                    u64::from_le_bytes(a)
                }
            }
            None => 0,
        }
    }

    /// The `u32`s at offsets `at` of a header whose length was checked to
    /// hold them all (the type says it: `L` bytes, every `at + 4 <= L`),
    /// read at once and swapped in one branch rather than one branch a
    /// field (callgrind: 16 of a pcap record walk's instructions a record).
    /// The two fast framers' header read.
    #[inline(always)]
    pub fn u32s<const N: usize, const L: usize>(self, h: &[u8; L], at: [usize; N]) -> [u32; N] {
        let words = at.map(|at| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]));
        if self.big_endian {
            words.map(u32::swap_bytes)
        } else {
            words
        }
    }
}
