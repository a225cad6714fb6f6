//! [`Layered`]: a store wrapped in a [`Layer`] that sees every call go by — a deadline on
//! each call, the time each one takes, calls on one name taking turns — written once instead
//! of once per wrapper.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::hold::{Claim, Expired, Hold, HoldKind, HoldOutcome, HoldPage, Key, Kind};
use crate::model::{FencingToken, Lease, Meta, Owner, Resource, Resources, Terms, Ttl};
use crate::store::{
    AcquireAllOutcome, AcquireOutcome, Bulletin, Capabilities, ForceOutcome, Heard, LeasePage, ListQuery,
    LockStore, ReleaseNotice, ReleaseOutcome, RenewOutcome, Result, Watch,
};

/// A call of [`LockStore`], by name, as a [`Layer`] is told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// [`LockStore::acquire_with`] (and [`LockStore::acquire`]).
    Acquire,
    /// [`LockStore::acquire_all`].
    AcquireAll,
    /// [`LockStore::get`].
    Get,
    /// [`LockStore::release`].
    Release,
    /// [`LockStore::renew`].
    Renew,
    /// [`LockStore::list`].
    List,
    /// [`LockStore::purge_expired`].
    Purge,
    /// [`LockStore::ping`].
    Ping,
    /// [`LockStore::acquire_hold`].
    AcquireHold,
    /// [`LockStore::holds`].
    Holds,
    /// [`LockStore::release_hold`].
    ReleaseHold,
    /// [`LockStore::renew_hold`].
    RenewHold,
    /// [`LockStore::list_holds`].
    ListHolds,
    /// [`LockStore::withdraw_intent`].
    WithdrawIntent,
    /// [`LockStore::force_release`].
    ForceRelease,
}

impl Call {
    /// The call's name, for messages and metric labels (`acquire`, `acquire_hold`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::AcquireAll => "acquire_all",
            Self::Get => "get",
            Self::Release => "release",
            Self::Renew => "renew",
            Self::List => "list",
            Self::Purge => "purge",
            Self::Ping => "ping",
            Self::AcquireHold => "acquire_hold",
            Self::Holds => "holds",
            Self::ReleaseHold => "release_hold",
            Self::RenewHold => "renew_hold",
            Self::ListHolds => "list_holds",
            Self::WithdrawIntent => "withdraw_intent",
            Self::ForceRelease => "force_release",
        }
    }
}

/// The names a call may change, as a [`Layer`] is told them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names<'a> {
    /// None: the call only reads, or goes over many names at once (list, purge, ping).
    None,
    /// One name of one kind.
    One(Kind, &'a Resource),
    /// Several locks at once ([`LockStore::acquire_all`]).
    Locks(&'a Resources),
}

/// What a [`Layered`] store does around each call to the store underneath.
pub trait Layer: Send + Sync + std::fmt::Debug + 'static {
    /// Runs `inner`, the call `call` to the store underneath that may change `names`, and
    /// gives its result (or another one: a deadline answers
    /// [`crate::StoreError::Unavailable`] when it runs out).
    fn around<T: Send>(
        &self,
        call: Call,
        names: Names<'_>,
        inner: impl Future<Output = Result<T>> + Send,
    ) -> impl Future<Output = Result<T>> + Send;
}

/// `inner`, with `layer` around each of its calls. The release feed and the capabilities are
/// the store's own.
#[derive(Debug)]
pub struct Layered<S, L> {
    inner: S,
    layer: L,
}

impl<S, L> Layered<S, L> {
    /// `inner` wrapped in `layer`.
    pub fn new(inner: S, layer: L) -> Self {
        Self { inner, layer }
    }

    /// The store underneath.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The layer.
    pub fn layer(&self) -> &L {
        &self.layer
    }
}

