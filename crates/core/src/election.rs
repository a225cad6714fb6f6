//! Leader election, kept as a lock: election `NAME` is the lock [`Resource::election`] names,
//! its leader the lock's owner, its term the lease's fencing token. So every store keeps
//! elections with no change, with every guarantee it gives locks.
//!
//! What a lease does not say is kept in its [`Meta`], which the server alone writes for an
//! election: the leader's `value`, the TTL it last asked for (`ttl_ms`: a proclamation
//! renews the leadership for it) and, from its first renewal on, `since` (a lease's
//! `acquired_at` moves when it is extended, so it does not say when the leader won).

use serde_json::{Map, Value};

use crate::model::{FencingToken, Lease, Meta, Owner, Resource, Timestamp, Ttl};

/// The most bytes of UTF-8 a leader's value may have.
pub const MAX_VALUE_BYTES: usize = 1024;

/// The key of the leader's value in the lease's metadata.
const VALUE: &str = "value";
/// The key of the time the leader won (milliseconds since the epoch) in the lease's metadata.
const SINCE: &str = "since";
/// The key of the TTL the leader last asked for, in milliseconds.
const TTL_MS: &str = "ttl_ms";

/// Who leads an election, since when, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// The election's name (as the client named it, without the mark of its lock).
    pub name: Resource,
    /// The leader: the candidate that won (with the principal it authenticated as).
    pub leader: Owner,
    /// What the leader says, e.g. its address; `None`: nothing.
    pub value: Option<String>,
    /// The term: the lease's fencing token, greater than every term of the election before.
    pub term: FencingToken,
    /// When the leader won this term.
    pub since: Timestamp,
    /// When the leadership ends unless renewed.
    pub expires_at: Timestamp,
}

impl Leadership {
    /// The leadership a lease keeps, if the lease is an election's.
    pub fn of(lease: &Lease) -> Option<Self> {
        let name = Resource::named(lease.resource.election_name()?).ok()?;
        let meta = lease.meta.as_ref().map(Meta::to_object).unwrap_or_default();
        Some(Self {
            name,
            leader: lease.owner.clone(),
            value: meta.get(VALUE).and_then(Value::as_str).map(str::to_owned),
            term: lease.token,
            since: meta
                .get(SINCE)
                .and_then(Value::as_u64)
                .map_or(lease.acquired_at, Timestamp::from_millis),
            expires_at: lease.expires_at,
        })
    }

    /// The metadata of a lease that keeps this leadership with `value` instead of its own,
    /// for `ttl` at a time.
    pub fn meta_with(&self, value: Option<&str>, ttl: Ttl) -> Meta {
        meta(value, ttl, Some(self.since))
    }
}

/// The TTL the leader of an election's lease last asked for, if it says.
pub fn ttl_of(lease: &Lease) -> Option<Ttl> {
    let ms = lease.meta.as_ref()?.to_object().get(TTL_MS)?.as_u64()?;
    Ttl::from_millis(ms, Ttl::CEILING).ok()
}

/// The metadata of an election's lease: the leader's `value`, the TTL it asked for, and, if
/// known, `since`.
pub fn meta(value: Option<&str>, ttl: Ttl, since: Option<Timestamp>) -> Meta {
    let mut object = Map::new();
    object.insert(
        VALUE.to_owned(),
        value.map_or(Value::Null, |v| Value::String(v.to_owned())),
    );
    object.insert(TTL_MS.to_owned(), Value::from(ttl.as_millis()));
    if let Some(since) = since {
        object.insert(SINCE.to_owned(), Value::from(since.as_millis()));
    }
    // Cannot fail: the object is flat (strings, a number, null) and no size is asked of it
    // (the server builds it; a value is at most 1,024 bytes).
    Meta::from_object(&object, usize::MAX).expect("flat metadata without a size limit")
}

/// The leader's value that an election's lease metadata keeps (none: nothing said).
pub fn value_of(meta: Option<&Meta>) -> Option<String> {
    let object = meta?.to_object();
    object.get(VALUE).and_then(Value::as_str).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ttl;
    use crate::model::Terms;

    #[test]
    fn a_lease_of_an_election_reads_as_its_leadership() {
        let name = Resource::named("db").unwrap();
        let owner = Owner::new("a").unwrap();
        let ttl = Ttl::from_millis(1_000, Ttl::DEFAULT_MAX).unwrap();
        let at = Timestamp::from_millis(5_000);
        let terms = Terms::ttl(ttl).meta(Some(meta(Some("10.0.0.1"), ttl, None)));
        let lease = Lease::granted(
            &Resource::election(&name).unwrap(),
            &owner,
            FencingToken(7),
            at,
            &terms,
        );
        let won = Leadership::of(&lease).unwrap();
        assert_eq!(
            (won.name.as_str(), won.value.as_deref(), won.term, won.since),
            ("db", Some("10.0.0.1"), FencingToken(7), at)
        );
        // An extension moves `acquired_at`; the leadership keeps when it won.
        let later = Timestamp::from_millis(9_000);
        let extended = lease.prolonged(later, ttl, true, Some(&won.meta_with(None, ttl)));
        let again = Leadership::of(&extended).unwrap();
        assert_eq!(ttl_of(&extended), Some(ttl));
        assert_eq!(
            (again.since, again.value, again.expires_at),
            (at, None, later.plus(ttl))
        );
        let lock = Lease::granted(&name, &owner, FencingToken(1), at, &terms);
        assert_eq!(Leadership::of(&lock), None);
    }
}
