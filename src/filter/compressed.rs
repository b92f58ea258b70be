//! Compressed Bloom filter snapshots (Mitzenmacher, paper 002): a filter's
//! bits arithmetic-coded to within a few bytes of `m H(p)` bits, and the
//! XOR delta between two snapshots coded the same way.
//!
//! The coder is a binary range coder in the style of LZMA's (a 32-bit range,
//! 64-bit low with carry propagation), with a static model: the header
//! carries the number of one bits, so both sides use `p = ones/m`, quantised
//! to 16 bits. For independent bits this is within a fraction of a percent
//! of the entropy.
//!
//! Version 2 (written) codes the runs of zeros before each one bit as
//! geometric gaps under that model (`gap_coding.rs`): the same size, and
//! work in proportion to the ones. Version 1 (still read) coded each bit.
//!
//! # Format (versions 1 and 2, little-endian)
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `FSCB` |
//! | 1 | version (2; 1 is read too) |
//! | 1 | kind: 0 filter snapshot, 1 delta |
//! | 1 | `k` (hash functions) |
//! | 1 | reserved (0) |
//! | 8 | `m`, bits |
//! | 8 | one bits |
//! | 8 | checksum of the bit words and `k` |
//! | 8 | payload length |
//! | ... | range-coded: version 2, the gap before each one bit; version 1, every bit |
//!
//! Damaged input (short, wrong magic or version, impossible sizes, a
//! payload that ends early, a checksum or count that does not match) is a
//! [`CompressedError`], never a panic.
//!
//! ```
//! use flowsieve::filter::{compress_bloom, decompress_bloom, BloomFilter};
//! let mut f = BloomFilter::new(1 << 16, 2);
//! for h in 0..2000u64 { f.insert(h.wrapping_mul(0x9e37_79b9_7f4a_7c15)); }
//! let bytes = compress_bloom(&f);
//! assert!(bytes.len() < (1 << 16) / 8 / 2);   // sparse: well under half
//! assert_eq!(decompress_bloom(&bytes).unwrap(), f);
//! ```

use super::gap_coding::GapModel;
use super::{BitArray, BloomFilter, ShapeMismatch};
use crate::hash::fmix64;

const MAGIC: &[u8; 4] = b"FSCB";
/// The version written.
const VERSION: u8 = 2;
/// Version 1 coded every bit; it is still read.
const VERSION_EACH_BIT: u8 = 1;
const KIND_FILTER: u8 = 0;
const KIND_DELTA: u8 = 1;
const HEADER_LEN: usize = 40;
const H_VERSION: usize = 4;
const H_KIND: usize = 5;
const H_K: usize = 6;
const H_RESERVED: usize = 7;
const H_M: usize = 8;
const H_ONES: usize = 16;
const H_CHECKSUM: usize = 24;
const H_PAYLOAD_LEN: usize = 32;

/// Snapshots above this many bits are refused rather than allocated,
/// whatever limit a caller passes.
pub const MAX_SNAPSHOT_BITS: u64 = 1 << 33;

/// The limit [`decompress_bloom`] decodes up to: 2^27 bits (a 16 MiB
/// filter, about half a second of decoding). The declared size is checked
/// before anything is allocated or decoded, so that a few hundred bytes
/// that declare 2^33 bits (a decompression bomb) cost nothing; callers that
/// expect larger filters say so with [`decompress_bloom_within`].
pub const DEFAULT_DECODE_MAX_BITS: u64 = 1 << 27;

pub(super) const PROB_BITS: u32 = 16;
const TOP: u32 = 1 << 24;

