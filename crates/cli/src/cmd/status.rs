//! `fencelock status RESOURCE [--kind lock|semaphore|rwlock]`: shows the live lease on a
//! resource, or the live permits of a semaphore, or the live holds of a read-write lock.
//!
//! Exit 0 if there is one, 1 if it is free (with `--json`, `null`), 2 on bad input, 3 if the
//! server or store is unreachable.

use std::process::ExitCode;

use fencelock_client::{Claim, Hold, HoldKind, Resource};
use fencelock_wire::outcome;

use super::common::{self, Failure, KindFlag, Target, describe, describe_hold, exit};

/// Flags of `fencelock status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The resource (or the semaphore's or read-write lock's name, with --kind).
    resource: String,
    /// What RESOURCE names: a lock (the default), a semaphore or a read-write lock.
    #[arg(long, value_enum, default_value_t = KindFlag::Lock)]
    kind: KindFlag,
    /// Print it as JSON, as the API's GET answers it (or `null`).
    #[arg(long, env = "FENCELOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    json: bool,
    #[command(flatten)]
    target: Target,
}

/// Runs `fencelock status`.
pub async fn run(args: Args) -> ExitCode {
    common::finish("status", status(args).await)
}

async fn status(args: Args) -> Result<u8, Failure> {
    let resource = common::resource(&args.resource)?;
    let client = args.target.connect().await?;
    let held = match args.kind.hold_kind() {
        None => {
            let lease = client.get(&resource).await?;
            match (&lease, args.json) {
                (Some(lease), true) => common::print_lease(lease),
                (Some(lease), false) => println!("{}", describe(lease)),
                (None, _) => {}
            }
            lease.is_some()
        }
        Some(kind) => {
            let holds = client.holds(kind, &resource).await?;
            match (outcome::encode_holds(kind, &resource, &holds), args.json) {
                (Some(body), true) => common::print_json(&body),
                (Some(_), false) => print_holds(kind, &resource, &holds),
                (None, _) => {}
            }
            !holds.is_empty()
        }
    };
    match (held, args.json) {
        (true, _) => {}
        (false, true) => println!("null"),
        (false, false) => println!("{resource} is free"),
    }
    Ok(if held { exit::OK } else { exit::REFUSED })
}

/// The live holds of `name` in words: a line saying how it is held, then one per hold.
fn print_holds(kind: HoldKind, name: &Resource, holds: &[Hold]) {
    // Every live permit carries the same limit, and a write hold is the only hold.
    let held = match holds.first().map(|h| h.claim) {
        Some(Claim::Permit { limit }) => format!("{} of {limit} permits held", holds.len()),
        Some(Claim::Write) => "held for write".into(),
        Some(Claim::Read) | None => format!("held for read by {}", holds.len()),
    };
    println!("{name} ({}): {held}", common::noun(kind.into()));
    for hold in holds {
        println!("  {}", describe_hold(hold));
    }
}
