//! Crash safety of the embedded store, with a real `fencelock serve` process killed by
//! SIGKILL: what was answered before the crash is still true after the restart.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// A `fencelock serve` child on a free port, on the SQLite file at `db`.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(db: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fencelock"))
            .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0"])
            .arg("--store")
            .arg(format!("sqlite://{}", db.display()))
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fencelock serve");
        // The server logs the address it bound; read log lines until it appears.
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let address = loop {
            let line = lines
                .next()
                .expect("fencelock serve exited before serving")
                .unwrap();
            let event: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if let Some(address) = event["address"].as_str() {
                break address.to_owned();
            }
        };
        // Keep draining its log so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Self {
            child,
            base: format!("http://{address}"),
        }
    }

    fn kill(mut self) {
        // SIGKILL: no shutdown code runs.
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    let server = Server::start(&db);
    let mut granted = Vec::new();
    // Acquire 100 leases concurrently, so that the crash can fall on batched commits.
    let requests = (0..100).map(|i| {
        let (client, url) = (client.clone(), format!("{}/locks/job-{i}", server.base));
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
        .delete(format!("{}/locks/job-0", server.base))
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

    let server = Server::start(&db);
    let gone = client
        .get(format!("{}/locks/job-0", server.base))
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
            .get(format!("{}/locks/{resource}", server.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(&now, lease, "lease changed across the crash");
        let thief = post(
            &client,
            format!("{}/locks/{resource}", server.base),
            json!({"owner": "thief", "ttl_seconds": 5}),
        )
        .await;
        assert_eq!(thief["acquired"], false, "{thief}");
    }
    for i in 0..100 {
        let answer = post(
            &client,
            format!("{}/locks/new-{i}", server.base),
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
        format!("{}/locks/job-0", server.base),
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
    let _first = Server::start(&db);
    let second = Command::new(env!("CARGO_BIN_EXE_fencelock"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .arg("--store")
        .arg(format!("sqlite://{}", db.display()))
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(said.contains("in use by another fencelock server"), "{said}");
}

#[test]
fn sigterm_stops_the_server_with_status_0_within_5_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("fencelock.db"));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
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
