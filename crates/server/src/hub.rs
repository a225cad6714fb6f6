//! The event hub: one per server. Every change the server makes or hears of (from other
//! servers sharing the store) becomes an [`Entry`] with the next id of this server's epoch,
//! kept in a bounded retention ring and handed to every open stream whose [`Filter`] admits
//! it.
//!
//! An event this server made is also handed to the store ([`LockStore::publish`]), which
//! tells the other servers sharing it; theirs come back through [`relay`] and are appended
//! here as this server's own, with this server's ids.
//!
//! Where this server may have missed other servers' events — a gap in a server's bulletins
//! (each server numbers its own 1, 2, 3, …), a subscription the store lost, a relay that fell
//! behind — the hub appends a *reset* ([`Hub::reset`]): every open stream then says `reset`
//! and sends a snapshot, and no stream may resume from before it. So a lost event is never
//! a silent gap.
//!
//! A store whose purges may return one expiry twice (Redlock: [`Capabilities`]'s
//! `expiries_repeat_within`) has the hub remember the ends of leases it appended for that
//! long: a repeat, this server's or another's, is dropped, so every stream has each once.
//!
//! Publishing never waits: each stream has a bounded buffer, and a stream whose buffer is
//! full is cut off ([`Subscription::was_cut`]) rather than let the server wait for it.
//! Subscribing and publishing take the same lock, so a stream that resumes from an id gets
//! every entry after it exactly once: those still in the ring, then the live ones, with
//! nothing between.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::borrow::Cow;

use fencelock_core::{
    Bulletin, Capabilities, Heard, Hold, Kind, Lease, LockStore, Principal, Resource, Timestamp,
};
use fencelock_wire::{EventData, EventId, EventName, Relayed, Topic, Topics};
use tokio::sync::{broadcast, mpsc};

use crate::auth::{Caller, Right};
use crate::metrics::Metrics;

/// How many events a hub keeps, how much a stream may fall behind, how many streams one
/// principal may keep open, and how often a quiet stream says it is alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubLimits {
    /// Events kept for streams that resume (the retention window).
    pub retention: usize,
    /// Events a stream may have waiting to be sent before it is cut off.
    pub buffer: usize,
    /// Streams one principal (all callers together without authentication) may keep open.
    pub streams_per_principal: usize,
    /// The longest a stream goes without a line: a heartbeat comment then.
    pub heartbeat: Duration,
}

impl Default for HubLimits {
    fn default() -> Self {
        Self {
            retention: 10_000,
            buffer: 1_024,
            streams_per_principal: 16,
            heartbeat: Duration::from_secs(15),
        }
    }
}

/// One event as the hub keeps it: its JSON written once, by the first stream that sends it,
/// and sent to every stream as it is.
#[derive(Debug)]
pub struct Entry {
    /// Its place in this server's epoch.
    pub seq: u64,
    /// What it tells.
    pub name: EventName,
    /// The namespace and the name it is about; `None` for a reset, which is about everything.
    pub subject: Option<(Topic, Resource)>,
    /// Its data; `None` for a reset.
    data: Option<Data>,
    /// The `data:` line, once written.
    json: OnceLock<Box<str>>,
}

impl Entry {
    /// The `data:` line, JSON (empty for a reset): written the first time it is asked for, so
    /// that a change no stream sends costs no JSON.
    pub fn json(&self) -> &str {
        self.json.get_or_init(|| {
            // Serialising these types cannot fail: strings, numbers and nested objects only.
            (self.data.as_ref())
                .map(|data| serde_json::to_string(&*data.written()).unwrap_or_default())
                .unwrap_or_default()
                .into()
        })
    }

    /// Whether it is a reset ([`Hub::reset`]): the stream says `reset` and sends a snapshot.
    pub fn is_reset(&self) -> bool {
        self.subject.is_none()
    }

    /// Whether a stream of `filter` gets it: a reset goes to every stream.
    fn sent_on(&self, filter: &Filter) -> bool {
        self.subject
            .as_ref()
            .is_none_or(|(topic, resource)| filter.admits(*topic, resource))
    }
}

