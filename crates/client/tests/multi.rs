//! Several locks at once with `Client::acquire_all`, straight on a store and through a real
//! server: all or none, a refusal that names every lock in the way, a wait for all of them
//! at once, one guard that renews them together, is lost when any one is taken away and
//! releases all of them; and a wait that would deadlock is refused as such.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestServer, eventually, owner, resource, ttl};
use fencelock_client::{
    AcquireError, AcquireOutcome, Client, FencingToken, Key, LeaseState, LockStore, LostReason,
    ReleaseOutcome, Resources, Terms, connect,
};
use fencelock_core::MemoryStore;
use futures_util::future::{self, Either};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(10);

/// A client, and the store it reaches (to act behind its back); the server in between, if
/// there is one, lives as long as this.
struct Setup {
    client: Client,
    store: Arc<MemoryStore>,
    _server: Option<TestServer>,
}

/// A client straight on a memory store.
fn direct() -> Setup {
    let store = Arc::new(MemoryStore::new());
    Setup {
        client: Client::from_store(store.clone()),
        store,
        _server: None,
    }
}

/// A client of a real server on a memory store.
async fn served() -> Setup {
    let server = TestServer::start();
    Setup {
        client: connect(&server.url).await.unwrap(),
        store: server.store.clone(),
        _server: Some(server),
    }
}

fn names(names: &[&str]) -> Resources {
    Resources::new(names.iter().map(|n| resource(n)).collect()).unwrap()
}

/// Who holds each lock in the way, in the order of the refusal.
fn in_the_way(error: AcquireError) -> Vec<(String, String, FencingToken)> {
    let AcquireError::Blocked { in_the_way } = error else {
        panic!("expected blocked, got {error:?}");
    };
    in_the_way
        .into_iter()
        .map(|refusal| match refusal {
            AcquireOutcome::Held { holder, .. } => (
                holder.resource.to_string(),
                holder.owner.to_string(),
                holder.token,
            ),
            other => panic!("expected a holder, got {other:?}"),
        })
        .collect()
}

async fn all_or_none_and_every_lock_in_the_way_is_named(setup: Setup) {
    let client = &setup.client;
    let x = client
        .try_acquire(&resource("b"), &owner("x"), ttl(60_000))
        .await
        .unwrap();
    let y = client
        .try_acquire(&resource("d"), &owner("y"), ttl(60_000))
        .await
        .unwrap();
    let all = names(&["a", "b", "c", "d"]);
    let error = client
        .acquire_all(&all, &owner("w"), ttl(60_000), Duration::ZERO)
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("b is held by x") && message.contains("d is held by y"),
        "{message}"
    );
    assert_eq!(
        in_the_way(error),
        [
            ("b".to_owned(), "x".to_owned(), x.token()),
            ("d".to_owned(), "y".to_owned(), y.token())
        ]
    );
    // None was taken, and the holders' leases are untouched.
    for free in ["a", "c"] {
        assert_eq!(client.get(&resource(free)).await.unwrap(), None, "{free}");
    }
    assert_eq!(
        client.get(&resource("b")).await.unwrap().map(|l| l.token),
        Some(x.token())
    );

    let x_token = x.token();
    x.release().await.unwrap();
    y.release().await.unwrap();
    let guard = client
        .acquire_all(&all, &owner("w"), ttl(60_000), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        guard.resources().collect::<Vec<_>>(),
        all.as_slice().iter().collect::<Vec<_>>()
    );
    for name in all.as_slice() {
        let live = client.get(name).await.unwrap().expect("held");
        assert_eq!((live.owner.as_str(), Some(live.token)), ("w", guard.token(name)));
    }
    assert!(guard.token(&resource("b")) > Some(x_token));
    assert_eq!(guard.token(&resource("elsewhere")), None);

    let released = guard.release().await.unwrap();
    assert_eq!(released.len(), 4);
    assert!(
        released.iter().all(|o| matches!(o, ReleaseOutcome::Released(_))),
        "{released:?}"
    );
    for name in all.as_slice() {
        assert_eq!(client.get(name).await.unwrap(), None, "{name}");
    }
}

#[tokio::test]
async fn all_or_none_on_a_store() {
    all_or_none_and_every_lock_in_the_way_is_named(direct()).await;
}

#[tokio::test]
async fn all_or_none_through_a_server() {
    all_or_none_and_every_lock_in_the_way_is_named(served().await).await;
}

async fn a_wait_is_for_all_of_them_at_once(setup: Setup) {
    let client = &setup.client;
    let x = client
        .try_acquire(&resource("a"), &owner("x"), ttl(60_000))
        .await
        .unwrap();
    let y = client
        .try_acquire(&resource("b"), &owner("y"), ttl(60_000))
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let client = client.clone();
        async move {
            let both = names(&["b", "a"]);
            client.acquire_all(&both, &owner("w"), ttl(60_000), LIMIT).await
        }
    });
    let (x_token, y_token) = (x.token(), y.token());
    x.release().await.unwrap();
    y.release().await.unwrap();
    let guard = timeout(LIMIT, waiting)
        .await
        .unwrap()
        .unwrap()
        .expect("granted after the wait");
    assert!(guard.token(&resource("a")) > Some(x_token));
    assert!(guard.token(&resource("b")) > Some(y_token));
    assert_eq!(guard.state(), LeaseState::Held);
}

#[tokio::test]
async fn a_wait_on_a_store_is_for_all_of_them_at_once() {
    a_wait_is_for_all_of_them_at_once(direct()).await;
}

#[tokio::test]
async fn a_wait_through_a_server_is_for_all_of_them_at_once() {
    a_wait_is_for_all_of_them_at_once(served().await).await;
}

