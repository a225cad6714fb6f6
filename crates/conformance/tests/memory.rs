//! The conformance suite against the in-memory store, on a manual clock.

use std::sync::Arc;

use fencelock_conformance::Harness;
use fencelock_core::{ManualClock, MemoryStore, Timestamp};

async fn harness() -> Harness {
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_795_933_800_000)));
    Harness::manual(Arc::new(MemoryStore::with_clock(clock.clone())), clock)
}

fencelock_conformance::suite!(harness);
