//! `fencelock acquire`, `renew`, `release`, `status` and `list` as a user runs them — of
//! locks, semaphore permits (`--limit`, `--kind semaphore`) and read-write locks (`--mode`,
//! `--kind rwlock`): against a real `fencelock serve`, and straight on an embedded store.
//! Exit codes are the SPEC's: 0 done, 1 refused (held by another, not found, forbidden,
//! conflict, free), 2 bad input, 3 unreachable.

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

#[test]
fn permits_are_acquired_shown_renewed_and_released_like_leases() {
    let server = Server::start();
    let acquire = |owner: &str, limit: &str| {
        server.run(&[
            "acquire", "gpu-pool", "--limit", limit, "--owner", owner, "--ttl", "30s",
        ])
    };
    let first = acquire("trainer-1", "2");
    assert_eq!(first.code, Some(0), "{first:?}");
    let permit = first.json();
    assert_eq!(
        (&permit["name"], &permit["owner"]),
        (&"gpu-pool".into(), &"trainer-1".into())
    );
    assert_eq!(permit["limit"], 2);
    assert_eq!(ms(&permit["expires_at"]) - ms(&permit["acquired_at"]), 30_000);
    let second = acquire("trainer-2", "2");
    assert_eq!(second.code, Some(0), "{second:?}");
    assert!(token(&second.json()) > token(&permit));
    // The same owner again extends its permit: same token.
    assert_eq!(token(&acquire("trainer-1", "2").json()), token(&permit));

    // Full: refused, and told by whom; with --json, the API's answer.
    let full = acquire("trainer-3", "2");
    assert_eq!((full.code, full.stdout.as_str()), (Some(1), ""), "{full:?}");
    assert!(
        full.stderr
            .contains("all its 2 permits held (by trainer-1, trainer-2)"),
        "{full:?}"
    );
    let full = server.run(&[
        "acquire",
        "gpu-pool",
        "--limit",
        "2",
        "--owner",
        "trainer-3",
        "--json",
    ]);
    assert_eq!(
        (full.code, &full.json()["acquired"]),
        (Some(1), &false.into()),
        "{full:?}"
    );
    assert_eq!(full.json()["holders"], 2);
    // Another limit than the live permits': refused, nothing changes.
    let other = acquire("trainer-3", "3");
    assert_eq!(other.code, Some(1), "{other:?}");
    assert!(other.stderr.contains("live permits of limit 2"), "{other:?}");
    let other = server.run(&[
        "acquire",
        "gpu-pool",
        "--limit",
        "3",
        "--owner",
        "trainer-3",
        "--json",
    ]);
    assert_eq!(other.json()["limit"], 2, "{other:?}");
    assert!(other.json()["type"].as_str().unwrap().ends_with("limit-mismatch"));

    let status = server.run(&["status", "gpu-pool", "--kind", "semaphore", "--json"]);
    assert_eq!(status.code, Some(0), "{status:?}");
    let shown = status.json();
    assert_eq!((&shown["name"], &shown["limit"]), (&"gpu-pool".into(), &2.into()));
    let owners: Vec<&str> = shown["permits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners, ["trainer-1", "trainer-2"]);
    let status = server.run(&["status", "gpu-pool", "--kind", "semaphore"]);
    assert!(
        status
            .stdout
            .starts_with("gpu-pool (semaphore): 2 of 2 permits held\n"),
        "{status:?}"
    );
    assert!(
        status.stdout.contains("permit of trainer-1 (fencing token "),
        "{status:?}"
    );
    // The namespaces are apart: there is no lock gpu-pool.
    assert_eq!(server.lease("gpu-pool"), None);
    let listed = server.run(&["list", "--kind", "semaphore", "--json"]);
    assert_eq!(
        listed.json()["semaphores"][0]["permits"],
        shown["permits"],
        "{listed:?}"
    );
    let table = server.run(&["list", "--kind", "semaphore"]);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(lines[0].starts_with("NAME") && lines.len() == 3, "{table:?}");
    assert!(lines[1].starts_with("gpu-pool  trainer-1 "), "{table:?}");

    let t = token(&permit).to_string();
    let on_permit = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["gpu-pool", "--kind", "semaphore", "--owner", "trainer-1"]);
        server.run(&all)
    };
    let renewed = on_permit(&["renew", "--ttl", "1m", "--token", &t]);
    assert_eq!(renewed.code, Some(0), "{renewed:?}");
    assert_eq!(token(&renewed.json()), token(&permit));
    assert!(ms(&renewed.json()["expires_at"]) >= ms(&permit["acquired_at"]) + 60_000);
    let stale = on_permit(&["renew", "--token", "999", "--json"]);
    assert_eq!(
        (stale.code, &stale.json()["reason"]),
        (Some(1), &"conflict".into()),
        "{stale:?}"
    );
    assert_eq!(stale.json()["name"], "gpu-pool");
    let released = on_permit(&["release", "--token", &t]);
    assert_eq!(
        (released.code, released.stdout.trim()),
        (Some(0), "released gpu-pool"),
        "{released:?}"
    );
    let again = on_permit(&["release", "--json"]);
    assert_eq!(
        (again.code, &again.json()["reason"]),
        (Some(1), &"not_found".into()),
        "{again:?}"
    );
    assert!(
        again.stderr.contains("trainer-1 holds no live permit"),
        "{again:?}"
    );
    // A freed permit goes to the next owner, with a greater token.
    let third = acquire("trainer-3", "2");
    assert_eq!(third.code, Some(0), "{third:?}");
    assert!(token(&third.json()) > token(&second.json()));
}

