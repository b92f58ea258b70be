//! Merging one shard-window's digests from several probes (no I/O).
//!
//! - Counters are **added** into 32-bit cells, wider than any probe's
//!   counters (4, 8 or 16 bits), so the sum saturates only where a probe's
//!   own counter already had (then the sum is a lower bound on that cell
//!   and the result says how many cells).
//! - Presence bits are **OR-ed**: the merged filter is the one a single
//!   machine would have built from all packets (003's insertions commute).
//! - Candidates are **queried** against the merged counters: a candidate
//!   is heavy when the minimum of its `k` summed counters is at least
//!   `θ`. Without conservative update the summed counters equal a single
//!   machine's counters over the same packets exactly, so the estimate is
//!   the single machine's; with conservative update each probe's counters
//!   are upper bounds of its own counts, and so is their sum.
//!
//! A (probe, shard, window) is merged at most once: [`ShardWindowMerge::add`]
//! refuses a second digest from the same probe and says so.

use super::config::NetworkConfig;
use super::digest::Digest;
use super::merged_cells::MergedCells;
use super::merged_presence::MergedPresence;
use crate::dissect::FlowKey;
use crate::filter::{BloomFilter, compress_bloom, decompress_bloom_within};
use crate::filter::{CounterSnapshot, CounterWidth};
use crate::hash::{PartitionedIndexer, fmix64};
use crate::pipeline::Candidate;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Why a digest was not merged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// Made under another configuration.
    #[error(
        "digest of probe {probe} was made under configuration {found:#018x}, not {expected:#018x}"
    )]
    Fingerprint {
        /// The probe.
        probe: String,
        /// Its fingerprint.
        found: u64,
        /// The shared one.
        expected: u64,
    },
    /// For another shard or window.
    #[error(
        "digest of probe {probe} is for shard {shard} window {window}, not shard {want_shard} window {want_window}"
    )]
    Elsewhere {
        /// The probe.
        probe: String,
        /// Its shard.
        shard: u32,
        /// Its window.
        window: u64,
        /// This merge's shard.
        want_shard: u32,
        /// This merge's window.
        want_window: u64,
    },
    /// Filters of another shape.
    #[error("digest of probe {probe}: {what} has {found}, the configuration says {expected}")]
    Shape {
        /// The probe.
        probe: String,
        /// Which dimension.
        what: &'static str,
        /// Found.
        found: u64,
        /// Expected.
        expected: u64,
    },
}

/// One heavy flow of a merged window.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HeavyFlow {
    /// Source address.
    pub src: String,
    /// Destination address.
    pub dst: String,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
    /// Class id.
    pub class: u16,
    /// The merged estimate.
    pub estimate: u64,
    /// The flow hash, hex.
    pub hash: String,
    /// Whether the flow is new to the network: absent from the previous
    /// window's merged presence filter (set by `results`, see
    /// [`super::results::assemble`]; `None` when that window is unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<bool>,
}

impl HeavyFlow {
    fn new(c: &Candidate, estimate: u64) -> HeavyFlow {
        HeavyFlow {
            src: c.key.src().to_string(),
            dst: c.key.dst().to_string(),
            sport: c.key.sport(),
            dport: c.key.dport(),
            proto: c.key.proto(),
            class: c.class,
            estimate,
            hash: format!("{:016x}", c.hash),
            new: None,
        }
    }

    /// The flow hash.
    pub fn hash_value(&self) -> Option<u64> {
        u64::from_str_radix(&self.hash, 16).ok()
    }

    /// The flow key.
    pub fn key(&self) -> Option<FlowKey> {
        FlowKey::from_addrs(
            self.src.parse().ok()?,
            self.dst.parse().ok()?,
            self.sport,
            self.dport,
            self.proto,
        )
    }
}

/// A merged shard-window: what a collector writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardWindowResult {
    /// The window (from the Unix epoch).
    pub window: u64,
    /// The shard.
    pub shard: u32,
    /// The probes merged, sorted.
    pub probes: Vec<String>,
    /// The probes expected but absent (a partial window).
    pub missing: Vec<String>,
    /// True when some expected probe did not report before the lateness.
    pub partial: bool,
    /// Probes whose digest for this shard-window came after it was written:
    /// not merged, so the result lacks their packets (sorted). The
    /// collector that receives such a digest adds its probe here before it
    /// acknowledges it. A probe of `missing` that turned up late is listed
    /// in both; one listed only here means the result was written complete
    /// but is not (two collectors owning one shard, or a digest published
    /// by hand). Absent from results that never had one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late: Vec<String>,
    /// Packets over all probes.
    pub packets: u64,
    /// Packets per class id.
    pub class_packets: Vec<u64>,
    /// Distinct candidates offered by the probes.
    pub candidates: u64,
    /// The candidates whose merged estimate reached θ, by estimate then key.
    pub heavy: Vec<HeavyFlow>,
    /// Cells saturated in some probe's digest (their sum is a lower bound).
    pub saturated_cells: u64,
    /// A checksum of the merged counters (equal runs, equal checksums).
    pub counters_checksum: String,
    /// Set bits of the merged presence filter.
    pub presence_ones: u64,
    /// Bits of the presence filter.
    pub presence_bits: u64,
    /// Distinct flows, estimated from the merged presence filter.
    pub flows_estimate: f64,
    /// The merged presence filter as an `FSCB` snapshot in base64 (empty
    /// when no digest had one), so that `results` can tell which flows are
    /// new since the previous window.
    #[serde(default)]
    pub presence: String,
}

