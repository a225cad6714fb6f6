//! Every row of the SPEC's answers table, through a real HTTP client against a real server.

mod common;

use std::time::Duration;

use common::{TestServer, assert_invalid, assert_problem};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn assert_timestamp(value: &Value) {
    let text = value.as_str().expect("a timestamp string");
    // e.g. 2026-11-29T06:30:00.123Z: exactly three fraction digits, UTC.
    assert_eq!(text.len(), 24, "{text}");
    assert!(text.ends_with('Z') && text.as_bytes()[19] == b'.', "{text}");
    assert!(text[20..23].bytes().all(|b| b.is_ascii_digit()), "{text}");
}

fn assert_lease(lease: &Value, resource: &str, owner: &str) {
    assert_eq!(lease["resource"], resource, "{lease}");
    assert_eq!(lease["owner"], owner, "{lease}");
    assert!(lease["fencing_token"].as_u64().is_some_and(|t| t > 0), "{lease}");
    assert_timestamp(&lease["acquired_at"]);
    assert_timestamp(&lease["expires_at"]);
    let keys: Vec<&String> = lease.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 5, "{lease}");
}

fn millis(timestamp: &Value) -> u64 {
    let time = humantime::parse_rfc3339(timestamp.as_str().unwrap()).unwrap();
    time.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

#[tokio::test]
async fn acquire_of_a_free_resource_grants_a_lease() {
    let s = TestServer::manual().await;
    let answer = s
        .acquire("payment:42", json!({"owner": "worker-7", "ttl_seconds": 30}))
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.content_type, "application/json");
    assert_eq!(answer.body["acquired"], true);
    assert_eq!(answer.body["extended"], false);
    let lease = &answer.body["lock"];
    assert_lease(lease, "payment:42", "worker-7");
    assert_eq!(
        millis(&lease["expires_at"]) - millis(&lease["acquired_at"]),
        30_000
    );
    assert_eq!(s.get("payment:42").await.body, *lease);

    let ms = s.acquire("other", json!({"owner": "w", "ttl_ms": 1500})).await;
    let lease = &ms.body["lock"];
    assert_eq!(millis(&lease["expires_at"]) - millis(&lease["acquired_at"]), 1500);
}

#[tokio::test]
async fn percent_encoded_and_plain_names_are_the_same_resource() {
    let s = TestServer::manual().await;
    let lease = s.grant("payment%3A42", "w", 30).await;
    assert_eq!(lease["resource"], "payment:42");
    assert_eq!(s.get("payment:42").await.body, lease);
    let slash = s.grant("a%2Fb", "w", 30).await;
    assert_eq!(slash["resource"], "a/b");
    assert_eq!(s.get("a%2fb").await.body, slash);
    // The resource is the segment right after /locks/: POST /locks/renew acquires "renew".
    assert_eq!(s.grant("renew", "w", 30).await["resource"], "renew");
}

#[tokio::test]
async fn acquire_of_a_held_resource_answers_acquired_false() {
    let s = TestServer::manual().await;
    let lease = s.grant("r", "a", 30).await;
    let answer = s.acquire("r", json!({"owner": "b", "ttl_seconds": 30})).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body["acquired"], false);
    assert_eq!(answer.body["resource"], "r");
    assert_eq!(answer.body["holder"], lease);
    assert_eq!(answer.body["expires_in_ms"], 30_000);
    assert!(answer.body.get("lock").is_none());
}

#[tokio::test]
async fn reacquire_by_the_holder_extends_with_the_same_token() {
    let s = TestServer::manual().await;
    let first = s.grant("r", "a", 30).await;
    s.advance(Duration::from_secs(10));
    let answer = s.acquire("r", json!({"owner": " a ", "ttl_seconds": 60})).await;
    assert_eq!(
        (answer.body["acquired"].clone(), answer.body["extended"].clone()),
        (json!(true), json!(true))
    );
    let again = answer.body["lock"].clone();
    assert_eq!(again["fencing_token"], first["fencing_token"]);
    assert_eq!(
        millis(&again["acquired_at"]),
        millis(&first["acquired_at"]) + 10_000
    );
    assert_eq!(
        millis(&again["expires_at"]),
        millis(&again["acquired_at"]) + 60_000
    );
}

