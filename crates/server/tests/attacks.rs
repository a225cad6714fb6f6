//! The seed's attack cases ATK-01..12, each a test named after it.

mod common;

use std::time::Duration;

use common::{TestServer, assert_invalid, assert_problem};
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn atk_01_acquire_of_a_lock_held_by_another_owner_is_not_granted() {
    let s = TestServer::manual().await;
    let lease = s.grant("payment:42", "holder", 30).await;
    let attack = s
        .acquire("payment:42", json!({"owner": "attacker", "ttl_seconds": 3600}))
        .await;
    assert_eq!(attack.status, StatusCode::OK);
    assert_eq!(attack.body["acquired"], false);
    assert_eq!(s.get("payment:42").await.body, lease);
}

#[tokio::test]
async fn atk_02_release_of_a_lock_owned_by_another_is_forbidden() {
    let s = TestServer::manual().await;
    let lease = s.grant("payment:42", "holder", 30).await;
    let attack = s.release("payment:42", json!({"owner": "attacker"})).await;
    assert_problem(&attack, 403, "/locks/payment:42");
    assert_eq!(s.get("payment:42").await.body, lease);
}

#[tokio::test]
async fn atk_03_an_expired_lock_may_be_taken_and_the_old_holder_is_fenced_off() {
    let s = TestServer::manual().await;
    let old = s.grant("payment:42", "holder", 30).await;
    s.advance(Duration::from_secs(30));
    let new = s.grant("payment:42", "attacker", 30).await;
    assert!(
        new["fencing_token"].as_u64() > old["fencing_token"].as_u64(),
        "{old} then {new}"
    );
    // The old holder, waking up, can neither release nor renew the new lease.
    let token = old["fencing_token"].clone();
    assert_problem(
        &s.release("payment:42", json!({"owner": "holder", "fencing_token": token}))
            .await,
        403,
        "/locks/payment:42",
    );
    let renew = s
        .renew("payment:42", json!({"owner": "holder", "ttl_seconds": 30}))
        .await;
    assert_problem(&renew, 403, "/locks/payment:42/renew");
    assert_eq!(s.get("payment:42").await.body, new);
}

#[tokio::test]
async fn atk_04_renew_of_a_lock_owned_by_another_is_forbidden() {
    let s = TestServer::manual().await;
    let lease = s.grant("payment:42", "holder", 30).await;
    let attack = s
        .renew("payment:42", json!({"owner": "attacker", "ttl_seconds": 3600}))
        .await;
    assert_problem(&attack, 403, "/locks/payment:42/renew");
    assert_eq!(s.get("payment:42").await.body, lease);
}

#[tokio::test]
async fn atk_05_zero_or_negative_ttl_is_refused() {
    let s = TestServer::manual().await;
    for ttl in [
        json!({"ttl_seconds": 0}),
        json!({"ttl_seconds": -100}),
        json!({"ttl_ms": 0}),
        json!({"ttl_ms": -1}),
    ] {
        let mut body = ttl.clone();
        body["owner"] = json!("attacker");
        let field = ttl.as_object().unwrap().keys().next().unwrap().clone();
        assert_invalid(&s.acquire("payment:42", body).await, &[field.as_str()]);
    }
    assert_problem(&s.get("payment:42").await, 404, "/locks/payment:42");
}

#[tokio::test]
async fn atk_06_sql_in_the_resource_name_is_just_a_name() {
    sql_is_just_a_name(TestServer::manual().await).await;
}

#[tokio::test]
async fn atk_06_sql_in_the_resource_name_is_just_a_name_on_the_embedded_store() {
    sql_is_just_a_name(TestServer::embedded().await).await;
}

