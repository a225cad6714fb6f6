//! The PostgreSQL store against a real, throwaway PostgreSQL: the conformance suite, many
//! servers on one database, and the database going away and coming back.
#![cfg(feature = "postgres")]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock_conformance::{owner, ttl};
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Claim, Expired, FencingToken, ForceOutcome, Hold, HoldKind,
    HoldOutcome, Key, Kind, Lease, ListQuery, LockStore, MemoryStore, Owner, Principal, ReleaseNotice,
    ReleaseOutcome, RenewOutcome, Resource, Resources, StoreError, Terms, Timestamp,
};
use fencelock_stores::Deadline;
use fencelock_stores::postgres::{PostgresOptions, PostgresStore};
use fencelock_testkit::fixtures::{owner_of, resource, unique_prefix};
use fencelock_testkit::{Postgres, Proxy, eventually, shared_postgres};
use shared::granted;
use tokio::sync::{broadcast, mpsc};

/// The shared server's address; starting it blocks, so not on the async worker.
async fn shared_url() -> String {
    tokio::task::spawn_blocking(|| shared_postgres().url())
        .await
        .expect("start PostgreSQL")
}

async fn store(url: &str) -> Arc<Deadline<PostgresStore>> {
    Arc::new(PostgresStore::connect(url).await.expect("connect to PostgreSQL"))
}

fencelock_conformance::shared_suite!(|| shared_postgres().url(), store);

