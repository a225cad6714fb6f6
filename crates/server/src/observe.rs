//! [`observed`]: every call a route makes to the store, timed, then counted and logged
//! ([`observe`]) in one place, whatever the operation and its outcome.

use std::time::Duration;

use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Acquired, FencingToken, ForceOutcome, Hold, HoldOutcome, HoldPage,
    Kind, Lease, LeasePage, Owner, Principal, ReleaseOutcome, RenewOutcome, Resource, Resources, StoreError,
};
use fencelock_wire::{Label, Op, Outcome};
use tokio::time::Instant;

use crate::events;
use crate::metrics::Metrics;
use crate::state::App;

/// What a call on a lease, a permit or a hold asked for, as its log lines tell it.
#[derive(Debug, Clone)]
pub struct Asked {
    /// The resource (the lock's, the semaphore's or the read-write lock's name).
    pub resource: Resource,
    /// Who asked.
    pub owner: Owner,
    /// The token the caller sent, if any.
    pub token: Option<FencingToken>,
}

/// What an acquire of several locks asked for, as its log lines tell it.
#[derive(Debug, Clone)]
pub struct AskedAll {
    /// The locks, all or none.
    pub resources: Resources,
    /// Who asked.
    pub owner: Owner,
}

/// An outcome with the log lines (and lease metrics) it is recorded with.
pub trait Observed: Outcome {
    /// What the log lines need to know of the request besides the outcome.
    type Asked;

    /// Writes the log lines of this outcome of `op` on `kind`, which took `took`.
    fn record(&self, kind: Kind, op: Op, asked: &Self::Asked, took: Duration, metrics: &Metrics);
}

/// Makes `call`, the call to the store of an `op` on `kind` that `asked` tells of, and
/// [`observe`]s it with the time it took.
pub async fn observed<O: Observed>(
    app: &App,
    kind: Kind,
    op: Op,
    asked: &O::Asked,
    call: impl Future<Output = Result<O, StoreError>>,
) -> Result<O, StoreError> {
    let started = Instant::now();
    let outcome = call.await;
    observe(app, kind, op, asked, &outcome, started.elapsed());
    outcome
}

/// Counts a call to the store on `kind` and writes its log lines. A deadlock refused by the
/// waiters is counted here, and logged where it was found.
pub fn observe<O: Observed>(
    app: &App,
    kind: Kind,
    op: Op,
    asked: &O::Asked,
    outcome: &Result<O, StoreError>,
    took: Duration,
) {
    let label = match outcome {
        Ok(outcome) => {
            outcome.record(kind, op, asked, took, &app.metrics);
            outcome.label()
        }
        Err(StoreError::Deadlock(_)) => {
            app.metrics.deadlock(kind);
            Label::Deadlock
        }
        Err(_) => Label::Unavailable,
    };
    app.metrics.observe(kind, op, label, took);
}

impl Observed for AcquireOutcome {
    type Asked = Asked;

    fn record(&self, kind: Kind, op: Op, asked: &Asked, took: Duration, metrics: &Metrics) {
        match self {
            Self::Granted { lease, expired } => {
                if let Some(expired) = expired {
                    events::expired(kind, expired);
                    metrics.expired(expired);
                }
                events::granted(kind, lease, took);
                metrics.granted(lease);
            }
            Self::Extended(lease) => events::extended(kind, lease),
            Self::Held { .. } | Self::Delayed { .. } => {
                log_refusal(kind, op, self, &asked.owner);
                if matches!(self, Self::Delayed { .. }) {
                    metrics.lock_delayed();
                }
            }
        }
    }
}

/// The log line of a lock refused to `owner`: held by another owner, or closed by a
/// lock-delay.
fn log_refusal(kind: Kind, op: Op, refusal: &AcquireOutcome, owner: &Owner) {
    match refusal {
        AcquireOutcome::Held { holder, .. } => {
            events::refused(kind, op, refusal.label(), &holder.resource, owner, Some(holder));
        }
        AcquireOutcome::Delayed { resource, retry_in } => {
            events::delayed(kind, op, resource, owner, *retry_in);
        }
        AcquireOutcome::Granted { .. } | AcquireOutcome::Extended(_) => {}
    }
}

/// Several locks: each grant or extension as a single acquire's; a refusal, one line per lock
/// in the way, counted once as delayed if a lock-delay closed any of them.
impl Observed for AcquireAllOutcome {
    type Asked = AskedAll;

    fn record(&self, kind: Kind, op: Op, asked: &AskedAll, took: Duration, metrics: &Metrics) {
        let owner = &asked.owner;
        match self {
            Self::Granted(granted) => {
                for outcome in granted {
                    let Some(lease) = outcome.lease() else {
                        continue;
                    };
                    let asked = Asked {
                        resource: lease.resource.clone(),
                        owner: owner.clone(),
                        token: None,
                    };
                    outcome.record(kind, op, &asked, took, metrics);
                }
            }
            Self::Refused(refusals) => {
                for refusal in refusals {
                    log_refusal(kind, op, refusal, owner);
                }
                if refusals
                    .iter()
                    .any(|r| matches!(r, AcquireOutcome::Delayed { .. }))
                {
                    metrics.lock_delayed();
                }
            }
        }
    }
}

/// A grant of a permit or hold counts as a lease's; one that replaced the owner's hold of
/// the other mode (an upgrade, a downgrade) also ends that hold, as a release would.
impl Observed for HoldOutcome {
    type Asked = Asked;

