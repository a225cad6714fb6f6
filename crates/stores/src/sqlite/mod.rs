//! [`SqliteStore`] (`sqlite://PATH`): the embedded store, one SQLite file owned by one server.
//!
//! # How a call travels
//!
//! The writer — the connection and a [`LockTable`] of the file's leases and holds — runs
//! operations in batches, one batch at a time: it applies the batch to the table, writes
//! every changed lease row, every changed hold row and the last fencing token in one
//! transaction, and the callers are answered only once that transaction is committed and
//! fsynced: one fsync for the whole batch (*group commit*), and no caller ever hears of a
//! change that a crash could take back. If the transaction fails, the table is rolled back
//! (leases, holds and the token counter) and every caller of the batch gets
//! [`StoreError::Unavailable`]: nothing is half-done.
//!
//! Who runs a batch: a caller — its operation on a lock, a semaphore or a read-write lock
//! alike — that finds nothing queued and the writer free runs its operation at once, as a
//! batch of one, on its own thread, which it holds for that operation and its commit. Else
//! it queues the operation and waits: the writer thread takes what is queued (up to
//! [`MAX_BATCH`] operations) once the writer is free. One operation at a time then crosses
//! no thread to the writer and none back, which cost more than the operation's own work
//! (one client's acquire p50 10–20 % lower, see `docs/PERFORMANCE.md`); under load the queue is
//! rarely empty and the thread commits many together, as before. The caller's thread is a
//! tokio worker, held for the operation and its fsync, which no timeout can cut short: so a
//! call runs at once only on a runtime with another worker to go on serving (on a runtime of
//! one thread every call would commit alone), and only if its work is bounded and small —
//! the calls that may walk many leases or holds (a purge, a list, a name's holds, a forced
//! release) always queue. A batch that panics (a defect) leaves the table in doubt: the
//! writer is stopped and the file closed, the calls of that batch and every later call are
//! told the store is unavailable, wherever the batch ran.
//!
//! An all-or-none acquire of several locks is one operation of a batch: every lock or none
//! is in the transaction.
//!
//! Reads (get, list, holds, list of holds) go through the writer too, so they see every
//! change answered before them and nothing that is not yet durable. Releases, purges,
//! downgrades, shortened leases and holds, and withdrawn intents are announced to waiters by
//! the batch itself, once committed, so that an announcement cannot be lost with a caller
//! that went away.
//!
//! # Serving while the leases load
//!
//! At open the store reads the last token, every hold and the first [`load::CHUNK`] leases,
//! and serves; a loader thread reads the rest meanwhile, and the writer takes them in once
//! all are read. Until then each call names the leases it reads or writes (its `Reach`), and
//! the writer reads those the table lacks from the file before the call runs; a list reads
//! its page from the file. See `load` for why what the loader read never undoes an answer.
//!
//! # What is stored
//!
//! - `leases`: one row per lock, live or expired (expired rows go when purged or replaced;
//!   a lease with a lock-delay no sooner than its delay ends), with its terms: the cap on
//!   holding (`hold_until`, none if NULL) and the lock-delay in ms. Keyed by the resource
//!   alone, without a rowid: the rows are kept in the byte order of their names, which is the
//!   table's, so the load builds the table from them without sorting; and a write
//!   changes one b-tree, not a table and its index.
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
//!
//! # Layout
//!
//! - this module: [`SqliteStore`], its queue, and the [`LockStore`] calls it turns into jobs.
//! - `writer`: the connection and the table, the thread that runs what is queued, and the
//!   batch of one a caller runs when the writer is idle.
//! - `load`: the file into the table: at open, and the rest by the loader while serving.
//! - `schema`: the migrations, and the connection that takes the file for one server.
//! - `clock`: the store's time across a stop (the re-base at open).
//! - `row`: rows to and from leases and holds (the codec).
//! - `error`: the private error enum, converted into [`StoreError`] in one place.

mod clock;
mod error;
mod load;
mod row;
mod schema;
mod writer;

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use async_trait::async_trait;
use fencelock_core::store::Result;
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Capabilities, Claim, Clock, Expired, FencingToken, ForceOutcome, Hold,
    HoldKind, HoldOutcome, HoldPage, Key, Lease, LeasePage, ListQuery, LockStore, LockTable, Meta, Owner,
    ReleaseFeed, ReleaseNotice, ReleaseOutcome, RenewOutcome, Resource, Resources, StoreError, SystemClock,
    Terms, Timestamp, Ttl,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use self::clock::rebase;
