//! `GET /events` through a real HTTP client: one event per change of every kind, resuming
//! without a gap or a duplicate, `reset` and a snapshot outside the window or after a
//! restart, heartbeats, a consumer that never reads cut off while the server answers others,
//! the limits, and the filters (prefix, kinds, the caller's rights).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestServer, principal};
use fencelock_core::{LockStore, MemoryStore};
use fencelock_server::Config;
use fencelock_server::auth::{AuthFile, Keyring};
use fencelock_server::hub::HubLimits;
use fencelock_testkit::eventually;
use fencelock_testkit::sse::{EventStream, Message};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(10);

/// An event as a test compares it: its name, kind, name of the lock and owner.
fn brief(message: &Message) -> (String, String, String, String) {
    let data = message.json();
    let text = |key: &str| data[key].as_str().unwrap_or_default().to_owned();
    (message.event.clone(), text("kind"), text("name"), text("owner"))
}

fn briefs(messages: &[Message]) -> Vec<(String, String, String, String)> {
    messages.iter().map(brief).collect()
}

fn ev(event: &str, kind: &str, name: &str, owner: &str) -> (String, String, String, String) {
    (event.into(), kind.into(), name.into(), owner.into())
}

/// The next `n` events of `stream`.
async fn take(stream: &mut EventStream, n: usize) -> Vec<Message> {
    let mut events = Vec::new();
    while events.len() < n {
        match stream.next_event(WAIT).await {
            Some(event) => events.push(event),
            None => panic!("the stream ended after {events:#?}"),
        }
    }
    events
}

fn config_with(change: impl FnOnce(&mut HubLimits)) -> Config {
    let mut events = HubLimits::default();
    change(&mut events);
    Config {
        events,
        purge_interval: Duration::from_millis(20),
        ..Config::default()
    }
}