    fn record(&self, kind: Kind, op: Op, asked: &Asked, took: Duration, metrics: &Metrics) {
        match self {
            Self::Granted { hold, replaced } => {
                if let Some(old) = replaced {
                    events::replaced(kind, &old.lease, &hold.lease);
                    metrics.released(Some(hold.lease.acquired_at.since(old.lease.acquired_at)));
                }
                events::granted(kind, &hold.lease, took);
                metrics.granted(&hold.lease);
            }
            Self::Extended(hold) => events::extended(kind, &hold.lease),
            Self::Busy(busy) => {
                let holder = busy.holders.first().map(|h| &h.lease);
                events::refused(kind, op, self.label(), &asked.resource, &asked.owner, holder);
            }
            Self::LimitMismatch { .. } => refused(kind, op, self, asked),
        }
    }
}

/// An acquire through the waiters also counts whether it met another owner's lease, permit
/// or hold.
impl<T: Observed + Contended> Observed for Acquired<T> {
    type Asked = T::Asked;

    fn record(&self, kind: Kind, op: Op, asked: &T::Asked, took: Duration, metrics: &Metrics) {
        self.outcome.record(kind, op, asked, took, metrics);
        metrics.contended(self.waited, self.outcome.is_held(), self.outcome.is_refused());
    }
}

/// An acquire's outcome, as contention is counted.
pub trait Contended {
    /// Whether another owner held what was asked for (not granted, not an error).
    fn is_held(&self) -> bool;

    /// Whether it was not granted: held by others, or closed by a lock-delay (not an error).
    fn is_refused(&self) -> bool {
        self.is_held()
    }
}

impl Contended for AcquireOutcome {
    fn is_held(&self) -> bool {
        matches!(self, Self::Held { .. })
    }

    fn is_refused(&self) -> bool {
        matches!(self, Self::Held { .. } | Self::Delayed { .. })
    }
}

/// Held if another owner holds any of the locks.
impl Contended for AcquireAllOutcome {
    fn is_held(&self) -> bool {
        matches!(self, Self::Refused(refusals) if refusals.iter().any(AcquireOutcome::is_held))
    }

    fn is_refused(&self) -> bool {
        matches!(self, Self::Refused(_))
    }
}

impl Contended for HoldOutcome {
    fn is_held(&self) -> bool {
        matches!(self, Self::Busy(_))
    }
}

impl Observed for ReleaseOutcome {
    type Asked = Asked;

    fn record(&self, kind: Kind, op: Op, asked: &Asked, _: Duration, metrics: &Metrics) {
        match self {
            Self::Released(Some(ended)) => {
                events::released(kind, &ended.lease, ended.held_for());
                metrics.released(Some(ended.held_for()));
            }
            // Only a store in front of another server cannot say which lease it ended.
            Self::Released(None) => {
                events::released_unknown(kind, &asked.resource, &asked.owner, asked.token);
                metrics.released(None);
            }
            Self::NotFound | Self::Forbidden | Self::Conflict => refused(kind, op, self, asked),
        }
    }
}

/// What a force-release asked for, as its audit lines tell it.
#[derive(Debug, Clone)]
pub struct Forced {
    /// The name freed.
    pub resource: Resource,
    /// Who asked (nobody, without authentication).
    pub by: Option<Principal>,
}

/// One audit line per lease ended, each counted as released; and the force-release counted.
impl Observed for ForceOutcome {
    type Asked = Forced;

    fn record(&self, kind: Kind, _: Op, asked: &Forced, _: Duration, metrics: &Metrics) {
        let Self::Released(ended) = self else {
            return;
        };
        // Only a store in front of another server cannot say which leases it ended.
        if ended.is_empty() {
            events::force_released_unknown(asked.by.as_ref(), kind, &asked.resource);
        }
        for lease in ended {
            events::force_released(asked.by.as_ref(), kind, lease);
            metrics.released(Some(lease.held_for()));
        }
        metrics.force_released(kind);
    }
}

/// A renewal of a lease (`L` = [`Lease`]) or of a permit or hold ([`Hold`]).
impl<L: AsLease> Observed for RenewOutcome<L>
where
    Self: Outcome,
{
    type Asked = Asked;

    fn record(&self, kind: Kind, op: Op, asked: &Asked, _: Duration, _: &Metrics) {
        match self {
            Self::Renewed(renewed) => events::renewed(kind, renewed.lease()),
            Self::NotFound | Self::Forbidden | Self::Conflict => refused(kind, op, self, asked),
        }
    }
}

/// What a renewal renewed: a lease, or the lease of a hold.
pub trait AsLease {
    /// The lease.
    fn lease(&self) -> &Lease;
}

impl AsLease for Lease {
    fn lease(&self) -> &Lease {
        self
    }
}

impl AsLease for Hold {
    fn lease(&self) -> &Lease {
        &self.lease
    }
}

fn refused(kind: Kind, op: Op, outcome: &impl Outcome, asked: &Asked) {
    events::refused(kind, op, outcome.label(), &asked.resource, &asked.owner, None);
}

/// A get is only counted: reading a lease is no lease event.
impl Observed for Option<Lease> {
    type Asked = ();

    fn record(&self, _: Kind, _: Op, (): &(), _: Duration, _: &Metrics) {}
}

/// A get of a semaphore's permits or a read-write lock's holds is only counted.
impl Observed for Vec<Hold> {
    type Asked = ();

    fn record(&self, _: Kind, _: Op, (): &(), _: Duration, _: &Metrics) {}
}

/// A list is only counted.
impl Observed for LeasePage {
    type Asked = ();

    fn record(&self, _: Kind, _: Op, (): &(), _: Duration, _: &Metrics) {}
}

/// A list of semaphores or read-write locks is only counted.
impl Observed for HoldPage {
    type Asked = ();

    fn record(&self, _: Kind, _: Op, (): &(), _: Duration, _: &Metrics) {}
}
