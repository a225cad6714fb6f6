//! What the stores that keep servers' events as data (etcd, ZooKeeper) share: a queue of this
//! server's events that one task writes out a batch at a time, and the feed of the others'.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fencelock_core::{Bulletin, BulletinFeed};
use tokio::sync::mpsc;

use crate::subscription::AbortOnDrop;

/// How many of a server's events may wait to go out while its store does not take them.
const EVENT_QUEUE: usize = 4096;

/// The most events a writer puts in one request: etcd takes 128 operations per transaction
/// by default, and a request of this many stays small.
const EVENT_BATCH: usize = 64;

/// A server's events going out through a store that keeps them as data (etcd, ZooKeeper),
/// and the other servers' coming in: a queue that one task drains in order, a batch at a
/// time, and the feed another task fills. Both tasks stop when it is dropped.
#[derive(Debug)]
pub(crate) struct EventChannel {
    queue: mpsc::Sender<Bulletin>,
    overflow: Overflow,
    feed: BulletinFeed,
    _tasks: [AbortOnDrop; 2],
}

/// The latest event that found the queue full, written once the queue is drained: the
/// others then see the gap before it in this server's numbers (and reset their streams)
/// even if this server tells nothing more.
type Overflow = Arc<Mutex<Option<Bulletin>>>;

/// What a writer of an [`EventChannel`] takes its events from.
#[derive(Debug)]
pub(crate) struct Outgoing {
    queue: mpsc::Receiver<Bulletin>,
    overflow: Overflow,
}

impl Outgoing {
    /// The next events to write, in order, at most [`EVENT_BATCH`]: those queued, and once
    /// the queue is empty, the last that did not fit in it. Waits for one; empty once the
    /// channel is dropped.
    pub(crate) async fn next(&mut self) -> Vec<Bulletin> {
        let mut batch = Vec::with_capacity(EVENT_BATCH);
        if self.queue.recv_many(&mut batch, EVENT_BATCH).await > 0 && self.queue.is_empty() {
            let last = lock(&self.overflow).take();
            // One older than the batch was queued before it had room again: the gap shows.
            batch.extend(last.filter(|last| batch.last().is_none_or(|b| b.seq < last.seq)));
        }
        batch
    }
}

fn lock(overflow: &Overflow) -> MutexGuard<'_, Option<Bulletin>> {
    // Only a take or a replace is done under it: a poisoned one is whole.
    overflow.lock().unwrap_or_else(PoisonError::into_inner)
}

impl EventChannel {
    /// Spawns `write`, given what goes out, and `read`, given the feed to hand the others'
    /// to.
    pub(crate) fn start<W, R>(write: impl FnOnce(Outgoing) -> W, read: impl FnOnce(BulletinFeed) -> R) -> Self
    where
        W: Future<Output = ()> + Send + 'static,
        R: Future<Output = ()> + Send + 'static,
    {
        let (queue, outgoing) = mpsc::channel(EVENT_QUEUE);
        let overflow = Overflow::default();
        let feed = BulletinFeed::new();
        let write = tokio::spawn(write(Outgoing {
            queue: outgoing,
            overflow: overflow.clone(),
        }));
        let read = tokio::spawn(read(feed.clone()));
        Self {
            queue,
            overflow,
            feed,
            _tasks: [AbortOnDrop(write), AbortOnDrop(read)],
        }
    }

    /// Queues `bulletin` to go out. While the queue is full, only the latest such one is
    /// kept, to go out after the queue (see [`Overflow`]).
    pub(crate) fn tell(&self, bulletin: &Bulletin) {
        if let Err(mpsc::error::TrySendError::Full(bulletin)) = self.queue.try_send(bulletin.clone()) {
            tracing::warn!("the store is too far behind: an event is not told to other servers");
            *lock(&self.overflow) = Some(bulletin);
        }
    }

    /// The other servers' events.
    pub(crate) fn feed(&self) -> &BulletinFeed {
        &self.feed
    }
}
