//! Page sizes, a hint that a large table's memory be backed by huge
//! pages, the region the exact per-flow tables are allocated in
//! ([`TableArena`]), and the switch that turns both off
//! ([`set_huge_pages`]).

use std::sync::atomic::{AtomicBool, Ordering};

mod table_arena;
pub use table_arena::{MIN_BLOCK, TableArena};

/// A vector in the exact tables' region ([`TableArena`]).
pub type TableVec<T> = allocator_api2::vec::Vec<T, TableArena>;

/// Whether flowsieve asks for huge pages ([`set_huge_pages`]).
static HUGE_PAGES: AtomicBool = AtomicBool::new(true);

/// Turns flowsieve's use of transparent huge pages on (`true`, the
/// default) or off (`false`) for the whole process: off, the exact tables
/// are allocated by the global allocator instead of in [`TableArena`]'s
/// region, and no table is advised as huge pages (the selective stage's
/// flow sets included), so every table is on the pages the system gives
/// any allocation. Results are the same either way; only time and memory
/// differ (BENCHMARKS.md, thirty-ninth round).
///
/// Why a switch: on a virtual machine whose host takes back the guest's
/// free memory, a huge page's first touch can cost far more than the page
/// walks it saves ([`TableArena`]'s documentation has the figures), and
/// setting THP to `never` would change it for every program on the
/// machine. The command line's `--no-huge-pages` calls this before any
/// table is made. Changing it midway is safe: tables already made stay
/// where they are and are freed to where they came from.
///
/// ```
/// use allocator_api2::alloc::{Allocator, Layout};
/// use flowsieve::pages::{self, HUGE_PAGE, TableArena};
/// pages::set_huge_pages(false);
/// let layout = Layout::from_size_align(HUGE_PAGE, 8).unwrap();
/// let block = TableArena.allocate(layout).unwrap();
/// assert!(!TableArena::holds(block.cast::<u8>().as_ptr()));
/// // SAFETY (of the example): the block came from this allocator with this layout.
/// unsafe { TableArena.deallocate(block.cast(), layout) };
/// pages::set_huge_pages(true);
/// assert!(pages::huge_pages());
/// ```
pub fn set_huge_pages(enabled: bool) {
    HUGE_PAGES.store(enabled, Ordering::Relaxed);
}

/// Whether flowsieve asks for huge pages ([`set_huge_pages`]).
pub fn huge_pages() -> bool {
    HUGE_PAGES.load(Ordering::Relaxed)
}

/// The process's anonymous memory in transparent huge pages, in bytes:
/// `AnonHugePages` of `/proc/self/smaps_rollup` (Linux 4.14). `None` on
/// other systems, or when the file cannot be read or lacks the field.
///
/// Why a run reports it: whether the kernel gave huge pages (THP `never`,
/// `--no-huge-pages`, a fragmented machine) moves the default job's time
/// by several per cent, and two runs' timings are only comparable when
/// this is known.
///
/// ```
/// let bytes = flowsieve::pages::anon_huge_page_bytes();
/// if cfg!(target_os = "linux") {
///     // smaps_rollup counts in kB, and huge pages are whole 2 MiB pages.
///     assert_eq!(bytes.map(|b| b % (2 << 20)), Some(0));
/// }
/// ```
pub fn anon_huge_page_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    kb_field(&text, "AnonHugePages").map(|kb| kb.saturating_mul(1024))
}

/// The value of a `Name:   value kB` line of a `/proc` file's `text`, in
/// kB; `None` when no line has that name or its value is not a count of kB.
///
/// ```
/// let text = "Rss:                3324 kB\nAnonHugePages:      2048 kB\n";
/// assert_eq!(flowsieve::pages::kb_field(text, "AnonHugePages"), Some(2048));
/// assert_eq!(flowsieve::pages::kb_field(text, "Anon"), None);
/// assert_eq!(flowsieve::pages::kb_field("Rss: many kB", "Rss"), None);
/// ```
pub fn kb_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (n, rest) = line.split_once(':')?;
        (n == name).then(|| kb_value(rest)).flatten()
    })
}

/// `  3324 kB` (what follows a field's colon) as 3324.
pub(crate) fn kb_value(rest: &str) -> Option<u64> {
    rest.trim()
        .strip_suffix("kB")
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// The size of a transparent huge page on x86_64 Linux.
pub const HUGE_PAGE: usize = 2 << 20;

/// The system's base page size, if it reports a power of two.
pub(crate) fn page_size() -> Option<usize> {
    // SAFETY: sysconf takes no pointers; it only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).ok().filter(|p| p.is_power_of_two())
}

/// Asks the kernel to back the whole huge pages inside `bytes` bytes from
/// `start` with transparent huge pages (`MADV_HUGEPAGE`), where the system
/// leaves that to the program (`/sys/kernel/mm/transparent_hugepage/enabled`
/// set to `madvise`, the common default). Changes no byte; a kernel or
/// system that declines leaves 4 KiB pages, as without the call. A range
/// without a whole aligned huge page inside is left alone, and so is every
/// range once huge pages are turned off ([`set_huge_pages`]).
///
/// Why: a table looked up at a random slot a packet (the selective stage's
/// flow sets, [`crate::pipeline::FlowSet`]) past a few MiB also misses the
/// TLB on each lookup, whose 4 KiB entries cover only a few MiB; a page
/// walk then comes before the cache miss, and a software prefetch waits on
/// it as well. With 2 MiB pages one TLB entry covers what 512 did. Only an
/// allocation of more than a huge page can hold one, which is why the
/// exact per-flow tables, each smaller than that on a run of 100 k flows
/// over 8 shards, are packed into a region of their own instead
/// ([`TableArena`]).
fn advise_huge(start: *const u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    if huge_pages() {
        let begin = (start as usize).next_multiple_of(HUGE_PAGE);
        let end = (start as usize).saturating_add(bytes) / HUGE_PAGE * HUGE_PAGE;
        if end <= begin {
            return;
        }
        // SAFETY: `begin..end` lies inside the caller's allocation of
        // `bytes` bytes from `start`, rounded inwards to whole huge pages.
        // MADV_HUGEPAGE only sets a flag on the mapping that says how to
        // back it; it reads and writes no byte of it, and a failure (an
        // old kernel, THP disabled) changes nothing.
        let _ =
            unsafe { libc::madvise(begin as *mut libc::c_void, end - begin, libc::MADV_HUGEPAGE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, bytes);
}

/// A vector of `n` values made by `make`, in memory advised as huge pages
/// ([`advise_huge`]) before it is filled: the kernel picks a page's size
/// when the page is first touched, so the advice has to come first.
pub(crate) fn huge_vec<T>(n: usize, make: impl FnMut() -> T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    let spare = v.spare_capacity_mut();
    advise_huge(spare.as_ptr().cast::<u8>(), std::mem::size_of_val(spare));
    v.extend(std::iter::repeat_with(make).take(n));
    v
}

/// A vector of `n` values made by `make`, in the exact tables' region
/// ([`TableArena`]).
pub(crate) fn table_vec<T>(n: usize, make: impl FnMut() -> T) -> TableVec<T> {
    let mut v = TableVec::with_capacity_in(n, TableArena);
    v.extend(std::iter::repeat_with(make).take(n));
    v
}
