//! `POST /locks/{resource}/renew`: renew.

use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use fencelock_core::{Refusal, RenewOutcome};
use fencelock_wire::{LeaseBody, Problem, RenewRequest, parse};
use tokio::time::Instant;

use crate::events;
use crate::extract::{JsonObject, both, resource};
use crate::problem::ApiError;
use crate::state::App;

use super::{BodyProblems, detached, refused};

/// Renew a lock.
///
/// Sets the live lease's `expires_at` to now + TTL; the token and `acquired_at` stay. An
/// expired lease is never renewed: acquire it again.
#[utoipa::path(post, path = "/locks/{resource}/renew", tag = "locks",
    params(("resource" = String, Path, description = "The resource, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = RenewRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Renewed", body = LeaseBody),
        (status = 403, description = "Held by another owner", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No live lease", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The token is not the current lease's", body = Problem, content_type = "application/problem+json"),
        BodyProblems,
    ))]
pub async fn renew(
    State(app): State<App>,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Json<LeaseBody>, ApiError> {
    let (resource, request) = both(resource(&uri), parse::renew(&body, &app.config.limits))?;
    detached(async move {
        let started = Instant::now();
        let outcome = app
            .waiters
            .store()
            .renew(&resource, &request.owner, request.ttl, request.token)
            .await;
        let took = started.elapsed();
        let refusal = match outcome {
            Err(error) => {
                app.metrics.observe("renew", "unavailable", took);
                return Err(error.into());
            }
            Ok(RenewOutcome::Renewed(lease)) => {
                events::renewed(&lease);
                app.metrics.observe("renew", "renewed", took);
                return Ok(Json(LeaseBody::from(&lease)));
            }
            Ok(RenewOutcome::NotFound) => Refusal::NotFound,
            Ok(RenewOutcome::Forbidden) => Refusal::Forbidden,
            Ok(RenewOutcome::Conflict) => Refusal::Conflict,
        };
        Err(refused(refusal, &app, "renew", &resource, &request.owner, took))
    })
    .await
}
