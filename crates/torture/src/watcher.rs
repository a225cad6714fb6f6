//! The watchers: one per `fencelock serve`, following its event stream (`GET /events`, every
//! name and kind) for the whole run, each event it receives an [`Entry::Event`]; and the end
//! drain, whose markers show a stream's gap if it has one.
//!
//! A watcher follows its server through every fault: a server paused holds the stream, one
//! killed ends it, and the watcher connects again (with a short backoff, never giving up)
//! from the last id it saw — which a restarted server, of a new epoch, answers with `reset`.

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fencelock_client::events::Events;
use fencelock_client::{
    AcquireOutcome, Hold, HttpOptions, HttpStore, Lease, LockStore, Owner, ReleaseOutcome, Resource,
    StoreError, Ttl,
};
use fencelock_wire::{EventName, Subject};
use tokio::sync::{oneshot, watch};

use crate::client::{millis, seen};
use crate::history::{Call, Entry, Event, Kind, Mono, Op, Outcome, Phase, Watched};
use crate::sink::Sink;

/// How long a watcher waits before it connects again to a server that did not answer.
const BACKOFF: Duration = Duration::from_millis(100);

/// How long a watcher's first connection may take: the servers are up when it starts.
const FIRST_CONNECTION: Duration = Duration::from_secs(10);

/// How long the drain waits for every watcher to hear every marker's release.
const DRAIN: Duration = Duration::from_secs(30);

/// A marker's TTL: long enough that it is released, not expired.
const MARKER_TTL: Duration = Duration::from_secs(10);

/// The watchers of a run, one per server, in the servers' order.
pub struct Watchers {
    watchers: Vec<Watcher>,
}

struct Watcher {
    server: u32,
    from: Mono,
    heard: Arc<Heard>,
    stop: watch::Sender<bool>,
    thread: JoinHandle<()>,
}

/// What the drain asks of a watcher: the releases it received, and its last reset.
#[derive(Default)]
struct Heard {
    state: Mutex<HeardState>,
    changed: Condvar,
}

#[derive(Default)]
struct HeardState {
    /// `(name, owner)` of every release received.
    releases: HashSet<(String, String)>,
    last_reset: Option<Mono>,
}

impl Heard {
    fn lock(&self) -> MutexGuard<'_, HeardState> {
        // Nothing under this lock can panic half-way: a poisoned state is still whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn note(&self, event: &Event) {
        let mut state = self.lock();
        match (event.event.as_str(), &event.name, &event.owner) {
            ("reset", _, _) => state.last_reset = Some(event.received),
            ("release", Some(name), Some(owner)) => {
                state.releases.insert((name.clone(), owner.clone()));
            }
            _ => return,
        }
        self.changed.notify_all();
    }
}

/// A marker of the drain: its release, once acknowledged, must reach every stream.
struct Marker {
    name: String,
    owner: String,
    /// When its release was sent: a reset received after this may stand for it (the
    /// checker's rule: a reset received before may not).
    invoked: Mono,
}

impl Marker {
    fn heard(&self, state: &HeardState) -> bool {
        state.last_reset.is_some_and(|reset| reset > self.invoked)
            || state.releases.contains(&(self.name.clone(), self.owner.clone()))
    }
}

