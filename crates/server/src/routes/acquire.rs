//! `POST /locks/{resource}`: acquire, waiting up to `wait_ms` in line if another owner holds it.

use axum::extract::State;
use axum::http::Uri;
use axum::{Extension, Json};
use fencelock_core::{AcquireOutcome, Acquired, Kind, Lease, ReleaseOutcome};
use fencelock_wire::{Acquire, AcquireRequest, AcquireResponse, Op, outcome, parse};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::auth::{Caller, Right};
use crate::extract::{JsonObject, both, resource};
use crate::listener::Peer;
use crate::observe::{Asked, Observed, observe};
use crate::problem::ApiError;
use crate::state::App;

use super::responses::{AuthProblems, BodyProblems, Deadlocked, Denied};
use super::{acquiring, waiting};

/// Acquire a lock.
///
/// Grants a free or expired resource with a new fencing token; extends the caller's own live
/// lease (same token); or, if another owner holds it, answers `acquired: false` — at once,
/// or after waiting up to `wait_ms` in first-come first-served order. After a lease expired
/// unreleased, the lock stays closed for the server's lock-delay (`acquired: false` with
/// `retry_after_ms`). `max_hold_ms` caps the new lease (`hold_until`): its first TTL, every
/// renewal and every extension end there at the latest. Needs the `lock` right; the lease is
/// the caller's principal's (the same owner name under another principal is another owner).
#[utoipa::path(post, path = "/locks/{resource}", tag = "locks",
    params(("resource" = String, Path, description = "The resource, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = AcquireRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Granted (new or extended); held by another owner; closed by a lock-delay; or, from a server shutting down, not acquired without its store's answer (`shutting_down`)", body = AcquireResponse),
        Deadlocked,
        AuthProblems,
        Denied,
        BodyProblems,
    ))]
pub async fn acquire(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    peer: Option<Extension<Peer>>,
    JsonObject(body): JsonObject,
) -> Result<Json<AcquireResponse>, ApiError> {
    let (resource, request) = both(resource(&uri), parse::acquire(&body, &app.config.limits))?;
    caller.may(Right::Lock, &resource)?;
    let terms = request.terms(app.config.lock_delay);
    let Acquire { owner, wait, .. } = request.acquire;
    let owner = caller.owns(owner);
    // Cancelled when this future is dropped (the client hung up): the wait ends, but a call
    // to the store under way completes and is logged, and a grant nobody will hear of is
    // given back at once instead of blocking the lock until its TTL.
    let gone = CancellationToken::new();
    let _hung_up = gone.clone().drop_guard();
    let _waiting = waiting(peer, wait);
    let stopped = outcome::encode_stopped(&resource);
    acquiring(app.clone(), || Json(stopped), async move {
        let started = Instant::now();
        let outcome = app
            .waiters
            .acquire_unless(&resource, &owner, terms, wait, &gone)
            .await;
        let asked = Asked {
            resource,
            owner,
            token: None,
        };
        observe(&app, Kind::Lock, Op::Acquire, &asked, &outcome, started.elapsed());
        let Acquired { outcome, .. } = outcome.map_err(|error| caller.told(error))?;
        if let AcquireOutcome::Granted { lease, .. } = &outcome
            && gone.is_cancelled()
        {
            give_back(&app, Kind::Lock, lease).await;
        }
        Ok(Json(outcome::encode_acquire(&outcome)))
    })
    .await
}

/// Releases a lease of `kind` (a lock's, a permit's or a hold's) granted to a caller who hung
/// up before hearing of it.
pub(super) async fn give_back(app: &App, kind: Kind, lease: &Lease) {
    let started = Instant::now();
    let (store, token) = (app.waiters.store(), Some(lease.token));
    let outcome = match kind.hold_kind() {
        None => store.release(&lease.resource, &lease.owner, token).await,
        Some(kind) => {
            store
                .release_hold(kind, &lease.resource, &lease.owner, token)
                .await
        }
    };
    let asked = Asked {
        resource: lease.resource.clone(),
        owner: lease.owner.clone(),
        token: Some(lease.token),
    };
    match outcome {
        Ok(released @ ReleaseOutcome::Released(_)) => {
            released.record(kind, Op::Release, &asked, started.elapsed(), &app.metrics);
        }
        // Renewed or released by someone else meanwhile; it ends at its TTL.
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, resource = %lease.resource,
            "giving back a lease whose caller hung up failed; it ends at its TTL"),
    }
}
