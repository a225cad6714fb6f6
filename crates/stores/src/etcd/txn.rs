//! The requests and transactions behind each call: read, judge, then write only if the key
//! is still the version that was judged.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, GetResponse, KeyValue, PutOptions, Txn, TxnOp, TxnResponse,
};
use fencelock_core::store::Result;
use fencelock_core::{
    AcquireOutcome, EndedLease, FencingToken, Lease, LeasePage, ListQuery, Owner, Refusal, ReleaseOutcome,
    RenewOutcome, Resource, Timestamp, Ttl,
};

use super::error::EtcdError;
use super::{EXPIRY_RECHECK, EtcdStore, MAX_ATTEMPTS, codec};

impl EtcdStore {
    /// The key of `resource` as it is now (a linearizable read).
    pub(super) async fn read(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let mut answer = self.get("read a lock", key, None).await?;
        Ok(answer.take_kvs().into_iter().next())
    }

    /// One `get` request (linearizable, etcd's default).
    pub(super) async fn get(
        &self,
        doing: &'static str,
        key: &[u8],
        options: Option<GetOptions>,
    ) -> Result<GetResponse, EtcdError> {
        let kv = self.client.kv_client();
        request(doing, || {
            let (mut kv, options) = (kv.clone(), options.clone());
            async move { kv.get(key, options).await }
        })
        .await
    }

    /// Grants an etcd lease of at least `ttl`, rounded up to whole seconds. Returns its id
    /// and the lease's `(acquired_at, expires_at)`: the time before asking, and that time
    /// plus the TTL etcd granted (which may be more than asked, never less). etcd starts
    /// counting after that time, so it frees the lock no earlier than `expires_at`.
    pub(super) async fn grant(&self, ttl: Ttl) -> Result<(i64, Timestamp, Timestamp)> {
        let seconds = i64::try_from(ttl.as_millis().div_ceil(1000))
            .map_err(|_| EtcdError::Invalid(format!("TTL {ttl:?} is too long")))?;
        let asked_at = Timestamp::now_wall();
        let leases = self.client.lease_client();
        let granted = request("grant a lease", || {
            let mut leases = leases.clone();
            async move { leases.grant(seconds, None).await }
        })
        .await?;
        if !granted.error().is_empty() {
            return Err(EtcdError::Refused {
                doing: "grant a lease",
                reason: granted.error().to_owned(),
            }
            .into());
        }
        let lasts = u64::try_from(granted.ttl().max(seconds)).unwrap_or(0) * 1000;
        let expires_at = Timestamp::from_millis(asked_at.as_millis().saturating_add(lasts));
        Ok((granted.id(), asked_at, expires_at))
    }

    /// Revokes an etcd lease nothing uses any more, in the background: if that fails, the
    /// lease just runs out by itself, holding nothing.
    pub(super) fn revoke(&self, lease: i64) {
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

    pub(super) async fn txn(&self, doing: &'static str, txn: Txn) -> Result<TxnResponse, EtcdError> {
        let kv = self.client.kv_client();
        request(doing, || {
            let (mut kv, txn) = (kv.clone(), txn.clone());
            async move { kv.txn(txn).await }
        })
        .await
    }

    pub(super) async fn try_acquire(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<AcquireOutcome> {
        let key = self.key(resource);
        let (lease_id, acquired_at, expires_at) = self.grant(ttl).await?;
        let value = codec::encode(owner, acquired_at, expires_at)?;
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
            let current = codec::last_get(&answer);
            if answer.succeeded() {
                let kv = current.ok_or_else(|| EtcdError::Corrupt("a created lock key is missing".into()))?;
                return Ok(AcquireOutcome::Granted {
                    lease: codec::lease(resource.clone(), &kv)?,
                    // etcd deletes an expired lease's key: there is never one to replace.
                    expired: None,
                });
            }
            // The failed compare means the key exists, and the get ran in the same
            // transaction: a missing key is an odd answer, and worth asking again.
            let Some(kv) = current else { continue };
            let holder = codec::lease(resource.clone(), &kv)?;
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
                let kv = codec::last_get(&answer)
                    .ok_or_else(|| EtcdError::Corrupt("an extended lock key is missing".into()))?;
                // The old lease may be this very one, when a retry after a lost answer
                // extends the lock this call granted: never revoke the lease the key is on.
                if old_lease != lease_id {
                    self.revoke(old_lease);
                }
                return Ok(AcquireOutcome::Extended(codec::lease(resource.clone(), &kv)?));
            }
        }
        Err(EtcdError::Contended { doing: "acquire" }.into())
    }