impl Watchers {
    /// One watcher per server at `urls`, each connected (its server answered) when this
    /// returns.
    pub fn start(urls: &[String], sink: &Sink) -> anyhow::Result<Self> {
        let watchers = urls
            .iter()
            .enumerate()
            .map(|(server, url)| Watcher::start(u32::try_from(server)?, url, sink))
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { watchers })
    }

    /// The end drain: through each server, one acquire and release of a marker lock no
    /// client uses, recorded as the operations of client `client`; then waits (bounded)
    /// until every watcher received every marker's release, or a reset after it was sent.
    /// Returns, for people, the watchers that did not (the checker judges what is missing).
    pub fn drain(&self, urls: &[String], client: u32, sink: &Sink) -> anyhow::Result<Vec<String>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut markers = Vec::new();
        let mut number = 0;
        for (server, url) in urls.iter().enumerate() {
            let marked = runtime.block_on(mark(url, u32::try_from(server)?, client, &mut number, sink))?;
            markers.extend(marked);
        }
        let deadline = Instant::now() + DRAIN;
        let mut late = Vec::new();
        for watcher in &self.watchers {
            let state = watcher.heard.lock();
            let left = deadline.saturating_duration_since(Instant::now());
            let (state, _) = watcher
                .heard
                .changed
                .wait_timeout_while(state, left, |state| !markers.iter().all(|m| m.heard(state)))
                .unwrap_or_else(PoisonError::into_inner);
            let missing: Vec<&str> = markers
                .iter()
                .filter(|m| !m.heard(&state))
                .map(|m| m.name.as_str())
                .collect();
            if !missing.is_empty() {
                late.push(format!(
                    "the stream of server {} did not tell the release of {} within {DRAIN:?}",
                    watcher.server,
                    missing.join(", ")
                ));
            }
        }
        Ok(late)
    }

    /// Stops every watcher and records its window.
    pub fn stop(self, sink: &Sink) {
        for watcher in self.watchers {
            watcher.stop.send_replace(true);
            // A watcher's thread only records; one that panicked has recorded what it could.
            let _ = watcher.thread.join();
            sink.push(Entry::Watched(Watched {
                server: watcher.server,
                from: watcher.from,
                to: Mono::now(),
            }));
        }
    }
}

impl Watcher {
    fn start(server: u32, url: &str, sink: &Sink) -> anyhow::Result<Self> {
        let store = HttpStore::with_options(url, options())?;
        let events = store.events("", "")?;
        let heard = Arc::new(Heard::default());
        let (stop, stopped) = watch::channel(false);
        let (began, first) = oneshot::channel();
        let (sink, shared) = (sink.clone(), heard.clone());
        let thread = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => {
                    let _ = began.send(Err(anyhow::Error::from(error)));
                    return;
                }
            };
            runtime.block_on(follow(server, events, began, stopped, &sink, &shared));
        });
        let from = first
            .blocking_recv()
            .context("a watcher's thread ended before its first connection")?
            .with_context(|| format!("follow the event stream of server {server}"))?;
        Ok(Self {
            server,
            from,
            heard,
            stop,
            thread,
        })
    }
}

/// The watchers' and markers' connections: short timeouts, as the clients'.
fn options() -> HttpOptions {
    HttpOptions {
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(3),
        ..HttpOptions::default()
    }
}

/// Follows one server's stream until `stopped`: connects (telling `began` when the server
/// first answered), then records every event it receives, connecting again after any
/// failure.
async fn follow(
    server: u32,
    mut events: Events,
    began: oneshot::Sender<anyhow::Result<Mono>>,
    mut stopped: watch::Receiver<bool>,
    sink: &Sink,
    heard: &Heard,
) {
    let deadline = Instant::now() + FIRST_CONNECTION;
    loop {
        match tokio::time::timeout(BACKOFF * 10, events.connect())
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable {
                    message: "no answer to the event stream's request".to_owned(),
                    source: None,
                })
            }) {
            Ok(()) => break,
            Err(error) if Instant::now() >= deadline => {
                let _ = began.send(Err(error.into()));
                return;
            }
            Err(_) => tokio::time::sleep(BACKOFF).await,
        }
    }
    let _ = began.send(Ok(Mono::now()));
    loop {
        let next = tokio::select! {
            _ = stopped.changed() => return,
            next = events.next() => next,
        };
        match next {
            Ok(event) => {
                if let Some(event) = record(server, &event) {
                    heard.note(&event);
                    sink.push(Entry::Event(event));
                }
            }
            // The server is down, paused past a timeout, or restarting: it will be back.
            Err(_) => tokio::select! {
                _ = stopped.changed() => return,
                () = tokio::time::sleep(BACKOFF) => {}
            },
        }
    }
}

