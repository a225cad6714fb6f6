//! Hand-made histories for the checker's tests: times in milliseconds after the run's start,
//! wall times that agree with them unless a test says otherwise.

#![allow(dead_code)] // each test file uses part of it

use std::collections::HashMap;
use std::time::Duration;

use fencelock_torture::check::{self, Bounds, Judgement, Property, Report, Slice};
use fencelock_torture::history::{
    Call, Entry, Event, Fault, Kind, Mono, Op, Outcome, Phase, RunInfo, Seen, Watched, Write,
};

/// The TTL every hand-made grant asks for.
pub const TTL: u64 = 1000;
/// The liveness bound the tests hold histories to.
pub const LIVENESS: Duration = Duration::from_millis(500);
/// The servers' wall clock at the run's start, in ms since the epoch.
pub const WALL: u64 = 1_800_000_000_000;
/// The run's start on the monotonic clock: not 0, as on a real host.
const START: u64 = 5_000_000_000;

pub fn ms(t: u64) -> Mono {
    Mono(START + t * 1_000_000)
}

/// The milliseconds after the run's start of a time made by [`ms`].
pub fn at_ms(t: Mono) -> u64 {
    (t.0 - START) / 1_000_000
}

/// An operation of a lock, answered ok, numbered when pushed into a [`History`].
pub fn op(client: u32, call: Call, name: &str, owner: &str, from: u64, to: u64) -> Op {
    Op {
        client,
        op: 0,
        phase: Phase::Faults,
        call,
        kind: Kind::Lock,
        names: vec![name.to_owned()],
        owner: owner.to_owned(),
        server: None,
        limit: None,
        mode: None,
        ttl_ms: 0,
        wait_ms: 0,
        token: None,
        invoked: ms(from),
        completed: ms(to),
        outcome: Outcome::Ok,
        leases: Vec::new(),
        extended: false,
        held_until: None,
        detail: String::new(),
    }
}

/// A lease as an answer shows it, with wall times `[from, to)` after the run's start.
pub fn seen(name: &str, owner: &str, token: u64, from: u64, to: u64) -> Seen {
    Seen {
        name: name.to_owned(),
        owner: owner.to_owned(),
        token,
        acquired_at: WALL + from,
        expires_at: WALL + to,
        claim: None,
    }
}

/// An acquire of a lock granted with `token`, as a correct guard records it: the server
/// granted it at `from` (wall), for [`TTL`], and the guard holds it until `from + TTL`.
pub fn grant(client: u32, owner: &str, name: &str, token: u64, from: u64, to: u64) -> Op {
    let mut grant = op(client, Call::Acquire, name, owner, from, to)
        .shows(seen(name, owner, token, from, from + TTL))
        .held_until(from + TTL);
    grant.ttl_ms = TTL;
    grant
}

pub fn release(client: u32, owner: &str, name: &str, token: u64, from: u64, to: u64) -> Op {
    op(client, Call::Release, name, owner, from, to).token(token)
}

pub fn renew(client: u32, owner: &str, name: &str, token: u64, from: u64, to: u64) -> Op {
    let mut renew = op(client, Call::Renew, name, owner, from, to)
        .token(token)
        .shows(seen(name, owner, token, from, from + TTL))
        .held_until(from + TTL);
    renew.ttl_ms = TTL;
    renew
}

pub fn lost(client: u32, owner: &str, name: &str, token: u64, at: u64) -> Op {
    op(client, Call::Lost, name, owner, at, at).token(token)
}

pub fn get(client: u32, name: &str, from: u64, to: u64) -> Op {
    op(client, Call::Get, name, "", from, to)
}

/// Setters for hand-made operations.
pub trait With {
    fn kind(self, kind: Kind) -> Self;
    fn outcome(self, outcome: Outcome) -> Self;
    fn token(self, token: u64) -> Self;
    fn shows(self, seen: Seen) -> Self;
    fn held_until(self, at: u64) -> Self;
    fn extended(self) -> Self;
    fn liveness(self) -> Self;
    fn limit(self, limit: u32) -> Self;
    fn mode(self, mode: &str) -> Self;
    fn names(self, names: &[&str]) -> Self;
    fn through(self, server: u32) -> Self;
}

impl With for Op {
    fn kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }
    fn outcome(mut self, outcome: Outcome) -> Self {
        self.outcome = outcome;
        if outcome != Outcome::Ok && self.call == Call::Acquire {
            // A refusal shows the holders in the way, an unknown shows nothing: not its own.
            let owner = self.owner.clone();
            self.leases.retain(|seen| seen.owner != owner);
            self.held_until = None;
        }
        self
    }
    fn token(mut self, token: u64) -> Self {
        self.token = Some(token);
        self
    }
    fn shows(mut self, seen: Seen) -> Self {
        self.leases.push(seen);
        self
    }
    fn held_until(mut self, at: u64) -> Self {
        self.held_until = Some(ms(at));
        self
    }
    fn extended(mut self) -> Self {
        self.extended = true;
        self
    }
    fn liveness(mut self) -> Self {
        self.phase = Phase::Liveness;
        self
    }
    fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        for seen in &mut self.leases {
            seen.claim = Some("permit".to_owned());
        }
        self
    }
    fn mode(mut self, mode: &str) -> Self {
        self.mode = Some(mode.to_owned());
        for seen in &mut self.leases {
            seen.claim = Some(mode.to_owned());
        }
        self
    }
    fn names(mut self, names: &[&str]) -> Self {
        self.names = names.iter().map(|&n| n.to_owned()).collect();
        self
    }
    fn through(mut self, server: u32) -> Self {
        self.server = Some(server);
        self
    }
}

/// A history being written, as the runner would.
pub struct History {
    pub entries: Vec<Entry>,
    next_op: HashMap<u32, u64>,
    next_event: HashMap<u32, u64>,
}

