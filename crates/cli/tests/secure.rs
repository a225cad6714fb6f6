//! A secured fencelock as a user runs it: `fencelock serve --tls-cert --tls-key` with a
//! certificate made by the test, answered over https by the client crate and by the commands
//! with `--cacert`; refused without the CA; a new certificate on SIGHUP; a client that never
//! handshakes gives its place back. And the client half of authentication: `auth new-token`,
//! the token sent by every command (`--auth-token`, `FENCELOCK_AUTH_TOKEN`) but not handed to
//! `run`'s command, the exit codes of a server that refuses the client, `release --force`.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Server, fencelock, run, shown};
use fencelock_client::{CaCertificates, HttpOptions, connect_with};
use fencelock_testkit::eventually_blocking;
use fencelock_testkit::{Canned, Proxy, TestCa};
use nix::sys::signal::Signal;
use sha2::{Digest, Sha256};

const LIMIT: Duration = Duration::from_secs(10);

/// The certificate and key files of a server, and the CA to trust, in a folder of the test.
struct Certs {
    dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
}

impl Certs {
    /// A server certificate signed by `ca`, written; `ca`'s certificate at `ca.pem`.
    fn signed_by(ca: &TestCa) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        ca.server_cert().write(&cert, &key);
        ca.write(dir.path(), "ca.pem");
        Self { dir, cert, key }
    }

    fn ca(&self) -> String {
        self.path("ca.pem")
    }

    fn path(&self, file: &str) -> String {
        self.dir.path().join(file).display().to_string()
    }

    /// `fencelock serve` with these files and `flags`.
    fn serve(&self, flags: &[&str]) -> Server {
        let mut all = vec!["--tls-cert", path(&self.cert), "--tls-key", path(&self.key)];
        all.extend_from_slice(flags);
        Server::with("memory://", &[], &all)
    }
}

