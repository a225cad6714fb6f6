//! # fencelock-testkit
//!
//! Test fixtures for fencelock: names, owners and TTLs, and throwaway servers — PostgreSQL,
//! etcd, Redis and ZooKeeper, each on free loopback ports with its data in a temporary folder,
//! started by the test itself and stopped after it — and the faults to break them with. Used
//! as a dev-dependency, and by the torture runner (`fencelock-torture`), the one program
//! that is built on it.
//!
//! These are test fixtures: every failure (a server that will not start, a binary that is
//! missing) panics, failing the test that asked. A server that is not installed is a
//! failure, never a skip: the panic names the Debian package to install.
//!
//! Servers never outlive the test binary, even when no destructor runs (a server kept in a
//! `static`, or a test binary killed by a timeout): each is spawned so that the kernel kills
//! it when the test binary goes away. The `process` module explains how.
//!
//! Readiness is polled with a deadline, never waited for with a fixed sleep.
//!
//! # Layout
//!
//! - [`Postgres`]: `initdb` and `postgres`, with [`Postgres::stop`], [`Postgres::kill`]
//!   and [`Postgres::start_again`] for restart tests, [`Postgres::pause`] and
//!   [`Postgres::resume`] for a hung host; [`shared_postgres`] for one server per test
//!   binary.
//! - [`Etcd`]: one member; [`shared_etcd`] for one per test binary.
//! - [`EtcdCluster`]: N members, with [`EtcdCluster::kill`], [`EtcdCluster::start_again`],
//!   [`EtcdCluster::pause`] and [`EtcdCluster::leader`]; started with
//!   [`EtcdCluster::start_with_peer_proxies`], a member can be cut off from the others
//!   ([`EtcdCluster::cut_off`]) while its clients still reach it.
//! - [`Redis`]: in memory only; [`shared_redis`] for one per test binary.
//! - [`RedisNodes`]: N independent Redis masters for Redlock, with [`RedisNodes::kill`] and
//!   [`RedisNodes::start_again`] (empty: a restart without persistence);
//!   [`shared_redis_nodes`] for one set of each size per test binary.
//! - [`ZooKeeper`]: one standalone server; [`shared_zookeeper`] for one per test binary.
//! - [`ZooKeeperEnsemble`]: N members, with [`ZooKeeperEnsemble::kill`],
//!   [`ZooKeeperEnsemble::start_again`], [`ZooKeeperEnsemble::wait_healthy`] (a quorum
//!   serves), [`ZooKeeperEnsemble::wait_no_quorum`] and [`ZooKeeperEnsemble::pause`];
//!   [`ZooKeeperEnsemble::start_with_peer_proxies`] and [`ZooKeeperEnsemble::cut_off`] as
//!   for etcd; [`Mode`] is a member's role as its `srvr` four-letter word reports it.
//! - [`eventually`] (async) and [`eventually_blocking`]: asking until a state holds, with a
//!   deadline; a check that gives a `Result` ([`Outcome`]) says on a timeout what it last saw.
//! - [`logs`]: what the test binary logs, as JSON [`Lines`].
//! - [`fixtures`]: names, owners and TTLs for tests, and names no other test uses.
//! - [`fuzz`]: the bounded configuration, strategies and naming model of the fuzz targets.
//! - [`Proxy`]: a TCP relay that fails like a network — cut both ways or one
//!   ([`Direction`]), slowed down, or a blackhole that loses what is in flight — for a server
//!   that stops answering without closing anything; it keeps what clients sent, to look at
//!   the headers of their requests.
//! - [`FakeClock`]: a wall clock (libfaketime) that can be stepped while the processes on it
//!   run.
//! - [`spawn_tied`], [`signal_tree`], [`free_port`]: starting a process that dies with this
//!   one, signalling a process and its children, a free loopback port.
//! - [`Canned`]: an HTTP server that gives every request the same answer (a 401, a 429, …)
//!   and keeps the requests.
//! - [`sse`]: an event stream ([`sse::EventStream`]) read through a real HTTP client.
//! - [`tls`]: a CA made by the test ([`TestCa`]) and server certificates it signs.

mod canned;
mod clock;
mod etcd;
mod eventually;
pub mod fixtures;
pub mod fuzz;
mod logs;
mod postgres;
mod process;
mod proxy;
mod redis;
pub mod sse;
pub mod tls;
mod zookeeper;

pub use canned::Canned;
pub use clock::FakeClock;
pub use etcd::{Etcd, EtcdCluster, shared_etcd};
pub use eventually::{Outcome, eventually, eventually_blocking};
pub use logs::{Lines, logs};
pub use postgres::{Postgres, shared_postgres};
pub use process::{free_port, signal_tree, spawn_tied};
pub use proxy::{Direction, Proxy};
pub use redis::{Redis, RedisNodes, shared_redis, shared_redis_nodes};
pub use tls::{ServerCert, TestCa};
pub use zookeeper::{Mode, ZooKeeper, ZooKeeperEnsemble, shared_zookeeper};
