//! The seeded synthetic trace generator behind `flowsieve gen-trace`.
//!
//! Flows get Zipf-distributed sizes: every flow has one packet, and the
//! remaining `packets - flows` are drawn by Zipf rank with the configured
//! exponent, ranks mapped onto flows in random order, so the trace has
//! exactly `flows` distinct keys and a heavy tail. Packet arrival times are
//! sorted uniform draws over the span, and each flow's packets are spread
//! over it in random order. Frames carry valid IPv4/IPv6 + TCP/UDP/ICMP
//! headers (checksums included) built with etherparse, optionally 802.1Q
//! tagged, with zero payload; only the first `snaplen` bytes are stored, as a
//! header-only backbone capture would.
//!
//! The same configuration and seed always produce the same bytes (ChaCha8 is
//! the generator, whose output is fixed across platforms and versions).

use crate::dissect::{FlowKey, IpVersion};
use crate::hash::flow_hash;
use etherparse::{
    EtherType, Ethernet2Header, IcmpEchoHeader, Icmpv4Header, Icmpv4Type, Icmpv6Header, Icmpv6Type,
    IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, SingleVlanHeader, TcpHeader, UdpHeader,
    VlanId, VlanPcp,
};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::{DataLink, Endianness, TsResolution};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};
use std::io::Write;
use std::time::Duration;

/// Output container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// Classic pcap, microsecond timestamps.
    Pcap,
    /// Classic pcap, nanosecond timestamps.
    PcapNs,
    /// pcapng with one Ethernet interface and `if_tsresol` = 9 (ns).
    PcapNg,
}

/// How frame lengths are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeModel {
    /// Per protocol: TCP mostly bare ACKs and full-MTU segments, UDP mostly
    /// small, ICMP echo at 98 bytes.
    Realistic,
    /// Uniform frame length in `[min, max]` bytes (raised to the headers'
    /// length where a flow's headers are longer).
    Uniform {
        /// The minimum.
        min: u32,
        /// The maximum.
        max: u32,
    },
}

/// Why a generator mini-language value could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SynthParseError(String);

impl std::str::FromStr for SizeModel {
    type Err = SynthParseError;
    /// `realistic`, or `MIN-MAX` frame bytes.
    ///
    /// ```
    /// use flowsieve::synth::SizeModel;
    /// assert_eq!("64-200".parse(), Ok(SizeModel::Uniform { min: 64, max: 200 }));
    /// assert!("64-".parse::<SizeModel>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<SizeModel, SynthParseError> {
        if s.trim() == "realistic" {
            return Ok(SizeModel::Realistic);
        }
        let bad = || {
            SynthParseError(format!(
                "sizes: expected `realistic` or MIN-MAX frame bytes, got {s:?}"
            ))
        };
        let (a, b) = s.split_once('-').ok_or_else(bad)?;
        let min: u32 = a.trim().parse().map_err(|_| bad())?;
        let max: u32 = b.trim().parse().map_err(|_| bad())?;
        Ok(SizeModel::Uniform { min, max })
    }
}

/// Relative weights of TCP, UDP and ICMP flows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProtoMix(pub [f64; 3]);

impl std::str::FromStr for ProtoMix {
    type Err = SynthParseError;
    /// Exactly three non-negative finite numbers `TCP,UDP,ICMP`, not all
    /// zero; any entry that is not a number is an error, never skipped.
    ///
    /// ```
    /// use flowsieve::synth::ProtoMix;
    /// assert_eq!("0.8,0.17,0.03".parse(), Ok(ProtoMix([0.8, 0.17, 0.03])));
    /// assert!("0.8,x,0.17,0.03".parse::<ProtoMix>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<ProtoMix, SynthParseError> {
        let bad = |why: &str| SynthParseError(format!("protocol mix {s:?}: {why}"));
        let parts: Vec<&str> = s.split(',').collect();
        if parts.len() != 3 {
            return Err(bad(&format!(
                "expected three numbers TCP,UDP,ICMP, got {}",
                parts.len()
            )));
        }
        let mut w = [0.0; 3];
        for (slot, part) in w.iter_mut().zip(&parts) {
            let v: f64 = part
                .trim()
                .parse()
                .map_err(|_| bad(&format!("{:?} is not a number", part.trim())))?;
            if !v.is_finite() || v < 0.0 {
                return Err(bad(&format!("{v} is not a non-negative weight")));
            }
            *slot = v;
        }
        if w.iter().sum::<f64>() <= 0.0 {
            return Err(bad("the weights are all zero"));
        }
        Ok(ProtoMix(w))
    }
}

