//! The 64-bit flow hash, filter indices and shard selection.
//!
//! # Encoding
//!
//! A [`FlowKey`] is folded into five 64-bit words, fixed for all platforms
//! and versions (addresses as big-endian numbers; IPv4 in the low 32 bits of
//! a 128-bit field, the upper 96 bits zero):
//!
//! | word | contents |
//! |---|---|
//! | w0 | source address, bits 127..64 |
//! | w1 | source address, bits 63..0 |
//! | w2 | destination address, bits 127..64 |
//! | w3 | destination address, bits 63..0 |
//! | w4 | `sport << 48 \| dport << 32 \| proto << 8 \| version` (4 or 6) |
//!
//! # Mix
//!
//! Pairs of words are combined with a 64x64->128-bit multiply folded to 64
//! bits (`lo ^ hi`, the "folded multiply" of wyhash/foldhash), each word first
//! XORed with its own odd constant; the two independent products run in
//! parallel. The result is finalised with the murmur3 `fmix64` avalanche:
//!
//! ```text
//! a = fold(w0 ^ K0, w1 ^ K1)
//! b = fold(w2 ^ K2, w3 ^ K3)
//! h = fmix64(fold(a ^ b ^ K4, w4 ^ K5))
//! ```
//!
//! The constants are public and fixed, so the default hash is reproducible
//! but not keyed: an adversary who knows them can craft colliding keys (for
//! instance IPv6 sources whose upper half equals `K0` zero the first product
//! whatever their lower half, so they all hash alike). A test pins known
//! keys to known hashes so it cannot change by accident.
//!
//! # Keyed hashing
//!
//! A [`HashKey`] (128 bits, `--hash-key HEX|random`) is expanded into six
//! words XORed into `K0..K5` ([`FlowHasher`]). Without the key the
//! constants are unknown, so crafted collisions such as the one above no
//! longer line up (a test shows it). This is the seeding that hash-flooding
//! defences in wyhash/foldhash/aHash use, not a cryptographic MAC: it stops
//! precomputed collisions, not an adversary who can observe the filters.
//! The all-zero key is the fixed hash, so the default reports stay
//! reproducible.
//!
//! # Indices
//!
//! A filter of `k` partitioned subarrays of `m/k` cells each (the layout the
//! papers analyse) takes index `i` from the double hash
//! `g_i = h1 + i * h2` (Kirsch and Mitzenmacher, "Less hashing, same
//! performance", 2006) reduced to `[0, m/k)` by multiply-shift
//! (`(g_i * (m/k)) >> w`), never `%`. While `m/k <= 2^32`, `h1` and `h2` are
//! the low and high 32-bit halves of the flow hash (`w = 32`); larger
//! subarrays take 64-bit `h1 = h` and `h2 = ` [`second_mix`]`(h)` (`w = 64`).
//! Shard selection uses the high bits of [`second_mix`], so which shard a flow
//! lands in is independent of its indices inside the shard.
//!
//! ```
//! use flowsieve::dissect::FlowKey;
//! use flowsieve::hash::{flow_hash, PartitionedIndexer};
//! let h = flow_hash(&FlowKey::v4([192, 0, 2, 1], [198, 51, 100, 7], 40000, 443, 6));
//! let ix = PartitionedIndexer::new(1 << 20, 4);
//! let mut idx = [0usize; 4];
//! ix.indices(h, &mut idx);
//! for (i, &x) in idx.iter().enumerate() {
//!     assert!(x >= i * (1 << 18) && x < (i + 1) * (1 << 18)); // its own subarray
//! }
//! ```

use crate::dissect::FlowKey;

const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x1319_8a2e_0370_7345;
const K2: u64 = 0xa409_3822_299f_31d1;
const K3: u64 = 0x082e_fa98_ec4e_6c89;
const K4: u64 = 0x4528_21e6_38d0_1377;
const K5: u64 = 0xbe54_66cf_34e9_0c6d;
/// Seed of the second, independent mix.
const K6: u64 = 0xc0ac_29b7_c97c_50dd;

/// The five encoding words of a key (see the module documentation).
#[inline]
pub fn encode(key: &FlowKey) -> [u64; 5] {
    let (s, d) = (key.src_bits(), key.dst_bits());
    // The key holds its fifth word as it is encoded here (ports, protocol,
    // version).
    [
        (s >> 64) as u64,
        s as u64,
        (d >> 64) as u64,
        d as u64,
        key.tail_word(),
    ]
}

