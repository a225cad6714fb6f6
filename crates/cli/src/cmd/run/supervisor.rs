//! `fencelock supervise --channel FD -- CMD [ARGS...]`: the process `fencelock run` starts
//! CMD under, so that nothing CMD started outlives `run`, however `run` ends: SIGKILL, the
//! OOM killer and a crash give `run` itself no chance to act. Hidden: it is `run`'s part,
//! not a command for people.
//!
//! The supervisor is a child subreaper (see `procs`) and CMD's parent; it starts CMD in a
//! process group of its own. It holds one end of a Unix stream socket (the channel) whose
//! other end only `run` holds: `run`'s end is close-on-exec, and so is this one once CMD is
//! started, so no process CMD starts holds either. Over it the supervisor tells `run` what
//! happens ([`Report`]) and carries out `run`'s orders ([`Order`]). When the channel ends —
//! `run` is done with CMD, or gone — it kills every process CMD started, round after round,
//! until it has no child left, and exits. That takes milliseconds, while the lease `run`
//! held passes on at the earliest at the last expiry `run` confirmed: renewals stop with
//! `run`.
//!
//! `run` also tells the supervisor, again and again, until when the lease surely lasts
//! ([`Order::Until`]): should `run` fall silent past it — stopped (SIGSTOP, a debugger, a
//! frozen container's main process) or starved, so that neither its renewals nor its own
//! stop go out — the supervisor stops CMD on the same schedule `run` would have kept (SIGTERM
//! at the end of the grace period, SIGKILL the allowance before the lease's end), says so
//! ([`Report::Expired`]) and goes on reaping. A supervisor stopped together with `run` (a
//! SIGSTOP to both, or to a frozen cgroup) cannot: there the fencing token is the only guard.
//!
//! Every blockable signal is blocked here (and unblocked in CMD before its exec: a mask is
//! inherited). A SIGTERM meant for `run` and its command — a service manager stopping them
//! all, `pkill fencelock` — must not end the supervisor first, which would leave `run` no
//! choice but SIGKILL for CMD. Only SIGKILL ends it early; then everything it supervised is
//! handed to `run`, a subreaper too, which kills it all.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::sync::{Arc, Condvar, Mutex};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::wait::{WaitStatus, wait};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::procs;
use crate::cmd::common::exit;

/// Flags of `fencelock supervise`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// This end of the channel to `fencelock run`: the number of an inherited file
    /// descriptor of a Unix stream socket.
    #[arg(long, value_name = "FD")]
    channel: RawFd,
    /// The command to start, and its arguments (after `--`).
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// What the supervisor tells `run`: one JSON object per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "report", rename_all = "snake_case")]
pub enum Report {
    /// CMD runs, with this pid, which is also its process group's id.
    Started { pid: i32 },
    /// CMD could not be started: `run` exits with `code` and tells `message`.
    NotStarted { code: u8, message: String },
    /// CMD ended; `code` is its exit status, or 128+N if signal N ended it (as shells say).
    Exited { code: u8 },
    /// An order was carried out: its signal went to this many live processes.
    Signalled { count: usize },
    /// No process CMD started is left, CMD included: the supervisor has no child any more.
    /// Final: a supervisor with no child cannot get one again.
    Gone,
    /// `run` fell silent past the last [`Order::Until`]: the supervisor stops every process
    /// CMD started (SIGTERM now, SIGKILL at `kill_at`), as `run` would have.
    Expired,
}

/// What `run` orders: one JSON object per line; a signal is answered with
/// [`Report::Signalled`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "order", rename_all = "snake_case")]
pub enum Order {
    /// SIGTERM to every live process CMD started, CMD included.
    Term,
    /// SIGKILL to every live process CMD started, CMD included.
    Kill,
    /// Should no later `Until` come, SIGTERM to every process CMD started at `term_at` and
    /// SIGKILL at `kill_at`: milliseconds of `CLOCK_MONOTONIC`, which every process of the
    /// machine reads alike. Not answered.
    Until { term_at: u64, kill_at: u64 },
}

/// Milliseconds of `CLOCK_MONOTONIC` now: the clock of [`Order::Until`], the one `std` and
/// tokio measure `Instant`s on (on Linux), shared by every process of the machine.
pub fn monotonic_ms() -> u64 {
    // Cannot fail: CLOCK_MONOTONIC is always there on Linux, and `clock_gettime` fails only
    // for a clock that is not.
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    u64::try_from(now.tv_sec()).unwrap_or(0) * 1_000 + u64::try_from(now.tv_nsec()).unwrap_or(0) / 1_000_000
}

