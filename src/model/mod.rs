//! Analytical models from the papers behind flowsieve: pure functions of
//! their parameters, each citing the paper and equation it implements.
//!
//! - [`bloom`]: Bloom filter false-positive rates (001, Summary Cache).
//! - [`threshold`]: counting-filter count thresholding (003).

pub mod bloom;
pub mod special;
pub mod threshold;
