//! A cache prefetch hint, shared by the sources (the next bytes of a mapped
//! trace) and the filters (the counters of a record a few places ahead).

/// The bytes of a cache line on the machines flowsieve is built for.
pub(crate) const CACHE_LINE: usize = 64;

/// Hints the CPU to bring the cache line holding `p` into L1. It never
/// faults, even for an address outside any allocation (the pointer is only
/// formed with `wrapping_add`, never dereferenced).
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` only hints the cache; it reads no memory
    // architecturally and cannot fault, whatever the address, and SSE is
    // part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
