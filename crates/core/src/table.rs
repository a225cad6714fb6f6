//! [`LockTable`]: the rules of fencelock as a pure state machine over leases and holds held
//! in memory.
//!
//! The in-memory store is a table behind a mutex; the embedded store's is behind its writer's
//! mutex, with every change journalled so that a batch whose commit fails can be undone. The
//! time is always passed in, so the rules are tested without a clock.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;

use compact_str::CompactString;

use crate::hold::{self, Claim, Expired, Hold, HoldKind, HoldOutcome, HoldPage, Intent, Key, Kind, Verdict};
use crate::model::{FencingToken, Lease, Meta, Owner, Resource, Resources, Terms, Timestamp, Ttl};
use crate::store::{
    AcquireAllOutcome, AcquireOutcome, EndedLease, ForceOutcome, LeasePage, ListQuery, PURGE_BATCH, Refusal,
    ReleaseOutcome, RenewOutcome, StoreError,
};

/// Leases by resource, holds by name, and the last fencing token issued (one counter for
/// every name of every kind, which makes each name's tokens increase too).
///
/// # The purge reads what has ended, not what is stored
///
/// [`LockTable::purge_expired`] runs every second, and the embedded store's writer answers
/// nothing while it does. A walk of every lease for the ended ones took that writer 240–390 ms
/// at ten million leases, so every request arriving meanwhile waited as long. Instead the
/// table keeps an index of its leases by the end of their closure ([`Lease::closed_until`]:
/// the expiry, or the end of the lock-delay) and one of its holds by their expiry, and a purge
/// reads them from their start: it costs what has ended.
///
/// The index is a function of the leases alone: every lease has exactly one entry, changed in
/// the one place a lease is ([`LockTable::put`], which both a change and its undoing go
/// through), so an undone batch leaves it as it found it. It costs some 34 bytes a lease
/// (built at [`LockTable::new`] from sorted entries, whose nodes are full); the table pays for
/// most of it by keeping each lease once, under its own name, in a set ([`ByResource`]), where
/// a map kept the name twice, as the key and in the lease (24 bytes). At ten million leases
/// the server's RSS went from 171 to 183 bytes a lease; a purge with nothing ended went from
/// 336 ms to 1 µs, and an acquire with its release from 2.9 to 4.1 µs (the table alone).
///
/// An index of only the leases that close within a horizon, filled by a sweep of a bounded
/// number of leases each purge, would cost nothing for leases of a day, but as much for short
/// ones (those that churn), and would be a second invariant to keep across batches and
/// restarts; the full index was within the memory bar without it.
#[derive(Debug, Default)]
pub struct LockTable {
    leases: BTreeSet<ByResource>,
    /// Every lease's (`closed_until`, resource): the leases a purge forgets, first to end first.
    closing: BTreeSet<(Timestamp, Resource)>,
    /// The holds of each semaphore and read-write lock, in token order.
    holds: BTreeMap<(HoldKind, Resource), Vec<Hold>>,
    /// Every hold's (`expires_at`, kind, name, owner's name), as `closing` is for leases.
    hold_ends: BTreeSet<HoldEnd>,
    /// Writers waiting for read-write locks. Not written to disk: an intent only holds
    /// readers back for a moment, and the waiting server renews it. (A batch that is undone
    /// puts them back as they were, like everything else.)
    intents: HashMap<Resource, Vec<Intent>>,
    last_token: u64,
    journal: Option<Journal>,
    /// Names that may be free sooner than their waiters were told, not yet taken by
    /// [`LockTable::take_freed`].
    freed: Vec<Key>,
}

/// What a batch changed, kept until it is committed or undone.
#[derive(Debug)]
struct Journal {
    last_token: u64,
    before: HashMap<Resource, Option<Lease>>,
    holds_before: HashMap<HoldId, Option<Hold>>,
    /// The intents as they were, taken at the batch's first change of one (they are few).
    intents_before: Option<HashMap<Resource, Vec<Intent>>>,
    freed: usize,
}

/// A lease in the table, found and ordered by its resource: the set keeps each name once, in
/// the lease, where a map kept it as the key too.
#[derive(Debug, Clone)]
struct ByResource(Lease);

impl PartialEq for ByResource {
    fn eq(&self, other: &Self) -> bool {
        self.0.resource == other.0.resource
    }
}

impl Eq for ByResource {}

impl PartialOrd for ByResource {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByResource {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.resource.cmp(&other.0.resource)
    }
}

// Found by its resource, or the resource's name (for ranges by prefix): both order as the
// resource does, as `Borrow` asks.
impl Borrow<Resource> for ByResource {
    fn borrow(&self) -> &Resource {
        &self.0.resource
    }
}

impl Borrow<str> for ByResource {
    fn borrow(&self) -> &str {
        self.0.resource.as_str()
    }
}

/// When a hold expires, and which it is: kind, name and owner's name.
type HoldEnd = (Timestamp, HoldKind, Resource, CompactString);

fn hold_end(kind: HoldKind, hold: &Hold) -> HoldEnd {
    let lease = &hold.lease;
    (
        lease.expires_at,
        kind,
        lease.resource.clone(),
        lease.owner.as_str().into(),
    )
}

/// What an acquire of one lock would do, judged before anything changes.
enum Judged {
    /// Refused: [`AcquireOutcome::Held`] or [`AcquireOutcome::Delayed`].
    Refused(AcquireOutcome),
    /// The owner's live lease, to extend.
    Extend(Lease),
    /// Grant a new lease, replacing the expired one if the table still has it.
    Grant(Option<Lease>),
}

/// A resource a committed batch changed, with the lease it has now (`None`: no row).
pub type Dirty = (Resource, Option<Lease>);

/// One owner's place on a semaphore or read-write lock, by the owner's name: on one name, a
/// name is held by one principal at a time ([`hold::judge`] refuses its namesakes).
pub type HoldId = (HoldKind, Resource, String);

/// A hold a committed batch changed, with what it is now (`None`: no row).
pub type DirtyHold = (HoldId, Option<Hold>);

impl LockTable {
    /// A table holding `leases` (live or not), whose last issued token was `last_token`.
    /// `last_token` must be at least every lease's token.
    pub fn new(last_token: u64, leases: impl IntoIterator<Item = Lease>) -> Self {
        let leases: BTreeSet<_> = leases.into_iter().map(ByResource).collect();
        let highest = leases.iter().map(|l| l.0.token.0).max().unwrap_or(0);
        Self {
            closing: closing_of(&leases),
            leases,
            last_token: last_token.max(highest),
            ..Self::default()
        }
    }

    /// This table with `holds` (live or not) added; the last token rises to theirs if need be.
    pub fn with_holds(mut self, holds: impl IntoIterator<Item = (HoldKind, Hold)>) -> Self {
        for (kind, hold) in holds {
            self.last_token = self.last_token.max(hold.lease.token.0);
            self.hold_ends.insert(hold_end(kind, &hold));
            let group = self.holds.entry((kind, hold.lease.resource.clone())).or_default();
            group.push(hold);
        }
        for group in self.holds.values_mut() {
            group.sort_by_key(|h| h.lease.token);
        }
        self
    }

