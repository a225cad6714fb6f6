//! The events of `GET /events` (Server-Sent Events): what each `event:` line is called, the
//! JSON of its `data:` line, and the `id:` that a client resumes from.

use std::fmt;
use std::str::FromStr;

use fencelock_core::{Hold, Kind, Leadership, Lease, Owner, Resource, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::body::LeaseBody;
use crate::election::LeadershipBody;
use crate::hold::HoldItem;
use crate::problem::FieldError;

/// What an event tells, as its `event:` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EventName {
    /// A new lease, permit or hold, with a new token.
    Grant,
    /// The holder acquired again: same token, a later `expires_at`.
    Extend,
    /// The holder renewed.
    Renew,
    /// The holder released (or an upgrade or downgrade replaced the hold); with `held_ms`.
    Release,
    /// It ran out unreleased; with `held_ms`.
    Expire,
    /// An administrator ended it.
    ForceRelease,
    /// An acquire that waited was answered `acquired: false`.
    Refuse,
    /// A wait was refused: it would have closed a cycle of owners waiting for each other.
    Deadlock,
    /// An election has a new leader or a new value.
    Leader,
    /// An election has no leader any more.
    Vacant,
    /// After a `reset`: one live lease, permit or hold as it is now.
    Snapshot,
    /// The events since the id asked for are gone: a snapshot follows, then the live tail.
    Reset,
    /// The stream fell too far behind and is closed; reconnect with the last id.
    Overflow,
}

impl EventName {
    /// Every name, in the order of the SPEC.
    pub const ALL: [Self; 13] = [
        Self::Grant,
        Self::Extend,
        Self::Renew,
        Self::Release,
        Self::Expire,
        Self::ForceRelease,
        Self::Refuse,
        Self::Deadlock,
        Self::Leader,
        Self::Vacant,
        Self::Snapshot,
        Self::Reset,
        Self::Overflow,
    ];

    /// The name on the `event:` line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Grant => "grant",
            Self::Extend => "extend",
            Self::Renew => "renew",
            Self::Release => "release",
            Self::Expire => "expire",
            Self::ForceRelease => "force-release",
            Self::Refuse => "refuse",
            Self::Deadlock => "deadlock",
            Self::Leader => "leader",
            Self::Vacant => "vacant",
            Self::Snapshot => "snapshot",
            Self::Reset => "reset",
            Self::Overflow => "overflow",
        }
    }

    /// The name an `event:` line gives, if it is one of these.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|name| name.as_str() == text)
    }
}

impl fmt::Display for EventName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The namespace of an event's name: a lock, a semaphore, a read-write lock or an election
/// (`?kinds=` filters by these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Topic {
    /// A lock.
    Lock,
    /// A semaphore.
    Semaphore,
    /// A read-write lock.
    Rwlock,
    /// An election.
    Election,
}

impl Topic {
    /// Every topic.
    pub const ALL: [Self; 4] = [Self::Lock, Self::Semaphore, Self::Rwlock, Self::Election];

    /// The name in `kinds` and in an event's `kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Semaphore => "semaphore",
            Self::Rwlock => "rwlock",
            Self::Election => "election",
        }
    }

    /// The topic of a lease of `kind`.
    pub fn of(kind: Kind) -> Self {
        match kind {
            Kind::Lock => Self::Lock,
            Kind::Semaphore => Self::Semaphore,
            Kind::RwLock => Self::Rwlock,
        }
    }

    /// A bit of its own, for a set of topics.
    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of [`Topic`]s: what `?kinds=` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topics(u8);

impl Topics {
    /// Every topic: no `kinds` given.
    pub const ALL: Self = Self(0b1111);

    /// The set of `topics`.
    pub fn of(topics: &[Topic]) -> Self {
        Self(topics.iter().fold(0, |set, topic| set | topic.bit()))
    }

    /// Whether `topic` is in the set.
    pub fn contains(self, topic: Topic) -> bool {
        self.0 & topic.bit() != 0
    }

    /// The topics of `kinds`, a comma list of their names (`None`: all); 422 on `kinds`
    /// for an unknown or empty one.
    pub fn parse(kinds: Option<&str>) -> Result<Self, FieldError> {
        let Some(kinds) = kinds else {
            return Ok(Self::ALL);
        };
        kinds.split(',').try_fold(Self(0), |set, name| {
            Topic::ALL
                .into_iter()
                .find(|topic| topic.as_str() == name)
                .map(|topic| Self(set.0 | topic.bit()))
                .ok_or_else(|| {
                    FieldError::new(
                        "kinds",
                        format!("{name:?} is none of lock, semaphore, rwlock, election"),
                    )
                })
        })
    }
}

