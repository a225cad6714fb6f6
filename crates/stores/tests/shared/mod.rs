//! What the tests of stores that many servers share (PostgreSQL, etcd, Redis, ZooKeeper) have
//! in common; their conformance harness and the many-servers checks themselves are in the
//! conformance suite (`fencelock_conformance::shared_suite!`).

#![allow(dead_code)] // Each test file uses a different part of this.

use std::time::Duration;

use fencelock_core::{Key, LockStore, ReleaseNotice, Resource};
use fencelock_testkit::eventually;
use tokio::sync::broadcast;

pub use fencelock_testkit::fixtures::unique;

pub use fencelock_conformance::checks::granted;

/// Waits until `store` no longer shows the lease on `resource` (it expired); fails the test
/// after `within`.
pub async fn until_expired(store: &dyn LockStore, resource: &Resource, within: Duration) {
    let what = format!("{resource} to expire");
    eventually(within, &what, async || {
        store.get(resource).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// Waits until `resource` comes out of `feed`; `Err` after `within`.
pub async fn wait_for_release(
    feed: &mut broadcast::Receiver<ReleaseNotice>,
    resource: &Resource,
    within: Duration,
) -> Result<(), tokio::time::error::Elapsed> {
    wait_for_key(feed, &Key::lock(resource), within).await
}

/// Waits until `key` (of any kind) comes out of `feed`; `Err` after `within`.
pub async fn wait_for_key(
    feed: &mut broadcast::Receiver<ReleaseNotice>,
    key: &Key,
    within: Duration,
) -> Result<(), tokio::time::error::Elapsed> {
    tokio::time::timeout(within, async {
        loop {
            match feed.recv().await {
                Ok(ReleaseNotice::Freed(heard)) if heard == *key => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(closed) => panic!("release feed closed: {closed}"),
            }
        }
    })
    .await
}
