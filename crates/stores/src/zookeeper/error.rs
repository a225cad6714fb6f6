//! [`ZkError`]: what goes wrong with ZooKeeper, and the one place it becomes a [`StoreError`].

use fencelock_core::StoreError;

use crate::retry::GaveUp;

/// Every failure of the ZooKeeper store, driver errors included; none of it crosses the
/// [`LockStore`](fencelock_core::LockStore) trait but as a [`StoreError`].
#[derive(Debug, thiserror::Error)]
pub(super) enum ZkError {
    /// A request failed, or its answer was lost (`ConnectionLoss`, a timeout, an expired
    /// session): a write may have been applied all the same.
    #[error("ZooKeeper: {doing}")]
    Request {
        doing: &'static str,
        #[source]
        source: zookeeper_client::Error,
    },
    /// Other servers changed the name's node between every read and write until the call's
    /// deadline.
    #[error("ZooKeeper: {doing}: {gave_up}")]
    Contended { doing: &'static str, gave_up: GaveUp },
    /// A node whose path or data no state of fencelock has.
    #[error("{0}")]
    Corrupt(String),
    /// An address or option ZooKeeper cannot take.
    #[error("{0}")]
    Invalid(String),
}

impl ZkError {
    /// Makes a [`ZkError::Request`] of a driver error while `doing`.
    pub(super) fn request(doing: &'static str) -> impl FnOnce(zookeeper_client::Error) -> Self {
        move |source| Self::Request { doing, source }
    }

    /// Makes a [`ZkError::Contended`] of a call `doing` that gave up.
    pub(super) fn contended(doing: &'static str) -> impl FnOnce(GaveUp) -> Self {
        move |gave_up| Self::Contended { doing, gave_up }
    }
}

impl From<ZkError> for StoreError {
    fn from(e: ZkError) -> Self {
        let message = e.to_string();
        match e {
            // Whatever the driver said (ConnectionLoss, Timeout, SessionExpired, NoHosts…),
            // the caller cannot know whether a write was applied: unavailable, outcome unknown.
            ZkError::Request { source, .. } => StoreError::unavailable(message, source),
            ZkError::Contended { .. } => StoreError::Unavailable {
                message,
                source: None,
            },
            ZkError::Corrupt(_) => StoreError::Corrupt(message),
            ZkError::Invalid(_) => StoreError::Invalid(message),
        }
    }
}
