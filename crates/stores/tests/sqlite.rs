//! The embedded store: the conformance suite on a manual clock, then what only a durable,
//! single-server, group-committing store promises.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use fencelock_conformance::{Harness, owner, ttl};
use fencelock_core::store::Result;
use fencelock_core::{
    AcquireOutcome, Claim, Clock, Expired, FencingToken, Hold, HoldKind, HoldOutcome, Key, Kind, Lease,
    ListQuery, LockStore, ManualClock, Meta, ReleaseNotice, ReleaseOutcome, RenewOutcome, Resource,
    StoreError, Terms, Timestamp, Ttl,
};
use fencelock_stores::sqlite::SqliteStore;
use fencelock_testkit::fixtures::{owner_of, resource};
use tempfile::TempDir;

const T0: Timestamp = Timestamp::from_millis(1_795_933_800_000);

fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(T0))
}

fn db(dir: &TempDir) -> PathBuf {
    dir.path().join("fencelock.db")
}

fn long() -> Ttl {
    ttl(Duration::from_secs(600))
}

async fn grant(store: &SqliteStore, name: &str, who: &str, ttl: Ttl) -> Lease {
    match store.acquire(&resource(name), &owner(who), ttl).await.unwrap() {
        AcquireOutcome::Granted { lease, .. } => lease,
        other => panic!("expected a grant of {name} to {who}, got {other:?}"),
    }
}

/// A semaphore of three permits.
const PERMIT: Claim = Claim::Permit { limit: 3 };

async fn grant_hold(store: &SqliteStore, name: &str, who: &str, claim: Claim, ttl: Ttl) -> Hold {
    let outcome = store
        .acquire_hold(&resource(name), &owner(who), claim, ttl, None)
        .await;
    match outcome.unwrap() {
        HoldOutcome::Granted { hold, .. } => hold,
        other => panic!("expected a grant of {claim:?} on {name} to {who}, got {other:?}"),
    }
}

/// The live holds of `kind` on `name`.
async fn holds(store: &SqliteStore, kind: HoldKind, name: &str) -> Vec<Hold> {
    store.holds(kind, &resource(name)).await.unwrap()
}

fn is_unavailable<T: std::fmt::Debug>(result: &Result<T>) -> bool {
    matches!(result, Err(StoreError::Unavailable { .. }))
}

/// Polls `done` until it holds, failing after a few seconds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    fencelock_testkit::eventually(Duration::from_secs(10), what, async || done().then_some(())).await;
}

// ---- The conformance suite ----

async fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let (clock, path) = (manual_clock(), db(&dir));
    let store = Arc::new(SqliteStore::open_with_clock(&path, clock.clone()).unwrap());
    let open = store.clone();
    let again = clock.clone();
    Harness::manual(store, clock).keeping(dir).reopening(move || {
        let (open, path, clock) = (open.clone(), path.clone(), again.clone());
        async move {
            open.close().await;
            Arc::new(SqliteStore::open_with_clock(path, clock).unwrap()) as Arc<dyn LockStore>
        }
    })
}

fencelock_conformance::suite!(harness);

// ---- Durability (rule 7) ----

#[tokio::test]
async fn leases_and_the_token_counter_survive_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    assert!(store.capabilities().durable);
    assert_eq!(store.capabilities().ttl_granularity, Duration::from_millis(1));
    let a = grant(&store, "a", "worker-1", long()).await;
    let b = grant(&store, "b", "worker-2", long()).await;
    let RenewOutcome::Renewed(b) = store
        .renew(&b.resource, &b.owner, ttl(Duration::from_secs(900)), None)
        .await
        .unwrap()
    else {
        panic!("renew of a held lease failed");
    };
    store.close().await;

    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    assert_eq!(store.get(&a.resource).await.unwrap(), Some(a.clone()));
    assert_eq!(store.get(&b.resource).await.unwrap(), Some(b.clone()));
    match store.acquire(&a.resource, &owner("other"), long()).await.unwrap() {
        AcquireOutcome::Held { holder, .. } => assert_eq!(holder, a),
        outcome => panic!("a lease held before the restart was lost: {outcome:?}"),
    }
    // Dropping, like closing, frees the file for the next opener.
    drop(store);
    let store = SqliteStore::open_with_clock(db(&dir), clock).unwrap();
    let c = grant(&store, "c", "worker-3", long()).await;
    assert_eq!(c.token, FencingToken(b.token.0 + 1));
}

#[tokio::test]
async fn names_inline_and_on_the_heap_survive_close_and_reopen_in_byte_order() {
    // A name of up to 24 bytes of UTF-8 is kept inline, a longer one on the heap (model.rs):
    // both sides of the limit, counted in bytes and not characters, and the longest name, as
    // resources, owners and principals; an election's lock as well.
    let names = [
        "x".repeat(24),
        "x".repeat(25),
        format!("{}é", "x".repeat(23)),
        "é".repeat(127),
        "x".repeat(255),
    ];
    let dir = tempfile::tempdir().unwrap();
    let clock = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let mut granted = Vec::new();
    for name in &names {
        granted.push(grant(&store, name, name, long()).await);
    }
    for (resource, owner) in [
        (resource("of a principal"), owner_of(&names[4], &names[1])),
        (
            Resource::election(&resource(&names[2])).unwrap(),
            owner_of(&names[0], "leader"),
        ),
    ] {
        let Ok(AcquireOutcome::Granted { lease, .. }) = store.acquire(&resource, &owner, long()).await else {
            panic!("no grant of {resource:?}");
        };
        granted.push(lease);
    }
    store.close().await;

    let store = SqliteStore::open_with_clock(db(&dir), clock).unwrap();
    for lease in &granted {
        assert_eq!(store.get(&lease.resource).await.unwrap().as_ref(), Some(lease));
    }
    let query = ListQuery {
        prefix: String::new(),
        after: None,
        limit: 100,
    };
    let listed = store.list(&query).await.unwrap().leases;
    granted.sort_by(|a, b| a.resource.as_str().as_bytes().cmp(b.resource.as_str().as_bytes()));
    assert_eq!(listed, granted, "every lease, in the byte order of its name");
}

#[tokio::test]
async fn persisted_expiries_are_honoured_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let lease = grant(&store, "r", "a", ttl(Duration::from_secs(10))).await;
    clock.advance(Duration::from_secs(4));
    assert!(store.get(&lease.resource).await.unwrap().is_some());
    store.close().await;

    // Stopped for 9 s: the lease keeps the 10 s it had left at the last batch (the grant).
    clock.advance(Duration::from_secs(9));
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let held = store.acquire(&lease.resource, &owner("b"), long()).await.unwrap();
    let moved = Lease {
        expires_at: lease.expires_at.plus(ttl(Duration::from_secs(13))),
        ..lease.clone()
    };
    assert!(
        matches!(&held, AcquireOutcome::Held { holder, expires_in } if *holder == moved && *expires_in == Duration::from_secs(10)),
        "{held:?}"
    );
    clock.advance(Duration::from_secs(10));
    match store.acquire(&lease.resource, &owner("b"), long()).await.unwrap() {
        AcquireOutcome::Granted { lease: next, expired } => {
            assert_eq!(expired, Some(moved));
            assert!(next.token > lease.token);
        }
        outcome => panic!("expected a grant once the persisted lease expired, got {outcome:?}"),
    }
}

#[tokio::test]
async fn a_wall_clock_stepped_forward_while_stopped_takes_no_time_from_a_lease() {
    // The reproduction of the review: granted for 30 minutes under a clock an hour behind,
    // stopped cleanly, started again with the right clock.
    let dir = tempfile::tempdir().unwrap();
    let behind = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), behind.clone()).unwrap();
    let lease = grant(&store, "r", "a", ttl(Duration::from_secs(1800))).await;
    store.close().await;

    let right = Arc::new(ManualClock::new(T0.plus(ttl(Duration::from_secs(3600)))));
    let store = SqliteStore::open_with_clock(db(&dir), right.clone()).unwrap();
    let held = store.acquire(&lease.resource, &owner("b"), long()).await.unwrap();
    assert!(
        matches!(&held, AcquireOutcome::Held { holder, expires_in }
            if holder.owner == lease.owner && holder.token == lease.token
                && *expires_in == Duration::from_secs(1800)),
        "the lease keeps its 30 minutes: {held:?}"
    );
    right.advance(Duration::from_secs(1799));
    assert!(matches!(
        store.acquire(&lease.resource, &owner("b"), long()).await.unwrap(),
        AcquireOutcome::Held { .. }
    ));
    right.advance(Duration::from_secs(1));
    assert!(matches!(
        store.acquire(&lease.resource, &owner("b"), long()).await.unwrap(),
        AcquireOutcome::Granted { lease: next, .. } if next.token > lease.token
    ));
}

