//! [`LeaseGuard`]: a lease kept alive in the background, that says as soon as its holder can
//! no longer be sure to hold it.
//!
//! The lease is a lock's ([`Lease`]), or a semaphore's permit or a read-write lock's hold
//! ([`Hold`], guarded by a [`HoldGuard`]): each is a lease of its own with its own token,
//! renewed and released by its owner, so one guard, written once, holds all of them (see
//! [`Held`]). Several locks taken together are held by one [`MultiGuard`].
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
//! - the lease has a **cap on holding** (`hold_until`) and only the safety margin is left
//!   before it ([`LostReason::CapReached`]): the store cuts every renewal at the cap, so the
//!   guard counts the cap as the lease's end; or
//! - the grant (or the renewal that confirmed it after a wait) was answered so late that
//!   only the safety margin, or less, was left of it: the guard then starts lost.
//!
//! The cap is a time on the store's clock; the guard places it on its own from the store's
//! answers, never later than it can be: measured from the send of the grant (whose
//! `acquired_at` is when the cap's count began), and from each renewal not cut at the cap
//! (`hold_until - expires_at + TTL` from its send). A store that keeps no cap (a server
//! that ignores `max_hold_ms`) gets the one asked for kept by the guard, from the grant's
//! send.
//!
//! A [`MultiGuard`] keeps several leases in one schedule: each round renews all of them at
//! once, its `held_until` is that of the first to end, and it is lost as soon as any one is.
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
use futures_util::future::join_all;
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
    /// The lease reached its cap on holding ([`Terms::max_hold`](fencelock_core::Terms::max_hold)):
    /// no renewal can keep it longer, and only the safety margin is left before the cap.
    #[error("the lease reached its cap on holding: no renewal can keep it longer")]
    CapReached,
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

/// One lease a guard keeps, as the store last confirmed it, and how long it surely lasts by
/// this process's monotonic clock.
#[derive(Debug, Clone)]
pub(crate) struct Kept<T> {
    held: T,
    /// The lease is surely live before this: the send of its last confirmed grant or
    /// renewal plus the TTL, cut at its cap.
    until: Instant,
    /// Where its cap on holding falls on this clock, as far as the store's answers show (a
    /// bound that is never later than the store's own `hold_until`); `None`: no cap.
    cap: Option<Instant>,
}

impl<T: Held> Kept<T> {
    /// `held` as granted (or extended) by a request sent at `sent` that asked for `ttl` and
    /// `max_hold`.
    pub(crate) fn granted(held: T, sent: Instant, ttl: Ttl, max_hold: Option<Ttl>) -> Self {
        let lease = held.lease();
        let cap = match lease.hold_until {
            // The store measured the cap from `acquired_at` (a grant, or an extension that
            // kept an earlier cap), which it set to its now: not before the send.
            Some(hold_until) => Some(sent + hold_until.since(lease.acquired_at)),
            // A store that keeps no cap (e.g. a server that ignores `max_hold_ms`): the guard
            // keeps the one asked for itself, so the holder never counts on more.
            None => max_hold.map(|cap| sent + cap.as_duration()),
        };
        Self {
            until: cut(sent + ttl.as_duration(), cap),
            cap,
            held,
        }
    }

    /// Takes in `held`, renewed for `ttl` by a request sent at `sent`.
    pub(crate) fn renewed(&mut self, held: T, sent: Instant, ttl: Ttl) {
        let lease = held.lease();
        if let Some(hold_until) = lease.hold_until
            && lease.expires_at < hold_until
        {
            // Not cut at the cap: the store renewed at `expires_at - ttl`, not before the
            // send, so the cap is at least this far from the send. After a long wait this is
            // far closer than the bound from the grant's send.
            let cap = sent + ttl.as_duration() + hold_until.since(lease.expires_at);
            self.cap = Some(self.cap.map_or(cap, |known| known.max(cap)));
        }
        self.until = cut(sent + ttl.as_duration(), self.cap);
        self.held = held;
    }

    fn capped(&self) -> bool {
        self.cap == Some(self.until)
    }
}

