//! Analytical models from the papers behind flowsieve: pure functions of
//! their parameters, each citing the paper and equation it implements.
//!
//! - [`bloom`]: Bloom filter false-positive rates (001, Summary Cache).
//! - [`threshold`]: counting-filter count thresholding (003).
//! - [`blocked`]: count thresholding in the cache-line-blocked layout (derived here, after Putze et al.).
//! - [`paradox`]: the Bloom paradox, posteriors, decisions and query order (000).
//! - [`recycling`]: recycling Bloom filters, one- and two-phase (004).
//! - [`compressed`]: compressed Bloom filters for a transmission budget (002).
//! - [`sigma_arg`]: a recycling filter's sigma as given (a fraction or bits).
//! - [`query`]: every model as a typed question and answer (what
//!   `flowsieve model` prints).

pub mod blocked;
pub mod blocked_recycling;
pub mod bloom;
pub mod compressed;
pub mod paradox;
pub mod query;
pub mod recycling;
pub mod sigma_arg;
pub mod special;
pub mod threshold;
