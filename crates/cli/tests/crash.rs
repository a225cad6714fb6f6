//! Crash safety of the embedded store, with a real `fencelock serve` process killed by
//! SIGKILL: what was answered before the crash — leases, semaphore permits, read-write lock
//! holds — is still true after the restart, to the millisecond of every `expires_at`.

use std::path::Path;

use serde_json::{Value, json};

mod common;

use common::Server;

/// A server on the embedded store in the file `db`.
fn embedded(db: &Path) -> Server {
    Server::on(&format!("sqlite://{}", db.display()))
}

async fn post(client: &reqwest::Client, url: String, body: Value) -> Value {
    client
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn leases_and_tokens_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fencelock.db");
    let client = reqwest::Client::new();
    let mut server = embedded(&db);
    let mut granted = Vec::new();
    // Acquire 100 leases concurrently, so that the crash can fall on batched commits.
    let requests = (0..100).map(|i| {
        let (client, url) = (client.clone(), format!("{}/locks/job-{i}", server.url));
        tokio::spawn(async move {
            post(
                &client,
                url,
                json!({"owner": format!("w{i}"), "ttl_seconds": 600}),
            )
            .await
        })
    });
    for request in requests.collect::<Vec<_>>() {
        let answer = request.await.unwrap();
        assert_eq!(answer["acquired"], true, "{answer}");
        granted.push(answer["lock"].clone());
    }
    // A released lease must stay released.
    let released = client
        .delete(format!("{}/locks/job-0", server.url))
        .json(&json!({"owner": "w0"}))
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), 204);
    let highest = granted
        .iter()
        .map(|l| l["fencing_token"].as_u64().unwrap())
        .max()
        .unwrap();
    server.kill();

    let mut server = embedded(&db);
    let gone = client
        .get(format!("{}/locks/job-0", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        gone.status(),
        404,
        "a release answered 204 came back after the crash"
    );
    for lease in &granted[1..] {
        assert_still_held(&client, &server, lease).await;
    }
    for i in 0..100 {
        let answer = post(
            &client,
            format!("{}/locks/new-{i}", server.url),
            json!({"owner": "n", "ttl_seconds": 5}),
        )
        .await;
        assert!(
            answer["lock"]["fencing_token"].as_u64().unwrap() > highest,
            "{answer}"
        );
    }
    let again = post(
        &client,
        format!("{}/locks/job-0", server.url),
        json!({"owner": "x", "ttl_seconds": 5}),
    )
    .await;
    assert!(again["lock"]["fencing_token"].as_u64().unwrap() > highest);
    server.kill();
}

/// Asserts `now` is the lease (or permit, or hold) `before` after a restart: the same grant,
/// ending when it was acknowledged to end (the host did not reboot: the store counts the time
/// it was stopped exactly).
fn assert_kept(before: &Value, now: &Value) {
    // A lease has a resource; a permit a name and a limit; a hold a name and a mode.
    for field in [
        "resource",
        "name",
        "limit",
        "mode",
        "owner",
        "fencing_token",
        "acquired_at",
        "expires_at",
    ] {
        assert_eq!(
            now[field], before[field],
            "{field} changed across the restart: {now}"
        );
    }
}

/// Asserts `lease` is still held by `server` after a restart, as it was, and that another
/// owner is refused it; returns the refusal.
async fn assert_still_held(client: &reqwest::Client, server: &Server, lease: &Value) -> Value {
    let url = format!("{}/locks/{}", server.url, lease["resource"].as_str().unwrap());
    let now: Value = client.get(&url).send().await.unwrap().json().await.unwrap();
    assert_kept(lease, &now);
    let thief = post(client, url, json!({"owner": "thief", "ttl_seconds": 5})).await;
    assert_eq!(thief["acquired"], false, "the lease ended early: {thief}");
    thief
}

