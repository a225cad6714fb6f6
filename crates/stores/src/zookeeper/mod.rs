//! [`ZooKeeperStore`] (`zookeeper://host:port[,host:port…]`): leases — of locks, of
//! semaphores' permits and of read-write locks' holds — kept in a ZooKeeper ensemble, shared
//! by any number of fencelock servers.
//!
//! Its guarantees are in the [crate's guarantee table](crate#guarantees).
//!
//! # One node per name, judged by the rule book
//!
//! - Each name of each kind has one persistent **parent node**,
//!   `/fencelock/{locks|semaphores|rwlocks}/{hex of the name's bytes}`. Hex keeps the order
//!   of the bytes (so sorted children list in the names' order, as `list` must) and no name
//!   can break a path (a `/` in a name is `2f`). Its data is the name's whole state as JSON:
//!   the lease (a lock: live, or expired and kept for its lock-delay) or the holds and
//!   writers' intents (a semaphore, a read-write lock), each with its owner, `principal`,
//!   `token` (none for the lease its last write granted: see below), `acquired_at`,
//!   `expires_at`, `hold_until`, `lock_delay` and claim (a permit's `limit`). A name never
//!   used, or of which nothing is left, has no data.
//! - Every call is judged by [`fencelock_core::LockTable`], loaded with the names it touches
//!   and nothing else, so the rules are written once for every store that keeps state itself
//!   (memory, SQLite, ZooKeeper), not a third time here.
//! - **Every change is a compare-and-set**: read the parent's data and `Stat`, apply the call
//!   to the table, and write the new state with `setData` at the version read, in one `multi`
//!   with every other parent the call touches (a `check` for those it left unchanged). A
//!   parent is made by the `multi` of the first call that gives its name a state (a
//!   `create`, then its `setData`), and deleted by the `multi` of the call that leaves its
//!   name with nothing (no lease, hold or intent, nothing kept for a lock-delay), after its
//!   holders' nodes, at the version read — so a grant on a new name is one read and one
//!   write, as on any other. A node made again after a deletion starts its versions (and its
//!   holders' sequence numbers) from 0 again, so a write judged on the node before would pass
//!   on it: each node has a **generation**, a random number its making gives it (kept in its
//!   data, and as its persistent child `gen-{generation}`, which goes only with it), and every
//!   `multi` on a node first checks that child, so that it fails (`NoNode`) on any other
//!   making of the name. On `BadVersion`, `NoNode`, `NodeExists` or `NotEmpty` another
//!   call changed, deleted or made the name in between — another server's, since the calls
//!   of one server on a name take turns ([`fencelock_core::Turns`], where [`crate::open`]
//!   opens the store) — so read again and judge again, after a random pause that doubles
//!   with each try, until the call's deadline ([`ZooKeeperOptions::call_timeout`]):
//!   contention costs time, not an error. Several locks at once
//!   ([`LockStore::acquire_all`]) are one `multi` over every parent, so all are granted or
//!   none. A refusal writes nothing, but its `multi` still checks the version it was judged
//!   on: writes go through the leader, so the refusal is of the name as it is, not of a
//!   member's lagging copy. A name with no node cannot be checked so: a call that leaves one
//!   as it is (a release of a name never used, a refusal of several locks at once) reads it
//!   again after a `sync` with the leader, and judges again. Reads (`get`, `holds`, `list`)
//!   `sync` the member with the leader first.
//! - **A name's state fits in one node**: ZooKeeper keeps at most about 1 MiB in one
//!   (`jute.maxbuffer`), a few thousand holds. A grant that would write more
//!   ([`ZooKeeperOptions::max_state_bytes`]) is refused ([`StoreError::Invalid`]) and changes
//!   nothing, so a semaphore of a very high limit may
//!   refuse permits before its limit is reached. Each change of a name also rewrites its
//!   whole state, so one name with many holders is slower to change than one with few.
//! - **Whose clock**: a lease is live while `now < expires_at` by the clock of the fencelock
//!   server that judges the call (`Timestamp::now_wall`), as etcd's store does for leases
//!   with terms. ZooKeeper keeps no time of its own for us: keep the servers' clocks
//!   synchronised, since a server whose clock runs ahead ends other servers' leases early.
//!   ZooKeeper's sessions play no part in how long a lease lasts: it lasts exactly its TTL
//!   (to the millisecond), never less, whatever happens to the session of the server that
//!   granted it.
//!
//! # Fencing tokens are transaction ids
//!
//! A grant's token is the **zxid of the write that grants it**: the `multi` that sets the
//! parent's data also makes the holder's node (below), so the token is that node's `czxid`,
//! and the parent's `mzxid` until its next change. ZooKeeper gives every write a zxid greater
//! than every zxid before it, across the ensemble and its leader elections (a zxid is
//! `epoch << 32 | counter`, and a new leader starts a greater epoch), so tokens strictly
//! increase and are never reused — across releases, expiries, restarts, and a name whose node
//! was deleted and that is used again (its new node's writes come later still). Several
//! locks at once share one write, and so one token: each is still greater than every earlier
//! token of its own name.
//!
//! The zxid is known only once the write commits, so the table judges with tokens of its own
//! above every zxid (`state::PENDING`); the write stores a new lease with no token, which a
//! read takes as the node's `mzxid` (the write's own zxid, as long as it is the node's last:
//! every later write stores the tokens it read, settled), and the answer gets the zxid from
//! the write's result. Tokens are not consecutive: between two grants of a name they jump by
//! every change the ensemble made meanwhile, to any name.
//!
//! # Holders' nodes and sessions
//!
//! Each lease and hold also has an **ephemeral sequential node** under its parent,
//! `lease-{hex of the owner's name}-{sequence number}`, with the owner's name as data, made in
//! the `multi` that grants it by the session of the server that grants it (so its `czxid` is
//! the lease's token), and deleted in the `multi` that ends it (a release, a purge, a
//! replacement, a force-release; a name has one lease or hold per owner, so the owner's part
//! finds it again). So each lease or hold has its node from its grant until it ends — released,
//! replaced, or purged after its expiry (an expired lease kept for its lock-delay keeps it too)
//! — unless its server's session ends first: the holders of a lock, the permits of a
//! semaphore, the readers or the writer of a read-write lock, in the order of their sequence
//! numbers, which is the order of their grants and of their tokens. `ls` in ZooKeeper shows
//! who holds what, and which server's session granted it.
//!
//! Who may be granted is decided by the parent's state, not by the lowest sequence numbers, for
//! three reasons. A lease must not end before its `expires_at` (an ephemeral node ends with a
//! session, which may expire while its holder still counts on its TTL). A waiter is no node:
//! waiting in line is each server's job ([`fencelock_core::Waiters`]), so an acquire that is
//! refused leaves nothing behind, where a try with Curator's recipe makes and deletes a node,
//! and two tries at once can each see the other's node first and both give up. And the rules
//! (lock-delay, `hold_until`, principals, writers' intents) are the one rule book's.
//!
//! How the lease and the session combine: the lease lives in its parent's data until its
//! `expires_at`, by the clock of the server that judges; the session only carries the
//! holder's node. A fencelock server whose session expires loses its holders' nodes, never a
//! lease before its `expires_at`, so a lease never lasts less than asked. Its guards cannot
//! renew meanwhile (the server is cut off), so their `lost()` fires by the lease's
//! `expires_at` less their safety margin: always before any other owner can be granted the
//! name. The session timeout only bounds how soon a server notices that it was cut off. An
//! expired session's client is dead; the next call (or a watch) opens a new session, whose
//! later grants have nodes again (the leases granted before keep none).
//!
//! # Release notices: a watch per name with waiters
//!
//! A server watches only the names its waiters wait for ([`LockStore::watch`], kept by each
//! name's line in [`fencelock_core::Waiters`]): one one-shot watch on the name's parent node,
//! set again each time it fires (a change, the node's deletion or creation), and the name is
//! announced once it is set again, so no change after the one that fired goes unheard. A
//! change of a name thus reaches only the servers with waiters for it, once each, and on each
//! only the first in line asks again: no herd, of waiters or of servers. A renewal fires it
//! too (it may end the lease sooner), for one more try by the head of each waiting server (a
//! refusal, whose `multi` checks the version it judged on the leader). The watch is set when
//! a server's waiter is first refused, and that waiter asks again at once, in case the name
//! changed in between; an acquire that finds the name free costs no watch. A release that
//! leaves the name with nothing deletes its node: the watch fires for the deletion, is set
//! again on no node (a watch on its existence), and fires again for the grant that makes it.
//!
//! A one-shot watch outlives a lost connection: the client sets it again on its next
//! connection from the last zxid it saw, and the member fires it for a change made meanwhile.
//! It ends with its session, and is set again on the next one (then announced, in case). Each
//! call that frees a name also announces it at once on its own server.
//!
//! The state's format changed with this (2026-12-02, before any release: tokens were then
//! counted above each node's `mzxid`, and kept as a last token): a `/fencelock` tree written
//! by an earlier build must be deleted before this one serves it, and every server sharing an
//! ensemble runs the same build.
//!
//! # Purge
//!
//! [`LockStore::purge_expired`] reads at most [`PURGE_BATCH`] parents per call, walking over
//! every name with a node of every kind, and forgets what is over in them through the same
//! compare-and-set, which deletes a parent it leaves with nothing, as a release does; a
//! parent found empty (left so by an earlier build) is deleted at the version read (so only
//! if it is still empty and unchanged). So folders do not grow with every name ever used.
//! Tokens being zxids, a name made again later still gets greater ones. The names are listed
//! once a walk, not once a call, so that a call's cost does not grow with their number; a
//! name made since the listing is read in the next walk.
//!
//! # Failure
//!
//! ZooKeeper's session timeout is no floor on a TTL here, since no lease rests on a session:
//! the capabilities differ from the in-memory store's in nothing.
//!
//! Every call has a deadline (the store is opened in a [`Deadline`]). `ConnectionLoss`, an
//! expired session, a timeout: [`StoreError::Unavailable`], and the outcome is **unknown** —
//! a write whose answer was lost may have been applied (ZooKeeper applies it once a quorum
//! is back). Without a quorum nothing is granted. Tested with ZooKeeper 3.8; needs 3.6 or
//! later (the events follow a persistent watch).
//!
//! [`StoreError::Unavailable`]: fencelock_core::StoreError::Unavailable
//! [`StoreError::Invalid`]: fencelock_core::StoreError::Invalid

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::store::{PURGE_BATCH, Result};
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Bulletin, Capabilities, Claim, Expired, FencingToken, ForceOutcome,
    Hold, HoldKind, HoldOutcome, HoldPage, Key, Kind, Lease, LeasePage, ListQuery, LockStore, LockTable,
    Meta, Owner, ReleaseFeed, ReleaseNotice, ReleaseOutcome, RenewOutcome, Resource, Resources, StoreError,
    Terms, Timestamp, Ttl, Watch,
};
use futures_util::future::try_join_all;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{self as zk, MultiWriteError};

