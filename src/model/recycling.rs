//! Average false-positive rates of recycling Bloom filters (Dozier,
//! Salamatian, Rubenstein, "Modeling Average False Positive Rates of
//! Recycling Bloom Filters", paper 004).
//!
//! A sigma-bounded filter of `M` bits recycles when a new message would
//! leave more than `sigma` bits set. Its state is the number of set bits;
//! the chain (004 §IV) moves forward by the bits each new message sets and
//! back at a recycle: to 0 when *non-retaining* (the triggering message is
//! dropped), or to the bits that message sets in an empty filter when
//! *retaining*. Hashes are *colliding* (k independent positions) or
//! *non-colliding* (k distinct positions).
//!
//! The chain regenerates at every recycle, so this module computes it as a
//! renewal process: the expected number of arrivals that find the filter
//! in state `i` during one cycle, `V_i`, follows 004 eq. (15) forward from
//! the cycle's start state, and
//!
//! ```text
//! pi_i = V_i / sum V                              stationary distribution (15)
//! f1   = sum pi_i rho(i)                          one-phase rate (18)
//! E[N] = sum V                                    new messages per cycle (23)
//! F_i  = V_i Pr(recycle from i)                   frozen half at a swap (24), (25)
//! f2   = 1 - (1 - f1)(1 - sum F_i rho(i))         two-phase rate (26)
//! ```
//!
//! with `rho(i) = (i/M)^k` (colliding) or `C(i,k)/C(M,k)` (non-colliding;
//! the extracted text of 004 eq. (17) prints `i/M`, which is only right for
//! `k = 1`: a message is a false positive when all its `k` distinct
//! positions are among the `i` set bits).
//!
//! Two differences from the paper's wording, both so the model counts what
//! a simulation of the filter counts: `E[N]` includes the message that
//! triggers the recycle (eq. (22) stops the count when `sigma` is reached),
//! and for two-phase filters `M` here is the size of one half.
//!
//! ```
//! use flowsieve::model::recycling::{Hashing, RecyclingModel};
//! let m = RecyclingModel::new(1000, 1, 500, Hashing::Colliding, false).unwrap();
//! // k = 1 has a closed form, 004 eq. (19).
//! let closed: f64 = (0..=500u32).map(|i| f64::from(i) / (1000.0 * f64::from(1000 - i))).sum::<f64>()
//!     / (0..=500u32).map(|j| 1.0 / f64::from(1000 - j)).sum::<f64>();
//! assert!((m.one_phase_fpr() - closed).abs() < 1e-12);
//! ```

/// How a message's `k` positions are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hashing {
    /// `k` independent uniform positions (they may coincide).
    Colliding,
    /// `k` distinct uniform positions (sampling without replacement).
    NonColliding,
}

/// Why a recycling model cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecyclingModelError {
    #[error("k must be at least 1")]
    /// k is 0.
    ZeroK,
    #[error("the filter needs at least k bits (m = {m}, k = {k})")]
    /// Fewer bits than k.
    TooFewBits {
        /// Bits.
        m: u64,
        /// Positions per message.
        k: u32,
    },
    #[error("sigma must be below m (sigma = {sigma}, m = {m})")]
    /// sigma is not below m.
    SigmaTooLarge {
        /// The threshold.
        sigma: u64,
        /// Bits.
        m: u64,
    },
    #[error(
        "a retaining filter needs sigma >= k, or one message could recycle it forever (sigma = {sigma}, k = {k})"
    )]
    /// A retaining filter with sigma below k.
    RetainingSigmaBelowK {
        /// The threshold.
        sigma: u64,
        /// Positions per message.
        k: u32,
    },
}

/// The solved chain for one configuration.
#[derive(Clone, Debug)]
pub struct RecyclingModel {
    m: u64,
    k: u32,
    sigma: u64,
    hashing: Hashing,
    retaining: bool,
    /// Expected arrivals per cycle finding `i` bits set.
    visits: Vec<f64>,
    /// Probability that a new message arriving at `i` bits triggers a recycle.
    recycle: Vec<f64>,
}

/// The forward transitions of one new message from `i` bits (004 eqs.
/// (4)-(8) colliding, (11)-(13) non-colliding): `(p[j - i], p_recycle)` for
/// `j` in `i ..= min(i + k, sigma)`.
pub fn transitions(m: u64, k: u32, sigma: u64, hashing: Hashing, i: u64) -> (Vec<f64>, f64) {
    let mut dist = vec![0.0; k as usize + 1];
    let recycle = transitions_into(m, k, sigma, hashing, i, &mut dist);
    (dist, recycle)
}

/// [`transitions`] into a caller's buffer of `k + 1` entries (no
/// allocation: the chain is solved state by state, hundreds of thousands of
/// times for a large filter). Returns the recycle probability.
fn transitions_into(m: u64, k: u32, sigma: u64, hashing: Hashing, i: u64, dist: &mut [f64]) -> f64 {
    // The hashing and `k` are fixed for a whole chain, hundreds of
    // thousands of states: match once, and for colliding positions divide
    // once per bit count `i + off` instead of once per (position, offset)
    // pair. The same divisions of the same operands, so the same bits.
    let mf = m as f64;
    let kk = (k as usize).min(dist.len().saturating_sub(1));
    match hashing {
        Hashing::Colliding if kk <= COLLIDING_TABLE => {
            let mut stay = [0.0; COLLIDING_TABLE];
            let mut advance = [0.0; COLLIDING_TABLE];
            for off in 0..kk {
                let b = (i + off as u64) as f64;
                stay[off] = b / mf;
                advance[off] = (mf - b) / mf;
            }
            walk_positions(kk, i, sigma, dist, |_, off| (stay[off], advance[off]))
        }
        Hashing::Colliding => walk_positions(kk, i, sigma, dist, |_, off| {
            let b = (i + off as u64) as f64;
            (b / mf, (mf - b) / mf)
        }),
        Hashing::NonColliding => walk_positions(kk, i, sigma, dist, |h, off| {
            let b = (i + off as u64) as f64;
            ((b - h as f64) / (mf - h as f64), (mf - b) / (mf - h as f64))
        }),
    }
}

/// Offsets a colliding chain's per-state division table holds (a larger
/// `k` divides per step, as the formula is written).
const COLLIDING_TABLE: usize = 16;

