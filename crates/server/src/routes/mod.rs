//! The routes: one file per endpoint (parse, validate, call the store, map the answer).

mod acquire;
mod get;
mod health;
mod list;
mod release;
mod renew;

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::http::{Method, Uri};
use axum::routing::{get, post};
use fencelock_core::{Owner, Refusal, Resource};
use fencelock_wire::{FieldError, ProblemKind};
use utoipa::OpenApi;

use crate::events;
use crate::problem::{ApiError, render_problems};
use crate::state::App;

/// The OpenAPI 3.1 description, generated from the handlers and the wire types.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "fencelock",
        description = "Leases with fencing tokens for distributed mutual exclusion."
    ),
    paths(
        acquire::acquire,
        get::get,
        release::release,
        renew::renew,
        list::list,
        health::healthz,
        health::readyz,
        health::metrics
    ),
    components(schemas(fencelock_wire::Granted, fencelock_wire::Held, fencelock_wire::FieldError))
)]
pub struct ApiDoc;

/// The whole API as an axum router.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/locks", get(list::list))
        .route(
            "/locks/{resource}",
            post(acquire::acquire).get(get::get).delete(release::release),
        )
        .route("/locks/{resource}/renew", post(renew::renew))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(render_problems))
        .with_state(app)
}

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// No route: a 404 problem — except `/locks/` and `/locks//renew`, whose resource name is
/// empty, which is an invalid field like any other bad name.
async fn not_found(uri: Uri) -> ApiError {
    let path = uri.path();
    if path == "/locks/" || path == "/locks//renew" {
        return ApiError::Invalid(vec![FieldError::new("resource", "must not be empty or blank")]);
    }
    ApiError::Problem(ProblemKind::NotFound, format!("no such route: {path}"))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::Problem(
        ProblemKind::MethodNotAllowed,
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// Logs and counts the refusal of a release or renew, and makes its problem.
fn refused(
    refusal: Refusal,
    app: &App,
    op: &'static str,
    resource: &Resource,
    owner: &Owner,
    took: Duration,
) -> ApiError {
    let (label, kind, detail) = match refusal {
        Refusal::NotFound => (
            "not_found",
            ProblemKind::NotFound,
            format!("no live lock on {resource}"),
        ),
        Refusal::Forbidden => (
            "forbidden",
            ProblemKind::Forbidden,
            format!("{resource} is held by another owner than {owner}"),
        ),
        Refusal::Conflict => (
            "conflict",
            ProblemKind::Conflict,
            format!("the live lease on {resource} has another fencing token"),
        ),
    };
    events::refused(op, label, resource, owner, None);
    app.metrics.observe(op, label, took);
    ApiError::Problem(kind, detail)
}
