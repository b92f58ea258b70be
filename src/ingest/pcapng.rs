//! pcapng framing: several sections (each with its own byte order), several
//! interfaces with their own link types, `if_tsresol` and `if_tsoffset`
//! honoured, Enhanced, Simple and Obsolete packet blocks, and every other
//! block type skipped by its length.

use super::anomaly::AnomalyLog;
use super::error::{AnomalyKind, FrameError, PcapNgError, Position};
use super::frame::{ByteOrder, Framed, FramedPacket};
use super::{LinkType, Packet, Timestamp};

/// Section Header Block type; a byte palindrome, so it reads the same in both
/// orders.
pub const BLOCK_SECTION_HEADER: u32 = 0x0a0d_0d0a;
/// Interface Description Block type.
pub const BLOCK_INTERFACE: u32 = 0x0000_0001;
/// Obsolete Packet Block type.
pub const BLOCK_OBSOLETE_PACKET: u32 = 0x0000_0002;
/// Simple Packet Block type.
pub const BLOCK_SIMPLE_PACKET: u32 = 0x0000_0003;
/// Enhanced Packet Block type.
pub const BLOCK_ENHANCED_PACKET: u32 = 0x0000_0006;

/// The byte-order magic of a Section Header Block as written by its writer.
const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;

/// Every block starts with type (4) and total length (4) and ends with the
/// length again (4).
pub(crate) const BLOCK_FRAME_LEN: usize = 12;
pub(crate) const B_TYPE: usize = 0;
pub(crate) const B_LEN: usize = 4;
pub(crate) const B_BODY: usize = 8;
/// Offset of the byte-order magic in a Section Header Block.
const SHB_BOM: usize = 8;
/// Minimum Section Header Block: frame, magic, versions, section length.
const SHB_MIN_LEN: u32 = 28;

/// Interface Description Block body: link type (2), reserved (2), snaplen (4),
/// options.
const IDB_MIN_LEN: u32 = 20;
const IDB_LINKTYPE: usize = 0;
const IDB_SNAPLEN: usize = 4;
const IDB_OPTIONS: usize = 8;
const OPT_END: u16 = 0;
const OPT_IF_NAME: u16 = 2;
const OPT_IF_TSRESOL: u16 = 9;
const OPT_IF_TSOFFSET: u16 = 14;

/// Enhanced Packet Block body: interface (4), timestamp high (4) and low (4),
/// caplen (4), original length (4), data.
pub(crate) const EPB_MIN_LEN: u32 = 32;
pub(crate) const EPB_INTERFACE: usize = 0;
const EPB_TS_HIGH: usize = 4;
const EPB_TS_LOW: usize = 8;
pub(crate) const EPB_CAPLEN: usize = 12;
const EPB_WIRE_LEN: usize = 16;
const EPB_DATA: usize = 20;

/// Obsolete Packet Block body: interface (2), drops (2), then as the EPB.
const OPB_MIN_LEN: u32 = 32;
const OPB_INTERFACE: usize = 0;

/// Simple Packet Block body: original length (4), data.
const SPB_MIN_LEN: u32 = 16;
const SPB_WIRE_LEN: usize = 0;
const SPB_DATA: usize = 4;

/// No capture writes blocks this large; a bigger length is damage.
pub(crate) const MAX_BLOCK_LEN: u32 = 64 * 1024 * 1024;

/// Default resolution when an interface has no `if_tsresol`: microseconds.
const DEFAULT_UNITS_PER_SEC: u64 = 1_000_000;

#[derive(Clone, Copy, Debug)]
struct Interface {
    link_type: LinkType,
    snaplen: u32,
    units_per_sec: u64,
    ts_offset_secs: i64,
    /// `10^9 / units_per_sec` where that is exact (decimal resolutions
    /// down to 10^-9 s, binary ones down to 2^-9 s), else 0: the fast
    /// path's clock (see [`nanos_per_unit`]).
    nanos_per_unit: u64,
}

