//! `POST /locks`: acquire several locks, all or none, waiting up to `wait_ms` for all of them
//! at once.

use axum::extract::State;
use axum::{Extension, Json};
use fencelock_core::{AcquireAllOutcome, AcquireOutcome, Acquired, Kind};
use fencelock_wire::{Acquire, AcquireAll, AcquireAllRequest, AcquireAllResponse, Op, outcome, parse};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::auth::{Caller, Right};
use crate::extract::JsonObject;
use crate::listener::Peer;
use crate::observe::observe;
use crate::problem::ApiError;
use crate::state::App;

use super::acquire::give_back;
use super::responses::{AuthProblems, BodyProblems, Deadlocked, Denied};
use super::{acquiring, waiting};

/// Acquire several locks at once, all or none.
///
/// Grants every lock of `resources` (a new lease with a new fencing token each, in the order
/// given; the caller's own live leases are extended), or none: `acquired: false` with every
/// lock in the way — held by another owner, or closed by a lock-delay — and nothing changed.
/// With `wait_ms`, waits for all of them at once, in first-come first-served order; two
/// such acquires in opposite orders never wait for each other. Each lock is then an
/// ordinary lease, renewed and released one by one at `/locks/{resource}`. Needs the `lock`
/// right on every name (403, and nothing acquired, otherwise); the leases are the caller's
/// principal's.
#[utoipa::path(post, path = "/locks", tag = "locks",
    request_body(content = AcquireAllRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Every lock granted (new or extended), in the order asked; or none, with every lock in the way; or, from a server shutting down, none without its store's answer (`shutting_down`)", body = AcquireAllResponse),
        Deadlocked,
        AuthProblems,
        Denied,
        BodyProblems,
    ))]
pub async fn acquire_all(
    State(app): State<App>,
    caller: Caller,
    peer: Option<Extension<Peer>>,
    JsonObject(body): JsonObject,
) -> Result<Json<AcquireAllResponse>, ApiError> {
    let AcquireAll { resources, lock } = parse::acquire_all(&body, &app.config.limits)?;
    for resource in resources.as_slice() {
        caller.may(Right::Lock, resource)?;
    }
    let terms = lock.terms(app.config.lock_delay);
    let Acquire { owner, wait, .. } = lock.acquire;
    let owner = caller.owns(owner);
    // As for one lock: cancelled when the client hangs up; the wait ends, a store call under
    // way completes and is logged, and the grants nobody will hear of are given back at once.
    let gone = CancellationToken::new();
    let _hung_up = gone.clone().drop_guard();
    let _waiting = waiting(peer, wait);
    let stopped = outcome::encode_all_stopped(&resources);
    acquiring(app.clone(), || Json(stopped), async move {
        let started = Instant::now();
        let outcome = app
            .waiters
            .acquire_all_unless(&resources, &owner, terms, wait, &gone)
            .await;
        observe(
            &app,
            Kind::Lock,
            Op::AcquireAll,
            &owner,
            &outcome,
            started.elapsed(),
        );
        let Acquired { outcome, .. } = outcome.map_err(|error| caller.told(error))?;
        if let AcquireAllOutcome::Granted(granted) = &outcome
            && gone.is_cancelled()
        {
            // Only the new leases: the ones extended were the caller's before it asked.
            for outcome in granted {
                if let AcquireOutcome::Granted { lease, .. } = outcome {
                    give_back(&app, Kind::Lock, lease).await;
                }
            }
        }
        Ok(Json(outcome::encode_acquire_all(&outcome)))
    })
    .await
}