#[async_trait]
impl<S: LockStore, L: Layer> LockStore for Layered<S, L> {
    async fn acquire_with(&self, resource: &Resource, owner: &Owner, terms: Terms) -> Result<AcquireOutcome> {
        let call = self.inner.acquire_with(resource, owner, terms);
        let names = Names::One(Kind::Lock, resource);
        self.layer.around(Call::Acquire, names, call).await
    }

    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        let call = self.inner.acquire_all(resources, owner, terms);
        let names = Names::Locks(resources);
        self.layer.around(Call::AcquireAll, names, call).await
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        let call = self.inner.get(resource);
        self.layer.around(Call::Get, Names::None, call).await
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let call = self.inner.release(resource, owner, token);
        let names = Names::One(Kind::Lock, resource);
        self.layer.around(Call::Release, names, call).await
    }

    async fn renew_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome> {
        let call = self.inner.renew_with(resource, owner, ttl, token, meta);
        let names = Names::One(Kind::Lock, resource);
        self.layer.around(Call::Renew, names, call).await
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        let call = self.inner.list(query);
        self.layer.around(Call::List, Names::None, call).await
    }

    async fn purge_expired(&self) -> Result<Vec<Expired>> {
        let call = self.inner.purge_expired();
        self.layer.around(Call::Purge, Names::None, call).await
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
        let call = self
            .inner
            .acquire_hold_with(name, owner, claim, ttl, intent, meta);
        let names = Names::One(claim.kind().into(), name);
        self.layer.around(Call::AcquireHold, names, call).await
    }

    async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        let call = self.inner.holds(kind, name);
        self.layer.around(Call::Holds, Names::None, call).await
    }

    async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let call = self.inner.release_hold(kind, name, owner, token);
        let names = Names::One(kind.into(), name);
        self.layer.around(Call::ReleaseHold, names, call).await
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
        let call = self.inner.renew_hold_with(kind, name, owner, ttl, token, meta);
        let names = Names::One(kind.into(), name);
        self.layer.around(Call::RenewHold, names, call).await
    }

    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage> {
        let call = self.inner.list_holds(kind, query);
        self.layer.around(Call::ListHolds, Names::None, call).await
    }

    async fn withdraw_intent(&self, name: &Resource, owner: &Owner) -> Result<()> {
        let call = self.inner.withdraw_intent(name, owner);
        // Intents are a read-write lock's.
        let names = Names::One(Kind::RwLock, name);
        self.layer.around(Call::WithdrawIntent, names, call).await
    }

    async fn force_release(&self, key: &Key) -> Result<ForceOutcome> {
        let call = self.inner.force_release(key);
        let names = Names::One(key.kind, &key.name);
        self.layer.around(Call::ForceRelease, names, call).await
    }

    async fn ping(&self) -> Result<()> {
        let call = self.inner.ping();
        self.layer.around(Call::Ping, Names::None, call).await
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        self.inner.releases()
    }

    fn publish(&self, bulletin: &Bulletin) {
        self.inner.publish(bulletin);
    }

    fn bulletins(&self) -> Option<broadcast::Receiver<Heard>> {
        self.inner.bulletins()
    }

    async fn watch(&self, key: &Key) -> Watch {
        self.inner.watch(key).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

/// A shared store is a store: so that a layer can wrap an `Arc<dyn LockStore>`.
#[async_trait]
impl<S: LockStore + ?Sized> LockStore for Arc<S> {
    async fn acquire_with(&self, resource: &Resource, owner: &Owner, terms: Terms) -> Result<AcquireOutcome> {
        (**self).acquire_with(resource, owner, terms).await
    }

    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        (**self).acquire_all(resources, owner, terms).await
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        (**self).get(resource).await
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        (**self).release(resource, owner, token).await
    }

    async fn renew_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome> {
        (**self).renew_with(resource, owner, ttl, token, meta).await
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        (**self).list(query).await
    }

    async fn purge_expired(&self) -> Result<Vec<Expired>> {
        (**self).purge_expired().await
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
        (**self)
            .acquire_hold_with(name, owner, claim, ttl, intent, meta)
            .await
    }

    async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        (**self).holds(kind, name).await
    }

    async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        (**self).release_hold(kind, name, owner, token).await
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
        (**self)
            .renew_hold_with(kind, name, owner, ttl, token, meta)
            .await
    }

    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage> {
        (**self).list_holds(kind, query).await
    }

    async fn withdraw_intent(&self, name: &Resource, owner: &Owner) -> Result<()> {
        (**self).withdraw_intent(name, owner).await
    }

    async fn force_release(&self, key: &Key) -> Result<ForceOutcome> {
        (**self).force_release(key).await
    }

    async fn ping(&self) -> Result<()> {
        (**self).ping().await
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        (**self).releases()
    }

    fn publish(&self, bulletin: &Bulletin) {
        (**self).publish(bulletin);
    }

    fn bulletins(&self) -> Option<broadcast::Receiver<Heard>> {
        (**self).bulletins()
    }

    async fn watch(&self, key: &Key) -> Watch {
        (**self).watch(key).await
    }

    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
}
