//! [`Session`]: the store's ZooKeeper client, replaced by a new one when its session has
//! expired; and the watch that turns changes of names' nodes into release notices.

use std::sync::{Mutex, PoisonError};

use fencelock_core::store::Result;
use fencelock_core::{Key, ReleaseFeed};
use zookeeper_client::{self as zk, AddWatchMode, EventType, SessionState};

use super::error::ZkError;
use super::{Paths, ZooKeeperOptions, state};

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

/// Starts a persistent recursive watch on every node of the store, and returns the future
/// that feeds `feed` from it until the session is disconnected or ends: a changed or deleted
/// node of a name announces that name. A disconnection ends it, since ZooKeeper may drop the
/// events of the time between (ZOOKEEPER-4698); the store's subscription then watches anew
/// and tells waiters that notices may have been missed.
pub(super) async fn watch(
    session: &Session,
    paths: Paths,
    feed: ReleaseFeed,
) -> Result<impl Future<Output = ()> + Send + use<>> {
    let client = session.client().await?;
    let mut watcher = client
        .watch(&paths.root, AddWatchMode::PersistentRecursive)
        .await
        .map_err(ZkError::request("watch"))?;
    Ok(async move {
        // The watch lasts as long as its client is kept.
        let _client = client;
        loop {
            let event = watcher.changed().await;
            match event.event_type {
                EventType::Session if event.session_state != SessionState::SyncConnected => return,
                EventType::NodeDataChanged | EventType::NodeDeleted => {
                    if let Some(key) = paths.key_of(&event.path) {
                        feed.announce(&key);
                    }
                }
                _ => {}
            }
        }
    })
}

impl Paths {
    /// The name whose node is at `path`, if it is one.
    fn key_of(&self, path: &str) -> Option<Key> {
        let rest = path.strip_prefix(self.root.as_str())?.strip_prefix('/')?;
        let (folder, child) = rest.split_once('/')?;
        let kind = Paths::KINDS
            .into_iter()
            .find(|k| Paths::folder_name(*k) == folder)?;
        Some(Key {
            kind,
            name: state::unhex(child)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencelock_core::Resource;

    #[test]
    fn only_the_nodes_of_names_are_keys() {
        let paths = Paths::new("/fencelock");
        let name = Resource::new("a/b").unwrap();
        let of = |kind| {
            paths.node(&Key {
                kind,
                name: name.clone(),
            })
        };
        for kind in Paths::KINDS {
            assert_eq!(
                paths.key_of(&of(kind)),
                Some(Key {
                    kind,
                    name: name.clone()
                })
            );
        }
        for other in [
            "/fencelock",
            "/fencelock/locks",
            "/elsewhere/locks/61",
            "/fencelock/x/61",
        ] {
            assert_eq!(paths.key_of(other), None, "{other}");
        }
    }
}