/// The largest `k` [`ChainJumps::at_lanes`] walks (the pipeline's largest,
/// `--rbf-k 32`). Larger than [`COLLIDING_TABLE`]: the lanes take the
/// states far from sigma, nearly all of a chain, and there a `k` of 17 to
/// 32 ran five times slower through [`transitions_into`]. The ring of
/// [`ChainJumps::at`] stays at 16: widened to 32, it made the sizing's
/// chain (which walks every state through `at`) 1.18 times slower at
/// `k = 4` (paired; BENCHMARKS.md, eighty-fourth round).
const LANES_MAX_K: usize = 32;

/// The jump distributions of a chain's states, visited in increasing order,
/// bit for bit what [`transitions_into`] gives.
///
/// Why this exists: solving the chain for an explicit sigma walks every
/// state up to sigma (2^19 of them for the default filter at
/// `sigma:0.5`), and that solve ran beside the packets on the model
/// thread, about a tenth of all the CPU of an all-stages run on the
/// benchmark trace. Two things made [`transitions_into`] slow there:
///
/// - it divides `2k` times a state, although state `i + 1` needs only one
///   bit count (`i + k`) that state `i` did not;
/// - its offset loop runs over a buffer in memory, so every step's `+=`
///   waits for the store the step before made (store-to-load forwarding,
///   a few cycles a step, `k (k + 1) / 2` steps a state).
///
/// For colliding positions and the states no message can carry past sigma
/// (every state but the last `k`), this keeps each bit count's two
/// quotients in a ring indexed by the bit count, computes one new pair a
/// state, and runs the walk for a `k` known at compile time, in registers.
/// Every product and sum is the same operation on the same operands in the
/// same order as in [`walk_positions`], so the bits are the same; the
/// other states (and `k > 16`, which the lanes of
/// [`ChainJumps::at_lanes`] take up to 32) go through
/// [`transitions_into`] itself. Non-colliding positions have rings of
/// their own, one per position ([`ChainJumps::at_distinct`]).
struct ChainJumps {
    m: u64,
    k: u32,
    sigma: u64,
    hashing: Hashing,
    /// `b / m` and `(m - b) / m` for bit count `b`, at slot `b % 16`.
    stay: [f64; COLLIDING_TABLE],
    advance: [f64; COLLIDING_TABLE],
    /// Non-colliding positions: row `h` holds position `h`'s
    /// `(b - h) / (m - h)` and `(m - b) / (m - h)` for bit count `b`, at
    /// slot `b % 16`, for the `h + 1` bit counts a state's walk reads.
    distinct_stay: [[f64; COLLIDING_TABLE]; COLLIDING_TABLE],
    distinct_advance: [[f64; COLLIDING_TABLE]; COLLIDING_TABLE],
    /// The bit counts `next .. next + k - 1` are in the ring (the state
    /// the ring is ready for), or `None` before the first fast state.
    next: Option<u64>,
}

impl ChainJumps {
    fn new(m: u64, k: u32, sigma: u64, hashing: Hashing) -> ChainJumps {
        ChainJumps {
            m,
            k,
            sigma,
            hashing,
            stay: [0.0; COLLIDING_TABLE],
            advance: [0.0; COLLIDING_TABLE],
            distinct_stay: [[0.0; COLLIDING_TABLE]; COLLIDING_TABLE],
            distinct_advance: [[0.0; COLLIDING_TABLE]; COLLIDING_TABLE],
            next: None,
        }
    }

    /// Stores position `h`'s two quotients at bit count `b`, for
    /// non-colliding positions: the operations of [`transitions_into`]'s
    /// non-colliding step, on the same operands.
    #[inline(always)]
    fn distinct_quotients(&mut self, h: usize, b: u64) {
        let mf = self.m as f64;
        let bf = b as f64;
        let hf = h as f64;
        let slot = (b % COLLIDING_TABLE as u64) as usize;
        self.distinct_stay[h][slot] = (bf - hf) / (mf - hf);
        self.distinct_advance[h][slot] = (mf - bf) / (mf - hf);
    }

    /// [`ChainJumps::at`] for non-colliding positions and a state no
    /// message carries past sigma (`k` at most 16, `dist` `k + 1` long).
    ///
    /// Why: [`transitions_into`] divides twice at every step of the walk,
    /// `k (k + 1)` divisions a state, and a chain with `--non-colliding`
    /// took twice as long as a colliding one. Step `(h, off)` depends only
    /// on `h` and the bit count `i + off`, and state `i + 1` reads the same
    /// bit counts as state `i` but one more a position, so each row of the
    /// ring gains one pair a state: `2k` divisions.
    #[inline(never)]
    fn at_distinct(&mut self, i: u64, dist: &mut [f64]) -> f64 {
        let kk = self.k as usize;
        match self.next {
            // Row h holds i - 1 .. i - 1 + h already: one new bit count.
            Some(n) if n == i => {
                for h in 0..kk {
                    self.distinct_quotients(h, i + h as u64);
                }
            }
            _ => {
                for h in 0..kk {
                    for b in i..=i + h as u64 {
                        self.distinct_quotients(h, b);
                    }
                }
            }
        }
        self.next = Some(i + 1);
        let base = (i % COLLIDING_TABLE as u64) as usize;
        macro_rules! walk {
            ($($n:literal)*) => {
                match kk {
                    $($n => walk_free::<$n>(base, dist, |h, slot| {
                        (self.distinct_stay[h][slot], self.distinct_advance[h][slot])
                    }),)*
                    _ => unreachable!("k is 1 to 16 here"),
                }
            };
        }
        walk!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
        0.0
    }

    /// Stores bit count `b`'s two quotients in the ring.
    #[inline(always)]
    fn quotients(&mut self, b: u64) {
        let mf = self.m as f64;
        let bf = b as f64;
        let slot = (b % COLLIDING_TABLE as u64) as usize;
        self.stay[slot] = bf / mf;
        self.advance[slot] = (mf - bf) / mf;
    }

