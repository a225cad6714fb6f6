//! The etcd store against real, throwaway etcd: the conformance suite on one member, many
//! servers on one cluster (locks, semaphores and read-write locks, several locks at once,
//! lock-delays and caps), and members of a three-member cluster killed and restarted.
#![cfg(feature = "etcd")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fencelock_conformance::{checks, owner, ttl};
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Claim, FencingToken, ForceOutcome, HoldKind, HoldOutcome, Key,
    LockStore, Owner, ReleaseOutcome, RenewOutcome, Resource, Resources, StoreError, Terms, Waiters,
};
use fencelock_stores::Deadline;
use fencelock_stores::etcd::{EtcdOptions, EtcdStore};
use fencelock_testkit::fixtures::owner_of;
use fencelock_testkit::{Etcd, EtcdCluster, Proxy, eventually, shared_etcd};
use tokio_util::sync::CancellationToken;

/// The shared server's address; starting it blocks, so not on the async worker.
async fn shared_url() -> String {
    tokio::task::spawn_blocking(|| shared_etcd().url())
        .await
        .expect("start etcd")
}

async fn store(url: &str) -> Arc<Deadline<EtcdStore>> {
    Arc::new(EtcdStore::connect(url).await.expect("connect to etcd"))
}

fencelock_conformance::shared_suite!(|| shared_etcd().url(), store);

