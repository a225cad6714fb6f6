//! [`ZooKeeper`] and [`ZooKeeperEnsemble`]: throwaway ZooKeeper servers on loopback ports.
//!
//! Each member is a JVM running Debian's `/usr/share/java/zookeeper.jar` with a `zoo.cfg`
//! written here: its own data folder, free loopback ports, a short tick, a small heap. The
//! `zookeeper` system service that Debian's `zookeeperd` package sets up is never used.
//!
//! Health is read with ZooKeeper's four-letter words (`srvr`, `ruok`) on the client port, so
//! no ZooKeeper client is needed here: `srvr` names a member's mode (leader, follower,
//! standalone) while it serves, and says "not currently serving requests" while it has no
//! quorum.

use std::fmt::Write as _;
use std::fs;
use std::hash::{BuildHasher, RandomState};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::process::{Proc, find_binary, find_file, free_port, log_tail, scratch_dir, wait_until};
use crate::proxy::Proxy;

/// How long members may take to start and elect a leader on a busy two-core machine (it
/// usually takes a second or two).
const START_DEADLINE: Duration = Duration::from_secs(60);

/// ZooKeeper's unit of time (`tickTime`; its default is 2 s). Heartbeats, the sync limits
/// and the session-timeout bounds are counted in ticks, so a short tick makes elections,
/// a dead member's detection and session expiry fast enough for tests.
const TICK: Duration = Duration::from_millis(200);

/// The shortest session a client may ask for (`minSessionTimeout`), two ticks, the least
/// ZooKeeper allows: a test that lets a session expire waits about this long. A client that
/// asks for less is given this much.
const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(400);

/// The longest session a client may ask for (`maxSessionTimeout`). ZooKeeper's default is
/// 20 ticks, 4 s with our tick: a client asking for more would be silently cut to that.
const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(60);

/// How many ticks a follower has to connect to a new leader and sync with it (`initLimit`,
/// 10 s). Generous, because a JVM on a busy two-core machine can take seconds for its first
/// sync, and a follower that misses it starts a new election.
const INIT_LIMIT_TICKS: u32 = 50;

/// How many ticks a follower may lag behind the leader before it is dropped (`syncLimit`,
/// 2 s): long enough that a garbage collection or a busy CPU does not drop a healthy member,
/// short enough that a killed leader is noticed within a few seconds.
const SYNC_LIMIT_TICKS: u32 = 10;

/// The JVM's options. Three members run beside other tests' servers on a shared machine, so
/// each keeps a small heap; one serial collector thread and the quick (C1) compiler only make
/// the JVM start sooner and take less CPU, which matters more here than peak speed.
const JVM_OPTIONS: &[&str] = &[
    "-Xmx128m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
    // It logs every four-letter word it answers, and health is polled with them.
    "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=warn",
];

/// Where Debian's packages put their jars.
const JAR_DIR: &str = "/usr/share/java";

/// What `srvr` answers while a member has no quorum (is looking for a leader).
const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests";

/// A member's role, as its `srvr` four-letter word reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A single server, not part of an ensemble; it serves on its own.
    Standalone,
    /// The member that leads the ensemble; it serves.
    Leader,
    /// A member that follows the leader; it serves.
    Follower,
    /// A non-voting member; it serves.
    Observer,
    /// The member runs but does not serve requests: it has no quorum, or is still electing.
    NotServing,
}

impl Mode {
    /// Whether a member in this mode serves client requests.
    pub fn serves(self) -> bool {
        !matches!(self, Mode::NotServing)
    }

    /// Reads the mode out of a `srvr` answer; `None` if the answer is neither.
    fn from_srvr(answer: &str) -> Option<Self> {
        if answer.contains(NOT_SERVING) {
            return Some(Mode::NotServing);
        }
        let mode = answer.lines().find_map(|line| line.strip_prefix("Mode: "))?;
        match mode.trim() {
            "standalone" => Some(Mode::Standalone),
            "leader" => Some(Mode::Leader),
            "follower" => Some(Mode::Follower),
            "observer" => Some(Mode::Observer),
            _ => None,
        }
    }
}

/// One standalone ZooKeeper server. Dropping it kills the server and removes its data; if the
/// test binary dies instead, the server is killed with it (see the crate docs).
#[derive(Debug)]
pub struct ZooKeeper {
    ensemble: ZooKeeperEnsemble,
}

impl ZooKeeper {
    /// Starts a standalone server and waits until it serves requests. Panics, naming the
    /// package to install, if ZooKeeper is not installed.
    pub fn start() -> Self {
        Self {
            ensemble: ZooKeeperEnsemble::start(1),
        }
    }

