//! `fencelock elect` and `fencelock leader`, as a user runs them: real `fencelock serve`
//! processes, real candidates (child processes running a real CMD), real HTTP.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{Server, fencelock, wall_ms};
use fencelock_testkit::eventually_blocking;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

/// `fencelock elect NAME --candidate C --value C --ttl TTL -- bash -c CMD` in `dir`: CMD
/// writes `start C TERM MS` to `starts.log` when it starts, then the time in ms to `C.log`
/// every 20 ms until it is stopped.
fn candidate(server: &Server, name: &str, who: &str, ttl: &str, dir: &Path) -> Child {
    let cmd = format!(
        "echo \"start {who} $FENCELOCK_TERM $(date +%s%3N)\" >> starts.log; \
         while true; do date +%s%3N >> {who}.log; sleep 0.02; done"
    );
    fencelock()
        .args([
            "elect",
            name,
            "--server",
            &server.url,
            "--candidate",
            who,
            "--value",
            who,
        ])
        .args(["--ttl", ttl, "--", "bash", "-c", &cmd])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fencelock elect")
}

/// The CMD starts so far: `(candidate, term, ms)`.
fn starts(dir: &Path) -> Vec<(String, u64, i64)> {
    let log = std::fs::read_to_string(dir.join("starts.log")).unwrap_or_default();
    log.lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            (
                parts[1].to_owned(),
                parts[2].parse().unwrap(),
                parts[3].parse().unwrap(),
            )
        })
        .collect()
}

/// The last time `who`'s CMD wrote, in ms.
fn last_write(dir: &Path, who: &str) -> i64 {
    let log = std::fs::read_to_string(dir.join(format!("{who}.log"))).unwrap_or_default();
    log.lines()
        .filter_map(|l| l.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

/// The lines a child prints, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (send, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                return;
            }
        }
    });
    lines
}

fn signal(child: &Child, signal: Signal) {
    kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), signal).unwrap();
}

#[test]
fn leader_says_who_leads_with_term_and_value_or_that_nobody_does() {
    let server = Server::start();
    let vacant = server.run(&["leader", "jobs"]);
    assert_eq!(
        (vacant.code, vacant.stdout.trim()),
        (Some(1), "jobs has no leader"),
        "{vacant:?}"
    );
    let json = server.run(&["leader", "jobs", "--json"]);
    assert_eq!((json.code, json.stdout.trim()), (Some(1), "null"), "{json:?}");

    let dir = tempfile::tempdir().unwrap();
    let mut elected = candidate(&server, "jobs", "a", "30s", dir.path());
    let (who, term, _) = eventually_blocking(WAIT, "a leads and runs CMD", || {
        starts(dir.path()).first().cloned().ok_or("not yet")
    });
    assert_eq!(who, "a");
    let shown = server.run(&["leader", "jobs", "--json"]);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    let leadership = shown.json();
    assert_eq!(
        (
            &leadership["name"],
            &leadership["leader"],
            &leadership["value"],
            &leadership["term"]
        ),
        (
            &Value::from("jobs"),
            &Value::from("a"),
            &Value::from("a"),
            &Value::from(term)
        ),
        "{leadership}"
    );
    let text = server.run(&["leader", "jobs"]);
    assert!(
        text.stdout
            .starts_with(&format!("jobs is led by a (term {term}) since ")),
        "{text:?}"
    );
    // The election is not a lock of the same name.
    assert_eq!(server.run(&["status", "jobs"]).code, Some(1));

    // SIGTERM to `elect` goes to CMD; `elect` resigns and ends with CMD's status.
    signal(&elected, Signal::SIGTERM);
    let status = elected.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert_eq!(server.run(&["leader", "jobs"]).code, Some(1), "resigned");

    let bad = server.run(&["leader", "bad\u{1}name"]);
    assert_eq!(bad.code, Some(2), "{bad:?}");
    let no_cmd = server.run(&["elect", "jobs"]);
    assert_eq!(no_cmd.code, Some(2), "{no_cmd:?}");
}

#[test]
fn one_candidate_runs_cmd_at_a_time_and_a_paused_leader_is_stopped_before_the_next_starts() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let mut watch = fencelock()
        .args(["leader", "nightly", "--watch", "--json", "--server", &server.url])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let watched = lines_of(&mut watch);
    let first = watched.recv_timeout(WAIT).expect("the current state comes first");
    assert_eq!(
        serde_json::from_str::<Value>(&first).unwrap()["event"],
        "vacant",
        "{first}"
    );

    let a = candidate(&server, "nightly", "a", "3s", dir.path());
    eventually_blocking(WAIT, "a leads", || {
        (starts(dir.path()).len() == 1).then_some(()).ok_or("not yet")
    });
    let b = candidate(&server, "nightly", "b", "3s", dir.path());
    let mut candidates = [a, b];
    // Whoever leads stops (a SIGSTOP: no renewal, no stop of its own); its CMD must be gone
    // before the other's starts.
    let (leader, term, _) = starts(dir.path())[0].clone();
    let (paused, next) = if leader == "a" { (0, "b") } else { (1, "a") };
    signal(&candidates[paused], Signal::SIGSTOP);
    let (who, next_term, started) = eventually_blocking(WAIT, "the other candidate leads", || {
        starts(dir.path()).get(1).cloned().ok_or("not yet")
    });
    assert_eq!(who, next);
    assert!(next_term > term, "term {next_term} after {term}");
    let last = last_write(dir.path(), &leader);
    assert!(
        last <= started,
        "{leader} wrote {} ms after {next} started",
        last - started
    );
    assert!(wall_ms() >= started);
    signal(&candidates[paused], Signal::SIGCONT);

    // The observer saw each new leader, with a greater term each time.
    let mut terms = Vec::new();
    while terms.len() < 2 {
        let line: Value = serde_json::from_str(&watched.recv_timeout(WAIT).expect("an event")).unwrap();
        if line["event"] == "leader" {
            terms.push((
                line["data"]["owner"].as_str().unwrap().to_owned(),
                line["data"]["fencing_token"].as_u64().unwrap(),
            ));
        }
    }
    assert_eq!(terms, [(leader.clone(), term), (next.to_owned(), next_term)]);

    for candidate in &mut candidates {
        signal(candidate, Signal::SIGTERM);
        let status = candidate.wait().unwrap();
        assert_eq!(status.code(), Some(143), "{status:?}");
    }
    watch.kill().unwrap();
    watch.wait().unwrap();
}

#[test]
fn straight_on_a_store_an_election_is_led_and_never_listed_as_a_lock() {
    // A store several processes share (the embedded one belongs to one process).
    let store = fencelock_testkit::shared_postgres().url();
    let mut elected = fencelock()
        .args([
            "elect",
            "straight",
            "--store",
            &store,
            "--candidate",
            "a",
            "--value",
            "v",
        ])
        .args(["--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let shown = eventually_blocking(WAIT, "a leads", || {
        let shown = common::run(&["leader", "straight", "--store", &store, "--json"]);
        if shown.code == Some(0) {
            Ok(shown)
        } else {
            Err(format!("{shown:?}"))
        }
    });
    assert_eq!(
        (&shown.json()["leader"], &shown.json()["value"]),
        (&Value::from("a"), &Value::from("v"))
    );
    let listed = common::run(&["list", "--store", &store, "--json"]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    assert!(
        !listed.stdout.contains("straight"),
        "an election listed as a lock: {listed:?}"
    );
    signal(&elected, Signal::SIGTERM);
    assert_eq!(elected.wait().unwrap().code(), Some(143));
}
