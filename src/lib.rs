//! flowsieve: probabilistic flow monitoring over packet traces.
//!
//! The crate is a library with a thin command-line front end (`bin/`). Each
//! module has one job:
//!
//! - [`ingest`]: pcap/pcapng sources (memory-mapped or gzip/zstd streams);
//! - [`dissect`]: packets to directional 5-tuple flow keys, with every packet
//!   that yields no key counted by reason;
//! - [`filter`]: the probabilistic filters (data structures, no I/O);
//! - [`hash`]: the 64-bit flow hash, partitioned filter indices and shard
//!   selection;
//! - [`class`]: flow classes (`ports`, `ipclass`, or a TOML config);
//! - [`model`]: the analytical models from the papers (pure functions);
//! - [`truth`]: the exact per-flow table (ground truth);
//! - [`replay`]: the replay engine, which pushes results into a sink, and
//!   [`ahead`], its helper threads that dissect and hash a trace ahead of it;
//! - [`report`]: the replay summary and its text and JSON renderings;
//! - [`synth`]: the seeded synthetic trace generator;
//! - [`mod@bench`]: the throughput protocol behind `flowsieve bench`.

#![warn(missing_docs)]

/// Serialises types as their `Display` text (the JSON schema keeps such
/// values as strings, e.g. a window `1s` or a policy `sigma:512`).
macro_rules! serialize_as_display {
    ($($t:ty),* $(,)?) => {
        $(
            impl serde::Serialize for $t {
                fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    s.collect_str(self)
                }
            }
        )*
    };
}
pub(crate) use serialize_as_display;

/// `eprintln!` that loses its line when standard error cannot be written,
/// instead of panicking. With both streams piped into a reader that went
/// away (a collector's `2>&1 | head -0`) the one error line has nowhere to
/// go, and std's `eprintln!` turned that into a panic (exit 101) in place
/// of the run's own exit code. Defined before the modules, so that it
/// stands in for std's in all of them. (Only the `network` feature's
/// modules write to stderr, hence the allowance without it.)
#[cfg_attr(not(feature = "network"), allow(unused_macros))]
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod ahead;
pub mod bench;
pub mod class;
pub mod dissect;
pub mod filter;
pub mod hash;
pub mod ingest;
#[cfg(target_os = "linux")]
pub mod live;
pub mod model;
pub mod network;
pub mod pages;
pub mod pipeline;
mod prefetch;
#[doc(hidden)]
pub use prefetch::testing as prefetch_testing;
pub mod replay;
pub mod report;
pub mod reproduce;
pub mod synth;
pub mod truth;