    /// The client address, e.g. `127.0.0.1:21810`.
    pub fn endpoint(&self) -> String {
        self.ensemble.endpoints().remove(0)
    }

    /// The fencelock store address, e.g. `zookeeper://127.0.0.1:21810`.
    pub fn url(&self) -> String {
        self.ensemble.url()
    }

    /// The loopback client port.
    pub fn port(&self) -> u16 {
        self.ensemble.members[0].client_port
    }

    /// The server's answer to the four-letter word `word` (`ruok`, `srvr`, `mntr`, …);
    /// `None` if it does not answer.
    pub fn four_letter_word(&self, word: &str) -> Option<String> {
        self.ensemble.four_letter_word(0, word)
    }

    /// The server's mode ([`Mode::Standalone`] while it serves); `None` if it does not answer.
    pub fn mode(&self) -> Option<Mode> {
        self.ensemble.mode(0)
    }

    /// How many sessions watch the node at `path`, by the server's `wchp` (each watched path,
    /// then a line for each session that watches it). Panics if the server does not answer.
    pub fn watchers(&self, path: &str) -> usize {
        let listing = self.four_letter_word("wchp").expect("wchp");
        listing
            .lines()
            .skip_while(|line| line.trim() != path)
            .skip(1)
            .take_while(|line| line.trim_start().starts_with("0x"))
            .count()
    }
}

/// The one [`ZooKeeper`] of this test binary, started on first use and shared by its tests.
pub fn shared_zookeeper() -> &'static ZooKeeper {
    static SHARED: OnceLock<ZooKeeper> = OnceLock::new();
    SHARED.get_or_init(ZooKeeper::start)
}

/// A ZooKeeper ensemble of N members on loopback ports, each with its own data folder and
/// `myid`, whose members can be killed, paused and started again one by one — and, started
/// with [`ZooKeeperEnsemble::start_with_peer_proxies`], cut off from each other while
/// clients still reach them.
#[derive(Debug)]
pub struct ZooKeeperEnsemble {
    // Declared before `dir` so that the members stop before their folders are removed.
    members: Vec<Member>,
    /// With peer proxies: one link per ordered pair of members.
    links: Vec<Link>,
    java: PathBuf,
    classpath: String,
    dir: tempfile::TempDir,
}

/// How member `from` reaches member `to`: a proxy to each of `to`'s peer ports, used by
/// `from` alone (its `zoo.cfg` names them for `to`), so that a pair can be cut.
#[derive(Debug)]
struct Link {
    from: usize,
    to: usize,
    quorum: Proxy,
    election: Proxy,
}

#[derive(Debug)]
struct Member {
    /// The server id (`myid`): see [`ZooKeeperEnsemble::first_id`].
    id: u64,
    client_port: u16,
    /// The port on which a leader takes its followers.
    quorum_port: u16,
    /// The port on which members talk to elect a leader.
    election_port: u16,
    server: Option<Proc>,
}

impl ZooKeeperEnsemble {
    /// Starts `size` members (one: a standalone server) and waits until every one serves
    /// requests, with one leader among them. Panics, with the end of the members' logs, if
    /// that takes longer than a minute, and naming the package to install if ZooKeeper is not
    /// installed.
    pub fn start(size: usize) -> Self {
        Self::start_members(size, false)
    }

    /// [`ZooKeeperEnsemble::start`], with the members' peer traffic through proxies, one
    /// per ordered pair of members (each member's `zoo.cfg` names its own proxies for the
    /// others), so that [`ZooKeeperEnsemble::cut_off`] can part one member from the others
    /// both ways while its clients still reach it.
    pub fn start_with_peer_proxies(size: usize) -> Self {
        Self::start_members(size, true)
    }

