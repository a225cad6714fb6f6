//! Who may do what, through a real server with a real authentication file and a real HTTP
//! client: 401 without a known token, 403 without the right (alike whether the name is held),
//! leases bound to their principal on every kind, lists of only what the caller may read,
//! force-release by an administrator, the request rate per principal, the header limit.

mod common;

use std::num::NonZeroU32;
use std::sync::Arc;

use common::{
    TestServer, assert_invalid, assert_problem, principal, raw_connection, read_response, series_value,
};
use fencelock_core::MemoryStore;
use fencelock_server::Config;
use fencelock_server::auth::{AuthFile, Keyring, RateLimit, token_sha256};
use fencelock_testkit::Lines;
use fencelock_testkit::fixtures::unique_prefix;
use fencelock_wire::parse::encode_segment;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const BILLING: &str = "billing-3f6a2c";
const RIVAL: &str = "rival-77d01e";
const OPS: &str = "ops-c0ffee";
const LOCKER: &str = "locker-5b2e";
const READER: &str = "reader-a11ce";
const JOBS: &str = "jobs-9d4e1b";
const TOKENS: [&str; 6] = [BILLING, RIVAL, OPS, LOCKER, READER, JOBS];

const KINDS: [&str; 3] = ["locks", "semaphores", "rwlocks"];

/// The file every test server reads: two principals with the same rights on `payment:`,
/// an administrator, one that may lock `job:` without reading it, one that may only read
/// `job:` and `payment:1…`, and one that may read and lock `job:`.
fn auth_file() -> String {
    [
        principal(
            "billing",
            BILLING,
            r#"{ prefix = "payment:", rights = ["read", "lock"] }"#,
        ),
        principal(
            "rival",
            RIVAL,
            r#"{ prefix = "payment:", rights = ["read", "lock"] }"#,
        ),
        principal(
            "ops",
            OPS,
            r#"{ prefix = "", rights = ["read", "lock", "admin"] }"#,
        ),
        principal("locker", LOCKER, r#"{ prefix = "job:", rights = ["lock"] }"#),
        principal(
            "reader",
            READER,
            r#"{ prefix = "payment:1", rights = ["read"] }, { prefix = "job:", rights = ["read"] }"#,
        ),
        principal("jobs", JOBS, r#"{ prefix = "job:", rights = ["read", "lock"] }"#),
    ]
    .concat()
}

/// A server on an in-memory store that reads [`auth_file`] from a file, with `change` made
/// to its configuration.
async fn server_with(change: impl FnOnce(&mut Config)) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    std::fs::write(&path, auth_file()).unwrap();
    let mut config = Config {
        auth: Some(Keyring::new(AuthFile::load(&path).unwrap())),
        ..Config::default()
    };
    change(&mut config);
    TestServer::start(Arc::new(MemoryStore::new()), config).await
}

async fn server() -> TestServer {
    server_with(|_| {}).await
}

/// The path of `name` in `collection`.
fn path(collection: &str, name: &str) -> String {
    format!("/{collection}/{}", encode_segment(name))
}

/// An acquire's body for `collection`.
fn acquire_body(collection: &str, owner: &str) -> Value {
    match collection {
        "locks" => json!({"owner": owner, "ttl_seconds": 60}),
        "semaphores" => json!({"owner": owner, "ttl_seconds": 60, "limit": 3}),
        _ => json!({"owner": owner, "ttl_seconds": 60, "mode": "read"}),
    }
}

/// The member of an acquire's answer that holds the lease.
fn item(collection: &str) -> &'static str {
    match collection {
        "locks" => "lock",
        "semaphores" => "permit",
        _ => "hold",
    }
}

/// A caller: the server and its token.
struct As<'a>(&'a TestServer, &'a str);