#[test]
fn read_write_locks_share_reads_and_exclude_a_writer() {
    let server = Server::start();
    let acquire =
        |owner: &str, mode: &str| server.run(&["acquire", "config", "--mode", mode, "--owner", owner]);
    let r1 = acquire("r1", "read");
    let r2 = acquire("r2", "read");
    assert_eq!((r1.code, r2.code), (Some(0), Some(0)), "{r1:?} {r2:?}");
    assert_eq!(
        (&r1.json()["mode"], &r1.json()["name"]),
        (&"read".into(), &"config".into())
    );
    assert!(token(&r2.json()) > token(&r1.json()));
    let writer = acquire("w", "write");
    assert_eq!(writer.code, Some(1), "{writer:?}");
    assert!(writer.stderr.contains("held for read (by r1, r2)"), "{writer:?}");
    let writer = server.run(&["acquire", "config", "--mode", "write", "--owner", "w", "--json"]);
    assert_eq!(
        (&writer.json()["acquired"], &writer.json()["mode"]),
        (&false.into(), &"read".into())
    );

    let status = server.run(&["status", "config", "--kind", "rwlock", "--json"]);
    assert_eq!(status.code, Some(0), "{status:?}");
    assert_eq!(status.json()["mode"], "read");
    assert_eq!(status.json()["holders"].as_array().map(Vec::len), Some(2));
    let listed = server.run(&["list", "--kind", "rwlock", "--json"]);
    assert_eq!(listed.json()["rwlocks"][0]["holders"], status.json()["holders"]);

    for owner in ["r1", "r2"] {
        let released = server.run(&["release", "config", "--kind", "rwlock", "--owner", owner]);
        assert_eq!(released.code, Some(0), "{released:?}");
    }
    let free = server.run(&["status", "config", "--kind", "rwlock"]);
    assert_eq!((free.code, free.stdout.trim()), (Some(1), "config is free"));
    let writer = acquire("w", "write");
    assert_eq!(writer.code, Some(0), "{writer:?}");
    assert!(token(&writer.json()) > token(&r2.json()));
    let reader = acquire("r3", "read");
    assert_eq!(reader.code, Some(1), "{reader:?}");
    assert!(reader.stderr.contains("held for write (by w)"), "{reader:?}");
    let status = server.run(&["status", "config", "--kind", "rwlock"]);
    assert!(
        status
            .stdout
            .starts_with("config (read-write lock): held for write\n"),
        "{status:?}"
    );
}

#[test]
fn bad_limits_modes_and_kinds_exit_2_and_an_unreachable_server_3() {
    let server = Server::start();
    for args in [
        vec!["acquire", "r", "--owner", "a", "--limit", "2", "--mode", "read"],
        vec!["acquire", "r", "--owner", "a", "--limit", "0"],
        vec!["acquire", "r", "--owner", "a", "--limit", "-1"],
        vec!["acquire", "r", "--owner", "a", "--limit", "many"],
        vec!["acquire", "r", "--owner", "a", "--mode", "both"],
        vec!["release", "r", "--owner", "a", "--kind", "mutex"],
        vec!["status", "r", "--kind", "Semaphore"],
        // Refused by the server (above its largest limit, 10,000): still bad input.
        vec!["acquire", "r", "--owner", "a", "--limit", "10001"],
    ] {
        let shown = server.run(&args);
        assert_eq!(shown.code, Some(2), "{args:?}: {shown:?}");
        assert!(!shown.stderr.is_empty(), "{args:?} said nothing");
    }
    for kind in ["semaphore", "rwlock"] {
        let shown = server.run(&["status", "r", "--kind", kind, "--json"]);
        assert_eq!((shown.code, shown.stdout.trim()), (Some(1), "null"), "{shown:?}");
    }
    let nowhere = format!("http://127.0.0.1:{}", closed_port());
    for args in [
        vec!["acquire", "r", "--owner", "a", "--limit", "2"],
        vec!["acquire", "r", "--owner", "a", "--mode", "write"],
        vec!["renew", "r", "--owner", "a", "--kind", "semaphore"],
        vec!["release", "r", "--owner", "a", "--kind", "rwlock"],
        vec!["status", "r", "--kind", "rwlock"],
        vec!["list", "--kind", "semaphore"],
    ] {
        let mut args = args.clone();
        args.extend(["--server", &nowhere]);
        let shown = run(&args);
        assert_eq!(shown.code, Some(3), "{args:?}: {shown:?}");
    }
}

