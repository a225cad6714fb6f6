//! The checker against simulated runs: a seeded, in-process lock service with clients that
//! hold leases as the guards do (renew, release, say lost, let expire, pause and write late),
//! answers lost to timeouts, and a fenced resource. A correct service passes every property,
//! every seed; each deliberately broken one fails its property, every seed.

mod common;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use common::*;
use fencelock_torture::check::{Judgement, Property};
use fencelock_torture::history::{Call, Entry, Kind, Op, Outcome, RunInfo, Seen};

/// The service simulated, and how it is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Correct,
    /// From the fifth grant on, the first grant of a name granted before takes the token of
    /// the one before it.
    ReissuesToken,
    /// The resource takes every write.
    FencingOff,
    /// An acquire that finds the name full is granted all the same.
    GrantsWhileHeld,
    /// A release is answered ok and changes nothing.
    UndoesRelease,
    /// From the fifth grant on, one grant in ten is answered refused, and the lease stays.
    RefusesButGrants,
    /// A guard paused past its lease says lost only when its client wakes.
    LateGuard,
    /// After the faults healed, client 0 is refused every time.
    Starves,
    /// From the fifth grant on, one change in ten is not told on the server's stream.
    DropsEvents,
}

const SIM_TTL: u64 = 200;
/// The guard says lost when only this much is left before its held until.
const MARGIN: u64 = SIM_TTL / 5;
const NAMES: [(&str, Kind, u32); 3] = [
    ("x", Kind::Lock, 1),
    ("y", Kind::Lock, 1),
    ("s", Kind::Semaphore, 2),
];

/// xorshift64*: enough randomness for a simulation, and the same for a seed everywhere.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

#[derive(Debug, Clone)]
struct Lease {
    owner: String,
    token: u64,
    granted: u64,
    expires: u64,
}

#[derive(Debug, Clone)]
enum Request {
    Acquire,
    Renew(u64),
    Release(u64),
    Get,
}

#[derive(Debug, Clone)]
struct Held {
    name: &'static str,
    owner: String,
    token: u64,
    held_until: u64,
    acquire_op: u64,
}

#[derive(Debug)]
enum Event {
    /// The client decides what to do next.
    Next(u32),
    /// The server carries out a request, if it `reached` it.
    Apply(u32, Op, Request, bool),
    /// The answer reaches the client.
    Answer(u32, Op),
    /// A paused client wakes up and writes with the token it held.
    StaleWrite(u32, Held),
}

struct Sim {
    rng: Rng,
    target: Target,
    /// Clients stop starting work here; then the liveness phase.
    until: u64,
    clients: u32,
    leases: HashMap<&'static str, Vec<Lease>>,
    last_token: HashMap<&'static str, u64>,
    grants: u64,
    highest_write: HashMap<&'static str, u64>,
    holding: HashMap<u32, Held>,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: HashMap<u64, Event>,
    seq: u64,
    history: History,
    /// Whether the broken target did its harm at least once.
    broke: bool,
    /// Changes told on the server's stream.
    told: u64,
}

impl Sim {
    fn run(target: Target, seed: u64, clients: u32, until: u64) -> Sim {
        let mut sim = Sim {
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            target,
            until,
            clients,
            leases: HashMap::new(),
            last_token: HashMap::new(),
            grants: 0,
            highest_write: HashMap::new(),
            holding: HashMap::new(),
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            seq: 0,
            history: History::new().run(RunInfo {
                store: format!("simulated {target:?}"),
                seed,
                seconds: until / 1000,
                clients,
                servers: 1,
                faults: vec!["pause-client".to_owned()],
            }),
            broke: false,
            told: 0,
        };
        for client in 0..clients {
            sim.at(client.into(), Event::Next(client));
        }
        while let Some(Reverse((now, seq))) = sim.queue.pop() {
            if let Some(event) = sim.events.remove(&seq) {
                sim.handle(now, event);
            }
        }
        sim.liveness();
        // A watcher of the one server's stream, over the whole run.
        sim.history.watched(0, 0, 10 * until);
        sim
    }

    /// The server tells a change of `name`'s lease on its stream, at once.
    fn tell(&mut self, now: u64, event: &str, name: &str, lease: &Lease) {
        self.told += 1;
        if self.target == Target::DropsEvents && self.grants >= 5 && self.told.is_multiple_of(10) {
            self.broke = true;
            return;
        }
        let kind = kind_of(name);
        self.history
            .told_change(kind, 0, now, event, &show(name, kind, lease));
    }

