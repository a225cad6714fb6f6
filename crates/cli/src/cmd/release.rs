//! `fencelock release RESOURCE --owner O [--token N]`: ends the owner's live lease.
//!
//! Exit 0 if released; 1 if not (no live lease, another owner's lease, or, with `--token`,
//! a lease with another token — a late release never frees a newer lease); 2 on bad input;
//! 3 if the server or store is unreachable.

use std::process::ExitCode;

use fencelock_client::Resource;
use fencelock_core::Refusal;
use fencelock_wire::{Judged, Label};
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
    let outcome = client.release(&resource, &owner, token).await?;
    if let Err(refusal) = outcome.judged() {
        return Ok(refused(
            "release",
            "released",
            &resource,
            refusal,
            args.lease.json,
        ));
    }
    if args.lease.json {
        common::print_json(&json!({"released": true, "resource": resource.as_str()}));
    } else {
        println!("released {resource}");
    }
    Ok(exit::OK)
}

/// Tells why a renew or release was refused: in words on standard error, and with `--json`
/// as `{"<done>": false, "resource": …, "reason": "not_found" | "forbidden" | "conflict"}`
/// on standard output. Returns the exit code.
pub(super) fn refused(command: &str, done: &str, resource: &Resource, refusal: Refusal, json: bool) -> u8 {
    if json {
        let reason = Label::from(refusal).as_str();
        common::print_json(&json!({done: false, "resource": resource.as_str(), "reason": reason}));
    }
    let why = match refusal {
        Refusal::NotFound => "there is no live lease on it (an expired lease must be acquired again)",
        Refusal::Forbidden => "another owner holds it",
        Refusal::Conflict => "the live lease has another fencing token",
    };
    eprintln!("fencelock {command}: {resource} not {done}: {why}");
    exit::REFUSED
}
