//! Several locks at once, all or none, and the terms a lease keeps for its whole life: the cap
//! on holding (`max_hold`) and the lock-delay after an expiry.

use std::time::{Duration, Instant};

use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Lease, LockStore, Owner, RenewOutcome, Resources, Terms, Ttl,
};

use crate::checks::{grant, granted};
use crate::{Harness, owner, ttl};

async fn acquire_all(
    store: &dyn LockStore,
    resources: &Resources,
    who: &Owner,
    terms: &Terms,
) -> AcquireAllOutcome {
    store
        .acquire_all(resources, who, terms.clone())
        .await
        .unwrap_or_else(|e| panic!("acquire_all: {e}"))
}

fn names(h: &Harness, names: &[&str]) -> Resources {
    Resources::new(names.iter().map(|n| h.resource(n)).collect()).expect("distinct test names")
}

/// The leases of an all-or-none grant, in the order asked; panics if it was refused.
fn all_granted(outcome: AcquireAllOutcome) -> Vec<Lease> {
    match outcome {
        AcquireAllOutcome::Granted(outcomes) => outcomes
            .iter()
            .map(|o| o.lease().cloned().unwrap_or_else(|| panic!("granted, yet {o:?}")))
            .collect(),
        refused => panic!("expected every lock, got {refused:?}"),
    }
}

