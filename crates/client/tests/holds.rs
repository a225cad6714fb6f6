//! The lease guard over a semaphore's permit and a read-write lock's hold, as over a lock's
//! lease: renewal keeps it, a loss fires `lost()` before the expiry it last confirmed, a drop
//! releases it; with the limit kept, readers sharing, and a waiting writer served before the
//! readers that came after it. Every test runs twice: straight on an in-memory store, and
//! through a real server (in this process) on one.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestServer, eventually, owner, resource, ttl};
use fencelock_client::{
    AcquireError, Claim, Client, HoldGuard, HoldKind, HoldOutcome, LeaseState, LockStore, LostReason,
    ReleaseOutcome, Resource, connect,
};
use fencelock_core::MemoryStore;
use futures_util::future::join_all;
use tokio::time::{Instant, timeout};

const LIMIT: Duration = Duration::from_secs(10);

/// The three claims a guard can hold, each with a name of its own.
const CLAIMS: [(&str, Claim); 3] = [
    ("permit", Claim::Permit { limit: 2 }),
    ("read", Claim::Read),
    ("write", Claim::Write),
];

/// A client and the in-memory store it acts on, straight or through a server.
struct Backend {
    client: Client,
    /// The store itself, for looking behind the client's back and forcing losses.
    store: Arc<MemoryStore>,
    server: Option<TestServer>,
}

impl Backend {
    /// A client straight on a store: it waits in its own line.
    fn direct() -> Self {
        let store = Arc::new(MemoryStore::new());
        Self {
            client: Client::from_store(store.clone()),
            store,
            server: None,
        }
    }

    /// A client of a real server on a store: the server waits.
    async fn server() -> Self {
        let server = TestServer::start();
        Self {
            client: connect(&server.url).await.unwrap(),
            store: server.store.clone(),
            server: Some(server),
        }
    }

    /// The tokens of the live holds on `name`, as the store has them.
    async fn tokens(&self, kind: HoldKind, name: &Resource) -> Vec<u64> {
        let holds = self.store.holds(kind, name).await.unwrap();
        holds.iter().map(|h| h.lease.token.0).collect()
    }
}

/// Runs each test straight on a store and through a server.
macro_rules! on_both {
    ($($test:ident),* $(,)?) => {
        mod direct {
            $(#[tokio::test]
            async fn $test() {
                super::$test(super::Backend::direct()).await
            })*
        }
        mod through_a_server {
            $(#[tokio::test]
            async fn $test() {
                super::$test(super::Backend::server().await).await
            })*
        }
    };
}

on_both!(
    renewal_keeps_a_permit_and_a_hold_across_five_ttls,
    a_deleted_permit_or_hold_fires_lost_at_the_next_renewal,
    lost_fires_before_the_confirmed_expiry_when_renewal_stops,
    dropping_the_guard_releases_the_permit_or_hold,
    a_semaphore_keeps_its_limit_and_a_waiter_gets_the_next_permit,
    readers_share_and_a_waiting_writer_goes_before_later_readers,
);

async fn guard(b: &Backend, name: &Resource, who: &str, claim: Claim, ttl_ms: u64) -> HoldGuard {
    b.client
        .acquire_claim(name, &owner(who), claim, ttl(ttl_ms), None, Duration::ZERO)
        .await
        .unwrap_or_else(|e| panic!("{claim:?} of {who} on {name}: {e}"))
}

