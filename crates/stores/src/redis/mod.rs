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
//! back. Release and renew compare owner (and principal) and token in the script. Several
//! locks at once are one script: every lock or none.
//!
//! Names are listed from one sorted set per kind (score 0, so ordered by the names' bytes);
//! a sorted set scored by when things end tells a purge what may be over. Every change that
//! may free a name is published on the channel `PREFIX released`, which every store on the
//! node subscribes to: that wakes the waiters of other servers. Keys are built inside the
//! script from the prefix, so a node must be a standalone master, not Redis Cluster.
//!
//! # Redlock
//!
//! With three or more nodes, every call goes to all of them at once, and a majority
//! (`N / 2 + 1`) decides:
//!
//! - **Acquire** is granted when a majority granted it and the time it took leaves some of the
//!   TTL: the validity `ttl − elapsed − drift`, with `drift = ttl × 1 % + 2 ms`
//!   ([`Drift::REDLOCK`]), is positive. The lease says `acquired_at` = when the call was sent
//!   and `expires_at` = `acquired_at + ttl − drift`, on the fencelock server's clock: every
//!   node keeps that (so every server reports the same lease), and judges liveness by its
//!   own copy of the TTL on its own clock. A grant that failed is undone on every node that
//!   made it. Release and renew need a majority too; a read (get, list, holds) reports what
//!   a majority keeps alike.
//! - **Fencing tokens** still strictly increase from grant to grant, whatever the clocks do,
//!   for as long as a majority of nodes keep their data. An acquire first reads the token
//!   counter of the name from every node, and *proposes* one more than the greatest a majority
//!   answered (and at least the server's time in microseconds); a node grants a proposal only
//!   if it is greater than its own counter, which it then sets to it, in the same script.
//!   Take two grants that succeeded, A and then B (B sent after A was answered). A's majority
//!   and B's majority share a node (two majorities of N always do). That node ran A's script
//!   before B's, so its counter was at least A's token when B's proposal came, and it accepted
//!   B's proposal: B's token is greater than A's. A node restarted empty answers a counter of
//!   0, which changes nothing while the others of a majority still have theirs. Two acquirers
//!   that propose the same token cannot both win: a node accepts one of them only. An
//!   acquire whose proposal was refused by enough nodes that it could not win reads and
//!   proposes again (up to eight times).
//! - Exclusion, unlike token order, rests on time: a node frees a lease when its own copy of
//!   the TTL has passed, so a node whose clock runs fast, or a server paused past
//!   `expires_at`, can see two holders at once. Redlock does not solve the pause problem:
//!   only a protected resource that checks fencing tokens does.
//!
//! # Restarts and failover
//!
//! A node keeps what its configuration keeps (`--save ""` and no AOF: nothing). A node that
//! comes back empty has forgotten the leases it held: on one node, every lock is then free
//! while its holders may still be working; under Redlock, a lease that was kept by a bare
//! majority is then on a minority, and can be granted again. Fencing tokens stay in order
//! either way (on one node because they are at least the node's time in microseconds, as long
//! as its clock did not go back; under Redlock while a majority kept its counters), so a
//! protected resource that checks them rejects the old holder. To keep exclusion too, keep
//! an empty node out for longer than the longest TTL before it takes calls again (Redlock's
//! "delayed restart"), or turn on `appendonly yes` with `appendfsync always`. A failover to
//! an asynchronous replica is the same: it may lack the last grants and releases.
//!
//! Several locks at once take the locks one by one in the order of their names' bytes, and
//! give back what they took when one is refused ([`fencelock_core::acquire_in_order`]).
//!
//! # Failure
//!
//! Every node call has a timeout ([`RedisOptions::node_timeout`]) and every store call a
//! deadline ([`RedisOptions::call_deadline`]); the driver reconnects by itself. Without a
//! majority of nodes answering, a call returns [`StoreError::Unavailable`] (503 through the
//! server), after undoing what it did on the minority that answered.

use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use fencelock_core::hold::{Busy, Claim, Expired, Hold, HoldKind, HoldOutcome, HoldPage, Key};
use fencelock_core::store::{PURGE_BATCH, Result};
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Capabilities, Drift, EndedLease, FencingToken, ForceOutcome,
    LeasePage, ListQuery, LockStore, Owner, Refusal, ReleaseFeed, ReleaseNotice, ReleaseOutcome,
    RenewOutcome, Resource, Resources, StoreError, Terms, Timestamp, Ttl, acquire_in_order,
};
use futures_util::StreamExt;
use futures_util::future::join_all;
use tokio::sync::broadcast;

use crate::deadline::{Deadline, Within, within};
use crate::subscription::{AbortOnDrop, keep_subscribed};
use node::{Arg, Node, Record, Reply, claim_text, hold_letter, letter, notice, owner_args};
use quorum::{agreed, answered, most_common, no_majority};

mod node;
mod quorum;

const STORE: &str = "Redis";

/// How many times an acquire under Redlock proposes a token before it gives up on
/// acquirers racing it.
const ATTEMPTS: usize = 8;

pub(crate) fn open<'a>(address: &'a str, rest: &'a str) -> crate::Opening<'a> {
    Box::pin(async move { crate::opened(address, RedisStore::connect(&format!("redis://{rest}")).await) })
}

/// How a [`RedisStore`] talks to its nodes.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// The start of every key (and of the release channel's name): `fencelock:`.
    pub prefix: String,
    /// How long one node may take to connect or to answer one call.
    pub node_timeout: Duration,
    /// How long one store call may take in all.
    pub call_deadline: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "fencelock:".into(),
            node_timeout: Duration::from_secs(1),
            call_deadline: Duration::from_secs(5),
        }
    }
}

