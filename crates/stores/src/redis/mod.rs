//! [`RedisStore`] (`redis://host:port`, or Redlock over `redis://h1:p1,h2:p2,h3:p3`):
//! leases, permits and holds on one Redis node, or on several independent Redis masters of
//! which a majority must agree, shared by any number of fencelock servers.
//!
//! Its guarantees are in the [crate's guarantee table](crate#guarantees).
//!
//! # One node
//!
//! Every operation is one call of one Lua script (`fencelock.lua`, loaded once and called by
//! its SHA; the driver loads it again when a node answers `NOSCRIPT`), so each is atomic on
//! the node, and judged by the node's clock: the script reads `TIME` and a lease is live
//! while that time is before its end. The script's header describes the keys: a lock's lease
//! is one key (with `PX` a minute past its end as a backstop, so that a node nobody purges
//! forgets it), a semaphore's permits and a read-write lock's holds are one hash per name
//! (owner name → lease), writers' intents another, and each name has a **token counter that
//! never expires**. A grant takes its token from that counter in the same script: one more
//! than the last, and at least the node's time in microseconds, so that a node that lost its
//! data (restarted without persistence) does not hand out a token again unless its clock went
//! back. Release and renew compare owner (and principal) and token in the script (a token
//! of 0 is a token like any other). Several locks at once are one script: every lock or none.
//!
//! Names are listed from one sorted set per kind (score 0, so ordered by the names' bytes);
//! a sorted set scored by when things end tells a purge what may be over. Every change that
//! may free a name is published on the channel `PREFIX released`, which every store on the
//! node subscribes to: that wakes the waiters of other servers. Keys are built inside the
//! script from the prefix, so a node must be a standalone master, not Redis Cluster.
//!
//! # Redlock
//!
//! With three or more nodes, every call goes to all of them at once, and is decided as soon
//! as the answers settle it: a node that is dead or hung is never waited for while a
//! majority (`N / 2 + 1`) answers (see `fanout`). A node that answers late still gets every
//! call, in the order the store made them.
//!
//! - **Acquire** (of one lock, several locks all or none, a permit or a hold) is a grant in
//!   tries (see `redlock`): propose a token per name, send one script to each node, which
//!   applies all of its names or none; granted when for every name a majority applied the same
//!   token and the time taken leaves some of the TTL — the validity `ttl − elapsed − drift`,
//!   with `drift = ttl × 1 % + 2 ms` ([`Drift::REDLOCK`]), is positive. The lease says
//!   `acquired_at` = when the try was sent and `expires_at` = `acquired_at + ttl − drift`, on
//!   the fencelock server's clock: every node keeps that (so every server reports the same
//!   lease), and judges liveness by its own copy of the TTL on its own clock. A try waits at
//!   most a third of the TTL for a node; a TTL below 300 ms is raised to 300 ms.
//! - **A try that did not win is undone whole**, from a task of its own whatever becomes of
//!   the caller: each node keeps, under the try's call id, what it replaced of the owner's own
//!   leases, and the undo puts that back exactly (an extension is never turned into a
//!   deletion), deletes what it granted anew, and marks the try cancelled there, so that a
//!   node that hung and goes on later changes nothing. A node refuses a grant that arrives so
//!   late (the TTL and 30 s after it was sent, by its clock) that its undo may be forgotten:
//!   keep the servers' clocks within 30 s of the nodes'. A grant that wins after its caller
//!   left is given back.
//! - **Release, renew and reads** are settled by a majority too: a release or renewal when a
//!   majority did it or refused it for one same reason; a read (get, list, holds) reports what
//!   a majority keeps alike, once no further answer could change it.
//! - **Fencing tokens** strictly increase from grant to grant, whatever the clocks do, as long
//!   as every node that took part in a grant keeps its data or is brought up to date before it
//!   counts again. A try first reads the name's token counter from a majority of the nodes,
//!   and *proposes* one more than the greatest (at least the server's time in microseconds,
//!   and above the proposal for the name before it in the call); a node grants a proposal only
//!   if it is greater than its own counter, which it then sets to it, in the same script. Take
//!   two grants that succeeded, A and then B. A's majority and B's majority share a node (two
//!   majorities of N always do). That node ran A's script before B's, so its counter was at
//!   least A's token when B's proposal came, and it accepted B's proposal: B's token is
//!   greater than A's. Two tries that propose the same token cannot both win: a node accepts
//!   one of them only.
//! - **A node that lost its data** (restarted without persistence) would break that argument
//!   and exclusion with it: it and a node that missed a grant make a majority that knows
//!   nothing of it. Every node that keeps Redlock's state carries a mark (`P node`); a node
//!   found without it beside marked ones takes part in nothing until it has been brought up to
//!   date from the others — every token counter, every live lease and hold, and every lease a
//!   release, force-release or undo ended (so none comes back) — and marked (see `repair`). A
//!   new Redlock is marked when every one of its nodes answers (a majority without the mark
//!   could be a node that lost its data beside one that was never marked); one whose nodes are
//!   found unmarked within [`RedisOptions::marking_window`] of the first mark is taken to be
//!   still being marked by another server.
//! - Exclusion, unlike token order, rests on time: a node frees a lease when its own copy of
//!   the TTL has passed, so a node whose clock runs fast, or a server paused past
//!   `expires_at`, can see two holders at once. Redlock does not solve the pause problem:
//!   only a protected resource that checks fencing tokens does.
//!
//! # Restarts and failover
//!
//! One node keeps what its configuration keeps (`--save ""` and no AOF: nothing). A node that
//! comes back empty has forgotten the leases it held: every lock is then free while its
//! holders may still be working. Its tokens stay in order (they are at least the node's time
//! in microseconds, as long as its clock did not go back), so a protected resource that
//! checks them rejects the old holder. A failover to an asynchronous replica is the same: it
//! may lack the last grants and releases. Under Redlock, a node that lost its data is
//! brought up to date before it counts again (above).
//!
//! # Failure
//!
//! Every node call has a timeout ([`RedisOptions::node_timeout`]) and every store call a
//! deadline ([`RedisOptions::call_deadline`]); the driver reconnects by itself. Without a
//! majority of nodes answering, a call returns [`StoreError::Unavailable`] (503 through the
//! server), after undoing what it did on the minority that answered. Contention is never an
//! error: racing tries are undone and tried again after a random pause, until the call's
//! deadline.
//!
//! # Layout
//!
//! - this module: [`RedisStore`], its options, and the [`LockStore`] calls;
//! - `node`: one node's connection and the script; `reply`: arguments, replies, records;
//! - `fanout`: a call on every node, settled by the first answers; `read`: reads, releases and
//!   renewals settled by a majority; `quorum`: what a majority agrees on;
//! - `grant`: acquires on one node and under Redlock; `redlock`: proposals, tries and undo;
//!   `repair`: a node that lost its data brought up to date;
//! - `listen`: the subscription to other servers' releases and events, and the outbox that
//!   publishes this server's events on every node; `error`: the store's own errors.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::hold::{Claim, Expired, Hold, HoldKind, HoldOutcome, HoldPage, Key};
use fencelock_core::store::{PURGE_BATCH, Result as StoreResult};
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Bulletin, Capabilities, Clock, Drift, EndedLease, FencingToken,
    ForceOutcome, LeasePage, ListQuery, LockStore, Meta, Owner, ReleaseFeed, ReleaseNotice, ReleaseOutcome,
    RenewOutcome, Resource, Resources, StoreError, SystemClock, Terms, Timestamp, Ttl,
};
use futures_util::future::join_all;
use tokio::sync::broadcast;

