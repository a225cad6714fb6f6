//! `fencelock run RESOURCE [--ttl 30s] [--max-hold 1h] [--wait 1m | --no-wait] [--limit N |
//! --mode M] -- CMD [ARGS...]`, or `fencelock run --lock A --lock B … -- CMD`: runs CMD while
//! holding a lease on RESOURCE — a lock's, or with `--limit N` one permit of the semaphore
//! RESOURCE of N permits, or with `--mode read|write` a hold of the read-write lock RESOURCE
//! — or on every lock named with `--lock` (all or none, held together), and makes sure CMD
//! does not outlive any of them. A permit and a hold are leases with tokens of their own,
//! held exactly as a lock's lease is.
//!
//! 1. Acquire (waiting as long as `--wait`, forever by default, for every lock at once; a
//!    spinner on a terminal says who holds them). Busy (for several locks: any of them; for
//!    a semaphore, also: permits of another limit are live; or the wait would deadlock) →
//!    exit 75, CMD does not run. A lease lost before it could be confirmed (the store
//!    refused the renewal after a long wait, or too little of it was left) → exit 124, CMD
//!    does not run.
//! 2. Start CMD under a supervisor (see "What CMD starts" below), in a process group of
//!    its own, with `FENCELOCK_TOKEN`, `FENCELOCK_RESOURCE` (the first lock's, or the only
//!    one's), `FENCELOCK_KIND` (`lock`, `semaphore` or `rwlock`), `FENCELOCK_EXPIRES_AT`
//!    (the first expiry, RFC 3339), `FENCELOCK_COUNT` (how many leases) and, for each lease
//!    `I` from 1 in the order named, `FENCELOCK_RESOURCE_I` and `FENCELOCK_TOKEN_I`.
//! 3. While CMD runs: renew every third of the TTL (all the leases at once); forward
//!    SIGINT, SIGTERM and SIGHUP to CMD's whole group.
//! 4. When CMD ends: stop every process it left running, in its group or not (it would
//!    otherwise go on working without the lock), release, and exit with CMD's status
//!    (128+N if signal N ended it).
//! 5. If a lease is lost (the store says it is gone or taken, or renewals failed until too
//!    little time is left), or the cap of `--max-hold` comes near: SIGTERM to every process
//!    CMD started, SIGKILL after the grace period, and exit 124 once all of them are gone.
//!
//! # The stop schedule
//!
//! With a TTL `T`, renewals go out every `T/3`; the guard declares the lease lost when
//! renewals have failed until `grace + allowance` is left before the expiry it last
//! confirmed (counted from the renewal's send, on the monotonic clock). Then SIGTERM goes
//! out, SIGKILL follows `grace` later (default `T/10`, at most 10 s) — or earlier, so that
//! it is sent at least `allowance` (`T/20 + 50 ms`) before that expiry — and the
//! allowance is the time for SIGKILL to take effect. So every process CMD started is gone
//! before the lease could pass to anyone else. If the store says the lease is already gone (deleted by
//! force), the same schedule runs at once: there is no better moment. A cap of `--max-hold`
//! is an end no renewal moves: the guard counts it as the lease's expiry, so the same
//! schedule stops CMD before it.
//!
//! # What CMD starts
//!
//! A process group holds only what stays in it: a daemon (`setsid`) or a job-control
//! shell's background job (`set -m`) leaves it, and a double fork hands a process to init.
//! So `run` does not start CMD itself but a supervisor, `fencelock supervise` (see
//! `supervisor`), which starts CMD and is a *child subreaper*: whatever CMD starts, and
//! whatever those start, stays below it, re-parented to it when its parent dies. The
//! processes CMD started are then exactly the supervisor's descendants, found in /proc by
//! their parents (`procs`), and all of them are gone exactly when the supervisor has no
//! child left — which is what `run` waits for before it says "stopped" or releases.
//!
//! The supervisor holds one end of a socket whose other end only `run` holds. However `run`
//! ends — SIGKILL, the OOM killer, a crash — the kernel closes its end, and the supervisor
//! kills every process CMD started at once: milliseconds, while the lease passes on at the
//! earliest at the expiry `run` last confirmed (renewals end with `run`). If the supervisor
//! dies first, `run`, a subreaper too, is handed everything it supervised, kills it, and
//! exits 126.
//!
//! # Limits
//!
//! - CMD's group is not the terminal's foreground group, so a CMD that reads from the
//!   terminal is stopped by SIGTTIN: `run` is for scripts and cron jobs.
//! - What is not a descendant of CMD escapes: work CMD asks another process to do — a
//!   service manager (`systemd-run`, `service … start`), `at`, a container engine's daemon,
//!   a remote host over ssh or any network call. So does whatever survives a moment when
//!   `run` and the supervisor are both killed (say `kill -9` of both at once). There the
//!   fencing token (`FENCELOCK_TOKEN`, checked by the protected resource) is the only guard.
//! - Child subreapers are Linux's: elsewhere `run` refuses to start CMD.