/// Why a snapshot could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompressedError {
    #[error("snapshot truncated: {have} bytes, the header needs {need}")]
    /// The snapshot is shorter than its header.
    ShortHeader {
        /// Bytes present.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    #[error("not a flowsieve filter snapshot (magic {0:02x?})")]
    /// Not a snapshot.
    BadMagic([u8; 4]),
    #[error("unsupported snapshot version {0} (this build reads versions 1 and 2)")]
    /// A format version this build does not read.
    UnsupportedVersion(u8),
    #[error("reserved header byte is {0:#04x}, not 0")]
    /// A reserved byte is set.
    Reserved(u8),
    #[error("snapshot kind {found} where kind {expected} was expected")]
    /// A snapshot of another kind.
    WrongKind {
        /// The kind found.
        found: u8,
        /// The kind expected.
        expected: u8,
    },
    #[error("snapshot declares {m} bits, more than the {limit} this reader accepts")]
    /// The declared size is past the caller's limit (checked before any
    /// decoding).
    TooLarge {
        /// Bits declared.
        m: u64,
        /// The limit.
        limit: u64,
    },
    #[error(
        "payload of {have} bytes is too short for {ones} ones in {m} bits (at least {need} bytes)"
    )]
    /// The payload cannot hold the declared bits: the coded length of any
    /// string with that many ones, under the header's own probability, is
    /// longer (checked before decoding).
    TooShortForSizes {
        /// Bits declared.
        m: u64,
        /// Ones declared.
        ones: u64,
        /// Payload bytes present.
        have: usize,
        /// The least the payload must hold.
        need: u64,
    },
    #[error("impossible sizes: m = {m}, ones = {ones}, k = {k}")]
    /// Sizes no filter can have.
    BadSizes {
        /// Cells (bits or counters).
        m: u64,
        /// Set bits declared.
        ones: u64,
        /// Hash functions.
        k: u8,
    },
    #[error("payload truncated: header says {declared} bytes, {have} present")]
    /// The payload is shorter than declared.
    ShortPayload {
        /// The length declared.
        declared: u64,
        /// Bytes present.
        have: usize,
    },
    #[error("payload ended while decoding bit {bit} of {m}")]
    /// The coded bits ran out.
    PayloadEnded {
        /// The bit reached.
        bit: u64,
        /// Cells (bits or counters).
        m: u64,
    },
    #[error("decoded bits do not match the header (ones {decoded} vs {declared}, or checksum)")]
    /// The decoded bits disagree with the header.
    Corrupt {
        /// Bits decoded.
        decoded: u64,
        /// The length declared.
        declared: u64,
    },
    #[error("the delta is for a filter of {delta_m} bits, not {filter_m}")]
    /// A delta for a filter of another size.
    DeltaShape {
        /// Bits of the delta.
        delta_m: u64,
        /// Bits of the filter.
        filter_m: u64,
    },
}

pub(super) struct RangeEncoder {
    low: u64,
    range: u32,
    cache: u8,
    cache_size: u64,
    out: Vec<u8>,
}

impl RangeEncoder {
    pub(super) fn new() -> RangeEncoder {
        RangeEncoder {
            low: 0,
            range: u32::MAX,
            cache: 0,
            cache_size: 1,
            out: Vec::new(),
        }
    }

    fn shift_low(&mut self) {
        if self.low < 0xff00_0000 || self.low > 0xffff_ffff {
            let carry = (self.low >> 32) as u8;
            let mut temp = self.cache;
            loop {
                self.out.push(temp.wrapping_add(carry));
                temp = 0xff;
                self.cache_size -= 1;
                if self.cache_size == 0 {
                    break;
                }
            }
            self.cache = ((self.low >> 24) & 0xff) as u8;
        }
        self.cache_size += 1;
        self.low = (self.low & 0x00ff_ffff) << 8;
    }

    /// `prob0` is P(bit = 0) in units of 2^-16, in [1, 65535].
    pub(super) fn encode(&mut self, bit: bool, prob0: u32) {
        let bound = (self.range >> PROB_BITS) * prob0;
        if bit {
            self.low += u64::from(bound);
            self.range -= bound;
        } else {
            self.range = bound;
        }
        while self.range < TOP {
            self.range <<= 8;
            self.shift_low();
        }
    }

    pub(super) fn finish(mut self) -> Vec<u8> {
        for _ in 0..5 {
            self.shift_low();
        }
        self.out
    }
}

