//! `GET /metrics`: each series moves when the request that must move it is made, and no
//! series names a resource or an owner.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestServer, series_value as value, unreachable_store};
use fencelock_core::{ManualClock, MemoryStore, Timestamp};
use fencelock_server::Config;
use reqwest::{Method, StatusCode};
use serde_json::json;

/// Asserts that each series in `expected` reads its value in `text`.
fn assert_reads(text: &str, expected: &[(&str, f64)]) {
    for &(series, want) in expected {
        assert_eq!(value(text, series), want, "{series}\n{text}");
    }
}

async fn read(s: &TestServer, series: &str) -> f64 {
    value(&s.metrics().await, series)
}

/// A server on an in-memory store on a manual clock, purging every `purge`.
async fn manual_purging_every(purge: Duration) -> TestServer {
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_795_933_800_000)));
    let config = Config {
        purge_interval: purge,
        ..Config::default()
    };
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let mut s = TestServer::start(store, config).await;
    s.clock = Some(clock);
    s
}

#[tokio::test]
async fn acquisition_time_is_counted_by_outcome() {
    let s = TestServer::manual().await;
    s.grant("r", "a", 10).await;
    s.grant("r", "a", 10).await;
    s.acquire("r", json!({"owner": "b", "ttl_seconds": 10})).await;
    let text = s.metrics().await;
    for outcome in ["granted", "extended", "held"] {
        let series = format!(
            r#"fencelock_request_duration_seconds_count{{kind="lock",op="acquire",outcome="{outcome}"}}"#
        );
        assert_eq!(value(&text, &series), 1.0, "{series}\n{text}");
    }
    assert_reads(
        &text,
        &[(r#"fencelock_store_duration_seconds_count{op="acquire"}"#, 3.0)],
    );
}

#[tokio::test]
async fn live_leases_and_the_highest_token_follow_grants_and_ends() {
    let s = TestServer::manual().await;
    let first = s.grant("r1", "a", 10).await;
    let second = s.grant("r2", "a", 10).await;
    assert!(second["fencing_token"].as_u64() > first["fencing_token"].as_u64());
    let text = s.metrics().await;
    assert_reads(&text, &[("fencelock_live_leases", 2.0)]);
    assert_eq!(
        value(&text, "fencelock_highest_token"),
        second["fencing_token"].as_f64().unwrap(),
        "{text}"
    );
    // An extension is no new lease.
    s.grant("r1", "a", 10).await;
    assert_eq!(read(&s, "fencelock_live_leases").await, 2.0);
    let released = s.release("r1", json!({"owner": "a"})).await;
    assert_eq!(released.status, StatusCode::NO_CONTENT);
    assert_eq!(read(&s, "fencelock_live_leases").await, 1.0);
    assert_eq!(
        read(&s, "fencelock_highest_token").await,
        second["fencing_token"].as_f64().unwrap(),
        "a release lowers no token"
    );
}

#[tokio::test]
async fn contention_counts_refusals_at_once_and_waits() {
    let s = TestServer::manual().await;
    s.grant("r", "a", 60).await;
    let held = s.acquire("r", json!({"owner": "b", "ttl_seconds": 5})).await;
    assert_eq!(held.body["acquired"], false);
    let text = s.metrics().await;
    assert_reads(
        &text,
        &[
            (r#"fencelock_contention_total{kind="held"}"#, 1.0),
            (r#"fencelock_contention_total{kind="waited"}"#, 0.0),
        ],
    );

    // A waiter that is handed the lock when the holder releases.
    let waiting = {
        let (base, client) = (s.base.clone(), s.client.clone());
        tokio::spawn(async move {
            let body = json!({"owner": "c", "ttl_seconds": 5, "wait_ms": 10_000});
            let answer = client
                .post(format!("{base}/locks/r"))
                .json(&body)
                .send()
                .await
                .unwrap();
            answer.json::<serde_json::Value>().await.unwrap()
        })
    };
    s.until_waiters(1).await;
    // Its first try (after a's grant and b's) found the lock held: it waits.
    s.until_series(r#"fencelock_store_duration_seconds_count{op="acquire"}"#, 3.0)
        .await;
    assert_eq!(
        s.release("r", json!({"owner": "a"})).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(waiting.await.unwrap()["acquired"], true);
    let text = s.metrics().await;
    assert_reads(
        &text,
        &[
            (r#"fencelock_contention_total{kind="waited"}"#, 1.0),
            (r#"fencelock_contention_total{kind="held"}"#, 1.0),
        ],
    );
    assert_eq!(
        value(&text, r#"fencelock_timeouts_total{kind="wait_expired"}"#),
        0.0,
        "a wait that got the lock did not run out: {text}"
    );
}

#[tokio::test]
async fn a_wait_that_runs_out_is_a_timeout() {
    // The manual clock never moves, so the holder's lease outlasts the wait.
    let s = TestServer::manual().await;
    s.grant("r", "a", 60).await;
    let answer = s
        .acquire("r", json!({"owner": "b", "ttl_seconds": 5, "wait_ms": 20}))
        .await;
    assert_eq!(answer.body["acquired"], false, "{answer:?}");
    let text = s.metrics().await;
    assert_reads(
        &text,
        &[
            (r#"fencelock_timeouts_total{kind="wait_expired"}"#, 1.0),
            (r#"fencelock_contention_total{kind="waited"}"#, 1.0),
            (r#"fencelock_contention_total{kind="held"}"#, 0.0),
            (r#"fencelock_timeouts_total{kind="lease_expired"}"#, 0.0),
        ],
    );
}

#[tokio::test]
async fn several_locks_count_as_leases_and_a_lock_delay_that_outlasts_a_wait_is_a_timeout() {
    let s = TestServer::manual_with(Config {
        lock_delay: Duration::from_secs(60),
        ..Config::default()
    })
    .await;
    let all = s
        .acquire_all(json!({"owner": "a", "resources": ["x", "y"], "ttl_seconds": 1}))
        .await;
    assert_eq!(all.body["acquired"], true, "{all:?}");
    assert_reads(
        &s.metrics().await,
        &[
            ("fencelock_live_leases", 2.0),
            ("fencelock_highest_token", 2.0),
            (
                r#"fencelock_requests_total{kind="lock",op="acquire_all",outcome="granted"}"#,
                1.0,
            ),
        ],
    );
    // Left to expire: both stay closed for the delay, longer than b waits.
    s.advance(Duration::from_secs(1));
    let one = s
        .acquire("x", json!({"owner": "b", "ttl_seconds": 5, "wait_ms": 20}))
        .await;
    assert_eq!(one.body["retry_after_ms"], 60_000, "{one:?}");
    let both = s
        .acquire_all(json!({"owner": "b", "resources": ["x", "y"], "ttl_seconds": 5}))
        .await;
    assert_eq!(both.body["held"], json!(["x", "y"]), "{both:?}");
    assert_reads(
        &s.metrics().await,
        &[
            ("fencelock_lock_delays_total", 2.0),
            (r#"fencelock_timeouts_total{kind="wait_expired"}"#, 1.0),
            (r#"fencelock_contention_total{kind="waited"}"#, 1.0),
            (r#"fencelock_contention_total{kind="held"}"#, 0.0),
            (
                r#"fencelock_requests_total{kind="lock",op="acquire_all",outcome="delayed"}"#,
                1.0,
            ),
            (
                r#"fencelock_requests_total{kind="lock",op="acquire",outcome="delayed"}"#,
                1.0,
            ),
        ],
    );
}

#[tokio::test]
async fn hold_time_is_recorded_on_release() {
    let s = TestServer::manual().await;
    s.grant("r", "a", 60).await;
    s.advance(Duration::from_secs(3));
    assert_eq!(
        s.release("r", json!({"owner": "a"})).await.status,
        StatusCode::NO_CONTENT
    );
    let text = s.metrics().await;
    assert_reads(
        &text,
        &[(r#"fencelock_lease_hold_seconds_count{end="released"}"#, 1.0)],
    );
    // Measured by the store's (manual) clock: exactly what the test moved it by.
    assert_reads(
        &text,
        &[
            (r#"fencelock_lease_hold_seconds_sum{end="released"}"#, 3.0),
            (r#"fencelock_lease_hold_seconds_count{end="expired"}"#, 0.0),
        ],
    );
}

#[tokio::test]
async fn a_purged_lease_counts_as_expired_with_its_hold_time() {
    let s = manual_purging_every(Duration::from_millis(10)).await;
    s.grant("r", "a", 10).await;
    assert_eq!(read(&s, "fencelock_live_leases").await, 1.0);
    s.advance(Duration::from_secs(11));
    s.until_series(r#"fencelock_timeouts_total{kind="lease_expired"}"#, 1.0)
        .await;
    let text = s.metrics().await;
    assert_reads(
        &text,
        &[
            ("fencelock_leases_expired_total", 1.0),
            (r#"fencelock_lease_hold_seconds_count{end="expired"}"#, 1.0),
        ],
    );
    // From acquired_at to expires_at: the TTL, whenever the purge came.
    assert_reads(
        &text,
        &[
            (r#"fencelock_lease_hold_seconds_sum{end="expired"}"#, 10.0),
            ("fencelock_live_leases", 0.0),
        ],
    );
    assert!(
        value(&text, r#"fencelock_store_duration_seconds_count{op="purge"}"#) >= 1.0,
        "{text}"
    );
}

#[tokio::test]
async fn a_grant_over_an_expired_lease_counts_the_expiry() {
    // No purge comes during the test: the grant finds the expired lease itself.
    let s = manual_purging_every(Duration::from_secs(3_600)).await;
    s.grant("r", "a", 10).await;
    s.advance(Duration::from_secs(11));
    s.grant("r", "b", 10).await;
    let text = s.metrics().await;
    assert_reads(
        &text,
        &[
            (r#"fencelock_timeouts_total{kind="lease_expired"}"#, 1.0),
            (r#"fencelock_lease_hold_seconds_count{end="expired"}"#, 1.0),
            ("fencelock_live_leases", 1.0),
        ],
    );
}

#[tokio::test]
async fn renewals_and_releases_are_counted_by_result() {
    let s = TestServer::manual().await;
    let lease = s.grant("r", "a", 10).await;
    let token = lease["fencing_token"].as_u64().unwrap();
    for (path, body, expected) in [
        ("/locks/r/renew", json!({"owner": "a", "ttl_seconds": 10}), 200),
        ("/locks/r/renew", json!({"owner": "b", "ttl_seconds": 10}), 403),
        (
            "/locks/r/renew",
            json!({"owner": "a", "ttl_seconds": 10, "fencing_token": token + 1}),
            409,
        ),
        ("/locks/none/renew", json!({"owner": "a", "ttl_seconds": 10}), 404),
    ] {
        let answer = s.send(Method::POST, path, Some(body)).await;
        assert_eq!(answer.status.as_u16(), expected, "{answer:?}");
    }
    for (resource, body, expected) in [
        ("r", json!({"owner": "b"}), 403),
        ("r", json!({"owner": "a", "fencing_token": token + 1}), 409),
        ("none", json!({"owner": "a"}), 404),
        ("r", json!({"owner": "a", "fencing_token": token}), 204),
    ] {
        let answer = s.release(resource, body).await;
        assert_eq!(answer.status.as_u16(), expected, "{answer:?}");
    }
    let text = s.metrics().await;
    for (op, done) in [("renew", "renewed"), ("release", "released")] {
        for outcome in [done, "forbidden", "conflict", "not_found"] {
            let series = format!(r#"fencelock_requests_total{{kind="lock",op="{op}",outcome="{outcome}"}}"#);
            assert_eq!(value(&text, &series), 1.0, "{series}\n{text}");
        }
    }
}

#[tokio::test]
async fn store_errors_are_counted_by_operation() {
    let s = TestServer::start(unreachable_store(), Config::default()).await;
    s.acquire("r", json!({"owner": "a", "ttl_seconds": 5})).await;
    s.renew("r", json!({"owner": "a", "ttl_seconds": 5})).await;
    s.release("r", json!({"owner": "a"})).await;
    s.get("r").await;
    let text = s.metrics().await;
    for op in ["acquire", "renew", "release", "get"] {
        let errors = format!(r#"fencelock_store_errors_total{{op="{op}"}}"#);
        assert_eq!(value(&text, &errors), 1.0, "{errors}\n{text}");
        let timed = format!(r#"fencelock_store_duration_seconds_count{{op="{op}"}}"#);
        assert_eq!(value(&text, &timed), 1.0, "{timed}\n{text}");
        let answered = format!(r#"fencelock_requests_total{{kind="lock",op="{op}",outcome="unavailable"}}"#);
        assert_eq!(value(&text, &answered), 1.0, "{answered}\n{text}");
    }
    // The purge runs once at start, and fails too.
    s.until_series(r#"fencelock_store_errors_total{op="purge"}"#, 1.0)
        .await;
}

#[tokio::test]
async fn http_requests_are_counted_by_route_template_and_status() {
    let s = TestServer::manual().await;
    s.send(Method::GET, "/healthz", None).await;
    s.send(Method::GET, "/locks", None).await;
    s.grant("some:name", "a", 10).await;
    s.get("absent").await;
    s.renew("absent", json!({"owner": "a", "ttl_seconds": 5})).await;
    s.send_raw(Method::DELETE, "/locks/some:name", None, Vec::new())
        .await;
    s.send(Method::GET, "/no/such/route", None).await;
    s.send(Method::PUT, "/locks/some:name", None).await;
    let text = s.metrics().await;
    for (route, status) in [
        ("/healthz", 200),
        ("/locks", 200),
        ("/locks/{resource}", 200),
        ("/locks/{resource}", 404),
        ("/locks/{resource}/renew", 404),
        ("/locks/{resource}", 415),
        ("/locks/{resource}", 405),
        ("other", 404),
    ] {
        let series = format!(r#"fencelock_http_requests_total{{route="{route}",status="{status}"}}"#);
        assert_eq!(value(&text, &series), 1.0, "{series}\n{text}");
    }
    // The scrape is counted once answered: the next scrape shows it.
    assert_eq!(
        read(
            &s,
            r#"fencelock_http_requests_total{route="/metrics",status="200"}"#
        )
        .await,
        1.0
    );
}

#[tokio::test]
async fn no_series_names_a_resource_or_an_owner() {
    let s = manual_purging_every(Duration::from_millis(10)).await;
    let (resource, owner) = ("secret-resource-xyz", "secret-owner-xyz");
    let lease = s.grant(resource, owner, 10).await;
    let token = lease["fencing_token"].as_u64().unwrap();
    s.grant(resource, owner, 10).await;
    s.acquire(
        resource,
        json!({"owner": "secret-other-xyz", "ttl_seconds": 5, "wait_ms": 10}),
    )
    .await;
    s.renew(resource, json!({"owner": owner, "ttl_seconds": 10}))
        .await;
    s.renew(resource, json!({"owner": "secret-other-xyz", "ttl_seconds": 10}))
        .await;
    s.get(resource).await;
    s.send(Method::GET, "/locks?prefix=secret-", None).await;
    s.send(Method::GET, "/secret-path-xyz", None).await;
    s.release(resource, json!({"owner": owner, "fencing_token": token}))
        .await;
    s.grant("secret-expiring-xyz", owner, 1).await;
    s.advance(Duration::from_secs(2));
    s.until_series(r#"fencelock_timeouts_total{kind="lease_expired"}"#, 1.0)
        .await;
    let text = s.metrics().await;
    assert!(!text.contains("secret"), "{text}");
    assert!(!text.contains("xyz"), "{text}");
}

#[tokio::test]
async fn the_series_move_for_permits_and_holds_by_kind() {
    let s = manual_purging_every(Duration::from_millis(10)).await;
    let (sem, rw) = ("secret-sem-xyz", "secret-rw-xyz");
    let permit = |owner: &str, limit: u64| json!({"owner": owner, "limit": limit, "ttl_seconds": 60});
    let mode = |owner: &str, mode: &str| json!({"owner": owner, "mode": mode, "ttl_seconds": 60});
    s.grant_hold("semaphores", sem, permit("secret-a", 2)).await;
    s.grant_hold("semaphores", sem, permit("secret-a", 2)).await;
    let b = s.grant_hold("semaphores", sem, permit("secret-b", 2)).await;
    s.hold("semaphores", sem, permit("secret-c", 2)).await;
    let mismatch = s.hold("semaphores", sem, permit("secret-c", 3)).await;
    assert_eq!(mismatch.status, StatusCode::CONFLICT);
    let waited = json!({"owner": "secret-c", "limit": 2, "ttl_seconds": 60, "wait_ms": 20});
    assert_eq!(s.hold("semaphores", sem, waited).await.body["acquired"], false);
    let read = s.grant_hold("rwlocks", rw, mode("secret-r", "read")).await;
    s.advance(Duration::from_secs(2));
    let write = s.grant_hold("rwlocks", rw, mode("secret-r", "write")).await;
    s.hold("rwlocks", rw, mode("secret-w", "read")).await;
    let text = s.metrics().await;
    let requests = |kind: &str, op: &str, outcome: &str| {
        format!(r#"fencelock_requests_total{{kind="{kind}",op="{op}",outcome="{outcome}"}}"#)
    };
    assert_reads(
        &text,
        &[
            (&requests("semaphore", "acquire", "granted"), 2.0),
            (&requests("semaphore", "acquire", "extended"), 1.0),
            (&requests("semaphore", "acquire", "held"), 2.0),
            (&requests("semaphore", "acquire", "limit_mismatch"), 1.0),
            (&requests("rwlock", "acquire", "granted"), 2.0),
            (&requests("rwlock", "acquire", "held"), 1.0),
            (&requests("lock", "acquire", "granted"), 0.0),
            (
                r#"fencelock_request_duration_seconds_count{kind="rwlock",op="acquire",outcome="granted"}"#,
                2.0,
            ),
            (r#"fencelock_contention_total{kind="held"}"#, 2.0),
            (r#"fencelock_contention_total{kind="waited"}"#, 1.0),
            (r#"fencelock_timeouts_total{kind="wait_expired"}"#, 1.0),
            // Two permits and one hold: the upgrade ended the read hold it replaced.
            ("fencelock_live_leases", 3.0),
            (r#"fencelock_lease_hold_seconds_count{end="released"}"#, 1.0),
            (r#"fencelock_lease_hold_seconds_sum{end="released"}"#, 2.0),
            (
                "fencelock_highest_token",
                write["fencing_token"].as_f64().unwrap(),
            ),
        ],
    );
    assert!(write["fencing_token"].as_u64() > read["fencing_token"].as_u64());
    assert!(
        value(
            &text,
            r#"fencelock_store_duration_seconds_count{op="acquire_hold"}"#
        ) >= 8.0
    );

    let token = b["fencing_token"].as_u64().unwrap();
    s.renew_hold("semaphores", sem, json!({"owner": "secret-b", "ttl_seconds": 60}))
        .await;
    s.renew_hold("semaphores", sem, json!({"owner": "secret-c", "ttl_seconds": 60}))
        .await;
    let stale = json!({"owner": "secret-b", "fencing_token": token + 100});
    assert_eq!(
        s.release_hold("semaphores", sem, stale).await.status,
        StatusCode::CONFLICT
    );
    let released = s
        .release_hold(
            "semaphores",
            sem,
            json!({"owner": "secret-b", "fencing_token": token}),
        )
        .await;
    assert_eq!(released.status, StatusCode::NO_CONTENT);
    s.holds("semaphores", sem).await;
    s.holds("rwlocks", "secret-absent-xyz").await;
    s.send(Method::GET, "/rwlocks?prefix=secret-", None).await;
    // The write hold expires unreleased; the purge logs and counts it.
    let short = json!({"owner": "secret-s", "mode": "write", "ttl_seconds": 1});
    s.grant_hold("rwlocks", "secret-short-xyz", short).await;
    s.advance(Duration::from_secs(2));
    s.until_series(r#"fencelock_timeouts_total{kind="lease_expired"}"#, 1.0)
        .await;
    let text = s.metrics().await;
    assert_reads(
        &text,
        &[
            (&requests("semaphore", "renew", "renewed"), 1.0),
            (&requests("semaphore", "renew", "not_found"), 1.0),
            (&requests("semaphore", "release", "conflict"), 1.0),
            (&requests("semaphore", "release", "released"), 1.0),
            (&requests("semaphore", "get", "found"), 1.0),
            (&requests("rwlock", "get", "not_found"), 1.0),
            (&requests("rwlock", "list", "listed"), 1.0),
            ("fencelock_leases_expired_total", 1.0),
            (r#"fencelock_lease_hold_seconds_count{end="expired"}"#, 1.0),
            ("fencelock_live_leases", 2.0),
            (
                r#"fencelock_http_requests_total{route="/semaphores/{name}",status="409"}"#,
                2.0,
            ),
            (
                r#"fencelock_http_requests_total{route="/semaphores/{name}/renew",status="404"}"#,
                1.0,
            ),
            (
                r#"fencelock_http_requests_total{route="/rwlocks",status="200"}"#,
                1.0,
            ),
            (
                r#"fencelock_http_requests_total{route="/rwlocks/{name}",status="404"}"#,
                1.0,
            ),
        ],
    );
    assert!(!text.contains("secret"), "{text}");
    assert!(!text.contains("xyz"), "{text}");
}
