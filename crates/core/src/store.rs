//! The [`LockStore`] trait: what every store (in-memory, embedded, PostgreSQL, etcd, and the
//! HTTP client of a fencelock server) promises.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::deadlock::Deadlock;
use crate::hold::{Claim, Expired, Hold, HoldKind, HoldOutcome, HoldPage, Key};
use crate::model::{FencingToken, Lease, Meta, Owner, Resource, Resources, Terms, Timestamp, Ttl};

/// A store's result.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The most expired leases and holds a store needs to forget in one
/// [`LockStore::purge_expired`].
pub const PURGE_BATCH: usize = 512;

/// What an acquire did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// The resource was free or its lease had expired: a new lease with a new token.
    Granted {
        /// The new lease.
        lease: Lease,
        /// The expired lease this grant replaced, where the store still knew it.
        expired: Option<Lease>,
    },
    /// The caller already held the live lease: same token, `acquired_at` and `expires_at`
    /// set anew.
    Extended(Lease),
    /// Another owner holds a live lease. Not an error: the caller may retry or wait.
    Held {
        /// The live lease of the other owner.
        holder: Lease,
        /// How long that lease has left, by the store's clock.
        expires_in: Duration,
    },
    /// Nobody holds the resource, but its last lease expired without a release less than
    /// its lock-delay ago ([`Terms::lock_delay`]): nobody is granted it before
    /// the expired lease's [`Lease::closed_until`]. Not an error: the caller may retry or
    /// wait.
    Delayed {
        /// The resource asked for.
        resource: Resource,
        /// How long until the delay ends, by the store's clock.
        retry_in: Duration,
    },
}

impl AcquireOutcome {
    /// The lease the caller has now, if it was granted or extended.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Self::Granted { lease, .. } | Self::Extended(lease) => Some(lease),
            Self::Held { .. } | Self::Delayed { .. } => None,
        }
    }

    /// How long until asking again may be answered otherwise, if it was refused: the
    /// holder's time left, or the lock-delay's.
    pub fn retry_in(&self) -> Option<Duration> {
        match self {
            Self::Held { expires_in, .. } => Some(*expires_in),
            Self::Delayed { retry_in, .. } => Some(*retry_in),
            Self::Granted { .. } | Self::Extended(_) => None,
        }
    }
}

/// What an acquire of several locks at once ([`LockStore::acquire_all`]) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireAllOutcome {
    /// Every lock, in the order asked: each [`AcquireOutcome::Granted`] or
    /// [`AcquireOutcome::Extended`].
    Granted(Vec<AcquireOutcome>),
    /// Some lock was held by another owner, or closed by its lock-delay: nothing was
    /// acquired. The refusal ([`AcquireOutcome::Held`] or [`AcquireOutcome::Delayed`]) of
    /// every lock in the way, in the order asked.
    Refused(Vec<AcquireOutcome>),
}

impl AcquireAllOutcome {
    /// How long until asking again may be answered otherwise, if refused: the soonest end of
    /// what stands in the way.
    pub fn retry_in(&self) -> Option<Duration> {
        match self {
            Self::Granted(_) => None,
            Self::Refused(refusals) => refusals.iter().filter_map(AcquireOutcome::retry_in).min(),
        }
    }
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The caller's live lease is gone. With what it was and when it ended, where the store
    /// can tell (every store can; a client of a server cannot, as the API answers 204 with no
    /// body: see [`Capabilities::knows_released_lease`]).
    Released(Option<EndedLease>),
    /// No live lease on the resource (absent or expired), whatever the token.
    NotFound,
    /// A live lease of another owner, whatever the token.
    Forbidden,
    /// The caller's live lease has another token than the one given: nothing changed.
    Conflict,
}

/// What a force-release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForceOutcome {
    /// Every live lease, permit or hold of the name is gone: these, in token order, where the
    /// store can tell (empty where it cannot: see [`Capabilities::knows_released_lease`]).
    Released(Vec<EndedLease>),
    /// Nothing live on the name.
    NotFound,
}

/// A lease a release ended, and when, by the clock of the store that ended it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedLease {
    /// The lease as it was until it ended.
    pub lease: Lease,
    /// When it ended, by the store's clock (so that `ended_at - acquired_at` is how long it
    /// was held, whatever the server's own clock says).
    pub ended_at: Timestamp,
}

impl EndedLease {
    /// How long the lease was held, by the store's clock.
    pub fn held_for(&self) -> Duration {
        self.ended_at.since(self.lease.acquired_at)
    }
}