pub(super) struct RangeDecoder<'a> {
    input: &'a [u8],
    pos: usize,
    range: u32,
    code: u32,
}

impl<'a> RangeDecoder<'a> {
    /// `None` if the input is shorter than the coder's 5-byte preamble or
    /// its first byte (always 0 from the encoder: the carry cannot reach
    /// it) is not 0, as LZMA's decoder checks.
    pub(super) fn new(input: &'a [u8]) -> Option<RangeDecoder<'a>> {
        if input.first() != Some(&0) {
            return None;
        }
        let mut d = RangeDecoder {
            input,
            pos: 1,
            range: u32::MAX,
            code: 0,
        };
        for _ in 0..4 {
            d.code = (d.code << 8) | u32::from(d.next()?);
        }
        Some(d)
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.input.get(self.pos).copied();
        self.pos += 1;
        b
    }

    /// True when the input ends exactly where the encoder's would, with
    /// the code at the bottom of the last interval: every byte read, and
    /// the code 0.
    ///
    /// Why: the encoder's `finish` writes out `low` itself, and the decoder
    /// reads those bytes into `code` as `stream - low`, so after the last
    /// symbol a stream from the encoder leaves the code at exactly 0. Any
    /// value in `[low, low + range)` decodes the same symbols, so without
    /// this check a change to the low bits of the last bytes (or a byte
    /// added after them) decoded cleanly, and a snapshot's checksum, which
    /// covers what was decoded, could not see it (a property test found a
    /// flipped bit in a counter snapshot's last byte that decoded to the
    /// same counters). A change anywhere else either changes a symbol or
    /// leaves a non-zero difference in the code: bits leave the code only
    /// from the top, where it is always below the range.
    pub(super) fn ended_where_encoder_did(&self) -> bool {
        self.code == 0 && self.pos == self.input.len()
    }

    pub(super) fn decode(&mut self, prob0: u32) -> Option<bool> {
        let bound = (self.range >> PROB_BITS) * prob0;
        let bit = if self.code < bound {
            self.range = bound;
            false
        } else {
            self.code -= bound;
            self.range -= bound;
            true
        };
        while self.range < TOP {
            self.range <<= 8;
            self.code = (self.code << 8) | u32::from(self.next()?);
        }
        Some(bit)
    }
}

/// P(bit = 0) for `ones` of `m` bits, quantised to 16 bits.
fn prob0(m: u64, ones: u64) -> u32 {
    let p0 = 1.0 - ones as f64 / m.max(1) as f64;
    ((p0 * f64::from(1u32 << PROB_BITS)).round() as u32).clamp(1, (1 << PROB_BITS) - 1)
}

/// A 64-bit checksum of the bit words and `k`, so that neither can change
/// unnoticed.
fn checksum(words: &[u64], k: u8) -> u64 {
    words
        .iter()
        .fold(fmix64(0x243f_6a88_85a3_08d3 ^ u64::from(k)), |acc, &w| {
            fmix64(acc ^ w).wrapping_add(w)
        })
}

fn encode_bits(bits: &BitArray, kind: u8, k: u8) -> Vec<u8> {
    let m = bits.len() as u64;
    let ones = bits.count_ones();
    let gaps = GapModel::new(m, ones);
    let mut enc = RangeEncoder::new();
    // The next bit a gap starts from.
    let mut from = 0u64;
    for at in bits.ones() {
        let at = at as u64;
        gaps.encode(&mut enc, at - from);
        from = at + 1;
    }
    let payload = enc.finish();
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[VERSION, kind, k, 0]);
    out.extend_from_slice(&m.to_le_bytes());
    out.extend_from_slice(&ones.to_le_bytes());
    out.extend_from_slice(&checksum(bits.words(), k).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

pub(super) fn le_u64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |s| {
        u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]])
    })
}

