//! `fencelock serve` and authentication, through the real binary: it refuses to serve open
//! where others can reach it, refuses a bad authentication file, reads the file again on
//! SIGHUP (keeping the old one if the new one is bad), and never logs a token.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fencelock_server::auth::token_sha256;
use fencelock_testkit::{eventually, eventually_blocking};
use serde_json::Value;

/// An authentication file of one principal per `(name, token)`, each with every right on
/// every name.
fn auth_file(principals: &[(&str, &str)]) -> String {
    principals
        .iter()
        .map(|(name, token)| {
            format!(
                "[[principal]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\ngrants = [{{ prefix = \"\", rights = [\"read\", \"lock\", \"admin\"] }}]\n",
                token_sha256(token)
            )
        })
        .collect()
}

/// A `fencelock serve` child whose JSON log lines the test reads.
struct Serving {
    child: Child,
    url: String,
    lines: mpsc::Receiver<Value>,
    /// Every line read so far.
    seen: Vec<Value>,
}

impl Serving {
    /// Starts `fencelock --log-format json serve --store memory:// ARGS…` with `env`, and
    /// waits for it to say where it serves.
    fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = common::fencelock()
            .envs(env.iter().copied())
            .args(["--log-format", "json", "serve", "--store", "memory://"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fencelock serve");
        let (send, lines) = mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let _ = send.send(serde_json::from_str(&line).unwrap_or(Value::String(line)));
            }
        });
        let mut serving = Self {
            child,
            url: String::new(),
            lines,
            seen: Vec::new(),
        };
        let started = serving.until_line("it says where it serves", |line| line["address"].is_string());
        let port = started["address"]
            .as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .to_owned();
        serving.url = format!("http://127.0.0.1:{port}");
        serving
    }

    /// The first log line that `wanted` picks, waiting up to 10 s for it.
    fn until_line(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        if let Some(line) = self.seen.iter().find(|line| wanted(line)) {
            return line.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no log line for {what}: {:?}", self.seen));
            self.seen.push(line.clone());
            if wanted(&line) {
                return line;
            }
        }
    }

    /// Sends SIGHUP to this child (by its PID).
    fn hang_up(&self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    }

    /// The status of `GET /locks/x` with `token`.
    async fn status_with(&self, token: &str) -> u16 {
        let client = reqwest::Client::new();
        let response = client
            .get(format!("{}/locks/x", self.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        response.status().as_u16()
    }

    /// Polls (with a deadline) until `GET /locks/x` with `token` answers `status`.
    async fn until_status(&self, token: &str, status: u16) {
        eventually(
            Duration::from_secs(10),
            &format!("{token} to get {status}"),
            async || {
                let now = self.status_with(token).await;
                if now == status { Ok(()) } else { Err(now) }
            },
        )
        .await;
    }

    /// Stops the child with SIGTERM (so that it writes out every queued log line) and
    /// returns every line it wrote.
    fn stop(&mut self) -> Vec<Value> {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = eventually_blocking(Duration::from_secs(10), "the server exits", || {
            self.child.try_wait().unwrap()
        });
        assert_eq!(status.code(), Some(0));
        // The reader thread ends, and the channel with it, once the pipe is closed.
        self.seen.extend(self.lines.iter());
        std::mem::take(&mut self.seen)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[test]
fn an_open_server_where_others_can_reach_it_refuses_to_start_and_says_how() {
    let shown = common::run(&["serve", "--store", "memory://", "--listen", "0.0.0.0:0"]);
    assert_eq!(shown.code, Some(1), "{shown:?}");
    for needed in [
        "refusing to serve 0.0.0.0:0 without authentication",
        "--auth FILE",
        "--insecure-no-auth",
    ] {
        assert!(shown.stderr.contains(needed), "{needed} not in {}", shown.stderr);
    }
    // Told to, it serves, and warns.
    let mut open = Serving::start(&["--listen", "0.0.0.0:0", "--insecure-no-auth"], &[]);
    let warning = open.until_line("the warning", |line| line["level"] == "WARN");
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("without authentication"),
        "{warning}"
    );
    drop(open);
    // --insecure-no-auth with --auth makes no sense.
    let both = common::run(&["serve", "--auth", "auth.toml", "--insecure-no-auth"]);
    assert_eq!(both.code, Some(2), "{both:?}");
}

#[tokio::test]
async fn with_auth_it_serves_anywhere_and_answers_401_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    write(&path, &auth_file(&[("ops", "ops-token")]));
    // From the environment, as FENCELOCK_AUTH.
    let serving = Serving::start(
        &["--listen", "0.0.0.0:0"],
        &[("FENCELOCK_AUTH", path.to_str().unwrap())],
    );
    assert_eq!(serving.status_with("ops-token").await, 404);
    assert_eq!(serving.status_with("guess").await, 401);
    let health = reqwest::get(format!("{}/healthz", serving.url)).await.unwrap();
    assert_eq!(health.status(), 200);
}

#[test]
fn a_bad_auth_file_keeps_the_server_from_starting() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    let good = auth_file(&[("ops", "ops-token")]);
    let missing = dir.path().join("nope.toml");
    let cases = [
        (
            good.replace("\"admin\"", "\"root\""),
            r#"principal "ops": grants[0].rights has the unknown right "root""#,
        ),
        (
            good.replace(&token_sha256("ops-token"), "abc"),
            r#"principal "ops": token_sha256 must be 64 hex digits"#,
        ),
        (
            auth_file(&[("ops", "a"), ("ops", "b")]),
            r#"principal "ops": name is given to two principals"#,
        ),
        (
            auth_file(&[("a", "same"), ("b", "same")]),
            r#"principal "b": token_sha256 is also principal "a"'s"#,
        ),
        (auth_file(&[("", "a")]), "principal #1: name must not be empty"),
    ];
    for (text, expected) in cases {
        write(&path, &text);
        let shown = common::run(&[
            "serve",
            "--store",
            "memory://",
            "--listen",
            "127.0.0.1:0",
            "--auth",
            path.to_str().unwrap(),
        ]);
        assert_eq!(shown.code, Some(1), "{shown:?}");
        assert!(
            shown.stderr.contains(expected),
            "{expected} not in {}",
            shown.stderr
        );
        assert!(shown.stderr.contains("auth.toml"), "{}", shown.stderr);
    }
    let shown = common::run(&[
        "serve",
        "--store",
        "memory://",
        "--auth",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(shown.code, Some(1), "{shown:?}");
    assert!(
        shown.stderr.contains("nope.toml: cannot read it"),
        "{}",
        shown.stderr
    );
}

#[tokio::test]
async fn sighup_reads_the_auth_file_again_and_a_bad_one_keeps_the_old() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    write(&path, &auth_file(&[("old", "old-token")]));
    let mut serving = Serving::start(
        &["--listen", "127.0.0.1:0", "--auth", path.to_str().unwrap()],
        &[],
    );
    assert_eq!(serving.status_with("old-token").await, 404);
    assert_eq!(serving.status_with("new-token").await, 401);

    write(&path, &auth_file(&[("new", "new-token")]));
    serving.hang_up();
    serving.until_status("new-token", 404).await;
    assert_eq!(serving.status_with("old-token").await, 401);
    serving.until_line("the reload", |line| {
        line["principals"] == 1 && line["path"].is_string()
    });

    write(&path, "[[principal]]\nname = \"broken\"\n");
    serving.hang_up();
    let kept = serving.until_line("the refused reload", |line| line["level"] == "WARN");
    assert!(
        kept["message"]
            .as_str()
            .unwrap()
            .contains("keeping the one in force"),
        "{kept}"
    );
    assert!(kept["error"].as_str().unwrap().contains("token_sha256"), "{kept}");
    assert_eq!(serving.status_with("new-token").await, 404);
    assert_eq!(serving.status_with("old-token").await, 401);

    // Still running: SIGHUP never ends it.
    assert!(serving.child.try_wait().unwrap().is_none());
}

#[tokio::test]
async fn no_token_reaches_the_log_even_at_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    let token = "a-secret-that-must-stay-9c41";
    write(&path, &auth_file(&[("ops", token)]));
    let mut serving = Serving::start(
        &["--listen", "127.0.0.1:0", "--auth", path.to_str().unwrap()],
        &[("RUST_LOG", "trace")],
    );
    let client = reqwest::Client::new();
    for (method, body) in [
        (reqwest::Method::POST, r#"{"owner": "w", "ttl_seconds": 60}"#),
        (reqwest::Method::DELETE, r#"{"force": true}"#),
    ] {
        let answer = client
            .request(method, format!("{}/locks/secretive", serving.url))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{answer:?}");
    }
    assert_eq!(serving.status_with("wrong-secret-71aa").await, 401);
    let lines: Vec<String> = serving.stop().iter().map(Value::to_string).collect();
    let text = lines.join("\n");
    assert!(
        text.contains("secretive") && text.contains("fencelock::audit"),
        "{text}"
    );
    for secret in [
        token.to_owned(),
        token_sha256(token),
        "wrong-secret-71aa".to_owned(),
    ] {
        assert!(!text.contains(&secret), "{secret} is in the log");
    }
}
