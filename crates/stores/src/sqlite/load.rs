//! The file into the table: at open the last token, every hold and the first [`CHUNK`]
//! leases; the rest of the leases by the loader, in the background, while the store serves.
//!
//! Until the loader is done, the table has only some of the leases: those of the first chunk,
//! and those of each name a call has asked about since, which the writer reads from the file
//! by its key before the call runs ([`read_lease`]; the calls name their leases, see
//! [`Reach`](super::Reach)). The loader reads the rest in chunks, in the order of the key, each
//! under the writer's lock between batches, and builds them into a table of its own, which the
//! writer then takes in ([`LockTable::take_in`]): every name asked about meanwhile keeps the
//! served table's lease (or none), whatever the loader read, and every other name's lease has
//! not changed since the open, so that what the loader read of it is what the file has. Until
//! then a list reads its page from the file ([`read_page`]), which at the start of each batch
//! has every lease as it is; the purge forgets what has ended of the leases the table has, and
//! the rest once they are in.
//!
//! Ten million leases took some ten seconds to load (`docs/PERFORMANCE.md`), and a server
//! that loaded them before it served was down as long at each restart.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use fencelock_core::{Lease, ListQuery, LockTable, Resource, Timestamp};
use parking_lot::MutexGuard;
use rusqlite::Connection;
use tokio::sync::mpsc::WeakSender;

use super::Message;
use super::error::SqliteError;
use super::row::{from_sql, hold_from_row, lease_from_row, meta_from_sql, text, with_terms};
use super::writer::Shared;

/// How many leases are read at a time: at open, then by the loader under the writer's lock,
/// which a chunk holds for about a millisecond.
pub(super) const CHUNK: usize = 1024;

/// How many chunks may wait for the loader's gatherer: the reader runs ahead by this much at
/// most.
const CHUNKS_IN_FLIGHT: usize = 64;

/// The columns of a lease row, in the order [`lease_row`] reads them.
macro_rules! lease_columns {
    () => {
        "resource, owner, token, acquired_at, expires_at, shift, principal, hold_until, lock_delay, meta"
    };
}

/// What the open reads of the file.
pub(super) struct Opening {
    /// The last token, every hold, and the leases of the first chunk.
    pub(super) table: LockTable,
    /// The file's re-base shift.
    pub(super) shift: i64,
    /// The name of the last lease read, if there may be more after it for the loader.
    pub(super) rest_after: Option<String>,
}

