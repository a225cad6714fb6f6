//! How locks, holds and writers' intents are written in etcd: their keys and values, and
//! reading them back.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, TxnOp, TxnOpResponse, TxnResponse};
use fencelock_core::{
    Claim, FencingToken, Hold, HoldKind, Intent, Key, Lease, Meta, Owner, Resource, Terms, Timestamp,
};
use serde::{Deserialize, Serialize};

use super::error::EtcdError;
use crate::remote::{owner, principal_of};

type Result<T, E = EtcdError> = std::result::Result<T, E>;

/// What the value of a lock key holds; the token is the key's create revision.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Stored {
    owner: String,
    /// The owner's principal: absent when it has none, as in every value written before
    /// principals were kept (whose owners therefore have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principal: Option<String>,
    /// Milliseconds since the epoch.
    acquired_at: u64,
    /// Milliseconds since the epoch.
    expires_at: u64,
    /// The cap on holding, milliseconds since the epoch: absent when there is none, as in
    /// every value written before leases kept their terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hold_until: Option<u64>,
    /// The lock-delay in milliseconds: absent when there is none, as before.
    #[serde(default, skip_serializing_if = "is_zero")]
    lock_delay: u64,
    /// The lease's metadata: absent when it has none, as in every value written before
    /// leases kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    meta: Option<StoredMeta>,
}

/// Metadata as a value holds it: the flat JSON object itself, for people reading the key.
type StoredMeta = serde_json::Map<String, serde_json::Value>;

/// `meta` as a value holds it.
fn store_meta(meta: Option<&Meta>) -> Option<StoredMeta> {
    meta.map(Meta::to_object)
}

/// The metadata a value of `what` holds.
fn read_meta(what: &dyn std::fmt::Display, stored: Option<StoredMeta>) -> Result<Option<Meta>> {
    stored
        .map(|object| Meta::from_object(&object, usize::MAX))
        .transpose()
        .map_err(|e| EtcdError::Corrupt(format!("{what}: meta {e}")))
}

fn is_zero(ms: &u64) -> bool {
    *ms == 0
}

/// The terms a lease keeps for its whole life, whatever its renewals and extensions send:
/// its cap on holding and its lock-delay, set by the grant that issued its token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Kept {
    pub(super) hold_until: Option<Timestamp>,
    pub(super) lock_delay: Duration,
}

impl Kept {
    /// No cap and no lock-delay: what every hold keeps, and every lease written before
    /// leases kept their terms.
    pub(super) const NONE: Self = Self {
        hold_until: None,
        lock_delay: Duration::ZERO,
    };

    /// What a grant at `now` on `terms` keeps: the cap measured from `now`.
    pub(super) fn granted(now: Timestamp, terms: &Terms) -> Self {
        Self {
            hold_until: terms.max_hold.map(|cap| now.plus(cap)),
            lock_delay: terms.lock_delay,
        }
    }

    /// What `lease` keeps.
    pub(super) fn of(lease: &Lease) -> Self {
        Self {
            hold_until: lease.hold_until,
            lock_delay: lease.lock_delay,
        }
    }

    /// `expires_at`, or the cap if it comes first.
    pub(super) fn cut(self, expires_at: Timestamp) -> Timestamp {
        self.hold_until.map_or(expires_at, |cap| expires_at.min(cap))
    }
}

/// The value of a lock key: of `owner`, granted or extended at `acquired_at`, ending at
/// `expires_at`, keeping `kept`, with `meta`. A lease that keeps nothing and has no metadata
/// is written as before terms were kept, byte for byte.
pub(super) fn encode(
    owner: &Owner,
    acquired_at: Timestamp,
    expires_at: Timestamp,
    kept: Kept,
    meta: Option<&Meta>,
) -> Result<Vec<u8>> {
    serde_json::to_vec(&Stored {
        owner: owner.as_str().to_owned(),
        principal: principal_of(owner),
        acquired_at: acquired_at.as_millis(),
        expires_at: expires_at.as_millis(),
        hold_until: kept.hold_until.map(Timestamp::as_millis),
        lock_delay: u64::try_from(kept.lock_delay.as_millis()).unwrap_or(u64::MAX),
        meta: store_meta(meta),
    })
    .map_err(|e| EtcdError::Corrupt(format!("cannot encode a lock: {e}")))
}

