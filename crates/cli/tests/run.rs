//! `fencelock run` with real processes: what the child sees, exit statuses, mutual exclusion
//! between runs (of a lock, of several locks at once, of a semaphore's permits, of a
//! read-write lock's modes), `--no-wait`, signals, and — the point of it all — a lost lease,
//! permit or hold, or a cap on holding, stops the child and everything it started (in its
//! process group or not) before the lease could pass on; so does a `run` killed with
//! SIGKILL, and so does the child's end, before the release.

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{Server, alive, closed_port, fencelock, ms, run, wait_for_file, wall_ms};
use fencelock_testkit::eventually_blocking;
use fencelock_testkit::shared_postgres;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// `fencelock run RESOURCE --server URL ARGS… -- sh -c SCRIPT`, started in `dir`.
fn spawn_run(server: &Server, resource: &str, args: &[&str], script: &str, dir: &Path) -> Child {
    let mut all = vec![resource];
    all.extend(args);
    spawn_run_with(server, &all, script, dir)
}

/// `fencelock run --server URL ARGS… -- sh -c SCRIPT`, started in `dir`.
fn spawn_run_with(server: &Server, args: &[&str], script: &str, dir: &Path) -> Child {
    fencelock()
        .args(["run", "--server", &server.url])
        .args(args)
        .args(["--", "sh", "-c", script])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fencelock run")
}

fn finish(child: Child) -> common::Shown {
    common::shown(child.wait_with_output().expect("fencelock run ends"))
}

/// Kills what a test started if it fails half-way.
struct KillOnDrop(Vec<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = killpg(Pid::from_raw(*pid), Signal::SIGKILL);
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
    }
}

#[test]
fn the_child_sees_the_lease_and_its_exit_status_passes_through() {
    let server = Server::start();
    let shown = server.run(&[
        "run",
        "nightly",
        "--owner",
        "cron",
        "--",
        "sh",
        "-c",
        "echo \"$FENCELOCK_TOKEN|$FENCELOCK_RESOURCE|$FENCELOCK_EXPIRES_AT|$FENCELOCK_KIND\"; exit 7",
    ]);
    assert_eq!(shown.code, Some(7), "{shown:?}");
    let seen: Vec<&str> = shown.stdout.trim().split('|').collect();
    assert!(seen[0].parse::<u64>().unwrap() >= 1, "{seen:?}");
    assert_eq!(seen[1], "nightly");
    assert!(humantime::parse_rfc3339(seen[2]).is_ok(), "{seen:?}");
    assert_eq!(seen[3], "lock");
    // Released when the child ended.
    assert_eq!(server.lease("nightly"), None);

    for (script, code) in [
        ("exit 0", 0),
        ("kill -9 $$", 128 + 9),
        ("kill -TERM $$", 128 + 15),
    ] {
        let shown = server.run(&["run", "nightly", "--", "sh", "-c", script]);
        assert_eq!(shown.code, Some(code), "{script}: {shown:?}");
    }
    let missing = server.run(&["run", "nightly", "--", "no-such-command-here"]);
    assert_eq!(missing.code, Some(127), "{missing:?}");
    let dir = tempfile::tempdir().unwrap();
    let not_executable = dir.path().join("script");
    std::fs::write(&not_executable, "echo hi").unwrap();
    let denied = server.run(&["run", "nightly", "--", not_executable.to_str().unwrap()]);
    assert_eq!(denied.code, Some(126), "{denied:?}");
    assert_eq!(server.lease("nightly"), None);
}

#[test]
fn bad_input_and_an_unreachable_server_are_told_before_the_child_starts() {
    let nowhere = format!("http://127.0.0.1:{}", closed_port());
    let shown = run(&["run", "r", "--server", &nowhere, "--", "sh", "-c", "echo ran"]);
    assert_eq!((shown.code, shown.stdout.as_str()), (Some(3), ""), "{shown:?}");
    for args in [
        // The grace period leaves no time to renew.
        vec![
            "run", "r", "--server", &nowhere, "--ttl", "1s", "--grace", "1s", "--", "true",
        ],
        vec![
            "run",
            "r",
            "--server",
            &nowhere,
            "--no-wait",
            "--wait",
            "1s",
            "--",
            "true",
        ],
        vec!["run", "r", "--server", &nowhere],
        vec!["run", "", "--server", &nowhere, "--", "true"],
        vec![
            "run", "r", "--server", &nowhere, "--limit", "2", "--mode", "read", "--", "true",
        ],
        vec!["run", "r", "--server", &nowhere, "--limit", "0", "--", "true"],
        vec![
            "run",
            "r",
            "--server",
            &nowhere,
            "--mode",
            "exclusive",
            "--",
            "true",
        ],
    ] {
        let shown = run(&args);
        assert_eq!(shown.code, Some(2), "{args:?}: {shown:?}");
    }
}

