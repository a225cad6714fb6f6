//! Servers' events ([`Bulletin`]s) through etcd: each is a key under the events prefix
//! (`PREFIX{origin}-{seq}`, both zero-padded, so a server's keys sort in its order), put
//! with a short etcd lease so that etcd deletes it soon after; every server watches the
//! prefix and hands on each put. A watch that is lost resumes from the revision after the
//! last put it saw, so nothing is missed while etcd keeps that history.

use std::time::{Duration, Instant};

use etcd_client::{Client, EventType, PutOptions, WatchOptions};
use fencelock_core::{Bulletin, BulletinFeed};
use tokio::sync::mpsc;

use crate::subscription::EventChannel;

/// How long an event's key lives (its lease's TTL): long enough for every server's watch to
/// see it, short enough that the keys do not pile up.
const KEEP: Duration = Duration::from_secs(20);

/// The pause before watching again after a watch is lost.
const REWATCH: Duration = Duration::from_millis(200);

/// Starts putting and watching events under `prefix`.
pub(super) fn start(client: &Client, prefix: &str) -> EventChannel {
    let (writer, reader) = (client.clone(), client.clone());
    let (put_under, watched) = (prefix.to_owned(), prefix.to_owned());
    EventChannel::start(
        move |outgoing| put(writer, put_under, outgoing),
        move |feed| follow(reader, watched, feed),
    )
}

/// Puts each bulletin of `outgoing`, in order, under a lease granted for [`KEEP`] and used
/// for half of it.
async fn put(mut client: Client, prefix: String, mut outgoing: mpsc::Receiver<Bulletin>) {
    let mut lease: Option<(i64, Instant)> = None;
    while let Some(bulletin) = outgoing.recv().await {
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
        let key = format!("{prefix}{:020}-{:020}", bulletin.origin, bulletin.seq);
        let options = PutOptions::new().with_lease(current);
        if let Err(error) = client.put(key, bulletin.encode(), Some(options)).await {
            tracing::warn!(%error, "an event is not told to other servers: etcd refused the put");
            lease = None;
        }
    }
}

/// Hands on every event put under `prefix`, watching again whenever the watch is lost.
async fn follow(mut client: Client, prefix: String, feed: BulletinFeed) {
    // The revision after the last put seen: where a new watch starts (0: from now).
    let mut from = 0;
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
                        break;
                    }
                    Ok(None) | Err(_) => break,
                };
                for event in answer.events() {
                    let Some(kv) = event.kv() else { continue };
                    from = kv.mod_revision() + 1;
                    if event.event_type() != EventType::Put {
                        continue;
                    }
                    match kv.value_str().ok().and_then(Bulletin::decode) {
                        Some(bulletin) => feed.hand(bulletin),
                        None => tracing::warn!("an event under the events prefix that cannot be read"),
                    }
                }
            },
            Err(error) => tracing::warn!(%error, "watching other servers' events on etcd failed"),
        }
        tokio::time::sleep(REWATCH).await;
    }
}
