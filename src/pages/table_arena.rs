//! Memory for the exact per-flow tables: one region of the address space,
//! backed by transparent huge pages, shared by every table of the process.
//!
//! Why this exists. With ground truth on, each shard keeps exact tables
//! that are looked up at a random place once a packet: the exact table's
//! entries and its index, the new-flow stage's last-seen times and the
//! heavy stage's window counts. On the
//! benchmark trace (100 k flows over 8 shards) each of the first three is
//! 0.5-2 MiB (24 tables, about 24 MiB), and each grows by doubling. From the
//! system allocator every one is a mapping of its own, on 4 KiB pages:
//! none of them holds a whole aligned 2 MiB page, so advising huge pages
//! ([`super::huge_vec`]) gave them nothing, every lookup risks a TLB miss,
//! and every page is faulted in one at a time (about 5 % of the default
//! job's samples were page faults on the workers, half of them in the
//! exact table's growth). Packed together in one region advised as huge
//! pages, the same tables sat on 18 huge pages at the end of the run,
//! faulted in 2 MiB at a time, and a block freed when a table doubles is
//! handed to the next table that needs one of its size, instead of being
//! unmapped and faulted in again. The run's page faults fell from 13.8 k
//! to 7.6 k, and the default job took 3-8 % less CPU on that trace (six
//! sittings, paired) and about 11 % less on a 2 M-flow one, whose faults
//! fell from 93 k to 9 k (BENCHMARKS.md, thirty-eighth round).
//!
//! The risk, seen on the 2-core test guest: a huge page is zeroed on its
//! first touch like any page, but on a virtual machine whose memory
//! balloon reports free pages to its host (virtio-balloon free page
//! reporting, in 2 MiB blocks), every free block of a huge page's size is
//! handed back a few seconds after it is freed, and the host drops its
//! backing. A huge page the host must back again took 4-5 ms to fault
//! in, against about 0.2 ms for one another process had freed just before,
//! and about 1.1 ms for the same memory in 4 KiB pages, which come from
//! blocks too small to be reported (`benches/first_touch.py --gap 3`). A
//! run that starts after a few quiet seconds, as a user's does, gets a
//! few quick ones and then slow ones: with huge pages always on, the
//! default job took 1.07 times the CPU of huge pages off on the benchmark
//! trace and 1.34 times on a 2 M-flow one, where back-to-back runs (a
//! benchmark loop) had them 6 % and 13 % ahead (BENCHMARKS.md,
//! thirty-ninth and forty-first rounds). So on such a machine
//! `--huge-pages auto`, the default, times the first touch of each fresh
//! huge page this region hands out (`time_first_touch`) and turns the
//! region off for the rest of the run at the first one over 1 ms
//! ([`super::apply_huge_page_choice`]); traces known to be shorter than
//! [`super::SHORT_RUN_BYTES`] run without the region from the start
//! ([`super::apply_huge_page_choice_for`]); `--huge-pages on` keeps it.
//! Where that matters for every program, THP set to `never` makes the
//! region's blocks 4 KiB pages again, and the gain goes with it (on the
//! benchmark trace 1.011 of the system allocator's CPU, where `madvise`
//! gave 0.971 in the same sitting).
//!
//! Why only these tables, and not every large allocation: a scratch
//! build that put every allocation of 64 KiB or more in such a region took
//! 16 % more CPU with the selective stage alone (glibc's own huge-page
//! heaps, which do the same, 20 %). The filters and the selective stage's
//! sets are allocated once, at their full size, and left to the kernel to
//! zero on first touch, so they have no growth for the region to save; the
//! exact tables grow by doubling, are filled as soon as they are made (the
//! index's slots are written empty; entries are appended), and are the
//! ones whose growth the profile showed.
//!
//! How. The region is reserved once, on first use, as 32 GiB of address
//! space with `MAP_NORESERVE` (no memory is committed until a page is
//! touched) and advised `MADV_HUGEPAGE`. A request of at least
//! [`MIN_BLOCK`] bytes gets a block of the next power of two, carved from
//! the region's unused end at an alignment of its size (at most 2 MiB), so
//! blocks of 2 MiB or more start on a huge page, and smaller ones share
//! them. A freed block goes on the free list of its size and is the first
//! one handed out for that size again; a freed block of a huge page or
//! more gives its memory back to the system first (`release`). A block
//! of a huge page or more that grows into a larger block has its pages
//! moved there (`mremap`) instead of copied, so its written half is
//! neither copied nor faulted in again (`move_pages`). Smaller
//! requests, and every request once the region cannot be reserved
//! (another system, a strict overcommit policy) or is used up, go to the
//! global allocator; the tables work the same either way. The region's
//! address space is never returned before the process ends.
//!
//! Turning it off. [`super::set_huge_pages`] with `false` sends every
//! later request to the global allocator, with no huge-page advice;
//! blocks already in the region stay valid and are still given back to
//! it, because a block is told apart by its address, not by the switch.
//! The command line's `--huge-pages off` does this before any table is
//! made, and so does `auto` on a host where a huge page's first touch is
//! slow (above).
//!
//! The free lists are behind a lock. That is not on a hot path: a table
//! takes a block only when it doubles past [`MIN_BLOCK`] (a shard's flow
//! table of 12.5 k flows: its entries 5 times, its index 4), so a run on
//! the benchmark trace takes about a hundred blocks in all, never one per
//! packet.
//!
//! ```
//! use allocator_api2::alloc::{Allocator, Layout};
//! use flowsieve::pages::TableArena;
//! let layout = Layout::from_size_align(100_000, 8).unwrap();
//! let block = TableArena.allocate_zeroed(layout).unwrap();
//! // SAFETY (of the example): the block is at least `layout.size()` bytes.
//! let bytes = unsafe { std::slice::from_raw_parts(block.cast::<u8>().as_ptr(), layout.size()) };
//! assert!(bytes.iter().all(|&b| b == 0));
//! // SAFETY (of the example): the block came from this allocator with this layout.
//! unsafe { TableArena.deallocate(block.cast(), layout) };
//! ```