/// Reads the last token, every hold (expired ones too: they are purged by the rules, not by a
/// restart) and the first [`CHUNK`] leases, and says where the rest begins.
///
/// Each row ends at its `expires_at` moved by the re-bases since it was written (the file's
/// shift less the row's): every lease and hold then has the time it had left at the last
/// batch before the stop, and one that had ended then has still ended.
pub(super) fn open(conn: &Connection) -> Result<Opening, SqliteError> {
    let started = Instant::now();
    let unreadable = SqliteError::Read;
    let (last_token, shift): (i64, i64) = conn
        .query_row("SELECT last_token, shift FROM meta WHERE id = 1", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .map_err(unreadable)?;
    // Checked after the leases, as before they were read into the table.
    let last_token = from_sql("last token", last_token);
    let first = read_chunk(conn, "", shift)?;
    let rest_after = (first.len() == CHUNK)
        .then(|| first.last().map(|lease| lease.resource.to_string()))
        .flatten();
    let mut holds = Vec::new();
    let sql = "SELECT name, owner, token, acquired_at, expires_at, shift, kind, claim, permit_limit,
                   principal, meta
               FROM holds";
    step(conn, sql, [], |row| {
        holds.push(hold_from_row(row, shift)?);
        Ok(true)
    })?;
    let table = LockTable::new(last_token?, first).with_holds(holds);
    if rest_after.is_none() {
        // Said as the loader says it, for whoever waits for the line (`scripts/bench-scale`).
        tracing::info!(
            seconds = started.elapsed().as_secs_f64(),
            "the embedded store has loaded every lease"
        );
    }
    Ok(Opening {
        table,
        shift,
        rest_after,
    })
}

/// The lease on `resource` in the file, if it has one, for a call that asks about it while
/// the loader has not read it.
pub(super) fn read_lease(
    conn: &Connection,
    resource: &Resource,
    shift: i64,
) -> Result<Option<Lease>, SqliteError> {
    let sql = concat!("SELECT ", lease_columns!(), " FROM leases WHERE resource = ?1");
    Ok(select(conn, sql, [resource.as_str()], shift)?.pop())
}

/// The live leases of the file that a list by `query` at `now` pages: from its start (after
/// `query.after`, within `query.prefix`) in the order of the key, until one more than
/// `query.limit` or the end of the prefix — what [`LockTable::list`] keeps of a table of every
/// lease. Stepped a row at a time: it reads no row past the page (a corrupt one there fails
/// no list that does not reach it), and keeps none of the ended leases it passes (the purge
/// cannot forget those the table has not loaded yet).
pub(super) fn read_page(
    conn: &Connection,
    query: &ListQuery,
    now: Timestamp,
    shift: i64,
) -> Result<Vec<Lease>, SqliteError> {
    let sql = concat!(
        "SELECT ",
        lease_columns!(),
        " FROM leases WHERE resource >= ?1 AND resource > ?2 ORDER BY resource"
    );
    let after = query.after.as_ref().map_or("", |after| after.as_str());
    let mut page = Vec::new();
    step(conn, sql, rusqlite::params![query.prefix, after], |row| {
        if !text(row, 0)?.starts_with(&query.prefix) {
            return Ok(false);
        }
        let lease = lease_row(row, shift)?;
        if lease.is_live(now) {
            page.push(lease);
        }
        Ok(page.len() <= query.limit)
    })?;
    Ok(page)
}

/// Starts the loader of the leases after `after`, whose table goes to the writer thread on
/// `queue` once complete — or why it is not: the file could not be read, or the writer
/// stopped first. `paced` runs after each chunk is read, the writer free again: a test holds
/// the loader there.
pub(super) fn spawn(
    shared: Arc<Shared>,
    queue: WeakSender<Message>,
    after: String,
    last_token: u64,
    paced: impl FnMut() + Send + 'static,
) -> Result<JoinHandle<()>, SqliteError> {
    std::thread::Builder::new()
        .name("fencelock-load".into())
        .spawn(move || {
            let started = Instant::now();
            let loaded =
                std::panic::catch_unwind(AssertUnwindSafe(|| load_rest(&shared, after, last_token, paced)))
                    .unwrap_or_else(|panic| Err(SqliteError::LoadPanicked(panic_message(&*panic))));
            if let Ok(table) = &loaded {
                tracing::info!(
                    seconds = started.elapsed().as_secs_f64(),
                    "the embedded store has loaded every lease"
                );
                if table.last_token() > last_token {
                    // The writer keeps the counter at or above every token it writes, in the
                    // same transaction: only a file changed by other hands has this.
                    tracing::error!(
                        counter = last_token,
                        highest = table.last_token(),
                        "the SQLite store's token counter was behind its leases: tokens granted \
                         while it loaded may repeat those of leases it had not read"
                    );
                }
            }
            // Gone if the store was dropped meanwhile: nobody waits.
            if let Some(queue) = queue.upgrade() {
                let _ = queue.blocking_send(Message::Loaded(Box::new(loaded)));
            }
        })
        .map_err(SqliteError::LoaderThread)
}

/// What a panic said, if it said it in words.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Reads every lease after `after`, chunk by chunk under the writer's lock, while a second
/// thread gathers them (the host has two cores or more), and builds the table once all are
/// read; [`SqliteError::Closed`] if the writer stopped first.
fn load_rest(
    shared: &Shared,
    mut after: String,
    last_token: u64,
    mut paced: impl FnMut(),
) -> Result<LockTable, SqliteError> {
    let leases = std::thread::scope(|scope| {
        let (chunks, received) = mpsc::sync_channel::<Vec<Lease>>(CHUNKS_IN_FLIGHT);
        let gatherer = std::thread::Builder::new()
            .name("fencelock-gather".into())
            .spawn_scoped(scope, move || {
                received.into_iter().flatten().collect::<Vec<Lease>>()
            })
            .map_err(SqliteError::LoaderThread)?;
        let read = loop {
            let slot = shared.writer.lock();
            let Some(writer) = slot.as_ref() else {
                break Err(SqliteError::Closed);
            };
            let chunk = read_chunk(&writer.conn, &after, writer.shift);
            // Handed to the writer thread if it waits, which this loop would otherwise
            // outrun, taking the lock again before the thread woke.
            MutexGuard::unlock_fair(slot);
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(error) => break Err(error),
            };
            paced();
            let last = chunk.len() < CHUNK;
            if let Some(lease) = chunk.last() {
                after = lease.resource.to_string();
            }
            // The gatherer only stops early by panicking, which is passed on below.
            if chunks.send(chunk).is_err() || last {
                break Ok(());
            }
        };
        drop(chunks);
        let leases = gatherer
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // Built only if complete: a table of part of the file is of no use.
        read.map(|()| leases)
    })?;
    Ok(LockTable::new(last_token, leases))
}

