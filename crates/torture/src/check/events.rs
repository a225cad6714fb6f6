//! The event streams: judged per watcher, over its window, by the acknowledged changes (see
//! the module docs of [`crate::check`], property 9).

use std::collections::HashMap;
use std::time::Duration;

use super::index::{Index, OpId};
use super::report::relative;
use super::{Finding, Tally};
use crate::history::{Call, Event, Kind, Mono, Op, Outcome, Watched};

/// An event's change: `(event, kind, name, owner, token, expires_at)`. The end is a
/// renewal's only (its lease's `expires_at` after it): a renewal's event is otherwise the
/// same each time, and one renewal's must not stand for another's.
type Key<'h> = (&'h str, &'h str, &'h str, &'h str, u64, Option<u64>);

/// How long after a change its server's kill may still have lost its event: a server's
/// queue sends within milliseconds while its store serves, and the nemesis kills a server
/// only once the fault before has healed and the store serves again. A kill later than
/// this excuses nothing.
const STILL_QUEUED: Duration = Duration::from_secs(5);

/// Events of these names are told once per lease: one twice, without a reset between, is a
/// duplicate. (A lease is renewed and extended any number of times.)
const ONCE: [&str; 4] = ["grant", "release", "expire", "force-release"];

/// Events of these names tell a change some acquire made possible.
const CHANGES: [&str; 5] = ["grant", "extend", "renew", "release", "expire"];

pub(crate) fn check(index: &Index<'_>) -> Tally {
    let mut tally = Tally::new("no watcher followed a server's event stream");
    let expected = Expected::new(index);
    for &(place, watched) in &index.watched {
        let stream = Stream::new(index, watched, place);
        // Every event received, and every change owed to the stream.
        tally.checked += stream.events.len();
        every_change_told(index, &expected, &stream, &mut tally);
        nothing_untrue(index, &expected, &stream, &mut tally);
        none_twice(&stream, &mut tally);
        in_order(index, &expected, &stream, &mut tally);
    }
    tally
}

/// The events each acknowledged change should have made, and the calls behind each event.
struct Expected<'h> {
    /// Every acknowledged change with a server: the operation and the events it made.
    changes: Vec<(OpId, u32, Vec<Key<'h>>)>,
    /// Renewals and releases, by the event they would make: their operations.
    calls: HashMap<Key<'h>, Vec<OpId>>,
}

impl<'h> Expected<'h> {
    fn new(index: &Index<'h>) -> Self {
        let mut changes = Vec::new();
        let mut calls: HashMap<Key<'h>, Vec<OpId>> = HashMap::new();
        for id in 0..index.ops.len() {
            let op = index.op(id);
            if matches!(op.call, Call::Renew | Call::Release) {
                for key in keys(op) {
                    calls.entry(key).or_default().push(id);
                }
            }
            if op.outcome == Outcome::Ok
                && let Some(server) = op.server
            {
                let keys = keys(op);
                if !keys.is_empty() {
                    changes.push((id, server, keys));
                }
            }
        }
        Expected { changes, calls }
    }
}

/// The events an operation makes if it worked: an acquire a `grant` (an `extend` when it
/// extended) per lease it was answered with, a renewal a `renew` per lease it renewed, a
/// release a `release`.
fn keys(op: &Op) -> Vec<Key<'_>> {
    let kind = op.kind.as_str();
    let event = match op.call {
        Call::Acquire if op.extended => "extend",
        Call::Acquire => "grant",
        Call::Renew => "renew",
        Call::Release => {
            return match (op.names.first(), op.token) {
                (Some(name), Some(token)) => {
                    vec![("release", kind, name.as_str(), op.owner.as_str(), token, None)]
                }
                _ => Vec::new(),
            };
        }
        Call::Get | Call::Lost => return Vec::new(),
    };
    op.leases
        .iter()
        .filter(|seen| seen.owner == op.owner)
        .map(|seen| {
            let end = (op.call == Call::Renew).then_some(seen.expires_at);
            (
                event,
                kind,
                seen.name.as_str(),
                op.owner.as_str(),
                seen.token,
                end,
            )
        })
        .collect()
}

