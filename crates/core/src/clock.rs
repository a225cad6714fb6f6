//! Time, injected: stores read the time through a [`Clock`] so tests can move it by hand.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::model::Timestamp;

/// The clock a store decides expiry by.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The time now. Never goes backwards for one clock.
    fn now(&self) -> Timestamp;

    /// How long the host has been up, read now, and which boot of it this is; `None` where
    /// the clock cannot tell. A store that must count the time it was stopped compares two
    /// readings of one boot (see [`Uptime`]).
    fn uptime(&self) -> Option<Uptime>;
}

/// The time since the host booted, counted across suspends and moved by no step of the wall
/// clock (Linux's `CLOCK_BOOTTIME`), and the boot it counts from (Linux's
/// `/proc/sys/kernel/random/boot_id`): the difference of two readings of one boot is the real
/// time between them, whatever the wall clock did meanwhile. Readings of different boots
/// cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uptime {
    /// Which boot of the host: another after every reboot.
    pub boot: String,
    /// The time since that boot began.
    pub since_boot: Duration,
}

/// Wall-clock time that a jump of the system clock cannot move.
///
/// It reads the system's wall clock once, when it is made, and from then on adds the time
/// elapsed on the monotonic clock. A live lease is therefore neither expired nor prolonged
/// when someone sets the system clock while the server runs; after a restart the clock is
/// anchored afresh (a store that keeps its own time across restarts, as the embedded one
/// does, counts the time it was stopped with [`Clock::uptime`]).
#[derive(Debug)]
pub struct SystemClock {
    anchor_wall: Timestamp,
    anchor: Instant,
    /// This boot of the host, read once: it cannot change while the process runs.
    boot: Option<String>,
}

impl SystemClock {
    /// A clock anchored to the system's wall clock now.
    pub fn new() -> Self {
        Self {
            anchor_wall: Timestamp::now_wall(),
            anchor: Instant::now(),
            boot: boot_id(),
        }
    }
}

/// This boot of the host, where the system says (Linux).
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned()).filter(|id| !id.is_empty())
}

/// The time since the host booted, suspends included (Linux).
#[cfg(target_os = "linux")]
fn since_boot() -> Option<Duration> {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_BOOTTIME).ok().map(Duration::from)
}

#[cfg(not(target_os = "linux"))]
fn since_boot() -> Option<Duration> {
    None
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let elapsed = u64::try_from(self.anchor.elapsed().as_millis()).unwrap_or(u64::MAX);
        Timestamp::from_millis(self.anchor_wall.as_millis().saturating_add(elapsed))
    }

    fn uptime(&self) -> Option<Uptime> {
        Some(Uptime {
            boot: self.boot.clone()?,
            since_boot: since_boot()?,
        })
    }
}

/// A clock that follows Tokio's time: under `tokio::time::pause()` it moves only as the
/// runtime's timers do (`tokio::time::advance`, or sleeps that the paused runtime skips), so
/// a test of expiry, waiting and renewal sees the store's clock and its timers agree without
/// sleeping for real. Outside paused time it is the monotonic clock from `start`.
#[derive(Debug)]
pub struct TokioClock {
    start: Timestamp,
    anchor: tokio::time::Instant,
}

impl TokioClock {
    /// A clock standing at `start` now, moving with Tokio's time.
    pub fn new(start: Timestamp) -> Self {
        Self {
            start,
            anchor: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = u64::try_from(self.anchor.elapsed().as_millis()).unwrap_or(u64::MAX);
        Timestamp::from_millis(self.start.as_millis().saturating_add(elapsed))
    }

    /// Tokio's time is no host's: it cannot tell.
    fn uptime(&self) -> Option<Uptime> {
        None
    }
}

/// A clock that only moves when told to: for tests of expiry without sleeping.
#[derive(Debug)]
pub struct ManualClock {
    start: u64,
    now: AtomicU64,
    /// The boot it tells, and its uptime at `start`, if it tells one.
    boot: Option<Uptime>,
}

impl ManualClock {
    /// A clock standing at `start`, of no boot ([`Clock::uptime`] is `None`).
    pub fn new(start: Timestamp) -> Self {
        Self {
            start: start.as_millis(),
            now: AtomicU64::new(start.as_millis()),
            boot: None,
        }
    }

    /// This clock, telling the host up for `since_boot` of its boot `boot` at its start, and
    /// up for as much longer as the clock moves from there.
    pub fn in_boot(self, boot: &str, since_boot: Duration) -> Self {
        Self {
            boot: Some(Uptime {
                boot: boot.to_owned(),
                since_boot,
            }),
            ..self
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.now.load(Ordering::SeqCst))
    }

    fn uptime(&self) -> Option<Uptime> {
        let at_start = self.boot.as_ref()?;
        let moved = self.now.load(Ordering::SeqCst).saturating_sub(self.start);
        Some(Uptime {
            boot: at_start.boot.clone(),
            since_boot: at_start.since_boot + Duration::from_millis(moved),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_starts_at_the_wall_clock_and_never_goes_back() {
        let clock = SystemClock::new();
        let wall = Timestamp::now_wall();
        let first = clock.now();
        assert!(wall.since(first) < Duration::from_secs(1) && first.since(wall) < Duration::from_secs(1));
        assert!(clock.now() >= first);
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_moves_with_paused_time() {
        let clock = TokioClock::new(Timestamp::from_millis(5));
        assert_eq!(clock.now(), Timestamp::from_millis(5));
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(clock.now(), Timestamp::from_millis(3_600_005));
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp::from_millis(5));
        assert_eq!(clock.now(), Timestamp::from_millis(5));
        clock.advance(Duration::from_millis(10));
        assert_eq!(clock.now(), Timestamp::from_millis(15));
        assert_eq!(clock.uptime(), None);
    }

    #[test]
    fn a_manual_clock_in_a_boot_is_up_for_as_long_as_it_moves() {
        let clock = ManualClock::new(Timestamp::from_millis(5)).in_boot("b", Duration::from_secs(60));
        clock.advance(Duration::from_millis(10));
        let uptime = clock.uptime().unwrap();
        assert_eq!(uptime.boot, "b");
        assert_eq!(uptime.since_boot, Duration::from_millis(60_010));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_system_clock_tells_this_boot_and_its_uptime_going_forward() {
        let clock = SystemClock::new();
        let first = clock.uptime().expect("Linux tells the boot and the uptime");
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        assert_eq!(first.boot, id.trim());
        let second = clock.uptime().unwrap();
        assert!(second.since_boot >= first.since_boot);
    }
}
