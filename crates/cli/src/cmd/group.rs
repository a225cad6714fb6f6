//! A child's process group, for `fencelock run`: signals reach every process CMD started,
//! and the group can be stopped and known to be gone.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::time::{Instant, sleep};

/// How often a stopping group is looked at: a group sends no notice when its last process
/// dies, so it is polled, briefly, only while it is being stopped.
const POLL: Duration = Duration::from_millis(1);

/// How long to wait for the group to die after SIGKILL before giving up (a process stuck in
/// the kernel cannot be killed until it leaves it).
const AFTER_SIGKILL: Duration = Duration::from_secs(10);

/// The process group of a child started with `process_group(0)`: its id is the child's pid.
#[derive(Debug, Clone, Copy)]
pub struct Group(Pid);

impl Group {
    /// The group led by the process `pid`.
    pub fn led_by(pid: u32) -> Option<Self> {
        i32::try_from(pid).ok().map(|pid| Self(Pid::from_raw(pid)))
    }

    /// Sends `signal` to every process of the group. A group that is already gone is fine.
    pub fn signal(self, signal: Signal) {
        match killpg(self.0, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(error) => tracing::warn!(%error, ?signal, "cannot signal the process group of CMD"),
        }
    }

    /// Whether any process of the group is still alive. A zombie is dead (it runs no more
    /// code) even though the kernel still counts it in the group until it is reaped.
    pub fn alive(self) -> bool {
        match killpg(self.0, None) {
            Err(Errno::ESRCH) => false,
            _ => has_live_member(self.0),
        }
    }

    /// Stops the whole group: SIGTERM now, SIGKILL at `kill_at` to whatever is left, and
    /// returns once no process of it is alive (with CMD reaped). Returns whether it had to
    /// use SIGKILL.
    pub async fn stop(self, child: &mut Child, kill_at: Instant) -> bool {
        self.signal(Signal::SIGTERM);
        if self.wait_gone(child, kill_at).await {
            return false;
        }
        self.signal(Signal::SIGKILL);
        if !self.wait_gone(child, Instant::now() + AFTER_SIGKILL).await {
            tracing::error!("CMD's process group is still alive {AFTER_SIGKILL:?} after SIGKILL");
        }
        true
    }

    /// Waits until the group is gone (true) or `deadline` passes (false).
    async fn wait_gone(self, child: &mut Child, deadline: Instant) -> bool {
        loop {
            // Reaping CMD as soon as it ends keeps it from counting as a member.
            let _ = child.try_wait();
            if !self.alive() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            sleep(POLL.min(deadline - Instant::now())).await;
        }
    }
}

/// Whether a process of group `pgid` is alive (not a zombie), by reading `/proc`.
#[cfg(target_os = "linux")]
fn has_live_member(pgid: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
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
        .any(|stat| live_member_of(&stat, pgid))
}

/// Elsewhere the kernel's count is all there is: zombies count as alive.
#[cfg(not(target_os = "linux"))]
fn has_live_member(_pgid: Pid) -> bool {
    true
}

/// Reads `/proc/PID/stat` (`pid (comm) state ppid pgrp …`; `comm` may hold spaces and
/// parentheses, so fields are counted from the last `)`).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn live_member_of(stat: &str, pgid: Pid) -> bool {
    let Some((_, after)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = after.split_whitespace();
    let state = fields.next();
    let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
    pgrp == Some(pgid.as_raw()) && !matches!(state, Some("Z" | "X" | "x"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_from_the_last_parenthesis() {
        let pgid = Pid::from_raw(42);
        assert!(live_member_of("43 (sh) S 42 42 42 0 -1", pgid));
        assert!(live_member_of("44 (a (weird) name) R 1 42 42 0", pgid));
        assert!(!live_member_of("45 (sleep) Z 1 42 42 0", pgid));
        assert!(!live_member_of("46 (sleep) S 1 7 7 0", pgid));
        assert!(!live_member_of("garbage", pgid));
    }
}
