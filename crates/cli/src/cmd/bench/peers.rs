//! The peers' classic locks, measured by the same loop as fencelock (`--target`):
//!
//! - `redis://HOST:PORT`: `SET key token NX PX ttl`; release with a Lua compare-and-delete
//!   by `EVALSHA` (the script is loaded by the first call that finds it missing). The token
//!   is a per-client counter, unique in the run (Redis has no fencing token of its own).
//! - `redis://H1:P1,H2:P2,H3:P3` (three or more): Redlock as its description and the common
//!   clients (redsync, Redisson) do it: the same `SET NX PX` on every node at once; granted
//!   when a majority set it and the validity (`ttl − elapsed − drift`) is positive, else
//!   undone on every node by the compare-and-delete, which is also the release.
//! - `etcd://HOST:PORT`: grant a lease, then a txn that puts the key with that lease if it
//!   is absent (`create_revision == 0`); the key's create revision is the fencing token.
//!   Release: a txn that deletes the key if its create revision is still the token, then a
//!   revoke of the lease. A lease left over from a refused try is used for the next one.
//! - `zookeeper://HOST:PORT` (cargo feature `zookeeper`): an ephemeral znode per lock,
//!   `/fencelock-bench/NAME` (the name's slashes made dashes), created if absent (its `czxid` is the fencing token) and
//!   deleted on release: the lock of ZooKeeper's recipes without their queue of waiters,
//!   which a try that does not wait has no use for. It lives as long as the client's
//!   session, not a TTL.
//! - `postgres://…`: a lock table; acquire is one upsert that takes the row only if it is
//!   absent or expired, with a token from a sequence; release is a conditional `DELETE`.
//!
//! Each client has one connection of its own: one Redis connection (not shared between
//! clients; under Redlock, one per node), one etcd client (its own HTTP/2 channel), one
//! PostgreSQL connection, one ZooKeeper session.

use async_trait::async_trait;

use super::{Contender, Failure, Load, Session};
use crate::cmd::common::exit;

/// Opens the peer named by `address`, by its scheme.
pub async fn open(address: &str, load: &Load) -> Result<Box<dyn Contender>, Failure> {
    let scheme = address
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("redis") if address.contains(',') => redlock_peer::open(address, load),
        Some("redis") => redis_peer::open(address, load),
        Some("postgres" | "postgresql") => postgres_peer::open(address, load).await,
        #[cfg(feature = "etcd")]
        Some("etcd") => Ok(etcd_peer::open(address, load)),
        #[cfg(not(feature = "etcd"))]
        Some("etcd") => Err(Failure::bad_input(
            "--target etcd:// needs a fencelock built with the `etcd` feature \
             (cargo build --features etcd; it needs protoc)",
        )),
        #[cfg(feature = "zookeeper")]
        Some("zookeeper") => zookeeper_peer::open(address, load).await,
        #[cfg(not(feature = "zookeeper"))]
        Some("zookeeper") => Err(Failure::bad_input(
            "--target zookeeper:// needs a fencelock built with the `zookeeper` feature \
             (cargo build --features zookeeper)",
        )),
        _ => Err(Failure::bad_input(format!(
            "unknown --target {address:?}: redis:// (one node, or Redlock over several), \
             etcd://, zookeeper:// or postgres:// (fencelock's own targets are --server and \
             --store)"
        ))),
    }
}

fn unreachable(address: &str, error: impl std::fmt::Display) -> Failure {
    Failure::new(exit::UNREACHABLE, format!("cannot connect to {address}: {error}"))
}

/// The names of the load's resources, made once and shared by every client.
fn names(load: &Load) -> std::sync::Arc<Vec<String>> {
    std::sync::Arc::new((0..load.resources).map(|i| load.name(i)).collect())
}

/// A token unique to `client` within the run: the client in the high bits, a counter in the
/// low ones.
fn token(client: usize, counter: &mut u64) -> u64 {
    *counter += 1;
    ((client as u64) << 40) | *counter
}