impl As<'_> {
    async fn send(&self, method: Method, path: &str, body: Option<Value>) -> common::Answer {
        self.0.send_as(Some(self.1), method, path, body).await
    }

    async fn acquire(&self, collection: &str, name: &str, owner: &str) -> common::Answer {
        self.send(
            Method::POST,
            &path(collection, name),
            Some(acquire_body(collection, owner)),
        )
        .await
    }

    /// Acquires and asserts it was granted; the lease (lock, permit or hold).
    async fn grant(&self, collection: &str, name: &str, owner: &str) -> Value {
        let answer = self.acquire(collection, name, owner).await;
        assert_eq!(
            (answer.status, &answer.body["acquired"]),
            (StatusCode::OK, &json!(true)),
            "{answer:?}"
        );
        answer.body[item(collection)].clone()
    }

    async fn renew(&self, collection: &str, name: &str, body: Value) -> common::Answer {
        let path = format!("{}/renew", path(collection, name));
        self.send(Method::POST, &path, Some(body)).await
    }

    async fn release(&self, collection: &str, name: &str, body: Value) -> common::Answer {
        self.send(Method::DELETE, &path(collection, name), Some(body))
            .await
    }

    async fn force(&self, collection: &str, name: &str) -> common::Answer {
        self.release(collection, name, json!({"force": true})).await
    }

    async fn get(&self, collection: &str, name: &str) -> common::Answer {
        self.send(Method::GET, &path(collection, name), None).await
    }
}

/// Every route behind authentication, for `name`, with a body it takes.
fn api_requests(name: &str) -> Vec<(Method, String, Option<Value>)> {
    let mut requests = Vec::new();
    for collection in KINDS {
        let one = path(collection, name);
        requests.extend([
            (Method::GET, format!("/{collection}"), None),
            (Method::GET, one.clone(), None),
            (Method::POST, one.clone(), Some(acquire_body(collection, "w"))),
            (
                Method::POST,
                format!("{one}/renew"),
                Some(json!({"owner": "w", "ttl_seconds": 60})),
            ),
            (Method::DELETE, one.clone(), Some(json!({"owner": "w"}))),
            (Method::DELETE, one, Some(json!({"force": true}))),
        ]);
    }
    requests
}

#[tokio::test]
async fn no_or_an_unknown_token_is_401_with_a_bearer_challenge_on_every_api_route() {
    let s = server().await;
    let name = format!("{}payment:1", unique_prefix());
    let whoami = (Method::GET, "/whoami".to_owned(), None);
    for (method, path, body) in api_requests(&name).into_iter().chain([whoami]) {
        let instance = path.clone();
        let missing = s.send(method.clone(), &path, body.clone()).await;
        assert_problem(&missing, 401, &instance);
        assert_eq!(
            missing.headers["www-authenticate"], r#"Bearer realm="fencelock""#,
            "{method} {path}"
        );
        // A token one letter short is as unknown as any other.
        for token in ["not-a-token", &BILLING[..BILLING.len() - 1]] {
            let unknown = s.send_as(Some(token), method.clone(), &path, body.clone()).await;
            assert_problem(&unknown, 401, &instance);
            assert_eq!(
                unknown.headers["www-authenticate"],
                r#"Bearer realm="fencelock", error="invalid_token""#
            );
        }
        let basic = s
            .client
            .request(method.clone(), format!("{}{path}", s.base))
            .header("authorization", format!("Basic {BILLING}"))
            .send()
            .await
            .unwrap();
        assert_eq!(basic.status(), 401, "{method} {path}");
    }
    // Nothing was done: the administrator sees nothing held.
    for collection in KINDS {
        assert_eq!(As(&s, OPS).get(collection, &name).await.status, 404);
    }
}

#[tokio::test]
async fn health_readiness_metrics_the_description_and_the_dashboard_need_no_token() {
    let s = server().await;
    for path in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/ui",
        "/ui/app.js",
    ] {
        assert_eq!(s.send(Method::GET, path, None).await.status, 200, "{path}");
    }
    // An unknown route stays a 404, with a token or without.
    assert_problem(&s.send(Method::GET, "/nope", None).await, 404, "/nope");
}

