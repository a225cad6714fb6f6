//! [`EtcdStore`] (`etcd://host:port[,host:port…]`): leases as etcd keys bound to etcd
//! leases, shared by any number of fencelock servers.
//!
//! # Guarantees
//!
//! | question | answer |
//! | --- | --- |
//! | whose clock decides expiry | etcd's: a lock is one key attached to an etcd lease, and the key exists exactly as long as etcd keeps that lease alive; the leader's clock counts the lease down, and the servers' clocks decide nothing |
//! | TTL | whole seconds: `ttl_ms` is rounded **up** to whole seconds, and etcd may raise a short TTL further to its minimum (about 1.5 × the election timeout); a lease never lasts less than asked. `expires_at` is the granting server's time before it asked for the lease plus the TTL etcd granted, so etcd frees the lock at that time or a little later: it looks for expired leases about every half second (about 0.5 s late in our tests), and until it deletes the key, `get` and `list` still show the lease, with an `expires_at` just past |
//! | durable | yes: a grant, extension, renewal or release is answered only after a quorum of members has committed it (Raft) |
//! | what a failover can lose | nothing answered: a new leader has every committed write. A new leader does extend the remaining time of every lease (it restarts their countdown), so locks can outlive their `expires_at` by up to a TTL after a leader change — later, never sooner |
//! | fit for | correctness, with fencing tokens: tokens are etcd revisions, which the cluster never reuses (a restore from a snapshot keeps them; only a new, empty cluster starts again at 1, so never move the locks of resources that remember tokens to one) |
//!
//! # How the rules are kept
//!
//! - A lock on resource `r` is the key `/fencelock/locks/` + `r` (so listing in key order is
//!   listing in the order of the names' bytes). Its value is JSON with the owner,
//!   `acquired_at` and `expires_at` (milliseconds since the epoch); the key is attached to an
//!   etcd lease granted with the TTL.
//! - The **fencing token is the key's create revision**. etcd's revision counts every change
//!   in the whole cluster and never goes back, so a key created after another (after a
//!   release or an expiry) always has a greater create revision; rewriting the key (an
//!   extension or a renewal) keeps it.
//! - Acquire grants an etcd lease, then runs a transaction that creates the key only if it
//!   is absent (`create_revision == 0`). If the key exists and belongs to the caller, a second
//!   transaction rewrites it with the new lease only if it is unchanged since it was read
//!   (`mod_revision`), which extends it; if it changed, acquire starts over. A lease known
//!   to be unused is revoked; after an error it is left to run out instead, since a lost
//!   answer may hide that the key was put on it.
//! - Release and renew read the key (a linearizable read), judge the caller on what they
//!   read (absent, other owner, other token), and then delete or rewrite the key in a
//!   transaction that only succeeds if the key is still that same version (`mod_revision`)
//!   with that token (`create_revision`); otherwise they start over.
//! - Renew grants a **new** etcd lease with the new TTL and moves the key onto it (then
//!   revokes the old lease): an etcd keep-alive could only restart the old lease's original
//!   TTL, while a renew may ask for a shorter one.
//! - All reads are linearizable (etcd's default), never served from a member's possibly
//!   stale copy.
//! - [`LockStore::releases`] is fed by a watch on the key prefix: every deletion, by a
//!   release or by the expiry of a lease, and every rewrite that moves a lease's expiry
//!   earlier (a shortening renewal or extension), wakes waiters, on every server. When the watch is
//!   lost it resumes from the last revision it saw, so no deletion is missed unless etcd
//!   compacted that history meanwhile.
//! - [`LockStore::purge_expired`] returns nothing: etcd deletes expired keys by itself.
//!
//! # Failure
//!
//! Requests carry etcd's "require leader" flag, so a member cut off from the quorum refuses
//! them at once instead of holding them; every request also has a timeout, and every call an
//! overall deadline. Without a quorum, calls return [`StoreError::Unavailable`] and nothing
//! is granted; while a new leader is elected (about a second after the leader is lost) they
//! do too, and the caller may retry. A request that a member refused at connection time (a
//! member that is down) reached nothing, so it is sent again to another member.
//!
//! Tested with etcd 3.4.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchOptions,
};
use fencelock_core::store::Result;
use fencelock_core::{
    AcquireOutcome, Capabilities, EndedLease, FencingToken, Lease, LeasePage, ListQuery, LockStore, Owner,
    Refusal, ReleaseFeed, ReleaseNotice, ReleaseOutcome, RenewOutcome, Resource, StoreError, Timestamp, Ttl,
};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::remote::{AbortOnDrop, keep_subscribed, within};

