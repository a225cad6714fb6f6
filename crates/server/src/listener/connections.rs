//! [`Connections`]: the connections being served, each with a place under the connection
//! limit and its [`Activity`] — whether it is serving a request or idle, and since when.
//!
//! At the limit, a new connection is let in by closing the connection idle the longest, as
//! mature servers do: idle keep-alive connections of clients that sent their requests must
//! not shut out a holder that comes to renew or release. A connection serving a request (a
//! waiter!) is never closed for room, and neither is one that has not sent its first request
//! yet (the header timeout ends those); when none is idle, the new connection waits until one
//! ends or turns idle.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The connections being served, and the places under the connection limit.
#[derive(Debug)]
pub(super) struct Connections {
    places: Arc<Semaphore>,
    /// Held for an insert, a removal or a scan, never across an `.await`.
    open: Mutex<HashMap<u64, Arc<Activity>>>,
    next: AtomicU64,
    /// Woken when a connection turns idle or busy, or ends: room may be made now.
    changed: Arc<Notify>,
    /// Cancelled to close every connection (each once its request is answered).
    stop: CancellationToken,
}

impl Connections {
    /// Room for `limit` connections at once.
    pub(super) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            places: Arc::new(Semaphore::new(limit)),
            open: Mutex::default(),
            next: AtomicU64::new(0),
            changed: Arc::default(),
            stop: CancellationToken::new(),
        })
    }

    fn open(&self) -> MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        // Inserts, removals and scans cannot panic half-way: a poisoned map is still whole.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for one more connection. At the limit, the connection idle the longest is
    /// closed to make room; while none is idle, this waits until one ends or turns idle.
    pub(super) async fn place(self: &Arc<Self>) -> Place {
        loop {
            // Registered before the room is looked at, so that no change in between is missed.
            let mut changed = pin!(self.changed.notified());
            changed.as_mut().enable();
            if let Ok(permit) = self.places.clone().try_acquire_owned() {
                return self.enter(permit);
            }
            self.make_room();
            tokio::select! {
                permit = self.places.clone().acquire_owned() => {
                    return self.enter(permit.expect("the semaphore is never closed"));
                }
                () = changed => {}
            }
        }
    }

    fn enter(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Place {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity {
            state: Mutex::new(State::Fresh),
            close: self.stop.child_token(),
            waiting: watch::Sender::new(false),
            changed: self.changed.clone(),
        });
        self.open().insert(id, activity.clone());
        Place {
            connections: self.clone(),
            id,
            activity,
            _permit: permit,
        }
    }

    /// Closes the connection idle the longest, unless one told to close is idle still: it
    /// ends at once, and its place is the room.
    fn make_room(&self) {
        let open = self.open();
        let idle = open.values().filter_map(|c| Some((c.idle_since()?, c)));
        let (closing, candidates): (Vec<_>, Vec<_>) = idle.partition(|(_, c)| c.close.is_cancelled());
        if closing.is_empty()
            && let Some((_, longest)) = candidates.into_iter().min_by_key(|(since, _)| *since)
        {
            longest.close.cancel();
        }
    }

    /// Tells every connection to close once its request, if any, is answered.
    pub(super) fn close_all(&self) {
        self.stop.cancel();
    }

    /// Whether every connection ended within `grace`.
    pub(super) async fn drained(&self, grace: Duration) -> bool {
        let drained = async {
            loop {
                let mut changed = pin!(self.changed.notified());
                changed.as_mut().enable();
                if self.open().is_empty() {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(grace, drained).await.is_ok()
    }
}

/// One connection's place under the limit, held as long as it is served.
#[derive(Debug)]
pub(super) struct Place {
    connections: Arc<Connections>,
    id: u64,
    /// What the connection is doing.
    pub(super) activity: Arc<Activity>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Place {
    fn drop(&mut self) {
        // Out of the map before the permit (a field) is given back.
        self.connections.open().remove(&self.id);
        self.connections.changed.notify_waiters();
    }
}

/// What one connection is doing, as its requests tell.
#[derive(Debug)]
pub(super) struct Activity {
    /// Held for a read or an assignment, never across an `.await`.
    state: Mutex<State>,
    /// Cancelled to close the connection once its request, if any, is answered.
    pub(super) close: CancellationToken,
    /// Whether its request waits in line ([`Peer::waiting`]).
    pub(super) waiting: watch::Sender<bool>,
    changed: Arc<Notify>,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// No request yet.
    Fresh,
    /// Serving a request.
    Busy,
    /// Kept alive for the next request since then.
    Idle(Instant),
}

impl Activity {
    fn set(&self, state: State) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
        self.changed.notify_waiters();
    }

    /// Since when it has been idle between requests; `None` if it is serving one or has not
    /// had one yet.
    fn idle_since(&self) -> Option<Instant> {
        match *self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            State::Idle(since) => Some(since),
            State::Fresh | State::Busy => None,
        }
    }

    /// Marks it busy with a request until the guard is dropped (the request answered, or
    /// dropped).
    pub(super) fn serving(self: &Arc<Self>) -> Serving {
        self.set(State::Busy);
        Serving(self.clone())
    }
}

/// A request being served on a connection ([`Activity::serving`]).
#[derive(Debug)]
pub(super) struct Serving(Arc<Activity>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.set(State::Idle(Instant::now()));
    }
}

/// The connection a request came on, as its route sees it (a request extension).
#[derive(Debug, Clone)]
pub struct Peer(pub(super) Arc<Activity>);

impl Peer {
    /// Tells the connection that its request waits in line (an acquire with `wait_ms`) until
    /// the guard is dropped. While it waits, a client that closes its side of the connection
    /// is taken to have gone away: the connection ends, and with it the request's wait (a
    /// request that does not wait is served to its end, and answered, however its client
    /// closes).
    pub fn waiting(&self) -> Waiting {
        self.0.waiting.send_replace(true);
        Waiting(self.0.clone())
    }
}

/// A request waiting in line ([`Peer::waiting`]).
#[derive(Debug)]
#[must_use = "the request waits only while this is held"]
pub struct Waiting(Arc<Activity>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.send_replace(false);
    }
}