/// Deletes the key only if it still holds this client's token: the release of Redis's
/// single-instance lock pattern, and of each node's copy under Redlock.
const COMPARE_AND_DELETE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// `SET name token NX PX ttl` on one Redis connection: whether it was set.
async fn set_nx_px(
    connection: &mut redis::aio::MultiplexedConnection,
    name: &str,
    token: u64,
    ttl_ms: u64,
) -> redis::RedisResult<bool> {
    let set: Option<String> = redis::cmd("SET")
        .arg(name)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .query_async(connection)
        .await?;
    Ok(set.is_some())
}

mod redis_peer {
    use std::sync::Arc;

    use redis::aio::MultiplexedConnection;

    use super::*;

    pub fn open(address: &str, load: &Load) -> Result<Box<dyn Contender>, Failure> {
        let client = redis::Client::open(address)
            .map_err(|e| Failure::bad_input(format!("invalid --target {address:?}: {e}")))?;
        Ok(Box::new(RedisPeer {
            client,
            address: address.to_owned(),
            shared: Arc::new(Shared {
                names: (0..load.resources).map(|i| load.name(i)).collect(),
                ttl_ms: load.ttl.as_millis() as u64,
                script: redis::Script::new(COMPARE_AND_DELETE),
            }),
        }))
    }

    struct RedisPeer {
        client: redis::Client,
        address: String,
        shared: Arc<Shared>,
    }

    /// What every client's session reads and nobody changes.
    struct Shared {
        names: Vec<String>,
        ttl_ms: u64,
        script: redis::Script,
    }

    #[async_trait]
    impl Contender for RedisPeer {
        async fn session(&self, client: usize) -> Result<Box<dyn Session>, Failure> {
            // A new connection per call: the clients never share one (no pipelining across
            // clients, as fencelock's clients share nothing either).
            let connection = self
                .client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| unreachable(&self.address, e))?;
            Ok(Box::new(RedisSession {
                connection,
                client,
                counter: 0,
                shared: self.shared.clone(),
            }))
        }
    }

    struct RedisSession {
        connection: MultiplexedConnection,
        client: usize,
        counter: u64,
        shared: Arc<Shared>,
    }

    #[async_trait]
    impl Session for RedisSession {
        async fn try_acquire(&mut self, resource: usize) -> anyhow::Result<Option<u64>> {
            let token = token(self.client, &mut self.counter);
            let name = &self.shared.names[resource];
            let set = set_nx_px(&mut self.connection, name, token, self.shared.ttl_ms).await?;
            Ok(set.then_some(token))
        }

        async fn release(&mut self, resource: usize, token: u64) -> anyhow::Result<bool> {
            let deleted: i64 = self
                .shared
                .script
                .key(&self.shared.names[resource])
                .arg(token)
                .invoke_async(&mut self.connection)
                .await?;
            Ok(deleted == 1)
        }
    }
}

mod redlock_peer {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use futures_util::future::join_all;
    use redis::aio::MultiplexedConnection;

    use super::*;