/// What a renew did, of a lease (`L` = [`Lease`]) or of a hold ([`Hold`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewOutcome<L = Lease> {
    /// `expires_at` is now + TTL; token and `acquired_at` are unchanged.
    Renewed(L),
    /// No live lease on the resource: an expired lease is never renewed.
    NotFound,
    /// A live lease of another owner, whatever the token.
    Forbidden,
    /// The caller's live lease has another token than the one given: nothing changed.
    Conflict,
}

/// Why a release or renew was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No live lease on the resource (absent or expired), whatever the token.
    NotFound,
    /// A live lease of another owner, whatever the token.
    Forbidden,
    /// The caller's live lease has another token than the one given.
    Conflict,
}

impl Refusal {
    /// Judges a release or renew by `owner`, with `token` if given, of `live` — the live
    /// lease on the resource, `None` if it is absent or expired — in the SPEC's order:
    /// absence, then owner, then token. Every store judges with this, so the order cannot
    /// differ between stores (PostgreSQL, which judges in SQL, is held to it by the
    /// conformance suite).
    pub fn check<'a>(
        live: Option<&'a Lease>,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<&'a Lease, Refusal> {
        match live {
            None => Err(Self::NotFound),
            Some(lease) if lease.owner != *owner => Err(Self::Forbidden),
            Some(lease) if token.is_some_and(|t| t != lease.token) => Err(Self::Conflict),
            Some(lease) => Ok(lease),
        }
    }
}

impl From<Refusal> for ReleaseOutcome {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotFound => Self::NotFound,
            Refusal::Forbidden => Self::Forbidden,
            Refusal::Conflict => Self::Conflict,
        }
    }
}

impl<L> From<Refusal> for RenewOutcome<L> {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotFound => Self::NotFound,
            Refusal::Forbidden => Self::Forbidden,
            Refusal::Conflict => Self::Conflict,
        }
    }
}

/// A notice on a store's release feed ([`LockStore::releases`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseNotice {
    /// The lock, semaphore or read-write lock of this name may be free sooner than its
    /// waiters were told: a lease or hold was released, purged after its expiry, replaced
    /// (a downgrade), or renewed or extended to end earlier than it did; or a waiting
    /// writer's intent was withdrawn. Waiters ask the store again.
    Freed(Key),
    /// Notices may have been lost — the store lost its subscription to the releases of other
    /// servers and renewed it — so any resource may have been released meanwhile.
    Missed,
}

/// Where a store announces releases, for [`LockStore::releases`]: a broadcast that any number
/// of waiters' dispatchers subscribe to. Nobody listening is fine: the feed only wakes
/// waiters, who fall back on their holder's expiry.
#[derive(Debug, Clone)]
pub struct ReleaseFeed(broadcast::Sender<ReleaseNotice>);

impl ReleaseFeed {
    /// How many notices a slow listener may fall behind before it is told it lagged (which
    /// waiters take as [`ReleaseNotice::Missed`]).
    const CAPACITY: usize = 1024;

    /// A feed with no listener yet.
    pub fn new() -> Self {
        Self(broadcast::channel(Self::CAPACITY).0)
    }

    /// Announces that `key` may be free sooner than its waiters think.
    pub fn announce(&self, key: &Key) {
        let _ = self.0.send(ReleaseNotice::Freed(key.clone()));
    }

    /// Announces that notices may have been lost.
    pub fn missed(&self) {
        let _ = self.0.send(ReleaseNotice::Missed);
    }

    /// A new listener, hearing what is announced from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ReleaseNotice> {
        self.0.subscribe()
    }
}

impl Default for ReleaseFeed {
    fn default() -> Self {
        Self::new()
    }
}

/// An event one server tells the other servers sharing its store (`GET /events`), through
/// [`LockStore::publish`]: opaque to the store, which only carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bulletin {
    /// The server that made the change (its event epoch: new at every start).
    pub origin: u64,
    /// Its place among that server's bulletins: 1, 2, 3, … with none left out, so that a
    /// store that hears one bulletin more than once (Redlock, from each node) keeps the
    /// first, and a server that hears one after a gap knows it missed some.
    pub seq: u64,
    /// The event, as the server wrote it.
    pub body: String,
}

impl Bulletin {
    /// One line for a store's message: `ORIGIN:SEQ:BODY`.
    pub fn encode(&self) -> String {
        format!("{}:{}:{}", self.origin, self.seq, self.body)
    }

