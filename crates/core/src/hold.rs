//! Semaphores and read-write locks: names that several owners may hold at once.
//!
//! A **hold** is one owner's lease on such a name: a semaphore's permit, or a read-write
//! lock's read or write hold. Every hold is a [`Lease`] of its own (owner, TTL, fencing
//! token) with a [`Claim`] saying what it holds. Tokens are issued per name as for locks:
//! each new hold (a first grant, an upgrade, a downgrade) gets a token greater than every
//! token issued for that name before.
//!
//! [`judge`] is the rule book: given every hold on a name, it decides what an acquire does.
//! The stores that keep the holds in memory (the in-memory and the embedded store) and those
//! that read them and write back conditionally (etcd, ZooKeeper through [`crate::LockTable`])
//! call it; PostgreSQL, which decides in one statement, mirrors it in SQL, and Redis, which
//! decides in one Lua script per node, mirrors it in Lua; both are held to it by the
//! conformance suite.

use std::fmt;
use std::time::Duration;

use crate::model::{FencingToken, Lease, Meta, Owner, Resource, Timestamp, Ttl};

/// The three namespaces of fencelock: `/locks/x`, `/semaphores/x` and `/rwlocks/x` are
/// unrelated names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A plain lock: one owner at a time ([`crate::LockStore::acquire`]).
    Lock,
    /// A counting semaphore: at most `limit` owners at a time.
    Semaphore,
    /// A read-write lock: many readers or one writer.
    RwLock,
}

impl Kind {
    /// The name used in paths, logs and metric labels: `lock`, `semaphore`, `rwlock`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Semaphore => "semaphore",
            Self::RwLock => "rwlock",
        }
    }

    /// The kind as the hold methods take it; `None` for a plain lock.
    pub fn hold_kind(self) -> Option<HoldKind> {
        match self {
            Self::Lock => None,
            Self::Semaphore => Some(HoldKind::Semaphore),
            Self::RwLock => Some(HoldKind::RwLock),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kinds whose names many owners may hold: what the hold methods of
/// [`crate::LockStore`] take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HoldKind {
    /// A counting semaphore.
    Semaphore,
    /// A read-write lock.
    RwLock,
}

impl HoldKind {
    /// The name used in paths, logs and metric labels.
    pub fn as_str(self) -> &'static str {
        Kind::from(self).as_str()
    }
}

impl From<HoldKind> for Kind {
    fn from(kind: HoldKind) -> Self {
        match kind {
            HoldKind::Semaphore => Self::Semaphore,
            HoldKind::RwLock => Self::RwLock,
        }
    }
}

impl fmt::Display for HoldKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name in one of the namespaces: what waiters queue on and release notices name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The namespace.
    pub kind: Kind,
    /// The name within it.
    pub name: Resource,
}

impl Key {
    /// The key of a plain lock.
    pub fn lock(resource: &Resource) -> Self {
        Self {
            kind: Kind::Lock,
            name: resource.clone(),
        }
    }

    /// The key of a semaphore or read-write lock.
    pub fn hold(kind: HoldKind, name: &Resource) -> Self {
        Self {
            kind: kind.into(),
            name: name.clone(),
        }
    }
}

/// What an owner asks for, and then holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Claim {
    /// One permit of a semaphore of this many permits (at least one).
    Permit {
        /// The semaphore's limit, which every live permit carries.
        limit: u32,
    },
    /// A read hold of a read-write lock: shared with other readers.
    Read,
    /// A write hold of a read-write lock: exclusive.
    Write,
}

impl Claim {
    /// The namespace the claim is made in.
    pub fn kind(self) -> HoldKind {
        match self {
            Self::Permit { .. } => HoldKind::Semaphore,
            Self::Read | Self::Write => HoldKind::RwLock,
        }
    }

    /// Whether the claim excludes every other holder.
    pub fn is_exclusive(self) -> bool {
        self == Self::Write
    }
}

/// An owner's lease on a semaphore or read-write lock (`lease.resource` is the name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The lease: name, owner, token, `acquired_at`, `expires_at`.
    pub lease: Lease,
    /// What it holds.
    pub claim: Claim,
}

