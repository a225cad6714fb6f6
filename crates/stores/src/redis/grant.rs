//! Acquires: of locks (one, or several all or none) and of holds, on one node in one script,
//! and under Redlock through [`Nodes::grant`](super::redlock::Nodes::grant), with the refusal
//! a majority stands behind.

use std::time::Duration;

use fencelock_core::hold::{Busy, Claim, HoldOutcome};
use fencelock_core::{AcquireAllOutcome, AcquireOutcome, Kind, Meta, Owner, Resource, Terms, Timestamp, Ttl};

use super::RedisStore;
use super::error::{RedisError, Result};
use super::redlock::{Ask, Ballot, Decided, Proposal, Vote, pause};
use super::reply::{Arg, Record, Reply, claim_text, hold_letter, owner_args};

/// The shortest lease Redlock grants: a shorter TTL is raised to it, so that the time a grant
/// takes (two round trips to a majority) and the drift allowance leave the lease most of its
/// TTL, and a try may wait a third of it — 100 ms — for a node: a shorter wait lost a whole
/// grant to a node busy for a moment (100 ms had 33 ms, and a loaded machine's CI run saw no
/// node answer in time). One node has no floor (its leases last exactly their TTL).
pub(super) const REDLOCK_MIN_TTL: Ttl = Ttl::from_const_millis(300);

/// What one node did with an acquire of locks: each name's outcome, or nothing (the try was
/// cancelled there, or came too late).
#[derive(Debug, Clone)]
pub(super) enum Took {
    Names {
        now: u64,
        hows: Vec<How>,
    },
    Barred,
    /// The node lost its data, and takes no part until it is brought up to date.
    Unmarked,
}

/// What one node did with one lock of an acquire.
#[derive(Debug, Clone)]
pub(super) enum How {
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

fn read_took(mut reply: Reply) -> Result<Took> {
    let now = reply.now;
    if reply.take_word("unmarked") {
        return Ok(Took::Unmarked);
    }
    if reply.take_word("cancelled") || reply.take_word("late") {
        return Ok(Took::Barred);
    }
    let mut hows = Vec::new();
    while !reply.is_empty() {
        let (status, record) = reply.status()?;
        let previous = reply.record()?;
        hows.push(match (status.as_str(), record) {
            ("granted", Some(record)) => How::Granted { record, previous },
            ("extended", Some(record)) => How::Extended(record),
            ("held", Some(record)) => How::Held(record),
            ("delayed", Some(record)) => How::Delayed(record),
            ("stale", None) => How::Stale,
            ("free", _) => How::Free,
            (other, _) => {
                return Err(RedisError::odd(
                    reply.node(),
                    "acquire",
                    format!("status {other:?}"),
                ));
            }
        });
    }
    Ok(Took::Names { now, hows })
}

impl Vote for Took {
    fn ballot(&self) -> Ballot {
        let Self::Names { hows, .. } = self else {
            return Ballot::Barred;
        };
        if hows.iter().any(|h| matches!(h, How::Held(_) | How::Delayed(_))) {
            return Ballot::Refused;
        }
        if hows.iter().any(|h| matches!(h, How::Stale | How::Free)) {
            return Ballot::Stale;
        }
        Ballot::Applied(
            hows.iter()
                .map(|h| match h {
                    How::Granted { record, .. } | How::Extended(record) => record.token,
                    _ => 0,
                })
                .collect(),
        )
    }

