//! Servers' events ([`Bulletin`]s) through etcd: each is a key under the events prefix
//! (`PREFIX{origin}-{seq}`, both zero-padded, so a server's keys sort in its order), put
//! with a short etcd lease so that etcd deletes it soon after — those queued together in
//! one transaction; every server watches the prefix and hands on each put. A watch that is
//! lost resumes from the revision after the last put it saw, so nothing is missed while
//! etcd keeps that history; once etcd compacted it, the feed is told events were missed.
//!
//! Beside them, under `PREFIX` + [`CLAIMS`], the claims of expiries: every server's watch
//! sees etcd delete an expired lease's key, and the first server to put the claim of that
//! deletion tells it ([`EtcdStore::claim`]), so that it is told once.

use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions};
use fencelock_core::store::Result;
use fencelock_core::{Bulletin, BulletinFeed, Expired};

use super::EtcdStore;
use super::error::EtcdError;
use super::watch::Seen;
use crate::event_channel::{EventChannel, Outgoing};

/// How long an event's key lives (its lease's TTL): long enough for every server's watch to
/// see it, short enough that the keys do not pile up.
const KEEP: Duration = Duration::from_secs(20);

/// Where the claims of expiries are, after the events prefix: no event's key starts so.
const CLAIMS: &str = "expired/";

/// How long a claim's key lives: far longer than a server takes to claim what it saw, so
/// that no server claims an expiry after its claim is gone.
const CLAIM_KEEP: Duration = Duration::from_secs(120);

/// The pause before watching again after a watch is lost.
const REWATCH: Duration = Duration::from_millis(200);

/// Reads the cluster's revision, then starts putting events under `prefix` and watching
/// those put after that revision.
pub(super) async fn start(client: &Client, prefix: &str) -> Result<EventChannel> {
    const DOING: &str = "read the revision to watch events from";
    // A linearizable read: its revision is at least that of every put made before it.
    let read = client
        .kv_client()
        .get(prefix, Some(GetOptions::new().with_count_only()))
        .await
        .map_err(EtcdError::request(DOING))?;
    let revision = read
        .header()
        .map(|header| header.revision())
        .ok_or_else(|| EtcdError::Corrupt("a read without a revision".into()))?;
    let (writer, reader) = (client.clone(), client.clone());
    let (put_under, watched) = (prefix.to_owned(), prefix.to_owned());
    Ok(EventChannel::start(
        move |outgoing| put(writer, put_under, outgoing),
        move |feed| follow(reader, watched, revision + 1, feed),
    ))
}

/// Puts the bulletins of `outgoing`, in order, a batch per transaction, under a lease
/// granted for [`KEEP`] and used for half of it.
async fn put(mut client: Client, prefix: String, mut outgoing: Outgoing) {
    let mut lease: Option<(i64, Instant)> = None;
    loop {
        let batch = outgoing.next().await;
        if batch.is_empty() {
            return;
        }
        let current = match lease {
            Some((id, granted)) if granted.elapsed() < KEEP / 2 => id,
            _ => match client.lease_grant(KEEP.as_secs().cast_signed(), None).await {
                Ok(granted) => {
                    lease = Some((granted.id(), Instant::now()));
                    granted.id()
                }
                Err(error) => {
                    tracing::warn!(%error, "an event is not told to other servers: etcd granted no lease");
                    continue;
                }
            },
        };
        let puts = batch.iter().map(|bulletin| {
            let key = format!("{prefix}{:020}-{:020}", bulletin.origin, bulletin.seq);
            TxnOp::put(
                key,
                bulletin.encode(),
                Some(PutOptions::new().with_lease(current)),
            )
        });
        if let Err(error) = client.txn(Txn::new().and_then(puts.collect::<Vec<_>>())).await {
            tracing::warn!(%error, events = batch.len(), "events are not told to other servers: etcd refused the put");
            lease = None;
        }
    }
}

impl EtcdStore {
    /// Claims each of `seen` (expiries this server's watch saw): puts its claim unless a
    /// server put it first. Returns the expiries it won, each one no other server wins. On
    /// an error, those not claimed yet are kept for the next call, and the error returned
    /// if none was won.
    pub(super) async fn claim(&self, seen: Vec<Seen>) -> Result<Vec<Expired>> {
        const DOING: &str = "claim an expiry";
        if seen.is_empty() {
            return Ok(Vec::new());
        }
        let granted = self
            .client
            .lease_client()
            .grant(CLAIM_KEEP.as_secs().cast_signed(), None)
            .await;
        let lease = match granted {
            Ok(granted) => granted.id(),
            Err(error) => {
                self.expiries.put_back(seen);
                return Err(EtcdError::request(DOING)(error).into());
            }
        };
        let mut won = Vec::new();
        let mut seen = seen.into_iter();
        while let Some(one) = seen.next() {
            let key = [
                self.options.events_prefix.as_bytes(),
                CLAIMS.as_bytes(),
                format!("{:020}/", one.revision).as_bytes(),
                &one.key,
            ]
            .concat();
            let claim = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, "", Some(PutOptions::new().with_lease(lease)))]);
            match self.txn(DOING, claim).await {
                Ok(answer) if answer.succeeded() => won.push(one.expired),
                Ok(_) => {}
                Err(error) => {
                    self.expiries.put_back(std::iter::once(one).chain(seen).collect());
                    return if won.is_empty() {
                        Err(error.into())
                    } else {
                        Ok(won)
                    };
                }
            }
        }
        Ok(won)
    }
}

/// Hands on every event put under `prefix` from the revision `from` on, watching again
/// whenever the watch is lost.
async fn follow(mut client: Client, prefix: String, mut from: i64, feed: BulletinFeed) {
    let claims = format!("{prefix}{CLAIMS}");
    // Where a new watch starts: then the revision after the last put seen (0: from now,
    // once etcd compacted the history to resume from).
    loop {
        let mut options = WatchOptions::new().with_prefix();
        if from > 0 {
            options = options.with_start_revision(from);
        }
        match client.watch(prefix.as_bytes(), Some(options)).await {
            Ok(mut stream) => loop {
                let answer = match stream.message().await {
                    Ok(Some(answer)) if !answer.canceled() => answer,
                    // Compacted past `from`: what was missed is lost; go on from now.
                    Ok(Some(_)) => {
                        from = 0;
                        feed.missed();
                        break;
                    }
                    Ok(None) | Err(_) => break,
                };
                let mut heard = Vec::new();
                for event in answer.events() {
                    let Some(kv) = event.kv() else { continue };
                    from = kv.mod_revision() + 1;
                    if event.event_type() != EventType::Put || kv.key().starts_with(claims.as_bytes()) {
                        continue;
                    }
                    match kv.value_str().ok().and_then(Bulletin::decode) {
                        Some(bulletin) => heard.push(bulletin),
                        None => tracing::warn!("an event under the events prefix that cannot be read"),
                    }
                }
                // Each server's in its order, whatever order etcd gives one transaction's.
                heard.sort_by_key(|bulletin| (bulletin.origin, bulletin.seq));
                heard.into_iter().for_each(|bulletin| feed.hand(bulletin));
            },
            Err(error) => tracing::warn!(%error, "watching other servers' events on etcd failed"),
        }
        tokio::time::sleep(REWATCH).await;
    }
}
