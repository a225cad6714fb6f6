//! `POST /locks`: acquire several locks, all or none, waiting up to `wait_ms` for all of them
//! at once.

use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use fencelock_core::{AcquireAllOutcome, Acquired, Kind, Lease, StoreError, Terms, Waiters};
use fencelock_wire::{Acquire, AcquireAll, AcquireAllRequest, AcquireAllResponse, Op, outcome, parse};
use tokio_util::sync::CancellationToken;

use crate::auth::Caller;
use crate::extract::JsonObject;
use crate::listener::Peer;
use crate::observe::AskedAll;
use crate::problem::ApiError;
use crate::state::App;

use super::acquire::new_lease;
use super::acquiring::{Acquiring, acquired};
use super::responses::{AuthProblems, BodyProblems, Deadlocked, Denied};

/// Acquire several locks at once, all or none.
///
/// Grants every lock of `resources` (a new lease with a new fencing token each, in the order
/// given; the caller's own live leases are extended), or none: `acquired: false` with every
/// lock in the way — held by another owner, or closed by a lock-delay — and nothing changed.
/// With `wait_ms`, waits for all of them at once, in first-come first-served order; two
/// such acquires in opposite orders never wait for each other. Each lock is then an
/// ordinary lease, renewed and released one by one at `/locks/{resource}`. Needs the `lock`
/// right on every name (403, and nothing acquired, otherwise); the leases are the caller's
/// principal's.
#[utoipa::path(post, path = "/locks", tag = "locks",
    request_body(content = AcquireAllRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Every lock granted (new or extended), in the order asked; or none, with every lock in the way; or, from a server shutting down, none without its store's answer (`shutting_down`)", body = AcquireAllResponse),
        Deadlocked,
        AuthProblems,
        Denied,
        BodyProblems,
    ))]
pub async fn acquire_all(
    State(app): State<App>,
    caller: Caller,
    peer: Option<Extension<Peer>>,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    let AcquireAll { resources, lock } = parse::acquire_all(&body, &app.config.limits)?;
    let terms = lock.terms(app.config.lock_delay);
    let Acquire { owner, wait, .. } = lock.acquire;
    let asked = AskedAll { resources, owner };
    acquired(app, &caller, peer, (asked, wait), AllLocks(terms)).await
}

/// An acquire of several locks, all or none, on these terms.
struct AllLocks(Terms);

impl Acquiring for AllLocks {
    const OP: Op = Op::AcquireAll;
    type Asked = AskedAll;
    type Outcome = AcquireAllOutcome;
    type Answer = AcquireAllResponse;

    fn kind(&self) -> Kind {
        Kind::Lock
    }

    fn stopped(&self, asked: &AskedAll) -> AcquireAllResponse {
        outcome::encode_all_stopped(&asked.resources)
    }

    async fn call(
        &self,
        waiters: &Waiters,
        asked: &AskedAll,
        wait: Duration,
        gone: &CancellationToken,
    ) -> Result<Acquired<AcquireAllOutcome>, StoreError> {
        waiters
            .acquire_all_unless(&asked.resources, &asked.owner, &self.0, wait, gone)
            .await
    }

    fn granted(outcome: &AcquireAllOutcome) -> Vec<&Lease> {
        match outcome {
            AcquireAllOutcome::Granted(granted) => granted.iter().filter_map(new_lease).collect(),
            AcquireAllOutcome::Refused(_) => Vec::new(),
        }
    }

    fn answer(&self, _: &AskedAll, outcome: &AcquireAllOutcome) -> Result<AcquireAllResponse, ApiError> {
        Ok(outcome::encode_acquire_all(outcome))
    }
}