    fn unmarked(&self) -> bool {
        matches!(self, Self::Unmarked)
    }
}

impl How {
    fn outcome(&self, now: u64, resource: &Resource) -> Result<AcquireOutcome> {
        Ok(match self {
            Self::Granted { record, previous } => AcquireOutcome::Granted {
                lease: record.lease(resource)?,
                expired: previous.as_ref().map(|p| p.lease(resource)).transpose()?,
            },
            Self::Extended(record) => AcquireOutcome::Extended(record.lease(resource)?),
            Self::Held(record) => AcquireOutcome::Held {
                holder: record.lease(resource)?,
                expires_in: record.left(now),
            },
            Self::Delayed(record) => AcquireOutcome::Delayed {
                resource: resource.clone(),
                retry_in: record.closed_for(now),
            },
            Self::Stale | Self::Free => {
                return Err(RedisError::odd("", "acquire", "neither a grant nor a refusal"));
            }
        })
    }
}

/// What one node did with an acquire of a hold.
#[derive(Debug, Clone)]
pub(super) enum HoldTook {
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
    Barred,
    /// The node lost its data, and takes no part until it is brought up to date.
    Unmarked,
}

fn read_hold_took(mut reply: Reply) -> Result<HoldTook> {
    if reply.take_word("unmarked") {
        return Ok(HoldTook::Unmarked);
    }
    if reply.take_word("cancelled") || reply.take_word("late") {
        return Ok(HoldTook::Barred);
    }
    let (status, record) = reply.status()?;
    let replaced = reply.record()?;
    let writer_waits = reply.number()? == 1;
    let retry_in = Duration::from_millis(reply.number()?);
    let limit = u32::try_from(reply.number()?)
        .map_err(|_| RedisError::odd(reply.node(), "acquire_hold", "a limit above 2^32"))?;
    let holders = reply.records()?;
    Ok(match (status.as_str(), record) {
        ("granted", Some(record)) => HoldTook::Granted { record, replaced },
        ("extended", Some(record)) => HoldTook::Extended(record),
        ("busy", _) => HoldTook::Busy {
            holders,
            writer_waits,
            retry_in,
        },
        ("limit", _) => HoldTook::Limit(limit),
        ("stale", _) => HoldTook::Stale,
        (other, _) => {
            return Err(RedisError::odd(
                reply.node(),
                "acquire_hold",
                format!("status {other:?}"),
            ));
        }
    })
}

impl Vote for HoldTook {
    fn ballot(&self) -> Ballot {
        match self {
            Self::Granted { record, .. } | Self::Extended(record) => Ballot::Applied(vec![record.token]),
            Self::Busy { .. } | Self::Limit(_) => Ballot::Refused,
            Self::Stale => Ballot::Stale,
            Self::Barred | Self::Unmarked => Ballot::Barred,
        }
    }