/// The store's name in error messages.
const STORE: &str = "etcd";

/// How often a call reads and writes again when the key changed between the two, before it
/// gives up. Each retry means another caller changed the key meanwhile, so this is only hit
/// under extreme contention on one resource.
const MAX_ATTEMPTS: usize = 32;

/// How long a caller told "held" is asked to wait when the holder's `expires_at` has passed
/// but etcd has not yet deleted the key (it finds expired leases about every half second).
/// The deletion itself also wakes waiters, through the watch.
const EXPIRY_RECHECK: Duration = Duration::from_millis(250);

/// How an [`EtcdStore`] connects, where it keeps its keys, and how long it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdOptions {
    /// The most one etcd request may take.
    pub request_timeout: Duration,
    /// How long to wait for a connection to a member.
    pub connect_timeout: Duration,
    /// The prefix of every lock key; the resource name follows it.
    pub prefix: String,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            prefix: "/fencelock/locks/".into(),
        }
    }
}

impl EtcdOptions {
    /// The most one call (a few requests) may take, whatever happens on the network.
    fn call_deadline(&self) -> Duration {
        self.request_timeout * 3 + self.connect_timeout
    }
}

/// A [`LockStore`] in an etcd cluster; see the module docs for its guarantees.
pub struct EtcdStore {
    client: Client,
    endpoints: Vec<String>,
    options: EtcdOptions,
    released: ReleaseFeed,
    // Stops watching when the store is dropped.
    _watcher: AbortOnDrop,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.endpoints)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// What the value of a lock key holds; the token is the key's create revision.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    owner: String,
    /// Milliseconds since the epoch.
    acquired_at: u64,
    /// Milliseconds since the epoch.
    expires_at: u64,
}

