//! Compressed counting-filter snapshots: the counter coding the
//! network-wide mode exports (a probe's heavy-stage counters per window).
//!
//! Counters after `n` insertions into `m` counters with `k` hashes are
//! nearly Poisson with mean `nk/m` (003 §III), so most are small and a
//! few (the heavy flows' counters) large. Each counter is coded as a unary
//! run of binary decisions "is it above j?" for `j = 0, 1, ...`, each with
//! the probability the snapshot's own histogram gives, `P(v > j | v >= j)`,
//! through the same binary range coder as the Bloom snapshots (002). With
//! those conditional probabilities the unary code is the histogram's own
//! entropy code: the payload comes within a fraction of a percent of `m
//! H(v)` bits, where `H(v)` is the entropy of the counter distribution
//! (tested). Counters of [`ESCAPE`] or more end the run there and carry the
//! rest, `v - ESCAPE`, in the counter width's raw bits, so that a
//! saturated 16-bit counter costs 16 bits, not 65,535 decisions.
//!
//! Version 2 (written) codes the first decision, "is it above 0?", as the
//! geometric gap before each non-zero counter (`gap_coding.rs`), then that
//! counter's run from `j = 1`: the same decisions' information, so the same
//! size, but work in proportion to the non-zero counters instead of all
//! `m`. Version 1 (still read) coded every counter's run.
//!
//! # Format (versions 1 and 2, little-endian)
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `FSCC` |
//! | 1 | version (2; 1 is read too) |
//! | 1 | counter bits (4, 8 or 16) |
//! | 1 | `k` |
//! | 1 | reserved (0) |
//! | 8 | `m`, counters |
//! | 8 | checksum of the counters, the width and `k` |
//! | 8 | payload length |
//! | 8 x (ESCAPE + 1) | histogram: counters equal to 0 .. ESCAPE-1, then those >= ESCAPE |
//! | ... | range-coded: version 2, each non-zero counter's gap then its run from 1; version 1, every counter's run |
//!
//! The checksum chains `fmix64` over the counters in order: in version 2
//! over the non-zero ones (with their indices), in version 1 over all.
//!
//! As for Bloom snapshots, the declared size is checked against the
//! caller's limit, and the payload against the shortest coding the
//! histogram allows, before anything is decoded; damage is a
//! [`CompressedError`], never a panic.
//!
//! ```
//! use flowsieve::filter::{
//!     compress_counting, decompress_counting, CounterWidth, Counters, CountingBloomFilter,
//! };
//! let mut f = CountingBloomFilter::new(1 << 16, 4, CounterWidth::W8);
//! for h in 0..20_000u64 { f.insert(h.wrapping_mul(0x9e37_79b9_7f4a_7c15)); }
//! let bytes = compress_counting(&f);
//! assert!(bytes.len() < (1 << 16) / 2);            // 8-bit counters, under 4 bits each
//! let g = decompress_counting(&bytes, 1 << 16).unwrap();
//! assert!((0..f.m()).all(|i| f.counter(i) == g.counter(i)));
//! ```

use super::compressed::{
    PROB_BITS, RangeDecoder, RangeEncoder, check_preamble, le_u64, sized_payload,
};
use super::gap_coding::GapModel;
use super::{
    CompressedError, CounterCells, CounterSnapshot, CounterWidth, CountingBloomFilter,
    SparseCounters,
};
use crate::hash::fmix64;

const MAGIC: &[u8; 4] = b"FSCC";
/// The version written.
const VERSION: u8 = 2;
/// Version 1 coded every counter's run; it is still read.
const VERSION_EACH_COUNTER: u8 = 1;
/// Counters at or above this end their unary run and carry the rest raw.
pub const ESCAPE: usize = 32;
const H_BITS: usize = 5;
const H_K: usize = 6;
const H_M: usize = 8;
const H_CHECKSUM: usize = 16;
const H_PAYLOAD_LEN: usize = 24;
const H_HISTOGRAM: usize = 32;
const HEADER_LEN: usize = H_HISTOGRAM + 8 * (ESCAPE + 1);

