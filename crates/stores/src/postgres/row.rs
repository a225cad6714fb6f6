//! Reading the rows the statements of [`super::sql`] return, and writing their parameters.

use std::time::Duration;

use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Busy, Claim, EndedLease, Expired, FencingToken, ForceOutcome, Hold,
    HoldKind, HoldOutcome, HoldPage, Kind, Lease, Meta, Owner, Principal, ReleaseOutcome, RenewOutcome,
    Resource, Timestamp, Ttl,
};
use tokio_postgres::Row;

use super::error::PgError;

type Result<T, E = PgError> = std::result::Result<T, E>;

/// The answer of [`super::sql::ACQUIRE`] for the one resource asked.
pub(super) fn acquired(resource: &Resource, rows: &[Row]) -> Result<AcquireOutcome> {
    let mut outcomes = match acquired_all(std::slice::from_ref(resource), rows)? {
        AcquireAllOutcome::Granted(outcomes) | AcquireAllOutcome::Refused(outcomes) => outcomes,
    };
    outcomes
        .pop()
        .ok_or_else(|| PgError::Data("acquire returned no row".into()))
}

/// The answer of [`super::sql::ACQUIRE`] for `resources`, in the order asked: each row says
/// which name it is of by its place (from 1), then its role.
pub(super) fn acquired_all(resources: &[Resource], rows: &[Row]) -> Result<AcquireAllOutcome> {
    // The lock's columns follow the place, the role and `retry_in_ms`.
    const LOCK: usize = 3;
    let mut granted: Vec<Option<AcquireOutcome>> = vec![None; resources.len()];
    let mut expired: Vec<Option<Lease>> = vec![None; resources.len()];
    let mut refused = Vec::new();
    for row in rows {
        let at: i32 = row.try_get(0).map_err(PgError::Row)?;
        let (at, resource) = usize::try_from(at)
            .ok()
            .and_then(|at| at.checked_sub(1))
            .and_then(|at| Some((at, resources.get(at)?)))
            .ok_or_else(|| PgError::Data(format!("acquire: no resource at {at}")))?;
        let role: &str = row.try_get(1).map_err(PgError::Row)?;
        let retry_in = || -> Result<Duration> {
            Ok(Duration::from_millis(millis(
                row.try_get(2).map_err(PgError::Row)?,
            )?))
        };
        let lease = || lock(resource.clone(), row, LOCK);
        match role {
            "held" => refused.push((
                at,
                AcquireOutcome::Held {
                    holder: lease()?,
                    expires_in: retry_in()?,
                },
            )),
            "delayed" => refused.push((
                at,
                AcquireOutcome::Delayed {
                    resource: resource.clone(),
                    retry_in: retry_in()?,
                },
            )),
            "expired" => expired[at] = Some(lease()?),
            "granted" => {
                granted[at] = Some(AcquireOutcome::Granted {
                    lease: lease()?,
                    expired: None,
                });
            }
            "extended" => granted[at] = Some(AcquireOutcome::Extended(lease()?)),
            other => return Err(PgError::Data(format!("acquire: unknown row {other:?}"))),
        }
    }
    if !refused.is_empty() {
        refused.sort_by_key(|(at, _)| *at);
        return Ok(AcquireAllOutcome::Refused(
            refused.into_iter().map(|(_, refusal)| refusal).collect(),
        ));
    }
    granted
        .into_iter()
        .zip(expired)
        .map(|(outcome, replaced)| match outcome {
            Some(AcquireOutcome::Granted { lease, .. }) => Ok(AcquireOutcome::Granted {
                lease,
                expired: replaced,
            }),
            Some(outcome) => Ok(outcome),
            None => Err(PgError::Data(
                "acquire answered neither a grant nor a refusal for a lock".into(),
            )),
        })
        .collect::<Result<_>>()
        .map(AcquireAllOutcome::Granted)
}

/// The answer of [`super::sql::RELEASE`].
pub(super) fn released(resource: &Resource, rows: &[Row]) -> Result<ReleaseOutcome> {
    release(rows, LOCK_COLUMNS, |row| lock(resource.clone(), row, 0))
}

/// The answer of [`super::sql::RELEASE_HOLD`].
pub(super) fn hold_released(name: &Resource, rows: &[Row]) -> Result<ReleaseOutcome> {
    release(rows, LEASE_COLUMNS, |row| lease(name.clone(), row, 0))
}

