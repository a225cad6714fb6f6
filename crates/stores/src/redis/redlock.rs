//! Redlock's grant: proposals of tokens, tries decided by the first majority that answers,
//! and the undo of a try that did not win — carried out whatever becomes of the caller.
//!
//! # One try
//!
//! 1. **Propose.** Read the name's token counter (and, for a permit, the taken slots) from
//!    the nodes; once a majority of nodes that keep Redlock's state has answered, propose one
//!    more than the greatest counter, at least the server's time in microseconds, and at
//!    least one more than the proposal for the name before it in the call (so that the tokens
//!    of several locks follow the order asked).
//! 2. **Grant.** Send the grant with a fresh call id to every node at once. A node applies it
//!    whole (every name of an all-or-none, in one script) or not at all, and keeps, under the
//!    call id, what it replaced of the owner's own leases.
//! 3. **Decide** as soon as the answers settle it: granted when, for every name, a majority
//!    of nodes applied the same token, and the time taken leaves some of the TTL; refused
//!    when too many nodes refused for a majority to remain; else try again (racers, a stale
//!    proposal) — or give up when too few nodes answer.
//! 4. **Undo** a try that did not win on every node that may have applied it: the undo puts
//!    back what the call replaced, deletes what it granted, and marks the call cancelled, so
//!    that the grant changes nothing should it reach a hung node later (a grant that arrives
//!    after its lease could be over is refused too). A node that cannot be reached for the
//!    undo is asked again until it answers or the call is too old to take effect.
//!
//! The tries run in a task of their own, so that a caller that gives up (its deadline, a
//! client that hung up) stops the next try but never the undo of the last; a grant that
//! wins after its caller left is given back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fencelock_core::{Clock, Drift, Kind, Owner, Resource, Timestamp, Ttl};
use tokio::sync::oneshot;

use super::error::{RedisError, Result};
use super::fanout::Answers;
use super::node::Node;
use super::reply::{Arg, Reply, letter, owner_args};
use crate::retry::random_u64;

/// A node's answer to a try of a grant, as a vote.
pub(super) trait Vote: Clone + Send + Sync + 'static {
    /// How the node voted.
    fn ballot(&self) -> Ballot;

    /// Whether the node said it lost its data (it votes for nothing until it is brought up
    /// to date).
    fn unmarked(&self) -> bool;
}

/// How a node voted on a try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ballot {
    /// It applied the try: the token each name has there now (new, or the owner's own).
    Applied(Vec<u64>),
    /// Something in the way (another owner, a lock-delay, a limit): nothing was written.
    Refused,
    /// A proposal was not above its counter: nothing was written.
    Stale,
    /// The call was cancelled there already, or arrived too late: nothing was written.
    Barred,
}

/// What a Redlock grant decided: the answers of the nodes that applied it with the tokens
/// chosen for each name, or the refusals.
pub(super) enum Decided<V> {
    Granted { answers: Vec<V>, tokens: Vec<u64> },
    Refused(Vec<V>),
}

impl<V: Vote> Decided<V> {
    /// For each name, an applied answer whose token for it is the one chosen.
    pub(super) fn per_name(answers: &[V], tokens: &[u64]) -> Vec<usize> {
        tokens
            .iter()
            .enumerate()
            .map(|(i, token)| {
                answers
                    .iter()
                    .position(|a| matches!(a.ballot(), Ballot::Applied(t) if t.get(i) == Some(token)))
                    .unwrap_or(0)
            })
            .collect()
    }
}

/// A grant to ask of every node, built anew for each try.
pub(super) struct Ask<V> {
    /// The script's operation.
    pub(super) op: &'static str,
    pub(super) kind: Kind,
    pub(super) names: Vec<Resource>,
    pub(super) owner: Owner,
    /// The lease's TTL, for its validity.
    pub(super) ttl: Ttl,
    /// A semaphore's limit (its slots), or 0.
    pub(super) slots: u32,
    /// The arguments of a try: from its proposal, its call id and when it is sent.
    pub(super) args: TryArgs,
    /// Reads a node's reply.
    pub(super) read: fn(Reply) -> Result<V>,
}

