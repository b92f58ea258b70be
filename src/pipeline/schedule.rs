//! Which worker runs which shard: an idle worker takes any shard that has
//! work, one worker at a time per shard, and each shard's work in the order
//! it was pushed.
//!
//! Why not a fixed worker per shard (shard `s` on worker `s % threads`, as
//! the engine did up to the fourteenth round): the flow hash spreads flows
//! evenly over the shards, not packets, and on a skewed trace the largest
//! flows decide which worker is busiest. On the throughput trace the two
//! workers' shares of the samples were 43-44 % and 56-57 % (BENCHMARKS.md,
//! twelfth and fourteenth rounds); the lighter one then idled whenever the
//! source waited on the heavier one's full queue, and finished early at
//! the end of the run.
//!
//! Why results cannot change: a shard's state is only ever touched by the
//! one worker that holds its *turn*, and a turn handles the shard's queued
//! work in the order it was pushed. So each shard sees exactly the
//! sequence it saw on its fixed worker, and nothing a shard computes
//! depends on which thread runs it (the engine merges tallies in shard
//! order, and the one per-thread memory, the heavy stage's model terms,
//! holds values that are the same bit for bit whichever thread computes
//! them).
//!
//! The protocol, per shard, is a mailbox with a count of work pushed and
//! not yet handled (the actor-scheduling pattern):
//!
//! 1. The producer pushes an item into the shard's queue, *then* adds one
//!    to its count. The push that takes the count from 0 to 1 also puts
//!    the shard's number on its home worker's ready queue: that is the
//!    shard's turn, and only one exists at a time.
//! 2. A worker takes a number from a ready queue ([`Scheduler::next`]) and
//!    claims the shard's state from its parking place, a channel of
//!    capacity one ([`Scheduler::claim`]).
//! 3. It reads the count ([`Scheduler::due`]), handles at most that many
//!    items (all of them are in the queue, since each was pushed before it
//!    was counted), parks the state again and subtracts what it handled
//!    ([`Scheduler::end_turn`]). If work remains, the number goes back on
//!    the ready queue (the turn passes on, behind the other shards
//!    waiting); if the count reached zero, the turn ends, and the
//!    producer's next push starts a new one.
//!
//! A worker looks at its home shards' queue first and steals from the
//! others' only when its own is empty; a worker with nothing anywhere
//! sleeps on its own queue, and a turn made ready for a busy worker wakes
//! a sleeping one ([`Scheduler::next`] says why).
//!
//! No lock: the count is one atomic, and the state moves between threads
//! by value, through channels. A worker that panics holding a turn loses
//! that shard's state; [`Scheduler::fail`] (called by [`FailOnPanic`])
//! then stops every worker, and a producer waiting for the dead shard's
//! work to come back sees [`Scheduler::has_failed`]. The producer holds a
//! [`FailOnPanic`] too: if it unwinds, the workers waiting for its work
//! stop, so that a scope joining them passes the panic on instead of
//! waiting forever.
//!
//! ```
//! use flowsieve::pipeline::schedule::{FailOnPanic, Next, Scheduler};
//! // Three shards whose state is the list of items they handled, two
//! // workers, and items that are numbers, or `None` for "finish".
//! let scheduler: Scheduler<Vec<u32>, Option<u32>> = Scheduler::new(vec![Vec::new(); 3], 2);
//! let finished = std::thread::scope(|scope| {
//!     let workers: Vec<_> = (0..2)
//!         .map(|me| {
//!             let scheduler = &scheduler;
//!             scope.spawn(move || {
//!                 let _guard = FailOnPanic(scheduler);
//!                 let mut finished = Vec::new();
//!                 while let Next::Shard(shard) = scheduler.next(me) {
//!                     let Some(mut state) = scheduler.claim(shard) else { break };
//!                     let (due, mut handled) = (scheduler.due(shard), 0);
//!                     let mut ended = false;
//!                     while handled < due && !ended {
//!                         let Some(item) = scheduler.take(shard) else { break };
//!                         handled += 1;
//!                         match item {
//!                             Some(n) => state.push(n),
//!                             None => ended = true,
//!                         }
//!                     }
//!                     if ended {
//!                         finished.push((shard, state));
//!                         scheduler.retire();
//!                     } else {
//!                         scheduler.end_turn(shard, state, handled);
//!                     }
//!                 }
//!                 finished
//!             })
//!         })
//!         .collect();
//!     for n in 0..300 {
//!         scheduler.push(n as usize % 3, Some(n)).unwrap();
//!     }
//!     for shard in 0..3 {
//!         scheduler.push(shard, None).unwrap();
//!     }
//!     let mut all: Vec<_> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
//!     all.sort();
//!     all
//! });
//! // Every shard saw its own items, in the order they were pushed.
//! assert_eq!(finished.len(), 3);
//! for (shard, items) in finished {
//!     assert!(items.iter().copied().eq((0..300).filter(|n| n % 3 == shard as u32)));
//! }
//! ```

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, unbounded};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
use std::time::Duration;