use crate::deadline::{Deadline, Within, within};
use crate::retry::Backoff;

mod error;
mod events;
mod session;
mod state;

use error::ZkError;
use session::Session;
use state::{Holder, Read, State, Versioned};

/// The store's name in error messages.
const STORE: &str = "ZooKeeper";

/// How many parents a list reads at once.
const READ_BATCH: usize = 64;

/// Persistent nodes anyone may read and write (fencelock's servers are its only clients).
const FOLDER: zk::CreateOptions<'static> = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());

/// A holder's node: ephemeral, of the session of the server that granted the lease, and
/// sequential.
const HOLDER: zk::CreateOptions<'static> =
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());

/// How a [`ZooKeeperStore`] connects and how long it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZooKeeperOptions {
    /// The session timeout asked for; the ensemble clamps it to its own bounds (by default
    /// 2 to 20 ticks). It bounds how soon a cut-off server is noticed, never a lease.
    pub session_timeout: Duration,
    /// How long to wait for a connection to a member.
    pub connect_timeout: Duration,
    /// The most one call may take, whatever happens on the network.
    pub call_timeout: Duration,
    /// The node under which every name's node is kept.
    pub root: String,
    /// The most data the store writes into one name's node: a grant that would write more
    /// is refused ([`StoreError::Invalid`]). The default is a little under ZooKeeper's limit
    /// on a request (`jute.maxbuffer`, 1 MiB unless the ensemble is run with another), above
    /// which a member refuses the write and drops the connection.
    ///
    /// [`StoreError::Invalid`]: fencelock_core::StoreError::Invalid
    pub max_state_bytes: usize,
}