impl std::fmt::Display for SizeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizeModel::Realistic => f.write_str("realistic"),
            SizeModel::Uniform { min, max } => write!(f, "{min}-{max}"),
        }
    }
}

impl std::fmt::Display for ProtoMix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{},{}", self.0[0], self.0[1], self.0[2])
    }
}

impl std::fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OutputFormat::Pcap => "pcap",
            OutputFormat::PcapNs => "pcap-ns",
            OutputFormat::PcapNg => "pcapng",
        })
    }
}

impl std::str::FromStr for OutputFormat {
    type Err = SynthParseError;
    /// `pcap`, `pcap-ns` or `pcapng`.
    fn from_str(s: &str) -> Result<OutputFormat, SynthParseError> {
        match s.trim() {
            "pcap" => Ok(OutputFormat::Pcap),
            "pcap-ns" => Ok(OutputFormat::PcapNs),
            "pcapng" => Ok(OutputFormat::PcapNg),
            other => Err(SynthParseError(format!(
                "format: expected pcap, pcap-ns or pcapng, got {other:?}"
            ))),
        }
    }
}

/// Generator settings.
#[derive(Clone, Debug)]
pub struct SynthConfig {
    /// Distinct flows.
    pub flows: u64,
    /// Packets in all.
    pub packets: u64,
    /// Zipf exponent of flow sizes (larger: heavier head).
    pub zipf_exponent: f64,
    /// Share of flows that are IPv6.
    pub ipv6_share: f64,
    /// Share of flows whose frames carry an 802.1Q tag.
    pub vlan_share: f64,
    /// Relative weights of TCP, UDP and ICMP flows.
    pub proto_weights: [f64; 3],
    /// Frame lengths.
    pub sizes: SizeModel,
    /// Bytes stored per frame (0: whole frames).
    pub snaplen: u32,
    /// Seconds since the epoch of the first possible arrival.
    pub start_secs: f64,
    /// Arrivals spread over this many seconds.
    pub span_secs: f64,
    /// Random seed.
    pub seed: u64,
    /// Output container.
    pub format: OutputFormat,
}

impl Default for SynthConfig {
    fn default() -> SynthConfig {
        SynthConfig {
            flows: 10_000,
            packets: 100_000,
            zipf_exponent: 1.1,
            ipv6_share: 0.2,
            vlan_share: 0.1,
            proto_weights: [0.8, 0.17, 0.03],
            sizes: SizeModel::Realistic,
            snaplen: 0,
            start_secs: 1_700_000_000.0,
            span_secs: 60.0,
            seed: 1,
            format: OutputFormat::Pcap,
        }
    }
}

/// The most flows a generated trace can have (flows are indexed by `u32`
/// and each costs about 100 bytes while generating).
pub const MAX_SYNTH_FLOWS: u64 = 1 << 28;
/// The most packets a generated trace can have (each costs 12 bytes of
/// ordering state while generating).
pub const MAX_SYNTH_PACKETS: u64 = 1 << 31;

/// Why a configuration cannot be generated.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("invalid generator setting: {setting}: {problem}")]
    /// A setting is out of its range: the setting as [`SynthConfig`]'s
    /// field (`zipf_exponent`, or `start_secs + span_secs` for the two
    /// together), and what is wrong with its value.
    Invalid {
        /// The field.
        setting: &'static str,
        /// What is wrong, with the value.
        problem: String,
    },
    #[error("invalid generator setting: {0}")]
    /// The Zipf sampler refused its parameters.
    Config(String),
    #[error("cannot write trace: {0}")]
    /// The output could not be written.
    Write(String),
    #[error("interrupted after {written} of {packets} packets")]
    /// The progress callback asked to stop.
    Interrupted {
        /// Packets written.
        written: u64,
        /// Packets asked for.
        packets: u64,
    },
}