    /// State `i`'s jump distribution into `dist` (`k + 1` entries); returns
    /// its recycle probability, as [`transitions_into`] does.
    #[inline]
    fn at(&mut self, i: u64, dist: &mut [f64]) -> f64 {
        let kk = self.k as usize;
        let free = i
            .checked_add(u64::from(self.k))
            .is_some_and(|e| e <= self.sigma);
        if self.hashing != Hashing::Colliding
            || kk > COLLIDING_TABLE
            || dist.len() != kk + 1
            || !free
        {
            // Checked in here, not beside the colliding test above: that
            // kept the colliding route's code as it was (with the test
            // beside it, the sizing chain at k = 4 ran 1.30 times slower).
            if self.hashing == Hashing::NonColliding
                && kk <= COLLIDING_TABLE
                && dist.len() == kk + 1
                && free
            {
                return self.at_distinct(i, dist);
            }
            self.next = None;
            return transitions_into(self.m, self.k, self.sigma, self.hashing, i, dist);
        }
        match self.next {
            // The ring holds i .. i + k - 2 already: one new bit count.
            Some(n) if n == i => self.quotients(i + kk as u64 - 1),
            _ => {
                for b in i..i + kk as u64 {
                    self.quotients(b);
                }
            }
        }
        self.next = Some(i + 1);
        let base = (i % COLLIDING_TABLE as u64) as usize;
        macro_rules! walk {
            ($($n:literal)*) => {
                match kk {
                    $($n => walk_free::<$n>(base, dist, |_, slot| (self.stay[slot], self.advance[slot])),)*
                    _ => unreachable!("k is 1 to 16 here"),
                }
            };
        }
        walk!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
        0.0
    }

    /// The jump distributions of the [`LANES`] states `i .. i + LANES`
    /// into `dists` (row `l` for state `i + l`, `k + 1` entries used), when
    /// every one of them takes the fast route of [`ChainJumps::at`] (no
    /// message carries past sigma, so each recycle probability is 0);
    /// `false`, with nothing written, otherwise.
    ///
    /// Why: each state's walk is a chain of dependent multiply-adds
    /// (`k (k + 1) / 2` steps, each waiting for the one before), so a lone
    /// state keeps the core mostly idle. The walks of different states are
    /// independent, and walking [`LANES`] of them in lockstep fills those
    /// idle cycles. Each lane performs the same operations on the same
    /// operands in the same order as [`walk_free`] does for its state, so
    /// the bits are the same; see [`walk_free_lanes`] for the one step it
    /// does not skip.
    #[inline]
    fn at_lanes(&mut self, i: u64, dists: &mut [[f64; LANES_MAX_K + 1]; LANES]) -> bool {
        let kk = self.k as usize;
        let free = i
            .checked_add(u64::from(self.k) + LANES as u64 - 1)
            .is_some_and(|e| e <= self.sigma);
        if self.hashing != Hashing::Colliding || kk > LANES_MAX_K || !free {
            return false;
        }
        // The ring of `at` is left behind: the next `at` refills it.
        self.next = None;
        let mf = self.m as f64;
        macro_rules! walk {
            ($($n:literal)*) => {
                match kk {
                    $($n => walk_free_lanes::<$n, { $n + 1 }, { $n + LANES }>(i, mf, dists),)*
                    _ => unreachable!("k is 1 to 32 here"),
                }
            };
        }
        walk!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32);
        true
    }
}

/// States [`ChainJumps::at_lanes`] walks at once.
const LANES: usize = 4;

/// [`walk_free`] for the [`LANES`] consecutive states from `i`: it
/// divides the bit counts `i .. i + K + LANES - 1` as
/// [`ChainJumps::quotients`] does, and lane `l` reads offset `l + off`
/// where [`walk_free`] reads ring slot `off` of its state.
///
/// `ROWS` is `K + 1` and `COUNTS` is `K + LANES`, given by the caller
/// because an array length cannot be computed from `K` here: with arrays
/// sized for the largest `k` (32), every `k` would clear 33 rows and 36
/// quotients per call, however few it uses.
///
/// The one difference: [`walk_free`] skips a step whose probability `p` is
/// 0.0, and a lane cannot skip alone, so here that step runs. It changes no
/// bit: every quantity is non-negative (bit counts never exceed `m`), so
/// `0.0 * stay` is `+0.0`, which is what the skipped entry already held
/// (entries start at `+0.0` or `1.0`, and a product of non-negative values
/// is never `-0.0`), and adding `+0.0 * advance = +0.0` to a non-negative
/// entry leaves it as it was.
#[inline(always)]
fn walk_free_lanes<const K: usize, const ROWS: usize, const COUNTS: usize>(
    i: u64,
    mf: f64,
    dists: &mut [[f64; LANES_MAX_K + 1]; LANES],
) {
    let mut stay = [0.0; COUNTS];
    let mut advance = [0.0; COUNTS];
    for j in 0..K + LANES - 1 {
        let bf = (i + j as u64) as f64;
        stay[j] = bf / mf;
        advance[j] = (mf - bf) / mf;
    }
    // d[off][lane], so that one step of all lanes is one vector.
    let mut d = [[0.0f64; LANES]; ROWS];
    d[0] = [1.0; LANES];
    for h in 0..K {
        d[h + 1] = [0.0; LANES];
        let mut off = h + 1;
        while off > 0 {
            off -= 1;
            for l in 0..LANES {
                let p = d[off][l];
                d[off][l] = p * stay[l + off];
                d[off + 1][l] += p * advance[l + off];
            }
        }
    }
    for (l, dist) in dists.iter_mut().enumerate() {
        for (off, x) in dist.iter_mut().take(K + 1).enumerate() {
            *x = d[off][l];
        }
    }
}

/// [`walk_positions`] for a state no message carries past sigma, with `K`
/// known at compile time: the same steps, unrolled, on a local array the
/// compiler keeps in registers. `step(h, slot)` gives position `h`'s
/// `(stay, advance)` at ring slot `slot`, where offset 0 is at `base`:
/// the ring of [`ChainJumps`] for colliding positions, row `h` of the
/// rings of [`ChainJumps::at_distinct`] for non-colliding ones.
#[inline(always)]
fn walk_free<const K: usize>(
    base: usize,
    dist: &mut [f64],
    step: impl Fn(usize, usize) -> (f64, f64),
) {
    let mut d = [0.0f64; COLLIDING_TABLE + 1];
    d[0] = 1.0;
    for h in 0..K {
        d[h + 1] = 0.0;
        let mut off = h + 1;
        while off > 0 {
            off -= 1;
            let p = d[off];
            if p == 0.0 {
                continue;
            }
            let (stay, advance) = step(h, (base + off) % COLLIDING_TABLE);
            d[off] = p * stay;
            d[off + 1] += p * advance;
        }
    }
    dist[..=K].copy_from_slice(&d[..=K]);
}