use allocator_api2::alloc::{AllocError, Allocator, Global, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::HUGE_PAGE;

/// Requests smaller than this go to the global allocator: a table this
/// small stays in the caches, and a block of the region would only round
/// it up.
pub const MIN_BLOCK: usize = 64 << 10;

/// The address space reserved for the region. Reserving commits nothing;
/// a run that outgrows it (some hundred million flows with ground truth)
/// goes on in the global allocator.
const RESERVE: usize = 32 << 30;

/// One free list per power of two up to the size of the address space.
const CLASSES: usize = usize::BITS as usize;

/// The exact tables' allocator: a handle to the process's one region
/// (module documentation). It is a unit value, so a table that holds it
/// costs nothing, and any two handles are the same region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableArena;

impl TableArena {
    /// True when `ptr` points into the region: a block the region served,
    /// as opposed to one from the global allocator. False before the region
    /// was reserved and where it cannot be.
    pub fn holds(ptr: *const u8) -> bool {
        reserved().is_some_and(|r| r.holds(ptr as usize))
    }
}

/// The reserved region: its first byte (2 MiB-aligned); it is
/// [`RESERVE`] bytes long.
#[derive(Debug)]
struct Region {
    base: usize,
}

impl Region {
    /// True when `addr` lies inside the region.
    fn holds(&self, addr: usize) -> bool {
        addr.checked_sub(self.base).is_some_and(|off| off < RESERVE)
    }
}

/// The region once the first block was asked of it; `None` where
/// it cannot be reserved.
static REGION: OnceLock<Option<Region>> = OnceLock::new();

/// The region, reserved on first use; `None` where it cannot be.
fn region() -> Option<&'static Region> {
    REGION.get_or_init(reserve).as_ref()
}

/// The region if it was reserved already. Giving a block back asks this,
/// not [`region`], so that a process whose tables all stayed below
/// [`MIN_BLOCK`] never reserves it.
fn reserved() -> Option<&'static Region> {
    REGION.get().and_then(Option::as_ref)
}

/// The offset of the region's first byte never handed out.
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A freed block: its address, and whether its memory was given back to
/// the system (so that it reads as zeros).
#[derive(Clone, Copy, Debug)]
struct FreeBlock {
    addr: usize,
    zero: bool,
}

/// Freed blocks, by the base-2 logarithm of their size.
static FREE: [Mutex<Vec<FreeBlock>>; CLASSES] = [const { Mutex::new(Vec::new()) }; CLASSES];