impl History {
    pub fn new() -> Self {
        History {
            entries: vec![Entry::Run(RunInfo {
                store: "memory".to_owned(),
                seed: 4242,
                seconds: 10,
                clients: 3,
                servers: 1,
                faults: vec!["pause-server".to_owned()],
            })],
            next_op: HashMap::new(),
            next_event: HashMap::new(),
        }
    }

    /// The same, with other settings of the run.
    pub fn run(mut self, run: RunInfo) -> Self {
        self.entries[0] = Entry::Run(run);
        self
    }

    /// Records an operation; returns its number (for writes made under it).
    pub fn push(&mut self, mut op: Op) -> u64 {
        let next = self.next_op.entry(op.client).or_default();
        op.op = *next;
        *next += 1;
        let number = op.op;
        self.entries.push(Entry::Op(op));
        number
    }

    pub fn write(&mut self, client: u32, op: u64, name: &str, token: u64, at: u64, accepted: bool) {
        self.entries.push(Entry::Write(Write {
            client,
            op,
            name: name.to_owned(),
            token,
            at: ms(at),
            accepted,
        }));
    }

    pub fn fault(&mut self, kind: &str, target: &str, phase: &str, at: u64) {
        self.entries.push(Entry::Fault(Fault {
            kind: kind.to_owned(),
            target: target.to_owned(),
            phase: phase.to_owned(),
            at: ms(at),
            detail: String::new(),
        }));
    }

    pub fn healed(&mut self, at: u64) {
        self.entries.push(Entry::Healed { at: ms(at) });
    }

    /// A watcher of server `server`'s stream from `from` to `to`.
    pub fn watched(&mut self, server: u32, from: u64, to: u64) {
        self.entries.push(Entry::Watched(Watched {
            server,
            from: ms(from),
            to: ms(to),
        }));
    }

    /// An event of a lock's lease received at `at` on server `server`'s stream, with the
    /// stream's next id.
    pub fn event(&mut self, server: u32, at: u64, event: &str, name: &str, owner: &str, token: u64) {
        self.event_of(Kind::Lock, server, at, event, name, owner, token);
    }

    /// The same, of a lease of `kind`.
    #[allow(clippy::too_many_arguments)]
    pub fn event_of(
        &mut self,
        kind: Kind,
        server: u32,
        at: u64,
        event: &str,
        name: &str,
        owner: &str,
        token: u64,
    ) {
        let mut told = self.told(server, at, event);
        told.kind = Some(kind.as_str().to_owned());
        told.name = Some(name.to_owned());
        told.owner = Some(owner.to_owned());
        told.token = Some(token);
        self.entries.push(Entry::Event(told));
    }

    /// The change `event` of the lease `seen` (of `kind`) received at `at` on server
    /// `server`'s stream; a `renew` also tells the end it renewed the lease to.
    pub fn told_change(&mut self, kind: Kind, server: u32, at: u64, event: &str, seen: &Seen) {
        let mut told = self.told(server, at, event);
        told.kind = Some(kind.as_str().to_owned());
        told.name = Some(seen.name.clone());
        told.owner = Some(seen.owner.clone());
        told.token = Some(seen.token);
        told.expires_at = (event == "renew").then_some(seen.expires_at);
        self.entries.push(Entry::Event(told));
    }

    /// The renewal `renewal` (made by [`renew`]) received at `at` on server `server`'s stream.
    pub fn renewal_told(&mut self, server: u32, at: u64, renewal: &Op) {
        self.told_change(renewal.kind, server, at, "renew", &renewal.leases[0]);
    }

    /// A reset received at `at` on server `server`'s stream.
    pub fn reset(&mut self, server: u32, at: u64) {
        let told = self.told(server, at, "reset");
        self.entries.push(Entry::Event(told));
    }

    fn told(&mut self, server: u32, at: u64, event: &str) -> Event {
        let next = self.next_event.entry(server).or_default();
        *next += 1;
        Event {
            server,
            received: ms(at),
            event: event.to_owned(),
            id: Some(format!("{server}-{next}")),
            kind: None,
            name: None,
            owner: None,
            token: None,
            expires_at: None,
        }
    }

    pub fn check(&self) -> Report {
        check::check(&self.entries, Bounds { liveness: LIVENESS })
    }
}

pub fn judgement(report: &Report, property: Property) -> &Judgement {
    match report.verdict(property) {
        Some(verdict) => &verdict.judgement,
        None => panic!("no verdict on {property:?} in\n{report}"),
    }
}

pub fn assert_pass(report: &Report, property: Property) {
    assert_eq!(
        judgement(report, property),
        &Judgement::Pass,
        "{property:?} in\n{report}"
    );
}

/// Every property passed or had nothing to judge.
pub fn assert_ok(report: &Report) {
    assert!(report.is_ok(), "{report}");
}

/// The property failed: its explanation and slice.
pub fn assert_fail(report: &Report, property: Property) -> (String, Slice) {
    match judgement(report, property) {
        Judgement::Fail {
            explanation, slice, ..
        } => (explanation.clone(), slice.clone()),
        other => panic!("{property:?} is {other:?}, not a failure, in\n{report}"),
    }
}

pub fn assert_not_judged(report: &Report, property: Property) {
    assert!(
        matches!(judgement(report, property), Judgement::NotJudged { .. }),
        "{property:?} in\n{report}"
    );
}

/// The operations of a slice, as `(client, op)`.
pub fn ops_in(slice: &Slice) -> Vec<(u32, u64)> {
    slice
        .entries
        .iter()
        .filter_map(|entry| match entry {
            Entry::Op(op) => Some((op.client, op.op)),
            _ => None,
        })
        .collect()
}
