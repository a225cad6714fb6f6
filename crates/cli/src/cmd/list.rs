//! `fencelock list [--prefix P]`: shows every live lease (whose resource starts with the
//! prefix), ordered by resource. Exit 0 (even if there are none), 2 on bad input, 3 if the
//! server or store is unreachable.

use std::process::ExitCode;

use fencelock_client::{Lease, ListQuery};
use fencelock_wire::LeaseBody;
use serde_json::json;

use super::common::{self, Failure, Target, exit, time_left};

/// How many leases are asked for at once (the API's largest page).
const PAGE: usize = 1000;

/// Flags of `fencelock list`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only resources whose name starts with this.
    #[arg(long, env = "FENCELOCK_PREFIX", default_value = "")]
    prefix: String,
    /// Print `{"locks": [LEASE, …]}`.
    #[arg(long, env = "FENCELOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    json: bool,
    #[command(flatten)]
    target: Target,
}

/// Runs `fencelock list`.
pub async fn run(args: Args) -> ExitCode {
    common::finish("list", list(args).await)
}

async fn list(args: Args) -> Result<u8, Failure> {
    if !args.prefix.is_empty() {
        common::resource(&args.prefix)
            .map_err(|_| Failure::bad_input(format!("invalid --prefix {:?}", args.prefix)))?;
    }
    let client = args.target.connect().await?;
    let mut leases = Vec::new();
    let mut query = ListQuery {
        prefix: args.prefix,
        after: None,
        limit: PAGE,
    };
    loop {
        let page = client.list(&query).await?;
        leases.extend(page.leases);
        match page.next {
            Some(next) => query.after = Some(next),
            None => break,
        }
    }
    if args.json {
        let locks: Vec<LeaseBody> = leases.iter().map(LeaseBody::from).collect();
        common::print_json(&json!({ "locks": locks }));
    } else {
        print_table(&leases);
    }
    Ok(exit::OK)
}

fn print_table(leases: &[Lease]) {
    if leases.is_empty() {
        println!("no live leases");
        return;
    }
    let rows: Vec<[String; 4]> = leases
        .iter()
        .map(|l| {
            let expires = format!("{} ({})", l.expires_at, time_left(l.expires_at));
            [
                l.resource.to_string(),
                l.owner.to_string(),
                l.token.to_string(),
                expires,
            ]
        })
        .collect();
    let header = ["RESOURCE", "OWNER", "TOKEN", "EXPIRES"].map(String::from);
    let width = |i: usize| {
        rows.iter()
            .chain([&header])
            .map(|row| row[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2) = (width(0), width(1), width(2));
    for row in [&header].into_iter().chain(&rows) {
        println!("{:w0$}  {:w1$}  {:>w2$}  {}", row[0], row[1], row[2], row[3]);
    }
}
