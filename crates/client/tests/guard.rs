//! The lease guard against a real server: it renews, it notices a loss before the expiry it
//! last confirmed, it frees the lock when dropped, and its late release never frees a newer
//! lease.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::{TestServer, eventually, owner, resource, take_over, ttl};
use fencelock_client::{
    AcquireError, AcquireOutcome, Client, FencingToken, GuardOptions, HttpOptions, HttpStore, Lease,
    LeasePage, LeaseState, ListQuery, LockStore, LostReason, Owner, ReleaseOutcome, RenewOutcome, Resource,
    StoreError, Timestamp, Ttl, connect, with_lock,
};
use fencelock_core::{Capabilities, MemoryStore, ReleaseNotice, Terms};
use futures_util::FutureExt;
use tokio::sync::broadcast;
use tokio::time::{Instant, timeout};

const LIMIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_guard_renews_across_five_ttls() {
    let server = TestServer::start();
    let client = connect(&server.url).await.unwrap();
    let r = resource("renewed");
    let guard = client.try_acquire(&r, &owner("a"), ttl(500)).await.unwrap();
    let first = guard.lease();
    let until = Instant::now() + Duration::from_millis(2600);
    let mut looks = 0;
    while Instant::now() < until {
        // The server says the same lease is live the whole time, and the guard agrees.
        let live = client.get(&r).await.unwrap().expect("the lease stayed live");
        assert_eq!(live.token, first.token);
        assert_eq!(guard.state(), LeaseState::Held);
        looks += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(looks > 20);
    let last = client.get(&r).await.unwrap().unwrap();
    assert!(
        last.expires_at.since(first.expires_at) >= Duration::from_millis(2000),
        "renewed from {} to {} only",
        first.expires_at,
        last.expires_at
    );
    assert_eq!(guard.expires_at(), last.expires_at);
    assert!(matches!(
        guard.release().await.unwrap(),
        ReleaseOutcome::Released(_)
    ));
    assert_eq!(client.get(&r).await.unwrap(), None);
}

#[tokio::test]
async fn lost_fires_before_the_confirmed_expiry_when_renewal_stops_and_the_next_holder_wins() {
    let server = TestServer::start();
    let client = connect(&server.url).await.unwrap();
    let r = resource("paused");
    let a = client.try_acquire(&r, &owner("a"), ttl(600)).await.unwrap();
    a.pause_renewal();
    let reason = timeout(LIMIT, a.lost()).await.expect("lost() fired");
    let (now, wall) = (std::time::Instant::now(), Timestamp::now_wall());
    assert!(matches!(reason, LostReason::NotRenewed { .. }), "{reason}");
    assert!(now < a.held_until(), "lost() fired after the confirmed expiry");
    // By the server's clock too, A still held the lease when it was told it lost it.
    let live = client.get(&r).await.unwrap().expect("the lease is still live");
    assert_eq!(live.token, a.token());
    assert!(wall < live.expires_at, "{wall} is not before {}", live.expires_at);
    assert!(!a.is_held());

    let b = take_over(&client, &r, &owner("b"), ttl(10_000)).await;
    assert!(b.token() > a.token());
    // A's late release carries its token, and B's lease is another owner's: nothing changes.
    assert_eq!(a.release().await.unwrap(), ReleaseOutcome::Forbidden);
    assert_eq!(client.get(&r).await.unwrap().map(|l| l.token), Some(b.token()));
}

#[tokio::test]
async fn lost_fires_when_the_lease_is_taken_during_a_pause() {
    let server = TestServer::start();
    let client = connect(&server.url).await.unwrap();
    let r = resource("taken");
    let a = client.try_acquire(&r, &owner("a"), ttl(5_000)).await.unwrap();
    a.pause_renewal();
    // While A is paused, its lease is deleted by force and B takes the lock.
    server.store.release(&r, &owner("a"), None).await.unwrap();
    let b = client.try_acquire(&r, &owner("b"), ttl(5_000)).await.unwrap();
    assert_eq!(a.state(), LeaseState::Held, "A cannot know yet");
    a.resume_renewal();
    let reason = timeout(LIMIT, a.lost()).await.expect("lost() fired");
    assert_eq!(reason, LostReason::Taken);
    assert_eq!(a.state(), LeaseState::Lost(LostReason::Taken));
    drop(a);
    // Dropping the lost guard does not touch B's lease.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(client.get(&r).await.unwrap().map(|l| l.token), Some(b.token()));
}

#[tokio::test]
async fn lost_fires_at_the_next_renewal_when_the_lease_is_deleted() {
    let server = TestServer::start();
    let client = connect(&server.url).await.unwrap();
    let r = resource("deleted");
    let a = client.try_acquire(&r, &owner("a"), ttl(900)).await.unwrap();
    let held_until = a.held_until();
    server.store.release(&r, &owner("a"), None).await.unwrap();
    let reason = timeout(LIMIT, a.lost()).await.expect("lost() fired");
    assert_eq!(reason, LostReason::Gone);
    assert!(std::time::Instant::now() < held_until);
}

#[tokio::test]
async fn lost_fires_before_the_confirmed_expiry_when_the_server_is_killed() {
    let mut server = TestServer::start();
    let client = connect(&server.url).await.unwrap();
    let r = resource("killed");
    let a = client.try_acquire(&r, &owner("a"), ttl(1_000)).await.unwrap();
    // Let a renewal or two happen first.
    let first = a.expires_at();
    eventually(LIMIT, "a renewal", async || {
        (a.expires_at() > first).then_some(())
    })
    .await;
    server.kill();

    let mut saw_jeopardy = false;
    let reason = loop {
        match a.state() {
            LeaseState::Lost(reason) => break reason,
            LeaseState::InJeopardy { .. } => saw_jeopardy = true,
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let (now, wall) = (std::time::Instant::now(), Timestamp::now_wall());
    assert!(matches!(reason, LostReason::NotRenewed { .. }), "{reason}");
    assert!(
        saw_jeopardy,
        "renewals failed without the guard being in jeopardy"
    );
    assert!(now < a.held_until(), "lost() fired after the confirmed expiry");
    // The store outlives its server: its last word on the lease is the expiry to beat.
    let last = server
        .store
        .get(&r)
        .await
        .unwrap()
        .expect("still live in the store");
    assert_eq!(last.token, a.token());
    let margin = last.expires_at.since(wall);
    println!(
        "server killed: lost() fired {margin:?} before the lease's expiry (safety margin {:?})",
        a.safety_margin()
    );
    assert!(!margin.is_zero(), "lost() fired after the lease's expiry");
}

#[tokio::test]
async fn dropping_a_guard_frees_the_lock() {
    let server = TestServer::start();
    let client = connect(&server.url).await.unwrap();
    let r = resource("dropped");
    let a = client.try_acquire(&r, &owner("a"), ttl(60_000)).await.unwrap();
    let token = a.token();
    drop(a);
    // Long before the 60 s TTL: the drop released it.
    let b = timeout(
        Duration::from_secs(5),
        take_over(&client, &r, &owner("b"), ttl(60_000)),
    )
    .await
    .expect("the dropped guard's lease was released");
    assert!(b.token() > token);
}

#[tokio::test]
async fn a_late_release_with_an_old_token_does_not_free_a_newer_lease() {
    let server = TestServer::start();
    let client = connect(&server.url).await.unwrap();
    let (r, w) = (resource("late"), owner("worker-7"));
    let old = client.try_acquire(&r, &w, ttl(300)).await.unwrap();
    old.pause_renewal();
    timeout(LIMIT, old.lost()).await.unwrap();
    // The same owner gets the resource again once the old lease has expired (before, it
    // would extend the old lease): a new lease with a new token.
    eventually(LIMIT, "the old lease to expire", async || {
        client.get(&r).await.unwrap().is_none().then_some(())
    })
    .await;
    let new = client.try_acquire(&r, &w, ttl(60_000)).await.unwrap();
    assert!(new.token() > old.token());
    // The old guard's release is late: it carries the old token and frees nothing.
    assert_eq!(old.release().await.unwrap(), ReleaseOutcome::Conflict);
    assert_eq!(client.get(&r).await.unwrap().map(|l| l.token), Some(new.token()));
    assert!(new.is_held());
    // A raw late release by the same owner with the old token is refused the same way.
    let stale = FencingToken(new.token().0 - 1);
    assert_eq!(
        client.release(&r, &w, Some(stale)).await.unwrap(),
        ReleaseOutcome::Conflict
    );
    assert_eq!(client.get(&r).await.unwrap().map(|l| l.token), Some(new.token()));
}

#[tokio::test]
async fn try_acquire_reports_the_holder_and_acquire_waits_in_line() {
    let server = TestServer::start();
    let client = connect(&server.url).await.unwrap();
    let r = resource("line");
    let a = client.try_acquire(&r, &owner("a"), ttl(60_000)).await.unwrap();
    match client.try_acquire(&r, &owner("b"), ttl(60_000)).await {
        Err(AcquireError::Busy { holder, expires_in }) => {
            assert_eq!(holder.token, a.token());
            assert!(expires_in > Duration::from_secs(50));
        }
        other => panic!("expected busy, got {other:?}"),
    }
    let waiting = tokio::spawn({
        let (client, r) = (client.clone(), r.clone());
        async move { client.acquire(&r, &owner("b"), ttl(60_000), LIMIT).await }
    });
    wait_for_waiters(&server.url, 1).await;
    let a_token = a.token();
    a.release().await.unwrap();
    let b = waiting.await.unwrap().expect("b got the lock after waiting");
    assert!(b.token() > a_token);
}

#[tokio::test]
async fn a_wait_longer_than_the_servers_maximum_is_several_requests() {
    let mut config = fencelock_server::Config::default();
    config.limits.max_wait = Duration::from_millis(200);
    let server = TestServer::with_config(config);
    let options = HttpOptions {
        max_wait_per_request: Duration::from_millis(200),
        ..HttpOptions::default()
    };
    let client = Client::from_http(HttpStore::with_options(&server.url, options).unwrap());
    let r = resource("long-wait");
    let a = client.try_acquire(&r, &owner("a"), ttl(700)).await.unwrap();
    a.pause_renewal();
    // B waits past several of the server's maximum waits until A's lease expires.
    let started = Instant::now();
    let b = client.acquire(&r, &owner("b"), ttl(3_000), LIMIT).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    assert!(b.token() > a.token());
    // The guard counts from a renewal sent after the wait, not from the first request.
    assert!(b.held_until() > std::time::Instant::now() + Duration::from_millis(2_000));
    // And a wait that runs out reports the holder.
    match client
        .acquire(&r, &owner("c"), ttl(1_000), Duration::from_millis(500))
        .await
    {
        Err(AcquireError::Busy { holder, .. }) => assert_eq!(holder.token, b.token()),
        other => panic!("expected busy, got {other:?}"),
    }
}

#[tokio::test]
async fn with_lock_releases_after_success_error_and_panic() {
    let server = TestServer::start();
    let client = connect(&server.url).await.unwrap();
    let (r, o) = (resource("with-lock"), owner("a"));

    let token = with_lock(&client, &r, &o, ttl(60_000), async |guard| guard.token())
        .await
        .unwrap();
    assert!(token > FencingToken(0));
    assert_eq!(client.get(&r).await.unwrap(), None);

    let failed: Result<(), &str> = with_lock(&client, &r, &o, ttl(60_000), async |_| Err("no"))
        .await
        .unwrap();
    assert_eq!(failed, Err("no"));
    assert_eq!(client.get(&r).await.unwrap(), None);

    let panicked = tokio::spawn({
        let (client, r, o) = (client.clone(), r.clone(), o.clone());
        async move {
            with_lock(&client, &r, &o, ttl(60_000), async |guard| {
                assert!(guard.is_held());
                panic!("the job failed");
            })
            .await
        }
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    // Released before the panic went on: no waiting for it.
    assert_eq!(client.get(&r).await.unwrap(), None);
}

#[tokio::test]
async fn a_direct_store_client_waits_in_line_too() {
    let client = connect("memory://").await.unwrap();
    let r = resource("direct");
    let a = client.try_acquire(&r, &owner("a"), ttl(60_000)).await.unwrap();
    let waiting = tokio::spawn({
        let (client, r) = (client.clone(), r.clone());
        async move { client.acquire(&r, &owner("b"), ttl(60_000), LIMIT).await }
    });
    tokio::task::yield_now().await;
    let a_token = a.token();
    a.release().await.unwrap();
    let b = waiting.await.unwrap().unwrap();
    assert!(b.token() > a_token);
}

#[tokio::test]
async fn a_renewal_cut_short_by_the_give_up_point_does_not_hide_the_failure_before_it() {
    let store = Arc::new(LateGrants::new(
        Duration::ZERO,
        Meanwhile::RenewalsFailThenHang(Arc::default()),
    ));
    // Every renewal after the first hangs until the give-up point, well before the timeout.
    let options = GuardOptions {
        renew_every: Some(Duration::from_millis(100)),
        request_timeout: Duration::from_secs(60),
        ..GuardOptions::default()
    };
    let client = Client::from_store(store).with_guard_options(options);
    let guard = client
        .try_acquire(&resource("cut"), &owner("a"), ttl(600))
        .await
        .unwrap();
    match timeout(LIMIT, guard.lost()).await.expect("lost() fired") {
        LostReason::NotRenewed { last_error } => {
            assert!(last_error.contains("renewals are down"), "{last_error}")
        }
        other => panic!("expected not renewed, got {other:?}"),
    }
}

#[tokio::test]
async fn a_guard_confirmed_too_late_starts_lost_and_never_reports_held() {
    // Renewals fail, so the grant's send is all the guard can count from; with a margin this
    // wide, a grant answered 200 ms late leaves less than the margin of a 1 s lease.
    let store = Arc::new(LateGrants::new(
        Duration::from_millis(200),
        Meanwhile::RenewalsFail,
    ));
    let options = GuardOptions {
        renew_every: Some(Duration::from_millis(100)),
        safety_margin: Some(Duration::from_millis(850)),
        ..GuardOptions::default()
    };
    let client = Client::from_store(store.clone()).with_guard_options(options);
    let r = resource("late");
    let guard = client.try_acquire(&r, &owner("a"), ttl(1_000)).await.unwrap();
    assert!(!guard.is_held());
    match guard.state() {
        LeaseState::Lost(LostReason::NotRenewed { last_error }) => {
            assert!(last_error.contains("renewals are down"), "{last_error}")
        }
        other => panic!("expected lost, got {other:?}"),
    }
    let reason = guard.lost().now_or_never().expect("lost() completes at once");
    assert!(matches!(reason, LostReason::NotRenewed { .. }), "{reason}");
    // The lease may still be the guard's: releasing it gives it back.
    assert!(matches!(
        guard.release().await.unwrap(),
        ReleaseOutcome::Released(_)
    ));
    assert_eq!(store.inner.get(&r).await.unwrap(), None);
}

#[tokio::test]
async fn a_lease_lost_before_the_renewal_that_confirms_it_is_an_acquire_error() {
    let (a, b) = (owner("a"), owner("b"));
    for (meanwhile, expected) in [
        (Meanwhile::Deleted, LostReason::Gone),
        (Meanwhile::TakenBy(b.clone()), LostReason::Taken),
    ] {
        // Late enough that the client renews at once to anchor the guard.
        let store = Arc::new(LateGrants::new(Duration::from_millis(150), meanwhile));
        let client = Client::from_store(store.clone());
        let r = resource("lost-in-transit");
        let error = match client.try_acquire(&r, &a, ttl(1_000)).await {
            Err(error) => error,
            Ok(guard) => panic!("a guard over a lost lease: {:?}", guard.state()),
        };
        assert!(
            error.to_string().contains("lost before it could be confirmed"),
            "{error}"
        );
        let AcquireError::LostBeforeConfirmed { lease, reason } = error else {
            panic!("expected lost before confirmed, got {error:?}");
        };
        assert_eq!((&lease.owner, &reason), (&a, &expected));
        // The lock is as the store left it: free, or the other owner's newer lease.
        let live = store.inner.get(&r).await.unwrap();
        match expected {
            LostReason::Taken => {
                let live = live.expect("b holds it");
                assert_eq!(live.owner, b);
                assert!(live.token > lease.token);
            }
            _ => assert_eq!(live, None),
        }
    }
}

/// What happens to a lease while its grant is on the way to the client.
#[derive(Debug, Clone)]
enum Meanwhile {
    /// It is deleted by force.
    Deleted,
    /// It is deleted by force and this owner acquires the resource.
    TakenBy(Owner),
    /// Nothing, but the store stops answering renewals.
    RenewalsFail,
    /// Nothing, but the store fails the first renewal, then never answers one.
    RenewalsFailThenHang(Arc<AtomicBool>),
}

/// A test double: a [`MemoryStore`] whose grants reach the client `late_by` late (as after
/// a slow network), with [`Meanwhile`] happening in between. The rules, and so the refusals,
/// are the memory store's own; only the timing and the interference are staged.
#[derive(Debug)]
struct LateGrants {
    inner: MemoryStore,
    late_by: Duration,
    meanwhile: Meanwhile,
}

impl LateGrants {
    fn new(late_by: Duration, meanwhile: Meanwhile) -> Self {
        Self {
            inner: MemoryStore::new(),
            late_by,
            meanwhile,
        }
    }
}

#[async_trait]
impl LockStore for LateGrants {
    async fn acquire_with(&self, r: &Resource, o: &Owner, t: Terms) -> Result<AcquireOutcome, StoreError> {
        let outcome = self.inner.acquire_with(r, o, t).await?;
        if matches!(outcome, AcquireOutcome::Granted { .. }) {
            match &self.meanwhile {
                Meanwhile::Deleted => {
                    self.inner.release(r, o, None).await?;
                }
                Meanwhile::TakenBy(other) => {
                    self.inner.release(r, o, None).await?;
                    self.inner.acquire(r, other, ttl(60_000)).await?;
                }
                Meanwhile::RenewalsFail | Meanwhile::RenewalsFailThenHang(_) => {}
            }
        }
        // The answer's delay on the way, not a wait for some state.
        tokio::time::sleep(self.late_by).await;
        Ok(outcome)
    }

    async fn acquire_all(
        &self,
        resources: &fencelock_core::Resources,
        o: &Owner,
        t: Terms,
    ) -> Result<fencelock_core::AcquireAllOutcome, StoreError> {
        self.inner.acquire_all(resources, o, t).await
    }

    async fn get(&self, r: &Resource) -> Result<Option<Lease>, StoreError> {
        self.inner.get(r).await
    }

    async fn release(
        &self,
        r: &Resource,
        o: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.inner.release(r, o, token).await
    }

    async fn renew_with(
        &self,
        r: &Resource,
        o: &Owner,
        t: Ttl,
        token: Option<FencingToken>,
        meta: Option<&fencelock_core::Meta>,
    ) -> Result<RenewOutcome, StoreError> {
        let down = || StoreError::Unavailable {
            message: "renewals are down".into(),
            source: None,
        };
        match &self.meanwhile {
            Meanwhile::RenewalsFail => Err(down()),
            Meanwhile::RenewalsFailThenHang(failed) => {
                if failed.swap(true, Ordering::SeqCst) {
                    std::future::pending().await
                } else {
                    Err(down())
                }
            }
            _ => self.inner.renew_with(r, o, t, token, meta).await,
        }
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage, StoreError> {
        self.inner.list(query).await
    }

    async fn purge_expired(&self) -> Result<Vec<fencelock_core::Expired>, StoreError> {
        self.inner.purge_expired().await
    }

    async fn acquire_hold_with(
        &self,
        n: &Resource,
        o: &Owner,
        c: fencelock_core::Claim,
        t: Ttl,
        i: Option<Ttl>,
        meta: Option<&fencelock_core::Meta>,
    ) -> Result<fencelock_core::HoldOutcome, StoreError> {
        self.inner.acquire_hold_with(n, o, c, t, i, meta).await
    }

    async fn holds(
        &self,
        k: fencelock_core::HoldKind,
        n: &Resource,
    ) -> Result<Vec<fencelock_core::Hold>, StoreError> {
        self.inner.holds(k, n).await
    }

    async fn release_hold(
        &self,
        k: fencelock_core::HoldKind,
        n: &Resource,
        o: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.inner.release_hold(k, n, o, token).await
    }

    async fn renew_hold_with(
        &self,
        k: fencelock_core::HoldKind,
        n: &Resource,
        o: &Owner,
        t: Ttl,
        token: Option<FencingToken>,
        meta: Option<&fencelock_core::Meta>,
    ) -> Result<RenewOutcome<fencelock_core::Hold>, StoreError> {
        self.inner.renew_hold_with(k, n, o, t, token, meta).await
    }

    async fn list_holds(
        &self,
        k: fencelock_core::HoldKind,
        q: &ListQuery,
    ) -> Result<fencelock_core::HoldPage, StoreError> {
        self.inner.list_holds(k, q).await
    }

    async fn withdraw_intent(&self, n: &Resource, o: &Owner) -> Result<(), StoreError> {
        self.inner.withdraw_intent(n, o).await
    }

    async fn force_release(
        &self,
        key: &fencelock_core::Key,
    ) -> Result<fencelock_core::ForceOutcome, StoreError> {
        self.inner.force_release(key).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        self.inner.releases()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

/// Polls the server's metrics until `n` acquires wait in line.
async fn wait_for_waiters(url: &str, n: u64) {
    let http = reqwest::Client::new();
    eventually(LIMIT, "waiters", async || {
        let text = http
            .get(format!("{url}/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let waiting = text
            .lines()
            .find_map(|line| line.strip_prefix("fencelock_waiters "))?
            .trim()
            .parse::<u64>()
            .ok()?;
        (waiting == n).then_some(())
    })
    .await;
}