    fn unmarked(&self) -> bool {
        matches!(self, Self::Unmarked)
    }
}

impl HoldTook {
    fn outcome(&self, name: &Resource) -> Result<HoldOutcome> {
        Ok(match self {
            Self::Granted { record, replaced } => HoldOutcome::Granted {
                hold: record.hold(name)?,
                replaced: replaced.as_ref().map(|r| r.hold(name)).transpose()?,
            },
            Self::Extended(record) => HoldOutcome::Extended(record.hold(name)?),
            Self::Busy {
                holders,
                writer_waits,
                retry_in,
            } => HoldOutcome::Busy(Busy {
                holders: holders.iter().map(|r| r.hold(name)).collect::<Result<_>>()?,
                writer_waits: *writer_waits,
                retry_in: *retry_in,
            }),
            Self::Limit(limit) => HoldOutcome::LimitMismatch { limit: *limit },
            Self::Stale | Self::Barred | Self::Unmarked => {
                return Err(RedisError::odd(
                    "",
                    "acquire_hold",
                    "neither a grant nor a refusal",
                ));
            }
        })
    }
}

/// The arguments of the script's `acquire`: the owner and terms, the try's call id (`""` on
/// one node) and shown times, then each name with its proposal (0 on one node).
fn acquire_args(
    owner: &Owner,
    terms: &Terms,
    call: &str,
    shown: [Arg; 3],
    names: &[Resource],
    tokens: &[u64],
) -> Vec<Arg> {
    let mut args = Vec::with_capacity(10 + 2 * names.len());
    args.extend(owner_args(owner));
    args.extend([
        Arg::Number(terms.ttl.as_millis()),
        Arg::Number(terms.max_hold.map_or(0, Ttl::as_millis)),
        Arg::Number(u64::try_from(terms.lock_delay.as_millis()).unwrap_or(u64::MAX)),
        Arg::text(call),
    ]);
    args.extend(shown);
    args.push(Arg::meta(terms.meta.as_ref()));
    for (i, name) in names.iter().enumerate() {
        args.push(Arg::text(name.as_str()));
        args.push(Arg::Number(tokens.get(i).copied().unwrap_or(0)));
    }
    args
}

/// An acquire of a hold, as the trait asks it.
#[derive(Debug, Clone)]
pub(super) struct HoldAsk {
    pub(super) name: Resource,
    pub(super) owner: Owner,
    pub(super) claim: Claim,
    pub(super) ttl: Ttl,
    pub(super) intent: Option<Ttl>,
    pub(super) meta: Option<Meta>,
}

impl HoldAsk {
    /// The arguments of the script's `acquire_hold`, with `proposal` (none on one node), the
    /// try's `call` id (`""` on one node) and `shown` times.
    fn args(&self, proposal: &Proposal, call: &str, shown: [Arg; 3]) -> Vec<Arg> {
        let limit = match self.claim {
            Claim::Permit { limit } => u64::from(limit),
            Claim::Read | Claim::Write => 0,
        };
        let mut args = vec![
            Arg::text(hold_letter(self.claim.kind())),
            Arg::text(self.name.as_str()),
        ];
        args.extend(owner_args(&self.owner));
        args.extend([
            Arg::text(claim_text(self.claim)),
            Arg::Number(limit),
            Arg::Number(self.ttl.as_millis()),
            Arg::Number(self.intent.map_or(0, Ttl::as_millis)),
            Arg::Number(proposal.tokens.first().copied().unwrap_or(0)),
            Arg::Number(proposal.slot),
            Arg::text(call),
        ]);
        args.extend(shown);
        args.push(Arg::meta(self.meta.as_ref()));
        args
    }
}

impl RedisStore {
    /// Locks on one node, in one script: all of them or none.
    pub(super) async fn locks_on_one(
        &self,
        names: &[Resource],
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        let none = Proposal {
            tokens: Vec::new(),
            slot: 0,
        };
        let args = acquire_args(
            owner,
            &terms,
            "",
            self.shown(Timestamp::EPOCH),
            names,
            &none.tokens,
        );
        let reply = self.nodes.list[0]
            .call("acquire", &args, self.nodes.timeout)
            .await?;
        let Took::Names { now, hows } = read_took(reply)? else {
            return Err(RedisError::odd(
                &self.nodes.list[0].address,
                "acquire",
                "a call barred on one node",
            ));
        };
        let refused = hows
            .iter()
            .any(|h| !matches!(h, How::Granted { .. } | How::Extended(_)));
        let outcomes = hows
            .iter()
            .zip(names)
            .filter(|(h, _)| !refused || matches!(h, How::Held(_) | How::Delayed(_)))
            .map(|(h, name)| h.outcome(now, name))
            .collect::<Result<_>>()?;
        Ok(if refused {
            AcquireAllOutcome::Refused(outcomes)
        } else {
            AcquireAllOutcome::Granted(outcomes)
        })
    }

