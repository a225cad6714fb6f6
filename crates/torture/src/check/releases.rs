//! No release undone: a lease whose release was answered ok is never seen live again.

use super::index::{Index, LeaseId, OpId};
use super::{Finding, Tally};
use crate::history::{Call, Outcome};

pub(crate) fn check(index: &Index<'_>) -> Tally {
    let mut tally = Tally::new("no release was answered ok");
    tally.checked = index
        .leases
        .iter()
        .filter(|lease| lease.release_acked.is_some())
        .count();
    for id in 0..index.ops.len() {
        let op = index.op(id);
        for lease in index.shown_by(id) {
            undone(index, lease, id, "showed it live", &mut tally);
        }
        if op.call == Call::Renew && op.outcome == Outcome::Ok {
            for lease in index.about(id) {
                undone(index, lease, id, "renewed it", &mut tally);
            }
        }
    }
    tally
}

/// A violation if `op`, invoked after the lease's release was answered ok, saw it live.
fn undone(index: &Index<'_>, lease_id: LeaseId, id: OpId, how: &str, tally: &mut Tally) {
    let lease = &index.leases[lease_id];
    let Some(released) = lease.release_acked else {
        return;
    };
    let op = index.op(id);
    if op.invoked <= released.at {
        return;
    }
    tally.violation(op.invoked, || Finding {
        explanation: format!(
            "{:?}: the release of {:?}'s lease (token {}) was answered ok, and then client {} op {} {how}",
            lease.key.name, lease.key.owner, lease.key.token, op.client, op.op
        ),
        entries: [lease.told.or(lease.shown), Some(released)]
            .into_iter()
            .flatten()
            .map(|m| index.entry_of(m.op))
            .chain([index.entry_of(id)])
            .collect(),
    });
}
