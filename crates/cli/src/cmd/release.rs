//! `fencelock release RESOURCE --owner O [--token N]`: ends the owner's live lease.
//!
//! Exit 0 if released; 1 if not (no live lease, another owner's lease, or, with `--token`,
//! a lease with another token — a late release never frees a newer lease); 2 on bad input;
//! 3 if the server or store is unreachable.

use std::process::ExitCode;

use fencelock_client::{ReleaseOutcome, Resource};
use serde_json::json;

use super::common::{self, Existing, Failure, Target, exit};

/// Flags of `fencelock release`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    lease: Existing,
    #[command(flatten)]
    target: Target,
}

/// Runs `fencelock release`.
pub async fn run(args: Args) -> ExitCode {
    common::finish("release", release(args).await)
}

async fn release(args: Args) -> Result<u8, Failure> {
    let (resource, owner, token) = args.lease.parse()?;
    let client = args.target.connect().await?;
    let reason = match client.release(&resource, &owner, token).await? {
        ReleaseOutcome::Released(_) => {
            if args.lease.json {
                common::print_json(&json!({"released": true, "resource": resource.as_str()}));
            } else {
                println!("released {resource}");
            }
            return Ok(exit::OK);
        }
        ReleaseOutcome::NotFound => "not_found",
        ReleaseOutcome::Forbidden => "forbidden",
        ReleaseOutcome::Conflict => "conflict",
    };
    refusal("release", "released", &resource, reason, args.lease.json);
    Ok(exit::REFUSED)
}

/// Tells why a renew or release was refused: in words on standard error, and with `--json`
/// as `{"<done>": false, "resource": …, "reason": "not_found" | "forbidden" | "conflict"}`
/// on standard output.
pub(super) fn refusal(command: &str, done: &str, resource: &Resource, reason: &str, json: bool) {
    if json {
        common::print_json(&json!({done: false, "resource": resource.as_str(), "reason": reason}));
    }
    let why = match reason {
        "not_found" => "there is no live lease on it (an expired lease must be acquired again)",
        "forbidden" => "another owner holds it",
        _ => "the live lease has another fencing token",
    };
    eprintln!("fencelock {command}: {resource} not {done}: {why}");
}
