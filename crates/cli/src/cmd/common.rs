//! What the client commands share: where requests go, who the owner is, reading the
//! arguments into the model, writing leases for people and for scripts, and exit codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use fencelock_client::{
    AuthToken, CaCertificates, Claim, Client, ConnectError, FencingToken, Hold, HoldKind, HttpOptions, Key,
    Kind, Lease, ListQuery, Meta, Owner, Resource, StoreError, Terms, Timestamp, Ttl,
};
use fencelock_wire::{HoldItem, LeaseBody};
use serde_json::{Map, Value};

/// Exit codes of the client commands (the SPEC's table, and `run`'s own).
pub mod exit {
    /// Granted, renewed, released, shown.
    pub const OK: u8 = 0;
    /// Not done, and not an error: held by another owner, or the wait would deadlock
    /// (acquire); not found, forbidden or token conflict (renew, release); no live lease
    /// (status).
    pub const REFUSED: u8 = 1;
    /// Bad input: a flag, a name, a duration, or a request the server refused as invalid, or
    /// refused this client (no or an unknown auth token, a right its principal lacks).
    pub const BAD_INPUT: u8 = 2;
    /// The server or the store cannot be reached (or failed).
    pub const UNREACHABLE: u8 = 3;
    /// `run`: the lock was busy (`--no-wait`, or the wait ran out; for a semaphore, also
    /// permits of another limit were live; or the wait would deadlock); CMD did not run. As
    /// sysexits' EX_TEMPFAIL: try again later.
    pub const BUSY: u8 = 75;
    /// `run`: the lease was lost (or reached `--max-hold`), and CMD was stopped (as
    /// `timeout` uses 124 for a command it had to stop).
    pub const LOST: u8 = 124;
    /// `run`: CMD was found but could not be started.
    pub const CANNOT_RUN: u8 = 126;
    /// `run`: CMD was not found.
    pub const NOT_FOUND: u8 = 127;
}

/// Where the commands send requests: a server, or straight to a store; and, for a server,
/// the CA that signs its certificate and the token that says who we are.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The fencelock server to talk to: http://HOST:PORT, or https://HOST:PORT for a server
    /// with TLS.
    #[arg(long, env = "FENCELOCK_SERVER", default_value = "http://127.0.0.1:7070")]
    pub server: String,
    /// Talk straight to this store instead of a server (sqlite://PATH, memory://, …); when
    /// given, it wins over --server. The embedded store serves one process at a time.
    #[arg(long, env = "FENCELOCK_STORE")]
    pub store: Option<String>,
    /// The bearer token for a server with authentication on (as `fencelock auth new-token`
    /// printed it), sent on every request. Prefer the environment variable: a flag is seen
    /// by everyone who can list processes.
    #[arg(
        long,
        env = "FENCELOCK_AUTH_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    auth_token: Option<String>,
    /// For an https:// server: trust its certificate only if a CA in this PEM file signed
    /// it (e.g. your private CA, or the server's self-signed certificate), instead of the
    /// system's trusted CAs.
    #[arg(long, env = "FENCELOCK_CACERT", value_name = "FILE")]
    cacert: Option<PathBuf>,
}

impl Target {
    /// A client for the store if one is given, else for the server (with the CA and the
    /// token, if given).
    pub async fn connect(&self) -> Result<Client, Failure> {
        let address = self.store.as_deref().unwrap_or(&self.server);
        fencelock_client::connect_with(address, self.http_options()?)
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

    /// The token given (`--auth-token`, `FENCELOCK_AUTH_TOKEN`), checked.
    pub fn auth_token(&self) -> Result<Option<AuthToken>, Failure> {
        self.auth_token
            .as_deref()
            .map(|token| AuthToken::new(token).map_err(|e| Failure::bad_input(format!("--auth-token: {e}"))))
            .transpose()
    }

    /// How the client talks to a server: the CA of `--cacert` and the token.
    pub fn http_options(&self) -> Result<HttpOptions, Failure> {
        let ca_certificates = match &self.cacert {
            None => None,
            Some(path) => {
                let bad = |e: &dyn std::fmt::Display| {
                    Failure::bad_input(format!("--cacert {}: {e}", path.display()))
                };
                let pem = std::fs::read(path).map_err(|e| bad(&e))?;
                Some(CaCertificates::from_pem(&pem).map_err(|e| bad(&e))?)
            }
        };
        Ok(HttpOptions {
            ca_certificates,
            auth_token: self.auth_token()?,
            ..HttpOptions::default()
        })
    }
}

/// The lease `acquire` and `run` ask for, besides the name: who holds it and on what terms.
#[derive(Debug, Clone, clap::Args)]
pub struct Wanted {
    /// Who holds the lease (default HOSTNAME:PID, as printed in the lease: renew and release
    /// with the same owner).
    #[arg(long, env = "FENCELOCK_OWNER")]
    owner: Option<String>,
    /// How long the lease lasts unless renewed, e.g. 30s, 500ms, 2m.
    #[arg(long, env = "FENCELOCK_TTL", default_value = "30s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// A cap on holding, e.g. 1h: the lease ends this long after its grant at the latest,
    /// however often it is renewed (the lease shows it as hold_until); `run` stops CMD
    /// before it, as for a lost lease (exit 124). For locks only.
    #[arg(
        long,
        env = "FENCELOCK_MAX_HOLD",
        value_parser = humantime::parse_duration,
        conflicts_with_all = ["limit", "mode"]
    )]
    max_hold: Option<Duration>,
    /// Metadata for the lease, e.g. --meta job=backup: shown with it by `status`, `list`
    /// and the API. Give it several times for several keys; values are strings. `run` adds
    /// host, pid and command unless given here.
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
}

