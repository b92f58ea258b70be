//! Hash maps keyed by flow hashes.
//!
//! The stages' exact sets are keyed by the 64-bit flow hash, the identity
//! the filters themselves see (two keys with one hash are one element to a
//! filter, so they are one flow to its ground truth too; with `n` flows that
//! happens with probability about `n^2 / 2^65`). The hash is already a
//! strong mix, so the map uses it as is instead of hashing it again.

use std::hash::{BuildHasherDefault, Hasher};

/// A [`Hasher`] for keys that are already uniform 64-bit hashes.
#[derive(Default, Clone, Copy)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is expected; fold anything else in.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

/// A map from flow hashes.
pub type HashMap<V> = hashbrown::HashMap<u64, V, BuildHasherDefault<PassThrough>>;
/// A set of flow hashes.
pub type HashSet = hashbrown::HashSet<u64, BuildHasherDefault<PassThrough>>;
