//! Child processes that die with the test binary, free ports, polling with a deadline, and
//! finding a server's binary (or jar).
//!
//! # Why children cannot outlive the test binary
//!
//! A server kept in a `static` is never dropped, and a test binary killed by a timeout or a
//! signal runs no destructor at all. So stopping a server cannot rest on `Drop` alone: every
//! server is spawned with `PR_SET_PDEATHSIG = SIGKILL`, which makes the kernel kill it the
//! moment its parent goes away, however the parent goes.
//!
//! The kernel ties that signal to the *thread* that forked the child, not to the process.
//! Tests run on short-lived threads, so a server started by the first test would be killed
//! when that test's thread ends, while other tests still use it. Every spawn therefore goes
//! through one dedicated thread that lives as long as the process ([`spawn`]).
//!
//! Servers must be our direct children for this (a signal set before `exec` is cleared in a
//! grandchild), which is why PostgreSQL is not started through `runuser` (it forks and waits)
//! but with the postgres user's uid and gid set by [`std::os::unix::process::CommandExt`].
//! The parent-death setting is made after that change of uid, because the kernel clears it on
//! a change of credentials.
//!
//! Temporary folders of a killed test binary are left behind; [`scratch_dir`] removes those
//! of test binaries that no longer run, the next time any test binary makes one.

use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Mutex, OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How often a wait for a condition looks again.
const POLL: Duration = Duration::from_millis(20);

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `command` from the one long-lived spawner thread, so that the child gets SIGKILL
/// when this process ends, however it ends (see the module docs): for the servers here, and
/// for the processes a test or the torture runner starts itself (`fencelock serve`, clients).
pub fn spawn_tied(command: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, receive) = mpsc::channel::<SpawnRequest>();
        thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                // Never returns while the process lives: the sender sits in a static.
                for (mut command, reply) in receive {
                    // SAFETY: the closure runs between fork and exec and only makes one
                    // system call, which is async-signal-safe.
                    unsafe {
                        command.pre_exec(|| {
                            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)
                        });
                    }
                    // The requester may have given up; then the child is dropped, and still
                    // dies with us.
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the testkit spawner thread");
        Mutex::new(requests)
    });
    let (reply, answer) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .send((command, reply))
        .map_err(|_| io::Error::other("the testkit spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the testkit spawner thread is gone"))?
}

/// A running server process, with the log file its output goes to.
#[derive(Debug)]
pub(crate) struct Proc {
    child: Child,
    name: String,
    log: PathBuf,
}

impl Proc {
    /// Starts `command` (through [`spawn`]) with stdout and stderr appended to `log`.
    pub(crate) fn start(name: &str, mut command: Command, log: &Path) -> Self {
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("open log {}: {e}", log.display()));
        let err = file.try_clone().expect("clone a log file handle");
        command
            .stdin(std::process::Stdio::null())
            .stdout(file)
            .stderr(err);
        let child = spawn_tied(command).unwrap_or_else(|e| panic!("start {name}: {e}"));
        Self {
            child,
            name: name.to_owned(),
            log: log.to_owned(),
        }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has not exited yet.
    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Panics, with the end of the log, unless the process still runs.
    pub(crate) fn assert_running(&mut self, doing: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited ({status}) while {doing}; end of {}:\n{}",
                self.name,
                self.log.display(),
                log_tail(&self.log)
            );
        }
    }

    /// Sends `signal`, waits up to `grace` for the process to exit, then kills it.
    pub(crate) fn stop(&mut self, signal: Signal, grace: Duration) {
        if !self.is_running() {
            return;
        }
        let pid = Pid::from_raw(i32::try_from(self.pid()).expect("pids fit in i32"));
        // It may exit between the check and the signal: then there is nothing to stop.
        let _ = kill(pid, signal);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.is_running() {
                return;
            }
            thread::sleep(POLL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Stops the process where it stands (SIGSTOP): it keeps its sockets and its memory, but
    /// runs nothing until [`Proc::resume`], as a hung process or a paused VM would.
    pub(crate) fn pause(&self) {
        self.signal(Signal::SIGSTOP);
        wait_stopped(self.pid());
    }

    /// Lets a paused process run again (SIGCONT).
    pub(crate) fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// [`Proc::pause`] for the process and every process it started (a PostgreSQL server is
    /// a postmaster and a process per connection: stopping the postmaster alone would leave
    /// every open connection answering).
    pub(crate) fn pause_tree(&self) {
        signal_tree(self.pid(), Signal::SIGSTOP);
    }

    /// [`Proc::resume`] for the process and every process it started.
    pub(crate) fn resume_tree(&self) {
        signal_tree(self.pid(), Signal::SIGCONT);
    }

    /// Kills the process and every process it started at once (SIGKILL), as a crash of the
    /// host would, and waits for the process itself.
    pub(crate) fn kill_tree(&mut self) {
        signal_tree(self.pid(), Signal::SIGKILL);
        let _ = self.child.wait();
    }

    fn signal(&self, signal: Signal) {
        let pid = i32::try_from(self.pid()).expect("a pid fits an i32");
        kill(Pid::from_raw(pid), signal).unwrap_or_else(|e| panic!("{signal} to {pid}: {e}"));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `signal` to `pid` and to every process descended from it. The parent goes first,
/// so that a stopped parent starts no new child while its children are signalled; a process
/// that exits meanwhile is skipped. A SIGSTOP returns once each has stopped.
pub fn signal_tree(pid: u32, signal: Signal) {
    let mut pending = vec![pid];
    let mut seen = Vec::new();
    while let Some(next) = pending.pop() {
        if seen.contains(&next) {
            continue;
        }
        seen.push(next);
        if let Ok(raw) = i32::try_from(next) {
            let _ = kill(Pid::from_raw(raw), signal);
        }
        if signal == Signal::SIGSTOP {
            wait_stopped(next);
        }
        pending.extend(children(next));
    }
}

/// The processes whose parent is `pid`, from `/proc/*/stat`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| parent_of(child) == Some(pid))
        .collect()
}

/// The parent of `pid`, from `/proc/PID/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    after_name(&stat)?.nth(1)?.parse().ok()
}

/// The fields of a `/proc/…/stat` line after the command name (in parentheses, which may hold
/// spaces and parentheses itself): the state, the parent, and on.
fn after_name(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace())
}