#[tokio::test]
async fn a_wall_clock_stepped_back_while_stopped_ends_no_lease_late_or_early_and_never_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let clock = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let lease = grant(&store, "r", "a", ttl(Duration::from_secs(60))).await;
    store.close().await;

    let back = Arc::new(ManualClock::new(Timestamp::from_millis(
        T0.as_millis() - 3_600_000,
    )));
    let store = SqliteStore::open_with_clock(db(&dir), back.clone()).unwrap();
    assert_eq!(store.get(&lease.resource).await.unwrap(), Some(lease.clone()));
    let other = grant(&store, "s", "b", ttl(Duration::from_secs(60))).await;
    assert_eq!(
        other.acquired_at, T0,
        "the store's time resumes from the last batch"
    );
    assert!(other.token > lease.token);
    back.advance(Duration::from_secs(60));
    assert_eq!(store.get(&lease.resource).await.unwrap(), None);
}

#[tokio::test]
async fn the_system_clock_store_keeps_leases_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(&dir)).unwrap();
    let lease = grant(&store, "r", "a", long()).await;
    let wall = Timestamp::now_wall();
    assert!(
        lease.acquired_at.since(wall) < Duration::from_secs(5)
            && wall.since(lease.acquired_at) < Duration::from_secs(5)
    );
    store.close().await;
    let store = SqliteStore::open(db(&dir)).unwrap();
    let kept = store.get(&lease.resource).await.unwrap().expect("still held");
    assert_eq!(
        (&kept.owner, kept.token, kept.acquired_at),
        (&lease.owner, lease.token, lease.acquired_at)
    );
    assert!(
        kept.expires_at >= lease.expires_at,
        "the stop took no time from it"
    );
}

// ---- Time across a stop, by the host's uptime (issue 22) ----

/// A manual clock at `start`, in the host's boot `boot`, up for `since_boot` then.
fn booted(start: Timestamp, boot: &str, since_boot: Duration) -> Arc<ManualClock> {
    Arc::new(ManualClock::new(start).in_boot(boot, since_boot))
}

#[tokio::test]
async fn in_one_boot_a_stop_keeps_every_expires_at_and_takes_the_time_that_passed() {
    // Granted, 4 s of running, then stopped for 9 s while the wall clock was stepped an hour
    // ahead: the lease and the permit end when they were acknowledged to, 13 s nearer.
    let dir = tempfile::tempdir().unwrap();
    let minute = ttl(Duration::from_secs(60));
    let clock = booted(T0, "boot-1", HOUR);
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let lease = grant(&store, "r", "a", minute).await;
    let permit = grant_hold(&store, "s", "a", PERMIT, minute).await;
    clock.advance(Duration::from_secs(4));
    store.close().await;

    let passed = Duration::from_secs(13);
    let stepped = booted(after(T0, HOUR + passed), "boot-1", HOUR + passed);
    let store = SqliteStore::open_with_clock(db(&dir), stepped.clone()).unwrap();
    assert_eq!(store.get(&lease.resource).await.unwrap(), Some(lease.clone()));
    assert_eq!(holds(&store, HoldKind::Semaphore, "s").await, [permit]);
    assert_eq!(left(&store, &lease).await, Duration::from_secs(47));
    // The store's time went on from where it stood, not from the stepped wall clock.
    let next = grant(&store, "n", "b", minute).await;
    assert_eq!(next.acquired_at, after(T0, passed));
    stepped.advance(Duration::from_secs(47));
    assert_eq!(store.get(&lease.resource).await.unwrap(), None);
    assert_eq!(holds(&store, HoldKind::Semaphore, "s").await, []);
    store.close().await;

    // Once more, a second later in the same boot: the record the store left holds too.
    let again = booted(
        after(T0, 2 * HOUR),
        "boot-1",
        HOUR + passed + Duration::from_secs(48),
    );
    let store = SqliteStore::open_with_clock(db(&dir), again).unwrap();
    assert_eq!(store.get(&next.resource).await.unwrap(), Some(next.clone()));
    assert_eq!(left(&store, &next).await, Duration::from_secs(12));
}

#[tokio::test]
async fn after_a_reboot_a_stop_takes_no_time_from_a_lease() {
    let dir = tempfile::tempdir().unwrap();
    let minute = ttl(Duration::from_secs(60));
    let store = SqliteStore::open_with_clock(db(&dir), booted(T0, "boot-1", HOUR)).unwrap();
    let lease = grant(&store, "r", "a", minute).await;
    let permit = grant_hold(&store, "s", "a", PERMIT, minute).await;
    store.close().await;

    // Rebooted: up for 5 s, two minutes of wall clock later. The uptime cannot tell how long
    // the store was stopped, and the wall clock may have been stepped: no time is counted.
    let down = Duration::from_secs(120);
    let rebooted = booted(after(T0, down), "boot-2", Duration::from_secs(5));
    let store = SqliteStore::open_with_clock(db(&dir), rebooted).unwrap();
    assert_eq!(
        store.get(&lease.resource).await.unwrap(),
        Some(later(&lease, down))
    );
    assert_eq!(left(&store, &lease).await, Duration::from_secs(60));
    assert_eq!(
        holds(&store, HoldKind::Semaphore, "s").await,
        [later_hold(&permit, down)]
    );
}

#[tokio::test]
async fn an_uptime_that_went_back_in_one_boot_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with_clock(db(&dir), booted(T0, "boot-1", HOUR)).unwrap();
    let lease = grant(&store, "r", "a", ttl(Duration::from_secs(60))).await;
    store.close().await;

    // No uptime goes back in one boot: a record that says so is not counted on.
    let down = Duration::from_secs(120);
    let odd = booted(after(T0, down), "boot-1", Duration::from_secs(5));
    let store = SqliteStore::open_with_clock(db(&dir), odd).unwrap();
    assert_eq!(left(&store, &lease).await, Duration::from_secs(60));
}

#[tokio::test]
async fn the_system_clock_store_keeps_every_expires_at_across_a_restart_but_not_a_reboot() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(&dir)).unwrap();
    let lease = grant(&store, "r", "a", long()).await;
    store.close().await;
    let store = SqliteStore::open(db(&dir)).unwrap();
    assert_eq!(store.get(&lease.resource).await.unwrap(), Some(lease.clone()));
    store.close().await;

    // Another boot written into the file, with the time an hour earlier: as after a reboot,
    // the lease keeps the time it had left then.
    let conn = rusqlite::Connection::open(db(&dir)).unwrap();
    conn.execute(
        "UPDATE meta SET boot_id = 'another', last_now = last_now - 3600000",
        [],
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(db(&dir)).unwrap();
    let kept = store.get(&lease.resource).await.unwrap().expect("still held");
    assert!(
        kept.expires_at >= after(lease.expires_at, HOUR),
        "{kept:?} ends less than an hour after {lease:?}"
    );
}

#[tokio::test]
async fn the_token_counter_is_never_reset() {
    let dir = tempfile::tempdir().unwrap();
    let clock = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let released = grant(&store, "released", "a", long()).await;
    store
        .release(&released.resource, &released.owner, None)
        .await
        .unwrap();
    let expired = grant(&store, "expired", "a", ttl(Duration::from_secs(1))).await;
    clock.advance(Duration::from_secs(2));
    let purged = store.purge_expired().await.unwrap();
    assert_eq!(
        purged,
        vec![fencelock_core::Expired {
            kind: fencelock_core::Kind::Lock,
            lease: expired.clone()
        }]
    );
    let last = grant(&store, "kept", "a", long()).await;
    store.close().await;

    // Even with every lease row deleted behind the store's back, the counter remembers;
    // and the counter itself refuses to go back or be deleted.
    let conn = rusqlite::Connection::open(db(&dir)).unwrap();
    assert_eq!(conn.execute("DELETE FROM leases", []).unwrap(), 1);
    for tamper in ["UPDATE meta SET last_token = 0", "DELETE FROM meta"] {
        let error = conn.execute(tamper, []).unwrap_err();
        assert!(
            error.to_string().contains("fencing token counter"),
            "{tamper}: {error}"
        );
    }
    drop(conn);

    let store = SqliteStore::open_with_clock(db(&dir), clock).unwrap();
    assert_eq!(store.get(&last.resource).await.unwrap(), None);
    for name in ["released", "expired", "kept", "new"] {
        let next = grant(&store, name, "b", long()).await;
        assert!(
            next.token > last.token,
            "{name} got {} after {}",
            next.token,
            last.token
        );
    }
}

