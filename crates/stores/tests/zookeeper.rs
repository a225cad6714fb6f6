//! The ZooKeeper store against real, throwaway ZooKeeper: the conformance suite on a
//! standalone server; members of a three-member ensemble stopped and started again; two
//! stores (two fencelock servers) on one ensemble; a store whose session expires; and
//! events told while a server's connection was lost or its session expired.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock_conformance::{checks, owner, ttl};
use fencelock_core::store::PURGE_BATCH;
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Bulletin, Claim, FencingToken, Heard, HoldKind, HoldOutcome, Key,
    LockStore, ReleaseNotice, ReleaseOutcome, Resource, Resources, StoreError, Terms, Timestamp, Waiters,
};
use fencelock_stores::Deadline;
use fencelock_stores::zookeeper::{ZooKeeperOptions, ZooKeeperStore};
use fencelock_testkit::{Proxy, ZooKeeper, ZooKeeperEnsemble, eventually, shared_zookeeper};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

mod shared;

/// The shared server's address; starting it blocks, so not on the async worker.
async fn shared_url() -> String {
    tokio::task::spawn_blocking(|| shared_zookeeper().url())
        .await
        .expect("start ZooKeeper")
}

async fn store(url: &str) -> Arc<Deadline<ZooKeeperStore>> {
    Arc::new(ZooKeeperStore::connect(url).await.expect("connect to ZooKeeper"))
}

fencelock_conformance::shared_suite!(|| shared_zookeeper().url(), store);

/// Short timeouts, so that calls without a quorum fail quickly; a session that outlives the
/// loss of a member (the client moves to another one within it).
fn impatient() -> ZooKeeperOptions {
    ZooKeeperOptions {
        session_timeout: Duration::from_secs(4),
        connect_timeout: Duration::from_secs(1),
        call_timeout: Duration::from_secs(2),
        ..ZooKeeperOptions::default()
    }
}

async fn store_with(url: &str, options: ZooKeeperOptions) -> Arc<Deadline<ZooKeeperStore>> {
    Arc::new(
        ZooKeeperStore::connect_with(url, options)
            .await
            .expect("connect to ZooKeeper"),
    )
}

/// Starts an ensemble of `size` (blocking, so not on the async worker).
async fn ensemble(size: usize) -> ZooKeeperEnsemble {
    tokio::task::spawn_blocking(move || ZooKeeperEnsemble::start(size))
        .await
        .expect("start a ZooKeeper ensemble")
}

