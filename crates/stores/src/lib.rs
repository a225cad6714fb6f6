//! # fencelock-stores
//!
//! The stores behind a store address, and [`open`], which reads the address and opens the
//! right one: `memory://` for tests, `sqlite://PATH` for the embedded store, `postgres://…`,
//! `etcd://…`, `zookeeper://…` and `redis://…` (one node, or Redlock over several) for
//! stores shared by many servers.
//!
//! ```no_run
//! # async fn demo() -> Result<(), fencelock_stores::OpenError> {
//! let store = fencelock_stores::open("sqlite://fencelock.db").await?;
//! assert!(store.capabilities().durable);
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//!
//! What each store promises, in one table (the README links here). Every store keeps the
//! same rules for every kind — one live lease per lock, at most `limit` permits per
//! semaphore, readers or one writer per read-write lock (with writers' intents seen by every
//! server sharing the store), fencing tokens greater than every one issued for the name
//! before, judged release and renew, each lease bound to the principal that took it (a
//! namesake of another principal neither extends, renews nor releases it), force-release of
//! every lease, permit or hold of a name in one step — and passes the same conformance suite
//! (`crates/conformance`); they differ in what follows, and each row holds for permits and
//! holds as for locks. A durable store keeps principals across a restart, a shared one across
//! its servers; servers of a version before principals that share a PostgreSQL or etcd store
//! ignore them, so upgrade all of them before turning authentication on.
//!
//! | store | address | whose clock decides expiry | TTL granularity | durable | what a failover can lose | fit for |
//! | --- | --- | --- | --- | --- | --- | --- |
//! | embedded ([`sqlite`], the default) | `sqlite://PATH` | the server's: the wall clock read at start, then monotonic, so a clock jump moves no lease. Across a restart in the same boot of the host, the time stopped is counted exactly (Linux's `CLOCK_BOOTTIME`), whatever the wall clock did, so every lease keeps the `expires_at` it was acknowledged with, and the store's time stays apart from a wall clock stepped since its first start in that boot until the host reboots; across a reboot (or where the host cannot tell) the time stopped is not counted, so a clock stepped while it is down cannot shorten a lease (downtime prolongs them instead) | 1 ms | yes: committed and fsynced before the answer (group commit) | no failover: one server owns the file | one server; correctness with fencing tokens |
//! | [`postgres`] | `postgres://user@host:port/db` | the database's (`clock_timestamp()` of the primary): the servers' clocks do not matter, but expiry follows the database host's wall clock, so a step of that clock (forward or back) ends or prolongs every lease by the step: keep it synchronised, and slewed rather than stepped | 1 ms: a lease is stamped at the database's time rounded *up* to a whole millisecond, and lasts `ttl` from there, so never less than asked | yes: committed and flushed before the answer; the store's sessions set `synchronous_commit = on` (and READ COMMITTED, which its statements need) whatever the server's default (an address's own `options` may set them otherwise), and a commit is as durable as the server's `fsync` makes it | with asynchronous replication, the commits the new primary had not received: answered grants and releases, and the fencing tokens issued with them, so a later grant may reuse a token. With synchronous replication (`synchronous_commit = on` or `remote_apply` and a synchronous standby) nothing answered is lost. Either way the new primary's clock takes over, so leases end early or late by the difference between the two hosts' clocks | correctness with fencing tokens on one primary or with synchronous replication; efficiency only with asynchronous replication. Tokens live in the database: a new, empty database starts them again at 1, so never move the locks of resources that remember tokens to one |
//! | [`etcd`] v3 (cargo feature `etcd`) | `etcd://host:port[,host:port…]` | etcd's: a lock, a permit or a hold is one key attached to an etcd lease, which the leader's clock counts down; the servers' clocks decide nothing — except for a lock with terms (a cap or a lock-delay), whose key outlives it: its `expires_at` and the end of its delay are read on the clock of the server that judges, so keep the servers' clocks synchronised when you use terms | whole seconds, rounded **up**, and etcd may raise a short TTL to its minimum (about 1.5 × the election timeout): a lease never lasts less than asked. `acquired_at` is the granting server's time after it read the lock free (so never before the release that freed it, on synchronised clocks) and before it asked etcd for the lease, `expires_at` that plus the TTL etcd granted, and etcd frees the lock then or a little later (it looks for expired leases about every half second); until it deletes the key, `get` and `list` still show the lease. A cap cuts `expires_at` to the millisecond, inside etcd's whole seconds | yes: a quorum of members has committed it (Raft) before the answer | nothing answered; a new leader restarts lease countdowns, so a lock may outlive its `expires_at` by up to a TTL (never end sooner) | correctness with fencing tokens: tokens are etcd revisions, which the cluster never reuses (a restore from a snapshot keeps them; only a new, empty cluster starts again at 1) |
//! | [`redis`], one node | `redis://host:port` | Redis's: every operation is one Lua script that reads Redis's `TIME` and judges expiry by it, and every key also carries `PX` as a backstop, so the servers' clocks decide nothing; a step of the Redis host's clock ends or prolongs every lease by the step | 1 ms | as the node is configured: with `--save ""` and no AOF, nothing survives a restart, and a lock may then be granted again while its old holder still works; with `appendonly yes` and `appendfsync always`, what was answered survives one. Fencing tokens come from a per-name counter key that never expires and is at least Redis's time in microseconds, so even a restart that lost the data does not reuse a token unless Redis's clock went back | with an asynchronous replica promoted (Sentinel, a managed failover), the grants and releases it had not received: a lock answered as granted may be granted again to another owner. The new primary's tokens are at least its own time in microseconds, so they stay above the lost ones unless its clock is behind the old primary's | efficiency (work done once, most of the time); correctness only when the protected resource checks the fencing token |
//! | Redlock ([`redis`]) | `redis://h1:p1,h2:p2,h3:p3[,…]`: N ≥ 3 independent masters (no replication between them; two are refused) | each node's, for its own copy (the one-node script, `TIME` and `PX`); the lease's `expires_at` is its validity on the fencelock server's clock: when the server sent the grant plus `ttl` less the drift allowance (`ttl` × 0.01 + 2 ms), so it ends for its holder before any node frees it, as long as no clock runs more than 1% fast or slow against the server's. The servers' clocks must be within 30 s of the nodes': a node refuses a grant that reaches it later than its TTL and 30 s after it was sent | 1 ms, with a floor: a TTL below 300 ms is raised to 300 ms (a grant takes two round trips to a majority, must leave the lease most of its TTL, and may wait a third of it for a node). `expires_at` is the drift allowance short of `ttl` after the grant was sent; `acquired_at` is when the winning try was sent, so after a hand-over by expiry it may be up to that try's round trip before the previous lease's `expires_at` (each node judged the previous lease over by its own copy, which ends later): the holders' own times never overlap, the servers' reported times may, by that much | as each node is configured; a node that lost its data (restarted without persistence) takes part in nothing until it has been brought up to date from the others — token counters, live leases and holds, and what releases ended — so neither a lease nor a token order is lost with it, as long as the nodes it is brought up to date from kept theirs. A new Redlock starts once every node has answered | no failover: the nodes are independent. With any majority up, every call works as with all nodes (a dead or hung node is never waited for); with fewer, every call answers 503, and what a minority granted is undone (or expires by its TTL). All or none holds under every failure: a try that did not win is undone whole, also after its caller gave up, and a node that answers late changes nothing | efficiency; correctness only when the protected resource checks the fencing token: Redlock's exclusion rests on bounded clock drift and bounded pauses (a holder paused past its validity still believes it holds the lock: Redlock does not solve the pause problem), the tokens' order does not |
//! | [`zookeeper`] (cargo feature `zookeeper`) | `zookeeper://host:port[,host:port…]` | the fencelock servers': a name's state (its leases, holds, intents) is one node's data, changed by compare-and-set, and a lease is live while `now < expires_at` by the clock of the server that judges the call: keep the servers' clocks synchronised. ZooKeeper's sessions decide nothing: a server whose session expires keeps its leases until their `expires_at` | 1 ms: a lease lasts exactly its TTL | yes: a quorum has logged it before the answer (`forceSync=yes`, ZooKeeper's default) | nothing answered | correctness with fencing tokens: a token is the zxid of the write that granted it (the `czxid` of the holder's node), so it never goes back while the ensemble keeps its data (only a new, empty ensemble starts again low). Each holder also has an ephemeral sequential node (`lease-{hex owner}-{sequence}`, the owner as data) under its name's node, so `ls` shows who holds what in grant order; it goes with its server's session, the lease does not. A name's node is deleted when nothing is left of it, and each making of it has a generation (a child `gen-…`) that every write checks, so that no write judged on an earlier making passes on a later one Only servers with waiters for a name watch it |
//! | in-memory ([`MemoryStore`]) | `memory://` | the server's, as the embedded store's while it runs | 1 ms | no | everything: nothing survives the process | tests, one process |
//!
//! **Events** (`GET /events`). Every server's stream has the changes made through it, in
//! order, and each expiry its purge removed. The server also publishes each event through
//! the store ([`LockStore::publish`]: queued after the change committed and before it
//! answers, and sent on in order); each server appends the others' events to its own stream
//! with its own ids:
//!
//! | store | how other servers' events arrive | delay seen (p50 / p99, answer on one server → event on another's stream, loopback) | a server killed before it sent an event it answered for |
//! | --- | --- | --- | --- |
//! | embedded, in-memory | no other server: one server owns the file, or the process | — | — |
//! | [`postgres`] | `NOTIFY fencelock_events` by the store's notifying session, in its batches (one session per server, so in the server's order), `LISTEN` on the listening connection | 1.0 / 2.5–5.1 ms | that event is on no other server's stream (the change is in the store, and in a snapshot after a `reset`) |
//! | [`redis`], one node | `PUBLISH PREFIXevents` from a queue per node, `SUBSCRIBE` beside the release channel | 0.0–0.2 / 0.7 ms | as PostgreSQL |
//! | Redlock | published on every node; heard from each, the first copy kept (by the server's epoch and sequence) | 0.0–0.1 / 0.8 ms | as PostgreSQL; an event is lost only if no node delivered it |
//! | [`etcd`] | a key `/fencelock/events/{origin}-{seq}` per event, put with a 20 s etcd lease (reused for 10 s) by a queue in order, those waiting together in one transaction (up to 64); a watch on the prefix from the revision read as the store opens, resumed from the revision after the last put seen when it is lost | 1.3 / 5.5 ms | as PostgreSQL |
//! | [`zookeeper`] | an ephemeral sequential node `ROOT/events/e-{origin}-SEQ` per batch of a server's events waiting together (up to 64, in order, in the node's data; deleted by its server after 20 s, in one `multi` per tidy, or with its session); under sustained load (2,000 nodes kept) at most one node per 5 ms per server; a persistent recursive watch on `ROOT/events` (ZooKeeper 3.6 or later), which names each new node in sequence order: a server reads the others' and passes over its own by the origin in the name, and sets the watch again and lists the children (to catch up from the last sequence read, at first the newest listed as the store opened) at start, on a new session and each time its connection comes back (ZooKeeper does not replay to that watch what was written meanwhile, and the client does not set it again). A node gone before it was read, or a loss longer than the nodes are kept less the session's timeout, resets the streams | 0.6–0.7 / 2.0–2.6 ms | as PostgreSQL |
//!
//! An expiry is an event of the one server whose purge removed the lease (or whose grant
//! replaced it), so it appears once on every stream and is counted by one server. Under
//! Redlock, two servers purging at the same moment may each remove the lease from some of the
//! nodes, and a node one purge did not reach is purged again later
//! ([`Capabilities::expiries_repeat_within`](fencelock_core::Capabilities)): each server
//! drops a repeat of an expiry it appended in the last 90 s (its own or another's), so it
//! still appears once on every stream; only the two purges at the same moment may each count
//! it in `fencelock_leases_expired_total`. etcd deletes an expired lease's key
//! itself: every server's watch sees that deletion (told apart from a release by the mark
//! a release writes in its transaction), and the first server to claim it in etcd tells it
//! (see [`etcd`], "Expiries"), within its purge interval; a lease with a cap or a lock-delay
//! is told when its key goes — at the end of its lock-delay, or at the first acquire after
//! its `expires_at`, whichever comes first — with `at` its `expires_at` either way. Events of
//! two servers about one name arrive in the order they reach the store's channel, which may
//! differ from the order of the changes by the delay above: order them by `fencing_token`
//! and `at` where it matters.
//!
//! A store's channel is best effort, and a loss is never silent but in two cases. A server
//! killed loses the events still in its queue to the store (the last column above), and it
//! starts again under a new epoch, so nobody sees a gap. And a server counts another's
//! events from 1 only if that one started more than 2 s after it by their wall clocks;
//! from the first it hears for one that started before (what that one told earlier was
//! never this one's to hear), so the first events of a server started within those 2 s,
//! lost before any of its events arrived, go unseen (and a clock stepped ahead may cost one
//! needless reset). Each server numbers the events it tells 1, 2, 3, … from each start; a
//! server that hears one after a gap in another's numbers (an event the other could not
//! queue or send: the store down, its queue of 4,096 full), that lost its subscription to the others' events (PostgreSQL's `LISTEN`, one Redis node's
//! `SUBSCRIBE`: renewed, with whatever was sent meanwhile lost; etcd's watch only when etcd
//! compacted the history it resumes from), or that fell behind them, appends a `reset` to its
//! own stream: every open stream then says `reset` and sends a snapshot of what is live, and
//! a stream resuming from an id before it gets `reset` too. A server that stops after it lost
//! an event, telling nothing more, leaves no gap to see: a server keeps the last event that
//! found its queue full and sends it once the queue is drained, so the gap shows then.
//! The torture suite checks all of this on every store (`docs/TORTURE.md`, *event
//! streams*): a watcher follows each server's stream through every fault, a marker through
//! each server at the end makes any gap show, and every change a client was told of must be
//! on every stream, or be followed there by a `reset` before that server's next change —
//! but for one through a server killed soon after, before it told anything later — and
//! nothing may be told that did not happen, twice, or out of a server's order.
//!
//! **Elections** (`/elections/{name}`) are kept on every store as the lock `"\u{1}" + NAME`
//! (a name no client can send), with the leader's value, TTL and `since` in the lease's
//! metadata: each row above holds for them as for locks, a term is that lock's fencing
//! token, and their events travel as locks' do (the delays above). A vacancy by expiry (a
//! leader that died or was paused past its TTL) is a `vacant` event on every store, told as
//! an expiry is (above).
//!
//! What each store survived under faults — servers, store nodes and clients paused and
//! killed, partitions, slow networks, stepped clocks — is in the torture suite's table
//! (`docs/TORTURE.md`, with the command that reproduces each row): every row above holds,
//! its caveats where they are stated.
//!
//! # Layout
//!
//! - [`SCHEMES`]: one row per store address scheme (its names, cargo feature, example
//!   address, and how to open it). [`open`], [`supported_schemes`], the "not built" error
//!   and the `features` test all read it; adding a store is adding a row.
//! - [`Deadline`]: any [`LockStore`] with a deadline on every call; the stores on a network
//!   server are opened in one. [`open`] also lets the calls on one name take turns
//!   ([`fencelock_core::Turns`]) on the stores that change a name by compare-and-set
//!   ([`Scheme::takes_turns`]).
//! - [`sqlite`] (feature `sqlite`, on by default): [`sqlite::SqliteStore`], one SQLite file
//!   owned by one server, with group commit.
//! - [`postgres`] (feature `postgres`, on by default): [`postgres::PostgresStore`], a
//!   PostgreSQL database shared by many servers.
//! - [`etcd`] (feature `etcd`, off by default: its build needs `protoc`):
//!   [`etcd::EtcdStore`], an etcd cluster shared by many servers.
//! - [`redis`] (feature `redis`, on by default): [`redis::RedisStore`], one Redis node, or
//!   Redlock over three or more independent ones, shared by many servers; every operation is
//!   one Lua script (`redis/fencelock.lua`) on each node.
//! - [`zookeeper`] (feature `zookeeper`, off by default: its client adds about a hundred
//!   crates): [`zookeeper::ZooKeeperStore`], a ZooKeeper ensemble shared by many servers.
//! - The in-memory store is [`fencelock_core::MemoryStore`]; it lives in the core crate as
//!   the reference every store is tested against.
//!
//! Each store is one module with its own private error enum, converted into
//! [`StoreError`] in one place; no driver type crosses the [`LockStore`] trait.

