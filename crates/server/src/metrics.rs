//! Prometheus metrics: what a lock operator watches (contention, waits, hold times, expiry).

use std::time::Duration;

use fencelock_wire::{Label, Op};
use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The labels of a request: the operation and its outcome.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub struct OpLabels {
    /// `acquire`, `release`, `renew`, `get`, `list`.
    pub op: Op,
    /// e.g. `granted`, `extended`, `held`, `released`, `not_found`, `forbidden`,
    /// `conflict`, `unavailable`.
    pub outcome: Label,
}

/// Written as `op="…",outcome="…"`, by the names the wire types give them.
impl EncodeLabelSet for OpLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> std::fmt::Result {
        [("op", self.op.as_str()), ("outcome", self.outcome.as_str())].encode(encoder)
    }
}

/// The server's metrics, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<OpLabels, Counter>,
    latency: Family<OpLabels, Histogram>,
    hold: Histogram,
    expired: Counter,
    waiting: Gauge,
}

impl Metrics {
    /// Registers every metric under the `fencelock_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("fencelock");
        let requests = Family::<OpLabels, Counter>::default();
        let latency = Family::<OpLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_1, 2.0, 22))
        });
        let hold = Histogram::new(exponential_buckets(0.001, 2.0, 28));
        let expired = Counter::default();
        let waiting = Gauge::default();
        registry.register(
            "requests",
            "Lock requests by operation and outcome",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time to answer a lock request (acquire includes its wait)",
            latency.clone(),
        );
        registry.register(
            "lease_hold_seconds",
            "How long released leases were held",
            hold.clone(),
        );
        registry.register(
            "leases_expired",
            "Leases that ended by expiry, not release",
            expired.clone(),
        );
        registry.register("waiters", "Acquires waiting for a busy lock now", waiting.clone());
        Self {
            registry,
            requests,
            latency,
            hold,
            expired,
            waiting,
        }
    }

    /// Counts one answered request and how long it took.
    pub fn observe(&self, op: Op, outcome: Label, took: Duration) {
        let labels = OpLabels { op, outcome };
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// Records the hold time of a released lease.
    pub fn held_for(&self, held: Duration) {
        self.hold.observe(held.as_secs_f64());
    }

    /// Counts an expired lease.
    pub fn expired(&self) {
        self.expired.inc();
    }

    /// The Prometheus text exposition, with the waiter gauge set to `waiting`.
    pub fn encode(&self, waiting: usize) -> String {
        self.waiting.set(i64::try_from(waiting).unwrap_or(i64::MAX));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
