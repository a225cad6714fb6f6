//! [`PostgresStore`] (`postgres://user@host:port/db`): leases in a PostgreSQL table, shared
//! by any number of fencelock servers.
//!
//! Its guarantees are in the [crate's guarantee table](crate#guarantees).
//!
//! # How the rules are kept
//!
//! Every operation is one SQL statement sent by the client (a single acquire that the first
//! statement does not answer sends a second, which judges anew: below); none reads a row and
//! then writes it in a second statement, so no other server can change the row in between. Some
//! statements call a PL/pgSQL function of the schema, which reads and writes only once it
//! has the locks it needs (why a single statement cannot: see
//! [below](#semaphores-and-read-write-locks)).
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
//!   per resource (and across resources) but not always consecutive: a grant draws one, and
//!   so does a single acquire whose name was granted while it waited for the resource's lock
//!   (below), which does not use it; a transaction that fails after drawing one loses it too.
//! - The acquire of one lock ([`LockStore::acquire_with`]) is first one statement that
//!   answers the common cases without the function's reads and plans (which cost the
//!   database more than the whole statement: docs/PERFORMANCE.md, "Issue 25, seventh
//!   round"): under the resource's lock it reads the name's row `FOR UPDATE` (its latest
//!   version, as the function's read) and refuses another owner's live lease or a lock-delay,
//!   or, when there is no row, inserts the grant; the unique index, which sees every
//!   committed row whatever the statement's snapshot, turns a row granted while it waited into
//!   no answer. A missing row is a free name, since a release deletes a live lease and a purge
//!   only one whose lock-delay has ended. Where it answers nothing — the caller's own live
//!   lease, an expired one to replace, a row it could not see — the acquire is judged by the
//!   function, anew, as a multi-acquire is. (Schema version 4 made the acquire a function
//!   because a statement's snapshot lacks rows committed while it waited for the lock; for
//!   the one row of a lock's name, the unique index stands in for the snapshot, which no
//!   count of holds could.)
//! - Acquire, of one lock that the first statement did not answer or of several all or none
//!   ([`LockStore::acquire_all`], so in one transaction), is one call of
//!   `fencelock_acquire_locks(resources, owner, principal, ttl_ms, max_hold_ms,
//!   lock_delay_ms)`. It takes the advisory locks of every name in the order of their keys
//!   (not of the names: two names may share a key, and only one order of the keys themselves
//!   keeps two multi-acquires from waiting for each other in a circle, which PostgreSQL would
//!   end by aborting one), reads the clock, and only then reads the leases (locking each row,
//!   so that a purge skips it), so it sees everything committed before it had the locks.
//!   It decides as [`fencelock_core::LockTable::acquire_all`] does: if another owner (a
//!   namesake too) holds a live lease of a name, or a lease expired without a release less
//!   than its lock-delay ago, it answers every such refusal, in the order given, and changes
//!   nothing; else it extends the caller's live leases and grants the others, in the order
//!   given, drawing their tokens in that order. A grant replaces the expired lease it finds
//!   and reports it (`Granted { expired }`).
//! - Each lease row keeps the lease's terms: `hold_until` (the cap, from the grant's time plus
//!   `max_hold`; NULL: none) and `lock_delay` (ms). The first TTL, every extension and every
//!   renewal are cut at `hold_until`; an extension keeps the row's terms whatever it asks. A
//!   release deletes the row, so no lock-delay follows it; an expired row stays until it is
//!   purged or replaced, and keeps the resource closed (`Delayed`) until `expires_at +
//!   lock_delay`, by the database's clock.
//! - Release and renew lock the row (`FOR UPDATE`, which also reads its latest version),
//!   decide not found / forbidden / conflict from it, and delete or update it only if allowed.
//! - Every lease row keeps its owner's principal (NULL: none). The caller is the holder
//!   when both its owner name and its principal are the row's (`IS NOT DISTINCT FROM`, so
//!   that no principal matches only no principal): a namesake of another principal does
//!   not extend the lease (it is `Held`) and is forbidden to renew or release it.
//! - A release is announced on the channel `fencelock_released` (the payload: the name)
//!   once it has committed, not in its own transaction: a notifying transaction commits
//!   alone in PostgreSQL, so each store hands the names its releases freed to one notifying
//!   session, which announces them in batches (`notify.rs`), and tells its own waiters at
//!   once. Each store keeps one connection that listens on the channel (reconnecting when it
//!   is lost) and feeds [`LockStore::releases`]; releases made while that connection is down,
//!   or whose notice was lost (a crash between the commit and the batch), are not heard, and
//!   waiters then fall back on the expiry of the lease they wait for.
//! - An expired lease stays in its row until it is purged or replaced by a grant.
//!   [`LockStore::purge_expired`] deletes expired rows whose lock-delay has ended too, at
//!   most [`PURGE_BATCH`](fencelock_core::store::PURGE_BATCH) leases and as many holds at a
//!   time, those that expired first, and returns them; one server purges at a time (a
//!   try-lock), and the others purge nothing meanwhile. The store announces what it purged
//!   as it does releases.
//! - A renewal that shortens a lease is announced on `fencelock_released` too, as a release
//!   is, so that waiters ask again; so is an extension that shortens one, which
//!   `fencelock_acquire_locks` still notifies in its own transaction (a rare path: only a
//!   lease with a cap, or one re-acquired with a shorter TTL, is shortened).
//!
//! # Semaphores and read-write locks
//!
//! Each permit or hold is a row of `fencelock_holds` (kind, name, owner, and the owner's
//! principal: one per owner *name*), its token drawn from the same sequence as the leases'
//! (so a name's tokens increase across kinds too); a waiting writer's intent is a row of
//! `fencelock_intents` (one per owner name too, with the principal that last waited under
//! it). Deciding a grant means counting rows — permits, readers, writers, intents — and a
//! single statement cannot count them safely: in READ COMMITTED its snapshot is taken when
//! it starts, before the advisory lock inside it is granted, so it would not see holds
//! granted while it waited for the lock (two acquirers could both count 4 of 5 permits). So
//! each call that changes a hold is one statement that calls a PL/pgSQL function of the
//! schema, which takes the name's advisory lock (`fencelock_lock_name`, a key class apart
//! from the locks') and then reads, judges and writes in statements that each take a fresh
//! snapshot:
//!
//! - [`LockStore::acquire_hold`] calls `fencelock_acquire_hold(name, owner, principal,
//!   claim, lim, ttl_ms, intent_ms)`, which decides as [`fencelock_core::hold::judge`] does
//!   — `Busy` whatever the room while a namesake of another principal holds the name, then a
//!   limit mismatch, the owner's own hold extended, an upgrade only for the sole holder and a
//!   downgrade at once (each with a new token), a new reader refused while another owner's
//!   live intent exists, `Busy` with the other owners' live holds in token order and the
//!   earliest end of what stands in the way — records or renews a refused writer's intent,
//!   and ends the intent of a writer it grants. Its rows (one per role: `granted`,
//!   `replaced`, `extended`, `busy` and its `holder`s, `mismatch`) become a [`HoldOutcome`].
//! - [`LockStore::release_hold`] and [`LockStore::renew_hold`] call `fencelock_release_hold`
//!   and `fencelock_renew_hold(kind, name, owner, principal, token[, ttl_ms])`: `NotFound`
//!   when no live hold is under the owner's name, `Forbidden` when it is a namesake's,
//!   `Conflict` on another token; a release reports the hold it ended and when, by the
//!   database's clock.
//! - [`LockStore::withdraw_intent`] calls `fencelock_withdraw_intent(name, owner,
//!   principal)`.
//! - [`LockStore::force_release`] calls `fencelock_force_release_with_terms(kind, name)`,
//!   which takes the lock the other calls on the name take (a resource's for a lock, the
//!   name's for a hold), deletes every live lease or hold of it in one transaction,
//!   announces it as a release does, and returns what it ended in token order (a lease with
//!   its terms), with the database's time. The token sequence lives apart from the rows, so
//!   the next grant's token is greater. A lease that has expired is not live: its lock-delay
//!   still runs.
//! - [`LockStore::holds`] and [`LockStore::list_holds`] are plain reads of one snapshot;
//!   the list pages by name (`query.limit` counts names), names by their bytes.
//! - [`LockStore::purge_expired`] deletes expired holds and ended intents with the expired
//!   leases, skipping rows a function has locked (it is replacing them) so that a purge
//!   never waits for one.
//! - Whatever may let a waiter in — a release or force-release, a purge, an upgrade or
//!   downgrade replacing a hold, a renew or extension that shortens one, a withdrawn or
//!   granted writer's intent — notifies the channel `fencelock_hold_released` with
//!   `kind:name` when it commits (the functions of the schema still notify in their own
//!   transaction; a purge is announced by the notifying session); the listening connection
//!   listens on it too. Lock notices
//!   keep their own channel and payload, which servers of the previous version read.
//! - The hold functions of schema version 2 stay, for servers of that version still running
//!   while newer ones are rolled out: they call the new ones for an owner of no principal.
//!
//! # Schema and upgrades
//!
//! The schema is created and upgraded at start by numbered migrations, recorded in
//! `fencelock_schema_version`, under an advisory lock so that servers starting together
//! apply each migration once. It needs PostgreSQL 12 or newer (tested with 15), and a user
//! that may create tables in the database's default schema.
//!
//! While servers are rolled out, those of the previous version keep working on a migrated
//! database: the functions of each version stay (calling their successors), and the columns
//! a version adds have defaults. Servers of schema version 3 (before the terms) write leases
//! with their own statements; a trigger (`fencelock_keep_terms`) keeps what they write true
//! to the terms: their grant over an expired row leaves the new lease no cap and no
//! lock-delay (this version's grants insert a new row, so an update that changes a token is
//! always theirs), and their renewals and extensions are cut at the cap. They know no
//! lock-delay, though, and grant within one, and their own grants have no cap: upgrade every
//! server sharing the database before turning `--lock-delay` on or relying on `max_hold_ms`.
//!
//! # Failure
//!
//! Connections are made with a connect timeout and a server-side `statement_timeout`, and
//! every call has an overall deadline (the store is opened in a [`Deadline`]), so a call to
//! an unreachable database returns [`StoreError::Unavailable`] promptly instead of hanging.
//! The pool replaces closed connections by itself, so service resumes when the database is
//! back.
//!
//! [`StoreError::Unavailable`]: fencelock_core::StoreError::Unavailable

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use fencelock_core::store::Result;
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Bulletin, BulletinFeed, Capabilities, Claim, Expired, FencingToken,
    ForceOutcome, Hold, HoldKind, HoldOutcome, HoldPage, Key, Lease, LeasePage, ListQuery, LockStore, Meta,
    Owner, ReleaseFeed, ReleaseNotice, ReleaseOutcome, RenewOutcome, Resource, Resources, Terms, Ttl,
};
use tokio::sync::broadcast;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use crate::deadline::{Deadline, Within, within};
use crate::subscription::{AbortOnDrop, keep_subscribed};