/// Reserves the region: [`RESERVE`] bytes of address space plus room to
/// align the start to a huge page, advised as huge pages.
#[cfg(target_os = "linux")]
fn reserve() -> Option<Region> {
    let len = RESERVE + HUGE_PAGE;
    // SAFETY: an anonymous private mapping at an address the kernel picks;
    // it aliases no existing memory, and the result is checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let base = (p as usize).next_multiple_of(HUGE_PAGE);
    // SAFETY: `base..base + RESERVE` lies inside the mapping just made
    // (it starts less than one huge page in). MADV_HUGEPAGE only sets a
    // flag on the mapping; a kernel that declines leaves 4 KiB pages.
    let _ = unsafe { libc::madvise(base as *mut libc::c_void, RESERVE, libc::MADV_HUGEPAGE) };
    Some(Region { base })
}

#[cfg(not(target_os = "linux"))]
fn reserve() -> Option<Region> {
    None
}

/// Gives the memory of the freed block at `addr` (`block` bytes, whole
/// huge pages) back to the system, keeping its addresses for the next
/// block of its size; true when done, after which it reads as zeros.
///
/// Why blocks of a huge page or more: when every shard's table doubles,
/// the blocks they leave are rarely taken again (the tables grow past
/// them together), and kept they held a run's resident memory at about
/// twice its tables (the 2 M-flow trace: 420 MB before this region,
/// 510 MB with every freed block kept, BENCHMARKS.md). Smaller blocks
/// share huge pages with live ones, so releasing them would split those
/// pages; they are kept, and they are the ones tables of a few thousand
/// flows take again.
#[cfg(target_os = "linux")]
fn release(addr: usize, block: usize) -> bool {
    // SAFETY: `addr..addr + block` is a block of the region that its owner
    // has just given back, so no reference into it is alive; it is private
    // anonymous memory, which MADV_DONTNEED replaces by zero pages on the
    // next touch, leaving the mapping (and its huge-page advice) in place.
    unsafe { libc::madvise(addr as *mut libc::c_void, block, libc::MADV_DONTNEED) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn release(_addr: usize, _block: usize) -> bool {
    false
}

/// Moves the pages of the block at `from` (`block` bytes, whole huge
/// pages) to `to`, the first `block` bytes of a larger block of the
/// region, instead of copying them; true when done. The range at `from`
/// stays mapped and reads as zeros afterwards, like a released block.
///
/// Why: a table that doubles past a huge page (the exact table's entries
/// on a trace of millions of flows) would otherwise copy its contents into
/// a block whose every page is faulted in fresh, so that the pages a run
/// touches in all are about twice its final tables. Moving the page
/// tables costs neither a copy nor a fault for the half already written:
/// only the new half is faulted in, when it is filled. On a guest whose
/// host takes back free memory, a fresh huge page is the expensive part
/// (module documentation).
///
/// `MREMAP_DONTUNMAP` (Linux 5.7) is what keeps `from` mapped: without
/// it, the range would be a hole in the region that another thread's
/// `mmap` could take before it was mapped again. Where the kernel refuses
/// (an older kernel, the limit on mappings), the caller copies instead.
#[cfg(target_os = "linux")]
fn move_pages(from: usize, to: usize, block: usize) -> bool {
    // SAFETY: `from..from + block` is a live block of the region owned by
    // the caller, which gives it up with this call (no reference into it
    // is used afterwards), and `to..to + block` is the start of another
    // block of the region that the caller has just taken and not yet
    // handed on, so replacing its mapping (MREMAP_FIXED) destroys nothing
    // anyone holds.
    // Both are private anonymous memory, aligned to a huge page. The
    // result is checked.
    let moved = unsafe {
        libc::mremap(
            from as *mut libc::c_void,
            block,
            block,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP,
            to as *mut libc::c_void,
        )
    };
    moved as usize == to
}

#[cfg(not(target_os = "linux"))]
fn move_pages(_from: usize, _to: usize, _block: usize) -> bool {
    false
}

/// Counts the blocks whose pages [`move_pages`] moved, for the tests.
static MOVED: AtomicUsize = AtomicUsize::new(0);

impl TableArena {
    /// How many times a growing block's pages were moved instead of
    /// copied, since the process started ([`TableArena`]'s growth).
    pub fn moved_blocks() -> usize {
        MOVED.load(Ordering::Relaxed)
    }
}

/// The size of the block that serves `size` bytes, and its free list;
/// `None` below [`MIN_BLOCK`] or past the largest power of two.
fn block_for(size: usize) -> Option<(usize, usize)> {
    if size < MIN_BLOCK {
        return None;
    }
    let block = size.checked_next_power_of_two()?;
    Some((block, block.trailing_zeros() as usize))
}

/// A block of `block` bytes from the region, with its address and whether
/// it may hold earlier contents: a freed one of that size if there is one,
/// else a fresh one from the unused end.
fn take(region: &Region, block: usize, class: usize) -> Option<(usize, bool)> {
    let reused = FREE
        .get(class)
        .and_then(|free| free.lock().ok().and_then(|mut f| f.pop()));
    if let Some(b) = reused {
        return Some((b.addr, !b.zero));
    }
    let align = block.min(HUGE_PAGE);
    let mut next = NEXT.load(Ordering::Relaxed);
    loop {
        let start = next.checked_next_multiple_of(align)?;
        let end = start.checked_add(block).filter(|&e| e <= RESERVE)?;
        match NEXT.compare_exchange_weak(next, end, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                if start % HUGE_PAGE == 0 {
                    // SAFETY: the block starting at `start` was just given
                    // to this caller alone by the bump above, and is not yet
                    // handed on.
                    unsafe { time_first_touch(region.base + start) };
                }
                return Some((region.base + start, false));
            }
            Err(seen) => next = seen,
        }
    }
}

/// The first touch of a fresh huge page past which the region stops
/// serving, in nanoseconds of the thread's CPU time; 0 when fresh pages
/// are not timed ([`super::watch_fresh_huge_pages`]).
static SLOW_NS: AtomicU64 = AtomicU64::new(0);

/// Fresh huge pages timed below [`SLOW_NS`] so far.
static FAST_PAGES: AtomicUsize = AtomicUsize::new(0);

/// The first touch that passed [`SLOW_NS`], in nanoseconds; 0 while none
/// did.
static SLOW_SEEN_NS: AtomicU64 = AtomicU64::new(0);

/// Starts (`Some(ns)`) or stops (`None`) timing the first touch of each
/// fresh huge page the region hands out, and turning huge pages off for the
/// rest of the process at the first one slower than `ns`; the counts
/// start again from zero.
pub(super) fn watch_fresh_pages(slow_ns: Option<u64>) {
    FAST_PAGES.store(0, Ordering::Relaxed);
    SLOW_SEEN_NS.store(0, Ordering::Relaxed);
    SLOW_NS.store(slow_ns.map_or(0, |ns| ns.max(1)), Ordering::Relaxed);
}

/// What the watch saw: fresh huge pages below the bound, and the first
/// touch that passed it (nanoseconds), if one did.
pub(super) fn fresh_pages_seen() -> (usize, Option<u64>) {
    let slow = SLOW_SEEN_NS.load(Ordering::Relaxed);
    (
        FAST_PAGES.load(Ordering::Relaxed),
        (slow > 0).then_some(slow),
    )
}

/// Times the first touch of the fresh huge page at `page` while the watch
/// is on ([`watch_fresh_pages`]); the first one slower than the bound
/// turns huge pages off ([`super::set_huge_pages`]) and ends the watch.
///
/// Why here: the region is where a run's fresh huge pages come from, and
/// their cost is the question. On a guest whose balloon reports free
/// memory, a new process's first few huge pages are blocks no one
/// reported yet (0.2 ms each on the test guest), and after about two
/// quiet seconds the rest are blocks the host must back again (4-5
/// ms); just after another process freed its memory, all of them are
/// quick (`benches/first_touch.py`; BENCHMARKS.md, forty-first round). A
/// probe at start-up would see only the first kind. Timing the pages as
/// they come costs two clock reads a huge page, and the slow one that
/// ends it is paid once.
///
/// # Safety
///
/// `page` is the first byte of a fresh block of the region (never written,
/// so zero) that the caller alone holds.
unsafe fn time_first_touch(page: usize) {
    let slow = SLOW_NS.load(Ordering::Relaxed);
    if slow == 0 {
        return;
    }
    let before = super::thread_cpu_ns();
    // SAFETY: the caller's contract: `page` is the first byte of a block
    // only this caller holds; writing the zero it already holds changes
    // nothing but makes the kernel fault the page in now.
    unsafe { std::ptr::write_volatile(page as *mut u8, 0) };
    let after = super::thread_cpu_ns();
    let Some(took) = before.zip(after).map(|(b, a)| a.saturating_sub(b)) else {
        return;
    };
    if took <= slow {
        FAST_PAGES.fetch_add(1, Ordering::Relaxed);
    } else if SLOW_NS.swap(0, Ordering::Relaxed) != 0 {
        SLOW_SEEN_NS.store(took.max(1), Ordering::Relaxed);
        super::set_huge_pages(false);
    }
}

/// A block for `layout` from the region, and whether it may hold earlier
/// contents; `None` when the global allocator should serve it.
fn allocate_in_region(layout: Layout) -> Option<(NonNull<[u8]>, bool)> {
    if !super::huge_pages() {
        return None;
    }
    let (block, class) = block_for(layout.size())?;
    if layout.align() > block.min(HUGE_PAGE) {
        return None;
    }
    let region = region()?;
    let (addr, dirty) = take(region, block, class)?;
    let ptr = NonNull::new(addr as *mut u8)?;
    // The length handed out is the size asked for, not the block's: a
    // zeroed block then needs only those bytes zeroed, and every size a
    // caller may give back (between the two) rounds to this block.
    Some((NonNull::slice_from_raw_parts(ptr, layout.size()), dirty))
}

// SAFETY: every block handed out is `block` bytes of the reserved region
// (the slice returned is the `layout.size()` bytes asked for),
// readable and writable for the life of the process, aligned to
// `min(block, 2 MiB)`, which is at least the layout's alignment (checked),
// and owned by one caller at a time: a fresh block comes from a range the
// atomic bump of `NEXT` gives to one caller only, and a freed one from a
// locked free list, onto which only `deallocate` puts it, once its owner
// gave it back. Requests the region does not serve, and their
// deallocation, go to `Global`, told apart by address.
unsafe impl Allocator for TableArena {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        match allocate_in_region(layout) {
            Some((block, _)) => Ok(block),
            None => Global.allocate(layout),
        }
    }

    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        match allocate_in_region(layout) {
            Some((block, dirty)) => {
                if dirty {
                    // SAFETY: the block is at least `layout.size()` writable
                    // bytes, owned by this caller alone.
                    unsafe { block.cast::<u8>().as_ptr().write_bytes(0, layout.size()) };
                }
                // A fresh block was never written, and a released one was
                // given back to the system: either reads as zeros.
                Ok(block)
            }
            None => Global.allocate_zeroed(layout),
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        let addr = ptr.as_ptr() as usize;
        match reserved() {
            Some(region) if region.holds(addr) => {
                // A layout that fits the block rounds up to the block's size:
                // the block is the next power of two of the requested size,
                // and the size given back lies between the two.
                let Some((block, class)) = block_for(layout.size()) else {
                    return;
                };
                let zero = block >= HUGE_PAGE && release(addr, block);
                if let Some(Ok(mut free)) = FREE.get(class).map(Mutex::lock) {
                    free.push(FreeBlock { addr, zero });
                }
            }
            // SAFETY: a block outside the region came from `Global` with
            // this layout (the caller's contract).
            _ => unsafe { Global.deallocate(ptr, layout) },
        }
    }

    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's contract for `grow`, passed on.
        unsafe { resize(ptr, old, new, Resize::Grow) }
    }

    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's contract for `grow_zeroed`, passed on.
        unsafe { resize(ptr, old, new, Resize::GrowZeroed) }
    }

    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's contract for `shrink`, passed on.
        unsafe { resize(ptr, old, new, Resize::Shrink) }
    }
}