/// A [`LockStore`] on one Redis node or, over three or more, on Redlock; see the module docs.
/// [`connect`](RedisStore::connect) gives it wrapped in its call [`Deadline`].
pub struct RedisStore {
    nodes: Vec<Node>,
    quorum: usize,
    // Stop listening when the store is dropped.
    _released: Vec<AbortOnDrop>,
    feed: ReleaseFeed,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("nodes", &self.nodes)
            .field("quorum", &self.quorum)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to the nodes in `url` (`redis://host:port`, or three or more
    /// `redis://host:port,host:port,…` for Redlock) with default options, checks that a
    /// majority answers, and subscribes to their releases. Must be called within a Tokio
    /// runtime.
    pub async fn connect(url: &str) -> Result<Deadline<Self>> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// As [`RedisStore::connect`], with `options`.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Deadline<Self>> {
        let addresses = addresses(url)?;
        if options.prefix.contains('\u{1f}') {
            return Err(StoreError::Invalid(
                "a Redis key prefix may not contain byte 31".into(),
            ));
        }
        let nodes = addresses
            .iter()
            .map(|address| Node::new(address, &options.prefix, options.node_timeout))
            .collect::<Result<Vec<_>>>()?;
        let quorum = nodes.len() / 2 + 1;
        let feed = ReleaseFeed::new();
        // Subscribe first, so that no release after this is missed; a node that cannot be
        // reached now is subscribed to when it can.
        let firsts = within(options.call_deadline, STORE, "connect", async {
            let timeout = options.node_timeout;
            Ok(join_all(
                nodes
                    .iter()
                    .map(|node| listen(node.client().clone(), node.channel(), feed.clone(), timeout)),
            )
            .await)
        })
        .await?;
        let reached = firsts.iter().filter(|first| first.is_ok()).count();
        if reached < quorum {
            let failure = firsts.into_iter().find_map(Result::err);
            return Err(no_majority(reached, nodes.len(), "connect", failure));
        }
        let released = nodes
            .iter()
            .zip(firsts)
            .map(|(node, first)| {
                let (client, channel, notices) = (node.client().clone(), node.channel(), feed.clone());
                let first: Listening = match first {
                    Ok(listening) => listening,
                    Err(_) => Box::pin(async {}),
                };
                let timeout = options.node_timeout;
                let again = move || listen(client.clone(), channel.clone(), notices.clone(), timeout);
                keep_subscribed(STORE, first, again, feed.clone())
            })
            .collect();
        let store = Self {
            nodes,
            quorum,
            _released: released,
            feed,
        };
        Ok(Deadline::new(store, Within::new(STORE, options.call_deadline)))
    }

