//! Semaphores and read-write locks: read every hold on the name at one revision, decide with
//! [`judge`], then write only if no hold on the name was created or rewritten since.

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp};
use fencelock_core::hold::{Verdict, judge};
use fencelock_core::store::Result;
use fencelock_core::{
    Claim, EndedLease, FencingToken, Hold, HoldKind, HoldOutcome, HoldPage, Intent, ListQuery, Meta, Owner,
    ReleaseOutcome, RenewOutcome, Resource, Timestamp, Ttl,
};

use super::codec::{self, Kept, Range};
use super::error::EtcdError;
use super::txn::{Granted, allowed, ended};
use super::watch::Deletion;
use super::{EXPIRY_RECHECK, EtcdStore};

/// What recording a writer's intent is called in errors.
const INTENT: &str = "record a writer's intent";

/// How many keys one request of [`EtcdStore::try_list_holds`] reads.
const LIST_BATCH: i64 = 256;

/// An etcd lease granted when a call first needs it, and kept for its retries unless a later
/// try read the name after it was asked for (see [`Granted::asked_at`]); revoked at the end
/// unless a key was put on it.
#[derive(Default)]
struct Spare(Option<Granted>);

impl Spare {
    /// The lease for a try that read the name before `read_at`.
    async fn get(&mut self, store: &EtcdStore, ttl: Ttl, read_at: Timestamp) -> Result<Granted> {
        match self.0 {
            Some(granted) if granted.asked_at >= read_at => return Ok(granted),
            Some(stale) => store.revoke(stale.id),
            None => {}
        }
        self.0 = None;
        // Holds keep no terms.
        let granted = store.grant(ttl, Kept::NONE).await?;
        self.0 = Some(granted);
        Ok(granted)
    }

    /// A committed transaction put a key on the lease: it is no longer spare.
    fn used(&mut self) {
        self.0 = None;
    }

    fn revoke(self, store: &EtcdStore) {
        if let Some(granted) = self.0 {
            store.revoke(granted.id);
        }
    }
}

/// What an acquire read: every hold on the name and (for a read-write lock) every writer's
/// intent on it, with their keys, at `revision`.
struct Read {
    revision: i64,
    holds: Vec<(Hold, KeyValue)>,
    intents: Vec<(Intent, KeyValue)>,
}

impl EtcdStore {
    pub(super) async fn try_acquire_hold(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        intent: Option<Ttl>,
        meta: Option<&Meta>,
    ) -> Result<HoldOutcome> {
        let mut spare = [Spare::default(), Spare::default()];
        let result = self
            .acquire_hold_on(name, owner, claim, (ttl, intent, meta), &mut spare)
            .await;
        // Not on an error, though: a transaction whose answer was lost may have put a key
        // on a lease, and revoking it would delete that key. An unused lease just runs out.
        if result.is_ok() {
            spare.into_iter().for_each(|spare| spare.revoke(self));
        }
        result
    }

