//! Hearing other servers: a subscription to the release channel and the event channel of
//! every node, and [`Outbox`], which publishes this server's events on every node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock_core::{Bulletin, BulletinFeed, Key, ReleaseFeed, StoreError};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::deadline::within;
use crate::subscription::AbortOnDrop;

use super::STORE;
use super::node::Node;
use super::reply::notice;

/// A subscription to a node's channels: feeds [`Feeds`] until the connection is lost.
pub(super) type Listening = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where a subscription hands what it hears.
#[derive(Debug, Clone)]
pub(super) struct Feeds {
    /// Names freed.
    pub(super) released: ReleaseFeed,
    /// Other servers' events, each once whichever nodes it comes from.
    pub(super) heard: Arc<FirstCopies>,
}

/// Other servers' events as the nodes deliver them: under Redlock each comes from every node,
/// and is handed on the first time only.
#[derive(Debug, Default)]
pub(super) struct FirstCopies {
    // The highest seq handed on of each server (origin). Held only to compare and set.
    latest: Mutex<HashMap<u64, u64>>,
    feed: BulletinFeed,
}

impl FirstCopies {
    /// The feed of what is handed on.
    pub(super) fn feed(&self) -> &BulletinFeed {
        &self.feed
    }

    /// Hands `bulletin` on unless one of its server's at or after it was: each node delivers
    /// a server's bulletins in their order, so an older one is a copy from a slower node.
    fn hear(&self, bulletin: Bulletin) {
        {
            let mut latest = self
                .latest
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let seen = latest.entry(bulletin.origin).or_default();
            if bulletin.seq <= *seen {
                return;
            }
            *seen = bulletin.seq;
        }
        self.feed.hand(bulletin);
    }
}

/// Subscribes to the release and event channels on `node` within `timeout`; the future that
/// then feeds `feeds`.
pub(super) async fn listen(
    node: Arc<Node>,
    feeds: Feeds,
    timeout: Duration,
) -> fencelock_core::store::Result<Listening> {
    let unavailable = |e| StoreError::unavailable("Redis: subscribing to releases", e);
    let (released, events) = (node.channel(), node.event_channel());
    let subscribing = async {
        let mut pubsub = node.client().get_async_pubsub().await.map_err(unavailable)?;
        pubsub
            .subscribe(&[released.as_str(), events.as_str()])
            .await
            .map_err(unavailable)?;
        Ok(pubsub)
    };
    let pubsub = within(timeout, STORE, "subscribe to releases", subscribing).await?;
    Ok(Box::pin(async move {
        let mut messages = pubsub.into_on_message();
        while let Some(message) = messages.next().await {
            let Ok(text) = message.get_payload::<String>() else {
                continue;
            };
            if message.get_channel_name() == events {
                if let Some(bulletin) = Bulletin::decode(&text) {
                    feeds.heard.hear(bulletin);
                }
            } else if let Some((kind, name)) = notice(&text) {
                feeds.released.announce(&Key { kind, name });
            }
        }
    }))
}

/// How many events may wait to be published on a node; more are dropped (and logged) while
/// it does not answer.
const OUTBOX: usize = 4096;

/// The most events published on a node in one round trip.
const PUBLISH_BATCH: usize = 64;

/// Publishes this server's events on every node, each node in a task of its own so that a
/// node that does not answer delays no other; each in the order given.
#[derive(Debug)]
pub(super) struct Outbox {
    queues: Vec<mpsc::Sender<String>>,
    _tasks: Vec<AbortOnDrop>,
}

impl Outbox {
    /// Starts publishing on `nodes`.
    pub(super) fn start(nodes: &[Arc<Node>]) -> Self {
        let (queues, tasks) = nodes
            .iter()
            .map(|node| {
                let (queue, mut events) = mpsc::channel::<String>(OUTBOX);
                let node = node.clone();
                let task = tokio::spawn(async move {
                    // Those queued while the last batch was on its way go out together: one
                    // round trip and one wake-up for a burst, not one per event.
                    let mut batch = Vec::with_capacity(PUBLISH_BATCH);
                    while events.recv_many(&mut batch, PUBLISH_BATCH).await > 0 {
                        if let Err(error) = node.publish(&batch).await {
                            tracing::warn!(%error, events = batch.len(), "events were not published on a Redis node");
                        }
                        batch.clear();
                    }
                });
                (queue, AbortOnDrop(task))
            })
            .unzip();
        Self {
            queues,
            _tasks: tasks,
        }
    }

    /// Queues `bulletin` on every node.
    pub(super) fn tell(&self, bulletin: &Bulletin) {
        let payload = bulletin.encode();
        for queue in &self.queues {
            if queue.try_send(payload.clone()).is_err() {
                tracing::warn!("a Redis node is too far behind: an event is not published on it");
            }
        }
    }
}