/// The nanoseconds in one unit of `units_per_sec`, where a unit is a whole
/// number of them; 0 otherwise (binary resolutions finer than 2^-9 s,
/// decimal ones finer than 10^-9 s).
///
/// Why: with `n = 10^9 / units_per_sec` exact, a remainder `r` of units is
/// `r * n` nanoseconds, which is what [`Timestamp::from_units`] computes as
/// `r * 10^9 / units_per_sec` through a 128-bit division (a library call,
/// 4 % of a pcapng replay's samples in a profile). The fast path takes only
/// interfaces where the two agree by construction.
fn nanos_per_unit(units_per_sec: u64) -> u64 {
    const NANOS: u64 = 1_000_000_000;
    if units_per_sec != 0 && NANOS.is_multiple_of(units_per_sec) {
        NANOS / units_per_sec
    } else {
        0
    }
}

/// Where an Enhanced Packet Block's captured bytes start.
pub(crate) const EPB_DATA_START: usize = B_BODY + EPB_DATA;

/// An Enhanced Packet Block taken by [`PcapNgFramer::fast_block`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastBlock {
    /// The block's length, all of it consumed.
    pub total: usize,
    pub caplen: usize,
    wire_len: u32,
    ts: Timestamp,
    link_type: LinkType,
    interface: u32,
}

impl FastBlock {
    /// The packet this block lends: its captured bytes `data`, on an
    /// interface of this name.
    #[inline(always)]
    pub(crate) fn lend<'a>(self, data: &'a [u8], interface_name: Option<&'a str>) -> Packet<'a> {
        Packet {
            ts: self.ts,
            timestamped: true,
            link_type: self.link_type,
            wire_len: self.wire_len,
            data,
            interface: self.interface,
            interface_name,
        }
    }
}

#[derive(Debug)]
pub(crate) struct PcapNgFramer {
    order: ByteOrder,
    interfaces: Vec<Interface>,
    /// Each interface's `if_name`, where it has a valid UTF-8 one (kept
    /// apart so that [`Interface`] stays `Copy`).
    names: Vec<Option<Box<str>>>,
    /// Blocks read so far (the current one is `blocks + 1`).
    blocks: u64,
    sections: u64,
    last_ts: Option<Timestamp>,
}

impl PcapNgFramer {
    pub(crate) fn new() -> PcapNgFramer {
        PcapNgFramer {
            order: ByteOrder { big_endian: false },
            interfaces: Vec::new(),
            names: Vec::new(),
            blocks: 0,
            sections: 0,
            last_ts: None,
        }
    }

    /// Sections started so far.
    pub(crate) fn sections(&self) -> u64 {
        self.sections
    }

    /// The current section's byte order.
    pub(crate) fn order(&self) -> ByteOrder {
        self.order
    }

    /// The link types of the current section's interfaces so far, in
    /// interface-number order.
    pub(crate) fn interface_link_types(&self) -> Vec<LinkType> {
        self.interfaces.iter().map(|i| i.link_type).collect()
    }

