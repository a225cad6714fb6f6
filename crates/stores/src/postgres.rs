//! [`PostgresStore`] (`postgres://user@host:port/db`): leases in a PostgreSQL table, shared
//! by any number of fencelock servers.
//!
//! # Guarantees
//!
//! | question | answer |
//! | --- | --- |
//! | whose clock decides expiry | the database's (`clock_timestamp()` of the primary): the clocks of the fencelock servers do not matter, but expiry follows the database host's wall clock, so a step of that clock (forward or back) ends or prolongs every lease by the step: keep it synchronised, and slewed rather than stepped |
//! | TTL | honoured to the millisecond: a lease is stamped at the database's time rounded *up* to a whole millisecond, and lasts `ttl` from there, so never less than asked |
//! | durable | yes: every grant, extension, renewal and release is committed and flushed before it is answered: the store's sessions set `synchronous_commit = on` whatever the server's default (an address's own `options` may set it otherwise), and a commit is as durable as the server's `fsync` makes it |
//! | what a failover can lose | with asynchronous replication, the commits the new primary had not received: answered grants and releases, and the fencing tokens issued with them, so a later grant may reuse a token. With synchronous replication (`synchronous_commit = on` or `remote_apply` and a synchronous standby) nothing answered is lost. Either way the new primary's clock takes over, so leases end early or late by the difference between the two hosts' clocks: keep them synchronised |
//! | fit for | correctness, with fencing tokens, on one primary or with synchronous replication; efficiency only, with asynchronous replication. Tokens live in the database: a new, empty database starts them again at 1, so never move the locks of resources that remember tokens to one |
//!
//! # How the rules are kept
//!
//! Every operation is one SQL statement; none reads a row and then writes it in a second
//! statement, so no other server can change the row in between.
//!
//! - Every statement that changes a resource first takes a transaction-level advisory lock
//!   on that resource (`pg_advisory_xact_lock`), and only then reads the clock and draws a
//!   token. Writes to one resource are therefore applied in the order of their tokens, and a
//!   token is never drawn, held back, and written after a newer one (which could otherwise
//!   happen between a statement drawing its token and inserting its row, if a newer lease is
//!   granted and released in that gap).
//! - Fencing tokens come from the sequence `fencelock_tokens`, which lives apart from the
//!   lease rows, so a token outlives the release or purge of its lease. Sequences never hand
//!   out a value twice, even for rolled-back transactions. Tokens are strictly increasing
//!   per resource (and across resources) but not consecutive: every acquire draws one, and
//!   only a grant keeps it.
//! - Acquire is `INSERT … ON CONFLICT (resource) DO UPDATE`, which sees the latest committed
//!   row whatever the statement's snapshot: the update keeps the row as it is when another
//!   owner holds a live lease, so that `RETURNING` reports the holder in the same statement.
//! - Release and renew lock the row (`FOR UPDATE`, which also reads its latest version),
//!   decide not found / forbidden / conflict from it, and delete or update it only if allowed.
//! - A release notifies the channel `fencelock_released` in the same statement, so the
//!   notice is sent exactly when the release commits. Each store keeps one connection that
//!   listens on it (reconnecting when it is lost) and feeds [`LockStore::releases`];
//!   releases made while that connection is down are not heard, and waiters then fall back
//!   on the expiry of the lease they wait for.
//! - An expired lease stays in its row until it is purged or replaced by a grant.
//!   [`LockStore::purge_expired`] deletes every expired row and returns them; one server
//!   purges at a time (a try-lock), and the others purge nothing meanwhile. A grant that
//!   replaces an expired lease does not report it (`Granted { expired: None }`): the
//!   statement only returns the row as it is now.
//!
//! The schema is created and upgraded at start by numbered migrations, recorded in
//! `fencelock_schema_version`, under an advisory lock so that servers starting together
//! apply each migration once. It needs PostgreSQL 12 or newer (tested with 15), and a user
//! that may create tables in the database's default schema.
//!
//! # Failure
//!
//! Connections are made with a connect timeout and a server-side `statement_timeout`, and
//! every call has an overall deadline, so a call to an unreachable database returns
//! [`StoreError::Unavailable`] promptly instead of hanging. The pool replaces closed
//! connections by itself, so service resumes when the database is back.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use fencelock_core::store::Result;
use fencelock_core::{
    AcquireOutcome, Capabilities, EndedLease, FencingToken, Lease, LeasePage, ListQuery, LockStore, Owner,
    ReleaseFeed, ReleaseNotice, ReleaseOutcome, RenewOutcome, Resource, StoreError, Timestamp, Ttl,
};
use tokio::sync::broadcast;
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, NoTls, Row};

