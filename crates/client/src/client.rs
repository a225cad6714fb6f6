//! [`Client`]: one handle on a fencelock server or a store, whatever the address; and
//! [`with_lock`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::election::{self, Leadership};
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Acquired, Busy, Claim, FencingToken, ForceOutcome, Hold, HoldKind,
    HoldOutcome, HoldPage, Key, Lease, LeasePage, ListQuery, LockStore, Meta, Owner, ReleaseOutcome,
    RenewOutcome, Resource, Resources, StoreError, Terms, Ttl, Waiters,
};
#[cfg(feature = "direct")]
use fencelock_stores::OpenError;
use futures_util::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::access::CaCertificates;
use crate::events::Events;
use crate::guard::{
    GuardOptions, HoldGuard, InvalidGuardOptions, Keeper, LeaseGuard, LostReason, MultiGuard, Timing,
    Unconfirmed,
};
use crate::http::{HttpOptions, HttpStore, InvalidServerAddress};
use crate::leader::Leader;

/// Why [`connect`] could not make a client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The address is neither a server's (`http://`, `https://`) nor a store's this build
    /// knows.
    #[error("unsupported address {address:?}: expected http://HOST:PORT or https://HOST:PORT for a fencelock server, or a store: {}", fencelock_stores::supported_schemes().join(", "))]
    #[cfg(feature = "direct")]
    UnsupportedScheme {
        /// The address as given.
        address: String,
    },
    /// A server address that cannot be used.
    #[error(transparent)]
    Server(#[from] InvalidServerAddress),
    /// An environment variable [`connect`] reads holds something it cannot use.
    #[error("{variable}: {message}")]
    Environment {
        /// The variable.
        variable: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// A store address that is invalid, or a store that refused to open.
    #[cfg(feature = "direct")]
    #[error(transparent)]
    Store(OpenError),
    /// Not a server's address, on a client built without the `direct` feature, which opens
    /// store addresses.
    #[error(
        "{address:?} is not a fencelock server address (http://HOST:PORT or https://HOST:PORT), \
         and this fencelock-client was built without the `direct` feature, which opens store \
         addresses: build it with `--features direct`"
    )]
    NoDirect {
        /// The address as given.
        address: String,
    },
}

impl ConnectError {
    /// Whether the address itself, or what the environment gives with it, is wrong (as
    /// opposed to a store that could not be opened): worth telling apart for exit codes.
    pub fn is_bad_address(&self) -> bool {
        match self {
            Self::Server(_) | Self::NoDirect { .. } | Self::Environment { .. } => true,
            #[cfg(feature = "direct")]
            Self::UnsupportedScheme { .. } => true,
            #[cfg(feature = "direct")]
            Self::Store(OpenError::UnsupportedScheme { .. } | OpenError::InvalidAddress { .. }) => true,
            #[cfg(feature = "direct")]
            Self::Store(_) => false,
        }
    }
}

/// Why an acquire did not give a lease.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// Another owner holds the lock (and kept it for the whole wait, if there was one).
    /// Contention, not a failure: try again later.
    #[error("{}", held_words(holder, *expires_in))]
    Busy {
        /// The other owner's live lease.
        holder: Lease,
        /// How long that lease has left unless it is renewed, by the store's clock.
        expires_in: Duration,
    },
    /// Nobody holds the lock, but its last lease expired without a release less than the
    /// lock-delay ago (and the delay outlasted the wait, if there was one): nobody may have
    /// it before `retry_in`. Contention, not a failure: try again then.
    #[error("{}", delayed_words(resource, *retry_in))]
    Delayed {
        /// The lock.
        resource: Resource,
        /// How long until the delay ends, by the store's clock.
        retry_in: Duration,
    },
    /// Other owners hold what a semaphore permit or a read-write lock hold needs (and kept it
    /// for the whole wait, if there was one): all the permits, a write hold, or — for a
    /// reader — a writer waits before it. Contention, not a failure: try again later.
    #[error("{}", busy_words(name, *claim, busy))]
    HoldBusy {
        /// The semaphore or read-write lock.
        name: Resource,
        /// What was asked for.
        claim: Claim,
        /// Who holds it, whether a writer waits, and when asking again may be answered
        /// otherwise.
        busy: Busy,
    },
    /// The semaphore's live permits carry another limit than the one asked for; nothing
    /// changed. Every holder of a semaphore must ask with the same limit.
    #[error(
        "the semaphore {name} has live permits of limit {limit}: a permit of another limit cannot be granted until they end"
    )]
    LimitMismatch {
        /// The semaphore.
        name: Resource,
        /// The limit its live permits carry.
        limit: u32,
    },
    /// Some of the locks asked for together ([`Client::acquire_all`]) were held by other
    /// owners or closed by a lock-delay (for the whole wait, if there was one): none was
    /// acquired. Contention, not a failure: try again later.
    #[error("none of the locks was acquired: {}", in_the_way_words(in_the_way))]
    Blocked {
        /// Every lock in the way, in the order asked for: [`AcquireOutcome::Held`] (with the
        /// holder's lease) or [`AcquireOutcome::Delayed`].
        in_the_way: Vec<AcquireOutcome>,
    },
    /// Waiting would have closed a cycle of owners that wait for each other, each for a name
    /// the next one holds: the wait was refused at once (by the server, or by this client on
    /// a store). Nothing was acquired and nothing the owner holds was released: release what
    /// it holds and try again, or take all its locks at once with
    /// [`acquire_all`](Client::acquire_all), which never waits in a cycle.
    #[error("not waiting: the wait would deadlock ({cycle})")]
    Deadlock {
        /// Who waits for what, as the store's refusal says:
        /// `b waits for lock "x" held by a; a waits for lock "y" held by b`.
        cycle: String,
    },
    /// The cap on holding asked for is no longer than the guard's safety margin: the guard
    /// would give the lease up as soon as it got it. Nothing was sent.
    #[error(
        "a cap on holding of {max_hold:?} leaves nothing to hold: the guard gives a lease up its safety margin ({safety_margin:?}) before the cap"
    )]
    CapTooShort {
        /// The cap asked for.
        max_hold: Duration,
        /// The guard's safety margin for the TTL asked for.
        safety_margin: Duration,
    },
    /// The store (or server) failed or refused the request.
    #[error(transparent)]
    Store(StoreError),
    /// The guard options leave no time to renew a lease of this TTL.
    #[error(transparent)]
    Options(#[from] InvalidGuardOptions),
    /// The lease (of a lock, or of a permit or hold) was granted, but the store refused the
    /// renewal that confirms it to the guard (sent when the grant came late, e.g. after a
    /// wait in line): it expired, was deleted, or passed to another owner before the guard
    /// could start. Nothing is held.
    #[error("the lease on {} (fencing token {}) was lost before it could be confirmed: {reason}", lease.resource, lease.token)]
    LostBeforeConfirmed {
        /// The lease as granted.
        lease: Lease,
        /// What the store's refusal says happened to it.
        reason: LostReason,
    },
}