/// `POST path` on `server` with `body`, concurrently for every body; the answers in order.
async fn post_all(client: &reqwest::Client, server: &Server, path: &str, bodies: Vec<Value>) -> Vec<Value> {
    let requests: Vec<_> = bodies
        .into_iter()
        .map(|body| {
            let (client, url) = (client.clone(), format!("{}{path}", server.url));
            tokio::spawn(async move { post(&client, url, body).await })
        })
        .collect();
    let mut answers = Vec::new();
    for request in requests {
        answers.push(request.await.unwrap());
    }
    answers
}

/// The GET answer of `path` on `server`.
async fn get(client: &reqwest::Client, server: &Server, path: &str) -> Value {
    let answer = client.get(format!("{}{path}", server.url)).send().await.unwrap();
    assert_eq!(answer.status(), 200, "GET {path}");
    answer.json().await.unwrap()
}

/// `DELETE path` on `server` with `body`, answered 204.
async fn delete(client: &reqwest::Client, server: &Server, path: &str, body: Value) {
    let answer = client
        .delete(format!("{}{path}", server.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 204, "DELETE {path} {body}");
}

/// Asserts `after`, a GET's list of permits or holds after a restart, is `before` (in any
/// order) as [`assert_kept`] has it, in token order.
fn assert_all_kept(mut before: Vec<Value>, after: &Value) {
    before.sort_by_key(token_of);
    let after = after.as_array().expect("a list");
    assert_eq!(after.len(), before.len(), "{after:?}");
    for (before, after) in before.iter().zip(after) {
        assert_kept(before, after);
    }
}

/// The fencing token of a lease, permit or hold.
fn token_of(lease: &Value) -> u64 {
    lease["fencing_token"].as_u64().expect("a fencing token")
}

/// What a granted acquire answered: its lease, permit or hold.
fn granted(answer: &Value, field: &str) -> Value {
    assert_eq!(answer["acquired"], true, "{answer}");
    answer[field].clone()
}

#[tokio::test]
async fn permits_and_holds_survive_sigkill_and_later_grants_get_greater_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fencelock.db");
    let client = reqwest::Client::new();
    let mut server = embedded(&db);
    // Granted concurrently, so that the crash can fall on batched commits.
    let permit = |i: usize| json!({"owner": format!("w{i}"), "limit": 30, "ttl_seconds": 600});
    let read = |i: usize| json!({"owner": format!("r{i}"), "mode": "read", "ttl_seconds": 600});
    let permits = post_all(
        &client,
        &server,
        "/semaphores/jobs",
        (0..20).map(permit).collect(),
    )
    .await;
    let readers = post_all(&client, &server, "/rwlocks/config", (0..10).map(read).collect()).await;
    let write = json!({"owner": "editor", "mode": "write", "ttl_seconds": 600});
    let writer = post_all(&client, &server, "/rwlocks/doc", vec![write]).await;
    let mut permits: Vec<Value> = permits.iter().map(|a| granted(a, "permit")).collect();
    let mut readers: Vec<Value> = readers.iter().map(|a| granted(a, "hold")).collect();
    let writer = granted(&writer[0], "hold");
    // A permit and a hold released before the crash stay released.
    delete(&client, &server, "/semaphores/jobs", json!({"owner": "w0"})).await;
    delete(&client, &server, "/rwlocks/config", json!({"owner": "r0"})).await;
    permits.remove(0);
    readers.remove(0);
    let highest = permits
        .iter()
        .chain(&readers)
        .chain([&writer])
        .map(token_of)
        .max()
        .unwrap();
    server.kill();

    let mut server = embedded(&db);
    let semaphore = get(&client, &server, "/semaphores/jobs").await;
    assert_eq!(semaphore["limit"], 30, "{semaphore}");
    assert_all_kept(permits, &semaphore["permits"]);
    let config = get(&client, &server, "/rwlocks/config").await;
    assert_eq!(config["mode"], "read", "{config}");
    assert_all_kept(readers, &config["holders"]);
    let doc = get(&client, &server, "/rwlocks/doc").await;
    assert_kept(&writer, &doc["holders"][0]);
    // What they hold, they still exclude.
    let reader = post(&client, format!("{}/rwlocks/doc", server.url), read(99)).await;
    assert_eq!(reader["acquired"], false, "{reader}");
    let write = json!({"owner": "x", "mode": "write", "ttl_seconds": 5});
    let blocked = post(&client, format!("{}/rwlocks/config", server.url), write).await;
    assert_eq!(blocked["acquired"], false, "{blocked}");
    // A user sees them too.
    let shown = server.run(&["status", "jobs", "--kind", "semaphore", "--json"]);
    assert_eq!(shown.json(), semaphore, "{shown:?}");

    // Every grant after the restart gets a greater token than every one before it.
    let next_permit = post(&client, format!("{}/semaphores/jobs", server.url), permit(99)).await;
    let new_name = post(
        &client,
        format!("{}/rwlocks/new", server.url),
        json!({"owner": "n", "mode": "write", "ttl_seconds": 5}),
    )
    .await;
    let lock = post(
        &client,
        format!("{}/locks/jobs", server.url),
        json!({"owner": "n", "ttl_seconds": 5}),
    )
    .await;
    for after in [
        granted(&next_permit, "permit"),
        granted(&new_name, "hold"),
        granted(&lock, "lock"),
    ] {
        assert!(token_of(&after) > highest, "{after} after {highest}");
    }
    server.kill();
}

