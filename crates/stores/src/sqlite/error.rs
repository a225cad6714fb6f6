//! Every failure of the SQLite store, and how callers see it: as a [`StoreError`], made in
//! one place, so that no `rusqlite` type crosses the [`LockStore`] trait.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fencelock_core::StoreError;
use rusqlite::ErrorCode;

/// Every failure of the SQLite store. Callers only ever see it as a [`StoreError`], made in
/// one place (the `From` below); no `rusqlite` type crosses the
/// [`LockStore`](fencelock_core::LockStore) trait.
#[derive(Debug, thiserror::Error)]
pub(super) enum SqliteError {
    /// The file could not be opened, configured or migrated.
    #[error("{}", open_message(.path, .what, .source))]
    Open {
        path: PathBuf,
        what: &'static str,
        source: rusqlite::Error,
    },
    #[error("opening the SQLite store panicked")]
    OpenPanicked(#[source] tokio::task::JoinError),
    #[error("{} cannot use a write-ahead log (journal mode {mode})", .path.display())]
    NoWal { path: PathBuf, mode: String },
    #[error(
        "{} has schema version {version}, not one of this fencelock's (0 to {known}): \
         was it written by a newer fencelock?",
        .path.display()
    )]
    UnknownSchema {
        path: PathBuf,
        version: i64,
        known: usize,
    },
    #[error("cannot re-base the SQLite store's leases and holds")]
    Rebase(#[source] rusqlite::Error),
    #[error("cannot read the SQLite store")]
    Read(#[source] rusqlite::Error),
    /// A value in the file that no lease or hold can have.
    #[error("{0}")]
    Data(String),
    #[error("cannot start the SQLite writer thread")]
    Thread(#[source] std::io::Error),
    #[error("cannot start a thread that loads the SQLite store's leases")]
    LoaderThread(#[source] std::io::Error),
    #[error("loading the SQLite store's leases panicked: {0}")]
    LoadPanicked(String),
    #[error("the SQLite store is closed")]
    Closed,
    #[error("the SQLite writer of {} stopped", .0.display())]
    WriterStopped(PathBuf),
    #[error("the SQLite store failed this call's batch; nothing of it was applied")]
    Batch(#[source] Arc<WriteError>),
}

impl From<SqliteError> for StoreError {
    fn from(e: SqliteError) -> Self {
        let message = e.to_string();
        match e {
            SqliteError::Open { source, .. } | SqliteError::Rebase(source) | SqliteError::Read(source) => {
                StoreError::unavailable(message, source)
            }
            SqliteError::OpenPanicked(source) => StoreError::unavailable(message, source),
            SqliteError::Thread(source) | SqliteError::LoaderThread(source) => {
                StoreError::unavailable(message, source)
            }
            // A lease the batch read from the file that no lease can be.
            SqliteError::Batch(source) if matches!(&*source, WriteError::Read(SqliteError::Data(_))) => {
                StoreError::Corrupt(format!("{message}: {source}"))
            }
            SqliteError::Batch(source) => StoreError::unavailable(message, source),
            SqliteError::NoWal { .. }
            | SqliteError::Closed
            | SqliteError::WriterStopped(_)
            | SqliteError::LoadPanicked(_) => StoreError::Unavailable {
                message,
                source: None,
            },
            SqliteError::UnknownSchema { .. } | SqliteError::Data(_) => StoreError::Corrupt(message),
        }
    }
}

/// Why a batch could not be read or written: shared by every caller of the batch.
#[derive(Debug, thiserror::Error)]
pub(super) enum WriteError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("{what} {value} does not fit in an SQLite integer")]
    OutOfRange { what: &'static str, value: u64 },
    /// A lease the batch needed could not be read from the file (the store was still loading
    /// its leases), or the load of the rest failed.
    #[error(transparent)]
    Read(SqliteError),
}

/// The message of an error at open; a busy file means another server has it.
pub(super) fn open_message(path: &Path, what: &str, error: &rusqlite::Error) -> String {
    let busy = matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    );
    if busy {
        format!(
            "{} is in use by another fencelock server: an embedded store belongs to one \
             server; to share a store between servers, use PostgreSQL or etcd",
            path.display()
        )
    } else {
        format!("{what} the SQLite store {}", path.display())
    }
}
