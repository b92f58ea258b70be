//! The benchmark trace shared by the benches: 1.5 M packets of 64–200-byte
//! frames over 100 k Zipf(1.1) flows, seed 42 (the same file as
//! `flowsieve gen-trace --flows 100000 --packets 1500000 --sizes 64-200
//! --seed 42`). Generated once into `target/bench-traces/` and read into
//! the page cache before any timing. Shared by `#[path]`.

use flowsieve::synth::{SizeModel, SynthConfig, generate};
use std::path::{Path, PathBuf};

/// Packets in the benchmark trace.
pub const PACKETS: u64 = 1_500_000;

/// `target/bench-traces/`, created on first use.
pub fn bench_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-traces");
    std::fs::create_dir_all(&d).expect("bench-traces folder");
    d
}

/// The benchmark trace, generated on first use.
pub fn trace() -> PathBuf {
    let path = bench_dir().join("bench-1500k-64-200.pcap");
    if !path.exists() {
        let cfg = SynthConfig {
            flows: 100_000,
            packets: PACKETS,
            sizes: SizeModel::Uniform { min: 64, max: 200 },
            seed: 42,
            ..SynthConfig::default()
        };
        let tmp = path.with_extension("tmp");
        let f = std::io::BufWriter::new(std::fs::File::create(&tmp).expect("create"));
        generate(&cfg, f).expect("generate");
        std::fs::rename(&tmp, &path).expect("rename");
    }
    // Into the page cache.
    let _ = std::fs::read(&path);
    path
}