    pub fn open(address: &str, load: &Load) -> Result<Box<dyn Contender>, Failure> {
        let rest = address.split_once("://").map_or(address, |(_, rest)| rest);
        let nodes = rest
            .split(',')
            .map(|node| redis::Client::open(format!("redis://{}", node.trim_end_matches('/'))))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Failure::bad_input(format!("invalid --target {address:?}: {e}")))?;
        if nodes.len() < 3 {
            return Err(Failure::bad_input(format!(
                "--target {address:?}: Redlock needs three or more nodes"
            )));
        }
        Ok(Box::new(RedlockPeer {
            nodes,
            address: address.to_owned(),
            names: names(load),
            ttl: load.ttl,
            script: Arc::new(redis::Script::new(COMPARE_AND_DELETE)),
        }))
    }

    struct RedlockPeer {
        nodes: Vec<redis::Client>,
        address: String,
        names: Arc<Vec<String>>,
        ttl: Duration,
        script: Arc<redis::Script>,
    }

    #[async_trait]
    impl Contender for RedlockPeer {
        async fn session(&self, client: usize) -> Result<Box<dyn Session>, Failure> {
            let mut connections = Vec::with_capacity(self.nodes.len());
            for node in &self.nodes {
                let connection = node
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| unreachable(&self.address, e))?;
                connections.push(connection);
            }
            Ok(Box::new(RedlockSession {
                connections,
                client,
                counter: 0,
                names: self.names.clone(),
                ttl: self.ttl,
                script: self.script.clone(),
            }))
        }
    }

    struct RedlockSession {
        connections: Vec<MultiplexedConnection>,
        client: usize,
        counter: u64,
        names: Arc<Vec<String>>,
        ttl: Duration,
        script: Arc<redis::Script>,
    }

    impl RedlockSession {
        /// The compare-and-delete on every node at once: on how many it deleted a copy.
        async fn delete_everywhere(&mut self, resource: usize, token: u64) -> usize {
            let (name, script) = (&self.names[resource], &self.script);
            let deletes = self.connections.iter_mut().map(|connection| async move {
                let deleted: redis::RedisResult<i64> =
                    script.key(name).arg(token).invoke_async(connection).await;
                deleted.is_ok_and(|n| n == 1)
            });
            join_all(deletes)
                .await
                .into_iter()
                .filter(|&deleted| deleted)
                .count()
        }
    }

    #[async_trait]
    impl Session for RedlockSession {
        async fn try_acquire(&mut self, resource: usize) -> anyhow::Result<Option<u64>> {
            let token = token(self.client, &mut self.counter);
            let ttl_ms = self.ttl.as_millis() as u64;
            let started = Instant::now();
            let name = &self.names[resource];
            let sets = self
                .connections
                .iter_mut()
                .map(|connection| set_nx_px(connection, name, token, ttl_ms));
            let set = join_all(sets)
                .await
                .into_iter()
                .filter(|set| matches!(set, Ok(true)))
                .count();
            // The drift allowance of the Redlock description: 1 % of the TTL and 2 ms.
            let drift = self.ttl / 100 + Duration::from_millis(2);
            let majority = self.connections.len() / 2 + 1;
            if set >= majority && started.elapsed() + drift < self.ttl {
                return Ok(Some(token));
            }
            if set > 0 {
                self.delete_everywhere(resource, token).await;
            }
            Ok(None)
        }

        async fn release(&mut self, resource: usize, token: u64) -> anyhow::Result<bool> {
            let majority = self.connections.len() / 2 + 1;
            Ok(self.delete_everywhere(resource, token).await >= majority)
        }
    }
}

#[cfg(feature = "zookeeper")]
mod zookeeper_peer {
    use std::sync::Arc;

    use zookeeper_client as zk;

    use super::*;

    /// Where the locks' znodes live.
    const ROOT: &str = "/fencelock-bench";

