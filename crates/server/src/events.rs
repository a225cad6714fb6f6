//! One structured log line for every grant, extension, renewal, release, expiry and refusal
//! (by a holder, a lock-delay, …) of a lock's lease, a semaphore's permit or a read-write
//! lock's hold. Every line has a `kind` (`lock`, `semaphore`, `rwlock`) and the name as
//! `resource`.
//!
//! A force-release is written to its own target, [`AUDIT`], one line per lease it ended:
//! who asked, and whose lease it was.
//!
//! Each change is also published on the server's [`Hub`] as the event `GET /events` sends
//! (a refusal only when the acquire waited, see [`refused_after_wait`]): the log line and
//! the event are written in the same place, so neither can be forgotten.

use std::time::Duration;

use fencelock_core::{EndedLease, FencingToken, Hold, Kind, Lease, Owner, Principal, Resource, Timestamp};
use fencelock_wire::{EventData, EventName, Label, Op};

use crate::hub::{Change, Changed, Hub};

/// The target of the line of every change of a lease, permit or hold.
pub const LEASE: &str = "fencelock::lease";

/// The target of what an administrator did.
pub const AUDIT: &str = "fencelock::audit";

/// What an event is about: a lock's lease, or a permit or hold (shown with its limit or mode).
#[derive(Debug, Clone, Copy)]
pub enum Item<'a> {
    /// A lock's lease, or the lease of a permit or hold where only that is known (an expiry).
    Lease(&'a Lease),
    /// A semaphore's permit or a read-write lock's hold.
    Hold(&'a Hold),
}

impl<'a> Item<'a> {
    /// The lease.
    pub fn lease(self) -> &'a Lease {
        match self {
            Self::Lease(lease) => lease,
            Self::Hold(hold) => &hold.lease,
        }
    }

    /// Its change as the hub keeps it, at `at`.
    fn change(self, kind: Kind, at: Timestamp) -> Change {
        let item = match self {
            Self::Lease(lease) => Changed::Lease(lease.clone()),
            Self::Hold(hold) => Changed::Hold(hold.clone()),
        };
        Change {
            kind,
            item,
            at,
            held_ms: None,
        }
    }
}

/// A new lease was granted.
pub fn granted(hub: &Hub, kind: Kind, item: Item<'_>, waited: Duration) {
    let lease = item.lease();
    tracing::info!(target: LEASE, event = "grant", kind = kind.as_str(), resource = %lease.resource,
        owner = %lease.owner, token = lease.token.0, expires_at = %lease.expires_at, waited_ms = millis(waited));
    hub.publish(EventName::Grant, item.change(kind, lease.acquired_at));
}

/// An owner's read hold was replaced by a write hold (an upgrade), or its write hold by a
/// read hold (a downgrade): `old` ended when `new` was granted. Its event is a release of
/// `old` (the grant of `new` is told apart).
pub fn replaced(hub: &Hub, kind: Kind, old: &Hold, new: &Lease) {
    let held = new.acquired_at.since(old.lease.acquired_at);
    tracing::info!(target: LEASE, event = "replace", kind = kind.as_str(), resource = %old.lease.resource,
        owner = %old.lease.owner, token = old.lease.token.0, new_token = new.token.0,
        held_ms = millis(held));
    hub.publish(
        EventName::Release,
        Item::Hold(old).change(kind, new.acquired_at).held(millis(held)),
    );
}

/// The holder's lease was extended by a re-acquire.
pub fn extended(hub: &Hub, kind: Kind, item: Item<'_>) {
    let lease = item.lease();
    tracing::info!(target: LEASE, event = "extend", kind = kind.as_str(), resource = %lease.resource,
        owner = %lease.owner, token = lease.token.0, expires_at = %lease.expires_at);
    hub.publish(EventName::Extend, item.change(kind, lease.acquired_at));
}

/// A lease was renewed.
pub fn renewed(hub: &Hub, kind: Kind, item: Item<'_>) {
    let lease = item.lease();
    tracing::info!(target: LEASE, event = "renew", kind = kind.as_str(), resource = %lease.resource,
        owner = %lease.owner, token = lease.token.0, expires_at = %lease.expires_at);
    hub.publish(EventName::Renew, item.change(kind, Timestamp::now_wall()));
}