impl ShardWindowResult {
    /// Notes that `probe`'s digest came after this result was written
    /// (see [`ShardWindowResult::late`]), keeping the list sorted and
    /// without repeats. Returns whether the probe is new to the list; a
    /// digest delivered again changes nothing.
    ///
    /// ```
    /// use flowsieve::network::merge::ShardWindowResult;
    /// let mut r = ShardWindowResult::default();
    /// assert!(r.note_late("r9"));
    /// assert!(r.note_late("r2"));
    /// assert!(!r.note_late("r9"));
    /// assert_eq!(r.late, ["r2", "r9"]);
    /// ```
    pub fn note_late(&mut self, probe: &str) -> bool {
        match self.late.binary_search_by(|p| p.as_str().cmp(probe)) {
            Ok(_) => false,
            Err(at) => {
                self.late.insert(at, probe.to_string());
                true
            }
        }
    }

    /// The merged presence filter, if the result carries a readable one.
    pub fn presence_filter(&self) -> Option<BloomFilter> {
        use base64::Engine as _;
        if self.presence.is_empty() {
            return None;
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.presence)
            .ok()?;
        decompress_bloom_within(&bytes, super::digest::MAX_DIGEST_CELLS).ok()
    }
}

/// The merge of one shard-window in progress.
#[derive(Clone, Debug)]
pub struct ShardWindowMerge {
    shard: u32,
    window: u64,
    fingerprint: u64,
    theta: u64,
    k: usize,
    cells: MergedCells,
    /// The first digest's counter indexing and width (every later digest
    /// must match them).
    layout: Option<(PartitionedIndexer, CounterWidth)>,
    presence: Option<MergedPresence>,
    candidates: BTreeMap<u64, Candidate>,
    class_packets: Vec<u64>,
    packets: u64,
    probes: BTreeSet<String>,
}

impl ShardWindowMerge {
    /// An empty merge for one shard and window under `cfg`.
    pub fn new(cfg: &NetworkConfig, shard: u32, window: u64) -> ShardWindowMerge {
        ShardWindowMerge {
            shard,
            window,
            fingerprint: cfg.fingerprint(),
            theta: cfg.theta,
            k: cfg.k as usize,
            cells: MergedCells::new(0),
            layout: None,
            presence: None,
            candidates: BTreeMap::new(),
            class_packets: vec![0; cfg.classes.len()],
            packets: 0,
            probes: BTreeSet::new(),
        }
    }

    /// The probes merged so far.
    pub fn probes(&self) -> &BTreeSet<String> {
        &self.probes
    }

    /// Merges one digest. `Ok(false)`: this probe's digest was merged
    /// already and this one is ignored.
    pub fn add(&mut self, d: &Digest) -> Result<bool, MergeError> {
        if d.fingerprint != self.fingerprint {
            return Err(MergeError::Fingerprint {
                probe: d.probe.clone(),
                found: d.fingerprint,
                expected: self.fingerprint,
            });
        }
        if d.shard != self.shard || d.window != self.window {
            return Err(MergeError::Elsewhere {
                probe: d.probe.clone(),
                shard: d.shard,
                window: d.window,
                want_shard: self.shard,
                want_window: self.window,
            });
        }
        if d.counters.k() != self.k {
            return Err(MergeError::Shape {
                probe: d.probe.clone(),
                what: "k",
                found: d.counters.k() as u64,
                expected: self.k as u64,
            });
        }
        if let Some((l, width)) = &self.layout {
            let m = l.partition_len() * l.k();
            if m != d.counters.m() || *width != d.counters.width() {
                return Err(MergeError::Shape {
                    probe: d.probe.clone(),
                    what: "counters",
                    found: d.counters.m() as u64,
                    expected: m as u64,
                });
            }
        }
        if let Some(p) = &self.presence
            && (p.m() != d.presence.m() || p.k() != d.presence.k())
        {
            return Err(MergeError::Shape {
                probe: d.probe.clone(),
                what: "presence bits",
                found: d.presence.m() as u64,
                expected: p.m() as u64,
            });
        }
        if d.class_packets.len() > self.class_packets.len() {
            return Err(MergeError::Shape {
                probe: d.probe.clone(),
                what: "classes",
                found: d.class_packets.len() as u64,
                expected: self.class_packets.len() as u64,
            });
        }
        if !self.probes.insert(d.probe.clone()) {
            return Ok(false);
        }
        let m = d.counters.m();
        if self.layout.is_none() {
            self.cells = MergedCells::new(m);
            // The same indexing as the digest's filter (which has exactly
            // `m` counters in `k` partitions).
            self.layout = Some((PartitionedIndexer::new(m, self.k), d.counters.width()));
        }
        let max = d.counters.width().max();
        // Zero counters add nothing and saturate nothing: only the
        // non-zero ones are visited (most of a window's words are zero).
        let cells = &mut self.cells;
        cells.expect(&d.counters);
        let mut add = |i: usize, v: u64| cells.add(i, v as u32, v == max);
        // Walked in the concrete form, as a snapshot codes itself (see
        // `CounterSnapshot::compress`).
        match &d.counters {
            CounterSnapshot::Dense(f) => f.for_each_nonzero(&mut add),
            CounterSnapshot::Sparse(s) => s.for_each_nonzero(&mut add),
        }
        match self.presence.as_mut() {
            // Same shape, checked above.
            Some(p) => p.union(&d.presence),
            None => self.presence = Some(MergedPresence::new(&d.presence)),
        }
        for c in &d.candidates {
            self.candidates.entry(c.hash).or_insert(*c);
        }
        for (a, b) in self.class_packets.iter_mut().zip(&d.class_packets) {
            *a += b;
        }
        self.packets += d.packets;
        Ok(true)
    }