fn path(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[tokio::test]
async fn a_tls_server_answers_the_client_crate_and_the_commands_that_trust_its_ca() {
    let ca = TestCa::new("fencelock test CA");
    let certs = Certs::signed_by(&ca);
    let server = certs.serve(&[]);
    assert!(server.url.starts_with("https://127.0.0.1:"), "{}", server.url);

    let options = HttpOptions {
        ca_certificates: Some(CaCertificates::from_pem(ca.pem().as_bytes()).unwrap()),
        ..HttpOptions::default()
    };
    let client = connect_with(&server.url, options).await.unwrap();
    let ttl = fencelock_client::Ttl::from_millis(30_000, fencelock_client::Ttl::DEFAULT_MAX).unwrap();
    let guard = client
        .try_acquire(&"crate".parse().unwrap(), &"a".parse().unwrap(), ttl)
        .await
        .unwrap();
    guard.release().await.unwrap();

    let acquired = server.run(&["acquire", "payment:42", "--owner", "w7", "--cacert", &certs.ca()]);
    assert_eq!(acquired.code, Some(0), "{acquired:?}");
    assert_eq!(acquired.json()["resource"], "payment:42");
    assert_eq!(acquired.json()["owner"], "w7");
    // The environment variable names the CA too.
    let status = shown(
        fencelock()
            .args(["status", "payment:42", "--json", "--server", &server.url])
            .env("FENCELOCK_CACERT", certs.ca())
            .output()
            .unwrap(),
    );
    assert_eq!(status.code, Some(0), "{status:?}");
    assert_eq!(status.json()["owner"], "w7");
    // The bench goes over https through the client crate.
    let bench = server.run(&[
        "bench",
        "--duration",
        "300ms",
        "--clients",
        "2",
        "--json",
        "--cacert",
        &certs.ca(),
    ]);
    assert_eq!(bench.code, Some(0), "{bench:?}");
    assert!(bench.json()["granted"].as_u64() > Some(0), "{bench:?}");
    assert_eq!(bench.json()["errors"], 0, "{bench:?}");
}

#[test]
fn a_client_without_the_ca_is_refused_saying_why() {
    let certs = Certs::signed_by(&TestCa::new("the server's CA"));
    let server = certs.serve(&[]);
    let other = Certs::signed_by(&TestCa::new("another CA"));
    let other_ca = other.ca();
    for trust in [vec![], vec!["--cacert", other_ca.as_str()]] {
        let mut args = vec!["acquire", "r", "--owner", "a"];
        args.extend(trust);
        let refused = server.run(&args);
        assert_eq!(refused.code, Some(3), "{refused:?}");
        assert!(refused.stderr.contains("TLS handshake"), "{refused:?}");
        assert!(refused.stderr.contains("UnknownIssuer"), "{refused:?}");
    }
    // Nothing was acquired by the refused clients.
    let free = server.run(&["status", "r", "--cacert", &certs.ca()]);
    assert_eq!(free.code, Some(1), "{free:?}");
    // A file that is no CA certificate is bad input.
    let bad = server.run(&["status", "r", "--cacert", path(&certs.key)]);
    assert_eq!(bad.code, Some(2), "{bad:?}");
    assert!(bad.stderr.contains("--cacert"), "{bad:?}");
    let missing = server.run(&["status", "r", "--cacert", "/no/such/ca.pem"]);
    assert_eq!(missing.code, Some(2), "{missing:?}");
}

#[test]
fn sighup_serves_new_connections_with_the_new_certificate_and_keeps_it_if_the_next_is_bad() {
    let first = Certs::signed_by(&TestCa::new("first CA"));
    let server = first.serve(&[]);
    let second_ca = TestCa::new("second CA");
    let second_ca_file = second_ca.write(first.dir.path(), "second-ca.pem");
    let second_ca_file = path(&second_ca_file);
    let status = |ca: &str| server.run(&["status", "r", "--cacert", ca]).code;
    assert_eq!(status(&first.ca()), Some(1));
    assert_eq!(status(second_ca_file), Some(3));

    second_ca.server_cert().write(&first.cert, &first.key);
    server.signal(Signal::SIGHUP);
    eventually_blocking(LIMIT, "the second certificate to be served", || {
        (status(second_ca_file) == Some(1)).then_some(())
    });
    assert_eq!(
        status(&first.ca()),
        Some(3),
        "the first certificate is no longer served"
    );

    // A key that is not the certificate's: the server says so and keeps the second pair.
    let unused_key = first.dir.path().join("unused.pem");
    TestCa::new("third CA")
        .server_cert()
        .write(&first.cert, &unused_key);
    server.signal(Signal::SIGHUP);
    eventually_blocking(LIMIT, "the bad pair to be logged", || {
        server.logged("TLS certificate not reloaded").then_some(())
    });
    assert!(server.logged("cannot serve the certificate"));
    // (And the server is still there: a SIGHUP does not end it.)
    assert_eq!(status(second_ca_file), Some(1), "still the second certificate");
}

#[test]
fn a_client_that_never_finishes_its_handshake_gives_its_place_back() {
    let certs = Certs::signed_by(&TestCa::new("ca"));
    let server = certs.serve(&["--max-connections", "1", "--header-timeout", "300ms"]);
    let address = server.url.trim_start_matches("https://");
    let mut silent = TcpStream::connect(address).unwrap();
    silent.set_read_timeout(Some(LIMIT)).unwrap();
    // The server closes it at the header timeout, handshake unfinished...
    let mut byte = [0_u8; 1];
    assert_eq!(
        silent.read(&mut byte).unwrap(),
        0,
        "the server closed the silent connection"
    );
    // ... and the one place is served to the next client.
    let status = server.run(&["status", "r", "--cacert", &certs.ca()]);
    assert_eq!(status.code, Some(1), "{status:?}");
}

#[test]
fn serve_takes_a_whole_tls_pair_or_says_what_is_wrong() {
    let certs = Certs::signed_by(&TestCa::new("ca"));
    let serve = |tls: &[&str]| {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--store", "memory://"];
        args.extend_from_slice(tls);
        run(&args)
    };
    let half = serve(&["--tls-cert", path(&certs.cert)]);
    assert_eq!(half.code, Some(2), "{half:?}");
    assert!(half.stderr.contains("--tls-key"), "{half:?}");
    let swapped = serve(&["--tls-cert", path(&certs.key), "--tls-key", path(&certs.cert)]);
    assert_eq!(swapped.code, Some(1), "{swapped:?}");
    assert!(swapped.stderr.contains("cannot serve TLS"), "{swapped:?}");
    assert!(swapped.stderr.contains("holds no PEM certificate"), "{swapped:?}");
    let missing = serve(&["--tls-cert", "/no/such/cert.pem", "--tls-key", path(&certs.key)]);
    assert_eq!(missing.code, Some(1), "{missing:?}");
    assert!(
        missing.stderr.contains("cannot read /no/such/cert.pem"),
        "{missing:?}"
    );
    let other_key = certs.dir.path().join("other-key.pem");
    TestCa::new("ca")
        .server_cert()
        .write(&certs.dir.path().join("other-cert.pem"), &other_key);
    let mismatched = serve(&["--tls-cert", path(&certs.cert), "--tls-key", path(&other_key)]);
    assert_eq!(mismatched.code, Some(1), "{mismatched:?}");
    assert!(
        mismatched.stderr.contains("cannot serve the certificate"),
        "{mismatched:?}"
    );
}

/// The token and the `token_sha256` that `fencelock auth new-token NAME` printed.
fn new_token(name: &str) -> (String, String, String) {
    let shown = run(&["auth", "new-token", name]);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    let line = |prefix: &str| {
        shown
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {}", shown.stdout))
            .to_owned()
    };
    let hash = line("token_sha256 = ").trim_matches('"').to_owned();
    (line("token: "), hash, shown.stdout)
}

#[test]
fn auth_new_token_prints_a_fresh_token_and_the_block_with_its_sha256() {
    let (token, hash, shown) = new_token("billing");
    assert_eq!(token.len(), 64, "256 bits in hex: {token}");
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()), "{token}");
    let digest: String = Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(hash, digest);
    assert!(shown.contains("\n[[principal]]\nname = \"billing\"\n"), "{shown}");
    assert!(shown.contains("\n# grants = [{ prefix = "), "{shown}");
    assert_eq!(shown.matches(&token).count(), 1, "the token is shown once");
    let (again, other_hash, _) = new_token("billing");
    assert_ne!(token, again);
    assert_ne!(hash, other_hash);

    for bad in ["", "a\u{7}b"] {
        let shown = run(&["auth", "new-token", bad]);
        assert_eq!(shown.code, Some(2), "{bad:?}: {shown:?}");
        assert_eq!(shown.stdout, "", "{bad:?}");
    }
}

