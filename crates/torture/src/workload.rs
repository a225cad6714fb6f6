//! What the clients ask for: a few names, so that contention is real, short TTLs, and the
//! kinds of acquire in the proportions a run mixes them.

use std::time::Duration;

use crate::history::Kind;
use crate::rng::Rng;

/// Locks, semaphores and read-write locks a run uses: few, so that clients meet on them.
pub const LOCKS: u64 = 5;
pub const SEMAPHORES: u64 = 3;
pub const RWLOCKS: u64 = 3;

/// The most locks an all-or-none acquire takes.
const MOST_AT_ONCE: u64 = 3;

/// Acquires each client makes after every fault has healed, each of which must work.
pub const LIVENESS_ACQUIRES: u32 = 2;

/// How long a client's hold lasts at most, in TTLs (renewed by its guard meanwhile).
const LONGEST_HOLD_IN_TTLS: u32 = 3;

/// What a client does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A lock, held with its guard.
    Lock,
    /// Several locks, all or none.
    AllOrNone,
    /// A semaphore's permit.
    Permit,
    /// A read hold of a read-write lock.
    Read,
    /// A write hold of a read-write lock.
    Write,
    /// A read of who holds a name.
    Get,
    /// Nothing for a moment.
    Idle,
}

/// How often a client does each thing: locks most, since their writes are what fencing is
/// about.
const MIX: &[(Action, u64)] = &[
    (Action::Lock, 30),
    (Action::AllOrNone, 10),
    (Action::Permit, 14),
    (Action::Read, 12),
    (Action::Write, 14),
    (Action::Get, 12),
    (Action::Idle, 8),
];

/// The TTLs of a run: short, so that leases expire and pass to others within a fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ttls {
    /// Every TTL a client may ask for, in milliseconds.
    pub choices: Vec<u64>,
}

impl Ttls {
    /// From a comma-separated list of milliseconds.
    pub fn parse(text: &str) -> Result<Self, String> {
        let choices = text
            .split(',')
            .map(|ms| ms.trim().parse::<u64>().map_err(|e| format!("TTL {ms:?}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        if choices.is_empty() || choices.contains(&0) {
            return Err("TTLs must be at least 1 ms, and there must be one".into());
        }
        Ok(Self { choices })
    }

    /// The list, comma-separated.
    pub fn to_arg(&self) -> String {
        let each: Vec<String> = self.choices.iter().map(u64::to_string).collect();
        each.join(",")
    }

    /// The longest.
    pub fn longest(&self) -> Duration {
        Duration::from_millis(self.choices.iter().copied().max().unwrap_or(1))
    }

    /// The shortest.
    pub fn shortest(&self) -> Duration {
        Duration::from_millis(self.choices.iter().copied().min().unwrap_or(1))
    }

    /// One of them.
    pub fn pick(&self, rng: &mut Rng) -> Duration {
        Duration::from_millis(rng.pick(&self.choices).copied().unwrap_or(1))
    }
}

/// The next thing to do.
pub fn action(rng: &mut Rng) -> Action {
    rng.weighted(MIX).unwrap_or(Action::Idle)
}

/// The name of lock `i`, semaphore `i` or read-write lock `i`: distinct across kinds, so that
/// the fenced resource keeps one token order per name.
pub fn name(kind: Kind, i: u64) -> String {
    match kind {
        Kind::Lock => format!("lock-{i}"),
        Kind::Semaphore => format!("sem-{i}"),
        Kind::Rwlock => format!("rw-{i}"),
    }
}

/// A name of `kind`, at random.
pub fn pick_name(kind: Kind, rng: &mut Rng) -> (String, u64) {
    let count = match kind {
        Kind::Lock => LOCKS,
        Kind::Semaphore => SEMAPHORES,
        Kind::Rwlock => RWLOCKS,
    };
    let i = rng.below(count);
    (name(kind, i), i)
}

/// Semaphore `i`'s limit: every client asks with the same one (2 or 3).
pub fn semaphore_limit(i: u64) -> u32 {
    2 + u32::from(i % 2 == 1)
}

/// Two or three distinct locks, for an all-or-none acquire, in a random order.
pub fn pick_locks(rng: &mut Rng) -> Vec<String> {
    let wanted = rng.between(2, MOST_AT_ONCE);
    let mut picked: Vec<u64> = Vec::new();
    while (picked.len() as u64) < wanted {
        let i = rng.below(LOCKS);
        if !picked.contains(&i) {
            picked.push(i);
        }
    }
    picked.into_iter().map(|i| name(Kind::Lock, i)).collect()
}

/// How long an acquire may wait in line: none half the time, else up to two TTLs.
pub fn wait(ttl: Duration, rng: &mut Rng) -> Duration {
    if rng.percent(50) {
        Duration::ZERO
    } else {
        rng.millis(Duration::from_millis(1), ttl * 2)
    }
}

/// How long to keep what was granted: from nothing to a few TTLs.
pub fn hold(ttl: Duration, rng: &mut Rng) -> Duration {
    rng.millis(Duration::ZERO, ttl * LONGEST_HOLD_IN_TTLS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_parse_and_print() {
        let ttls = Ttls::parse("1000, 3000,2000").unwrap();
        assert_eq!(ttls.to_arg(), "1000,3000,2000");
        assert_eq!(ttls.longest(), Duration::from_secs(3));
        assert_eq!(ttls.shortest(), Duration::from_secs(1));
        assert!(Ttls::parse("0").is_err());
        assert!(Ttls::parse("x").is_err());
    }

    #[test]
    fn names_of_all_or_none_are_distinct_locks() {
        let mut rng = Rng::new(1);
        for _ in 0..100 {
            let names = pick_locks(&mut rng);
            assert!((2..=3).contains(&names.len()));
            let mut sorted = names.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), names.len());
            assert!(names.iter().all(|n| n.starts_with("lock-")));
        }
        assert_eq!(semaphore_limit(0), 2);
        assert_eq!(semaphore_limit(1), 3);
    }
}
