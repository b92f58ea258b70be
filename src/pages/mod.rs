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
/// machine. The command line calls it through [`apply_huge_page_choice`]
/// before any table is made. Changing it midway is safe (`auto` does):
/// tables already made stay where they are and are freed to where they
/// came from.
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

/// What a run asks for: the command line's `--huge-pages`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HugePageChoice {
    /// On; where the host takes back the guest's free memory
    /// ([`host_reclaims_free_pages`]), off from the first fresh huge page
    /// that is slow to fault in ([`apply_huge_page_choice`]), or from the
    /// start for traces known to be short ([`apply_huge_page_choice_for`]).
    /// The default.
    #[default]
    Auto,
    /// On whatever the machine.
    On,
    /// Off (`--huge-pages off`, or the older `--no-huge-pages`).
    Off,
}

/// What [`apply_huge_page_choice`] decided and why, and what the run saw
/// of fresh huge pages, for the report.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct HugePageDecision {
    /// What was asked; the run started with huge pages unless it was
    /// `Off`.
    pub choice: HugePageChoice,
    /// This guest's memory balloon reports its free pages to the host
    /// ([`host_reclaims_free_pages`]), so `auto` timed fresh huge pages;
    /// looked at only for `auto`.
    pub host_reclaims_free_pages: bool,
    /// Fresh huge pages that faulted in within [`SLOW_HUGE_PAGE_MS`],
    /// while they were timed.
    pub fast_huge_pages: usize,
    /// The first touch, in milliseconds of the thread's CPU time, of the
    /// fresh huge page that took longer and turned huge pages off for the
    /// rest of the run; `None` when none did.
    pub slow_huge_page_ms: Option<f64>,
    /// The run's traces' total size when `auto` left huge pages off from
    /// the start because it is under [`SHORT_RUN_BYTES`] on a host that
    /// takes back free memory; `None` otherwise (a longer run, a size not
    /// known before the run, another choice, another host).
    pub short_run_trace_bytes: Option<u64>,
}

impl HugePageDecision {
    /// What a run starts with, before any fresh huge page was timed: the
    /// choice, whether the host takes back the guest's free memory (only
    /// looked at for `auto`), and the run's traces' total size in bytes
    /// when it is known before the run (plain files; `None` for standard
    /// input, compressed traces and live capture). `auto` on such a host
    /// leaves huge pages off from the start for traces under
    /// [`SHORT_RUN_BYTES`]; [`apply_huge_page_choice_for`] says why.
    ///
    /// ```
    /// use flowsieve::pages::{HugePageChoice, HugePageDecision, SHORT_RUN_BYTES};
    /// let short = HugePageDecision::starting(HugePageChoice::Auto, true, Some(3 << 20));
    /// assert!(!short.starts_on() && !short.times_fresh_pages());
    /// assert_eq!(short.short_run_trace_bytes, Some(3 << 20));
    /// let long = HugePageDecision::starting(HugePageChoice::Auto, true, Some(SHORT_RUN_BYTES));
    /// assert!(long.starts_on() && long.times_fresh_pages());
    /// let unknown = HugePageDecision::starting(HugePageChoice::Auto, true, None);
    /// assert!(unknown.starts_on() && unknown.times_fresh_pages());
    /// // `on` is on whatever the size; elsewhere `auto` is plain on.
    /// assert!(HugePageDecision::starting(HugePageChoice::On, true, Some(1)).starts_on());
    /// let elsewhere = HugePageDecision::starting(HugePageChoice::Auto, false, Some(1));
    /// assert!(elsewhere.starts_on() && !elsewhere.times_fresh_pages());
    /// ```
    pub fn starting(
        choice: HugePageChoice,
        host_reclaims_free_pages: bool,
        trace_bytes: Option<u64>,
    ) -> HugePageDecision {
        let reclaims = choice == HugePageChoice::Auto && host_reclaims_free_pages;
        HugePageDecision {
            choice,
            host_reclaims_free_pages: reclaims,
            fast_huge_pages: 0,
            slow_huge_page_ms: None,
            short_run_trace_bytes: trace_bytes.filter(|&bytes| reclaims && bytes < SHORT_RUN_BYTES),
        }
    }