/// The checksum of the counters, the width and `k`: a chain of `fmix64`
/// over the counters in order, fed one counter at a time so that the coder
/// can compute it in the same pass as it codes or decodes. Its chain and
/// the range coder's are independent, and the CPU runs them side by side;
/// as a separate pass it cost as much as the coding itself.
struct CounterChecksum(u64);

impl CounterChecksum {
    fn new(k: usize, width: CounterWidth) -> CounterChecksum {
        CounterChecksum(fmix64(
            0x1319_8a2e_0370_7345 ^ k as u64 ^ (u64::from(width.bits()) << 8),
        ))
    }

    #[inline(always)]
    fn push(&mut self, i: usize, v: u64) {
        self.0 = fmix64(self.0 ^ v).wrapping_add(i as u64);
    }
}

/// How many counters hold each value below [`ESCAPE`], then how many hold
/// [`ESCAPE`] or more. The zeros are what the non-zero walk
/// ([`CountingBloomFilter::for_each_nonzero`], which skips zero words
/// whole) did not visit.
fn histogram_of<C: CounterCells + ?Sized>(f: &C) -> Vec<u64> {
    let mut histogram = vec![0u64; ESCAPE + 1];
    let mut nonzero = 0u64;
    f.for_each_nonzero(|_, v| {
        histogram[(v as usize).min(ESCAPE)] += 1;
        nonzero += 1;
    });
    histogram[0] = f.m() as u64 - nonzero;
    histogram
}

/// `P(v == j | v >= j)` in units of 2^-16, clamped to the coder's range:
/// the probability of stopping the unary run at `j`.
fn stop_prob(histogram: &[u64], tails: &[u64], j: usize) -> u32 {
    let tail = tails[j].max(1) as f64;
    let p = histogram[j] as f64 / tail;
    ((p * f64::from(1u32 << PROB_BITS)).round() as u32).clamp(1, (1 << PROB_BITS) - 1)
}

/// `tails[j]`: counters `>= j` (for `j <= ESCAPE`).
fn tails(histogram: &[u64]) -> Vec<u64> {
    let mut t = vec![0u64; ESCAPE + 1];
    let mut acc = 0u64;
    for j in (0..=ESCAPE).rev() {
        acc = acc.saturating_add(histogram[j]);
        t[j] = acc;
    }
    t
}

/// Encodes a counting filter's counters: a whole filter, or its non-zero
/// cells ([`super::SparseCounters`]; a [`super::CounterSnapshot`] codes
/// either with [`super::CounterSnapshot::compress`]), to the same bytes
/// for the same counters. The work is in proportion to the
/// non-zero counters, plus, for a whole filter, a walk over its words.
pub fn compress_counting<C: CounterCells + ?Sized>(f: &C) -> Vec<u8> {
    let m = f.m();
    let histogram = histogram_of(f);
    let tails = tails(&histogram);
    let probs: Vec<u32> = (0..ESCAPE)
        .map(|j| stop_prob(&histogram, &tails, j))
        .collect();
    let bits = f.width().bits();
    let gaps = GapModel::new(m as u64, m as u64 - histogram[0]);
    let mut enc = RangeEncoder::new();
    let mut sum = CounterChecksum::new(f.k(), f.width());
    // The next counter a gap starts from.
    let mut from = 0usize;
    f.for_each_nonzero(|i, v| {
        sum.push(i, v);
        gaps.encode(&mut enc, (i - from) as u64);
        from = i + 1;
        // The rest of the unary run ("above 0" is the gap's): "stop here"
        // is a 0 (probability probs[j]).
        let mut j = 1usize;
        while j < ESCAPE {
            let more = v > j as u64;
            enc.encode(more, probs[j]);
            if !more {
                break;
            }
            j += 1;
        }
        if j == ESCAPE {
            let rest = v - ESCAPE as u64;
            for b in (0..bits).rev() {
                enc.encode((rest >> b) & 1 == 1, 1 << (PROB_BITS - 1));
            }
        }
    });
    let payload = enc.finish();
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[VERSION, bits as u8, f.k().min(255) as u8, 0]);
    out.extend_from_slice(&(m as u64).to_le_bytes());
    out.extend_from_slice(&sum.0.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    for h in &histogram {
        out.extend_from_slice(&h.to_le_bytes());
    }
    out.extend_from_slice(&payload);
    out
}