mod procs;
mod supervised;
pub mod supervisor;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use fencelock_client::{
    AcquireError, GuardOptions, Held, Kind, LostReason, MultiGuard, ReleaseOutcome, Resource, Resources,
    Terms,
};
use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, timeout};

use self::supervised::{AFTER_SIGKILL, Ended, Stopped, Supervised};
use super::common::{self, Claimed, Failure, Target, Wanted, describe, exit};
use super::waiting::while_waiting;

/// Flags of `fencelock run`.
#[derive(Debug, clap::Args)]
#[command(
    mut_arg("grace", |grace| grace.help("After SIGTERM on a lost lease, how long CMD gets before SIGKILL (default a tenth of the TTL, at most 10s; always cut so that SIGKILL comes before the lease's expiry)")),
    mut_arg("command", |command| command.help("The command to run, and its arguments (after `--`). Everything from CMD on is CMD's, hyphens included; before it, an unknown flag (a typo such as `--tll`) is bad input, not a program to run")),
)]
pub struct Args {
    /// The lock to hold, e.g. report:daily (with --limit, the semaphore's name; with --mode,
    /// the read-write lock's). To hold several locks, name each with --lock instead.
    // `--` also ends this optional argument, so that `run --lock a -- CMD` gives CMD whole.
    #[arg(value_name = "RESOURCE", value_terminator = "--")]
    resource: Option<String>,
    /// A lock to hold; give it several times to hold several locks at once, all or none
    /// (waited for together, so two runs naming the same locks in any order never
    /// deadlock). In place of RESOURCE; put CMD after `--`.
    #[arg(long = "lock", value_name = "NAME", conflicts_with_all = ["resource", "limit", "mode"])]
    locks: Vec<String>,
    #[command(flatten)]
    wanted: Wanted,
    #[command(flatten)]
    claimed: Claimed,
    /// Wait at most this long for a busy lock (default: as long as it takes).
    #[arg(long, env = "FENCELOCK_WAIT", value_parser = humantime::parse_duration, conflicts_with = "no_wait")]
    wait: Option<Duration>,
    /// Do not wait for a busy lock: exit 75 at once (for cron jobs that run on many hosts).
    #[arg(long, env = "FENCELOCK_NO_WAIT", value_parser = clap::builder::BoolishValueParser::new())]
    no_wait: bool,
    #[command(flatten)]
    running: Running,
}

/// The flags of a command that runs CMD while it holds a lease (`run`, `elect`): how long CMD
/// gets after SIGTERM, where requests go, and CMD — last, so that it takes every argument
/// from CMD on. Each command writes the help of `--grace` and CMD itself (`mut_arg`), for
/// what it holds: a lease, a leadership.
#[derive(Debug, clap::Args)]
pub(super) struct Running {
    #[arg(long, env = "FENCELOCK_GRACE", value_parser = humantime::parse_duration)]
    pub(super) grace: Option<Duration>,
    #[command(flatten)]
    pub(super) target: Target,
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub(super) command: Vec<OsString>,
}