async fn renewal_keeps_a_permit_and_a_hold_across_five_ttls(b: Backend) {
    join_all(CLAIMS.map(|(name, claim)| {
        let b = &b;
        async move {
            let name = resource(name);
            let kind = claim.kind();
            let held = guard(b, &name, "a", claim, 500).await;
            assert_eq!(held.claim(), claim);
            let first = held.hold();
            let until = Instant::now() + Duration::from_millis(2600);
            while Instant::now() < until {
                // The store has the same hold live the whole time, and the guard agrees.
                assert_eq!(b.tokens(kind, &name).await, [held.token().0], "{claim:?}");
                assert_eq!(held.state(), LeaseState::Held, "{claim:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let last = b.client.holds(kind, &name).await.unwrap().remove(0);
            assert!(
                last.lease.expires_at.since(first.lease.expires_at) >= Duration::from_millis(2000),
                "{claim:?}: renewed from {} to {} only",
                first.lease.expires_at,
                last.lease.expires_at
            );
            assert_eq!(held.hold(), last);
            assert!(matches!(
                held.release().await.unwrap(),
                ReleaseOutcome::Released(_)
            ));
            assert_eq!(b.tokens(kind, &name).await, [0u64; 0]);
        }
    }))
    .await;
}

async fn a_deleted_permit_or_hold_fires_lost_at_the_next_renewal(b: Backend) {
    for (name, claim) in CLAIMS {
        let name = resource(name);
        let held = guard(&b, &name, "a", claim, 900).await;
        let held_until = held.held_until();
        // Deleted by force behind the holder's back.
        let deleted = b
            .store
            .release_hold(claim.kind(), &name, held.owner(), None)
            .await;
        assert!(matches!(deleted.unwrap(), ReleaseOutcome::Released(_)));
        let reason = timeout(LIMIT, held.lost()).await.expect("lost() fired");
        assert_eq!(reason, LostReason::Gone, "{claim:?}");
        assert!(std::time::Instant::now() < held_until, "{claim:?}");
        assert!(!held.is_held());
    }
}

async fn lost_fires_before_the_confirmed_expiry_when_renewal_stops(b: Backend) {
    join_all(CLAIMS.map(|(name, claim)| {
        let b = &b;
        async move {
            let name = resource(name);
            let a = guard(b, &name, "a", claim, 600).await;
            a.pause_renewal();
            let reason = timeout(LIMIT, a.lost()).await.expect("lost() fired");
            let now = std::time::Instant::now();
            assert!(matches!(reason, LostReason::NotRenewed { .. }), "{reason}");
            assert!(
                now < a.held_until(),
                "{claim:?}: lost() fired after the confirmed expiry"
            );
            // By the store too, A still held it when it was told it lost it.
            assert_eq!(b.tokens(claim.kind(), &name).await, [a.token().0], "{claim:?}");
            // It expires as the guard said it might; the next hold gets a greater token.
            eventually(LIMIT, "the hold to expire", async || {
                b.tokens(claim.kind(), &name).await.is_empty().then_some(())
            })
            .await;
            let next = guard(b, &name, "b", claim, 10_000).await;
            assert!(next.token() > a.token());
            // A's late release carries its token: B's hold stays.
            assert_eq!(a.release().await.unwrap(), ReleaseOutcome::NotFound);
            assert_eq!(b.tokens(claim.kind(), &name).await, [next.token().0]);
        }
    }))
    .await;
}

async fn dropping_the_guard_releases_the_permit_or_hold(b: Backend) {
    for (name, claim) in CLAIMS {
        let name = resource(name);
        let held = guard(&b, &name, "a", claim, 60_000).await;
        let token = held.token();
        drop(held);
        // Long before the 60 s TTL: the drop released it.
        eventually(LIMIT, "the dropped guard's release", async || {
            b.tokens(claim.kind(), &name).await.is_empty().then_some(())
        })
        .await;
        let next = guard(&b, &name, "b", claim, 60_000).await;
        assert!(next.token() > token, "{claim:?}");
    }
}

async fn a_semaphore_keeps_its_limit_and_a_waiter_gets_the_next_permit(b: Backend) {
    let name = resource("exports");
    let permit = |who: &'static str, limit: u32, ttl_ms: u64, wait: Duration| {
        let (client, name) = (b.client.clone(), name.clone());
        async move {
            client
                .acquire_permit(&name, &owner(who), limit, ttl(ttl_ms), wait)
                .await
        }
    };
    let first = permit("a", 2, 600, Duration::ZERO).await.unwrap();
    first.pause_renewal();
    let second = permit("b", 2, 60_000, Duration::ZERO).await.unwrap();
    assert!(second.token() > first.token());
    match permit("c", 2, 3_000, Duration::ZERO).await {
        Err(AcquireError::HoldBusy { busy, claim, .. }) => {
            assert_eq!(claim, Claim::Permit { limit: 2 });
            let holders: Vec<_> = busy.holders.iter().map(|h| h.lease.token).collect();
            assert_eq!(holders, [first.token(), second.token()]);
        }
        other => panic!("expected busy, got {other:?}"),
    }
    match permit("d", 3, 3_000, Duration::ZERO).await {
        Err(error @ AcquireError::LimitMismatch { limit: 2, .. }) => {
            assert!(error.to_string().contains("limit 2"), "{error}")
        }
        other => panic!("expected a limit mismatch, got {other:?}"),
    }
    // C waits until A's permit, no longer renewed, expires.
    let third = permit("c", 2, 3_000, LIMIT)
        .await
        .expect("c got a permit after waiting");
    assert!(third.token() > second.token());
    assert_eq!(
        b.tokens(HoldKind::Semaphore, &name).await,
        [second.token().0, third.token().0]
    );
    // C waited longer than a tenth of its TTL: its guard counts from a renewal sent after
    // the wait, not from its first request.
    assert!(third.held_until() > std::time::Instant::now() + Duration::from_millis(2_000));
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::NotFound);
}