    fn at(&mut self, time: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((time, self.seq)));
        self.events.insert(self.seq, event);
    }

    fn handle(&mut self, now: u64, event: Event) {
        match event {
            Event::Next(client) => self.next(now, client),
            Event::Apply(client, op, request, reached) => self.apply(now, client, op, request, reached),
            Event::Answer(client, op) => self.answer(now, client, op),
            Event::StaleWrite(client, held) => {
                self.history
                    .fault("pause-client", &format!("client {client}"), "heal", now);
                if self.target == Target::LateGuard {
                    self.broke = true;
                    self.say_lost(now, client, &held);
                }
                self.write(client, &held, now);
                self.next_at(now, client);
            }
        }
    }

    fn next(&mut self, now: u64, client: u32) {
        if now >= self.until {
            // Done with the faults phase: the guard lets its lease go.
            if let Some(held) = self.holding.remove(&client) {
                self.send(
                    now,
                    client,
                    release_op(client, &held, now),
                    Request::Release(held.token),
                );
            }
            return;
        }
        let Some(held) = self.holding.get(&client).cloned() else {
            let (name, kind, limit) = NAMES[self.rng.below(3) as usize];
            if self.rng.percent(20) {
                let get = op(client, Call::Get, name, "", now, now).kind(kind);
                self.send(now, client, get, Request::Get);
            } else {
                let owner = format!("c{client}-{now}");
                let mut acquire = op(client, Call::Acquire, name, &owner, now, now).kind(kind);
                acquire.ttl_ms = SIM_TTL;
                if kind == Kind::Semaphore {
                    acquire = acquire.limit(limit);
                }
                self.send(now, client, acquire, Request::Acquire);
            }
            return;
        };
        if now + MARGIN >= held.held_until {
            self.lose(now, client, &held);
            return;
        }
        let roll = self.rng.below(100);
        if roll < 40 {
            self.write(client, &held, now);
            self.next_at(now, client);
        } else if roll < 70 {
            let mut renew = op(client, Call::Renew, held.name, &held.owner, now, now).token(held.token);
            renew.kind = kind_of(held.name);
            renew.ttl_ms = SIM_TTL;
            self.send(now, client, renew, Request::Renew(held.token));
        } else if roll < 95 {
            self.holding.remove(&client);
            self.send(
                now,
                client,
                release_op(client, &held, now),
                Request::Release(held.token),
            );
        } else {
            // Paused past its lease: it writes once on waking, and lets the lease go.
            self.holding.remove(&client);
            self.history
                .fault("pause-client", &format!("client {client}"), "begin", now);
            self.at(now + 3 * SIM_TTL, Event::StaleWrite(client, held));
        }
    }

    /// The client's next step: after a pause, or when its guard's timer says lost.
    fn next_at(&mut self, now: u64, client: u32) {
        let mut at = now + self.rng.below(SIM_TTL / 4);
        if let Some(held) = self.holding.get(&client) {
            at = at.min(held.held_until - MARGIN).max(now);
        }
        self.at(at, Event::Next(client));
    }

    fn send(&mut self, now: u64, client: u32, op: Op, request: Request) {
        let op = op.through(0);
        // One request in fifty never arrives; one in fifty is never answered (a timeout).
        let reached = !self.rng.percent(2);
        let delay = 1 + self.rng.below(4);
        self.at(now + delay, Event::Apply(client, op, request, reached));
    }

    fn apply(&mut self, now: u64, client: u32, mut op: Op, request: Request, reached: bool) {
        if reached {
            self.serve(now, &mut op, request);
        }
        let timeout = !reached || self.rng.percent(2);
        let answered = if timeout {
            op.outcome = Outcome::Unknown;
            op.leases.clear();
            op.held_until = None;
            at_ms(op.invoked) + 30
        } else {
            now + 1 + self.rng.below(4)
        };
        op.completed = ms(answered);
        self.at(answered, Event::Answer(client, op));
    }

    /// The server: what the request does at `now`, written into the op's answer.
    fn serve(&mut self, now: u64, op: &mut Op, request: Request) {
        let name = name_of(&op.names[0]);
        let (_, kind, limit) = NAMES
            .iter()
            .copied()
            .find(|(n, _, _)| *n == name)
            .unwrap_or(NAMES[0]);
        let live = self.leases.entry(name).or_default();
        let (live_now, expired): (Vec<Lease>, Vec<Lease>) = std::mem::take(live)
            .into_iter()
            .partition(|lease| lease.expires > now);
        *live = live_now;
        for lease in &expired {
            self.tell(now, "expire", name, lease);
        }
        let live = self.leases.entry(name).or_default();
        // What the server tells on its stream, once the request is carried out.
        let mut changes: Vec<(&str, Lease)> = Vec::new();
        match request {
            Request::Get => {
                op.leases = live.iter().map(|l| show(name, kind, l)).collect();
                if live.is_empty() {
                    op.outcome = Outcome::Refused;
                }
            }
            Request::Acquire => {
                let full = live.len() >= limit as usize;
                let force = full && self.target == Target::GrantsWhileHeld;
                if full && !force {
                    op.outcome = Outcome::Refused;
                    op.leases = live.iter().map(|l| show(name, kind, l)).collect();
                    return;
                }
                self.broke |= force;
                self.grants += 1;
                let last = self.last_token.entry(name).or_default();
                let reuse =
                    self.target == Target::ReissuesToken && self.grants >= 5 && !self.broke && *last > 0;
                self.broke |= reuse;
                if !reuse {
                    *last += 1;
                }
                let lease = Lease {
                    owner: op.owner.clone(),
                    token: *last,
                    granted: now,
                    expires: now + SIM_TTL,
                };
                op.leases = vec![show(name, kind, &lease)];
                op.held_until = Some(ms(at_ms(op.invoked) + SIM_TTL));
                if self.target == Target::RefusesButGrants
                    && self.grants >= 5
                    && self.grants.is_multiple_of(10)
                {
                    self.broke = true;
                    op.outcome = Outcome::Refused;
                    op.leases = live.iter().map(|l| show(name, kind, l)).collect();
                    op.held_until = None;
                }
                changes.push(("grant", lease.clone()));
                live.push(lease);
            }
            Request::Renew(token) => {
                match live.iter_mut().find(|l| l.owner == op.owner && l.token == token) {
                    Some(lease) => {
                        lease.expires = now + SIM_TTL;
                        changes.push(("renew", lease.clone()));
                        op.leases = vec![show(name, kind, lease)];
                        op.held_until = Some(ms(at_ms(op.invoked) + SIM_TTL));
                    }
                    None => op.outcome = Outcome::Refused,
                }
            }
            Request::Release(token) => {
                match live.iter().position(|l| l.owner == op.owner && l.token == token) {
                    Some(_) if self.target == Target::UndoesRelease => self.broke = true,
                    Some(at) => {
                        changes.push(("release", live.remove(at)));
                    }
                    None => op.outcome = Outcome::Refused,
                }
            }
        }
        for (event, lease) in changes {
            self.tell(now, event, name, &lease);
        }
    }

    fn answer(&mut self, now: u64, client: u32, op: Op) {
        let call = op.call;
        let outcome = op.outcome;
        let name = name_of(&op.names[0]);
        let token = op.leases.first().map(|l| l.token);
        let held_until = op.held_until.map(at_ms);
        let owner = op.owner.clone();
        let number = self.history.push(op);
        match (call, outcome) {
            (Call::Acquire, Outcome::Ok) => {
                let (Some(token), Some(held_until)) = (token, held_until) else {
                    return;
                };
                let held = Held {
                    name,
                    owner,
                    token,
                    held_until,
                    acquire_op: number,
                };
                if now + MARGIN >= held_until {
                    // Answered too late to trust: the guard starts lost.
                    self.lose(now, client, &held);
                    return;
                }
                self.holding.insert(client, held);
            }
            (Call::Renew, Outcome::Ok) => {
                if let (Some(held), Some(until)) = (self.holding.get_mut(&client), held_until) {
                    held.held_until = held.held_until.max(until);
                }
            }
            (Call::Renew, Outcome::Refused) => {
                if let Some(held) = self.holding.get(&client).cloned() {
                    self.lose(now, client, &held);
                    return;
                }
            }
            _ => {}
        }
        self.next_at(now, client);
    }

    fn lose(&mut self, now: u64, client: u32, held: &Held) {
        self.holding.remove(&client);
        self.say_lost(now, client, held);
        self.next_at(now, client);
    }

    fn say_lost(&mut self, now: u64, client: u32, held: &Held) {
        let mut lost = lost(client, &held.owner, held.name, held.token, now).held_until(held.held_until);
        lost.kind = kind_of(held.name);
        self.history.push(lost);
    }

    fn write(&mut self, client: u32, held: &Held, now: u64) {
        let highest = self.highest_write.entry(held.name).or_default();
        let fenced = held.token >= *highest;
        let accepted = fenced || self.target == Target::FencingOff;
        self.broke |= !fenced && accepted;
        if accepted {
            *highest = (*highest).max(held.token);
        }
        self.history
            .write(client, held.acquire_op, held.name, held.token, now, accepted);
    }

    /// Every fault healed: each client takes a lock of its own at once.
    fn liveness(&mut self) {
        let healed = self.until + 3 * SIM_TTL + 100;
        self.history.healed(healed);
        for client in 0..self.clients {
            let name = format!("live-{client}");
            let from = healed + 1 + u64::from(client);
            if client == 0 && self.target == Target::Starves {
                // Tried again and again, past the bound.
                self.broke = true;
                for round in 0..8 {
                    let at = from + round * LIVENESS.as_millis() as u64 / 4;
                    let owner = format!("c{client}-live-{round}");
                    let refused = grant(client, &owner, &name, 1, at, at + 2).outcome(Outcome::Refused);
                    self.history.push(refused.liveness());
                }
                continue;
            }
            self.history
                .push(grant(client, &format!("c{client}-live"), &name, 1, from, from + 2).liveness());
        }
    }
}