impl Args {
    /// The names to hold: RESOURCE, or every --lock, checked.
    fn names(&self) -> Result<Vec<Resource>, Failure> {
        match (&self.resource, &self.locks[..]) {
            (Some(name), _) => Ok(vec![common::resource(name)?]),
            (None, []) => Err(Failure::bad_input(
                "name what to hold: fencelock run RESOURCE -- CMD, or --lock NAME (several times for several locks) -- CMD",
            )),
            (None, locks) => locks.iter().map(|name| common::resource(name)).collect(),
        }
    }
}

/// Runs `fencelock run`.
pub async fn run(args: Args) -> ExitCode {
    common::finish("run", run_command(args).await)
}

/// The timing of one run, from the TTL (see the module's "The stop schedule").
#[derive(Debug, Clone, Copy)]
pub(super) struct Schedule {
    /// The command that runs CMD (`run`, `elect`), for what it says.
    command: &'static str,
    /// How often CMD's supervisor is told until when the lease surely lasts.
    tell_every: Duration,
    grace: Duration,
    allowance: Duration,
}

impl Schedule {
    pub(super) fn new(
        command: &'static str,
        terms: &Terms,
        grace: Option<Duration>,
    ) -> Result<(Self, GuardOptions), Failure> {
        let lasts = terms.ttl.as_duration();
        let renew_every = lasts / 3;
        let schedule = Self {
            command,
            tell_every: renew_every / 2,
            grace: grace.unwrap_or((lasts / 10).min(Duration::from_secs(10))),
            allowance: lasts / 20 + Duration::from_millis(50),
        };
        let margin = schedule.grace + schedule.allowance;
        let stops = || {
            format!(
                "--grace {} plus {} to see it gone",
                humantime::format_duration(schedule.grace),
                humantime::format_duration(schedule.allowance),
            )
        };
        if renew_every + margin >= lasts {
            return Err(Failure::bad_input(format!(
                "--ttl {} leaves no time to stop CMD: {} must stay below two thirds of the TTL",
                humantime::format_duration(lasts),
                stops(),
            )));
        }
        if let Some(cap) = terms.max_hold.filter(|cap| cap.as_duration() <= margin) {
            return Err(Failure::bad_input(format!(
                "--max-hold {} leaves no time to run CMD: it is stopped {} before the cap",
                humantime::format_duration(cap.as_duration()),
                stops(),
            )));
        }
        let options = GuardOptions {
            renew_every: Some(renew_every),
            safety_margin: Some(margin),
            // A hung renewal must leave time for another try.
            request_timeout: (lasts / 6).clamp(Duration::from_millis(100), Duration::from_secs(10)),
        };
        Ok((schedule, options))
    }

    /// When CMD's supervisor stops CMD should `run` fall silent with the lease surely held
    /// until `held_until`: SIGTERM when `run` would declare it lost, SIGKILL the allowance
    /// before it.
    fn if_silent(self, held_until: Instant) -> (Instant, Instant) {
        let before = |gap| held_until.checked_sub(gap).unwrap_or(held_until);
        (before(self.grace + self.allowance), before(self.allowance))
    }

    /// When to send SIGKILL after a SIGTERM sent now: after the grace period, but at least
    /// the allowance before `held_until`.
    fn kill_at(self, held_until: Instant) -> Instant {
        let latest = held_until.checked_sub(self.allowance).unwrap_or(held_until);
        (Instant::now() + self.grace).min(latest)
    }
}

/// SIGINT, SIGTERM and SIGHUP, listened to from before the wait for the lock.
pub(super) struct Signals([(Signal, tokio::signal::unix::Signal); 3]);