    pub(crate) fn next(
        &mut self,
        buf: &[u8],
        offset: u64,
        eof: bool,
        anomalies: &mut AnomalyLog,
    ) -> Result<Framed, FrameError> {
        let at = Position {
            record: self.blocks + 1,
            offset,
        };
        let err = |kind| Err(FrameError::PcapNg(at, kind));
        if buf.len() < BLOCK_FRAME_LEN {
            if !eof {
                return Ok(Framed::NeedMore {
                    needed: BLOCK_FRAME_LEN,
                });
            }
            if buf.is_empty() {
                return Ok(Framed::End);
            }
            return err(PcapNgError::TruncatedBlockHeader {
                have: buf.len(),
                need: BLOCK_FRAME_LEN,
            });
        }
        let block_type = self.order.u32(buf, B_TYPE);
        if block_type == BLOCK_SECTION_HEADER {
            let bom = ByteOrder { big_endian: false }.u32(buf, SHB_BOM);
            self.order = if bom == BYTE_ORDER_MAGIC {
                ByteOrder { big_endian: false }
            } else if bom.swap_bytes() == BYTE_ORDER_MAGIC {
                ByteOrder { big_endian: true }
            } else {
                return err(PcapNgError::BadByteOrderMagic { magic: bom });
            };
        }
        let len = self.order.u32(buf, B_LEN);
        if (len as usize) < BLOCK_FRAME_LEN {
            return err(PcapNgError::BlockTooShort {
                block_type,
                len,
                min: BLOCK_FRAME_LEN as u32,
            });
        }
        if !len.is_multiple_of(4) {
            return err(PcapNgError::BlockLengthNotAligned { len });
        }
        if len > MAX_BLOCK_LEN {
            return err(PcapNgError::BlockTooLarge {
                len,
                limit: MAX_BLOCK_LEN,
            });
        }
        let total = len as usize;
        if buf.len() < total {
            if !eof {
                return Ok(Framed::NeedMore { needed: total });
            }
            return err(PcapNgError::TruncatedBlock {
                len,
                remaining: buf.len() as u64,
            });
        }
        let trailing = self.order.u32(buf, total - 4);
        if trailing != len {
            return err(PcapNgError::TrailerMismatch {
                leading: len,
                trailing,
            });
        }
        let min = match block_type {
            BLOCK_SECTION_HEADER => SHB_MIN_LEN,
            BLOCK_INTERFACE => IDB_MIN_LEN,
            BLOCK_ENHANCED_PACKET => EPB_MIN_LEN,
            BLOCK_OBSOLETE_PACKET => OPB_MIN_LEN,
            BLOCK_SIMPLE_PACKET => SPB_MIN_LEN,
            _ => BLOCK_FRAME_LEN as u32,
        };
        if len < min {
            return err(PcapNgError::BlockTooShort {
                block_type,
                len,
                min,
            });
        }
        self.blocks += 1;
        let body = &buf[B_BODY..total - 4];
        match block_type {
            BLOCK_SECTION_HEADER => {
                self.sections += 1;
                self.interfaces.clear();
                self.names.clear();
                Ok(Framed::Skip { consumed: total })
            }
            BLOCK_INTERFACE => {
                let interface = self.interfaces.len() as u32;
                let mut iface = Interface {
                    link_type: LinkType(self.order.u16(body, IDB_LINKTYPE)),
                    snaplen: self.order.u32(body, IDB_SNAPLEN),
                    units_per_sec: DEFAULT_UNITS_PER_SEC,
                    ts_offset_secs: 0,
                    nanos_per_unit: 0,
                };
                let name = self.read_interface_options(
                    body.get(IDB_OPTIONS..).unwrap_or(&[]),
                    &mut iface,
                    |value| anomalies.record(at, AnomalyKind::BadTsResol { interface, value }),
                );
                iface.nanos_per_unit = nanos_per_unit(iface.units_per_sec);
                self.interfaces.push(iface);
                self.names.push(name);
                Ok(Framed::Skip { consumed: total })
            }
            BLOCK_ENHANCED_PACKET | BLOCK_OBSOLETE_PACKET => {
                let interface = if block_type == BLOCK_ENHANCED_PACKET {
                    self.order.u32(body, EPB_INTERFACE)
                } else {
                    u32::from(self.order.u16(body, OPB_INTERFACE))
                };
                let iface = self.interface(at, interface)?;
                let caplen = self.order.u32(body, EPB_CAPLEN);
                let room = len - EPB_MIN_LEN;
                if caplen > room {
                    return err(PcapNgError::CaplenExceedsBlock { caplen, room });
                }
                if iface.snaplen != 0 && caplen > iface.snaplen {
                    anomalies.record(
                        at,
                        AnomalyKind::CaplenExceedsSnaplen {
                            caplen,
                            snaplen: iface.snaplen,
                        },
                    );
                }
                let units = (u64::from(self.order.u32(body, EPB_TS_HIGH)) << 32)
                    | u64::from(self.order.u32(body, EPB_TS_LOW));
                let ts = Timestamp::from_units(units, iface.units_per_sec)
                    .saturating_add_secs(iface.ts_offset_secs);
                self.last_ts = Some(ts);
                Ok(Framed::Packet(FramedPacket {
                    consumed: total,
                    data_start: B_BODY + EPB_DATA,
                    caplen: caplen as usize,
                    wire_len: self.order.u32(body, EPB_WIRE_LEN),
                    ts,
                    timestamped: true,
                    link_type: iface.link_type,
                    interface,
                }))
            }
            BLOCK_SIMPLE_PACKET => {
                let iface = self.interface(at, 0)?;
                let wire_len = self.order.u32(body, SPB_WIRE_LEN);
                let room = len - SPB_MIN_LEN;
                let mut caplen = wire_len.min(room);
                if iface.snaplen != 0 {
                    caplen = caplen.min(iface.snaplen);
                }
                // A Simple Packet Block has no timestamp: it inherits the
                // previous packet's, and is left out of the time span.
                Ok(Framed::Packet(FramedPacket {
                    consumed: total,
                    data_start: B_BODY + SPB_DATA,
                    caplen: caplen as usize,
                    wire_len,
                    ts: self.last_ts.unwrap_or(Timestamp::ZERO),
                    timestamped: false,
                    link_type: iface.link_type,
                    interface: 0,
                }))
            }
            _ => Ok(Framed::Skip { consumed: total }),
        }
    }

