//! Servers' events ([`Bulletin`]s) through etcd: each is a key under the events prefix
//! (`PREFIX{origin}-{seq}`, both zero-padded, so a server's keys sort in its order), put
//! with a short etcd lease so that etcd deletes it soon after; every server watches the
//! prefix and hands on each put. A watch that is lost resumes from the revision after the
//! last put it saw, so nothing is missed while etcd keeps that history.

use std::time::{Duration, Instant};

use etcd_client::{Client, EventType, PutOptions, WatchOptions};
use fencelock_core::{Bulletin, BulletinFeed};
use tokio::sync::mpsc;

use crate::subscription::AbortOnDrop;

/// How long an event's key lives (its lease's TTL): long enough for every server's watch to
/// see it, short enough that the keys do not pile up.
const KEEP: Duration = Duration::from_secs(20);

/// How many events may wait to be put while etcd does not answer; more are dropped (logged).
const QUEUE: usize = 4096;

/// The pause before watching again after a watch is lost.
const REWATCH: Duration = Duration::from_millis(200);

/// This server's events going out, and the other servers' coming in.
#[derive(Debug)]
pub(super) struct Events {
    queue: mpsc::Sender<Bulletin>,
    feed: BulletinFeed,
    _tasks: [AbortOnDrop; 2],
}

impl Events {
    /// Starts putting and watching events under `prefix`.
    pub(super) fn start(client: &Client, prefix: &str) -> Self {
        let (queue, outgoing) = mpsc::channel(QUEUE);
        let feed = BulletinFeed::new();
        let put = tokio::spawn(put(client.clone(), prefix.to_owned(), outgoing));
        let follow = tokio::spawn(follow(client.clone(), prefix.to_owned(), feed.clone()));
        Self {
            queue,
            feed,
            _tasks: [AbortOnDrop(put), AbortOnDrop(follow)],
        }
    }

    /// Queues `bulletin` to be put.
    pub(super) fn tell(&self, bulletin: &Bulletin) {
        if self.queue.try_send(bulletin.clone()).is_err() {
            tracing::warn!("etcd is too far behind: an event is not told to other servers");
        }
    }

    /// The other servers' events.
    pub(super) fn feed(&self) -> &BulletinFeed {
        &self.feed
    }
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
