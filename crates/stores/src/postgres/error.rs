//! [`PgError`]: what goes wrong with PostgreSQL, and the one place it becomes a
//! [`StoreError`].

use std::time::Duration;

use deadpool_postgres::PoolError;
use fencelock_core::{StoreError, Ttl};
use tokio_postgres::error::SqlState;

/// Every failure of the PostgreSQL store, driver errors included; none of it crosses the
/// [`LockStore`](fencelock_core::LockStore) trait but as a [`StoreError`].
#[derive(Debug, thiserror::Error)]
pub(super) enum PgError {
    /// A statement (or the connection it ran on) failed.
    #[error("PostgreSQL: {doing}")]
    Db {
        doing: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    /// No pooled connection could be had.
    #[error("PostgreSQL: {doing}: no connection")]
    Pool {
        doing: &'static str,
        #[source]
        source: PoolError,
    },
    /// A row whose columns are not what the statement returns.
    #[error("unexpected PostgreSQL row: {0}")]
    Row(#[source] tokio_postgres::Error),
    /// A value in a row that no lease can hold (a bad name, a negative time…).
    #[error("{0}")]
    Data(String),
    /// The database was migrated by a newer fencelock.
    #[error(
        "the database schema is at version {current}, newer than this fencelock knows ({known}): \
         was it written by a newer fencelock? upgrade fencelock"
    )]
    NewerSchema { current: i32, known: i32 },
    /// The address does not read as a PostgreSQL one.
    #[error("not a PostgreSQL address: {0}")]
    Address(#[source] tokio_postgres::Error),
    /// The pool cannot be made with these options.
    #[error("PostgreSQL pool: {0}")]
    PoolConfig(#[source] deadpool_postgres::BuildError),
    /// A TTL longer than a `bigint` of milliseconds.
    #[error("TTL {0:?} is too long")]
    TtlTooLong(Ttl),
    /// A lock-delay longer than a `bigint` of milliseconds.
    #[error("lock-delay {0:?} is too long")]
    DelayTooLong(Duration),
}

impl PgError {
    /// Makes a [`PgError::Db`] of a driver error while `doing`.
    pub(super) fn db(doing: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Self {
        move |source| Self::Db { doing, source }
    }

    /// Makes a [`PgError::Pool`] of a pool error while `doing`.
    pub(super) fn pool(doing: &'static str) -> impl FnOnce(PoolError) -> Self {
        move |source| match source {
            PoolError::Backend(source) => Self::Db { doing, source },
            source => Self::Pool { doing, source },
        }
    }
}

impl From<PgError> for StoreError {
    fn from(e: PgError) -> Self {
        let message = e.to_string();
        match e {
            PgError::Db { source, .. }
                if source.code() == Some(&SqlState::SEQUENCE_GENERATOR_LIMIT_EXCEEDED) =>
            {
                StoreError::Corrupt("fencing tokens are exhausted".into())
            }
            // Everything else — connection lost, server shutting down or starting, a
            // timeout, a read-only standby after a failover — is the store failing: the
            // caller answers 503.
            PgError::Db { source, .. } => StoreError::unavailable(message, source),
            PgError::Pool { source, .. } => StoreError::unavailable(message, source),
            // Not the caller's input (that would read as a bad address): data this build
            // cannot read, as the embedded store says of a file of a newer schema.
            PgError::Row(_) | PgError::Data(_) | PgError::NewerSchema { .. } => StoreError::Corrupt(message),
            PgError::Address(_)
            | PgError::PoolConfig(_)
            | PgError::TtlTooLong(_)
            | PgError::DelayTooLong(_) => StoreError::Invalid(message),
        }
    }
}
