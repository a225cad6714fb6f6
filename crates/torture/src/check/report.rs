//! What the checker says: a verdict per property, and for a violation the few lines of
//! history that show it, for people.

use std::fmt;

use crate::history::{Call, Entry, Event, Fault, Mono, Op, Outcome, RunInfo, Watched, Write};

/// A property the checker judges (the module docs of [`crate::check`] define each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Property {
    /// The fenced resource never took a write with a token below one it took before.
    FencedWrites,
    /// Tokens are unique per name and increase in real-time grant order.
    TokenOrder,
    /// No two holders at once, as each holder was told (host's monotonic clock).
    Exclusion,
    /// No two holders at once by the servers' own wall times.
    ExclusionByServerClocks,
    /// Every guard said lost before anyone else was granted its lease.
    HolderSafety,
    /// No acknowledged release undone.
    ReleasesStick,
    /// A refused acquire granted nothing; a granted all-or-none granted every name.
    AllOrNone,
    /// After the faults healed, every client acquired within the bound.
    Liveness,
    /// Every server's event stream told every acknowledged change, or a reset; nothing
    /// that did not happen, nothing twice, in order.
    Events,
}

impl Property {
    /// Every property, in the order a report lists them.
    pub const ALL: [Property; 9] = [
        Property::FencedWrites,
        Property::TokenOrder,
        Property::Exclusion,
        Property::ExclusionByServerClocks,
        Property::HolderSafety,
        Property::ReleasesStick,
        Property::AllOrNone,
        Property::Liveness,
        Property::Events,
    ];

    /// Its name in a report.
    pub fn label(self) -> &'static str {
        match self {
            Property::FencedWrites => "fenced writes",
            Property::TokenOrder => "token order",
            Property::Exclusion => "exclusion as told",
            Property::ExclusionByServerClocks => "exclusion by servers' clocks",
            Property::HolderSafety => "holder safety",
            Property::ReleasesStick => "no release undone",
            Property::AllOrNone => "all or none",
            Property::Liveness => "liveness",
            Property::Events => "event streams",
        }
    }

    /// What a verdict's `checked` counts.
    pub fn unit(self) -> &'static str {
        match self {
            Property::FencedWrites => "writes",
            Property::TokenOrder
            | Property::Exclusion
            | Property::ExclusionByServerClocks
            | Property::HolderSafety => "leases",
            Property::ReleasesStick => "releases",
            Property::AllOrNone => "acquires",
            Property::Liveness => "clients",
            Property::Events => "events",
        }
    }
}

/// How a property came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    Pass,
    /// Violated: how many times, and the earliest violation explained and shown.
    Fail {
        violations: usize,
        explanation: String,
        slice: Slice,
    },
    /// The history holds nothing to judge it by (no writes, no liveness phase…).
    NotJudged {
        why: String,
    },
}

/// One property's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub property: Property,
    /// How many of the property's unit ([`Property::unit`]) were judged.
    pub checked: usize,
    pub judgement: Judgement,
}

/// The checker's report on one history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The run's settings, if the history had them (the seed to run it again).
    pub run: Option<RunInfo>,
    pub ops: usize,
    pub writes: usize,
    /// One per property, in the order of [`Property::ALL`].
    pub verdicts: Vec<Verdict>,
}

impl Report {
    /// No property failed. A property that could not be judged does not fail the run: see
    /// [`Report::unjudged`].
    pub fn is_ok(&self) -> bool {
        self.failed().next().is_none()
    }