/// The fewest payload bytes that can code `m` bits with exactly `ones`
/// ones under the coder's quantised probability `p0` of a zero: each
/// symbol costs `-log2` of its probability, and the coder emits all but at
/// most its last 4 bytes of state (8 bytes allowed, plus 0.1 % for float
/// rounding).
fn least_payload_bytes(m: u64, ones: u64, p0: u32) -> u64 {
    let scale = f64::from(1u32 << PROB_BITS);
    let p_zero = f64::from(p0) / scale;
    let bits = ones as f64 * -(1.0 - p_zero).log2() + (m - ones) as f64 * -p_zero.log2();
    ((bits * 0.999 / 8.0) as u64).saturating_sub(8)
}

/// The preamble every snapshot format here shares: at least `header_len`
/// bytes, the format's 4-byte magic, one of its `versions` at byte 4 (the
/// one found is returned), and a reserved zero at byte 7.
pub(super) fn check_preamble(
    bytes: &[u8],
    magic: &[u8; 4],
    versions: &[u8],
    header_len: usize,
) -> Result<u8, CompressedError> {
    if bytes.len() < header_len {
        return Err(CompressedError::ShortHeader {
            have: bytes.len(),
            need: header_len,
        });
    }
    if &bytes[..4] != magic {
        return Err(CompressedError::BadMagic([
            bytes[0], bytes[1], bytes[2], bytes[3],
        ]));
    }
    let version = bytes[H_VERSION];
    if !versions.contains(&version) {
        return Err(CompressedError::UnsupportedVersion(version));
    }
    if bytes[H_RESERVED] != 0 {
        return Err(CompressedError::Reserved(bytes[H_RESERVED]));
    }
    Ok(version)
}

/// The payload after a `header_len`-byte header whose declared cell count
/// `m` is within `max` and whose payload length, declared at byte
/// `length_at`, is what is present: both checked before any decoding.
pub(super) fn sized_payload(
    bytes: &[u8],
    (header_len, length_at): (usize, usize),
    m: u64,
    max: u64,
) -> Result<&[u8], CompressedError> {
    if m > max {
        return Err(CompressedError::TooLarge { m, limit: max });
    }
    let declared = le_u64(bytes, length_at);
    let payload = bytes.get(header_len..).unwrap_or_default();
    if declared != payload.len() as u64 {
        return Err(CompressedError::ShortPayload {
            declared,
            have: payload.len(),
        });
    }
    Ok(payload)
}

fn decode_bits(bytes: &[u8], kind: u8, max_bits: u64) -> Result<(BitArray, u8), CompressedError> {
    let version = check_preamble(bytes, MAGIC, &[VERSION_EACH_BIT, VERSION], HEADER_LEN)?;
    if bytes[H_KIND] != kind {
        return Err(CompressedError::WrongKind {
            found: bytes[H_KIND],
            expected: kind,
        });
    }
    let (k, m, ones) = (bytes[H_K], le_u64(bytes, H_M), le_u64(bytes, H_ONES));
    if m == 0
        || m > MAX_SNAPSHOT_BITS
        || ones > m
        || (kind == KIND_FILTER && (k == 0 || u64::from(k) > m))
    {
        return Err(CompressedError::BadSizes { m, ones, k });
    }
    let payload = sized_payload(bytes, (HEADER_LEN, H_PAYLOAD_LEN), m, max_bits)?;
    let gaps = GapModel::new(m, ones);
    // The payload must be long enough for the declared sizes before any
    // decoding (a few bytes that declare many ones cost nothing).
    let need = if version == VERSION {
        ((ones as f64 * gaps.least_bits() * 0.999 / 8.0) as u64).saturating_sub(8)
    } else {
        least_payload_bytes(m, ones, prob0(m, ones))
    };
    if (payload.len() as u64) < need {
        return Err(CompressedError::TooShortForSizes {
            m,
            ones,
            have: payload.len(),
            need,
        });
    }
    if payload.first().is_some_and(|&b| b != 0) {
        return Err(CompressedError::Corrupt {
            decoded: 0,
            declared: ones,
        });
    }
    let mut dec = RangeDecoder::new(payload).ok_or(CompressedError::PayloadEnded { bit: 0, m })?;
    let mut bits = BitArray::new(m as usize);
    if version == VERSION {
        // The next bit a gap starts from.
        let mut from = 0u64;
        for decoded in 0..ones {
            let at = gaps.next_marked(&mut dec, &mut from, m, (decoded, ones))?;
            bits.set(at as usize);
        }
    } else {
        let p0 = prob0(m, ones);
        for i in 0..m {
            if dec
                .decode(p0)
                .ok_or(CompressedError::PayloadEnded { bit: i, m })?
            {
                bits.set(i as usize);
            }
        }
    }
    let decoded = bits.count_ones();
    if decoded != ones
        || checksum(bits.words(), k) != le_u64(bytes, H_CHECKSUM)
        || !dec.ended_where_encoder_did()
    {
        return Err(CompressedError::Corrupt {
            decoded,
            declared: ones,
        });
    }
    Ok((bits, k))
}

