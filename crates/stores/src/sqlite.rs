//! [`SqliteStore`] (`sqlite://PATH`): the embedded store, one SQLite file owned by one server.
//!
//! # How a call travels
//!
//! One writer thread owns the connection and a [`LockTable`] loaded from the file at open.
//! Callers queue their operation — on a lock, a semaphore or a read-write lock alike — and
//! wait for the answer. The writer takes whatever is queued (up to [`MAX_BATCH`]
//! operations), applies it to the table, writes every changed lease row, every changed hold
//! row and the last fencing token in one transaction, and answers the callers only once
//! that transaction is committed and fsynced: one fsync for the whole batch (*group
//! commit*), and no caller ever hears of a change that a crash could take back. If the
//! transaction fails, the table is rolled back (leases, holds and the token counter) and
//! every caller of the batch gets [`StoreError::Unavailable`]: nothing is half-done.
//!
//! An all-or-none acquire of several locks is one operation of a batch: every lock or none
//! is in the transaction.
//!
//! Reads (get, list, holds, list of holds) take the same queue, so they see every change
//! answered before them and nothing that is not yet durable. Releases, purges, downgrades,
//! shortened leases and holds, and withdrawn intents are announced to waiters by the writer
//! itself, once committed, so that an announcement cannot be lost with a caller that went
//! away.
//!
//! # What is stored
//!
//! - `leases`: one row per lock, live or expired (expired rows go when purged or replaced;
//!   a lease with a lock-delay no sooner than its delay ends), with its terms: the cap on
//!   holding (`hold_until`, none if NULL) and the lock-delay in ms.
//! - `holds`: one row per semaphore permit or read-write hold, keyed by (kind, name, owner),
//!   with its claim (`permit`, `read` or `write`), the semaphore's limit for a permit, its
//!   token and its times.
//! - `meta`: the last fencing token issued — one counter for locks and holds, which never
//!   goes back and is never below a token in the file —, the store's time of the last batch,
//!   and the *shift*: how far re-bases have moved every lease and hold (see below).
//! - On each lease and hold row, the shift in force when the row was written.
//!
//! A waiting writer's intent is not stored: it lives in the table only. It holds readers
//! back for a few seconds at most and its server renews it while the writer waits; an
//! embedded store belongs to one server, so no other server needs to see it, and a restart
//! ends the wait along with the intent.
//!
//! # Time across a stop
//!
//! The store's clock is the wall clock read at open, then advanced by the monotonic clock
//! (see [`SystemClock`]), so a clock step while the server runs moves no lease or hold.
//! Each batch also records in the file the store's time and, with it, the host's boot and
//! uptime ([`Clock::uptime`]: Linux's boot id and `CLOCK_BOOTTIME`, which counts suspends and
//! no step of the wall clock). At open:
//!
//! - **The same boot of the host**: the time the store was stopped is the uptime's
//!   difference, exactly, whatever the wall clock did meanwhile. The store's time goes on from
//!   the record by that much, as if it had kept running: every lease and hold keeps the
//!   `expires_at` (and cap) it was acknowledged with, and has lost exactly the time that
//!   passed. Nothing is written. The store's clock then runs apart from the wall clock by
//!   however much the wall clock was stepped since the store's first start in this boot (a
//!   warning says so beyond a second), as it would have had the server kept running; a
//!   reboot, or a new file, anchors it to the wall clock again.
//! - **Another boot, or none recorded** (a host that cannot tell, or a file written before
//!   this was recorded): the time stopped cannot be told from a wall clock that may have been
//!   stepped, so it is taken to be none. If the wall clock reads later than the record,
//!   every lease and hold that was live keeps the time it had left then (its `expires_at`
//!   moves later by the difference, and so does its cap), and one that had ended has still
//!   ended — with what was left of its lock-delay still to run. A wall clock stepped forward
//!   while the host was down therefore cannot end a lease or hold early; the price is that
//!   downtime prolongs them, which is the safe direction. If the wall clock reads earlier
//!   than the record (stepped back), the store's clock resumes from the record instead, so
//!   it never goes back either.
//!
//! The re-base after a reboot writes one row, however many leases the file holds: it adds the difference
//! to `meta`'s shift and rewrites no lease. A row ends at its `expires_at` plus the shifts
//! added since it was written (`meta`'s shift less the row's), which the load applies in
//! memory; every row the writer writes carries the shift of the moment, so a row's stored
//! end is moved by exactly the re-bases it lived through. The file keeps the shifts in step:
//! `meta`'s never goes back and no row's is ahead of it (either would end leases early).
//! `acquired_at` is never moved: it says when the lease was granted, by the store's clock
//! of then.
//!
//! # One server per file
//!
//! The connection holds an exclusive lock on the file from open until close, so a second
//! server (in this process or another) fails at open instead of corrupting the lock state:
//! to share a store between servers, use PostgreSQL or etcd.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::store::Result;
use fencelock_core::table::{Dirty, DirtyHold};
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Capabilities, Claim, Clock, Expired, FencingToken, ForceOutcome, Hold,
    HoldKind, HoldOutcome, HoldPage, Key, Lease, LeasePage, ListQuery, LockStore, LockTable, Owner,
    Principal, ReleaseFeed, ReleaseNotice, ReleaseOutcome, RenewOutcome, Resource, Resources, StoreError,
    SystemClock, Terms, Timestamp, Ttl,
};
use rusqlite::{Connection, ErrorCode, TransactionBehavior, params};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