/// The lease a lock key holds: its value, and its create revision as the token.
pub(super) fn lease(resource: Resource, kv: &KeyValue) -> Result<Lease> {
    let stored: Stored = serde_json::from_slice(kv.value())
        .map_err(|e| EtcdError::Corrupt(format!("lock {resource} holds no lease: {e}")))?;
    let owner = owner(&stored.owner, stored.principal.as_deref())
        .map_err(|e| EtcdError::Corrupt(format!("lock {resource}: {e}")))?;
    Ok(Lease {
        token: token(kv, &resource)?,
        meta: read_meta(&format_args!("lock {resource}"), stored.meta)?,
        resource,
        owner,
        acquired_at: Timestamp::from_millis(stored.acquired_at),
        expires_at: Timestamp::from_millis(stored.expires_at),
        hold_until: stored.hold_until.map(Timestamp::from_millis),
        lock_delay: Duration::from_millis(stored.lock_delay),
    })
}

pub(super) fn resource(prefix: &str, key: &[u8]) -> Result<Resource> {
    let name = key
        .strip_prefix(prefix.as_bytes())
        .and_then(|name| std::str::from_utf8(name).ok())
        .ok_or_else(|| EtcdError::Corrupt(format!("odd lock key {}", String::from_utf8_lossy(key))))?;
    Resource::new(name).map_err(|e| EtcdError::Corrupt(format!("lock key for {name:?}: {e}")))
}

/// What the value of a hold key holds; the owner's name and the claim's mode are in the
/// key, the token is the key's create revision.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct StoredHold {
    /// The owner's principal, as in [`Stored`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principal: Option<String>,
    /// Milliseconds since the epoch.
    acquired_at: u64,
    /// Milliseconds since the epoch.
    expires_at: u64,
    /// A permit's semaphore limit; absent for read-write locks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    /// The hold's metadata, as in [`Stored`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    meta: Option<StoredMeta>,
}

/// What the value of a writer's intent key holds; the writer's name is in the key.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct StoredIntent {
    /// The writer's principal, as in [`Stored`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principal: Option<String>,
    /// Milliseconds since the epoch.
    expires_at: u64,
}

/// The `expires_at` of any value this store writes (a lock, a hold, an intent), for the
/// watch to tell a shortening rewrite.
#[derive(Debug, Deserialize)]
struct Expiry {
    expires_at: u64,
}

/// The `expires_at` of the value of `kv`.
pub(super) fn expires_at(kv: &KeyValue) -> Result<Timestamp> {
    serde_json::from_slice::<Expiry>(kv.value())
        .map(|e| Timestamp::from_millis(e.expires_at))
        .map_err(|e| EtcdError::Corrupt(format!("value without expires_at: {e}")))
}

/// Ends a name inside a key. Names and owners have no control characters, and UTF-8 puts no
/// byte below 0x80 inside a character, so a zero byte cannot occur in them: the key splits
/// back into its parts, and `name` + 0 sorts before every longer name that starts with
/// `name` (whose next byte is at least 0x20), so keys sort in the order of the names' bytes.
const END: u8 = 0;

/// The first byte after [`END`]: `name` + this is past every key of `name`, and before
/// every key of a longer name.
const PAST_END: u8 = END + 1;

/// The folder of writers' intents, beside the folders of the two kinds.
const INTENTS: &str = "intent";

