//! `GET /semaphores?prefix=&limit=&cursor=`, `GET /rwlocks?…`: names with live permits or
//! holds, ordered by name, in pages.

use axum::Json;
use axum::extract::{RawQuery, State};
use fencelock_core::HoldKind;
use fencelock_wire::{HoldListResponse, Op, RwLockListResponse, SemaphoreListResponse, outcome};

use crate::auth::Caller;
use crate::observe::observed;
use crate::problem::ApiError;
use crate::state::App;

use super::list::{parse_query, readable};
use super::responses::{AuthProblems, PathProblems};

/// List semaphores with live permits.
///
/// Ordered by the bytes of the name, each with its live permits in token order; `limit`
/// counts semaphores; `next_cursor` is `null` on the last page. Only the names the caller
/// has the `read` right on are listed, as for locks.
#[utoipa::path(get, path = "/semaphores", tag = "semaphores",
    params(
        ("prefix" = Option<String>, Query, description = "Only names starting with this", max_length = 255, pattern = r"^[^\x00-\x1f\x7f]*$"),
        ("limit" = Option<u32>, Query, description = "Page size (semaphores), 1 to 1000 (default 100)", minimum = 1, maximum = 1000),
        ("cursor" = Option<String>, Query, description = "The previous page's next_cursor", pattern = r"^([2-6][0-9a-f]|7[0-9a-e]|[89a-f][0-9a-f])+$"),
    ),
    responses(
        (status = 200, description = "One page of semaphores", body = SemaphoreListResponse),
        AuthProblems,
        PathProblems,
    ))]
pub async fn list_semaphores(
    State(app): State<App>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<HoldListResponse>, ApiError> {
    list(app, &caller, HoldKind::Semaphore, query).await
}

/// List read-write locks with live holds.
///
/// Ordered by the bytes of the name, each with its live holds in token order; `limit`
/// counts read-write locks; `next_cursor` is `null` on the last page. Only the names the
/// caller has the `read` right on are listed, as for locks.
#[utoipa::path(get, path = "/rwlocks", tag = "rwlocks",
    params(
        ("prefix" = Option<String>, Query, description = "Only names starting with this", max_length = 255, pattern = r"^[^\x00-\x1f\x7f]*$"),
        ("limit" = Option<u32>, Query, description = "Page size (read-write locks), 1 to 1000 (default 100)", minimum = 1, maximum = 1000),
        ("cursor" = Option<String>, Query, description = "The previous page's next_cursor", pattern = r"^([2-6][0-9a-f]|7[0-9a-e]|[89a-f][0-9a-f])+$"),
    ),
    responses(
        (status = 200, description = "One page of read-write locks", body = RwLockListResponse),
        AuthProblems,
        PathProblems,
    ))]
pub async fn list_rwlocks(
    State(app): State<App>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<HoldListResponse>, ApiError> {
    list(app, &caller, HoldKind::RwLock, query).await
}

async fn list(
    app: App,
    caller: &Caller,
    kind: HoldKind,
    query: Option<String>,
) -> Result<Json<HoldListResponse>, ApiError> {
    let query = parse_query(query.as_deref().unwrap_or(""))?;
    let store = app.waiters.store();
    let call = readable(caller, query, |query| async move {
        store.list_holds(kind, &query).await
    });
    let page = observed(&app, kind.into(), Op::List, &(), call).await?;
    Ok(Json(outcome::encode_hold_page(kind, &page)))
}
