//! The throwaway servers start, answer, stop, start again, and leave nothing behind.

use std::net::TcpStream;
use std::path::PathBuf;

use fencelock_testkit::{
    Etcd, EtcdCluster, Postgres, RedisNodes, shared_etcd, shared_postgres, shared_redis, shared_redis_nodes,
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
