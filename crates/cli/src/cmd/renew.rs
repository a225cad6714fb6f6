//! `fencelock renew RESOURCE --owner O [--ttl 30s] [--token N]`: sets the expiry of the
//! owner's live lease to now + TTL and prints the renewed lease as JSON.
//!
//! Exit 0 if renewed; 1 if not (no live lease — an expired lease is never renewed —,
//! another owner's lease, or, with `--token`, a lease with another token); 2 on bad input;
//! 3 if the server or store is unreachable.

use std::process::ExitCode;
use std::time::Duration;

use fencelock_wire::Judged;

use super::common::{self, Existing, Failure, Target, exit};
use super::release::refused;

/// Flags of `fencelock renew`.
#[derive(Debug, clap::Args)]
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
    let client = args.target.connect().await?;
    match client.renew(&resource, &owner, ttl, token).await?.judged() {
        Ok(lease) => {
            common::print_lease(lease);
            Ok(exit::OK)
        }
        Err(refusal) => Ok(refused("renew", "renewed", &resource, refusal, args.lease.json)),
    }
}