// ---- Semaphores and read-write locks: as durable as locks ----

#[tokio::test]
async fn permits_and_holds_survive_close_and_reopen_with_their_tokens_expiries_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let clock = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let lease = grant(&store, "lock", "worker-0", long()).await;
    let p1 = grant_hold(&store, "pool", "worker-1", PERMIT, long()).await;
    clock.advance(Duration::from_secs(1));
    let p2 = grant_hold(&store, "pool", "worker-2", PERMIT, ttl(Duration::from_secs(900))).await;
    let r1 = grant_hold(&store, "shared", "reader-1", Claim::Read, long()).await;
    let r2 = grant_hold(&store, "shared", "reader-2", Claim::Read, long()).await;
    let RenewOutcome::Renewed(r2) = store
        .renew_hold(
            HoldKind::RwLock,
            &r2.lease.resource,
            &r2.lease.owner,
            ttl(Duration::from_secs(1200)),
            Some(r2.lease.token),
        )
        .await
        .unwrap()
    else {
        panic!("renew of a held read hold failed");
    };
    grant_hold(&store, "exclusive", "writer", Claim::Read, long()).await;
    // The sole reader's upgrade: a new token, in the row of the read hold it replaces.
    let w = grant_hold(&store, "exclusive", "writer", Claim::Write, long()).await;
    // A released permit leaves no row, but its token stays spent.
    let gone = grant_hold(&store, "pool", "worker-3", PERMIT, long()).await;
    let released = store
        .release_hold(HoldKind::Semaphore, &gone.lease.resource, &gone.lease.owner, None)
        .await
        .unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
    store.close().await;

    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    assert_eq!(holds(&store, HoldKind::Semaphore, "pool").await, [p1, p2]);
    assert_eq!(holds(&store, HoldKind::RwLock, "shared").await, [r1, r2]);
    assert_eq!(
        holds(&store, HoldKind::RwLock, "exclusive").await,
        vec![w.clone()]
    );
    assert_eq!(store.get(&lease.resource).await.unwrap(), Some(lease));
    // The limit came back with the permits, and the writer still excludes readers.
    let other_limit = Claim::Permit { limit: 4 };
    let pool = store
        .acquire_hold(&resource("pool"), &owner("worker-4"), other_limit, long(), None)
        .await
        .unwrap();
    assert_eq!(pool, HoldOutcome::LimitMismatch { limit: 3 });
    let read = store
        .acquire_hold(
            &resource("exclusive"),
            &owner("reader-3"),
            Claim::Read,
            long(),
            None,
        )
        .await
        .unwrap();
    assert!(
        matches!(&read, HoldOutcome::Busy(busy) if busy.holders == [w.clone()]),
        "{read:?}"
    );

    // Dropping, like closing, frees the file; the next grant of any kind draws above every
    // token issued before, the released permit's included.
    drop(store);
    let store = SqliteStore::open_with_clock(db(&dir), clock).unwrap();
    let next = grant_hold(&store, "pool", "worker-4", PERMIT, long()).await;
    assert_eq!(next.lease.token, FencingToken(gone.lease.token.0 + 1));
    let lock = grant(&store, "lock-2", "worker-5", long()).await;
    assert_eq!(lock.token, FencingToken(next.lease.token.0 + 1));
}

#[tokio::test]
async fn a_wall_clock_stepped_forward_while_stopped_takes_no_time_from_a_hold() {
    // As for a lease: held for 30 minutes under a clock an hour behind, stopped cleanly,
    // started again with the right clock.
    let dir = tempfile::tempdir().unwrap();
    let behind = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), behind).unwrap();
    let half_hour = ttl(Duration::from_secs(1800));
    let write = grant_hold(&store, "rw", "a", Claim::Write, half_hour).await;
    let permit = grant_hold(&store, "sem", "a", Claim::Permit { limit: 1 }, half_hour).await;
    store.close().await;

    let hour = ttl(Duration::from_secs(3600));
    let right = Arc::new(ManualClock::new(T0.plus(hour)));
    let store = SqliteStore::open_with_clock(db(&dir), right.clone()).unwrap();
    for (before, claim) in [(&write, Claim::Read), (&permit, Claim::Permit { limit: 1 })] {
        let moved = Hold {
            lease: Lease {
                expires_at: before.lease.expires_at.plus(hour),
                ..before.lease.clone()
            },
            claim: before.claim,
        };
        let busy = store
            .acquire_hold(&before.lease.resource, &owner("b"), claim, long(), None)
            .await
            .unwrap();
        assert!(
            matches!(&busy, HoldOutcome::Busy(busy)
                if busy.holders == [moved.clone()] && busy.retry_in == Duration::from_secs(1800)),
            "the hold keeps its 30 minutes: {busy:?}"
        );
    }
    right.advance(Duration::from_secs(1799));
    assert_eq!(holds(&store, HoldKind::RwLock, "rw").await.len(), 1);
    right.advance(Duration::from_secs(1));
    let read = grant_hold(&store, "rw", "b", Claim::Read, long()).await;
    assert!(read.lease.token > permit.lease.token);
    assert_eq!(holds(&store, HoldKind::Semaphore, "sem").await, []);
}

/// `t` moved later by `by`.
fn after(t: Timestamp, by: Duration) -> Timestamp {
    Timestamp::from_millis(t.as_millis() + u64::try_from(by.as_millis()).unwrap())
}

/// `lease` as the store shows it once re-bases have moved its end later by `by`.
fn later(lease: &Lease, by: Duration) -> Lease {
    Lease {
        expires_at: after(lease.expires_at, by),
        ..lease.clone()
    }
}

/// `hold` as the store shows it once re-bases have moved its end later by `by`.
fn later_hold(hold: &Hold, by: Duration) -> Hold {
    Hold {
        lease: later(&hold.lease, by),
        claim: hold.claim,
    }
}

