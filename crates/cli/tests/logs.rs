//! `fencelock serve --log-format json` writes one structured line for every grant, extension,
//! renewal, release, expiry and refusal.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

#[tokio::test]
async fn every_lease_event_is_one_json_log_line() {
    let mut child = common::fencelock()
        .args([
            "--log-format",
            "json",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory://",
        ])
        .args(["--purge-interval", "50ms"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let address = loop {
        let line: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        if let Some(address) = line["address"].as_str() {
            break address.to_owned();
        }
    };
    let base = format!("http://{address}/locks");
    let client = reqwest::Client::new();
    let send = |method: reqwest::Method, path: &str, body: Value| {
        client
            .request(method, format!("{base}/{path}"))
            .json(&body)
            .send()
    };
    let post = reqwest::Method::POST;
    let lease: Value = send(post.clone(), "job", json!({"owner": "a", "ttl_seconds": 60}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = lease["lock"]["fencing_token"].clone();
    send(post.clone(), "job", json!({"owner": "a", "ttl_seconds": 60}))
        .await
        .unwrap();
    send(post.clone(), "job", json!({"owner": "b", "ttl_seconds": 60}))
        .await
        .unwrap();
    send(
        post.clone(),
        "job/renew",
        json!({"owner": "a", "ttl_seconds": 60}),
    )
    .await
    .unwrap();
    send(reqwest::Method::DELETE, "job", json!({"owner": "b"}))
        .await
        .unwrap();
    send(
        reqwest::Method::DELETE,
        "job",
        json!({"owner": "a", "fencing_token": token}),
    )
    .await
    .unwrap();
    send(post.clone(), "short", json!({"owner": "c", "ttl_ms": 300}))
        .await
        .unwrap();

    // Read log lines until the short lease's expiry is logged (the purge runs every 50 ms).
    let events = tokio::task::spawn_blocking(move || {
        let mut events = Vec::new();
        for line in lines.by_ref() {
            let line: Value = serde_json::from_str(&line.unwrap()).unwrap();
            if line["target"] == "fencelock::lease" {
                let done = line["event"] == "expire";
                events.push(line);
                if done {
                    break;
                }
            }
        }
        events
    });
    let events = tokio::time::timeout(Duration::from_secs(10), events)
        .await
        .expect("expiry logged")
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();

    let kinds: Vec<(&str, Option<&str>)> = events
        .iter()
        .map(|e| (e["event"].as_str().unwrap(), e["reason"].as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("grant", None),
            ("extend", None),
            ("refuse", Some("held")),
            ("renew", None),
            ("refuse", Some("forbidden")),
            ("release", None),
            ("grant", None),
            ("expire", None),
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
    assert_eq!(events[2]["holder"], "a", "a refusal says who holds the lock");
    assert_eq!(events[5]["token"], token);
    assert!(
        events[5]["held_ms"].as_u64().is_some(),
        "a release logs how long it was held"
    );
}
