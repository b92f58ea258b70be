//! The exact tables' allocator (`pages::TableArena`): no two live blocks
//! overlap, a block keeps what was written to it until it is given back, a
//! zeroed block is zero even when it is a reused one that was written, a
//! grown vector keeps its contents, large blocks start on a huge page, and
//! all of it holds with several threads taking and giving back blocks at
//! once. Below `MIN_BLOCK` the global allocator serves, and those blocks
//! must be told apart on the way back.

use allocator_api2::alloc::{Allocator, Layout};
use flowsieve::pages::{HUGE_PAGE, MIN_BLOCK, TableArena, TableVec};
use proptest::prelude::*;
use std::ptr::NonNull;

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

/// One step: take a block (size, alignment shift, zeroed) or give back the
/// live block at an index (modulo the live count).
#[derive(Clone, Debug)]
enum Op {
    Take(usize, u32, bool),
    GiveBack(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (size(), 0u32..7, any::<bool>()).prop_map(|(s, a, z)| Op::Take(s, a, z)),
        2 => any::<usize>().prop_map(Op::GiveBack),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// After every step the live blocks are disjoint and each still holds
    /// its own fill; every zeroed block was zero, reused ones included (a
    /// block given back is always written first).
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
                Op::GiveBack(_) => {}
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

/// A block of a huge page or more starts on a huge page, where the region
/// exists (Linux with `MAP_NORESERVE` allowed); what makes the tables'
/// pages huge.
#[cfg(target_os = "linux")]
#[test]
fn large_blocks_start_on_a_huge_page() {
    let blocks: Vec<Live> = (0..4)
        .map(|i| take(HUGE_PAGE + i * 4096, 8, true, 7))
        .collect();
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
