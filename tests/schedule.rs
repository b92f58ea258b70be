//! The shard scheduler (`pipeline::schedule`): every item reaches its
//! shard, in the order it was pushed, on real threads with random delays;
//! a busy worker's turns are taken by an idle one; and a failed run stops
//! instead of hanging.

use crate::common;
use flowsieve::pipeline::schedule::{FailOnPanic, Next, Scheduler};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// A shard's state in these tests: the items it handled, in order, and
/// which workers ran its turns.
#[derive(Default)]
struct Log {
    items: Vec<u64>,
    workers: Vec<usize>,
    /// Made by a turn (`Scheduler::claim_or_make`), not parked beforehand.
    made_by_a_turn: bool,
}

/// An item: a number, or the end of the shard's stream.
type Item = Option<u64>;

/// [`common::within`], for the scheduler: a lost turn would otherwise
/// hang the test.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    common::within(limit, "the scheduler lost a turn or a wake-up", f)
}

/// The engine's worker loop, with a random pause of up to `pause_us` before
/// each item (a worker descheduled in the middle of a turn). With
/// `or_make` it claims as the engine does (`claim_or_make`, which makes a
/// state only for a shard of an `unparked` scheduler that nobody parked
/// one for); without, with a plain `claim`.
fn work(
    scheduler: &Scheduler<Log, Item>,
    me: usize,
    seed: u64,
    pause_us: u64,
    or_make: bool,
) -> Vec<(usize, Log)> {
    let _guard = FailOnPanic(scheduler);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut finished = Vec::new();
    while let Next::Shard(shard) = scheduler.next(me) {
        let made = || Log {
            made_by_a_turn: true,
            ..Log::default()
        };
        let claimed = if or_make {
            scheduler.claim_or_make(shard, made)
        } else {
            scheduler.claim(shard)
        };
        let Some(mut log) = claimed else {
            break;
        };
        log.workers.push(me);
        let due = scheduler.due(shard);
        assert!(due >= 1, "a turn without work");
        let mut handled = 0;
        let mut ended = false;
        while handled < due && !ended {
            if pause_us > 0 && rng.random_bool(0.05) {
                std::thread::sleep(Duration::from_micros(rng.random_range(0..pause_us)));
            }
            let item = scheduler
                .take(shard)
                .expect("an item counted is in the queue");
            handled += 1;
            match item {
                Some(n) => log.items.push(n),
                None => ended = true,
            }
        }
        if ended {
            finished.push((shard, log));
            scheduler.retire();
        } else {
            scheduler.end_turn(shard, log, handled);
        }
    }
    finished
}

/// Pushes `items` numbered items spread over the shards by a random choice
/// (skewed towards shard 0, as a heavy flow skews a shard), then the ends;
/// returns what each shard should have seen.
fn produce(scheduler: &Scheduler<Log, Item>, items: u64, seed: u64) -> Vec<Vec<u64>> {
    let shards = scheduler.shards();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut expected = vec![Vec::new(); shards];
    for n in 0..items {
        let shard = if rng.random_bool(0.4) {
            0
        } else {
            rng.random_range(0..shards)
        };
        scheduler.push(shard, Some(n)).unwrap();
        expected[shard].push(n);
        if rng.random_bool(0.001) {
            // The producer pausing too: the workers run dry and sleep.
            std::thread::sleep(Duration::from_micros(rng.random_range(0..500)));
        }
    }
    for shard in 0..shards {
        scheduler.push(shard, None).unwrap();
    }
    expected
}

/// How a run's shard states come to exist.
#[derive(Clone, Copy, Debug, PartialEq)]
enum States {
    /// All parked before the run (`Scheduler::new`).
    Parked,
    /// Parked by the workers one by one, with random pauses, while the
    /// producer already pushes (`Scheduler::unparked`, then `give_back`):
    /// a turn of a shard not parked yet waits for its state.
    ParkedLate,
    /// Made by each shard's first turn (`Scheduler::unparked`, then
    /// `claim_or_make`), as the engine does.
    MadeByFirstTurn,
}

fn run(shards: usize, workers: usize, items: u64, seed: u64, pause_us: u64) -> Vec<(usize, Log)> {
    run_with(States::Parked, shards, workers, items, seed, pause_us)
}

