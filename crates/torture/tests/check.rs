//! The checker on hand-made histories: for every property, one that holds and a minimal one
//! that must fail; and legal histories that look like violations at first sight.

mod common;

use common::*;
use fencelock_torture::check::{Judgement, Property};
use fencelock_torture::history::{Call, Entry, Kind, Outcome};

// Fenced writes.

#[test]
fn writes_in_token_order_pass_and_a_stale_one_refused_passes() {
    let mut h = History::new();
    let a = h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.write(0, a, "x", 1, 20, true);
    h.write(0, a, "x", 1, 30, true);
    h.push(lost(0, "c0-0", "x", 1, 900));
    let b = h.push(grant(1, "c1-0", "x", 2, 1100, 1110));
    h.write(1, b, "x", 2, 1120, true);
    h.write(0, a, "x", 1, 1130, false);
    let report = h.check();
    assert_pass(&report, Property::FencedWrites);
    assert_eq!(report.verdict(Property::FencedWrites).map(|v| v.checked), Some(4));
    assert_ok(&report);
}

#[test]
fn a_write_accepted_with_a_lower_token_fails() {
    let mut h = History::new();
    let a = h.push(grant(0, "c0-0", "x", 1, 0, 10));
    let b = h.push(grant(1, "c1-0", "x", 2, 1100, 1110));
    h.write(1, b, "x", 2, 1120, true);
    h.write(0, a, "x", 1, 1130, true);
    let report = h.check();
    let (explanation, slice) = assert_fail(&report, Property::FencedWrites);
    assert!(
        explanation.contains("accepted token 1 after it had accepted token 2"),
        "{explanation}"
    );
    // Both writes, and the grants they were made under.
    let writes: Vec<(u64, bool)> = slice
        .entries
        .iter()
        .filter_map(|entry| match entry {
            Entry::Write(w) => Some((w.token, w.accepted)),
            _ => None,
        })
        .collect();
    assert_eq!(writes, vec![(2, true), (1, true)]);
    assert_eq!(ops_in(&slice), vec![(0, a), (1, b)]);
}

#[test]
fn a_resource_that_refuses_the_highest_token_fails() {
    let mut h = History::new();
    let a = h.push(grant(0, "c0-0", "x", 3, 0, 10));
    h.write(0, a, "x", 3, 20, true);
    h.write(0, a, "x", 3, 30, false);
    let (explanation, _) = assert_fail(&h.check(), Property::FencedWrites);
    assert!(
        explanation.contains("the resource itself is broken"),
        "{explanation}"
    );
}

#[test]
fn no_writes_is_not_judged() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    assert_not_judged(&h.check(), Property::FencedWrites);
}

// Token order.

#[test]
fn a_token_issued_twice_fails() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 7, 0, 10));
    h.push(release(0, "c0-0", "x", 7, 100, 110));
    h.push(grant(1, "c1-0", "x", 7, 200, 210));
    let report = h.check();
    let (explanation, slice) = assert_fail(&report, Property::TokenOrder);
    assert!(
        explanation.contains("token 7 was issued to two owners"),
        "{explanation}"
    );
    assert_eq!(ops_in(&slice), vec![(0, 0), (1, 0)]);
    // Nothing else is wrong with it.
    assert_pass(&report, Property::Exclusion);
}

#[test]
fn a_grant_after_another_with_a_lower_token_fails() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 5, 0, 10));
    h.push(release(0, "c0-0", "x", 5, 100, 110));
    h.push(grant(1, "c1-0", "x", 4, 200, 210));
    let (explanation, slice) = assert_fail(&h.check(), Property::TokenOrder);
    assert!(
        explanation.contains("\"c1-0\" was granted token 4 after \"c0-0\" had been granted token 5"),
        "{explanation}"
    );
    assert_eq!(ops_in(&slice), vec![(0, 0), (1, 0)]);
}

#[test]
fn concurrent_grants_may_take_their_tokens_in_either_order() {
    // c1's acquire overlaps c0's: either may have been granted first.
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 5, 0, 10).held_until(0));
    h.push(grant(1, "c1-0", "x", 4, 2, 8).held_until(2));
    assert_pass(&h.check(), Property::TokenOrder);
}