use std::pin::Pin;
use std::sync::Arc;

use fencelock_core::{Layered, LockStore, MemoryStore, StoreError, Turns};

mod deadline;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod event_channel;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
// What the stores that many servers share have in common: built with any of them (the
// internal feature `shared`, which each of their features turns on). A build with only some
// of them leaves the parts the others use unused, hence `allow(dead_code)` on those.
#[cfg(feature = "shared")]
#[allow(
    dead_code,
    reason = "PostgreSQL has no members to read; only etcd and ZooKeeper encode owners"
)]
mod remote;
#[cfg(feature = "shared")]
#[allow(
    dead_code,
    reason = "only etcd and ZooKeeper back off, so a build without them leaves it unused"
)]
mod retry;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(feature = "shared")]
mod subscription;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

pub use deadline::Deadline;

/// A store address scheme: everything [`open`], the error messages, the command line and the
/// `features` test need to know of one store.
#[derive(Debug)]
pub struct Scheme {
    /// The scheme's names, lower case, as written before `://` (`["postgres", "postgresql"]`).
    pub names: &'static [&'static str],
    /// The cargo feature that builds the store, or `None` if it is always built.
    pub feature: Option<&'static str>,
    /// What an address looks like, for people (`"sqlite://PATH"`).
    pub example: &'static str,
    /// What the store's build needs besides the Rust toolchain, if anything: said when the
    /// store is not built.
    pub build_needs: Option<&'static str>,
    /// Whether the store changes a name by compare-and-set, trying again when another call
    /// changed it in between: [`open`] then lets one call per name reach it at a time
    /// ([`Turns`]), so that calls through one server never try again because of each other.
    pub takes_turns: bool,
    /// Opens an address of this scheme (the whole address, and what follows `://`); `None`
    /// when this build left the store out.
    open: Option<OpenFn>,
}

