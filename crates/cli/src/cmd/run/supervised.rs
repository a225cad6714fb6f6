//! CMD as `fencelock run` holds it: started by a supervisor (`fencelock supervise`, see
//! `supervisor`), heard of over the channel, and stopped together with every process it
//! started, in its process group or not.
//!
//! `run` is a child subreaper too (see `procs`): if the supervisor dies, or does not answer
//! an order in time, `run` kills it, and then everything it supervised, which the kernel
//! has handed to `run`.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::{Child, Command};
use tokio::time::{Instant, timeout, timeout_at};

use super::procs::{self, Killed};
use super::supervisor::{Order, Report};
use crate::cmd::common::{Failure, exit};

/// How long to wait for the processes to die after SIGKILL before giving up (a process stuck
/// in the kernel cannot be killed until it leaves it).
pub const AFTER_SIGKILL: Duration = Duration::from_secs(10);

/// How long the supervisor may take to carry out SIGKILL: one reading of /proc, a matter of
/// milliseconds. A supervisor that takes longer is taken to be hung, and `run` kills
/// everything itself rather than let the lease's last moments pass.
const KILL_ANSWERED_WITHIN: Duration = Duration::from_millis(100);

/// CMD, running under its supervisor.
#[derive(Debug)]
pub struct Supervised {
    supervisor: Child,
    channel: Channel,
    /// CMD's pid, which is also its process group's id.
    cmd: Pid,
    /// CMD's exit code, once it has ended.
    exited: Option<u8>,
    /// The answers to the orders of the stop under way, in order (the supervisor carries
    /// them out one by one): to how many processes each signal went.
    answers: Vec<usize>,
    /// No process CMD started is left.
    gone: bool,
    /// The supervisor stopped CMD itself: `run` fell silent past its last word on the lease.
    expired: bool,
}

/// How waiting for CMD ended.
#[derive(Debug, Clone, Copy)]
pub enum Ended {
    /// CMD exited with this code (128+N if signal N ended it).
    Exited(u8),
    /// The supervisor died first: see [`Supervised::take_over`].
    SupervisorDied,
}

/// How a stop ended.
#[derive(Debug, Clone, Copy)]
pub enum Stopped {
    /// Every process CMD started is gone, CMD included. `signalled`: how many were alive
    /// when the stop began; `killed`: whether it took SIGKILL.
    Gone { signalled: usize, killed: bool },
    /// Some are still alive [`AFTER_SIGKILL`] after SIGKILL: they were not stopped.
    StillAlive { signalled: usize },
}

/// Why the supervisor did not carry out an order.
#[derive(Debug, Clone, Copy)]
enum Unanswered {
    /// The channel ended: it died.
    Died,
    /// Not in time: it is hung (or stopped).
    Late,
}

impl Unanswered {
    fn why(self) -> &'static str {
        match self {
            Self::Died => "died",
            Self::Late => "did not answer in time",
        }
    }
}

