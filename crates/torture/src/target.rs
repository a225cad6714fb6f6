//! [`Target`]: the store of a run — its throwaway servers from the testkit — and the
//! `fencelock serve` processes on it, each reaching the store through proxies of its own, so
//! that a partition between one server and its store is a proxy's fault.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fencelock_client::{
    AcquireAllOutcome, HttpStore, LockStore, MAX_RESOURCES, Owner, Resource, Resources, Terms, Ttl,
};
use fencelock_testkit::{EtcdCluster, Postgres, Proxy, RedisNodes, ZooKeeperEnsemble};
use futures_util::StreamExt as _;

use crate::fault::FaultKind;
use crate::server::Server;
use crate::workload::Ttls;

/// How long a store and its servers may take to serve again after a fault has healed.
const RECOVERY_DEADLINE: Duration = Duration::from_secs(90);

/// Members of an etcd cluster or a ZooKeeper ensemble, nodes of a Redlock.
const MEMBERS: usize = 3;

/// The stores a run can torture, and the control target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// The embedded store: one server, its SQLite file.
    Sqlite,
    /// One PostgreSQL server.
    Postgres,
    /// A 3-member etcd cluster.
    Etcd,
    /// One Redis node, in memory only.
    Redis,
    /// Redlock over 3 independent Redis nodes, in memory only.
    Redlock,
    /// A 3-member ZooKeeper ensemble.
    Zookeeper,
    /// The control: servers each on a `memory://` store of their own, so that two of them
    /// grant one lock to two owners with the same token. Its history must fail the checker.
    Broken,
}

impl StoreKind {
    /// The name on the command line and in the history.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Etcd => "etcd",
            Self::Redis => "redis",
            Self::Redlock => "redlock",
            Self::Zookeeper => "zookeeper",
            Self::Broken => "broken",
        }
    }

    /// Whether several servers share the store (all but the embedded one, whose file one
    /// server owns).
    pub fn shared(self) -> bool {
        self != Self::Sqlite
    }

    /// The TTLs clients ask for: short, and whole seconds on etcd, which rounds up to them.
    pub fn ttls(self) -> Ttls {
        let choices = match self {
            Self::Etcd => vec![1_000, 2_000, 3_000],
            _ => vec![1_000, 1_500, 2_000, 3_000],
        };
        Ttls { choices }
    }

    /// The faults the store's guarantee says it lives through with nothing lost (the
    /// guarantee table in `fencelock_stores`): what a run injects unless told otherwise.
    /// Clock steps only where a server's clock matters to the store.
    pub fn faults(self) -> &'static [FaultKind] {
        use FaultKind::*;
        match self {
            Self::Sqlite => &[PauseServer, KillServer, ClockStep, PauseClient],
            Self::Postgres => &[
                PauseServer,
                KillServer,
                PauseNode,
                KillNode,
                Partition,
                SlowNetwork,
                PauseClient,
            ],
            Self::Etcd | Self::Zookeeper => &[
                PauseServer,
                KillServer,
                PauseNode,
                KillNode,
                Partition,
                SlowNetwork,
                PartitionMember,
                PauseClient,
            ],
            Self::Redis => &[
                PauseServer,
                KillServer,
                PauseNode,
                Partition,
                SlowNetwork,
                PauseClient,
            ],
            Self::Redlock => &[
                PauseServer,
                KillServer,
                PauseNode,
                KillNode,
                Partition,
                SlowNetwork,
                ClockStep,
                PauseClient,
            ],
            Self::Broken => &[PauseServer, PauseClient],
        }
    }

    /// The faults that apply to the store but that its guarantee says may cost a
    /// property, with the caveat it states: injected only when asked for by name.
    pub fn caveats(self) -> &'static [(FaultKind, &'static str)] {
        match self {
            Self::Redis => &[(
                FaultKind::KillNode,
                "a node restarted without persistence has lost every lease: a lock may be granted again while its holder still works (the tokens stay ordered)",
            )],
            Self::Zookeeper => &[(
                FaultKind::ClockStep,
                "a lease is live while now < expires_at by the clock of the server that judges: a server whose clock is stepped ends or prolongs leases by the step",
            )],
            _ => &[],
        }
    }

    /// Whether `fault` applies to this store at all.
    pub fn applies(self, fault: FaultKind) -> bool {
        self.faults().contains(&fault) || self.caveats().iter().any(|(f, _)| *f == fault)
    }
}

/// How many leases [`Target::fill`] makes on the embedded store: about a tenth of a second
/// to load.
const FILLER_LEASES: usize = 100_000;

/// The store's servers.
#[derive(Debug)]
enum Store {
    Sqlite(PathBuf),
    Postgres(Postgres),
    Etcd(EtcdCluster),
    /// One node, or Redlock's.
    Redis(RedisNodes),
    ZooKeeper(ZooKeeperEnsemble),
    /// Each server's own `memory://`.
    Memory,
}