fn release_op(client: u32, held: &Held, now: u64) -> Op {
    release(client, &held.owner, held.name, held.token, now, now).kind(kind_of(held.name))
}

fn show(name: &str, kind: Kind, lease: &Lease) -> Seen {
    let mut seen = seen(name, &lease.owner, lease.token, lease.granted, lease.expires);
    if kind == Kind::Semaphore {
        seen.claim = Some("permit".to_owned());
    }
    seen
}

fn name_of(name: &str) -> &'static str {
    NAMES
        .iter()
        .map(|(n, _, _)| *n)
        .find(|n| *n == name)
        .unwrap_or("x")
}

fn kind_of(name: &str) -> Kind {
    NAMES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or(Kind::Lock, |(_, kind, _)| *kind)
}

#[test]
fn a_correct_service_passes_every_property_on_every_seed() {
    for seed in 1..=30 {
        let sim = Sim::run(Target::Correct, seed, 8, 4000);
        let report = sim.history.check();
        assert!(report.is_ok(), "seed {seed}:\n{report}");
        for verdict in &report.verdicts {
            // Several names at once are not simulated.
            if verdict.property != Property::AllOrNone || verdict.checked > 0 {
                assert_eq!(verdict.judgement, Judgement::Pass, "seed {seed}:\n{report}");
            }
        }
        assert!(
            report.ops > 300,
            "seed {seed}: too short a run to judge:\n{report}"
        );
    }
}

