//! A request rate per principal: [`Limiter`], a token bucket kept as the time it is next
//! full (GCRA), so that each principal costs one timestamp and a request one comparison.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use fencelock_core::Principal;
use tokio::time::Instant;

/// How many requests a principal may send: `per_second` on average, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// The sustained rate.
    pub per_second: NonZeroU32,
    /// How many may come at once after a quiet spell.
    pub burst: NonZeroU32,
}

/// One bucket per principal; without authentication, every caller shares the bucket of no
/// principal. Buckets are made for authenticated principals only, so their number is bounded
/// by the principals the authentication files have named.
#[derive(Debug)]
pub struct Limiter {
    /// The time one request takes of the rate.
    interval: Duration,
    /// How far ahead of now a bucket's time may run: the burst less one request.
    tolerance: Duration,
    // Held for one lookup, never across an `.await`.
    buckets: Mutex<HashMap<Option<Principal>, Instant>>,
}

impl Limiter {
    /// Buckets of `rate`, all full.
    pub fn new(rate: RateLimit) -> Self {
        let interval = Duration::from_secs(1) / rate.per_second.get();
        Self {
            interval,
            tolerance: interval * (rate.burst.get() - 1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from `who`'s bucket at `now`; if it is empty, says how long until
    /// it has one again (and takes nothing).
    pub fn take(&self, who: Option<&Principal>, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let due = buckets.get(&who.cloned()).map_or(now, |&due| due.max(now));
        if due > now + self.tolerance {
            return Err(due - (now + self.tolerance));
        }
        buckets.insert(who.cloned(), due + self.interval);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(per_second: u32, burst: u32) -> Limiter {
        Limiter::new(RateLimit {
            per_second: NonZeroU32::new(per_second).unwrap(),
            burst: NonZeroU32::new(burst).unwrap(),
        })
    }

    #[test]
    fn a_burst_then_the_rate_and_each_principal_has_its_own_bucket() {
        let limiter = limiter(2, 3);
        let (a, b) = (Principal::new("a").unwrap(), Principal::new("b").unwrap());
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.take(Some(&a), start), Ok(()));
        }
        assert_eq!(limiter.take(Some(&a), start), Err(Duration::from_millis(500)));
        // Refused requests take nothing: the wait is the same a moment later.
        let later = start + Duration::from_millis(100);
        assert_eq!(limiter.take(Some(&a), later), Err(Duration::from_millis(400)));
        assert_eq!(limiter.take(Some(&b), start), Ok(()));
        assert_eq!(limiter.take(None, start), Ok(()));
        let refilled = start + Duration::from_millis(500);
        assert_eq!(limiter.take(Some(&a), refilled), Ok(()));
        assert!(limiter.take(Some(&a), refilled).is_err());
        // A quiet spell fills the bucket up to the burst, no more.
        let quiet = start + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(limiter.take(Some(&a), quiet), Ok(()));
        }
        assert!(limiter.take(Some(&a), quiet).is_err());
    }
}