/// How long the lease on `lease`'s resource has left, as another owner is told.
async fn left(store: &SqliteStore, lease: &Lease) -> Duration {
    match store
        .acquire(&lease.resource, &owner("other"), long())
        .await
        .unwrap()
    {
        AcquireOutcome::Held { holder, expires_in } if holder.token == lease.token => expires_in,
        outcome => panic!("expected {lease:?} to be held, got {outcome:?}"),
    }
}

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn successive_re_bases_add_up_for_rows_renewed_between_stops_and_rows_never_touched() {
    let dir = tempfile::tempdir().unwrap();
    let half_hour = ttl(Duration::from_secs(1800));
    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    let untouched = grant(&store, "untouched", "a", half_hour).await;
    let renewed = grant(&store, "renewed", "a", half_hour).await;
    let read = grant_hold(&store, "rw", "a", Claim::Read, half_hour).await;
    let permit = grant_hold(&store, "sem", "a", PERMIT, half_hour).await;
    store.close().await;

    // Stopped for an hour (or the wall clock stepped forward by one): nothing loses time.
    let clock = Arc::new(ManualClock::new(after(T0, HOUR)));
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    assert_eq!(left(&store, &untouched).await, Duration::from_secs(1800));
    assert_eq!(
        holds(&store, HoldKind::RwLock, "rw").await,
        [later_hold(&read, HOUR)]
    );
    // Ten seconds later, two of them are renewed for 20 minutes; the others are not touched.
    clock.advance(Duration::from_secs(10));
    let twenty_minutes = ttl(Duration::from_secs(1200));
    let RenewOutcome::Renewed(renewed) = store
        .renew(&renewed.resource, &renewed.owner, twenty_minutes, None)
        .await
        .unwrap()
    else {
        panic!("the renew of a held lease failed");
    };
    let RenewOutcome::Renewed(permit) = store
        .renew_hold(
            HoldKind::Semaphore,
            &permit.lease.resource,
            &permit.lease.owner,
            twenty_minutes,
            None,
        )
        .await
        .unwrap()
    else {
        panic!("the renew of a held permit failed");
    };
    store.close().await;

    // Stopped for two hours more: each keeps what it had left at the renewals, the last batch.
    clock.advance(2 * HOUR);
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    assert_eq!(
        store.get(&untouched.resource).await.unwrap(),
        Some(later(&untouched, 3 * HOUR))
    );
    assert_eq!(
        store.get(&renewed.resource).await.unwrap(),
        Some(later(&renewed, 2 * HOUR))
    );
    assert_eq!(
        holds(&store, HoldKind::RwLock, "rw").await,
        [later_hold(&read, 3 * HOUR)]
    );
    assert_eq!(
        holds(&store, HoldKind::Semaphore, "sem").await,
        [later_hold(&permit, 2 * HOUR)]
    );
    assert_eq!(left(&store, &untouched).await, Duration::from_secs(1790));
    assert_eq!(left(&store, &renewed).await, Duration::from_secs(1200));

    // And each ends then, not before.
    clock.advance(Duration::from_secs(1199));
    assert_eq!(holds(&store, HoldKind::Semaphore, "sem").await.len(), 1);
    assert_eq!(left(&store, &renewed).await, Duration::from_secs(1));
    clock.advance(Duration::from_secs(1));
    assert_eq!(holds(&store, HoldKind::Semaphore, "sem").await, []);
    assert!(store.get(&renewed.resource).await.unwrap().is_none());
    assert_eq!(left(&store, &untouched).await, Duration::from_secs(590));
    clock.advance(Duration::from_secs(590));
    assert!(store.get(&untouched.resource).await.unwrap().is_none());
    assert_eq!(holds(&store, HoldKind::RwLock, "rw").await, []);
    store.close().await;

    // The re-bases rewrote no row (which is what keeps a restart on a million leases fast):
    // the untouched lease's row is as the first server wrote it.
    let conn = rusqlite::Connection::open(db(&dir)).unwrap();
    let row: (i64, i64) = conn
        .query_row(
            "SELECT expires_at, shift FROM leases WHERE resource = 'untouched'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(row, (i64::try_from(untouched.expires_at.as_millis()).unwrap(), 0));
}

#[tokio::test]
async fn a_clock_stepped_back_after_a_re_base_never_takes_the_store_back_nor_time_from_a_lease() {
    let dir = tempfile::tempdir().unwrap();
    let minute = ttl(Duration::from_secs(60));
    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    let first = grant(&store, "first", "a", minute).await;
    store.close().await;

    // Forward by an hour, a lease granted then; then stopped and started on a clock an hour
    // behind that.
    let forward = Arc::new(ManualClock::new(after(T0, HOUR)));
    let store = SqliteStore::open_with_clock(db(&dir), forward).unwrap();
    let second = grant(&store, "second", "a", minute).await;
    store.close().await;
    let back = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), back.clone()).unwrap();
    let third = grant(&store, "third", "a", minute).await;
    assert_eq!(
        third.acquired_at,
        after(T0, HOUR),
        "the store's time resumes from the last batch"
    );
    assert_eq!(
        store.get(&first.resource).await.unwrap(),
        Some(later(&first, HOUR))
    );
    assert_eq!(store.get(&second.resource).await.unwrap(), Some(second.clone()));
    back.advance(Duration::from_secs(30));
    let fourth = grant(&store, "fourth", "a", minute).await;
    assert_eq!(fourth.acquired_at, after(T0, HOUR + Duration::from_secs(30)));
    store.close().await;

    // Forward again, by two hours: each lease keeps what it had left at the last batch.
    let store =
        SqliteStore::open_with_clock(db(&dir), Arc::new(ManualClock::new(after(T0, 2 * HOUR)))).unwrap();
    for (lease, kept) in [(&first, 30), (&second, 30), (&third, 30), (&fourth, 60)] {
        assert_eq!(left(&store, lease).await, Duration::from_secs(kept), "{lease:?}");
    }
}

#[tokio::test]
async fn the_file_keeps_the_shifts_from_ending_leases_early() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    let lease = grant(&store, "r", "a", long()).await;
    grant_hold(&store, "rw", "a", Claim::Write, long()).await;
    store.close().await;
    // A re-base: the file's shift is now an hour, the rows' still 0.
    let store = SqliteStore::open_with_clock(db(&dir), Arc::new(ManualClock::new(after(T0, HOUR)))).unwrap();
    store.close().await;

    let conn = rusqlite::Connection::open(db(&dir)).unwrap();
    for tamper in [
        "UPDATE meta SET shift = shift - 1",
        "UPDATE leases SET shift = 3600001",
        "UPDATE holds SET shift = 3600001",
        "INSERT INTO leases (resource, owner, token, acquired_at, expires_at, shift)
         VALUES ('s', 'a', 99, 0, 0, 3600001)",
        "UPDATE leases SET shift = -1",
    ] {
        let error = conn.execute(tamper, []).unwrap_err().to_string();
        assert!(
            error.contains("shift") || error.contains("CHECK constraint failed"),
            "{tamper}: {error}"
        );
    }
    // A row shifted past the file, written around the triggers, is refused at open: it
    // would end its lease early.
    conn.execute_batch(
        "DROP TRIGGER leases_shift_is_never_ahead_on_update;
         UPDATE leases SET shift = 3600001;",
    )
    .unwrap();
    drop(conn);
    let error = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap_err();
    assert!(
        matches!(&error, StoreError::Corrupt(message) if message.contains(lease.resource.as_str())),
        "{error}"
    );
}

#[tokio::test]
async fn expired_holds_are_purged_from_the_file_and_announced() {
    let dir = tempfile::tempdir().unwrap();
    let clock = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let mut feed = store.releases().unwrap();
    let second = ttl(Duration::from_secs(1));
    let permit = grant_hold(&store, "sem", "a", PERMIT, second).await;
    let kept = grant_hold(&store, "sem", "b", PERMIT, long()).await;
    let read = grant_hold(&store, "rw", "c", Claim::Read, second).await;
    clock.advance(Duration::from_secs(2));

    let purged = store.purge_expired().await.unwrap();
    let expired = |kind, hold: &Hold| Expired {
        kind,
        lease: hold.lease.clone(),
    };
    assert_eq!(
        purged,
        [expired(Kind::Semaphore, &permit), expired(Kind::RwLock, &read)]
    );
    // Announced before the purge was answered: both names, nothing else.
    let mut announced = Vec::new();
    while let Ok(notice) = feed.try_recv() {
        announced.push(notice);
    }
    let freed = |kind, name| ReleaseNotice::Freed(Key::hold(kind, &resource(name)));
    assert_eq!(
        announced,
        [freed(HoldKind::Semaphore, "sem"), freed(HoldKind::RwLock, "rw")]
    );
    store.close().await;

    let conn = rusqlite::Connection::open(db(&dir)).unwrap();
    let mut rows = conn.prepare("SELECT owner, token FROM holds").unwrap();
    let left: Vec<(String, i64)> = rows
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(left, [("b".to_owned(), kept.lease.token.0 as i64)]);
}

#[tokio::test]
async fn hold_reads_refusals_and_intents_commit_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    let write = grant_hold(&store, "rw", "a", Claim::Write, long()).await;
    let name = &write.lease.resource;
    let before = store.stats();
    assert_eq!(before.commits, 1);
    assert_eq!(holds(&store, HoldKind::RwLock, "rw").await, vec![write.clone()]);
    let query = ListQuery {
        prefix: String::new(),
        after: None,
        limit: 10,
    };
    let page = store.list_holds(HoldKind::RwLock, &query).await.unwrap();
    assert_eq!(page.names, [(name.clone(), vec![write.clone()])]);
    let busy = |outcome: Result<HoldOutcome>| matches!(outcome.unwrap(), HoldOutcome::Busy(_));
    assert!(busy(
        store
            .acquire_hold(name, &owner("b"), Claim::Read, long(), None)
            .await
    ));
    // A waiting writer's intent lives in memory only.
    let intent = Some(ttl(Duration::from_secs(3)));
    assert!(busy(
        store
            .acquire_hold(name, &owner("c"), Claim::Write, long(), intent)
            .await
    ));
    store.withdraw_intent(name, &owner("c")).await.unwrap();
    assert_eq!(
        store
            .release_hold(HoldKind::RwLock, name, &owner("b"), None)
            .await
            .unwrap(),
        ReleaseOutcome::NotFound
    );
    let wrong = Some(FencingToken(write.lease.token.0 + 1));
    assert_eq!(
        store
            .renew_hold(HoldKind::RwLock, name, &write.lease.owner, long(), wrong)
            .await
            .unwrap(),
        RenewOutcome::Conflict
    );
    let after = store.stats();
    assert_eq!(after.commits, before.commits, "{after:?}");
    assert_eq!(after.operations, before.operations + 7);
}