/// The most operations the writer commits together. A bound keeps one transaction, and the
/// wait of the first caller in it, short under any load.
pub const MAX_BATCH: usize = 1024;

/// How many operations may wait for the writer before callers wait to queue.
const QUEUE_CAPACITY: usize = 4 * MAX_BATCH;

/// The schema, one migration per version; `PRAGMA user_version` counts those applied.
/// Append only: a migration that has shipped is never edited.
const MIGRATIONS: &[&str] = &[
    r"
    CREATE TABLE leases (
        resource    TEXT    NOT NULL UNIQUE,
        owner       TEXT    NOT NULL,
        token       INTEGER NOT NULL CHECK (token > 0),
        acquired_at INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE meta (
        id         INTEGER PRIMARY KEY CHECK (id = 1),
        last_token INTEGER NOT NULL CHECK (last_token >= 0)
    ) STRICT;
    INSERT INTO meta (id, last_token) VALUES (1, 0);
    -- Once a lease row is gone, this counter is all that remembers its token: lowering or
    -- losing it would let a token be issued twice.
    CREATE TRIGGER meta_token_never_goes_back BEFORE UPDATE ON meta
        WHEN NEW.last_token < OLD.last_token
        BEGIN SELECT RAISE(ABORT, 'the fencing token counter never goes back'); END;
    CREATE TRIGGER meta_is_never_deleted BEFORE DELETE ON meta
        BEGIN SELECT RAISE(ABORT, 'the fencing token counter is never deleted'); END;
",
    r"
    -- The store's time (ms) of the last committed batch: at open, leases are re-based on it,
    -- so that a wall clock stepped while the store was stopped cannot shorten them.
    ALTER TABLE meta ADD COLUMN last_now INTEGER NOT NULL DEFAULT 0 CHECK (last_now >= 0);
",
    r"
    -- Semaphore permits and read-write holds: one row per owner of a name, each a lease
    -- with a token of its own, drawn from the same counter as the leases' tokens.
    CREATE TABLE holds (
        kind         TEXT    NOT NULL CHECK (kind IN ('semaphore', 'rwlock')),
        name         TEXT    NOT NULL,
        owner        TEXT    NOT NULL,
        claim        TEXT    NOT NULL CHECK (claim IN ('permit', 'read', 'write')),
        -- The semaphore's limit, which every permit carries; no other claim has one.
        permit_limit INTEGER CHECK (permit_limit BETWEEN 1 AND 4294967295),
        token        INTEGER NOT NULL CHECK (token > 0),
        acquired_at  INTEGER NOT NULL,
        expires_at   INTEGER NOT NULL,
        PRIMARY KEY (kind, name, owner),
        CHECK ((claim = 'permit') = (kind = 'semaphore')),
        CHECK ((claim = 'permit') = (permit_limit IS NOT NULL))
    ) STRICT, WITHOUT ROWID;
    -- The counter stays at or above every hold's token, whoever writes the row: once the
    -- row is gone, the counter is all that remembers the token.
    CREATE TRIGGER holds_raise_the_counter_on_insert AFTER INSERT ON holds
        BEGIN UPDATE meta SET last_token = NEW.token WHERE id = 1 AND last_token < NEW.token; END;
    CREATE TRIGGER holds_raise_the_counter_on_update AFTER UPDATE OF token ON holds
        BEGIN UPDATE meta SET last_token = NEW.token WHERE id = 1 AND last_token < NEW.token; END;
",
    r"
    -- The re-base at open moves every live lease and hold later by the time the store was
    -- stopped. Rather than rewrite each row (seconds for a million), meta keeps the sum of
    -- every re-base's move, and each row the sum in force when it was written: a row ends at
    -- its expires_at + (meta's shift - its shift). Rows written before this migration, and
    -- meta, start at 0.
    ALTER TABLE meta ADD COLUMN shift INTEGER NOT NULL DEFAULT 0 CHECK (shift >= 0);
    ALTER TABLE leases ADD COLUMN shift INTEGER NOT NULL DEFAULT 0 CHECK (shift >= 0);
    ALTER TABLE holds ADD COLUMN shift INTEGER NOT NULL DEFAULT 0 CHECK (shift >= 0);
    -- Lowering meta's shift, or a row's shift above it, would end leases and holds early.
    CREATE TRIGGER meta_shift_never_goes_back BEFORE UPDATE OF shift ON meta
        WHEN NEW.shift < OLD.shift
        BEGIN SELECT RAISE(ABORT, 'the re-base shift never goes back'); END;
    CREATE TRIGGER leases_shift_is_never_ahead_on_insert BEFORE INSERT ON leases
        WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
        BEGIN SELECT RAISE(ABORT, 'a lease row is never shifted past the store'); END;
    CREATE TRIGGER leases_shift_is_never_ahead_on_update BEFORE UPDATE OF shift ON leases
        WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
        BEGIN SELECT RAISE(ABORT, 'a lease row is never shifted past the store'); END;
    CREATE TRIGGER holds_shift_is_never_ahead_on_insert BEFORE INSERT ON holds
        WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
        BEGIN SELECT RAISE(ABORT, 'a hold row is never shifted past the store'); END;
    CREATE TRIGGER holds_shift_is_never_ahead_on_update BEFORE UPDATE OF shift ON holds
        WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
        BEGIN SELECT RAISE(ABORT, 'a hold row is never shifted past the store'); END;
",
    r"
    -- The principal each lease and hold belongs to (NULL: none, a server without
    -- authentication). Rows written before this migration belong to none.
    ALTER TABLE leases ADD COLUMN principal TEXT;
    ALTER TABLE holds ADD COLUMN principal TEXT;
",
    r"
    -- The terms a lease keeps for its whole life: its cap on holding (NULL: none), moved by
    -- re-bases as expires_at is, and its lock-delay in ms. Rows written before have neither.
    ALTER TABLE leases ADD COLUMN hold_until INTEGER;
    ALTER TABLE leases ADD COLUMN lock_delay INTEGER NOT NULL DEFAULT 0 CHECK (lock_delay >= 0);
",
    r"
    -- The host's boot and its uptime (ms, suspends included) read with last_now: at open in the
    -- same boot, the time the store was stopped is the uptime's difference, whatever the wall
    -- clock did. NULL: unknown (a host that cannot tell, or a file written before).
    ALTER TABLE meta ADD COLUMN boot_id TEXT;
    ALTER TABLE meta ADD COLUMN since_boot INTEGER CHECK (since_boot >= 0);
",
];

/// Opens `sqlite://PATH` for [`crate::open`]: `path` is what follows the scheme.
pub(crate) fn open<'a>(address: &'a str, path: &'a str) -> crate::Opening<'a> {
    Box::pin(async move {
        if path.is_empty() {
            return Err(crate::invalid(
                address,
                "sqlite:// needs a file path, e.g. sqlite://fencelock.db",
            ));
        }
        let path = PathBuf::from(path);
        // Opening reads and writes the file: keep that off the async threads.
        let opened = tokio::task::spawn_blocking(move || SqliteStore::open(path))
            .await
            .map_err(|e| StoreError::from(SqliteError::OpenPanicked(e)))
            .and_then(|opened| opened);
        crate::opened(address, opened)
    })
}

/// A store in one SQLite file, for one server: durable, fast through group commit, and
/// refusing a second opener of the same file.
pub struct SqliteStore {
    /// `None` only while dropping: dropping it lets the writer finish.
    queue: Option<mpsc::Sender<Message>>,
    /// Becomes `true` when the writer has closed the file.
    closed: watch::Receiver<bool>,
    writer: Option<JoinHandle<()>>,
    released: ReleaseFeed,
    counters: Arc<Counters>,
    path: PathBuf,
}

/// What the writer has done since the store was opened, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterStats {
    /// Operations answered (reads included).
    pub operations: u64,
    /// Batches taken from the queue.
    pub batches: u64,
    /// Transactions committed: batches that changed something.
    pub commits: u64,
    /// Transactions that failed and were rolled back.
    pub failed_commits: u64,
}

#[derive(Debug, Default)]
struct Counters {
    operations: AtomicU64,
    batches: AtomicU64,
    commits: AtomicU64,
    failed_commits: AtomicU64,
}

/// One caller's operation: applied by the writer to the table at the time given, it returns
/// how to answer the caller once the fate of its batch is known.
type Job = Box<dyn FnOnce(&mut LockTable, Timestamp) -> Answer + Send>;

/// Answers a caller: with its outcome if the batch committed, else with the batch's failure.
type Answer = Box<dyn FnOnce(Option<&Arc<WriteError>>) + Send>;

enum Message {
    Job(Job),
    /// Stop taking operations, answer those queued, close the file.
    Close,
}

/// Every failure of the SQLite store. Callers only ever see it as a [`StoreError`], made in
/// one place (the `From` below); no `rusqlite` type crosses the [`LockStore`] trait.
#[derive(Debug, thiserror::Error)]
enum SqliteError {
    /// The file could not be opened, configured or migrated.
    #[error("{}", open_message(.path, .what, .source))]
    Open {
        path: PathBuf,
        what: &'static str,
        source: rusqlite::Error,
    },
    #[error("opening the SQLite store panicked")]
    OpenPanicked(#[source] tokio::task::JoinError),
    #[error("{} cannot use a write-ahead log (journal mode {mode})", .path.display())]
    NoWal { path: PathBuf, mode: String },
    #[error(
        "{} has schema version {version}, not one of this fencelock's (0 to {known}): \
         was it written by a newer fencelock?",
        .path.display()
    )]
    UnknownSchema {
        path: PathBuf,
        version: i64,
        known: usize,
    },
    #[error("cannot re-base the SQLite store's leases and holds")]
    Rebase(#[source] rusqlite::Error),
    #[error("cannot read the SQLite store")]
    Read(#[source] rusqlite::Error),
    /// A value in the file that no lease or hold can have.
    #[error("{0}")]
    Data(String),
    #[error("cannot start the SQLite writer thread")]
    Thread(#[source] std::io::Error),
    #[error("the SQLite store is closed")]
    Closed,
    #[error("the SQLite writer of {} stopped", .0.display())]
    WriterStopped(PathBuf),
    #[error("the SQLite store could not commit; nothing of this call was applied")]
    Batch(#[source] Arc<WriteError>),
}

impl From<SqliteError> for StoreError {
    fn from(e: SqliteError) -> Self {
        let message = e.to_string();
        match e {
            SqliteError::Open { source, .. } | SqliteError::Rebase(source) | SqliteError::Read(source) => {
                StoreError::unavailable(message, source)
            }
            SqliteError::OpenPanicked(source) => StoreError::unavailable(message, source),
            SqliteError::Thread(source) => StoreError::unavailable(message, source),
            SqliteError::Batch(source) => StoreError::unavailable(message, source),
            SqliteError::NoWal { .. } | SqliteError::Closed | SqliteError::WriterStopped(_) => {
                StoreError::Unavailable {
                    message,
                    source: None,
                }
            }
            SqliteError::UnknownSchema { .. } | SqliteError::Data(_) => StoreError::Corrupt(message),
        }
    }
}

/// Why a batch could not be written: shared by every caller of the batch.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("{what} {value} does not fit in an SQLite integer")]
    OutOfRange { what: &'static str, value: u64 },
}

impl SqliteStore {
    /// Opens (or creates) the store in the file at `path`, deciding expiry by the system's
    /// wall clock, read at open and then advanced monotonically (see [`SystemClock`]).
    ///
    /// Fails if another server has the file open, if the file is not a fencelock store of
    /// a schema this build knows, or if it cannot be read or written.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with_clock(path, Arc::new(SystemClock::new()))
    }

    /// Opens (or creates) the store in the file at `path`, deciding expiry by `clock`.
    ///
    /// The store's time resumes at open by the time it was stopped, as `clock`'s uptime
    /// tells it within one boot; else leases are re-based so that none loses time the store
    /// was stopped, and the store's time resumes from the last time it recorded if `clock`
    /// reads earlier than that (see the module docs).
    pub fn open_with_clock(path: impl AsRef<Path>, clock: Arc<dyn Clock>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut conn = connect(&path)?;
        migrate(&mut conn, &path)?;
        let clock = rebase(&mut conn, clock)?;
        let (table, shift) = load(&conn)?;
        let counters = Arc::new(Counters::default());
        let (closed_tx, closed) = watch::channel(false);
        let released = ReleaseFeed::new();
        let writer = Writer {
            persisted_token: table.last_token(),
            shift,
            conn,
            table,
            clock,
            counters: counters.clone(),
            released: released.clone(),
            closed: closed_tx,
        };
        let (queue, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let writer = std::thread::Builder::new()
            .name("fencelock-sqlite".into())
            .spawn(move || writer.run(receiver))
            .map_err(SqliteError::Thread)?;
        Ok(Self {
            queue: Some(queue),
            closed,
            writer: Some(writer),
            released,
            counters,
            path,
        })
    }

    /// The file of this store.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the writer has done so far.
    pub fn stats(&self) -> WriterStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        WriterStats {
            operations: read(&self.counters.operations),
            batches: read(&self.counters.batches),
            commits: read(&self.counters.commits),
            failed_commits: read(&self.counters.failed_commits),
        }
    }

    /// How many operations are waiting for the writer to take them.
    pub fn queued(&self) -> usize {
        self.queue.as_ref().map_or(0, |q| q.max_capacity() - q.capacity())
    }

    /// Stops taking operations, answers those already queued, and closes the file, so that
    /// another server may open it once this returns. Later calls get
    /// [`StoreError::Unavailable`]. Dropping the store does the same, blocking the dropping
    /// thread until the writer is done.
    pub async fn close(&self) {
        if let Some(queue) = &self.queue {
            // Refused only if the writer is already stopping: then just wait for it.
            let _ = queue.send(Message::Close).await;
        }
        // An error means the writer is gone (it panicked): the file is closed either way.
        let _ = self.closed.clone().wait_for(|closed| *closed).await;
    }

    /// Queues `op` for the writer and waits until its batch is durable.
    async fn call<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut LockTable, Timestamp) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let queue = self.queue.as_ref().ok_or(SqliteError::Closed)?;
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |table, now| {
            let outcome = op(table, now);
            Box::new(move |failure| {
                let answer = match failure {
                    None => outcome,
                    Some(error) => Err(SqliteError::Batch(Arc::clone(error)).into()),
                };
                // The caller may have given up waiting; the change stands all the same.
                let _ = reply.send(answer);
            })
        });
        queue
            .send(Message::Job(job))
            .await
            .map_err(|_| SqliteError::Closed)?;
        answer
            .await
            .map_err(|_| SqliteError::WriterStopped(self.path.clone()))?
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // With the last sender gone, the writer answers what is queued, closes the file and
        // ends. Waiting for it means a reopen of the file right after this cannot be refused.
        drop(self.queue.take());
        if let Some(writer) = self.writer.take()
            && writer.join().is_err()
        {
            tracing::error!(path = %self.path.display(), "the SQLite writer thread panicked");
        }
    }
}

