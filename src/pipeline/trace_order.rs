//! Puts the shards' events back in trace order before the sink hears them.
//!
//! Each shard's worker hands its events over as it finishes a batch, and
//! the shards run on several threads, so the events of different shards
//! arrive in an order that depends on scheduling: two runs of the same
//! command wrote the same lines in different orders. Within a batch the
//! stages run one after the other, so even one shard's events come heavy
//! ones first, then new-flow ones. A file of events that tcpdump or Zeek
//! users can read top to bottom, and compare with `cmp` between runs,
//! needs them sorted by the packet that caused them.
//!
//! Sorting needs to know when no event of a smaller packet index can still
//! come: a watermark. The dispatcher knows, for every shard, the first
//! packet of the oldest work it has sent and not yet heard back about (a
//! batch's first record; for a tick or a batch of updates alone, the
//! stream's position when it was sent), and the first record of the batch
//! it is still filling. A shard's events come in its work's order, so every
//! event of that shard below that packet has arrived; a shard with nothing
//! in flight and nothing pending has nothing more to say until the stream
//! moves on. The smallest of these over the shards is the watermark, and
//! every event below it is final. Events wait until then, so the memory
//! held is bounded by the records in flight, which the engine already
//! bounds.
//!
//! Each shard's events are kept in a queue of their own, sorted as they
//! come (a batch's events are two sorted runs, the heavy stage's and the
//! new-flow stage's, and every batch's packets follow the last's). A
//! release finds the queues whose first event is due through a heap of
//! the queues' heads, lists their due events as integer sort keys, sorts
//! those, and takes each event from the front of its queue. One heap over
//! every event held instead cost the source thread 2.8 % of a run's
//! samples in its `pop` alone (80-byte events sifted down), at 112 k
//! events on the 1.5 M-packet benchmark trace (BENCHMARKS.md,
//! seventy-fourth round).
//!
//! Ties at one packet follow the stages: the window-end event of the window
//! that packet's arrival closed comes first (it was sent at the packet's
//! index, before the packet), then the packet's heavy-flow event, then its
//! new-flow event.

use super::event::Event;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// The position of an event in trace order: the packet index, then the
/// rank within the packet (no two events of one packet share a rank but
/// window ends, which only a live clock sends at one position, and those
/// come in the order they were closed).
type Position = (u64, u8);

/// Where a window end sorts against the events of the packet at its
/// position: before them.
const RANK_WINDOW_END: u8 = 0;
const RANK_HEAVY: u8 = 1;
const RANK_NEW_FLOW: u8 = 2;

/// The position of a shard's event.
fn position(event: &Event) -> Position {
    match event {
        Event::Heavy(h) => (h.seq, RANK_HEAVY),
        Event::NewFlow(n) => (n.seq, RANK_NEW_FLOW),
        // Window ends come through `hold_window_end`, with the position the
        // dispatcher closed them at; a shard never sends one.
        Event::WindowEnd(_) => (u64::MAX, RANK_WINDOW_END),
    }
}

