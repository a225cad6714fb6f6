//! [`Etcd`] and [`EtcdCluster`]: throwaway etcd members on loopback ports.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::process::{Proc, find_binary, free_port, log_tail, port_answers, scratch_dir, wait_until};
use crate::proxy::Proxy;

/// How long members may take to start and elect a leader on a busy two-core machine.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// One etcd server, a cluster of one member. Dropping it kills the server and removes its
/// data; if the test binary dies instead, the server is killed with it (see the crate docs).
#[derive(Debug)]
pub struct Etcd {
    cluster: EtcdCluster,
}

impl Etcd {
    /// Starts a one-member cluster and waits until it serves requests. Panics, naming the
    /// package to install, if etcd is not installed.
    pub fn start() -> Self {
        Self {
            cluster: EtcdCluster::start(1),
        }
    }

    /// The client address, e.g. `127.0.0.1:23790`.
    pub fn endpoint(&self) -> String {
        self.cluster.endpoints().remove(0)
    }

    /// The fencelock store address, e.g. `etcd://127.0.0.1:23790`.
    pub fn url(&self) -> String {
        self.cluster.url()
    }
}

/// The one [`Etcd`] of this test binary, started on first use and shared by its tests.
pub fn shared_etcd() -> &'static Etcd {
    static SHARED: OnceLock<Etcd> = OnceLock::new();
    SHARED.get_or_init(Etcd::start)
}

/// An etcd cluster of N members on loopback ports, each in its own data folder, whose
/// members can be killed, paused and restarted one by one — and, started with
/// [`EtcdCluster::start_with_peer_proxies`], cut off from each other while clients still
/// reach them.
#[derive(Debug)]
pub struct EtcdCluster {
    // Declared before `dir` so that the members stop before their folders are removed.
    members: Vec<Member>,
    bin: PathBuf,
    dir: tempfile::TempDir,
}

#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    /// Where the member listens for its peers.
    peer_port: u16,
    /// Where its peers reach it: a proxy to `peer_port`, if the cluster has them.
    peer_proxy: Option<Proxy>,
    server: Option<Proc>,
}

impl Member {
    /// The port the member tells its peers to reach it on.
    fn advertised_peer_port(&self) -> u16 {
        self.peer_proxy.as_ref().map_or(self.peer_port, Proxy::port)
    }
}

impl EtcdCluster {
    /// Starts `size` members and waits until every one reports itself healthy (a leader is
    /// elected and reads go through).
    pub fn start(size: usize) -> Self {
        Self::start_members(size, false)
    }

    /// [`EtcdCluster::start`], with the members' peer traffic through a proxy per member:
    /// each member reaches member `i` through `i`'s proxy, so that
    /// [`EtcdCluster::cut_off`] can silence `i` towards the others while its clients still
    /// reach it.
    pub fn start_with_peer_proxies(size: usize) -> Self {
        Self::start_members(size, true)
    }

    fn start_members(size: usize, proxied: bool) -> Self {
        assert!(size > 0, "a cluster needs a member");
        let bin = find_binary("etcd", &[], "etcd-server");
        // The free ports may be taken by someone else before the members bind them: try anew.
        for _attempt in 0..3 {
            let mut cluster = Self {
                members: (0..size)
                    .map(|i| {
                        let peer_port = free_port();
                        Member {
                            name: format!("m{i}"),
                            client_port: free_port(),
                            peer_port,
                            peer_proxy: proxied.then(|| Proxy::start(peer_port)),
                            server: None,
                        }
                    })
                    .collect(),
                bin: bin.clone(),
                dir: scratch_dir("etcd"),
            };
            for i in 0..size {
                cluster.launch(i, "new");
            }
            if cluster.wait_healthy() {
                return cluster;
            }
            let port_taken = (0..size).any(|i| {
                std::fs::read_to_string(cluster.log(i))
                    .unwrap_or_default()
                    .contains("address already in use")
            });
            if !port_taken {
                panic!(
                    "etcd did not become healthy within {START_DEADLINE:?}:\n{}",
                    cluster.logs()
                );
            }
        }
        panic!("etcd did not start on free ports in three tries");
    }

    /// The client addresses of all members, e.g. `["127.0.0.1:23790", ...]`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The client addresses of all members as `http://` URLs.
    pub fn urls(&self) -> Vec<String> {
        self.endpoints()
            .into_iter()
            .map(|e| format!("http://{e}"))
            .collect()
    }