#[test]
fn an_unknown_flag_before_the_command_is_bad_input_and_nothing_is_acquired() {
    let server = Server::start();
    let typo = server.run(&["run", "job", "--tll", "30s", "--", "sh", "-c", "echo ran"]);
    assert_eq!((typo.code, typo.stdout.as_str()), (Some(2), ""), "{typo:?}");
    assert!(typo.stderr.contains("--tll"), "{typo:?}");
    // No lease was ever granted: the first one on this fresh server gets the first token.
    let first = server.run(&["acquire", "job", "--owner", "check", "--ttl", "1s"]);
    assert_eq!(first.code, Some(0), "{first:?}");
    assert_eq!(first.json()["fencing_token"], 1, "{first:?}");
    let released = server.run(&["release", "job", "--owner", "check"]);
    assert_eq!(released.code, Some(0), "{released:?}");

    // Once the command has started, hyphens are its own, with or without `--`.
    let dashed = server.run(&["run", "job", "--ttl", "30s", "--", "echo", "-la", "--tll"]);
    assert_eq!(
        (dashed.code, dashed.stdout.as_str()),
        (Some(0), "-la --tll\n"),
        "{dashed:?}"
    );
    let bare = server.run(&["run", "job", "echo", "-la", "--ttl"]);
    assert_eq!(
        (bare.code, bare.stdout.as_str()),
        (Some(0), "-la --ttl\n"),
        "{bare:?}"
    );
}

#[test]
fn runs_work_straight_on_an_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}/locks.db", dir.path().display());
    let token = || {
        let shown = run(&[
            "run",
            "job",
            "--store",
            &store,
            "--",
            "sh",
            "-c",
            "echo $FENCELOCK_TOKEN",
        ]);
        assert_eq!(shown.code, Some(0), "{shown:?}");
        shown.stdout.trim().parse::<u64>().unwrap()
    };
    let first = token();
    assert!(token() > first);
}

#[test]
fn two_runs_never_overlap_and_the_later_ones_wait() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let script = "echo \"start $FENCELOCK_TOKEN $(date +%s%N)\" >> log; sleep 0.2; \
                  echo \"end $FENCELOCK_TOKEN $(date +%s%N)\" >> log";
    let runs: Vec<Child> = (0..4)
        .map(|i| {
            spawn_run(
                &server,
                "shared",
                &["--ttl", "3s", "--owner", &format!("w{i}")],
                script,
                dir.path(),
            )
        })
        .collect();
    let _cleanup = KillOnDrop(runs.iter().map(|c| i32::try_from(c.id()).unwrap()).collect());
    for run in runs {
        let shown = finish(run);
        assert_eq!(shown.code, Some(0), "{shown:?}");
    }
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    let mut intervals = std::collections::BTreeMap::<u64, (u128, u128)>::new();
    for line in log.lines() {
        let [what, token, ns] = line.split(' ').collect::<Vec<_>>()[..] else {
            panic!("bad line {line:?}");
        };
        let (token, ns) = (token.parse().unwrap(), ns.parse().unwrap());
        let interval = intervals.entry(token).or_default();
        match what {
            "start" => interval.0 = ns,
            _ => interval.1 = ns,
        }
    }
    assert_eq!(intervals.len(), 4, "four distinct tokens: {log}");
    // In token order, each child started after the previous one ended.
    let ordered: Vec<(u128, u128)> = intervals.values().copied().collect();
    for pair in ordered.windows(2) {
        assert!(pair[0].0 < pair[0].1, "{log}");
        assert!(pair[1].0 > pair[0].1, "runs overlapped:\n{log}");
    }
}

#[test]
fn no_wait_skips_a_busy_lock_with_exit_75() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let held = server.run(&["acquire", "cron:report", "--owner", "host-1", "--ttl", "1m"]);
    assert_eq!(held.code, Some(0));
    let started = Instant::now();
    let skipped = spawn_run(&server, "cron:report", &["--no-wait"], "touch ran", dir.path());
    let skipped = finish(skipped);
    assert_eq!(skipped.code, Some(75), "{skipped:?}");
    assert!(skipped.stderr.contains("held by host-1"), "{skipped:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let waited = finish(spawn_run(
        &server,
        "cron:report",
        &["--wait", "300ms"],
        "touch ran",
        dir.path(),
    ));
    assert_eq!(waited.code, Some(75), "{waited:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(!dir.path().join("ran").exists(), "the child ran without the lock");
}