impl Default for ZooKeeperOptions {
    fn default() -> Self {
        Self {
            session_timeout: Duration::from_secs(6),
            connect_timeout: Duration::from_secs(2),
            call_timeout: Duration::from_secs(5),
            root: "/fencelock".into(),
            max_state_bytes: 1_000_000,
        }
    }
}

/// Where the nodes of names are.
#[derive(Debug, Clone)]
pub(super) struct Paths {
    root: String,
}

impl Paths {
    const KINDS: [Kind; 3] = [Kind::Lock, Kind::Semaphore, Kind::RwLock];

    fn new(root: &str) -> Self {
        Self { root: root.into() }
    }

    /// The node under which servers' events are written (see `events`).
    fn events(&self) -> String {
        format!("{}/events", self.root)
    }

    fn folder_name(kind: Kind) -> &'static str {
        match kind {
            Kind::Lock => "locks",
            Kind::Semaphore => "semaphores",
            Kind::RwLock => "rwlocks",
        }
    }

    fn folder(&self, kind: Kind) -> String {
        format!("{}/{}", self.root, Self::folder_name(kind))
    }

    fn node(&self, key: &Key) -> String {
        format!("{}/{}", self.folder(key.kind), state::hex(key.name.as_str()))
    }
}

/// Opens `zookeeper://…` for [`crate::open`]: `rest` is what follows the scheme.
pub(crate) fn open<'a>(address: &'a str, rest: &'a str) -> crate::Opening<'a> {
    Box::pin(async move {
        crate::opened(
            address,
            ZooKeeperStore::connect(&format!("zookeeper://{rest}")).await,
        )
    })
}

