//! [`observed`]: every call a route makes to the store, timed, then counted and logged
//! ([`observe`]) in one place, whatever the operation and its outcome.

use std::time::Duration;

use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Acquired, FencingToken, ForceOutcome, Hold, HoldOutcome, HoldPage,
    Kind, Lease, LeasePage, Owner, Principal, ReleaseOutcome, RenewOutcome, Resource, Resources, StoreError,
};
use fencelock_wire::{Label, Op, Outcome};
use tokio::time::Instant;

use crate::events::{self, Item};
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

/// An outcome with the log lines, events (and lease metrics) it is recorded with.
pub trait Observed: Outcome {
    /// What the log lines need to know of the request besides the outcome.
    type Asked: Subjects;

    /// Writes the log lines and publishes the events of this outcome of `op` on `kind`,
    /// which took `took`, and counts it in `app`'s metrics.
    fn record(&self, kind: Kind, op: Op, asked: &Self::Asked, took: Duration, app: &App);
}

/// Whom and what a request was about, for the events of a refusal or a deadlock.
pub trait Subjects {
    /// The names asked for.
    fn names(&self) -> &[Resource];
    /// Who asked, if anyone.
    fn asker(&self) -> Option<&Owner>;
}

impl Subjects for Asked {
    fn names(&self) -> &[Resource] {
        std::slice::from_ref(&self.resource)
    }

    fn asker(&self) -> Option<&Owner> {
        Some(&self.owner)
    }
}

impl Subjects for AskedAll {
    fn names(&self) -> &[Resource] {
        self.resources.as_slice()
    }

    fn asker(&self) -> Option<&Owner> {
        Some(&self.owner)
    }
}

/// A force-release waits for nobody.
impl Subjects for Forced {
    fn names(&self) -> &[Resource] {
        std::slice::from_ref(&self.resource)
    }

    fn asker(&self) -> Option<&Owner> {
        None
    }
}

/// A read asks for nothing of its own.
impl Subjects for () {
    fn names(&self) -> &[Resource] {
        &[]
    }

    fn asker(&self) -> Option<&Owner> {
        None
    }
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
            outcome.record(kind, op, asked, took, app);
            outcome.label()
        }
        Err(StoreError::Deadlock(_)) => {
            app.metrics.deadlock(kind);
            if let Some(owner) = asked.asker() {
                events::deadlocked(&app.hub, kind, asked.names(), owner);
            }
            Label::Deadlock
        }
        Err(_) => Label::Unavailable,
    };
    app.metrics.observe(kind, op, label, took);
}

impl Observed for AcquireOutcome {
    type Asked = Asked;

    fn record(&self, kind: Kind, op: Op, asked: &Asked, took: Duration, app: &App) {
        let hub = &app.hub;
        match self {
            Self::Granted { lease, expired } => {
                if let Some(expired) = expired
                    && events::expired(hub, kind, expired)
                {
                    app.metrics.expired(expired);
                }
                events::granted(hub, kind, Item::Lease(lease), took);
                app.metrics.granted(lease);
            }
            Self::Extended(lease) => events::extended(hub, kind, Item::Lease(lease)),
            Self::Held { .. } | Self::Delayed { .. } => {
                log_refusal(kind, op, self, &asked.owner);
                if matches!(self, Self::Delayed { .. }) {
                    app.metrics.lock_delayed();
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

    fn record(&self, kind: Kind, op: Op, asked: &AskedAll, took: Duration, app: &App) {
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
                    outcome.record(kind, op, &asked, took, app);
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
                    app.metrics.lock_delayed();
                }
            }
        }
    }
}

/// A grant of a permit or hold counts as a lease's; one that replaced the owner's hold of
/// the other mode (an upgrade, a downgrade) also ends that hold, as a release would.
impl Observed for HoldOutcome {
    type Asked = Asked;