#[test]
fn sigterm_sent_to_run_reaches_the_child() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let script = "trap 'echo TERM > got; exit 7' TERM; echo \"$$ $PPID\" > tmp; mv tmp ready; \
                  while :; do sleep 0.05; done";
    let child = spawn_run(&server, "svc", &["--ttl", "5s"], script, dir.path());
    let pid = i32::try_from(child.id()).unwrap();
    let mut cleanup = KillOnDrop(vec![pid]);
    // The child wrote its pid, which is also its process group's id, and its parent's: the
    // supervisor `run` started it under.
    let ready = wait_for_file(&dir.path().join("ready"));
    let [child_group, supervisor] = ready
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect::<Vec<i32>>()[..]
    else {
        panic!("the child wrote {ready:?}");
    };
    cleanup.0.push(child_group);
    // As a service manager stopping them all (or `pkill fencelock`) does: the supervisor
    // outlasts it, so the child ends as it chooses to, not by a SIGKILL.
    kill(Pid::from_raw(supervisor), Signal::SIGTERM).unwrap();
    kill(Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    let shown = finish(child);
    assert_eq!(shown.code, Some(7), "{shown:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("got")).unwrap().trim(),
        "TERM"
    );
    assert_eq!(server.lease("svc"), None, "released after the child ended");
}

/// A writer of the escape tests: writes its pid to `NAME.pid`, then the wall-clock time in
/// ns to `NAME.log` every 10 ms, forever. It lets go of the run's standard streams, so that
/// one left running cannot keep the test from reading the run's output to its end.
fn writer(name: &str) -> String {
    format!(
        "exec </dev/null >/dev/null 2>&1; echo $$ > {name}.tmp && mv {name}.tmp {name}.pid; \
         while :; do date +%s%N >> {name}.log; sleep 0.01; done"
    )
}

/// A bash script (for its job control) that starts three writers: `child`, a background
/// process in the child's own process group; `job`, a job-control background job (`set -m`:
/// a process group of its own); and `daemon`, in a session of its own (`setsid -f` forks,
/// so it is orphaned at once). Then, if `ends`, it waits until all three have started and
/// exits 0; otherwise it is the writer `cmd` itself. Returns it and the names of its writers.
fn escaping_child(ends: bool) -> (String, &'static [&'static str]) {
    let (then, names): (String, &[&str]) = if ends {
        (
            "until [ -e child.pid ] && [ -e job.pid ] && [ -e daemon.pid ]; do sleep 0.01; done".to_owned(),
            &["child", "job", "daemon"],
        )
    } else {
        (writer("cmd"), &["cmd", "child", "job", "daemon"])
    };
    let script = format!(
        "sh -c '{}' & set -m; sh -c '{}' & setsid -f sh -c '{}'; {then}",
        writer("child"),
        writer("job"),
        writer("daemon"),
    );
    (script, names)
}

/// The writers of an [`escaping_child`] that a run started.
struct Writers {
    names: &'static [&'static str],
    pids: Vec<i32>,
    /// Kills them all, and the run, if the test fails.
    _cleanup: KillOnDrop,
}

impl Writers {
    /// Starts `fencelock run RESOURCE --ttl TTL --owner first -- bash -c SCRIPT` of an
    /// [`escaping_child`] in `dir`, through `server`; returns the run once every writer has
    /// started, and the writers.
    fn start(server: &Server, resource: &str, ttl: &str, ends: bool, dir: &Path) -> (Child, Self) {
        let (script, names) = escaping_child(ends);
        let run = fencelock()
            .args(["run", resource, "--server", &server.url])
            .args(["--ttl", ttl, "--owner", "first", "--", "bash", "-c", &script])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fencelock run");
        let mut cleanup = KillOnDrop(vec![i32::try_from(run.id()).unwrap()]);
        let pids: Vec<i32> = names
            .iter()
            .map(|name| {
                wait_for_file(&dir.join(format!("{name}.pid")))
                    .trim()
                    .parse()
                    .unwrap()
            })
            .collect();
        cleanup.0.extend(&pids);
        let writers = Self {
            names,
            pids,
            _cleanup: cleanup,
        };
        (run, writers)
    }

    /// Asserts that no writer is still alive, after `what`.
    fn assert_gone(&self, what: &str) {
        for (name, pid) in self.names.iter().zip(&self.pids) {
            assert!(!alive(*pid), "{name} (pid {pid}) still runs after {what}");
        }
    }