#[async_trait]
impl LockStore for SqliteStore {
    async fn acquire_with(&self, resource: &Resource, owner: &Owner, terms: Terms) -> Result<AcquireOutcome> {
        let (resource, owner) = (resource.clone(), owner.clone());
        self.call(move |table, now| table.acquire(now, &resource, &owner, terms))
            .await
    }

    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        let (resources, owner) = (resources.clone(), owner.clone());
        self.call(move |table, now| table.acquire_all(now, &resources, &owner, terms))
            .await
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        let resource = resource.clone();
        self.call(move |table, now| Ok(table.get(now, &resource))).await
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let (resource, owner) = (resource.clone(), owner.clone());
        self.call(move |table, now| Ok(table.release(now, &resource, &owner, token)))
            .await
    }

    async fn renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome> {
        let (resource, owner) = (resource.clone(), owner.clone());
        self.call(move |table, now| Ok(table.renew(now, &resource, &owner, ttl, token)))
            .await
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        let query = query.clone();
        self.call(move |table, now| Ok(table.list(now, &query))).await
    }

    async fn purge_expired(&self) -> Result<Vec<Expired>> {
        self.call(|table, now| Ok(table.purge_expired(now))).await
    }

    async fn acquire_hold(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        intent: Option<Ttl>,
    ) -> Result<HoldOutcome> {
        let (name, owner) = (name.clone(), owner.clone());
        self.call(move |table, now| table.acquire_hold(now, &name, &owner, claim, ttl, intent))
            .await
    }

    async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        let name = name.clone();
        self.call(move |table, now| Ok(table.holds(now, kind, &name)))
            .await
    }

    async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let (name, owner) = (name.clone(), owner.clone());
        self.call(move |table, now| Ok(table.release_hold(now, kind, &name, &owner, token)))
            .await
    }

    async fn renew_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome<Hold>> {
        let (name, owner) = (name.clone(), owner.clone());
        self.call(move |table, now| Ok(table.renew_hold(now, kind, &name, &owner, ttl, token)))
            .await
    }

    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage> {
        let query = query.clone();
        self.call(move |table, now| Ok(table.list_holds(now, kind, &query)))
            .await
    }

    async fn withdraw_intent(&self, name: &Resource, owner: &Owner) -> Result<()> {
        // Nothing to write (intents live in the table only), but through the queue all the
        // same: the readers it held back are told once the batch is done, in order.
        let (name, owner) = (name.clone(), owner.clone());
        self.call(move |table, _| {
            table.withdraw_intent(&name, &owner);
            Ok(())
        })
        .await
    }

    async fn force_release(&self, key: &Key) -> Result<ForceOutcome> {
        let key = key.clone();
        self.call(move |table, now| Ok(table.force_release(now, &key)))
            .await
    }

    async fn ping(&self) -> Result<()> {
        // Through the queue, so a stopped or stuck writer fails readiness.
        self.call(|_, _| Ok(())).await
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        Some(self.released.subscribe())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            durable: true,
            ..Capabilities::BASELINE
        }
    }
}