    /// Whether the table has a lease on `resource`, live or not.
    pub fn has_lease(&self, resource: &Resource) -> bool {
        self.leases.contains(resource)
    }

    /// Puts `lease`, read from the file of a store that serves while it loads its leases,
    /// into the table as if it had been there from the start: not a change, so not journalled
    /// and nothing to write; the counter rises to its token if need be.
    pub fn load_lease(&mut self, lease: Lease) {
        self.last_token = self.last_token.max(lease.token.0);
        let resource = lease.resource.clone();
        self.put(&resource, Some(lease));
    }

    /// Takes in the leases of `loaded`, read from a store's file while this table served
    /// (its holds, if any, are not taken). For each name in `known` — every name this table
    /// was asked about meanwhile, so whose lease it has as it is now, or has none — this
    /// table's lease stands and `loaded`'s goes, whatever it was when it was read; every other
    /// name's lease comes from `loaded`. `loaded`'s sets are kept, with their full nodes (see
    /// [`LockTable::new`]), and this table's few leases go into them; the counter is the
    /// higher of the two. Not during a batch.
    pub fn take_in(&mut self, mut loaded: LockTable, known: &HashSet<Resource>) {
        debug_assert!(
            self.journal.is_none(),
            "a table takes in what was loaded between batches"
        );
        for name in known {
            loaded.put(name, None);
        }
        for ByResource(lease) in std::mem::take(&mut self.leases) {
            let resource = lease.resource.clone();
            loaded.put(&resource, Some(lease));
        }
        self.leases = loaded.leases;
        self.closing = loaded.closing;
        self.last_token = self.last_token.max(loaded.last_token);
    }

    /// The resources whose lock may have become free sooner than their waiters were told
    /// since the last call: released, purged, or renewed or extended to end earlier than
    /// before. A store announces these on its release feed once they are committed, so that
    /// waiters ask again instead of sleeping until an expiry that no longer holds.
    pub fn take_freed(&mut self) -> Vec<Key> {
        std::mem::take(&mut self.freed)
    }

    /// The last fencing token issued (0 if none yet).
    pub fn last_token(&self) -> u64 {
        self.last_token
    }

    /// Acquire on `terms`: rules 2, 3 and 4 of the SPEC, with the lock-delay and the cap on
    /// holding.
    pub fn acquire(
        &mut self,
        now: Timestamp,
        resource: &Resource,
        owner: &Owner,
        terms: &Terms,
    ) -> Result<AcquireOutcome, StoreError> {
        let outcome = match self.judge(now, resource, owner) {
            Judged::Refused(refusal) => return Ok(refusal),
            Judged::Extend(lease) => {
                let extended = lease.prolonged(now, terms.ttl, true, terms.meta.as_ref());
                if extended.expires_at < lease.expires_at {
                    self.freed.push(Key::lock(resource));
                }
                AcquireOutcome::Extended(extended)
            }
            Judged::Grant(expired) => {
                let token = self.next_token()?;
                let lease = Lease::granted(resource, owner, token, now, terms);
                AcquireOutcome::Granted { lease, expired }
            }
        };
        if let Some(lease) = outcome.lease() {
            self.set(resource, Some(lease.clone()));
        }
        Ok(outcome)
    }

    /// Acquires every lock of `resources` on `terms`, or none: the refusals of those in the
    /// way, with nothing changed.
    pub fn acquire_all(
        &mut self,
        now: Timestamp,
        resources: &Resources,
        owner: &Owner,
        terms: &Terms,
    ) -> Result<AcquireAllOutcome, StoreError> {
        let names = resources.as_slice();
        let refusals: Vec<AcquireOutcome> = names
            .iter()
            .filter_map(|name| match self.judge(now, name, owner) {
                Judged::Refused(refusal) => Some(refusal),
                Judged::Extend(_) | Judged::Grant(_) => None,
            })
            .collect();
        if !refusals.is_empty() {
            return Ok(AcquireAllOutcome::Refused(refusals));
        }
        // Tokens are issued in the order given, so that the caller's first lock has the
        // lowest; every one is free, so none of these is refused.
        let mut granted = Vec::with_capacity(names.len());
        for name in names {
            granted.push(self.acquire(now, name, owner, terms)?);
        }
        Ok(AcquireAllOutcome::Granted(granted))
    }

    /// What an acquire of `resource` by `owner` at `now` would do.
    fn judge(&self, now: Timestamp, resource: &Resource, owner: &Owner) -> Judged {
        match self.lease(resource) {
            Some(lease) if lease.is_live(now) && lease.owner == *owner => Judged::Extend(lease.clone()),
            Some(lease) if lease.is_live(now) => Judged::Refused(AcquireOutcome::Held {
                holder: lease.clone(),
                expires_in: lease.expires_in(now),
            }),
            Some(lease) if now < lease.closed_until() => Judged::Refused(AcquireOutcome::Delayed {
                resource: resource.clone(),
                retry_in: lease.closed_until().since(now),
            }),
            expired => Judged::Grant(expired.cloned()),
        }
    }

    /// The live lease on `resource`.
    pub fn get(&self, now: Timestamp, resource: &Resource) -> Option<Lease> {
        self.lease(resource).filter(|l| l.is_live(now)).cloned()
    }

