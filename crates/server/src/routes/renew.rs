//! `POST /locks/{resource}/renew`: renew.

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use fencelock_core::{Kind, LockStore, RenewOutcome, Resource, StoreError};
use fencelock_wire::{LeaseBody, Op, Problem, Renew, RenewRequest, parse};

use crate::auth::Caller;
use crate::extract::{JsonObject, both, resource};
use crate::observe::Asked;
use crate::problem::ApiError;
use crate::state::App;

use super::judge::{Judge, judged};
use super::responses::{AuthProblems, BodyProblems};

/// Renew a lock.
///
/// Sets the live lease's `expires_at` to now + TTL; the token and `acquired_at` stay. An
/// expired lease is never renewed: acquire it again. Needs the `lock` right.
#[utoipa::path(post, path = "/locks/{resource}/renew", tag = "locks",
    params(("resource" = String, Path, description = "The resource, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = RenewRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Renewed", body = LeaseBody),
        (status = 403, description = "Held by another owner (or by the same owner name under another principal), or the caller has no `lock` right on this name (problem type ending in denied)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No live lease", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The token is not the current lease's", body = Problem, content_type = "application/problem+json"),
        AuthProblems,
        BodyProblems,
    ))]
pub async fn renew(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    let (resource, request) = both(resource(&uri), parse::renew(&body, &app.config.limits))?;
    judged(app, &caller, resource, request).await
}

impl Judge for Renew {
    const OP: Op = Op::Renew;
    type Outcome = RenewOutcome;

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

    async fn call(&self, store: &dyn LockStore, asked: &Asked) -> Result<RenewOutcome, StoreError> {
        store
            .renew_with(
                &asked.resource,
                &asked.owner,
                self.ttl,
                asked.token,
                self.meta.as_ref(),
            )
            .await
    }
}