/// `until`, or the cap if that comes first.
fn cut(until: Instant, cap: Option<Instant>) -> Instant {
    cap.map_or(until, |cap| until.min(cap))
}

/// What the renewal task and the guard share.
#[derive(Debug)]
struct Shared<T> {
    store: Arc<dyn LockStore>,
    /// What was granted, in the order asked: names, owner, tokens and claims never change
    /// (a renewal only moves an expiry), so renewals and releases are made from them.
    granted: Vec<T>,
    timing: Timing,
    status: watch::Sender<Status<T>>,
    /// For tests: renewal stops while this is true (see [`LeaseGuard::pause_renewal`]).
    paused: watch::Sender<bool>,
}

#[derive(Debug, Clone)]
struct Status<T> {
    state: LeaseState,
    /// Each lease, in the order granted.
    kept: Vec<Kept<T>>,
    /// The lease the store said is lost (gone, taken, superseded), if one is.
    lost_on: Option<usize>,
}

impl<T> Status<T> {
    /// The lease that ends first by this process's clock: the guard's end is its end.
    fn first_to_end(&self) -> &Kept<T> {
        let mut kept = self.kept.iter();
        let first = kept.next().expect("a guard keeps at least one lease");
        kept.fold(first, |first, k| if k.until < first.until { k } else { first })
    }
}

impl<T: Held> Shared<T> {
    fn lease(&self) -> &Lease {
        self.granted[0].lease()
    }

    /// The names of the leases, for log lines.
    fn names(&self) -> String {
        let names: Vec<&str> = self.granted.iter().map(|g| g.lease().resource.as_str()).collect();
        names.join(", ")
    }

    /// The moment the guard gives up if no renewal succeeds before: the safety margin before
    /// the first lease ends.
    fn give_up_at(&self) -> Instant {
        let until = self.status.borrow().first_to_end().until;
        until.checked_sub(self.timing.margin).unwrap_or(until)
    }

    /// Why the guard gives up when the give-up point comes: the cap, if it is what ends the
    /// first lease to end (no renewal could have moved it), else failed renewals.
    fn give_up_reason(&self, last_error: String) -> LostReason {
        if self.status.borrow().first_to_end().capped() {
            LostReason::CapReached
        } else {
            LostReason::NotRenewed { last_error }
        }
    }

    /// Takes in a round of renewals sent at `sent`: each lease renewed, or `None` where its
    /// renewal failed. Held again if every one was renewed.
    fn renewed(&self, renewed: Vec<Option<T>>, sent: Instant) {
        self.status.send_if_modified(|status| {
            if status.state.lost_reason().is_some() {
                return false;
            }
            let all = renewed.iter().all(Option::is_some);
            for (kept, held) in status.kept.iter_mut().zip(renewed) {
                if let Some(held) = held {
                    kept.renewed(held, sent, self.timing.ttl);
                }
            }
            if all {
                status.state = LeaseState::Held;
            }
            true
        });
    }

    fn failed(&self, failures: u32, error: &str) {
        self.status.send_if_modified(|status| {
            if status.state.lost_reason().is_some() {
                return false;
            }
            if failures == 1 {
                let (kind, resource) = (self.granted[0].kind(), self.names());
                tracing::warn!(%kind, resource, error, "lease renewal failed; in jeopardy until renewed");
            }
            status.state = LeaseState::InJeopardy {
                failures,
                last_error: error.to_owned(),
            };
            true
        });
    }

    /// Marks the guard lost (once: the first reason stays), because of the lease at `on` if
    /// the store said that one is lost. Returns whether this call did.
    fn lose(&self, reason: LostReason, on: Option<usize>) -> bool {
        self.status.send_if_modified(|status| {
            if status.state.lost_reason().is_some() {
                return false;
            }
            if reason != LostReason::Released {
                let kind = self.granted[0].kind();
                match on {
                    Some(at) => {
                        let lease = self.granted[at].lease();
                        tracing::warn!(%kind, resource = %lease.resource, token = %lease.token, %reason, "lease lost");
                    }
                    None => tracing::warn!(%kind, resource = self.names(), %reason, "lease lost"),
                }
            }
            status.state = LeaseState::Lost(reason);
            status.lost_on = on;
            true
        })
    }