mod shared;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_outlives_the_purge_of_its_lease() {
    let store = store(&shared_url().await).await;
    let resource = shared::unique("purged");
    let first = shared::granted(
        store
            .acquire(&resource, &owner("a"), ttl(Duration::from_millis(50)))
            .await
            .unwrap(),
    );
    shared::until_expired(&*store, &resource, Duration::from_secs(10)).await;
    // Another test may purge at the same time (and take this lease, or make this purge
    // wait its turn): what matters is that the row goes, and that the next token is still
    // greater.
    let (client, connection) = tokio_postgres::connect(&shared_url().await, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    eventually(
        Duration::from_secs(10),
        "the expired lease to be purged",
        async || {
            let purged = store.purge_expired().await.unwrap();
            let now = fencelock_core::Timestamp::now_wall();
            assert!(
                purged.iter().all(|e| e.lease.expires_at <= now),
                "purged a live lease: {purged:?}"
            );
            let rows: i64 = client
                .query_one(
                    "SELECT count(*) FROM fencelock_leases WHERE resource = $1",
                    &[&resource.as_str()],
                )
                .await
                .unwrap()
                .get(0);
            (rows == 0).then_some(())
        },
    )
    .await;
    let second = shared::granted(
        store
            .acquire(&resource, &owner("a"), ttl(Duration::from_secs(60)))
            .await
            .unwrap(),
    );
    assert!(second.token > first.token);
}

/// A plain connection to the database at `url`.
async fn connected(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The one value that `sql` answers, asked on a connection of its own to the database at
/// `url`.
async fn value_of<T: for<'a> tokio_postgres::types::FromSql<'a>>(url: &str, sql: &str) -> T {
    connected(url).await.query_one(sql, &[]).await.unwrap().get(0)
}

/// The address of a new, empty database on the shared server, named after `what`.
async fn new_database(what: &str) -> String {
    let url = shared_url().await;
    let name = format!("{what}_{}", std::process::id());
    connected(&url)
        .await
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (server, _) = url.rsplit_once('/').expect("the address names a database");
    format!("{server}/{name}")
}

/// The schema versions the database at `url` went through.
async fn schema_versions(url: &str) -> Vec<i32> {
    connected(url)
        .await
        .query(
            "SELECT version FROM fencelock_schema_version ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_starting_together_migrate_once() {
    let fresh = new_database("fresh").await;
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let fresh = fresh.clone();
            tokio::spawn(async move { PostgresStore::connect(&fresh).await.map(drop) })
        })
        .collect();
    for start in starts {
        start.await.unwrap().expect("a server starting alongside others");
    }
    assert_eq!(schema_versions(&fresh).await, [1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn a_database_of_a_newer_schema_is_refused_as_unreadable_not_as_a_bad_address() {
    let newer = new_database("newer").await;
    drop(PostgresStore::connect(&newer).await.unwrap());
    connected(&newer)
        .await
        .batch_execute("INSERT INTO fencelock_schema_version (version) VALUES (99)")
        .await
        .unwrap();
    let error = PostgresStore::connect(&newer).await.unwrap_err();
    assert!(matches!(error, StoreError::Corrupt(_)), "{error}");
    assert!(error.to_string().contains("version 99"), "{error}");
    let opened = fencelock_stores::open(&newer).await.unwrap_err();
    assert!(
        matches!(opened, fencelock_stores::OpenError::Store { .. }),
        "not a bad address: {opened}"
    );
}

/// Short timeouts, so that the failure test learns quickly that the database is gone.
fn impatient() -> PostgresOptions {
    PostgresOptions {
        connect_timeout: Duration::from_secs(1),
        statement_timeout: Duration::from_secs(2),
        pool_size: 8,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_stops_while_postgres_is_down_and_resumes_by_itself() {
    let mut pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    let url = pg.url();
    let a = Arc::new(PostgresStore::connect_with(&url, impatient()).await.unwrap());
    let b = Arc::new(PostgresStore::connect_with(&url, impatient()).await.unwrap());
    let ttl = ttl(Duration::from_secs(60));
    // Subscribed before the outage, and read all along: must be told that notices may have
    // been missed while the listening connection was down.
    let mut told = b.releases().unwrap();
    let missed = tokio::spawn(async move {
        loop {
            match told.recv().await {
                Ok(ReleaseNotice::Missed) => return true,
                Ok(ReleaseNotice::Freed(_)) => {}
                Err(_) => return false,
            }
        }
    });

    // Load: workers acquire and release their own resource in a loop, through both stores,
    // and record each token, each failure, and the time of their last success.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..6)
        .map(|i| {
            let store: Arc<dyn LockStore> = if i % 2 == 0 { a.clone() } else { b.clone() };
            let stop = stop.clone();
            tokio::spawn(async move {
                let resource = shared::unique(&format!("load-{i}"));
                let who = owner(&format!("worker-{i}"));
                let mut tokens = Vec::new();
                let mut failures = 0_u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match store.acquire(&resource, &who, ttl).await {
                        Ok(AcquireOutcome::Granted { lease, .. }) => {
                            tokens.push(lease.token);
                            // A release lost with the connection leaves the lease held by us:
                            // the next acquire extends it, which is fine.
                            let _ = store.release(&resource, &who, Some(lease.token)).await;
                        }
                        Ok(AcquireOutcome::Extended(lease)) => {
                            let _ = store.release(&resource, &who, Some(lease.token)).await;
                        }
                        Ok(refused @ (AcquireOutcome::Held { .. } | AcquireOutcome::Delayed { .. })) => {
                            panic!("nobody else uses it: {refused:?}")
                        }
                        Err(StoreError::Unavailable { .. }) => {
                            failures += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(other) => panic!("unexpected error: {other}"),
                    }
                }
                (tokens, failures)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let stopped_at = Instant::now();
    pg = tokio::task::spawn_blocking(move || {
        pg.stop();
        pg
    })
    .await
    .unwrap();
    eprintln!("PostgreSQL stopped in {:?}", stopped_at.elapsed());

    // While it is down, every call fails promptly with Unavailable, and ping fails.
    let resource = shared::unique("while-down");
    for _ in 0..3 {
        let started = Instant::now();
        let outcome = a.acquire(&resource, &owner("x"), ttl).await;
        let took = started.elapsed();
        assert!(
            matches!(outcome, Err(StoreError::Unavailable { .. })),
            "acquire while down: {outcome:?}"
        );
        assert!(took < Duration::from_secs(5), "acquire took {took:?} to fail");
        eprintln!("acquire failed after {took:?} while PostgreSQL was down");
    }
    let started = Instant::now();
    assert!(a.ping().await.is_err(), "ping while down");
    assert!(matches!(
        b.get(&resource).await,
        Err(StoreError::Unavailable { .. })
    ));
    assert!(matches!(
        b.release(&resource, &owner("x"), None).await,
        Err(StoreError::Unavailable { .. })
    ));
    eprintln!("ping, get and release failed in {:?}", started.elapsed());

    let restarted_at = Instant::now();
    pg = tokio::task::spawn_blocking(move || {
        pg.start_again();
        pg
    })
    .await
    .unwrap();
    eprintln!("PostgreSQL started again in {:?}", restarted_at.elapsed());

    // Service resumes by itself: the same store objects answer again.
    let resumed = Instant::now();
    let within = Duration::from_secs(30);
    eventually(within, "the stores to come back", async || match a.ping().await {
        Err(e) => Err(format!("a: {e}")),
        Ok(()) => b.ping().await.map_err(|e| format!("b: {e}")),
    })
    .await;
    eprintln!("both stores answered {:?} after the restart", resumed.elapsed());

    // The listening connections are back too: a release on one is heard on the other.
    let mut heard = b.releases().unwrap();
    let announced = shared::unique("after-restart");
    // Within the same 30 s as the stores' return.
    let left = within.saturating_sub(resumed.elapsed());
    eventually(left, "releases to be heard after the restart", async || {
        a.acquire(&announced, &owner("x"), ttl)
            .await
            .expect("acquire after restart");
        a.release(&announced, &owner("x"), None)
            .await
            .expect("release after restart");
        shared::wait_for_release(&mut heard, &announced, Duration::from_millis(500))
            .await
            .ok()
    })
    .await;
    eprintln!("releases heard again {:?} after the restart", resumed.elapsed());
    // Releases during the outage were never announced: a waiter hears so, and asks again.
    let told = tokio::time::timeout(Duration::from_secs(10), missed).await;
    assert!(
        matches!(told, Ok(Ok(true))),
        "no Missed notice after the listening connection came back: {told:?}"
    );

    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for worker in workers {
        let (tokens, failures) = worker.await.expect("worker");
        assert!(failures > 0, "the worker never saw PostgreSQL down");
        assert!(
            tokens.len() >= 2,
            "the worker did not work before and after: {tokens:?}"
        );
        assert!(
            tokens.windows(2).all(|pair| pair[0] < pair[1]),
            "tokens went back across the restart: {tokens:?}"
        );
    }
    drop(pg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_parser_opens_postgres() {
    let url = shared_url().await;
    for address in [url.clone(), url.replacen("postgres://", "PostgreSQL://", 1)] {
        let store = fencelock_stores::open(&address).await.expect(&address);
        store.ping().await.unwrap();
        assert!(store.capabilities().durable);
        assert_eq!(store.capabilities().ttl_granularity, Duration::from_millis(1));
    }
    let error = fencelock_stores::open("postgres://postgres@127.0.0.1:notaport/db")
        .await
        .expect_err("a bad port");
    assert!(
        matches!(error, fencelock_stores::OpenError::InvalidAddress { .. }),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_behind_a_cut_network_fails_calls_within_the_deadline() {
    let url = shared_url().await;
    let port = url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .expect("the address has a port");
    let network = Proxy::start(port);
    let behind = url.replace(&format!(":{port}/"), &format!(":{}/", network.port()));
    let store = PostgresStore::connect_with(&behind, impatient()).await.unwrap();
    let resource = shared::unique("cut-off");
    let ttl = ttl(Duration::from_secs(60));
    shared::granted(store.acquire(&resource, &owner("a"), ttl).await.unwrap());

    // Connections stay open but nothing answers: only the deadlines can end the calls.
    network.cut();
    let started = Instant::now();
    let b = owner("b");
    let (acquired, pinged) = tokio::join!(store.acquire(&resource, &b, ttl), store.ping());
    let took = started.elapsed();
    network.restore();
    assert!(
        matches!(acquired, Err(StoreError::Unavailable { .. })),
        "acquire through a cut network: {acquired:?}"
    );
    assert!(pinged.is_err(), "ping through a cut network");
    // impatient(): 1 s to connect + 2 s per statement + 1 s margin.
    assert!(took < Duration::from_secs(5), "the calls took {took:?} to fail");
    eprintln!("calls to an unreachable PostgreSQL failed after {took:?}");

    // Once it answers again, so does the store; the lock was never lost.
    let holder = eventually(
        Duration::from_secs(20),
        "the store to come back",
        async || match store.acquire(&resource, &b, ttl).await {
            Ok(AcquireOutcome::Held { holder, .. }) => Ok(holder),
            Ok(other) => panic!("the lock of a was lost: {other:?}"),
            Err(e) => Err(e),
        },
    )
    .await;
    assert_eq!(holder.owner, owner("a"));
    eprintln!(
        "the store answered again {:?} after the network came back",
        started.elapsed() - took
    );
}

// Semaphores and read-write locks.

/// Long enough that no hold of these tests expires unless it is meant to.
const LONG: Duration = Duration::from_secs(60);

fn granted_hold(outcome: HoldOutcome) -> Hold {
    match outcome {
        HoldOutcome::Granted { hold, .. } => hold,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn busy(outcome: HoldOutcome) -> fencelock_core::Busy {
    match outcome {
        HoldOutcome::Busy(busy) => busy,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Waits until `key` comes out of `feed`; panics after ten seconds.
async fn hear(feed: &mut broadcast::Receiver<ReleaseNotice>, key: &Key) {
    let heard = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match feed.recv().await {
                Ok(ReleaseNotice::Freed(heard)) if heard == *key => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(closed) => panic!("release feed closed: {closed}"),
            }
        }
    })
    .await;
    assert!(heard.is_ok(), "{key:?} was not announced");
}

/// A writer's intent recorded through one server holds back new readers on the other (not
/// those already reading) until it is withdrawn, and again until it runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waiting_on_one_server_holds_back_readers_on_the_other() {
    let url = shared_url().await;
    let (a, b) = (store(&url).await, store(&url).await);
    let name = shared::unique("writer-first");
    let reader = granted_hold(
        a.acquire_hold(&name, &owner("reader"), Claim::Read, ttl(LONG), None)
            .await
            .unwrap(),
    );
    let writer = owner("writer");
    let refused = busy(
        a.acquire_hold(&name, &writer, Claim::Write, ttl(LONG), Some(ttl(LONG)))
            .await
            .unwrap(),
    );
    assert_eq!(refused.holders, std::slice::from_ref(&reader));
    assert!(
        !refused.writer_waits,
        "a writer is not held back by its own intent"
    );

    let late = owner("late-reader");
    let held_back = busy(
        b.acquire_hold(&name, &late, Claim::Read, ttl(LONG), None)
            .await
            .unwrap(),
    );
    assert!(held_back.writer_waits, "{held_back:?}");
    assert_eq!(held_back.holders, std::slice::from_ref(&reader));
    assert!(
        held_back.retry_in > Duration::ZERO && held_back.retry_in <= LONG,
        "{held_back:?}"
    );
    // A reader already holding is not a new reader: it extends.
    let extended = b
        .acquire_hold(&name, &owner("reader"), Claim::Read, ttl(LONG), None)
        .await
        .unwrap();
    assert!(
        matches!(&extended, HoldOutcome::Extended(hold) if hold.lease.token == reader.lease.token),
        "{extended:?}"
    );

    // The writer gives up: the readers it held back are told, and let in.
    let mut heard = b.releases().unwrap();
    a.withdraw_intent(&name, &writer).await.unwrap();
    hear(&mut heard, &Key::hold(HoldKind::RwLock, &name)).await;
    granted_hold(
        b.acquire_hold(&name, &late, Claim::Read, ttl(LONG), None)
            .await
            .unwrap(),
    );

    // An intent the writer stops renewing runs out by itself.
    busy(
        a.acquire_hold(
            &name,
            &writer,
            Claim::Write,
            ttl(LONG),
            Some(ttl(Duration::from_millis(300))),
        )
        .await
        .unwrap(),
    );
    let later = owner("later-reader");
    let mut held_back = false;
    eventually(Duration::from_secs(10), "the intent to run out", async || {
        let outcome = b.acquire_hold(&name, &later, Claim::Read, ttl(LONG), None).await;
        match outcome.unwrap() {
            HoldOutcome::Granted { .. } => Ok(()),
            HoldOutcome::Busy(busy) => {
                assert!(busy.writer_waits, "{busy:?}");
                held_back = true;
                Err(format!("{busy:?}"))
            }
            other => panic!("{other:?}"),
        }
    })
    .await;
    assert!(held_back, "the reader was not held back while the intent lasted");
}

/// Releases, downgrades and shortening renewals of holds, and force-releases of any kind, on
/// one server are announced on the other, with the kind of what was freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_changes_on_one_server_are_heard_on_the_other() {
    let url = shared_url().await;
    let (a, b) = (store(&url).await, store(&url).await);
    let who = owner("holder");

    let released = shared::unique("released-permit");
    let permit = Claim::Permit { limit: 2 };
    granted_hold(
        a.acquire_hold(&released, &who, permit, ttl(LONG), None)
            .await
            .unwrap(),
    );
    let mut heard = b.releases().unwrap();
    a.release_hold(HoldKind::Semaphore, &released, &who, None)
        .await
        .unwrap();
    hear(&mut heard, &Key::hold(HoldKind::Semaphore, &released)).await;

    let downgraded = shared::unique("downgraded");
    let write = granted_hold(
        a.acquire_hold(&downgraded, &who, Claim::Write, ttl(LONG), None)
            .await
            .unwrap(),
    );
    let mut heard = b.releases().unwrap();
    let read = a
        .acquire_hold(&downgraded, &who, Claim::Read, ttl(LONG), None)
        .await
        .unwrap();
    assert!(
        matches!(&read, HoldOutcome::Granted { hold, replaced: Some(old) }
            if *old == write && hold.claim == Claim::Read && hold.lease.token > write.lease.token),
        "{read:?}"
    );
    hear(&mut heard, &Key::hold(HoldKind::RwLock, &downgraded)).await;

    let shortened = shared::unique("shortened");
    granted_hold(
        a.acquire_hold(&shortened, &who, permit, ttl(LONG), None)
            .await
            .unwrap(),
    );
    let mut heard = b.releases().unwrap();
    let renewed = a
        .renew_hold(
            HoldKind::Semaphore,
            &shortened,
            &who,
            ttl(Duration::from_secs(30)),
            None,
        )
        .await
        .unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed(_)), "{renewed:?}");
    hear(&mut heard, &Key::hold(HoldKind::Semaphore, &shortened)).await;

    let forced = shared::unique("forced");
    shared::granted(a.acquire(&forced, &who, ttl(LONG)).await.unwrap());
    granted_hold(
        a.acquire_hold(&forced, &who, Claim::Read, ttl(LONG), None)
            .await
            .unwrap(),
    );
    let mut heard = b.releases().unwrap();
    for key in [Key::lock(&forced), Key::hold(HoldKind::RwLock, &forced)] {
        let outcome = a.force_release(&key).await.unwrap();
        assert!(
            matches!(&outcome, ForceOutcome::Released(ended) if ended.len() == 1),
            "{outcome:?}"
        );
        hear(&mut heard, &key).await;
    }
}

/// A purge forgets expired holds (reporting each with its kind) and ended intents, and
/// leaves the live ones. On a database of its own, so that no other test purges them first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_forgets_expired_holds_with_their_kind_and_ended_intents() {
    let url = new_database("purged_holds").await;
    let store = store(&url).await;
    let name = resource("lapsed");
    let brief = ttl(Duration::from_millis(100));
    let permit = granted_hold(
        store
            .acquire_hold(&name, &owner("a"), Claim::Permit { limit: 1 }, brief, None)
            .await
            .unwrap(),
    );
    let write = granted_hold(
        store
            .acquire_hold(&name, &owner("a"), Claim::Write, brief, None)
            .await
            .unwrap(),
    );
    busy(
        store
            .acquire_hold(&name, &owner("b"), Claim::Write, ttl(LONG), Some(brief))
            .await
            .unwrap(),
    );
    let live = granted_hold(
        store
            .acquire_hold(&resource("live"), &owner("c"), Claim::Read, ttl(LONG), None)
            .await
            .unwrap(),
    );
    eventually(Duration::from_secs(10), "the holds to expire", async || {
        let semaphore = store.holds(HoldKind::Semaphore, &name).await.unwrap();
        let rwlock = store.holds(HoldKind::RwLock, &name).await.unwrap();
        (semaphore.is_empty() && rwlock.is_empty()).then_some(())
    })
    .await;
    // The intent ends with the holds (all were stamped within one TTL of each other).
    let intents = |client: tokio_postgres::Client| async move {
        let row = client
            .query_one("SELECT count(*) FROM fencelock_intents", &[])
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    eventually(Duration::from_secs(10), "the intent to be purged", async || {
        if intents(connected(&url).await).await == 0 {
            return Some(());
        }
        let purged = store.purge_expired().await.unwrap();
        let mut purged: Vec<(Kind, Lease)> = purged
            .into_iter()
            .map(|Expired { kind, lease }| (kind, lease))
            .collect();
        purged.sort_by_key(|(_, lease)| lease.token);
        if !purged.is_empty() {
            assert_eq!(
                purged,
                [
                    (Kind::Semaphore, permit.lease.clone()),
                    (Kind::RwLock, write.lease.clone())
                ]
            );
        }
        None
    })
    .await;
    assert_eq!(
        store.holds(HoldKind::RwLock, &resource("live")).await.unwrap(),
        [live]
    );
    let rows: i64 = value_of(&url, "SELECT count(*) FROM fencelock_holds").await;
    assert_eq!(rows, 1, "only the live hold is left");
}

/// A database that version 1 of fencelock made (leases only) is brought to the newest
/// version with its leases, which belong to no principal, and its token counter: the next
/// grant of any kind gets a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_version_1_is_migrated_keeping_its_leases() {
    let old = new_database("version_1").await;
    connected(&old)
        .await
        .batch_execute(
            r#"
            CREATE TABLE fencelock_schema_version (
                version    integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            );
            CREATE TABLE fencelock_leases (
                resource    text COLLATE "C" PRIMARY KEY,
                owner       text NOT NULL,
                token       bigint NOT NULL CHECK (token > 0),
                acquired_at timestamptz NOT NULL,
                expires_at  timestamptz NOT NULL
            );
            CREATE INDEX fencelock_leases_expires_at ON fencelock_leases (expires_at);
            CREATE SEQUENCE fencelock_tokens AS bigint MINVALUE 1 NO CYCLE;
            INSERT INTO fencelock_schema_version (version) VALUES (1);
            SELECT setval('fencelock_tokens', 41);
            INSERT INTO fencelock_leases
            VALUES ('kept', 'a', 41, '2026-01-01T00:00:00Z', now() + interval '1 hour');
            "#,
        )
        .await
        .unwrap();

    let store = store(&old).await;
    let kept = resource("kept");
    let lease = store.get(&kept).await.unwrap().expect("the lease is kept");
    assert_eq!((lease.owner.as_str(), lease.token), ("a", FencingToken(41)));
    assert_eq!(
        lease.acquired_at,
        Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap()
    );
    assert_eq!(
        lease.owner,
        owner("a"),
        "a lease written before belongs to no principal"
    );
    assert_eq!(
        (lease.hold_until, lease.lock_delay),
        (None, Duration::ZERO),
        "nor has it a cap or a lock-delay"
    );
    for other in [owner("b"), owner_of("billing", "a")] {
        let held = store.acquire(&kept, &other, ttl(LONG)).await.unwrap();
        assert!(
            matches!(&held, AcquireOutcome::Held { holder, .. } if *holder == lease),
            "{other:?}: {held:?}"
        );
    }
    // A semaphore of the same name is another namespace, and its tokens continue the count.
    let permit = granted_hold(
        store
            .acquire_hold(&kept, &owner("b"), Claim::Permit { limit: 1 }, ttl(LONG), None)
            .await
            .unwrap(),
    );
    assert!(permit.lease.token > FencingToken(41), "{permit:?}");
    assert_eq!(schema_versions(&old).await, [1, 2, 3, 4, 5]);
}

/// A server of version 2, still running beside newer ones while they are rolled out, calls
/// the hold functions of its version: they now answer for an owner of no principal, as the
/// newer ones do, so that the two servers keep one name to one principal between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hold_functions_of_version_2_answer_for_owners_of_no_principal() {
    let url = shared_url().await;
    let (store, old) = (store(&url).await, connected(&url).await);
    let name = shared::unique("version-2");
    // Version 2's statements, as it sends them.
    let acquire = |owner: &'static str| {
        let (old, name) = (&old, name.as_str().to_owned());
        async move {
            // The first row says what it did (a refusal's holders follow).
            let rows = old
                .query(
                    "SELECT role FROM fencelock_acquire_hold($1::text, $2::text, $3::text,
                        $4::bigint, $5::bigint, $6::bigint)",
                    &[&name, &owner, &"permit", &Some(2_i64), &60_000_i64, &None::<i64>],
                )
                .await
                .unwrap();
            rows[0].get::<_, String>(0)
        }
    };
    let verdict = |statement: &'static str, owner: &'static str| {
        let (old, name) = (&old, name.as_str().to_owned());
        async move {
            let rows = old
                .query(statement, &[&"semaphore", &name, &owner, &None::<i64>])
                .await
                .unwrap();
            rows.first().map(|row| row.get::<_, i32>("verdict"))
        }
    };
    const RELEASE: &str =
        "SELECT verdict FROM fencelock_release_hold($1::text, $2::text, $3::text, $4::bigint)";
    const RENEW: &str =
        "SELECT verdict FROM fencelock_renew_hold($1::text, $2::text, $3::text, $4::bigint, 60000)";
    let permit = Claim::Permit { limit: 2 };

    assert_eq!(acquire("a").await, "granted");
    let holds = store.holds(HoldKind::Semaphore, &name).await.unwrap();
    let owners: Vec<&Owner> = holds.iter().map(|h| &h.lease.owner).collect();
    assert_eq!(owners, [&owner("a")], "of no principal");
    let refused = busy(
        store
            .acquire_hold(&name, &owner_of("billing", "a"), permit, ttl(LONG), None)
            .await
            .unwrap(),
    );
    assert_eq!(
        refused.holders, holds,
        "a namesake is refused, though there is room"
    );
    assert_eq!(verdict(RENEW, "a").await, Some(3), "renewed");
    assert_eq!(verdict(RELEASE, "a").await, Some(3), "released");
    assert_eq!(verdict(RELEASE, "a").await, None, "nothing left to release");

    let theirs = granted_hold(
        store
            .acquire_hold(&name, &owner_of("billing", "a"), permit, ttl(LONG), None)
            .await
            .unwrap(),
    );
    assert_eq!(acquire("a").await, "busy", "the name is billing's");
    assert_eq!(verdict(RENEW, "a").await, Some(1), "forbidden");
    assert_eq!(verdict(RELEASE, "a").await, Some(1), "forbidden");
    old.execute(
        "SELECT fencelock_withdraw_intent($1::text, $2::text)",
        &[&name.as_str(), &"a"],
    )
    .await
    .unwrap();
    assert_eq!(
        store.holds(HoldKind::Semaphore, &name).await.unwrap(),
        [theirs],
        "unchanged"
    );
}

/// Ordinals of tokens by first sight, so that two stores' tokens can be compared by order.
#[derive(Default)]
struct Seen(HashMap<FencingToken, usize>);

impl Seen {
    fn lease(&mut self, lease: &Lease) -> String {
        let next = self.0.len();
        let ordinal = *self.0.entry(lease.token).or_insert(next);
        let principal = lease.owner.principal().map_or("-", Principal::as_str);
        format!("{}({principal})#{ordinal}", lease.owner)
    }

    fn hold(&mut self, hold: &Hold) -> String {
        format!("{}:{:?}", self.lease(&hold.lease), hold.claim)
    }

    fn holds(&mut self, holds: &[Hold]) -> String {
        holds.iter().map(|h| self.hold(h)).collect::<Vec<_>>().join(" ")
    }

    fn outcome(&mut self, outcome: &HoldOutcome) -> String {
        match outcome {
            HoldOutcome::Granted { hold, replaced } => {
                let replaced = replaced.as_ref().map(|h| self.hold(h));
                format!("granted {} replacing {replaced:?}", self.hold(hold))
            }
            HoldOutcome::Extended(hold) => format!("extended {}", self.hold(hold)),
            HoldOutcome::Busy(busy) => format!(
                "busy [{}] writer waits {} retry later {}",
                self.holds(&busy.holders),
                busy.writer_waits,
                busy.retry_in > Duration::ZERO
            ),
            HoldOutcome::LimitMismatch { limit } => format!("limit {limit}"),
        }
    }
}

/// A small deterministic source of choices (xorshift).
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % u64::try_from(n).unwrap()).unwrap()
    }

    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len())]
    }
}

/// The token a release or renew of the reference run gives.
#[derive(Debug, Clone, Copy)]
enum Token {
    None,
    /// The token of the owner's live hold, in the store asked.
    Own,
    /// A token that is no hold's.
    Wrong,
}

/// One call of the reference run.
#[derive(Debug, Clone)]
enum Call {
    Acquire(Resource, Owner, Claim, bool),
    Release(HoldKind, Resource, Owner, Token),
    Renew(HoldKind, Resource, Owner, Token),
    Withdraw(Resource, Owner),
    Holds(HoldKind, Resource),
}

impl Call {
    fn roll(dice: &mut Dice, names: &[Resource], owners: &[Owner]) -> Self {
        let name = dice.pick(names).clone();
        let who = dice.pick(owners).clone();
        let kind = *dice.pick(&[HoldKind::Semaphore, HoldKind::RwLock]);
        let token = *dice.pick(&[Token::None, Token::Own, Token::Own, Token::Wrong]);
        match dice.below(20) {
            0..=10 => {
                let claim = *dice.pick(&[
                    Claim::Permit { limit: 2 },
                    Claim::Permit { limit: 2 },
                    Claim::Permit { limit: 3 },
                    Claim::Read,
                    Claim::Read,
                    Claim::Write,
                ]);
                Self::Acquire(name, who, claim, dice.below(2) == 0)
            }
            11..=14 => Self::Release(kind, name, who, token),
            15..=16 => Self::Renew(kind, name, who, token),
            17..=18 => Self::Withdraw(name, who),
            _ => Self::Holds(kind, name),
        }
    }