/// A release's answer: no row, or one whose column `verdict_at` is the verdict, followed by
/// the time the lease or hold (which `read` reads) ended.
fn release(
    rows: &[Row],
    verdict_at: usize,
    read: impl FnOnce(&Row) -> Result<Lease>,
) -> Result<ReleaseOutcome> {
    let Some(row) = rows.first() else {
        return Ok(ReleaseOutcome::NotFound);
    };
    Ok(match verdict(row, verdict_at)? {
        Verdict::NotFound => ReleaseOutcome::NotFound,
        Verdict::Forbidden => ReleaseOutcome::Forbidden,
        Verdict::Conflict => ReleaseOutcome::Conflict,
        Verdict::Allowed => ReleaseOutcome::Released(Some(EndedLease {
            lease: read(row)?,
            ended_at: ended_at(row, verdict_at + 1)?,
        })),
    })
}

/// The time in milliseconds in column `at`.
fn ended_at(row: &Row, at: usize) -> Result<Timestamp> {
    Ok(Timestamp::from_millis(millis(
        row.try_get(at).map_err(PgError::Row)?,
    )?))
}

/// The answer of [`super::sql::FORCE_RELEASE`] on `name`: what it ended, in token order.
pub(super) fn forced(name: &Resource, rows: &[Row]) -> Result<ForceOutcome> {
    if rows.is_empty() {
        return Ok(ForceOutcome::NotFound);
    }
    let ended = rows.iter().map(|row| {
        Ok(EndedLease {
            lease: lock(name.clone(), row, 0)?,
            ended_at: ended_at(row, LOCK_COLUMNS)?,
        })
    });
    Ok(ForceOutcome::Released(ended.collect::<Result<_>>()?))
}

/// The answer of [`super::sql::RENEW`].
pub(super) fn renewed(resource: &Resource, rows: &[Row]) -> Result<RenewOutcome> {
    renewal(rows, LOCK_COLUMNS, |row| lock(resource.clone(), row, 0))
}

/// Whether [`super::sql::RENEW`] shortened the lease (no row: there was none to renew).
pub(super) fn shortened(rows: &[Row]) -> Result<bool> {
    rows.first()
        .map_or(Ok(false), |row| row.try_get(LOCK_COLUMNS + 1))
        .map_err(PgError::Row)
}

/// The answer of [`super::sql::RENEW_HOLD`].
pub(super) fn hold_renewed(name: &Resource, rows: &[Row]) -> Result<RenewOutcome<Hold>> {
    renewal(rows, HOLD_COLUMNS, |row| hold(name.clone(), row, 0))
}

/// A renew's answer: no row, or one whose column `verdict_at` is the verdict and whose
/// renewed lease or hold `read` reads.
fn renewal<L>(
    rows: &[Row],
    verdict_at: usize,
    read: impl FnOnce(&Row) -> Result<L>,
) -> Result<RenewOutcome<L>> {
    let Some(row) = rows.first() else {
        return Ok(RenewOutcome::NotFound);
    };
    Ok(match verdict(row, verdict_at)? {
        Verdict::NotFound => RenewOutcome::NotFound,
        Verdict::Forbidden => RenewOutcome::Forbidden,
        Verdict::Conflict => RenewOutcome::Conflict,
        Verdict::Allowed => RenewOutcome::Renewed(read(row)?),
    })
}

/// The answer of [`super::sql::ACQUIRE_HOLD`] on `name`.
pub(super) fn acquired_hold(name: &Resource, rows: &[Row]) -> Result<HoldOutcome> {
    // The hold's columns follow the role, `writer_waits` and `retry_in_ms`.
    const HOLD: usize = 3;
    let mut granted = None;
    let mut replaced = None;
    let mut busy = None;
    let mut holders = Vec::new();
    for row in rows {
        let role: &str = row.try_get(0).map_err(PgError::Row)?;
        match role {
            "granted" => granted = Some(hold(name.clone(), row, HOLD)?),
            "replaced" => replaced = Some(hold(name.clone(), row, HOLD)?),
            "extended" => return Ok(HoldOutcome::Extended(hold(name.clone(), row, HOLD)?)),
            "mismatch" => {
                return Ok(HoldOutcome::LimitMismatch {
                    limit: limit(row.try_get(HOLD + LEASE_COLUMNS + 1).map_err(PgError::Row)?)?,
                });
            }
            "busy" => {
                let writer_waits: bool = row.try_get(1).map_err(PgError::Row)?;
                let retry_in = millis(row.try_get(2).map_err(PgError::Row)?)?;
                busy = Some((writer_waits, Duration::from_millis(retry_in)));
            }
            "holder" => holders.push(hold(name.clone(), row, HOLD)?),
            other => return Err(PgError::Data(format!("acquire of a hold: unknown row {other:?}"))),
        }
    }
    match (granted, busy) {
        (Some(hold), None) => Ok(HoldOutcome::Granted { hold, replaced }),
        (None, Some((writer_waits, retry_in))) => Ok(HoldOutcome::Busy(Busy {
            holders,
            writer_waits,
            retry_in,
        })),
        _ => Err(PgError::Data(
            "acquire of a hold returned neither a grant nor a refusal".into(),
        )),
    }
}

