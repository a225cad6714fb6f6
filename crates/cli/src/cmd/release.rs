//! `fencelock release RESOURCE --owner O [--token N] [--kind lock|semaphore|rwlock]`: ends the
//! owner's live lease (with `--kind`, its permit of the semaphore RESOURCE or its hold of
//! the read-write lock RESOURCE).
//!
//! Exit 0 if released; 1 if not (no live lease, another owner's lease, or, with `--token`,
//! a lease with another token — a late release never frees a newer lease); 2 on bad input;
//! 3 if the server or store is unreachable.

use std::process::ExitCode;

use fencelock_client::{HoldKind, Owner, Resource};
use fencelock_core::Refusal;
use fencelock_wire::{Judged, Label, outcome};
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
    let kind = args.lease.kind.hold_kind();
    let client = args.target.connect().await?;
    let released = match kind {
        None => client.release(&resource, &owner, token).await?,
        Some(kind) => client.release_hold(kind, &resource, &owner, token).await?,
    };
    let refused = Refused {
        command: "release",
        done: "released",
        kind,
        name: &resource,
        owner: &owner,
    };
    if let Err(refusal) = released.judged() {
        return Ok(refused.tell(refusal, args.lease.json));
    }
    if args.lease.json {
        common::print_json(&json!({"released": true, name_field(kind): resource.as_str()}));
    } else {
        println!("released {resource}");
    }
    Ok(exit::OK)
}

/// The field that names what a release or renewal acted on, as the API names it: `resource`
/// for a lock, `name` for a semaphore or read-write lock.
pub(super) fn name_field(kind: Option<HoldKind>) -> &'static str {
    match kind {
        None => "resource",
        Some(_) => "name",
    }
}

/// A renew or release that may be refused.
pub(super) struct Refused<'a> {
    /// `renew` or `release`.
    pub command: &'a str,
    /// `renewed` or `released`.
    pub done: &'a str,
    /// A semaphore or read-write lock, or `None` for a lock.
    pub kind: Option<HoldKind>,
    /// What was to be renewed or released.
    pub name: &'a Resource,
    /// Who asked.
    pub owner: &'a Owner,
}

impl Refused<'_> {
    /// Tells why the call was refused: in words on standard error, and with `json` as
    /// `{"<done>": false, "resource" (or "name"): …, "reason": "not_found" | "forbidden" |
    /// "conflict"}` on standard output. Returns the exit code.
    pub fn tell(&self, refusal: Refusal, json: bool) -> u8 {
        let Self {
            command,
            done,
            kind,
            name,
            owner,
        } = *self;
        if json {
            let reason = Label::from(refusal).as_str();
            common::print_json(&json!({done: false, name_field(kind): name.as_str(), "reason": reason}));
        }
        let why = match (kind, refusal) {
            (Some(kind), refusal) => outcome::hold_refusal_detail(kind, refusal, name, owner),
            (None, Refusal::NotFound) => {
                "there is no live lease on it (an expired lease must be acquired again)".into()
            }
            (None, Refusal::Forbidden) => "another owner holds it".into(),
            (None, Refusal::Conflict) => "the live lease has another fencing token".into(),
        };
        eprintln!("fencelock {command}: {name} not {done}: {why}");
        exit::REFUSED
    }
}
