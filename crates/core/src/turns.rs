//! [`Turns`]: the calls that change one name take turns, one at a time, before they reach the
//! store — a [`Layer`] for the stores that change a name by compare-and-set (etcd, ZooKeeper,
//! Redlock).
//!
//! Such a store reads a name, judges the call, and writes only if the name is still as read;
//! if another call changed it meanwhile, it reads and tries again. Fifty concurrent acquires
//! of one name through one server would make forty-nine of them try again, and again, each
//! losing to the next: work thrown away, and calls that run out of time. Taking turns within
//! the server, each call finds the name as the one before it left it, and tries once; only
//! calls from *other* servers can still change a name under it (the store backs off and tries
//! again for those).
//!
//! A call waits for the calls before it on its names (first come, first served), with no
//! deadline of its own: each of them is bounded by the store's deadline on every call, so the
//! line always moves, and a caller that goes away leaves it. Reads (get, list, purge, ping)
//! take no turn: they never retry. Calls on different names never wait for each other, but
//! an acquire of several locks at once takes the turn of each, always in the same order, so
//! that two such calls never wait for each other in a circle.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::OwnedMutexGuard;

use crate::hold::Kind;
use crate::layer::{Call, Layer, Names};
use crate::model::Resource;
use crate::store::Result;

/// How many parts the lines are kept in, each behind a lock of its own, so that calls on
/// different names seldom wait for the same lock (held only to find or drop a line).
const SHARDS: usize = 32;

/// The [`Layer`] that lets one call per name at a time reach the store underneath (see the
/// module docs). Cheap when nothing waits: a call finds or makes its name's line in a map,
/// takes its turn, and drops the line on its way out if nobody else is in it.
///
/// Names are told apart by a 64-bit hash of their kind and bytes: two names with one hash
/// (about never) only take turns with each other, which costs time and nothing else.
#[derive(Debug)]
pub struct Turns {
    // Held only to find, make or drop a line, never across an `.await`.
    shards: Box<[Mutex<HashMap<u64, Line>>]>,
    hasher: RandomState,
}

/// The calls in line for one name: the one whose turn it is holds `turn`.
#[derive(Debug, Default)]
struct Line {
    /// How many calls are in this line (the one whose turn it is, and those waiting).
    calls: usize,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Turns {
    /// No lines yet.
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
        }
    }

    /// How many names have calls in line now: those whose lines are kept.
    pub fn lines(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).len()).sum()
    }

    fn name(&self, kind: Kind, name: &Resource) -> u64 {
        self.hasher.hash_one((kind, name))
    }

    fn shard(&self, name: u64) -> MutexGuard<'_, HashMap<u64, Line>> {
        // The remainder is below SHARDS, so it fits a usize.
        lock(&self.shards[(name % SHARDS as u64) as usize])
    }

    /// Waits for the turn of `name` (a hash from [`Turns::name`]).
    async fn take(&self, name: u64) -> Turn<'_> {
        let turn = {
            let mut shard = self.shard(name);
            let line = shard.entry(name).or_default();
            line.calls += 1;
            line.turn.clone()
        };
        // Made before waiting, so that a caller that goes away while it waits leaves the line.
        let mut taken = Turn {
            turns: self,
            name,
            held: None,
        };
        taken.held = Some(turn.lock_owned().await);
        taken
    }

    /// Waits for the turn of every name in `names`, one by one in the order of their hashes
    /// (every call takes them in that order, so none waits for another in a circle).
    async fn take_all(&self, mut names: Vec<u64>) -> Vec<Turn<'_>> {
        names.sort_unstable();
        // A name twice would wait for its own turn.
        names.dedup();
        let mut taken = Vec::with_capacity(names.len());
        for name in names {
            taken.push(self.take(name).await);
        }
        taken
    }

    /// One call leaves the line of `name`, which goes once nobody is in it.
    fn leave(&self, name: u64) {
        let mut shard = self.shard(name);
        if let Entry::Occupied(mut line) = shard.entry(name) {
            line.get_mut().calls -= 1;
            if line.get().calls == 0 {
                line.remove();
            }
        }
    }
}

impl Default for Turns {
    fn default() -> Self {
        Self::new()
    }
}