    /// What `store` answers, with tokens as ordinals of `seen`.
    async fn answer(&self, store: &dyn LockStore, seen: &mut Seen) -> String {
        match self {
            Self::Acquire(name, who, claim, intent) => {
                let intent = intent.then(|| ttl(LONG));
                let outcome = store
                    .acquire_hold(name, who, *claim, ttl(LONG), intent)
                    .await
                    .unwrap();
                if let HoldOutcome::Granted { hold, .. } | HoldOutcome::Extended(hold) = &outcome {
                    assert_eq!(hold.lease.expires_at.since(hold.lease.acquired_at), LONG);
                    assert_eq!(hold.lease.resource, *name);
                }
                seen.outcome(&outcome)
            }
            Self::Release(kind, name, who, token) => {
                let token = Self::token(store, *kind, name, who, *token).await;
                match store.release_hold(*kind, name, who, token).await.unwrap() {
                    ReleaseOutcome::Released(Some(ended)) => format!("released {}", seen.lease(&ended.lease)),
                    other => format!("{other:?}"),
                }
            }
            Self::Renew(kind, name, who, token) => {
                let token = Self::token(store, *kind, name, who, *token).await;
                match store
                    .renew_hold(*kind, name, who, ttl(LONG), token)
                    .await
                    .unwrap()
                {
                    RenewOutcome::Renewed(hold) => format!("renewed {}", seen.hold(&hold)),
                    other => format!("{other:?}"),
                }
            }
            Self::Withdraw(name, who) => {
                store.withdraw_intent(name, who).await.unwrap();
                "withdrawn".into()
            }
            Self::Holds(kind, name) => seen.holds(&store.holds(*kind, name).await.unwrap()),
        }
    }