    /// Locks under Redlock: every one or none, each with a token above the one before it in
    /// `names`; a refusal names the locks a majority keeps for another owner (or closed by a
    /// lock-delay), trying again while the nodes' refusals are only racers' grants being
    /// undone.
    pub(super) async fn locks_on_majority(
        &self,
        names: &[Resource],
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        let terms = Terms {
            ttl: terms.ttl.max(REDLOCK_MIN_TTL),
            ..terms
        };
        let mut attempt = 0;
        loop {
            let ask = {
                let (owner, names, shown) = (owner.clone(), names.to_vec(), self.shown_redlock());
                let terms = terms.clone();
                Ask {
                    op: "acquire",
                    kind: Kind::Lock,
                    names: names.clone(),
                    owner: owner.clone(),
                    ttl: terms.ttl,
                    slots: 0,
                    args: Box::new(move |proposal: &Proposal, call: &str, start: Timestamp| {
                        acquire_args(&owner, &terms, call, shown(start), &names, &proposal.tokens)
                    }),
                    read: read_took,
                }
            };
            match self.decide(ask).await? {
                Decided::Granted { answers, tokens } => {
                    let from = Decided::per_name(&answers, &tokens);
                    let outcomes = names
                        .iter()
                        .enumerate()
                        .map(|(i, name)| match &answers[from[i]] {
                            Took::Names { now, hows } => hows[i].outcome(*now, name),
                            Took::Barred | Took::Unmarked => {
                                Err(RedisError::odd("", "acquire", "a barred call granted"))
                            }
                        })
                        .collect::<Result<_>>()?;
                    return Ok(AcquireAllOutcome::Granted(outcomes));
                }
                Decided::Refused(refusals) => {
                    let mut standing = Vec::new();
                    for (i, name) in names.iter().enumerate() {
                        if let Some(refusal) = self.refusal_of(name, i, owner, &refusals).await? {
                            standing.push(refusal);
                        }
                    }
                    if !standing.is_empty() {
                        return Ok(AcquireAllOutcome::Refused(standing));
                    }
                }
            }
            pause(attempt).await;
            attempt += 1;
        }
    }

    /// The refusal of lock `name` (the `at`th of the call) that a majority stands behind,
    /// from the nodes' `refusals`: the holder a majority keeps (not a racer's grant on a few
    /// nodes that is being undone), else the owner whose leases refused on a majority of
    /// nodes, else a lock-delay; `None` if nothing of it stands in the way.
    async fn refusal_of(
        &self,
        name: &Resource,
        at: usize,
        owner: &Owner,
        refusals: &[Took],
    ) -> Result<Option<AcquireOutcome>> {
        let hows: Vec<(u64, &How)> = refusals
            .iter()
            .filter_map(|t| match t {
                Took::Names { now, hows } => hows.get(at).map(|h| (*now, h)),
                Took::Barred | Took::Unmarked => None,
            })
            .collect();
        if !hows
            .iter()
            .any(|(_, h)| matches!(h, How::Held(_) | How::Delayed(_)))
        {
            return Ok(None);
        }
        if let Some(holder) = self.lease_of(name).await?
            && holder.owner != *owner
        {
            let expires_in = hows
                .iter()
                .find_map(|(now, h)| match h {
                    How::Held(r) if r.token == holder.token.0 => Some(r.left(*now)),
                    _ => None,
                })
                .unwrap_or_else(|| holder.expires_at.since(self.nodes.clock.now()));
            return Ok(Some(AcquireOutcome::Held { holder, expires_in }));
        }
        let held: Vec<(&str, &str)> = hows
            .iter()
            .filter_map(|(_, h)| match h {
                How::Held(r) => Some((r.owner.as_str(), r.principal.as_str())),
                _ => None,
            })
            .collect();
        if held.len() >= self.nodes.quorum
            && let Some(holder) = super::quorum::most_common(&held)
            && let Some((now, how)) = hows.iter().find(
                |(_, h)| matches!(h, How::Held(r) if (r.owner.as_str(), r.principal.as_str()) == holder),
            )
        {
            return how.outcome(*now, name).map(Some);
        }
        match hows.iter().find(|(_, h)| matches!(h, How::Delayed(_))) {
            Some((now, delayed)) => delayed.outcome(*now, name).map(Some),
            None => Ok(None),
        }
    }

    /// A hold on one node: one script.
    pub(super) async fn hold_on_one(&self, ask: &HoldAsk) -> Result<HoldOutcome> {
        let none = Proposal {
            tokens: Vec::new(),
            slot: 0,
        };
        let args = ask.args(&none, "", self.shown(Timestamp::EPOCH));
        let reply = self.nodes.list[0]
            .call("acquire_hold", &args, self.nodes.timeout)
            .await?;
        read_hold_took(reply)?.outcome(&ask.name)
    }