    /// Releases every lease (carrying its token), all at once, in the order granted.
    async fn release_all(&self) -> Vec<Result<ReleaseOutcome, StoreError>> {
        join_all(self.granted.iter().map(|held| held.release(&*self.store))).await
    }
}

/// A lease granted, and lost before [`Keeper::confirm`] could confirm it: the store refused
/// the renewal sent after a late grant. An acquire answers it as
/// [`AcquireError::LostBeforeConfirmed`](crate::AcquireError::LostBeforeConfirmed).
#[derive(Debug)]
pub(crate) struct Unconfirmed {
    /// The lease as granted.
    pub(crate) lease: Lease,
    /// What the store's refusal says happened to it.
    pub(crate) reason: LostReason,
}

/// What every guard is: leases, one renewal task over all of them, and a release when it is
/// dropped.
#[derive(Debug)]
pub(crate) struct Keeper<T: Held> {
    shared: Arc<Shared<T>>,
    renewal: JoinHandle<()>,
    runtime: Handle,
    released: bool,
}

impl<T: Held> Keeper<T> {
    /// Starts keeping `kept` alive (at least one lease); `sent` is when the last request that
    /// granted or renewed them was sent (renewals go out from then on), and `failed_renewal`
    /// why a renewal tried since the grant failed, if one did. Must be called within a Tokio
    /// runtime.
    ///
    /// If the point where the guard gives up (the safety margin before the first lease ends)
    /// has already passed, the guard starts lost and never reports the leases held.
    pub(crate) fn start(
        store: Arc<dyn LockStore>,
        kept: Vec<Kept<T>>,
        sent: Instant,
        timing: Timing,
        failed_renewal: Option<String>,
    ) -> Self {
        let shared = Arc::new(Shared {
            store,
            granted: kept.iter().map(|k| k.held.clone()).collect(),
            timing,
            status: watch::channel(Status {
                state: LeaseState::Held,
                kept,
                lost_on: None,
            })
            .0,
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
            shared.lose(shared.give_up_reason(last_error), None);
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

    /// Starts keeping `held` (at least one lease), granted by a request sent at `sent` that
    /// asked for `max_hold`. A grant that came late (more than a tenth of the TTL after the
    /// send, e.g. after a wait in line) is renewed at once, so that the guard counts from
    /// that renewal and not from before the wait. If the store refuses one of those
    /// renewals, that lease ended before it could be confirmed: the others are given back
    /// (all or none) and the answer is [`Unconfirmed`].
    pub(crate) async fn confirm(
        store: Arc<dyn LockStore>,
        held: Vec<T>,
        sent: Instant,
        timing: Timing,
        max_hold: Option<Ttl>,
    ) -> Result<Self, Unconfirmed> {
        let ttl = timing.ttl;
        let mut kept: Vec<Kept<T>> = held
            .iter()
            .map(|h| Kept::granted(h.clone(), sent, ttl, max_hold))
            .collect();
        if sent.elapsed() <= ttl.as_duration() / 10 {
            return Ok(Self::start(store, kept, sent, timing, None));
        }
        let resent = Instant::now();
        let limit = timing.request_timeout;
        let answers = join_all(held.iter().map(|h| timeout(limit, h.renew(&*store, ttl)))).await;
        let (mut failed, mut lost) = (None, None);
        for (at, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(Ok(outcome)) => match LostReason::of_renewal(outcome) {
                    Ok(renewed) => kept[at].renewed(renewed, resent, ttl),
                    // A refusal means the lease is not ours any more (whatever the clock
                    // says): a guard over it would hand out the token of another owner's lock.
                    Err(reason) => lost = lost.or(Some((at, reason))),
                },
                Ok(Err(error)) => failed = failed.or_else(|| Some(error.to_string())),
                Err(_) => failed = failed.or_else(|| Some(format!("no answer within {limit:?}"))),
            }
        }
        if let Some((at, reason)) = lost {
            let others = held.iter().enumerate().filter(|(i, _)| *i != at);
            join_all(others.map(|(_, other)| timeout(limit, other.release(&*store)))).await;
            return Err(Unconfirmed {
                lease: held[at].lease().clone(),
                reason,
            });
        }
        // A lease whose renewal failed may still be ours: it counts from the first send, and
        // the guard renews (or gives up) at once.
        let from = if failed.is_some() { sent } else { resent };
        Ok(Self::start(store, kept, from, timing, failed))
    }

    fn state(&self) -> LeaseState {
        self.shared.status.borrow().state.clone()
    }

    fn is_held(&self) -> bool {
        self.shared.status.borrow().state.lost_reason().is_none()
    }

    fn held_until(&self) -> std::time::Instant {
        self.shared.status.borrow().first_to_end().until.into_std()
    }

    fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
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

    /// Stops renewal for good, before a release: the drop then sends nothing.
    fn stop(&mut self) {
        self.released = true;
        self.renewal.abort();
        self.shared.lose(LostReason::Released, None);
    }

    fn pause_renewal(&self) {
        self.shared.paused.send_replace(true);
    }

    fn resume_renewal(&self) {
        self.shared.paused.send_replace(false);
    }
}

impl<T: Held> Drop for Keeper<T> {
    fn drop(&mut self) {
        self.renewal.abort();
        if self.released {
            return;
        }
        // A lease the store already said is not ours (gone, taken, superseded) is not
        // released again; the others are.
        let lost_on = self.shared.status.borrow().lost_on;
        self.shared.lose(LostReason::Released, None);
        if lost_on.is_some() && self.shared.granted.len() == 1 {
            return;
        }
        let shared = self.shared.clone();
        // If the runtime has shut down, the task never runs and the leases end at their
        // expiry, as they would if this process had died.
        self.runtime.spawn(async move {
            let mine = shared.granted.iter().enumerate().filter(|(at, _)| Some(*at) != lost_on);
            join_all(mine.map(|(_, held)| async {
                let (kind, resource) = (held.kind(), &held.lease().resource);
                match timeout(shared.timing.request_timeout, held.release(&*shared.store)).await {
                    Ok(Ok(outcome)) => tracing::debug!(%kind, %resource, ?outcome, "released a dropped guard's lease"),
                    Ok(Err(error)) => tracing::warn!(%kind, %resource, %error, "releasing a dropped guard's lease failed; it ends at its expiry"),
                    Err(_) => tracing::warn!(%kind, %resource, "releasing a dropped guard's lease timed out; it ends at its expiry"),
                }
            }))
            .await;
        });
    }
}

/// A lease, renewed in the background for as long as the guard lives: a lock's lease
/// (`LeaseGuard`, the default), or a semaphore's permit or a read-write lock's hold
/// ([`HoldGuard`]).
///
/// Made by [`Client::acquire`](crate::Client::acquire),
/// [`Client::acquire_with`](crate::Client::acquire_with) and
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
/// A lease with a cap on holding ([`Terms::max_hold`](fencelock_core::Terms::max_hold))
/// cannot be renewed past it: the guard counts the cap as the lease's end, and
/// [`lost`](LeaseGuard::lost) fires its safety margin before it, with
/// [`LostReason::CapReached`].
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
    keeper: Keeper<T>,
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
    /// The guard over the one lease `keeper` keeps.
    pub(crate) fn new(keeper: Keeper<T>) -> Self {
        Self { keeper }
    }

    fn kept(&self) -> Kept<T> {
        self.keeper.shared.status.borrow().kept[0].clone()
    }

    /// The locked resource (the semaphore's or read-write lock's name, for a hold).
    pub fn resource(&self) -> &Resource {
        &self.keeper.shared.lease().resource
    }

    /// The owner holding the lease.
    pub fn owner(&self) -> &Owner {
        &self.keeper.shared.lease().owner
    }

    /// The fencing token of this lease: pass it to the protected resource with every write.
    pub fn token(&self) -> FencingToken {
        self.keeper.shared.lease().token
    }

    /// The namespace of what is held: a lock, a semaphore or a read-write lock.
    pub fn kind(&self) -> Kind {
        self.keeper.shared.granted[0].kind()
    }

    /// The TTL each renewal asks for.
    pub fn ttl(&self) -> Ttl {
        self.keeper.shared.timing.ttl
    }

    /// What is held as the store last confirmed it: the [`Lease`], or the [`Hold`].
    pub fn held(&self) -> T {
        self.kept().held
    }

    /// The lease as the store last confirmed it (for a hold, its lease).
    pub fn lease(&self) -> Lease {
        self.kept().held.lease().clone()
    }

    /// When the lease ends by the store's clock, as last confirmed (the store's wall clock:
    /// for display and for other processes; the guard itself counts with
    /// [`held_until`](Self::held_until)).
    pub fn expires_at(&self) -> Timestamp {
        self.kept().held.lease().expires_at
    }

    /// The lease's cap on holding by the store's clock (`None`: no cap): no renewal keeps it
    /// past this.
    pub fn hold_until(&self) -> Option<Timestamp> {
        self.keeper.shared.lease().hold_until
    }

    /// The moment, by this process's monotonic clock, before which the lease is surely
    /// live: the send time of the last successful grant or renewal plus the TTL, or the cap
    /// on holding if that comes first.
    pub fn held_until(&self) -> std::time::Instant {
        self.keeper.held_until()
    }

    /// The safety margin: the lease is declared lost this long before
    /// [`held_until`](Self::held_until) if renewals keep failing, or if the cap ends it.
    pub fn safety_margin(&self) -> Duration {
        self.keeper.shared.timing.margin
    }

    /// Held, in jeopardy, or lost.
    pub fn state(&self) -> LeaseState {
        self.keeper.state()
    }

    /// Whether the holder may still count on the lease: held or in jeopardy, not lost.
    pub fn is_held(&self) -> bool {
        self.keeper.is_held()
    }

    /// Completes, with the reason, once the lease is lost (at once if it already is). The
    /// future owns what it needs: it can be kept after the guard is moved or dropped (it
    /// then completes with [`LostReason::Released`]).
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.keeper.lost()
    }

