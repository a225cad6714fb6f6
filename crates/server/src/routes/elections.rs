//! `/elections/{name}`: leader election, kept as the lock no client can name
//! ([`Resource::election`]). A campaign is an acquire of that lock through the one acquire
//! flow; proclaim, renew and resign are judged calls on its lease; the leadership is read
//! from the lease and its metadata ([`Leadership::of`]).

use std::collections::VecDeque;

use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use fencelock_core::election::{meta, ttl_of};
use fencelock_core::{
    AcquireOutcome, FencingToken, Kind, Leadership, Lease, LockStore, Meta, Owner, Refusal, RenewOutcome,
    Resource, Terms, Timestamp, Ttl,
};
use fencelock_wire::{
    CampaignBody, CampaignDelayed, CampaignResponse, CampaignStopped, CampaignedBody, ElectionRenewBody,
    EventData, EventName, FieldError, Judged, LeadershipBody, Op, Problem, ProblemKind, ProclaimBody,
    Release, Renew, ResignBody, Topic, Topics, parse,
};

use crate::auth::{Caller, Right};
use crate::extract::{JsonObject, both};
use crate::hub::{Filter, Start};
use crate::listener::Peer;
use crate::observe::{Asked, observed};
use crate::problem::ApiError;
use crate::state::App;

use super::acquire::{OneLock, Tell};
use super::acquiring::acquired_one;
use super::answer;
use super::detached::detached;
use super::events::{Again, data_event, since, stream};
use super::judge::{authorised, judge};
use super::responses::{AuthProblems, BodyProblems, Deadlocked, Denied, LeaderRefusals, PathProblems};

/// The election of a `/elections/{name}…` path: its name (the field `name`, at most 254
/// bytes) and the lock that keeps it.
fn election(uri: &Uri) -> Result<(Resource, Resource), FieldError> {
    let raw = uri
        .path()
        .strip_prefix("/elections/")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default();
    let name = parse::name(raw)?;
    let lock = Resource::election(&name).map_err(|_| {
        FieldError::new(
            "name",
            format!(
                "must be at most {} bytes of UTF-8",
                fencelock_core::model::MAX_ELECTION_NAME_BYTES
            ),
        )
    })?;
    Ok((name, lock))
}

/// The leadership a lease of an election's lock keeps. Every such lease is one (its name is
/// an election's), so the fallback is never taken.
fn leadership(lease: &Lease) -> Result<LeadershipBody, ApiError> {
    Leadership::of(lease)
        .map(|l| LeadershipBody::from(&l))
        .ok_or_else(|| {
            ApiError::Problem(
                ProblemKind::Internal,
                "a lease of an election that is no leadership".into(),
            )
        })
}

/// Campaign.
///
/// When nobody leads, the candidate wins a new term (a fencing token greater than every
/// term before): `elected: true`. When another candidate leads, answers `elected: false`
/// with its leadership — at once, or after waiting up to `wait_ms` in first-come
/// first-served order. The leader campaigning again keeps its term and `since`, leads for
/// the TTL from now, and replaces its value if it sends one. Needs the `lock` right on the
/// name.
#[utoipa::path(post, path = "/elections/{name}", tag = "elections",
    params(("name" = String, Path, description = "The election, percent-encoded: 1 to 254 bytes once decoded, no control characters", min_length = 1, max_length = 254, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = CampaignBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Elected (or still the leader); another candidate leads; the election is closed by a lock-delay; or, from a server shutting down, nothing known (`shutting_down`)", body = CampaignResponse),
        Deadlocked,
        AuthProblems,
        Denied,
        BodyProblems,
    ))]
pub async fn campaign(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    peer: Option<Extension<Peer>>,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    let ((name, lock), request) = both(election(&uri), parse::campaign(&body, &app.config.limits))?;
    caller.may(Right::Lock, &lock)?;
    let candidate = caller.owns(request.candidate.clone());
    if let Some(answer) = campaign_again(&app, &lock, &candidate, &request).await? {
        return Ok(answer);
    }
    let terms = Terms::ttl(request.ttl)
        .lock_delay(app.config.lock_delay)
        .meta(Some(meta(request.value.as_deref(), request.ttl, None)));
    let campaign = OneLock {
        terms,
        told: Campaigning { name },
    };
    let asked = (lock, request.candidate, request.wait);
    acquired_one(app, &caller, peer, asked, campaign).await
}

