//! Every integration test that can share a process, as modules of one test
//! binary.
//!
//! Why one binary: each test binary links the whole crate graph, and with
//! the release profile's thin LTO re-optimises it (12 to 58 s each on the
//! 2-core CI machine), so twenty-seven separate binaries cost more build time
//! than all their tests take to run. The `test-release` profile the README
//! gives drops the LTO, but linking twenty-seven binaries would still repeat.
//! Each module is still its own file, `tests/<module>.rs`, testing one
//! module of the library, and a module's tests run alone with `cargo test
//! --profile test-release --test suite <module>::`.
//!
//! Three stay binaries of their own (see `Cargo.toml`): `live` and
//! `network`, which capture on veth pairs and run NATS clusters, and whose
//! timing should not compete with this binary's CPU-bound tests in one
//! process; and `loom`, which compiles the lock-free filter's source again
//! against loom's atomics (see its header).

mod common;

mod ahead;
mod bench;
mod capped;
mod class;
mod cli;
mod cli_property;
mod collector_beat;
mod corpora;
mod dissect;
mod filter;
mod flow_set;
mod hash;
mod ingest;
mod keyed;
mod link_info;
mod lookahead;
mod manifest;
mod memory;
mod model;
mod network_merge;
mod pages;
mod pipeline;
mod prefetch;
mod refill;
mod reliability;
mod report;
mod reproduce;
mod rotation;
mod schedule;
mod slots;
mod stage;
mod synth;
mod trace_filter;
mod truth;
