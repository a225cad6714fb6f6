//! The event streams' property on hand-made histories: two servers, a watcher of each, and
//! the changes made through them; each way a stream can lie, and the losses the guarantee
//! allows.

mod common;

use common::*;
use fencelock_torture::check::Property;
use fencelock_torture::history::{Call, Entry, Kind, Op, Outcome, Phase};

/// Two watchers over the whole run, and a grant of "x" through server 0 (10..20 ms) told on
/// server 0's stream at once.
fn two_streams() -> History {
    let mut h = History::new();
    h.watched(0, 0, 10_000);
    h.watched(1, 0, 10_000);
    h.push(grant(0, "c0-0", "x", 1, 10, 20).through(0));
    h.event(0, 15, "grant", "x", "c0-0", 1);
    h
}

/// The same, the grant told on server 1's stream too.
fn told_on_both() -> History {
    let mut h = two_streams();
    h.event(1, 17, "grant", "x", "c0-0", 1);
    h
}

/// The property fails on `h`, and its explanation says `text`.
fn fails_saying(h: &History, text: &str) {
    let (explanation, _) = assert_fail(&h.check(), Property::Events);
    assert!(explanation.contains(text), "{explanation}");
}

/// A later grant through server 0, of "y" (300..310 ms), told on server 0's stream.
fn later_grant(h: &mut History) {
    h.push(grant(1, "c1-0", "y", 1, 300, 310).through(0));
    h.event(0, 305, "grant", "y", "c1-0", 1);
}

#[test]
fn every_change_on_every_stream_passes() {
    let mut h = told_on_both();
    later_grant(&mut h);
    h.event(1, 307, "grant", "y", "c1-0", 1);
    let report = h.check();
    assert_pass(&report, Property::Events);
    assert_ok(&report);
}

#[test]
fn a_change_missing_on_a_stream_that_told_a_later_one_is_a_silent_gap() {
    let mut h = two_streams();
    later_grant(&mut h);
    h.event(1, 307, "grant", "y", "c1-0", 1);
    let (explanation, slice) = assert_fail(&h.check(), Property::Events);
    assert!(
        explanation.contains("the stream of server 1 has no grant of \"x\" by \"c0-0\""),
        "{explanation}"
    );
    assert_eq!(ops_in(&slice), vec![(0, 0)]);
}

#[test]
fn a_change_missing_with_nothing_after_it_fails_too() {
    // The drain's marker makes the next change: without it, nothing would show the loss,
    // and the change is owed all the same.
    let h = two_streams();
    assert_fail(&h.check(), Property::Events);
}

#[test]
fn a_reset_after_the_change_was_sent_says_it_may_be_missing() {
    let mut h = two_streams();
    later_grant(&mut h);
    h.reset(1, 200);
    h.event(1, 307, "grant", "y", "c1-0", 1);
    assert_pass(&h.check(), Property::Events);
}

#[test]
fn a_reset_after_a_later_change_of_that_server_excuses_nothing() {
    let mut h = two_streams();
    later_grant(&mut h);
    h.event(1, 307, "grant", "y", "c1-0", 1);
    h.reset(1, 400);
    fails_saying(&h, "a silent gap");
}

#[test]
fn a_reset_before_the_change_was_sent_excuses_nothing() {
    let mut h = two_streams();
    h.reset(1, 5);
    assert_fail(&h.check(), Property::Events);
}

/// [`two_streams`] with server 0 killed at `at` (ms) and started again 800 ms later, then
/// a grant through it told on both streams.
fn killed_at(at: u64) -> History {
    let mut h = two_streams();
    h.fault("kill-server", "server 0", "begin", at);
    h.fault("kill-server", "server 0", "heal", at + 800);
    // Through the restarted server: its bulletins are of a new epoch.
    let after = at + 900;
    h.push(grant(1, "c1-0", "y", 1, after, after + 10).through(0));
    h.event(0, after + 5, "grant", "y", "c1-0", 1);
    h.event(1, after + 7, "grant", "y", "c1-0", 1);
    h
}

#[test]
fn a_change_lost_with_its_server_killed_before_it_told_more_passes() {
    assert_pass(&killed_at(100).check(), Property::Events);
}

#[test]
fn a_kill_long_after_the_change_excuses_nothing() {
    // Whatever the server had queued went out within milliseconds: a kill seconds later
    // cannot have taken this event with it.
    assert_fail(&killed_at(5_100).check(), Property::Events);
}

#[test]
fn a_kill_excuses_no_loss_when_a_later_change_of_that_server_arrived_before_it() {
    let mut h = two_streams();
    later_grant(&mut h);
    h.event(1, 307, "grant", "y", "c1-0", 1);
    h.fault("kill-server", "server 0", "begin", 500);
    h.fault("kill-server", "server 0", "heal", 900);
    let (explanation, slice) = assert_fail(&h.check(), Property::Events);
    assert!(explanation.contains("a silent gap"), "{explanation}");
    assert!(
        slice
            .entries
            .iter()
            .any(|entry| matches!(entry, Entry::Fault(f) if f.kind == "kill-server")),
        "{slice}"
    );
}