    async fn token(
        store: &dyn LockStore,
        kind: HoldKind,
        name: &Resource,
        who: &Owner,
        token: Token,
    ) -> Option<FencingToken> {
        match token {
            Token::None => None,
            Token::Wrong => Some(FencingToken(u64::MAX / 2)),
            Token::Own => {
                let holds = store.holds(kind, name).await.unwrap();
                let own = holds.iter().find(|h| h.lease.owner == *who);
                Some(own.map_or(FencingToken(u64::MAX / 2), |h| h.lease.token))
            }
        }
    }
}

/// Every page of the holds of `kind` under `prefix`, one name a page.
async fn pages(store: &dyn LockStore, kind: HoldKind, prefix: &str, seen: &mut Seen) -> Vec<String> {
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let query = ListQuery {
            prefix: prefix.into(),
            after,
            limit: 1,
        };
        let page = store.list_holds(kind, &query).await.unwrap();
        for (name, holds) in &page.names {
            pages.push(format!("{name}: {}", seen.holds(holds)));
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return pages,
        }
    }
}

/// Random runs of hold calls on a few names and owners (namesakes of other principals among
/// them) are answered by PostgreSQL as by the reference store, call by call: the same
/// outcomes and holders, tokens in the same order, the same pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_are_decided_as_the_reference_store_decides() {
    let postgres = store(&shared_url().await).await;
    for seed in [
        0x2545_f491_4f6c_dd1d_u64,
        0x9e37_79b9_7f4a_7c15,
        0xdead_beef_cafe_f00d,
    ] {
        let reference = MemoryStore::new();
        let prefix = unique_prefix();
        let names = ["x", "y"].map(|n| resource(&format!("{prefix}{n}")));
        let of = |name, principal| owner(name).of(Some(Principal::new(principal).unwrap()));
        let owners = [
            owner("a"),
            owner("b"),
            owner("c"),
            of("a", "billing"),
            of("b", "ops"),
        ];
        let mut dice = Dice(seed);
        let (mut seen_pg, mut seen_ref) = (Seen::default(), Seen::default());
        for step in 0..250 {
            let call = Call::roll(&mut dice, &names, &owners);
            let theirs = call.answer(&*postgres, &mut seen_pg).await;
            let ours = call.answer(&reference, &mut seen_ref).await;
            assert_eq!(theirs, ours, "seed {seed:#x}, step {step}: {call:?}");
        }
        for kind in [HoldKind::Semaphore, HoldKind::RwLock] {
            assert_eq!(
                pages(&*postgres, kind, &prefix, &mut seen_pg).await,
                pages(&reference, kind, &prefix, &mut seen_ref).await,
                "seed {seed:#x}: {kind}"
            );
        }
    }
}

/// A purge forgets at most `PURGE_BATCH` leases and as many holds, those that expired first,
/// so that a backlog is a series of short transactions; asking again forgets the rest. On a
/// database of its own, so that no other test purges them first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_forgets_a_batch_at_a_time_the_first_expired_first() {
    use fencelock_core::store::PURGE_BATCH;
    let url = new_database("purge_batches").await;
    let store = store(&url).await;
    let brief = ttl(Duration::from_millis(100));
    let extra = 8;
    let mut last = None;
    for i in 0..PURGE_BATCH + extra {
        let lock = resource(&format!("lock-{i:04}"));
        shared::granted(store.acquire(&lock, &owner("a"), brief).await.unwrap());
        let permit = Claim::Permit { limit: 1 };
        let sem = resource(&format!("sem-{i:04}"));
        granted_hold(
            store
                .acquire_hold(&sem, &owner("a"), permit, brief, None)
                .await
                .unwrap(),
        );
        last = Some((lock, sem));
    }
    let (lock, sem) = last.unwrap();
    eventually(
        Duration::from_secs(30),
        "the last lease and permit to expire",
        async || {
            let lease = store.get(&lock).await.unwrap();
            let permits = store.holds(HoldKind::Semaphore, &sem).await.unwrap();
            (lease.is_none() && permits.is_empty()).then_some(())
        },
    )
    .await;
    let count = |purged: &[Expired], kind: Kind| purged.iter().filter(|e| e.kind == kind).count();
    let first = store.purge_expired().await.unwrap();
    assert_eq!(count(&first, Kind::Lock), PURGE_BATCH);
    assert_eq!(count(&first, Kind::Semaphore), PURGE_BATCH);
    let second = store.purge_expired().await.unwrap();
    assert_eq!(count(&second, Kind::Lock), extra);
    assert_eq!(count(&second, Kind::Semaphore), extra);
    for kind in [Kind::Lock, Kind::Semaphore] {
        let ends = |batch: &[Expired]| {
            batch
                .iter()
                .filter(|e| e.kind == kind)
                .map(|e| e.lease.expires_at)
                .collect::<Vec<_>>()
        };
        let (earlier, later) = (ends(&first), ends(&second));
        assert!(
            earlier.iter().max() <= later.iter().min(),
            "{kind}: the first to expire go first"
        );
    }
    assert_eq!(store.purge_expired().await.unwrap(), [], "nothing left");
}

// The terms a lease keeps, and several locks at once.

/// Terms with a cap and a lock-delay, both far from the test's TTLs.
fn with_terms(ttl_of: Duration) -> Terms {
    Terms::ttl(ttl(ttl_of))
        .max_hold(Some(ttl(Duration::from_secs(3600))))
        .lock_delay(Duration::from_secs(60))
}