impl Signals {
    pub(super) fn listen() -> Result<Self, Failure> {
        let listen = |signal_: Signal, kind: SignalKind| {
            signal(kind)
                .map(|listener| (signal_, listener))
                .map_err(|e| Failure::new(exit::CANNOT_RUN, format!("cannot listen for {signal_}: {e}")))
        };
        Ok(Self([
            listen(Signal::SIGINT, SignalKind::interrupt())?,
            listen(Signal::SIGTERM, SignalKind::terminate())?,
            listen(Signal::SIGHUP, SignalKind::hangup())?,
        ]))
    }

    /// The next signal received.
    async fn recv(&mut self) -> Signal {
        let [(int, a), (term, b), (hup, c)] = &mut self.0;
        tokio::select! {
            _ = a.recv() => *int,
            _ = b.recv() => *term,
            _ = c.recv() => *hup,
        }
    }
}

async fn run_command(args: Args) -> Result<u8, Failure> {
    let names = args.names()?;
    let (owner, terms) = args.wanted.parse_with(common::run_meta(&args.running.command))?;
    if args.running.command.is_empty() {
        return Err(Failure::bad_input("no CMD given: put it after --"));
    }
    let (schedule, options) = Schedule::new("run", &terms, args.running.grace)?;
    // Before anything is acquired: without it, what CMD starts could not be kept in reach.
    become_subreaper()?;
    let mut signals = Signals::listen()?;
    let client = args.running.target.connect().await?.with_guard_options(options);
    let wait = match (args.no_wait, args.wait) {
        (true, _) => Duration::ZERO,
        (false, wait) => wait.unwrap_or(fencelock_core::FOREVER),
    };
    let (command, names) = (&args.running.command, &names[..]);
    let ending = match (args.claimed.claim(), names) {
        (None, [one]) => {
            let acquiring = async { Ok(client.acquire_with(one, &owner, terms, wait).await?.into()) };
            let acquiring = while_waiting(&client, Kind::Lock, names, wait, acquiring);
            hold_while_running(acquiring, command, schedule, &mut signals).await
        }
        (None, _) => {
            let all =
                Resources::new(names.to_vec()).map_err(|e| Failure::bad_input(format!("--lock: {e}")))?;
            let acquiring = client.acquire_all_with(&all, &owner, terms, wait);
            let acquiring = while_waiting(&client, Kind::Lock, names, wait, acquiring);
            hold_while_running(acquiring, command, schedule, &mut signals).await
        }
        (Some(claim), _) => {
            let meta = terms.meta.as_ref();
            let acquiring = client.acquire_claim(&names[0], &owner, claim, terms.ttl, meta, wait);
            let acquiring = async { Ok(acquiring.await?.into()) };
            let acquiring = while_waiting(&client, claim.kind().into(), names, wait, acquiring);
            hold_while_running(acquiring, command, schedule, &mut signals).await
        }
    };
    Ok(ending?.code())
}

/// Makes this process a child subreaper, so that whatever CMD starts stays in reach (see the
/// module's "What CMD starts").
pub(super) fn become_subreaper() -> Result<(), Failure> {
    procs::become_subreaper().map_err(|e| {
        Failure::new(
            exit::CANNOT_RUN,
            format!("cannot become a child subreaper, to keep what CMD starts in reach: {e}"),
        )
    })
}

/// How holding a lease while CMD ran ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// The lease was not acquired: busy, or refused (exit 75).
    Busy,
    /// A signal came while waiting for the lease (exit 128 + N).
    Signalled(Signal),
    /// CMD ended with this status, and the lease was released; with the last signal `run`
    /// forwarded to CMD's group while it ran, if any.
    Ran(u8, Option<Signal>),
    /// The lease was lost (or the cap came near), before CMD started or while it ran, and
    /// every process CMD started was stopped (exit 124).
    Lost,
}