use crate::remote::{AbortOnDrop, keep_subscribed, within};

/// The store's name in error messages.
const STORE: &str = "PostgreSQL";

/// The notification channel of releases; the payload is the resource name.
const CHANNEL: &str = "fencelock_released";

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
const ACQUIRE: &str = concat!(
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
const RELEASE: &str = concat!(
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
const RENEW: &str = concat!(
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
const GET: &str = concat!(
    "SELECT owner, token, ",
    ms!("acquired_at"),
    ", ",
    ms!("expires_at"),
    " FROM fencelock_leases WHERE resource = $1::text AND expires_at > statement_timestamp()"
);

/// `$1` prefix, `$2` resource to start after or NULL, `$3` how many rows.
const LIST: &str = concat!(
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
const PURGE: &str = concat!(
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

/// How a [`PostgresStore`] connects and how long it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// How long to wait for a new connection (TCP and start-up).
    pub connect_timeout: Duration,
    /// The longest a statement may run on the server, lock waits included; also how long a
    /// call waits for a free pooled connection.
    pub statement_timeout: Duration,
    /// The most connections in the pool (the listening connection comes on top).
    pub pool_size: usize,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(3),
            statement_timeout: Duration::from_secs(5),
            pool_size: 16,
        }
    }
}

impl PostgresOptions {
    /// The most one call may take, whatever happens on the network.
    fn call_deadline(&self) -> Duration {
        self.connect_timeout + self.statement_timeout + Duration::from_secs(1)
    }
}

/// A [`LockStore`] in a PostgreSQL database; see the module docs for its guarantees.
pub struct PostgresStore {
    pool: Pool,
    options: PostgresOptions,
    address: String,
    released: ReleaseFeed,
    // Stops listening when the store is dropped.
    _listener: AbortOnDrop,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("address", &self.address)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user[:password]@host:port/db`, or any form
    /// tokio-postgres reads) with default options, brings the schema up to date, and starts
    /// listening for releases. Must be called within a Tokio runtime.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// As [`PostgresStore::connect`], with `options`.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self> {
        let config = client_config(url, &options)?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                // A connection the server closed (restart, failover) reports itself closed:
                // checking that is enough to replace it, and costs no round trip.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.statement_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| StoreError::Invalid(format!("PostgreSQL pool: {e}")))?;
        let address = redacted(&config);
        let deadline = options.call_deadline();
        within(deadline, STORE, "migrate the schema", migrate(&pool)).await?;

        let released = ReleaseFeed::new();
        let feed = released.clone();
        let open = move || listen(config.clone(), deadline, feed.clone());
        // Only answer once LISTEN is in place, so that no release after this is missed.
        let first = open().await?;
        Ok(Self {
            pool,
            options,
            address,
            _listener: keep_subscribed(STORE, first, open, released.clone()),
            released,
        })
    }

    /// Runs `statement` with `params` on a pooled connection, within the call deadline.
    async fn query(
        &self,
        doing: &'static str,
        statement: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        within(self.options.call_deadline(), STORE, doing, async {
            let client = self.pool.get().await.map_err(|e| pool_error(doing, e))?;
            let prepared = client
                .prepare_cached(statement)
                .await
                .map_err(|e| db_error(doing, e))?;
            client
                .query(&prepared, params)
                .await
                .map_err(|e| db_error(doing, e))
        })
        .await
    }
}

#[async_trait]
impl LockStore for PostgresStore {
    async fn acquire(&self, resource: &Resource, owner: &Owner, ttl: Ttl) -> Result<AcquireOutcome> {
        let ttl_ms = ttl_millis(ttl)?;
        let rows = self
            .query(
                "acquire",
                ACQUIRE,
                &[&resource.as_str(), &owner.as_str(), &ttl_ms],
            )
            .await?;
        let row = one_row(rows, "acquire")?;
        let lease = lease_from(resource.clone(), &row, 0)?;
        let granted: bool = row.try_get(4).map_err(corrupt)?;
        let expires_in = millis(row.try_get(5).map_err(corrupt)?)?;
        Ok(if granted {
            // The replaced expired lease is not reported: the statement only returns the
            // row as it is now.
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

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        let rows = self.query("get", GET, &[&resource.as_str()]).await?;
        rows.first()
            .map(|row| lease_from(resource.clone(), row, 0))
            .transpose()
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let token = token.map(token_param).transpose()?;
        let rows = self
            .query("release", RELEASE, &[&resource.as_str(), &owner.as_str(), &token])
            .await?;
        let Some(row) = rows.first() else {
            return Ok(ReleaseOutcome::NotFound);
        };
        Ok(match verdict(row)? {
            Verdict::NotFound => ReleaseOutcome::NotFound,
            Verdict::Forbidden => ReleaseOutcome::Forbidden,
            Verdict::Conflict => ReleaseOutcome::Conflict,
            Verdict::Allowed => ReleaseOutcome::Released(Some(EndedLease {
                lease: lease_from(resource.clone(), row, 0)?,
                ended_at: Timestamp::from_millis(millis(row.try_get(5).map_err(corrupt)?)?),
            })),
        })
    }

    async fn renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome> {
        let token = token.map(token_param).transpose()?;
        let ttl_ms = ttl_millis(ttl)?;
        let rows = self
            .query(
                "renew",
                RENEW,
                &[&resource.as_str(), &owner.as_str(), &token, &ttl_ms],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(RenewOutcome::NotFound);
        };
        Ok(match verdict(row)? {
            Verdict::NotFound => RenewOutcome::NotFound,
            Verdict::Forbidden => RenewOutcome::Forbidden,
            Verdict::Conflict => RenewOutcome::Conflict,
            Verdict::Allowed => RenewOutcome::Renewed(lease_from(resource.clone(), row, 0)?),
        })
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        let limit = query.limit.max(1);
        // One more than asked, to know whether another page follows.
        let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let after = query.after.as_ref().map(Resource::as_str);
        let rows = self
            .query("list", LIST, &[&query.prefix.as_str(), &after, &fetch])
            .await?;
        let mut leases = rows
            .iter()
            .map(|row| lease_from(resource_from(row)?, row, 1))
            .collect::<Result<Vec<_>>>()?;
        let next = if leases.len() > limit {
            leases.truncate(limit);
            leases.last().map(|l| l.resource.clone())
        } else {
            None
        };
        Ok(LeasePage { leases, next })
    }

    async fn purge_expired(&self) -> Result<Vec<Lease>> {
        let rows = self.query("purge expired leases", PURGE, &[]).await?;
        rows.iter()
            .map(|row| lease_from(resource_from(row)?, row, 1))
            .collect()
    }

    async fn ping(&self) -> Result<()> {
        self.query("ping", "SELECT 1", &[]).await.map(drop)
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        Some(self.released.subscribe())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ttl_granularity: Duration::from_millis(1),
            durable: true,
            knows_released_lease: true,
            shared: true,
        }
    }
}

/// The connection settings from `url`, with our timeouts added.
fn client_config(url: &str, options: &PostgresOptions) -> Result<tokio_postgres::Config> {
    let mut config = tokio_postgres::Config::from_str(url)
        .map_err(|e| StoreError::Invalid(format!("not a PostgreSQL address: {e}")))?;
    // A statement that waits longer than this (on a lock, or on a server in trouble) is
    // cancelled by the server itself, so no connection stays busy forever. And a commit is
    // answered only once it is flushed to disk, whatever the server's default: with
    // `synchronous_commit = off`, a crash could lose answered grants and roll the token
    // sequence back.
    let timeout = format!(
        "-c statement_timeout={} -c synchronous_commit=on",
        options.statement_timeout.as_millis()
    );
    // Options given in the address come last, so that they win (e.g. `remote_apply`).
    let server_options = match config.get_options() {
        Some(given) if !given.is_empty() => format!("{timeout} {given}"),
        _ => timeout,
    };
    config
        .options(server_options)
        .connect_timeout(options.connect_timeout)
        // Notice a peer that vanished without closing the connection (a network cut).
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(10))
        .tcp_user_timeout(options.call_deadline());
    if config.get_application_name().is_none() {
        config.application_name("fencelock");
    }
    Ok(config)
}

/// The address for logs and `Debug`: no password.
fn redacted(config: &tokio_postgres::Config) -> String {
    let hosts = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(host, port)| match host {
            tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
            tokio_postgres::config::Host::Unix(path) => format!("{}:{port}", path.display()),
        })
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "postgres://{}@{hosts}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    )
}

/// Brings the schema up to the newest version, in one transaction, under an advisory lock so
/// that servers starting together apply each step once.
async fn migrate(pool: &Pool) -> Result<()> {
    const DOING: &str = "migrate the schema";
    let mut client = pool.get().await.map_err(|e| pool_error(DOING, e))?;
    let tx = client.transaction().await.map_err(|e| db_error(DOING, e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&MIGRATION_LOCK_CLASS])
        .await
        .map_err(|e| db_error(DOING, e))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS fencelock_schema_version (
            version    integer PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
        )",
    )
    .await
    .map_err(|e| db_error(DOING, e))?;
    let current: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM fencelock_schema_version",
            &[],
        )
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| db_error(DOING, e))?;
    let known = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
    if current > known {
        // Not the caller's input (that would read as a bad address): data this build cannot
        // read, as the embedded store says of a file of a newer schema.
        return Err(StoreError::Corrupt(format!(
            "the database schema is at version {current}, newer than this fencelock knows ({known}): \
             was it written by a newer fencelock? upgrade fencelock"
        )));
    }
    for (version, step) in (1..).zip(MIGRATIONS).skip(usize::try_from(current).unwrap_or(0)) {
        tx.batch_execute(step).await.map_err(|e| db_error(DOING, e))?;
        tx.execute(
            "INSERT INTO fencelock_schema_version (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(|e| db_error(DOING, e))?;
        tracing::info!(version, "PostgreSQL schema migrated");
    }
    tx.commit().await.map_err(|e| db_error(DOING, e))
}

/// How often the listening connection checks that the server still answers.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// Opens a connection that listens on [`CHANNEL`]. Returns the session: a future that passes
/// each released resource to `feed` until the connection is lost (closed, failing, or not
/// answering a heartbeat).
async fn listen(
    config: tokio_postgres::Config,
    deadline: Duration,
    feed: ReleaseFeed,
) -> Result<impl Future<Output = ()> + Send + 'static> {
    const DOING: &str = "listen for releases";
    let (client, connection) = within(deadline, STORE, DOING, async {
        config.connect(NoTls).await.map_err(|e| db_error(DOING, e))
    })
    .await?;
    let mut driver = AbortOnDrop(tokio::spawn(pass_notices(connection, feed)));
    within(deadline, STORE, DOING, async {
        client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .await
            .map_err(|e| db_error(DOING, e))
    })
    .await?;
    Ok(async move {
        loop {
            tokio::select! {
                // The connection ended.
                _ = &mut driver.0 => return,
                () = tokio::time::sleep(HEARTBEAT) => {
                    // A connection can hang without closing (a network cut): if the server
                    // does not answer, give it up (dropping `driver` closes it).
                    let alive = tokio::time::timeout(deadline, client.simple_query("")).await;
                    if !matches!(alive, Ok(Ok(_))) {
                        return;
                    }
                }
            }
        }
    })
}

/// Drives the listening connection, passing the resource of each release notice to `feed`,
/// until the connection ends. Notices only come out of a connection driven by
/// `poll_message`: driving it as a plain future would drop them.
async fn pass_notices<S, T>(mut connection: tokio_postgres::Connection<S, T>, feed: ReleaseFeed)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
        match message {
            Ok(AsyncMessage::Notification(note)) if note.channel() == CHANNEL => {
                match Resource::new(note.payload()) {
                    Ok(resource) => feed.announce(&resource),
                    Err(e) => tracing::warn!(payload = note.payload(), error = %e, "odd release notice"),
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the PostgreSQL listening connection failed");
                return;
            }
        }
    }
}

/// Release and renew's judgement of the caller (the `verdict` column).
enum Verdict {
    NotFound,
    Forbidden,
    Conflict,
    Allowed,
}

fn verdict(row: &Row) -> Result<Verdict> {
    match row.try_get::<_, i32>(4).map_err(corrupt)? {
        0 => Ok(Verdict::NotFound),
        1 => Ok(Verdict::Forbidden),
        2 => Ok(Verdict::Conflict),
        3 => Ok(Verdict::Allowed),
        other => Err(StoreError::Corrupt(format!("unknown verdict {other}"))),
    }
}

/// The lease in `row`, whose columns from `first` on are owner, token, acquired_at and
/// expires_at (the last two in milliseconds).
fn lease_from(resource: Resource, row: &Row, first: usize) -> Result<Lease> {
    let owner: &str = row.try_get(first).map_err(corrupt)?;
    let token: i64 = row.try_get(first + 1).map_err(corrupt)?;
    let acquired_at: i64 = row.try_get(first + 2).map_err(corrupt)?;
    let expires_at: i64 = row.try_get(first + 3).map_err(corrupt)?;
    Ok(Lease {
        resource,
        owner: Owner::new(owner).map_err(|e| StoreError::Corrupt(format!("owner {owner:?}: {e}")))?,
        token: FencingToken(u64::try_from(token).map_err(|_| StoreError::Corrupt(format!("token {token}")))?),
        acquired_at: Timestamp::from_millis(millis(acquired_at)?),
        expires_at: Timestamp::from_millis(millis(expires_at)?),
    })
}

fn resource_from(row: &Row) -> Result<Resource> {
    let name: &str = row.try_get(0).map_err(corrupt)?;
    Resource::new(name).map_err(|e| StoreError::Corrupt(format!("resource {name:?}: {e}")))
}

fn millis(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("time {value} ms is before 1970")))
}

fn ttl_millis(ttl: Ttl) -> Result<i64> {
    i64::try_from(ttl.as_millis()).map_err(|_| StoreError::Invalid(format!("TTL {ttl:?} is too long")))
}

/// A token that does not fit PostgreSQL's `bigint` was never issued by this store: compared
/// with any real token it is "another token", so `-1` (never issued) stands for it.
fn token_param(token: FencingToken) -> Result<i64> {
    Ok(i64::try_from(token.0).unwrap_or(-1))
}

fn one_row(rows: Vec<Row>, doing: &str) -> Result<Row> {
    rows.into_iter()
        .next()
        .ok_or_else(|| StoreError::Corrupt(format!("{doing} returned no row")))
}

fn corrupt(e: tokio_postgres::Error) -> StoreError {
    StoreError::Corrupt(format!("unexpected PostgreSQL row: {e}"))
}

fn db_error(doing: &str, e: tokio_postgres::Error) -> StoreError {
    if e.code() == Some(&SqlState::SEQUENCE_GENERATOR_LIMIT_EXCEEDED) {
        return StoreError::Corrupt("fencing tokens are exhausted".into());
    }
    // Everything else — connection lost, server shutting down or starting, a timeout, a
    // read-only standby after a failover — is the store failing: the caller answers 503.
    StoreError::unavailable(format!("PostgreSQL: {doing}"), e)
}

fn pool_error(doing: &str, e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => db_error(doing, e),
        other => StoreError::unavailable(format!("PostgreSQL: {doing}: no connection"), other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_commit_synchronously_unless_the_address_says_otherwise() {
        let options = PostgresOptions::default();
        let config = client_config("postgres://u@127.0.0.1:5432/db", &options).unwrap();
        let set = config.get_options().unwrap();
        assert!(set.contains("-c synchronous_commit=on"), "{set}");
        assert!(set.contains("-c statement_timeout=5000"), "{set}");
        // Options in the address come after ours, so that the operator's choice wins.
        let given = "postgres://u@127.0.0.1:5432/db?options=-c%20synchronous_commit%3Dremote_apply";
        let set = client_config(given, &options)
            .unwrap()
            .get_options()
            .unwrap()
            .to_owned();
        assert!(set.ends_with("-c synchronous_commit=remote_apply"), "{set}");
    }
}
