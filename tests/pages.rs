//! The exact tables' allocator (`pages::TableArena`): no two live blocks
//! overlap, a block keeps what was written to it until it is given back, a
//! zeroed block is zero even when it is a reused one that was written, a
//! grown vector keeps its contents, large blocks start on a huge page, and
//! all of it holds with several threads taking and giving back blocks at
//! once. A block grown or shrunk keeps its contents and, within its block,
//! its place. Below `MIN_BLOCK` the global allocator serves, and those
//! blocks must be told apart on the way back; with the region switched
//! off it serves everything.

use allocator_api2::alloc::{Allocator, Layout};
use flowsieve::pages::{self, HUGE_PAGE, MIN_BLOCK, TableArena, TableVec};
use proptest::prelude::*;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

/// Held by the tests that switch the region off or need it on: the switch
/// is process-wide, and the suite's tests run in parallel. (Other tests'
/// tables only change allocator while it is off; their results do not.)
static SWITCH: Mutex<()> = Mutex::new(());

fn hold_switch() -> MutexGuard<'static, ()> {
    SWITCH.lock().unwrap_or_else(|e| e.into_inner())
}

/// A live block: where it starts, its layout and the byte written over it.
struct Live {
    ptr: NonNull<u8>,
    layout: Layout,
    fill: u8,
}

/// The bytes of a live block.
fn bytes(b: &Live) -> &[u8] {
    // SAFETY: `ptr` came from `TableArena` for `layout` and is not given
    // back while `b` is alive.
    unsafe { std::slice::from_raw_parts(b.ptr.as_ptr(), b.layout.size()) }
}

/// Takes a block of `size` bytes (aligned to `align`), zeroed or not,
/// checks what the arena promises of a new block, and fills it with `fill`.
fn take(size: usize, align: usize, zeroed: bool, fill: u8) -> Live {
    let layout = Layout::from_size_align(size, align).unwrap();
    let block = if zeroed {
        TableArena.allocate_zeroed(layout)
    } else {
        TableArena.allocate(layout)
    }
    .expect("the arena or the global allocator serves every request here");
    assert!(
        block.len() >= size,
        "a block of {} bytes for {size}",
        block.len()
    );
    let ptr = block.cast::<u8>();
    assert_eq!(ptr.as_ptr() as usize % align, 0, "alignment {align}");
    let live = Live { ptr, layout, fill };
    if zeroed {
        assert!(
            bytes(&live).iter().all(|&b| b == 0),
            "a zeroed block of {size} bytes held data"
        );
    }
    // SAFETY: the block is `size` writable bytes owned by this caller.
    unsafe { ptr.as_ptr().write_bytes(fill, size) };
    live
}

/// Gives a block back after checking it still holds its own fill.
fn give_back(b: Live) {
    assert!(
        bytes(&b).iter().all(|&x| x == b.fill),
        "a block of {} bytes was written by someone else",
        b.layout.size()
    );
    // SAFETY: the block came from `TableArena` with this layout.
    unsafe { TableArena.deallocate(b.ptr, b.layout) };
}

