//! What the tests of stores that many servers share (PostgreSQL, etcd, Redis) have in common; the
//! many-servers checks themselves are in the conformance suite.

use std::sync::Arc;
use std::time::Duration;

use fencelock_conformance::Harness;
use fencelock_core::{Key, LockStore, ReleaseNotice, Resource};
use tokio::sync::broadcast;

/// The conformance harness of a store shared by many servers: `open` opens another store
/// object over the same database or cluster, which stands both for the store reopened
/// (durability) and for a second fencelock server.
pub fn harness<F, Fut>(store: Arc<dyn LockStore>, open: F) -> Harness
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Arc<dyn LockStore>> + Send + 'static,
{
    Harness::real(store).reopening(open.clone()).sharing(open)
}

pub use fencelock_testkit::fixtures::unique;

pub use fencelock_conformance::checks::granted;

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
