//! What the client commands share: where requests go, who the owner is, reading the
//! arguments into the model, writing leases for people and for scripts, and exit codes.

use std::process::ExitCode;
use std::time::Duration;

use fencelock_client::{
    Client, ConnectError, FencingToken, Lease, Owner, Resource, StoreError, Timestamp, Ttl,
};
use fencelock_wire::LeaseBody;

/// Exit codes of the client commands (the SPEC's table, and `run`'s own).
pub mod exit {
    /// Granted, renewed, released, shown.
    pub const OK: u8 = 0;
    /// Not done, and not an error: held by another owner (acquire); not found, forbidden or
    /// token conflict (renew, release); no live lease (status).
    pub const REFUSED: u8 = 1;
    /// Bad input: a flag, a name, a duration, or a request the server refused as invalid.
    pub const BAD_INPUT: u8 = 2;
    /// The server or the store cannot be reached (or failed).
    pub const UNREACHABLE: u8 = 3;
    /// `run`: the lock was busy (`--no-wait`, or the wait ran out); CMD did not run. As
    /// sysexits' EX_TEMPFAIL: try again later.
    pub const BUSY: u8 = 75;
    /// `run`: the lease was lost, and CMD was stopped (as `timeout` uses 124 for a command
    /// it had to stop).
    pub const LOST: u8 = 124;
    /// `run`: CMD was found but could not be started.
    pub const CANNOT_RUN: u8 = 126;
    /// `run`: CMD was not found.
    pub const NOT_FOUND: u8 = 127;
}

/// Where the commands send requests: a server, or straight to a store.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The fencelock server to talk to.
    #[arg(long, env = "FENCELOCK_SERVER", default_value = "http://127.0.0.1:7070")]
    pub server: String,
    /// Talk straight to this store instead of a server (sqlite://PATH, memory://, …); when
    /// given, it wins over --server. The embedded store serves one process at a time.
    #[arg(long, env = "FENCELOCK_STORE")]
    pub store: Option<String>,
}

impl Target {
    /// A client for the store if one is given, else for the server.
    pub async fn connect(&self) -> Result<Client, Failure> {
        let address = self.store.as_deref().unwrap_or(&self.server);
        fencelock_client::connect(address)
            .await
            .map_err(|error: ConnectError| {
                let code = if error.is_bad_address() {
                    exit::BAD_INPUT
                } else {
                    exit::UNREACHABLE
                };
                Failure::new(code, error.to_string())
            })
    }
}

/// The lease `acquire` and `run` ask for.
#[derive(Debug, Clone, clap::Args)]
pub struct Wanted {
    /// The resource to lock, e.g. payment:42.
    resource: String,
    /// Who holds the lease (default HOSTNAME:PID, as printed in the lease: renew and release
    /// with the same owner).
    #[arg(long, env = "FENCELOCK_OWNER")]
    owner: Option<String>,
    /// How long the lease lasts unless renewed, e.g. 30s, 500ms, 2m.
    #[arg(long, env = "FENCELOCK_TTL", default_value = "30s", value_parser = humantime::parse_duration)]
    ttl: Duration,
}

impl Wanted {
    /// The resource, the owner (or `HOSTNAME:PID`) and the TTL, checked.
    pub fn parse(&self) -> Result<(Resource, Owner, Ttl), Failure> {
        Ok((
            resource(&self.resource)?,
            owner_or_default(self.owner.as_deref())?,
            ttl(self.ttl)?,
        ))
    }
}

/// The lease `renew` and `release` act on.
#[derive(Debug, Clone, clap::Args)]
pub struct Existing {
    /// The locked resource.
    resource: String,
    /// The owner of the lease.
    #[arg(long, env = "FENCELOCK_OWNER")]
    owner: String,
    /// Act only if this is the lease's fencing token (recommended: then a late call never
    /// touches a newer lease). Deliberately not read from the environment: FENCELOCK_TOKEN
    /// is what `run` hands its command, and a token must never apply to another lease by
    /// accident.
    #[arg(long)]
    token: Option<u64>,
    /// Print the result as JSON on standard output.
    #[arg(long, env = "FENCELOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    pub json: bool,
}

impl Existing {
    /// The resource, the owner and the token, checked.
    pub fn parse(&self) -> Result<(Resource, Owner, Option<FencingToken>), Failure> {
        Ok((
            resource(&self.resource)?,
            owner(&self.owner)?,
            self.token.map(FencingToken),
        ))
    }
}

/// A command that could not do its job: what to tell, and the exit code.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// A failure with `code`.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Bad input: exit 2.
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::new(exit::BAD_INPUT, message)
    }
}

impl From<StoreError> for Failure {
    /// A request the server refused as invalid is bad input (2); anything else means the
    /// server or store cannot serve (3).
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Invalid(detail) => Self::bad_input(format!("the request was refused: {detail}")),
            other => Self::new(exit::UNREACHABLE, other.to_string()),
        }
    }
}

/// Turns a command's result into its exit code, telling the failure on standard error.
pub fn finish(command: &str, result: Result<u8, Failure>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("fencelock {command}: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// The resource named on the command line.
pub fn resource(name: &str) -> Result<Resource, Failure> {
    Resource::new(name).map_err(|e| Failure::bad_input(format!("invalid resource {name:?}: {e}")))
}

/// The owner given, or else `HOSTNAME:PID` — unique to this process, so two processes never
/// share a lease by accident.
fn owner_or_default(given: Option<&str>) -> Result<Owner, Failure> {
    match given {
        Some(name) => owner(name),
        None => owner(&default_owner()),
    }
}

/// The owner named on the command line.
fn owner(name: &str) -> Result<Owner, Failure> {
    Owner::new(name).map_err(|e| Failure::bad_input(format!("invalid owner {name:?}: {e}")))
}

fn default_owner() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", std::process::id())
}

/// A TTL from a duration flag: whole milliseconds, at least one.
pub fn ttl(duration: Duration) -> Result<Ttl, Failure> {
    Ttl::from_duration(duration, Ttl::CEILING).map_err(|e| Failure::bad_input(format!("invalid --ttl: {e}")))
}

/// Writes `value` as one line of JSON on standard output.
pub fn print_json(value: &impl serde::Serialize) {
    // Serializing the wire types and `serde_json::Value` cannot fail: they hold only
    // strings, numbers and maps with string keys.
    println!("{}", serde_json::to_string(value).unwrap_or_default());
}

/// Writes a lease as one line of JSON, as the API does.
pub fn print_lease(lease: &Lease) {
    print_json(&LeaseBody::from(lease));
}

/// A lease in words: `payment:42 is held by worker-7 (token 17) until … (in 29.5s)`.
pub fn describe(lease: &Lease) -> String {
    format!(
        "{} is held by {} (fencing token {}) until {} ({})",
        lease.resource,
        lease.owner,
        lease.token,
        lease.expires_at,
        time_left(lease.expires_at)
    )
}

/// How long until `at`, in words: `in 29.5s`, or `ended` if it has passed.
pub fn time_left(at: Timestamp) -> String {
    let left = at.since(Timestamp::now_wall());
    if left.is_zero() {
        "ended".into()
    } else {
        format!("in {:.1}s", left.as_secs_f64())
    }
}