    /// What [`Bulletin::encode`] wrote; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let (origin, rest) = text.split_once(':')?;
        let (seq, body) = rest.split_once(':')?;
        Some(Self {
            origin: origin.parse().ok()?,
            seq: seq.parse().ok()?,
            body: body.to_owned(),
        })
    }
}

/// What a store hears of other servers' events, for [`LockStore::bulletins`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A bulletin another server published.
    Told(Bulletin),
    /// Bulletins may have been lost: the store lost its subscription to the others' events
    /// and renewed it, or could not resume it where it was lost. A server's streams then
    /// say `reset`, since they may lack events.
    Missed,
}

/// Where a store hands other servers' bulletins, for [`LockStore::bulletins`].
#[derive(Debug, Clone)]
pub struct BulletinFeed(broadcast::Sender<Heard>);

impl BulletinFeed {
    /// How many bulletins the server may fall behind before it is told it lagged.
    const CAPACITY: usize = 4096;

    /// A feed with no listener yet.
    pub fn new() -> Self {
        Self(broadcast::channel(Self::CAPACITY).0)
    }

    /// Hands on a bulletin another server published.
    pub fn hand(&self, bulletin: Bulletin) {
        let _ = self.0.send(Heard::Told(bulletin));
    }

    /// Says that bulletins may have been lost.
    pub fn missed(&self) {
        let _ = self.0.send(Heard::Missed);
    }

    /// A new listener, hearing what is handed on from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Heard> {
        self.0.subscribe()
    }
}

impl Default for BulletinFeed {
    fn default() -> Self {
        Self::new()
    }
}

/// A server's watch on one name, from [`LockStore::watch`]: while it is kept, the store's
/// release feed hears other servers' changes of that name. Dropping it ends the watch.
#[derive(Debug, Default)]
#[must_use = "the watch ends when this is dropped"]
pub struct Watch {
    // Cancels the store's watch when dropped.
    stop: Option<DropGuard>,
}

impl Watch {
    /// No watch to end: what a store whose feed hears of every name anyway gives.
    pub fn none() -> Self {
        Self { stop: None }
    }

    /// Whether the store keeps a watch for this (not [`Watch::none`]).
    pub fn is_set(&self) -> bool {
        self.stop.is_some()
    }

    /// A watch that lasts until this is dropped, which cancels `stop`.
    pub fn until_dropped(stop: CancellationToken) -> Self {
        Self {
            stop: Some(stop.drop_guard()),
        }
    }
}

/// One page of live leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only resources whose name starts with this (empty: all).
    pub prefix: String,
    /// Only resources ordered after this one (the previous page's cursor).
    pub after: Option<Resource>,
    /// At most this many leases (at least one).
    pub limit: usize,
}

impl ListQuery {
    /// This query, made never to reach the lock of an election: elections sort before every
    /// name a client may write, so a query that could reach them (one without a prefix; a
    /// client's prefix never starts with their mark) starts after the last there can be
    /// ([`Resource::past_elections`]) rather than read them and drop them.
    pub fn past_elections(mut self) -> Self {
        if self.prefix.is_empty() {
            let past = Resource::past_elections();
            if self.after.as_ref().is_none_or(|after| *after < past) {
                self.after = Some(past);
            }
        }
        self
    }
}

/// Live leases ordered by the bytes of their resource name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasePage {
    /// The leases of this page.
    pub leases: Vec<Lease>,
    /// Where the next page starts, or `None` on the last page.
    pub next: Option<Resource>,
}

impl LeasePage {
    /// The page of `leases`, read in order one past `limit` ([`crate::page::page_of`]).
    pub fn from_one_past(leases: Vec<Lease>, limit: usize) -> Self {
        let (leases, next) = crate::page::page_of(leases, limit, |lease| &lease.resource);
        Self { leases, next }
    }
}

