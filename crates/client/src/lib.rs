//! # fencelock-client
//!
//! Hold a fencelock lease safely, through a fencelock server or straight on a store.
//!
//! [`connect`] takes any address — `http://HOST:PORT` or `https://HOST:PORT` for a server, or
//! a store address such as `sqlite://PATH` or `memory://` — and gives one [`Client`]. Its
//! [`acquire`](Client::acquire) gives a [`LeaseGuard`]: the lease, its fencing token, a
//! renewal task that keeps it alive, and [`lost`](LeaseGuard::lost), which completes as soon
//! as the holder can no longer be sure it holds the lease. [`with_lock`] runs a closure
//! under a lease and always releases it. Semaphores and read-write locks are held the same
//! way: [`acquire_permit`](Client::acquire_permit), [`acquire_read`](Client::acquire_read) and
//! [`acquire_write`](Client::acquire_write) give a [`HoldGuard`] — the same guard, over a
//! permit or a hold, each with a fencing token of its own.
//!
//! Several locks are taken together, all or none, with
//! [`acquire_all`](Client::acquire_all): one [`MultiGuard`] renews them in one schedule, is
//! lost as soon as any of them is, and releases all of them (a two-account transfer is
//! `examples/transfer.rs`). A lease can carry a cap on holding
//! ([`acquire_with`](Client::acquire_with) and [`Terms::max_hold`]): no renewal keeps it past
//! its `hold_until`, and the guard's `lost()` fires before it ([`LostReason::CapReached`]).
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
//! # A server with TLS and authentication
//!
//! [`connect_with`] takes [`HttpOptions`] for a server: [`CaCertificates`] to trust for
//! `https://` (PEM, e.g. a private CA's certificate, in place of the system's roots), and an
//! [`AuthToken`] sent as `Authorization: Bearer TOKEN` on every request (made by
//! `fencelock auth new-token NAME`; the server decides from it which principal the client
//! is, and binds every lease it acquires to that principal). A server that refuses the
//! client answers errors, not outcomes: [`StoreError::Unauthenticated`] (401: no token, or
//! one it does not know), [`StoreError::NotAllowed`] (403: the principal lacks the `read`,
//! `lock` or `admin` right on that name, as the server's detail says) and
//! [`StoreError::RateLimited`] (429: ask again after its `retry_after`); a failed TLS
//! handshake (a certificate no trusted CA signed, or for another name) is
//! [`StoreError::Unavailable`] saying so. Through an acquire they come as
//! [`AcquireError::Store`].
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use fencelock_client::{CaCertificates, HttpOptions, StoreError, connect_with};
//!
//! let options = HttpOptions {
//!     ca_certificates: Some(CaCertificates::from_pem(&std::fs::read("ca.pem")?)?),
//!     auth_token: Some(std::env::var("FENCELOCK_AUTH_TOKEN")?.parse()?),
//!     ..HttpOptions::default()
//! };
//! let client = connect_with("https://locks.internal:7070", options).await?;
//! match client.get(&"payment:42".parse()?).await {
//!     Ok(lease) => println!("{lease:?}"),
//!     Err(StoreError::RateLimited { retry_after, .. }) => println!("busy; again in {retry_after:?}"),
//!     Err(error) => return Err(error.into()),
//! }
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
//! - [`client`]: [`connect`], [`Client`] (acquire a lock, several locks at once, a permit or
//!   a hold with a guard, or plain calls) and [`with_lock`].
//! - [`guard`]: [`LeaseGuard`] over what it holds ([`Held`]: a lease, or a permit or hold,
//!   [`HoldGuard`]) and [`MultiGuard`] over several leases — background renewal,
//!   [`LeaseState`], [`LostReason`], and how a guard counts time and caps
//!   ([`GuardOptions`]).
//! - [`http`]: [`HttpStore`], the [`LockStore`] trait over a server's HTTP API, and its
//!   [`HttpOptions`].
//! - [`access`]: what a client shows a server and what it trusts: [`AuthToken`],
//!   [`CaCertificates`].
//! - [`events`]: [`events::Events`], a server's event stream that resumes by itself.
//! - [`fence`]: the protected side — [`fence::FencedValue`] and a fenced SQL `UPDATE`.

pub mod access;
pub mod client;
pub mod events;
pub mod fence;
pub mod guard;
pub mod http;
pub mod leader;

pub use access::{AuthToken, CaCertificates, InvalidAuthToken, InvalidCaCertificate};
pub use client::{
    AUTH_TOKEN_VAR, AcquireError, CACERT_VAR, Client, ConnectError, connect, connect_with, with_lock,
};
pub use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Busy, Claim, FencingToken, ForceOutcome, Hold, HoldKind, HoldOutcome,
    HoldPage, InvalidMeta, InvalidResources, Key, Kind, Lease, LeasePage, ListQuery, LockStore,
    MAX_RESOURCES, Meta, Owner, ReleaseOutcome, RenewOutcome, Resource, Resources, StoreError, Terms,
    Timestamp, Ttl,
};
pub use guard::{
    GuardOptions, Held, HoldGuard, InvalidGuardOptions, LeaseGuard, LeaseState, LostReason, MultiGuard,
};
pub use http::{HttpOptions, HttpStore, InvalidServerAddress};
pub use leader::Leader;
