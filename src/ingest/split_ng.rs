//! Block boundaries inside a pcapng file, found without reading it from
//! the start: how helper threads take a share of one large pcapng trace
//! ([`crate::ahead`]), as [`super::split`] does for classic pcap.
//!
//! A pcapng block says its length twice, at its start and at its end, and
//! every block starts at a multiple of four bytes from the file's start
//! (the first Section Header Block is at 0, and every length is a multiple
//! of four). So a split point is found by trying the aligned offsets from
//! it: a block of a type the specification names, whose trailing length
//! equals its leading one, followed by [`CHAIN`] such blocks in a row (or
//! fewer that end exactly at the file's end; the same number as classic
//! pcap's guess asks). Random bytes pass the type
//! and the double length rarely, eight chained blocks almost never.
//!
//! Unlike classic pcap's guess, this one does not ask that the packets
//! dissect. There, a walk started four bytes into a record header can
//! chain as well as the true one (see [`super::split`]), and only the data
//! tells them apart; a pcapng block's two lengths four bytes apart do not
//! line up that way. A data test here would only push guesses past runs of
//! packets without a flow key (ARP, spanning tree), which on the shared
//! Wireshark sample mix put more than half of the guesses a few blocks
//! late.
//!
//! Still a *guess*, and never trusted for a result (see [`super::split`]):
//! [`crate::ahead`] takes what a helper prepared only for a packet the
//! reader framed itself whose captured bytes are the very same (the same
//! offset and length in the file) and whose interface the helper took for
//! the same (link type, and name where the classifier reads names). A
//! helper reads interfaces from the file's first section only
//! ([`BlockShape::of_file`]); in a later section, an interface that
//! differs is a miss, never a wrong answer.
//!
//! ```
//! use flowsieve::ingest::split_ng::BlockShape;
//! use flowsieve::synth::{generate, OutputFormat, SynthConfig};
//! let cfg = SynthConfig { flows: 50, packets: 400, format: OutputFormat::PcapNg, ..SynthConfig::default() };
//! let mut trace = Vec::new();
//! generate(&cfg, &mut trace).unwrap();
//! let shape = BlockShape::of_file(&trace).unwrap();
//! // The true packet blocks, walked from the first one.
//! let mut starts = Vec::new();
//! let mut at = shape.first_record();
//! while let Some(b) = shape.block_at(&trace, at) {
//!     if b.packet.is_some() {
//!         starts.push(at);
//!     }
//!     at += b.total;
//! }
//! assert_eq!(starts.len(), 400);
//! // A guess from the middle of the file lands on the next true block.
//! let guess = shape.first_boundary(&trace, trace.len() / 2, trace.len()).unwrap();
//! assert_eq!(guess, *starts.iter().find(|&&s| s >= trace.len() / 2).unwrap());
//! ```

use super::LinkType;
use super::anomaly::AnomalyLog;
use super::frame::{ByteOrder, Framed};
use super::pcapng::{
    B_BODY, B_LEN, B_TYPE, BLOCK_ENHANCED_PACKET, BLOCK_FRAME_LEN, BLOCK_INTERFACE,
    BLOCK_OBSOLETE_PACKET, BLOCK_SECTION_HEADER, BLOCK_SIMPLE_PACKET, EPB_CAPLEN, EPB_DATA_START,
    EPB_INTERFACE, EPB_MIN_LEN, MAX_BLOCK_LEN, PcapNgFramer,
};
use super::split::CHAIN;

/// Blocks every pcapng block starts on a multiple of.
const ALIGN: usize = 4;

/// The block types a chain may hold: those the pcapng specification
/// defines, the Section Header Block aside (a helper's walk ends at a new
/// section, whose interfaces it does not know).
const KNOWN_TYPES: [u32; 9] = [
    BLOCK_INTERFACE,
    BLOCK_OBSOLETE_PACKET,
    BLOCK_SIMPLE_PACKET,
    0x0000_0004, // Name Resolution Block
    0x0000_0005, // Interface Statistics Block
    BLOCK_ENHANCED_PACKET,
    0x0000_000a, // Decryption Secrets Block
    0x0000_0bad, // Custom Block (may be copied)
    0x4000_0bad, // Custom Block (not to be copied)
];

/// How a pcapng file's first section lays its blocks out: its byte order
/// and its interfaces, read from the blocks before the first packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockShape {
    order: ByteOrder,
    /// Each interface of the first section: link type and `if_name`.
    interfaces: Vec<(LinkType, Option<Box<str>>)>,
    /// Where the first block after the section's header blocks starts.
    first_record: usize,
}

/// The packet an Enhanced Packet Block holds, as [`BlockShape::block_at`]
/// found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPacket {
    /// Offset of the captured bytes from the block's start.
    pub data_start: usize,
    /// Captured bytes.
    pub caplen: usize,
    /// The interface number the block names (one of the first section's).
    pub interface: u32,
    /// That interface's link type.
    pub link_type: LinkType,
}

