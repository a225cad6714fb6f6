//! The requests and transactions behind each call: read, judge, then write only if the key
//! is still the version that was judged.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, GetResponse, KeyValue, PutOptions, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};
use fencelock_core::store::Result;
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, EndedLease, FencingToken, Lease, LeasePage, ListQuery, Meta, Owner,
    Refusal, ReleaseOutcome, RenewOutcome, Resource, Terms, Timestamp, Ttl,
};

use super::codec::{self, Kept};
use super::error::EtcdError;
use super::watch::Deletion;
use super::{EXPIRY_RECHECK, EtcdStore};

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

    /// Grants an etcd lease for a lease of `ttl` that keeps `kept`, of whole seconds rounded
    /// up: the TTL cut at the cap, then the lock-delay. The lease put on it ends the delay's
    /// seconds before the etcd lease does (etcd may grant more seconds than asked, never
    /// fewer), and at the cap if that comes first, counted from a time no later than this
    /// server's time before it asked ([`Granted::ends`]): etcd starts counting after that,
    /// so it deletes a key put on it no sooner than the end of the lease's lock-delay.
    pub(super) async fn grant(&self, ttl: Ttl, kept: Kept) -> Result<Granted> {
        let asked_at = Timestamp::now_wall();
        let lasts = kept.hold_until.map_or(ttl.as_duration(), |cap| {
            ttl.as_duration().min(cap.since(asked_at))
        });
        let too_long = || EtcdError::Invalid(format!("TTL {ttl:?} with {kept:?} is too long"));
        let (lasts, delay) = (
            whole_seconds(lasts).ok_or_else(too_long)?,
            whole_seconds(kept.lock_delay).ok_or_else(too_long)?,
        );
        let seconds = lasts.checked_add(delay).ok_or_else(too_long)?.max(1);
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
        let lasts = u64::try_from(granted.ttl().max(seconds) - delay).unwrap_or(0);
        Ok(Granted {
            id: granted.id(),
            asked_at,
            lasts: Duration::from_secs(lasts),
            kept,
        })
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

    /// Acquires every lock of `resources` for `owner` on `terms`, or none, in one
    /// transaction (see the module docs).
    pub(super) async fn try_acquire_all(
        &self,
        resources: &[Resource],
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        let mut spares = vec![None; resources.len()];
        let result = self.acquire_keys(resources, owner, &terms, &mut spares).await;
        // The leases still spare hold nothing. Not on an error, though: a transaction whose
        // answer was lost may have put keys on them, and revoking one would then delete a
        // lock the caller may still count on (its old lease, if this extended it). An unused
        // lease just runs out.
        if result.is_ok() {
            for spare in spares.into_iter().flatten() {
                self.revoke(spare.id);
            }
        }
        result
    }

    /// [`EtcdStore::try_acquire_all`], with one etcd lease per key in `spares`, granted
    /// when first needed and kept for the retries (taken out once a key is on it).
    async fn acquire_keys(
        &self,
        resources: &[Resource],
        owner: &Owner,
        terms: &Terms,
        spares: &mut [Option<Granted>],
    ) -> Result<AcquireAllOutcome> {
        let keys: Vec<Vec<u8>> = resources.iter().map(|r| self.key(r)).collect();
        let gets: Vec<TxnOp> = keys.iter().map(|key| TxnOp::get(key.clone(), None)).collect();
        let mut backoff = self.backoff();
        let mut read = self.read_all("read locks", &gets).await?;
        loop {
            // Read after the keys were: the time of what this try grants or extends, which
            // it writes only if every key is still as read (see the module docs).
            let now = Timestamp::now_wall();
            let (mut writes, mut refusals, mut over) = (Vec::new(), Vec::new(), Vec::new());
            for (resource, kv) in resources.iter().zip(read) {
                match judge_acquire(resource, kv, owner, now)? {
                    Judged::Write(write) => writes.push(write),
                    Judged::Refused(refusal) => refusals.push(refusal),
                    Judged::Over(kv) => over.push(kv),
                }
            }
            if !refusals.is_empty() {
                return Ok(AcquireAllOutcome::Refused(refusals));
            }
            if !over.is_empty() {
                // A new lease must be a new key, whose create revision is the new token:
                // the old key goes first (etcd takes no put and delete of one key in one
                // transaction). The watch announces it as a release.
                for kv in &over {
                    // Unmarked: the watch tells the expiry of the lease it ends.
                    self.delete_unchanged("clear an expired lock", kv, Deletion::Untold)
                        .await?;
                }
                read = self.read_all("read locks", &gets).await?;
                continue;
            }
            let mut when = Vec::with_capacity(keys.len());
            let mut puts = Vec::with_capacity(keys.len());
            for ((key, write), spare) in keys.iter().zip(&writes).zip(spares.iter_mut()) {
                let granted = match write {
                    Write::Create => {
                        when.push(Compare::create_revision(key.clone(), CompareOp::Equal, 0));
                        let kept = Kept::granted(now, terms);
                        self.lease_for(spare, terms.ttl, kept, now).await?
                    }
                    Write::Rewrite(kv, kept, _) => {
                        when.push(Compare::mod_revision(
                            key.clone(),
                            CompareOp::Equal,
                            kv.mod_revision(),
                        ));
                        self.lease_for(spare, terms.ttl, *kept, now).await?
                    }
                };
                // A new lease has the metadata sent; an extension keeps its own unless one is.
                let meta = match write {
                    Write::Create => terms.meta.as_ref(),
                    Write::Rewrite(_, _, meta) => terms.meta.as_ref().or(meta.as_ref()),
                };
                let value = codec::encode(owner, now, granted.ends(now), granted.kept, meta)?;
                puts.push(TxnOp::put(
                    key.clone(),
                    value,
                    Some(PutOptions::new().with_lease(granted.id)),
                ));
            }
            let txn = Txn::new()
                .when(when)
                .and_then(puts.into_iter().chain(gets.clone()).collect::<Vec<_>>())
                .or_else(gets.clone());
            let answer = self.txn("acquire", txn).await?;
            let kvs = codec::gets(&answer).into_iter().map(|kvs| kvs.into_iter().next());
            if !answer.succeeded() {
                // Another server changed a key since it was read: judge again on the keys as
                // the transaction found them.
                read = kvs.collect();
                backoff.pause().await.map_err(EtcdError::contended("acquire"))?;
                continue;
            }
            let mut granted = Vec::with_capacity(keys.len());
            for (((resource, write), kv), spare) in
                resources.iter().zip(writes).zip(kvs).zip(spares.iter_mut())
            {
                let kv =
                    kv.ok_or_else(|| EtcdError::Corrupt(format!("lock {resource} just written is missing")))?;
                // The key is on it now.
                spare.take();
                let lease = codec::lease(resource.clone(), &kv)?;
                granted.push(match write {
                    Write::Create => AcquireOutcome::Granted {
                        lease,
                        // An expired lease's key was deleted before (by etcd, or above).
                        expired: None,
                    },
                    Write::Rewrite(old, _, _) => {
                        // Never the lease the key is on now.
                        if old.lease() != kv.lease() {
                            self.revoke(old.lease());
                        }
                        AcquireOutcome::Extended(lease)
                    }
                });
            }
            return Ok(AcquireAllOutcome::Granted(granted));
        }
    }

    /// The keys that `gets` read, at one revision, each `None` if absent (a read-only
    /// transaction: linearizable, and no write to the log).
    async fn read_all(&self, doing: &'static str, gets: &[TxnOp]) -> Result<Vec<Option<KeyValue>>> {
        let answer = self.txn(doing, Txn::new().and_then(gets.to_vec())).await?;
        Ok(codec::gets(&answer)
            .into_iter()
            .map(|kvs| kvs.into_iter().next())
            .collect())
    }

    /// The etcd lease for one key's write, which keeps `kept`, of a try that read the keys
    /// before `read_at`: the one in `spare` if it was granted for that since, or a new one,
    /// left in `spare` (one granted before, or for other terms — a cap measured from an
    /// earlier try — is revoked: no key is on it).
    async fn lease_for(
        &self,
        spare: &mut Option<Granted>,
        ttl: Ttl,
        kept: Kept,
        read_at: Timestamp,
    ) -> Result<Granted> {
        match *spare {
            Some(granted) if granted.kept == kept && granted.asked_at >= read_at => Ok(granted),
            unfit => {
                if let Some(unfit) = unfit {
                    self.revoke(unfit.id);
                }
                *spare = None;
                let granted = self.grant(ttl, kept).await?;
                *spare = Some(granted);
                Ok(granted)
            }
        }
    }

    /// The key of `resource` and the lease it holds, if that lease is live now.
    pub(super) async fn read_live(&self, resource: &Resource) -> Result<Option<(KeyValue, Lease)>> {
        let Some(kv) = self.read(&self.key(resource)).await? else {
            return Ok(None);
        };
        let lease = codec::lease(resource.clone(), &kv)?;
        Ok(live(&lease, Timestamp::now_wall()).then_some((kv, lease)))
    }

    /// Reads the key, judges the caller on it (rules 5 and 8: absent, then owner, then
    /// token), and gives the key and the lease it holds if the caller may change it. A lease
    /// that expired is absent, also while its lock-delay keeps its key.
    async fn judge(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<Result<(KeyValue, Lease), Refusal>> {
        let found = self.read_live(resource).await?.map(|(kv, lease)| (lease, kv));
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

    /// Deletes the key `kv` if it is still that version, and revokes its etcd lease then;
    /// a deletion that is [`Deletion::Told`] also writes the mark beside it. Returns whether
    /// it did; `false` means the key changed meanwhile.
    pub(super) async fn delete_unchanged(
        &self,
        doing: &'static str,
        kv: &KeyValue,
        deletion: Deletion,
    ) -> Result<bool> {
        let mut ops = vec![TxnOp::delete(kv.key(), None)];
        if deletion == Deletion::Told {
            ops.push(self.mark(kv.key()));
        }
        let deleted = self
            .txn(doing, Self::unchanged(kv).and_then(ops))
            .await?
            .succeeded();
        if deleted {
            // The key is gone; its lease holds nothing now.
            self.revoke(kv.lease());
        }
        Ok(deleted)
    }

    /// Moves the key `kv`, if it is still that version, onto a new etcd lease of `ttl` for a
    /// lease that keeps `kept`, with the value `value(expires_at)`, and revokes its old lease.
    /// Returns the new `expires_at` (cut at the cap), or `None` if the key changed meanwhile.
    ///
    /// A new etcd lease, not a keep-alive: a keep-alive could only restart the old lease's
    /// original TTL, and a renew may ask for a shorter one.
    pub(super) async fn move_unchanged(
        &self,
        doing: &'static str,
        kv: &KeyValue,
        ttl: Ttl,
        kept: Kept,
        value: impl FnOnce(Timestamp) -> Result<Vec<u8>, EtcdError>,
    ) -> Result<Option<Timestamp>> {
        let granted = self.grant(ttl, kept).await?;
        let expires_at = granted.ends(granted.asked_at);
        let put = TxnOp::put(
            kv.key(),
            value(expires_at)?,
            Some(PutOptions::new().with_lease(granted.id)),
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
            self.revoke(granted.id);
            Ok(None)
        }
    }

    /// Deletes every key of `range`, with the mark beside them ([`Deletion::Told`]), in one
    /// transaction, and revokes their etcd leases (which hold nothing then). Returns the
    /// keys as they were.
    pub(super) async fn delete_range(
        &self,
        doing: &'static str,
        range: &codec::Range,
    ) -> Result<Vec<KeyValue>> {
        let options = DeleteOptions::new().with_range(range.end.clone()).with_prev_key();
        let delete = TxnOp::delete(range.start.clone(), Some(options));
        let answer = self
            .txn(doing, Txn::new().and_then([delete, self.mark(&range.start)]))
            .await?;
        let deleted = match answer.op_responses().into_iter().next() {
            Some(TxnOpResponse::Delete(deleted)) => deleted.prev_kvs().to_vec(),
            _ => return Err(EtcdError::Corrupt(format!("{doing}: etcd answered no deletion")).into()),
        };
        for kv in &deleted {
            self.revoke(kv.lease());
        }
        Ok(deleted)
    }

    /// Ends the live lease on `resource`, whoever holds it: deletes its key if it is still
    /// the version read, so that it ends exactly what it reports. A lease that expired is
    /// not there to end, and its lock-delay stays.
    pub(super) async fn force_release_lock(&self, resource: &Resource) -> Result<Option<EndedLease>> {
        let mut backoff = self.backoff();
        loop {
            let Some((kv, lease)) = self.read_live(resource).await? else {
                return Ok(None);
            };
            let ended = EndedLease {
                lease,
                ended_at: Timestamp::now_wall(),
            };
            if self
                .delete_unchanged("force-release a lock", &kv, Deletion::Told)
                .await?
            {
                return Ok(Some(ended));
            }
            let doing = "force-release a lock";
            backoff.pause().await.map_err(EtcdError::contended(doing))?;
        }
    }

    pub(super) async fn try_release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let mut backoff = self.backoff();
        loop {
            let (kv, lease) = match self.judge(resource, owner, token).await? {
                Ok(allowed) => allowed,
                Err(refusal) => return Ok(refusal.into()),
            };
            let ended = ended(lease);
            if self.delete_unchanged("release", &kv, Deletion::Told).await? {
                return Ok(ended);
            }
            backoff.pause().await.map_err(EtcdError::contended("release"))?;
        }
    }

    pub(super) async fn try_renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome> {
        let mut backoff = self.backoff();
        loop {
            let (kv, lease) = match self.judge(resource, owner, token).await? {
                Ok(allowed) => allowed,
                Err(refusal) => return Ok(refusal.into()),
            };
            let kept = Kept::of(&lease);
            let meta = meta.or(lease.meta.as_ref());
            let value = |expires_at| codec::encode(owner, lease.acquired_at, expires_at, kept, meta);
            if let Some(expires_at) = self.move_unchanged("renew", &kv, ttl, kept, value).await? {
                let meta = meta.cloned();
                return Ok(RenewOutcome::Renewed(Lease {
                    expires_at,
                    meta,
                    ..lease
                }));
            }
            backoff.pause().await.map_err(EtcdError::contended("renew"))?;
        }
    }

    /// Reads the locks in key order (which is the order of the names' bytes), in batches of
    /// one revision, skipping the keys of leases that are over (kept for their lock-delay, or
    /// not yet deleted), until one past the page's `query.limit` live leases shows up or the
    /// range ends.
    pub(super) async fn try_list(&self, query: &ListQuery) -> Result<LeasePage> {
        let limit = query.limit.max(1);
        let prefix = [self.options.prefix.as_bytes(), query.prefix.as_bytes()].concat();
        let end = codec::prefix_end(&prefix);
        let mut start = match &query.after {
            // Just after the cursor's key: the key with a zero byte appended.
            Some(after) if after.as_str() >= query.prefix.as_str() => [&self.key(after)[..], &[0]].concat(),
            _ => prefix,
        };
        let now = Timestamp::now_wall();
        let (mut leases, mut revision) = (Vec::new(), 0);
        // One more than asked, to know whether another page follows.
        while leases.len() <= limit {
            let wanted = limit + 1 - leases.len();
            let options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(i64::try_from(wanted).unwrap_or(i64::MAX))
                // Every batch after the first at the first one's revision: one snapshot.
                .with_revision(revision);
            let mut answer = self.get("list locks", &start, Some(options)).await?;
            if revision == 0 {
                revision = answer.header().map_or(0, |h| h.revision());
            }
            let more = answer.more();
            let kvs = answer.take_kvs();
            // The mark of told deletions is the prefix itself, no lock's key.
            for kv in kvs.iter().filter(|kv| kv.key() != self.options.prefix.as_bytes()) {
                let lease = codec::lease(self.resource_of(kv)?, kv)?;
                if live(&lease, now) {
                    leases.push(lease);
                }
            }
            match kvs.last() {
                Some(last) if more => start = [last.key(), &[0]].concat(),
                _ => break,
            }
        }
        Ok(LeasePage::from_one_past(leases, limit))
    }

    fn resource_of(&self, kv: &KeyValue) -> Result<Resource, EtcdError> {
        codec::resource(&self.options.prefix, kv.key())
    }
}

/// An etcd lease granted for one key ([`EtcdStore::grant`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Granted {
    pub(super) id: i64,
    /// This server's time before it asked for it. A lease put on it may be counted from no
    /// later ([`Granted::ends`]): one asked for before a call read its keys would end less
    /// than a TTL after the `acquired_at` the call gives it (a time after that read), so a
    /// try uses none older.
    pub(super) asked_at: Timestamp,
    /// How long a lease put on it lasts (until the cap, if that comes first), and etcd keeps
    /// its key for `kept`'s lock-delay more.
    lasts: Duration,
    /// What a lease put on it keeps: what it was granted for.
    pub(super) kept: Kept,
}

