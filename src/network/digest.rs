//! The digest a probe publishes per shard and window (format `FSND`
//! version 1): its heavy-stage counters, its presence filter, its
//! candidate heavy flows and its per-class packet counts.
//!
//! # Format (version 1, little-endian)
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `FSND` |
//! | 1 | version (1) |
//! | 3 | reserved (0) |
//! | 8 | configuration fingerprint ([`super::NetworkConfig::fingerprint`]) |
//! | 4 | shard |
//! | 8 | window |
//! | 8 | packets |
//! | 2 + n | probe id: length, then UTF-8 |
//! | 4 + 8c | class packet counts: count `c`, then each |
//! | 8 + a | counters: length `a`, then an `FSCC` snapshot |
//! | 8 + b | presence: length `b`, then an `FSCB` snapshot |
//! | 4 + 56d | candidates: count `d`, then each as IP version (1), source and destination (16 each), ports (2 each), protocol (1), class (2), hash (8) and local estimate (8): 56 bytes |
//! | 8 | checksum of everything before it |
//!
//! Every length is checked against what is left before it is used, and
//! the embedded filters against a size limit before they are decoded, so
//! a damaged or hostile digest is a [`DigestError`], never a panic, and is
//! never merged.

use crate::dissect::FlowKey;
use crate::filter::{
    BloomFilter, CompressedError, CounterSnapshot, compress_bloom, decompress_bloom_within,
    decompress_counter_snapshot,
};
use crate::hash::fmix64;
use crate::pipeline::Candidate;

const MAGIC: &[u8; 4] = b"FSND";
const VERSION: u8 = 1;
const CANDIDATE_BYTES: usize = 56;
/// The most probe-id bytes.
pub const MAX_PROBE_ID: usize = 64;
/// The most counters or presence bits a digest may declare per shard.
pub const MAX_DIGEST_CELLS: u64 = 1 << 28;

/// One probe's digest of one shard-window.
#[derive(Clone, Debug, PartialEq)]
pub struct Digest {
    /// The configuration it was made under.
    pub fingerprint: u64,
    /// The probe.
    pub probe: String,
    /// The shard.
    pub shard: u32,
    /// The window (from the Unix epoch).
    pub window: u64,
    /// Packets counted.
    pub packets: u64,
    /// Packets per class id.
    pub class_packets: Vec<u64>,
    /// The counting filter at the window's close (decoded as its non-zero
    /// cells when few are set).
    pub counters: CounterSnapshot,
    /// The flows seen.
    pub presence: BloomFilter,
    /// Flows whose local estimate reached `⌈θ/P⌉`.
    pub candidates: Vec<Candidate>,
}

/// Why a digest was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DigestError {
    /// Shorter than a field it declares.
    #[error("digest truncated at byte {at}: the {field} needs {need} bytes, {have} are left")]
    Truncated {
        /// Where the field starts.
        at: usize,
        /// The field.
        field: &'static str,
        /// Bytes it needs.
        need: u64,
        /// Bytes left.
        have: usize,
    },
    /// Not a digest.
    #[error("not a flowsieve digest (magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// A version this build does not read.
    #[error("unsupported digest version {0} (this build reads version 1)")]
    UnsupportedVersion(u8),
    /// The checksum does not match.
    #[error("digest checksum mismatch (stored {stored:#018x}, computed {computed:#018x})")]
    Checksum {
        /// As stored.
        stored: u64,
        /// As computed.
        computed: u64,
    },
    /// A field's value is impossible.
    #[error("bad digest field {field}: {problem}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// An embedded filter snapshot is damaged.
    #[error("digest's {part} snapshot: {source}")]
    Filter {
        /// Which filter.
        part: &'static str,
        /// What its decoder said.
        source: CompressedError,
    },
    /// Bytes after the checksum.
    #[error("{0} bytes after the digest's checksum")]
    Trailing(usize),
}