/// How often (in packets) [`generate_with_progress`] reports.
pub const PROGRESS_EVERY: u64 = 1 << 16;

/// What was generated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthStats {
    /// Distinct flows.
    pub flows: u64,
    /// Packets in all.
    pub packets: u64,
    /// Packets of the largest flow.
    pub largest_flow: u64,
    /// Bytes on the wire.
    pub wire_bytes: u64,
    /// Bytes captured.
    pub captured_bytes: u64,
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Tcp,
    Udp,
    Icmp,
}

/// How many packets ahead the writing loop asks for its flow's memory.
const FLOW_PREFETCH_AHEAD: usize = 16;

/// One generated flow: what its frames are built from. Its addresses are
/// the key's, read back for each frame ([`Flow::addresses`]) rather than
/// kept a second time: a flood of 10 M flows holds 10 M of these, and
/// with the addresses beside the key each took 104 bytes, now 64.
#[derive(Clone, Debug)]
struct Flow {
    key: FlowKey,
    transport: Transport,
    vlan: Option<u16>,
    mac_src: [u8; 6],
    mac_dst: [u8; 6],
}

// A flood's memory is its flows': keep a flow to one line.
const _: () = assert!(std::mem::size_of::<Flow>() == 64);

/// A flow's addresses, as its frames' IP header writes them.
enum Addresses {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

impl Flow {
    /// The key's addresses, of its version (an IPv4 address is the low 32
    /// bits of the key's 128).
    fn addresses(&self) -> Addresses {
        let (s, d) = (self.key.src_bits(), self.key.dst_bits());
        if self.is_v6() {
            Addresses::V6(s.to_be_bytes(), d.to_be_bytes())
        } else {
            Addresses::V4((s as u32).to_be_bytes(), (d as u32).to_be_bytes())
        }
    }

    fn is_v6(&self) -> bool {
        self.key.version() == IpVersion::V6
    }
}

const WELL_KNOWN_TCP: [u16; 8] = [80, 443, 443, 443, 8080, 22, 25, 993];
const WELL_KNOWN_UDP: [u16; 5] = [53, 53, 443, 123, 5353];

impl SynthConfig {
    /// Checks every setting (sizes, shares, weights, and that the last
    /// arrival fits the container's timestamps) without generating.
    pub fn validate(&self) -> Result<(), SynthError> {
        check(self)
    }
}

fn check(cfg: &SynthConfig) -> Result<(), SynthError> {
    let bad =
        |setting: &'static str, problem: String| Err(SynthError::Invalid { setting, problem });
    // Flows are indexed by u32 in the packet order, and the generator
    // holds every flow and every packet's slot in memory.
    if !(1..=MAX_SYNTH_FLOWS).contains(&cfg.flows) {
        return bad(
            "flows",
            format!(
                "must be between 1 and {MAX_SYNTH_FLOWS} (got {})",
                cfg.flows
            ),
        );
    }
    if cfg.packets > MAX_SYNTH_PACKETS {
        return bad(
            "packets",
            format!("must be at most {MAX_SYNTH_PACKETS} (got {})", cfg.packets),
        );
    }
    if cfg.packets < cfg.flows {
        return bad(
            "packets",
            format!(
                "must be at least the number of flows (every flow has a packet): got {} packets for {} flows",
                cfg.packets, cfg.flows
            ),
        );
    }
    if !(cfg.zipf_exponent.is_finite() && cfg.zipf_exponent >= 0.0) {
        return bad(
            "zipf_exponent",
            format!("must be a finite number >= 0 (got {})", cfg.zipf_exponent),
        );
    }
    for (name, v) in [
        ("ipv6_share", cfg.ipv6_share),
        ("vlan_share", cfg.vlan_share),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return bad(name, format!("must be in [0, 1] (got {v})"));
        }
    }
    if cfg
        .proto_weights
        .iter()
        .any(|w| !(w.is_finite() && *w >= 0.0))
        || cfg.proto_weights.iter().sum::<f64>() <= 0.0
    {
        return bad(
            "proto_weights",
            format!("must be >= 0 and not all 0 (got {:?})", cfg.proto_weights),
        );
    }
    for (name, v) in [("start_secs", cfg.start_secs), ("span_secs", cfg.span_secs)] {
        if !(v.is_finite() && v >= 0.0) {
            return bad(name, format!("must be finite and >= 0 (got {v})"));
        }
    }
    // The last arrival must fit the container's timestamp, or it would be
    // written wrapped (silently wrong): classic pcap stores 32-bit seconds,
    // pcapng (if_tsresol = 9) 64-bit nanoseconds.
    let latest = cfg.start_secs + cfg.span_secs;
    let (limit, what) = match cfg.format {
        OutputFormat::Pcap | OutputFormat::PcapNs => {
            (f64::from(u32::MAX), "classic pcap's 32-bit seconds")
        }
        OutputFormat::PcapNg => (
            (u64::MAX / 1_000_000_000) as f64,
            "pcapng's 64-bit nanoseconds",
        ),
    };
    if latest >= limit {
        return bad(
            "start_secs + span_secs",
            format!(
                "{} s is past {what} (at most {limit:.0} s)",
                crate::model::query::shown(latest)
            ),
        );
    }
    if let SizeModel::Uniform { min, max } = cfg.sizes
        && (min > max || max > 9000)
    {
        return bad(
            "sizes",
            format!("uniform sizes need min <= max <= 9000 (got {min}-{max})"),
        );
    }
    Ok(())
}