/// A [`LockStore`] in a ZooKeeper ensemble; see the module docs for how it keeps the rules.
/// [`connect`](ZooKeeperStore::connect) gives it wrapped in its call [`Deadline`].
pub struct ZooKeeperStore {
    session: Arc<Session>,
    paths: Paths,
    feed: ReleaseFeed,
    /// The names the purge has yet to read in its walk over every name with a node, listed
    /// when the last walk is through (see [`ZooKeeperStore::next_to_purge`]).
    to_purge: Mutex<VecDeque<Key>>,
    /// The most setting a watch may take before [`LockStore::watch`] answers (it goes on
    /// trying afterwards).
    call_timeout: Duration,
    /// [`ZooKeeperOptions::max_state_bytes`].
    max_state_bytes: usize,
    /// This server's events told to the others, and theirs heard.
    events: crate::event_channel::EventChannel,
}

impl fmt::Debug for ZooKeeperStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperStore")
            .field("session", &self.session)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

impl ZooKeeperStore {
    /// Connects to the members in `url` (`zookeeper://host:port[,host:port…]`) with default
    /// options, and makes the folders of names. Must be called within a Tokio runtime.
    pub async fn connect(url: &str) -> Result<Deadline<Self>> {
        Self::connect_with(url, ZooKeeperOptions::default()).await
    }

    /// As [`ZooKeeperStore::connect`], with `options`.
    pub async fn connect_with(url: &str, options: ZooKeeperOptions) -> Result<Deadline<Self>> {
        let cluster = cluster(url)?;
        if !options.root.starts_with('/') || options.root.ends_with('/') {
            return Err(ZkError::Invalid(format!(
                "the root {:?} must start with / and not end with one",
                options.root
            ))
            .into());
        }
        let (limit, max_state_bytes) = (options.call_timeout, options.max_state_bytes);
        let paths = Paths::new(&options.root);
        let (session, events) = within(limit, STORE, "connect", async {
            let session = Session::connect(cluster, options).await?;
            let client = session.client().await?;
            for kind in Paths::KINDS {
                client
                    .mkdir(&paths.folder(kind), &FOLDER)
                    .await
                    .map_err(ZkError::request("make the folders"))?;
            }
            client
                .mkdir(&paths.events(), &FOLDER)
                .await
                .map_err(ZkError::request("make the folders"))?;
            let session = Arc::new(session);
            // Other servers' events are heard from here on, however late the events watch
            // is first set: none told once this answers is skipped.
            let events = events::start(session.clone(), paths.events()).await?;
            Ok((session, events))
        })
        .await?;
        let store = Self {
            events,
            session,
            paths,
            feed: ReleaseFeed::new(),
            to_purge: Mutex::new(VecDeque::new()),
            call_timeout: limit,
            max_state_bytes,
        };
        Ok(Deadline::new(store, Within::new(STORE, limit)))
    }

    /// Reads the node of `key`: `None` in the read's `stat` if there is none.
    async fn read(&self, client: &zk::Client, key: &Key) -> Result<Read, ZkError> {
        let path = self.paths.node(key);
        let found = match client.get_data(&path).await {
            Ok((data, stat)) => Some((data, versioned(&stat)?)),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(ZkError::request("read")(e)),
        };
        Read::new(key.clone(), path, found)
    }

    /// Reads the nodes of `keys` as they are on the leader (a `sync` first), into a table.
    async fn read_now(&self, keys: &[Key]) -> Result<(LockTable, Timestamp), ZkError> {
        let client = self.session.client().await?;
        client
            .sync(&self.paths.root)
            .await
            .map_err(ZkError::request("sync"))?;
        let reads = try_join_all(keys.iter().map(|key| self.read(&client, key))).await?;
        let now = Timestamp::now_wall();
        Ok((state::table(&reads, now), now))
    }