#[test]
fn extensions_keep_their_token() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 5, 0, 10));
    h.push(grant(0, "c0-0", "x", 5, 300, 310).extended());
    h.push(renew(0, "c0-0", "x", 5, 600, 610));
    h.push(release(0, "c0-0", "x", 5, 900, 910));
    h.push(grant(1, "c1-0", "x", 6, 920, 930));
    let report = h.check();
    assert_pass(&report, Property::TokenOrder);
    assert_ok(&report);
}

#[test]
fn an_unknown_acquire_whose_lease_shows_up_later_passes() {
    // c0's acquire timed out; the server had granted it (token 3), as a later read shows;
    // c1's acquire, refused meanwhile, saw it too. It expired, and c1 got token 4.
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 3, 0, 2000).outcome(Outcome::Unknown));
    h.push(
        op(1, Call::Acquire, "x", "c1-0", 100, 110)
            .outcome(Outcome::Refused)
            .shows(seen("x", "c0-0", 3, 50, 1050)),
    );
    h.push(get(2, "x", 200, 210).shows(seen("x", "c0-0", 3, 50, 1050)));
    h.push(grant(1, "c1-1", "x", 4, 1100, 1110));
    let report = h.check();
    assert_pass(&report, Property::TokenOrder);
    assert_pass(&report, Property::ExclusionByServerClocks);
    assert_ok(&report);
}

#[test]
fn a_grant_given_back_after_its_client_gave_up_is_not_two_leases_at_once() {
    // Seed 101 of the embedded store: c0's acquire, waiting on a paused server, timed out
    // at the client (unknown). The server, resumed, granted it (token 3, as c2's read shows)
    // and gave it back at once, its caller gone; 17 ms later c1 was granted the lock (token
    // 4) inside the wall times of token 3. No release line can show the give-back.
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 3, 0, 2000).outcome(Outcome::Unknown));
    h.push(get(2, "x", 2100, 2105).shows(seen("x", "c0-0", 3, 2090, 3090)));
    h.push(grant(1, "c1-0", "x", 4, 2107, 2110));
    let report = h.check();
    assert_pass(&report, Property::ExclusionByServerClocks);
    assert_ok(&report);
}

#[test]
fn a_lease_its_owner_was_told_of_is_not_given_back_by_a_later_unknown_acquire() {
    // c0 holds token 3 (told); its extension times out (unknown): the server does not
    // give back a lease its owner already held, so c1's grant inside it is two at once.
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 3, 0, 10));
    h.push(
        grant(0, "c0-0", "x", 3, 100, 900)
            .extended()
            .outcome(Outcome::Unknown),
    );
    h.push(grant(1, "c1-0", "x", 4, 500, 510));
    let report = h.check();
    assert_fail(&report, Property::ExclusionByServerClocks);
}

#[test]
fn an_unknown_acquire_sent_after_a_grant_with_a_lower_token_fails() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 5, 0, 10));
    h.push(release(0, "c0-0", "x", 5, 100, 110));
    h.push(grant(1, "c1-0", "x", 4, 200, 2000).outcome(Outcome::Unknown));
    h.push(get(2, "x", 300, 310).shows(seen("x", "c1-0", 4, 250, 1250)));
    assert_fail(&h.check(), Property::TokenOrder);
}

// Exclusion as told, and holder safety.

#[test]
fn two_overlapping_lock_holders_fail() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(grant(1, "c1-0", "x", 2, 20, 30));
    h.push(release(0, "c0-0", "x", 1, 500, 510));
    let report = h.check();
    let (explanation, slice) = assert_fail(&report, Property::Exclusion);
    assert!(
        explanation.contains("lock \"x\": \"c1-0\" (token 2) was told it holds it at +0.030s"),
        "{explanation}"
    );
    assert!(
        explanation.contains("\"c0-0\" (token 1) still believed"),
        "{explanation}"
    );
    assert!(explanation.contains("its release was sent then"), "{explanation}");
    // Both grants and the release that ended the first belief, in time order.
    assert_eq!(ops_in(&slice), vec![(0, 0), (1, 0), (0, 1)]);
    // The store granted it early: the guard could not have said so in time either.
    let (explanation, _) = assert_fail(&report, Property::HolderSafety);
    assert!(
        explanation.contains("the store granted it early"),
        "{explanation}"
    );
    assert_fail(&report, Property::ExclusionByServerClocks);
    // Only those three: a caller that excuses some knows which failed.
    assert_eq!(
        report.failed().collect::<Vec<_>>(),
        vec![
            Property::Exclusion,
            Property::ExclusionByServerClocks,
            Property::HolderSafety
        ]
    );
    assert!(!report.is_ok());
}

