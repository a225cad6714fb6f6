//! [`Deadline`]: any [`LockStore`], with a deadline on every call.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::store::Result;
use fencelock_core::{
    AcquireOutcome, Capabilities, FencingToken, Lease, LeasePage, ListQuery, LockStore, Owner, ReleaseNotice,
    ReleaseOutcome, RenewOutcome, Resource, StoreError, Ttl,
};
use tokio::sync::broadcast;

/// A [`LockStore`] whose every call gives up with [`StoreError::Unavailable`] after a
/// deadline, so that no call hangs on a server that stopped answering. The stores on a
/// network server ([`crate::postgres`], [`crate::etcd`]) are opened wrapped in one.
///
/// A call that ran out of time may still take effect on the server: its outcome is unknown,
/// as the [`LockStore`] contract says of any `Err`.
pub struct Deadline<S> {
    inner: S,
    store: &'static str,
    limit: Duration,
}

impl<S> Deadline<S> {
    /// `inner`, with `limit` on each call; `store` names it in error messages
    /// (`"PostgreSQL: acquire: no answer within 7s"`).
    pub fn new(inner: S, store: &'static str, limit: Duration) -> Self {
        Self { inner, store, limit }
    }

    /// The store underneath, with no deadline.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The most one call may take.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    async fn run<T>(&self, doing: &str, call: impl Future<Output = Result<T>>) -> Result<T> {
        within(self.limit, self.store, doing, call).await
    }
}

impl<S: fmt::Debug> fmt::Debug for Deadline<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deadline")
            .field("limit", &self.limit)
            .field("inner", &self.inner)
            .finish()
    }
}

/// Runs `call`, or gives up with [`StoreError::Unavailable`] after `limit`. `store` and
/// `doing` name the store and the call, for the error message. Also used for the work of
/// opening a store, which is no [`LockStore`] call.
pub(crate) async fn within<T>(
    limit: Duration,
    store: &str,
    doing: &str,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        Err(StoreError::Unavailable {
            message: format!("{store}: {doing}: no answer within {limit:?}"),
            source: None,
        })
    })
}

#[async_trait]
impl<S: LockStore> LockStore for Deadline<S> {
    async fn acquire(&self, resource: &Resource, owner: &Owner, ttl: Ttl) -> Result<AcquireOutcome> {
        self.run("acquire", self.inner.acquire(resource, owner, ttl))
            .await
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        self.run("get", self.inner.get(resource)).await
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        self.run("release", self.inner.release(resource, owner, token))
            .await
    }

    async fn renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
    ) -> Result<RenewOutcome> {
        self.run("renew", self.inner.renew(resource, owner, ttl, token))
            .await
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        self.run("list", self.inner.list(query)).await
    }

    async fn purge_expired(&self) -> Result<Vec<Lease>> {
        self.run("purge expired leases", self.inner.purge_expired()).await
    }

    async fn ping(&self) -> Result<()> {
        self.run("ping", self.inner.ping()).await
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        self.inner.releases()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store that never answers.
    #[derive(Debug)]
    struct Silent;

    #[async_trait]
    impl LockStore for Silent {
        async fn acquire(&self, _: &Resource, _: &Owner, _: Ttl) -> Result<AcquireOutcome> {
            std::future::pending().await
        }
        async fn get(&self, _: &Resource) -> Result<Option<Lease>> {
            std::future::pending().await
        }
        async fn release(&self, _: &Resource, _: &Owner, _: Option<FencingToken>) -> Result<ReleaseOutcome> {
            std::future::pending().await
        }
        async fn renew(
            &self,
            _: &Resource,
            _: &Owner,
            _: Ttl,
            _: Option<FencingToken>,
        ) -> Result<RenewOutcome> {
            std::future::pending().await
        }
        async fn list(&self, _: &ListQuery) -> Result<LeasePage> {
            std::future::pending().await
        }
        async fn purge_expired(&self) -> Result<Vec<Lease>> {
            std::future::pending().await
        }
        async fn ping(&self) -> Result<()> {
            std::future::pending().await
        }
        fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
            None
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                ttl_granularity: Duration::from_millis(1),
                durable: false,
                knows_released_lease: true,
                shared: false,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_with_no_answer_fails_naming_the_store_and_the_call() {
        let store = Deadline::new(Silent, "Silent", Duration::from_secs(7));
        let error = store.ping().await.unwrap_err();
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error}");
        assert_eq!(
            error.to_string(),
            "store unavailable: Silent: ping: no answer within 7s"
        );
    }
}