fn make_flow(rng: &mut ChaCha8Rng, cfg: &SynthConfig) -> Flow {
    let total: f64 = cfg.proto_weights.iter().sum();
    let r = rng.random::<f64>() * total;
    let transport = if r < cfg.proto_weights[0] {
        Transport::Tcp
    } else if r < cfg.proto_weights[0] + cfg.proto_weights[1] {
        Transport::Udp
    } else {
        Transport::Icmp
    };
    let (proto, sport, dport) = match transport {
        Transport::Tcp => (
            6u8,
            rng.random_range(1024..=65535u16),
            pick_port(rng, &WELL_KNOWN_TCP),
        ),
        Transport::Udp => (
            17u8,
            rng.random_range(1024..=65535u16),
            pick_port(rng, &WELL_KNOWN_UDP),
        ),
        Transport::Icmp => (1u8, 0, 0),
    };
    let v6 = rng.random::<f64>() < cfg.ipv6_share;
    let vlan = (rng.random::<f64>() < cfg.vlan_share).then(|| rng.random_range(1..4095u16));
    let mut mac_src = [0u8; 6];
    let mut mac_dst = [0u8; 6];
    rng.fill(&mut mac_src);
    rng.fill(&mut mac_dst);
    mac_src[0] &= 0xfe;
    mac_dst[0] &= 0xfe;
    if v6 {
        // Global unicast 2000::/3.
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        rng.fill(&mut s);
        rng.fill(&mut d);
        s[0] = 0x20 | (s[0] & 0x1f);
        d[0] = 0x20 | (d[0] & 0x1f);
        let proto = if proto == 1 { 58 } else { proto };
        Flow {
            key: FlowKey::v6(s, d, sport, dport, proto),
            transport,
            vlan,
            mac_src,
            mac_dst,
        }
    } else {
        // Unicast 1.0.0.0 - 223.255.255.255, all classful classes A-C.
        let mut s: [u8; 4] = rng.random();
        let mut d: [u8; 4] = rng.random();
        s[0] = rng.random_range(1..224);
        d[0] = rng.random_range(1..224);
        Flow {
            key: FlowKey::v4(s, d, sport, dport, proto),
            transport,
            vlan,
            mac_src,
            mac_dst,
        }
    }
}

fn pick_port(rng: &mut ChaCha8Rng, well_known: &[u16]) -> u16 {
    if rng.random::<f64>() < 0.8 {
        well_known[rng.random_range(0..well_known.len())]
    } else {
        rng.random_range(1..=65535)
    }
}

