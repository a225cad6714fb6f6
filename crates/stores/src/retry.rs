//! [`Backoff`]: how a store that changes a name by compare-and-set (etcd, ZooKeeper) waits
//! before it tries again, when another call changed the name between its read and its write.
//!
//! Calls through one server take turns on a name before they reach the store
//! ([`fencelock_core::Turns`]), so the other call is another server's. Contention is not an
//! error: a call tries again, after a pause drawn at random from a range that doubles with
//! each try (so that racing servers spread out rather than collide again in step), for as long
//! as its deadline allows. Only a name changed under every try until then — no store answers
//! one call for that long while it serves others — gives up, and the caller is told the store
//! could not answer in time.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// The most the first pause may be; each later one may be up to twice the one before.
const FIRST: Duration = Duration::from_millis(2);

/// The most any pause may be: enough for dozens of racers to spread out, short enough that a
/// name freed is soon seen.
const LONGEST: Duration = Duration::from_millis(128);

/// The pauses of one call between its tries, until its deadline.
#[derive(Debug)]
pub(crate) struct Backoff {
    tries: u32,
    started: Instant,
    limit: Duration,
}

/// A call gave up: the name changed under every try within its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) struct GaveUp {
    tries: u32,
    limit: Duration,
}

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "other servers changed it under each of {} tries in {:?}",
            self.tries, self.limit
        )
    }
}

impl Backoff {
    /// Pauses for a call that may take `limit` in all (the store's deadline on a call).
    pub(crate) fn within(limit: Duration) -> Self {
        Self {
            tries: 1,
            started: Instant::now(),
            limit,
        }
    }

    /// Waits before the next try, or gives up if that pause would end past the deadline.
    pub(crate) async fn pause(&mut self) -> Result<(), GaveUp> {
        let most = LONGEST.min(FIRST.saturating_mul(1 << self.tries.saturating_sub(1).min(16)));
        let pause = most.mul_f64(random_fraction());
        if self.started.elapsed() + pause >= self.limit {
            return Err(GaveUp {
                tries: self.tries,
                limit: self.limit,
            });
        }
        tokio::time::sleep(pause).await;
        self.tries += 1;
        Ok(())
    }
}

/// A random number from 0 to 1. Any source will do: it only spreads racers apart.
fn random_fraction() -> f64 {
    let bits = u32::try_from(random_u64() >> 32).unwrap_or(u32::MAX);
    f64::from(bits) / f64::from(u32::MAX)
}

/// Random bits, from the system's source; without it (never seen), the clock's nanoseconds,
/// which still differ between two calls.
pub(crate) fn random_u64() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pauses_double_up_to_a_bound_and_give_up_at_the_deadline() {
        let limit = Duration::from_secs(2);
        let mut backoff = Backoff::within(limit);
        let mut longest = Vec::new();
        loop {
            let before = Instant::now();
            match backoff.pause().await {
                Ok(()) => longest.push(before.elapsed()),
                Err(gave_up) => {
                    assert_eq!(gave_up.limit, limit);
                    assert_eq!(gave_up.tries as usize, longest.len() + 1);
                    break;
                }
            }
        }
        // Each pause is at most its bound: 2, 4, 8 … ms, then 128 ms.
        for (n, pause) in longest.iter().enumerate() {
            let bound = LONGEST.min(FIRST * 2_u32.pow(n.min(16) as u32));
            assert!(*pause <= bound, "pause {n} was {pause:?}, over {bound:?}");
        }
        // It tried for as long as the deadline allowed, and not past it.
        let spent = backoff.started.elapsed();
        assert!(spent < limit && spent + LONGEST >= limit, "{spent:?}");
        assert!(longest.len() >= 15, "only {} pauses in {limit:?}", longest.len());
    }
}
