//! The etcd store against real, throwaway etcd: the conformance suite on one member, many
//! servers on one cluster, and members of a three-member cluster killed and restarted.
#![cfg(feature = "etcd")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock_conformance::{Harness, owner, ttl};
use fencelock_core::{AcquireOutcome, FencingToken, LockStore, ReleaseOutcome, Resource, StoreError};
use fencelock_stores::Deadline;
use fencelock_stores::etcd::{EtcdOptions, EtcdStore};
use fencelock_testkit::{EtcdCluster, shared_etcd};

/// The shared server's address; starting it blocks, so not on the async worker.
async fn shared_url() -> String {
    tokio::task::spawn_blocking(|| shared_etcd().url())
        .await
        .expect("start etcd")
}

async fn store(url: &str) -> Arc<Deadline<EtcdStore>> {
    Arc::new(EtcdStore::connect(url).await.expect("connect to etcd"))
}

async fn harness() -> Harness {
    let url = shared_url().await;
    let again = move || {
        let url = url.clone();
        async move { store(&url).await as Arc<dyn LockStore> }
    };
    shared::harness(again().await, again)
}

fencelock_conformance::suite!(harness);

mod shared;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_are_whole_seconds_rounded_up() {
    let store = store(&shared_url().await).await;
    assert_eq!(store.capabilities().ttl_granularity, Duration::from_secs(1));
    let resource = shared::unique("rounded");
    let lease = shared::granted(
        store
            .acquire(&resource, &owner("a"), ttl(Duration::from_millis(2001)))
            .await
            .unwrap(),
    );
    let lasts = lease.expires_at.since(lease.acquired_at);
    assert!(lasts >= Duration::from_secs(3), "asked 2.001 s, lasts {lasts:?}");
    assert_eq!(lasts.subsec_millis(), 0, "{lasts:?}");
    // The lock is still held a moment before its expiry by the server's clock, and gone
    // soon after: etcd decides, within its half-second expiry check.
    let before_expiry = lease.expires_at.since(fencelock_core::Timestamp::now_wall());
    tokio::time::sleep(before_expiry.saturating_sub(Duration::from_millis(300))).await;
    assert_eq!(store.get(&resource).await.unwrap(), Some(lease.clone()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.get(&resource).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "etcd did not expire the lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let gone_late_by = fencelock_core::Timestamp::now_wall().since(lease.expires_at);
    eprintln!("etcd deleted the lock {gone_late_by:?} after expires_at");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_wakes_the_release_feed_and_the_next_token_is_greater() {
    let store = store(&shared_url().await).await;
    let mut heard = store.releases().unwrap();
    let resource = shared::unique("expiring");
    let first = shared::granted(
        store
            .acquire(&resource, &owner("a"), ttl(Duration::from_secs(1)))
            .await
            .unwrap(),
    );
    shared::wait_for_release(&mut heard, &resource, Duration::from_secs(15))
        .await
        .expect("the expiry was not announced");
    assert_eq!(store.get(&resource).await.unwrap(), None);
    let second = shared::granted(
        store
            .acquire(&resource, &owner("a"), ttl(Duration::from_secs(60)))
            .await
            .unwrap(),
    );
    assert!(second.token > first.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_parser_opens_etcd() {
    let url = shared_url().await;
    let store = fencelock_stores::open(&url).await.expect(&url);
    store.ping().await.unwrap();
    assert!(store.capabilities().durable);
    for bad in [
        "etcd://",
        "etcd://127.0.0.1",
        "etcd://127.0.0.1:x",
        "etcd://:2379",
    ] {
        let error = fencelock_stores::open(bad).await.expect_err(bad);
        assert!(
            matches!(error, fencelock_stores::OpenError::InvalidAddress { .. }),
            "{bad}: {error}"
        );
    }
}

/// Short timeouts, so that calls without a quorum fail quickly.
fn impatient() -> EtcdOptions {
    EtcdOptions {
        request_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        ..EtcdOptions::default()
    }
}

/// Acquires and releases `resource` until both succeed or `within` runs out (a leader
/// election after a kill takes a moment); returns the token granted.
async fn acquire_and_release_until_it_works(
    store: &Deadline<EtcdStore>,
    resource: &Resource,
    within: Duration,
) -> FencingToken {
    let deadline = Instant::now() + within;
    let who = owner("cycler");
    loop {
        let attempt = async {
            // An earlier attempt whose answer was lost may have left the lock to us: then
            // this extends it, with that attempt's token.
            let lease = match store
                .acquire(resource, &who, ttl(Duration::from_secs(30)))
                .await?
            {
                AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease) => lease,
                held @ AcquireOutcome::Held { .. } => panic!("nobody else uses it: {held:?}"),
            };
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
                assert!(Instant::now() < deadline, "locks did not work again: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_serves_with_one_member_down_and_refuses_without_a_quorum() {
    let mut cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(3))
        .await
        .unwrap();
    let store = EtcdStore::connect_with(&cluster.url(), impatient())
        .await
        .unwrap();
    let resource = shared::unique("quorum");
    let mut last = acquire_and_release_until_it_works(&store, &resource, Duration::from_secs(10)).await;
    // A lock held through it all: no member loss may take it.
    let kept = shared::unique("kept");
    let kept_lease = shared::granted(
        store
            .acquire(&kept, &owner("keeper"), ttl(Duration::from_secs(600)))
            .await
            .unwrap(),
    );

    // The leader down (the harsh case: an election, and requests in flight lost): locks
    // work again once the others have elected a new leader.
    let killed_at = Instant::now();
    let (mut cluster, leader) = tokio::task::spawn_blocking(move || {
        let leader = cluster.wait_for_leader();
        cluster.kill(leader);
        (cluster, leader)
    })
    .await
    .unwrap();
    let token = acquire_and_release_until_it_works(&store, &resource, Duration::from_secs(20)).await;
    eprintln!(
        "with the leader killed, locks worked again after {:?}",
        killed_at.elapsed()
    );
    assert!(token > last);
    last = token;
    for _ in 0..5 {
        let token = acquire_and_release_until_it_works(&store, &resource, Duration::from_secs(1)).await;
        assert!(token > last);
        last = token;
    }

    // Two members down: no quorum, so acquire fails within its deadline and grants nothing.
    let second = (leader + 1) % 3;
    cluster = tokio::task::spawn_blocking(move || {
        cluster.kill(second);
        cluster
    })
    .await
    .unwrap();
    let refused = shared::unique("no-quorum");
    for _ in 0..3 {
        let started = Instant::now();
        let outcome = store
            .acquire(&refused, &owner("hopeful"), ttl(Duration::from_secs(60)))
            .await;
        let took = started.elapsed();
        assert!(
            matches!(outcome, Err(StoreError::Unavailable { .. })),
            "acquire without a quorum: {outcome:?}"
        );
        assert!(took < Duration::from_secs(10), "acquire took {took:?} to fail");
        eprintln!("without a quorum, acquire failed after {took:?}");
    }
    assert!(store.ping().await.is_err(), "ping without a quorum");

    // Both return: service resumes, the refused acquire left nothing, tokens only grow.
    let restarted_at = Instant::now();
    cluster = tokio::task::spawn_blocking(move || {
        cluster.restart(leader);
        cluster.restart(second);
        cluster
    })
    .await
    .unwrap();
    let token = acquire_and_release_until_it_works(&store, &resource, Duration::from_secs(30)).await;
    eprintln!(
        "after the restarts, locks worked again after {:?}",
        restarted_at.elapsed()
    );
    assert!(token > last, "token {token} after {last}");
    assert_eq!(
        store.get(&refused).await.unwrap(),
        None,
        "an acquire without quorum granted"
    );
    assert_eq!(store.get(&kept).await.unwrap(), Some(kept_lease));
    drop(cluster);
}
