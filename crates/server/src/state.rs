//! The state every handler shares: a cheap clonable handle.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::Waiters;
use fencelock_wire::Limits;

use crate::auth::{Gate, Keyring, Limiter, RateLimit};
use crate::hub::{Hub, HubLimits};
use crate::metrics::Metrics;
use crate::tls::Tls;

/// How the server behaves; every field has the SPEC's default.
#[derive(Debug, Clone)]
pub struct Config {
    /// Maximum TTL and `wait_ms`.
    pub limits: Limits,
    /// The largest request body accepted (exactly this many bytes is accepted).
    pub max_body_bytes: usize,
    /// The largest request head (request line and headers) accepted; a larger one is
    /// answered 431 and the connection closed. At least 8192 (hyper's smallest buffer): a
    /// smaller value counts as 8192.
    pub max_header_bytes: usize,
    /// How long a client may take to send a request's headers (and how long an idle
    /// keep-alive connection is kept).
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request's body.
    pub body_read_timeout: Duration,
    /// How many connections are served at once. At the limit, the keep-alive connection idle
    /// the longest is closed to let a new one in (never one serving a request); while none is
    /// idle, more wait in the listen queue.
    pub max_connections: usize,
    /// How many acquires may wait at once (`None`: half of `max_connections`). A waiter holds
    /// its connection while it waits, so the bound keeps connections free for renewals and
    /// releases; an acquire past it is answered at once (`acquired: false`).
    pub max_waiters: Option<usize>,
    /// How often expired leases are purged (and logged as expired).
    pub purge_interval: Duration,
    /// How long in-flight requests get to finish after shutdown is asked.
    pub shutdown_grace: Duration,
    /// The principals and their rights; `None`: no authentication, every caller has every
    /// right (the `serve` command then listens on loopback only).
    pub auth: Option<Keyring>,
    /// The request rate of each principal (of all callers together without `auth`); `None`:
    /// unlimited.
    pub rate_limit: Option<RateLimit>,
    /// HTTPS with this certificate, or plain HTTP (`None`). The handle stays the caller's
    /// too: [`Tls::reload`] on it changes the certificate of new connections.
    pub tls: Option<Tls>,
    /// How long a lock stays closed to everyone after a lease of it **expires** unreleased
    /// (its holder presumed crashed or cut off), so that writes it still had in flight drain
    /// first (whole milliseconds are kept; zero: none). Given to every lock's acquire, and
    /// kept by the store with the lease; a release ends it at once.
    pub lock_delay: Duration,
    /// The event streams of `GET /events`: retention window, buffer per stream, streams per
    /// principal, heartbeat.
    pub events: HubLimits,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_body_bytes: 16_384,
            max_header_bytes: 16_384,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_waiters: None,
            purge_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(3),
            auth: None,
            rate_limit: None,
            tls: None,
            lock_delay: Duration::ZERO,
            events: HubLimits::default(),
        }
    }
}

impl Config {
    /// How many acquires may wait at once.
    pub fn waiter_limit(&self) -> usize {
        self.max_waiters.unwrap_or(self.max_connections / 2)
    }
}

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct App {
    /// The store, with first-come first-served waiting above it.
    pub waiters: Waiters,
    /// The configuration.
    pub config: Arc<Config>,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The request rate of each principal, if limited.
    pub limiter: Option<Arc<Limiter>>,
    /// Every event, for the streams of `GET /events`.
    pub hub: Hub,
}

impl App {
    /// What the authentication of every API route checks a request against.
    pub fn gate(&self) -> Gate {
        Gate {
            keyring: self.config.auth.clone(),
            limiter: self.limiter.clone(),
        }
    }
}