impl From<Unconfirmed> for AcquireError {
    fn from(Unconfirmed { lease, reason }: Unconfirmed) -> Self {
        Self::LostBeforeConfirmed { lease, reason }
    }
}

impl From<StoreError> for AcquireError {
    /// A deadlock is the caller's to handle (as contention is), not a store failure: it has
    /// a variant of its own.
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Deadlock(cycle) => Self::Deadlock {
                cycle: cycle.to_string(),
            },
            other => Self::Store(other),
        }
    }
}

/// The refusal of a cap on holding that leaves nothing to hold: one no longer than the
/// guard's safety margin, which the guard would give up as soon as it got it.
fn cap_too_short(terms: &Terms, timing: Timing) -> Option<AcquireError> {
    let max_hold = terms.max_hold?.as_duration();
    (max_hold <= timing.margin).then_some(AcquireError::CapTooShort {
        max_hold,
        safety_margin: timing.margin,
    })
}

/// A lock held by another owner, in words.
fn held_words(holder: &Lease, expires_in: Duration) -> String {
    format!(
        "{} is held by {} (fencing token {}) for {expires_in:?} more",
        holder.resource, holder.owner, holder.token
    )
}

/// A lock closed by its lock-delay, in words.
fn delayed_words(resource: &Resource, retry_in: Duration) -> String {
    format!(
        "{resource} is closed for {retry_in:?} more: its last lease expired without a release (lock-delay)"
    )
}

/// Every lock in the way of an [`AcquireError::Blocked`], in words, `; ` between them.
fn in_the_way_words(in_the_way: &[AcquireOutcome]) -> String {
    let words: Vec<String> = in_the_way
        .iter()
        .filter_map(|refusal| match refusal {
            AcquireOutcome::Held { holder, expires_in } => Some(held_words(holder, *expires_in)),
            AcquireOutcome::Delayed { resource, retry_in } => Some(delayed_words(resource, *retry_in)),
            AcquireOutcome::Granted { .. } | AcquireOutcome::Extended(_) => None,
        })
        .collect();
    words.join("; ")
}

/// Why a hold was not granted, in words: `"jobs" has 3 permits of 3 taken (by a, b, c)`.
fn busy_words(name: &Resource, claim: Claim, busy: &Busy) -> String {
    let owners = busy
        .holders
        .iter()
        .map(|h| h.lease.owner.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    match claim {
        Claim::Permit { limit } => {
            format!("the semaphore {name} has all its {limit} permits held (by {owners})")
        }
        Claim::Read if busy.writer_waits && busy.holders.iter().all(|h| !h.claim.is_exclusive()) => {
            format!("a writer waits for the read-write lock {name}: readers that come after it wait too")
        }
        Claim::Read | Claim::Write => {
            let mode = if busy.holders.iter().any(|h| h.claim.is_exclusive()) {
                "write"
            } else {
                "read"
            };
            format!("the read-write lock {name} is held for {mode} (by {owners})")
        }
    }
}

/// What the client talks to.
#[derive(Debug, Clone)]
enum Backend {
    /// A fencelock server: waiting happens on the server, in its line (`wait_ms`).
    Server(Arc<HttpStore>),
    /// A store, with no server: waiting happens here, in line with this client's other
    /// callers.
    Direct(Waiters),
}

/// A handle on a fencelock server or a store, cheap to clone: acquire leases as guards
/// ([`acquire`](Client::acquire), [`try_acquire`](Client::try_acquire),
/// [`acquire_all`](Client::acquire_all) for several locks at once), or make plain
/// calls ([`get`](Client::get), [`list`](Client::list), [`release`](Client::release),
/// [`renew`](Client::renew)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use fencelock_client::{AcquireError, Ttl, connect};
///
/// let client = connect("memory://").await?;
/// let (resource, ttl) = ("payment:42".parse()?, Ttl::from_millis(30_000, Ttl::DEFAULT_MAX)?);
/// let guard = client.try_acquire(&resource, &"worker-7".parse()?, ttl).await?;
///
/// // Another owner does not get it, and learns who has it.
/// match client.try_acquire(&resource, &"worker-8".parse()?, ttl).await {
///     Err(AcquireError::Busy { holder, .. }) => assert_eq!(holder.token, guard.token()),
///     other => panic!("expected busy, got {other:?}"),
/// }
/// assert_eq!(client.get(&resource).await?.map(|l| l.token), Some(guard.token()));
/// guard.release().await?;
/// assert_eq!(client.get(&resource).await?, None);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    store: Arc<dyn LockStore>,
    backend: Backend,
    guard_options: GuardOptions,
}