#[tokio::test]
async fn get_answers_the_live_lease_or_404() {
    let s = TestServer::manual().await;
    assert_problem(&s.get("absent").await, 404, "/locks/absent");
    let lease = s.grant("r", "a", 30).await;
    let answer = s.get("r").await;
    assert_eq!((answer.status, &answer.body), (StatusCode::OK, &lease));
    s.advance(Duration::from_secs(30));
    assert_problem(&s.get("r").await, 404, "/locks/r");
}

#[tokio::test]
async fn release_answers_204_403_404_409() {
    let s = TestServer::manual().await;
    assert_problem(&s.release("r", json!({"owner": "a"})).await, 404, "/locks/r");
    let lease = s.grant("r", "a", 30).await;
    let token = lease["fencing_token"].as_u64().unwrap();
    assert_problem(&s.release("r", json!({"owner": "b"})).await, 403, "/locks/r");
    assert_problem(
        &s.release("r", json!({"owner": "b", "fencing_token": token}))
            .await,
        403,
        "/locks/r",
    );
    assert_problem(
        &s.release("r", json!({"owner": "a", "fencing_token": token + 1}))
            .await,
        409,
        "/locks/r",
    );
    assert_eq!(s.get("r").await.body, lease, "a refused release changes nothing");
    let released = s
        .release("r", json!({"owner": "a", "fencing_token": token}))
        .await;
    assert_eq!(released.status, StatusCode::NO_CONTENT);
    assert_eq!(released.body, Value::Null);
    assert_problem(&s.get("r").await, 404, "/locks/r");
    assert_problem(&s.release("r", json!({"owner": "a"})).await, 404, "/locks/r");
}

#[tokio::test]
async fn renew_answers_200_403_404_409() {
    let s = TestServer::manual().await;
    let body = |owner: &str| json!({"owner": owner, "ttl_seconds": 60});
    assert_problem(&s.renew("r", body("a")).await, 404, "/locks/r/renew");
    let lease = s.grant("r", "a", 30).await;
    let token = lease["fencing_token"].as_u64().unwrap();
    assert_problem(&s.renew("r", body("b")).await, 403, "/locks/r/renew");
    let stale = json!({"owner": "a", "ttl_seconds": 60, "fencing_token": token + 1});
    assert_problem(&s.renew("r", stale).await, 409, "/locks/r/renew");
    s.advance(Duration::from_secs(5));
    let renewed = s
        .renew(
            "r",
            json!({"owner": "a", "ttl_ms": 60_000, "fencing_token": token}),
        )
        .await;
    assert_eq!(renewed.status, StatusCode::OK);
    assert_lease(&renewed.body, "r", "a");
    assert_eq!(renewed.body["fencing_token"], token);
    assert_eq!(renewed.body["acquired_at"], lease["acquired_at"]);
    assert_eq!(
        millis(&renewed.body["expires_at"]),
        millis(&lease["acquired_at"]) + 65_000
    );
    s.advance(Duration::from_secs(60));
    assert_problem(&s.renew("r", body("a")).await, 404, "/locks/r/renew");
}