/// The thread that owns the connection and the table.
struct Writer {
    conn: Connection,
    table: LockTable,
    clock: StoreClock,
    /// The last token the file holds; written again only when the table's moves past it.
    persisted_token: u64,
    /// The file's re-base shift, which every row written carries (see [`rebase`]).
    shift: i64,
    counters: Arc<Counters>,
    released: ReleaseFeed,
    closed: watch::Sender<bool>,
}

/// The store's time: the given clock, moved by how far it read from the store's time at open
/// (see [`rebase`]): ahead when the clock read behind the store's last recorded time, behind
/// when the wall clock was stepped forward while the store was stopped in the same boot.
struct StoreClock {
    clock: Arc<dyn Clock>,
    ahead_ms: i64,
}

impl StoreClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(
            to_ms(self.clock.now())
                .saturating_add(self.ahead_ms)
                .max(0)
                .unsigned_abs(),
        )
    }

    /// The host's uptime, read after [`StoreClock::now`] for the same batch: so that it is
    /// never earlier than the time recorded with it, and the time counted stopped at the next
    /// open is never more than really passed.
    fn uptime(&self) -> Option<fencelock_core::Uptime> {
        self.clock.uptime()
    }
}

impl Writer {
    fn run(mut self, mut queue: mpsc::Receiver<Message>) {
        let mut messages = Vec::with_capacity(MAX_BATCH);
        // Blocks for the first operation, then takes whatever else is queued: the batch.
        while queue.blocking_recv_many(&mut messages, MAX_BATCH) > 0 {
            let mut jobs = Vec::with_capacity(messages.len());
            for message in messages.drain(..) {
                match message {
                    Message::Job(job) => jobs.push(job),
                    // Refuses new operations; those already queued are still taken.
                    Message::Close => queue.close(),
                }
            }
            self.run_batch(jobs);
        }
        let Self { conn, closed, .. } = self;
        if let Err((_, error)) = conn.close() {
            tracing::warn!(%error, "closing the SQLite store failed");
        }
        closed.send_replace(true);
    }