/// 64x64->128 multiply, folded by XOR of the halves.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// The murmur3 64-bit finaliser (`fmix64`).
#[inline(always)]
pub fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The 64-bit hash of a flow key, unkeyed (the fixed constants).
#[inline]
pub fn flow_hash(key: &FlowKey) -> u64 {
    let w = encode(key);
    let a = fold(w[0] ^ K0, w[1] ^ K1);
    let b = fold(w[2] ^ K2, w[3] ^ K3);
    fmix64(fold(a ^ b ^ K4, w[4] ^ K5))
}

/// A 128-bit key for the flow hash; [`HashKey::FIXED`] (all zero) is the
/// unkeyed hash.
///
/// ```
/// use flowsieve::hash::HashKey;
/// let k: HashKey = "000102030405060708090a0b0c0d0e0f".parse().unwrap();
/// assert_eq!(k.to_string(), "000102030405060708090a0b0c0d0e0f");
/// assert!("xyz".parse::<HashKey>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HashKey(pub [u64; 2]);

impl HashKey {
    /// The unkeyed hash.
    pub const FIXED: HashKey = HashKey([0, 0]);

    /// A key drawn from the operating system's random source.
    pub fn random() -> HashKey {
        HashKey([rand::random(), rand::random()])
    }
}

/// Why a hash key could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a hash key is 32 hexadecimal digits (128 bits) or `random`, got {0:?}")]
pub struct HashKeyError(pub String);

impl std::str::FromStr for HashKey {
    type Err = HashKeyError;
    fn from_str(s: &str) -> Result<HashKey, HashKeyError> {
        let bad = || HashKeyError(s.chars().take(64).collect());
        if s == "random" {
            return Ok(HashKey::random());
        }
        let hex = s.strip_prefix("0x").unwrap_or(s);
        if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let hi = u64::from_str_radix(&hex[..16], 16).map_err(|_| bad())?;
        let lo = u64::from_str_radix(&hex[16..], 16).map_err(|_| bad())?;
        Ok(HashKey([hi, lo]))
    }
}

impl std::fmt::Display for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}{:016x}", self.0[0], self.0[1])
    }
}

/// The flow hash under a [`HashKey`]: the same mix with `K0..K5` XORed
/// with six words expanded from the key (splitmix64). With
/// [`HashKey::FIXED`] it equals [`flow_hash`] bit for bit.
///
/// ```
/// use flowsieve::dissect::FlowKey;
/// use flowsieve::hash::{flow_hash, FlowHasher, HashKey};
/// let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 17);
/// assert_eq!(FlowHasher::new(HashKey::FIXED).hash(&k), flow_hash(&k));
/// assert_ne!(FlowHasher::new(HashKey([1, 2])).hash(&k), flow_hash(&k));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowHasher {
    k: [u64; 6],
    key: HashKey,
}

impl Default for FlowHasher {
    fn default() -> FlowHasher {
        FlowHasher::new(HashKey::FIXED)
    }
}

impl FlowHasher {
    /// The hasher for `key`.
    pub fn new(key: HashKey) -> FlowHasher {
        let mut k = [K0, K1, K2, K3, K4, K5];
        if key != HashKey::FIXED {
            let mut state = key.0[0] ^ fmix64(key.0[1] ^ K6);
            for (i, c) in k.iter_mut().enumerate() {
                // splitmix64: a distinct, well-mixed word per constant.
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state ^ key.0[i % 2].rotate_left(17 * i as u32);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                *c ^= z ^ (z >> 31);
            }
        }
        FlowHasher { k, key }
    }

    /// The key it was made from.
    pub fn key(&self) -> HashKey {
        self.key
    }

    /// The 64-bit hash of a flow key under this hasher's key.
    #[inline]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        let w = encode(key);
        let k = &self.k;
        let a = fold(w[0] ^ k[0], w[1] ^ k[1]);
        let b = fold(w[2] ^ k[2], w[3] ^ k[3]);
        fmix64(fold(a ^ b ^ k[4], w[4] ^ k[5]))
    }
}

/// A second mix of a flow hash, independent in its bits of the first:
/// extra index bits for subarrays above 2^32 cells, and shard selection.
#[inline]
pub fn second_mix(h: u64) -> u64 {
    fmix64(h ^ K6)
}

/// Multiply-shift reduction of a 32-bit value to `[0, n)`.
#[inline(always)]
fn reduce32(x: u32, n: u64) -> u64 {
    (u64::from(x) * n) >> 32
}

