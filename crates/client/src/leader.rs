//! [`Leader`]: a leadership won by [`Client::campaign`](crate::Client::campaign), kept by
//! renewal in the background for as long as it lives, as a [`LeaseGuard`] keeps a lease.
//!
//! An election is kept as a lock ([`fencelock_core::election`]): the leadership is that
//! lock's lease, its term the lease's fencing token. So everything the guard promises of a
//! lease holds of a leadership: [`Leader::lost`] fires before another candidate could win
//! (when renewals failed until only the safety margin is left, or the store says the term is
//! over), and dropping the guard resigns.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fencelock_core::election::Leadership;
use fencelock_core::{FencingToken, LockStore, ReleaseOutcome, RenewOutcome, Resource, StoreError};

use crate::guard::{LeaseGuard, LeaseState, LostReason};

/// A leadership, renewed in the background until [`resign`](Self::resign)ed or dropped.
///
/// ```no_run
/// # async fn lead(client: fencelock_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use fencelock_client::Ttl;
///
/// let ttl = Ttl::from_millis(10_000, Ttl::DEFAULT_MAX)?;
/// let leader = client
///     .campaign(&"scheduler".parse()?, &"node-2".parse()?, Some("10.0.0.2:8080"), ttl, fencelock_core::FOREVER)
///     .await?;
/// // Every write the leader makes carries its term, which the protected resource checks.
/// println!("leading scheduler in term {}", leader.term());
/// tokio::select! {
///     reason = leader.lost() => eprintln!("no longer leader: {reason}"),
///     _ = tokio::time::sleep(Duration::from_secs(60)) => {}
/// }
/// leader.resign().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Leader {
    guard: LeaseGuard,
    /// The store the guard renews on, for proclamations.
    store: Arc<dyn LockStore>,
    /// The value last proclaimed (the guard keeps the lease as it was granted or renewed).
    value: Mutex<Option<String>>,
}

impl Leader {
    /// The leadership `guard` keeps (a guard over an election's lock).
    pub(crate) fn new(guard: LeaseGuard, store: Arc<dyn LockStore>) -> Self {
        let value = fencelock_core::election::value_of(guard.lease().meta.as_ref());
        Self {
            guard,
            store,
            value: Mutex::new(value),
        }
    }

    /// The election's name.
    pub fn name(&self) -> Resource {
        self.leadership().name
    }

    /// The term: the fencing token of this leadership, greater than every term of the
    /// election before. Hand it to whatever the leader writes to.
    pub fn term(&self) -> FencingToken {
        self.guard.token()
    }

    /// The leadership as the store last confirmed it, with the value last proclaimed.
    pub fn leadership(&self) -> Leadership {
        let lease = self.guard.lease();
        let mut leadership = Leadership::of(&lease).expect("a leader's guard keeps the lock of an election");
        leadership.value = self.value().clone();
        leadership
    }

    fn value(&self) -> MutexGuard<'_, Option<String>> {
        self.value.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the leadership is held, in jeopardy (renewals failing) or lost.
    pub fn state(&self) -> LeaseState {
        self.guard.state()
    }

    /// Whether the leader may still count on leading: not lost.
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Completes, with the reason, once the leadership is lost — before another candidate
    /// could win (see [`LeaseGuard::lost`]).
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.guard.lost()
    }

    /// The guard that keeps the leadership's lease: its safety margin, its expiry by this
    /// process's clock.
    pub fn guard(&self) -> &LeaseGuard {
        &self.guard
    }

    /// Says `value` as the leader (e.g. a new address), if this term still leads:
    /// [`RenewOutcome::Renewed`] with the lease that keeps it; otherwise why not — another
    /// term leads ([`RenewOutcome::Conflict`]), another candidate ([`RenewOutcome::Forbidden`]),
    /// nobody ([`RenewOutcome::NotFound`]).
    pub async fn proclaim(&self, value: &str) -> Result<RenewOutcome, StoreError> {
        let meta = self.leadership().meta_with(Some(value), self.guard.ttl());
        let lease = self.guard.lease();
        let outcome = self
            .store
            .renew_with(
                &lease.resource,
                &lease.owner,
                self.guard.ttl(),
                Some(lease.token),
                Some(&meta),
            )
            .await?;
        if matches!(outcome, RenewOutcome::Renewed(_)) {
            *self.value() = Some(value.to_owned());
        }
        Ok(outcome)
    }

    /// Stops renewal and resigns (carrying the term): [`ReleaseOutcome::Released`], or why
    /// not (the term had already ended).
    pub async fn resign(self) -> Result<ReleaseOutcome, StoreError> {
        self.guard.release().await
    }
}
