//! The checker: judges a history ([`crate::history`]) by what its clients were told and what
//! the servers' event streams told, with no knowledge of the nemesis but the kills of
//! servers (the one fault the guarantee table says loses events), and says per property
//! whether it held ([`check`]).
//!
//! # Words
//!
//! An operation ran from `invoked` to `completed`: whatever it did happened in between. A
//! **lease** is one grant: `(kind, name, owner, token)` — every grant is made to an owner no
//! other grant uses, but an owner may hold a second lease of a name (a read-write lock's
//! upgrade or downgrade, or a lease taken anew after its own expired), so the token belongs to
//! it. An answer **shows** a lease when it lists it (`leases`: a grant, an extension, a
//! renewal, a refusal's holders, a read); a renewal, release or loss is **about** the leases
//! of its owner on its names with its token (all of them when it gives none). For each lease
//! the checker derives:
//!
//! - *shown*: the earliest `completed` of an answer that showed it — it was granted before;
//! - *asked*: the `invoked` of the acquire answered with it (not an extension); when no
//!   answer said (the acquire's outcome was unknown), the `invoked` of its owner's first
//!   acquire of the name that was not refused — it was granted after;
//! - *told*: the earliest `completed` of its owner's acquire answered ok with it: from there
//!   on the holder believes it holds it;
//! - *belief end*: the earliest of its release's `invoked` (whatever the answer: the holder
//!   stops with the send), its guard's loss (`completed`), the moment its owner was told of a
//!   newer lease of the name (an upgrade replaces the hold), and the guard's last `held_until`
//!   (an acquire's, a renewal's or a loss's; where the runner wrote none, `invoked` + TTL,
//!   the guard's own reckoning). Nothing of these: the belief has no end in the history.
//!
//! Two leases **conflict** when their owners differ and the name cannot have both: a lock; a
//! write hold beside any hold; more distinct owners than a semaphore's `limit` (the least
//! `limit` any of them asked). A read hold whose mode no answer gave counts as a read: an
//! unknown mode never makes a violation.
//!
//! # The properties
//!
//! 1. **Fenced writes**: per name, in the order of `Write::at` (the resource judges one write
//!    at a time), an accepted write's token is not below the highest token accepted before it,
//!    and a refused write's token is below it (a refusal of anything else means the resource
//!    itself is broken, and nothing it accepted can be trusted either).
//! 2. **Token order**: per kind and name, a token is shown with one owner only; and if lease A
//!    was *shown* before lease B was *asked*, then B's token is greater than A's. Both bounds
//!    are certain — A was granted before its *shown*, B after its *asked* — so concurrent
//!    grants are never ordered, and an unknown-outcome acquire whose lease shows up later is
//!    ordered only after what was certainly granted before it was sent.
//! 3. **Exclusion as told** (the host's monotonic clock): conflicting leases' beliefs,
//!    `[told, belief end)`, never overlap. Why an overlap is a violation whatever the order of
//!    the grants inside their acquires: say B's holder was told while A's still believed
//!    (A.told ≤ B.told < A.end). If A was granted first, A must have ended before B was
//!    granted, so before B.told; but A ends no earlier than its release's send and no earlier
//!    than the guard's `held_until` (the send of its last grant or renewal plus the TTL: the
//!    store's expiry comes later, by the rates of the clocks); so A.end ≤ B.told, a
//!    contradiction. If B was granted first, B must have ended before A was granted, before
//!    A.told ≤ B.told, yet B's own `held_until` and release come after B.told: the same
//!    contradiction. A loss reported before `held_until` (a refused renewal) ends the belief
//!    early; that only shortens it, never makes a violation. An empty belief (a grant
//!    answered after its `held_until`: the guard starts lost) counts for nothing.
//! 4. **Exclusion by the servers' clocks**, a second view, reported apart: the servers'
//!    `[acquired_at, expires_at)` of conflicting leases (the earliest `acquired_at` and latest
//!    `expires_at` any answer showed) never overlap, unless the earlier lease's release (ok or
//!    unknown) was sent before the later one was *shown* (the release may have come first:
//!    the wall times cannot say when a release happened). Stores whose expiry follows a wall
//!    clock the nemesis steps may fail this view legitimately (see the guarantee table of
//!    `fencelock-stores`); the report says so, it does not hide it.
//! 5. **Holder safety**: as 3, but a lease whose guard reported a loss is believed until the
//!    loss (or its release or a newer lease), *not* cut at `held_until`: a guard that lost its
//!    lease said so before another owner's grant was answered. A guard that said nothing
//!    believes until `held_until` as in 3 (a lease left to expire is legal). So every
//!    violation of 3 is one of 5 too (when the store broke the lease, the guard was not told
//!    in time either), and 5 alone fails when the guard was late — a paused client, which no
//!    lock service prevents (the guarantee table says which stores rest on bounded pauses).
//!    Its explanation says which of the two it is.
//! 6. **No release undone**: once a release about a lease was answered ok, no operation
//!    invoked after that shows the lease (a read, a refusal's holders, an extension, a
//!    renewal's answer) or renews it ok.
//! 7. **All or none**: an acquire granted ok with several names shows a lease of its owner
//!    for every name; and an acquire refused (of one name or several: "refused" promises that
//!    nothing changed) grants nothing: no operation invoked after it completed shows its owner
//!    holding any of its names, unless an acquire of that name by the owner that was not
//!    refused was invoked before that operation completed. Refused acquires of an owner that
//!    already asked for the name before (an extension, an upgrade) are not judged: the owner
//!    keeps what it held. An acquire with an unknown outcome is not judged: partial
//!    sightings of it cannot be told from parts released or expired since.
//! 8. **Liveness**: after the `Healed` entry, every client that made any operation made an
//!    acquire of the liveness phase, and its first one that worked completed within
//!    [`Bounds::liveness`] of the `invoked` of its first one: several tries may share the
//!    bound, a last try past it fails. The drain's markers (`phase: drain`) are the
//!    runner's, not a client's.
//! 9. **Event streams** (the guarantee table's *Events*), judged per watcher W of server
//!    S_W, over W's window (`watched`: from its stream's first answer to its stop). An
//!    **acknowledged change** is an operation answered ok, through a server it names: an
//!    acquire makes a `grant` per lease it was answered with (`extend` when it extended), a
//!    renewal a `renew` per lease it renewed, a release a `release` — each of a `(kind,
//!    name, owner, token)`, and a renewal's also of the lease's `expires_at` after it, so that
//!    one renewal's event never stands for another's.
//!    - (a) *Every acknowledged change is on the stream, or a reset says it may not be*:
//!      for every acknowledged change invoked inside W's window, W received its event after
//!      the change was invoked, or a `reset` after it was invoked and before the first
//!      *later* change of the same server S that W received (a grant or release invoked
//!      after this one completed, so told after it, and told once per lease, so that the
//!      event is its own) — per server, bulletins arrive in order, and a server
//!      that hears one after a gap resets its streams before it appends it, so a later one
//!      without the earlier, and no reset before it, is a silent gap. One exception, the
//!      table's (a server killed loses what is still in its queue to the store, and starts
//!      again under a new epoch, so nobody sees a gap;
//!      [`LockStore::publish`](fencelock_client::LockStore::publish) only queues): S ≠ S_W
//!      was killed (`kill-server` begun on it) at most 5 s after the change completed (a
//!      queue sends within milliseconds while the store serves), and W received no later
//!      change of S that completed before that kill. The table's other unseen loss — the
//!      first events of a server started within 2 s of S_W — is not excused: it needs a
//!      loss in those first moments, and a run starts its servers together, before any
//!      fault.
//!    - (b) *No event of what did not happen*: a `grant`, `extend`, `renew`, `release` or
//!      `expire` whose `(name, owner)` no acquire that was ok or unknown was made as (every
//!      acquire has an owner of its own), or a `release` whose every release in the history
//!      was refused. (The guard's refused renewals are not in the history: it records the
//!      renewals it was answered ok.)
//!    - (c) *None twice*: no id twice on one stream, and no `grant`, `release`, `expire` or
//!      `force-release` of one lease twice without a `reset` between (a renewal and an
//!      extension repeat legitimately).
//!    - (d) *Order*: of two acknowledged grants or releases through one server on one name,
//!      both on W, the one completed before the other was invoked is told first. Renewals
//!      and extensions are not ordered: their events repeat.
//!
//!    No fault waives it: the table states no caveat of its own for a store's events.
//!    Snapshots (after a reset) are not recorded, and judged by nothing here.
//!
//! A verdict that fails shows its earliest violation (by when it became certain) as a
//! [`Slice`]: the operations and writes that prove it, the faults in progress meanwhile, in
//! time order, relative to the run's first moment. Every property's work is indexed by name
//! and sorted once: a history of 100,000 operations checks in well under a second.
//!
//! # Layout
//!
//! - `index`: the history indexed once: operations, writes, and every lease with the
//!   moments above.
//! - `writes`, `tokens`, `exclusion` (3, 4 and 5: one sweep, three timelines), `releases`,
//!   `all_or_none`, `liveness`, `events`: one property each.
//! - [`report`](Report): the verdicts, slices, and how they print.