mod error;
mod listen;
mod notify;
mod row;
mod sql;

use error::PgError;
use notify::{Notifier, OwnSession};

/// The store's name in error messages.
const STORE: &str = "PostgreSQL";

/// Opens `postgres://…` (or `postgresql://…`) for [`crate::open`]: `rest` is what follows
/// the scheme.
pub(crate) fn open<'a>(address: &'a str, rest: &'a str) -> crate::Opening<'a> {
    // The driver reads only the lower-case scheme.
    Box::pin(async move {
        crate::opened(
            address,
            PostgresStore::connect(&format!("postgres://{rest}")).await,
        )
    })
}

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

/// A [`LockStore`] in a PostgreSQL database; see the module docs for how it keeps the rules.
/// [`connect`](PostgresStore::connect) gives it wrapped in its call [`Deadline`].
pub struct PostgresStore {
    pool: Pool,
    options: PostgresOptions,
    address: String,
    /// The release notices of every server, fed by the listener, and by the store itself
    /// for its own calls' releases.
    feed: ReleaseFeed,
    /// Other servers' events, fed by the listener.
    bulletins: BulletinFeed,
    /// Announces this store's releases, and this server's events, to every server.
    notifier: Notifier,
    // Stops listening when the store is dropped.
    _released: AbortOnDrop,
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
    pub async fn connect(url: &str) -> Result<Deadline<Self>> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// As [`PostgresStore::connect`], with `options`.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Deadline<Self>> {
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
            .map_err(PgError::PoolConfig)?;
        let address = redacted(&config);
        let deadline = options.call_deadline();
        within(deadline, STORE, "migrate the schema", async {
            Ok(sql::migrate(&pool).await?)
        })
        .await?;

