//! The processes CMD started, found by their parents: every process whose chain of parents
//! in `/proc` leads to a given one, whatever process group or session it moved to.
//!
//! Both the supervisor and `fencelock run` are child subreapers, so that a process whose
//! parent dies is handed to the nearest of them instead of to init: the chain of parents of
//! every process CMD started keeps leading to the supervisor (or, if the supervisor dies, to
//! `run`), and a subreaper with no child left has no descendant left either.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpid};

/// The first pause between two rounds of [`kill_every_descendant`]; it doubles up to
/// [`LONGEST_PAUSE`] while something is left (a process stuck in the kernel dies only when
/// it leaves it).
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const LONGEST_PAUSE: Duration = Duration::from_millis(50);

/// Makes this process a child subreaper: a descendant whose parent dies becomes its child.
#[cfg(target_os = "linux")]
pub fn become_subreaper() -> Result<(), Errno> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// Elsewhere there are no child subreapers: an orphan goes to init, out of reach.
#[cfg(not(target_os = "linux"))]
pub fn become_subreaper() -> Result<(), Errno> {
    Err(Errno::ENOSYS)
}

/// Sends `signal` to every live descendant of this process; returns how many there were.
pub fn signal_descendants(signal: Signal) -> usize {
    let descendants = live_descendants(getpid());
    for pid in &descendants {
        // One that ended since /proc was read is fine.
        let _ = kill(*pid, signal);
    }
    descendants.len()
}

/// What [`kill_every_descendant`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Killed {
    /// How many live processes got SIGKILL.
    pub count: usize,
    /// Whether none is left (this process has no child any more).
    pub all_gone: bool,
}

/// For a subreaper: sends SIGKILL to every live descendant, round after round (a process
/// may fork between a reading of /proc and the signal; its child is caught in the next
/// round), and reaps them, until this process has no child left or `deadline` passes.
pub fn kill_every_descendant(deadline: Option<Instant>) -> Killed {
    let mut killed = HashSet::new();
    let mut pause = FIRST_PAUSE;
    loop {
        for pid in live_descendants(getpid()) {
            if kill(pid, Signal::SIGKILL).is_ok() {
                killed.insert(pid);
            }
        }
        let all_gone = reap_all();
        if all_gone || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Killed {
                count: killed.len(),
                all_gone,
            };
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// Reaps every child that has ended; whether no child is left at all.
fn reap_all() -> bool {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(Errno::ECHILD) => return true,
            // waitpid fails otherwise only for flags it does not know.
            Err(_) => return false,
        }
    }
}

/// One process, as far as its `/proc/PID/stat` is read here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    pid: i32,
    ppid: i32,
    /// Not a zombie: a zombie runs no more code, though it is listed until it is reaped.
    alive: bool,
}

/// The live processes whose chain of parents leads to `root` (`root` not included).
fn live_descendants(root: Pid) -> Vec<Pid> {
    let processes = processes();
    let parents: HashMap<i32, i32> = processes.iter().map(|p| (p.pid, p.ppid)).collect();
    processes
        .iter()
        .filter(|p| p.alive && descends_from(p.pid, root.as_raw(), &parents))
        .map(|p| Pid::from_raw(p.pid))
        .collect()
}

/// Whether `root` is among the ancestors of `pid`. /proc is not read at one instant, so a
/// pid reused during the reading could make a loop: the walk is bounded.
fn descends_from(pid: i32, root: i32, parents: &HashMap<i32, i32>) -> bool {
    let mut at = pid;
    for _ in 0..parents.len() {
        match parents.get(&at) {
            Some(&parent) if parent == root => return true,
            Some(&parent) if parent > 0 => at = parent,
            _ => return false,
        }
    }
    false
}

/// Every process /proc lists now.
fn processes() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter_map(|stat| parse_stat(&stat))
        .collect()
}

/// Reads `/proc/PID/stat` (`pid (comm) state ppid …`; `comm` may hold spaces and
/// parentheses, so the fields after it are counted from the last `)`).
fn parse_stat(stat: &str) -> Option<Stat> {
    let (pid, _) = stat.split_once(' ')?;
    let (_, after) = stat.rsplit_once(')')?;
    let mut fields = after.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(Stat {
        pid: pid.parse().ok()?,
        ppid,
        alive: !matches!(state, "Z" | "X" | "x"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_from_the_last_parenthesis() {
        let stat = |pid, ppid, alive| Some(Stat { pid, ppid, alive });
        assert_eq!(parse_stat("43 (sh) S 42 42 42 0 -1"), stat(43, 42, true));
        assert_eq!(parse_stat("44 (a (weird) name) R 1 42 42 0"), stat(44, 1, true));
        assert_eq!(parse_stat("45 (sleep) Z 7 42 42 0"), stat(45, 7, false));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("46 (x) S"), None);
    }

    #[test]
    fn descendants_are_found_through_every_generation_and_a_loop_ends() {
        // 10 → 11 → 12 → 13, and 20 beside them; 30 ↔ 31 is a loop a racy reading could show.
        let parents = HashMap::from([(11, 10), (12, 11), (13, 12), (20, 1), (30, 31), (31, 30)]);
        assert!(descends_from(13, 10, &parents));
        assert!(descends_from(11, 10, &parents));
        assert!(!descends_from(20, 10, &parents));
        assert!(!descends_from(10, 10, &parents));
        assert!(!descends_from(30, 10, &parents));
    }
}