mod all_or_none;
mod events;
mod exclusion;
mod index;
mod liveness;
mod releases;
mod report;
mod tokens;
mod writes;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::history::{Entry, Mono};

pub use report::{Judgement, Property, Report, Slice, Verdict};

use index::Index;

/// The bounds the checker holds a run to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// How long a client may take, after the faults healed, to acquire: from its first
    /// liveness-phase acquire being sent to its first successful one being answered.
    pub liveness: Duration,
}

/// Judges a history: one verdict per property, in the order of [`Property::ALL`]. The whole
/// API a caller needs: [`Report::is_ok`] (no property failed; one with nothing to judge does
/// not fail, see [`Report::unjudged`]; [`Report::failed`] names those that did) and the
/// report's `Display` (the seed, a line per property, each failure's slice).
///
/// ```
/// use std::time::Duration;
/// use fencelock_torture::check::{Bounds, check};
/// use fencelock_torture::history::parse;
///
/// let text = r#"
/// {"entry":"run","store":"sqlite","seed":7,"seconds":10,"clients":1,"servers":1,"faults":[]}
/// {"entry":"op","client":0,"op":0,"phase":"faults","call":"acquire","kind":"lock","names":["x"],"owner":"0-0","ttl_ms":1000,"invoked":5000000,"completed":6000000,"outcome":"ok","leases":[{"name":"x","owner":"0-0","token":1,"acquired_at":1800000000000,"expires_at":1800000001000}]}
/// "#;
/// let entries = parse(text).expect("a history");
/// let report = check(&entries, Bounds { liveness: Duration::from_secs(10) });
/// assert!(report.is_ok());
/// assert!(report.to_string().starts_with("seed 7 (store sqlite"));
/// ```
pub fn check(entries: &[Entry], bounds: Bounds) -> Report {
    let index = Index::new(entries);
    let tallies = [
        (Property::FencedWrites, writes::check(&index)),
        (Property::TokenOrder, tokens::check(&index)),
        (Property::Exclusion, exclusion::as_told(&index)),
        (
            Property::ExclusionByServerClocks,
            exclusion::by_server_clocks(&index),
        ),
        (Property::HolderSafety, exclusion::holder_safety(&index)),
        (Property::ReleasesStick, releases::check(&index)),
        (Property::AllOrNone, all_or_none::check(&index)),
        (Property::Liveness, liveness::check(&index, bounds)),
        (Property::Events, events::check(&index)),
    ];
    let slicer = Slicer::new(entries, index.origin);
    Report {
        run: entries.iter().find_map(|entry| match entry {
            Entry::Run(run) => Some(run.clone()),
            _ => None,
        }),
        ops: index.ops.len(),
        writes: index.writes.len(),
        verdicts: tallies
            .into_iter()
            .map(|(property, tally)| tally.into_verdict(property, &slicer))
            .collect(),
    }
}

