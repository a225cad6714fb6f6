//! Token order: per kind and name, a token belongs to one owner, and a grant certainly made
//! after another has the greater token.

use std::collections::HashMap;

use super::index::{Index, Lease, LeaseId};
use super::{Finding, Tally};
use crate::history::{Kind, Mono};

pub(crate) fn check(index: &Index<'_>) -> Tally {
    let mut tally = Tally::new("no lease was shown");
    let mut by_name: HashMap<(Kind, &str), Vec<LeaseId>> = HashMap::new();
    for (id, lease) in index.leases.iter().enumerate() {
        by_name
            .entry((lease.key.kind, lease.key.name))
            .or_default()
            .push(id);
    }
    for ids in by_name.values() {
        tally.checked += ids.len();
        unique(index, ids, &mut tally);
        in_real_time(index, ids, &mut tally);
    }
    tally
}

/// One owner per token.
fn unique(index: &Index<'_>, ids: &[LeaseId], tally: &mut Tally) {
    let mut owner_of: HashMap<u64, LeaseId> = HashMap::new();
    for &id in ids {
        let lease = &index.leases[id];
        let Some(&first) = owner_of.get(&lease.key.token) else {
            owner_of.insert(lease.key.token, id);
            continue;
        };
        let other = &index.leases[first];
        let at = Mono::max(shown(lease), shown(other));
        tally.violation(at, || Finding {
            explanation: format!(
                "{:?}: token {} was issued to two owners, {:?} and {:?}",
                lease.key.name, lease.key.token, other.key.owner, lease.key.owner
            ),
            entries: [other, lease]
                .iter()
                .filter_map(|l| grant_entry(index, l))
                .collect(),
        });
    }
}

/// If A was shown before B was asked, B's token is greater. Sweeps B by `asked` while the
/// leases shown before it go by, keeping the greatest token among them.
fn in_real_time(index: &Index<'_>, ids: &[LeaseId], tally: &mut Tally) {
    let mut by_shown: Vec<(Mono, LeaseId)> = ids
        .iter()
        .filter_map(|&id| index.leases[id].shown.map(|m| (m.at, id)))
        .collect();
    by_shown.sort();
    let mut by_asked: Vec<(Mono, LeaseId)> = ids
        .iter()
        .filter_map(|&id| index.leases[id].asked.map(|m| (m.at, id)))
        .collect();
    by_asked.sort();
    let mut before = by_shown.iter().peekable();
    let mut greatest: Option<LeaseId> = None;
    for &(asked, id) in &by_asked {
        while let Some(&&(shown, a)) = before.peek() {
            if shown >= asked {
                break;
            }
            if greatest.is_none_or(|g| index.leases[a].key.token > index.leases[g].key.token) {
                greatest = Some(a);
            }
            before.next();
        }
        let lease = &index.leases[id];
        let Some(g) = greatest else { continue };
        let earlier = &index.leases[g];
        // An equal token of another owner is the uniqueness check's to report.
        if lease.key.token >= earlier.key.token {
            continue;
        }
        tally.violation(asked, || Finding {
            explanation: format!(
                "{:?}: {:?} was granted token {} after {:?} had been granted token {}",
                lease.key.name, lease.key.owner, lease.key.token, earlier.key.owner, earlier.key.token
            ),
            entries: [
                earlier.shown.map(|m| index.entry_of(m.op)),
                grant_entry(index, earlier),
                lease.asked.map(|m| index.entry_of(m.op)),
                grant_entry(index, lease),
            ]
            .into_iter()
            .flatten()
            .collect(),
        });
    }
}

fn shown(lease: &Lease<'_>) -> Mono {
    lease.shown.map_or(Mono(0), |m| m.at)
}

/// The answer that best shows a lease granted: its owner's acquire, or else the first
/// answer that showed it.
fn grant_entry(index: &Index<'_>, lease: &Lease<'_>) -> Option<usize> {
    lease.told.or(lease.shown).map(|m| index.entry_of(m.op))
}
