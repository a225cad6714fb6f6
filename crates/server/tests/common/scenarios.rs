//! Semaphore and read-write lock scenarios through real HTTP, written once and run on one
//! server or on several sharing a store: each takes the servers it is to spread its clients
//! over.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fencelock_testkit::eventually;
use fencelock_testkit::fixtures::unique_prefix;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::{TestServer, hold_path, series_value};

/// Sends `POST /{collection}/{name}` with `body` from a task of its own; the answer's JSON.
fn spawn_hold(s: &TestServer, collection: &str, name: &str, body: Value) -> JoinHandle<Value> {
    let url = format!("{}{}", s.base, hold_path(collection, name));
    let client = s.client.clone();
    tokio::spawn(async move {
        let response = client.post(url).json(&body).send().await.expect("request");
        assert_eq!(response.status(), 200);
        response.json::<Value>().await.expect("JSON")
    })
}

/// 50 concurrent acquirers, spread over `servers`, on a semaphore of limit 5: exactly 5
/// are granted, in each of 10 rounds, and the semaphore then lists exactly their permits in
/// token order.
pub async fn fifty_acquirers_five_permits(servers: &[TestServer]) {
    let prefix = unique_prefix();
    for round in 0..10 {
        let name = format!("{prefix}pool-{round}");
        let attempts: Vec<_> = (0..50)
            .map(|i| {
                let body = json!({"owner": format!("w{i}"), "limit": 5, "ttl_seconds": 60});
                spawn_hold(&servers[i % servers.len()], "semaphores", &name, body)
            })
            .collect();
        let mut winners = Vec::new();
        for attempt in attempts {
            let answer = attempt.await.unwrap();
            if answer["acquired"] == true {
                winners.push(answer["permit"].clone());
            } else {
                assert_eq!(
                    (&answer["acquired"], &answer["holders"]),
                    (&json!(false), &json!(5)),
                    "{answer}"
                );
            }
        }
        assert_eq!(winners.len(), 5, "round {round}: {winners:?}");
        winners.sort_by_key(|p| p["fencing_token"].as_u64());
        for s in servers {
            let live = s.holds("semaphores", &name).await;
            assert_eq!(live.body["permits"], json!(winners), "round {round}");
            assert_eq!(live.body["limit"], 5);
        }
    }
}

/// One grant seen by a client, and when, on a clock all clients share: the sequence number
/// drawn right after the grant's answer arrived, and the one drawn right before its release
/// was sent. The hold was surely live in between.
#[derive(Debug, Clone, Copy)]
struct Seen {
    token: u64,
    write: bool,
    granted: u64,
    releasing: u64,
}

/// Several clients, spread over `servers`, acquire a read-write lock in read or write mode
/// and release it, over and over for `run`: no write hold ever overlaps another hold.
///
/// Judged by tokens and order: tokens are issued in the order of the grants, so of two holds
/// of which one is a write, the one with the lower token must have been released before the
/// other was granted — its release was sent before the other's grant was seen. Were it not,
/// both were live at once.
pub async fn no_write_overlaps_another_hold(servers: &[TestServer], run: Duration) {
    let name = format!("{}history", unique_prefix());
    let clock = Arc::new(AtomicU64::new(0));
    let deadline = tokio::time::Instant::now() + run;
    let clients: Vec<JoinHandle<Vec<Seen>>> = (0..6)
        .map(|i| {
            let s = &servers[i % servers.len()];
            let (base, client, clock) = (s.base.clone(), s.client.clone(), clock.clone());
            let url = format!("{base}{}", hold_path("rwlocks", &name));
            tokio::spawn(async move {
                let owner = format!("c{i}");
                let mut seen = Vec::new();
                for k in 0.. {
                    if tokio::time::Instant::now() >= deadline {
                        break;
                    }
                    let write = (k + i) % 3 == 0;
                    let mode = if write { "write" } else { "read" };
                    let body = json!({"owner": owner, "mode": mode, "ttl_seconds": 60, "wait_ms": 20_000});
                    let answer: Value = client
                        .post(&url)
                        .json(&body)
                        .send()
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    let granted = clock.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(answer["acquired"], true, "a 20 s wait ran out: {answer}");
                    let token = answer["hold"]["fencing_token"].as_u64().unwrap();
                    let releasing = clock.fetch_add(1, Ordering::SeqCst);
                    let release = json!({"owner": owner, "fencing_token": token});
                    let released = client.delete(&url).json(&release).send().await.unwrap();
                    assert_eq!(released.status(), 204);
                    seen.push(Seen {
                        token,
                        write,
                        granted,
                        releasing,
                    });
                }
                seen
            })
        })
        .collect();
    let mut seen = Vec::new();
    for client in clients {
        seen.extend(client.await.unwrap());
    }
    seen.sort_by_key(|s| s.token);
    assert!(
        seen.windows(2).all(|w| w[0].token < w[1].token),
        "a token was issued twice"
    );
    assert!(
        seen.iter().any(|s| s.write) && seen.iter().any(|s| !s.write),
        "{seen:?}"
    );
    for (i, earlier) in seen.iter().enumerate() {
        for later in seen[i + 1..].iter().filter(|later| earlier.write || later.write) {
            assert!(
                earlier.releasing < later.granted,
                "{later:?} was granted while {earlier:?} was held"
            );
        }
    }
}

