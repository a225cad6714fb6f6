//! Crash safety of the embedded store, with a real `fencelock serve` process killed by
//! SIGKILL: what was answered before the crash is still true after the restart.

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

/// Asserts `now` is the lease `before` after a restart: the same grant, and no time taken
/// from it (the store does not count the time it was stopped).
fn assert_kept(before: &Value, now: &Value) {
    for field in ["resource", "owner", "fencing_token", "acquired_at"] {
        assert_eq!(
            now[field], before[field],
            "{field} changed across the restart: {now}"
        );
    }
    assert!(
        common::ms(&now["expires_at"]) >= common::ms(&before["expires_at"]),
        "{now}"
    );
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
