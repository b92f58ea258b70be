//! A short first-in, first-out queue of the prior coordinator's sampled
//! records, so that their flow-set slots are fetched while later records
//! are read.
//!
//! Why: the selective stage's prior coordinator runs on the source thread
//! and, for each sampled record, looks its flow up in the round's exact
//! sets ([`super::CappedFlowSet`]: the cache window's flows, and the flows
//! already queried). Those sets hold a window's distinct flows, megabytes
//! on a busy link, so each lookup was a cache miss the source thread sat
//! through: on the 1.5 M-packet benchmark trace `query_sampled` took 2.7 %
//! of the whole process's samples, almost all of it on the two loads of
//! the slots (`perf annotate`; BENCHMARKS.md, sixty-ninth round). The
//! coordinator now asks for the slots when it samples a record and answers
//! the record a few sampled records later, from cache.
//!
//! Answering later must not change an answer, nor when an update of the
//! priors reaches the shards. The coordinator keeps three rules:
//! - records are answered in the order they came, so every set and count
//!   sees the same sequence of operations as before;
//! - the queue is emptied before anything reads what the answers change:
//!   a new phase or round, the priors' update, the coordinator's finish;
//! - a query whose class's samples could reach the class's update mark,
//!   counting every query of the class still queued, empties the queue
//!   and is answered at once. A queued query can therefore never cross a
//!   mark, and an update goes out before exactly the record it went out
//!   before when every record was answered as it came
//!   ([`super::SelectiveConfig::prior_lookahead`]).
//!
//! ```
//! use flowsieve::pipeline::lookahead::{SampleLookahead, Sampled};
//! let mut q = SampleLookahead::new(2, 3);
//! assert_eq!(q.push(Sampled::Query { class: 1, hash: 7 }), None);
//! assert_eq!(q.push(Sampled::Cache(8)), None);
//! assert_eq!(q.queued_queries(1), 1);
//! // Full: the oldest comes out as the newest goes in.
//! assert_eq!(q.push(Sampled::Cache(9)), Some(Sampled::Query { class: 1, hash: 7 }));
//! assert_eq!(q.queued_queries(1), 0);
//! assert_eq!(q.pop(), Some(Sampled::Cache(8)));
//! assert_eq!(q.pop(), Some(Sampled::Cache(9)));
//! assert_eq!(q.pop(), None);
//! ```

use std::collections::VecDeque;

/// A sampled record waiting for its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampled {
    /// A sampled record of a cache window: its flow joins the cache set.
    Cache(u64),
    /// A sampled query of class `class` with flow hash `hash`.
    Query {
        /// The record's class.
        class: usize,
        /// The record's flow hash.
        hash: u64,
    },
}

/// A first-in, first-out queue of at most `capacity` sampled records, with
/// the count of queued queries per class.
#[derive(Clone, Debug)]
pub struct SampleLookahead {
    /// The queued records, oldest first (allocated once: it never holds
    /// more than `capacity`).
    held: VecDeque<Sampled>,
    capacity: usize,
    /// Queued queries per class.
    queries: Vec<u64>,
}

impl SampleLookahead {
    /// An empty queue of `capacity` records (0: every record is answered as
    /// it comes) for `classes` classes.
    pub fn new(capacity: usize, classes: usize) -> SampleLookahead {
        SampleLookahead {
            held: VecDeque::with_capacity(capacity),
            capacity,
            queries: vec![0; classes],
        }
    }

    /// The most records it holds.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// True when nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Queries of `class` queued (0 for a class out of range).
    #[inline]
    pub fn queued_queries(&self, class: usize) -> u64 {
        self.queries.get(class).copied().unwrap_or(0)
    }

    /// Queues `s`; when the queue was full, the oldest record comes out
    /// first and is returned, to be answered before any later one. With a
    /// capacity of 0, `s` itself comes back.
    #[inline]
    pub fn push(&mut self, s: Sampled) -> Option<Sampled> {
        if self.capacity == 0 {
            return Some(s);
        }
        let out = if self.held.len() >= self.capacity {
            self.pop()
        } else {
            None
        };
        self.held.push_back(s);
        if let Sampled::Query { class, .. } = s
            && let Some(q) = self.queries.get_mut(class)
        {
            *q += 1;
        }
        out
    }

    /// The oldest queued record, taken out.
    #[inline]
    pub fn pop(&mut self) -> Option<Sampled> {
        let s = self.held.pop_front()?;
        if let Sampled::Query { class, .. } = s
            && let Some(q) = self.queries.get_mut(class)
        {
            *q -= 1;
        }
        Some(s)
    }
}