/// The leader campaigning again: its leadership renewed for the TTL, with the value sent
/// (or its own), keeping its term and `since` — a token-checked renewal, not an extension,
/// which would move `acquired_at` and with it what `since` says. `None` if the candidate
/// does not lead (or stopped leading meanwhile): then it campaigns as any candidate does.
async fn campaign_again(
    app: &App,
    lock: &Resource,
    candidate: &Owner,
    request: &parse::Campaign,
) -> Result<Option<Response>, ApiError> {
    let store = app.waiters.store();
    let Some(lease) = store.get(lock).await? else {
        return Ok(None);
    };
    let Some(current) = Leadership::of(&lease).filter(|l| &l.leader == candidate) else {
        return Ok(None);
    };
    let value = request.value.as_deref().or(current.value.as_deref());
    let asked = Asked {
        resource: lock.clone(),
        owner: candidate.clone(),
        token: Some(current.term),
    };
    let renewal = current.meta_with(value, request.ttl);
    let call = store.renew_with(lock, candidate, request.ttl, Some(current.term), Some(&renewal));
    match observed(app, Kind::Lock, Op::Renew, &asked, call).await? {
        RenewOutcome::Renewed(renewed) => {
            tell_if_new_value(app, &current, &renewed);
            let answer = CampaignResponse::Campaigned(CampaignedBody {
                elected: true,
                leadership: leadership(&renewed)?,
            });
            Ok(Some(answer::json(StatusCode::OK, &answer)))
        }
        RenewOutcome::NotFound | RenewOutcome::Forbidden | RenewOutcome::Conflict => Ok(None),
    }
}

/// Publishes `leader` if `renewed` says another value than `before` did: a renewal of an
/// election's lock is no event of its own.
fn tell_if_new_value(app: &App, before: &Leadership, renewed: &Lease) {
    if let Some(now) = Leadership::of(renewed)
        && now.value != before.value
    {
        app.hub.publish(
            EventName::Leader,
            EventData::of_leadership(&now, Timestamp::now_wall()),
        );
    }
}

/// An acquire of the lock of the election `name`, told as a campaign.
struct Campaigning {
    name: Resource,
}

impl Tell for Campaigning {
    type Answer = CampaignResponse;

    fn stopped(&self, _: &Asked) -> CampaignResponse {
        CampaignResponse::Stopped(CampaignStopped {
            elected: false,
            name: self.name.to_string(),
            shutting_down: true,
        })
    }

    fn answer(&self, _: &Asked, outcome: &AcquireOutcome) -> Result<CampaignResponse, ApiError> {
        let campaigned = |elected, lease: &Lease| {
            Ok(CampaignResponse::Campaigned(CampaignedBody {
                elected,
                leadership: leadership(lease)?,
            }))
        };
        match outcome {
            AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease) => {
                campaigned(true, lease)
            }
            AcquireOutcome::Held { holder, .. } => campaigned(false, holder),
            AcquireOutcome::Delayed { retry_in, .. } => Ok(CampaignResponse::Delayed(CampaignDelayed {
                elected: false,
                name: self.name.to_string(),
                retry_after_ms: u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX),
            })),
        }
    }
}

/// The leader.
///
/// 404 when nobody leads. Needs the `read` right on the name.
#[utoipa::path(get, path = "/elections/{name}", tag = "elections",
    params(("name" = String, Path, description = "The election, percent-encoded: 1 to 254 bytes once decoded, no control characters", min_length = 1, max_length = 254, pattern = r"^[^\x00-\x1f\x7f]+$")),
    responses(
        (status = 200, description = "The leadership", body = LeadershipBody),
        (status = 404, description = "Nobody leads", body = Problem, content_type = "application/problem+json"),
        AuthProblems,
        Denied,
        PathProblems,
    ))]
pub async fn get(State(app): State<App>, caller: Caller, uri: Uri) -> Result<Response, ApiError> {
    let (name, lock) = election(&uri).map_err(|e| ApiError::Invalid(vec![e]))?;
    caller.may(Right::Read, &lock)?;
    let call = app.waiters.store().get(&lock);
    match observed(&app, Kind::Lock, Op::Get, &(), call).await? {
        Some(lease) => Ok(answer::json(StatusCode::OK, &leadership(&lease)?)),
        None => Err(vacant(&name)),
    }
}

/// The problem of an election nobody leads.
fn vacant(name: &Resource) -> ApiError {
    ApiError::Problem(ProblemKind::NotFound, format!("nobody leads the election {name}"))
}