/// A map of lines, locked. Nothing panics while holding it, but should a caller's thread die
/// with it, the map is still whole (each change is one step), so a poisoned lock is taken as
/// it is.
fn lock(shard: &Mutex<HashMap<u64, Line>>) -> MutexGuard<'_, HashMap<u64, Line>> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A call's place in the line of one name: its turn once `held`. Dropping it (the call
/// answered, or its caller gone) passes the turn on and leaves the line.
struct Turn<'a> {
    turns: &'a Turns,
    name: u64,
    held: Option<OwnedMutexGuard<()>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // The turn first: the next in line may go as soon as this call is done.
        self.held.take();
        self.turns.leave(self.name);
    }
}

impl Layer for Turns {
    async fn around<T: Send>(
        &self,
        _call: Call,
        names: Names<'_>,
        inner: impl Future<Output = Result<T>> + Send,
    ) -> Result<T> {
        match names {
            Names::None => inner.await,
            Names::One(kind, name) => {
                let _turn = self.take(self.name(kind, name)).await;
                inner.await
            }
            Names::Locks(resources) => {
                let names = resources
                    .as_slice()
                    .iter()
                    .map(|name| self.name(Kind::Lock, name))
                    .collect();
                let _turns = self.take_all(names).await;
                inner.await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::model::Resources;

    fn resource(name: &str) -> Resource {
        Resource::new(name).unwrap()
    }

    /// Runs `calls` concurrent calls on `names`, each a little while, and returns the most
    /// that were ever inside at once.
    async fn most_at_once(turns: Arc<Turns>, calls: Vec<Names<'static>>) -> usize {
        let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let tasks: Vec<_> = calls
            .into_iter()
            .map(|names| {
                let (turns, inside, most) = (turns.clone(), inside.clone(), most.clone());
                tokio::spawn(async move {
                    let call = async {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        Ok(())
                    };
                    turns.around(Call::Acquire, names, call).await
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        most.load(Ordering::SeqCst)
    }

    fn leak<T>(value: T) -> &'static T {
        Box::leak(Box::new(value))
    }

    #[tokio::test(start_paused = true)]
    async fn calls_on_one_name_take_turns_and_leave_no_line_behind() {
        let turns = Arc::new(Turns::new());
        let name = leak(resource("a"));
        let calls = vec![Names::One(Kind::Lock, name); 20];
        assert_eq!(most_at_once(turns.clone(), calls).await, 1);
        assert_eq!(turns.lines(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn other_names_kinds_and_reads_do_not_wait() {
        let turns = Arc::new(Turns::new());
        let (a, b) = (leak(resource("a")), leak(resource("b")));
        let calls = vec![
            Names::One(Kind::Lock, a),
            Names::One(Kind::Lock, b),
            Names::One(Kind::Semaphore, a),
            Names::None,
            Names::None,
        ];
        assert_eq!(most_at_once(turns.clone(), calls).await, 5);
        assert_eq!(turns.lines(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn several_locks_take_every_turn_in_one_order() {
        let turns = Arc::new(Turns::new());
        let (a, b) = (resource("a"), resource("b"));
        let ab = leak(Resources::new(vec![a.clone(), b.clone()]).unwrap());
        let ba = leak(Resources::new(vec![b, a]).unwrap());
        let only_b = leak(resource("b"));
        // Opposite orders never wait for each other in a circle (this would hang), and none
        // runs beside another that shares a name.
        let calls = [Names::Locks(ab), Names::Locks(ba), Names::One(Kind::Lock, only_b)].repeat(10);
        assert_eq!(most_at_once(turns.clone(), calls).await, 1);
        assert_eq!(turns.lines(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_goes_away_while_waiting_leaves_the_line() {
        let turns = Turns::new();
        let name = resource("a");
        let first = turns.take(turns.name(Kind::Lock, &name)).await;
        let waiting = tokio::time::timeout(
            Duration::from_millis(5),
            turns.take(turns.name(Kind::Lock, &name)),
        )
        .await;
        assert!(waiting.is_err(), "the turn was taken");
        drop(first);
        assert_eq!(turns.lines(), 0);
        // The next caller gets its turn at once.
        let _next = turns.take(turns.name(Kind::Lock, &name)).await;
    }
}