    /// Asserts that no writer in `dir` is still alive now, right after the next owner's
    /// grant at `granted_at`, and that none wrote after that grant (the store's timestamps
    /// have milliseconds: a write stamped in the grant's millisecond is let pass).
    fn assert_none_outlived(&self, dir: &Path, granted_at: i64) {
        self.assert_gone("the next owner's grant");
        for name in self.names {
            let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
            let last_ms = log
                .lines()
                .filter_map(|line| line.trim().parse::<i64>().ok())
                .map(|ns| ns / 1_000_000)
                .max()
                .unwrap_or(0);
            assert!(
                last_ms <= granted_at,
                "{name} wrote {} ms after the next owner's grant",
                last_ms - granted_at
            );
        }
    }
}

/// `fencelock acquire RESOURCE --owner next` through `server`, waiting for it: the next
/// owner, whose grant nothing of the run before it may outlive.
fn spawn_next_owner(server: &Server, resource: &str) -> Child {
    fencelock()
        .args(["acquire", resource, "--server", &server.url])
        .args(["--owner", "next", "--ttl", "30s", "--wait", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fencelock acquire")
}

/// The next owner's grant, in ms since the epoch (its `acquired_at`).
fn granted_at(next_owner: Child) -> i64 {
    let shown = finish(next_owner);
    assert_eq!(shown.code, Some(0), "the next owner was not granted: {shown:?}");
    ms(&shown.json()["acquired_at"])
}

/// The parent of process `pid`, from its `/proc/PID/stat` (`pid (comm) state ppid …`).
fn parent_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, after) = stat.rsplit_once(')').unwrap();
    after.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn what_the_child_leaves_running_even_outside_its_group_is_stopped_before_the_release() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let (run, writers) = Writers::start(&server, "tidy", "3s", true, dir.path());
    let next_owner = spawn_next_owner(&server, "tidy");
    let shown = finish(run);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    // The release comes after the stop, so nothing is left once `run` has exited.
    writers.assert_gone("the run");
    writers.assert_none_outlived(dir.path(), granted_at(next_owner));
}

#[test]
fn if_the_supervisor_dies_run_kills_everything_the_child_started_and_releases() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let (run, writers) = Writers::start(&server, "orphaned", "3s", false, dir.path());
    // The child's parent is the supervisor `run` started it under.
    let supervisor = parent_of(writers.pids[0]);
    kill(Pid::from_raw(supervisor), Signal::SIGKILL).unwrap();
    let shown = finish(run);
    assert_eq!(shown.code, Some(126), "{shown:?}");
    assert!(shown.stderr.contains("supervisor died"), "{shown:?}");
    writers.assert_gone("its supervisor and the run");
    assert_eq!(server.lease("orphaned"), None, "released after the kill");
}

/// Two servers sharing one PostgreSQL: the run holds its lock through the first, the next
/// owner waits through the second.
fn two_servers_on_postgresql() -> (Server, Server) {
    let url = shared_postgres().url();
    (Server::on(&url), Server::on(&url))
}

#[test]
fn run_killed_with_sigkill_leaves_nothing_running_when_the_lease_passes_on() {
    let (first, second) = two_servers_on_postgresql();
    let dir = tempfile::tempdir().unwrap();
    let resource = format!("sigkill-{}", std::process::id());
    let (mut run, writers) = Writers::start(&first, &resource, "2s", false, dir.path());
    let next_owner = spawn_next_owner(&second, &resource);
    // Nothing in `run` gets to act: no handler, no destructor.
    run.kill().unwrap();
    run.wait().unwrap();
    writers.assert_none_outlived(dir.path(), granted_at(next_owner));
}

#[test]
fn a_lost_lease_stops_what_left_the_group_before_the_next_owner_is_granted() {
    let (first, second) = two_servers_on_postgresql();
    let dir = tempfile::tempdir().unwrap();
    let resource = format!("paused-{}", std::process::id());
    let (run, writers) = Writers::start(&first, &resource, "3s", false, dir.path());
    let next_owner = spawn_next_owner(&second, &resource);
    // The run's server stops answering: renewals fail, the lease runs out in PostgreSQL and
    // passes to the next owner through the other server.
    first.signal(Signal::SIGSTOP);
    writers.assert_none_outlived(dir.path(), granted_at(next_owner));
    first.signal(Signal::SIGCONT);
    let shown = finish(run);
    assert_eq!(shown.code, Some(124), "{shown:?}");
    // It says "stopped", and it was true: every writer was gone at the grant.
    assert!(shown.stderr.contains("stopped"), "{shown:?}");
}