#[tokio::test]
async fn a_missing_right_is_403_and_a_held_name_answers_like_a_free_one() {
    let s = server().await;
    let prefix = unique_prefix();
    let (held, free) = (format!("{prefix}ops:held"), format!("{prefix}ops:free"));
    for collection in KINDS {
        As(&s, OPS).grant(collection, &held, "o").await;
    }
    let (requests_held, requests_free) = (api_requests(&held), api_requests(&free));
    let mut compared = 0;
    for ((method, on_held, body), (_, on_free, _)) in requests_held.into_iter().zip(requests_free) {
        // Lists are never refused: they show what the caller may read.
        if !on_held.contains(&encode_segment(&held)) {
            continue;
        }
        compared += 1;
        for token in [Some(BILLING), None] {
            let a = s.send_as(token, method.clone(), &on_held, body.clone()).await;
            let b = s.send_as(token, method.clone(), &on_free, body.clone()).await;
            let status = if token.is_some() { 403 } else { 401 };
            assert_problem(&a, status, &on_held);
            assert_problem(&b, status, &on_free);
            if token.is_some() {
                assert!(a.body["type"].as_str().unwrap().ends_with(":denied"), "{a:?}");
            }
            let alike = |answer: &common::Answer, instance: &str| {
                String::from_utf8(answer.raw.clone())
                    .unwrap()
                    .replace(&serde_json::to_string(instance).unwrap(), "\"INSTANCE\"")
            };
            assert_eq!(alike(&a, &on_held), alike(&b, &on_free), "{method} {on_held}");
            assert_eq!(
                a.headers.get("www-authenticate"),
                b.headers.get("www-authenticate")
            );
        }
    }
    assert_eq!(compared, 15);
    // Billing's lists of ops' names are empty; nothing was changed.
    for collection in KINDS {
        let listed = As(&s, BILLING)
            .send(Method::GET, &format!("/{collection}?prefix={prefix}"), None)
            .await;
        assert_eq!(listed.status, 200);
        assert_eq!(listed.body["next_cursor"], Value::Null);
        assert!(
            listed.body.as_object().unwrap().values().any(|v| v == &json!([])),
            "{listed:?}"
        );
        assert_eq!(As(&s, OPS).get(collection, &held).await.status, 200);
    }
}

#[tokio::test]
async fn lock_without_read_may_take_but_not_look_and_read_without_lock_may_look_but_not_take() {
    let s = server().await;
    let name = format!("job:{}", unique_prefix());
    for collection in KINDS {
        let lease = As(&s, LOCKER).grant(collection, &name, "l").await;
        assert_eq!(lease["principal"], "locker");
        assert_problem(
            &As(&s, LOCKER).get(collection, &name).await,
            403,
            &path(collection, &name),
        );
        assert_eq!(As(&s, READER).get(collection, &name).await.status, 200);
        let (one, renew) = (
            path(collection, &name),
            format!("{}/renew", path(collection, &name)),
        );
        for (refused, instance) in [
            (As(&s, READER).acquire(collection, &name, "r").await, &one),
            (
                As(&s, READER)
                    .renew(collection, &name, json!({"owner": "l", "ttl_seconds": 60}))
                    .await,
                &renew,
            ),
            (
                As(&s, READER)
                    .release(collection, &name, json!({"owner": "l"}))
                    .await,
                &one,
            ),
            (As(&s, LOCKER).force(collection, &name).await, &one),
        ] {
            assert_problem(&refused, 403, instance);
        }
        let renewed = As(&s, LOCKER)
            .renew(collection, &name, json!({"owner": "l", "ttl_seconds": 60}))
            .await;
        assert_eq!(renewed.status, 200, "{renewed:?}");
        let released = As(&s, LOCKER)
            .release(collection, &name, json!({"owner": "l"}))
            .await;
        assert_eq!(released.status, 204, "{released:?}");
    }
}

#[tokio::test]
async fn a_lease_belongs_to_its_principal_on_every_kind() {
    let s = server().await;
    let name = format!("payment:{}", unique_prefix());
    for collection in KINDS {
        let (billing, rival) = (As(&s, BILLING), As(&s, RIVAL));
        let lease = billing.grant(collection, &name, "w").await;
        assert_eq!(lease["principal"], "billing", "{lease}");
        let token = lease["fencing_token"].clone();

        // The same owner name from another principal is another owner: no extension, though
        // a semaphore has room and readers share a read-write lock.
        let taken = rival.acquire(collection, &name, "w").await;
        assert_eq!(
            (taken.status, &taken.body["acquired"]),
            (StatusCode::OK, &json!(false)),
            "{taken:?}"
        );
        let one = path(collection, &name);
        let renew = format!("{one}/renew");
        let with_token = json!({"owner": "w", "ttl_seconds": 60, "fencing_token": token});
        for (refused, instance) in [
            (rival.renew(collection, &name, with_token.clone()).await, &renew),
            (
                rival
                    .release(collection, &name, json!({"owner": "w", "fencing_token": token}))
                    .await,
                &one,
            ),
        ] {
            assert_problem(&refused, 403, instance);
            assert!(
                refused.body["type"].as_str().unwrap().ends_with(":forbidden"),
                "{refused:?}"
            );
        }

        // The lease is untouched, and still its principal's to renew and release.
        let live = billing.get(collection, &name).await;
        assert_eq!(live.status, 200);
        assert!(live.raw.windows(7).any(|w| w == b"billing"), "{live:?}");
        let renewed = billing.renew(collection, &name, with_token).await;
        assert_eq!(renewed.status, 200, "{renewed:?}");
        assert_eq!(renewed.body["fencing_token"], token);
        let again = billing.acquire(collection, &name, "w").await;
        assert_eq!(again.body["extended"], true, "{again:?}");
        let released = billing
            .release(collection, &name, json!({"owner": "w", "fencing_token": token}))
            .await;
        assert_eq!(released.status, 204, "{released:?}");

        // Free again: the rival may take the owner name now, with a greater token.
        let next = rival.grant(collection, &name, "w").await;
        assert!(next["fencing_token"].as_u64() > token.as_u64(), "{next}");
        assert_eq!(next["principal"], "rival");
        rival.release(collection, &name, json!({"owner": "w"})).await;
    }
}