/// How a grant makes the arguments of each try.
pub(super) type TryArgs = Box<dyn Fn(&Proposal, &str, Timestamp) -> Vec<Arg> + Send + Sync>;

/// What a try proposes to every node: a token for each name, and for a permit a slot (1 to
/// the limit; 0 for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Proposal {
    pub(super) tokens: Vec<u64>,
    pub(super) slot: u64,
}

/// What the `last` operation says of one node.
#[derive(Debug)]
struct Last {
    /// Whether the node keeps Redlock's state (it was marked, and has not lost its data).
    marked: bool,
    /// How long ago (by its clock) it was marked.
    age: Duration,
    /// Per name: the last token, and the slots other owners' permits take.
    names: Vec<(u64, Vec<u64>)>,
}

fn read_last(mut reply: Reply) -> Result<Last> {
    let since = reply.number()?;
    let (marked, age) = (since > 0, Duration::from_millis(reply.now.saturating_sub(since)));
    let mut names = Vec::new();
    while !reply.is_empty() {
        let token = reply.number()?;
        let count = reply.number()?;
        let slots = (0..count).map(|_| reply.number()).collect::<Result<_>>()?;
        names.push((token, slots));
    }
    Ok(Last { marked, age, names })
}

/// The nodes of a Redlock, and what it knows of each.
pub(super) struct Nodes {
    pub(super) list: Vec<Arc<Node>>,
    pub(super) quorum: usize,
    /// The server's clock: when a call is sent, and the least token it proposes.
    pub(super) clock: Arc<dyn Clock>,
    /// How long a node may take to answer one call.
    pub(super) timeout: Duration,
    /// How long a new Redlock's marking may take ([`super::RedisOptions::marking_window`]).
    pub(super) marking_window: Duration,
    /// Nodes that lost their data (found without the mark while others have it): they count
    /// for nothing until they are brought up to date (see `repair`).
    pub(super) amnesiac: Vec<AtomicBool>,
}

impl Nodes {
    /// How long a node may take to answer a grant of `ttl`: small against the TTL, as
    /// Redlock asks, so that the time a silent node costs leaves the lease most of it.
    pub(super) fn grant_timeout(&self, ttl: Ttl) -> Duration {
        self.timeout.min(ttl.as_duration() / 3)
    }

    /// Why node `at` is not asked, if it is not.
    pub(super) fn excluded(&self, at: usize) -> Option<RedisError> {
        self.amnesiac[at]
            .load(Ordering::Acquire)
            .then(|| RedisError::Amnesiac {
                node: self.list[at].address.clone(),
            })
    }

    /// `op` with `args` on every node at once (in the caller's task when there is one node),
    /// each reply read with `read`, until `settled` says no further answer could change the
    /// outcome. The nodes still asked go on in the background.
    pub(super) async fn gather<T: Send + 'static>(
        &self,
        (op, args): (&'static str, Vec<Arg>),
        read: fn(Reply) -> Result<T>,
        settled: impl FnMut(&Answers<T>) -> bool,
    ) -> Answers<T> {
        if let [node] = self.list.as_slice() {
            return Answers::one(node, (op, &args), self.timeout, read).await;
        }
        let mut answers = Answers::start(&self.list, (op, args.into()), self.timeout, |_| None, read);
        answers.until(settled).await;
        answers
    }

    /// [`Nodes::gather`], then the answers of the nodes that answered if they are a
    /// majority; else [`RedisError::NoMajority`].
    pub(super) async fn majority<T: Send + 'static>(
        &self,
        (op, args): (&'static str, Vec<Arg>),
        read: fn(Reply) -> Result<T>,
        settled: impl FnMut(&Answers<T>) -> bool,
    ) -> Result<Vec<T>> {
        let mut answers = self.gather((op, args), read, settled).await;
        answers.majority(self.quorum, op)?;
        Ok(answers.into_answers())
    }

