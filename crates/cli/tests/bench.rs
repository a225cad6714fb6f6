//! `fencelock bench` against a real server and straight against a store.

mod common;

use common::{Server, closed_port, run};

#[test]
fn bench_reports_cycles_and_percentiles_against_a_server() {
    let server = Server::start();
    let shown = server.run(&["bench", "--duration", "1s", "--clients", "4", "--json"]);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    let report = shown.json();
    assert!(report["cycles"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["errors"], 0);
    assert_eq!(report["held"], 0, "one resource per client: no contention");
    assert_eq!(report["acquire_ms"]["count"], report["cycles"]);
    let p50 = report["acquire_ms"]["p50"].as_f64().unwrap();
    let p99 = report["acquire_ms"]["p99"].as_f64().unwrap();
    assert!(0.0 < p50 && p50 <= p99, "{report}");
}

#[test]
fn bench_with_shared_resources_meets_busy_locks() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("bench.db").display());
    let shown = run(&[
        "bench",
        "--store",
        &store,
        "--duration",
        "1s",
        "--clients",
        "8",
        "--resources",
        "1",
        "--json",
    ]);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    let report = shown.json();
    assert!(report["cycles"].as_u64().unwrap() > 0, "{report}");
    assert!(
        report["held"].as_u64().unwrap() > 0,
        "eight clients on one lock never met: {report}"
    );
    assert_eq!(report["errors"], 0);
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
    assert_eq!(run(&["bench", "--clients", "0"]).code, Some(2));
    assert_eq!(run(&["bench", "--duration", "soon"]).code, Some(2));
}