/// A client for `address`:
///
/// - `http://HOST:PORT` or `https://HOST:PORT`: a fencelock server (see [`HttpStore`]);
///   nothing is sent until the first call;
/// - with the `direct` feature (on by default), any store address (`sqlite://PATH`,
///   `memory://`, …; see `fencelock_stores::open`): that store, straight, with no server. Waiting for a busy lock is then first come, first
///   served among this client's callers only, and wakes when the holder's lease ends or it
///   is released through this process.
///
/// For a server, the bearer token is read from [`AUTH_TOKEN_VAR`] (`FENCELOCK_AUTH_TOKEN`)
/// and the CAs to trust from the PEM file [`CACERT_VAR`] (`FENCELOCK_CACERT`) names, where
/// they are set, as the commands read them; [`connect_with`] takes them in code instead.
///
/// Must be called within a Tokio runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let direct = fencelock_client::connect("memory://").await?;
/// let server = fencelock_client::connect("http://127.0.0.1:7070").await?; // no request yet
/// assert!(fencelock_client::connect("ftp://x").await.is_err());
/// # Ok(())
/// # }
/// ```
pub async fn connect(address: &str) -> Result<Client, ConnectError> {
    let options = if is_server(address) {
        options_from(|name| std::env::var_os(name))?
    } else {
        HttpOptions::default()
    };
    connect_with(address, options).await
}

/// Whether `address` is a fencelock server's (`http://`, `https://`) rather than a store's.
fn is_server(address: &str) -> bool {
    address.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
    })
}

/// The environment variable [`connect`] reads the bearer token from, as the commands do.
pub const AUTH_TOKEN_VAR: &str = "FENCELOCK_AUTH_TOKEN";

/// The environment variable [`connect`] reads the path of the CAs to trust from (PEM), as
/// the commands do.
pub const CACERT_VAR: &str = "FENCELOCK_CACERT";

/// The default [`HttpOptions`], with the token of [`AUTH_TOKEN_VAR`] and the CAs of the file
/// [`CACERT_VAR`] names, where `env` has them set (as Consul's client reads
/// `CONSUL_HTTP_TOKEN`).
fn options_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<HttpOptions, ConnectError> {
    let var = |name: &'static str| env(name).filter(|v| !v.is_empty());
    let invalid = |variable: &'static str, message: String| ConnectError::Environment { variable, message };
    let auth_token = var(AUTH_TOKEN_VAR)
        .map(|token| {
            let token = token
                .to_str()
                .ok_or_else(|| invalid(AUTH_TOKEN_VAR, "is not UTF-8".into()))?;
            token
                .parse()
                .map_err(|e: crate::InvalidAuthToken| invalid(AUTH_TOKEN_VAR, e.to_string()))
        })
        .transpose()?;
    let ca_certificates = var(CACERT_VAR)
        .map(|path| {
            let pem = std::fs::read(&path)
                .map_err(|e| invalid(CACERT_VAR, format!("cannot read {}: {e}", path.display())))?;
            CaCertificates::from_pem(&pem)
                .map_err(|e| invalid(CACERT_VAR, format!("{}: {e}", path.display())))
        })
        .transpose()?;
    Ok(HttpOptions {
        auth_token,
        ca_certificates,
        ..HttpOptions::default()
    })
}

/// [`connect`], with `options` for a server: the CAs to trust for `https://`, a bearer token
/// for a server with authentication on, timeouts (see [`HttpOptions`]). A store address
/// takes no options: they are ignored there (a store has neither TLS nor a server's
/// principals).
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use fencelock_client::{CaCertificates, HttpOptions, connect_with};
///
/// let options = HttpOptions {
///     // The CA that signed the server's certificate (`fencelock serve --tls-cert`).
///     ca_certificates: Some(CaCertificates::from_pem(&std::fs::read("/etc/fencelock/ca.pem")?)?),
///     // As `fencelock auth new-token billing` printed it.
///     auth_token: Some(std::fs::read_to_string("/etc/fencelock/billing.token")?.parse()?),
///     ..HttpOptions::default()
/// };
/// let client = connect_with("https://locks.internal:7070", options).await?;
/// let lease = client.get(&"payment:42".parse()?).await?;
/// # drop(lease);
/// # Ok(())
/// # }
/// ```
pub async fn connect_with(address: &str, options: HttpOptions) -> Result<Client, ConnectError> {
    if is_server(address) {
        return Ok(Client::from_http(HttpStore::with_options(address, options)?));
    }
    #[cfg(feature = "direct")]
    return match fencelock_stores::open(address).await {
        Ok(store) => Ok(Client::from_store(store)),
        Err(OpenError::UnsupportedScheme { address }) => Err(ConnectError::UnsupportedScheme { address }),
        Err(error) => Err(ConnectError::Store(error)),
    };
    #[cfg(not(feature = "direct"))]
    Err(ConnectError::NoDirect {
        address: address.into(),
    })
}

impl Client {
    /// A client of a fencelock server.
    pub fn from_http(store: HttpStore) -> Self {
        let store = Arc::new(store);
        Self {
            store: store.clone(),
            backend: Backend::Server(store),
            guard_options: GuardOptions::default(),
        }
    }

    /// A client straight on `store`, with no server. Must be called within a Tokio runtime.
    pub fn from_store(store: Arc<dyn LockStore>) -> Self {
        Self {
            backend: Backend::Direct(Waiters::new(store.clone())),
            store,
            guard_options: GuardOptions::default(),
        }
    }

