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

/// Hints the CPU to bring the cache line holding `p` into L2 (and the
/// caches beyond it) but not into L1 (`prefetcht1`). Never faults, like
/// [`prefetch`].
///
/// For a stage that fetches many lines a record several records ahead: an
/// L1 prefetch holds one of the core's few L1 miss buffers until its line
/// arrives, so the lead such prefetches can take is bounded by those
/// buffers, and lines brought into L1 early are evicted before use. Into
/// L2, more lines can be on their way at once, and the load a few records
/// later costs an L2 hit instead of a trip to memory (the heavy stage's
/// counters; BENCHMARKS.md, forty-eighth round).
#[inline(always)]
pub(crate) fn prefetch_to_l2(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as for `prefetch`: a hint only, which reads no memory
    // architecturally and cannot fault, and SSE is x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T1);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Whether the processor implements `prefetchw` (CPUID leaf 0x8000_0001,
/// ECX bit 8: "3DNowPrefetch" on AMD, "PRFCHW" on Intel since Broadwell).
/// [`prefetch_write`] runs only where this holds: the manuals promise
/// nothing for a processor without the feature.
pub(crate) fn write_prefetch_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // SAFETY: CPUID exists on every x86_64 processor, and a leaf above
        // the highest one the processor reports (checked first) is never
        // read. (The call is safe from Rust 1.87 on, hence the allow.)
        #[allow(unused_unsafe)]
        unsafe {
            __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Hints the CPU to bring the cache line holding `p` into L1 for writing
/// (`prefetchw`), so that a store to it need not wait for the line to be
/// taken from another core's cache. Never faults, like [`prefetch`]. Call
/// it only where [`write_prefetch_supported`] said so.
#[inline(always)]
pub(crate) fn prefetch_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetchw` only hints the cache; it reads or writes no
    // memory architecturally and cannot fault, whatever the address. The
    // caller has checked that the processor implements it.
    unsafe {
        std::arch::asm!("prefetchw [{}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`prefetch_write`] of the slot `index` of `buffer`, within its length,
/// its capacity or past both (the hint never faults). For a batch buffer
/// written slot by slot, a few slots ahead of the one written.
#[inline(always)]
pub(crate) fn prefetch_write_slot<T>(buffer: &[T], index: usize) {
    prefetch_write(buffer.as_ptr().wrapping_add(index).cast());
}

#[doc(hidden)]
pub mod testing {
    //! The processor check alone, for `tests/prefetch.rs`, which compares
    //! it with the kernel's reading of the same CPUID bit. Not an
    //! interface.

    /// `super::write_prefetch_supported`.
    pub fn write_prefetch_supported() -> bool {
        super::write_prefetch_supported()
    }
}