/// How a [`Scheme`] opens an address: `(address, rest after "://")`.
type OpenFn = for<'a> fn(&'a str, &'a str) -> Opening<'a>;

/// The future of opening a store.
type Opening<'a> = Pin<Box<dyn Future<Output = Result<Arc<dyn LockStore>, OpenError>> + Send + 'a>>;

impl Scheme {
    /// Whether this build has the store.
    pub fn is_built(&self) -> bool {
        self.open.is_some()
    }
}

/// Every store address scheme fencelock knows, built into this binary or not.
pub const SCHEMES: &[Scheme] = &[
    Scheme {
        names: &["memory"],
        feature: None,
        example: "memory://",
        build_needs: None,
        takes_turns: false,
        open: Some(open_memory),
    },
    Scheme {
        names: &["sqlite"],
        feature: Some("sqlite"),
        example: "sqlite://PATH",
        build_needs: None,
        takes_turns: false,
        #[cfg(feature = "sqlite")]
        open: Some(sqlite::open),
        #[cfg(not(feature = "sqlite"))]
        open: None,
    },
    Scheme {
        names: &["postgres", "postgresql"],
        feature: Some("postgres"),
        example: "postgres://USER@HOST:PORT/DB",
        build_needs: None,
        takes_turns: false,
        #[cfg(feature = "postgres")]
        open: Some(postgres::open),
        #[cfg(not(feature = "postgres"))]
        open: None,
    },
    Scheme {
        names: &["redis"],
        feature: Some("redis"),
        example: "redis://HOST:PORT[,HOST:PORT,HOST:PORT...]",
        build_needs: None,
        // For Redlock, whose nodes may each take another of two concurrent calls on a name
        // first; one node's scripts pay a map lookup for it.
        takes_turns: true,
        #[cfg(feature = "redis")]
        open: Some(redis::open),
        #[cfg(not(feature = "redis"))]
        open: None,
    },
    Scheme {
        names: &["etcd"],
        feature: Some("etcd"),
        example: "etcd://HOST:PORT[,HOST:PORT...]",
        build_needs: Some("protoc: apt-get install protobuf-compiler"),
        takes_turns: true,
        #[cfg(feature = "etcd")]
        open: Some(etcd::open),
        #[cfg(not(feature = "etcd"))]
        open: None,
    },
    Scheme {
        names: &["zookeeper"],
        feature: Some("zookeeper"),
        example: "zookeeper://HOST:PORT[,HOST:PORT...]",
        build_needs: None,
        takes_turns: true,
        #[cfg(feature = "zookeeper")]
        open: Some(zookeeper::open),
        #[cfg(not(feature = "zookeeper"))]
        open: None,
    },
];