    /// [`EtcdStore::try_acquire_hold`] with the TTL, the intent and the metadata asked for,
    /// and the etcd leases it may use.
    async fn acquire_hold_on(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        (ttl, intent, meta): (Ttl, Option<Ttl>, Option<&Meta>),
        [hold_lease, intent_lease]: &mut [Spare; 2],
    ) -> Result<HoldOutcome> {
        let kind = claim.kind();
        let holds = self.holds.holds_of(kind, name);
        let intents = (kind == HoldKind::RwLock).then(|| self.holds.intents_of(name));
        let mut backoff = self.backoff();
        loop {
            let read = self.read_name(&holds, intents.as_ref()).await?;
            // Read after the name was: the time of what this try grants or extends, which it
            // writes only if no hold was created or rewritten since (see the module docs).
            let now = Timestamp::now_wall();
            let own = read.holds.iter().find(|(h, _)| h.lease.owner == *owner);
            // Intents are by the owner's name: recording the caller's replaces the one under
            // its name, whoever's it is, but a grant only takes the caller's own away.
            let named_intent = read
                .intents
                .iter()
                .find(|(i, _)| i.owner.as_str() == owner.as_str());
            let own_intent = named_intent.filter(|(i, _)| i.owner == *owner);
            // Written only if no hold on the name was created or rewritten since the read:
            // holds that expired or were released meanwhile only make the verdict cautious.
            let mut when = vec![holds.unchanged_since(read.revision)];
            let verdict = judge_existing(now, &read, owner, claim);
            let granted = match verdict {
                Verdict::LimitMismatch(limit) => return Ok(HoldOutcome::LimitMismatch { limit }),
                Verdict::Busy(busy) => {
                    let (Claim::Write, Some(intent)) = (claim, intent) else {
                        return Ok(HoldOutcome::Busy(busy));
                    };
                    // The intent is recorded only together with the refusal, so that a
                    // release in between makes the writer ask again rather than wait.
                    let lease = intent_lease.get(self, intent, now).await?;
                    let put = TxnOp::put(
                        self.holds.intent(name, owner),
                        codec::encode_intent(owner, lease.ends(lease.asked_at))?,
                        Some(PutOptions::new().with_lease(lease.id)),
                    );
                    if self
                        .txn(INTENT, Txn::new().when(when).and_then([put]))
                        .await?
                        .succeeded()
                    {
                        intent_lease.used();
                        if let Some((_, kv)) = named_intent {
                            self.revoke_other(kv.lease(), lease.id);
                        }
                        return Ok(HoldOutcome::Busy(busy));
                    }
                    backoff.pause().await.map_err(EtcdError::contended(INTENT))?;
                    continue;
                }
                Verdict::Grant | Verdict::Extend => hold_lease.get(self, ttl, now).await?,
            };
            let key = self.holds.hold(name, owner, claim);
            let mut ops = Vec::new();
            if let Some((_, kv)) = own {
                // The hold extended or replaced must still be there: it may have expired.
                when.push(Compare::mod_revision(
                    kv.key(),
                    CompareOp::Equal,
                    kv.mod_revision(),
                ));
                if kv.key() != key {
                    // An upgrade or a downgrade: the other mode's key goes (told, as a
                    // replacement), and the new one's create revision is the new token.
                    ops.push(TxnOp::delete(kv.key(), None));
                    ops.push(self.mark(kv.key()));
                }
            }
            if let (Claim::Read, Some(intents)) = (claim, &intents) {
                when.push(intents.unchanged_since(read.revision));
            }
            if claim == Claim::Write {
                // The intent under the caller's name must still be what was read, so that
                // one another principal recorded meanwhile is not taken for the caller's.
                let intent = self.holds.intent(name, owner);
                let read_at = named_intent.map_or(0, |(_, kv)| kv.mod_revision());
                when.push(Compare::mod_revision(intent.clone(), CompareOp::Equal, read_at));
                if own_intent.is_some() {
                    ops.push(TxnOp::delete(intent, None));
                }
            }
            // A new hold has the metadata sent; an extension keeps its own unless one is.
            let meta = match (&verdict, own) {
                (Verdict::Extend, Some((hold, _))) => meta.or(hold.lease.meta.as_ref()),
                _ => meta,
            };
            let value = codec::encode_hold(owner, claim, now, granted.ends(now), meta)?;
            ops.push(TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(granted.id)),
            ));
            ops.push(TxnOp::get(key, None));
            let answer = self
                .txn("acquire a hold", Txn::new().when(when).and_then(ops))
                .await?;
            if !answer.succeeded() {
                backoff
                    .pause()
                    .await
                    .map_err(EtcdError::contended("acquire a hold"))?;
                continue;
            }
            hold_lease.used();
            let kv = codec::gets(&answer)
                .pop()
                .and_then(|kvs| kvs.into_iter().next())
                .ok_or_else(|| EtcdError::Corrupt("a hold just put is missing".into()))?;
            let hold = self.holds.decode(&kv)?;
            // The keys this deleted or moved: the owner's old hold, and a writer's intent.
            let intent_gone = own_intent.filter(|_| claim == Claim::Write).map(|(_, kv)| kv);
            for old in own.map(|(_, kv)| kv).into_iter().chain(intent_gone) {
                self.revoke_other(old.lease(), granted.id);
            }
            return Ok(match verdict {
                Verdict::Extend => HoldOutcome::Extended(hold),
                _ => HoldOutcome::Granted {
                    hold,
                    replaced: own.map(|(h, _)| h.clone()),
                },
            });
        }
    }

    /// Revokes `old`, the etcd lease of a key that a committed transaction deleted or moved
    /// onto `new`. Each call grants leases of its own, so the two differ; were they the same,
    /// revoking would delete the key just written, hence the check.
    fn revoke_other(&self, old: i64, new: i64) {
        if old != new {
            self.revoke(old);
        }
    }

    /// The holds of `holds` and the intents of `intents`, read in one transaction so that
    /// they are of one revision.
    async fn read_name(&self, holds: &Range, intents: Option<&Range>) -> Result<Read> {
        let gets: Vec<TxnOp> = [Some(holds), intents]
            .into_iter()
            .flatten()
            .map(Range::get)
            .collect();
        let answer = self.txn("read holds", Txn::new().and_then(gets)).await?;
        let revision = answer
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| EtcdError::Corrupt("a read without a revision".into()))?;
        let mut read = codec::gets(&answer).into_iter();
        let holds = read
            .next()
            .unwrap_or_default()
            .into_iter()
            .map(|kv| Ok((self.holds.decode(&kv)?, kv)))
            .collect::<Result<_, EtcdError>>()?;
        let intents = read
            .next()
            .unwrap_or_default()
            .into_iter()
            .map(|kv| Ok((self.holds.decode_intent(&kv)?, kv)))
            .collect::<Result<_, EtcdError>>()?;
        Ok(Read {
            revision,
            holds,
            intents,
        })
    }

    pub(super) async fn try_holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        let read = self.read_name(&self.holds.holds_of(kind, name), None).await?;
        let mut holds: Vec<Hold> = read.holds.into_iter().map(|(h, _)| h).collect();
        holds.sort_by_key(|h| h.lease.token);
        Ok(holds)
    }

    /// `owner`'s hold on `name` with its key, if it has one. A hold key exists exactly as
    /// long as etcd keeps its lease alive: it is live.
    async fn own_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
    ) -> Result<Option<(Hold, KeyValue)>> {
        let read = self.read_name(&self.holds.owned(kind, name, owner), None).await?;
        Ok(read.holds.into_iter().next())
    }

    pub(super) async fn try_release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let mut backoff = self.backoff();
        loop {
            let found = self.own_hold(kind, name, owner).await?;
            let (kv, hold) = match allowed(found, |h: &Hold| &h.lease, owner, token) {
                Ok(allowed) => allowed,
                Err(refusal) => return Ok(refusal.into()),
            };
            let ended = ended(hold.lease);
            if self
                .delete_unchanged("release a hold", &kv, Deletion::Told)
                .await?
            {
                return Ok(ended);
            }
            backoff
                .pause()
                .await
                .map_err(EtcdError::contended("release a hold"))?;
        }
    }

    pub(super) async fn try_renew_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome<Hold>> {
        let mut backoff = self.backoff();
        loop {
            let found = self.own_hold(kind, name, owner).await?;
            let (kv, hold) = match allowed(found, |h: &Hold| &h.lease, owner, token) {
                Ok(allowed) => allowed,
                Err(refusal) => return Ok(refusal.into()),
            };
            let meta = meta.or(hold.lease.meta.as_ref());
            let value =
                |expires_at| codec::encode_hold(owner, hold.claim, hold.lease.acquired_at, expires_at, meta);
            if let Some(expires_at) = self
                .move_unchanged("renew a hold", &kv, ttl, Kept::NONE, value)
                .await?
            {
                let meta = meta.cloned();
                let mut renewed = hold;
                renewed.lease.expires_at = expires_at;
                renewed.lease.meta = meta;
                return Ok(RenewOutcome::Renewed(renewed));
            }
            backoff
                .pause()
                .await
                .map_err(EtcdError::contended("renew a hold"))?;
        }
    }

    /// Reads the holds of `kind` in key order (which is the order of the names' bytes), in
    /// batches of one revision, until a name past the page's `query.limit` names shows up or
    /// the range ends.
    pub(super) async fn try_list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage> {
        let limit = query.limit.max(1);
        let range = self.holds.names(kind, &query.prefix, query.after.as_ref());
        let mut names: Vec<(Resource, Vec<Hold>)> = Vec::new();
        let (mut start, mut revision) = (range.start.clone(), 0);
        while names.len() <= limit {
            let options = GetOptions::new()
                .with_range(range.end.clone())
                .with_limit(LIST_BATCH)
                // Every batch after the first at the first one's revision: one snapshot.
                .with_revision(revision);
            let mut answer = self.get("list holds", &start, Some(options)).await?;
            if revision == 0 {
                revision = answer.header().map_or(0, |h| h.revision());
            }
            let more = answer.more();
            let kvs = answer.take_kvs();
            for kv in &kvs {
                let hold = self.holds.decode(kv)?;
                let full = names.len() > limit;
                match names.last_mut() {
                    Some((name, holds)) if *name == hold.lease.resource => holds.push(hold),
                    _ if full => break,
                    _ => names.push((hold.lease.resource.clone(), vec![hold])),
                }
            }
            match kvs.last() {
                // Just after the last key: that key with a zero byte appended.
                Some(last) if more => start = [last.key(), &[0]].concat(),
                _ => break,
            }
        }
        for (_, holds) in &mut names {
            holds.sort_by_key(|h| h.lease.token);
        }
        Ok(HoldPage::from_one_past(names, limit))
    }

    /// Deletes `owner`'s intent, if the intent under its name is still its own (one of
    /// another principal under that name is theirs to withdraw).
    pub(super) async fn try_withdraw_intent(&self, name: &Resource, owner: &Owner) -> Result<()> {
        let key = self.holds.intent(name, owner);
        let mut backoff = self.backoff();
        loop {
            let mut read = self.get("read an intent", &key, None).await?;
            let Some(kv) = read.take_kvs().into_iter().next() else {
                return Ok(());
            };
            if self.holds.decode_intent(&kv)?.owner != *owner {
                return Ok(());
            }
            // The watch sees the deletion and wakes the readers it held back.
            // An intent holds no lease: its end is no event, marked or not.
            if self
                .delete_unchanged("withdraw an intent", &kv, Deletion::Untold)
                .await?
            {
                return Ok(());
            }
            let doing = "withdraw an intent";
            backoff.pause().await.map_err(EtcdError::contended(doing))?;
        }
    }

    /// Ends every hold of `kind` on `name`, whoever holds it, in one request; writers'
    /// intents stay (they hold nothing). Returns the holds' leases, in token order, ended at
    /// this server's time before the request.
    pub(super) async fn force_release_holds(
        &self,
        kind: HoldKind,
        name: &Resource,
    ) -> Result<Vec<EndedLease>> {
        let ended_at = Timestamp::now_wall();
        let deleted = self
            .delete_range("force-release holds", &self.holds.holds_of(kind, name))
            .await?;
        let mut ended = deleted
            .iter()
            .map(|kv| {
                let lease = self.holds.decode(kv)?.lease;
                Ok(EndedLease { lease, ended_at })
            })
            .collect::<Result<Vec<_>, EtcdError>>()?;
        ended.sort_by_key(|e| e.lease.token);
        Ok(ended)
    }
}