/// An event's data as the hub keeps it: a change this server made, as the model has it —
/// written out as [`EventData`] only when a stream sends it or the other servers must hear
/// of it, so that a change nobody follows costs no strings — or data written already (what
/// another server told, a leadership, a refusal).
#[derive(Debug, Clone)]
pub enum Data {
    /// A change of a lease, permit or hold.
    Change(Change),
    /// Data as it is sent.
    Written(EventData),
}

/// A change of a lease (a lock's, or a permit's or hold's where only that is known) or of a
/// permit or hold, of `kind`, at `at`; `held_ms` for an end.
#[derive(Debug, Clone)]
pub struct Change {
    /// What kind of lease it is.
    pub kind: Kind,
    /// The lease, permit or hold as it now is (or was, for an end).
    pub item: Changed,
    /// When it happened.
    pub at: Timestamp,
    /// For an end: how long it was held.
    pub held_ms: Option<u64>,
}

/// What a [`Change`] is about.
#[derive(Debug, Clone)]
pub enum Changed {
    /// A lock's lease, or a permit's or hold's lease where only that is known (an expiry).
    Lease(Lease),
    /// A semaphore's permit or a read-write lock's hold.
    Hold(Hold),
}

impl Change {
    /// The same change, of a lease held for `held_ms`.
    pub fn held(self, held_ms: u64) -> Self {
        Self {
            held_ms: Some(held_ms),
            ..self
        }
    }

    fn lease(&self) -> &Lease {
        match &self.item {
            Changed::Lease(lease) => lease,
            Changed::Hold(hold) => &hold.lease,
        }
    }

    /// Its data as it is sent.
    fn written(&self) -> EventData {
        let data = match &self.item {
            Changed::Lease(lease) => EventData::of_lease(self.kind, lease, self.at),
            Changed::Hold(hold) => EventData::of_hold(self.kind, hold, self.at),
        };
        match self.held_ms {
            Some(held_ms) => data.held(held_ms),
            None => data,
        }
    }
}

impl Data {
    /// The namespace it is in.
    fn topic(&self) -> Topic {
        match self {
            Self::Change(change) => Topic::of(change.kind),
            Self::Written(data) => data.kind,
        }
    }

    /// The name it is about, if the model accepts it (every name of an event does).
    fn resource(&self) -> Option<Resource> {
        match self {
            Self::Change(change) => Some(change.lease().resource.clone()),
            Self::Written(data) => Resource::new(data.name.as_str()).ok(),
        }
    }

    /// The token of its lease, if any.
    fn token(&self) -> Option<u64> {
        match self {
            Self::Change(change) => Some(change.lease().token.0),
            Self::Written(data) => data.fencing_token,
        }
    }

    /// Its data as it is sent: written now for a change.
    fn written(&self) -> Cow<'_, EventData> {
        match self {
            Self::Change(change) => Cow::Owned(change.written()),
            Self::Written(data) => Cow::Borrowed(data),
        }
    }

    /// As [`EventData::for_election`]: what it tells of an election, if it is about the lock
    /// that keeps one (written out only then: a lock of an election is told as the election).
    fn for_election(&self, name: EventName) -> Option<Option<(EventName, EventData)>> {
        match self {
            Self::Change(change)
                if change.kind != Kind::Lock
                    || !(change.lease().resource.as_str())
                        .starts_with(fencelock_core::model::ELECTION_MARK) =>
            {
                None
            }
            data => data.written().for_election(name),
        }
    }
}

impl From<EventData> for Data {
    fn from(data: EventData) -> Self {
        Self::Written(data)
    }
}

impl From<Change> for Data {
    fn from(change: Change) -> Self {
        Self::Change(change)
    }
}

/// What a stream asked for: names under a prefix, of some topics, that its caller may read.
#[derive(Debug, Clone)]
pub struct Filter {
    /// Only names starting with this.
    pub prefix: String,
    /// Only the name `prefix` itself (one election's stream), not those after it.
    pub only: bool,
    /// Only these topics.
    pub topics: Topics,
    /// Who reads: only names it has the `read` right on.
    pub caller: Caller,
}

