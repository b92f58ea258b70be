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
//! new-flow stage's, and every batch's packets follow the last's), and a
//! release merges the queues through a heap of their heads, one entry a
//! queue. One heap over every event held instead cost the source thread
//! 2.8 % of a run's samples in its `pop` alone (80-byte events sifted
//! down), at 112 k events on the 1.5 M-packet benchmark trace
//! (BENCHMARKS.md, seventy-fourth round).
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
    /// Per shard, its events not yet released, in trace order; after them,
    /// the window ends not yet released, in the order they were closed
    /// (which is trace order).
    held: Vec<VecDeque<(Position, Event)>>,
    /// The position of the first event of every queue of `held` that is
    /// not empty, with the queue's index, smallest first: the merge's
    /// heads.
    heads: BinaryHeap<Reverse<(Position, usize)>>,
}

impl TraceOrder {
    pub(super) fn new(shards: usize) -> TraceOrder {
        TraceOrder {
            in_flight: (0..shards).map(|_| VecDeque::new()).collect(),
            filling: vec![None; shards],
            front: vec![u64::MAX; shards],
            fronts: BinaryHeap::new(),
            held: (0..=shards).map(|_| VecDeque::new()).collect(),
            heads: BinaryHeap::new(),
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
    pub(super) fn arrived(&mut self, shard: usize, events: &[Event], work_done: bool) {
        let Some(q) = self
            .held
            .get_mut(shard)
            .filter(|_| shard < self.front.len())
        else {
            return;
        };
        if !events.is_empty() {
            let from = q.len();
            q.extend(events.iter().map(|e| (position(e), *e)));
            // A batch's events are the stages' runs one after the other
            // (most batches hold new-flow events alone, already sorted);
            // every event of it comes after every event held from earlier
            // batches.
            if !q.range(from..).is_sorted_by_key(|(at, _)| *at) {
                q.make_contiguous()[from..].sort_by_key(|(at, _)| *at);
            }
            if let (0, Some((at, _))) = (from, q.front()) {
                self.heads.push(Reverse((*at, shard)));
            }
        }
        if work_done {
            self.in_flight[shard].pop_front();
            self.refresh(shard);
        }
    }

    /// A window end, closed when the stream reached packet index `at`.
    pub(super) fn hold_window_end(&mut self, at: u64, event: Event) {
        let i = self.front.len();
        if let Some(q) = self.held.get_mut(i) {
            q.push_back(((at, RANK_WINDOW_END), event));
            if q.len() == 1 {
                self.heads.push(Reverse(((at, RANK_WINDOW_END), i)));
            }
        }
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

    /// Moves every event that no later arrival can precede into `out`, in
    /// trace order.
    pub(super) fn release(&mut self, out: &mut Vec<Event>) {
        if self.heads.is_empty() {
            return;
        }
        // Every event of a packet below the watermark, and window ends at
        // it: all of their heavy-flow events are below it, and they precede
        // the packet's own events.
        let watermark = self.watermark();
        self.release_through((watermark, RANK_WINDOW_END), out);
    }

    /// Moves every event held into `out`, in trace order (the stream ended
    /// and every shard finished).
    pub(super) fn release_all(&mut self, out: &mut Vec<Event>) {
        self.release_through((u64::MAX, u8::MAX), out);
    }

    /// The merge: the smallest head goes out while it is within `bound`,
    /// and its queue's next event becomes that queue's head.
    fn release_through(&mut self, bound: Position, out: &mut Vec<Event>) {
        while let Some(&Reverse((at, i))) = self.heads.peek() {
            if at > bound {
                break;
            }
            self.heads.pop();
            let Some(q) = self.held.get_mut(i) else {
                continue;
            };
            out.extend(q.pop_front().map(|(_, e)| e));
            if let Some((next, _)) = q.front() {
                self.heads.push(Reverse((*next, i)));
            }
        }
    }
}