/// A run's store and servers.
#[derive(Debug)]
pub struct Target {
    kind: StoreKind,
    // Declared first: servers stop before the proxies and the store under them.
    servers: Vec<Server>,
    /// Per server, its proxy to each of the store's nodes, in node order.
    proxies: Vec<Vec<Proxy>>,
    store: Store,
}

impl Target {
    /// Starts the store of `kind`, then `servers` servers on it (each with proxies to the
    /// store's nodes), their logs and files in `dir`. Servers whose clock a run may step get
    /// a [`fencelock_testkit::FakeClock`] each.
    pub fn start(
        kind: StoreKind,
        servers: usize,
        bin: &Path,
        dir: &Path,
        stepped: bool,
    ) -> anyhow::Result<Self> {
        let store = match kind {
            StoreKind::Sqlite => Store::Sqlite(dir.join("fencelock.db")),
            StoreKind::Postgres => Store::Postgres(Postgres::start()),
            StoreKind::Etcd => Store::Etcd(EtcdCluster::start_with_peer_proxies(MEMBERS)),
            StoreKind::Redis => Store::Redis(RedisNodes::start(1)),
            StoreKind::Redlock => Store::Redis(RedisNodes::start(MEMBERS)),
            StoreKind::Zookeeper => Store::ZooKeeper(ZooKeeperEnsemble::start_with_peer_proxies(MEMBERS)),
            StoreKind::Broken => Store::Memory,
        };
        let mut target = Self {
            kind,
            servers: Vec::new(),
            proxies: Vec::new(),
            store,
        };
        for index in 0..servers {
            let proxies: Vec<Proxy> = target.node_ports().into_iter().map(Proxy::start).collect();
            let url = target.store_url(&proxies);
            target.proxies.push(proxies);
            let server = Server::start(index, bin, url, dir, stepped)?;
            target.servers.push(server);
        }
        Ok(target)
    }