    /// Stops renewal and releases the lease (carrying its token), and reports what the
    /// store did: [`ReleaseOutcome::Released`], or why not (the lease had already expired,
    /// been taken, or been superseded).
    pub async fn release(mut self) -> Result<ReleaseOutcome, StoreError> {
        self.keeper.stop();
        let shared = &self.keeper.shared;
        shared.granted[0].release(&*shared.store).await
    }

    /// For tests: stops sending renewals, as if the process had stopped renewing (the
    /// guard still declares the lease lost when the safety margin is reached).
    #[doc(hidden)]
    pub fn pause_renewal(&self) {
        self.keeper.pause_renewal();
    }

    /// For tests: undoes [`pause_renewal`](Self::pause_renewal).
    #[doc(hidden)]
    pub fn resume_renewal(&self) {
        self.keeper.resume_renewal();
    }
}

impl LeaseGuard<Hold> {
    /// What is held: a permit (with the semaphore's limit), a read hold or a write hold.
    pub fn claim(&self) -> Claim {
        self.keeper.shared.granted[0].claim
    }

    /// The hold as the store last confirmed it.
    pub fn hold(&self) -> Hold {
        self.held()
    }
}

/// Several leases held together, renewed in one schedule for as long as the guard lives:
/// the locks [`Client::acquire_all`](crate::Client::acquire_all) took all or none (a
/// `MultiGuard`, over [`Lease`]s), or one guard's lease seen as a set of one
/// ([`MultiGuard::from`] a [`LeaseGuard`], for code that handles one and many alike).
///
/// Each lease keeps its own fencing token: a write to a protected resource carries the token
/// of that resource's lock ([`token`](Self::token)). Every round of renewals renews all of
/// them at once; the guard is [lost](Self::lost) as soon as any one is (the store says it is
/// gone, taken or superseded — [`lost_on`](Self::lost_on) says which —, renewals failed
/// until only the safety margin is left before the first of them ends, or a cap on holding
/// ends one). [`release`](Self::release) and the drop release all of them.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use fencelock_client::{Resource, Resources, Ttl, connect};
///
/// let client = connect("memory://").await?;
/// let ttl = Ttl::from_millis(30_000, Ttl::DEFAULT_MAX)?;
/// let (from, to): (Resource, Resource) = ("account:1".parse()?, "account:2".parse()?);
/// let both = Resources::new(vec![from.clone(), to.clone()])?;
/// let guard = client.acquire_all(&both, &"transfer-9".parse()?, ttl, Duration::ZERO).await?;
/// assert_eq!(guard.len(), 2);
/// assert!(guard.token(&from).is_some() && guard.token(&to).is_some());
/// guard.release().await?;
/// assert_eq!(client.get(&from).await?, None);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MultiGuard<T: Held = Lease> {
    keeper: Keeper<T>,
}

