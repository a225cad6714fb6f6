//! One structured log line for every grant, extension, renewal, release, expiry and refusal
//! (by a holder, a lock-delay, …) of a lock's lease, a semaphore's permit or a read-write
//! lock's hold. Every line has a `kind` (`lock`, `semaphore`, `rwlock`) and the name as
//! `resource`.
//!
//! A force-release is written to its own target, [`AUDIT`], one line per lease it ended:
//! who asked, and whose lease it was.

use std::time::Duration;

use fencelock_core::{EndedLease, FencingToken, Kind, Lease, Owner, Principal, Resource};
use fencelock_wire::{Label, Op};

const TARGET: &str = "fencelock::lease";

/// The target of what an administrator did.
pub const AUDIT: &str = "fencelock::audit";

/// A new lease was granted.
pub fn granted(kind: Kind, lease: &Lease, waited: Duration) {
    tracing::info!(target: TARGET, event = "grant", kind = kind.as_str(), resource = %lease.resource,
        owner = %lease.owner, token = lease.token.0, expires_at = %lease.expires_at, waited_ms = millis(waited));
}

/// An owner's read hold was replaced by a write hold (an upgrade), or its write hold by a
/// read hold (a downgrade): `old` ended when `new` was granted.
pub fn replaced(kind: Kind, old: &Lease, new: &Lease) {
    tracing::info!(target: TARGET, event = "replace", kind = kind.as_str(), resource = %old.resource,
        owner = %old.owner, token = old.token.0, new_token = new.token.0,
        held_ms = millis(new.acquired_at.since(old.acquired_at)));
}

/// The holder's lease was extended by a re-acquire.
pub fn extended(kind: Kind, lease: &Lease) {
    tracing::info!(target: TARGET, event = "extend", kind = kind.as_str(), resource = %lease.resource,
        owner = %lease.owner, token = lease.token.0, expires_at = %lease.expires_at);
}

/// A lease was renewed.
pub fn renewed(kind: Kind, lease: &Lease) {
    tracing::info!(target: TARGET, event = "renew", kind = kind.as_str(), resource = %lease.resource,
        owner = %lease.owner, token = lease.token.0, expires_at = %lease.expires_at);
}

/// A lease was released after being held for `held`.
pub fn released(kind: Kind, lease: &Lease, held: Duration) {
    tracing::info!(target: TARGET, event = "release", kind = kind.as_str(), resource = %lease.resource,
        owner = %lease.owner, token = lease.token.0, held_ms = millis(held));
}

/// A lease was released, by a store that cannot say which (a server in front of another).
pub fn released_unknown(kind: Kind, resource: &Resource, owner: &Owner, token: Option<FencingToken>) {
    tracing::info!(target: TARGET, event = "release", kind = kind.as_str(), resource = %resource,
        owner = %owner, token = token.map(|t| t.0));
}

/// A lease ended by expiry.
pub fn expired(kind: Kind, lease: &Lease) {
    tracing::info!(target: TARGET, event = "expire", kind = kind.as_str(), resource = %lease.resource,
        owner = %lease.owner, token = lease.token.0, expired_at = %lease.expires_at);
}

/// `by` (a principal, or nobody without authentication) force-released `ended`: `owner`
/// and `principal` are the lease's.
pub fn force_released(by: Option<&Principal>, kind: Kind, ended: &EndedLease) {
    let lease = &ended.lease;
    tracing::info!(target: AUDIT, event = "force_release", by = by.map(Principal::as_str),
        kind = kind.as_str(), resource = %lease.resource, owner = %lease.owner,
        principal = lease.owner.principal().map(Principal::as_str), token = lease.token.0,
        held_ms = millis(ended.held_for()));
}

/// `by` force-released `resource`, through a store that cannot say which leases it ended (a
/// server in front of another).
pub fn force_released_unknown(by: Option<&Principal>, kind: Kind, resource: &Resource) {
    tracing::info!(target: AUDIT, event = "force_release", by = by.map(Principal::as_str),
        kind = kind.as_str(), resource = %resource);
}

/// A request was refused: `reason` is `held`, `forbidden`, `conflict`, `not_found` or
/// `limit_mismatch`; `holder` is a lease in the way, if any. (A lock-delay's refusal is
/// [`delayed`]; a deadlock's is logged where it is found, under `fencelock::deadlock`.)
pub fn refused(
    kind: Kind,
    op: Op,
    reason: Label,
    resource: &Resource,
    owner: &Owner,
    holder: Option<&Lease>,
) {
    tracing::info!(target: TARGET, event = "refuse", kind = kind.as_str(), op = op.as_str(),
        reason = reason.as_str(), resource = %resource, owner = %owner,
        holder = holder.map(|h| h.owner.as_str()), token = holder.map(|h| h.token.0));
}

/// An acquire of `resource` was refused because a lock-delay keeps it closed for
/// `retry_in` more: its last lease expired unreleased less than the delay ago.
pub fn delayed(kind: Kind, op: Op, resource: &Resource, owner: &Owner, retry_in: Duration) {
    tracing::info!(target: TARGET, event = "refuse", kind = kind.as_str(), op = op.as_str(),
        reason = Label::Delayed.as_str(), resource = %resource, owner = %owner,
        retry_after_ms = millis(retry_in));
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
