//! The watches on the keys of locks and holds that feed release notices to waiters, and
//! see expiries.
//!
//! etcd deletes the key of an expired lease by itself, and a watch sees that deletion as it
//! sees a release. So every deletion a server tells of itself — a release, a force-release,
//! an upgrade's or a downgrade's old hold — is made in a transaction that also writes the
//! *mark*: the key that is the bare prefix of the keys it deletes (a lock's or a hold's
//! name is never empty, so no lock or hold has it). etcd gives every change of a
//! transaction one revision, and a watch gets all the changes of a revision in one answer:
//! a deletion of a lease's key with no mark at its revision is an expiry — etcd's, or a
//! lease with terms that an acquire cleared after its end — which the watch queues in
//! [`Expiries`] for [`LockStore::purge_expired`] to claim.
//!
//! [`LockStore::purge_expired`]: fencelock_core::LockStore::purge_expired

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use etcd_client::{Client, EventType, KeyValue, TxnOp, WatchOptions, WatchStream};
use fencelock_core::store::Result;
use fencelock_core::{BulletinFeed, Expired, Key, Kind, ReleaseFeed};

use super::codec::{self, HoldKeys};
use super::error::EtcdError;
use super::{EtcdStore, STORE};
use crate::deadline::within;

/// Whether the server that deletes a lease's key tells the lease's end itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deletion {
    /// It does (a release, a force-release): the mark goes with the deletion, so that no
    /// watch takes it for an expiry.
    Told,
    /// It does not: the key is of a lease that is over (the watch tells its expiry), or of
    /// a writer's intent (no event).
    Untold,
}

impl EtcdStore {
    /// The put of the mark beside a deletion of `key` (of a lock, or of a hold).
    pub(super) fn mark(&self, key: &[u8]) -> TxnOp {
        let prefix = match key.starts_with(self.options.prefix.as_bytes()) {
            true => self.options.prefix.as_str(),
            false => self.holds.prefix(),
        };
        TxnOp::put(prefix, "", None)
    }
}

/// The most expiries seen and not yet claimed that a server keeps; past it the oldest are
/// dropped, and the server's streams told events were missed.
const MAX_UNCLAIMED: usize = 100_000;

/// An expiry a watch saw: the lease's key, the revision of its deletion, and the lease.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) key: Vec<u8>,
    pub(super) revision: i64,
    pub(super) expired: Expired,
}

/// The expiries the watches saw, waiting to be claimed; and where to say some were missed.
#[derive(Debug)]
pub(super) struct Expiries {
    seen: Mutex<VecDeque<Seen>>,
    missed: BulletinFeed,
}

impl Expiries {
    /// None yet; missed ones are told on `missed`, the feed of other servers' events.
    pub(super) fn new(missed: BulletinFeed) -> Arc<Self> {
        Arc::new(Self {
            seen: Mutex::default(),
            missed,
        })
    }

