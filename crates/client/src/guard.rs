//! [`LeaseGuard`]: a lease kept alive in the background, that says as soon as its holder can
//! no longer be sure to hold it.
//!
//! The lease is a lock's ([`Lease`]), or a semaphore's permit or a read-write lock's hold
//! ([`Hold`], guarded by a [`HoldGuard`]): each is a lease of its own with its own token,
//! renewed and released by its owner, so one guard, written once, holds all of them (see
//! [`Held`]).
//!
//! # How the guard counts time
//!
//! The guard never reads the server's wall clock to decide anything: clocks of two machines
//! disagree. It counts on this process's monotonic clock, from the moment each grant or
//! renewal request was **sent**: the store set `expires_at = its now + TTL`, and its now
//! was not before the send, so the lease lasts at least until `send + TTL` (its
//! [`held_until`](LeaseGuard::held_until)). Counting from the answer instead would add the
//! request's whole round trip to the lease: after a slow answer, the guard would believe in
//! a lease that has already passed to someone else.
//!
//! # When it gives up
//!
//! Renewals go out every third of the TTL (by default), and failed ones are retried with
//! a growing pause. The lease is **lost** as soon as:
//! - the store answers a renewal with *not found* (it expired or was deleted), *forbidden*
//!   (another owner holds it) or *conflict* (this owner holds a newer lease); or
//! - renewals have failed until only the **safety margin** is left before `held_until`; or
//! - the grant (or the renewal that confirmed it after a wait) was answered so late that
//!   only the safety margin, or less, was left of it: the guard then starts lost.
//!
//! The margin (by default a fifth of the TTL) is time for the holder to stop working on the
//! protected resource before anyone else can be granted the lock, and it absorbs the
//! drift between this machine's clock rate and the store's (well under 1% on any sane
//! machine). Between the first failed renewal and then, the guard is **in jeopardy**: the
//! lease is still surely held, but the holder should not start anything long.
//!
//! None of this closes the gap that a stopped process cannot see (a pause of the whole
//! process, the guard's task included): that is what fencing tokens are for. Pass
//! [`LeaseGuard::token`] to the protected resource with every write (see [`crate::fence`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Claim, FencingToken, Hold, Kind, Lease, LockStore, Owner, ReleaseOutcome, RenewOutcome, Resource,
    StoreError, Timestamp, Ttl,
};
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout};

/// How a [`LeaseGuard`] renews its lease and when it gives up; every field has a default that
/// depends on the TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardOptions {
    /// How often to renew; default a third of the TTL, so two renewals can fail before the
    /// margin is reached.
    pub renew_every: Option<Duration>,
    /// How long before the last confirmed expiry the lease is declared lost if renewals keep
    /// failing; default a fifth of the TTL.
    pub safety_margin: Option<Duration>,
    /// The longest one renewal request may take (it is also cut short so that it never runs
    /// past the point where the lease is declared lost).
    pub request_timeout: Duration,
}

impl Default for GuardOptions {
    fn default() -> Self {
        Self {
            renew_every: None,
            safety_margin: None,
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// Guard options refused for a TTL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "renewing every {renew_every:?} with a safety margin of {safety_margin:?} leaves no time to renew a lease of {ttl:?}: their sum must be below the TTL"
)]
pub struct InvalidGuardOptions {
    /// The TTL asked for.
    pub ttl: Duration,
    /// How often the guard would renew.
    pub renew_every: Duration,
    /// The safety margin.
    pub safety_margin: Duration,
}

/// [`GuardOptions`] resolved for one TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    pub(crate) ttl: Ttl,
    pub(crate) renew_every: Duration,
    pub(crate) margin: Duration,
    pub(crate) request_timeout: Duration,
}

impl GuardOptions {
    /// The timing of a guard over a lease of `ttl`.
    pub(crate) fn timing(&self, ttl: Ttl) -> Result<Timing, InvalidGuardOptions> {
        let lasts = ttl.as_duration();
        let renew_every = self.renew_every.unwrap_or(lasts / 3);
        let margin = self.safety_margin.unwrap_or(lasts / 5);
        // A renewal must be due before the lease is declared lost, or the guard would only
        // ever run out its first grant.
        if renew_every.is_zero() || renew_every + margin >= lasts {
            return Err(InvalidGuardOptions {
                ttl: lasts,
                renew_every,
                safety_margin: margin,
            });
        }
        Ok(Timing {
            ttl,
            renew_every,
            margin,
            request_timeout: self.request_timeout,
        })
    }
}

