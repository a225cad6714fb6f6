//! `GET /locks?prefix=&limit=&cursor=`: live leases, ordered by resource, in pages.

use axum::Json;
use axum::extract::{RawQuery, State};
use fencelock_core::{Kind, ListQuery};
use fencelock_wire::{LeaseBody, ListResponse, Op, parse};
use tokio::time::Instant;

use crate::observe::observe;
use crate::problem::ApiError;
use crate::state::App;

use super::PathProblems;

/// List live leases.
///
/// Ordered by the bytes of the resource name; `next_cursor` is `null` on the last page.
#[utoipa::path(get, path = "/locks", tag = "locks",
    params(
        ("prefix" = Option<String>, Query, description = "Only resources starting with this", max_length = 255, pattern = r"^[^\x00-\x1f\x7f]*$"),
        ("limit" = Option<u32>, Query, description = "Page size, 1 to 1000 (default 100)", minimum = 1, maximum = 1000),
        ("cursor" = Option<String>, Query, description = "The previous page's next_cursor", pattern = r"^([2-6][0-9a-f]|7[0-9a-e]|[89a-f][0-9a-f])+$"),
    ),
    responses(
        (status = 200, description = "One page of live leases", body = ListResponse),
        PathProblems,
    ))]
pub async fn list(State(app): State<App>, RawQuery(query): RawQuery) -> Result<Json<ListResponse>, ApiError> {
    let query = parse_query(query.as_deref().unwrap_or(""))?;
    let started = Instant::now();
    let page = app.waiters.store().list(&query).await;
    observe(&app, Kind::Lock, Op::List, &(), &page, started.elapsed());
    let page = page?;
    Ok(Json(ListResponse {
        locks: page.leases.iter().map(LeaseBody::from).collect(),
        next_cursor: page.next.as_ref().map(parse::encode_cursor),
    }))
}

pub(super) fn parse_query(raw: &str) -> Result<ListQuery, ApiError> {
    let pairs = parse::query_pairs(raw).map_err(|error| ApiError::Invalid(vec![error]))?;
    let get = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let prefix = parse::list_prefix(get("prefix"));
    let limit = parse::list_limit(get("limit"));
    let after = get("cursor").map(parse::cursor).transpose();
    match (prefix, limit, after) {
        (Ok(prefix), Ok(limit), Ok(after)) => Ok(ListQuery { prefix, after, limit }),
        (prefix, limit, after) => Err(ApiError::Invalid(
            [prefix.err(), limit.err(), after.err()]
                .into_iter()
                .flatten()
                .collect(),
        )),
    }
}
