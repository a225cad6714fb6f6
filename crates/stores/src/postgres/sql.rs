//! The schema's migrations and every statement the store runs: each call is one statement.

use deadpool_postgres::Pool;

use super::error::PgError;

/// The first key of the advisory lock taken while migrating the schema (`flk\x01`); the
/// locks on resources use `flk\x00` (see [`lock_resource!`]), and purging `flk\x02`. All
/// are two-key advisory locks, a key space apart from one-key ones, chosen so as not to meet
/// other applications' advisory locks in the same database.
const MIGRATION_LOCK_CLASS: i32 = 0x666c_6b01;

/// The schema, one step per version; step `i` brings the schema to version `i + 1`. Steps
/// are only ever appended, never edited, since databases already at a version skip them.
const MIGRATIONS: &[&str] = &[
    // 1: the leases, and the sequence of fencing tokens that outlives them.
    r#"
    CREATE TABLE fencelock_leases (
        -- "C" collation: names compare and sort by their bytes, as the SPEC asks.
        resource    text COLLATE "C" PRIMARY KEY,
        owner       text NOT NULL,
        token       bigint NOT NULL CHECK (token > 0),
        acquired_at timestamptz NOT NULL,
        expires_at  timestamptz NOT NULL
    );
    CREATE INDEX fencelock_leases_expires_at ON fencelock_leases (expires_at);
    CREATE SEQUENCE fencelock_tokens AS bigint MINVALUE 1 NO CYCLE;
    "#,
];

/// Takes fencelock's advisory lock on the resource `$1` until the transaction ends. The
/// first key is `0x666c6b00` (`flk\x00`), the second a hash of the name: two names may share
/// a lock, which only makes them wait for each other.
macro_rules! lock_resource {
    () => {
        "pg_advisory_xact_lock(1718381312, hashtext($1::text))"
    };
}

/// Milliseconds since the epoch of a `timestamptz` that holds whole milliseconds.
macro_rules! ms {
    ($column:literal) => {
        concat!("(extract(epoch FROM ", $column, ") * 1000)::bigint")
    };
}

/// The start of release and renew: lock the resource, read the clock, then lock the row and
/// judge the caller. `verdict`: 0 no live lease, 1 another owner, 2 another token, 3 allowed.
/// Parameters: `$1` resource, `$2` owner, `$3` the caller's token or NULL.
macro_rules! judge_holder {
    () => {
        concat!(
            "WITH locked AS MATERIALIZED (
                SELECT ",
            lock_resource!(),
            "
            ), clock AS MATERIALIZED (
                SELECT clock_timestamp() AS now FROM locked
            ), holder AS MATERIALIZED (
                SELECT l.resource, l.owner, l.token, l.acquired_at, l.expires_at,
                    CASE WHEN l.expires_at <= clock.now THEN 0
                         WHEN l.owner <> $2::text THEN 1
                         WHEN $3::bigint IS NOT NULL AND l.token <> $3::bigint THEN 2
                         ELSE 3 END AS verdict
                FROM clock JOIN fencelock_leases l ON l.resource = $1::text
                FOR UPDATE OF l
            )"
        )
    };
}

/// `$1` resource, `$2` owner, `$3` TTL in ms. One row: the lease as it now is, whether this
/// statement granted it (its token is the one drawn here), and how long it has left. An
/// extension is announced to waiters, as it may have shortened the lease (the statement
/// cannot see the lease it replaced; a spurious notice only makes a waiter ask again).
pub(super) const ACQUIRE: &str = concat!(
    "WITH locked AS MATERIALIZED (
        SELECT ",
    lock_resource!(),
    "
    ), clock AS MATERIALIZED (
        SELECT clock_timestamp() AS now FROM locked
    ), fresh AS MATERIALIZED (
        SELECT nextval('fencelock_tokens') AS token,
               date_trunc('milliseconds', now + interval '999 microseconds') AS stamp
        FROM clock
    ), upserted AS (
        INSERT INTO fencelock_leases AS l (resource, owner, token, acquired_at, expires_at)
        SELECT $1::text, $2::text, token, stamp, stamp + $3::bigint * interval '1 millisecond'
        FROM fresh
        ON CONFLICT (resource) DO UPDATE SET
            owner = CASE WHEN l.expires_at <= (SELECT now FROM clock) OR l.owner = EXCLUDED.owner
                         THEN EXCLUDED.owner ELSE l.owner END,
            token = CASE WHEN l.expires_at <= (SELECT now FROM clock)
                         THEN EXCLUDED.token ELSE l.token END,
            acquired_at = CASE WHEN l.expires_at <= (SELECT now FROM clock) OR l.owner = EXCLUDED.owner
                         THEN EXCLUDED.acquired_at ELSE l.acquired_at END,
            expires_at = CASE WHEN l.expires_at <= (SELECT now FROM clock) OR l.owner = EXCLUDED.owner
                         THEN EXCLUDED.expires_at ELSE l.expires_at END
        RETURNING l.owner, l.token, l.acquired_at, l.expires_at,
            l.token = (SELECT token FROM fresh) AS granted
    ), announced AS (
        SELECT pg_notify('fencelock_released', $1::text) FROM upserted
        WHERE NOT granted AND owner = $2::text
    )
    SELECT owner, token, ",
    ms!("acquired_at"),
    ", ",
    ms!("expires_at"),
    ", granted,
        greatest(0, floor(extract(epoch FROM expires_at - (SELECT now FROM clock)) * 1000))::bigint
            AS expires_in_ms,
        (SELECT count(*) FROM announced) AS announced
    FROM upserted"
);