    /// Starts a grant in a task of its own; its decision, once made.
    pub(super) fn grant<V: Vote>(
        self: &Arc<Self>,
        ask: Ask<V>,
        drift: Drift,
    ) -> oneshot::Receiver<Result<Decided<V>>> {
        let (decided, decision) = oneshot::channel();
        let nodes = self.clone();
        tokio::spawn(async move { nodes.grant_detached(ask, drift, decided).await });
        decision
    }

    async fn grant_detached<V: Vote>(
        self: Arc<Self>,
        ask: Ask<V>,
        drift: Drift,
        decided: oneshot::Sender<Result<Decided<V>>>,
    ) {
        let mut attempt = 0;
        while !decided.is_closed() {
            let (answer, won) = match self.try_once(&ask, drift).await {
                Ok(Tried::Decided(answer, won)) => (Ok(answer), won),
                Ok(Tried::Again) => {
                    pause(attempt).await;
                    attempt += 1;
                    continue;
                }
                Err(e) => (Err(e), None),
            };
            if decided.send(answer).is_err()
                && let Some(won) = won
            {
                // The caller left before it could hear of the grant: give it back.
                let everywhere: Vec<usize> = (0..self.list.len()).collect();
                self.undo_on(&won, &everywhere).await;
            }
            return;
        }
    }

    /// One try: propose, grant, decide, and undo what did not win.
    async fn try_once<V: Vote>(self: &Arc<Self>, ask: &Ask<V>, drift: Drift) -> Result<Tried<V>> {
        let proposal = self.propose(ask).await?;
        let call = format!("{:016x}", random_u64());
        let start = self.clock.now();
        let args = (ask.args)(&proposal, &call, start);
        let mut answers = Answers::start(
            &self.list,
            (ask.op, args.into()),
            self.grant_timeout(ask.ttl),
            |at| self.excluded(at),
            ask.read,
        );
        let names = ask.names.len();
        let mut verdict = None;
        answers
            .until(|answers| {
                verdict = judge(answers, names, self.quorum);
                verdict.is_some()
            })
            .await;
        let undo = Undo {
            call,
            kind: ask.kind,
            owner: ask.owner.clone(),
            ttl: ask.ttl,
            names: ask.names.iter().cloned().zip(proposal.tokens.clone()).collect(),
        };
        for (at, _) in answers.answers().filter(|(_, v)| v.unmarked()) {
            self.found_amnesiac(at);
        }
        let ttl = ask.ttl.as_duration();
        let valid = self.clock.now().since(start) + drift.of(ttl) < ttl;
        match verdict.unwrap_or(Verdict::Again) {
            Verdict::Granted(tokens) if valid => {
                let applied = answers
                    .answers()
                    .filter(|(_, v)| matches!(v.ballot(), Ballot::Applied(_)))
                    .map(|(_, v)| v.clone())
                    .collect();
                self.tidy(&undo, &tokens, &answers);
                let granted = Decided::Granted {
                    answers: applied,
                    tokens,
                };
                Ok(Tried::Decided(granted, Some(undo)))
            }
            verdict => {
                let refusals = answers
                    .answers()
                    .filter(|(_, v)| v.ballot() == Ballot::Refused)
                    .map(|(_, v)| v.clone())
                    .collect();
                let tried = match verdict {
                    Verdict::Refused => Ok(Tried::Decided(Decided::Refused(refusals), None)),
                    Verdict::NoMajority => answers.majority(self.quorum, "acquire").map(|()| Tried::Again),
                    Verdict::Granted(_) | Verdict::Again => Ok(Tried::Again),
                };
                // Every node but those that refused (and changed nothing) may have applied it.
                let applied: Vec<usize> = answers
                    .answers()
                    .filter(|(_, v)| matches!(v.ballot(), Ballot::Applied(_)))
                    .map(|(at, _)| at)
                    .collect();
                let unknown: Vec<usize> = (0..self.list.len())
                    .filter(|at| !matches!(answers.got[*at], Some(Ok(_))))
                    .collect();
                drop(answers);
                self.undo_on(&undo, &applied).await;
                self.undo_in_background(undo, unknown);
                tried
            }
        }
    }