    fn redlock(&self) -> bool {
        self.nodes.len() > 1
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
    fn shown(&self, start: Timestamp) -> Shown {
        if self.redlock() {
            let drift = self.drift();
            [
                Arg::Number(start.as_millis()),
                Arg::Number(u64::from(drift.per_mille)),
                Arg::Number(millis(drift.fixed)),
            ]
        } else {
            ON_ONE_NODE
        }
    }

    /// `call` on every node at once.
    async fn each<'a, T, F>(&'a self, call: impl Fn(&'a Node) -> F) -> Vec<Result<T>>
    where
        F: Future<Output = Result<T>>,
    {
        join_all(self.nodes.iter().map(call)).await
    }

    /// Operation `op` with `args` on every node; the replies of a majority, or why not.
    async fn on_majority(&self, op: &'static str, args: &[Arg<'_>]) -> Result<Vec<Reply>> {
        answered(self.each(|node| node.call(op, args)).await, self.quorum, op)
    }

    /// A release (`ttl` none) or renewal (`op`) of `owner`'s lease or hold named by `head`
    /// (the name, or the kind and the name), with `token` if given, on every node: the record
    /// a majority released or renewed, with when that was done, or the refusal most nodes gave.
    async fn judged(
        &self,
        op: &'static str,
        head: &[Arg<'_>],
        owner: &Owner,
        ttl: Option<Ttl>,
        token: Option<FencingToken>,
    ) -> Result<Result<(Record, Timestamp), Refusal>> {
        let mut args = head.to_vec();
        args.extend(owner_args(owner));
        args.extend(ttl.map(|ttl| Arg::Number(ttl.as_millis())));
        args.push(Arg::Number(token.map_or(0, |t| t.0)));
        if ttl.is_some() {
            args.extend(self.shown(Timestamp::now_wall()));
        }
        let mut done = Vec::new();
        let mut refusals = Vec::new();
        for mut reply in self.on_majority(op, &args).await? {
            let now = reply.now;
            match reply.text()?.as_str() {
                "released" | "renewed" => done.push((reply.some_record()?, now)),
                "notfound" => refusals.push(Refusal::NotFound),
                "forbidden" => refusals.push(Refusal::Forbidden),
                "conflict" => refusals.push(Refusal::Conflict),
                other => return Err(odd(op, other)),
            }
        }
        if done.len() >= self.quorum {
            let (record, now) = done.swap_remove(0);
            let at = if self.redlock() {
                Timestamp::now_wall()
            } else {
                Timestamp::from_millis(now)
            };
            return Ok(Ok((record, at)));
        }
        Ok(Err(most_common(&refusals).unwrap_or(Refusal::NotFound)))
    }

    /// Phase one of a Redlock grant to `owner`: one more than the greatest token a majority
    /// of nodes issued for the name, and at least the time in microseconds; and for a permit
    /// of a semaphore of `slots` permits, the first slot that a majority has free (or, if
    /// none has, the one most have free, which will be refused with the holders).
    async fn propose(&self, key: &Key, owner: &Owner, slots: u32) -> Result<Proposal> {
        let [owner_name, principal] = owner_args(owner);
        let args = [
            Arg::Text(letter(key.kind)),
            Arg::Text(key.name.as_str()),
            owner_name,
            principal,
        ];
        let replies = self.on_majority("last", &args).await?;
        let answered = replies.len();
        let mut last = 0;
        let mut taken = vec![0_usize; usize::try_from(slots).unwrap_or(0)];
        for mut reply in replies {
            last = last.max(reply.number()?);
            while !reply.is_empty() {
                let slot = reply.number()?;
                let at = usize::try_from(slot).ok().and_then(|slot| slot.checked_sub(1));
                if let Some(count) = at.and_then(|at| taken.get_mut(at)) {
                    *count += 1;
                }
            }
        }
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| u64::try_from(since.as_micros()).unwrap_or(u64::MAX));
        // Racers spread over the free slots rather than all ask for the first.
        let free: Vec<usize> = (0..taken.len())
            .filter(|at| answered - taken[*at] >= self.quorum)
            .collect();
        let slot = match free.len() {
            0 => taken
                .iter()
                .enumerate()
                .min_by_key(|(_, count)| **count)
                .map(|(at, _)| at),
            n => free.get(usize::try_from(random()).unwrap_or(0) % n).copied(),
        }
        .map_or(0, |at| to_u64(at + 1));
        Ok(Proposal {
            token: (last + 1).max(micros),
            slot,
        })
    }

    /// A grant under Redlock (see the module docs): proposes a token, sends `grant` with it to
    /// every node, and decides from their answers; undoes the grants of a failed try. `ttl`
    /// is the lease's, for its validity.
    async fn grant<'a, T: Vote>(
        &'a self,
        key: &Key,
        owner: &Owner,
        (ttl, slots): (Ttl, u32),
        grant: impl Fn(&'a Node, Timestamp, Proposal) -> NodeCall<'a, T>,
    ) -> Result<Decided<T>> {
        let doing = "acquire";
        for attempt in 0..ATTEMPTS {
            let start = Timestamp::now_wall();
            let proposal = self.propose(key, owner, slots).await?;
            let answers = join_all(self.nodes.iter().map(|node| grant(node, start, proposal))).await;
            let valid =
                Timestamp::now_wall().since(start) + self.drift().of(ttl.as_duration()) < ttl.as_duration();
            let mut granted = Vec::new();
            let mut extended = Vec::new();
            let mut refused = Vec::new();
            let (mut stale, mut failure) = (0, None);
            for (at, answer) in answers.into_iter().enumerate() {
                match answer {
                    Ok(answer) => match answer.vote() {
                        Ballot::Granted => granted.push((at, answer)),
                        Ballot::Extended(token) => extended.push((at, token, answer)),
                        Ballot::Refused => refused.push(answer),
                        Ballot::Stale => stale += 1,
                    },
                    Err(e) => failure = Some(e),
                }
            }
            let answered = granted.len() + extended.len() + refused.len() + stale;
            if valid && granted.len() >= self.quorum {
                return Ok(Decided::Granted(granted.swap_remove(0).1));
            }
            let tokens: Vec<u64> = extended.iter().map(|(_, token, _)| *token).collect();
            if let Some(token) = most_common(&tokens)
                && valid
                && tokens.iter().filter(|t| **t == token).count() >= self.quorum
            {
                self.undo(
                    key,
                    owner,
                    granted.iter().map(|(at, answer)| (*at, answer.undo())),
                )
                .await;
                let (_, _, answer) = extended
                    .into_iter()
                    .find(|(_, t, _)| *t == token)
                    .expect("counted");
                return Ok(Decided::Extended(answer));
            }
            self.undo(
                key,
                owner,
                granted.iter().map(|(at, answer)| (*at, answer.undo())),
            )
            .await;
            if answered < self.quorum {
                return Err(no_majority(answered, self.nodes.len(), doing, failure));
            }
            if !valid {
                return Err(StoreError::Unavailable {
                    message: format!("Redis: {doing}: the nodes took longer to answer than the lease's TTL"),
                    source: None,
                });
            }
            if granted.len() + stale < self.quorum && !refused.is_empty() {
                return Ok(Decided::Refused(refused));
            }
            // Racing proposals, or the owner's own lease on too few nodes: give those copies
            // up too, and try again with a new token after a moment.
            self.undo(
                key,
                owner,
                extended
                    .iter()
                    .map(|(at, token, _)| (*at, (*token, String::new()))),
            )
            .await;
            pause(attempt).await;
        }
        Err(contended(doing, &key.name))
    }

    /// Takes back the grants of tokens on nodes (by index: token, and the owner's hold it
    /// replaced, if any). Should a node fail to answer, its grant ends by itself.
    async fn undo(&self, key: &Key, owner: &Owner, grants: impl Iterator<Item = (usize, (u64, String))>) {
        let undos = grants.map(|(at, (token, replaced))| async move {
            let args = [
                Arg::Text(letter(key.kind)),
                Arg::Text(key.name.as_str()),
                Arg::Text(owner.as_str()),
                Arg::Number(token),
                Arg::Text(&replaced),
            ];
            if let Err(e) = self.nodes[at].call("undo", &args).await {
                tracing::warn!(error = %e, name = %key.name, token, "Redis: undoing a grant that did not win a majority failed: it ends at its expiry");
            }
        });
        join_all(undos).await;
    }

    /// Locks on one node, in one script: all of them or none. Every lock's outcome if all were
    /// granted; else the refusals.
    async fn acquire_on_one(
        &self,
        names: &[Resource],
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        let reply = self.nodes[0]
            .call("acquire", &acquire_args(owner, terms, 0, ON_ONE_NODE, names))
            .await?;
        let took = took(reply, names)?;
        let refused = took
            .iter()
            .any(|t| !matches!(t.how, How::Granted { .. } | How::Extended(_)));
        let outcomes = took
            .iter()
            .zip(names)
            .filter(|(t, _)| !refused || matches!(t.how, How::Held(_) | How::Delayed(_)))
            .map(|(t, name)| t.outcome(name))
            .collect::<Result<_>>()?;
        Ok(if refused {
            AcquireAllOutcome::Refused(outcomes)
        } else {
            AcquireAllOutcome::Granted(outcomes)
        })
    }

    async fn acquire_on_majority(
        &self,
        resource: &Resource,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireOutcome> {
        let names = std::slice::from_ref(resource);
        for attempt in 0..ATTEMPTS {
            let decided = self
                .grant(
                    &Key::lock(resource),
                    owner,
                    (terms.ttl, 0),
                    |node, start, proposal| {
                        Box::pin(async move {
                            let args = acquire_args(owner, terms, proposal.token, self.shown(start), names);
                            let reply = node.call("acquire", &args).await?;
                            took(reply, names)?
                                .pop()
                                .ok_or_else(|| odd("acquire", "no answer"))
                        })
                    },
                )
                .await?;
            let refusals = match decided {
                Decided::Granted(took) | Decided::Extended(took) => return took.outcome(resource),
                Decided::Refused(refusals) => refusals,
            };
            // Report the holder a majority keeps, not a racer's grant on a few nodes that is
            // being undone: the lease a majority agrees on, or else the owner whose leases
            // refused on a majority of nodes.
            if let Some(holder) = self.get(resource).await?
                && holder.owner != *owner
            {
                let expires_in = refusals
                    .iter()
                    .find_map(|t| match &t.how {
                        How::Held(r) if r.token == holder.token.0 => Some(r.left(t.now)),
                        _ => None,
                    })
                    .unwrap_or_else(|| holder.expires_at.since(Timestamp::now_wall()));
                return Ok(AcquireOutcome::Held { holder, expires_in });
            }
            let held: Vec<(&str, &str)> = refusals
                .iter()
                .filter_map(|t| match &t.how {
                    How::Held(r) => Some((r.owner.as_str(), r.principal.as_str())),
                    _ => None,
                })
                .collect();
            if held.len() >= self.quorum
                && let Some(holder) = most_common(&held)
                && let Some(refusal) = refusals.iter().find(
                    |t| matches!(&t.how, How::Held(r) if (r.owner.as_str(), r.principal.as_str()) == holder),
                )
            {
                return refusal.outcome(resource);
            }
            if let Some(delayed) = refusals.iter().find(|t| matches!(t.how, How::Delayed(_))) {
                return delayed.outcome(resource);
            }
            pause(attempt).await;
        }
        Err(contended("acquire", resource))
    }

    /// `ask` on `node`, with `proposal` (0: the node's next token) and `shown` times.
    async fn acquire_hold_on(
        node: &Node,
        ask: HoldAsk<'_>,
        proposal: Proposal,
        shown: Shown,
    ) -> Result<HoldTook> {
        let HoldAsk {
            name,
            owner,
            claim,
            ttl,
            intent,
        } = ask;
        let limit = match claim {
            Claim::Permit { limit } => u64::from(limit),
            Claim::Read | Claim::Write => 0,
        };
        let [owner_name, principal] = owner_args(owner);
        let args = [
            Arg::Text(hold_letter(claim.kind())),
            Arg::Text(name.as_str()),
            owner_name,
            principal,
            Arg::Text(claim_text(claim)),
            Arg::Number(limit),
            Arg::Number(ttl.as_millis()),
            Arg::Number(intent.map_or(0, Ttl::as_millis)),
            Arg::Number(proposal.token),
            Arg::Number(proposal.slot),
            shown[0],
            shown[1],
            shown[2],
        ];
        let mut reply = node.call("acquire_hold", &args).await?;
        let (status, record) = reply.status()?;
        let replaced = reply.record()?;
        let writer_waits = reply.number()? == 1;
        let retry_in = Duration::from_millis(reply.number()?);
        let limit = u32::try_from(reply.number()?).map_err(|_| odd("acquire_hold", "a limit above 2^32"))?;
        let holders = reply.records()?;
        let how = match (status.as_str(), record) {
            ("granted", Some(record)) => HoldHow::Granted { record, replaced },
            ("extended", Some(record)) => HoldHow::Extended(record),
            ("busy", _) => HoldHow::Busy {
                holders,
                writer_waits,
                retry_in,
            },
            ("limit", _) => HoldHow::Limit(limit),
            ("stale", _) => HoldHow::Stale,
            (other, _) => return Err(odd("acquire_hold", other)),
        };
        Ok(HoldTook { how })
    }

    /// The refusal of a hold under Redlock that stands, from the nodes' `refusals`, or `None`
    /// if the acquire should try again: a permit refused for a slot a racer took while the
    /// semaphore has room (fewer permits than its limit on a majority), or a hold refused only by racers' grants on a few nodes, which
    /// are being undone. The holders reported are those a majority keeps, else those of a
    /// node that refused.
    async fn busy(
        &self,
        claim: Claim,
        owner: &Owner,
        name: &Resource,
        refusals: &[HoldTook],
    ) -> Result<Option<Busy>> {
        let busy: Vec<(&Vec<Record>, bool, Duration)> = refusals
            .iter()
            .filter_map(|t| match &t.how {
                HoldHow::Busy {
                    holders,
                    writer_waits,
                    retry_in,
                } => Some((holders, *writer_waits, *retry_in)),
                _ => None,
            })
            .collect();
        // A namesake of another principal is refused whatever the room.
        let namesake = busy
            .iter()
            .any(|(holders, ..)| holders.iter().any(|r| r.owner == owner.as_str()));
        let agreed: Vec<Hold> = self
            .holds_of(claim.kind(), name)
            .await?
            .into_iter()
            .filter(|h| h.lease.owner != *owner)
            .collect();
        // Room is left when fewer permits than the limit are held on a majority and some
        // node that refused was not full: a racer took the slot asked for.
        let room = match claim {
            Claim::Permit { limit } => {
                !namesake
                    && agreed.len() < to_usize(limit)
                    && busy.iter().any(|(holders, ..)| holders.len() < to_usize(limit))
            }
            Claim::Read | Claim::Write => false,
        };
        let writer_waits = busy.iter().any(|(_, waits, _)| *waits);
        if room || (agreed.is_empty() && !writer_waits && busy.len() < self.quorum) {
            return Ok(None);
        }
        let holders = match agreed.is_empty() {
            false => agreed,
            true => busy
                .iter()
                .max_by_key(|(holders, ..)| holders.len())
                .map(|(holders, ..)| holders.iter().map(|r| r.hold(name)).collect::<Result<Vec<_>>>())
                .transpose()?
                .unwrap_or_default(),
        };
        Ok(Some(Busy {
            holders,
            writer_waits,
            retry_in: busy
                .iter()
                .map(|(_, _, retry_in)| *retry_in)
                .min()
                .unwrap_or_default(),
        }))
    }

    /// The live holds of `kind` on `name` that a majority keeps alike.
    async fn holds_of(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        let args = [Arg::Text(hold_letter(kind)), Arg::Text(name.as_str())];
        let mut records = Vec::new();
        for mut reply in self.on_majority("holds", &args).await? {
            records.extend(reply.records()?);
        }
        agreed(&records, self.quorum)
            .iter()
            .map(|r| r.hold(name))
            .collect()
    }
}

/// The arguments of the script's `acquire`.
fn acquire_args<'a>(
    owner: &'a Owner,
    terms: Terms,
    proposal: u64,
    shown: Shown,
    names: &'a [Resource],
) -> Vec<Arg<'a>> {
    let [owner_name, principal] = owner_args(owner);
    let mut args = vec![
        owner_name,
        principal,
        Arg::Number(terms.ttl.as_millis()),
        Arg::Number(terms.max_hold.map_or(0, Ttl::as_millis)),
        Arg::Number(millis(terms.lock_delay)),
        Arg::Number(proposal),
    ];
    args.extend(shown);
    args.extend(names.iter().map(|name| Arg::Text(name.as_str())));
    args
}

