//! `fencelock release RESOURCE --owner O [--token N] [--kind lock|semaphore|rwlock]`: ends the
//! owner's live lease (with `--kind`, its permit of the semaphore RESOURCE or its hold of
//! the read-write lock RESOURCE).
//!
//! `fencelock release RESOURCE --force [--kind …]`: an administrator's release — ends every
//! live lease, permit or hold of RESOURCE, whoever holds it (through a server with
//! authentication on, the token's principal needs the `admin` right on the name).
//!
//! Exit 0 if released; 1 if not (no live lease, another owner's lease, or, with `--token`,
//! a lease with another token — a late release never frees a newer lease; with `--force`,
//! nothing held); 2 on bad input (and for a token the server does not know, or a right its
//! principal lacks); 3 if the server or store is unreachable.

use std::process::ExitCode;

use fencelock_client::{ForceOutcome, HoldKind, Owner, Resource};
use fencelock_core::Refusal;
use fencelock_wire::{Judged, Label, outcome};
use serde_json::json;

use super::common::{self, Existing, Failure, Target, exit, noun};

/// Flags of `fencelock release`.
#[derive(Debug, clap::Args)]
// Both may come: FENCELOCK_OWNER, exported for the other commands, does not stand in the way
// of --force, which does not use it.
#[command(group(clap::ArgGroup::new("whose").required(true).multiple(true).args(["owner", "force"])))]
pub struct Args {
    #[command(flatten)]
    lease: Existing,
    /// Release RESOURCE whoever holds it: every live lease, permit (--kind semaphore) or
    /// hold (--kind rwlock) of the name; --owner is not needed (nor used). An
    /// administrator's tool, for a holder that is gone; the fencing token still protects the
    /// resource from a holder that comes back.
    #[arg(long, conflicts_with = "token")]
    force: bool,
    #[command(flatten)]
    target: Target,
}

/// Runs `fencelock release`.
pub async fn run(args: Args) -> ExitCode {
    common::finish("release", release(args).await)
}

async fn release(args: Args) -> Result<u8, Failure> {
    if args.force {
        return force_release(&args).await;
    }
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

/// `--force`: frees the name whoever holds it.
async fn force_release(args: &Args) -> Result<u8, Failure> {
    let key = args.lease.key()?;
    let client = args.target.connect().await?;
    let kind = args.lease.kind.hold_kind();
    let (name, field) = (key.name.as_str(), name_field(kind));
    match client.force_release(&key).await? {
        ForceOutcome::Released(_) => {
            if args.lease.json {
                common::print_json(&json!({"released": true, field: name, "forced": true}));
            } else {
                println!("released {name} (forced: whoever held it)");
            }
            Ok(exit::OK)
        }
        ForceOutcome::NotFound => {
            if args.lease.json {
                let reason = Label::from(Refusal::NotFound).as_str();
                common::print_json(&json!({"released": false, field: name, "reason": reason}));
            }
            eprintln!(
                "fencelock release: {name} not released: nothing holds the {} {name}",
                noun(key.kind)
            );
            Ok(exit::REFUSED)
        }
    }
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
