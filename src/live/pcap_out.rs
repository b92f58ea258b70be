//! One `-w` file of a live capture: its header, then its frames.

use crate::ingest::live::Interface;
use crate::ingest::{LinkType, Timestamp};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// A writer that counts the bytes handed to it, which are the bytes the
/// file will hold once its buffer is flushed: `-C` compares that size
/// with its limit before each frame, as tcpdump compares
/// `pcap_dump_ftell`'s (which also counts what is still buffered).
pub(super) struct Counted<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

type FileOut = Counted<std::io::BufWriter<std::fs::File>>;

/// The `-w` file: classic pcap or pcapng, nanosecond timestamps.
pub(super) enum PcapOut {
    /// Classic pcap, nanosecond timestamps: one link type.
    ///
    /// Written with pcap-file's header and packet writers into a buffer
    /// this holds, rather than through its `PcapWriter`, which owns its
    /// buffer and has no way to flush it but to end the file: `-U` flushes
    /// after every round of frames.
    Pcap {
        out: FileOut,
        /// The header's snaplen, which no record may pass.
        snaplen: u32,
        /// The file's name in messages.
        name: String,
    },
    /// pcapng with one Interface Description Block per interface, each
    /// with its `if_name` (so that `iface` class rules and per-interface
    /// link types survive a replay) and `if_tsresol` 9.
    PcapNg {
        writer: pcap_file::pcapng::PcapNgWriter<FileOut>,
        /// The file's name in messages.
        name: String,
    },
}

impl PcapOut {
    /// A `.pcapng` name gets pcapng, anything else classic pcap (as
    /// tcpdump writes).
    pub(super) fn wants_pcapng(path: &Path) -> bool {
        path.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("pcapng"))
    }

    /// Creates `path` (or takes standard output for `-`), in pcapng when
    /// `pcapng` is set (the name `-w` gave ends in `.pcapng`: a split
    /// file's number comes after that), else in classic pcap.
    pub(super) fn create(
        path: &Path,
        pcapng: bool,
        interfaces: &[Interface],
        snaplen: u32,
    ) -> Result<PcapOut, String> {
        use pcap_file::pcapng::blocks::interface_description::{
            InterfaceDescriptionBlock, InterfaceDescriptionOption,
        };
        use pcap_file::{DataLink, Endianness, TsResolution};
        // `-w -` (or `/dev/stdout`) streams the capture into a pipe, as
        // `tcpdump -w -` does, through a duplicate of the descriptor:
        // opening `/dev/stdout` again would truncate a file that `>>`
        // redirected to and write it from its start, over what was there.
        let to_stdout = crate::report::writes_stdout(path);
        let name = if to_stdout {
            "standard output".to_owned()
        } else {
            path.display().to_string()
        };
        let failed = |e: &dyn std::fmt::Display| format!("{name}: cannot write the capture: {e}");
        let file = if to_stdout {
            crate::report::stdout_file()
        } else {
            std::fs::File::create(path)
        }
        .map_err(|e| format!("{name}: cannot create: {e}"))?;
        let snaplen = snaplen + crate::ingest::live::TAG_BYTES;
        if pcapng {
            let mut writer = pcap_file::pcapng::PcapNgWriter::with_endianness(
                Counted {
                    inner: std::io::BufWriter::new(file),
                    bytes: 0,
                },
                Endianness::Little,
            )
            .map_err(|e| failed(&e))?;
            for iface in interfaces {
                let idb = InterfaceDescriptionBlock {
                    linktype: DataLink::from(u32::from(iface.link_type.0)),
                    snaplen,
                    options: vec![
                        InterfaceDescriptionOption::IfName(iface.name.clone().into()),
                        InterfaceDescriptionOption::IfTsResol(9),
                    ],
                };
                writer.write_pcapng_block(idb).map_err(|e| failed(&e))?;
            }
            return Ok(PcapOut::PcapNg { writer, name });
        }
        let link = interfaces
            .first()
            .map_or(LinkType::ETHERNET, |i| i.link_type);
        let header = pcap_file::pcap::PcapHeader {
            snaplen,
            datalink: DataLink::from(u32::from(link.0)),
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::Little,
            ..pcap_file::pcap::PcapHeader::default()
        };
        let mut out = Counted {
            inner: std::io::BufWriter::new(file),
            bytes: 0,
        };
        header.write_to(&mut out).map_err(|e| failed(&e))?;
        Ok(PcapOut::Pcap { out, snaplen, name })
    }

    /// Writes one frame captured on interface `iface` (an index into the
    /// capture's interfaces).
    pub(super) fn write(
        &mut self,
        iface: usize,
        ts: Timestamp,
        wire_len: u32,
        data: &[u8],
    ) -> Result<(), String> {
        let t = Duration::new(ts.secs().max(0) as u64, ts.subsec_nanos());
        match self {
            PcapOut::Pcap { out, snaplen, name } => {
                pcap_file::pcap::PcapPacket::new(t, wire_len, data)
                    .write_to::<_, byteorder_slice::LittleEndian>(
                        out,
                        pcap_file::TsResolution::NanoSecond,
                        *snaplen,
                    )
                    .map(|_| ())
                    .map_err(|e| format!("{name}: cannot write the capture: {e}"))
            }
            PcapOut::PcapNg { writer, name } => {
                let epb = pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock {
                    interface_id: iface as u32,
                    timestamp: t,
                    original_len: wire_len,
                    data: std::borrow::Cow::Borrowed(data),
                    options: Vec::new(),
                };
                writer
                    .write_pcapng_block(epb)
                    .map(|_| ())
                    .map_err(|e| format!("{name}: cannot write the capture: {e}"))
            }
        }
    }

    /// The bytes the file holds, its buffer included.
    pub(super) fn bytes(&self) -> u64 {
        match self {
            PcapOut::Pcap { out, .. } => out.bytes,
            PcapOut::PcapNg { writer, .. } => writer.get_ref().bytes,
        }
    }

    /// Hands everything written so far to the file (`-U`).
    pub(super) fn flush(&mut self) -> Result<(), String> {
        let (flushed, name) = match self {
            PcapOut::Pcap { out, name, .. } => (out.flush(), name),
            PcapOut::PcapNg { writer, name } => (writer.get_mut().flush(), name),
        };
        flushed.map_err(|e| format!("{name}: cannot write the capture: {e}"))
    }

    /// Flushes the file and closes it.
    pub(super) fn finish(self) -> Result<(), String> {
        let (flushed, name) = match self {
            PcapOut::Pcap { mut out, name, .. } => (out.flush(), name),
            PcapOut::PcapNg { writer, name } => (writer.into_inner().flush(), name),
        };
        flushed.map_err(|e| format!("{name}: cannot write the capture: {e}"))
    }
}
