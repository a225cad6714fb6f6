//! [`EtcdError`]: what goes wrong with etcd, and the one place it becomes a [`StoreError`].

use fencelock_core::StoreError;

use crate::retry::GaveUp;

/// Every failure of the etcd store, driver errors included; none of it crosses the
/// [`LockStore`](fencelock_core::LockStore) trait but as a [`StoreError`].
#[derive(Debug, thiserror::Error)]
pub(super) enum EtcdError {
    /// A request failed, or its answer was lost: it may have been applied.
    #[error("etcd: {doing}")]
    Request {
        doing: &'static str,
        #[source]
        source: etcd_client::Error,
    },
    /// etcd answered, and refused.
    #[error("etcd: {doing}: {reason}")]
    Refused { doing: &'static str, reason: String },
    /// Other servers changed the key (or the keys of the name) between every read and write
    /// until the call's deadline.
    #[error("etcd: {doing}: {gave_up}")]
    Contended { doing: &'static str, gave_up: GaveUp },
    /// A key or value that no lock has.
    #[error("{0}")]
    Corrupt(String),
    /// An address or TTL etcd cannot take.
    #[error("{0}")]
    Invalid(String),
}

impl EtcdError {
    /// Makes an [`EtcdError::Request`] of a driver error while `doing`.
    pub(super) fn request(doing: &'static str) -> impl FnOnce(etcd_client::Error) -> Self {
        move |source| Self::Request { doing, source }
    }

    /// Makes an [`EtcdError::Contended`] of a call `doing` that gave up.
    pub(super) fn contended(doing: &'static str) -> impl FnOnce(GaveUp) -> Self {
        move |gave_up| Self::Contended { doing, gave_up }
    }
}

impl From<EtcdError> for StoreError {
    fn from(e: EtcdError) -> Self {
        let message = e.to_string();
        match e {
            EtcdError::Request { source, .. } => StoreError::unavailable(message, source),
            EtcdError::Refused { .. } | EtcdError::Contended { .. } => StoreError::Unavailable {
                message,
                source: None,
            },
            EtcdError::Corrupt(_) => StoreError::Corrupt(message),
            EtcdError::Invalid(_) => StoreError::Invalid(message),
        }
    }
}