/// Every statement that answers with a lease reads its terms, also through another store
/// than the one that granted it (a server restarted, or a second one): get, list, renew,
/// release, force-release, and the purge of one whose lock-delay has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_reads_a_lease_with_its_terms_through_a_new_store() {
    let url = shared_url().await;
    let prefix = unique_prefix();
    let name = |n: &str| resource(&format!("{prefix}{n}"));
    let granting = store(&url).await;
    let kept = granted(
        granting
            .acquire_with(&name("kept"), &owner("a"), with_terms(LONG))
            .await
            .unwrap(),
    );
    let forced = granted(
        granting
            .acquire_with(&name("forced"), &owner("a"), with_terms(LONG))
            .await
            .unwrap(),
    );
    drop(granting);

    let store = store(&url).await;
    assert_eq!(store.get(&kept.resource).await.unwrap().as_ref(), Some(&kept));
    let query = ListQuery {
        prefix: prefix.clone(),
        after: None,
        limit: 10,
    };
    let listed = store.list(&query).await.unwrap().leases;
    assert_eq!(
        listed,
        [forced.clone(), kept.clone()],
        "by name, with their terms"
    );
    let renewed = store
        .renew(&kept.resource, &kept.owner, ttl(LONG), None)
        .await
        .unwrap();
    assert!(
        matches!(&renewed, RenewOutcome::Renewed(l)
            if (l.hold_until, l.lock_delay) == (kept.hold_until, kept.lock_delay)),
        "{renewed:?}"
    );
    match store.release(&kept.resource, &kept.owner, None).await.unwrap() {
        ReleaseOutcome::Released(Some(ended)) => {
            assert_eq!(
                (ended.lease.hold_until, ended.lease.lock_delay),
                (kept.hold_until, kept.lock_delay)
            );
        }
        other => panic!("release: {other:?}"),
    }
    match store.force_release(&Key::lock(&forced.resource)).await.unwrap() {
        ForceOutcome::Released(ended) => assert_eq!(ended[0].lease, forced),
        other => panic!("force-release: {other:?}"),
    }

    let brief = Terms::ttl(ttl(Duration::from_millis(50))).lock_delay(Duration::from_millis(200));
    let purged = granted(
        store
            .acquire_with(&name("purged"), &owner("a"), brief)
            .await
            .unwrap(),
    );
    // Purges by others may come first: what matters is that none forgets the lease before
    // its delay has ended (by the database's clock), and that the one that does reports it
    // with its terms.
    shared::until_expired(&*store, &purged.resource, Duration::from_secs(10)).await;
    let db = connected(&url).await;
    eventually(Duration::from_secs(10), "the lease to be forgotten", async || {
        let forgotten = store.purge_expired().await.unwrap();
        let row = db
            .query_one(
                "SELECT count(*), (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                FROM fencelock_leases WHERE resource = $1",
                &[&purged.resource.as_str()],
            )
            .await
            .unwrap();
        let (rows, at): (i64, i64) = (row.get(0), row.get(1));
        let at = Timestamp::from_millis(u64::try_from(at).unwrap());
        assert!(
            rows == 1 || at >= purged.closed_until(),
            "forgotten within its lock-delay"
        );
        if let Some(ours) = forgotten.iter().find(|e| e.lease.resource == purged.resource) {
            assert_eq!(ours.lease, purged);
        }
        (rows == 0).then_some(())
    })
    .await;
}

/// A lock-delay set through one server closes the lock to the other until it ends, however
/// often that one purges; then the other is granted it. A multi-acquire through one server is
/// refused whole while the other holds one of its names, and nothing of it is left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_and_an_all_or_none_hold_across_two_servers() {
    let url = shared_url().await;
    let (a, b) = (store(&url).await, store(&url).await);
    let name = shared::unique("delayed");
    let delay = Duration::from_millis(700);
    let terms = Terms::ttl(ttl(Duration::from_millis(100))).lock_delay(delay);
    let lease = granted(a.acquire_with(&name, &owner("crashed"), terms).await.unwrap());
    shared::until_expired(&*b, &name, Duration::from_secs(10)).await;
    let mut refused = 0;
    let next = eventually(Duration::from_secs(10), "the lock-delay to end", async || {
        b.purge_expired().await.unwrap();
        match b.acquire(&name, &owner("next"), ttl(LONG)).await.unwrap() {
            AcquireOutcome::Delayed { resource, retry_in } => {
                assert_eq!(resource, name);
                assert!(retry_in > Duration::ZERO && retry_in <= delay, "{retry_in:?}");
                refused += 1;
                // Asks again when told to, or sooner: the delay is the store's to end.
                tokio::time::sleep(retry_in.min(Duration::from_millis(100))).await;
                Err(format!("delayed, retry in {retry_in:?}"))
            }
            AcquireOutcome::Granted { lease: next, expired } => {
                assert!(expired.as_ref().is_none_or(|e| *e == lease), "{expired:?}");
                Ok(next)
            }
            other => panic!("within the lock-delay: {other:?}"),
        }
    })
    .await;
    assert!(refused > 0, "the other server was never refused");
    assert!(
        next.acquired_at >= lease.closed_until() && next.token > lease.token,
        "{next:?} after {lease:?}"
    );

    let prefix = unique_prefix();
    let names: Vec<Resource> = ["x", "y", "z"]
        .iter()
        .map(|n| resource(&format!("{prefix}{n}")))
        .collect();
    let theirs = granted(b.acquire(&names[1], &owner("b"), ttl(LONG)).await.unwrap());
    let all = Resources::new(names.clone()).unwrap();
    let mine = owner("a");
    match a.acquire_all(&all, &mine, Terms::ttl(ttl(LONG))).await.unwrap() {
        AcquireAllOutcome::Refused(refusals) => assert!(
            matches!(refusals.as_slice(), [AcquireOutcome::Held { holder, .. }] if *holder == theirs),
            "{refusals:?}"
        ),
        granted => panic!("y is held on the other server, yet {granted:?}"),
    }
    for free in [&names[0], &names[2]] {
        assert_eq!(b.get(free).await.unwrap(), None, "{free} left held");
    }
    b.release(&names[1], &owner("b"), None).await.unwrap();
    let AcquireAllOutcome::Granted(outcomes) =
        a.acquire_all(&all, &mine, Terms::ttl(ttl(LONG))).await.unwrap()
    else {
        panic!("all free");
    };
    for (asked, outcome) in names.iter().zip(&outcomes) {
        let lease = outcome.lease().expect("granted");
        assert_eq!(b.get(asked).await.unwrap().as_ref(), Some(lease));
    }
}

/// Two servers take the same two locks at once in opposite orders, 20 times: never both win,
/// neither fails (PostgreSQL would abort one of two transactions waiting for each other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_on_two_servers_never_both_win_nor_fail() {
    let url = shared_url().await;
    let (a, b) = (store(&url).await, store(&url).await);
    let (p, q) = (owner("p"), owner("q"));
    for round in 0..20 {
        let (x, y) = (shared::unique("x"), shared::unique("y"));
        let forward = Resources::new(vec![x.clone(), y.clone()]).unwrap();
        let backward = Resources::new(vec![y.clone(), x.clone()]).unwrap();
        let terms = Terms::ttl(ttl(LONG));
        let (first, second) = tokio::join!(
            a.acquire_all(&forward, &p, terms.clone()),
            b.acquire_all(&backward, &q, terms),
        );
        let (first, second) = (first.unwrap(), second.unwrap());
        let winner = match (&first, &second) {
            (AcquireAllOutcome::Granted(_), AcquireAllOutcome::Refused(_)) => &p,
            (AcquireAllOutcome::Refused(_), AcquireAllOutcome::Granted(_)) => &q,
            _ => panic!("round {round}: one winner, got {first:?} and {second:?}"),
        };
        for name in [&x, &y] {
            let holder = a.get(name).await.unwrap().map(|l| l.owner);
            assert_eq!(holder.as_ref(), Some(winner), "round {round}");
        }
    }
}

/// Names of the test's prefix whose resource locks share a key (`hashtext` of the name): two
/// pairs `(a1, a2)`, `(b1, b2)`, each of one key, ordered so that `[a1, b1]` and `[a2, b2]`
/// put their keys in opposite orders by their names' bytes (`a1 < b1`, `b2 < a2`).
async fn crossed_namesakes(url: &str, prefix: &str) -> [Resource; 4] {
    let pairs: Vec<(String, String)> = connected(url)
        .await
        .query(
            "SELECT min(n), max(n) FROM (
                SELECT $1::text || i AS n FROM generate_series(1, 400000) i
            ) names GROUP BY hashtext(n) HAVING count(*) = 2",
            &[&prefix],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let two = pairs
        .iter()
        .enumerate()
        .flat_map(|(i, a)| pairs[i + 1..].iter().map(move |b| (a, b)));
    for (a, b) in two {
        for (a1, a2) in [(&a.0, &a.1), (&a.1, &a.0)] {
            for (b1, b2) in [(&b.0, &b.1), (&b.1, &b.0)] {
                if a1 < b1 && b2 < a2 {
                    return [a1, a2, b1, b2].map(|n| resource(n));
                }
            }
        }
    }
    panic!("no crossed pairs among {pairs:?}");
}

/// Two multi-acquires of different names never wait for each other in a circle, even when
/// their names share keys of the resource locks crosswise (`[a1, b1]` and `[a2, b2]`, where
/// a1 shares a2's key and b1 b2's, and byte order puts the keys in opposite orders): the keys
/// are taken in their own order, not the names'. 20 rounds from two servers: both are granted
/// every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_share_lock_keys_crosswise_never_deadlock() {
    let url = shared_url().await;
    let [a1, a2, b1, b2] = crossed_namesakes(&url, &unique_prefix()).await;
    let (a, b) = (store(&url).await, store(&url).await);
    let one = Resources::new(vec![a1.clone(), b1.clone()]).unwrap();
    let other = Resources::new(vec![a2.clone(), b2.clone()]).unwrap();
    let (p, q) = (owner("p"), owner("q"));
    let terms = Terms::ttl(ttl(LONG));
    for round in 0..20 {
        let (first, second) = tokio::join!(
            a.acquire_all(&one, &p, terms.clone()),
            b.acquire_all(&other, &q, terms.clone())
        );
        for (outcome, who, names) in [(first, &p, &one), (second, &q, &other)] {
            let outcome = outcome.unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert!(
                matches!(outcome, AcquireAllOutcome::Granted(_)),
                "round {round}: {outcome:?}"
            );
            for name in names.as_slice() {
                a.release(name, who, None).await.unwrap();
            }
        }
    }
}

// Servers of version 4, before lease metadata.