/// libfaketime, from Debian's `faketime` package (the test command installs it).
fn libfaketime() -> String {
    let found = std::fs::read_dir("/usr/lib")
        .unwrap()
        .filter_map(|dir| Some(dir.ok()?.path().join("faketime/libfaketime.so.1")))
        .find(|path| path.exists());
    found
        .expect("libfaketime not found: install Debian's faketime package (scripts/test does)")
        .display()
        .to_string()
}

#[tokio::test]
async fn a_lease_granted_under_a_clock_an_hour_behind_survives_a_restart_on_the_right_clock() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fencelock.db");
    let store = format!("sqlite://{}", db.display());
    let client = reqwest::Client::new();
    let lib = libfaketime();
    let behind = [
        ("LD_PRELOAD", lib.as_str()),
        ("FAKETIME", "-1h"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let mut server = common::Server::with_env(&store, &behind);
    let url = format!("{}/locks/report", server.url);
    let granted = post(&client, url, json!({"owner": "a", "ttl_seconds": 1800})).await;
    assert_eq!(granted["acquired"], true, "{granted}");
    let lease = &granted["lock"];
    let behind_by = common::wall_ms() - common::ms(&lease["acquired_at"]);
    assert!(
        behind_by > 3_500_000,
        "the server's clock is not an hour behind: {lease}"
    );
    server.stop();

    let server = embedded(&db);
    let thief = assert_still_held(&client, &server, lease).await;
    let left = thief["expires_in_ms"].as_u64().unwrap();
    println!("after a restart on a clock 1 h ahead, the 30 min lease has {left} ms left");
    assert!(
        left > 1_700_000,
        "the lease lost time across the stop: {left} ms left"
    );
}

/// Issue 22: across restarts in one boot of the host — a crash, and a clean stop followed by
/// a start on a wall clock stepped an hour ahead — a lease ends exactly when it was
/// acknowledged to, and has lost exactly the time that passed: the store counts the time it
/// was stopped with the host's uptime, not the wall clock.
#[tokio::test]
async fn a_restart_in_the_same_boot_keeps_every_expires_at_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fencelock.db");
    let client = reqwest::Client::new();
    let mut server = embedded(&db);
    let url = format!("{}/locks/report", server.url);
    let granted = post(&client, url, json!({"owner": "a", "ttl_seconds": 600})).await;
    let lease = &granted["lock"];
    assert_eq!(&get(&client, &server, "/locks/report").await, lease);
    server.kill();

    let mut server = embedded(&db);
    assert_still_held(&client, &server, lease).await;
    server.stop();

    let lib = libfaketime();
    let ahead = [
        ("LD_PRELOAD", lib.as_str()),
        ("FAKETIME", "+1h"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let server = common::Server::with_env(&format!("sqlite://{}", db.display()), &ahead);
    let thief = assert_still_held(&client, &server, lease).await;
    // Only the real time since the grant is gone from it, not the hour the clock moved.
    let left = i64::try_from(thief["expires_in_ms"].as_u64().unwrap()).unwrap();
    let since = common::wall_ms() - common::ms(&lease["acquired_at"]);
    assert!(
        (left - (600_000 - since)).abs() < 1_000,
        "{left} ms left of 600,000, {since} ms after the grant: {thief}"
    );
}

/// A lease with a lock-delay that expired before a SIGKILL keeps its lock closed after the
/// restart — even under a server started without `--lock-delay`: the delay is the lease's,
/// kept in the file — and the next grant comes no sooner than its expiry plus the delay.
#[tokio::test]
async fn a_lock_delay_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fencelock.db");
    let client = reqwest::Client::new();
    let store = format!("sqlite://{}", db.display());
    let mut server = Server::with(&store, &[], &["--lock-delay", "3s"]);
    let url = format!("{}/locks/nightly", server.url);
    let crashed = post(&client, url.clone(), json!({"owner": "crashed", "ttl_ms": 300})).await;
    assert_eq!(crashed["acquired"], true, "{crashed}");
    let expires_at = common::ms(&crashed["lock"]["expires_at"]);
    let delay_ms = 3_000;
    // The holder never releases: its lease runs out, and the lock stays closed.
    let closed = loop {
        let answer = post(&client, url.clone(), json!({"owner": "probe", "ttl_ms": 1})).await;
        assert_eq!(
            answer["acquired"], false,
            "granted within the lock-delay: {answer}"
        );
        if answer.get("retry_after_ms").is_some() {
            break answer;
        }
        // Still held: ask again when the server says the lease ends.
        let left = answer["expires_in_ms"]
            .as_u64()
            .expect("held, with its time left");
        tokio::time::sleep(std::time::Duration::from_millis(left.max(1))).await;
    };
    assert_eq!(closed["resource"], "nightly");
    assert!(closed["retry_after_ms"].as_u64().unwrap() <= delay_ms, "{closed}");
    server.kill();

    let server = embedded(&db);
    let url = format!("{}/locks/nightly", server.url);
    let mut delayed = 0;
    let granted = loop {
        let answer = post(&client, url.clone(), json!({"owner": "next", "ttl_seconds": 60})).await;
        if answer["acquired"] == true {
            break answer;
        }
        // Closed by the delay (or, once the file gives the lease back its time left, by the
        // lease itself): never anything else.
        assert!(
            answer.get("retry_after_ms").is_some() || answer.get("holder").is_some(),
            "{answer}"
        );
        delayed += usize::from(answer.get("retry_after_ms").is_some());
        let retry = answer["retry_after_ms"]
            .as_u64()
            .or(answer["expires_in_ms"].as_u64())
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(retry.max(1))).await;
    };
    assert!(delayed > 0, "the restarted server never kept the lock-delay");
    let acquired_at = common::ms(&granted["lock"]["acquired_at"]);
    assert!(
        acquired_at >= expires_at + i64::try_from(delay_ms).unwrap(),
        "granted at {acquired_at}, before the expiry {expires_at} + the delay {delay_ms}"
    );
    assert!(granted["lock"]["fencing_token"].as_u64() > crashed["lock"]["fencing_token"].as_u64());
}

#[test]
fn a_second_server_on_the_same_file_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fencelock.db");
    let _first = embedded(&db);
    let store = format!("sqlite://{}", db.display());
    let second = common::run(&["serve", "--listen", "127.0.0.1:0", "--store", &store]);
    assert_eq!(second.code, Some(1));
    let said = &second.stderr;
    assert!(said.contains("in use by another fencelock server"), "{said}");
}

#[test]
fn sigterm_stops_the_server_with_status_0_within_5_seconds() {
    let dir = tempfile::tempdir().unwrap();
    embedded(&dir.path().join("fencelock.db")).stop();
}
