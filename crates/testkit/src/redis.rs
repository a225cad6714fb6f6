//! [`Redis`]: a throwaway Redis server, in memory only, on a loopback port; and
//! [`RedisNodes`]: several independent ones, for Redlock, that can be killed, paused and started again.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::process::{Proc, find_binary, free_port, log_tail, port_answers, scratch_dir, wait_until};

/// How long Redis may take to start on a busy two-core machine (it usually takes
/// milliseconds: there is no data to load).
const START_DEADLINE: Duration = Duration::from_secs(30);

/// A Redis server on a free loopback port that keeps nothing on disk (`--save ""`,
/// `--appendonly no`), its working folder temporary. Dropping it kills the server and
/// removes the folder; if the test binary dies instead, the server is killed with it (see the
/// crate docs).
#[derive(Debug)]
pub struct Redis {
    // Declared before `dir` so that the server stops before its folder is removed.
    server: Proc,
    port: u16,
    _dir: tempfile::TempDir,
}

/// Another program took the port before the server bound it.
struct PortTaken;

impl Redis {
    /// Starts Redis and waits until it takes connections. Panics, naming the package to
    /// install, if Redis is not installed.
    pub fn start() -> Self {
        // The free port may be taken by someone else before the server binds it: try anew.
        for _attempt in 0..3 {
            if let Ok(redis) = Self::start_on(free_port()) {
                return redis;
            }
        }
        panic!("redis-server did not start on a free port in three tries");
    }

    /// Starts Redis on `port`, empty, in a new temporary folder, and waits until it takes
    /// connections; `Err` if the port is taken. Panics on any other failure.
    fn start_on(port: u16) -> Result<Self, PortTaken> {
        let bin = find_binary("redis-server", &[], "redis-server");
        let dir = scratch_dir("redis");
        let log = dir.path().join("redis.log");
        let mut command = Command::new(&bin);
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path());
        let mut server = Proc::start("redis-server", command, &log);
        let mut exited = false;
        let ready = wait_until(
            Instant::now() + START_DEADLINE,
            || {},
            || {
                exited = !server.is_running();
                exited || port_answers(port)
            },
        );
        if ready && !exited {
            return Ok(Self {
                server,
                port,
                _dir: dir,
            });
        }
        let tail = log_tail(&log);
        if !tail.contains("Address already in use") {
            panic!("redis-server did not start within {START_DEADLINE:?}:\n{tail}");
        }
        Err(PortTaken)
    }

    /// The address for clients, e.g. `redis://127.0.0.1:6390`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The loopback TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server where it stands (SIGSTOP): connections stay open and nothing is
    /// answered, as from a hung process, until [`Redis::resume`]. Dropping a paused server
    /// still kills it.
    pub fn pause(&self) {
        self.server.pause();
    }

    /// Lets a paused server answer again (SIGCONT); what was sent meanwhile is then carried
    /// out.
    pub fn resume(&self) {
        self.server.resume();
    }
}

/// The one [`Redis`] of this test binary, started on first use and shared by its tests.
pub fn shared_redis() -> &'static Redis {
    static SHARED: OnceLock<Redis> = OnceLock::new();
    SHARED.get_or_init(Redis::start)
}

/// The [`RedisNodes`] of `n` nodes of this test binary, started on first use and shared by its
/// tests (one set for each `n`). Shared nodes are never killed: a test that kills nodes
/// starts its own.
pub fn shared_redis_nodes(n: usize) -> &'static RedisNodes {
    static SHARED: Mutex<BTreeMap<usize, &'static RedisNodes>> = Mutex::new(BTreeMap::new());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    // Kept until the process ends, as a `static` would be (the servers die with it).
    shared
        .entry(n)
        .or_insert_with(|| Box::leak(Box::new(RedisNodes::start(n))))
}

/// N independent Redis masters (no replication between them), each a [`Redis`] on a port of
/// its own: the nodes of a Redlock. A node can be killed, so it loses everything,
/// as Redis without persistence does in a crash — and started again, empty, on the same
/// port. Dropping the set stops every node.
#[derive(Debug)]
pub struct RedisNodes {
    nodes: Vec<Node>,
}

#[derive(Debug)]
struct Node {
    port: u16,
    /// `None` while the node is killed.
    server: Option<Redis>,
}

impl RedisNodes {
    /// Starts `n` nodes and waits until each takes connections.
    pub fn start(n: usize) -> Self {
        assert!(n > 0, "a set of nodes needs a node");
        let nodes = (0..n)
            .map(|_| {
                let server = Redis::start();
                Node {
                    port: server.port(),
                    server: Some(server),
                }
            })
            .collect();
        Self { nodes }
    }

    /// The Redlock address of every node, e.g. `redis://127.0.0.1:6390,127.0.0.1:6391,...`.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        format!("redis://{}", nodes.join(","))
    }

    /// The one-node address of node `i`, e.g. `redis://127.0.0.1:6390`.
    pub fn node_url(&self, i: usize) -> String {
        format!("redis://127.0.0.1:{}", self.port(i))
    }

    /// The loopback TCP port of node `i`.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// How many nodes there are, running or killed.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes (never: [`RedisNodes::start`] needs one).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Whether node `i` runs (it was not killed, or was started again).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].server.is_some()
    }

    /// Kills node `i` at once (SIGKILL, as a crash would) and waits until it is gone: what it
    /// held is lost. Nothing if it is killed already.
    pub fn kill(&mut self, i: usize) {
        // Dropping a server kills it and waits for it.
        self.nodes[i].server = None;
    }

    /// Pauses node `i` (SIGSTOP): it hangs, keeping its data and connections, until
    /// [`RedisNodes::resume`]. Panics if it is killed.
    pub fn pause(&self, i: usize) {
        self.running(i).pause();
    }

    /// Lets the paused node `i` answer again. Panics if it is killed.
    pub fn resume(&self, i: usize) {
        self.running(i).resume();
    }

    fn running(&self, i: usize) -> &Redis {
        self.nodes[i]
            .server
            .as_ref()
            .unwrap_or_else(|| panic!("redis node {i} is killed"))
    }

    /// Starts the killed node `i` again on its port, empty, and waits until it takes
    /// connections. Panics if it runs, or if another program took its port meanwhile.
    pub fn start_again(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        assert!(node.server.is_none(), "redis node {i} is still running");
        let port = node.port;
        let server = Redis::start_on(port).unwrap_or_else(|PortTaken| {
            panic!("redis node {i} cannot start again: another program took port {port}")
        });
        node.server = Some(server);
    }
}