/// A range of keys, `[start, end)`.
#[derive(Debug, Clone)]
pub(super) struct Range {
    pub(super) start: Vec<u8>,
    pub(super) end: Vec<u8>,
}

impl Range {
    /// Every key that starts with `start`.
    fn under(start: Vec<u8>) -> Self {
        let end = prefix_end(&start);
        Self { start, end }
    }

    /// Reads every key of the range.
    pub(super) fn get(&self) -> TxnOp {
        TxnOp::get(
            self.start.clone(),
            Some(GetOptions::new().with_range(self.end.clone())),
        )
    }

    /// Holds if no key of the range was created or rewritten after `revision`. A deletion
    /// passes: the caller compares the keys it rewrites one by one.
    pub(super) fn unchanged_since(&self, revision: i64) -> Compare {
        Compare::mod_revision(self.start.clone(), CompareOp::Less, revision + 1).with_range(self.end.clone())
    }
}

/// Where semaphores, read-write locks and writers' intents are kept: under one prefix,
///
/// - a hold: `{prefix}{kind}/{name}` 0 `{owner}` 0 `{mode}`, kind `semaphore` or `rwlock`,
///   mode `permit`, `read` or `write`;
/// - a writer's intent: `{prefix}intent/{name}` 0 `{owner}`.
///
/// The mode is in the key so that an upgrade or a downgrade deletes one key and creates
/// another, whose create revision is the new token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HoldKeys {
    prefix: String,
}

impl HoldKeys {
    pub(super) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// The prefix of every key, for the watch.
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    fn folder(&self, folder: &str) -> Vec<u8> {
        [self.prefix.as_bytes(), folder.as_bytes(), b"/"].concat()
    }

    fn named(&self, folder: &str, name: &Resource) -> Vec<u8> {
        [&self.folder(folder)[..], name.as_str().as_bytes(), &[END]].concat()
    }

    /// The key of `owner`'s hold of `claim` on `name`.
    pub(super) fn hold(&self, name: &Resource, owner: &Owner, claim: Claim) -> Vec<u8> {
        let mut key = self.named(claim.kind().as_str(), name);
        key.extend_from_slice(owner.as_str().as_bytes());
        key.push(END);
        key.extend_from_slice(mode(claim).as_bytes());
        key
    }

    /// Every hold on `name`.
    pub(super) fn holds_of(&self, kind: HoldKind, name: &Resource) -> Range {
        Range::under(self.named(kind.as_str(), name))
    }

    /// `owner`'s holds on `name` (at most one).
    pub(super) fn owned(&self, kind: HoldKind, name: &Resource, owner: &Owner) -> Range {
        let mut start = self.named(kind.as_str(), name);
        start.extend_from_slice(owner.as_str().as_bytes());
        start.push(END);
        Range::under(start)
    }

    /// Every hold of `kind` on a name that starts with `prefix`, from the first name after
    /// `after` on.
    pub(super) fn names(&self, kind: HoldKind, prefix: &str, after: Option<&Resource>) -> Range {
        let folder = self.folder(kind.as_str());
        let all = Range::under([&folder[..], prefix.as_bytes()].concat());
        let start = match after {
            Some(after) if after.as_str() >= prefix => {
                [&folder[..], after.as_str().as_bytes(), &[PAST_END]].concat()
            }
            _ => all.start,
        };
        Range { start, end: all.end }
    }

    /// The key of `owner`'s intent to write `name`.
    pub(super) fn intent(&self, name: &Resource, owner: &Owner) -> Vec<u8> {
        [&self.named(INTENTS, name)[..], owner.as_str().as_bytes()].concat()
    }

    /// Every writer's intent on `name`.
    pub(super) fn intents_of(&self, name: &Resource) -> Range {
        Range::under(self.named(INTENTS, name))
    }

