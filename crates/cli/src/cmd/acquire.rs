//! `fencelock acquire RESOURCE [--owner O] [--ttl 30s] [--wait 10s]`: acquires a lease and
//! prints it as JSON. Nothing renews it: renew it with `fencelock renew`, or use
//! `fencelock run` to hold a lock for the life of a command.
//!
//! Exit 0 if granted (or extended: the owner held it already), 1 if another owner holds
//! it (for the whole wait), 2 on bad input, 3 if the server or store is unreachable.

use std::process::ExitCode;
use std::time::Duration;

use fencelock_client::AcquireOutcome;
use fencelock_wire::outcome;

use super::common::{self, Failure, Target, Wanted, describe, exit};
use super::waiting::while_waiting;

/// Flags of `fencelock acquire`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    wanted: Wanted,
    /// If another owner holds the lock, wait up to this long for it (first come, first served).
    #[arg(long, env = "FENCELOCK_WAIT", default_value = "0s", value_parser = humantime::parse_duration)]
    wait: Duration,
    /// When held by another owner, print the answer as JSON on standard output too.
    #[arg(long, env = "FENCELOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    json: bool,
    #[command(flatten)]
    target: Target,
}

/// Runs `fencelock acquire`.
pub async fn run(args: Args) -> ExitCode {
    common::finish("acquire", acquire(args).await)
}

async fn acquire(args: Args) -> Result<u8, Failure> {
    let (resource, owner, ttl) = args.wanted.parse()?;
    let client = args.target.connect().await?;
    let acquiring = client.acquire_lease(&resource, &owner, ttl, args.wait);
    match while_waiting(&client, &resource, args.wait, acquiring).await? {
        AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease) => {
            common::print_lease(&lease);
            Ok(exit::OK)
        }
        AcquireOutcome::Held { holder, expires_in } => {
            if args.json {
                common::print_json(&outcome::encode_held(&holder, expires_in));
            } else {
                eprintln!("fencelock acquire: not acquired: {}", describe(&holder));
            }
            Ok(exit::REFUSED)
        }
    }
}
