//! Memory-mapped trace files that another process may truncate while they
//! are read.
//!
//! Why this exists: lending packets straight from a map saves the kernel's
//! copy of every page into a buffer: about 5 % of the default job's CPU
//! time on the benchmark trace, and 13 % of the wall time of all stages
//! with truth off (BENCHMARKS.md, thirteenth round). But a page of a
//! mapped file that lies wholly past the file's end raises SIGBUS when it
//! is touched, and the default action of SIGBUS kills the process. So a
//! trace truncated under a plain map (a rotating capture, a user's
//! `truncate`) crashed the run, where a read through a buffer ends in a
//! one-line error.
//!
//! This module makes the map as safe as the buffer. A process-wide SIGBUS
//! handler knows the address ranges of the guarded maps (a fixed registry
//! of [`SLOTS`] slots, lock-free, so the handler reads it without a lock).
//! A fault inside a guarded map is answered by mapping zero pages over the
//! rest of that map (`mmap` with `MAP_FIXED`), noting the fault's offset in
//! the map's slot and returning: the faulting load then reads zeros instead
//! of killing the process. The reader checks the slot before it lends each
//! packet and, seeing a fault, asks the file for its size: a file that
//! shrank is read up to its new end and then reported as it is when read
//! through a buffer (the same [`super::IngestError::Shrunk`] or cut-record
//! error); a file that did not shrink had an I/O error, reported with the
//! offset. A fault anywhere else goes to the handler that was installed
//! before (Rust's stack-overflow handler, or the default action), exactly
//! as if this one did not exist.
//!
//! To be told of a cut before it lends the bytes past it, the reader makes
//! the map's pages resident up to [`TOUCH_AHEAD`] bytes ahead of its cursor
//! ([`GuardedMap::touch`]), a step of [`POPULATE_STEP`] at a time with
//! `MADV_POPULATE_READ`, which answers `EFAULT` for a page past a new end
//! (noted as a fault, with no signal), or page by page where the kernel
//! lacks it (the page past the new end then faults): either way the cut is
//! seen while the cursor is still before the new end. Before lending a
//! record the reader also makes resident the pages past its end, because a
//! cut inside a record's last page faults nowhere in that page: the kernel
//! reads the page's tail past the new end as zeros.
//!
//! What remains are races no reader of a changing file can close:
//! - a cut that lands between the check and the consumer's reading of a
//!   packet already lent makes that packet read zeros, and the next call
//!   reports the shrink;
//! - a cut behind pages already made resident is seen when the reader
//!   first reads a page wholly past the new end; the tail of the page
//!   holding the new end reads as zeros without a fault, so up to a page
//!   of zeros may be framed first (as damaged or empty records, counted
//!   by reason like any other).
//!
//! A buffered read has the same kind of race: in the second case it lends
//! the old bytes it had already copied, and a file rewritten in place
//! gives it a mix of old and new bytes.
//!
//! When no slot is free, or the handler cannot be installed, mapping fails
//! with an error and the caller reads the file through a buffer instead.

use memmap2::Mmap;
use std::fs::File;
use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, compiler_fence};

/// Guarded maps that can be open at once in one process. A replay holds one
/// per file it reads, and reads its files one after another; a caller with
/// more open at once gets buffered reads for the rest.
pub(crate) const SLOTS: usize = 64;

/// How far ahead of its cursor a reader touches the map, in bytes. It must
/// be more than a page, so that the fault of the first page past a new end
/// comes while the cursor is still before that end, and it is kept above
/// the records of ordinary captures, so that the reader's fast path lends a
/// record whose every page has been touched. The pages are touched once
/// each, so the distance costs nothing per packet; 512 KiB of page-table
/// entries ahead is nothing beside the trace.
pub(crate) const TOUCH_AHEAD: usize = 512 << 10;

