//! Classic pcap framing (`tcpdump` format), both byte orders, microsecond and
//! nanosecond timestamps, and the modified (Kuznetzov) variant with 24-byte
//! record headers.
//!
//! The framer never trusts a length before checking it against what is
//! actually in the window, so a damaged file ends in an error, never a panic,
//! an over-read or a loop.

use super::anomaly::AnomalyLog;
use super::error::{AnomalyKind, FrameError, PcapError, Position};
use super::frame::{ByteOrder, Framed, FramedPacket};
use super::{LinkType, Packet, Timestamp};

/// Length of the global file header.
pub const FILE_HEADER_LEN: usize = 24;
/// Offset of the snapshot length in the file header.
const FH_SNAPLEN: usize = 16;
/// Offset of the link-type ("network") field in the file header.
const FH_LINKTYPE: usize = 20;

/// Length of a standard record header.
pub const RECORD_HEADER_LEN: usize = 16;
/// Length of a modified (Kuznetzov) record header: the standard 16 bytes plus
/// interface index (4), protocol (2), packet type (1) and padding (1).
pub const MODIFIED_RECORD_HEADER_LEN: usize = 24;
pub(crate) const RH_TS_SEC: usize = 0;
pub(crate) const RH_TS_FRAC: usize = 4;
pub(crate) const RH_CAPLEN: usize = 8;
pub(crate) const RH_WIRE_LEN: usize = 12;

/// The smallest caplen limit, whatever the file's snaplen says: libpcap's
/// `MAXIMUM_SNAPLEN` (256 KiB), since many writers store snaplen 0 or a small
/// bogus value.
const MIN_CAPLEN_LIMIT: u32 = 256 * 1024;
/// The largest caplen accepted even when the snaplen claims more.
const MAX_CAPLEN_LIMIT: u32 = 64 * 1024 * 1024;

/// The low 16 bits of the link-type field are the link type; the upper bits
/// are reserved or carry the FCS length (libpcap's `LT_LINKTYPE`).
const LINKTYPE_MASK: u32 = 0x0000_ffff;

/// Which classic pcap variant a magic number announced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcapVariant {
    /// Big-endian byte order.
    pub big_endian: bool,
    /// Nanosecond timestamps.
    pub nanosecond: bool,
    /// The modified (Kuznetzov) record header.
    pub modified: bool,
}

impl PcapVariant {
    /// Recognises the four magic numbers in either byte order.
    pub fn from_magic(magic: [u8; 4]) -> Option<PcapVariant> {
        let le = u32::from_le_bytes(magic);
        let be = u32::from_be_bytes(magic);
        let classify = |m: u32| match m {
            0xa1b2_c3d4 => Some((false, false)),
            0xa1b2_3c4d => Some((true, false)),
            0xa1b2_cd34 => Some((false, true)),
            _ => None,
        };
        if let Some((nanosecond, modified)) = classify(le) {
            return Some(PcapVariant {
                big_endian: false,
                nanosecond,
                modified,
            });
        }
        classify(be).map(|(nanosecond, modified)| PcapVariant {
            big_endian: true,
            nanosecond,
            modified,
        })
    }
}

/// A record taken by [`PcapFramer::fast_record`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastRecord {
    /// Bytes of header and data.
    pub total: usize,
    /// Offset of the data from the record start.
    pub data_start: usize,
    pub caplen: usize,
    pub wire_len: u32,
    pub ts: Timestamp,
}

impl FastRecord {
    /// The packet this record lends: its captured bytes `data`, on a file
    /// of link type `link_type`.
    #[inline(always)]
    pub(crate) fn lend(self, link_type: LinkType, data: &[u8]) -> Packet<'_> {
        Packet {
            ts: self.ts,
            timestamped: true,
            link_type,
            wire_len: self.wire_len,
            data,
            interface: 0,
            interface_name: None,
        }
    }
}

#[derive(Debug)]
pub(crate) struct PcapFramer {
    order: ByteOrder,
    units_per_sec: u32,
    /// 1000 for microsecond files, 1 for nanosecond files: precomputed so
    /// the per-record conversion is a multiply, not a division.
    nanos_per_unit: u32,
    record_header_len: usize,
    snaplen: u32,
    caplen_limit: u32,
    /// The largest caplen the fast path takes without comment: the snaplen
    /// (when set) within the plausibility limit. Anything above goes to the
    /// general path, which reports it.
    fast_caplen_limit: u32,
    link_type: LinkType,
    header_read: bool,
    /// Records read so far (the current one is `records + 1`).
    records: u64,
}

impl PcapFramer {
    pub(crate) fn new(variant: PcapVariant) -> PcapFramer {
        PcapFramer {
            order: ByteOrder {
                big_endian: variant.big_endian,
            },
            units_per_sec: if variant.nanosecond {
                1_000_000_000
            } else {
                1_000_000
            },
            nanos_per_unit: if variant.nanosecond { 1 } else { 1000 },
            record_header_len: if variant.modified {
                MODIFIED_RECORD_HEADER_LEN
            } else {
                RECORD_HEADER_LEN
            },
            snaplen: 0,
            caplen_limit: MIN_CAPLEN_LIMIT,
            fast_caplen_limit: 0,
            link_type: LinkType::ETHERNET,
            header_read: false,
            records: 0,
        }
    }