/// The next [`CHUNK`] leases after the name `after` (`""` for the first: no name is empty), in
/// the order of the key: the table's build, which sorts them, then finds them sorted.
fn read_chunk(conn: &Connection, after: &str, shift: i64) -> Result<Vec<Lease>, SqliteError> {
    let sql = concat!(
        "SELECT ",
        lease_columns!(),
        " FROM leases WHERE resource > ?1 ORDER BY resource LIMIT ?2"
    );
    select(conn, sql, rusqlite::params![after, CHUNK as i64], shift)
}

/// The leases `sql` (a select of [`lease_columns`]) reads with `params`, in its order.
fn select(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    shift: i64,
) -> Result<Vec<Lease>, SqliteError> {
    let mut leases = Vec::new();
    step(conn, sql, params, |row| {
        leases.push(lease_row(row, shift)?);
        Ok(true)
    })?;
    Ok(leases)
}

/// Steps `sql` with `params` a row at a time, handing each to `each` while it says go on.
fn step(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    mut each: impl FnMut(&rusqlite::Row<'_>) -> Result<bool, SqliteError>,
) -> Result<(), SqliteError> {
    let unreadable = SqliteError::Read;
    let mut statement = conn.prepare_cached(sql).map_err(unreadable)?;
    let mut rows = statement.query(params).map_err(unreadable)?;
    while let Some(row) = rows.next().map_err(unreadable)? {
        if !each(row)? {
            break;
        }
    }
    Ok(())
}

/// The lease in `row`, a row of `leases` as [`lease_columns`] selects it, of a file whose
/// re-base shift is `shift`.
fn lease_row(row: &rusqlite::Row<'_>, shift: i64) -> Result<Lease, SqliteError> {
    let lease = lease_from_row("lease", row, shift, 6)?;
    let meta = meta_from_sql("lease", row, 9).map_err(|error| match error {
        SqliteError::Data(why) => SqliteError::Data(format!("{why}, on {:?}", lease.resource)),
        other => other,
    })?;
    Ok(Lease {
        meta,
        ..with_terms(lease, row, shift)?
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use fencelock_core::{
        AcquireOutcome, FencingToken, HoldKind, ListQuery, LockStore, ManualClock, ReleaseOutcome,
        StoreError, Timestamp,
    };
    use fencelock_testkit::fixtures::{owner, resource, ttl};

    use super::super::{Reach, SqliteStore};
    use super::*;

    const T0: Timestamp = Timestamp::from_millis(1_795_933_800_000);

    /// Three chunks' worth: the first read at open, the second and the third by the loader.
    const LEASES: usize = 2 * CHUNK + CHUNK / 2;

    /// A store file with [`LEASES`] leases, `r/0000` on, held by `o` for an hour from T0, with
    /// tokens 1 on; `tamper` then runs on it.
    fn file(tamper: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        drop(SqliteStore::open_with_clock(&path, Arc::new(ManualClock::new(T0))).unwrap());
        let conn = Connection::open(&path).unwrap();
        let mut insert = conn
            .prepare(
                "INSERT INTO leases (resource, owner, token, acquired_at, expires_at)
                 VALUES (?1, 'o', ?2, ?3, ?4)",
            )
            .unwrap();
        let start = i64::try_from(T0.as_millis()).unwrap();
        for i in 0..LEASES {
            let row = rusqlite::params![format!("r/{i:04}"), i as i64 + 1, start, start + 3_600_000];
            insert.execute(row).unwrap();
        }
        conn.execute("UPDATE meta SET last_token = ?1", [LEASES as i64])
            .unwrap();
        conn.execute_batch(tamper).unwrap();
        (dir, path)
    }

    /// Opens `path` with a loader held after each chunk it reads, until the test lets it go.
    fn open_held(path: &std::path::Path) -> (Arc<SqliteStore>, Loader) {
        let (read, has_read) = std::sync::mpsc::sync_channel(0);
        let (go, wait) = std::sync::mpsc::channel();
        let clock = Arc::new(ManualClock::new(T0));
        let store = SqliteStore::open_paced(path, clock, move || {
            // The test may have stopped listening, or let it go for good.
            let _ = read.send(());
            let _ = wait.recv();
        })
        .unwrap();
        (Arc::new(store), Loader { has_read, _go: go })
    }

    /// A store on [`file`]`(tamper)` whose loader has read its second chunk and waits.
    async fn loading(tamper: &str) -> (tempfile::TempDir, std::path::PathBuf, Arc<SqliteStore>, Loader) {
        let (dir, path) = file(tamper);
        let (store, loader) = open_held(&path);
        loader.has_read().await;
        (dir, path, store, loader)
    }

    /// The loader of a store opened by [`open_held`].
    struct Loader {
        has_read: std::sync::mpsc::Receiver<()>,
        /// Dropped, lets the loader go on to the end.
        _go: std::sync::mpsc::Sender<()>,
    }

    impl Loader {
        /// Waits until the loader has read its next chunk; it waits there.
        async fn has_read(&self) {
            tokio::task::block_in_place(|| self.has_read.recv().unwrap());
        }

        /// Lets the loader go on to the end.
        fn go(self) {
            drop(self);
        }
    }

    /// The change to [`file`] that makes the lease of `name` unreadable.
    fn unreadable(name: &Resource) -> String {
        format!("UPDATE leases SET meta = 'not json' WHERE resource = '{name}'")
    }

    fn assert_corrupt(error: &StoreError, name: &Resource) {
        assert!(
            matches!(error, StoreError::Corrupt(m) if m.contains(name.as_str())),
            "{error}"
        );
    }

    fn every() -> ListQuery {
        ListQuery {
            prefix: String::new(),
            after: None,
            limit: 10 * LEASES,
        }
    }

    fn name(i: usize) -> Resource {
        resource(&format!("r/{i:04}"))
    }

    fn minute() -> fencelock_core::Ttl {
        ttl(Duration::from_secs(60))
    }

    async fn granted(store: &SqliteStore, name: &str) -> Lease {
        match store.acquire(&resource(name), &owner("p"), minute()).await {
            Ok(AcquireOutcome::Granted { lease, .. }) => lease,
            other => panic!("{name}: {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_answers_from_the_file_while_it_loads_and_the_load_undoes_none_of_it() {
        let (_dir, path, store, loader) = loading("").await;
        // The loader has read the second chunk and waits to read the third.
        let read_not_in = name(CHUNK + 100);
        let unread = name(2 * CHUNK + 100);

        let lease = store.get(&read_not_in).await.unwrap().unwrap();
        assert_eq!((lease.owner.as_str(), lease.token.0), ("o", (CHUNK + 101) as u64));
        for name in [&read_not_in, &unread] {
            let released = store.release(name, &owner("o"), None).await.unwrap();
            assert!(
                matches!(released, ReleaseOutcome::Released(_)),
                "{name}: {released:?}"
            );
        }
        for held in [name(5), name(CHUNK + 5), name(2 * CHUNK + 5)] {
            let refused = store.acquire(&held, &owner("p"), minute()).await;
            assert!(
                matches!(refused, Ok(AcquireOutcome::Held { .. })),
                "{held}: {refused:?}"
            );
        }
        let new = granted(&store, "s/new").await;
        assert_eq!(
            new.token,
            FencingToken(LEASES as u64 + 1),
            "above the file's last"
        );

        // A list during the load reads the file, which has every change answered.
        let page = store.list(&every()).await.unwrap();
        assert!(store.shared.loading.load(Ordering::Acquire), "still loading");
        assert_eq!(page.leases.len(), LEASES - 2 + 1);
        let short = ListQuery {
            prefix: "r/1".into(),
            after: Some(name(1100)),
            limit: 3,
        };
        let listed = store.list(&short).await.unwrap();
        assert_page(&listed, (1101..=1103).map(name).collect());

        finish(&store, loader).await;
        assert_eq!(store.list(&every()).await.unwrap(), page, "the same once loaded");
        assert_eq!(store.list(&short).await.unwrap(), listed);
        let find = |name: &Resource| page.leases.iter().find(|l| l.resource == *name);
        assert_eq!(
            find(&read_not_in),
            None,
            "a release undone by what the loader had read"
        );
        assert_eq!(find(&unread), None);
        assert_eq!(find(&new.resource), Some(&new));
        let kept = find(&name(2 * CHUNK + 5)).unwrap();
        assert_eq!((kept.owner.as_str(), kept.token.0), ("o", (2 * CHUNK + 6) as u64));
        assert_eq!(store.get(&read_not_in).await.unwrap(), None);
        let next = granted(&store, "s/next").await;
        assert_eq!(next.token, FencingToken(LEASES as u64 + 2));

        // And the file says the same.
        store.close().await;
        let reopened = SqliteStore::open_with_clock(&path, Arc::new(ManualClock::new(T0))).unwrap();
        let mut expected = page.leases;
        expected.push(next);
        expected.sort_by(|a, b| a.resource.cmp(&b.resource));
        assert_eq!(reopened.list(&every()).await.unwrap().leases, expected);
    }

    /// Asserts that `page` has the leases of `names`, and goes on after the last (a page of a
    /// list with more to come).
    fn assert_page(page: &fencelock_core::LeasePage, names: Vec<Resource>) {
        let listed: Vec<&Resource> = page.leases.iter().map(|l| &l.resource).collect();
        assert_eq!(listed, names.iter().collect::<Vec<_>>());
        assert_eq!(page.next.as_ref(), names.last());
    }

    /// Lets `loader` go, and returns once `store` has every lease.
    async fn finish(store: &SqliteStore, loader: Loader) {
        loader.go();
        // This thread is not one of the runtime's workers.
        while !store.loader.as_ref().is_some_and(JoinHandle::is_finished) {
            std::thread::yield_now();
        }
        // Queued behind the loaded leases, which the writer thread takes in first.
        store.holds(HoldKind::Semaphore, &name(1)).await.unwrap();
        assert!(!store.shared.loading.load(Ordering::Acquire));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_list_during_the_load_pages_past_ended_leases_as_it_does_once_loaded() {
        // More than a chunk of ended leases, in the middle of the file.
        let ended = format!(
            "UPDATE leases SET expires_at = {} WHERE resource >= 'r/1024' AND resource <= 'r/2100'",
            T0.as_millis()
        );
        let (_dir, _, store, loader) = loading(&ended).await;
        let query = ListQuery {
            prefix: "r/".into(),
            after: Some(name(1000)),
            limit: 30,
        };
        let during = store.list(&query).await.unwrap();
        assert_page(&during, (1001..1024).chain(2101..2108).map(name).collect());
        finish(&store, loader).await;
        assert_eq!(store.list(&query).await.unwrap(), during);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_that_cannot_be_read_fails_its_call_then_the_load_and_the_store_stops() {
        let bad = name(2 * CHUNK + 7);
        let (_dir, path, store, loader) = loading(&unreadable(&bad)).await;

        let error = store.get(&bad).await.unwrap_err();
        assert_corrupt(&error, &bad);
        let error = store.acquire(&bad, &owner("p"), minute()).await.unwrap_err();
        assert!(
            matches!(error, StoreError::Corrupt(_)),
            "nothing written: {error}"
        );
        assert!(
            store.get(&name(2 * CHUNK + 8)).await.unwrap().is_some(),
            "others still answer"
        );

        assert_corrupt(&store.list(&every()).await.unwrap_err(), &bad);
        // A page whose look past its end (one more lease) stops just before it.
        let clear = ListQuery {
            prefix: "r/2".into(),
            after: None,
            limit: 2 * CHUNK + 7 - 2000 - 1,
        };
        let page = store.list(&clear).await.unwrap();
        assert_eq!(page.next, Some(name(2 * CHUNK + 5)));

        // The loader finds it too: the store stops.
        loader.go();
        while !store.loader.as_ref().is_some_and(JoinHandle::is_finished) {
            std::thread::yield_now();
        }
        // Queued behind the loader's failure: the first may share its batch and be told it.
        assert!(store.holds(HoldKind::Semaphore, &name(1)).await.is_err());
        let error = store.get(&name(1)).await.unwrap_err();
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error}");
        store.close().await;
        assert!(SqliteStore::open(&path).is_ok(), "the file was let go");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_that_cannot_be_read_fails_its_call_alone_in_a_batch_of_others() {
        let bad = name(2 * CHUNK + 7);
        let (_dir, _, store, loader) = loading(&unreadable(&bad)).await;
        // The writer held, both calls queue, and the thread takes them as one batch.
        let writer = store.shared.writer.lock();
        let calls = {
            let (store, bad) = (store.clone(), bad.clone());
            tokio::spawn(async move {
                let (other, p) = (resource("s/other"), owner("p"));
                tokio::join!(store.get(&bad), store.acquire(&other, &p, minute()))
            })
        };
        // This thread is not one of the runtime's workers, which run the calls.
        while store.queued() < 2 {
            std::thread::yield_now();
        }
        let batches = store.stats().batches;
        drop(writer);
        let (bad_read, other) = calls.await.unwrap();
        assert_eq!(store.stats().batches, batches + 1, "one batch");
        assert_corrupt(&bad_read.unwrap_err(), &bad);
        assert!(matches!(other, Ok(AcquireOutcome::Granted { .. })), "{other:?}");
        loader.go();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_that_panics_during_the_load_stops_the_store_and_the_loader() {
        let (_dir, _, store, loader) = loading("").await;
        // Runs at once, on this thread: nothing queued, the writer free (the loader waits
        // outside it).
        let panicked = store
            .call(
                || Reach::NONE,
                |_, _| -> fencelock_core::store::Result<()> { panic!("a defect") },
            )
            .await;
        assert!(
            matches!(panicked, Err(StoreError::Unavailable { .. })),
            "{panicked:?}"
        );
        let listed = store.list(&every()).await;
        assert!(
            matches!(listed, Err(StoreError::Unavailable { .. })),
            "{listed:?}"
        );
        loader.go();
        while !store.loader.as_ref().is_some_and(JoinHandle::is_finished) {
            std::thread::yield_now();
        }
    }

    /// The guard for operations to come: one that changes a lease it did not name would be
    /// granted a name the table has not read (held in the file), and undone by the load.
    #[cfg(debug_assertions)]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_operation_that_changes_a_lease_it_did_not_name_stops_a_debug_build() {
        let (_dir, _, store, loader) = loading("").await;
        let held = name(2 * CHUNK + 1);
        let unnamed = store
            .call(
                || Reach::NONE,
                move |table, now| {
                    table.acquire(now, &held, &owner("p"), &fencelock_core::Terms::ttl(minute()))
                },
            )
            .await;
        assert!(
            matches!(unnamed, Err(StoreError::Unavailable { .. })),
            "{unnamed:?}"
        );
        loader.go();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_closed_while_it_loads_lets_the_file_go_at_once() {
        let (_dir, path, store, loader) = loading("").await;
        store.close().await;
        let error = store.list(&every()).await.unwrap_err();
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error}");
        // The loader still waits, and has the file no more.
        let reopened = SqliteStore::open_with_clock(&path, Arc::new(ManualClock::new(T0))).unwrap();
        assert_eq!(reopened.list(&every()).await.unwrap().leases.len(), LEASES);
        loader.go();
        drop(store);
    }
}