    /// Whether the run starts with huge pages on ([`set_huge_pages`]).
    pub fn starts_on(&self) -> bool {
        self.choice != HugePageChoice::Off && self.short_run_trace_bytes.is_none()
    }

    /// Whether the run times the first touch of each fresh huge page and
    /// turns huge pages off at the first slow one
    /// ([`watch_fresh_huge_pages`]).
    pub fn times_fresh_pages(&self) -> bool {
        self.host_reclaims_free_pages && self.starts_on()
    }
}

/// The traces' total size under which `auto`, on a host that takes back
/// the guest's free memory, runs without huge pages from the start
/// ([`apply_huge_page_choice_for`]): 128 MiB.
///
/// Why this size: such a run pays for at most one slow fresh huge page
/// before `auto` turns them off, 4.5-16 ms on the test guest. The most
/// huge pages saved over 4 KiB pages, back to back on the 222 MB
/// benchmark trace, was about 5 % of the default job's 265 ms of CPU,
/// some 0.06 ms a MB of trace; one slow page is worth 75-270 MB of that.
/// After a pause, as a user's single command starts, 4 KiB pages were
/// ahead at every size measured below this bound: the bundled 3 MB trace
/// 0.66 of the wall time, 20 MB 0.88, 60 MB 0.91 (BENCHMARKS.md,
/// eighty-first round).
pub const SHORT_RUN_BYTES: u64 = 128 << 20;

/// The first touch of a fresh huge page, in milliseconds, past which
/// `auto` takes the host to be backing huge pages again and turns them
/// off. Measured on the test guest: about 0.2 ms for a block the host still
/// backs, 4-5 ms for one it must back again
/// (`benches/first_touch.py --gap 3`); 1 ms lies well between.
pub const SLOW_HUGE_PAGE_MS: f64 = 1.0;

/// The decision the process runs with, as [`apply_huge_page_choice`] made
/// it; `None` before, when only [`set_huge_pages`] (or nothing) chose.
static DECISION: std::sync::OnceLock<HugePageDecision> = std::sync::OnceLock::new();

/// Decides whether the run asks for huge pages and switches them on or off
/// for the process ([`set_huge_pages`]); call it before any table is made.
/// `On` and `Off` are what they say. `Auto` is on; where the host takes
/// back the guest's free memory ([`host_reclaims_free_pages`]) it also
/// times the first touch of every fresh huge page the exact tables'
/// region hands out, and turns huge pages off for the rest of the run at
/// the first one slower than [`SLOW_HUGE_PAGE_MS`]. The first decision is
/// the one the report gives ([`huge_page_decision`]); a process makes it
/// once, from its command line.
///
/// Why `auto` watches the pages: on a virtual machine whose memory balloon
/// reports free pages (virtio-balloon's free page reporting, in 2 MiB
/// blocks on x86_64 Linux), the guest hands blocks of a huge page's size
/// back to the host a few seconds after they are freed, and the host
/// drops their backing. A huge page is such a block. A run that starts
/// just after another process freed its memory (a benchmark loop, a
/// script replaying traces one after another) gets blocks the host still
/// backs, about 0.2 ms each on the project's test guest; a run that starts
/// after a few quiet seconds, which is how a user runs one command, gets a
/// few of those and then blocks the host must back again, 4-5 ms each,
/// where the same memory in 4 KiB pages costs about 1.1 ms a 2 MiB either
/// way. Huge pages for every table, against none, gave the default job 6 %
/// less CPU on the 100 k-flow benchmark trace and 13 % less on a 2 M-flow
/// one in back-to-back runs, and 7 % and 34 % more with three quiet
/// seconds before each run; run between runs of the always-on build,
/// `auto` came within 3 % of the better of the two in all four. In a loop
/// of its own runs it does no better than off: each run that turned them
/// off frees small pages, not whole blocks, so the next meets reported
/// blocks early (on the 2 M-flow trace 1.06-1.13 s of CPU a run, against
/// 0.83-0.91 s for a loop of always-on runs). A script that replays
/// traces one after another on such a machine is faster with
/// `--huge-pages on`; a single command after a pause, with `auto`
/// (BENCHMARKS.md, forty-first round). Whether a block was reported shows
/// only when it is touched, so `auto` looks at each one as it comes.
///
/// ```
/// use flowsieve::pages::{self, HugePageChoice};
/// let d = pages::apply_huge_page_choice(HugePageChoice::Off);
/// assert!(d.choice == HugePageChoice::Off && !pages::huge_pages());
/// assert_eq!(pages::huge_page_decision().map(|d| d.choice), Some(HugePageChoice::Off));
/// ```
pub fn apply_huge_page_choice(choice: HugePageChoice) -> HugePageDecision {
    apply_huge_page_choice_for(choice, None)
}

