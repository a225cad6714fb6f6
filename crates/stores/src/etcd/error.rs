//! [`EtcdError`]: what goes wrong with etcd, and the one place it becomes a [`StoreError`].

use fencelock_core::StoreError;

use super::MAX_ATTEMPTS;

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
    /// Another caller changed the key (or the keys of the name) between every read and write.
    #[error("etcd: {doing}: another call changed it under every one of {MAX_ATTEMPTS} tries")]
    Contended { doing: &'static str },
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