/// One watcher's stream: its events in the order received, looked up by change.
struct Stream<'h> {
    server: u32,
    watched: &'h Watched,
    place: usize,
    /// `(place in the history, event)`, in the order received.
    events: Vec<(usize, &'h Event)>,
    /// Where each change is on the stream (positions in `events`).
    at: HashMap<Key<'h>, Vec<usize>>,
    /// The positions of the resets.
    resets: Vec<usize>,
}

impl<'h> Stream<'h> {
    fn new(index: &Index<'h>, watched: &'h Watched, place: usize) -> Self {
        let mut events: Vec<(usize, &Event)> = index
            .events
            .iter()
            .filter(|(_, event)| event.server == watched.server)
            .copied()
            .collect();
        events.sort_by_key(|&(place, event)| (event.received, place));
        let mut at: HashMap<Key<'h>, Vec<usize>> = HashMap::new();
        let mut resets = Vec::new();
        for (position, (_, event)) in events.iter().enumerate() {
            if event.event == "reset" {
                resets.push(position);
            } else if let Some(key) = key_of(event) {
                at.entry(key).or_default().push(position);
            }
        }
        Stream {
            server: watched.server,
            watched,
            place,
            events,
            at,
            resets,
        }
    }

    fn within(&self, t: Mono) -> bool {
        self.watched.from <= t && t <= self.watched.to
    }

    /// The first position of `key` received after `after`.
    fn find(&self, key: &Key<'h>, after: Mono) -> Option<usize> {
        let positions = self.at.get(key)?;
        positions
            .iter()
            .copied()
            .find(|&position| self.events[position].1.received > after)
    }

    /// Where a change told once per lease (a grant, a release) made by `op` is on the
    /// stream, if it is: the event found is certainly its own.
    fn found_once(&self, op: &Op, keys: &[Key<'h>]) -> Option<usize> {
        keys.iter()
            .filter(|key| ONCE.contains(&key.0))
            .filter_map(|key| self.find(key, op.invoked))
            .min()
    }

    /// The first reset received after `after`.
    fn reset_after(&self, after: Mono) -> Option<usize> {
        self.resets
            .iter()
            .copied()
            .find(|&position| self.events[position].1.received > after)
    }

    /// Whether a reset was received between two positions.
    fn reset_between(&self, from: usize, to: usize) -> bool {
        let first = self.resets.partition_point(|&position| position <= from);
        self.resets.get(first).is_some_and(|&position| position < to)
    }

    fn place_of(&self, position: usize) -> usize {
        self.events[position].0
    }
}

fn key_of(event: &Event) -> Option<Key<'_>> {
    Some((
        event.event.as_str(),
        event.kind.as_deref()?,
        event.name.as_deref()?,
        event.owner.as_deref()?,
        event.token?,
        if event.event == "renew" {
            event.expires_at
        } else {
            None
        },
    ))
}