    /// The folder and the parts after it of a key: `(folder, [name, owner, mode…])`.
    fn split<'k>(&self, key: &'k [u8]) -> Result<(&'k str, Vec<&'k str>)> {
        let odd = || EtcdError::Corrupt(format!("odd key {}", String::from_utf8_lossy(key)));
        let rest = key
            .strip_prefix(self.prefix.as_bytes())
            .and_then(|rest| std::str::from_utf8(rest).ok())
            .ok_or_else(odd)?;
        let (folder, parts) = rest.split_once('/').ok_or_else(odd)?;
        Ok((folder, parts.split(char::from(END)).collect()))
    }

    /// Whether `key` is a writer's intent (not a hold).
    pub(super) fn is_intent(&self, key: &[u8]) -> bool {
        self.split(key).is_ok_and(|(folder, _)| folder == INTENTS)
    }

    /// The semaphore or read-write lock a key of a hold or an intent belongs to.
    pub(super) fn key_of(&self, key: &[u8]) -> Result<Key> {
        let (folder, parts) = self.split(key)?;
        let kind = match folder {
            INTENTS => HoldKind::RwLock,
            folder => kind(folder).ok_or_else(|| EtcdError::Corrupt(format!("odd folder {folder:?}")))?,
        };
        Ok(Key::hold(
            kind,
            &name(parts.first().copied().unwrap_or_default())?,
        ))
    }

    /// The hold a hold key holds: name, owner and mode from the key, times and limit from
    /// the value, its create revision as the token.
    pub(super) fn decode(&self, kv: &KeyValue) -> Result<Hold> {
        let odd = || EtcdError::Corrupt(format!("odd hold key {}", String::from_utf8_lossy(kv.key())));
        let (folder, parts) = self.split(kv.key())?;
        let (kind, &[name, owner, mode]) = (kind(folder), &parts[..]) else {
            return Err(odd());
        };
        let stored: StoredHold = serde_json::from_slice(kv.value())
            .map_err(|e| EtcdError::Corrupt(format!("hold on {name:?} holds no lease: {e}")))?;
        let claim = match (kind, mode, stored.limit) {
            (Some(HoldKind::Semaphore), "permit", Some(limit)) => Claim::Permit { limit },
            (Some(HoldKind::RwLock), "read", None) => Claim::Read,
            (Some(HoldKind::RwLock), "write", None) => Claim::Write,
            _ => return Err(odd()),
        };
        let name = self::name(name)?;
        let owner = self::owner(owner, stored.principal.as_deref())
            .map_err(|e| EtcdError::Corrupt(format!("hold on {name}: {e}")))?;
        Ok(Hold {
            lease: Lease {
                token: token(kv, &name)?,
                meta: read_meta(&format_args!("hold on {name}"), stored.meta)?,
                resource: name,
                owner,
                acquired_at: Timestamp::from_millis(stored.acquired_at),
                expires_at: Timestamp::from_millis(stored.expires_at),
                // Holds keep no terms.
                hold_until: None,
                lock_delay: Duration::ZERO,
            },
            claim,
        })
    }

    /// The intent an intent key holds.
    pub(super) fn decode_intent(&self, kv: &KeyValue) -> Result<Intent> {
        let (folder, parts) = self.split(kv.key())?;
        let (INTENTS, &[_, owner]) = (folder, &parts[..]) else {
            return Err(EtcdError::Corrupt(format!(
                "odd intent key {}",
                String::from_utf8_lossy(kv.key())
            )));
        };
        let stored: StoredIntent = serde_json::from_slice(kv.value())
            .map_err(|e| EtcdError::Corrupt(format!("intent of {owner:?} holds no expiry: {e}")))?;
        Ok(Intent {
            owner: self::owner(owner, stored.principal.as_deref())
                .map_err(|e| EtcdError::Corrupt(format!("intent: {e}")))?,
            expires_at: Timestamp::from_millis(stored.expires_at),
        })
    }
}

