//! [`LockTable`]: the rules of fencelock as a pure state machine over leases held in memory.
//!
//! The in-memory store is a table behind a mutex; the embedded store is a table owned by its
//! writer thread, with every change journalled so that a batch whose commit fails can be
//! undone. The time is always passed in, so the rules are tested without a clock.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use crate::model::{FencingToken, Lease, Owner, Resource, Timestamp, Ttl};
use crate::store::{AcquireOutcome, LeasePage, ListQuery, ReleaseOutcome, RenewOutcome, StoreError};

/// Leases by resource, and the last fencing token issued.
#[derive(Debug, Default)]
pub struct LockTable {
    leases: BTreeMap<Resource, Lease>,
    last_token: u64,
    journal: Option<Journal>,
}

/// What a batch changed, kept until it is committed or undone.
#[derive(Debug)]
struct Journal {
    last_token: u64,
    before: HashMap<Resource, Option<Lease>>,
}

/// A resource a committed batch changed, with the lease it has now (`None`: no row).
pub type Dirty = (Resource, Option<Lease>);

impl LockTable {
    /// A table holding `leases` (live or not), whose last issued token was `last_token`.
    /// `last_token` must be at least every lease's token.
    pub fn new(last_token: u64, leases: impl IntoIterator<Item = Lease>) -> Self {
        let leases: BTreeMap<_, _> = leases.into_iter().map(|l| (l.resource.clone(), l)).collect();
        let highest = leases.values().map(|l| l.token.0).max().unwrap_or(0);
        Self {
            leases,
            last_token: last_token.max(highest),
            journal: None,
        }
    }

    /// The last fencing token issued (0 if none yet).
    pub fn last_token(&self) -> u64 {
        self.last_token
    }

    /// Acquire: rules 2, 3 and 4 of the SPEC.
    pub fn acquire(
        &mut self,
        now: Timestamp,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<AcquireOutcome, StoreError> {
        let expires_at = now.plus(ttl);
        let current = self.leases.get(resource);
        let outcome = match current {
            Some(lease) if lease.is_live(now) && lease.owner == *owner => {
                let lease = Lease {
                    acquired_at: now,
                    expires_at,
                    ..lease.clone()
                };
                AcquireOutcome::Extended(lease)
            }
            Some(lease) if lease.is_live(now) => {
                return Ok(AcquireOutcome::Held {
                    holder: lease.clone(),
                    expires_in: lease.expires_in(now),
                });
            }
            expired => {
                let expired = expired.cloned();
                let token = self.next_token()?;
                let lease = Lease {
                    resource: resource.clone(),
                    owner: owner.clone(),
                    token,
                    acquired_at: now,
                    expires_at,
                };
                AcquireOutcome::Granted { lease, expired }
            }
        };
        if let AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease) = &outcome {
            self.set(resource, Some(lease.clone()));
        }
        Ok(outcome)
    }

    /// The live lease on `resource`.
    pub fn get(&self, now: Timestamp, resource: &Resource) -> Option<Lease> {
        self.leases.get(resource).filter(|l| l.is_live(now)).cloned()
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
                ReleaseOutcome::Released(lease)
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
    ) -> RenewOutcome {
        match self.check_holder(now, resource, owner, token) {
            Err(refusal) => refusal.into(),
            Ok(lease) => {
                let lease = Lease {
                    expires_at: now.plus(ttl),
                    ..lease.clone()
                };
                self.set(resource, Some(lease.clone()));
                RenewOutcome::Renewed(lease)
            }
        }
    }

    /// One page of live leases.
    pub fn list(&self, now: Timestamp, query: &ListQuery) -> LeasePage {
        let start = match &query.after {
            Some(after) if after.as_str() >= query.prefix.as_str() => Bound::Excluded(after.as_str()),
            _ => Bound::Included(query.prefix.as_str()),
        };
        let mut leases: Vec<Lease> = self
            .leases
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(r, _)| r.as_str().starts_with(&query.prefix))
            .map(|(_, l)| l)
            .filter(|l| l.is_live(now))
            .take(query.limit.saturating_add(1))
            .cloned()
            .collect();
        let next = if leases.len() > query.limit {
            leases.truncate(query.limit);
            leases.last().map(|l| l.resource.clone())
        } else {
            None
        };
        LeasePage { leases, next }
    }

    /// Forgets every lease that has expired at `now` and returns them.
    pub fn purge_expired(&mut self, now: Timestamp) -> Vec<Lease> {
        let expired: Vec<Lease> = self
            .leases
            .values()
            .filter(|l| !l.is_live(now))
            .cloned()
            .collect();
        for lease in &expired {
            self.set(&lease.resource, None);
        }
        expired
    }

    /// Starts journalling changes, so that they can be undone by [`LockTable::rollback`].
    pub fn begin(&mut self) {
        self.journal = Some(Journal {
            last_token: self.last_token,
            before: HashMap::new(),
        });
    }

    /// Ends journalling and returns what changed since [`LockTable::begin`], as it is now.
    pub fn commit(&mut self) -> Vec<Dirty> {
        let Some(journal) = self.journal.take() else {
            return Vec::new();
        };
        journal
            .before
            .into_keys()
            .map(|r| {
                let now = self.leases.get(&r).cloned();
                (r, now)
            })
            .collect()
    }

    /// Undoes every change since [`LockTable::begin`], tokens included.
    pub fn rollback(&mut self) {
        let Some(journal) = self.journal.take() else {
            return;
        };
        self.last_token = journal.last_token;
        for (resource, before) in journal.before {
            match before {
                Some(lease) => self.leases.insert(resource, lease),
                None => self.leases.remove(&resource),
            };
        }
    }

    /// The live lease of `owner`, or why the caller may not touch it (rules 5 and 8, in the
    /// SPEC's order: absence first, then owner, then token).
    fn check_holder(
        &self,
        now: Timestamp,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<&Lease, Refusal> {
        match self.leases.get(resource) {
            Some(lease) if lease.is_live(now) => {
                if lease.owner != *owner {
                    Err(Refusal::Forbidden)
                } else if token.is_some_and(|t| t != lease.token) {
                    Err(Refusal::Conflict)
                } else {
                    Ok(lease)
                }
            }
            _ => Err(Refusal::NotFound),
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

    fn set(&mut self, resource: &Resource, lease: Option<Lease>) {
        if let Some(journal) = &mut self.journal {
            journal
                .before
                .entry(resource.clone())
                .or_insert_with(|| self.leases.get(resource).cloned());
        }
        match lease {
            Some(lease) => self.leases.insert(resource.clone(), lease),
            None => self.leases.remove(resource),
        };
    }
}

/// Why a release or renew was refused.
enum Refusal {
    NotFound,
    Forbidden,
    Conflict,
}

impl From<Refusal> for ReleaseOutcome {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotFound => Self::NotFound,
            Refusal::Forbidden => Self::Forbidden,
            Refusal::Conflict => Self::Conflict,
        }
    }
}

impl From<Refusal> for RenewOutcome {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotFound => Self::NotFound,
            Refusal::Forbidden => Self::Forbidden,
            Refusal::Conflict => Self::Conflict,
        }
    }
}