/// Where a guard's lease stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseState {
    /// The last renewal (or the grant) succeeded.
    Held,
    /// Renewals are failing, but the lease is surely held until
    /// [`held_until`](LeaseGuard::held_until): finish quickly, start nothing long.
    InJeopardy {
        /// How many renewals failed in a row.
        failures: u32,
        /// Why the last one failed.
        last_error: String,
    },
    /// The holder can no longer be sure it holds the lease: stop working on the resource.
    Lost(LostReason),
}

impl LostReason {
    /// What the store's answer to a renewal says: the renewed lease, or why it is lost.
    pub(crate) fn of_renewal<T>(outcome: RenewOutcome<T>) -> Result<T, Self> {
        match outcome {
            RenewOutcome::Renewed(held) => Ok(held),
            RenewOutcome::NotFound => Err(Self::Gone),
            RenewOutcome::Forbidden => Err(Self::Taken),
            RenewOutcome::Conflict => Err(Self::Superseded),
        }
    }
}

impl LeaseState {
    /// The reason, if the lease is lost.
    pub fn lost_reason(&self) -> Option<&LostReason> {
        match self {
            Self::Lost(reason) => Some(reason),
            Self::Held | Self::InJeopardy { .. } => None,
        }
    }
}

/// Why a guard's lease is lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LostReason {
    /// The store has no live lease on the resource: it expired, or was deleted.
    #[error("the lease is gone: it expired or was deleted")]
    Gone,
    /// Another owner holds the resource now.
    #[error("the lock was taken by another owner")]
    Taken,
    /// This owner holds a newer lease on the resource, with another fencing token.
    #[error("this owner holds a newer lease on the resource")]
    Superseded,
    /// Renewals failed until only the safety margin was left before the last confirmed
    /// expiry, or the lease was confirmed so late that no more than that was left of it.
    #[error("the lease could not be renewed in time: {last_error}")]
    NotRenewed {
        /// Why the last renewal failed.
        last_error: String,
    },
    /// The guard released the lease, or was dropped.
    #[error("the lease was released")]
    Released,
}

/// What a [`LeaseGuard`] holds: a lock's [`Lease`], or a [`Hold`] — a semaphore's permit or a
/// read-write lock's read or write hold. Each is a lease of its own, with its own token, that
/// only its owner renews and releases; they differ only in the store calls that do it.
///
/// Implemented for [`Lease`] and [`Hold`] only (the trait is sealed).
#[async_trait]
pub trait Held: sealed::Sealed + Clone + fmt::Debug + Send + Sync + 'static {
    /// The lease: name, owner, fencing token, `acquired_at`, `expires_at`.
    fn lease(&self) -> &Lease;

    /// The namespace it is held in: a lock, a semaphore or a read-write lock.
    fn kind(&self) -> Kind;

    /// Renews it on `store` to now + `ttl`, carrying its token (so a newer lease or hold of
    /// the same owner is never touched).
    async fn renew(&self, store: &dyn LockStore, ttl: Ttl) -> Result<RenewOutcome<Self>, StoreError>;

    /// Releases it on `store`, carrying its token.
    async fn release(&self, store: &dyn LockStore) -> Result<ReleaseOutcome, StoreError>;
}

mod sealed {
    /// Keeps [`super::Held`] to the two things a store can hold.
    pub trait Sealed {}
    impl Sealed for fencelock_core::Lease {}
    impl Sealed for fencelock_core::Hold {}
}

#[async_trait]
impl Held for Lease {
    fn lease(&self) -> &Lease {
        self
    }

    fn kind(&self) -> Kind {
        Kind::Lock
    }

    async fn renew(&self, store: &dyn LockStore, ttl: Ttl) -> Result<RenewOutcome, StoreError> {
        store
            .renew(&self.resource, &self.owner, ttl, Some(self.token))
            .await
    }

    async fn release(&self, store: &dyn LockStore) -> Result<ReleaseOutcome, StoreError> {
        store.release(&self.resource, &self.owner, Some(self.token)).await
    }
}