/// The position-by-position walk of [`transitions_into`], given each
/// step's `(stay, advance)` probabilities for position `h` at offset `off`.
#[inline(always)]
fn walk_positions(
    kk: usize,
    i: u64,
    sigma: u64,
    dist: &mut [f64],
    step: impl Fn(usize, usize) -> (f64, f64),
) -> f64 {
    // Entry `h + 1` is first written by step `h`, so it is cleared there;
    // entries past `kk` (a longer buffer) are never written.
    if let Some(rest) = dist.get_mut(kk + 1..) {
        rest.fill(0.0);
    }
    dist[0] = 1.0;
    let mut recycle = 0.0;
    for h in 0..kk {
        dist[h + 1] = 0.0;
        // Offsets only grow by one per position: walk them downwards so each
        // entry is read before the step writes into it.
        let mut off = h + 1;
        while off > 0 {
            off -= 1;
            let p = dist[off];
            if p == 0.0 {
                continue;
            }
            let (stay, advance) = step(h, off);
            dist[off] = p * stay;
            if i + off as u64 + 1 > sigma {
                recycle += p * advance;
            } else {
                dist[off + 1] += p * advance;
            }
        }
    }
    recycle
}

/// The expected arrivals per cycle into the states from the current one on,
/// for 004 eq. (15)'s forward pass, which both the chain for one sigma and
/// the one-pass sizing run.
///
/// A message moves at most `k` states on, so the arrivals still to come fit
/// in a ring of `k + 1` slots (state `j` at slot `j mod (k + 1)`). A slot is
/// emptied when its state is visited, before the first arrival of the state
/// `k + 1` further on is added, so each state's arrivals are summed in the
/// same order as in a vector over all states, without the allocation.
struct Arrivals {
    slots: Vec<f64>,
    /// The current state's slot, advanced by comparison rather than by a
    /// division per state (the pass visits up to millions of states).
    at: usize,
}

impl Arrivals {
    /// A cycle's start: `start[off]` arrivals in state `off` (a single
    /// arrival in state 0 for a non-retaining filter, the retained
    /// message's jump from an empty filter otherwise). At most `k + 1`
    /// entries.
    fn new(k: u32, start: &[f64]) -> Arrivals {
        let mut slots = vec![0.0; k as usize + 1];
        for (slot, p) in slots.iter_mut().zip(start) {
            *slot += p;
        }
        Arrivals { slots, at: 0 }
    }

    /// Visits the current state, whose jump distribution is `jump` (`k + 1`
    /// entries): returns its expected arrivals per cycle, `V_i` of eq.
    /// (15), spreads them over the states it jumps to (those fewer than
    /// `ahead` states on, the chain's end), and moves to the next state.
    #[inline]
    fn visit(&mut self, jump: &[f64], ahead: usize) -> f64 {
        let ring = self.slots.len();
        let arrived = std::mem::take(&mut self.slots[self.at]);
        let leave = 1.0 - jump[0];
        let v = if leave > 0.0 { arrived / leave } else { 0.0 };
        for (off, p) in jump.iter().enumerate().skip(1).take(ring - 1) {
            if off < ahead {
                let mut j = self.at + off;
                if j >= ring {
                    j -= ring;
                }
                self.slots[j] += v * p;
            }
        }
        self.at += 1;
        if self.at == ring {
            self.at = 0;
        }
        v
    }
}

/// `rho(i)`: the probability that a new message finds all its positions set
/// when `i` of `m` bits are set (004 eq. (17), non-colliding corrected).
pub fn rho(m: u64, k: u32, hashing: Hashing, i: u64) -> f64 {
    match hashing {
        Hashing::Colliding => (i as f64 / m as f64).powi(k as i32),
        Hashing::NonColliding => (0..u64::from(k))
            .map(|h| {
                if i > h {
                    (i - h) as f64 / (m - h) as f64
                } else {
                    0.0
                }
            })
            .product(),
    }
}

/// Why a sigma-bounded filter of `m` bits a phase, `k` positions and
/// threshold `sigma` has no model, if it has none (for 004's chain and the
/// blocked layout's mixture alike).
pub(super) fn check_shape(
    m: u64,
    k: u32,
    sigma: u64,
    retaining: bool,
) -> Result<(), RecyclingModelError> {
    if k == 0 {
        return Err(RecyclingModelError::ZeroK);
    }
    if m < u64::from(k) {
        return Err(RecyclingModelError::TooFewBits { m, k });
    }
    if sigma >= m {
        return Err(RecyclingModelError::SigmaTooLarge { sigma, m });
    }
    if retaining && sigma < u64::from(k) {
        return Err(RecyclingModelError::RetainingSigmaBelowK { sigma, k });
    }
    Ok(())
}

/// Solves 004's chain for `m` bits, `k` hashes and threshold `sigma`, state
/// by state in increasing order, and calls `each(i, visits, recycle)` for
/// every state `i`: its expected arrivals per cycle (eq. (15)) and the
/// probability that a new message arriving there triggers a recycle.
///
/// [`RecyclingModel::new`] keeps every state's pair;
/// [`average_fpr`] folds them as they come.
fn solve(
    m: u64,
    k: u32,
    sigma: u64,
    hashing: Hashing,
    retaining: bool,
    mut each: impl FnMut(usize, f64, f64),
) -> Result<(), RecyclingModelError> {
    check_shape(m, k, sigma, retaining)?;
    let states = sigma as usize + 1;
    let mut arrivals = if retaining {
        // A cycle starts with the retained message in an empty filter.
        let (from_empty, _) = transitions(m, k, sigma, hashing, 0);
        Arrivals::new(k, &from_empty[..from_empty.len().min(states)])
    } else {
        Arrivals::new(k, &[1.0])
    };
    let mut dist = vec![0.0; k as usize + 1];
    let mut jumps = ChainJumps::new(m, k, sigma, hashing);
    let mut lanes = [[0.0; LANES_MAX_K + 1]; LANES];
    let mut i = 0;
    while i < states {
        if jumps.at_lanes(i as u64, &mut lanes) {
            for (l, jump) in lanes.iter().enumerate() {
                // A state of the fast route never recycles.
                each(
                    i + l,
                    arrivals.visit(&jump[..=k as usize], states - i - l),
                    0.0,
                );
            }
            i += LANES;
        } else {
            let recycle = jumps.at(i as u64, &mut dist);
            each(i, arrivals.visit(&dist, states - i), recycle);
            i += 1;
        }
    }
    Ok(())
}