/// What a judged call (a renewal, a resignation) did, or the problem its refusal is.
fn done<'o, O: Judged>(outcome: &'o O, name: &Resource, candidate: &Owner) -> Result<&'o O::Done, ApiError> {
    outcome
        .judged()
        .map_err(|refusal| refused(refusal, name, candidate))
}

/// The problem of a call on a leadership the store refused.
fn refused(refusal: Refusal, name: &Resource, candidate: &Owner) -> ApiError {
    let detail = match refusal {
        Refusal::NotFound => return vacant(name),
        Refusal::Forbidden => format!("another candidate than {candidate} leads the election {name}"),
        Refusal::Conflict => format!("the term given is not the current one of the election {name}"),
    };
    ApiError::Problem(refusal.into(), detail)
}

/// What a call on the leadership of `lock` asks for: the candidate's, in `term`.
fn in_term(lock: Resource, candidate: Owner, term: FencingToken) -> Asked {
    Asked {
        resource: lock,
        owner: candidate,
        token: Some(term),
    }
}

/// What the store answers to a renewal of the leadership `asked` tells of, for `ttl`, with
/// `meta`: the lock's renewal, judged by the term and the candidate.
async fn renewal(app: &App, asked: &Asked, ttl: Ttl, meta: Option<Meta>) -> Result<RenewOutcome, ApiError> {
    let renew = Renew {
        owner: asked.owner.clone(),
        ttl,
        token: asked.token,
        meta,
    };
    judge(app, &renew, asked).await
}

/// Change the leader's value.
///
/// Only the leader, in its current term: 409 for another term, 403 for another candidate,
/// 404 when nobody leads. The leadership keeps its term, `since` and `expires_at` (a
/// proclamation does not renew it). Needs the `lock` right on the name.
#[utoipa::path(post, path = "/elections/{name}/proclaim", tag = "elections",
    params(("name" = String, Path, description = "The election, percent-encoded", min_length = 1, max_length = 254, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = ProclaimBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The leadership with its new value", body = LeadershipBody),
        LeaderRefusals,
        AuthProblems,
        BodyProblems,
    ))]
pub async fn proclaim(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    let ((name, lock), request) = both(election(&uri), parse::proclaim(&body))?;
    let asked = authorised(&caller, in_term(lock, request.candidate, request.term))?;
    detached(async move {
        let lease = app.waiters.store().get(&asked.resource).await?;
        let lease = lease.ok_or_else(|| vacant(&name))?;
        let current = Leadership::of(&lease).ok_or_else(|| vacant(&name))?;
        // Judged by the store as a renewal (the term, the candidate), for the TTL the
        // leader last asked for, which every leadership of this server says.
        let ttl = ttl_of(&lease).ok_or_else(|| vacant(&name))?;
        let meta = current.meta_with(Some(&request.value), ttl);
        let outcome = renewal(&app, &asked, ttl, Some(meta)).await?;
        let renewed = done(&outcome, &name, &asked.owner)?;
        tell_if_new_value(&app, &current, renewed);
        Ok(answer::json(StatusCode::OK, &leadership(renewed)?))
    })
    .await
}

/// Renew the leadership.
///
/// Sets `expires_at` to now + TTL; term, `since` and value stay. Only the leader, in its
/// current term: 409 for another term, 403 for another candidate, 404 when nobody leads (an
/// expired leadership is never renewed: campaign again). Needs the `lock` right on the name.
#[utoipa::path(post, path = "/elections/{name}/renew", tag = "elections",
    params(("name" = String, Path, description = "The election, percent-encoded", min_length = 1, max_length = 254, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = ElectionRenewBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Renewed", body = LeadershipBody),
        LeaderRefusals,
        AuthProblems,
        BodyProblems,
    ))]
pub async fn renew(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    let ((name, lock), request) = both(election(&uri), parse::election_renew(&body, &app.config.limits))?;
    let asked = authorised(&caller, in_term(lock, request.candidate, request.term))?;
    detached(async move {
        // The leadership's metadata as it is, with the TTL asked for (what a proclamation
        // renews for): read first, then judged by the store with the term.
        let current = app.waiters.store().get(&asked.resource).await?;
        let current = current.as_ref().and_then(Leadership::of);
        let meta = current.map(|l| l.meta_with(l.value.as_deref(), request.ttl));
        let outcome = renewal(&app, &asked, request.ttl, meta).await?;
        let renewed = done(&outcome, &name, &asked.owner)?;
        Ok(answer::json(StatusCode::OK, &leadership(renewed)?))
    })
    .await
}

