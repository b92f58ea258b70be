//! The source's sleep while all its batch buffers are in flight, and its
//! wake-up once a share of them has come back.
//!
//! Why not wait on the buffers' channel, as the engine did up to the
//! sixty-seventh round: when the source is faster than the workers (one
//! worker, most traces), then from the moment the queues fill it waits for
//! a buffer before *every* batch. A channel wait spins, yields and parks,
//! and the worker whose hand-back ends it pays a wake-up system call, on
//! the run's critical path. On the bundled trace tiled 25 times with one
//! worker (a million packets in 1,953 batches) that was 730-2,140 `futex`
//! calls, 1,490-4,350 `sched_yield` and 390-1,100 context switches a run.
//! With the wait below it is 63-124 `futex` calls and 55-87 switches, and
//! the process took 3.5-6.3 % less CPU time in the paired runs that
//! resolve it (BENCHMARKS.md, sixty-eighth round).
//!
//! So the source waits with hysteresis: when no buffer is free, it sleeps
//! until `want` of them are (a quarter of what the queues hold), and the
//! worker whose hand-back reaches that count wakes it, once. The source
//! then fills `want` batches without waiting while the workers still have
//! the rest of their queues to work on. Nothing but the timing changes:
//! which buffer carries which records has no part in any result.
//!
//! A live capture still waits on the channel for each buffer
//! ([`super::Source::needs_prompt_buffers`]): its ring fills while it
//! sleeps, and only an awake source sheds frames before the kernel has to
//! drop them.
//!
//! The protocol is Dekker's: the source stores `want`, then (after a
//! sequentially consistent fence) reads the count of free buffers; a
//! worker hands a buffer back, then (after the same kind of fence) reads
//! `want`. One of the two sees the other's write, so a wake-up cannot be
//! lost between the source's last look and its sleep; and a wake-up that
//! comes before the sleep leaves the thread's park token set, so the sleep
//! returns at once. The worker clears `want` by a compare-exchange before
//! it wakes the source, and a worker that read `want` in one wait may
//! clear the next wait's, equal, value: so the source stores `want` again
//! each time it wakes, before it looks. A timeout bounds every sleep all
//! the same, so that the caller can check whether the run failed.
//!
//! ```
//! use flowsieve::pipeline::refill::Refill;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::time::Duration;
//!
//! let free = AtomicUsize::new(0);
//! let refill = Refill::for_current_thread();
//! std::thread::scope(|s| {
//!     s.spawn(|| {
//!         for _ in 0..4 {
//!             free.fetch_add(1, Ordering::SeqCst);
//!             refill.returned(|| free.load(Ordering::SeqCst));
//!         }
//!     });
//!     // Woken when the fourth buffer is back, not at the first.
//!     assert!(refill.wait(4, Duration::from_secs(60), || free.load(Ordering::SeqCst)));
//!     assert_eq!(free.load(Ordering::SeqCst), 4);
//! });
//! ```

use std::sync::atomic::{AtomicUsize, Ordering, fence};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

/// A waiting thread's wake-up when enough buffers are free
/// (module docs). One thread waits: the one that made it.
#[derive(Debug)]
pub struct Refill {
    /// The thread that waits (the source).
    waiter: Thread,
    /// How many free buffers the sleeping waiter wants; 0 while it does
    /// not sleep. Padded: every hand-back reads it.
    wanted: CachePadded<AtomicUsize>,
}

impl Refill {
    /// A refill whose waiter is the calling thread.
    pub fn for_current_thread() -> Refill {
        Refill {
            waiter: std::thread::current(),
            wanted: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Sleeps until `free()` is at least `want` (at least 1), or `timeout`
    /// passed; returns whether the buffers are there. Called only by the
    /// thread that made the refill: another thread's sleep would never be
    /// woken, only timed out.
    pub fn wait(&self, want: usize, timeout: Duration, free: impl Fn() -> usize) -> bool {
        debug_assert_eq!(
            std::thread::current().id(),
            self.waiter.id(),
            "a refill's wait belongs to the thread that made it"
        );
        let want = want.max(1);
        let deadline = Instant::now() + timeout;
        let there = loop {
            // Stored again after every wake-up: a worker that read the
            // count during an earlier wait may clear it only now (its
            // compare-exchange sees the same value again) and wake this
            // wait for nothing. Left cleared, no later hand-back would
            // wake it.
            self.wanted.store(want, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if free() >= want {
                break true;
            }
            let now = Instant::now();
            if now >= deadline {
                break false;
            }
            std::thread::park_timeout(deadline - now);
        };
        self.wanted.store(0, Ordering::SeqCst);
        there
    }

    /// Called after a buffer was handed back, with the count of free ones:
    /// wakes the waiter if it sleeps and its count is reached. Costs a
    /// fence and a load when nobody waits.
    #[inline]
    pub fn returned(&self, free: impl Fn() -> usize) {
        fence(Ordering::SeqCst);
        let want = self.wanted.load(Ordering::SeqCst);
        if want != 0
            && free() >= want
            && self
                .wanted
                .compare_exchange(want, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.waiter.unpark();
        }
    }
}
