//! [`Postgres`]: a throwaway PostgreSQL server in a temporary folder.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::{Gid, Uid, User};

use crate::process::{Proc, find_binary, free_port, log_tail, port_answers, scratch_dir, wait_until};

/// How long PostgreSQL may take to start or stop on a busy two-core machine.
const START_DEADLINE: Duration = Duration::from_secs(60);
const STOP_GRACE: Duration = Duration::from_secs(20);

/// A PostgreSQL server on a free loopback port, with its data in a temporary folder.
///
/// Authentication is `trust` for the superuser `postgres`, `fsync` is off (the data only
/// needs to survive a clean stop and start, not a power cut). When the tests run as root,
/// the server runs as the unprivileged `postgres` user, as PostgreSQL requires. Dropping it
/// stops the server and removes the folder; if the test binary dies instead, the server is
/// killed with it (see the crate docs).
#[derive(Debug)]
pub struct Postgres {
    // Declared before `dir` so that the server stops before its folder is removed.
    server: Option<Proc>,
    bin: PathBuf,
    run_as: Option<(Uid, Gid)>,
    port: u16,
    dir: tempfile::TempDir,
}

impl Postgres {
    /// Makes a new cluster with `initdb` and starts it. Panics, naming the package to
    /// install, if PostgreSQL is not installed.
    pub fn start() -> Self {
        let bin = binary_dir();
        let run_as = unprivileged_user();
        let dir = scratch_dir("postgres");
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid.as_raw()), Some(gid.as_raw()))
                .expect("give the folder to the postgres user");
        }
        let mut initdb = Command::new(bin.join("initdb"));
        initdb.arg("-D").arg(dir.path().join("data")).args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "--no-locale",
            "-E",
            "UTF8",
        ]);
        as_user(&mut initdb, run_as);
        let out = initdb.output().expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut postgres = Self {
            server: None,
            bin,
            run_as,
            port: 0,
            dir,
        };
        // The free port may be taken by someone else before the server binds it: try anew.
        for _attempt in 0..3 {
            postgres.port = free_port();
            if postgres.launch() {
                return postgres;
            }
        }
        panic!(
            "PostgreSQL did not start on a free port in three tries:\n{}",
            log_tail(&postgres.log())
        );
    }

    /// The address of the `postgres` database as the `postgres` user, e.g.
    /// `postgres://postgres@127.0.0.1:54321/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The loopback TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log file.
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// Stops the server (a fast shutdown: open connections are closed) and waits until it
    /// has exited. The data stays, for [`Postgres::start_again`].
    pub fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.stop(Signal::SIGINT, STOP_GRACE);
        }
    }

    /// Starts the stopped server again on the same data and port, and waits until it takes
    /// connections.
    pub fn start_again(&mut self) {
        assert!(self.server.is_none(), "start_again: PostgreSQL is still running");
        assert!(
            self.launch(),
            "PostgreSQL did not start again on port {}:\n{}",
            self.port,
            log_tail(&self.log())
        );
    }

    /// Kills the server and every process of it at once (SIGKILL), as a crash of its host
    /// would, and waits until the server is gone. The data stays, as the kernel has it, for
    /// [`Postgres::start_again`], which recovers it from the write-ahead log.
    pub fn kill(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.kill_tree();
        }
    }

    /// Stops the server and every process of it (the postmaster and one per connection)
    /// where they stand (SIGSTOP): connections stay open and nothing is answered, as from a
    /// hung host, until [`Postgres::resume`]. Panics if the server is stopped.
    pub fn pause(&self) {
        self.running().pause_tree();
    }

    /// Lets a paused server answer again (SIGCONT to every process of it).
    pub fn resume(&self) {
        self.running().resume_tree();
    }

    fn running(&self) -> &Proc {
        self.server
            .as_ref()
            .unwrap_or_else(|| panic!("PostgreSQL on port {} is stopped", self.port))
    }

    /// Whether the server runs now.
    pub fn is_running(&mut self) -> bool {
        self.server.as_mut().is_some_and(Proc::is_running)
    }

    /// Starts `postgres` on `self.port` and waits until it is ready; `false` if the port was
    /// taken.
    fn launch(&mut self) -> bool {
        let data = self.dir.path().join("data");
        let pid_file = data.join("postmaster.pid");
        // A stale pid file would be read as "ready" before the new server writes its own.
        let _ = fs::remove_file(&pid_file);
        let mut command = Command::new(self.bin.join("postgres"));
        command
            .arg("-D")
            .arg(&data)
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1", "-k"])
            .arg(self.dir.path())
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            // Many tests of one binary share the server, each with its own pool.
            .args(["-c", "max_connections=300"]);
        as_user(&mut command, self.run_as);
        let mut server = Proc::start("postgres", command, &self.log());
        let deadline = Instant::now() + START_DEADLINE;
        let port = self.port;
        let mut exited = false;
        let ready = wait_until(
            deadline,
            || {},
            || {
                if !server.is_running() {
                    exited = true;
                    return true;
                }
                pid_file_says_ready(&pid_file) && port_answers(port)
            },
        );
        if exited {
            let log = fs::read_to_string(self.log()).unwrap_or_default();
            if log.contains("could not bind") || log.contains("already in use") {
                return false;
            }
            server.assert_running("starting");
        }
        assert!(
            ready,
            "PostgreSQL did not become ready within {START_DEADLINE:?}:\n{}",
            log_tail(&self.log())
        );
        self.server = Some(server);
        true
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The one [`Postgres`] of this test binary, started on first use, shared by its tests
/// (starting a cluster takes seconds). Tests that stop the server must start their own.
pub fn shared_postgres() -> &'static Postgres {
    static SHARED: OnceLock<Postgres> = OnceLock::new();
    SHARED.get_or_init(Postgres::start)
}