/// A violation: why, and the entries (places in the history) that show it.
#[derive(Debug)]
pub(crate) struct Finding {
    pub explanation: String,
    pub entries: Vec<usize>,
}

/// What a property's check found: how much it judged, how many violations, and the earliest.
#[derive(Debug)]
pub(crate) struct Tally {
    pub checked: usize,
    violations: usize,
    /// The earliest violation, by when it became certain (ties: by its first entry, so that
    /// a report does not depend on hashing order).
    first: Option<((Mono, usize), Finding)>,
    /// Why nothing could be judged, said when `checked` stays 0.
    idle: &'static str,
}

impl Tally {
    pub fn new(idle: &'static str) -> Self {
        Tally {
            checked: 0,
            violations: 0,
            first: None,
            idle,
        }
    }

    /// A violation, certain from `at`. Only the earliest is explained, so its finding is
    /// built only when it is the earliest so far.
    pub fn violation(&mut self, at: Mono, finding: impl FnOnce() -> Finding) {
        self.violations += 1;
        if self.first.as_ref().is_some_and(|((first, _), _)| *first < at) {
            return;
        }
        let finding = finding();
        let key = (at, finding.entries.iter().copied().min().unwrap_or(usize::MAX));
        if self.first.as_ref().is_none_or(|(first, _)| key < *first) {
            self.first = Some((key, finding));
        }
    }