    /// Applies `apply` to a table loaded with the states of `keys`, and writes back what it
    /// changed in one `multi` guarded by the versions read; reads and applies again if any
    /// node changed in between. See the module docs.
    async fn change<T: Settle>(
        &self,
        doing: &'static str,
        keys: &[Key],
        mut apply: impl FnMut(&mut LockTable, Timestamp) -> Result<T>,
    ) -> Result<T> {
        let client = self.session.client().await?;
        let mut backoff = Backoff::within(self.call_timeout);
        let mut synced = false;
        loop {
            let reads = try_join_all(keys.iter().map(|key| self.read(&client, key))).await?;
            let now = Timestamp::now_wall();
            let mut table = state::table(&reads, now);
            let mut outcome = apply(&mut table, now)?;
            let afters: Vec<State> = reads.iter().map(|read| state::after(read, &table)).collect();
            let untouched = |(read, after): (&Read, &State)| read.stat.is_none() && *after == read.state;
            // A name with no node that the call leaves so has nothing a `multi` can check:
            // it is read again after a `sync` with the leader, so that the answer is not of a
            // lagging member's copy.
            if !synced && reads.iter().zip(&afters).any(untouched) {
                client
                    .sync(&self.paths.root)
                    .await
                    .map_err(ZkError::request(doing))?;
                synced = true;
                continue;
            }
            if reads.iter().zip(&afters).all(untouched) {
                return Ok(outcome);
            }
            let changes: Vec<_> = reads
                .iter()
                .zip(&afters)
                .map(|(read, after)| state::holder_changes(&read.state, after))
                .collect();
            // Only a call that ends a lease, or leaves a name with nothing, needs to know
            // which holders' nodes are there (one whose session ended is gone already); the
            // others skip the read.
            let present = try_join_all(reads.iter().zip(&afters).zip(&changes).map(
                |((read, after), changes)| async {
                    let ends = changes.iter().any(|(_, change)| matches!(change, Holder::Ended));
                    if ends || (read.stat.is_some() && state::is_empty(after)) {
                        holders(&client, read).await
                    } else {
                        Ok(Vec::new())
                    }
                },
            ))
            .await?;
            let mut multi = client.new_multi_writer();
            for (((read, after), changes), present) in reads.iter().zip(&afters).zip(&changes).zip(&present) {
                self.add_writes(&mut multi, doing, read, after, changes, present)?;
            }
            match multi.commit().await {
                Ok(results) => {
                    // Every write of the multi has its zxid: the token of what it granted.
                    let written = results.iter().find_map(|result| match result {
                        zk::MultiWriteResult::SetData { stat } => Some(stat.mzxid),
                        _ => None,
                    });
                    match written {
                        Some(sent) => outcome.settle(FencingToken(zxid(sent)?)),
                        // A grant changes its name's state, so its multi has a `setData`.
                        None if table.last_token() > state::PENDING => {
                            return Err(ZkError::Corrupt(format!(
                                "a {doing} granted a lease and wrote no state"
                            ))
                            .into());
                        }
                        None => {}
                    }
                    for key in table.take_freed() {
                        self.feed.announce(&key);
                    }
                    return Ok(outcome);
                }
                // The name changed (another server's call: this server's take turns), its
                // node was deleted or made meanwhile, a holder's node went, or a node
                // appeared under one that the call would delete.
                Err(MultiWriteError::OperationFailed {
                    source:
                        zk::Error::BadVersion | zk::Error::NoNode | zk::Error::NodeExists | zk::Error::NotEmpty,
                    ..
                }) => backoff.pause().await.map_err(ZkError::contended(doing))?,
                Err(e) => return Err(ZkError::request(doing)(e.into()).into()),
            }
        }
    }

    /// Adds to `multi` what takes the name of `read` to `after`: its parent made (if the
    /// call gives a name with no node a state), changed at the version read, only checked
    /// (left as it was), or deleted at that version (left with nothing, and nothing else
    /// under it: `present`, its holders' nodes, listed then); and its holders' nodes made
    /// and deleted by `changes`. A parent is made before its holders' nodes and deleted
    /// after them. See the module docs.
    fn add_writes(
        &self,
        multi: &mut zk::MultiWriter<'_>,
        doing: &'static str,
        read: &Read,
        after: &State,
        changes: &[(String, Holder)],
        present: &[String],
    ) -> Result<(), ZkError> {
        let ends = |node: &String| {
            changes
                .iter()
                .any(|(start, change)| matches!(change, Holder::Ended) && node.starts_with(start.as_str()))
        };
        let path = &read.path;
        let changed = *after != read.state;
        // A node an earlier build made (no generation) is left for the purge, as it was then.
        let gone = changed && state::is_empty(after) && read.generation.is_some() && present.iter().all(ends);
        // The node read is the node written: one deleted and made again since has versions
        // that start again from 0, and another generation.
        if let (Some(_), Some(generation)) = (read.stat, read.generation) {
            multi
                .add_check_version(&state::generation_path(path, generation), 0)
                .map_err(ZkError::request(doing))?;
        }
        match read.stat {
            None if !changed => {}
            // Made empty with its generation's mark (random, so that a node made again after
            // a deletion is told apart), then given its state: the `setData`'s stat has the
            // write's zxid, the grant's token, where a `create`'s in a `multi` has none before
            // ZooKeeper 3.7.2 and 3.8.2 (ZOOKEEPER-4026).
            None => {
                let generation = crate::retry::random_u64();
                let data = self.encode(read, after, Some(generation))?;
                multi
                    .add_create(path, &[], &FOLDER)
                    .and_then(|()| multi.add_create(&state::generation_path(path, generation), &[], &FOLDER))
                    .and_then(|()| multi.add_set_data(path, &data, Some(0)))
                    .map_err(ZkError::request(doing))?;
            }
            Some(stat) if !changed => multi
                .add_check_version(path, stat.version)
                .map_err(ZkError::request(doing))?,
            Some(_) if gone => {}
            Some(stat) => {
                let data = self.encode(read, after, read.generation)?;
                multi
                    .add_set_data(path, &data, Some(stat.version))
                    .map_err(ZkError::request(doing))?;
            }
        }
        for (start, change) in changes {
            match change {
                Holder::Began(owner) => {
                    multi.add_create(&format!("{path}/{start}"), owner.as_bytes(), &HOLDER)
                }
                // None left if the session that made it has ended.
                Holder::Ended => present
                    .iter()
                    .filter(|node| node.starts_with(start.as_str()))
                    .try_for_each(|node| multi.add_delete(&format!("{path}/{node}"), None)),
            }
            .map_err(ZkError::request(doing))?;
        }
        match (read.stat, read.generation) {
            (Some(stat), Some(generation)) if gone => multi
                .add_delete(&state::generation_path(path, generation), Some(0))
                .and_then(|()| multi.add_delete(path, Some(stat.version)))
                .map_err(ZkError::request(doing)),
            _ => Ok(()),
        }
    }