#[test]
fn every_broken_service_fails_its_property_on_every_seed() {
    let broken = [
        (Target::ReissuesToken, Property::TokenOrder),
        (Target::FencingOff, Property::FencedWrites),
        (Target::GrantsWhileHeld, Property::Exclusion),
        (Target::UndoesRelease, Property::ReleasesStick),
        (Target::RefusesButGrants, Property::AllOrNone),
        (Target::LateGuard, Property::HolderSafety),
        (Target::Starves, Property::Liveness),
        (Target::DropsEvents, Property::Events),
    ];
    for (target, property) in broken {
        for seed in 1..=30 {
            let sim = Sim::run(target, seed, 8, 4000);
            let report = sim.history.check();
            assert!(sim.broke, "{target:?} seed {seed} did no harm");
            assert!(
                report.failed().any(|failed| failed == property),
                "{target:?} seed {seed}: {property:?} did not fail:\n{report}"
            );
            // What a person gets: the seed to run it again, and a few lines that show it.
            let printed = report.to_string();
            assert!(
                printed.starts_with(&format!("seed {seed} (store simulated {target:?}")),
                "{printed}"
            );
            assert!(
                printed.contains(&format!("\nFAIL {}: ", property.label())),
                "{printed}"
            );
            // A few entries: two to seven (a liveness failure shows up to six of the client's
            // tries, and the moment the faults healed).
            let (_, slice) = assert_fail(&report, property);
            let shown = slice
                .entries
                .iter()
                .filter(|entry| !matches!(entry, Entry::Fault(_)));
            assert!(
                (2..=7).contains(&shown.count()),
                "{target:?} seed {seed}:\n{slice}"
            );
        }
    }
}

#[test]
fn a_long_run_of_a_correct_service_passes() {
    // About a hundred thousand operations: the checker indexes by name and sorts once.
    let sim = Sim::run(Target::Correct, 99, 40, 90_000);
    let started = std::time::Instant::now();
    let report = sim.history.check();
    // For people (no assertion on speed): how long the check took.
    eprintln!("checked {} ops in {:?}", report.ops, started.elapsed());
    assert!(report.ops > 100_000, "{}", report.ops);
    assert!(report.is_ok(), "{report}");
}