#[test]
fn a_waiter_granted_right_after_a_release_passes() {
    // c1 waited (wait_ms) from 50; c0's release was sent at 100 and the grant answered at 105.
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(grant(1, "c1-0", "x", 2, 50, 105).shows(seen("x", "c1-0", 2, 102, 1102)));
    h.push(release(0, "c0-0", "x", 1, 100, 104));
    let report = h.check();
    assert_pass(&report, Property::Exclusion);
    assert_pass(&report, Property::HolderSafety);
    assert_pass(&report, Property::ExclusionByServerClocks);
    assert_ok(&report);
}

#[test]
fn overlapping_attempts_that_were_refused_pass() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    for (client, from) in [(1, 5), (2, 20), (1, 40)] {
        h.push(
            op(
                client,
                Call::Acquire,
                "x",
                &format!("c{client}-{from}"),
                from,
                from + 10,
            )
            .outcome(Outcome::Refused)
            .shows(seen("x", "c0-0", 1, 0, 1000)),
        );
    }
    h.push(release(0, "c0-0", "x", 1, 100, 110));
    let report = h.check();
    assert_pass(&report, Property::Exclusion);
    assert_ok(&report);
}

#[test]
fn a_lease_left_to_expire_then_granted_to_another_passes() {
    // No release, no loss: c0 let its lease run out (held until 1000).
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(grant(1, "c1-0", "x", 2, 1100, 1110));
    let report = h.check();
    assert_pass(&report, Property::Exclusion);
    assert_pass(&report, Property::HolderSafety);
    assert_pass(&report, Property::ExclusionByServerClocks);
    assert_ok(&report);
}

#[test]
fn a_grant_answered_after_its_held_until_counts_for_nothing() {
    // c0 was granted at once (wall 20) but told only at 1500, after its held until (1020):
    // its guard starts lost, and it never believed it held the lock. Its lease expired at
    // 1020, and c1, granted at 1100, still believed at 1500.
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 20, 1500));
    h.push(grant(1, "c1-0", "x", 2, 1100, 1110));
    let report = h.check();
    assert_pass(&report, Property::Exclusion);
    assert_pass(&report, Property::HolderSafety);
    assert_ok(&report);
}

#[test]
fn renewals_keep_the_belief_and_a_grant_inside_it_fails() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(renew(0, "c0-0", "x", 1, 600, 610));
    // Held until 1600 by the renewal: a grant answered at 1200 is inside.
    h.push(grant(1, "c1-0", "x", 2, 1190, 1200));
    let (explanation, _) = assert_fail(&h.check(), Property::Exclusion);
    assert!(explanation.contains("its guard's held until"), "{explanation}");
}

#[test]
fn a_guard_that_said_lost_late_fails_holder_safety_only() {
    // c0's lease was held until 1000 and the store kept it; c1 was granted at 1110; c0's
    // guard said lost only at 1500 (its process was paused).
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(grant(1, "c1-0", "x", 2, 1100, 1110));
    h.push(lost(0, "c0-0", "x", 1, 1500));
    let report = h.check();
    assert_pass(&report, Property::Exclusion);
    assert_pass(&report, Property::ExclusionByServerClocks);
    let (explanation, slice) = assert_fail(&report, Property::HolderSafety);
    assert!(explanation.contains("said lost only at +1.500s"), "{explanation}");
    assert!(explanation.contains("the guard was late"), "{explanation}");
    assert_eq!(ops_in(&slice), vec![(0, 0), (1, 0), (0, 1)]);
}

#[test]
fn a_guard_that_said_lost_in_time_passes() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(
        op(0, Call::Renew, "x", "c0-0", 300, 320)
            .token(1)
            .outcome(Outcome::Unknown),
    );
    h.push(lost(0, "c0-0", "x", 1, 800));
    h.push(grant(1, "c1-0", "x", 2, 1100, 1110));
    let report = h.check();
    assert_pass(&report, Property::HolderSafety);
    assert_ok(&report);
}