impl Ending {
    /// The exit status of `run` for it.
    pub(super) fn code(self) -> u8 {
        match self {
            Self::Busy => exit::BUSY,
            Self::Signalled(signal) => 128 + signal as u8,
            Self::Ran(code, _) => code,
            Self::Lost => exit::LOST,
        }
    }
}

/// Steps 1 to 5 of the module's list, for leases of any kind: `acquiring` gives the guard
/// (over one lease, or several locks).
pub(super) async fn hold_while_running<T: Held>(
    acquiring: impl Future<Output = Result<MultiGuard<T>, AcquireError>>,
    command: &[OsString],
    schedule: Schedule,
    signals: &mut Signals,
) -> Result<Ending, Failure> {
    let guard = tokio::select! {
        acquired = acquiring => match acquired {
            Ok(guard) => guard,
            Err(AcquireError::Busy { holder, .. }) => {
                eprintln!("fencelock {}: not running: {}", schedule.command, describe(&holder));
                return Ok(Ending::Busy);
            }
            Err(
                busy @ (AcquireError::HoldBusy { .. }
                | AcquireError::LimitMismatch { .. }
                | AcquireError::Delayed { .. }
                | AcquireError::Blocked { .. }
                | AcquireError::Deadlock { .. }),
            ) => {
                eprintln!("fencelock {}: not running: {busy}", schedule.command);
                return Ok(Ending::Busy);
            }
            Err(AcquireError::Store(error)) => return Err(error.into()),
            Err(lost @ AcquireError::LostBeforeConfirmed { .. }) => {
                eprintln!("fencelock {}: not running: {lost}", schedule.command);
                return Ok(Ending::Lost);
            }
            Err(other) => return Err(Failure::bad_input(other.to_string())),
        },
        received = signals.recv() => return Ok(Ending::Signalled(received)),
    };
    let mut cmd = match start(command, &guard, schedule).await {
        Ok(Some(started)) => started,
        Ok(None) => {
            give_back(guard).await;
            return Ok(Ending::Lost);
        }
        Err(failure) => {
            give_back(guard).await;
            return Err(failure);
        }
    };
    let lost = guard.lost();
    let mut lost = std::pin::pin!(lost);
    let mut forwarded = None;
    let mut tell = tokio::time::interval(schedule.tell_every);
    let ended = loop {
        tokio::select! {
            // CMD's end first: after a pause, the supervisor's reports of what it did while
            // `run` was silent come before the guard's word that the lease is lost — if they
            // were read by then; if not, `stop_on_loss` reads them, and tells the same.
            biased;
            ended = cmd.ended() => break ended,
            _ = tell.tick() => {
                let (term_at, kill_at) = schedule.if_silent(Instant::from_std(guard.held_until()));
                cmd.tell_until(term_at, kill_at).await;
            }
            received = signals.recv() => {
                cmd.forward(received);
                forwarded = Some(received);
            }
            reason = &mut lost => {
                stop_on_loss(guard, &mut cmd, schedule, &reason).await;
                cmd.close().await;
                return Ok(Ending::Lost);
            }
        }
    };
    match ended {
        Ended::Exited(code) if cmd.expired() => {
            stopped_by_supervisor(&schedule, &guard, &format!(" (status {code})"));
            cmd.stop(schedule.kill_at(Instant::from_std(guard.held_until())))
                .await;
            give_back(guard).await;
            cmd.close().await;
            Ok(Ending::Lost)
        }
        Ended::Exited(code) => {
            finish_run(guard, &mut cmd, schedule).await;
            cmd.close().await;
            Ok(Ending::Ran(code, forwarded))
        }
        Ended::SupervisorDied => {
            let stopped = cmd.take_over("died").await;
            // Released only once nothing CMD started runs (or after trying that long).
            give_back(guard).await;
            cmd.close().await;
            Err(Failure::new(
                exit::CANNOT_RUN,
                match stopped {
                    Stopped::Gone { .. } => {
                        "CMD was killed, with every process it started, when its supervisor died".to_owned()
                    }
                    Stopped::StillAlive { .. } => still_alive("CMD's supervisor died"),
                },
            ))
        }
    }
}