/// Judges an acquire on what etcd holds. A key exists exactly as long as etcd keeps its
/// lease alive, by etcd's clock, so every hold and intent read is live, even one whose
/// `expires_at` has passed by this server's clock (etcd deletes it soon): such a one is
/// judged as ending [`EXPIRY_RECHECK`] from now, so that a caller it stands in the way of asks
/// again soon. A refusal lists the holders as they are stored.
fn judge_existing(now: Timestamp, read: &Read, owner: &Owner, claim: Claim) -> Verdict {
    let soon = Timestamp::from_millis(
        now.as_millis()
            .saturating_add(u64::try_from(EXPIRY_RECHECK.as_millis()).unwrap_or(u64::MAX)),
    );
    let live = |at: Timestamp| if at > now { at } else { soon };
    let holds: Vec<Hold> = read
        .holds
        .iter()
        .map(|(hold, _)| {
            let mut hold = hold.clone();
            hold.lease.expires_at = live(hold.lease.expires_at);
            hold
        })
        .collect();
    let intents: Vec<Intent> = read
        .intents
        .iter()
        .map(|(intent, _)| Intent {
            owner: intent.owner.clone(),
            expires_at: live(intent.expires_at),
        })
        .collect();
    match judge(now, &holds, &intents, owner, claim) {
        Verdict::Busy(mut busy) => {
            for holder in &mut busy.holders {
                if let Some((stored, _)) = read
                    .holds
                    .iter()
                    .find(|(h, _)| h.lease.token == holder.lease.token)
                {
                    holder.clone_from(stored);
                }
            }
            Verdict::Busy(busy)
        }
        verdict => verdict,
    }
}
