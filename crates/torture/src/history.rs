//! What a torture run records, and what the checker judges: one [`Entry`] per line of JSON.
//!
//! # Time
//!
//! Every time is a reading of the host's `CLOCK_MONOTONIC` in nanoseconds ([`Mono`]): the
//! runner, its client processes, the fenced resource and the nemesis run on one host, so
//! their readings compare, whatever any wall clock does (and the nemesis steps some). Wall
//! times appear only as the server reported them (a lease's `acquired_at` and `expires_at`,
//! in milliseconds since the epoch, by the clock of the server or store that decided).
//!
//! # Operations
//!
//! An operation is recorded once it is answered (or given up on), with when it was sent
//! (`invoked`) and when its answer came (`completed`): whatever it did happened between the
//! two. Its [`Outcome`] is what the client was told: it worked, it was refused (a definite
//! "no": nothing changed), or it is unknown (a 503, a timeout, a connection lost — it may or
//! may not have happened).
//!
//! Every grant is made to an owner that no other grant uses (`client-op`), so that a lease
//! seen anywhere names the one operation that took it.
//!
//! # Events
//!
//! Each operation names the server it went to. A watcher per server records every event
//! its stream (`GET /events`) told, with when it arrived ([`Event`]), and its window
//! ([`Watched`]); the drain's markers, after the clients finished, are operations of a
//! client of their own ([`Phase::Drain`]).

use serde::{Deserialize, Serialize};

/// A reading of `CLOCK_MONOTONIC`, in nanoseconds: comparable across the processes of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Mono(pub u64);

/// One line of a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum Entry {
    /// The run's settings, first: enough to run it again.
    Run(RunInfo),
    /// An operation of a client, once answered.
    Op(Op),
    /// A write to the fenced resource, and whether the resource took it.
    Write(Write),
    /// A fault the nemesis began or healed. The checker reads only the kills of servers (a
    /// kill loses the events a server had not told the others yet, as the guarantee table
    /// says); the rest are there for people, to read a violation against what was going on.
    Fault(Fault),
    /// An event a watcher received on a server's stream (`GET /events`).
    Event(Event),
    /// A watcher's window: from its stream's first answer until the runner stopped it.
    Watched(Watched),
    /// The liveness phase began: every fault is healed from here on (see [`Op`] with
    /// `phase: liveness`).
    Healed { at: Mono },
}

impl Entry {
    /// When it happened, for the history's order: an operation when it was invoked, an event
    /// when it was received, a watcher's window when it began.
    pub fn time(&self) -> Mono {
        match self {
            Entry::Run(_) => Mono(0),
            Entry::Op(op) => op.invoked,
            Entry::Write(write) => write.at,
            Entry::Fault(fault) => fault.at,
            Entry::Healed { at } => *at,
            Entry::Event(event) => event.received,
            Entry::Watched(watched) => watched.from,
        }
    }
}

/// The settings of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The store: `sqlite`, `postgres`, `etcd`, `redis`, `redlock`, `zookeeper`, or a control
    /// target (`broken`).
    pub store: String,
    pub seed: u64,
    pub seconds: u64,
    pub clients: u32,
    pub servers: u32,
    /// The faults this run may inject (their names, as in [`Fault::kind`]).
    pub faults: Vec<String>,
}

/// What a client asked, of which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Call {
    /// A grant (new or extension): of one lock, a permit, a read or write hold, or several
    /// locks all or none ([`Op::names`] holds them all, in the order asked).
    Acquire,
    /// A renewal by the guard.
    Renew,
    /// A release (with the lease's token).
    Release,
    /// A read of who holds a name (`GET`).
    Get,
    /// The guard said the lease is lost; `completed` is when it said so. `invoked` is the same.
    Lost,
}

/// The kind of name an operation is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Lock,
    Semaphore,
    Rwlock,
}

impl Kind {
    /// Its name, as in the history and in an event's `kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Semaphore => "semaphore",
            Kind::Rwlock => "rwlock",
        }
    }
}

