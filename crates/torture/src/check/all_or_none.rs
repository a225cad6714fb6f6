//! All or none: a granted acquire shows every name it asked for, and a refused one granted
//! none of them.

use std::collections::{HashMap, HashSet};

use super::index::{Holder, Index, OpId};
use super::{Finding, Tally};
use crate::history::{Call, Mono, Outcome};

pub(crate) fn check(index: &Index<'_>) -> Tally {
    let mut tally = Tally::new("no acquire was refused, and none of several names was granted");
    for id in 0..index.ops.len() {
        let op = index.op(id);
        if op.call == Call::Acquire && op.outcome == Outcome::Ok && op.names.len() > 1 {
            tally.checked += 1;
            whole(index, id, &mut tally);
        }
    }
    let refused = first_refusals(index);
    // An acquire of several names is judged once, not once a name.
    let judged: HashSet<OpId> = refused
        .values()
        .flat_map(|r| r.refusals.iter().copied())
        .collect();
    tally.checked += judged.len();
    for id in 0..index.ops.len() {
        let op = index.op(id);
        for seen in &op.leases {
            let holder = (op.kind, seen.name.as_str(), seen.owner.as_str());
            let Some(refused) = refused.get(&holder) else {
                continue;
            };
            // The owner's first acquire that was not refused may have granted what is seen.
            if refused.granted_from.is_some_and(|from| from < op.completed) {
                continue;
            }
            for &refusal in &refused.refusals {
                let asked = index.op(refusal);
                if asked.completed >= op.invoked {
                    continue;
                }
                tally.violation(op.invoked, || Finding {
                    explanation: format!(
                        "{:?}: the acquire of {} by {:?} was refused, and then client {} op {} showed {:?} holding {:?} (token {})",
                        seen.name,
                        asked.names.join(","),
                        asked.owner,
                        op.client,
                        op.op,
                        seen.owner,
                        seen.name,
                        seen.token,
                    ),
                    entries: vec![index.entry_of(refusal), index.entry_of(id)],
                });
            }
        }
    }
    tally
}

/// A granted acquire of several names shows its owner's lease on each.
fn whole(index: &Index<'_>, id: OpId, tally: &mut Tally) {
    let op = index.op(id);
    let missing: Vec<&str> = op
        .names
        .iter()
        .filter(|name| {
            !op.leases
                .iter()
                .any(|seen| &seen.name == *name && seen.owner == op.owner)
        })
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        return;
    }
    tally.violation(op.completed, || Finding {
        explanation: format!(
            "the acquire of {} by {:?} was answered granted, but not with {}",
            op.names.join(","),
            op.owner,
            missing.join(","),
        ),
        entries: vec![index.entry_of(id)],
    });
}

/// An owner's refused acquires of a name that leave it holding nothing of the name.
struct Refused {
    /// Those sent before any of its acquires of the name that was not refused.
    refusals: Vec<OpId>,
    /// When it first sent an acquire of the name that was not refused: from then on it may
    /// hold the name.
    granted_from: Option<Mono>,
}

/// The judged refusals of every owner and name that has any (most have none: computed once
/// per holder, not per operation that shows it).
fn first_refusals<'h>(index: &Index<'h>) -> HashMap<Holder<'h>, Refused> {
    let mut refused = HashMap::new();
    for (holder, ids) in &index.acquires {
        let ops = || ids.iter().map(|&id| (id, index.op(id)));
        if ops().all(|(_, op)| op.outcome != Outcome::Refused) {
            continue;
        }
        let granted_from = index.first_try_not_refused(holder).map(|m| m.at);
        let refusals = ops()
            .filter(|(_, op)| {
                op.outcome == Outcome::Refused && granted_from.is_none_or(|from| op.invoked < from)
            })
            .map(|(id, _)| id)
            .collect();
        refused.insert(
            *holder,
            Refused {
                refusals,
                granted_from,
            },
        );
    }
    refused
}