use self::error::{SqliteError, WriteError};
use self::schema::{connect, migrate};
use self::writer::{Loading, Shared, Writer};

/// The most operations the writer commits together. A bound keeps one transaction, and the
/// wait of the first caller in it, short under any load.
pub const MAX_BATCH: usize = 1024;

/// How many operations may wait for the writer before callers wait to queue.
const QUEUE_CAPACITY: usize = 4 * MAX_BATCH;

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
    /// The writer, shared by its thread and callers that find it idle.
    shared: Arc<Shared>,
    /// Becomes `true` when the writer has closed the file.
    closed: watch::Receiver<bool>,
    writer: Option<JoinHandle<()>>,
    /// The thread that loads the leases after the first chunk, if the file had more.
    loader: Option<JoinHandle<()>>,
    released: ReleaseFeed,
    counters: Arc<Counters>,
    path: PathBuf,
}

/// What the writer has done since the store was opened, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterStats {
    /// Operations answered (reads included).
    pub operations: u64,
    /// Batches run: by the writer thread, or by a caller that found the writer idle (a
    /// batch of one).
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

/// One caller's operation, on its way through the writer.
type Job = Box<dyn Pending>;

/// An operation on its way through the writer: applied to the table with the rest of its
/// batch, then answered once the batch's fate is known. The operation, its outcome and the
/// caller's reply are one allocation (a [`Call`]); a closure that returned the answering
/// closure took two per call.
trait Pending: Send {
    /// The leases the operation reads or writes, if the store was still loading its leases
    /// when the call was made.
    fn reach(&self) -> Option<&Reach>;

    /// Applies the operation to `table` at `now`, keeping its outcome for the answer.
    fn apply(&mut self, table: &mut LockTable, now: Timestamp);

    /// Gives up the operation before it is applied: its outcome is `error`.
    fn refuse(&mut self, error: StoreError);

    /// Answers the caller: with its outcome if the batch committed, else with the batch's
    /// failure.
    fn answer(self: Box<Self>, failure: Option<&Arc<WriteError>>);
}

/// A caller's operation `op`, then its outcome, and where the caller waits for it.
struct Call<F, T> {
    reach: Option<Reach>,
    op: Option<F>,
    outcome: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<F, T> Pending for Call<F, T>
where
    F: FnOnce(&mut LockTable, Timestamp) -> Result<T> + Send,
    T: Send,
{
    fn reach(&self) -> Option<&Reach> {
        self.reach.as_ref()
    }

    fn apply(&mut self, table: &mut LockTable, now: Timestamp) {
        if let Some(op) = self.op.take() {
            self.outcome = Some(op(table, now));
        }
    }

    fn refuse(&mut self, error: StoreError) {
        self.op = None;
        self.outcome = Some(Err(error));
    }

    fn answer(self: Box<Self>, failure: Option<&Arc<WriteError>>) {
        let Call { outcome, reply, .. } = *self;
        let answer = match (failure, outcome) {
            (Some(error), _) => Err(SqliteError::Batch(Arc::clone(error)).into()),
            (None, Some(outcome)) => outcome,
            // Never applied (the writer applies a whole batch before it answers any of it):
            // no reply, which the caller takes for a stopped writer.
            (None, None) => return,
        };
        // The caller may have given up waiting; the change stands all the same.
        let _ = reply.send(answer);
    }
}

/// The leases an operation reads or writes, for a store still loading its leases (see
/// `load`): the writer first reads from the file those of the names the table does not have
/// yet.
enum Reach {
    /// The leases of these names, and no other (none, for an operation on holds alone).
    Leases(Vec<Resource>),
    /// The leases of a page of a list, which the writer reads from the file (see
    /// `Writer::read_reach`). Boxed: every call carries a `Reach`, and few a list's.
    Page(Box<ListQuery>),
}

impl Reach {
    const NONE: Reach = Reach::Leases(Vec::new());

    fn one(resource: &Resource) -> Self {
        Self::Leases(vec![resource.clone()])
    }
}

enum Message {
    Job(Job),
    /// Stop taking operations, answer those queued, close the file.
    Close,
    /// The leases the loader read after the open, for the table to take in; or why they
    /// could not be read, which stops the store.
    Loaded(Box<std::result::Result<LockTable, SqliteError>>),
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
        Self::open_paced(path, clock, || {})
    }