/// Multiply-shift reduction of a 64-bit value to `[0, n)`.
#[inline(always)]
fn reduce64(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

/// The shard, in `[0, shards)`, that owns a flow. Uses [`second_mix`], so a
/// shard's flows are not biased in their filter indices.
#[inline]
pub fn shard_of(h: u64, shards: usize) -> usize {
    reduce64(second_mix(h), shards as u64) as usize
}

/// Derives `k` indices, one per partition of `m/k` cells, from a flow hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionedIndexer {
    k: usize,
    partition: u64,
}

impl PartitionedIndexer {
    /// An indexer for `m` cells in `k` partitions of `m / k` cells (any
    /// remainder cells are unused). `k` and `m / k` are raised to at least 1.
    pub fn new(m: usize, k: usize) -> PartitionedIndexer {
        let k = k.max(1);
        PartitionedIndexer {
            k,
            partition: ((m / k) as u64).max(1),
        }
    }

    /// Number of hash functions (partitions).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Cells per partition.
    pub fn partition_len(&self) -> usize {
        self.partition as usize
    }

    /// Writes the `k` cell indices of `h` into `out[..k]`; index `i` lies in
    /// `[i * m/k, (i + 1) * m/k)`. Writes `min(k, out.len())` indices.
    #[inline]
    pub fn indices(&self, h: u64, out: &mut [usize]) {
        let mut slots = out.iter_mut();
        self.for_each(h, |i| {
            if let Some(slot) = slots.next() {
                *slot = i;
            }
        });
    }

    /// Calls `f` with the `k` cell indices of `h` in order: the same indices
    /// as [`PartitionedIndexer::index`] for `i = 0..k`, bit for bit.
    ///
    /// Why a second form: `index` decides per call between the 32-bit and
    /// the 64-bit reduction and multiplies `i` out again. Walking all `k` at
    /// once decides once and steps `h1 + i * h2` by one addition (the same
    /// wrapping sum), which is what a k = 11 insert on every packet wants.
    ///
    /// ```
    /// use flowsieve::hash::PartitionedIndexer;
    /// let ix = PartitionedIndexer::new(1 << 20, 11);
    /// let mut walked = Vec::new();
    /// ix.for_each(0x0123_4567_89ab_cdef, |i| walked.push(i));
    /// let one_by_one: Vec<usize> = (0..11).map(|i| ix.index(0x0123_4567_89ab_cdef, i)).collect();
    /// assert_eq!(walked, one_by_one);
    /// ```
    #[inline(always)]
    pub fn for_each(&self, h: u64, mut f: impl FnMut(usize)) {
        let n = self.partition;
        if n <= 1 << 32 {
            let (mut x, h2) = (h as u32, (h >> 32) as u32);
            let mut base = 0u64;
            for _ in 0..self.k {
                f((base + reduce32(x, n)) as usize);
                x = x.wrapping_add(h2);
                base += n;
            }
        } else {
            for i in 0..self.k {
                f(self.index(h, i));
            }
        }
    }

    /// Index `i` alone (see [`PartitionedIndexer::indices`]).
    #[inline]
    pub fn index(&self, h: u64, i: usize) -> usize {
        let n = self.partition;
        let offset = if n <= 1 << 32 {
            let (h1, h2) = (h as u32, (h >> 32) as u32);
            reduce32(h1.wrapping_add((i as u32).wrapping_mul(h2)), n)
        } else {
            reduce64(h.wrapping_add((i as u64).wrapping_mul(second_mix(h))), n)
        };
        (i as u64 * n + offset) as usize
    }
}

/// Derives a block and `k` cells inside it from a flow hash: the indices of
/// the cache-line-blocked layout ([`crate::filter::BlockedCountingFilter`]).
///
/// - The block is the high 32 bits of the flow hash reduced to `blocks`.
/// - Inside the block, the `per_block` cells are cut into `k` sub-blocks of
///   `per_block / k` cells (any remainder unused). Cell `j` is a 16-bit
///   chunk of a splitmix64 stream seeded by [`second_mix`] (four cells per
///   64-bit output), reduced to the sub-block by multiply-shift.
///
/// Why not double hashing, as [`PartitionedIndexer`] uses: with sub-blocks
/// of a few dozen cells, two keys whose `h2` differ by less than `2^32 / s`
/// get the same cell in every sub-block as soon as their `h1` are close, so
/// co-locations are correlated across sub-blocks. A simulation showed 6 %
/// more false positives than the independent-cell model (B1) of
/// [`crate::model::blocked`]; independent chunks match it.
///
/// ```
/// use flowsieve::hash::BlockedIndexer;
/// let ix = BlockedIndexer::new(1024, 64, 4);
/// let h = 0x0123_4567_89ab_cdef;
/// assert!(ix.block(h) < 1024);
/// let mut cells = [0usize; 4];
/// ix.cells(h, &mut cells);
/// for (j, &c) in cells.iter().enumerate() {
///     assert!(c >= j * 16 && c < (j + 1) * 16); // its own sub-block
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockedIndexer {
    blocks: u64,
    sub: u64,
    k: usize,
}