impl Granted {
    /// When a lease put on it ends, counted from `from` (its `acquired_at`, or the renewal's
    /// time), which must be no later than [`Granted::asked_at`]: so the lease ends no later
    /// than etcd keeps its key.
    pub(super) fn ends(&self, from: Timestamp) -> Timestamp {
        debug_assert!(
            from <= self.asked_at,
            "a lease counted from after its etcd lease was asked for"
        );
        let lasts = u64::try_from(self.lasts.as_millis()).unwrap_or(u64::MAX);
        self.kept
            .cut(Timestamp::from_millis(from.as_millis().saturating_add(lasts)))
    }
}

/// `duration` in whole seconds, rounded up, as etcd takes a TTL.
fn whole_seconds(duration: Duration) -> Option<i64> {
    i64::try_from(duration.as_millis().div_ceil(1000)).ok()
}

/// Whether the lock `lease`, whose key exists, is live at `now`.
///
/// The key of a lease that keeps no terms lives exactly as long as its etcd lease, which
/// etcd's clock counts down: it is live while it exists, even past its `expires_at` by this
/// server's clock (etcd deletes it soon). The key of a lease with terms outlives it: its
/// etcd lease also covers the lock-delay, and the whole seconds of etcd's TTL may pass the
/// cap. Its `expires_at` decides then, by this server's clock.
pub(super) fn live(lease: &Lease, now: Timestamp) -> bool {
    Kept::of(lease) == Kept::NONE || lease.is_live(now)
}