/// An acquire of a hold, as the trait asks it.
#[derive(Debug, Clone, Copy)]
struct HoldAsk<'a> {
    name: &'a Resource,
    owner: &'a Owner,
    claim: Claim,
    ttl: Ttl,
    intent: Option<Ttl>,
}

/// What one node did with an acquire of one lock.
#[derive(Debug)]
struct Took {
    now: u64,
    how: How,
}

#[derive(Debug)]
enum How {
    Granted {
        record: Record,
        previous: Option<Record>,
    },
    Extended(Record),
    Held(Record),
    Delayed(Record),
    Stale,
    /// Free, but another lock of the same call was refused: nothing was written.
    Free,
}

/// Each lock's [`Took`] in the reply of the script's `acquire` of `names`.
fn took(mut reply: Reply, names: &[Resource]) -> Result<Vec<Took>> {
    let now = reply.now;
    names
        .iter()
        .map(|_| {
            let (status, record) = reply.status()?;
            let previous = reply.record()?;
            let how = match (status.as_str(), record) {
                ("granted", Some(record)) => How::Granted { record, previous },
                ("extended", Some(record)) => How::Extended(record),
                ("held", Some(record)) => How::Held(record),
                ("delayed", Some(record)) => How::Delayed(record),
                ("stale", None) => How::Stale,
                ("free", _) => How::Free,
                (other, _) => return Err(odd("acquire", other)),
            };
            Ok(Took { now, how })
        })
        .collect()
}