    /// [`SqliteStore::open_with_clock`], with `paced` run by the loader after each chunk of
    /// leases it reads after the first: a test holds it there.
    fn open_paced(
        path: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        paced: impl FnMut() + Send + 'static,
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut conn = connect(&path)?;
        migrate(&mut conn, &path)?;
        let clock = rebase(&mut conn, clock)?;
        let load::Opening {
            table,
            shift,
            rest_after,
        } = load::open(&conn)?;
        let counters = Arc::new(Counters::default());
        let (closed_tx, closed) = watch::channel(false);
        let released = ReleaseFeed::new();
        let last_token = table.last_token();
        let writer = Writer {
            persisted_token: last_token,
            shift,
            loading: rest_after.clone().map(|after| Loading {
                after,
                known: HashSet::new(),
            }),
            conn,
            table,
            clock,
            counters: counters.clone(),
            released: released.clone(),
            closed: closed_tx,
        };
        let shared = Arc::new(Shared {
            writer: parking_lot::Mutex::new(Some(writer)),
            thread_waiting: false.into(),
            closing: false.into(),
            in_hand: 0.into(),
            loading: rest_after.is_some().into(),
        });
        let (queue, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let thread = shared.clone();
        let writer = std::thread::Builder::new()
            .name("fencelock-sqlite".into())
            .spawn(move || thread.run(receiver))
            .map_err(SqliteError::Thread)?;
        let loader = match rest_after
            .map(|after| load::spawn(shared.clone(), queue.downgrade(), after, last_token, paced))
            .transpose()
        {
            Ok(loader) => loader,
            Err(error) => {
                // The writer thread closes the file once the queue is gone: before this
                // returns, so that the open can be tried again at once.
                drop(queue);
                let _ = writer.join();
                return Err(error.into());
            }
        };
        Ok(Self {
            queue: Some(queue),
            shared,
            closed,
            writer: Some(writer),
            loader,
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

    /// How many operations are waiting for the writer to run them.
    pub fn queued(&self) -> usize {
        // In this order: a message moves from the queue to the thread's hand, never back, so
        // it is counted at most once (for a moment, perhaps not at all).
        let in_hand = self.shared.in_hand.load(Ordering::Acquire);
        in_hand + self.queue.as_ref().map_or(0, |q| q.max_capacity() - q.capacity())
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
        // The writer thread closes the file however it ends, a panic included (see
        // `Shared::run`); an error here would mean the writer was dropped: closed all the same.
        let _ = self.closed.clone().wait_for(|closed| *closed).await;
    }

    /// Runs `op`, which reads or writes the leases `reach` names, through the writer and
    /// waits until its batch is durable: at once on this thread if the writer is idle, else
    /// queued for the writer thread.
    async fn call<T: Send + 'static>(
        &self,
        reach: impl FnOnce() -> Reach,
        op: impl FnOnce(&mut LockTable, Timestamp) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.submit(reach, op, true).await
    }

    /// Queues `op`, which reads or writes the leases `reach` names, for the writer thread
    /// whatever the writer is doing, and waits until its batch is durable: for an operation
    /// that may walk many leases or holds, too long to hold a caller's thread.
    async fn queued_call<T: Send + 'static>(
        &self,
        reach: impl FnOnce() -> Reach,
        op: impl FnOnce(&mut LockTable, Timestamp) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.submit(reach, op, false).await
    }

    /// Runs `op` at once if `at_once` allows and the writer is idle, else queues it; then
    /// waits for its answer. Its `reach` is only asked while the leases are loading.
    async fn submit<T: Send + 'static>(
        &self,
        reach: impl FnOnce() -> Reach,
        op: impl FnOnce(&mut LockTable, Timestamp) -> Result<T> + Send + 'static,
        at_once: bool,
    ) -> Result<T> {
        let queue = self.queue.as_ref().ok_or(SqliteError::Closed)?;
        let (reply, answer) = oneshot::channel();
        let reach = self.shared.loading.load(Ordering::Acquire).then(reach);
        let job: Job = Box::new(Call {
            reach,
            op: Some(op),
            outcome: None,
            reply,
        });
        let queue_empty = queue.capacity() == queue.max_capacity();
        let job = if at_once && queue_empty {
            self.shared.run_if_idle(job)
        } else {
            Err(job)
        };
        if let Err(job) = job {
            queue
                .send(Message::Job(job))
                .await
                .map_err(|_| SqliteError::Closed)?;
        }
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
        // It stops at its next chunk, finding the file closed; it catches its own panics.
        if let Some(loader) = self.loader.take() {
            let _ = loader.join();
        }
    }
}

#[async_trait]
impl LockStore for SqliteStore {
    async fn acquire_with(&self, resource: &Resource, owner: &Owner, terms: Terms) -> Result<AcquireOutcome> {
        let reach = || Reach::one(resource);
        let (resource, owner) = (resource.clone(), owner.clone());
        self.call(reach, move |table, now| {
            table.acquire(now, &resource, &owner, &terms)
        })
        .await
    }

    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        let reach = || Reach::Leases(resources.as_slice().to_vec());
        let (resources, owner) = (resources.clone(), owner.clone());
        self.call(reach, move |table, now| {
            table.acquire_all(now, &resources, &owner, &terms)
        })
        .await
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        let reach = || Reach::one(resource);
        let resource = resource.clone();
        self.call(reach, move |table, now| Ok(table.get(now, &resource)))
            .await
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let reach = || Reach::one(resource);
        let (resource, owner) = (resource.clone(), owner.clone());
        self.call(reach, move |table, now| {
            Ok(table.release(now, &resource, &owner, token))
        })
        .await
    }

