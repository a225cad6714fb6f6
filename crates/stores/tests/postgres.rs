//! The PostgreSQL store against a real, throwaway PostgreSQL: the conformance suite, many
//! servers on one database, and the database going away and coming back.
#![cfg(feature = "postgres")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock_conformance::{Harness, owner, ttl};
use fencelock_core::{AcquireOutcome, LockStore, ReleaseNotice, StoreError};
use fencelock_stores::Deadline;
use fencelock_stores::postgres::{PostgresOptions, PostgresStore};
use fencelock_testkit::{Postgres, Proxy, shared_postgres};

/// The shared server's address; starting it blocks, so not on the async worker.
async fn shared_url() -> String {
    tokio::task::spawn_blocking(|| shared_postgres().url())
        .await
        .expect("start PostgreSQL")
}

async fn store(url: &str) -> Arc<Deadline<PostgresStore>> {
    Arc::new(PostgresStore::connect(url).await.expect("connect to PostgreSQL"))
}

async fn harness() -> Harness {
    let url = shared_url().await;
    let again = move || {
        let url = url.clone();
        async move { store(&url).await as Arc<dyn LockStore> }
    };
    shared::harness(again().await, again)
}

fencelock_conformance::suite!(harness);

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
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.get(&resource).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "lease did not expire");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Another test may purge at the same time (and take this lease, or make this purge
    // wait its turn): what matters is that the row goes, and that the next token is still
    // greater.
    let (client, connection) = tokio_postgres::connect(&shared_url().await, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    loop {
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
        if rows == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the expired lease was not purged");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    let versions: Vec<i32> = connected(&fresh)
        .await
        .query(
            "SELECT version FROM fencelock_schema_version ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(versions, vec![1, 2]);
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
                        Ok(held @ AcquireOutcome::Held { .. }) => panic!("nobody else uses it: {held:?}"),
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
    let deadline = resumed + Duration::from_secs(30);
    while a.ping().await.is_err() || b.ping().await.is_err() {
        assert!(Instant::now() < deadline, "the stores did not come back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("both stores answered {:?} after the restart", resumed.elapsed());

    // The listening connections are back too: a release on one is heard on the other.
    let mut heard = b.releases().unwrap();
    let announced = shared::unique("after-restart");
    loop {
        a.acquire(&announced, &owner("x"), ttl)
            .await
            .expect("acquire after restart");
        a.release(&announced, &owner("x"), None)
            .await
            .expect("release after restart");
        if shared::wait_for_release(&mut heard, &announced, Duration::from_millis(500))
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "releases are not heard after the restart"
        );
    }
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
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match store.acquire(&resource, &b, ttl).await {
            Ok(AcquireOutcome::Held { holder, .. }) => {
                assert_eq!(holder.owner, owner("a"));
                break;
            }
            Ok(other) => panic!("the lock of a was lost: {other:?}"),
            Err(e) => {
                assert!(Instant::now() < deadline, "the store did not come back: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    eprintln!(
        "the store answered again {:?} after the network came back",
        started.elapsed() - took
    );
}