impl Took {
    fn outcome(&self, resource: &Resource) -> Result<AcquireOutcome> {
        Ok(match &self.how {
            How::Granted { record, previous } => AcquireOutcome::Granted {
                lease: record.lease(resource)?,
                expired: previous.as_ref().map(|p| p.lease(resource)).transpose()?,
            },
            How::Extended(record) => AcquireOutcome::Extended(record.lease(resource)?),
            How::Held(record) => AcquireOutcome::Held {
                holder: record.lease(resource)?,
                expires_in: record.left(self.now),
            },
            How::Delayed(record) => AcquireOutcome::Delayed {
                resource: resource.clone(),
                retry_in: record.closed_for(self.now),
            },
            How::Stale | How::Free => return Err(odd("acquire", "neither a grant nor a refusal")),
        })
    }
}

/// What one node did with an acquire of a hold.
#[derive(Debug)]
struct HoldTook {
    how: HoldHow,
}

#[derive(Debug)]
enum HoldHow {
    Granted {
        record: Record,
        replaced: Option<Record>,
    },
    Extended(Record),
    Busy {
        holders: Vec<Record>,
        writer_waits: bool,
        retry_in: Duration,
    },
    Limit(u32),
    Stale,
}

impl HoldTook {
    fn outcome(&self, name: &Resource) -> Result<HoldOutcome> {
        Ok(match &self.how {
            HoldHow::Granted { record, replaced } => HoldOutcome::Granted {
                hold: record.hold(name)?,
                replaced: replaced.as_ref().map(|r| r.hold(name)).transpose()?,
            },
            HoldHow::Extended(record) => HoldOutcome::Extended(record.hold(name)?),
            HoldHow::Busy {
                holders,
                writer_waits,
                retry_in,
            } => HoldOutcome::Busy(Busy {
                holders: holders.iter().map(|r| r.hold(name)).collect::<Result<_>>()?,
                writer_waits: *writer_waits,
                retry_in: *retry_in,
            }),
            HoldHow::Limit(limit) => HoldOutcome::LimitMismatch { limit: *limit },
            HoldHow::Stale => return Err(odd("acquire_hold", "a token refused on one node")),
        })
    }
}