use crate::deadline::{Deadline, Within, within};
use crate::subscription::{AbortOnDrop, keep_subscribed};
use error::{RedisError, Result};
use grant::HoldAsk;
use listen::{Feeds, FirstCopies, Listening, Outbox, listen};
use node::Node;
use redlock::Nodes;
use reply::{Arg, Record, Reply, hold_letter, letter, owner_args};

mod error;
mod fanout;
mod grant;
mod listen;
mod node;
mod quorum;
mod read;
mod redlock;
mod repair;
mod reply;

const STORE: &str = "Redis";

/// How long after one purge returned an expiry another may return it under Redlock: a node
/// keeps a lease's key the script's `GRACE` (60 s) past its end, and purges it until then;
/// the rest is room for the purge interval and the nodes' clocks.
const EXPIRIES_REPEAT_WITHIN: Duration = Duration::from_secs(90);

pub(crate) fn open<'a>(address: &'a str, rest: &'a str) -> crate::Opening<'a> {
    Box::pin(async move { crate::opened(address, RedisStore::connect(&format!("redis://{rest}")).await) })
}

/// How a [`RedisStore`] talks to its nodes.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// The start of every key (and of the release channel's name): `fencelock:`.
    pub prefix: String,
    /// How long one node may take to connect or to answer one call (under Redlock, a grant
    /// waits at most a third of its TTL for a node).
    pub node_timeout: Duration,
    /// How long one store call may take in all.
    pub call_deadline: Duration,
    /// The server's clock, by which a Redlock lease is shown and its tokens proposed.
    pub clock: Arc<dyn Clock>,
    /// How long marking the nodes of a new Redlock may take: a node found without the mark
    /// beside one marked more recently than this is taken to be one of the new Redlock's
    /// (another server is marking it), not one that lost its data and must be brought up to
    /// date first. So a node that loses its data within this time of a Redlock's first use is
    /// taken back as it is.
    pub marking_window: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "fencelock:".into(),
            node_timeout: Duration::from_secs(1),
            call_deadline: Duration::from_secs(5),
            clock: Arc::new(SystemClock::new()),
            marking_window: Duration::from_secs(10),
        }
    }
}