    /// The same client, making guards with `options`.
    pub fn with_guard_options(mut self, options: GuardOptions) -> Self {
        self.guard_options = options;
        self
    }

    /// The options guards are made with.
    pub fn guard_options(&self) -> &GuardOptions {
        &self.guard_options
    }

    /// The store underneath (an [`HttpStore`] for a server).
    pub fn store(&self) -> &Arc<dyn LockStore> {
        &self.store
    }

    /// Acquires `resource` for `owner` and keeps the lease renewed until the guard is
    /// released or dropped. If another owner holds it, waits up to `wait` — first come,
    /// first served — and then answers [`AcquireError::Busy`] with the holder (or
    /// [`AcquireError::Delayed`] if a lock-delay keeps it closed). A wait that would close a
    /// cycle of owners waiting for each other is refused at once: [`AcquireError::Deadlock`].
    ///
    /// A grant that comes late (more than a tenth of the TTL after the request was sent) is
    /// renewed at once, so that the guard counts from now and not from before the wait. If
    /// the store refuses that renewal, the lease ended before it could be confirmed:
    /// [`AcquireError::LostBeforeConfirmed`]. If the renewal fails or gets no answer, the
    /// guard counts from the first send, and starts [lost](LostReason::NotRenewed) if only
    /// the safety margin, or less, is left of the lease by then.
    ///
    /// Dropping the future while it waits takes the caller out of line (a server notices the
    /// closed request). A grant already made when the future is dropped is not released: it
    /// ends at its TTL.
    pub async fn acquire(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<LeaseGuard, AcquireError> {
        self.acquire_with(resource, owner, Terms::ttl(ttl), wait).await
    }

    /// [`acquire`](Self::acquire) on `terms`: a TTL and a cap on holding
    /// ([`Terms::max_hold`]), measured from the grant, which no renewal passes. The guard
    /// reports the cap ([`LeaseGuard::hold_until`]) and its [`lost`](LeaseGuard::lost) fires
    /// the safety margin before it ([`LostReason::CapReached`]); a cap no longer than the
    /// margin is refused before anything is sent ([`AcquireError::CapTooShort`]). An owner
    /// that already holds the lease extends it and keeps its cap, whatever it asks.
    ///
    /// The lock-delay of `terms` is kept by a store straight ([`Capabilities::lock_delays`]
    /// says which); a server applies its own (`fencelock serve --lock-delay`) and is not sent
    /// one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use fencelock_client::{Terms, Ttl, connect};
    ///
    /// let client = connect("memory://").await?;
    /// let ttl = Ttl::from_millis(30_000, Ttl::DEFAULT_MAX)?;
    /// // A job of unknown length: renewed every 10 s, but never held past an hour.
    /// let terms = Terms::ttl(ttl).max_hold(Some(Ttl::from_millis(3_600_000, Ttl::DEFAULT_MAX)?));
    /// let guard = client
    ///     .acquire_with(&"reindex".parse()?, &"job-7".parse()?, terms, Duration::ZERO)
    ///     .await?;
    /// let cap = guard.hold_until().expect("the lease has a cap");
    /// assert!(guard.expires_at() <= cap);
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`Capabilities::lock_delays`]: fencelock_core::Capabilities::lock_delays
    pub async fn acquire_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        terms: Terms,
        wait: Duration,
    ) -> Result<LeaseGuard, AcquireError> {
        let timing = self.guard_options.timing(terms.ttl)?;
        if let Some(refused) = cap_too_short(&terms, timing) {
            return Err(refused);
        }
        let (sent, max_hold) = (Instant::now(), terms.max_hold);
        match self.acquire_lease(resource, owner, terms, wait).await? {
            AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease) => {
                let keeper = Keeper::confirm(self.store.clone(), vec![lease], sent, timing, max_hold);
                Ok(LeaseGuard::new(keeper.await?))
            }
            AcquireOutcome::Held { holder, expires_in } => Err(AcquireError::Busy { holder, expires_in }),
            AcquireOutcome::Delayed { resource, retry_in } => {
                Err(AcquireError::Delayed { resource, retry_in })
            }
        }
    }

    /// [`acquire`](Self::acquire) without waiting: one try.
    pub async fn try_acquire(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<LeaseGuard, AcquireError> {
        self.acquire(resource, owner, ttl, Duration::ZERO).await
    }

    /// One acquire on `terms`, waiting up to `wait` if another owner holds the lock, with no
    /// guard: nothing renews or releases the lease (for commands that hand a lease to a
    /// script).
    pub async fn acquire_lease(
        &self,
        resource: &Resource,
        owner: &Owner,
        terms: Terms,
        wait: Duration,
    ) -> Result<AcquireOutcome, StoreError> {
        let terms = &terms;
        self.in_line(
            wait,
            |waiters, wait, never| async move {
                waiters.acquire_unless(resource, owner, terms, wait, &never).await
            },
            |http, left| {
                let terms = terms.clone();
                async move { http.acquire_waiting(resource, owner, terms, left).await }
            },
            |outcome: &AcquireOutcome| outcome.retry_in().is_some(),
        )
        .await
    }

    /// Acquires every lock of `resources` for `owner`, or none, and keeps all the leases
    /// renewed together until the guard is released or dropped — Redisson's `MultiLock`, or
    /// Curator's multi-lock. While some are held by others (or closed by a lock-delay),
    /// waits up to `wait` for all of them at once, holding none meanwhile; then answers
    /// [`AcquireError::Blocked`] with every lock in the way. Two callers taking overlapping
    /// sets never deadlock each other, in whatever order they name them. A lock the owner
    /// already holds is extended (same token) and is part of the guard.
    ///
    /// A grant that comes late is confirmed by a renewal of every lease, as
    /// [`acquire`](Self::acquire) does for one; if the store refuses any of them, the others
    /// are released and the answer is [`AcquireError::LostBeforeConfirmed`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use fencelock_client::{AcquireError, Resource, Resources, Ttl, connect};
    ///
    /// let client = connect("memory://").await?;
    /// let ttl = Ttl::from_millis(30_000, Ttl::DEFAULT_MAX)?;
    /// let (a, b): (Resource, Resource) = ("account:1".parse()?, "account:2".parse()?);
    /// let other = client.try_acquire(&b, &"audit".parse()?, ttl).await?;
    /// // b is held: neither is taken, and the refusal names who holds what.
    /// let both = Resources::new(vec![a.clone(), b.clone()])?;
    /// match client.acquire_all(&both, &"transfer-9".parse()?, ttl, Duration::ZERO).await {
    ///     Err(AcquireError::Blocked { in_the_way }) => assert_eq!(in_the_way.len(), 1),
    ///     other => panic!("expected blocked, got {other:?}"),
    /// }
    /// assert_eq!(client.get(&a).await?, None);
    /// other.release().await?;
    /// let guard = client.acquire_all(&both, &"transfer-9".parse()?, ttl, Duration::ZERO).await?;
    /// assert_eq!(guard.leases().len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<MultiGuard, AcquireError> {
        self.acquire_all_with(resources, owner, Terms::ttl(ttl), wait)
            .await
    }

    /// [`acquire_all`](Self::acquire_all) on `terms`: every lease gets the same TTL and cap
    /// on holding, as [`acquire_with`](Self::acquire_with) gives one lease.
    pub async fn acquire_all_with(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
        wait: Duration,
    ) -> Result<MultiGuard, AcquireError> {
        let timing = self.guard_options.timing(terms.ttl)?;
        if let Some(refused) = cap_too_short(&terms, timing) {
            return Err(refused);
        }
        let (sent, max_hold) = (Instant::now(), terms.max_hold);
        let granted = match self.acquire_all_leases(resources, owner, terms, wait).await? {
            AcquireAllOutcome::Granted(granted) => granted,
            AcquireAllOutcome::Refused(in_the_way) => return Err(AcquireError::Blocked { in_the_way }),
        };
        let leases: Option<Vec<Lease>> = granted.iter().map(|g| g.lease().cloned()).collect();
        let leases = leases
            .filter(|leases| leases.len() == resources.as_slice().len())
            .ok_or_else(|| {
                StoreError::Corrupt(format!("a grant of every lock lacks some of them: {granted:?}"))
            })?;
        let keeper = Keeper::confirm(self.store.clone(), leases, sent, timing, max_hold);
        Ok(MultiGuard::new(keeper.await?))
    }

    /// One acquire of every lock of `resources` or none, waiting up to `wait` for all of
    /// them at once, with no guard.
    async fn acquire_all_leases(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
        wait: Duration,
    ) -> Result<AcquireAllOutcome, StoreError> {
        let terms = &terms;
        self.in_line(
            wait,
            |waiters, wait, never| async move {
                waiters
                    .acquire_all_unless(resources, owner, terms, wait, &never)
                    .await
            },
            |http, left| {
                let terms = terms.clone();
                async move { http.acquire_all_waiting(resources, owner, terms, left).await }
            },
            |outcome: &AcquireAllOutcome| outcome.retry_in().is_some(),
        )
        .await
    }

    /// Acquires one permit of the semaphore `name` of `limit` permits for `owner`, and keeps
    /// it renewed until the guard is released or dropped — as [`acquire`](Self::acquire) does
    /// for a lock, waiting up to `wait` in line while all the permits are held
    /// ([`AcquireError::HoldBusy`]). Every holder of a semaphore asks with the same `limit`:
    /// while permits of another limit are live, the answer is
    /// [`AcquireError::LimitMismatch`]. Each permit has a fencing token of its own.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use fencelock_client::{AcquireError, Ttl, connect};
    ///
    /// let client = connect("memory://").await?;
    /// let (exports, ttl) = ("exports".parse()?, Ttl::from_millis(30_000, Ttl::DEFAULT_MAX)?);
    /// // At most two exports at once.
    /// let one = client.acquire_permit(&exports, &"a".parse()?, 2, ttl, Duration::ZERO).await?;
    /// let two = client.acquire_permit(&exports, &"b".parse()?, 2, ttl, Duration::ZERO).await?;
    /// assert!(two.token() > one.token());
    /// let third = client.acquire_permit(&exports, &"c".parse()?, 2, ttl, Duration::ZERO).await;
    /// assert!(matches!(third, Err(AcquireError::HoldBusy { .. })));
    /// one.release().await?;
    /// let three = client.acquire_permit(&exports, &"c".parse()?, 2, ttl, Duration::ZERO).await?;
    /// assert_eq!(client.holds(fencelock_client::HoldKind::Semaphore, &exports).await?.len(), 2);
    /// # drop((two, three));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_permit(
        &self,
        name: &Resource,
        owner: &Owner,
        limit: u32,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<HoldGuard, AcquireError> {
        self.acquire_claim(name, owner, Claim::Permit { limit }, ttl, None, wait)
            .await
    }

    /// Acquires the read-write lock `name` for reading — shared with other readers — and
    /// keeps the hold renewed until the guard is released or dropped. Waits up to `wait` while
    /// another owner holds it for writing, or a writer waits that came first (writers are not
    /// starved). An owner that holds it for writing is downgraded at once, with a new token.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use fencelock_client::{AcquireError, Ttl, connect};
    ///
    /// let client = connect("memory://").await?;
    /// let (config, ttl) = ("config".parse()?, Ttl::from_millis(30_000, Ttl::DEFAULT_MAX)?);
    /// let reader = client.acquire_read(&config, &"r1".parse()?, ttl, Duration::ZERO).await?;
    /// let other = client.acquire_read(&config, &"r2".parse()?, ttl, Duration::ZERO).await?;
    /// // A writer waits for both readers to be done.
    /// let writer = client.acquire_write(&config, &"w".parse()?, ttl, Duration::ZERO).await;
    /// assert!(matches!(writer, Err(AcquireError::HoldBusy { .. })));
    /// let last_reader = other.token();
    /// reader.release().await?;
    /// other.release().await?;
    /// let writer = client.acquire_write(&config, &"w".parse()?, ttl, Duration::ZERO).await?;
    /// assert!(writer.token() > last_reader);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_read(
        &self,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<HoldGuard, AcquireError> {
        self.acquire_claim(name, owner, Claim::Read, ttl, None, wait)
            .await
    }

    /// Acquires the read-write lock `name` for writing — exclusive — and keeps the hold
    /// renewed until the guard is released or dropped. Waits up to `wait` while other owners
    /// hold it; while it waits, readers that come after it wait too, on every server sharing
    /// the store. An owner that is the only reader is upgraded, with a new token. See
    /// [`acquire_read`](Self::acquire_read).
    pub async fn acquire_write(
        &self,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<HoldGuard, AcquireError> {
        self.acquire_claim(name, owner, Claim::Write, ttl, None, wait)
            .await
    }

    /// Acquires a hold of `claim` — a permit, a read or a write hold — on `name` for `owner`
    /// and keeps it renewed: what [`acquire_permit`](Self::acquire_permit),
    /// [`acquire_read`](Self::acquire_read) and [`acquire_write`](Self::acquire_write) do, for
    /// a claim chosen at run time. A grant that comes late is confirmed by a renewal at once,
    /// as [`acquire`](Self::acquire) does for a lock. The hold has `meta` (an extended one
    /// keeps its own unless `meta` is given).
    pub async fn acquire_claim(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        meta: Option<&Meta>,
        wait: Duration,
    ) -> Result<HoldGuard, AcquireError> {
        let timing = self.guard_options.timing(ttl)?;
        let sent = Instant::now();
        match self.acquire_hold(name, owner, claim, ttl, meta, wait).await? {
            HoldOutcome::Granted { hold, .. } | HoldOutcome::Extended(hold) => {
                let keeper = Keeper::confirm(self.store.clone(), vec![hold], sent, timing, None);
                Ok(LeaseGuard::new(keeper.await?))
            }
            HoldOutcome::Busy(busy) => Err(AcquireError::HoldBusy {
                name: name.clone(),
                claim,
                busy,
            }),
            HoldOutcome::LimitMismatch { limit } => Err(AcquireError::LimitMismatch {
                name: name.clone(),
                limit,
            }),
        }
    }

    /// One acquire of a hold of `claim` on `name`, waiting up to `wait` while it is busy, with
    /// no guard: nothing renews or releases the hold (for commands that hand it to a script).
    /// A permit's limit must be at least 1. A new hold has `meta`; an extended one keeps its
    /// own unless `meta` is given.
    pub async fn acquire_hold(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        meta: Option<&Meta>,
        wait: Duration,
    ) -> Result<HoldOutcome, StoreError> {
        if claim == (Claim::Permit { limit: 0 }) {
            return Err(StoreError::Invalid(
                "a semaphore's limit must be at least 1".into(),
            ));
        }
        self.in_line(
            wait,
            |waiters, wait, never| async move {
                waiters
                    .acquire_hold_unless(name, owner, claim, ttl, meta, wait, &never)
                    .await
            },
            |http, left| async move {
                http.acquire_hold_waiting(name, owner, claim, ttl, meta, left)
                    .await
            },
            |outcome: &HoldOutcome| matches!(outcome, HoldOutcome::Busy(_)),
        )
        .await
    }

    /// One acquire of any kind, waiting up to `wait`: in line with this client's other
    /// callers through `direct` for a store (nobody cancels its `never`: the caller stops
    /// waiting by dropping the future), or in the server's line through `on_server` for a
    /// server (see [`in_server_line`]; `busy` tells an answer the caller may wait past).
    async fn in_line<O, D, S>(
        &self,
        wait: Duration,
        direct: impl FnOnce(Waiters, Duration, CancellationToken) -> D,
        on_server: impl Fn(Arc<HttpStore>, Duration) -> S,
        busy: impl Fn(&O) -> bool,
    ) -> Result<O, StoreError>
    where
        // Plain closures giving futures, as for `in_server_line`.
        D: Future<Output = Result<Acquired<O>, StoreError>>,
        S: Future<Output = Result<O, StoreError>>,
    {
        let wait = wait.min(fencelock_core::FOREVER);
        match &self.backend {
            Backend::Direct(waiters) => {
                let never = CancellationToken::new();
                Ok(direct(waiters.clone(), wait, never).await?.outcome)
            }
            Backend::Server(http) => in_server_line(wait, busy, |left| on_server(http.clone(), left)).await,
        }
    }

    /// The live permits of a semaphore, or holds of a read-write lock, in token order (empty
    /// if none).
    pub async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>, StoreError> {
        self.store.holds(kind, name).await
    }

    /// One page of the semaphores or read-write locks with live holds, ordered by the bytes
    /// of their names (`query.limit` counts names).
    pub async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage, StoreError> {
        self.store.list_holds(kind, query).await
    }

    /// Releases `owner`'s live permit or hold on `name`; with `token`, only if it is that
    /// hold's. `NotFound` if it has none (never `Forbidden`: an owner holds or not).
    pub async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.store.release_hold(kind, name, owner, token).await
    }

    /// Renews `owner`'s live permit or hold on `name` for `ttl` from now; with `token`, only
    /// if it is that hold's. `meta`, if given, replaces the hold's metadata in the same step.
    pub async fn renew_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome<Hold>, StoreError> {
        self.store
            .renew_hold_with(kind, name, owner, ttl, token, meta)
            .await
    }

    /// The live lease on `resource`, if any.
    pub async fn get(&self, resource: &Resource) -> Result<Option<Lease>, StoreError> {
        self.store.get(resource).await
    }

    /// One page of live leases of locks (never an election's), ordered by the bytes of their
    /// resource names.
    pub async fn list(&self, query: &ListQuery) -> Result<LeasePage, StoreError> {
        match &self.backend {
            // The server keeps elections out of its lists itself.
            Backend::Server(_) => self.store.list(query).await,
            Backend::Direct(_) => self.store.list(&query.clone().past_elections()).await,
        }
    }

    /// Releases `owner`'s live lease on `resource`; with `token`, only if it is that lease's.
    pub async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.store.release(resource, owner, token).await
    }

    /// Renews `owner`'s live lease on `resource` for `ttl` from now; with `token`, only if it
    /// is that lease's.
    pub async fn renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome, StoreError> {
        self.store.renew(resource, owner, ttl, token).await
    }

    /// [`renew`](Self::renew), replacing the lease's metadata with `meta` in the same step
    /// (judged as the renewal is: only the holder, with the right token if one is given).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use fencelock_client::{Meta, RenewOutcome, Terms, Ttl, connect};
    ///
    /// let client = connect("memory://").await?;
    /// let ttl = Ttl::from_millis(30_000, Ttl::DEFAULT_MAX)?;
    /// let (job, me) = ("nightly".parse()?, "worker-7".parse()?);
    /// let meta = |v| Meta::from_value(&v, Meta::DEFAULT_MAX_BYTES);
    /// let terms = Terms::ttl(ttl).meta(Some(meta(serde_json::json!({"step": "load"}))?));
    /// let guard = client.acquire_with(&job, &me, terms, Duration::ZERO).await?;
    /// assert_eq!(guard.lease().meta.as_ref().map(Meta::as_str), Some(r#"{"step":"load"}"#));
    /// let next = meta(serde_json::json!({"step": "index"}))?;
    /// let RenewOutcome::Renewed(lease) = client.renew_with(&job, &me, ttl, Some(guard.token()), &next).await?
    /// else {
    ///     panic!("the holder renews");
    /// };
    /// assert_eq!(lease.meta, Some(next));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn renew_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: &Meta,
    ) -> Result<RenewOutcome, StoreError> {
        self.store
            .renew_with(resource, owner, ttl, token, Some(meta))
            .await
    }

    /// Ends every live lease, permit or hold of `key`, whoever holds it — an administrator's
    /// release (through a server with authentication on, it needs the `admin` right on the
    /// name: else [`StoreError::NotAllowed`]). `NotFound` if nothing was held. A server does
    /// not say which leases it ended: through one, `Released` carries none.
    pub async fn force_release(&self, key: &Key) -> Result<ForceOutcome, StoreError> {
        self.store.force_release(key).await
    }

    /// Whether the server (and its store), or the store, answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.store.ping().await
    }

    /// Campaigns in the election `name` as `candidate` for `ttl`, saying `value` once it
    /// leads (at most [`election::MAX_VALUE_BYTES`] bytes), and keeps the leadership renewed
    /// until the [`Leader`] is resigned or dropped. While another candidate leads, waits up
    /// to `wait` in line, then answers [`AcquireError::Busy`] with the leader's lease
    /// ([`Leadership::of`] reads it). The leader campaigning again keeps its term.
    ///
    /// An election is kept as a lock ([`fencelock_core::election`]): everything
    /// [`acquire_with`](Self::acquire_with) says of waiting and of the guard holds here.
    pub async fn campaign(
        &self,
        name: &Resource,
        candidate: &Owner,
        value: Option<&str>,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<Leader, AcquireError> {
        if value.is_some_and(|value| value.len() > election::MAX_VALUE_BYTES) {
            return Err(AcquireError::Store(StoreError::Invalid(format!(
                "value: at most {} bytes",
                election::MAX_VALUE_BYTES
            ))));
        }
        let terms = Terms::ttl(ttl).meta(Some(election::meta(value, ttl, None)));
        let guard = self
            .acquire_with(&election_lock(name)?, candidate, terms, wait)
            .await?;
        Ok(Leader::new(guard, self.store.clone()))
    }

    /// Who leads the election `name` now, if anyone.
    pub async fn leader(&self, name: &Resource) -> Result<Option<Leadership>, StoreError> {
        let lease = self.store.get(&election_lock(name)?).await?;
        Ok(lease.as_ref().and_then(Leadership::of))
    }

    /// The server's event stream under `prefix`, of `kinds` (a comma list of `lock`,
    /// `semaphore`, `rwlock`, `election`; empty: all), from the next event on; it resumes by
    /// itself after a disconnect ([`HttpStore::events`]). Events come from a server: a
    /// client straight on a store gets [`StoreError::Invalid`].
    pub fn events(&self, prefix: &str, kinds: &str) -> Result<Events, StoreError> {
        self.server()?.events(prefix, kinds)
    }

    /// The election `name`'s stream: its current state (`leader` or `vacant`), then every
    /// change of leader, value or vacancy, in term order; it resumes by itself after a
    /// disconnect ([`HttpStore::observe`]). From a server only, as [`events`](Self::events).
    pub fn observe(&self, name: &Resource) -> Result<Events, StoreError> {
        self.server()?.observe(name)
    }

    fn server(&self) -> Result<&HttpStore, StoreError> {
        match &self.backend {
            Backend::Server(server) => Ok(server),
            Backend::Direct(_) => Err(StoreError::Invalid(
                "events come from a fencelock server: this client works straight on a store".into(),
            )),
        }
    }
}

