//! The dashboard's routes through a real server and a real HTTP client: its files with their
//! content types, entity tags and security headers (a 404 too), `GET /whoami` without
//! authentication, and the waiters that `GET` on one name shows. (The page itself is tested
//! in Chromium: `crates/server/ui/test`.)

mod common;

use common::{TestServer, assert_problem, hold_path};
use fencelock_testkit::eventually;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Every security header of the dashboard's answers, on `answer`.
fn assert_guarded(answer: &common::Answer, path: &str) {
    let header = |name: &str| answer.headers.get(name).map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(header("content-security-policy").as_deref(), Some(CSP), "{path}");
    assert_eq!(
        header("x-content-type-options").as_deref(),
        Some("nosniff"),
        "{path}"
    );
    assert_eq!(
        header("referrer-policy").as_deref(),
        Some("no-referrer"),
        "{path}"
    );
}

#[tokio::test]
async fn the_dashboards_files_have_their_content_types_an_etag_and_a_strict_csp() {
    let s = TestServer::real().await;
    let files = [
        ("/ui", "text/html; charset=utf-8", "<!doctype html>"),
        ("/ui/app.js", "text/javascript; charset=utf-8", "import"),
        ("/ui/api.js", "text/javascript; charset=utf-8", "export"),
        ("/ui/live.js", "text/javascript; charset=utf-8", "export"),
        ("/ui/tables.js", "text/javascript; charset=utf-8", "export"),
        ("/ui/charts.js", "text/javascript; charset=utf-8", "export"),
        ("/ui/app.css", "text/css; charset=utf-8", ":root"),
        ("/ui/icon.svg", "image/svg+xml", "<svg"),
    ];
    for (path, content_type, start) in files {
        let answer = s.send(Method::GET, path, None).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
        assert_eq!(answer.content_type, content_type, "{path}");
        assert!(String::from_utf8_lossy(&answer.raw).contains(start), "{path}");
        assert_guarded(&answer, path);
        assert_eq!(answer.headers["cache-control"], "no-cache", "{path}");
        // The browser's copy, sent back by its tag, is current: 304 without a body.
        let etag = answer.headers["etag"].clone();
        let again = s
            .client
            .get(format!("{}{path}", s.base))
            .header("if-none-match", etag.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
        assert_eq!(again.headers()["etag"], etag, "{path}");
        assert!(again.headers().contains_key("content-security-policy"), "{path}");
        assert!(again.bytes().await.unwrap().is_empty(), "{path}");
    }
}

#[tokio::test]
async fn the_page_has_no_inline_script_or_style() {
    let s = TestServer::real().await;
    let answer = s.send(Method::GET, "/ui", None).await;
    assert_eq!(
        (answer.status, answer.content_type.as_str()),
        (StatusCode::OK, "text/html; charset=utf-8")
    );
    let page = String::from_utf8(answer.raw).unwrap();
    // Scripts only by src, styles only by a sheet: what the CSP allows and nothing it blocks.
    assert!(!page.contains("style="), "an inline style attribute");
    assert!(!page.contains("<style"), "an inline style sheet");
    for script in page.split("<script").skip(1) {
        assert!(
            script.trim_start().starts_with("type=\"module\" src=\"/ui/"),
            "{script}"
        );
    }
    // An event handler attribute: ` on` and letters, then `=`.
    let handler = page.match_indices(" on").any(|(at, _)| {
        let rest = &page[at + 3..];
        let name = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_lowercase()).len();
        name > 0 && rest[name..].starts_with('=')
    });
    assert!(!handler, "an inline event handler");
}

#[tokio::test]
async fn an_unknown_file_of_the_dashboard_is_a_404_problem_with_the_same_headers() {
    let s = TestServer::real().await;
    for path in ["/ui/nope.js", "/ui/..%2Fapp.js", "/ui/app.js.map"] {
        let answer = s.send(Method::GET, path, None).await;
        assert_problem(&answer, 404, path);
        assert_guarded(&answer, path);
    }
    // Only GET: a POST is 405, as on any route.
    assert_eq!(s.send(Method::POST, "/ui", Some(json!({}))).await.status, 405);
}

#[tokio::test]
async fn the_page_with_a_trailing_slash_is_a_permanent_redirect_to_the_page() {
    let s = TestServer::real().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let answer = client.get(format!("{}/ui/", s.base)).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(answer.headers()["location"], "/ui");
    assert_eq!(answer.headers()["content-security-policy"], CSP);
    // Followed, as a browser does: the page.
    let followed = s.send(Method::GET, "/ui/", None).await;
    assert_eq!(
        (followed.status, followed.content_type.as_str()),
        (StatusCode::OK, "text/html; charset=utf-8")
    );
    assert_guarded(&followed, "/ui/");
}

#[tokio::test]
async fn whoami_without_authentication_is_nobody_with_every_right_on_every_name() {
    let s = TestServer::real().await;
    let me = s.send(Method::GET, "/whoami", None).await;
    assert_eq!(me.status, StatusCode::OK, "{me:?}");
    assert_eq!(
        me.body,
        json!({"principal": null, "grants": [{"prefix": "", "rights": ["read", "lock", "admin"]}]})
    );
}

