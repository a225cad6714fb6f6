//! [`Waiters`]: waiting for a busy lock, semaphore or read-write lock, first come first
//! served, above any store.
//!
//! Each name with waiters has one queue, whatever each waiter asks for, so that a writer is
//! not overtaken by readers that came after it. Only the head of the queue asks the store; the
//! others wait their turn. The head sleeps until what stands in its way ends (a timer set from
//! the store's answer) or until the store reports a release on that name, whichever comes
//! first — there is no polling loop. (A writer at the head also asks again every second, to
//! keep alive the intent that holds back later readers on every server: see
//! [`Waiters::acquire_hold_unless`].) While a name has waiters, its line keeps the store's
//! watch on it ([`LockStore::watch`]), set when the store first refuses its head (who then
//! asks again at once, in case the name changed in between), so that a store that watches
//! names one by one hears other servers' changes of it; a lock that is free costs no watch.
//! The store's feed also reports a lease renewed or extended to end sooner, and a lease purged
//! after its expiry, so the head never sleeps through a lock that became free. When the head leaves (granted, timed out, or its caller
//! went away), the next waiter becomes head and asks at once.
//!
//! A waiter holds its caller's connection for as long as it waits, so the number of waiters
//! is bounded ([`Waiters::with_limit`]): past the bound, an acquire is one try, answered at
//! once, and renewals and releases never queue behind waiters.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, OnceCell, broadcast};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::deadlock::{Cycle, Deadlock, WaitGraph};
use crate::hold::{Claim, HoldKind, HoldOutcome, Key};
use crate::model::{Meta, Owner, Resource, Resources, Terms, Timestamp, Ttl};
use crate::store::{AcquireAllOutcome, AcquireOutcome, LockStore, ReleaseNotice, Result, StoreError, Watch};

/// A wait with no end, for all practical purposes (some ten years): waits longer than this
/// are this, which keeps deadline arithmetic on `Instant` from overflowing. One value for
/// the waiters, the client and the commands.
pub const FOREVER: Duration = Duration::from_secs(10 * 365 * 86_400);

/// Acquires through a store, waiting in line when the lock is busy.
#[derive(Debug, Clone)]
pub struct Waiters {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn LockStore>,
    // Held only for a few queue operations, never across an `.await`.
    lines: Mutex<Lines>,
    next_id: AtomicU64,
    /// How many callers wait now, over all resources.
    waiting: AtomicUsize,
    /// The most callers that may wait at once.
    limit: usize,
    shutdown: CancellationToken,
}

/// The queue of each name with waiters, and who waits for whom.
#[derive(Debug, Default)]
struct Lines {
    queues: HashMap<Key, Line>,
    graph: WaitGraph,
}

/// The waiters of one name, in their order, and the store's watch on it, kept while the
/// name has waiters (so that a store that watches names one by one hears its changes): set
/// by the first head the store refuses.
#[derive(Debug)]
struct Line {
    places: VecDeque<Place>,
    watch: Arc<OnceCell<Watch>>,
}

impl Line {
    fn head(&self) -> Option<&Place> {
        self.places.front()
    }
}

#[derive(Debug)]
struct Place {
    id: u64,
    wake: Arc<Notify>,
    /// Who waits, for what, since when and until when: what [`Waiters::waiting_on`] shows.
    waiting: Arc<Waiting>,
}

/// A caller waiting in the line of a name, as [`Waiters::waiting_on`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Who waits.
    pub owner: Owner,
    /// What it asks for: a permit or a mode of a read-write lock; `None` for a lock.
    pub claim: Option<Claim>,
    /// When it joined the line, by this server's wall clock.
    pub since: Timestamp,
    /// When it gives up, by the same clock.
    pub until: Timestamp,
}

impl Waiters {
    /// Waiters over `store`, as many as come. Must be called within a Tokio runtime: it
    /// starts a task that wakes waiters when the store reports a release.
    pub fn new(store: Arc<dyn LockStore>) -> Self {
        Self::with_limit(store, usize::MAX)
    }

