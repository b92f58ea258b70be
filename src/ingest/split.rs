//! Record boundaries inside a classic pcap file, found without reading it
//! from the start: how helper threads take a share of one large trace
//! ([`crate::ahead`]).
//!
//! A classic pcap file has no index and no sync marker: a record's place
//! is known only by walking every record before it. A split point is
//! therefore a *guess*: from a byte offset, the first place where a chain
//! of record headers is plausible ([`CHAIN`] of them in a row, or fewer
//! that end exactly at the file's end). Plausible means what a record the
//! reader takes on its fast path satisfies anyway: caplen within the
//! snaplen, at most the wire length, a timestamp fraction below one
//! second, and seconds within [`CHAIN_SPAN_SECS`] of the chain's first.
//!
//! Packet bytes can look like a header chain, so nothing here is trusted
//! for a result: whoever uses a guess must check it against the one walk
//! from the file's start. [`crate::ahead`] does: a record prepared from a
//! guessed walk is used only for the record the reader itself framed at
//! the same offset, whose bytes, and so whose key, are the same.
//!
//! ```
//! use flowsieve::dissect::Dissector;
//! use flowsieve::ingest::split::RecordShape;
//! use flowsieve::synth::{generate, SynthConfig};
//! let mut trace = Vec::new();
//! generate(&SynthConfig { flows: 50, packets: 400, ..SynthConfig::default() }, &mut trace).unwrap();
//! let shape = RecordShape::of_file(&trace).unwrap();
//! // The true boundaries, walked from the start.
//! let mut starts = Vec::new();
//! let mut at = shape.first_record();
//! while let Some(r) = shape.record_at(&trace, at) {
//!     starts.push(at);
//!     at += r.total;
//! }
//! assert_eq!(starts.len(), 400);
//! // A guess from the middle of the file lands on the next true one.
//! let dissector = Dissector::new(false);
//! let looks_like_a_packet = |data: &[u8]| dissector.dissect(shape.link_type(), data).is_ok();
//! let guess = shape
//!     .first_boundary(&trace, trace.len() / 2, trace.len(), looks_like_a_packet)
//!     .unwrap();
//! assert_eq!(guess, *starts.iter().find(|&&s| s >= trace.len() / 2).unwrap());
//! ```

use super::anomaly::AnomalyLog;
use super::frame::{ByteOrder, Framed};
use super::pcap::{
    FILE_HEADER_LEN, PcapFramer, PcapVariant, RH_CAPLEN, RH_TS_FRAC, RH_TS_SEC, RH_WIRE_LEN,
};
use super::{LinkType, Timestamp};

/// Record headers in a row that make a guess: a random 16 bytes pass the
/// caplen, wire-length and fraction tests together rarely, eight of them
/// chained by their own lengths almost never. A wrong guess costs only
/// work (see the module's comment), so this needs to be good, not perfect.
pub const CHAIN: usize = 8;

/// How far apart, in seconds, the timestamps of one guessed chain may be.
/// Real traces are in order to within far less; an hour leaves room for
/// merged captures whose clocks disagree.
pub const CHAIN_SPAN_SECS: u32 = 3600;

/// How a classic pcap file's records are laid out, read from its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordShape {
    order: ByteOrder,
    header_len: usize,
    caplen_limit: u32,
    units_per_sec: u32,
    nanos_per_unit: u32,
    link_type: LinkType,
}

/// One record as [`RecordShape::record_at`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordExtent {
    /// Bytes of header and data.
    pub total: usize,
    /// Offset of the data from the record's start.
    pub data_start: usize,
    /// Captured bytes.
    pub caplen: usize,
    /// Length on the wire.
    pub wire_len: u32,
    /// The timestamp.
    pub ts: Timestamp,
}

impl RecordExtent {
    const EMPTY: RecordExtent = RecordExtent {
        total: 0,
        data_start: 0,
        caplen: 0,
        wire_len: 0,
        ts: Timestamp::MIN,
    };
}