impl EtcdStore {
    /// Connects to the members in `url` (`etcd://host:port[,host:port…]`) with default
    /// options, checks that the cluster answers, and starts watching for releases. Must be
    /// called within a Tokio runtime.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, EtcdOptions::default()).await
    }

    /// As [`EtcdStore::connect`], with `options`.
    pub async fn connect_with(url: &str, options: EtcdOptions) -> Result<Self> {
        let endpoints = endpoints(url)?;
        let connect = ConnectOptions::new()
            .with_timeout(options.request_timeout)
            .with_connect_timeout(options.connect_timeout)
            .with_keep_alive(Duration::from_secs(5), options.request_timeout)
            // A member cut off from the quorum refuses at once rather than holding requests.
            .with_require_leader(true);
        let deadline = options.call_deadline();
        let client = within(deadline, STORE, "connect", async {
            Client::connect(&endpoints, Some(connect))
                .await
                .map_err(|e| unavailable("connect", e))
        })
        .await?;
        let released = ReleaseFeed::new();
        let open = {
            let (client, prefix, feed) = (client.clone(), options.prefix.clone(), released.clone());
            // Where a new watch resumes, so that no deletion between two watches is missed.
            let resume = Arc::new(AtomicI64::new(0));
            move || {
                watch(
                    client.clone(),
                    prefix.clone(),
                    deadline,
                    feed.clone(),
                    resume.clone(),
                )
            }
        };
        // Only answer once the watch is in place, so that no release after this is missed;
        // making the watch also proves that the cluster answers.
        let first = open().await?;
        Ok(Self {
            client,
            endpoints,
            options,
            _watcher: keep_subscribed(STORE, first, open, released.clone()),
            released,
        })
    }

    fn key(&self, resource: &Resource) -> Vec<u8> {
        [self.options.prefix.as_bytes(), resource.as_str().as_bytes()].concat()
    }

    /// Runs `call` within the call deadline.
    async fn call<T>(&self, doing: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
        within(self.options.call_deadline(), STORE, doing, call).await
    }

    /// The key of `resource` as it is now (a linearizable read).
    async fn read(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let kv = self.client.kv_client();
        let mut answer = request("read a lock", || {
            let mut kv = kv.clone();
            async move { kv.get(key, None).await }
        })
        .await?;
        Ok(answer.take_kvs().into_iter().next())
    }

    /// Grants an etcd lease of at least `ttl`, rounded up to whole seconds. Returns its id
    /// and the lease's `(acquired_at, expires_at)`: the time before asking, and that time
    /// plus the TTL etcd granted (which may be more than asked, never less). etcd starts
    /// counting after that time, so it frees the lock no earlier than `expires_at`.
    async fn grant(&self, ttl: Ttl) -> Result<(i64, Timestamp, Timestamp)> {
        let seconds = i64::try_from(ttl.as_millis().div_ceil(1000))
            .map_err(|_| StoreError::Invalid(format!("TTL {ttl:?} is too long")))?;
        let asked_at = Timestamp::now_wall();
        let leases = self.client.lease_client();
        let granted = request("grant a lease", || {
            let mut leases = leases.clone();
            async move { leases.grant(seconds, None).await }
        })
        .await?;
        if !granted.error().is_empty() {
            return Err(StoreError::Unavailable {
                message: format!("etcd: grant a lease: {}", granted.error()),
                source: None,
            });
        }
        let lasts = u64::try_from(granted.ttl().max(seconds)).unwrap_or(0) * 1000;
        let expires_at = Timestamp::from_millis(asked_at.as_millis().saturating_add(lasts));
        Ok((granted.id(), asked_at, expires_at))
    }

    /// Revokes an etcd lease nothing uses any more, in the background: if that fails, the
    /// lease just runs out by itself, holding nothing.
    fn revoke(&self, lease: i64) {
        if lease == 0 {
            return;
        }
        let mut leases = self.client.lease_client();
        let deadline = self.options.request_timeout;
        tokio::spawn(async move {
            if let Ok(Err(e)) = tokio::time::timeout(deadline, leases.revoke(lease)).await {
                tracing::debug!(lease, error = %e, "revoking an unused etcd lease failed");
            }
        });
    }

    async fn txn(&self, doing: &'static str, txn: Txn) -> Result<TxnResponse> {
        let kv = self.client.kv_client();
        request(doing, || {
            let (mut kv, txn) = (kv.clone(), txn.clone());
            async move { kv.txn(txn).await }
        })
        .await
    }

    async fn try_acquire(&self, resource: &Resource, owner: &Owner, ttl: Ttl) -> Result<AcquireOutcome> {
        let key = self.key(resource);
        let (lease_id, acquired_at, expires_at) = self.grant(ttl).await?;
        let value = encode(owner, acquired_at, expires_at)?;
        let put = || {
            TxnOp::put(
                key.clone(),
                value.clone(),
                Some(PutOptions::new().with_lease(lease_id)),
            )
        };
        let result = self.acquire_with(resource, owner, &key, lease_id, put).await;
        // Held: the new lease holds nothing. Not on an error, though: a transaction whose
        // answer was lost may have put the key on the new lease, and revoking it would then
        // delete a lock the caller may still count on (its old lease, if this extended it).
        // An unused lease just runs out.
        if let Ok(AcquireOutcome::Held { .. }) = &result {
            self.revoke(lease_id);
        }
        result
    }

    async fn acquire_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        key: &[u8],
        lease_id: i64,
        put: impl Fn() -> TxnOp,
    ) -> Result<AcquireOutcome> {
        for _ in 0..MAX_ATTEMPTS {
            let create = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                .and_then([put(), TxnOp::get(key, None)])
                .or_else([TxnOp::get(key, None)]);
            let answer = self.txn("acquire", create).await?;
            let current = last_get(&answer);
            if answer.succeeded() {
                let kv =
                    current.ok_or_else(|| StoreError::Corrupt("a created lock key is missing".into()))?;
                return Ok(AcquireOutcome::Granted {
                    lease: lease_from(resource.clone(), &kv)?,
                    // etcd deletes an expired lease's key: there is never one to replace.
                    expired: None,
                });
            }
            // The failed compare means the key exists, and the get ran in the same
            // transaction: a missing key is an odd answer, and worth asking again.
            let Some(kv) = current else { continue };
            let holder = lease_from(resource.clone(), &kv)?;
            if holder.owner != *owner {
                let expires_in = holder.expires_at.since(Timestamp::now_wall());
                return Ok(AcquireOutcome::Held {
                    holder,
                    expires_in: if expires_in.is_zero() {
                        EXPIRY_RECHECK
                    } else {
                        expires_in
                    },
                });
            }
            // The caller holds it: move the key onto the new lease, if it is still the
            // version just read.
            let old_lease = kv.lease();
            let extend = Txn::new()
                .when([Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision())])
                .and_then([put(), TxnOp::get(key, None)]);
            let answer = self.txn("extend", extend).await?;
            if answer.succeeded() {
                let kv = last_get(&answer)
                    .ok_or_else(|| StoreError::Corrupt("an extended lock key is missing".into()))?;
                // The old lease may be this very one, when a retry after a lost answer
                // extends the lock this call granted: never revoke the lease the key is on.
                if old_lease != lease_id {
                    self.revoke(old_lease);
                }
                return Ok(AcquireOutcome::Extended(lease_from(resource.clone(), &kv)?));
            }
        }
        Err(contended("acquire"))
    }

    /// Reads the key, judges the caller on it (rules 5 and 8: absent, then owner, then
    /// token), and gives the key and the lease it holds if the caller may change it.
    async fn judge(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<Result<(KeyValue, Lease), Refusal>> {
        let Some(kv) = self.read(&self.key(resource)).await? else {
            return Ok(Err(Refusal::NotFound));
        };
        // The key exists exactly as long as etcd keeps its lease alive: it is live.
        let lease = lease_from(resource.clone(), &kv)?;
        Ok(match Refusal::check(Some(&lease), owner, token) {
            Ok(_) => Ok((kv, lease)),
            Err(refusal) => Err(refusal),
        })
    }

    /// A transaction that succeeds only if the key is still the version `kv` (same value,
    /// so same owner) of the lease with `kv`'s token.
    fn unchanged(key: &[u8], kv: &KeyValue) -> Txn {
        Txn::new().when([
            Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision()),
            Compare::create_revision(key, CompareOp::Equal, kv.create_revision()),
        ])
    }

    async fn try_release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let key = self.key(resource);
        for _ in 0..MAX_ATTEMPTS {
            let (kv, lease) = match self.judge(resource, owner, token).await? {
                Ok(allowed) => allowed,
                Err(refusal) => return Ok(refusal.into()),
            };
            let delete = Self::unchanged(&key, &kv).and_then([TxnOp::delete(key.clone(), None)]);
            if self.txn("release", delete).await?.succeeded() {
                // The key is gone; its lease holds nothing now.
                self.revoke(kv.lease());
                // etcd has no clock to read: the lease's times are this server's, and so is
                // the time it ended.
                let ended_at = Timestamp::now_wall();
                return Ok(ReleaseOutcome::Released(Some(EndedLease { lease, ended_at })));
            }
        }
        Err(contended("release"))
    }

    async fn try_renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome> {
        let key = self.key(resource);
        for _ in 0..MAX_ATTEMPTS {
            let (kv, lease) = match self.judge(resource, owner, token).await? {
                Ok(allowed) => allowed,
                Err(refusal) => return Ok(refusal.into()),
            };
            // A new etcd lease with the new TTL: a keep-alive could only restart the old
            // lease's original TTL, and a renew may ask for a shorter one.
            let (lease_id, _, expires_at) = self.grant(ttl).await?;
            let value = encode(owner, lease.acquired_at, expires_at)?;
            let put = TxnOp::put(key.clone(), value, Some(PutOptions::new().with_lease(lease_id)));
            // On an error, the new lease is left to run out rather than revoked: the lost
            // answer may have moved the key onto it, and revoking would delete the lock.
            let renewed = self
                .txn("renew", Self::unchanged(&key, &kv).and_then([put]))
                .await?
                .succeeded();
            if renewed {
                self.revoke(kv.lease());
                return Ok(RenewOutcome::Renewed(Lease { expires_at, ..lease }));
            }
            self.revoke(lease_id);
        }
        Err(contended("renew"))
    }

    async fn try_list(&self, query: &ListQuery) -> Result<LeasePage> {
        let limit = query.limit.max(1);
        let prefix = [self.options.prefix.as_bytes(), query.prefix.as_bytes()].concat();
        let start = match &query.after {
            // Just after the cursor's key: the key with a zero byte appended.
            Some(after) if after.as_str() >= query.prefix.as_str() => [&self.key(after)[..], &[0]].concat(),
            _ => prefix.clone(),
        };
        // One more than asked, to know whether another page follows. Keys come back in
        // ascending byte order, which is the order of the names' bytes.
        let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let options = GetOptions::new()
            .with_range(prefix_end(&prefix))
            .with_limit(fetch);
        let kv = self.client.kv_client();
        let mut answer = request("list locks", || {
            let (mut kv, start, options) = (kv.clone(), start.clone(), options.clone());
            async move { kv.get(start, Some(options)).await }
        })
        .await?;
        let mut leases = answer
            .take_kvs()
            .iter()
            .map(|kv| lease_from(self.resource_of(kv)?, kv))
            .collect::<Result<Vec<_>>>()?;
        let next = if leases.len() > limit {
            leases.truncate(limit);
            leases.last().map(|l| l.resource.clone())
        } else {
            None
        };
        Ok(LeasePage { leases, next })
    }

    fn resource_of(&self, kv: &KeyValue) -> Result<Resource> {
        resource_of(&self.options.prefix, kv.key())
    }
}

