//! `DELETE /semaphores/{name}`, `DELETE /rwlocks/{name}`: release the owner's permit or hold.

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use fencelock_core::{HoldKind, Kind, LockStore, ReleaseOutcome, Resource, StoreError};
use fencelock_wire::{Op, Problem, Release, ReleaseRequest, parse};

use crate::extract::{JsonObject, hold_name};
use crate::observe::Asked;
use crate::problem::ApiError;
use crate::state::App;

use super::{BodyProblems, Judge, OfHold, judged};

/// Release a permit.
///
/// Ends the owner's permit, so another owner may take it; with `fencing_token`, only if it is
/// the permit's token. An owner without a live permit gets 404 (never 403).
#[utoipa::path(delete, path = "/semaphores/{name}", tag = "semaphores",
    params(("name" = String, Path, description = "The semaphore, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = ReleaseRequest, content_type = "application/json"),
    responses(
        (status = 204, description = "Released"),
        (status = 404, description = "The owner holds no live permit", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The token is not the owner's permit's", body = Problem, content_type = "application/problem+json"),
        BodyProblems,
    ))]
pub async fn release_semaphore(
    State(app): State<App>,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    release(app, HoldKind::Semaphore, &uri, &body).await
}

/// Release a read-write lock.
///
/// Ends the owner's read or write hold; with `fencing_token`, only if it is the hold's token.
/// An owner without a live hold gets 404 (never 403).
#[utoipa::path(delete, path = "/rwlocks/{name}", tag = "rwlocks",
    params(("name" = String, Path, description = "The read-write lock, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = ReleaseRequest, content_type = "application/json"),
    responses(
        (status = 204, description = "Released"),
        (status = 404, description = "The owner holds no live hold", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The token is not the owner's hold's", body = Problem, content_type = "application/problem+json"),
        BodyProblems,
    ))]
pub async fn release_rwlock(
    State(app): State<App>,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    release(app, HoldKind::RwLock, &uri, &body).await
}

async fn release(
    app: App,
    kind: HoldKind,
    uri: &Uri,
    body: &serde_json::Map<String, serde_json::Value>,
) -> Result<Response, ApiError> {
    let request = parse::release(body).map(|request| OfHold { kind, request });
    judged(app, hold_name(kind, uri), request).await
}

impl Judge for OfHold<Release> {
    const OP: Op = Op::Release;
    type Outcome = ReleaseOutcome;

    fn kind(&self) -> Kind {
        self.kind.into()
    }

    fn asked(self, resource: Resource) -> Asked {
        self.request.asked(resource)
    }

    async fn call(&self, store: &dyn LockStore, name: &Resource) -> Result<ReleaseOutcome, StoreError> {
        let Release { owner, token } = &self.request;
        store.release_hold(self.kind, name, owner, *token).await
    }
}
