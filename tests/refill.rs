//! The source's wait for batch buffers (`pipeline::refill`): on real
//! threads, a sleeping waiter is woken once its count is reached, never
//! before, and no wake-up is lost; with nobody handing back, the wait
//! times out and says so.

use crate::common;
use flowsieve::pipeline::refill::Refill;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// [`common::within`], for the refill: a lost wake-up would leave the
/// waiter asleep until its (hour-long) timeout.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    common::within(
        limit,
        "a wake-up was lost: the waiter slept past every hand-back",
        f,
    )
}

/// The engine's pattern, many times over: the waiter takes every free
/// buffer, then sleeps until `want` are back, while `returners` threads
/// hand buffers back one at a time with random pauses. Each wait must end
/// with at least `want` free (the waiter alone takes them), and the whole
/// run must end long before any timeout.
fn rounds(returners: usize, want: usize, rounds: usize, seed: u64) {
    within(Duration::from_secs(120), move || {
        let free = AtomicUsize::new(0);
        let refill = Refill::for_current_thread();
        // Buffers in flight, handed back by the returners.
        let in_flight = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for r in 0..returners {
                let (free, refill, in_flight, done) = (&free, &refill, &in_flight, &done);
                s.spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ r as u64);
                    while done.load(Ordering::SeqCst) == 0 {
                        // Claim one buffer in flight, if any, and hand it back.
                        let claimed = in_flight
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok();
                        if claimed {
                            if rng.random_bool(0.3) {
                                std::thread::sleep(Duration::from_micros(rng.random_range(0..50)));
                            }
                            free.fetch_add(1, Ordering::SeqCst);
                            refill.returned(|| free.load(Ordering::SeqCst));
                        } else {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            for _ in 0..rounds {
                // Take every free buffer and send it out again.
                let taken = free.swap(0, Ordering::SeqCst);
                in_flight.fetch_add(taken.max(want), Ordering::SeqCst);
                let there = refill.wait(want, Duration::from_secs(3600), || {
                    free.load(Ordering::SeqCst)
                });
                assert!(there, "the wait ended without its buffers");
                assert!(free.load(Ordering::SeqCst) >= want);
            }
            done.store(1, Ordering::SeqCst);
        });
    });
}

#[test]
fn one_returner_wakes_the_waiter_at_its_count() {
    rounds(1, 16, 2_000, 1);
}

#[test]
fn several_returners_lose_no_wake_up() {
    rounds(3, 8, 2_000, 2);
}

#[test]
fn a_count_of_one_is_the_plain_wait() {
    rounds(2, 1, 5_000, 3);
}

#[test]
fn a_wait_with_too_few_back_times_out_and_says_so() {
    let free = AtomicUsize::new(2);
    let refill = Refill::for_current_thread();
    assert!(!refill.wait(3, Duration::from_millis(30), || free.load(Ordering::SeqCst)));
    // A count already reached needs no sleep, whatever the timeout.
    assert!(refill.wait(2, Duration::ZERO, || free.load(Ordering::SeqCst)));
    // Zero is taken as one: the wait is for a buffer, not for nothing.
    free.store(0, Ordering::SeqCst);
    assert!(!refill.wait(0, Duration::from_millis(10), || free.load(Ordering::SeqCst)));
}

#[test]
fn a_hand_back_below_the_count_does_not_end_the_wait() {
    // The returner hands back `want - 1` buffers, waits until the waiter
    // has certainly looked and slept, then the last one: the wait must not
    // have ended before that last one.
    within(Duration::from_secs(60), || {
        let free = AtomicUsize::new(0);
        let last_sent = AtomicUsize::new(0);
        let refill = Refill::for_current_thread();
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..3 {
                    free.fetch_add(1, Ordering::SeqCst);
                    refill.returned(|| free.load(Ordering::SeqCst));
                }
                std::thread::sleep(Duration::from_millis(50));
                last_sent.store(1, Ordering::SeqCst);
                free.fetch_add(1, Ordering::SeqCst);
                refill.returned(|| free.load(Ordering::SeqCst));
            });
            assert!(refill.wait(4, Duration::from_secs(3600), || free.load(Ordering::SeqCst)));
            assert_eq!(last_sent.load(Ordering::SeqCst), 1);
        });
    });
}

#[test]
fn a_hand_back_that_clears_a_later_wait_does_not_leave_it_asleep() {
    // A worker reads the waiter's count during one wait and clears it
    // only during the next, whose count is the same: its compare-exchange
    // succeeds and wakes the waiter for nothing. The waiter must then be
    // woken by the next hand-back all the same. `returned` calls its
    // closure between reading the count and clearing it, which is where
    // the stalled worker below waits.
    within(Duration::from_secs(60), || {
        let free = AtomicUsize::new(0);
        let stalled_read = AtomicBool::new(false);
        let release_stalled = AtomicBool::new(false);
        let second_wait_seen = AtomicBool::new(false);
        // The helpers stay until the waiter is done: a scoped thread that
        // ends wakes the scope's owner, the waiter, which would hide a
        // lost wake-up.
        let done = AtomicBool::new(false);
        let stay = || {
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        let refill = Refill::for_current_thread();
        std::thread::scope(|s| {
            // The stalled worker: reads the count during the first wait,
            // then waits until the second wait has begun, and answers
            // "enough" so that it clears the count.
            s.spawn(|| {
                while !stalled_read.load(Ordering::SeqCst) {
                    refill.returned(|| {
                        stalled_read.store(true, Ordering::SeqCst);
                        while !release_stalled.load(Ordering::SeqCst) {
                            std::thread::yield_now();
                        }
                        usize::MAX
                    });
                    std::thread::yield_now();
                }
                stay();
            });
            // A second worker ends the first wait once the stalled one has
            // read the count; then it watches for the second wait (its
            // closure runs only while a count is set, and answers "not
            // enough"), releases the stalled worker, and after a pause
            // long enough for the waiter to sleep again hands one back.
            s.spawn(|| {
                while !stalled_read.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                free.store(1, Ordering::SeqCst);
                refill.returned(|| free.load(Ordering::SeqCst));
                while !second_wait_seen.load(Ordering::SeqCst) {
                    refill.returned(|| {
                        if free.load(Ordering::SeqCst) == 0 {
                            second_wait_seen.store(true, Ordering::SeqCst);
                        }
                        0
                    });
                    std::thread::yield_now();
                }
                release_stalled.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
                free.store(1, Ordering::SeqCst);
                refill.returned(|| free.load(Ordering::SeqCst));
                stay();
            });
            let count = || free.load(Ordering::SeqCst);
            assert!(refill.wait(1, Duration::from_secs(3600), count));
            free.store(0, Ordering::SeqCst);
            assert!(refill.wait(1, Duration::from_secs(3600), count));
            assert_eq!(free.load(Ordering::SeqCst), 1);
            done.store(true, Ordering::SeqCst);
        });
    });
}