/// How a node voted on a Redlock grant.
enum Ballot {
    Granted,
    Extended(u64),
    Refused,
    Stale,
}

/// A node's answer to a grant, as a vote.
trait Vote {
    fn vote(&self) -> Ballot;
    /// What takes back its grant: its token, and the record it replaced (or nothing).
    fn undo(&self) -> (u64, String);
}

impl Vote for Took {
    fn vote(&self) -> Ballot {
        match &self.how {
            How::Granted { .. } => Ballot::Granted,
            How::Extended(record) => Ballot::Extended(record.token),
            How::Held(_) | How::Delayed(_) | How::Free => Ballot::Refused,
            How::Stale => Ballot::Stale,
        }
    }

    fn undo(&self) -> (u64, String) {
        match &self.how {
            How::Granted { record, .. } | How::Extended(record) => (record.token, String::new()),
            _ => (0, String::new()),
        }
    }
}

impl Vote for HoldTook {
    fn vote(&self) -> Ballot {
        match &self.how {
            HoldHow::Granted { .. } => Ballot::Granted,
            HoldHow::Extended(record) => Ballot::Extended(record.token),
            HoldHow::Busy { .. } | HoldHow::Limit(_) => Ballot::Refused,
            HoldHow::Stale => Ballot::Stale,
        }
    }

    fn undo(&self) -> (u64, String) {
        match &self.how {
            HoldHow::Granted { record, replaced } => (
                record.token,
                replaced.as_ref().map(|r| r.raw.clone()).unwrap_or_default(),
            ),
            HoldHow::Extended(record) => (record.token, String::new()),
            _ => (0, String::new()),
        }
    }
}

/// What a majority decided of a grant: the answer of a node that granted or extended, or the
/// refusals.
enum Decided<T> {
    Granted(T),
    Extended(T),
    Refused(Vec<T>),
}

#[async_trait]
impl LockStore for RedisStore {
    async fn acquire_with(&self, resource: &Resource, owner: &Owner, terms: Terms) -> Result<AcquireOutcome> {
        if self.redlock() {
            return self.acquire_on_majority(resource, owner, terms).await;
        }
        let (AcquireAllOutcome::Granted(mut outcomes) | AcquireAllOutcome::Refused(mut outcomes)) = self
            .acquire_on_one(std::slice::from_ref(resource), owner, terms)
            .await?;
        outcomes.pop().ok_or_else(|| odd("acquire", "no answer"))
    }

