//! Many `fencelock serve` processes on one shared store (PostgreSQL, etcd, ZooKeeper, Redis,
//! Redlock), and what the API says when that store fails and comes back. Real processes, real
//! servers, real HTTP.

mod common;

use std::time::Duration;

use common::Server;
#[cfg(feature = "etcd")]
use fencelock_testkit::{EtcdCluster, shared_etcd};
use fencelock_testkit::{Postgres, Proxy, RedisNodes, eventually, shared_redis};
#[cfg(feature = "zookeeper")]
use fencelock_testkit::{ZooKeeperEnsemble, shared_zookeeper};
use serde_json::{Value, json};

/// An answer: status and JSON body.
struct Answer {
    status: u16,
    content_type: String,
    /// The `Retry-After` header, if the server sent one.
    retry_after: Option<String>,
    body: Value,
}

async fn call(client: &reqwest::Client, method: reqwest::Method, url: String, body: Option<Value>) -> Answer {
    let mut request = client.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let content_type = header("content-type").unwrap_or_default();
    let retry_after = header("retry-after");
    let body = response.json().await.unwrap_or(Value::Null);
    Answer {
        status,
        content_type,
        retry_after,
        body,
    }
}

async fn get(client: &reqwest::Client, url: String) -> Answer {
    call(client, reqwest::Method::GET, url, None).await
}

async fn acquire(client: &reqwest::Client, base: &str, resource: &str, body: Value) -> Answer {
    call(
        client,
        reqwest::Method::POST,
        format!("{base}/locks/{resource}"),
        Some(body),
    )
    .await
}

/// Acquires `resource` for `owner` for `ttl_seconds`, without waiting.
async fn take(client: &reqwest::Client, base: &str, resource: &str, owner: &str, ttl_seconds: u64) -> Answer {
    acquire(
        client,
        base,
        resource,
        json!({"owner": owner, "ttl_seconds": ttl_seconds}),
    )
    .await
}

async fn release(client: &reqwest::Client, base: &str, resource: &str, owner: &str, token: &Value) -> Answer {
    let body = json!({"owner": owner, "fencing_token": token});
    call(
        client,
        reqwest::Method::DELETE,
        format!("{base}/locks/{resource}"),
        Some(body),
    )
    .await
}

/// Releases `holder`'s lease of `resource` (of `token`) through the server at `base`, and
/// answers what `waiter` got: the lock, with a greater token.
async fn hand_over(
    client: &reqwest::Client,
    base: &str,
    resource: &str,
    holder: &str,
    token: &Value,
    waiter: tokio::task::JoinHandle<Answer>,
) -> Answer {
    assert_eq!(release(client, base, resource, holder, token).await.status, 204);
    let answer = waiter.await.unwrap();
    assert_eq!(answer.body["acquired"], true, "{}", answer.body);
    assert!(answer.body["lock"]["fencing_token"].as_u64() > token.as_u64());
    answer
}

/// A unique resource name per test run, as the shared store outlives one test.
fn unique(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), common::wall_ms())
}

/// `racers` concurrent acquires of `resource`, the `i`th by the owner `owner(i)` through
/// `servers[i % 2]`; each answered 200.
async fn race(
    client: &reqwest::Client,
    servers: &[Server; 2],
    resource: &str,
    racers: usize,
    owner: impl Fn(usize) -> String,
) -> Vec<Answer> {
    let attempts: Vec<_> = (0..racers)
        .map(|i| {
            let url = format!("{}/locks/{resource}", servers[i % 2].url);
            let (client, body) = (client.clone(), json!({"owner": owner(i), "ttl_seconds": 60}));
            tokio::spawn(async move { call(&client, reqwest::Method::POST, url, Some(body)).await })
        })
        .collect();
    let mut answers = Vec::with_capacity(racers);
    for attempt in attempts {
        let answer = attempt.await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.body);
        answers.push(answer);
    }
    answers
}

