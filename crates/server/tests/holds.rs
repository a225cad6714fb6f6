//! `/semaphores` and `/rwlocks`: every answer of the SPEC's sections "Semaphores" and
//! "Read-write locks", and every bad input, through a real HTTP client against a real server.

mod common;

use std::time::Duration;

use common::{TestServer, assert_invalid, assert_problem};
use fencelock_server::Config;
use fencelock_wire::Limits;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const SEM: &str = "semaphores";
const RW: &str = "rwlocks";

fn assert_timestamp(value: &Value) {
    let text = value.as_str().expect("a timestamp string");
    assert_eq!(text.len(), 24, "{text}");
    assert!(text.ends_with('Z') && text.as_bytes()[19] == b'.', "{text}");
}

fn millis(timestamp: &Value) -> u64 {
    let time = humantime::parse_rfc3339(timestamp.as_str().unwrap()).unwrap();
    time.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

fn token(item: &Value) -> u64 {
    item["fencing_token"].as_u64().expect("a token")
}

/// A permit or hold: exactly the lease's fields with `name`, and `extra` (`limit`, `mode`).
fn assert_item(item: &Value, name: &str, owner: &str, extra: (&str, Value)) {
    assert_eq!(item["name"], name, "{item}");
    assert_eq!(item["owner"], owner, "{item}");
    assert!(item["fencing_token"].as_u64().is_some_and(|t| t > 0), "{item}");
    assert_timestamp(&item["acquired_at"]);
    assert_timestamp(&item["expires_at"]);
    assert_eq!(item[extra.0], extra.1, "{item}");
    assert_eq!(item.as_object().unwrap().len(), 6, "{item}");
}

fn permit(owner: &str, limit: u64) -> Value {
    json!({"owner": owner, "limit": limit, "ttl_seconds": 30})
}

fn mode(owner: &str, mode: &str) -> Value {
    json!({"owner": owner, "mode": mode, "ttl_seconds": 30})
}

#[tokio::test]
async fn a_semaphore_grants_up_to_its_limit_then_answers_acquired_false() {
    let s = TestServer::manual().await;
    let a = s.hold(SEM, "gpu", permit("a", 2)).await;
    assert_eq!(
        (a.status, a.content_type.as_str()),
        (StatusCode::OK, "application/json")
    );
    assert_eq!(
        (&a.body["acquired"], &a.body["extended"]),
        (&json!(true), &json!(false))
    );
    let a = a.body["permit"].clone();
    assert_item(&a, "gpu", "a", ("limit", json!(2)));
    assert_eq!(millis(&a["expires_at"]) - millis(&a["acquired_at"]), 30_000);
    let b = s.grant_hold(SEM, "gpu", permit("b", 2)).await;
    assert!(token(&b) > token(&a));

    let c = s.hold(SEM, "gpu", permit("c", 2)).await;
    assert_eq!(c.status, StatusCode::OK);
    assert_eq!(c.body["acquired"], false);
    assert_eq!((&c.body["name"], &c.body["holders"]), (&json!("gpu"), &json!(2)));
    assert_eq!(c.body["permits"], json!([a, b]));
    assert_eq!(c.body["retry_in_ms"], 30_000);

    let live = s.holds(SEM, "gpu").await;
    assert_eq!(live.status, StatusCode::OK);
    assert_eq!(live.body, json!({"name": "gpu", "limit": 2, "permits": [a, b]}));
}

#[tokio::test]
async fn a_permit_holders_reacquire_extends_its_permit_with_the_same_token() {
    let s = TestServer::manual().await;
    let first = s.grant_hold(SEM, "gpu", permit("a", 1)).await;
    s.advance(Duration::from_secs(10));
    let again = s
        .hold(SEM, "gpu", json!({"owner": " a ", "limit": 1, "ttl_ms": 60_000}))
        .await;
    assert_eq!(
        (&again.body["acquired"], &again.body["extended"]),
        (&json!(true), &json!(true))
    );
    let again = &again.body["permit"];
    assert_eq!(token(again), token(&first));
    assert_eq!(
        millis(&again["acquired_at"]),
        millis(&first["acquired_at"]) + 10_000
    );
    assert_eq!(
        millis(&again["expires_at"]),
        millis(&again["acquired_at"]) + 60_000
    );
    assert_eq!(
        s.holds(SEM, "gpu").await.body["permits"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn a_limit_other_than_the_live_permits_is_409_and_changes_nothing() {
    let s = TestServer::manual().await;
    let a = s.grant_hold(SEM, "gpu", permit("a", 3)).await;
    let before = s.holds(SEM, "gpu").await.body;
    for (owner, limit) in [("b", 4), ("a", 1)] {
        let answer = s.hold(SEM, "gpu", permit(owner, limit)).await;
        assert_problem(&answer, 409, "/semaphores/gpu");
        assert!(
            answer.body["type"].as_str().unwrap().ends_with("limit-mismatch"),
            "{answer:?}"
        );
        assert_eq!(
            answer.body["limit"], 3,
            "the live limit, for the client: {answer:?}"
        );
        assert_eq!(
            s.holds(SEM, "gpu").await.body,
            before,
            "a mismatch changes nothing"
        );
    }
    // Once no permit is live, any limit is accepted and becomes the semaphore's.
    let released = s
        .release_hold(SEM, "gpu", json!({"owner": "a", "fencing_token": token(&a)}))
        .await;
    assert_eq!(released.status, StatusCode::NO_CONTENT);
    let b = s.grant_hold(SEM, "gpu", permit("b", 4)).await;
    assert!(token(&b) > token(&a));
    assert_eq!(s.holds(SEM, "gpu").await.body["limit"], 4);
}

#[tokio::test]
async fn permit_and_hold_releases_answer_204_404_409_and_never_403() {
    for (collection, body) in [(SEM, permit("a", 2)), (RW, mode("a", "read"))] {
        let s = TestServer::manual().await;
        let path = format!("/{collection}/r");
        let release = |b: Value| s.release_hold(collection, "r", b);
        assert_problem(&release(json!({"owner": "a"})).await, 404, &path);
        let held = s.grant_hold(collection, "r", body).await;
        // Another owner holds; "b" holds nothing: not found, whatever the token.
        assert_problem(&release(json!({"owner": "b"})).await, 404, &path);
        assert_problem(
            &release(json!({"owner": "b", "fencing_token": token(&held)})).await,
            404,
            &path,
        );
        assert_problem(
            &release(json!({"owner": "a", "fencing_token": token(&held) + 1})).await,
            409,
            &path,
        );
        let live = s.holds(collection, "r").await.body;
        assert_eq!(live.as_object().unwrap().len(), 3, "{live}");
        let released = release(json!({"owner": "a", "fencing_token": token(&held)})).await;
        assert_eq!(
            (released.status, &released.body),
            (StatusCode::NO_CONTENT, &Value::Null)
        );
        assert_problem(&s.holds(collection, "r").await, 404, &path);
        assert_problem(&release(json!({"owner": "a"})).await, 404, &path);
    }
}

#[tokio::test]
async fn permit_and_hold_renewals_answer_200_404_409() {
    for (collection, body, extra) in [
        (SEM, permit("a", 2), ("limit", json!(2))),
        (RW, mode("a", "write"), ("mode", json!("write"))),
    ] {
        let s = TestServer::manual().await;
        let path = format!("/{collection}/r/renew");
        let renew = |b: Value| s.renew_hold(collection, "r", b);
        assert_problem(&renew(json!({"owner": "a", "ttl_seconds": 60})).await, 404, &path);
        let held = s.grant_hold(collection, "r", body).await;
        assert_problem(&renew(json!({"owner": "b", "ttl_seconds": 60})).await, 404, &path);
        let stale = json!({"owner": "a", "ttl_seconds": 60, "fencing_token": token(&held) + 1});
        assert_problem(&renew(stale).await, 409, &path);
        s.advance(Duration::from_secs(5));
        let renewed = renew(json!({"owner": "a", "ttl_ms": 60_000, "fencing_token": token(&held)})).await;
        assert_eq!(renewed.status, StatusCode::OK);
        assert_item(&renewed.body, "r", "a", extra.clone());
        assert_eq!(token(&renewed.body), token(&held));
        assert_eq!(renewed.body["acquired_at"], held["acquired_at"]);
        assert_eq!(
            millis(&renewed.body["expires_at"]),
            millis(&held["acquired_at"]) + 65_000
        );
        s.advance(Duration::from_secs(60));
        assert_problem(&renew(json!({"owner": "a", "ttl_seconds": 60})).await, 404, &path);
        assert_problem(&s.holds(collection, "r").await, 404, &format!("/{collection}/r"));
    }
}

#[tokio::test]
async fn readers_share_and_a_writer_is_refused_by_the_mode_held() {
    let s = TestServer::manual().await;
    let a = s.hold(RW, "doc", mode("a", "read")).await;
    assert_eq!(
        (&a.body["acquired"], &a.body["extended"]),
        (&json!(true), &json!(false))
    );
    let a = a.body["hold"].clone();
    assert_item(&a, "doc", "a", ("mode", json!("read")));
    let b = s.grant_hold(RW, "doc", mode("b", "read")).await;
    assert!(token(&b) > token(&a));
    let w = s.hold(RW, "doc", mode("w", "write")).await;
    assert_eq!(w.status, StatusCode::OK);
    assert_eq!(w.body["acquired"], false);
    assert_eq!(
        (&w.body["name"], &w.body["mode"]),
        (&json!("doc"), &json!("read"))
    );
    assert_eq!(w.body["holders"], json!([a, b]));
    assert_eq!(w.body["writer_waits"], false);
    assert_eq!(
        s.holds(RW, "doc").await.body,
        json!({"name": "doc", "mode": "read", "holders": [a, b]})
    );
}

#[tokio::test]
async fn a_writer_excludes_readers_and_writers_and_extends_its_own_hold() {
    let s = TestServer::manual().await;
    let w = s.grant_hold(RW, "doc", mode("w", "write")).await;
    for (owner, asked) in [("r", "read"), ("v", "write")] {
        let answer = s.hold(RW, "doc", mode(owner, asked)).await;
        assert_eq!(answer.body["acquired"], false, "{answer:?}");
        assert_eq!(answer.body["mode"], "write");
        assert_eq!(answer.body["holders"], json!([w]));
    }
    s.advance(Duration::from_secs(1));
    let again = s.hold(RW, "doc", mode("w", "write")).await;
    assert_eq!(again.body["extended"], true);
    assert_eq!(token(&again.body["hold"]), token(&w));
    assert_eq!(
        millis(&again.body["hold"]["acquired_at"]),
        millis(&w["acquired_at"]) + 1_000
    );
}

#[tokio::test]
async fn a_sole_reader_is_upgraded_and_a_writer_downgraded_with_new_tokens() {
    let s = TestServer::manual().await;
    let read = s.grant_hold(RW, "doc", mode("a", "read")).await;
    let up = s.hold(RW, "doc", mode("a", "write")).await;
    assert_eq!(
        (&up.body["acquired"], &up.body["extended"]),
        (&json!(true), &json!(false))
    );
    let write = up.body["hold"].clone();
    assert_item(&write, "doc", "a", ("mode", json!("write")));
    assert!(
        token(&write) > token(&read),
        "exclusivity starts now: a new token"
    );
    assert_eq!(up.body["replaced"], read);
    assert_eq!(s.holds(RW, "doc").await.body["holders"], json!([write]));
    // The read hold is gone: its token is no longer current.
    let stale = s
        .release_hold(RW, "doc", json!({"owner": "a", "fencing_token": token(&read)}))
        .await;
    assert_problem(&stale, 409, "/rwlocks/doc");

    let down = s.hold(RW, "doc", mode("a", "read")).await;
    assert_eq!(down.body["acquired"], true);
    let again = down.body["hold"].clone();
    assert_item(&again, "doc", "a", ("mode", json!("read")));
    assert!(token(&again) > token(&write));
    assert_eq!(down.body["replaced"], write);
    assert_eq!(
        s.holds(RW, "doc").await.body,
        json!({"name": "doc", "mode": "read", "holders": [again]})
    );
    // Another reader may join now.
    s.grant_hold(RW, "doc", mode("b", "read")).await;
}

#[tokio::test]
async fn a_reader_among_others_is_not_upgraded_and_keeps_its_read_hold() {
    let s = TestServer::manual().await;
    let a = s.grant_hold(RW, "doc", mode("a", "read")).await;
    let b = s.grant_hold(RW, "doc", mode("b", "read")).await;
    let up = s.hold(RW, "doc", mode("a", "write")).await;
    assert_eq!(up.body["acquired"], false, "{up:?}");
    assert_eq!(
        (&up.body["mode"], &up.body["holders"]),
        (&json!("read"), &json!([b]))
    );
    assert_eq!(s.holds(RW, "doc").await.body["holders"], json!([a, b]));
}

#[tokio::test]
async fn locks_semaphores_and_rwlocks_are_separate_namespaces() {
    let s = TestServer::manual().await;
    let lock = s.grant("x", "a", 30).await;
    let permit = s.grant_hold(SEM, "x", permit("b", 1)).await;
    let hold = s.grant_hold(RW, "x", mode("c", "write")).await;
    let mut tokens = [token(&lock), token(&permit), token(&hold)];
    tokens.sort_unstable();
    tokens.windows(2).for_each(|w| assert!(w[0] < w[1]));
    assert_eq!(s.get("x").await.body["owner"], "a");
    assert_eq!(s.holds(SEM, "x").await.body["permits"][0]["owner"], "b");
    assert_eq!(s.holds(RW, "x").await.body["holders"][0]["owner"], "c");
    let released = s.release_hold(SEM, "x", json!({"owner": "b"})).await;
    assert_eq!(released.status, StatusCode::NO_CONTENT);
    assert_eq!(s.get("x").await.status, StatusCode::OK);
    assert_eq!(s.holds(RW, "x").await.status, StatusCode::OK);
}

#[tokio::test]
async fn names_are_the_segment_after_the_collection_and_percent_decoded() {
    let s = TestServer::manual().await;
    for collection in [SEM, RW] {
        let body = if collection == SEM {
            permit("a", 1)
        } else {
            mode("a", "read")
        };
        // POST /semaphores/renew acquires the semaphore named "renew"; …/renew/renew renews it.
        let named = s
            .send(Method::POST, &format!("/{collection}/renew"), Some(body.clone()))
            .await;
        assert_eq!(named.body["acquired"], true, "{named:?}");
        let item = if collection == SEM { "permit" } else { "hold" };
        assert_eq!(named.body[item]["name"], "renew");
        let renewed = s
            .send(
                Method::POST,
                &format!("/{collection}/renew/renew"),
                Some(json!({"owner": "a", "ttl_seconds": 5})),
            )
            .await;
        assert_eq!(
            (renewed.status, &renewed.body["name"]),
            (StatusCode::OK, &json!("renew"))
        );
        let encoded = s
            .send(Method::POST, &format!("/{collection}/gpu%3Aa%2Fb"), Some(body))
            .await;
        assert_eq!(encoded.body[item]["name"], "gpu:a/b");
        assert_eq!(s.holds(collection, "gpu:a/b").await.status, StatusCode::OK);
    }
}

#[tokio::test]
async fn every_bad_name_is_a_422_on_name_and_changes_nothing() {
    let s = TestServer::manual().await;
    let long = "a".repeat(256);
    for collection in [SEM, RW] {
        let body = if collection == SEM {
            permit("a", 1)
        } else {
            mode("a", "read")
        };
        for bad in ["%FF", "%ZZ", "a%00b", "%7F", "%C3", long.as_str()] {
            let path = format!("/{collection}/{bad}");
            assert_invalid(&s.send(Method::POST, &path, Some(body.clone())).await, &["name"]);
            assert_invalid(&s.send(Method::GET, &path, None).await, &["name"]);
            let release = json!({"owner": "a"});
            assert_invalid(&s.send(Method::DELETE, &path, Some(release)).await, &["name"]);
            let renew = json!({"owner": "a", "ttl_seconds": 5});
            assert_invalid(
                &s.send(Method::POST, &format!("{path}/renew"), Some(renew)).await,
                &["name"],
            );
        }
        for empty in [format!("/{collection}/"), format!("/{collection}//renew")] {
            assert_invalid(&s.send(Method::POST, &empty, Some(body.clone())).await, &["name"]);
        }
        // A bad name and a bad body: every field is listed.
        let both = s
            .send(
                Method::POST,
                &format!("/{collection}/%FF"),
                Some(json!({"owner": ""})),
            )
            .await;
        let claim = if collection == SEM { "limit" } else { "mode" };
        assert_invalid(&both, &["name", "owner", "ttl_seconds", claim]);
    }
    assert_eq!(
        s.send(Method::GET, "/semaphores", None).await.body["semaphores"],
        json!([])
    );
    assert_eq!(
        s.send(Method::GET, "/rwlocks", None).await.body["rwlocks"],
        json!([])
    );
}

#[tokio::test]
async fn every_bad_limit_is_a_422_on_limit_and_changes_nothing() {
    let s = TestServer::manual().await;
    let held = s.grant_hold(SEM, "gpu", permit("a", 2)).await;
    let before = s.holds(SEM, "gpu").await.body;
    let over_u32: Value = serde_json::from_str("4294967297").unwrap();
    for bad in [
        json!(0),
        json!(10_001),
        json!("5"),
        json!(5.0),
        json!(5.5),
        json!(null),
        json!(-1),
        json!(true),
        over_u32,
    ] {
        let answer = s
            .hold(SEM, "gpu", json!({"owner": "b", "limit": bad, "ttl_seconds": 5}))
            .await;
        assert_invalid(&answer, &["limit"]);
        assert_problem(&answer, 422, "/semaphores/gpu");
    }
    assert_invalid(
        &s.hold(SEM, "gpu", json!({"owner": "b", "ttl_seconds": 5})).await,
        &["limit"],
    );
    // The maximum itself is accepted (on a free semaphore).
    assert_eq!(
        s.grant_hold(SEM, "big", permit("b", 10_000)).await["limit"],
        10_000
    );
    assert_eq!(s.holds(SEM, "gpu").await.body, before);
    // The holder's extension is refused as well if it gives a bad limit: nothing changes.
    assert_invalid(&s.hold(SEM, "gpu", permit("a", 0)).await, &["limit"]);
    assert_eq!(token(&s.holds(SEM, "gpu").await.body["permits"][0]), token(&held));
}

#[tokio::test]
async fn the_largest_limit_is_configurable() {
    let config = Config {
        limits: Limits {
            max_limit: 3,
            ..Limits::default()
        },
        ..Config::default()
    };
    let s = TestServer::start(std::sync::Arc::new(fencelock_core::MemoryStore::new()), config).await;
    assert_invalid(&s.hold(SEM, "gpu", permit("a", 4)).await, &["limit"]);
    assert_eq!(s.grant_hold(SEM, "gpu", permit("a", 3)).await["limit"], 3);
}

#[tokio::test]
async fn every_bad_mode_is_a_422_on_mode_and_changes_nothing() {
    let s = TestServer::manual().await;
    let held = s.grant_hold(RW, "doc", mode("a", "read")).await;
    for bad in [
        json!("READ"),
        json!("Write"),
        json!("read "),
        json!(""),
        json!(null),
        json!(1),
        json!(["read"]),
        json!({"mode": "read"}),
    ] {
        let answer = s
            .hold(RW, "doc", json!({"owner": "a", "mode": bad, "ttl_seconds": 5}))
            .await;
        assert_invalid(&answer, &["mode"]);
    }
    assert_invalid(
        &s.hold(RW, "doc", json!({"owner": "a", "ttl_seconds": 5})).await,
        &["mode"],
    );
    assert_eq!(
        s.holds(RW, "doc").await.body["holders"],
        json!([held]),
        "nothing changed"
    );
}

#[tokio::test]
async fn null_fields_both_ttls_and_bad_owners_are_422_and_change_nothing() {
    let s = TestServer::manual().await;
    for (collection, claim) in [(SEM, ("limit", json!(2))), (RW, ("mode", json!("read")))] {
        let body = |fields: Value| {
            let mut body = fields.as_object().unwrap().clone();
            body.insert(claim.0.into(), claim.1.clone());
            Value::Object(body)
        };
        for (bad, fields) in [
            (
                json!({"owner": "a", "ttl_seconds": 5, "ttl_ms": 5000}),
                vec!["ttl_seconds", "ttl_ms"],
            ),
            (json!({"owner": null, "ttl_seconds": 5}), vec!["owner"]),
            (json!({"owner": "a", "ttl_seconds": null}), vec!["ttl_seconds"]),
            (
                json!({"owner": "a", "ttl_ms": 5, "wait_ms": null}),
                vec!["wait_ms"],
            ),
            (
                json!({"owner": "a", "ttl_ms": 5, "wait_ms": 300_001}),
                vec!["wait_ms"],
            ),
            (json!({"owner": "a", "ttl_seconds": 86_401}), vec!["ttl_seconds"]),
            (
                json!({"owner": "  ", "ttl_seconds": "5"}),
                vec!["owner", "ttl_seconds"],
            ),
            (json!({"ttl_seconds": 5}), vec!["owner"]),
        ] {
            assert_invalid(&s.hold(collection, "r", body(bad)).await, &fields);
        }
        let null_claim = json!({"owner": "a", "ttl_seconds": 5, claim.0: null});
        assert_invalid(&s.hold(collection, "r", null_claim).await, &[claim.0]);
        assert_problem(&s.holds(collection, "r").await, 404, &format!("/{collection}/r"));

        // Release and renew check their bodies as a lock's do.
        let held = s
            .grant_hold(collection, "r", body(json!({"owner": "a", "ttl_seconds": 5})))
            .await;
        let release = s
            .release_hold(collection, "r", json!({"owner": "a", "fencing_token": null}))
            .await;
        assert_invalid(&release, &["fencing_token"]);
        let renew = s
            .renew_hold(
                collection,
                "r",
                json!({"owner": "a", "ttl_seconds": 5, "ttl_ms": 5}),
            )
            .await;
        assert_invalid(&renew, &["ttl_seconds", "ttl_ms"]);
        let renew = s
            .renew_hold(collection, "r", json!({"owner": "a", "fencing_token": "1"}))
            .await;
        assert_invalid(&renew, &["ttl_seconds", "fencing_token"]);
        let live = &s.holds(collection, "r").await.body;
        let item = if collection == SEM {
            &live["permits"][0]
        } else {
            &live["holders"][0]
        };
        assert_eq!(item, &held, "nothing changed");
    }
}

#[tokio::test]
async fn bodies_that_are_not_json_objects_or_too_large_or_not_json_are_problems() {
    let s = TestServer::manual().await;
    for path in [
        "/semaphores/r",
        "/rwlocks/r",
        "/semaphores/r/renew",
        "/rwlocks/r/renew",
    ] {
        let json = Some("application/json");
        assert_problem(
            &s.send_raw(Method::POST, path, json, b"[1]".to_vec()).await,
            400,
            path,
        );
        assert_problem(
            &s.send_raw(Method::POST, path, json, b"{".to_vec()).await,
            400,
            path,
        );
        assert_problem(
            &s.send_raw(Method::POST, path, Some("text/plain"), b"{}".to_vec())
                .await,
            415,
            path,
        );
        assert_problem(
            &s.send_raw(Method::POST, path, None, b"{}".to_vec()).await,
            415,
            path,
        );
        let big = format!(r#"{{"owner": "a", "x": "{}"}}"#, "x".repeat(16_384));
        assert_problem(
            &s.send_raw(Method::POST, path, json, big.into_bytes()).await,
            413,
            path,
        );
    }
    assert_problem(
        &s.send(Method::PUT, "/semaphores/r", None).await,
        405,
        "/semaphores/r",
    );
    assert_problem(&s.send(Method::DELETE, "/rwlocks", None).await, 405, "/rwlocks");
}

#[tokio::test]
async fn lists_page_names_with_live_holds_in_byte_order() {
    let s = TestServer::manual().await;
    for name in ["b", "a", "c/d", "other"] {
        s.grant_hold(SEM, name, permit("o", 2)).await;
        s.grant_hold(SEM, name, permit("p", 2)).await;
        s.grant_hold(RW, name, mode("o", "read")).await;
    }
    s.grant_hold(
        SEM,
        "expiring",
        json!({"owner": "o", "limit": 1, "ttl_seconds": 1}),
    )
    .await;
    s.advance(Duration::from_secs(2));
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            None => "/semaphores?limit=2".to_owned(),
            Some(c) => format!("/semaphores?limit=2&cursor={c}"),
        };
        let page = s.send(Method::GET, &query, None).await;
        assert_eq!(page.status, StatusCode::OK, "{page:?}");
        for semaphore in page.body["semaphores"].as_array().unwrap() {
            assert_eq!(semaphore["limit"], 2);
            let owners: Vec<&str> = semaphore["permits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["owner"].as_str().unwrap())
                .collect();
            assert_eq!(owners, ["o", "p"], "permits in token order");
            names.push(semaphore["name"].as_str().unwrap().to_owned());
        }
        match page.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(names, ["a", "b", "c/d", "other"]);
    let rwlocks = s.send(Method::GET, "/rwlocks?prefix=c%2F", None).await;
    assert_eq!(
        rwlocks.body,
        json!({"rwlocks": [{"name": "c/d", "mode": "read",
            "holders": s.holds(RW, "c/d").await.body["holders"]}], "next_cursor": null})
    );
    for bad in ["limit=0", "limit=1001", "cursor=zz", "prefix=%FF"] {
        let field = bad.split('=').next().unwrap();
        assert_invalid(
            &s.send(Method::GET, &format!("/semaphores?{bad}"), None).await,
            &[field],
        );
        assert_invalid(
            &s.send(Method::GET, &format!("/rwlocks?{bad}"), None).await,
            &[field],
        );
    }
}

#[tokio::test]
async fn a_waiting_permit_is_granted_when_a_holder_releases() {
    let s = TestServer::manual().await;
    let a = s.grant_hold(SEM, "gpu", permit("a", 1)).await;
    let waiting = {
        let (url, client) = (format!("{}/semaphores/gpu", s.base), s.client.clone());
        tokio::spawn(async move {
            let body = json!({"owner": "b", "limit": 1, "ttl_seconds": 5, "wait_ms": 10_000});
            let answer = client.post(url).json(&body).send().await.unwrap();
            answer.json::<Value>().await.unwrap()
        })
    };
    s.until_waiters(1).await;
    let released = s.release_hold(SEM, "gpu", json!({"owner": "a"})).await;
    assert_eq!(released.status, StatusCode::NO_CONTENT);
    let granted = waiting.await.unwrap();
    assert_eq!(granted["acquired"], true, "{granted}");
    assert!(token(&granted["permit"]) > token(&a));
    // A wait that runs out answers acquired: false (the manual clock keeps b's permit live).
    let late = s
        .hold(
            SEM,
            "gpu",
            json!({"owner": "c", "limit": 1, "ttl_seconds": 5, "wait_ms": 20}),
        )
        .await;
    assert_eq!(
        (&late.body["acquired"], &late.body["holders"]),
        (&json!(false), &json!(1))
    );
}

#[tokio::test]
async fn the_openapi_description_has_the_semaphore_and_rwlock_routes() {
    let s = TestServer::manual().await;
    let doc = s.send(Method::GET, "/openapi.json", None).await.body;
    let paths = &doc["paths"];
    for collection in ["/semaphores", "/rwlocks"] {
        assert!(paths[collection]["get"].is_object(), "{collection}");
        let one = &paths[format!("{collection}/{{name}}")];
        for method in ["post", "get", "delete"] {
            assert!(one[method].is_object(), "{collection}/{{name}} {method}");
        }
        let renew = &paths[format!("{collection}/{{name}}/renew")]["post"]["responses"];
        // 403: a missing right, or the owner name's hold is another principal's.
        for status in [
            "200", "400", "401", "403", "404", "409", "413", "415", "422", "429", "503",
        ] {
            assert!(
                renew.get(status).is_some(),
                "{collection} renew does not describe {status}"
            );
        }
    }
    assert!(paths["/semaphores/{name}"]["post"]["responses"]["409"].is_object());
    let schemas = &doc["components"]["schemas"];
    for schema in [
        "SemaphoreAcquireRequest",
        "RwLockAcquireRequest",
        "SemaphoreAcquireResponse",
        "RwLockAcquireResponse",
        "PermitBody",
        "HoldBody",
        "SemaphoreBody",
        "RwLockBody",
        "SemaphoreListResponse",
        "RwLockListResponse",
        "PermitGranted",
        "SemaphoreBusy",
        "HoldGranted",
        "RwLockBusy",
        "Mode",
    ] {
        assert!(schemas.get(schema).is_some(), "{schema} missing");
    }
    let limit = &schemas["SemaphoreAcquireRequest"]["properties"]["limit"];
    assert_eq!(
        (limit["minimum"].as_u64(), limit["maximum"].as_u64()),
        (Some(1), Some(10_000))
    );
    assert_eq!(
        schemas["SemaphoreAcquireRequest"]["required"],
        json!(["owner", "limit"])
    );
    assert_eq!(
        schemas["RwLockAcquireRequest"]["properties"]["mode"]["enum"],
        json!(["read", "write"])
    );
    assert!(schemas["Problem"]["properties"]["limit"].is_object());
}
