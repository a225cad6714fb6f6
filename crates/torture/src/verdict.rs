//! The hook between a run and the checker: reads a history, judges it with
//! [`crate::check::check`], and prints the report.

use std::path::Path;
use std::time::Duration;

use clap::ValueEnum as _;

use crate::check::{Bounds, check};
use crate::history::{self, Entry};
use crate::target::StoreKind;

/// Time a client has, past twice the longest TTL it asks for, to be granted a lock once
/// every fault has healed: a store that is up again must grant one by then.
const LIVENESS_SLACK: Duration = Duration::from_secs(10);

/// How long after the faults healed each client must be granted a lock, on `kind`: the
/// leases taken before may take two of the longest TTLs to end (one to expire, one more
/// for a lease a paused server renewed late), and a store may take a few seconds more to
/// elect a leader or reconnect.
pub fn liveness_bound(kind: StoreKind) -> Duration {
    kind.ttls().longest() * 2 + LIVENESS_SLACK
}

/// Reads the history at `path` and judges it; prints the report. `Some(ok)`, or `None` if
/// nothing could be judged (the file unreadable, or not a history).
pub fn judge_file(path: &Path) -> Option<bool> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("checker: cannot read {}: {error}", path.display());
            return None;
        }
    };
    match history::parse(&text) {
        Ok(entries) => Some(judge(&entries)),
        Err(error) => {
            eprintln!("checker: {} is not a history: {error}", path.display());
            None
        }
    }
}

/// Judges a history with the bounds of its store, prints the report; whether every
/// property held.
pub fn judge(entries: &[Entry]) -> bool {
    let report = check(entries, bounds(entries));
    print!("{report}");
    report.is_ok()
}

/// The bounds a history is held to: its store's (the longest a run ever allows, for a
/// history that does not say its store).
pub fn bounds(entries: &[Entry]) -> Bounds {
    let store = entries.iter().find_map(|entry| match entry {
        Entry::Run(info) => StoreKind::from_str(&info.store, false).ok(),
        _ => None,
    });
    let liveness = store.map_or_else(
        || {
            StoreKind::value_variants()
                .iter()
                .map(|kind| liveness_bound(*kind))
                .max()
                .unwrap_or(LIVENESS_SLACK)
        },
        liveness_bound,
    );
    Bounds { liveness }
}