    /// After a win: the copies that differ from the winning tokens (a racer's grant on this
    /// node, the owner's old lease where the majority granted anew) are taken back, in the
    /// background — and on the nodes that did not answer (yet), any new grant of a name whose
    /// winning token is another.
    fn tidy<V: Vote>(&self, undo: &Undo, tokens: &[u64], answers: &Answers<V>) {
        let strays: Vec<(usize, Vec<(Resource, u64)>)> = answers
            .got
            .iter()
            .enumerate()
            .map(|(at, got)| {
                let stray = match got {
                    Some(Ok(v)) => match v.ballot() {
                        Ballot::Applied(applied) => stray(undo, tokens, |i| applied.get(i).copied()),
                        _ => Vec::new(),
                    },
                    Some(Err(_)) | None => stray(undo, tokens, |i| Some(undo.names[i].1)),
                };
                (at, stray)
            })
            .filter(|(_, stray)| !stray.is_empty())
            .collect();
        if strays.is_empty() {
            return;
        }
        let (nodes, undo, timeout) = (self.list.clone(), undo.clone(), self.grant_timeout(undo.ttl));
        tokio::spawn(async move {
            for (at, stray) in strays {
                let _ = nodes[at].call("undo", &undo.args(false, &stray), timeout).await;
            }
        });
    }

    /// The undo (with cancel) on the nodes `at`; those it did not reach are asked again in
    /// the background.
    async fn undo_on(&self, undo: &Undo, at: &[usize]) {
        let args: Arc<[Arg]> = undo.args(true, &undo.names).into();
        let timeout = self.grant_timeout(undo.ttl);
        let calls = at.iter().map(|&i| {
            let (node, args) = (self.list[i].clone(), args.clone());
            async move { (i, node.call("undo", &args, timeout).await) }
        });
        let missed: Vec<usize> = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .filter_map(|(i, done)| done.is_err().then_some(i))
            .collect();
        self.undo_in_background(undo.clone(), missed);
    }

    /// Asks `at` for the undo (with cancel) until each has answered, or until the call is so
    /// old that a node would refuse it as late anyway.
    fn undo_in_background(&self, undo: Undo, mut at: Vec<usize>) {
        if at.is_empty() {
            return;
        }
        let nodes = self.list.clone();
        let timeout = self.grant_timeout(undo.ttl);
        tokio::spawn(async move {
            let args: Arc<[Arg]> = undo.args(true, &undo.names).into();
            let give_up = tokio::time::Instant::now() + undo.ttl.as_duration() + UNDO_PATIENCE;
            let mut attempt = 0;
            while !at.is_empty() && tokio::time::Instant::now() < give_up {
                let mut left = Vec::new();
                for &i in &at {
                    if nodes[i].call("undo", &args, timeout).await.is_err() {
                        left.push(i);
                    }
                }
                at = left;
                if !at.is_empty() {
                    tokio::time::sleep(Duration::from_millis(50 << attempt.min(4))).await;
                    attempt += 1;
                }
            }
            if !at.is_empty() {
                tracing::warn!(call = %undo.call, "Redis: a node could not be reached to undo a grant that did not win: it ends at its expiry");
            }
        });
    }