/// Starts CMD under its supervisor, with the leases in its environment. `None` if the lease
/// was lost before CMD could start.
async fn start<T: Held>(
    command: &[OsString],
    guard: &MultiGuard<T>,
    schedule: Schedule,
) -> Result<Option<Supervised>, Failure> {
    if let Some(reason) = guard.state().lost_reason() {
        eprintln!(
            "fencelock {}: {} was lost before CMD could start ({reason})",
            schedule.command,
            what_is_held(guard)
        );
        return Ok(None);
    }
    let leases = guard.leases();
    if let [lease] = &leases[..]
        && let Some(election) = lease.resource.election_name()
    {
        let env = [
            ("FENCELOCK_KIND", "election"),
            ("FENCELOCK_ELECTION", election),
            ("FENCELOCK_TERM", &lease.token.to_string()),
            ("FENCELOCK_TOKEN", &lease.token.to_string()),
            ("FENCELOCK_EXPIRES_AT", &lease.expires_at.to_rfc3339()),
        ];
        let env: Vec<_> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        return Supervised::start(command, &env).await.map(Some);
    }
    let mut env = vec![
        ("FENCELOCK_KIND".to_owned(), guard.kind().as_str().to_owned()),
        ("FENCELOCK_EXPIRES_AT".to_owned(), guard.expires_at().to_rfc3339()),
        ("FENCELOCK_COUNT".to_owned(), leases.len().to_string()),
    ];
    if let Some(first) = leases.first() {
        env.push(("FENCELOCK_TOKEN".to_owned(), first.token.to_string()));
        env.push((
            "FENCELOCK_RESOURCE".to_owned(),
            first.resource.as_str().to_owned(),
        ));
    }
    for (i, lease) in (1..).zip(&leases) {
        env.push((
            format!("FENCELOCK_RESOURCE_{i}"),
            lease.resource.as_str().to_owned(),
        ));
        env.push((format!("FENCELOCK_TOKEN_{i}"), lease.token.to_string()));
    }
    Supervised::start(command, &env).await.map(Some)
}

/// Says that the supervisor stopped CMD (with `status`, if known) before the end of what
/// `guard` holds, `run` having been silent past its last word on the lease.
fn stopped_by_supervisor<T: Held>(schedule: &Schedule, guard: &MultiGuard<T>, status: &str) {
    eprintln!(
        "fencelock {}: {} was not renewed in time (this process was paused or starved): CMD's supervisor stopped CMD{status} before its end",
        schedule.command,
        what_is_held(guard)
    );
}

/// What the guard holds, in words: `the lease on a`, `the leases on a, b`, `the
/// leadership of e`.
fn what_is_held<T: Held>(guard: &MultiGuard<T>) -> String {
    let names: Vec<&Resource> = guard.resources().collect();
    match &names[..] {
        [one] => held_name(one),
        all => {
            let all: Vec<&str> = all.iter().map(|name| name.as_str()).collect();
            format!("the leases on {}", all.join(", "))
        }
    }
}