impl Wanted {
    /// The owner (or `HOSTNAME:PID`) and the terms, checked.
    pub fn parse(&self) -> Result<(Owner, Terms), Failure> {
        self.parse_with(Map::new())
    }

    /// [`parse`](Self::parse), with the metadata `defaults` under what --meta gives (which
    /// wins on a key both have).
    pub fn parse_with(&self, defaults: Map<String, Value>) -> Result<(Owner, Terms), Failure> {
        let max_hold = self
            .max_hold
            .map(|cap| {
                Ttl::from_duration(cap, Ttl::CEILING)
                    .map_err(|e| Failure::bad_input(format!("invalid --max-hold: {e}")))
            })
            .transpose()?;
        let terms = Terms::ttl(ttl(self.ttl)?)
            .max_hold(max_hold)
            .meta(meta(&self.meta, defaults)?);
        Ok((owner_or_default(self.owner.as_deref())?, terms))
    }
}

/// The metadata of `--meta KEY=VALUE` pairs over `defaults`; none if both are empty. The
/// server checks the size against its own limit.
fn meta(pairs: &[String], mut defaults: Map<String, Value>) -> Result<Option<Meta>, Failure> {
    for pair in pairs {
        let (key, value) = pair
            .split_once('=')
            .filter(|(key, _)| !key.is_empty())
            .ok_or_else(|| Failure::bad_input(format!("invalid --meta {pair:?}: expected KEY=VALUE")))?;
        defaults.insert(key.to_owned(), Value::String(value.to_owned()));
    }
    if defaults.is_empty() {
        return Ok(None);
    }
    Meta::from_object(&defaults, usize::MAX)
        .map(Some)
        .map_err(|e| Failure::bad_input(format!("invalid --meta: {e}")))
}

/// What `run` says of itself in its lease's metadata: the host, its own process id (the
/// holder's, as in the default owner: the process that renews the lease and stops CMD when
/// it is lost) and CMD as one line.
pub fn run_meta(command: &[std::ffi::OsString]) -> Map<String, Value> {
    let command = command
        .iter()
        .map(|part| part.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    Map::from_iter([
        ("host".to_owned(), Value::String(host_name())),
        ("pid".to_owned(), Value::from(std::process::id())),
        ("command".to_owned(), Value::String(command)),
    ])
}

/// What `acquire` and `run` hold: a lock (neither flag), one permit of a semaphore
/// (`--limit`), or a read-write lock in a mode (`--mode`).
///
/// Neither flag is read from the environment, nor is `--kind` ([`KindFlag`]): what is held
/// is said on the command line, so that a command meant for a lock never takes a semaphore
/// by accident (and `run` hands its command `FENCELOCK_KIND`, which a `fencelock` command run
/// by it must not pick up for another name).
#[derive(Debug, Clone, clap::Args)]
pub struct Claimed {
    /// Hold one permit of the semaphore NAME of N permits: at most N holders at once. Every
    /// holder gives the same N (while permits of another limit are live, none is granted).
    #[arg(long, value_name = "N", conflicts_with = "mode", value_parser = clap::value_parser!(u32).range(1..))]
    limit: Option<u32>,
    /// Hold the read-write lock NAME: `read` (shared with other readers) or `write`
    /// (exclusive; readers that come while a writer waits wait behind it).
    #[arg(long, value_enum)]
    mode: Option<Mode>,
}

impl Claimed {
    /// The claim asked for, or `None` for a lock.
    pub fn claim(&self) -> Option<Claim> {
        match (self.limit, self.mode) {
            (Some(limit), _) => Some(Claim::Permit { limit }),
            (None, Some(Mode::Read)) => Some(Claim::Read),
            (None, Some(Mode::Write)) => Some(Claim::Write),
            (None, None) => None,
        }
    }
}

/// `--mode`: a read-write lock's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Shared with other readers.
    Read,
    /// Exclusive.
    Write,
}

/// `--kind`: the namespace of NAME, for the commands that cannot tell it from a limit or a
/// mode (release, renew, status, list). Not read from the environment (see [`Claimed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KindFlag {
    /// A lock (`/locks`).
    Lock,
    /// A semaphore (`/semaphores`).
    Semaphore,
    /// A read-write lock (`/rwlocks`).
    Rwlock,
}

impl KindFlag {
    /// The semaphore or read-write lock namespace, or `None` for locks.
    pub fn hold_kind(self) -> Option<HoldKind> {
        Kind::from(self).hold_kind()
    }
}