/// A [`LockStore`] on one Redis node or, over three or more, on Redlock; see the module docs.
/// [`connect`](RedisStore::connect) gives it wrapped in its call [`Deadline`].
pub struct RedisStore {
    nodes: Arc<Nodes>,
    // Stop listening when the store is dropped.
    _released: Vec<AbortOnDrop>,
    feed: ReleaseFeed,
    /// Other servers' events, each once.
    heard: Arc<FirstCopies>,
    /// Publishes this server's events on every node.
    outbox: Outbox,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("nodes", &self.nodes.list)
            .field("quorum", &self.nodes.quorum)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to the nodes in `url` (`redis://host:port`, or three or more
    /// `redis://host:port,host:port,…` for Redlock) with default options, checks that a
    /// majority answers, and subscribes to their releases. Must be called within a Tokio
    /// runtime.
    pub async fn connect(url: &str) -> StoreResult<Deadline<Self>> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// As [`RedisStore::connect`], with `options`.
    pub async fn connect_with(url: &str, options: RedisOptions) -> StoreResult<Deadline<Self>> {
        let addresses = addresses(url)?;
        if options.prefix.contains('\u{1f}') {
            return Err(RedisError::Invalid("a Redis key prefix may not contain byte 31".into()).into());
        }
        let list = addresses
            .iter()
            .map(|address| Node::new(address, &options.prefix, options.node_timeout).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        let quorum = list.len() / 2 + 1;
        list.iter().for_each(Node::connect_in_background);
        let feed = ReleaseFeed::new();
        let heard = Arc::new(FirstCopies::default());
        let feeds = Feeds {
            released: feed.clone(),
            heard: heard.clone(),
        };
        // Subscribe first, so that no release after this is missed; a node that cannot be
        // reached now is subscribed to when it can.
        let firsts = within(options.call_deadline, STORE, "connect", async {
            let timeout = options.node_timeout;
            Ok(join_all(
                list.iter()
                    .map(|node| listen(node.clone(), feeds.clone(), timeout)),
            )
            .await)
        })
        .await?;
        let reached = firsts.iter().filter(|first| first.is_ok()).count();
        if reached < quorum {
            let nodes = list.len();
            let example = firsts.into_iter().find_map(StoreResult::err);
            return Err(match example {
                Some(e) if nodes == 1 => e,
                example => StoreError::Unavailable {
                    message: format!(
                        "Redis: connect: {reached} of {nodes} nodes answered, fewer than a majority{}",
                        example.map(|e| format!(" (e.g. {e})")).unwrap_or_default()
                    ),
                    source: None,
                },
            });
        }
        let released = list
            .iter()
            .zip(firsts)
            .map(|(node, first)| {
                let (node, feeds) = (node.clone(), feeds.clone());
                let first: Listening = match first {
                    Ok(listening) => listening,
                    Err(_) => Box::pin(async {}),
                };
                let timeout = options.node_timeout;
                let again = move || listen(node.clone(), feeds.clone(), timeout);
                // Under Redlock the other nodes go on delivering events while one
                // subscribes again: a loss shows as a gap in a server's numbers instead.
                let missed = (list.len() == 1).then(|| heard.feed().clone());
                keep_subscribed(STORE, first, again, feed.clone(), missed)
            })
            .collect();
        let amnesiac = list.iter().map(|_| AtomicBool::new(false)).collect();
        let outbox = Outbox::start(&list);
        let nodes = Arc::new(Nodes {
            list,
            quorum,
            clock: options.clock,
            timeout: options.node_timeout,
            marking_window: options.marking_window,
            amnesiac,
        });
        let store = Self {
            nodes,
            _released: released,
            feed,
            heard,
            outbox,
        };
        Ok(Deadline::new(store, Within::new(STORE, options.call_deadline)))
    }

    fn redlock(&self) -> bool {
        self.nodes.list.len() > 1
    }

    fn drift(&self) -> Drift {
        if self.redlock() {
            Drift::REDLOCK
        } else {
            Drift::NONE
        }
    }

    /// The SHOWN_FROM, SHOWN_PER_MILLE and SHOWN_FIXED of a call sent at `start`: on one
    /// node, none (the node's own times); under Redlock, the server's time and the drift
    /// allowance.
    fn shown(&self, start: Timestamp) -> [Arg; 3] {
        if self.redlock() {
            self.shown_redlock()(start)
        } else {
            [Arg::Number(0), Arg::Number(0), Arg::Number(0)]
        }
    }

    /// [`RedisStore::shown`] under Redlock, for a grant's tries.
    fn shown_redlock(&self) -> impl Fn(Timestamp) -> [Arg; 3] + Send + Sync + 'static {
        let drift = Drift::REDLOCK;
        move |start| {
            [
                Arg::Number(start.as_millis()),
                Arg::Number(u64::from(drift.per_mille)),
                Arg::Number(u64::try_from(drift.fixed.as_millis()).unwrap_or(u64::MAX)),
            ]
        }
    }

    /// `op` with `args` on the nodes until a majority answered (or too few are left to);
    /// their replies, read with `read`.
    async fn on_majority<T: Send + 'static>(
        &self,
        op: &'static str,
        args: Vec<Arg>,
        read: fn(Reply) -> Result<T>,
    ) -> Result<Vec<T>> {
        let quorum = self.nodes.quorum;
        self.nodes
            .majority((op, args), read, |a| {
                a.answered() >= quorum || a.answered() + a.pending() < quorum
            })
            .await
    }
}

