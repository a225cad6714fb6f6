//! A cap on holding (`Terms::max_hold`) in the guard: the store cuts renewals at the cap,
//! the guard reports it, counts it as the lease's end, and its `lost()` fires before it with
//! `LostReason::CapReached` — for one lease and for several, straight on a store and
//! through a real server.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestServer, owner, resource, ttl};
use fencelock_client::{
    AcquireError, Client, GuardOptions, LockStore, LostReason, ReleaseOutcome, Resources, Terms, Timestamp,
    connect,
};
use fencelock_core::MemoryStore;
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(10);

/// Renewals every 150 ms of a 600 ms lease, given up 200 ms before its end: several
/// renewals before a cap of 1.2 s, and the last ones cut at it.
fn options() -> GuardOptions {
    GuardOptions {
        renew_every: Some(Duration::from_millis(150)),
        safety_margin: Some(Duration::from_millis(200)),
        ..GuardOptions::default()
    }
}

fn capped() -> Terms {
    Terms::ttl(ttl(600)).max_hold(Some(ttl(1_200)))
}

#[tokio::test]
async fn renewals_stop_at_the_cap_and_lost_fires_before_it() {
    let store = Arc::new(MemoryStore::new());
    let client = Client::from_store(store.clone()).with_guard_options(options());
    let r = resource("capped");
    let guard = client
        .acquire_with(&r, &owner("job"), capped(), Duration::ZERO)
        .await
        .unwrap();
    let granted = guard.lease();
    let cap = guard.hold_until().expect("the lease has a cap");
    assert_eq!(cap, granted.acquired_at.plus(ttl(1_200)));
    assert_eq!(granted.expires_at, granted.acquired_at.plus(ttl(600)));

    let reason = timeout(LIMIT, guard.lost()).await.expect("lost() fired");
    let (now, wall) = (std::time::Instant::now(), Timestamp::now_wall());
    assert_eq!(reason, LostReason::CapReached);
    assert!(reason.to_string().contains("cap on holding"), "{reason}");
    assert!(now < guard.held_until(), "lost() fired after the guard's end");
    // The renewals went on until the store cut them at the cap: the lease, still live, ends
    // there and not a TTL after the last renewal.
    let live = store
        .get(&r)
        .await
        .unwrap()
        .expect("still live when lost() fired");
    assert_eq!(live.token, granted.token);
    assert_eq!(live.expires_at, cap);
    assert_eq!(guard.expires_at(), cap);
    assert!(wall < cap, "{wall} is not before the cap {cap}");
    assert!(matches!(
        guard.release().await.unwrap(),
        ReleaseOutcome::Released(_)
    ));
}

#[tokio::test]
async fn several_locks_with_a_cap_are_lost_together_before_it() {
    let store = Arc::new(MemoryStore::new());
    let client = Client::from_store(store.clone()).with_guard_options(options());
    let both = Resources::new(vec![resource("m1"), resource("m2")]).unwrap();
    let guard = client
        .acquire_all_with(&both, &owner("job"), capped(), Duration::ZERO)
        .await
        .unwrap();
    let cap = guard.hold_until().expect("the leases have a cap");
    assert!(guard.leases().iter().all(|lease| lease.hold_until.is_some()));

    let reason = timeout(LIMIT, guard.lost()).await.expect("lost() fired");
    assert_eq!(reason, LostReason::CapReached);
    assert_eq!(guard.lost_on(), None, "the cap ends the guard, not one lock");
    for name in both.as_slice() {
        let live = store
            .get(name)
            .await
            .unwrap()
            .expect("still live when lost() fired");
        assert_eq!(Some(live.token), guard.token(name));
        assert!(live.expires_at <= cap);
    }
}

#[tokio::test]
async fn through_a_server_the_cap_ends_the_guard_before_the_lease_can_pass_on() {
    let server = TestServer::start();
    let client = connect(&server.url).await.unwrap().with_guard_options(options());
    let r = resource("capped");
    let guard = client
        .acquire_with(&r, &owner("job"), capped(), Duration::ZERO)
        .await
        .unwrap();
    let reason = timeout(LIMIT, guard.lost()).await.expect("lost() fired");
    assert_eq!(reason, LostReason::CapReached);
    let live = server
        .store
        .get(&r)
        .await
        .unwrap()
        .expect("still live when lost() fired");
    assert_eq!(live.token, guard.token());
}

#[tokio::test]
async fn a_cap_within_the_safety_margin_is_refused_before_anything_is_sent() {
    let client = Client::from_store(Arc::new(MemoryStore::new()));
    let r = resource("too-short");
    // A 30 s lease is given up 6 s before its end by default: a 5 s cap leaves nothing.
    let terms = Terms::ttl(ttl(30_000)).max_hold(Some(ttl(5_000)));
    let error = client
        .acquire_with(&r, &owner("job"), terms, Duration::ZERO)
        .await
        .unwrap_err();
    match error {
        AcquireError::CapTooShort {
            max_hold,
            safety_margin,
        } => {
            assert_eq!(
                (max_hold, safety_margin),
                (Duration::from_secs(5), Duration::from_secs(6))
            );
        }
        other => panic!("expected a cap too short, got {other:?}"),
    }
    assert_eq!(client.get(&r).await.unwrap(), None);
}