impl Filter {
    /// Whether an event about `resource` of `topic` is sent on the stream.
    pub fn admits(&self, topic: Topic, resource: &Resource) -> bool {
        self.topics.contains(topic)
            && if self.only {
                resource.as_str() == self.prefix
            } else {
                resource.as_str().starts_with(&self.prefix)
            }
            && self.caller.has(Right::Read, resource)
    }
}

/// Where a new stream starts.
#[derive(Debug)]
pub enum Start {
    /// No id was given: from the next event on.
    Tail,
    /// The id given is in the window: these entries (after it, admitted), then the next.
    Replay(Vec<Arc<Entry>>),
    /// The id given is not in the window (too old, from another epoch, or never sent): the
    /// stream must say `reset` and send a snapshot, then the next events.
    Reset,
}

/// A stream's place in the hub: its entries, as they come, until it is cut off or dropped.
#[derive(Debug)]
pub struct Subscription {
    /// Where it starts.
    pub start: Start,
    /// The id of the last event published when it subscribed: what a snapshot is as of.
    pub at: EventId,
    receiver: mpsc::Receiver<Arc<Entry>>,
    cut: Arc<AtomicBool>,
    _open: Open,
}

impl Subscription {
    /// The next entry admitted; `None` once the stream is cut off or the hub is gone.
    pub async fn next(&mut self) -> Option<Arc<Entry>> {
        self.receiver.recv().await
    }

    /// The next entry admitted, if one is waiting already.
    pub fn try_next(&mut self) -> Option<Arc<Entry>> {
        self.receiver.try_recv().ok()
    }

    /// Whether the stream fell too far behind and was cut off.
    pub fn was_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }
}

/// Why a stream was not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this principal has {0} event streams open already, the most allowed")]
pub struct TooManyStreams(pub usize);

/// The server's event hub: a cheap clonable handle.
#[derive(Debug, Clone)]
pub struct Hub(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    epoch: u64,
    limits: HubLimits,
    metrics: Arc<Metrics>,
    /// Where this server's events are told to the other servers sharing the store.
    store: Arc<dyn LockStore>,
    /// Whether other servers may share the store: if not, nobody is told.
    tells: bool,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The seq of the next entry (the first is 1).
    next: u64,
    /// The seq of the last bulletin told to the other servers (counted apart from entries,
    /// so that the others see no gap where this server appended one of theirs).
    told: u64,
    /// The seq of the last reset: no stream resumes from before it.
    floor: u64,
    ring: VecDeque<Arc<Entry>>,
    taps: Vec<Tap>,
    open: HashMap<Option<Principal>, usize>,
    /// The ends appended lately, where the store's purges may repeat one.
    ended: Option<Ended>,
}

/// The ends of leases (expiries and the vacancies they make) appended within `within`: a
/// lease ends once, so one seen again is a repeat.
#[derive(Debug)]
struct Ended {
    within: Duration,
    seen: HashSet<(Topic, String, u64)>,
    order: VecDeque<(Instant, (Topic, String, u64))>,
}