    /// The fencelock store address of the whole cluster, e.g.
    /// `etcd://127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792`.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints().join(","))
    }

    /// Kills member `i` at once (SIGKILL, as a crash would) and waits until it is gone.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut server) = self.members[i].server.take() {
            server.stop(Signal::SIGKILL, Duration::from_secs(10));
        }
    }

    /// Stops member `i` where it stands (SIGSTOP): its connections stay open and it answers
    /// neither clients nor peers, as a hung host, until [`EtcdCluster::resume`]. Panics if it
    /// is killed.
    pub fn pause(&self, i: usize) {
        self.running(i).pause();
    }

    /// Lets the paused member `i` run again (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.running(i).resume();
    }

    fn running(&self, i: usize) -> &Proc {
        self.members[i]
            .server
            .as_ref()
            .unwrap_or_else(|| panic!("etcd member {i} is killed"))
    }

    /// Cuts member `i` off from its peers (on a cluster started with
    /// [`EtcdCluster::start_with_peer_proxies`]): every connection to its peer port is held
    /// back both ways. etcd's members each send on connections their peers open to them, so
    /// nothing `i` says reaches the others (its heartbeats, votes and answers); what the
    /// others send `i` still arrives, on connections `i` opened. A leader cut off loses its
    /// followers, who elect another; a follower cut off can neither vote nor forward a
    /// proposal. Its clients still reach it. Panics on a cluster without peer proxies.
    pub fn cut_off(&self, i: usize) {
        self.peer_proxy(i).cut();
    }

    /// Undoes [`EtcdCluster::cut_off`]: what was held back passes.
    pub fn reconnect(&self, i: usize) {
        self.peer_proxy(i).restore();
    }

    fn peer_proxy(&self, i: usize) -> &Proxy {
        self.members[i]
            .peer_proxy
            .as_ref()
            .expect("a cluster started with peer proxies (EtcdCluster::start_with_peer_proxies)")
    }

    /// Starts the killed member `i` again on its data and ports, and waits until its client
    /// port answers. Whether it serves requests depends on a quorum being up: see
    /// [`EtcdCluster::wait_healthy`].
    pub fn start_again(&mut self, i: usize) {
        assert!(self.members[i].server.is_none(), "member {i} is still running");
        self.launch(i, "existing");
        let port = self.members[i].client_port;
        let server = self.members[i].server.as_mut().expect("just launched");
        let answered = wait_until(
            Instant::now() + START_DEADLINE,
            || server.assert_running("restarting"),
            || port_answers(port),
        );
        assert!(
            answered,
            "etcd member {i} did not answer after a restart:\n{}",
            self.logs()
        );
    }

    /// The index of the member that leads the cluster now, as the running members see it;
    /// `None` while there is no leader (or no member answers).
    pub fn leader(&mut self) -> Option<usize> {
        let ports: Vec<u16> = self.members.iter().map(|m| m.client_port).collect();
        let running: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].server.as_mut().is_some_and(Proc::is_running))
            .collect();
        // Each member's status names itself and the leader, by member id.
        let statuses: Vec<(usize, String, String)> = running
            .iter()
            .filter_map(|&i| {
                let status = post(ports[i], "/v3/maintenance/status", "{}")?;
                Some((
                    i,
                    json_field(&status, "member_id")?,
                    json_field(&status, "leader")?,
                ))
            })
            .collect();
        let (_, _, leader) = statuses.first()?;
        statuses
            .iter()
            .find(|(_, me, _)| me == leader)
            .map(|(i, _, _)| *i)
    }

    /// Waits until some member leads the cluster, and returns it; panics at the deadline.
    pub fn wait_for_leader(&mut self) -> usize {
        let deadline = Instant::now() + START_DEADLINE;
        let mut leader = None;
        let found = wait_until(
            deadline,
            || {},
            || {
                leader = self.leader();
                leader.is_some()
            },
        );
        assert!(
            found,
            "no etcd member became leader within {START_DEADLINE:?}:\n{}",
            self.logs()
        );
        leader.expect("found above")
    }

    /// Waits until every running member reports itself healthy; `false` at the deadline.
    pub fn wait_healthy(&mut self) -> bool {
        let deadline = Instant::now() + START_DEADLINE;
        let ports: Vec<u16> = self.members.iter().map(|m| m.client_port).collect();
        for (member, port) in self.members.iter_mut().zip(ports) {
            let Some(server) = member.server.as_mut() else {
                continue;
            };
            let mut exited = false;
            let healthy = wait_until(
                deadline,
                || {},
                || {
                    exited = !server.is_running();
                    exited || is_healthy(port)
                },
            );
            if exited || !healthy {
                return false;
            }
        }
        true
    }

    /// The log file of member `i`.
    pub fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.log", self.members[i].name))
    }

    fn logs(&self) -> String {
        (0..self.members.len())
            .map(|i| format!("--- member {i}:\n{}", log_tail(&self.log(i))))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn launch(&mut self, i: usize, state: &str) {
        let initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.advertised_peer_port()))
            .collect::<Vec<_>>()
            .join(",");
        // Unique per cluster, so that members of two test clusters can never join each other.
        let token = self
            .dir
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("fencelock-test")
            .to_owned();
        let log = self.log(i);
        let member = &mut self.members[i];
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let advertised = format!("http://127.0.0.1:{}", member.advertised_peer_port());
        let mut command = Command::new(&self.bin);
        command
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(data_dir(self.dir.path(), &member.name))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &advertised,
            ])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-token", &token])
            .args(["--initial-cluster-state", state])
            .args(["--log-level", "warn"]);
        member.server = Some(Proc::start(&format!("etcd member {i}"), command, &log));
    }
}

fn data_dir(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Sends a POST with a JSON body to a member's JSON gateway; the answer's body, if any.
fn post(port: u16, path: &str, body: &str) -> Option<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?;
    (status == "200").then(|| body.to_owned())
}

/// The string value of `"field":"…"` in a flat piece of JSON (etcd writes 64-bit ids as
/// strings), without a JSON parser.
fn json_field(json: &str, field: &str) -> Option<String> {
    let start = json.find(&format!("\"{field}\":\""))? + field.len() + 4;
    let len = json[start..].find('"')?;
    Some(json[start..start + len].to_owned())
}

/// Asks a member's `/health` endpoint, which says `true` once the member has a leader and
/// a read through it succeeds. A tiny HTTP/1.0 request: no HTTP client needed for this.
fn is_healthy(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(3)));
    let request = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.") && answer.contains("\"health\":\"true\"")
}