    pub async fn open(address: &str, load: &Load) -> Result<Box<dyn Contender>, Failure> {
        let cluster = address
            .split_once("://")
            .map_or(address, |(_, rest)| rest)
            .to_owned();
        // Made once, before the clients connect.
        let client = connect(&cluster, address).await?;
        let root = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match client.create(ROOT, &[], &root).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(unreachable(address, e)),
        }
        Ok(Box::new(ZooKeeperPeer {
            cluster,
            address: address.to_owned(),
            // One level under the root: a name's slashes would need a node per level.
            paths: Arc::new(
                (0..load.resources)
                    .map(|i| format!("{ROOT}/{}", load.name(i).replace('/', "-")))
                    .collect(),
            ),
        }))
    }

    async fn connect(cluster: &str, address: &str) -> Result<zk::Client, Failure> {
        zk::Client::connector()
            .connect(cluster)
            .await
            .map_err(|e| unreachable(address, e))
    }

    struct ZooKeeperPeer {
        cluster: String,
        address: String,
        paths: Arc<Vec<String>>,
    }

    #[async_trait]
    impl Contender for ZooKeeperPeer {
        async fn session(&self, _client: usize) -> Result<Box<dyn Session>, Failure> {
            Ok(Box::new(ZooKeeperSession {
                client: connect(&self.cluster, &self.address).await?,
                paths: self.paths.clone(),
            }))
        }
    }

    struct ZooKeeperSession {
        client: zk::Client,
        paths: Arc<Vec<String>>,
    }

    #[async_trait]
    impl Session for ZooKeeperSession {
        async fn try_acquire(&mut self, resource: usize) -> anyhow::Result<Option<u64>> {
            let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
            match self.client.create(&self.paths[resource], &[], &ephemeral).await {
                Ok((stat, _)) => Ok(Some(stat.czxid as u64)),
                Err(zk::Error::NodeExists) => Ok(None),
                Err(e) => Err(e.into()),
            }
        }

        async fn release(&mut self, resource: usize, _token: u64) -> anyhow::Result<bool> {
            // Only this session's own node can be there while it holds it: an ephemeral
            // node outlives no session, and this one is alive.
            match self.client.delete(&self.paths[resource], None).await {
                Ok(()) => Ok(true),
                Err(zk::Error::NoNode) => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
    }
}

mod postgres_peer {
    use std::sync::Arc;

    use tokio_postgres::{Client, NoTls, Statement};

    use super::*;

    const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS bench_locks \
         (name text PRIMARY KEY, owner text, token bigint, expires_at timestamptz); \
         CREATE SEQUENCE IF NOT EXISTS bench_tokens";
    /// Takes the row if it is absent or expired, in one statement; no row back means held.
    const ACQUIRE: &str = "INSERT INTO bench_locks (name, owner, token, expires_at) \
         VALUES ($1, $2, nextval('bench_tokens'), now() + $3::float8 * interval '1 millisecond') \
         ON CONFLICT (name) DO UPDATE \
         SET owner = EXCLUDED.owner, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at \
         WHERE bench_locks.expires_at < now() RETURNING token";
    const RELEASE: &str = "DELETE FROM bench_locks WHERE name = $1 AND token = $2";

    pub async fn open(address: &str, load: &Load) -> Result<Box<dyn Contender>, Failure> {
        // Made once, before the clients connect: concurrent CREATE … IF NOT EXISTS can fail.
        let (client, _) = connect(address).await?;
        client
            .batch_execute(SCHEMA)
            .await
            .map_err(|e| unreachable(address, e))?;
        Ok(Box::new(PostgresPeer {
            address: address.to_owned(),
            names: names(load),
            ttl_ms: load.ttl.as_millis() as f64,
        }))
    }

    async fn connect(address: &str) -> Result<(Client, tokio::task::JoinHandle<()>), Failure> {
        let (client, connection) = tokio_postgres::connect(address, NoTls)
            .await
            .map_err(|e| unreachable(address, e))?;
        // The connection's I/O runs in its own task until the client is dropped.
        let io = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok((client, io))
    }

    struct PostgresPeer {
        address: String,
        names: Arc<Vec<String>>,
        ttl_ms: f64,
    }

    #[async_trait]
    impl Contender for PostgresPeer {
        async fn session(&self, client: usize) -> Result<Box<dyn Session>, Failure> {
            let (connection, _io) = connect(&self.address).await?;
            let prepare = |sql| connection.prepare(sql);
            let acquire = prepare(ACQUIRE)
                .await
                .map_err(|e| unreachable(&self.address, e))?;
            let release = prepare(RELEASE)
                .await
                .map_err(|e| unreachable(&self.address, e))?;
            Ok(Box::new(PostgresSession {
                connection,
                acquire,
                release,
                owner: format!("bench-{client}"),
                names: self.names.clone(),
                ttl_ms: self.ttl_ms,
            }))
        }
    }

    struct PostgresSession {
        connection: Client,
        acquire: Statement,
        release: Statement,
        owner: String,
        names: Arc<Vec<String>>,
        ttl_ms: f64,
    }

    #[async_trait]
    impl Session for PostgresSession {
        async fn try_acquire(&mut self, resource: usize) -> anyhow::Result<Option<u64>> {
            let row = self
                .connection
                .query_opt(&self.acquire, &[&self.names[resource], &self.owner, &self.ttl_ms])
                .await?;
            Ok(row.map(|row| row.get::<_, i64>(0) as u64))
        }

        async fn release(&mut self, resource: usize, token: u64) -> anyhow::Result<bool> {
            let deleted = self
                .connection
                .execute(&self.release, &[&self.names[resource], &(token as i64)])
                .await?;
            Ok(deleted == 1)
        }
    }
}

#[cfg(feature = "etcd")]
mod etcd_peer {
    use std::sync::Arc;
    use std::time::Duration;

    use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
    use tokio::time::Instant;

    use super::*;

    pub fn open(address: &str, load: &Load) -> Box<dyn Contender> {
        let rest = address.split_once("://").map_or(address, |(_, rest)| rest);
        Box::new(EtcdPeer {
            endpoint: format!("http://{}", rest.trim_end_matches('/')),
            address: address.to_owned(),
            names: names(load),
            ttl: load.ttl,
        })
    }

    struct EtcdPeer {
        endpoint: String,
        address: String,
        names: Arc<Vec<String>>,
        ttl: Duration,
    }

    #[async_trait]
    impl Contender for EtcdPeer {
        async fn session(&self, _client: usize) -> Result<Box<dyn Session>, Failure> {
            let client = etcd_client::Client::connect([&self.endpoint], None)
                .await
                .map_err(|e| unreachable(&self.address, e))?;
            Ok(Box::new(EtcdSession {
                client,
                names: self.names.clone(),
                ttl: self.ttl,
                spare: None,
                leases: Vec::new(),
            }))
        }
    }

    struct EtcdSession {
        client: etcd_client::Client,
        names: Arc<Vec<String>>,
        ttl: Duration,
        /// A lease granted for a try that was refused, and when: used for the next try while
        /// it has most of its TTL left.
        spare: Option<(i64, Instant)>,
        /// The lease of each lock this client holds, by token.
        leases: Vec<(u64, i64)>,
    }

    impl EtcdSession {
        async fn lease(&mut self) -> anyhow::Result<i64> {
            if let Some((id, granted)) = self.spare.take()
                && granted.elapsed() < self.ttl / 2
            {
                return Ok(id);
            }
            // etcd counts TTLs in whole seconds.
            let seconds = self.ttl.as_secs().max(1) as i64;
            Ok(self.client.lease_grant(seconds, None).await?.id())
        }
    }

    #[async_trait]
    impl Session for EtcdSession {
        async fn try_acquire(&mut self, resource: usize) -> anyhow::Result<Option<u64>> {
            let lease = self.lease().await?;
            let key = self.names[resource].as_str();
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key,
                    "bench",
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let answer = self.client.txn(txn).await?;
            if !answer.succeeded() {
                self.spare = Some((lease, Instant::now()));
                return Ok(None);
            }
            // The put created the key in this txn: its create revision is the txn's revision.
            let token = answer.header().map_or(0, |h| h.revision()) as u64;
            self.leases.push((token, lease));
            Ok(Some(token))
        }

        async fn release(&mut self, resource: usize, token: u64) -> anyhow::Result<bool> {
            let key = self.names[resource].as_str();
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, token as i64)])
                .and_then([TxnOp::delete(key, None)]);
            let deleted = self.client.txn(txn).await?.succeeded();
            if let Some(at) = self.leases.iter().position(|(t, _)| *t == token) {
                let (_, lease) = self.leases.swap_remove(at);
                self.client.lease_revoke(lease).await?;
            }
            Ok(deleted)
        }
    }
}
