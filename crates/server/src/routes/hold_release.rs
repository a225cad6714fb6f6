//! `DELETE /semaphores/{name}`, `DELETE /rwlocks/{name}`: release the owner's permit or hold.

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use fencelock_core::{HoldKind, Key, Kind, LockStore, ReleaseOutcome, Resource, StoreError};
use fencelock_wire::{Delete, DeleteRequest, Op, Problem, Release, parse};

use crate::auth::Caller;
use crate::extract::{JsonObject, both, hold_name};
use crate::observe::Asked;
use crate::problem::ApiError;
use crate::state::App;

use super::force::force_release;
use super::judge::{Judge, OfHold, judged};
use super::responses::{AuthProblems, BodyProblems};

/// Release a permit.
///
/// Ends the owner's permit, so another owner may take it (needs the `lock` right); with
/// `fencing_token`, only if it is the permit's token. An owner without a live permit gets
/// 404. With `{"force": true}` and the `admin` right, ends every permit of the semaphore.
#[utoipa::path(delete, path = "/semaphores/{name}", tag = "semaphores",
    params(("name" = String, Path, description = "The semaphore, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = DeleteRequest, content_type = "application/json"),
    responses(
        (status = 204, description = "Released"),
        (status = 403, description = "The owner name's permit is another principal's, or the caller has no right to this (problem type ending in denied)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The owner holds no live permit", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The token is not the owner's permit's", body = Problem, content_type = "application/problem+json"),
        AuthProblems,
        BodyProblems,
    ))]
pub async fn release_semaphore(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    release(app, &caller, HoldKind::Semaphore, &uri, &body).await
}

/// Release a read-write lock.
///
/// Ends the owner's read or write hold (needs the `lock` right); with `fencing_token`, only
/// if it is the hold's token. An owner without a live hold gets 404. With `{"force": true}`
/// and the `admin` right, ends every hold of the read-write lock.
#[utoipa::path(delete, path = "/rwlocks/{name}", tag = "rwlocks",
    params(("name" = String, Path, description = "The read-write lock, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = DeleteRequest, content_type = "application/json"),
    responses(
        (status = 204, description = "Released"),
        (status = 403, description = "The owner name's hold is another principal's, or the caller has no right to this (problem type ending in denied)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The owner holds no live hold", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The token is not the owner's hold's", body = Problem, content_type = "application/problem+json"),
        AuthProblems,
        BodyProblems,
    ))]
pub async fn release_rwlock(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    release(app, &caller, HoldKind::RwLock, &uri, &body).await
}

async fn release(
    app: App,
    caller: &Caller,
    kind: HoldKind,
    uri: &Uri,
    body: &serde_json::Map<String, serde_json::Value>,
) -> Result<Response, ApiError> {
    match both(hold_name(kind, uri), parse::delete(body))? {
        (name, Delete::Force) => force_release(app, caller, Key::hold(kind, &name)).await,
        (name, Delete::Release(request)) => judged(app, caller, name, OfHold { kind, request }).await,
    }
}

impl Judge for OfHold<Release> {
    const OP: Op = Op::Release;
    type Outcome = ReleaseOutcome;

    fn kind(&self) -> Kind {
        self.kind.into()
    }

    fn asked(&self, resource: Resource) -> Asked {
        self.request.asked(resource)
    }

    async fn call(&self, store: &dyn LockStore, asked: &Asked) -> Result<ReleaseOutcome, StoreError> {
        let Asked {
            resource,
            owner,
            token,
        } = asked;
        store.release_hold(self.kind, resource, owner, *token).await
    }
}