#[async_trait]
impl Held for Hold {
    fn lease(&self) -> &Lease {
        &self.lease
    }

    fn kind(&self) -> Kind {
        self.claim.kind().into()
    }

    async fn renew(&self, store: &dyn LockStore, ttl: Ttl) -> Result<RenewOutcome<Hold>, StoreError> {
        let lease = &self.lease;
        store
            .renew_hold(
                self.claim.kind(),
                &lease.resource,
                &lease.owner,
                ttl,
                Some(lease.token),
            )
            .await
    }

    async fn release(&self, store: &dyn LockStore) -> Result<ReleaseOutcome, StoreError> {
        let lease = &self.lease;
        store
            .release_hold(
                self.claim.kind(),
                &lease.resource,
                &lease.owner,
                Some(lease.token),
            )
            .await
    }
}

/// What the renewal task and the guard share.
#[derive(Debug)]
struct Shared<T> {
    store: Arc<dyn LockStore>,
    /// What was granted: its name, owner, token and claim never change (a renewal only moves
    /// its expiry), so renewals and the release are made from it.
    granted: T,
    timing: Timing,
    status: watch::Sender<Status<T>>,
    /// For tests: renewal stops while this is true (see [`LeaseGuard::pause_renewal`]).
    paused: watch::Sender<bool>,
}

#[derive(Debug, Clone)]
struct Status<T> {
    state: LeaseState,
    /// As the store last confirmed it.
    held: T,
    /// The lease is surely live before this moment of this process's monotonic clock.
    held_until: Instant,
}

impl<T: Held> Shared<T> {
    fn status(&self) -> Status<T> {
        self.status.borrow().clone()
    }

    fn lease(&self) -> &Lease {
        self.granted.lease()
    }

    /// The moment the lease is declared lost if no renewal succeeds before.
    fn give_up_at(&self) -> Instant {
        let held_until = self.status.borrow().held_until;
        held_until.checked_sub(self.timing.margin).unwrap_or(held_until)
    }

    fn renewed(&self, held: T, sent: Instant) {
        self.status.send_if_modified(|status| {
            if status.state.lost_reason().is_some() {
                return false;
            }
            status.state = LeaseState::Held;
            status.held = held;
            status.held_until = sent + self.timing.ttl.as_duration();
            true
        });
    }

    fn failed(&self, failures: u32, error: &str) {
        self.status.send_if_modified(|status| {
            if status.state.lost_reason().is_some() {
                return false;
            }
            if failures == 1 {
                let (kind, lease) = (self.granted.kind(), self.lease());
                tracing::warn!(%kind, resource = %lease.resource, error, "lease renewal failed; in jeopardy until renewed");
            }
            status.state = LeaseState::InJeopardy {
                failures,
                last_error: error.to_owned(),
            };
            true
        });
    }

    /// Marks the lease lost (once: the first reason stays). Returns whether this call did.
    fn lose(&self, reason: LostReason) -> bool {
        self.status.send_if_modified(|status| {
            if status.state.lost_reason().is_some() {
                return false;
            }
            if reason != LostReason::Released {
                let (kind, lease) = (self.granted.kind(), self.lease());
                tracing::warn!(%kind, resource = %lease.resource, token = %lease.token, %reason, "lease lost");
            }
            status.state = LeaseState::Lost(reason);
            true
        })
    }
}

