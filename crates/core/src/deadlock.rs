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
//!
//! The refusal carries the [`Cycle`] step by step ([`Deadlock::Found`]), not only in words:
//! a server tells each caller only the names it may read ([`Cycle::describe`]), while its log
//! keeps the whole cycle.

use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write as _};

use crate::hold::Key;
use crate::model::{Owner, Resource};

/// Why a wait was refused as a deadlock ([`crate::StoreError::Deadlock`]): the cycle it would
/// have closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deadlock {
    /// Found by this process's waiters: every step, so that a server can tell each caller
    /// only what it may read.
    Found(Cycle),
    /// As a server told it (its problem's `detail`): words only.
    Told(String),
}

impl fmt::Display for Deadlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Found(cycle) => cycle.fmt(f),
            Self::Told(text) => f.write_str(text),
        }
    }
}

/// A cycle of owners waiting for each other, as the graph saw it: each step an owner waiting
/// for a name held by the owner of the next step, the last step's holder the first step's
/// waiter. The first waiter is the one refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    waits: Vec<Wait>,
}

/// One step of a [`Cycle`]: `waiter` waits for `key`, held by `holder` (as the graph believes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// The owner that waits.
    pub waiter: Owner,
    /// What it waits for.
    pub key: Key,
    /// Who holds it.
    pub holder: Owner,
}

impl Cycle {
    /// The steps, the refused waiter's first.
    pub fn waits(&self) -> &[Wait] {
        &self.waits
    }

    /// The cycle in words, `b waits for lock "x" held by a; a waits for rwlock "y" held by b`,
    /// for a reader who may read only the names `readable` allows. Another name is told as
    /// `a lock you may not read`; an owner as `an owner you may not read`, unless the reader
    /// may read a name it holds on the cycle (reading the name shows its holder) or it is the
    /// first waiter (the one refused: the reader itself). With every name readable, this is
    /// the whole cycle, as [`Display`](fmt::Display) writes it.
    pub fn describe(&self, readable: impl Fn(&Resource) -> bool) -> String {
        let first = self.waits.first().map(|wait| &wait.waiter);
        let named: Vec<&Owner> = first
            .into_iter()
            .chain(
                self.waits
                    .iter()
                    .filter(|wait| readable(&wait.key.name))
                    .map(|wait| &wait.holder),
            )
            .collect();
        let owner = |owner: &Owner| {
            if named.contains(&owner) {
                owner.to_string()
            } else {
                "an owner you may not read".to_owned()
            }
        };
        let mut text = String::new();
        for (i, wait) in self.waits.iter().enumerate() {
            if i > 0 {
                text.push_str("; ");
            }
            let (waiter, holder, kind) = (owner(&wait.waiter), owner(&wait.holder), wait.key.kind);
            let _ = if readable(&wait.key.name) {
                let name = wait.key.name.as_str();
                write!(text, "{waiter} waits for {kind} {name:?} held by {holder}")
            } else {
                write!(
                    text,
                    "{waiter} waits for a {kind} you may not read held by {holder}"
                )
            };
        }
        text
    }
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(|_| true))
    }
}

/// The waiters of one [`crate::Waiters`] and the holders of what they wait for.
#[derive(Debug, Default)]
pub(crate) struct WaitGraph {
    waiters: HashMap<u64, Waiter>,
    /// The owners holding each name waited for, as the last try on it found them.
    holders: HashMap<Key, Vec<Owner>>,
    /// Waiters told to give up, with the cycle they were on.
    victims: HashMap<u64, Cycle>,
}

#[derive(Debug)]
struct Waiter {
    owner: Owner,
    keys: Vec<Key>,
}

/// One step of a cycle: waiter `waiter` of `owner` waits for a name held by the next owner.
struct Step<'a> {
    waiter: u64,
    owner: &'a Owner,
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
                    owner: &waiter.owner,
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
            waits: path
                .iter()
                .map(|step| Wait {
                    waiter: step.owner.clone(),
                    key: step.key.clone(),
                    holder: step.holder.clone(),
                })
                .collect(),
        }
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
            cycle.to_string(),
            r#"b waits for lock "x" held by a; a waits for lock "y" held by b"#
        );
        let steps: Vec<_> = cycle
            .waits()
            .iter()
            .map(|w| (w.waiter.clone(), w.key.clone(), w.holder.clone()))
            .collect();
        assert_eq!(steps, [(o("b"), lock("x"), o("a")), (o("a"), lock("y"), o("b"))]);
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
        let cycle = graph.verdict(3).unwrap().to_string();
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

    #[test]
    fn a_cycle_told_to_a_reader_names_only_what_it_may_read_and_their_holders() {
        let mut graph = WaitGraph::default();
        let rw = Key::hold(HoldKind::RwLock, &Resource::new("job:2").unwrap());
        assert_eq!(graph.join(1, &o("c"), &[lock("job:1")]), None);
        assert_eq!(graph.join(2, &o("b"), &[lock("pay:secret")]), None);
        assert!(graph.observe(&lock("job:1"), vec![o("a")]).is_empty());
        assert!(graph.observe(&lock("pay:secret"), vec![o("c")]).is_empty());
        assert_eq!(graph.join(3, &o("a"), std::slice::from_ref(&rw)), None);
        assert_eq!(graph.observe(&rw, vec![o("b")]), [3]);
        let cycle = graph.verdict(3).unwrap();
        let whole = r#"a waits for rwlock "job:2" held by b; b waits for lock "pay:secret" held by c; c waits for lock "job:1" held by a"#;
        assert_eq!(cycle.to_string(), whole);
        assert_eq!(cycle.describe(|_| true), whole);
        let jobs = cycle.describe(|name| name.as_str().starts_with("job:"));
        assert_eq!(
            jobs,
            r#"a waits for rwlock "job:2" held by b; b waits for a lock you may not read held by an owner you may not read; an owner you may not read waits for lock "job:1" held by a"#
        );
        // A reader of nothing learns only that it waits in a cycle.
        assert_eq!(
            cycle.describe(|_| false),
            "a waits for a rwlock you may not read held by an owner you may not read; \
             an owner you may not read waits for a lock you may not read held by an owner you may not read; \
             an owner you may not read waits for a lock you may not read held by a"
        );
        assert_eq!(Deadlock::Found(cycle).to_string(), whole);
        assert_eq!(Deadlock::Told("words".into()).to_string(), "words");
    }
}
