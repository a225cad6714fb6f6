//! What the stores on a network server that tells every server of every change (PostgreSQL,
//! etcd, Redis) share: a subscription to its release notices, renewed whenever it is lost.
//! (ZooKeeper watches names one by one instead: see [`LockStore::watch`].)
//!
//! [`LockStore::watch`]: fencelock_core::LockStore::watch

use std::time::Duration;

use fencelock_core::store::Result;
use fencelock_core::{BulletinFeed, ReleaseFeed};
use tokio::task::JoinHandle;

/// The shortest and the longest pause before subscribing again.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Runs the subscription `first` (a future that feeds release notices until its connection
/// is lost), then, each time it ends, opens a new one with `open`, pausing a little longer
/// after each failure, and tells `feed` that notices may have been missed in between (so
/// waiters ask again at once instead of waiting for their holder's expiry) — and
/// `bulletins`, if the subscription also carries other servers' events, that those may have
/// been. Spawned on the current runtime; stops when what it returns is dropped.
///
/// The caller opens `first` itself, so that the store is only made once notices flow, and a
/// store that cannot subscribe at all fails to open.
pub(crate) fn keep_subscribed<S, O, F>(
    what: &'static str,
    first: S,
    mut open: O,
    feed: ReleaseFeed,
    bulletins: Option<BulletinFeed>,
) -> AbortOnDrop
where
    S: Future<Output = ()> + Send + 'static,
    O: FnMut() -> F + Send + 'static,
    F: Future<Output = Result<S>> + Send,
{
    AbortOnDrop(tokio::spawn(async move {
        let mut session = first;
        loop {
            session.await;
            let mut backoff = FIRST_BACKOFF;
            session = loop {
                tokio::time::sleep(backoff).await;
                match open().await {
                    Ok(next) => {
                        feed.missed();
                        bulletins.iter().for_each(BulletinFeed::missed);
                        break next;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "{what}: subscribing to releases failed; retrying");
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            };
        }
    }))
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
