//! The history indexed once for every property: its operations, and every lease any answer
//! showed or any guard spoke of, with the moments the properties reason about.

use std::collections::HashMap;

use crate::history::{Call, Entry, Event, Kind, Mono, Op, Outcome, Watched, Write};

/// An operation, by its place in [`Index::ops`].
pub(crate) type OpId = usize;

/// A lease, by its place in [`Index::leases`].
pub(crate) type LeaseId = usize;

/// When something happened, and the operation that shows it (for the slice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moment {
    pub at: Mono,
    pub op: OpId,
}

impl Moment {
    /// The earlier of two moments, either of which may be unknown.
    pub fn earliest(a: Option<Moment>, b: Option<Moment>) -> Option<Moment> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if b.at < a.at { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    fn keep_earliest(slot: &mut Option<Moment>, m: Moment) {
        *slot = Moment::earliest(*slot, Some(m));
    }

    fn keep_latest(slot: &mut Option<Moment>, m: Moment) {
        if slot.is_none_or(|s| m.at > s.at) {
            *slot = Some(m);
        }
    }
}

/// A lease, permit or hold: one grant. Owners are never reused by another grant, but an
/// owner may hold several leases of a name over time (a read-write lock's upgrade, or a lease
/// taken anew after its own expired), so the token belongs to the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LeaseKey<'h> {
    pub kind: Kind,
    pub name: &'h str,
    pub owner: &'h str,
    pub token: u64,
}

/// Who an owner is on a name of a kind: what acquires, renewals and releases are made as.
pub(crate) type Holder<'h> = (Kind, &'h str, &'h str);

/// What the history says of one lease.
#[derive(Debug, Clone)]
pub(crate) struct Lease<'h> {
    pub key: LeaseKey<'h>,
    /// A read hold shares its name with other readers; a lock and a write hold do not; a
    /// permit shares it up to `limit`. `None` while no answer said the hold's mode.
    pub exclusive: Option<bool>,
    /// A permit's semaphore limit, as its owner asked it.
    pub limit: Option<u32>,
    /// The earliest answer that showed it: it was granted before this completed.
    pub shown: Option<Moment>,
    /// A lower bound on when it was granted: the `invoked` of the acquire that took it (or,
    /// when no answer said which, of its owner's first acquire that was not refused).
    pub asked: Option<Moment>,
    /// When its owner was first told it holds it: the earliest `completed` of its owner's
    /// acquire answered with it.
    pub told: Option<Moment>,
    /// The latest `held_until` its guard reckoned (an acquire's, a renewal's or a loss's).
    pub held_until: Option<Moment>,
    /// The earliest release about it, by `invoked`, whatever its answer: the holder stops
    /// believing when it sends it.
    pub release_sent: Option<Moment>,
    /// The earliest release about it, by `invoked`, that may have freed it (ok or unknown).
    pub release_may_free: Option<Moment>,
    /// The earliest release about it answered ok, by `completed`.
    pub release_acked: Option<Moment>,
    /// The earliest loss its guard reported, by `completed`.
    pub lost: Option<Moment>,
    /// When its owner was told of a newer lease of the same name (a read-write lock's
    /// upgrade or downgrade replaces the hold).
    pub superseded: Option<Moment>,
    /// The servers' wall times: the earliest `acquired_at` (an extension sets it anew) and
    /// the latest `expires_at` any answer showed.
    pub wall: Option<(u64, u64)>,
}

impl<'h> Lease<'h> {
    fn new(key: LeaseKey<'h>) -> Self {
        Lease {
            key,
            exclusive: None,
            limit: None,
            shown: None,
            asked: None,
            told: None,
            held_until: None,
            release_sent: None,
            release_may_free: None,
            release_acked: None,
            lost: None,
            superseded: None,
            wall: None,
        }
    }

    /// Where the holder stopped believing it holds the lease, by the guard's own reckoning:
    /// its release sent, its loss reported, a newer lease of its own, or its `held_until`,
    /// whichever came first. `None`: nothing ends it in the history.
    pub fn belief_end(&self) -> Option<Moment> {
        [self.release_sent, self.lost, self.superseded, self.held_until]
            .into_iter()
            .fold(None, Moment::earliest)
    }
}

