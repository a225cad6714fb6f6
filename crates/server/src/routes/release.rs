//! `DELETE /locks/{resource}`: release.

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use fencelock_core::{Refusal, ReleaseOutcome};
use fencelock_wire::{Problem, ReleaseRequest, parse};
use tokio::time::Instant;

use crate::events;
use crate::extract::{JsonObject, both, resource};
use crate::problem::ApiError;
use crate::state::App;

use super::{BodyProblems, detached, refused};

/// Release a lock.
///
/// Only the owner of the live lease may release it; with `fencing_token`, only if it is the
/// current lease's token, so a late release from an old lease never frees a newer one.
#[utoipa::path(delete, path = "/locks/{resource}", tag = "locks",
    params(("resource" = String, Path, description = "The resource, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = ReleaseRequest, content_type = "application/json"),
    responses(
        (status = 204, description = "Released"),
        (status = 403, description = "Held by another owner", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No live lease", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The token is not the current lease's", body = Problem, content_type = "application/problem+json"),
        BodyProblems,
    ))]
pub async fn release(
    State(app): State<App>,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<StatusCode, ApiError> {
    let (resource, request) = both(resource(&uri), parse::release(&body))?;
    detached(async move {
        let started = Instant::now();
        let outcome = app
            .waiters
            .store()
            .release(&resource, &request.owner, request.token)
            .await;
        let took = started.elapsed();
        let refusal = match outcome {
            Err(error) => {
                app.metrics.observe("release", "unavailable", took);
                return Err(error.into());
            }
            Ok(ReleaseOutcome::Released(ended)) => {
                match ended {
                    Some(ended) => {
                        events::released(&ended.lease, ended.held_for());
                        app.metrics.held_for(ended.held_for());
                    }
                    // Only a store in front of another server cannot say which lease it ended.
                    None => events::released_unknown(&resource, &request.owner, request.token),
                }
                app.metrics.observe("release", "released", took);
                return Ok(StatusCode::NO_CONTENT);
            }
            Ok(ReleaseOutcome::NotFound) => Refusal::NotFound,
            Ok(ReleaseOutcome::Forbidden) => Refusal::Forbidden,
            Ok(ReleaseOutcome::Conflict) => Refusal::Conflict,
        };
        Err(refused(refusal, &app, "release", &resource, &request.owner, took))
    })
    .await
}