/// Every name a caller sees in `collection` under `prefix`, page by page of `limit`; asserts
/// each page holds at most `limit` and the cursors move forward.
async fn list_all(caller: &As<'_>, collection: &str, prefix: &str, limit: usize) -> Vec<String> {
    let (mut names, mut cursor) = (Vec::new(), None::<String>);
    let member = collection;
    let field = if collection == "locks" { "resource" } else { "name" };
    for _ in 0..100 {
        let mut query = format!("/{collection}?prefix={}&limit={limit}", encode_segment(prefix));
        if let Some(cursor) = &cursor {
            query.push_str(&format!("&cursor={cursor}"));
        }
        let page = caller.send(Method::GET, &query, None).await;
        assert_eq!(page.status, 200, "{page:?}");
        let items = page.body[member].as_array().unwrap();
        assert!(items.len() <= limit, "{page:?}");
        names.extend(items.iter().map(|i| i[field].as_str().unwrap().to_owned()));
        match page.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return names,
        }
    }
    panic!("the pages never ended: {names:?}");
}

#[tokio::test]
async fn lists_show_only_readable_names_and_page_through_all_of_them() {
    let s = server().await;
    let ops = As(&s, OPS);
    let p = unique_prefix();
    // The reader may read job:… and payment:1…, so only names under those, with the test's
    // own prefix after them.
    let mut names = [
        format!("job:{p}a"),
        format!("job:{p}b"),
        format!("ops:{p}x"),
        format!("payment:1{p}"),
        format!("payment:10{p}"),
        format!("payment:11{p}"),
        format!("payment:2{p}"),
        format!("payment:3{p}"),
        format!("zzz:{p}"),
    ];
    // Lists are in the order of the names' bytes.
    names.sort();
    let under = |prefixes: &[&str]| -> Vec<String> {
        names
            .iter()
            .filter(|n| prefixes.iter().any(|p| n.starts_with(p)))
            .cloned()
            .collect()
    };
    for collection in KINDS {
        for name in &names {
            ops.grant(collection, name, "o").await;
        }
        let reader = As(&s, READER);
        for limit in [1, 2, 3, 100] {
            let seen = list_all(&reader, collection, "", limit).await;
            assert_eq!(seen, under(&["job:", "payment:1"]), "{collection} limit {limit}");
        }
        let seen = list_all(&reader, collection, "payment:", 1).await;
        assert_eq!(seen, under(&["payment:1"]), "{collection}");
        let seen = list_all(&reader, collection, &format!("payment:1{p}"), 1).await;
        assert_eq!(seen, [format!("payment:1{p}")], "{collection}");
        assert_eq!(
            list_all(&reader, collection, "ops:", 2).await,
            Vec::<String>::new()
        );
        // Billing reads payment:…; the locker reads nothing; the administrator everything.
        assert_eq!(
            list_all(&As(&s, BILLING), collection, "", 2).await,
            under(&["payment:"])
        );
        assert_eq!(
            list_all(&As(&s, LOCKER), collection, "", 5).await,
            Vec::<String>::new()
        );
        assert_eq!(list_all(&ops, collection, "", 4).await, names, "{collection}");
    }
}