/// How many store calls of `op` a server made, and how many acquires wait on it now.
async fn calls_and_waiters(s: &TestServer, op: &str) -> (f64, f64) {
    let text = s.metrics().await;
    let calls = series_value(
        &text,
        &format!(r#"fencelock_store_duration_seconds_count{{op="{op}"}}"#),
    );
    (calls, series_value(&text, "fencelock_waiters"))
}

/// Polls `s` (with a deadline) until `waiters` acquires wait on it and it has made more than
/// `calls` tries of `acquire_hold`: the last one to come is in line, and has asked the store
/// if it is the head.
async fn until_waiting(s: &TestServer, calls: f64, waiters: f64, head: bool) {
    eventually(
        Duration::from_secs(10),
        &format!("{waiters} waiters"),
        async || {
            let (now_calls, now_waiters) = calls_and_waiters(s, "acquire_hold").await;
            if now_waiters == waiters && (!head || now_calls > calls) {
                Ok(())
            } else {
                Err(format!("calls {now_calls}, waiters {now_waiters}"))
            }
        },
    )
    .await;
}

/// Writer preference: a reader holds (on `a`); a writer waits (on `a`); a later reader waits
/// (on `b`, which may be `a`); the first reader releases → the writer is granted before the
/// later reader, by tokens and by which answer came first.
pub async fn writers_go_before_later_readers(a: &TestServer, b: &TestServer) {
    let name = format!("{}preferred", unique_prefix());
    let same = std::ptr::eq(a, b);
    let first = a
        .grant_hold(
            "rwlocks",
            &name,
            json!({"owner": "r1", "mode": "read", "ttl_seconds": 60}),
        )
        .await;

    let order = Arc::new(AtomicU64::new(0));
    let spawn_timed = |s: &TestServer, body: Value| {
        let (order, answer) = (order.clone(), spawn_hold(s, "rwlocks", &name, body));
        tokio::spawn(async move {
            let answer = answer.await.unwrap();
            (answer, order.fetch_add(1, Ordering::SeqCst))
        })
    };
    let (calls, _) = calls_and_waiters(a, "acquire_hold").await;
    let writer = spawn_timed(
        a,
        json!({"owner": "w", "mode": "write", "ttl_seconds": 60, "wait_ms": 20_000}),
    );
    // The writer is the head of a's line and its try, refused by r1's read hold, recorded
    // its intent.
    until_waiting(a, calls, 1.0, true).await;

    // A reader that will not wait is refused at once: a writer waits.
    let now = b
        .hold(
            "rwlocks",
            &name,
            json!({"owner": "r0", "mode": "read", "ttl_seconds": 60}),
        )
        .await;
    assert_eq!(now.body["acquired"], false, "{now:?}");
    assert_eq!(
        (&now.body["mode"], &now.body["writer_waits"]),
        (&json!("read"), &json!(true))
    );

    let (calls, _) = calls_and_waiters(b, "acquire_hold").await;
    let later = spawn_timed(
        b,
        json!({"owner": "r2", "mode": "read", "ttl_seconds": 60, "wait_ms": 20_000}),
    );
    // On the writer's server, the later reader waits in line behind it; on another, it is
    // the head of its own line and was refused by the writer's intent.
    if same {
        until_waiting(b, calls, 2.0, false).await;
    } else {
        until_waiting(b, calls, 1.0, true).await;
    }

    let released = a
        .release_hold(
            "rwlocks",
            &name,
            json!({"owner": "r1", "fencing_token": first["fencing_token"]}),
        )
        .await;
    assert_eq!(released.status, 204);
    let (writer, writer_done) = writer.await.unwrap();
    assert_eq!(writer["acquired"], true, "{writer}");
    assert_eq!(writer["hold"]["mode"], "write");
    let write_token = writer["hold"]["fencing_token"].as_u64().unwrap();
    assert!(write_token > first["fencing_token"].as_u64().unwrap());
    assert!(
        !later.is_finished(),
        "the later reader was answered while the writer held"
    );

    let released = a
        .release_hold(
            "rwlocks",
            &name,
            json!({"owner": "w", "fencing_token": write_token}),
        )
        .await;
    assert_eq!(released.status, 204);
    let (later, later_done) = later.await.unwrap();
    assert_eq!(later["acquired"], true, "{later}");
    assert!(later["hold"]["fencing_token"].as_u64().unwrap() > write_token);
    assert!(writer_done < later_done);
}
