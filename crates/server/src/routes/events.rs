//! `GET /events?prefix=&kinds=&since=`: every change, as Server-Sent Events — resumed from
//! `Last-Event-ID` (or `since`) while the id is in the hub's window, else `reset`, a
//! snapshot of what is live, and the live tail; a heartbeat comment on a quiet stream; an
//! `overflow` and the end for a stream that fell too far behind.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use fencelock_core::model::ELECTION_MARK;
use fencelock_core::{
    HoldKind, HoldPage, Kind, Leadership, LeasePage, ListQuery, LockStore, Resource, StoreError, Timestamp,
};
use fencelock_wire::{EventData, EventId, EventName, FieldError, Notice, ProblemKind, Topic, Topics, parse};
use futures_util::Stream;

use crate::auth::{Caller, Right};
use crate::hub::{Entry, Filter, Hub, Start, Subscription};
use crate::problem::ApiError;
use crate::state::App;

use super::list::{Page, locks, readable};
use super::responses::{AuthProblems, PathProblems};

/// The most leases, or names with holds, read from the store per call for a snapshot.
const SNAPSHOT_PAGE: usize = 1000;

/// Follow every change.
///
/// Server-Sent Events, one per change made through any server sharing the store: `event:`
/// is `grant`, `extend`, `renew`, `release`, `expire`, `force-release`, `refuse` (an acquire
/// that waited and was not granted), `deadlock`, `leader` or `vacant`; `data:` is one JSON
/// object (`EventData`); `id:` is `EPOCH-SEQ`. Reconnect with `Last-Event-ID` (or `since`)
/// to get every event after it, none twice, while it is in the server's retention window;
/// otherwise the stream starts with `event: reset`, then one `event: snapshot` per live
/// lease, permit or hold under the filter, then the live tail. Without an id, the stream
/// starts at the next event (a heartbeat says the id it starts from). A `reset` and a
/// snapshot may also come mid-stream, where this server may have missed events made
/// through another server sharing the store; an id from before it resumes with them. A
/// quiet stream gets `: heartbeat ID` (and that `id:`) at least every 15 s. A stream that
/// falls further behind than its buffer gets `event: overflow` and is closed. Only names the
/// caller may `read`.
#[utoipa::path(get, path = "/events", tag = "events",
    params(
        ("prefix" = Option<String>, Query, description = "Only names starting with this", max_length = 255, pattern = r"^[^\x00-\x1f\x7f]*$"),
        ("kinds" = Option<String>, Query, description = "Comma list of lock, semaphore, rwlock, election (default all)"),
        ("since" = Option<String>, Query, description = "Resume after this event id (EPOCH-SEQ); Last-Event-ID wins over it", pattern = r"^[0-9]+-[0-9]+$"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (EPOCH-SEQ), as an EventSource sends it"),
    ),
    responses(
        (status = 200, description = "The event stream", content_type = "text/event-stream", body = EventData),
        AuthProblems,
        PathProblems,
    ))]
pub async fn events(
    State(app): State<App>,
    caller: Caller,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let asked = Asked::parse(query.as_deref().unwrap_or(""), &headers)?;
    let filter = Filter {
        prefix: asked.prefix,
        only: false,
        topics: asked.topics,
        caller,
    };
    let mut subscription = app
        .hub
        .subscribe(filter.clone(), asked.since)
        .map_err(|refused| ApiError::Problem(ProblemKind::TooManyRequests, refused.to_string()))?;
    let again = Again::Snapshot(filter);
    let first = match std::mem::replace(&mut subscription.start, Start::Tail) {
        Start::Tail => VecDeque::from([heartbeat(subscription.at)]),
        Start::Replay(entries) => entries.iter().map(|entry| entry_event(&app.hub, entry)).collect(),
        Start::Reset => again.first(&app, subscription.at).await?,
    };
    Ok(stream(&app, subscription, first, again))
}

/// What a stream sends after `reset` — at its start, or when the hub resets it — so that
/// its client knows the state again.
pub(super) enum Again {
    /// A snapshot of every live lease, permit and hold under the filter.
    Snapshot(Filter),
    /// The current state of one election: `name`, kept as the lock `lock`.
    Election { name: Resource, lock: Resource },
}

impl Again {
    /// `reset`, then what this says, each with the id `at`. Read from the store after the
    /// stream subscribed: a change made meanwhile is in what this reads, in the live tail,
    /// or both — never in neither.
    pub(super) async fn first(&self, app: &App, at: EventId) -> Result<VecDeque<Event>, ApiError> {
        let mut events = self.state(app, at).await?;
        events.push_front(notice(EventName::Reset, Some(at)));
        Ok(events)
    }

    /// What this says, without the `reset`, each with the id `at`: read as [`Again::first`]
    /// reads it.
    pub(super) async fn state(&self, app: &App, at: EventId) -> Result<VecDeque<Event>, ApiError> {
        match self {
            Self::Snapshot(filter) => snapshot(app, filter, at).await,
            Self::Election { name, lock } => super::elections::current(app, name, lock, at).await,
        }
    }
}

