//! Zero runs coded as geometric gaps: the coding both snapshot formats use
//! from version 2 on, so that a snapshot's cost follows its marked cells
//! (set bits, non-zero counters), not its size.
//!
//! # Why
//!
//! Version 1 coded every cell, one range-coder decision each, however few
//! were marked. A probe's heavy-stage filter has 2^19 counters a shard at
//! the default sizes, so a shard-window that held ten packets cost nearly
//! as much to encode (3.2-3.6 ms) and to decode and merge (4.2 ms) as one
//! that held a thousand (`cargo bench --bench network`, BENCHMARKS.md,
//! twenty-sixth round).
//! On a sparse link, or a replay of a long quiet trace, that walk was
//! nearly all of a probe's and a collector's CPU.
//!
//! # The code
//!
//! A snapshot's header declares `n` marked cells of `m`. Both sides model
//! the cells as independent, each unmarked with probability `q = 1 - n/m`
//! (the static model version 1 used for each cell), so the run `g` of
//! unmarked cells before each marked one is geometric, `P(g) = (1 - q)
//! q^g`. Each gap is coded as Golomb's quotient and remainder with
//! `M = 2^b`, `b` the least with `q^M <= 1/2`:
//!
//! - the quotient `g >> b` in unary, each "one more" decision with
//!   probability `q^M` (the quotient of a geometric variable is geometric);
//! - the `b` remainder bits, most significant first. Since `q^r` is the
//!   product of `q^(2^i)` over the set bits `i` of `r`, the remainder's bits
//!   are independent and bit `i` is set with probability
//!   `q^(2^i) / (1 + q^(2^i))`.
//!
//! With these probabilities the range coder codes each gap in `-log2 P(g)`
//! bits, up to the 16-bit quantisation: exactly the geometric entropy,
//! which summed over the gaps is the same `m H(n/m)` bits a cell-by-cell
//! code of the same model costs. Only the work differs: about `2 + b`
//! decisions a marked cell instead of one a cell, so at most as many
//! decisions as version 1 made when dense (`b = 0`, a unary gap), and a
//! few hundred times fewer when sparse. The trailing run after the last
//! marked cell is not coded: the decoder knows `n`.
//!
//! A decoded gap that would pass the last cell is refused as soon as its
//! quotient does, so damaged input cannot make the decoder loop past `m`.

use super::CompressedError;
use super::compressed::{PROB_BITS, RangeDecoder, RangeEncoder};

/// The most remainder bits: `M = 2^b` never needs more for `m <= 2^63`.
const MAX_REMAINDER_BITS: u32 = 63;

/// A probability in units of 2^-16, clamped to the coder's range.
fn quantised(p: f64) -> u32 {
    ((p * f64::from(1u32 << PROB_BITS)).round() as u32).clamp(1, (1 << PROB_BITS) - 1)
}

/// The geometric gap model of `n` marked cells among `m`.
pub(super) struct GapModel {
    /// `b`: the remainder's bits (`M = 2^b`).
    remainder_bits: u32,
    /// P(the quotient stops here) = `1 - q^M`, quantised.
    stop_prob: u32,
    /// P(remainder bit `i` is clear) = `1 / (1 + q^(2^i))`, quantised.
    bit_clear_prob: Vec<u32>,
}

impl GapModel {
    /// The model of `marked` of `m` cells marked (`marked <= m`).
    pub(super) fn new(m: u64, marked: u64) -> GapModel {
        let m = m.max(1) as f64;
        let marked = (marked as f64).min(m);
        // ln q; -inf when every cell is marked (q = 0).
        let ln_q = (-marked / m).ln_1p();
        let remainder_bits = if ln_q.is_finite() && ln_q < 0.0 {
            (std::f64::consts::LN_2 / -ln_q)
                .log2()
                .ceil()
                .clamp(0.0, f64::from(MAX_REMAINDER_BITS)) as u32
        } else {
            0
        };
        // q^(2^i) = exp(2^i ln q); exp(-inf) = 0.
        let q_pow = |i: u32| (2f64.powi(i as i32) * ln_q).exp();
        GapModel {
            remainder_bits,
            stop_prob: quantised(1.0 - q_pow(remainder_bits)),
            bit_clear_prob: (0..remainder_bits)
                .map(|i| quantised(1.0 / (1.0 + q_pow(i))))
                .collect(),
        }
    }

    /// Codes one gap (unmarked cells before the next marked one).
    #[inline]
    pub(super) fn encode(&self, enc: &mut RangeEncoder, gap: u64) {
        let b = self.remainder_bits;
        for _ in 0..gap >> b {
            enc.encode(true, self.stop_prob);
        }
        enc.encode(false, self.stop_prob);
        for i in (0..b).rev() {
            enc.encode((gap >> i) & 1 == 1, self.bit_clear_prob[i as usize]);
        }
    }

    /// Decodes one gap of at most `room` cells: `Ok(None)` when the payload
    /// ended, `Err(())` when the coded gap is longer than `room`.
    #[inline]
    fn decode(&self, dec: &mut RangeDecoder, room: u64) -> Result<Option<u64>, ()> {
        let b = self.remainder_bits;
        let most_quotient = room >> b;
        let mut quotient = 0u64;
        loop {
            match dec.decode(self.stop_prob) {
                None => return Ok(None),
                Some(false) => break,
                Some(true) if quotient == most_quotient => return Err(()),
                Some(true) => quotient += 1,
            }
        }
        let mut remainder = 0u64;
        for i in (0..b).rev() {
            match dec.decode(self.bit_clear_prob[i as usize]) {
                None => return Ok(None),
                Some(bit) => remainder |= u64::from(bit) << i,
            }
        }
        let gap = (quotient << b) | remainder;
        if gap > room { Err(()) } else { Ok(Some(gap)) }
    }

    /// The next marked cell of `m`: decodes the gap from `*from` and moves
    /// `*from` past the cell. `decoded` and `declared` (marked cells
    /// decoded so far, and declared) go into the error of a gap that
    /// passes the last cell.
    pub(super) fn next_marked(
        &self,
        dec: &mut RangeDecoder,
        from: &mut u64,
        m: u64,
        (decoded, declared): (u64, u64),
    ) -> Result<u64, CompressedError> {
        let room = (m - 1).checked_sub(*from);
        match room.map(|room| self.decode(dec, room)) {
            Some(Ok(Some(gap))) => {
                let at = *from + gap;
                *from = at + 1;
                Ok(at)
            }
            Some(Ok(None)) => Err(CompressedError::PayloadEnded { bit: *from, m }),
            None | Some(Err(())) => Err(CompressedError::Corrupt { decoded, declared }),
        }
    }

    /// The fewest bits any one gap can cost under this model: the
    /// quotient's stop and, for each remainder bit, its cheaper value.
    pub(super) fn least_bits(&self) -> f64 {
        let scale = f64::from(1u32 << PROB_BITS);
        let cost = |p0: u32| {
            let p = f64::from(p0) / scale;
            (-p.log2()).min(-(1.0 - p).log2())
        };
        -(f64::from(self.stop_prob) / scale).log2()
            + self.bit_clear_prob.iter().map(|&p| cost(p)).sum::<f64>()
    }
}
