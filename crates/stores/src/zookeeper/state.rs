//! A name's whole state as its parent node keeps it (JSON), and the [`LockTable`] that
//! judges a call on it: loaded with the states read, and read back after the call.

use std::time::Duration;

use fencelock_core::{
    Claim, FencingToken, Hold, HoldKind, Intent, Key, Kind, Lease, LockTable, Meta, Resource, Timestamp, Ttl,
};
use serde::{Deserialize, Serialize};

use super::error::ZkError;
use crate::remote::{owner, principal_of};

/// The state of one name: of a lock, its lease (live, or expired and kept for its lock-delay);
/// of a semaphore or read-write lock, its holds and writers' intents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct State {
    pub(super) lease: Option<Lease>,
    /// In token order.
    pub(super) holds: Vec<Hold>,
    pub(super) intents: Vec<Intent>,
}

/// A parent node as read: the state in its data (with the tokens of the write that last
/// changed it settled: see [`PENDING`]), and its version and `mzxid` (`None`: the node does
/// not exist).
#[derive(Debug, Clone)]
pub(super) struct Read {
    pub(super) key: Key,
    pub(super) path: String,
    pub(super) state: State,
    pub(super) stat: Option<Versioned>,
    /// The node's generation: a random number its creating write gave it, also the name of
    /// its child `gen-{generation}` (see [`generation_path`]); `None` for a node an earlier
    /// build made, or none.
    pub(super) generation: Option<u64>,
}

/// What a compare-and-set needs of a node's `Stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Versioned {
    pub(super) version: i32,
    /// The zxid of the node's last change: the token of a lease or hold that change granted.
    pub(super) mzxid: u64,
}

impl Read {
    /// The read of the node at `path` of `key`, with `data` and `stat`, or of no node.
    pub(super) fn new(key: Key, path: String, found: Option<(Vec<u8>, Versioned)>) -> Result<Self, ZkError> {
        let (data, stat) = match found {
            Some((data, stat)) => (data, Some(stat)),
            None => (Vec::new(), None),
        };
        let (state, generation) = decode(&key, &data, stat.map_or(0, |s| s.mzxid))?;
        Ok(Self {
            key,
            path,
            state,
            stat,
            generation,
        })
    }
}

/// The path of the child that marks the generation `generation` of the name's node at
/// `path`.
pub(super) fn generation_path(path: &str, generation: u64) -> String {
    format!("{path}/gen-{generation:016x}")
}

/// Whether `child`, a child of a name's node, is its generation's mark rather than a
/// holder's node.
pub(super) fn is_generation_node(child: &str) -> bool {
    child.starts_with("gen-")
}

/// Where the tokens of the call being judged start. A grant's token is the zxid of the write
/// that makes it, known only once that write commits, so the table issues tokens above this
/// (far above every zxid: a zxid is an epoch of 32 bits and a counter of 32) and the store
/// puts the zxid in their place in what it answers ([`super::Settle`]). The write stores
/// such a token as none at all, which a later read takes as the node's `mzxid`: the zxid of
/// that very write, as long as it is the node's last (and every later write of the node
/// stores the tokens it read, settled).
pub(super) const PENDING: u64 = 1 << 62;

/// A table holding the states of `reads` at `now` (intents that ended left out), journalling
/// from here on so that [`after`] can read back what a call changed.
pub(super) fn table(reads: &[Read], now: Timestamp) -> LockTable {
    let leases = reads.iter().filter_map(|r| r.state.lease.clone());
    let holds = reads.iter().flat_map(|r| {
        let kind = r.key.kind.hold_kind();
        r.state
            .holds
            .iter()
            .filter_map(move |h| kind.map(|kind| (kind, h.clone())))
    });
    let mut table = LockTable::new(PENDING, leases).with_holds(holds);
    for read in reads {
        for intent in &read.state.intents {
            let left = intent.expires_at.as_millis().saturating_sub(now.as_millis());
            if let Ok(ttl) = Ttl::from_millis(left, Ttl::from_const_millis(u64::MAX)) {
                table.intend(now, &read.key.name, &intent.owner, ttl);
            }
        }
    }
    table.begin();
    table
}

