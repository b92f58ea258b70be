//! The benchmark trace shared by the benches: 1.5 M packets of 64–200-byte
//! frames over 100 k Zipf(1.1) flows, seed 42 (the same file as
//! `flowsieve gen-trace --flows 100000 --packets 1500000 --sizes 64-200
//! --seed 42`). Generated once into `target/bench-traces/` and brought
//! into the page cache before any timing. Shared by `#[path]`.
//!
//! How the trace sits in the page cache is part of what a bench measures.
//! A file just written (the generator here, `cp`, `tcpdump -w`) is cached
//! in 4 KiB pages; the same file read back from disk is cached, on a
//! recent kernel and filesystem, mostly in large folios that a map gets as
//! 2 MiB entries, and a mapped walk over it then takes no TLB walk per
//! 4 KiB (`flowsieve::ingest::page_cache`). A user replays traces read
//! from disk, so [`trace`] leaves the file in that state: it drops the
//! file's cached pages and reads it back. [`trace_just_written`] is a fresh
//! copy in 4 KiB pages, for the side-by-side rows of the other state.

use flowsieve::ingest::page_cache_state;
use flowsieve::synth::{OutputFormat, SizeModel, SynthConfig, generate};
use std::path::{Path, PathBuf};

/// Packets in the benchmark trace.
pub const PACKETS: u64 = 1_500_000;

/// `target/bench-traces/`, created on first use.
pub fn bench_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-traces");
    std::fs::create_dir_all(&d).expect("bench-traces folder");
    d
}

/// The benchmark trace, generated on first use, cached as a trace read
/// from disk is (see the module's comment).
pub fn trace() -> PathBuf {
    trace_as(OutputFormat::Pcap, "bench-1500k-64-200.pcap")
}

/// The benchmark trace's packets in `format`, in `target/bench-traces/`
/// under `name`, generated on first use and cached as [`trace`] is.
pub fn trace_as(format: OutputFormat, name: &str) -> PathBuf {
    let path = bench_dir().join(name);
    if !path.exists() {
        let cfg = SynthConfig {
            flows: 100_000,
            packets: PACKETS,
            sizes: SizeModel::Uniform { min: 64, max: 200 },
            seed: 42,
            format,
            ..SynthConfig::default()
        };
        let tmp = path.with_extension("tmp");
        let f = std::io::BufWriter::new(std::fs::File::create(&tmp).expect("create"));
        generate(&cfg, f).expect("generate");
        std::fs::rename(&tmp, &path).expect("rename");
    }
    evict(&path);
    // Read back from disk into the page cache.
    let _ = std::fs::read(&path);
    report_state(&path);
    path
}

/// A copy of the trace at `of` (from [`trace`]) written afresh, so cached
/// in 4 KiB pages.
#[allow(dead_code)] // Not every bench that shares this file uses it.
pub fn trace_just_written(of: &Path) -> PathBuf {
    let path = bench_dir().join("bench-1500k-64-200.just-written.pcap");
    let _ = std::fs::remove_file(&path);
    // Written 64 KiB at a time, as `cp` and `tcpdump -w` write: the
    // kernel caches such writes in 4 KiB pages, where one write of the
    // whole file was given large folios.
    let bytes = std::fs::read(of).expect("read the trace");
    let mut f = std::fs::File::create(&path).expect("create the copy");
    for chunk in bytes.chunks(64 << 10) {
        std::io::Write::write_all(&mut f, chunk).expect("write the copy");
    }
    report_state(&path);
    path
}

/// Drops `path`'s clean cached pages.
fn evict(path: &Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).expect("open the trace");
    // SAFETY: `f` is an open descriptor for the whole call; the advice
    // only drops clean cached pages of the file and touches no memory of
    // this process.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        eprintln!(
            "{}: posix_fadvise failed ({rc}); the trace stays as it was cached",
            path.display()
        );
    }
}

/// Says on stderr how the file sits in the page cache, beside the figures.
fn report_state(path: &Path) {
    match page_cache_state(path) {
        Ok(s) => eprintln!(
            "{}: {:.1} MiB cached, {:.1} MiB of it in 2 MiB mappings",
            path.display(),
            s.cached_bytes as f64 / f64::from(1 << 20),
            s.huge_mapped_bytes as f64 / f64::from(1 << 20)
        ),
        Err(e) => eprintln!("{}: page-cache state unknown ({e})", path.display()),
    }
}
