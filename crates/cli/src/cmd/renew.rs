//! `fencelock renew RESOURCE --owner O [--ttl 30s] [--token N] [--kind lock|semaphore|rwlock]`:
//! sets the expiry of the owner's live lease (with `--kind`, its permit or hold) to now + TTL
//! and prints it renewed, as JSON.
//!
//! Exit 0 if renewed; 1 if not (no live lease — an expired lease is never renewed —,
//! another owner's lease, or, with `--token`, a lease with another token); 2 on bad input;
//! 3 if the server or store is unreachable.

use std::process::ExitCode;
use std::time::Duration;

use fencelock_wire::Judged;

use super::common::{self, Existing, Failure, Target, exit};
use super::release::Refused;

/// Flags of `fencelock renew`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("whose").required(true).args(["owner"])))]
pub struct Args {
    #[command(flatten)]
    lease: Existing,
    /// The new TTL, from now.
    #[arg(long, env = "FENCELOCK_TTL", default_value = "30s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    #[command(flatten)]
    target: Target,
}

/// Runs `fencelock renew`.
pub async fn run(args: Args) -> ExitCode {
    common::finish("renew", renew(args).await)
}

async fn renew(args: Args) -> Result<u8, Failure> {
    let (resource, owner, token) = args.lease.parse()?;
    let ttl = common::ttl(args.ttl)?;
    let kind = args.lease.kind.hold_kind();
    let client = args.target.connect().await?;
    let refused = Refused {
        command: "renew",
        done: "renewed",
        kind,
        name: &resource,
        owner: &owner,
    };
    let renewed = match kind {
        None => client
            .renew(&resource, &owner, ttl, token)
            .await?
            .judged()
            .map(common::print_lease),
        Some(kind) => client
            .renew_hold(kind, &resource, &owner, ttl, token, None)
            .await?
            .judged()
            .map(common::print_hold),
    };
    match renewed {
        Ok(()) => Ok(exit::OK),
        Err(refusal) => Ok(refused.tell(refusal, args.lease.json)),
    }
}
