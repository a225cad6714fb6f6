//! `POST /locks/{resource}`: acquire, waiting up to `wait_ms` in line if another owner holds it.

use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use fencelock_core::{AcquireOutcome, Lease, ReleaseOutcome};
use fencelock_wire::{AcquireRequest, AcquireResponse, Granted, Held, LeaseBody, parse};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::events;
use crate::extract::{JsonObject, both, resource};
use crate::problem::ApiError;
use crate::state::App;

use super::{BodyProblems, detached};

/// Acquire a lock.
///
/// Grants a free or expired resource with a new fencing token; extends the caller's own live
/// lease (same token); or, if another owner holds it, answers `acquired: false` — at once,
/// or after waiting up to `wait_ms` in first-come first-served order.
#[utoipa::path(post, path = "/locks/{resource}", tag = "locks",
    params(("resource" = String, Path, description = "The resource, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = AcquireRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Granted (new or extended), or held by another owner", body = AcquireResponse),
        BodyProblems,
    ))]
pub async fn acquire(
    State(app): State<App>,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Json<AcquireResponse>, ApiError> {
    let (resource, request) = both(resource(&uri), parse::acquire(&body, &app.config.limits))?;
    // Cancelled when this future is dropped (the client hung up): the wait ends, but a call
    // to the store under way completes and is logged, and a grant nobody will hear of is
    // given back at once instead of blocking the lock until its TTL.
    let gone = CancellationToken::new();
    let _hung_up = gone.clone().drop_guard();
    detached(async move {
        let started = Instant::now();
        let outcome = app
            .waiters
            .acquire_unless(&resource, &request.owner, request.ttl, request.wait, &gone)
            .await;
        let took = started.elapsed();
        let (label, answer) = match outcome {
            Err(error) => {
                app.metrics.observe("acquire", "unavailable", took);
                return Err(error.into());
            }
            Ok(AcquireOutcome::Granted { lease, expired }) => {
                if let Some(expired) = expired {
                    events::expired(&expired);
                    app.metrics.expired();
                }
                events::granted(&lease, took);
                if gone.is_cancelled() {
                    give_back(&app, &lease).await;
                }
                ("granted", granted(&lease, false))
            }
            Ok(AcquireOutcome::Extended(lease)) => {
                events::extended(&lease);
                ("extended", granted(&lease, true))
            }
            Ok(AcquireOutcome::Held { holder, expires_in }) => {
                events::refused("acquire", "held", &resource, &request.owner, Some(&holder));
                let held = Held {
                    acquired: false,
                    resource: resource.to_string(),
                    holder: LeaseBody::from(&holder),
                    expires_in_ms: u64::try_from(expires_in.as_millis()).unwrap_or(u64::MAX),
                };
                ("held", AcquireResponse::Held(held))
            }
        };
        app.metrics.observe("acquire", label, took);
        Ok(Json(answer))
    })
    .await
}

/// Releases a lease granted to a caller who hung up before hearing of it.
async fn give_back(app: &App, lease: &Lease) {
    match app
        .waiters
        .store()
        .release(&lease.resource, &lease.owner, Some(lease.token))
        .await
    {
        Ok(ReleaseOutcome::Released(Some(ended))) => {
            events::released(&ended.lease, ended.held_for());
            app.metrics.held_for(ended.held_for());
        }
        Ok(ReleaseOutcome::Released(None)) => {
            events::released_unknown(&lease.resource, &lease.owner, Some(lease.token));
        }
        // Renewed or released by someone else meanwhile; it ends at its TTL.
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, resource = %lease.resource,
            "giving back a lease whose caller hung up failed; it ends at its TTL"),
    }
}

fn granted(lease: &Lease, extended: bool) -> AcquireResponse {
    AcquireResponse::Granted(Granted {
        acquired: true,
        extended,
        lock: LeaseBody::from(lease),
    })
}