impl<T: Held> From<LeaseGuard<T>> for MultiGuard<T> {
    /// The guard's one lease as a set of one: the same renewal, loss and release.
    fn from(guard: LeaseGuard<T>) -> Self {
        Self { keeper: guard.keeper }
    }
}

impl<T: Held> MultiGuard<T> {
    /// The guard over the leases `keeper` keeps.
    pub(crate) fn new(keeper: Keeper<T>) -> Self {
        Self { keeper }
    }

    /// How many leases the guard holds.
    pub fn len(&self) -> usize {
        self.keeper.shared.granted.len()
    }

    /// Always false: a guard holds at least one lease.
    pub fn is_empty(&self) -> bool {
        self.keeper.shared.granted.is_empty()
    }

    /// The names held, in the order asked for.
    pub fn resources(&self) -> impl Iterator<Item = &Resource> {
        self.keeper
            .shared
            .granted
            .iter()
            .map(|held| &held.lease().resource)
    }

    /// The owner holding the leases.
    pub fn owner(&self) -> &Owner {
        &self.keeper.shared.lease().owner
    }

    /// The namespace of what is held: a lock, a semaphore or a read-write lock.
    pub fn kind(&self) -> Kind {
        self.keeper.shared.granted[0].kind()
    }

    /// The fencing token of the lease on `resource` (`None` if the guard does not hold it):
    /// pass it with every write to what that lock protects.
    pub fn token(&self, resource: &Resource) -> Option<FencingToken> {
        let mut granted = self.keeper.shared.granted.iter().map(Held::lease);
        granted
            .find(|lease| lease.resource == *resource)
            .map(|lease| lease.token)
    }