#[async_trait]
impl LockStore for EtcdStore {
    async fn acquire(&self, resource: &Resource, owner: &Owner, ttl: Ttl) -> Result<AcquireOutcome> {
        self.call("acquire", self.try_acquire(resource, owner, ttl)).await
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        self.call("get", async {
            self.read(&self.key(resource))
                .await?
                .map(|kv| lease_from(resource.clone(), &kv))
                .transpose()
        })
        .await
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        self.call("release", self.try_release(resource, owner, token))
            .await
    }

    async fn renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome> {
        self.call("renew", self.try_renew(resource, owner, ttl, token))
            .await
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        self.call("list", self.try_list(query)).await
    }

    /// etcd deletes the key of an expired lease by itself: there is never anything left to
    /// purge, so this returns no leases (and makes no request).
    async fn purge_expired(&self) -> Result<Vec<Lease>> {
        Ok(Vec::new())
    }

    async fn ping(&self) -> Result<()> {
        // A linearizable read needs the leader and a quorum, which is what serving needs.
        // The bare prefix is never a lock key (names are not empty).
        let key = self.options.prefix.clone().into_bytes();
        self.call("ping", async { self.read(&key).await.map(drop) }).await
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        Some(self.released.subscribe())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ttl_granularity: Duration::from_secs(1),
            durable: true,
            knows_released_lease: true,
            shared: true,
        }
    }
}