    fn into_verdict(self, property: Property, slicer: &Slicer<'_>) -> Verdict {
        let judgement = match self.first {
            Some((_, finding)) => Judgement::Fail {
                violations: self.violations,
                explanation: finding.explanation,
                slice: slicer.slice(&finding.entries),
            },
            None if self.checked == 0 => Judgement::NotJudged {
                why: self.idle.to_owned(),
            },
            None => Judgement::Pass,
        };
        Verdict {
            property,
            checked: self.checked,
            judgement,
        }
    }
}

/// Cuts slices out of a history: the entries asked for, and the faults in progress meanwhile.
struct Slicer<'h> {
    entries: &'h [Entry],
    origin: Mono,
    /// Each fault from its begin to its heal: `(from, to, begin entry, heal entry)`.
    faults: Vec<(Mono, Mono, Option<usize>, Option<usize>)>,
}

impl<'h> Slicer<'h> {
    fn new(entries: &'h [Entry], origin: Mono) -> Self {
        let mut in_time: Vec<(Mono, usize)> = entries
            .iter()
            .enumerate()
            .filter_map(|(at, entry)| match entry {
                Entry::Fault(fault) => Some((fault.at, at)),
                _ => None,
            })
            .collect();
        in_time.sort();
        let mut open: HashMap<(&str, &str), usize> = HashMap::new();
        let mut faults = Vec::new();
        for (time, at) in in_time {
            let Entry::Fault(fault) = &entries[at] else {
                continue;
            };
            let what = (fault.kind.as_str(), fault.target.as_str());
            if fault.phase == "heal" {
                let begin = open.remove(&what);
                let from = begin.map_or(origin, |b| entries[b].time());
                faults.push((from, time, begin, Some(at)));
            } else if let Some(earlier) = open.insert(what, at) {
                // Begun twice without a heal between: the first is still going.
                faults.push((entries[earlier].time(), Mono(u64::MAX), Some(earlier), None));
            }
        }
        for begin in open.into_values() {
            faults.push((entries[begin].time(), Mono(u64::MAX), Some(begin), None));
        }
        Slicer {
            entries,
            origin,
            faults,
        }
    }

    fn slice(&self, shown: &[usize]) -> Slice {
        let mut places: BTreeSet<usize> = shown.iter().copied().collect();
        let span = places.iter().map(|&at| {
            let entry = &self.entries[at];
            let end = match entry {
                Entry::Op(op) => op.completed,
                other => other.time(),
            };
            (entry.time(), end)
        });
        let from = span.clone().map(|(from, _)| from).min();
        let to = span.map(|(_, to)| to).max();
        if let (Some(from), Some(to)) = (from, to) {
            for &(begin, heal, begin_at, heal_at) in &self.faults {
                if begin <= to && heal >= from {
                    places.extend(begin_at);
                    places.extend(heal_at);
                }
            }
        }
        let mut entries: Vec<&Entry> = places.iter().map(|&at| &self.entries[at]).collect();
        entries.sort_by_key(|entry| entry.time());
        Slice {
            origin: self.origin,
            entries: entries.into_iter().cloned().collect(),
        }
    }
}
