//! `fencelock elect NAME [--value V] [--candidate C] [--ttl 30s] [--grace D] -- CMD [ARGS...]`:
//! campaigns for the leadership of the election NAME and runs CMD only while leader.
//!
//! A leadership is held exactly as `fencelock run` holds a lock (see `run`): CMD runs under
//! the same supervisor, the leadership is renewed every third of the TTL, and when it is lost
//! (renewals failed until too little of it is left, or the store says another candidate
//! leads) CMD and every process it started are stopped before the leadership could pass to
//! anyone else. CMD gets `FENCELOCK_ELECTION` (NAME), `FENCELOCK_TERM` (the term: the fencing
//! token to hand to whatever CMD writes to), `FENCELOCK_TOKEN` (the same) and
//! `FENCELOCK_EXPIRES_AT`.
//!
//! When CMD ends (the leadership is then resigned) or the leadership is lost, `elect`
//! campaigns again, as Curator's `LeaderSelector` requeues: a service that must always have a
//! leader keeps every candidate in line. It ends only on SIGINT, SIGTERM or SIGHUP (forwarded
//! to CMD's group while it runs; the leadership is resigned once CMD is gone): exit 128+N.
//! Exit 2 on bad input, 3 if the server or store cannot be reached.

use std::process::ExitCode;
use std::time::Duration;

use fencelock_client::{Kind, Resource, Terms};
use fencelock_core::election;

use super::common::{self, Failure};
use super::run::{self, Ending, Running, Schedule, Signals};
use super::waiting::while_waiting;

/// Flags of `fencelock elect`.
#[derive(Debug, clap::Args)]
#[command(
    mut_arg("grace", |grace| grace.help("After SIGTERM on a lost leadership, how long CMD gets before SIGKILL (default a tenth of the TTL, at most 10s; always cut so that SIGKILL comes before the leadership's end)")),
    mut_arg("command", |command| command.help("The command to run while leader, and its arguments (after `--`)")),
)]
pub struct Args {
    /// The election, e.g. scheduler:nightly.
    #[arg(value_name = "NAME", value_terminator = "--")]
    name: String,
    /// What the leader says while it leads, e.g. its address (shown by `fencelock leader`).
    #[arg(long)]
    value: Option<String>,
    /// Who campaigns (default HOSTNAME:PID).
    #[arg(long, env = "FENCELOCK_OWNER")]
    candidate: Option<String>,
    /// How long a leadership lasts unless renewed, e.g. 30s: how long the others wait for a
    /// leader that died without resigning.
    #[arg(long, env = "FENCELOCK_TTL", default_value = "30s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    #[command(flatten)]
    running: Running,
}

/// Runs `fencelock elect`.
pub async fn run(args: Args) -> ExitCode {
    common::finish("elect", elect(args).await)
}

async fn elect(args: Args) -> Result<u8, Failure> {
    let name = common::resource(&args.name)?;
    let lock = Resource::election(&name)
        .map_err(|e| Failure::bad_input(format!("invalid election name {:?}: {e}", args.name)))?;
    if args
        .value
        .as_ref()
        .is_some_and(|v| v.len() > election::MAX_VALUE_BYTES)
    {
        return Err(Failure::bad_input(format!(
            "--value is longer than {} bytes",
            election::MAX_VALUE_BYTES
        )));
    }
    if args.running.command.is_empty() {
        return Err(Failure::bad_input("no CMD given: put it after --"));
    }
    let candidate = common::owner_or_default(args.candidate.as_deref())?;
    let ttl = common::ttl(args.ttl)?;
    let terms = Terms::ttl(ttl).meta(Some(election::meta(args.value.as_deref(), ttl, None)));
    let (schedule, options) = Schedule::new("elect", &terms, args.running.grace)?;
    run::become_subreaper()?;
    let mut signals = Signals::listen()?;
    let client = args.running.target.connect().await?.with_guard_options(options);
    let names = std::slice::from_ref(&lock);
    loop {
        let campaign = async {
            let guard = client
                .acquire_with(&lock, &candidate, terms.clone(), fencelock_core::FOREVER)
                .await?;
            Ok(guard.into())
        };
        let campaign = while_waiting(&client, Kind::Lock, names, fencelock_core::FOREVER, campaign);
        match run::hold_while_running(campaign, &args.running.command, schedule, &mut signals).await? {
            Ending::Signalled(signal) => return Ok(Ending::Signalled(signal).code()),
            // CMD ended of a signal sent to `elect`: so does `elect`, with its status.
            Ending::Ran(code, Some(_)) => return Ok(code),
            Ending::Ran(code, None) => {
                eprintln!("fencelock elect: CMD ended (status {code}): campaigning again")
            }
            Ending::Lost => eprintln!("fencelock elect: the leadership is lost: campaigning again"),
            // A wait without end is never refused but for a deadlock, which a single lock
            // cannot close: campaign again.
            Ending::Busy => {}
        }
    }
}