/// The member addresses of `etcd://host:port[,host:port…]`, as `http://host:port`.
fn endpoints(url: &str) -> Result<Vec<String>> {
    let invalid = |why: &str| StoreError::Invalid(format!("{url:?} is not an etcd address: {why}"));
    let (scheme, members) = url
        .split_once("://")
        .ok_or_else(|| invalid("expected etcd://host:port[,host:port...]"))?;
    if !scheme.eq_ignore_ascii_case("etcd") {
        return Err(invalid("the scheme must be etcd://"));
    }
    members
        .split(',')
        .map(|member| {
            let (host, port) = member
                .rsplit_once(':')
                .ok_or_else(|| invalid(&format!("member {member:?} has no port")))?;
            if host.is_empty() || host.contains('/') {
                return Err(invalid(&format!("member {member:?} has no host")));
            }
            port.parse::<u16>()
                .map_err(|_| invalid(&format!("member {member:?} has no valid port")))?;
            Ok(format!("http://{member}"))
        })
        .collect()
}

/// The end of the key range of every key that starts with `prefix` (etcd's usual rule:
/// drop trailing 0xff bytes, add one to the last byte; nothing left means "to the end").
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Makes a watch on the changes under `prefix`, from revision `resume` on (from now, if it is
/// 0). Returns the session: a future that passes to `feed` each resource whose key was
/// deleted or rewritten with an earlier expiry, and keeps `resume` just past the last
/// revision seen, until the watch is lost.
async fn watch(
    client: Client,
    prefix: String,
    deadline: Duration,
    feed: ReleaseFeed,
    resume: Arc<AtomicI64>,
) -> Result<impl Future<Output = ()> + Send + 'static> {
    const DOING: &str = "watch for releases";
    let mut options = WatchOptions::new().with_prefix().with_prev_key();
    let from = resume.load(Ordering::Acquire);
    if from > 0 {
        options = options.with_start_revision(from);
    }
    let (mut stream, created) = within(deadline, STORE, DOING, async {
        let mut stream = client
            .watch_client()
            .watch(prefix.as_str(), Some(options))
            .await
            .map_err(|e| unavailable(DOING, e))?;
        let created = stream
            .message()
            .await
            .map_err(|e| unavailable(DOING, e))?
            .ok_or_else(|| StoreError::Unavailable {
                message: format!("{STORE}: {DOING}: the watch ended at once"),
                source: None,
            })?;
        Ok((stream, created))
    })
    .await?;
    if created.canceled() {
        // The history to resume from was compacted: start again from now. Waiters of what
        // was missed fall back on the expiry of the lease they wait for.
        resume.store(0, Ordering::Release);
        return Err(StoreError::Unavailable {
            message: format!("{STORE}: {DOING}: cancelled: {}", created.cancel_reason()),
            source: None,
        });
    }
    if from == 0
        && let Some(header) = created.header()
    {
        resume.store(header.revision() + 1, Ordering::Release);
    }
    Ok(async move {
        loop {
            let answer = match stream.message().await {
                Ok(Some(answer)) => answer,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "the etcd watch was lost; watching anew");
                    return;
                }
            };
            if answer.canceled() {
                tracing::warn!(reason = answer.cancel_reason(), "the etcd watch was cancelled");
                return;
            }
            for event in answer.events() {
                let Some(kv) = event.kv() else { continue };
                resume.store(kv.mod_revision() + 1, Ordering::Release);
                let freed = match event.event_type() {
                    EventType::Delete => true,
                    EventType::Put => event.prev_kv().is_some_and(|before| shortened(before, kv)),
                };
                if !freed {
                    continue;
                }
                match resource_of(&prefix, kv.key()) {
                    Ok(resource) => feed.announce(&resource),
                    Err(e) => tracing::warn!(error = %e, "odd key under the lock prefix"),
                }
            }
        }
    })
}

