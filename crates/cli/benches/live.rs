//! How live "follow it live" is (issue 27), measured on every shared store, never asserted:
//! the delay from a grant's answer on one `fencelock serve` to its event on another server's
//! stream (`GET /events`), both servers on the same store; and an election's hand-over when
//! its leader dies: a leader that stops renewing (killed) through one server, a candidate
//! waiting through the other, and the time from the leadership's end (`expires_at`) to the
//! next leader's `since` — what comes on top of the TTL the dead leader had left.
//!
//! `cargo bench --all-features -p fencelock --bench live [-- --stores postgres,redis
//! --rounds 300]`. Each store is a throwaway server the testkit starts (as the tests do);
//! the two `fencelock serve` processes are the binary this bench was built with. The figures
//! are p50 and p99 over the rounds, on a shared machine: compare stores of one run.

// The tests' helpers (which allow their own dead code).
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::Server;
use fencelock_testkit::sse::Message;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

/// The shared stores, by the name `--stores` takes.
const STORES: [&str; 5] = ["postgres", "redis", "redlock", "etcd", "zookeeper"];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (stores, rounds) = arguments();
    for store in stores {
        // Each store's server lives as long as its measurement.
        match store.as_str() {
            "postgres" => {
                let postgres = fencelock_testkit::Postgres::start();
                delay(&postgres.url(), "PostgreSQL", rounds).await;
            }
            "redis" => {
                let redis = fencelock_testkit::Redis::start();
                delay(&redis.url(), "Redis", rounds).await;
            }
            "redlock" => {
                let nodes = fencelock_testkit::RedisNodes::start(3);
                delay(&nodes.url(), "Redlock of 3", rounds).await;
            }
            #[cfg(feature = "etcd")]
            "etcd" => {
                let etcd = fencelock_testkit::Etcd::start();
                delay(&etcd.url(), "etcd", rounds).await;
            }
            #[cfg(feature = "zookeeper")]
            "zookeeper" => {
                let zookeeper = fencelock_testkit::ZooKeeper::start();
                delay(&zookeeper.url(), "ZooKeeper", rounds).await;
            }
            other => panic!("--stores: {other} is not among {STORES:?} (or its feature is off)"),
        }
    }
}

/// `--stores A,B` (default every shared store) and `--rounds N` (default 300); cargo's own
/// `--bench` flag is passed to every bench and ignored.
fn arguments() -> (Vec<String>, usize) {
    let mut stores: Vec<String> = STORES.iter().map(|s| (*s).to_owned()).collect();
    let mut rounds = 300;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--stores" => {
                stores = args
                    .next()
                    .expect("--stores A,B")
                    .split(',')
                    .map(str::to_owned)
                    .collect()
            }
            "--rounds" => rounds = args.next().and_then(|n| n.parse().ok()).expect("--rounds N"),
            "--bench" => {}
            other => panic!("unknown argument {other}: --stores A,B --rounds N"),
        }
    }
    (stores, rounds)
}

/// The delay from a grant's answer on one server to its event on the other's stream, over
/// `rounds` grants: printed as p50 and p99.
async fn delay(store: &str, what: &str, rounds: usize) {
    let (a, b) = (Server::on(store), Server::on(store));
    handover(&a, &b, what, rounds / 15).await;
    let prefix = fencelock_testkit::fixtures::unique_prefix().replace('/', ":");
    let http = reqwest::Client::new();
    let mut on_b = common::events_from_now(&b, &prefix, WAIT).await;
    let mut delays = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let name = format!("{prefix}{round}");
        let answer = http
            .post(format!("{}/locks/{name}", a.url))
            .json(&json!({"owner": "w", "ttl_seconds": 30}))
            .send()
            .await
            .expect("the server answers");
        assert_eq!(answer.status(), 200, "{name}");
        let answered = Instant::now();
        on_b.events_until(WAIT, |m: &Message| m.event == "grant" && m.json()["name"] == name)
            .await;
        delays.push(answered.elapsed());
    }
    let grants = delays.len();
    let (p50, p99) = p50_p99(delays);
    println!("event delay across servers on {what}: p50 {p50:.1} ms, p99 {p99:.1} ms ({grants} grants)");
}

/// The p50 and p99 of `samples`, in milliseconds.
fn p50_p99(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_secs_f64() * 1000.0;
    (at(0.5), at(0.99))
}

/// `rounds` hand-overs of one election: a leader elected through `a` for 1 s that never
/// renews (as if killed), a candidate waiting through `b`; printed as p50 and p99 of the next
/// leader's `since` minus the dead leader's `expires_at` (both by the store's clock).
async fn handover(a: &Server, b: &Server, what: &str, rounds: usize) {
    let http = reqwest::Client::new();
    let name = fencelock_testkit::fixtures::unique_prefix().replace('/', ":") + "leader";
    // The leadership `candidate` won through `server`, waiting up to `wait_ms`.
    let elected = |server: &Server, candidate: &str, wait_ms: u64| {
        let answer = http
            .post(format!("{}/elections/{name}", server.url))
            .json(&json!({"candidate": candidate, "ttl_ms": 1000, "wait_ms": wait_ms}))
            .send();
        async move {
            let answer: serde_json::Value = answer
                .await
                .expect("the server answers")
                .json()
                .await
                .expect("JSON");
            assert_eq!(answer["elected"], true, "{answer}");
            answer["leadership"].clone()
        }
    };
    let ms = |leadership: &serde_json::Value, field: &str| {
        let text = leadership[field].as_str().expect("a time");
        humantime::parse_rfc3339(text).expect("RFC 3339")
    };
    let mut gaps = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let dead = elected(a, &format!("dead-{round}"), 5_000).await;
        let next = elected(b, &format!("next-{round}"), 10_000).await;
        let (ended, since) = (ms(&dead, "expires_at"), ms(&next, "since"));
        gaps.push(since.duration_since(ended).unwrap_or_default());
        let resign = json!({"candidate": format!("next-{round}"), "term": next["term"]});
        http.delete(format!("{}/elections/{name}", b.url))
            .json(&resign)
            .send()
            .await
            .expect("resigned");
    }
    let handovers = gaps.len();
    let (p50, p99) = p50_p99(gaps);
    println!(
        "election hand-over after a dead leader's term ends on {what}: p50 {p50:.1} ms, p99 {p99:.1} ms ({handovers} hand-overs, TTL 1 s)"
    );
}