    /// The merged estimate of a flow hash: the least of its `k` summed
    /// counters.
    pub fn estimate(&self, h: u64) -> u64 {
        let Some((l, _)) = &self.layout else {
            return 0;
        };
        (0..l.k())
            .map(|j| u64::from(self.cells.get(l.index(h, j))))
            .min()
            .unwrap_or(0)
    }

    /// The merged counter `i`.
    pub fn cell(&self, i: usize) -> u32 {
        self.cells.get(i)
    }

    /// The merged presence filter (built whole: a merge of few flows holds
    /// only its set bits' positions).
    pub fn presence(&self) -> Option<BloomFilter> {
        self.presence.as_ref().map(MergedPresence::to_filter)
    }

    /// The result, with `missing` the expected probes that did not report.
    pub fn finish(&self, missing: Vec<String>) -> ShardWindowResult {
        let mut heavy: Vec<HeavyFlow> = self
            .candidates
            .values()
            .filter_map(|c| {
                let e = self.estimate(c.hash);
                (e >= self.theta).then(|| HeavyFlow::new(c, e))
            })
            .collect();
        heavy.sort_by(|a, b| b.estimate.cmp(&a.estimate).then_with(|| a.cmp(b)));
        let merged_presence = self.presence();
        let presence = merged_presence.as_ref().map_or_else(String::new, |p| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(compress_bloom(p))
        });
        let (checksum, saturated_cells) = self.cells.summary();
        let (ones, bits, flows) = match &merged_presence {
            Some(p) => {
                let ones = p.count_ones();
                (
                    ones,
                    p.m() as u64,
                    cardinality_estimate(p.m() as u64, p.k() as u64, ones),
                )
            }
            None => (0, 0, 0.0),
        };
        ShardWindowResult {
            window: self.window,
            shard: self.shard,
            probes: self.probes.iter().cloned().collect(),
            partial: !missing.is_empty(),
            missing,
            late: Vec::new(),
            packets: self.packets,
            class_packets: self.class_packets.clone(),
            candidates: self.candidates.len() as u64,
            heavy,
            saturated_cells,
            counters_checksum: format!("{checksum:016x}"),
            presence_ones: ones,
            presence_bits: bits,
            flows_estimate: flows,
            presence,
        }
    }
}

/// A checksum of counter values (the same for a probe's own counters and
/// for a merge that equals them).
pub fn cells_checksum<T: Copy + Into<u64>>(cells: &[T]) -> u64 {
    let mut h = cells.len() as u64;
    for (i, &c) in cells.iter().enumerate() {
        h = checksum_cell(h, i, c.into());
    }
    fmix64(h)
}

/// Cell `i` of value `v`'s part of [`cells_checksum`]: zero cells add
/// nothing and the others are combined by XOR, so the cells may come in
/// any order and the zero ones may be left out.
pub(super) fn checksum_cell(h: u64, i: usize, v: u64) -> u64 {
    if v == 0 {
        h
    } else {
        h ^ fmix64((i as u64) << 32 ^ v).wrapping_add(v)
    }
}

/// Distinct elements in a Bloom filter of `m` bits, `k` hashes and `ones`
/// set bits: `-(m/k) ln(1 - ones/m)`, the maximum-likelihood inversion of
/// the fill ratio `1 - e^{-kn/m}` (002's eq. for the fraction of zero
/// bits). Infinite for a full filter.
///
/// ```
/// # use flowsieve::network::cardinality_estimate;
/// assert_eq!(cardinality_estimate(1024, 4, 0), 0.0);
/// let n = cardinality_estimate(1 << 20, 4, 39_000);
/// assert!((n - 9_936.0).abs() < 1.0);
/// ```
pub fn cardinality_estimate(m: u64, k: u64, ones: u64) -> f64 {
    if m == 0 || k == 0 {
        return 0.0;
    }
    if ones >= m {
        return f64::INFINITY;
    }
    let (m, k) = (m as f64, k as f64);
    -(m / k) * (1.0 - ones as f64 / m).ln()
}