    fn run_batch(&mut self, jobs: Vec<Job>) {
        self.table.begin();
        let mut now = self.clock.now();
        let answers: Vec<Answer> = jobs
            .into_iter()
            .map(|job| {
                now = self.clock.now();
                job(&mut self.table, now)
            })
            .collect();
        let failure = match self.persist(now) {
            Ok(wrote) => {
                self.table.commit();
                if wrote {
                    self.counters.commits.fetch_add(1, Ordering::Relaxed);
                }
                // Announced here, once durable, whether or not each caller still listens.
                for key in self.table.take_freed() {
                    self.released.announce(&key);
                }
                None
            }
            Err(error) => {
                // The transaction was rolled back; the table must match the file again.
                self.table.rollback();
                self.counters.failed_commits.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%error, "an SQLite batch failed to commit and was rolled back");
                Some(Arc::new(error))
            }
        };
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        self.counters
            .operations
            .fetch_add(answers.len() as u64, Ordering::Relaxed);
        // Only now may anyone hear of the batch — reads included, as they may have seen its
        // changes.
        for answer in answers {
            answer(failure.as_ref());
        }
    }

    /// Writes the batch's changed leases and holds, the last token and the batch's time
    /// `now` in one transaction, committed and fsynced on return. Returns whether there was
    /// anything to write.
    fn persist(&mut self, now: Timestamp) -> Result<bool, WriteError> {
        let changes = self.table.changes();
        let hold_changes = self.table.hold_changes();
        let last_token = self.table.last_token();
        if changes.is_empty() && hold_changes.is_empty() && last_token == self.persisted_token {
            return Ok(false);
        }
        // Dropped without commit on any error: SQLite rolls the transaction back.
        let tx = self.conn.transaction()?;
        for dirty in &changes {
            write_row(&tx, dirty, self.shift)?;
        }
        for dirty in &hold_changes {
            write_hold(&tx, dirty, self.shift)?;
        }
        // max(): the counter and the time only ever move forward, whatever the table says.
        // The uptime is recorded only with a time that moved forward (it never goes back,
        // but if it did, the record of an earlier uptime with a later time would end leases
        // early at the next open): else it is forgotten, and the next open re-bases as after
        // a reboot.
        let uptime = self.clock.uptime();
        tx.prepare_cached(
            "UPDATE meta SET last_token = max(last_token, ?1),
                 boot_id = CASE WHEN ?2 >= last_now THEN ?3 END,
                 since_boot = CASE WHEN ?2 >= last_now THEN ?4 END,
                 last_now = max(last_now, ?2)
             WHERE id = 1",
        )?
        .execute(params![
            to_sql("fencing token", last_token)?,
            to_sql("timestamp", now.as_millis())?,
            uptime.as_ref().map(|up| up.boot.as_str()),
            uptime.as_ref().map(|up| recorded_uptime_ms(up.since_boot)),
        ])?;
        tx.commit()?;
        self.persisted_token = last_token;
        Ok(true)
    }
}