    fn seen(&self) -> MutexGuard<'_, VecDeque<Seen>> {
        // Only pushes and takes are done under it: a poisoned one is whole.
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, seen: Seen) {
        let mut queue = self.seen();
        if queue.len() >= MAX_UNCLAIMED {
            queue.pop_front();
            drop(queue);
            tracing::warn!("expiries are seen faster than they are claimed: one is not told");
            self.missed.missed();
            return self.seen().push_back(seen);
        }
        queue.push_back(seen);
    }

    /// Says that expiries may have gone unseen (a watch could not resume where it was lost).
    fn missed(&self) {
        self.missed.missed();
    }

    /// The oldest `most` expiries seen.
    pub(super) fn take(&self, most: usize) -> Vec<Seen> {
        let mut queue = self.seen();
        let most = most.min(queue.len());
        queue.drain(..most).collect()
    }

    /// Puts `seen` back first, taken but not claimed.
    pub(super) fn put_back(&self, seen: Vec<Seen>) {
        let mut queue = self.seen();
        for one in seen.into_iter().rev() {
            queue.push_front(one);
        }
    }
}

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

    /// Whether `key` is the mark of these keys' deletions (see the module docs).
    fn is_mark(&self, key: &[u8]) -> bool {
        key == self.prefix().as_bytes()
    }

    /// The lease of `before`, a key deleted unmarked, as an expiry; `None` for an intent.
    fn expired(&self, before: &KeyValue) -> Result<Option<Expired>, EtcdError> {
        Ok(Some(match self {
            Self::Locks(prefix) => Expired {
                kind: Kind::Lock,
                lease: codec::lease(codec::resource(prefix, before.key())?, before)?,
            },
            Self::Holds(keys) if keys.is_intent(before.key()) => return Ok(None),
            Self::Holds(keys) => {
                let hold = keys.decode(before)?;
                Expired {
                    kind: hold.claim.kind().into(),
                    lease: hold.lease,
                }
            }
        }))
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

/// Where the watches pass what they see.
#[derive(Debug, Clone)]
pub(super) struct Seeing {
    /// Names freed.
    pub(super) released: ReleaseFeed,
    /// Leases expired.
    pub(super) expiries: Arc<Expiries>,
}

/// Opens the watches `watches`, each from where it was lost (from now, the first time).
/// Returns the session: a future that passes to `seeing` each name whose key was deleted or
/// rewritten with an earlier expiry, and each expiry, until one of the watches is lost.
pub(super) async fn watch(
    client: Client,
    watches: [Arc<Watch>; 2],
    deadline: Duration,
    seeing: Seeing,
) -> Result<impl Future<Output = ()> + Send + 'static> {
    let [first, second] = watches;
    let one = open(&client, &first, deadline, &seeing.expiries).await?;
    let other = open(&client, &second, deadline, &seeing.expiries).await?;
    Ok(async move {
        tokio::select! {
            () = follow(one, first, seeing.clone()) => {}
            () = follow(other, second, seeing) => {}
        }
    })
}

const DOING: &str = "watch for releases";

/// Makes the watch on the keys of `watch`, from its resume revision on; tells `expiries`
/// if it cannot resume there.
async fn open(
    client: &Client,
    watch: &Watch,
    deadline: Duration,
    expiries: &Expiries,
) -> Result<WatchStream> {
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
        // was missed fall back on the expiry of the lease they wait for; the expiries
        // missed are said to be.
        watch.resume.store(0, Ordering::Release);
        expiries.missed();
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

/// Passes to `seeing` what `stream` shows freed and expired, until it is lost.
async fn follow(mut stream: WatchStream, watch: Arc<Watch>, seeing: Seeing) {
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
        // The revisions of this answer with a mark: their deletions are told by a server.
        let marked: Vec<i64> = (answer.events().iter())
            .filter_map(|event| event.kv().filter(|kv| watch.watched.is_mark(kv.key())))
            .map(KeyValue::mod_revision)
            .collect();
        for event in answer.events() {
            let Some(kv) = event.kv() else { continue };
            watch.resume.store(kv.mod_revision() + 1, Ordering::Release);
            if watch.watched.is_mark(kv.key()) {
                continue;
            }
            let freed = match event.event_type() {
                EventType::Delete => true,
                EventType::Put => event.prev_kv().is_some_and(|before| shortened(before, kv)),
            };
            if !freed {
                continue;
            }
            match watch.watched.freed(kv.key()) {
                Ok(key) => seeing.released.announce(&key),
                Err(e) => tracing::warn!(error = %e, "odd key under {:?}", watch.watched.prefix()),
            }
            let unmarked = event.event_type() == EventType::Delete && !marked.contains(&kv.mod_revision());
            match event
                .prev_kv()
                .filter(|_| unmarked)
                .map(|before| watch.watched.expired(before))
            {
                Some(Ok(Some(expired))) => seeing.expiries.push(Seen {
                    key: kv.key().to_vec(),
                    revision: kv.mod_revision(),
                    expired,
                }),
                Some(Err(e)) => tracing::warn!(error = %e, "an expired lease that cannot be read"),
                Some(Ok(None)) | None => {}
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
