//! `POST /locks/{resource}`: acquire, waiting up to `wait_ms` in line if another owner holds it.

use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use fencelock_core::{AcquireOutcome, Acquired, Kind, Lease, StoreError, Terms, Waiters};
use fencelock_wire::{Acquire, AcquireRequest, AcquireResponse, Op, outcome, parse};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::auth::Caller;
use crate::extract::{JsonBody, bad_body, both, resource};
use crate::listener::Peer;
use crate::observe::Asked;
use crate::problem::ApiError;
use crate::state::App;

use super::acquiring::{Acquiring, acquired_one};
use super::responses::{AuthProblems, BodyProblems, Deadlocked, Denied};

/// Acquire a lock.
///
/// Grants a free or expired resource with a new fencing token; extends the caller's own live
/// lease (same token); or, if another owner holds it, answers `acquired: false` — at once,
/// or after waiting up to `wait_ms` in first-come first-served order. After a lease expired
/// unreleased, the lock stays closed for the server's lock-delay (`acquired: false` with
/// `retry_after_ms`). `max_hold_ms` caps the new lease (`hold_until`): its first TTL, every
/// renewal and every extension end there at the latest. Needs the `lock` right; the lease is
/// the caller's principal's (the same owner name under another principal is another owner).
#[utoipa::path(post, path = "/locks/{resource}", tag = "locks",
    params(("resource" = String, Path, description = "The resource, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = AcquireRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Granted (new or extended); held by another owner; closed by a lock-delay; or, from a server shutting down, not acquired without its store's answer (`shutting_down`)", body = AcquireResponse),
        Deadlocked,
        AuthProblems,
        Denied,
        BodyProblems,
    ))]
pub async fn acquire(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    peer: Option<Extension<Peer>>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let request = parse::acquire_body(&body, &app.config.limits).map_err(bad_body)?;
    let (resource, request) = both(resource(&uri), request)?;
    let terms = request.terms(app.config.lock_delay);
    let Acquire { owner, wait, .. } = request.acquire;
    let lock = OneLock { terms, told: AsLock };
    acquired_one(app, &caller, peer, (resource, owner, wait), lock).await
}

/// An acquire of one lock, on these terms, told to the client as `told` tells it.
pub(super) struct OneLock<T> {
    pub(super) terms: Terms,
    pub(super) told: T,
}

/// How the outcome of an acquire of one lock is told to the client: as a lock's
/// ([`AsLock`]), or as an election's campaign.
pub(super) trait Tell: Send + Sync + 'static {
    /// The answer's body.
    type Answer: Serialize + Send + 'static;

    /// The answer of a server shutting down without its store's: not acquired.
    fn stopped(&self, asked: &Asked) -> Self::Answer;
    /// The answer to the client.
    fn answer(&self, asked: &Asked, outcome: &AcquireOutcome) -> Result<Self::Answer, ApiError>;
}

/// As `POST /locks/{resource}` tells it.
struct AsLock;

impl Tell for AsLock {
    type Answer = AcquireResponse;

    fn stopped(&self, asked: &Asked) -> AcquireResponse {
        outcome::encode_stopped(&asked.resource)
    }

    fn answer(&self, _: &Asked, outcome: &AcquireOutcome) -> Result<AcquireResponse, ApiError> {
        Ok(outcome::encode_acquire(outcome))
    }
}

impl<T: Tell> Acquiring for OneLock<T> {
    const OP: Op = Op::Acquire;
    type Asked = Asked;
    type Outcome = AcquireOutcome;
    type Answer = T::Answer;

    fn kind(&self) -> Kind {
        Kind::Lock
    }

    fn stopped(&self, asked: &Asked) -> T::Answer {
        self.told.stopped(asked)
    }

    async fn call(
        &self,
        waiters: &Waiters,
        asked: &Asked,
        wait: Duration,
        gone: &CancellationToken,
    ) -> Result<Acquired<AcquireOutcome>, StoreError> {
        waiters
            .acquire_unless(&asked.resource, &asked.owner, &self.terms, wait, gone)
            .await
    }

    fn granted(outcome: &AcquireOutcome) -> Vec<&Lease> {
        new_lease(outcome).into_iter().collect()
    }

    fn answer(&self, asked: &Asked, outcome: &AcquireOutcome) -> Result<T::Answer, ApiError> {
        self.told.answer(asked, outcome)
    }
}

/// The lease `outcome` granted anew, if it did.
pub(super) fn new_lease(outcome: &AcquireOutcome) -> Option<&Lease> {
    match outcome {
        AcquireOutcome::Granted { lease, .. } => Some(lease),
        _ => None,
    }
}