/// What version 5 of the schema added, taken away again (with version 4's
/// `fencelock_keep_terms` back): a database of version 4.
const UNDO_VERSION_5: &str = "
    DROP TRIGGER fencelock_holds_new_token_no_meta ON fencelock_holds;
    DROP FUNCTION fencelock_new_hold_has_no_meta();
    DROP FUNCTION fencelock_acquire_locks(text[], text, text, bigint, bigint, bigint, text);
    DROP FUNCTION fencelock_acquire_hold(text, text, text, text, bigint, bigint, bigint, text);
    DROP FUNCTION fencelock_release_hold_meta(text, text, text, text, bigint);
    DROP FUNCTION fencelock_renew_hold(text, text, text, text, bigint, bigint, text);
    DROP FUNCTION fencelock_force_release_with_meta(text, text);
    CREATE OR REPLACE FUNCTION fencelock_keep_terms() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.token <> OLD.token THEN
            NEW.hold_until := NULL;
            NEW.lock_delay := 0;
        END IF;
        NEW.expires_at := least(NEW.expires_at, NEW.hold_until);
        RETURN NEW;
    END
    $$;
    ALTER TABLE fencelock_leases DROP COLUMN meta;
    ALTER TABLE fencelock_holds DROP COLUMN meta;
    DELETE FROM fencelock_schema_version WHERE version = 5;
";

/// A database of version 4 is migrated with its leases and holds, which have no metadata, and
/// serves metadata from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_version_4_is_migrated_keeping_its_leases_and_holds_without_metadata() {
    let url = new_database("version_4").await;
    let old = store(&url).await;
    let lease = granted(
        old.acquire(&resource("kept"), &owner("a"), ttl(LONG))
            .await
            .unwrap(),
    );
    let permit = granted_hold(
        old.acquire_hold(
            &resource("sem"),
            &owner("a"),
            Claim::Permit { limit: 2 },
            ttl(LONG),
            None,
        )
        .await
        .unwrap(),
    );
    drop(old);
    connected(&url).await.batch_execute(UNDO_VERSION_5).await.unwrap();
    assert_eq!(schema_versions(&url).await, [1, 2, 3, 4]);

    let store = store(&url).await;
    assert_eq!(schema_versions(&url).await, [1, 2, 3, 4, 5]);
    assert_eq!(store.get(&lease.resource).await.unwrap(), Some(lease.clone()));
    let holds = store
        .holds(HoldKind::Semaphore, &permit.lease.resource)
        .await
        .unwrap();
    assert_eq!(holds, std::slice::from_ref(&permit));
    let meta = fencelock_core::Meta::parse(r#"{"host":"db-3"}"#).unwrap();
    let renewed = store
        .renew_hold_with(
            HoldKind::Semaphore,
            &permit.lease.resource,
            &owner("a"),
            ttl(LONG),
            None,
            Some(&meta),
        )
        .await
        .unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed(ref h) if h.lease.meta.as_ref() == Some(&meta)));
    let released = store
        .release_hold(HoldKind::Semaphore, &permit.lease.resource, &owner("a"), None)
        .await
        .unwrap();
    assert!(
        matches!(released, ReleaseOutcome::Released(Some(ref ended)) if ended.lease.meta.as_ref() == Some(&meta)),
        "{released:?}"
    );
}

// Servers of version 3, before the terms.

/// What version 4 of the schema added, taken away again: a database of version 3 (but for
/// version 3's `fencelock_force_release`, which version 4 made call its successor, dropped
/// here; migrating puts both back).
const UNDO_VERSION_4: &str = "
    DROP TRIGGER fencelock_leases_keep_terms ON fencelock_leases;
    DROP FUNCTION fencelock_keep_terms();
    DROP FUNCTION fencelock_acquire_locks(text[], text, text, bigint, bigint, bigint);
    DROP FUNCTION fencelock_force_release_with_terms(text, text);
    DROP FUNCTION fencelock_lock_resources(text[]);
    ALTER TABLE fencelock_leases DROP COLUMN hold_until, DROP COLUMN lock_delay;
    DELETE FROM fencelock_schema_version WHERE version = 4;
";

/// A database of version 3 is migrated with its leases, which have no cap and no lock-delay
/// and are served as before: refused to others (a namesake too), extended on their own terms
/// whatever the extension asks, renewed, released; its semaphores still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_version_3_is_migrated_keeping_its_leases_with_no_terms() {
    let url = new_database("version_3").await;
    drop(store(&url).await);
    let db = connected(&url).await;
    db.batch_execute(UNDO_VERSION_5).await.unwrap();
    db.batch_execute(UNDO_VERSION_4).await.unwrap();
    assert_eq!(schema_versions(&url).await, [1, 2, 3]);
    // A lease as version 3 writes one, of billing's principal.
    db.execute(
        "INSERT INTO fencelock_leases (resource, owner, principal, token, acquired_at, expires_at)
        VALUES ('kept', 'a', 'billing', nextval('fencelock_tokens'),
                date_trunc('milliseconds', now()), date_trunc('milliseconds', now()) + interval '1 hour')",
        &[],
    )
    .await
    .unwrap();

    let store = store(&url).await;
    assert_eq!(schema_versions(&url).await, [1, 2, 3, 4, 5]);
    let kept = resource("kept");
    let lease = store.get(&kept).await.unwrap().expect("the lease is kept");
    assert_eq!(
        (&lease.owner, lease.hold_until, lease.lock_delay),
        (&owner_of("billing", "a"), None, Duration::ZERO)
    );
    for other in [owner("b"), owner("a")] {
        let held = store.acquire(&kept, &other, ttl(LONG)).await.unwrap();
        assert!(
            matches!(&held, AcquireOutcome::Held { holder, .. } if *holder == lease),
            "{other:?}: {held:?}"
        );
    }
    let terms = Terms::ttl(ttl(LONG))
        .max_hold(Some(ttl(Duration::from_secs(5))))
        .lock_delay(Duration::from_secs(60));
    match store.acquire_with(&kept, &lease.owner, terms).await.unwrap() {
        AcquireOutcome::Extended(extended) => assert_eq!(
            (extended.token, extended.hold_until, extended.lock_delay),
            (lease.token, None, Duration::ZERO)
        ),
        other => panic!("extension: {other:?}"),
    }
    assert!(matches!(
        store
            .renew(&kept, &lease.owner, ttl(LONG), Some(lease.token))
            .await
            .unwrap(),
        RenewOutcome::Renewed(_)
    ));
    assert!(matches!(
        store
            .release(&kept, &lease.owner, Some(lease.token))
            .await
            .unwrap(),
        ReleaseOutcome::Released(_)
    ));
    let next = granted(store.acquire(&kept, &owner("b"), ttl(LONG)).await.unwrap());
    assert!(next.token > lease.token);
    granted_hold(
        store
            .acquire_hold(&kept, &owner("b"), Claim::Permit { limit: 1 }, ttl(LONG), None)
            .await
            .unwrap(),
    );
}

/// Version 3's acquire, as its servers send it: `$1` resource, `$2` owner, `$3` principal,
/// `$4` TTL in ms. Columns: owner, principal, token, acquired_at and expires_at in ms,
/// granted, expires_in_ms, announced.
const VERSION_3_ACQUIRE: &str = "
    WITH locked AS MATERIALIZED (
        SELECT pg_advisory_xact_lock(1718381312, hashtext($1::text))
    ), clock AS MATERIALIZED (
        SELECT clock_timestamp() AS now FROM locked
    ), fresh AS MATERIALIZED (
        SELECT nextval('fencelock_tokens') AS token,
               date_trunc('milliseconds', now + interval '999 microseconds') AS stamp
        FROM clock
    ), upserted AS (
        INSERT INTO fencelock_leases AS l (resource, owner, principal, token, acquired_at, expires_at)
        SELECT $1::text, $2::text, $3::text, token, stamp, stamp + $4::bigint * interval '1 millisecond'
        FROM fresh
        ON CONFLICT (resource) DO UPDATE SET
            owner = CASE WHEN l.expires_at <= (SELECT now FROM clock)
                OR (l.owner, l.principal) IS NOT DISTINCT FROM ($2::text, $3::text)
                THEN EXCLUDED.owner ELSE l.owner END,
            principal = CASE WHEN l.expires_at <= (SELECT now FROM clock)
                OR (l.owner, l.principal) IS NOT DISTINCT FROM ($2::text, $3::text)
                THEN EXCLUDED.principal ELSE l.principal END,
            token = CASE WHEN l.expires_at <= (SELECT now FROM clock)
                THEN EXCLUDED.token ELSE l.token END,
            acquired_at = CASE WHEN l.expires_at <= (SELECT now FROM clock)
                OR (l.owner, l.principal) IS NOT DISTINCT FROM ($2::text, $3::text)
                THEN EXCLUDED.acquired_at ELSE l.acquired_at END,
            expires_at = CASE WHEN l.expires_at <= (SELECT now FROM clock)
                OR (l.owner, l.principal) IS NOT DISTINCT FROM ($2::text, $3::text)
                THEN EXCLUDED.expires_at ELSE l.expires_at END
        RETURNING l.owner, l.principal, l.token, l.acquired_at, l.expires_at,
            l.token = (SELECT token FROM fresh) AS granted
    ), announced AS (
        SELECT pg_notify('fencelock_released', $1::text) FROM upserted l
        WHERE NOT granted AND (l.owner, l.principal) IS NOT DISTINCT FROM ($2::text, $3::text)
    )
    SELECT owner, principal, token, (extract(epoch FROM acquired_at) * 1000)::bigint,
        (extract(epoch FROM expires_at) * 1000)::bigint, granted,
        greatest(0, floor(extract(epoch FROM expires_at - (SELECT now FROM clock)) * 1000))::bigint
            AS expires_in_ms,
        (SELECT count(*) FROM announced) AS announced
    FROM upserted";