/// The long-term average false-positive rate of a one- or two-phase
/// filter (004 eq. (18) or (26)): bit for bit
/// `RecyclingModel::new(..)?.one_phase_fpr()` or `.two_phase_fpr()`,
/// without keeping the chain's states.
///
/// Why this exists: the pipeline wants only this one figure, and for the
/// default filter at `sigma:0.5` the chain has 2^19 states. Keeping two
/// vectors of them cost 8 MiB of freshly faulted pages and a second pass
/// with a `powi` per state, on the model thread beside the packets. Here
/// each state's share of eq. (18) is added as the state is solved, in the
/// same order as the stored model sums it, so the sums are the same; it
/// overlaps the chain's division, which every state waits on. For two
/// phases only the states that can recycle (the last `k`; every other
/// state's recycle probability is exactly 0.0, so its frozen share is
/// exactly +0.0) are kept for eqs. (24)-(26).
///
/// ```
/// use flowsieve::model::recycling::{average_fpr, Hashing, RecyclingModel};
/// let solved = RecyclingModel::new(1 << 12, 4, 1 << 11, Hashing::Colliding, false).unwrap();
/// let one = average_fpr(1 << 12, 4, 1 << 11, Hashing::Colliding, false, false).unwrap();
/// let two = average_fpr(1 << 12, 4, 1 << 11, Hashing::Colliding, false, true).unwrap();
/// assert_eq!(one.to_bits(), solved.one_phase_fpr().to_bits());
/// assert_eq!(two.to_bits(), solved.two_phase_fpr().to_bits());
/// ```
pub fn average_fpr(
    m: u64,
    k: u32,
    sigma: u64,
    hashing: Hashing,
    retaining: bool,
    two_phase: bool,
) -> Result<f64, RecyclingModelError> {
    // `Iterator::sum` for floats folds from -0.0; the same start here keeps
    // even an all-zero sum's sign the same.
    let (mut total, mut weighted) = (-0.0f64, -0.0f64);
    // (state, visits * recycle) for the states that can recycle.
    let mut raw: Vec<(u64, f64)> = Vec::new();
    solve(m, k, sigma, hashing, retaining, |i, v, r| {
        total += v;
        weighted += v * rho(m, k, hashing, i as u64);
        if two_phase && r != 0.0 {
            raw.push((i as u64, v * r));
        }
    })?;
    let one = weighted / total;
    if !two_phase {
        return Ok(one);
    }
    // frozen_distribution and two_phase_fpr, over the non-zero terms only:
    // a zero term adds +0.0 to a sum of non-negative terms, which changes
    // nothing unless every term is zero, and then both sums are zero and
    // the frozen rate is 0.0 either way.
    let raw_total = raw.iter().fold(-0.0f64, |a, &(_, x)| a + x);
    let frozen = raw.iter().fold(-0.0f64, |a, &(i, x)| {
        let f = if raw_total > 0.0 { x / raw_total } else { 0.0 };
        a + f * rho(m, k, hashing, i)
    });
    Ok(either_phase(one, frozen))
}

impl RecyclingModel {
    /// Solves the chain for `m` bits (one half, for a two-phase filter),
    /// `k` hashes and threshold `sigma`.
    pub fn new(
        m: u64,
        k: u32,
        sigma: u64,
        hashing: Hashing,
        retaining: bool,
    ) -> Result<RecyclingModel, RecyclingModelError> {
        let states = (sigma as usize).saturating_add(1);
        let (mut visits, mut recycle) = (Vec::new(), Vec::new());
        solve(m, k, sigma, hashing, retaining, |_, v, r| {
            if visits.is_empty() {
                // Only once the arguments are known to be valid.
                visits.reserve_exact(states);
                recycle.reserve_exact(states);
            }
            visits.push(v);
            recycle.push(r);
        })?;
        Ok(RecyclingModel {
            m,
            k,
            sigma,
            hashing,
            retaining,
            visits,
            recycle,
        })
    }

    /// The stationary distribution of the number of set bits, as seen by
    /// arriving new messages (004 eq. (15)).
    pub fn stationary(&self) -> Vec<f64> {
        let total: f64 = self.visits.iter().sum();
        self.visits.iter().map(|v| v / total).collect()
    }

    /// One-phase long-term average false-positive rate, count-instance
    /// (004 eq. (18)).
    pub fn one_phase_fpr(&self) -> f64 {
        let total: f64 = self.visits.iter().sum();
        self.visits
            .iter()
            .enumerate()
            .map(|(i, v)| v * rho(self.m, self.k, self.hashing, i as u64))
            .sum::<f64>()
            / total
    }

    /// The distribution of the frozen half's set bits at a swap (004 eqs.
    /// (24), (25)).
    pub fn frozen_distribution(&self) -> Vec<f64> {
        let raw: Vec<f64> = self
            .visits
            .iter()
            .zip(&self.recycle)
            .map(|(v, r)| v * r)
            .collect();
        let total: f64 = raw.iter().sum();
        raw.iter()
            .map(|x| if total > 0.0 { x / total } else { 0.0 })
            .collect()
    }

    /// Two-phase long-term average false-positive rate (004 eq. (26)): a
    /// message is a false positive when either half has all its positions.
    pub fn two_phase_fpr(&self) -> f64 {
        let frozen: f64 = self
            .frozen_distribution()
            .iter()
            .enumerate()
            .map(|(i, f)| f * rho(self.m, self.k, self.hashing, i as u64))
            .sum();
        either_phase(self.one_phase_fpr(), frozen)
    }

    /// Expected new messages per cycle, the triggering one included (004
    /// eqs. (20)-(23), counted as a simulation of the filter counts them).
    pub fn expected_messages(&self) -> f64 {
        self.visits.iter().sum()
    }

    /// The configuration.
    pub fn params(&self) -> (u64, u32, u64, Hashing, bool) {
        (self.m, self.k, self.sigma, self.hashing, self.retaining)
    }
}

/// `f_w` (004 eq. (1)): the worst-case rate of the message after `n` in a
/// filter of `m` bits with colliding hashes, `[1 - (1 - 1/m)^{kn}]^k`.
pub fn f_worst(m: u64, k: u32, n: u64) -> f64 {
    let zero = (f64::from(k) * n as f64 * (-1.0 / m as f64).ln_1p()).exp();
    (1.0 - zero).powi(k as i32)
}

/// `f_i = P(F_i = 1)`, the `i`-th new message (1-based) arriving after
/// `i - 1` insertions, by eq. (1).
fn f_i(m: u64, k: u32, i: u64) -> f64 {
    f_worst(m, k, i - 1)
}

