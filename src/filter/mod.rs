//! Probabilistic filters: plain data structures with no I/O. Each documents
//! its false-positive and false-negative behaviour and the paper it follows.
//!
//! - [`RecyclingBloomFilter`]: new-flow detection on endless streams (004).

mod bit_array;
mod recycling;

pub use bit_array::BitArray;
pub use recycling::{RecyclePolicy, RecyclingBloomFilter, RecyclingStats, MAX_K};
