//! The Redis store against real, throwaway `redis-server`s, opened by address as a server
//! opens it: the conformance suite on one node and on Redlocks of 3 and of 5 independent
//! nodes; a Redlock's quorum over every subset of nodes another owner holds, for every kind;
//! nodes stopped, and started again empty; token order across two Redlock stores; and a
//! waiter woken by a release through another store.
#![cfg(feature = "redis")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock_conformance::{owner, ttl};
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Capabilities, Claim, Drift, FencingToken, HoldKind, HoldOutcome,
    Lease, LockStore, Owner, ReleaseOutcome, RenewOutcome, Resource, StoreError, Terms, Timestamp, Waiters,
};
use fencelock_testkit::{Proxy, RedisNodes, eventually, shared_redis, shared_redis_nodes};

mod shared;

/// The store at `url`, opened by address as `fencelock serve` opens it.
async fn open(url: &str) -> Arc<dyn LockStore> {
    fencelock_stores::open(url)
        .await
        .unwrap_or_else(|e| panic!("open {url}: {e}"))
}

/// The shared set of `n` nodes of this test binary; starting it blocks, so not on the async
/// workers.
async fn shared_nodes(n: usize) -> &'static RedisNodes {
    tokio::task::spawn_blocking(move || shared_redis_nodes(n))
        .await
        .expect("start redis-server")
}

/// A set of `n` nodes of the test's own, to stop and start again.
async fn own_nodes(n: usize) -> RedisNodes {
    tokio::task::spawn_blocking(move || RedisNodes::start(n))
        .await
        .expect("start redis-server")
}

/// Runs `change` (stopping or starting nodes: it blocks) off the async workers.
async fn with_nodes(
    mut nodes: RedisNodes,
    change: impl FnOnce(&mut RedisNodes) + Send + 'static,
) -> RedisNodes {
    tokio::task::spawn_blocking(move || {
        change(&mut nodes);
        nodes
    })
    .await
    .expect("stop or start redis nodes")
}

/// The conformance suite on one node.
mod one_node {
    fencelock_conformance::shared_suite!(|| fencelock_testkit::shared_redis().url(), super::open);
}

/// The conformance suite, unchanged, on a Redlock of three nodes.
mod three_nodes {
    fencelock_conformance::shared_suite!(|| fencelock_testkit::shared_redis_nodes(3).url(), super::open);
}