/// The holds of [`super::sql::HOLDS`]' answer on `name`.
pub(super) fn holds(name: &Resource, rows: &[Row]) -> Result<Vec<Hold>> {
    rows.iter().map(|row| hold(name.clone(), row, 0)).collect()
}

/// The page of [`super::sql::LIST_HOLDS`]' answer, asked for `limit` names and one more (to
/// know whether another page follows).
pub(super) fn hold_page(rows: &[Row], limit: usize) -> Result<HoldPage> {
    let mut names: Vec<(Resource, Vec<Hold>)> = Vec::new();
    for row in rows {
        let name = resource(row)?;
        let hold = hold(name.clone(), row, 1)?;
        // The rows come by name, then token.
        match names.last_mut() {
            Some((last, group)) if *last == name => group.push(hold),
            _ => names.push((name, vec![hold])),
        }
    }
    Ok(HoldPage::from_one_past(names, limit))
}

/// What [`super::sql::PURGE`] forgot: rows of a kind, a name, and a lock's columns.
pub(super) fn expired(rows: &[Row]) -> Result<Vec<Expired>> {
    rows.iter()
        .map(|row| {
            let kind: &str = row.try_get(0).map_err(PgError::Row)?;
            let kind = match kind {
                "lock" => Kind::Lock,
                other => hold_kind(other)
                    .ok_or_else(|| PgError::Data(format!("unknown kind {other:?}")))?
                    .into(),
            };
            let name: &str = row.try_get(1).map_err(PgError::Row)?;
            let name = Resource::new(name).map_err(|e| PgError::Data(format!("name {name:?}: {e}")))?;
            Ok(Expired {
                kind,
                lease: lock(name, row, 2)?,
            })
        })
        .collect()
}

/// The lease of [`super::sql::GET`]'s answer, if any.
pub(super) fn found(resource: &Resource, rows: &[Row]) -> Result<Option<Lease>> {
    rows.first().map(|row| lock(resource.clone(), row, 0)).transpose()
}

/// The leases of rows whose first column is the resource, then a lock's columns (as
/// [`super::sql::LIST`] returns them).
pub(super) fn leases(rows: &[Row]) -> Result<Vec<Lease>> {
    rows.iter().map(|row| lock(resource(row)?, row, 1)).collect()
}

/// Release and renew's judgement of the caller (the `verdict` column): `Forbidden` is
/// another owner's lease, or for a hold, a namesake's of another principal.
enum Verdict {
    NotFound,
    Forbidden,
    Conflict,
    Allowed,
}

fn verdict(row: &Row, column: usize) -> Result<Verdict> {
    match row.try_get::<_, i32>(column).map_err(PgError::Row)? {
        0 => Ok(Verdict::NotFound),
        1 => Ok(Verdict::Forbidden),
        2 => Ok(Verdict::Conflict),
        3 => Ok(Verdict::Allowed),
        other => Err(PgError::Data(format!("unknown verdict {other}"))),
    }
}

/// How many columns a lease takes in a row: see [`lease`].
const LEASE_COLUMNS: usize = 6;

/// How many columns a lock's lease takes in a row: see [`lock`].
const LOCK_COLUMNS: usize = LEASE_COLUMNS + 2;

/// How many columns a hold takes in a row: see [`hold`].
const HOLD_COLUMNS: usize = LEASE_COLUMNS + 2;

/// The lease in `row`, whose columns from `first` on are owner, principal (NULL: none),
/// token, acquired_at and expires_at (in milliseconds) and meta (NULL: none); with no terms,
/// as a hold's lease has none (a lock's are read by [`lock`]).
fn lease(resource: Resource, row: &Row, first: usize) -> Result<Lease> {
    let owner: &str = row.try_get(first).map_err(PgError::Row)?;
    let principal: Option<&str> = row.try_get(first + 1).map_err(PgError::Row)?;
    let principal = principal
        .map(|p| Principal::new(p).map_err(|e| PgError::Data(format!("principal {p:?}: {e}"))))
        .transpose()?;
    let token: i64 = row.try_get(first + 2).map_err(PgError::Row)?;
    let acquired_at: i64 = row.try_get(first + 3).map_err(PgError::Row)?;
    let expires_at: i64 = row.try_get(first + 4).map_err(PgError::Row)?;
    let meta: Option<&str> = row.try_get(first + 5).map_err(PgError::Row)?;
    let meta = meta
        .map(|m| Meta::parse(m).map_err(|e| PgError::Data(format!("meta {m:?}: {e}"))))
        .transpose()?;
    Ok(Lease {
        resource,
        owner: Owner::new(owner)
            .map_err(|e| PgError::Data(format!("owner {owner:?}: {e}")))?
            .of(principal),
        token: FencingToken(u64::try_from(token).map_err(|_| PgError::Data(format!("token {token}")))?),
        acquired_at: Timestamp::from_millis(millis(acquired_at)?),
        expires_at: Timestamp::from_millis(millis(expires_at)?),
        hold_until: None,
        lock_delay: Duration::ZERO,
        meta,
    })
}