    /// Reads the key, judges the caller on it (rules 5 and 8: absent, then owner, then
    /// token), and gives the key and the lease it holds if the caller may change it.
    async fn judge(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<Result<(KeyValue, Lease), Refusal>> {
        // The key exists exactly as long as etcd keeps its lease alive: it is live.
        let found = match self.read(&self.key(resource)).await? {
            Some(kv) => Some((codec::lease(resource.clone(), &kv)?, kv)),
            None => None,
        };
        Ok(allowed(found, |lease| lease, owner, token))
    }

    /// A transaction that succeeds only if the key is still the version `kv` (same value,
    /// so same owner) of the lease with `kv`'s token.
    fn unchanged(kv: &KeyValue) -> Txn {
        Txn::new().when([
            Compare::mod_revision(kv.key(), CompareOp::Equal, kv.mod_revision()),
            Compare::create_revision(kv.key(), CompareOp::Equal, kv.create_revision()),
        ])
    }

    /// Deletes the key `kv` if it is still that version, and revokes its etcd lease then.
    /// Returns whether it did; `false` means the key changed meanwhile.
    pub(super) async fn delete_unchanged(&self, doing: &'static str, kv: &KeyValue) -> Result<bool> {
        let delete = Self::unchanged(kv).and_then([TxnOp::delete(kv.key(), None)]);
        let deleted = self.txn(doing, delete).await?.succeeded();
        if deleted {
            // The key is gone; its lease holds nothing now.
            self.revoke(kv.lease());
        }
        Ok(deleted)
    }

    /// Moves the key `kv`, if it is still that version, onto a new etcd lease of `ttl`, with
    /// the value `value(expires_at)`, and revokes its old lease. Returns the new `expires_at`,
    /// or `None` if the key changed meanwhile.
    ///
    /// A new etcd lease, not a keep-alive: a keep-alive could only restart the old lease's
    /// original TTL, and a renew may ask for a shorter one.
    pub(super) async fn move_unchanged(
        &self,
        doing: &'static str,
        kv: &KeyValue,
        ttl: Ttl,
        value: impl FnOnce(Timestamp) -> Result<Vec<u8>, EtcdError>,
    ) -> Result<Option<Timestamp>> {
        let (lease_id, _, expires_at) = self.grant(ttl).await?;
        let put = TxnOp::put(
            kv.key(),
            value(expires_at)?,
            Some(PutOptions::new().with_lease(lease_id)),
        );
        // On an error, the new lease is left to run out rather than revoked: the lost
        // answer may have moved the key onto it, and revoking would delete the key.
        if self
            .txn(doing, Self::unchanged(kv).and_then([put]))
            .await?
            .succeeded()
        {
            self.revoke(kv.lease());
            Ok(Some(expires_at))
        } else {
            self.revoke(lease_id);
            Ok(None)
        }
    }

    /// Deletes every key of `range` in one request, and revokes their etcd leases (which
    /// hold nothing then). Returns the keys as they were.
    pub(super) async fn delete_range(
        &self,
        doing: &'static str,
        range: &codec::Range,
    ) -> Result<Vec<KeyValue>> {
        let kv = self.client.kv_client();
        let options = DeleteOptions::new().with_range(range.end.clone()).with_prev_key();
        let mut deleted = request(doing, || {
            let (mut kv, options) = (kv.clone(), options.clone());
            async move { kv.delete(range.start.clone(), Some(options)).await }
        })
        .await?;
        let deleted = deleted.take_prev_kvs();
        for kv in &deleted {
            self.revoke(kv.lease());
        }
        Ok(deleted)
    }

    /// Ends the lock on `resource`, whoever holds it, in one request: its lease if it had one.
    pub(super) async fn force_release_lock(&self, resource: &Resource) -> Result<Option<Lease>> {
        let deleted = self
            .delete_range("force-release a lock", &codec::Range::key(self.key(resource)))
            .await?;
        Ok(deleted
            .first()
            .map(|kv| codec::lease(resource.clone(), kv))
            .transpose()?)
    }

    pub(super) async fn try_release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        for _ in 0..MAX_ATTEMPTS {
            let (kv, lease) = match self.judge(resource, owner, token).await? {
                Ok(allowed) => allowed,
                Err(refusal) => return Ok(refusal.into()),
            };
            if self.delete_unchanged("release", &kv).await? {
                return Ok(ended(lease));
            }
        }
        Err(EtcdError::Contended { doing: "release" }.into())
    }