/// The postmaster writes its state on the 8th line of its pid file; `pg_ctl -w` waits for
/// `ready` there too.
fn pid_file_says_ready(pid_file: &Path) -> bool {
    fs::read_to_string(pid_file)
        .ok()
        .and_then(|text| text.lines().nth(7).map(|l| l.trim() == "ready"))
        .unwrap_or(false)
}

/// The folder of `initdb` and `postgres`: where `postgres` is on PATH, else the newest
/// `/usr/lib/postgresql/*/bin` (Debian keeps them off PATH).
fn binary_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = fs::read_dir("/usr/lib/postgresql")
        .map(|entries| entries.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    versions.sort_by_key(|dir| {
        dir.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    versions.reverse();
    let postgres = find_binary("postgres", &versions, "postgresql");
    // Resolve a symlink such as /usr/local/bin/postgres so that initdb is found beside it.
    let postgres = fs::canonicalize(&postgres).unwrap_or(postgres);
    let dir = postgres.parent().map(Path::to_path_buf).unwrap_or_default();
    find_binary("initdb", std::slice::from_ref(&dir), "postgresql");
    dir
}

/// PostgreSQL refuses to run as root: as root, run it as the `postgres` user.
fn unprivileged_user() -> Option<(Uid, Gid)> {
    if !Uid::effective().is_root() {
        return None;
    }
    let user = User::from_name("postgres").ok().flatten().unwrap_or_else(|| {
        panic!(
            "running as root, but there is no `postgres` user to run PostgreSQL as: install \
                 Debian's `postgresql` package (it creates the user)"
        )
    });
    Some((user.uid, user.gid))
}

fn as_user(command: &mut Command, run_as: Option<(Uid, Gid)>) {
    if let Some((uid, gid)) = run_as {
        command.uid(uid.as_raw()).gid(gid.as_raw());
    }
    // initdb and postgres look at the locale and at HOME; keep both neutral.
    command
        .env("LC_ALL", "C")
        .env_remove("PGDATA")
        .env_remove("PGPORT");
}