    /// The data of `after`, the new state of the name of `read` in a node of `generation`,
    /// if one node keeps it.
    fn encode(&self, read: &Read, after: &State, generation: Option<u64>) -> Result<Vec<u8>, ZkError> {
        let data = state::encode(after, generation)?;
        if data.len() > self.max_state_bytes {
            return Err(ZkError::Invalid(format!(
                "ZooKeeper: the state of {} {} would take {} bytes, more than one node keeps",
                read.key.kind,
                read.key.name,
                data.len()
            )));
        }
        Ok(data)
    }

    /// The names of `kind` that have a node, in the order of their bytes, from `query`'s
    /// prefix and after its cursor.
    async fn names(&self, kind: Kind, query: &ListQuery) -> Result<Vec<Resource>, ZkError> {
        let mut names: Vec<Resource> = self
            .children(kind)
            .await?
            .into_iter()
            .filter(|name| name.as_str().starts_with(&query.prefix))
            .filter(|name| query.after.as_ref().is_none_or(|after| name > after))
            .collect();
        names.sort();
        Ok(names)
    }

    /// The names of `kind` that have a node, in no order. A child that is no name's node
    /// (someone else's) is passed over.
    async fn children(&self, kind: Kind) -> Result<Vec<Resource>, ZkError> {
        let client = self.session.client().await?;
        client
            .sync(&self.paths.root)
            .await
            .map_err(ZkError::request("sync"))?;
        let children = match client.list_children(&self.paths.folder(kind)).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(ZkError::request("list")(e)),
        };
        Ok(children.iter().filter_map(|c| state::unhex(c)).collect())
    }

    /// Reads the live leases or holds of `names`, a batch at a time, until `enough` of them
    /// have some; each name with what `live` keeps of its table.
    async fn live_of<T>(
        &self,
        kind: Kind,
        names: &[Resource],
        enough: usize,
        live: impl Fn(&LockTable, Timestamp, &Resource) -> Option<T>,
    ) -> Result<Vec<T>, ZkError> {
        let client = self.session.client().await?;
        let mut found = Vec::new();
        for batch in names.chunks(READ_BATCH) {
            let keys: Vec<Key> = batch
                .iter()
                .map(|name| Key {
                    kind,
                    name: name.clone(),
                })
                .collect();
            let reads = try_join_all(keys.iter().map(|key| self.read(&client, key))).await?;
            let now = Timestamp::now_wall();
            let table = state::table(&reads, now);
            found.extend(batch.iter().filter_map(|name| live(&table, now, name)));
            if found.len() >= enough {
                found.truncate(enough);
                break;
            }
        }
        Ok(found)
    }

    /// The next [`PURGE_BATCH`] names of the purge's walk over every name with a node, of
    /// every kind; once a walk is through, the names are listed again for the next. So a
    /// purge call costs the same however many names there are (a listing of them all comes
    /// once a walk, not once a call), and every name with a node is read once a walk: a
    /// name made since the listing, in the next walk; one deleted since, read as no node.
    async fn next_to_purge(&self) -> Result<Vec<Key>, ZkError> {
        let batch = take_batch(&mut self.to_purge.lock().unwrap_or_else(PoisonError::into_inner));
        if !batch.is_empty() {
            return Ok(batch);
        }
        let mut all = VecDeque::new();
        for kind in Paths::KINDS {
            all.extend(
                self.children(kind)
                    .await?
                    .into_iter()
                    .map(|name| Key { kind, name }),
            );
        }
        let mut walk = self.to_purge.lock().unwrap_or_else(PoisonError::into_inner);
        *walk = all;
        Ok(take_batch(&mut walk))
    }

    /// Forgets what is over in the name of `read`, or deletes its node if nothing is left;
    /// returns what it forgot.
    async fn purge(&self, client: &zk::Client, read: Read) -> Result<Vec<Expired>> {
        let Some(stat) = read.stat else {
            return Ok(Vec::new());
        };
        let now = Timestamp::now_wall();
        if state::has_expired(&read.state, now) {
            return self
                .change("purge", std::slice::from_ref(&read.key), |table, now| {
                    Ok(table.purge_expired(now))
                })
                .await;
        }
        if !state::is_empty(&read.state) {
            return Ok(Vec::new());
        }
        // Deleted only if still this version (still empty), and without children.
        match client.delete(&read.path, Some(stat.version)).await {
            Ok(()) | Err(zk::Error::BadVersion | zk::Error::NoNode | zk::Error::NotEmpty) => Ok(Vec::new()),
            Err(e) => Err(ZkError::request("purge")(e).into()),
        }
    }
}