    pub(super) async fn try_renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome> {
        for _ in 0..MAX_ATTEMPTS {
            let (kv, lease) = match self.judge(resource, owner, token).await? {
                Ok(allowed) => allowed,
                Err(refusal) => return Ok(refusal.into()),
            };
            let value = |expires_at| codec::encode(owner, lease.acquired_at, expires_at);
            if let Some(expires_at) = self.move_unchanged("renew", &kv, ttl, value).await? {
                return Ok(RenewOutcome::Renewed(Lease { expires_at, ..lease }));
            }
        }
        Err(EtcdError::Contended { doing: "renew" }.into())
    }

    pub(super) async fn try_list(&self, query: &ListQuery) -> Result<LeasePage> {
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
            .with_range(codec::prefix_end(&prefix))
            .with_limit(fetch);
        let mut answer = self.get("list locks", &start, Some(options)).await?;
        let leases = answer
            .take_kvs()
            .iter()
            .map(|kv| codec::lease(self.resource_of(kv)?, kv))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(crate::page(leases, limit))
    }

    fn resource_of(&self, kv: &KeyValue) -> Result<Resource, EtcdError> {
        codec::resource(&self.options.prefix, kv.key())
    }
}

/// What a release by `owner`, with `token` if given, may do with `found`, the live lease
/// read (with its key) if there is one: judged by [`Refusal::check`].
pub(super) fn allowed<T>(
    found: Option<(T, KeyValue)>,
    lease: impl Fn(&T) -> &Lease,
    owner: &Owner,
    token: Option<FencingToken>,
) -> Result<(KeyValue, T), Refusal> {
    let Some((held, kv)) = found else {
        return Err(Refusal::NotFound);
    };
    Refusal::check(Some(lease(&held)), owner, token)?;
    Ok((kv, held))
}

/// A release's outcome: `lease` ended now.
pub(super) fn ended(lease: Lease) -> ReleaseOutcome {
    ReleaseOutcome::Released(Some(ended_now(lease)))
}

/// `lease`, ended now. etcd has no clock to read: the lease's times are this server's, and
/// so is the time it ended.
pub(super) fn ended_now(lease: Lease) -> EndedLease {
    EndedLease {
        lease,
        ended_at: Timestamp::now_wall(),
    }
}

/// How often a request is sent again when no member took it.
const NOT_SENT_RETRIES: u32 = 8;

/// Sends one etcd request (`send` makes it anew each time), again if it never reached a
/// member. The client spreads requests over all members, and keeps trying a member that is
/// down; a request refused at connection time did nothing, so another member may take it.
/// Any other failure may have happened after etcd applied the request, so it is not retried.
pub(super) async fn request<T, F, Fut>(doing: &'static str, mut send: F) -> Result<T, EtcdError>
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
            Err(e) => return Err(EtcdError::Request { doing, source: e }),
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
