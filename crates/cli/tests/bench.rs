//! `fencelock bench` against a real server, straight against a store, and against the peers'
//! classic locks on throwaway servers. These check the bench's own books, never a time.

mod common;

use common::{Server, closed_port, run};
use fencelock_testkit::{shared_postgres, shared_redis, shared_redis_nodes};
use serde_json::Value;

/// Runs `fencelock bench ARGS… --json` for one second and returns its report, after checking
/// that its counts add up: every cycle is one acquire, granted or held or failed; every grant
/// is released once; each answered acquire and each release has its latency recorded; and
/// no two clients ever held one resource at once.
fn bench(server: Option<&Server>, args: &[&str]) -> Value {
    let mut all = vec!["bench", "--duration", "1s", "--json"];
    all.extend_from_slice(args);
    let shown = match server {
        Some(server) => server.run(&all),
        None => run(&all),
    };
    assert_eq!(shown.code, Some(0), "{shown:?}");
    let report = shown.json();
    let n = |field: &str| {
        report[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field} in {report}"))
    };
    assert!(n("cycles") > 0, "{report}");
    assert_eq!(n("granted") + n("held") + n("errors"), n("cycles"), "{report}");
    assert_eq!(n("releases") + n("release_errors"), n("granted"), "{report}");
    assert_eq!(
        report["acquire_ms"]["count"].as_u64(),
        Some(n("granted") + n("held")),
        "{report}"
    );
    assert_eq!(
        report["release_ms"]["count"].as_u64(),
        Some(n("releases")),
        "{report}"
    );
    assert_eq!(n("overlaps"), 0, "two holders of one lock: {report}");
    report
}

/// On one resource, whatever was not granted was refused as held, and nothing failed: the
/// refused ratio is `held / cycles`, and every grant found the lock free.
fn assert_contended(report: &Value) {
    assert_eq!(report["resources"], 1);
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["release_errors"], 0, "{report}");
    let (cycles, granted, held) = (
        report["cycles"].as_u64().unwrap(),
        report["granted"].as_u64().unwrap(),
        report["held"].as_u64().unwrap(),
    );
    assert!(granted > 0, "nobody ever got the lock: {report}");
    assert!(held > 0, "several clients on one lock never met: {report}");
    assert_eq!(held, cycles - granted, "{report}");
}

#[test]
fn bench_reports_cycles_and_percentiles_against_a_server() {
    let server = Server::start();
    let report = bench(Some(&server), &["--clients", "4", "--resources", "10000"]);
    assert_eq!(report["errors"], 0);
    assert_eq!(report["release_errors"], 0);
    let p50 = report["acquire_ms"]["p50"].as_f64().unwrap();
    let p999 = report["acquire_ms"]["p999"].as_f64().unwrap();
    assert!(0.0 < p50 && p50 <= p999, "{report}");
}

#[test]
fn bench_with_one_resource_refuses_all_but_one_holder_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("bench.db").display());
    let report = bench(None, &["--store", &store, "--clients", "8", "--resources", "1"]);
    assert_contended(&report);
}

#[test]
fn bench_with_one_resource_through_a_server_counts_the_same() {
    let server = Server::start();
    let report = bench(Some(&server), &["--clients", "8", "--resources", "1"]);
    assert_contended(&report);
}

#[test]
fn bench_takes_permits_and_holds_sharing_as_their_kind_allows() {
    let server = Server::start();
    let one = ["--clients", "8", "--resources", "1"];
    // Room for every client: nobody is ever refused, and the books see no excess holder.
    for shared in [["--limit", "8"], ["--mode", "read"]] {
        let report = bench(Some(&server), &[&one[..], &shared[..]].concat());
        assert_eq!(report["held"], 0, "{shared:?}: {report}");
        assert_eq!(report["errors"], 0, "{shared:?}: {report}");
    }
    // Room for one: refused as a lock is.
    for exclusive in [["--limit", "1"], ["--mode", "write"]] {
        assert_contended(&bench(Some(&server), &[&one[..], &exclusive[..]].concat()));
    }
}

/// A peer's lock on `target`: counts add up without contention, and on one resource.
fn peer_counts_add_up(target: &str) {
    let free = bench(
        None,
        &["--target", target, "--clients", "4", "--resources", "10000"],
    );
    assert_eq!(free["errors"], 0, "{free}");
    assert_eq!(free["release_errors"], 0, "{free}");
    assert_contended(&bench(
        None,
        &["--target", target, "--clients", "8", "--resources", "1"],
    ));
}

#[test]
fn bench_measures_redis_set_nx_and_compare_and_delete() {
    peer_counts_add_up(&shared_redis().url());
}

#[test]
fn bench_measures_its_own_redlock_over_three_nodes() {
    peer_counts_add_up(&shared_redis_nodes(3).url());
}

#[cfg(feature = "zookeeper")]
#[test]
fn bench_measures_a_zookeeper_ephemeral_znode() {
    peer_counts_add_up(&fencelock_testkit::shared_zookeeper().url());
}

#[test]
fn bench_measures_a_postgres_lock_table() {
    peer_counts_add_up(&shared_postgres().url());
}

#[cfg(feature = "etcd")]
#[test]
fn bench_measures_an_etcd_lease_txn() {
    peer_counts_add_up(&format!("etcd://{}", fencelock_testkit::shared_etcd().endpoint()));
}

#[test]
fn bench_exits_3_when_nothing_answers_and_2_on_bad_flags() {
    let nowhere = format!("http://127.0.0.1:{}", closed_port());
    let shown = run(&[
        "bench",
        "--server",
        &nowhere,
        "--duration",
        "300ms",
        "--clients",
        "1",
    ]);
    assert_eq!(shown.code, Some(3), "{shown:?}");
    let nowhere = format!("redis://127.0.0.1:{}", closed_port());
    assert_eq!(
        run(&["bench", "--target", &nowhere, "--duration", "300ms"]).code,
        Some(3)
    );
    assert_eq!(
        run(&["bench", "--target", "gopher://x", "--duration", "300ms"]).code,
        Some(2)
    );
    let two = run(&[
        "bench",
        "--target",
        "redis://127.0.0.1:1,127.0.0.1:2",
        "--duration",
        "300ms",
    ]);
    assert_eq!(two.code, Some(2), "{two:?}");
    assert!(two.stderr.contains("three or more nodes"), "{two:?}");
    assert_eq!(run(&["bench", "--clients", "0"]).code, Some(2));
    let peer = ["bench", "--target", "redis://127.0.0.1:1", "--limit", "2"];
    assert_eq!(run(&peer).code, Some(2), "a peer has only locks");
    let both = ["bench", "--limit", "2", "--mode", "read"];
    assert_eq!(run(&both).code, Some(2));
    assert_eq!(run(&["bench", "--duration", "soon"]).code, Some(2));
}
