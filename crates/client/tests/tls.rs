//! The client of a server with TLS and authentication: `https://` with a CA to trust, the
//! bearer token on every request, the errors of a server that refuses the client (401, 403,
//! 429) and of a certificate it cannot trust, and force-release.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{TestServer, owner, resource, ttl};
use fencelock_client::{
    AcquireError, AuthToken, CaCertificates, Client, ForceOutcome, HoldKind, HttpOptions, Key, ListQuery,
    ReleaseOutcome, StoreError, connect_with,
};
use fencelock_server::Config;
use fencelock_server::tls::{Tls, TlsFiles};
use fencelock_testkit::{Canned, Proxy, TestCa};

fn trusting(ca: &TestCa) -> HttpOptions {
    HttpOptions {
        ca_certificates: Some(CaCertificates::from_pem(ca.pem().as_bytes()).unwrap()),
        ..HttpOptions::default()
    }
}

fn with_token(token: &str) -> HttpOptions {
    HttpOptions {
        auth_token: Some(AuthToken::new(token).unwrap()),
        ..HttpOptions::default()
    }
}

/// A server in this process serving HTTPS with a certificate `ca` signed, written in `dir`.
fn tls_server(ca: &TestCa, dir: &Path) -> TestServer {
    let files = TlsFiles {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    ca.server_cert().write(&files.cert, &files.key);
    TestServer::with_config(Config {
        tls: Some(Tls::load(files).unwrap()),
        ..Config::default()
    })
}

#[tokio::test]
async fn https_with_the_ca_of_the_servers_certificate_holds_leases() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("fencelock test CA");
    let server = tls_server(&ca, dir.path());
    assert!(server.url.starts_with("https://127.0.0.1:"), "{}", server.url);
    let client = connect_with(&server.url, trusting(&ca)).await.unwrap();
    let r = resource("over-tls");
    let guard = client.try_acquire(&r, &owner("a"), ttl(30_000)).await.unwrap();
    assert_eq!(
        client.get(&r).await.unwrap().map(|l| l.token),
        Some(guard.token())
    );
    let permit = client
        .acquire_permit(&r, &owner("a"), 2, ttl(30_000), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(client.holds(HoldKind::Semaphore, &r).await.unwrap().len(), 1);
    permit.release().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(client.get(&r).await.unwrap(), None);
}

#[tokio::test]
async fn a_certificate_no_trusted_ca_signed_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = tls_server(&TestCa::new("the server's CA"), dir.path());
    let another = trusting(&TestCa::new("another CA"));
    for options in [HttpOptions::default(), another] {
        let client = connect_with(&server.url, options).await.unwrap();
        let error = client.get(&resource("r")).await.unwrap_err();
        let StoreError::Unavailable { message, .. } = &error else {
            panic!("expected unavailable, got {error:?}");
        };
        assert!(message.contains("TLS handshake"), "{message}");
        assert!(message.contains("certificate"), "{message}");
        let acquire = client.try_acquire(&resource("r"), &owner("a"), ttl(1000)).await;
        assert!(
            matches!(acquire, Err(AcquireError::Store(StoreError::Unavailable { .. }))),
            "{acquire:?}"
        );
    }
    // Plain HTTP to a TLS port is refused too, not answered.
    let plain = server.url.replace("https://", "http://");
    let client = connect_with(&plain, HttpOptions::default()).await.unwrap();
    assert!(client.get(&resource("r")).await.is_err());
}

#[tokio::test]
async fn the_auth_token_goes_with_every_request_and_only_when_given() {
    let server = TestServer::start();
    let port = server.url.rsplit(':').next().unwrap().parse().unwrap();
    let proxy = Proxy::start(port);
    let url = format!("http://127.0.0.1:{}", proxy.port());

    let client = connect_with(&url, with_token("s3cr3t-token")).await.unwrap();
    let r = resource("tokened");
    let guard = client.try_acquire(&r, &owner("a"), ttl(30_000)).await.unwrap();
    client.get(&r).await.unwrap();
    let everything = ListQuery {
        prefix: String::new(),
        after: None,
        limit: 10,
    };
    client.list(&everything).await.unwrap();
    guard.release().await.unwrap();
    let sent = proxy.sent().to_ascii_lowercase();
    let requests = sent.matches(" http/1.1\r\n").count();
    assert!(requests >= 4, "{sent}");
    assert_eq!(
        sent.matches("\r\nauthorization: bearer s3cr3t-token\r\n").count(),
        requests,
        "{sent}"
    );

    let before = proxy.sent().len();
    let anonymous = connect_with(&url, HttpOptions::default()).await.unwrap();
    anonymous.get(&r).await.unwrap();
    let sent = proxy.sent()[before..].to_ascii_lowercase();
    assert!(
        sent.contains(" http/1.1\r\n") && !sent.contains("authorization"),
        "{sent}"
    );
}