/// The first [`PURGE_BATCH`] names of `walk`, taken out of it.
fn take_batch(walk: &mut VecDeque<Key>) -> Vec<Key> {
    let end = walk.len().min(PURGE_BATCH);
    walk.drain(..end).collect()
}

/// The holders' nodes under the node of `read`.
async fn holders(client: &zk::Client, read: &Read) -> Result<Vec<String>, ZkError> {
    match client.list_children(&read.path).await {
        Ok(mut children) => {
            children.retain(|child| !state::is_generation_node(child));
            Ok(children)
        }
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(ZkError::request("list the holders")(e)),
    }
}

/// What a compare-and-set needs of `stat`.
fn versioned(stat: &zk::Stat) -> Result<Versioned, ZkError> {
    Ok(Versioned {
        version: stat.version,
        mzxid: zxid(stat.mzxid)?,
    })
}

/// A zxid as ZooKeeper sends it (signed), checked to be one a token can be: positive, and
/// below the tokens a call's table issues before its write commits.
fn zxid(sent: i64) -> Result<u64, ZkError> {
    u64::try_from(sent)
        .ok()
        .filter(|z| *z > 0 && *z <= state::PENDING)
        .ok_or_else(|| ZkError::Corrupt(format!("a write with the zxid {sent}")))
}

/// What a call answers, with the tokens of what it granted settled: each is the zxid of the
/// call's write, which is known once the write is committed (see [`state::PENDING`]).
trait Settle {
    /// Puts `token` in the place of every token the call's table issued.
    fn settle(&mut self, token: FencingToken) {
        let _ = token;
    }
}

fn settle_lease(lease: &mut Lease, token: FencingToken) {
    if lease.token.0 > state::PENDING {
        lease.token = token;
    }
}

impl Settle for AcquireOutcome {
    fn settle(&mut self, token: FencingToken) {
        if let Self::Granted { lease, .. } = self {
            settle_lease(lease, token);
        }
    }
}

impl Settle for AcquireAllOutcome {
    fn settle(&mut self, token: FencingToken) {
        if let Self::Granted(outcomes) = self {
            outcomes.iter_mut().for_each(|outcome| outcome.settle(token));
        }
    }
}

impl Settle for HoldOutcome {
    fn settle(&mut self, token: FencingToken) {
        if let Self::Granted { hold, .. } = self {
            settle_lease(&mut hold.lease, token);
        }
    }
}

// These grant nothing.
impl Settle for ReleaseOutcome {}
impl<L> Settle for RenewOutcome<L> {}
impl Settle for ForceOutcome {}
impl Settle for Vec<Expired> {}
impl Settle for () {}

#[async_trait]
impl LockStore for ZooKeeperStore {
    async fn acquire_with(&self, resource: &Resource, owner: &Owner, terms: Terms) -> Result<AcquireOutcome> {
        self.change("acquire", &[Key::lock(resource)], |table, now| {
            table.acquire(now, resource, owner, &terms)
        })
        .await
    }