/// How an operation ended, as its client was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It happened: granted or extended (an acquire), renewed, released, read.
    Ok,
    /// A definite no: held by another (`acquired: false`), 404/403/409 on a renewal or
    /// release. Nothing changed.
    Refused,
    /// Not known: a 503, a timeout, a connection that broke. It may have happened.
    Unknown,
}

/// The run's phase when an operation was invoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// While the nemesis works.
    Faults,
    /// After every fault is healed: each client must be able to acquire within the run's bound.
    Liveness,
    /// After the clients finished: the runner's marker through each server, whose events
    /// show a stream's gap if it has one (a lost event shows only with the next one).
    Drain,
}

/// An operation of a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// The client process.
    pub client: u32,
    /// Its operations in order, from 0: with `client`, names the operation.
    pub op: u64,
    pub phase: Phase,
    pub call: Call,
    pub kind: Kind,
    /// The names, in the order asked (one but for an all-or-none acquire).
    pub names: Vec<String>,
    /// The owner the call was made as.
    pub owner: String,
    /// The server it went to (its place in the run's list); none in older histories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<u32>,
    /// A semaphore's limit, or a hold's mode (`read`, `write`); else none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The TTL asked for, and how long the acquire was let wait (`wait_ms`, 0: a single try).
    #[serde(default)]
    pub ttl_ms: u64,
    #[serde(default)]
    pub wait_ms: u64,
    /// For a renewal, release or loss: the token of the lease it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    pub invoked: Mono,
    pub completed: Mono,
    pub outcome: Outcome,
    /// What the answer said of the name's lease(s): the leases granted, extended or renewed
    /// (in the order of `names`), or, for a refusal, the holders in the way; for a read, the
    /// live holders.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<Seen>,
    /// For a grant: whether it extended a lease this owner already held.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub extended: bool,
    /// For an acquire, renewal or loss, by the guard's reckoning: until when (on this host's
    /// monotonic clock) the lease is surely held — the send of the grant or renewal that last
    /// confirmed it, plus the TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until: Option<Mono>,
    /// For people: the error, the refusal's kind, the loss's reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// A lease, permit or hold as an answer showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub name: String,
    pub owner: String,
    pub token: u64,
    /// Wall times as the server reported them, in milliseconds since the epoch.
    pub acquired_at: u64,
    pub expires_at: u64,
    /// A hold's mode or `permit`; none for a lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

/// A write a client made to the fenced resource with its token: the resource keeps, per
/// name, the highest token it took, and refuses a lower one. `at` is when the resource
/// judged it (it judges one write at a time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    pub client: u32,
    /// The acquire operation whose lease the write was made under.
    pub op: u64,
    pub name: String,
    pub token: u64,
    pub at: Mono,
    pub accepted: bool,
}

/// A fault of the nemesis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// e.g. `pause-server`, `kill-server`, `kill-node`, `pause-node`, `partition`,
    /// `clock-step`, `pause-client`.
    pub kind: String,
    /// What it hit, e.g. `server 1`, `etcd member 2`, `client 7`, `server 0 -> store`.
    pub target: String,
    /// `begin` or `heal`.
    pub phase: String,
    pub at: Mono,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// An event of a server's stream as a watcher received it. A `reset` tells no change; a
/// `snapshot` is not recorded (after a reset, one per live lease: on the embedded store, the
/// 100,000 it is filled with each time), and neither is a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The server whose stream it is on.
    pub server: u32,
    pub received: Mono,
    /// `grant`, `extend`, `renew`, `release`, `expire`, `force-release`, `refuse`, `reset`, …
    pub event: String,
    /// The event's id on that server's stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The change told: `lock`, `semaphore` or `rwlock`, the name, the owner and the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// When the lease it shows ends, in milliseconds since the epoch (as [`Seen`]): tells
    /// one renewal's event from another's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// How long a watcher followed a server's stream: from the answer of its first connection
/// (every event from there on is on the stream) until the runner stopped it, after the
/// drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watched {
    pub server: u32,
    pub from: Mono,
    pub to: Mono,
}

/// Reads a history: one [`Entry`] per non-empty line.
pub fn parse(text: &str) -> Result<Vec<Entry>, serde_json::Error> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(serde_json::from_str)
        .collect()
}
