//! Behaviour under concurrency, waiting, slow or misbehaving clients, store failure and
//! shutdown, through real connections.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{
    TestServer, assert_problem, gated_store, hanging_store, raw_connection, read_response, unreachable_store,
};
use fencelock_core::{AcquireOutcome, LockStore, MemoryStore, Owner, Resource, Timestamp, Ttl};
use fencelock_server::Config;
use fencelock_testkit::eventually;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_acquirers_have_one_winner_over_twenty_rounds() {
    one_winner_over_twenty_rounds(TestServer::real().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_acquirers_have_one_winner_over_twenty_rounds_on_the_embedded_store() {
    one_winner_over_twenty_rounds(TestServer::embedded().await).await;
}

async fn one_winner_over_twenty_rounds(s: TestServer) {
    for round in 0..20 {
        let resource = format!("race-{round}");
        let attempts: Vec<_> = (0..100)
            .map(|i| spawn_acquire(&s, &resource, &format!("w{i}"), 0))
            .collect();
        let mut winners = Vec::new();
        for attempt in attempts {
            let answer = attempt.await.unwrap();
            if answer["acquired"] == true {
                winners.push(answer["lock"].clone());
            } else {
                assert_eq!(answer["acquired"], false, "{answer}");
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        assert_eq!(s.get(&format!("race-{round}")).await.body, winners[0]);
    }
}

#[tokio::test]
async fn tokens_strictly_increase_over_two_thousand_grants() {
    tokens_increase_over_two_thousand_grants(TestServer::real().await).await;
}

#[tokio::test]
async fn tokens_strictly_increase_over_two_thousand_grants_on_the_embedded_store() {
    tokens_increase_over_two_thousand_grants(TestServer::embedded().await).await;
}

async fn tokens_increase_over_two_thousand_grants(s: TestServer) {
    let mut last = 0;
    for i in 0..2000 {
        let owner = format!("o{}", i % 7);
        let lease = s.grant("hot", &owner, 60).await;
        let token = lease["fencing_token"].as_u64().unwrap();
        assert!(token > last, "grant {i}: token {token} after {last}");
        last = token;
        let released = s
            .release("hot", json!({"owner": owner, "fencing_token": token}))
            .await;
        assert_eq!(released.status, StatusCode::NO_CONTENT);
    }
}

fn spawn_acquire(
    s: &TestServer,
    resource: &str,
    owner: &str,
    wait_ms: u64,
) -> tokio::task::JoinHandle<Value> {
    let url = format!("{}/locks/{resource}", s.base);
    let body = json!({"owner": owner, "ttl_seconds": 60, "wait_ms": wait_ms});
    let client = s.client.clone();
    tokio::spawn(async move {
        client
            .post(url)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    })
}

#[tokio::test]
async fn waiters_get_the_lease_in_arrival_order() {
    let s = TestServer::real().await;
    let holder = s.grant("job", "a", 60).await;
    let mut waiting = Vec::new();
    for (n, owner) in ["b", "c", "d"].into_iter().enumerate() {
        waiting.push(spawn_acquire(&s, "job", owner, 20_000));
        // Make sure each waiter has arrived before the next one is sent.
        s.until_waiters(n as u64 + 1).await;
    }
    let mut last = holder;
    for (owner, waiter) in ["a", "b", "c"].into_iter().zip(waiting) {
        let token = last["fencing_token"].clone();
        let released = s
            .release("job", json!({"owner": owner, "fencing_token": token}))
            .await;
        assert_eq!(released.status, StatusCode::NO_CONTENT);
        let answer = waiter.await.unwrap();
        assert_eq!(answer["acquired"], true, "{answer}");
        let next = answer["lock"].clone();
        assert!(next["fencing_token"].as_u64() > last["fencing_token"].as_u64());
        assert_eq!(s.lease("job").await, next);
        last = next;
    }
    assert_eq!(last["owner"], "d");
    assert_eq!(s.waiters().await, 0);
}

#[tokio::test]
async fn a_waiter_whose_wait_runs_out_is_told_acquired_false() {
    let s = TestServer::real().await;
    let holder = s.grant("job", "a", 60).await;
    let answer = spawn_acquire(&s, "job", "b", 200).await.unwrap();
    assert_eq!(answer["acquired"], false, "{answer}");
    assert_eq!(answer["holder"], holder);
    assert_eq!(s.get("job").await.body, holder);
    assert_eq!(s.waiters().await, 0);
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_holders_expiry() {
    let s = TestServer::real().await;
    let holder = s.acquire("job", json!({"owner": "a", "ttl_ms": 300})).await.body["lock"].clone();
    // Nobody releases: only the expiry of a's lease can hand it over.
    let answer = spawn_acquire(&s, "job", "b", 20_000).await.unwrap();
    assert_eq!(answer["acquired"], true, "{answer}");
    assert!(answer["lock"]["fencing_token"].as_u64() > holder["fencing_token"].as_u64());
}

#[tokio::test]
async fn a_waiter_that_goes_away_leaves_the_line() {
    let s = TestServer::real().await;
    s.grant("job", "a", 60).await;
    let gone = spawn_acquire(&s, "job", "b", 20_000);
    s.until_waiters(1).await;
    let next = spawn_acquire(&s, "job", "c", 20_000);
    s.until_waiters(2).await;
    gone.abort(); // drops the client's connection
    s.until_waiters(1).await;
    assert_eq!(
        s.release("job", json!({"owner": "a"})).await.status,
        StatusCode::NO_CONTENT
    );
    let answer = next.await.unwrap();
    assert_eq!(answer["lock"]["owner"], "c", "{answer}");
}

/// The time a lease in a JSON answer was acquired.
fn acquired_at(lease: &Value) -> Timestamp {
    Timestamp::parse_rfc3339(lease["acquired_at"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn a_renewal_that_shortens_the_lease_wakes_its_waiter() {
    shortened_lease_wakes_its_waiter(TestServer::real().await).await;
}

#[tokio::test]
async fn a_renewal_that_shortens_the_lease_wakes_its_waiter_on_the_embedded_store() {
    shortened_lease_wakes_its_waiter(TestServer::embedded().await).await;
}

async fn shortened_lease_wakes_its_waiter(s: TestServer) {
    s.grant("job", "a", 60).await;
    let waiting = spawn_acquire(&s, "job", "b", 8_000);
    s.until_waiters(1).await;
    let renewed = s.renew("job", json!({"owner": "a", "ttl_ms": 300})).await;
    assert_eq!(renewed.status, StatusCode::OK, "{renewed:?}");
    let answer = waiting.await.unwrap();
    assert_eq!(answer["acquired"], true, "{answer}");
    // Granted when the shortened lease ended, not when the wait ran out (8 s on).
    let ended = Timestamp::parse_rfc3339(renewed.body["expires_at"].as_str().unwrap()).unwrap();
    let granted = acquired_at(&answer["lock"]);
    assert!(granted >= ended, "{answer}");
    assert!(
        granted.since(ended) < Duration::from_secs(4),
        "woken only at {granted}, lease ended {ended}"
    );
}

#[tokio::test]
async fn a_release_whose_client_hangs_up_still_wakes_the_waiter() {
    release_by_a_client_that_hangs_up(TestServer::real().await).await;
}

#[tokio::test]
async fn a_release_whose_client_hangs_up_still_wakes_the_waiter_on_the_embedded_store() {
    release_by_a_client_that_hangs_up(TestServer::embedded().await).await;
}

async fn release_by_a_client_that_hangs_up(s: TestServer) {
    s.grant("job", "a", 60).await;
    let waiting = spawn_acquire(&s, "job", "b", 8_000);
    s.until_waiters(1).await;
    let body = r#"{"owner": "a"}"#;
    let request = format!(
        "DELETE /locks/job HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let sent = Timestamp::now_wall();
    let mut stream = raw_connection(s.addr, request.as_bytes()).await;
    stream.shutdown().await.unwrap(); // hangs up at once, without reading the answer
    let answer = waiting.await.unwrap();
    assert_eq!(answer["acquired"], true, "{answer}");
    assert_eq!(answer["lock"]["owner"], "b");
    let granted = acquired_at(&answer["lock"]);
    assert!(
        granted.since(sent) < Duration::from_secs(4),
        "woken only at {granted}, released {sent}"
    );
}

/// A release sent whole, after which the client closes its side of the connection (as
/// HTTP/1.0-style clients do, with `Connection: close` or without), is carried out whole:
/// answered 204, and the waiter gets the lock. (Whether the server reads the end of the
/// connection before it starts on the request is a race: ten rounds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_client_half_closes_is_carried_out_and_answered() {
    let s = TestServer::real().await;
    for round in 0..10 {
        let connection = if round % 2 == 0 {
            "Connection: close\r\n"
        } else {
            ""
        };
        let resource = format!("half-{round}");
        s.grant(&resource, "a", 60).await;
        let waiting = spawn_acquire(&s, &resource, "b", 8_000);
        s.until_waiters(1).await;
        let body = r#"{"owner": "a"}"#;
        let request = format!(
            "DELETE /locks/{resource} HTTP/1.1\r\nHost: x\r\n{connection}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut stream = raw_connection(s.addr, request.as_bytes()).await;
        stream.shutdown().await.unwrap(); // SHUT_WR: the request is whole, the answer still welcome
        let (status, head, _) = read_response(&mut stream).await;
        assert_eq!(status, 204, "{head}");
        let answer = tokio::time::timeout(Duration::from_secs(4), waiting)
            .await
            .expect("the waiter is woken by the release, not by its wait running out")
            .unwrap();
        assert_eq!(answer["acquired"], true, "{answer}");
        assert_eq!(answer["lock"]["owner"], "b", "{answer}");
    }
}

/// The acquires waiting now, read from /metrics on a connection of its own that the server
/// closes after answering (so it holds no place under the connection limit).
async fn waiters_now(addr: std::net::SocketAddr) -> u64 {
    let request = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let mut stream = raw_connection(addr, request.as_bytes()).await;
    let (_, _, body) = read_response(&mut stream).await;
    String::from_utf8(body)
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("fencelock_waiters "))
        .and_then(|n| n.trim().parse().ok())
        .expect("fencelock_waiters in /metrics")
}

/// At the connection limit, idle keep-alive connections are closed, the longest idle first,
/// to make room: a holder's renewal on a connection of its own is answered at once, and the
/// connections of waiting acquires are kept.
#[tokio::test]
async fn at_the_connection_limit_idle_keep_alive_connections_make_room_for_a_holder() {
    // 4 connections: at most 2 acquires wait.
    let store = Arc::new(MemoryStore::new());
    let s = TestServer::start(store.clone(), config_with(|c| c.max_connections = 4)).await;
    let (job, a) = (Resource::new("job").unwrap(), Owner::new("a").unwrap());
    let ttl = Ttl::from_millis(60_000, Ttl::DEFAULT_MAX).unwrap();
    let AcquireOutcome::Granted { lease, .. } = store.acquire(&job, &a, ttl).await.unwrap() else {
        panic!("a free lock is granted");
    };
    let acquire = |owner: &str| {
        post(
            "/locks/job",
            &json!({"owner": owner, "ttl_seconds": 60, "wait_ms": 30_000}).to_string(),
        )
    };
    let mut waiting = Vec::new();
    for (n, owner) in ["w1", "w2"].into_iter().enumerate() {
        waiting.push(raw_connection(s.addr, acquire(owner).as_bytes()).await);
        eventually(Duration::from_secs(10), &format!("{owner} to wait"), async || {
            let now = waiters_now(s.addr).await;
            if now == n as u64 + 1 {
                Ok(())
            } else {
                Err(format!("{now} waiters"))
            }
        })
        .await;
    }
    // Two more find no room to wait: answered at once, their connections kept alive, idle.
    let mut idle = Vec::new();
    for owner in ["w3", "w4"] {
        let mut stream = raw_connection(s.addr, acquire(owner).as_bytes()).await;
        let (status, _, body) = tokio::time::timeout(Duration::from_secs(3), read_response(&mut stream))
            .await
            .expect("an acquire with no room to wait is answered at once");
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((status, &answer["acquired"]), (200, &json!(false)), "{answer}");
        idle.push(stream);
    }
    // The holder renews on a new connection: room is made for it.
    let renew = json!({"owner": "a", "ttl_seconds": 60, "fencing_token": lease.token.0}).to_string();
    let mut holder = raw_connection(s.addr, post("/locks/job/renew", &renew).as_bytes()).await;
    let (status, head, _) = tokio::time::timeout(Duration::from_secs(3), read_response(&mut holder))
        .await
        .expect("the renewal is answered within 3 s at the connection limit");
    assert_eq!(status, 200, "{head}");
    // The longest idle connection was closed for it; the other still serves.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), idle[0].read_to_end(&mut rest)).await;
    assert!(matches!(closed, Ok(Ok(0))), "{closed:?} {rest:?}");
    idle[1]
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_response(&mut idle[1]).await.0, 200);
    // The waiters kept their connections: the release hands the lock to the first of them.
    let body = r#"{"owner": "a"}"#;
    let release = format!(
        "DELETE /locks/job HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    holder.write_all(release.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut holder).await.0, 204);
    let (status, _, body) = read_response(&mut waiting[0]).await;
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200);
    assert_eq!(answer["lock"]["owner"], "w1", "{answer}");
}

#[tokio::test]
async fn waiters_never_take_the_connections_holders_need() {
    // 4 connections: at most 2 acquires wait; the others are answered at once.
    let config = config_with(|c| c.max_connections = 4);
    let s = TestServer::start(Arc::new(MemoryStore::new()), config).await;
    let holder = s.grant("job", "a", 60).await;
    let waiting: Vec<_> = (0..4)
        .map(|i| spawn_acquire(&s, "job", &format!("w{i}"), 30_000))
        .collect();
    eventually(
        Duration::from_secs(10),
        "two to be answered at once",
        async || {
            let answered = waiting.iter().filter(|w| w.is_finished()).count();
            if answered >= 2 {
                Ok(())
            } else {
                Err(format!("{answered} answered"))
            }
        },
    )
    .await;
    let (answered, still): (Vec<_>, Vec<_>) = waiting.into_iter().partition(|w| w.is_finished());
    for answer in answered {
        let answer = answer.await.unwrap();
        assert_eq!(answer["acquired"], false, "{answer}");
        assert_eq!(answer["holder"]["owner"], "a", "{answer}");
    }
    assert_eq!(s.waiters().await, 2);
    let renewed = s
        .renew(
            "job",
            json!({"owner": "a", "ttl_seconds": 60, "fencing_token": holder["fencing_token"]}),
        )
        .await;
    assert_eq!(renewed.status, StatusCode::OK, "{renewed:?}");
    assert!(
        still.iter().all(|w| !w.is_finished()),
        "the renewal did not wait for the waiters"
    );
    let released = s.release("job", json!({"owner": "a"})).await;
    assert_eq!(released.status, StatusCode::NO_CONTENT);
    eventually(
        Duration::from_secs(10),
        "a waiter to get the released lock",
        async || still.iter().any(|w| w.is_finished()).then_some(()),
    )
    .await;
    let (first, rest): (Vec<_>, Vec<_>) = still.into_iter().partition(|w| w.is_finished());
    let first = first.into_iter().next().unwrap().await.unwrap();
    assert_eq!(first["acquired"], true, "{first}");
    rest.into_iter().for_each(|w| w.abort());
}

fn post(path: &str, body: &str) -> String {
    let length = body.len();
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n{body}"
    )
}

#[tokio::test]
async fn a_keep_alive_connection_stays_usable_after_a_4xx() {
    let s = TestServer::manual().await;
    let requests = [
        "GET /locks/absent HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(),
        post("/locks/r", r#"{"owner": 1}"#),
        post("/locks/r", "not json"),
        post("/locks/r/renew", r#"{"owner": "a", "ttl_seconds": 5}"#),
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(),
    ];
    let mut stream = raw_connection(s.addr, b"").await;
    for (request, expected) in requests.iter().zip([404, 422, 400, 404, 200]) {
        stream.write_all(request.as_bytes()).await.unwrap();
        let (status, head, _) = read_response(&mut stream).await;
        assert_eq!(status, expected, "{head}");
        assert!(!head.to_ascii_lowercase().contains("connection: close"), "{head}");
    }
}

#[tokio::test]
async fn an_answer_that_leaves_a_body_unread_closes_the_connection() {
    let s = TestServer::manual().await;
    let request =
        "POST /locks/r HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
    let mut stream = raw_connection(s.addr, request.as_bytes()).await;
    let (status, head, body) = read_response(&mut stream).await;
    assert_eq!(status, 415);
    assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
    let problem: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["status"], 415);
}

fn config_with(change: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::default();
    change(&mut config);
    config
}

/// Reads until the server closes the connection; fails if it does not within 10 s.
async fn assert_closed_by_server(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    let mut seen = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut seen)).await;
    assert!(read.is_ok(), "the server kept a stalled connection open");
    seen
}

#[tokio::test]
async fn a_client_that_stalls_in_its_headers_is_disconnected() {
    let config = config_with(|c| c.header_read_timeout = Duration::from_millis(300));
    let s = TestServer::start(Arc::new(MemoryStore::new()), config).await;
    let mut stalled = raw_connection(s.addr, b"POST /locks/r HTTP/1.1\r\nHost: x\r\n").await;
    assert_closed_by_server(&mut stalled).await;
    let mut idle = raw_connection(s.addr, b"").await;
    assert_closed_by_server(&mut idle).await;
    assert_eq!(s.send(Method::GET, "/healthz", None).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_client_that_stalls_in_its_body_gets_408() {
    let config = config_with(|c| c.body_read_timeout = Duration::from_millis(300));
    let s = TestServer::start(Arc::new(MemoryStore::new()), config).await;
    let head = "POST /locks/r HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"own";
    let mut stream = raw_connection(s.addr, head.as_bytes()).await;
    let (status, head, _) = read_response(&mut stream).await;
    assert_eq!(status, 408, "{head}");
    assert!(head.to_ascii_lowercase().contains("connection: close"));
    assert_problem(&s.get("r").await, 404, "/locks/r");
}

#[tokio::test]
async fn connections_over_the_limit_wait_for_a_free_slot() {
    let config = config_with(|c| c.max_connections = 1);
    let s = TestServer::start(Arc::new(MemoryStore::new()), config).await;
    let first = raw_connection(s.addr, b"").await;
    let mut second = raw_connection(s.addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), second.peek(&mut byte)).await;
    assert!(early.is_err(), "served over the connection limit");
    drop(first);
    let (status, _, _) = read_response(&mut second).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn garbage_on_the_wire_never_stops_the_server() {
    let config = config_with(|c| c.header_read_timeout = Duration::from_millis(500));
    let s = TestServer::start(Arc::new(MemoryStore::new()), config).await;
    for garbage in [
        &b"\x00\x01\x02\r\n\r\n"[..],
        b"GET\r\n\r\n",
        b"POST /locks/r HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"POST /locks/r HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\n",
    ] {
        let mut stream = raw_connection(s.addr, garbage).await;
        let answer = assert_closed_by_server(&mut stream).await;
        let text = String::from_utf8_lossy(&answer);
        assert!(!text.starts_with("HTTP/1.1 5"), "{text}");
    }
    assert_eq!(s.send(Method::GET, "/healthz", None).await.status, StatusCode::OK);
    s.grant("r", "a", 5).await;
}

#[tokio::test]
async fn an_unreachable_store_gives_503_and_readiness_fails() {
    let s = TestServer::start(unreachable_store(), Config::default()).await;
    assert_problem(
        &s.acquire("r", json!({"owner": "a", "ttl_seconds": 5, "wait_ms": 1000}))
            .await,
        503,
        "/locks/r",
    );
    assert_problem(&s.get("r").await, 503, "/locks/r");
    assert_problem(&s.release("r", json!({"owner": "a"})).await, 503, "/locks/r");
    assert_problem(
        &s.renew("r", json!({"owner": "a", "ttl_seconds": 5})).await,
        503,
        "/locks/r/renew",
    );
    assert_problem(&s.send(Method::GET, "/locks", None).await, 503, "/locks");
    assert_problem(&s.send(Method::GET, "/readyz", None).await, 503, "/readyz");
    assert_eq!(s.send(Method::GET, "/healthz", None).await.status, StatusCode::OK);
    // Bad input is still judged first: the store is not asked.
    assert_eq!(s.acquire("r", json!({"owner": ""})).await.status.as_u16(), 422);
}

/// POSTs `body` to `path` and reads the answer's status and JSON body.
fn spawn_post(s: &TestServer, path: &str, body: Value) -> tokio::task::JoinHandle<(u16, Value)> {
    let (url, client) = (format!("{}{path}", s.base), s.client.clone());
    tokio::spawn(async move {
        let answer = client.post(url).json(&body).send().await.unwrap();
        (answer.status().as_u16(), answer.json().await.unwrap())
    })
}

/// On shutdown every waiter — of a lock, of several locks, of a permit, of a hold — is
/// answered `acquired: false` within 5 s, even when the store never answers again.
#[tokio::test]
async fn shutdown_answers_every_waiter_even_when_the_store_never_answers() {
    let (store, hung) = hanging_store();
    let s = TestServer::start(store, Config::default()).await;
    s.grant("job", "a", 60).await;
    let permit = json!({"owner": "a", "ttl_seconds": 60, "limit": 1});
    s.grant_hold("semaphores", "pool", permit).await;
    let write = json!({"owner": "a", "ttl_seconds": 60, "mode": "write"});
    s.grant_hold("rwlocks", "cfg", write).await;
    let wait = |mut body: Value| {
        body["ttl_seconds"] = json!(60);
        body["wait_ms"] = json!(60_000);
        body
    };
    let waiting = [
        spawn_post(&s, "/locks/job", wait(json!({"owner": "b"}))),
        spawn_post(&s, "/locks", wait(json!({"owner": "c", "resources": ["job"]}))),
        spawn_post(&s, "/semaphores/pool", wait(json!({"owner": "d", "limit": 1}))),
        spawn_post(&s, "/rwlocks/cfg", wait(json!({"owner": "e", "mode": "read"}))),
    ];
    s.until_waiters(4).await;
    hung.store(true, Ordering::Release);
    let stopped = tokio::spawn(s.stop());
    for waiter in waiting {
        let (status, answer) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("every waiter is answered within 5 s of the shutdown")
            .unwrap();
        assert_eq!((status, &answer["acquired"]), (200, &json!(false)), "{answer}");
    }
    let stopped = tokio::time::timeout(Duration::from_secs(5), stopped).await;
    assert!(stopped.expect("serve returns within 5 s").unwrap().is_ok());
}

/// An acquire that does not wait, under way in a store slow to answer when the server shuts
/// down, is answered `acquired: false` (`shutting_down`) without the store's answer; the grant
/// the store makes after all, which its client never hears of, is given back at once instead
/// of keeping the lock from every other server on the store for its minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_made_after_shutdown_answered_its_try_is_given_back() {
    let (store, gate) = gated_store();
    let s = TestServer::start(store.clone(), Config::default()).await;
    let trying = spawn_post(&s, "/locks/job", json!({"owner": "a", "ttl_ms": 60_000}));
    eventually(
        Duration::from_secs(10),
        "the acquire reaching the store",
        async || (gate.reached() == 1).then_some(()),
    )
    .await;
    let stopped = tokio::spawn(s.stop());
    let (status, answer) = tokio::time::timeout(Duration::from_secs(5), trying)
        .await
        .expect("the try is answered within 5 s of the shutdown")
        .unwrap();
    assert_eq!(
        (status, &answer["acquired"], &answer["shutting_down"]),
        (200, &json!(false), &json!(true)),
        "{answer}"
    );
    gate.open();
    let job = Resource::new("job").unwrap();
    eventually(
        Duration::from_secs(10),
        "the grant nobody heard of given back",
        async || match (gate.passed(), store.get(&job).await) {
            (1, Ok(None)) => Ok(()),
            (passed, held) => Err(format!("{passed} acquires answered by the store; {held:?}")),
        },
    )
    .await;
    assert!(stopped.await.unwrap().is_ok());
}

#[tokio::test]
async fn shutdown_answers_waiters_and_finishes_in_flight_requests() {
    let s = TestServer::real().await;
    let holder = s.grant("job", "a", 60).await;
    let waiter = spawn_acquire(&s, "job", "b", 60_000);
    s.until_waiters(1).await;
    let stopped = tokio::time::timeout(Duration::from_secs(5), s.stop()).await;
    assert!(stopped.expect("serve returns within 5 s").is_ok());
    let answer = waiter.await.unwrap();
    assert_eq!(answer["acquired"], false, "{answer}");
    assert_eq!(answer["holder"], holder);
}
