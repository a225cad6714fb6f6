//! The checks of the SPEC's section "Who may do what": a lease belongs to the principal that
//! acquired it, on every kind, and an administrator's force-release frees a name whoever
//! holds it — across a reopen and across two servers where the store declares it.

use std::sync::Arc;

use fencelock_core::{
    AcquireOutcome, Claim, ForceOutcome, HoldKind, HoldOutcome, Key, Lease, LockStore, Owner, ReleaseOutcome,
    RenewOutcome, Resource,
};

use crate::checks::{announced_key, granted};
use crate::{Harness, owner};
use fencelock_testkit::fixtures::owner_of;

/// What the namesake `intruder` (another principal, same owner name) gets on `store` when it
/// tries the lock `lease`: refused at every step, the lease untouched.
async fn assert_lock_refused(store: &dyn LockStore, lease: &Lease, intruder: &Owner) {
    let r = &lease.resource;
    let ttl = fencelock_core::Ttl::from_const_millis(600_000);
    match store.acquire(r, intruder, ttl).await.unwrap() {
        AcquireOutcome::Held { holder, .. } => assert_eq!(&holder, lease, "the holder as it is"),
        other => panic!("{intruder:?} got {other:?} on {lease:?}"),
    }
    let token = Some(lease.token);
    assert_eq!(
        store.renew(r, intruder, ttl, token).await.unwrap(),
        RenewOutcome::Forbidden
    );
    assert_eq!(
        store.release(r, intruder, token).await.unwrap(),
        ReleaseOutcome::Forbidden
    );
    assert_eq!(store.get(r).await.unwrap().as_ref(), Some(lease), "unchanged");
}

/// What the namesake `intruder` gets when it tries `kind` `name`, held by `holder`: refused
/// at every step, whatever the room, the holds untouched.
async fn assert_hold_refused(
    store: &dyn LockStore,
    kind: HoldKind,
    name: &Resource,
    claim: Claim,
    intruder: &Owner,
) {
    let ttl = fencelock_core::Ttl::from_const_millis(600_000);
    let before = store.holds(kind, name).await.unwrap();
    match store
        .acquire_hold(name, intruder, claim, ttl, None)
        .await
        .unwrap()
    {
        HoldOutcome::Busy(busy) => assert_eq!(busy.holders, before, "held by another"),
        other => panic!("{intruder:?} got {other:?} on {before:?}"),
    }
    let token = before.first().map(|h| h.lease.token);
    let renewed = store.renew_hold(kind, name, intruder, ttl, token).await.unwrap();
    assert_eq!(renewed, RenewOutcome::Forbidden);
    let released = store.release_hold(kind, name, intruder, token).await.unwrap();
    assert_eq!(released, ReleaseOutcome::Forbidden);
    assert_eq!(store.holds(kind, name).await.unwrap(), before, "unchanged");
}

/// A store keeps each lease's principal and holds the lease to it: another principal's
/// owner of the same name (or an owner of no principal) neither extends, renews nor releases
/// it, even with its token; its principal does.
pub async fn a_lease_belongs_to_its_principal(h: &Harness) {
    if !h.capabilities().principals {
        return;
    }
    let r = h.resource("bound");
    let billing = owner_of("billing", "worker-7");
    let lease = granted(h.store.acquire(&r, &billing, h.long_ttl()).await.unwrap());
    assert_eq!(lease.owner, billing, "the principal is kept with the lease");
    assert_eq!(h.store.get(&r).await.unwrap().as_ref(), Some(&lease));
    let query = fencelock_core::ListQuery {
        prefix: r.as_str().to_owned(),
        after: None,
        limit: 10,
    };
    assert_eq!(
        h.store.list(&query).await.unwrap().leases,
        std::slice::from_ref(&lease)
    );
    for intruder in [owner_of("ops", "worker-7"), owner("worker-7")] {
        assert_lock_refused(h.store.as_ref(), &lease, &intruder).await;
    }
    let extended = h.store.acquire(&r, &billing, h.long_ttl()).await.unwrap();
    assert!(
        matches!(&extended, AcquireOutcome::Extended(l) if l.token == lease.token),
        "{extended:?}"
    );
    let released = h.store.release(&r, &billing, Some(lease.token)).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
}

