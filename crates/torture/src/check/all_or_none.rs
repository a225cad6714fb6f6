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
    let judged: HashSet<OpId> = refused.values().flatten().copied().collect();
    tally.checked += judged.len();
    for id in 0..index.ops.len() {
        let op = index.op(id);
        for seen in &op.leases {
            let holder = (op.kind, seen.name.as_str(), seen.owner.as_str());
            let Some(refusals) = refused.get(&holder) else {
                continue;
            };
            // The owner's first acquire that was not refused may have granted what is seen.
            let granted_from = first_not_refused(index, &holder);
            if granted_from.is_some_and(|from| from < op.completed) {
                continue;
            }
            for &refusal in refusals {
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

/// The refused acquires that came before any acquire of the name by the same owner that was
/// not refused: those that, refused, leave the owner holding nothing of the name.
fn first_refusals<'h>(index: &Index<'h>) -> HashMap<Holder<'h>, Vec<OpId>> {
    let mut refused: HashMap<Holder<'h>, Vec<OpId>> = HashMap::new();
    for (holder, ids) in &index.acquires {
        let from = first_not_refused(index, holder);
        let judged: Vec<OpId> = ids
            .iter()
            .copied()
            .filter(|&id| {
                let op = index.op(id);
                op.outcome == Outcome::Refused && from.is_none_or(|from| op.invoked < from)
            })
            .collect();
        if !judged.is_empty() {
            refused.insert(*holder, judged);
        }
    }
    refused
}

/// When the owner first sent an acquire of the name that was not refused.
fn first_not_refused(index: &Index<'_>, holder: &Holder<'_>) -> Option<Mono> {
    index
        .acquires_of(holder)
        .iter()
        .map(|&id| index.op(id))
        .filter(|op| op.outcome != Outcome::Refused)
        .map(|op| op.invoked)
        .min()
}
