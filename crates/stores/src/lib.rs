//! # fencelock-stores
//!
//! The stores behind a store address, and [`open`], which reads the address and opens the
//! right one: `memory://` for tests, `sqlite://PATH` for the embedded store, `postgres://…`
//! and `etcd://…` for stores shared by many servers.
//!
//! ```no_run
//! # async fn demo() -> Result<(), fencelock_stores::OpenError> {
//! let store = fencelock_stores::open("sqlite://fencelock.db").await?;
//! assert!(store.capabilities().durable);
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! - [`open`] and [`OpenError`]: the address parser, one `match` arm per scheme.
//! - [`sqlite`] (feature `sqlite`, on by default): [`sqlite::SqliteStore`], one SQLite file
//!   owned by one server, with group commit.
//! - [`postgres`] (feature `postgres`, on by default): [`postgres::PostgresStore`], a
//!   PostgreSQL database shared by many servers.
//! - [`etcd`] (feature `etcd`, off by default: its build needs `protoc`):
//!   [`etcd::EtcdStore`], an etcd cluster shared by many servers.
//! - The in-memory store is [`fencelock_core::MemoryStore`]; it lives in the core crate as
//!   the reference every store is tested against.

use std::sync::Arc;

use fencelock_core::{LockStore, MemoryStore, StoreError};

#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(any(feature = "postgres", feature = "etcd"))]
mod remote;
#[cfg(feature = "sqlite")]
pub mod sqlite;

/// Why a store address could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The address has no scheme, or one this build does not know.
    #[error("unsupported store address {address:?}: expected one of {}", supported_schemes().join(", "))]
    UnsupportedScheme {
        /// The address as given.
        address: String,
    },
    /// The store is one fencelock has, but this build left it out.
    #[error(
        "this fencelock was built without the {feature} store, needed for {address:?}: build it \
         with `--features {feature}` (the etcd store needs protoc: apt-get install protobuf-compiler)"
    )]
    NotBuilt {
        /// The address as given.
        address: String,
        /// The cargo feature that builds the store.
        feature: &'static str,
    },
    /// The scheme is known but the rest of the address is not right for it.
    #[error("invalid store address {address:?}: {reason}")]
    InvalidAddress {
        /// The address as given.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The address is fine; the store refused to open (e.g. its file is in use).
    #[error("cannot open the store at {address:?}: {source}")]
    Store {
        /// The address as given.
        address: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}

/// The address forms this build can open, as written in error messages.
pub fn supported_schemes() -> Vec<&'static str> {
    let mut schemes = vec!["memory://"];
    if cfg!(feature = "sqlite") {
        schemes.push("sqlite://PATH");
    }
    if cfg!(feature = "postgres") {
        schemes.push("postgres://USER@HOST:PORT/DB");
    }
    if cfg!(feature = "etcd") {
        schemes.push("etcd://HOST:PORT[,HOST:PORT...]");
    }
    schemes
}

/// Opens the store at `address`:
///
/// - `memory://`: a new, empty [`MemoryStore`] (nothing shared, nothing kept);
/// - `sqlite://PATH`: the embedded store in the file at `PATH`, relative to the current
///   folder (`sqlite://fencelock.db`) or absolute (`sqlite:///var/lib/fencelock.db`); the
///   file is created if missing, and refused if another server has it open.
/// - `postgres://USER[:PASSWORD]@HOST:PORT/DB` (or `postgresql://`): a PostgreSQL database
///   that many servers may share; see [`postgres`]. The schema is created or upgraded.
/// - `etcd://HOST:PORT[,HOST:PORT…]`: an etcd cluster that many servers may share, given by
///   the client addresses of its members; see [`etcd`].
///
/// Schemes are case-insensitive.
pub async fn open(address: &str) -> Result<Arc<dyn LockStore>, OpenError> {
    let Some((scheme, rest)) = address.split_once("://") else {
        return Err(OpenError::UnsupportedScheme {
            address: address.into(),
        });
    };
    match scheme.to_ascii_lowercase().as_str() {
        "memory" => open_memory(address, rest),
        #[cfg(feature = "sqlite")]
        "sqlite" => open_sqlite(address, rest).await,
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => open_postgres(address, rest).await,
        #[cfg(feature = "etcd")]
        "etcd" => open_etcd(address, rest).await,
        #[cfg(not(feature = "etcd"))]
        "etcd" => Err(OpenError::NotBuilt {
            address: address.into(),
            feature: "etcd",
        }),
        _ => Err(OpenError::UnsupportedScheme {
            address: address.into(),
        }),
    }
}