/// Encodes a Bloom filter snapshot.
pub fn compress_bloom(f: &BloomFilter) -> Vec<u8> {
    encode_bits(f.bits(), KIND_FILTER, f.k().min(255) as u8)
}

/// Decodes a Bloom filter snapshot, bit-exactly, of at most
/// [`DEFAULT_DECODE_MAX_BITS`] bits.
pub fn decompress_bloom(bytes: &[u8]) -> Result<BloomFilter, CompressedError> {
    decompress_bloom_within(bytes, DEFAULT_DECODE_MAX_BITS)
}

/// Decodes a Bloom filter snapshot of at most `max_bits` bits (capped at
/// [`MAX_SNAPSHOT_BITS`]); a larger declared size is refused before any
/// allocation or decoding.
pub fn decompress_bloom_within(
    bytes: &[u8],
    max_bits: u64,
) -> Result<BloomFilter, CompressedError> {
    let (bits, k) = decode_bits(bytes, KIND_FILTER, max_bits.min(MAX_SNAPSHOT_BITS))?;
    Ok(BloomFilter::from_bits(bits, usize::from(k)))
}

/// Encodes the change from `old` to `new` (the XOR of their bits).
pub fn compress_delta(old: &BloomFilter, new: &BloomFilter) -> Result<Vec<u8>, ShapeMismatch> {
    if old.m() != new.m() || old.k() != new.k() {
        return Err(ShapeMismatch {
            left_m: old.m(),
            left_k: old.k(),
            right_m: new.m(),
            right_k: new.k(),
        });
    }
    let mut x = BitArray::new(old.m());
    for (i, (a, b)) in old
        .bits()
        .words()
        .iter()
        .zip(new.bits().words())
        .enumerate()
    {
        let mut w = a ^ b;
        while w != 0 {
            let bit = w.trailing_zeros() as usize;
            x.set(i * 64 + bit);
            w &= w - 1;
        }
    }
    Ok(encode_bits(&x, KIND_DELTA, old.k().min(255) as u8))
}

/// Applies a delta to the filter it was made from, giving the newer one.
pub fn apply_delta(old: &BloomFilter, delta: &[u8]) -> Result<BloomFilter, CompressedError> {
    // The delta must have the filter's own size: checked on the header,
    // before decoding, so a delta cannot make the reader decode more bits
    // than the filter it applies to.
    let declared = le_u64(delta, H_M);
    if delta.len() >= HEADER_LEN && declared != old.m() as u64 {
        return Err(CompressedError::DeltaShape {
            delta_m: declared,
            filter_m: old.m() as u64,
        });
    }
    let (x, _) = decode_bits(delta, KIND_DELTA, old.m() as u64)?;
    let mut bits = BitArray::new(old.m());
    for i in 0..old.m() {
        if old.bits().get(i) ^ x.get(i) {
            bits.set(i);
        }
    }
    Ok(BloomFilter::from_bits(bits, old.k()))
}
