//! `GET /locks/{resource}`: the live lease.

use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use fencelock_wire::{LeaseBody, Problem, ProblemKind};
use tokio::time::Instant;

use crate::extract::resource;
use crate::problem::ApiError;
use crate::state::App;

use super::PathProblems;

/// The live lease on a resource.
///
/// An expired lease is not shown: it belongs to nobody (404).
#[utoipa::path(get, path = "/locks/{resource}", tag = "locks",
    params(("resource" = String, Path, description = "The resource, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    responses(
        (status = 200, description = "The live lease", body = LeaseBody),
        (status = 404, description = "No live lease", body = Problem, content_type = "application/problem+json"),
        PathProblems,
    ))]
pub async fn get(State(app): State<App>, uri: Uri) -> Result<Json<LeaseBody>, ApiError> {
    let resource = resource(&uri).map_err(|e| ApiError::Invalid(vec![e]))?;
    let started = Instant::now();
    let lease = app.waiters.store().get(&resource).await;
    let took = started.elapsed();
    match lease {
        Err(error) => {
            app.metrics.observe("get", "unavailable", took);
            Err(error.into())
        }
        Ok(Some(lease)) => {
            app.metrics.observe("get", "found", took);
            Ok(Json(LeaseBody::from(&lease)))
        }
        Ok(None) => {
            app.metrics.observe("get", "not_found", took);
            Err(ApiError::Problem(
                ProblemKind::NotFound,
                format!("no live lock on {resource}"),
            ))
        }
    }
}
