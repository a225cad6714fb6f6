//! One structured log line, with its `kind`, for every grant, extension, replacement,
//! renewal, release, refusal and expiry of a permit or a hold.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::TestServer;
use fencelock_core::{ManualClock, MemoryStore, Timestamp};
use fencelock_server::Config;
use fencelock_testkit::eventually;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_permit_and_hold_event_is_one_log_line_with_its_kind() {
    let lines = fencelock_testkit::logs(tracing::Level::INFO);

    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_795_933_800_000)));
    let config = Config {
        purge_interval: Duration::from_millis(10),
        ..Config::default()
    };
    let mut s = TestServer::start(Arc::new(MemoryStore::with_clock(clock.clone())), config).await;
    s.clock = Some(clock);
    let permit = |owner: &str, limit: u64| json!({"owner": owner, "limit": limit, "ttl_seconds": 60});
    let mode = |owner: &str, mode: &str| json!({"owner": owner, "mode": mode, "ttl_seconds": 60});

    let a = s.grant_hold("semaphores", "pool", permit("a", 1)).await;
    s.grant_hold("semaphores", "pool", permit("a", 1)).await;
    s.hold("semaphores", "pool", permit("b", 1)).await;
    s.hold("semaphores", "pool", permit("b", 2)).await;
    s.renew_hold("semaphores", "pool", json!({"owner": "a", "ttl_seconds": 60}))
        .await;
    s.release_hold("semaphores", "pool", json!({"owner": "b"})).await;
    s.release_hold(
        "semaphores",
        "pool",
        json!({"owner": "a", "fencing_token": a["fencing_token"]}),
    )
    .await;
    s.grant_hold("rwlocks", "doc", mode("r", "read")).await;
    s.grant_hold("rwlocks", "doc", mode("r", "write")).await;
    s.hold("rwlocks", "doc", mode("x", "read")).await;
    s.renew_hold(
        "rwlocks",
        "doc",
        json!({"owner": "x", "ttl_seconds": 60, "fencing_token": 1}),
    )
    .await;
    s.grant_hold(
        "rwlocks",
        "short",
        json!({"owner": "e", "mode": "read", "ttl_seconds": 1}),
    )
    .await;
    s.advance(Duration::from_secs(2));

    let events = eventually(Duration::from_secs(10), "an expiry to be logged", async || {
        let events = lines.of("fencelock::lease");
        if events.iter().any(|e| e["event"] == "expire") {
            Ok(events)
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
    let told: Vec<(&str, &str, Option<&str>)> = events
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap(),
                e["kind"].as_str().unwrap(),
                e["reason"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        told,
        [
            ("grant", "semaphore", None),
            ("extend", "semaphore", None),
            ("refuse", "semaphore", Some("held")),
            ("refuse", "semaphore", Some("limit_mismatch")),
            ("renew", "semaphore", None),
            ("refuse", "semaphore", Some("not_found")),
            ("release", "semaphore", None),
            ("grant", "rwlock", None),
            ("replace", "rwlock", None),
            ("grant", "rwlock", None),
            ("refuse", "rwlock", Some("held")),
            ("refuse", "rwlock", Some("not_found")),
            ("grant", "rwlock", None),
            ("expire", "rwlock", None),
        ]
    );
    for event in &events {
        assert!(
            event["resource"].is_string() && event["owner"].is_string(),
            "{event}"
        );
    }
    for event in events.iter().filter(|e| e["event"] != "refuse") {
        assert!(event["token"].as_u64().is_some(), "{event}");
    }
    assert_eq!(events[2]["holder"], "a", "a refusal says who holds");
    assert_eq!(events[6]["token"], a["fencing_token"]);
    assert!(events[6]["held_ms"].as_u64().is_some(), "{}", events[6]);
    assert!(
        events[8]["new_token"].as_u64() > events[8]["token"].as_u64(),
        "{}",
        events[8]
    );
    assert_eq!(events[13]["resource"], "short");
}
