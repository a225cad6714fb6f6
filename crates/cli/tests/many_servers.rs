//! Many `fencelock serve` processes on one shared store (PostgreSQL, etcd, ZooKeeper), and what the
//! API says when that store fails and comes back. Real processes, real servers, real HTTP.

mod common;

use std::time::{Duration, Instant};

use common::Server;
use fencelock_testkit::Postgres;
#[cfg(feature = "etcd")]
use fencelock_testkit::{EtcdCluster, shared_etcd};
#[cfg(feature = "zookeeper")]
use fencelock_testkit::{ZooKeeperEnsemble, shared_zookeeper};
use serde_json::{Value, json};

/// An answer: status and JSON body.
struct Answer {
    status: u16,
    content_type: String,
    body: Value,
}

async fn call(client: &reqwest::Client, method: reqwest::Method, url: String, body: Option<Value>) -> Answer {
    let mut request = client.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.json().await.unwrap_or(Value::Null);
    Answer {
        status,
        content_type,
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

/// A unique resource name per test run, as the shared store outlives one test.
fn unique(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), common::wall_ms())
}

/// The three behaviours of issue 4 for two servers sharing `store`.
async fn two_servers_share_one_store(store: &str) {
    let servers = [Server::on(store), Server::on(store)];
    let client = reqwest::Client::new();

    // 100 concurrent acquirers spread over both servers: exactly one winner, every round.
    for round in 0..5 {
        let resource = unique(&format!("race{round}"));
        let attempts: Vec<_> = (0..100)
            .map(|i| {
                let url = format!("{}/locks/{resource}", servers[i % 2].url);
                let client = client.clone();
                tokio::spawn(async move {
                    let body = json!({"owner": format!("w{i}"), "ttl_seconds": 60});
                    call(&client, reqwest::Method::POST, url, Some(body)).await
                })
            })
            .collect();
        let mut winners = 0;
        for attempt in attempts {
            let answer = attempt.await.unwrap();
            assert_eq!(answer.status, 200, "{}", answer.body);
            winners += usize::from(answer.body["acquired"] == true);
        }
        assert_eq!(winners, 1, "round {round}");
    }

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
    let waiter = {
        let (client, url) = (client.clone(), format!("{}/locks/{resource}", servers[1].url));
        tokio::spawn(async move {
            let body = json!({"owner": "b", "ttl_seconds": 60, "wait_ms": 60_000});
            call(&client, reqwest::Method::POST, url, Some(body)).await
        })
    };
    // The waiter must be waiting before the release, or it would not test the hand-over.
    let deadline = Instant::now() + Duration::from_secs(10);
    while waiters(&client, &servers[1]).await != 1 {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let released_at = Instant::now();
    assert_eq!(
        release(&client, &servers[0].url, &resource, "a", &token)
            .await
            .status,
        204
    );
    let answer = waiter.await.unwrap();
    assert_eq!(answer.body["acquired"], true, "{}", answer.body);
    assert!(answer.body["lock"]["fencing_token"].as_u64() > token.as_u64());
    // Handed over on the release, not on the expiry 600 s away.
    assert!(released_at.elapsed() < Duration::from_secs(30));
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
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = get(&client, format!("{}/readyz", server.url)).await;
        if ready.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ready again 30 s after PostgreSQL came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

/// Acquires until it works (an election may be under way), failing after `limit`.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
async fn acquire_eventually(client: &reqwest::Client, base: &str, resource: &str, owner: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = take(client, base, resource, owner, 60).await;
        if answer.status == 200 {
            return answer.body;
        }
        assert_eq!(answer.status, 503, "{}", answer.body);
        assert!(Instant::now() < deadline, "no grant within 30 s: {}", answer.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
        EtcdCluster::restart,
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
        ZooKeeperEnsemble::stop,
        ZooKeeperEnsemble::start_again,
    )
    .await;
}

/// A server on the three members of `cluster` at `url`: with `leader` stopped (the harder
/// case), locks keep working; with another stopped too, acquires fail with 503 and nothing
/// is granted; with both started again, service resumes and tokens only grew.
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

    // Members back: service resumes, "c" was never granted, and tokens only grew.
    start(cluster, leader);
    start(cluster, other);
    let third = acquire_eventually(&client, &server.url, "c", "p").await;
    assert_eq!(third["acquired"], true, "{third}");
    assert!(third["lock"]["fencing_token"].as_u64().unwrap() > highest);
    let kept = get(&client, format!("{}/locks/b", server.url)).await;
    assert_eq!(kept.body, second["lock"]);
}