impl Supervised {
    /// Starts `command` under a supervisor, with `env` added to its environment. Fails with
    /// exit 127 if CMD is not found, 126 if it cannot be started.
    pub async fn start(command: &[OsString], env: &[(String, String)]) -> Result<Self, Failure> {
        let cannot = |what: &str, error: &dyn std::fmt::Display| {
            Failure::new(exit::CANNOT_RUN, format!("cannot {what}: {error}"))
        };
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| cannot("open a channel to CMD's supervisor", &e))?;
        let theirs = OwnedFd::from(theirs);
        // The one descriptor a child inherits on purpose: `run` starts no other process, and
        // closes its copy as soon as the supervisor is started.
        fcntl(&theirs, FcntlArg::F_SETFD(FdFlag::empty()))
            .map_err(|e| cannot("pass the channel to CMD's supervisor", &e))?;
        let mut supervisor = Command::new(SELF);
        supervisor
            .arg0("fencelock")
            .args(["supervise", "--channel", &theirs.as_raw_fd().to_string(), "--"])
            .args(command)
            .envs(env.iter().map(|(name, value)| (name, value)))
            // Out of the terminal's foreground group: a Ctrl-C is for `run`, which passes it
            // on to CMD.
            .process_group(0);
        let supervisor = supervisor
            .spawn()
            .map_err(|e| cannot("start CMD's supervisor", &e))?;
        drop(theirs);
        let channel = Channel::new(ours).map_err(|e| cannot("listen to CMD's supervisor", &e))?;
        Self::started(supervisor, channel).await
    }

    /// Waits for the supervisor to say whether CMD started.
    async fn started(mut supervisor: Child, mut channel: Channel) -> Result<Self, Failure> {
        match channel.next().await {
            // Never 0 or less: signalled, those are this process's own group, or every process.
            Some(Report::Started { pid }) if pid > 0 => Ok(Self {
                supervisor,
                channel,
                cmd: Pid::from_raw(pid),
                exited: None,
                answers: Vec::new(),
                gone: false,
                expired: false,
            }),
            Some(Report::NotStarted { code, message }) => {
                // It exits at once, with nothing started.
                let _ = timeout(Duration::from_secs(1), supervisor.wait()).await;
                Err(Failure::new(code, message))
            }
            _ => {
                take_over(&mut supervisor, "ended before it could start CMD").await;
                Err(Failure::new(
                    exit::CANNOT_RUN,
                    "CMD's supervisor did not start it",
                ))
            }
        }
    }

    /// Passes `signal` on to CMD's process group, as a terminal does to its foreground group.
    pub fn forward(&self, signal: Signal) {
        if self.exited.is_some() {
            return;
        }
        match killpg(self.cmd, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(error) => tracing::warn!(%error, ?signal, "cannot signal the process group of CMD"),
        }
    }

    /// Tells the supervisor until when the lease surely lasts (`held_until`, by which every
    /// process CMD started must be gone) and when `run` would send SIGTERM (`term_at`): should
    /// `run` fall silent past `term_at`, the supervisor stops CMD itself (see `supervisor`).
    /// A supervisor that cannot be written to is gone, which [`ended`](Self::ended) tells.
    pub async fn tell_until(&mut self, term_at: Instant, kill_at: Instant) {
        let (now, mono) = (Instant::now(), super::supervisor::monotonic_ms());
        let on_clock = |at: Instant| {
            mono + u64::try_from(at.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX)
        };
        let order = Order::Until {
            term_at: on_clock(term_at),
            kill_at: on_clock(kill_at),
        };
        let _ = self.channel.send(order).await;
    }

    /// Whether the supervisor stopped CMD itself, `run` having fallen silent past its last
    /// word on the lease.
    pub fn expired(&self) -> bool {
        self.expired
    }

    /// Waits until CMD ends. Safe to cancel (in a `select!`): a report is read whole or not
    /// at all, and nothing else is done.
    pub async fn ended(&mut self) -> Ended {
        loop {
            if let Some(code) = self.exited {
                return Ended::Exited(code);
            }
            match self.channel.next().await {
                Some(report) => self.record(report),
                None => return Ended::SupervisorDied,
            }
        }
    }

    /// Stops every process CMD started, CMD included (if it still runs): SIGTERM now,
    /// SIGKILL at `kill_at` to whatever is left, and returns once none is alive — or, if
    /// some are still alive [`AFTER_SIGKILL`] after SIGKILL, says so.
    pub async fn stop(&mut self, kill_at: Instant) -> Stopped {
        match self.try_stop(kill_at).await {
            Ok(stopped) => stopped,
            Err(unanswered) => self.take_over(unanswered.why()).await,
        }
    }

    async fn try_stop(&mut self, kill_at: Instant) -> Result<Stopped, Unanswered> {
        self.answers.clear();
        self.channel.send(Order::Term).await?;
        if self
            .wait_for(kill_at, |s| s.gone && !s.answers.is_empty())
            .await?
        {
            return Ok(Stopped::Gone {
                signalled: self.first_answer(),
                killed: false,
            });
        }
        // SIGKILL is due (the answer to SIGTERM may still be on its way, just before this
        // one's).
        self.channel.send(Order::Kill).await?;
        let answered_by = Instant::now() + KILL_ANSWERED_WITHIN;
        if !self.wait_for(answered_by, |s| s.answers.len() >= 2).await? {
            return Err(Unanswered::Late);
        }
        let signalled = self.first_answer();
        Ok(
            match self.wait_for(Instant::now() + AFTER_SIGKILL, |s| s.gone).await? {
                true => Stopped::Gone {
                    signalled,
                    killed: true,
                },
                false => Stopped::StillAlive { signalled },
            },
        )
    }

    /// How many processes were alive when the stop under way began (once SIGTERM's answer
    /// has come).
    fn first_answer(&self) -> usize {
        self.answers.first().copied().unwrap_or_default()
    }

    /// Reads reports until `done` (true) or `deadline` (false).
    async fn wait_for(
        &mut self,
        deadline: Instant,
        done: impl Fn(&Self) -> bool,
    ) -> Result<bool, Unanswered> {
        loop {
            if done(self) {
                return Ok(true);
            }
            match timeout_at(deadline, self.channel.next()).await {
                Ok(Some(report)) => self.record(report),
                Ok(None) => return Err(Unanswered::Died),
                Err(_) => return Ok(false),
            }
        }
    }

    fn record(&mut self, report: Report) {
        match report {
            Report::Exited { code } => self.exited = Some(code),
            Report::Signalled { count } => self.answers.push(count),
            Report::Gone => self.gone = true,
            Report::Expired => self.expired = true,
            Report::Started { .. } | Report::NotStarted { .. } => {
                tracing::warn!(?report, "CMD's supervisor said it started CMD twice")
            }
        }
    }

    /// The supervisor is dead (`why`: "died") or hung: kill it, then everything it
    /// supervised, which the kernel handed to `run`.
    pub async fn take_over(&mut self, why: &str) -> Stopped {
        let stopped = take_over(&mut self.supervisor, why).await;
        self.gone = matches!(stopped, Stopped::Gone { .. });
        stopped
    }

    /// Lets go of CMD: the supervisor kills whatever is still alive (nothing, after a stop
    /// that ended with [`Stopped::Gone`]), and exits. It is waited for only then: processes
    /// stuck in the kernel are its to kill, after `run` has gone.
    pub async fn close(self) {
        let Self {
            mut supervisor,
            channel,
            gone,
            ..
        } = self;
        drop(channel);
        if gone {
            let _ = timeout(Duration::from_secs(1), supervisor.wait()).await;
        }
    }
}

