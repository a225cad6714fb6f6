//! The routes: one file per endpoint (parse, validate, call the store, map the answer), and
//! [`ApiDoc`], the OpenAPI description assembled from them (`openapi.rs`, with the problems
//! every route may answer written once in `responses.rs`).
//!
//! Every acquire — of a lock, of several locks, of a permit or a hold — goes through the one
//! acquire flow of `acquiring.rs`; every release and renewal through the one judged path of
//! `judge.rs`; both make their call to the store to its end, in a task of its own from the
//! moment a client hangs up (`detached.rs`). Each
//! call to the store is timed, counted and logged in one place,
//! [`observed`](crate::observe::observed), which also publishes its events on the hub that
//! `GET /events` (`events.rs`) streams. `ui.rs` serves the dashboard's files, built into the
//! binary; `whoami.rs` tells a caller its grants, which the dashboard asks for.

mod acquire;
mod acquire_all;
mod acquiring;
mod answer;
mod detached;
mod elections;
mod events;
mod force;
mod get;
mod health;
mod hold_acquire;
mod hold_get;
mod hold_list;
mod hold_release;
mod hold_renew;
mod judge;
mod list;
mod openapi;
mod release;
mod renew;
mod responses;
mod ui;
mod whoami;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, Uri};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use fencelock_core::HoldKind;
use fencelock_wire::{FieldError, ProblemKind, hold};

use crate::auth::authenticate;
use crate::problem::{ApiError, render_problem};
use crate::state::App;

pub use crate::route::Route;
pub use openapi::ApiDoc;

/// The whole API as an axum router: the routes of locks, semaphores and read-write locks
/// behind [`authenticate`], the operations' routes open to all.
pub fn router(app: App) -> Router {
    Router::new()
        .route(
            Route::Locks.template(),
            get(list::list).post(acquire_all::acquire_all),
        )
        .route(
            Route::Lock.template(),
            post(acquire::acquire).get(get::get).delete(release::release),
        )
        .route(Route::Renew.template(), post(renew::renew))
        .route(
            Route::Holds(HoldKind::Semaphore).template(),
            get(hold_list::list_semaphores),
        )
        .route(
            Route::Hold(HoldKind::Semaphore).template(),
            post(hold_acquire::acquire_semaphore)
                .get(hold_get::get_semaphore)
                .delete(hold_release::release_semaphore),
        )
        .route(
            Route::HoldRenew(HoldKind::Semaphore).template(),
            post(hold_renew::renew_semaphore),
        )
        .route(
            Route::Holds(HoldKind::RwLock).template(),
            get(hold_list::list_rwlocks),
        )
        .route(
            Route::Hold(HoldKind::RwLock).template(),
            post(hold_acquire::acquire_rwlock)
                .get(hold_get::get_rwlock)
                .delete(hold_release::release_rwlock),
        )
        .route(
            Route::HoldRenew(HoldKind::RwLock).template(),
            post(hold_renew::renew_rwlock),
        )
        .route(
            Route::Election.template(),
            post(elections::campaign)
                .get(elections::get)
                .delete(elections::resign),
        )
        .route(Route::Proclaim.template(), post(elections::proclaim))
        .route(Route::ElectionRenew.template(), post(elections::renew))
        .route(Route::Observe.template(), get(elections::observe))
        .route(Route::Events.template(), get(events::events))
        .route(Route::WhoAmI.template(), get(whoami::whoami))
        // Only the routes above: health, readiness, metrics, the description and the
        // dashboard's files need no token.
        .route_layer(axum::middleware::from_fn_with_state(app.gate(), authenticate))
        .route(Route::Healthz.template(), get(health::healthz))
        .route(Route::Readyz.template(), get(health::readyz))
        .route(Route::Metrics.template(), get(health::metrics))
        .route(Route::OpenApi.template(), get(openapi::openapi))
        .merge(dashboard())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(app.clone(), answer))
        .with_state(app)
}

/// The dashboard's files, each answer with its security headers.
fn dashboard() -> Router<App> {
    Router::new()
        .route(Route::Ui.template(), get(ui::page))
        .route("/ui/", get(ui::to_page))
        .route(Route::UiAsset.template(), get(ui::asset))
        .route_layer(axum::middleware::from_fn(ui::guard))
}

/// Every answer as the client gets it: its pending problem rendered
/// ([`render_problem`]); then counted by the route it matched and its status. (One
/// middleware for both: each one wraps every request's future once more.)
async fn answer(State(app): State<App>, request: Request, next: Next) -> Response {
    let route = Route::of(request.extensions().get::<MatchedPath>());
    // A clone shares the path's bytes: the path is copied only for a problem.
    let uri = request.uri().clone();
    let response = render_problem(uri.path(), next.run(request).await);
    let problem = response.extensions().get::<ProblemKind>().copied();
    app.metrics.http_request(route, response.status(), problem);
    response
}

/// No route: a 404 problem — except `/locks/` and `/locks//renew` (and the same of
/// semaphores and read-write locks), whose name is empty, which is an invalid field like any
/// other bad name.
async fn not_found(uri: Uri) -> ApiError {
    let path = uri.path();
    let collections = [
        ("/locks", "resource"),
        (hold::collection(HoldKind::Semaphore), "name"),
        (hold::collection(HoldKind::RwLock), "name"),
        ("/elections", "name"),
    ];
    for (collection, field) in collections {
        if let Some(rest) = path.strip_prefix(collection)
            && (rest == "/" || rest == "//renew" || rest == "//proclaim" || rest == "//observe")
        {
            return ApiError::Invalid(vec![FieldError::new(field, "must not be empty or blank")]);
        }
    }
    ApiError::Problem(ProblemKind::NoRoute, format!("no such route: {path}"))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::Problem(
        ProblemKind::MethodNotAllowed,
        format!("{method} is not allowed on {}", uri.path()),
    )
}