    /// The properties that failed: for a caller that excuses some (the servers' clocks on a
    /// store whose expiry follows a stepped clock, holder safety under client pauses, as the
    /// guarantee table of `fencelock-stores` says) rather than all of [`Report::is_ok`].
    pub fn failed(&self) -> impl Iterator<Item = Property> + '_ {
        self.properties(|j| matches!(j, Judgement::Fail { .. }))
    }

    /// The properties the history gave nothing to judge by.
    pub fn unjudged(&self) -> impl Iterator<Item = Property> + '_ {
        self.properties(|j| matches!(j, Judgement::NotJudged { .. }))
    }

    fn properties(&self, which: fn(&Judgement) -> bool) -> impl Iterator<Item = Property> + '_ {
        self.verdicts
            .iter()
            .filter(move |v| which(&v.judgement))
            .map(|v| v.property)
    }

    /// The verdict on one property.
    pub fn verdict(&self, property: Property) -> Option<&Verdict> {
        self.verdicts.iter().find(|v| v.property == property)
    }

    pub fn seed(&self) -> Option<u64> {
        self.run.as_ref().map(|run| run.seed)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.run {
            Some(run) => writeln!(
                f,
                "seed {} (store {}, {} s, {} clients, {} servers, faults: {}): {} ops, {} writes",
                run.seed,
                run.store,
                run.seconds,
                run.clients,
                run.servers,
                if run.faults.is_empty() {
                    "none".to_owned()
                } else {
                    run.faults.join(", ")
                },
                self.ops,
                self.writes,
            )?,
            None => writeln!(
                f,
                "seed unknown (no run entry): {} ops, {} writes",
                self.ops, self.writes
            )?,
        }
        for verdict in &self.verdicts {
            let label = verdict.property.label();
            let (word, rest) = match &verdict.judgement {
                Judgement::Pass => ("PASS", String::new()),
                Judgement::Fail { violations: 1, .. } => ("FAIL", ", 1 violation".to_owned()),
                Judgement::Fail { violations, .. } => ("FAIL", format!(", {violations} violations")),
                Judgement::NotJudged { why } => ("n/a", format!(": {why}")),
            };
            writeln!(
                f,
                "  {word:<4}  {label:<29} {} {}{rest}",
                verdict.checked,
                verdict.property.unit()
            )?;
        }
        for verdict in &self.verdicts {
            if let Judgement::Fail {
                explanation, slice, ..
            } = &verdict.judgement
            {
                writeln!(f, "\nFAIL {}: {explanation}", verdict.property.label())?;
                write!(f, "{slice}")?;
            }
        }
        Ok(())
    }
}

/// The few entries that show a violation, in time order, with the faults in progress around
/// them; times are printed relative to the run's first recorded moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The run's first recorded moment.
    pub origin: Mono,
    /// The entries, in time order (an operation by when it was invoked).
    pub entries: Vec<Entry>,
}

impl fmt::Display for Slice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Wall times are the servers' and compare only with each other: printed relative to
        // the earliest one in the slice.
        let wall_origin = self
            .entries
            .iter()
            .filter_map(|entry| match entry {
                Entry::Op(op) => op.leases.iter().map(|seen| seen.acquired_at).min(),
                _ => None,
            })
            .min();
        let rel = Rel { origin: self.origin };
        for entry in &self.entries {
            match entry {
                Entry::Op(op) => write_op(f, rel, wall_origin, op)?,
                Entry::Write(write) => write_write(f, rel, write)?,
                Entry::Fault(fault) => write_fault(f, rel, fault)?,
                Entry::Event(event) => write_event(f, rel, event)?,
                Entry::Watched(Watched { server, from, to }) => writeln!(
                    f,
                    "  {}..{}  the watcher of server {server} followed its stream",
                    rel.at(*from),
                    rel.at(*to)
                )?,
                Entry::Healed { at } => {
                    writeln!(f, "  {}  every fault healed: the liveness phase", rel.at(*at))?
                }
                Entry::Run(_) => {}
            }
        }
        if let Some(origin) = wall_origin {
            writeln!(
                f,
                "  (wall times: the servers' clocks, in seconds after {origin} ms since the epoch)"
            )?;
        }
        Ok(())
    }
}

/// Prints monotonic times relative to the run's start.
#[derive(Clone, Copy)]
struct Rel {
    origin: Mono,
}