/// A lease, renewed in the background for as long as the guard lives: a lock's lease
/// (`LeaseGuard`, the default), or a semaphore's permit or a read-write lock's hold
/// ([`HoldGuard`]).
///
/// Made by [`Client::acquire`](crate::Client::acquire) and
/// [`Client::try_acquire`](crate::Client::try_acquire) for a lock, and by
/// [`Client::acquire_permit`](crate::Client::acquire_permit),
/// [`acquire_read`](crate::Client::acquire_read),
/// [`acquire_write`](crate::Client::acquire_write) and
/// [`acquire_claim`](crate::Client::acquire_claim) for the others. Release it with
/// [`release`](LeaseGuard::release); dropping the guard also stops renewal and releases the
/// lease in the background (if the process exits at once, the release may not be sent, and
/// the lease ends at its expiry). Both carry the fencing token, so a late release never
/// frees a newer lease.
///
/// A guard is not reentrant: acquiring a resource that the same owner already holds
/// extends that lease (same token) and gives a second guard over it; releasing either
/// releases it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use fencelock_client::{LeaseState, Ttl, connect};
///
/// let client = connect("memory://").await?;
/// let ttl = Ttl::from_millis(30_000, Ttl::DEFAULT_MAX)?;
/// let guard = client
///     .acquire(&"report:daily".parse()?, &"cron@host-1".parse()?, ttl, Duration::ZERO)
///     .await?;
/// assert_eq!(guard.state(), LeaseState::Held);
///
/// // Stop working the moment the lease may be lost.
/// let lost = guard.lost();
/// tokio::select! {
///     reason = lost => eprintln!("stopping: {reason}"),
///     () = tokio::time::sleep(Duration::from_millis(10)) => { /* the work */ }
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct LeaseGuard<T: Held = Lease> {
    shared: Arc<Shared<T>>,
    renewal: JoinHandle<()>,
    runtime: Handle,
    released: bool,
}

/// A semaphore's permit or a read-write lock's hold, renewed in the background for as long as
/// the guard lives: a [`LeaseGuard`] over a [`Hold`], with its [`claim`](LeaseGuard::claim).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use fencelock_client::{Claim, Ttl, connect};
///
/// let client = connect("memory://").await?;
/// let ttl = Ttl::from_millis(30_000, Ttl::DEFAULT_MAX)?;
/// let gpus = "gpu-pool".parse()?;
/// let permit = client
///     .acquire_permit(&gpus, &"trainer-1".parse()?, 4, ttl, Duration::ZERO)
///     .await?;
/// assert_eq!(permit.claim(), Claim::Permit { limit: 4 });
/// // Each permit is a lease of its own, with its own fencing token.
/// println!("permit {} of {} on {}", permit.token(), 4, permit.resource());
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
pub type HoldGuard = LeaseGuard<Hold>;

impl<T: Held> LeaseGuard<T> {
    /// Starts keeping `held` alive; `sent` is when the request that granted or last renewed
    /// it was sent, and `failed_renewal` why a renewal tried since then failed, if one was.
    /// Must be called within a Tokio runtime.
    ///
    /// If the point where the guard gives up (the safety margin before `sent + TTL`) has
    /// already passed, the guard starts [lost](LostReason::NotRenewed) and never reports
    /// the lease held.
    pub(crate) fn start(
        store: Arc<dyn LockStore>,
        held: T,
        sent: Instant,
        timing: Timing,
        failed_renewal: Option<String>,
    ) -> Self {
        let status = Status {
            state: LeaseState::Held,
            held: held.clone(),
            held_until: sent + timing.ttl.as_duration(),
        };
        let shared = Arc::new(Shared {
            store,
            granted: held,
            timing,
            status: watch::channel(status).0,
            paused: watch::channel(false).0,
        });
        // The renewal task would notice this too, but only once it runs: until then the
        // guard would say Held over a lease that may already be another owner's, and its
        // holder could start work on the resource.
        if Instant::now() >= shared.give_up_at() {
            let last_error = failed_renewal.unwrap_or_else(|| {
                "the grant was answered too late: only the safety margin, or less, was left of the lease"
                    .into()
            });
            shared.lose(LostReason::NotRenewed { last_error });
        }
        // A lost guard's task ends at once.
        let renewal = tokio::spawn(keep_alive(shared.clone(), sent));
        Self {
            shared,
            renewal,
            runtime: Handle::current(),
            released: false,
        }
    }

    /// The locked resource (the semaphore's or read-write lock's name, for a hold).
    pub fn resource(&self) -> &Resource {
        &self.shared.lease().resource
    }

    /// The owner holding the lease.
    pub fn owner(&self) -> &Owner {
        &self.shared.lease().owner
    }

    /// The fencing token of this lease: pass it to the protected resource with every write.
    pub fn token(&self) -> FencingToken {
        self.shared.lease().token
    }

    /// The namespace of what is held: a lock, a semaphore or a read-write lock.
    pub fn kind(&self) -> Kind {
        self.shared.granted.kind()
    }

    /// The TTL each renewal asks for.
    pub fn ttl(&self) -> Ttl {
        self.shared.timing.ttl
    }