    /// The TTL each renewal asks for.
    pub fn ttl(&self) -> Ttl {
        self.keeper.shared.timing.ttl
    }

    /// What is held as the store last confirmed it, in the order asked for.
    pub fn held(&self) -> Vec<T> {
        let status = self.keeper.shared.status.borrow();
        status.kept.iter().map(|kept| kept.held.clone()).collect()
    }

    /// The leases as the store last confirmed them, in the order asked for.
    pub fn leases(&self) -> Vec<Lease> {
        self.held().iter().map(|held| held.lease().clone()).collect()
    }

    /// The lease on `resource` as the store last confirmed it (`None` if the guard does not
    /// hold it).
    pub fn lease(&self, resource: &Resource) -> Option<Lease> {
        self.leases()
            .into_iter()
            .find(|lease| lease.resource == *resource)
    }

    /// When the first of the leases ends by the store's clock, as last confirmed (for
    /// display; the guard counts with [`held_until`](Self::held_until)).
    pub fn expires_at(&self) -> Timestamp {
        let leases = self.leases();
        let ends = leases.iter().map(|lease| lease.expires_at);
        ends.min().unwrap_or(Timestamp::EPOCH)
    }

    /// The earliest cap on holding among the leases, by the store's clock (`None`: none has
    /// one).
    pub fn hold_until(&self) -> Option<Timestamp> {
        let granted = self.keeper.shared.granted.iter();
        granted.filter_map(|held| held.lease().hold_until).min()
    }