fn open_memory(address: &str, rest: &str) -> Result<Arc<dyn LockStore>, OpenError> {
    if !rest.is_empty() {
        return Err(invalid(address, "memory:// takes nothing after the scheme"));
    }
    Ok(Arc::new(MemoryStore::new()))
}

#[cfg(feature = "sqlite")]
async fn open_sqlite(address: &str, path: &str) -> Result<Arc<dyn LockStore>, OpenError> {
    if path.is_empty() {
        return Err(invalid(
            address,
            "sqlite:// needs a file path, e.g. sqlite://fencelock.db",
        ));
    }
    let store_error = |source| OpenError::Store {
        address: address.into(),
        source,
    };
    let path = std::path::PathBuf::from(path);
    // Opening reads and writes the file: keep that off the async threads.
    let opened = tokio::task::spawn_blocking(move || sqlite::SqliteStore::open(path))
        .await
        .map_err(|e| store_error(StoreError::unavailable("opening the SQLite store panicked", e)))?;
    Ok(Arc::new(opened.map_err(store_error)?))
}

#[cfg(feature = "postgres")]
async fn open_postgres(address: &str, rest: &str) -> Result<Arc<dyn LockStore>, OpenError> {
    // The driver reads only the lower-case scheme.
    match postgres::PostgresStore::connect(&format!("postgres://{rest}")).await {
        Ok(store) => Ok(Arc::new(store)),
        Err(StoreError::Invalid(reason)) => Err(invalid(address, &reason)),
        Err(source) => Err(OpenError::Store {
            address: address.into(),
            source,
        }),
    }
}

#[cfg(feature = "etcd")]
async fn open_etcd(address: &str, rest: &str) -> Result<Arc<dyn LockStore>, OpenError> {
    match etcd::EtcdStore::connect(&format!("etcd://{rest}")).await {
        Ok(store) => Ok(Arc::new(store)),
        Err(StoreError::Invalid(reason)) => Err(invalid(address, &reason)),
        Err(source) => Err(OpenError::Store {
            address: address.into(),
            source,
        }),
    }
}

fn invalid(address: &str, reason: &str) -> OpenError {
    OpenError::InvalidAddress {
        address: address.into(),
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn refusal(address: &str) -> OpenError {
        open(address).await.expect_err(address)
    }

    #[tokio::test]
    async fn memory_opens_an_empty_volatile_store() {
        for address in ["memory://", "MEMORY://"] {
            let store = open(address).await.unwrap();
            assert!(!store.capabilities().durable);
            assert!(store.releases().is_some());
        }
        let error = refusal("memory://x").await;
        assert!(matches!(error, OpenError::InvalidAddress { .. }), "{error}");
    }

    #[tokio::test]
    async fn unknown_or_missing_schemes_list_the_supported_ones() {
        assert_eq!(
            supported_schemes().contains(&"sqlite://PATH"),
            cfg!(feature = "sqlite")
        );
        for address in ["fencelock.db", "mysql://db", "", "sqlite:fencelock.db"] {
            let error = refusal(address).await;
            assert!(matches!(error, OpenError::UnsupportedScheme { .. }), "{error}");
            let message = error.to_string();
            for scheme in supported_schemes() {
                assert!(message.contains(scheme), "{message}");
            }
        }
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_opens_a_relative_or_absolute_path() {
        let dir = tempfile::tempdir().unwrap();
        let absolute = dir.path().join("abs.db");
        let store = open(&format!("sqlite://{}", absolute.display())).await.unwrap();
        assert!(store.capabilities().durable);
        assert!(absolute.exists());
        drop(store);

        // A relative path is taken from the current folder (climbed to the root here, as the
        // temporary folder may be anywhere); the scheme's case does not matter.
        let cwd = std::env::current_dir().unwrap();
        let up = "../".repeat(cwd.components().count() - 1);
        let relative = format!(
            "{up}{}",
            dir.path().join("rel.db").strip_prefix("/").unwrap().display()
        );
        let store = open(&format!("SQLite://{relative}")).await.unwrap();
        store.ping().await.unwrap();
        assert!(dir.path().join("rel.db").exists());
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_needs_a_path_and_a_usable_file() {
        let error = refusal("sqlite://").await;
        assert!(matches!(error, OpenError::InvalidAddress { .. }), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/folder/x.db");
        let error = refusal(&format!("sqlite://{}", missing.display())).await;
        assert!(matches!(error, OpenError::Store { .. }), "{error}");
        assert!(error.to_string().contains("no/such/folder/x.db"), "{error}");
    }
}
