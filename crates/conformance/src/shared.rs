//! The checks that depend on what a store declares it is: a **durable** store's answers survive
//! closing and reopening it (rule 7), and a **shared** store keeps the rules across many
//! servers, each with a store object of its own over the same state. A store that is neither
//! has nothing to show here by nature; one that declares either must give the harness the way
//! to reach its state again ([`Harness::reopening`], [`Harness::sharing`]), or these checks fail.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock_core::{
    AcquireOutcome, Bulletin, Claim, FencingToken, Heard, HoldKind, HoldOutcome, Key, Owner, ReleaseOutcome,
    RenewOutcome, Resource, Waiters,
};
use fencelock_testkit::eventually;
use tokio_util::sync::CancellationToken;

use crate::checks::{announced, assert_released, grant, granted};
use crate::{Harness, owner, ttl};

/// Rule 7: what a durable store answered survives closing and reopening it — leases (a renewed
/// one with its new expiry), a release, and the token counter.
pub async fn answers_survive_a_reopen(h: &Harness) {
    if !h.capabilities().durable {
        return;
    }
    let kept = grant(h, "kept", "a", h.long_ttl()).await;
    let renewed = grant(h, "renewed", "b", h.long_ttl()).await;
    let longer = ttl(Duration::from_secs(900));
    let renewed = match h
        .store
        .renew(&renewed.resource, &renewed.owner, longer, None)
        .await
        .unwrap()
    {
        RenewOutcome::Renewed(lease) => lease,
        other => panic!("expected a renewal, got {other:?}"),
    };
    let released = grant(h, "released", "c", h.long_ttl()).await;
    let outcome = h
        .store
        .release(&released.resource, &released.owner, Some(released.token))
        .await
        .unwrap();
    assert_released(h, outcome, &released);

    let store = h.reopened().await;
    for lease in [&kept, &renewed] {
        let now = store
            .get(&lease.resource)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{lease:?} was lost across the reopen"));
        assert_eq!(
            (&now.owner, now.token, now.acquired_at),
            (&lease.owner, lease.token, lease.acquired_at),
            "{now:?}"
        );
        // Never shorter; the embedded store does not count the time it was closed.
        assert!(
            now.expires_at >= lease.expires_at,
            "{now:?} ends before {lease:?}"
        );
    }
    assert_eq!(
        store.get(&released.resource).await.unwrap(),
        None,
        "a release came back"
    );
    let next = granted(
        store
            .acquire(&released.resource, &owner("d"), h.long_ttl())
            .await
            .unwrap(),
    );
    assert!(
        next.token > released.token,
        "token {} reused or lowered",
        next.token
    );
}

