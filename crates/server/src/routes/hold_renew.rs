//! `POST /semaphores/{name}/renew`, `POST /rwlocks/{name}/renew`: renew the owner's permit or
//! hold.

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use fencelock_core::{Hold, HoldKind, Kind, LockStore, RenewOutcome, Resource, StoreError};
use fencelock_wire::{HoldBody, Op, PermitBody, Problem, Renew, RenewRequest, parse};

use crate::auth::Caller;
use crate::extract::{JsonObject, both, hold_name};
use crate::observe::Asked;
use crate::problem::ApiError;
use crate::state::App;

use super::judge::{Judge, OfHold, judged};
use super::responses::{AuthProblems, BodyProblems};

/// Renew a permit.
///
/// Sets the owner's permit's `expires_at` to now + TTL; the token and `acquired_at` stay. An
/// expired permit is never renewed: acquire one again. Needs the `lock` right.
#[utoipa::path(post, path = "/semaphores/{name}/renew", tag = "semaphores",
    params(("name" = String, Path, description = "The semaphore, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = RenewRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Renewed", body = PermitBody),
        (status = 403, description = "The owner name's permit is another principal's, or the caller has no `lock` right on this name (problem type ending in denied)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The owner holds no live permit", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The token is not the owner's permit's", body = Problem, content_type = "application/problem+json"),
        AuthProblems,
        BodyProblems,
    ))]
pub async fn renew_semaphore(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    renew(app, &caller, HoldKind::Semaphore, &uri, &body).await
}

/// Renew a read-write lock's hold.
///
/// Sets the owner's hold's `expires_at` to now + TTL; the mode, the token and `acquired_at`
/// stay. An expired hold is never renewed: acquire again. Needs the `lock` right.
#[utoipa::path(post, path = "/rwlocks/{name}/renew", tag = "rwlocks",
    params(("name" = String, Path, description = "The read-write lock, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = RenewRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Renewed", body = HoldBody),
        (status = 403, description = "The owner name's hold is another principal's, or the caller has no `lock` right on this name (problem type ending in denied)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The owner holds no live hold", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The token is not the owner's hold's", body = Problem, content_type = "application/problem+json"),
        AuthProblems,
        BodyProblems,
    ))]
pub async fn renew_rwlock(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    renew(app, &caller, HoldKind::RwLock, &uri, &body).await
}

async fn renew(
    app: App,
    caller: &Caller,
    kind: HoldKind,
    uri: &Uri,
    body: &serde_json::Map<String, serde_json::Value>,
) -> Result<Response, ApiError> {
    let (name, request) = both(hold_name(kind, uri), parse::renew(body, &app.config.limits))?;
    judged(app, caller, name, OfHold { kind, request }).await
}

impl Judge for OfHold<Renew> {
    const OP: Op = Op::Renew;
    type Outcome = RenewOutcome<Hold>;

    fn kind(&self) -> Kind {
        self.kind.into()
    }

    fn asked(&self, resource: Resource) -> Asked {
        self.request.asked(resource)
    }

    async fn call(&self, store: &dyn LockStore, asked: &Asked) -> Result<RenewOutcome<Hold>, StoreError> {
        let Asked {
            resource,
            owner,
            token,
        } = asked;
        store
            .renew_hold_with(
                self.kind,
                resource,
                owner,
                self.request.ttl,
                *token,
                self.request.meta.as_ref(),
            )
            .await
    }
}