/// The answer of a stream: the `first` events, then the tail of `subscription`, and `again`
/// after each reset of the hub.
pub(super) fn stream(
    app: &App,
    subscription: Subscription,
    first: VecDeque<Event>,
    again: Again,
) -> Response {
    let tail = Tail {
        pending: first,
        subscription,
        app: app.clone(),
        again,
        heartbeat: app.hub.limits().heartbeat,
        told: 0,
        done: false,
    };
    let mut response = Sse::new(tail.stream()).into_response();
    let headers = response.headers_mut();
    // Proxies that buffer answers (nginx) would hold events back.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    // A stream is the connection's last answer: once it ends (cut off, or at shutdown) the
    // connection closes, so a client reading to the end finds the end.
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// What a stream asks for, checked.
struct Asked {
    prefix: String,
    topics: Topics,
    since: Option<EventId>,
}

impl Asked {
    /// The query's `prefix`, `kinds` and `since`, and the `Last-Event-ID` header (which wins
    /// over `since`, as an EventSource reconnecting sends it); 422 listing every bad one.
    fn parse(raw: &str, headers: &HeaderMap) -> Result<Self, ApiError> {
        let pairs = parse::query_pairs(raw).map_err(|error| ApiError::Invalid(vec![error]))?;
        let get = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        let prefix = parse::list_prefix(get("prefix"));
        let topics = Topics::parse(get("kinds"));
        let since = since_of(get("since"), headers);
        match (prefix, topics, since) {
            (Ok(prefix), Ok(topics), Ok(since)) => Ok(Self {
                prefix,
                topics,
                since,
            }),
            (prefix, topics, since) => Err(ApiError::Invalid(
                [prefix.err(), topics.err(), since.err()]
                    .into_iter()
                    .flatten()
                    .collect(),
            )),
        }
    }
}

/// Where a stream resumes: the `Last-Event-ID` header, which wins over `since` (as an
/// EventSource reconnecting sends it); `None` for the next event.
fn since_of(since: Option<&str>, headers: &HeaderMap) -> Result<Option<EventId>, FieldError> {
    match headers.get("last-event-id") {
        Some(header) => header
            .to_str()
            .map_err(|_| FieldError::new("Last-Event-ID", "is not text"))
            .and_then(|text| id(text, "Last-Event-ID"))
            .map(Some),
        None => since.map(|text| id(text, "since")).transpose(),
    }
}

/// Where a stream of a raw query with only `since` (and `headers`) resumes: [`since_of`].
pub(super) fn since(raw: &str, headers: &HeaderMap) -> Result<Option<EventId>, Vec<FieldError>> {
    let pairs = parse::query_pairs(raw).map_err(|error| vec![error])?;
    let get = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    since_of(get("since"), headers).map_err(|error| vec![error])
}

/// An event id sent as `field`.
fn id(text: &str, field: &str) -> Result<EventId, FieldError> {
    text.trim()
        .parse()
        .map_err(|error: fencelock_wire::event::InvalidEventId| FieldError::new(field, error.to_string()))
}

/// One `snapshot` per live lease, permit or hold that `filter` admits, each with the id `at`
/// (the last event before the store was read), so that a client that reconnects after it
/// resumes from there.
async fn snapshot(app: &App, filter: &Filter, at: EventId) -> Result<VecDeque<Event>, ApiError> {
    let now = Timestamp::now_wall();
    let mut events = VecDeque::new();
    let store = app.waiters.store();
    // `readable` lists only what the caller may read under the prefix: the filter's rules.
    let mut snapshot = |data: EventData| events.push_back(data_event(EventName::Snapshot, Some(at), &data));
    if filter.topics.contains(Topic::Lock) {
        let leases = every::<LeasePage, _>(filter, |query| locks(store.as_ref(), query)).await?;
        for lease in &leases {
            snapshot(EventData::of_lease(Kind::Lock, lease, now));
        }
    }
    if filter.topics.contains(Topic::Election) {
        for leadership in leaderships(store.as_ref(), filter).await? {
            snapshot(EventData::of_leadership(&leadership, now));
        }
    }
    for kind in [HoldKind::Semaphore, HoldKind::RwLock] {
        let kind_of = Kind::from(kind);
        if !filter.topics.contains(Topic::of(kind_of)) {
            continue;
        }
        let names = every::<HoldPage, _>(
            filter,
            |query| async move { store.list_holds(kind, &query).await },
        )
        .await?;
        for hold in names.iter().flat_map(|(_, holds)| holds) {
            snapshot(EventData::of_hold(kind_of, hold, now));
        }
    }
    Ok(events)
}

/// Every live leadership of an election under `filter`'s prefix that its caller may read:
/// the locks under the mark and the prefix, page after page. Read rights are judged by the
/// election's name, which no prefix of the caller's covers as the lock's name, so they are
/// judged one by one here rather than by [`readable`]'s ranges.
async fn leaderships(store: &dyn LockStore, filter: &Filter) -> Result<Vec<Leadership>, StoreError> {
    let mut leaderships = Vec::new();
    let mut query = ListQuery {
        prefix: format!("{ELECTION_MARK}{}", filter.prefix),
        after: None,
        limit: SNAPSHOT_PAGE,
    };
    loop {
        let page = store.list(&query).await?;
        leaderships.extend(
            page.leases
                .iter()
                .filter(|lease| filter.caller.has(Right::Read, &lease.resource))
                .filter_map(Leadership::of),
        );
        match page.next {
            Some(next) => query.after = Some(next),
            None => return Ok(leaderships),
        }
    }
}

/// Every entry under `filter`'s prefix that its caller may read, page after page.
async fn every<P, F>(
    filter: &Filter,
    mut fetch: impl FnMut(ListQuery) -> F,
) -> Result<Vec<P::Item>, StoreError>
where
    P: Page,
    F: Future<Output = Result<P, StoreError>>,
{
    let mut items = Vec::new();
    let mut after = None;
    loop {
        let query = ListQuery {
            prefix: filter.prefix.clone(),
            after,
            limit: SNAPSHOT_PAGE,
        };
        let (got, next) = readable(&filter.caller, query, &mut fetch).await?.into_parts();
        items.extend(got);
        match next {
            Some(next) => after = Some(next),
            None => return Ok(items),
        }
    }
}

/// What follows the first events: the live tail, heartbeats, and the end.
struct Tail {
    pending: VecDeque<Event>,
    subscription: Subscription,
    app: App,
    again: Again,
    heartbeat: Duration,
    /// The highest seq of an entry sent, so a heartbeat never says an id before it.
    told: u64,
    done: bool,
}

impl Tail {
    /// The stream: the pending events, then every entry as it comes, a heartbeat after
    /// `heartbeat` without one; `overflow` and the end once cut off; the end at shutdown.
    fn stream(self) -> impl Stream<Item = Result<Event, Infallible>> + Send {
        futures_util::stream::unfold(self, |mut tail| async move {
            let event = tail.next().await?;
            Some((Ok(event), tail))
        })
    }

    async fn next(&mut self) -> Option<Event> {
        loop {
            // What is pending goes out even once the stream is done: its last words.
            if let Some(event) = self.pending.pop_front() {
                self.app.metrics.event_sent();
                return Some(event);
            }
            if self.done {
                return None;
            }
            tokio::select! {
                entry = self.subscription.next() => match entry {
                    Some(entry) => self.take(&entry).await,
                    None => {
                        self.done = true;
                        if self.subscription.was_cut() {
                            self.pending.push_back(notice(EventName::Overflow, None));
                        }
                    }
                },
                () = tokio::time::sleep(self.heartbeat) => self.heartbeat_now().await,
                () = self.app.waiters.shutting_down() => return None,
            }
        }
    }

    /// Queues what `entry` says: its event, or after a reset, `reset` and what [`Again`]
    /// reads. A stream that cannot read it (the store unavailable) says `reset` without an
    /// id and ends: its client reconnects from its last id, before the reset, and is
    /// answered with the reset and what it reads then.
    async fn take(&mut self, entry: &Entry) {
        self.told = self.told.max(entry.seq);
        if !entry.is_reset() {
            self.pending.push_back(entry_event(&self.app.hub, entry));
            return;
        }
        match self.again.first(&self.app, self.app.hub.id(entry.seq)).await {
            Ok(events) => self.pending.extend(events),
            Err(error) => {
                tracing::warn!(
                    ?error,
                    "an event stream ends: its snapshot after a reset could not be read"
                );
                self.pending.push_back(notice(EventName::Reset, None));
                self.done = true;
            }
        }
    }

    /// Queues the entries admitted up to the latest id, then a heartbeat saying it, so
    /// that a client resuming from it misses none.
    async fn heartbeat_now(&mut self) {
        let latest = self.app.hub.latest();
        while let Some(entry) = self.subscription.try_next() {
            self.take(&entry).await;
        }
        let id = self.app.hub.id(latest.seq.max(self.told));
        self.pending.push_back(heartbeat(id));
    }
}

/// An entry of the hub as it is sent.
pub(super) fn entry_event(hub: &Hub, entry: &Entry) -> Event {
    Event::default()
        .event(entry.name.as_str())
        .id(hub.id(entry.seq).to_string())
        .data(entry.json())
}

/// An event `name` with `data`, and the id `at` if any.
pub(super) fn data_event(name: EventName, at: Option<EventId>, data: &impl serde::Serialize) -> Event {
    // Serialising the wire types cannot fail: strings, numbers and nested objects only.
    let json = serde_json::to_string(data).unwrap_or_default();
    let event = Event::default().event(name.as_str()).data(json);
    match at {
        Some(at) => event.id(at.to_string()),
        None => event,
    }
}

/// A `reset` or an `overflow`.
pub(super) fn notice(name: EventName, at: Option<EventId>) -> Event {
    let now = Notice {
        at: Timestamp::now_wall().to_rfc3339(),
    };
    data_event(name, at, &now)
}

/// `: heartbeat ID`, with the `id:` too, so that an EventSource resumes from it.
fn heartbeat(id: EventId) -> Event {
    let id = id.to_string();
    Event::default().comment(format!("heartbeat {id}")).id(id)
}