    /// Release: rules 5 and 8.
    pub fn release(
        &mut self,
        now: Timestamp,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> ReleaseOutcome {
        match self.check_holder(now, resource, owner, token) {
            Err(refusal) => refusal.into(),
            Ok(lease) => {
                let lease = lease.clone();
                self.set(resource, None);
                self.freed.push(Key::lock(resource));
                ReleaseOutcome::Released(Some(EndedLease { lease, ended_at: now }))
            }
        }
    }

    /// Renew: rules 5 and 8; the token and `acquired_at` stay.
    pub fn renew(
        &mut self,
        now: Timestamp,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> RenewOutcome {
        match self.check_holder(now, resource, owner, token) {
            Err(refusal) => refusal.into(),
            Ok(lease) => {
                let lease = lease.prolonged(now, ttl, false, meta);
                if let Some(Lease { expires_at, .. }) = self.set(resource, Some(lease.clone()))
                    && lease.expires_at < expires_at
                {
                    self.freed.push(Key::lock(resource));
                }
                RenewOutcome::Renewed(lease)
            }
        }
    }

    /// Ends every live lease or hold of `key`, whoever holds it: an administrator's
    /// force-release.
    pub fn force_release(&mut self, now: Timestamp, key: &Key) -> ForceOutcome {
        let ended: Vec<Lease> = match key.kind.hold_kind() {
            None => {
                let lease = self.get(now, &key.name);
                if lease.is_some() {
                    self.set(&key.name, None);
                }
                lease.into_iter().collect()
            }
            Some(kind) => {
                let live = self.holds(now, kind, &key.name);
                for hold in &live {
                    self.set_hold(kind, &key.name, hold.lease.owner.as_str(), None);
                }
                live.into_iter().map(|h| h.lease).collect()
            }
        };
        if ended.is_empty() {
            return ForceOutcome::NotFound;
        }
        self.freed.push(key.clone());
        let ended = ended.into_iter().map(|lease| EndedLease { lease, ended_at: now });
        ForceOutcome::Released(ended.collect())
    }

    /// One page of live leases.
    pub fn list(&self, now: Timestamp, query: &ListQuery) -> LeasePage {
        let start = match &query.after {
            Some(after) if after.as_str() >= query.prefix.as_str() => Bound::Excluded(after.as_str()),
            _ => Bound::Included(query.prefix.as_str()),
        };
        let leases: Vec<Lease> = self
            .leases
            .range::<str, _>((start, Bound::Unbounded))
            .map(|l| &l.0)
            .take_while(|l| l.resource.as_str().starts_with(&query.prefix))
            .filter(|l| l.is_live(now))
            .take(query.limit.saturating_add(1))
            .cloned()
            .collect();
        LeasePage::from_one_past(leases, query.limit)
    }

    /// Forgets leases and holds that have expired at `now` (leases once their lock-delay has
    /// ended too) — at most [`PURGE_BATCH`] of them, so that the writer of the embedded store
    /// is never held long — and every intent that ended, and returns the leases and holds.
    ///
    /// It reads the indexes of ends from their start (see [`LockTable`]), so it costs what has
    /// ended, not what is stored; only the intents, writers waiting (few), are walked. Of more
    /// than a batch, those that ended first go first. The leases come before the holds, each
    /// in the order of their names (and a name's holds in token order), as a walk of the
    /// table found them.
    pub fn purge_expired(&mut self, now: Timestamp) -> Vec<Expired> {
        let mut ended: Vec<Resource> = self
            .closing
            .iter()
            .take_while(|(end, _)| *end <= now)
            .take(PURGE_BATCH)
            .map(|(_, resource)| resource.clone())
            .collect();
        ended.sort_unstable();
        let mut holds: Vec<(HoldKind, Hold)> = self
            .hold_ends
            .iter()
            .take_while(|(end, ..)| *end <= now)
            .take(PURGE_BATCH - ended.len())
            .filter_map(|(_, kind, name, owner)| {
                let group = self.holds.get(&(*kind, name.clone()))?;
                let hold = group.iter().find(|h| h.lease.owner.as_str() == owner)?;
                Some((*kind, hold.clone()))
            })
            .collect();
        holds.sort_unstable_by(|(a, x), (b, y)| {
            (a, &x.lease.resource, x.lease.token).cmp(&(b, &y.lease.resource, y.lease.token))
        });
        if self.intents.values().flatten().any(|i| now >= i.expires_at) {
            self.journal_intents();
            self.intents.retain(|_, intents| {
                intents.retain(|i| now < i.expires_at);
                !intents.is_empty()
            });
        }
        let mut expired = Vec::with_capacity(ended.len() + holds.len());
        for resource in ended {
            let Some(lease) = self.set(&resource, None) else {
                continue;
            };
            self.freed.push(Key::lock(&resource));
            expired.push(Expired {
                kind: Kind::Lock,
                lease,
            });
        }
        for (kind, hold) in holds {
            let name = &hold.lease.resource;
            self.set_hold(kind, name, hold.lease.owner.as_str(), None);
            self.freed.push(Key::hold(kind, name));
            expired.push(Expired {
                kind: kind.into(),
                lease: hold.lease,
            });
        }
        expired
    }

    /// Acquire of a hold: see [`hold::judge`] and [`crate::LockStore::acquire_hold_with`].
    // The trait method's arguments, and the time.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_hold(
        &mut self,
        now: Timestamp,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        intent: Option<Ttl>,
        meta: Option<&Meta>,
    ) -> Result<HoldOutcome, StoreError> {
        let kind = claim.kind();
        let group = self
            .holds
            .get(&(kind, name.clone()))
            .map_or(&[][..], Vec::as_slice);
        let intents = self.intents.get(name).map_or(&[][..], Vec::as_slice);
        let verdict = hold::judge(now, group, intents, owner, claim);
        let own = group
            .iter()
            .find(|h| h.is_live(now) && h.lease.owner == *owner)
            .cloned();
        let outcome = match verdict {
            Verdict::LimitMismatch(limit) => return Ok(HoldOutcome::LimitMismatch { limit }),
            Verdict::Busy(busy) => {
                if let (Claim::Write, Some(intent)) = (claim, intent) {
                    self.intend(now, name, owner, intent);
                }
                return Ok(HoldOutcome::Busy(busy));
            }
            Verdict::Extend => {
                let own =
                    own.ok_or_else(|| StoreError::Corrupt("extending a hold that is not there".into()))?;
                let hold = Hold {
                    lease: Lease {
                        acquired_at: now,
                        expires_at: now.plus(ttl),
                        meta: meta.or(own.lease.meta.as_ref()).cloned(),
                        ..own.lease.clone()
                    },
                    claim,
                };
                if hold.lease.expires_at < own.lease.expires_at {
                    self.freed.push(Key::hold(kind, name));
                }
                HoldOutcome::Extended(hold)
            }
            Verdict::Grant => {
                let token = self.next_token()?;
                let hold = hold::new_hold(name, owner, claim, token, now, ttl, meta);
                if own.is_some() {
                    // An upgrade or a downgrade: what the old hold kept out may now get in.
                    self.freed.push(Key::hold(kind, name));
                }
                HoldOutcome::Granted { hold, replaced: own }
            }
        };
        if let HoldOutcome::Granted { hold, .. } | HoldOutcome::Extended(hold) = &outcome {
            self.set_hold(kind, name, owner.as_str(), Some(hold.clone()));
            if claim == Claim::Write {
                self.withdraw_intent(name, owner);
            }
        }
        Ok(outcome)
    }

    /// The live holds on `name`, in token order.
    pub fn holds(&self, now: Timestamp, kind: HoldKind, name: &Resource) -> Vec<Hold> {
        self.holds
            .get(&(kind, name.clone()))
            .map(|group| group.iter().filter(|h| h.is_live(now)).cloned().collect())
            .unwrap_or_default()
    }

    /// The writers waiting for `name` (as recorded, ended or not): for a store that keeps a
    /// name's whole state itself between calls and loads it into a table for each one
    /// (ZooKeeper), so that it can write back what the table decided.
    pub fn intents(&self, name: &Resource) -> &[Intent] {
        self.intents.get(name).map_or(&[], Vec::as_slice)
    }

    /// Release of a hold: `NotFound` without a live hold of `owner`, `Conflict` on another
    /// token.
    pub fn release_hold(
        &mut self,
        now: Timestamp,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> ReleaseOutcome {
        match self.check_hold(now, kind, name, owner, token) {
            Err(refusal) => refusal.into(),
            Ok(hold) => {
                self.set_hold(kind, name, owner.as_str(), None);
                self.freed.push(Key::hold(kind, name));
                ReleaseOutcome::Released(Some(EndedLease {
                    lease: hold.lease,
                    ended_at: now,
                }))
            }
        }
    }

    /// Renew of a hold, refused as [`LockTable::release_hold`] is; `meta`, if given, replaces
    /// the hold's metadata.
    // The trait method's arguments, and the time.
    #[allow(clippy::too_many_arguments)]
    pub fn renew_hold(
        &mut self,
        now: Timestamp,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> RenewOutcome<Hold> {
        match self.check_hold(now, kind, name, owner, token) {
            Err(refusal) => refusal.into(),
            Ok(before) => {
                let hold = Hold {
                    lease: Lease {
                        expires_at: now.plus(ttl),
                        meta: meta.or(before.lease.meta.as_ref()).cloned(),
                        ..before.lease.clone()
                    },
                    claim: before.claim,
                };
                if hold.lease.expires_at < before.lease.expires_at {
                    self.freed.push(Key::hold(kind, name));
                }
                self.set_hold(kind, name, owner.as_str(), Some(hold.clone()));
                RenewOutcome::Renewed(hold)
            }
        }
    }

    /// One page of the names of `kind` with live holds.
    pub fn list_holds(&self, now: Timestamp, kind: HoldKind, query: &ListQuery) -> HoldPage {
        let prefix = Resource::new(query.prefix.clone()).ok();
        let start = match (&query.after, &prefix) {
            (Some(after), Some(prefix)) if after >= prefix => Bound::Excluded((kind, after.clone())),
            (Some(after), None) => Bound::Excluded((kind, after.clone())),
            (_, Some(prefix)) => Bound::Included((kind, prefix.clone())),
            (None, None) => Bound::Unbounded,
        };
        let names: Vec<(Resource, Vec<Hold>)> = self
            .holds
            .range((start, Bound::Unbounded))
            .skip_while(|((k, _), _)| *k < kind)
            .take_while(|((k, name), _)| *k == kind && name.as_str().starts_with(&query.prefix))
            .filter_map(|((_, name), group)| {
                let live: Vec<Hold> = group.iter().filter(|h| h.is_live(now)).cloned().collect();
                (!live.is_empty()).then(|| (name.clone(), live))
            })
            .take(query.limit.saturating_add(1))
            .collect();
        HoldPage::from_one_past(names, query.limit)
    }

    /// Records (or renews) that `owner` waits to write `name`, until `now + ttl`. Intents are
    /// by the owner's name, as holds are: the latest principal to wait under it has it.
    pub fn intend(&mut self, now: Timestamp, name: &Resource, owner: &Owner, ttl: Ttl) {
        self.journal_intents();
        let intents = self.intents.entry(name.clone()).or_default();
        let expires_at = now.plus(ttl);
        match intents.iter_mut().find(|i| i.owner.as_str() == owner.as_str()) {
            Some(intent) => {
                intent.owner = owner.clone();
                intent.expires_at = expires_at;
            }
            None => intents.push(Intent {
                owner: owner.clone(),
                expires_at,
            }),
        }
    }

    /// Ends `owner`'s intent to write `name`, announcing it if there was one.
    pub fn withdraw_intent(&mut self, name: &Resource, owner: &Owner) {
        if !self.intents.contains_key(name) {
            return;
        }
        self.journal_intents();
        let Some(intents) = self.intents.get_mut(name) else {
            return;
        };
        let before = intents.len();
        intents.retain(|i| i.owner != *owner);
        if intents.len() < before {
            self.freed.push(Key::hold(HoldKind::RwLock, name));
        }
        if intents.is_empty() {
            self.intents.remove(name);
        }
    }

    /// Starts journalling changes, so that they can be undone by [`LockTable::rollback`].
    pub fn begin(&mut self) {
        self.journal = Some(Journal {
            last_token: self.last_token,
            before: HashMap::new(),
            holds_before: HashMap::new(),
            intents_before: None,
            freed: self.freed.len(),
        });
    }

    /// What changed since [`LockTable::begin`], as it is now, keeping the journal open.
    ///
    /// A durable store writes these and only then calls [`LockTable::commit`] — or
    /// [`LockTable::rollback`] if the write failed, which needs the journal still there.
    pub fn changes(&self) -> Vec<Dirty> {
        self.changed()
            .map(|(resource, lease)| (resource.clone(), lease.cloned()))
            .collect()
    }

    /// [`LockTable::changes`] as they are in the table, copying nothing: what a store that
    /// only writes them out (the embedded store's writer, once per batch) reads.
    pub fn changed(&self) -> impl Iterator<Item = (&Resource, Option<&Lease>)> {
        self.journal
            .iter()
            .flat_map(|journal| journal.before.keys())
            .map(|resource| (resource, self.lease(resource)))
    }

    /// The holds that changed since [`LockTable::begin`], as they are now, keeping the
    /// journal open (see [`LockTable::changes`]).
    pub fn hold_changes(&self) -> Vec<DirtyHold> {
        let Some(journal) = &self.journal else {
            return Vec::new();
        };
        journal
            .holds_before
            .keys()
            .map(|id| (id.clone(), self.find_hold(id).cloned()))
            .collect()
    }

    /// Ends journalling: the changes since [`LockTable::begin`] stay for good; after this,
    /// [`LockTable::rollback`] undoes nothing. A store reads what changed before (with
    /// [`LockTable::changed`]): the committing writer used to be handed a second copy of every
    /// changed lease here, and dropped it.
    pub fn commit(&mut self) {
        self.journal = None;
    }

    /// Undoes every change since [`LockTable::begin`], tokens and freed resources included.
    pub fn rollback(&mut self) {
        let Some(journal) = self.journal.take() else {
            return;
        };
        self.last_token = journal.last_token;
        self.freed.truncate(journal.freed);
        for (resource, before) in journal.before {
            self.put(&resource, before);
        }
        for ((kind, name, owner), before) in journal.holds_before {
            self.put_hold(kind, &name, &owner, before);
        }
        if let Some(intents) = journal.intents_before {
            self.intents = intents;
        }
    }

    /// The live lease of `owner`, or why the caller may not touch it (rules 5 and 8).
    fn check_holder(
        &self,
        now: Timestamp,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<&Lease, Refusal> {
        let live = self.lease(resource).filter(|l| l.is_live(now));
        Refusal::check(live, owner, token)
    }

    /// Keeps the intents as they are, once per batch, so that [`LockTable::rollback`] can put
    /// them back.
    fn journal_intents(&mut self) {
        if let Some(journal) = &mut self.journal
            && journal.intents_before.is_none()
        {
            journal.intents_before = Some(self.intents.clone());
        }
    }

    /// The live hold of `owner` on `name`, or why the caller may not touch it: a hold under
    /// its name of another principal is [`Refusal::Forbidden`].
    fn check_hold(
        &self,
        now: Timestamp,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<Hold, Refusal> {
        let own = self.holds.get(&(kind, name.clone())).and_then(|group| {
            group
                .iter()
                .find(|h| h.is_live(now) && h.lease.owner.as_str() == owner.as_str())
        });
        Refusal::check(own.map(|h| &h.lease), owner, token)?;
        own.cloned().ok_or(Refusal::NotFound)
    }

    fn find_hold(&self, (kind, name, owner): &HoldId) -> Option<&Hold> {
        self.holds
            .get(&(*kind, name.clone()))?
            .iter()
            .find(|h| h.lease.owner.as_str() == owner)
    }

    /// Sets `owner`'s hold on `name` (journalled).
    fn set_hold(&mut self, kind: HoldKind, name: &Resource, owner: &str, hold: Option<Hold>) {
        if let Some(journal) = &mut self.journal {
            let id = (kind, name.clone(), owner.to_owned());
            journal.holds_before.entry(id).or_insert_with(|| {
                self.holds
                    .get(&(kind, name.clone()))
                    .and_then(|group| group.iter().find(|h| h.lease.owner.as_str() == owner))
                    .cloned()
            });
        }
        self.put_hold(kind, name, owner, hold);
    }

    /// Sets `owner`'s hold on `name`, keeping the group in token order and `hold_ends` with
    /// it: the one place where the holds change, as [`LockTable::put`] is for leases.
    fn put_hold(&mut self, kind: HoldKind, name: &Resource, owner: &str, hold: Option<Hold>) {
        let key = (kind, name.clone());
        let group = self.holds.entry(key.clone()).or_default();
        group.retain(|h| {
            let other = h.lease.owner.as_str() != owner;
            if !other {
                self.hold_ends.remove(&hold_end(kind, h));
            }
            other
        });
        if let Some(hold) = hold {
            self.hold_ends.insert(hold_end(kind, &hold));
            let at = group.partition_point(|h| h.lease.token < hold.lease.token);
            group.insert(at, hold);
        }
        if group.is_empty() {
            self.holds.remove(&key);
        }
    }

    fn next_token(&mut self) -> Result<FencingToken, StoreError> {
        let next = self
            .last_token
            .checked_add(1)
            .ok_or_else(|| StoreError::Corrupt("fencing tokens are exhausted".into()))?;
        self.last_token = next;
        Ok(FencingToken(next))
    }

    /// Sets the lease on `resource` (journalled) and returns the one it replaced.
    fn set(&mut self, resource: &Resource, lease: Option<Lease>) -> Option<Lease> {
        if let Some(journal) = &mut self.journal {
            journal
                .before
                .entry(resource.clone())
                .or_insert_with(|| self.leases.get(resource).map(|l| l.0.clone()));
        }
        self.put(resource, lease)
    }

    /// Sets the lease on `resource` and its entry in `closing`, and returns the one it
    /// replaced: the one place where the leases change, so that the index follows them.
    fn put(&mut self, resource: &Resource, lease: Option<Lease>) -> Option<Lease> {
        let end = lease.as_ref().map(Lease::closed_until);
        let before = match lease {
            Some(lease) => self.leases.replace(ByResource(lease)),
            None => self.leases.take(resource),
        }
        .map(|l| l.0);
        let was = before.as_ref().map(Lease::closed_until);
        if was != end {
            if let Some(was) = was {
                self.closing.remove(&(was, resource.clone()));
            }
            if let Some(end) = end {
                self.closing.insert((end, resource.clone()));
            }
        }
        before
    }

    /// The lease on `resource`, live or not.
    fn lease(&self, resource: &Resource) -> Option<&Lease> {
        self.leases.get(resource).map(|l| &l.0)
    }
}

/// The index of `leases` by closure (see [`LockTable`]), built at once from its sorted
/// entries: a set made so has full nodes, where one made by an insert at a time has them half
/// to two-thirds full, and costs a sort of the entries rather than a search for each.
fn closing_of(leases: &BTreeSet<ByResource>) -> BTreeSet<(Timestamp, Resource)> {
    let mut ends: Vec<(Timestamp, Resource)> = leases
        .iter()
        .map(|l| (l.0.closed_until(), l.0.resource.clone()))
        .collect();
    // Unstable: it needs no second buffer (a stable sort of ten million entries takes half
    // as many again), and the entries are distinct. Entries that are sorted already (leases
    // that end at once) are found so in one pass.
    ends.sort_unstable();
    // `from_iter` sorts too (stably: one pass over sorted entries) and then builds the nodes
    // from the sorted entries, full.
    BTreeSet::from_iter(ends)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_millis(1_000_000);

    fn r(name: &str) -> Resource {
        Resource::new(name).unwrap()
    }

    fn k(name: &str) -> Key {
        Key::lock(&r(name))
    }

    fn o(name: &str) -> Owner {
        Owner::new(name).unwrap()
    }

    fn ms(ms: u64) -> Ttl {
        Ttl::from_millis(ms, Ttl::DEFAULT_MAX).unwrap()
    }

    fn at(offset_ms: u64) -> Timestamp {
        Timestamp::from_millis(T0.as_millis() + offset_ms)
    }

    /// A table with a live lease on `held` (token 1), an expired one on `stale` (token 2),
    /// a released resource behind them (token 3), and an idle resource `other`.
    fn table() -> LockTable {
        let mut table = LockTable::default();
        table
            .acquire(T0, &r("held"), &o("a"), &Terms::ttl(ms(10_000)))
            .unwrap();
        table
            .acquire(T0, &r("stale"), &o("b"), &Terms::ttl(ms(10)))
            .unwrap();
        table
            .acquire(T0, &r("gone"), &o("c"), &Terms::ttl(ms(10_000)))
            .unwrap();
        table.release(T0, &r("gone"), &o("c"), None);
        table
    }

    /// Everything the table holds, expired leases included, with its indexes of ends (which
    /// must be those of its leases and holds).
    fn state(table: &LockTable) -> (BTreeMap<Resource, Lease>, Indexes, u64) {
        let leases = table
            .leases
            .iter()
            .map(|l| (l.0.resource.clone(), l.0.clone()))
            .collect();
        (leases, indexed(table), table.last_token())
    }

    type Indexes = (BTreeSet<(Timestamp, Resource)>, BTreeSet<HoldEnd>);

    /// The table's indexes, after checking that they are exactly those of its leases and
    /// holds: one entry for each, at its end.
    fn indexed(table: &LockTable) -> Indexes {
        let closing: BTreeSet<_> = table
            .leases
            .iter()
            .map(|l| (l.0.closed_until(), l.0.resource.clone()))
            .collect();
        assert_eq!(table.closing, closing, "the index of leases follows them");
        let hold_ends: BTreeSet<_> = table
            .holds
            .iter()
            .flat_map(|((kind, _), group)| group.iter().map(|h| hold_end(*kind, h)))
            .collect();
        assert_eq!(table.hold_ends, hold_ends, "the index of holds follows them");
        (closing, hold_ends)
    }

    /// What the purge did before the indexes, without changing anything: a walk of every
    /// lease, then of every hold, in name order.
    fn walked(table: &LockTable, now: Timestamp) -> Vec<Expired> {
        let leases = table
            .leases
            .iter()
            .map(|l| &l.0)
            .filter(|l| l.closed_until() <= now)
            .map(|lease| Expired {
                kind: Kind::Lock,
                lease: lease.clone(),
            });
        let holds = table
            .holds
            .iter()
            .flat_map(|((kind, _), group)| group.iter().map(move |h| (*kind, h)))
            .filter(|(_, h)| !h.is_live(now))
            .map(|(kind, h)| Expired {
                kind: kind.into(),
                lease: h.lease.clone(),
            });
        leases.chain(holds).take(PURGE_BATCH).collect()
    }

    /// The resources of `expired`, in the order given.
    fn names(expired: &[Expired]) -> Vec<&str> {
        expired.iter().map(|e| e.lease.resource.as_str()).collect()
    }

    /// Every kind of change, at a time when `stale` has expired.
    fn change_everything(table: &mut LockTable) {
        let now = at(100);
        assert!(matches!(
            table
                .acquire(now, &r("new"), &o("d"), &Terms::ttl(ms(500)))
                .unwrap(),
            AcquireOutcome::Granted { .. }
        ));
        assert!(matches!(
            table
                .acquire(now, &r("stale"), &o("e"), &Terms::ttl(ms(500)))
                .unwrap(),
            AcquireOutcome::Granted { expired: Some(_), .. }
        ));
        assert!(matches!(
            table
                .acquire(now, &r("held"), &o("a"), &Terms::ttl(ms(500)))
                .unwrap(),
            AcquireOutcome::Extended(_)
        ));
        assert!(matches!(
            table.renew(now, &r("held"), &o("a"), ms(700), None, None),
            RenewOutcome::Renewed(_)
        ));
        assert!(matches!(
            table.release(now, &r("new"), &o("d"), None),
            ReleaseOutcome::Released(_)
        ));
        table
            .acquire(now, &r("gone"), &o("f"), &Terms::ttl(ms(1)))
            .unwrap();
        assert_eq!(table.purge_expired(at(200)).len(), 1, "gone has expired");
    }

    #[test]
    fn rollback_restores_leases_and_the_last_token_exactly() {
        let mut table = table();
        let before = state(&table);
        table.begin();
        change_everything(&mut table);
        assert_ne!(state(&table), before);
        assert_eq!(table.last_token(), 6, "three grants in the batch");
        table.rollback();
        assert_eq!(state(&table), before);
        // The tokens of the undone batch were never given to anyone who could use them:
        // the batch's callers were told it failed.
        let next = table
            .acquire(at(100), &r("new"), &o("d"), &Terms::ttl(ms(500)))
            .unwrap();
        let AcquireOutcome::Granted { lease, .. } = next else {
            panic!("expected a grant, got {next:?}");
        };
        assert_eq!(lease.token, FencingToken(4));
    }

    #[test]
    fn changes_report_each_touched_resource_once_as_it_is_now() {
        let mut table = table();
        table.begin();
        change_everything(&mut table);
        let mut changes = table.changes();
        changes.sort_by(|a, b| a.0.cmp(&b.0));
        let names: Vec<&str> = changes.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(names, ["gone", "held", "new", "stale"]);
        for (resource, now) in &changes {
            assert_eq!(now.as_ref(), table.lease(resource), "{resource}");
        }
        // Granted and released in the same batch: no row, as before it.
        assert_eq!(changes[2].1, None);
        assert_eq!(changes[1].1.as_ref().map(|l| l.expires_at), Some(at(800)));
    }

    #[test]
    fn changes_keep_the_journal_open_so_a_failed_write_can_be_undone() {
        let mut table = table();
        let before = state(&table);
        table.begin();
        change_everything(&mut table);
        assert!(!table.changes().is_empty());
        assert_eq!(
            table.changes().len(),
            4,
            "reading the changes does not end the batch"
        );
        table.rollback(); // the write of those changes failed
        assert_eq!(state(&table), before);
        assert!(table.changes().is_empty());
    }

    #[test]
    fn commit_keeps_the_changes_and_ends_the_journal() {
        let mut table = table();
        table.begin();
        change_everything(&mut table);
        let after = state(&table);
        assert_eq!(table.changes().len(), 4);
        table.commit();
        assert!(table.changes().is_empty());
        table.rollback(); // nothing left to undo
        assert_eq!(state(&table), after);
    }

    #[test]
    fn refusals_and_reads_leave_nothing_to_write() {
        let mut table = table();
        let before = state(&table);
        table.begin();
        let now = at(1);
        assert!(matches!(
            table
                .acquire(now, &r("held"), &o("x"), &Terms::ttl(ms(500)))
                .unwrap(),
            AcquireOutcome::Held { .. }
        ));
        assert_eq!(
            table.release(now, &r("held"), &o("x"), None),
            ReleaseOutcome::Forbidden
        );
        assert_eq!(
            table.renew(now, &r("held"), &o("a"), ms(5), Some(FencingToken(9)), None),
            RenewOutcome::Conflict
        );
        assert_eq!(
            table.release(now, &r("other"), &o("a"), None),
            ReleaseOutcome::NotFound
        );
        assert!(table.get(now, &r("held")).is_some());
        assert_eq!(table.purge_expired(now), Vec::new());
        assert!(table.changes().is_empty());
        assert!(table.changed().next().is_none());
        table.commit();
        assert_eq!(state(&table), before);
    }

    #[test]
    fn releases_purges_and_shortenings_are_freed_lengthenings_and_refusals_are_not() {
        let mut table = table();
        table.take_freed();
        let now = at(1);
        table.renew(now, &r("held"), &o("a"), ms(20_000), None, None);
        table
            .acquire(now, &r("held"), &o("a"), &Terms::ttl(ms(30_000)))
            .unwrap();
        table
            .acquire(now, &r("held"), &o("x"), &Terms::ttl(ms(5)))
            .unwrap();
        table.release(now, &r("held"), &o("x"), None);
        assert_eq!(table.take_freed(), Vec::<Key>::new(), "longer, or refused");
        table.renew(now, &r("held"), &o("a"), ms(300), None, None);
        table
            .acquire(now, &r("held"), &o("a"), &Terms::ttl(ms(100)))
            .unwrap();
        assert_eq!(table.take_freed(), [k("held"), k("held")], "shortened twice");
        table
            .acquire(now, &r("new"), &o("d"), &Terms::ttl(ms(500)))
            .unwrap();
        table.release(now, &r("new"), &o("d"), None);
        table.purge_expired(at(1_000));
        assert_eq!(table.take_freed(), [k("new"), k("held"), k("stale")]);
        assert_eq!(table.take_freed(), Vec::<Key>::new(), "taken once");
    }

    #[test]
    fn a_purge_forgets_a_bounded_batch_and_the_next_one_the_rest() {
        let mut table = LockTable::default();
        let many = PURGE_BATCH + 10;
        for i in 0..many {
            table
                .acquire(T0, &r(&format!("r{i}")), &o("a"), &Terms::ttl(ms(10)))
                .unwrap();
        }
        table
            .acquire(T0, &r("live"), &o("a"), &Terms::ttl(ms(10_000)))
            .unwrap();
        assert_eq!(table.purge_expired(at(100)).len(), PURGE_BATCH);
        assert_eq!(table.purge_expired(at(100)).len(), 10);
        assert_eq!(table.purge_expired(at(100)).len(), 0);
        assert!(table.get(at(100), &r("live")).is_some());
    }

    #[test]
    fn rollback_puts_writers_intents_back_as_they_were() {
        let mut table = LockTable::default();
        let (rw, ttl) = (r("rw"), ms(10_000));
        let reader = |table: &mut LockTable, who: &str| {
            table
                .acquire_hold(at(1), &rw, &o(who), Claim::Read, ttl, None, None)
                .unwrap()
        };
        assert!(matches!(reader(&mut table, "a"), HoldOutcome::Granted { .. }));
        table
            .acquire_hold(at(1), &rw, &o("w"), Claim::Write, ttl, Some(ttl), None)
            .unwrap();
        table.begin();
        table.withdraw_intent(&rw, &o("w"));
        table
            .acquire_hold(at(1), &rw, &o("x"), Claim::Write, ttl, Some(ttl), None)
            .unwrap();
        table.rollback();
        // w waits still, and x never did: a new reader is held back by w alone.
        let HoldOutcome::Busy(busy) = reader(&mut table, "c") else {
            panic!("w's intent came back");
        };
        assert!(busy.writer_waits);
        table.withdraw_intent(&rw, &o("w"));
        assert!(
            matches!(reader(&mut table, "c"), HoldOutcome::Granted { .. }),
            "no intent of x"
        );
    }

    #[test]
    fn rollback_forgets_what_the_undone_batch_freed() {
        let mut table = table();
        table.take_freed();
        table
            .acquire(at(1), &r("extra"), &o("z"), &Terms::ttl(ms(50)))
            .unwrap();
        table.release(at(1), &r("extra"), &o("z"), None);
        table.begin();
        change_everything(&mut table);
        table.rollback();
        assert_eq!(
            table.take_freed(),
            [k("extra")],
            "only what came before the batch"
        );
    }

    #[test]
    fn a_release_says_when_the_lease_ended() {
        let mut table = table();
        let outcome = table.release(at(250), &r("held"), &o("a"), None);
        let ReleaseOutcome::Released(Some(ended)) = outcome else {
            panic!("expected a release, got {outcome:?}");
        };
        assert_eq!(ended.ended_at, at(250));
        assert_eq!(ended.held_for(), std::time::Duration::from_millis(250));
        assert_eq!(ended.lease.token, FencingToken(1));
    }

    #[test]
    fn without_begin_nothing_is_journalled() {
        let mut table = table();
        table
            .acquire(at(1), &r("new"), &o("d"), &Terms::ttl(ms(500)))
            .unwrap();
        let after = state(&table);
        assert!(table.changes().is_empty());
        table.rollback();
        assert_eq!(state(&table), after);
    }

    #[test]
    fn a_table_loaded_with_a_counter_behind_its_leases_issues_above_both() {
        let lease = Lease {
            resource: r("held"),
            owner: o("a"),
            token: FencingToken(40),
            acquired_at: T0,
            expires_at: at(10),
            hold_until: None,
            lock_delay: std::time::Duration::ZERO,
            meta: None,
        };
        let mut table = LockTable::new(7, [lease]);
        assert_eq!(table.last_token(), 40);
        let next = table
            .acquire(at(10), &r("held"), &o("b"), &Terms::ttl(ms(5)))
            .unwrap();
        assert!(matches!(next, AcquireOutcome::Granted { lease, .. } if lease.token == FencingToken(41)));
        assert_eq!(LockTable::new(99, []).last_token(), 99);
    }

    #[test]
    fn a_table_that_served_while_the_rest_loaded_takes_it_in_keeping_each_name_it_was_asked_about() {
        // The file: six leases, and what a table that had them all from the start does next.
        let mut whole = LockTable::default();
        for name in ["a", "b", "c", "d", "e", "f"] {
            whole
                .acquire(T0, &r(name), &o("x"), &Terms::ttl(ms(10_000)))
                .unwrap();
        }
        let file: Vec<Lease> = ["a", "b", "c", "d", "e", "f"]
            .into_iter()
            .map(|name| whole.get(T0, &r(name)).unwrap())
            .collect();
        let calls = |table: &mut LockTable| {
            table.release(at(1), &r("a"), &o("x"), None);
            table.release(at(1), &r("d"), &o("x"), None);
            table.renew(at(1), &r("e"), &o("x"), ms(20_000), None, None);
            table
                .acquire(at(1), &r("g"), &o("y"), &Terms::ttl(ms(5)))
                .unwrap();
            assert!(matches!(
                table
                    .acquire(at(1), &r("f"), &o("y"), &Terms::ttl(ms(5)))
                    .unwrap(),
                AcquireOutcome::Held { .. }
            ));
        };
        calls(&mut whole);

        // Served with the first two loaded, each other name read as it is asked about; the
        // rest was read before those calls, so it has "d" and "e" as they were.
        let mut served = LockTable::new(6, file[..2].iter().cloned());
        let mut known = HashSet::new();
        for name in ["d", "e", "g", "f"] {
            known.insert(r(name));
            if let Some(lease) = file.iter().find(|l| l.resource == r(name)) {
                served.load_lease(lease.clone());
            }
        }
        calls(&mut served);
        served.take_in(LockTable::new(6, file[2..].iter().cloned()), &known);

        assert_eq!(state(&served), state(&whole));
        assert_eq!(
            served
                .acquire(at(2), &r("h"), &o("y"), &Terms::ttl(ms(5)))
                .unwrap(),
            whole
                .acquire(at(2), &r("h"), &o("y"), &Terms::ttl(ms(5)))
                .unwrap(),
            "the counter goes on from the same token"
        );
    }

    #[test]
    fn a_renewal_or_extension_moves_the_end_the_purge_reads_later_and_earlier() {
        let mut table = table();
        let (held, a) = (r("held"), o("a"));
        table.renew(at(1), &held, &a, ms(20_000), None, None);
        indexed(&table);
        assert_eq!(
            names(&table.purge_expired(at(15_000))),
            ["stale"],
            "held moved later"
        );
        table.renew(at(15_000), &held, &a, ms(100), None, None);
        indexed(&table);
        assert_eq!(table.purge_expired(at(15_099)), []);
        table.acquire(at(15_050), &held, &a, &Terms::ttl(ms(20))).unwrap();
        indexed(&table);
        assert_eq!(names(&table.purge_expired(at(15_070))), ["held"], "and earlier");
        assert_eq!(table.purge_expired(at(99_999)), []);
        indexed(&table);
    }

    #[test]
    fn a_released_lease_leaves_nothing_to_purge() {
        let mut table = table();
        table.release(at(1), &r("held"), &o("a"), None);
        indexed(&table);
        assert_eq!(names(&table.purge_expired(at(99_999))), ["stale"]);
        assert!(table.closing.is_empty());
    }

    #[test]
    fn a_grant_over_an_expired_lease_is_purged_at_its_own_end() {
        let mut table = table();
        let outcome = table
            .acquire(at(100), &r("stale"), &o("e"), &Terms::ttl(ms(500)))
            .unwrap();
        assert!(matches!(
            outcome,
            AcquireOutcome::Granted { expired: Some(_), .. }
        ));
        indexed(&table);
        assert_eq!(table.purge_expired(at(599)), [], "the old end is gone");
        let purged = table.purge_expired(at(600));
        assert_eq!(names(&purged), ["stale"]);
        assert_eq!(purged[0].lease.owner, o("e"));
    }

    #[test]
    fn a_lease_with_a_lock_delay_is_purged_when_the_delay_ends() {
        let mut table = LockTable::default();
        let terms = Terms::ttl(ms(10)).lock_delay(std::time::Duration::from_millis(1_000));
        table.acquire(T0, &r("x"), &o("a"), &terms).unwrap();
        indexed(&table);
        assert_eq!(table.purge_expired(at(10)), [], "expired, still closed");
        assert_eq!(table.purge_expired(at(1_009)), []);
        assert_eq!(names(&table.purge_expired(at(1_010))), ["x"]);
        // Released before it expires: no delay, nothing left.
        table.acquire(at(2_000), &r("y"), &o("a"), &terms).unwrap();
        table.release(at(2_001), &r("y"), &o("a"), None);
        indexed(&table);
        assert!(table.closing.is_empty());
    }

    #[test]
    fn a_capped_lease_is_purged_at_its_cap_however_it_was_renewed() {
        let mut table = LockTable::default();
        let (x, a) = (r("x"), o("a"));
        let terms = Terms::ttl(ms(1_000)).max_hold(Some(ms(50)));
        table.acquire(T0, &x, &a, &terms).unwrap();
        table.renew(at(10), &x, &a, ms(5_000), None, None);
        table.acquire(at(20), &x, &a, &Terms::ttl(ms(5_000))).unwrap();
        indexed(&table);
        assert_eq!(table.purge_expired(at(49)), []);
        assert_eq!(names(&table.purge_expired(at(50))), ["x"]);
    }

    #[test]
    fn an_undone_purge_puts_its_leases_and_holds_back_in_the_indexes() {
        let mut table = table();
        let (sem, ttl) = (r("sem"), ms(10));
        for who in ["p", "q"] {
            table
                .acquire_hold(T0, &sem, &o(who), Claim::Permit { limit: 2 }, ttl, None, None)
                .unwrap();
        }
        let before = state(&table);
        table.begin();
        let purged = table.purge_expired(at(100));
        assert_eq!(names(&purged), ["stale", "sem", "sem"]);
        table.renew(at(100), &r("held"), &o("a"), ms(1), None, None);
        table.rollback();
        assert_eq!(state(&table), before, "leases, holds and indexes as they were");
        assert_eq!(table.purge_expired(at(100)), purged);
    }

    #[test]
    fn of_more_than_a_batch_those_that_ended_first_go_first_each_batch_in_name_order() {
        let mut table = LockTable::default();
        let many = PURGE_BATCH + 10;
        // r0 ends last: in name order it would go first.
        for i in 0..many {
            let ttl = ms(u64::try_from(many - i).unwrap());
            table
                .acquire(T0, &r(&format!("r{i:04}")), &o("a"), &Terms::ttl(ttl))
                .unwrap();
        }
        let first = table.purge_expired(at(10_000));
        assert_eq!(first.len(), PURGE_BATCH);
        let mut sorted = names(&first);
        sorted.sort_unstable();
        assert_eq!(names(&first), sorted, "name order within a batch");
        assert_eq!(names(&first)[0], "r0010", "r0000 to r0009 ended last");
        let second = table.purge_expired(at(10_000));
        assert_eq!(
            names(&second),
            (0..10).map(|i| format!("r{i:04}")).collect::<Vec<_>>()
        );
        assert!(table.purge_expired(at(10_000)).is_empty());
        indexed(&table);
    }

    #[test]
    fn leases_and_holds_loaded_into_a_table_are_purged_as_the_walk_would() {
        let lease = |name: &str, ends: u64, delay: u64| Lease {
            resource: r(name),
            owner: o("a"),
            token: FencingToken(1),
            acquired_at: T0,
            expires_at: at(ends),
            hold_until: None,
            lock_delay: std::time::Duration::from_millis(delay),
            meta: None,
        };
        let leases = [
            lease("d", 30, 0),
            lease("a", 10, 0),
            lease("c", 5, 100),
            lease("b", 50, 0),
        ];
        let permit = |owner: &str, ends: u64| {
            let mut hold = hold::new_hold(
                &r("sem"),
                &o(owner),
                Claim::Permit { limit: 3 },
                FencingToken(2),
                T0,
                ms(ends),
                None,
            );
            hold.lease.token = FencingToken(if owner == "p" { 3 } else { 2 });
            (HoldKind::Semaphore, hold)
        };
        let mut table = LockTable::new(0, leases).with_holds([permit("p", 20), permit("q", 40)]);
        indexed(&table);
        let expected = walked(&table, at(40));
        assert_eq!(names(&expected), ["a", "d", "sem", "sem"]);
        assert_eq!(table.purge_expired(at(40)), expected);
        assert_eq!(names(&table.purge_expired(at(200))), ["b", "c"]);
        indexed(&table);
    }

    /// Random calls on a few names, in and out of batches, some undone: after each, the
    /// indexes are those of the table, and every purge returns what a walk of the table
    /// would have.
    #[test]
    fn the_indexed_purge_forgets_what_the_walk_would_on_random_calls() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            // xorshift64: enough to vary the calls, and the same on every run.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let names = ["a", "b", "c", "d", "e", "f"];
        let owners = ["p", "q", "s"];
        let mut table = LockTable::default();
        let mut now = T0;
        let mut purged = 0;
        for _ in 0..20_000 {
            now = Timestamp::from_millis(now.as_millis() + next(30));
            let name = r(names[usize::try_from(next(6)).unwrap()]);
            let owner = o(owners[usize::try_from(next(3)).unwrap()]);
            let ttl = ms(1 + next(200));
            match next(12) {
                0 | 1 => {
                    let terms = Terms::ttl(ttl)
                        .lock_delay(std::time::Duration::from_millis(next(3) * next(100)))
                        .max_hold((next(3) == 0).then(|| ms(1 + next(150))));
                    table.acquire(now, &name, &owner, &terms).unwrap();
                }
                2 => {
                    table.renew(now, &name, &owner, ttl, None, None);
                }
                3 => {
                    table.release(now, &name, &owner, None);
                }
                4 => {
                    table.force_release(now, &Key::lock(&name));
                }
                5 => {
                    let claim = [Claim::Permit { limit: 2 }, Claim::Read, Claim::Write]
                        [usize::try_from(next(3)).unwrap()];
                    table
                        .acquire_hold(now, &name, &owner, claim, ttl, Some(ttl), None)
                        .unwrap();
                }
                6 => {
                    let kind = [HoldKind::Semaphore, HoldKind::RwLock][usize::try_from(next(2)).unwrap()];
                    if next(2) == 0 {
                        table.renew_hold(now, kind, &name, &owner, ttl, None, None);
                    } else {
                        table.release_hold(now, kind, &name, &owner, None);
                    }
                }
                7 => table.begin(),
                8 => table.commit(),
                9 => table.rollback(),
                _ => {
                    let expected = walked(&table, now);
                    let got = table.purge_expired(now);
                    assert_eq!(got, expected, "at {now}");
                    purged += got.len();
                }
            }
            indexed(&table);
        }
        assert!(purged > 1_000, "the purges had work: {purged}");
    }
}