/// The value of `owner`'s hold key.
pub(super) fn encode_hold(
    owner: &Owner,
    claim: Claim,
    acquired_at: Timestamp,
    expires_at: Timestamp,
    meta: Option<&Meta>,
) -> Result<Vec<u8>> {
    serde_json::to_vec(&StoredHold {
        principal: principal_of(owner),
        acquired_at: acquired_at.as_millis(),
        expires_at: expires_at.as_millis(),
        limit: match claim {
            Claim::Permit { limit } => Some(limit),
            Claim::Read | Claim::Write => None,
        },
        meta: store_meta(meta),
    })
    .map_err(|e| EtcdError::Corrupt(format!("cannot encode a hold: {e}")))
}

/// The value of `owner`'s intent key.
pub(super) fn encode_intent(owner: &Owner, expires_at: Timestamp) -> Result<Vec<u8>> {
    serde_json::to_vec(&StoredIntent {
        principal: principal_of(owner),
        expires_at: expires_at.as_millis(),
    })
    .map_err(|e| EtcdError::Corrupt(format!("cannot encode an intent: {e}")))
}

fn mode(claim: Claim) -> &'static str {
    match claim {
        Claim::Permit { .. } => "permit",
        Claim::Read => "read",
        Claim::Write => "write",
    }
}

fn kind(folder: &str) -> Option<HoldKind> {
    [HoldKind::Semaphore, HoldKind::RwLock]
        .into_iter()
        .find(|kind| kind.as_str() == folder)
}

fn name(name: &str) -> Result<Resource> {
    Resource::new(name).map_err(|e| EtcdError::Corrupt(format!("key of name {name:?}: {e}")))
}

/// The token of a key: its create revision.
fn token(kv: &KeyValue, name: &Resource) -> Result<FencingToken> {
    u64::try_from(kv.create_revision())
        .ok()
        .filter(|t| *t > 0)
        .map(FencingToken)
        .ok_or_else(|| EtcdError::Corrupt(format!("{name} has revision {}", kv.create_revision())))
}

/// Every key read by the `get`s of a transaction's answer, one list per `get`, in order.
pub(super) fn gets(answer: &TxnResponse) -> Vec<Vec<KeyValue>> {
    answer
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(mut get) => Some(get.take_kvs()),
            _ => None,
        })
        .collect()
}