/// The same holds for permits and read-write holds: a namesake of another principal is
/// refused the name even where there is room, and may neither renew nor release the hold.
pub async fn a_hold_belongs_to_its_principal(h: &Harness) {
    if !h.capabilities().principals {
        return;
    }
    let billing = owner_of("billing", "worker-7");
    let long = h.long_ttl();
    for (kind, claim, name) in [
        (HoldKind::Semaphore, Claim::Permit { limit: 3 }, "bound-permit"),
        (HoldKind::RwLock, Claim::Read, "bound-read"),
        (HoldKind::RwLock, Claim::Write, "bound-write"),
    ] {
        let name = h.resource(name);
        let granted = h
            .store
            .acquire_hold(&name, &billing, claim, long, None)
            .await
            .unwrap();
        let HoldOutcome::Granted { hold, .. } = granted else {
            panic!("{kind} {claim:?}: {granted:?}");
        };
        assert_eq!(hold.lease.owner, billing, "the principal is kept with the hold");
        assert_eq!(
            h.store.holds(kind, &name).await.unwrap(),
            std::slice::from_ref(&hold)
        );
        for intruder in [owner_of("ops", "worker-7"), owner("worker-7")] {
            assert_hold_refused(h.store.as_ref(), kind, &name, claim, &intruder).await;
        }
        let renewed = h
            .store
            .renew_hold(kind, &name, &billing, long, Some(hold.lease.token))
            .await
            .unwrap();
        assert!(matches!(renewed, RenewOutcome::Renewed(_)), "{renewed:?}");
        let released = h.store.release_hold(kind, &name, &billing, None).await.unwrap();
        assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
    }
}

/// Asserts that `outcome` freed `leases` (in token order), where the store can tell which,
/// each ended within its life.
fn assert_forced(h: &Harness, outcome: ForceOutcome, leases: &[Lease]) {
    let ForceOutcome::Released(ended) = outcome else {
        panic!("expected {leases:?} freed, got {outcome:?}");
    };
    if ended.is_empty() && !h.capabilities().knows_released_lease {
        return;
    }
    for e in &ended {
        assert!(
            e.lease.acquired_at <= e.ended_at && e.ended_at <= e.lease.expires_at,
            "{e:?}"
        );
    }
    let freed: Vec<&Lease> = ended.iter().map(|e| &e.lease).collect();
    assert_eq!(freed, leases.iter().collect::<Vec<_>>(), "in token order");
}

/// Force-release frees a lock, every permit of a semaphore and every hold of a read-write
/// lock, whoever holds them; it is announced; a name with nothing live ends nothing; and the
/// next grant's token is greater than every token it freed.
pub async fn force_release_frees_every_holder_and_tokens_still_increase(h: &Harness) {
    let mut feed = h.store.releases();
    let long = h.long_ttl();
    let r = h.resource("forced");
    let lease = granted(h.store.acquire(&r, &owner("a"), long).await.unwrap());
    let key = Key::lock(&r);
    let forced = h.store.force_release(&key).await.unwrap();
    assert_forced(h, forced, std::slice::from_ref(&lease));
    if let Some(feed) = &mut feed {
        assert!(announced_key(feed, &key).await, "a forced release is announced");
    }
    assert_eq!(h.store.get(&r).await.unwrap(), None);
    let again = h.store.force_release(&key).await.unwrap();
    assert_eq!(again, ForceOutcome::NotFound, "nothing left to free");
    let next = granted(h.store.acquire(&r, &owner("b"), long).await.unwrap());
    assert!(next.token > lease.token, "{next:?} after {lease:?}");

    for (kind, claims, next) in [
        (
            HoldKind::Semaphore,
            [Claim::Permit { limit: 2 }; 2],
            Claim::Permit { limit: 2 },
        ),
        (HoldKind::RwLock, [Claim::Read; 2], Claim::Write),
    ] {
        let name = h.resource(&format!("forced-{kind}"));
        let mut held = Vec::new();
        for (who, claim) in ["a", "b"].into_iter().zip(claims) {
            let outcome = h
                .store
                .acquire_hold(&name, &owner(who), claim, long, None)
                .await
                .unwrap();
            let HoldOutcome::Granted { hold, .. } = outcome else {
                panic!("{kind}: {outcome:?}");
            };
            held.push(hold.lease);
        }
        let key = Key::hold(kind, &name);
        assert_forced(h, h.store.force_release(&key).await.unwrap(), &held);
        if let Some(feed) = &mut feed {
            assert!(announced_key(feed, &key).await, "a forced release is announced");
        }
        assert_eq!(h.store.holds(kind, &name).await.unwrap(), []);
        assert_eq!(h.store.force_release(&key).await.unwrap(), ForceOutcome::NotFound);
        let outcome = h
            .store
            .acquire_hold(&name, &owner("c"), next, long, None)
            .await
            .unwrap();
        let HoldOutcome::Granted { hold: next, .. } = outcome else {
            panic!("{kind}: nothing is held after a force-release, got {outcome:?}");
        };
        let highest = held.iter().map(|l| l.token).max();
        assert!(
            Some(next.lease.token) > highest,
            "{kind}: {next:?} after {held:?}"
        );
    }
}

