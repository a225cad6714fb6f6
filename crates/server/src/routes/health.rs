//! `/healthz` (the process answers), `/readyz` (the store answers), `/metrics`.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use fencelock_wire::{Problem, ProblemKind};
use serde_json::{Value, json};

use crate::problem::ApiError;
use crate::state::App;

/// How long a readiness check waits for the store.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Liveness: the process serves HTTP.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "Alive", body = Object, example = json!({"status": "ok"}))))]
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness: the store answers.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Object, example = json!({"status": "ready"})),
        (status = 503, description = "The store does not answer", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn readyz(State(app): State<App>) -> Result<Json<Value>, ApiError> {
    match tokio::time::timeout(READY_TIMEOUT, app.waiters.store().ping()).await {
        Ok(Ok(())) => Ok(Json(json!({"status": "ready"}))),
        Ok(Err(error)) => Err(error.into()),
        Err(_) => Err(ApiError::Problem(
            ProblemKind::Unavailable,
            format!("the store did not answer within {READY_TIMEOUT:?}"),
        )),
    }
}

/// Prometheus metrics, in the text exposition format.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
pub async fn metrics(State(app): State<App>) -> impl IntoResponse {
    let text = app.metrics.encode(app.waiters.waiting());
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
}