/// `f_o` (004 eq. (2)): the oracle N-bounded average, `sum_{i<=N} f_i / N`.
///
/// Beyond [`EXACT_SUM_MAX_TERMS`] terms the sum is the integral of the
/// same smooth term (Simpson's rule with the trapezoid end correction),
/// so the cost stays bounded for any `n`.
pub fn f_oracle(m: u64, k: u32, n: u64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    if n > EXACT_SUM_MAX_TERMS {
        return sum_terms(n, |i| f_i_real(m, k, i)) / n as f64;
    }
    (1..=n).map(|i| f_i(m, k, i)).sum::<f64>() / n as f64
}

/// `f_i` for a real index (the continuum of eq. (1)).
fn f_i_real(m: u64, k: u32, i: f64) -> f64 {
    let zero = (f64::from(k) * (i - 1.0).max(0.0) * (-1.0 / m as f64).ln_1p()).exp();
    (1.0 - zero).powi(k as i32)
}

/// `sum_{i=1..n} g(i)` for a smooth `g`, by Euler-Maclaurin: the integral
/// from 1 to n (composite Simpson, 2^16 panels) plus `(g(1) + g(n)) / 2`.
fn sum_terms(n: u64, g: impl Fn(f64) -> f64) -> f64 {
    let (a, b) = (1.0, n as f64);
    let panels = 1u32 << 16;
    let h = (b - a) / f64::from(panels);
    let mut acc = g(a) + g(b);
    for p in 1..panels {
        let x = a + f64::from(p) * h;
        acc += if p % 2 == 1 { 4.0 } else { 2.0 } * g(x);
    }
    acc * h / 3.0 + 0.5 * (g(a) + g(b))
}

/// `f_a` (004 eq. (3)): the average-case N-bounded lower bound,
/// `sum f_i/(1-f_i) / sum (1 + f_i/(1-f_i))`.
///
/// Beyond [`EXACT_SUM_MAX_TERMS`] terms both sums are integrals of the same
/// smooth terms (see [`f_oracle`]).
pub fn f_average(m: u64, k: u32, n: u64) -> f64 {
    // The denominator is `n + num`. Once a term's `f_i` rounds to 1 (past
    // about `m ln(2^53) / k` insertions) its ratio is infinite, and
    // `num / (n + num)` was inf / inf, NaN; as `1 / (1 + n / num)` an
    // infinite sum gives 1, the limit the true (finite, huge) sum tends to.
    let rate = |num: f64| {
        if num > 0.0 {
            1.0 / (1.0 + n as f64 / num)
        } else {
            0.0
        }
    };
    if n > EXACT_SUM_MAX_TERMS {
        let r = |i: f64| {
            let f = f_i_real(m, k, i);
            f / (1.0 - f)
        };
        return rate(sum_terms(n, r));
    }
    let mut num = 0.0;
    for i in 1..=n {
        let f = f_i(m, k, i);
        num += f / (1.0 - f);
    }
    rate(num)
}

/// The largest `x` in `lo..=hi` with `ok(x)`, for `ok` true up to a point
/// and false after (all rates here rise with the threshold).
fn largest(lo: u64, hi: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if lo > hi || !ok(lo) {
        return None;
    }
    let (mut good, mut bad) = (lo, hi);
    if ok(hi) {
        return Some(hi);
    }
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if ok(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(good)
}

/// Largest phase (bits) whose sizing solves the exact chain. One pass over
/// the states costs `O(sigma k^2)`: about 6 ms at `2^18` bits and `k = 4`.
/// Larger phases use the continuum limit ([`SizingMethod::Continuum`]),
/// whose relative error is of order `k / m` (about `1e-5` there; see the
/// test that compares both across the boundary).
pub const EXACT_SIZING_MAX_BITS: u64 = 1 << 18;

/// The largest phase whose sizing solves the exact chain for `k`
/// positions: [`EXACT_SIZING_MAX_BITS`] up to `k = 4`, and less for larger
/// `k`, so that the chain's `O(sigma k^2)` work never exceeds what `2^18`
/// bits cost at `k = 4` (a few ms; start-up stays under 20 ms for any
/// flags). At `k = 32` that is 4096 bits, where the continuum's relative
/// error, of order `k / m`, is below 1 %.
pub fn exact_sizing_max_bits(k: u32) -> u64 {
    let k2 = u64::from(k.max(1)).pow(2);
    EXACT_SIZING_MAX_BITS.min(EXACT_SIZING_MAX_BITS * 16 / k2)
}

/// Largest `n` for which the N-bounded averages sum their terms one by one;
/// beyond it they integrate the continuum limit (see [`f_average`]).
pub const EXACT_SUM_MAX_TERMS: u64 = 1 << 22;

/// How a sizing answer was computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SizingMethod {
    /// The exact chain (004 eqs. (15), (18), (26)), solved once for every
    /// sigma up to the answer.
    Chain,
    /// The chain's limit for large `m`: with `x = i/m` the expected arrivals
    /// per state tend to `1 / (k (1 - x))` and `rho` to `x^k`, so eq. (18)
    /// becomes `f1(s) = 1 + sum_{j=1..k} s^j / (j ln(1 - s))`, the frozen
    /// half of eq. (26) holds `s m` bits, and `E[N] = -(m/k) ln(1 - s)`.
    Continuum,
    /// The cache-line-blocked layout's Poisson mixture over a block's load
    /// ([`super::blocked_recycling`], (R3) and (R4)), bisected.
    BlockedMixture,
}

/// A sigma sized for a target average rate (004 §V).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct SigmaSizing {
    /// The largest sigma whose average rate is at most the target.
    pub sigma: u64,
    /// The long-term average rate at that sigma (eq. (18) or (26)).
    pub avg_fpr: f64,
    /// Expected new messages per cycle at that sigma (eq. (23)).
    pub expected_messages: f64,
    /// How it was computed.
    pub method: SizingMethod,
}

