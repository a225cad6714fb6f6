//! The watches on the keys of locks and holds that feed release notices to waiters.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use etcd_client::{Client, EventType, KeyValue, WatchOptions, WatchStream};
use fencelock_core::store::Result;
use fencelock_core::{Key, ReleaseFeed};

use super::STORE;
use super::codec::{self, HoldKeys};
use super::error::EtcdError;
use crate::deadline::within;

/// The keys a watch follows.
#[derive(Debug)]
pub(super) enum Watched {
    /// The locks' keys: the lock prefix, then the resource.
    Locks(String),
    /// The keys of holds and of writers' intents.
    Holds(HoldKeys),
}

impl Watched {
    fn prefix(&self) -> &str {
        match self {
            Self::Locks(prefix) => prefix,
            Self::Holds(keys) => keys.prefix(),
        }
    }

    /// The name that a deletion or a shortening rewrite of `key` may have freed: a lock, or
    /// the semaphore or read-write lock of a hold or an intent.
    fn freed(&self, key: &[u8]) -> Result<Key, EtcdError> {
        match self {
            Self::Locks(prefix) => codec::resource(prefix, key).map(|r| Key::lock(&r)),
            Self::Holds(keys) => keys.key_of(key),
        }
    }
}

/// A watch on every key of `watched`, and the revision it resumes from once lost.
#[derive(Debug)]
pub(super) struct Watch {
    watched: Watched,
    /// Just past the last revision seen, so that no deletion between two watches is
    /// missed; 0 before the first watch.
    resume: AtomicI64,
}

impl Watch {
    pub(super) fn new(watched: Watched) -> Arc<Self> {
        Arc::new(Self {
            watched,
            resume: AtomicI64::new(0),
        })
    }
}

/// Opens the watches `watches`, each from where it was lost (from now, the first time).
/// Returns the session: a future that passes to `feed` each name whose key was deleted or
/// rewritten with an earlier expiry, until one of the watches is lost.
pub(super) async fn watch(
    client: Client,
    watches: [Arc<Watch>; 2],
    deadline: Duration,
    feed: ReleaseFeed,
) -> Result<impl Future<Output = ()> + Send + 'static> {
    let [first, second] = watches;
    let one = open(&client, &first, deadline).await?;
    let other = open(&client, &second, deadline).await?;
    Ok(async move {
        tokio::select! {
            () = follow(one, first, feed.clone()) => {}
            () = follow(other, second, feed) => {}
        }
    })
}

const DOING: &str = "watch for releases";

/// Makes the watch on the keys of `watch`, from its resume revision on.
async fn open(client: &Client, watch: &Watch, deadline: Duration) -> Result<WatchStream> {
    let mut options = WatchOptions::new().with_prefix().with_prev_key();
    let from = watch.resume.load(Ordering::Acquire);
    if from > 0 {
        options = options.with_start_revision(from);
    }
    let (stream, created) = within(deadline, STORE, DOING, async {
        let mut stream = client
            .watch_client()
            .watch(watch.watched.prefix(), Some(options))
            .await
            .map_err(EtcdError::request(DOING))?;
        let created = stream
            .message()
            .await
            .map_err(EtcdError::request(DOING))?
            .ok_or_else(|| EtcdError::Refused {
                doing: DOING,
                reason: "the watch ended at once".into(),
            })?;
        Ok((stream, created))
    })
    .await?;
    if created.canceled() {
        // The history to resume from was compacted: start again from now. Waiters of what
        // was missed fall back on the expiry of the lease they wait for.
        watch.resume.store(0, Ordering::Release);
        return Err(EtcdError::Refused {
            doing: DOING,
            reason: format!("cancelled: {}", created.cancel_reason()),
        }
        .into());
    }
    if from == 0
        && let Some(header) = created.header()
    {
        watch.resume.store(header.revision() + 1, Ordering::Release);
    }
    Ok(stream)
}

/// Passes to `feed` what `stream` shows freed, until it is lost.
async fn follow(mut stream: WatchStream, watch: Arc<Watch>, feed: ReleaseFeed) {
    loop {
        let answer = match stream.message().await {
            Ok(Some(answer)) => answer,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "the etcd watch was lost; watching anew");
                return;
            }
        };
        if answer.canceled() {
            tracing::warn!(reason = answer.cancel_reason(), "the etcd watch was cancelled");
            return;
        }
        for event in answer.events() {
            let Some(kv) = event.kv() else { continue };
            watch.resume.store(kv.mod_revision() + 1, Ordering::Release);
            let freed = match event.event_type() {
                EventType::Delete => true,
                EventType::Put => event.prev_kv().is_some_and(|before| shortened(before, kv)),
            };
            if !freed {
                continue;
            }
            match watch.watched.freed(kv.key()) {
                Ok(key) => feed.announce(&key),
                Err(e) => tracing::warn!(error = %e, "odd key under {:?}", watch.watched.prefix()),
            }
        }
    }
}

/// Whether `after` rewrote the lease of `before` (an extension or a renewal, not a new grant)
/// to end earlier. A value that cannot be read counts as shortened: a spurious notice only
/// makes waiters ask again.
fn shortened(before: &KeyValue, after: &KeyValue) -> bool {
    before.create_revision() == after.create_revision()
        && match (codec::expires_at(before), codec::expires_at(after)) {
            (Ok(before), Ok(after)) => after < before,
            _ => true,
        }
}