/// The length of a flow's headers (link through transport).
fn header_len(f: &Flow) -> u32 {
    let l2 = 14 + if f.vlan.is_some() { 4 } else { 0 };
    let l3 = if f.is_v6() { 40 } else { 20 };
    let l4 = match f.transport {
        Transport::Tcp => 20,
        Transport::Udp | Transport::Icmp => 8,
    };
    l2 + l3 + l4
}

fn frame_len(rng: &mut ChaCha8Rng, f: &Flow, sizes: SizeModel) -> u32 {
    let l2 = 14 + if f.vlan.is_some() { 4 } else { 0 };
    let hl = header_len(f);
    let len = match sizes {
        SizeModel::Uniform { min, max } => rng.random_range(min..=max),
        SizeModel::Realistic => {
            let u = rng.random::<f64>();
            let ip_total = match f.transport {
                Transport::Tcp if u < 0.40 => rng.random_range(40..=52),
                Transport::Tcp if u < 0.55 => rng.random_range(53..=300),
                Transport::Tcp if u < 0.65 => rng.random_range(301..=1000),
                Transport::Tcp => rng.random_range(1400..=1500),
                Transport::Udp if u < 0.60 => rng.random_range(60..=200),
                Transport::Udp if u < 0.90 => rng.random_range(201..=600),
                Transport::Udp => rng.random_range(1000..=1500),
                Transport::Icmp => 84,
            };
            l2 + ip_total
        }
    };
    len.max(hl)
}

/// Builds one frame of `wire_len` bytes (headers plus zero payload) into
/// `out`, truncated to `caplen` bytes.
fn build_frame(f: &Flow, wire_len: u32, seq: u32, caplen: usize, zeros: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let payload_len = (wire_len - header_len(f)) as usize;
    let payload = &zeros[..payload_len.min(zeros.len())];
    let ip_ether = if f.is_v6() {
        EtherType::IPV6
    } else {
        EtherType::IPV4
    };
    let eth = Ethernet2Header {
        source: f.mac_src,
        destination: f.mac_dst,
        ether_type: if f.vlan.is_some() {
            EtherType::VLAN_TAGGED_FRAME
        } else {
            ip_ether
        },
    };
    let _ = eth.write(out);
    if let Some(id) = f.vlan {
        let tag = SingleVlanHeader {
            pcp: VlanPcp::ZERO,
            drop_eligible_indicator: false,
            vlan_id: VlanId::try_new(id).unwrap_or(VlanId::ZERO),
            ether_type: ip_ether,
        };
        let _ = tag.write(out);
    }
    let l4_len = match f.transport {
        Transport::Tcp => 20,
        _ => 8,
    } + payload.len();
    let proto = IpNumber(f.key.proto());
    let (sport, dport) = (f.key.sport(), f.key.dport());
    match f.addresses() {
        Addresses::V4(s, d) => {
            let Ok(mut ip) = Ipv4Header::new(l4_len as u16, 64, proto, s, d) else {
                return;
            };
            ip.identification = seq as u16;
            ip.header_checksum = ip.calc_header_checksum();
            let _ = ip.write(out);
            match f.transport {
                Transport::Tcp => {
                    let mut t = TcpHeader::new(sport, dport, seq, 65535);
                    t.ack = true;
                    t.checksum = t.calc_checksum_ipv4(&ip, payload).unwrap_or(0);
                    let _ = t.write(out);
                }
                Transport::Udp => {
                    if let Ok(u) = UdpHeader::with_ipv4_checksum(sport, dport, &ip, payload) {
                        let _ = u.write(out);
                    }
                }
                Transport::Icmp => {
                    let echo = Icmpv4Type::EchoRequest(IcmpEchoHeader {
                        id: seq as u16,
                        seq: seq as u16,
                    });
                    let _ = Icmpv4Header::with_checksum(echo, payload).write(out);
                }
            }
        }
        Addresses::V6(s, d) => {
            let ip = Ipv6Header {
                traffic_class: 0,
                flow_label: Ipv6FlowLabel::ZERO,
                payload_length: l4_len as u16,
                next_header: proto,
                hop_limit: 64,
                source: s,
                destination: d,
            };
            let _ = ip.write(out);
            match f.transport {
                Transport::Tcp => {
                    let mut t = TcpHeader::new(sport, dport, seq, 65535);
                    t.ack = true;
                    t.checksum = t.calc_checksum_ipv6(&ip, payload).unwrap_or(0);
                    let _ = t.write(out);
                }
                Transport::Udp => {
                    if let Ok(u) = UdpHeader::with_ipv6_checksum(sport, dport, &ip, payload) {
                        let _ = u.write(out);
                    }
                }
                Transport::Icmp => {
                    let echo = Icmpv6Type::EchoRequest(IcmpEchoHeader {
                        id: seq as u16,
                        seq: seq as u16,
                    });
                    if let Ok(h) = Icmpv6Header::with_checksum(echo, s, d, payload) {
                        let _ = h.write(out);
                    }
                }
            }
        }
    }
    let room = caplen.saturating_sub(out.len()).min(payload.len());
    out.extend_from_slice(&payload[..room]);
    out.truncate(caplen);
}

