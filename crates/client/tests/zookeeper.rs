//! A guard on a real, throwaway ZooKeeper whose session is cut off (a proxy that stops
//! relaying): its `lost()` fires before any other owner can be granted the lock, and the
//! lease it held lasts its whole TTL on the ensemble, even though the session that granted it
//! expired long before.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{owner, resource, ttl};
use fencelock_client::{Client, GuardOptions, LostReason, Timestamp};
use fencelock_core::LockStore;
use fencelock_stores::zookeeper::{ZooKeeperOptions, ZooKeeperStore};
use fencelock_testkit::{Proxy, ZooKeeper};

async fn store(port: u16, session_timeout: Duration) -> Arc<dyn LockStore> {
    let options = ZooKeeperOptions {
        session_timeout,
        connect_timeout: Duration::from_millis(500),
        call_timeout: Duration::from_secs(1),
        ..ZooKeeperOptions::default()
    };
    Arc::new(
        ZooKeeperStore::connect_with(&format!("zookeeper://127.0.0.1:{port}"), options)
            .await
            .expect("connect to ZooKeeper"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_whose_session_expires_is_lost_before_anyone_else_gets_the_lock() {
    let zookeeper = tokio::task::spawn_blocking(ZooKeeper::start).await.unwrap();
    let proxy = Proxy::start(zookeeper.port());
    // The cut-off side: the server's floor for a session (two ticks), so that it expires
    // within a second of the cut, long before the lease.
    let cut_off = Client::from_store(store(proxy.port(), Duration::from_millis(400)).await)
        .with_guard_options(GuardOptions {
            renew_every: Some(Duration::from_millis(500)),
            // Two seconds of slack for a busy machine between `lost()` and the expiry.
            safety_margin: Some(Duration::from_secs(2)),
            ..GuardOptions::default()
        });
    let other = Client::from_store(store(zookeeper.port(), Duration::from_secs(4)).await);
    let name = resource("session-cut");
    let guard = cut_off
        .try_acquire(&name, &owner("a"), ttl(6_000))
        .await
        .expect("a free lock");
    let held = guard.lease();

    proxy.cut();
    let lost = guard.lost();
    let waiting = tokio::spawn({
        let (other, name) = (other, name.clone());
        async move {
            other
                .acquire(&name, &owner("b"), ttl(60_000), Duration::from_secs(30))
                .await
        }
    });
    let reason = tokio::time::timeout(Duration::from_secs(20), lost)
        .await
        .expect("the guard never said it was lost");
    let lost_at = Timestamp::now_wall();
    assert!(matches!(reason, LostReason::NotRenewed { .. }), "{reason:?}");
    assert!(!guard.is_held());
    assert!(
        !waiting.is_finished(),
        "the other owner was granted the lock before the guard said it was lost"
    );
    let taken = waiting
        .await
        .unwrap()
        .expect("the other owner gets the lock once the lease has ended");
    let next = taken.lease();
    assert!(
        lost_at <= next.acquired_at,
        "lost at {lost_at:?}, granted to b at {:?}",
        next.acquired_at
    );
    assert!(
        next.acquired_at >= held.expires_at,
        "granted at {:?}, before the lease's expiry {:?}: it lasted less than asked",
        next.acquired_at,
        held.expires_at
    );
    assert!(next.token > held.token);
    drop(guard);
    taken.release().await.unwrap();
    proxy.restore();
}
