//! # fencelock-client
//!
//! Hold a fencelock lease safely, through a fencelock server or straight on a store.
//!
//! [`connect`] takes any address — `http://HOST:PORT` for a server, or a store address such
//! as `sqlite://PATH` or `memory://` — and gives one [`Client`]. Its
//! [`acquire`](Client::acquire) gives a [`LeaseGuard`]: the lease, its fencing token, a
//! renewal task that keeps it alive, and [`lost`](LeaseGuard::lost), which completes as soon
//! as the holder can no longer be sure it holds the lease. [`with_lock`] runs a closure
//! under a lease and always releases it. Semaphores and read-write locks are held the same
//! way: [`acquire_permit`](Client::acquire_permit), [`acquire_read`](Client::acquire_read) and
//! [`acquire_write`](Client::acquire_write) give a [`HoldGuard`] — the same guard, over a
//! permit or a hold, each with a fencing token of its own.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use fencelock_client::{Ttl, connect};
//!
//! let client = connect("memory://").await?; // or "http://127.0.0.1:7070"
//! let ttl = Ttl::from_millis(30_000, Ttl::DEFAULT_MAX)?;
//! let guard = client
//!     .acquire(&"payment:42".parse()?, &"worker-7".parse()?, ttl, Duration::from_secs(10))
//!     .await?;
//! // Every write to the protected resource carries the token; the resource refuses
//! // tokens lower than one it has seen (see `fence`).
//! println!("{} is ours, token {}", guard.resource(), guard.token());
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! A lease that expires while its holder is paused cannot be noticed by the holder in
//! time; only the protected resource can refuse the late write. That is what the fencing
//! token is for, and what [`fence`] helps the protected side do.
//!
//! # Layout
//!
//! - [`client`]: [`connect`], [`Client`] (acquire a lock, a permit or a hold with a guard,
//!   or plain calls) and [`with_lock`].
//! - [`guard`]: [`LeaseGuard`] over what it holds ([`Held`]: a lease, or a permit or hold,
//!   [`HoldGuard`]) — background renewal, [`LeaseState`], [`LostReason`], and how the guard
//!   counts time ([`GuardOptions`]).
//! - [`http`]: [`HttpStore`], the [`LockStore`] trait over a server's HTTP API.
//! - [`fence`]: the protected side — [`fence::FencedValue`] and a fenced SQL `UPDATE`.

pub mod client;
pub mod fence;
pub mod guard;
pub mod http;

pub use client::{AcquireError, Client, ConnectError, connect, with_lock};
pub use fencelock_core::{
    AcquireOutcome, Busy, Claim, FencingToken, Hold, HoldKind, HoldOutcome, HoldPage, Kind, Lease, LeasePage,
    ListQuery, LockStore, Owner, ReleaseOutcome, RenewOutcome, Resource, StoreError, Timestamp, Ttl,
};
pub use guard::{GuardOptions, Held, HoldGuard, InvalidGuardOptions, LeaseGuard, LeaseState, LostReason};
pub use http::{HttpOptions, HttpStore, InvalidServerAddress};
