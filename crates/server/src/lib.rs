//! # fencelock-server
//!
//! The fencelock HTTP server: the JSON API of the SPEC over any [`LockStore`], with
//! first-come first-served waiting, problem+json errors, Prometheus metrics and an OpenAPI
//! 3.1 description generated from the same types.
//!
//! [`serve`] takes an already-bound listener and a shutdown future, so every test can run a
//! server on port 0 and stop it when it likes.
//!
//! # Layout
//!
//! - [`auth`]: who may do what — bearer tokens, principals, rights per name prefix — and
//!   the request rate of each principal.
//! - [`listener`]: accepting connections (a connection limit that closes idle keep-alive
//!   connections to make room, header read timeouts, the TLS handshake), requests served
//!   whole however their client closes, and graceful shutdown.
//! - [`tls`]: HTTPS — the certificate and key from PEM files, reloadable.
//! - [`routes`]: one file per endpoint, over one acquire flow for every kind and one judged
//!   path for releases and renewals; [`routes::ApiDoc`] is the OpenAPI description.
//! - `route`: [`Route`](routes::Route), each route by its template, for the router and the
//!   metrics.
//! - [`extract`]: reading the resource and the JSON body, with every input check.
//! - [`problem`]: every failure turned into an RFC 9457 problem, in one place.
//! - [`events`]: one structured log line and one event of `GET /events` per lease event.
//! - [`hub`]: the event hub — every event with its id, the retention window, and the open
//!   streams, each with its filter and bounded buffer.
//! - [`metrics`]: Prometheus metrics.
//! - [`observe`]: every call a route makes to the store, timed, counted and logged in one
//!   call ([`observe::observed`]).
//! - [`timed`]: the store, with the time and failures of every call counted.
//! - [`state`]: [`Config`] and the state the handlers share.

pub mod auth;
pub mod events;
pub mod extract;
pub mod hub;
pub mod listener;
pub mod metrics;
pub mod observe;
pub mod problem;
mod route;
pub mod routes;
pub mod state;
pub mod timed;
pub mod tls;

use std::sync::Arc;

use fencelock_core::{LockStore, Waiters};
use tokio::net::TcpListener;

pub use state::{App, Config};

/// Serves the API of `store` on `listener` until `shutdown` completes; then stops accepting,
/// answers every waiting acquire, lets in-flight requests finish (up to
/// [`Config::shutdown_grace`]) and returns.
pub async fn serve(
    listener: TcpListener,
    store: Arc<dyn LockStore>,
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let metrics = Arc::new(metrics::Metrics::new());
    let store = Arc::new(timed::Timed::new(store, timed::Counted(metrics.clone())));
    let hub = hub::Hub::new(config.events, metrics.clone(), store.clone());
    let app = App {
        waiters: Waiters::with_limit(store, config.waiter_limit()),
        limiter: config.rate_limit.map(|rate| Arc::new(auth::Limiter::new(rate))),
        hub,
        config: Arc::new(config),
        metrics,
    };
    let purger = tokio::spawn(purge_expired(app.clone()));
    let relay = (app.waiters.store().bulletins())
        .map(|bulletins| tokio::spawn(hub::relay(app.hub.clone(), bulletins)));
    let result = listener::run(listener, routes::router(app.clone()), app.clone(), shutdown).await;
    purger.abort();
    if let Some(relay) = relay {
        relay.abort();
    }
    result
}

/// Forgets expired leases, permits and holds every [`Config::purge_interval`], logging
/// (with its kind) and counting each. A store may purge a bounded batch per call: while it
/// returns a full one, more are asked for at once (each call a separate turn of the store, so
/// requests are served in between).
async fn purge_expired(app: App) {
    let mut every = tokio::time::interval(app.config.purge_interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        loop {
            match app.waiters.store().purge_expired().await {
                Ok(expired) => {
                    for ended in &expired {
                        if events::expired(&app.hub, ended.kind, &ended.lease) {
                            app.metrics.expired(&ended.lease);
                        }
                    }
                    if expired.len() < fencelock_core::store::PURGE_BATCH {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "purging expired leases failed");
                    break;
                }
            }
        }
    }
}