/// The lease of a lock in `row`: the lease's columns from `first` on (see [`lease`]), then
/// its terms: hold_until in milliseconds (NULL: no cap) and lock_delay in milliseconds.
fn lock(resource: Resource, row: &Row, first: usize) -> Result<Lease> {
    let lease = lease(resource, row, first)?;
    let hold_until: Option<i64> = row.try_get(first + LEASE_COLUMNS).map_err(PgError::Row)?;
    let lock_delay: i64 = row.try_get(first + LEASE_COLUMNS + 1).map_err(PgError::Row)?;
    Ok(Lease {
        hold_until: hold_until.map(millis).transpose()?.map(Timestamp::from_millis),
        lock_delay: Duration::from_millis(millis(lock_delay)?),
        ..lease
    })
}

/// The hold in `row`: the lease's columns from `first` on (see [`lease`]), then the claim
/// and the semaphore's limit.
fn hold(name: Resource, row: &Row, first: usize) -> Result<Hold> {
    let lease = lease(name, row, first)?;
    let claim: &str = row.try_get(first + LEASE_COLUMNS).map_err(PgError::Row)?;
    let claim = match claim {
        "permit" => Claim::Permit {
            limit: limit(row.try_get(first + LEASE_COLUMNS + 1).map_err(PgError::Row)?)?,
        },
        "read" => Claim::Read,
        "write" => Claim::Write,
        other => return Err(PgError::Data(format!("unknown claim {other:?}"))),
    };
    Ok(Hold { lease, claim })
}

fn limit(value: Option<i64>) -> Result<u32> {
    value
        .and_then(|limit| u32::try_from(limit).ok())
        .ok_or_else(|| PgError::Data(format!("semaphore limit {value:?}")))
}

fn resource(row: &Row) -> Result<Resource> {
    let name: &str = row.try_get(0).map_err(PgError::Row)?;
    Resource::new(name).map_err(|e| PgError::Data(format!("resource {name:?}: {e}")))
}

fn millis(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| PgError::Data(format!("time {value} ms is before 1970")))
}

/// The `$…` parameter of an owner's principal: NULL for none.
pub(super) fn principal_param(owner: &Owner) -> Option<&str> {
    owner.principal().map(Principal::as_str)
}

/// The `$…` parameter of a TTL, in milliseconds.
pub(super) fn ttl_param(ttl: Ttl) -> Result<i64> {
    i64::try_from(ttl.as_millis()).map_err(|_| PgError::TtlTooLong(ttl))
}

/// The `$…` parameter of a lock-delay, in milliseconds.
pub(super) fn delay_param(delay: Duration) -> Result<i64> {
    i64::try_from(delay.as_millis()).map_err(|_| PgError::DelayTooLong(delay))
}

/// A token that does not fit PostgreSQL's `bigint` was never issued by this store: compared
/// with any real token it is "another token", so `-1` (never issued) stands for it.
pub(super) fn token_param(token: Option<FencingToken>) -> Option<i64> {
    token.map(|token| i64::try_from(token.0).unwrap_or(-1))
}

/// The `kind` column and parameter of a hold.
pub(super) fn kind_param(kind: HoldKind) -> &'static str {
    match kind {
        HoldKind::Semaphore => "semaphore",
        HoldKind::RwLock => "rwlock",
    }
}

/// The kind of a hold's `kind` column (or of a hold's release notice).
pub(super) fn hold_kind(text: &str) -> Option<HoldKind> {
    [HoldKind::Semaphore, HoldKind::RwLock]
        .into_iter()
        .find(|kind| kind_param(*kind) == text)
}

/// The `claim` and `lim` parameters of `claim`.
pub(super) fn claim_param(claim: Claim) -> (&'static str, Option<i64>) {
    match claim {
        Claim::Permit { limit } => ("permit", Some(i64::from(limit))),
        Claim::Read => ("read", None),
        Claim::Write => ("write", None),
    }
}
