//! The one judged path: a call on a held lease that the store judges (release, renew, of a
//! lock's lease or of a semaphore's permit or a read-write lock's hold) adds an `impl` of
//! [`Judge`], and [`judged`] does the rest; [`Reply`] turns what it answers into a response.
//! An election's calls on its leadership (proclaim, renew, resign) are judged calls on its
//! lock told in the election's words: they take the two steps of [`judged`], [`authorised`]
//! and [`judge`], and answer themselves.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fencelock_core::{HoldKind, Kind, LockStore, Refusal, Resource, StoreError};
use fencelock_wire::{HoldItem, Judged, LeaseBody, Op, outcome};

use crate::auth::{Caller, Right};
use crate::observe::{Asked, Observed, observed};
use crate::problem::ApiError;
use crate::state::App;

use super::answer;
use super::detached::detached;

/// A call on a held lease that the store judges.
pub(super) trait Judge: Sized + Send + Sync + 'static {
    /// The operation, for metrics and log lines.
    const OP: Op;
    /// What the store answers.
    type Outcome: Judged<Body: Reply> + Observed<Asked = Asked> + Send + 'static;

    /// The kind of lease the call is on.
    fn kind(&self) -> Kind;
    /// What the call asks for on `resource` (the owner, the token), as the log lines tell it.
    fn asked(&self, resource: Resource) -> Asked;
    /// Asks the store for what `asked` tells of.
    fn call(
        &self,
        store: &dyn LockStore,
        asked: &Asked,
    ) -> impl Future<Output = Result<Self::Outcome, StoreError>> + Send;
}

/// Given the caller and the checked name and request: check the caller's `lock` right, make
/// the owner the caller's, call the store (to its end, whatever the client does), observe, encode — the whole
/// of a judged call.
pub(super) async fn judged<J: Judge>(
    app: App,
    caller: &Caller,
    resource: Resource,
    request: J,
) -> Result<Response, ApiError> {
    let asked = authorised(caller, request.asked(resource))?;
    detached(async move {
        let kind = request.kind();
        match judge(&app, &request, &asked).await?.judged() {
            Ok(done) => Ok(J::Outcome::encode(done).reply(J::Outcome::DONE_STATUS)),
            Err(refusal) => Err(ApiError::Problem(
                refusal.into(),
                refusal_detail(kind, refusal, &asked),
            )),
        }
    })
    .await
}

/// `asked` as `caller` may ask it: its `lock` right on the name checked, the owner made its
/// principal's.
pub(super) fn authorised(caller: &Caller, mut asked: Asked) -> Result<Asked, ApiError> {
    caller.may(Right::Lock, &asked.resource)?;
    asked.owner = caller.owns(asked.owner);
    Ok(asked)
}

/// What the store answers to `request` on what `asked` tells of, observed (counted, logged).
pub(super) async fn judge<J: Judge>(app: &App, request: &J, asked: &Asked) -> Result<J::Outcome, ApiError> {
    let call = request.call(app.waiters.store().as_ref(), asked);
    Ok(observed(app, request.kind(), J::OP, asked, call).await?)
}

/// The problem's `detail` for a refusal of a call on `kind`.
fn refusal_detail(kind: Kind, refusal: Refusal, asked: &Asked) -> String {
    let (name, owner) = (&asked.resource, &asked.owner);
    match kind.hold_kind() {
        None => outcome::refusal_detail(refusal, name, owner),
        Some(kind) => outcome::hold_refusal_detail(kind, refusal, name, owner),
    }
}

/// A release or renewal (`R`) of a semaphore's permit or a read-write lock's hold.
pub(super) struct OfHold<R> {
    pub(super) kind: HoldKind,
    pub(super) request: R,
}

/// The body of a done call as an answer with `status`.
pub(super) trait Reply {
    /// The answer.
    fn reply(self, status: u16) -> Response;
}

/// No body (204).
impl Reply for () {
    fn reply(self, status: u16) -> Response {
        status_code(status).into_response()
    }
}

impl Reply for LeaseBody {
    fn reply(self, status: u16) -> Response {
        answer::json(status_code(status), &self)
    }
}

impl Reply for HoldItem {
    fn reply(self, status: u16) -> Response {
        answer::json(status_code(status), &self)
    }
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}