/// Every request in `sent` carries `Authorization: Bearer TOKEN`; how many there were.
fn all_carry(sent: &str, token: &str) -> usize {
    let sent = sent.to_ascii_lowercase();
    let requests = sent.matches(" http/1.1\r\n").count();
    let carrying = sent
        .matches(&format!("\r\nauthorization: bearer {token}\r\n"))
        .count();
    assert_eq!(carrying, requests, "{sent}");
    requests
}

#[test]
fn every_client_command_sends_the_auth_token_of_the_flag_or_the_environment() {
    let server = Server::start();
    let port = server.url.rsplit(':').next().unwrap().parse().unwrap();
    let proxy = Proxy::start(port);
    let url = format!("http://127.0.0.1:{}", proxy.port());
    let commands: [&[&str]; 7] = [
        &["acquire", "r", "--owner", "a"],
        &["renew", "r", "--owner", "a"],
        &["status", "r"],
        &["list"],
        &["release", "r", "--owner", "a"],
        &["run", "j", "--owner", "a", "--", "true"],
        &["bench", "--duration", "200ms", "--clients", "1"],
    ];
    for (i, args) in commands.iter().enumerate() {
        let before = proxy.sent().len();
        let token = format!("token-{i}");
        let mut command = fencelock();
        // The server right after the command, so that it stays before `run`'s `--`.
        command.arg(args[0]).args(["--server", &url]).args(&args[1..]);
        // Half of them by the flag, half by the environment.
        if i % 2 == 0 {
            command.args(["--auth-token", &token]);
        } else {
            command.env("FENCELOCK_AUTH_TOKEN", &token);
        }
        let done = shown(command.output().unwrap());
        assert_eq!(done.code, Some(0), "{args:?}: {done:?}");
        assert!(
            all_carry(&proxy.sent()[before..], &token) > 0,
            "{args:?} sent nothing"
        );
    }
    let bad = server.run(&["status", "r", "--auth-token", "not a token"]);
    assert_eq!(bad.code, Some(2), "{bad:?}");
    assert!(bad.stderr.contains("--auth-token"), "{bad:?}");
}