impl RecordShape {
    /// The shape of the classic pcap file whose bytes start `file`, or
    /// `None` for anything else (pcapng, compressed, a short or unknown
    /// header). The limits are the reader's own fast path's: the snaplen
    /// when set, within libpcap's plausibility limit.
    pub fn of_file(file: &[u8]) -> Option<RecordShape> {
        let magic = *file.first_chunk::<4>()?;
        let variant = PcapVariant::from_magic(magic)?;
        let mut framer = PcapFramer::new(variant);
        let mut ignored = AnomalyLog::default();
        match framer.next(file.get(..FILE_HEADER_LEN)?, 0, true, &mut ignored) {
            Ok(Framed::Skip { .. }) => {}
            _ => return None,
        }
        Some(RecordShape {
            order: ByteOrder {
                big_endian: variant.big_endian,
            },
            header_len: framer.record_header_len(),
            caplen_limit: framer.fast_caplen_limit(),
            units_per_sec: framer.units_per_sec(),
            nanos_per_unit: framer.nanos_per_unit(),
            link_type: framer.link_type(),
        })
    }

    /// Where the first record starts: right after the file header.
    pub fn first_record(&self) -> usize {
        FILE_HEADER_LEN
    }

    /// Bytes of a record header (16, or 24 in the modified format).
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// The file's link type.
    pub fn link_type(&self) -> LinkType {
        self.link_type
    }

    /// The record at `at` if it is one the reader's fast path would take:
    /// wholly in `file`, caplen within the limit and at most the wire
    /// length, fraction below one second. `None` otherwise, and never a
    /// panic, whatever `at` is.
    #[inline]
    pub fn record_at(&self, file: &[u8], at: usize) -> Option<RecordExtent> {
        let h = file.get(at..)?.first_chunk::<16>()?;
        let [sec, frac, caplen, wire_len] = self
            .order
            .u32s(h, [RH_TS_SEC, RH_TS_FRAC, RH_CAPLEN, RH_WIRE_LEN]);
        if caplen > self.caplen_limit || caplen > wire_len || frac >= self.units_per_sec {
            return None;
        }
        let total = self.header_len + caplen as usize;
        if file.len() - at < total {
            return None;
        }
        Some(RecordExtent {
            total,
            data_start: self.header_len,
            caplen: caplen as usize,
            wire_len,
            ts: Timestamp::from_checked(i64::from(sec), frac * self.nanos_per_unit),
        })
    }

    /// The first offset in `from..to` (and past the file header) where a
    /// plausible chain of records starts: [`CHAIN`] of them, or fewer that
    /// end exactly at the end of `file`, none of them empty, and at least
    /// three in four of them with data that `looks_like_a_packet` accepts.
    /// A guess (see the module's comment); `None` when there is none in the
    /// range.
    ///
    /// Why the data test: the headers alone are not enough. Where caplen
    /// equals the wire length (a full capture), a walk started four bytes
    /// into a record header reads the fraction as seconds, the caplen as
    /// the fraction and the wire length as the caplen, and lands four bytes
    /// into the next header: a chain as plausible as the true one, all the
    /// way to the end of the file. Its records' data start four bytes late,
    /// and do not dissect. So the caller passes its dissector, and the
    /// chain whose packets make sense wins.
    pub fn first_boundary(
        &self,
        file: &[u8],
        from: usize,
        to: usize,
        looks_like_a_packet: impl Fn(&[u8]) -> bool,
    ) -> Option<usize> {
        let to = to.min(file.len());
        (from.max(FILE_HEADER_LEN)..to).find(|&at| self.chain_at(file, at, &looks_like_a_packet))
    }

    /// Whether a plausible chain starts at `at`.
    fn chain_at(
        &self,
        file: &[u8],
        at: usize,
        looks_like_a_packet: &impl Fn(&[u8]) -> bool,
    ) -> bool {
        let mut chain = [(0usize, RecordExtent::EMPTY); CHAIN];
        let mut len = 0;
        let mut next = at;
        while len < CHAIN && next < file.len() {
            let Some(r) = self
                .record_at(file, next)
                .filter(|r| r.caplen > 0 && r.wire_len > 0)
            else {
                return false;
            };
            if let Some((_, first)) = chain.first().filter(|_| len > 0) {
                let apart = r.ts.as_nanos().abs_diff(first.ts.as_nanos());
                if apart > u128::from(CHAIN_SPAN_SECS) * 1_000_000_000 {
                    return false;
                }
            }
            chain[len] = (next, r);
            len += 1;
            next += r.total;
        }
        if len < CHAIN && next != file.len() {
            return false;
        }
        let packets = chain[..len]
            .iter()
            .filter(|(start, r)| {
                let from = start + r.data_start;
                file.get(from..from + r.caplen)
                    .is_some_and(looks_like_a_packet)
            })
            .count();
        packets * 4 >= len * 3
    }
}
