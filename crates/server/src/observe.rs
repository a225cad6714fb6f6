//! [`observe`]: after every call to the store, one call that counts it and writes its log
//! lines, whatever the operation and its outcome.

use std::time::Duration;

use fencelock_core::{
    AcquireOutcome, Acquired, FencingToken, Lease, LeasePage, Owner, ReleaseOutcome, RenewOutcome, Resource,
    StoreError,
};
use fencelock_wire::{Label, Op, Outcome};

use crate::events;
use crate::metrics::Metrics;
use crate::state::App;

/// What a call on a lock asked for, as its log lines tell it.
#[derive(Debug, Clone)]
pub struct Asked {
    /// The resource.
    pub resource: Resource,
    /// Who asked.
    pub owner: Owner,
    /// The token the caller sent, if any.
    pub token: Option<FencingToken>,
}

/// An outcome with the log lines (and lease metrics) it is recorded with.
pub trait Observed: Outcome {
    /// What the log lines need to know of the request besides the outcome.
    type Asked;

    /// Writes the log lines of this outcome of `op`, which took `took`.
    fn record(&self, op: Op, asked: &Self::Asked, took: Duration, metrics: &Metrics);
}

/// Counts a call to the store and writes its log lines.
pub fn observe<O: Observed>(
    app: &App,
    op: Op,
    asked: &O::Asked,
    outcome: &Result<O, StoreError>,
    took: Duration,
) {
    let label = match outcome {
        Ok(outcome) => {
            outcome.record(op, asked, took, &app.metrics);
            outcome.label()
        }
        Err(_) => Label::Unavailable,
    };
    app.metrics.observe(op, label, took);
}

impl Observed for AcquireOutcome {
    type Asked = Asked;

    fn record(&self, op: Op, asked: &Asked, took: Duration, metrics: &Metrics) {
        match self {
            Self::Granted { lease, expired } => {
                if let Some(expired) = expired {
                    events::expired(expired);
                    metrics.expired(expired);
                }
                events::granted(lease, took);
                metrics.granted(lease);
            }
            Self::Extended(lease) => events::extended(lease),
            Self::Held { holder, .. } => {
                events::refused(op, self.label(), &asked.resource, &asked.owner, Some(holder));
            }
        }
    }
}

/// An acquire through the waiters also counts whether it met another owner's lease.
impl Observed for Acquired {
    type Asked = Asked;

    fn record(&self, op: Op, asked: &Asked, took: Duration, metrics: &Metrics) {
        self.outcome.record(op, asked, took, metrics);
        let held = matches!(self.outcome, AcquireOutcome::Held { .. });
        metrics.contended(self.waited, held);
    }
}

impl Observed for ReleaseOutcome {
    type Asked = Asked;

    fn record(&self, op: Op, asked: &Asked, _: Duration, metrics: &Metrics) {
        match self {
            Self::Released(Some(ended)) => {
                events::released(&ended.lease, ended.held_for());
                metrics.released(Some(ended.held_for()));
            }
            // Only a store in front of another server cannot say which lease it ended.
            Self::Released(None) => {
                events::released_unknown(&asked.resource, &asked.owner, asked.token);
                metrics.released(None);
            }
            Self::NotFound | Self::Forbidden | Self::Conflict => refused(op, self, asked),
        }
    }
}

impl Observed for RenewOutcome {
    type Asked = Asked;

    fn record(&self, op: Op, asked: &Asked, _: Duration, _: &Metrics) {
        match self {
            Self::Renewed(lease) => events::renewed(lease),
            Self::NotFound | Self::Forbidden | Self::Conflict => refused(op, self, asked),
        }
    }
}

fn refused(op: Op, outcome: &impl Outcome, asked: &Asked) {
    events::refused(op, outcome.label(), &asked.resource, &asked.owner, None);
}

/// A get is only counted: reading a lease is no lease event.
impl Observed for Option<Lease> {
    type Asked = ();

    fn record(&self, _: Op, (): &(), _: Duration, _: &Metrics) {}
}

/// A list is only counted.
impl Observed for LeasePage {
    type Asked = ();

    fn record(&self, _: Op, (): &(), _: Duration, _: &Metrics) {}
}
