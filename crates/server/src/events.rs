//! One structured log line for every grant, extension, renewal, release, expiry and refusal.

use std::time::Duration;

use fencelock_core::{FencingToken, Lease, Owner, Resource};
use fencelock_wire::{Label, Op};

const TARGET: &str = "fencelock::lease";

/// A new lease was granted.
pub fn granted(lease: &Lease, waited: Duration) {
    tracing::info!(target: TARGET, event = "grant", resource = %lease.resource, owner = %lease.owner,
        token = lease.token.0, expires_at = %lease.expires_at, waited_ms = millis(waited));
}

/// The holder's lease was extended by a re-acquire.
pub fn extended(lease: &Lease) {
    tracing::info!(target: TARGET, event = "extend", resource = %lease.resource, owner = %lease.owner,
        token = lease.token.0, expires_at = %lease.expires_at);
}

/// A lease was renewed.
pub fn renewed(lease: &Lease) {
    tracing::info!(target: TARGET, event = "renew", resource = %lease.resource, owner = %lease.owner,
        token = lease.token.0, expires_at = %lease.expires_at);
}

/// A lease was released after being held for `held`.
pub fn released(lease: &Lease, held: Duration) {
    tracing::info!(target: TARGET, event = "release", resource = %lease.resource, owner = %lease.owner,
        token = lease.token.0, held_ms = millis(held));
}

/// A lease was released, by a store that cannot say which (a server in front of another).
pub fn released_unknown(resource: &Resource, owner: &Owner, token: Option<FencingToken>) {
    tracing::info!(target: TARGET, event = "release", resource = %resource, owner = %owner,
        token = token.map(|t| t.0));
}

/// A lease ended by expiry.
pub fn expired(lease: &Lease) {
    tracing::info!(target: TARGET, event = "expire", resource = %lease.resource, owner = %lease.owner,
        token = lease.token.0, expired_at = %lease.expires_at);
}

/// A request was refused: `reason` is `held`, `forbidden`, `conflict` or `not_found`.
pub fn refused(op: Op, reason: Label, resource: &Resource, owner: &Owner, holder: Option<&Lease>) {
    tracing::info!(target: TARGET, event = "refuse", op = op.as_str(), reason = reason.as_str(),
        resource = %resource, owner = %owner,
        holder = holder.map(|h| h.owner.as_str()), token = holder.map(|h| h.token.0));
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