    /// One `multi` over every parent: see the module docs.
    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        let keys: Vec<Key> = resources.as_slice().iter().map(Key::lock).collect();
        self.change("acquire", &keys, |table, now| {
            table.acquire_all(now, resources, owner, &terms)
        })
        .await
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        let (table, now) = self.read_now(&[Key::lock(resource)]).await?;
        Ok(table.get(now, resource))
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        self.change("release", &[Key::lock(resource)], |table, now| {
            Ok(table.release(now, resource, owner, token))
        })
        .await
    }

    async fn renew_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome> {
        self.change("renew", &[Key::lock(resource)], |table, now| {
            Ok(table.renew(now, resource, owner, ttl, token, meta))
        })
        .await
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        let names = self.names(Kind::Lock, query).await?;
        let leases = self
            .live_of(
                Kind::Lock,
                &names,
                query.limit.saturating_add(1),
                |table, now, name| table.get(now, name),
            )
            .await?;
        Ok(LeasePage::from_one_past(leases, query.limit))
    }

    /// Reads the next [`PURGE_BATCH`] parents of its walk and forgets what is over in them;
    /// see the module docs.
    async fn purge_expired(&self) -> Result<Vec<Expired>> {
        let keys = self.next_to_purge().await?;
        let client = self.session.client().await?;
        let mut expired = Vec::new();
        for batch in keys.chunks(READ_BATCH) {
            let reads = try_join_all(batch.iter().map(|key| self.read(&client, key))).await?;
            for read in reads {
                expired.extend(self.purge(&client, read).await?);
            }
        }
        Ok(expired)
    }

    async fn acquire_hold_with(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        intent: Option<Ttl>,
        meta: Option<&Meta>,
    ) -> Result<HoldOutcome> {
        self.change("acquire", &[Key::hold(claim.kind(), name)], |table, now| {
            table.acquire_hold(now, name, owner, claim, ttl, intent, meta)
        })
        .await
    }

    async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        let (table, now) = self.read_now(&[Key::hold(kind, name)]).await?;
        Ok(table.holds(now, kind, name))
    }

    async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        self.change("release", &[Key::hold(kind, name)], |table, now| {
            Ok(table.release_hold(now, kind, name, owner, token))
        })
        .await
    }

    async fn renew_hold_with(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome<Hold>> {
        self.change("renew", &[Key::hold(kind, name)], |table, now| {
            Ok(table.renew_hold(now, kind, name, owner, ttl, token, meta))
        })
        .await
    }

    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage> {
        let names = self.names(kind.into(), query).await?;
        let found = self
            .live_of(
                kind.into(),
                &names,
                query.limit.saturating_add(1),
                |table, now, name| {
                    let holds = table.holds(now, kind, name);
                    (!holds.is_empty()).then(|| (name.clone(), holds))
                },
            )
            .await?;
        Ok(HoldPage::from_one_past(found, query.limit))
    }

    async fn withdraw_intent(&self, name: &Resource, owner: &Owner) -> Result<()> {
        self.change(
            "withdraw an intent",
            &[Key::hold(HoldKind::RwLock, name)],
            |table, _| {
                table.withdraw_intent(name, owner);
                Ok(())
            },
        )
        .await
    }

    async fn force_release(&self, key: &Key) -> Result<ForceOutcome> {
        self.change("force-release", std::slice::from_ref(key), |table, now| {
            Ok(table.force_release(now, key))
        })
        .await
    }

    async fn ping(&self) -> Result<()> {
        // A sync needs the leader, and so a quorum: what serving needs.
        let client = self.session.client().await?;
        client
            .sync(&self.paths.root)
            .await
            .map_err(ZkError::request("ping"))?;
        Ok(())
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        Some(self.feed.subscribe())
    }

    fn publish(&self, bulletin: &Bulletin) {
        self.events.tell(bulletin);
    }

    fn bulletins(&self) -> Option<broadcast::Receiver<fencelock_core::Heard>> {
        Some(self.events.feed().subscribe())
    }

    /// A one-shot watch on the name's node, set again each time it fires: see the module
    /// docs.
    async fn watch(&self, key: &Key) -> Watch {
        let path = self.paths.node(key);
        let first = tokio::time::timeout(self.call_timeout, session::set_watch(&self.session, &path)).await;
        let stop = CancellationToken::new();
        tokio::spawn(session::watch_name(
            self.session.clone(),
            path,
            key.clone(),
            self.feed.clone(),
            stop.clone(),
            first.ok().and_then(Result::ok),
        ));
        Watch::until_dropped(stop)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            durable: true,
            shared: true,
            ..Capabilities::BASELINE
        }
    }
}

/// The connect string of `zookeeper://host:port[,host:port…]`: `host:port,host:port`.
fn cluster(url: &str) -> Result<String, StoreError> {
    let members = crate::remote::members(url, "zookeeper")
        .map_err(|why| ZkError::Invalid(format!("{url:?} is not a ZooKeeper address: {why}")))?;
    Ok(members.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_members_with_ports() {
        assert_eq!(
            cluster("zookeeper://127.0.0.1:2181,h:2182").unwrap(),
            "127.0.0.1:2181,h:2182"
        );
        assert_eq!(cluster("ZooKeeper://h:1").unwrap(), "h:1");
        for bad in [
            "zookeeper://",
            "zookeeper://h",
            "zookeeper://h:x",
            "zookeeper://:1",
            "zookeeper://h:1/chroot",
            "zk://h:1",
            "h:1",
        ] {
            assert!(matches!(cluster(bad), Err(StoreError::Invalid(_))), "{bad}");
        }
    }
}