#[tokio::test]
async fn the_file_keeps_holds_to_their_rules_and_the_counter_above_their_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    let held = grant_hold(&store, "sem", "a", PERMIT, long()).await;
    store.close().await;

    let conn = rusqlite::Connection::open(db(&dir)).unwrap();
    let insert = |kind: &str, claim: &str, limit: Option<i64>, token: i64| {
        conn.execute(
            "INSERT INTO holds (kind, name, owner, claim, permit_limit, token, acquired_at, expires_at)
             VALUES (?1, 'hand', 'h', ?2, ?3, ?4, 0, 0)",
            rusqlite::params![kind, claim, limit, token],
        )
    };
    for (kind, claim, limit, token) in [
        ("semaphore", "permit", None, 9),
        ("rwlock", "read", Some(2), 9),
        ("rwlock", "permit", Some(2), 9),
        ("semaphore", "read", None, 9),
        ("semaphore", "permit", Some(0), 9),
        ("semaphore", "permit", Some(2), 0),
        ("lock", "write", None, 9),
    ] {
        let error = insert(kind, claim, limit, token).unwrap_err();
        assert!(
            error.to_string().contains("CHECK constraint failed"),
            "{kind} {claim} {limit:?} {token}: {error}"
        );
    }
    // A row written behind the store's back raises the counter; deleting it lowers nothing.
    insert("rwlock", "write", None, 50).unwrap();
    conn.execute("DELETE FROM holds WHERE owner = 'h'", []).unwrap();
    let last: i64 = conn
        .query_row("SELECT last_token FROM meta", [], |row| row.get(0))
        .unwrap();
    assert_eq!(last, 50);
    drop(conn);

    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    assert_eq!(holds(&store, HoldKind::Semaphore, "sem").await, [held]);
    let next = grant_hold(&store, "hand", "i", Claim::Write, long()).await;
    assert_eq!(next.lease.token, FencingToken(51));
}

#[tokio::test]
async fn a_version_2_file_keeps_its_leases_when_migrated_to_keep_holds() {
    let dir = tempfile::tempdir().unwrap();
    let clock = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let lease = grant(&store, "lock", "a", long()).await;
    let released = grant(&store, "gone", "a", long()).await;
    store
        .release(&released.resource, &released.owner, None)
        .await
        .unwrap();
    store.close().await;
    // A file of version 2: this one without what versions 3 and 4 added.
    downgrade(&db(&dir), 2);

    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    assert_eq!(store.get(&lease.resource).await.unwrap(), Some(lease.clone()));
    let permit = grant_hold(&store, "sem", "b", PERMIT, long()).await;
    assert_eq!(permit.lease.token, FencingToken(released.token.0 + 1));
    store.close().await;
    let conn = rusqlite::Connection::open(db(&dir)).unwrap();
    assert_eq!(version(&conn), LATEST);
    drop(conn);

    let store = SqliteStore::open_with_clock(db(&dir), clock).unwrap();
    assert_eq!(store.get(&lease.resource).await.unwrap(), Some(lease));
    assert_eq!(holds(&store, HoldKind::Semaphore, "sem").await, [permit]);
}

/// The schema version of this fencelock's files.
const LATEST: i64 = 9;

/// Makes the store file at `path` one of schema version `to`, by removing what each later
/// version added, last first.
fn downgrade(path: &Path, to: i64) {
    let added = [
        // 3: the holds table (its triggers go with it).
        "DROP TABLE holds;",
        // 4: the re-base shifts (their triggers first: they name the columns).
        "DROP TRIGGER meta_shift_never_goes_back;
         DROP TRIGGER leases_shift_is_never_ahead_on_insert;
         DROP TRIGGER leases_shift_is_never_ahead_on_update;
         DROP TRIGGER holds_shift_is_never_ahead_on_insert;
         DROP TRIGGER holds_shift_is_never_ahead_on_update;
         ALTER TABLE meta DROP COLUMN shift;
         ALTER TABLE leases DROP COLUMN shift;
         ALTER TABLE holds DROP COLUMN shift;",
        // 5: the principals.
        "ALTER TABLE leases DROP COLUMN principal;
         ALTER TABLE holds DROP COLUMN principal;",
        // 6: the lease's terms.
        "ALTER TABLE leases DROP COLUMN hold_until;
         ALTER TABLE leases DROP COLUMN lock_delay;",
        // 7: the host's boot and uptime with the last time.
        "ALTER TABLE meta DROP COLUMN boot_id;
         ALTER TABLE meta DROP COLUMN since_boot;",
        // 8: the metadata of leases and holds.
        "ALTER TABLE leases DROP COLUMN meta;
         ALTER TABLE holds DROP COLUMN meta;",
        // 9: leases keyed by their resource without a rowid; before, a rowid table with a
        // unique resource (rows in the order they were first written).
        "CREATE TABLE rowid_leases (
             resource    TEXT    NOT NULL UNIQUE,
             owner       TEXT    NOT NULL,
             token       INTEGER NOT NULL CHECK (token > 0),
             acquired_at INTEGER NOT NULL,
             expires_at  INTEGER NOT NULL,
             shift       INTEGER NOT NULL DEFAULT 0 CHECK (shift >= 0),
             principal   TEXT,
             hold_until  INTEGER,
             lock_delay  INTEGER NOT NULL DEFAULT 0 CHECK (lock_delay >= 0),
             meta        TEXT
         ) STRICT;
         INSERT INTO rowid_leases SELECT * FROM leases ORDER BY token;
         DROP TABLE leases;
         ALTER TABLE rowid_leases RENAME TO leases;
         CREATE TRIGGER leases_shift_is_never_ahead_on_insert BEFORE INSERT ON leases
             WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
             BEGIN SELECT RAISE(ABORT, 'a lease row is never shifted past the store'); END;
         CREATE TRIGGER leases_shift_is_never_ahead_on_update BEFORE UPDATE OF shift ON leases
             WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
             BEGIN SELECT RAISE(ABORT, 'a lease row is never shifted past the store'); END;",
    ];
    let conn = rusqlite::Connection::open(path).unwrap();
    for version in (to + 1..=LATEST).rev() {
        conn.execute_batch(added[usize::try_from(version - 3).unwrap()])
            .unwrap();
    }
    conn.pragma_update(None, "user_version", to).unwrap();
}

/// The schema version of the file open on `conn`.
fn version(conn: &rusqlite::Connection) -> i64 {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap()
}