/// 100 concurrent acquires of one free resource, spread over two servers: exactly one wins,
/// and every loser is told of that winner.
pub async fn a_hundred_acquirers_on_two_servers_have_one_winner(h: &Harness) {
    if !h.capabilities().shared {
        return;
    }
    let (a, b) = (h.store.clone(), h.another_server().await);
    let resource = h.resource("contended");
    let attempts: Vec<_> = (0..100)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            let resource = resource.clone();
            tokio::spawn(async move {
                store
                    .acquire(&resource, &owner(&format!("w{i}")), ttl(Duration::from_secs(60)))
                    .await
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut holders = HashSet::new();
    for attempt in attempts {
        match attempt.await.expect("task").expect("acquire") {
            AcquireOutcome::Granted { lease, .. } => winners.push(lease),
            AcquireOutcome::Held { holder, .. } => {
                holders.insert(holder.token);
            }
            AcquireOutcome::Extended(lease) => panic!("nobody held it, yet extended: {lease:?}"),
            delayed @ AcquireOutcome::Delayed { .. } => panic!("no lock-delay was asked for: {delayed:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert!(holders.iter().all(|t| *t == winners[0].token), "{holders:?}");
    assert_eq!(b.get(&resource).await.unwrap().as_ref(), Some(&winners[0]));
}

/// Grants alternate between two servers, each released through the other: every token is
/// greater than the one before.
pub async fn tokens_increase_across_servers(h: &Harness) {
    if !h.capabilities().shared {
        return;
    }
    let (a, b) = (h.store.clone(), h.another_server().await);
    let resource = h.resource("alternating");
    let mut last = FencingToken(0);
    for i in 0..20 {
        let (granting, releasing) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let who = owner(&format!("o{i}"));
        let lease = granted(
            granting
                .acquire(&resource, &who, ttl(Duration::from_secs(60)))
                .await
                .unwrap(),
        );
        assert!(lease.token > last, "token {} after {last}", lease.token);
        last = lease.token;
        let released = releasing
            .release(&resource, &who, Some(lease.token))
            .await
            .unwrap();
        assert!(
            matches!(&released, ReleaseOutcome::Released(Some(ended)) if ended.lease == lease),
            "{released:?}"
        );
    }
}

/// A release through one server is heard on the other's release feed, where that server
/// watches the name (as it does while it has waiters for it: [`LockStore::watch`]).
///
/// [`LockStore::watch`]: fencelock_core::LockStore::watch
pub async fn a_release_on_one_server_is_heard_on_the_other(h: &Harness) {
    if !h.capabilities().shared {
        return;
    }
    let b = h.another_server().await;
    let lease = grant(h, "announced", "holder", h.long_ttl()).await;
    // Watched and heard from after the grant, so that only the release can be heard.
    let _watching = b.watch(&Key::lock(&lease.resource)).await;
    let mut heard = b.releases().expect("a shared store has a release feed");
    h.store
        .release(&lease.resource, &lease.owner, None)
        .await
        .unwrap();
    assert!(
        announced(&mut heard, &lease.resource).await,
        "the release was not heard on the other server"
    );
}

/// A server's events (`GET /events`) published through the store reach another server
/// sharing it, each once, in the order published: what makes a change through any server
/// appear on every server's stream.
pub async fn events_published_on_one_server_reach_the_other_in_order(h: &Harness) {
    if !h.capabilities().shared {
        return;
    }
    let b = h.another_server().await;
    let mut heard = b.bulletins().expect("a shared store carries servers' events");
    // An origin of its own per run, so that bulletins of other tests sharing the store are
    // told apart.
    let origin = (u64::from(std::process::id()) << 42) ^ fencelock_core::Timestamp::now_wall().as_millis();
    let bulletin = |seq: u64| Bulletin {
        origin,
        seq,
        body: format!(r#"{{"n":{seq}}}"#),
    };
    // A server hears what is published once it listens, and it starts listening in the
    // background as it opens the store (a store that keeps events as data skips those from
    // before): so probes are sent until one is heard, then the three that count. Sequence
    // numbers only grow, as a server's do.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seq = 0;
    let heard_probe = loop {
        seq += 1;
        h.store.publish(&bulletin(seq));
        let probe = tokio::time::timeout(Duration::from_millis(500), async {
            loop {
                match heard.recv().await {
                    Ok(Heard::Told(got)) if got.origin == origin => return got.seq,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(closed) => panic!("the feed ended: {closed}"),
                }
            }
        });
        if let Ok(probe) = probe.await {
            break probe;
        }
        assert!(
            Instant::now() < deadline,
            "the other server never heard a bulletin"
        );
    };
    let sent: Vec<Bulletin> = (seq + 1..=seq + 3).map(bulletin).collect();
    for bulletin in &sent {
        h.store.publish(bulletin);
    }
    let mut got = Vec::new();
    while got.len() < sent.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, heard.recv()).await {
            // Probes sent before the first one was heard may still come.
            Ok(Ok(Heard::Told(bulletin))) if bulletin.origin == origin && bulletin.seq > seq => {
                got.push(bulletin)
            }
            Ok(Ok(Heard::Told(bulletin))) if bulletin.origin == origin => {
                assert!(
                    bulletin.seq > heard_probe,
                    "{bulletin:?} came again, or out of order"
                );
            }
            Ok(Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(closed)) => panic!("the feed ended: {closed}"),
            Err(_) => panic!("only {got:?} of {sent:?} reached the other server"),
        }
    }
    assert_eq!(got, sent);
}

/// A waiter on one server is handed the lock as soon as its holder releases it through the
/// other server: woken by the release notice, long before the holder's lease would expire.
pub async fn a_waiter_on_one_server_gets_the_lock_the_other_releases(h: &Harness) {
    if !h.capabilities().shared {
        return;
    }
    let lease = grant(h, "waited-for", "holder", ttl(Duration::from_secs(60))).await;
    let waiters = Waiters::new(h.another_server().await);
    let waiting = {
        let (waiters, resource) = (waiters.clone(), lease.resource.clone());
        tokio::spawn(async move {
            let (who, wait) = (owner("waiter"), Duration::from_secs(30));
            waiters
                .acquire(&resource, &who, ttl(Duration::from_secs(60)), wait)
                .await
        })
    };
    eventually(Duration::from_secs(10), "the waiter to queue", async || {
        (waiters.waiting() > 0).then_some(())
    })
    .await;
    let released_at = Instant::now();
    h.store
        .release(&lease.resource, &lease.owner, Some(lease.token))
        .await
        .unwrap();
    let handed = granted(waiting.await.unwrap().unwrap());
    assert!(handed.token > lease.token);
    // Woken by the notice, not by the holder's expiry a minute on.
    let took = released_at.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "the waiter got the lock {took:?} after the release"
    );
}

/// Fifty acquirers on two servers race for a semaphore of five permits, ten rounds over: each
/// round exactly five win, with tokens of their own, greater than every token of the rounds
/// before; both servers list those five; each is released through the other server. (A
/// decision that counted the permits in a snapshot taken before it had the semaphore to itself
/// would let in those that counted while another was being granted.)
pub async fn fifty_acquirers_on_two_servers_get_exactly_the_limit(h: &Harness) {
    const ACQUIRERS: usize = 50;
    const LIMIT: usize = 5;
    if !h.capabilities().shared {
        return;
    }
    let servers = [h.store.clone(), h.another_server().await];
    let name = h.resource("five-permits");
    let claim = Claim::Permit { limit: LIMIT as u32 };
    let mut previous = FencingToken(0);
    for round in 0..10 {
        // Every racer spawned before any is awaited.
        let racers: Vec<_> = (0..ACQUIRERS)
            .map(|i| {
                let (server, name) = (servers[i % 2].clone(), name.clone());
                tokio::spawn(async move {
                    let who = owner(&format!("round{round}-{i}"));
                    let outcome = server
                        .acquire_hold(&name, &who, claim, ttl(Duration::from_secs(60)), None)
                        .await
                        .expect("acquire a permit");
                    (i % 2, who, outcome)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for racer in racers {
            match racer.await.expect("task") {
                (server, who, HoldOutcome::Granted { hold, replaced: None }) => {
                    assert_eq!((&hold.lease.owner, hold.claim), (&who, claim));
                    winners.push((server, hold));
                }
                (_, _, HoldOutcome::Busy(busy)) => {
                    assert_eq!(busy.holders.len(), LIMIT, "round {round}: refused by {busy:?}");
                }
                (_, who, other) => panic!("round {round}, {who}: {other:?}"),
            }
        }
        assert_eq!(winners.len(), LIMIT, "round {round}: {winners:?}");
        let tokens: BTreeSet<FencingToken> = winners.iter().map(|(_, hold)| hold.lease.token).collect();
        assert_eq!(tokens.len(), LIMIT, "round {round}: tokens shared: {winners:?}");
        assert!(
            tokens.first().is_some_and(|first| *first > previous),
            "round {round}: {tokens:?} after {previous}"
        );
        let mut expected: Vec<(FencingToken, Owner)> = winners
            .iter()
            .map(|(_, hold)| (hold.lease.token, hold.lease.owner.clone()))
            .collect();
        expected.sort_by_key(|(token, _)| *token);
        for server in &servers {
            let live = server.holds(HoldKind::Semaphore, &name).await.expect("holds");
            let live: Vec<_> = live
                .into_iter()
                .map(|hold| (hold.lease.token, hold.lease.owner))
                .collect();
            assert_eq!(live, expected, "round {round}");
        }
        for (server, hold) in winners {
            let lease = &hold.lease;
            let released = servers[1 - server]
                .release_hold(HoldKind::Semaphore, &name, &lease.owner, Some(lease.token))
                .await
                .expect("release a permit");
            assert!(
                matches!(&released, ReleaseOutcome::Released(Some(ended)) if ended.lease == *lease),
                "round {round}: {released:?}"
            );
        }
        previous = *tokens.last().expect("five tokens");
    }
}

/// One hold as its worker saw it: granted (answered) at `from`, released (asked) at `to`, so
/// the store held it at least over `[from, to]`, whatever the clocks of the store and of the
/// servers say.
#[derive(Debug, Clone, Copy)]
struct Held {
    claim: Claim,
    token: FencingToken,
    from: Instant,
    to: Instant,
}

/// Readers and writers on two servers take one read-write lock in turn for a few seconds,
/// each through its server's waiting line (a waiting writer's intent kept in the store, waiters
/// woken by the release notices of both servers): no hold overlaps a write, and holds that
/// exclude each other follow the order of their tokens.
pub async fn readers_and_writers_on_two_servers_never_overlap(h: &Harness) {
    if !h.capabilities().shared {
        return;
    }
    let servers = [h.store.clone(), h.another_server().await].map(|store| Arc::new(Waiters::new(store)));
    let name = h.resource("history");
    let until = Instant::now() + Duration::from_secs(4);
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let claim = if i % 4 == 0 { Claim::Write } else { Claim::Read };
            let who = owner(&format!("worker-{i}"));
            tokio::spawn(take_turns(
                servers[i % 2].clone(),
                name.clone(),
                who,
                claim,
                until,
            ))
        })
        .collect();
    let mut history: Vec<Held> = Vec::new();
    for worker in workers {
        history.extend(worker.await.expect("worker"));
    }
    history.sort_by_key(|held| held.token);
    let writes = history.iter().filter(|held| held.claim == Claim::Write).count();
    assert!(
        writes > 0 && writes < history.len(),
        "both modes were granted: {writes} writes of {}",
        history.len()
    );
    for write in history.iter().filter(|held| held.claim == Claim::Write) {
        for other in history.iter().filter(|other| other.token != write.token) {
            assert!(
                other.to < write.from || write.to < other.from,
                "{other:?} overlaps the write {write:?}"
            );
            // Disjoint, so granted one after the other: in token order.
            assert_eq!(
                other.token > write.token,
                other.from > write.to,
                "{other:?} and the write {write:?} are out of token order"
            );
        }
    }
}

/// Acquires `claim` on `name` through `server`'s waiting line, holds it a moment, releases
/// it; again and again until `until`. Returns what it held. Writers pause after each release:
/// waiting writers hold readers back, so writers that came back at once could keep every
/// reader out.
async fn take_turns(
    server: Arc<Waiters>,
    name: Resource,
    who: Owner,
    claim: Claim,
    until: Instant,
) -> Vec<Held> {
    let store = server.store().clone();
    let mut history = Vec::new();
    while Instant::now() < until {
        let acquired = server
            .acquire_hold_unless(
                &name,
                &who,
                claim,
                ttl(Duration::from_secs(60)),
                None,
                Duration::from_secs(20),
                &CancellationToken::new(),
            )
            .await
            .expect("acquire a hold");
        let HoldOutcome::Granted { hold, replaced: None } = acquired.outcome else {
            panic!("{who}: {:?}", acquired.outcome);
        };
        let from = Instant::now();
        tokio::time::sleep(Duration::from_millis(3)).await;
        let to = Instant::now();
        let released = store
            .release_hold(HoldKind::RwLock, &name, &who, Some(hold.lease.token))
            .await
            .expect("release a hold");
        assert!(
            matches!(released, ReleaseOutcome::Released(_)),
            "{who}: {released:?}"
        );
        history.push(Held {
            claim,
            token: hold.lease.token,
            from,
            to,
        });
        if claim == Claim::Write {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
    history
}
