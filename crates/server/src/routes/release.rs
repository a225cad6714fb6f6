//! `DELETE /locks/{resource}`: release.

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use fencelock_core::{Kind, LockStore, ReleaseOutcome, Resource, StoreError};
use fencelock_wire::{Op, Problem, Release, ReleaseRequest, parse};

use crate::extract::{JsonObject, resource};
use crate::observe::Asked;
use crate::problem::ApiError;
use crate::state::App;

use super::{BodyProblems, Judge, judged};
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
) -> Result<Response, ApiError> {
    let request = parse::release(&body);
    judged(app, resource(&uri), request).await
}

impl Judge for Release {
    const OP: Op = Op::Release;
    type Outcome = ReleaseOutcome;

    fn kind(&self) -> Kind {
        Kind::Lock
    }

    fn asked(self, resource: Resource) -> Asked {
        Asked {
            resource,
            owner: self.owner,
            token: self.token,
        }
    }

    async fn call(&self, store: &dyn LockStore, resource: &Resource) -> Result<ReleaseOutcome, StoreError> {
        store.release(resource, &self.owner, self.token).await
    }
}
