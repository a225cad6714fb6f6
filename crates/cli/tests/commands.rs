//! `fencelock acquire`, `renew`, `release`, `status` and `list` as a user runs them: against
//! a real `fencelock serve`, and straight on an embedded store. Exit codes are the SPEC's:
//! 0 done, 1 refused (held by another, not found, forbidden, conflict, free), 2 bad input,
//! 3 unreachable.

mod common;

use std::time::{Duration, Instant};

use common::{Server, closed_port, fencelock, ms, run, shown};
use serde_json::Value;

fn token(lease: &Value) -> u64 {
    lease["fencing_token"].as_u64().expect("a lease with a token")
}

#[test]
fn acquire_prints_the_lease_and_exits_1_when_another_owner_holds_it() {
    let server = Server::start();
    let granted = server.run(&["acquire", "payment:42", "--owner", "worker-7", "--ttl", "30s"]);
    assert_eq!(granted.code, Some(0), "{granted:?}");
    let lease = granted.json();
    assert_eq!(lease["resource"], "payment:42");
    assert_eq!(lease["owner"], "worker-7");
    assert!(token(&lease) >= 1);
    assert_eq!(ms(&lease["expires_at"]) - ms(&lease["acquired_at"]), 30_000);

    let held = server.run(&["acquire", "payment:42", "--owner", "worker-8"]);
    assert_eq!(held.code, Some(1), "{held:?}");
    assert_eq!(held.stdout, "");
    assert!(held.stderr.contains("held by worker-7"), "{held:?}");
    let held = server.run(&["acquire", "payment:42", "--owner", "worker-8", "--json"]);
    assert_eq!(held.code, Some(1));
    assert_eq!(held.json()["acquired"], false);
    assert_eq!(held.json()["holder"], lease);

    // The holder's acquire extends its lease: same token.
    let again = server.run(&["acquire", "payment:42", "--owner", "worker-7", "--ttl", "1m"]);
    assert_eq!(again.code, Some(0));
    assert_eq!(token(&again.json()), token(&lease));

    // Without --owner, the owner is HOSTNAME:PID of the command, printed in the lease.
    let own = server.run(&["acquire", "job:1"]);
    assert_eq!(own.code, Some(0));
    let owner = own.json()["owner"].as_str().unwrap().to_owned();
    assert!(
        owner
            .rsplit_once(':')
            .is_some_and(|(_, pid)| pid.parse::<u32>().is_ok()),
        "{owner}"
    );
    assert_eq!(server.run(&["release", "job:1", "--owner", &owner]).code, Some(0));
}

#[test]
fn acquire_waits_for_a_busy_lock() {
    let server = Server::start();
    let first = server
        .run(&["acquire", "r", "--owner", "a", "--ttl", "700ms"])
        .json();
    let started = Instant::now();
    let waited = server.run(&["acquire", "r", "--owner", "b", "--ttl", "30s", "--wait", "10s"]);
    assert_eq!(waited.code, Some(0), "{waited:?}");
    assert!(token(&waited.json()) > token(&first));
    assert!(started.elapsed() < Duration::from_secs(5));
    // A wait that runs out is "held by another".
    let short = server.run(&["acquire", "r", "--owner", "c", "--wait", "200ms"]);
    assert_eq!(short.code, Some(1), "{short:?}");
}

#[test]
fn renew_and_release_check_the_owner_and_the_token() {
    let server = Server::start();
    let lease = server
        .run(&["acquire", "r", "--owner", "a", "--ttl", "10s"])
        .json();
    let t = token(&lease).to_string();
    let wrong = (token(&lease) + 1000).to_string();

    let renewed = server.run(&["renew", "r", "--owner", "a", "--ttl", "1m", "--token", &t]);
    assert_eq!(renewed.code, Some(0), "{renewed:?}");
    let renewed = renewed.json();
    assert_eq!(token(&renewed), token(&lease));
    assert_eq!(renewed["acquired_at"], lease["acquired_at"]);
    assert!(ms(&renewed["expires_at"]) >= ms(&lease["acquired_at"]) + 60_000);

    for (args, reason) in [
        (vec!["renew", "r", "--owner", "a", "--token", &wrong], "conflict"),
        (vec!["renew", "r", "--owner", "b"], "forbidden"),
        (vec!["renew", "nothing", "--owner", "a"], "not_found"),
        (
            vec!["release", "r", "--owner", "a", "--token", &wrong],
            "conflict",
        ),
        (vec!["release", "r", "--owner", "b", "--token", &t], "forbidden"),
        (vec!["release", "nothing", "--owner", "a"], "not_found"),
    ] {
        let mut args = args.clone();
        args.push("--json");
        let refused = server.run(&args);
        assert_eq!(refused.code, Some(1), "{args:?}: {refused:?}");
        assert_eq!(refused.json()["reason"], reason, "{args:?}");
    }
    // Nothing refused changed the lease.
    assert_eq!(server.lease("r"), Some(renewed));

    let released = server.run(&["release", "r", "--owner", "a", "--token", &t]);
    assert_eq!(released.code, Some(0), "{released:?}");
    assert_eq!(released.stdout.trim(), "released r");
    assert_eq!(server.lease("r"), None);
    let again = server.run(&["release", "r", "--owner", "a"]);
    assert_eq!(again.code, Some(1));
    assert!(again.stderr.contains("no live lease"), "{again:?}");
}