    /// The common block in one step: an Enhanced Packet Block that lies
    /// wholly in `buf`, on a known interface whose clock ticks in whole
    /// nanoseconds (`nanos_per_unit` is not 0), whose
    /// lengths pass every check of [`PcapNgFramer::next`] and whose caplen
    /// is within the interface's snaplen. Anything else (another block
    /// type, damage, an anomaly to record, a block that runs past `buf`)
    /// returns `None`, changes nothing, and is left to `next`, which
    /// reports it. So this path skips work, never a check, and frames what
    /// `next` frames: the same lengths, time, link type and interface, with
    /// the block and time counted as `next` counts them.
    ///
    /// Why: `next` finds a block by a chain of checks, each through a
    /// bounds-checked read, then builds a `Framed` that the reader matches
    /// and converts, and it converts the time by a 128-bit division; a
    /// pcapng replay spent about a third of its source thread there
    /// (BENCHMARKS.md, thirty-third round). The fast path reads the seven
    /// header words at once ([`ByteOrder::u32s`], as the classic pcap fast
    /// path does).
    #[inline]
    pub(crate) fn fast_block(&mut self, buf: &[u8]) -> Option<FastBlock> {
        let h = buf.first_chunk::<EPB_DATA_START>()?;
        let [
            block_type,
            len,
            interface,
            ts_high,
            ts_low,
            caplen,
            wire_len,
        ] = self.order.u32s(
            h,
            [
                B_TYPE,
                B_LEN,
                B_BODY + EPB_INTERFACE,
                B_BODY + EPB_TS_HIGH,
                B_BODY + EPB_TS_LOW,
                B_BODY + EPB_CAPLEN,
                B_BODY + EPB_WIRE_LEN,
            ],
        );
        if block_type != BLOCK_ENHANCED_PACKET
            || len < EPB_MIN_LEN
            || !len.is_multiple_of(4)
            || len > MAX_BLOCK_LEN
        {
            return None;
        }
        let total = len as usize;
        if self.order.u32(buf.get(..total)?, total - 4) != len {
            return None;
        }
        let iface = self.interfaces.get(interface as usize)?;
        if caplen > len - EPB_MIN_LEN
            || (iface.snaplen != 0 && caplen > iface.snaplen)
            || iface.nanos_per_unit == 0
        {
            return None;
        }
        let units = (u64::from(ts_high) << 32) | u64::from(ts_low);
        // The two common resolutions divide by a constant (a multiply);
        // the quotient is cast as `Timestamp::from_units` casts it.
        let (secs, rem) = match iface.units_per_sec {
            1_000_000 => (units / 1_000_000, units % 1_000_000),
            1_000_000_000 => (units / 1_000_000_000, units % 1_000_000_000),
            per => (units / per, units % per),
        };
        // `rem < units_per_sec`, so `rem * nanos_per_unit < 10^9`.
        let ts = Timestamp::from_checked(secs as i64, (rem * iface.nanos_per_unit) as u32)
            .saturating_add_secs(iface.ts_offset_secs);
        let link_type = iface.link_type;
        self.blocks += 1;
        self.last_ts = Some(ts);
        Some(FastBlock {
            total,
            caplen: caplen as usize,
            wire_len,
            ts,
            link_type,
            interface,
        })
    }

