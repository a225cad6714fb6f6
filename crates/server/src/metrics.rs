//! Prometheus metrics: what a lock operator watches (contention, waits, hold times, expiry).
//!
//! Every label value comes from an enum (a kind, an operation, an outcome, a route template, a
//! status code): never a resource or an owner name, which would make one series per lock.
//! The request series say which kind they are about (`kind="lock"`, `"semaphore"`,
//! `"rwlock"`); the lease series (live leases, hold times, expiries, contention, timeouts)
//! count a semaphore's permits and a read-write lock's holds as leases, each its own. Updates
//! are atomics (and prometheus-client's read lock on a family's map); nothing here waits.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::StatusCode;
use fencelock_core::{Call, FencingToken, Kind, Lease};
use fencelock_wire::{Label, Op, ProblemKind};
use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::route::Route;

/// The labels of a request: the kind it is about, the operation and its outcome.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub struct OpLabels {
    /// `lock`, `semaphore`, `rwlock`.
    pub kind: Kind,
    /// `acquire`, `release`, `renew`, `get`, `list`.
    pub op: Op,
    /// e.g. `granted`, `extended`, `held`, `released`, `not_found`, `forbidden`,
    /// `conflict`, `limit_mismatch`, `unavailable`.
    pub outcome: Label,
}

/// Written as `kind="…",op="…",outcome="…"`, by the names the model and the wire types give
/// them.
impl EncodeLabelSet for OpLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> std::fmt::Result {
        [
            ("kind", self.kind.as_str()),
            ("op", self.op.as_str()),
            ("outcome", self.outcome.as_str()),
        ]
        .encode(encoder)
    }
}

/// A label whose values are an enum's names.
trait LabelValue: Copy {
    /// The label's name.
    const KEY: &'static str;
    /// The value's name.
    fn as_str(self) -> &'static str;
}

/// The label set of one [`LabelValue`].
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
struct By<T>(T);

impl<T: LabelValue> EncodeLabelSet for By<T> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> std::fmt::Result {
        [(T::KEY, self.0.as_str())].encode(encoder)
    }
}

/// How a lease ended: `end="released"` or `end="expired"`.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum End {
    /// Its holder released it (or the server gave it back for a client that hung up).
    Released,
    /// Its TTL ran out.
    Expired,
}

impl LabelValue for End {
    const KEY: &'static str = "end";
    fn as_str(self) -> &'static str {
        match self {
            Self::Released => "released",
            Self::Expired => "expired",
        }
    }
}

/// How an acquire met another owner's lease: `kind="held"` or `kind="waited"`.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
enum Contention {
    /// Answered `acquired: false` at once, without waiting.
    Held,
    /// Waited in line, whatever it got in the end.
    Waited,
}

impl LabelValue for Contention {
    const KEY: &'static str = "kind";
    fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Waited => "waited",
        }
    }
}

/// What ran out: `kind="lease_expired"` or `kind="wait_expired"`.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
enum Timeout {
    /// A lease ended by expiry, unreleased.
    LeaseExpired,
    /// A waiting acquire was answered `acquired: false`.
    WaitExpired,
}

impl LabelValue for Timeout {
    const KEY: &'static str = "kind";
    fn as_str(self) -> &'static str {
        match self {
            Self::LeaseExpired => "lease_expired",
            Self::WaitExpired => "wait_expired",
        }
    }
}

/// Why a request was refused before it reached the store: `reason="unauthenticated"`
/// (401), `"denied"` (403, no right) or `"rate_limited"` (429).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
enum Turned {
    Unauthenticated,
    Denied,
    RateLimited,
}

impl Turned {
    /// The reason a problem of `kind` tells, if it is one of these.
    fn of(kind: ProblemKind) -> Option<Self> {
        match kind {
            ProblemKind::Unauthorized => Some(Self::Unauthenticated),
            ProblemKind::Denied => Some(Self::Denied),
            ProblemKind::TooManyRequests => Some(Self::RateLimited),
            _ => None,
        }
    }
}

impl LabelValue for Turned {
    const KEY: &'static str = "reason";
    fn as_str(self) -> &'static str {
        match self {
            Self::Unauthenticated => "unauthenticated",
            Self::Denied => "denied",
            Self::RateLimited => "rate_limited",
        }
    }
}

/// A kind of name, as `force_releases_total{kind="…"}` names it.
impl LabelValue for Kind {
    const KEY: &'static str = "kind";
    fn as_str(self) -> &'static str {
        Kind::as_str(self)
    }
}

/// A call to the store, as `store_*` metrics name it (`op="…"`): an acquire's one try (a
/// waiting acquire makes several), the purge of expired leases, a readiness check, ….
impl LabelValue for Call {
    const KEY: &'static str = "op";
    fn as_str(self) -> &'static str {
        Call::as_str(self)
    }
}

