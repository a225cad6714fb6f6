//! `/elections/{name}` through a real HTTP client: campaign, get, proclaim, renew, resign and
//! their refusals; bad input; rights; an election beside a lock of the same name; and
//! `observe`: the current state first, then every new leader, value and vacancy, resumable.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Answer, TestServer, assert_invalid, assert_problem, principal};
use fencelock_core::MemoryStore;
use fencelock_server::Config;
use fencelock_server::auth::{AuthFile, Keyring};
use fencelock_testkit::sse::{EventStream, Message};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

async fn campaign(s: &TestServer, name: &str, body: Value) -> Answer {
    s.send(Method::POST, &format!("/elections/{name}"), Some(body))
        .await
}

async fn leader(s: &TestServer, name: &str) -> Answer {
    s.send(Method::GET, &format!("/elections/{name}"), None).await
}

async fn call(s: &TestServer, method: Method, path: &str, body: Value) -> Answer {
    s.send(method, path, Some(body)).await
}

/// The observe stream of `name` (resuming after `last`), and its first event.
async fn observe(s: &TestServer, name: &str, last: Option<&str>) -> (EventStream, Message) {
    let mut request = reqwest::Client::new().get(format!("{}/elections/{name}/observe", s.base));
    if let Some(id) = last {
        request = request.header("last-event-id", id);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = EventStream::new(response);
    let first = stream.next_event(WAIT).await.expect("a first event");
    (stream, first)
}

async fn next(stream: &mut EventStream) -> Message {
    stream.next_event(WAIT).await.expect("an event")
}

/// An event as a test compares it: its name, and its leader, term and value.
fn brief(message: &Message) -> (String, String, Value, Value) {
    let data = message.json();
    let leadership = &data["leadership"];
    (
        message.event.clone(),
        data["owner"].as_str().unwrap_or_default().to_owned(),
        leadership["term"].clone(),
        leadership["value"].clone(),
    )
}

fn ev(event: &str, owner: &str, term: &Value, value: Value) -> (String, String, Value, Value) {
    (event.into(), owner.into(), term.clone(), value)
}

#[tokio::test]
async fn a_campaign_elects_one_leader_whose_term_fences_and_who_alone_may_change_it() {
    let s = TestServer::manual().await;
    assert_problem(&leader(&s, "db").await, 404, "/elections/db");

    let won = campaign(
        &s,
        "db",
        json!({"candidate": "a", "value": "10.0.0.1", "ttl_seconds": 30}),
    )
    .await;
    assert_eq!(won.status, StatusCode::OK, "{won:?}");
    assert_eq!(won.body["elected"], true);
    let leadership = won.body["leadership"].clone();
    let term = leadership["term"].clone();
    assert_eq!(
        (&leadership["name"], &leadership["leader"], &leadership["value"]),
        (&json!("db"), &json!("a"), &json!("10.0.0.1"))
    );
    assert!(leadership.get("principal").is_none(), "{leadership}");
    assert_eq!(leader(&s, "db").await.body, leadership);

    // Another candidate is told who leads.
    let lost = campaign(&s, "db", json!({"candidate": "b", "ttl_seconds": 30})).await;
    assert_eq!(lost.body, json!({"elected": false, "leadership": leadership}));

    // The leader campaigning again: same term, same `since`, later `expires_at`; the value
    // is kept without one, replaced with one.
    s.advance(Duration::from_secs(5));
    let again = campaign(&s, "db", json!({"candidate": "a", "ttl_seconds": 30})).await;
    assert_eq!(again.body["elected"], true, "{again:?}");
    let renewed = &again.body["leadership"];
    assert_eq!(
        (&renewed["term"], &renewed["since"], &renewed["value"]),
        (&term, &leadership["since"], &json!("10.0.0.1"))
    );
    assert_ne!(renewed["expires_at"], leadership["expires_at"]);
    let again = campaign(
        &s,
        "db",
        json!({"candidate": "a", "value": "10.0.0.2", "ttl_ms": 30_000}),
    )
    .await;
    assert_eq!(again.body["leadership"]["value"], "10.0.0.2");
    assert_eq!(again.body["leadership"]["since"], leadership["since"]);
    let expires_at = again.body["leadership"]["expires_at"].clone();

    // proclaim: only the leader, in its term; it changes the value and nothing else.
    let wrong_term = term.as_u64().unwrap() + 1;
    let proclaim = "/elections/db/proclaim";
    let by_b = call(
        &s,
        Method::POST,
        proclaim,
        json!({"candidate": "b", "term": term, "value": "x"}),
    )
    .await;
    assert_problem(&by_b, 403, proclaim);
    let stale = call(
        &s,
        Method::POST,
        proclaim,
        json!({"candidate": "a", "term": wrong_term, "value": "x"}),
    )
    .await;
    assert_problem(&stale, 409, proclaim);
    let said = call(
        &s,
        Method::POST,
        proclaim,
        json!({"candidate": "a", "term": term, "value": "10.0.0.3"}),
    )
    .await;
    assert_eq!(said.status, StatusCode::OK, "{said:?}");
    assert_eq!(
        (
            &said.body["value"],
            &said.body["term"],
            &said.body["since"],
            &said.body["expires_at"]
        ),
        (&json!("10.0.0.3"), &term, &leadership["since"], &expires_at)
    );

    // renew: the same rules.
    let renew = "/elections/db/renew";
    assert_problem(
        &call(
            &s,
            Method::POST,
            renew,
            json!({"candidate": "b", "term": term, "ttl_seconds": 60}),
        )
        .await,
        403,
        renew,
    );
    assert_problem(
        &call(
            &s,
            Method::POST,
            renew,
            json!({"candidate": "a", "term": wrong_term, "ttl_seconds": 60}),
        )
        .await,
        409,
        renew,
    );
    let renewed = call(
        &s,
        Method::POST,
        renew,
        json!({"candidate": "a", "term": term, "ttl_seconds": 60}),
    )
    .await;
    assert_eq!(renewed.status, StatusCode::OK, "{renewed:?}");
    assert_eq!(
        (&renewed.body["term"], &renewed.body["value"]),
        (&term, &json!("10.0.0.3"))
    );

    // resign: the same rules; then nobody leads, and every call on the leadership is a 404.
    let path = "/elections/db";
    assert_problem(
        &call(&s, Method::DELETE, path, json!({"candidate": "b", "term": term})).await,
        403,
        path,
    );
    assert_problem(
        &call(
            &s,
            Method::DELETE,
            path,
            json!({"candidate": "a", "term": wrong_term}),
        )
        .await,
        409,
        path,
    );
    let resigned = call(&s, Method::DELETE, path, json!({"candidate": "a", "term": term})).await;
    assert_eq!(resigned.status, StatusCode::NO_CONTENT, "{resigned:?}");
    assert_problem(&leader(&s, "db").await, 404, path);
    assert_problem(
        &call(&s, Method::DELETE, path, json!({"candidate": "a", "term": term})).await,
        404,
        path,
    );
    assert_problem(
        &call(
            &s,
            Method::POST,
            proclaim,
            json!({"candidate": "a", "term": term, "value": "x"}),
        )
        .await,
        404,
        proclaim,
    );
    assert_problem(
        &call(
            &s,
            Method::POST,
            renew,
            json!({"candidate": "a", "term": term, "ttl_ms": 5}),
        )
        .await,
        404,
        renew,
    );

    // The next leader has a greater term.
    let next = campaign(&s, "db", json!({"candidate": "b", "ttl_seconds": 30})).await;
    assert_eq!(next.body["elected"], true);
    assert!(
        next.body["leadership"]["term"].as_u64() > term.as_u64(),
        "{next:?}"
    );
    assert_eq!(next.body["leadership"]["value"], Value::Null);

    // An expired leadership is vacant.
    s.advance(Duration::from_secs(31));
    assert_problem(&leader(&s, "db").await, 404, path);
}

#[tokio::test]
async fn bad_input_is_a_422_naming_the_field_and_changes_nothing() {
    let s = TestServer::manual().await;
    let long_value = "v".repeat(1025);
    for (path, method, body, fields) in [
        (
            "/elections/db",
            Method::POST,
            json!({}),
            &["candidate", "ttl_seconds"][..],
        ),
        (
            "/elections/db",
            Method::POST,
            json!({"candidate": "a", "ttl_ms": 5, "value": long_value}),
            &["value"],
        ),
        (
            "/elections/db",
            Method::POST,
            json!({"candidate": "a", "ttl_ms": 5, "value": null}),
            &["value"],
        ),
        (
            "/elections/db",
            Method::POST,
            json!({"candidate": "a", "ttl_ms": 5, "value": 7}),
            &["value"],
        ),
        (
            "/elections/db",
            Method::POST,
            json!({"candidate": " ", "ttl_ms": 0}),
            &["candidate", "ttl_ms"],
        ),
        (
            "/elections/db",
            Method::POST,
            json!({"candidate": "a", "ttl_ms": 5, "wait_ms": -1}),
            &["wait_ms"],
        ),
        (
            "/elections/a%01b",
            Method::POST,
            json!({"candidate": "a", "ttl_ms": 5}),
            &["name"],
        ),
        (
            "/elections/%01db",
            Method::POST,
            json!({"candidate": "a", "ttl_ms": 5}),
            &["name"],
        ),
        (
            "/elections/db/proclaim",
            Method::POST,
            json!({"candidate": "a", "term": 1}),
            &["value"],
        ),
        (
            "/elections/db/proclaim",
            Method::POST,
            json!({"candidate": "a", "term": "1", "value": "x"}),
            &["term"],
        ),
        (
            "/elections/db/renew",
            Method::POST,
            json!({"candidate": "a", "ttl_ms": 5}),
            &["term"],
        ),
        (
            "/elections/db",
            Method::DELETE,
            json!({"term": 1}),
            &["candidate"],
        ),
        (
            "/elections/%01db",
            Method::DELETE,
            json!({"candidate": "a", "term": 1}),
            &["name"],
        ),
    ] {
        let answer = call(&s, method, path, body).await;
        assert_invalid(&answer, fields);
    }
    // An election's name leaves room for the mark of its lock: 254 bytes.
    let longest = "e".repeat(254);
    let ok = campaign(&s, &longest, json!({"candidate": "a", "ttl_ms": 5_000})).await;
    assert_eq!(ok.body["elected"], true, "{ok:?}");
    let too_long = campaign(&s, &"e".repeat(255), json!({"candidate": "a", "ttl_ms": 5_000})).await;
    assert_invalid(&too_long, &["name"]);
    // A value of 1,024 bytes is taken.
    let full = campaign(
        &s,
        "db",
        json!({"candidate": "a", "ttl_ms": 5_000, "value": "v".repeat(1024)}),
    )
    .await;
    assert_eq!(
        full.body["leadership"]["value"].as_str().map(str::len),
        Some(1024),
        "{full:?}"
    );
    let _ = s
        .send(
            Method::DELETE,
            "/elections/db",
            Some(json!({"candidate": "a", "term": full.body["leadership"]["term"]})),
        )
        .await;
    // Nothing bad changed anything.
    assert_problem(&leader(&s, "db").await, 404, "/elections/db");
}

#[tokio::test]
async fn an_election_and_a_lock_of_one_name_are_unrelated_and_no_client_names_an_elections_lock() {
    let s = TestServer::manual().await;
    let lock = s.grant("db", "w", 30).await;
    let won = campaign(&s, "db", json!({"candidate": "a", "ttl_seconds": 30})).await;
    assert_eq!(won.body["elected"], true, "{won:?}");
    assert_eq!(s.get("db").await.body, lock);
    let listed = s.send(Method::GET, "/locks", None).await;
    assert_eq!(listed.body, json!({"locks": [lock], "next_cursor": null}));
    let listed = s.send(Method::GET, "/locks?limit=1", None).await;
    assert_eq!(listed.body["locks"], json!([lock]));
    // The reserved form, wherever a client names something.
    for (method, path, body, field) in [
        (Method::GET, "/locks/%01db", None, "resource"),
        (
            Method::POST,
            "/locks/%01db",
            Some(json!({"owner": "w", "ttl_ms": 5})),
            "resource",
        ),
        (Method::GET, "/semaphores/%01db", None, "name"),
        (Method::GET, "/rwlocks/%01db", None, "name"),
        (Method::GET, "/locks?prefix=%01", None, "prefix"),
        (Method::GET, "/locks?cursor=01", None, "cursor"),
        (Method::GET, "/events?prefix=%01db", None, "prefix"),
        (
            Method::POST,
            "/locks",
            Some(json!({"owner": "w", "ttl_ms": 5, "resources": ["\u{1}db"]})),
            "resources",
        ),
    ] {
        let answer = s.send(method, path, body).await;
        assert_invalid(&answer, &[field]);
    }
    assert_eq!(leader(&s, "db").await.body, won.body["leadership"]);
}

const READER: &str = "reader-token-1";
const WRITER: &str = "writer-token-2";

#[tokio::test]
async fn campaigning_needs_the_lock_right_and_following_the_read_right_on_the_name() {
    let file = [
        principal("reader", READER, r#"{ prefix = "pub:", rights = ["read"] }"#),
        principal(
            "writer",
            WRITER,
            r#"{ prefix = "pub:", rights = ["read", "lock"] }"#,
        ),
    ]
    .concat();
    let config = Config {
        auth: Some(Keyring::new(AuthFile::parse(&file).unwrap())),
        ..Config::default()
    };
    let s = TestServer::start(Arc::new(MemoryStore::new()), config).await;
    let body = json!({"candidate": "a", "ttl_seconds": 30});
    let won = s
        .send_as(
            Some(WRITER),
            Method::POST,
            "/elections/pub:db",
            Some(body.clone()),
        )
        .await;
    assert_eq!(won.body["elected"], true, "{won:?}");
    assert_eq!(won.body["leadership"]["principal"], "writer");
    assert_problem(
        &s.send_as(
            Some(READER),
            Method::POST,
            "/elections/pub:db",
            Some(body.clone()),
        )
        .await,
        403,
        "/elections/pub:db",
    );
    assert_problem(
        &s.send_as(Some(WRITER), Method::POST, "/elections/db", Some(body))
            .await,
        403,
        "/elections/db",
    );
    let term = won.body["leadership"]["term"].clone();
    let resign = json!({"candidate": "a", "term": term});
    assert_problem(
        &s.send_as(Some(READER), Method::DELETE, "/elections/pub:db", Some(resign))
            .await,
        403,
        "/elections/pub:db",
    );
    assert_eq!(
        s.send_as(Some(READER), Method::GET, "/elections/pub:db", None)
            .await
            .body,
        won.body["leadership"]
    );
    assert_problem(
        &s.send_as(Some(READER), Method::GET, "/elections/db", None).await,
        403,
        "/elections/db",
    );
    let observe = reqwest::Client::new()
        .get(format!("{}/elections/db/observe", s.base))
        .bearer_auth(READER)
        .send()
        .await
        .unwrap();
    assert_eq!(observe.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn an_observer_sees_the_current_state_then_every_leader_value_and_vacancy_in_order() {
    let s = TestServer::manual().await;
    let (mut stream, first) = observe(&s, "db", None).await;
    assert_eq!(first.event, "vacant", "{first:?}");
    assert_eq!(
        (first.json()["kind"].as_str(), first.json()["name"].as_str()),
        (Some("election"), Some("db"))
    );

    let a = campaign(
        &s,
        "db",
        json!({"candidate": "a", "value": "v1", "ttl_seconds": 30}),
    )
    .await;
    let t1 = a.body["leadership"]["term"].clone();
    // Campaigning again without a new value, and renewing, tell nothing.
    campaign(&s, "db", json!({"candidate": "a", "ttl_seconds": 30})).await;
    call(
        &s,
        Method::POST,
        "/elections/db/renew",
        json!({"candidate": "a", "term": t1, "ttl_seconds": 30}),
    )
    .await;
    call(
        &s,
        Method::POST,
        "/elections/db/proclaim",
        json!({"candidate": "a", "term": t1, "value": "v2"}),
    )
    .await;
    // A lock of the same name is not the election's.
    s.grant("db", "w", 30).await;
    // b waits; a resigns; b wins with a greater term.
    let waiting = {
        let (base, client) = (s.base.clone(), s.client.clone());
        tokio::spawn(async move {
            let body = json!({"candidate": "b", "value": "v3", "ttl_seconds": 30, "wait_ms": 10_000});
            let answer = client
                .post(format!("{base}/elections/db"))
                .json(&body)
                .send()
                .await
                .unwrap();
            answer.json::<Value>().await.unwrap()
        })
    };
    s.until_waiters(1).await;
    let resigned = call(
        &s,
        Method::DELETE,
        "/elections/db",
        json!({"candidate": "a", "term": t1}),
    )
    .await;
    assert_eq!(resigned.status, StatusCode::NO_CONTENT);
    let b = waiting.await.unwrap();
    assert_eq!(b["elected"], true, "{b}");
    let t2 = b["leadership"]["term"].clone();
    assert!(t2.as_u64() > t1.as_u64());
    s.advance(Duration::from_secs(31));
    let _ = leader(&s, "db").await;

    let mut events = Vec::new();
    for _ in 0..5 {
        events.push(next(&mut stream).await);
    }
    let briefs: Vec<_> = events.iter().map(brief).collect();
    assert_eq!(
        briefs,
        [
            ev("leader", "a", &t1, json!("v1")),
            ev("leader", "a", &t1, json!("v2")),
            ev("vacant", "a", &t1, json!("v2")),
            ev("leader", "b", &t2, json!("v3")),
            ev("vacant", "b", &t2, json!("v3")),
        ]
    );
    for event in &events {
        assert_eq!(event.json()["kind"], "election", "{event:?}");
        assert_eq!(event.json()["name"], "db", "{event:?}");
    }
    assert_eq!(events[0].json()["leadership"], a.body["leadership"]);

    // Resumed after the second event: the rest, none twice; after the last: nothing yet,
    // then the next change.
    let second = events[1].id.as_deref().unwrap();
    let (mut resumed, first) = observe(&s, "db", Some(second)).await;
    let mut rest = vec![first];
    for _ in 0..2 {
        rest.push(next(&mut resumed).await);
    }
    assert_eq!(rest.iter().map(brief).collect::<Vec<_>>(), briefs[2..]);
    let ids = |messages: &[Message]| messages.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&rest), ids(&events[2..]));

    // A stream of a leader starts with the leadership; an id out of the window, with a reset.
    let c = campaign(&s, "db", json!({"candidate": "c", "ttl_seconds": 30})).await;
    let (_, current) = observe(&s, "db", None).await;
    assert_eq!(
        (current.event.as_str(), &current.json()["leadership"]),
        ("leader", &c.body["leadership"])
    );
    let (mut reset, first) = observe(&s, "db", Some("1-0")).await;
    assert_eq!(first.event, "reset");
    let current = next(&mut reset).await;
    assert_eq!(
        (current.event.as_str(), &current.json()["leadership"]),
        ("leader", &c.body["leadership"])
    );

    // `/events` tells elections as elections: not among the locks; with kinds=election, the
    // leadership.
    let (mut locks, _) = s.events("?kinds=lock", None, None).await;
    let (mut elections, _) = s.events("?kinds=election", None, None).await;
    let term = c.body["leadership"]["term"].clone();
    call(
        &s,
        Method::DELETE,
        "/elections/db",
        json!({"candidate": "c", "term": term}),
    )
    .await;
    s.grant("other", "w", 30).await;
    let lock = locks.next_event(WAIT).await.unwrap();
    assert_eq!(
        (lock.event.as_str(), lock.json()["name"].as_str()),
        ("grant", Some("other"))
    );
    let vacant = elections.next_event(WAIT).await.unwrap();
    assert_eq!(brief(&vacant), ev("vacant", "c", &term, Value::Null));
}