impl Hold {
    /// Whether the hold is live at `now`.
    pub fn is_live(&self, now: Timestamp) -> bool {
        self.lease.is_live(now)
    }
}

/// A writer waiting for a read-write lock, recorded in the store so that readers arriving
/// after it — on any server sharing the store — wait until it has had its turn. The waiting
/// server keeps it alive while the writer waits; it ends by itself when the server does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    /// The writer.
    pub owner: Owner,
    /// When the intent ends unless it is renewed, by the store's clock.
    pub expires_at: Timestamp,
}

/// What an acquire of a hold did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldOutcome {
    /// A new hold with a new token: a first grant, or the owner's hold replaced by one of
    /// another claim (a read hold upgraded to write, a write hold downgraded to read).
    Granted {
        /// The new hold.
        hold: Hold,
        /// The owner's live hold this one replaced, if any.
        replaced: Option<Hold>,
    },
    /// The owner already held this claim: same token, `acquired_at` and `expires_at` set anew.
    Extended(Hold),
    /// Not granted now. Not an error: the caller may retry or wait.
    Busy(Busy),
    /// The semaphore's live permits carry another limit than the one asked for: nothing
    /// changed.
    LimitMismatch {
        /// The limit of the live permits.
        limit: u32,
    },
}

/// Why a hold was not granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    /// The live holds of other owners, in token order.
    pub holders: Vec<Hold>,
    /// A writer of another owner waits (read-write locks only): a new reader waits behind it.
    pub writer_waits: bool,
    /// When asking again may be answered otherwise, by the store's clock: the earliest end of
    /// a hold or intent that stands in the way.
    pub retry_in: Duration,
}

/// What [`judge`] decided; the caller applies it and issues tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Grant a new hold with a new token, replacing the owner's live hold if it has one.
    Grant,
    /// Extend the owner's live hold (same token).
    Extend,
    /// Refuse: see [`Busy`].
    Busy(Busy),
    /// Refuse: the live permits carry this limit.
    LimitMismatch(u32),
}

/// Decides an acquire of `claim` by `owner` at `now`, given every hold on the name (live or
/// not, in any order) and the writers' intents on it. This is the whole rule book of the
/// SPEC's semaphores and read-write locks:
///
/// - a permit: refused with the live permits' limit if it differs; the owner's live permit
///   is extended; granted while fewer than `limit` permits are live;
/// - a read hold: the owner's read hold is extended, its write hold downgraded at once (new
///   token); granted unless another owner holds `write` or a writer of another owner waits;
/// - a write hold: the owner's write hold is extended; granted (as an upgrade, with a new
///   token, if the owner is the only reader) when no other owner holds anything;
/// - whatever the claim: refused while the owner's name is held by another principal
///   ([`Owner::claims_name_of`]), so that one name never holds twice.
pub fn judge(now: Timestamp, holds: &[Hold], intents: &[Intent], owner: &Owner, claim: Claim) -> Verdict {
    let live = || holds.iter().filter(|h| h.is_live(now));
    let own = live().find(|h| h.lease.owner == *owner);
    let others: Vec<&Hold> = live().filter(|h| h.lease.owner != *owner).collect();
    let busy = |blocking: &[&Hold], intents: &[&Intent]| {
        let ends = blocking
            .iter()
            .map(|h| h.lease.expires_at)
            .chain(intents.iter().map(|i| i.expires_at));
        let mut holders: Vec<Hold> = others.iter().map(|h| (*h).clone()).collect();
        holders.sort_by_key(|h| h.lease.token);
        Verdict::Busy(Busy {
            holders,
            writer_waits: !intents.is_empty(),
            retry_in: ends.min().map_or(Duration::ZERO, |end| end.since(now)),
        })
    };
    if let Some(namesake) = others.iter().find(|h| h.lease.owner.claims_name_of(owner)) {
        return busy(&[*namesake], &[]);
    }
    match claim {
        Claim::Permit { limit } => {
            if let Some(theirs) = live().find_map(|h| match h.claim {
                Claim::Permit { limit: theirs } if theirs != limit => Some(theirs),
                _ => None,
            }) {
                return Verdict::LimitMismatch(theirs);
            }
            if own.is_some() {
                Verdict::Extend
            } else if others.len() < usize::try_from(limit).unwrap_or(usize::MAX) {
                Verdict::Grant
            } else {
                busy(&others, &[])
            }
        }
        Claim::Read => match own.map(|h| h.claim) {
            Some(Claim::Read) => Verdict::Extend,
            Some(_) => Verdict::Grant,
            None => {
                let writers: Vec<&Hold> = others
                    .iter()
                    .copied()
                    .filter(|h| h.claim.is_exclusive())
                    .collect();
                let waiting: Vec<&Intent> = intents
                    .iter()
                    .filter(|i| i.owner != *owner && now < i.expires_at)
                    .collect();
                if writers.is_empty() && waiting.is_empty() {
                    Verdict::Grant
                } else {
                    busy(&writers, &waiting)
                }
            }
        },
        Claim::Write => match own.map(|h| h.claim) {
            Some(Claim::Write) => Verdict::Extend,
            _ if others.is_empty() => Verdict::Grant,
            _ => busy(&others, &[]),
        },
    }
}