/// How a store differs from the others by nature. The conformance suite reads these instead
/// of skipping tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// The store rounds a TTL up to a multiple of this (etcd: whole seconds; most: 1 ms).
    /// A lease never lasts less than asked.
    pub ttl_granularity: Duration,
    /// A grant or release answered before a crash survives the crash.
    pub durable: bool,
    /// A release reports the lease it ended ([`ReleaseOutcome::Released`] with `Some`).
    pub knows_released_lease: bool,
    /// Many servers may share the store, each with a store of its own over the same state
    /// (PostgreSQL, etcd): mutual exclusion, token order and release notices then hold
    /// across them all.
    pub shared: bool,
    /// The store records a waiting writer's intent ([`LockStore::acquire_hold`]'s `intent`),
    /// so that later readers wait behind it. A client of a server does not: the server's own
    /// waiters record it when the client waits (`wait_ms`).
    pub writer_intents: bool,
    /// The store keeps the [`crate::Principal`] of each owner it is given, and holds leases
    /// to it. A client of a server does not choose its principal: the server binds each
    /// lease to the principal of the client's token.
    pub principals: bool,
    /// The store keeps the lock-delay of the [`Terms`] it is given. A client of a server does
    /// not send one: the server applies its own (`fencelock serve --lock-delay`) to every
    /// lease it grants.
    pub lock_delays: bool,
    /// How much sooner than its TTL the store may say a lease ends: [`Drift::NONE`] for
    /// most; a Redlock store reports what is left of the TTL after its allowance for the
    /// clocks of its nodes drifting apart, so that no node's copy outlives what it reports.
    pub drift: Drift,
    /// How long after a purge returned an expiry another purge may return it again: `None`
    /// for most (a lease is forgotten where it is removed); under Redlock, purges of two
    /// servers at once may each remove it from some of the nodes, and a node that did not
    /// answer one purge still holds it for the next, until the node forgets it by itself. The
    /// server tells and counts each expiry once within this time.
    pub expiries_repeat_within: Option<Duration>,
}

impl Capabilities {
    /// What a store that keeps every rule itself, in one process, has by nature: the
    /// in-memory reference store's — 1 ms TTLs, nothing durable, nothing shared, every
    /// release reported, writers' intents, principals and lock-delays kept, no drift. Every
    /// store says how it differs from this (`Capabilities { durable: true,
    /// ..Capabilities::BASELINE }`), so a new capability is one edit here, and one in each
    /// store that differs.
    pub const BASELINE: Self = Self {
        ttl_granularity: Duration::from_millis(1),
        durable: false,
        knows_released_lease: true,
        shared: false,
        writer_intents: true,
        principals: true,
        lock_delays: true,
        drift: Drift::NONE,
        expiries_repeat_within: None,
    };
}

/// An allowance for clock drift: a part of the TTL and a fixed margin
/// ([`Capabilities::drift`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drift {
    /// Thousandths of the TTL.
    pub per_mille: u32,
    /// Added whatever the TTL.
    pub fixed: Duration,
}

impl Drift {
    /// No allowance: a lease lasts its whole TTL.
    pub const NONE: Self = Self {
        per_mille: 0,
        fixed: Duration::ZERO,
    };

    /// Redlock's: 1 % of the TTL and 2 ms.
    pub const REDLOCK: Self = Self {
        per_mille: 10,
        fixed: Duration::from_millis(2),
    };

    /// The allowance for a lease of `ttl`.
    pub fn of(self, ttl: Duration) -> Duration {
        ttl * self.per_mille / 1000 + self.fixed
    }
}

/// Why a store could not answer. Contention is not an error: see [`AcquireOutcome::Held`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store cannot be reached or failed; nothing was changed, or the change is unknown
    /// to have happened (the caller must not assume it did).
    #[error("store unavailable: {message}")]
    Unavailable {
        /// What went wrong, for people.
        message: String,
        /// The driver's error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The store refused the request as invalid (e.g. a TTL above a server's maximum).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The store holds data it cannot read, or broke an invariant (e.g. tokens exhausted).
    #[error("store is corrupt: {0}")]
    Corrupt(String),
    /// A server knows no principal for the caller: no token was sent, or one it does not know
    /// (HTTP 401). Nothing was changed.
    #[error("not authenticated: {0}")]
    Unauthenticated(String),
    /// A server's principal for the caller lacks the right the call needs on that name
    /// (`read`, `lock` or `admin`; HTTP 403). Nothing was changed.
    #[error("not allowed: {0}")]
    NotAllowed(String),
    /// Waiting would close a circle of owners that wait for each other (each waits for a
    /// name held by the next): the wait that closes it is refused at once. Nothing was
    /// changed. Says who waits for what: step by step when this process's waiters found it
    /// (a server tells each caller only the names it may read), in a server's words when a
    /// server refused it.
    #[error("deadlock: {0}")]
    Deadlock(Deadlock),
    /// A server refused the caller for sending too many requests (HTTP 429). Nothing was
    /// changed: the same call may be answered after `retry_after`.
    #[error("too many requests: {detail} (try again in {retry_after:?})")]
    RateLimited {
        /// How long the server asked the caller to wait (its `Retry-After`; 1 s if it did
        /// not say).
        retry_after: Duration,
        /// What the server said.
        detail: String,
    },
}

