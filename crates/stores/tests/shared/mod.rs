//! What the tests of stores that many servers share (PostgreSQL, etcd, Redis, ZooKeeper) have
//! in common; their conformance harness and the many-servers checks themselves are in the
//! conformance suite (`fencelock_conformance::shared_suite!`).

#![allow(dead_code)] // Each test file uses a different part of this.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fencelock_core::{Bulletin, Heard, Key, LockStore, ReleaseNotice, Resource, Timestamp};
use fencelock_testkit::eventually;
use tokio::sync::broadcast;

pub use fencelock_testkit::fixtures::unique;

pub use fencelock_conformance::checks::granted;

/// Waits until `store` no longer shows the lease on `resource` (it expired); fails the test
/// after `within`.
pub async fn until_expired(store: &dyn LockStore, resource: &Resource, within: Duration) {
    let what = format!("{resource} to expire");
    eventually(within, &what, async || {
        store.get(resource).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// Waits until `resource` comes out of `feed`; `Err` after `within`.
pub async fn wait_for_release(
    feed: &mut broadcast::Receiver<ReleaseNotice>,
    resource: &Resource,
    within: Duration,
) -> Result<(), tokio::time::error::Elapsed> {
    wait_for_key(feed, &Key::lock(resource), within).await
}

/// Waits until `key` (of any kind) comes out of `feed`; `Err` after `within`.
pub async fn wait_for_key(
    feed: &mut broadcast::Receiver<ReleaseNotice>,
    key: &Key,
    within: Duration,
) -> Result<(), tokio::time::error::Elapsed> {
    tokio::time::timeout(within, async {
        loop {
            match feed.recv().await {
                Ok(ReleaseNotice::Freed(heard)) if heard == *key => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(closed) => panic!("release feed closed: {closed}"),
            }
        }
    })
    .await
}

/// An origin of bulletins of its own, as a server's event epoch is, so that those of other
/// tests sharing the store are told apart.
pub fn new_origin() -> u64 {
    static MADE: AtomicU64 = AtomicU64::new(0);
    (u64::from(std::process::id()) << 42)
        ^ (Timestamp::now_wall().as_millis() << 8)
        ^ MADE.fetch_add(1, Ordering::Relaxed)
}

/// The bulletin numbered `seq` of `origin`.
pub fn bulletin(origin: u64, seq: u64) -> Bulletin {
    Bulletin {
        origin,
        seq,
        body: format!(r#"{{"n":{seq}}}"#),
    }
}

/// A server hears every event another server tells once its store is open, the first first,
/// and is told of no loss — however late the store's reader first watches them. `open` opens
/// a store on the shared cluster. Run it on a runtime of one thread: the events are told
/// before the test yields, so before the new store's reader can run again.
pub async fn events_told_right_after_an_open_are_heard(open: impl AsyncFn() -> Arc<dyn LockStore>) {
    let telling = open().await;
    // The teller's writer first tells probes until a server hears one, so that it is under
    // way (etcd's first put waits for a lease) and the events below go out at once.
    let probing = open().await;
    let mut probes_heard = probing
        .bulletins()
        .expect("a shared store carries servers' events");
    let (probes, mut probed) = (new_origin(), 0);
    eventually(Duration::from_secs(20), "a probe to be heard", async || {
        probed += 1;
        telling.publish(&bulletin(probes, probed));
        let heard = tokio::time::timeout(Duration::from_millis(500), async {
            loop {
                match probes_heard.recv().await {
                    Ok(Heard::Told(heard)) if heard.origin == probes => return,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(closed) => panic!("the feed ended: {closed}"),
                }
            }
        });
        heard.await.ok()
    })
    .await;

    let listening = open().await;
    let mut heard = listening
        .bulletins()
        .expect("a shared store carries servers' events");
    let origin = new_origin();
    for seq in 1..=3 {
        telling.publish(&bulletin(origin, seq));
    }
    assert_eq!(
        hear(&mut heard, origin, 3).await,
        [1, 2, 3],
        "each once, in order"
    );
}

/// The numbers of the next `count` bulletins of `origin` heard on `heard`, each within 10 s;
/// panics if the feed says some were missed.
pub async fn hear(heard: &mut broadcast::Receiver<Heard>, origin: u64, count: usize) -> Vec<u64> {
    let mut got = Vec::new();
    while got.len() < count {
        match tokio::time::timeout(Duration::from_secs(10), heard.recv()).await {
            Ok(Ok(Heard::Told(bulletin))) if bulletin.origin == origin => got.push(bulletin.seq),
            Ok(Ok(Heard::Told(_))) => {}
            Ok(Ok(Heard::Missed)) => panic!("told of events missed, having heard {got:?}"),
            Ok(Err(error)) => panic!("the feed lagged or ended: {error}"),
            Err(_) => panic!("only {got:?} of {count} were heard: the others were skipped"),
        }
    }
    got
}