#[test]
fn run_hands_its_command_the_fencing_token_but_not_the_auth_token() {
    let server = Server::start();
    let script = r#"echo "$FENCELOCK_TOKEN|${FENCELOCK_AUTH_TOKEN-unset}""#;
    let given = server.run(&["run", "j", "--auth-token", "secret", "--", "sh", "-c", script]);
    assert_eq!(given.code, Some(0), "{given:?}");
    let (fencing, auth) = given.stdout.trim().split_once('|').unwrap();
    assert!(fencing.parse::<u64>().unwrap() >= 1, "{given:?}");
    assert_eq!(auth, "unset");
    // Exported by the user, it stays in the environment CMD inherits, as everything else.
    let exported = shown(
        fencelock()
            .args(["run", "j", "--server", &server.url, "--", "sh", "-c", script])
            .env("FENCELOCK_AUTH_TOKEN", "exported")
            .output()
            .unwrap(),
    );
    assert!(exported.stdout.trim().ends_with("|exported"), "{exported:?}");
}

#[test]
fn a_server_that_refuses_the_client_exits_2_or_3_saying_why() {
    let unknown = Canned::problem(
        "401 Unauthorized",
        &[("WWW-Authenticate", "Bearer")],
        "unauthorized",
        "who?",
    );
    let refused = run(&["acquire", "r", "--owner", "a", "--server", &unknown.url()]);
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert!(
        refused.stderr.contains("auth token is missing or unknown"),
        "{refused:?}"
    );
    assert!(
        refused.stderr.contains("--auth-token or FENCELOCK_AUTH_TOKEN"),
        "{refused:?}"
    );

    let no_right = Canned::problem("403 Forbidden", &[], "no-right", "billing may not lock r");
    let url = no_right.url();
    for command in ["acquire", "release"] {
        let args = [command, "r", "--owner", "a", "--server", &url];
        let refused = run(&args);
        assert_eq!(refused.code, Some(2), "{args:?}: {refused:?}");
        assert!(
            refused.stderr.contains("not allowed: billing may not lock r"),
            "{refused:?}"
        );
    }

    let limited = Canned::problem(
        "429 Too Many Requests",
        &[("Retry-After", "7")],
        "too-many",
        "slow down",
    );
    let refused = run(&["status", "r", "--server", &limited.url()]);
    assert_eq!(refused.code, Some(3), "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("too many requests: slow down (try again in 7s)"),
        "{refused:?}"
    );
}

#[test]
fn release_force_frees_a_name_whoever_holds_it() {
    let released = Canned::start("204 No Content", &[], "");
    let done = run(&[
        "release",
        "jobs",
        "--force",
        "--kind",
        "semaphore",
        "--server",
        &released.url(),
    ]);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert!(done.stdout.contains("released jobs"), "{done:?}");
    let request = released.requests().pop().unwrap();
    assert!(
        request.starts_with("DELETE /semaphores/jobs HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(request.ends_with("{\"force\":true}"), "{request}");

    let nothing = Canned::problem("404 Not Found", &[], "not-found", "nothing");
    let json = run(&["release", "jobs", "--force", "--json", "--server", &nothing.url()]);
    assert_eq!(json.code, Some(1), "{json:?}");
    assert_eq!(
        json.json(),
        serde_json::json!({"released": false, "resource": "jobs", "reason": "not_found"})
    );

    // Straight on a store, whoever held it: the next owner gets a greater token.
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("f.db").display());
    let first = run(&["acquire", "r", "--owner", "gone", "--store", &store]);
    assert_eq!(first.code, Some(0), "{first:?}");
    let forced = run(&["release", "r", "--force", "--store", &store]);
    assert_eq!(forced.code, Some(0), "{forced:?}");
    let next = run(&["acquire", "r", "--owner", "new", "--store", &store]);
    assert_eq!(next.code, Some(0), "{next:?}");
    assert!(next.json()["fencing_token"].as_u64() > first.json()["fencing_token"].as_u64());
    // --force takes no --token.
    assert_eq!(
        run(&["release", "r", "--force", "--token", "3", "--store", &store]).code,
        Some(2)
    );
}