impl Ended {
    fn new(within: Duration) -> Self {
        Self {
            within,
            seen: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// Whether the event `name` with `data`, about `resource`, is no repeat of an end
    /// appended within the time (and is remembered, if an end).
    fn first(&mut self, name: EventName, data: &Data, resource: &Resource) -> bool {
        let Some(token) = data
            .token()
            .filter(|_| matches!(name, EventName::Expire | EventName::Vacant))
        else {
            return true;
        };
        let now = Instant::now();
        while let Some((at, _)) = self.order.front() {
            if now.duration_since(*at) <= self.within {
                break;
            }
            if let Some((_, old)) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        let key = (data.topic(), resource.to_string(), token);
        let first = self.seen.insert(key.clone());
        if first {
            self.order.push_back((now, key));
        }
        first
    }
}

/// An open stream, as the hub feeds it.
#[derive(Debug)]
struct Tap {
    filter: Filter,
    sender: mpsc::Sender<Arc<Entry>>,
    cut: Arc<AtomicBool>,
}

impl Hub {
    /// A hub of a new epoch (the wall clock's nanoseconds, so that a restarted server's ids
    /// never read as its predecessor's), that tells the other servers sharing `store` of
    /// its events.
    pub fn new(limits: HubLimits, metrics: Arc<Metrics>, store: Arc<dyn LockStore>) -> Self {
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |since| u64::try_from(since.as_nanos()).unwrap_or(u64::MAX));
        let Capabilities {
            shared,
            expiries_repeat_within,
            ..
        } = store.capabilities();
        Self(Arc::new(Shared {
            epoch,
            limits,
            metrics,
            tells: shared,
            store,
            inner: Mutex::new(Inner {
                next: 1,
                told: 0,
                floor: 0,
                ring: VecDeque::with_capacity(limits.retention.min(1024)),
                taps: Vec::new(),
                open: HashMap::new(),
                ended: expiries_repeat_within.map(Ended::new),
            }),
        }))
    }

    /// The limits it was made with.
    pub fn limits(&self) -> HubLimits {
        self.0.limits
    }

    /// The id of the last event published (`seq` 0 before the first).
    pub fn latest(&self) -> EventId {
        let next = self.0.inner().next;
        self.id(next - 1)
    }

    /// The id of the event `seq` of this hub's epoch.
    pub fn id(&self, seq: u64) -> EventId {
        EventId {
            epoch: self.0.epoch,
            seq,
        }
    }

    /// The epoch of this hub's ids, which also tells this server's bulletins apart.
    pub fn epoch(&self) -> u64 {
        self.0.epoch
    }

    /// Publishes an event `name` with `data` that this server made: appends it, and tells
    /// the other servers sharing the store. Returns `false` for a repeat, which is dropped:
    /// the end of a lease appended lately (where the store's purges may repeat one).
    pub fn publish(&self, name: EventName, data: impl Into<Data>) -> bool {
        let data = data.into();
        // An event of the lock that keeps an election is told as the election's (or not at
        // all) here, before other servers hear of it: theirs arrive told so.
        match data.for_election(name) {
            None => self.append(name, data, true),
            Some(Some((name, data))) => self.append(name, data.into(), true),
            Some(None) => true,
        }
    }

    /// Appends an event another server made, told in `bulletin`; one that cannot be read
    /// (a server of another version) is logged and dropped.
    pub fn relayed(&self, bulletin: &Bulletin) {
        match serde_json::from_str::<Relayed>(&bulletin.body) {
            Ok(relayed) => {
                self.append(relayed.event, relayed.data.into(), false);
            }
            Err(error) => {
                tracing::warn!(%error, origin = bulletin.origin, "an event of another server that cannot be read")
            }
        }
    }

    /// Appends a reset: this server may have missed events of others. Every open stream
    /// says `reset` and sends a snapshot (a stream that cannot take it is cut off), and no
    /// stream resumes from an id before it.
    pub fn reset(&self) {
        let mut inner = self.0.inner();
        inner.floor = inner.next;
        // No data: each stream writes its own `reset` (see `routes::events`).
        self.0.push(&mut inner, EventName::Reset, None);
    }

    /// Keeps an event in the ring and hands it to every stream that admits it — and, if
    /// `tell`, to the store for the other servers, under the same lock so that they hear
    /// this server's events in its order. Never waits: a stream with a full buffer is cut
    /// off; the store only queues. Returns `false` for a repeated end, dropped.
    fn append(&self, name: EventName, data: Data, tell: bool) -> bool {
        let Some(resource) = data.resource() else {
            // Every event is about a name the model accepted.
            return true;
        };
        let told = (tell && self.0.tells).then(|| {
            // Serialising these types cannot fail: strings, numbers and nested objects only.
            serde_json::to_string(&Telling {
                event: name,
                data: &data.written(),
            })
            .unwrap_or_default()
        });
        let mut inner = self.0.inner();
        if inner
            .ended
            .as_mut()
            .is_some_and(|ended| !ended.first(name, &data, &resource))
        {
            return false;
        }
        if let Some(body) = told {
            inner.told += 1;
            self.0.store.publish(&Bulletin {
                origin: self.0.epoch,
                seq: inner.told,
                body,
            });
        }
        self.0
            .push(&mut inner, name, Some((data.topic(), resource, data)));
        true
    }

    /// Opens a stream for `filter`, resuming after `since` if given; refused when the
    /// caller's principal has its most streams open.
    pub fn subscribe(&self, filter: Filter, since: Option<EventId>) -> Result<Subscription, TooManyStreams> {
        let principal = filter.caller.principal().cloned();
        let (sender, receiver) = mpsc::channel(self.0.limits.buffer.max(1));
        let cut = Arc::new(AtomicBool::new(false));
        let mut inner = self.0.inner();
        let open = inner.open.entry(principal.clone()).or_default();
        if *open >= self.0.limits.streams_per_principal {
            return Err(TooManyStreams(*open));
        }
        *open += 1;
        self.0.metrics.event_stream_opened();
        let latest = inner.next - 1;
        let start = match since {
            None => Start::Tail,
            Some(id) if self.resumable(&inner, id) => Start::Replay(
                inner
                    .ring
                    .iter()
                    .filter(|entry| entry.seq > id.seq && entry.sent_on(&filter))
                    .cloned()
                    .collect(),
            ),
            Some(_) => Start::Reset,
        };
        inner.taps.push(Tap {
            filter,
            sender,
            cut: cut.clone(),
        });
        Ok(Subscription {
            start,
            at: self.id(latest),
            receiver,
            cut,
            _open: Open {
                hub: self.clone(),
                principal,
            },
        })
    }

    /// Whether every event after `id` is still in the ring (or none was published since),
    /// and no reset came after it.
    fn resumable(&self, inner: &Inner, id: EventId) -> bool {
        let latest = inner.next - 1;
        let oldest_kept = latest - inner.ring.len() as u64;
        id.epoch == self.0.epoch && id.seq <= latest && id.seq >= oldest_kept.max(inner.floor)
    }
}

impl Shared {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        // Nothing under this lock can panic half-way, so a poisoned one is still whole.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes the next entry, keeps it in the ring and hands it to every stream that gets
    /// it ([`Entry::sent_on`]); a stream with a full buffer is cut off.
    /// `about` is the namespace, name and data of the event; `None` for a reset.
    fn push(&self, inner: &mut Inner, name: EventName, about: Option<(Topic, Resource, Data)>) {
        let (subject, data) = match about {
            Some((topic, resource, data)) => (Some((topic, resource)), Some(data)),
            None => (None, None),
        };
        let entry = Arc::new(Entry {
            seq: inner.next,
            name,
            subject,
            data,
            json: OnceLock::new(),
        });
        inner.next += 1;
        if inner.ring.len() >= self.limits.retention {
            inner.ring.pop_front();
        }
        if self.limits.retention > 0 {
            inner.ring.push_back(entry.clone());
        }
        let metrics = &self.metrics;
        inner.taps.retain(|tap| {
            if !entry.sent_on(&tap.filter) {
                return !tap.sender.is_closed();
            }
            match tap.sender.try_send(entry.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tap.cut.store(true, Ordering::Release);
                    metrics.event_stream_cut();
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
    }
}

/// An event as this server tells the others ([`Relayed`], which they read), written from
/// the data as it is.
#[derive(serde::Serialize)]
struct Telling<'a> {
    event: EventName,
    data: &'a EventData,
}

/// One open stream of a principal, counted until dropped.
#[derive(Debug)]
struct Open {
    hub: Hub,
    principal: Option<Principal>,
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut inner = self.hub.0.inner();
        if let Some(open) = inner.open.get_mut(&self.principal) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                inner.open.remove(&self.principal);
            }
        }
        // Forget the taps of streams gone, so that a quiet hub does not keep their buffers.
        inner.taps.retain(|tap| !tap.sender.is_closed());
        self.hub.0.metrics.event_stream_closed();
    }
}

/// How much later than this server another must have started, by their wall clocks, for
/// this one to expect to have heard all of its events: the clocks of two hosts may differ by
/// this much, and the first events of a server that started as this one did may have gone
/// out before this one listened.
const NEWCOMER_MARGIN: Duration = Duration::from_secs(2);

/// The first seq of `bulletin`'s server this one should have heard, hearing it first: 1 if
/// that server started (its epoch, the wall clock's nanoseconds at its start) clearly after
/// this one's `epoch` — this one listened from before its first bulletin, so hearing a later
/// one first means the ones before were lost —, else the one heard (bulletins told before
/// this server listened were never its to hear).
fn first_expected(bulletin: &Bulletin, epoch: u64) -> u64 {
    let margin = u64::try_from(NEWCOMER_MARGIN.as_nanos()).unwrap_or(u64::MAX);
    if bulletin.origin > epoch.saturating_add(margin) {
        1
    } else {
        bulletin.seq
    }
}

/// Appends to `hub` every bulletin of another server that `heard` brings, until the store
/// is gone; appends a reset ([`Hub::reset`]) wherever some may be missing: a bulletin after
/// a gap in its server's numbers (from 1 for a server that started after this one:
/// [`first_expected`]), bulletins the store says it missed, or lost because this server fell
/// behind them.
pub async fn relay(hub: Hub, mut heard: broadcast::Receiver<Heard>) {
    // The seq expected next of each other server (origin) heard from: 1 for a server that
    // started after this one, else its first bulletin heard starts it.
    let mut expected: HashMap<u64, u64> = HashMap::new();
    loop {
        let missed = match heard.recv().await {
            Ok(Heard::Told(bulletin)) if bulletin.origin == hub.epoch() => continue,
            Ok(Heard::Told(bulletin)) => {
                let next = (expected.entry(bulletin.origin))
                    .or_insert_with(|| first_expected(&bulletin, hub.epoch()));
                if bulletin.seq < *next {
                    // A copy of one appended already.
                    continue;
                }
                let gap = bulletin.seq - *next;
                *next = bulletin.seq + 1;
                if gap > 0 {
                    tracing::warn!(
                        gap,
                        origin = bulletin.origin,
                        "events of another server were lost on the way"
                    );
                    hub.reset();
                }
                hub.relayed(&bulletin);
                continue;
            }
            Ok(Heard::Missed) => "the store may have lost events of other servers".to_owned(),
            Err(broadcast::error::RecvError::Lagged(lost)) => {
                format!("{lost} events of other servers were lost: this server fell behind them")
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        tracing::warn!("{missed}: the event streams are reset");
        hub.reset();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fencelock_core::{BulletinFeed, Kind, MemoryStore, Owner, Timestamp};

    use super::*;
    use crate::auth::Caller;

    fn hub() -> Hub {
        let store: Arc<dyn LockStore> = Arc::new(MemoryStore::new());
        Hub::new(HubLimits::default(), Arc::new(Metrics::new()), store)
    }

    fn everything() -> Filter {
        Filter {
            prefix: String::new(),
            only: false,
            topics: Topics::parse(None).expect("every topic"),
            caller: Caller::Anyone,
        }
    }

    /// Another server's bulletin number `seq`: the release of `name`.
    fn bulletin(origin: u64, seq: u64, name: &str) -> Bulletin {
        let data = EventData::about(
            Kind::Lock,
            &Resource::new(name).expect("a name"),
            &Owner::new("w").expect("an owner"),
            Timestamp::now_wall(),
        );
        let relayed = serde_json::json!({"event": "release", "data": data});
        Bulletin {
            origin,
            seq,
            body: relayed.to_string(),
        }
    }

    /// What a stream gets next: an event's name and the name it is about.
    async fn next(subscription: &mut Subscription) -> (EventName, Option<String>) {
        let entry = tokio::time::timeout(Duration::from_secs(5), subscription.next())
            .await
            .expect("an entry in time")
            .expect("the stream goes on");
        let about = entry.subject.as_ref().map(|(_, name)| name.to_string());
        (entry.name, about)
    }

    #[tokio::test]
    async fn a_gap_in_another_servers_bulletins_resets_the_streams_and_resuming_from_before_it() {
        let hub = hub();
        let feed = BulletinFeed::new();
        let relay = tokio::spawn(relay(hub.clone(), feed.subscribe()));
        let mut stream = hub.subscribe(everything(), None).expect("a stream");
        // Another server's first bulletin heard starts its count; a copy changes nothing.
        for (seq, name) in [(7, "a"), (8, "b"), (8, "b"), (10, "d"), (11, "e")] {
            feed.hand(bulletin(42, seq, name));
        }
        let release = |name: &str| (EventName::Release, Some(name.to_owned()));
        assert_eq!(next(&mut stream).await, release("a"));
        assert_eq!(next(&mut stream).await, release("b"));
        assert_eq!(next(&mut stream).await, (EventName::Reset, None));
        assert_eq!(next(&mut stream).await, release("d"));
        assert_eq!(next(&mut stream).await, release("e"));
        // Entries 1 and 2 (a, b), the reset 3, then 4 and 5 (d, e). A stream resuming from
        // before the reset is reset; from it, resumes.
        let resumed = hub.subscribe(everything(), Some(hub.id(2))).expect("a stream");
        assert!(matches!(resumed.start, Start::Reset), "{:?}", resumed.start);
        let after = hub.subscribe(everything(), Some(hub.id(3))).expect("a stream");
        assert!(
            matches!(&after.start, Start::Replay(entries) if entries.len() == 2),
            "{:?}",
            after.start
        );
        relay.abort();
    }

    #[tokio::test]
    async fn the_first_bulletins_lost_of_a_server_started_later_reset_the_streams() {
        let hub = hub();
        let feed = BulletinFeed::new();
        let relay = tokio::spawn(relay(hub.clone(), feed.subscribe()));
        let mut stream = hub.subscribe(everything(), None).expect("a stream");
        let later = |by: Duration| hub.epoch() + u64::try_from(by.as_nanos()).expect("nanoseconds");
        // Started before this one (or within the margin): its count starts where it is
        // heard. Clearly after: from 1, so its first two lost show.
        let (before, within, after) = (
            hub.epoch() - 1,
            later(NEWCOMER_MARGIN),
            later(NEWCOMER_MARGIN * 5),
        );
        for (origin, seq, name) in [
            (before, 7, "a"),
            (within, 4, "b"),
            (after, 1, "c"),
            (after, 2, "d"),
        ] {
            feed.hand(bulletin(origin, seq, name));
        }
        let (newcomer, its_first) = (later(NEWCOMER_MARGIN * 6), 3);
        feed.hand(bulletin(newcomer, its_first, "e"));
        let release = |name: &str| (EventName::Release, Some(name.to_owned()));
        for name in ["a", "b", "c", "d"] {
            assert_eq!(next(&mut stream).await, release(name));
        }
        assert_eq!(next(&mut stream).await, (EventName::Reset, None));
        assert_eq!(next(&mut stream).await, release("e"));
        relay.abort();
    }

    #[tokio::test]
    async fn bulletins_the_store_missed_reset_the_streams() {
        let hub = hub();
        let feed = BulletinFeed::new();
        let relay = tokio::spawn(relay(hub.clone(), feed.subscribe()));
        let mut stream = hub.subscribe(everything(), None).expect("a stream");
        feed.hand(bulletin(42, 1, "a"));
        feed.missed();
        feed.hand(bulletin(42, 2, "b"));
        assert_eq!(next(&mut stream).await.0, EventName::Release);
        assert_eq!(next(&mut stream).await, (EventName::Reset, None));
        assert_eq!(next(&mut stream).await.0, EventName::Release);
        relay.abort();
    }
}