#[test]
fn semaphore_permits_up_to_the_limit_pass_and_one_more_fails() {
    let permit = |client: u32, token: u64, from: u64| {
        grant(client, &format!("c{client}-0"), "s", token, from, from + 10)
            .kind(Kind::Semaphore)
            .limit(2)
    };
    let mut h = History::new();
    h.push(permit(0, 1, 0));
    h.push(permit(1, 2, 20));
    assert_pass(&h.check(), Property::Exclusion);
    h.push(permit(2, 3, 40));
    let (explanation, slice) = assert_fail(&h.check(), Property::Exclusion);
    assert!(
        explanation.contains("semaphore \"s\": \"c2-0\" (token 3)"),
        "{explanation}"
    );
    assert_eq!(ops_in(&slice), vec![(0, 0), (1, 0), (2, 0)]);
}

#[test]
fn readers_share_and_a_writer_beside_a_reader_fails() {
    let hold = |client: u32, mode: &str, token: u64, from: u64| {
        grant(client, &format!("c{client}-0"), "r", token, from, from + 10)
            .kind(Kind::Rwlock)
            .mode(mode)
    };
    let mut h = History::new();
    h.push(hold(0, "read", 1, 0));
    h.push(hold(1, "read", 2, 20));
    assert_pass(&h.check(), Property::Exclusion);
    h.push(hold(2, "write", 3, 40));
    let (explanation, _) = assert_fail(&h.check(), Property::Exclusion);
    assert!(explanation.contains("\"c2-0\" (write, token 3)"), "{explanation}");
}

#[test]
fn an_upgrade_replaces_its_own_read_hold() {
    // c0 reads, upgrades to write (token 2), releases; c1 then writes, while the read hold's
    // own held until (1000) has not passed: the upgrade ended it.
    let mut h = History::new();
    h.push(grant(0, "c0-0", "r", 1, 0, 10).kind(Kind::Rwlock).mode("read"));
    h.push(
        grant(0, "c0-0", "r", 2, 100, 110)
            .kind(Kind::Rwlock)
            .mode("write"),
    );
    h.push(release(0, "c0-0", "r", 2, 200, 210).kind(Kind::Rwlock));
    h.push(
        grant(1, "c1-0", "r", 3, 300, 310)
            .kind(Kind::Rwlock)
            .mode("write"),
    );
    let report = h.check();
    assert_pass(&report, Property::Exclusion);
    assert_pass(&report, Property::TokenOrder);
}

#[test]
fn servers_clocks_that_overlap_fail_their_own_view_only() {
    // As told, c1's grant came after c0's held until; but the server said c1's lease began
    // at wall +500, before c0's expired (+1000): its clock was stepped back.
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(
        op(1, Call::Acquire, "x", "c1-0", 1100, 1110)
            .shows(seen("x", "c1-0", 2, 500, 1500))
            .held_until(2100),
    );
    let report = h.check();
    assert_pass(&report, Property::Exclusion);
    assert_pass(&report, Property::HolderSafety);
    let (explanation, _) = assert_fail(&report, Property::ExclusionByServerClocks);
    assert!(
        explanation.contains("\"c1-0\" (token 2) was granted beside \"c0-0\" (token 1) 500 ms after it was acquired and 500 ms before it expired"),
        "{explanation}"
    );
}

// No release undone.

#[test]
fn a_release_undone_fails() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(release(0, "c0-0", "x", 1, 100, 110));
    h.push(get(1, "x", 200, 210).shows(seen("x", "c0-0", 1, 0, 1000)));
    let report = h.check();
    let (explanation, slice) = assert_fail(&report, Property::ReleasesStick);
    assert!(
        explanation.contains("then client 1 op 0 showed it live"),
        "{explanation}"
    );
    assert_eq!(ops_in(&slice), vec![(0, 0), (0, 1), (1, 0)]);
}

#[test]
fn a_renewal_after_an_acknowledged_release_fails() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(release(0, "c0-0", "x", 1, 100, 110));
    h.push(op(0, Call::Renew, "x", "c0-0", 200, 210).token(1));
    assert_fail(&h.check(), Property::ReleasesStick);
}

