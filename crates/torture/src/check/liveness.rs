//! Liveness: after the faults healed, every client acquired within the bound.

use std::collections::BTreeMap;

use super::index::{Index, OpId};
use super::{Bounds, Finding, Tally};
use crate::history::{Call, Mono, Outcome, Phase};

/// How many of a failing client's tries a slice shows, at most.
const TRIES_SHOWN: usize = 6;

pub(crate) fn check(index: &Index<'_>, bounds: Bounds) -> Tally {
    let mut tally = Tally::new("no liveness phase: no `healed` entry, no acquire after it");
    let mut tries: BTreeMap<u32, Vec<OpId>> = BTreeMap::new();
    for id in 0..index.ops.len() {
        let op = index.op(id);
        // The drain's markers are the runner's, not a client's.
        if op.phase == Phase::Drain {
            continue;
        }
        let entry = tries.entry(op.client).or_default();
        if op.phase == Phase::Liveness && op.call == Call::Acquire {
            entry.push(id);
        }
    }
    if index.healed.is_none() && tries.values().all(Vec::is_empty) {
        return tally;
    }
    let bound = u64::try_from(bounds.liveness.as_nanos()).unwrap_or(u64::MAX);
    for (&client, ids) in &mut tries {
        tally.checked += 1;
        ids.sort_by_key(|&id| index.op(id).invoked);
        let Some(&first) = ids.first() else {
            let at = index.healed.map_or(Mono(0), |(at, _)| at);
            tally.violation(at, || Finding {
                explanation: format!("client {client} made no acquire after the faults healed"),
                entries: index.healed.map(|(_, entry)| entry).into_iter().collect(),
            });
            continue;
        };
        let start = index.op(first).invoked;
        let worked = ids
            .iter()
            .copied()
            .filter(|&id| index.op(id).outcome == Outcome::Ok)
            .min_by_key(|&id| index.op(id).completed);
        let took = worked.map(|id| index.op(id).completed.0.saturating_sub(start.0));
        if took.is_some_and(|took| took <= bound) {
            continue;
        }
        tally.violation(Mono(start.0.saturating_add(bound)), || {
            let explanation = match took {
                Some(took) => format!(
                    "client {client} first acquired {} ms after its first try, over the bound of {} ms",
                    took / 1_000_000,
                    bound / 1_000_000
                ),
                None => format!(
                    "client {client} never acquired after the faults healed ({} tries, bound {} ms)",
                    ids.len(),
                    bound / 1_000_000
                ),
            };
            // The first tries, the last (past the bound), and the one that worked (a slice
            // shows each entry once).
            let mut shown: Vec<OpId> = ids.iter().copied().take(TRIES_SHOWN - 1).collect();
            shown.extend(ids.last());
            shown.extend(worked);
            Finding {
                explanation,
                entries: shown
                    .into_iter()
                    .map(|id| index.entry_of(id))
                    .chain(index.healed.map(|(_, entry)| entry))
                    .collect(),
            }
        });
    }
    tally
}