/// The watchdog's state: the last [`Order::Until`], and whether the channel has ended.
#[derive(Debug, Default)]
struct Watch {
    until: Option<(u64, u64)>,
    ended: bool,
}

/// The watchdog, shared by the thread that reads orders and the one that keeps the time.
#[derive(Debug, Default)]
struct Watchdog {
    watch: Mutex<Watch>,
    changed: Condvar,
}

impl Watchdog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes `run`'s latest word on the lease, or the channel's end.
    fn update(&self, change: impl FnOnce(&mut Watch)) {
        change(&mut self.lock());
        self.changed.notify_all();
    }

    /// Waits until `run` falls silent past its last `Until` (its `term_at` and `kill_at`),
    /// or the channel ends (`None`).
    fn wait_for_silence(&self) -> Option<(u64, u64)> {
        let mut watch = self.lock();
        loop {
            if watch.ended {
                return None;
            }
            let Some((term_at, kill_at)) = watch.until else {
                watch = self
                    .changed
                    .wait(watch)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                continue;
            };
            let now = monotonic_ms();
            if now >= term_at {
                return Some((term_at, kill_at));
            }
            let left = std::time::Duration::from_millis(term_at - now);
            watch = self
                .changed
                .wait_timeout(watch, left)
                .map(|(watch, _)| watch)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
        }
    }
}

/// Keeps the time for a silent `run`: stops every process CMD started when `run` falls
/// silent past its last word on the lease (see the module's docs).
fn watch(watchdog: &Watchdog, channel: &Channel) {
    let Some((_, kill_at)) = watchdog.wait_for_silence() else {
        return;
    };
    channel.send(&Report::Expired);
    tell(
        "fencelock stopped renewing the lease (paused, or starved): stopping CMD and every process it started before the lease's end",
    );
    procs::signal_descendants(Signal::SIGTERM);
    std::thread::sleep(std::time::Duration::from_millis(
        kill_at.saturating_sub(monotonic_ms()),
    ));
    procs::kill_every_descendant(None);
}

/// Runs `fencelock supervise`.
pub fn run(args: Args) -> ExitCode {
    match supervise(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tell(&message);
            ExitCode::from(exit::BAD_INPUT)
        }
    }
}

fn supervise(args: Args) -> Result<(), String> {
    // Before any thread starts: a thread inherits the mask of the one that starts it.
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), None)
        .map_err(|e| format!("cannot block signals: {e}"))?;
    let channel = Channel::inherited(args.channel)?;
    let orders = channel.orders()?;
    let cmd = match start(&args.command) {
        Ok(cmd) => cmd,
        Err(not_started) => {
            channel.send(&not_started);
            return Ok(());
        }
    };
    // Told before the reaper starts, which may tell at once that CMD ended.
    channel.send(&Report::Started { pid: cmd.as_raw() });
    let reaper = channel.clone();
    let reaping = std::thread::Builder::new()
        .name("fencelock-reaper".into())
        .spawn(move || reap(cmd, &reaper));
    if let Err(error) = reaping {
        // `run` sees the channel end, and says its supervisor died.
        procs::kill_every_descendant(None);
        return Err(format!("cannot wait for CMD: {error}"));
    }
    let watchdog = Arc::new(Watchdog::default());
    let (keeper, told) = (watchdog.clone(), channel.clone());
    let watching = std::thread::Builder::new()
        .name("fencelock-watchdog".into())
        .spawn(move || watch(&keeper, &told));
    if let Err(error) = watching {
        procs::kill_every_descendant(None);
        return Err(format!("cannot keep the time of the lease: {error}"));
    }
    for order in orders {
        let signal = match order {
            Order::Until { term_at, kill_at } => {
                watchdog.update(|watch| watch.until = Some((term_at, kill_at)));
                continue;
            }
            Order::Term => Signal::SIGTERM,
            Order::Kill => Signal::SIGKILL,
        };
        let count = procs::signal_descendants(signal);
        channel.send(&Report::Signalled { count });
    }
    watchdog.update(|watch| watch.ended = true);
    // The channel ended: `run` is done with CMD, or gone. Leave nothing behind.
    let killed = procs::kill_every_descendant(None);
    if killed.count > 0 {
        tell(&format!(
            "fencelock run let go of CMD while {} of the processes it started were alive: they were killed (SIGKILL)",
            killed.count
        ));
    }
    Ok(())
}