/// A client of `canned`, with no token.
async fn client_of(canned: &Canned) -> Client {
    connect_with(&canned.url(), HttpOptions::default()).await.unwrap()
}

#[tokio::test]
async fn a_server_refusing_the_client_answers_errors_that_say_why() {
    let r = resource("r");
    let unauthorized = Canned::problem(
        "401 Unauthorized",
        &[("WWW-Authenticate", "Bearer")],
        "unauthorized",
        "no valid bearer token",
    );
    let client = client_of(&unauthorized).await;
    let error = client.get(&r).await.unwrap_err();
    assert!(matches!(error, StoreError::Unauthenticated(_)), "{error:?}");
    assert!(error.to_string().contains("missing or unknown"), "{error}");
    let acquired = client.try_acquire(&r, &owner("a"), ttl(1000)).await;
    assert!(
        matches!(acquired, Err(AcquireError::Store(StoreError::Unauthenticated(_)))),
        "{acquired:?}"
    );

    let right = "principal billing has no lock right on r";
    let no_right = Canned::problem("403 Forbidden", &[], "no-right", right);
    let client = client_of(&no_right).await;
    for error in [
        client
            .try_acquire(&r, &owner("a"), ttl(1000))
            .await
            .unwrap_err()
            .to_string(),
        // A release refused for a right the caller lacks is no "held by another owner".
        client
            .release(&r, &owner("a"), None)
            .await
            .unwrap_err()
            .to_string(),
        client
            .renew(&r, &owner("a"), ttl(1000), None)
            .await
            .unwrap_err()
            .to_string(),
    ] {
        assert_eq!(error, format!("not allowed: {right}"));
    }
    // The 403 of another owner's lease is still an outcome.
    let lease_of_another = Canned::problem("403 Forbidden", &[], "forbidden", "held by b");
    let client = client_of(&lease_of_another).await;
    assert_eq!(
        client.release(&r, &owner("a"), None).await.unwrap(),
        ReleaseOutcome::Forbidden
    );

    let limited = Canned::problem(
        "429 Too Many Requests",
        &[("Retry-After", "7")],
        "too-many-requests",
        "slow down",
    );
    let client = client_of(&limited).await;
    match client.get(&r).await.unwrap_err() {
        StoreError::RateLimited { retry_after, detail } => {
            assert_eq!(
                (retry_after, detail.as_str()),
                (Duration::from_secs(7), "slow down")
            );
        }
        other => panic!("expected rate limited, got {other:?}"),
    }
}

#[tokio::test]
async fn force_release_sends_force_and_reads_204_and_404() {
    let released = Canned::start("204 No Content", &[], "");
    let client = connect_with(&released.url(), with_token("admin-token"))
        .await
        .unwrap();
    let jobs = resource("jobs");
    let outcome = client
        .force_release(&Key::hold(HoldKind::Semaphore, &jobs))
        .await
        .unwrap();
    assert_eq!(outcome, ForceOutcome::Released(Vec::new()));
    let request = released.requests().pop().unwrap();
    assert!(
        request.starts_with("DELETE /semaphores/jobs HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(
        request
            .to_ascii_lowercase()
            .contains("\r\nauthorization: bearer admin-token\r\n"),
        "{request}"
    );
    assert!(request.ends_with("\r\n\r\n{\"force\":true}"), "{request}");

    let nothing = Canned::problem("404 Not Found", &[], "not-found", "nothing held");
    let client = client_of(&nothing).await;
    let outcome = client.force_release(&Key::lock(&jobs)).await.unwrap();
    assert_eq!(outcome, ForceOutcome::NotFound);
    assert!(nothing.requests()[0].starts_with("DELETE /locks/jobs HTTP/1.1\r\n"));

    let not_admin = Canned::problem("403 Forbidden", &[], "no-right", "no admin right on jobs");
    let client = client_of(&not_admin).await;
    let error = client.force_release(&Key::lock(&jobs)).await.unwrap_err();
    assert!(
        matches!(error, StoreError::NotAllowed(ref d) if d == "no admin right on jobs"),
        "{error:?}"
    );
}