/// (a) Every acknowledged change invoked inside the window is on the stream, or a reset
/// received after it was sent, and before any later change of its server, says it may not
/// be; or its server was killed before it told anything later. A server's changes reach the
/// others in its order, and a server that hears one after a gap resets its streams before
/// it appends it: a later change of the same server on the stream, with no reset between,
/// shows the loss was silent. ("Later": invoked after this one completed, so certainly
/// told after it; and told once per lease, a grant or a release, so that the event found
/// is its own — a renewal's could be the next renewal's.)
fn every_change_told(index: &Index<'_>, expected: &Expected<'_>, stream: &Stream<'_>, tally: &mut Tally) {
    let found: Vec<Option<usize>> = expected
        .changes
        .iter()
        .map(|(id, _, keys)| stream.found_once(index.op(*id), keys))
        .collect();
    for (id, server, keys) in &expected.changes {
        let op = index.op(*id);
        if !stream.within(op.invoked) {
            continue;
        }
        tally.checked += keys.len();
        for key in keys {
            if stream.find(key, op.invoked).is_some() {
                continue;
            }
            // The later changes of the same server on the stream: (completed, position).
            let later: Vec<(Mono, usize)> = (expected.changes.iter().zip(&found))
                .filter(|((other, by, _), _)| by == server && index.op(*other).invoked > op.completed)
                .filter_map(|((other, _, _), position)| Some((index.op(*other).completed, (*position)?)))
                .collect();
            let first_later = later.iter().map(|&(_, position)| position).min();
            let reset = stream
                .reset_after(op.invoked)
                .filter(|&reset| first_later.is_none_or(|later| reset < later));
            if reset.is_some() {
                continue;
            }
            // The one loss the table allows: a server killed, within STILL_QUEUED of the
            // change, before it told the others what it had queued. Not on its own stream, which told the change before answering.
            let kill = (*server != stream.server)
                .then(|| {
                    index
                        .kills
                        .iter()
                        .filter(|&&(at, killed, _)| {
                            killed == *server && at > op.completed && at <= op.completed.plus(STILL_QUEUED)
                        })
                        .min_by_key(|&&(at, _, _)| at)
                })
                .flatten();
            let told_later = later
                .iter()
                .filter(|&&(completed, _)| kill.is_none_or(|&(at, _, _)| completed < at))
                .map(|&(_, position)| position)
                .min();
            if kill.is_some() && told_later.is_none() {
                continue;
            }
            tally.violation(op.completed, || {
                let mut explanation = format!(
                    "the stream of server {} has no {} of {:?} by {:?} (token {}), told to client {} \
                     (op {}, through server {server}) at {}, and no reset after it was sent",
                    stream.server,
                    key.0,
                    key.2,
                    key.3,
                    key.4,
                    op.client,
                    op.op,
                    relative(op.completed, index.origin)
                );
                if let Some(later) = told_later {
                    let (_, event) = stream.events[later];
                    explanation.push_str(&format!(
                        " before a later change of server {server} reached the stream (its {} of {:?}, at {}): \
                         a silent gap",
                        event.event,
                        event.name.as_deref().unwrap_or_default(),
                        relative(event.received, index.origin)
                    ));
                }
                Finding {
                    explanation,
                    entries: [index.entry_of(*id), stream.place]
                        .into_iter()
                        .chain(told_later.map(|position| stream.place_of(position)))
                        .chain(kill.map(|&(_, _, place)| place))
                        .collect(),
                }
            });
        }
    }
}

/// (b) No event of what did not happen: a change whose owner no acquire that was ok or
/// unknown was made as, or a renewal or release whose every call was refused.
fn nothing_untrue(index: &Index<'_>, expected: &Expected<'_>, stream: &Stream<'_>, tally: &mut Tally) {
    for &(place, event) in &stream.events {
        if !CHANGES.contains(&event.event.as_str()) {
            continue;
        }
        let (Some(name), Some(owner)) = (event.name.as_deref(), event.owner.as_deref()) else {
            continue;
        };
        let acquired = kind_of(event).is_some_and(|kind| {
            index
                .acquires
                .get(&(kind, name, owner))
                .is_some_and(|ids| ids.iter().any(|&id| index.op(id).outcome != Outcome::Refused))
        });
        let refused = key_of(event)
            .and_then(|key| expected.calls.get(&key))
            .filter(|ids| ids.iter().all(|&id| index.op(id).outcome == Outcome::Refused));
        if acquired && refused.is_none() {
            continue;
        }
        tally.violation(event.received, || Finding {
            explanation: match refused {
                Some(_) => format!(
                    "the stream of server {} told a {} of {name:?} by {owner:?} (token {}), whose every call was refused",
                    stream.server,
                    event.event,
                    event.token.unwrap_or_default()
                ),
                None => format!(
                    "the stream of server {} told a {} of {name:?} by {owner:?}, whom no acquire that worked (or may have) was made as",
                    stream.server, event.event
                ),
            },
            entries: std::iter::once(place)
                .chain(refused.into_iter().flatten().map(|&id| index.entry_of(id)))
                .collect(),
        });
    }
}