/// A server of version 3, still running beside newer ones, knows no terms: its grant over an
/// expired lease leaves none of that lease's terms to the new one (and, as documented, it
/// does not wait out a lock-delay); its extension of a capped lease is cut at the cap, and
/// its answer says so; its force-release still ends a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_version_3_leaves_no_stale_terms_and_is_cut_at_the_cap() {
    let url = shared_url().await;
    let (store, old) = (store(&url).await, connected(&url).await);
    // Token, expires_at and whether it granted.
    let acquire = |name: Resource, owner: &'static str, ttl_ms: i64| {
        let old = &old;
        async move {
            let row = old
                .query_one(
                    VERSION_3_ACQUIRE,
                    &[&name.as_str(), &owner, &None::<&str>, &ttl_ms],
                )
                .await
                .unwrap();
            let (token, expires_at, granted): (i64, i64, bool) = (row.get(2), row.get(4), row.get(5));
            let expires_at = Timestamp::from_millis(u64::try_from(expires_at).unwrap());
            (FencingToken(u64::try_from(token).unwrap()), expires_at, granted)
        }
    };

    let name = shared::unique("version-3-grant");
    let first = granted(
        store
            .acquire_with(&name, &owner("new"), with_terms(Duration::from_millis(50)))
            .await
            .unwrap(),
    );
    shared::until_expired(&*store, &name, Duration::from_secs(10)).await;
    let (token, _, was_granted) = acquire(name.clone(), "old", 60_000).await;
    assert!(was_granted && token > first.token, "within the lock-delay");
    let lease = store.get(&name).await.unwrap().expect("granted");
    assert_eq!(
        (&lease.owner, lease.token, lease.hold_until, lease.lock_delay),
        (&owner("old"), token, None, Duration::ZERO)
    );

    let capped = shared::unique("version-3-extend");
    let terms = Terms::ttl(ttl(LONG)).max_hold(Some(ttl(Duration::from_secs(120))));
    let lease = granted(store.acquire_with(&capped, &owner("a"), terms).await.unwrap());
    assert!(Some(lease.expires_at) < lease.hold_until);
    let (token, expires_at, was_granted) = acquire(capped.clone(), "a", 3_600_000).await;
    assert_eq!((token, was_granted), (lease.token, false), "extended");
    assert_eq!(Some(expires_at), lease.hold_until, "cut at the cap");
    let now = store.get(&capped).await.unwrap().expect("live");
    assert_eq!(
        (Some(now.expires_at), now.hold_until),
        (lease.hold_until, lease.hold_until)
    );

    let ended: Vec<i64> = old
        .query(
            "SELECT token FROM fencelock_force_release('lock', $1::text)",
            &[&capped.as_str()],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(ended, [i64::try_from(lease.token.0).unwrap()]);
    assert_eq!(store.get(&capped).await.unwrap(), None);
}

/// A connection that listens on the lock channel, and every notice on it, as (pid of the
/// session that sent it, payload). Listens while the client is kept.
async fn listening(url: &str) -> (tokio_postgres::Client, mpsc::UnboundedReceiver<(i32, String)>) {
    let (client, mut connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    let (heard, notices) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        // Notices only come out of a connection driven by `poll_message`.
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let Ok(tokio_postgres::AsyncMessage::Notification(note)) = message {
                let _ = heard.send((note.process_id(), note.payload().to_owned()));
            }
        }
    });
    client.batch_execute("LISTEN fencelock_released").await.unwrap();
    (client, notices)
}

/// Takes the advisory lock of `name` that the store's statements take, until the transaction
/// `tx` ends; returns the backend process of its session, for [`until_lock_wait`].
async fn lock_name(tx: &tokio_postgres::Transaction<'_>, name: &Resource) -> i32 {
    tx.execute(
        "SELECT pg_advisory_xact_lock(1718381312, hashtext($1::text))",
        &[&name.as_str()],
    )
    .await
    .unwrap();
    backend_pid(tx).await
}

/// The backend process of the session of `client`.
async fn backend_pid(client: &impl tokio_postgres::GenericClient) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Waits until the session `waiter` (or any) waits for a lock that the session `holder` (or
/// any other) holds; `what` says what that means, for a failure.
async fn until_lock_wait(url: &str, waiter: Option<i32>, holder: Option<i32>, what: &str) {
    let watching = connected(url).await;
    eventually(Duration::from_secs(10), what, async || {
        let waiting: i64 = watching
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                WHERE ($1::int IS NULL OR pid = $1) AND cardinality(pg_blocking_pids(pid)) > 0
                  AND ($2::int IS NULL OR $2 = ANY(pg_blocking_pids(pid)))",
                &[&waiter, &holder],
            )
            .await
            .unwrap()
            .get(0);
        (waiting > 0).then_some(())
    })
    .await;
}

/// Releases commit without `NOTIFY`, which would make each commit alone (PostgreSQL holds a
/// lock of the whole cluster from a notifying transaction's pre-commit until its commit is
/// flushed): one session of the store announces them. Two releases through two pooled
/// connections at once — the first held at its resource's advisory lock until the second is
/// done — are announced by one and the same session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_are_announced_by_one_session_not_by_the_transactions_that_commit_them() {
    let url = shared_url().await;
    let store = store(&url).await;
    let (_listening, mut notices) = listening(&url).await;
    let (first, second) = (shared::unique("held-back"), shared::unique("let-through"));
    for name in [&first, &second] {
        granted(
            store
                .acquire(name, &owner("a"), ttl(Duration::from_secs(60)))
                .await
                .unwrap(),
        );
    }
    let mut blocker = connected(&url).await;
    let tx = blocker.transaction().await.unwrap();
    let blocking = lock_name(&tx, &first).await;
    let held_back = tokio::spawn({
        let (store, first) = (store.clone(), first.clone());
        async move { store.release(&first, &owner("a"), None).await.unwrap() }
    });
    // The first release waits at the advisory lock, keeping its pooled connection: the second
    // goes through another one.
    until_lock_wait(
        &url,
        None,
        Some(blocking),
        "the first release to wait for the lock",
    )
    .await;
    let through = store.release(&second, &owner("a"), None).await.unwrap();
    assert!(matches!(through, ReleaseOutcome::Released(_)), "{through:?}");
    tx.commit().await.unwrap();
    let held_back = held_back.await.unwrap();
    assert!(matches!(held_back, ReleaseOutcome::Released(_)), "{held_back:?}");

    let mut senders = HashMap::new();
    while senders.len() < 2 {
        let (pid, payload) = tokio::time::timeout(Duration::from_secs(10), notices.recv())
            .await
            .unwrap_or_else(|_| panic!("not every release was announced; heard {senders:?}"))
            .expect("the listening connection ended");
        if payload == first.as_str() || payload == second.as_str() {
            senders.insert(payload, pid);
        }
    }
    assert_eq!(
        senders[first.as_str()],
        senders[second.as_str()],
        "two sessions announced the releases: {senders:?}"
    );
}

/// A release whose notice is lost (a crash between its commit and the notifying session's
/// batch: here, a lease row deleted without a notice) costs a waiter on another server only
/// its early wake-up: it asks again when the lease it was told of expires, and is granted
/// then — not before, since nothing told it sooner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_release_notice_was_lost_is_granted_at_the_lease_expiry() {
    let url = shared_url().await;
    let (a, b) = (store(&url).await, store(&url).await);
    let resource = shared::unique("notice-lost");
    let held = granted(
        a.acquire(&resource, &owner("holder"), ttl(Duration::from_secs(2)))
            .await
            .unwrap(),
    );
    // The waiter's first try must see the lease, and the deletion come after it: a session
    // holding the lease's row lock stops that try once it has the resource's advisory lock,
    // and the deleting one takes that advisory lock, so it waits for the try to end.
    let mut row_holder = connected(&url).await;
    let row_lock = row_holder.transaction().await.unwrap();
    row_lock
        .execute(
            "SELECT 1 FROM fencelock_leases WHERE resource = $1 FOR UPDATE",
            &[&resource.as_str()],
        )
        .await
        .unwrap();
    let waiters = fencelock_core::Waiters::new(b.clone());
    let waiting = tokio::spawn({
        let (waiters, resource) = (waiters.clone(), resource.clone());
        async move {
            let wait = Duration::from_secs(30);
            waiters
                .acquire(&resource, &owner("waiter"), ttl(Duration::from_secs(60)), wait)
                .await
        }
    });
    let holding = backend_pid(&row_lock).await;
    until_lock_wait(&url, None, Some(holding), "the waiter's try to reach the row").await;
    // The try, waiting at the row, holds the advisory lock the deletion waits for.
    let deleter = connected(&url).await;
    let deleting = backend_pid(&deleter).await;
    let deletion = tokio::spawn({
        let resource = resource.clone();
        async move {
            deleter
                .query_one(
                    "WITH locked AS MATERIALIZED (
                        SELECT pg_advisory_xact_lock(1718381312, hashtext($1::text))
                    ), gone AS (
                        DELETE FROM fencelock_leases WHERE resource = $1 AND EXISTS (SELECT 1 FROM locked)
                        RETURNING 1
                    ) SELECT count(*) FROM gone",
                    &[&resource.as_str()],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    });
    until_lock_wait(&url, Some(deleting), None, "the deletion to wait for the try").await;
    row_lock.commit().await.unwrap();
    assert_eq!(deletion.await.unwrap(), 1, "the lease row was not deleted");
    let outcome = waiting.await.unwrap().unwrap();
    let lease = granted(outcome);
    assert_eq!(lease.owner, owner("waiter"));
    assert!(
        lease.acquired_at >= held.expires_at,
        "granted at {:?}, before the lost lease's end {:?}: something told the waiter",
        lease.acquired_at,
        held.expires_at
    );
}

// A single acquire's common cases in one statement; the rest judged by the function.

/// The acquire of the previous version, as its servers still call it beside newer ones: `$1`
/// resource, `$2` owner (no principal), `$3` TTL in ms. Columns: role, token.
const VERSION_5_ACQUIRE: &str = "
    SELECT role, (lease).token
    FROM fencelock_acquire_locks(ARRAY[$1::text], $2::text, NULL, $3::bigint, NULL, 0, NULL)";