async fn sql_is_just_a_name(s: TestServer) {
    let bystander = s.grant("payment:42", "holder", 30).await;
    let name = "resource'; DROP TABLE distributed_locks; --";
    let encoded = fencelock_wire::parse::encode_segment(name);
    let lease = s.grant(&encoded, "attacker", 30).await;
    assert_eq!(lease["resource"], name);
    assert_eq!(s.get(&encoded).await.body, lease);
    assert_eq!(s.get("payment:42").await.body, bystander);
    let owner = "x'); DELETE FROM leases; --";
    assert_eq!(s.grant("other", owner, 30).await["owner"], owner);
    assert_eq!(
        s.send(Method::GET, "/locks", None).await.body["locks"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn atk_07_empty_or_blank_owner_is_refused() {
    let s = TestServer::manual().await;
    let lease = s.grant("payment:42", "holder", 30).await;
    for owner in ["", " ", "\t \n"] {
        assert_invalid(
            &s.release("payment:42", json!({"owner": owner})).await,
            &["owner"],
        );
        assert_invalid(
            &s.renew("payment:42", json!({"owner": owner, "ttl_seconds": 30}))
                .await,
            &["owner"],
        );
        assert_invalid(
            &s.acquire("other", json!({"owner": owner, "ttl_seconds": 30}))
                .await,
            &["owner"],
        );
    }
    assert_eq!(s.get("payment:42").await.body, lease);
}

#[tokio::test]
async fn atk_08_non_integer_ttl_is_refused() {
    let s = TestServer::manual().await;
    for ttl in [json!("3600"), json!(60.5), json!(60.0)] {
        let answer = s
            .acquire("payment:42", json!({"owner": "attacker", "ttl_seconds": ttl}))
            .await;
        assert_invalid(&answer, &["ttl_seconds"]);
    }
    assert_problem(&s.get("payment:42").await, 404, "/locks/payment:42");
}

#[tokio::test]
async fn atk_09_the_same_owner_may_reacquire_to_extend() {
    let s = TestServer::manual().await;
    let first = s.grant("payment:42", "holder", 30).await;
    s.advance(Duration::from_secs(20));
    let again = s.grant("payment:42", "holder", 30).await;
    assert_eq!(again["fencing_token"], first["fencing_token"]);
    assert!(again["expires_at"].as_str() > first["expires_at"].as_str());
}

#[tokio::test]
async fn atk_10_of_concurrent_acquires_exactly_one_wins() {
    let s = TestServer::real().await;
    let attempts = (0..50).map(|i| {
        let client = s.client.clone();
        let url = format!("{}/locks/payment:42", s.base);
        tokio::spawn(async move {
            let body = json!({"owner": format!("racer-{i}"), "ttl_seconds": 30});
            let answer = client.post(url).json(&body).send().await.unwrap();
            answer.json::<serde_json::Value>().await.unwrap()["acquired"]
                .as_bool()
                .unwrap()
        })
    });
    let mut winners = 0;
    for attempt in attempts.collect::<Vec<_>>() {
        winners += usize::from(attempt.await.unwrap());
    }
    assert_eq!(winners, 1);
}

#[tokio::test]
async fn atk_11_get_of_an_absent_or_expired_lock_is_404_without_stale_data() {
    let s = TestServer::manual().await;
    let absent = s.get("nonexistent").await;
    assert_problem(&absent, 404, "/locks/nonexistent");
    s.grant("payment:42", "holder", 30).await;
    s.advance(Duration::from_secs(30));
    let expired = s.get("payment:42").await;
    assert_problem(&expired, 404, "/locks/payment:42");
    assert!(expired.body.get("owner").is_none() && expired.body.get("fencing_token").is_none());
}

#[tokio::test]
async fn atk_12_a_very_long_resource_name_is_refused_and_the_server_keeps_serving() {
    let s = TestServer::manual().await;
    let name = "x".repeat(256);
    assert_invalid(
        &s.acquire(&name, json!({"owner": "a", "ttl_seconds": 30})).await,
        &["resource"],
    );
    // A path far over any sane limit: refused before it reaches a handler, never a 5xx.
    let huge = "x".repeat(1 << 20);
    let url = format!("{}/locks/{huge}", s.base);
    match s
        .client
        .post(url)
        .json(&json!({"owner": "a", "ttl_seconds": 30}))
        .send()
        .await
    {
        Ok(answer) => assert!(answer.status().is_client_error(), "{}", answer.status()),
        Err(closed) => assert!(!closed.is_timeout(), "{closed}"),
    }
    let ok = s.send(Method::GET, "/healthz", None).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(s.send(Method::GET, "/locks", None).await.body["locks"], json!([]));
}
