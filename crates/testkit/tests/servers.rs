//! The throwaway servers start, answer, stop, start again, and leave nothing behind.

use std::net::TcpStream;
use std::path::PathBuf;

use std::time::Instant;

use fencelock_testkit::{
    Etcd, EtcdCluster, Mode, Postgres, RedisNodes, ZooKeeper, ZooKeeperEnsemble, shared_etcd,
    shared_postgres, shared_redis, shared_redis_nodes, shared_zookeeper,
};

fn answers(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
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
    cluster.restart(1);
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
    cluster.restart(leader);
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
    zk.stop(leader);
    assert!(!zk.is_running(leader));
    assert_eq!(zk.mode(leader), None);
    assert!(zk.wait_healthy(), "two of three members keep a quorum");
    let next = zk.wait_for_leader();
    assert_ne!(next, leader);

    // Two down: the last one runs, answers, and serves nothing.
    let last = (0..3).find(|&i| i != leader && i != next).expect("a third");
    zk.stop(next);
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
        zk.stop(i);
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

#[test]
fn a_cut_proxy_holds_traffic_back_until_restored() {
    use std::io::{Read, Write};
    use std::time::Duration;

    let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let echo_port = echo.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in echo.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buffer = [0; 64];
                while let Ok(n) = conn.read(&mut buffer) {
                    if n == 0 || conn.write_all(&buffer[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let proxy = fencelock_testkit::Proxy::start(echo_port);
    let mut conn = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    conn.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut answer = [0; 4];
    conn.write_all(b"ping").unwrap();
    conn.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"ping");

    proxy.cut();
    conn.write_all(b"held").unwrap();
    assert!(
        conn.read_exact(&mut answer).is_err(),
        "traffic passed a cut proxy"
    );
    proxy.restore();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"held");
}

/// Sends one inline command to the Redis on `port` and returns its one-line answer.
fn redis_says(port: u16, command: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
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
    nodes.stop(1);
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