        let released = ReleaseFeed::new();
        let bulletins = BulletinFeed::new();
        let feeds = listen::Feeds {
            released: released.clone(),
            bulletins: bulletins.clone(),
        };
        let own = OwnSession::default();
        let notifier = Notifier::start(&config, deadline, own.clone());
        let open = move || listen::listen(config.clone(), deadline, feeds.clone(), own.clone());
        // Only answer once LISTEN is in place, so that no release after this is missed.
        let first = open().await?;
        let store = Self {
            pool,
            options,
            address,
            _released: keep_subscribed(STORE, first, open, released.clone(), Some(bulletins.clone())),
            feed: released,
            bulletins,
            notifier,
        };
        Ok(Deadline::new(store, Within::new(STORE, deadline)))
    }

    /// Runs the acquire `statement` on `names` (the one resource of [`sql::ACQUIRE_ONE`], or
    /// the distinct names of [`sql::ACQUIRE`]) for `owner` on `terms`.
    async fn acquire_locks(
        &self,
        statement: &'static str,
        names: &(dyn ToSql + Sync),
        owner: &Owner,
        terms: &Terms,
    ) -> Result<Vec<Row>, PgError> {
        let max_hold = terms.max_hold.map(row::ttl_param).transpose()?;
        self.query(
            "acquire",
            statement,
            &[
                names,
                &owner.as_str(),
                &row::principal_param(owner),
                &row::ttl_param(terms.ttl)?,
                &max_hold,
                &row::delay_param(terms.lock_delay)?,
                &terms.meta.as_ref().map(Meta::as_str),
            ],
        )
        .await
    }

    /// Tells the waiters of this server at once, and those of every server through the
    /// notifier, that `names` may be free: the calls that freed them have committed.
    fn freed(&self, names: Vec<Key>) {
        for key in &names {
            self.feed.announce(key);
        }
        self.notifier.hand(names);
    }

    /// Runs `statement` with `params` on a pooled connection.
    async fn query(
        &self,
        doing: &'static str,
        statement: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, PgError> {
        let client = self.pool.get().await.map_err(PgError::pool(doing))?;
        let prepared = client
            .prepare_cached(statement)
            .await
            .map_err(PgError::db(doing))?;
        client.query(&prepared, params).await.map_err(PgError::db(doing))
    }
}

