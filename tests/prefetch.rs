//! The processor check that gates `prefetchw` (`src/prefetch.rs`).

use flowsieve::prefetch_testing::write_prefetch_supported;

/// The check reads CPUID leaf 0x8000_0001, ECX bit 8, which Linux names
/// `3dnowprefetch` in /proc/cpuinfo. The two must agree: a check that said
/// yes on a processor without the instruction would execute an opcode the
/// manuals promise nothing for, and one that said no would silently lose
/// the batch slots' write-ahead (BENCHMARKS.md, forty-seventh round).
#[test]
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn the_write_prefetch_check_agrees_with_the_kernel() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("/proc/cpuinfo is readable");
    let flags = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .expect("/proc/cpuinfo has a flags line");
    let kernel = flags
        .split_once(':')
        .map(|(_, f)| f.split_whitespace().any(|f| f == "3dnowprefetch"))
        .unwrap_or(false);
    assert_eq!(write_prefetch_supported(), kernel, "{flags}");
}
