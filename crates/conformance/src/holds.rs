//! The checks of semaphores and read-write locks: one per rule of the SPEC's sections
//! "Semaphores" and "Read-write locks", each over any store, and — where the store declares
//! it — across a reopen and across two servers.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{
    Busy, Claim, FencingToken, Hold, HoldKind, HoldOutcome, Key, ListQuery, LockStore, ReleaseOutcome,
    RenewOutcome, Resource, Ttl,
};

use crate::checks::{announced_key, grant};
use crate::{Harness, owner, ttl};

const SEMAPHORE: HoldKind = HoldKind::Semaphore;
const RWLOCK: HoldKind = HoldKind::RwLock;

fn permit(limit: u32) -> Claim {
    Claim::Permit { limit }
}

/// Asks `store` for `claim` on `name` for `who`.
async fn ask(store: &dyn LockStore, name: &Resource, who: &str, claim: Claim, ttl: Ttl) -> HoldOutcome {
    store
        .acquire_hold(name, &owner(who), claim, ttl, None)
        .await
        .expect("acquire_hold")
}

/// The new hold of a grant; panics on any other outcome.
fn new_hold(outcome: HoldOutcome) -> Hold {
    match outcome {
        HoldOutcome::Granted { hold, .. } => hold,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Why a hold was refused; panics on any other outcome.
fn busy(outcome: HoldOutcome) -> Busy {
    match outcome {
        HoldOutcome::Busy(busy) => busy,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Grants `claim` on `name` (of this harness) to `who`, for a long TTL.
async fn hold(h: &Harness, name: &str, who: &str, claim: Claim) -> Hold {
    let name = h.resource(name);
    new_hold(ask(h.store.as_ref(), &name, who, claim, h.long_ttl()).await)
}

/// The owners of `holds`, in their order.
fn owners(holds: &[Hold]) -> Vec<&str> {
    holds.iter().map(|h| h.lease.owner.as_str()).collect()
}

/// Returns once `hold` has expired by the store's clock (see [`Harness::expire`]).
async fn expire(h: &Harness, kind: HoldKind, hold: &Hold) {
    let lease = &hold.lease;
    h.expire_with(lease, async || {
        let holds = h.store.holds(kind, &lease.resource).await.expect("holds");
        holds.iter().any(|now| now.lease.token == lease.token)
    })
    .await;
}

/// A semaphore grants up to its limit, each permit a lease of its own with a greater token;
/// then it refuses, naming the holders in token order.
pub async fn a_semaphore_grants_up_to_its_limit(h: &Harness) {
    let a = hold(h, "sem", "a", permit(2)).await;
    let b = hold(h, "sem", "b", permit(2)).await;
    assert!(b.lease.token > a.lease.token, "{a:?} {b:?}");
    assert_eq!(a.claim, permit(2));
    let refused = busy(ask(h.store.as_ref(), &a.lease.resource, "c", permit(2), h.long_ttl()).await);
    assert_eq!(owners(&refused.holders), ["a", "b"]);
    assert!(!refused.writer_waits);
    assert!(refused.retry_in > Duration::ZERO, "{refused:?}");
    let live = h.store.holds(SEMAPHORE, &a.lease.resource).await.unwrap();
    assert_eq!(live, [a, b]);
}

/// An owner holds at most one permit: its acquire extends it, with the same token.
pub async fn a_permit_reacquired_is_extended_with_the_same_token(h: &Harness) {
    let first = hold(h, "sem", "a", permit(1)).await;
    h.pass(Duration::from_millis(5)).await;
    let again = ask(
        h.store.as_ref(),
        &first.lease.resource,
        "a",
        permit(1),
        h.long_ttl(),
    )
    .await;
    let HoldOutcome::Extended(again) = again else {
        panic!("expected an extension, got {again:?}");
    };
    assert_eq!(again.lease.token, first.lease.token);
    assert!(again.lease.expires_at >= first.lease.expires_at, "{again:?}");
    let live = h.store.holds(SEMAPHORE, &first.lease.resource).await.unwrap();
    assert_eq!(live.len(), 1, "{live:?}");
}

/// A limit that differs from the live permits' is refused and changes nothing; once no permit
/// is live, any limit is accepted and becomes the semaphore's.
pub async fn a_limit_that_differs_is_refused_until_no_permit_is_live(h: &Harness) {
    let a = hold(h, "sem", "a", permit(2)).await;
    let name = &a.lease.resource;
    for (who, limit) in [("b", 3), ("a", 1)] {
        let outcome = ask(h.store.as_ref(), name, who, permit(limit), h.long_ttl()).await;
        assert_eq!(
            outcome,
            HoldOutcome::LimitMismatch { limit: 2 },
            "{who} asked {limit}"
        );
    }
    assert_eq!(
        h.store.holds(SEMAPHORE, name).await.unwrap(),
        std::slice::from_ref(&a)
    );
    let released = h
        .store
        .release_hold(SEMAPHORE, name, &a.lease.owner, None)
        .await
        .unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
    let b = hold(h, "sem", "b", permit(3)).await;
    assert_eq!(b.claim, permit(3));
    assert!(b.lease.token > a.lease.token);
}

/// Concurrent acquirers of a semaphore: exactly `limit` of them win, whatever the timing.
pub async fn concurrent_permit_acquires_never_exceed_the_limit(h: &Harness) {
    const RACERS: usize = 20;
    const LIMIT: u32 = 3;
    let name = h.resource("sem");
    let racers = (0..RACERS).map(|i| {
        let (store, name) = (h.store.clone(), name.clone());
        let ttl = h.long_ttl();
        tokio::spawn(async move { ask(store.as_ref(), &name, &format!("r{i}"), permit(LIMIT), ttl).await })
    });
    // Spawn them all before awaiting any, so that they race.
    let racers: Vec<_> = racers.collect();
    let mut tokens = HashSet::new();
    for racer in racers {
        if let HoldOutcome::Granted { hold, .. } = racer.await.unwrap() {
            assert!(
                tokens.insert(hold.lease.token),
                "token {} twice",
                hold.lease.token
            );
        }
    }
    assert_eq!(tokens.len(), LIMIT as usize, "winners");
    assert_eq!(
        h.store.holds(SEMAPHORE, &name).await.unwrap().len(),
        LIMIT as usize
    );
}

/// Release and renew of a hold: no live hold of the owner → not found, whoever else holds;
/// another token → conflict, changing nothing; then released. Never forbidden.
pub async fn release_and_renew_of_a_hold_check_presence_then_token(h: &Harness) {
    for (kind, claim) in [(SEMAPHORE, permit(5)), (RWLOCK, Claim::Read)] {
        let a = hold(h, kind.as_str(), "a", claim).await;
        let name = &a.lease.resource;
        let (a_owner, stranger) = (&a.lease.owner, owner("b"));
        let wrong = Some(FencingToken(a.lease.token.0 + 1000));
        let long = h.long_ttl();
        for token in [None, Some(a.lease.token)] {
            let release = h.store.release_hold(kind, name, &stranger, token).await.unwrap();
            assert_eq!(release, ReleaseOutcome::NotFound, "{kind}: stranger's release");
            let renew = h
                .store
                .renew_hold(kind, name, &stranger, long, token)
                .await
                .unwrap();
            assert_eq!(renew, RenewOutcome::NotFound, "{kind}: stranger's renew");
        }
        let release = h.store.release_hold(kind, name, a_owner, wrong).await.unwrap();
        assert_eq!(release, ReleaseOutcome::Conflict, "{kind}");
        let renew = h
            .store
            .renew_hold(kind, name, a_owner, long, wrong)
            .await
            .unwrap();
        assert_eq!(renew, RenewOutcome::Conflict, "{kind}");
        assert_eq!(
            h.store.holds(kind, name).await.unwrap(),
            std::slice::from_ref(&a),
            "{kind}: unchanged"
        );
        let release = h
            .store
            .release_hold(kind, name, a_owner, Some(a.lease.token))
            .await
            .unwrap();
        match release {
            ReleaseOutcome::Released(Some(ended)) => assert_eq!(ended.lease, a.lease, "{kind}"),
            ReleaseOutcome::Released(None) => assert!(!h.capabilities().knows_released_lease),
            other => panic!("{kind}: expected a release, got {other:?}"),
        }
        assert_eq!(h.store.holds(kind, name).await.unwrap(), [], "{kind}: released");
        let again = h.store.release_hold(kind, name, a_owner, None).await.unwrap();
        assert_eq!(again, ReleaseOutcome::NotFound, "{kind}: released twice");
    }
}

/// Renewing a hold moves only its expiry: token, claim and `acquired_at` stay.
pub async fn renew_of_a_hold_moves_only_the_expiry(h: &Harness) {
    for (kind, claim) in [(SEMAPHORE, permit(2)), (RWLOCK, Claim::Write)] {
        let a = hold(h, kind.as_str(), "a", claim).await;
        let longer = ttl(Duration::from_secs(900));
        let renewed = h
            .store
            .renew_hold(
                kind,
                &a.lease.resource,
                &a.lease.owner,
                longer,
                Some(a.lease.token),
            )
            .await
            .unwrap();
        let RenewOutcome::Renewed(renewed) = renewed else {
            panic!("{kind}: expected a renewal, got {renewed:?}");
        };
        assert_eq!(
            (renewed.lease.token, renewed.claim, renewed.lease.acquired_at),
            (a.lease.token, a.claim, a.lease.acquired_at),
            "{kind}"
        );
        assert!(
            renewed.lease.expires_at > a.lease.expires_at,
            "{kind}: {renewed:?}"
        );
        assert_eq!(h.store.holds(kind, &a.lease.resource).await.unwrap(), [renewed]);
    }
}

/// Tokens of a name increase across releases and expiries, for every kind.
pub async fn hold_tokens_increase_across_releases_and_expiries(h: &Harness) {
    for (kind, claim) in [(SEMAPHORE, permit(1)), (RWLOCK, Claim::Write)] {
        let name = h.resource(kind.as_str());
        let first = new_hold(ask(h.store.as_ref(), &name, "a", claim, h.short_ttl()).await);
        expire(h, kind, &first).await;
        let second = new_hold(ask(h.store.as_ref(), &name, "b", claim, h.long_ttl()).await);
        assert!(second.lease.token > first.lease.token, "{kind}: after an expiry");
        h.store
            .release_hold(kind, &name, &second.lease.owner, None)
            .await
            .unwrap();
        let third = new_hold(ask(h.store.as_ref(), &name, "a", claim, h.long_ttl()).await);
        assert!(third.lease.token > second.lease.token, "{kind}: after a release");
    }
}

/// Readers share a read-write lock; a writer excludes everyone, and is excluded by readers.
pub async fn readers_share_and_a_writer_excludes(h: &Harness) {
    let r1 = hold(h, "rw", "r1", Claim::Read).await;
    let r2 = hold(h, "rw", "r2", Claim::Read).await;
    let name = &r1.lease.resource;
    let refused = busy(ask(h.store.as_ref(), name, "w", Claim::Write, h.long_ttl()).await);
    assert_eq!(owners(&refused.holders), ["r1", "r2"]);
    for reader in [&r1, &r2] {
        h.store
            .release_hold(RWLOCK, name, &reader.lease.owner, None)
            .await
            .unwrap();
    }
    let w = hold(h, "rw", "w", Claim::Write).await;
    assert!(w.lease.token > r2.lease.token);
    for claim in [Claim::Read, Claim::Write] {
        let refused = busy(ask(h.store.as_ref(), name, "x", claim, h.long_ttl()).await);
        assert_eq!(refused.holders, std::slice::from_ref(&w), "{claim:?}");
    }
    assert_eq!(h.store.holds(RWLOCK, name).await.unwrap(), [w]);
}

/// The same owner and mode extends its hold; a sole reader asking to write is upgraded with a
/// new token, but not while another reader holds (it keeps its read hold); a writer asking to
/// read is downgraded at once, with a new token.
pub async fn upgrade_only_for_the_sole_reader_and_downgrade_at_once(h: &Harness) {
    let a = hold(h, "rw", "a", Claim::Read).await;
    let name = &a.lease.resource;
    let again = ask(h.store.as_ref(), name, "a", Claim::Read, h.long_ttl()).await;
    assert!(
        matches!(&again, HoldOutcome::Extended(x) if x.lease.token == a.lease.token),
        "{again:?}"
    );
    let b = hold(h, "rw", "b", Claim::Read).await;
    let refused = busy(ask(h.store.as_ref(), name, "a", Claim::Write, h.long_ttl()).await);
    assert_eq!(
        owners(&refused.holders),
        ["b"],
        "only the others stand in the way"
    );
    let live = h.store.holds(RWLOCK, name).await.unwrap();
    assert_eq!(owners(&live), ["a", "b"], "a keeps its read hold");
    h.store
        .release_hold(RWLOCK, name, &b.lease.owner, None)
        .await
        .unwrap();
    let upgraded = ask(h.store.as_ref(), name, "a", Claim::Write, h.long_ttl()).await;
    let HoldOutcome::Granted {
        hold: writer,
        replaced,
    } = upgraded
    else {
        panic!("expected an upgrade, got {upgraded:?}");
    };
    assert_eq!(writer.claim, Claim::Write);
    assert!(
        writer.lease.token > b.lease.token,
        "exclusivity starts now: a new token"
    );
    assert_eq!(replaced.map(|r| r.lease.token), Some(a.lease.token));
    let downgraded = ask(h.store.as_ref(), name, "a", Claim::Read, h.long_ttl()).await;
    let HoldOutcome::Granted {
        hold: reader,
        replaced,
    } = downgraded
    else {
        panic!("expected a downgrade, got {downgraded:?}");
    };
    assert_eq!(reader.claim, Claim::Read);
    assert!(reader.lease.token > writer.lease.token);
    assert_eq!(replaced.map(|r| r.lease.token), Some(writer.lease.token));
    assert_eq!(
        h.store.holds(RWLOCK, name).await.unwrap(),
        std::slice::from_ref(&reader)
    );
    // Downgraded, it shares again.
    hold(h, "rw", "c", Claim::Read).await;
}

/// A waiting writer's intent holds back readers that come after it — not readers already
/// holding, who may extend — until it is withdrawn; a writer granted ends its own intent.
pub async fn a_waiting_writer_holds_back_new_readers(h: &Harness) {
    if !h.capabilities().writer_intents {
        return;
    }
    let a = hold(h, "rw", "a", Claim::Read).await;
    let name = &a.lease.resource;
    let intent = Some(ttl(Duration::from_secs(60)));
    let (w, long) = (owner("w"), h.long_ttl());
    let waiting = h
        .store
        .acquire_hold(name, &w, Claim::Write, long, intent)
        .await
        .unwrap();
    assert!(!busy(waiting).writer_waits, "readers hold, no other writer waits");
    let refused = busy(ask(h.store.as_ref(), name, "c", Claim::Read, long).await);
    assert!(refused.writer_waits, "{refused:?}");
    assert_eq!(owners(&refused.holders), ["a"]);
    let again = ask(h.store.as_ref(), name, "a", Claim::Read, long).await;
    assert!(matches!(again, HoldOutcome::Extended(_)), "{again:?}");
    h.store.withdraw_intent(name, &w).await.unwrap();
    hold(h, "rw", "c", Claim::Read).await;

    // Granted once the readers leave, the writer's intent ends with its wait.
    h.store
        .acquire_hold(name, &w, Claim::Write, long, intent)
        .await
        .unwrap();
    for reader in ["a", "c"] {
        h.store
            .release_hold(RWLOCK, name, &owner(reader), None)
            .await
            .unwrap();
    }
    let writer = new_hold(
        h.store
            .acquire_hold(name, &w, Claim::Write, long, intent)
            .await
            .unwrap(),
    );
    h.store
        .release_hold(RWLOCK, name, &w, Some(writer.lease.token))
        .await
        .unwrap();
    hold(h, "rw", "d", Claim::Read).await;
}

/// Locks, semaphores and read-write locks are three namespaces: one name in each, held by
/// three owners at once, unrelated.
pub async fn kinds_are_separate_namespaces(h: &Harness) {
    let lock = grant(h, "x", "l", h.long_ttl()).await;
    let sem = hold(h, "x", "s", permit(1)).await;
    let rw = hold(h, "x", "w", Claim::Write).await;
    assert_eq!(h.store.get(&lock.resource).await.unwrap(), Some(lock.clone()));
    assert_eq!(h.store.holds(SEMAPHORE, &lock.resource).await.unwrap(), [sem]);
    assert_eq!(h.store.holds(RWLOCK, &lock.resource).await.unwrap(), [rw]);
    let other = h
        .store
        .release_hold(SEMAPHORE, &lock.resource, &owner("l"), None)
        .await;
    assert_eq!(other.unwrap(), ReleaseOutcome::NotFound);
}

/// Listing a kind gives its names with live holds, by the bytes of their names, a page at a
/// time, with the holds of each name in token order; other kinds are not listed.
pub async fn list_holds_orders_by_name_and_pages(h: &Harness) {
    for name in ["b", "a", "c"] {
        hold(h, name, "o1", permit(4)).await;
        hold(h, name, "o2", permit(4)).await;
    }
    hold(h, "a", "w", Claim::Write).await;
    let mut query = ListQuery {
        prefix: h.namespace().to_owned(),
        after: None,
        limit: 2,
    };
    let first = h.store.list_holds(SEMAPHORE, &query).await.unwrap();
    let names: Vec<_> = first.names.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names, [h.resource("a"), h.resource("b")]);
    for (_, holds) in &first.names {
        assert_eq!(owners(holds), ["o1", "o2"]);
    }
    query.after = first.next.clone();
    assert_eq!(query.after, Some(h.resource("b")));
    let second = h.store.list_holds(SEMAPHORE, &query).await.unwrap();
    assert_eq!(second.names.len(), 1);
    assert_eq!(second.names[0].0, h.resource("c"));
    assert_eq!(second.next, None);
    query.after = None;
    let rwlocks = h.store.list_holds(RWLOCK, &query).await.unwrap();
    assert_eq!(rwlocks.names.len(), 1, "{rwlocks:?}");
    assert_eq!(owners(&rwlocks.names[0].1), ["w"]);
}

/// An expired hold is gone: not listed, not renewable, and its place is free.
pub async fn an_expired_hold_is_gone(h: &Harness) {
    let a = new_hold(
        ask(
            h.store.as_ref(),
            &h.resource("sem"),
            "a",
            permit(1),
            h.short_ttl(),
        )
        .await,
    );
    expire(h, SEMAPHORE, &a).await;
    let name = &a.lease.resource;
    assert_eq!(h.store.holds(SEMAPHORE, name).await.unwrap(), []);
    let renew = h
        .store
        .renew_hold(SEMAPHORE, name, &a.lease.owner, h.long_ttl(), None)
        .await;
    assert_eq!(renew.unwrap(), RenewOutcome::NotFound);
    hold(h, "sem", "b", permit(1)).await;
}

/// Releases of holds, and withdrawn intents, are announced on the store's feed under the
/// name's kind, for waiters.
pub async fn hold_releases_are_announced(h: &Harness) {
    let Some(mut feed) = h.store.releases() else {
        return;
    };
    let a = hold(h, "sem", "a", permit(1)).await;
    let name = &a.lease.resource;
    h.store
        .release_hold(SEMAPHORE, name, &a.lease.owner, None)
        .await
        .unwrap();
    assert!(
        announced_key(&mut feed, &Key::hold(SEMAPHORE, name)).await,
        "permit release"
    );
    let r = hold(h, "rw", "r", Claim::Read).await;
    let w = owner("w");
    let intent = Some(ttl(Duration::from_secs(60)));
    let long = h.long_ttl();
    h.store
        .acquire_hold(&r.lease.resource, &w, Claim::Write, long, intent)
        .await
        .unwrap();
    h.store.withdraw_intent(&r.lease.resource, &w).await.unwrap();
    let key = Key::hold(RWLOCK, &r.lease.resource);
    assert!(announced_key(&mut feed, &key).await, "withdrawn intent");
}

/// What a durable store answered for holds survives a reopen: permits and holds with their
/// tokens, limit and mode, releases; the next token is greater than all of them.
pub async fn holds_survive_a_reopen(h: &Harness) {
    if !h.capabilities().durable {
        return;
    }
    let p = hold(h, "sem", "a", permit(3)).await;
    let r = hold(h, "rw", "r", Claim::Read).await;
    let w = hold(h, "wr", "w", Claim::Write).await;
    let gone = hold(h, "sem", "b", permit(3)).await;
    h.store
        .release_hold(SEMAPHORE, &gone.lease.resource, &gone.lease.owner, None)
        .await
        .unwrap();
    let store = h.reopened().await;
    for (kind, before) in [(SEMAPHORE, &p), (RWLOCK, &r), (RWLOCK, &w)] {
        let now = store.holds(kind, &before.lease.resource).await.unwrap();
        let [now] = now.as_slice() else {
            panic!("{kind}: expected {before:?} alone, got {now:?}");
        };
        assert_eq!(
            (
                &now.lease.owner,
                now.lease.token,
                now.claim,
                now.lease.acquired_at
            ),
            (
                &before.lease.owner,
                before.lease.token,
                before.claim,
                before.lease.acquired_at
            )
        );
        assert!(now.lease.expires_at >= before.lease.expires_at, "{now:?}");
    }
    let next = store
        .acquire_hold(&p.lease.resource, &owner("c"), permit(3), h.long_ttl(), None)
        .await
        .unwrap();
    let highest = [&p, &r, &w, &gone].iter().map(|x| x.lease.token).max();
    assert!(
        Some(new_hold(next).lease.token) > highest,
        "a token reused or lowered"
    );
}

/// A semaphore's limit and a waiting writer's intent hold across servers sharing the store.
pub async fn the_limit_and_writer_intents_hold_across_servers(h: &Harness) {
    if !h.capabilities().shared {
        return;
    }
    let other: Arc<dyn LockStore> = h.another_server().await;
    let name = h.resource("sem");
    let long = h.long_ttl();
    let racers = (0..20).map(|i| {
        let store = if i % 2 == 0 {
            h.store.clone()
        } else {
            other.clone()
        };
        let name = name.clone();
        tokio::spawn(async move { ask(store.as_ref(), &name, &format!("r{i}"), permit(3), long).await })
    });
    let racers: Vec<_> = racers.collect();
    let mut winners = 0;
    for racer in racers {
        winners += usize::from(matches!(racer.await.unwrap(), HoldOutcome::Granted { .. }));
    }
    assert_eq!(winners, 3, "across two servers");

    let r = hold(h, "rw", "r", Claim::Read).await;
    let rw = &r.lease.resource;
    let intent = Some(ttl(Duration::from_secs(60)));
    h.store
        .acquire_hold(rw, &owner("w"), Claim::Write, long, intent)
        .await
        .unwrap();
    let refused = busy(ask(other.as_ref(), rw, "c", Claim::Read, long).await);
    assert!(
        refused.writer_waits,
        "the other server sees the intent: {refused:?}"
    );
    h.store.withdraw_intent(rw, &owner("w")).await.unwrap();
    new_hold(ask(other.as_ref(), rw, "c", Claim::Read, long).await);
}