#[async_trait]
impl LockStore for PostgresStore {
    /// A grant of a name with no lease row, or a refusal, is one statement
    /// ([`sql::ACQUIRE_ONE`]); an extension, a grant over an expired lease, or a name
    /// granted while that statement waited is judged by `fencelock_acquire_locks`, as a
    /// multi-acquire is.
    async fn acquire_with(&self, resource: &Resource, owner: &Owner, terms: Terms) -> Result<AcquireOutcome> {
        let name = resource.as_str();
        let mut rows = self.acquire_locks(sql::ACQUIRE_ONE, &name, owner, &terms).await?;
        if rows.is_empty() {
            rows = self
                .acquire_locks(sql::ACQUIRE, &[name].as_slice(), owner, &terms)
                .await?;
        }
        Ok(row::acquired(resource, &rows)?)
    }

    /// In one transaction (one call of `fencelock_acquire_locks`): every lock or none.
    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        let names: Vec<&str> = resources.as_slice().iter().map(Resource::as_str).collect();
        let rows = self.acquire_locks(sql::ACQUIRE, &names, owner, &terms).await?;
        Ok(row::acquired_all(resources.as_slice(), &rows)?)
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        let rows = self.query("get", sql::GET, &[&resource.as_str()]).await?;
        Ok(row::found(resource, &rows)?)
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let params = (
            resource.as_str(),
            owner.as_str(),
            row::principal_param(owner),
            row::token_param(token),
        );
        let rows = self
            .query(
                "release",
                sql::RELEASE,
                &[&params.0, &params.1, &params.2, &params.3],
            )
            .await?;
        let outcome = row::released(resource, &rows)?;
        if let ReleaseOutcome::Released(_) = outcome {
            self.freed(vec![Key::lock(resource)]);
        }
        Ok(outcome)
    }

    async fn renew_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome> {
        let params = (
            resource.as_str(),
            owner.as_str(),
            row::principal_param(owner),
            row::token_param(token),
            row::ttl_param(ttl)?,
            meta.map(Meta::as_str),
        );
        let rows = self
            .query(
                "renew",
                sql::RENEW,
                &[&params.0, &params.1, &params.2, &params.3, &params.4, &params.5],
            )
            .await?;
        if row::shortened(&rows)? {
            self.freed(vec![Key::lock(resource)]);
        }
        Ok(row::renewed(resource, &rows)?)
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        let limit = query.limit.max(1);
        // One more than asked, to know whether another page follows.
        let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let after = query.after.as_ref().map(Resource::as_str);
        let rows = self
            .query("list", sql::LIST, &[&query.prefix.as_str(), &after, &fetch])
            .await?;
        Ok(LeasePage::from_one_past(row::leases(&rows)?, limit))
    }

    async fn purge_expired(&self) -> Result<Vec<Expired>> {
        let batch =
            i64::try_from(fencelock_core::store::PURGE_BATCH).expect("the purge batch fits in a bigint");
        let rows = self.query("purge expired leases", sql::PURGE, &[&batch]).await?;
        let purged = row::expired(&rows)?;
        self.freed(
            purged
                .iter()
                .map(|expired| Key {
                    kind: expired.kind,
                    name: expired.lease.resource.clone(),
                })
                .collect(),
        );
        Ok(purged)
    }

    async fn acquire_hold_with(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        intent: Option<Ttl>,
        meta: Option<&Meta>,
    ) -> Result<HoldOutcome> {
        let (claim, limit) = row::claim_param(claim);
        let ttl = row::ttl_param(ttl)?;
        let intent = intent.map(row::ttl_param).transpose()?;
        let rows = self
            .query(
                "acquire a hold",
                sql::ACQUIRE_HOLD,
                &[
                    &name.as_str(),
                    &owner.as_str(),
                    &row::principal_param(owner),
                    &claim,
                    &limit,
                    &ttl,
                    &intent,
                    &meta.map(Meta::as_str),
                ],
            )
            .await?;
        Ok(row::acquired_hold(name, &rows)?)
    }

    async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        let rows = self
            .query("get holds", sql::HOLDS, &[&row::kind_param(kind), &name.as_str()])
            .await?;
        Ok(row::holds(name, &rows)?)
    }

    async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let params = (
            row::kind_param(kind),
            name.as_str(),
            owner.as_str(),
            row::principal_param(owner),
            row::token_param(token),
        );
        let rows = self
            .query(
                "release a hold",
                sql::RELEASE_HOLD,
                &[&params.0, &params.1, &params.2, &params.3, &params.4],
            )
            .await?;
        Ok(row::hold_released(name, &rows)?)
    }

    async fn renew_hold_with(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome<Hold>> {
        let params = (
            row::kind_param(kind),
            name.as_str(),
            owner.as_str(),
            row::principal_param(owner),
            row::token_param(token),
            row::ttl_param(ttl)?,
            meta.map(Meta::as_str),
        );
        let rows = self
            .query(
                "renew a hold",
                sql::RENEW_HOLD,
                &[
                    &params.0, &params.1, &params.2, &params.3, &params.4, &params.5, &params.6,
                ],
            )
            .await?;
        Ok(row::hold_renewed(name, &rows)?)
    }

    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage> {
        let limit = query.limit.max(1);
        // One more name than asked, to know whether another page follows.
        let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let after = query.after.as_ref().map(Resource::as_str);
        let rows = self
            .query(
                "list holds",
                sql::LIST_HOLDS,
                &[&row::kind_param(kind), &query.prefix.as_str(), &after, &fetch],
            )
            .await?;
        Ok(row::hold_page(&rows, limit)?)
    }

    async fn withdraw_intent(&self, name: &Resource, owner: &Owner) -> Result<()> {
        self.query(
            "withdraw an intent",
            sql::WITHDRAW_INTENT,
            &[&name.as_str(), &owner.as_str(), &row::principal_param(owner)],
        )
        .await?;
        Ok(())
    }

    async fn force_release(&self, key: &Key) -> Result<ForceOutcome> {
        let rows = self
            .query(
                "force-release",
                sql::FORCE_RELEASE,
                &[&key.kind.as_str(), &key.name.as_str()],
            )
            .await?;
        Ok(row::forced(&key.name, &rows)?)
    }

    async fn ping(&self) -> Result<()> {
        self.query("ping", "SELECT 1", &[]).await?;
        Ok(())
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        Some(self.feed.subscribe())
    }

    fn publish(&self, bulletin: &Bulletin) {
        self.notifier.tell(bulletin);
    }

    fn bulletins(&self) -> Option<broadcast::Receiver<fencelock_core::Heard>> {
        Some(self.bulletins.subscribe())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            durable: true,
            shared: true,
            ..Capabilities::BASELINE
        }
    }
}