    /// The file's snapshot length (0 until the header is read).
    pub(crate) fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// The common case in one step: after the file header, a record that is
    /// wholly in `buf`, whose caplen is within the snaplen and whose
    /// timestamp fraction is in range. Anything else returns `None` and is
    /// left to [`PcapFramer::next`], which reports damage and anomalies; so
    /// this path only skips work, never a check.
    #[inline]
    pub(crate) fn fast_record(&mut self, buf: &[u8]) -> Option<FastRecord> {
        if !self.header_read {
            return None;
        }
        let h = buf.first_chunk::<RECORD_HEADER_LEN>()?;
        let [ts_sec, frac, caplen, wire_len] = self
            .order
            .u32s(h, [RH_TS_SEC, RH_TS_FRAC, RH_CAPLEN, RH_WIRE_LEN]);
        if caplen > self.fast_caplen_limit || frac >= self.units_per_sec {
            return None;
        }
        let total = self.record_header_len + caplen as usize;
        if buf.len() < total {
            return None;
        }
        self.records += 1;
        Some(FastRecord {
            total,
            data_start: self.record_header_len,
            caplen: caplen as usize,
            wire_len,
            ts: Timestamp::from_checked(i64::from(ts_sec), frac * self.nanos_per_unit),
        })
    }

    /// Frames the next unit from `buf`, whose first byte is at `offset` in
    /// the file.
    pub(crate) fn next(
        &mut self,
        buf: &[u8],
        offset: u64,
        eof: bool,
        anomalies: &mut AnomalyLog,
    ) -> Result<Framed, FrameError> {
        if !self.header_read {
            return self.file_header(buf, eof, anomalies);
        }
        let at = Position {
            record: self.records + 1,
            offset,
        };
        let hl = self.record_header_len;
        if buf.len() < hl {
            if !eof {
                return Ok(Framed::NeedMore { needed: hl });
            }
            if buf.is_empty() {
                return Ok(Framed::End);
            }
            return Err(FrameError::Pcap(
                at,
                PcapError::TruncatedRecordHeader {
                    have: buf.len(),
                    need: hl,
                },
            ));
        }
        let caplen = self.order.u32(buf, RH_CAPLEN);
        if caplen > self.caplen_limit {
            return Err(FrameError::Pcap(
                at,
                PcapError::ImplausibleCaplen {
                    caplen,
                    snaplen: self.snaplen,
                    limit: self.caplen_limit,
                },
            ));
        }
        let total = hl + caplen as usize;
        if buf.len() < total {
            if !eof {
                return Ok(Framed::NeedMore { needed: total });
            }
            return Err(FrameError::Pcap(
                at,
                PcapError::TruncatedRecordData {
                    caplen,
                    remaining: (buf.len() - hl) as u64,
                },
            ));
        }
        self.records += 1;
        if self.snaplen != 0 && caplen > self.snaplen {
            anomalies.record(
                at,
                AnomalyKind::CaplenExceedsSnaplen {
                    caplen,
                    snaplen: self.snaplen,
                },
            );
        }
        let secs = i64::from(self.order.u32(buf, RH_TS_SEC));
        let frac = self.order.u32(buf, RH_TS_FRAC);
        let ts = if frac < self.units_per_sec {
            Timestamp::from_checked(secs, frac * self.nanos_per_unit)
        } else {
            anomalies.record(
                at,
                AnomalyKind::TimestampFractionOutOfRange {
                    frac,
                    limit: self.units_per_sec,
                },
            );
            Timestamp::from_parts(secs, u64::from(frac), u64::from(self.units_per_sec))
        };
        Ok(Framed::Packet(FramedPacket {
            consumed: total,
            data_start: hl,
            caplen: caplen as usize,
            wire_len: self.order.u32(buf, RH_WIRE_LEN),
            ts,
            timestamped: true,
            link_type: self.link_type,
            interface: 0,
        }))
    }

    fn file_header(
        &mut self,
        buf: &[u8],
        eof: bool,
        anomalies: &mut AnomalyLog,
    ) -> Result<Framed, FrameError> {
        if buf.len() < FILE_HEADER_LEN {
            if !eof {
                return Ok(Framed::NeedMore {
                    needed: FILE_HEADER_LEN,
                });
            }
            return Err(FrameError::Pcap(
                Position {
                    record: 0,
                    offset: 0,
                },
                PcapError::TruncatedFileHeader { len: buf.len() },
            ));
        }
        self.snaplen = self.order.u32(buf, FH_SNAPLEN);
        self.caplen_limit = self.snaplen.clamp(MIN_CAPLEN_LIMIT, MAX_CAPLEN_LIMIT);
        self.fast_caplen_limit = if self.snaplen == 0 {
            self.caplen_limit
        } else {
            self.snaplen.min(self.caplen_limit)
        };
        let raw = self.order.u32(buf, FH_LINKTYPE);
        let used = (raw & LINKTYPE_MASK) as u16;
        if raw & !LINKTYPE_MASK != 0 {
            anomalies.record(
                Position {
                    record: 0,
                    offset: FH_LINKTYPE as u64,
                },
                AnomalyKind::LinkTypeReservedBits { raw, used },
            );
        }
        self.link_type = LinkType(used);
        self.header_read = true;
        Ok(Framed::Skip {
            consumed: FILE_HEADER_LEN,
        })
    }

    /// The file's link type (meaningful once the header is read).
    pub(crate) fn link_type(&self) -> LinkType {
        self.link_type
    }

    /// Timestamp units per second: 10^6, or 10^9 in a nanosecond file.
    pub(crate) fn units_per_sec(&self) -> u32 {
        self.units_per_sec
    }

    /// Nanoseconds per timestamp unit: 1000, or 1 in a nanosecond file.
    pub(crate) fn nanos_per_unit(&self) -> u32 {
        self.nanos_per_unit
    }

    /// Bytes of a record header: 16, or 24 in the modified format.
    pub(crate) fn record_header_len(&self) -> usize {
        self.record_header_len
    }

    /// The largest caplen [`PcapFramer::fast_record`] takes (meaningful
    /// once the header is read).
    pub(crate) fn fast_caplen_limit(&self) -> u32 {
        self.fast_caplen_limit
    }
}
