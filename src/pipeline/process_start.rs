//! When the process started, as the binary marks it, so that a run's
//! `start-up` figure counts everything before its first packet: parsing
//! the command line, validation (sizing, models), opening the inputs and
//! building the shards, not only the part inside the engine.
//!
//! A library user who never marks it gets the engine's own measure:
//! validation plus the engine's time before the first packet.

use std::sync::OnceLock;
use std::time::Instant;

static PROCESS_START: OnceLock<Instant> = OnceLock::new();

/// Marks now as the process's start; the first call wins. The binary calls
/// it first thing in `main`. What comes before that (the kernel's `exec`,
/// the dynamic loader) is not counted: well under a millisecond here.
///
/// ```
/// use flowsieve::pipeline::{mark_process_start, process_started};
/// mark_process_start();
/// let first = process_started().unwrap();
/// mark_process_start(); // a later call changes nothing
/// assert_eq!(process_started(), Some(first));
/// ```
pub fn mark_process_start() {
    let _ = PROCESS_START.set(Instant::now());
}

/// The instant [`mark_process_start`] recorded, if it was called.
pub fn process_started() -> Option<Instant> {
    PROCESS_START.get().copied()
}