/// [`apply_huge_page_choice`] for a run whose traces' total size is known
/// before the run (`trace_bytes`: plain files,
/// [`crate::ingest::plain_trace_bytes`]). The one difference: on a host
/// that takes back free memory, `auto` leaves huge pages off from the
/// start for traces under [`SHORT_RUN_BYTES`], and times no page.
///
/// Why: timing the pages turns them off only after the first slow one
/// has been paid for, and on a short run that one page costs more than
/// all the page walks huge pages could save ([`SHORT_RUN_BYTES`] has the
/// figures). The bundled trace's default job, the first command a user
/// runs, took 27 ms of wall time with the watch and 16 ms without huge
/// pages after a pause (medians of 12 paired rounds). A size known only
/// as the run goes (standard input, a compressed trace, a live capture)
/// keeps the watch.
///
/// ```
/// use flowsieve::pages::{self, HugePageChoice};
/// let d = pages::apply_huge_page_choice_for(HugePageChoice::Auto, Some(40_000));
/// assert_eq!(pages::huge_pages(), d.starts_on());
/// if pages::host_reclaims_free_pages() {
///     assert_eq!(d.short_run_trace_bytes, Some(40_000));
/// } else {
///     assert!(d.starts_on() && d.short_run_trace_bytes.is_none());
/// }
/// ```
pub fn apply_huge_page_choice_for(
    choice: HugePageChoice,
    trace_bytes: Option<u64>,
) -> HugePageDecision {
    let reclaims = choice == HugePageChoice::Auto && host_reclaims_free_pages();
    let decision = HugePageDecision::starting(choice, reclaims, trace_bytes);
    set_huge_pages(decision.starts_on());
    watch_fresh_huge_pages(decision.times_fresh_pages().then_some(SLOW_HUGE_PAGE_MS));
    let _ = DECISION.set(decision);
    decision
}

/// The decision [`apply_huge_page_choice`] made for this process, if it
/// was called, with what the watch of fresh huge pages has seen so far.
pub fn huge_page_decision() -> Option<HugePageDecision> {
    let mut d = DECISION.get().copied()?;
    if d.times_fresh_pages() {
        let (fast, slow_ns) = table_arena::fresh_pages_seen();
        d.fast_huge_pages = fast;
        d.slow_huge_page_ms = slow_ns.map(|ns| ns as f64 / 1e6);
    }
    Some(d)
}

/// Starts timing the first touch of each fresh huge page the exact
/// tables' region hands out (`Some(ms)`), turning huge pages off for the
/// rest of the process ([`set_huge_pages`]) at the first one slower than
/// `ms`, or stops (`None`). [`apply_huge_page_choice`] starts it for
/// `auto` where the host takes back free memory; a test may start it with
/// any bound. The counts start again from zero.
pub fn watch_fresh_huge_pages(slow_ms: Option<f64>) {
    table_arena::watch_fresh_pages(slow_ms.map(|ms| (ms.max(0.0) * 1e6) as u64));
}

/// Fresh huge pages the watch found quick so far, and the first touch (in
/// nanoseconds) of the one that turned huge pages off, if one did
/// ([`watch_fresh_huge_pages`]).
pub fn fresh_huge_pages_seen() -> (usize, Option<u64>) {
    table_arena::fresh_pages_seen()
}