#[test]
fn a_kill_excuses_no_loss_on_the_killed_servers_own_stream() {
    let mut h = History::new();
    h.watched(0, 0, 10_000);
    h.push(grant(0, "c0-0", "x", 1, 10, 20).through(0));
    h.fault("kill-server", "server 0", "begin", 100);
    assert_fail(&h.check(), Property::Events);
}

#[test]
fn a_change_invoked_before_the_watcher_began_is_not_owed() {
    let mut h = History::new();
    h.watched(0, 50, 10_000);
    h.watched(1, 50, 10_000);
    h.push(grant(0, "c0-0", "x", 1, 10, 20).through(0));
    h.push(grant(1, "c1-0", "y", 1, 100, 110).through(0));
    h.event(0, 105, "grant", "y", "c1-0", 1);
    h.event(1, 107, "grant", "y", "c1-0", 1);
    assert_pass(&h.check(), Property::Events);
}

#[test]
fn renewals_and_releases_are_owed_as_grants_are() {
    let mut h = told_on_both();
    let renewal = renew(0, "c0-0", "x", 1, 300, 310).through(0);
    h.push(renewal.clone());
    h.renewal_told(0, 305, &renewal);
    h.renewal_told(1, 306, &renewal);
    h.push(release(0, "c0-0", "x", 1, 400, 410).through(0));
    h.event(0, 405, "release", "x", "c0-0", 1);
    h.event(1, 406, "release", "x", "c0-0", 1);
    assert_pass(&h.check(), Property::Events);
    // A renewal told before this one was sent stands for nothing.
    h.push(renew(0, "c0-0", "x", 1, 320, 330).through(0));
    fails_saying(&h, "no renew of \"x\"");
}

#[test]
fn an_event_of_an_owner_no_acquire_was_made_as_is_a_phantom() {
    let mut h = told_on_both();
    h.event(1, 40, "grant", "x", "c9-9", 2);
    fails_saying(&h, "told a grant of \"x\" by \"c9-9\", whom no acquire");
}

#[test]
fn an_event_of_a_refused_acquire_is_a_phantom_and_of_an_unknown_one_is_not() {
    let mut h = told_on_both();
    h.push(
        grant(1, "c1-0", "x", 2, 30, 40)
            .through(1)
            .outcome(Outcome::Unknown),
    );
    h.event(1, 35, "grant", "x", "c1-0", 2);
    assert_pass(&h.check(), Property::Events);
    h.push(
        grant(2, "c2-0", "x", 3, 50, 60)
            .through(1)
            .outcome(Outcome::Refused),
    );
    h.event(1, 55, "grant", "x", "c2-0", 3);
    assert_fail(&h.check(), Property::Events);
}

#[test]
fn a_release_told_of_a_release_that_was_refused_is_a_phantom() {
    let mut h = told_on_both();
    h.push(
        release(0, "c0-0", "x", 1, 400, 410)
            .through(0)
            .outcome(Outcome::Refused),
    );
    h.event(0, 405, "release", "x", "c0-0", 1);
    fails_saying(&h, "whose every call was refused");
}

#[test]
fn an_expiry_told_twice_fails_and_across_a_reset_passes() {
    let mut h = told_on_both();
    h.event(0, 1_100, "expire", "x", "c0-0", 1);
    h.event(1, 1_100, "expire", "x", "c0-0", 1);
    h.event(1, 1_200, "expire", "x", "c0-0", 1);
    fails_saying(&h, "told the expire of \"x\" by \"c0-0\" (token 1) twice");
    let mut h = told_on_both();
    h.event(1, 1_100, "expire", "x", "c0-0", 1);
    h.reset(1, 1_150);
    h.event(1, 1_200, "expire", "x", "c0-0", 1);
    assert_pass(&h.check(), Property::Events);
}

#[test]
fn an_id_told_twice_fails() {
    let mut h = told_on_both();
    let mut again = match h.entries.last() {
        Some(Entry::Event(event)) => event.clone(),
        other => panic!("{other:?}"),
    };
    again.event = "renew".to_owned();
    again.received = ms(18);
    h.entries.push(Entry::Event(again));
    fails_saying(&h, "the id \"1-1\"");
}

#[test]
fn changes_of_one_server_told_out_of_order_fail() {
    let mut h = two_streams();
    h.push(release(0, "c0-0", "x", 1, 100, 110).through(0));
    h.event(0, 105, "release", "x", "c0-0", 1);
    h.push(grant(1, "c1-0", "x", 2, 200, 210).through(0));
    h.event(0, 205, "grant", "x", "c1-0", 2);
    // Server 1's stream has them all, the grant after the release was answered but before it.
    h.event(1, 207, "grant", "x", "c1-0", 2);
    h.event(1, 208, "grant", "x", "c0-0", 1);
    h.event(1, 209, "release", "x", "c0-0", 1);
    let (explanation, slice) = assert_fail(&h.check(), Property::Events);
    assert!(
        explanation.contains("told client 1 op 0 (invoked at +0.200s) before client 0 op 1"),
        "{explanation}"
    );
    assert_eq!(ops_in(&slice), vec![(0, 1), (1, 0)]);
}

