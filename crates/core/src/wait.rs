//! [`Waiters`]: waiting for a busy lock, first come first served, above any store.
//!
//! Each resource with waiters has a queue. Only the head of the queue asks the store; the
//! others wait their turn. The head sleeps until the holder's lease ends (a timer set from
//! the store's answer) or until the store reports a release of that resource, whichever
//! comes first — there is no polling loop. When the head leaves (granted, timed out, or its
//! caller went away), the next waiter becomes head and asks at once.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, broadcast};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::model::{Owner, Resource, Timestamp, Ttl};
use crate::store::{AcquireOutcome, LockStore, ReleaseNotice, Result};

/// Acquires through a store, waiting in line when the lock is busy.
#[derive(Debug, Clone)]
pub struct Waiters {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn LockStore>,
    // Held only for a few queue operations, never across an `.await`.
    queues: Mutex<HashMap<Resource, VecDeque<Place>>>,
    next_id: AtomicU64,
    shutdown: CancellationToken,
}

#[derive(Debug)]
struct Place {
    id: u64,
    wake: Arc<Notify>,
}

impl Waiters {
    /// Waiters over `store`. Must be called within a Tokio runtime: it starts a task that
    /// wakes waiters when the store reports a release.
    pub fn new(store: Arc<dyn LockStore>) -> Self {
        let inner = Arc::new(Inner {
            store,
            queues: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            shutdown: CancellationToken::new(),
        });
        if let Some(releases) = inner.store.releases() {
            tokio::spawn(dispatch_releases(Arc::downgrade(&inner), releases));
        }
        Self { inner }
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn LockStore> {
        &self.inner.store
    }

    /// How many callers are waiting now, over all resources.
    pub fn waiting(&self) -> usize {
        self.inner.queues().values().map(VecDeque::len).sum()
    }

    /// Makes every waiting acquire answer now, as if its wait had run out, and every later
    /// one answer without waiting. For shutting down.
    pub fn shut_down(&self) {
        self.inner.shutdown.cancel();
    }

    /// Acquires `resource` for `owner`; if another owner holds it, waits up to `wait` in
    /// first-come first-served order among the waiters of this [`Waiters`].
    ///
    /// With `wait` zero this is one try and does not queue: a try may take a lock that was
    /// freed an instant before the head of the queue asked for it.
    pub async fn acquire(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<AcquireOutcome> {
        let store = &self.inner.store;
        if wait.is_zero() || self.inner.shutdown.is_cancelled() {
            return store.acquire(resource, owner, ttl).await;
        }
        // A wait too long to add to the clock (centuries) is as good as forever; a year will do.
        const FOREVER: Duration = Duration::from_secs(365 * 86_400);
        let now = Instant::now();
        let deadline = now.checked_add(wait).unwrap_or(now + FOREVER);
        let place = InLine::join(&self.inner, resource);
        loop {
            if !place.is_head() {
                tokio::select! {
                    () = place.wake.notified() => continue,
                    () = sleep_until(deadline) => break,
                    () = self.inner.shutdown.cancelled() => break,
                }
            }
            let outcome = store.acquire(resource, owner, ttl).await?;
            let AcquireOutcome::Held { expires_in, .. } = &outcome else {
                return Ok(outcome);
            };
            let now = Instant::now();
            if now >= deadline || self.inner.shutdown.is_cancelled() {
                return Ok(outcome);
            }
            // Ask again when the holder's lease ends, when it is released, or, for a last
            // try, when our wait runs out.
            tokio::select! {
                () = place.wake.notified() => {}
                () = sleep_until((now + *expires_in).min(deadline)) => {}
                () = self.inner.shutdown.cancelled() => {}
            }
        }
        // Our wait ran out before our turn came: report who holds the lock. If nobody does
        // at this instant (it is being handed to the head), a last try is fair.
        drop(place);
        match store.get(resource).await? {
            Some(holder) => Ok(AcquireOutcome::Held {
                expires_in: holder.expires_at.since(Timestamp::now_wall()),
                holder,
            }),
            None => store.acquire(resource, owner, ttl).await,
        }
    }
}

impl Inner {
    fn queues(&self) -> MutexGuard<'_, HashMap<Resource, VecDeque<Place>>> {
        // Queue operations cannot panic half-way, so a poisoned lock is still consistent.
        self.queues
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn wake_head(&self, resource: &Resource) {
        if let Some(head) = self.queues().get(resource).and_then(VecDeque::front) {
            head.wake.notify_one();
        }
    }

    fn wake_all_heads(&self) {
        for head in self.queues().values().filter_map(VecDeque::front) {
            head.wake.notify_one();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A caller's place in the queue of one resource; leaving it (on drop) wakes the next.
struct InLine<'a> {
    inner: &'a Inner,
    resource: Resource,
    id: u64,
    wake: Arc<Notify>,
}

impl<'a> InLine<'a> {
    fn join(inner: &'a Inner, resource: &Resource) -> Self {
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        inner
            .queues()
            .entry(resource.clone())
            .or_default()
            .push_back(Place {
                id,
                wake: wake.clone(),
            });
        Self {
            inner,
            resource: resource.clone(),
            id,
            wake,
        }
    }

    fn is_head(&self) -> bool {
        self.inner
            .queues()
            .get(&self.resource)
            .and_then(VecDeque::front)
            .is_some_and(|head| head.id == self.id)
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        let mut queues = self.inner.queues();
        let Some(queue) = queues.get_mut(&self.resource) else {
            return;
        };
        let was_head = queue.front().is_some_and(|head| head.id == self.id);
        queue.retain(|place| place.id != self.id);
        match queue.front() {
            None => {
                queues.remove(&self.resource);
            }
            Some(next) if was_head => next.wake.notify_one(),
            Some(_) => {}
        }
    }
}

async fn dispatch_releases(inner: std::sync::Weak<Inner>, mut releases: broadcast::Receiver<ReleaseNotice>) {
    let Some(shutdown) = inner.upgrade().map(|i| i.shutdown.clone()) else {
        return;
    };
    loop {
        let received = tokio::select! {
            received = releases.recv() => received,
            () = shutdown.cancelled() => return,
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match received {
            Ok(ReleaseNotice::Released(resource)) => inner.wake_head(&resource),
            // Some notices were lost: wake every head, each asks the store once more.
            Ok(ReleaseNotice::Missed) | Err(broadcast::error::RecvError::Lagged(_)) => inner.wake_all_heads(),
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Clock, ManualClock, MemoryStore};

    fn names(resource: &str, owner: &str) -> (Resource, Owner) {
        (Resource::new(resource).unwrap(), Owner::new(owner).unwrap())
    }

    #[tokio::test]
    async fn a_wait_too_long_for_the_clock_does_not_panic() {
        let store = Arc::new(MemoryStore::new());
        let waiters = Waiters::new(store);
        let (r, o) = names("r", "a");
        let ttl = Ttl::from_millis(1000, Ttl::DEFAULT_MAX).unwrap();
        let outcome = waiters.acquire(&r, &o, ttl, Duration::MAX).await.unwrap();
        assert!(matches!(outcome, AcquireOutcome::Granted { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn the_head_wakes_at_the_holders_expiry_without_polling() {
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_000_000)));
        let store = Arc::new(MemoryStore::with_clock(clock.clone()));
        let waiters = Waiters::new(store.clone());
        let ttl = Ttl::from_millis(5_000, Ttl::DEFAULT_MAX).unwrap();
        let (r, a) = names("r", "a");
        let (_, b) = names("r", "b");
        assert!(matches!(
            store.acquire(&r, &a, ttl).await.unwrap(),
            AcquireOutcome::Granted { .. }
        ));
        let waiting = {
            let (waiters, r, b) = (waiters.clone(), r.clone(), b.clone());
            tokio::spawn(async move { waiters.acquire(&r, &b, ttl, Duration::from_secs(60)).await })
        };
        // Let the waiter ask once and go to sleep until the holder's expiry.
        while waiters.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(4_999)).await;
        assert!(!waiting.is_finished());
        // The store's clock passes the expiry together with the timer.
        clock.advance(Duration::from_millis(5_000));
        let outcome = waiting.await.unwrap().unwrap();
        let AcquireOutcome::Granted { lease, .. } = outcome else {
            panic!("expected a grant, got {outcome:?}");
        };
        assert_eq!(lease.owner, b);
        assert_eq!(lease.acquired_at, clock.now());
    }
}