/// The state of `read`'s name once `table` (made by [`table`] from reads including it) has
/// applied a call: what the call changed, over what was read.
pub(super) fn after(read: &Read, table: &LockTable) -> State {
    let name = &read.key.name;
    let mut state = State::default();
    match read.key.kind.hold_kind() {
        None => {
            state.lease = match table.changes().into_iter().find(|(r, _)| r == name) {
                Some((_, now)) => now,
                None => read.state.lease.clone(),
            };
        }
        Some(kind) => {
            state.holds = read.state.holds.clone();
            for ((k, n, owner), now) in table.hold_changes() {
                if k == kind && n == *name {
                    state.holds.retain(|h| h.lease.owner.as_str() != owner);
                    state.holds.extend(now);
                }
            }
            state.holds.sort_by_key(|h| h.lease.token);
            if kind == HoldKind::RwLock {
                state.intents = table.intents(name).to_vec();
            }
        }
    }
    state
}

/// A holder's node that a change makes or deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Holder {
    /// A new lease or hold (a new token): its node is made, ephemeral and sequential, with
    /// the owner's name as data.
    Began(String),
    /// A lease or hold that is no more: its node is deleted.
    Ended,
}

/// The holders' nodes that going from `before` to `after` makes and deletes, each by the
/// start of its name: `lease-`, the hex of the owner's name and `-`, to which ZooKeeper
/// adds the node's sequence number. A name has at most one lease or hold per owner, so the
/// start finds the node of a lease again when it ends; and the sequence numbers of the live
/// ones are in the order of their grants, as their tokens (their `czxid`) are.
pub(super) fn holder_changes(before: &State, after: &State) -> Vec<(String, Holder)> {
    let has = |state: &State, token: FencingToken| leases(state).any(|l| l.token == token);
    let began = leases(after)
        .filter(|l| !has(before, l.token))
        .map(|l| (holder(l), Holder::Began(l.owner.as_str().to_owned())));
    let ended = leases(before)
        .filter(|l| !has(after, l.token))
        .map(|l| (holder(l), Holder::Ended));
    began.chain(ended).collect()
}

/// The start of the name of the node of the holder of `lease`.
fn holder(lease: &Lease) -> String {
    format!("lease-{}-", hex(lease.owner.as_str()))
}

/// Every lease and hold in `state`, live or not.
fn leases(state: &State) -> impl Iterator<Item = &Lease> {
    state.lease.iter().chain(state.holds.iter().map(|h| &h.lease))
}

/// Whether nothing is left in `state`, so that a purge may delete its node: a name's tokens
/// are zxids, so one made again later still gets greater ones.
pub(super) fn is_empty(state: &State) -> bool {
    *state == State::default()
}

/// Whether anything in `state` is over at `now`: a lease past its lock-delay, a hold past
/// its expiry, an intent that ended.
pub(super) fn has_expired(state: &State, now: Timestamp) -> bool {
    state.lease.as_ref().is_some_and(|l| l.closed_until() <= now)
        || state.holds.iter().any(|h| !h.is_live(now))
        || state.intents.iter().any(|i| now >= i.expires_at)
}