/// One page of semaphores or read-write locks with live holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldPage {
    /// Each name with its live holds in token order, names in the order of their bytes.
    pub names: Vec<(Resource, Vec<Hold>)>,
    /// Where the next page starts, or `None` on the last page.
    pub next: Option<Resource>,
}

impl HoldPage {
    /// The page of `names`, read in order one past `limit` ([`crate::page::page_of`]).
    pub fn from_one_past(names: Vec<(Resource, Vec<Hold>)>, limit: usize) -> Self {
        let (names, next) = crate::page::page_of(names, limit, |(name, _)| name);
        Self { names, next }
    }
}

/// A lease a purge forgot because it had expired, with the namespace it was in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// The namespace.
    pub kind: Kind,
    /// The lease (for a semaphore or read-write lock, the hold's lease).
    pub lease: Lease,
}

/// A new hold of `claim` for `owner` on `name`, granted at `now` with `token`.
pub fn new_hold(
    name: &Resource,
    owner: &Owner,
    claim: Claim,
    token: FencingToken,
    now: Timestamp,
    ttl: Ttl,
    meta: Option<&Meta>,
) -> Hold {
    Hold {
        lease: Lease {
            resource: name.clone(),
            owner: owner.clone(),
            token,
            acquired_at: now,
            expires_at: now.plus(ttl),
            hold_until: None,
            lock_delay: Duration::ZERO,
            meta: meta.cloned(),
        },
        claim,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_000_000);

    fn o(name: &str) -> Owner {
        Owner::new(name).unwrap()
    }

    /// A hold of `claim` by `owner` with `token`, ending `ends_in` ms after NOW (negative: ended).
    fn h(owner: &str, claim: Claim, token: u64, ends_in: i64) -> Hold {
        Hold {
            lease: Lease {
                resource: Resource::new("n").unwrap(),
                owner: o(owner),
                token: FencingToken(token),
                acquired_at: Timestamp::from_millis(0),
                expires_at: Timestamp::from_millis(NOW.as_millis().saturating_add_signed(ends_in)),
                hold_until: None,
                lock_delay: Duration::ZERO,
                meta: None,
            },
            claim,
        }
    }

    fn judged(holds: &[Hold], intents: &[Intent], owner: &str, claim: Claim) -> Verdict {
        judge(NOW, holds, intents, &o(owner), claim)
    }

    const P2: Claim = Claim::Permit { limit: 2 };

    #[test]
    fn a_name_held_by_another_principal_is_refused_whatever_the_room() {
        let billing = Some(crate::Principal::new("billing").unwrap());
        let theirs = [h("a", P2, 1, 500)];
        let mut ours = theirs.clone();
        ours[0].lease.owner = o("a").of(billing.clone());
        for claim in [P2, Claim::Read, Claim::Write] {
            let asked = |holds: &[Hold]| judge(NOW, holds, &[], &o("a").of(billing.clone()), claim);
            let Verdict::Busy(busy) = asked(&theirs) else {
                panic!("{claim:?}: another principal's `a` holds the name");
            };
            assert_eq!(busy.holders, theirs);
            assert_eq!(busy.retry_in, Duration::from_millis(500));
            if claim == P2 {
                assert_eq!(asked(&ours), Verdict::Extend, "its own permit");
            }
        }
    }

    #[test]
    fn permits_up_to_the_limit_expired_ones_not_counted() {
        let two = [h("a", P2, 1, 500), h("b", P2, 2, 100)];
        let Verdict::Busy(busy) = judged(&two, &[], "c", P2) else {
            panic!("full");
        };
        assert_eq!(busy.holders, two);
        assert_eq!(busy.retry_in, Duration::from_millis(100), "the first to end");
        assert!(!busy.writer_waits);
        let one_ended = [h("a", P2, 1, 500), h("b", P2, 2, 0)];
        assert_eq!(judged(&one_ended, &[], "c", P2), Verdict::Grant);
        assert_eq!(judged(&two, &[], "a", P2), Verdict::Extend);
    }

    #[test]
    fn a_limit_mismatch_comes_first_and_ended_permits_carry_no_limit() {
        let live = [h("a", P2, 1, 500)];
        let three = Claim::Permit { limit: 3 };
        assert_eq!(judged(&live, &[], "a", three), Verdict::LimitMismatch(2));
        assert_eq!(judged(&live, &[], "b", three), Verdict::LimitMismatch(2));
        let ended = [h("a", P2, 1, -1)];
        assert_eq!(judged(&ended, &[], "b", three), Verdict::Grant);
    }

    #[test]
    fn readers_share_writers_exclude_and_upgrades_need_to_be_alone() {
        let readers = [h("a", Claim::Read, 1, 500), h("b", Claim::Read, 2, 300)];
        assert_eq!(judged(&readers, &[], "c", Claim::Read), Verdict::Grant);
        assert_eq!(judged(&readers, &[], "a", Claim::Read), Verdict::Extend);
        let Verdict::Busy(busy) = judged(&readers, &[], "a", Claim::Write) else {
            panic!("b still reads");
        };
        assert_eq!(
            busy.holders,
            [readers[1].clone()],
            "only the others stand in the way"
        );
        assert_eq!(busy.retry_in, Duration::from_millis(300));
        assert_eq!(
            judged(&readers[..1], &[], "a", Claim::Write),
            Verdict::Grant,
            "upgrade"
        );
        let writer = [h("w", Claim::Write, 3, 200)];
        assert!(matches!(judged(&writer, &[], "c", Claim::Read), Verdict::Busy(_)));
        assert!(matches!(
            judged(&writer, &[], "c", Claim::Write),
            Verdict::Busy(_)
        ));
        assert_eq!(judged(&writer, &[], "w", Claim::Write), Verdict::Extend);
        assert_eq!(
            judged(&writer, &[], "w", Claim::Read),
            Verdict::Grant,
            "downgrade"
        );
    }

    #[test]
    fn another_owners_live_intent_holds_back_new_readers_only() {
        let readers = [h("a", Claim::Read, 1, 500)];
        let intent = |owner: &str, ends_in: u64| Intent {
            owner: o(owner),
            expires_at: Timestamp::from_millis(NOW.as_millis() + ends_in),
        };
        let waiting = [intent("w", 50)];
        let Verdict::Busy(busy) = judged(&readers, &waiting, "c", Claim::Read) else {
            panic!("a writer waits");
        };
        assert!(busy.writer_waits);
        assert_eq!(busy.retry_in, Duration::from_millis(50), "when the intent ends");
        assert_eq!(judged(&readers, &waiting, "a", Claim::Read), Verdict::Extend);
        assert_eq!(
            judged(&readers, &waiting, "w", Claim::Read),
            Verdict::Grant,
            "its own"
        );
        assert_eq!(
            judged(&readers, &[intent("w", 0)], "c", Claim::Read),
            Verdict::Grant
        );
        assert_eq!(
            judged(&[], &waiting, "x", Claim::Write),
            Verdict::Grant,
            "writers race"
        );
    }
}