/// How long a blocked claim (or the producer waiting for room) waits before
/// it checks whether the run failed. Only a failed run ever reaches this
/// timeout: otherwise the state is parked within a turn.
pub const FAILURE_POLL: Duration = Duration::from_millis(20);

/// The most items a turn handles before the shard goes to the back of its
/// ready queue. A turn of 16 batches of 512 records keeps a shard's filters
/// warm in one core's caches for up to 8 k packets, yet lets the other
/// shards in between on a busy run. 4 measured 1-2 % slower on the default
/// job; 64 and 256 the same as 16 within noise (BENCHMARKS.md, fourteenth
/// round).
pub const TURN_ITEMS: usize = 16;

/// What a worker is to do next ([`Scheduler::next`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Take the turn of this shard.
    Shard(usize),
    /// Stop: every shard retired, or the run failed.
    Stop,
}

/// What a worker's ready queue holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ready {
    /// A turn of this shard.
    Shard(usize),
    /// Stop.
    Stop,
    /// Look at the other workers' queues: a turn waits there while its
    /// home worker is busy.
    Look,
}

/// The run failed: a worker panicked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failed;

/// Shared by the producer and the workers: per shard a queue of work `W`,
/// its count and the parking place of its state `S`; per worker a queue of
/// ready turns and whether it sleeps.
pub struct Scheduler<S, W> {
    senders: Vec<Sender<W>>,
    queues: Vec<Receiver<W>>,
    pending: Vec<CachePadded<AtomicUsize>>,
    parked: Vec<(Sender<S>, Receiver<S>)>,
    /// Per worker, the turns of its home shards (shard `s` is at home on
    /// worker `s % workers`).
    ready: Vec<(Sender<Ready>, Receiver<Ready>)>,
    /// Per worker, whether it is about to sleep or asleep on its ready
    /// queue with nothing to do (and nobody has woken it to look yet).
    idle: Vec<CachePadded<AtomicBool>>,
    /// Per shard, whether its state is still to be made by its first turn
    /// ([`Scheduler::claim_or_make`]); false once a state was parked.
    unmade: Vec<AtomicBool>,
    /// Shards whose state was retired (finished for good).
    retired: AtomicUsize,
    failed: AtomicBool,
    /// Set, before any worker is sent its [`Ready::Stop`], once every shard
    /// retired or the run failed: from then on [`Scheduler::next`] answers
    /// [`Next::Stop`] to every call.
    stopped: AtomicBool,
}

impl<S, W> Scheduler<S, W> {
    /// A scheduler for one state per shard, `states[i]` being shard `i`'s,
    /// parked, run by `workers` workers (numbered from 0).
    ///
    /// The queues are unbounded: the producer bounds the work in flight
    /// itself, over all shards together (the engine's pool of batch
    /// buffers). A bound per shard made the source wait whenever one
    /// shard's queue filled, which a skewed trace's largest shard does
    /// while the others are nearly empty.
    pub fn new(states: Vec<S>, workers: usize) -> Scheduler<S, W> {
        let scheduler = Scheduler::unparked(states.len(), workers);
        for (shard, state) in states.into_iter().enumerate() {
            scheduler.give_back(shard, state);
        }
        scheduler
    }

    /// A scheduler for `shards` shards whose states do not exist yet: the
    /// first turn of each shard makes its state ([`Scheduler::claim_or_make`]),
    /// or whoever builds one parks it ([`Scheduler::give_back`]), and until
    /// then a [`Scheduler::claim`] of that shard waits for it (or gives up
    /// when the run fails). One of the two for a shard, not both.
    ///
    /// Why: the engine's shards are made by the worker of their first turn,
    /// after the source has started reading, instead of by the source
    /// before its first packet. At `--shards 4096` building them all first
    /// took 70-95 ms before the first packet (BENCHMARKS.md, fifty-fifth
    /// round).
    pub fn unparked(shards: usize, workers: usize) -> Scheduler<S, W> {
        let workers = workers.max(1);
        let mut queues = Vec::with_capacity(shards);
        let mut senders = Vec::with_capacity(shards);
        let mut parked = Vec::with_capacity(shards);
        for _ in 0..shards {
            let (tx, rx) = unbounded();
            senders.push(tx);
            queues.push(rx);
            parked.push(bounded(1));
        }
        let pending = (0..queues.len())
            .map(|_| CachePadded::new(AtomicUsize::new(0)))
            .collect();
        Scheduler {
            senders,
            queues,
            pending,
            parked,
            ready: (0..workers).map(|_| unbounded()).collect(),
            idle: (0..workers)
                .map(|_| CachePadded::new(AtomicBool::new(false)))
                .collect(),
            unmade: (0..shards).map(|_| AtomicBool::new(true)).collect(),
            retired: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        }
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.queues.len()
    }