/// Sizing (004 §V): the largest `sigma` whose long-term average rate
/// (one- or two-phase, eq. (18) or (26)) is at most `target`, for a phase
/// of `m` bits; `None` when no sigma reaches the target.
///
/// The chain's arrivals in state `i` do not depend on sigma for `i <=
/// sigma` (a larger sigma only moves the recycle further out), so one
/// forward pass gives eq. (18) for every sigma as a running ratio of sums,
/// and the per-sigma frozen-half term of eq. (26) from the last `k` states.
/// The one-phase rate only rises with sigma (each new state has a larger
/// `rho` than the average so far), so the pass stops at the first sigma
/// whose one-phase rate exceeds the target: the whole solve costs what one
/// chain at the answer costs, instead of one chain per bisection step.
/// Phases above [`exact_sizing_max_bits`] use the continuum limit, so the
/// solve takes microseconds at any size.
///
/// ```
/// use flowsieve::model::recycling::{sigma_for_target, Hashing, RecyclingModel};
/// let s = sigma_for_target(10_000, 4, Hashing::Colliding, false, false, 0.01).unwrap();
/// let at = RecyclingModel::new(10_000, 4, s.sigma, Hashing::Colliding, false).unwrap();
/// let above = RecyclingModel::new(10_000, 4, s.sigma + 1, Hashing::Colliding, false).unwrap();
/// assert!(at.one_phase_fpr() <= 0.01 && above.one_phase_fpr() > 0.01);
/// assert!((at.one_phase_fpr() - s.avg_fpr).abs() < 1e-12);
/// ```
pub fn sigma_for_target(
    m: u64,
    k: u32,
    hashing: Hashing,
    retaining: bool,
    two_phase: bool,
    target: f64,
) -> Option<SigmaSizing> {
    let lo = if retaining { u64::from(k) } else { 0 };
    if k == 0 || m == 0 || lo >= m || target.is_nan() || target < 0.0 {
        return None;
    }
    if m > exact_sizing_max_bits(k) {
        return sigma_continuum(m, k, two_phase, target).filter(|s| s.sigma >= lo);
    }
    sigma_chain((m, k, hashing, retaining), two_phase, target, lo)
}

/// The exact one-pass solve of [`sigma_for_target`] for a phase of `m`
/// bits, `k` positions, `hashing` and retention.
fn sigma_chain(
    (m, k, hashing, retaining): (u64, u32, Hashing, bool),
    two_phase: bool,
    target: f64,
    lo: u64,
) -> Option<SigmaSizing> {
    let kk = k as usize;
    // Transitions from state i with no recycle (sigma beyond reach): the
    // full jump distribution, jump[off] for off in 0..=k.
    let mut jumps = ChainJumps::new(m, k, u64::MAX, hashing);
    let mut full = |i: u64, buf: &mut [f64]| {
        jumps.at(i, buf);
    };
    let mut buf = vec![0.0; kk + 1];
    let mut arrivals = if retaining {
        full(0, &mut buf);
        Arrivals::new(k, &buf)
    } else {
        Arrivals::new(k, &[1.0])
    };
    // The last k states' arrivals, rho and jump distributions (for the
    // frozen half of eq. (26)), in a ring indexed by state mod k.
    let mut recent_v = vec![0.0f64; kk];
    let mut recent_rho = vec![0.0f64; kk];
    let mut recent_jump = vec![0.0f64; kk * (kk + 1)];
    let (mut sum_v, mut sum_v_rho) = (0.0f64, 0.0f64);
    let mut best: Option<SigmaSizing> = None;
    let mut at = 0usize;
    for i in 0..m {
        full(i, &mut buf);
        let v = arrivals.visit(&buf, usize::MAX);
        let r = rho(m, k, hashing, i);
        sum_v += v;
        sum_v_rho += v * r;
        if two_phase {
            recent_v[at] = v;
            recent_rho[at] = r;
            recent_jump[at * (kk + 1)..(at + 1) * (kk + 1)].copy_from_slice(&buf);
        }
        let f1 = if sum_v > 0.0 { sum_v_rho / sum_v } else { 0.0 };
        let here = at;
        at += 1;
        if at == kk {
            at = 0;
        }
        if f1 > target {
            break;
        }
        if i < lo {
            continue;
        }
        let rate = if two_phase {
            // F_j proportional to V_j Pr(a message from j passes sigma = i),
            // for the states j in (i - k, i].
            let (mut w, mut wr) = (0.0, 0.0);
            for j in i.saturating_sub(kk as u64 - 1)..=i {
                // State j sits `i - j` slots before state i's.
                let back = (i - j) as usize;
                let at = (here + kk - back) % kk;
                let need = back + 1;
                let jump = &recent_jump[at * (kk + 1)..(at + 1) * (kk + 1)];
                let pass: f64 = jump.iter().skip(need).sum();
                w += recent_v[at] * pass;
                wr += recent_v[at] * pass * recent_rho[at];
            }
            let frozen = if w > 0.0 { wr / w } else { 0.0 };
            either_phase(f1, frozen)
        } else {
            f1
        };
        if rate <= target {
            best = Some(SigmaSizing {
                sigma: i,
                avg_fpr: rate,
                expected_messages: sum_v,
                method: SizingMethod::Chain,
            });
        }
    }
    best
}

/// The two-phase rate of 004 eq. (26), `1 - (1 - F1)(1 - F2)`: a message
/// is a false positive when either half has all its positions. Computed as
/// `F1 + F2 (1 - F1)`, which is the same number without the cancellation:
/// in the `1 - ...` form every pair of rates below about 1e-17 came out
/// as 0, and a sizing for a target of 1e-20 accepted any sigma whose
/// rates were that small.
///
/// ```
/// use flowsieve::model::recycling::either_phase;
/// assert_eq!(either_phase(0.5, 0.5), 0.75);
/// assert_eq!(either_phase(1e-18, 1e-18), 2e-18);
/// assert_eq!(1.0 - (1.0 - 1e-18) * (1.0 - 1e-18), 0.0);
/// ```
pub fn either_phase(one: f64, frozen: f64) -> f64 {
    one + frozen * (1.0 - one)
}

/// The continuum-limit one-phase rate at fill `s = sigma / m` (see
/// [`SizingMethod::Continuum`]): `f1(s) = (L - sum_{j<=k} s^j / j) / L`
/// with `L = -ln(1 - s) = sum_{j>=1} s^j / j`.
///
/// The numerator is the series' tail `sum_{j>k} s^j / j`. Up to a fill of
/// one half it is summed as that tail (its terms fall at least twofold,
/// so about 60 of them): the difference `L - partial` cancels to rounding
/// noise once the tail is below about `1e-16 L`, and at a fill of 1e-4
/// with `k = 4` it was noise near 1e-17 against a true 2e-21, so a sizing
/// for a target below 1e-16 stopped at whatever sigma the noise allowed.
/// Above one half the tail is a large enough share of `L` (over 1.6% at
/// `k = 4`, and more for smaller k) that the difference keeps 13 or more
/// digits, while the tail's series would need thousands of terms near a
/// fill of 1.
fn continuum_f1(k: u32, s: f64) -> f64 {
    if s <= 0.0 {
        return 0.0;
    }
    let l = -(-s).ln_1p();
    if s <= 0.5 {
        // s^(k+1) / (k+1) and on, each the last times s j / (j + 1).
        let first = s.powi(k as i32 + 1) / f64::from(k + 1);
        let mut term = first;
        let mut tail = first;
        let mut j = f64::from(k + 1);
        while term > tail * 1e-17 {
            term *= s * j / (j + 1.0);
            tail += term;
            j += 1.0;
        }
        return (tail / l).clamp(0.0, 1.0);
    }
    let mut partial = 0.0;
    let mut p = 1.0;
    for j in 1..=k {
        p *= s;
        partial += p / f64::from(j);
    }
    ((l - partial) / l).max(0.0)
}

