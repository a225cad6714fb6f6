//! `DELETE /locks/{resource}` (or `/semaphores/{name}`, `/rwlocks/{name}`) with
//! `{"force": true}`: an administrator frees the name, whoever holds it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fencelock_core::{ForceOutcome, Key, Kind};
use fencelock_wire::{Op, ProblemKind, outcome};

use crate::auth::{Caller, Right};
use crate::observe::{Forced, observed};
use crate::problem::ApiError;
use crate::state::App;

use super::detached::detached;

/// Ends every lease, permit or hold of `key` if `caller` has the `admin` right on its name:
/// 204, or 404 when nothing was held. Each lease ended is one audit line; waiters on the name
/// are woken by the store's release feed, as after any release.
pub(super) async fn force_release(app: App, caller: &Caller, key: Key) -> Result<Response, ApiError> {
    caller.may(Right::Admin, &key.name)?;
    let by = caller.principal().cloned();
    detached(async move {
        let forced = Forced {
            resource: key.name.clone(),
            by,
        };
        let call = app.waiters.store().force_release(&key);
        match observed(&app, key.kind, Op::ForceRelease, &forced, call).await? {
            ForceOutcome::Released(_) => Ok(StatusCode::NO_CONTENT.into_response()),
            ForceOutcome::NotFound => Err(ApiError::Problem(
                ProblemKind::NotFound,
                not_found_detail(key.kind, &forced),
            )),
        }
    })
    .await
}

fn not_found_detail(kind: Kind, forced: &Forced) -> String {
    match kind.hold_kind() {
        None => outcome::not_found_detail(&forced.resource),
        Some(kind) => outcome::hold_not_found_detail(kind, &forced.resource),
    }
}
