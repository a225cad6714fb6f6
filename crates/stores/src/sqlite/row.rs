//! Rows of the file to and from leases and holds: what the writer writes and the load reads.

use std::time::Duration;

use fencelock_core::store::Result;
use fencelock_core::table::DirtyHold;
use fencelock_core::{
    Claim, FencingToken, Hold, HoldKind, Lease, Meta, Owner, Principal, Resource, Timestamp,
};
use rusqlite::params;

use super::error::{SqliteError, WriteError};

/// Writes a lease row, or deletes it; `shift` is the file's re-base shift, which the row
/// carries so that its `expires_at` needs no rewrite at the next re-base.
pub(super) fn write_row(
    tx: &rusqlite::Transaction<'_>,
    resource: &Resource,
    lease: Option<&Lease>,
    shift: i64,
) -> Result<(), WriteError> {
    let Some(lease) = lease else {
        tx.prepare_cached("DELETE FROM leases WHERE resource = ?1")?
            .execute([resource.as_str()])?;
        return Ok(());
    };
    tx.prepare_cached(
        "INSERT INTO leases (resource, owner, token, acquired_at, expires_at, shift, principal,
             hold_until, lock_delay, meta)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner, token = excluded.token,
             acquired_at = excluded.acquired_at, expires_at = excluded.expires_at,
             shift = excluded.shift, principal = excluded.principal,
             hold_until = excluded.hold_until, lock_delay = excluded.lock_delay,
             meta = excluded.meta",
    )?
    .execute(params![
        lease.resource.as_str(),
        lease.owner.as_str(),
        to_sql("fencing token", lease.token.0)?,
        to_sql("timestamp", lease.acquired_at.as_millis())?,
        to_sql("timestamp", lease.expires_at.as_millis())?,
        shift,
        lease.owner.principal().map(Principal::as_str),
        lease
            .hold_until
            .map(|cap| to_sql("timestamp", cap.as_millis()))
            .transpose()?,
        to_sql(
            "lock-delay",
            u64::try_from(lease.lock_delay.as_millis()).unwrap_or(u64::MAX)
        )?,
        lease.meta.as_ref().map(Meta::as_str),
    ])?;
    Ok(())
}

/// Writes a hold row, or deletes it, as [`write_row`] does a lease row.
pub(super) fn write_hold(
    tx: &rusqlite::Transaction<'_>,
    ((kind, name, owner), hold): &DirtyHold,
    shift: i64,
) -> Result<(), WriteError> {
    let Some(hold) = hold else {
        tx.prepare_cached("DELETE FROM holds WHERE kind = ?1 AND name = ?2 AND owner = ?3")?
            .execute([kind.as_str(), name.as_str(), owner])?;
        return Ok(());
    };
    let (claim, limit) = claim_to_sql(hold.claim);
    tx.prepare_cached(
        "INSERT INTO holds (kind, name, owner, claim, permit_limit, token, acquired_at, expires_at, shift,
             principal, meta)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT (kind, name, owner) DO UPDATE SET claim = excluded.claim,
             permit_limit = excluded.permit_limit, token = excluded.token,
             acquired_at = excluded.acquired_at, expires_at = excluded.expires_at,
             shift = excluded.shift, principal = excluded.principal, meta = excluded.meta",
    )?
    .execute(params![
        kind.as_str(),
        name.as_str(),
        owner.as_str(),
        claim,
        limit,
        to_sql("fencing token", hold.lease.token.0)?,
        to_sql("timestamp", hold.lease.acquired_at.as_millis())?,
        to_sql("timestamp", hold.lease.expires_at.as_millis())?,
        shift,
        hold.lease.owner.principal().map(Principal::as_str),
        hold.lease.meta.as_ref().map(Meta::as_str),
    ])?;
    Ok(())
}

/// A claim as the file spells it: its name, and the semaphore's limit for a permit.
pub(super) fn claim_to_sql(claim: Claim) -> (&'static str, Option<u32>) {
    match claim {
        Claim::Permit { limit } => ("permit", Some(limit)),
        Claim::Read => ("read", None),
        Claim::Write => ("write", None),
    }
}

/// The claim of a row of `kind`, or why no hold can have it.
pub(super) fn claim_from_sql(kind: HoldKind, claim: &str, limit: Option<i64>) -> Result<Claim, String> {
    let claim = match (claim, limit) {
        ("permit", Some(limit)) => Claim::Permit {
            limit: u32::try_from(limit)
                .ok()
                .filter(|l| *l >= 1)
                .ok_or_else(|| format!("limit {limit} is not from 1 to {}", u32::MAX))?,
        },
        ("read", None) => Claim::Read,
        ("write", None) => Claim::Write,
        (claim, limit) => return Err(format!("claim {claim:?} with limit {limit:?}")),
    };
    if claim.kind() != kind {
        return Err(format!("claim {claim:?} in a {kind}"));
    }
    Ok(claim)
}

/// The kind a row names, or what it names instead.
pub(super) fn kind_from_sql(kind: &str) -> Result<HoldKind, String> {
    [HoldKind::Semaphore, HoldKind::RwLock]
        .into_iter()
        .find(|k| k.as_str() == kind)
        .ok_or_else(|| format!("kind {kind:?}"))
}

pub(super) fn to_sql(what: &'static str, value: u64) -> Result<i64, WriteError> {
    i64::try_from(value).map_err(|_| WriteError::OutOfRange { what, value })
}