/// `events` in trace order: the stages' runs, each sorted, merged in one
/// pass (a general sort of a message's 80-byte events was 0.3 % of a run's
/// samples on the benchmark trace, for the few messages with heavy-flow
/// events).
fn merge_runs(mut events: Vec<Event>) -> Vec<Event> {
    // Where the second run begins.
    let split = (1..events.len())
        .find(|&i| position(&events[i - 1]) > position(&events[i]))
        .unwrap_or(events.len());
    if !events[split..].is_sorted_by_key(position) {
        // Not the two runs of the built-in stages: sort (stable, so equal
        // positions keep their order).
        events.sort_by_key(position);
        return events;
    }
    let (a, b) = events.split_at(split);
    let mut out = Vec::with_capacity(events.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if position(&b[j]) < position(&a[i]) {
            out.push(b[j]);
            j += 1;
        } else {
            out.push(a[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// The events held back, and every shard's work in flight.
///
/// Every operation is about O(log shards) a message, not O(shards): at
/// `--shards 4096` a window's tick comes back 4096 times, and a scan of
/// every shard for each of them made a run with events 4.7 times slower
/// (BENCHMARKS.md, seventy-fourth round).
pub(super) struct TraceOrder {
    /// Per shard, the packet index where each piece of work sent and not
    /// yet acknowledged begins, oldest first.
    in_flight: Vec<VecDeque<u64>>,
    /// Per shard, the first packet index of the batch the dispatcher is
    /// filling, if it holds a record.
    filling: Vec<Option<u64>>,
    /// Per shard, the first packet index of which events may still come:
    /// its oldest work in flight, else its batch being filled; `u64::MAX`
    /// when it has neither.
    front: Vec<u64>,
    /// The fronts, smallest first, with stale entries (a front since moved)
    /// dropped when they reach the top. A shard's front only grows, or
    /// becomes `u64::MAX` and later comes back at the stream's position,
    /// above every stale entry of its own.
    fronts: BinaryHeap<Reverse<(u64, usize)>>,
    /// Per shard, its events not yet released, in trace order: the
    /// workers' messages themselves, each sorted, not copied event by
    /// event.
    held: Vec<VecDeque<Run>>,
    /// The window ends not yet released, at their positions, in the order
    /// they were closed (which is trace order).
    window_ends: VecDeque<(Position, Event)>,
    /// The position of the first event of every queue that is not empty,
    /// with the queue's index (`held.len()` for the window ends), smallest
    /// first: the merge's heads.
    heads: BinaryHeap<Reverse<(Position, usize)>>,
    /// Scratch for a release's sort keys ([`sort_key`]).
    keys: Vec<u128>,
    /// Events held, window ends included.
    holding: usize,
}

/// Events held past which a batch still being filled may no longer hold
/// the watermark back ([`TraceOrder::blocking_batch`]); about 6 MB.
pub(super) const MOST_HELD_EVENTS: usize = 1 << 16;

/// An event's position and its queue's index in one integer that sorts
/// as the pair does.
fn sort_key((seq, rank): Position, queue: usize) -> u128 {
    (u128::from(seq) << 40) | (u128::from(rank) << 32) | queue as u128
}

/// One message's events, sorted, and how many of them went out.
struct Run {
    events: Vec<Event>,
    next: usize,
}

impl TraceOrder {
    pub(super) fn new(shards: usize) -> TraceOrder {
        TraceOrder {
            in_flight: (0..shards).map(|_| VecDeque::new()).collect(),
            filling: vec![None; shards],
            front: vec![u64::MAX; shards],
            fronts: BinaryHeap::new(),
            held: (0..shards).map(|_| VecDeque::new()).collect(),
            window_ends: VecDeque::new(),
            heads: BinaryHeap::new(),
            keys: Vec::new(),
            holding: 0,
        }
    }

    /// The dispatcher put the record with packet index `seq` into `shard`'s
    /// empty batch.
    pub(super) fn filling(&mut self, shard: usize, seq: u64) {
        if let Some(f) = self.filling.get_mut(shard) {
            *f = Some(seq);
            self.refresh(shard);
        }
    }

    /// Work for `shard` starting at packet index `from` went out: the batch
    /// it was filling, or a tick or updates alone (at the stream's
    /// position).
    pub(super) fn sent(&mut self, shard: usize, from: u64) {
        if let (Some(q), Some(f)) = (self.in_flight.get_mut(shard), self.filling.get_mut(shard)) {
            q.push_back(from);
            // The batch being filled went out with this work, or was empty.
            *f = None;
            self.refresh(shard);
        }
    }

    /// `shard` sent `events`, and finished its oldest work if `work_done`
    /// (the events are that work's).
    pub(super) fn arrived(&mut self, shard: usize, mut events: Vec<Event>, work_done: bool) {
        let Some(q) = self.held.get_mut(shard) else {
            return;
        };
        if !events.is_empty() {
            // A batch's events are the stages' runs one after the other
            // (most batches hold new-flow events alone, already sorted);
            // every event of it comes after every event held from earlier
            // batches.
            if !events.is_sorted_by_key(position) {
                events = merge_runs(events);
            }
            if q.is_empty() {
                self.heads.push(Reverse((position(&events[0]), shard)));
            }
            self.holding += events.len();
            q.push_back(Run { events, next: 0 });
        }
        if work_done {
            self.in_flight[shard].pop_front();
            self.refresh(shard);
        }
    }

    /// A window end, closed when the stream reached packet index `at`.
    pub(super) fn hold_window_end(&mut self, at: u64, event: Event) {
        let at = (at, RANK_WINDOW_END);
        if self.window_ends.is_empty() {
            self.heads.push(Reverse((at, self.held.len())));
        }
        self.holding += 1;
        self.window_ends.push_back((at, event));
    }

    fn refresh(&mut self, shard: usize) {
        let front = self.in_flight[shard]
            .front()
            .copied()
            .or(self.filling[shard])
            .unwrap_or(u64::MAX);
        if front != self.front[shard] {
            self.front[shard] = front;
            if front != u64::MAX {
                self.fronts.push(Reverse((front, shard)));
            }
        }
    }

    /// The shard whose batch, still being filled, holds the watermark back
    /// while more than [`MOST_HELD_EVENTS`] events wait: the dispatcher
    /// sends it as it is, so that the events go out.
    ///
    /// Why: a shard that got a packet and then none for a long stretch
    /// (few flows, or flows that all hash elsewhere for a while) keeps a
    /// batch of one record open, and without a heavy stage no window's
    /// tick flushes it, so every other shard's events would wait for the
    /// end of the trace, in memory: at a new-flow event a flow, 88 bytes
    /// each, a 10 M-flow trace would hold 880 MB.
    pub(super) fn blocking_batch(&mut self) -> Option<usize> {
        if self.holding <= MOST_HELD_EVENTS {
            return None;
        }
        self.watermark();
        let &Reverse((_, shard)) = self.fronts.peek()?;
        (self.in_flight[shard].is_empty() && self.filling[shard].is_some()).then_some(shard)
    }

    /// The smallest front over the shards.
    fn watermark(&mut self) -> u64 {
        while let Some(&Reverse((at, shard))) = self.fronts.peek() {
            if self.front[shard] == at {
                return at;
            }
            self.fronts.pop();
        }
        u64::MAX
    }

    /// Hands every event that no later arrival can precede to `emit`, in
    /// trace order.
    pub(super) fn release(&mut self, emit: impl FnMut(&Event)) {
        if self.heads.is_empty() {
            return;
        }
        // Every event of a packet below the watermark, and window ends at
        // it: all of their heavy-flow events are below it, and they precede
        // the packet's own events.
        let watermark = self.watermark();
        self.release_through((watermark, RANK_WINDOW_END), emit);
    }

    /// Hands every event held to `emit`, in trace order (the stream ended
    /// and every shard finished).
    pub(super) fn release_all(&mut self, emit: impl FnMut(&Event)) {
        self.release_through((u64::MAX, u8::MAX), emit);
    }

    /// The first event of queue `i` not yet released, and its position.
    fn head(&self, i: usize) -> Option<(Position, &Event)> {
        match self.held.get(i) {
            Some(q) => q
                .front()
                .and_then(|r| r.events.get(r.next))
                .map(|e| (position(e), e)),
            None => self.window_ends.front().map(|(at, e)| (*at, e)),
        }
    }

    /// Drops the first event of queue `i`.
    fn advance(&mut self, i: usize) {
        match self.held.get_mut(i) {
            Some(q) => {
                if let Some(r) = q.front_mut() {
                    r.next += 1;
                    if r.next >= r.events.len() {
                        q.pop_front();
                    }
                }
            }
            None => {
                self.window_ends.pop_front();
            }
        }
    }

    /// The merge. Every queue whose head is within `bound` leaves the
    /// heap once, its events within `bound` are listed as sort keys, the
    /// keys are sorted, and each event is taken from the front of its
    /// queue in that order. Popping the heap for each event instead, as
    /// a k-way merge does, cost two heap operations an event, since the
    /// shards' events interleave packet by packet: the heap's `pop` alone
    /// was 0.7 % of a run's samples on the benchmark trace, and such runs
    /// took 1.05-1.07 times the unordered engine's wall time, against
    /// none measurable now (BENCHMARKS.md, seventy-fourth round).
    fn release_through(&mut self, bound: Position, mut emit: impl FnMut(&Event)) {
        let mut keys = std::mem::take(&mut self.keys);
        while let Some(&Reverse((at, i))) = self.heads.peek() {
            if at > bound {
                break;
            }
            self.heads.pop();
            let mut next = None;
            match self.held.get(i) {
                Some(q) => {
                    for r in q {
                        for e in &r.events[r.next..] {
                            let at = position(e);
                            if at > bound {
                                next = Some(at);
                                break;
                            }
                            keys.push(sort_key(at, i));
                        }
                        if next.is_some() {
                            break;
                        }
                    }
                }
                None => {
                    for (at, _) in &self.window_ends {
                        if *at > bound {
                            next = Some(*at);
                            break;
                        }
                        keys.push(sort_key(*at, i));
                    }
                }
            }
            if let Some(at) = next {
                self.heads.push(Reverse((at, i)));
            }
        }
        // Keys are unique but for window ends at one position, which come
        // from one queue in the order they were closed.
        keys.sort_unstable();
        for &k in &keys {
            let i = (k & u128::from(u32::MAX)) as usize;
            if let Some((_, e)) = self.head(i) {
                emit(e);
            }
            self.advance(i);
            self.holding = self.holding.saturating_sub(1);
        }
        keys.clear();
        self.keys = keys;
    }
}
