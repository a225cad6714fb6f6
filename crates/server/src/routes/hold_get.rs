//! `GET /semaphores/{name}`, `GET /rwlocks/{name}`: the live permits or holds, and this
//! server's waiters for them.

use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use fencelock_core::{HoldKind, Key};
use fencelock_wire::{HoldsBody, Op, Problem, ProblemKind, RwLockBody, SemaphoreBody, Watched, outcome};

use crate::auth::{Caller, Right};
use crate::extract::hold_name;
use crate::observe::observed;
use crate::problem::ApiError;
use crate::state::App;

use super::responses::{AuthProblems, Denied, PathProblems};

/// The live permits of a semaphore, in token order, with its limit, and `waiters`: the
/// acquires waiting for a permit at this server (as `GET /locks/{resource}` shows them).
/// Needs the `read` right.
#[utoipa::path(get, path = "/semaphores/{name}", tag = "semaphores",
    params(("name" = String, Path, description = "The semaphore, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    responses(
        (status = 200, description = "The live permits", body = Watched<SemaphoreBody>),
        (status = 404, description = "No live permit", body = Problem, content_type = "application/problem+json"),
        AuthProblems,
        Denied,
        PathProblems,
    ))]
pub async fn get_semaphore(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
) -> Result<Json<Watched<HoldsBody>>, ApiError> {
    get(app, &caller, HoldKind::Semaphore, &uri).await
}

/// The live holds of a read-write lock, in token order, with the mode they hold, and
/// `waiters`: the acquires waiting at this server, each with the `mode` it asks for (a
/// waiting writer holds back later readers). Needs the `read` right.
#[utoipa::path(get, path = "/rwlocks/{name}", tag = "rwlocks",
    params(("name" = String, Path, description = "The read-write lock, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    responses(
        (status = 200, description = "The live holds", body = Watched<RwLockBody>),
        (status = 404, description = "Nothing held", body = Problem, content_type = "application/problem+json"),
        AuthProblems,
        Denied,
        PathProblems,
    ))]
pub async fn get_rwlock(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
) -> Result<Json<Watched<HoldsBody>>, ApiError> {
    get(app, &caller, HoldKind::RwLock, &uri).await
}

async fn get(
    app: App,
    caller: &Caller,
    kind: HoldKind,
    uri: &Uri,
) -> Result<Json<Watched<HoldsBody>>, ApiError> {
    let name = hold_name(kind, uri).map_err(|e| ApiError::Invalid(vec![e]))?;
    caller.may(Right::Read, &name)?;
    let call = app.waiters.store().holds(kind, &name);
    let holds = observed(&app, kind.into(), Op::Get, &(), call).await?;
    outcome::encode_holds(kind, &name, &holds)
        .map(|body| {
            Json(Watched {
                body,
                waiters: super::get::waiters(&app, &Key::hold(kind, &name)),
            })
        })
        .ok_or_else(|| ApiError::Problem(ProblemKind::NotFound, outcome::hold_not_found_detail(kind, &name)))
}