    /// Waiters over `store`, at most `limit` at once: an acquire that finds `limit` callers
    /// waiting makes one try and answers at once (a server keeps its waiters below its
    /// connection limit this way, so that holders can always renew and release).
    pub fn with_limit(store: Arc<dyn LockStore>, limit: usize) -> Self {
        let inner = Arc::new(Inner {
            store,
            lines: Mutex::new(Lines::default()),
            next_id: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            limit,
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
        self.inner.waiting.load(Ordering::Relaxed)
    }

    /// Who waits in the line of `key` now, in their order (the head first). Only this
    /// server's waiters: those of other servers sharing the store wait in their own lines.
    pub fn waiting_on(&self, key: &Key) -> Vec<Waiting> {
        self.inner
            .lines()
            .queues
            .get(key)
            .map(|line| line.places.iter().map(|place| (*place.waiting).clone()).collect())
            .unwrap_or_default()
    }

    /// Makes every waiting acquire answer now, as if its wait had run out, and every later
    /// one answer without waiting. For shutting down.
    pub fn shut_down(&self) {
        self.inner.shutdown.cancel();
    }

    /// Completes once [`shut_down`](Self::shut_down) is called (at once if it was).
    pub async fn shutting_down(&self) {
        self.inner.shutdown.cancelled().await;
    }

    /// Acquires `resource` for `owner`; if another owner holds it, waits up to `wait` in
    /// first-come first-served order among the waiters of this [`Waiters`].
    ///
    /// With `wait` zero, or with as many callers waiting as the limit allows, this is one
    /// try and does not queue: a try may take a lock that was freed an instant before the
    /// head of the queue asked for it.
    pub async fn acquire(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<AcquireOutcome> {
        self.acquire_unless(resource, owner, &Terms::ttl(ttl), wait, &CancellationToken::new())
            .await
            .map(|acquired| acquired.outcome)
    }

    /// [`acquire`](Self::acquire) on `terms`, which stops waiting when `gone` is cancelled
    /// (its caller went away) as if its wait had run out. Unlike dropping the future,
    /// cancelling never interrupts a call to the store: the outcome of a call under way is
    /// returned, so that a grant made meanwhile can be logged and given back. Says whether
    /// the acquire waited, for the server's contention metrics.
    ///
    /// A wait that would close a cycle of owners waiting for each other is refused with
    /// [`StoreError::Deadlock`] (see [`crate::deadlock`]); nothing the caller holds is
    /// released.
    pub async fn acquire_unless(
        &self,
        resource: &Resource,
        owner: &Owner,
        terms: &Terms,
        wait: Duration,
        gone: &CancellationToken,
    ) -> Result<Acquired> {
        let store = &self.inner.store;
        self.line_up(
            || vec![Key::lock(resource)],
            owner,
            None,
            wait,
            gone,
            None,
            |in_line| async move {
                let outcome = store.acquire_with(resource, owner, terms.clone()).await?;
                // Only the head of a line tells the wait-for graph whom it found: a try's
                // finding would be thrown away (and cost a try four allocations).
                let found = if in_line {
                    vec![(Key::lock(resource), holder_of(&outcome, owner))]
                } else {
                    Vec::new()
                };
                Ok(Try {
                    retry_in: outcome.retry_in(),
                    outcome,
                    found,
                })
            },
        )
        .await
    }

    /// Acquires every lock of `resources` or none, as [`LockStore::acquire_all`] does; if
    /// some are held by others, waits up to `wait` for all of them at once. The caller waits
    /// in the line of every one of its locks and asks the store when it is at the head of
    /// all of them (lines are joined in one step, so two such callers are in the same order
    /// in every line they share and never wait for each other).
    pub async fn acquire_all_unless(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: &Terms,
        wait: Duration,
        gone: &CancellationToken,
    ) -> Result<Acquired<AcquireAllOutcome>> {
        let store = &self.inner.store;
        let keys = || resources.as_slice().iter().map(Key::lock).collect();
        self.line_up(keys, owner, None, wait, gone, None, |in_line| async move {
            let outcome = store.acquire_all(resources, owner, terms.clone()).await?;
            let found = if !in_line {
                Vec::new()
            } else {
                match &outcome {
                    AcquireAllOutcome::Granted(_) => resources
                        .as_slice()
                        .iter()
                        .map(|r| (Key::lock(r), vec![owner.clone()]))
                        .collect(),
                    AcquireAllOutcome::Refused(refusals) => {
                        let mut found: Vec<(Key, Vec<Owner>)> = resources
                            .as_slice()
                            .iter()
                            .map(|r| (Key::lock(r), Vec::new()))
                            .collect();
                        for refusal in refusals {
                            if let AcquireOutcome::Held { holder, .. } = refusal
                                && let Some((_, holders)) =
                                    found.iter_mut().find(|(k, _)| k.name == holder.resource)
                            {
                                holders.push(holder.owner.clone());
                            }
                        }
                        found
                    }
                }
            };
            Ok(Try {
                retry_in: outcome.retry_in(),
                outcome,
                found,
            })
        })
        .await
    }

    /// Acquires a hold of `claim` on the semaphore or read-write lock `name`, waiting as
    /// [`acquire_unless`](Self::acquire_unless) does when it is busy. A writer at the head of
    /// the line records its intent in the store and renews it while it waits (so that readers
    /// arriving later, on any server sharing the store, wait behind it), and withdraws it if
    /// it gives up. The hold gets `meta` as [`LockStore::acquire_hold_with`] gives it.
    #[allow(clippy::too_many_arguments)]
    pub async fn acquire_hold_unless(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        meta: Option<&Meta>,
        wait: Duration,
        gone: &CancellationToken,
    ) -> Result<Acquired<HoldOutcome>> {
        let store = &self.inner.store;
        let intended = AtomicBool::new(false);
        let writer = claim == Claim::Write;
        let refresh = writer.then_some(INTENT_REFRESH);
        let intended_ref = &intended;
        let acquired = self
            .line_up(
                || vec![Key::hold(claim.kind(), name)],
                owner,
                Some(claim),
                wait,
                gone,
                refresh,
                |in_line| async move {
                    let intent = (writer && in_line).then_some(INTENT_TTL);
                    intended_ref.fetch_or(intent.is_some(), Ordering::Relaxed);
                    let outcome = store
                        .acquire_hold_with(name, owner, claim, ttl, intent, meta)
                        .await?;
                    let retry_in = match &outcome {
                        HoldOutcome::Busy(busy) => Some(busy.retry_in),
                        HoldOutcome::Granted { .. }
                        | HoldOutcome::Extended(_)
                        | HoldOutcome::LimitMismatch { .. } => None,
                    };
                    // Only the head of a line tells the wait-for graph whom it found.
                    let found = if in_line {
                        let holders = match &outcome {
                            // A writer may be a reader waiting to upgrade: the refusal names only
                            // the others, so ask who holds the name, the caller included, for the
                            // graph (two readers upgrading at once wait for each other).
                            HoldOutcome::Busy(busy) if writer => {
                                match store.holds(HoldKind::RwLock, name).await {
                                    Ok(holds) => holds.into_iter().map(|h| h.lease.owner).collect(),
                                    Err(_) => busy.holders.iter().map(|h| h.lease.owner.clone()).collect(),
                                }
                            }
                            HoldOutcome::Busy(busy) => {
                                busy.holders.iter().map(|h| h.lease.owner.clone()).collect()
                            }
                            HoldOutcome::Granted { .. } | HoldOutcome::Extended(_) => vec![owner.clone()],
                            HoldOutcome::LimitMismatch { .. } => Vec::new(),
                        };
                        vec![(Key::hold(claim.kind(), name), holders)]
                    } else {
                        Vec::new()
                    };
                    Ok(Try {
                        outcome,
                        retry_in,
                        found,
                    })
                },
            )
            .await;
        let granted = matches!(
            &acquired,
            Ok(Acquired {
                outcome: HoldOutcome::Granted { .. } | HoldOutcome::Extended(_),
                ..
            })
        );
        if intended.load(Ordering::Relaxed) && !granted {
            // Readers held back by our intent need not wait for it to run out. Should this
            // fail, the intent ends by itself within INTENT_TTL.
            let _ = store.withdraw_intent(name, owner).await;
        }
        acquired
    }

    /// The waiting line shared by every kind: `attempt(in_line)` asks the store once and
    /// says when asking again may be answered otherwise (`retry_in` `None`: done), and, when
    /// `in_line`, who it found holding each of `keys`. `in_line` is true for a try made by the
    /// head of the line while it still means to wait; `refresh`, if given, is how often the
    /// head asks again at the latest (to renew a writer's intent).
    ///
    /// A try (no wait, or no room in line) neither makes the `keys` nor touches the lines or
    /// the graph: it is the store's call and nothing more. `claim` is what a waiter of a
    /// semaphore or read-write lock asks for, as [`Waiters::waiting_on`] shows it.
    #[allow(clippy::too_many_arguments)]
    async fn line_up<T, F, Fut>(
        &self,
        keys: impl FnOnce() -> Vec<Key>,
        owner: &Owner,
        claim: Option<Claim>,
        wait: Duration,
        gone: &CancellationToken,
        refresh: Option<Duration>,
        attempt: F,
    ) -> Result<Acquired<T>>
    where
        F: Fn(bool) -> Fut,
        Fut: Future<Output = Result<Try<T>>>,
    {
        let stop = || self.inner.shutdown.is_cancelled() || gone.is_cancelled();
        let at_once = |tried: Try<T>| Acquired {
            outcome: tried.outcome,
            waited: false,
        };
        if wait.is_zero() || stop() {
            return attempt(false).await.map(at_once);
        }
        let keys = keys();
        let since = Timestamp::now_wall();
        let waiting = Waiting {
            owner: owner.clone(),
            claim,
            since,
            until: Timestamp::from_millis(
                since
                    .as_millis()
                    .saturating_add(u64::try_from(wait.min(FOREVER).as_millis()).unwrap_or(u64::MAX)),
            ),
        };
        let Some((place, closed)) = InLine::join(&self.inner, &keys, waiting) else {
            return attempt(false).await.map(at_once);
        };
        if let Some(cycle) = closed {
            place.confirm(cycle).await?;
        }
        // A wait too long to add to the clock (centuries) is as good as forever.
        let now = Instant::now();
        let deadline = now.checked_add(wait).unwrap_or(now + FOREVER);
        let mut waited = false;
        loop {
            place.give_up().await?;
            if !place.is_head() {
                waited = true;
                tokio::select! {
                    () = place.wake.notified() => continue,
                    () = sleep_until(deadline) => break,
                    () = self.inner.shutdown.cancelled() => break,
                    () = gone.cancelled() => break,
                }
            }
            let tried = attempt(true).await?;
            place.found(tried.found);
            let Some(retry_in) = tried.retry_in else {
                return Ok(Acquired {
                    outcome: tried.outcome,
                    waited,
                });
            };
            let now = Instant::now();
            if now >= deadline || stop() {
                return Ok(Acquired {
                    outcome: tried.outcome,
                    waited,
                });
            }
            place.give_up().await?;
            waited = true;
            // Refused: from now on, hear of changes of the names on other servers too. A watch
            // set only now may have missed a change since the try, so ask again at once.
            let watching = tokio::select! {
                newly = place.watch() => Some(newly),
                () = sleep_until(deadline) => None,
                () = self.inner.shutdown.cancelled() => None,
                () = gone.cancelled() => None,
            };
            match watching {
                None => break,
                Some(true) => continue,
                Some(false) => {}
            }
            // Ask again when what stands in the way ends, when the store says it may have
            // ended sooner, when an intent needs renewing, or, for a last try, when our wait
            // runs out.
            let mut wake_at = (now + retry_in).min(deadline);
            if let Some(refresh) = refresh {
                wake_at = wake_at.min(now + refresh);
            }
            tokio::select! {
                () = place.wake.notified() => {}
                () = sleep_until(wake_at) => {}
                () = self.inner.shutdown.cancelled() => {}
                () = gone.cancelled() => {}
            }
        }
        // Our wait ran out before our turn came. One last try: it reports the holder (with its
        // time left by the store's clock) or, if nobody holds the lock at this instant (it is
        // being handed to the head), takes it, which is fair.
        drop(place);
        let tried = attempt(false).await?;
        Ok(Acquired {
            outcome: tried.outcome,
            waited: true,
        })
    }
}

/// One try of a waiter: the store's answer, when asking again may be answered otherwise
/// (`None`: done), and, for the head of a line, who holds each name it asked for (for the
/// wait-for graph).
struct Try<T> {
    outcome: T,
    retry_in: Option<Duration>,
    found: Vec<(Key, Vec<Owner>)>,
}

/// Who holds `key` now, by the store.
async fn holders(store: &dyn LockStore, key: &Key) -> Result<Vec<Owner>> {
    Ok(match key.kind.hold_kind() {
        None => store
            .get(&key.name)
            .await?
            .map(|lease| lease.owner)
            .into_iter()
            .collect(),
        Some(kind) => store
            .holds(kind, &key.name)
            .await?
            .into_iter()
            .map(|hold| hold.lease.owner)
            .collect(),
    })
}

/// Who holds a lock, as an acquire of it found: the caller once granted, nobody when the
/// lock-delay closes it.
fn holder_of(outcome: &AcquireOutcome, owner: &Owner) -> Vec<Owner> {
    match outcome {
        AcquireOutcome::Held { holder, .. } => vec![holder.owner.clone()],
        AcquireOutcome::Granted { .. } | AcquireOutcome::Extended(_) => vec![owner.clone()],
        AcquireOutcome::Delayed { .. } => Vec::new(),
    }
}

/// The refusal of a wait on `keys` by `owner` that would close `cycle`, logged once here,
/// with the whole cycle (the caller may be told less of it).
fn deadlock(keys: &[Key], owner: &Owner, cycle: Cycle) -> StoreError {
    tracing::warn!(
        target: "fencelock::deadlock",
        owner = %owner,
        names = ?keys.iter().map(|k| format!("{} {}", k.kind, k.name)).collect::<Vec<_>>(),
        cycle = %cycle,
        "deadlock detected: the wait that would close the cycle is refused"
    );
    StoreError::Deadlock(Deadlock::Found(cycle))
}

/// How long a waiting writer's intent lasts unless renewed: long enough to outlive a slow
/// store call, short enough that readers are not held back long by a server that died.
pub const INTENT_TTL: Ttl = Ttl::from_const_millis(3_000);

/// How often the head of a line of writers renews its intent.
const INTENT_REFRESH: Duration = Duration::from_secs(1);

/// What [`Waiters::acquire_unless`] answers: the store's last answer, and whether the caller
/// had to wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired<T = AcquireOutcome> {
    /// The outcome of the last try.
    pub outcome: T,
    /// The acquire waited in line: it found the lock held (or others waiting before it) and
    /// was not answered by its first try. A single try (`wait` zero, no room to wait, shutting
    /// down) never waited, and neither did one granted at its first try.
    pub waited: bool,
}

impl Inner {
    fn lines(&self) -> MutexGuard<'_, Lines> {
        // Queue operations cannot panic half-way, so a poisoned lock is still consistent.
        self.lines.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn wake_head(&self, key: &Key) {
        if let Some(head) = self.lines().queues.get(key).and_then(Line::head) {
            head.wake.notify_one();
        }
    }

    fn wake_all_heads(&self) {
        for head in self.lines().queues.values().filter_map(Line::head) {
            head.wake.notify_one();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A caller's place in the queue of each name it waits for; leaving them (on drop) wakes
/// the next in each line it headed.
struct InLine<'a> {
    inner: &'a Inner,
    /// The store's watch on each of `keys`, in their order.
    watches: Vec<Arc<OnceCell<Watch>>>,
    keys: Vec<Key>,
    owner: Owner,
    id: u64,
    wake: Arc<Notify>,
}

impl<'a> InLine<'a> {
    /// Joins the end of the line of every one of `keys`, in one step, with the cycle of
    /// waiting owners this closes, if it does; `None` if as many callers wait as the limit
    /// allows.
    fn join(inner: &'a Inner, keys: &[Key], waiting: Waiting) -> Option<(Self, Option<Cycle>)> {
        inner
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < inner.limit).then_some(n + 1)
            })
            .ok()?;
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        let owner = waiting.owner.clone();
        let waiting = Arc::new(waiting);
        let mut watches = Vec::with_capacity(keys.len());
        let mut lines = inner.lines();
        let closed = lines.graph.join(id, &owner, keys);
        for key in keys {
            let line = lines.queues.entry(key.clone()).or_insert_with(|| Line {
                places: VecDeque::new(),
                watch: Arc::default(),
            });
            line.places.push_back(Place {
                id,
                wake: wake.clone(),
                waiting: waiting.clone(),
            });
            watches.push(line.watch.clone());
        }
        drop(lines);
        let place = Self {
            inner,
            watches,
            keys: keys.to_vec(),
            owner,
            id,
            wake,
        };
        Some((place, closed))
    }

    /// Has the store watch each name of this caller's lines, unless one did already: from
    /// then on, its changes on other servers wake the head. Says whether a watch was set
    /// now (not one the store keeps nothing for).
    async fn watch(&self) -> bool {
        let mut newly = false;
        for (key, watch) in self.keys.iter().zip(&self.watches) {
            if !watch.initialized() {
                newly |= watch.get_or_init(|| self.inner.store.watch(key)).await.is_set();
            }
        }
        newly
    }

    /// Whether this caller heads every line it is in.
    fn is_head(&self) -> bool {
        let lines = self.inner.lines();
        self.keys.iter().all(|key| {
            lines
                .queues
                .get(key)
                .and_then(Line::head)
                .is_some_and(|head| head.id == self.id)
        })
    }

    /// Records who a try found holding each name, and tells the waiters this puts on a
    /// cycle to give up.
    fn found(&self, found: Vec<(Key, Vec<Owner>)>) {
        let mut lines = self.inner.lines();
        let mut told = Vec::new();
        for (key, holders) in found {
            told.extend(lines.graph.observe(&key, holders));
        }
        for id in told.into_iter().filter(|id| *id != self.id) {
            let wake = lines
                .queues
                .values()
                .flat_map(|line| &line.places)
                .find(|place| place.id == id)
                .map(|place| place.wake.clone());
            if let Some(wake) = wake {
                wake.notify_one();
            }
        }
    }

    /// `Err` if this caller was told to give up, its wait being on a cycle the store
    /// confirms.
    async fn give_up(&self) -> Result<()> {
        let verdict = self.inner.lines().graph.verdict(self.id);
        match verdict {
            Some(cycle) => self.confirm(cycle).await,
            None => Ok(()),
        }
    }

    /// `Err` with the deadlock if the store says every name on `cycle` is still held by the
    /// owner the graph believes; otherwise records who holds them now (which may show
    /// another cycle) and lets the caller wait on.
    async fn confirm(&self, cycle: Cycle) -> Result<()> {
        let mut stale = Vec::new();
        for wait in cycle.waits() {
            let holders = holders(&*self.inner.store, &wait.key).await?;
            if !holders.contains(&wait.holder) {
                stale.push((wait.key.clone(), holders));
            }
        }
        if stale.is_empty() {
            return Err(deadlock(&self.keys, &self.owner, cycle));
        }
        self.found(stale);
        Ok(())
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.inner.waiting.fetch_sub(1, Ordering::AcqRel);
        let mut lines = self.inner.lines();
        lines.graph.leave(self.id);
        for key in &self.keys {
            let Some(line) = lines.queues.get_mut(key) else {
                continue;
            };
            let was_head = line.head().is_some_and(|head| head.id == self.id);
            line.places.retain(|place| place.id != self.id);
            match line.head() {
                None => {
                    lines.queues.remove(key);
                }
                Some(next) if was_head => next.wake.notify_one(),
                Some(_) => {}
            }
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
            Ok(ReleaseNotice::Freed(key)) => inner.wake_head(&key),
            // Some notices were lost: wake every head, each asks the store once more.
            Ok(ReleaseNotice::Missed) | Err(broadcast::error::RecvError::Lagged(_)) => inner.wake_all_heads(),
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Clock, ManualClock, MemoryStore, RenewOutcome, Timestamp, TokioClock};

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

    /// A store on Tokio's (paused) time with `a` holding `r` for `ttl_ms`, and waiters over it.
    async fn held(ttl_ms: u64, limit: usize) -> (Arc<TokioClock>, Arc<MemoryStore>, Waiters) {
        let clock = Arc::new(TokioClock::new(Timestamp::from_millis(1_000_000)));
        let store = Arc::new(MemoryStore::with_clock(clock.clone()));
        let waiters = Waiters::with_limit(store.clone(), limit);
        let (r, a) = names("r", "a");
        let ttl = Ttl::from_millis(ttl_ms, Ttl::DEFAULT_MAX).unwrap();
        assert!(matches!(
            store.acquire(&r, &a, ttl).await.unwrap(),
            AcquireOutcome::Granted { .. }
        ));
        (clock, store, waiters)
    }

    fn wait_for(
        waiters: &Waiters,
        owner: &str,
        wait: Duration,
    ) -> tokio::task::JoinHandle<Result<AcquireOutcome>> {
        let (waiters, (r, o)) = (waiters.clone(), names("r", owner));
        let ttl = Ttl::from_millis(1_000, Ttl::DEFAULT_MAX).unwrap();
        tokio::spawn(async move { waiters.acquire(&r, &o, ttl, wait).await })
    }

    async fn until_waiting(waiters: &Waiters, n: usize) {
        while waiters.waiting() < n {
            tokio::task::yield_now().await;
        }
        // Let the head ask the store and go to sleep.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_shortens_the_lease_wakes_the_head() {
        let (clock, store, waiters) = held(60_000, usize::MAX).await;
        let waiting = wait_for(&waiters, "b", Duration::from_secs(50));
        until_waiting(&waiters, 1).await;
        let (r, a) = names("r", "a");
        let short = Ttl::from_millis(300, Ttl::DEFAULT_MAX).unwrap();
        assert!(matches!(
            store.renew(&r, &a, short, None).await.unwrap(),
            RenewOutcome::Renewed(_)
        ));
        // The head hears of the renewal and sleeps until the new expiry, not the old one:
        // paused time runs to it, and the store's clock with it.
        let started = Instant::now();
        let outcome = waiting.await.unwrap().unwrap();
        assert!(
            matches!(&outcome, AcquireOutcome::Granted { lease, .. } if lease.acquired_at == clock.now()),
            "{outcome:?}"
        );
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(300),
            "woken at the new expiry"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_limit_an_acquire_does_not_wait() {
        let (_, _, waiters) = held(60_000, 1).await;
        let first = wait_for(&waiters, "b", Duration::from_secs(30));
        until_waiting(&waiters, 1).await;
        let started = Instant::now();
        let second = wait_for(&waiters, "c", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(second, AcquireOutcome::Held { .. }), "{second:?}");
        assert_eq!(started.elapsed(), Duration::ZERO, "answered at once");
        assert_eq!(waiters.waiting(), 1);
        assert!(!first.is_finished(), "the first still waits");
        first.abort();
        let _ = first.await;
        assert_eq!(waiters.waiting(), 0, "a caller that went away frees its place");
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_gone_stops_waiting_and_gets_the_holder() {
        let (_, _, waiters) = held(60_000, usize::MAX).await;
        let gone = CancellationToken::new();
        let waiting = {
            let (waiters, gone, (r, b)) = (waiters.clone(), gone.clone(), names("r", "b"));
            let ttl = Ttl::from_millis(1_000, Ttl::DEFAULT_MAX).unwrap();
            tokio::spawn(async move {
                waiters
                    .acquire_unless(&r, &b, &Terms::ttl(ttl), Duration::from_secs(30), &gone)
                    .await
            })
        };
        until_waiting(&waiters, 1).await;
        gone.cancel();
        let Acquired { outcome, waited } = waiting.await.unwrap().unwrap();
        assert!(waited, "it found the lock held and waited");
        assert!(
            matches!(&outcome, AcquireOutcome::Held { holder, .. } if holder.owner.as_str() == "a"),
            "{outcome:?}"
        );
        assert_eq!(waiters.waiting(), 0);
    }

    fn hold_for(
        waiters: &Waiters,
        owner: &str,
        claim: Claim,
        wait: Duration,
    ) -> tokio::task::JoinHandle<Result<HoldOutcome>> {
        let (waiters, (name, o)) = (waiters.clone(), names("rw", owner));
        let ttl = Ttl::from_millis(60_000, Ttl::DEFAULT_MAX).unwrap();
        tokio::spawn(async move {
            let gone = CancellationToken::new();
            let acquired = waiters
                .acquire_hold_unless(&name, &o, claim, ttl, None, wait, &gone)
                .await?;
            Ok(acquired.outcome)
        })
    }

    /// A store on paused time where `a` holds a read hold on `rw`, and waiters over it.
    async fn read_held() -> (Arc<MemoryStore>, Waiters) {
        let clock = Arc::new(TokioClock::new(Timestamp::from_millis(1_000_000)));
        let store = Arc::new(MemoryStore::with_clock(clock));
        let waiters = Waiters::new(store.clone());
        let outcome = hold_for(&waiters, "a", Claim::Read, Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(outcome, HoldOutcome::Granted { .. }), "{outcome:?}");
        (store, waiters)
    }

    async fn try_read(store: &MemoryStore, who: &str) -> HoldOutcome {
        let (name, o) = names("rw", who);
        let ttl = Ttl::from_millis(1_000, Ttl::DEFAULT_MAX).unwrap();
        store
            .acquire_hold(&name, &o, Claim::Read, ttl, None)
            .await
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_writer_goes_before_readers_that_came_after_it() {
        let (store, waiters) = read_held().await;
        let writer = hold_for(&waiters, "w", Claim::Write, Duration::from_secs(60));
        until_waiting(&waiters, 1).await;
        let later = hold_for(&waiters, "c", Claim::Read, Duration::from_secs(60));
        until_waiting(&waiters, 2).await;
        let (name, a) = names("rw", "a");
        store
            .release_hold(crate::HoldKind::RwLock, &name, &a, None)
            .await
            .unwrap();
        let granted = writer.await.unwrap().unwrap();
        let HoldOutcome::Granted { hold: w, .. } = granted else {
            panic!("the writer first: {granted:?}");
        };
        until_waiting(&waiters, 1).await;
        assert!(!later.is_finished(), "the later reader waits behind the writer");
        store
            .release_hold(crate::HoldKind::RwLock, &name, &w.lease.owner, None)
            .await
            .unwrap();
        let read = later.await.unwrap().unwrap();
        assert!(
            matches!(&read, HoldOutcome::Granted { hold, .. } if hold.lease.token > w.lease.token),
            "{read:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_writer_keeps_its_intent_alive_while_it_waits_and_withdraws_it_when_it_gives_up() {
        let (store, waiters) = read_held().await;
        let writer = hold_for(&waiters, "w", Claim::Write, Duration::from_secs(10));
        until_waiting(&waiters, 1).await;
        // Well past INTENT_TTL, a reader from elsewhere (another server's) is still held back.
        tokio::time::sleep(Duration::from_secs(7)).await;
        let refused = try_read(&store, "x").await;
        assert!(
            matches!(&refused, HoldOutcome::Busy(busy) if busy.writer_waits),
            "{refused:?}"
        );
        let gave_up = writer.await.unwrap().unwrap();
        assert!(matches!(gave_up, HoldOutcome::Busy(_)), "{gave_up:?}");
        // Withdrawn at once, not left to run out.
        let read = try_read(&store, "x").await;
        assert!(matches!(read, HoldOutcome::Granted { .. }), "{read:?}");
    }

    /// Counts the acquires a store is asked for.
    #[derive(Debug, Default)]
    struct CountAcquires(AtomicUsize);

    impl crate::Layer for CountAcquires {
        fn around<T: Send>(
            &self,
            call: crate::Call,
            _: crate::Names<'_>,
            inner: impl Future<Output = Result<T>> + Send,
        ) -> impl Future<Output = Result<T>> + Send {
            if call == crate::Call::Acquire {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
            inner
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_release_wakes_exactly_one_of_many_waiters() {
        const WAITERS: usize = 1_000;
        let clock = Arc::new(TokioClock::new(Timestamp::from_millis(1_000_000)));
        let store = Arc::new(crate::Layered::new(
            MemoryStore::with_clock(clock),
            CountAcquires::default(),
        ));
        let waiters = Waiters::new(store.clone());
        let (r, a) = names("r", "a");
        let ttl = Ttl::from_millis(3_600_000, Ttl::DEFAULT_MAX).unwrap();
        let AcquireOutcome::Granted { lease, .. } = store.acquire(&r, &a, ttl).await.unwrap() else {
            panic!("the first acquire is a grant");
        };
        let mut waiting: Vec<_> = (0..WAITERS)
            .map(|i| {
                let (waiters, (r, o)) = (waiters.clone(), names("r", &format!("w{i}")));
                tokio::spawn(async move { waiters.acquire(&r, &o, ttl, Duration::from_secs(86_400)).await })
            })
            .collect();
        until_waiting(&waiters, WAITERS).await;
        // Only the head asked the store; the others wait their turn without asking.
        assert_eq!(
            store.layer().0.load(Ordering::SeqCst),
            2,
            "the holder's grant and the head's try"
        );
        let mut holder = (a, lease.token);
        for round in 0..10 {
            let before = store.layer().0.load(Ordering::SeqCst);
            store.release(&r, &holder.0, Some(holder.1)).await.unwrap();
            // The next holder is whichever waiter finishes; exactly one does.
            let granted = loop {
                tokio::task::yield_now().await;
                if let Some(done) = waiting.iter().position(|w| w.is_finished()) {
                    break waiting.swap_remove(done).await.unwrap().unwrap();
                }
            };
            let AcquireOutcome::Granted { lease, .. } = granted else {
                panic!("round {round}: {granted:?}");
            };
            until_waiting(&waiters, WAITERS - round - 1).await;
            // One try by the woken head, one by the next head, which finds it held: no herd.
            let asked = store.layer().0.load(Ordering::SeqCst) - before;
            assert_eq!(asked, 2, "round {round}: {asked} store calls for one release");
            assert!(
                waiting.iter().all(|w| !w.is_finished()),
                "round {round}: more than one woke"
            );
            holder = (lease.owner, lease.token);
        }
        waiting.into_iter().for_each(|w| w.abort());
    }

    /// Paused-time waiters over a store on Tokio's clock, with each `(resource, owner)`
    /// granted for a minute.
    async fn holding(held: &[(&str, &str)]) -> (Arc<MemoryStore>, Waiters) {
        let clock = Arc::new(TokioClock::new(Timestamp::from_millis(1_000_000)));
        let store = Arc::new(MemoryStore::with_clock(clock));
        for (resource, owner) in held {
            let (r, o) = names(resource, owner);
            let outcome = store.acquire(&r, &o, minute()).await.unwrap();
            assert!(matches!(outcome, AcquireOutcome::Granted { .. }), "{outcome:?}");
        }
        let waiters = Waiters::new(store.clone());
        (store, waiters)
    }

    fn minute() -> Ttl {
        Ttl::from_millis(60_000, Ttl::DEFAULT_MAX).unwrap()
    }

    /// `owner` waits up to ten minutes for `resource`, in a task of its own.
    fn waits(
        waiters: &Waiters,
        resource: &str,
        owner: &str,
    ) -> tokio::task::JoinHandle<Result<AcquireOutcome>> {
        let (waiters, (r, o)) = (waiters.clone(), names(resource, owner));
        tokio::spawn(async move { waiters.acquire(&r, &o, minute(), Duration::from_secs(600)).await })
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_that_closes_a_cycle_of_two_is_refused_at_once_and_the_other_goes_on() {
        let (store, waiters) = holding(&[("x", "a"), ("y", "b")]).await;
        let a_waits = waits(&waiters, "y", "a");
        until_waiting(&waiters, 1).await;
        let started = Instant::now();
        let refused = waits(&waiters, "x", "b").await.unwrap();
        let Err(StoreError::Deadlock(cycle)) = refused else {
            panic!("b would wait for a, who waits for b: {refused:?}");
        };
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "answered at once, not after a wait"
        );
        assert_eq!(
            cycle.to_string(),
            r#"b waits for lock "x" held by a; a waits for lock "y" held by b"#
        );
        // b keeps what it held; when it lets go, a gets it.
        let (y, b) = names("y", "b");
        assert_eq!(store.get(&y).await.unwrap().map(|l| l.owner), Some(b.clone()));
        assert!(!a_waits.is_finished());
        store.release(&y, &b, None).await.unwrap();
        let granted = a_waits.await.unwrap().unwrap();
        assert_eq!(granted.lease().map(|l| l.owner.as_str()), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cycle_of_three_is_refused_to_the_one_closing_it_and_the_others_get_their_locks() {
        let (store, waiters) = holding(&[("x", "a"), ("y", "b"), ("z", "c")]).await;
        let a_waits = waits(&waiters, "y", "a");
        until_waiting(&waiters, 1).await;
        let b_waits = waits(&waiters, "z", "b");
        until_waiting(&waiters, 2).await;
        let refused = waits(&waiters, "x", "c").await.unwrap();
        let Err(StoreError::Deadlock(cycle)) = refused else {
            panic!("c closes a -> b -> c -> a: {refused:?}");
        };
        assert_eq!(
            cycle.to_string(),
            r#"c waits for lock "x" held by a; a waits for lock "y" held by b; b waits for lock "z" held by c"#
        );
        assert_eq!(waiters.waiting(), 2, "the others still wait");
        let (z, c) = names("z", "c");
        store.release(&z, &c, None).await.unwrap();
        let b_got = b_waits.await.unwrap().unwrap();
        let (y, b) = names("y", "b");
        assert_eq!(b_got.lease().map(|l| &l.owner), Some(&b));
        store.release(&y, &b, None).await.unwrap();
        let a_got = a_waits.await.unwrap().unwrap();
        assert_eq!(a_got.lease().map(|l| l.owner.as_str()), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn waits_that_form_no_cycle_are_not_refused() {
        // a waits for b, b waits for c, c waits for nobody: a chain, not a cycle.
        let (store, waiters) = holding(&[("y", "b"), ("z", "c")]).await;
        let a_waits = waits(&waiters, "y", "a");
        until_waiting(&waiters, 1).await;
        let b_waits = waits(&waiters, "z", "b");
        until_waiting(&waiters, 2).await;
        let (z, c) = names("z", "c");
        store.release(&z, &c, None).await.unwrap();
        assert!(b_waits.await.unwrap().unwrap().lease().is_some());
        let (y, b) = names("y", "b");
        store.release(&y, &b, None).await.unwrap();
        assert!(a_waits.await.unwrap().unwrap().lease().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn several_locks_are_waited_for_at_once_and_granted_together() {
        let (store, waiters) = holding(&[("y", "other")]).await;
        let wanted = Resources::new(vec![names("x", "_").0, names("y", "_").0]).unwrap();
        let waiting = {
            let (waiters, wanted, me) = (waiters.clone(), wanted.clone(), names("_", "me").1);
            tokio::spawn(async move {
                let gone = CancellationToken::new();
                let terms = Terms::ttl(minute());
                waiters
                    .acquire_all_unless(&wanted, &me, &terms, Duration::from_secs(600), &gone)
                    .await
            })
        };
        until_waiting(&waiters, 1).await;
        let x = &wanted.as_slice()[0];
        assert_eq!(store.get(x).await.unwrap(), None, "nothing taken while it waits");
        let (y, other) = names("y", "other");
        store.release(&y, &other, None).await.unwrap();
        let acquired = waiting.await.unwrap().unwrap();
        assert!(acquired.waited);
        let AcquireAllOutcome::Granted(outcomes) = acquired.outcome else {
            panic!("both free: {:?}", acquired.outcome);
        };
        let owners: Vec<_> = outcomes
            .iter()
            .map(|o| o.lease().unwrap().owner.as_str())
            .collect();
        assert_eq!(owners, ["me", "me"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_is_granted_when_the_lock_delay_ends() {
        let clock = Arc::new(TokioClock::new(Timestamp::from_millis(1_000_000)));
        let store = Arc::new(MemoryStore::with_clock(clock));
        let waiters = Waiters::new(store.clone());
        let (r, crashed) = names("r", "crashed");
        let ttl = Ttl::from_millis(1_000, Ttl::DEFAULT_MAX).unwrap();
        let delay = Duration::from_millis(500);
        let terms = Terms::ttl(ttl).lock_delay(delay);
        let lease = store.acquire_with(&r, &crashed, terms).await.unwrap();
        let lease = lease.lease().unwrap().clone();
        let outcome = waiters
            .acquire(&r, &names("r", "next").1, ttl, Duration::from_secs(10))
            .await
            .unwrap();
        let granted = outcome.lease().unwrap();
        assert_eq!(
            granted.acquired_at,
            lease.closed_until(),
            "granted as the delay ends, not before"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn two_readers_upgrading_at_once_are_a_cycle_and_the_second_is_refused() {
        let (store, waiters) = read_held().await;
        let outcome = hold_for(&waiters, "b", Claim::Read, Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(outcome, HoldOutcome::Granted { .. }), "{outcome:?}");
        let a_upgrades = hold_for(&waiters, "a", Claim::Write, Duration::from_secs(60));
        until_waiting(&waiters, 1).await;
        let refused = hold_for(&waiters, "b", Claim::Write, Duration::from_secs(60))
            .await
            .unwrap();
        let Err(StoreError::Deadlock(cycle)) = refused else {
            panic!("a and b each wait for the other's read hold: {refused:?}");
        };
        assert_eq!(
            cycle.to_string(),
            r#"b waits for rwlock "rw" held by a; a waits for rwlock "rw" held by b"#
        );
        // b gives up its read hold: a's upgrade goes through.
        let (name, b) = names("rw", "b");
        store
            .release_hold(HoldKind::RwLock, &name, &b, None)
            .await
            .unwrap();
        let upgraded = a_upgrades.await.unwrap().unwrap();
        assert!(
            matches!(
                upgraded,
                HoldOutcome::Granted {
                    replaced: Some(_),
                    ..
                }
            ),
            "{upgraded:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cycle_through_a_holder_that_let_go_since_is_not_a_deadlock() {
        let (store, waiters) = holding(&[("x", "e"), ("y", "b")]).await;
        let a_waits = waits(&waiters, "y", "a");
        until_waiting(&waiters, 1).await;
        let f_waits = waits(&waiters, "x", "f");
        until_waiting(&waiters, 2).await;
        // What a try found a while ago, since let go: the graph believes a holds x. (Between
        // two servers, or between a release and the next try, the graph lags like this.)
        let (x, a) = names("x", "a");
        assert!(
            waiters
                .inner
                .lines()
                .graph
                .observe(&Key::lock(&x), vec![a])
                .is_empty()
        );
        // b waits for x: by the graph, b -> a -> b; by the store, e holds x. b waits on.
        let b_waits = waits(&waiters, "x", "b");
        while waiters.waiting() < 3 && !b_waits.is_finished() {
            tokio::task::yield_now().await;
        }
        assert!(
            !b_waits.is_finished(),
            "refused on a stale cycle: {:?}",
            b_waits.await
        );
        store.release(&x, &names("x", "e").1, None).await.unwrap();
        let f_got = f_waits.await.unwrap().unwrap();
        assert_eq!(f_got.lease().map(|l| l.owner.as_str()), Some("f"));
        store.release(&x, &names("x", "f").1, None).await.unwrap();
        let b_got = b_waits.await.unwrap().unwrap();
        assert_eq!(b_got.lease().map(|l| l.owner.as_str()), Some("b"));
        store
            .release(&names("y", "b").0, &names("y", "b").1, None)
            .await
            .unwrap();
        assert_eq!(
            a_waits.await.unwrap().unwrap().lease().map(|l| l.owner.as_str()),
            Some("a")
        );
    }
}