#[test]
fn run_paused_past_its_ttl_has_its_child_stopped_by_the_supervisor_before_the_next_owner_is_granted() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let (run, writers) = Writers::start(&server, "frozen", "3s", false, dir.path());
    let next_owner = spawn_next_owner(&server, "frozen");
    // `run` itself stops: no renewal goes out and it cannot stop its child; the supervisor,
    // told until when the lease lasts, must.
    let pid = Pid::from_raw(i32::try_from(run.id()).unwrap());
    kill(pid, Signal::SIGSTOP).unwrap();
    writers.assert_none_outlived(dir.path(), granted_at(next_owner));
    kill(pid, Signal::SIGCONT).unwrap();
    let shown = finish(run);
    assert_eq!(shown.code, Some(124), "{shown:?}");
    assert!(shown.stderr.contains("was not renewed in time"), "{shown:?}");
}

/// How a forced loss comes about.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// The lease is deleted behind the holder's back (as an operator would, by owner).
    Deleted,
    /// The server dies (SIGKILL) and renewals fail.
    ServerKilled,
}

/// What a run holds: a lock, a permit or a hold (its flags), and its `--kind`.
#[derive(Debug, Clone, Copy)]
struct Holding {
    flags: &'static [&'static str],
    kind: &'static str,
}

const LOCK: Holding = Holding {
    flags: &[],
    kind: "lock",
};

/// The expiry of the first (or only) lease `status` shows, in ms since the epoch.
fn first_expiry(shown: &serde_json::Value) -> i64 {
    let first = match (shown.get("permits"), shown.get("holders")) {
        (Some(permits), _) => &permits[0],
        (_, Some(holders)) => &holders[0],
        _ => shown,
    };
    ms(&first["expires_at"])
}

/// One forced loss: returns how long before the lease's expiry the child and its grandchild
/// were both gone, in ms (negative: after).
fn forced_loss(server: &mut Server, i: usize, loss: Loss, ignore_term: bool, held: Holding) -> i64 {
    let dir = tempfile::tempdir().unwrap();
    let resource = format!("forced-{i}");
    // A child and a grandchild in its group; with `trap '' TERM` both ignore SIGTERM (an
    // ignored signal stays ignored across fork and exec) and only SIGKILL stops them.
    let trap = if ignore_term { "trap '' TERM; " } else { "" };
    let script = format!("{trap}sleep 1000 & echo \"$$ $!\" > pids.tmp && mv pids.tmp pids; wait");
    let owner = format!("forced-{i}");
    let mut args = vec!["--ttl", "2s", "--owner", &owner];
    args.extend(held.flags);
    let run = spawn_run(server, &resource, &args, &script, dir.path());
    let pids: Vec<i32> = wait_for_file(&dir.path().join("pids"))
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let _cleanup = KillOnDrop(vec![i32::try_from(run.id()).unwrap(), pids[0]]);
    // Land the loss at different points of the renewal cycle (every 667 ms), counted from a
    // renewal seen by the server, and at least 100 ms before the next: a renewal between the
    // read of the expiry below and the loss would move the expiry unseen, and the margin
    // would read a whole renewal short (seen in CI: -322 ms for a group gone 345 ms early).
    // On a busy machine the renewal may be seen late, and the next one land before the
    // read below: then the point is missed, and tried again at the next renewal.
    let mut tries = 0;
    let expires_at = loop {
        let before = first_expiry(&server.status(&resource, held.kind).expect("the run holds it"));
        let renewed = eventually_blocking(Duration::from_secs(5), "a renewal", || {
            let now = first_expiry(&server.status(&resource, held.kind)?);
            (now != before).then_some(now)
        });
        std::thread::sleep(Duration::from_millis(u64::try_from(i * 97 % 450).unwrap()));
        // The expiry to beat: the last one the server confirmed before the loss.
        let shown = server.status(&resource, held.kind).expect("the run holds it");
        let expires_at = first_expiry(&shown);
        if expires_at == renewed {
            break expires_at;
        }
        tries += 1;
        assert!(
            tries < 5,
            "a renewal came sooner than 667 ms after the last, five times"
        );
    };
    match loss {
        Loss::Deleted => {
            let deleted = server.run(&["release", &resource, "--owner", &owner, "--kind", held.kind]);
            assert_eq!(deleted.code, Some(0), "{deleted:?}");
        }
        Loss::ServerKilled => server.kill(),
    }
    let gone_at = eventually_blocking(Duration::from_secs(10), "the child's group to die", || {
        pids.iter().all(|pid| !alive(*pid)).then(wall_ms)
    });
    let shown = finish(run);
    assert_eq!(shown.code, Some(124), "{loss:?}: {shown:?}");
    if let Loss::ServerKilled = loss {
        *server = Server::start();
    }
    expires_at - gone_at
}