/// A lease's principal survives a reopen of a durable store, and still binds the lease.
pub async fn principals_survive_a_reopen(h: &Harness) {
    let caps = h.capabilities();
    if !caps.durable || !caps.principals {
        return;
    }
    let billing = owner_of("billing", "worker-7");
    let long = h.long_ttl();
    let r = h.resource("bound-durable");
    let lease = granted(h.store.acquire(&r, &billing, long).await.unwrap());
    let name = h.resource("bound-durable-sem");
    let permit = Claim::Permit { limit: 2 };
    let outcome = h
        .store
        .acquire_hold(&name, &billing, permit, long, None)
        .await
        .unwrap();
    assert!(matches!(outcome, HoldOutcome::Granted { .. }), "{outcome:?}");
    let store = h.reopened().await;
    let again = store.get(&r).await.unwrap().expect("the lease survives");
    assert_eq!(again.owner, billing);
    assert_lock_refused(store.as_ref(), &again, &owner_of("ops", "worker-7")).await;
    let holds = store.holds(HoldKind::Semaphore, &name).await.unwrap();
    assert_eq!(
        holds.iter().map(|h| &h.lease.owner).collect::<Vec<_>>(),
        [&billing]
    );
    assert_hold_refused(
        store.as_ref(),
        HoldKind::Semaphore,
        &name,
        permit,
        &owner_of("ops", "worker-7"),
    )
    .await;
    assert_eq!(
        (again.token, again.acquired_at),
        (lease.token, lease.acquired_at),
        "the same lease"
    );
}

/// A lease is bound to its principal on every server sharing the store, and another server
/// may force-release what this one granted.
pub async fn principals_bind_across_servers(h: &Harness) {
    let caps = h.capabilities();
    if !caps.shared || !caps.principals {
        return;
    }
    let other: Arc<dyn LockStore> = h.another_server().await;
    let billing = owner_of("billing", "worker-7");
    let long = h.long_ttl();
    let r = h.resource("bound-shared");
    let lease = granted(h.store.acquire(&r, &billing, long).await.unwrap());
    assert_eq!(other.get(&r).await.unwrap().as_ref(), Some(&lease));
    assert_lock_refused(other.as_ref(), &lease, &owner_of("ops", "worker-7")).await;
    let name = h.resource("bound-shared-rw");
    let outcome = h
        .store
        .acquire_hold(&name, &billing, Claim::Read, long, None)
        .await
        .unwrap();
    assert!(matches!(outcome, HoldOutcome::Granted { .. }), "{outcome:?}");
    assert_hold_refused(
        other.as_ref(),
        HoldKind::RwLock,
        &name,
        Claim::Read,
        &owner_of("ops", "worker-7"),
    )
    .await;
    let freed = other.force_release(&Key::lock(&r)).await.unwrap();
    assert_forced(h, freed, std::slice::from_ref(&lease));
    assert_eq!(h.store.get(&r).await.unwrap(), None, "freed for every server");
}
