//! `POST /semaphores/{name}`, `POST /rwlocks/{name}`: acquire a permit or a hold, waiting up
//! to `wait_ms` in line if it is busy.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use fencelock_core::{Acquired, Claim, HoldKind, HoldOutcome, Kind, Lease, Meta, StoreError, Ttl, Waiters};
use fencelock_wire::{
    Acquire, AcquireHold, HoldAcquireResponse, Op, ProblemKind, RwLockAcquireRequest, RwLockAcquireResponse,
    SemaphoreAcquireRequest, SemaphoreAcquireResponse, outcome, parse,
};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use utoipa::openapi::RefOr;
use utoipa::openapi::response::Response as Described;

use crate::auth::Caller;
use crate::extract::{JsonObject, both, hold_name};
use crate::listener::Peer;
use crate::observe::Asked;
use crate::problem::ApiError;
use crate::state::App;

use super::acquiring::{Acquiring, acquired_one};
use super::responses::{AuthProblems, BodyProblems, DEADLOCK, Deadlocked, Denied, problems};

/// In the OpenAPI description: the two 409s of a semaphore's acquire.
struct SemaphoreConflicts;

impl utoipa::IntoResponses for SemaphoreConflicts {
    fn responses() -> BTreeMap<String, RefOr<Described>> {
        let description = format!(
            "The live permits have another limit (problem type ending in limit-mismatch; `limit` is theirs); or: {DEADLOCK}"
        );
        problems(&[(ProblemKind::LimitMismatch, &description)])
    }
}

/// Acquire a permit of a semaphore.
///
/// Grants a permit with a new fencing token while fewer than `limit` permits are live;
/// extends the caller's own live permit (same token); or, if other owners hold every permit,
/// answers `acquired: false` — at once, or after waiting up to `wait_ms` in first-come
/// first-served order. A `limit` other than the live permits' is refused (409
/// `limit-mismatch`, with theirs as `limit`) and changes nothing. Needs the `lock` right; the
/// permit is the caller's principal's.
#[utoipa::path(post, path = "/semaphores/{name}", tag = "semaphores",
    params(("name" = String, Path, description = "The semaphore, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = SemaphoreAcquireRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Granted (new or extended); every permit held by others; or, from a server shutting down, not acquired without its store's answer (`shutting_down`)", body = SemaphoreAcquireResponse),
        SemaphoreConflicts,
        AuthProblems,
        Denied,
        BodyProblems,
    ))]
pub async fn acquire_semaphore(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    peer: Option<Extension<Peer>>,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    acquire(app, &caller, peer, HoldKind::Semaphore, &uri, &body).await
}

/// Acquire a read-write lock.
///
/// `read`: granted with a new token unless another owner holds `write` or a writer waits
/// (writers are not starved). `write`: granted when no other owner holds anything; a sole
/// reader is upgraded (new token). A writer asking `read` is downgraded at once (new token);
/// the same mode again extends (same token). Otherwise `acquired: false` — at once, or after
/// waiting up to `wait_ms` in first-come first-served order. Needs the `lock` right; the hold
/// is the caller's principal's.
#[utoipa::path(post, path = "/rwlocks/{name}", tag = "rwlocks",
    params(("name" = String, Path, description = "The read-write lock, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = RwLockAcquireRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Granted (new, replaced or extended); held against this mode; or, from a server shutting down, not acquired without its store's answer (`shutting_down`)", body = RwLockAcquireResponse),
        Deadlocked,
        AuthProblems,
        Denied,
        BodyProblems,
    ))]
pub async fn acquire_rwlock(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    peer: Option<Extension<Peer>>,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    acquire(app, &caller, peer, HoldKind::RwLock, &uri, &body).await
}

async fn acquire(
    app: App,
    caller: &Caller,
    peer: Option<Extension<Peer>>,
    kind: HoldKind,
    uri: &Uri,
    body: &Map<String, Value>,
) -> Result<Response, ApiError> {
    let (name, AcquireHold { acquire, claim }) = both(
        hold_name(kind, uri),
        parse::acquire_hold(body, &app.config.limits, kind),
    )?;
    let Acquire {
        owner,
        ttl,
        wait,
        meta,
    } = acquire;
    let hold = OneHold {
        kind,
        claim,
        ttl,
        meta,
    };
    acquired_one(app, caller, peer, (name, owner, wait), hold).await
}

/// An acquire of a semaphore's permit or a read-write lock's hold: of this kind, for this
/// claim, for this long, with this metadata.
struct OneHold {
    kind: HoldKind,
    claim: Claim,
    ttl: Ttl,
    meta: Option<Meta>,
}

impl Acquiring for OneHold {
    const OP: Op = Op::Acquire;
    type Asked = Asked;
    type Outcome = HoldOutcome;
    type Answer = HoldAcquireResponse;

    fn kind(&self) -> Kind {
        self.kind.into()
    }

    fn stopped(&self, asked: &Asked) -> HoldAcquireResponse {
        outcome::encode_hold_stopped(self.kind, &asked.resource)
    }

    async fn call(
        &self,
        waiters: &Waiters,
        asked: &Asked,
        wait: Duration,
        gone: &CancellationToken,
    ) -> Result<Acquired<HoldOutcome>, StoreError> {
        let Self { claim, ttl, .. } = *self;
        waiters
            .acquire_hold_unless(
                &asked.resource,
                &asked.owner,
                claim,
                ttl,
                self.meta.as_ref(),
                wait,
                gone,
            )
            .await
    }

    fn granted(outcome: &HoldOutcome) -> Vec<&Lease> {
        match outcome {
            HoldOutcome::Granted { hold, .. } => vec![&hold.lease],
            _ => Vec::new(),
        }
    }

    fn answer(&self, asked: &Asked, outcome: &HoldOutcome) -> Result<HoldAcquireResponse, ApiError> {
        let name = &asked.resource;
        outcome::encode_hold_acquire(self.kind, name, outcome).map_err(|limit| {
            let asked = asked_limit(self.claim);
            ApiError::Built(Box::new(outcome::limit_mismatch_problem(name, asked, limit)))
        })
    }
}

/// The limit a semaphore's acquire asked for (only its claims can mismatch).
fn asked_limit(claim: Claim) -> u32 {
    match claim {
        Claim::Permit { limit } => limit,
        Claim::Read | Claim::Write => 0,
    }
}
