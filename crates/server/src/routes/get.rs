//! `GET /locks/{resource}`: the live lease, and this server's waiters for it.

use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use fencelock_core::{Key, Kind};
use fencelock_wire::{LeaseBody, Op, Problem, ProblemKind, WaiterBody, Watched, outcome};

use crate::auth::{Caller, Right};
use crate::extract::resource;
use crate::observe::observed;
use crate::problem::ApiError;
use crate::state::App;

use super::responses::{AuthProblems, Denied, PathProblems};

/// The live lease on a resource, with `waiters`: the acquires waiting for it at this server
/// (`owner`, `since`, `until`), head of the line first — not those at other servers sharing
/// the store; absent when nobody waits.
///
/// An expired lease is not shown: it belongs to nobody (404). Needs the `read` right.
#[utoipa::path(get, path = "/locks/{resource}", tag = "locks",
    params(("resource" = String, Path, description = "The resource, percent-encoded: 1 to 255 bytes once decoded, no control characters", min_length = 1, max_length = 255, pattern = r"^[^\x00-\x1f\x7f]+$")),
    responses(
        (status = 200, description = "The live lease", body = Watched<LeaseBody>),
        (status = 404, description = "No live lease", body = Problem, content_type = "application/problem+json"),
        AuthProblems,
        Denied,
        PathProblems,
    ))]
pub async fn get(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
) -> Result<Json<Watched<LeaseBody>>, ApiError> {
    let resource = resource(&uri).map_err(|e| ApiError::Invalid(vec![e]))?;
    caller.may(Right::Read, &resource)?;
    let call = app.waiters.store().get(&resource);
    match observed(&app, Kind::Lock, Op::Get, &(), call).await? {
        Some(lease) => Ok(Json(Watched {
            body: LeaseBody::from(&lease),
            waiters: waiters(&app, &Key::lock(&resource)),
        })),
        None => Err(ApiError::Problem(
            ProblemKind::NotFound,
            outcome::not_found_detail(&resource),
        )),
    }
}

/// This server's waiters for `key`, head of the line first.
pub(super) fn waiters(app: &App, key: &Key) -> Vec<WaiterBody> {
    app.waiters.waiting_on(key).iter().map(WaiterBody::from).collect()
}