/// Grows or shrinks a live block to `size` bytes (`grow_zeroed` when
/// `zeroed`), checks that it kept its contents up to the smaller size, that
/// a zeroed growth is zero past the old size, and that a region block whose
/// size still rounds to the same block stayed where it was; then fills it
/// with `fill`.
fn resize(b: Live, size: usize, zeroed: bool, fill: u8) -> Live {
    let old = b.layout.size();
    let new = Layout::from_size_align(size, b.layout.align()).unwrap();
    let in_place = TableArena::holds(b.ptr.as_ptr())
        && size >= MIN_BLOCK
        && size.next_power_of_two() == old.next_power_of_two();
    // SAFETY: the block came from `TableArena` with `b.layout`, is given to
    // `grow` only for a size at least the old one and to `shrink` for one
    // at most it, and is not used through `b` afterwards.
    let block = unsafe {
        match (size >= old, zeroed) {
            (true, true) => TableArena.grow_zeroed(b.ptr, b.layout, new),
            (true, false) => TableArena.grow(b.ptr, b.layout, new),
            (false, _) => TableArena.shrink(b.ptr, b.layout, new),
        }
    }
    .expect("the arena or the global allocator serves every request here");
    assert!(block.len() >= size, "{} bytes for {size}", block.len());
    let ptr = block.cast::<u8>();
    assert_eq!(ptr.as_ptr() as usize % new.align(), 0);
    if in_place {
        assert_eq!(ptr, b.ptr, "{old} -> {size} bytes moved within one block");
    }
    let live = Live {
        ptr,
        layout: new,
        fill,
    };
    let kept = old.min(size);
    assert!(
        bytes(&live)[..kept].iter().all(|&x| x == b.fill),
        "{old} -> {size} bytes lost its contents"
    );
    if zeroed && size > old {
        assert!(
            bytes(&live)[old..].iter().all(|&x| x == 0),
            "{old} -> {size} bytes, zeroed, held data past {old}"
        );
    }
    // SAFETY: the block is `size` writable bytes owned by this caller.
    unsafe { ptr.as_ptr().write_bytes(fill, size) };
    live
}

/// No two of `live` share a byte.
fn assert_disjoint(live: &[Live]) {
    let mut spans: Vec<(usize, usize)> = live
        .iter()
        .map(|b| {
            (
                b.ptr.as_ptr() as usize,
                b.ptr.as_ptr() as usize + b.layout.size(),
            )
        })
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "blocks {:x?} and {:x?} overlap",
            w[0],
            w[1]
        );
    }
}

/// Sizes around the arena's threshold and its powers of two, where the
/// rounding and the free lists' classes change.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        1usize..MIN_BLOCK,
        Just(MIN_BLOCK - 1),
        Just(MIN_BLOCK),
        Just(MIN_BLOCK + 1),
        MIN_BLOCK..4 * MIN_BLOCK,
        (0u32..6).prop_map(|s| (MIN_BLOCK << s) - 8),
        (0u32..6).prop_map(|s| (MIN_BLOCK << s) + 8),
        Just(HUGE_PAGE),
        Just(3 * HUGE_PAGE),
    ]
}