    /// Pushes `item` onto shard `shard`'s queue and gives the shard a turn
    /// if it had none. Fails once the run failed, or for a shard that does
    /// not exist.
    ///
    /// Every item counted was pushed before, so a turn that handles at
    /// most the count finds each of its items in the queue. With one
    /// producer, a shard handles its items in the order they were pushed.
    pub fn push(&self, shard: usize, item: W) -> Result<(), Failed> {
        if self.has_failed() {
            return Err(Failed);
        }
        let to = self.senders.get(shard).ok_or(Failed)?;
        to.send(item).map_err(|_| Failed)?;
        // Release: a worker that reads this count (acquire) sees the item.
        if self.pending[shard].fetch_add(1, Ordering::AcqRel) == 0 {
            self.make_ready(shard);
        }
        Ok(())
    }

    /// Queues a turn of `shard` for its home worker and, if that worker is
    /// busy, wakes an idle one to take it instead.
    ///
    /// Why home shards first: a shard's filters are megabytes, and a shard
    /// that changes cores finds them in the other core's caches. Why the
    /// wake-up: a worker busy with a heavy shard would otherwise leave its
    /// other shards' turns waiting while another worker sleeps, which is
    /// the imbalance this module exists to remove.
    fn make_ready(&self, shard: usize) {
        let home = shard % self.ready.len();
        // The sender lives in `self`, so the channel is connected.
        let _ = self.ready[home].0.send(Ready::Shard(shard));
        // Pairs with the fence in `next`: either the home worker, about to
        // sleep, sees the turn, or this sees it idle and needs no help.
        fence(Ordering::SeqCst);
        if self.idle[home].load(Ordering::Relaxed) {
            return;
        }
        for (w, idle) in self.idle.iter().enumerate() {
            // One wake-up per sleep: the flag is taken with it.
            if w != home
                && idle
                    .compare_exchange(true, false, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                let _ = self.ready[w].0.send(Ready::Look);
                return;
            }
        }
    }

    /// The next turn for worker `worker`, waiting for one: a turn of one of
    /// its home shards if there is one, else one waiting for a busy worker.
    /// Once the run stopped (every shard retired, or a failure), every call
    /// answers [`Next::Stop`].
    pub fn next(&self, worker: usize) -> Next {
        let me = worker % self.ready.len();
        loop {
            if self.stopped.load(Ordering::Acquire) {
                return Next::Stop;
            }
            if let Some(next) = self.look(me) {
                return next;
            }
            // About to sleep: say so, then look once more, so that a turn
            // made ready meanwhile is seen either here or by `make_ready`.
            // A stop set before this look is seen by it; one set after
            // sends this worker its Stop, which wakes the `recv` below.
            self.idle[me].store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if self.stopped.load(Ordering::Acquire) {
                self.idle[me].store(false, Ordering::Relaxed);
                return Next::Stop;
            }
            let next = match self.look(me) {
                Some(next) => Some(next),
                None => match self.ready[me].1.recv() {
                    Ok(Ready::Shard(shard)) => Some(Next::Shard(shard)),
                    Ok(Ready::Look) => None,
                    Ok(Ready::Stop) | Err(_) => Some(Next::Stop),
                },
            };
            self.idle[me].store(false, Ordering::Relaxed);
            if let Some(next) = next {
                return next;
            }
        }
    }