/// A lease was released after being held for `held`.
pub fn released(hub: &Hub, kind: Kind, ended: &EndedLease) {
    let (lease, held) = (&ended.lease, ended.held_for());
    tracing::info!(target: LEASE, event = "release", kind = kind.as_str(), resource = %lease.resource,
        owner = %lease.owner, token = lease.token.0, held_ms = millis(held));
    hub.publish(
        EventName::Release,
        Item::Lease(lease).change(kind, ended.ended_at).held(millis(held)),
    );
}

/// A lease was released, by a store that cannot say which (a server in front of another).
pub fn released_unknown(
    hub: &Hub,
    kind: Kind,
    resource: &Resource,
    owner: &Owner,
    token: Option<FencingToken>,
) {
    tracing::info!(target: LEASE, event = "release", kind = kind.as_str(), resource = %resource,
        owner = %owner, token = token.map(|t| t.0));
    let data = EventData {
        fencing_token: token.map(|t| t.0),
        ..EventData::about(kind, resource, owner, Timestamp::now_wall())
    };
    hub.publish(EventName::Release, data);
}

/// A lease ended by expiry; `false` if that was told already (a repeat, dropped: see
/// [`Hub::publish`]).
pub fn expired(hub: &Hub, kind: Kind, lease: &Lease) -> bool {
    let held = millis(lease.expires_at.since(lease.acquired_at));
    let first = hub.publish(
        EventName::Expire,
        Item::Lease(lease).change(kind, lease.expires_at).held(held),
    );
    if first {
        tracing::info!(target: LEASE, event = "expire", kind = kind.as_str(), resource = %lease.resource,
            owner = %lease.owner, token = lease.token.0, expired_at = %lease.expires_at);
    }
    first
}

/// `by` (a principal, or nobody without authentication) force-released `ended`: `owner`
/// and `principal` are the lease's.
pub fn force_released(hub: &Hub, by: Option<&Principal>, kind: Kind, ended: &EndedLease) {
    let lease = &ended.lease;
    tracing::info!(target: AUDIT, event = "force_release", by = by.map(Principal::as_str),
        kind = kind.as_str(), resource = %lease.resource, owner = %lease.owner,
        principal = lease.owner.principal().map(Principal::as_str), token = lease.token.0,
        held_ms = millis(ended.held_for()));
    hub.publish(
        EventName::ForceRelease,
        Item::Lease(lease)
            .change(kind, ended.ended_at)
            .held(millis(ended.held_for())),
    );
}

/// `by` force-released `resource`, through a store that cannot say which leases it ended (a
/// server in front of another). No event: it tells no lease.
pub fn force_released_unknown(by: Option<&Principal>, kind: Kind, resource: &Resource) {
    tracing::info!(target: AUDIT, event = "force_release", by = by.map(Principal::as_str),
        kind = kind.as_str(), resource = %resource);
}

/// An acquire of `names` by `owner` that waited was answered `acquired: false`: its
/// event (the log line is its refusal's, [`refused`] or [`delayed`]).
pub fn refused_after_wait(hub: &Hub, kind: Kind, names: &[Resource], owner: &Owner) {
    let now = Timestamp::now_wall();
    for name in names {
        hub.publish(EventName::Refuse, EventData::about(kind, name, owner, now));
    }
}

/// A wait of `owner` for `names` was refused as a deadlock: its event (the log line is
/// written where the cycle was found, under `fencelock::deadlock`).
pub fn deadlocked(hub: &Hub, kind: Kind, names: &[Resource], owner: &Owner) {
    let now = Timestamp::now_wall();
    for name in names {
        hub.publish(EventName::Deadlock, EventData::about(kind, name, owner, now));
    }
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
    tracing::info!(target: LEASE, event = "refuse", kind = kind.as_str(), op = op.as_str(),
        reason = reason.as_str(), resource = %resource, owner = %owner,
        holder = holder.map(|h| h.owner.as_str()), token = holder.map(|h| h.token.0));
}

/// An acquire of `resource` was refused because a lock-delay keeps it closed for
/// `retry_in` more: its last lease expired unreleased less than the delay ago.
pub fn delayed(kind: Kind, op: Op, resource: &Resource, owner: &Owner, retry_in: Duration) {
    tracing::info!(target: LEASE, event = "refuse", kind = kind.as_str(), op = op.as_str(),
        reason = Label::Delayed.as_str(), resource = %resource, owner = %owner,
        retry_after_ms = millis(retry_in));
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