/// How long a SIGSTOP may take to stop every thread of a process on a busy machine.
const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// Waits until every thread of `pid` has stopped, or `pid` is gone (at most
/// [`STOP_DEADLINE`]). A SIGSTOP takes effect as each thread next enters the kernel: until
/// then, a thread running on another core still answers, and a "paused" server could answer
/// the very request meant to find it paused.
fn wait_stopped(pid: u32) {
    wait_until(Instant::now() + STOP_DEADLINE, || {}, || threads_stopped(pid));
}

/// Whether every thread of `pid` is stopped (or dead), by `/proc/PID/task/*/stat`; `true`
/// for a process that is gone.
fn threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        let state = fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| after_name(&stat)?.next()?.chars().next());
        // A thread gone meanwhile answers nothing either.
        state.is_none_or(|state| matches!(state, 'T' | 't' | 'Z' | 'X'))
    })
}

/// The last lines of a log, for a panic message.
pub(crate) fn log_tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A loopback port that nobody listened on a moment ago, and never given before by this
/// process: the kernel may hand out a port just closed again, and two members of one
/// cluster were once given the same one. Another program may still take it before the
/// server binds it; starters retry with a new port when that happens.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("bind a free loopback port");
        if GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(port)
        {
            return port;
        }
    }
}

/// Whether something accepts TCP connections on the loopback `port`.
pub(crate) fn port_answers(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Polls `ready` until it holds, or returns `false` at `deadline`. `alive` is asked first
/// each time, so that a server that died is reported at once instead of at the deadline.
pub(crate) fn wait_until(
    deadline: Instant,
    mut alive: impl FnMut(),
    mut ready: impl FnMut() -> bool,
) -> bool {
    loop {
        alive();
        if ready() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(POLL);
    }
}

/// The path of the server binary `name`: on `PATH`, else in one of `dirs` (glob-free: the
/// caller lists them). Panics, naming the Debian package to install, if it is nowhere: a test
/// that needs a server must fail without it, never skip.
pub(crate) fn find_binary(name: &str, dirs: &[PathBuf], package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(dirs.iter().cloned())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| not_installed(name, &format!("on PATH and in {dirs:?}"), package))
}

/// The path of the file `name` (a jar, say) in one of `dirs`; panics like [`find_binary`] if
/// it is in none of them.
pub(crate) fn find_file(name: &str, dirs: &[PathBuf], package: &str) -> PathBuf {
    dirs.iter()
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| not_installed(name, &format!("in {dirs:?}"), package))
}

fn not_installed(name: &str, looked: &str, package: &str) -> ! {
    panic!(
        "`{name}` is not installed (looked {looked}): install Debian's `{package}` package \
         (`apt-get install -y {package}`); tests that need it fail without it"
    )
}

/// A fresh temporary folder for one server, named after this process so that folders left
/// by killed test binaries can be found and removed (which this does, once per process).
pub(crate) fn scratch_dir(kind: &str) -> tempfile::TempDir {
    static SWEPT: OnceLock<()> = OnceLock::new();
    SWEPT.get_or_init(sweep_stale_dirs);
    tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{}-{kind}-", std::process::id()))
        .tempdir()
        .expect("create a temporary folder")
}

const PREFIX: &str = "fencelock-testkit-";

/// Removes the scratch folders of test binaries that no longer run.
fn sweep_stale_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            // Another test binary may be sweeping the same folder: losing that race is fine.
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