/// Waits until `GET path` shows `n` waiters; the answer then.
async fn until_waiting(s: &TestServer, path: &str, n: usize) -> Value {
    eventually(
        Duration::from_secs(10),
        &format!("{n} waiters on {path}"),
        async || {
            let answer = s.send(Method::GET, path, None).await;
            let waiters = answer.body["waiters"].as_array().map_or(0, Vec::len);
            if waiters == n {
                Ok(answer.body)
            } else {
                Err(format!("{waiters} waiters: {answer:?}"))
            }
        },
    )
    .await
}

#[tokio::test]
async fn get_shows_this_servers_waiters_in_line_order_on_every_kind() {
    let s = TestServer::real().await;
    s.grant("report", "holder", 60).await;
    s.grant_hold(
        "semaphores",
        "pool",
        json!({"owner": "p1", "limit": 1, "ttl_seconds": 60}),
    )
    .await;
    s.grant_hold(
        "rwlocks",
        "table",
        json!({"owner": "r1", "mode": "read", "ttl_seconds": 60}),
    )
    .await;
    // Nobody waits: the answer is the lease as it always was.
    assert_eq!(s.get("report").await.body.get("waiters"), None);

    let waits = [
        (
            "/locks/report".to_owned(),
            json!({"owner": "second", "ttl_seconds": 60, "wait_ms": 30_000}),
        ),
        (
            "/locks/report".to_owned(),
            json!({"owner": "third", "ttl_seconds": 60, "wait_ms": 20_000}),
        ),
        (
            hold_path("semaphores", "pool"),
            json!({"owner": "p2", "limit": 1, "ttl_seconds": 60, "wait_ms": 30_000}),
        ),
        (
            hold_path("rwlocks", "table"),
            json!({"owner": "w1", "mode": "write", "ttl_seconds": 60, "wait_ms": 30_000}),
        ),
    ];
    let mut waiting = Vec::new();
    for (i, (path, body)) in waits.into_iter().enumerate() {
        let (client, url) = (s.client.clone(), format!("{}{path}", s.base));
        waiting.push(tokio::spawn(
            async move { client.post(url).json(&body).send().await },
        ));
        // Each in line before the next, so that the order is known.
        s.until_waiters(i as u64 + 1).await;
    }

    let lock = until_waiting(&s, "/locks/report", 2).await;
    let owners: Vec<&Value> = lock["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| &w["owner"])
        .collect();
    assert_eq!(owners, [&json!("second"), &json!("third")]);
    let first = &lock["waiters"][0];
    let (since, until) = (first["since"].as_str().unwrap(), first["until"].as_str().unwrap());
    let ms = |t: &str| humantime::parse_rfc3339(t).unwrap();
    assert_eq!(
        ms(until).duration_since(ms(since)).unwrap(),
        Duration::from_secs(30)
    );
    // The lease is as it was, the waiters beside it.
    assert_eq!(lock["owner"], "holder");

    let pool = until_waiting(&s, &hold_path("semaphores", "pool"), 1).await;
    assert_eq!(pool["waiters"][0]["owner"], "p2");
    assert_eq!(pool["waiters"][0].get("mode"), None);
    assert_eq!(pool["permits"][0]["owner"], "p1");
    let table = until_waiting(&s, &hold_path("rwlocks", "table"), 1).await;
    assert_eq!(table["waiters"][0]["owner"], "w1");
    assert_eq!(table["waiters"][0]["mode"], "write");

    // Once granted, a waiter is out of the line.
    s.release("report", json!({"owner": "holder"})).await;
    let lock = until_waiting(&s, "/locks/report", 1).await;
    assert_eq!(lock["owner"], "second");
    assert_eq!(lock["waiters"][0]["owner"], "third");
    for task in waiting {
        task.abort();
    }
}

#[tokio::test]
async fn the_openapi_description_of_get_on_one_name_has_its_waiters() {
    let s = TestServer::real().await;
    let doc = s.send(Method::GET, "/openapi.json", None).await.body;
    for (path, body) in [
        ("/locks/{resource}", "LeaseBody"),
        ("/semaphores/{name}", "SemaphoreBody"),
        ("/rwlocks/{name}", "RwLockBody"),
    ] {
        let answer = &doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
        let named = answer["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix("#/components/schemas/"));
        let schemas = &doc["components"]["schemas"];
        let answer = named.map_or(answer, |name| &schemas[name]);
        // The body as without waiters (inlined, or by its name), and the waiters beside it.
        let [held, waiters] = answer["allOf"].as_array().map(Vec::as_slice).unwrap_or_default() else {
            panic!("{path}: {answer}");
        };
        let by_name = json!({"$ref": format!("#/components/schemas/{body}")});
        assert!(held == &schemas[body] || held == &by_name, "{path}: {held}");
        let items = &waiters["properties"]["waiters"]["items"];
        assert_eq!(
            items["$ref"], "#/components/schemas/WaiterBody",
            "{path}: {waiters}"
        );
        assert!(
            !waiters["required"]
                .as_array()
                .is_some_and(|r| r.contains(&json!("waiters")))
        );
    }
    assert!(doc["components"]["schemas"]["WaiterBody"]["properties"]["owner"].is_object());
}