/// Writes a lease row, or deletes it; `shift` is the file's re-base shift, which the row
/// carries so that its `expires_at` needs no rewrite at the next re-base.
fn write_row(
    tx: &rusqlite::Transaction<'_>,
    (resource, lease): &Dirty,
    shift: i64,
) -> Result<(), WriteError> {
    let Some(lease) = lease else {
        tx.prepare_cached("DELETE FROM leases WHERE resource = ?1")?
            .execute([resource.as_str()])?;
        return Ok(());
    };
    tx.prepare_cached(
        "INSERT INTO leases (resource, owner, token, acquired_at, expires_at, shift, principal,
             hold_until, lock_delay)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner, token = excluded.token,
             acquired_at = excluded.acquired_at, expires_at = excluded.expires_at,
             shift = excluded.shift, principal = excluded.principal,
             hold_until = excluded.hold_until, lock_delay = excluded.lock_delay",
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
    ])?;
    Ok(())
}

/// Writes a hold row, or deletes it, as [`write_row`] does a lease row.
fn write_hold(
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
             principal)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (kind, name, owner) DO UPDATE SET claim = excluded.claim,
             permit_limit = excluded.permit_limit, token = excluded.token,
             acquired_at = excluded.acquired_at, expires_at = excluded.expires_at,
             shift = excluded.shift, principal = excluded.principal",
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
    ])?;
    Ok(())
}

/// A claim as the file spells it: its name, and the semaphore's limit for a permit.
fn claim_to_sql(claim: Claim) -> (&'static str, Option<u32>) {
    match claim {
        Claim::Permit { limit } => ("permit", Some(limit)),
        Claim::Read => ("read", None),
        Claim::Write => ("write", None),
    }
}

/// The claim of a row of `kind`, or why no hold can have it.
fn claim_from_sql(kind: HoldKind, claim: &str, limit: Option<i64>) -> Result<Claim, String> {
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
fn kind_from_sql(kind: &str) -> Result<HoldKind, String> {
    [HoldKind::Semaphore, HoldKind::RwLock]
        .into_iter()
        .find(|k| k.as_str() == kind)
        .ok_or_else(|| format!("kind {kind:?}"))
}

fn to_sql(what: &'static str, value: u64) -> Result<i64, WriteError> {
    i64::try_from(value).map_err(|_| WriteError::OutOfRange { what, value })
}

/// Opens the file and takes it for this server alone, durably journalled.
fn connect(path: &Path) -> Result<Connection, SqliteError> {
    let failed = |what: &'static str, source: rusqlite::Error| SqliteError::Open {
        path: path.to_path_buf(),
        what,
        source,
    };
    let conn = Connection::open(path).map_err(|e| failed("cannot open", e))?;
    // Another server holding the file must make this open fail at once, not wait for it.
    conn.busy_timeout(Duration::ZERO)
        .map_err(|e| failed("cannot configure", e))?;
    // Exclusive before WAL: the lock taken by the first write below is then held until
    // close, and WAL needs no shared memory, since no other connection may read.
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
        .map_err(|e| failed("cannot lock", e))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|e| failed("cannot set the journal mode of", e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(SqliteError::NoWal {
            path: path.to_path_buf(),
            mode,
        });
    }
    // FULL: every commit is fsynced before it returns, so an answered change survives a
    // power loss, not just a crash of this process.
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| failed("cannot configure", e))?;
    Ok(conn)
}

/// Brings the schema up to date. Always writes, even when there is nothing to migrate: the
/// write takes the exclusive lock that keeps other servers out from now on.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), SqliteError> {
    let failed = |source: rusqlite::Error| SqliteError::Open {
        path: path.to_path_buf(),
        what: "cannot prepare",
        source,
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(failed)?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(failed)?;
    let Some(applied) = usize::try_from(version).ok().filter(|v| *v <= MIGRATIONS.len()) else {
        return Err(SqliteError::UnknownSchema {
            path: path.to_path_buf(),
            version,
            known: MIGRATIONS.len(),
        });
    };
    for (version, migration) in (1_i64..).zip(MIGRATIONS).skip(applied) {
        tx.execute_batch(migration).map_err(failed)?;
        tx.pragma_update(None, "user_version", version).map_err(failed)?;
    }
    tx.execute("UPDATE meta SET last_token = last_token WHERE id = 1", [])
        .map_err(failed)?;
    tx.commit().map_err(failed)
}

