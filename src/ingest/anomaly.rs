//! A per-file log of recoverable anomalies: the first occurrence of each kind
//! (with its position) and how many times it happened.

use super::error::{Anomaly, AnomalyKind, Position};
use std::mem::discriminant;

/// One kind of anomaly in one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnomalyEntry {
    /// The first occurrence.
    pub first: Anomaly,
    /// How many records had it.
    pub count: u64,
}

/// Anomalies of one file, one entry per kind, in order of first occurrence.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnomalyLog {
    entries: Vec<AnomalyEntry>,
}

impl AnomalyLog {
    pub(crate) fn record(&mut self, position: Position, kind: AnomalyKind) {
        let d = discriminant(&kind);
        match self
            .entries
            .iter_mut()
            .find(|e| discriminant(&e.first.kind) == d)
        {
            Some(e) => e.count += 1,
            None => self.entries.push(AnomalyEntry {
                first: Anomaly { position, kind },
                count: 1,
            }),
        }
    }

    /// The entries, in order of first occurrence.
    pub fn entries(&self) -> &[AnomalyEntry] {
        &self.entries
    }

    /// True when nothing odd was seen.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
