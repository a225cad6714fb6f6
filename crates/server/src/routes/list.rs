//! `GET /locks?prefix=&limit=&cursor=`: live leases, ordered by resource, in pages; and
//! [`readable`], the page of any list that a caller may see.

use axum::Json;
use axum::extract::{RawQuery, State};
use fencelock_core::{HoldPage, Kind, Lease, LeasePage, ListQuery, LockStore, Resource, StoreError};
use fencelock_wire::{LeaseBody, ListResponse, Op, parse};

use crate::auth::Caller;
use crate::observe::observed;
use crate::problem::ApiError;
use crate::state::App;

use super::responses::{AuthProblems, PathProblems};

/// List live leases.
///
/// Ordered by the bytes of the resource name; `next_cursor` is `null` on the last page. Only
/// the names the caller has the `read` right on are listed: a page may then hold fewer than
/// `limit` (even none) while `next_cursor` is not `null`.
#[utoipa::path(get, path = "/locks", tag = "locks",
    params(
        ("prefix" = Option<String>, Query, description = "Only resources starting with this", max_length = 255, pattern = r"^[^\x00-\x1f\x7f]*$"),
        ("limit" = Option<u32>, Query, description = "Page size, 1 to 1000 (default 100)", minimum = 1, maximum = 1000),
        ("cursor" = Option<String>, Query, description = "The previous page's next_cursor", pattern = r"^([2-6][0-9a-f]|7[0-9a-e]|[89a-f][0-9a-f])+$"),
    ),
    responses(
        (status = 200, description = "One page of live leases", body = ListResponse),
        AuthProblems,
        PathProblems,
    ))]
pub async fn list(
    State(app): State<App>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<ListResponse>, ApiError> {
    let query = parse_query(query.as_deref().unwrap_or(""))?;
    let store = app.waiters.store();
    let call = readable(&caller, query, |query| locks(store.as_ref(), query));
    let page = observed(&app, Kind::Lock, Op::List, &(), call).await?;
    Ok(Json(ListResponse {
        locks: page.leases.iter().map(LeaseBody::from).collect(),
        next_cursor: page.next.as_ref().map(parse::encode_cursor),
    }))
}

/// A page of the live leases of locks: never of an election's ([`ListQuery::past_elections`]).
pub(super) async fn locks(store: &dyn LockStore, query: ListQuery) -> Result<LeasePage, StoreError> {
    store.list(&query.past_elections()).await
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

/// A page of a list: of leases, or of names with their holds.
pub(super) trait Page: Sized {
    /// One entry: a lease, or a name with its holds.
    type Item;
    /// The entries and where the next page starts.
    fn into_parts(self) -> (Vec<Self::Item>, Option<Resource>);
    /// A page of `items`, the next one starting after `next`.
    fn from_parts(items: Vec<Self::Item>, next: Option<Resource>) -> Self;
    /// The name an entry is listed by.
    fn name(item: &Self::Item) -> &Resource;
}

impl Page for LeasePage {
    type Item = Lease;

    fn into_parts(self) -> (Vec<Lease>, Option<Resource>) {
        (self.leases, self.next)
    }

    fn from_parts(leases: Vec<Lease>, next: Option<Resource>) -> Self {
        Self { leases, next }
    }

    fn name(lease: &Lease) -> &Resource {
        &lease.resource
    }
}

impl Page for HoldPage {
    type Item = (Resource, Vec<fencelock_core::Hold>);

    fn into_parts(self) -> (Vec<Self::Item>, Option<Resource>) {
        (self.names, self.next)
    }

    fn from_parts(names: Vec<Self::Item>, next: Option<Resource>) -> Self {
        Self { names, next }
    }

    fn name((name, _): &Self::Item) -> &Resource {
        name
    }
}

/// The page of `query` that `caller` may see: only names it may read, at most `query.limit`
/// of them, with a cursor that continues after the last one.
///
/// The names a caller may read under the asked prefix are the names under a few prefixes
/// ([`scopes`]), each a range of names of its own, in order; each is asked of the store (at
/// most once, for what is left of the page), so the store never reads names that would be
/// dropped, and a page is full whenever the store has enough. A page that fills up before
/// the last range ends with a cursor even if the ranges after it are empty: the next page is
/// then empty, with none.
pub(super) async fn readable<P, F>(
    caller: &Caller,
    query: ListQuery,
    mut fetch: impl FnMut(ListQuery) -> F,
) -> Result<P, StoreError>
where
    P: Page,
    F: Future<Output = Result<P, StoreError>>,
{
    let scopes = scopes(&query.prefix, &caller.readable());
    let mut items = Vec::new();
    for (i, prefix) in scopes.iter().enumerate() {
        if query.after.as_ref().is_some_and(|after| before(prefix, after)) {
            continue;
        }
        let page = fetch(ListQuery {
            prefix: prefix.clone(),
            after: query.after.clone(),
            limit: query.limit - items.len(),
        })
        .await?;
        let (got, next) = page.into_parts();
        items.extend(got);
        if next.is_some() {
            return Ok(P::from_parts(items, next));
        }
        if items.len() == query.limit {
            let more = i + 1 < scopes.len();
            let next = items.last().filter(|_| more).map(|item| P::name(item).clone());
            return Ok(P::from_parts(items, next));
        }
    }
    Ok(P::from_parts(items, None))
}

/// Whether every name under `prefix` comes before `after` (so a page after it has none).
fn before(prefix: &str, after: &Resource) -> bool {
    prefix < after.as_str() && !after.as_str().starts_with(prefix)
}

/// The prefixes whose names are exactly the names under `asked` that some prefix of
/// `readable` covers: none of them a prefix of another, so that their ranges of names do not
/// overlap, and sorted, which puts the ranges in the order of the names.
fn scopes(asked: &str, readable: &[&str]) -> Vec<String> {
    let mut covered: Vec<&str> = readable
        .iter()
        .filter_map(|&granted| {
            if asked.starts_with(granted) {
                Some(asked)
            } else {
                granted.starts_with(asked).then_some(granted)
            }
        })
        .collect();
    covered.sort_unstable();
    // Sorted, every name under a prefix comes right after it: checking the last kept one
    // finds every prefix already covered.
    let mut scopes: Vec<String> = Vec::with_capacity(covered.len());
    for prefix in covered {
        if !scopes
            .last()
            .is_some_and(|kept| prefix.starts_with(kept.as_str()))
        {
            scopes.push(prefix.to_owned());
        }
    }
    scopes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scopes_are_the_readable_prefixes_under_the_asked_one() {
        assert_eq!(scopes("", &[""]), [""]);
        assert_eq!(scopes("pay", &[""]), ["pay"]);
        assert_eq!(scopes("payment:4", &["payment:"]), ["payment:4"]);
        assert_eq!(scopes("", &["payment:", "ops:", "pay"]), ["ops:", "pay"]);
        assert_eq!(
            scopes("pay", &["payment:", "payroll:", "ops:"]),
            ["payment:", "payroll:"]
        );
        assert_eq!(scopes("ops:", &["payment:"]), Vec::<String>::new());
        assert_eq!(scopes("x", &[]), Vec::<String>::new());
        assert_eq!(scopes("a", &["a", "a", "ab"]), ["a"]);
    }

    #[test]
    fn a_prefix_is_before_a_cursor_when_all_its_names_are() {
        let after = Resource::new("m:5").unwrap();
        assert!(before("a:", &after));
        assert!(!before("m:", &after));
        assert!(!before("m:5", &after));
        assert!(!before("z:", &after));
        assert!(!before("", &after));
    }
}