impl StoreError {
    /// An [`StoreError::Unavailable`] from a driver error.
    pub fn unavailable(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// A place that keeps lock state and applies the rules of fencelock to it.
///
/// # Contract
///
/// - Each call is atomic: it happens whole or not at all, and concurrent calls behave as if
///   made one after another (one live lease per resource, whatever the timing).
/// - The store decides expiry by its own clock: a lease is live while `now < expires_at`.
/// - Every grant gets a [`FencingToken`] greater than every token the store issued for that
///   resource before, across releases, expiries and restarts; tokens are never reused.
/// - A durable store ([`Capabilities::durable`]) has made a grant, extension, renewal or
///   release durable before it returns it.
/// - A lease that expired with a lock-delay keeps its resource closed until
///   [`Lease::closed_until`] (a purge forgets it no sooner); a release ends the delay. A
///   renewal or extension is cut at the lease's `hold_until`.
/// - Release and renew check, in this order: no live lease → `NotFound`; another owner →
///   `Forbidden`; a token given that is not the lease's → `Conflict`.
/// - On `Err`, nothing was changed — or, where the store cannot know (a connection lost
///   mid-call), the outcome is unknown and the caller must treat it as not granted.
///
/// Semaphores and read-write locks ([`crate::hold`]) are held through the `*_hold` methods,
/// with the same contract: each hold is a lease with its own token, greater than every token
/// issued for its name before, and the rules of [`crate::hold::judge`] hold across every
/// server sharing the store.
///
/// Waiting for a busy lock is not the store's job: see [`crate::wait::Waiters`].
#[async_trait]
pub trait LockStore: Send + Sync + fmt::Debug + 'static {
    /// [`LockStore::acquire_with`] with no cap on holding and no lock-delay.
    async fn acquire(&self, resource: &Resource, owner: &Owner, ttl: Ttl) -> Result<AcquireOutcome> {
        self.acquire_with(resource, owner, Terms::ttl(ttl)).await
    }

    /// Grants a free or expired resource to `owner` (new token) on `terms`, extends `owner`'s
    /// live lease (same token, same cap and lock-delay, whatever `terms` says), or reports
    /// the live lease of another owner — or, when the last lease expired without a release
    /// less than its lock-delay ago, [`AcquireOutcome::Delayed`]. Every `expires_at` is cut
    /// at the lease's `hold_until`.
    async fn acquire_with(&self, resource: &Resource, owner: &Owner, terms: Terms) -> Result<AcquireOutcome>;

    /// Acquires every lock of `resources` for `owner` on `terms`, or none: as one
    /// [`LockStore::acquire_with`] each, in one step, or [`AcquireAllOutcome::Refused`] with
    /// nothing changed — not even the caller's own leases, which a grant would extend. New
    /// tokens follow the order of `resources`: each at least the one before it.
    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome>;

    /// The live lease on `resource`, if any.
    async fn get(&self, resource: &Resource) -> Result<Option<Lease>>;

    /// Ends `owner`'s live lease on `resource`.
    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome>;

    /// [`LockStore::renew_with`], keeping the lease's metadata.
    async fn renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome> {
        self.renew_with(resource, owner, ttl, token, None).await
    }

    /// Sets the expiry of `owner`'s live lease on `resource` to now + `ttl`, and replaces its
    /// metadata with `meta` if given (in the same step, judged the same way).
    async fn renew_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome>;

    /// Live leases in the order of their resource names' bytes, one page at a time.
    async fn list(&self, query: &ListQuery) -> Result<LeasePage>;

    /// Forgets leases and holds that have expired — leases with a lock-delay once it has
    /// ended too — (and writers' intents that ended) and
    /// returns the leases and holds, so that expiry can be logged and counted. Stores that
    /// forget expired leases by themselves (etcd) may return none.
    ///
    /// A store may stop after [`PURGE_BATCH`] of them, so that one purge never holds it long
    /// (a store that applies calls one at a time would make every other call wait); a caller
    /// that gets at least that many calls again.
    async fn purge_expired(&self) -> Result<Vec<Expired>>;

    /// [`LockStore::acquire_hold_with`] with no metadata.
    async fn acquire_hold(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        intent: Option<Ttl>,
    ) -> Result<HoldOutcome> {
        self.acquire_hold_with(name, owner, claim, ttl, intent, None)
            .await
    }

    /// Grants `owner` a hold of `claim` on the semaphore or read-write lock `name`, extends
    /// its live hold of that claim, replaces its live hold of another claim (upgrade,
    /// downgrade), or says why not — as [`crate::hold::judge`] decides.
    ///
    /// `intent` is for a writer that waits: when a [`Claim::Write`] is not granted, the store
    /// records in the same step (or renews) that `owner` waits, until now + `intent`, so that
    /// readers arriving later are refused, on every server sharing the store, until it is
    /// granted, gives up ([`LockStore::withdraw_intent`]) or its intent runs out. A grant of
    /// `write` ends the owner's intent.
    ///
    /// `meta` is as [`Terms::meta`]: a hold with a new token has it (or none), an extension
    /// replaces its own with it if given.
    async fn acquire_hold_with(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        intent: Option<Ttl>,
        meta: Option<&Meta>,
    ) -> Result<HoldOutcome>;

    /// The live holds on `name`, in token order (empty if none).
    async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>>;

    /// Ends `owner`'s live hold on `name`: `NotFound` if no live hold has its name,
    /// `Forbidden` if that hold is of another principal ([`Owner::claims_name_of`]),
    /// `Conflict` if a token is given that is not its hold's.
    async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome>;

    /// [`LockStore::renew_hold_with`], keeping the hold's metadata.
    async fn renew_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome<Hold>> {
        self.renew_hold_with(kind, name, owner, ttl, token, None).await
    }

    /// Sets the expiry of `owner`'s live hold on `name` to now + `ttl`, and replaces its
    /// metadata with `meta` if given, refused as [`LockStore::release_hold`] is.
    async fn renew_hold_with(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome<Hold>>;

    /// The names of `kind` with live holds, in the order of their bytes, one page at a time
    /// (`query.limit` counts names).
    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage>;

    /// Ends `owner`'s intent to write `name` (a writer that gave up waiting), and announces
    /// it so that the readers it held back ask again. Nothing if it has none.
    async fn withdraw_intent(&self, name: &Resource, owner: &Owner) -> Result<()>;

    /// Ends every live lease or hold of `key` (a lock, a semaphore or a read-write lock),
    /// whoever holds it, and announces it. For an administrator who must free a name whose
    /// holder is gone for good; the next grant's token is greater than theirs, as always.
    async fn force_release(&self, key: &Key) -> Result<ForceOutcome>;

    /// Answers if the store can serve requests (for readiness checks).
    async fn ping(&self) -> Result<()>;

    /// A feed of resources whose lock may have become free sooner than waiters were told —
    /// released, purged, or renewed or extended to a shorter lease — from any server sharing
    /// the store, so waiters can be woken without polling; [`ReleaseNotice::Missed`] when
    /// notices may have been lost. `None` if the store cannot tell (waiters then rely on the
    /// expiry of the lease they wait for).
    ///
    /// A store announces every such change once it is committed, even when the caller that
    /// made it has gone away meanwhile (its future dropped).
    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>>;

    /// Has the release feed hear other servers' changes of `key` from the time this returns
    /// for as long as the [`Watch`] is kept: [`crate::Waiters`] keeps one for each name with
    /// waiters that the store refused. A store whose feed hears of every name (the default: PostgreSQL, etcd,
    /// Redis) keeps nothing; one that watches names one by one (ZooKeeper) tells only the
    /// servers that wait for a name of its changes. If the store cannot set the watch now,
    /// it goes on trying, and announces the name once it has, in case it changed meanwhile.
    async fn watch(&self, key: &Key) -> Watch {
        let _ = key;
        Watch::none()
    }

    /// Tells every other server sharing the store of `bulletin` (an event of this server's),
    /// without waiting for it: a store queues it and sends it in the background, in the
    /// order given. Best effort: a bulletin lost (a crash, the store unreachable) costs the
    /// other servers' streams that event, never a change. A store that no other server
    /// shares (the default: the embedded and in-memory stores) has nobody to tell.
    fn publish(&self, bulletin: &Bulletin) {
        let _ = bulletin;
    }

    /// The bulletins other servers published, as they arrive, each once (a store that hears
    /// one twice drops the second), in each server's order, and [`Heard::Missed`] where some
    /// may have been lost; `None` if no other server shares the store (the default).
    fn bulletins(&self) -> Option<broadcast::Receiver<Heard>> {
        None
    }

    /// How this store differs from the others by nature.
    fn capabilities(&self) -> Capabilities;
}
