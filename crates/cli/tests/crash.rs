//! Crash safety of the embedded store, with a real `fencelock serve` process killed by
//! SIGKILL: what was answered before the crash is still true after the restart.

use std::path::Path;
use std::time::Duration;

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
        let resource = lease["resource"].as_str().unwrap();
        let now: Value = client
            .get(format!("{}/locks/{resource}", server.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(&now, lease, "lease changed across the crash");
        let thief = post(
            &client,
            format!("{}/locks/{resource}", server.url),
            json!({"owner": "thief", "ttl_seconds": 5}),
        )
        .await;
        assert_eq!(thief["acquired"], false, "{thief}");
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
    let mut server = embedded(&dir.path().join("fencelock.db"));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.process().id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = server.process().try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running 5 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}
