//! How the answers of several nodes make one: majorities, and the lease a majority agrees on.

use std::collections::HashMap;

use fencelock_core::StoreError;
use fencelock_core::store::Result;

use super::node::Record;

/// The answers of the nodes that answered, if they are at least `quorum`; else the error of
/// one that did not.
pub(super) fn answered<T>(results: Vec<Result<T>>, quorum: usize, doing: &str) -> Result<Vec<T>> {
    let nodes = results.len();
    let mut answers = Vec::with_capacity(nodes);
    let mut failure = None;
    for result in results {
        match result {
            Ok(answer) => answers.push(answer),
            Err(e) => failure = Some(e),
        }
    }
    if answers.len() >= quorum {
        return Ok(answers);
    }
    Err(no_majority(answers.len(), nodes, doing, failure))
}

/// [`StoreError::Unavailable`]: fewer than a majority of the nodes answered.
pub(super) fn no_majority(
    answers: usize,
    nodes: usize,
    doing: &str,
    failure: Option<StoreError>,
) -> StoreError {
    match failure {
        Some(e) if nodes == 1 => e,
        failure => StoreError::Unavailable {
            message: format!(
                "Redis: {doing}: {answers} of {nodes} nodes answered, fewer than a majority{}",
                failure.map(|e| format!(" (e.g. {e})")).unwrap_or_default()
            ),
            source: None,
        },
    }
}

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

    #[test]
    fn too_few_answers_are_no_majority() {
        let down = || Err(StoreError::Invalid("down".into()));
        assert_eq!(answered(vec![Ok(1), down(), Ok(3)], 2, "get").unwrap(), [1, 3]);
        let error = answered(vec![Ok(1), down(), down()], 2, "get").unwrap_err();
        assert!(error.to_string().contains("1 of 3 nodes answered"), "{error}");
        let alone = answered::<u8>(vec![down()], 1, "get").unwrap_err();
        assert!(
            matches!(alone, StoreError::Invalid(_)),
            "one node's own error: {alone}"
        );
    }
}