/// An event as the history keeps it; `None` for a snapshot (see [`Event`]).
fn record(server: u32, event: &fencelock_client::events::Event) -> Option<Event> {
    if event.name == EventName::Snapshot {
        return None;
    }
    let change = event.change();
    Some(Event {
        server,
        received: Mono::now(),
        event: event.name.as_str().to_owned(),
        id: event.id.clone(),
        kind: change.as_ref().map(|c| c.kind.as_str().to_owned()),
        name: change.as_ref().map(|c| c.name.clone()),
        owner: change.as_ref().map(|c| c.owner.clone()),
        token: change.as_ref().and_then(|c| c.fencing_token),
        expires_at: change.and_then(|c| c.subject).and_then(expiry),
    })
}

/// When the lease, permit or hold an event shows ends, in milliseconds since the epoch: as
/// an answer's [`Seen`](crate::history::Seen) has it.
fn expiry(subject: Subject) -> Option<u64> {
    let lease = match subject {
        Subject::Lease(body) => Lease::try_from(body).ok()?,
        Subject::Hold(item) => Hold::try_from(item).ok()?.lease,
        Subject::Leadership(_) => return None,
    };
    Some(lease.expires_at.as_millis())
}

/// The marker of `server`: acquired and released through it as client `client`'s
/// operations (numbered from `number`), each recorded; the marker if its release was
/// answered ok.
async fn mark(
    url: &str,
    server: u32,
    client: u32,
    number: &mut u64,
    sink: &Sink,
) -> anyhow::Result<Option<Marker>> {
    let store = HttpStore::with_options(url, options())?;
    let name = format!("torture-end-{server}");
    let owner = format!("c{client}-{number}");
    let resource: Resource = name.parse()?;
    let (owner_id, ttl): (Owner, Ttl) = (
        owner.parse()?,
        Ttl::from_millis(millis(MARKER_TTL), Ttl::DEFAULT_MAX)?,
    );
    let mut op = Op {
        client,
        op: *number,
        phase: Phase::Drain,
        call: Call::Acquire,
        kind: Kind::Lock,
        names: vec![name.clone()],
        owner: owner.clone(),
        server: Some(server),
        limit: None,
        mode: None,
        ttl_ms: millis(MARKER_TTL),
        wait_ms: 0,
        token: None,
        invoked: Mono::now(),
        completed: Mono(0),
        outcome: Outcome::Unknown,
        leases: Vec::new(),
        extended: false,
        held_until: None,
        detail: String::new(),
    };
    let acquired = store.acquire(&resource, &owner_id, ttl).await;
    op.completed = Mono::now();
    let granted = match acquired {
        Ok(AcquireOutcome::Granted { lease, .. }) => Ok((lease, false)),
        Ok(AcquireOutcome::Extended(lease)) => Ok((lease, true)),
        other => Err(other),
    };
    let lease = match granted {
        Ok((lease, extended)) => {
            op.outcome = Outcome::Ok;
            op.extended = extended;
            op.held_until = Some(op.invoked.plus(MARKER_TTL));
            Some(lease)
        }
        Err(Ok(refused)) => {
            op.outcome = Outcome::Refused;
            op.detail = format!("{refused:?}");
            None
        }
        Err(Err(error)) => {
            op.detail = error.to_string();
            None
        }
    };
    op.leases = lease.iter().map(|lease| seen(lease, None)).collect();
    let acquire = op.clone();
    sink.push(Entry::Op(op));
    *number += 1;
    let Some(lease) = lease else {
        return Ok(None);
    };
    let mut op = Op {
        op: *number,
        call: Call::Release,
        token: Some(lease.token.0),
        invoked: Mono::now(),
        leases: Vec::new(),
        held_until: None,
        ..acquire.clone()
    };
    let released_at = op.invoked;
    let released = store.release(&resource, &owner_id, Some(lease.token)).await;
    op.completed = Mono::now();
    (op.outcome, op.detail) = match released {
        Ok(ReleaseOutcome::Released(_)) => (Outcome::Ok, String::new()),
        Ok(refused) => (Outcome::Refused, format!("{refused:?}")),
        Err(error) => (Outcome::Unknown, error.to_string()),
    };
    let ok = op.outcome == Outcome::Ok;
    sink.push(Entry::Op(op));
    *number += 1;
    Ok(ok.then_some(Marker {
        name,
        owner,
        invoked: released_at,
    }))
}