/// Whether `after` rewrote the lease of `before` (an extension or a renewal, not a new grant)
/// to end earlier. A value that cannot be read counts as shortened: a spurious notice only
/// makes waiters ask again.
fn shortened(before: &KeyValue, after: &KeyValue) -> bool {
    let expiry = |kv: &KeyValue| serde_json::from_slice::<Stored>(kv.value()).map(|s| s.expires_at);
    before.create_revision() == after.create_revision()
        && match (expiry(before), expiry(after)) {
            (Ok(before), Ok(after)) => after < before,
            _ => true,
        }
}

fn encode(owner: &Owner, acquired_at: Timestamp, expires_at: Timestamp) -> Result<Vec<u8>> {
    serde_json::to_vec(&Stored {
        owner: owner.as_str().to_owned(),
        acquired_at: acquired_at.as_millis(),
        expires_at: expires_at.as_millis(),
    })
    .map_err(|e| StoreError::Corrupt(format!("cannot encode a lock: {e}")))
}

/// The lease a lock key holds: its value, and its create revision as the token.
fn lease_from(resource: Resource, kv: &KeyValue) -> Result<Lease> {
    let stored: Stored = serde_json::from_slice(kv.value())
        .map_err(|e| StoreError::Corrupt(format!("lock {resource} holds no lease: {e}")))?;
    let owner = Owner::new(&stored.owner)
        .map_err(|e| StoreError::Corrupt(format!("lock {resource} has owner {:?}: {e}", stored.owner)))?;
    let token = u64::try_from(kv.create_revision())
        .ok()
        .filter(|t| *t > 0)
        .ok_or_else(|| {
            StoreError::Corrupt(format!("lock {resource} has revision {}", kv.create_revision()))
        })?;
    Ok(Lease {
        resource,
        owner,
        token: FencingToken(token),
        acquired_at: Timestamp::from_millis(stored.acquired_at),
        expires_at: Timestamp::from_millis(stored.expires_at),
    })
}