#[test]
fn a_read_concurrent_with_the_release_may_still_see_the_lease() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(release(0, "c0-0", "x", 1, 100, 110));
    h.push(get(1, "x", 105, 120).shows(seen("x", "c0-0", 1, 0, 1000)));
    let report = h.check();
    assert_pass(&report, Property::ReleasesStick);
    assert_ok(&report);
}

// All or none.

#[test]
fn all_or_none_granted_whole_and_refused_whole_pass() {
    let mut h = History::new();
    h.push(
        grant(0, "c0-0", "a", 1, 0, 10)
            .names(&["a", "b"])
            .shows(seen("b", "c0-0", 1, 0, 1000)),
    );
    h.push(
        op(1, Call::Acquire, "a", "c1-0", 20, 30)
            .names(&["b", "c"])
            .outcome(Outcome::Refused)
            .shows(seen("b", "c0-0", 1, 0, 1000)),
    );
    h.push(get(2, "c", 40, 50));
    h.push(get(2, "b", 40, 50).shows(seen("b", "c0-0", 1, 0, 1000)));
    let report = h.check();
    assert_pass(&report, Property::AllOrNone);
    assert_eq!(report.verdict(Property::AllOrNone).map(|v| v.checked), Some(2));
    assert_ok(&report);
}

#[test]
fn all_or_none_granted_without_every_name_fails() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "a", 1, 0, 10).names(&["a", "b"]));
    let (explanation, _) = assert_fail(&h.check(), Property::AllOrNone);
    assert!(explanation.contains("but not with b"), "{explanation}");
}

#[test]
fn all_or_none_refused_but_half_granted_fails() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "b", 1, 0, 10));
    h.push(
        op(1, Call::Acquire, "a", "c1-0", 20, 30)
            .names(&["a", "b"])
            .outcome(Outcome::Refused)
            .shows(seen("b", "c0-0", 1, 0, 1000)),
    );
    h.push(get(2, "a", 40, 50).shows(seen("a", "c1-0", 1, 25, 1025)));
    let report = h.check();
    let (explanation, slice) = assert_fail(&report, Property::AllOrNone);
    assert!(
        explanation.contains("the acquire of a,b by \"c1-0\" was refused"),
        "{explanation}"
    );
    assert_eq!(ops_in(&slice), vec![(1, 0), (2, 0)]);
}

#[test]
fn a_refused_owner_that_asks_again_may_hold_what_it_got_then() {
    let mut h = History::new();
    h.push(op(1, Call::Acquire, "a", "c1-0", 20, 30).outcome(Outcome::Refused));
    h.push(grant(1, "c1-0", "a", 2, 100, 110));
    h.push(get(2, "a", 200, 210).shows(seen("a", "c1-0", 2, 100, 1100)));
    let report = h.check();
    assert_pass(&report, Property::AllOrNone);
    assert_ok(&report);
}

// Liveness.

#[test]
fn every_client_acquiring_within_the_bound_passes() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.healed(1000);
    h.push(
        op(0, Call::Acquire, "x", "c0-1", 1010, 1020)
            .liveness()
            .outcome(Outcome::Refused),
    );
    h.push(grant(0, "c0-2", "x", 2, 1300, 1310).liveness());
    h.push(grant(1, "c1-0", "y", 1, 1010, 1020).liveness());
    let report = h.check();
    assert_pass(&report, Property::Liveness);
    assert_eq!(report.verdict(Property::Liveness).map(|v| v.checked), Some(2));
    assert_ok(&report);
}