/// The end of the key range of every key that starts with `prefix` (etcd's usual rule:
/// drop trailing 0xff bytes, add one to the last byte; nothing left means "to the end").
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use fencelock_core::{Principal, Ttl};

    use super::*;

    const AT: Timestamp = Timestamp::from_millis(1_000);
    const ENDS: Timestamp = Timestamp::from_millis(2_000);

    fn billing() -> Owner {
        Owner::new("worker-7")
            .unwrap()
            .of(Some(Principal::new("billing").unwrap()))
    }

    /// Values as versions before principals wrote them: each decodes as of no principal.
    #[test]
    fn values_written_before_principals_are_of_no_principal() {
        let lock: Stored =
            serde_json::from_str(r#"{"owner":"worker-7","acquired_at":1000,"expires_at":2000}"#).unwrap();
        assert_eq!(
            owner(&lock.owner, lock.principal.as_deref()),
            Ok(Owner::new("worker-7").unwrap())
        );
        let hold: StoredHold =
            serde_json::from_str(r#"{"acquired_at":1000,"expires_at":2000,"limit":3}"#).unwrap();
        assert_eq!(hold.principal, None);
        let intent: StoredIntent = serde_json::from_str(r#"{"expires_at":2000}"#).unwrap();
        assert_eq!(intent.principal, None);
    }

    /// An owner of no principal is written as before, byte for byte, so that a server of an
    /// older version sharing the cluster reads it as it always did.
    #[test]
    fn a_principal_is_written_only_when_there_is_one() {
        let none = Owner::new("worker-7").unwrap();
        let text = |value: Result<Vec<u8>>| String::from_utf8(value.unwrap()).unwrap();
        assert_eq!(
            text(encode(&none, AT, ENDS, Kept::NONE, None)),
            r#"{"owner":"worker-7","acquired_at":1000,"expires_at":2000}"#
        );
        assert_eq!(
            text(encode_hold(&none, Claim::Read, AT, ENDS, None)),
            r#"{"acquired_at":1000,"expires_at":2000}"#
        );
        assert_eq!(text(encode_intent(&none, ENDS)), r#"{"expires_at":2000}"#);

        let lock: Stored =
            serde_json::from_slice(&encode(&billing(), AT, ENDS, Kept::NONE, None).unwrap()).unwrap();
        assert_eq!(owner(&lock.owner, lock.principal.as_deref()), Ok(billing()));
        let permit = Claim::Permit { limit: 2 };
        let hold: StoredHold =
            serde_json::from_slice(&encode_hold(&billing(), permit, AT, ENDS, None).unwrap()).unwrap();
        assert_eq!(hold.principal.as_deref(), Some("billing"));
        let intent: StoredIntent = serde_json::from_slice(&encode_intent(&billing(), ENDS).unwrap()).unwrap();
        assert_eq!(intent.principal.as_deref(), Some("billing"));
    }

    /// A lock value as versions before terms wrote it: no cap, no lock-delay.
    #[test]
    fn lock_values_written_before_terms_keep_none() {
        let lock: Stored = serde_json::from_str(
            r#"{"owner":"worker-7","principal":"billing","acquired_at":1000,"expires_at":2000}"#,
        )
        .unwrap();
        assert_eq!((lock.hold_until, lock.lock_delay), (None, 0));
    }

    /// Terms are written only when there are some, each on its own; what is written is read
    /// back as it was.
    #[test]
    fn terms_are_written_when_there_are_some_and_read_back() {
        let text = |kept| String::from_utf8(encode(&billing(), AT, ENDS, kept, None).unwrap()).unwrap();
        let capped = Kept {
            hold_until: Some(Timestamp::from_millis(1_500)),
            ..Kept::NONE
        };
        assert_eq!(
            text(capped),
            r#"{"owner":"worker-7","principal":"billing","acquired_at":1000,"expires_at":2000,"hold_until":1500}"#
        );
        let delayed = Kept {
            lock_delay: Duration::from_millis(250),
            ..Kept::NONE
        };
        assert_eq!(
            text(delayed),
            r#"{"owner":"worker-7","principal":"billing","acquired_at":1000,"expires_at":2000,"lock_delay":250}"#
        );
        let both = Kept {
            hold_until: Some(Timestamp::from_millis(1_500)),
            lock_delay: Duration::from_millis(250),
        };
        let read: Stored = serde_json::from_str(&text(both)).unwrap();
        assert_eq!((read.hold_until, read.lock_delay), (Some(1_500), 250));
    }

    #[test]
    fn a_grant_keeps_its_cap_from_its_own_time_and_cuts_at_it() {
        let terms = Terms::ttl(Ttl::from_const_millis(10_000))
            .max_hold(Some(Ttl::from_const_millis(500)))
            .lock_delay(Duration::from_millis(30));
        let kept = Kept::granted(AT, &terms);
        assert_eq!(kept.hold_until, Some(Timestamp::from_millis(1_500)));
        assert_eq!(kept.lock_delay, Duration::from_millis(30));
        assert_eq!(kept.cut(ENDS), Timestamp::from_millis(1_500));
        assert_eq!(
            kept.cut(Timestamp::from_millis(1_200)),
            Timestamp::from_millis(1_200)
        );
        assert_eq!(Kept::NONE.cut(ENDS), ENDS);
    }

    #[test]
    fn a_stored_principal_that_is_no_principal_is_refused() {
        let refused = owner("worker-7", Some("")).unwrap_err();
        assert!(refused.contains("principal"), "{refused}");
    }
}