#[test]
fn permits_and_holds_work_straight_on_an_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}/locks.db", dir.path().display());
    let on_store = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--store", &store]);
        run(&all)
    };
    let a = on_store(&["acquire", "pool", "--limit", "2", "--owner", "a", "--ttl", "1m"]);
    let b = on_store(&["acquire", "pool", "--limit", "2", "--owner", "b", "--ttl", "1m"]);
    assert_eq!((a.code, b.code), (Some(0), Some(0)), "{a:?} {b:?}");
    let c = on_store(&["acquire", "pool", "--limit", "2", "--owner", "c"]);
    assert_eq!(c.code, Some(1), "{c:?}");
    // Each command opens the store anew: the permits were kept (their expiry only ever moves
    // later, as a lease's does: the store counts no time while it is closed).
    let shown = on_store(&["status", "pool", "--kind", "semaphore", "--json"]).json();
    for field in ["owner", "fencing_token", "acquired_at"] {
        assert_eq!(shown["permits"][1][field], b.json()[field], "{shown}");
    }
    let released = on_store(&["release", "pool", "--kind", "semaphore", "--owner", "a"]);
    assert_eq!(released.code, Some(0), "{released:?}");
    let script = "echo $FENCELOCK_KIND $FENCELOCK_TOKEN";
    let writer = run(&[
        "run", "config", "--mode", "write", "--store", &store, "--", "sh", "-c", script,
    ]);
    assert_eq!(writer.code, Some(0), "{writer:?}");
    let [kind, written] = writer.stdout.split_whitespace().collect::<Vec<_>>()[..] else {
        panic!("{writer:?}");
    };
    assert_eq!(kind, "rwlock");
    // Tokens come from one counter: the write hold's is greater than every permit's.
    assert!(written.parse::<u64>().unwrap() > token(&b.json()), "{writer:?}");
    let free = on_store(&["status", "config", "--kind", "rwlock"]);
    assert_eq!(free.code, Some(1), "released when the command ended: {free:?}");
}

#[test]
fn acquire_with_max_hold_prints_the_cap_and_the_first_expiry_cut_at_it() {
    let shown = run(&[
        "acquire",
        "reindex",
        "--store",
        "memory://",
        "--owner",
        "job",
        "--ttl",
        "1m",
        "--max-hold",
        "20s",
    ]);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    let lease = shown.json();
    assert_eq!(ms(&lease["hold_until"]) - ms(&lease["acquired_at"]), 20_000);
    assert_eq!(
        lease["expires_at"], lease["hold_until"],
        "the TTL is cut at the cap"
    );
    let uncapped = run(&["acquire", "reindex", "--store", "memory://", "--ttl", "1m"]);
    assert_eq!(uncapped.code, Some(0), "{uncapped:?}");
    assert_eq!(uncapped.json().get("hold_until"), None, "no cap, no field");
    for args in [
        vec!["acquire", "r", "--store", "memory://", "--max-hold", "0s"],
        vec![
            "acquire",
            "r",
            "--store",
            "memory://",
            "--mode",
            "write",
            "--max-hold",
            "1m",
        ],
    ] {
        let shown = run(&args);
        assert_eq!(shown.code, Some(2), "{args:?}: {shown:?}");
    }
}

#[test]
fn acquire_takes_meta_and_status_and_list_show_it() {
    let server = Server::start();
    let granted = server.run(&[
        "acquire",
        "backup",
        "--owner",
        "db-3",
        "--meta",
        "job=nightly",
        "--meta",
        "step=a=b",
    ]);
    assert_eq!(granted.code, Some(0), "{granted:?}");
    let meta = serde_json::json!({"job": "nightly", "step": "a=b"});
    assert_eq!(granted.json()["meta"], meta);
    assert_eq!(server.lease("backup").unwrap()["meta"], meta);
    let status = server.run(&["status", "backup"]);
    assert!(
        status.stdout.contains(r#"meta {"job":"nightly","step":"a=b"}"#),
        "{status:?}"
    );
    let list = server.run(&["list"]);
    let header = list.stdout.lines().next().unwrap_or_default();
    assert!(header.ends_with("META"), "{list:?}");
    assert!(
        list.stdout.contains(r#"{"job":"nightly","step":"a=b"}"#),
        "{list:?}"
    );
    // Holds take it too.
    let permit = server.run(&["acquire", "pool", "--owner", "w", "--limit", "2", "--meta", "k=v"]);
    assert_eq!(permit.json()["meta"], serde_json::json!({"k": "v"}), "{permit:?}");
    assert_eq!(
        server.status("pool", "semaphore").unwrap()["permits"][0]["meta"]["k"],
        "v"
    );
    // A pair that is not KEY=VALUE is bad input, and nothing is acquired.
    for bad in ["novalue", "=v"] {
        let shown = server.run(&["acquire", "other", "--meta", bad]);
        assert_eq!(shown.code, Some(2), "{bad}: {shown:?}");
    }
    assert_eq!(server.lease("other"), None);
    // Too big for the server: its 422 is bad input too.
    let big = format!("k={}", "x".repeat(2000));
    let shown = server.run(&["acquire", "other", "--meta", &big]);
    assert_eq!(shown.code, Some(2), "{shown:?}");
    assert_eq!(server.lease("other"), None);
}