impl Rel {
    fn at(self, t: Mono) -> String {
        relative(t, self.origin)
    }
}

/// A monotonic time as a report prints it: `+1.234s` after the run's first moment.
pub(crate) fn relative(t: Mono, origin: Mono) -> String {
    seconds(t.0.saturating_sub(origin.0), 1_000_000_000)
}

/// `+1.234s`, from a count of `per_second` units.
fn seconds(units: u64, per_second: u64) -> String {
    let millis = units / (per_second / 1000);
    format!("+{}.{:03}s", millis / 1000, millis % 1000)
}

fn write_op(f: &mut fmt::Formatter<'_>, rel: Rel, wall_origin: Option<u64>, op: &Op) -> fmt::Result {
    let call = match op.call {
        Call::Acquire => "acquire",
        Call::Renew => "renew",
        Call::Release => "release",
        Call::Get => "get",
        Call::Lost => "lost",
    };
    let kind = op.kind.as_str();
    let outcome = match op.outcome {
        Outcome::Ok => "ok",
        Outcome::Refused => "refused",
        Outcome::Unknown => "unknown",
    };
    write!(
        f,
        "  {}..{}  client {} op {}: {call} {kind} {:?} as {:?}",
        rel.at(op.invoked),
        rel.at(op.completed),
        op.client,
        op.op,
        op.names.join(","),
        op.owner,
    )?;
    if let Some(token) = op.token {
        write!(f, " token {token}")?;
    }
    if let Some(limit) = op.limit {
        write!(f, " limit {limit}")?;
    }
    if let Some(mode) = &op.mode {
        write!(f, " mode {mode}")?;
    }
    write!(f, " -> {outcome}")?;
    if op.extended {
        write!(f, " (extended)")?;
    }
    for seen in &op.leases {
        let wall = wall_origin.unwrap_or(0);
        write!(
            f,
            "; {:?} {:?} token {}{} wall {}..{}",
            seen.name,
            seen.owner,
            seen.token,
            seen.claim.as_deref().map(|c| format!(" {c}")).unwrap_or_default(),
            seconds(seen.acquired_at.saturating_sub(wall), 1000),
            seconds(seen.expires_at.saturating_sub(wall), 1000),
        )?;
    }
    if let Some(until) = op.held_until {
        write!(f, "; held until {}", rel.at(until))?;
    }
    if !op.detail.is_empty() {
        write!(f, " ({})", op.detail)?;
    }
    writeln!(f)
}

fn write_write(f: &mut fmt::Formatter<'_>, rel: Rel, write: &Write) -> fmt::Result {
    writeln!(
        f,
        "  {}  client {} op {}: write {:?} token {} -> {}",
        rel.at(write.at),
        write.client,
        write.op,
        write.name,
        write.token,
        if write.accepted { "accepted" } else { "refused" },
    )
}

fn write_event(f: &mut fmt::Formatter<'_>, rel: Rel, event: &Event) -> fmt::Result {
    write!(
        f,
        "  {}  the stream of server {} told {}",
        rel.at(event.received),
        event.server,
        event.event
    )?;
    if let (Some(kind), Some(name), Some(owner)) = (&event.kind, &event.name, &event.owner) {
        write!(f, " {kind} {name:?} by {owner:?}")?;
    }
    if let Some(token) = event.token {
        write!(f, " token {token}")?;
    }
    if let Some(id) = &event.id {
        write!(f, " (id {id})")?;
    }
    writeln!(f)
}

fn write_fault(f: &mut fmt::Formatter<'_>, rel: Rel, fault: &Fault) -> fmt::Result {
    write!(
        f,
        "  {}  fault {} {} on {}",
        rel.at(fault.at),
        fault.phase,
        fault.kind,
        fault.target
    )?;
    if !fault.detail.is_empty() {
        write!(f, " ({})", fault.detail)?;
    }
    writeln!(f)
}