fn kind_of(event: &Event) -> Option<Kind> {
    [Kind::Lock, Kind::Semaphore, Kind::Rwlock]
        .into_iter()
        .find(|kind| event.kind.as_deref() == Some(kind.as_str()))
}

/// (c) None twice: an id, or a change told once per lease, twice without a reset between.
fn none_twice(stream: &Stream<'_>, tally: &mut Tally) {
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut once: HashMap<Key<'_>, usize> = HashMap::new();
    for (position, &(place, event)) in stream.events.iter().enumerate() {
        let id_again = event.id.as_deref().and_then(|id| ids.insert(id, position));
        let key = key_of(event).filter(|key| ONCE.contains(&key.0));
        let change_again = key
            .and_then(|key| once.insert(key, position))
            .filter(|&earlier| !stream.reset_between(earlier, position));
        let Some(earlier) = id_again.or(change_again) else {
            continue;
        };
        tally.violation(event.received, || Finding {
            explanation: format!(
                "the stream of server {} told {} twice: {}",
                stream.server,
                match (id_again, &key) {
                    (Some(_), _) => format!("the id {:?}", event.id.as_deref().unwrap_or_default()),
                    (None, Some(key)) =>
                        format!("the {} of {:?} by {:?} (token {})", key.0, key.2, key.3, key.4),
                    (None, None) => String::new(),
                },
                if id_again.is_some() {
                    "ids are unique on a stream"
                } else {
                    "a lease has one of these, and no reset came between"
                }
            ),
            entries: vec![stream.place_of(earlier), place],
        });
    }
}

/// A change on the stream, for its order.
#[derive(Debug, Clone, Copy)]
struct Told {
    op: OpId,
    invoked: Mono,
    completed: Mono,
    /// Its position on the stream.
    position: usize,
}

/// (d) Order: per server and name, of two acknowledged changes on the stream, the one that
/// completed before the other was invoked is told first. Judged of the changes told once
/// per lease (grants, releases): a renewal's own event may be missing (after a reset) while
/// the next renewal's, which looks the same, comes later.
fn in_order(index: &Index<'_>, expected: &Expected<'_>, stream: &Stream<'_>, tally: &mut Tally) {
    let mut groups: HashMap<(u32, &str, &str), Vec<Told>> = HashMap::new();
    for (id, server, keys) in &expected.changes {
        let op = index.op(*id);
        for key in keys.iter().filter(|key| ONCE.contains(&key.0)) {
            if let Some(position) = stream.find(key, op.invoked) {
                groups.entry((*server, key.1, key.2)).or_default().push(Told {
                    op: *id,
                    invoked: op.invoked,
                    completed: op.completed,
                    position,
                });
            }
        }
    }
    for group in groups.values_mut() {
        let mut later: Vec<Told> = group.clone();
        later.sort_by_key(|told| told.invoked);
        group.sort_by_key(|told| told.completed);
        // The change told last of those completed so far.
        let mut last: Option<Told> = None;
        let mut done = group.iter().peekable();
        for b in &later {
            while let Some(a) = done.next_if(|a| a.completed < b.invoked) {
                if last.is_none_or(|last| a.position > last.position) {
                    last = Some(*a);
                }
            }
            let Some(a) = last.filter(|a| a.position > b.position) else {
                continue;
            };
            tally.violation(stream.events[a.position].1.received, || {
                let (first, then) = (index.op(a.op), index.op(b.op));
                Finding {
                    explanation: format!(
                        "the stream of server {} told client {} op {} (invoked at {}) before client {} op {} \
                         (completed at {}), both through server {} on {:?}",
                        stream.server,
                        then.client,
                        then.op,
                        relative(then.invoked, index.origin),
                        first.client,
                        first.op,
                        relative(first.completed, index.origin),
                        first.server.unwrap_or_default(),
                        then.names.join(","),
                    ),
                    entries: vec![
                        index.entry_of(a.op),
                        index.entry_of(b.op),
                        stream.place_of(b.position),
                        stream.place_of(a.position),
                    ],
                }
            });
        }
    }
}
