//! The checks: one per rule of the SPEC, each over any store.

use std::collections::HashSet;
use std::time::Duration;

use fencelock_core::{
    AcquireOutcome, Capabilities, Claim, FencingToken, HoldOutcome, Key, Kind, Lease, ListQuery, LockStore,
    ReleaseNotice, ReleaseOutcome, RenewOutcome, Resource, StoreError,
};

use crate::{Harness, owner, ttl};

/// Acquires `resource` (of this harness) for `who`; panics unless it is a new grant.
pub(crate) async fn grant(h: &Harness, resource: &str, who: &str, ttl: fencelock_core::Ttl) -> Lease {
    let resource = h.resource(resource);
    granted(
        h.store
            .acquire(&resource, &owner(who), ttl)
            .await
            .expect("acquire"),
    )
}

/// The lease of a new grant; panics on any other outcome.
pub fn granted(outcome: AcquireOutcome) -> Lease {
    match outcome {
        AcquireOutcome::Granted { lease, .. } => lease,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Acquires, renews and releases `resource` on `store` until all three succeed or `within`
/// runs out, and returns the token granted: for the fault tests of stores with several
/// members, which serve again a moment after one is lost (a new leader, a client moving to
/// another member). Nobody else may use `resource`.
pub async fn cycle_until_it_works(
    store: &dyn LockStore,
    resource: &Resource,
    within: Duration,
) -> FencingToken {
    let deadline = std::time::Instant::now() + within;
    let who = owner("cycler");
    let long = ttl(Duration::from_secs(30));
    loop {
        let attempt = async {
            // An earlier attempt whose answer was lost may have left the lock to us: then
            // this extends it, with that attempt's token.
            let lease = match store.acquire(resource, &who, long).await? {
                AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease) => lease,
                refused => panic!("nobody else uses it: {refused:?}"),
            };
            let renewed = store.renew(resource, &who, long, Some(lease.token)).await?;
            assert!(matches!(renewed, RenewOutcome::Renewed(_)), "{renewed:?}");
            match store.release(resource, &who, Some(lease.token)).await? {
                ReleaseOutcome::Released(_) => Ok::<_, StoreError>(lease.token),
                other => panic!("release after a grant: {other:?}"),
            }
        };
        match attempt.await {
            Ok(token) => return token,
            Err(e) => {
                eprintln!(
                    "  {e}: {:?}",
                    std::error::Error::source(&e).map(ToString::to_string)
                );
                assert!(
                    std::time::Instant::now() < deadline,
                    "locks did not work again: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Asserts `outcome` released `lease` (and says which, where the store can tell).
pub(crate) fn assert_released(h: &Harness, outcome: ReleaseOutcome, lease: &Lease) {
    match outcome {
        ReleaseOutcome::Released(Some(ended)) => {
            assert_eq!(&ended.lease, lease);
            assert!(
                lease.acquired_at <= ended.ended_at && ended.ended_at <= lease.expires_at,
                "a live lease ends between its grant and its expiry: {ended:?}"
            );
        }
        ReleaseOutcome::Released(None) => assert!(
            !h.capabilities().knows_released_lease,
            "the store did not say which lease it released"
        ),
        other => panic!("expected the release of {lease:?}, got {other:?}"),
    }
}

fn assert_ttl(h: &Harness, lease: &Lease, ttl: fencelock_core::Ttl) {
    let lasts = lease.expires_at.since(lease.acquired_at);
    let Capabilities {
        ttl_granularity: granularity,
        drift,
        ..
    } = h.capabilities();
    let asked = ttl.as_duration();
    assert!(
        lasts >= asked - drift.of(asked) && lasts <= asked + granularity,
        "lease lasts {lasts:?}, asked {asked:?} (granularity {granularity:?}, drift {drift:?}): {lease:?}"
    );
}

/// Rule 2: acquire of a free resource grants a new lease with a new token.
pub async fn grant_is_a_new_lease_with_a_new_token(h: &Harness) {
    let ttl = h.long_ttl();
    let lease = grant(h, "payment:42", "worker-7", ttl).await;
    assert_eq!(lease.resource, h.resource("payment:42"));
    assert_eq!(lease.owner, owner("worker-7"));
    assert!(lease.token > FencingToken(0));
    assert_ttl(h, &lease, ttl);
    assert_eq!(h.store.get(&lease.resource).await.unwrap(), Some(lease));
}

/// Rule 1: of many concurrent acquires of one free resource, exactly one wins.
pub async fn concurrent_acquires_of_a_free_resource_have_one_winner(h: &Harness) {
    for round in 0..5 {
        let resource = h.resource(&format!("race-{round}"));
        one_winner(h, &resource, 32).await;
    }
}

/// Issue 22: 50 concurrent acquires of one name, by one owner and then by 50 owners, are all
/// answered: contention costs time, never an error. One owner gets one grant, extended by
/// every other acquire (same token); of 50 owners, one is granted and the others are told it
/// is held by that one.
pub async fn fifty_racers_on_one_name_are_all_answered(h: &Harness) {
    let resource = h.resource("one-owner");
    let outcomes = race(h, &resource, 50, |_| "racer".into()).await;
    let granted: Vec<&Lease> = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            AcquireOutcome::Granted { lease, .. } => Some(lease),
            _ => None,
        })
        .collect();
    assert_eq!(granted.len(), 1, "grants: {granted:?}");
    for outcome in &outcomes {
        match outcome {
            AcquireOutcome::Granted { .. } => {}
            AcquireOutcome::Extended(lease) => assert_eq!(lease.token, granted[0].token, "{lease:?}"),
            other => panic!("the owner's own lease refused it: {other:?}"),
        }
    }
    let now = h.store.get(&resource).await.unwrap().expect("still held");
    assert_eq!((&now.owner, now.token), (&granted[0].owner, granted[0].token));

    one_winner(h, &h.resource("fifty-owners"), 50).await;
}

/// `racers` concurrent acquires of the free `resource`, each by an owner of its own: exactly
/// one wins, and every loser is told of that winner.
async fn one_winner(h: &Harness, resource: &Resource, racers: usize) {
    let mut winners = Vec::new();
    let mut holders = HashSet::new();
    for outcome in race(h, resource, racers, |i| format!("w{i}")).await {
        match outcome {
            AcquireOutcome::Granted { lease, .. } => winners.push(lease),
            AcquireOutcome::Held { holder, .. } => {
                holders.insert(holder.token);
            }
            AcquireOutcome::Extended(lease) => panic!("nobody held it, yet extended: {lease:?}"),
            delayed @ AcquireOutcome::Delayed { .. } => {
                panic!("no lock-delay was asked for: {delayed:?}")
            }
        }
    }
    assert_eq!(winners.len(), 1, "{resource}: winners {winners:?}");
    let winner = &winners[0];
    assert!(
        holders.iter().all(|t| *t == winner.token),
        "losers saw another holder than {winner:?}"
    );
    assert_eq!(h.store.get(resource).await.unwrap().as_ref(), Some(winner));
}

/// The outcomes of `racers` concurrent acquires of `resource`, the `i`th by the owner
/// `owner(i)`; fails the check on any error.
async fn race(
    h: &Harness,
    resource: &Resource,
    racers: usize,
    owner_of: impl Fn(usize) -> String,
) -> Vec<AcquireOutcome> {
    let attempts: Vec<_> = (0..racers)
        .map(|i| {
            let (store, resource, who) = (h.store.clone(), resource.clone(), owner(&owner_of(i)));
            let ttl = h.long_ttl();
            tokio::spawn(async move { store.acquire(&resource, &who, ttl).await })
        })
        .collect();
    let mut outcomes = Vec::with_capacity(racers);
    for attempt in attempts {
        outcomes.push(attempt.await.unwrap().expect("acquire"));
    }
    outcomes
}

/// Rule 3: the holder's re-acquire extends: same token, new `acquired_at` and `expires_at`.
pub async fn reacquire_by_the_holder_extends_with_the_same_token(h: &Harness) {
    let first = grant(h, "r", "a", h.long_ttl()).await;
    h.pass(Duration::from_millis(20)).await;
    let longer = ttl(Duration::from_secs(1200));
    let outcome = h
        .store
        .acquire(&first.resource, &owner(" a "), longer)
        .await
        .unwrap();
    let AcquireOutcome::Extended(extended) = outcome else {
        panic!("expected an extension, got {outcome:?}");
    };
    assert_eq!(extended.token, first.token);
    assert_eq!(extended.owner, first.owner);
    assert!(
        extended.acquired_at > first.acquired_at,
        "{first:?} -> {extended:?}"
    );
    assert_ttl(h, &extended, longer);
    assert_eq!(h.store.get(&first.resource).await.unwrap(), Some(extended));
}

/// Rule 4: a live lease of another owner is not granted, and that is not an error.
pub async fn acquire_of_a_held_resource_reports_the_holder(h: &Harness) {
    let lease = grant(h, "r", "a", h.long_ttl()).await;
    for other in ["b", "A", "a2"] {
        match h
            .store
            .acquire(&lease.resource, &owner(other), h.long_ttl())
            .await
            .unwrap()
        {
            AcquireOutcome::Held { holder, expires_in } => {
                assert_eq!(holder, lease);
                assert!(expires_in > Duration::from_secs(500) && expires_in <= Duration::from_secs(600));
            }
            outcome => panic!("{other} got {outcome:?} of a lock held by a"),
        }
    }
    assert_eq!(h.store.get(&lease.resource).await.unwrap(), Some(lease));
}

/// The fencing token: strictly greater for every new lease, across releases and expiries.
pub async fn tokens_increase_across_releases_and_expiries(h: &Harness) {
    let mut last = FencingToken(0);
    for i in 0..5 {
        let lease = grant(h, "r", &format!("o{i}"), h.long_ttl()).await;
        assert!(lease.token > last, "token {} after {last}", lease.token);
        last = lease.token;
        let released = h
            .store
            .release(&lease.resource, &lease.owner, Some(lease.token))
            .await
            .unwrap();
        assert_released(h, released, &lease);
    }
    let lease = grant(h, "r", "short", h.short_ttl()).await;
    assert!(lease.token > last);
    h.expire(&lease).await;
    let after = grant(h, "r", "short", h.long_ttl()).await;
    assert!(
        after.token > lease.token,
        "token {} after expired {}",
        after.token,
        lease.token
    );
    // Another resource's grants never lower this one's next token.
    grant(h, "other", "x", h.long_ttl()).await;
    h.store
        .release(&after.resource, &after.owner, None)
        .await
        .unwrap();
    assert!(grant(h, "r", "y", h.long_ttl()).await.token > after.token);
}

/// Rules 5 and 11 of the seed: an expired lease is absent: not found by get, renew or
/// release; anybody may acquire it, with a new token.
pub async fn an_expired_lease_is_gone_and_cannot_be_renewed(h: &Harness) {
    let lease = grant(h, "r", "a", h.short_ttl()).await;
    h.expire(&lease).await;
    let (r, a) = (&lease.resource, &lease.owner);
    assert_eq!(h.store.get(r).await.unwrap(), None);
    assert_eq!(
        h.store.renew(r, a, h.long_ttl(), None).await.unwrap(),
        RenewOutcome::NotFound
    );
    assert_eq!(
        h.store
            .renew(r, a, h.long_ttl(), Some(lease.token))
            .await
            .unwrap(),
        RenewOutcome::NotFound
    );
    assert_eq!(
        h.store.release(r, a, Some(lease.token)).await.unwrap(),
        ReleaseOutcome::NotFound
    );
    match h.store.acquire(r, &owner("b"), h.long_ttl()).await.unwrap() {
        AcquireOutcome::Granted { lease: next, expired } => {
            assert!(next.token > lease.token);
            assert!(
                expired.as_ref().is_none_or(|e| *e == lease),
                "replaced {expired:?}, expected {lease:?}"
            );
        }
        outcome => panic!("expected a grant after expiry, got {outcome:?}"),
    }
}

/// Rules 5 and 8 for release: absent → not found; other owner → forbidden whatever the
/// token; wrong token → conflict and nothing changes; then released, and gone.
pub async fn release_checks_presence_then_owner_then_token(h: &Harness) {
    let absent = h.resource("absent");
    assert_eq!(
        h.store.release(&absent, &owner("a"), None).await.unwrap(),
        ReleaseOutcome::NotFound
    );
    assert_eq!(
        h.store
            .release(&absent, &owner("a"), Some(FencingToken(1)))
            .await
            .unwrap(),
        ReleaseOutcome::NotFound
    );
    let lease = grant(h, "r", "a", h.long_ttl()).await;
    let r = &lease.resource;
    let wrong = FencingToken(lease.token.0 + 1000);
    for token in [None, Some(lease.token), Some(wrong)] {
        assert_eq!(
            h.store.release(r, &owner("b"), token).await.unwrap(),
            ReleaseOutcome::Forbidden
        );
    }
    assert_eq!(
        h.store.release(r, &owner("a"), Some(wrong)).await.unwrap(),
        ReleaseOutcome::Conflict
    );
    assert_eq!(h.store.get(r).await.unwrap(), Some(lease.clone()));
    let released = h.store.release(r, &owner("a"), Some(lease.token)).await.unwrap();
    assert_released(h, released, &lease);
    assert_eq!(h.store.get(r).await.unwrap(), None);
    assert_eq!(
        h.store.release(r, &owner("a"), None).await.unwrap(),
        ReleaseOutcome::NotFound
    );
    // Without a token, the owner alone decides.
    let again = grant(h, "r", "a", h.long_ttl()).await;
    let released = h.store.release(r, &owner("a"), None).await.unwrap();
    assert_released(h, released, &again);
}

/// Rules 5 and 8 for renew, in the same order as release.
pub async fn renew_checks_presence_then_owner_then_token(h: &Harness) {
    let ttl = h.long_ttl();
    let absent = h.resource("absent");
    assert_eq!(
        h.store.renew(&absent, &owner("a"), ttl, None).await.unwrap(),
        RenewOutcome::NotFound
    );
    let lease = grant(h, "r", "a", ttl).await;
    let r = &lease.resource;
    let wrong = FencingToken(lease.token.0 + 1000);
    for token in [None, Some(lease.token), Some(wrong)] {
        assert_eq!(
            h.store.renew(r, &owner("b"), ttl, token).await.unwrap(),
            RenewOutcome::Forbidden
        );
    }
    assert_eq!(
        h.store.renew(r, &owner("a"), ttl, Some(wrong)).await.unwrap(),
        RenewOutcome::Conflict
    );
    assert_eq!(h.store.get(r).await.unwrap(), Some(lease.clone()));
    assert!(matches!(
        h.store
            .renew(r, &owner("a"), ttl, Some(lease.token))
            .await
            .unwrap(),
        RenewOutcome::Renewed(_)
    ));
    assert!(matches!(
        h.store.renew(r, &owner("a"), ttl, None).await.unwrap(),
        RenewOutcome::Renewed(_)
    ));
}

/// Renew sets `expires_at` to now + TTL (longer or shorter) and keeps token and
/// `acquired_at`.
pub async fn renew_moves_only_the_expiry(h: &Harness) {
    let lease = grant(h, "r", "a", h.long_ttl()).await;
    h.pass(Duration::from_millis(20)).await;
    for asked in [ttl(Duration::from_secs(1200)), ttl(Duration::from_secs(60))] {
        let outcome = h
            .store
            .renew(&lease.resource, &lease.owner, asked, Some(lease.token))
            .await
            .unwrap();
        let RenewOutcome::Renewed(renewed) = outcome else {
            panic!("expected a renewal, got {outcome:?}");
        };
        assert_eq!(renewed.token, lease.token);
        assert_eq!(renewed.acquired_at, lease.acquired_at);
        let lasts = renewed.expires_at.since(lease.acquired_at);
        let Capabilities {
            ttl_granularity: granularity,
            drift,
            ..
        } = h.capabilities();
        assert!(
            lasts + drift.of(asked.as_duration()) >= asked.as_duration() + Duration::from_millis(20),
            "{lasts:?} for {asked:?} (drift {drift:?})"
        );
        assert!(lasts <= asked.as_duration() + granularity + Duration::from_secs(5));
        assert_eq!(h.store.get(&lease.resource).await.unwrap(), Some(renewed));
    }
}

/// Rule 8: a delayed release or renew from an old lease never touches a newer one.
pub async fn a_late_release_with_an_old_token_frees_nothing(h: &Harness) {
    let old = grant(h, "r", "a", h.short_ttl()).await;
    h.expire(&old).await;
    let new = grant(h, "r", "a", h.long_ttl()).await;
    assert!(new.token > old.token);
    let (r, a) = (&new.resource, &new.owner);
    assert_eq!(
        h.store.release(r, a, Some(old.token)).await.unwrap(),
        ReleaseOutcome::Conflict
    );
    assert_eq!(
        h.store.renew(r, a, h.long_ttl(), Some(old.token)).await.unwrap(),
        RenewOutcome::Conflict
    );
    assert_eq!(h.store.get(r).await.unwrap(), Some(new));
}

/// Listing: live leases only, ordered by the bytes of the name, filtered by prefix, in pages
/// that join up without gaps or repeats.
pub async fn list_orders_by_bytes_filters_by_prefix_and_pages(h: &Harness) {
    let names = ["b", "a", "B", "é", "a/2", "a/10", "z"];
    for name in names {
        grant(h, &format!("list/{name}"), "o", h.long_ttl()).await;
    }
    let gone = grant(h, "list/expired", "o", h.short_ttl()).await;
    h.expire(&gone).await;
    grant(h, "other/x", "o", h.long_ttl()).await;

    let prefix = format!("{}list/", h.namespace());
    let mut expected: Vec<String> = names.iter().map(|n| format!("{prefix}{n}")).collect();
    expected.sort(); // String's order is the order of the UTF-8 bytes.

    let all = h
        .store
        .list(&ListQuery {
            prefix: prefix.clone(),
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    let listed: Vec<String> = all.leases.iter().map(|l| l.resource.to_string()).collect();
    assert_eq!(listed, expected);
    assert_eq!(all.next, None);

    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = h
            .store
            .list(&ListQuery {
                prefix: prefix.clone(),
                after,
                limit: 3,
            })
            .await
            .unwrap();
        assert!(page.leases.len() <= 3);
        paged.extend(page.leases.iter().map(|l| l.resource.to_string()));
        match page.next {
            Some(next) => {
                assert_eq!(Some(&next), page.leases.last().map(|l| &l.resource));
                after = Some(next);
            }
            None => break,
        }
        assert!(paged.len() <= expected.len(), "pages repeat: {paged:?}");
    }
    assert_eq!(paged, expected);

    let a = h
        .store
        .list(&ListQuery {
            prefix: format!("{prefix}a"),
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(a.leases.len(), 3, "{a:?}");
}

/// Purging forgets expired leases (reporting them, where the store can) and keeps live ones.
pub async fn purge_forgets_only_expired_leases(h: &Harness) {
    let live = grant(h, "live", "o", h.long_ttl()).await;
    let dead = grant(h, "dead", "o", h.short_ttl()).await;
    h.expire(&dead).await;
    let purged: Vec<Lease> = h
        .store
        .purge_expired()
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == Kind::Lock)
        .map(|e| e.lease)
        .collect();
    // A lease is its name and its token: stores that count tokens per name (Redlock) may
    // give another name's lease the same token.
    assert!(
        !purged
            .iter()
            .any(|l| l.resource == live.resource && l.token == live.token),
        "purged a live lease: {purged:?}"
    );
    // Other checks may share the store: only this harness's leases are ours to judge.
    let ours: Vec<_> = purged
        .iter()
        .filter(|l| l.resource.as_str().starts_with(h.namespace()))
        .collect();
    assert!(ours.iter().all(|l| **l == dead), "purged {ours:?}");
    assert_eq!(h.store.get(&live.resource).await.unwrap(), Some(live));
    assert_eq!(h.store.get(&dead.resource).await.unwrap(), None);
}

/// Names travel byte for byte: quotes, SQL, unicode, 255 bytes, `%` and `/`.
pub async fn names_are_stored_as_given(h: &Harness) {
    let long = "x".repeat(255 - h.namespace().len());
    for name in [
        "resource'; DROP TABLE leases; --",
        "é€😀/%2F\\\"",
        " spaced ",
        long.as_str(),
    ] {
        let resource = h.resource(name);
        let who = "owner ' \" é";
        let lease = grant(h, name, who, h.long_ttl()).await;
        assert_eq!(lease.resource, resource);
        assert_eq!(lease.owner.as_str(), who);
        assert_eq!(h.store.get(&resource).await.unwrap(), Some(lease));
    }
}

/// A release is announced on the store's feed (where the store has one).
pub async fn releases_are_announced(h: &Harness) {
    let Some(mut feed) = h.store.releases() else {
        return;
    };
    let lease = grant(h, "announced", "o", h.long_ttl()).await;
    h.store
        .release(&lease.resource, &lease.owner, None)
        .await
        .unwrap();
    assert!(
        announced(&mut feed, &lease.resource).await,
        "release of {} was not announced",
        lease.resource
    );
}

/// A renewal or an extension that shortens a lease is announced on the store's feed (where
/// the store has one): waiters timed to the old expiry must ask again.
pub async fn shortened_leases_are_announced(h: &Harness) {
    let Some(mut feed) = h.store.releases() else {
        return;
    };
    let lease = grant(h, "shortened", "o", h.long_ttl()).await;
    let renewed = h
        .store
        .renew(&lease.resource, &lease.owner, h.short_ttl(), None)
        .await
        .unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed(_)), "{renewed:?}");
    assert!(
        announced(&mut feed, &lease.resource).await,
        "a shortening renewal of {} was not announced",
        lease.resource
    );
    let lease = grant(h, "shortened-by-extension", "o", h.long_ttl()).await;
    let extended = h
        .store
        .acquire(&lease.resource, &lease.owner, h.short_ttl())
        .await
        .unwrap();
    assert!(matches!(extended, AcquireOutcome::Extended(_)), "{extended:?}");
    assert!(
        announced(&mut feed, &lease.resource).await,
        "a shortening extension of {} was not announced",
        lease.resource
    );
}

/// Whether the lock `resource` is announced on `feed` within a few seconds.
pub(crate) async fn announced(
    feed: &mut tokio::sync::broadcast::Receiver<ReleaseNotice>,
    resource: &Resource,
) -> bool {
    announced_key(feed, &Key::lock(resource)).await
}

/// Whether `key` is announced on `feed` within a few seconds.
pub(crate) async fn announced_key(
    feed: &mut tokio::sync::broadcast::Receiver<ReleaseNotice>,
    key: &Key,
) -> bool {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match feed.recv().await {
                Ok(ReleaseNotice::Freed(heard)) if heard == *key => return,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(closed) => panic!("release feed closed: {closed}"),
            }
        }
    })
    .await
    .is_ok()
}

/// The store answers a readiness check.
pub async fn ping_answers(h: &Harness) {
    h.store.ping().await.expect("ping");
}

/// A fencing token of 0 is a token like any other: sent with a release or renewal of a lease,
/// a permit or a hold whose token is another, it is refused as a conflict and changes nothing
/// (not taken as "no token").
pub async fn a_token_of_zero_is_checked_like_any_other(h: &Harness) {
    let zero = Some(FencingToken(0));
    let ttl = h.long_ttl();
    let lease = grant(h, "zero", "a", ttl).await;
    let r = &lease.resource;
    assert_eq!(
        h.store.renew(r, &owner("a"), ttl, zero).await.unwrap(),
        RenewOutcome::Conflict
    );
    assert_eq!(
        h.store.release(r, &owner("a"), zero).await.unwrap(),
        ReleaseOutcome::Conflict
    );
    assert_eq!(h.store.get(r).await.unwrap(), Some(lease.clone()), "unchanged");
    for claim in [Claim::Permit { limit: 2 }, Claim::Write] {
        let name = h.resource(&format!("zero-{}", claim.kind()));
        let hold = match h
            .store
            .acquire_hold(&name, &owner("a"), claim, ttl, None)
            .await
            .unwrap()
        {
            HoldOutcome::Granted { hold, .. } => hold,
            other => panic!("{claim:?}: {other:?}"),
        };
        let kind = claim.kind();
        assert_eq!(
            h.store
                .renew_hold(kind, &name, &owner("a"), ttl, zero)
                .await
                .unwrap(),
            RenewOutcome::Conflict,
            "{claim:?}"
        );
        assert_eq!(
            h.store
                .release_hold(kind, &name, &owner("a"), zero)
                .await
                .unwrap(),
            ReleaseOutcome::Conflict,
            "{claim:?}"
        );
        assert_eq!(
            h.store.holds(kind, &name).await.unwrap(),
            [hold],
            "{claim:?}: unchanged"
        );
    }
}

/// The shortest TTL (1 ms) is granted, never refused as an error, on every kind: a store whose
/// nature cannot keep so short a lease raises it to its floor, which the lease shows.
pub async fn the_shortest_ttl_is_granted(h: &Harness) {
    let shortest = fencelock_core::Ttl::from_const_millis(1);
    let lease = granted(
        h.store
            .acquire(&h.resource("shortest"), &owner("a"), shortest)
            .await
            .unwrap(),
    );
    assert!(lease.expires_at > lease.acquired_at, "{lease:?}");
    for claim in [Claim::Permit { limit: 2 }, Claim::Read, Claim::Write] {
        let name = h.resource(&format!("shortest-{claim:?}"));
        let outcome = h
            .store
            .acquire_hold(&name, &owner("a"), claim, shortest, None)
            .await
            .unwrap();
        assert!(
            matches!(outcome, HoldOutcome::Granted { .. }),
            "{claim:?}: {outcome:?}"
        );
    }
}