#[test]
fn a_forced_loss_stops_the_child_and_its_grandchildren_before_the_lease_expires() {
    let mut server = Server::start();
    let mut margins = Vec::new();
    for i in 0..24 {
        let loss = if i % 2 == 0 {
            Loss::Deleted
        } else {
            Loss::ServerKilled
        };
        let ignore_term = i % 4 >= 2;
        let margin = forced_loss(&mut server, i, loss, ignore_term, LOCK);
        println!(
            "forced loss {i:>2}: {loss:?}, SIGTERM {}: group gone {margin} ms before the lease's expiry",
            if ignore_term { "ignored" } else { "obeyed" }
        );
        margins.push((loss, ignore_term, margin));
    }
    let mut all: Vec<i64> = margins.iter().map(|m| m.2).collect();
    all.sort_unstable();
    let summary = |name: &str, mut values: Vec<i64>| {
        values.sort_unstable();
        println!(
            "{name}: {} forced losses, margin before expiry: min {} ms, median {} ms, max {} ms",
            values.len(),
            values[0],
            values[values.len() / 2],
            values[values.len() - 1]
        );
    };
    summary("all", all.clone());
    summary(
        "lease deleted",
        margins
            .iter()
            .filter(|m| matches!(m.0, Loss::Deleted))
            .map(|m| m.2)
            .collect(),
    );
    summary(
        "server killed",
        margins
            .iter()
            .filter(|m| matches!(m.0, Loss::ServerKilled))
            .map(|m| m.2)
            .collect(),
    );
    summary(
        "SIGTERM ignored (SIGKILL needed)",
        margins.iter().filter(|m| m.1).map(|m| m.2).collect(),
    );
    assert!(all[0] > 0, "a child outlived the lease: {margins:?}");
}

#[test]
fn a_forced_loss_of_a_permit_or_hold_stops_the_child_before_it_expires() {
    let mut server = Server::start();
    let permit = Holding {
        flags: &["--limit", "3"],
        kind: "semaphore",
    };
    let read = Holding {
        flags: &["--mode", "read"],
        kind: "rwlock",
    };
    let write = Holding {
        flags: &["--mode", "write"],
        kind: "rwlock",
    };
    for (i, (held, loss, ignore_term)) in [
        (permit, Loss::Deleted, false),
        (read, Loss::ServerKilled, false),
        (write, Loss::Deleted, true),
        (permit, Loss::ServerKilled, true),
        (read, Loss::Deleted, true),
        (write, Loss::ServerKilled, false),
    ]
    .into_iter()
    .enumerate()
    {
        let margin = forced_loss(&mut server, i, loss, ignore_term, held);
        println!(
            "forced loss {i}: {:?} {loss:?}: group gone {margin} ms before the expiry",
            held.flags
        );
        assert!(
            margin > 0,
            "{:?} {loss:?}: the child outlived it by {} ms",
            held.flags,
            -margin
        );
    }
}

/// Waits until every one of `runs` of [`UNTIL_STOP`] in `dir` has started its command, so
/// that they all run at once, and checks that each was told it holds `held` (`KIND NAME`).
/// Returns what kills them if the test fails, and their fencing tokens in order.
fn running_at_once(runs: &[Child], dir: &Path, held: &str) -> (KillOnDrop, Vec<u64>) {
    let cleanup = KillOnDrop(runs.iter().map(|c| i32::try_from(c.id()).unwrap()).collect());
    let tokens = eventually_blocking(Duration::from_secs(10), "the runs to start", || {
        let mut tokens: Vec<u64> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|entry| {
                entry
                    .ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix("started-")?
                    .parse()
                    .ok()
            })
            .collect();
        tokens.sort_unstable();
        (tokens.len() == runs.len()).then_some(tokens)
    });
    for token in &tokens {
        let seen = std::fs::read_to_string(dir.join(format!("started-{token}"))).unwrap();
        assert_eq!(seen.trim(), held);
    }
    (cleanup, tokens)
}

/// A child that says it started (with what it holds; written aside and renamed, so that a
/// `started-` file is never seen empty), then runs until the file `stop` appears, and says
/// it ended.
const UNTIL_STOP: &str = "echo \"$FENCELOCK_KIND $FENCELOCK_RESOURCE\" > tmp-$FENCELOCK_TOKEN; \
                          mv tmp-$FENCELOCK_TOKEN started-$FENCELOCK_TOKEN; \
                          while [ ! -e stop ]; do sleep 0.02; done; touch ended-$FENCELOCK_TOKEN";

