//! [`WaitGraph`]: who waits for whom among the waiters of one [`crate::Waiters`], to find a
//! circle of owners that wait for each other before they all wait in vain.
//!
//! A waiter waits for names (one, or several for an all-or-none acquire); each name is held
//! by owners, as the last try on it found them. Owner `a` waits for owner `b` when a waiter
//! of `a` waits for a name `b` holds. A cycle `a → b → … → a` never resolves by itself: each
//! owner keeps what the next one waits for until its lease runs out. The youngest waiter on
//! the cycle (the one whose wait closed it) is told to give up, as a database picks the
//! victim of a deadlock.
//!
//! What a try found goes stale: an owner found holding a name may release it and ask for it
//! again, and then wait for it like anyone else. So an owner's word of holding a name is
//! doubted once that owner has a waiter for the name that joined after the try read the store
//! (a reader waiting to upgrade does hold it; one that released and asked again does not). A
//! cycle is refused only on words not in doubt; a wait that would close a cycle only through
//! doubted words has the store read again for those names ([`WaitGraph::join`] says which),
//! and the cycle, if it is still there, is refused then.
//!
//! What this does not see: waiters of other servers sharing the store, and owners that hold
//! a name while they do something else than wait here. A server only knows its own waiters;
//! a global graph would need every server to publish who waits for what at every wait, which
//! no store here offers cheaply. A cycle across servers still ends when the first wait runs
//! out (`wait_ms` is bounded) or a lease expires.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use crate::hold::{Key, Kind};
use crate::model::Owner;

/// The waiters of one [`crate::Waiters`] and the holders of what they wait for.
#[derive(Debug, Default)]
pub(crate) struct WaitGraph {
    waiters: HashMap<u64, Waiter>,
    /// The owners holding each name waited for, as the last try on it found them.
    holders: HashMap<Key, Seen>,
    /// Waiters told to give up, with the cycle they were on.
    victims: HashMap<u64, String>,
}

#[derive(Debug)]
struct Waiter {
    owner: Owner,
    keys: Vec<Key>,
}

/// Which words of holding a cycle may rest on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trust {
    /// Only those not in doubt: a cycle to refuse.
    Sure,
    /// Those in doubt too: a cycle worth reading the store again for.
    Doubted,
}

/// Who a try found holding a name.
#[derive(Debug)]
struct Seen {
    owners: Vec<Owner>,
    /// The first waiter id not yet given out when the try read the store: a waiter from this
    /// one on asked after it.
    since: u64,
}

/// One step of a cycle: an owner waits for a name held by the next owner.
struct Step<'a> {
    waiter: u64,
    key: &'a Key,
    holder: &'a Owner,
}

impl WaitGraph {
    /// Records that waiter `id` of `owner` waits for `keys`. If that closes a cycle, the
    /// waiter is not recorded and the cycle is returned, for its refusal. If it would close
    /// one only through words in doubt, the names whose holders must be read again (and
    /// [`observed`](Self::observe)) to tell; none otherwise.
    pub(crate) fn join(&mut self, id: u64, owner: &Owner, keys: &[Key]) -> Result<Vec<Key>, String> {
        self.waiters.insert(
            id,
            Waiter {
                owner: owner.clone(),
                keys: keys.to_vec(),
            },
        );
        // Found holding what it asks for: it let go of a lock or a semaphore's permit (asking
        // for one it holds would not wait); of a read-write lock it may hold a read and wait
        // to upgrade, which only the store can tell.
        let mut again = Vec::new();
        for key in keys {
            if let Some(seen) = self.holders.get_mut(key)
                && seen.owners.contains(owner)
            {
                if key.kind == Kind::RwLock {
                    again.push(key.clone());
                } else {
                    seen.owners.retain(|holder| holder != owner);
                }
            }
        }
        if let Some(cycle) = self.cycle_through(id) {
            self.leave(id);
            return Err(cycle);
        }
        if let Some(path) = self.path_back(id, Trust::Doubted) {
            let doubted = path.iter().filter(|step| self.doubted(step.key, step.holder));
            again.extend(doubted.map(|step| step.key.clone()));
        }
        again.sort_unstable();
        again.dedup();
        Ok(again)
    }

    /// Records who holds `key` now — a try on it found them (none: it is free), reading the
    /// store when `since` was the first waiter id not yet given out — and returns the
    /// waiters this newly puts on a cycle, now told to give up: one per cycle, the youngest.
    pub(crate) fn observe(&mut self, key: &Key, holders: Vec<Owner>, since: u64) -> Vec<u64> {
        if !self.waiters.values().any(|w| w.keys.contains(key)) {
            self.holders.remove(key);
            return Vec::new();
        }
        let seen = Seen {
            owners: holders,
            since,
        };
        self.holders.insert(key.clone(), seen);
        let mut on_key: Vec<u64> = self
            .waiters
            .iter()
            .filter(|(_, w)| w.keys.contains(key))
            .map(|(id, _)| *id)
            .collect();
        on_key.sort_unstable();
        let mut told = Vec::new();
        for id in on_key {
            if self.victims.contains_key(&id) {
                continue;
            }
            if let Some((victim, cycle)) = self.cycle_with_victim(id) {
                self.victims.insert(victim, cycle);
                told.push(victim);
            }
        }
        told
    }

