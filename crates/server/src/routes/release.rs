//! `DELETE /locks/{resource}`: release.

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use fencelock_core::{Key, Kind, LockStore, ReleaseOutcome, Resource, StoreError};
use fencelock_wire::{Delete, DeleteRequest, Op, Problem, Release, parse};

use crate::auth::Caller;
use crate::extract::{JsonObject, both, resource};
use crate::observe::Asked;
use crate::problem::ApiError;
use crate::state::App;

use super::force::force_release;
use super::judge::{Judge, judged};
use super::responses::{AuthProblems, BodyProblems};

/// Release a lock.
///
/// Only the owner of the live lease may release it (needs the `lock` right); with
/// `fencing_token`, only if it is the current lease's token, so a late release from an old
/// lease never frees a newer one. With `{"force": true}` and the `admin` right, frees the
/// lock whoever holds it.
#[utoipa::path(delete, path = "/locks/{resource}", tag = "locks",
    params(("resource" = String, Path, description = "The resource, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = DeleteRequest, content_type = "application/json"),
    responses(
        (status = 204, description = "Released"),
        (status = 403, description = "Held by another owner (or by the same owner name under another principal), or the caller has no right to this (problem type ending in denied)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No live lease", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The token is not the current lease's", body = Problem, content_type = "application/problem+json"),
        AuthProblems,
        BodyProblems,
    ))]
pub async fn release(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    match both(resource(&uri), parse::delete(&body))? {
        (resource, Delete::Force) => force_release(app, &caller, Key::lock(&resource)).await,
        (resource, Delete::Release(request)) => judged(app, &caller, resource, request).await,
    }
}

impl Judge for Release {
    const OP: Op = Op::Release;
    type Outcome = ReleaseOutcome;

    fn kind(&self) -> Kind {
        Kind::Lock
    }

    fn asked(&self, resource: Resource) -> Asked {
        Asked {
            resource,
            owner: self.owner.clone(),
            token: self.token,
        }
    }

    async fn call(&self, store: &dyn LockStore, asked: &Asked) -> Result<ReleaseOutcome, StoreError> {
        store.release(&asked.resource, &asked.owner, asked.token).await
    }
}