/// One step: take a block (size, alignment shift, zeroed), give back the
/// live block at an index (modulo the live count), or resize it (new size,
/// zeroed if it grows).
#[derive(Clone, Debug)]
enum Op {
    Take(usize, u32, bool),
    GiveBack(usize),
    Resize(usize, usize, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (size(), 0u32..7, any::<bool>()).prop_map(|(s, a, z)| Op::Take(s, a, z)),
        2 => any::<usize>().prop_map(Op::GiveBack),
        2 => (any::<usize>(), size(), any::<bool>()).prop_map(|(i, s, z)| Op::Resize(i, s, z)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// After every step the live blocks are disjoint and each still holds
    /// its own fill; every zeroed block was zero, reused ones included (a
    /// block given back is always written first); a resized block kept its
    /// contents, in the region, on the global allocator or moved between
    /// the two.
    #[test]
    fn live_blocks_never_overlap_and_keep_their_contents(ops in prop::collection::vec(op(), 1..60)) {
        let mut live: Vec<Live> = Vec::new();
        for (n, op) in ops.into_iter().enumerate() {
            match op {
                Op::Take(size, shift, zeroed) => {
                    live.push(take(size, 1 << shift, zeroed, (n % 251) as u8 + 1));
                }
                Op::GiveBack(i) if !live.is_empty() => {
                    let b = live.swap_remove(i % live.len());
                    give_back(b);
                }
                Op::Resize(i, size, zeroed) if !live.is_empty() => {
                    let b = live.swap_remove(i % live.len());
                    live.push(resize(b, size, zeroed, (n % 251) as u8 + 1));
                }
                Op::GiveBack(_) | Op::Resize(..) => {}
            }
            assert_disjoint(&live);
        }
        for b in live {
            give_back(b);
        }
    }

    /// A vector in the arena grown past several block sizes, and shrunk
    /// back below the threshold, holds exactly what was pushed.
    #[test]
    fn a_table_vector_keeps_its_values_across_growth(n in 0usize..300_000, keep in 0usize..1000) {
        let mut v: TableVec<u64> = TableVec::new_in(TableArena);
        for i in 0..n as u64 {
            v.push(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        }
        prop_assert!(v.iter().enumerate().all(|(i, &x)| x == (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        v.truncate(keep);
        v.shrink_to_fit();
        prop_assert_eq!(v.len(), keep.min(n));
        prop_assert!(v.iter().enumerate().all(|(i, &x)| x == (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    }
}

/// Fails with `what` unless the system's overcommit policy is strict
/// (`vm.overcommit_memory = 2`), the one documented reason on Linux for the
/// region not to be reserved.
fn assert_strict_overcommit(what: &str) {
    let policy = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap_or_default();
    assert_eq!(
        policy.trim(),
        "2",
        "{what}, with overcommit policy {policy:?}"
    );
}

/// A block of a huge page or more starts on a huge page, where the region
/// exists; what makes the tables' pages huge. The one documented reason
/// for it not to exist on Linux is a strict overcommit policy
/// (`vm.overcommit_memory = 2`, which refuses a `MAP_NORESERVE` reservation
/// of 32 GiB); the blocks then come from the global allocator, with no such
/// alignment, and anything else is a failure.
#[cfg(target_os = "linux")]
#[test]
fn large_blocks_start_on_a_huge_page() {
    let _switch = hold_switch();
    let blocks: Vec<Live> = (0..4)
        .map(|i| take(HUGE_PAGE + i * 4096, 8, true, 7))
        .collect();
    if !blocks.iter().all(|b| TableArena::holds(b.ptr.as_ptr())) {
        assert_strict_overcommit("large blocks outside the region");
        crate::common::skip::skipped(
            "large_blocks_start_on_a_huge_page",
            "strict overcommit: the region is not reserved; alignment not checked",
        );
        blocks.into_iter().for_each(give_back);
        return;
    }
    for b in &blocks {
        assert_eq!(
            b.ptr.as_ptr() as usize % HUGE_PAGE,
            0,
            "a {} byte block",
            b.layout.size()
        );
    }
    assert_disjoint(&blocks);
    blocks.into_iter().for_each(give_back);
}

/// Four threads take and give back blocks of a few sizes at once, each
/// writing its own byte over its blocks and checking it before giving them
/// back: a block handed to two threads at once, or a free list that loses
/// or repeats a block under contention, shows up as another thread's byte.
#[test]
fn threads_taking_and_giving_back_blocks_never_share_one() {
    std::thread::scope(|s| {
        for t in 0..4u8 {
            s.spawn(move || {
                let mut live: Vec<Live> = Vec::new();
                for round in 0..400usize {
                    let size = MIN_BLOCK << (round % 4);
                    live.push(take(size, 64, round % 3 == 0, t + 1));
                    if live.len() > 6 {
                        give_back(live.swap_remove(round % live.len()));
                    }
                }
                live.into_iter().for_each(give_back);
            });
        }
    });
}

/// `pages::set_huge_pages(false)` (the command line's `--no-huge-pages`)
/// sends new blocks to the global allocator, and a block is given back to
/// where it came from whatever the switch says when it is given back: a
/// region block freed while the switch is off goes back to the region (to
/// the global allocator it would be a pointer it never made), and a global
/// one freed while it is on goes back to the global allocator.
#[test]
fn switched_off_the_region_serves_nothing_and_still_takes_its_blocks_back() {
    let _switch = hold_switch();
    let before = take(HUGE_PAGE, 8, true, 1);
    // Without the region (strict overcommit) only the switched-off half
    // below is checked: every block then comes from the global allocator.
    let region = TableArena::holds(before.ptr.as_ptr());
    if !region {
        assert_strict_overcommit("on: a block outside the region");
    }
    pages::set_huge_pages(false);
    assert!(!pages::huge_pages());
    let during: Vec<Live> = [MIN_BLOCK, HUGE_PAGE, 3 * HUGE_PAGE]
        .into_iter()
        .map(|size| take(size, 8, true, 2))
        .collect();
    for b in &during {
        assert!(
            !TableArena::holds(b.ptr.as_ptr()),
            "off: a {} byte block came from the region",
            b.layout.size()
        );
    }
    give_back(before);
    pages::set_huge_pages(true);
    during.into_iter().for_each(give_back);
    let after = take(HUGE_PAGE, 8, true, 3);
    assert_eq!(
        TableArena::holds(after.ptr.as_ptr()),
        region,
        "on again: from the region"
    );
    give_back(after);
}

/// Minor page faults of the calling thread so far.
#[cfg(target_os = "linux")]
fn thread_minor_faults() -> i64 {
    // SAFETY: `getrusage` writes one `rusage` into the zeroed value given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD reads the calling thread only.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    usage.ru_minflt
}

/// Whether this kernel has `mremap`'s `MREMAP_DONTUNMAP` (Linux 5.7),
/// without which the region copies a growing block instead of moving it.
#[cfg(target_os = "linux")]
fn kernel_moves_pages() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (5, 7)
}

/// A region block of whole huge pages that grows into a larger block
/// keeps its pages: they are moved (`mremap`), not copied. So the growth
/// and the reading of every byte afterwards fault in no page of the block
/// (a copy into a fresh block faults in each of its pages: 8 huge pages,
/// or 4,096 small ones, for this test's 16 MiB), the bytes are the ones
/// written, and the block left behind reads as zeros when it is handed
/// out zeroed again. Without the region (strict overcommit), or on a
/// kernel older than 5.7, only the contents are checked.
#[cfg(target_os = "linux")]
#[test]
fn a_block_grown_past_a_huge_page_moves_its_pages_instead_of_copying_them() {
    let _switch = hold_switch();
    // 16 MiB: a copy faults in at least 8 huge pages (4,096 small ones),
    // where a move faults in none; the thread's own stack may fault in a
    // page or two meanwhile.
    const SIZE: usize = 8 * HUGE_PAGE;
    let layout = Layout::from_size_align(SIZE, 8).unwrap();
    let block = TableArena.allocate(layout).unwrap().cast::<u8>();
    let pattern = |i: usize| (i % 251) as u8 ^ 0x5a;
    // SAFETY: the block is SIZE writable bytes owned by this test.
    let old = unsafe { std::slice::from_raw_parts_mut(block.as_ptr(), SIZE) };
    for (i, b) in old.iter_mut().enumerate() {
        *b = pattern(i);
    }
    let region = TableArena::holds(block.as_ptr());
    if !region {
        assert_strict_overcommit("a huge-page block outside the region");
    }
    let moved_before = TableArena::moved_blocks();
    let faults_before = thread_minor_faults();
    let new_layout = Layout::from_size_align(SIZE + SIZE / 2, 8).unwrap();
    // SAFETY: the block came from `TableArena` for `layout`; the new size
    // is larger; `old` is not used again.
    let grown = unsafe { TableArena.grow(block, layout, new_layout) }
        .unwrap()
        .cast::<u8>();
    // SAFETY: the grown block is SIZE * 1.5 bytes, its first SIZE
    // initialised (the contents kept).
    let kept = unsafe { std::slice::from_raw_parts(grown.as_ptr(), SIZE) };
    let mismatch = kept.iter().enumerate().find(|&(i, &b)| b != pattern(i));
    let faults = thread_minor_faults() - faults_before;
    assert_eq!(mismatch, None, "the grown block lost its contents");
    if region && kernel_moves_pages() {
        // Other tests grow blocks at the same time, so the count may
        // have risen by more than this test's one move.
        assert!(
            TableArena::moved_blocks() > moved_before,
            "the block's pages were not moved"
        );
        assert!(
            faults <= 2,
            "growing and reading the block faulted in {faults} pages"
        );
        assert!(TableArena::holds(grown.as_ptr()));
        assert_ne!(grown, block, "a block of another size, elsewhere");
    }
    // The block left behind, handed out zeroed (it is the last of its size
    // given back, unless another test took it first): zeros either way.
    let again = take(SIZE, 8, true, 9);
    give_back(again);
    // SAFETY: the grown block came from `TableArena` for `new_layout`.
    unsafe { TableArena.deallocate(grown, new_layout) };
}

/// A fake `virtio_balloon` driver directory of sysfs: one `virtio<N>`
/// device directory a `features` text, beside the driver's own files.
fn balloon_driver(devices: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for f in ["bind", "unbind", "uevent"] {
        std::fs::write(dir.path().join(f), "").expect("a driver file");
    }
    for (name, features) in devices {
        let dev = dir.path().join(name);
        std::fs::create_dir(&dev).expect("a device directory");
        std::fs::write(dev.join("features"), features).expect("a features file");
    }
    dir
}

/// The balloon's features as sysfs prints them: bit 0 first, here the
/// bits a Firecracker guest's balloon negotiates (stats, deflate on OOM,
/// free page reporting, and bit 32, VERSION_1), with reporting (bit 5)
/// set or not.
fn features(reporting: bool) -> String {
    let mut bits = vec![b'0'; 128];
    for b in [1, 2, 7, 32] {
        bits[b] = b'1';
    }
    bits[5] = if reporting { b'1' } else { b'0' };
    format!("{}\n", String::from_utf8(bits).unwrap())
}

/// Free page reporting is read from the feature bit of any balloon device,
/// and only from it: the other bits, the driver's own files and a missing
/// or malformed `features` file say nothing.
#[test]
fn free_page_reporting_is_the_balloons_feature_bit_5() {
    let found = |devices: &[(&str, &str)]| {
        let d = balloon_driver(devices);
        pages::balloon_reports_free_pages(d.path())
    };
    let (with, without) = (features(true), features(false));
    assert!(found(&[("virtio0", &with)]));
    assert!(!found(&[("virtio0", &without)]));
    assert!(found(&[("virtio0", &without), ("virtio3", &with)]));
    assert!(!found(&[]));
    // A `features` file under something that is not a device.
    assert!(!found(&[("module", &with)]));
    // Malformed: too short to hold bit 5, a stray character, empty.
    assert!(!found(&[("virtio0", "01100")]));
    assert!(!found(&[("virtio0", "011001x1\n")]));
    assert!(!found(&[("virtio0", "")]));
    // No driver directory at all (no balloon, or not Linux).
    assert!(!pages::balloon_reports_free_pages(std::path::Path::new(
        "/nonexistent/virtio_balloon"
    )));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any well-formed features string reports free pages exactly when
    /// its sixth character is `1`, with or without the trailing newline.
    #[test]
    fn reporting_follows_the_sixth_bit(bits in proptest::collection::vec(any::<bool>(), 0..130), newline: bool) {
        let mut text: String = bits.iter().map(|&b| if b { '1' } else { '0' }).collect();
        if newline {
            text.push('\n');
        }
        let d = balloon_driver(&[("virtio1", &text)]);
        prop_assert_eq!(pages::balloon_reports_free_pages(d.path()), bits.get(5) == Some(&true));
    }
}

/// With fresh huge pages watched (`--huge-pages auto` where the host takes
/// back free memory), a fresh region block whose first huge page faults in
/// slower than the bound turns huge pages off for every later request,
/// and one within it is counted and changes nothing. The bound is the
/// test's: 0 ms makes any touch slow, a minute none. The watched touch
/// writes nothing a zeroed block would not hold.
#[test]
fn a_slow_fresh_huge_page_turns_the_region_off() {
    let _switch = hold_switch();
    // Sizes no other test takes, so that each block is fresh from the
    // region's unused end (a reused one is not timed); only the first huge
    // page of each is touched.
    let fresh = |log2: u32| {
        let layout = Layout::from_size_align(1 << log2, 8).unwrap();
        let block = TableArena
            .allocate_zeroed(layout)
            .expect("the region or the global allocator serves it")
            .cast::<u8>();
        // SAFETY: the block is `layout.size()` bytes; only its first 4 KiB
        // are read.
        let head = unsafe { std::slice::from_raw_parts(block.as_ptr(), 4096) };
        assert!(head.iter().all(|&b| b == 0), "a zeroed block held data");
        (block, layout)
    };
    let give_back = |(block, layout): (NonNull<u8>, Layout)| {
        // SAFETY: the block came from `TableArena` with this layout.
        unsafe { TableArena.deallocate(block, layout) };
    };
    pages::watch_fresh_huge_pages(Some(60_000.0));
    let quick = fresh(27);
    if !TableArena::holds(quick.0.as_ptr()) {
        pages::watch_fresh_huge_pages(None);
        give_back(quick);
        assert_strict_overcommit("a fresh 128 MiB block outside the region");
        return;
    }
    // Other tests of the suite may take fresh blocks meanwhile: they can
    // only add quick pages under this bound, and under the next one the
    // first fresh page anyone takes ends the watch.
    let (fast, slow_ns) = pages::fresh_huge_pages_seen();
    assert!(
        fast >= 1 && slow_ns.is_none(),
        "within a minute: {fast} {slow_ns:?}"
    );
    assert!(pages::huge_pages());
    pages::watch_fresh_huge_pages(Some(0.0));
    let slow = fresh(28);
    let (fast, slow_ns) = pages::fresh_huge_pages_seen();
    assert_eq!(fast, 0);
    assert!(slow_ns.is_some_and(|ns| ns > 0), "{slow_ns:?}");
    assert!(!pages::huge_pages(), "a slow page turns huge pages off");
    let after = fresh(29);
    assert!(
        !TableArena::holds(after.0.as_ptr()),
        "after a slow page, no block from the region"
    );
    pages::watch_fresh_huge_pages(None);
    pages::set_huge_pages(true);
    for b in [quick, slow, after] {
        give_back(b);
    }
}

/// What a run starts with, for every choice, host and size: `on` and
/// `off` are what they say whatever else; `auto` is plain on where the host
/// keeps the guest's free memory; where it takes it back, `auto` is off
/// from the start exactly for a known size under `SHORT_RUN_BYTES`, and
/// otherwise on and timing fresh pages.
#[test]
fn auto_starts_off_exactly_for_short_known_traces_where_the_host_reclaims() {
    use pages::{HugePageChoice, HugePageDecision, SHORT_RUN_BYTES};
    let sizes = [
        None,
        Some(0),
        Some(1),
        Some(SHORT_RUN_BYTES - 1),
        Some(SHORT_RUN_BYTES),
        Some(u64::MAX),
    ];
    for choice in [
        HugePageChoice::Auto,
        HugePageChoice::On,
        HugePageChoice::Off,
    ] {
        for reclaims in [false, true] {
            for size in sizes {
                let d = HugePageDecision::starting(choice, reclaims, size);
                let what = format!("{choice:?} reclaims {reclaims} size {size:?}");
                let auto_reclaims = choice == HugePageChoice::Auto && reclaims;
                let short = auto_reclaims && size.is_some_and(|b| b < SHORT_RUN_BYTES);
                assert_eq!(d.choice, choice, "{what}");
                assert_eq!(d.host_reclaims_free_pages, auto_reclaims, "{what}");
                assert_eq!(d.short_run_trace_bytes, size.filter(|_| short), "{what}");
                assert_eq!(
                    d.starts_on(),
                    choice != HugePageChoice::Off && !short,
                    "{what}"
                );
                assert_eq!(d.times_fresh_pages(), auto_reclaims && !short, "{what}");
                assert_eq!(
                    (d.fast_huge_pages, d.slow_huge_page_ms),
                    (0, None),
                    "{what}"
                );
            }
        }
    }
    // The bundled trace is a short one.
    let bundled = std::fs::metadata(concat!(env!("CARGO_MANIFEST_DIR"), "/traces/default.pcap"))
        .unwrap()
        .len();
    assert!(bundled < SHORT_RUN_BYTES);
}
