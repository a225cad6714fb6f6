//! `fencelock acquire RESOURCE [--owner O] [--ttl 30s] [--wait 10s] [--limit N | --mode M]`:
//! acquires a lease — of a lock, or with `--limit N` one permit of the semaphore RESOURCE of
//! N permits, or with `--mode read|write` a hold of the read-write lock RESOURCE — and prints
//! it as JSON. Nothing renews it: renew it with `fencelock renew`, or use `fencelock run` to
//! hold it for the life of a command.
//!
//! Exit 0 if granted (or extended: the owner held it already), 1 if others hold it (for the
//! whole wait; for a semaphore, also while permits of another limit are live), 2 on bad
//! input, 3 if the server or store is unreachable.

use std::process::ExitCode;
use std::time::Duration;

use fencelock_client::{
    AcquireError, AcquireOutcome, Claim, Client, HoldOutcome, Kind, Owner, Resource, Terms, Ttl,
};
use fencelock_wire::outcome;

use super::common::{self, Claimed, Failure, Target, Wanted, describe, exit};
use super::waiting::while_waiting;

/// Flags of `fencelock acquire`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    wanted: Wanted,
    #[command(flatten)]
    claimed: Claimed,
    /// If others hold it, wait up to this long for it (first come, first served).
    #[arg(long, env = "FENCELOCK_WAIT", default_value = "0s", value_parser = humantime::parse_duration)]
    wait: Duration,
    /// When not acquired, print the answer as JSON on standard output too.
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
    match args.claimed.claim() {
        None => acquire_lock(&client, &resource, &owner, ttl, args.wait, args.json).await,
        Some(claim) => acquire_hold(&client, &resource, &owner, claim, ttl, args.wait, args.json).await,
    }
}

async fn acquire_lock(
    client: &Client,
    resource: &Resource,
    owner: &Owner,
    ttl: Ttl,
    wait: Duration,
    json: bool,
) -> Result<u8, Failure> {
    let acquiring = client.acquire_lease(resource, owner, Terms::ttl(ttl), wait);
    match while_waiting(client, Kind::Lock, resource, wait, acquiring).await? {
        AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease) => {
            common::print_lease(&lease);
            Ok(exit::OK)
        }
        AcquireOutcome::Held { holder, expires_in } => {
            if json {
                common::print_json(&outcome::encode_held(&holder, expires_in));
            } else {
                eprintln!("fencelock acquire: not acquired: {}", describe(&holder));
            }
            Ok(exit::REFUSED)
        }
        delayed @ AcquireOutcome::Delayed { .. } => {
            if json {
                common::print_json(&outcome::encode_acquire(&delayed));
            } else if let AcquireOutcome::Delayed { resource, retry_in } = &delayed {
                let error = fencelock_client::AcquireError::Delayed {
                    resource: resource.clone(),
                    retry_in: *retry_in,
                };
                eprintln!("fencelock acquire: not acquired: {error}");
            }
            Ok(exit::REFUSED)
        }
    }
}

async fn acquire_hold(
    client: &Client,
    name: &Resource,
    owner: &Owner,
    claim: Claim,
    ttl: Ttl,
    wait: Duration,
    json: bool,
) -> Result<u8, Failure> {
    let kind = claim.kind();
    let acquiring = client.acquire_hold(name, owner, claim, ttl, wait);
    let answer = while_waiting(client, kind.into(), name, wait, acquiring).await?;
    // Told in the client's words, which the guard's acquire uses too.
    let refusal = match answer {
        HoldOutcome::Granted { hold, .. } | HoldOutcome::Extended(hold) => {
            common::print_hold(&hold);
            return Ok(exit::OK);
        }
        HoldOutcome::Busy(ref busy) => {
            if json {
                common::print_json(&outcome::encode_hold_acquire(kind, name, &answer).ok());
            }
            AcquireError::HoldBusy {
                name: name.clone(),
                claim,
                busy: busy.clone(),
            }
        }
        HoldOutcome::LimitMismatch { limit } => {
            if let (true, Claim::Permit { limit: asked }) = (json, claim) {
                common::print_json(&outcome::limit_mismatch_problem(name, asked, limit));
            }
            AcquireError::LimitMismatch {
                name: name.clone(),
                limit,
            }
        }
    };
    if !json {
        eprintln!("fencelock acquire: not acquired: {refusal}");
    }
    Ok(exit::REFUSED)
}