    /// The packet a block taken by [`PcapNgFramer::fast_block`] lends: its
    /// captured bytes `data`, with its interface's name.
    #[inline(always)]
    pub(crate) fn lend<'a>(&'a self, b: FastBlock, data: &'a [u8]) -> Packet<'a> {
        b.lend(data, self.interface_name(b.interface))
    }

    fn interface(&self, at: Position, interface: u32) -> Result<Interface, FrameError> {
        self.interfaces
            .get(interface as usize)
            .copied()
            .ok_or(FrameError::PcapNg(
                at,
                PcapNgError::UnknownInterface {
                    interface,
                    count: self.interfaces.len(),
                },
            ))
    }

    /// The `if_name` of an interface of the current section, if it has one.
    pub(crate) fn interface_name(&self, interface: u32) -> Option<&str> {
        self.names.get(interface as usize)?.as_deref()
    }

    /// Reads `if_tsresol` and `if_tsoffset`, and returns `if_name` (a name
    /// that is not UTF-8 is ignored, trailing NULs trimmed). Options are
    /// advisory: a damaged option list ends option parsing, not the file.
    fn read_interface_options(
        &self,
        mut opts: &[u8],
        iface: &mut Interface,
        mut bad_tsresol: impl FnMut(u8),
    ) -> Option<Box<str>> {
        let mut name = None;
        while opts.len() >= 4 {
            let code = self.order.u16(opts, 0);
            let len = usize::from(self.order.u16(opts, 2));
            if code == OPT_END {
                break;
            }
            let Some(value) = opts.get(4..4 + len) else {
                break;
            };
            match (code, len) {
                (OPT_IF_TSRESOL, 1) => match units_per_sec(value[0]) {
                    Some(u) => iface.units_per_sec = u,
                    None => bad_tsresol(value[0]),
                },
                (OPT_IF_TSOFFSET, 8) => iface.ts_offset_secs = self.order.u64(value, 0) as i64,
                (OPT_IF_NAME, _) => {
                    name = std::str::from_utf8(value)
                        .ok()
                        .map(|n| n.trim_end_matches('\0'))
                        .filter(|n| !n.is_empty())
                        .map(Box::from)
                }
                _ => {}
            }
            let padded = (len + 3) & !3;
            opts = opts.get(4 + padded..).unwrap_or(&[]);
        }
        name
    }
}

/// Units per second for an `if_tsresol` byte: 10^-v when the top bit is
/// clear, 2^-(v & 0x7f) when set. `None` where that overflows 64 bits.
pub fn units_per_sec(tsresol: u8) -> Option<u64> {
    if tsresol & 0x80 == 0 {
        10u64.checked_pow(u32::from(tsresol))
    } else {
        1u64.checked_shl(u32::from(tsresol & 0x7f))
            .filter(|_| tsresol & 0x7f < 64)
    }
}