/// How much of the map one `MADV_POPULATE_READ` call maps in, from the
/// touch frontier on: 1 MiB is 256 pages, where reading the pages would
/// take about 16 faults of 64 KiB fault-around each.
const POPULATE_STEP: usize = 1 << 20;

/// Set once `MADV_POPULATE_READ` was refused (a kernel before 5.14):
/// every later touch reads the pages instead.
static POPULATE_UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// The step of the touches: every page is touched on any page size that is
/// a multiple of it (4 KiB, 16 KiB, 64 KiB).
const TOUCH_STEP: usize = 4096;

/// No fault seen in a slot.
pub(crate) const NO_FAULT: usize = usize::MAX;

/// One guarded map's address range, and the offset of its first fault.
struct Slot {
    taken: AtomicBool,
    /// First byte of the map; 0 while the slot holds no map.
    start: AtomicUsize,
    /// One past the map's last page.
    end: AtomicUsize,
    fault: AtomicUsize,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            taken: AtomicBool::new(false),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            fault: AtomicUsize::new(NO_FAULT),
        }
    }
}

static REGISTRY: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

/// The SIGBUS action before ours: its handler address and flags, for
/// passing on the faults that are not ours.
static PREVIOUS_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREVIOUS_FLAGS: AtomicUsize = AtomicUsize::new(0);
static PAGE: AtomicUsize = AtomicUsize::new(TOUCH_STEP);

/// Installs the handler once per process; false if it could not be.
fn install() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        match crate::pages::page_size() {
            Some(p) if p >= TOUCH_STEP => PAGE.store(p, Ordering::SeqCst),
            _ => return false,
        }
        // SAFETY: both sigaction structures are fully initialised (zeroed
        // is a valid value for each field, then the fields that matter are
        // set), and the handler is an `extern "C"` function of the
        // SA_SIGINFO signature that stays valid for the process's life.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                return false;
            }
            // The previous action is stored before ours is installed, so
            // the handler never sees it unset.
            PREVIOUS_HANDLER.store(old.sa_sigaction, Ordering::SeqCst);
            PREVIOUS_FLAGS.store(old.sa_flags as usize, Ordering::SeqCst);
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigbus as *const () as usize;
            // SA_ONSTACK: on a thread with an alternate signal stack (Rust
            // gives each one for its stack-overflow report), the handler
            // runs there, so that a fault on a full stack still reaches the
            // previous handler.
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut()) == 0
        }
    })
}

/// The SIGBUS handler. It only reads atomics and calls `mmap` and
/// `sigaction`, system calls that are safe in a signal handler on Linux.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler;
    // `si_addr` is the faulting address for a fault (si_code > 0), and a
    // SIGBUS sent by a process (si_code <= 0) is never treated as ours.
    let addr = unsafe {
        match info.as_ref() {
            Some(i) if i.si_code > 0 => i.si_addr() as usize,
            _ => 0,
        }
    };
    if addr != 0 && zero_fill_guarded(addr) {
        return;
    }
    // SAFETY: passes the signal on as the kernel would have delivered it
    // had ours not been installed.
    unsafe { pass_on(sig, info, ctx) }
}