mod shared;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_are_whole_seconds_rounded_up() {
    let store = store(&shared_url().await).await;
    assert_eq!(store.capabilities().ttl_granularity, Duration::from_secs(1));
    let resource = shared::unique("rounded");
    let lease = shared::granted(
        store
            .acquire(&resource, &owner("a"), ttl(Duration::from_millis(2001)))
            .await
            .unwrap(),
    );
    let lasts = lease.expires_at.since(lease.acquired_at);
    assert!(lasts >= Duration::from_secs(3), "asked 2.001 s, lasts {lasts:?}");
    assert_eq!(lasts.subsec_millis(), 0, "{lasts:?}");
    // The lock is still held a moment before its expiry by the server's clock, and gone
    // soon after: etcd decides, within its half-second expiry check.
    let before_expiry = lease.expires_at.since(fencelock_core::Timestamp::now_wall());
    tokio::time::sleep(before_expiry.saturating_sub(Duration::from_millis(300))).await;
    assert_eq!(store.get(&resource).await.unwrap(), Some(lease.clone()));
    shared::until_expired(&*store, &resource, Duration::from_secs(10)).await;
    let gone_late_by = fencelock_core::Timestamp::now_wall().since(lease.expires_at);
    eprintln!("etcd deleted the lock {gone_late_by:?} after expires_at");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_wakes_the_release_feed_and_the_next_token_is_greater() {
    let store = store(&shared_url().await).await;
    let mut heard = store.releases().unwrap();
    let resource = shared::unique("expiring");
    let first = shared::granted(
        store
            .acquire(&resource, &owner("a"), ttl(Duration::from_secs(1)))
            .await
            .unwrap(),
    );
    shared::wait_for_release(&mut heard, &resource, Duration::from_secs(15))
        .await
        .expect("the expiry was not announced");
    assert_eq!(store.get(&resource).await.unwrap(), None);
    let second = shared::granted(
        store
            .acquire(&resource, &owner("a"), ttl(Duration::from_secs(60)))
            .await
            .unwrap(),
    );
    assert!(second.token > first.token);
}

/// A server restarted on a cluster hears what the others tell from the moment its store is
/// open, though its events watch is made later: nothing in between is skipped silently.
#[tokio::test]
async fn events_told_right_after_a_server_opened_its_store_reach_it() {
    let url = shared_url().await;
    shared::events_told_right_after_an_open_are_heard(async || store(&url).await as Arc<dyn LockStore>).await;
}

/// A server whose events watch is lost before it saw any event watches again from its
/// store's open, not from then: what was told meanwhile reaches it, and no loss is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_told_while_a_new_servers_watch_was_lost_reach_it() {
    // A server of its own: no other test's event reaches the listening store first.
    let etcd = tokio::task::spawn_blocking(Etcd::start).await.unwrap();
    let port = etcd.endpoint().rsplit_once(':').unwrap().1.parse().unwrap();
    let proxy = Proxy::start(port);
    let listening = store(&format!("etcd://127.0.0.1:{}", proxy.port())).await;
    let (telling, witness) = (store(&etcd.url()).await, store(&etcd.url()).await);
    let mut heard = listening.bulletins().unwrap();
    let mut witnessed = witness.bulletins().unwrap();
    // What etcd sends the listening store is thrown away, and its connection closed once
    // restored: its watch is lost with no event seen.
    proxy.blackhole();
    let origin = shared::new_origin();
    for seq in 1..=3 {
        telling.publish(&shared::bulletin(origin, seq));
    }
    assert_eq!(shared::hear(&mut witnessed, origin, 3).await, [1, 2, 3]);
    proxy.restore();
    assert_eq!(
        shared::hear(&mut heard, origin, 3).await,
        [1, 2, 3],
        "each once, in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_parser_opens_etcd() {
    let url = shared_url().await;
    let store = fencelock_stores::open(&url).await.expect(&url);
    store.ping().await.unwrap();
    assert!(store.capabilities().durable);
    for bad in [
        "etcd://",
        "etcd://127.0.0.1",
        "etcd://127.0.0.1:x",
        "etcd://:2379",
    ] {
        let error = fencelock_stores::open(bad).await.expect_err(bad);
        assert!(
            matches!(error, fencelock_stores::OpenError::InvalidAddress { .. }),
            "{bad}: {error}"
        );
    }
}

/// Short timeouts, so that calls without a quorum fail quickly.
fn impatient() -> EtcdOptions {
    EtcdOptions {
        request_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        ..EtcdOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_serves_with_one_member_down_and_refuses_without_a_quorum() {
    let mut cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(3))
        .await
        .unwrap();
    let store = EtcdStore::connect_with(&cluster.url(), impatient())
        .await
        .unwrap();
    let resource = shared::unique("quorum");
    let mut last = checks::cycle_until_it_works(&store, &resource, Duration::from_secs(10)).await;
    // A lock held through it all: no member loss may take it.
    let kept = shared::unique("kept");
    let kept_lease = shared::granted(
        store
            .acquire(&kept, &owner("keeper"), ttl(Duration::from_secs(600)))
            .await
            .unwrap(),
    );

    // The leader down (the harsh case: an election, and requests in flight lost): locks
    // work again once the others have elected a new leader.
    let killed_at = Instant::now();
    let (mut cluster, leader) = tokio::task::spawn_blocking(move || {
        let leader = cluster.wait_for_leader();
        cluster.kill(leader);
        (cluster, leader)
    })
    .await
    .unwrap();
    let token = checks::cycle_until_it_works(&store, &resource, Duration::from_secs(20)).await;
    eprintln!(
        "with the leader killed, locks worked again after {:?}",
        killed_at.elapsed()
    );
    assert!(token > last);
    last = token;
    for _ in 0..5 {
        let token = checks::cycle_until_it_works(&store, &resource, Duration::from_secs(1)).await;
        assert!(token > last);
        last = token;
    }

    // Two members down: no quorum, so acquire fails within its deadline and grants nothing.
    let second = (leader + 1) % 3;
    cluster = tokio::task::spawn_blocking(move || {
        cluster.kill(second);
        cluster
    })
    .await
    .unwrap();
    let refused = shared::unique("no-quorum");
    for _ in 0..3 {
        let started = Instant::now();
        let outcome = store
            .acquire(&refused, &owner("hopeful"), ttl(Duration::from_secs(60)))
            .await;
        let took = started.elapsed();
        assert!(
            matches!(outcome, Err(StoreError::Unavailable { .. })),
            "acquire without a quorum: {outcome:?}"
        );
        assert!(took < Duration::from_secs(10), "acquire took {took:?} to fail");
        eprintln!("without a quorum, acquire failed after {took:?}");
    }
    assert!(store.ping().await.is_err(), "ping without a quorum");

    // Both return: service resumes, the refused acquire left nothing, tokens only grow.
    let restarted_at = Instant::now();
    cluster = tokio::task::spawn_blocking(move || {
        cluster.start_again(leader);
        cluster.start_again(second);
        cluster
    })
    .await
    .unwrap();
    let token = checks::cycle_until_it_works(&store, &resource, Duration::from_secs(30)).await;
    eprintln!(
        "after the restarts, locks worked again after {:?}",
        restarted_at.elapsed()
    );
    assert!(token > last, "token {token} after {last}");
    assert_eq!(
        store.get(&refused).await.unwrap(),
        None,
        "an acquire without quorum granted"
    );
    assert_eq!(store.get(&kept).await.unwrap(), Some(kept_lease));
    drop(cluster);
}

/// Two stores on the shared server: two fencelock servers on one cluster.
async fn two_servers() -> [Arc<dyn LockStore>; 2] {
    let url = shared_url().await;
    [store(&url).await, store(&url).await]
}

fn permit(limit: u32) -> Claim {
    Claim::Permit { limit }
}

/// Issue 22: a lock handed over from one server to the other is acquired no sooner than it
/// was released — the new holder's `acquired_at` is never before the old lease's `ended_at` —
/// while acquirers on the other server race for it all along, so that some of their tries are
/// in flight when the release lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_over_between_servers_is_acquired_after_its_release() {
    const ROUNDS: usize = 20;
    let servers = two_servers().await;
    let resource = shared::unique("handed-over");
    let long = ttl(Duration::from_secs(60));
    let mut holder = shared::granted(servers[0].acquire(&resource, &owner("h"), long).await.unwrap());
    let mut early = Vec::new();
    for round in 1..=ROUNDS {
        let (from, to) = (&servers[(round + 1) % 2], &servers[round % 2]);
        let (tries, taken) = (Arc::new(AtomicUsize::new(0)), CancellationToken::new());
        let racers: Vec<_> = (0..4)
            .map(|i| {
                let (store, resource) = (to.clone(), resource.clone());
                let (tries, taken, who) = (tries.clone(), taken.clone(), owner(&format!("r{round}-{i}")));
                tokio::spawn(async move {
                    while !taken.is_cancelled() {
                        let outcome = store.acquire(&resource, &who, long).await.unwrap();
                        tries.fetch_add(1, Ordering::SeqCst);
                        match outcome {
                            AcquireOutcome::Granted { lease, .. } => {
                                taken.cancel();
                                return Some(lease);
                            }
                            AcquireOutcome::Held { .. } => {}
                            other => panic!("{other:?}"),
                        }
                    }
                    None
                })
            })
            .collect();
        eventually(Duration::from_secs(10), "the racers to try", async || {
            (tries.load(Ordering::SeqCst) >= 8).then_some(())
        })
        .await;
        let released = from
            .release(&resource, &holder.owner, Some(holder.token))
            .await
            .unwrap();
        let ReleaseOutcome::Released(Some(ended)) = released else {
            panic!("round {round}: {released:?}");
        };
        let mut winners = Vec::new();
        for racer in racers {
            winners.extend(racer.await.unwrap());
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let next = winners.remove(0);
        assert!(
            next.token > holder.token,
            "round {round}: {next:?} after {holder:?}"
        );
        if next.acquired_at < ended.ended_at {
            early.push((round, ended.ended_at.since(next.acquired_at)));
        }
        holder = next;
    }
    assert!(
        early.is_empty(),
        "acquired before the release ended the lease before it, in (round, by how much): {early:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_intent_on_one_server_holds_back_readers_on_the_other_until_withdrawn_or_run_out() {
    let [one, other] = two_servers().await;
    let mut heard = other.releases().unwrap();
    let name = shared::unique("intent");
    let long = ttl(Duration::from_secs(60));
    let reader = one
        .acquire_hold(&name, &owner("reader"), Claim::Read, long, None)
        .await
        .unwrap();
    assert!(matches!(reader, HoldOutcome::Granted { .. }), "{reader:?}");
    let writer = owner("writer");
    let refused = one
        .acquire_hold(
            &name,
            &writer,
            Claim::Write,
            long,
            Some(ttl(Duration::from_secs(60))),
        )
        .await
        .unwrap();
    assert!(matches!(refused, HoldOutcome::Busy(_)), "{refused:?}");
    let late = owner("late");
    let HoldOutcome::Busy(busy) = other
        .acquire_hold(&name, &late, Claim::Read, long, None)
        .await
        .unwrap()
    else {
        panic!("a writer waits");
    };
    assert!(busy.writer_waits, "{busy:?}");
    one.withdraw_intent(&name, &writer).await.unwrap();
    let key = Key::hold(HoldKind::RwLock, &name);
    shared::wait_for_key(&mut heard, &key, Duration::from_secs(10))
        .await
        .expect("the withdrawn intent was not announced on the other server");
    let granted = other
        .acquire_hold(&name, &late, Claim::Read, long, None)
        .await
        .unwrap();
    assert!(matches!(granted, HoldOutcome::Granted { .. }), "{granted:?}");

    // An intent its server stops renewing runs out by itself, on etcd's lease.
    let later = owner("later");
    one.acquire_hold(
        &name,
        &writer,
        Claim::Write,
        long,
        Some(ttl(Duration::from_secs(1))),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(15), "the intent to run out", async || {
        match other
            .acquire_hold(&name, &later, Claim::Read, long, None)
            .await
            .unwrap()
        {
            HoldOutcome::Granted { .. } => Ok(()),
            HoldOutcome::Busy(busy) => {
                assert!(busy.writer_waits, "{busy:?}");
                // Asks again when a notice comes, or after a second.
                let _ = shared::wait_for_key(&mut heard, &key, Duration::from_secs(1)).await;
                Err(format!("{busy:?}"))
            }
            odd => panic!("{odd:?}"),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_ttls_are_whole_seconds_rounded_up_and_expiries_are_announced_on_every_server() {
    let [one, other] = two_servers().await;
    let mut heard = other.releases().unwrap();
    let name = shared::unique("rounded-hold");
    let outcome = one
        .acquire_hold(
            &name,
            &owner("a"),
            permit(2),
            ttl(Duration::from_millis(1001)),
            None,
        )
        .await
        .unwrap();
    let HoldOutcome::Granted { hold, .. } = outcome else {
        panic!("{outcome:?}");
    };
    let lasts = hold.lease.expires_at.since(hold.lease.acquired_at);
    assert!(lasts >= Duration::from_secs(2), "asked 1.001 s, lasts {lasts:?}");
    assert_eq!(lasts.subsec_millis(), 0, "{lasts:?}");
    let key = Key::hold(HoldKind::Semaphore, &name);
    shared::wait_for_key(&mut heard, &key, Duration::from_secs(15))
        .await
        .expect("the expiry was not announced on the other server");
    assert_eq!(other.holds(HoldKind::Semaphore, &name).await.unwrap(), []);
}

#[tokio::test]
async fn prefixes_of_locks_and_holds_that_overlap_are_refused() {
    for (locks, holds) in [("/f/", "/f/"), ("/f/", "/f/holds/"), ("/f/locks/", "/f/")] {
        let options = EtcdOptions {
            prefix: locks.into(),
            holds_prefix: holds.into(),
            ..EtcdOptions::default()
        };
        let error = EtcdStore::connect_with("etcd://127.0.0.1:1", options)
            .await
            .expect_err("overlapping prefixes");
        assert!(
            matches!(&error, StoreError::Invalid(why) if why.contains("overlap")),
            "{locks} {holds}: {error}"
        );
    }
}

/// Whether a reader arriving now on `server` is held back by a waiting writer (it would be
/// granted otherwise: only readers hold the name, or nothing does).
async fn a_writer_waits(server: &dyn LockStore, name: &Resource) -> bool {
    let late = owner("late");
    match server
        .acquire_hold(name, &late, Claim::Read, ttl(Duration::from_secs(60)), None)
        .await
        .unwrap()
    {
        HoldOutcome::Busy(busy) => busy.writer_waits,
        HoldOutcome::Granted { .. } => {
            server
                .release_hold(HoldKind::RwLock, name, &late, None)
                .await
                .unwrap();
            false
        }
        odd => panic!("{odd:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_intent_is_by_name_and_only_the_principal_that_has_it_ends_it() {
    let [one, other] = two_servers().await;
    let name = shared::unique("intent-principal");
    let long = ttl(Duration::from_secs(60));
    let (billing, ops) = (owner_of("billing", "writer"), owner_of("ops", "writer"));
    let reader = owner("reader");
    let read = one
        .acquire_hold(&name, &reader, Claim::Read, long, None)
        .await
        .unwrap();
    assert!(matches!(read, HoldOutcome::Granted { .. }), "{read:?}");
    let waits = |server: &Arc<dyn LockStore>, writer: &Owner| {
        let (server, writer, name) = (server.clone(), writer.clone(), name.clone());
        async move {
            server
                .acquire_hold(&name, &writer, Claim::Write, long, Some(long))
                .await
                .unwrap()
        }
    };
    assert!(matches!(waits(&one, &billing).await, HoldOutcome::Busy(_)));

    // A namesake of another principal cannot withdraw billing's intent...
    other.withdraw_intent(&name, &ops).await.unwrap();
    assert!(
        a_writer_waits(other.as_ref(), &name).await,
        "billing's writer still waits"
    );
    // ...but waiting under the name takes it over: billing's withdrawal then ends nothing.
    assert!(matches!(waits(&other, &ops).await, HoldOutcome::Busy(_)));
    one.withdraw_intent(&name, &billing).await.unwrap();
    assert!(a_writer_waits(one.as_ref(), &name).await, "ops's writer waits");

    // Billing's writer granted the name does not take ops's intent away with its own.
    one.release_hold(HoldKind::RwLock, &name, &reader, None)
        .await
        .unwrap();
    let write = waits(&one, &billing).await;
    assert!(matches!(write, HoldOutcome::Granted { .. }), "{write:?}");
    one.release_hold(HoldKind::RwLock, &name, &billing, None)
        .await
        .unwrap();
    assert!(
        a_writer_waits(other.as_ref(), &name).await,
        "ops's writer still waits"
    );
    other.withdraw_intent(&name, &ops).await.unwrap();
    assert!(!a_writer_waits(one.as_ref(), &name).await, "no writer waits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_release_is_announced_on_every_server_and_leaves_waiting_writers_their_intents() {
    let [one, other] = two_servers().await;
    let mut heard = other.releases().unwrap();
    let name = shared::unique("forced-intent");
    let long = ttl(Duration::from_secs(60));
    let mut readers = Vec::new();
    for who in ["a", "b"] {
        match one
            .acquire_hold(&name, &owner(who), Claim::Read, long, None)
            .await
            .unwrap()
        {
            HoldOutcome::Granted { hold, .. } => readers.push(hold.lease),
            odd => panic!("{odd:?}"),
        }
    }
    let writer = owner("writer");
    let waiting = one
        .acquire_hold(&name, &writer, Claim::Write, long, Some(long))
        .await
        .unwrap();
    assert!(matches!(waiting, HoldOutcome::Busy(_)), "{waiting:?}");

    let key = Key::hold(HoldKind::RwLock, &name);
    let ForceOutcome::Released(ended) = one.force_release(&key).await.unwrap() else {
        panic!("two readers held it");
    };
    let ended: Vec<_> = ended.into_iter().map(|e| e.lease).collect();
    assert_eq!(ended, readers, "both readers, in token order");
    shared::wait_for_key(&mut heard, &key, Duration::from_secs(10))
        .await
        .expect("the force-release was not announced on the other server");
    assert_eq!(other.holds(HoldKind::RwLock, &name).await.unwrap(), []);
    assert!(
        a_writer_waits(other.as_ref(), &name).await,
        "the writer's intent stays"
    );
    let granted = other
        .acquire_hold(&name, &writer, Claim::Write, long, None)
        .await
        .unwrap();
    let HoldOutcome::Granted { hold, .. } = granted else {
        panic!("{granted:?}");
    };
    assert!(readers.iter().all(|r| r.token < hold.lease.token), "{hold:?}");
}

fn terms(ttl_of: Duration) -> Terms {
    Terms::ttl(ttl(ttl_of))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_survive_a_reopen_and_an_extension_keeps_them() {
    let url = shared_url().await;
    let resource = shared::unique("terms");
    let asked = terms(Duration::from_secs(60))
        .max_hold(Some(ttl(Duration::from_secs(30))))
        .lock_delay(Duration::from_millis(4_500));
    let lease = {
        let store = store(&url).await;
        shared::granted(store.acquire_with(&resource, &owner("a"), asked).await.unwrap())
    };
    assert_eq!(
        lease.hold_until,
        Some(lease.acquired_at.plus(ttl(Duration::from_secs(30))))
    );
    assert_eq!(lease.expires_at, lease.hold_until.unwrap(), "cut at the cap");
    assert_eq!(lease.lock_delay, Duration::from_millis(4_500));

    let reopened = store(&url).await;
    assert_eq!(reopened.get(&resource).await.unwrap(), Some(lease.clone()));
    // An extension sends other terms, and keeps the lease's.
    let AcquireOutcome::Extended(extended) = reopened
        .acquire_with(&resource, &owner("a"), terms(Duration::from_secs(5)))
        .await
        .unwrap()
    else {
        panic!("the holder re-acquires");
    };
    assert_eq!(extended.token, lease.token);
    assert_eq!(
        (extended.hold_until, extended.lock_delay),
        (lease.hold_until, lease.lock_delay)
    );
    assert!(
        extended.expires_at < lease.expires_at,
        "5 s, not up to the cap: {extended:?}"
    );
    let RenewOutcome::Renewed(renewed) = reopened
        .renew(
            &resource,
            &owner("a"),
            ttl(Duration::from_secs(600)),
            Some(lease.token),
        )
        .await
        .unwrap()
    else {
        panic!("the holder renews");
    };
    assert_eq!(
        renewed.expires_at,
        lease.hold_until.unwrap(),
        "renewed up to the cap"
    );
    assert_eq!(
        (renewed.hold_until, renewed.lock_delay),
        (lease.hold_until, lease.lock_delay)
    );
    assert_eq!(store(&url).await.get(&resource).await.unwrap(), Some(renewed));
}

/// etcd's TTLs are whole seconds, and a capped lease's key outlives a cap that ends inside
/// one: the lease still ends at the cap, for every server, and its lock-delay runs from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_inside_etcds_whole_seconds_ends_the_lease_on_every_server() {
    let [one, other] = two_servers().await;
    let resource = shared::unique("capped");
    let (cap, delay) = (Duration::from_millis(1_300), Duration::from_secs(2));
    let capped = terms(Duration::from_millis(2_001))
        .max_hold(Some(ttl(cap)))
        .lock_delay(delay);
    let lease = shared::granted(one.acquire_with(&resource, &owner("a"), capped).await.unwrap());
    assert_eq!(lease.hold_until, Some(lease.acquired_at.plus(ttl(cap))));
    assert_eq!(
        Some(lease.expires_at),
        lease.hold_until,
        "3 s rounded up, cut at the cap"
    );
    let held = other
        .acquire(&resource, &owner("b"), ttl(Duration::from_secs(60)))
        .await
        .unwrap();
    let AcquireOutcome::Held { holder, expires_in } = held else {
        panic!("{held:?}");
    };
    assert_eq!(holder, lease);
    assert!(expires_in <= cap, "{expires_in:?}");

    // Over at the cap, not at etcd's next whole second: closed for the delay from then.
    shared::until_expired(other.as_ref(), &resource, Duration::from_secs(10)).await;
    let refused = other
        .acquire(&resource, &owner("b"), ttl(Duration::from_secs(60)))
        .await
        .unwrap();
    let AcquireOutcome::Delayed { retry_in, .. } = refused else {
        panic!("{refused:?}");
    };
    assert!(retry_in <= delay, "{retry_in:?}");
    let waiters = Waiters::new(other.clone());
    let next = waiters
        .acquire_unless(
            &resource,
            &owner("b"),
            &terms(Duration::from_secs(60)),
            Duration::from_secs(20),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    let next = shared::granted(next.outcome);
    assert!(
        next.acquired_at >= lease.closed_until(),
        "{next:?} before the cap and delay of {lease:?}"
    );
    assert!(next.token > lease.token);
    assert_eq!(one.get(&resource).await.unwrap(), Some(next));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_set_through_one_server_refuses_a_grant_through_the_other_until_it_ends() {
    let [one, other] = two_servers().await;
    let resource = shared::unique("delayed");
    let delay = Duration::from_secs(3);
    let delayed = terms(Duration::from_secs(1)).lock_delay(delay);
    let lease = shared::granted(
        one.acquire_with(&resource, &owner("a"), delayed.clone())
            .await
            .unwrap(),
    );
    assert_eq!(lease.lock_delay, delay);
    assert_eq!(lease.expires_at.since(lease.acquired_at), Duration::from_secs(1));

    // Never released: once it expires, the other server is told to come back when the
    // delay ends, and its waiters are granted the lock then.
    shared::until_expired(other.as_ref(), &resource, Duration::from_secs(10)).await;
    let refused = other
        .acquire(&resource, &owner("b"), ttl(Duration::from_secs(60)))
        .await
        .unwrap();
    let AcquireOutcome::Delayed {
        resource: named,
        retry_in,
    } = refused
    else {
        panic!("{refused:?}");
    };
    assert_eq!(named, resource);
    assert!(!retry_in.is_zero() && retry_in <= delay, "{retry_in:?}");
    let waiters = Waiters::new(other.clone());
    let next = waiters
        .acquire_unless(
            &resource,
            &owner("b"),
            &terms(Duration::from_secs(60)),
            Duration::from_secs(20),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    let next = shared::granted(next.outcome);
    assert!(
        next.acquired_at >= lease.closed_until(),
        "{next:?} in the delay of {lease:?}"
    );
    assert!(next.token > lease.token);
    assert_eq!(next.lock_delay, Duration::ZERO, "b asked for none");

    // A release ends the delay at once, on every server.
    one.release(&resource, &owner("b"), Some(next.token))
        .await
        .unwrap();
    let third = shared::granted(one.acquire_with(&resource, &owner("c"), delayed).await.unwrap());
    one.release(&resource, &owner("c"), None).await.unwrap();
    let fourth = shared::granted(
        other
            .acquire(&resource, &owner("d"), ttl(Duration::from_secs(60)))
            .await
            .unwrap(),
    );
    assert!(fourth.token > third.token);
}

fn names(names: &[&Resource]) -> Resources {
    Resources::new(names.iter().map(|&name| name.clone()).collect()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_acquire_through_one_server_is_refused_whole_when_the_other_holds_a_name() {
    let [one, other] = two_servers().await;
    let (x, y, z, w) = (
        shared::unique("all-x"),
        shared::unique("all-y"),
        shared::unique("all-z"),
        shared::unique("all-w"),
    );
    let long = ttl(Duration::from_secs(60));
    let held = shared::granted(other.acquire(&y, &owner("b"), long).await.unwrap());
    let refused = one
        .acquire_all(&names(&[&x, &y, &z]), &owner("a"), Terms::ttl(long))
        .await
        .unwrap();
    let AcquireAllOutcome::Refused(refusals) = refused else {
        panic!("{refused:?}");
    };
    let [AcquireOutcome::Held { holder, expires_in }] = &refusals[..] else {
        panic!("{refusals:?}");
    };
    assert_eq!(*holder, held);
    assert!(!expires_in.is_zero());
    for name in [&x, &z] {
        assert_eq!(other.get(name).await.unwrap(), None, "{name} was taken");
    }

    // A lock in its lock-delay stands in the way too, each refusal in the order given.
    let delayed = Terms::ttl(ttl(Duration::from_secs(1))).lock_delay(Duration::from_secs(60));
    shared::granted(other.acquire_with(&w, &owner("b"), delayed).await.unwrap());
    shared::until_expired(one.as_ref(), &w, Duration::from_secs(10)).await;
    let refused = one
        .acquire_all(&names(&[&x, &w, &y]), &owner("a"), Terms::ttl(long))
        .await
        .unwrap();
    let AcquireAllOutcome::Refused(refusals) = refused else {
        panic!("{refused:?}");
    };
    assert!(
        matches!(&refusals[..], [AcquireOutcome::Delayed { resource, .. }, AcquireOutcome::Held { holder, .. }]
            if *resource == w && *holder == held),
        "{refusals:?}"
    );
    assert_eq!(other.get(&x).await.unwrap(), None);

    // Once y is free, all three are granted at once; one the caller held is extended.
    other.release(&y, &owner("b"), None).await.unwrap();
    let mine = shared::granted(one.acquire(&z, &owner("a"), long).await.unwrap());
    let granted = one
        .acquire_all(&names(&[&x, &y, &z]), &owner("a"), Terms::ttl(long))
        .await
        .unwrap();
    let AcquireAllOutcome::Granted(outcomes) = granted else {
        panic!("{granted:?}");
    };
    let [
        AcquireOutcome::Granted { lease: gx, .. },
        AcquireOutcome::Granted { lease: gy, .. },
        AcquireOutcome::Extended(gz),
    ] = &outcomes[..]
    else {
        panic!("{outcomes:?}");
    };
    assert_eq!((&gx.resource, &gy.resource), (&x, &y));
    assert!(gy.token > held.token);
    assert_eq!(gz.token, mine.token);
    for lease in [gx, gy, gz] {
        assert_eq!(other.get(&lease.resource).await.unwrap().as_ref(), Some(lease));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_acquires_in_opposite_orders_on_two_servers_never_both_win() {
    let servers = two_servers().await;
    let (a, b) = (shared::unique("race-a"), shared::unique("race-b"));
    let orders = [names(&[&a, &b]), names(&[&b, &a])];
    let mut last = FencingToken(0);
    for round in 0..20 {
        let racers: Vec<_> = (0..2)
            .map(|i| {
                let (store, resources) = (servers[i].clone(), orders[i].clone());
                let who = owner(&format!("racer-{i}"));
                tokio::spawn(async move {
                    let outcome = store
                        .acquire_all(&resources, &who, Terms::ttl(ttl(Duration::from_secs(60))))
                        .await
                        .expect("a racing multi-acquire fails");
                    (store, who, outcome)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for racer in racers {
            match racer.await.unwrap() {
                (store, who, AcquireAllOutcome::Granted(outcomes)) => winners.push((store, who, outcomes)),
                (_, _, AcquireAllOutcome::Refused(refusals)) => assert!(
                    refusals.iter().all(|r| matches!(r, AcquireOutcome::Held { .. })),
                    "round {round}: {refusals:?}"
                ),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: {winners:?}",
            winners = winners.iter().map(|w| &w.2).collect::<Vec<_>>()
        );
        let (store, who, outcomes) = winners.pop().unwrap();
        let leases: Vec<_> = outcomes.into_iter().map(shared::granted).collect();
        for lease in &leases {
            assert!(
                lease.token > last,
                "round {round}: {lease:?} after token {last:?}"
            );
            let released = store
                .release(&lease.resource, &who, Some(lease.token))
                .await
                .unwrap();
            assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
        }
        last = leases.iter().map(|l| l.token).max().unwrap();
    }
}

/// The most locks one acquire may take fit in one transaction under etcd's default limit of
/// operations (a put and a get each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_most_locks_one_acquire_may_take_fit_one_transaction() {
    let store = store(&shared_url().await).await;
    let all: Vec<Resource> = (0..fencelock_core::MAX_RESOURCES)
        .map(|i| shared::unique(&format!("many-{i}")))
        .collect();
    let resources = Resources::new(all.clone()).unwrap();
    let long = Terms::ttl(ttl(Duration::from_secs(60)));
    let granted = store
        .acquire_all(&resources, &owner("a"), long.clone())
        .await
        .unwrap();
    let AcquireAllOutcome::Granted(outcomes) = granted else {
        panic!("{granted:?}");
    };
    let leases: Vec<_> = outcomes.into_iter().map(shared::granted).collect();
    assert_eq!(
        leases.iter().map(|l| &l.resource).collect::<Vec<_>>(),
        all.iter().collect::<Vec<_>>()
    );
    // Again: every one extended, in one transaction too.
    let again = store.acquire_all(&resources, &owner("a"), long).await.unwrap();
    let AcquireAllOutcome::Granted(outcomes) = again else {
        panic!("{again:?}");
    };
    for (outcome, lease) in outcomes.iter().zip(&leases) {
        assert!(
            matches!(outcome, AcquireOutcome::Extended(extended) if extended.token == lease.token),
            "{outcome:?}"
        );
    }
}