/// The calling thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid timespec to write; the clock id is a
        // constant.
        let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
        let secs = u64::try_from(t.tv_sec).ok()?;
        let nanos = u64::try_from(t.tv_nsec).ok()?;
        ok.then(|| secs.saturating_mul(1_000_000_000).saturating_add(nanos))
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Where Linux lists the virtio memory balloons (one directory entry,
/// `virtio<N>`, a device).
const BALLOON_DRIVER: &str = "/sys/bus/virtio/drivers/virtio_balloon";

/// The virtio-balloon feature bit of free page reporting
/// (`VIRTIO_BALLOON_F_REPORTING`, virtio 1.2 section 5.5.3).
const BALLOON_F_REPORTING: usize = 5;

/// True when this machine is a virtual machine whose memory balloon
/// reports free pages to its host, so that a fresh huge page may have to
/// be backed by the host again on first touch
/// ([`apply_huge_page_choice`] says what that costs). False elsewhere,
/// and where `/sys` cannot be read.
pub fn host_reclaims_free_pages() -> bool {
    balloon_reports_free_pages(std::path::Path::new(BALLOON_DRIVER))
}

/// True when a device under `driver` (a `virtio_balloon` driver directory
/// of sysfs) negotiated free page reporting: its `features` file, one
/// `0` or `1` a feature bit from bit 0 on, has a `1` at
/// `BALLOON_F_REPORTING`. A directory that is missing or unreadable, or
/// a file that is malformed, counts as no.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("balloon-doc-{}", std::process::id()));
/// std::fs::create_dir_all(dir.join("virtio0")).unwrap();
/// std::fs::write(dir.join("virtio0/features"), "0110010100000000\n").unwrap();
/// assert!(flowsieve::pages::balloon_reports_free_pages(&dir));
/// std::fs::write(dir.join("virtio0/features"), "0110000100000000\n").unwrap();
/// assert!(!flowsieve::pages::balloon_reports_free_pages(&dir));
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn balloon_reports_free_pages(driver: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(driver) else {
        return false;
    };
    entries.flatten().any(|e| {
        e.file_name().to_string_lossy().starts_with("virtio")
            && std::fs::read_to_string(e.path().join("features"))
                .is_ok_and(|f| has_feature(&f, BALLOON_F_REPORTING))
    })
}

/// True when `features` (sysfs's string of `0`s and `1`s, bit 0 first)
/// is well formed and has bit `bit` set.
fn has_feature(features: &str, bit: usize) -> bool {
    let bits = features.trim_end();
    !bits.is_empty()
        && bits.bytes().all(|b| b == b'0' || b == b'1')
        && bits.as_bytes().get(bit) == Some(&b'1')
}

/// The process's anonymous memory in transparent huge pages, in bytes:
/// `AnonHugePages` of `/proc/self/smaps_rollup` (Linux 4.14). `None` on
/// other systems, or when the file cannot be read or lacks the field.
///
/// Why a run reports it: whether the kernel gave huge pages (THP `never`,
/// `--huge-pages`, a fragmented machine) moves the default job's time
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

/// The process's peak resident memory, in bytes: `VmHWM` of
/// `/proc/self/status`. `None` on other systems, or when the file cannot
/// be read or lacks the field.
///
/// Why this and not `getrusage`'s `ru_maxrss`: that figure survives
/// `exec`, so a process started by a large one (a test harness, a
/// supervisor) reports its parent's peak as its own; `VmHWM` belongs to
/// the address space this program runs in, and starts with it.
///
/// ```
/// let peak = flowsieve::pages::peak_resident_bytes();
/// if cfg!(target_os = "linux") {
///     // At least this process's code and stack are resident.
///     assert!(peak.is_some_and(|b| b > 0 && b % 1024 == 0));
/// }
/// ```
pub fn peak_resident_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    kb_field(&text, "VmHWM").map(|kb| kb.saturating_mul(1024))
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

/// Advises `v`'s spare capacity as huge pages ([`advise_huge`]), so that
/// a vector that grows in place gets them for its new part too.
pub(crate) fn advise_spare_huge<T>(v: &mut Vec<T>) {
    let spare = v.spare_capacity_mut();
    advise_huge(spare.as_ptr().cast::<u8>(), std::mem::size_of_val(spare));
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