/// The labels of an HTTP request: the route template it matched and the status answered.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
struct HttpLabels {
    route: Route,
    status: StatusCode,
}

/// Written as `route="/locks/{resource}",status="204"`.
impl EncodeLabelSet for HttpLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> std::fmt::Result {
        [("route", self.route.template()), ("status", self.status.as_str())].encode(encoder)
    }
}

/// The server's metrics, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<OpLabels, Counter>,
    latency: Family<OpLabels, Histogram>,
    hold: Family<By<End>, Histogram>,
    expired: Counter,
    contention: Family<By<Contention>, Counter>,
    timeouts: Family<By<Timeout>, Counter>,
    store_latency: Family<By<Call>, Histogram>,
    store_errors: Family<By<Call>, Counter>,
    live: Gauge,
    highest_token: Gauge,
    http: Family<HttpLabels, Counter>,
    waiting: Gauge,
    turned: Family<By<Turned>, Counter>,
    forced: Family<By<Kind>, Counter>,
    deadlocks: Family<By<Kind>, Counter>,
    lock_delays: Counter,
    event_streams: Gauge,
    events_sent: Counter,
    event_streams_cut: Counter,
}

/// Buckets from 100 µs to about 7 minutes: a store call, or an acquire with its wait.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.0, 22))
}