    /// The moment, by this process's monotonic clock, before which every lease is surely
    /// live (see [`LeaseGuard::held_until`]): that of the first to end.
    pub fn held_until(&self) -> std::time::Instant {
        self.keeper.held_until()
    }

    /// The safety margin: the guard is declared lost this long before
    /// [`held_until`](Self::held_until) if renewals keep failing, or if a cap ends it.
    pub fn safety_margin(&self) -> Duration {
        self.keeper.shared.timing.margin
    }

    /// Held (every lease), in jeopardy (some renewals failing), or lost (one is enough).
    pub fn state(&self) -> LeaseState {
        self.keeper.state()
    }

    /// Whether the holder may still count on every lease: not lost.
    pub fn is_held(&self) -> bool {
        self.keeper.is_held()
    }

    /// The lease the store said is lost — gone, taken or superseded — if that is why the
    /// guard is lost (`None` while held, and when the guard gave up on all of them at once:
    /// renewals failing, a cap, a release).
    pub fn lost_on(&self) -> Option<Resource> {
        let at = self.keeper.shared.status.borrow().lost_on?;
        Some(self.keeper.shared.granted[at].lease().resource.clone())
    }

    /// Completes, with the reason, once any of the leases is lost (at once if one already
    /// is); see [`LeaseGuard::lost`].
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.keeper.lost()
    }

    /// Stops renewal and releases every lease (each carrying its token), all at once, and
    /// reports what the store did with each, in the order asked for. If some release
    /// failed, the first error, once every release has been tried (a lease whose release
    /// failed ends at its expiry).
    pub async fn release(mut self) -> Result<Vec<ReleaseOutcome>, StoreError> {
        self.keeper.stop();
        self.keeper.shared.release_all().await.into_iter().collect()
    }

    /// For tests: stops sending renewals (see [`LeaseGuard::pause_renewal`]).
    #[doc(hidden)]
    pub fn pause_renewal(&self) {
        self.keeper.pause_renewal();
    }

    /// For tests: undoes [`pause_renewal`](Self::pause_renewal).
    #[doc(hidden)]
    pub fn resume_renewal(&self) {
        self.keeper.resume_renewal();
    }
}

