//! Reading the rows the statements of [`super::sql`] return, and writing their parameters.

use std::time::Duration;

use fencelock_core::{
    AcquireOutcome, EndedLease, FencingToken, Lease, Owner, ReleaseOutcome, RenewOutcome, Resource,
    Timestamp, Ttl,
};
use tokio_postgres::Row;

use super::error::PgError;

type Result<T, E = PgError> = std::result::Result<T, E>;

/// The answer of [`super::sql::ACQUIRE`] for `owner`.
pub(super) fn acquired(resource: &Resource, owner: &Owner, rows: Vec<Row>) -> Result<AcquireOutcome> {
    let row = rows
        .into_iter()
        .next()
        .ok_or_else(|| PgError::Data("acquire returned no row".into()))?;
    let lease = lease(resource.clone(), &row, 0)?;
    let granted: bool = row.try_get(4).map_err(PgError::Row)?;
    let expires_in = millis(row.try_get(5).map_err(PgError::Row)?)?;
    Ok(if granted {
        // The replaced expired lease is not reported: the statement only returns the row as
        // it is now.
        AcquireOutcome::Granted { lease, expired: None }
    } else if lease.owner == *owner {
        AcquireOutcome::Extended(lease)
    } else {
        AcquireOutcome::Held {
            holder: lease,
            expires_in: Duration::from_millis(expires_in),
        }
    })
}

/// The answer of [`super::sql::RELEASE`].
pub(super) fn released(resource: &Resource, rows: &[Row]) -> Result<ReleaseOutcome> {
    let Some(row) = rows.first() else {
        return Ok(ReleaseOutcome::NotFound);
    };
    Ok(match verdict(row)? {
        Verdict::NotFound => ReleaseOutcome::NotFound,
        Verdict::Forbidden => ReleaseOutcome::Forbidden,
        Verdict::Conflict => ReleaseOutcome::Conflict,
        Verdict::Allowed => ReleaseOutcome::Released(Some(EndedLease {
            lease: lease(resource.clone(), row, 0)?,
            ended_at: Timestamp::from_millis(millis(row.try_get(5).map_err(PgError::Row)?)?),
        })),
    })
}

/// The answer of [`super::sql::RENEW`].
pub(super) fn renewed(resource: &Resource, rows: &[Row]) -> Result<RenewOutcome> {
    let Some(row) = rows.first() else {
        return Ok(RenewOutcome::NotFound);
    };
    Ok(match verdict(row)? {
        Verdict::NotFound => RenewOutcome::NotFound,
        Verdict::Forbidden => RenewOutcome::Forbidden,
        Verdict::Conflict => RenewOutcome::Conflict,
        Verdict::Allowed => RenewOutcome::Renewed(lease(resource.clone(), row, 0)?),
    })
}

/// The lease of [`super::sql::GET`]'s answer, if any.
pub(super) fn found(resource: &Resource, rows: &[Row]) -> Result<Option<Lease>> {
    rows.first()
        .map(|row| lease(resource.clone(), row, 0))
        .transpose()
}

/// The leases of rows whose first column is the resource, then the lease's columns (as
/// [`super::sql::LIST`] and [`super::sql::PURGE`] return them).
pub(super) fn leases(rows: &[Row]) -> Result<Vec<Lease>> {
    rows.iter().map(|row| lease(resource(row)?, row, 1)).collect()
}

/// Release and renew's judgement of the caller (the `verdict` column).
enum Verdict {
    NotFound,
    Forbidden,
    Conflict,
    Allowed,
}

fn verdict(row: &Row) -> Result<Verdict> {
    match row.try_get::<_, i32>(4).map_err(PgError::Row)? {
        0 => Ok(Verdict::NotFound),
        1 => Ok(Verdict::Forbidden),
        2 => Ok(Verdict::Conflict),
        3 => Ok(Verdict::Allowed),
        other => Err(PgError::Data(format!("unknown verdict {other}"))),
    }
}

/// The lease in `row`, whose columns from `first` on are owner, token, acquired_at and
/// expires_at (the last two in milliseconds).
fn lease(resource: Resource, row: &Row, first: usize) -> Result<Lease> {
    let owner: &str = row.try_get(first).map_err(PgError::Row)?;
    let token: i64 = row.try_get(first + 1).map_err(PgError::Row)?;
    let acquired_at: i64 = row.try_get(first + 2).map_err(PgError::Row)?;
    let expires_at: i64 = row.try_get(first + 3).map_err(PgError::Row)?;
    Ok(Lease {
        resource,
        owner: Owner::new(owner).map_err(|e| PgError::Data(format!("owner {owner:?}: {e}")))?,
        token: FencingToken(u64::try_from(token).map_err(|_| PgError::Data(format!("token {token}")))?),
        acquired_at: Timestamp::from_millis(millis(acquired_at)?),
        expires_at: Timestamp::from_millis(millis(expires_at)?),
    })
}

fn resource(row: &Row) -> Result<Resource> {
    let name: &str = row.try_get(0).map_err(PgError::Row)?;
    Resource::new(name).map_err(|e| PgError::Data(format!("resource {name:?}: {e}")))
}

fn millis(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| PgError::Data(format!("time {value} ms is before 1970")))
}

/// The `$…` parameter of a TTL, in milliseconds.
pub(super) fn ttl_param(ttl: Ttl) -> Result<i64> {
    i64::try_from(ttl.as_millis()).map_err(|_| PgError::TtlTooLong(ttl))
}

/// A token that does not fit PostgreSQL's `bigint` was never issued by this store: compared
/// with any real token it is "another token", so `-1` (never issued) stands for it.
pub(super) fn token_param(token: Option<FencingToken>) -> Option<i64> {
    token.map(|token| i64::try_from(token.0).unwrap_or(-1))
}