/// The fewest payload bytes that can code the histogram's counters: each
/// decision costs `-log2` of its probability (as for Bloom snapshots, 8
/// bytes and 0.1 % allowed for the coder's tail and rounding). Version 1
/// makes the decision at `j = 0` for every counter; version 2 replaces it
/// with a gap per non-zero counter, of at least `gap_bits` bits each.
fn least_payload_bytes(
    histogram: &[u64],
    tails: &[u64],
    probs: &[u32],
    bits: u32,
    gap_bits: Option<f64>,
) -> u64 {
    let scale = f64::from(1u32 << PROB_BITS);
    let mut total = 0.0;
    let first = match gap_bits {
        Some(gap_bits) => {
            total += tails[1] as f64 * gap_bits;
            1
        }
        None => 0,
    };
    for j in first..ESCAPE {
        let stop = f64::from(probs[j]) / scale;
        // Counters equal to j stop here; those above continue.
        total += histogram[j] as f64 * -stop.log2();
        total += tails[j + 1] as f64 * -(1.0 - stop).log2();
    }
    total += histogram[ESCAPE] as f64 * f64::from(bits);
    ((total * 0.999 / 8.0) as u64).saturating_sub(8)
}

/// Decodes a counting-filter snapshot of at most `max_counters` counters;
/// a larger declared size is refused before anything is allocated.
pub fn decompress_counting(
    bytes: &[u8],
    max_counters: u64,
) -> Result<CountingBloomFilter, CompressedError> {
    decode(bytes, max_counters, false).map(CounterSnapshot::into_dense)
}

/// A snapshot with at most one non-zero counter in this many is decoded as
/// cells ([`decompress_counter_snapshot`]). Past that share a whole array
/// is smaller than the cells (8 bytes each against at most 2 a counter)
/// and is what a merge of it ends up as anyway.
pub const SPARSE_SHARE: u64 = 32;

/// Decodes a counting-filter snapshot as [`decompress_counting`] does,
/// into its non-zero cells when at most one counter in [`SPARSE_SHARE`] is
/// set, else into a whole filter: a nearly empty window then costs what it
/// holds, not an allocation and a walk of `m` counters.
///
/// ```
/// use flowsieve::filter::{
///     CounterSnapshot, CounterWidth, CountingBloomFilter, compress_counting,
///     decompress_counter_snapshot,
/// };
/// let mut f = CountingBloomFilter::new(1 << 16, 4, CounterWidth::W8);
/// f.insert(42);
/// let back = decompress_counter_snapshot(&compress_counting(&f), 1 << 16).unwrap();
/// assert!(matches!(back, CounterSnapshot::Sparse(_)));
/// assert_eq!(back, CounterSnapshot::from(f));
/// ```
pub fn decompress_counter_snapshot(
    bytes: &[u8],
    max_counters: u64,
) -> Result<CounterSnapshot, CompressedError> {
    decode(bytes, max_counters, true)
}

/// Where a decoder puts the counters it decodes.
enum Decoded {
    Dense(CountingBloomFilter),
    Sparse(Vec<(u32, u16)>),
}