/// How a lease or a hold is written. Times are milliseconds since the epoch.
#[derive(Debug, Serialize, Deserialize)]
struct StoredLease {
    owner: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principal: Option<String>,
    /// None for a lease or hold granted by the write that stored it: see [`PENDING`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<u64>,
    acquired_at: u64,
    expires_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hold_until: Option<u64>,
    /// Milliseconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    lock_delay: u64,
    /// A hold's claim: `"permit"`, `"read"` or `"write"`; absent for a lock's lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claim: Option<String>,
    /// A permit's semaphore limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    /// The metadata, a flat JSON object: absent when there is none, as in every state
    /// written before leases kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    meta: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredIntent {
    owner: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principal: Option<String>,
    expires_at: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease: Option<StoredLease>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    holds: Vec<StoredLease>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    intents: Vec<StoredIntent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    generation: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The data of a node of `generation` holding `state`: nothing at all for the state of a
/// name never used in a node of no generation, which is what a node is made with, so that
/// making one changes no state.
pub(super) fn encode(state: &State, generation: Option<u64>) -> Result<Vec<u8>, ZkError> {
    if *state == State::default() && generation.is_none() {
        return Ok(Vec::new());
    }
    let stored = Stored {
        lease: state.lease.as_ref().map(|l| stored_lease(l, None)),
        holds: state
            .holds
            .iter()
            .map(|h| stored_lease(&h.lease, Some(h.claim)))
            .collect(),
        intents: state
            .intents
            .iter()
            .map(|i| StoredIntent {
                owner: i.owner.as_str().to_owned(),
                principal: principal_of(&i.owner),
                expires_at: i.expires_at.as_millis(),
            })
            .collect(),
        generation,
    };
    serde_json::to_vec(&stored).map_err(|e| ZkError::Corrupt(format!("cannot encode a state: {e}")))
}

/// The state in the data of `key`'s node, last changed at `mzxid`, and the node's
/// generation.
pub(super) fn decode(key: &Key, data: &[u8], mzxid: u64) -> Result<(State, Option<u64>), ZkError> {
    if data.is_empty() {
        return Ok((State::default(), None));
    }
    let corrupt = |why: String| ZkError::Corrupt(format!("the node of {} {}: {why}", key.kind, key.name));
    let stored: Stored = serde_json::from_slice(data).map_err(|e| corrupt(e.to_string()))?;
    let lease = |s: StoredLease| -> Result<(Lease, Option<Claim>), ZkError> {
        let claim = match (s.claim.as_deref(), s.limit) {
            (None, _) => None,
            (Some("permit"), Some(limit)) => Some(Claim::Permit { limit }),
            (Some("read"), _) => Some(Claim::Read),
            (Some("write"), _) => Some(Claim::Write),
            (Some(odd), _) => return Err(corrupt(format!("claim {odd:?}"))),
        };
        let lease = Lease {
            resource: key.name.clone(),
            owner: owner(&s.owner, s.principal.as_deref()).map_err(corrupt)?,
            token: FencingToken(s.token.unwrap_or(mzxid)),
            acquired_at: Timestamp::from_millis(s.acquired_at),
            expires_at: Timestamp::from_millis(s.expires_at),
            hold_until: s.hold_until.map(Timestamp::from_millis),
            lock_delay: Duration::from_millis(s.lock_delay),
            meta: s
                .meta
                .map(|object| Meta::from_object(&object, usize::MAX))
                .transpose()
                .map_err(|e| corrupt(format!("meta {e}")))?,
        };
        Ok((lease, claim))
    };
    let mut state = State::default();
    if let Some(s) = stored.lease {
        state.lease = Some(lease(s)?.0);
    }
    for s in stored.holds {
        let (lease, claim) = lease(s)?;
        let claim = claim.ok_or_else(|| corrupt("a hold without a claim".into()))?;
        state.holds.push(Hold { lease, claim });
    }
    for s in stored.intents {
        state.intents.push(Intent {
            owner: owner(&s.owner, s.principal.as_deref()).map_err(corrupt)?,
            expires_at: Timestamp::from_millis(s.expires_at),
        });
    }
    if key.kind == Kind::Lock && !(state.holds.is_empty() && state.intents.is_empty()) {
        return Err(corrupt("a lock with holds".into()));
    }
    Ok((state, stored.generation))
}

fn stored_lease(lease: &Lease, claim: Option<Claim>) -> StoredLease {
    let (claim, limit) = match claim {
        None => (None, None),
        Some(Claim::Permit { limit }) => (Some("permit"), Some(limit)),
        Some(Claim::Read) => (Some("read"), None),
        Some(Claim::Write) => (Some("write"), None),
    };
    StoredLease {
        owner: lease.owner.as_str().to_owned(),
        principal: principal_of(&lease.owner),
        token: (lease.token.0 <= PENDING).then_some(lease.token.0),
        acquired_at: lease.acquired_at.as_millis(),
        expires_at: lease.expires_at.as_millis(),
        hold_until: lease.hold_until.map(Timestamp::as_millis),
        lock_delay: u64::try_from(lease.lock_delay.as_millis()).unwrap_or(u64::MAX),
        claim: claim.map(str::to_owned),
        limit,
        meta: lease.meta.as_ref().map(Meta::to_object),
    }
}

/// The last part of a name's node path: the hex of the name's bytes, so that sorted
/// children list in the names' byte order and no name can break a path. Also the owner's part
/// of the name of a holder's node.
pub(super) fn hex(name: &str) -> String {
    // From a table: every call makes its names' paths, and a `format!` per byte allocated.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    name.bytes()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0x0f)]])
        .map(char::from)
        .collect()
}

/// The name whose node is called `child`.
pub(super) fn unhex(child: &str) -> Option<Resource> {
    if !child.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..child.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(child.get(i..i + 2)?, 16).ok())
        .collect();
    Resource::new(String::from_utf8(bytes?).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencelock_core::{Owner, Principal};

    fn lock_read(mzxid: u64, lease: Option<Lease>) -> Read {
        let key = Key::lock(&Resource::new("l").unwrap());
        let state = State {
            lease,
            ..State::default()
        };
        let data = encode(&state, None).unwrap();
        Read::new(
            key,
            "/fencelock/locks/6c".into(),
            Some((data, Versioned { version: 3, mzxid })),
        )
        .unwrap()
    }

    #[test]
    fn a_grant_is_stored_without_a_token_and_read_back_with_its_writes_zxid() {
        let now = Timestamp::from_millis(1_000);
        let read = lock_read(100, None);
        let mut table = super::table(std::slice::from_ref(&read), now);
        let ttl = Ttl::from_millis(50, Ttl::DEFAULT_MAX).unwrap();
        let a = Owner::new("a").unwrap();
        let outcome = table
            .acquire(now, &read.key.name, &a, &fencelock_core::Terms::ttl(ttl))
            .unwrap();
        let lease = outcome.lease().unwrap().clone();
        assert!(lease.token.0 > PENDING, "the call's own, until its write commits");
        let granted = after(&read, &table);
        assert_eq!(granted.lease.as_ref(), Some(&lease));
        assert_eq!(
            holder_changes(&read.state, &granted),
            [("lease-61-".to_owned(), Holder::Began("a".into()))]
        );
        let data = encode(&granted, Some(7)).unwrap();
        assert!(!String::from_utf8_lossy(&data).contains("token"), "{data:?}");

        // Read after that write (zxid 130): the token is the write's zxid.
        let read = Read::new(
            read.key.clone(),
            read.path.clone(),
            Some((
                data,
                Versioned {
                    version: 4,
                    mzxid: 130,
                },
            )),
        )
        .unwrap();
        let settled = read.state.lease.clone().unwrap();
        assert_eq!(settled.token, FencingToken(130));

        // Released by a later write: the settled token was what it judged, the node goes.
        let mut table = super::table(std::slice::from_ref(&read), now);
        let released = table.release(now, &read.key.name, &a, Some(FencingToken(130)));
        assert!(
            matches!(released, fencelock_core::ReleaseOutcome::Released(_)),
            "{released:?}"
        );
        let after_release = after(&read, &table);
        assert!(is_empty(&after_release));
        assert_eq!(
            holder_changes(&read.state, &after_release),
            [("lease-61-".to_owned(), Holder::Ended)]
        );

        // A later write of a kept lease stores its token, settled.
        let kept = lock_read(150, Some(settled.clone()));
        assert_eq!(kept.state.lease, Some(settled));
        let intent = Intent {
            owner: a,
            expires_at: Timestamp::from_millis(1),
        };
        let waiting = State {
            intents: vec![intent],
            ..State::default()
        };
        assert!(!is_empty(&waiting), "anything left keeps the node");
    }

    #[test]
    fn names_round_trip_through_hex_in_byte_order() {
        let names = ["a", "a b", "a/b", "b", "z:1", "ü", "💥"]; // in byte order
        let mut hexed: Vec<String> = names.iter().map(|n| hex(n)).collect();
        let before = hexed.clone();
        hexed.sort();
        assert_eq!(hexed, before, "hex keeps byte order");
        assert_eq!(
            hex("a/b\u{ff}💥"),
            "612f62c3bff09f92a5",
            "two lowercase digits a byte"
        );
        for (name, h) in names.iter().zip(&hexed) {
            assert_eq!(unhex(h).unwrap().as_str(), *name);
        }
        assert_eq!(unhex("6"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex(""), None);
    }

    #[test]
    fn a_state_round_trips_and_an_unused_one_is_no_data() {
        let key = Key::hold(HoldKind::RwLock, &Resource::new("rw").unwrap());
        let owner = Owner::new("w").unwrap().of(Some(Principal::new("ops").unwrap()));
        let lease = Lease {
            resource: key.name.clone(),
            owner: owner.clone(),
            token: FencingToken(7),
            acquired_at: Timestamp::from_millis(5),
            expires_at: Timestamp::from_millis(9),
            hold_until: None,
            lock_delay: Duration::ZERO,
            meta: Some(Meta::parse(r#"{"job":"backup","pid":311}"#).unwrap()),
        };
        let state = State {
            lease: None,
            holds: vec![Hold {
                lease,
                claim: Claim::Write,
            }],
            intents: vec![Intent {
                owner,
                expires_at: Timestamp::from_millis(11),
            }],
        };
        let data = encode(&state, Some(7)).unwrap();
        assert_eq!(decode(&key, &data, 99).unwrap(), (state, Some(7)));
        assert!(encode(&State::default(), None).unwrap().is_empty());
        // A node's generation is kept when nothing else is.
        let empty = encode(&State::default(), Some(7)).unwrap();
        assert_eq!(decode(&key, &empty, 99).unwrap(), (State::default(), Some(7)));
        assert_eq!(decode(&key, b"", 99).unwrap(), (State::default(), None));
        assert!(matches!(decode(&key, b"{", 99), Err(ZkError::Corrupt(_))));
    }
}