    /// On the embedded store, grants 100,000 leases (`FILLER_LEASES`) of an hour on names no client
    /// takes, through the first server, and returns how many; elsewhere nothing. Every start
    /// of that server after a kill then reads the first 1,024 at open and loads the rest
    /// while it serves, so that the clients' first calls meet a store still loading.
    pub fn fill(&self) -> anyhow::Result<usize> {
        if self.kind != StoreKind::Sqlite {
            return Ok(0);
        }
        let store = HttpStore::new(&self.servers[0].url())?;
        let owner: Owner = "torture-filler".parse()?;
        let terms = Terms::ttl(Ttl::from_const_millis(3_600_000));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let names: Vec<Resource> = (0..FILLER_LEASES)
                .map(|i| Resource::new(format!("filler/{i:06}")))
                .collect::<Result<_, _>>()?;
            // A few calls at once, which the store commits together.
            let calls = names.chunks(MAX_RESOURCES).map(|chunk| {
                let resources = Resources::new(chunk.to_vec());
                let (store, owner, terms) = (&store, &owner, terms.clone());
                async move { store.acquire_all(&resources?, owner, terms).await.context("fill") }
            });
            let mut calls = std::pin::pin!(futures_util::stream::iter(calls).buffer_unordered(8));
            while let Some(outcome) = calls.next().await {
                if !matches!(outcome?, AcquireAllOutcome::Granted(_)) {
                    bail!("a filler lease was refused");
                }
            }
            Ok(FILLER_LEASES)
        })
    }

    /// The store.
    pub fn kind(&self) -> StoreKind {
        self.kind
    }

    /// The servers' addresses, in order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(Server::url).collect()
    }

    /// How many servers there are.
    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// Server `i`.
    pub fn server(&mut self, i: usize) -> &mut Server {
        &mut self.servers[i]
    }

    /// Server `i`'s proxies to the store's nodes (none on the embedded store).
    pub fn proxies(&self, i: usize) -> &[Proxy] {
        &self.proxies[i]
    }

    /// How many nodes the store has that a fault can hit (0: none, as for the embedded
    /// store, which is its server).
    pub fn node_count(&self) -> usize {
        self.node_ports().len()
    }

    /// What to call node `i` in the history.
    pub fn node_name(&self, i: usize) -> String {
        match &self.store {
            Store::Postgres(_) => "postgres".to_owned(),
            Store::Etcd(_) => format!("etcd member {i}"),
            Store::Redis(_) => format!("redis node {i}"),
            Store::ZooKeeper(_) => format!("zookeeper member {i}"),
            Store::Sqlite(_) | Store::Memory => format!("node {i}"),
        }
    }

    /// The loopback ports of the store's nodes.
    fn node_ports(&self) -> Vec<u16> {
        let port = |endpoint: &String| endpoint.rsplit(':').next().and_then(|p| p.parse().ok());
        match &self.store {
            Store::Sqlite(_) | Store::Memory => Vec::new(),
            Store::Postgres(postgres) => vec![postgres.port()],
            Store::Etcd(cluster) => cluster.endpoints().iter().filter_map(port).collect(),
            Store::Redis(nodes) => (0..nodes.len()).map(|i| nodes.port(i)).collect(),
            Store::ZooKeeper(ensemble) => ensemble.endpoints().iter().filter_map(port).collect(),
        }
    }

    /// The store address of a server whose proxies are `proxies`.
    fn store_url(&self, proxies: &[Proxy]) -> String {
        let hosts: Vec<String> = proxies
            .iter()
            .map(|p| format!("127.0.0.1:{}", p.port()))
            .collect();
        let hosts = hosts.join(",");
        match &self.store {
            Store::Sqlite(path) => format!("sqlite://{}", path.display()),
            Store::Memory => "memory://".to_owned(),
            Store::Postgres(_) => format!("postgres://postgres@{hosts}/postgres"),
            Store::Etcd(_) => format!("etcd://{hosts}"),
            Store::Redis(_) => format!("redis://{hosts}"),
            Store::ZooKeeper(_) => format!("zookeeper://{hosts}"),
        }
    }

    /// Kills node `i` (SIGKILL: what it had not written to disk is lost; a Redis node loses
    /// everything).
    pub fn kill_node(&mut self, i: usize) {
        match &mut self.store {
            Store::Postgres(postgres) => postgres.kill(),
            Store::Etcd(cluster) => cluster.kill(i),
            Store::Redis(nodes) => nodes.kill(i),
            Store::ZooKeeper(ensemble) => ensemble.kill(i),
            Store::Sqlite(_) | Store::Memory => {}
        }
    }

    /// Starts the killed node `i` again, on its data (a Redis node: empty).
    pub fn restart_node(&mut self, i: usize) {
        match &mut self.store {
            Store::Postgres(postgres) => postgres.start_again(),
            Store::Etcd(cluster) => cluster.start_again(i),
            Store::Redis(nodes) => nodes.start_again(i),
            Store::ZooKeeper(ensemble) => ensemble.start_again(i),
            Store::Sqlite(_) | Store::Memory => {}
        }
    }

    /// Stops node `i` where it stands (SIGSTOP), until [`Target::resume_node`].
    pub fn pause_node(&mut self, i: usize) {
        match &self.store {
            Store::Postgres(postgres) => postgres.pause(),
            Store::Etcd(cluster) => cluster.pause(i),
            Store::Redis(nodes) => nodes.pause(i),
            Store::ZooKeeper(ensemble) => ensemble.pause(i),
            Store::Sqlite(_) | Store::Memory => {}
        }
    }

    /// Lets the paused node `i` run again.
    pub fn resume_node(&mut self, i: usize) {
        match &self.store {
            Store::Postgres(postgres) => postgres.resume(),
            Store::Etcd(cluster) => cluster.resume(i),
            Store::Redis(nodes) => nodes.resume(i),
            Store::ZooKeeper(ensemble) => ensemble.resume(i),
            Store::Sqlite(_) | Store::Memory => {}
        }
    }

    /// Parts member `i` from the other members (etcd, ZooKeeper); its clients still reach it.
    pub fn cut_member(&self, i: usize) {
        match &self.store {
            Store::Etcd(cluster) => cluster.cut_off(i),
            Store::ZooKeeper(ensemble) => ensemble.cut_off(i),
            _ => {}
        }
    }

    /// Undoes [`Target::cut_member`].
    pub fn reconnect_member(&self, i: usize) {
        match &self.store {
            Store::Etcd(cluster) => cluster.reconnect(i),
            Store::ZooKeeper(ensemble) => ensemble.reconnect(i),
            _ => {}
        }
    }

    /// Waits until the store serves again and every server says its store answers
    /// (`/readyz`), after a fault has healed. An error naming what did not come back.
    pub fn wait_recovered(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + RECOVERY_DEADLINE;
        let healthy = match &mut self.store {
            Store::Etcd(cluster) => cluster.wait_healthy(),
            Store::ZooKeeper(ensemble) => ensemble.wait_healthy(),
            _ => true,
        };
        anyhow::ensure!(healthy, "the {} store did not serve again", self.kind.name());
        loop {
            let waiting: Vec<usize> = (0..self.servers.len())
                .filter(|&i| !self.servers[i].is_ready())
                .collect();
            if waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let tails: Vec<String> = waiting
                    .iter()
                    .map(|&i| format!("--- server {i}:\n{}", self.servers[i].log_tail()))
                    .collect();
                anyhow::bail!(
                    "servers {waiting:?} did not find their store ready within {RECOVERY_DEADLINE:?}:\n{}",
                    tails.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
