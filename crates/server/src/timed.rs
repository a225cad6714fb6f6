//! [`Timed`]: the server's store, with the time of every call and every failure counted.

use std::sync::Arc;

use async_trait::async_trait;
use fencelock_core::store::Result;
use fencelock_core::{
    AcquireOutcome, Capabilities, FencingToken, Lease, LeasePage, ListQuery, LockStore, Owner, ReleaseNotice,
    ReleaseOutcome, RenewOutcome, Resource, Ttl,
};
use tokio::sync::broadcast;
use tokio::time::Instant;

use fencelock_wire::Op;

use crate::metrics::{Metrics, StoreOp};

/// A [`LockStore`] that times each call to `inner` and counts those that fail
/// (`fencelock_store_duration_seconds`, `fencelock_store_errors_total`). It wraps the store
/// under the waiters, so a waiting acquire counts each of its tries and never its wait.
#[derive(Debug)]
pub struct Timed {
    inner: Arc<dyn LockStore>,
    metrics: Arc<Metrics>,
}

impl Timed {
    /// `inner`, counted in `metrics`.
    pub fn new(inner: Arc<dyn LockStore>, metrics: Arc<Metrics>) -> Self {
        Self { inner, metrics }
    }

    async fn run<T>(&self, op: StoreOp, call: impl Future<Output = Result<T>>) -> Result<T> {
        let started = Instant::now();
        let result = call.await;
        self.metrics.store_call(op, started.elapsed(), result.is_err());
        result
    }
}

#[async_trait]
impl LockStore for Timed {
    async fn acquire(&self, resource: &Resource, owner: &Owner, ttl: Ttl) -> Result<AcquireOutcome> {
        self.run(
            StoreOp::Call(Op::Acquire),
            self.inner.acquire(resource, owner, ttl),
        )
        .await
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        self.run(StoreOp::Call(Op::Get), self.inner.get(resource)).await
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        self.run(
            StoreOp::Call(Op::Release),
            self.inner.release(resource, owner, token),
        )
        .await
    }

    async fn renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome> {
        self.run(
            StoreOp::Call(Op::Renew),
            self.inner.renew(resource, owner, ttl, token),
        )
        .await
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        self.run(StoreOp::Call(Op::List), self.inner.list(query)).await
    }

    async fn purge_expired(&self) -> Result<Vec<Lease>> {
        self.run(StoreOp::Purge, self.inner.purge_expired()).await
    }

    async fn ping(&self) -> Result<()> {
        self.run(StoreOp::Ping, self.inner.ping()).await
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        self.inner.releases()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