#[tokio::test]
async fn a_version_8_file_keeps_every_lease_and_its_terms_when_its_leases_are_re_keyed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    // Granted out of the order of their names, so that the old file's rows are too; with
    // names inline and on the heap, an election's lock, a principal, a cap, a lock-delay
    // and metadata; and a lease that has expired, which a restart keeps.
    let mut granted = Vec::new();
    for name in ["scale/10", "scale/2", "b", "A", &"é".repeat(20), "scale/1"] {
        granted.push(grant(&store, name, "a", long()).await);
    }
    let short = grant(&store, "expired", "a", ttl(Duration::from_secs(1))).await;
    let meta = Meta::parse(r#"{"host":"db-3"}"#).unwrap();
    let terms = Terms::ttl(long())
        .max_hold(Some(ttl(Duration::from_secs(3600))))
        .lock_delay(Duration::from_secs(5))
        .meta(Some(meta));
    for (resource, owner) in [
        (resource("with terms"), owner_of("b", "alice")),
        (Resource::election(&resource("leader")).unwrap(), owner("c")),
    ] {
        let Ok(AcquireOutcome::Granted { lease, .. }) =
            store.acquire_with(&resource, &owner, terms.clone()).await
        else {
            panic!("no grant of {resource:?}");
        };
        granted.push(lease);
    }
    let permit = grant_hold(&store, "sem", "a", PERMIT, long()).await;
    let gone = grant(&store, "gone", "a", long()).await;
    // The last batch is at the time of the reopen: the re-base moves no lease.
    clock.advance(Duration::from_secs(2));
    store.release(&gone.resource, &gone.owner, None).await.unwrap();
    store.close().await;
    downgrade(&db(&dir), 8);

    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let query = ListQuery {
        prefix: String::new(),
        after: None,
        limit: 100,
    };
    let listed = store.list(&query).await.unwrap().leases;
    granted.sort_by(|a, b| a.resource.cmp(&b.resource));
    assert_eq!(listed, granted, "every live lease, in the byte order of its name");
    for lease in &granted {
        assert_eq!(store.get(&lease.resource).await.unwrap().as_ref(), Some(lease));
    }
    assert_eq!(store.get(&short.resource).await.unwrap(), None);
    let purged = store.purge_expired().await.unwrap();
    let kept = Expired {
        kind: Kind::Lock,
        lease: short,
    };
    assert_eq!(purged, [kept], "the expired lease was kept, and is purged");
    assert_eq!(holds(&store, HoldKind::Semaphore, "sem").await, [permit]);
    let next = grant(&store, "next", "a", long()).await;
    assert_eq!(next.token, FencingToken(gone.token.0 + 1), "no token goes back");
    store.close().await;

    let conn = rusqlite::Connection::open(db(&dir)).unwrap();
    assert_eq!(version(&conn), LATEST);
    // The triggers came back with the new table: no row is shifted past the store.
    for ahead in [
        "UPDATE leases SET shift = shift + 1 WHERE resource = 'b'",
        "INSERT INTO leases (resource, owner, token, acquired_at, expires_at, shift)
             VALUES ('ahead', 'a', 1000, 0, 1, (SELECT shift + 1 FROM meta))",
    ] {
        let error = conn.execute(ahead, []).unwrap_err().to_string();
        assert!(
            error.contains("a lease row is never shifted past the store"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_version_7_file_keeps_its_leases_without_metadata_and_takes_some_once_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let clock = manual_clock();
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let lease = grant(&store, "lock", "a", long()).await;
    let permit = grant_hold(&store, "sem", "a", PERMIT, long()).await;
    store.close().await;
    downgrade(&db(&dir), 7);

    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    assert_eq!(store.get(&lease.resource).await.unwrap(), Some(lease.clone()));
    let holds = store
        .holds(HoldKind::Semaphore, &permit.lease.resource)
        .await
        .unwrap();
    assert_eq!(holds, std::slice::from_ref(&permit));
    let meta = Meta::parse(r#"{"host":"db-3","pid":311}"#).unwrap();
    let renewed = store
        .renew_with(&lease.resource, &lease.owner, long(), None, Some(&meta))
        .await
        .unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed(ref l) if l.meta.as_ref() == Some(&meta)));
    store.close().await;
    let store = SqliteStore::open_with_clock(db(&dir), clock).unwrap();
    let kept = store.get(&lease.resource).await.unwrap().expect("kept");
    assert_eq!(kept.meta, Some(meta));
    store.close().await;
}

#[tokio::test]
async fn a_version_3_file_is_re_based_like_any_other_once_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    let lease = grant(&store, "lock", "a", long()).await;
    let write = grant_hold(&store, "rw", "a", Claim::Write, long()).await;
    store.close().await;
    downgrade(&db(&dir), 3);

    // Started an hour later, then two: the leases and holds of the old file lose no time.
    let clock = Arc::new(ManualClock::new(after(T0, HOUR)));
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    assert_eq!(
        store.get(&lease.resource).await.unwrap(),
        Some(later(&lease, HOUR))
    );
    assert_eq!(
        holds(&store, HoldKind::RwLock, "rw").await,
        [later_hold(&write, HOUR)]
    );
    store.close().await;
    clock.advance(HOUR);
    let store = SqliteStore::open_with_clock(db(&dir), clock).unwrap();
    assert_eq!(left(&store, &lease).await, Duration::from_secs(600));
    assert_eq!(
        holds(&store, HoldKind::RwLock, "rw").await,
        [later_hold(&write, 2 * HOUR)]
    );
}

// ---- One server per file ----

const IN_USE: &str = "in use by another fencelock server";
const USE_SHARED: &str = "use PostgreSQL or etcd";

#[tokio::test]
async fn a_second_open_of_the_same_file_fails_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let first = SqliteStore::open(db(&dir)).unwrap();
    let lease = grant(&first, "r", "a", long()).await;

    let error = SqliteStore::open(db(&dir)).unwrap_err().to_string();
    assert!(error.contains(IN_USE) && error.contains(USE_SHARED), "{error}");
    let address = format!("sqlite://{}", db(&dir).display());
    let error = fencelock_stores::open(&address).await.unwrap_err().to_string();
    assert!(error.contains(IN_USE) && error.contains(USE_SHARED), "{error}");

    // The refused opener changed nothing for the server that has the file.
    assert_eq!(first.get(&lease.resource).await.unwrap(), Some(lease.clone()));
    assert!(matches!(
        first.release(&lease.resource, &lease.owner, None).await.unwrap(),
        ReleaseOutcome::Released(_)
    ));
    first.close().await;
    SqliteStore::open(db(&dir)).unwrap().ping().await.unwrap();
}

/// Set by the test below for the copy of this test binary it starts.
const CHILD_OPENS: &str = "FENCELOCK_TEST_CHILD_OPENS";

/// Not a test of its own: the body of the other process in the test below (it does nothing
/// unless that test started it).
#[test]
fn child_process_opens_the_store() {
    let Ok(path) = std::env::var(CHILD_OPENS) else {
        return;
    };
    match SqliteStore::open(&path) {
        Ok(_) => println!("CHILD OPENED {path}"),
        Err(error) => println!("CHILD REFUSED: {error}"),
    }
}

#[tokio::test]
async fn a_second_process_cannot_open_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(&dir)).unwrap();
    let lease = grant(&store, "r", "a", long()).await;

    let child = child_opens(&db(&dir)).await;
    assert!(
        child.contains("CHILD REFUSED: ") && child.contains(IN_USE) && child.contains(USE_SHARED),
        "{child}"
    );
    assert_eq!(store.get(&lease.resource).await.unwrap(), Some(lease));

    // Once this server closes the file, another process may have it.
    store.close().await;
    let child = child_opens(&db(&dir)).await;
    assert!(child.contains("CHILD OPENED"), "{child}");
}

/// Runs `child_process_opens_the_store` in another process; returns what it printed.
async fn child_opens(path: &Path) -> String {
    let output = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_opens_the_store",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_OPENS, path)
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "child failed: {printed}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    printed
}

#[tokio::test]
async fn a_file_of_an_unknown_schema_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    SqliteStore::open(db(&dir)).unwrap().close().await;
    let conn = rusqlite::Connection::open(db(&dir)).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let error = SqliteStore::open(db(&dir)).unwrap_err();
    assert!(matches!(error, StoreError::Corrupt(_)), "{error}");
    assert!(error.to_string().contains("schema version 99"), "{error}");
}

// ---- Group commit ----

/// A clock that, once armed, holds the batch that reads it — on the writer thread or on its
/// caller's — until the test opens the gate, so that a test can line up calls behind it. Its
/// time stands still.
#[derive(Debug, Default)]
struct GateClock {
    gate: Mutex<Gate>,
    opened: Condvar,
}

#[derive(Debug, Default)]
struct Gate {
    /// Unarmed, it holds nothing: opening the store reads the clock too.
    armed: bool,
    open: bool,
    holding: bool,
    /// The threads that read it while armed, in order, each named once in a row.
    readers: Vec<String>,
}

impl GateClock {
    fn arm(&self) {
        self.gate.lock().unwrap().armed = true;
    }

    fn holding(&self) -> bool {
        self.gate.lock().unwrap().holding
    }

    fn readers(&self) -> Vec<String> {
        self.gate.lock().unwrap().readers.clone()
    }

    fn open(&self) {
        self.gate.lock().unwrap().open = true;
        self.opened.notify_all();
    }
}

impl Clock for GateClock {
    fn now(&self) -> Timestamp {
        let mut gate = self.gate.lock().unwrap();
        if !gate.armed {
            return T0;
        }
        let reader = std::thread::current().name().unwrap_or("unnamed").to_owned();
        if gate.readers.last() != Some(&reader) {
            gate.readers.push(reader);
        }
        gate.holding = !gate.open;
        while !gate.open {
            gate = self.opened.wait(gate).unwrap();
        }
        gate.holding = false;
        T0
    }

    fn uptime(&self) -> Option<fencelock_core::Uptime> {
        None
    }
}

type Call<T> = tokio::task::JoinHandle<Result<T>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_caller_went_away_is_still_announced() {
    let dir = tempfile::tempdir().unwrap();
    let (store, gate, first) = held_writer(&db(&dir), "r", "a").await;
    let mut feed = store.releases().unwrap();
    // Queued behind the held batch; then the caller goes away (its future is dropped).
    let (r, a) = (resource("r"), owner("a"));
    let release = store.release(&r, &a, None);
    assert!(
        tokio::time::timeout(Duration::ZERO, release).await.is_err(),
        "still queued"
    );
    gate.open();
    assert!(matches!(
        first.await.unwrap().unwrap(),
        AcquireOutcome::Granted { .. }
    ));
    let notice = tokio::time::timeout(Duration::from_secs(10), feed.recv()).await;
    assert_eq!(
        notice.expect("announced").unwrap(),
        fencelock_core::ReleaseNotice::Freed(fencelock_core::Key::lock(&resource("r")))
    );
    assert_eq!(store.get(&resource("r")).await.unwrap(), None);
}