#[test]
fn two_runs_share_a_semaphore_of_2_and_a_third_is_refused_or_waits() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let permit = |owner: &str, more: &[&str], script: &str| {
        let mut args = vec!["--limit", "2", "--ttl", "3s", "--owner", owner];
        args.extend(more);
        spawn_run(&server, "exports", &args, script, dir.path())
    };
    let runs = [permit("a", &[], UNTIL_STOP), permit("b", &[], UNTIL_STOP)];
    // Both run at once, each with a permit of its own.
    let (mut cleanup, tokens) = running_at_once(&runs, dir.path(), "semaphore exports");

    let refused = finish(permit("c", &["--no-wait"], "touch ran"));
    assert_eq!(refused.code, Some(75), "{refused:?}");
    assert!(refused.stderr.contains("all its 2 permits held"), "{refused:?}");
    let other_limit = finish(spawn_run(
        &server,
        "exports",
        &["--limit", "3", "--no-wait"],
        "touch ran",
        dir.path(),
    ));
    assert_eq!(other_limit.code, Some(75), "{other_limit:?}");
    assert!(other_limit.stderr.contains("limit 2"), "{other_limit:?}");

    let mut waiting = permit("d", &["--wait", "10s"], "echo $FENCELOCK_TOKEN > d");
    cleanup.0.push(i32::try_from(waiting.id()).unwrap());
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "d ran while both permits were held"
    );
    std::fs::write(dir.path().join("stop"), "").unwrap();
    for run in runs {
        let shown = finish(run);
        assert_eq!(shown.code, Some(0), "{shown:?}");
    }
    let shown = finish(waiting);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    let d: u64 = std::fs::read_to_string(dir.path().join("d"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(d > tokens[1], "{d} after {tokens:?}");
    assert!(!dir.path().join("ran").exists(), "a refused run ran its command");
    assert_eq!(
        server.status("exports", "semaphore"),
        None,
        "every permit was released"
    );
}

#[test]
fn read_runs_share_and_a_write_run_waits_until_they_are_done() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let hold = |mode: &str, more: &[&str], script: &str| {
        let mut args = vec!["--mode", mode, "--ttl", "3s"];
        args.extend(more);
        spawn_run(&server, "config", &args, script, dir.path())
    };
    let readers = [hold("read", &[], UNTIL_STOP), hold("read", &[], UNTIL_STOP)];
    let (mut cleanup, tokens) = running_at_once(&readers, dir.path(), "rwlock config");

    let refused = finish(hold("write", &["--no-wait"], "touch ran"));
    assert_eq!(refused.code, Some(75), "{refused:?}");
    assert!(refused.stderr.contains("held for read"), "{refused:?}");
    // The writer's command counts the readers that ended before it started.
    let writer = hold(
        "write",
        &["--wait", "10s"],
        "ls | grep -c '^ended-' > saw; echo $FENCELOCK_TOKEN > w",
    );
    cleanup.0.push(i32::try_from(writer.id()).unwrap());
    std::fs::write(dir.path().join("stop"), "").unwrap();
    for reader in readers {
        let shown = finish(reader);
        assert_eq!(shown.code, Some(0), "{shown:?}");
    }
    let shown = finish(writer);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    let saw = std::fs::read_to_string(dir.path().join("saw")).unwrap();
    assert_eq!(saw.trim(), "2", "the writer ran beside a reader");
    let w: u64 = std::fs::read_to_string(dir.path().join("w"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(w > tokens[1]);
    assert!(!dir.path().join("ran").exists(), "a refused run ran its command");
}

#[test]
fn run_with_several_locks_holds_them_all_while_the_child_runs_and_frees_them_after() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let script = "echo \"$FENCELOCK_COUNT $FENCELOCK_RESOURCE_1 $FENCELOCK_TOKEN_1 $FENCELOCK_RESOURCE_2 \
                  $FENCELOCK_TOKEN_2 $FENCELOCK_RESOURCE $FENCELOCK_TOKEN $FENCELOCK_KIND\" > tmp; mv tmp started; \
                  while [ ! -e stop ]; do sleep 0.02; done";
    let args = [
        "--lock", "acct:1", "--lock", "acct:2", "--owner", "mover", "--ttl", "3s",
    ];
    let run = spawn_run_with(&server, &args, script, dir.path());
    let _cleanup = KillOnDrop(vec![i32::try_from(run.id()).unwrap()]);
    let seen = wait_for_file(&dir.path().join("started"));
    let seen: Vec<&str> = seen.split_whitespace().collect();
    let [
        count,
        first,
        first_token,
        second,
        second_token,
        resource,
        token,
        kind,
    ] = seen[..]
    else {
        panic!("the child saw {seen:?}");
    };
    assert_eq!((count, first, second, kind), ("2", "acct:1", "acct:2", "lock"));
    // The unnumbered variables are the first lock's, as for a run of one lock.
    assert_eq!((resource, token), (first, first_token));
    for (name, seen_token) in [(first, first_token), (second, second_token)] {
        let lease = server.lease(name).expect("held while the child runs");
        assert_eq!(lease["owner"], "mover");
        assert_eq!(lease["fencing_token"].to_string(), seen_token, "{name}");
        let refused = server.run(&["acquire", name, "--owner", "other", "--ttl", "1s"]);
        assert_eq!(refused.code, Some(1), "{name}: {refused:?}");
    }
    // All or none: a run that needs acct:2 and a free lock is refused and takes neither.
    let other = finish(spawn_run_with(
        &server,
        &["--lock", "acct:3", "--lock", "acct:2", "--no-wait"],
        "touch ran",
        dir.path(),
    ));
    assert_eq!(other.code, Some(75), "{other:?}");
    assert!(other.stderr.contains("acct:2 is held by mover"), "{other:?}");
    assert_eq!(server.lease("acct:3"), None);
    assert!(!dir.path().join("ran").exists(), "a refused run ran its command");

    std::fs::write(dir.path().join("stop"), "").unwrap();
    let shown = finish(run);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    assert_eq!(server.lease("acct:1"), None, "released when the child ended");
    assert_eq!(server.lease("acct:2"), None, "released when the child ended");
}

#[test]
fn max_hold_stops_a_long_running_child_before_the_cap() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    // A child that would run forever: it says it started, and what stopped it.
    let script = "trap 'echo TERM > got; exit 0' TERM; echo $$ > tmp; mv tmp pid; \
                  while :; do sleep 0.05; done";
    let args = ["--ttl", "1s", "--max-hold", "2s", "--owner", "job"];
    let run = spawn_run(&server, "long-job", &args, script, dir.path());
    let _cleanup = KillOnDrop(vec![i32::try_from(run.id()).unwrap()]);
    let pid: i32 = wait_for_file(&dir.path().join("pid")).trim().parse().unwrap();
    let shown = finish(run);
    assert_eq!(shown.code, Some(124), "{shown:?}");
    assert!(shown.stderr.contains("--max-hold"), "{shown:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("got")).unwrap().trim(),
        "TERM",
        "the child was stopped"
    );
    assert!(!alive(pid), "the child outlived the run");
    assert_eq!(
        server.lease("long-job"),
        None,
        "given back after the child was stopped"
    );

    // A cap that leaves no time to stop the child is refused before anything runs.
    let short = server.run(&[
        "run",
        "j",
        "--ttl",
        "1s",
        "--max-hold",
        "150ms",
        "--",
        "touch",
        "ran",
    ]);
    assert_eq!(short.code, Some(2), "{short:?}");
    assert!(short.stderr.contains("--max-hold"), "{short:?}");
    let for_a_permit = server.run(&["run", "j", "--limit", "2", "--max-hold", "1m", "--", "true"]);
    assert_eq!(for_a_permit.code, Some(2), "{for_a_permit:?}");
}

#[test]
fn run_says_its_host_pid_and_command_in_the_lease_and_status_shows_them() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let script = "echo up > tmp; mv tmp ready; while [ ! -e stop ]; do sleep 0.05; done";
    let child = spawn_run(&server, "report", &["--meta", "job=daily"], script, dir.path());
    let pid = i32::try_from(child.id()).unwrap();
    let _cleanup = KillOnDrop(vec![pid]);
    wait_for_file(&dir.path().join("ready"));
    let lease = server.lease("report").expect("held while the command runs");
    let meta = &lease["meta"];
    assert_eq!(meta["pid"], pid, "run's own pid: {lease}");
    assert_eq!(meta["command"], format!("sh -c {script}"), "{lease}");
    assert_eq!(meta["job"], "daily");
    let host = lease["owner"].as_str().unwrap().rsplit_once(':').unwrap().0;
    assert_eq!(meta["host"], host, "{lease}");
    let status = server.run(&["status", "report"]);
    assert!(status.stdout.contains(&format!(r#""pid":{pid}"#)), "{status:?}");
    std::fs::write(dir.path().join("stop"), "").unwrap();
    assert_eq!(finish(child).code, Some(0));
}
