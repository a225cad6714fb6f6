//! [`Redis`]: a throwaway Redis server, in memory only, on a loopback port.

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::process::{Proc, find_binary, free_port, log_tail, port_answers, scratch_dir, wait_until};

/// How long Redis may take to start on a busy two-core machine (it usually takes
/// milliseconds: there is no data to load).
const START_DEADLINE: Duration = Duration::from_secs(30);

/// A Redis server on a free loopback port that keeps nothing on disk (`--save ""`,
/// `--appendonly no`), its working folder temporary. Dropping it kills the server and
/// removes the folder; if the test binary dies instead, the server is killed with it (see the
/// crate docs).
#[derive(Debug)]
pub struct Redis {
    // Declared before `dir` so that the server stops before its folder is removed.
    _server: Proc,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    /// Starts Redis and waits until it takes connections. Panics, naming the package to
    /// install, if Redis is not installed.
    pub fn start() -> Self {
        let bin = find_binary("redis-server", &[], "redis-server");
        // The free port may be taken by someone else before the server binds it: try anew.
        for _attempt in 0..3 {
            let dir = scratch_dir("redis");
            let port = free_port();
            let log = dir.path().join("redis.log");
            let mut command = Command::new(&bin);
            command
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path());
            let mut server = Proc::start("redis-server", command, &log);
            let mut exited = false;
            let ready = wait_until(
                Instant::now() + START_DEADLINE,
                || {},
                || {
                    exited = !server.is_running();
                    exited || port_answers(port)
                },
            );
            if ready && !exited {
                return Self {
                    _server: server,
                    port,
                    _dir: dir,
                };
            }
            let tail = log_tail(&log);
            if !tail.contains("Address already in use") {
                panic!("redis-server did not start within {START_DEADLINE:?}:\n{tail}");
            }
        }
        panic!("redis-server did not start on a free port in three tries");
    }

    /// The address for clients, e.g. `redis://127.0.0.1:6390`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The loopback TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// The one [`Redis`] of this test binary, started on first use and shared by its tests.
pub fn shared_redis() -> &'static Redis {
    static SHARED: OnceLock<Redis> = OnceLock::new();
    SHARED.get_or_init(Redis::start)
}