/// What an event is about, as the API shows it elsewhere: a lock's lease, a semaphore's
/// permit or a read-write lock's hold (`{"lease": {...}}`, `{"permit": {...}}`,
/// `{"hold": {...}}` in the event's data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Subject {
    /// A lock's lease (and a permit's or hold's when only its lease is known: an expiry).
    Lease(LeaseBody),
    /// A semaphore's permit or a read-write lock's hold.
    Hold(HoldItem),
    /// An election's leadership (as it is, or was for a `vacant`).
    Leadership(LeadershipBody),
}

impl Subject {
    /// A lock's lease.
    pub fn lease(lease: &Lease) -> Self {
        Self::Lease(LeaseBody::from(lease))
    }

    /// A permit or a hold.
    pub fn hold(hold: &Hold) -> Self {
        Self::Hold(HoldItem::from(hold))
    }
}

/// The `data:` of an event: one JSON object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"kind": "lock", "name": "payment:42", "owner": "worker-7",
    "fencing_token": 17, "at": "2026-11-29T06:30:00.123Z", "lease": {"resource": "payment:42",
    "owner": "worker-7", "fencing_token": 17, "acquired_at": "2026-11-29T06:30:00.123Z",
    "expires_at": "2026-11-29T06:30:30.123Z"}}))]
pub struct EventData {
    /// `lock`, `semaphore`, `rwlock` or `election`.
    pub kind: Topic,
    /// The lock's, semaphore's, read-write lock's or election's name.
    pub name: String,
    /// The owner of the lease, or the one refused.
    pub owner: String,
    /// The lease's token; `null` for a refusal or a deadlock.
    pub fencing_token: Option<u64>,
    /// When it happened (RFC 3339, UTC, milliseconds).
    pub at: String,
    /// The lease, permit or hold as it now is (or was, for an end); absent for a refusal, a
    /// deadlock, and a release by a server that cannot tell the lease.
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Subject>,
    /// For `release`, `expire` and `force-release`: how long it was held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_ms: Option<u64>,
}

impl EventData {
    /// An event about `owner` on `name` of `kind` at `at`, without a lease.
    pub fn about(kind: Kind, name: &Resource, owner: &Owner, at: Timestamp) -> Self {
        Self {
            kind: Topic::of(kind),
            name: name.to_string(),
            owner: owner.to_string(),
            fencing_token: None,
            at: at.to_rfc3339(),
            subject: None,
            held_ms: None,
        }
    }

    /// An event about `lease` (a lock's, or a permit's or hold's lease) at `at`.
    pub fn of_lease(kind: Kind, lease: &Lease, at: Timestamp) -> Self {
        Self {
            fencing_token: Some(lease.token.0),
            subject: Some(Subject::lease(lease)),
            ..Self::about(kind, &lease.resource, &lease.owner, at)
        }
    }

    /// An event about `hold` (a permit or a read-write lock's hold) at `at`.
    pub fn of_hold(kind: Kind, hold: &Hold, at: Timestamp) -> Self {
        Self {
            subject: Some(Subject::hold(hold)),
            ..Self::of_lease(kind, &hold.lease, at)
        }
    }

    /// An event about `leadership` at `at`: of kind `election`, under the election's name.
    pub fn of_leadership(leadership: &Leadership, at: Timestamp) -> Self {
        Self {
            kind: Topic::Election,
            name: leadership.name.to_string(),
            owner: leadership.leader.to_string(),
            fencing_token: Some(leadership.term.0),
            at: at.to_rfc3339(),
            subject: Some(Subject::Leadership(LeadershipBody::from(leadership))),
            held_ms: None,
        }
    }

    /// An event saying the election `name` has no leader at `at`, without telling who led
    /// it last (`owner` empty, no token): what an observer first hears of a vacant election.
    pub fn vacant(name: &Resource, at: Timestamp) -> Self {
        Self {
            kind: Topic::Election,
            name: name.to_string(),
            owner: String::new(),
            fencing_token: None,
            at: at.to_rfc3339(),
            subject: None,
            held_ms: None,
        }
    }