    /// Phase one of a try: the tokens (and, for a permit, the slot) to propose, from the
    /// counters of a majority of the nodes that keep Redlock's state.
    async fn propose<V>(self: &Arc<Self>, ask: &Ask<V>) -> Result<Proposal> {
        let mut args = vec![Arg::text(letter(ask.kind))];
        args.extend(owner_args(&ask.owner));
        args.extend(ask.names.iter().map(|n| Arg::text(n.as_str())));
        let mut answers = Answers::start(
            &self.list,
            ("last", args.into()),
            self.grant_timeout(ask.ttl),
            |at| self.excluded(at),
            read_last,
        );
        let quorum = self.quorum;
        answers
            .until(|a| a.answers().filter(|(_, l)| l.marked).count() >= quorum)
            .await;
        let marked = answers.answers().filter(|(_, l)| l.marked).count();
        let unmarked: Vec<usize> = answers
            .answers()
            .filter(|(_, l)| !l.marked)
            .map(|(at, _)| at)
            .collect();
        let young = answers
            .answers()
            .any(|(_, l)| l.marked && l.age < self.marking_window);
        // A new Redlock needs every node to answer: a majority without the mark could be a
        // node that lost its data beside one that was never part of it.
        let new = (marked == 0 && unmarked.len() == self.list.len()) || young;
        if new {
            // A new Redlock (or one whose every node lost its data, which no algorithm
            // survives): these nodes keep its state from now on.
            self.mark(&unmarked).await;
        } else if marked > 0 {
            for &at in &unmarked {
                self.found_amnesiac(at);
            }
        }
        let lasts: Vec<&Last> = answers
            .answers()
            .filter(|(_, l)| l.marked || new)
            .map(|(_, l)| l)
            .collect();
        if lasts.len() < quorum {
            return Err(RedisError::NoMajority {
                doing: "acquire",
                answered: lasts.len(),
                nodes: self.list.len(),
                example: None,
            });
        }
        Ok(proposal(
            &lasts,
            ask.names.len(),
            ask.slots,
            quorum,
            self.clock.now(),
        ))
    }

    async fn mark(&self, at: &[usize]) {
        let calls = at.iter().map(|&i| self.list[i].call("mark", &[], self.timeout));
        futures_util::future::join_all(calls).await;
    }

    /// Node `at` lost its data: it counts for nothing until it is brought up to date, which
    /// starts now.
    fn found_amnesiac(self: &Arc<Self>, at: usize) {
        if !self.amnesiac[at].swap(true, Ordering::AcqRel) {
            tracing::warn!(node = %self.list[at].address, "Redis: a Redlock node lost its data; it takes no part until it is brought up to date");
            tokio::spawn(self.clone().repair(at));
        }
    }
}

/// How long after a call's TTL its undo is still worth sending: a node refuses a grant that
/// arrives later than this (the script's `GRACE / 2`).
const UNDO_PATIENCE: Duration = Duration::from_secs(30);

/// The names of `undo` whose token on a node (`on(i)`) differs from the winning one.
fn stray(undo: &Undo, tokens: &[u64], on: impl Fn(usize) -> Option<u64>) -> Vec<(Resource, u64)> {
    undo.names
        .iter()
        .enumerate()
        .filter(|(i, _)| on(*i).is_some_and(|token| token != tokens[*i]))
        .map(|(_, name)| name.clone())
        .collect()
}

/// The proposal from the counters of a majority (`lasts`, each with a counter per name):
/// per name one above the greatest counter, at least `now` in microseconds and above the
/// name before; for a permit of `slots`, a slot free on a majority, chosen at random.
fn proposal(lasts: &[&Last], names: usize, slots: u32, quorum: usize, now: Timestamp) -> Proposal {
    let mut floor = now.as_millis().saturating_mul(1000);
    let mut tokens = Vec::with_capacity(names);
    for name in 0..names {
        let last = lasts
            .iter()
            .filter_map(|l| l.names.get(name).map(|(t, _)| *t))
            .max()
            .unwrap_or(0);
        let token = (last + 1).max(floor);
        tokens.push(token);
        floor = token + 1;
    }
    let mut taken = vec![0_usize; usize::try_from(slots).unwrap_or(0)];
    for last in lasts {
        for slot in last.names.first().map(|(_, s)| s.as_slice()).unwrap_or_default() {
            let at = usize::try_from(*slot).ok().and_then(|slot| slot.checked_sub(1));
            if let Some(count) = at.and_then(|at| taken.get_mut(at)) {
                *count += 1;
            }
        }
    }
    let answered = lasts.len();
    // Racers spread over the free slots rather than all ask for the first.
    let free: Vec<usize> = (0..taken.len())
        .filter(|at| answered - taken[*at] >= quorum)
        .collect();
    let slot = match free.len() {
        0 => taken
            .iter()
            .enumerate()
            .min_by_key(|(_, count)| **count)
            .map(|(at, _)| at),
        n => free
            .get(usize::try_from(random_u64() % n as u64).unwrap_or(0))
            .copied(),
    }
    .map_or(0, |at| u64::try_from(at + 1).unwrap_or(0));
    Proposal { tokens, slot }
}

