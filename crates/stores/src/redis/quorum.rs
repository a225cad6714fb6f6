//! How the answers of several nodes make one: majorities, and the lease a majority agrees on.

use std::collections::HashMap;

use super::reply::Record;

/// The lease, permit or hold that at least `quorum` of `records` (from different nodes) are
/// copies of: same token, owner and principal. If the copies differ otherwise (a renewal
/// that reached only some nodes), the most common one; among as common, the one that ends
/// first.
pub(super) fn agreed(records: &[Record], quorum: usize) -> Vec<Record> {
    let mut copies: HashMap<(u64, &str, &str), Vec<&Record>> = HashMap::new();
    for record in records {
        copies
            .entry((record.token, record.owner.as_str(), record.principal.as_str()))
            .or_default()
            .push(record);
    }
    let mut leases: Vec<Record> = copies
        .into_values()
        .filter(|copies| copies.len() >= quorum)
        .filter_map(|copies| {
            copies
                .iter()
                .max_by_key(|c| {
                    let alike = copies.iter().filter(|o| o.same_lease(c)).count();
                    (alike, std::cmp::Reverse(c.expires_at))
                })
                .map(|c| (*c).clone())
        })
        .collect();
    leases.sort_by_key(|r| r.token);
    leases
}

/// The answer most nodes gave, of those in `answers` (ties: the first in `answers`'s order).
pub(super) fn most_common<T: PartialEq + Copy>(answers: &[T]) -> Option<T> {
    answers
        .iter()
        .enumerate()
        .max_by_key(|(at, a)| (answers.iter().filter(|b| b == a).count(), std::cmp::Reverse(*at)))
        .map(|(_, a)| *a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(token: u64, owner: &str, expires_at: u64) -> Record {
        Record {
            token,
            acquired_at: 1,
            expires_at,
            hold_until: 0,
            lock_delay: 0,
            claim: "lock".into(),
            limit: 0,
            principal: String::new(),
            owner: owner.into(),
            until: expires_at + 5,
            meta: String::new(),
            raw: String::new(),
        }
    }

    #[test]
    fn a_lease_counts_when_a_majority_holds_a_copy() {
        let a = record(7, "a", 100);
        let b = record(8, "b", 100);
        assert_eq!(agreed(&[a.clone(), a.clone(), b.clone()], 2), vec![a.clone()]);
        assert_eq!(agreed(&[a.clone(), b.clone()], 2), []);
        let mut other_node = a.clone();
        other_node.until += 3;
        let copies = agreed(&[a.clone(), other_node], 2);
        assert!(
            copies.len() == 1 && copies[0].same_lease(&a),
            "the node's own end differs: {copies:?}"
        );
        let renewed = record(7, "a", 200);
        assert_eq!(
            agreed(&[a.clone(), renewed.clone(), renewed.clone()], 2),
            vec![renewed.clone()],
            "the copy most nodes have"
        );
        assert_eq!(
            agreed(&[renewed, a.clone()], 2),
            [a],
            "as common: the one that ends first"
        );
    }

    #[test]
    fn the_most_common_answer_wins_and_ties_go_to_the_first() {
        assert_eq!(most_common(&["x", "y", "y"]), Some("y"));
        assert_eq!(most_common(&["x", "y"]), Some("x"));
        assert_eq!(most_common::<&str>(&[]), None);
    }
}
