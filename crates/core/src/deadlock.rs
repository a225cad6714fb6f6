//! `WaitGraph`: who waits for whom among the waiters of one [`crate::Waiters`], to find a
//! circle of owners that wait for each other before they all wait in vain.
//!
//! A waiter waits for names (one, or several for an all-or-none acquire); each name is held
//! by owners, as the last try on it found them. Owner `a` waits for owner `b` when a waiter
//! of `a` waits for a name `b` holds. A cycle `a → b → … → a` never resolves by itself: each
//! owner keeps what the next one waits for until its lease runs out. The youngest waiter on
//! the cycle (the one whose wait closed it) is told to give up, as a database picks the
//! victim of a deadlock.
//!
//! Who holds a name is known only as of the last try on it, so a cycle found here may be
//! stale — its holders may have let go and be waiting again. The waiter told of a cycle
//! therefore asks the store who holds each name on it before it gives up
//! (each step of the `Cycle`); a cycle the store does not confirm is forgotten, with what the store
//! said recorded instead.
//!
//! What this does not see: waiters of other servers sharing the store, and owners that hold
//! a name while they do something else than wait here. A server only knows its own waiters;
//! a global graph would need every server to publish who waits for what at every wait, which
//! no store here offers cheaply. A cycle across servers still ends when the first wait runs
//! out (`wait_ms` is bounded) or a lease expires.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use crate::hold::Key;
use crate::model::Owner;

/// The waiters of one [`crate::Waiters`] and the holders of what they wait for.
#[derive(Debug, Default)]
pub(crate) struct WaitGraph {
    waiters: HashMap<u64, Waiter>,
    /// The owners holding each name waited for, as the last try on it found them.
    holders: HashMap<Key, Vec<Owner>>,
    /// Waiters told to give up, with the cycle they were on.
    victims: HashMap<u64, Cycle>,
}

/// A cycle of owners waiting for each other, as the graph saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cycle {
    /// Each name on the cycle with the owner the graph believes holds it (and the next
    /// owner on the cycle waits for).
    pub(crate) steps: Vec<(Key, Owner)>,
    /// The cycle in words, for the refusal.
    pub(crate) text: String,
}

#[derive(Debug)]
struct Waiter {
    owner: Owner,
    keys: Vec<Key>,
}

/// One step of a cycle: an owner waits for a name held by the next owner.
struct Step<'a> {
    waiter: u64,
    key: &'a Key,
    holder: &'a Owner,
}

impl WaitGraph {
    /// Records that waiter `id` of `owner` waits for `keys`, and returns the cycle this
    /// closes, if it does (the waiter is then the youngest on it).
    pub(crate) fn join(&mut self, id: u64, owner: &Owner, keys: &[Key]) -> Option<Cycle> {
        self.waiters.insert(
            id,
            Waiter {
                owner: owner.clone(),
                keys: keys.to_vec(),
            },
        );
        self.path_back(id).map(|path| self.cycle(&path))
    }

    /// Records who holds `key` now (a try on it found them; none: it is free) and returns the
    /// waiters this newly puts on a cycle, now told to give up: one per cycle, the youngest.
    pub(crate) fn observe(&mut self, key: &Key, holders: Vec<Owner>) -> Vec<u64> {
        if !self.waiters.values().any(|w| w.keys.contains(key)) {
            self.holders.remove(key);
            return Vec::new();
        }
        self.holders.insert(key.clone(), holders);
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
    pub(crate) fn verdict(&mut self, id: u64) -> Option<Cycle> {
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

    /// A cycle through waiter `id`, with its youngest waiter.
    fn cycle_with_victim(&self, id: u64) -> Option<(u64, Cycle)> {
        let mut path = self.path_back(id)?;
        let (at, victim) = path
            .iter()
            .map(|step| step.waiter)
            .enumerate()
            .max_by_key(|(_, id)| *id)?;
        // Told from the victim's side: its wait first, as when its join closes the cycle.
        path.rotate_left(at);
        Some((victim, self.cycle(&path)))
    }

    /// The steps from waiter `start` back to its own owner, if they exist (depth first; a
    /// waiter already told to give up is on its way out and leads nowhere).
    fn path_back(&self, start: u64) -> Option<Vec<Step<'_>>> {
        let target = &self.waiters.get(&start)?.owner;
        let mut path = Vec::new();
        let mut seen = HashSet::from([start]);
        self.search(start, target, &mut path, &mut seen).then_some(path)
    }

    fn search<'a>(
        &'a self,
        at: u64,
        target: &Owner,
        path: &mut Vec<Step<'a>>,
        seen: &mut HashSet<u64>,
    ) -> bool {
        let Some(waiter) = self.waiters.get(&at) else {
            return false;
        };
        for key in &waiter.keys {
            for holder in self.holders.get(key).into_iter().flatten() {
                if *holder == waiter.owner {
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
                    if seen.insert(id) && self.search(id, target, path, seen) {
                        return true;
                    }
                }
                path.pop();
            }
        }
        false
    }

