//! What the stores on a network server (PostgreSQL, etcd) share: a subscription to release
//! notices that is renewed whenever it is lost. (Their deadline on every call is
//! [`crate::deadline::Deadline`].)

use std::time::Duration;

use fencelock_core::store::Result;
use fencelock_core::{ReleaseFeed, ReleaseNotice};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// The shortest and the longest pause before subscribing again.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Runs the subscription `first` (a future that feeds release notices until its connection
/// is lost), then, each time it ends, opens a new one with `open`, pausing a little longer
/// after each failure, and tells `feed` that notices may have been missed in between (so
/// waiters ask again at once instead of waiting for their holder's expiry). Spawned on the
/// current runtime; stops when the [`Subscription`] is dropped.
///
/// The caller opens `first` itself, so that the store is only made once notices flow, and a
/// store that cannot subscribe at all fails to open.
pub(crate) fn keep_subscribed<S, O, F>(
    what: &'static str,
    first: S,
    mut open: O,
    feed: ReleaseFeed,
) -> Subscription
where
    S: Future<Output = ()> + Send + 'static,
    O: FnMut() -> F + Send + 'static,
    F: Future<Output = Result<S>> + Send,
{
    let task = AbortOnDrop(tokio::spawn({
        let feed = feed.clone();
        async move {
            let mut session = first;
            loop {
                session.await;
                let mut backoff = FIRST_BACKOFF;
                session = loop {
                    tokio::time::sleep(backoff).await;
                    match open().await {
                        Ok(next) => {
                            feed.missed();
                            break next;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "{what}: subscribing to releases failed; retrying");
                            backoff = (backoff * 2).min(MAX_BACKOFF);
                        }
                    }
                };
            }
        }
    }));
    Subscription { feed, _task: task }
}

/// The release notices of a store, fed by a subscription kept alive in the background; what
/// its [`LockStore::releases`](fencelock_core::LockStore::releases) hands out. Dropping it
/// stops the subscription.
#[derive(Debug)]
pub(crate) struct Subscription {
    feed: ReleaseFeed,
    _task: AbortOnDrop,
}

impl Subscription {
    /// A new receiver of the notices.
    pub(crate) fn receiver(&self) -> broadcast::Receiver<ReleaseNotice> {
        self.feed.subscribe()
    }
}

/// Aborts a task when dropped, so that neither an early return nor a dropped store leaves
/// it running.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