/// What one try came to: a decision (with, for a grant, how to give it back), or another
/// try.
enum Tried<V> {
    Decided(Decided<V>, Option<Undo>),
    Again,
}

/// What the answers so far decide.
#[derive(Debug)]
enum Verdict {
    /// For every name, a majority applied this token.
    Granted(Vec<u64>),
    /// Too many nodes refused for a majority to remain.
    Refused,
    /// Too few nodes answered.
    NoMajority,
    /// No majority can agree any more (racers, stale proposals): undo and try again.
    Again,
}

/// What the answers so far decide, if they decide: `None` while a node that has not
/// answered yet could still change it.
fn judge<V: Vote>(answers: &Answers<V>, names: usize, quorum: usize) -> Option<Verdict> {
    let pending = answers.pending();
    let ballots: Vec<Ballot> = answers.answers().map(|(_, v)| v.ballot()).collect();
    let mut tokens = Vec::with_capacity(names);
    let (mut granted, mut possible) = (true, true);
    for name in 0..names {
        let mut counts: Vec<(u64, usize)> = Vec::new();
        for ballot in &ballots {
            if let Ballot::Applied(applied) = ballot
                && let Some(&token) = applied.get(name)
            {
                match counts.iter_mut().find(|(t, _)| *t == token) {
                    Some((_, count)) => *count += 1,
                    None => counts.push((token, 1)),
                }
            }
        }
        let (token, count) = counts
            .into_iter()
            .max_by_key(|(_, count)| *count)
            .unwrap_or((0, 0));
        tokens.push(token);
        granted &= count >= quorum;
        possible &= count + pending >= quorum;
    }
    if granted {
        return Some(Verdict::Granted(tokens));
    }
    if possible {
        return None;
    }
    let refused = ballots.iter().filter(|b| **b == Ballot::Refused).count();
    if answers.answered() + pending < quorum {
        return Some(Verdict::NoMajority);
    }
    Some(if refused > 0 {
        Verdict::Refused
    } else {
        Verdict::Again
    })
}

/// A random pause before try `attempt` + 1 of racing acquirers: up to 10 ms more each time,
/// at most 100 ms.
pub(super) async fn pause(attempt: u32) {
    let most = 10 * u64::from(attempt.min(9) + 1);
    tokio::time::sleep(Duration::from_millis(random_u64() % most + 1)).await;
}

/// How to take back a try on a node: its call id, and each name with the token a new grant
/// of it got there (its proposal).
#[derive(Debug, Clone)]
pub(super) struct Undo {
    call: String,
    kind: Kind,
    owner: Owner,
    ttl: Ttl,
    names: Vec<(Resource, u64)>,
}

impl Undo {
    /// The undo's arguments: of the whole try, cancelled (`cancel`), or of the stray new
    /// grants among `names` of a try that won.
    fn args(&self, cancel: bool, names: &[(Resource, u64)]) -> Vec<Arg> {
        let mut args = vec![
            Arg::text(&self.call),
            Arg::text(if cancel { "cancel" } else { "stray" }),
            Arg::text(letter(self.kind)),
        ];
        args.extend(owner_args(&self.owner));
        args.push(Arg::Number(self.ttl.as_millis()));
        for (name, token) in names {
            args.push(Arg::text(name.as_str()));
            args.push(Arg::Number(*token));
        }
        args
    }
}