    fn start_members(size: usize, proxied: bool) -> Self {
        assert!(size > 0, "an ensemble needs a member");
        let java = find_binary("java", &[], "zookeeperd");
        let jars = [PathBuf::from(JAR_DIR)];
        // The jar's manifest names the other jars ZooKeeper needs; slf4j-simple gives its
        // log a destination (stderr, into the member's log), without which it logs nothing.
        let classpath = [
            find_file("zookeeper.jar", &jars, "zookeeperd"),
            find_file("slf4j-simple.jar", &jars, "libslf4j-java"),
        ]
        .map(|jar| jar.display().to_string())
        .join(":");
        // The free ports may be taken by someone else before the members bind them: try anew.
        for _attempt in 0..3 {
            let first_id = Self::first_id(size);
            let mut ensemble = Self {
                members: (0..size)
                    .map(|i| Member {
                        id: first_id + i as u64,
                        client_port: free_port(),
                        quorum_port: free_port(),
                        election_port: free_port(),
                        server: None,
                    })
                    .collect(),
                links: Vec::new(),
                java: java.clone(),
                classpath: classpath.clone(),
                dir: scratch_dir("zookeeper"),
            };
            if proxied {
                ensemble.links = ensemble.link_every_pair();
            }
            for i in 0..size {
                ensemble.write_config(i);
                ensemble.launch(i);
            }
            if ensemble.wait_healthy() {
                return ensemble;
            }
            let port_taken = (0..size).any(|i| {
                fs::read_to_string(ensemble.log(i))
                    .unwrap_or_default()
                    .contains("Address already in use")
            });
            if !port_taken {
                panic!(
                    "ZooKeeper did not serve within {START_DEADLINE:?}:\n{}",
                    ensemble.logs()
                );
            }
        }
        panic!("ZooKeeper did not start on free ports in three tries");
    }

    /// The server id of the first member of a new ensemble of `size`; the others count up
    /// from it. ZooKeeper wants ids from 1 to 254 (it puts them in the top byte of session
    /// ids), so all members of all test ensembles cannot have ids of their own.
    ///
    /// Picked at random rather than from 1, because a port freed by a stopped member may be
    /// taken by a member of another ensemble: the first ensemble's members would then reach a
    /// stranger at that address, and ZooKeeper, which has no cluster token, ignores only the
    /// votes of ids it does not know.
    fn first_id(size: usize) -> u64 {
        let size = u64::try_from(size).expect("a usize fits in u64");
        assert!(size <= 254, "ZooKeeper ids go from 1 to 254");
        1 + RandomState::new().hash_one(()) % (255 - size)
    }

    /// The number of members, running or stopped.
    #[expect(clippy::len_without_is_empty, reason = "an ensemble always has a member")]
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The client addresses of all members, e.g. `["127.0.0.1:21810", ...]`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The fencelock store address of the whole ensemble, e.g.
    /// `zookeeper://127.0.0.1:21810,127.0.0.1:21811,127.0.0.1:21812`.
    pub fn url(&self) -> String {
        format!("zookeeper://{}", self.endpoints().join(","))
    }

    /// Kills member `i` at once (SIGKILL, as a crash would) and waits until it is gone. Its
    /// data stays, for [`ZooKeeperEnsemble::start_again`].
    pub fn kill(&mut self, i: usize) {
        if let Some(mut server) = self.members[i].server.take() {
            server.stop(Signal::SIGKILL, Duration::from_secs(10));
        }
    }

    /// Starts the killed member `i` again on its data and ports, and waits until its client
    /// port answers. Whether it serves requests depends on a quorum being up: see
    /// [`ZooKeeperEnsemble::wait_healthy`].
    pub fn start_again(&mut self, i: usize) {
        assert!(self.members[i].server.is_none(), "member {i} is still running");
        self.launch(i);
        let port = self.members[i].client_port;
        let server = self.members[i].server.as_mut().expect("just launched");
        let answered = wait_until(
            Instant::now() + START_DEADLINE,
            || server.assert_running("starting again"),
            || ask(port, "ruok").is_some_and(|a| a == "imok"),
        );
        assert!(
            answered,
            "ZooKeeper member {i} did not answer after starting again:\n{}",
            self.logs()
        );
    }