enum Sink<W: Write> {
    Pcap(PcapWriter<W>),
    PcapNg(PcapNgWriter<W>),
}

/// Generates a trace into `out`.
pub fn generate<W: Write>(cfg: &SynthConfig, out: W) -> Result<SynthStats, SynthError> {
    generate_with_progress(cfg, out, &mut |_| true)
}

/// [`generate`], calling `progress` with the packets written so far every
/// [`PROGRESS_EVERY`] packets; it returns false to stop, and generation then
/// ends with [`SynthError::Interrupted`].
pub fn generate_with_progress<W: Write>(
    cfg: &SynthConfig,
    out: W,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<SynthStats, SynthError> {
    check(cfg)?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    // pcap-file words every I/O failure as "Error reading bytes", writes
    // included: the message is the I/O error's own (a full disk, a closed
    // pipe).
    let werr = |e: pcap_file::PcapError| match e {
        pcap_file::PcapError::IoError(io) => SynthError::Write(io.to_string()),
        other => SynthError::Write(other.to_string()),
    };

    // Distinct flows. The set holds indices into `flows` under the flow
    // hash, not the 40-byte keys under SipHash: for a 10 M-flow flood that
    // is 80 MB instead of 670, and a third of the generator's time went to
    // the larger table's misses. The answers are the same (exact key
    // equality decides), so the traces are too, byte for byte.
    let mut seen: hashbrown::HashTable<u32> =
        hashbrown::HashTable::with_capacity(cfg.flows as usize);
    let mut flows: Vec<Flow> = Vec::with_capacity(cfg.flows as usize);
    while (flows.len() as u64) < cfg.flows {
        let f = make_flow(&mut rng, cfg);
        let h = flow_hash(&f.key);
        let next = flows.len() as u32;
        if let hashbrown::hash_table::Entry::Vacant(v) = seen.entry(
            h,
            |&i| flows[i as usize].key == f.key,
            |&i| flow_hash(&flows[i as usize].key),
        ) {
            v.insert(next);
            flows.push(f);
        }
    }
    drop(seen);

    // Sizes: one packet each, the rest by Zipf rank over a random ranking.
    let mut sizes = vec![1u64; flows.len()];
    let mut ranking: Vec<usize> = (0..flows.len()).collect();
    ranking.shuffle(&mut rng);
    let zipf = Zipf::new(flows.len() as f64, cfg.zipf_exponent)
        .map_err(|e| SynthError::Config(e.to_string()))?;
    for i in cfg.flows..cfg.packets {
        // Sizing a billion packets takes a while: stay interruptible.
        if i % PROGRESS_EVERY == 0 && !progress(0) {
            return Err(SynthError::Interrupted {
                written: 0,
                packets: cfg.packets,
            });
        }
        let rank = (zipf.sample(&mut rng) as usize).clamp(1, flows.len());
        sizes[ranking[rank - 1]] += 1;
    }
    let largest_flow = sizes.iter().copied().max().unwrap_or(0);

    // Packet order: each flow's packets scattered over the span.
    let mut order: Vec<u32> = Vec::with_capacity(cfg.packets as usize);
    for (i, &n) in sizes.iter().enumerate() {
        order.extend(std::iter::repeat_n(i as u32, n as usize));
    }
    order.shuffle(&mut rng);
    let mut offsets: Vec<f64> = (0..cfg.packets)
        .map(|_| rng.random::<f64>() * cfg.span_secs)
        .collect();
    // Unstable, and so in place: `total_cmp` calls two values equal only
    // when their bits are, so no order of equal values can show in the
    // trace, and the bytes are those of a stable sort. The stable sort's
    // scratch buffer held up to half the offsets again (200 MB at 50 M
    // packets) and took longer.
    offsets.sort_unstable_by(f64::total_cmp);

    let snaplen = if cfg.snaplen == 0 { 65535 } else { cfg.snaplen };
    let mut sink = match cfg.format {
        OutputFormat::Pcap | OutputFormat::PcapNs => {
            let header = PcapHeader {
                snaplen,
                datalink: DataLink::ETHERNET,
                ts_resolution: if cfg.format == OutputFormat::PcapNs {
                    TsResolution::NanoSecond
                } else {
                    TsResolution::MicroSecond
                },
                endianness: Endianness::Little,
                ..PcapHeader::default()
            };
            Sink::Pcap(PcapWriter::with_header(out, header).map_err(werr)?)
        }
        OutputFormat::PcapNg => {
            let mut w = PcapNgWriter::with_endianness(out, Endianness::Little).map_err(werr)?;
            // pcap-file writes EPB timestamps in nanoseconds but does not say
            // so; declare it with if_tsresol = 9 so every reader agrees.
            let idb = InterfaceDescriptionBlock {
                linktype: DataLink::ETHERNET,
                snaplen,
                options: vec![InterfaceDescriptionOption::IfTsResol(9)],
            };
            w.write_pcapng_block(idb).map_err(werr)?;
            Sink::PcapNg(w)
        }
    };

    let zeros = vec![0u8; 9000];
    let mut frame = Vec::with_capacity(9000);
    let mut stats = SynthStats {
        flows: cfg.flows,
        packets: 0,
        largest_flow,
        wire_bytes: 0,
        captured_bytes: 0,
    };
    let start_ns = (cfg.start_secs * 1e9) as u128;
    for (seq, (&fi, &off)) in order.iter().zip(offsets.iter()).enumerate() {
        if (seq as u64).is_multiple_of(PROGRESS_EVERY) && !progress(seq as u64) {
            return Err(SynthError::Interrupted {
                written: seq as u64,
                packets: cfg.packets,
            });
        }
        // The flows are read in a random order, each a miss on a large
        // trace: ask for one a few packets ahead.
        if let Some(&ahead) = order.get(seq + FLOW_PREFETCH_AHEAD) {
            crate::prefetch::prefetch(std::ptr::from_ref(&flows[ahead as usize]).cast());
        }
        let f = &flows[fi as usize];
        let wire = frame_len(&mut rng, f, cfg.sizes);
        build_frame(
            f,
            wire,
            seq as u32,
            (snaplen as usize).min(wire as usize),
            &zeros,
            &mut frame,
        );
        let ns = start_ns + (off * 1e9) as u128;
        let ts = Duration::new((ns / 1_000_000_000) as u64, (ns % 1_000_000_000) as u32);
        match &mut sink {
            Sink::Pcap(w) => {
                w.write_packet(&PcapPacket::new(ts, wire, &frame))
                    .map_err(werr)?;
            }
            Sink::PcapNg(w) => {
                let epb = EnhancedPacketBlock {
                    interface_id: 0,
                    timestamp: ts,
                    original_len: wire,
                    data: frame.as_slice().into(),
                    options: vec![],
                };
                w.write_pcapng_block(epb).map_err(werr)?;
            }
        }
        stats.packets += 1;
        stats.wire_bytes += u64::from(wire);
        stats.captured_bytes += frame.len() as u64;
    }
    let mut inner = match sink {
        Sink::Pcap(w) => w.into_writer(),
        Sink::PcapNg(w) => w.into_inner(),
    };
    inner
        .flush()
        .map_err(|e| SynthError::Write(e.to_string()))?;
    Ok(stats)
}