/// Which of the allocator's three resizing calls [`resize`] serves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resize {
    Grow,
    GrowZeroed,
    Shrink,
}

/// Grows or shrinks the block at `ptr` from `old` to `new`.
///
/// Why not the trait's default (a new block, a copy, the old one given
/// back): a block from the global allocator that stays there is resized by
/// `realloc`, which moves a large one by remapping its pages instead of
/// copying and faulting them in again. Without this, the tables on the
/// global allocator (`--huge-pages off`, or below [`MIN_BLOCK`]) made
/// 166 k page faults on a 2 M-flow trace, and 140 k with it
/// (BENCHMARKS.md, thirty-ninth round). A region block whose new size
/// still rounds to the same block is resized in place, and one of whole
/// huge pages that grows into another region block has its pages moved
/// ([`move_pages`]): on a 2 M-flow trace that took 0.959 of the CPU of
/// copying them (BENCHMARKS.md, fortieth round).
///
/// # Safety
///
/// The caller's contract for [`Allocator::grow`] (`Grow`, `GrowZeroed`) or
/// [`Allocator::shrink`] (`Shrink`): `ptr` is a live block of this
/// allocator for `old`, and `new.size()` is at least (grow) or at most
/// (shrink) `old.size()`.
unsafe fn resize(
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    how: Resize,
) -> Result<NonNull<[u8]>, AllocError> {
    let addr = ptr.as_ptr() as usize;
    let in_region = reserved().is_some_and(|r| r.holds(addr));
    if in_region {
        if let (Some((block, _)), Some((new_block, _))) =
            (block_for(old.size()), block_for(new.size()))
            && new_block == block
            && new.align() <= block.min(HUGE_PAGE)
        {
            if how == Resize::GrowZeroed {
                // SAFETY: `old.size()..new.size()` lies inside the block
                // (`new.size()` rounds up to `block`), which its caller owns.
                unsafe {
                    ptr.as_ptr()
                        .add(old.size())
                        .write_bytes(0, new.size() - old.size())
                };
            }
            return Ok(NonNull::slice_from_raw_parts(ptr, new.size()));
        }
    } else if how != Resize::Shrink {
        if let Some((block, dirty)) = allocate_in_region(new) {
            let to = block.cast::<u8>().as_ptr();
            // SAFETY: the old block holds `old.size()` bytes, the new one at
            // least `new.size()`, which is more; they do not overlap (one is
            // in the region, the other is not). The tail past `old.size()`
            // is inside the new block, owned by this caller.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr.as_ptr(), to, old.size());
                if how == Resize::GrowZeroed && dirty {
                    to.add(old.size()).write_bytes(0, new.size() - old.size());
                }
                Global.deallocate(ptr, old);
            }
            return Ok(block);
        }
        // SAFETY: the block came from `Global` for `old` (it is outside the
        // region), and the caller's contract covers the rest.
        return unsafe {
            match how {
                Resize::GrowZeroed => Global.grow_zeroed(ptr, old, new),
                _ => Global.grow(ptr, old, new),
            }
        };
    } else {
        // SAFETY: as above, for `shrink`.
        return unsafe { Global.shrink(ptr, old, new) };
    }
    // A region block that needs another: a new block from wherever
    // `allocate` sends it, and the old one given back. A block of whole
    // huge pages that grows into a region block keeps its pages: they are
    // moved there, not copied (`move_pages`); any other block, and any
    // block the kernel does not move, is copied. `grow_zeroed` is always
    // copied, which zeroes what it must; no table of this project grows
    // that way.
    let grown = match how {
        Resize::GrowZeroed => TableArena.allocate_zeroed(new)?,
        _ => TableArena.allocate(new)?,
    };
    let to = grown.cast::<u8>().as_ptr();
    // A region block larger than `block` (the same block returned above)
    // starts on a huge page, so its first `block` bytes can take the
    // old block's pages.
    if how == Resize::Grow
        && let Some((block, class)) = block_for(old.size())
        && block >= HUGE_PAGE
        && TableArena::holds(to)
        && move_pages(addr, to as usize, block)
    {
        MOVED.fetch_add(1, Ordering::Relaxed);
        // The old block's range is mapped and empty: a zero block.
        if let Some(Ok(mut free)) = FREE.get(class).map(Mutex::lock) {
            free.push(FreeBlock { addr, zero: true });
        }
        return Ok(grown);
    }
    // SAFETY: both blocks hold at least `min(old, new)` bytes and are
    // distinct live blocks (the old one is not given back until after the
    // copy); the old one was handed out for `old`.
    unsafe {
        std::ptr::copy_nonoverlapping(ptr.as_ptr(), to, old.size().min(new.size()));
        TableArena.deallocate(ptr, old);
    }
    Ok(grown)
}
