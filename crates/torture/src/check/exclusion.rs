//! Exclusion, three ways: as each holder was told (monotonic), by the servers' wall times,
//! and from the guard's side (holder safety). One sweep finds conflicting leases on a
//! timeline; each view gives it its own spans and its own excuse.

use std::collections::{HashMap, HashSet};

use super::index::{Index, Lease, LeaseId, Moment};
use super::report::relative;
use super::{Finding, Tally};
use crate::history::{Kind, Mono};

/// A lease's span on one timeline, `[start, end)`, in that timeline's units.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u64,
    end: u64,
    lease: LeaseId,
}

/// Property 3: beliefs `[told, belief end)` of conflicting leases never overlap.
pub(crate) fn as_told(index: &Index<'_>) -> Tally {
    let mut tally = Tally::new("no acquire was answered ok");
    let spans = believed(index, Lease::belief_end);
    tally.checked = spans.len();
    sweep(index, spans, same_owner, |later, in_the_way| {
        let lease = &index.leases[later.lease];
        tally.violation(Mono(later.start), || {
            let holders = describe_all(index, in_the_way);
            Finding {
                explanation: format!(
                    "{} while {holders} still believed {}",
                    told(index, lease),
                    belief_words(index, in_the_way),
                ),
                entries: evidence(index, later, in_the_way, Lease::belief_end),
            }
        });
    });
    tally
}

/// Property 5: as 3, but a guard that reported a loss believes until the loss.
pub(crate) fn holder_safety(index: &Index<'_>) -> Tally {
    let mut tally = Tally::new("no acquire was answered ok");
    let spans = believed(index, guard_end);
    tally.checked = spans.len();
    sweep(index, spans, same_owner, |later, in_the_way| {
        let lease = &index.leases[later.lease];
        tally.violation(Mono(later.start), || {
            let mut lines = Vec::new();
            for span in in_the_way {
                let holder = &index.leases[span.lease];
                let said = match holder.lost {
                    Some(lost) if guard_end(holder) == Some(lost) => {
                        format!("said lost only at {}", at(index, Some(lost)))
                    }
                    _ => "had not said lost".to_owned(),
                };
                let whose = match holder.belief_end() {
                    Some(end) if end.at.0 <= later.start => format!(
                        "after its guard's held until {}: the guard was late",
                        at(index, Some(end))
                    ),
                    _ => "inside the lease it had been told: the store granted it early (see exclusion as told)"
                        .to_owned(),
                };
                lines.push(format!("{} {said}, and the grant came {whose}", describe(holder)));
            }
            Finding {
                explanation: format!("{}; {}", told(index, lease), lines.join("; ")),
                entries: evidence(index, later, in_the_way, guard_end),
            }
        });
    });
    tally
}

/// Property 4: the servers' `[acquired_at, expires_at)` of conflicting leases never overlap,
/// unless the earlier one's release may have come first.
pub(crate) fn by_server_clocks(index: &Index<'_>) -> Tally {
    let mut tally = Tally::new("no lease was shown");
    let spans: Vec<Span> = index
        .leases
        .iter()
        .enumerate()
        .filter_map(|(lease, l)| l.wall.map(|(start, end)| Span { start, end, lease }))
        .filter(|span| span.start < span.end)
        .collect();
    tally.checked = spans.len();
    let released_first = |earlier: &Lease<'_>, later: &Lease<'_>| {
        same_owner(earlier, later)
            || matches!((earlier.release_may_free, later.shown), (Some(r), Some(s)) if r.at < s.at)
    };
    sweep(index, spans, released_first, |later, in_the_way| {
        let lease = &index.leases[later.lease];
        let shown = lease.shown.map_or(Mono(0), |m| m.at);
        tally.violation(shown, || {
            let holders: Vec<String> = in_the_way
                .iter()
                .map(|span| {
                    format!(
                        "{} {} ms after it was acquired and {} ms before it expired",
                        describe(&index.leases[span.lease]),
                        later.start - span.start,
                        span.end - later.start,
                    )
                })
                .collect();
            Finding {
                explanation: format!(
                    "{} {:?}: by the servers' clocks, {} was granted beside {}, and no release of \
                     that one was sent before the grant was answered",
                    lease.key.kind.as_str(),
                    lease.key.name,
                    describe(lease),
                    holders.join(" and "),
                ),
                entries: std::iter::once(later)
                    .chain(in_the_way)
                    .filter_map(|span| index.leases[span.lease].shown)
                    .map(|m| index.entry_of(m.op))
                    .collect(),
            }
        });
    });
    tally
}

/// The beliefs of the leases whose owners were told, ending where `end` says.
fn believed<'h>(index: &Index<'h>, end: impl Fn(&Lease<'h>) -> Option<Moment>) -> Vec<Span> {
    index
        .leases
        .iter()
        .enumerate()
        .filter_map(|(lease, l)| {
            let start = l.told?.at.0;
            let end = end(l).map_or(u64::MAX, |m| m.at.0);
            // An empty belief (answered after its held until: the guard starts lost).
            (start < end).then_some(Span { start, end, lease })
        })
        .collect()
}

/// Where the guard said its lease ended: its loss, if it reported one (not cut at its held
/// until: saying it late is what holder safety is about), else as it believed.
fn guard_end(lease: &Lease<'_>) -> Option<Moment> {
    match lease.lost {
        Some(lost) => [lease.release_sent, lease.superseded]
            .into_iter()
            .fold(Some(lost), Moment::earliest),
        None => lease.belief_end(),
    }
}