    /// The cycle waiter `id` was told to give up for, if it was.
    pub(crate) fn verdict(&mut self, id: u64) -> Option<String> {
        self.victims.remove(&id)
    }

    /// Forgets waiter `id` (granted, gave up, or gone), and the holders of names nobody
    /// waits for any more.
    pub(crate) fn leave(&mut self, id: u64) {
        self.victims.remove(&id);
        let Some(waiter) = self.waiters.remove(&id) else {
            return;
        };
        for key in waiter.keys {
            if !self.waiters.values().any(|w| w.keys.contains(&key)) {
                self.holders.remove(&key);
            }
        }
    }

    /// Whether `holder`'s word of holding `key` is in doubt: it has a waiter for `key` that
    /// asked after the try that found it holding read the store.
    fn doubted(&self, key: &Key, holder: &Owner) -> bool {
        let Some(seen) = self.holders.get(key) else {
            return false;
        };
        self.waiters
            .iter()
            .any(|(id, w)| *id >= seen.since && w.owner == *holder && w.keys.contains(key))
    }

    /// A cycle through waiter `id` on words not in doubt, written out, if there is one.
    fn cycle_through(&self, id: u64) -> Option<String> {
        self.path_back(id, Trust::Sure).map(|path| self.describe(&path))
    }

    /// A cycle through waiter `id` on words not in doubt, with its youngest waiter.
    fn cycle_with_victim(&self, id: u64) -> Option<(u64, String)> {
        let mut path = self.path_back(id, Trust::Sure)?;
        let (at, victim) = path
            .iter()
            .map(|step| step.waiter)
            .enumerate()
            .max_by_key(|(_, id)| *id)?;
        // Told from the victim's side: its wait first, as when its join closes the cycle.
        path.rotate_left(at);
        Some((victim, self.describe(&path)))
    }