/// Maps zero pages over the rest of the guarded map holding `addr`, from
/// its page on, and notes the fault; false when no guarded map holds it or
/// the zero pages could not be mapped.
fn zero_fill_guarded(addr: usize) -> bool {
    let page = PAGE.load(Ordering::Relaxed);
    for slot in &REGISTRY {
        let start = slot.start.load(Ordering::Acquire);
        let end = slot.end.load(Ordering::Acquire);
        if start == 0 || addr < start || addr >= end {
            continue;
        }
        let from = addr & !(page - 1);
        // SAFETY: `from..end` lies inside the map this slot registered
        // (page-aligned: the map starts on a page and `end` is its last
        // page's end), which its owner keeps mapped until it clears the
        // slot. Replacing those pages with private zero pages changes what
        // the map's reader sees from there on, which is what the reader
        // expects once the slot notes a fault; memmap2's unmap of the whole
        // range on drop removes the zero pages too.
        let p = unsafe {
            libc::mmap(
                from as *mut libc::c_void,
                end - from,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return false;
        }
        let _ = slot.fault.compare_exchange(
            NO_FAULT,
            addr - start,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        return true;
    }
    false
}

/// Hands a SIGBUS that is not ours to the action installed before ours.
///
/// # Safety
/// Called from the SIGBUS handler with the arguments it was given.
unsafe fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let handler = PREVIOUS_HANDLER.load(Ordering::Relaxed);
    let flags = PREVIOUS_FLAGS.load(Ordering::Relaxed) as libc::c_int;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Put the default action back and return: a fault runs its load
        // again, which now kills the process with SIGBUS as it would have
        // without this handler. A SIGBUS sent by a process is raised again
        // (it is blocked until the handler returns).
        // SAFETY: a zeroed sigaction with SIG_DFL is a valid action.
        unsafe {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
            if handler == libc::SIG_DFL && info.as_ref().is_none_or(|i| i.si_code <= 0) {
                libc::raise(libc::SIGBUS);
            }
        }
    } else if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: with SA_SIGINFO the stored address is a handler of this
        // signature, installed by whoever set it.
        unsafe {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(handler);
            f(sig, info, ctx);
        }
    } else {
        // SAFETY: without SA_SIGINFO the stored address is a handler taking
        // the signal number alone.
        unsafe {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            f(sig);
        }
    }
}

/// A read-only map of a whole file, registered with the SIGBUS handler so
/// that a truncation of the file reads as zeros and is noted, instead of
/// killing the process.
pub(crate) struct GuardedMap {
    map: Mmap,
    slot: &'static Slot,
    file: File,
    /// The bytes lent: the file's size when mapped, less after a cut.
    len: usize,
}

impl GuardedMap {
    /// Maps `file` (a regular file, not empty) and registers the map. An
    /// error when the file cannot be mapped, the handler cannot be
    /// installed or every slot is taken: the caller reads the file through
    /// a buffer instead.
    pub(crate) fn map(file: &File) -> io::Result<GuardedMap> {
        if !install() {
            return Err(io::Error::other(
                "the SIGBUS handler could not be installed",
            ));
        }
        // SAFETY: a private read-only map. A truncation of the file raises
        // SIGBUS on the pages past its end, which the handler above turns
        // into zero pages once the map is registered below, before any of
        // its bytes are read. A rewrite in place changes the bytes under
        // the reader's slices, as memmap2 warns; every parse of them is
        // bounds-checked, so what the reader then sees is damaged records,
        // reported as such, as a buffered read of a rewritten file gives.
        let map = unsafe { Mmap::map(file) }?;
        // Its own descriptor, for asking the size after a fault.
        let file = file.try_clone()?;
        let page = PAGE.load(Ordering::Relaxed);
        let start = map.as_ptr() as usize;
        let end = start + map.len().div_ceil(page) * page;
        let Some(slot) = REGISTRY.iter().find(|s| {
            s.taken
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }) else {
            return Err(io::Error::other("every guarded map slot is taken"));
        };
        slot.fault.store(NO_FAULT, Ordering::Relaxed);
        slot.end.store(end, Ordering::Release);
        slot.start.store(start, Ordering::Release);
        let len = map.len();
        Ok(GuardedMap {
            map,
            slot,
            file,
            len,
        })
    }

