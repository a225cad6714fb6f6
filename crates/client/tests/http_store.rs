//! `HttpStore` against a real server: the terms it sends (a cap, never a lock-delay: the
//! server's own applies), several locks in one `POST /locks` read back as the store's outcome,
//! a 409 `deadlock` read back as `StoreError::Deadlock` on every kind of acquire, and a 404
//! `no-route` read as an error, never as "no lease".

mod common;

use std::time::Duration;

use common::{TestServer, eventually, owner, resource, ttl};
use fencelock_client::HttpStore;
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Claim, HoldKind, HoldOutcome, Key, LockStore, Resources, StoreError,
    Terms, Ttl,
};
use fencelock_server::Config;

const WAIT: Duration = Duration::from_secs(20);

fn names(names: &[&str]) -> Resources {
    Resources::new(names.iter().map(|n| resource(n)).collect()).unwrap()
}

#[tokio::test]
async fn the_cap_travels_and_the_lock_delay_is_the_servers() {
    let server = TestServer::with_config(Config {
        lock_delay: Duration::from_millis(300),
        ..Config::default()
    });
    let store = HttpStore::new(&server.url).unwrap();
    let cap = Ttl::from_millis(5_000, Ttl::CEILING).unwrap();
    // A client's own lock-delay is not sent: the server applies --lock-delay.
    let terms = Terms::ttl(ttl(60_000))
        .max_hold(Some(cap))
        .lock_delay(Duration::from_secs(3_600));
    let granted = store
        .acquire_waiting(&resource("r"), &owner("w"), terms.clone(), Duration::ZERO)
        .await
        .unwrap();
    let lease = granted.lease().expect("granted").clone();
    assert_eq!(lease.hold_until, Some(lease.acquired_at.plus(cap)));
    assert_eq!(lease.expires_at, lease.acquired_at.plus(cap), "cut at the cap");
    let kept = server.store.get(&resource("r")).await.unwrap().unwrap();
    assert_eq!(kept.lock_delay, Duration::from_millis(300));
    assert_eq!(kept.hold_until, lease.hold_until);

    let all = store
        .acquire_all_waiting(&names(&["a", "b"]), &owner("w"), terms.clone(), Duration::ZERO)
        .await
        .unwrap();
    let AcquireAllOutcome::Granted(granted) = all else {
        panic!("expected a grant: {all:?}");
    };
    for outcome in &granted {
        let lease = outcome.lease().unwrap();
        assert_eq!(lease.hold_until, Some(lease.acquired_at.plus(cap)), "{lease:?}");
    }
}

#[tokio::test]
async fn several_locks_are_one_request_and_read_back_as_the_stores_outcome() {
    let server = TestServer::start();
    let store = HttpStore::new(&server.url).unwrap();
    let terms = Terms::ttl(ttl(60_000));
    let held = store
        .acquire(&resource("b"), &owner("other"), ttl(60_000))
        .await
        .unwrap();
    let holder = held.lease().unwrap().clone();
    let refused = store
        .acquire_all(&names(&["a", "b"]), &owner("w"), terms.clone())
        .await
        .unwrap();
    let AcquireAllOutcome::Refused(refusals) = &refused else {
        panic!("expected a refusal: {refused:?}");
    };
    assert!(
        matches!(&refusals[..], [AcquireOutcome::Held { holder: h, .. }] if *h == holder),
        "{refusals:?}"
    );
    assert_eq!(
        server.store.get(&resource("a")).await.unwrap(),
        None,
        "nothing acquired"
    );

    store
        .release(&resource("b"), &owner("other"), Some(holder.token))
        .await
        .unwrap();
    store
        .acquire(&resource("a"), &owner("w"), ttl(60_000))
        .await
        .unwrap();
    let all = store
        .acquire_all(&names(&["b", "a"]), &owner("w"), terms.clone())
        .await
        .unwrap();
    let AcquireAllOutcome::Granted(granted) = all else {
        panic!("expected a grant: {all:?}");
    };
    assert!(
        matches!(&granted[..], [AcquireOutcome::Granted { lease: b, .. }, AcquireOutcome::Extended(a)]
            if b.resource == resource("b") && a.resource == resource("a") && b.token > holder.token),
        "in the order asked, the held one extended: {granted:?}"
    );
}

