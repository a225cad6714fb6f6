//! `fencelock list [--prefix P] [--kind lock|semaphore|rwlock]`: shows every live lease (or
//! permit, or hold) whose name starts with the prefix, ordered by name. Exit 0 (even if there
//! are none), 2 on bad input, 3 if the server or store is unreachable.

use std::process::ExitCode;

use fencelock_client::{Claim, Client, HoldKind, HoldPage, Lease};
use fencelock_wire::{HoldListResponse, LeaseBody, outcome};
use serde_json::json;

use super::common::{self, Failure, KindFlag, Target, exit, time_left};

/// How many leases (or names) are asked for at once (the API's largest page).
const PAGE: usize = 1000;

/// Flags of `fencelock list`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only names that start with this.
    #[arg(long, env = "FENCELOCK_PREFIX", default_value = "")]
    prefix: String,
    /// What to list: locks (the default), semaphores or read-write locks.
    #[arg(long, value_enum, default_value_t = KindFlag::Lock)]
    kind: KindFlag,
    /// Print `{"locks": [LEASE, …]}` (`{"semaphores": […]}`, `{"rwlocks": […]}`: each as
    /// its GET answers it).
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
    match args.kind.hold_kind() {
        None => list_locks(&client, args.prefix, args.json).await,
        Some(kind) => list_holds(&client, kind, args.prefix, args.json).await,
    }
}

async fn list_locks(client: &Client, prefix: String, json: bool) -> Result<u8, Failure> {
    let leases = common::every_page(prefix, PAGE, async |query| {
        let page = client.list(query).await?;
        Ok((page.leases, page.next))
    })
    .await?;
    if json {
        let locks: Vec<LeaseBody> = leases.iter().map(LeaseBody::from).collect();
        common::print_json(&json!({ "locks": locks }));
    } else {
        let rows = leases.iter().map(|l| row(l, None)).collect();
        print_table(
            ["RESOURCE", "OWNER", "TOKEN", "EXPIRES", "META"],
            rows,
            "no live leases",
        );
    }
    Ok(exit::OK)
}

async fn list_holds(client: &Client, kind: HoldKind, prefix: String, json: bool) -> Result<u8, Failure> {
    let names = common::every_page(prefix, PAGE, async |query| {
        let page = client.list_holds(kind, query).await?;
        Ok((page.names, page.next))
    })
    .await?;
    let page = HoldPage { names, next: None };
    if json {
        // The API's answer, without the cursor of a page: this is every page.
        match outcome::encode_hold_page(kind, &page) {
            HoldListResponse::Semaphores(list) => common::print_json(&json!({"semaphores": list.semaphores})),
            HoldListResponse::RwLocks(list) => common::print_json(&json!({"rwlocks": list.rwlocks})),
        }
        return Ok(exit::OK);
    }
    let rows = page
        .names
        .iter()
        .flat_map(|(_, holds)| holds)
        .map(|hold| {
            let what = match hold.claim {
                Claim::Permit { limit } => format!("permit of {limit}"),
                Claim::Read => "read".into(),
                Claim::Write => "write".into(),
            };
            row(&hold.lease, Some(what))
        })
        .collect();
    let empty = match kind {
        HoldKind::Semaphore => "no live permits",
        HoldKind::RwLock => "no live holds",
    };
    print_table(
        ["NAME", "OWNER", "TOKEN", "HOLDS", "EXPIRES", "META"],
        rows,
        empty,
    );
    Ok(exit::OK)
}

/// One line of the table: name, owner, token, what is held (for a permit or hold), expiry,
/// and the metadata as compact JSON (empty for none).
fn row(lease: &Lease, held: Option<String>) -> Vec<String> {
    let expires = format!("{} ({})", lease.expires_at, time_left(lease.expires_at));
    let meta = lease.meta.as_ref().map_or_else(String::new, ToString::to_string);
    [
        lease.resource.to_string(),
        lease.owner.to_string(),
        lease.token.to_string(),
    ]
    .into_iter()
    .chain(held)
    .chain([expires, meta])
    .collect()
}

/// A table with `header`, its columns as wide as their widest cell (the token column, the
/// third, right-aligned; the last not padded), or `empty` if there are no rows.
fn print_table<const N: usize>(header: [&str; N], rows: Vec<Vec<String>>, empty: &str) {
    if rows.is_empty() {
        println!("{empty}");
        return;
    }
    let header: Vec<String> = header.map(String::from).into();
    let widths: Vec<usize> = (0..N)
        .map(|i| {
            rows.iter()
                .chain([&header])
                .map(|row| row[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in [&header].into_iter().chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| match i {
                _ if i + 1 == N => cell.clone(),
                2 => format!("{cell:>w$}", w = widths[i]),
                _ => format!("{cell:w$}", w = widths[i]),
            })
            .collect();
        // A last column left empty (no metadata) leaves no padding behind it.
        println!("{}", cells.join("  ").trim_end());
    }
}