/// Runs `items` items over `shards` shards and `workers` workers on real
/// threads, and checks that every item reached its shard in order, that
/// every shard finished once, and that each state came from where
/// `states` says (made by a turn exactly when nobody parked one).
fn run_with(
    states: States,
    shards: usize,
    workers: usize,
    items: u64,
    seed: u64,
    pause_us: u64,
) -> Vec<(usize, Log)> {
    let scheduler: Scheduler<Log, Item> = match states {
        States::Parked => Scheduler::new((0..shards).map(|_| Log::default()).collect(), workers),
        States::ParkedLate | States::MadeByFirstTurn => Scheduler::unparked(shards, workers),
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|me| {
                let scheduler = &scheduler;
                scope.spawn(move || {
                    if states == States::ParkedLate {
                        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ((me as u64) << 8));
                        for shard in (me..shards).step_by(workers) {
                            std::thread::sleep(Duration::from_micros(rng.random_range(0..2_000)));
                            scheduler.give_back(shard, Log::default());
                        }
                    }
                    // Parked late, a plain claim: `claim_or_make` would
                    // make a state for a shard whose own is on its way.
                    let or_make = states != States::ParkedLate;
                    work(scheduler, me, seed ^ me as u64, pause_us, or_make)
                })
            })
            .collect();
        let expected = produce(&scheduler, items, seed);
        let mut finished: Vec<(usize, Log)> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        finished.sort_by_key(|f| f.0);
        assert_eq!(
            finished.len(),
            shards,
            "{states:?}, seed {seed}: every shard finished once"
        );
        for ((shard, log), want) in finished.iter().zip(&expected) {
            assert_eq!(
                &log.items, want,
                "{states:?}, seed {seed}: shard {shard} saw its items out of order or lost some"
            );
            assert_eq!(
                log.made_by_a_turn,
                states == States::MadeByFirstTurn,
                "{states:?}, seed {seed}: shard {shard}'s state came from the wrong place"
            );
        }
        finished
    })
}

#[test]
fn every_item_reaches_its_shard_in_order_on_real_threads() {
    for (seed, (shards, workers, pause_us)) in
        [(8, 2, 0), (8, 3, 50), (5, 4, 200), (1, 3, 20), (16, 2, 5)]
            .into_iter()
            .enumerate()
    {
        within(Duration::from_secs(120), move || {
            run(shards, workers, 60_000, seed as u64, pause_us)
        });
    }
}

#[test]
fn a_busy_workers_shards_are_run_by_another() {
    // Two workers. Worker 0 holds a turn of shard 0 and will not end it
    // until shard 2 (whose home is also worker 0) has been handled. Only a
    // worker that takes another's turns can do that; a fixed assignment
    // would wait forever, and `within` fails the test.
    let handled_2 = within(Duration::from_secs(30), || {
        let scheduler: Scheduler<Log, Item> =
            Scheduler::new((0..3).map(|_| Log::default()).collect(), 2);
        let shard_2_done = AtomicBool::new(false);
        let turns = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            let scheduler = &scheduler;
            let (done, turns) = (&shard_2_done, &turns);
            let busy = scope.spawn(move || {
                let Next::Shard(0) = scheduler.next(0) else {
                    panic!("worker 0's first turn is shard 0's");
                };
                let log = scheduler.claim(0).unwrap();
                let due = scheduler.due(0);
                for _ in 0..due {
                    scheduler.take(0).unwrap();
                }
                while !done.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                scheduler.end_turn(0, log, due);
            });
            scheduler.push(0, Some(0)).unwrap();
            // Worker 0 is now inside shard 0's turn (or about to be).
            std::thread::sleep(Duration::from_millis(20));
            let idle = scope.spawn(move || {
                let mut by = Vec::new();
                while let Next::Shard(shard) = scheduler.next(1) {
                    let log = scheduler.claim(shard).unwrap();
                    let due = scheduler.due(shard);
                    for _ in 0..due {
                        scheduler.take(shard).unwrap();
                    }
                    turns.fetch_add(1, Ordering::Relaxed);
                    by.push(shard);
                    scheduler.end_turn(shard, log, due);
                    if shard == 2 {
                        done.store(true, Ordering::Release);
                        break;
                    }
                }
                by
            });
            // Worker 1 is asleep on its own (empty) queue when this arrives.
            std::thread::sleep(Duration::from_millis(20));
            scheduler.push(2, Some(1)).unwrap();
            busy.join().unwrap();
            idle.join().unwrap()
        })
    });
    assert_eq!(handled_2, vec![2]);
}

#[test]
fn shards_spread_over_the_workers() {
    // With a pause now and then, a worker finds its own queue empty while
    // the other's holds turns, and takes them: some shard ran on more than
    // one worker (this fails when a worker only looks at its own queue).
    // Each worker also ran turns at all.
    let finished = within(Duration::from_secs(120), || run(8, 2, 60_000, 7, 100));
    let mut per_worker = [0usize; 2];
    for (_, log) in &finished {
        for &w in &log.workers {
            per_worker[w] += 1;
        }
    }
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "turns per worker {per_worker:?}"
    );
    assert!(
        finished
            .iter()
            .any(|(_, log)| log.workers.iter().any(|&w| w != log.workers[0])),
        "no shard moved between workers"
    );
}