/// What one key of an acquire should become.
enum Write {
    /// The key is absent: create it, with a new create revision, the new token.
    Create,
    /// The caller's live lease, on the key `kv` as read: rewrite it (same token), keeping
    /// its terms, and its metadata unless the acquire sends some.
    Rewrite(KeyValue, Kept, Option<Meta>),
}

/// What an acquire of one lock would do, judged on its key as read.
enum Judged {
    Write(Write),
    /// Another owner's live lease, or a lock-delay: [`AcquireOutcome::Held`] or
    /// [`AcquireOutcome::Delayed`].
    Refused(AcquireOutcome),
    /// The key of a lease that expired and whose lock-delay ended, not yet deleted.
    Over(KeyValue),
}

/// Judges an acquire of `resource` by `owner` at `now` on its key `kv` as read.
fn judge_acquire(
    resource: &Resource,
    kv: Option<KeyValue>,
    owner: &Owner,
    now: Timestamp,
) -> Result<Judged, EtcdError> {
    let Some(kv) = kv else {
        return Ok(Judged::Write(Write::Create));
    };
    let lease = codec::lease(resource.clone(), &kv)?;
    Ok(if live(&lease, now) {
        if lease.owner == *owner {
            let kept = Kept::of(&lease);
            Judged::Write(Write::Rewrite(kv, kept, lease.meta))
        } else {
            let expires_in = lease.expires_in(now);
            Judged::Refused(AcquireOutcome::Held {
                holder: lease,
                // Only a key without terms is live past its expires_at.
                expires_in: if expires_in.is_zero() {
                    EXPIRY_RECHECK
                } else {
                    expires_in
                },
            })
        }
    } else if now < lease.closed_until() {
        Judged::Refused(AcquireOutcome::Delayed {
            resource: resource.clone(),
            retry_in: lease.closed_until().since(now),
        })
    } else {
        Judged::Over(kv)
    })
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

/// A release's outcome if it deletes `lease`'s key now, once read and judged. etcd has no
/// clock to read: the lease's times are this server's, and so is the time it ended, read
/// after the key was and before the deletion (see the module docs).
pub(super) fn ended(lease: Lease) -> ReleaseOutcome {
    ReleaseOutcome::Released(Some(EndedLease {
        lease,
        ended_at: Timestamp::now_wall(),
    }))
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