/// Runs `change` on the ensemble off the async worker (stopping and starting members blocks).
async fn with_ensemble(
    ensemble: ZooKeeperEnsemble,
    change: impl FnOnce(&mut ZooKeeperEnsemble) + Send + 'static,
) -> ZooKeeperEnsemble {
    tokio::task::spawn_blocking(move || {
        let mut ensemble = ensemble;
        change(&mut ensemble);
        ensemble
    })
    .await
    .expect("change the ensemble")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_serves_with_one_member_down_and_refuses_without_a_quorum() {
    let ensemble = ensemble(3).await;
    let store = store_with(&ensemble.url(), impatient()).await;
    let resource = shared::unique("quorum");
    let mut last = checks::cycle_until_it_works(store.as_ref(), &resource, Duration::from_secs(10)).await;
    // A lock held through it all: no member lost may take it.
    let kept = shared::unique("kept");
    let kept_lease = shared::granted(
        store
            .acquire(&kept, &owner("keeper"), ttl(Duration::from_secs(600)))
            .await
            .unwrap(),
    );

    // The leader down (the harsh case: an election, and requests in flight lost).
    let stopped_at = Instant::now();
    let leader = ensemble.wait_for_leader();
    let ensemble = with_ensemble(ensemble, move |e| e.kill(leader)).await;
    let token = checks::cycle_until_it_works(store.as_ref(), &resource, Duration::from_secs(20)).await;
    eprintln!(
        "with the leader stopped, locks worked again after {:?}",
        stopped_at.elapsed()
    );
    assert!(token > last, "token {token:?} after {last:?}");
    last = token;
    for _ in 0..5 {
        let token = checks::cycle_until_it_works(store.as_ref(), &resource, Duration::from_secs(2)).await;
        assert!(token > last, "token {token:?} after {last:?}");
        last = token;
    }

    // Two members down: no quorum, so acquire fails within its deadline and grants nothing.
    let second = (leader + 1) % 3;
    let ensemble = with_ensemble(ensemble, move |e| {
        e.kill(second);
        assert!(e.wait_no_quorum(), "the last member still serves");
    })
    .await;
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
        assert!(took < Duration::from_secs(5), "acquire took {took:?} to fail");
        eprintln!("without a quorum, acquire failed after {took:?}");
    }
    let renew = store
        .renew(&kept, &owner("keeper"), ttl(Duration::from_secs(600)), None)
        .await;
    assert!(matches!(renew, Err(StoreError::Unavailable { .. })), "{renew:?}");
    assert!(store.ping().await.is_err(), "ping without a quorum");

    // Both back: service resumes, the refused acquire left nothing, tokens only grow.
    let restarted_at = Instant::now();
    let ensemble = with_ensemble(ensemble, move |e| {
        e.start_again(leader);
        e.start_again(second);
    })
    .await;
    let token = checks::cycle_until_it_works(store.as_ref(), &resource, Duration::from_secs(30)).await;
    eprintln!(
        "after the restarts, locks worked again after {:?}",
        restarted_at.elapsed()
    );
    assert!(token > last, "token {token:?} after {last:?}");
    assert_eq!(
        store.get(&refused).await.unwrap(),
        None,
        "an acquire without a quorum granted"
    );
    assert_eq!(store.get(&kept).await.unwrap(), Some(kept_lease));
    drop(ensemble);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_ensemble_have_one_winner_and_hand_over_by_watch() {
    const RACERS: usize = 100;
    let ensemble = ensemble(3).await;
    let servers: [Arc<dyn LockStore>; 2] = [
        store_with(&ensemble.url(), impatient()).await,
        store_with(&ensemble.url(), impatient()).await,
    ];
    let resource = shared::unique("race");
    let long = ttl(Duration::from_secs(60));
    let mut last = FencingToken(0);
    for round in 0..5 {
        let racers: Vec<_> = (0..RACERS)
            .map(|i| {
                let (store, resource) = (servers[i % 2].clone(), resource.clone());
                tokio::spawn(async move {
                    let who = owner(&format!("round{round}-{i}"));
                    let outcome = store.acquire(&resource, &who, long).await.expect("acquire");
                    (i, who, outcome)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for racer in racers {
            match racer.await.unwrap() {
                (i, who, AcquireOutcome::Granted { lease, .. }) => winners.push((i, who, lease)),
                (_, _, AcquireOutcome::Held { .. }) => {}
                (_, who, odd) => panic!("round {round}, {who}: {odd:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let (i, who, lease) = winners.pop().unwrap();
        assert!(lease.token > last, "round {round}: {lease:?} after {last:?}");
        last = lease.token;
        // Handed over: released through the other server.
        let released = servers[(i + 1) % 2]
            .release(&resource, &who, Some(lease.token))
            .await
            .unwrap();
        assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
    }

    // A waiter on one server is woken by a release through the other, long before the
    // holder's TTL would have ended.
    let holder = shared::granted(
        servers[0]
            .acquire(&resource, &owner("holder"), long)
            .await
            .unwrap(),
    );
    let waiters = Waiters::new(servers[1].clone());
    let waiting = tokio::spawn({
        let resource = resource.clone();
        async move {
            waiters
                .acquire_unless(
                    &resource,
                    &owner("waiter"),
                    &Terms::ttl(long),
                    Duration::from_secs(50),
                    &CancellationToken::new(),
                )
                .await
        }
    });
    // The waiter has asked once and been told to wait when the holder's lease is all it
    // knows; give it that first refusal before releasing.
    eventually(
        Duration::from_secs(10),
        "the holder's lease to be seen",
        async || {
            let seen =
                waiting.is_finished() || servers[1].get(&resource).await.unwrap().as_ref() == Some(&holder);
            seen.then_some(())
        },
    )
    .await;
    let released_at = Instant::now();
    servers[0]
        .release(&resource, &owner("holder"), Some(holder.token))
        .await
        .unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was not woken by the release")
        .unwrap()
        .unwrap();
    let lease = shared::granted(woken.outcome);
    eprintln!(
        "the waiter got the lock {:?} after the release",
        released_at.elapsed()
    );
    assert_eq!(lease.owner, owner("waiter"));
    assert!(lease.token > holder.token);
    assert!(released_at.elapsed() < Duration::from_secs(10));
    drop(ensemble);
}

/// The number of sessions a standalone server keeps, from its `dump` four-letter word
/// (`Session Sets (N)/M:` counts buckets, then one line per session id).
fn sessions(zookeeper: &ZooKeeper) -> Option<usize> {
    let dump = zookeeper.four_letter_word("dump")?;
    Some(
        dump.lines()
            .filter(|line| line.trim_start().starts_with("0x"))
            .count(),
    )
}

/// The sessions of the clients connected to member `i`, from its `cons` four-letter word
/// (one line per connection, with `sid=0x…` once it has a session).
fn connected_sessions(ensemble: &ZooKeeperEnsemble, i: usize) -> BTreeSet<String> {
    let cons = ensemble.four_letter_word(i, "cons").expect("cons");
    cons.split("sid=")
        .skip(1)
        .filter_map(|rest| rest.split([',', ')']).next())
        .map(str::to_owned)
        .collect()
}

/// A standalone ZooKeeper; a store (a server) reaching it through a proxy, whose session
/// expires soon after the proxy cuts it off; and a store reaching it directly.
struct CutOff {
    zookeeper: Arc<ZooKeeper>,
    proxy: Proxy,
    behind: Arc<Deadline<ZooKeeperStore>>,
    direct: Arc<Deadline<ZooKeeperStore>>,
}

impl CutOff {
    async fn start() -> Self {
        let zookeeper = Arc::new(tokio::task::spawn_blocking(ZooKeeper::start).await.unwrap());
        let proxy = Proxy::start(zookeeper.port());
        let options = ZooKeeperOptions {
            // The server's floor (two ticks): the session expires soon after the cut.
            session_timeout: Duration::from_millis(400),
            connect_timeout: Duration::from_millis(500),
            call_timeout: Duration::from_secs(1),
            ..ZooKeeperOptions::default()
        };
        let behind = store_with(&format!("zookeeper://127.0.0.1:{}", proxy.port()), options).await;
        let direct = store_with(&zookeeper.url(), impatient()).await;
        Self {
            zookeeper,
            proxy,
            behind,
            direct,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_session_expires_keeps_its_leases_until_they_expire() {
    let CutOff {
        zookeeper,
        proxy,
        behind: one,
        direct: other,
    } = CutOff::start().await;
    let resource = shared::unique("expiring-session");
    let lease = shared::granted(
        // Long enough to outlast the session's expiry on a busy machine.
        one.acquire(&resource, &owner("a"), ttl(Duration::from_secs(12)))
            .await
            .unwrap(),
    );
    let raw = zk::Client::connect(&zookeeper.endpoint()).await.unwrap();
    let node = node("locks", &resource);
    let seen = holders(&raw, &node).await;
    assert_eq!(
        owners_and_tokens(&seen),
        [("a", lease.token)],
        "the holder's node, made by the grant: its czxid is the token"
    );
    assert_ne!(seen[0].session, 0, "ephemeral");
    let mut heard = one.releases().unwrap();
    let _watching = one.watch(&Key::lock(&resource)).await;
    let before = sessions(&zookeeper).expect("dump");
    proxy.cut();
    let outcome = one
        .acquire(&shared::unique("cut"), &owner("a"), ttl(Duration::from_secs(4)))
        .await;
    assert!(
        matches!(outcome, Err(StoreError::Unavailable { .. })),
        "{outcome:?}"
    );
    let renew = one
        .renew(&resource, &owner("a"), ttl(Duration::from_secs(4)), None)
        .await;
    assert!(matches!(renew, Err(StoreError::Unavailable { .. })), "{renew:?}");

    // The server expires the cut-off session; the lease stays, seen by the other server.
    let what = format!("the session to expire ({before} sessions before)");
    eventually(Duration::from_secs(20), &what, async || {
        sessions(&zookeeper).is_some_and(|now| now < before).then_some(())
    })
    .await;
    eprintln!(
        "session expired {:?} before the lease",
        lease.expires_at.since(Timestamp::now_wall())
    );
    assert!(Timestamp::now_wall() < lease.expires_at, "the test was too slow");
    assert_eq!(other.get(&resource).await.unwrap(), Some(lease.clone()));
    assert_eq!(
        holders(&raw, &node).await,
        [],
        "the holder's node went with the session, the lease did not"
    );
    let refused = other
        .acquire(&resource, &owner("b"), ttl(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(matches!(refused, AcquireOutcome::Held { .. }), "{refused:?}");

    // Until its expiry, and not a moment longer.
    let next = eventually(
        Duration::from_secs(20),
        "the lease to expire",
        async || match other
            .acquire(&resource, &owner("b"), ttl(Duration::from_secs(60)))
            .await
            .unwrap()
        {
            AcquireOutcome::Granted { lease: next, .. } => Some(next),
            AcquireOutcome::Held { holder, .. } => {
                assert_eq!(holder, lease);
                None
            }
            odd => panic!("{odd:?}"),
        },
    )
    .await;
    assert!(
        next.acquired_at >= lease.expires_at,
        "{next:?} before {lease:?} ended"
    );
    assert!(next.token > lease.token);

    // Back on the network, the cut-off server opens a new session and serves again.
    proxy.restore();
    let seen = eventually(Duration::from_secs(10), "a new session", async || {
        one.get(&resource).await
    })
    .await;
    assert_eq!(seen, Some(next));
    let released = one
        .release(&resource, &owner("a"), Some(lease.token))
        .await
        .unwrap();
    assert_eq!(released, ReleaseOutcome::Forbidden, "b holds it now");
    // Its watch is set anew on the new session, and the name announced: waiters ask again,
    // and hear the other server's releases again.
    shared::wait_for_release(&mut heard, &resource, Duration::from_secs(10))
        .await
        .expect("the watched name was not announced on the new session");
    other.release(&resource, &owner("b"), None).await.unwrap();
    shared::wait_for_release(&mut heard, &resource, Duration::from_secs(10))
        .await
        .expect("the other server's release was not heard after the new session");
}

/// The path of the node of `name` in `folder`, as the store names it.
fn node(folder: &str, name: &Resource) -> String {
    let hex: String = name.as_str().bytes().map(|b| format!("{b:02x}")).collect();
    format!("/fencelock/{folder}/{hex}")
}

/// A holder's node as ZooKeeper shows it.
#[derive(Debug, PartialEq, Eq)]
struct HolderNode {
    /// Its data.
    owner: String,
    /// The zxid of the write that made it.
    czxid: FencingToken,
    /// The session it is ephemeral of.
    session: i64,
}

/// Each holder's owner and the `czxid` of its node, in the order of `nodes`.
fn owners_and_tokens(nodes: &[HolderNode]) -> Vec<(&str, FencingToken)> {
    nodes.iter().map(|h| (h.owner.as_str(), h.czxid)).collect()
}

/// The holders' nodes under `path`, in the order of their sequence numbers, each named
/// `lease-`, the hex of its owner's name, `-` and its sequence number.
async fn holders(raw: &zk::Client, path: &str) -> Vec<HolderNode> {
    let mut children = raw.list_children(path).await.unwrap();
    // The mark of the node's generation: not a holder's.
    children.retain(|child| !child.starts_with("gen-"));
    children.sort_by_key(|c| c.rsplit_once('-').map(|(_, seq)| seq.to_owned()));
    let mut found = Vec::new();
    for child in children {
        let (data, stat) = raw.get_data(&format!("{path}/{child}")).await.unwrap();
        let owner = String::from_utf8(data).unwrap();
        let hex: String = owner.bytes().map(|b| format!("{b:02x}")).collect();
        let (start, seq) = child.rsplit_once('-').unwrap();
        assert_eq!(start, format!("lease-{hex}"), "{child}");
        assert_eq!(seq.len(), 10, "ZooKeeper's sequence number: {child}");
        found.push(HolderNode {
            owner,
            czxid: FencingToken(u64::try_from(stat.czxid).unwrap()),
            session: stat.ephemeral_owner,
        });
    }
    found
}

/// What a server that read the node at `path` before it was deleted and made again would
/// write to grant `owner` over the lease it read: its writes as the store makes them — the
/// mark of the generation it read, the `setData` at the version it read, its holder's node,
/// the old holder's node deleted. ZooKeeper must refuse them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_judged_on_a_node_deleted_since_fails_on_the_node_made_again() {
    let url = shared_url().await;
    let [one, other] = [store(&url).await, store(&url).await];
    let raw = zk::Client::connect(url.strip_prefix("zookeeper://").unwrap())
        .await
        .unwrap();
    let long = ttl(Duration::from_secs(60));
    let name = shared::unique("made-again");
    let path = node("locks", &name);
    shared::granted(one.acquire(&name, &owner("a"), long).await.unwrap());
    // What a lagging member, or a server paused between its read and its write, read.
    let (stale_data, stale) = raw.get_data(&path).await.unwrap();
    let stale_children = raw.list_children(&path).await.unwrap();
    let stale_json: serde_json::Value = serde_json::from_slice(&stale_data).unwrap();
    let generation = stale_json["generation"].as_u64().expect("the node's generation");
    let stale_holder = stale_children
        .iter()
        .find(|child| child.starts_with("lease-"))
        .expect("a's holder node");

    // The release deletes the node; a's next grant makes it again, at the same version.
    one.release(&name, &owner("a"), None).await.unwrap();
    assert_eq!(raw.check_stat(&path).await.unwrap(), None);
    let again = shared::granted(other.acquire(&name, &owner("a"), long).await.unwrap());
    let (_, fresh) = raw.get_data(&path).await.unwrap();
    assert_eq!(fresh.version, stale.version, "versions start again");
    assert!(
        raw.list_children(&path).await.unwrap().contains(stale_holder),
        "and so do the holders' sequence numbers"
    );

    let mut multi = raw.new_multi_writer();
    multi
        .add_check_version(&format!("{path}/gen-{generation:016x}"), 0)
        .unwrap();
    multi
        .add_set_data(&path, &stale_data, Some(stale.version))
        .unwrap();
    multi
        .add_create(
            &format!("{path}/lease-63-"),
            b"c",
            &zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all()),
        )
        .unwrap();
    multi.add_delete(&format!("{path}/{stale_holder}"), None).unwrap();
    let stale_write = multi.commit().await;
    assert!(
        matches!(
            stale_write,
            Err(zk::MultiWriteError::OperationFailed {
                index: 0,
                source: zk::Error::NoNode
            })
        ),
        "the old generation's mark is gone: {stale_write:?}"
    );
    assert_eq!(
        other.get(&name).await.unwrap().map(|lease| lease.token),
        Some(again.token),
        "a's new lease stands"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_have_nodes_and_names_left_empty_are_deleted_with_tokens_still_growing() {
    let url = shared_url().await;
    let [one, other] = [store(&url).await, store(&url).await];
    let mut heard = other.releases().unwrap();
    let raw = zk::Client::connect(url.strip_prefix("zookeeper://").unwrap())
        .await
        .unwrap();
    let long = ttl(Duration::from_secs(60));

    // A semaphore's permits: one node per holder, the owner's name as its data.
    let name = shared::unique("seen");
    let path = node("semaphores", &name);
    let mut permits = Vec::new();
    for who in ["a", "b"] {
        match one
            .acquire_hold(&name, &owner(who), Claim::Permit { limit: 3 }, long, None)
            .await
            .unwrap()
        {
            HoldOutcome::Granted { hold, .. } => permits.push(hold.lease),
            odd => panic!("{odd:?}"),
        }
    }
    let seen = holders(&raw, &path).await;
    assert_eq!(
        owners_and_tokens(&seen),
        [("a", permits[0].token), ("b", permits[1].token)],
        "in the order of their grants, each with its token as czxid"
    );
    assert!(seen.iter().all(|h| h.session != 0), "ephemeral: {seen:?}");
    // A release by the other server deletes the node of the hold it ends, and only that one.
    other
        .release_hold(HoldKind::Semaphore, &name, &owner("a"), None)
        .await
        .unwrap();
    let left = holders(&raw, &path).await;
    assert_eq!(owners_and_tokens(&left), [("b", permits[1].token)]);
    // An upgrade replaces the owner's node with one made by the new grant.
    let rw = shared::unique("seen-rw");
    let rw_path = node("rwlocks", &rw);
    let mut tokens = Vec::new();
    for claim in [Claim::Read, Claim::Write] {
        match one
            .acquire_hold(&rw, &owner("r"), claim, long, None)
            .await
            .unwrap()
        {
            HoldOutcome::Granted { hold, .. } => tokens.push(hold.lease.token),
            odd => panic!("{odd:?}"),
        }
        let seen = holders(&raw, &rw_path).await;
        assert_eq!(
            owners_and_tokens(&seen),
            [("r", *tokens.last().unwrap())],
            "{claim:?}"
        );
    }
    assert!(tokens[1] > tokens[0]);
    other
        .force_release(&Key::hold(HoldKind::Semaphore, &name))
        .await
        .unwrap();
    assert_eq!(
        raw.check_stat(&path).await.unwrap(),
        None,
        "the name's node goes with its holders' nodes"
    );

    // A lock released, its node deleted by the release: the name's next token is still
    // greater. A call on a name with no node makes none.
    let resource = shared::unique("forgotten");
    let path = node("locks", &resource);
    let first = shared::granted(one.acquire(&resource, &owner("a"), long).await.unwrap());
    let released = one.release(&resource, &owner("a"), None).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
    assert_eq!(
        raw.check_stat(&path).await.unwrap(),
        None,
        "deleted by the release"
    );
    let again = other.release(&resource, &owner("a"), None).await.unwrap();
    assert_eq!(again, ReleaseOutcome::NotFound);
    assert_eq!(
        raw.check_stat(&path).await.unwrap(),
        None,
        "a refusal makes no node"
    );
    let second = shared::granted(other.acquire(&resource, &owner("b"), long).await.unwrap());
    assert!(second.token > first.token, "{second:?} after {first:?}");

    // Several locks at once share one write: its zxid is the token of each, and it made
    // their nodes (no write before it). Their nodes go with their releases, and their next
    // tokens are greater still.
    let names: Vec<Resource> = (0..5)
        .map(|i| shared::unique(&format!("forgotten-{i}")))
        .collect();
    let all = Resources::new(names.clone()).unwrap();
    let AcquireAllOutcome::Granted(outcomes) = one
        .acquire_all(&all, &owner("a"), Terms::ttl(long))
        .await
        .unwrap()
    else {
        panic!("free names");
    };
    let granted: Vec<_> = outcomes.into_iter().map(shared::granted).collect();
    assert!(granted.iter().all(|l| l.token == granted[0].token), "{granted:?}");
    for (lease, name) in granted.iter().zip(&names) {
        let seen = holders(&raw, &node("locks", name)).await;
        assert_eq!(seen[0].czxid, lease.token);
        let parent = raw.check_stat(&node("locks", name)).await.unwrap().unwrap();
        let token = i64::try_from(lease.token.0).unwrap();
        assert_eq!(
            (parent.czxid, parent.mzxid),
            (token, token),
            "made by the grant's write"
        );
    }
    for lease in &granted {
        one.release(&lease.resource, &owner("a"), None).await.unwrap();
    }
    for name in &names {
        assert_eq!(raw.check_stat(&node("locks", name)).await.unwrap(), None);
    }
    let highest = granted.iter().map(|l| l.token).max().unwrap();
    for name in &names {
        let again = shared::granted(one.acquire(name, &owner("b"), long).await.unwrap());
        assert!(again.token > highest, "{again:?} after {highest:?}");
    }

    // An expiry forgotten by a purge on one server is announced on the other, which watches
    // the name.
    let expiring = shared::unique("purged");
    shared::granted(
        one.acquire(&expiring, &owner("a"), ttl(Duration::from_millis(50)))
            .await
            .unwrap(),
    );
    // Set after the grant, so that only the purge's change can fire it.
    let _watching = other.watch(&Key::lock(&expiring)).await;
    let purged = eventually(
        Duration::from_secs(10),
        "the expired lease to be purged",
        async || {
            let purged = one.purge_expired().await.unwrap();
            purged
                .iter()
                .any(|e| e.lease.resource == expiring)
                .then_some(purged)
        },
    )
    .await;
    assert!(
        purged.iter().all(|e| e.lease.expires_at <= Timestamp::now_wall()),
        "{purged:?}"
    );
    assert_eq!(
        raw.check_stat(&node("locks", &expiring)).await.unwrap(),
        None,
        "a name the purge left with nothing is deleted"
    );
    shared::wait_for_key(&mut heard, &Key::lock(&expiring), Duration::from_secs(10))
        .await
        .expect("the purge was not announced on the other server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_would_not_fit_in_its_node_is_refused_and_changes_nothing() {
    let url = shared_url().await;
    let small = ZooKeeperOptions {
        max_state_bytes: 2_000,
        ..impatient()
    };
    let store = store_with(&url, small).await;
    let raw = zk::Client::connect(url.strip_prefix("zookeeper://").unwrap())
        .await
        .unwrap();
    let name = shared::unique("crowded");
    let path = node("semaphores", &name);
    let (permit, long) = (Claim::Permit { limit: 100 }, ttl(Duration::from_secs(60)));
    let who = |i: usize| owner(&format!("{i:03}-{}", "x".repeat(200)));
    let mut granted = Vec::new();
    let refused = loop {
        match store
            .acquire_hold(&name, &who(granted.len()), permit, long, None)
            .await
        {
            Ok(HoldOutcome::Granted { hold, .. }) => granted.push(hold),
            Ok(odd) => panic!("{odd:?}"),
            Err(error) => break error,
        }
        assert!(granted.len() < 100, "2,000 bytes never filled");
    };
    assert!(
        matches!(&refused, StoreError::Invalid(why) if why.contains("bytes")),
        "{refused}"
    );
    assert!(granted.len() >= 2, "{} permits fit", granted.len());
    // Nothing changed: the permits and their nodes are those granted before.
    assert_eq!(store.holds(HoldKind::Semaphore, &name).await.unwrap(), granted);
    assert_eq!(holders(&raw, &path).await.len(), granted.len());
    // Room again once one is released.
    store
        .release_hold(HoldKind::Semaphore, &name, &who(0), None)
        .await
        .unwrap();
    let again = store
        .acquire_hold(&name, &who(granted.len()), permit, long, None)
        .await
        .unwrap();
    assert!(matches!(again, HoldOutcome::Granted { .. }), "{again:?}");
}

/// A three-member ensemble, with a store (a server) connected to one follower only, whose
/// session outlives that member's restart (so that only the connection is lost), and a store
/// connected to the other members; and the follower's index.
struct OneFollower {
    zookeeper: ZooKeeperEnsemble,
    follower: usize,
    on_follower: Arc<Deadline<ZooKeeperStore>>,
    elsewhere: Arc<Deadline<ZooKeeperStore>>,
}

impl OneFollower {
    async fn start() -> Self {
        let zookeeper = ensemble(3).await;
        let leader = zookeeper.wait_for_leader();
        let follower = (leader + 1) % zookeeper.len();
        let members = zookeeper.endpoints();
        let options = ZooKeeperOptions {
            session_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(2),
            ..ZooKeeperOptions::default()
        };
        let on_follower = store_with(&format!("zookeeper://{}", members[follower]), options).await;
        let others: Vec<&str> = (0..members.len())
            .filter(|i| *i != follower)
            .map(|i| members[i].as_str())
            .collect();
        let elsewhere = store_with(&format!("zookeeper://{}", others.join(",")), impatient()).await;
        Self {
            zookeeper,
            follower,
            on_follower,
            elsewhere,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_while_a_server_was_disconnected_is_heard_when_it_reconnects() {
    let OneFollower {
        zookeeper,
        follower,
        on_follower: watching,
        elsewhere: other,
    } = OneFollower::start().await;
    let resource = shared::unique("changed-meanwhile");
    let lease = shared::granted(
        other
            .acquire(&resource, &owner("a"), ttl(Duration::from_secs(60)))
            .await
            .unwrap(),
    );
    let mut heard = watching.releases().unwrap();
    let _watch = watching.watch(&Key::lock(&resource)).await;
    let before = connected_sessions(&zookeeper, follower);
    assert_eq!(
        before.len(),
        1,
        "the watching store's session, and only it: {before:?}"
    );

    let zookeeper = with_ensemble(zookeeper, move |z| z.kill(follower)).await;
    let released = other
        .release(&resource, &owner("a"), Some(lease.token))
        .await
        .unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)), "{released:?}");
    let zookeeper = with_ensemble(zookeeper, move |z| {
        z.start_again(follower);
        assert!(z.wait_healthy(), "the member did not serve again");
    })
    .await;
    // The client sets its watch again from the last zxid it saw: the member fires it for the
    // release it missed.
    shared::wait_for_release(&mut heard, &resource, Duration::from_secs(30))
        .await
        .expect("the release made while disconnected was not heard");
    assert_eq!(watching.get(&resource).await.unwrap(), None);
    assert_eq!(
        connected_sessions(&zookeeper, follower),
        before,
        "the same session: heard through the watch set again, not through a new session"
    );
    drop(zookeeper);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_server_that_watches_a_name_hears_its_changes() {
    let url = shared_url().await;
    let [changer, waiting, elsewhere] = [store(&url).await, store(&url).await, store(&url).await];
    let (name, other_name) = (shared::unique("herd"), shared::unique("herd-other"));
    let lease = shared::granted(
        changer
            .acquire(&name, &owner("a"), ttl(Duration::from_secs(60)))
            .await
            .unwrap(),
    );
    let (mut heard, mut heard_elsewhere) = (waiting.releases().unwrap(), elsewhere.releases().unwrap());
    let _waits_for_name = waiting.watch(&Key::lock(&name)).await;
    let _waits_for_other = elsewhere.watch(&Key::lock(&other_name)).await;
    let zookeeper = shared_zookeeper();
    assert_eq!(
        zookeeper.watchers(&node("locks", &name)),
        1,
        "one server watches the name"
    );
    assert_eq!(zookeeper.watchers(&node("locks", &other_name)), 1);

    changer
        .release(&name, &owner("a"), Some(lease.token))
        .await
        .unwrap();
    shared::wait_for_release(&mut heard, &name, Duration::from_secs(10))
        .await
        .expect("the server that watches the name did not hear its release");
    // A change of the other name, made after the release: ZooKeeper delivers a session's
    // events in the order of their zxids, so the server that watches only the other name
    // hears this one, and would have heard the release first had it been told of it.
    shared::granted(
        changer
            .acquire(&other_name, &owner("b"), ttl(Duration::from_secs(60)))
            .await
            .unwrap(),
    );
    let told = tokio::time::timeout(Duration::from_secs(10), async {
        let mut told = Vec::new();
        loop {
            match heard_elsewhere.recv().await.unwrap() {
                ReleaseNotice::Freed(key) if key == Key::lock(&other_name) => return told,
                notice => told.push(notice),
            }
        }
    })
    .await
    .expect("the server that watches the other name did not hear its change");
    assert_eq!(told, [], "a server with no waiter for the name was told of it");
}

/// A server restarted on a cluster hears what the others tell from the moment its store is
/// open, though its events watch is made later: nothing in between is skipped silently.
#[tokio::test]
async fn events_told_right_after_a_server_opened_its_store_reach_it() {
    let url = shared_url().await;
    shared::events_told_right_after_an_open_are_heard(async || store(&url).await as Arc<dyn LockStore>).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_parser_opens_zookeeper() {
    let url = shared_url().await;
    let store = fencelock_stores::open(&url).await.expect(&url);
    store.ping().await.unwrap();
    assert!(store.capabilities().durable && store.capabilities().shared);
    for bad in [
        "zookeeper://",
        "zookeeper://127.0.0.1",
        "zookeeper://127.0.0.1:x",
        "zookeeper://:2181",
        "zookeeper://127.0.0.1:2181/chroot",
    ] {
        let error = fencelock_stores::open(bad).await.expect_err(bad);
        assert!(
            matches!(error, fencelock_stores::OpenError::InvalidAddress { .. }),
            "{bad}: {error}"
        );
    }
    for root in ["fencelock", "/fencelock/", ""] {
        let options = ZooKeeperOptions {
            root: root.into(),
            ..ZooKeeperOptions::default()
        };
        let error = ZooKeeperStore::connect_with(&url, options).await.expect_err(root);
        assert!(matches!(error, StoreError::Invalid(_)), "{root:?}: {error}");
    }
}

/// Bulletins of an origin of their own (so that other tests' are told apart), numbered as a
/// server numbers its events.
struct Teller {
    origin: u64,
    told: u64,
}

impl Teller {
    fn new() -> Self {
        let origin = (u64::from(std::process::id()) << 42) ^ Timestamp::now_wall().as_millis();
        Self { origin, told: 0 }
    }

    /// Publishes the next bulletin through `store`; its number.
    fn tell(&mut self, store: &dyn LockStore) -> u64 {
        self.told += 1;
        store.publish(&Bulletin {
            origin: self.origin,
            seq: self.told,
            body: format!(r#"{{"n":{}}}"#, self.told),
        });
        self.told
    }

    /// The next of this origin's bulletins heard on `heard`; panics on a [`Heard::Missed`],
    /// and after `within`.
    async fn next_heard(&self, heard: &mut broadcast::Receiver<Heard>, within: Duration) -> Option<u64> {
        tokio::time::timeout(within, async {
            loop {
                match heard.recv().await {
                    Ok(Heard::Told(bulletin)) if bulletin.origin == self.origin => {
                        assert_eq!(bulletin.body, format!(r#"{{"n":{}}}"#, bulletin.seq));
                        return bulletin.seq;
                    }
                    Ok(Heard::Missed) => panic!("the listening server was told it missed events"),
                    Ok(Heard::Told(_)) => {}
                    Err(error) => panic!("the feed lagged or ended: {error}"),
                }
            }
        })
        .await
        .ok()
    }

    /// The next `count` of this origin's bulletins heard on `heard`, each within `within`;
    /// and whether the feed said that some may have been missed meanwhile.
    async fn heard_allowing_missed(
        &self,
        heard: &mut broadcast::Receiver<Heard>,
        count: usize,
        within: Duration,
    ) -> (Vec<u64>, bool) {
        let (mut got, mut missed) = (Vec::new(), false);
        while got.len() < count {
            match tokio::time::timeout(within, heard.recv()).await {
                Ok(Ok(Heard::Told(bulletin))) if bulletin.origin == self.origin => got.push(bulletin.seq),
                Ok(Ok(Heard::Missed)) => missed = true,
                Ok(Ok(Heard::Told(_))) => {}
                Ok(Err(error)) => panic!("the feed lagged or ended: {error}"),
                Err(_) => panic!("only {got:?} of {count} were heard"),
            }
        }
        (got, missed)
    }

    /// Tells bulletins through `store` until one is heard on `heard` (a store starts
    /// listening in the background as it opens); the last told.
    async fn until_heard(&mut self, store: &dyn LockStore, heard: &mut broadcast::Receiver<Heard>) -> u64 {
        let mut seq = eventually(Duration::from_secs(20), "a bulletin to be heard", async || {
            self.tell(store);
            self.next_heard(heard, Duration::from_millis(500)).await
        })
        .await;
        // Those told before the first heard may still come: hear up to the last told.
        while seq < self.told {
            match self.next_heard(heard, Duration::from_secs(5)).await {
                Some(next) => seq = next,
                None => break,
            }
        }
        if seq == self.told {
            return seq;
        }
        panic!("bulletin {} was not heard", self.told);
    }

    /// Tells `count` bulletins through `store`, each once the node of the one before is
    /// there, so that each has a node of its own; their numbers.
    async fn tell_each_in_a_node(
        &mut self,
        store: &dyn LockStore,
        raw: &zk::Client,
        count: usize,
    ) -> Vec<u64> {
        let mut told = Vec::new();
        for _ in 0..count {
            let nodes = self.nodes(raw).await;
            told.push(self.tell(store));
            eventually(Duration::from_secs(10), "the bulletin's node", async || {
                (self.nodes(raw).await > nodes).then_some(())
            })
            .await;
        }
        told
    }

    /// How many nodes of this origin's bulletins ZooKeeper has.
    async fn nodes(&self, raw: &zk::Client) -> usize {
        let prefix = format!("e-{}-", self.origin);
        let children = raw.list_children("/fencelock/events").await.unwrap();
        children.iter().filter(|name| name.starts_with(&prefix)).count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_told_while_a_server_was_disconnected_reach_it_in_order_when_it_reconnects() {
    let OneFollower {
        zookeeper,
        follower,
        on_follower: listening,
        elsewhere: telling,
    } = OneFollower::start().await;
    let raw = zk::Client::connect(&zookeeper.endpoints()[(follower + 1) % zookeeper.len()])
        .await
        .unwrap();
    let mut heard = listening.bulletins().unwrap();
    let mut teller = Teller::new();
    let last = teller.until_heard(&*telling, &mut heard).await;
    let before = connected_sessions(&zookeeper, follower);
    assert_eq!(before.len(), 1, "the listening store's session: {before:?}");

    let zookeeper = with_ensemble(zookeeper, move |z| z.kill(follower)).await;
    // Each in a node of its own, written while the listener is away.
    let mut told = teller.tell_each_in_a_node(&*telling, &raw, 5).await;
    assert_eq!(told, (last + 1..=last + 5).collect::<Vec<_>>());
    let zookeeper = with_ensemble(zookeeper, move |z| {
        z.start_again(follower);
        assert!(z.wait_healthy(), "the member did not serve again");
    })
    .await;
    told.push(teller.tell(&*telling));

    let (got, missed) = teller
        .heard_allowing_missed(&mut heard, told.len(), Duration::from_secs(30))
        .await;
    assert_eq!(got, told, "each once, in order");
    // Its session's timeout (30 s) is longer than the nodes are kept (20 s): the server
    // cannot know that none was deleted before it noticed the loss, so its streams reset,
    // although nothing was lost here. (The test below, with a short session, is told of
    // nothing missed.)
    assert!(missed, "a loss that may have outlasted the nodes is announced");
    assert_eq!(
        connected_sessions(&zookeeper, follower),
        before,
        "the same session: heard through the listing, not through a new session"
    );
    // And what is told from now on, through the watch set again on the same session
    // (zookeeper-client does not set a persistent watch again when it reconnects).
    let next = teller.tell(&*telling);
    assert_eq!(
        teller.next_heard(&mut heard, Duration::from_secs(10)).await,
        Some(next)
    );
    drop(zookeeper);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_told_while_a_servers_session_expired_reach_it_on_its_new_session() {
    let CutOff {
        zookeeper,
        proxy,
        behind: listening,
        direct: telling,
    } = CutOff::start().await;
    let raw = zk::Client::connect(&zookeeper.endpoint()).await.unwrap();
    let mut heard = listening.bulletins().unwrap();
    let mut teller = Teller::new();
    let last = teller.until_heard(&*telling, &mut heard).await;

    let before = sessions(&zookeeper).expect("dump");
    proxy.cut();
    let what = format!("the session to expire ({before} sessions before)");
    eventually(Duration::from_secs(20), &what, async || {
        sessions(&zookeeper).is_some_and(|now| now < before).then_some(())
    })
    .await;
    let told = teller.tell_each_in_a_node(&*telling, &raw, 3).await;
    proxy.restore();

    let mut got = Vec::new();
    while got.len() < told.len() {
        match teller.next_heard(&mut heard, Duration::from_secs(30)).await {
            Some(seq) => got.push(seq),
            None => panic!("only {got:?} of {told:?} were heard"),
        }
    }
    assert_eq!(
        got,
        (last + 1..=last + 3).collect::<Vec<_>>(),
        "each once, in order"
    );
    // And what is told from now on, through the watch of the new session.
    let next = teller.tell(&*telling);
    assert_eq!(
        teller.next_heard(&mut heard, Duration::from_secs(10)).await,
        Some(next)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_reach_every_expired_name_a_batch_at_a_time() {
    // A server of its own, so that the walk has only this test's names.
    let zookeeper = tokio::task::spawn_blocking(ZooKeeper::start).await.unwrap();
    let one = store(&zookeeper.url()).await;
    let brief = ttl(Duration::from_millis(50));
    let names: Vec<Resource> = (0..PURGE_BATCH + 100)
        .map(|i| shared::unique(&format!("walked-{i}")))
        .collect();
    for name in &names {
        shared::granted(one.acquire(name, &owner("a"), brief).await.unwrap());
    }
    let last = names.last().unwrap();
    shared::until_expired(&*one, last, Duration::from_secs(10)).await;

    let first = one.purge_expired().await.unwrap();
    assert_eq!(first.len(), PURGE_BATCH, "a batch at a time");
    // Made after the walk's listing: read in the next walk.
    let late = shared::unique("walked-late");
    shared::granted(one.acquire(&late, &owner("a"), brief).await.unwrap());
    shared::until_expired(&*one, &late, Duration::from_secs(10)).await;
    let second = one.purge_expired().await.unwrap();
    assert_eq!(second.len(), 100, "the rest of the walk");
    let third = one.purge_expired().await.unwrap();
    let purged: Vec<Resource> = [first, second, third]
        .into_iter()
        .flatten()
        .map(|expired| expired.lease.resource)
        .collect();
    let mut expected = names.clone();
    expected.push(late);
    assert_eq!(
        purged.iter().collect::<BTreeSet<_>>(),
        expected.iter().collect::<BTreeSet<_>>()
    );
    assert_eq!(purged.len(), expected.len(), "each once");
    assert_eq!(one.purge_expired().await.unwrap(), [], "nothing left");
}