/// Why a store address could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The address has no scheme, or one this build does not know.
    #[error("unsupported store address {address:?}: expected one of {}", supported_schemes().join(", "))]
    UnsupportedScheme {
        /// The address as given.
        address: String,
    },
    /// The store is one fencelock has, but this build left it out.
    #[error(
        "this fencelock was built without the {feature} store, needed for {address:?}: build it \
         with `--features {feature}`{}",
        build_needs.map(|needs| format!(" (the {feature} store needs {needs})")).unwrap_or_default()
    )]
    NotBuilt {
        /// The address as given.
        address: String,
        /// The cargo feature that builds the store.
        feature: &'static str,
        /// What that feature's build needs besides the Rust toolchain, if anything.
        build_needs: Option<&'static str>,
    },
    /// The scheme is known but the rest of the address is not right for it.
    #[error("invalid store address {address:?}: {reason}")]
    InvalidAddress {
        /// The address as given.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The address is fine; the store refused to open (e.g. its file is in use).
    #[error("cannot open the store at {address:?}: {source}")]
    Store {
        /// The address as given.
        address: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}

/// The address forms this build can open, as written in error messages.
pub fn supported_schemes() -> Vec<&'static str> {
    SCHEMES
        .iter()
        .filter(|scheme| scheme.is_built())
        .map(|scheme| scheme.example)
        .collect()
}