/// A lease is lost, or the cap comes near: stop every process CMD started before the
/// lease's expiry (see the module's "The stop schedule").
async fn stop_on_loss<T: Held>(
    guard: MultiGuard<T>,
    cmd: &mut Supervised,
    schedule: Schedule,
    reason: &LostReason,
) {
    let held_until = Instant::from_std(guard.held_until());
    match (reason, guard.lost_on()) {
        (LostReason::CapReached, _) => eprintln!(
            "fencelock {}: {} reached its cap on holding (--max-hold): stopping CMD",
            schedule.command,
            what_is_held(&guard)
        ),
        (_, Some(lost_on)) => {
            eprintln!(
                "fencelock {}: {} is lost ({reason}): stopping CMD",
                schedule.command,
                held_name(&lost_on)
            )
        }
        (_, None) => eprintln!(
            "fencelock {}: {} is lost ({reason}): stopping CMD",
            schedule.command,
            what_is_held(&guard)
        ),
    }
    let stopped = cmd.stop(schedule.kill_at(held_until)).await;
    let now = Instant::now();
    match stopped {
        // Stopped while `run` was paused, before the lease's end, and heard of only now: the
        // guard's word of the loss can come first when `run` runs again.
        Stopped::Gone { .. } if cmd.expired() => stopped_by_supervisor(&schedule, &guard, ""),
        Stopped::Gone { killed, .. } if now < held_until => eprintln!(
            "fencelock {}: CMD and every process it started stopped ({}) {} ms before the lease's last confirmed expiry",
            schedule.command,
            how(killed),
            (held_until - now).as_millis()
        ),
        Stopped::Gone { .. } => tracing::error!(
            late_ms = (now - held_until).as_millis(),
            "CMD was stopped after the lease's last confirmed expiry"
        ),
        Stopped::StillAlive { .. } => eprintln!(
            "fencelock {}: {}",
            schedule.command,
            still_alive("the lease is lost")
        ),
    }
    // What may still be ours is given back (each lease with its token, so a newer lease is
    // never touched): all of it if only renewals failed or the cap came, the other locks if
    // the store said one is lost.
    give_back(guard).await;
}

/// Releases the leases before `run` exits without waiting for CMD to end: a release left to
/// the guard's drop would not get out before the process ends. Each carries its token, so
/// it never frees a newer lease (a lease lost only for want of a renewal may still be
/// ours).
async fn give_back<T: Held>(guard: MultiGuard<T>) {
    let _ = timeout(Duration::from_secs(1), guard.release()).await;
}

/// CMD ended: stop whatever it left running, in its group or not, then release.
async fn finish_run<T: Held>(guard: MultiGuard<T>, cmd: &mut Supervised, schedule: Schedule) {
    let kill_at = schedule.kill_at(Instant::from_std(guard.held_until()));
    match cmd.stop(kill_at).await {
        Stopped::Gone { signalled: 0, .. } => {}
        Stopped::Gone { signalled, killed } => eprintln!(
            "fencelock {}: CMD ended but left {signalled} processes running: stopped them ({}) before releasing",
            schedule.command,
            how(killed)
        ),
        Stopped::StillAlive { signalled } => eprintln!(
            "fencelock {}: {}",
            schedule.command,
            still_alive(&format!("CMD ended but left {signalled} processes running"))
        ),
    }
    let names: Vec<Resource> = guard.resources().cloned().collect();
    match guard.release().await {
        Ok(outcomes) => {
            for (resource, outcome) in names.iter().zip(outcomes) {
                if !matches!(outcome, ReleaseOutcome::Released(_)) {
                    tracing::warn!(%resource, ?outcome, "the lease was no longer held when CMD ended");
                }
            }
        }
        Err(error) => tracing::warn!(%error, "releasing failed; the lease ends at its expiry"),
    }
}

/// One lease held, in words: `the lease on a`, or `the leadership of e` for the lock that
/// keeps the election `e`.
fn held_name(resource: &Resource) -> String {
    match resource.election_name() {
        Some(election) => format!("the leadership of {election}"),
        None => format!("the lease on {resource}"),
    }
}

/// The signal a stop took.
fn how(killed: bool) -> &'static str {
    if killed { "SIGKILL" } else { "SIGTERM" }
}

/// What `run` says when processes CMD started outlived SIGKILL: never that they stopped.
fn still_alive(what: &str) -> String {
    format!(
        "{what}, and processes CMD started are still alive {} after SIGKILL (stuck in the kernel?): they were NOT stopped",
        humantime::format_duration(AFTER_SIGKILL)
    )
}