/// The history, indexed.
#[derive(Debug)]
pub(crate) struct Index<'h> {
    /// The run's first recorded moment: reports print times relative to it.
    pub origin: Mono,
    /// Every operation with its place in `entries`.
    pub ops: Vec<(usize, &'h Op)>,
    /// Every write with its place in `entries`.
    pub writes: Vec<(usize, &'h Write)>,
    /// The `Healed` entry: its time and place.
    pub healed: Option<(Mono, usize)>,
    /// Every event a watcher received, with its place, in the history's order.
    pub events: Vec<(usize, &'h Event)>,
    /// Every watcher's window, with its place.
    pub watched: Vec<(usize, &'h Watched)>,
    /// Every kill of a server (`kill-server` begun): when, which server, its place.
    pub kills: Vec<(Mono, u32, usize)>,
    pub leases: Vec<Lease<'h>>,
    by_key: HashMap<LeaseKey<'h>, LeaseId>,
    by_holder: HashMap<Holder<'h>, Vec<LeaseId>>,
    /// Every acquire, by the holder it was made as.
    pub acquires: HashMap<Holder<'h>, Vec<OpId>>,
    by_client_op: HashMap<(u32, u64), OpId>,
}

impl<'h> Index<'h> {
    pub fn new(entries: &'h [Entry]) -> Self {
        let mut index = Index {
            origin: entries
                .iter()
                .filter(|entry| !matches!(entry, Entry::Run(_)))
                .map(Entry::time)
                .min()
                .unwrap_or(Mono(0)),
            ops: Vec::new(),
            writes: Vec::new(),
            healed: None,
            events: Vec::new(),
            watched: Vec::new(),
            kills: Vec::new(),
            leases: Vec::new(),
            by_key: HashMap::new(),
            by_holder: HashMap::new(),
            acquires: HashMap::new(),
            by_client_op: HashMap::new(),
        };
        for (at, entry) in entries.iter().enumerate() {
            match entry {
                Entry::Op(op) => index.ops.push((at, op)),
                Entry::Write(write) => index.writes.push((at, write)),
                Entry::Healed { at: time } => {
                    if index.healed.is_none_or(|(t, _)| *time < t) {
                        index.healed = Some((*time, at));
                    }
                }
                Entry::Event(event) => index.events.push((at, event)),
                Entry::Watched(watched) => index.watched.push((at, watched)),
                Entry::Fault(fault) if fault.kind == "kill-server" && fault.phase == "begin" => {
                    if let Some(server) = fault.target.strip_prefix("server ").and_then(|n| n.parse().ok()) {
                        index.kills.push((fault.at, server, at));
                    }
                }
                Entry::Run(_) | Entry::Fault(_) => {}
            }
        }
        for (id, (_, op)) in index.ops.iter().enumerate() {
            index.by_client_op.insert((op.client, op.op), id);
            if op.call == Call::Acquire {
                for name in &op.names {
                    let holder = (op.kind, name.as_str(), op.owner.as_str());
                    index.acquires.entry(holder).or_default().push(id);
                }
            }
        }
        // Leases are first found in answers, so that the calls about them (renewals,
        // releases, losses) find them all, whatever order the lines came in.
        for id in 0..index.ops.len() {
            index.learn_shown(id);
        }
        for id in 0..index.ops.len() {
            index.learn_about(id);
        }
        index.learn_asked();
        index.learn_superseded();
        index
    }

    pub fn op(&self, id: OpId) -> &'h Op {
        self.ops[id].1
    }

    /// The place in the history of an operation.
    pub fn entry_of(&self, id: OpId) -> usize {
        self.ops[id].0
    }

    /// The operation a write names (its client and op), if the history has it.
    pub fn op_of_write(&self, write: &Write) -> Option<OpId> {
        self.by_client_op.get(&(write.client, write.op)).copied()
    }

    pub fn lease_id(&self, key: &LeaseKey<'h>) -> Option<LeaseId> {
        self.by_key.get(key).copied()
    }

    /// The leases an answer showed, as keys into [`Index::leases`].
    pub fn shown_by(&self, id: OpId) -> impl Iterator<Item = LeaseId> + '_ {
        let op = self.op(id);
        op.leases.iter().filter_map(move |seen| {
            self.lease_id(&LeaseKey {
                kind: op.kind,
                name: &seen.name,
                owner: &seen.owner,
                token: seen.token,
            })
        })
    }

    /// The leases a renewal, release or loss is about: its owner's, on its names, with its
    /// token (every one of that owner and name when it names no token).
    pub fn about(&self, id: OpId) -> Vec<LeaseId> {
        let op = self.op(id);
        let mut about = Vec::new();
        for name in &op.names {
            let holder = (op.kind, name.as_str(), op.owner.as_str());
            let Some(ids) = self.by_holder.get(&holder) else {
                continue;
            };
            about.extend(
                ids.iter()
                    .copied()
                    .filter(|&l| op.token.is_none_or(|t| self.leases[l].key.token == t)),
            );
        }
        about
    }

    /// When the owner first sent an acquire of the name that was not refused: the earliest
    /// it can have been granted anything of the name.
    pub fn first_try_not_refused(&self, holder: &Holder<'h>) -> Option<Moment> {
        self.acquires
            .get(holder)
            .into_iter()
            .flatten()
            .filter(|&&id| self.op(id).outcome != Outcome::Refused)
            .map(|&id| Moment {
                at: self.op(id).invoked,
                op: id,
            })
            .fold(None, |first, m| Moment::earliest(first, Some(m)))
    }

    fn learn_shown(&mut self, id: OpId) {
        let op = self.op(id);
        let own_grant = op.call == Call::Acquire && op.outcome == Outcome::Ok;
        let own_renewal = op.call == Call::Renew && op.outcome == Outcome::Ok;
        for seen in &op.leases {
            let key = LeaseKey {
                kind: op.kind,
                name: &seen.name,
                owner: &seen.owner,
                token: seen.token,
            };
            let lease_id = self.lease_or_new(key);
            let lease = &mut self.leases[lease_id];
            Moment::keep_earliest(
                &mut lease.shown,
                Moment {
                    at: op.completed,
                    op: id,
                },
            );
            lease.wall = Some(match lease.wall {
                Some((acquired, expires)) => (acquired.min(seen.acquired_at), expires.max(seen.expires_at)),
                None => (seen.acquired_at, seen.expires_at),
            });
            match seen.claim.as_deref() {
                Some("write") => lease.exclusive = Some(true),
                Some("read") => lease.exclusive = Some(false),
                _ => {}
            }
            if seen.owner != op.owner {
                continue;
            }
            if lease.exclusive.is_none() && op.call == Call::Acquire {
                lease.exclusive = op.mode.as_deref().map(|mode| mode == "write");
            }
            if own_grant {
                Moment::keep_earliest(
                    &mut lease.told,
                    Moment {
                        at: op.completed,
                        op: id,
                    },
                );
                if !op.extended {
                    Moment::keep_earliest(
                        &mut lease.asked,
                        Moment {
                            at: op.invoked,
                            op: id,
                        },
                    );
                }
                lease.limit = lease.limit.or(op.limit);
            }
            if (own_grant || own_renewal)
                && let Some(until) = held_until(op)
            {
                Moment::keep_latest(&mut lease.held_until, Moment { at: until, op: id });
            }
        }
    }

    fn learn_about(&mut self, id: OpId) {
        let op = self.op(id);
        if op.call == Call::Acquire && op.outcome == Outcome::Unknown {
            self.learn_given_up(id);
            return;
        }
        if !matches!(op.call, Call::Renew | Call::Release | Call::Lost) {
            return;
        }
        for lease_id in self.about(id) {
            let lease = &mut self.leases[lease_id];
            let invoked = Moment {
                at: op.invoked,
                op: id,
            };
            let completed = Moment {
                at: op.completed,
                op: id,
            };
            match (op.call, op.outcome) {
                (Call::Renew, Outcome::Ok) => {
                    if let Some(until) = held_until(op) {
                        Moment::keep_latest(&mut lease.held_until, Moment { at: until, op: id });
                    }
                }
                (Call::Release, outcome) => {
                    Moment::keep_earliest(&mut lease.release_sent, invoked);
                    if outcome != Outcome::Refused {
                        Moment::keep_earliest(&mut lease.release_may_free, invoked);
                    }
                    if outcome == Outcome::Ok {
                        Moment::keep_earliest(&mut lease.release_acked, completed);
                    }
                }
                (Call::Lost, _) => {
                    Moment::keep_earliest(&mut lease.lost, completed);
                    if let Some(until) = op.held_until {
                        Moment::keep_latest(&mut lease.held_until, Moment { at: until, op: id });
                    }
                }
                _ => {}
            }
        }
    }

    /// An acquire whose client gave up on it (no answer, or a 503): the server may still
    /// grant it, and then gives it back at once (its caller is gone), which no line of the
    /// history shows. So a lease of that owner and name that its owner was never told of
    /// may have been released from the moment the client gave up — as if a release had
    /// been sent then (seed 101 of the embedded store: granted after the client's timeout
    /// by a server resumed from a pause, given back, and the lock granted to the next
    /// caller 17 ms later, which the servers' clocks showed as two leases at once).
    fn learn_given_up(&mut self, id: OpId) {
        let op = self.op(id);
        let gave_up = Moment {
            at: op.completed,
            op: id,
        };
        for name in &op.names {
            let holder = (op.kind, name.as_str(), op.owner.as_str());
            for &lease_id in self.by_holder.get(&holder).into_iter().flatten() {
                let lease = &mut self.leases[lease_id];
                if lease.told.is_none() {
                    Moment::keep_earliest(&mut lease.release_may_free, gave_up);
                }
            }
        }
    }

    /// A lease no answer showed as granted (its acquire's outcome was unknown) was granted
    /// no earlier than its owner's first acquire of the name that was not refused.
    fn learn_asked(&mut self) {
        let unasked: Vec<(LeaseId, Option<Moment>)> = self
            .leases
            .iter()
            .enumerate()
            .filter(|(_, lease)| lease.asked.is_none())
            .map(|(id, lease)| {
                let key = lease.key;
                (id, self.first_try_not_refused(&(key.kind, key.name, key.owner)))
            })
            .collect();
        for (id, asked) in unasked {
            self.leases[id].asked = asked;
        }
    }

    fn learn_superseded(&mut self) {
        for ids in self.by_holder.values() {
            if ids.len() < 2 {
                continue;
            }
            let mut told: Vec<(Moment, LeaseId)> = ids
                .iter()
                .filter_map(|&id| self.leases[id].told.map(|m| (m, id)))
                .collect();
            told.sort_by_key(|(m, _)| m.at);
            for pair in told.windows(2) {
                let (_, older) = pair[0];
                let (newer, _) = pair[1];
                self.leases[older].superseded = Some(newer);
            }
        }
    }

    fn lease_or_new(&mut self, key: LeaseKey<'h>) -> LeaseId {
        if let Some(&id) = self.by_key.get(&key) {
            return id;
        }
        let id = self.leases.len();
        self.leases.push(Lease::new(key));
        self.by_key.insert(key, id);
        self.by_holder
            .entry((key.kind, key.name, key.owner))
            .or_default()
            .push(id);
        id
    }
}

/// Until when the guard reckons an acquire or renewal holds: as recorded, or else its send
/// plus the TTL it asked for (the same reckoning, for a runner that did not write it down).
fn held_until(op: &Op) -> Option<Mono> {
    op.held_until.or_else(|| {
        (op.ttl_ms > 0).then(|| Mono(op.invoked.0.saturating_add(op.ttl_ms.saturating_mul(1_000_000))))
    })
}