/// Waits until the server at `url` has `n` acquires waiting.
async fn until_waiters(url: &str, n: u64) {
    let metrics = format!("{url}/metrics");
    eventually(Duration::from_secs(10), "the waiter in line", async || {
        let text = reqwest::get(&metrics).await.ok()?.text().await.ok()?;
        text.lines()
            .any(|line| line == format!("fencelock_waiters {n}"))
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_deadlock_is_store_error_deadlock_with_the_cycle_on_every_acquire() {
    let server = TestServer::start();
    let store = std::sync::Arc::new(HttpStore::new(&server.url).unwrap());
    let terms = Terms::ttl(ttl(60_000));
    let (a, b) = (owner("a"), owner("b"));
    store.acquire(&resource("x"), &a, ttl(60_000)).await.unwrap();
    let permit = Claim::Permit { limit: 1 };
    store
        .acquire_hold(&resource("s"), &b, permit, ttl(60_000), None)
        .await
        .unwrap();
    // b waits for x, which a holds; every wait of a for what b holds closes the cycle.
    let waiting = {
        let (store, b, terms) = (store.clone(), b.clone(), terms.clone());
        tokio::spawn(async move { store.acquire_waiting(&resource("x"), &b, terms, WAIT).await })
    };
    until_waiters(&server.url, 1).await;
    let cycle = |error: StoreError| match error {
        StoreError::Deadlock(cycle) => cycle.to_string(),
        other => panic!("expected a deadlock, got {other:?}"),
    };
    let hold = store
        .acquire_hold_waiting(&resource("s"), &a, permit, ttl(60_000), None, WAIT)
        .await;
    let told = cycle(hold.unwrap_err());
    assert_eq!(
        told,
        r#"a waits for semaphore "s" held by b; b waits for lock "x" held by a"#
    );
    store.acquire(&resource("y"), &b, ttl(60_000)).await.unwrap();
    let one = store
        .acquire_waiting(&resource("y"), &a, terms.clone(), WAIT)
        .await;
    assert!(cycle(one.unwrap_err()).contains(r#"a waits for lock "y" held by b"#));
    let all = store
        .acquire_all_waiting(&names(&["q", "y"]), &a, terms.clone(), WAIT)
        .await;
    assert!(cycle(all.unwrap_err()).contains(r#"a waits for lock "y" held by b"#));

    store.release(&resource("x"), &a, None).await.unwrap();
    let granted = waiting.await.unwrap().unwrap();
    assert!(granted.lease().is_some(), "{granted:?}");
    let free = store
        .acquire_hold(&resource("s"), &a, permit, ttl(60_000), None)
        .await
        .unwrap();
    assert!(matches!(free, HoldOutcome::Busy(_)), "b still holds s: {free:?}");
    assert_eq!(
        store.holds(HoldKind::Semaphore, &resource("s")).await.unwrap()[0]
            .lease
            .owner,
        b
    );
}

/// A server reached under a path it does not serve (a proxy's prefix that is not there)
/// answers every call 404 `no-route`: no answer about the name, so every call is an error
/// that says so — not "no lease", "no holds" or "nothing to release".
#[tokio::test]
async fn a_404_no_route_is_an_error_and_never_no_lease() {
    let server = TestServer::start();
    let store = HttpStore::new(&format!("{}/no-such-prefix", server.url)).unwrap();
    let (name, who, kind) = (resource("r"), owner("w"), HoldKind::Semaphore);
    let minute = ttl(60_000);
    no_route("get", store.get(&name).await);
    no_route("holds", store.holds(kind, &name).await);
    no_route(
        "force_release",
        store.force_release(&Key::hold(kind, &name)).await,
    );
    no_route("release", store.release(&name, &who, None).await);
    no_route("renew", store.renew(&name, &who, minute, None).await);
    no_route("release_hold", store.release_hold(kind, &name, &who, None).await);
    no_route(
        "renew_hold",
        store.renew_hold(kind, &name, &who, minute, None).await,
    );
}

/// `result` is the error of a path the server does not serve.
fn no_route<T: std::fmt::Debug>(call: &str, result: Result<T, StoreError>) {
    match result {
        Err(error) => assert!(
            error.to_string().contains("no such route: /no-such-prefix/"),
            "{call}: {error}"
        ),
        Ok(answer) => panic!("{call}: answered as an outcome of the name: {answer:?}"),
    }
}
