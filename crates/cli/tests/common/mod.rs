//! Real processes for the command tests: a `fencelock serve` child on a free port, and the
//! `fencelock` command run as a user would run it.

#![allow(dead_code)] // Each test file uses a different part of this.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock_testkit::eventually_blocking;
use serde_json::Value;

/// The `fencelock` command, with none of the environment variables it reads, so that the
/// tests do not depend on the shell that runs them.
pub fn fencelock() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fencelock"));
    for variable in [
        "FENCELOCK_SERVER",
        "FENCELOCK_STORE",
        "FENCELOCK_OWNER",
        "FENCELOCK_LISTEN",
        "FENCELOCK_TTL",
        "FENCELOCK_WAIT",
        "FENCELOCK_NO_WAIT",
        "FENCELOCK_GRACE",
        "FENCELOCK_PREFIX",
        "FENCELOCK_JSON",
        "FENCELOCK_BENCH_TARGET",
        "FENCELOCK_LOG_FORMAT",
        "FENCELOCK_AUTH",
        "FENCELOCK_INSECURE_NO_AUTH",
        "FENCELOCK_RATE_LIMIT",
        "FENCELOCK_RATE_BURST",
        "FENCELOCK_MAX_HEADER_BYTES",
        "FENCELOCK_AUTH_TOKEN",
        "FENCELOCK_CACERT",
        "FENCELOCK_TLS_CERT",
        "FENCELOCK_TLS_KEY",
        "RUST_LOG",
    ] {
        command.env_remove(variable);
    }
    command
}

/// What a finished command showed.
#[derive(Debug)]
pub struct Shown {
    /// The exit code (`None` if a signal ended it).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Shown {
    /// Standard output read as JSON (`Null` if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or(Value::Null)
    }
}

/// Runs `fencelock ARGS…` to its end.
pub fn run(args: &[&str]) -> Shown {
    shown(fencelock().args(args).output().expect("fencelock runs"))
}

pub fn shown(output: std::process::Output) -> Shown {
    Shown {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A `fencelock serve` child on a free port.
pub struct Server {
    child: Child,
    /// `http://ADDRESS`, or `https://ADDRESS` for a server with TLS.
    pub url: String,
    /// Its log lines so far (JSON).
    logs: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// A server on a fresh in-memory store.
    pub fn start() -> Self {
        Self::on("memory://")
    }

    /// A server on the store at `store`.
    pub fn on(store: &str) -> Self {
        Self::with_env(store, &[])
    }

    /// A server on the store at `store`, with these environment variables set.
    pub fn with_env(store: &str, env: &[(&str, &str)]) -> Self {
        Self::with(store, env, &[])
    }

    /// A server on the store at `store`, with these environment variables set and these
    /// flags of `serve` added.
    pub fn with(store: &str, env: &[(&str, &str)], flags: &[&str]) -> Self {
        let mut child = fencelock()
            .envs(env.iter().copied())
            .args([
                "--log-format",
                "json",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--store",
                store,
            ])
            .args(flags)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fencelock serve");
        // The server logs the address it bound; read log lines until it appears.
        let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("fencelock serve exited before serving")
                .unwrap();
            let event: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if let Some(address) = event["address"].as_str() {
                break format!("{}://{address}", event["scheme"].as_str().unwrap_or("http"));
            }
        };
        // Keep reading its log so the server never blocks on a full pipe.
        let logs = Arc::new(Mutex::new(Vec::new()));
        let kept = logs.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        Self { child, url, logs }
    }

    /// Whether a log line so far contains `text`.
    pub fn logged(&self, text: &str) -> bool {
        self.logs.lock().unwrap().iter().any(|line| line.contains(text))
    }

    /// Sends the server `signal`.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, signal).unwrap();
    }

    /// The server's process.
    pub fn process(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Stops the server with SIGTERM and asserts it exits 0 within 5 s.
    pub fn stop(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let status = eventually_blocking(Duration::from_secs(5), "the server exits after SIGTERM", || {
            self.child.try_wait().unwrap()
        });
        assert_eq!(status.code(), Some(0));
    }

    /// Kills the server with SIGKILL: no shutdown code runs.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `fencelock COMMAND --server URL ARGS…` (the server right after the command, so that
    /// it stays before `run`'s `--`).
    pub fn run(&self, args: &[&str]) -> Shown {
        let mut all = args.to_vec();
        all.splice(
            1.min(all.len())..1.min(all.len()),
            ["--server", self.url.as_str()],
        );
        run(&all)
    }

    /// The live lease on `resource`, as the API answers it (`None` if there is none).
    pub fn lease(&self, resource: &str) -> Option<Value> {
        self.status(resource, "lock")
    }

    /// What `fencelock status NAME --kind KIND --json` shows: the live lease, or the live
    /// permits or holds, as the API answers them (`None` if there are none).
    pub fn status(&self, name: &str, kind: &str) -> Option<Value> {
        let shown = self.run(&["status", name, "--kind", kind, "--json"]);
        match shown.code {
            Some(0) => Some(shown.json()),
            Some(1) => None,
            _ => panic!("status failed: {shown:?}"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The stream of `GET /events?prefix=PREFIX` on `server`, once registered (its first
/// heartbeat read within `wait`): whatever happens from now on under `prefix` is on it.
pub async fn events_from_now(
    server: &Server,
    prefix: &str,
    wait: Duration,
) -> fencelock_testkit::sse::EventStream {
    let response = reqwest::Client::new()
        .get(format!("{}/events?prefix={prefix}", server.url))
        .send()
        .await
        .expect("the server answers");
    let mut stream = fencelock_testkit::sse::EventStream::new(response);
    let first = stream.next_message(wait).await.expect("a heartbeat");
    assert!(first.is_comment(), "{first:?}");
    stream
}

/// A port nothing listens on (bound, then let go).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The contents of `path` once it exists.
pub fn wait_for_file(path: &Path) -> String {
    eventually_blocking(Duration::from_secs(10), &format!("{}", path.display()), || {
        std::fs::read_to_string(path).ok().filter(|text| !text.is_empty())
    })
}

/// Whether process `pid` is alive: it exists and is not a zombie (a zombie runs no code).
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, after)| after.split_whitespace().next());
    !matches!(state, Some("Z" | "X" | "x") | None)
}

/// Milliseconds since the Unix epoch by the wall clock, as the server's timestamps count.
pub fn wall_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// An RFC 3339 timestamp of the API in milliseconds since the Unix epoch.
pub fn ms(rfc3339: &Value) -> i64 {
    let time = humantime::parse_rfc3339(rfc3339.as_str().expect("a timestamp")).unwrap();
    i64::try_from(time.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}