    async fn renew_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome> {
        let reach = || Reach::one(resource);
        let (resource, owner, meta) = (resource.clone(), owner.clone(), meta.cloned());
        self.call(reach, move |table, now| {
            Ok(table.renew(now, &resource, &owner, ttl, token, meta.as_ref()))
        })
        .await
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        let reach = || Reach::Page(Box::new(query.clone()));
        let query = query.clone();
        self.queued_call(reach, move |table, now| Ok(table.list(now, &query)))
            .await
    }

    async fn purge_expired(&self) -> Result<Vec<Expired>> {
        // A purge walks up to a batch of ended leases and holds: not on a caller's thread.
        // While the leases load, it forgets what has ended of those the table has (the
        // names asked about), and the rest once they are in.
        self.queued_call(|| Reach::NONE, |table, now| Ok(table.purge_expired(now)))
            .await
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
        let (name, owner, meta) = (name.clone(), owner.clone(), meta.cloned());
        self.call(
            || Reach::NONE,
            move |table, now| table.acquire_hold(now, &name, &owner, claim, ttl, intent, meta.as_ref()),
        )
        .await
    }

    async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        let name = name.clone();
        self.queued_call(
            || Reach::NONE,
            move |table, now| Ok(table.holds(now, kind, &name)),
        )
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
        self.call(
            || Reach::NONE,
            move |table, now| Ok(table.release_hold(now, kind, &name, &owner, token)),
        )
        .await
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
        let (name, owner, meta) = (name.clone(), owner.clone(), meta.cloned());
        self.call(
            || Reach::NONE,
            move |table, now| Ok(table.renew_hold(now, kind, &name, &owner, ttl, token, meta.as_ref())),
        )
        .await
    }

    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage> {
        let query = query.clone();
        self.queued_call(
            || Reach::NONE,
            move |table, now| Ok(table.list_holds(now, kind, &query)),
        )
        .await
    }

    async fn withdraw_intent(&self, name: &Resource, owner: &Owner) -> Result<()> {
        // Nothing to write (intents live in the table only), but through the writer all the
        // same: the readers it held back are told once the batch is done, in order.
        let (name, owner) = (name.clone(), owner.clone());
        self.call(
            || Reach::NONE,
            move |table, _| {
                table.withdraw_intent(&name, &owner);
                Ok(())
            },
        )
        .await
    }

    async fn force_release(&self, key: &Key) -> Result<ForceOutcome> {
        // A hold's key names no lease.
        let reach = || match key.kind.hold_kind() {
            None => Reach::one(&key.name),
            Some(_) => Reach::NONE,
        };
        let key = key.clone();
        self.queued_call(reach, move |table, now| Ok(table.force_release(now, &key)))
            .await
    }

    async fn ping(&self) -> Result<()> {
        // Through the writer, so a stopped or stuck writer fails readiness.
        self.call(|| Reach::NONE, |_, _| Ok(())).await
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