fn resource_of(prefix: &str, key: &[u8]) -> Result<Resource> {
    let name = key
        .strip_prefix(prefix.as_bytes())
        .and_then(|name| std::str::from_utf8(name).ok())
        .ok_or_else(|| StoreError::Corrupt(format!("odd lock key {}", String::from_utf8_lossy(key))))?;
    Resource::new(name).map_err(|e| StoreError::Corrupt(format!("lock key for {name:?}: {e}")))
}

/// The key read by the last `get` of a transaction's answer.
fn last_get(answer: &TxnResponse) -> Option<KeyValue> {
    answer.op_responses().into_iter().rev().find_map(|op| match op {
        TxnOpResponse::Get(mut get) => get.take_kvs().into_iter().next(),
        _ => None,
    })
}

/// How often a request is sent again when no member took it.
const NOT_SENT_RETRIES: u32 = 8;

/// Sends one etcd request (`send` makes it anew each time), again if it never reached a
/// member. The client spreads requests over all members, and keeps trying a member that is
/// down; a request refused at connection time did nothing, so another member may take it.
/// Any other failure may have happened after etcd applied the request, so it is not retried.
async fn request<T, F, Fut>(doing: &str, mut send: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let mut tries = 0;
    loop {
        match send().await {
            Ok(answer) => return Ok(answer),
            Err(e) if tries < NOT_SENT_RETRIES && never_sent(&e) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(5) * tries).await;
            }
            Err(e) => return Err(unavailable(doing, e)),
        }
    }
}

/// Whether `e` says the connection to the member was refused, so the request never left.
fn never_sent(e: &etcd_client::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = match e {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        etcd_client::Error::TransportError(transport) => Some(transport),
        _ => None,
    };
    while let Some(error) = cause {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cause = error.source();
    }
    false
}

fn unavailable(doing: &str, e: etcd_client::Error) -> StoreError {
    StoreError::unavailable(format!("etcd: {doing}"), e)
}

fn contended(doing: &str) -> StoreError {
    StoreError::Unavailable {
        message: format!("etcd: {doing}: the lock changed under every one of {MAX_ATTEMPTS} tries"),
        source: None,
    }
}