    /// What is held as the store last confirmed it: the [`Lease`], or the [`Hold`].
    pub fn held(&self) -> T {
        self.shared.status().held
    }

    /// The lease as the store last confirmed it (for a hold, its lease).
    pub fn lease(&self) -> Lease {
        self.shared.status.borrow().held.lease().clone()
    }

    /// When the lease ends by the store's clock, as last confirmed (the store's wall clock:
    /// for display and for other processes; the guard itself counts with
    /// [`held_until`](Self::held_until)).
    pub fn expires_at(&self) -> Timestamp {
        self.shared.status.borrow().held.lease().expires_at
    }

    /// The moment, by this process's monotonic clock, before which the lease is surely
    /// live: the send time of the last successful grant or renewal, plus the TTL.
    pub fn held_until(&self) -> std::time::Instant {
        self.shared.status.borrow().held_until.into_std()
    }

    /// The safety margin: the lease is declared lost this long before
    /// [`held_until`](Self::held_until) if renewals keep failing.
    pub fn safety_margin(&self) -> Duration {
        self.shared.timing.margin
    }

    /// Held, in jeopardy, or lost.
    pub fn state(&self) -> LeaseState {
        self.shared.status.borrow().state.clone()
    }

    /// Whether the holder may still count on the lease: held or in jeopardy, not lost.
    pub fn is_held(&self) -> bool {
        self.shared.status.borrow().state.lost_reason().is_none()
    }

    /// Completes, with the reason, once the lease is lost (at once if it already is). The
    /// future owns what it needs: it can be kept after the guard is moved or dropped (it
    /// then completes with [`LostReason::Released`]).
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let mut status = self.shared.status.subscribe();
        async move {
            let reason = status
                .wait_for(|s| s.state.lost_reason().is_some())
                .await
                .ok()
                .and_then(|s| s.state.lost_reason().cloned());
            reason.unwrap_or(LostReason::Released)
        }
    }

    /// Stops renewal and releases the lease (carrying its token), and reports what the
    /// store did: [`ReleaseOutcome::Released`], or why not (the lease had already expired,
    /// been taken, or been superseded).
    pub async fn release(mut self) -> Result<ReleaseOutcome, StoreError> {
        self.released = true;
        self.renewal.abort();
        self.shared.lose(LostReason::Released);
        self.shared.granted.release(&*self.shared.store).await
    }

    /// For tests: stops sending renewals, as if the process had stopped renewing (the
    /// guard still declares the lease lost when the safety margin is reached).
    #[doc(hidden)]
    pub fn pause_renewal(&self) {
        self.shared.paused.send_replace(true);
    }

    /// For tests: undoes [`pause_renewal`](Self::pause_renewal).
    #[doc(hidden)]
    pub fn resume_renewal(&self) {
        self.shared.paused.send_replace(false);
    }
}

impl LeaseGuard<Hold> {
    /// What is held: a permit (with the semaphore's limit), a read hold or a write hold.
    pub fn claim(&self) -> Claim {
        self.shared.granted.claim
    }

    /// The hold as the store last confirmed it.
    pub fn hold(&self) -> Hold {
        self.held()
    }
}

impl<T: Held> Drop for LeaseGuard<T> {
    fn drop(&mut self) {
        self.renewal.abort();
        if self.released {
            return;
        }
        let state = self.state();
        self.shared.lose(LostReason::Released);
        // The store already said the lease is not ours: nothing to release.
        if matches!(
            state,
            LeaseState::Lost(LostReason::Gone | LostReason::Taken | LostReason::Superseded)
        ) {
            return;
        }
        let shared = self.shared.clone();
        // If the runtime has shut down, the task never runs and the lease ends at its
        // expiry, as it would if this process had died.
        self.runtime.spawn(async move {
            let (kind, resource) = (shared.granted.kind(), &shared.lease().resource);
            let release = shared.granted.release(&*shared.store);
            match timeout(shared.timing.request_timeout, release).await {
                Ok(Ok(outcome)) => tracing::debug!(%kind, %resource, ?outcome, "released a dropped guard's lease"),
                Ok(Err(error)) => tracing::warn!(%kind, %resource, %error, "releasing a dropped guard's lease failed; it ends at its expiry"),
                Err(_) => tracing::warn!(%kind, %resource, "releasing a dropped guard's lease timed out; it ends at its expiry"),
            }
        });
    }
}