/// What [`VERSION_5_ACQUIRE`] answers through `client`: its role and the lease's token.
async fn version_5_acquire(
    client: &impl tokio_postgres::GenericClient,
    name: &Resource,
    owner: &str,
) -> (String, FencingToken) {
    let ttl_ms = i64::try_from(LONG.as_millis()).unwrap();
    let row = client
        .query_one(VERSION_5_ACQUIRE, &[&name.as_str(), &owner, &ttl_ms])
        .await
        .unwrap();
    let token: i64 = row.get(1);
    (row.get(0), FencingToken(u64::try_from(token).unwrap()))
}

/// What another server commits while a single acquire waits for the name's lock is what the
/// acquire judges, although its statement's snapshot was taken before the wait: a grant
/// meanwhile (a row the snapshot lacks) refuses it with that lease; so do an extension (a
/// newer version of the row it read) and a release followed by a new grant (the row it read
/// gone, another in its place), until their new expiry; a grant released again grants it,
/// with a token after the one drawn meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_acquire_judges_what_was_committed_while_it_waited_for_the_name() {
    let url = shared_url().await;
    let store = store(&url).await;
    for meanwhile in ["granted", "extended", "replaced", "released"] {
        let name = shared::unique(meanwhile);
        if meanwhile != "granted" {
            let short = ttl(Duration::from_secs(30));
            granted(store.acquire(&name, &owner("first"), short).await.unwrap());
        }
        let mut other = connected(&url).await;
        let tx = other.transaction().await.unwrap();
        let blocking = lock_name(&tx, &name).await;
        let waiting = tokio::spawn({
            let (store, name) = (store.clone(), name.clone());
            async move { store.acquire(&name, &owner("late"), ttl(LONG)).await.unwrap() }
        });
        until_lock_wait(
            &url,
            None,
            Some(blocking),
            "the acquire to wait for the name's lock",
        )
        .await;
        // What the other server does: the token it draws, and the holder's it leaves.
        let (drawn, holder) = match meanwhile {
            "granted" | "extended" => {
                let (role, token) = version_5_acquire(&tx, &name, "first").await;
                assert_eq!(role, meanwhile);
                (token, Some(token))
            }
            _ => {
                delete_lease(&tx, &name).await;
                let (role, token) = version_5_acquire(&tx, &name, "second").await;
                assert_eq!(role, "granted");
                if meanwhile == "released" {
                    delete_lease(&tx, &name).await;
                    (token, None)
                } else {
                    (token, Some(token))
                }
            }
        };
        tx.commit().await.unwrap();

        match (waiting.await.unwrap(), holder) {
            (AcquireOutcome::Held { holder, expires_in }, Some(token)) => {
                assert_eq!(holder.token, token, "{meanwhile}");
                // The lease of before had 30 s; the one of meanwhile has a minute.
                assert!(
                    expires_in > Duration::from_secs(30),
                    "{meanwhile}: {expires_in:?}"
                );
            }
            (AcquireOutcome::Granted { lease, expired: None }, None) => {
                assert_eq!(lease.owner, owner("late"));
                assert!(lease.token > drawn, "{lease:?} after {drawn:?}");
            }
            (other, _) => panic!("the acquire that waited while the name was {meanwhile}: {other:?}"),
        }
    }
}

/// Deletes the lease row of `name` in `tx`, as a release does.
async fn delete_lease(tx: &tokio_postgres::Transaction<'_>, name: &Resource) {
    let deleted = tx
        .execute(
            "DELETE FROM fencelock_leases WHERE resource = $1",
            &[&name.as_str()],
        )
        .await
        .unwrap();
    assert_eq!(deleted, 1);
}

/// A single acquire on a name that has a row — the caller's live lease, an expired one, one
/// in its lock-delay — is judged by the whole rules, and a grant of a free name keeps its
/// terms: the cap cuts its TTL and its extension, its metadata is kept, and a grant over an
/// expired lease reports it and has a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_acquire_keeps_every_rule_on_a_free_name_and_on_a_row_left() {
    // A database of its own, so that no other test's purge takes the expired lease first.
    let store = store(&new_database("single_acquire").await).await;
    let cap = Duration::from_secs(5);
    let meta = fencelock_core::Meta::parse(r#"{"host":"db-1"}"#).unwrap();
    let capped = Terms::ttl(ttl(LONG))
        .max_hold(Some(ttl(cap)))
        .meta(Some(meta.clone()));
    let name = shared::unique("capped");
    let lease = granted(store.acquire_with(&name, &owner("a"), capped).await.unwrap());
    let hold_until = lease.hold_until.expect("a capped lease has its cap");
    assert_eq!(
        (lease.expires_at, hold_until.since(lease.acquired_at)),
        (hold_until, cap)
    );
    assert_eq!(lease.meta.as_ref(), Some(&meta));
    match store.acquire(&name, &owner("a"), ttl(LONG)).await.unwrap() {
        AcquireOutcome::Extended(extended) => {
            assert_eq!((extended.token, extended.expires_at), (lease.token, hold_until));
            assert_eq!(extended.meta.as_ref(), Some(&meta), "kept when none is sent");
        }
        other => panic!("the holder's acquire again: {other:?}"),
    }

    let brief = || ttl(Duration::from_millis(50));
    let expiring = shared::unique("expiring");
    let first = granted(store.acquire(&expiring, &owner("a"), brief()).await.unwrap());
    let delayed = shared::unique("delayed");
    let delay = Duration::from_secs(60);
    let terms = Terms::ttl(brief()).lock_delay(delay);
    granted(store.acquire_with(&delayed, &owner("a"), terms).await.unwrap());
    shared::until_expired(&*store, &expiring, Duration::from_secs(10)).await;
    shared::until_expired(&*store, &delayed, Duration::from_secs(10)).await;
    match store.acquire(&expiring, &owner("b"), ttl(LONG)).await.unwrap() {
        AcquireOutcome::Granted { lease, expired } => {
            assert!(lease.token > first.token, "{lease:?} after {first:?}");
            assert_eq!(expired, Some(first));
        }
        other => panic!("an acquire over an expired lease: {other:?}"),
    }
    match store.acquire(&delayed, &owner("b"), ttl(LONG)).await.unwrap() {
        AcquireOutcome::Delayed { resource, retry_in } => {
            assert_eq!(resource, delayed);
            assert!(retry_in > Duration::ZERO && retry_in <= delay, "{retry_in:?}");
        }
        other => panic!("an acquire within a lock-delay: {other:?}"),
    }
}

/// Servers of the previous version, beside newer ones, acquire with their function and
/// release with their statement: a lease of either is the same lease to both — refused to
/// another owner, extended for its own, released only by its holder with its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_the_previous_version_and_of_this_one_are_the_same_to_both() {
    let url = shared_url().await;
    let (store, old) = (store(&url).await, connected(&url).await);
    let name = shared::unique("mixed");
    let lease = granted(store.acquire(&name, &owner("new"), ttl(LONG)).await.unwrap());
    assert_eq!(
        version_5_acquire(&old, &name, "old").await,
        ("held".into(), lease.token)
    );
    assert_eq!(
        version_5_acquire(&old, &name, "new").await,
        ("extended".into(), lease.token)
    );
    let released = store
        .release(&name, &owner("new"), Some(lease.token))
        .await
        .unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(Some(ref e)) if e.lease.token == lease.token));

    let (role, token) = version_5_acquire(&old, &name, "old").await;
    assert_eq!(role, "granted");
    assert!(token > lease.token, "{token:?} after {:?}", lease.token);
    match store.acquire(&name, &owner("new"), ttl(LONG)).await.unwrap() {
        AcquireOutcome::Held { holder, .. } => {
            assert_eq!((holder.owner, holder.token), (owner("old"), token))
        }
        other => panic!("an acquire of the old server's lease: {other:?}"),
    }
    let refusals = [
        store.release(&name, &owner("new"), None).await.unwrap(),
        store
            .release(&name, &owner("old"), Some(lease.token))
            .await
            .unwrap(),
    ];
    assert!(
        matches!(refusals, [ReleaseOutcome::Forbidden, ReleaseOutcome::Conflict]),
        "{refusals:?}"
    );
    let released = store.release(&name, &owner("old"), Some(token)).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(Some(ref e)) if e.lease.token == token));
    assert_eq!(
        store.release(&name, &owner("old"), None).await.unwrap(),
        ReleaseOutcome::NotFound
    );
}

/// The store's sessions run in READ COMMITTED, which its statements and functions rely on,
/// even in a database whose default is another level: there too a multi-acquire (a function
/// that refuses any other level) grants, a single acquire extends and refuses, and a
/// release releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_works_in_a_database_whose_default_isolation_is_repeatable_read() {
    let url = new_database("repeatable_read").await;
    let (_, database) = url.rsplit_once('/').expect("the address names a database");
    connected(&url)
        .await
        .batch_execute(&format!(
            "ALTER DATABASE {database} SET default_transaction_isolation = 'repeatable read'"
        ))
        .await
        .unwrap();
    let level: String = value_of(&url, "SHOW transaction_isolation").await;
    assert_eq!(level, "repeatable read", "the database's own sessions");

    let store = store(&url).await;
    let (x, y) = (shared::unique("x"), shared::unique("y"));
    let both = Resources::new(vec![x.clone(), y.clone()]).unwrap();
    let outcome = store
        .acquire_all(&both, &owner("a"), Terms::ttl(ttl(LONG)))
        .await
        .unwrap();
    assert!(matches!(outcome, AcquireAllOutcome::Granted(_)), "{outcome:?}");
    let extended = store.acquire(&x, &owner("a"), ttl(LONG)).await.unwrap();
    assert!(matches!(extended, AcquireOutcome::Extended(_)), "{extended:?}");
    let refused = store.acquire(&x, &owner("b"), ttl(LONG)).await.unwrap();
    assert!(matches!(refused, AcquireOutcome::Held { .. }), "{refused:?}");
    let released = store.release(&y, &owner("a"), None).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
}