    /// A hold under Redlock: a permit is a lock on one of the semaphore's slots (see the
    /// module docs); a refusal is what a majority stands behind, tried again while it is only
    /// racers' grants being undone or a slot a racer took while the semaphore has room.
    pub(super) async fn hold_on_majority(&self, ask: HoldAsk) -> Result<HoldOutcome> {
        let ask = HoldAsk {
            ttl: ask.ttl.max(REDLOCK_MIN_TTL),
            ..ask
        };
        let slots = match ask.claim {
            Claim::Permit { limit } => limit,
            Claim::Read | Claim::Write => 0,
        };
        let mut attempt = 0;
        loop {
            let grant = {
                let (this, shown) = (ask.clone(), self.shown_redlock());
                Ask {
                    op: "acquire_hold",
                    kind: ask.claim.kind().into(),
                    names: vec![ask.name.clone()],
                    owner: ask.owner.clone(),
                    ttl: ask.ttl,
                    slots,
                    args: Box::new(move |proposal: &Proposal, call: &str, start: Timestamp| {
                        this.args(proposal, call, shown(start))
                    }),
                    read: read_hold_took,
                }
            };
            match self.decide(grant).await? {
                Decided::Granted { answers, tokens } => {
                    let from = Decided::per_name(&answers, &tokens);
                    return answers[from[0]].outcome(&ask.name);
                }
                Decided::Refused(refusals) => {
                    if let Some(limit) = refusals.iter().find_map(|t| match t {
                        HoldTook::Limit(limit) => Some(*limit),
                        _ => None,
                    }) {
                        return Ok(HoldOutcome::LimitMismatch { limit });
                    }
                    if let Some(busy) = self.busy(&ask, &refusals).await? {
                        return Ok(HoldOutcome::Busy(busy));
                    }
                }
            }
            pause(attempt).await;
            attempt += 1;
        }
    }

    /// The refusal of a hold under Redlock that stands, from the nodes' `refusals`, or `None`
    /// if the acquire should try again: a permit refused for a slot a racer took while the
    /// semaphore has room (fewer permits than its limit on a majority), or a hold refused only
    /// by racers' grants on a few nodes, which are being undone. The holders reported are
    /// those a majority keeps, else those of a node that refused.
    async fn busy(&self, ask: &HoldAsk, refusals: &[HoldTook]) -> Result<Option<Busy>> {
        let busy: Vec<(&Vec<Record>, bool, Duration)> = refusals
            .iter()
            .filter_map(|t| match t {
                HoldTook::Busy {
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
            .any(|(holders, ..)| holders.iter().any(|r| r.owner == ask.owner.as_str()));
        let agreed: Vec<fencelock_core::Hold> = self
            .holds_of(ask.claim.kind(), &ask.name)
            .await?
            .into_iter()
            .filter(|h| h.lease.owner != ask.owner)
            .collect();
        // Room is left when fewer permits than the limit are held on a majority and some
        // node that refused was not full: a racer took the slot asked for.
        let room = match ask.claim {
            Claim::Permit { limit } => {
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                !namesake && agreed.len() < limit && busy.iter().any(|(holders, ..)| holders.len() < limit)
            }
            Claim::Read | Claim::Write => false,
        };
        let writer_waits = busy.iter().any(|(_, waits, _)| *waits);
        if room || (agreed.is_empty() && !writer_waits && busy.len() < self.nodes.quorum) {
            return Ok(None);
        }
        let holders = match agreed.is_empty() {
            false => agreed,
            true => busy
                .iter()
                .max_by_key(|(holders, ..)| holders.len())
                .map(|(holders, ..)| {
                    holders
                        .iter()
                        .map(|r| r.hold(&ask.name))
                        .collect::<Result<Vec<_>>>()
                })
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

    /// A grant under Redlock, decided in a task of its own (see [`super::redlock`]).
    async fn decide<V: super::redlock::Vote>(&self, ask: Ask<V>) -> Result<Decided<V>> {
        self.nodes.grant(ask, self.drift()).await.unwrap_or_else(|_| {
            Err(RedisError::odd(
                "",
                "acquire",
                "the grant's task ended without an answer",
            ))
        })
    }
}