/// Several locks are granted together, in the order asked, or none is: a refusal names every
/// lock in the way, and leaves the free ones free.
pub async fn several_locks_are_acquired_all_or_none(h: &Harness) {
    let held_b = grant(h, "b", "other", h.long_ttl()).await;
    let wanted = names(h, &["c", "b", "a"]);
    let me = owner("me");
    let terms = Terms::ttl(h.long_ttl());
    match acquire_all(&*h.store, &wanted, &me, &terms).await {
        AcquireAllOutcome::Refused(refusals) => match refusals.as_slice() {
            [AcquireOutcome::Held { holder, expires_in }] => {
                assert_eq!(holder, &held_b);
                assert!(*expires_in > Duration::ZERO);
            }
            other => panic!("b alone is in the way, got {other:?}"),
        },
        granted => panic!("b is held, yet {granted:?}"),
    }
    for free in ["a", "c"] {
        assert_eq!(
            h.store.get(&h.resource(free)).await.unwrap(),
            None,
            "{free} was left acquired by a refused all-or-none"
        );
    }
    // Two locks in the way: both named, in the order asked.
    let held_a = grant(h, "a", "third", h.long_ttl()).await;
    match acquire_all(&*h.store, &wanted, &me, &terms).await {
        AcquireAllOutcome::Refused(refusals) => {
            let holders: Vec<&Lease> = refusals
                .iter()
                .map(|r| match r {
                    AcquireOutcome::Held { holder, .. } => holder,
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(holders, [&held_b, &held_a]);
        }
        granted => panic!("a and b are held, yet {granted:?}"),
    }
    assert_eq!(h.store.get(&h.resource("c")).await.unwrap(), None);
    for lease in [&held_a, &held_b] {
        h.store
            .release(&lease.resource, &lease.owner, Some(lease.token))
            .await
            .unwrap();
    }
    // All free (one already ours): every lock, in the order asked; ours is extended with its
    // token, the others are new grants with tokens above the ones before.
    let mine = grant(h, "a", "me", h.long_ttl()).await;
    let outcome = acquire_all(&*h.store, &wanted, &me, &terms).await;
    let AcquireAllOutcome::Granted(outcomes) = &outcome else {
        panic!("all free, yet {outcome:?}");
    };
    assert!(
        matches!(&outcomes[2], AcquireOutcome::Extended(lease) if lease.token == mine.token),
        "{outcomes:?}"
    );
    let leases = all_granted(outcome);
    let order: Vec<_> = leases.iter().map(|l| l.resource.clone()).collect();
    assert_eq!(order, wanted.as_slice(), "in the order asked");
    assert!(leases[1].token > held_b.token, "{leases:?}");
    for lease in &leases {
        assert_eq!(lease.owner, me);
        assert_eq!(h.store.get(&lease.resource).await.unwrap().as_ref(), Some(lease));
    }
}

/// Two owners take the same two locks at once in opposite orders, 20 times: exactly one gets
/// both, the other gets neither, and once the winner releases, the other gets both.
pub async fn opposite_orders_never_both_win(h: &Harness) {
    for round in 0..20 {
        let (x, y) = (format!("x-{round}"), format!("y-{round}"));
        let forward = names(h, &[&x, &y]);
        let backward = names(h, &[&y, &x]);
        let (p, q) = (owner("p"), owner("q"));
        let terms = Terms::ttl(h.long_ttl());
        let (first, second) = tokio::join!(
            acquire_all(&*h.store, &forward, &p, &terms),
            acquire_all(&*h.store, &backward, &q, &terms),
        );
        let (winner, loser, wanted) = match (&first, &second) {
            (AcquireAllOutcome::Granted(_), AcquireAllOutcome::Refused(_)) => (&p, &q, &backward),
            (AcquireAllOutcome::Refused(_), AcquireAllOutcome::Granted(_)) => (&q, &p, &forward),
            _ => panic!("round {round}: one winner, got {first:?} and {second:?}"),
        };
        for name in [&x, &y] {
            let lease = h.store.get(&h.resource(name)).await.unwrap();
            assert_eq!(lease.map(|l| l.owner).as_ref(), Some(winner), "round {round}");
            h.store.release(&h.resource(name), winner, None).await.unwrap();
        }
        all_granted(acquire_all(&*h.store, wanted, loser, &terms).await);
    }
}

/// The lock-delay a store keeps: the test's, long enough that a check on real time asserts
/// the lock closed before it ends.
const DELAY: Duration = Duration::from_secs(2);

/// After a lease with a lock-delay expires (never released), nobody gets the lock before
/// `expires_at + lock-delay`, a purge does not forget it meanwhile, and then the next grant
/// has a greater token. A store that does not keep delays (a client of a server) grants it
/// at once.
pub async fn a_lock_delay_keeps_an_expired_lock_closed(h: &Harness) {
    let resource = h.resource("delayed");
    let terms = Terms::ttl(h.short_ttl()).lock_delay(DELAY);
    let lease = granted(
        h.store
            .acquire_with(&resource, &owner("crashed"), terms)
            .await
            .unwrap(),
    );
    h.expire(&lease).await;
    if !h.capabilities().lock_delays {
        let next = granted(
            h.store
                .acquire(&resource, &owner("next"), h.long_ttl())
                .await
                .unwrap(),
        );
        assert!(next.token > lease.token);
        return;
    }
    assert_eq!(lease.lock_delay, DELAY, "{lease:?}");
    h.store.purge_expired().await.unwrap();
    match h
        .store
        .acquire(&resource, &owner("next"), h.long_ttl())
        .await
        .unwrap()
    {
        AcquireOutcome::Delayed {
            resource: closed,
            retry_in,
        } => {
            assert_eq!(closed, resource);
            assert!(
                retry_in > Duration::ZERO && retry_in <= DELAY,
                "retry in {retry_in:?}, delay {DELAY:?}"
            );
        }
        other => panic!("the lock-delay runs, yet {other:?}"),
    }
    assert_eq!(
        h.store.get(&resource).await.unwrap(),
        None,
        "nobody holds it meanwhile"
    );
    let next = granted_once_open(h, &resource, &owner("next")).await;
    assert!(next.token > lease.token);
    assert!(
        next.acquired_at >= lease.closed_until(),
        "granted at {} before the delay ended at {}",
        next.acquired_at,
        lease.closed_until()
    );
}

/// Asks for `resource` until the lock-delay that closes it ends (by the store's answers, or
/// by the manual clock), and returns the grant.
async fn granted_once_open(h: &Harness, resource: &fencelock_core::Resource, who: &Owner) -> Lease {
    let deadline = Instant::now() + DELAY + Duration::from_secs(10);
    loop {
        match h.store.acquire(resource, who, h.long_ttl()).await.unwrap() {
            AcquireOutcome::Delayed { retry_in, .. } => {
                assert!(Instant::now() < deadline, "the lock-delay never ended");
                // The store said when: on a manual clock this moves it, on real time it waits.
                h.pass(retry_in).await;
            }
            other => return granted(other),
        }
    }
}

/// A release ends the lock-delay at once: the lock goes to the next owner with no wait. A
/// refused all-or-none names a lock closed by its delay as in the way.
pub async fn a_release_has_no_lock_delay_and_a_delay_refuses_all_or_none(h: &Harness) {
    let terms = Terms::ttl(h.long_ttl()).lock_delay(DELAY);
    let released = h.resource("released");
    let lease = granted(h.store.acquire_with(&released, &owner("a"), terms).await.unwrap());
    h.store
        .release(&released, &lease.owner, Some(lease.token))
        .await
        .unwrap();
    let next = granted(
        h.store
            .acquire(&released, &owner("b"), h.long_ttl())
            .await
            .unwrap(),
    );
    assert!(next.token > lease.token);

    let closed = h.resource("closed");
    let expiring = Terms::ttl(h.short_ttl()).lock_delay(DELAY);
    let lease = granted(
        h.store
            .acquire_with(&closed, &owner("crashed"), expiring)
            .await
            .unwrap(),
    );
    h.expire(&lease).await;
    let both = Resources::new(vec![h.resource("free"), closed.clone()]).unwrap();
    let outcome = h
        .store
        .acquire_all(&both, &owner("c"), Terms::ttl(h.long_ttl()))
        .await
        .unwrap();
    if !h.capabilities().lock_delays {
        all_granted(outcome);
        return;
    }
    match outcome {
        AcquireAllOutcome::Refused(refusals) => match refusals.as_slice() {
            [AcquireOutcome::Delayed { resource, retry_in }] => {
                assert_eq!(resource, &closed);
                assert!(*retry_in <= DELAY);
            }
            other => panic!("the delayed lock alone is in the way: {other:?}"),
        },
        granted => panic!("a lock-delay runs, yet {granted:?}"),
    }
    assert_eq!(h.store.get(&h.resource("free")).await.unwrap(), None);
}

/// The cap on holding: set by the grant, measured from it, shown as `hold_until`; the first
/// TTL, every renewal and every extension end at it at the latest; an extension keeps the
/// cap whatever it asks; once the cap has passed, the lease is gone and cannot be renewed.
pub async fn the_cap_cuts_the_ttl_renewals_and_extensions(h: &Harness) {
    let cap = cap(h);
    let resource = h.resource("capped");
    let who = owner("job");
    let long = ttl(Duration::from_secs(600));
    let lease = granted(
        h.store
            .acquire_with(&resource, &who, Terms::ttl(long).max_hold(Some(cap)))
            .await
            .unwrap(),
    );
    assert_eq!(lease.hold_until, Some(lease.acquired_at.plus(cap)), "{lease:?}");
    assert_cut(h, &lease, cap, "the first TTL is cut");

    let renewed = match h
        .store
        .renew(&resource, &who, long, Some(lease.token))
        .await
        .unwrap()
    {
        RenewOutcome::Renewed(renewed) => renewed,
        other => panic!("renew of a live capped lease: {other:?}"),
    };
    assert_eq!(renewed.hold_until, lease.hold_until);
    assert_cut(h, &renewed, cap, "a renewal is cut");

    // An extension asks for no cap, or another: the lease keeps its own.
    for asked in [None, Some(ttl(Duration::from_secs(3600)))] {
        let terms = Terms::ttl(long).max_hold(asked);
        match h.store.acquire_with(&resource, &who, terms).await.unwrap() {
            AcquireOutcome::Extended(extended) => {
                assert_eq!(extended.token, lease.token);
                assert_eq!(extended.hold_until, lease.hold_until, "asked {asked:?}");
                assert_cut(h, &extended, cap, "an extension is cut");
            }
            other => panic!("extension of a capped lease: {other:?}"),
        }
    }
    let current = h.store.get(&resource).await.unwrap().expect("live until the cap");
    h.expire(&current).await;
    assert_eq!(
        h.store.renew(&resource, &who, long, None).await.unwrap(),
        RenewOutcome::NotFound,
        "past its cap a lease is gone for good"
    );
    // Under the cap, a TTL is a TTL; without a cap, there is no hold_until.
    let short = h.resource("capped-short");
    let ttl_first = ttl(cap_granule(h));
    let big_cap = Terms::ttl(ttl_first).max_hold(Some(ttl(Duration::from_secs(3600))));
    let lease = granted(h.store.acquire_with(&short, &who, big_cap).await.unwrap());
    assert!(Some(lease.expires_at) < lease.hold_until, "{lease:?}");
    let plain = grant(h, "uncapped", "job", h.long_ttl()).await;
    assert_eq!(plain.hold_until, None);
}

/// Asserts that `lease` ends at its cap `hold_until` (of `cap`), less the store's allowance
/// for drift ([`fencelock_core::Capabilities::drift`]) if it has one.
fn assert_cut(h: &Harness, lease: &fencelock_core::Lease, cap: Ttl, what: &str) {
    let hold_until = lease.hold_until.expect("a capped lease");
    let allowance = h.capabilities().drift.of(cap.as_duration());
    assert!(
        lease.expires_at <= hold_until && hold_until.since(lease.expires_at) <= allowance,
        "{what}: {lease:?} (drift {allowance:?})"
    );
}

/// The cap for the cap check: short, so that it passes soon on real time, and a whole number
/// of the store's TTL granules.
fn cap(h: &Harness) -> Ttl {
    ttl(cap_granule(h) * 2)
}

fn cap_granule(h: &Harness) -> Duration {
    h.capabilities().ttl_granularity.max(Duration::from_millis(500))
}

/// The terms stay with the lease across a reopen of a durable store, and the lock-delay of a
/// lease that expired before the store was closed still holds once it is open again.
pub async fn terms_survive_a_reopen(h: &Harness) {
    if !h.capabilities().durable {
        return;
    }
    let capped = h.resource("capped-kept");
    let terms = Terms::ttl(h.long_ttl()).max_hold(Some(ttl(Duration::from_secs(3600))));
    let lease = granted(h.store.acquire_with(&capped, &owner("a"), terms).await.unwrap());
    let delayed = h.resource("delay-kept");
    let expiring = Terms::ttl(h.short_ttl()).lock_delay(Duration::from_secs(60));
    let closing = granted(
        h.store
            .acquire_with(&delayed, &owner("b"), expiring)
            .await
            .unwrap(),
    );
    h.expire(&closing).await;

    let store = h.reopened().await;
    let now = store.get(&capped).await.unwrap().expect("kept across the reopen");
    assert_eq!(
        (now.token, now.hold_until.is_some()),
        (lease.token, true),
        "{now:?}"
    );
    assert!(now.expires_at <= now.hold_until.unwrap());
    // A store that does not count the time it was closed (the embedded one) gives the lease
    // back the time it had left at its last write: let it run out again.
    if let Some(back) = store.get(&delayed).await.unwrap() {
        h.expire_with(&back, async || {
            let current = store.get(&delayed).await.expect("get while waiting for expiry");
            current.is_some_and(|c| c.token == back.token)
        })
        .await;
    }
    match store.acquire(&delayed, &owner("c"), h.long_ttl()).await.unwrap() {
        AcquireOutcome::Delayed { .. } => {}
        other => panic!("the lock-delay was lost across the reopen: {other:?}"),
    }
}

/// A lock-delay kept by one server holds on every server sharing the store, and the cap set
/// through one is the cap seen through the other.
pub async fn terms_hold_across_servers(h: &Harness) {
    if !h.capabilities().shared {
        return;
    }
    let other = h.another_server().await;
    let resource = h.resource("delay-shared");
    let expiring = Terms::ttl(h.short_ttl()).lock_delay(DELAY);
    let lease = granted(
        h.store
            .acquire_with(&resource, &owner("crashed"), expiring)
            .await
            .unwrap(),
    );
    h.expire(&lease).await;
    match other
        .acquire(&resource, &owner("next"), h.long_ttl())
        .await
        .unwrap()
    {
        AcquireOutcome::Delayed { .. } => {}
        other => panic!("the other server granted within the lock-delay: {other:?}"),
    }
    let capped = h.resource("cap-shared");
    let cap = ttl(Duration::from_secs(3600));
    let terms = Terms::ttl(h.long_ttl()).max_hold(Some(cap));
    let lease = granted(h.store.acquire_with(&capped, &owner("a"), terms).await.unwrap());
    let seen = other.get(&capped).await.unwrap().expect("live");
    assert_eq!(seen.hold_until, lease.hold_until);
    match other
        .renew(&capped, &owner("a"), ttl(Duration::from_secs(7200)), None)
        .await
        .unwrap()
    {
        RenewOutcome::Renewed(renewed) => assert_cut(h, &renewed, cap, "a renewal on the other server"),
        other => panic!("renew through the other server: {other:?}"),
    }
}

/// A refused all-or-none changes nothing, the caller's own leases included: a lock it already
/// held keeps its owner, token, `acquired_at`, `expires_at` and `hold_until` exactly, whether
/// the refusal comes at once or after a wait, and whether the lock it holds comes before or
/// after the one in the way (in the order asked, or of the names' bytes).
pub async fn a_refused_all_or_none_leaves_the_callers_leases_as_they_were(h: &Harness) {
    let me = owner("me");
    let long = Terms::ttl(h.long_ttl()).max_hold(Some(ttl(Duration::from_secs(3600))));
    let mine = granted(
        h.store
            .acquire_with(&h.resource("a-mine"), &me, long)
            .await
            .unwrap(),
    );
    let theirs = grant(h, "b-theirs", "other", h.long_ttl()).await;
    let waiters = fencelock_core::Waiters::new(h.store.clone());
    let gone = tokio_util::sync::CancellationToken::new();
    let short = Terms::ttl(h.short_ttl());
    for order in [["a-mine", "b-theirs"], ["b-theirs", "a-mine"]] {
        let wanted = names(h, &order);
        let refused = h.store.acquire_all(&wanted, &me, short.clone()).await.unwrap();
        assert!(
            matches!(&refused, AcquireAllOutcome::Refused(r) if r.len() == 1),
            "{order:?}: b is held, yet {refused:?}"
        );
        assert_eq!(
            h.store.get(&mine.resource).await.unwrap().as_ref(),
            Some(&mine),
            "{order:?}: a refused all-or-none changed the caller's own lease"
        );
        let waited = waiters
            .acquire_all_unless(&wanted, &me, &short, Duration::from_millis(200), &gone)
            .await
            .unwrap();
        assert!(
            matches!(&waited.outcome, AcquireAllOutcome::Refused(_)),
            "{order:?}: b is held, yet {waited:?}"
        );
        assert_eq!(
            h.store.get(&mine.resource).await.unwrap().as_ref(),
            Some(&mine),
            "{order:?}: a refused all-or-none after a wait changed the caller's own lease"
        );
    }
    assert_eq!(
        h.store.get(&theirs.resource).await.unwrap().as_ref(),
        Some(&theirs)
    );
}

/// The tokens of an all-or-none grant follow the order given, not the names' bytes: each is
/// at least the one before it in the list (equal where one write grants them all).
pub async fn tokens_of_several_locks_follow_the_order_given(h: &Harness) {
    for order in [["z", "m", "a"], ["a", "m", "z"], ["m", "z", "a"]] {
        let tag = order.concat();
        let list: Vec<String> = order.iter().map(|n| format!("order-{tag}-{n}")).collect();
        let wanted = names(h, &list.iter().map(String::as_str).collect::<Vec<_>>());
        let leases = all_granted(
            h.store
                .acquire_all(&wanted, &owner("me"), Terms::ttl(h.long_ttl()))
                .await
                .unwrap(),
        );
        let tokens: Vec<u64> = leases.iter().map(|l| l.token.0).collect();
        assert!(
            tokens.windows(2).all(|w| w[0] <= w[1]),
            "{order:?}: tokens {tokens:?} decrease along the list"
        );
    }
}