/// The snapshot's counters, as cells when `sparse_if_few` and few are set.
fn decode(
    bytes: &[u8],
    max_counters: u64,
    sparse_if_few: bool,
) -> Result<CounterSnapshot, CompressedError> {
    let version = check_preamble(bytes, MAGIC, &[VERSION_EACH_COUNTER, VERSION], HEADER_LEN)?;
    let (k, m) = (bytes[H_K], le_u64(bytes, H_M));
    let width = CounterWidth::from_bits(u32::from(bytes[H_BITS]));
    let histogram: Vec<u64> = (0..=ESCAPE)
        .map(|j| le_u64(bytes, H_HISTOGRAM + 8 * j))
        .collect();
    let total = histogram.iter().try_fold(0u64, |a, &h| a.checked_add(h));
    let Some(width) = width.filter(|_| {
        m > 0 && k > 0 && u64::from(k) <= m && m % u64::from(k) == 0 && total == Some(m)
    }) else {
        return Err(CompressedError::BadSizes { m, ones: 0, k });
    };
    let payload = sized_payload(bytes, (HEADER_LEN, H_PAYLOAD_LEN), m, max_counters)?;
    let tails = tails(&histogram);
    let probs: Vec<u32> = (0..ESCAPE)
        .map(|j| stop_prob(&histogram, &tails, j))
        .collect();
    let bits = width.bits();
    let nonzero = m - histogram[0];
    let gaps = GapModel::new(m, nonzero);
    let gap_bits = (version == VERSION).then(|| gaps.least_bits());
    let need = least_payload_bytes(&histogram, &tails, &probs, bits, gap_bits);
    if (payload.len() as u64) < need {
        return Err(CompressedError::TooShortForSizes {
            m,
            ones: m - histogram[0],
            have: payload.len(),
            need,
        });
    }
    let mut dec = RangeDecoder::new(payload).ok_or(CompressedError::PayloadEnded { bit: 0, m })?;
    // A filter of this shape exists: `m` splits into `k` partitions (checked
    // above) and `k` is one a filter takes.
    if usize::from(k) > super::MAX_K {
        return Err(CompressedError::BadSizes { m, ones: 0, k });
    }
    let k = usize::from(k);
    // Cells when asked for and few; their indices are 32-bit.
    let cells = sparse_if_few
        && version == VERSION
        && nonzero <= m / SPARSE_SHARE
        && u32::try_from(m).is_ok();
    let mut out = if cells {
        Decoded::Sparse(Vec::with_capacity(nonzero as usize))
    } else {
        let f = CountingBloomFilter::new(m as usize, k, width);
        if f.m() as u64 != m || f.k() != k {
            return Err(CompressedError::BadSizes {
                m,
                ones: 0,
                k: k as u8,
            });
        }
        Decoded::Dense(f)
    };
    let mut seen = vec![0u64; ESCAPE + 1];
    let mut sum = CounterChecksum::new(k, width);
    // The rest of counter `i`'s unary run from `first`, and its escaped
    // bits: the value, or why it could not be decoded.
    let mut run = |dec: &mut RangeDecoder, i: u64, first: usize| {
        let ended = || CompressedError::PayloadEnded { bit: i, m };
        let mut j = first;
        while j < ESCAPE && dec.decode(probs[j]).ok_or_else(ended)? {
            j += 1;
        }
        let mut v = j as u64;
        if j == ESCAPE {
            let mut rest = 0u64;
            for _ in 0..bits {
                let bit = dec.decode(1 << (PROB_BITS - 1)).ok_or_else(ended)?;
                rest = (rest << 1) | u64::from(bit);
            }
            v = v.saturating_add(rest);
        }
        if v > width.max() {
            return Err(CompressedError::Corrupt {
                decoded: i,
                declared: m,
            });
        }
        seen[j] += 1;
        Ok(v)
    };
    if version == VERSION {
        // The next counter a gap starts from.
        let mut from = 0u64;
        for decoded in 0..nonzero {
            let i = gaps.next_marked(&mut dec, &mut from, m, (decoded, nonzero))?;
            let v = run(&mut dec, i, 1)?;
            sum.push(i as usize, v);
            match &mut out {
                Decoded::Dense(f) => f.set_counter(i as usize, v),
                // Below m, which fits 32 bits; v fits the width, at most 16.
                Decoded::Sparse(c) => c.push((i as u32, v as u16)),
            }
        }
        seen[0] = m - nonzero;
    } else {
        for i in 0..m {
            let v = run(&mut dec, i, 0)?;
            sum.push(i as usize, v);
            // The filter starts at zero: only the others are written.
            // (Version 1 always decodes whole.)
            if v != 0
                && let Decoded::Dense(f) = &mut out
            {
                f.set_counter(i as usize, v);
            }
        }
    }
    if seen != histogram || sum.0 != le_u64(bytes, H_CHECKSUM) || !dec.ended_where_encoder_did() {
        return Err(CompressedError::Corrupt {
            decoded: m - seen[0],
            declared: m - histogram[0],
        });
    }
    Ok(match out {
        Decoded::Dense(f) => CounterSnapshot::Dense(f),
        Decoded::Sparse(c) => {
            CounterSnapshot::Sparse(SparseCounters::from_sorted(m as usize, k, width, c))
        }
    })
}