    fn cycle(&self, path: &[Step<'_>]) -> Cycle {
        Cycle {
            steps: path
                .iter()
                .map(|step| (step.key.clone(), step.holder.clone()))
                .collect(),
            text: self.describe(path),
        }
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

    fn o(name: &str) -> Owner {
        Owner::new(name).unwrap()
    }

    fn lock(name: &str) -> Key {
        Key::lock(&Resource::new(name).unwrap())
    }

    #[test]
    fn the_wait_that_closes_a_cycle_of_two_is_refused_with_the_cycle() {
        let mut graph = WaitGraph::default();
        assert_eq!(graph.join(1, &o("a"), &[lock("y")]), None);
        assert!(
            graph.observe(&lock("y"), vec![o("b")]).is_empty(),
            "b does not wait"
        );
        assert_eq!(graph.join(2, &o("c"), &[lock("x")]), None);
        assert!(
            graph.observe(&lock("x"), vec![o("a")]).is_empty(),
            "c holds nothing a wants"
        );
        let cycle = graph.join(3, &o("b"), &[lock("x")]).unwrap();
        assert_eq!(
            cycle.text,
            r#"b waits for lock "x" held by a; a waits for lock "y" held by b"#
        );
        assert_eq!(cycle.steps, [(lock("x"), o("a")), (lock("y"), o("b"))]);
        // Once the refused waiter leaves, a waits on without a cycle.
        graph.leave(3);
        assert!(graph.observe(&lock("y"), vec![o("b")]).is_empty());
    }

    #[test]
    fn a_cycle_of_three_across_kinds_is_found_and_its_youngest_waiter_told() {
        let mut graph = WaitGraph::default();
        let rw = Key::hold(HoldKind::RwLock, &Resource::new("z").unwrap());
        assert_eq!(graph.join(1, &o("a"), &[lock("x")]), None);
        assert_eq!(graph.join(2, &o("b"), std::slice::from_ref(&rw)), None);
        assert_eq!(graph.join(3, &o("c"), &[lock("w")]), None);
        assert!(graph.observe(&lock("x"), vec![o("b")]).is_empty());
        assert!(graph.observe(&lock("w"), vec![o("a")]).is_empty());
        // The last link is learnt by a try, not at a join: the youngest waiter is told.
        assert_eq!(graph.observe(&rw, vec![o("c")]), [3]);
        let cycle = graph.verdict(3).unwrap().text;
        assert_eq!(
            cycle,
            r#"c waits for lock "w" held by a; a waits for lock "x" held by b; b waits for rwlock "z" held by c"#
        );
        assert_eq!(graph.verdict(3), None, "told once");
    }

    #[test]
    fn an_owner_waiting_on_what_it_holds_itself_or_a_freed_name_is_no_cycle() {
        let mut graph = WaitGraph::default();
        assert_eq!(graph.join(1, &o("a"), &[lock("x"), lock("y")]), None);
        assert!(graph.observe(&lock("x"), vec![o("a"), o("b")]).is_empty());
        assert_eq!(graph.join(2, &o("b"), &[lock("q")]), None);
        assert!(graph.observe(&lock("q"), vec![o("c")]).is_empty());
        // a frees x's other holder: b waits for c, who waits for nobody.
        assert!(graph.observe(&lock("x"), vec![]).is_empty());
        graph.leave(1);
        graph.leave(2);
        assert!(graph.holders.is_empty(), "nobody waits: nothing kept");
    }
}