    fn record(&self, kind: Kind, op: Op, asked: &Asked, took: Duration, app: &App) {
        let hub = &app.hub;
        match self {
            Self::Granted { hold, replaced } => {
                if let Some(old) = replaced {
                    events::replaced(hub, kind, old, &hold.lease);
                    app.metrics
                        .released(Some(hold.lease.acquired_at.since(old.lease.acquired_at)));
                }
                events::granted(hub, kind, Item::Hold(hold), took);
                app.metrics.granted(&hold.lease);
            }
            Self::Extended(hold) => events::extended(hub, kind, Item::Hold(hold)),
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

    fn record(&self, kind: Kind, op: Op, asked: &T::Asked, took: Duration, app: &App) {
        self.outcome.record(kind, op, asked, took, app);
        app.metrics
            .contended(self.waited, self.outcome.is_held(), self.outcome.is_refused());
        if self.waited
            && self.outcome.is_refused()
            && let Some(owner) = asked.asker()
        {
            events::refused_after_wait(&app.hub, kind, asked.names(), owner);
        }
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

    fn record(&self, kind: Kind, op: Op, asked: &Asked, _: Duration, app: &App) {
        match self {
            Self::Released(Some(ended)) => {
                events::released(&app.hub, kind, ended);
                app.metrics.released(Some(ended.held_for()));
            }
            // Only a store in front of another server cannot say which lease it ended.
            Self::Released(None) => {
                events::released_unknown(&app.hub, kind, &asked.resource, &asked.owner, asked.token);
                app.metrics.released(None);
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

    fn record(&self, kind: Kind, _: Op, asked: &Forced, _: Duration, app: &App) {
        let Self::Released(ended) = self else {
            return;
        };
        // Only a store in front of another server cannot say which leases it ended.
        if ended.is_empty() {
            events::force_released_unknown(asked.by.as_ref(), kind, &asked.resource);
        }
        for lease in ended {
            events::force_released(&app.hub, asked.by.as_ref(), kind, lease);
            app.metrics.released(Some(lease.held_for()));
        }
        app.metrics.force_released(kind);
    }
}

/// A renewal of a lease (`L` = [`Lease`]) or of a permit or hold ([`Hold`]).
impl<L: AsLease> Observed for RenewOutcome<L>
where
    Self: Outcome,
{
    type Asked = Asked;

    fn record(&self, kind: Kind, op: Op, asked: &Asked, _: Duration, app: &App) {
        match self {
            Self::Renewed(renewed) => events::renewed(&app.hub, kind, renewed.item()),
            Self::NotFound | Self::Forbidden | Self::Conflict => refused(kind, op, self, asked),
        }
    }
}

/// What a renewal renewed: a lease, or a hold.
pub trait AsLease {
    /// It, as an event tells it.
    fn item(&self) -> Item<'_>;
}

impl AsLease for Lease {
    fn item(&self) -> Item<'_> {
        Item::Lease(self)
    }
}

impl AsLease for Hold {
    fn item(&self) -> Item<'_> {
        Item::Hold(self)
    }
}

fn refused(kind: Kind, op: Op, outcome: &impl Outcome, asked: &Asked) {
    events::refused(kind, op, outcome.label(), &asked.resource, &asked.owner, None);
}

/// A get is only counted: reading a lease is no lease event.
impl Observed for Option<Lease> {
    type Asked = ();

    fn record(&self, _: Kind, _: Op, (): &(), _: Duration, _: &App) {}
}

/// A get of a semaphore's permits or a read-write lock's holds is only counted.
impl Observed for Vec<Hold> {
    type Asked = ();

    fn record(&self, _: Kind, _: Op, (): &(), _: Duration, _: &App) {}
}

/// A list is only counted.
impl Observed for LeasePage {
    type Asked = ();

    fn record(&self, _: Kind, _: Op, (): &(), _: Duration, _: &App) {}
}

/// A list of semaphores or read-write locks is only counted.
impl Observed for HoldPage {
    type Asked = ();

    fn record(&self, _: Kind, _: Op, (): &(), _: Duration, _: &App) {}
}