/// `$1` resource, `$2` owner, `$3` token or NULL. No row: no lease at all. The columns after
/// the lease: the verdict, and the database's time of the release in ms.
pub(super) const RELEASE: &str = concat!(
    judge_holder!(),
    ", released AS (
        DELETE FROM fencelock_leases l USING holder h
        WHERE l.resource = h.resource AND h.verdict = 3
        RETURNING l.resource
    ), announced AS (
        SELECT pg_notify('fencelock_released', resource) FROM released
    )
    SELECT h.owner, h.token, ",
    ms!("h.acquired_at"),
    ", ",
    ms!("h.expires_at"),
    ", h.verdict, ",
    // Rounded up to whole milliseconds like the other stamps, so it is never before acquired_at.
    ms!("date_trunc('milliseconds', (SELECT now FROM clock) + interval '999 microseconds')"),
    " AS ended_at, (SELECT count(*) FROM announced) AS announced
    FROM holder h"
);

/// `$1` resource, `$2` owner, `$3` token or NULL, `$4` TTL in ms. No row: no lease at all.
/// A renewal that shortens the lease is announced to waiters.
pub(super) const RENEW: &str = concat!(
    judge_holder!(),
    ", renewed AS (
        UPDATE fencelock_leases l
        SET expires_at = date_trunc('milliseconds', clock.now + interval '999 microseconds')
                         + $4::bigint * interval '1 millisecond'
        FROM holder h, clock
        WHERE l.resource = h.resource AND h.verdict = 3
        RETURNING l.expires_at
    ), announced AS (
        SELECT pg_notify('fencelock_released', h.resource) FROM renewed r, holder h
        WHERE r.expires_at < h.expires_at
    )
    SELECT h.owner, h.token, ",
    ms!("h.acquired_at"),
    ", coalesce((SELECT ",
    ms!("expires_at"),
    " FROM renewed), ",
    ms!("h.expires_at"),
    "), h.verdict, (SELECT count(*) FROM announced) AS announced
    FROM holder h"
);

/// `$1` resource.
pub(super) const GET: &str = concat!(
    "SELECT owner, token, ",
    ms!("acquired_at"),
    ", ",
    ms!("expires_at"),
    " FROM fencelock_leases WHERE resource = $1::text AND expires_at > statement_timestamp()"
);

/// `$1` prefix, `$2` resource to start after or NULL, `$3` how many rows.
pub(super) const LIST: &str = concat!(
    "SELECT resource, owner, token, ",
    ms!("acquired_at"),
    ", ",
    ms!("expires_at"),
    " FROM fencelock_leases
    WHERE resource >= $1::text AND starts_with(resource, $1::text)
      AND ($2::text IS NULL OR resource > $2::text)
      AND expires_at > statement_timestamp()
    ORDER BY resource
    LIMIT $3::bigint"
);

/// One server purges at a time (the others purge nothing meanwhile): two purges deleting
/// the same rows in different orders could deadlock each other. Each purged lease is
/// announced to waiters on every server.
pub(super) const PURGE: &str = concat!(
    "WITH turn AS MATERIALIZED (
        SELECT pg_try_advisory_xact_lock(1718381314, 0) AS ours
    ), purged AS (
        DELETE FROM fencelock_leases
        WHERE expires_at <= now() AND (SELECT ours FROM turn)
        RETURNING resource, owner, token, acquired_at, expires_at
    ), announced AS (
        SELECT pg_notify('fencelock_released', resource) FROM purged
    )
    SELECT resource, owner, token, ",
    ms!("acquired_at"),
    ", ",
    ms!("expires_at"),
    ", (SELECT count(*) FROM announced) AS announced
    FROM purged"
);

/// Brings the schema up to the newest version, in one transaction, under an advisory lock so
/// that servers starting together apply each step once.
pub(super) async fn migrate(pool: &Pool) -> Result<(), PgError> {
    const DOING: &str = "migrate the schema";
    let mut client = pool.get().await.map_err(PgError::pool(DOING))?;
    let tx = client.transaction().await.map_err(PgError::db(DOING))?;
    tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&MIGRATION_LOCK_CLASS])
        .await
        .map_err(PgError::db(DOING))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS fencelock_schema_version (
            version    integer PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
        )",
    )
    .await
    .map_err(PgError::db(DOING))?;
    let current: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM fencelock_schema_version",
            &[],
        )
        .await
        .and_then(|row| row.try_get(0))
        .map_err(PgError::db(DOING))?;
    let known = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
    if current > known {
        return Err(PgError::NewerSchema { current, known });
    }
    for (version, step) in (1..).zip(MIGRATIONS).skip(usize::try_from(current).unwrap_or(0)) {
        tx.batch_execute(step).await.map_err(PgError::db(DOING))?;
        tx.execute(
            "INSERT INTO fencelock_schema_version (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(PgError::db(DOING))?;
        tracing::info!(version, "PostgreSQL schema migrated");
    }
    tx.commit().await.map_err(PgError::db(DOING))
}