#[test]
fn a_failed_run_stops_the_workers_and_the_producer() {
    let scheduler: Scheduler<Log, Item> =
        Scheduler::new((0..4).map(|_| Log::default()).collect(), 3);
    let outcome = within(Duration::from_secs(30), move || {
        std::thread::scope(|scope| {
            let scheduler = &scheduler;
            let workers: Vec<_> = (0..3)
                .map(|me| {
                    scope.spawn(move || {
                        // A worker that dies holding shard 1's state.
                        let _guard = FailOnPanic(scheduler);
                        while let Next::Shard(shard) = scheduler.next(me) {
                            let log = scheduler.claim(shard)?;
                            if shard == 1 {
                                panic!("a stage panicked");
                            }
                            let due = scheduler.due(shard);
                            for _ in 0..due {
                                scheduler.take(shard);
                            }
                            scheduler.end_turn(shard, log, due);
                        }
                        Some(())
                    })
                })
                .collect();
            for n in 0..100 {
                if scheduler.push(n % 4, Some(n as u64)).is_err() {
                    break;
                }
            }
            let panicked = workers
                .into_iter()
                .map(|w| w.join())
                .filter(Result::is_err)
                .count();
            (
                panicked,
                scheduler.has_failed(),
                scheduler.push(0, Some(0)).is_err(),
                scheduler.claim(1).is_none(),
            )
        })
    });
    // One worker died; the others stopped; pushing and claiming give up.
    assert_eq!(outcome, (1, true, true, true));
}

/// Every worker stops once every shard retired, whichever queue its Stop
/// was taken from. A worker looks at the other workers' queues when its
/// own is empty, and once took the Stop it found there: on a loaded CI
/// machine the thief stopped, the Stop's owner slept on its empty queue
/// for good, and `pipeline::report_is_identical_for_1_2_and_4_threads`
/// hung. Here the order that loses a Stop is played on one thread: worker
/// 1 asks twice (its own Stop, then, without the fix, worker 2's), worker
/// 2 then takes worker 0's, and worker 0 would sleep forever.
#[test]
fn every_worker_stops_whichever_queue_its_stop_was_taken_from() {
    let scheduler: Scheduler<Log, Item> =
        Scheduler::new((0..3).map(|_| Log::default()).collect(), 3);
    for _ in 0..3 {
        scheduler.retire();
    }
    assert_eq!(scheduler.next(1), Next::Stop);
    assert_eq!(scheduler.next(1), Next::Stop);
    assert_eq!(scheduler.next(2), Next::Stop);
    let scheduler = std::sync::Arc::new(scheduler);
    let last = std::sync::Arc::clone(&scheduler);
    assert_eq!(
        within(Duration::from_secs(10), move || last.next(0)),
        Next::Stop
    );
}

/// The same on real threads: thousands of short runs, each ending while
/// the workers are in every state (busy, looking at each other's queues,
/// asleep), must all end. One shard more than workers, or fewer, and one
/// item each, so that the Stops go out while the workers look.
#[test]
fn many_short_runs_all_end() {
    within(Duration::from_secs(120), || {
        for seed in 0..3_000u64 {
            let workers = 2 + (seed % 3) as usize;
            let shards = 1 + (seed % 5) as usize;
            run(shards, workers, 1 + seed % 4, seed, 0);
        }
    });
}

/// States parked after their work arrived (`Scheduler::unparked`, then
/// `give_back`): each worker parks its home shards' states one by one with
/// random pauses while the producer already pushes, and another worker
/// that takes the turn of a shard not parked yet waits for its state.
/// Every item still reaches its shard, in order, and every shard finishes
/// once.
#[test]
fn states_parked_after_their_work_arrived_are_waited_for() {
    within(Duration::from_secs(120), || {
        for seed in 0..40u64 {
            let (shards, workers) = (1 + (seed % 9) as usize, 1 + (seed % 4) as usize);
            run_with(States::ParkedLate, shards, workers, 2_000, seed, 50);
        }
    });
}

/// A shard whose state never comes (its builder failed) does not hang the
/// turn waiting for it: once the run fails, the claim gives up.
#[test]
fn a_claim_of_a_state_never_parked_gives_up_when_the_run_fails() {
    let scheduler: Scheduler<Log, Item> = Scheduler::unparked(2, 1);
    scheduler.give_back(0, Log::default());
    let scheduler = std::sync::Arc::new(scheduler);
    let waiting = std::sync::Arc::clone(&scheduler);
    let claim = std::thread::spawn(move || waiting.claim(1).is_none());
    std::thread::sleep(Duration::from_millis(50));
    scheduler.fail();
    assert!(
        within(Duration::from_secs(10), move || claim.join().unwrap()),
        "the claim must give up"
    );
    // The parked shard is still there to take.
    assert!(scheduler.claim(0).is_some());
}

/// The engine's way (`Scheduler::unparked`, then `claim_or_make`): no state
/// exists until its shard's first turn, which makes it. Every shard's state
/// is made exactly once, by a turn, and every item still reaches its shard
/// in order, with workers that pause mid-turn and steal each other's turns.
#[test]
fn every_state_is_made_once_by_its_shards_first_turn() {
    within(Duration::from_secs(120), || {
        for seed in 0..200u64 {
            let (shards, workers) = (1 + (seed % 9) as usize, 1 + (seed % 4) as usize);
            run_with(States::MadeByFirstTurn, shards, workers, 500, seed, 20);
        }
    });
}
