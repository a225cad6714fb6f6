//! Checks for stores that many servers share (PostgreSQL, etcd): two store objects on one
//! database or cluster stand for two fencelock servers.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use fencelock_conformance::{owner, ttl};
use fencelock_core::{
    AcquireOutcome, FencingToken, Lease, LockStore, ReleaseNotice, ReleaseOutcome, Resource,
};
use tokio::sync::broadcast;

/// One `#[tokio::test]` per many-servers check, each on two store objects from `$two`, an
/// `async fn() -> (Arc<dyn LockStore>, Arc<dyn LockStore>)` that opens both on one server.
macro_rules! many_servers_suite {
    ($two:path) => {
        $crate::shared::many_servers_suite!(@each $two;
            a_hundred_acquirers_on_two_servers_have_one_winner,
            tokens_increase_across_servers,
            a_release_on_one_server_is_heard_on_the_other,
            a_waiter_on_one_server_gets_the_lock_the_other_releases
        );
    };
    (@each $two:path; $($check:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() {
            let (a, b) = $two().await;
            $crate::shared::$check(a, b).await;
        }
    )*};
}
pub(crate) use many_servers_suite;

/// A resource name no other test uses, in this run or an earlier one on the same server.
pub fn unique(name: &str) -> Resource {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let wall = fencelock_core::Timestamp::now_wall().as_millis();
    Resource::new(format!("t{wall}-{}-{n}/{name}", std::process::id())).expect("valid name")
}

/// The lease of a grant; panics on any other outcome.
pub fn granted(outcome: AcquireOutcome) -> Lease {
    match outcome {
        AcquireOutcome::Granted { lease, .. } => lease,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// 100 concurrent acquires of one free resource, spread over both servers: exactly one
/// wins, and every loser is told of that winner.
pub async fn a_hundred_acquirers_on_two_servers_have_one_winner(
    a: Arc<dyn LockStore>,
    b: Arc<dyn LockStore>,
) {
    let resource = unique("contended");
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
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert!(holders.iter().all(|t| *t == winners[0].token), "{holders:?}");
    assert_eq!(b.get(&resource).await.unwrap().as_ref(), Some(&winners[0]));
}

/// Grants alternate between the servers, each released through the other: every token is
/// greater than the one before.
pub async fn tokens_increase_across_servers(a: Arc<dyn LockStore>, b: Arc<dyn LockStore>) {
    let resource = unique("alternating");
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

/// A release through one server is heard on the other's release feed.
pub async fn a_release_on_one_server_is_heard_on_the_other(a: Arc<dyn LockStore>, b: Arc<dyn LockStore>) {
    let mut heard = b.releases().expect("a shared store has a release feed");
    let resource = unique("announced");
    let who = owner("holder");
    a.acquire(&resource, &who, ttl(Duration::from_secs(60)))
        .await
        .unwrap();
    a.release(&resource, &who, None).await.unwrap();
    wait_for_release(&mut heard, &resource, Duration::from_secs(10))
        .await
        .expect("the release was not heard on the other server");
}

/// A waiter on one server is handed the lock as soon as its holder releases it through the
/// other server: woken by the release notice, long before the holder's lease would expire.
pub async fn a_waiter_on_one_server_gets_the_lock_the_other_releases(
    a: Arc<dyn LockStore>,
    b: Arc<dyn LockStore>,
) {
    let resource = unique("waited-for");
    let holder = owner("holder");
    let lease = granted(
        a.acquire(&resource, &holder, ttl(Duration::from_secs(60)))
            .await
            .unwrap(),
    );
    let waiters = fencelock_core::Waiters::new(b);
    let waiting = {
        let (waiters, resource) = (waiters.clone(), resource.clone());
        tokio::spawn(async move {
            waiters
                .acquire(
                    &resource,
                    &owner("waiter"),
                    ttl(Duration::from_secs(60)),
                    Duration::from_secs(30),
                )
                .await
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while waiters.waiting() == 0 {
        assert!(std::time::Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let released_at = std::time::Instant::now();
    a.release(&resource, &holder, Some(lease.token)).await.unwrap();
    let handed = granted(waiting.await.unwrap().unwrap());
    let took = released_at.elapsed();
    assert!(handed.token > lease.token);
    assert!(
        took < Duration::from_secs(5),
        "the waiter got the lock {took:?} after the release"
    );
    eprintln!("the waiter on the other server got the lock {took:?} after the release");
}

/// Waits until `resource` comes out of `feed`; `Err` after `within`.
pub async fn wait_for_release(
    feed: &mut broadcast::Receiver<ReleaseNotice>,
    resource: &Resource,
    within: Duration,
) -> Result<(), tokio::time::error::Elapsed> {
    tokio::time::timeout(within, async {
        loop {
            match feed.recv().await {
                Ok(ReleaseNotice::Freed(heard)) if heard == *resource => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(closed) => panic!("release feed closed: {closed}"),
            }
        }
    })
    .await
}