#[tokio::test]
async fn list_pages_live_leases_in_byte_order() {
    let s = TestServer::manual().await;
    for name in ["b", "a", "B", "%C3%A9", "a%2F1", "z"] {
        s.grant(&format!("job%3A{name}"), "o", 30).await;
    }
    s.grant("other", "o", 30).await;
    s.acquire("job:gone", json!({"owner": "o", "ttl_ms": 10})).await;
    s.advance(Duration::from_millis(10));

    let all = s.send(Method::GET, "/locks?prefix=job%3A", None).await;
    assert_eq!(all.status, StatusCode::OK);
    let names: Vec<&str> = all.body["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["resource"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["job:B", "job:a", "job:a/1", "job:b", "job:z", "job:é"]);
    assert_eq!(all.body["next_cursor"], Value::Null);

    let mut seen = Vec::new();
    let mut path = "/locks?prefix=job:&limit=4".to_owned();
    loop {
        let page = s.send(Method::GET, &path, None).await;
        assert_eq!(page.status, StatusCode::OK, "{page:?}");
        let locks = page.body["locks"].as_array().unwrap();
        assert!(locks.len() <= 4);
        seen.extend(locks.iter().map(|l| l["resource"].as_str().unwrap().to_owned()));
        match page.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/locks?prefix=job:&limit=4&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, names);
    let everything = s.send(Method::GET, "/locks", None).await;
    assert_eq!(everything.body["locks"].as_array().unwrap().len(), 7);
}

#[tokio::test]
async fn list_parameters_are_validated() {
    let s = TestServer::manual().await;
    for (query, fields) in [
        ("limit=0", vec!["limit"]),
        ("limit=1001", vec!["limit"]),
        ("limit=ten", vec!["limit"]),
        ("cursor=zz", vec!["cursor"]),
        ("prefix=%01&limit=-1&cursor=0", vec!["prefix", "limit", "cursor"]),
        // Not decoded lossily: invalid UTF-8 and malformed escapes are bad input.
        ("prefix=%FF", vec!["prefix"]),
        ("prefix=job%3", vec!["prefix"]),
        ("limit=%FF", vec!["limit"]),
    ] {
        assert_invalid(
            &s.send(Method::GET, &format!("/locks?{query}"), None).await,
            &fields,
        );
    }
    let max = s.send(Method::GET, "/locks?limit=1000", None).await;
    assert_eq!(max.status, StatusCode::OK);
}

#[tokio::test]
async fn a_422_lists_every_bad_field() {
    let s = TestServer::manual().await;
    let answer = s
        .send(
            Method::POST,
            "/locks/%FF",
            Some(json!({"owner": " ", "ttl_seconds": "30", "wait_ms": -1})),
        )
        .await;
    assert_problem(&answer, 422, "/locks/%FF");
    assert_invalid(&answer, &["resource", "owner", "ttl_seconds", "wait_ms"]);
    let renew = s
        .renew(
            "r",
            json!({"ttl_seconds": 1, "ttl_ms": 1000, "fencing_token": "1"}),
        )
        .await;
    assert_invalid(&renew, &["owner", "ttl_seconds", "ttl_ms", "fencing_token"]);
    let release = s.release("r", json!({"owner": null, "fencing_token": 1.0})).await;
    assert_invalid(&release, &["owner", "fencing_token"]);
}

#[tokio::test]
async fn unknown_fields_are_ignored() {
    let s = TestServer::manual().await;
    let answer = s
        .acquire(
            "r",
            json!({"owner": "a", "ttl_seconds": 5, "colour": "blue", "nested": {"x": [1]}}),
        )
        .await;
    assert_eq!(answer.body["acquired"], true);
}

/// A field sent twice counts as sent last, and a key may be written with escapes: as every
/// JSON object is read, whichever way the server reads an acquire's.
#[tokio::test]
async fn an_acquire_reads_the_last_of_a_field_sent_twice_and_escaped_keys() {
    let s = TestServer::manual().await;
    let post = |path: &'static str, body: &'static str| {
        s.send_raw(Method::POST, path, Some("application/json"), body.into())
    };
    let twice = post(
        "/locks/a",
        r#"{"owner": "x", "owner": "y", "ttl_ms": 0, "ttl_ms": 5000}"#,
    )
    .await;
    assert_eq!(twice.body["acquired"], true, "{twice:?}");
    assert_eq!(s.get("a").await.body["owner"], "y");
    let bad_last = post("/locks/b", r#"{"owner": "x", "ttl_ms": 5000, "ttl_ms": 0}"#).await;
    assert_invalid(&bad_last, &["ttl_ms"]);
    let escaped = post("/locks/c", r#"{"\u006fwner": "z", "ttl_\u006ds": 5000}"#).await;
    assert_eq!(escaped.body["acquired"], true, "{escaped:?}");
    assert_eq!(s.get("c").await.body["owner"], "z");
    let not_an_object = post("/locks/d", r#"["z", 5000]"#).await;
    assert_problem(&not_an_object, 400, "/locks/d");
    assert_problem(&s.get("b").await, 404, "/locks/b");
}

#[tokio::test]
async fn every_bad_integer_is_a_422() {
    let s = TestServer::manual().await;
    let past_u64: Value = serde_json::from_str("18446744073709551616").unwrap();
    let bad = [
        json!("30"),
        json!(60.5),
        json!(60.0),
        json!(1e3),
        json!(true),
        json!(false),
        json!(null),
        json!(-1),
        json!(0),
        json!(86_401),
        past_u64.clone(),
        json!([30]),
        json!({"s": 30}),
    ];
    for value in &bad {
        let answer = s.acquire("r", json!({"owner": "a", "ttl_seconds": value})).await;
        assert_invalid(&answer, &["ttl_seconds"]);
    }
    for value in [json!(0), json!(86_400_001), json!("1000"), json!(1000.0)] {
        assert_invalid(
            &s.acquire("r", json!({"owner": "a", "ttl_ms": value})).await,
            &["ttl_ms"],
        );
    }
    for value in [json!(300_001), json!(-5), json!("0"), json!(null), json!(1.5)] {
        let answer = s
            .acquire("r", json!({"owner": "a", "ttl_seconds": 5, "wait_ms": value}))
            .await;
        assert_invalid(&answer, &["wait_ms"]);
    }
    for value in [json!(-1), json!("7"), json!(7.0), past_u64, json!(true)] {
        assert_invalid(
            &s.release("r", json!({"owner": "a", "fencing_token": value}))
                .await,
            &["fencing_token"],
        );
    }
    // Limits are inclusive.
    assert_eq!(
        s.acquire("max", json!({"owner": "a", "ttl_seconds": 86_400}))
            .await
            .body["acquired"],
        true
    );
    assert_eq!(
        s.acquire("max2", json!({"owner": "a", "ttl_ms": 86_400_000}))
            .await
            .body["acquired"],
        true
    );
    assert_problem(&s.get("r").await, 404, "/locks/r");
}

/// A number past a double's range is valid JSON (RFC 8259 sets no range): a 422 naming its
/// field, on every numeric field of every route, and ignored in a field the API does not know.
#[tokio::test]
async fn numbers_too_large_for_a_double_are_a_422_naming_their_field() {
    let s = TestServer::manual().await;
    // Each route (a POST takes a TTL, a DELETE none), the other members of its body, and
    // its numeric fields.
    let routes: [(&str, &str, &[&str]); 10] = [
        (
            "POST /locks/r",
            r#""owner": "a""#,
            &["ttl_seconds", "ttl_ms", "wait_ms", "max_hold_ms"],
        ),
        (
            "POST /locks/r/renew",
            r#""owner": "a""#,
            &["ttl_seconds", "ttl_ms", "fencing_token"],
        ),
        ("DELETE /locks/r", r#""owner": "a""#, &["fencing_token"]),
        (
            "POST /locks",
            r#""owner": "a", "resources": ["r"]"#,
            &["ttl_seconds", "ttl_ms", "wait_ms", "max_hold_ms"],
        ),
        (
            "POST /semaphores/s",
            r#""owner": "a", "limit": 2"#,
            &["ttl_seconds", "ttl_ms", "wait_ms"],
        ),
        ("POST /semaphores/s", r#""owner": "a""#, &["limit"]),
        (
            "POST /semaphores/s/renew",
            r#""owner": "a""#,
            &["ttl_ms", "fencing_token"],
        ),
        ("DELETE /semaphores/s", r#""owner": "a""#, &["fencing_token"]),
        (
            "POST /rwlocks/w",
            r#""owner": "a", "mode": "read""#,
            &["ttl_seconds", "ttl_ms", "wait_ms"],
        ),
        (
            "POST /rwlocks/w/renew",
            r#""owner": "a""#,
            &["ttl_seconds", "fencing_token"],
        ),
    ];
    let huge = format!("1{}", "0".repeat(400));
    let values = ["1e400", "-1e400", "1.5E+999", huge.as_str(), &format!("-{huge}")];
    for (route, members, fields) in routes {
        let (method, path) = route.split_once(' ').unwrap();
        let method: Method = method.parse().unwrap();
        for field in fields {
            for value in values {
                let ttl = if method == Method::POST && !field.starts_with("ttl_") {
                    r#", "ttl_seconds": 5"#
                } else {
                    ""
                };
                let body = format!("{{{members}, \"{field}\": {value}{ttl}}}");
                let answer = s
                    .send_raw(
                        method.clone(),
                        path,
                        Some("application/json"),
                        body.clone().into(),
                    )
                    .await;
                assert_invalid(&answer, &[field]);
                assert_eq!(answer.body["instance"], path, "{body}");
            }
        }
    }
    // Fields of other types name themselves too; a field nobody reads is ignored.
    for (path, body, field) in [
        ("/locks/r", r#"{"owner": 1e400, "ttl_seconds": 5}"#, "owner"),
        (
            "/locks",
            r#"{"owner": "a", "resources": ["r", -1e400], "ttl_seconds": 5}"#,
            "resources",
        ),
        (
            "/rwlocks/w",
            r#"{"owner": "a", "mode": 1e400, "ttl_seconds": 5}"#,
            "mode",
        ),
    ] {
        let answer = s
            .send_raw(Method::POST, path, Some("application/json"), body.into())
            .await;
        assert_invalid(&answer, &[field]);
    }
    let forced = s
        .send_raw(
            Method::DELETE,
            "/locks/r",
            Some("application/json"),
            r#"{"force": 1e400}"#.into(),
        )
        .await;
    assert_invalid(&forced, &["force"]);
    assert_eq!(
        s.send(Method::GET, "/locks", None).await.body["locks"],
        json!([]),
        "nothing was acquired"
    );
    let ignored = r#"{"owner": "a", "ttl_seconds": 5, "x": 1e400, "y": [-1e999, {"z": 2e308}]}"#;
    let answer = s
        .send_raw(Method::POST, "/locks/r", Some("application/json"), ignored.into())
        .await;
    assert_eq!(answer.body["acquired"], true, "{answer:?}");
}

#[tokio::test]
async fn every_bad_owner_is_a_422() {
    let s = TestServer::manual().await;
    for owner in [
        json!(""),
        json!("   "),
        json!("\t\n"),
        json!("o".repeat(256)),
        json!("a\u{0}b"),
        json!("a\u{1b}b"),
        json!("a\u{7f}"),
        json!(7),
        json!(null),
        json!(["a"]),
    ] {
        assert_invalid(
            &s.acquire("r", json!({"owner": owner, "ttl_seconds": 5})).await,
            &["owner"],
        );
        assert_invalid(&s.release("r", json!({"owner": owner})).await, &["owner"]);
    }
    assert_invalid(&s.acquire("r", json!({"ttl_seconds": 5})).await, &["owner"]);
    let padded = format!("  {}  ", "o".repeat(255));
    assert_eq!(s.grant("r", &padded, 5).await["owner"], "o".repeat(255));
}

#[tokio::test]
async fn every_bad_resource_name_is_a_422() {
    let s = TestServer::manual().await;
    let long = "a".repeat(256);
    let long_encoded = "%C3%A9".repeat(128); // 256 bytes once decoded
    for name in [
        long.as_str(),
        &long_encoded,
        "a%00b",
        "%0A",
        "a%1Fb",
        "%7F",
        "%",
        "%4",
        "%GG",
        "a%2",
        "%FF",
        "%C3",
        "%C3%28",
    ] {
        let instance = format!("/locks/{name}");
        for (answer, suffix) in [
            (s.acquire(name, json!({"owner": "a", "ttl_seconds": 5})).await, ""),
            (s.get(name).await, ""),
            (s.release(name, json!({"owner": "a"})).await, ""),
            (
                s.renew(name, json!({"owner": "a", "ttl_seconds": 5})).await,
                "/renew",
            ),
        ] {
            assert_problem(&answer, 422, &format!("{instance}{suffix}"));
            assert_invalid(&answer, &["resource"]);
        }
    }
    assert_invalid(
        &s.acquire("", json!({"owner": "a", "ttl_seconds": 5})).await,
        &["resource"],
    );
    assert_invalid(
        &s.renew("", json!({"owner": "a", "ttl_seconds": 5})).await,
        &["resource"],
    );
    assert_eq!(
        s.grant(&"a".repeat(255), "a", 5).await["resource"],
        "a".repeat(255)
    );
    assert_eq!(
        s.send(Method::GET, "/locks", None).await.body["locks"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn bodies_that_are_not_json_objects_are_400() {
    let s = TestServer::manual().await;
    let deep = format!("{}{}", "[".repeat(8_000), "]".repeat(8_000));
    for body in [
        "not json",
        "[1,2]",
        "\"owner\"",
        "42",
        "null",
        "{\"owner\": \"a\",",
        "",
        deep.as_str(),
    ] {
        let answer = s
            .send_raw(Method::POST, "/locks/r", Some("application/json"), body.into())
            .await;
        assert_problem(&answer, 400, "/locks/r");
    }
    let nested = format!(
        "{{\"owner\": \"a\", \"ttl_seconds\": 5, \"x\": {}{}}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    assert_problem(
        &s.send_raw(Method::POST, "/locks/r", Some("application/json"), nested.into())
            .await,
        400,
        "/locks/r",
    );
    assert_problem(&s.get("r").await, 404, "/locks/r");
}

#[tokio::test]
async fn wrong_or_missing_content_type_is_415() {
    let s = TestServer::manual().await;
    let body = br#"{"owner": "a", "ttl_seconds": 5}"#.to_vec();
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("application/jsonp"),
    ] {
        for (method, path) in [
            (Method::POST, "/locks/r"),
            (Method::DELETE, "/locks/r"),
            (Method::POST, "/locks/r/renew"),
        ] {
            let answer = s.send_raw(method, path, content_type, body.clone()).await;
            assert_problem(&answer, 415, path);
        }
    }
    let charset = s
        .send_raw(
            Method::POST,
            "/locks/r",
            Some("application/json; charset=utf-8"),
            body,
        )
        .await;
    assert_eq!(charset.body["acquired"], true);
}

#[tokio::test]
async fn a_body_over_16_kib_is_413_and_exactly_16_kib_is_accepted() {
    let s = TestServer::manual().await;
    let body_of = |size: usize| {
        let head = r#"{"owner": "a", "ttl_seconds": 5, "pad": ""#;
        let tail = r#""}"#;
        let mut text = head.to_owned();
        text.push_str(&"x".repeat(size - head.len() - tail.len()));
        text.push_str(tail);
        assert_eq!(text.len(), size);
        text.into_bytes()
    };
    let exact = s
        .send_raw(
            Method::POST,
            "/locks/r",
            Some("application/json"),
            body_of(16_384),
        )
        .await;
    assert_eq!(exact.body["acquired"], true, "{exact:?}");
    let over = s
        .send_raw(
            Method::POST,
            "/locks/s",
            Some("application/json"),
            body_of(16_385),
        )
        .await;
    assert_problem(&over, 413, "/locks/s");
    let huge = s
        .send_raw(
            Method::POST,
            "/locks/s",
            Some("application/json"),
            body_of(5 << 20),
        )
        .await;
    assert_problem(&huge, 413, "/locks/s");
    assert_problem(&s.get("s").await, 404, "/locks/s");
}

#[tokio::test]
async fn unknown_routes_and_methods_are_problems() {
    let s = TestServer::manual().await;
    assert_problem(&s.send(Method::GET, "/nope", None).await, 404, "/nope");
    assert_problem(&s.send(Method::GET, "/locks/a/b", None).await, 404, "/locks/a/b");
    assert_problem(&s.send(Method::PUT, "/locks/r", None).await, 405, "/locks/r");
    assert_problem(
        &s.send(Method::GET, "/locks/r/renew", None).await,
        405,
        "/locks/r/renew",
    );
}

/// A path no route serves is a 404 that says so; a lock that is not held keeps its own.
#[tokio::test]
async fn an_unknown_route_is_a_404_that_says_there_is_no_such_route() {
    let s = TestServer::manual().await;
    for path in ["/nothing", "/locks/a/b", "/semaphores/s/renew/x", "/lock/r"] {
        let answer = s.send(Method::GET, path, None).await;
        assert_problem(&answer, 404, path);
        assert_eq!(
            answer.body["type"], "urn:fencelock:problem:no-route",
            "{answer:?}"
        );
        assert_eq!(answer.body["title"], "No such route.", "{answer:?}");
    }
    let absent = s.get("absent").await;
    assert_problem(&absent, 404, "/locks/absent");
    assert_eq!(absent.body["type"], "urn:fencelock:problem:not-found");
    assert_eq!(absent.body["title"], "No live lock.");
}

#[tokio::test]
async fn health_readiness_metrics_and_openapi_answer() {
    let s = TestServer::manual().await;
    assert_eq!(
        s.send(Method::GET, "/healthz", None).await.body,
        json!({"status": "ok"})
    );
    assert_eq!(
        s.send(Method::GET, "/readyz", None).await.body,
        json!({"status": "ready"})
    );
    s.grant("r", "a", 5).await;
    s.acquire("r", json!({"owner": "b", "ttl_seconds": 5})).await;
    let metrics = s.metrics().await;
    assert!(
        metrics.contains(r#"fencelock_requests_total{kind="lock",op="acquire",outcome="granted"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"fencelock_requests_total{kind="lock",op="acquire",outcome="held"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains("fencelock_waiters 0"), "{metrics}");
    let doc = s.send(Method::GET, "/openapi.json", None).await.body;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{doc}");
    for path in [
        "/locks",
        "/locks/{resource}",
        "/locks/{resource}/renew",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(
            doc["paths"].get(path).is_some(),
            "{path} missing from the OpenAPI description"
        );
    }
    let schemas = &doc["components"]["schemas"];
    for schema in [
        "LeaseBody",
        "AcquireRequest",
        "Problem",
        "ListResponse",
        "Held",
        "Granted",
    ] {
        assert!(schemas.get(schema).is_some(), "{schema} missing");
    }
    // The description states the rules the server enforces.
    let ttl = &schemas["AcquireRequest"]["properties"]["ttl_seconds"];
    assert_eq!(
        (ttl["minimum"].as_f64(), ttl["maximum"].as_f64()),
        (Some(1.0), Some(86_400.0)),
        "{ttl}"
    );
    assert_eq!(ttl["type"], "integer", "null is not a value: {ttl}");
    assert_eq!(schemas["AcquireRequest"]["properties"]["owner"]["maxLength"], 255);
    assert_eq!(schemas["AcquireRequest"]["required"], json!(["owner"]));
    let renew = &doc["paths"]["/locks/{resource}/renew"]["post"]["responses"];
    for status in ["200", "400", "403", "404", "409", "413", "415", "422", "503"] {
        assert!(renew.get(status).is_some(), "renew does not describe {status}");
    }
}

#[tokio::test]
async fn the_openapi_description_has_several_locks_at_once_the_cap_the_delay_and_deadlocks() {
    let s = TestServer::manual().await;
    let doc = s.send(Method::GET, "/openapi.json", None).await.body;
    let schemas = &doc["components"]["schemas"];
    let several = &doc["paths"]["/locks"]["post"];
    assert_eq!(
        several["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/AcquireAllRequest",
        "{several}"
    );
    let request = &schemas["AcquireAllRequest"];
    assert_eq!(request["required"], json!(["owner", "resources"]), "{request}");
    assert_eq!(request["properties"]["resources"]["maxItems"], 64);
    for body in [request, &schemas["AcquireRequest"]] {
        let cap = &body["properties"]["max_hold_ms"];
        assert_eq!(
            (cap["type"].as_str(), cap["minimum"].as_f64()),
            (Some("integer"), Some(1.0)),
            "{cap}"
        );
    }
    assert_eq!(schemas["LeaseBody"]["properties"]["hold_until"]["type"], "string");
    assert!(
        !schemas["LeaseBody"]["required"]
            .as_array()
            .unwrap()
            .contains(&json!("hold_until")),
        "a lease without a cap has no hold_until"
    );
    for (schema, fields) in [
        ("AllGranted", &["acquired", "locks"][..]),
        (
            "AllRefused",
            &["acquired", "held", "retry_after_ms", "refusals"][..],
        ),
        ("Delayed", &["acquired", "resource", "retry_after_ms"][..]),
    ] {
        for field in fields {
            assert!(
                schemas[schema]["required"]
                    .as_array()
                    .is_some_and(|r| r.contains(&json!(field))),
                "{schema}.{field}: {}",
                schemas[schema]
            );
        }
    }
    let answer = serde_json::to_string(&schemas["AcquireResponse"]).unwrap();
    assert!(answer.contains("#/components/schemas/Delayed"), "{answer}");
    for (path, method) in [
        ("/locks", "post"),
        ("/locks/{resource}", "post"),
        ("/semaphores/{name}", "post"),
        ("/rwlocks/{name}", "post"),
    ] {
        let conflict = &doc["paths"][path][method]["responses"]["409"];
        assert!(
            conflict["description"]
                .as_str()
                .is_some_and(|d| d.contains("deadlock")),
            "{path}: {conflict}"
        );
    }
    for status in ["200", "400", "401", "403", "413", "415", "422", "429", "503"] {
        assert!(
            several["responses"].get(status).is_some(),
            "POST /locks does not describe {status}"
        );
    }
}

#[tokio::test]
async fn meta_is_kept_with_every_kind_and_shown_by_every_answer() {
    let s = TestServer::manual().await;
    let meta = json!({"host": "db-3", "pid": 311, "ok": true, "note": null});
    let body = json!({"owner": "w", "ttl_seconds": 30, "meta": meta});
    let granted = s.acquire("job", body.clone()).await;
    assert_eq!(granted.body["lock"]["meta"], meta, "{granted:?}");
    assert_eq!(s.get("job").await.body["meta"], meta);
    let listed = s.send(Method::GET, "/locks?prefix=job", None).await;
    assert_eq!(listed.body["locks"][0]["meta"], meta);
    // An extension without meta keeps it; a renewal with meta replaces it.
    let extended = s.acquire("job", json!({"owner": "w", "ttl_seconds": 30})).await;
    assert_eq!(extended.body["lock"]["meta"], meta);
    let renewed = s
        .renew(
            "job",
            json!({"owner": "w", "ttl_seconds": 30, "meta": {"step": 2}}),
        )
        .await;
    assert_eq!(renewed.body["meta"], json!({"step": 2}), "{renewed:?}");
    assert_eq!(s.get("job").await.body["meta"], json!({"step": 2}));
    // A new token has only what it was sent with: none, and then no field at all.
    s.release("job", json!({"owner": "w"})).await;
    let again = s.acquire("job", json!({"owner": "w", "ttl_seconds": 30})).await;
    assert_lease(&again.body["lock"], "job", "w");

    let permit = s
        .hold(
            "semaphores",
            "pool",
            json!({"owner": "w", "limit": 2, "ttl_seconds": 30, "meta": meta}),
        )
        .await;
    assert_eq!(permit.body["permit"]["meta"], meta, "{permit:?}");
    assert_eq!(
        s.holds("semaphores", "pool").await.body["permits"][0]["meta"],
        meta
    );
    let hold = s
        .hold(
            "rwlocks",
            "cfg",
            json!({"owner": "w", "mode": "read", "ttl_seconds": 30, "meta": meta}),
        )
        .await;
    assert_eq!(hold.body["hold"]["meta"], meta, "{hold:?}");
    let renewed = s
        .renew_hold(
            "rwlocks",
            "cfg",
            json!({"owner": "w", "ttl_seconds": 30, "meta": {"r": 1}}),
        )
        .await;
    assert_eq!(renewed.body["meta"], json!({"r": 1}), "{renewed:?}");
    let all = s
        .acquire_all(json!({"resources": ["x", "y"], "owner": "w", "ttl_seconds": 30, "meta": meta}))
        .await;
    for lock in all.body["locks"].as_array().expect("locks") {
        assert_eq!(lock["meta"], meta, "{all:?}");
    }
}

#[tokio::test]
async fn bad_meta_is_a_422_naming_meta_that_changes_nothing() {
    let s = TestServer::manual().await;
    let held = s
        .acquire(
            "held",
            json!({"owner": "w", "ttl_seconds": 30, "meta": {"kept": 1}}),
        )
        .await
        .body["lock"]
        .clone();
    // Compact, `{"k":"…"}` is 8 bytes around the value: 1,017 of them make 1,025.
    let too_big = json!({"k": "x".repeat(1017)});
    let bad = [
        json!({"nested": {"a": 1}}),
        json!({"list": [1, 2]}),
        json!([1, 2]),
        json!("host=db-3"),
        json!(7),
        json!(null),
        too_big,
    ];
    for meta in bad {
        let ttl = json!({"owner": "w", "ttl_seconds": 30, "meta": meta});
        let mut acquire = ttl.clone();
        assert_invalid(&s.acquire("free", acquire.clone()).await, &["meta"]);
        acquire["resources"] = json!(["free", "other"]);
        assert_invalid(&s.acquire_all(acquire).await, &["meta"]);
        let mut permit = ttl.clone();
        permit["limit"] = json!(2);
        assert_invalid(&s.hold("semaphores", "free", permit).await, &["meta"]);
        let mut read = ttl.clone();
        read["mode"] = json!("read");
        assert_invalid(&s.hold("rwlocks", "free", read).await, &["meta"]);
        assert_invalid(&s.renew("held", ttl.clone()).await, &["meta"]);
    }
    // Nothing was granted, and the held lease is as it was (expiry and meta).
    assert_eq!(s.get("free").await.status, StatusCode::NOT_FOUND);
    assert_eq!(s.get("other").await.status, StatusCode::NOT_FOUND);
    assert_eq!(s.holds("semaphores", "free").await.status, StatusCode::NOT_FOUND);
    assert_eq!(s.holds("rwlocks", "free").await.status, StatusCode::NOT_FOUND);
    assert_eq!(s.get("held").await.body, held);
    // Exactly the limit is fine.
    let fits = json!({"owner": "w", "ttl_seconds": 30, "meta": {"k": "x".repeat(1016)}});
    assert_eq!(s.acquire("fits", fits).await.status, StatusCode::OK);
}
