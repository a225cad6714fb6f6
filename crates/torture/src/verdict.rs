//! The hook between a run and the checker: reads a history, judges it with
//! [`crate::check::check`], and decides whether the run passed — every property held, but
//! for the ones the store's guarantee gives up under a fault the run injected ([`Waiver`]).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use clap::ValueEnum as _;

use crate::check::{Bounds, Judgement, Property, Report, check};
use crate::fault::FaultKind;
use crate::history::{self, Call, Entry, Mono};
use crate::target::StoreKind;

/// Time a client has, past twice the longest TTL it asks for, to be granted a lock once
/// every fault has healed: a store that is up again must grant one by then.
const LIVENESS_SLACK: Duration = Duration::from_secs(10);

/// How long after the faults healed each client must be granted a lock, on `kind`: the
/// leases taken before may take two of the longest TTLs to end (one to expire, one more
/// for a lease a paused server renewed late), and a store may take a few seconds more to
/// elect a leader or reconnect.
pub fn liveness_bound(kind: StoreKind) -> Duration {
    kind.ttls().longest() * 2 + LIVENESS_SLACK
}

/// A property that may fail in a run, because the run injected a fault under which the
/// guarantee (the table in `fencelock_stores`, or the nature of locks) does not promise it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiver {
    pub property: Property,
    /// Why, for the report.
    pub why: &'static str,
}

/// The checker's report on a run, and the run's verdict.
#[derive(Debug, Clone)]
pub struct RunVerdict {
    pub report: Report,
    /// The properties that failed and may, by the store's guarantee under this run's faults.
    pub waived: Vec<Waiver>,
}

impl RunVerdict {
    /// Every property held, or failed only where the guarantee says it may.
    pub fn passed(&self) -> bool {
        self.report.verdicts.iter().all(|verdict| {
            !matches!(verdict.judgement, Judgement::Fail { .. })
                || self.waived.iter().any(|w| w.property == verdict.property)
        })
    }

    /// Whether `property` held.
    pub fn holds(&self, property: Property) -> bool {
        self.report
            .verdict(property)
            .is_some_and(|verdict| !matches!(verdict.judgement, Judgement::Fail { .. }))
    }
}

impl fmt::Display for RunVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.report)?;
        for waiver in &self.waived {
            writeln!(
                f,
                "\nWAIVED {}: {} (see docs/TORTURE.md)",
                waiver.property.label(),
                waiver.why
            )?;
        }
        let word = if self.passed() { "PASS" } else { "FAIL" };
        writeln!(f, "\nverdict: {word}")
    }
}

/// Judges a history with the bounds of its store; the report and what the guarantee waives.
pub fn judge(entries: &[Entry]) -> RunVerdict {
    let bounds = bounds(entries);
    let report = check(entries, bounds);
    let waived = entries
        .iter()
        .find_map(store_of)
        .map(|store| {
            let late_only_for_pauses = || {
                !check(&losses_on_time(entries), bounds)
                    .failed()
                    .any(|property| property == Property::HolderSafety)
            };
            waivers(store, &injected(entries), &report, late_only_for_pauses)
        })
        .unwrap_or_default();
    RunVerdict { report, waived }
}

/// The faults the run injected (not merely those it could have): a waiver needs the fault
/// to have happened.
fn injected(entries: &[Entry]) -> Vec<FaultKind> {
    let mut kinds: Vec<FaultKind> = entries
        .iter()
        .filter_map(|entry| match entry {
            Entry::Fault(fault) if fault.phase == "begin" => FaultKind::parse(&fault.kind),
            _ => None,
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// Reads the history at `path`, judges it and prints the report and the verdict; `Some`
/// whether it passed, or `None` if nothing could be judged (unreadable, not a history).
pub fn judge_file(path: &Path) -> Option<bool> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("checker: cannot read {}: {error}", path.display());
            return None;
        }
    };
    match history::parse(&text) {
        Ok(entries) => {
            let verdict = judge(&entries);
            print!("{verdict}");
            Some(verdict.passed())
        }
        Err(error) => {
            eprintln!("checker: {} is not a history: {error}", path.display());
            None
        }
    }
}

/// The bounds a history is held to: its store's (the longest a run ever allows, for a
/// history that does not say its store).
pub fn bounds(entries: &[Entry]) -> Bounds {
    let liveness = match entries.iter().find_map(store_of) {
        Some(store) => liveness_bound(store),
        None => StoreKind::value_variants()
            .iter()
            .map(|kind| liveness_bound(*kind))
            .max()
            .unwrap_or(LIVENESS_SLACK),
    };
    Bounds { liveness }
}

fn store_of(entry: &Entry) -> Option<StoreKind> {
    let Entry::Run(info) = entry else { return None };
    StoreKind::from_str(&info.store, false).ok()
}