/// The conformance suite, unchanged, on a Redlock of five nodes.
mod five_nodes {
    fencelock_conformance::shared_suite!(|| fencelock_testkit::shared_redis_nodes(5).url(), super::open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_parser_opens_one_node_and_redlocks_of_three_or_more() {
    let one = open(&shared_redis().url()).await;
    one.ping().await.unwrap();
    let capabilities = one.capabilities();
    assert_eq!(capabilities.ttl_granularity, Duration::from_millis(1));
    assert!(!capabilities.durable, "no persistence is assumed");
    assert!(capabilities.shared && capabilities.knows_released_lease);
    assert!(capabilities.writer_intents && capabilities.principals && capabilities.lock_delays);
    assert_eq!(capabilities.drift, Drift::NONE, "one clock decides");
    for n in [3, 5] {
        let redlock = open(&shared_nodes(n).await.url()).await;
        redlock.ping().await.unwrap();
        // Only the allowance for the nodes' clocks differs, and purges that may repeat an
        // expiry: a node's key outlives the lease by a minute.
        let redlock_capabilities = Capabilities {
            drift: Drift::REDLOCK,
            expiries_repeat_within: Some(Duration::from_secs(90)),
            ..capabilities
        };
        assert_eq!(redlock.capabilities(), redlock_capabilities, "{n} nodes");
    }
    // Two nodes cannot outvote each other's loss: a Redlock needs three or more.
    let three = shared_nodes(3).await;
    let two = format!("redis://127.0.0.1:{},127.0.0.1:{}", three.port(0), three.port(1));
    for bad in [
        "redis://",
        "redis://127.0.0.1",
        "redis://127.0.0.1:x",
        "redis://:6379",
        two.as_str(),
    ] {
        let error = fencelock_stores::open(bad).await.expect_err(bad);
        assert!(
            matches!(error, fencelock_stores::OpenError::InvalidAddress { .. }),
            "{bad}: {error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_lease_ends_at_its_validity_not_at_the_raw_ttl() {
    let redlock = open(&shared_nodes(3).await.url()).await;
    let asked = Duration::from_secs(10);
    // drift = ttl × 0.01 + 2 ms
    let drift = asked / 100 + Duration::from_millis(2);
    assert_eq!(redlock.capabilities().drift.of(asked), drift);
    let lease = shared::granted(
        redlock
            .acquire(&shared::unique("validity"), &owner("a"), ttl(asked))
            .await
            .unwrap(),
    );
    let lasts = lease.expires_at.since(lease.acquired_at);
    assert!(lasts <= asked - drift, "asked {asked:?}, lasts {lasts:?}");
    assert!(lasts > asked / 2, "asked {asked:?}, lasts {lasts:?}");
}

/// What the quorum tests take of a name: a lock, the one permit of a semaphore of one, or a
/// read-write lock's write hold — each excludes every other owner.
#[derive(Debug, Clone, Copy)]
enum Take {
    Lock,
    Permit,
    Write,
}

/// What taking answered: the lease granted, or the owners in the way.
#[derive(Debug)]
enum Taken {
    Granted(Lease),
    Refused(Vec<Owner>),
}

impl Take {
    const ALL: [Self; 3] = [Self::Lock, Self::Permit, Self::Write];

    fn claim(self) -> Claim {
        match self {
            Self::Lock | Self::Permit => Claim::Permit { limit: 1 },
            Self::Write => Claim::Write,
        }
    }

    /// Takes `name` for `who` through `store`, for a minute.
    async fn take(self, store: &dyn LockStore, name: &Resource, who: &Owner) -> Result<Taken, StoreError> {
        let long = ttl(Duration::from_secs(60));
        let taken = match self {
            Self::Lock => match store.acquire(name, who, long).await? {
                AcquireOutcome::Granted { lease, .. } => Taken::Granted(lease),
                AcquireOutcome::Held { holder, .. } => Taken::Refused(vec![holder.owner]),
                odd => panic!("{self:?} of {name} by {who}: {odd:?}"),
            },
            Self::Permit | Self::Write => {
                match store.acquire_hold(name, who, self.claim(), long, None).await? {
                    HoldOutcome::Granted { hold, replaced: None } => Taken::Granted(hold.lease),
                    HoldOutcome::Busy(busy) => {
                        Taken::Refused(busy.holders.into_iter().map(|hold| hold.lease.owner).collect())
                    }
                    odd => panic!("{self:?} of {name} by {who}: {odd:?}"),
                }
            }
        };
        Ok(taken)
    }

    /// The live leases of `name` of this kind that `store` shows.
    async fn held(self, store: &dyn LockStore, name: &Resource) -> Vec<Lease> {
        let kind = match self {
            Self::Lock => return store.get(name).await.unwrap().into_iter().collect(),
            Self::Permit => HoldKind::Semaphore,
            Self::Write => HoldKind::RwLock,
        };
        let holds = store.holds(kind, name).await.unwrap();
        holds.into_iter().map(|hold| hold.lease).collect()
    }
}

/// One-node stores on each node of `nodes`: what each node holds, seen alone.
async fn each_node(nodes: &RedisNodes) -> Vec<Arc<dyn LockStore>> {
    let mut stores = Vec::new();
    for i in 0..nodes.len() {
        stores.push(open(&nodes.node_url(i)).await);
    }
    stores
}

/// For every subset of the shared `n` nodes, another owner takes a fresh name on each node
/// of the subset (through a one-node store there), then a Redlock over all `n` takes it:
/// granted exactly when a majority of nodes is free — and then held on every free node, and
/// the other's leases untouched; refused otherwise, naming the other owner, with nothing of
/// the attempt left on the free nodes. Every case is tried, and every way one went wrong is
/// reported at the end.
async fn a_free_majority_and_only_a_free_majority_grants(n: usize, take: Take) {
    let nodes = shared_nodes(n).await;
    let redlock = open(&nodes.url()).await;
    let alone = each_node(nodes).await;
    let (other, me) = (owner("other"), owner("me"));
    let mut wrong = Vec::new();
    for subset in 0u32..1 << n {
        let held_on: Vec<usize> = (0..n).filter(|i| subset & 1 << i != 0).collect();
        let free = n - held_on.len();
        let case = format!("{take:?} on {n} nodes, another owner on nodes {held_on:?}");
        let name = shared::unique(&format!("quorum-{subset}"));
        for &i in &held_on {
            let planted = take.take(alone[i].as_ref(), &name, &other).await.unwrap();
            assert!(
                matches!(planted, Taken::Granted(_)),
                "{case}: node {i}: {planted:?}"
            );
        }

        let taken = take.take(redlock.as_ref(), &name, &me).await;
        match &taken {
            Ok(Taken::Granted(_)) if free <= n / 2 => wrong.push(format!("{case}: granted with {free} free")),
            Ok(Taken::Refused(_)) if free > n / 2 => wrong.push(format!("{case}: refused with {free} free")),
            Ok(Taken::Refused(in_the_way)) if !in_the_way.contains(&other) || in_the_way.contains(&me) => {
                wrong.push(format!("{case}: refused for {in_the_way:?}"))
            }
            Ok(_) => {}
            Err(e) => wrong.push(format!("{case}: {e}")),
        }
        // A majority decides; a node that answered late gets the grant, or its undo, just
        // after: look until every node is as it should be, or a deadline passes.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut off = Vec::new();
            for (i, node) in alone.iter().enumerate() {
                let leases = take.held(node.as_ref(), &name).await;
                let seen: Vec<(&str, FencingToken)> =
                    leases.iter().map(|l| (l.owner.as_str(), l.token)).collect();
                let owners: Vec<&str> = seen.iter().map(|(owner, _)| *owner).collect();
                let fine = if held_on.contains(&i) {
                    owners == [other.as_str()]
                } else if let Ok(Taken::Granted(lease)) = &taken {
                    seen == [(me.as_str(), lease.token)]
                } else {
                    seen.is_empty()
                };
                if !fine {
                    off.push(format!("{case}: node {i} holds {seen:?}"));
                }
            }
            if off.is_empty() || Instant::now() > deadline {
                wrong.extend(off);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(
        wrong.is_empty(),
        "{} things went wrong in {} cases:\n{}",
        wrong.len(),
        1 << n,
        wrong.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_on_three_nodes_is_granted_exactly_when_a_majority_is_free() {
    a_free_majority_and_only_a_free_majority_grants(3, Take::Lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_on_five_nodes_is_granted_exactly_when_a_majority_is_free() {
    a_free_majority_and_only_a_free_majority_grants(5, Take::Lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_on_three_nodes_is_granted_exactly_when_a_majority_is_free() {
    a_free_majority_and_only_a_free_majority_grants(3, Take::Permit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_on_five_nodes_is_granted_exactly_when_a_majority_is_free() {
    a_free_majority_and_only_a_free_majority_grants(5, Take::Permit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_hold_on_three_nodes_is_granted_exactly_when_a_majority_is_free() {
    a_free_majority_and_only_a_free_majority_grants(3, Take::Write).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_hold_on_five_nodes_is_granted_exactly_when_a_majority_is_free() {
    a_free_majority_and_only_a_free_majority_grants(5, Take::Write).await;
}

/// Grants `name` to `who` and releases it, retrying while the store is unavailable (nodes
/// just started again are reconnected to) until `within` runs out; the token granted.
async fn grant_and_release_until_it_works(
    store: &dyn LockStore,
    name: &Resource,
    within: Duration,
) -> FencingToken {
    let what = format!("{name}: locks to work again");
    eventually(within, &what, async || grant_and_release(store, name).await).await
}

/// Grants `name` and releases it; the token granted.
async fn grant_and_release(store: &dyn LockStore, name: &Resource) -> Result<FencingToken, StoreError> {
    let who = owner("cycler");
    // An earlier attempt that failed half-way may have left the lock to us (on a majority):
    // then this extends it, with that attempt's token.
    let lease = match store.acquire(name, &who, ttl(Duration::from_secs(60))).await? {
        AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease) => lease,
        refused => panic!("{name}: nobody else uses it: {refused:?}"),
    };
    match store.release(name, &who, Some(lease.token)).await? {
        ReleaseOutcome::Released(_) => Ok(lease.token),
        other => panic!("{name}: release after a grant: {other:?}"),
    }
}

/// Waits for `call` to answer, for calls that must not hang when nodes are down (it answers
/// within the store's own timeouts; this bound only keeps a hang from stalling the run).
async fn answered<T>(doing: &str, call: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .unwrap_or_else(|_| panic!("{doing}: no answer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_of_three_down_locks_keep_working_and_two_down_refuse_leaving_nothing() {
    let nodes = own_nodes(3).await;
    let redlock = open(&nodes.url()).await;
    let long = ttl(Duration::from_secs(60));
    let kept = shared::unique("kept");
    let keeper = owner("keeper");
    let kept_lease = shared::granted(redlock.acquire(&kept, &keeper, long).await.unwrap());

    // One of three down: a majority answers, and every call works as before.
    let nodes = with_nodes(nodes, |nodes| nodes.kill(0)).await;
    let name = shared::unique("one-down");
    let who = owner("a");
    let lease = shared::granted(redlock.acquire(&name, &who, long).await.unwrap());
    assert!(lease.token > FencingToken(0));
    assert_eq!(
        redlock.get(&name).await.unwrap().map(|l| l.token),
        Some(lease.token)
    );
    let RenewOutcome::Renewed(renewed) = redlock.renew(&name, &who, long, Some(lease.token)).await.unwrap()
    else {
        panic!("the holder renews with a node down");
    };
    assert_eq!(renewed.token, lease.token);
    let released = redlock.release(&name, &who, Some(lease.token)).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
    assert_eq!(redlock.get(&name).await.unwrap(), None);
    let again = shared::granted(redlock.acquire(&name, &owner("b"), long).await.unwrap());
    assert!(again.token > lease.token);
    let renewed = redlock
        .renew(&kept, &keeper, long, Some(kept_lease.token))
        .await
        .unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed(_)), "{renewed:?}");
    for take in [Take::Permit, Take::Write] {
        let name = shared::unique(&format!("one-down-{take:?}"));
        let taken = take.take(redlock.as_ref(), &name, &who).await.unwrap();
        assert!(matches!(taken, Taken::Granted(_)), "{take:?}: {taken:?}");
    }

    // Two of three down: no majority, so acquires fail, and promptly.
    let nodes = with_nodes(nodes, |nodes| nodes.kill(1)).await;
    let refused = shared::unique("two-down");
    let hopeful = owner("hopeful");
    let outcome = answered(
        "acquire without a majority",
        redlock.acquire(&refused, &hopeful, long),
    )
    .await;
    assert!(
        matches!(outcome, Err(StoreError::Unavailable { .. })),
        "{outcome:?}"
    );
    for take in [Take::Permit, Take::Write] {
        let taken = answered(
            "a hold without a majority",
            take.take(redlock.as_ref(), &refused, &hopeful),
        )
        .await;
        assert!(
            matches!(taken, Err(StoreError::Unavailable { .. })),
            "{take:?}: {taken:?}"
        );
    }
    let renewed = answered(
        "renew without a majority",
        redlock.renew(&kept, &keeper, long, None),
    )
    .await;
    assert!(
        matches!(renewed, Err(StoreError::Unavailable { .. })),
        "{renewed:?}"
    );
    assert!(answered("ping without a majority", redlock.ping()).await.is_err());

    // Both back, empty: none of the refused attempts holds anything on any node (the node
    // that stayed up granted them, and must have taken the grants back), and the names are
    // free for anyone.
    let nodes = with_nodes(nodes, |nodes| {
        nodes.start_again(0);
        nodes.start_again(1);
    })
    .await;
    let alone = each_node(&nodes).await;
    for take in Take::ALL {
        for (i, node) in alone.iter().enumerate() {
            let left = take.held(node.as_ref(), &refused).await;
            assert_eq!(left, [], "{take:?}: node {i} keeps part of a refused acquire");
        }
    }
    grant_and_release_until_it_works(redlock.as_ref(), &shared::unique("back"), Duration::from_secs(30))
        .await;
    for take in Take::ALL {
        let taken = take
            .take(redlock.as_ref(), &refused, &owner("later"))
            .await
            .unwrap();
        assert!(matches!(taken, Taken::Granted(_)), "{take:?}: {taken:?}");
    }
}

/// Grants and releases a name on `n` own nodes; then, for each node in turn, stops `together`
/// nodes from it on and starts them again empty (a majority keeps its data), and grants
/// again: every token is greater than every one before.
async fn tokens_grow_across_nodes_started_again_empty(n: usize, together: usize) {
    assert!(n - together > n / 2, "a majority keeps its data");
    let mut nodes = own_nodes(n).await;
    let redlock = open(&nodes.url()).await;
    let name = shared::unique("restarted");
    let mut last = grant_and_release(redlock.as_ref(), &name).await.unwrap();
    for first in 0..n {
        let emptied: Vec<usize> = (first..first + together).map(|i| i % n).collect();
        let stopped = emptied.clone();
        nodes = with_nodes(nodes, move |nodes| {
            for i in stopped {
                nodes.kill(i);
                nodes.start_again(i);
            }
        })
        .await;
        // A majority kept its data; the nodes that lost theirs are brought up to date before
        // they count again, which the last ones emptied may wait for.
        let token = grant_and_release_until_it_works(redlock.as_ref(), &name, Duration::from_secs(30)).await;
        assert!(
            token > last,
            "nodes {emptied:?} started again empty: token {token} after {last}"
        );
        last = token;
        let token = grant_and_release(redlock.as_ref(), &name).await.unwrap();
        assert!(
            token > last,
            "nodes {emptied:?} started again empty: token {token} after {last}"
        );
        last = token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_growing_when_each_of_three_nodes_in_turn_starts_again_empty() {
    tokens_grow_across_nodes_started_again_empty(3, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_growing_when_two_of_five_nodes_at_a_time_start_again_empty() {
    tokens_grow_across_nodes_started_again_empty(5, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_started_again_empty_still_grants_a_greater_token() {
    let nodes = own_nodes(1).await;
    let store = open(&nodes.node_url(0)).await;
    let name = shared::unique("one-restarted");
    let mut last = grant_and_release(store.as_ref(), &name).await.unwrap();
    let mut nodes = nodes;
    for _ in 0..3 {
        nodes = with_nodes(nodes, |nodes| {
            nodes.kill(0);
            nodes.start_again(0);
        })
        .await;
        let token = grant_and_release_until_it_works(store.as_ref(), &name, Duration::from_secs(30)).await;
        assert!(token > last, "started again empty: token {token} after {last}");
        last = token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_stopped_answers_unavailable_and_serves_again_when_back() {
    let nodes = own_nodes(1).await;
    let store = open(&nodes.node_url(0)).await;
    let name = shared::unique("one-down");
    let who = owner("a");
    let held = match store
        .acquire(&name, &who, ttl(Duration::from_secs(60)))
        .await
        .unwrap()
    {
        AcquireOutcome::Granted { lease, .. } => lease,
        other => panic!("a free lock: {other:?}"),
    };
    let nodes = with_nodes(nodes, |nodes| nodes.kill(0)).await;
    let down = |e: StoreError| assert!(matches!(e, StoreError::Unavailable { .. }), "{e}");
    down(
        answered(
            "acquire",
            store.acquire(&name, &owner("b"), ttl(Duration::from_secs(60))),
        )
        .await
        .unwrap_err(),
    );
    down(answered("get", store.get(&name)).await.unwrap_err());
    down(
        answered(
            "renew",
            store.renew(&name, &who, ttl(Duration::from_secs(60)), Some(held.token)),
        )
        .await
        .unwrap_err(),
    );
    down(
        answered("release", store.release(&name, &who, Some(held.token)))
            .await
            .unwrap_err(),
    );
    down(answered("ping", store.ping()).await.unwrap_err());
    let _nodes = with_nodes(nodes, |nodes| nodes.start_again(0)).await;
    // Back, and empty: the lock is free, and its next token is still greater.
    let token = grant_and_release_until_it_works(store.as_ref(), &name, Duration::from_secs(30)).await;
    assert!(token > held.token, "token {token} after {}", held.token);
    store.ping().await.unwrap();
}

/// The racers' shared record of the lock: whether someone holds it, and the last token
/// granted.
#[derive(Debug, Default)]
struct Race {
    grants: usize,
    holding: bool,
    last: Option<FencingToken>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_grants_racing_from_two_redlock_stores_come_in_token_order() {
    const GRANTS: usize = 50;
    let url = shared_nodes(3).await.url();
    let name = shared::unique("racing");
    let race = Arc::new(Mutex::new(Race::default()));
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut racers = tokio::task::JoinSet::new();
    for i in 0..2 {
        let (store, name, race) = (open(&url).await, name.clone(), race.clone());
        racers.spawn(async move {
            let who = owner(&format!("racer-{i}"));
            let mut mine = 0;
            while race.lock().unwrap().grants < GRANTS {
                assert!(Instant::now() < deadline, "{who}: {GRANTS} grants took too long");
                let lease = match store
                    .acquire(&name, &who, ttl(Duration::from_secs(60)))
                    .await
                    .unwrap()
                {
                    AcquireOutcome::Granted { lease, .. } => lease,
                    // Held by the other racer, or a split vote that neither won: again, a
                    // little later than the other racer, so that split votes do not repeat.
                    AcquireOutcome::Held { .. } => {
                        tokio::time::sleep(Duration::from_millis(1 + i)).await;
                        continue;
                    }
                    odd => panic!("{who}: {odd:?}"),
                };
                // Asserted after the record is let go: a racer that fails must not poison it.
                let (holding, last) = {
                    let mut race = race.lock().unwrap();
                    let before = (race.holding, race.last);
                    race.holding = true;
                    race.last = Some(lease.token);
                    race.grants += 1;
                    before
                };
                assert!(!holding, "{who} was granted {lease:?} while the other held it");
                assert!(
                    last < Some(lease.token),
                    "{who}: token {} after {last:?}",
                    lease.token
                );
                mine += 1;
                // Held over a round trip: the other racer's acquires meanwhile must fail.
                let seen = store.get(&name).await.unwrap().map(|lease| lease.token);
                assert_eq!(seen, Some(lease.token), "{who} holds it");
                // No longer holding once the release is sent: the other may be granted then.
                race.lock().unwrap().holding = false;
                let released = store.release(&name, &who, Some(lease.token)).await.unwrap();
                assert!(
                    matches!(released, ReleaseOutcome::Released(_)),
                    "{who}: {released:?}"
                );
            }
            mine
        });
    }
    // The first racer to fail fails the test at once (the other, left waiting for a lock the
    // failed one holds, is dropped).
    let mut per_racer = Vec::new();
    while let Some(done) = racers.join_next().await {
        per_racer.push(done.unwrap_or_else(|failed| std::panic::resume_unwind(failed.into_panic())));
    }
    eprintln!("grants per racer: {per_racer:?}");
    assert!(race.lock().unwrap().grants >= GRANTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_one_redlock_store_is_woken_by_a_release_through_another() {
    let url = shared_nodes(3).await.url();
    let (one, other) = (open(&url).await, open(&url).await);
    let name = shared::unique("woken");
    // The holder's lease runs a minute: a waiter granted within seconds of the release was
    // woken by its notice, not by the expiry.
    let holder = shared::granted(
        one.acquire(&name, &owner("holder"), ttl(Duration::from_secs(60)))
            .await
            .unwrap(),
    );
    let waiters = Waiters::new(other);
    let waiting = {
        let (waiters, name) = (waiters.clone(), name.clone());
        tokio::spawn(async move {
            waiters
                .acquire(
                    &name,
                    &owner("waiter"),
                    ttl(Duration::from_secs(60)),
                    Duration::from_secs(60),
                )
                .await
        })
    };
    fencelock_testkit::eventually(Duration::from_secs(10), "the waiter to queue", async || {
        (waiters.waiting() > 0).then_some(())
    })
    .await;
    let released = one
        .release(&name, &holder.owner, Some(holder.token))
        .await
        .unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
    let woken = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was not woken by the release through the other store");
    let lease = shared::granted(woken.unwrap().unwrap());
    assert!(lease.token > holder.token, "{lease:?} after {holder:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_are_heard_on_another_store_with_a_node_down() {
    let nodes = own_nodes(3).await;
    let (one, other) = (open(&nodes.url()).await, open(&nodes.url()).await);
    // A new Redlock starts with every node answering.
    grant_and_release(one.as_ref(), &shared::unique("warm"))
        .await
        .unwrap();
    let nodes = with_nodes(nodes, |nodes| nodes.kill(2)).await;
    let mut heard = other.releases().expect("a Redis store announces releases");
    let long = ttl(Duration::from_secs(60));
    let who = owner("a");

    let name = shared::unique("heard");
    let lease = shared::granted(one.acquire(&name, &who, long).await.unwrap());
    one.release(&name, &who, Some(lease.token)).await.unwrap();
    shared::wait_for_release(&mut heard, &name, Duration::from_secs(10))
        .await
        .expect("the release was not heard on the other store");

    let held = shared::unique("heard-hold");
    let taken = Take::Write.take(one.as_ref(), &held, &who).await.unwrap();
    assert!(matches!(taken, Taken::Granted(_)), "{taken:?}");
    one.release_hold(HoldKind::RwLock, &held, &who, None)
        .await
        .unwrap();
    let key = fencelock_core::Key::hold(HoldKind::RwLock, &held);
    shared::wait_for_key(&mut heard, &key, Duration::from_secs(10))
        .await
        .expect("the hold's release was not heard on the other store");
    drop(nodes);
}

/// A Redlock store over `nodes` that cannot reach node `unreachable`, as across a network
/// partition, while other stores can: it reaches each node through a proxy, and that node's
/// is cut for good (what the store sends there never arrives). Keep the proxies while the
/// store is used.
async fn cut_off_from(nodes: &RedisNodes, unreachable: usize) -> (Arc<dyn LockStore>, Vec<Proxy>) {
    let proxies: Vec<Proxy> = (0..nodes.len()).map(|i| Proxy::start(nodes.port(i))).collect();
    proxies[unreachable].cut();
    let through: Vec<String> = proxies
        .iter()
        .map(|proxy| format!("127.0.0.1:{}", proxy.port()))
        .collect();
    (open(&format!("redis://{}", through.join(","))).await, proxies)
}

/// Three servers, each cut off from another one of three nodes (each still reaches a
/// majority), take a permit of a semaphore of two one after the other. Each node alone
/// never holds more than two, yet each permit has a majority — unless a store counts the
/// permits a majority agrees on, or makes each permit exclusive some other way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_on_redlock_never_grants_more_than_its_limit_across_a_partition() {
    const LIMIT: u32 = 2;
    let nodes = shared_nodes(3).await;
    let name = shared::unique("partitioned-permits");
    let mut granted = Vec::new();
    let mut proxies = Vec::new();
    for (i, unreachable) in [2, 0, 1].into_iter().enumerate() {
        let (store, kept) = cut_off_from(nodes, unreachable).await;
        proxies.push(kept);
        let who = owner(&format!("worker-{i}"));
        let outcome = store
            .acquire_hold(
                &name,
                &who,
                Claim::Permit { limit: LIMIT },
                ttl(Duration::from_secs(60)),
                None,
            )
            .await;
        match outcome {
            Ok(HoldOutcome::Granted { hold, .. }) => granted.push(hold.lease),
            Ok(HoldOutcome::Busy(_)) | Err(StoreError::Unavailable { .. }) => {}
            odd => panic!("{who}, cut off from node {unreachable}: {odd:?}"),
        }
    }
    let live = open(&nodes.url())
        .await
        .holds(HoldKind::Semaphore, &name)
        .await
        .unwrap();
    let owners = |leases: &[Lease]| leases.iter().map(|l| l.owner.to_string()).collect::<Vec<_>>();
    assert!(
        granted.len() <= LIMIT as usize,
        "{} permits of a semaphore of {LIMIT} granted, to {:?}",
        granted.len(),
        owners(&granted)
    );
    let live: Vec<Lease> = live.into_iter().map(|hold| hold.lease).collect();
    assert!(
        live.len() <= LIMIT as usize,
        "{} live permits of a semaphore of {LIMIT}: {:?}",
        live.len(),
        owners(&live)
    );
}

/// How a node of a Redlock fails in the fault tests.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Killed: connections are refused.
    Dead,
    /// Stopped where it stands (SIGSTOP): connections stay open, nothing is answered.
    Hung,
}

impl Fault {
    fn hit(self, nodes: &mut RedisNodes, i: usize) {
        match self {
            Self::Dead => nodes.kill(i),
            Self::Hung => nodes.pause(i),
        }
    }

    /// Ends the fault: a dead node starts again empty, a hung one goes on.
    fn heal(self, nodes: &mut RedisNodes, i: usize) {
        match self {
            Self::Dead => nodes.start_again(i),
            Self::Hung => nodes.resume(i),
        }
    }
}

/// `n` fresh names of this test.
fn names(tag: &str, n: usize) -> fencelock_core::Resources {
    let prefix = fencelock_testkit::fixtures::unique_prefix();
    fencelock_core::Resources::new(
        (0..n)
            .map(|i| Resource::new(format!("{prefix}{tag}-{i}")).unwrap())
            .collect(),
    )
    .unwrap()
}

/// With one node of three dead, or hung, Redlock works as it does with all three: every
/// single acquire (500 ms leases) and release is answered, all-or-none acquires of 20 names
/// are granted whole, or refused with nothing taken on the nodes that answer, permits and
/// holds are granted — nothing is answered 503. A node that comes back (empty, if it died)
/// takes part again without the store being opened anew.
async fn one_node_of_three_failing_changes_nothing_a_caller_sees(fault: Fault) {
    let nodes = own_nodes(3).await;
    let redlock = open(&nodes.url()).await;
    grant_and_release(redlock.as_ref(), &shared::unique("warm"))
        .await
        .unwrap();
    let mut nodes = with_nodes(nodes, move |nodes| fault.hit(nodes, 2)).await;
    let alone: Vec<Arc<dyn LockStore>> = vec![open(&nodes.node_url(0)).await, open(&nodes.node_url(1)).await];
    let who = owner("a");

    for i in 0..20 {
        let name = shared::unique(&format!("short-{i}"));
        let outcome = redlock
            .acquire(&name, &who, fencelock_testkit::fixtures::ttl_ms(500))
            .await;
        let lease = shared::granted(outcome.unwrap_or_else(|e| panic!("{fault:?}: acquire {i}: {e}")));
        let released = redlock.release(&name, &who, Some(lease.token)).await;
        assert!(
            matches!(released, Ok(ReleaseOutcome::Released(_))),
            "{fault:?}: release {i}: {released:?}"
        );
    }

    let all = names("all", 20);
    let long = Terms::ttl(ttl(Duration::from_secs(60)));
    match redlock.acquire_all(&all, &who, long.clone()).await {
        Ok(AcquireAllOutcome::Granted(outcomes)) => {
            let tokens: Vec<u64> = outcomes.iter().map(|o| o.lease().unwrap().token.0).collect();
            assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "{fault:?}: {tokens:?}");
        }
        other => panic!("{fault:?}: 20 free names, yet {other:?}"),
    }

    let some = names("some", 20);
    let in_the_way = &some.as_slice()[13];
    shared::granted(
        redlock
            .acquire(in_the_way, &owner("other"), ttl(Duration::from_secs(60)))
            .await
            .unwrap(),
    );
    match redlock.acquire_all(&some, &who, long).await {
        Ok(AcquireAllOutcome::Refused(refusals)) => assert_eq!(refusals.len(), 1, "{fault:?}: {refusals:?}"),
        other => panic!("{fault:?}: one name of 20 held, yet {other:?}"),
    }
    for node in &alone {
        for name in some.as_slice() {
            let lease = node.get(name).await.unwrap();
            assert!(
                lease.is_none_or(|l| l.owner != who),
                "{fault:?}: a refused all-or-none left {name} to its caller on a node"
            );
        }
    }

    for take in [Take::Permit, Take::Write] {
        let name = shared::unique(&format!("{fault:?}-{take:?}"));
        let taken = take.take(redlock.as_ref(), &name, &who).await;
        assert!(
            matches!(taken, Ok(Taken::Granted(_))),
            "{fault:?}: {take:?}: {taken:?}"
        );
    }

    // Back: the node takes part again (brought up to date first, if it lost its data), so a
    // grant reaches it.
    nodes = with_nodes(nodes, move |nodes| fault.heal(nodes, 2)).await;
    let node = open(&nodes.node_url(2)).await;
    let name = shared::unique("back");
    fencelock_testkit::eventually(
        Duration::from_secs(30),
        "the node that came back to take part",
        async || {
            let lease = match redlock.acquire(&name, &who, ttl(Duration::from_secs(60))).await {
                Ok(AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease)) => lease,
                Ok(other) => panic!("{fault:?}: nobody else takes it: {other:?}"),
                Err(_) => return None,
            };
            let on_node = node.get(&name).await.ok().flatten();
            let back = on_node.is_some_and(|l| l.token == lease.token);
            if !back {
                // The next try takes it anew.
                let _ = redlock.release(&name, &who, Some(lease.token)).await;
            }
            back.then_some(())
        },
    )
    .await;
    drop(nodes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_of_three_dead_changes_nothing_a_caller_sees() {
    one_node_of_three_failing_changes_nothing_a_caller_sees(Fault::Dead).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_of_three_hung_changes_nothing_a_caller_sees() {
    one_node_of_three_failing_changes_nothing_a_caller_sees(Fault::Hung).await;
}

/// An all-or-none acquire whose caller gives up (its deadline passed, its client hung up)
/// while two nodes of three hang takes nothing: when they answer again, what they were sent
/// meanwhile changes nothing, and every name is free for anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_all_or_none_its_caller_gave_up_on_takes_nothing_when_hung_nodes_come_back() {
    let nodes = own_nodes(3).await;
    let redlock = open(&nodes.url()).await;
    grant_and_release(redlock.as_ref(), &shared::unique("warm"))
        .await
        .unwrap();
    let nodes = with_nodes(nodes, |nodes| {
        nodes.pause(1);
        nodes.pause(2);
    })
    .await;
    let wanted = names("given-up", 10);
    let who = owner("gave-up");
    let long = Terms::ttl(ttl(Duration::from_secs(60)));
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        redlock.acquire_all(&wanted, &who, long.clone()),
    )
    .await;
    assert!(
        !matches!(gave_up, Ok(Ok(AcquireAllOutcome::Granted(_)))),
        "granted with two nodes of three hung: {gave_up:?}"
    );
    let nodes = with_nodes(nodes, |nodes| {
        nodes.resume(1);
        nodes.resume(2);
    })
    .await;
    let alone: Vec<Arc<dyn LockStore>> = vec![
        open(&nodes.node_url(0)).await,
        open(&nodes.node_url(1)).await,
        open(&nodes.node_url(2)).await,
    ];
    // What the hung nodes were sent is carried out when they go on: the undo that follows
    // it must leave nothing.
    fencelock_testkit::eventually(
        Duration::from_secs(20),
        "every name free on every node",
        async || {
            for node in &alone {
                for name in wanted.as_slice() {
                    if node.get(name).await.ok()?.is_some() {
                        return None;
                    }
                }
            }
            Some(())
        },
    )
    .await;
    let other = owner("next");
    let granted = redlock.acquire_all(&wanted, &other, long).await.unwrap();
    assert!(matches!(granted, AcquireAllOutcome::Granted(_)), "{granted:?}");
}

/// A try that cannot decide never takes the caller's own lease away. The owner holds a lock
/// on a bare majority (nodes 0 and 1); with node 1 hung, its acquire again (an extension) is
/// extended on node 0 and granted anew on node 2 — no majority either way. Undoing that try
/// must put node 0's lease back as it was, not delete it: once node 1 answers again, the lease
/// is still the owner's on a majority, and nobody else is granted the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_extension_never_takes_the_callers_lease_away() {
    let nodes = own_nodes(3).await;
    let redlock = open(&nodes.url()).await;
    grant_and_release(redlock.as_ref(), &shared::unique("warm"))
        .await
        .unwrap();
    let (partial, _proxies) = cut_off_from(&nodes, 2).await;
    let name = shared::unique("bare-majority");
    let holder = owner("holder");
    let long = ttl(Duration::from_secs(60));
    let lease = shared::granted(partial.acquire(&name, &holder, long).await.unwrap());
    let nodes = with_nodes(nodes, |nodes| nodes.pause(1)).await;
    let again = redlock.acquire(&name, &holder, long).await;
    assert!(
        !matches!(again, Ok(AcquireOutcome::Granted { .. })),
        "a new lease while the old one stands on a majority: {again:?}"
    );
    let nodes = with_nodes(nodes, |nodes| nodes.resume(1)).await;
    fencelock_testkit::eventually(
        Duration::from_secs(20),
        "the holder's lease on a majority",
        async || {
            let now = redlock.get(&name).await.ok()?;
            now.is_some_and(|l| l.token == lease.token && l.owner == holder)
                .then_some(())
        },
    )
    .await;
    let other = redlock.acquire(&name, &owner("other"), long).await.unwrap();
    assert!(matches!(other, AcquireOutcome::Held { .. }), "{other:?}");
    drop(nodes);
}

/// Token order survives a node that restarted empty while another is cut off, even from a
/// server whose clock is ten seconds behind: the empty node takes no part until it is brought up
/// to date from the node that kept the last grant, so a majority never proposes a token below
/// one already issued. (Without that: tokens from the empty node and one that never saw the
/// grant, with the slow clock's floor, go back.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_empty_never_lets_tokens_go_back() {
    let nodes = own_nodes(3).await;
    grant_and_release(open(&nodes.url()).await.as_ref(), &shared::unique("warm"))
        .await
        .unwrap();
    // Server A reaches nodes 0 and 1, not 2.
    let (a, _a_proxies) = cut_off_from(&nodes, 2).await;
    let name = shared::unique("empty-restart");
    let first = shared::granted(
        a.acquire(&name, &owner("a"), ttl(Duration::from_secs(60)))
            .await
            .unwrap(),
    );
    a.release(&name, &owner("a"), Some(first.token)).await.unwrap();
    let nodes = with_nodes(nodes, |nodes| {
        nodes.kill(1);
        nodes.start_again(1);
    })
    .await;
    // Server B reaches nodes 1 and 2, not 0, and its clock is ten seconds behind (more than
    // this test takes between A's grant and B's).
    let proxies: Vec<Proxy> = (0..3).map(|i| Proxy::start(nodes.port(i))).collect();
    proxies[0].cut();
    let through: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.port()))
        .collect();
    let behind = Timestamp::from_millis(Timestamp::now_wall().as_millis() - 10_000);
    let options = fencelock_stores::redis::RedisOptions {
        clock: Arc::new(fencelock_core::TokioClock::new(behind)),
        marking_window: Duration::ZERO,
        ..Default::default()
    };
    let b =
        fencelock_stores::redis::RedisStore::connect_with(&format!("redis://{}", through.join(",")), options)
            .await
            .unwrap();
    let short = ttl(Duration::from_secs(60));
    match b.acquire(&name, &owner("b"), short).await {
        Ok(AcquireOutcome::Granted { lease, .. }) => {
            assert!(
                lease.token > first.token,
                "token {} after {}",
                lease.token,
                first.token
            );
        }
        Ok(other) => panic!("nobody holds it: {other:?}"),
        Err(StoreError::Unavailable { .. }) => {}
        Err(other) => panic!("{other}"),
    }
    // Node 0 reachable again: node 1 is brought up to date, and tokens go on above.
    proxies[0].restore();
    let next = fencelock_testkit::eventually(Duration::from_secs(30), "a grant through B", async || match b
        .acquire(&name, &owner("b"), short)
        .await
    {
        Ok(AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease)) => Some(lease),
        _ => None,
    })
    .await;
    assert!(
        next.token > first.token,
        "token {} after {}",
        next.token,
        first.token
    );
    drop(nodes);
}

/// An all-or-none acquire of 20 names with one node of three dead, given up on by its caller
/// after a second (a client that hung up, a deadline): either it was granted whole in that
/// time, or it takes nothing — no name is left to the caller on a majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_all_or_none_given_up_on_with_a_node_dead_is_whole_or_nothing() {
    let nodes = own_nodes(3).await;
    let redlock = open(&nodes.url()).await;
    grant_and_release(redlock.as_ref(), &shared::unique("warm"))
        .await
        .unwrap();
    let nodes = with_nodes(nodes, |nodes| nodes.kill(2)).await;
    let wanted = names("dead-node", 20);
    let who = owner("impatient");
    let long = Terms::ttl(ttl(Duration::from_secs(60)));
    let answer = tokio::time::timeout(Duration::from_secs(1), redlock.acquire_all(&wanted, &who, long)).await;
    let held = |lease: Option<Lease>| lease.is_some_and(|l| l.owner == who);
    if let Ok(Ok(AcquireAllOutcome::Granted(_))) = answer {
        for name in wanted.as_slice() {
            assert!(
                held(redlock.get(name).await.unwrap()),
                "{name}: granted whole, yet not held"
            );
        }
    } else {
        fencelock_testkit::eventually(
            Duration::from_secs(20),
            "no name left to the caller",
            async || {
                for name in wanted.as_slice() {
                    if held(redlock.get(name).await.ok()?) {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;
    }
    drop(nodes);
}