/// Re-bases the leases and holds on the store's last recorded time, so that none loses time
/// the store was stopped but the time that really passed, and returns the store's clock from
/// now on (see the module docs).
///
/// With `recorded` the last batch's time: if the host has not rebooted since (the uptime
/// recorded with it is of this boot), the store's time resumes from `recorded` plus the
/// uptime since, and nothing moves. Else, with `now` the clock's reading: if `now` is later,
/// every lease and hold moves later by `now - recorded`, which only raises the file's shift by
/// that much (one row, whatever the number of leases: [`load`] applies it); if it is earlier,
/// the store's clock runs ahead of `clock` by `recorded - now`.
fn rebase(conn: &mut Connection, clock: Arc<dyn Clock>) -> Result<StoreClock, SqliteError> {
    let failed = SqliteError::Rebase;
    let tx = conn.transaction().map_err(failed)?;
    let (recorded, boot, since_boot): (i64, Option<String>, Option<i64>) = tx
        .query_row(
            "SELECT last_now, boot_id, since_boot FROM meta WHERE id = 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .map_err(failed)?;
    if recorded == 0 {
        // A new store: nothing to re-base.
        return Ok(StoreClock { clock, ahead_ms: 0 });
    }
    // The uptime before the time: the store's time resumed from it is then a little behind
    // rather than ahead, and no lease ends early.
    let uptime = clock.uptime();
    let now = to_ms(clock.now());
    let stopped = match (uptime, boot, since_boot) {
        (Some(up), Some(boot), Some(since)) if up.boot == boot => uptime_ms(up.since_boot).checked_sub(since),
        _ => None,
    };
    if let Some(stopped) = stopped.filter(|stopped| *stopped >= 0) {
        // The same boot: the store's time goes on from the record by exactly the time that
        // passed, as if the store had kept running, so every lease keeps the `expires_at` it
        // was acknowledged with.
        let resumed = recorded.saturating_add(stopped);
        let ahead_ms = resumed.saturating_sub(now);
        if ahead_ms.unsigned_abs() > WALL_CLOCK_NOTICED {
            let side = if ahead_ms > 0 { "behind" } else { "ahead of" };
            tracing::warn!(
                store_ms = resumed,
                wall_ms = now,
                "the wall clock reads {} ms {side} the embedded store's time: it was stepped \
                 since the store first started in this boot of the host. The store keeps its \
                 own time, and every lease its expires_at, until the host reboots",
                ahead_ms.unsigned_abs()
            );
        }
        return Ok(StoreClock { clock, ahead_ms });
    }
    if now <= recorded {
        // The clock reads earlier than the last batch: run ahead of it by the difference.
        return Ok(StoreClock {
            clock,
            ahead_ms: recorded - now,
        });
    }
    // The store's time is the clock's from now on: record it with this boot's uptime, read
    // after it, so that the next open in this boot counts from here.
    let uptime = clock.uptime();
    tx.execute(
        "UPDATE meta SET shift = shift + (?1 - ?2), last_now = ?1, boot_id = ?3, since_boot = ?4
         WHERE id = 1",
        params![
            now,
            recorded,
            uptime.as_ref().map(|up| up.boot.as_str()),
            uptime.as_ref().map(|up| recorded_uptime_ms(up.since_boot)),
        ],
    )
    .map_err(failed)?;
    tx.commit().map_err(failed)?;
    Ok(StoreClock { clock, ahead_ms: 0 })
}

/// How far (ms) the wall clock may read from the store's time at open before it is said.
const WALL_CLOCK_NOTICED: u64 = 1_000;

/// `time` in ms since the epoch, as the file keeps it.
fn to_ms(time: Timestamp) -> i64 {
    i64::try_from(time.as_millis()).unwrap_or(i64::MAX)
}

/// An uptime read at open, in whole ms rounded down: compared with one recorded (rounded
/// up), the time counted stopped is never more than really passed.
fn uptime_ms(uptime: Duration) -> i64 {
    i64::try_from(uptime.as_millis()).unwrap_or(i64::MAX)
}

/// An uptime to record with the store's time, in whole ms rounded up (see [`uptime_ms`]).
fn recorded_uptime_ms(uptime: Duration) -> i64 {
    i64::try_from(uptime.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX)
}

/// Reads every lease and hold (expired ones too: they are purged by the rules, not by a
/// restart) and the last token issued; returns them with the file's re-base shift.
///
/// Each row ends at its `expires_at` moved by the re-bases since it was written (the file's
/// shift less the row's): every lease and hold then has the time it had left at the last
/// batch before the stop, and one that had ended then has still ended.
fn load(conn: &Connection) -> Result<(LockTable, i64), SqliteError> {
    let unreadable = SqliteError::Read;
    let (last_token, shift): (i64, i64) = conn
        .query_row("SELECT last_token, shift FROM meta WHERE id = 1", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .map_err(unreadable)?;
    // In file order: asking SQLite for resource order (through its index) costs more than
    // the table's own sort. Row by row, names read in place: a copy fewer of each.
    let mut leases = Vec::new();
    let mut statement = conn
        .prepare(
            "SELECT resource, owner, token, acquired_at, expires_at, shift, principal, hold_until,
                 lock_delay
             FROM leases",
        )
        .map_err(unreadable)?;
    let mut rows = statement.query([]).map_err(unreadable)?;
    while let Some(row) = rows.next().map_err(unreadable)? {
        let lease = lease_from_row("lease", row, shift, 6)?;
        leases.push(with_terms(lease, row, shift)?);
    }
    let mut holds = Vec::new();
    let mut statement = conn
        .prepare(
            "SELECT name, owner, token, acquired_at, expires_at, shift, kind, claim, permit_limit,
                 principal
             FROM holds",
        )
        .map_err(unreadable)?;
    let mut rows = statement.query([]).map_err(unreadable)?;
    while let Some(row) = rows.next().map_err(unreadable)? {
        holds.push(hold_from_row(row, shift)?);
    }
    let table = LockTable::new(from_sql("last token", last_token)?, leases).with_holds(holds);
    Ok((table, shift))
}

/// The text in column `column` of `row`, read in place.
fn text<'r>(row: &'r rusqlite::Row<'_>, column: usize) -> Result<&'r str, SqliteError> {
    row.get_ref(column)
        .and_then(|value| value.as_str().map_err(rusqlite::Error::from))
        .map_err(SqliteError::Read)
}

/// The hold in `row` (its lease's columns as [`lease_from_row`] reads them, then kind, claim,
/// limit and principal), of a file whose re-base shift is `shift`.
fn hold_from_row(row: &rusqlite::Row<'_>, shift: i64) -> Result<(HoldKind, Hold), SqliteError> {
    let name = text(row, 0)?;
    let corrupt = |why: String| SqliteError::Data(format!("hold on {name:?}: {why}"));
    let kind = kind_from_sql(text(row, 6)?).map_err(corrupt)?;
    let limit = row.get(8).map_err(SqliteError::Read)?;
    let claim = claim_from_sql(kind, text(row, 7)?, limit).map_err(corrupt)?;
    let lease = lease_from_row(&format!("{kind} hold"), row, shift, 9)?;
    Ok((kind, Hold { lease, claim }))
}

/// The lease in `row` (resource or name, owner, token, `acquired_at`, `expires_at` and the
/// shift it was written under, and the principal in column `principal`), of a file whose
/// re-base shift is `shift`; `of` says what it belongs to, for the message if it is
/// unreadable.
fn lease_from_row(
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
    })
}