/// The text in column `column` of `row`, read in place.
pub(super) fn text<'r>(row: &'r rusqlite::Row<'_>, column: usize) -> Result<&'r str, SqliteError> {
    row.get_ref(column)
        .and_then(|value| value.as_str().map_err(rusqlite::Error::from))
        .map_err(SqliteError::Read)
}

/// The hold in `row` (its lease's columns as [`lease_from_row`] reads them, then kind, claim,
/// limit and principal), of a file whose re-base shift is `shift`.
pub(super) fn hold_from_row(row: &rusqlite::Row<'_>, shift: i64) -> Result<(HoldKind, Hold), SqliteError> {
    let name = text(row, 0)?;
    let corrupt = |why: String| SqliteError::Data(format!("hold on {name:?}: {why}"));
    let kind = kind_from_sql(text(row, 6)?).map_err(corrupt)?;
    let limit = row.get(8).map_err(SqliteError::Read)?;
    let claim = claim_from_sql(kind, text(row, 7)?, limit).map_err(corrupt)?;
    let lease = lease_from_row(&format!("{kind} hold"), row, shift, 9)?;
    let meta = meta_from_sql("hold", row, 10)?;
    Ok((
        kind,
        Hold {
            lease: Lease { meta, ..lease },
            claim,
        },
    ))
}

/// The lease in `row` (resource or name, owner, token, `acquired_at`, `expires_at` and the
/// shift it was written under, and the principal in column `principal`), of a file whose
/// re-base shift is `shift`; `of` says what it belongs to, for the message if it is
/// unreadable.
pub(super) fn lease_from_row(
    of: &str,
    row: &rusqlite::Row<'_>,
    shift: i64,
    principal: usize,
) -> Result<Lease, SqliteError> {
    let resource = text(row, 0)?;
    let corrupt = |what: &str, why: String| SqliteError::Data(format!("{of} of {resource:?}: {what} {why}"));
    let number = |column: usize| row.get::<_, i64>(column).map_err(SqliteError::Read);
    let expires_at = moved(number(4)?, number(5)?, shift).map_err(|why| corrupt("expires_at", why))?;
    Ok(Lease {
        resource: Resource::new(resource).map_err(|e| corrupt("resource", e.to_string()))?,
        owner: Owner::new(text(row, 1)?)
            .map_err(|e| corrupt("owner", e.to_string()))?
            .of(principal_from_sql(row, principal).map_err(|e| corrupt("principal", e))?),
        token: FencingToken(from_sql("token", number(2)?)?),
        acquired_at: Timestamp::from_millis(from_sql("acquired_at", number(3)?)?),
        expires_at: Timestamp::from_millis(from_sql("expires_at", expires_at)?),
        hold_until: None,
        lock_delay: Duration::ZERO,
        meta: None,
    })
}

/// `lease` with the terms in columns 7 (`hold_until`, moved by the re-bases since the row
/// was written, as `expires_at` is) and 8 (`lock_delay`) of its lease row.
pub(super) fn with_terms(lease: Lease, row: &rusqlite::Row<'_>, shift: i64) -> Result<Lease, SqliteError> {
    let corrupt =
        |what: &str, why: String| SqliteError::Data(format!("lease of {:?}: {what} {why}", lease.resource));
    let cap: Option<i64> = row.get(7).map_err(SqliteError::Read)?;
    let written_under: i64 = row.get(5).map_err(SqliteError::Read)?;
    let hold_until = cap
        .map(|cap| moved(cap, written_under, shift).map_err(|why| corrupt("hold_until", why)))
        .transpose()?
        .map(|cap| from_sql("hold_until", cap).map(Timestamp::from_millis))
        .transpose()?;
    let lock_delay: i64 = row.get(8).map_err(SqliteError::Read)?;
    Ok(Lease {
        hold_until,
        lock_delay: Duration::from_millis(from_sql("lock_delay", lock_delay)?),
        ..lease
    })
}

/// The metadata in column `column` of `row` (a lease's or a hold's, as `of` says): none for
/// NULL.
pub(super) fn meta_from_sql(
    of: &str,
    row: &rusqlite::Row<'_>,
    column: usize,
) -> Result<Option<Meta>, SqliteError> {
    let text: Option<&str> = row
        .get_ref(column)
        .and_then(|value| value.as_str_or_null().map_err(rusqlite::Error::from))
        .map_err(SqliteError::Read)?;
    text.map(|text| Meta::parse(text).map_err(|e| SqliteError::Data(format!("{of} meta {text:?}: {e}"))))
        .transpose()
}

/// A time written under re-base shift `written_under`, moved to the file's shift `shift`.
pub(super) fn moved(time: i64, written_under: i64, shift: i64) -> Result<i64, String> {
    shift
        .checked_sub(written_under)
        .filter(|moved| *moved >= 0)
        .and_then(|moved| time.checked_add(moved))
        .ok_or_else(|| format!("{time} of shift {written_under} cannot be moved to shift {shift}"))
}

/// The principal in column `column` of `row`: none for NULL.
pub(super) fn principal_from_sql(
    row: &rusqlite::Row<'_>,
    column: usize,
) -> Result<Option<Principal>, String> {
    let text: Option<&str> = row
        .get_ref(column)
        .and_then(|value| value.as_str_or_null().map_err(rusqlite::Error::from))
        .map_err(|e| e.to_string())?;
    text.map(|p| Principal::new(p).map_err(|e| e.to_string()))
        .transpose()
}

pub(super) fn from_sql(what: &str, value: i64) -> Result<u64, SqliteError> {
    u64::try_from(value)
        .map_err(|_| SqliteError::Data(format!("negative {what} {value} in the SQLite store")))
}