    /// On one node, one script; under Redlock, one lock after another.
    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        if self.redlock() {
            return acquire_in_order(self, resources, owner, terms).await;
        }
        self.acquire_on_one(resources.as_slice(), owner, terms).await
    }

    async fn get(&self, resource: &Resource) -> Result<Option<fencelock_core::Lease>> {
        let mut records = Vec::new();
        for mut reply in self.on_majority("get", &[Arg::Text(resource.as_str())]).await? {
            records.extend(reply.record()?);
        }
        agreed(&records, self.quorum)
            .first()
            .map(|r| r.lease(resource))
            .transpose()
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let name = [Arg::Text(resource.as_str())];
        Ok(match self.judged("release", &name, owner, None, token).await? {
            Ok((record, ended_at)) => ReleaseOutcome::Released(Some(EndedLease {
                lease: record.lease(resource)?,
                ended_at,
            })),
            Err(refusal) => refusal.into(),
        })
    }

    async fn renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome> {
        let name = [Arg::Text(resource.as_str())];
        Ok(
            match self.judged("renew", &name, owner, Some(ttl), token).await? {
                Ok((record, _)) => RenewOutcome::Renewed(record.lease(resource)?),
                Err(refusal) => refusal.into(),
            },
        )
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        let (min, max) = bounds(query);
        let args = [
            Arg::Bytes(&min),
            Arg::Bytes(&max),
            Arg::Number(to_u64(query.limit + 1)),
        ];
        let mut pages = Vec::new();
        for mut reply in self.on_majority("list", &args).await? {
            let mut page = Vec::new();
            while !reply.is_empty() {
                page.push((resource(&reply.text()?)?, vec![reply.some_record()?]));
            }
            pages.push(page);
        }
        let (names, horizon) = merge(pages, query.limit, self.quorum);
        let mut leases = Vec::new();
        for (name, records) in names {
            leases.extend(records.first().map(|r| r.lease(&name)).transpose()?);
        }
        let (leases, next) = paged(leases, query.limit, horizon, |l| &l.resource);
        Ok(LeasePage { leases, next })
    }

    async fn purge_expired(&self) -> Result<Vec<Expired>> {
        let args = [Arg::Number(to_u64(PURGE_BATCH))];
        let replies = self.each(|node| node.call("purge", &args)).await;
        let mut expired: Vec<Expired> = Vec::new();
        let mut failure = None;
        let mut any = false;
        for reply in replies {
            let mut reply = match reply {
                Ok(reply) => reply,
                Err(e) => {
                    failure = Some(e);
                    continue;
                }
            };
            any = true;
            while !reply.is_empty() {
                let kind = node::kind_of(&reply.text()?).ok_or_else(|| odd("purge", "a kind"))?;
                let name = resource(&reply.text()?)?;
                let lease = reply.some_record()?.lease(&name)?;
                if !expired.iter().any(|e| e.kind == kind && e.lease == lease) {
                    expired.push(Expired { kind, lease });
                }
            }
        }
        match (any, failure) {
            (false, Some(e)) => Err(e),
            _ => Ok(expired),
        }
    }

    async fn acquire_hold(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        intent: Option<Ttl>,
    ) -> Result<HoldOutcome> {
        let ask = HoldAsk {
            name,
            owner,
            claim,
            ttl,
            intent,
        };
        if !self.redlock() {
            return Self::acquire_hold_on(&self.nodes[0], ask, Proposal::NONE, ON_ONE_NODE)
                .await?
                .outcome(name);
        }
        let key = Key::hold(claim.kind(), name);
        let slots = match claim {
            Claim::Permit { limit } => limit,
            Claim::Read | Claim::Write => 0,
        };
        for attempt in 0..ATTEMPTS {
            let decided = self
                .grant(&key, owner, (ttl, slots), |node, start, proposal| {
                    Box::pin(Self::acquire_hold_on(node, ask, proposal, self.shown(start)))
                })
                .await?;
            let refusals = match decided {
                Decided::Granted(took) | Decided::Extended(took) => return took.outcome(name),
                Decided::Refused(refusals) => refusals,
            };
            if let Some(limit) = refusals.iter().find_map(|t| match t.how {
                HoldHow::Limit(limit) => Some(limit),
                _ => None,
            }) {
                return Ok(HoldOutcome::LimitMismatch { limit });
            }
            if let Some(busy) = self.busy(claim, owner, name, &refusals).await? {
                return Ok(HoldOutcome::Busy(busy));
            }
            pause(attempt).await;
        }
        Err(contended("acquire_hold", name))
    }

    async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        self.holds_of(kind, name).await
    }

    async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let head = [Arg::Text(hold_letter(kind)), Arg::Text(name.as_str())];
        Ok(
            match self.judged("release_hold", &head, owner, None, token).await? {
                Ok((record, ended_at)) => ReleaseOutcome::Released(Some(EndedLease {
                    lease: record.hold(name)?.lease,
                    ended_at,
                })),
                Err(refusal) => refusal.into(),
            },
        )
    }

    async fn renew_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome<Hold>> {
        let head = [Arg::Text(hold_letter(kind)), Arg::Text(name.as_str())];
        Ok(
            match self.judged("renew_hold", &head, owner, Some(ttl), token).await? {
                Ok((record, _)) => RenewOutcome::Renewed(record.hold(name)?),
                Err(refusal) => refusal.into(),
            },
        )
    }

    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage> {
        let (min, max) = bounds(query);
        let args = [
            Arg::Text(hold_letter(kind)),
            Arg::Bytes(&min),
            Arg::Bytes(&max),
            Arg::Number(to_u64(query.limit + 1)),
        ];
        let mut pages = Vec::new();
        for mut reply in self.on_majority("list_holds", &args).await? {
            let mut page = Vec::new();
            while !reply.is_empty() {
                let name = resource(&reply.text()?)?;
                let count = reply.number()?;
                let holds = (0..count)
                    .map(|_| reply.some_record())
                    .collect::<Result<Vec<_>>>()?;
                page.push((name, holds));
            }
            pages.push(page);
        }
        let (names, horizon) = merge(pages, query.limit, self.quorum);
        let mut held = Vec::new();
        for (name, records) in names {
            let holds = records
                .iter()
                .map(|r| r.hold(&name))
                .collect::<Result<Vec<_>>>()?;
            held.push((name, holds));
        }
        let (names, next) = paged(held, query.limit, horizon, |(name, _)| name);
        Ok(HoldPage { names, next })
    }

    async fn withdraw_intent(&self, name: &Resource, owner: &Owner) -> Result<()> {
        let [owner_name, principal] = owner_args(owner);
        self.on_majority(
            "withdraw_intent",
            &[Arg::Text(name.as_str()), owner_name, principal],
        )
        .await
        .map(drop)
    }

    async fn force_release(&self, key: &Key) -> Result<ForceOutcome> {
        let args = [Arg::Text(letter(key.kind)), Arg::Text(key.name.as_str())];
        let mut ended: Vec<EndedLease> = Vec::new();
        for mut reply in self.on_majority("force_release", &args).await? {
            let at = if self.redlock() {
                Timestamp::now_wall()
            } else {
                Timestamp::from_millis(reply.now)
            };
            for record in reply.records()? {
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

    async fn ping(&self) -> Result<()> {
        answered(self.each(Node::ping).await, self.quorum, "ping").map(drop)
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        Some(self.feed.subscribe())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ttl_granularity: Duration::from_millis(1),
            durable: false,
            knows_released_lease: true,
            shared: true,
            writer_intents: true,
            principals: true,
            lock_delays: true,
            drift: self.drift(),
        }
    }
}

/// What a Redlock acquire proposes to every node: a token, and for a permit, a slot (1 to
/// the limit).
#[derive(Debug, Clone, Copy)]
struct Proposal {
    token: u64,
    slot: u64,
}

impl Proposal {
    /// On one node: its next token, and no slot (permits are counted).
    const NONE: Self = Self { token: 0, slot: 0 };
}

/// The SHOWN_FROM, SHOWN_PER_MILLE and SHOWN_FIXED arguments of the script.
type Shown = [Arg<'static>; 3];

/// What the script reports on one node: its own times.
const ON_ONE_NODE: Shown = [Arg::Number(0), Arg::Number(0), Arg::Number(0)];

/// One node's part of a Redlock grant.
type NodeCall<'a, T> = std::pin::Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// A subscription to a node's release channel: feeds `feed` until the connection is lost.
type Listening = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Subscribes to `channel` on the node of `client` within `timeout`; the future that then
/// feeds `feed`.
async fn listen(
    client: redis::Client,
    channel: String,
    feed: ReleaseFeed,
    timeout: Duration,
) -> Result<Listening> {
    let unavailable = |e| StoreError::unavailable("Redis: subscribing to releases", e);
    let subscribing = async {
        let mut pubsub = client.get_async_pubsub().await.map_err(unavailable)?;
        pubsub.subscribe(&channel).await.map_err(unavailable)?;
        Ok(pubsub)
    };
    let pubsub = within(timeout, STORE, "subscribe to releases", subscribing).await?;
    Ok(Box::pin(async move {
        let mut messages = pubsub.into_on_message();
        while let Some(message) = messages.next().await {
            if let Ok(text) = message.get_payload::<String>()
                && let Some((kind, name)) = notice(&text)
            {
                feed.announce(&Key { kind, name });
            }
        }
    }))
}

/// The lex bounds (as ZRANGEBYLEX takes them) of the names a page of `query` may hold.
fn bounds(query: &ListQuery) -> (Vec<u8>, Vec<u8>) {
    let prefix = query.prefix.as_bytes();
    let min = match &query.after {
        Some(after) if after.as_str().as_bytes() >= prefix => [b"(", after.as_str().as_bytes()].concat(),
        _ => [b"[", prefix].concat(),
    };
    // No name holds byte 255 (it is not in UTF-8), so every name with the prefix sorts
    // before the prefix followed by it.
    let max = if prefix.is_empty() {
        b"+".to_vec()
    } else {
        [b"(", prefix, &[0xff]].concat()
    };
    (min, max)
}

/// The names that a majority of `pages` (one per node, each of at most `limit + 1` names in
/// byte order, with its records) agree on, with the records they agree on; and, where a
/// node's page was cut, the last name up to which every node was read.
fn merge(
    pages: Vec<Vec<(Resource, Vec<Record>)>>,
    limit: usize,
    quorum: usize,
) -> (Vec<(Resource, Vec<Record>)>, Option<Resource>) {
    let horizon = pages
        .iter()
        .filter(|page| page.len() > limit)
        .filter_map(|page| page.last().map(|(name, _)| name.clone()))
        .min();
    let mut names: std::collections::BTreeMap<Resource, Vec<Record>> = std::collections::BTreeMap::new();
    for (name, records) in pages.into_iter().flatten() {
        if horizon.as_ref().is_none_or(|h| name <= *h) {
            names.entry(name).or_default().extend(records);
        }
    }
    let agreed = names
        .into_iter()
        .map(|(name, records)| {
            let records = agreed(&records, quorum);
            (name, records)
        })
        .filter(|(_, records)| !records.is_empty())
        .collect();
    (agreed, horizon)
}

/// A page of at most `limit` items, and where the next starts: after the last item if more
/// followed, or after `horizon` (the last name read on every node) if a node had more.
fn paged<T>(
    mut items: Vec<T>,
    limit: usize,
    horizon: Option<Resource>,
    name: impl Fn(&T) -> &Resource,
) -> (Vec<T>, Option<Resource>) {
    let next = if items.len() > limit {
        items.truncate(limit);
        items.last().map(|item| name(item).clone())
    } else {
        horizon
    };
    (items, next)
}

/// The node addresses of `redis://host:port[,host:port…]`: one, or three or more.
fn addresses(url: &str) -> Result<Vec<String>> {
    let invalid = |why: &str| StoreError::Invalid(format!("{url:?} is not a Redis address: {why}"));
    let nodes = crate::remote::members(url, "redis").map_err(|why| invalid(&why))?;
    if nodes.len() == 2 {
        return Err(invalid(
            "Redlock needs at least three independent nodes (two cannot outvote the loss of one)",
        ));
    }
    Ok(nodes.into_iter().map(str::to_owned).collect())
}

fn resource(name: &str) -> Result<Resource> {
    Resource::new(name).map_err(|e| StoreError::Corrupt(format!("Redis: a key names {name:?}: {e}")))
}

/// [`StoreError::Unavailable`]: acquirers racing for `name` kept every try from a majority.
fn contended(doing: &str, name: &Resource) -> StoreError {
    StoreError::Unavailable {
        message: format!(
            "Redis: {doing} of {name}: no majority in {ATTEMPTS} tries (too many acquirers racing)"
        ),
        source: None,
    }
}

fn odd(op: &str, what: &str) -> StoreError {
    StoreError::Corrupt(format!("Redis: {op}: unexpected answer {what:?}"))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn to_usize(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Random bits, to spread racing acquirers.
fn random() -> u32 {
    getrandom::u32().unwrap_or_else(|_| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos())
    })
}

/// A random pause before try `attempt` + 1 of racing acquirers: up to 10 ms more each time.
async fn pause(attempt: usize) {
    let most = 10 * (to_u64(attempt) + 1);
    tokio::time::sleep(Duration::from_millis(u64::from(random()) % most + 1)).await;
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
            let error = addresses(bad).unwrap_err();
            assert!(matches!(error, StoreError::Invalid(_)), "{bad}: {error}");
        }
        assert!(
            addresses("redis://a:1,b:2")
                .unwrap_err()
                .to_string()
                .contains("at least three")
        );
    }

    #[test]
    fn list_bounds_cover_the_prefix_after_the_cursor() {
        let query = |prefix: &str, after: Option<&str>| ListQuery {
            prefix: prefix.into(),
            after: after.map(|a| Resource::new(a).unwrap()),
            limit: 10,
        };
        assert_eq!(bounds(&query("", None)), (b"[".to_vec(), b"+".to_vec()));
        assert_eq!(
            bounds(&query("job:", Some("job:7"))),
            (b"(job:7".to_vec(), b"(job:\xff".to_vec())
        );
        assert_eq!(
            bounds(&query("job:", Some("a"))),
            (b"[job:".to_vec(), b"(job:\xff".to_vec()),
            "a cursor before the prefix"
        );
    }
}
