//! [`Session`]: the store's ZooKeeper client, replaced by a new one when its session has
//! expired; and the watches that turn changes of the nodes of names that a server's waiters
//! wait for into release notices.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fencelock_core::store::Result;
use fencelock_core::{Key, ReleaseFeed};
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use super::ZooKeeperOptions;
use super::error::ZkError;

/// The client of one ZooKeeper session at a time. An expired session's client is dead (every
/// call on it fails with `SessionExpired`), so the next call that finds it so connects anew.
#[derive(Debug)]
pub(super) struct Session {
    cluster: String,
    options: ZooKeeperOptions,
    // A std mutex: held only to clone or swap the client, never across an `.await`.
    client: Mutex<zk::Client>,
    // Held across the connect, so that one caller makes the new session, not each of them.
    renewing: tokio::sync::Mutex<()>,
}

impl Session {
    /// Connects to `cluster` (`host:port,host:port`).
    pub(super) async fn connect(cluster: String, options: ZooKeeperOptions) -> Result<Self, ZkError> {
        let client = connect(&cluster, &options).await?;
        Ok(Self {
            cluster,
            options,
            client: Mutex::new(client),
            renewing: tokio::sync::Mutex::new(()),
        })
    }

    /// A client whose session has not ended: the current one, or a new one if it has.
    pub(super) async fn client(&self) -> Result<zk::Client, ZkError> {
        let client = self.current();
        if !client.state().is_terminated() {
            return Ok(client);
        }
        let _renewing = self.renewing.lock().await;
        let current = self.current();
        if current.session_id() != client.session_id() && !current.state().is_terminated() {
            return Ok(current); // another caller renewed it meanwhile
        }
        tracing::warn!(
            session = format!("{:#x}", client.session_id().0),
            "ZooKeeper: the session ended ({:?}); opening a new one",
            client.state()
        );
        let fresh = connect(&self.cluster, &self.options).await?;
        *self.client.lock().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
        Ok(fresh)
    }

    fn current(&self) -> zk::Client {
        self.client.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

async fn connect(cluster: &str, options: &ZooKeeperOptions) -> Result<zk::Client, ZkError> {
    zk::Client::connector()
        .with_session_timeout(options.session_timeout)
        .with_connection_timeout(options.connect_timeout)
        // Give up once every member was tried, rather than retry for a whole session timeout.
        .with_fail_eagerly()
        .connect(cluster)
        .await
        .map_err(ZkError::request("connect"))
}

/// Watches the node of `key` at `path` until `stop` is cancelled, from `first` if it was
/// set already: each time the watch fires (a change, deletion or creation of the node, or
/// the end of the session), it is set anew and then the name is announced on `feed`, so
/// that no change after the one that fired goes unheard. A watch that was not set before
/// [`LockStore::watch`](fencelock_core::LockStore::watch) answered is announced once set too,
/// in case the name changed meanwhile.
///
/// A one-shot watch outlives a lost connection: the client sets it again on the next one,
/// from the last zxid it saw, so the server fires it for a change made meanwhile. It ends
/// with its session; it is then set on the store's next session. While no member answers,
/// it tries again every [`RETRY`].
pub(super) async fn watch_name(
    session: Arc<Session>,
    path: String,
    key: Key,
    feed: ReleaseFeed,
    stop: CancellationToken,
    first: Option<zk::OneshotWatcher>,
) {
    if let Some(watcher) = first {
        tokio::select! {
            _ = watcher.changed() => {}
            () = stop.cancelled() => return,
        }
    }
    loop {
        let set = tokio::select! {
            set = set_watch(&session, &path) => set,
            () = stop.cancelled() => return,
        };
        let watcher = match set {
            Ok(watcher) => watcher,
            Err(error) => {
                tracing::debug!(%error, path, "ZooKeeper: cannot watch a name yet");
                tokio::select! {
                    () = tokio::time::sleep(RETRY) => continue,
                    () = stop.cancelled() => return,
                }
            }
        };
        feed.announce(&key);
        tokio::select! {
            // A change, or the end of the session: either way, set it again.
            _ = watcher.changed() => {}
            () = stop.cancelled() => return,
        }
    }
}

/// How long a name's watch waits before it tries again to set itself.
const RETRY: Duration = Duration::from_millis(250);

/// Sets a one-shot watch on the node at `path`, which need not exist.
pub(super) async fn set_watch(session: &Session, path: &str) -> Result<zk::OneshotWatcher, ZkError> {
    let client = session.client().await?;
    let (_, watcher) = client
        .check_and_watch_stat(path)
        .await
        .map_err(ZkError::request("watch"))?;
    Ok(watcher)
}