#[test]
fn status_and_list_show_live_leases() {
    let server = Server::start();
    for (resource, owner) in [("app/b", "w2"), ("app/a", "w1"), ("other", "w3")] {
        assert_eq!(server.run(&["acquire", resource, "--owner", owner]).code, Some(0));
    }
    let status = server.run(&["status", "app/a"]);
    assert_eq!(status.code, Some(0));
    assert!(
        status.stdout.starts_with("app/a is held by w1 (fencing token "),
        "{status:?}"
    );
    let status = server.run(&["status", "app/a", "--json"]);
    assert_eq!(status.json()["owner"], "w1");
    let free = server.run(&["status", "app/z"]);
    assert_eq!(free.code, Some(1));
    assert_eq!(free.stdout.trim(), "app/z is free");
    assert_eq!(server.run(&["status", "app/z", "--json"]).stdout.trim(), "null");

    let listed = server.run(&["list", "--prefix", "app/", "--json"]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    let locks = listed.json()["locks"].clone();
    let names: Vec<&str> = locks
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["resource"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app/a", "app/b"]);
    let table = server.run(&["list"]);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(lines[0].starts_with("RESOURCE"), "{table:?}");
    assert_eq!(lines.len(), 4, "{table:?}");
    assert!(
        lines[1].starts_with("app/a ") && lines[3].starts_with("other "),
        "{table:?}"
    );
    let none = server.run(&["list", "--prefix", "zzz"]);
    assert_eq!((none.code, none.stdout.trim()), (Some(0), "no live leases"));
}

#[test]
fn bad_input_exits_2() {
    let server = Server::start();
    for args in [
        vec!["acquire", "", "--owner", "a"],
        vec!["acquire", "r", "--owner", " "],
        vec!["acquire", "r", "--ttl", "0s"],
        vec!["acquire", "r", "--ttl", "soon"],
        vec!["acquire", "r", "--ttl", "1500us"],
        vec!["acquire", "r", "--wait", "-1s"],
        vec!["acquire"],
        vec!["release", "r"],
        vec!["renew", "r", "--owner", "a", "--token", "x"],
        vec!["status", "a\u{7}b"],
        vec!["list", "--prefix", "a\nb"],
        // Refused by the server (above its maximum TTL of one day): still bad input.
        vec!["acquire", "r", "--owner", "a", "--ttl", "2days"],
        vec!["frobnicate"],
    ] {
        let shown = server.run(&args);
        assert_eq!(shown.code, Some(2), "{args:?}: {shown:?}");
        assert!(!shown.stderr.is_empty(), "{args:?} said nothing");
    }
    assert_eq!(server.lease("r"), None);
    let shown = run(&["acquire", "r", "--store", "ftp://nowhere"]);
    assert_eq!(shown.code, Some(2), "{shown:?}");
    assert!(shown.stderr.contains("http://HOST:PORT"), "{shown:?}");
}

#[test]
fn an_unreachable_server_or_store_exits_3() {
    let nowhere = format!("http://127.0.0.1:{}", closed_port());
    for args in [
        vec!["acquire", "r", "--owner", "a"],
        vec!["renew", "r", "--owner", "a"],
        vec!["release", "r", "--owner", "a"],
        vec!["status", "r"],
        vec!["list"],
    ] {
        let mut args = args.clone();
        args.extend(["--server", &nowhere]);
        let shown = run(&args);
        assert_eq!(shown.code, Some(3), "{args:?}: {shown:?}");
        assert!(shown.stderr.contains("cannot be reached"), "{shown:?}");
    }
    // The environment variable names the server too.
    let shown = shown(
        fencelock()
            .args(["status", "r"])
            .env("FENCELOCK_SERVER", &nowhere)
            .output()
            .unwrap(),
    );
    assert_eq!(shown.code, Some(3), "{shown:?}");
    let dir = tempfile::tempdir().unwrap();
    let unopenable = format!("sqlite://{}/no/such/folder/x.db", dir.path().display());
    let shown = run(&["status", "r", "--store", &unopenable]);
    assert_eq!(shown.code, Some(3), "{shown:?}");
}

#[test]
fn the_commands_work_straight_on_an_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}/locks.db", dir.path().display());
    let on_store = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--store", &store]);
        run(&all)
    };
    let first = on_store(&["acquire", "batch", "--owner", "a", "--ttl", "1m"]);
    assert_eq!(first.code, Some(0), "{first:?}");
    let held = on_store(&["acquire", "batch", "--owner", "b"]);
    assert_eq!(held.code, Some(1), "{held:?}");
    // Each command opens the store anew, and the store counts no time while it is closed
    // (so a clock step then cannot shorten a lease): the lease only ever ends later.
    let same_lease = |shown: &Value| {
        for field in ["resource", "owner", "fencing_token", "acquired_at"] {
            assert_eq!(shown[field], first.json()[field], "{shown}");
        }
        assert!(
            ms(&shown["expires_at"]) >= ms(&first.json()["expires_at"]),
            "{shown}"
        );
    };
    same_lease(&on_store(&["status", "batch", "--json"]).json());
    same_lease(&on_store(&["list", "--json"]).json()["locks"][0]);
    let t = token(&first.json()).to_string();
    assert_eq!(
        on_store(&["renew", "batch", "--owner", "a", "--token", &t]).code,
        Some(0)
    );
    assert_eq!(
        on_store(&["release", "batch", "--owner", "a", "--token", &t]).code,
        Some(0)
    );
    assert_eq!(on_store(&["status", "batch"]).code, Some(1));
    // The store remembers the tokens it issued: the next lease gets a higher one.
    let next = on_store(&["acquire", "batch", "--owner", "b"]);
    assert!(token(&next.json()) > token(&first.json()), "{next:?}");
    // FENCELOCK_STORE wins over a server address.
    let via_env = shown(
        fencelock()
            .args(["status", "batch", "--json", "--server", "http://127.0.0.1:1"])
            .env("FENCELOCK_STORE", &store)
            .output()
            .unwrap(),
    );
    assert_eq!(via_env.json()["owner"], "b", "{via_env:?}");
}