fn same_owner(a: &Lease<'_>, b: &Lease<'_>) -> bool {
    a.key.owner == b.key.owner
}

/// Calls `conflict(later, in the way)` for every span that starts while conflicting spans
/// (not `excused` beside it) are on, per kind and name. Spans on at once are few unless the
/// history is broken, so each start looks at them all.
fn sweep(
    index: &Index<'_>,
    spans: Vec<Span>,
    excused: impl Fn(&Lease<'_>, &Lease<'_>) -> bool,
    mut conflict: impl FnMut(&Span, &[Span]),
) {
    let mut by_name: HashMap<(Kind, &str), Vec<Span>> = HashMap::new();
    for span in spans {
        let key = &index.leases[span.lease].key;
        by_name.entry((key.kind, key.name)).or_default().push(span);
    }
    for mut spans in by_name.into_values() {
        spans.sort_by_key(|span| (span.start, span.lease));
        let mut on: Vec<Span> = Vec::new();
        for span in spans {
            on.retain(|earlier| earlier.end > span.start);
            let lease = &index.leases[span.lease];
            let others: Vec<Span> = on
                .iter()
                .copied()
                .filter(|earlier| !excused(&index.leases[earlier.lease], lease))
                .collect();
            let in_the_way = in_the_way(index, lease, others);
            if !in_the_way.is_empty() {
                conflict(&span, &in_the_way);
            }
            on.push(span);
        }
    }
}

/// Of the leases on (other owners'), those that may not share the name with `lease`: all of
/// them, for a lock or beside a write hold; the write holds, beside a read hold; all of them
/// when they and `lease` are more owners than the semaphore's limit.
fn in_the_way(index: &Index<'_>, lease: &Lease<'_>, others: Vec<Span>) -> Vec<Span> {
    let writes = |l: &Lease<'_>| l.exclusive.unwrap_or(false);
    match lease.key.kind {
        Kind::Lock => others,
        Kind::Rwlock if writes(lease) => others,
        Kind::Rwlock => others
            .into_iter()
            .filter(|span| writes(&index.leases[span.lease]))
            .collect(),
        Kind::Semaphore => {
            let limit = others
                .iter()
                .filter_map(|span| index.leases[span.lease].limit)
                .chain(lease.limit)
                .min();
            let owners: HashSet<&str> = others
                .iter()
                .map(|span| index.leases[span.lease].key.owner)
                .collect();
            match limit {
                Some(limit) if owners.len() >= limit as usize => others,
                _ => Vec::new(),
            }
        }
    }
}

/// The entries that show a conflict: the later lease's telling grant, and for each lease in
/// its way, its telling grant and the operation that ended its belief (on the view's `end`).
fn evidence<'h>(
    index: &Index<'h>,
    later: &Span,
    in_the_way: &[Span],
    end: impl Fn(&Lease<'h>) -> Option<Moment>,
) -> Vec<usize> {
    let earlier = in_the_way.iter().flat_map(|span| {
        let lease = &index.leases[span.lease];
        [lease.told, end(lease)]
    });
    std::iter::once(index.leases[later.lease].told)
        .chain(earlier)
        .flatten()
        .map(|m| index.entry_of(m.op))
        .collect()
}

/// `lock "x": "c1-3" (token 6) was told it holds it at +1.234s`: how an exclusion's
/// explanation begins.
fn told(index: &Index<'_>, lease: &Lease<'_>) -> String {
    format!(
        "{} {:?}: {} was told it holds it at {}",
        lease.key.kind.as_str(),
        lease.key.name,
        describe(lease),
        at(index, lease.told),
    )
}

/// `"c1-3" (token 6)`, with a hold's mode.
fn describe(lease: &Lease<'_>) -> String {
    let mode = match (lease.key.kind, lease.exclusive) {
        (Kind::Rwlock, Some(true)) => "write, ",
        (Kind::Rwlock, _) => "read, ",
        _ => "",
    };
    format!("{:?} ({mode}token {})", lease.key.owner, lease.key.token)
}

fn describe_all(index: &Index<'_>, spans: &[Span]) -> String {
    let all: Vec<String> = spans
        .iter()
        .map(|span| describe(&index.leases[span.lease]))
        .collect();
    all.join(" and ")
}

/// `it held it (until +1.500s: held until)`, for each lease in the way.
fn belief_words(index: &Index<'_>, spans: &[Span]) -> String {
    let words: Vec<String> = spans
        .iter()
        .map(|span| {
            let lease = &index.leases[span.lease];
            let why = match lease.belief_end() {
                None => "nothing in the history ends it".to_owned(),
                Some(end) => format!("{}: {}", at(index, Some(end)), end_reason(lease, end)),
            };
            format!("it held it ({why})")
        })
        .collect();
    words.join(", ")
}

fn end_reason(lease: &Lease<'_>, end: Moment) -> &'static str {
    if lease.release_sent == Some(end) {
        "its release was sent then"
    } else if lease.lost == Some(end) {
        "its guard said lost then"
    } else if lease.superseded == Some(end) {
        "a newer hold of its owner replaced it"
    } else {
        "its guard's held until"
    }
}

/// A moment as the slice prints it, relative to the run's first.
fn at(index: &Index<'_>, moment: Option<Moment>) -> String {
    moment.map_or_else(|| "?".to_owned(), |m| relative(m.at, index.origin))
}