fn checksum(bytes: &[u8]) -> u64 {
    let mut h = 0x4653_4e44_0001_0000u64 ^ bytes.len() as u64;
    for chunk in bytes.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = fmix64(h ^ u64::from_le_bytes(w)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fmix64(h)
}

impl Digest {
    /// The digest's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let counters = self.counters.compress();
        let presence = compress_bloom(&self.presence);
        let probe = self.probe.as_bytes();
        let probe = &probe[..probe.len().min(MAX_PROBE_ID)];
        let mut b = Vec::with_capacity(
            64 + counters.len() + presence.len() + CANDIDATE_BYTES * self.candidates.len(),
        );
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&[VERSION, 0, 0, 0]);
        b.extend_from_slice(&self.fingerprint.to_le_bytes());
        b.extend_from_slice(&self.shard.to_le_bytes());
        b.extend_from_slice(&self.window.to_le_bytes());
        b.extend_from_slice(&self.packets.to_le_bytes());
        b.extend_from_slice(&(probe.len() as u16).to_le_bytes());
        b.extend_from_slice(probe);
        b.extend_from_slice(&(self.class_packets.len() as u32).to_le_bytes());
        for p in &self.class_packets {
            b.extend_from_slice(&p.to_le_bytes());
        }
        b.extend_from_slice(&(counters.len() as u64).to_le_bytes());
        b.extend_from_slice(&counters);
        b.extend_from_slice(&(presence.len() as u64).to_le_bytes());
        b.extend_from_slice(&presence);
        b.extend_from_slice(&(self.candidates.len() as u32).to_le_bytes());
        for c in &self.candidates {
            let k = &c.key;
            b.push(match k.version() {
                crate::dissect::IpVersion::V4 => 4,
                crate::dissect::IpVersion::V6 => 6,
            });
            b.extend_from_slice(&k.src_bits().to_le_bytes());
            b.extend_from_slice(&k.dst_bits().to_le_bytes());
            b.extend_from_slice(&k.sport().to_le_bytes());
            b.extend_from_slice(&k.dport().to_le_bytes());
            b.push(k.proto());
            b.extend_from_slice(&c.class.to_le_bytes());
            b.extend_from_slice(&c.hash.to_le_bytes());
            b.extend_from_slice(&c.estimate.to_le_bytes());
        }
        let sum = checksum(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Reads a digest, checking every length, the checksum and both
    /// embedded filters.
    pub fn decode(bytes: &[u8]) -> Result<Digest, DigestError> {
        let mut r = Reader { b: bytes, at: 0 };
        let magic = r.take("magic", 4)?;
        if magic != MAGIC {
            let mut m = [0u8; 4];
            m.copy_from_slice(magic);
            return Err(DigestError::BadMagic(m));
        }
        let head = r.take("version", 4)?;
        if head[0] != VERSION {
            return Err(DigestError::UnsupportedVersion(head[0]));
        }
        if head[1..] != [0, 0, 0] {
            return Err(DigestError::Field {
                field: "reserved",
                problem: "not zero".into(),
            });
        }
        let fingerprint = r.u64("fingerprint")?;
        let shard = r.u32("shard")?;
        let window = r.u64("window")?;
        let packets = r.u64("packets")?;
        let probe_len = usize::from(r.u16("probe id length")?);
        if probe_len > MAX_PROBE_ID {
            return Err(DigestError::Field {
                field: "probe id",
                problem: format!("{probe_len} bytes, more than {MAX_PROBE_ID}"),
            });
        }
        let probe = std::str::from_utf8(r.take("probe id", probe_len)?)
            .map_err(|_| DigestError::Field {
                field: "probe id",
                problem: "not UTF-8".into(),
            })?
            .to_string();
        let classes = r.u32("class count")? as usize;
        if classes > crate::class::MAX_CLASSES {
            return Err(DigestError::Field {
                field: "class count",
                problem: format!("{classes}, more than {}", crate::class::MAX_CLASSES),
            });
        }
        let class_bytes = r.take("class packets", classes * 8)?;
        let class_packets = class_bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let counters_len = r.u64("counters length")?;
        let counters_bytes = r.take_u64("counters", counters_len)?;
        let presence_len = r.u64("presence length")?;
        let presence_bytes = r.take_u64("presence", presence_len)?;
        let count = r.u32("candidate count")? as u64;
        let cand = r.take_u64("candidates", count.saturating_mul(CANDIDATE_BYTES as u64))?;
        let body_end = r.at;
        let stored = r.u64("checksum")?;
        if r.at != bytes.len() {
            return Err(DigestError::Trailing(bytes.len() - r.at));
        }
        // The lengths only located the parts; nothing is decoded before the
        // checksum says the bytes are the ones the probe wrote.
        let computed = checksum(&bytes[..body_end]);
        if stored != computed {
            return Err(DigestError::Checksum { stored, computed });
        }
        let counters =
            decompress_counter_snapshot(counters_bytes, MAX_DIGEST_CELLS).map_err(|source| {
                DigestError::Filter {
                    part: "counters",
                    source,
                }
            })?;
        let presence =
            decompress_bloom_within(presence_bytes, MAX_DIGEST_CELLS).map_err(|source| {
                DigestError::Filter {
                    part: "presence",
                    source,
                }
            })?;
        let mut candidates = Vec::with_capacity(count as usize);
        for c in cand.chunks_exact(CANDIDATE_BYTES) {
            let u128_at =
                |i: usize| u128::from_le_bytes(c[i..i + 16].try_into().unwrap_or([0; 16]));
            let u16_at = |i: usize| u16::from_le_bytes([c[i], c[i + 1]]);
            let u64_at = |i: usize| u64::from_le_bytes(c[i..i + 8].try_into().unwrap_or([0; 8]));
            let (src, dst) = (u128_at(1), u128_at(17));
            let (sport, dport, proto) = (u16_at(33), u16_at(35), c[37]);
            let key = match c[0] {
                4 if src >> 32 == 0 && dst >> 32 == 0 => FlowKey::v4(
                    (src as u32).to_be_bytes(),
                    (dst as u32).to_be_bytes(),
                    sport,
                    dport,
                    proto,
                ),
                6 => FlowKey::v6(src.to_be_bytes(), dst.to_be_bytes(), sport, dport, proto),
                v => {
                    return Err(DigestError::Field {
                        field: "candidate",
                        problem: format!("IP version {v} with these addresses"),
                    });
                }
            };
            candidates.push(Candidate {
                key,
                class: u16_at(38),
                hash: u64_at(40),
                estimate: u64_at(48),
            });
        }
        Ok(Digest {
            fingerprint,
            probe,
            shard,
            window,
            packets,
            class_packets,
            counters,
            presence,
            candidates,
        })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], DigestError> {
        let have = self.b.len() - self.at;
        if n > have {
            return Err(DigestError::Truncated {
                at: self.at,
                field,
                need: n as u64,
                have,
            });
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn take_u64(&mut self, field: &'static str, n: u64) -> Result<&'a [u8], DigestError> {
        let have = self.b.len() - self.at;
        match usize::try_from(n) {
            Ok(n) => self.take(field, n),
            Err(_) => Err(DigestError::Truncated {
                at: self.at,
                field,
                need: n,
                have,
            }),
        }
    }
    fn u16(&mut self, field: &'static str) -> Result<u16, DigestError> {
        let s = self.take(field, 2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, DigestError> {
        let s = self.take(field, 4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, DigestError> {
        let s = self.take(field, 8)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(s);
        Ok(u64::from_le_bytes(w))
    }
}