/// The three behaviours of issue 4 for two servers sharing `store`, and issue 22's
/// contention by one owner.
async fn two_servers_share_one_store(store: &str) {
    let servers = [Server::on(store), Server::on(store)];
    let client = reqwest::Client::new();

    // 100 concurrent acquirers spread over both servers: exactly one winner, every round.
    for round in 0..5 {
        let resource = unique(&format!("race{round}"));
        let answers = race(&client, &servers, &resource, 100, |i| format!("w{i}")).await;
        let winners = answers.iter().filter(|a| a.body["acquired"] == true).count();
        assert_eq!(winners, 1, "round {round}");
    }

    // 50 concurrent acquires by one owner, spread over both servers: contention costs time,
    // never a 503 (issue 22). One grant, which every other acquire extends.
    let resource = unique("one-owner");
    let answers = race(&client, &servers, &resource, 50, |_| "racer".into()).await;
    let tokens: std::collections::HashSet<u64> = answers
        .iter()
        .map(|a| {
            assert_eq!(a.body["acquired"], true, "{}", a.body);
            a.body["lock"]["fencing_token"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(tokens.len(), 1, "{tokens:?}");
    let new = answers.iter().filter(|a| a.body["extended"] == false).count();
    assert_eq!(new, 1, "one grant, the others extensions");

    // Tokens strictly increase across both servers.
    let resource = unique("tokens");
    let mut last = 0;
    for i in 0..100 {
        let server = &servers[i % 2];
        let answer = take(&client, &server.url, &resource, "o", 60).await;
        let token = answer.body["lock"]["fencing_token"].clone();
        assert!(token.as_u64().unwrap() > last, "{} after {last}", answer.body);
        last = token.as_u64().unwrap();
        assert_eq!(
            release(&client, &servers[(i + 1) % 2].url, &resource, "o", &token)
                .await
                .status,
            204
        );
    }

    // A waiter on one server gets the lease as soon as the holder on the other releases.
    let resource = unique("handover");
    let held = take(&client, &servers[0].url, &resource, "a", 600).await;
    let token = held.body["lock"]["fencing_token"].clone();
    let mut waiter = {
        let (client, url) = (client.clone(), format!("{}/locks/{resource}", servers[1].url));
        tokio::spawn(async move {
            let body = json!({"owner": "b", "ttl_seconds": 60, "wait_ms": 60_000});
            call(&client, reqwest::Method::POST, url, Some(body)).await
        })
    };
    // The waiter must be waiting before the release, or it would not test the hand-over.
    queued(&client, &servers[1], &mut waiter).await;
    let answer = hand_over(&client, &servers[0].url, &resource, "a", &token, waiter).await;
    // Handed over on the release, not on the expiry: a waiter does not poll, it sleeps until
    // the holder's expiry unless the store's release feed wakes it, and here the new lease
    // began with more than nine of the old one's ten minutes left.
    let granted_at = common::ms(&answer.body["lock"]["acquired_at"]);
    let old_expiry = common::ms(&held.body["lock"]["expires_at"]);
    assert!(
        granted_at < old_expiry - 540_000,
        "granted at {granted_at}, the released lease ran to {old_expiry}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_redis() {
    two_servers_share_one_store(&shared_redis().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_redlock_of_three() {
    let nodes = RedisNodes::start(3);
    two_servers_share_one_store(&nodes.url()).await;
}

/// The acquires waiting on `server` now, from its /metrics.
async fn waiters(client: &reqwest::Client, server: &Server) -> u64 {
    let response = client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("fencelock_waiters "))
        .and_then(|v| v.trim().parse().ok())
        .expect("fencelock_waiters in /metrics")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_postgresql() {
    let postgres = Postgres::start();
    two_servers_share_one_store(&postgres.url()).await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_etcd() {
    two_servers_share_one_store(&shared_etcd().url()).await;
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_zookeeper() {
    two_servers_share_one_store(&shared_zookeeper().url()).await;
}

/// How many sessions watch the node of the lock `resource` on the shared ZooKeeper.
#[cfg(feature = "zookeeper")]
fn zookeeper_watchers(resource: &str) -> usize {
    let hex: String = resource.bytes().map(|b| format!("{b:02x}")).collect();
    shared_zookeeper().watchers(&format!("/fencelock/locks/{hex}"))
}

/// No herd on ZooKeeper: of two servers, only the one with a waiter for a lock watches it,
/// the waiter is handed the lock by that watch when the other server's client releases it,
/// and once nobody waits, nobody watches.
#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_zookeeper_only_the_server_with_a_waiter_watches_the_lock() {
    let url = shared_zookeeper().url();
    let (holding, waiting) = (Server::on(&url), Server::on(&url));
    let client = reqwest::Client::new();
    let resource = unique("watched");
    let held = take(&client, &holding.url, &resource, "holder", 600).await;
    assert_eq!(held.body["acquired"], true, "{}", held.body);
    assert_eq!(zookeeper_watchers(&resource), 0, "nobody waits yet");
    let waiter = tokio::spawn({
        let (client, base, resource) = (client.clone(), waiting.url.clone(), resource.clone());
        async move {
            let body = json!({"owner": "waiter", "ttl_seconds": 60, "wait_ms": 60_000});
            acquire(&client, &base, &resource, body).await
        }
    });
    eventually(
        Duration::from_secs(20),
        "the waiting server to watch the lock",
        async || {
            if zookeeper_watchers(&resource) != 0 {
                return Some(());
            }
            assert!(
                !waiter.is_finished(),
                "the waiter was answered while the lock was held"
            );
            None
        },
    )
    .await;
    assert_eq!(
        zookeeper_watchers(&resource),
        1,
        "only the server with a waiter watches the lock"
    );
    let released_at = std::time::Instant::now();
    let token = held.body["lock"]["fencing_token"].clone();
    hand_over(&client, &holding.url, &resource, "holder", &token, waiter).await;
    // By the watch, not by the holder's expiry ten minutes on.
    assert!(released_at.elapsed() < Duration::from_secs(20));
    eventually(
        Duration::from_secs(20),
        "the watch to end with the waiter",
        async || (zookeeper_watchers(&resource) == 0).then_some(()),
    )
    .await;
}

/// A lease granted by a server with `--lock-delay` keeps its lock closed after its expiry on
/// every server sharing the store — here one started without the flag: the delay is the
/// lease's, kept by the store — and a waiter there is granted once the delay ends. A release
/// has no delay, on either server.
async fn a_lock_delay_holds_across_servers(store: &str) {
    let delaying = Server::with(store, &[], &["--lock-delay", "2s"]);
    let plain = Server::on(store);
    let client = reqwest::Client::new();
    let resource = unique("delayed");
    let crashed = acquire(
        &client,
        &delaying.url,
        &resource,
        json!({"owner": "crashed", "ttl_ms": 300}),
    )
    .await;
    assert_eq!(crashed.body["acquired"], true, "{}", crashed.body);
    let closed_until = common::ms(&crashed.body["lock"]["expires_at"]) + 2_000;
    let waited = acquire(
        &client,
        &plain.url,
        &resource,
        json!({"owner": "next", "ttl_seconds": 60, "wait_ms": 30_000}),
    )
    .await;
    assert_eq!(waited.body["acquired"], true, "{}", waited.body);
    let acquired_at = common::ms(&waited.body["lock"]["acquired_at"]);
    assert!(
        acquired_at >= closed_until,
        "granted at {acquired_at}, before the lock-delay ended at {closed_until}"
    );

    let released = unique("released");
    let held = acquire(
        &client,
        &delaying.url,
        &released,
        json!({"owner": "a", "ttl_seconds": 60}),
    )
    .await;
    let token = held.body["lock"]["fencing_token"].clone();
    assert_eq!(
        release(&client, &plain.url, &released, "a", &token).await.status,
        204
    );
    let next = take(&client, &delaying.url, &released, "b", 60).await;
    assert_eq!(
        next.body["acquired"], true,
        "a release has no delay: {}",
        next.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_holds_across_two_servers_on_postgresql() {
    let postgres = Postgres::start();
    a_lock_delay_holds_across_servers(&postgres.url()).await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_holds_across_two_servers_on_etcd() {
    a_lock_delay_holds_across_servers(&shared_etcd().url()).await;
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_holds_across_two_servers_on_zookeeper() {
    a_lock_delay_holds_across_servers(&shared_zookeeper().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_holds_across_two_servers_on_redis() {
    a_lock_delay_holds_across_servers(&shared_redis().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_holds_across_two_servers_on_redlock() {
    let nodes = RedisNodes::start(3);
    a_lock_delay_holds_across_servers(&nodes.url()).await;
}

/// POSTs `body` to `base/path`: an acquire of a permit (`semaphores/NAME`) or a hold
/// (`rwlocks/NAME`).
async fn hold(client: &reqwest::Client, base: &str, path: &str, body: Value) -> Answer {
    call(
        client,
        reqwest::Method::POST,
        format!("{base}/{path}"),
        Some(body),
    )
    .await
}

/// Semaphores and read-write locks over two servers sharing `store`: a semaphore's limit
/// holds over both, a waiter for a permit on one server is handed the permit released on the
/// other, and a writer waiting on one server holds back new readers on the other until the
/// readers there let go — all woken by the release, not by an expiry.
async fn holds_span_two_servers(store: &str) {
    let servers = [Server::on(store), Server::on(store)];
    let client = reqwest::Client::new();

    // 40 racers for a semaphore of 3, spread over both servers: 3 permits, 3 tokens.
    let pool = format!("semaphores/{}", unique("pool"));
    let attempts: Vec<_> = (0..40)
        .map(|i| {
            let (client, base, pool) = (client.clone(), servers[i % 2].url.clone(), pool.clone());
            tokio::spawn(async move {
                let body = json!({"owner": format!("w{i}"), "limit": 3, "ttl_seconds": 600});
                hold(&client, &base, &pool, body).await
            })
        })
        .collect();
    let mut permits = Vec::new();
    for attempt in attempts {
        let answer = attempt.await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.body);
        if answer.body["acquired"] == true {
            permits.push(answer.body["permit"].clone());
        }
    }
    let mut tokens: Vec<u64> = permits
        .iter()
        .map(|p| p["fencing_token"].as_u64().unwrap())
        .collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "{permits:?}");

    let mut waiter = {
        let (client, base, pool) = (client.clone(), servers[1].url.clone(), pool.clone());
        tokio::spawn(async move {
            let body = json!({"owner": "next", "limit": 3, "ttl_seconds": 60, "wait_ms": 60_000});
            hold(&client, &base, &pool, body).await
        })
    };
    queued(&client, &servers[1], &mut waiter).await;
    let freed = &permits[0];
    let body = json!({"owner": freed["owner"], "fencing_token": freed["fencing_token"]});
    let url = format!("{}/{pool}", servers[0].url);
    let released = call(&client, reqwest::Method::DELETE, url, Some(body)).await;
    assert_eq!(released.status, 204, "{}", released.body);
    let next = waiter.await.unwrap();
    assert_eq!(next.body["acquired"], true, "{}", next.body);
    assert!(next.body["permit"]["fencing_token"].as_u64().unwrap() > tokens[2]);
    woken_before_expiry(&next.body["permit"], freed);

    // A reader on server 0; a writer waits on server 1, and its intent holds back a reader
    // that comes after it on server 0.
    let config = format!("rwlocks/{}", unique("config"));
    let read = json!({"owner": "reader", "mode": "read", "ttl_seconds": 600});
    let reader = hold(&client, &servers[0].url, &config, read).await;
    assert_eq!(reader.body["acquired"], true, "{}", reader.body);
    let mut writer = {
        let (client, base, config) = (client.clone(), servers[1].url.clone(), config.clone());
        tokio::spawn(async move {
            let body = json!({"owner": "writer", "mode": "write", "ttl_seconds": 60, "wait_ms": 60_000});
            hold(&client, &base, &config, body).await
        })
    };
    queued(&client, &servers[1], &mut writer).await;
    // The writer queues before its first try has left its intent in the store: a late reader
    // granted in between is let go, and tried again.
    eventually(
        Duration::from_secs(10),
        "the writer's intent to show",
        async || {
            let late = json!({"owner": "late", "mode": "read", "ttl_seconds": 60});
            let late = hold(&client, &servers[0].url, &config, late).await;
            if late.body["acquired"] == false {
                assert_eq!(late.body["writer_waits"], true, "{}", late.body);
                return Ok(());
            }
            let url = format!("{}/{config}", servers[0].url);
            let gone = call(
                &client,
                reqwest::Method::DELETE,
                url,
                Some(json!({"owner": "late"})),
            )
            .await;
            assert_eq!(gone.status, 204, "{}", gone.body);
            Err(late.body)
        },
    )
    .await;
    let url = format!("{}/{config}", servers[0].url);
    let gone = call(
        &client,
        reqwest::Method::DELETE,
        url,
        Some(json!({"owner": "reader"})),
    )
    .await;
    assert_eq!(gone.status, 204, "{}", gone.body);
    let written = writer.await.unwrap();
    assert_eq!(written.body["acquired"], true, "{}", written.body);
    assert_eq!(written.body["hold"]["mode"], "write");
    assert!(written.body["hold"]["fencing_token"].as_u64() > reader.body["hold"]["fencing_token"].as_u64());
    woken_before_expiry(&written.body["hold"], &reader.body["hold"]);
}

/// SIGTERM while the store hangs — its Redis node stops answering and closes nothing, as a
/// stopped process or a broken network does: every waiter still gets its answer,
/// `acquired: false`, and the server exits 0 within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_every_waiter_while_the_store_hangs() {
    let proxy = Proxy::start(shared_redis().port());
    let mut server = Server::on(&format!("redis://127.0.0.1:{}", proxy.port()));
    let client = reqwest::Client::new();
    let resource = unique("sigterm");
    let held = take(&client, &server.url, &resource, "holder", 60).await;
    assert_eq!(held.body["acquired"], true, "{}", held.body);
    let waiting: Vec<_> = (0..4)
        .map(|i| {
            let (client, base, resource) = (client.clone(), server.url.clone(), resource.clone());
            tokio::spawn(async move {
                let body = json!({"owner": format!("w{i}"), "ttl_seconds": 60, "wait_ms": 30_000});
                acquire(&client, &base, &resource, body).await
            })
        })
        .collect();
    eventually(Duration::from_secs(10), "the four acquires to wait", async || {
        (waiters(&client, &server).await == 4).then_some(())
    })
    .await;
    proxy.cut();
    let stopped = tokio::task::spawn_blocking(move || server.stop());
    for waiter in waiting {
        let answer = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("every waiter is answered within 5 s of SIGTERM")
            .unwrap();
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.body["acquired"], false, "{}", answer.body);
    }
    stopped.await.unwrap();
}

/// Polls `server`'s /metrics until the acquire `waiter` waits there, the only one; fails
/// with its answer if it was answered first.
async fn queued(client: &reqwest::Client, server: &Server, waiter: &mut tokio::task::JoinHandle<Answer>) {
    eventually(Duration::from_secs(10), "the waiter to queue", async || {
        let now = waiters(client, server).await;
        if now == 1 {
            return Ok(());
        }
        if waiter.is_finished() {
            let answer = (&mut *waiter).await.unwrap();
            panic!("answered without waiting: {} {}", answer.status, answer.body);
        }
        Err(format!("{now} waiters"))
    })
    .await;
}

/// Asserts that `granted` began while the ten-minute lease `released` had more than nine
/// minutes left: a waiter does not poll, so only the release's notice can have woken it.
fn woken_before_expiry(granted: &Value, released: &Value) {
    let granted_at = common::ms(&granted["acquired_at"]);
    let expiry = common::ms(&released["expires_at"]);
    assert!(
        granted_at < expiry - 540_000,
        "granted at {granted_at}, the released lease ran to {expiry}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_rwlocks_span_two_servers_on_redis() {
    holds_span_two_servers(&shared_redis().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_rwlocks_span_two_servers_on_redlock() {
    let nodes = RedisNodes::start(3);
    holds_span_two_servers(&nodes.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_stopped_under_load_gives_503_and_service_resumes_by_itself() {
    let mut postgres = Postgres::start();
    let server = Server::on(&postgres.url());
    let client = reqwest::Client::new();
    let held = take(&client, &server.url, "kept", "k", 600).await;
    assert_eq!(held.body["acquired"], true);

    // Load: clients cycling acquire/release on their own resources, recording what they saw.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..8)
        .map(|i| {
            let (client, url, stop) = (client.clone(), server.url.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let resource = format!("load-{i}");
                    let body = json!({"owner": format!("l{i}"), "ttl_seconds": 60});
                    let answer = acquire(&client, &url, &resource, body).await;
                    seen.push(answer.status);
                    if answer.body["acquired"] == true {
                        let token = &answer.body["lock"]["fencing_token"];
                        let answer = release(&client, &url, &resource, &format!("l{i}"), token).await;
                        seen.push(answer.status);
                    }
                }
                seen
            })
        })
        .collect();

    postgres.stop();
    let down = take(&client, &server.url, "while-down", "x", 60).await;
    assert_eq!(down.status, 503, "{}", down.body);
    assert_eq!(down.content_type, "application/problem+json");
    assert_eq!(down.body["status"], 503);
    let ready = get(&client, format!("{}/readyz", server.url)).await;
    assert_eq!(ready.status, 503);
    let alive = get(&client, format!("{}/healthz", server.url)).await;
    assert_eq!(alive.status, 200);

    postgres.start_again();
    eventually(
        Duration::from_secs(30),
        "ready again after PostgreSQL came back",
        async || (get(&client, format!("{}/readyz", server.url)).await.status == 200).then_some(()),
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut statuses = Vec::new();
    for worker in load {
        statuses.extend(worker.await.unwrap());
    }
    assert!(
        statuses.iter().all(|s| matches!(s, 200 | 204 | 503)),
        "{statuses:?}"
    );
    assert!(statuses.contains(&503), "the load never saw the outage");

    // Nothing acknowledged was lost; the answer that came back while down granted nothing.
    let kept = get(&client, format!("{}/locks/kept", server.url)).await;
    assert_eq!(kept.body, held.body["lock"]);
    let after = take(&client, &server.url, "while-down", "y", 60).await;
    assert_eq!(after.body["acquired"], true, "{}", after.body);
    let next = take(&client, &server.url, "after", "z", 60).await;
    assert!(next.body["lock"]["fencing_token"].as_u64() > held.body["lock"]["fencing_token"].as_u64());
}

/// Acquires until it works (an election may be under way, a store reconnecting), failing
/// after 30 s.
async fn acquire_eventually(client: &reqwest::Client, base: &str, resource: &str, owner: &str) -> Value {
    eventually(Duration::from_secs(30), "a grant", async || {
        let answer = take(client, base, resource, owner, 60).await;
        if answer.status == 200 {
            return Ok(answer.body);
        }
        assert_eq!(answer.status, 503, "{}", answer.body);
        Err(answer.body)
    })
    .await
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_cluster_needs_a_quorum_and_tokens_only_grow() {
    let mut cluster = EtcdCluster::start(3);
    let leader = cluster.wait_for_leader();
    let url = cluster.url();
    a_cluster_needs_a_quorum(
        &mut cluster,
        &url,
        leader,
        EtcdCluster::kill,
        EtcdCluster::start_again,
    )
    .await;
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_ensemble_needs_a_quorum_and_tokens_only_grow() {
    let mut ensemble = ZooKeeperEnsemble::start(3);
    let leader = ensemble.wait_for_leader();
    let url = ensemble.url();
    a_cluster_needs_a_quorum(
        &mut ensemble,
        &url,
        leader,
        ZooKeeperEnsemble::kill,
        ZooKeeperEnsemble::start_again,
    )
    .await;
}

/// A server on the three members of `cluster` at `url`: with `leader` stopped (the harder
/// case), locks keep working; with another stopped too, acquires fail with 503; with both
/// started again, service resumes and tokens only grew.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
async fn a_cluster_needs_a_quorum<C>(
    cluster: &mut C,
    url: &str,
    leader: usize,
    stop: fn(&mut C, usize),
    start: fn(&mut C, usize),
) {
    let server = Server::on(url);
    let client = reqwest::Client::new();
    let first = acquire_eventually(&client, &server.url, "a", "o").await;
    let mut highest = first["lock"]["fencing_token"].as_u64().unwrap();

    // One member down (the leader, the harder case): locks keep working.
    stop(cluster, leader);
    let second = acquire_eventually(&client, &server.url, "b", "o").await;
    assert_eq!(second["acquired"], true);
    assert!(second["lock"]["fencing_token"].as_u64().unwrap() > highest);
    highest = second["lock"]["fencing_token"].as_u64().unwrap();

    // Two down: no quorum, so acquires fail with 503 and nothing is granted.
    let other = (0..3).find(|i| *i != leader).unwrap();
    stop(cluster, other);
    for _ in 0..3 {
        let refused = take(&client, &server.url, "c", "o", 60).await;
        assert_eq!(refused.status, 503, "granted without a quorum: {}", refused.body);
        assert_eq!(refused.content_type, "application/problem+json");
    }

    // Members back: service resumes, and tokens only grew. A 503's outcome is unknown (the
    // stores' docs): a write that a member logged without a quorum may be applied once there
    // is one again, so "c" may be held by the owner that asked, never by anyone else.
    start(cluster, leader);
    start(cluster, other);
    let mut third = acquire_eventually(&client, &server.url, "c", "p").await;
    let mut floor = highest;
    if third["acquired"] == false {
        let holder = &third["holder"];
        assert_eq!(holder["owner"], "o", "{third}");
        let token = holder["fencing_token"].as_u64().unwrap();
        assert!(token > highest, "{third}");
        let released = release(&client, &server.url, "c", "o", &holder["fencing_token"]).await;
        assert_eq!(released.status, 204, "{}", released.body);
        floor = token;
        third = acquire_eventually(&client, &server.url, "c", "p").await;
    }
    assert_eq!(third["acquired"], true, "{third}");
    assert!(
        third["lock"]["fencing_token"].as_u64().unwrap() > floor,
        "{third} after {floor}"
    );
    let kept = get(&client, format!("{}/locks/b", server.url)).await;
    assert_eq!(kept.body, second["lock"]);
}

/// Polls `server`'s /readyz until it answers 200, failing after 30 s.
async fn wait_until_ready(client: &reqwest::Client, server: &Server) {
    eventually(
        Duration::from_secs(30),
        "ready after the store came back",
        async || (get(client, format!("{}/readyz", server.url)).await.status == 200).then_some(()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_of_three_needs_a_majority_and_leaves_nothing_half_held() {
    let mut nodes = RedisNodes::start(3);
    let server = Server::on(&nodes.url());
    // A one-node server on node 0, which stays up: it sees the keys Redlock left there.
    let survivor = Server::on(&nodes.node_url(0));
    let client = reqwest::Client::new();
    let first = acquire_eventually(&client, &server.url, "a", "o").await;
    let mut highest = first["lock"]["fencing_token"].as_u64().unwrap();

    // One node down: locks keep working, and tokens grow.
    nodes.kill(2);
    let second = take(&client, &server.url, "b", "o", 600).await;
    assert_eq!(second.body["acquired"], true, "{}", second.body);
    assert!(second.body["lock"]["fencing_token"].as_u64().unwrap() > highest);
    highest = second.body["lock"]["fencing_token"].as_u64().unwrap();

    // Two down: no majority, so acquire, renew and release answer 503 problems.
    nodes.kill(1);
    for _ in 0..3 {
        let refused = take(&client, &server.url, "c", "o", 600).await;
        assert_eq!(
            refused.status, 503,
            "granted without a majority: {}",
            refused.body
        );
        assert_eq!(refused.content_type, "application/problem+json");
        assert_eq!(refused.body["status"], 503);
        if let Some(retry_after) = &refused.retry_after {
            assert!(
                retry_after.parse::<u64>().is_ok_and(|s| s > 0),
                "Retry-After: {retry_after}"
            );
        }
    }
    let lease = &second.body["lock"];
    let body = json!({"owner": "o", "fencing_token": lease["fencing_token"], "ttl_seconds": 600});
    let url = format!("{}/locks/b/renew", server.url);
    let renewed = call(&client, reqwest::Method::POST, url, Some(body)).await;
    assert_eq!(
        renewed.status, 503,
        "renewed without a majority: {}",
        renewed.body
    );
    let released = release(&client, &server.url, "b", "o", &lease["fencing_token"]).await;
    assert_eq!(
        released.status, 503,
        "released without a majority: {}",
        released.body
    );
    assert_eq!(get(&client, format!("{}/readyz", server.url)).await.status, 503);
    assert_eq!(get(&client, format!("{}/healthz", server.url)).await.status, 200);
    // What node 0 granted to the refused acquires is undone there, long before their TTL.
    eventually(
        Duration::from_secs(10),
        "node 0 to hold nothing half",
        async || {
            let left = get(&client, format!("{}/locks/c", survivor.url)).await;
            if left.status == 404 {
                Ok(())
            } else {
                Err(left.body)
            }
        },
    )
    .await;

    // Node 1 back, empty: with node 0 it is a majority, and the only one, so every grant
    // reads node 0's counter and tokens keep growing. Then node 2, empty too: every majority
    // now holds a node that has the highest token.
    nodes.start_again(1);
    wait_until_ready(&client, &server).await;
    let third = acquire_eventually(&client, &server.url, "c", "p").await;
    assert_eq!(third["acquired"], true, "{third}");
    assert!(third["lock"]["fencing_token"].as_u64().unwrap() > highest);
    highest = third["lock"]["fencing_token"].as_u64().unwrap();
    nodes.start_again(2);
    for i in 0..10 {
        let next = take(&client, &server.url, "d", &format!("q{i}"), 60).await;
        assert_eq!(next.body["acquired"], true, "{}", next.body);
        let token = next.body["lock"]["fencing_token"].clone();
        assert!(token.as_u64().unwrap() > highest, "{} after {highest}", next.body);
        highest = token.as_u64().unwrap();
        let released = release(&client, &server.url, "d", &format!("q{i}"), &token).await;
        assert_eq!(released.status, 204, "{}", released.body);
    }
}

/// A semaphore on Redlock keeps its limit when each grant reached only some nodes (as one
/// does while a minority is briefly unreachable): with a limit of 2 and nodes A, B, C, the
/// permits p1 on {A, B}, p2 on {B, C} and p3 on {A, C} would each have a majority, and no
/// node more than 2 — three holders. Here the node left out of each grant is made to refuse
/// it by permits of another owner taken there straight (a one-node server on that node),
/// then let go. p1 and p2 are granted; p3 is told the two holders (200, not granted), as any
/// try on a full semaphore is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_on_redlock_has_no_more_holders_than_its_limit() {
    let nodes = RedisNodes::start(3);
    let redlock = Server::on(&nodes.url());
    let node: Vec<Server> = (0..3).map(|i| Server::on(&nodes.node_url(i))).collect();
    let client = reqwest::Client::new();
    let pool = "semaphores/pool";
    let permit = |owner: &str| json!({"owner": owner, "limit": 2, "ttl_seconds": 600});
    // Fills node `i` up to the limit with permits of "filler"s; returns them to give back.
    let fill = async |i: usize| {
        let mut taken = Vec::new();
        for owner in ["filler-1", "filler-2"] {
            let answer = hold(&client, &node[i].url, pool, permit(owner)).await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            if answer.body["acquired"] == false {
                break;
            }
            taken.push(answer.body["permit"].clone());
        }
        taken
    };
    let give_back = async |i: usize, taken: Vec<Value>| {
        for p in taken {
            let body = json!({"owner": p["owner"], "fencing_token": p["fencing_token"]});
            let url = format!("{}/{pool}", node[i].url);
            let answer = call(&client, reqwest::Method::DELETE, url, Some(body)).await;
            assert_eq!(answer.status, 204, "{}", answer.body);
        }
    };

    let mut answers = Vec::new();
    for (owner, left_out) in [("p1", 2), ("p2", 0), ("p3", 1)] {
        let taken = fill(left_out).await;
        let answer = hold(&client, &redlock.url, pool, permit(owner)).await;
        give_back(left_out, taken).await;
        answers.push(answer);
    }
    let shown = get(&client, format!("{}/{pool}", redlock.url)).await;
    let granted = answers.iter().filter(|a| a.body["acquired"] == true).count();
    assert!(
        granted <= 2,
        "{granted} permits granted of a semaphore of 2; it shows {}",
        shown.body
    );
    for answer in &answers[..2] {
        assert_eq!(answer.body["acquired"], true, "{} {}", answer.status, answer.body);
    }
    let third = &answers[2];
    assert_eq!(
        third.status, 200,
        "a full semaphore is not an outage: {}",
        third.body
    );
    assert_eq!(third.body["acquired"], false, "{}", third.body);
    let holders: Vec<&Value> = third.body["permits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["owner"])
        .collect();
    assert_eq!(holders, [&json!("p1"), &json!("p2")], "{}", third.body);
}
