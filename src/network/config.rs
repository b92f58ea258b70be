//! The shared configuration: the shapes every probe and collector of one
//! network must agree on, kept in a key-value bucket (`flowsieve-config`,
//! key [`CONFIG_KEY`]).
//!
//! The first probe or collector to start writes it (an atomic create);
//! every later one reads it and compares it with its own, field by field,
//! and refuses to start on a difference, naming it. A digest carries the
//! configuration's [`NetworkConfig::fingerprint`], so a digest made under
//! another configuration is refused at the merge even if it slipped past.

use crate::hash::fmix64;
use serde::{Deserialize, Serialize};

/// The key of the configuration in its bucket.
pub const CONFIG_KEY: &str = "v1";

/// The most probes one configuration declares.
pub const MAX_PROBES: u32 = 65_536;

/// What every probe and collector of one network shares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkConfig {
    /// Configuration format version (1).
    pub version: u32,
    /// Shards (a flow's shard is `shard_of(hash, shards)` everywhere).
    pub shards: u32,
    /// The heavy window, nanoseconds from the Unix epoch.
    pub window_ns: u64,
    /// The network-wide count threshold.
    pub theta: u64,
    /// Counters of the heavy stage's filter, over all shards.
    pub counters: u64,
    /// Bits per counter.
    pub counter_bits: u32,
    /// Counters per flow.
    pub k: u32,
    /// Conservative update.
    pub conservative: bool,
    /// Bits of the presence filter (flows seen per window), over all
    /// shards.
    pub presence_bits: u64,
    /// Hash functions of the presence filter.
    pub presence_k: u32,
    /// The flow hash's key, hex (`0`: the public constants).
    pub hash_key: String,
    /// Probes the network declares, `P`: a probe reports a flow as a
    /// candidate at `⌈θ/P⌉`.
    pub probes: u32,
    /// The class names, in id order.
    pub classes: Vec<String>,
}

/// One field on which two configurations differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigDifference {
    /// The field.
    pub field: &'static str,
    /// The shared configuration's value.
    pub shared: String,
    /// This process's value.
    pub local: String,
}

impl std::fmt::Display for ConfigDifference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is {} in the shared configuration but {} here",
            self.field, self.shared, self.local
        )
    }
}

impl NetworkConfig {
    /// The candidate threshold `⌈θ/P⌉`: a flow whose network-wide count
    /// is at least `θ` has at least `⌈θ/P⌉` packets on one of the `P`
    /// probes (pigeonhole), and a local estimate is never below the local
    /// count, so it is a candidate somewhere (docs/scale-out.md).
    ///
    /// ```
    /// # use flowsieve::network::NetworkConfig;
    /// let mut c = NetworkConfig::example();
    /// c.theta = 10;
    /// c.probes = 4;
    /// assert_eq!(c.candidate_theta(), 3);
    /// c.probes = 1;
    /// assert_eq!(c.candidate_theta(), 10);
    /// ```
    pub fn candidate_theta(&self) -> u64 {
        self.theta.div_ceil(u64::from(self.probes.max(1))).max(1)
    }

    /// A small valid configuration (for examples and tests).
    pub fn example() -> NetworkConfig {
        NetworkConfig {
            version: 1,
            shards: 4,
            window_ns: 1_000_000_000,
            theta: 10,
            counters: 1 << 16,
            counter_bits: 8,
            k: 4,
            conservative: false,
            presence_bits: 1 << 16,
            presence_k: 4,
            hash_key: "0".into(),
            probes: 2,
            classes: vec!["all".into()],
        }
    }

    /// A 64-bit fingerprint of every field, carried by each digest.
    pub fn fingerprint(&self) -> u64 {
        let text = serde_json::to_string(self).unwrap_or_default();
        let mut h = 0x5156_4e46_4753_4650u64;
        for chunk in text.as_bytes().chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            h = fmix64(h ^ u64::from_le_bytes(w)).wrapping_add(chunk.len() as u64);
        }
        h
    }

    /// The fields on which `local` differs from this (shared)
    /// configuration.
    pub fn differences(&self, local: &NetworkConfig) -> Vec<ConfigDifference> {
        let mut out = Vec::new();
        let mut check = |field: &'static str, a: String, b: String| {
            if a != b {
                out.push(ConfigDifference {
                    field,
                    shared: a,
                    local: b,
                });
            }
        };
        let s = self;
        check("version", s.version.to_string(), local.version.to_string());
        check("shards", s.shards.to_string(), local.shards.to_string());
        check(
            "window_ns",
            s.window_ns.to_string(),
            local.window_ns.to_string(),
        );
        check("theta", s.theta.to_string(), local.theta.to_string());
        check(
            "counters",
            s.counters.to_string(),
            local.counters.to_string(),
        );
        check(
            "counter_bits",
            s.counter_bits.to_string(),
            local.counter_bits.to_string(),
        );
        check("k", s.k.to_string(), local.k.to_string());
        check(
            "conservative",
            s.conservative.to_string(),
            local.conservative.to_string(),
        );
        check(
            "presence_bits",
            s.presence_bits.to_string(),
            local.presence_bits.to_string(),
        );
        check(
            "presence_k",
            s.presence_k.to_string(),
            local.presence_k.to_string(),
        );
        check("hash_key", s.hash_key.clone(), local.hash_key.clone());
        check("probes", s.probes.to_string(), local.probes.to_string());
        check("classes", s.classes.join(","), local.classes.join(","));
        out
    }

    /// Checks the fields' ranges.
    pub fn validate(&self) -> Result<(), String> {
        if self.version != 1 {
            return Err(format!("configuration version {} is not 1", self.version));
        }
        if self.shards == 0 || self.shards as usize > crate::pipeline::MAX_SHARDS {
            return Err(format!(
                "shards must be between 1 and {} (got {})",
                crate::pipeline::MAX_SHARDS,
                self.shards
            ));
        }
        if self.probes == 0 || self.probes > MAX_PROBES {
            return Err(format!(
                "probes must be between 1 and {MAX_PROBES} (got {})",
                self.probes
            ));
        }
        if self.window_ns == 0 {
            return Err("the window must be longer than 0".into());
        }
        if self.presence_bits < u64::from(self.shards) * u64::from(self.presence_k.max(1)) {
            return Err(format!(
                "presence_bits ({}) leave fewer than presence_k bits per shard",
                self.presence_bits
            ));
        }
        if self.presence_k == 0 || self.presence_k as usize > crate::filter::MAX_K {
            return Err(format!(
                "presence_k must be between 1 and {} (got {})",
                crate::filter::MAX_K,
                self.presence_k
            ));
        }
        if self.classes.is_empty() {
            return Err("no classes".into());
        }
        Ok(())
    }
}