/// The lock that keeps the election `name`.
fn election_lock(name: &Resource) -> Result<Resource, StoreError> {
    Resource::election(name).map_err(|e| StoreError::Invalid(format!("invalid election name {name:?}: {e}")))
}

/// Waits up to `wait` in a server's line: `attempt(left)` sends one request that the server
/// keeps in line for up to `left`, and `busy` tells an answer that the caller may wait past.
/// The server keeps a request in line for at most its maximum wait, so a longer wait is
/// several requests, each joining the line anew.
async fn in_server_line<O, F>(
    wait: Duration,
    busy: impl Fn(&O) -> bool,
    attempt: impl Fn(Duration) -> F,
) -> Result<O, StoreError>
where
    // A plain closure giving a future, not an async closure: the future must stay `Send`
    // for callers that spawn it, which an async closure's borrow does not yet promise.
    F: Future<Output = Result<O, StoreError>>,
{
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let outcome = attempt(left).await?;
        if !busy(&outcome) || Instant::now() >= deadline {
            return Ok(outcome);
        }
        // Answered early (e.g. the server is shutting down): do not hammer it.
        tokio::time::sleep(Duration::from_millis(100).min(left)).await;
    }
}

/// Runs `f` while holding `resource`, and releases the lease afterwards whatever happens:
/// when `f` returns (an `Ok` or an `Err` of its own), and when it panics (the lease is
/// released, then the panic goes on). If the future is dropped half-way, the guard's drop
/// releases in the background.
///
/// Waits for the lock as long as it takes (like a mutex); to wait less, wrap the call in
/// [`tokio::time::timeout`], or use [`Client::acquire`]. `f` gets the guard: its
/// [`token`](LeaseGuard::token) for every write to the protected resource, and
/// [`lost`](LeaseGuard::lost) to stop in time.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use fencelock_client::{Ttl, connect, with_lock};
///
/// let client = connect("memory://").await?;
/// let ttl = Ttl::from_millis(10_000, Ttl::DEFAULT_MAX)?;
/// let (resource, owner) = ("invoice:7".parse()?, "billing-1".parse()?);
/// let token = with_lock(&client, &resource, &owner, ttl, async |guard| {
///     // ... write to the protected resource, passing guard.token() ...
///     guard.token()
/// })
/// .await?;
/// assert!(token.0 > 0);
/// assert_eq!(client.get(&resource).await?, None, "released afterwards");
/// # Ok(())
/// # }
/// ```
pub async fn with_lock<T>(
    client: &Client,
    resource: &Resource,
    owner: &Owner,
    ttl: Ttl,
    f: impl AsyncFnOnce(&LeaseGuard) -> T,
) -> Result<T, AcquireError> {
    let guard = client
        .acquire(resource, owner, ttl, fencelock_core::FOREVER)
        .await?;
    let outcome = AssertUnwindSafe(f(&guard)).catch_unwind().await;
    match guard.release().await {
        Ok(ReleaseOutcome::Released(_)) => {}
        Ok(outcome) => {
            tracing::warn!(%resource, ?outcome, "the lease was no longer held at the end of with_lock")
        }
        Err(error) => {
            tracing::warn!(%resource, %error, "releasing at the end of with_lock failed; the lease ends at its expiry")
        }
    }
    match outcome {
        Ok(value) => Ok(value),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::ffi::OsString;

    use super::*;

    /// The options [`connect`] would read from an environment of `vars`.
    fn options(vars: &[(&str, OsString)]) -> Result<HttpOptions, ConnectError> {
        let vars: HashMap<&str, OsString> = vars.iter().cloned().collect();
        options_from(|name| vars.get(name).cloned())
    }

    #[test]
    fn connect_reads_the_token_and_the_cas_from_the_environment_as_the_commands_do() {
        let none = options(&[]).unwrap();
        assert!(none.auth_token.is_none() && none.ca_certificates.is_none());
        let empty = options(&[(AUTH_TOKEN_VAR, "".into()), (CACERT_VAR, "".into())]).unwrap();
        assert!(
            empty.auth_token.is_none() && empty.ca_certificates.is_none(),
            "empty is unset"
        );

        let dir = tempfile::tempdir().unwrap();
        let ca = fencelock_testkit::TestCa::new("connect").write(dir.path(), "ca.pem");
        let set = options(&[(AUTH_TOKEN_VAR, "abc123".into()), (CACERT_VAR, ca.into())]).unwrap();
        assert!(set.auth_token.is_some() && set.ca_certificates.is_some());

        let bad_token = options(&[(AUTH_TOKEN_VAR, "a b".into())]).unwrap_err();
        assert!(bad_token.is_bad_address());
        assert!(
            bad_token.to_string().starts_with("FENCELOCK_AUTH_TOKEN: "),
            "{bad_token}"
        );
        let missing = dir.path().join("nowhere.pem");
        let no_file = options(&[(CACERT_VAR, missing.clone().into())]).unwrap_err();
        let message = no_file.to_string();
        assert!(
            message.starts_with("FENCELOCK_CACERT: cannot read ") && message.contains("nowhere.pem"),
            "{message}"
        );
    }
}