/// The renewal task: renews every lease every `renew_every` from the last confirmed send,
/// all at once, retries failures with a growing pause, and declares the guard lost when the
/// store says a lease is, or when only the safety margin is left before the first ends.
async fn keep_alive<T: Held>(shared: Arc<Shared<T>>, sent: Instant) {
    let timing = shared.timing;
    let first_retry = (timing.renew_every / 8).clamp(Duration::from_millis(5), Duration::from_millis(500));
    let several = shared.granted.len() > 1;
    let mut next = sent + timing.renew_every;
    let mut retry = first_retry;
    let mut failures = 0;
    let mut last_error = String::from("no renewal was attempted");
    let mut paused = shared.paused.subscribe();
    loop {
        let give_up_at = shared.give_up_at();
        sleep_until(next.min(give_up_at)).await;
        if Instant::now() >= give_up_at {
            shared.lose(shared.give_up_reason(last_error), None);
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
        let limit = timing.request_timeout.min(give_up_at - sent);
        let renewals = shared
            .granted
            .iter()
            .map(|held| timeout(limit, held.renew(&*shared.store, timing.ttl)));
        let mut renewed = Vec::with_capacity(shared.granted.len());
        let mut error = None;
        for (at, answer) in join_all(renewals).await.into_iter().enumerate() {
            let (failure, timed_out) = match answer {
                Ok(Ok(outcome)) => match LostReason::of_renewal(outcome) {
                    Ok(held) => {
                        renewed.push(Some(held));
                        continue;
                    }
                    Err(reason) => {
                        shared.lose(reason, Some(at));
                        return;
                    }
                },
                Ok(Err(error)) => (error.to_string(), false),
                Err(_) => (format!("no answer within {limit:?}"), true),
            };
            renewed.push(None);
            let name = &shared.granted[at].lease().resource;
            error.get_or_insert(if several {
                (format!("{name}: {failure}"), timed_out)
            } else {
                (failure, timed_out)
            });
        }
        shared.renewed(renewed, sent);
        let Some((error, timed_out)) = error else {
            (next, retry, failures) = (sent + timing.renew_every, first_retry, 0);
            continue;
        };
        failures += 1;
        tracing::debug!(%error, failures, "lease renewal failed");
        shared.failed(failures, &error);
        // A renewal cut short by the give-up point says less than the failure before it (a
        // 503, a refused connection): that one stays the reason given.
        let cut_short = timed_out && limit < timing.request_timeout;
        if failures == 1 || !cut_short {
            last_error = error;
        }
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
        let kept = vec![Kept::granted(lease, sent, timing.ttl, None)];
        let guard = LeaseGuard::new(Keeper::start(store, kept, sent, timing, None));
        assert!(!guard.is_held());
        assert!(
            matches!(guard.state(), LeaseState::Lost(LostReason::NotRenewed { .. })),
            "{:?}",
            guard.state()
        );
        let reason = futures_util::FutureExt::now_or_never(guard.lost()).expect("lost() completes at once");
        assert!(reason.to_string().contains("answered too late"), "{reason}");
    }

    /// A lease granted at `at` (by the store's clock) on `terms`.
    fn lease_at(at: u64, terms: &fencelock_core::Terms) -> Lease {
        let (resource, owner) = ("r".parse().unwrap(), "a".parse().unwrap());
        Lease::granted(
            &resource,
            &owner,
            FencingToken(1),
            Timestamp::from_millis(at),
            terms,
        )
    }

    #[test]
    fn the_cap_is_placed_from_the_grants_send_and_moved_later_by_an_uncut_renewal() {
        let terms = fencelock_core::Terms::ttl(ttl(600)).max_hold(Some(ttl(10_000)));
        let sent = Instant::now();
        // Granted after a wait the guard cannot measure: all it knows is the send.
        let mut kept = Kept::granted(lease_at(50_000, &terms), sent, ttl(600), None);
        assert_eq!(kept.cap, Some(sent + Duration::from_millis(10_000)));
        assert_eq!(kept.until, sent + Duration::from_millis(600));
        // The wait took 3 s: renewed 1 s after the grant by the store's clock, 4 s after the
        // send by ours. 9 s of the cap are left from that renewal's send.
        let renewed =
            lease_at(50_000, &terms).prolonged(Timestamp::from_millis(51_000), ttl(600), false, None);
        let resent = sent + Duration::from_secs(4);
        kept.renewed(renewed, resent, ttl(600));
        assert_eq!(kept.cap, Some(resent + Duration::from_millis(9_000)));
        assert_eq!(kept.until, resent + Duration::from_millis(600));
        assert!(!kept.capped());
        // A renewal cut at the cap says nothing new of it, and ends the lease there.
        let cut = lease_at(50_000, &terms).prolonged(Timestamp::from_millis(59_700), ttl(600), false, None);
        kept.renewed(cut, resent + Duration::from_millis(8_700), ttl(600));
        assert_eq!(kept.cap, Some(resent + Duration::from_millis(9_000)));
        assert_eq!(kept.until, resent + Duration::from_millis(9_000));
        assert!(kept.capped());
    }

    #[test]
    fn a_store_that_keeps_no_cap_gets_the_one_asked_for_kept_by_the_guard() {
        let sent = Instant::now();
        let uncapped = lease_at(1_000, &fencelock_core::Terms::ttl(ttl(600)));
        let kept = Kept::granted(uncapped.clone(), sent, ttl(600), Some(ttl(900)));
        assert_eq!(kept.cap, Some(sent + Duration::from_millis(900)));
        let free = Kept::granted(uncapped, sent, ttl(600), None);
        assert_eq!((free.cap, free.until), (None, sent + Duration::from_millis(600)));
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
