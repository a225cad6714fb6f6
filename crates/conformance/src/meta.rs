//! Lease metadata: what a holder says about its lease, permit or hold, kept with it on every
//! kind, replaced only when the holder sends more, and gone with its token.

use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Claim, HoldKind, HoldOutcome, Lease, ListQuery, Meta, RenewOutcome,
    Resources, StoreError, Terms,
};

use crate::checks::granted;
use crate::{Harness, owner};

/// Metadata of one key, `{"step": step}`.
fn meta(step: &str) -> Meta {
    Meta::from_value(&serde_json::json!({"step": step}), Meta::DEFAULT_MAX_BYTES).expect("a flat object")
}

/// The metadata of `lease`, as its compact JSON.
fn said(lease: &Lease) -> Option<&str> {
    lease.meta.as_ref().map(Meta::as_str)
}

fn renewed<L: std::fmt::Debug>(outcome: RenewOutcome<L>) -> L {
    match outcome {
        RenewOutcome::Renewed(lease) => lease,
        other => panic!("expected a renewal, got {other:?}"),
    }
}

/// A grant takes the metadata sent and every answer shows it; an extension keeps it unless it
/// sends some; a renewal replaces it only when it sends some, and only the holder's with the
/// right token does; a release reports it; a grant of a new token has only what it sends.
pub async fn metadata_stays_with_a_lease_until_its_holder_replaces_it(h: &Harness) {
    let (name, me, ttl) = (h.resource("meta:lock"), owner("me"), h.long_ttl());
    let first = Terms::ttl(ttl).meta(Some(meta("load")));
    let lease = granted(h.store.acquire_with(&name, &me, first).await.unwrap());
    assert_eq!(said(&lease), Some(r#"{"step":"load"}"#));
    assert_eq!(h.store.get(&name).await.unwrap(), Some(lease.clone()));
    let query = ListQuery {
        prefix: name.to_string(),
        after: None,
        limit: 10,
    };
    assert_eq!(
        h.store.list(&query).await.unwrap().leases,
        std::slice::from_ref(&lease)
    );

    let extended = match h.store.acquire(&name, &me, ttl).await.unwrap() {
        AcquireOutcome::Extended(extended) => extended,
        other => panic!("the holder extends, got {other:?}"),
    };
    assert_eq!((extended.token, said(&extended)), (lease.token, said(&lease)));
    let sent = Terms::ttl(ttl).meta(Some(meta("index")));
    match h.store.acquire_with(&name, &me, sent).await.unwrap() {
        AcquireOutcome::Extended(extended) => assert_eq!(said(&extended), Some(r#"{"step":"index"}"#)),
        other => panic!("the holder extends, got {other:?}"),
    }

    let kept = renewed(h.store.renew(&name, &me, ttl, None).await.unwrap());
    assert_eq!(said(&kept), Some(r#"{"step":"index"}"#));
    let replaced = renewed(
        h.store
            .renew_with(&name, &me, ttl, Some(lease.token), Some(&meta("verify")))
            .await
            .unwrap(),
    );
    assert_eq!(
        (replaced.token, said(&replaced)),
        (lease.token, Some(r#"{"step":"verify"}"#))
    );
    // Refused renewals change nothing, metadata included.
    let other = h
        .store
        .renew_with(&name, &owner("other"), ttl, None, Some(&meta("stolen")))
        .await
        .unwrap();
    assert_eq!(other, RenewOutcome::Forbidden);
    let stale = fencelock_core::FencingToken(lease.token.0 + 1_000_000);
    let conflict = h
        .store
        .renew_with(&name, &me, ttl, Some(stale), Some(&meta("stale")))
        .await
        .unwrap();
    assert_eq!(conflict, RenewOutcome::Conflict);
    let now = h.store.get(&name).await.unwrap().expect("still held");
    assert_eq!(said(&now), Some(r#"{"step":"verify"}"#));

    if let fencelock_core::ReleaseOutcome::Released(Some(ended)) =
        h.store.release(&name, &me, None).await.unwrap()
    {
        assert_eq!(said(&ended.lease), Some(r#"{"step":"verify"}"#));
    }
    let again = granted(h.store.acquire(&name, &me, ttl).await.unwrap());
    assert!(again.token > lease.token);
    assert_eq!(
        said(&again),
        None,
        "a new token carries only the metadata sent with it"
    );
    assert_eq!(h.store.get(&name).await.unwrap().and_then(|l| l.meta), None);
}

/// Every lock of an all-or-none grant has the metadata sent.
pub async fn several_locks_share_the_metadata_sent(h: &Harness) {
    let names = Resources::new(vec![h.resource("meta:a"), h.resource("meta:b")]).expect("distinct");
    let terms = Terms::ttl(h.long_ttl()).meta(Some(meta("pair")));
    let AcquireAllOutcome::Granted(outcomes) =
        h.store.acquire_all(&names, &owner("me"), terms).await.unwrap()
    else {
        panic!("both are free");
    };
    for (outcome, name) in outcomes.iter().zip(names.as_slice()) {
        let lease = outcome.lease().expect("granted");
        assert_eq!(said(lease), Some(r#"{"step":"pair"}"#));
        let now = h.store.get(name).await.unwrap().expect("held");
        assert_eq!(said(&now), Some(r#"{"step":"pair"}"#));
    }
}

/// A permit and a read-write lock's hold keep their metadata as a lease does: an extension
/// keeps it, a renewal may replace it, and a hold with a new token (an upgrade) has only what
/// it was sent with.
pub async fn metadata_stays_with_permits_and_holds(h: &Harness) {
    let (name, me, ttl) = (h.resource("meta:sem"), owner("me"), h.long_ttl());
    let permit = Claim::Permit { limit: 2 };
    let hold = match h
        .store
        .acquire_hold_with(&name, &me, permit, ttl, None, Some(&meta("one")))
        .await
        .unwrap()
    {
        HoldOutcome::Granted { hold, .. } => hold,
        other => panic!("a free semaphore grants, got {other:?}"),
    };
    assert_eq!(said(&hold.lease), Some(r#"{"step":"one"}"#));
    assert_eq!(
        h.store.holds(HoldKind::Semaphore, &name).await.unwrap(),
        std::slice::from_ref(&hold)
    );
    match h.store.acquire_hold(&name, &me, permit, ttl, None).await.unwrap() {
        HoldOutcome::Extended(extended) => assert_eq!(said(&extended.lease), Some(r#"{"step":"one"}"#)),
        other => panic!("the holder extends, got {other:?}"),
    }
    let renewal = h
        .store
        .renew_hold_with(HoldKind::Semaphore, &name, &me, ttl, None, Some(&meta("two")))
        .await
        .unwrap();
    assert_eq!(said(&renewed(renewal).lease), Some(r#"{"step":"two"}"#));
    let query = ListQuery {
        prefix: name.to_string(),
        after: None,
        limit: 10,
    };
    let page = h.store.list_holds(HoldKind::Semaphore, &query).await.unwrap();
    let listed: Vec<Option<&str>> = page
        .names
        .iter()
        .flat_map(|(_, holds)| holds)
        .map(|h| said(&h.lease))
        .collect();
    assert_eq!(listed, [Some(r#"{"step":"two"}"#)]);
    let kept = renewed(
        h.store
            .renew_hold(HoldKind::Semaphore, &name, &me, ttl, None)
            .await
            .unwrap(),
    );
    assert_eq!(said(&kept.lease), Some(r#"{"step":"two"}"#));

    let rw = h.resource("meta:rw");
    let read = match h
        .store
        .acquire_hold_with(&rw, &me, Claim::Read, ttl, None, Some(&meta("read")))
        .await
        .unwrap()
    {
        HoldOutcome::Granted { hold, .. } => hold,
        other => panic!("a free lock grants, got {other:?}"),
    };
    assert_eq!(said(&read.lease), Some(r#"{"step":"read"}"#));
    match h
        .store
        .acquire_hold(&rw, &me, Claim::Write, ttl, None)
        .await
        .unwrap()
    {
        HoldOutcome::Granted { hold, .. } => {
            assert!(hold.lease.token > read.lease.token);
            assert_eq!(said(&hold.lease), None, "an upgrade is a new hold");
        }
        other => panic!("the sole reader upgrades, got {other:?}"),
    }
    let holds = h.store.holds(HoldKind::RwLock, &rw).await.unwrap();
    assert_eq!(holds.iter().map(|h| said(&h.lease)).collect::<Vec<_>>(), [None]);
}

/// A durable store keeps every lease's and hold's metadata across a reopen.
pub async fn metadata_survives_a_reopen(h: &Harness) {
    if !h.capabilities().durable {
        return;
    }
    let (lock, sem, me, ttl) = (
        h.resource("meta:kept"),
        h.resource("meta:kept-sem"),
        owner("me"),
        h.long_ttl(),
    );
    let terms = Terms::ttl(ttl).meta(Some(meta("kept")));
    granted(h.store.acquire_with(&lock, &me, terms).await.unwrap());
    let permit = Claim::Permit { limit: 1 };
    h.store
        .acquire_hold_with(&sem, &me, permit, ttl, None, Some(&meta("kept-permit")))
        .await
        .unwrap();

    let store = h.reopened().await;
    let lease = store.get(&lock).await.unwrap().expect("kept across the reopen");
    assert_eq!(said(&lease), Some(r#"{"step":"kept"}"#));
    let holds = store.holds(HoldKind::Semaphore, &sem).await.unwrap();
    let kept: Vec<Option<&str>> = holds.iter().map(|h| said(&h.lease)).collect();
    assert_eq!(kept, [Some(r#"{"step":"kept-permit"}"#)]);
}

/// Metadata written through one server is what every server sharing the store shows, and
/// the holder may replace it through any of them.
pub async fn metadata_is_shared_across_servers(h: &Harness) {
    if !h.capabilities().shared {
        return;
    }
    let (name, me, ttl) = (h.resource("meta:shared"), owner("me"), h.long_ttl());
    let terms = Terms::ttl(ttl).meta(Some(meta("here")));
    let lease = granted(h.store.acquire_with(&name, &me, terms).await.unwrap());
    let other = h.another_server().await;
    assert_eq!(other.get(&name).await.unwrap(), Some(lease.clone()));
    renewed(
        other
            .renew_with(&name, &me, ttl, Some(lease.token), Some(&meta("there")))
            .await
            .unwrap(),
    );
    let now = h.store.get(&name).await.unwrap().expect("held");
    assert_eq!(said(&now), Some(r#"{"step":"there"}"#));
}

/// An election is kept as the lock `"\u{1}" + NAME` with its leadership in the lease's
/// metadata: the store keeps that name as given, reads it back in a get and a list under the
/// mark, renews the metadata with the term, and a list from past every election (as
/// `GET /locks` lists) never shows it; a lock of the election's own name is another lock.
pub async fn an_election_is_kept_as_a_lock_apart_from_the_locks(h: &Harness) {
    use fencelock_core::{Leadership, Resource, election};

    let (name, me, ttl) = (h.resource("meta:election"), owner("me"), h.long_ttl());
    let lock = Resource::election(&name).expect("a short name");
    let terms = Terms::ttl(ttl).meta(Some(election::meta(Some("10.0.0.1"), ttl, None)));
    let lease = granted(h.store.acquire_with(&lock, &me, terms).await.unwrap());
    let plain = granted(h.store.acquire(&name, &owner("other"), ttl).await.unwrap());
    assert_eq!(h.store.get(&lock).await.unwrap(), Some(lease.clone()));
    let won = Leadership::of(&lease).expect("a leadership");
    assert_eq!((&won.name, won.value.as_deref()), (&name, Some("10.0.0.1")));
    let under = |prefix: String, after: Option<Resource>| ListQuery {
        prefix,
        after,
        limit: 1000,
    };
    let marked = under(
        format!("{}{}", fencelock_core::model::ELECTION_MARK, h.namespace()),
        None,
    );
    match h.store.list(&marked).await {
        // A store lists the locks of elections under their mark (what a server's snapshot of
        // leaderships reads).
        Ok(listed) => assert_eq!(listed.leases, std::slice::from_ref(&lease)),
        // Through a server, no client may name the mark: a prefix with it is refused (422).
        Err(StoreError::Invalid(detail)) => assert!(detail.contains("prefix"), "{detail}"),
        Err(other) => panic!("listing under the mark of elections: {other}"),
    }
    let past = match h.store.list(&under(String::new(), None).past_elections()).await {
        Ok(past) => past,
        // Through a server, which keeps elections out of its lists itself and refuses a
        // cursor no client may name: its own unprefixed list.
        Err(StoreError::Invalid(detail)) if detail.contains("cursor") => {
            h.store.list(&under(String::new(), None)).await.unwrap()
        }
        Err(other) => panic!("listing past the elections: {other}"),
    };
    assert!(
        !past.leases.iter().any(|l| l.resource == lock),
        "an election after past_elections: {past:?}"
    );
    let proclaimed = won.meta_with(Some("10.0.0.2"), ttl);
    let renewal = h
        .store
        .renew_with(&lock, &me, ttl, Some(lease.token), Some(&proclaimed))
        .await
        .unwrap();
    let now = Leadership::of(&renewed(renewal)).expect("a leadership");
    assert_eq!(
        (now.value.as_deref(), now.term, now.since),
        (Some("10.0.0.2"), won.term, won.since)
    );
    assert_eq!(h.store.get(&name).await.unwrap(), Some(plain));
}
