//! `fencelock events [--prefix P] [--kinds K] [--json]`: prints a server's event stream
//! (`GET /events`) as it comes — one line per event, for people or as JSON lines — resuming
//! by itself after a disconnect, until interrupted. Exit 2 on bad input, 3 if the server
//! cannot be reached (or ends the stream twice in a row).

use std::io::Write;
use std::process::ExitCode;

use fencelock_client::HttpStore;
use fencelock_client::events::{Event, Events};
use fencelock_wire::{EventName, Subject, Topics};
use serde_json::json;

use super::common::{self, Failure, Target};

/// Flags of `fencelock events`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only names that start with this.
    #[arg(long, env = "FENCELOCK_PREFIX", default_value = "")]
    prefix: String,
    /// Only these kinds: a comma list of lock, semaphore, rwlock, election (default all).
    #[arg(long, default_value = "")]
    kinds: String,
    /// Print one JSON object per line: `{"event", "id", "data"}`, `data` as the server sent it.
    #[arg(long, env = "FENCELOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    json: bool,
    #[command(flatten)]
    target: Target,
}

/// Runs `fencelock events`.
pub async fn run(args: Args) -> ExitCode {
    common::finish("events", follow(args).await)
}

async fn follow(args: Args) -> Result<u8, Failure> {
    if !args.prefix.is_empty() {
        common::resource(&args.prefix)
            .map_err(|_| Failure::bad_input(format!("invalid --prefix {:?}", args.prefix)))?;
    }
    if !args.kinds.is_empty() {
        Topics::parse(Some(&args.kinds))
            .map_err(|e| Failure::bad_input(format!("--kinds: {}", e.message)))?;
    }
    if args.target.store.is_some() {
        return Err(Failure::bad_input(
            "events come from a server: give --server, not --store",
        ));
    }
    let store = HttpStore::with_options(&args.target.server, args.target.http_options()?)
        .map_err(|e| Failure::bad_input(e.to_string()))?;
    print_stream(store.events(&args.prefix, &args.kinds)?, args.json).await
}

/// Prints `events` as they come, one line each (`json`: `{"event", "id", "data"}`), until
/// the reader goes away (exit 0) or the server ends the stream twice in a row.
pub(super) async fn print_stream(mut events: Events, json: bool) -> Result<u8, Failure> {
    loop {
        let event = events.next().await?;
        let line = if json {
            json_line(&event)
        } else {
            human_line(&event)
        };
        let mut out = std::io::stdout().lock();
        // A reader that went away (a closed pipe) ends the command.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return Ok(common::exit::OK);
        }
    }
}

/// `{"event": NAME, "id": ID, "data": {...}}`.
fn json_line(event: &Event) -> String {
    let data: serde_json::Value = serde_json::from_str(&event.data).unwrap_or(serde_json::Value::Null);
    json!({"event": event.name.as_str(), "id": event.id, "data": data}).to_string()
}

/// `grant lock payment:42 owner=worker-7 token=17 at=… [held=…ms] [mode=…|limit=…]`.
fn human_line(event: &Event) -> String {
    let Some(change) = event.change() else {
        return match event.name {
            EventName::Reset => {
                "reset: the events since the last one seen are gone; a snapshot of what is live follows"
                    .into()
            }
            name => name.to_string(),
        };
    };
    let mut line = format!(
        "{} {} {} owner={}",
        event.name,
        change.kind.as_str(),
        change.name,
        change.owner
    );
    if let Some(token) = change.fencing_token {
        line.push_str(&format!(" token={token}"));
    }
    line.push_str(&format!(" at={}", change.at));
    if let Some(held) = change.held_ms {
        line.push_str(&format!(" held={held}ms"));
    }
    match change.subject {
        Some(Subject::Lease(lease)) => line.push_str(&format!(" expires={}", lease.expires_at)),
        Some(Subject::Hold(hold)) => line.push_str(&format!(" {}", hold_detail(&hold))),
        Some(Subject::Leadership(leadership)) => {
            if let Some(value) = leadership.value {
                line.push_str(&format!(" value={value:?}"));
            }
            line.push_str(&format!(
                " since={} expires={}",
                leadership.since, leadership.expires_at
            ));
        }
        None => {}
    }
    line
}

fn hold_detail(hold: &fencelock_wire::HoldItem) -> String {
    match hold {
        fencelock_wire::HoldItem::Permit(permit) => {
            format!("limit={} expires={}", permit.limit, permit.expires_at)
        }
        fencelock_wire::HoldItem::Hold(hold) => {
            format!("mode={} expires={}", hold.mode.as_str(), hold.expires_at)
        }
    }
}