/// Opens the store at `address`, by the row of [`SCHEMES`] its scheme names:
///
/// - `memory://`: a new, empty [`MemoryStore`] (nothing shared, nothing kept);
/// - `sqlite://PATH`: the embedded store in the file at `PATH`, relative to the current
///   folder (`sqlite://fencelock.db`) or absolute (`sqlite:///var/lib/fencelock.db`); the
///   file is created if missing, and refused if another server has it open.
/// - `postgres://USER[:PASSWORD]@HOST:PORT/DB` (or `postgresql://`): a PostgreSQL database
///   that many servers may share; see [`postgres`]. The schema is created or upgraded.
/// - `etcd://HOST:PORT[,HOST:PORT…]`: an etcd cluster that many servers may share, given by
///   the client addresses of its members; see [`etcd`].
/// - `zookeeper://HOST:PORT[,HOST:PORT…]`: a ZooKeeper ensemble that many servers may share,
///   given by the client addresses of its members; see [`zookeeper`].
///
/// Schemes are case-insensitive.
pub async fn open(address: &str) -> Result<Arc<dyn LockStore>, OpenError> {
    let unsupported = || OpenError::UnsupportedScheme {
        address: address.into(),
    };
    let (scheme, rest) = address.split_once("://").ok_or_else(unsupported)?;
    let scheme = scheme.to_ascii_lowercase();
    let row = SCHEMES
        .iter()
        .find(|row| row.names.contains(&scheme.as_str()))
        .ok_or_else(unsupported)?;
    match (row.open, row.feature) {
        (Some(open), _) if row.takes_turns => {
            let store = open(address, rest).await?;
            Ok(Arc::new(Layered::new(store, Turns::new())))
        }
        (Some(open), _) => open(address, rest).await,
        (None, Some(feature)) => Err(OpenError::NotBuilt {
            address: address.into(),
            feature,
            build_needs: row.build_needs,
        }),
        (None, None) => Err(unsupported()),
    }
}