/// Every log line of this test binary, at the most detailed level, so that nothing the server
/// logs escapes the search for tokens.
fn logs() -> &'static Lines {
    fencelock_testkit::logs(tracing::Level::TRACE)
}

/// The audit lines about `resource`.
fn audit(lines: &Lines, resource: &str) -> Vec<Value> {
    let mut audit = lines.of("fencelock::audit");
    audit.retain(|line| line["resource"] == resource);
    audit
}

/// Waits up to 20 s, as the principal of `token`, for the lock `name` for `owner`.
fn spawn_wait(
    s: &TestServer,
    token: &'static str,
    name: &str,
    owner: &str,
) -> tokio::task::JoinHandle<Value> {
    let (url, client) = (format!("{}{}", s.base, path("locks", name)), s.client.clone());
    let body = json!({"owner": owner, "ttl_seconds": 60, "wait_ms": 20_000});
    tokio::spawn(async move {
        let answer = client
            .post(url)
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        answer.json::<Value>().await.unwrap()
    })
}

/// A deadlock's detail names only the names the caller may read and the owners that hold
/// them (and the caller's own owner); the rest of the cycle is told without them. The log
/// line keeps the whole cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_tells_the_caller_only_what_it_may_read() {
    let lines = logs();
    let s = server().await;
    let tag = unique_prefix();
    let (mine, theirs) = (format!("job:{tag}mine"), format!("job:{tag}theirs"));
    let secret = format!("payment:{tag}secret");
    As(&s, JOBS).grant("locks", &mine, "runner").await;
    As(&s, OPS).grant("locks", &theirs, "ops-b").await;
    As(&s, OPS).grant("locks", &secret, "ops-hidden").await;
    // ops-hidden waits for the caller's lock, ops-b for the secret one held by ops-hidden;
    // then the caller's wait for ops-b's lock closes the cycle.
    let _hidden_waits = spawn_wait(&s, OPS, &mine, "ops-hidden");
    s.until_waiters(1).await;
    let _b_waits = spawn_wait(&s, OPS, &secret, "ops-b");
    s.until_waiters(2).await;
    let body = json!({"owner": "runner", "ttl_seconds": 60, "wait_ms": 20_000});
    let refused = As(&s, JOBS)
        .send(Method::POST, &path("locks", &theirs), Some(body))
        .await;
    assert_problem(&refused, 409, &path("locks", &theirs));
    assert_eq!(refused.body["type"], "urn:fencelock:problem:deadlock");
    let detail = refused.body["detail"].as_str().unwrap();
    assert_eq!(
        detail,
        format!(
            "runner waits for lock {theirs:?} held by ops-b; \
             ops-b waits for a lock you may not read held by an owner you may not read; \
             an owner you may not read waits for lock {mine:?} held by runner"
        )
    );
    assert!(
        !detail.contains("payment") && !detail.contains("hidden"),
        "{detail}"
    );
    let logged = lines.of("fencelock::deadlock");
    let cycle = logged
        .iter()
        .filter_map(|line| line["cycle"].as_str())
        .find(|cycle| cycle.contains(&theirs))
        .expect("the deadlock is logged");
    assert!(
        cycle.contains(&format!("ops-b waits for lock {secret:?} held by ops-hidden")),
        "{cycle}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_frees_a_lock_wakes_its_waiter_and_the_next_token_is_greater() {
    let lines = logs();
    let s = server().await;
    let name = format!("payment:{}", unique_prefix());
    let held = As(&s, BILLING).grant("locks", &name, "w").await;
    let token = held["fencing_token"].as_u64().unwrap();

    // Without the admin right, nothing happens.
    assert_problem(
        &As(&s, BILLING).force("locks", &name).await,
        403,
        &path("locks", &name),
    );
    assert_eq!(As(&s, OPS).get("locks", &name).await.body["fencing_token"], token);

    let waiter = spawn_wait(&s, RIVAL, &name, "r");
    s.until_waiters(1).await;
    let forced = As(&s, OPS).force("locks", &name).await;
    assert_eq!(forced.status, 204, "{forced:?}");
    let granted = waiter.await.unwrap();
    assert_eq!(granted["acquired"], true, "{granted}");
    assert!(
        granted["lock"]["fencing_token"].as_u64().unwrap() > token,
        "{granted}"
    );
    assert_eq!(granted["lock"]["principal"], "rival");

    assert_eq!(As(&s, OPS).force("locks", &name).await.status, 204);
    assert_problem(
        &As(&s, OPS).force("locks", &name).await,
        404,
        &path("locks", &name),
    );
    let after = As(&s, BILLING).grant("locks", &name, "w").await;
    assert!(after["fencing_token"].as_u64() > granted["lock"]["fencing_token"].as_u64());

    let audit = audit(lines, &name);
    assert_eq!(audit.len(), 2, "{audit:?}");
    let fields = |line: &Value| {
        (
            line["event"].clone(),
            line["by"].clone(),
            line["kind"].clone(),
            line["owner"].clone(),
            line["principal"].clone(),
            line["token"].clone(),
        )
    };
    assert_eq!(
        fields(&audit[0]),
        (
            json!("force_release"),
            json!("ops"),
            json!("lock"),
            json!("w"),
            json!("billing"),
            json!(token)
        )
    );
    assert_eq!(audit[1]["owner"], "r");
    assert_eq!(audit[1]["principal"], "rival");
    let metrics = s.metrics().await;
    assert_eq!(
        series_value(&metrics, r#"fencelock_force_releases_total{kind="lock"}"#),
        2.0
    );
    assert_eq!(
        series_value(
            &metrics,
            r#"fencelock_requests_total{kind="lock",op="force_release",outcome="not_found"}"#
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_frees_every_permit_and_hold_at_once() {
    let lines = logs();
    let s = server().await;
    let name = format!("payment:{}", unique_prefix());
    for collection in ["semaphores", "rwlocks"] {
        let a = As(&s, BILLING).grant(collection, &name, "a").await;
        let b = As(&s, RIVAL).grant(collection, &name, "b").await;
        assert_problem(
            &As(&s, RIVAL).force(collection, &name).await,
            403,
            &path(collection, &name),
        );
        let forced = As(&s, OPS).force(collection, &name).await;
        assert_eq!(forced.status, 204, "{forced:?}");
        assert_problem(
            &As(&s, OPS).get(collection, &name).await,
            404,
            &path(collection, &name),
        );
        assert_problem(
            &As(&s, OPS).force(collection, &name).await,
            404,
            &path(collection, &name),
        );
        let next = As(&s, BILLING).grant(collection, &name, "a").await;
        let highest = a["fencing_token"].as_u64().max(b["fencing_token"].as_u64());
        assert!(next["fencing_token"].as_u64() > highest, "{next}");

        let kind = if collection == "semaphores" {
            "semaphore"
        } else {
            "rwlock"
        };
        let audit: Vec<(Value, Value)> = audit(lines, &name)
            .into_iter()
            .filter(|line| line["kind"] == kind)
            .map(|line| (line["principal"].clone(), line["token"].clone()))
            .collect();
        assert_eq!(
            audit,
            [
                (json!("billing"), a["fencing_token"].clone()),
                (json!("rival"), b["fencing_token"].clone())
            ]
        );
    }
    let metrics = s.metrics().await;
    for kind in ["semaphore", "rwlock"] {
        let series = format!("fencelock_force_releases_total{{kind=\"{kind}\"}}");
        assert_eq!(series_value(&metrics, &series), 1.0, "{metrics}");
    }
}

#[tokio::test]
async fn force_must_be_a_json_boolean_and_false_is_the_owners_release() {
    let s = server().await;
    let name = format!("payment:{}", unique_prefix());
    for collection in KINDS {
        As(&s, BILLING).grant(collection, &name, "w").await;
        for bad in [json!("true"), json!(1), json!(null)] {
            let answer = As(&s, OPS)
                .release(collection, &name, json!({"force": bad}))
                .await;
            assert_invalid(&answer, &["force"]);
        }
        assert_invalid(
            &As(&s, OPS)
                .release(collection, &name, json!({"force": false}))
                .await,
            &["owner"],
        );
        // force: false is the owner's release: the administrator is not the owner.
        let not_theirs = As(&s, OPS)
            .release(collection, &name, json!({"force": false, "owner": "w"}))
            .await;
        assert_eq!(not_theirs.status.as_u16() / 100, 4, "{not_theirs:?}");
        assert_ne!(not_theirs.status, 204);
        let released = As(&s, BILLING)
            .release(collection, &name, json!({"force": false, "owner": "w"}))
            .await;
        assert_eq!(released.status, 204, "{released:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_is_ever_logged() {
    let lines = logs();
    let s = server().await;
    let name = format!("payment:{}", unique_prefix());
    for token in TOKENS {
        let caller = As(&s, token);
        for collection in KINDS {
            caller.acquire(collection, &name, "w").await;
            caller.get(collection, &name).await;
            caller.force(collection, &name).await;
        }
    }
    s.send_as(Some("a-wrong-token-9e1"), Method::GET, "/locks", None)
        .await;
    let text = lines.text();
    assert!(text.contains(&name), "the requests were logged");
    for token in TOKENS.iter().chain(&["a-wrong-token-9e1"]) {
        assert!(!text.contains(token), "{token} was logged");
        assert!(
            !text.contains(&token_sha256(token)),
            "the hash of {token} was logged"
        );
    }
}

/// A rate of one request a second after a burst of `burst`: slow enough that a test's
/// requests, sent one after another, all fall within the first second.
fn one_a_second(burst: u32) -> Option<RateLimit> {
    Some(RateLimit {
        per_second: NonZeroU32::new(1).unwrap(),
        burst: NonZeroU32::new(burst).unwrap(),
    })
}

#[tokio::test]
async fn refusals_before_the_store_are_counted_by_reason() {
    let s = server_with(|config| {
        config.rate_limit = one_a_second(3);
    })
    .await;
    s.send(Method::GET, "/locks", None).await;
    s.send_as(Some("nope"), Method::GET, "/locks", None).await;
    As(&s, BILLING).get("locks", "ops:1").await;
    As(&s, BILLING).get("locks", "ops:2").await;
    As(&s, BILLING).get("locks", "ops:3").await;
    assert_eq!(As(&s, BILLING).get("locks", "ops:4").await.status, 429);
    let metrics = s.metrics().await;
    for (reason, count) in [("unauthenticated", 2.0), ("denied", 3.0), ("rate_limited", 1.0)] {
        let series = format!("fencelock_auth_refusals_total{{reason=\"{reason}\"}}");
        assert_eq!(series_value(&metrics, &series), count, "{metrics}");
    }
}

#[tokio::test]
async fn the_request_rate_is_per_principal_and_a_refusal_says_when_to_retry() {
    let s = server_with(|config| {
        config.rate_limit = one_a_second(5);
    })
    .await;
    let name = format!("payment:{}", unique_prefix());
    for _ in 0..5 {
        assert_eq!(As(&s, BILLING).get("locks", &name).await.status, 404);
    }
    let limited = As(&s, BILLING).acquire("locks", &name, "w").await;
    assert_problem(&limited, 429, &path("locks", &name));
    assert_eq!(limited.headers["retry-after"], "1");
    // Nothing was done, and another principal has its own rate.
    assert_eq!(As(&s, RIVAL).get("locks", &name).await.status, 404);
    // Health and metrics are not counted against anyone.
    for _ in 0..10 {
        assert_eq!(s.send(Method::GET, "/healthz", None).await.status, 200);
    }
}

#[tokio::test]
async fn without_authentication_every_caller_shares_one_rate() {
    let config = Config {
        rate_limit: one_a_second(4),
        ..Config::default()
    };
    let s = TestServer::start(Arc::new(MemoryStore::new()), config).await;
    let other = reqwest::Client::new();
    for _ in 0..2 {
        assert_eq!(s.get("r").await.status, 404);
        let answer = other.get(format!("{}/locks/r", s.base)).send().await.unwrap();
        assert_eq!(answer.status(), 404);
    }
    let limited = s.get("r").await;
    assert_problem(&limited, 429, "/locks/r");
    assert_eq!(limited.headers["retry-after"], "1");
}

#[tokio::test]
async fn an_oversized_header_is_431_and_the_server_keeps_serving() {
    for (config, fits, too_big) in [
        (Config::default(), 12_000, 20_000),
        (
            Config {
                max_header_bytes: 8192,
                ..Config::default()
            },
            6_000,
            9_000,
        ),
    ] {
        let s = TestServer::start(Arc::new(MemoryStore::new()), config).await;
        let request = |size: usize| {
            format!(
                "GET /locks/r HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\n\r\n",
                "a".repeat(size)
            )
        };
        let mut refused = raw_connection(s.addr, request(too_big).as_bytes()).await;
        let (status, _, _) = read_response(&mut refused).await;
        assert_eq!(status, 431);
        let mut fine = raw_connection(s.addr, request(fits).as_bytes()).await;
        let (status, _, _) = read_response(&mut fine).await;
        assert_eq!(status, 404);
        assert_eq!(s.send(Method::GET, "/healthz", None).await.status, 200);
    }
}

#[tokio::test]
async fn the_description_has_the_bearer_scheme_the_auth_problems_and_the_force_body() {
    let s = server().await;
    let doc = s.send(Method::GET, "/openapi.json", None).await.body;
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"],
        json!({"type": "http", "scheme": "bearer", "description": doc["components"]["securitySchemes"]["bearer"]["description"]})
    );
    let paths = &doc["paths"];
    for collection in KINDS {
        let one = &paths[format!(
            "/{collection}/{{{}}}",
            if collection == "locks" { "resource" } else { "name" }
        )];
        for method in ["get", "post", "delete"] {
            let operation = &one[method];
            assert_eq!(
                operation["security"],
                json!([{"bearer": []}]),
                "{collection} {method}"
            );
            for status in ["401", "403", "429"] {
                assert!(
                    operation["responses"][status].is_object(),
                    "{collection} {method} {status}"
                );
            }
        }
        let list = &paths[format!("/{collection}")]["get"];
        assert_eq!(list["security"], json!([{"bearer": []}]));
        assert!(list["responses"]["401"].is_object() && list["responses"]["403"].is_null());
        let body = &one["delete"]["requestBody"]["content"]["application/json"]["schema"];
        assert_eq!(body["$ref"], "#/components/schemas/DeleteRequest", "{body}");
    }
    for open in ["/healthz", "/readyz", "/metrics"] {
        assert!(paths[open]["get"]["security"].is_null(), "{open}");
    }
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["DeleteRequest"]["oneOf"].as_array().map(Vec::len),
        Some(2),
        "{}",
        schemas["DeleteRequest"]
    );
    assert_eq!(
        schemas["ForceReleaseRequest"]["properties"]["force"]["type"],
        "boolean"
    );
}

#[tokio::test]
async fn several_locks_need_the_lock_right_on_every_name_and_belong_to_the_callers_principal() {
    let s = server().await;
    let (pay, job) = ("payment:1".to_owned(), "job:1".to_owned());
    let body = |names: &[&String]| json!({"owner": "w", "resources": names, "ttl_seconds": 60});
    // billing may lock payment: but not job:.
    let denied = As(&s, BILLING)
        .send(Method::POST, "/locks", Some(body(&[&pay, &job])))
        .await;
    assert_problem(&denied, 403, "/locks");
    assert_eq!(denied.body["type"], "urn:fencelock:problem:denied");
    assert_eq!(
        As(&s, OPS).get("locks", &pay).await.status,
        404,
        "nothing acquired"
    );

    let other = "payment:2".to_owned();
    let granted = As(&s, BILLING)
        .send(Method::POST, "/locks", Some(body(&[&pay, &other])))
        .await;
    assert_eq!(granted.body["acquired"], true, "{granted:?}");
    for lock in granted.body["locks"].as_array().unwrap() {
        assert_eq!(lock["principal"], "billing", "{lock}");
    }
    // The same owner name of another principal is another owner.
    let rival = As(&s, RIVAL)
        .send(Method::POST, "/locks", Some(body(&[&pay, &other])))
        .await;
    assert_eq!(
        (&rival.body["acquired"], &rival.body["held"]),
        (&json!(false), &json!([pay, other])),
        "{rival:?}"
    );
}

#[tokio::test]
async fn whoami_tells_each_principal_its_own_grants() {
    let s = server().await;
    let me = As(&s, READER).send(Method::GET, "/whoami", None).await;
    assert_eq!(me.status, StatusCode::OK, "{me:?}");
    assert_eq!(
        me.body,
        json!({"principal": "reader", "grants": [
            {"prefix": "payment:1", "rights": ["read"]},
            {"prefix": "job:", "rights": ["read"]},
        ]})
    );
    let admin = As(&s, OPS).send(Method::GET, "/whoami", None).await;
    assert_eq!(
        admin.body,
        json!({"principal": "ops", "grants": [{"prefix": "", "rights": ["read", "lock", "admin"]}]})
    );
    // Without a known token: 401, as on every API route (above).
}
