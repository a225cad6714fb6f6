//! [`Rng`]: the run's randomness, all of it from the seed.
//!
//! SplitMix64, written here rather than taken from a crate: a run is named by its seed, and
//! the same seed must make the same choices in every version of fencelock, which no crate
//! promises of its generators.

use std::time::Duration;

/// A seeded source of random numbers (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// The generator of `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator of its own for `stream` (a client, the nemesis), made from this one's
    /// seed without taking numbers from it: each part of a run draws its numbers apart, so
    /// that one part's choices do not shift another's.
    pub fn stream(&self, stream: u64) -> Self {
        let mut mixer = Self::new(self.state ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        Self::new(mixer.next_u64())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        // The bias of a modulo is below 2^-40 for the small `n` of a run.
        self.next_u64() % n.max(1)
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low) + 1)
    }

    /// A duration in `low..=high`, in whole milliseconds.
    pub fn millis(&mut self, low: Duration, high: Duration) -> Duration {
        let (low, high) = (as_millis(low), as_millis(high));
        Duration::from_millis(self.between(low, high))
    }

    /// True with probability `percent` in 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `choices`, each as likely (`None` if there are none).
    pub fn pick<'a, T>(&mut self, choices: &'a [T]) -> Option<&'a T> {
        let len = u64::try_from(choices.len()).ok()?;
        if len == 0 {
            return None;
        }
        choices.get(usize::try_from(self.below(len)).ok()?)
    }

    /// One of `choices`, each as likely as its weight.
    pub fn weighted<T: Copy>(&mut self, choices: &[(T, u64)]) -> Option<T> {
        let total: u64 = choices.iter().map(|(_, weight)| weight).sum();
        if total == 0 {
            return None;
        }
        let mut roll = self.below(total);
        for &(choice, weight) in choices {
            if roll < weight {
                return Some(choice);
            }
            roll -= weight;
        }
        None
    }
}

fn as_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_makes_the_same_numbers_every_time() {
        // SplitMix64's reference output for seed 1234567.
        let mut rng = Rng::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
        let (mut a, mut b) = (Rng::new(9).stream(3), Rng::new(9).stream(3));
        assert_eq!(a.next_u64(), b.next_u64());
        assert_ne!(Rng::new(9).stream(3).next_u64(), Rng::new(9).stream(4).next_u64());
    }

    #[test]
    fn choices_stay_in_range() {
        let mut rng = Rng::new(7);
        for _ in 0..1000 {
            assert!((3..=5).contains(&rng.between(3, 5)));
            assert_eq!(rng.weighted(&[("never", 0), ("always", 2)]), Some("always"));
        }
        assert_eq!(rng.pick::<u8>(&[]), None);
    }
}
