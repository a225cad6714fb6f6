//! `fencelock leader NAME [--watch] [--json]`: who leads the election NAME — the leader, its
//! term, its value, since when and until when — or, with `--watch`, every change of leader,
//! value or vacancy as it happens (the server's `GET /elections/{name}/observe`: first the
//! current state, then each change, resuming by itself after a disconnect) until
//! interrupted.
//!
//! Exit 0 if the election has a leader, 1 if it is vacant (with `--json`, `null`), 2 on bad
//! input, 3 if the server or store cannot be reached. With `--watch`: 0 when the reader goes
//! away, 3 if the server ends the stream twice in a row.

use std::process::ExitCode;

use fencelock_client::Resource;
use fencelock_core::election::Leadership;
use fencelock_wire::LeadershipBody;

use super::common::{self, Failure, Target, exit};
use super::events::print_stream;

/// Flags of `fencelock leader`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The election, e.g. scheduler:nightly.
    name: String,
    /// Print every change as it happens (from a server), until interrupted.
    #[arg(long)]
    watch: bool,
    /// Print the leadership as JSON, as the API's GET answers it (or `null`); with --watch,
    /// one `{"event", "id", "data"}` object per line.
    #[arg(long, env = "FENCELOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    json: bool,
    #[command(flatten)]
    target: Target,
}

/// Runs `fencelock leader`.
pub async fn run(args: Args) -> ExitCode {
    common::finish("leader", leader(args).await)
}

async fn leader(args: Args) -> Result<u8, Failure> {
    let name = common::resource(&args.name)?;
    Resource::election(&name)
        .map_err(|e| Failure::bad_input(format!("invalid election name {:?}: {e}", args.name)))?;
    if args.watch && args.target.store.is_some() {
        return Err(Failure::bad_input(
            "--watch follows a server's stream: give --server, not --store",
        ));
    }
    let client = args.target.connect().await?;
    if args.watch {
        return print_stream(client.observe(&name)?, args.json).await;
    }
    let leadership = client.leader(&name).await?;
    match (&leadership, args.json) {
        (Some(leadership), true) => common::print_json(&LeadershipBody::from(leadership)),
        (Some(leadership), false) => println!("{}", describe(leadership)),
        (None, true) => println!("null"),
        (None, false) => println!("{name} has no leader"),
    }
    Ok(if leadership.is_some() {
        exit::OK
    } else {
        exit::REFUSED
    })
}

/// `scheduler is led by node-2 (term 41) since …, value "10.0.0.2:8080", until …`.
fn describe(leadership: &Leadership) -> String {
    let value = match &leadership.value {
        Some(value) => format!("value {value:?}"),
        None => "no value".to_owned(),
    };
    format!(
        "{} is led by {} (term {}) since {}, {value}, until {} unless renewed",
        leadership.name,
        leadership.leader,
        leadership.term,
        leadership.since.to_rfc3339(),
        leadership.expires_at.to_rfc3339(),
    )
}