/// The history as it would read had no client been stopped: every loss a paused client's
/// guard said late — its `held_until` fell inside a pause of that client, so it could say
/// so only on waking — moved back to that `held_until`, when a guard that ran would have
/// said it. Holder safety judged on this fails only for guards late for another reason.
fn losses_on_time(entries: &[Entry]) -> Vec<Entry> {
    let mut pauses: Vec<(u32, Mono, Mono)> = Vec::new();
    for entry in entries {
        let Entry::Fault(fault) = entry else { continue };
        let client = fault
            .target
            .strip_prefix("client ")
            .and_then(|id| id.parse().ok());
        let (Some(client), Some(FaultKind::PauseClient)) = (client, FaultKind::parse(&fault.kind)) else {
            continue;
        };
        match fault.phase.as_str() {
            "begin" => pauses.push((client, fault.at, Mono(u64::MAX))),
            _ => {
                if let Some(pause) = pauses
                    .iter_mut()
                    .rev()
                    .find(|(c, _, end)| *c == client && end.0 == u64::MAX)
                {
                    pause.2 = fault.at;
                }
            }
        }
    }
    entries
        .iter()
        .map(|entry| match entry {
            Entry::Op(op)
                if op.call == Call::Lost
                    && let Some(until) = op.held_until
                    && until < op.completed
                    && pauses.iter().any(|&(client, begin, end)| {
                        client == op.client && begin <= until && until <= end
                    }) =>
            {
                let mut on_time = op.clone();
                on_time.invoked = until;
                on_time.completed = until;
                Entry::Op(on_time)
            }
            other => other.clone(),
        })
        .collect()
}

/// What the guarantee gives up on `store` under `faults`, of what failed in `report`;
/// `late_only_for_pauses` says whether every late guard was a paused client's.
fn waivers(
    store: StoreKind,
    faults: &[FaultKind],
    report: &Report,
    late_only_for_pauses: impl FnOnce() -> bool,
) -> Vec<Waiver> {
    let failed = |property| {
        report
            .verdict(property)
            .is_some_and(|verdict| matches!(verdict.judgement, Judgement::Fail { .. }))
    };
    let mut waived = Vec::new();
    let mut waive = |property, why| {
        if failed(property) && !waived.iter().any(|w: &Waiver| w.property == property) {
            waived.push(Waiver { property, why });
        }
    };
    // The store's stated caveats: exclusion is not promised under them (token order and
    // fenced writes still are).
    let caveat = |fault| faults.contains(&fault) && store.caveats().iter().any(|(f, _)| *f == fault);
    if caveat(FaultKind::KillNode) || caveat(FaultKind::ClockStep) {
        let why = "the store's guarantee states this caveat for a fault the run injected: a lease may end early, so two holders may overlap; tokens stay ordered and the fenced resource refuses the stale writer";
        waive(Property::Exclusion, why);
        waive(Property::ExclusionByServerClocks, why);
        waive(Property::HolderSafety, why);
    }
    // A server whose wall clock is stepped reports wall times off by the step, where its
    // clock is the lease's clock (Redlock's validity, ZooKeeper's expiry); the embedded
    // store's times do not move with the clock, so they are held to it.
    if faults.contains(&FaultKind::ClockStep) && store != StoreKind::Sqlite {
        waive(
            Property::ExclusionByServerClocks,
            "a server's wall clock was stepped, so the acquired_at and expires_at it reported are off by the step",
        );
    }
    // Redlock's `acquired_at` is when the server sent the attempt that won, before the
    // nodes decided it (each by its own copy of the previous lease, which outlives the
    // server's `expires_at` of it): a grant that took a while may show an `acquired_at`
    // before the previous holder's `expires_at`, by the attempt's round trip.
    if store == StoreKind::Redlock {
        waive(
            Property::ExclusionByServerClocks,
            "Redlock's acquired_at is when the server sent the attempt that won, before the nodes judged the previous lease expired (by their copies, which outlive its expires_at)",
        );
    }
    // A client stopped past its lease's end learns of the loss only when it runs again: no
    // lock service can tell it sooner. That is what fencing tokens are for. Waived only when
    // exclusion held and every late guard was a paused one: had each said lost at its
    // `held_until`, holder safety would have held.
    if faults.contains(&FaultKind::PauseClient)
        && failed(Property::HolderSafety)
        && !failed(Property::Exclusion)
        && late_only_for_pauses()
    {
        waive(
            Property::HolderSafety,
            "a paused client's guard said lost only once it ran again, after the store had rightly granted the lease to another; the fenced resource refuses its old token once a newer one has written",
        );
    }
    waived
}