#[tokio::test]
async fn every_change_of_every_kind_is_one_event_in_order() {
    let s = TestServer::manual_with(config_with(|_| {})).await;
    let (mut stream, first) = s.events("", None, None).await;
    assert!(
        first.is_comment() && first.comments[0].starts_with("heartbeat "),
        "{first:?}"
    );

    // A lock: grant, extend, renew, a refusal after a wait, release, expiry, force-release.
    let lease = s.grant("a", "w1", 30).await;
    s.grant("a", "w1", 30).await;
    let renewed = s.renew("a", json!({"owner": "w1", "ttl_seconds": 30})).await;
    assert_eq!(renewed.status, StatusCode::OK);
    let refused = s
        .acquire("a", json!({"owner": "w2", "ttl_seconds": 30, "wait_ms": 50}))
        .await;
    assert_eq!(refused.body["acquired"], false, "{refused:?}");
    let released = s.release("a", json!({"owner": "w1"})).await;
    assert_eq!(released.status, StatusCode::NO_CONTENT);
    s.grant("a", "w1", 1).await;
    s.advance(Duration::from_secs(2));
    let events = take(&mut stream, 7).await;
    assert_eq!(
        briefs(&events),
        [
            ev("grant", "lock", "a", "w1"),
            ev("extend", "lock", "a", "w1"),
            ev("renew", "lock", "a", "w1"),
            ev("refuse", "lock", "a", "w2"),
            ev("release", "lock", "a", "w1"),
            ev("grant", "lock", "a", "w1"),
            ev("expire", "lock", "a", "w1"),
        ]
    );
    // The lease as the API shows it, its token, and how long it was held.
    let grant = events[0].json();
    assert_eq!(grant["lease"], lease);
    assert_eq!(grant["fencing_token"], lease["fencing_token"]);
    assert_eq!(grant["at"], lease["acquired_at"]);
    assert_eq!(events[3].json()["fencing_token"], Value::Null);
    assert!(events[4].json()["held_ms"].is_u64(), "{:?}", events[4]);
    assert_eq!(events[6].json()["held_ms"], 1000);
    // Ids increase, one epoch.
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_deref().unwrap()).collect();
    let seqs: Vec<u64> = ids
        .iter()
        .map(|id| id.split_once('-').unwrap().1.parse().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    let forced_lease = s.grant("f", "w1", 30).await;
    let forced = s
        .send(Method::DELETE, "/locks/f", Some(json!({"force": true})))
        .await;
    assert_eq!(forced.status, StatusCode::NO_CONTENT, "{forced:?}");
    let events = take(&mut stream, 2).await;
    assert_eq!(
        briefs(&events),
        [
            ev("grant", "lock", "f", "w1"),
            ev("force-release", "lock", "f", "w1")
        ]
    );
    assert_eq!(events[1].json()["lease"], forced_lease);

    // A deadlock: w1 holds x and waits for y, which w2 holds; w2 then asks for x.
    s.grant("x", "w1", 30).await;
    s.grant("y", "w2", 30).await;
    let waiting = {
        let (client, base) = (s.client.clone(), s.base.clone());
        tokio::spawn(async move {
            client
                .post(format!("{base}/locks/y"))
                .json(&json!({"owner": "w1", "ttl_seconds": 30, "wait_ms": 10_000}))
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    s.until_waiters(1).await;
    let deadlock = s
        .acquire("x", json!({"owner": "w2", "ttl_seconds": 30, "wait_ms": 10_000}))
        .await;
    assert_eq!(deadlock.status, StatusCode::CONFLICT, "{deadlock:?}");
    s.release("y", json!({"owner": "w2"})).await;
    assert_eq!(waiting.await.unwrap(), StatusCode::OK);
    let events = take(&mut stream, 5).await;
    assert_eq!(
        briefs(&events),
        [
            ev("grant", "lock", "x", "w1"),
            ev("grant", "lock", "y", "w2"),
            ev("deadlock", "lock", "x", "w2"),
            ev("release", "lock", "y", "w2"),
            ev("grant", "lock", "y", "w1"),
        ]
    );

    // A semaphore's permit and a read-write lock's hold, shown as the API shows them.
    let permit = s
        .grant_hold(
            "semaphores",
            "pool",
            json!({"owner": "w1", "ttl_seconds": 30, "limit": 2}),
        )
        .await;
    let renewed = s
        .renew_hold("semaphores", "pool", json!({"owner": "w1", "ttl_seconds": 30}))
        .await;
    assert_eq!(renewed.status, StatusCode::OK);
    s.release_hold("semaphores", "pool", json!({"owner": "w1"})).await;
    let read = s
        .grant_hold(
            "rwlocks",
            "cat",
            json!({"owner": "w1", "ttl_seconds": 30, "mode": "read"}),
        )
        .await;
    let write = s
        .grant_hold(
            "rwlocks",
            "cat",
            json!({"owner": "w1", "ttl_seconds": 30, "mode": "write"}),
        )
        .await;
    s.release_hold("rwlocks", "cat", json!({"owner": "w1"})).await;
    let events = take(&mut stream, 7).await;
    assert_eq!(
        briefs(&events),
        [
            ev("grant", "semaphore", "pool", "w1"),
            ev("renew", "semaphore", "pool", "w1"),
            ev("release", "semaphore", "pool", "w1"),
            ev("grant", "rwlock", "cat", "w1"),
            // An upgrade ends the read hold and grants the write hold.
            ev("release", "rwlock", "cat", "w1"),
            ev("grant", "rwlock", "cat", "w1"),
            ev("release", "rwlock", "cat", "w1"),
        ]
    );
    assert_eq!(events[0].json()["hold"], permit);
    assert_eq!(events[3].json()["hold"], read);
    assert_eq!(events[4].json()["hold"], read);
    assert_eq!(events[5].json()["hold"], write);
}

#[tokio::test]
async fn a_stream_resumed_from_an_id_gets_every_later_event_once() {
    let s = TestServer::real().await;
    let (mut stream, _) = s.events("", None, None).await;
    for name in ["r1", "r2", "r3"] {
        s.grant(name, "w", 30).await;
    }
    let seen = take(&mut stream, 3).await;
    drop(stream);
    for name in ["r4", "r5"] {
        s.grant(name, "w", 30).await;
    }
    let resume_from = seen[1].id.clone().unwrap();

    // By Last-Event-ID, as an EventSource reconnects; and by ?since=.
    let (mut by_header, first) = s.events("", None, Some(&resume_from)).await;
    let mut events = vec![first];
    events.extend(take(&mut by_header, 2).await);
    let names = |events: &[Message]| -> Vec<String> { events.iter().map(|e| brief(e).2).collect() };
    assert_eq!(names(&events), ["r3", "r4", "r5"]);
    let (mut by_query, first) = s.events(&format!("?since={resume_from}"), None, None).await;
    let mut again = vec![first];
    again.extend(take(&mut by_query, 2).await);
    assert_eq!(names(&again), ["r3", "r4", "r5"]);
    assert_eq!(
        events.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        again.iter().map(|e| e.id.clone()).collect::<Vec<_>>()
    );

    // Then the live tail, nothing twice.
    s.grant("r6", "w", 30).await;
    assert_eq!(names(&take(&mut by_header, 1).await), ["r6"]);
    assert_eq!(names(&take(&mut by_query, 1).await), ["r6"]);

    // Resuming from the last id gets nothing old: the next event is the next change.
    let last = events.last().unwrap().id.clone().unwrap();
    let (_, first) = s.events("", None, Some(&last)).await;
    assert_eq!(brief(&first).2, "r6");
}

/// The events of a `reset`: the reset, then every snapshot until the first other event.
async fn reset_and_snapshot(stream: &mut EventStream, first: Message, leases: usize) -> Vec<Message> {
    assert_eq!(first.event, "reset", "{first:?}");
    let snapshot = take(stream, leases).await;
    for event in &snapshot {
        assert_eq!(event.event, "snapshot", "{event:?}");
        assert_eq!(event.id, first.id, "a snapshot is as of the reset's id");
    }
    snapshot
}

#[tokio::test]
async fn an_id_out_of_the_window_gets_a_reset_then_a_snapshot_then_the_tail() {
    let s = TestServer::start(
        Arc::new(MemoryStore::new()),
        config_with(|events| events.retention = 2),
    )
    .await;
    let (mut stream, _) = s.events("?prefix=w:", None, None).await;
    let first = s.grant("w:a", "o1", 30).await;
    s.grant_hold(
        "semaphores",
        "w:s",
        json!({"owner": "o2", "ttl_seconds": 30, "limit": 2}),
    )
    .await;
    s.grant_hold(
        "rwlocks",
        "w:r",
        json!({"owner": "o3", "ttl_seconds": 30, "mode": "read"}),
    )
    .await;
    s.grant("other", "o4", 30).await;
    let seen = take(&mut stream, 3).await;
    let oldest = seen[0].id.clone().unwrap();

    // Three more events since the first: the window of two has lost the second.
    let (mut resumed, first_message) = s.events("?prefix=w:", None, Some(&oldest)).await;
    let snapshot = reset_and_snapshot(&mut resumed, first_message, 3).await;
    let mut shown: Vec<_> = briefs(&snapshot);
    shown.sort();
    assert_eq!(
        shown,
        [
            ev("snapshot", "lock", "w:a", "o1"),
            ev("snapshot", "rwlock", "w:r", "o3"),
            ev("snapshot", "semaphore", "w:s", "o2"),
        ]
    );
    let lock = snapshot.iter().find(|e| brief(e).1 == "lock").unwrap();
    assert_eq!(lock.json()["lease"], first);
    s.release("w:a", json!({"owner": "o1"})).await;
    assert_eq!(
        briefs(&take(&mut resumed, 1).await),
        [ev("release", "lock", "w:a", "o1")]
    );

    // An id the server never gave (from the future, or of another epoch) is out of it too.
    let (epoch, _) = oldest.split_once('-').unwrap();
    for id in [format!("{epoch}-999999"), "1-1".to_owned()] {
        let (mut stream, first) = s.events("?prefix=w:", None, Some(&id)).await;
        reset_and_snapshot(&mut stream, first, 2).await;
    }
}

#[tokio::test]
async fn after_a_restart_an_old_id_gets_a_reset_and_the_leases_the_store_kept() {
    let store: Arc<dyn LockStore> = Arc::new(MemoryStore::new());
    let s = TestServer::start(store.clone(), Config::default()).await;
    let (mut stream, _) = s.events("", None, None).await;
    let lease = s.grant("kept", "w", 60).await;
    let id = take(&mut stream, 1).await[0].id.clone().unwrap();
    drop(stream);
    s.stop().await.unwrap();

    // The same store behind a new server: its ids are of another epoch.
    let s = TestServer::start(store, Config::default()).await;
    s.grant("new", "w", 60).await;
    let (mut stream, first) = s.events("", None, Some(&id)).await;
    let snapshot = reset_and_snapshot(&mut stream, first, 2).await;
    let kept = snapshot.iter().find(|e| brief(e).2 == "kept").unwrap();
    assert_eq!(kept.json()["lease"], lease);
    assert!(snapshot.iter().any(|e| brief(e).2 == "new"));
    assert_ne!(
        kept.id.as_deref().unwrap().split_once('-').unwrap().0,
        id.split_once('-').unwrap().0
    );
}

#[tokio::test]
async fn a_quiet_stream_gets_heartbeats_with_the_current_id() {
    let s = TestServer::start(
        Arc::new(MemoryStore::new()),
        config_with(|events| events.heartbeat = Duration::from_millis(50)),
    )
    .await;
    s.grant("elsewhere", "w", 30).await;
    let (mut stream, first) = s.events("?prefix=mine", None, None).await;
    let id = first.id.clone().unwrap();
    assert_eq!(first.comments, [format!("heartbeat {id}")]);
    assert!(id.ends_with("-1"), "the last event's id: {id}");
    s.grant("elsewhere2", "w", 30).await;
    // Events the filter leaves out still move the heartbeat's id, so a client resuming from
    // it is not sent back to ids it has no use for.
    let heartbeat = eventually(WAIT, "a heartbeat with the new id", async || {
        let message = stream.next_message(WAIT).await.unwrap();
        match message.id.as_deref() {
            Some(id) if id.ends_with("-2") && message.is_comment() => Ok(message),
            _ => Err(format!("{message:?}")),
        }
    })
    .await;
    assert_eq!(
        heartbeat.comments,
        [format!("heartbeat {}", heartbeat.id.unwrap())]
    );
}

#[tokio::test]
async fn a_consumer_that_never_reads_is_cut_off_and_the_server_answers_others() {
    let s = TestServer::start(
        Arc::new(MemoryStore::new()),
        config_with(|events| events.buffer = 8),
    )
    .await;
    // A client with a small receive window that reads nothing after the head.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stuck = socket.connect(s.addr).await.unwrap();
    stuck
        .write_all(b"GET /events HTTP/1.1\r\nhost: fencelock\r\n\r\n")
        .await
        .unwrap();
    s.until_series("fencelock_event_streams", 1.0).await;
    s.grant("busy", "w", 60).await;

    // Renewals go on being answered while the stream's buffers fill, until it is cut off.
    let mut renewals = 0;
    while common::series_value(&s.metrics().await, "fencelock_event_streams_cut_total") < 1.0 {
        for _ in 0..100 {
            let answer = s.renew("busy", json!({"owner": "w", "ttl_seconds": 60})).await;
            assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        }
        renewals += 100;
        assert!(renewals < 100_000, "never cut off");
    }
    assert_eq!(s.get("busy").await.status, StatusCode::OK);

    // What it reads at last: the events it had room for, `overflow`, and the end.
    let mut received = Vec::new();
    tokio::time::timeout(WAIT, stuck.read_to_end(&mut received))
        .await
        .expect("the server closes the stream")
        .unwrap();
    let text = String::from_utf8_lossy(&received);
    assert!(text.contains("event: renew"), "{text}");
    let overflow = text.rfind("event: overflow").expect("an overflow event");
    assert!(
        !text[overflow..].contains("event: renew"),
        "nothing after the overflow"
    );
    s.until_series("fencelock_event_streams", 0.0).await;
}

#[tokio::test]
async fn prefix_and_kinds_filter_and_bad_parameters_are_refused() {
    let s = TestServer::real().await;
    let (mut stream, _) = s.events("?prefix=p:&kinds=semaphore,lock", None, None).await;
    s.grant("q:1", "w", 30).await;
    s.grant_hold(
        "rwlocks",
        "p:rw",
        json!({"owner": "w", "ttl_seconds": 30, "mode": "read"}),
    )
    .await;
    s.grant_hold(
        "semaphores",
        "p:s",
        json!({"owner": "w", "ttl_seconds": 30, "limit": 1}),
    )
    .await;
    s.grant("p:1", "w", 30).await;
    assert_eq!(
        briefs(&take(&mut stream, 2).await),
        [
            ev("grant", "semaphore", "p:s", "w"),
            ev("grant", "lock", "p:1", "w")
        ]
    );

    for (query, last, field) in [
        ("?kinds=locks", None, "kinds"),
        ("?kinds=", None, "kinds"),
        ("?since=12", None, "since"),
        ("?since=1-x", None, "since"),
        ("", Some("nonsense"), "Last-Event-ID"),
        ("?prefix=a%00", None, "prefix"),
    ] {
        let answer = s.events_request(query, None, last).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::UNPROCESSABLE_ENTITY, "{query}");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["errors"][0]["field"], field, "{query}: {body}");
    }
}

const READER: &str = "reader-token-1";
const WRITER: &str = "writer-token-2";

#[tokio::test]
async fn a_caller_sees_only_the_names_it_may_read_and_has_few_streams() {
    let file = [
        principal("reader", READER, r#"{ prefix = "pub:", rights = ["read"] }"#),
        principal("writer", WRITER, r#"{ prefix = "", rights = ["read", "lock"] }"#),
    ]
    .concat();
    let config = Config {
        auth: Some(Keyring::new(AuthFile::parse(&file).unwrap())),
        ..config_with(|events| {
            events.streams_per_principal = 2;
            // A stream whose client is gone is found out when its next line is written.
            events.heartbeat = Duration::from_millis(50);
        })
    };
    let s = TestServer::start(Arc::new(MemoryStore::new()), config).await;

    let unauthenticated = s.events_request("", None, None).send().await.unwrap();
    assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);

    let (mut stream, _) = s.events("", Some(READER), None).await;
    for name in ["secret:1", "pub:1"] {
        let answer = s
            .send_as(
                Some(WRITER),
                Method::POST,
                &format!("/locks/{name}"),
                Some(json!({"owner": "w", "ttl_seconds": 30})),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    assert_eq!(
        briefs(&take(&mut stream, 1).await),
        [ev("grant", "lock", "pub:1", "w")]
    );
    // Nor in a snapshot.
    let (mut reset, first) = s.events("", Some(READER), Some("1-1")).await;
    assert_eq!(
        briefs(&reset_and_snapshot(&mut reset, first, 1).await),
        [ev("snapshot", "lock", "pub:1", "w")]
    );

    // Two streams each: a third is refused, another principal's is not.
    let third = s.events_request("", Some(READER), None).send().await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    let (_, _) = s.events("", Some(WRITER), None).await;
    drop(reset);
    eventually(WAIT, "a stream once another one ended", async || {
        let answer = s.events_request("", Some(READER), None).send().await.unwrap();
        match answer.status() {
            StatusCode::OK => Ok(()),
            status => Err(status),
        }
    })
    .await;
}