/// [`sigma_for_target`] in the continuum limit.
fn sigma_continuum(m: u64, k: u32, two_phase: bool, target: f64) -> Option<SigmaSizing> {
    let rate = |s: f64| {
        let f1 = continuum_f1(k, s);
        if two_phase {
            either_phase(f1, s.powi(k as i32))
        } else {
            f1
        }
    };
    let (mut good, mut bad) = (0.0f64, 1.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (good + bad);
        if rate(mid) <= target {
            good = mid;
        } else {
            bad = mid;
        }
    }
    let sigma = ((good * m as f64).floor() as u64).min(m - 1);
    let s = sigma as f64 / m as f64;
    Some(SigmaSizing {
        sigma,
        avg_fpr: rate(s),
        expected_messages: -(m as f64 / f64::from(k)) * (-s).ln_1p(),
        method: SizingMethod::Continuum,
    })
}

/// The most `sigma k^2` (the chain's work) an explicit sigma is solved for
/// exactly, by `flowsieve model recycle` and by the pipeline's model column
/// alike: 2^26. Solving it takes about 20 ms at `k = 32`, 100 ms at
/// `k = 4` (more states, each cheaper) and twice that with non-colliding
/// positions, on the 2-core machine of BENCHMARKS.md. Past it
/// the answer is the chain's continuum limit ([`continuum_rates`]), and
/// says so (see [`explicit_sigma_method`]).
pub const EXACT_CHAIN_MAX_WORK: u64 = 1 << 26;

/// How the rate of an explicit `sigma` in a phase of `m` bits with `k`
/// positions is computed: the exact chain while its work, `sigma k^2`, is
/// at most [`EXACT_CHAIN_MAX_WORK`]; past it the continuum limit, whose
/// relative error is of order `k / m`, while that is at most 1 %; `None`
/// past both, where neither is an answer.
///
/// Why a bound on the work: the chain costs `O(sigma k^2)`, and the
/// pipeline waits for its figure before the report. Solved for any sigma,
/// `--rbf-bits 134217728 --rbf-k 32 --recycle sigma:0.9` made a run over
/// one packet take 20 s, for a figure the continuum gives within about
/// `k / m`, 2e-6 there.
///
/// With `k` at most 32 (the pipeline's bound) the answer is never `None`:
/// work past 2^26 needs `sigma` above 2^16, so `m` is above 100 k.
///
/// ```
/// use flowsieve::model::recycling::{explicit_sigma_method, SizingMethod};
/// assert_eq!(explicit_sigma_method(1 << 20, 4, 1 << 19), Some(SizingMethod::Chain));
/// assert_eq!(explicit_sigma_method(1 << 20, 16, 943_718), Some(SizingMethod::Continuum));
/// assert_eq!(explicit_sigma_method(10_000, 200, 9_000), None);
/// ```
pub fn explicit_sigma_method(m: u64, k: u32, sigma: u64) -> Option<SizingMethod> {
    let work = u128::from(sigma) * u128::from(k) * u128::from(k);
    if work <= u128::from(EXACT_CHAIN_MAX_WORK) {
        Some(SizingMethod::Chain)
    } else if u128::from(k) * 100 <= u128::from(m) {
        Some(SizingMethod::Continuum)
    } else {
        None
    }
}

/// The continuum limit of 004's chain for an explicit `sigma` in a phase of
/// `m` bits (see [`SizingMethod::Continuum`]): the long-term average rate
/// (eq. (18), or eq. (26) with `two_phase`) and the expected new messages
/// per cycle (eq. (23)), in `O(k)` work. Its relative error is of order
/// `k / m`; it does not distinguish colliding from non-colliding positions
/// or retention, whose effects vanish in the same limit.
pub fn continuum_rates(m: u64, k: u32, sigma: u64, two_phase: bool) -> (f64, f64) {
    let s = (sigma as f64 / m.max(1) as f64).clamp(0.0, 1.0 - f64::EPSILON);
    let f1 = continuum_f1(k, s);
    let rate = if two_phase {
        either_phase(f1, s.powi(k as i32))
    } else {
        f1
    };
    (rate, -(m as f64 / f64::from(k.max(1))) * (-s).ln_1p())
}

/// Sizing for N-bounded filters: the largest `N` whose [`f_worst`] is at
/// most `target` (`n_worst`), and the largest whose [`f_average`] is
/// (`n_avg`), searched up to `limit`.
///
/// `f_worst` is closed-form and bisected. `f_average` only rises with `N`
/// (each new term exceeds the ratio so far), so up to
/// [`EXACT_SUM_MAX_TERMS`] it is summed once, term by term, until it passes
/// the target; beyond that it is bisected on the continuum integral.
pub fn n_for_target(m: u64, k: u32, target: f64, limit: u64) -> (Option<u64>, Option<u64>) {
    if m == 0 || k == 0 || limit == 0 {
        return (None, None);
    }
    let n_worst = largest(1, limit, |n| f_worst(m, k, n) <= target);
    let mut n_avg = None;
    let mut num = 0.0;
    let mut exhausted = true;
    for i in 1..=limit.min(EXACT_SUM_MAX_TERMS) {
        let f = f_i(m, k, i);
        num += f / (1.0 - f);
        // As in f_average: an infinite sum is a rate of 1, not NaN (which
        // no comparison passes, so a target near 1 was never reached).
        let avg = if num > 0.0 {
            1.0 / (1.0 + i as f64 / num)
        } else {
            0.0
        };
        if avg > target {
            exhausted = false;
            break;
        }
        n_avg = Some(i);
    }
    if exhausted && limit > EXACT_SUM_MAX_TERMS {
        n_avg = largest(EXACT_SUM_MAX_TERMS, limit, |n| f_average(m, k, n) <= target).or(n_avg);
    }
    (n_worst, n_avg)
}