/// One block as [`BlockShape::block_at`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockExtent {
    /// Bytes of the whole block.
    pub total: usize,
    /// The packet, for an Enhanced Packet Block on a known interface.
    pub packet: Option<BlockPacket>,
}

impl BlockShape {
    /// The shape of the pcapng file whose bytes start `file`, read from its
    /// first Section Header Block and the Interface Description Blocks
    /// that follow it; `None` for anything else (classic pcap, compressed,
    /// a damaged or short header).
    pub fn of_file(file: &[u8]) -> Option<BlockShape> {
        let first_type = u32::from_le_bytes(*file.first_chunk::<4>()?);
        if first_type != BLOCK_SECTION_HEADER {
            return None;
        }
        let mut framer = PcapNgFramer::new();
        let mut ignored = AnomalyLog::default();
        let mut at = 0usize;
        loop {
            let rest = file.get(at..)?;
            // The header blocks end at the first block that is neither an
            // interface nor the first section's header.
            let block_type = framer.order().u32(rest, B_TYPE);
            let header_block = (block_type == BLOCK_SECTION_HEADER && at == 0)
                || (block_type == BLOCK_INTERFACE && at > 0);
            if !header_block || rest.len() < BLOCK_FRAME_LEN {
                break;
            }
            match framer.next(rest, at as u64, true, &mut ignored) {
                Ok(Framed::Skip { consumed }) => at += consumed,
                _ => return None,
            }
        }
        let interfaces = framer
            .interface_link_types()
            .into_iter()
            .enumerate()
            .map(|(i, link)| (link, framer.interface_name(i as u32).map(Box::from)))
            .collect();
        Some(BlockShape {
            order: framer.order(),
            interfaces,
            first_record: at,
        })
    }

    /// Where the first block after the section's header blocks starts.
    pub fn first_record(&self) -> usize {
        self.first_record
    }

    /// Offset of an Enhanced Packet Block's captured bytes from its start.
    pub fn header_len(&self) -> usize {
        EPB_DATA_START
    }

    /// The first section's interfaces: link type and `if_name`, by number.
    pub fn interfaces(&self) -> &[(LinkType, Option<Box<str>>)] {
        &self.interfaces
    }

    /// The block at `at` if it is whole in `file`, of a type the
    /// specification defines (not a section header), with a length the
    /// reader takes (at least 12 bytes, a multiple of four, at most 64
    /// MiB) written alike at both ends; with its packet when it is an
    /// Enhanced Packet Block on one of the first section's interfaces whose
    /// caplen fits the block. `None` otherwise, and never a panic, whatever
    /// `at` is.
    #[inline]
    pub fn block_at(&self, file: &[u8], at: usize) -> Option<BlockExtent> {
        let rest = file.get(at..)?;
        // Out of `rest`, `u32` reads 0, which no check below lets through.
        let (block_type, len) = (self.order.u32(rest, B_TYPE), self.order.u32(rest, B_LEN));
        if !KNOWN_TYPES.contains(&block_type)
            || (len as usize) < BLOCK_FRAME_LEN
            || !len.is_multiple_of(ALIGN as u32)
            || len > MAX_BLOCK_LEN
        {
            return None;
        }
        let total = len as usize;
        let block = rest.get(..total)?;
        if self.order.u32(block, total - 4) != len {
            return None;
        }
        let packet = (block_type == BLOCK_ENHANCED_PACKET && len >= EPB_MIN_LEN)
            .then(|| {
                let interface = self.order.u32(block, B_BODY + EPB_INTERFACE);
                let caplen = self.order.u32(block, B_BODY + EPB_CAPLEN);
                let (link_type, _) = self.interfaces.get(interface as usize)?;
                (caplen <= len - EPB_MIN_LEN).then_some(BlockPacket {
                    data_start: EPB_DATA_START,
                    caplen: caplen as usize,
                    interface,
                    link_type: *link_type,
                })
            })
            .flatten();
        Some(BlockExtent { total, packet })
    }

    /// The first offset in `from..to` (a multiple of four, and past the
    /// header blocks) where a plausible chain of blocks starts:
    /// [`CHAIN`] of them, or fewer that end exactly at the end of `file`.
    /// A guess (see the module's comment); `None` when there is none in
    /// the range.
    pub fn first_boundary(&self, file: &[u8], from: usize, to: usize) -> Option<usize> {
        let to = to.min(file.len());
        let first = from.max(self.first_record).next_multiple_of(ALIGN);
        (first..to)
            .step_by(ALIGN)
            .find(|&at| self.chain_at(file, at))
    }

    /// Whether a plausible chain starts at `at`.
    fn chain_at(&self, file: &[u8], at: usize) -> bool {
        let mut next = at;
        for _ in 0..CHAIN {
            if next == file.len() {
                return true;
            }
            let Some(b) = self.block_at(file, next) else {
                return false;
            };
            next += b.total;
        }
        true
    }
}