    /// The same event told of an election: what this event of the lock that keeps an
    /// election says of it — a grant is a `leader`, an end (release, expiry, force-release)
    /// a `vacant` with the leadership as it was; an extension or renewal says nothing (a
    /// new value is told by the route that proclaims it), nor does a refusal or a
    /// deadlock. `None` also for an event of anything else.
    pub fn for_election(&self, name: EventName) -> Option<Option<(EventName, Self)>> {
        if self.kind != Topic::Lock || !self.name.starts_with(fencelock_core::model::ELECTION_MARK) {
            return None;
        }
        let lease = match &self.subject {
            Some(Subject::Lease(body)) => Lease::try_from(body.clone()).ok(),
            _ => None,
        };
        let leadership = lease.as_ref().and_then(Leadership::of);
        let at = Timestamp::parse_rfc3339(&self.at).unwrap_or_else(Timestamp::now_wall);
        let told = match (name, leadership) {
            (EventName::Grant, Some(leadership)) => {
                Some((EventName::Leader, Self::of_leadership(&leadership, at)))
            }
            (EventName::Release | EventName::Expire | EventName::ForceRelease, Some(leadership)) => Some((
                EventName::Vacant,
                Self {
                    held_ms: self.held_ms,
                    ..Self::of_leadership(&leadership, at)
                },
            )),
            // A release by a server in front of another, which cannot tell the lease.
            (EventName::Release, None) => Resource::new(self.name.as_str())
                .ok()
                .and_then(|lock| Resource::named(lock.election_name()?).ok())
                .map(|election| {
                    let vacant = Self {
                        owner: self.owner.clone(),
                        fencing_token: self.fencing_token,
                        ..Self::vacant(&election, at)
                    };
                    (EventName::Vacant, vacant)
                }),
            _ => None,
        };
        Some(told)
    }

    /// The same, held for `held_ms`.
    pub fn held(self, held_ms: u64) -> Self {
        Self {
            held_ms: Some(held_ms),
            ..self
        }
    }
}

/// An event as a server tells the other servers sharing its store, to be sent on their
/// streams as their own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relayed {
    /// What it tells.
    pub event: EventName,
    /// Its data.
    pub data: EventData,
}

/// The `data:` of a `reset` or an `overflow`: when the stream said so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Notice {
    /// When (RFC 3339, UTC, milliseconds).
    pub at: String,
}

/// An event's `id:`: the epoch of the server that sent it (a new one at every start, so an
/// id of a server before its restart is never taken for one of now) and the event's place
/// in that server's sequence. Written `EPOCH-SEQ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventId {
    /// The server's epoch.
    pub epoch: u64,
    /// The event's place: 1 for the first event of the epoch, 0 for "before any".
    pub seq: u64,
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.epoch, self.seq)
    }
}

/// Why an event id could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an event id is EPOCH-SEQ, two decimal numbers, as an event's id: line gives it")]
pub struct InvalidEventId;

impl FromStr for EventId {
    type Err = InvalidEventId;

    fn from_str(text: &str) -> Result<Self, InvalidEventId> {
        let (epoch, seq) = text.split_once('-').ok_or(InvalidEventId)?;
        let number = |digits: &str| {
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(InvalidEventId);
            }
            digits.parse().map_err(|_| InvalidEventId)
        };
        Ok(Self {
            epoch: number(epoch)?,
            seq: number(seq)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_back_what_is_written() {
        let id = EventId { epoch: 17, seq: 4 };
        assert_eq!(id.to_string().parse::<EventId>(), Ok(id));
        for bad in [
            "",
            "1",
            "1-",
            "-1",
            "a-1",
            "1-+2",
            "1-2-3",
            "99999999999999999999-1",
        ] {
            assert_eq!(bad.parse::<EventId>(), Err(InvalidEventId), "{bad}");
        }
    }

    #[test]
    fn kinds_are_a_comma_list_of_topics() {
        assert_eq!(Topics::parse(None), Ok(Topics::ALL));
        let set = Topics::parse(Some("lock,rwlock")).unwrap();
        assert!(set.contains(Topic::Lock) && set.contains(Topic::Rwlock));
        assert!(!set.contains(Topic::Semaphore) && !set.contains(Topic::Election));
        assert!(Topics::parse(Some("lock,")).is_err());
        assert!(Topics::parse(Some("locks")).is_err());
    }

    #[test]
    fn names_read_back_what_is_written() {
        for name in EventName::ALL {
            assert_eq!(EventName::parse(name.as_str()), Some(name));
            let json = serde_json::to_string(&name).unwrap();
            assert_eq!(json, format!("\"{}\"", name.as_str()));
        }
    }
}