/// Starts an acquire of `name` by `who` in a task of its own.
fn spawn_acquire(store: &Arc<SqliteStore>, name: &str, who: &str) -> Call<AcquireOutcome> {
    let (store, r, o) = (store.clone(), resource(name), owner(who));
    tokio::spawn(async move { store.acquire(&r, &o, long()).await })
}

/// Opens a store on a closed gate and starts an acquire of `name` by `who`, holding the
/// writer inside the batch of that one call; the test then queues more calls behind it.
async fn held_writer(
    path: &Path,
    name: &str,
    who: &str,
) -> (Arc<SqliteStore>, Arc<GateClock>, Call<AcquireOutcome>) {
    let gate = Arc::new(GateClock::default());
    let store = Arc::new(SqliteStore::open_with_clock(path, gate.clone()).unwrap());
    gate.arm();
    let first = spawn_acquire(&store, name, who);
    until("the writer is held in its first batch", || gate.holding()).await;
    (store, gate, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_queued_behind_a_busy_writer_share_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (store, gate, first) = held_writer(&db(&dir), "r0", "w0").await;
    let rest: Vec<_> = (1..200)
        .map(|i| spawn_acquire(&store, &format!("r{i}"), &format!("w{i}")))
        .collect();
    until("199 calls are queued", || store.queued() == 199).await;
    gate.open();

    let mut tokens = Vec::new();
    for call in std::iter::once(first).chain(rest) {
        match call.await.unwrap().unwrap() {
            AcquireOutcome::Granted { lease, .. } => tokens.push(lease.token.0),
            outcome => panic!("expected a grant, got {outcome:?}"),
        }
    }
    tokens.sort(); // the calls reached the queue in whatever order the runtime ran them
    assert_eq!(tokens, (1..=200).collect::<Vec<_>>());
    let stats = store.stats();
    assert_eq!(
        (stats.operations, stats.batches, stats.commits),
        (200, 2, 2),
        "{stats:?}"
    );
}

/// A call that finds nothing queued and the writer free is run at once by its caller's own
/// thread (no thread to cross, none back); a call that finds the writer busy waits in the
/// queue for the writer thread — and every one is answered once durable either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_an_idle_writer_runs_on_its_callers_thread_and_one_behind_a_busy_writer_on_the_writer_thread()
 {
    let dir = tempfile::tempdir().unwrap();
    let (store, gate, first) = held_writer(&db(&dir), "r0", "w0").await;
    let second = spawn_acquire(&store, "r1", "w1");
    until("the second call is queued", || store.queued() == 1).await;
    gate.open();
    for call in [first, second] {
        assert!(matches!(
            call.await.unwrap().unwrap(),
            AcquireOutcome::Granted { .. }
        ));
    }
    // The first batch was read by the worker its task ran on, the second by the writer thread.
    let readers = gate.readers();
    assert_eq!(readers.len(), 2, "{readers:?}");
    assert_ne!(readers[0], "fencelock-sqlite");
    assert_eq!(readers[1], "fencelock-sqlite");

    // Idle again: this one runs on the test's own thread.
    let third = store
        .acquire(&resource("r2"), &owner("w2"), long())
        .await
        .unwrap();
    assert!(matches!(third, AcquireOutcome::Granted { .. }), "{third:?}");
    let here = std::thread::current().name().unwrap().to_owned();
    assert_eq!(gate.readers().last(), Some(&here));
    drop(store);
    let reopened = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    for name in ["r0", "r1", "r2"] {
        assert!(reopened.get(&resource(name)).await.unwrap().is_some(), "{name}");
    }
}

/// A clock that panics once armed, on any thread or only on the writer thread: a defect
/// inside a batch.
#[derive(Debug, Default)]
struct PanickingClock {
    armed: std::sync::atomic::AtomicBool,
    only_on_the_writer_thread: bool,
}

impl PanickingClock {
    fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for PanickingClock {
    fn now(&self) -> Timestamp {
        let here =
            !self.only_on_the_writer_thread || std::thread::current().name() == Some("fencelock-sqlite");
        assert!(
            !(here && self.armed.load(std::sync::atomic::Ordering::SeqCst)),
            "a defect inside a batch"
        );
        T0
    }

    fn uptime(&self) -> Option<fencelock_core::Uptime> {
        None
    }
}

/// After a batch panicked, wherever it ran: its call and every later one are told the store
/// is unavailable (none waits for ever, and nobody's task panics), closing returns, the file
/// is free for the next opener and keeps nothing of the batch.
async fn assert_stopped_by_the_panic(dir: &TempDir, store: &SqliteStore, answer: Result<()>, kept: Lease) {
    assert!(is_unavailable(&answer), "{answer:?}");
    let late = store.acquire(&resource("late"), &owner("c"), long()).await;
    assert!(is_unavailable(&late), "{late:?}");
    assert!(is_unavailable(&store.ping().await));
    tokio::time::timeout(Duration::from_secs(10), store.close())
        .await
        .expect("close returns");
    let reopened = SqliteStore::open_with_clock(db(dir), manual_clock()).unwrap();
    assert_eq!(reopened.get(&kept.resource).await.unwrap(), Some(kept));
    for name in ["lost", "late"] {
        assert_eq!(reopened.get(&resource(name)).await.unwrap(), None, "{name}");
    }
}

/// A batch of one that panics half-way on its caller's thread (the writer was idle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_panics_on_its_callers_thread_stops_the_store_and_no_call_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(PanickingClock::default());
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let kept = grant(&store, "kept", "a", long()).await;
    clock.arm();
    let lost = store
        .acquire(&resource("lost"), &owner("b"), long())
        .await
        .map(drop);
    assert_stopped_by_the_panic(&dir, &store, lost, kept).await;
}

/// A batch that panics half-way on the writer thread (a purge always goes there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_panics_on_the_writer_thread_stops_the_store_and_no_call_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(PanickingClock {
        only_on_the_writer_thread: true,
        ..PanickingClock::default()
    });
    let store = SqliteStore::open_with_clock(db(&dir), clock.clone()).unwrap();
    let kept = grant(&store, "kept", "a", long()).await;
    clock.arm();
    let purge = store.purge_expired().await.map(drop);
    assert_stopped_by_the_panic(&dir, &store, purge, kept).await;
}

/// `n` acquires of names of their own, all at once, each then renewed and released; returns
/// the store's figures once every one was answered.
async fn concurrent_callers(store: &Arc<SqliteStore>, n: usize) -> fencelock_stores::sqlite::WriterStats {
    let callers: Vec<_> = (0..n)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let (r, o) = (resource(&format!("r{i}")), owner(&format!("w{i}")));
                let AcquireOutcome::Granted { lease, .. } = store.acquire(&r, &o, long()).await.unwrap()
                else {
                    panic!("nobody else wants {r}");
                };
                let renewed = store.renew(&r, &o, long(), Some(lease.token)).await.unwrap();
                assert!(matches!(renewed, RenewOutcome::Renewed(_)), "{renewed:?}");
                let released = store.release(&r, &o, Some(lease.token)).await.unwrap();
                assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
                lease.token
            })
        })
        .collect();
    let mut tokens = Vec::new();
    for caller in callers {
        tokens.push(caller.await.unwrap());
    }
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), n, "every grant got a token of its own");
    store.stats()
}

/// On a runtime of one thread, a caller never holds it for a batch: nobody would be left to
/// queue the other calls, and every call would commit alone.
#[tokio::test]
async fn callers_on_a_runtime_of_one_thread_still_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(db(&dir)).unwrap());
    let stats = concurrent_callers(&store, 200).await;
    assert_eq!(stats.operations, 600);
    // Three waves of 200 calls (acquire, renew, release): a few commits each, not 600.
    assert!(stats.commits < 60, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_callers_are_all_answered_and_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(db(&dir)).unwrap());
    let stats = concurrent_callers(&store, 200).await;
    assert_eq!(stats.operations, 600);
    assert!(
        stats.commits < stats.operations,
        "no commit was shared: {stats:?}"
    );
    println!(
        "group commit: {} operations in {} batches, {} commits ({:.3} commits per operation)",
        stats.operations,
        stats.batches,
        stats.commits,
        stats.commits as f64 / stats.operations as f64
    );
}