/// This very program, even if its file was replaced or removed since it started.
const SELF: &str = "/proc/self/exe";

/// Kills `supervisor`, then every process it supervised (this process's descendants now,
/// as a subreaper's), and says so.
async fn take_over(supervisor: &mut Child, why: &str) -> Stopped {
    eprintln!("fencelock: CMD's supervisor {why}: killing every process CMD started");
    let _ = supervisor.start_kill();
    // Reaped here, so that the reaping below does not take it from tokio (and not waited
    // for past the time SIGKILL is given to work, should it be stuck in the kernel).
    let _ = timeout(AFTER_SIGKILL, supervisor.wait()).await;
    let deadline = std::time::Instant::now() + AFTER_SIGKILL;
    let killed = tokio::task::spawn_blocking(move || procs::kill_every_descendant(Some(deadline))).await;
    match killed {
        Ok(Killed {
            count,
            all_gone: true,
        }) => Stopped::Gone {
            signalled: count,
            killed: true,
        },
        Ok(Killed { count, .. }) => Stopped::StillAlive { signalled: count },
        Err(_) => Stopped::StillAlive { signalled: 0 },
    }
}

/// `run`'s end of the channel to the supervisor.
#[derive(Debug)]
struct Channel {
    reports: Lines<BufReader<OwnedReadHalf>>,
    orders: OwnedWriteHalf,
}

impl Channel {
    fn new(ours: std::os::unix::net::UnixStream) -> std::io::Result<Self> {
        ours.set_nonblocking(true)?;
        let (reports, orders) = tokio::net::UnixStream::from_std(ours)?.into_split();
        Ok(Self {
            reports: BufReader::new(reports).lines(),
            orders,
        })
    }

    /// The next report, or `None` once the channel has ended (the supervisor is gone).
    /// Safe to cancel: `next_line` is.
    async fn next(&mut self) -> Option<Report> {
        loop {
            let line = self.reports.next_line().await.ok()??;
            match serde_json::from_str(&line) {
                Ok(report) => return Some(report),
                Err(error) => {
                    tracing::warn!(%error, line, "a report of CMD's supervisor that cannot be read")
                }
            }
        }
    }

    /// Sends `order`; a supervisor that cannot be written to is gone.
    async fn send(&mut self, order: Order) -> Result<(), Unanswered> {
        let mut line = serde_json::to_string(&order).map_err(|_| Unanswered::Died)?;
        line.push('\n');
        self.orders
            .write_all(line.as_bytes())
            .await
            .map_err(|_| Unanswered::Died)
    }
}