fn open_memory<'a>(address: &'a str, rest: &'a str) -> Opening<'a> {
    let opened = if rest.is_empty() {
        opened(address, Ok(MemoryStore::new()))
    } else {
        Err(invalid(address, "memory:// takes nothing after the scheme"))
    };
    Box::pin(std::future::ready(opened))
}

/// What [`open`] answers for a store that `opening` gave: the store, or why not. A store's
/// [`StoreError::Invalid`] at open is the address's fault.
fn opened<S: LockStore>(
    address: &str,
    opening: Result<S, StoreError>,
) -> Result<Arc<dyn LockStore>, OpenError> {
    match opening {
        Ok(store) => Ok(Arc::new(store)),
        Err(StoreError::Invalid(reason)) => Err(invalid(address, &reason)),
        Err(source) => Err(OpenError::Store {
            address: address.into(),
            source,
        }),
    }
}

fn invalid(address: &str, reason: &str) -> OpenError {
    OpenError::InvalidAddress {
        address: address.into(),
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn refusal(address: &str) -> OpenError {
        open(address).await.expect_err(address)
    }

    #[tokio::test]
    async fn memory_opens_an_empty_volatile_store() {
        for address in ["memory://", "MEMORY://"] {
            let store = open(address).await.unwrap();
            assert!(!store.capabilities().durable);
            assert!(store.releases().is_some());
        }
        let error = refusal("memory://x").await;
        assert!(matches!(error, OpenError::InvalidAddress { .. }), "{error}");
    }

    #[tokio::test]
    async fn unknown_or_missing_schemes_list_the_supported_ones() {
        assert_eq!(
            supported_schemes().contains(&"sqlite://PATH"),
            cfg!(feature = "sqlite")
        );
        for address in ["fencelock.db", "mysql://db", "", "sqlite:fencelock.db"] {
            let error = refusal(address).await;
            assert!(matches!(error, OpenError::UnsupportedScheme { .. }), "{error}");
            let message = error.to_string();
            for scheme in supported_schemes() {
                assert!(message.contains(scheme), "{message}");
            }
        }
    }

    #[test]
    fn every_scheme_name_is_lower_case_and_names_one_row() {
        let names: Vec<&str> = SCHEMES.iter().flat_map(|row| row.names.iter().copied()).collect();
        for name in &names {
            assert_eq!(*name, name.to_ascii_lowercase());
            assert_eq!(names.iter().filter(|n| *n == name).count(), 1, "{name}");
        }
        for row in SCHEMES {
            assert!(
                row.names
                    .iter()
                    .any(|name| row.example.starts_with(&format!("{name}://")))
            );
        }
    }

    #[test]
    fn a_store_left_out_says_how_to_build_it() {
        let etcd = SCHEMES.iter().find(|row| row.names == ["etcd"]).unwrap();
        let error = OpenError::NotBuilt {
            address: "etcd://h:1".into(),
            feature: "etcd",
            build_needs: etcd.build_needs,
        };
        assert_eq!(
            error.to_string(),
            "this fencelock was built without the etcd store, needed for \"etcd://h:1\": build it \
             with `--features etcd` (the etcd store needs protoc: apt-get install protobuf-compiler)"
        );
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_opens_a_relative_or_absolute_path() {
        let dir = tempfile::tempdir().unwrap();
        let absolute = dir.path().join("abs.db");
        let store = open(&format!("sqlite://{}", absolute.display())).await.unwrap();
        assert!(store.capabilities().durable);
        assert!(absolute.exists());
        drop(store);

        // A relative path is taken from the current folder (climbed to the root here, as the
        // temporary folder may be anywhere); the scheme's case does not matter.
        let cwd = std::env::current_dir().unwrap();
        let up = "../".repeat(cwd.components().count() - 1);
        let relative = format!(
            "{up}{}",
            dir.path().join("rel.db").strip_prefix("/").unwrap().display()
        );
        let store = open(&format!("SQLite://{relative}")).await.unwrap();
        store.ping().await.unwrap();
        assert!(dir.path().join("rel.db").exists());
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_needs_a_path_and_a_usable_file() {
        let error = refusal("sqlite://").await;
        assert!(matches!(error, OpenError::InvalidAddress { .. }), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/folder/x.db");
        let error = refusal(&format!("sqlite://{}", missing.display())).await;
        assert!(matches!(error, OpenError::Store { .. }), "{error}");
        assert!(error.to_string().contains("no/such/folder/x.db"), "{error}");
    }
}