#[tokio::test]
async fn reads_commit_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    let lease = grant(&store, "r", "a", long()).await;
    let before = store.stats();
    assert_eq!(before.commits, 1);
    store.get(&lease.resource).await.unwrap();
    store.ping().await.unwrap();
    let query = ListQuery {
        prefix: String::new(),
        after: None,
        limit: 10,
    };
    assert_eq!(store.list(&query).await.unwrap().leases, vec![lease.clone()]);
    // Refusals change nothing either.
    store.acquire(&lease.resource, &owner("b"), long()).await.unwrap();
    store.release(&lease.resource, &owner("b"), None).await.unwrap();
    assert_eq!(store.purge_expired().await.unwrap(), vec![]);
    let after = store.stats();
    assert_eq!(after.commits, before.commits, "{after:?}");
    assert_eq!(after.operations, before.operations + 6);
}

// ---- Failure and shutdown ----

/// A batch whose transaction fails is undone whole: every caller in it is told the store is
/// unavailable, and nothing of it — leases or tokens — is seen afterwards, before or after a
/// restart. The failure is real: a trigger planted in the file makes SQLite abort the write
/// of one resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_answers_the_whole_batch_unavailable_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    let kept = grant(&store, "kept", "a", long()).await;
    store.close().await;
    rusqlite::Connection::open(db(&dir))
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER poison BEFORE INSERT ON leases WHEN NEW.resource = 'poison'
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
        )
        .unwrap();

    let (store, gate, first) = held_writer(&db(&dir), "first", "a").await;
    let (s1, s2, k) = (store.clone(), store.clone(), kept.clone());
    let batch: Vec<Call<()>> = vec![
        tokio::spawn(async move { s1.release(&k.resource, &k.owner, None).await.map(drop) }),
        spawn_map(spawn_acquire(&store, "fine", "b")),
        spawn_map(spawn_acquire(&store, "poison", "c")),
        tokio::spawn(async move { s2.get(&resource("kept")).await.map(drop) }),
    ];
    until("the batch is queued", || store.queued() == 4).await;
    gate.open();

    let first = match first.await.unwrap().unwrap() {
        AcquireOutcome::Granted { lease, .. } => lease,
        outcome => panic!("the batch before the failure stands, got {outcome:?}"),
    };
    for call in batch {
        let answer = call.await.unwrap();
        assert!(is_unavailable(&answer), "{answer:?}");
    }
    assert_eq!(store.stats().failed_commits, 1);

    assert_no_trace_of_the_failed_batch(&store, &kept, &first).await;
    assert_eq!(store.get(&resource("fine")).await.unwrap(), None);
    // The tokens the failed batch drew were taken back with it: nobody ever held them.
    let next = grant(&store, "fine", "b", long()).await;
    assert_eq!(next.token, FencingToken(first.token.0 + 1));

    drop(store);
    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    assert_no_trace_of_the_failed_batch(&store, &kept, &first).await;
    assert_eq!(store.get(&next.resource).await.unwrap(), Some(next.clone()));
    assert!(grant(&store, "new", "d", long()).await.token > next.token);
}

/// The answer of `call`, whatever it was, reduced to success or failure.
fn spawn_map<T: Send + 'static>(call: Call<T>) -> Call<()> {
    tokio::spawn(async move { call.await.unwrap().map(drop) })
}

/// The leases before the failed batch are as they were; its grants are nowhere.
async fn assert_no_trace_of_the_failed_batch(store: &SqliteStore, kept: &Lease, first: &Lease) {
    assert_eq!(
        store.get(&kept.resource).await.unwrap().as_ref(),
        Some(kept),
        "release undone"
    );
    assert_eq!(store.get(&first.resource).await.unwrap().as_ref(), Some(first));
    assert_eq!(store.get(&resource("poison")).await.unwrap(), None);
}

/// As for leases: a batch of hold operations whose transaction fails is answered unavailable
/// whole, and none of its holds, releases or tokens is seen afterwards, before or after a
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_leaves_no_hold_behind_and_answers_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    let kept = grant_hold(&store, "kept", "a", Claim::Read, long()).await;
    store.close().await;
    rusqlite::Connection::open(db(&dir))
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER poison BEFORE INSERT ON holds WHEN NEW.name = 'poison'
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
        )
        .unwrap();

    let (store, gate, first) = held_writer(&db(&dir), "first", "a").await;
    let spawn_hold = |name: &str, who: &str, claim: Claim| -> Call<()> {
        let (store, name, who) = (store.clone(), resource(name), owner(who));
        tokio::spawn(async move {
            store
                .acquire_hold(&name, &who, claim, long(), None)
                .await
                .map(drop)
        })
    };
    let batch: Vec<Call<()>> = vec![
        {
            let (store, k) = (store.clone(), kept.lease.clone());
            tokio::spawn(async move {
                store
                    .release_hold(HoldKind::RwLock, &k.resource, &k.owner, None)
                    .await
                    .map(drop)
            })
        },
        spawn_hold("fine", "b", PERMIT),
        spawn_hold("kept", "d", Claim::Read),
        spawn_hold("poison", "c", Claim::Write),
        {
            let store = store.clone();
            tokio::spawn(async move { store.holds(HoldKind::RwLock, &resource("kept")).await.map(drop) })
        },
    ];
    until("the batch is queued", || store.queued() == 5).await;
    gate.open();

    let first = match first.await.unwrap().unwrap() {
        AcquireOutcome::Granted { lease, .. } => lease,
        outcome => panic!("the batch before the failure stands, got {outcome:?}"),
    };
    for call in batch {
        let answer = call.await.unwrap();
        assert!(is_unavailable(&answer), "{answer:?}");
    }
    assert_eq!(store.stats().failed_commits, 1);

    assert_no_hold_of_the_failed_batch(&store, &kept).await;
    assert_eq!(holds(&store, HoldKind::Semaphore, "fine").await, []);
    // The tokens the failed batch drew were taken back with it: nobody ever held them.
    let next = grant_hold(&store, "fine", "b", PERMIT, long()).await;
    assert_eq!(next.lease.token, FencingToken(first.token.0 + 1));

    drop(store);
    let store = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    assert_no_hold_of_the_failed_batch(&store, &kept).await;
    assert_eq!(
        holds(&store, HoldKind::Semaphore, "fine").await,
        vec![next.clone()]
    );
    assert!(grant(&store, "new", "e", long()).await.token > next.lease.token);
}

/// The read hold from before the failed batch is as it was, alone on its name; no other
/// read-write lock is held.
async fn assert_no_hold_of_the_failed_batch(store: &SqliteStore, kept: &Hold) {
    let query = ListQuery {
        prefix: String::new(),
        after: None,
        limit: 10,
    };
    let page = store.list_holds(HoldKind::RwLock, &query).await.unwrap();
    assert_eq!(
        page.names,
        [(kept.lease.resource.clone(), vec![kept.clone()])],
        "release and second reader undone, poison never written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_answers_what_is_queued_then_refuses_new_calls() {
    let dir = tempfile::tempdir().unwrap();
    let (store, gate, first) = held_writer(&db(&dir), "first", "a").await;
    let queued = spawn_acquire(&store, "queued", "b");
    until("a call is queued", || store.queued() == 1).await;
    let closing = {
        let store = store.clone();
        tokio::spawn(async move { store.close().await })
    };
    until("close is queued", || store.queued() == 2).await;
    gate.open();

    assert!(matches!(
        first.await.unwrap().unwrap(),
        AcquireOutcome::Granted { .. }
    ));
    assert!(matches!(
        queued.await.unwrap().unwrap(),
        AcquireOutcome::Granted { .. }
    ));
    closing.await.unwrap();
    let late = store.acquire(&resource("late"), &owner("c"), long()).await;
    assert!(is_unavailable(&late), "{late:?}");
    assert!(is_unavailable(&store.ping().await));
    store.close().await; // closing twice is fine

    // The file is free, and holds what was answered before the close.
    let reopened = SqliteStore::open_with_clock(db(&dir), manual_clock()).unwrap();
    for name in ["first", "queued"] {
        assert!(reopened.get(&resource(name)).await.unwrap().is_some(), "{name}");
    }
    assert_eq!(reopened.get(&resource("late")).await.unwrap(), None);
}
