//! [`MemoryStore`] (`memory://`): the reference store, for tests and single processes.

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::clock::{Clock, SystemClock};
use crate::hold::{Claim, Expired, Hold, HoldKind, HoldOutcome, HoldPage, Key};
use crate::model::{FencingToken, Lease, Meta, Owner, Resource, Resources, Terms, Timestamp, Ttl};
use crate::store::{
    AcquireAllOutcome, AcquireOutcome, Capabilities, ForceOutcome, LeasePage, ListQuery, LockStore,
    ReleaseFeed, ReleaseNotice, ReleaseOutcome, RenewOutcome, Result,
};
use crate::table::LockTable;

/// A store that keeps leases in this process's memory: nothing survives a restart and
/// nothing is shared with another process.
#[derive(Debug)]
pub struct MemoryStore {
    // A std mutex is right here: it is never held across an `.await`, and every critical
    // section is a few map operations.
    table: Mutex<LockTable>,
    clock: Arc<dyn Clock>,
    released: ReleaseFeed,
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock::new()))
    }

    /// An empty store on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            table: Mutex::new(LockTable::default()),
            clock,
            released: ReleaseFeed::new(),
        }
    }

    fn table(&self) -> MutexGuard<'_, LockTable> {
        // A panic while holding the lock cannot leave the table half-changed: every method
        // of LockTable changes it in one step. So a poisoned lock is still safe to use.
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies `op` to the table at the clock's time, then announces what it freed.
    fn apply<T>(&self, op: impl FnOnce(&mut LockTable, Timestamp) -> T) -> T {
        let (answer, freed) = {
            let mut table = self.table();
            let answer = op(&mut table, self.clock.now());
            (answer, table.take_freed())
        };
        for key in &freed {
            self.released.announce(key);
        }
        answer
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl LockStore for MemoryStore {
    async fn acquire_with(&self, resource: &Resource, owner: &Owner, terms: Terms) -> Result<AcquireOutcome> {
        self.apply(|table, now| table.acquire(now, resource, owner, &terms))
    }

    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        self.apply(|table, now| table.acquire_all(now, resources, owner, &terms))
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        Ok(self.table().get(self.clock.now(), resource))
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        Ok(self.apply(|table, now| table.release(now, resource, owner, token)))
    }

    async fn renew_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome> {
        Ok(self.apply(|table, now| table.renew(now, resource, owner, ttl, token, meta)))
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        Ok(self.table().list(self.clock.now(), query))
    }

    async fn purge_expired(&self) -> Result<Vec<Expired>> {
        Ok(self.apply(|table, now| table.purge_expired(now)))
    }

    async fn acquire_hold_with(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        intent: Option<Ttl>,
        meta: Option<&Meta>,
    ) -> Result<HoldOutcome> {
        self.apply(|table, now| table.acquire_hold(now, name, owner, claim, ttl, intent, meta))
    }

    async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        Ok(self.table().holds(self.clock.now(), kind, name))
    }

    async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        Ok(self.apply(|table, now| table.release_hold(now, kind, name, owner, token)))
    }

    async fn renew_hold_with(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome<Hold>> {
        Ok(self.apply(|table, now| table.renew_hold(now, kind, name, owner, ttl, token, meta)))
    }

    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage> {
        Ok(self.table().list_holds(self.clock.now(), kind, query))
    }

    async fn withdraw_intent(&self, name: &Resource, owner: &Owner) -> Result<()> {
        self.apply(|table, _| table.withdraw_intent(name, owner));
        Ok(())
    }

    async fn force_release(&self, key: &Key) -> Result<ForceOutcome> {
        Ok(self.apply(|table, now| table.force_release(now, key)))
    }

    async fn ping(&self) -> Result<()> {
        Ok(())
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        Some(self.released.subscribe())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::BASELINE
    }
}
