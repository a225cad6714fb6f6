//! `fencelock acquire RESOURCE [--owner O] [--ttl 30s] [--max-hold 1h] [--wait 10s] [--limit N |
//! --mode M]`: acquires a lease — of a lock (with `--max-hold`, capped: no renewal keeps it
//! past its `hold_until`), or with `--limit N` one permit of the semaphore RESOURCE of N
//! permits, or with `--mode read|write` a hold of the read-write lock RESOURCE — and prints
//! it as JSON. Nothing renews it: renew it with `fencelock renew`, or use `fencelock run` to
//! hold it for the life of a command.
//!
//! Exit 0 if granted (or extended: the owner held it already), 1 if others hold it (for the
//! whole wait; for a semaphore, also while permits of another limit are live; or the wait
//! would deadlock), 2 on bad input, 3 if the server or store is unreachable.

use std::process::ExitCode;
use std::time::Duration;

use fencelock_client::{
    AcquireError, AcquireOutcome, Claim, Client, HoldOutcome, Kind, Meta, Owner, Resource, Terms, Ttl,
};
use fencelock_wire::outcome;

use super::common::{self, Claimed, Failure, Target, Wanted, describe, exit};
use super::waiting::while_waiting;

/// Flags of `fencelock acquire`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The resource to lock, e.g. payment:42 (with --limit, the semaphore's name; with
    /// --mode, the read-write lock's).
    resource: String,
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
    let resource = common::resource(&args.resource)?;
    let (owner, terms) = args.wanted.parse()?;
    let client = args.target.connect().await?;
    match args.claimed.claim() {
        None => acquire_lock(&client, &resource, &owner, terms, args.wait, args.json).await,
        Some(claim) => {
            let held = (claim, terms.ttl, terms.meta.as_ref());
            acquire_hold(&client, &resource, &owner, held, args.wait, args.json).await
        }
    }
}

async fn acquire_lock(
    client: &Client,
    resource: &Resource,
    owner: &Owner,
    terms: Terms,
    wait: Duration,
    json: bool,
) -> Result<u8, Failure> {
    let acquiring = client.acquire_lease(resource, owner, terms, wait);
    match while_waiting(
        client,
        Kind::Lock,
        std::slice::from_ref(resource),
        wait,
        acquiring,
    )
    .await?
    {
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
    (claim, ttl, meta): (Claim, Ttl, Option<&Meta>),
    wait: Duration,
    json: bool,
) -> Result<u8, Failure> {
    let kind = claim.kind();
    let acquiring = client.acquire_hold(name, owner, claim, ttl, meta, wait);
    let answer = while_waiting(client, kind.into(), std::slice::from_ref(name), wait, acquiring).await?;
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