/// The renewal task: renews every `renew_every` from the last confirmed send, retries
/// failures with a growing pause, and declares the lease lost when the store says so or
/// when only the safety margin is left.
async fn keep_alive<T: Held>(shared: Arc<Shared<T>>, sent: Instant) {
    let timing = shared.timing;
    let first_retry = (timing.renew_every / 8).clamp(Duration::from_millis(5), Duration::from_millis(500));
    let mut next = sent + timing.renew_every;
    let mut retry = first_retry;
    let mut failures = 0;
    let mut last_error = String::from("no renewal was attempted");
    let mut paused = shared.paused.subscribe();
    loop {
        let give_up_at = shared.give_up_at();
        sleep_until(next.min(give_up_at)).await;
        if Instant::now() >= give_up_at {
            shared.lose(LostReason::NotRenewed { last_error });
            return;
        }
        if *paused.borrow_and_update() {
            last_error = "renewal was paused".into();
            tokio::select! {
                _ = paused.wait_for(|p| !*p) => {}
                () = sleep_until(give_up_at) => {}
            }
            continue;
        }
        let sent = Instant::now();
        let renewal = shared.granted.renew(&*shared.store, timing.ttl);
        let limit = timing.request_timeout.min(give_up_at - sent);
        let error = match timeout(limit, renewal).await {
            Ok(Ok(outcome)) => match LostReason::of_renewal(outcome) {
                Ok(held) => {
                    shared.renewed(held, sent);
                    (next, retry, failures) = (sent + timing.renew_every, first_retry, 0);
                    continue;
                }
                Err(reason) => {
                    shared.lose(reason);
                    return;
                }
            },
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {limit:?}"),
        };
        failures += 1;
        tracing::debug!(%error, failures, "lease renewal failed");
        shared.failed(failures, &error);
        last_error = error;
        next = Instant::now() + retry;
        retry = (retry * 2).min(timing.renew_every / 2).max(first_retry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ttl(ms: u64) -> Ttl {
        Ttl::from_millis(ms, Ttl::DEFAULT_MAX).unwrap()
    }

    #[test]
    fn default_timing_renews_every_third_and_gives_up_a_fifth_before_expiry() {
        let timing = GuardOptions::default().timing(ttl(30_000)).unwrap();
        assert_eq!(timing.renew_every, Duration::from_secs(10));
        assert_eq!(timing.margin, Duration::from_secs(6));
    }

    #[tokio::test]
    async fn a_guard_started_past_its_give_up_point_is_lost_at_once() {
        let store = Arc::new(fencelock_core::MemoryStore::new());
        let (resource, owner) = ("r".parse().unwrap(), "a".parse().unwrap());
        let timing = GuardOptions::default().timing(ttl(1_000)).unwrap();
        let lease = match store.acquire(&resource, &owner, timing.ttl).await.unwrap() {
            fencelock_core::AcquireOutcome::Granted { lease, .. } => lease,
            other => panic!("expected a grant, got {other:?}"),
        };
        // As if the grant's request had been sent 900 ms ago: past the give-up point at 800.
        let sent = Instant::now()
            .checked_sub(Duration::from_millis(900))
            .expect("the monotonic clock has run that long");
        let guard = LeaseGuard::start(store, lease, sent, timing, None);
        assert!(!guard.is_held());
        assert!(
            matches!(guard.state(), LeaseState::Lost(LostReason::NotRenewed { .. })),
            "{:?}",
            guard.state()
        );
        let reason = futures_util::FutureExt::now_or_never(guard.lost()).expect("lost() completes at once");
        assert!(reason.to_string().contains("answered too late"), "{reason}");
    }

    #[test]
    fn options_that_leave_no_time_to_renew_are_refused() {
        let options = GuardOptions {
            renew_every: Some(Duration::from_millis(600)),
            safety_margin: Some(Duration::from_millis(400)),
            ..GuardOptions::default()
        };
        assert!(options.timing(ttl(1000)).is_err());
        assert!(options.timing(ttl(1001)).is_ok());
        let zero = GuardOptions {
            renew_every: Some(Duration::ZERO),
            ..GuardOptions::default()
        };
        assert!(zero.timing(ttl(1000)).is_err());
    }
}