impl From<KindFlag> for Kind {
    fn from(flag: KindFlag) -> Self {
        match flag {
            KindFlag::Lock => Self::Lock,
            KindFlag::Semaphore => Self::Semaphore,
            KindFlag::Rwlock => Self::RwLock,
        }
    }
}

/// The lease `renew` and `release` act on.
#[derive(Debug, Clone, clap::Args)]
pub struct Existing {
    /// The locked resource (or the semaphore's or read-write lock's name, with --kind).
    resource: String,
    /// The owner of the lease.
    #[arg(long, env = "FENCELOCK_OWNER")]
    owner: Option<String>,
    /// What RESOURCE names: a lock (the default), a semaphore's permit or a read-write
    /// lock's hold.
    #[arg(long, value_enum, default_value_t = KindFlag::Lock)]
    pub kind: KindFlag,
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
    /// The resource, the owner and the token, checked. The command's own argument group
    /// makes `--owner` required where it is (clap refuses the command without it first).
    pub fn parse(&self) -> Result<(Resource, Owner, Option<FencingToken>), Failure> {
        let name = self
            .owner
            .as_deref()
            .ok_or_else(|| Failure::bad_input("--owner is required"))?;
        Ok((
            resource(&self.resource)?,
            owner(name)?,
            self.token.map(FencingToken),
        ))
    }

    /// The name and its kind, for a call that names no owner (a forced release).
    pub fn key(&self) -> Result<Key, Failure> {
        let name = resource(&self.resource)?;
        Ok(match self.kind.hold_kind() {
            None => Key::lock(&name),
            Some(kind) => Key::hold(kind, &name),
        })
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
    /// A request the server refused as invalid, or refused this client (its token, its
    /// rights), is bad input (2): asking again as it is will not help. Anything else means
    /// the server or store cannot serve (3), for now (too many requests among them).
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Invalid(detail) => Self::bad_input(format!("the request was refused: {detail}")),
            error @ StoreError::Unauthenticated(_) => Self::bad_input(format!(
                "{error}; give it with --auth-token or FENCELOCK_AUTH_TOKEN"
            )),
            error @ StoreError::NotAllowed(_) => Self::bad_input(error.to_string()),
            // Contention, not a failure: the wait would have closed a cycle of owners.
            error @ StoreError::Deadlock(_) => Self::new(exit::REFUSED, error.to_string()),
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
    Resource::named(name).map_err(|e| Failure::bad_input(format!("invalid resource {name:?}: {e}")))
}

/// The owner given, or else `HOSTNAME:PID` — unique to this process, so two processes never
/// share a lease by accident.
pub fn owner_or_default(given: Option<&str>) -> Result<Owner, Failure> {
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
    format!("{}:{}", host_name(), std::process::id())
}

/// This host's name (`localhost` if it has none).
fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".into())
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

/// Writes a permit or a hold as one line of JSON, as the API does.
pub fn print_hold(hold: &Hold) {
    print_json(&HoldItem::from(hold));
}

/// What a person calls a kind: `lock`, `semaphore`, `read-write lock`.
pub fn noun(kind: Kind) -> &'static str {
    match kind {
        Kind::Lock => "lock",
        Kind::Semaphore => "semaphore",
        Kind::RwLock => "read-write lock",
    }
}

/// A permit or hold in words: `permit of worker-7 (fencing token 17) until … (in 29.5s)`,
/// `read hold of worker-7 (…) …`.
pub fn describe_hold(hold: &Hold) -> String {
    let what = match hold.claim {
        Claim::Permit { .. } => "permit",
        Claim::Read => "read hold",
        Claim::Write => "write hold",
    };
    let lease = &hold.lease;
    format!(
        "{what} of {} (fencing token {}) until {} ({}){}",
        lease.owner,
        lease.token,
        lease.expires_at,
        time_left(lease.expires_at),
        said(lease)
    )
}

/// Every page of a list, from `fetch`, which answers one page (its items, and where the
/// next starts).
pub async fn every_page<T>(
    prefix: String,
    page_size: usize,
    fetch: impl AsyncFn(&ListQuery) -> Result<(Vec<T>, Option<Resource>), Failure>,
) -> Result<Vec<T>, Failure> {
    let mut all = Vec::new();
    let mut query = ListQuery {
        prefix,
        after: None,
        limit: page_size,
    };
    loop {
        let (items, next) = fetch(&query).await?;
        all.extend(items);
        match next {
            Some(next) => query.after = Some(next),
            None => return Ok(all),
        }
    }
}

/// A lease in words: `payment:42 is held by worker-7 (token 17) until … (in 29.5s)`.
pub fn describe(lease: &Lease) -> String {
    format!(
        "{} is held by {} (fencing token {}) until {} ({}){}",
        lease.resource,
        lease.owner,
        lease.token,
        lease.expires_at,
        time_left(lease.expires_at),
        said(lease)
    )
}

/// What the holder said about `lease`, for the end of a description: `, meta {…}`, or
/// nothing.
fn said(lease: &Lease) -> String {
    lease
        .meta
        .as_ref()
        .map_or_else(String::new, |meta| format!(", meta {meta}"))
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