/// The connection settings from `url`, with our timeouts added.
fn client_config(url: &str, options: &PostgresOptions) -> Result<tokio_postgres::Config, PgError> {
    let mut config = tokio_postgres::Config::from_str(url).map_err(PgError::Address)?;
    // A statement that waits longer than this (on a lock, or on a server in trouble) is
    // cancelled by the server itself, so no connection stays busy forever. And a commit is
    // answered only once it is flushed to disk, whatever the server's default: with
    // `synchronous_commit = off`, a crash could lose answered grants and roll the token
    // sequence back. And every statement runs in READ COMMITTED, whatever the database's or
    // the role's default, which the statements' reading of rows changed while they waited for
    // a lock relies on (the functions refuse any other level).
    let timeout = format!(
        "-c statement_timeout={} -c synchronous_commit=on \
         -c default_transaction_isolation=read\\ committed",
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fencelock_core::Ttl;

    use super::*;

    /// The role of the one row [`sql::ACQUIRE_ONE`] answers `owner` for `name` on `terms`;
    /// None for no row.
    async fn answer(store: &PostgresStore, name: &str, owner: &str, terms: Terms) -> Option<String> {
        let owner = Owner::new(owner).unwrap();
        let rows = store
            .acquire_locks(sql::ACQUIRE_ONE, &name, &owner, &terms)
            .await
            .unwrap();
        assert!(rows.len() <= 1, "{rows:?}");
        rows.first().map(|row| row.get(1))
    }

    /// What [`answer`] says to another owner once the lease of `name` has expired: asked
    /// until it is no longer `held` (a refusal changes nothing).
    async fn once_expired(store: &PostgresStore, name: &str) -> Option<String> {
        let asking = async {
            loop {
                let role = answer(store, name, "b", Terms::ttl(minute())).await;
                if role.as_deref() != Some("held") {
                    return role;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), asking)
            .await
            .expect("the lease expires")
    }

    fn minute() -> Ttl {
        Ttl::from_const_millis(60_000)
    }

    /// [`sql::ACQUIRE_ONE`] answers a grant of a name with no row and both refusals itself,
    /// as the function would, and answers nothing where the function must judge: the
    /// caller's own live lease (an extension) and an expired lease past its lock-delay (a
    /// grant that replaces it). The store's outcomes are the same either way, so this is
    /// seen only here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_single_acquire_statement_answers_a_free_name_and_refusals_and_nothing_else() {
        let url = tokio::task::spawn_blocking(|| fencelock_testkit::shared_postgres().url())
            .await
            .unwrap();
        let store = PostgresStore::connect(&url).await.unwrap();
        let store = store.inner();
        let name = |what: &str| format!("statement-{what}-{}", std::process::id());
        let (held, delayed, expired) = (name("held"), name("delayed"), name("expired"));

        let granted = answer(store, &held, "a", Terms::ttl(minute())).await;
        assert_eq!(granted.as_deref(), Some("granted"));
        let refused = answer(store, &held, "b", Terms::ttl(minute())).await;
        assert_eq!(refused.as_deref(), Some("held"));
        assert_eq!(answer(store, &held, "a", Terms::ttl(minute())).await, None);

        let brief = Ttl::from_const_millis(50);
        let terms = Terms::ttl(brief).lock_delay(Duration::from_secs(60));
        assert_eq!(
            answer(store, &delayed, "a", terms).await.as_deref(),
            Some("granted")
        );
        let granted = answer(store, &expired, "a", Terms::ttl(brief)).await;
        assert_eq!(granted.as_deref(), Some("granted"));
        assert_eq!(once_expired(store, &delayed).await.as_deref(), Some("delayed"));
        assert_eq!(once_expired(store, &expired).await, None);
    }

    #[test]
    fn sessions_commit_synchronously_in_read_committed_unless_the_address_says_otherwise() {
        let options = PostgresOptions::default();
        let config = client_config("postgres://u@127.0.0.1:5432/db", &options).unwrap();
        let set = config.get_options().unwrap();
        assert!(set.contains("-c synchronous_commit=on"), "{set}");
        assert!(set.contains("-c statement_timeout=5000"), "{set}");
        assert!(
            set.contains(r"-c default_transaction_isolation=read\ committed"),
            "{set}"
        );
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