    /// The bytes lent.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        self.map.get(..self.len).unwrap_or(&[])
    }

    /// The map, for page advice.
    pub(crate) fn mmap(&self) -> &Mmap {
        &self.map
    }

    /// Makes the pages from `from` (a multiple of 4 KiB, or the map's
    /// length) up to at least `to` resident, so that a page past a new end
    /// of the file is noted now; returns where the next touch starts.
    #[inline(never)]
    pub(crate) fn touch(&self, from: usize, to: usize) -> usize {
        let bytes = self.bytes();
        let to = to.min(bytes.len());
        if from >= to {
            return from;
        }
        // First choice: have the kernel map a whole step of pages in one
        // call (`MADV_POPULATE_READ`, Linux 5.14) instead of taking one
        // page fault per 64 KiB of fault-around.
        let upto = (from + POPULATE_STEP).max(to).min(bytes.len());
        if !POPULATE_UNSUPPORTED.load(Ordering::Relaxed) {
            return self.populate(from, upto).unwrap_or_else(|| {
                POPULATE_UNSUPPORTED.store(true, Ordering::Relaxed);
                self.touch_pages(from, to)
            });
        }
        self.touch_pages(from, to)
    }

    /// Maps `from..upto` in with `MADV_POPULATE_READ`; `Some(upto)` when
    /// done or when a page past a new end was met (noted as a fault),
    /// `None` when the kernel does not do it.
    fn populate(&self, from: usize, upto: usize) -> Option<usize> {
        let bytes = self.bytes();
        // SAFETY: `from..upto` lies inside the map (`from` is a multiple of
        // 4 KiB from its page-aligned start; the kernel rounds the length
        // up to the page, still inside the map's last page). POPULATE_READ
        // only maps the pages in and changes no byte.
        let populated = unsafe {
            libc::madvise(
                bytes.as_ptr().add(from) as *mut libc::c_void,
                upto - from,
                libc::MADV_POPULATE_READ,
            )
        };
        if populated == 0 {
            return Some(upto);
        }
        if io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT) {
            // What a touch would have raised SIGBUS for (a page past a new
            // end of the file, or one that cannot be read): noted as the
            // handler notes a fault, with no signal.
            let _ = self.slot.fault.compare_exchange(
                NO_FAULT,
                from,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            return Some(upto);
        }
        // Any other answer (an older kernel's EINVAL, a page size the
        // steps do not align to): the process touches page by page from
        // then on, instead of asking again at every touch.
        None
    }

    /// Reads one byte of every page from `from` up to `to`, so that a page
    /// past a new end of the file faults now; where the next touch starts.
    fn touch_pages(&self, from: usize, to: usize) -> usize {
        let bytes = self.bytes();
        let mut at = from;
        while at < to {
            // SAFETY: `at < bytes.len()`, so the read stays in the map.
            // Volatile, so that the load is not dropped for its unused
            // value: its only purpose is the fault.
            unsafe { std::ptr::read_volatile(bytes.as_ptr().add(at)) };
            at += TOUCH_STEP;
        }
        at.max(from)
    }

    /// The map's fault note: [`NO_FAULT`] until a fault inside the map,
    /// then the fault's offset, until [`GuardedMap::take_fault`].
    pub(crate) fn fault_note(&self) -> &'static AtomicUsize {
        &self.slot.fault
    }

    /// The offset of the fault noted, clearing it.
    pub(crate) fn take_fault(&self) -> Option<usize> {
        compiler_fence(Ordering::SeqCst);
        if self.slot.fault.load(Ordering::Relaxed) == NO_FAULT {
            return None;
        }
        match self.slot.fault.swap(NO_FAULT, Ordering::AcqRel) {
            NO_FAULT => None,
            at => Some(at),
        }
    }

    /// The file's size now.
    pub(crate) fn file_len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// Lends no byte from `len` on.
    pub(crate) fn cut(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl Drop for GuardedMap {
    fn drop(&mut self) {
        // The range leaves the registry before `map` is unmapped (fields
        // drop after this body), so the handler never zero-fills an address
        // range that something else may map next.
        self.slot.start.store(0, Ordering::Release);
        self.slot.end.store(0, Ordering::Release);
        self.slot.fault.store(NO_FAULT, Ordering::Relaxed);
        self.slot.taken.store(false, Ordering::Release);
    }
}