    /// A turn from worker `me`'s queue, else one stolen from another's.
    fn look(&self, me: usize) -> Option<Next> {
        let workers = self.ready.len();
        for w in (0..workers).map(|d| (me + d) % workers) {
            // A wake-up to look is what this is doing.
            while let Ok(ready) = self.ready[w].1.try_recv() {
                match ready {
                    Ready::Shard(shard) => return Some(Next::Shard(shard)),
                    Ready::Stop => {
                        // Another worker's Stop goes back to its queue: that
                        // worker may be asleep on it, and nothing else would
                        // wake it. (Taking it, as this once did, left a
                        // sleeping worker waiting for good while the thief
                        // stopped, and the run never ended.) The run has
                        // stopped, so this worker stops too.
                        if w != me {
                            let _ = self.ready[w].0.send(Ready::Stop);
                        }
                        return Some(Next::Stop);
                    }
                    Ready::Look => {}
                }
            }
        }
        None
    }

    /// As [`Scheduler::claim`], except that the shard's first turn makes
    /// its state with `make` instead of waiting for one to be parked (a
    /// scheduler from [`Scheduler::unparked`]). Turns of a shard never
    /// overlap, so `make` runs once per shard, and the state is then parked
    /// and claimed as any other.
    pub fn claim_or_make(&self, shard: usize, make: impl FnOnce() -> S) -> Option<S> {
        if self.unmade.get(shard)?.swap(false, Ordering::AcqRel) {
            return Some(make());
        }
        self.claim(shard)
    }

    /// Takes shard `shard`'s state for its turn, waiting if the worker of
    /// the previous turn has not parked it yet; `None` if the run failed.
    pub fn claim(&self, shard: usize) -> Option<S> {
        let claim = &self.parked.get(shard)?.1;
        loop {
            match claim.recv_timeout(FAILURE_POLL) {
                Ok(state) => return Some(state),
                Err(RecvTimeoutError::Timeout) if !self.has_failed() => {}
                Err(_) => return None,
            }
        }
    }

    /// Parks shard `shard`'s state: the first time, from whoever built it
    /// ([`Scheduler::unparked`]; its first turn then claims it instead of
    /// making one); afterwards at the end of each turn
    /// ([`Scheduler::end_turn`]).
    pub fn give_back(&self, shard: usize, state: S) {
        if let Some(unmade) = self.unmade.get(shard) {
            unmade.store(false, Ordering::Release);
        }
        if let Some((park, _)) = self.parked.get(shard) {
            // Cannot block: the one state of the shard is this one.
            let _ = park.send(state);
        }
    }

    /// How many items this turn of shard `shard` may handle: all that were
    /// counted, up to [`TURN_ITEMS`]. Each of them is already in the queue.
    pub fn due(&self, shard: usize) -> usize {
        self.pending
            .get(shard)
            .map_or(0, |p| p.load(Ordering::Acquire).min(TURN_ITEMS))
    }

    /// The next item of shard `shard`'s queue, during its turn.
    pub fn take(&self, shard: usize) -> Option<W> {
        self.queues.get(shard)?.try_recv().ok()
    }

    /// Ends a turn of shard `shard` that handled `handled` items: parks the
    /// state, then passes the turn on if more work was counted meanwhile.
    pub fn end_turn(&self, shard: usize, state: S, handled: usize) {
        self.give_back(shard, state);
        // Parked first: once the count reaches zero, the producer's next
        // push gives another worker the turn, and it claims the state.
        if self.pending[shard].fetch_sub(handled, Ordering::AcqRel) != handled {
            self.make_ready(shard);
        }
    }

    /// Retires a shard for good (its last item was handled and its state
    /// finished); once every shard is retired, every worker stops.
    pub fn retire(&self) {
        if self.retired.fetch_add(1, Ordering::AcqRel) + 1 == self.queues.len() {
            self.stop_workers();
        }
    }

    /// Marks the run failed (a worker panicked): every worker stops, and
    /// claims give up instead of waiting.
    pub fn fail(&self) {
        self.failed.store(true, Ordering::Release);
        self.stop_workers();
    }

    /// Whether [`Scheduler::fail`] was called.
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Sets the stop, then wakes every worker with its [`Ready::Stop`].
    fn stop_workers(&self) {
        self.stopped.store(true, Ordering::Release);
        // Pairs with the fence in `next`: a worker about to sleep either
        // sees the stop or is already idle on its queue, which this sends to.
        fence(Ordering::SeqCst);
        for (ready, _) in &self.ready {
            let _ = ready.send(Ready::Stop);
        }
    }
}

/// Calls [`Scheduler::fail`] if the thread holding it unwinds: dropped
/// during a panic, it stops the run instead of leaving it waiting on a
/// shard whose state died with a worker, or workers waiting for work from
/// a producer that died.
pub struct FailOnPanic<'a, S, W>(pub &'a Scheduler<S, W>);

impl<S, W> Drop for FailOnPanic<'_, S, W> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fail();
        }
    }
}