/// Resign.
///
/// Ends the leadership at once: the election is vacant, and the first candidate waiting
/// wins the next term. Only the leader, in its current term: 409 for another term, 403 for
/// another candidate, 404 when nobody leads. Needs the `lock` right on the name.
#[utoipa::path(delete, path = "/elections/{name}", tag = "elections",
    params(("name" = String, Path, description = "The election, percent-encoded", min_length = 1, max_length = 254, pattern = r"^[^\x00-\x1f\x7f]+$")),
    request_body(content = ResignBody, content_type = "application/json"),
    responses(
        (status = 204, description = "Resigned"),
        LeaderRefusals,
        AuthProblems,
        BodyProblems,
    ))]
pub async fn resign(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    let ((name, lock), request) = both(election(&uri), parse::resign(&body))?;
    let asked = authorised(&caller, in_term(lock, request.candidate, request.term))?;
    detached(async move {
        let release = Release {
            owner: asked.owner.clone(),
            token: asked.token,
        };
        done(&judge(&app, &release, &asked).await?, &name, &asked.owner)?;
        Ok(StatusCode::NO_CONTENT.into_response())
    })
    .await
}

/// Follow the election.
///
/// Server-Sent Events: first the current state (`leader` with the leadership, or
/// `vacant`), then every `leader` (a new term, or a new value) and `vacant` (resigned,
/// expired or force-released) of this election, in order. Resumes from `Last-Event-ID`
/// (or `since`) as `GET /events` does; outside the window (or mid-stream, as on `/events`),
/// `reset` then the current state.
/// Heartbeats, the cut-off of a slow reader and the streams per principal are `/events`'.
/// Needs the `read` right on the name.
#[utoipa::path(get, path = "/elections/{name}/observe", tag = "elections",
    params(
        ("name" = String, Path, description = "The election, percent-encoded", min_length = 1, max_length = 254, pattern = r"^[^\x00-\x1f\x7f]+$"),
        ("since" = Option<String>, Query, description = "Resume after this event id (EPOCH-SEQ); Last-Event-ID wins over it", pattern = r"^[0-9]+-[0-9]+$"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (EPOCH-SEQ), as an EventSource sends it"),
    ),
    responses(
        (status = 200, description = "The event stream", content_type = "text/event-stream", body = EventData),
        AuthProblems,
        Denied,
        PathProblems,
    ))]
pub async fn observe(
    State(app): State<App>,
    caller: Caller,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let election = election(&uri);
    let since = since(query.as_deref().unwrap_or(""), &headers);
    let ((name, lock), since) = match (election, since) {
        (Ok(election), Ok(since)) => (election, since),
        (election, since) => {
            let errors = election.err().into_iter().chain(since.err().unwrap_or_default());
            return Err(ApiError::Invalid(errors.collect()));
        }
    };
    caller.may(Right::Read, &lock)?;
    let filter = Filter {
        prefix: name.to_string(),
        only: true,
        topics: Topics::of(&[Topic::Election]),
        caller,
    };
    let mut subscription = app
        .hub
        .subscribe(filter, since)
        .map_err(|refused| ApiError::Problem(ProblemKind::TooManyRequests, refused.to_string()))?;
    let at = subscription.at;
    let again = Again::Election { name, lock };
    let first = match std::mem::replace(&mut subscription.start, Start::Tail) {
        Start::Replay(entries) => entries
            .iter()
            .map(|entry| super::events::entry_event(&app.hub, entry))
            .collect(),
        // Subscribed before the store is read: a change made meanwhile is in the current
        // state, in the live tail, or both — never in neither.
        Start::Tail => again.state(&app, at).await?,
        Start::Reset => again.first(&app, at).await?,
    };
    Ok(stream(&app, subscription, first, again))
}

/// The current state of the election as the first event of a stream: `leader`, or
/// `vacant`, with the id `at`.
pub(super) async fn current(
    app: &App,
    name: &Resource,
    lock: &Resource,
    at: fencelock_wire::EventId,
) -> Result<VecDeque<axum::response::sse::Event>, ApiError> {
    let store = app.waiters.store();
    let now = Timestamp::now_wall();
    let event = match store.get(lock).await?.as_ref().and_then(Leadership::of) {
        Some(leadership) => data_event(
            EventName::Leader,
            Some(at),
            &EventData::of_leadership(&leadership, now),
        ),
        None => data_event(EventName::Vacant, Some(at), &EventData::vacant(name, now)),
    };
    Ok(VecDeque::from([event]))
}
