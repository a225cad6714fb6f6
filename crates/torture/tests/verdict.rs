//! A run's verdict: what the checker found, less what the store's guarantee gives up under
//! the faults the run injected — and nothing more.

mod common;

use common::{History, With, grant, lost};
use fencelock_torture::check::Property;
use fencelock_torture::history::RunInfo;
use fencelock_torture::verdict::{RunVerdict, judge};

fn on(store: &str) -> RunInfo {
    RunInfo {
        store: store.to_owned(),
        seed: 1,
        seconds: 10,
        clients: 2,
        servers: 2,
        faults: vec!["pause-client".to_owned(), "kill-node".to_owned()],
    }
}

fn waived(verdict: &RunVerdict) -> Vec<Property> {
    verdict.waived.iter().map(|waiver| waiver.property).collect()
}

/// c0 holds "x" until 1000 by its guard and says lost only at 3000; c1 is granted "x" at
/// 1500, after c0's lease ended: c0's guard was late. With `paused`, c0 was stopped
/// meanwhile, from 100.
fn late_guard(store: &str, paused: bool) -> History {
    late_guard_paused_from(store, paused.then_some(100))
}

/// As [`late_guard`], with c0 stopped from `pause` (if any) until 3000.
fn late_guard_paused_from(store: &str, pause: Option<u64>) -> History {
    let mut h = History::new().run(on(store));
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    if let Some(from) = pause {
        h.fault("pause-client", "client 0", "begin", from);
    }
    h.push(grant(1, "c1-0", "x", 2, 1500, 1510));
    if pause.is_some() {
        h.fault("pause-client", "client 0", "heal", 3000);
    }
    h.push(lost(0, "c0-0", "x", 1, 3000).held_until(1000));
    h
}

#[test]
fn a_guard_late_before_its_client_was_paused_fails_the_run() {
    // c0's guard should have said lost at 1000; its client was stopped only at 1200: the
    // pause does not explain the late guard, and the waiver must not hide it.
    let verdict = judge(&late_guard_paused_from("sqlite", Some(1200)).entries);
    assert!(verdict.holds(Property::Exclusion), "{verdict}");
    assert!(waived(&verdict).is_empty(), "{verdict}");
    assert!(!verdict.passed(), "{verdict}");
}

/// c1 is granted "x" at 20, while c0 holds it until 1000; with `fault`, the run injected
/// that fault before.
fn two_holders(store: &str, fault: Option<&str>) -> History {
    let mut h = History::new().run(on(store));
    if let Some(kind) = fault {
        h.fault(kind, "somewhere", "begin", 1);
        h.fault(kind, "somewhere", "heal", 2);
    }
    h.push(grant(0, "c0-0", "x", 1, 0, 10));
    h.push(grant(1, "c1-0", "x", 2, 20, 30));
    h
}

#[test]
fn a_paused_clients_late_guard_is_waived_and_the_run_passes() {
    let verdict = judge(&late_guard("sqlite", true).entries);
    assert!(verdict.holds(Property::Exclusion), "{verdict}");
    assert!(!verdict.holds(Property::HolderSafety), "{verdict}");
    assert_eq!(waived(&verdict), [Property::HolderSafety]);
    assert!(verdict.passed(), "{verdict}");
    let printed = verdict.to_string();
    assert!(
        printed.contains("WAIVED holder safety: a paused client"),
        "{printed}"
    );
    assert!(printed.ends_with("verdict: PASS\n"), "{printed}");
}

#[test]
fn a_late_guard_without_a_client_pause_fails_the_run() {
    let verdict = judge(&late_guard("sqlite", false).entries);
    assert!(waived(&verdict).is_empty(), "{verdict}");
    assert!(!verdict.passed(), "{verdict}");
    assert!(verdict.to_string().ends_with("verdict: FAIL\n"), "{verdict}");
}

#[test]
fn two_holders_at_once_fail_the_run_even_with_paused_clients() {
    let verdict = judge(&two_holders("etcd", Some("pause-client")).entries);
    assert!(!verdict.holds(Property::Exclusion), "{verdict}");
    assert!(!verdict.holds(Property::HolderSafety), "{verdict}");
    assert!(waived(&verdict).is_empty(), "{verdict}");
    assert!(!verdict.passed(), "{verdict}");
}

#[test]
fn a_stated_caveat_waives_exclusion_only_on_its_store_and_once_its_fault_happened() {
    // Redis, one node, killed and started empty: the guarantee says a lock may be granted
    // again while its holder works.
    let verdict = judge(&two_holders("redis", Some("kill-node")).entries);
    assert!(!verdict.holds(Property::Exclusion), "{verdict}");
    assert!(waived(&verdict).contains(&Property::Exclusion), "{verdict}");
    assert!(verdict.holds(Property::TokenOrder), "{verdict}");
    assert!(verdict.passed(), "{verdict}");
    // The run could have killed the node (its settings say so) but did not.
    assert!(!judge(&two_holders("redis", None).entries).passed());
    // etcd states no such caveat.
    assert!(!judge(&two_holders("etcd", Some("kill-node")).entries).passed());
}