#[test]
fn a_renewal_missing_after_a_reset_is_not_told_late_by_the_next_renewal() {
    // Seed 15 on ZooKeeper: server 1 was down while a renewal went through server 0, and the
    // stream of server 1 told the next renewal of that lease after a later release.
    let sem = |op: Op| op.kind(Kind::Semaphore).limit(2).through(0);
    let mut h = History::new();
    h.watched(0, 0, 10_000);
    h.watched(1, 0, 10_000);
    h.push(sem(grant(4, "c4-39", "s", 4, 10, 20)));
    h.push(sem(grant(2, "c2-4", "s", 5, 30, 40)));
    for (server, at) in [(0, 15), (1, 16)] {
        h.event_of(Kind::Semaphore, server, at, "grant", "s", "c4-39", 4);
    }
    for (server, at) in [(0, 35), (1, 36)] {
        h.event_of(Kind::Semaphore, server, at, "grant", "s", "c2-4", 5);
    }
    h.fault("kill-server", "server 1", "begin", 100);
    let first = sem(renew(2, "c2-4", "s", 5, 300, 310));
    h.push(first.clone());
    h.renewal_told(0, 305, &first);
    h.fault("kill-server", "server 1", "heal", 900);
    h.reset(1, 950);
    h.push(sem(release(4, "c4-39", "s", 4, 1_000, 1_010)));
    h.event_of(Kind::Semaphore, 0, 1_005, "release", "s", "c4-39", 4);
    h.event_of(Kind::Semaphore, 1, 1_100, "release", "s", "c4-39", 4);
    let next = sem(renew(2, "c2-4", "s", 5, 1_050, 1_060));
    h.push(next.clone());
    h.renewal_told(0, 1_055, &next);
    h.renewal_told(1, 1_200, &next);
    assert_pass(&h.check(), Property::Events);
}

#[test]
fn a_renewal_lost_silently_is_not_told_by_the_next_renewal() {
    let mut h = told_on_both();
    let lost = renew(0, "c0-0", "x", 1, 300, 310).through(0);
    h.push(lost.clone());
    h.renewal_told(0, 305, &lost);
    let next = renew(0, "c0-0", "x", 1, 600, 610).through(0);
    h.push(next.clone());
    h.renewal_told(0, 605, &next);
    h.renewal_told(1, 606, &next);
    fails_saying(&h, "the stream of server 1 has no renew of \"x\"");
    // Told on both, it passes.
    h.renewal_told(1, 307, &lost);
    assert_pass(&h.check(), Property::Events);
}

#[test]
fn concurrent_changes_may_be_told_in_either_order() {
    let mut h = told_on_both();
    h.push(release(0, "c0-0", "x", 1, 100, 210).through(0));
    h.event(0, 205, "release", "x", "c0-0", 1);
    h.push(grant(1, "c1-0", "x", 2, 200, 260).through(0));
    h.event(0, 206, "grant", "x", "c1-0", 2);
    h.event(1, 207, "grant", "x", "c1-0", 2);
    h.event(1, 208, "release", "x", "c0-0", 1);
    assert_pass(&h.check(), Property::Events);
}

#[test]
fn no_watcher_is_not_judged() {
    let mut h = History::new();
    h.push(grant(0, "c0-0", "x", 1, 10, 20).through(0));
    assert_not_judged(&h.check(), Property::Events);
}

#[test]
fn the_drains_markers_are_no_client_of_the_liveness_phase() {
    let mut h = History::new();
    h.watched(0, 0, 10_000);
    h.healed(100);
    h.push(grant(0, "c0-9", "x", 1, 200, 210).through(0).liveness());
    h.event(0, 205, "grant", "x", "c0-9", 1);
    let mut marker = grant(3, "c3-0", "torture-end-0", 1, 2_000, 2_010).through(0);
    marker.phase = Phase::Drain;
    h.push(marker);
    let mut marked = op(3, Call::Release, "torture-end-0", "c3-0", 2_020, 2_030)
        .token(1)
        .through(0);
    marked.phase = Phase::Drain;
    h.push(marked);
    h.event(0, 2_005, "grant", "torture-end-0", "c3-0", 1);
    h.event(0, 2_025, "release", "torture-end-0", "c3-0", 1);
    let report = h.check();
    assert_pass(&report, Property::Liveness);
    assert_eq!(report.verdict(Property::Liveness).map(|v| v.checked), Some(1));
    assert_ok(&report);
}
