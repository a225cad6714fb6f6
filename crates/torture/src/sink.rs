//! [`Sink`]: where the runner's threads put the history's entries as they happen.

use std::sync::{Arc, Mutex, PoisonError};

use crate::history::Entry;

/// Entries from every part of a run — clients' operations, the resource's writes, the
/// nemesis's faults — gathered in one place; a cheap handle to clone into each thread.
#[derive(Debug, Clone, Default)]
pub struct Sink {
    // A std mutex: held for one push or one take, never across anything that waits.
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl Sink {
    /// Adds one entry.
    pub fn push(&self, entry: Entry) {
        self.lock().push(entry);
    }

    /// Everything so far, leaving the sink empty.
    pub fn take(&self) -> Vec<Entry> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        // A push cannot panic half-way: a poisoned vector is still whole.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
