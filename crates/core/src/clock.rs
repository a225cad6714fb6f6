//! Time, injected: stores read the time through a [`Clock`] so tests can move it by hand.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::model::Timestamp;

/// The clock a store decides expiry by.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The time now. Never goes backwards for one clock.
    fn now(&self) -> Timestamp;
}

/// Wall-clock time that a jump of the system clock cannot move.
///
/// It reads the system's wall clock once, when it is made, and from then on adds the time
/// elapsed on the monotonic clock. A live lease is therefore neither expired nor prolonged
/// when someone sets the system clock while the server runs; after a restart the clock is
/// anchored afresh, so persisted expiries are honoured against the wall clock of that time.
#[derive(Debug)]
pub struct SystemClock {
    anchor_wall: Timestamp,
    anchor: Instant,
}

impl SystemClock {
    /// A clock anchored to the system's wall clock now.
    pub fn new() -> Self {
        Self {
            anchor_wall: Timestamp::now_wall(),
            anchor: Instant::now(),
        }
    }
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
}

/// A clock that only moves when told to: for tests of expiry without sleeping.
#[derive(Debug)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self(AtomicU64::new(start.as_millis()))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.0.load(Ordering::SeqCst))
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
    }
}
