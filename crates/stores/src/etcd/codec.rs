//! How a lock is written in etcd: the value of its key, and reading it back.

use etcd_client::{KeyValue, TxnOpResponse, TxnResponse};
use fencelock_core::{FencingToken, Lease, Owner, Resource, Timestamp};
use serde::{Deserialize, Serialize};

use super::error::EtcdError;

type Result<T, E = EtcdError> = std::result::Result<T, E>;

/// What the value of a lock key holds; the token is the key's create revision.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Stored {
    pub(super) owner: String,
    /// Milliseconds since the epoch.
    pub(super) acquired_at: u64,
    /// Milliseconds since the epoch.
    pub(super) expires_at: u64,
}

pub(super) fn encode(owner: &Owner, acquired_at: Timestamp, expires_at: Timestamp) -> Result<Vec<u8>> {
    serde_json::to_vec(&Stored {
        owner: owner.as_str().to_owned(),
        acquired_at: acquired_at.as_millis(),
        expires_at: expires_at.as_millis(),
    })
    .map_err(|e| EtcdError::Corrupt(format!("cannot encode a lock: {e}")))
}

/// The lease a lock key holds: its value, and its create revision as the token.
pub(super) fn lease(resource: Resource, kv: &KeyValue) -> Result<Lease> {
    let stored: Stored = serde_json::from_slice(kv.value())
        .map_err(|e| EtcdError::Corrupt(format!("lock {resource} holds no lease: {e}")))?;
    let owner = Owner::new(&stored.owner)
        .map_err(|e| EtcdError::Corrupt(format!("lock {resource} has owner {:?}: {e}", stored.owner)))?;
    let token = u64::try_from(kv.create_revision())
        .ok()
        .filter(|t| *t > 0)
        .ok_or_else(|| {
            EtcdError::Corrupt(format!("lock {resource} has revision {}", kv.create_revision()))
        })?;
    Ok(Lease {
        resource,
        owner,
        token: FencingToken(token),
        acquired_at: Timestamp::from_millis(stored.acquired_at),
        expires_at: Timestamp::from_millis(stored.expires_at),
    })
}

pub(super) fn resource(prefix: &str, key: &[u8]) -> Result<Resource> {
    let name = key
        .strip_prefix(prefix.as_bytes())
        .and_then(|name| std::str::from_utf8(name).ok())
        .ok_or_else(|| EtcdError::Corrupt(format!("odd lock key {}", String::from_utf8_lossy(key))))?;
    Resource::new(name).map_err(|e| EtcdError::Corrupt(format!("lock key for {name:?}: {e}")))
}

/// The key read by the last `get` of a transaction's answer.
pub(super) fn last_get(answer: &TxnResponse) -> Option<KeyValue> {
    answer.op_responses().into_iter().rev().find_map(|op| match op {
        TxnOpResponse::Get(mut get) => get.take_kvs().into_iter().next(),
        _ => None,
    })
}