/// Says `message` on standard error, `run`'s: it may be gone by now, and a write that fails
/// must not end the supervisor (as `eprintln!` would, by a panic).
fn tell(message: &str) {
    let _ = writeln!(std::io::stderr(), "fencelock supervise: {message}");
}

/// Starts CMD in a process group of its own, as this process's child (a subreaper's).
fn start(command: &[OsString]) -> Result<Pid, Report> {
    let not_started = |code, message: String| Report::NotStarted { code, message };
    let (program, arguments) = command
        .split_first()
        .ok_or_else(|| not_started(exit::BAD_INPUT, "no CMD given".into()))?;
    procs::become_subreaper().map_err(|e| {
        not_started(
            exit::CANNOT_RUN,
            format!("cannot become a child subreaper, to keep what CMD starts in reach: {e}"),
        )
    })?;
    let mut command = Command::new(program);
    command.args(arguments).process_group(0);
    // SAFETY: the closure runs between fork and exec and makes one system call, which is
    // async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None).map_err(std::io::Error::from)
        });
    }
    let child = command.spawn().map_err(|error| {
        let code = match error.kind() {
            std::io::ErrorKind::NotFound => exit::NOT_FOUND,
            _ => exit::CANNOT_RUN,
        };
        not_started(code, format!("cannot run {}: {error}", program.to_string_lossy()))
    })?;
    // A pid always fits: the kernel's are at most 2^22.
    i32::try_from(child.id())
        .map(Pid::from_raw)
        .map_err(|_| not_started(exit::CANNOT_RUN, "CMD has no pid".into()))
}

/// Reaps every child — CMD, and whatever CMD started that was handed to us — telling `run`
/// when CMD ends and when no child is left.
fn reap(cmd: Pid, channel: &Channel) {
    loop {
        let code = match wait() {
            Ok(WaitStatus::Exited(pid, code)) if pid == cmd => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == cmd => {
                u8::try_from(128 + signal as i32).unwrap_or(u8::MAX)
            }
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(Errno::ECHILD) => {
                channel.send(&Report::Gone);
                return;
            }
            // wait fails otherwise only for flags it does not know: then `run` never hears
            // that all is gone, and says so rather than claim it.
            Err(error) => {
                tell(&format!("cannot wait for CMD: {error}"));
                return;
            }
        };
        channel.send(&Report::Exited { code });
    }
}

/// The supervisor's end of the channel: reports go out from two threads, a line at a time.
#[derive(Clone)]
struct Channel(Arc<Mutex<UnixStream>>);

impl Channel {
    /// Takes the inherited descriptor `fd`, after checking that it is a socket, and makes it
    /// close-on-exec so that CMD does not inherit it.
    fn inherited(fd: RawFd) -> Result<Self, String> {
        let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap_or_default();
        if fd < 3 || !target.to_string_lossy().starts_with("socket:") {
            return Err(format!(
                "--channel {fd} is not an inherited socket: this command is started by fencelock run, not by hand"
            ));
        }
        // SAFETY: `fd` is open and a socket (checked above), not a standard stream, and
        // nothing else in this process knows it: `run` passed it to this process alone,
        // for this process to own.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        fcntl(&owned, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
            .map_err(|e| format!("cannot keep the channel from CMD: {e}"))?;
        Ok(Self(Arc::new(Mutex::new(UnixStream::from(owned)))))
    }

    /// Sends `report`. If `run` is gone, nobody reads it, and the reader sees the end.
    fn send(&self, report: &Report) {
        let Ok(mut line) = serde_json::to_string(report) else {
            return;
        };
        line.push('\n');
        let mut stream = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = stream.write_all(line.as_bytes());
    }

    /// `run`'s orders until the channel ends (a line that is not an order is passed over).
    fn orders(&self) -> Result<impl Iterator<Item = Order>, String> {
        let stream = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .try_clone()
            .map_err(|e| format!("cannot read the channel: {e}"))?;
        Ok(BufReader::new(stream)
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_str(&line).ok()))
    }
}