    /// The steps from waiter `start` back to its own owner, if they exist (depth first; a
    /// waiter already told to give up is on its way out and leads nowhere).
    fn path_back(&self, start: u64, trust: Trust) -> Option<Vec<Step<'_>>> {
        let target = &self.waiters.get(&start)?.owner;
        let mut path = Vec::new();
        let mut seen = HashSet::from([start]);
        self.search(start, target, trust, &mut path, &mut seen)
            .then_some(path)
    }

    fn search<'a>(
        &'a self,
        at: u64,
        target: &Owner,
        trust: Trust,
        path: &mut Vec<Step<'a>>,
        seen: &mut HashSet<u64>,
    ) -> bool {
        let Some(waiter) = self.waiters.get(&at) else {
            return false;
        };
        for key in &waiter.keys {
            let holders = self.holders.get(key).map(|seen| &seen.owners);
            for holder in holders.into_iter().flatten() {
                if *holder == waiter.owner || (trust == Trust::Sure && self.doubted(key, holder)) {
                    continue;
                }
                path.push(Step {
                    waiter: at,
                    key,
                    holder,
                });
                if holder == target {
                    return true;
                }
                let mut next: Vec<u64> = self
                    .waiters
                    .iter()
                    .filter(|(id, w)| w.owner == *holder && !self.victims.contains_key(id))
                    .map(|(id, _)| *id)
                    .collect();
                next.sort_unstable();
                for id in next {
                    if seen.insert(id) && self.search(id, target, trust, path, seen) {
                        return true;
                    }
                }
                path.pop();
            }
        }
        false
    }

    /// `a waits for lock "x" held by b; b waits for rwlock "y" held by a`.
    fn describe(&self, path: &[Step<'_>]) -> String {
        let mut text = String::new();
        for (i, step) in path.iter().enumerate() {
            let owner = self.waiters.get(&step.waiter).map_or("?", |w| w.owner.as_str());
            if i > 0 {
                text.push_str("; ");
            }
            let _ = write!(
                text,
                "{owner} waits for {} {:?} held by {}",
                step.key.kind,
                step.key.name.as_str(),
                step.holder
            );
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::HoldKind;
    use crate::model::Resource;

    /// A try that read the store after every join of the test.
    const FRESH: u64 = u64::MAX;

    fn o(name: &str) -> Owner {
        Owner::new(name).unwrap()
    }

    fn lock(name: &str) -> Key {
        Key::lock(&Resource::new(name).unwrap())
    }

    #[test]
    fn the_wait_that_closes_a_cycle_of_two_is_refused_with_the_cycle() {
        let mut graph = WaitGraph::default();
        graph.join(1, &o("a"), &[lock("y")]).unwrap();
        assert!(
            graph.observe(&lock("y"), vec![o("b")], FRESH).is_empty(),
            "b does not wait"
        );
        graph.join(2, &o("c"), &[lock("x")]).unwrap();
        assert!(
            graph.observe(&lock("x"), vec![o("a")], FRESH).is_empty(),
            "c holds nothing a wants"
        );
        let cycle = graph.join(3, &o("b"), &[lock("x")]).unwrap_err();
        assert_eq!(
            cycle,
            r#"b waits for lock "x" held by a; a waits for lock "y" held by b"#
        );
        // The refused waiter is not in the graph: a waits on without a cycle.
        assert!(graph.observe(&lock("y"), vec![o("b")], FRESH).is_empty());
    }

    #[test]
    fn a_cycle_of_three_across_kinds_is_found_and_its_youngest_waiter_told() {
        let mut graph = WaitGraph::default();
        let rw = Key::hold(HoldKind::RwLock, &Resource::new("z").unwrap());
        graph.join(1, &o("a"), &[lock("x")]).unwrap();
        graph.join(2, &o("b"), std::slice::from_ref(&rw)).unwrap();
        graph.join(3, &o("c"), &[lock("w")]).unwrap();
        assert!(graph.observe(&lock("x"), vec![o("b")], FRESH).is_empty());
        assert!(graph.observe(&lock("w"), vec![o("a")], FRESH).is_empty());
        // The last link is learnt by a try, not at a join: the youngest waiter is told.
        assert_eq!(graph.observe(&rw, vec![o("c")], FRESH), [3]);
        let cycle = graph.verdict(3).unwrap();
        assert_eq!(
            cycle,
            r#"c waits for lock "w" held by a; a waits for lock "x" held by b; b waits for rwlock "z" held by c"#
        );
        assert_eq!(graph.verdict(3), None, "told once");
    }

    #[test]
    fn owners_found_holding_a_lock_before_they_asked_for_it_again_let_go_of_it() {
        let mut graph = WaitGraph::default();
        // c's try found a and b holding x (waiter 2 was the next id then)...
        graph.join(1, &o("c"), &[lock("x")]).unwrap();
        assert!(graph.observe(&lock("x"), vec![o("a"), o("b")], 2).is_empty());
        // ...and both ask for it: asking for a lock one holds would not wait, so they let go.
        assert_eq!(graph.join(2, &o("a"), &[lock("x")]), Ok(vec![]));
        assert_eq!(graph.join(3, &o("b"), &[lock("x")]), Ok(vec![]));
        assert!(graph.holders[&lock("x")].owners.is_empty());
    }

    #[test]
    fn readers_found_holding_before_they_asked_to_write_are_read_again() {
        let mut graph = WaitGraph::default();
        let rw = Key::hold(HoldKind::RwLock, &Resource::new("u").unwrap());
        graph.join(1, &o("c"), std::slice::from_ref(&rw)).unwrap();
        assert!(graph.observe(&rw, vec![o("a"), o("b")], 2).is_empty());
        // Released and asked again, or waiting to upgrade? The store is to be read again.
        assert_eq!(
            graph.join(2, &o("a"), std::slice::from_ref(&rw)),
            Ok(vec![rw.clone()])
        );
        assert!(graph.observe(&rw, vec![o("a"), o("b")], 3).is_empty());
        assert_eq!(
            graph.join(3, &o("b"), std::slice::from_ref(&rw)),
            Ok(vec![rw.clone()])
        );
        // A slow try that read the store before b asked: b's word is still in doubt.
        assert!(graph.observe(&rw, vec![o("a"), o("b")], 3).is_empty());
        // Read again after: both hold a read and wait to upgrade, which is a cycle.
        assert_eq!(graph.observe(&rw, vec![o("a"), o("b")], 4), [3]);
        assert_eq!(
            graph.verdict(3).unwrap(),
            r#"b waits for rwlock "u" held by a; a waits for rwlock "u" held by b"#
        );
        // Had they let go, the read finds someone else: no cycle.
        graph.leave(3);
        graph.join(4, &o("b"), std::slice::from_ref(&rw)).unwrap();
        assert!(graph.observe(&rw, vec![o("c")], 5).is_empty());
    }

    #[test]
    fn an_owner_waiting_on_what_it_holds_itself_or_a_freed_name_is_no_cycle() {
        let mut graph = WaitGraph::default();
        graph.join(1, &o("a"), &[lock("x"), lock("y")]).unwrap();
        assert!(graph.observe(&lock("x"), vec![o("a"), o("b")], FRESH).is_empty());
        graph.join(2, &o("b"), &[lock("q")]).unwrap();
        assert!(graph.observe(&lock("q"), vec![o("c")], FRESH).is_empty());
        // a frees x's other holder: b waits for c, who waits for nobody.
        assert!(graph.observe(&lock("x"), vec![], FRESH).is_empty());
        graph.leave(1);
        graph.leave(2);
        assert!(graph.holders.is_empty(), "nobody waits: nothing kept");
    }
}