async fn the_guard_renews_all_and_is_lost_when_one_is_taken_away(setup: Setup) {
    let client = &setup.client;
    let all = names(&["p", "q", "r"]);
    let guard = client
        .acquire_all(&all, &owner("w"), ttl(600), Duration::ZERO)
        .await
        .unwrap();
    let first = guard.leases();
    eventually(LIMIT, "a renewal of every lease", async || {
        for granted in &first {
            let live = setup.store.get(&granted.resource).await.unwrap()?;
            (live.token == granted.token && live.expires_at > granted.expires_at).then_some(())?;
        }
        Some(())
    })
    .await;
    assert!(guard.is_held());

    let q = resource("q");
    client.force_release(&Key::lock(&q)).await.unwrap();
    let reason = timeout(LIMIT, guard.lost()).await.expect("lost() fired");
    assert_eq!(reason, LostReason::Gone);
    assert_eq!(guard.lost_on(), Some(q.clone()));
    assert_eq!(guard.state(), LeaseState::Lost(LostReason::Gone));

    // Someone else takes q; dropping the guard releases the other two, and not q.
    let other = client.try_acquire(&q, &owner("o"), ttl(60_000)).await.unwrap();
    drop(guard);
    eventually(LIMIT, "p and r to be released", async || {
        let p = client.get(&resource("p")).await.unwrap();
        let r = client.get(&resource("r")).await.unwrap();
        (p.is_none() && r.is_none()).then_some(())
    })
    .await;
    assert_eq!(
        client.get(&q).await.unwrap().map(|l| l.token),
        Some(other.token())
    );
}

#[tokio::test]
async fn on_a_store_the_guard_renews_all_and_is_lost_when_one_is_taken_away() {
    the_guard_renews_all_and_is_lost_when_one_is_taken_away(direct()).await;
}

#[tokio::test]
async fn through_a_server_the_guard_renews_all_and_is_lost_when_one_is_taken_away() {
    the_guard_renews_all_and_is_lost_when_one_is_taken_away(served().await).await;
}

#[tokio::test]
async fn a_lock_closed_by_its_lock_delay_is_named_in_the_way() {
    let setup = direct();
    let e = resource("e");
    // A holder that vanished: its lease expires unreleased, and a lock-delay follows.
    let terms = Terms::ttl(ttl(1)).lock_delay(Duration::from_secs(60));
    setup.store.acquire_with(&e, &owner("gone"), terms).await.unwrap();
    eventually(LIMIT, "the lease to expire", async || {
        setup.store.get(&e).await.unwrap().is_none().then_some(())
    })
    .await;
    let error = setup
        .client
        .acquire_all(&names(&["a", "e"]), &owner("w"), ttl(60_000), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("lock-delay"), "{error}");
    let AcquireError::Blocked { in_the_way } = error else {
        panic!("expected blocked, got {error:?}");
    };
    match &in_the_way[..] {
        [AcquireOutcome::Delayed { resource, retry_in }] => {
            assert_eq!(resource, &e);
            assert!(*retry_in > Duration::from_secs(50), "{retry_in:?}");
        }
        other => panic!("expected e delayed, got {other:?}"),
    }
    assert_eq!(setup.client.get(&resource("a")).await.unwrap(), None);
}

#[tokio::test]
async fn a_wait_that_would_close_a_cycle_is_a_deadlock_error() {
    let Setup { client, .. } = direct();
    let (p, q) = (owner("p"), owner("q"));
    let p_holds = client.try_acquire(&resource("x"), &p, ttl(60_000)).await.unwrap();
    let q_holds = client.try_acquire(&resource("y"), &q, ttl(60_000)).await.unwrap();
    // p waits for y (and z) while q waits for x: whichever wait closes the cycle is refused.
    let p_waits = tokio::spawn({
        let (client, p) = (client.clone(), p.clone());
        async move {
            let wanted = names(&["y", "z"]);
            client
                .acquire_all(&wanted, &p, ttl(60_000), LIMIT)
                .await
                .map(drop)
        }
    });
    let q_waits = tokio::spawn({
        let (client, q) = (client.clone(), q.clone());
        async move {
            client
                .acquire(&resource("x"), &q, ttl(60_000), LIMIT)
                .await
                .map(drop)
        }
    });
    let (refused, other, refused_holds) = match future::select(p_waits, q_waits).await {
        Either::Left((refused, other)) => (refused, other, p_holds),
        Either::Right((refused, other)) => (refused, other, q_holds),
    };
    match refused.unwrap() {
        Err(AcquireError::Deadlock { cycle }) => {
            assert!(cycle.contains("p waits") && cycle.contains("q waits"), "{cycle}");
        }
        other => panic!("expected a deadlock, got {other:?}"),
    }
    // Nothing the refused owner held was released; once it gives up its lock, the other
    // waiter gets what it waited for.
    assert!(refused_holds.is_held());
    refused_holds.release().await.unwrap();
    timeout(LIMIT, other)
        .await
        .unwrap()
        .unwrap()
        .expect("the other waiter was granted");
}

#[tokio::test]
async fn a_guard_of_one_lease_is_a_set_of_one() {
    let Setup { client, .. } = direct();
    let single = client
        .try_acquire(&resource("one"), &owner("w"), ttl(60_000))
        .await
        .unwrap();
    let token = single.token();
    let set = fencelock_client::MultiGuard::from(single);
    assert_eq!(set.len(), 1);
    assert_eq!(set.token(&resource("one")), Some(token));
    assert_eq!(set.leases().len(), 1);
    let released = set.release().await.unwrap();
    assert!(
        matches!(released[..], [ReleaseOutcome::Released(_)]),
        "{released:?}"
    );
    assert_eq!(client.get(&resource("one")).await.unwrap(), None);
}
