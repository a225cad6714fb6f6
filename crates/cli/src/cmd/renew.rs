//! `fencelock renew RESOURCE --owner O [--ttl 30s] [--token N]`: sets the expiry of the
//! owner's live lease to now + TTL and prints the renewed lease as JSON.
//!
//! Exit 0 if renewed; 1 if not (no live lease — an expired lease is never renewed —,
//! another owner's lease, or, with `--token`, a lease with another token); 2 on bad input;
//! 3 if the server or store is unreachable.

use std::process::ExitCode;
use std::time::Duration;

use fencelock_client::{FencingToken, RenewOutcome};

use super::common::{self, Failure, Target, exit};
use super::release::refusal;

/// Flags of `fencelock renew`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The locked resource.
    resource: String,
    /// The owner of the lease.
    #[arg(long, env = "FENCELOCK_OWNER")]
    owner: String,
    /// The new TTL, from now.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// Renew only if this is the lease's fencing token (recommended: a renewal can then
    /// never extend a newer lease by mistake).
    #[arg(long)]
    token: Option<u64>,
    /// When not renewed, print why as JSON on standard output too.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    target: Target,
}

/// Runs `fencelock renew`.
pub async fn run(args: Args) -> ExitCode {
    common::finish("renew", renew(args).await)
}

async fn renew(args: Args) -> Result<u8, Failure> {
    let resource = common::resource(&args.resource)?;
    let owner = common::owner(&args.owner)?;
    let ttl = common::ttl(args.ttl)?;
    let client = args.target.connect().await?;
    let token = args.token.map(FencingToken);
    let reason = match client.renew(&resource, &owner, ttl, token).await? {
        RenewOutcome::Renewed(lease) => {
            common::print_lease(&lease);
            return Ok(exit::OK);
        }
        RenewOutcome::NotFound => "not_found",
        RenewOutcome::Forbidden => "forbidden",
        RenewOutcome::Conflict => "conflict",
    };
    refusal("renew", "renewed", &resource, reason, args.json);
    Ok(exit::REFUSED)
}
