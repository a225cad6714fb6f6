//! Fenced writes: the resource never took a token below one it took before, and refused
//! nothing else.

use std::collections::HashMap;

use super::index::Index;
use super::{Finding, Tally};
use crate::history::Write;

pub(crate) fn check(index: &Index<'_>) -> Tally {
    let mut tally = Tally::new("no writes to the fenced resource");
    let mut by_name: HashMap<&str, Vec<(usize, &Write)>> = HashMap::new();
    for &(at, write) in &index.writes {
        by_name.entry(write.name.as_str()).or_default().push((at, write));
    }
    for writes in by_name.values_mut() {
        // The resource judged one write at a time, at `at`; the history's order breaks ties.
        writes.sort_by_key(|&(at, write)| (write.at, at));
        let mut highest: Option<(usize, &Write)> = None;
        for &(at, write) in writes.iter() {
            tally.checked += 1;
            let top = highest.map(|(_, w)| w.token);
            let broken = if write.accepted {
                top.is_some_and(|top| write.token < top)
            } else {
                top.is_none_or(|top| write.token >= top)
            };
            if broken {
                tally.violation(write.at, || finding(index, (at, write), highest));
            }
            if write.accepted && top.is_none_or(|top| write.token > top) {
                highest = Some((at, write));
            }
        }
    }
    tally
}

fn finding(index: &Index<'_>, (at, write): (usize, &Write), highest: Option<(usize, &Write)>) -> Finding {
    let explanation = match (write.accepted, highest) {
        (true, Some((_, top))) => format!(
            "{:?}: the resource accepted token {} after it had accepted token {}",
            write.name, write.token, top.token
        ),
        (false, Some((_, top))) => format!(
            "{:?}: the resource refused token {}, not below the highest it had accepted ({}): \
             the resource itself is broken",
            write.name, write.token, top.token
        ),
        (_, None) => format!(
            "{:?}: the resource refused token {} before it had accepted any: the resource \
             itself is broken",
            write.name, write.token
        ),
    };
    // The writes, and the grants they were made under.
    let mut entries = vec![at];
    entries.extend(highest.map(|(at, _)| at));
    let grants = std::iter::once(write)
        .chain(highest.map(|(_, w)| w))
        .filter_map(|w| index.op_of_write(w))
        .map(|op| index.entry_of(op));
    entries.extend(grants);
    Finding { explanation, entries }
}