/// A reply's time and its records.
fn read_timed_records(mut reply: Reply) -> Result<(u64, Vec<Record>)> {
    Ok((reply.now, reply.records()?))
}

/// A purge's reply: KIND NAME RECORD per lease or hold forgotten.
fn read_purged(mut reply: Reply) -> Result<Vec<Expired>> {
    let mut expired = Vec::new();
    while !reply.is_empty() {
        let letter = reply.text()?;
        let kind = reply::kind_of(&letter)
            .ok_or_else(|| RedisError::odd(reply.node(), "purge", format!("kind {letter:?}")))?;
        let name = reply.text()?;
        let name = read::resource(reply.node(), &name)?;
        let lease = reply.some_record()?.lease(&name)?;
        expired.push(Expired { kind, lease });
    }
    Ok(expired)
}

#[async_trait]
impl LockStore for RedisStore {
    async fn acquire_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        terms: Terms,
    ) -> StoreResult<AcquireOutcome> {
        let names = std::slice::from_ref(resource);
        let (AcquireAllOutcome::Granted(mut outcomes) | AcquireAllOutcome::Refused(mut outcomes)) =
            if self.redlock() {
                self.locks_on_majority(names, owner, terms).await?
            } else {
                self.locks_on_one(names, owner, terms).await?
            };
        Ok(outcomes
            .pop()
            .ok_or_else(|| RedisError::odd("", "acquire", "no answer"))?)
    }

    /// One script on one node; under Redlock, one script on each node, decided by a majority.
    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> StoreResult<AcquireAllOutcome> {
        let names = resources.as_slice();
        Ok(if self.redlock() {
            self.locks_on_majority(names, owner, terms).await?
        } else {
            self.locks_on_one(names, owner, terms).await?
        })
    }

    async fn get(&self, resource: &Resource) -> StoreResult<Option<fencelock_core::Lease>> {
        Ok(self.lease_of(resource).await?)
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> StoreResult<ReleaseOutcome> {
        let name = vec![Arg::text(resource.as_str())];
        Ok(
            match self.judged("release", name, owner, None, token, None).await? {
                Ok((record, ended_at)) => ReleaseOutcome::Released(Some(EndedLease {
                    lease: record.lease(resource)?,
                    ended_at,
                })),
                Err(refusal) => refusal.into(),
            },
        )
    }

    async fn renew_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> StoreResult<RenewOutcome> {
        let name = vec![Arg::text(resource.as_str())];
        Ok(
            match self.judged("renew", name, owner, Some(ttl), token, meta).await? {
                Ok((record, _)) => RenewOutcome::Renewed(record.lease(resource)?),
                Err(refusal) => refusal.into(),
            },
        )
    }

    async fn list(&self, query: &ListQuery) -> StoreResult<LeasePage> {
        let (names, next) = self.page(None, query).await?;
        let mut leases = Vec::new();
        for (name, records) in names {
            leases.extend(records.first().map(|r| r.lease(&name)).transpose()?);
        }
        Ok(LeasePage { leases, next })
    }

    async fn purge_expired(&self) -> StoreResult<Vec<Expired>> {
        let args = vec![Arg::Number(u64::try_from(PURGE_BATCH).unwrap_or(u64::MAX))];
        // Every node forgets what ended on it, whatever the others do.
        let mut answers = self
            .nodes
            .gather(("purge", args), read_purged, |a| a.pending() == 0)
            .await;
        answers.majority(1, "purge")?;
        let mut expired: Vec<Expired> = Vec::new();
        for purged in answers.into_answers().into_iter().flatten() {
            if !expired
                .iter()
                .any(|e| e.kind == purged.kind && e.lease == purged.lease)
            {
                expired.push(purged);
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
    ) -> StoreResult<HoldOutcome> {
        let ask = HoldAsk {
            name: name.clone(),
            owner: owner.clone(),
            claim,
            ttl,
            intent,
            meta: meta.cloned(),
        };
        Ok(if self.redlock() {
            self.hold_on_majority(ask).await?
        } else {
            self.hold_on_one(&ask).await?
        })
    }

    async fn holds(&self, kind: HoldKind, name: &Resource) -> StoreResult<Vec<Hold>> {
        Ok(self.holds_of(kind, name).await?)
    }

    async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> StoreResult<ReleaseOutcome> {
        let head = vec![Arg::text(hold_letter(kind)), Arg::text(name.as_str())];
        Ok(
            match self
                .judged("release_hold", head, owner, None, token, None)
                .await?
            {
                Ok((record, ended_at)) => ReleaseOutcome::Released(Some(EndedLease {
                    lease: record.hold(name)?.lease,
                    ended_at,
                })),
                Err(refusal) => refusal.into(),
            },
        )
    }

    async fn renew_hold_with(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> StoreResult<RenewOutcome<Hold>> {
        let head = vec![Arg::text(hold_letter(kind)), Arg::text(name.as_str())];
        Ok(
            match self
                .judged("renew_hold", head, owner, Some(ttl), token, meta)
                .await?
            {
                Ok((record, _)) => RenewOutcome::Renewed(record.hold(name)?),
                Err(refusal) => refusal.into(),
            },
        )
    }

    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> StoreResult<HoldPage> {
        let (names, next) = self.page(Some(kind), query).await?;
        let mut held = Vec::new();
        for (name, records) in names {
            let holds = records
                .iter()
                .map(|r| r.hold(&name))
                .collect::<Result<Vec<_>>>()?;
            held.push((name, holds));
        }
        Ok(HoldPage { names: held, next })
    }

    async fn withdraw_intent(&self, name: &Resource, owner: &Owner) -> StoreResult<()> {
        let mut args = vec![Arg::text(name.as_str())];
        args.extend(owner_args(owner));
        self.on_majority("withdraw_intent", args, |_| Ok(())).await?;
        Ok(())
    }

    async fn force_release(&self, key: &Key) -> StoreResult<ForceOutcome> {
        let args = vec![Arg::text(letter(key.kind)), Arg::text(key.name.as_str())];
        let mut ended: Vec<EndedLease> = Vec::new();
        for (now, records) in self
            .on_majority("force_release", args, read_timed_records)
            .await?
        {
            let at = if self.redlock() {
                self.nodes.clock.now()
            } else {
                Timestamp::from_millis(now)
            };
            for record in records {
                let lease = record.lease(&key.name)?;
                if !ended
                    .iter()
                    .any(|e| e.lease.token == lease.token && e.lease.owner == lease.owner)
                {
                    ended.push(EndedLease { lease, ended_at: at });
                }
            }
        }
        ended.sort_by_key(|e| e.lease.token);
        Ok(if ended.is_empty() {
            ForceOutcome::NotFound
        } else {
            ForceOutcome::Released(ended)
        })
    }

    async fn ping(&self) -> StoreResult<()> {
        let pings = self.nodes.list.iter().map(|node| node.ping());
        let answered = join_all(pings).await;
        let ok = answered.iter().filter(|p| p.is_ok()).count();
        if ok >= self.nodes.quorum {
            return Ok(());
        }
        let example = answered.into_iter().find_map(Result::err).map(Box::new);
        Err(RedisError::NoMajority {
            doing: "ping",
            answered: ok,
            nodes: self.nodes.list.len(),
            example,
        }
        .into())
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        Some(self.feed.subscribe())
    }

    fn publish(&self, bulletin: &Bulletin) {
        self.outbox.tell(bulletin);
    }

    fn bulletins(&self) -> Option<broadcast::Receiver<fencelock_core::Heard>> {
        Some(self.heard.feed().subscribe())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            shared: true,
            drift: self.drift(),
            expiries_repeat_within: self.redlock().then_some(EXPIRIES_REPEAT_WITHIN),
            ..Capabilities::BASELINE
        }
    }
}

/// The node addresses of `redis://host:port[,host:port…]`: one, or three or more.
fn addresses(url: &str) -> Result<Vec<String>> {
    let invalid = |why: &str| RedisError::Invalid(format!("{url:?} is not a Redis address: {why}"));
    let nodes = crate::remote::members(url, "redis").map_err(|why| invalid(&why))?;
    if nodes.len() == 2 {
        return Err(invalid(
            "Redlock needs at least three independent nodes (two cannot outvote the loss of one)",
        ));
    }
    Ok(nodes.into_iter().map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_one_node_or_three_and_more() {
        assert_eq!(addresses("redis://127.0.0.1:6379").unwrap(), ["127.0.0.1:6379"]);
        assert_eq!(addresses("REDIS://a:1,b:2,c:3").unwrap(), ["a:1", "b:2", "c:3"]);
        for bad in [
            "redis://a:1,b:2",
            "redis://",
            "redis://a",
            "redis://:1",
            "redis://a:x",
            "etcd://a:1",
            "a:1",
            "redis://a:1/0",
        ] {
            let error = StoreError::from(addresses(bad).unwrap_err());
            assert!(matches!(error, StoreError::Invalid(_)), "{bad}: {error}");
        }
        assert!(
            addresses("redis://a:1,b:2")
                .unwrap_err()
                .to_string()
                .contains("at least three")
        );
    }
}