impl Metrics {
    /// Registers every metric under the `fencelock_` prefix.
    pub fn new() -> Self {
        let requests = Family::<OpLabels, Counter>::default();
        let latency = Family::<OpLabels, Histogram>::new_with_constructor(latency_buckets);
        // From 1 ms to about 3 days: leases live up to the maximum TTL (a day by default).
        let hold = Family::<By<End>, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 28))
        });
        let store_latency = Family::<By<Call>, Histogram>::new_with_constructor(latency_buckets);
        let mut m = Self {
            registry: Registry::with_prefix("fencelock"),
            requests,
            latency,
            hold,
            expired: Counter::default(),
            contention: Family::default(),
            timeouts: Family::default(),
            store_latency,
            store_errors: Family::default(),
            live: Gauge::default(),
            highest_token: Gauge::default(),
            http: Family::default(),
            waiting: Gauge::default(),
            turned: Family::default(),
            forced: Family::default(),
            deadlocks: Family::default(),
            lock_delays: Counter::default(),
            event_streams: Gauge::default(),
            events_sent: Counter::default(),
            event_streams_cut: Counter::default(),
        };
        m.registry.register(
            "requests",
            "Requests by kind (lock, semaphore, rwlock), operation and outcome (renewals and releases by result among them)",
            m.requests.clone(),
        );
        m.registry.register(
            "request_duration_seconds",
            "Time to answer a request by kind, operation and outcome; for op=\"acquire\" this is the acquisition time, its wait included",
            m.latency.clone(),
        );
        m.registry.register(
            "lease_hold_seconds",
            "How long leases, permits and holds were held (from acquired_at, the last grant or extension), by how they ended (an upgrade or downgrade ends the hold it replaces as released)",
            m.hold.clone(),
        );
        m.registry.register(
            "leases_expired",
            "Leases, permits and holds that ended by expiry, not release (as timeouts_total{kind=\"lease_expired\"})",
            m.expired.clone(),
        );
        m.registry.register(
            "contention",
            "Acquires (of every kind) that found what they asked for held by other owners: refused at once (held) or waited in line (waited)",
            m.contention.clone(),
        );
        m.registry.register(
            "timeouts",
            "Leases, permits and holds that expired unreleased (lease_expired) and waiting acquires answered without a grant (wait_expired)",
            m.timeouts.clone(),
        );
        m.registry.register(
            "store_duration_seconds",
            "Time of each call to the store, without waiting in line",
            m.store_latency.clone(),
        );
        m.registry.register(
            "store_errors",
            "Calls to the store that failed (unreachable, timed out or failing)",
            m.store_errors.clone(),
        );
        m.registry.register(
            "live_leases",
            "Leases, permits and holds this server granted minus those it saw end (released, given back, replaced, expired); sum over the servers of one store",
            m.live.clone(),
        );
        m.registry.register(
            "highest_token",
            "The highest fencing token this server has granted, of any kind",
            m.highest_token.clone(),
        );
        m.registry.register(
            "http_requests",
            "HTTP requests by route template (other: no route) and status code",
            m.http.clone(),
        );
        m.registry.register(
            "waiters",
            "Acquires waiting now, of every kind",
            m.waiting.clone(),
        );
        m.registry.register(
            "auth_refusals",
            "Requests refused before the store was asked: no or unknown token (unauthenticated, 401), no right on the name (denied, 403), over the principal's rate (rate_limited, 429)",
            m.turned.clone(),
        );
        m.registry.register(
            "force_releases",
            "Force-releases by an administrator that freed a name (each ends every lease, permit or hold on it), by kind",
            m.forced.clone(),
        );
        m.registry.register(
            "deadlocks",
            "Acquires refused with 409 deadlock, by kind (lock, semaphore, rwlock): their wait would have closed a cycle of owners waiting for each other on this server",
            m.deadlocks.clone(),
        );
        m.registry.register(
            "lock_delays",
            "Acquires of locks answered acquired: false because a lock-delay keeps a lock closed (its last lease expired unreleased less than --lock-delay ago); one per request, however many of its locks are closed",
            m.lock_delays.clone(),
        );
        m.registry.register(
            "event_streams",
            "Streams of GET /events open now",
            m.event_streams.clone(),
        );
        m.registry.register(
            "events_sent",
            "Events written to streams of GET /events (one per stream it was sent on; snapshots and resets included)",
            m.events_sent.clone(),
        );
        m.registry.register(
            "event_streams_cut",
            "Streams of GET /events cut off with event: overflow because they fell further behind than their buffer",
            m.event_streams_cut.clone(),
        );
        m
    }

    /// A stream of `GET /events` was opened.
    pub fn event_stream_opened(&self) {
        self.event_streams.inc();
    }

    /// A stream of `GET /events` ended.
    pub fn event_stream_closed(&self) {
        self.event_streams.dec();
    }

    /// An event was written to a stream.
    pub fn event_sent(&self) {
        self.events_sent.inc();
    }

    /// A stream fell too far behind and was cut off.
    pub fn event_stream_cut(&self) {
        self.event_streams_cut.inc();
    }

    /// Counts one answered request on `kind` and how long it took.
    pub fn observe(&self, kind: Kind, op: Op, outcome: Label, took: Duration) {
        let labels = OpLabels { kind, op, outcome };
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// A new lease, permit or hold was granted.
    pub fn granted(&self, lease: &Lease) {
        self.live.inc();
        let FencingToken(token) = lease.token;
        self.highest_token
            .inner()
            .fetch_max(i64::try_from(token).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    /// A lease, permit or hold was released (or replaced); `held` is its hold time, where
    /// the store could tell it.
    pub fn released(&self, held: Option<Duration>) {
        self.live.dec();
        if let Some(held) = held {
            self.held_for(End::Released, held);
        }
    }

    /// A lease, permit or hold ended by expiry.
    pub fn expired(&self, lease: &Lease) {
        self.live.dec();
        self.expired.inc();
        self.timeouts.get_or_create(&By(Timeout::LeaseExpired)).inc();
        self.held_for(End::Expired, lease.expires_at.since(lease.acquired_at));
    }

    fn held_for(&self, end: End, held: Duration) {
        self.hold.get_or_create(&By(end)).observe(held.as_secs_f64());
    }

    /// An acquire ended: it `waited` in line or not, found what it asked for `held` by other
    /// owners or not, and was `refused` (held, or closed by a lock-delay) or granted.
    pub fn contended(&self, waited: bool, held: bool, refused: bool) {
        if waited {
            self.contention.get_or_create(&By(Contention::Waited)).inc();
            if refused {
                self.timeouts.get_or_create(&By(Timeout::WaitExpired)).inc();
            }
        } else if held {
            self.contention.get_or_create(&By(Contention::Held)).inc();
        }
    }

    /// An acquire of `kind` was refused: its wait would have closed a cycle.
    pub fn deadlock(&self, kind: Kind) {
        self.deadlocks.get_or_create(&By(kind)).inc();
    }

    /// An acquire was refused because a lock-delay keeps a lock closed.
    pub fn lock_delayed(&self) {
        self.lock_delays.inc();
    }

    /// One call to the store took `took`, and `failed` or not.
    pub fn store_call(&self, op: Call, took: Duration, failed: bool) {
        self.store_latency
            .get_or_create(&By(op))
            .observe(took.as_secs_f64());
        if failed {
            self.store_errors.get_or_create(&By(op)).inc();
        }
    }

    /// One HTTP request on `route` was answered with `status`, a problem of `problem` if any.
    pub fn http_request(&self, route: Route, status: StatusCode, problem: Option<ProblemKind>) {
        self.http.get_or_create(&HttpLabels { route, status }).inc();
        if let Some(turned) = problem.and_then(Turned::of) {
            self.turned.get_or_create(&By(turned)).inc();
        }
    }

    /// A force-release freed a name of `kind`.
    pub fn force_released(&self, kind: Kind) {
        self.forced.get_or_create(&By(kind)).inc();
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
