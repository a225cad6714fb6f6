//! `fencelock status RESOURCE`: shows the live lease on a resource.
//!
//! Exit 0 if there is one, 1 if the resource is free (with `--json`, `null`), 2 on bad
//! input, 3 if the server or store is unreachable.

use std::process::ExitCode;

use super::common::{self, Failure, Target, describe, exit};

/// Flags of `fencelock status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The resource.
    resource: String,
    /// Print the lease as JSON (or `null`).
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
    let lease = client.get(&resource).await?;
    match (&lease, args.json) {
        (Some(lease), true) => common::print_lease(lease),
        (Some(lease), false) => println!("{}", describe(lease)),
        (None, true) => println!("null"),
        (None, false) => println!("{resource} is free"),
    }
    Ok(if lease.is_some() { exit::OK } else { exit::REFUSED })
}