#[test]
fn a_client_that_never_got_a_lock_after_the_faults_healed_fails() {
    let mut h = History::new();
    h.healed(1000);
    h.push(grant(0, "c0-0", "x", 1, 1010, 1020).liveness());
    for i in 0..8 {
        let from = 1010 + i * 200;
        h.push(
            op(1, Call::Acquire, "x", &format!("c1-{i}"), from, from + 10)
                .liveness()
                .outcome(Outcome::Refused),
        );
    }
    let report = h.check();
    let (explanation, slice) = assert_fail(&report, Property::Liveness);
    assert_eq!(
        explanation,
        "client 1 never acquired after the faults healed (8 tries, bound 500 ms)"
    );
    // The first five tries and the last.
    assert_eq!(
        ops_in(&slice),
        vec![(1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (1, 7)]
    );
}

#[test]
fn a_client_that_acquired_past_the_bound_fails() {
    let mut h = History::new();
    h.healed(1000);
    h.push(
        op(0, Call::Acquire, "x", "c0-0", 1010, 1020)
            .liveness()
            .outcome(Outcome::Unknown),
    );
    h.push(grant(0, "c0-1", "x", 1, 1400, 1600).liveness());
    let (explanation, _) = assert_fail(&h.check(), Property::Liveness);
    assert!(
        explanation.contains("first acquired 590 ms after its first try"),
        "{explanation}"
    );
}

#[test]
fn a_client_that_made_no_acquire_after_the_faults_healed_fails() {
    let mut h = History::new();
    h.push(grant(1, "c1-0", "y", 1, 0, 10));
    h.healed(1000);
    h.push(grant(0, "c0-0", "x", 1, 1010, 1020).liveness());
    let (explanation, _) = assert_fail(&h.check(), Property::Liveness);
    assert_eq!(explanation, "client 1 made no acquire after the faults healed");
}

#[test]
fn a_history_without_a_liveness_phase_is_not_judged() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    let report = h.check();
    assert_not_judged(&report, Property::Liveness);
    assert!(report.unjudged().any(|p| p == Property::Liveness));
    assert!(report.is_ok());
}

// The report.

#[test]
fn the_report_prints_the_seed_a_line_per_property_and_the_slice_with_its_faults() {
    let mut h = History::new();
    h.fault("pause-server", "server 0", "begin", 5);
    h.fault("kill-node", "redis 2", "begin", 3000);
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(grant(1, "c1-0", "x", 2, 20, 30));
    h.push(release(0, "c0-0", "x", 1, 500, 510));
    h.fault("pause-server", "server 0", "heal", 700);
    let text = h.check().to_string();
    assert!(
        text.starts_with("seed 4242 (store memory, 10 s, 3 clients, 1 servers, faults: pause-server)"),
        "{text}"
    );
    assert!(
        text.contains("\n  FAIL  exclusion as told             2 leases, 1 violation\n"),
        "{text}"
    );
    assert!(
        text.contains("\n  PASS  token order                   2 leases\n"),
        "{text}"
    );
    assert!(
        text.contains("\n  n/a   fenced writes                 0 writes: no writes to the fenced resource\n"),
        "{text}"
    );
    assert!(text.contains("\nFAIL exclusion as told: lock \"x\""), "{text}");
    // The slice: in time order, relative to the run's start, with the fault in progress
    // meanwhile (and not the one that began later).
    let slice: Vec<&str> = text
        .split("\nFAIL exclusion as told: ")
        .nth(1)
        .map(|rest| {
            rest.lines()
                .skip(1)
                .take_while(|line| line.starts_with("  +"))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(slice.len(), 5, "{text}");
    assert!(
        slice[0].starts_with("  +0.000s..+0.010s  client 0 op 0: acquire lock \"x\" as \"c0-0\" -> ok"),
        "{text}"
    );
    assert!(
        slice[1].starts_with("  +0.005s  fault begin pause-server on server 0"),
        "{text}"
    );
    assert!(
        slice[2].starts_with("  +0.020s..+0.030s  client 1 op 0: acquire"),
        "{text}"
    );
    assert!(
        slice[3]
            .starts_with("  +0.500s..+0.510s  client 0 op 1: release lock \"x\" as \"c0-0\" token 1 -> ok"),
        "{text}"
    );
    assert!(
        slice[4].starts_with("  +0.700s  fault heal pause-server on server 0"),
        "{text}"
    );
    assert!(!text.contains("kill-node"), "{text}");
}

#[test]
fn a_passing_report_is_ok_and_says_so() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    let report = h.check();
    assert!(report.is_ok());
    assert_eq!(report.seed(), Some(4242));
    assert!(
        report
            .verdicts
            .iter()
            .all(|v| !matches!(v.judgement, Judgement::Fail { .. }))
    );
    assert!(!report.to_string().contains("FAIL"));
}
