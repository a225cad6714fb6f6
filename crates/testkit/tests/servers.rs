//! The throwaway servers start, answer, stop, start again, and leave nothing behind.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fencelock_testkit::{
    Direction, Etcd, EtcdCluster, FakeClock, Mode, Postgres, Proxy, RedisNodes, ZooKeeper, ZooKeeperEnsemble,
    shared_etcd, shared_postgres, shared_redis, shared_redis_nodes, shared_zookeeper,
};

/// How long a fault tool's effect may take to show on a busy machine (an election after a
/// member is cut off takes a few of its timeouts, and starved JVMs may need several: a
/// minute was once too short, with the whole suite and a release build on two cores).
const SHOWS: Duration = Duration::from_secs(120);

fn answers(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Asks `check` until it holds; fails the test, naming `what`, after `limit`.
fn wait_for(limit: Duration, what: &str, check: impl FnMut() -> bool) {
    assert!(
        holds_within(limit, check),
        "timed out after {limit:?} waiting for {what}"
    );
}

/// Asks `check` until it holds: `false` if it still does not after `limit`.
fn holds_within(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !check() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// The answer to `GET path` on the loopback `port`; `None` if none comes within a second.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).ok()?;
    (!answer.is_empty()).then_some(answer)
}

/// Whether the etcd member on `port` answers that it is healthy (a leader, and a quorum
/// behind a read); `None` if it does not answer at all.
fn etcd_health(port: u16) -> Option<bool> {
    http_get(port, "/health").map(|answer| answer.contains("\"health\":\"true\""))
}

fn port_of(endpoint: &str) -> u16 {
    endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("endpoint has a port")
}

#[test]
fn postgres_stops_starts_again_and_cleans_up() {
    let mut pg = Postgres::start();
    assert!(pg.url().starts_with("postgres://postgres@127.0.0.1:"));
    assert!(answers(pg.port()));
    let log: PathBuf = pg.log();
    let dir = log.parent().expect("log is in the folder").to_path_buf();
    pg.stop();
    assert!(!pg.is_running());
    assert!(!answers(pg.port()));
    pg.start_again();
    assert!(pg.is_running());
    assert!(answers(pg.port()));
    drop(pg);
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

#[test]
fn shared_servers_are_started_once() {
    assert_eq!(shared_postgres().port(), shared_postgres().port());
    assert!(answers(shared_postgres().port()));
    assert_eq!(shared_etcd().url(), shared_etcd().url());
    assert!(answers(port_of(&shared_etcd().endpoint())));
    assert_eq!(shared_redis().url(), shared_redis().url());
    assert!(answers(shared_redis().port()));
    assert_eq!(shared_redis_nodes(3).url(), shared_redis_nodes(3).url());
    assert_ne!(shared_redis_nodes(3).url(), shared_redis_nodes(5).url());
    assert_eq!(shared_redis_nodes(5).len(), 5);
    assert_eq!(shared_zookeeper().url(), shared_zookeeper().url());
    assert_eq!(shared_zookeeper().mode(), Some(Mode::Standalone));
}

#[test]
fn one_etcd_member_answers() {
    let etcd = Etcd::start();
    assert!(etcd.url().starts_with("etcd://127.0.0.1:"));
    assert!(answers(port_of(&etcd.endpoint())));
}

#[test]
fn etcd_members_are_killed_and_restarted_one_by_one() {
    let mut cluster = EtcdCluster::start(3);
    assert_eq!(cluster.urls().len(), 3);
    let ports: Vec<u16> = cluster.endpoints().iter().map(|e| port_of(e)).collect();
    cluster.kill(1);
    assert!(!answers(ports[1]));
    assert!(cluster.wait_healthy(), "two of three members keep a quorum");
    cluster.start_again(1);
    assert!(answers(ports[1]));
    assert!(cluster.wait_healthy());
}

#[test]
fn the_etcd_leader_can_be_found_and_replaced() {
    let mut cluster = EtcdCluster::start(3);
    let leader = cluster.wait_for_leader();
    cluster.kill(leader);
    let next = cluster.wait_for_leader();
    assert_ne!(next, leader);
    cluster.start_again(leader);
    assert!(cluster.wait_healthy());
}

#[test]
fn a_standalone_zookeeper_is_ok_and_serves() {
    let zk = ZooKeeper::start();
    assert_eq!(zk.url(), format!("zookeeper://{}", zk.endpoint()));
    assert_eq!(port_of(&zk.endpoint()), zk.port());
    assert_eq!(zk.four_letter_word("ruok").as_deref(), Some("imok"));
    let srvr = zk.four_letter_word("srvr").expect("srvr answers");
    assert!(srvr.contains("Mode: standalone"), "{srvr}");
    assert_eq!(zk.mode(), Some(Mode::Standalone));
    let conf = zk.four_letter_word("conf").expect("conf answers");
    assert!(conf.contains("tickTime=200"), "{conf}");
    assert!(conf.contains("minSessionTimeout=400"), "{conf}");
}

#[test]
fn a_zookeeper_ensemble_keeps_serving_with_a_quorum_and_stops_without_one() {
    let started = Instant::now();
    let mut zk = ZooKeeperEnsemble::start(3);
    eprintln!(
        "a 3-member ZooKeeper ensemble served after {:?}",
        started.elapsed()
    );
    assert_eq!(zk.len(), 3);
    assert_eq!(zk.url().matches("127.0.0.1:").count(), 3);
    assert!(zk.url().starts_with("zookeeper://127.0.0.1:"));
    let modes: Vec<Option<Mode>> = (0..3).map(|i| zk.mode(i)).collect();
    assert_eq!(
        modes.iter().filter(|m| **m == Some(Mode::Leader)).count(),
        1,
        "{modes:?}"
    );
    assert_eq!(
        modes.iter().filter(|m| **m == Some(Mode::Follower)).count(),
        2,
        "{modes:?}"
    );
    for i in 0..3 {
        assert_eq!(zk.four_letter_word(i, "ruok").as_deref(), Some("imok"));
    }

    // One down, the leader itself: the other two elect one of them.
    let leader = zk.wait_for_leader();
    zk.kill(leader);
    assert!(!zk.is_running(leader));
    assert_eq!(zk.mode(leader), None);
    assert!(zk.wait_healthy(), "two of three members keep a quorum");
    let next = zk.wait_for_leader();
    assert_ne!(next, leader);

    // Two down: the last one runs, answers, and serves nothing.
    let last = (0..3).find(|&i| i != leader && i != next).expect("a third");
    zk.kill(next);
    assert!(!zk.wait_healthy(), "one of three is no quorum");
    assert!(zk.wait_no_quorum(), "the last member notices it has no quorum");
    let srvr = zk.four_letter_word(last, "srvr").expect("srvr answers");
    assert!(
        srvr.contains("This ZooKeeper instance is not currently serving requests"),
        "{srvr}"
    );
    assert_eq!(zk.four_letter_word(last, "ruok").as_deref(), Some("imok"));
    assert_eq!(zk.leader(), None);

    // Both back, on their ports and data: all three serve again.
    zk.start_again(leader);
    zk.start_again(next);
    assert!(zk.wait_healthy(), "three members serve again");
    let modes: Vec<Option<Mode>> = (0..3).map(|i| zk.mode(i)).collect();
    assert_eq!(
        modes.iter().filter(|m| **m == Some(Mode::Leader)).count(),
        1,
        "{modes:?}"
    );

    // All three down and back: they kept their data, so the epoch they count elections in
    // (the high half of a zxid, kept on disk) goes on from where it was instead of from 1.
    let before = epoch(&zk, zk.wait_for_leader());
    for i in 0..3 {
        zk.kill(i);
    }
    for i in 0..3 {
        zk.start_again(i);
    }
    assert!(zk.wait_healthy(), "three members serve after a full restart");
    let after = epoch(&zk, zk.wait_for_leader());
    assert!(after > before, "epoch {after} after {before}: data was lost");
}

/// The election epoch in a member's last zxid, from `srvr` (`Zxid: 0x300000000`).
fn epoch(zk: &ZooKeeperEnsemble, i: usize) -> u64 {
    let srvr = zk.four_letter_word(i, "srvr").expect("srvr answers");
    let zxid = srvr
        .lines()
        .find_map(|line| line.strip_prefix("Zxid: 0x"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or_else(|| panic!("no zxid in {srvr}"));
    zxid >> 32
}

/// An echo server on loopback: its port, and what it received, chunk by chunk.
fn echo_server() -> (u16, mpsc::Receiver<Vec<u8>>) {
    let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = echo.local_addr().unwrap().port();
    let (received, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for mut conn in echo.incoming().flatten() {
            let received = received.clone();
            std::thread::spawn(move || {
                let mut buffer = [0; 64];
                while let Ok(n) = conn.read(&mut buffer) {
                    if n == 0 {
                        return;
                    }
                    let _ = received.send(buffer[..n].to_vec());
                    if conn.write_all(&buffer[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, receiver)
}

/// A connection through `proxy` that waits `patience` for each read.
fn connect(proxy: &Proxy, patience: Duration) -> TcpStream {
    let conn = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    conn.set_read_timeout(Some(patience)).unwrap();
    conn
}

/// Sends four bytes on `conn` and reads four back.
fn round_trip(conn: &mut TcpStream, what: &[u8; 4]) -> std::io::Result<[u8; 4]> {
    conn.write_all(what)?;
    let mut answer = [0; 4];
    conn.read_exact(&mut answer)?;
    Ok(answer)
}

const BRIEFLY: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(10);

#[test]
fn a_cut_proxy_holds_traffic_back_until_restored() {
    let (port, _received) = echo_server();
    let proxy = Proxy::start(port);
    let mut conn = connect(&proxy, BRIEFLY);
    assert_eq!(&round_trip(&mut conn, b"ping").unwrap(), b"ping");

    proxy.cut();
    assert!(
        round_trip(&mut conn, b"held").is_err(),
        "traffic passed a cut proxy"
    );
    proxy.restore();
    conn.set_read_timeout(Some(LONG)).unwrap();
    let mut answer = [0; 4];
    conn.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"held");
}

#[test]
fn a_proxy_rewrites_the_first_greeting_even_split_across_reads() {
    let (port, received) = echo_server();
    let proxy = Proxy::start(port);
    proxy.rewrite_greeting(b"127.0.0.1:12345", b"127.0.0.1:54321");
    let mut conn = connect(&proxy, LONG);
    let expected = "call me at 127.0.0.1:54321, or at 127.0.0.1:12345";
    let mut heard = Vec::new();
    // Each piece is written once the target heard of the one before: the proxy reads them
    // apart, and the address comes in two.
    for piece in ["call me at 127.0.", "0.1:12", "345, or at 127.0.0.1:12345"] {
        conn.write_all(piece.as_bytes()).unwrap();
        heard.extend(received.recv_timeout(LONG).expect("the target hears something"));
    }
    while heard.len() < expected.len() {
        heard.extend(received.recv_timeout(LONG).expect("the target hears the rest"));
    }
    assert_eq!(
        String::from_utf8(heard).unwrap(),
        expected,
        "the first address is rewritten, and only the first"
    );
}

#[test]
fn a_proxy_told_to_retry_holds_a_connection_until_its_target_listens() {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let proxy = Proxy::start(port);

    // By default a refused call closes the client's connection, which had been accepted.
    let mut refused = connect(&proxy, LONG);
    let mut buffer = [0; 5];
    assert_eq!(
        refused.read(&mut buffer).unwrap(),
        0,
        "closed when the target refused"
    );

    proxy.retry_refused(LONG);
    let mut conn = connect(&proxy, BRIEFLY);
    conn.write_all(b"early").unwrap();
    let held = conn
        .read(&mut buffer)
        .expect_err("held open while the target refuses");
    assert!(
        matches!(
            held.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{held}"
    );
    conn.set_read_timeout(Some(LONG)).unwrap();
    let target = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    target.set_nonblocking(true).unwrap();
    let mut upstream = None;
    wait_for(LONG, "the proxy to call the target once it listens", || {
        upstream = target.accept().ok().map(|(upstream, _)| upstream);
        upstream.is_some()
    });
    let mut upstream = upstream.unwrap();
    upstream.set_nonblocking(false).unwrap();
    upstream.set_read_timeout(Some(LONG)).unwrap();
    upstream.read_exact(&mut buffer).unwrap();
    assert_eq!(
        &buffer, b"early",
        "what the client sent before the target listened"
    );
    upstream.write_all(b"later").unwrap();
    conn.read_exact(&mut buffer).unwrap();
    assert_eq!(&buffer, b"later");
}

#[test]
fn a_proxy_cut_one_way_holds_back_only_that_way() {
    let (port, received) = echo_server();
    let proxy = Proxy::start(port);
    let mut conn = connect(&proxy, BRIEFLY);
    assert_eq!(&round_trip(&mut conn, b"ping").unwrap(), b"ping");
    assert_eq!(received.recv_timeout(LONG).unwrap(), b"ping");

    // Requests held: the target hears nothing, so nothing comes back.
    proxy.cut_one_way(Direction::ToTarget);
    assert!(round_trip(&mut conn, b"req1").is_err());
    assert!(received.recv_timeout(BRIEFLY).is_err(), "a request passed");
    proxy.restore();
    assert_eq!(received.recv_timeout(LONG).unwrap(), b"req1");
    conn.set_read_timeout(Some(LONG)).unwrap();
    let mut answer = [0; 4];
    conn.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"req1");

    // Answers held: the target hears the request, and its answer does not come back.
    proxy.cut_one_way(Direction::FromTarget);
    conn.set_read_timeout(Some(BRIEFLY)).unwrap();
    assert!(round_trip(&mut conn, b"ans1").is_err(), "an answer passed");
    assert_eq!(received.recv_timeout(LONG).unwrap(), b"ans1");
    proxy.restore();
    conn.set_read_timeout(Some(LONG)).unwrap();
    conn.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"ans1");
}

#[test]
fn a_slow_proxy_passes_everything_late() {
    let (port, received) = echo_server();
    let proxy = Proxy::start(port);
    proxy.delay(Duration::from_secs(3));
    let mut conn = connect(&proxy, BRIEFLY);
    assert!(round_trip(&mut conn, b"slow").is_err(), "no delay");
    assert_eq!(received.recv_timeout(LONG).unwrap(), b"slow");
    conn.set_read_timeout(Some(LONG)).unwrap();
    let mut answer = [0; 4];
    conn.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"slow");
    proxy.restore();
    assert_eq!(&round_trip(&mut conn, b"fast").unwrap(), b"fast");
}

#[test]
fn a_blackholed_proxy_loses_what_it_swallows_and_closes_those_connections() {
    let (port, received) = echo_server();
    let proxy = Proxy::start(port);
    let mut conn = connect(&proxy, BRIEFLY);
    assert_eq!(&round_trip(&mut conn, b"ping").unwrap(), b"ping");
    assert_eq!(received.recv_timeout(LONG).unwrap(), b"ping");

    proxy.blackhole();
    assert!(round_trip(&mut conn, b"lost").is_err());
    let mut newcomer = connect(&proxy, BRIEFLY);
    assert!(round_trip(&mut newcomer, b"gone").is_err());
    proxy.restore();
    // Unlike a cut, nothing arrives late: the connections that lost bytes are closed.
    conn.set_read_timeout(Some(LONG)).unwrap();
    let mut rest = Vec::new();
    let _ = conn.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?} came through a blackhole");
    assert!(
        received.recv_timeout(BRIEFLY).is_err(),
        "the target heard what was lost"
    );
    let mut fresh = connect(&proxy, LONG);
    assert_eq!(&round_trip(&mut fresh, b"back").unwrap(), b"back");
}

/// The first byte PostgreSQL answers an SSLRequest with (`N` or `S`); `None` if it does not
/// answer within a second.
fn postgres_ssl_answer(port: u16) -> Option<u8> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    // Length 8, then the SSLRequest code 80877103.
    conn.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]).ok()?;
    let mut answer = [0; 1];
    conn.read_exact(&mut answer).ok()?;
    Some(answer[0])
}

#[test]
fn postgres_is_paused_resumed_killed_and_recovers() {
    let mut pg = Postgres::start();
    let port = pg.port();
    assert!(matches!(postgres_ssl_answer(port), Some(b'N' | b'S')));

    pg.pause();
    assert_eq!(postgres_ssl_answer(port), None, "a paused server answered");
    pg.resume();
    wait_for(SHOWS, "the resumed server to answer", || {
        postgres_ssl_answer(port).is_some()
    });

    pg.kill();
    assert!(!pg.is_running());
    assert!(!answers(port));
    pg.start_again();
    assert!(matches!(postgres_ssl_answer(port), Some(b'N' | b'S')));
}

#[test]
fn etcd_members_are_paused_and_cut_off_from_their_peers() {
    let mut cluster = EtcdCluster::start_with_peer_proxies(3);
    let ports: Vec<u16> = cluster.endpoints().iter().map(|e| port_of(e)).collect();

    cluster.pause(1);
    assert_eq!(etcd_health(ports[1]), None, "a paused member answered");
    cluster.resume(1);
    wait_for(SHOWS, "the resumed member to be healthy", || {
        etcd_health(ports[1]) == Some(true)
    });

    // Cut off, the leader still answers its clients, but cannot lead: the others elect
    // another and serve.
    let leader = cluster.wait_for_leader();
    cluster.cut_off(leader);
    wait_for(SHOWS, "the cut-off member to answer unhealthy", || {
        etcd_health(ports[leader]) == Some(false)
    });
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    wait_for(SHOWS, "the other two to serve", || {
        others.iter().all(|&i| etcd_health(ports[i]) == Some(true))
    });
    cluster.reconnect(leader);
    assert!(cluster.wait_healthy(), "three members serve once reconnected");
}

#[test]
fn zookeeper_members_are_paused_and_cut_off_from_their_peers() {
    let mut zk = ZooKeeperEnsemble::start_with_peer_proxies(3);

    zk.pause(0);
    assert_eq!(zk.four_letter_word(0, "ruok"), None, "a paused member answered");
    zk.resume(0);
    assert!(zk.wait_healthy(), "the resumed member serves:\n{}", zk.logs());

    // Cut off, the leader still answers its clients, but serves nothing: the others
    // elect one of them.
    let leader = zk.wait_for_leader();
    zk.cut_off(leader);
    let stopped = holds_within(SHOWS, || {
        zk.four_letter_word(leader, "srvr")
            .is_some_and(|srvr| srvr.contains("not currently serving requests"))
    });
    assert!(
        stopped,
        "the cut-off member {leader} still serves:\n{}",
        zk.logs()
    );
    let replaced = holds_within(SHOWS, || zk.leader().is_some_and(|next| next != leader));
    assert!(replaced, "no member but {leader} leads:\n{}", zk.logs());
    zk.reconnect(leader);
    assert!(
        zk.wait_healthy(),
        "three members serve once reconnected:\n{}",
        zk.logs()
    );
}

#[test]
fn a_fake_clock_steps_a_running_process() {
    let clock = FakeClock::new();
    // Perl, which every Debian has, prints its wall clock each time it reads a line.
    let mut command = Command::new("perl");
    command
        .args(["-e", "$| = 1; while (<STDIN>) { print time(), \"\\n\" }"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    clock.apply(&mut command);
    let mut child = command.spawn().expect("start perl");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    // The process's clock ahead of ours, in seconds.
    let mut ahead = || -> i64 {
        writeln!(stdin).unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let theirs: i64 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("not a time: {line:?}"));
        let ours = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        theirs - i64::try_from(ours).unwrap()
    };
    assert!(ahead().abs() <= 5, "an unstepped clock is the real one");
    clock.set_offset_ms(3_600_000);
    assert!(
        (ahead() - 3_600).abs() <= 5,
        "stepped an hour ahead while it runs"
    );
    clock.set_offset_ms(-7_200_000);
    assert!((ahead() + 7_200).abs() <= 5, "stepped two hours behind");
    assert_eq!(clock.offset_ms(), -7_200_000);
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

/// Sends one inline command to the Redis on `port` and returns its one-line answer.
fn redis_says(port: u16, command: &str) -> String {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    conn.write_all(format!("{command}\r\n").as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(conn).read_line(&mut answer).unwrap();
    answer.trim_end().to_owned()
}

#[test]
fn redis_nodes_are_independent_and_a_node_started_again_is_empty() {
    let mut nodes = RedisNodes::start(3);
    assert_eq!(nodes.len(), 3);
    let ports: Vec<u16> = (0..3).map(|i| nodes.port(i)).collect();
    assert_eq!(
        nodes.url(),
        format!(
            "redis://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
            ports[0], ports[1], ports[2]
        )
    );
    assert_eq!(nodes.node_url(1), format!("redis://127.0.0.1:{}", ports[1]));
    for &port in &ports {
        assert_eq!(redis_says(port, "SET kept here"), "+OK");
    }
    nodes.kill(1);
    assert!(!nodes.is_running(1));
    assert!(!answers(ports[1]));
    assert_eq!(redis_says(ports[0], "GET kept"), "$4", "the others keep theirs");
    nodes.start_again(1);
    assert!(nodes.is_running(1));
    assert_eq!(redis_says(ports[1], "GET kept"), "$-1", "started again empty");
    assert_eq!(nodes.port(1), ports[1]);
    drop(nodes);
    assert!(
        ports.iter().all(|&port| !answers(port)),
        "a node outlived the set"
    );
}