impl BlockedIndexer {
    /// `blocks` blocks of `per_block` cells, `k` cells per key (`k` is
    /// clamped to `1..=per_block`, `blocks` raised to at least 1).
    pub fn new(blocks: usize, per_block: usize, k: usize) -> BlockedIndexer {
        let per_block = per_block.max(1);
        let k = k.clamp(1, per_block);
        BlockedIndexer {
            blocks: (blocks as u64).clamp(1, 1 << 32),
            sub: (per_block / k) as u64,
            k,
        }
    }

    /// Cells per key.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Blocks.
    pub fn blocks(&self) -> usize {
        self.blocks as usize
    }

    /// Cells in each of the `k` sub-blocks of a block.
    pub fn sub_block_len(&self) -> usize {
        self.sub as usize
    }

    /// The key's block.
    #[inline]
    pub fn block(&self, h: u64) -> usize {
        reduce32((h >> 32) as u32, self.blocks) as usize
    }

    /// Writes the key's `k` cells, as indices inside its block, into
    /// `out[..k]` (at most `out.len()` of them).
    #[inline]
    pub fn cells(&self, h: u64, out: &mut [usize]) {
        let mut slots = out.iter_mut();
        self.for_each_cell(h, |cell| {
            if let Some(slot) = slots.next() {
                *slot = cell;
            }
        });
    }

    /// Calls `f` with the key's `k` cells in order, the cells
    /// [`BlockedIndexer::cells`] writes: cell `j` is `j * s + (c_j * s >>
    /// 16)` for sub-blocks of `s` cells, where `c_j` is 16-bit chunk `j %
    /// 4` of `fmix64(second_mix(h) + (j / 4 + 1) * GOLDEN)`.
    ///
    /// Why a second form: written into an array first and read back, the
    /// cells cost the blocked filter's insert about as many instructions
    /// as the partitioned filter's `k = 11` walk, for `k = 4` counters in
    /// one line (BENCHMARKS.md, fifty-ninth round). Walked, each cell goes
    /// straight to its counter, and the chunk's shift is a constant.
    ///
    /// ```
    /// use flowsieve::hash::BlockedIndexer;
    /// let ix = BlockedIndexer::new(1024, 64, 11);
    /// let mut written = [0usize; 11];
    /// ix.cells(7, &mut written);
    /// let mut walked = Vec::new();
    /// ix.for_each_cell(7, |c| walked.push(c));
    /// assert_eq!(walked, written);
    /// ```
    #[inline(always)]
    pub fn for_each_cell(&self, h: u64, mut f: impl FnMut(usize)) {
        // The walk that stops at a failed test, with a test that never
        // fails: inlined, the test and its early return fold away.
        self.all_cells(h, |cell| {
            f(cell);
            true
        });
    }

    /// True if `test` holds for every one of the key's cells (those of
    /// [`BlockedIndexer::for_each_cell`], in order), stopping at the first
    /// that fails, before working out the cells after it: a Bloom query of
    /// a key not in the set mostly stops at its first or second cell, so
    /// it costs one mix, not one for every four cells.
    ///
    /// ```
    /// use flowsieve::hash::BlockedIndexer;
    /// let ix = BlockedIndexer::new(1024, 512, 7);
    /// let mut all = Vec::new();
    /// ix.for_each_cell(9, |c| all.push(c));
    /// let mut asked = Vec::new();
    /// assert!(!ix.all_cells(9, |c| { asked.push(c); asked.len() < 2 }));
    /// assert_eq!(asked, all[..2]);
    /// assert!(ix.all_cells(9, |_| true));
    /// ```
    #[inline(always)]
    pub fn all_cells(&self, h: u64, mut test: impl FnMut(usize) -> bool) -> bool {
        const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
        let seed = second_mix(h);
        let (sub, k) = (self.sub, self.k);
        let mut base = 0u64;
        let mut group = 1u64;
        let mut left = k;
        while left > 0 {
            let bits = fmix64(seed.wrapping_add(group.wrapping_mul(GOLDEN)));
            for t in 0..4 {
                if left == 0 {
                    break;
                }
                let chunk = (bits >> (16 * t)) & 0xffff;
                if !test((base + ((chunk * sub) >> 16)) as usize) {
                    return false;
                }
                base += sub;
                left -= 1;
            }
            group += 1;
        }
        true
    }
}