/// `lease` with the terms in columns 7 (`hold_until`, moved by the re-bases since the row
/// was written, as `expires_at` is) and 8 (`lock_delay`) of its lease row.
fn with_terms(lease: Lease, row: &rusqlite::Row<'_>, shift: i64) -> Result<Lease, SqliteError> {
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

/// A time written under re-base shift `written_under`, moved to the file's shift `shift`.
fn moved(time: i64, written_under: i64, shift: i64) -> Result<i64, String> {
    shift
        .checked_sub(written_under)
        .filter(|moved| *moved >= 0)
        .and_then(|moved| time.checked_add(moved))
        .ok_or_else(|| format!("{time} of shift {written_under} cannot be moved to shift {shift}"))
}

/// The principal in column `column` of `row`: none for NULL.
fn principal_from_sql(row: &rusqlite::Row<'_>, column: usize) -> Result<Option<Principal>, String> {
    let text: Option<&str> = row
        .get_ref(column)
        .and_then(|value| value.as_str_or_null().map_err(rusqlite::Error::from))
        .map_err(|e| e.to_string())?;
    text.map(|p| Principal::new(p).map_err(|e| e.to_string()))
        .transpose()
}

fn from_sql(what: &str, value: i64) -> Result<u64, SqliteError> {
    u64::try_from(value)
        .map_err(|_| SqliteError::Data(format!("negative {what} {value} in the SQLite store")))
}

/// The message of an error at open; a busy file means another server has it.
fn open_message(path: &Path, what: &str, error: &rusqlite::Error) -> String {
    let busy = matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    );
    if busy {
        format!(
            "{} is in use by another fencelock server: an embedded store belongs to one \
             server; to share a store between servers, use PostgreSQL or etcd",
            path.display()
        )
    } else {
        format!("{what} the SQLite store {}", path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pragma(conn: &Connection, name: &str) -> String {
        conn.pragma_query_value(None, name, |row| row.get::<_, rusqlite::types::Value>(0))
            .map(|value| format!("{value:?}"))
            .unwrap()
    }

    #[test]
    fn the_connection_is_durable_exclusive_and_never_waits_for_a_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        let mut conn = connect(&path).unwrap();
        migrate(&mut conn, &path).unwrap();
        assert_eq!(pragma(&conn, "journal_mode"), r#"Text("wal")"#);
        assert_eq!(pragma(&conn, "synchronous"), "Integer(2)", "2 is FULL");
        assert_eq!(pragma(&conn, "locking_mode"), r#"Text("exclusive")"#);
        assert_eq!(pragma(&conn, "busy_timeout"), "Integer(0)");
        assert_eq!(
            pragma(&conn, "user_version"),
            format!("Integer({})", MIGRATIONS.len())
        );
    }

    #[test]
    fn migrating_twice_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        let mut conn = connect(&path).unwrap();
        migrate(&mut conn, &path).unwrap();
        conn.execute("UPDATE meta SET last_token = 7", []).unwrap();
        migrate(&mut conn, &path).unwrap();
        assert_eq!(load(&conn).unwrap().0.last_token(), 7);
    }
}
