//! # fencelock-core
//!
//! The lock model of fencelock and the [`LockStore`] trait every store implements, with no
//! I/O: what a lease is, the rules that decide who gets it, and waiting in line for it.
//!
//! # Layout
//!
//! - [`model`]: the validated newtypes — [`Resource`], [`Owner`], [`Ttl`], [`FencingToken`],
//!   [`Timestamp`], [`Meta`] — and [`Lease`].
//! - [`election`]: leader election as a lock no client can name — [`Leadership`].
//! - [`hold`]: semaphores and read-write locks — [`Claim`], [`Hold`], and [`hold::judge`],
//!   their rule book.
//! - [`store`]: the [`LockStore`] trait, its outcome enums and [`StoreError`].
//! - [`page`]: [`page::page_of`], the one way every store cuts a page of leases or holds.
//! - [`layer`]: [`Layered`], a store with a [`Layer`] around each call (deadlines, timing).
//! - [`turns`]: [`Turns`], the layer that lets one call per name reach a store at a time.
//! - [`table`]: [`LockTable`], the rules as a pure state machine (used by the in-memory and
//!   the embedded store).
//! - [`memory`]: [`MemoryStore`], the reference store (`memory://`).
//! - [`clock`]: the injectable [`Clock`]: a monotonic wall clock, with the host's [`Uptime`];
//!   for tests, a manual one and one that follows Tokio's (pausable) time.
//! - [`wait`]: [`Waiters`], first-come first-served waiting above any store, for one lock or
//!   several at once.
//! - [`deadlock`]: the wait-for graph of one [`Waiters`], which refuses the wait that would
//!   close a cycle of owners waiting for each other.

pub mod clock;
pub mod deadlock;
pub mod election;
pub mod hold;
pub mod layer;
pub mod memory;
pub mod model;
pub mod page;
pub mod store;
pub mod table;
pub mod turns;
pub mod wait;

pub use clock::{Clock, ManualClock, SystemClock, TokioClock, Uptime};
pub use deadlock::{Cycle, Deadlock};
pub use election::Leadership;
pub use hold::{Busy, Claim, Expired, Hold, HoldKind, HoldOutcome, HoldPage, Intent, Key, Kind};
pub use layer::{Call, Layer, Layered, Names};
pub use memory::MemoryStore;
pub use model::{
    FencingToken, InvalidMeta, InvalidName, InvalidResources, InvalidTtl, Lease, MAX_RESOURCES, Meta, Owner,
    Principal, Resource, Resources, Rfc3339, Terms, Timestamp, Ttl,
};
pub use store::{
    AcquireAllOutcome, AcquireOutcome, Bulletin, BulletinFeed, Capabilities, Drift, EndedLease, ForceOutcome,
    Heard, LeasePage, ListQuery, LockStore, Refusal, ReleaseFeed, ReleaseNotice, ReleaseOutcome,
    RenewOutcome, StoreError, Watch,
};
pub use table::LockTable;
pub use turns::Turns;
pub use wait::{Acquired, FOREVER, Waiters, Waiting};
