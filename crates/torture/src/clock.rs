//! Readings of the host's monotonic clock as [`Mono`], in every process of a run, and the
//! conversion of the [`Instant`]s the client library gives.

use std::time::{Duration, Instant};

use nix::time::{ClockId, clock_gettime};

use crate::history::Mono;

impl Mono {
    /// `CLOCK_MONOTONIC` now: the same clock in every process of the host, which no step of a
    /// wall clock moves (libfaketime is told to leave it alone).
    pub fn now() -> Self {
        // CLOCK_MONOTONIC exists on every Linux, and a valid clock id is the only way
        // clock_gettime can fail.
        let now = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is readable");
        let seconds = u64::try_from(now.tv_sec()).unwrap_or(0);
        let nanos = u64::try_from(now.tv_nsec()).unwrap_or(0);
        Self(seconds * 1_000_000_000 + nanos)
    }

    /// This reading plus `duration`.
    pub fn plus(self, duration: Duration) -> Self {
        Self(
            self.0
                .saturating_add(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// How long after `earlier` this reading is (zero if it is not after it).
    pub fn since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// One [`Instant`] and the [`Mono`] read right after it, to place other instants of this
/// process on the run's clock. An `Instant` is `CLOCK_MONOTONIC` on Linux too, but keeps its
/// value to itself; the two readings differ by the nanoseconds between them.
#[derive(Debug, Clone, Copy)]
pub struct Anchor {
    instant: Instant,
    mono: Mono,
}

impl Anchor {
    /// Both clocks, now.
    pub fn now() -> Self {
        let instant = Instant::now();
        Self {
            instant,
            mono: Mono::now(),
        }
    }

    /// `instant` on the run's clock.
    pub fn mono(&self, instant: Instant) -> Mono {
        match instant.checked_duration_since(self.instant) {
            Some(after) => self.mono.plus(after),
            None => Mono(
                self.mono
                    .0
                    .saturating_sub(u64::try_from((self.instant - instant).as_nanos()).unwrap_or(u64::MAX)),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_land_where_the_monotonic_clock_reads_them() {
        let anchor = Anchor::now();
        let before = Mono::now();
        let instant = Instant::now();
        let after = Mono::now();
        let placed = anchor.mono(instant);
        // The anchor's two readings are apart by a few microseconds at most.
        let slack = Duration::from_millis(5);
        assert!(
            placed >= Mono(before.0.saturating_sub(slack.as_nanos() as u64)),
            "{placed:?} {before:?}"
        );
        assert!(placed <= after.plus(slack), "{placed:?} {after:?}");
        let earlier = instant - Duration::from_secs(1);
        assert_eq!(anchor.mono(earlier), Mono(placed.0 - 1_000_000_000));
    }
}
