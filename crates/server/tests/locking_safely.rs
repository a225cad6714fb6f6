//! Locking several things safely, through a real HTTP client against a real server: several
//! locks at once, all or none (`POST /locks`); waits that would close a cycle of owners
//! answered 409 `deadlock`; a cap on holding (`max_hold_ms`, `hold_until`); and a lock kept
//! closed for the server's lock-delay after a lease expires unreleased.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestServer, assert_invalid, assert_problem, series_value};
use fencelock_core::MemoryStore;
use fencelock_server::Config;
use fencelock_testkit::Lines;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// Long enough that no wait of these tests runs out: every one ends by a grant or a refusal.
const WAIT_MS: u64 = 20_000;

fn millis(timestamp: &Value) -> u64 {
    let time = humantime::parse_rfc3339(timestamp.as_str().expect("a timestamp")).unwrap();
    u64::try_from(time.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn token(lease: &Value) -> u64 {
    lease["fencing_token"].as_u64().expect("a token")
}

/// Sends `POST path` with `body` from a task of its own: its status and JSON body.
fn spawn_post(s: &TestServer, path: &str, body: Value) -> JoinHandle<(StatusCode, Value)> {
    let (client, url) = (s.client.clone(), format!("{}{path}", s.base));
    tokio::spawn(async move {
        let response = client.post(url).json(&body).send().await.expect("request");
        (response.status(), response.json().await.expect("JSON"))
    })
}

/// The leases of a granted `POST /locks`.
fn granted_locks(answer: &common::Answer) -> Vec<Value> {
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(answer.body["acquired"], true, "{answer:?}");
    answer.body["locks"].as_array().expect("locks").clone()
}

fn resources_of(locks: &[Value]) -> Vec<&str> {
    locks.iter().map(|l| l["resource"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn several_locks_are_granted_all_or_none_in_the_order_given() {
    let s = TestServer::manual().await;
    let old = s.grant("b", "a", 30).await;
    s.grant("c", "d", 10).await;
    let body = json!({"owner": "w", "resources": ["x", "b", "c"], "ttl_seconds": 60});
    let refused = s.acquire_all(body.clone()).await;
    assert_eq!(refused.status, StatusCode::OK, "{refused:?}");
    let answer = &refused.body;
    assert_eq!(answer["acquired"], false);
    assert_eq!(
        answer["held"],
        json!(["b", "c"]),
        "every name in the way, in order"
    );
    assert_eq!(
        answer["retry_after_ms"], 10_000,
        "the soonest end of what is in the way"
    );
    assert_eq!(answer["refusals"][0]["holder"], old);
    assert_eq!(answer["refusals"][1]["holder"]["owner"], "d");
    assert!(answer.get("locks").is_none());
    // Nothing was acquired: the free name is still free.
    assert_problem(&s.get("x").await, 404, "/locks/x");
    assert_eq!(s.get("b").await.body, old);

    s.release("b", json!({"owner": "a"})).await;
    s.release("c", json!({"owner": "d"})).await;
    let granted = s.acquire_all(body.clone()).await;
    assert_eq!(granted.body["extended"], json!([]), "every lease is new");
    let locks = granted_locks(&granted);
    assert_eq!(resources_of(&locks), ["x", "b", "c"]);
    assert!(locks.iter().all(|l| l["owner"] == "w"));
    assert!(
        token(&locks[1]) > token(&old),
        "a new lease of b has a greater token"
    );
    let tokens: Vec<u64> = locks.iter().map(token).collect();
    assert!(
        tokens.windows(2).all(|t| t[0] < t[1]),
        "issued in the order given: {tokens:?}"
    );

    // Each is an ordinary lease: read, renewed and released one by one.
    s.advance(Duration::from_secs(5));
    let again = s.acquire_all(body).await;
    assert_eq!(again.body["extended"], json!(["x", "b", "c"]), "{again:?}");
    let extended = granted_locks(&again);
    assert_eq!(
        extended.iter().map(token).collect::<Vec<_>>(),
        tokens,
        "same tokens"
    );
    assert_eq!(s.get("b").await.body, extended[1]);
    let renewed = s
        .renew(
            "x",
            json!({"owner": "w", "ttl_seconds": 5, "fencing_token": tokens[0]}),
        )
        .await;
    assert_eq!(renewed.status, StatusCode::OK, "{renewed:?}");
    let released = s
        .release("c", json!({"owner": "w", "fencing_token": tokens[2]}))
        .await;
    assert_eq!(released.status, StatusCode::NO_CONTENT);
    assert_eq!(s.get("b").await.body["owner"], "w", "the others are still held");
}

#[tokio::test]
async fn every_bad_list_of_names_and_every_bad_cap_is_a_422_and_acquires_nothing() {
    let s = TestServer::manual().await;
    let too_many: Vec<String> = (0..65).map(|i| format!("r{i}")).collect();
    let too_long = "n".repeat(256);
    for bad in [
        json!([]),
        json!(too_many),
        json!(["a", "b", "a"]),
        json!(["a", ""]),
        json!(["a", "x\ny"]),
        json!(["a", too_long]),
        json!(["a", 7]),
        json!("a"),
        json!({"a": true}),
        json!(null),
    ] {
        let answer = s
            .acquire_all(json!({"owner": "w", "resources": bad, "ttl_seconds": 5}))
            .await;
        assert_invalid(&answer, &["resources"]);
        assert_eq!(answer.body["instance"], "/locks");
    }
    let missing = s.acquire_all(json!({"owner": "w", "ttl_seconds": 5})).await;
    assert_invalid(&missing, &["resources"]);
    let all_bad = s
        .acquire_all(json!({"resources": [], "owner": " ", "ttl_ms": 0, "wait_ms": "1", "max_hold_ms": 0}))
        .await;
    assert_invalid(
        &all_bad,
        &["resources", "owner", "ttl_ms", "wait_ms", "max_hold_ms"],
    );
    let year = 365 * 86_400_000u64;
    for bad in [
        json!(0),
        json!(year + 1),
        json!("60000"),
        json!(1.5),
        json!(6e4),
        json!(true),
        json!(null),
    ] {
        let one = s
            .acquire("r", json!({"owner": "w", "ttl_seconds": 5, "max_hold_ms": bad}))
            .await;
        assert_invalid(&one, &["max_hold_ms"]);
        let all = s
            .acquire_all(json!({"owner": "w", "resources": ["r"], "ttl_seconds": 5, "max_hold_ms": bad}))
            .await;
        assert_invalid(&all, &["max_hold_ms"]);
    }
    let list = s.send(Method::GET, "/locks", None).await;
    assert_eq!(list.body["locks"], json!([]), "nothing was acquired");
    // The largest cap is accepted.
    let capped = s
        .acquire("r", json!({"owner": "w", "ttl_seconds": 5, "max_hold_ms": year}))
        .await;
    assert_eq!(capped.body["acquired"], true, "{capped:?}");
}

/// Waits until `n` acquires wait on `s`, then sends `body` to `path` and expects it refused
/// with 409 `deadlock` within a second, its detail naming every step of `cycle`.
async fn refused_as_deadlock(s: &TestServer, waiting: u64, path: &str, body: Value, cycle: &[&str]) {
    s.until_waiters(waiting).await;
    let answer = tokio::time::timeout(Duration::from_secs(1), s.send(Method::POST, path, Some(body)))
        .await
        .expect("a deadlock is answered at once");
    assert_problem(&answer, 409, path);
    assert_eq!(answer.body["type"], "urn:fencelock:problem:deadlock");
    assert_eq!(answer.body["title"], "Deadlock");
    let detail = answer.body["detail"].as_str().unwrap();
    for step in cycle {
        assert!(detail.contains(step), "{step:?} not in {detail:?}");
    }
    assert_eq!(detail.matches("; ").count(), cycle.len() - 1, "{detail}");
}

#[tokio::test]
async fn a_wait_that_closes_a_cycle_of_two_is_refused_and_the_other_waiter_gets_its_lock() {
    let s = TestServer::real().await;
    let x = s.grant("x", "a", 60).await;
    s.grant("y", "b", 60).await;
    let b_waits = spawn_post(
        &s,
        "/locks/x",
        json!({"owner": "b", "ttl_seconds": 60, "wait_ms": WAIT_MS}),
    );
    let cycle = [
        r#"a waits for lock "y" held by b"#,
        r#"b waits for lock "x" held by a"#,
    ];
    let body = json!({"owner": "a", "ttl_seconds": 60, "wait_ms": WAIT_MS});
    refused_as_deadlock(&s, 1, "/locks/y", body, &cycle).await;
    // Nothing a held was released, and b still waits.
    assert_eq!(s.lease("x").await, x);
    assert!(!b_waits.is_finished());
    assert_eq!(s.get("x").await.body["waiters"][0]["owner"], "b");
    // The same cycle closed by an acquire of several locks is refused alike.
    let body = json!({"owner": "a", "resources": ["q", "y"], "ttl_seconds": 60, "wait_ms": WAIT_MS});
    refused_as_deadlock(&s, 1, "/locks", body, &cycle).await;
    assert_problem(&s.get("q").await, 404, "/locks/q");

    assert_eq!(
        s.release("x", json!({"owner": "a"})).await.status,
        StatusCode::NO_CONTENT
    );
    let (status, answer) = b_waits.await.unwrap();
    assert_eq!(
        (status, &answer["acquired"]),
        (StatusCode::OK, &json!(true)),
        "{answer}"
    );
    assert!(token(&answer["lock"]) > token(&x));
    let metrics = s.metrics().await;
    assert_eq!(
        series_value(&metrics, r#"fencelock_deadlocks_total{kind="lock"}"#),
        2.0,
        "{metrics}"
    );
    for op in ["acquire", "acquire_all"] {
        let series = format!(r#"fencelock_requests_total{{kind="lock",op="{op}",outcome="deadlock"}}"#);
        assert_eq!(series_value(&metrics, &series), 1.0, "{series}");
    }
}

#[tokio::test]
async fn a_cycle_of_three_is_refused_and_the_others_get_their_locks_in_turn() {
    let s = TestServer::real().await;
    s.grant("x", "a", 60).await;
    s.grant("y", "b", 60).await;
    s.grant("z", "c", 60).await;
    let body = |owner: &str| json!({"owner": owner, "ttl_seconds": 60, "wait_ms": WAIT_MS});
    let b_waits = spawn_post(&s, "/locks/x", body("b"));
    s.until_waiters(1).await;
    let c_waits = spawn_post(&s, "/locks/y", body("c"));
    let cycle = [
        r#"a waits for lock "z" held by c"#,
        r#"c waits for lock "y" held by b"#,
        r#"b waits for lock "x" held by a"#,
    ];
    refused_as_deadlock(&s, 2, "/locks/z", body("a"), &cycle).await;
    assert_eq!(s.get("z").await.body["owner"], "c", "nothing was given up");

    s.release("x", json!({"owner": "a"})).await;
    let (_, granted) = b_waits.await.unwrap();
    assert_eq!(granted["lock"]["owner"], "b", "{granted}");
    assert!(!c_waits.is_finished(), "c waits for y, which b still holds");
    s.release("y", json!({"owner": "b"})).await;
    let (_, granted) = c_waits.await.unwrap();
    assert_eq!(granted["lock"]["owner"], "c", "{granted}");
}

#[tokio::test]
async fn semaphores_and_rwlocks_close_cycles_too_and_are_refused_alike() {
    let s = TestServer::real().await;
    let permit = |owner: &str, wait_ms: u64| json!({"owner": owner, "limit": 1, "ttl_seconds": 60, "wait_ms": wait_ms});
    let write = |owner: &str, wait_ms: u64| json!({"owner": owner, "mode": "write", "ttl_seconds": 60, "wait_ms": wait_ms});
    s.grant_hold("semaphores", "s", permit("a", 0)).await;
    s.grant_hold("rwlocks", "w", write("b", 0)).await;
    let b_waits = spawn_post(&s, "/semaphores/s", permit("b", WAIT_MS));
    let cycle = [
        r#"a waits for rwlock "w" held by b"#,
        r#"b waits for semaphore "s" held by a"#,
    ];
    refused_as_deadlock(&s, 1, "/rwlocks/w", write("a", WAIT_MS), &cycle).await;
    // The other way round: the semaphore's acquire closes it.
    s.grant_hold("rwlocks", "v", write("c", 0)).await;
    s.grant_hold("semaphores", "t", permit("d", 0)).await;
    let d_waits = spawn_post(&s, "/rwlocks/v", write("d", WAIT_MS));
    let cycle = [
        r#"c waits for semaphore "t" held by d"#,
        r#"d waits for rwlock "v" held by c"#,
    ];
    refused_as_deadlock(&s, 2, "/semaphores/t", permit("c", WAIT_MS), &cycle).await;

    s.release_hold("semaphores", "s", json!({"owner": "a"})).await;
    s.release_hold("rwlocks", "v", json!({"owner": "c"})).await;
    for (waiting, item) in [(b_waits, "permit"), (d_waits, "hold")] {
        let (status, answer) = waiting.await.unwrap();
        assert_eq!(
            (status, &answer["acquired"]),
            (StatusCode::OK, &json!(true)),
            "{answer}"
        );
        assert!(answer[item].is_object(), "{answer}");
    }
    let metrics = s.metrics().await;
    for kind in ["semaphore", "rwlock"] {
        let series = format!(r#"fencelock_deadlocks_total{{kind="{kind}"}}"#);
        assert_eq!(series_value(&metrics, &series), 1.0, "{series}:\n{metrics}");
    }
}

#[tokio::test]
async fn two_readers_that_both_wait_to_upgrade_are_a_cycle_and_readers_that_let_go_and_ask_again_are_not() {
    let s = TestServer::real().await;
    let mode = |owner: &str, mode: &str, wait_ms: u64| json!({"owner": owner, "mode": mode, "ttl_seconds": 60, "wait_ms": wait_ms});
    for owner in ["a", "b"] {
        s.grant_hold("rwlocks", "u", mode(owner, "read", 0)).await;
    }
    let a_upgrades = spawn_post(&s, "/rwlocks/u", mode("a", "write", WAIT_MS));
    let cycle = [
        r#"b waits for rwlock "u" held by a"#,
        r#"a waits for rwlock "u" held by b"#,
    ];
    refused_as_deadlock(&s, 1, "/rwlocks/u", mode("b", "write", WAIT_MS), &cycle).await;
    // b keeps its read hold; once it lets go, a is upgraded.
    s.release_hold("rwlocks", "u", json!({"owner": "b"})).await;
    let (_, upgraded) = a_upgrades.await.unwrap();
    assert_eq!(upgraded["hold"]["mode"], "write", "{upgraded}");

    // Readers found holding that let go and ask to write wait like anyone: no cycle.
    s.release_hold("rwlocks", "u", json!({"owner": "a"})).await;
    for owner in ["c", "d"] {
        s.grant_hold("rwlocks", "u", mode(owner, "read", 0)).await;
    }
    let e_waits = spawn_post(&s, "/rwlocks/u", mode("e", "write", WAIT_MS));
    s.until_waiters(1).await;
    s.release_hold("rwlocks", "u", json!({"owner": "c"})).await;
    let c_waits = spawn_post(&s, "/rwlocks/u", mode("c", "write", WAIT_MS));
    s.until_waiters(2).await;
    // d lets go last: e is granted, while d asks to write behind c.
    s.release_hold("rwlocks", "u", json!({"owner": "d"})).await;
    let d_waits = spawn_post(&s, "/rwlocks/u", mode("d", "write", WAIT_MS));
    let (status, granted) = e_waits.await.unwrap();
    assert_eq!(
        (status, &granted["hold"]["owner"]),
        (StatusCode::OK, &json!("e")),
        "{granted}"
    );
    s.until_waiters(2).await;
    s.release_hold("rwlocks", "u", json!({"owner": "e"})).await;
    // Then c, then d: each is granted once the one before lets go.
    for (turn, owner) in [c_waits, d_waits].into_iter().zip(["c", "d"]) {
        let (status, granted) = turn.await.unwrap();
        assert_eq!(
            (status, &granted["hold"]["owner"]),
            (StatusCode::OK, &json!(owner)),
            "{granted}"
        );
        s.release_hold("rwlocks", "u", json!({"owner": owner})).await;
    }
}

#[tokio::test]
async fn two_acquires_of_the_same_locks_in_opposite_orders_never_deadlock_nor_both_win() {
    let s = TestServer::real().await;
    for round in 0..20 {
        let (a, b) = (format!("a{round}"), format!("b{round}"));
        let body = |owner: &str, names: [&String; 2]| json!({"owner": owner, "resources": names, "ttl_seconds": 60, "wait_ms": WAIT_MS});
        let mut p = spawn_post(&s, "/locks", body("p", [&a, &b]));
        let mut q = spawn_post(&s, "/locks", body("q", [&b, &a]));
        let (first, second) = tokio::select! {
            answer = &mut p => (answer.unwrap(), q),
            answer = &mut q => (answer.unwrap(), p),
        };
        let (status, answer) = first;
        assert_eq!(
            (status, &answer["acquired"]),
            (StatusCode::OK, &json!(true)),
            "{answer}"
        );
        let winner = answer["locks"][0]["owner"].as_str().unwrap().to_owned();
        // The other waits in line for both: it holds neither meanwhile.
        s.until_waiters(1).await;
        for name in [&a, &b] {
            assert_eq!(s.get(name).await.body["owner"], winner.as_str(), "round {round}");
        }
        assert!(!second.is_finished(), "round {round}: both won");
        let first_tokens: Vec<u64> = answer["locks"].as_array().unwrap().iter().map(token).collect();
        for lock in answer["locks"].as_array().unwrap() {
            let resource = lock["resource"].as_str().unwrap();
            let released = s
                .release(resource, json!({"owner": winner, "fencing_token": token(lock)}))
                .await;
            assert_eq!(released.status, StatusCode::NO_CONTENT);
        }
        let (status, answer) = second.await.unwrap();
        assert_eq!(
            (status, &answer["acquired"]),
            (StatusCode::OK, &json!(true)),
            "round {round}: {answer}"
        );
        let loser = answer["locks"][0]["owner"].as_str().unwrap();
        assert_ne!(loser, winner);
        let tokens: Vec<u64> = answer["locks"].as_array().unwrap().iter().map(token).collect();
        assert!(
            tokens.iter().all(|t| first_tokens.iter().all(|f| t > f)),
            "round {round}"
        );
        for lock in answer["locks"].as_array().unwrap() {
            s.release(lock["resource"].as_str().unwrap(), json!({"owner": loser}))
                .await;
        }
    }
    let metrics = s.metrics().await;
    assert_eq!(
        series_value(&metrics, r#"fencelock_deadlocks_total{kind="lock"}"#),
        0.0
    );
    let granted = r#"fencelock_requests_total{kind="lock",op="acquire_all",outcome="granted"}"#;
    assert_eq!(series_value(&metrics, granted), 40.0, "{metrics}");
}

#[tokio::test]
async fn a_waiter_for_several_locks_that_goes_away_leaves_every_line_and_holds_nothing() {
    let s = TestServer::real().await;
    s.grant("x", "a", 60).await;
    let gone = spawn_post(
        &s,
        "/locks",
        json!({"owner": "b", "resources": ["y", "x"], "ttl_seconds": 60, "wait_ms": WAIT_MS}),
    );
    s.until_waiters(1).await;
    gone.abort(); // drops the client's connection
    s.until_waiters(0).await;
    s.release("x", json!({"owner": "a"})).await;
    for name in ["x", "y"] {
        assert_problem(&s.get(name).await, 404, &format!("/locks/{name}"));
    }
    let locks = granted_locks(
        &s.acquire_all(json!({"owner": "c", "resources": ["x", "y"], "ttl_seconds": 60}))
            .await,
    );
    assert_eq!(resources_of(&locks), ["x", "y"]);
}

#[tokio::test]
async fn a_cap_cuts_the_first_ttl_every_renewal_and_every_extension() {
    let s = TestServer::manual().await;
    let granted = s
        .acquire(
            "r",
            json!({"owner": "w", "ttl_seconds": 10, "max_hold_ms": 25_000}),
        )
        .await;
    let lease = granted.body["lock"].clone();
    let start = millis(&lease["acquired_at"]);
    assert_eq!(millis(&lease["hold_until"]), start + 25_000, "{lease}");
    assert_eq!(millis(&lease["expires_at"]), start + 10_000);
    assert_eq!(s.get("r").await.body, lease, "GET shows the cap");

    s.advance(Duration::from_secs(8));
    let renewed = s.renew("r", json!({"owner": "w", "ttl_seconds": 10})).await.body;
    assert_eq!(
        millis(&renewed["expires_at"]),
        start + 18_000,
        "far from the cap: now + TTL"
    );
    s.advance(Duration::from_secs(8));
    let renewed = s.renew("r", json!({"owner": "w", "ttl_seconds": 10})).await.body;
    assert_eq!(
        renewed["expires_at"], renewed["hold_until"],
        "cut at the cap: {renewed}"
    );
    assert_eq!(renewed["hold_until"], lease["hold_until"]);

    // An extension keeps the lease's cap, whatever it sends.
    s.advance(Duration::from_secs(1));
    let extended = s
        .acquire(
            "r",
            json!({"owner": "w", "ttl_seconds": 60, "max_hold_ms": 3_600_000}),
        )
        .await
        .body;
    assert_eq!(extended["extended"], true, "{extended}");
    assert_eq!(extended["lock"]["hold_until"], lease["hold_until"]);
    assert_eq!(extended["lock"]["expires_at"], lease["hold_until"]);
    assert_eq!(extended["lock"]["fencing_token"], lease["fencing_token"]);
    s.advance(Duration::from_secs(8));
    assert_problem(&s.get("r").await, 404, "/locks/r");
    let late = s.renew("r", json!({"owner": "w", "ttl_seconds": 10})).await;
    assert_problem(&late, 404, "/locks/r/renew");

    // A first TTL longer than the cap ends at the cap; several locks each carry it.
    let short = s
        .acquire(
            "short",
            json!({"owner": "w", "ttl_seconds": 60, "max_hold_ms": 5_000}),
        )
        .await
        .body;
    assert_eq!(short["lock"]["expires_at"], short["lock"]["hold_until"]);
    let locks = granted_locks(
        &s.acquire_all(
            json!({"owner": "w", "resources": ["m", "n"], "ttl_seconds": 60, "max_hold_ms": 5_000}),
        )
        .await,
    );
    for lock in &locks {
        assert_eq!(
            millis(&lock["hold_until"]),
            millis(&lock["acquired_at"]) + 5_000,
            "{lock}"
        );
    }
}

#[tokio::test]
async fn a_lease_without_a_cap_has_no_hold_until_anywhere() {
    let s = TestServer::manual().await;
    let lease = s.grant("r", "w", 30).await;
    let renewed = s.renew("r", json!({"owner": "w", "ttl_seconds": 30})).await.body;
    let got = s.get("r").await.body;
    let held = s
        .acquire("r", json!({"owner": "other", "ttl_seconds": 30}))
        .await
        .body;
    for body in [&lease, &renewed, &got, &held["holder"]] {
        assert!(body.get("hold_until").is_none(), "{body}");
    }
}

/// A server whose store follows the test's clock, with a lock-delay of `delay`.
async fn delayed(delay: Duration) -> TestServer {
    TestServer::manual_with(Config {
        lock_delay: delay,
        ..Config::default()
    })
    .await
}

#[tokio::test]
async fn a_lease_left_to_expire_keeps_its_lock_closed_for_the_delay_and_a_released_one_does_not() {
    let s = delayed(Duration::from_secs(5)).await;
    let lease = s.grant("r", "a", 1).await;
    s.advance(Duration::from_secs(1));
    assert_problem(&s.get("r").await, 404, "/locks/r");
    let refused = s.acquire("r", json!({"owner": "b", "ttl_seconds": 30})).await;
    assert_eq!(refused.status, StatusCode::OK);
    assert_eq!(
        refused.body,
        json!({"acquired": false, "resource": "r", "retry_after_ms": 5_000})
    );
    // The lock is closed to its last holder too: it was presumed gone.
    let own = s.acquire("r", json!({"owner": "a", "ttl_seconds": 30})).await;
    assert_eq!(own.body["acquired"], false, "{own:?}");
    s.advance(Duration::from_millis(4_000));
    let all = s
        .acquire_all(json!({"owner": "b", "resources": ["free", "r"], "ttl_seconds": 30}))
        .await
        .body;
    assert_eq!(
        (&all["acquired"], &all["held"], &all["retry_after_ms"]),
        (&json!(false), &json!(["r"]), &json!(1_000)),
        "{all}"
    );
    assert_eq!(all["refusals"][0]["retry_after_ms"], 1_000);
    assert_problem(&s.get("free").await, 404, "/locks/free");
    s.advance(Duration::from_millis(1_000));
    let granted = s
        .acquire("r", json!({"owner": "b", "ttl_seconds": 30}))
        .await
        .body;
    assert_eq!(granted["acquired"], true, "{granted}");
    assert_eq!(
        millis(&granted["lock"]["acquired_at"]),
        millis(&lease["expires_at"]) + 5_000
    );
    assert!(token(&granted["lock"]) > token(&lease));

    // A release ends the delay at once.
    s.grant("q", "a", 1).await;
    assert_eq!(
        s.release("q", json!({"owner": "a"})).await.status,
        StatusCode::NO_CONTENT
    );
    let next = s
        .acquire("q", json!({"owner": "b", "ttl_seconds": 30}))
        .await
        .body;
    assert_eq!(next["acquired"], true, "{next}");

    let metrics = s.metrics().await;
    assert_eq!(
        series_value(&metrics, "fencelock_lock_delays_total"),
        3.0,
        "{metrics}"
    );
    let series = r#"fencelock_requests_total{kind="lock",op="acquire",outcome="delayed"}"#;
    assert_eq!(series_value(&metrics, series), 2.0, "{metrics}");
}

#[tokio::test]
async fn a_waiter_is_granted_when_the_delay_ends() {
    let delay = 300;
    let s = TestServer::start(
        Arc::new(MemoryStore::new()),
        Config {
            lock_delay: Duration::from_millis(delay),
            ..Config::default()
        },
    )
    .await;
    let lease = s.acquire("r", json!({"owner": "a", "ttl_ms": 200})).await.body["lock"].clone();
    let granted = s
        .acquire("r", json!({"owner": "b", "ttl_seconds": 30, "wait_ms": WAIT_MS}))
        .await
        .body;
    assert_eq!(granted["acquired"], true, "{granted}");
    let at = millis(&granted["lock"]["acquired_at"]);
    assert!(
        at >= millis(&lease["expires_at"]) + delay,
        "granted at {at}, before the delay ended: {lease}"
    );
}

/// Every log line of this test binary, as JSON.
fn logs() -> &'static Lines {
    fencelock_testkit::logs(tracing::Level::INFO)
}

#[tokio::test]
async fn a_delays_refusal_and_a_deadlock_are_each_logged_once() {
    let lines = logs();
    let s = delayed(Duration::from_secs(5)).await;
    s.grant("logged-delay", "a", 1).await;
    s.advance(Duration::from_secs(1));
    s.acquire("logged-delay", json!({"owner": "b", "ttl_seconds": 5}))
        .await;
    let refusals: Vec<Value> = lines
        .of("fencelock::lease")
        .into_iter()
        .filter(|line| line["resource"] == "logged-delay" && line["event"] == "refuse")
        .collect();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(
        (
            &refusals[0]["reason"],
            &refusals[0]["owner"],
            &refusals[0]["retry_after_ms"]
        ),
        (&json!("delayed"), &json!("b"), &json!(5_000)),
        "{refusals:?}"
    );

    let s = TestServer::real().await;
    s.grant("logged-x", "logged-a", 60).await;
    s.grant("logged-y", "logged-b", 60).await;
    let waiting = spawn_post(
        &s,
        "/locks/logged-x",
        json!({"owner": "logged-b", "ttl_seconds": 60, "wait_ms": WAIT_MS}),
    );
    let body = json!({"owner": "logged-a", "ttl_seconds": 60, "wait_ms": WAIT_MS});
    refused_as_deadlock(
        &s,
        1,
        "/locks/logged-y",
        body,
        &[
            r#"waits for lock "logged-y" held by logged-b"#,
            r#"waits for lock "logged-x" held by logged-a"#,
        ],
    )
    .await;
    let deadlocks: Vec<Value> = lines
        .of("fencelock::deadlock")
        .into_iter()
        .filter(|line| line["owner"] == "logged-a")
        .collect();
    assert_eq!(deadlocks.len(), 1, "{deadlocks:?}");
    assert!(
        deadlocks[0]["cycle"]
            .as_str()
            .is_some_and(|c| c.contains("logged-b")),
        "{deadlocks:?}"
    );
    assert!(
        !lines
            .text()
            .lines()
            .any(|line| line.contains("store failed") && line.contains("deadlock")),
        "a deadlock is no store failure"
    );
    s.release("logged-x", json!({"owner": "logged-a"})).await;
    assert_eq!(waiting.await.unwrap().1["acquired"], true);
}