    /// Stops member `i` where it stands (SIGSTOP): its connections stay open and it answers
    /// neither clients nor peers, as a hung host or a long garbage collection, until
    /// [`ZooKeeperEnsemble::resume`]. Panics if it is killed.
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
            .unwrap_or_else(|| panic!("ZooKeeper member {i} is killed"))
    }

    /// Parts member `i` from the others, both ways (on an ensemble started with
    /// [`ZooKeeperEnsemble::start_with_peer_proxies`]): every connection between it and a
    /// peer is held back, in elections and between leader and followers. Its clients still
    /// reach it: alone, it is no quorum, and stops serving once it notices. Panics on an
    /// ensemble without peer proxies.
    pub fn cut_off(&self, i: usize) {
        for link in self.links_of(i) {
            link.quorum.cut();
            link.election.cut();
        }
    }

    /// Undoes [`ZooKeeperEnsemble::cut_off`]: what was held back passes.
    pub fn reconnect(&self, i: usize) {
        for link in self.links_of(i) {
            link.quorum.restore();
            link.election.restore();
        }
    }

    fn links_of(&self, i: usize) -> impl Iterator<Item = &Link> {
        assert!(
            !self.links.is_empty() || self.len() == 1,
            "an ensemble started with peer proxies (ZooKeeperEnsemble::start_with_peer_proxies)"
        );
        self.links
            .iter()
            .filter(move |link| link.from == i || link.to == i)
    }

    fn link_every_pair(&self) -> Vec<Link> {
        let pairs = (0..self.len()).flat_map(|from| (0..self.len()).map(move |to| (from, to)));
        let links: Vec<Link> = pairs
            .filter(|(from, to)| from != to)
            .map(|(from, to)| {
                let quorum = Proxy::start(self.members[to].quorum_port);
                // A follower calls its new leader as soon as the election ends, maybe before
                // the leader opens its port: refused, it calls again until `initLimit`.
                quorum.retry_refused(TICK * INIT_LIMIT_TICKS);
                Link {
                    from,
                    to,
                    quorum,
                    election: Proxy::start(self.members[to].election_port),
                }
            })
            .collect();
        // A member that calls a peer of a higher id is called back, at the election address
        // it sends in its greeting — its own port, not the peer's proxy for it, so the call
        // back would pass any cut. Each link tells the peer its proxy back instead.
        for link in &links {
            let back = links
                .iter()
                .find(|back| back.from == link.to && back.to == link.from)
                .expect("every pair is linked both ways");
            let own = self.members[link.from].election_port.to_string();
            let proxied = back.election.port().to_string();
            // Java reads a port with leading zeros, so a shorter one is padded.
            let proxied = format!("{proxied:0>width$}", width = own.len());
            link.election.rewrite_greeting(
                format!("127.0.0.1:{own}").as_bytes(),
                format!("127.0.0.1:{proxied}").as_bytes(),
            );
        }
        links
    }

    /// The ports member `from` reaches member `to` on: a link's proxies, or `to`'s own.
    fn peer_ports(&self, from: usize, to: usize) -> (u16, u16) {
        let link = self.links.iter().find(|link| link.from == from && link.to == to);
        match link {
            Some(link) => (link.quorum.port(), link.election.port()),
            None => (self.members[to].quorum_port, self.members[to].election_port),
        }
    }

    /// Whether member `i` runs (it may still not serve).
    pub fn is_running(&mut self, i: usize) -> bool {
        self.members[i].server.as_mut().is_some_and(Proc::is_running)
    }

    /// Member `i`'s answer to the four-letter word `word` (`ruok`, `srvr`, `mntr`, …);
    /// `None` if it does not answer. Every word is allowed (`4lw.commands.whitelist=*`).
    pub fn four_letter_word(&self, i: usize, word: &str) -> Option<String> {
        ask(self.members[i].client_port, word)
    }

    /// Member `i`'s mode, from its `srvr`; `None` if it does not answer.
    pub fn mode(&self, i: usize) -> Option<Mode> {
        self.four_letter_word(i, "srvr")
            .as_deref()
            .and_then(Mode::from_srvr)
    }

    /// The index of the member that leads the ensemble now; `None` while none does.
    pub fn leader(&self) -> Option<usize> {
        (0..self.len()).find(|&i| self.mode(i) == Some(Mode::Leader))
    }

    /// Waits until some member leads the ensemble, and returns it; panics at the deadline.
    pub fn wait_for_leader(&self) -> usize {
        let mut leader = None;
        let found = wait_until(
            Instant::now() + START_DEADLINE,
            || {},
            || {
                leader = self.leader();
                leader.is_some()
            },
        );
        assert!(
            found,
            "no ZooKeeper member became leader within {START_DEADLINE:?}:\n{}",
            self.logs()
        );
        leader.expect("found above")
    }

    /// Waits until every running member serves requests (a standalone server, or a leader
    /// and its followers), and the running members are a quorum; `false` at the deadline, at
    /// once if fewer than a quorum run, and as soon as a member that should run has exited.
    pub fn wait_healthy(&mut self) -> bool {
        let quorum = self.len() / 2 + 1;
        let running = self.members.iter().filter(|m| m.server.is_some()).count();
        if running < quorum {
            return false;
        }
        let mut exited = false;
        let healthy = wait_until(
            Instant::now() + START_DEADLINE,
            || {},
            || {
                exited = self
                    .members
                    .iter_mut()
                    .any(|m| m.server.as_mut().is_some_and(|s| !s.is_running()));
                exited || self.all_running_serve()
            },
        );
        healthy && !exited
    }

    /// Waits until no running member serves requests (each has noticed that it lost its
    /// quorum); `false` at the deadline.
    pub fn wait_no_quorum(&mut self) -> bool {
        wait_until(
            Instant::now() + START_DEADLINE,
            || {},
            || {
                (0..self.len())
                    .filter(|&i| self.members[i].server.is_some())
                    .all(|i| self.mode(i).is_none_or(|mode| !mode.serves()))
            },
        )
    }

    /// The log file of member `i`.
    pub fn log(&self, i: usize) -> PathBuf {
        self.member_dir(i).join("zookeeper.log")
    }

    fn all_running_serve(&self) -> bool {
        let modes: Vec<Option<Mode>> = (0..self.len())
            .filter(|&i| self.members[i].server.is_some())
            .map(|i| self.mode(i))
            .collect();
        let leaders = modes.iter().filter(|m| **m == Some(Mode::Leader)).count();
        modes.iter().all(|m| m.is_some_and(Mode::serves)) && (self.len() == 1 || leaders == 1)
    }

    /// The end of every member's log, for a failed test's message.
    pub fn logs(&self) -> String {
        (0..self.len())
            .map(|i| format!("--- member {i}:\n{}", log_tail(&self.log(i))))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn member_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("m{i}"))
    }

    fn config_file(&self, i: usize) -> PathBuf {
        self.member_dir(i).join("zoo.cfg")
    }

    /// Writes member `i`'s `zoo.cfg`, and its `myid` into its data folder.
    fn write_config(&self, i: usize) {
        let data = self.member_dir(i).join("data");
        fs::create_dir_all(&data).unwrap_or_else(|e| panic!("create {}: {e}", data.display()));
        let member = &self.members[i];
        let mut config = format!(
            "tickTime={tick}\n\
             initLimit={INIT_LIMIT_TICKS}\n\
             syncLimit={SYNC_LIMIT_TICKS}\n\
             minSessionTimeout={min}\n\
             maxSessionTimeout={max}\n\
             dataDir={data}\n\
             clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             # A throwaway server: a crash (SIGKILL) keeps what the kernel has; only a power\n\
             # loss would need the fsync on every write, which slows a busy disk down.\n\
             forceSync=no\n\
             # The transaction log grows in steps of this many KiB (64 MiB by default).\n\
             preAllocSize=1024\n",
            tick = TICK.as_millis(),
            min = MIN_SESSION_TIMEOUT.as_millis(),
            max = MAX_SESSION_TIMEOUT.as_millis(),
            data = data.display(),
            port = member.client_port,
        );
        // One member runs standalone: no server list, no `myid`.
        if self.len() > 1 {
            for (to, m) in self.members.iter().enumerate() {
                let (quorum, election) = self.peer_ports(i, to);
                let _ = writeln!(config, "server.{}=127.0.0.1:{quorum}:{election}", m.id);
            }
            write(&data.join("myid"), &format!("{}\n", member.id));
        }
        write(&self.config_file(i), &config);
    }

    fn launch(&mut self, i: usize) {
        let log = self.log(i);
        let config = self.config_file(i);
        let mut command = Command::new(&self.java);
        command
            .args(JVM_OPTIONS)
            .args(["-cp", &self.classpath])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&config);
        let name = format!("ZooKeeper member {i}");
        self.members[i].server = Some(Proc::start(&name, command, &log));
    }
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Sends the four-letter word `word` to the client port and reads the answer up to the
/// close; `None` if nothing answers.
fn ask(port: u16, word: &str) -> Option<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    (!answer.is_empty()).then_some(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_read_from_srvr() {
        let leader = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nZxid: 0x100000000\n\
                      Mode: leader\nNode count: 5\nProposal sizes last/min/max: -1/-1/-1\n";
        assert_eq!(Mode::from_srvr(leader), Some(Mode::Leader));
        assert_eq!(Mode::from_srvr("Mode: follower\n"), Some(Mode::Follower));
        assert_eq!(Mode::from_srvr("Mode: standalone\n"), Some(Mode::Standalone));
        let looking = format!("{NOT_SERVING}\n");
        assert_eq!(Mode::from_srvr(&looking), Some(Mode::NotServing));
        assert!(!Mode::NotServing.serves());
        assert_eq!(
            Mode::from_srvr("srvr is not executed because it is not in the whitelist."),
            None
        );
    }
}