async fn readers_share_and_a_waiting_writer_goes_before_later_readers(b: Backend) {
    let name = resource("config");
    let hold = |who: &'static str, claim: Claim, wait: Duration| {
        let (client, name) = (b.client.clone(), name.clone());
        async move {
            client
                .acquire_claim(&name, &owner(who), claim, ttl(60_000), None, wait)
                .await
        }
    };
    let r1 = hold("r1", Claim::Read, Duration::ZERO).await.unwrap();
    let r2 = hold("r2", Claim::Read, Duration::ZERO).await.unwrap();
    assert!(matches!(
        hold("w", Claim::Write, Duration::ZERO).await,
        Err(AcquireError::HoldBusy { .. })
    ));
    // The writer waits; from then on a reader that comes is refused, and waits behind it.
    let writer = tokio::spawn(hold("w", Claim::Write, LIMIT));
    wait_for_a_waiting_writer(&b, &name).await;
    let late_reader = tokio::spawn(hold("r3", Claim::Read, LIMIT));
    let r2_token = r2.token();
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    // Woken by the releases, long before the readers' TTL.
    let w = writer.await.unwrap().expect("the writer got it");
    assert!(w.token() > r2_token);
    assert!(!late_reader.is_finished(), "a reader got in before the writer");
    assert_eq!(b.tokens(HoldKind::RwLock, &name).await, [w.token().0]);
    let w_token = w.token();
    w.release().await.unwrap();
    let r3 = late_reader.await.unwrap().expect("the later reader got it");
    assert!(r3.token() > w_token);
}

/// Waits until a writer waits for `name`: a reader that comes then is told so (a reader
/// that came before is granted beside the readers: its hold is given back at once).
async fn wait_for_a_waiting_writer(b: &Backend, name: &Resource) {
    let probe = owner("probe");
    eventually(LIMIT, "the writer to wait", async || {
        let tried = b
            .client
            .acquire_hold(name, &probe, Claim::Read, ttl(60_000), None, Duration::ZERO);
        match tried.await.unwrap() {
            HoldOutcome::Busy(busy) => busy.writer_waits.then_some(()),
            HoldOutcome::Granted { .. } => {
                b.client
                    .release_hold(HoldKind::RwLock, name, &probe, None)
                    .await
                    .unwrap();
                None
            }
            other => panic!("{other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn lost_fires_before_the_confirmed_expiry_when_the_server_is_killed() {
    let mut b = Backend::server().await;
    let name = resource("killed");
    let held = guard(&b, &name, "a", Claim::Permit { limit: 3 }, 1_000).await;
    let first = held.expires_at();
    eventually(LIMIT, "a renewal", async || {
        (held.expires_at() > first).then_some(())
    })
    .await;
    b.server.as_mut().expect("a server").kill();
    let mut saw_jeopardy = false;
    let reason = loop {
        match held.state() {
            LeaseState::Lost(reason) => break reason,
            LeaseState::InJeopardy { .. } => saw_jeopardy = true,
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let wall = fencelock_client::Timestamp::now_wall();
    assert!(matches!(reason, LostReason::NotRenewed { .. }), "{reason}");
    assert!(
        saw_jeopardy,
        "renewals failed without the guard being in jeopardy"
    );
    // The store outlives its server: its last word on the permit is the expiry to beat.
    let last = b.store.holds(HoldKind::Semaphore, &name).await.unwrap().remove(0);
    assert_eq!(last.lease.token, held.token());
    assert!(
        wall < last.lease.expires_at,
        "lost() fired after the permit's expiry"
    );
}
