//! [`HttpStore`]: the [`LockStore`] trait over the HTTP API of a fencelock server, so that
//! everything written against a store (the guard, the commands, the conformance suite) works
//! the same through a server.
//!
//! Locks travel at `/locks/{resource}`, semaphores at `/semaphores/{name}`, read-write
//! locks at `/rwlocks/{name}`, and the lock of an election ([`Resource::election`]) at
//! `/elections/{name}`: its owner is the candidate, its token the term, the value the
//! leader says is kept in its metadata ([`fencelock_core::election`]), so that the guard
//! keeps a leadership as it keeps any lease. Answers are mapped back to outcomes by
//! [`fencelock_wire::outcome`] and [`ProblemKind::from_status`], the translator and the status
//! table the server uses too (a 409 whose problem is a `limit-mismatch` is
//! [`HoldOutcome::LimitMismatch`], read back by [`outcome::decode_limit_mismatch`]). A server
//! that cannot be reached, times out, fails the TLS handshake or answers 503 is
//! [`StoreError::Unavailable`]; a request the server refuses as invalid (422, 400, 413, 415)
//! is [`StoreError::Invalid`]. A server with authentication on answers 401 for a missing or
//! unknown token ([`StoreError::Unauthenticated`]), 403 for a right the caller lacks
//! ([`StoreError::NotAllowed`], told apart from a lease of another owner by the problem's
//! type) and 429 when the caller sends too much ([`StoreError::RateLimited`], with its
//! `Retry-After`). An acquire of any kind whose wait would close a cycle of owners waiting for
//! each other is answered 409 `deadlock`: [`StoreError::Deadlock`], with the cycle the server
//! names.

use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::election::{self, Leadership};
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Capabilities, Claim, Deadlock, Expired, FencingToken, ForceOutcome,
    Hold, HoldKind, HoldOutcome, HoldPage, Key, Kind, Lease, LeasePage, ListQuery, LockStore, Meta, Owner,
    Refusal, ReleaseNotice, ReleaseOutcome, RenewOutcome, Resource, Resources, StoreError, Terms, Timestamp,
    Ttl,
};
use fencelock_wire::body::InvalidLease;
use fencelock_wire::hold::collection;
use fencelock_wire::{
    AcquireAllRequest, AcquireAllResponse, AcquireRequest, AcquireResponse, CampaignBody, CampaignResponse,
    ElectionRenewBody, ForceReleaseRequest, HoldAcquireRequest, HoldAcquireResponse, HoldListResponse,
    HoldsBody, Judged, LeadershipBody, LeaseBody, ListResponse, Problem, ProblemKind, ProclaimBody,
    ReleaseRequest, RenewRequest, ResignBody, outcome, parse,
};
use reqwest::header::{AUTHORIZATION, HeaderMap, RETRY_AFTER};
use reqwest::{Response, StatusCode};

use crate::access::{AuthToken, CaCertificates};
use crate::events::Events;

/// Result of a store call.
type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How an [`HttpStore`] talks to its server: timeouts and limits, the CAs it trusts for
/// `https://`, and its bearer token.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// How long to wait for a TCP (and TLS) connection to be set up.
    pub connect_timeout: Duration,
    /// How long one request may take in all, from sending to the end of the answer. An
    /// acquire that waits in line gets its wait on top of this.
    pub request_timeout: Duration,
    /// The longest `wait_ms` sent in one acquire; a longer wait is made of several requests.
    /// The SPEC's default server maximum is 300 s; set this to the server's `--max-wait` if
    /// it is lower, or the server refuses the wait as invalid.
    pub max_wait_per_request: Duration,
    /// How long an idle keep-alive connection is kept. Shorter than the server's idle time
    /// (10 s by default), so the client never sends on a connection the server is closing.
    pub pool_idle_timeout: Duration,
    /// For `https://`: trust only the certificates signed by these CAs (`None`: the system's
    /// trusted roots).
    pub ca_certificates: Option<CaCertificates>,
    /// Sent as `Authorization: Bearer TOKEN` on every request (`None`: no `Authorization`).
    pub auth_token: Option<AuthToken>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_wait_per_request: Duration::from_secs(300),
            pool_idle_timeout: Duration::from_secs(5),
            ca_certificates: None,
            auth_token: None,
        }
    }
}

/// Why a server address was refused.
#[derive(Debug, thiserror::Error)]
#[error("invalid server address {address:?}: {reason}")]
pub struct InvalidServerAddress {
    /// The address as given.
    pub address: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A fencelock server, seen as a [`LockStore`].
///
/// One `HttpStore` keeps a pool of keep-alive connections (HTTP/1.1, rustls for `https://`);
/// share it (it is cheap to put in an [`Arc`](std::sync::Arc)) rather than making one per
/// call.
///
/// # What it cannot tell
///
/// The API answers a release with an empty 204, so [`ReleaseOutcome::Released`] carries no
/// lease ([`Capabilities::knows_released_lease`] is `false`).
///
/// # Not supported
///
/// [`LockStore::releases`] is `None` (the API has no feed of releases: waiting happens on
/// the server, through `wait_ms`), and [`LockStore::purge_expired`] returns nothing (the
/// server purges by itself).
///
/// A waiting writer's intent is the server's to keep: it records one for every write
/// acquire that waits on it ([`acquire_hold_waiting`](Self::acquire_hold_waiting) with a
/// wait). The API has no field for an intent of the caller's own, so the `intent` of
/// [`LockStore::acquire_hold`] is not sent, and [`LockStore::withdraw_intent`] has nothing to
/// withdraw.
#[derive(Debug)]
pub struct HttpStore {
    base: String,
    http: reqwest::Client,
    options: HttpOptions,
}

impl HttpStore {
    /// A store for the server at `address` (`http://host:port` or `https://…`, optionally
    /// with a path prefix for a server behind a reverse proxy), with default options. Does
    /// not connect: the first call does.
    pub fn new(address: &str) -> Result<Self, InvalidServerAddress> {
        Self::with_options(address, HttpOptions::default())
    }

    /// A store for the server at `address` with `options` (see [`HttpOptions`]: a CA to trust,
    /// a bearer token).
    pub fn with_options(address: &str, options: HttpOptions) -> Result<Self, InvalidServerAddress> {
        let invalid = |reason: &str| InvalidServerAddress {
            address: address.to_owned(),
            reason: reason.to_owned(),
        };
        let url = reqwest::Url::parse(address).map_err(|e| invalid(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("expected http:// or https://"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("has no host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("must not have a query or a fragment"));
        }
        let http = http_client(&options, true)
            .map_err(|e| invalid(&format!("cannot set up an HTTP client: {e}")))?;
        Ok(Self {
            base: url.as_str().trim_end_matches('/').to_owned(),
            http,
            options,
        })
    }

    /// The server's event stream (`GET /events`) under `prefix`, of `kinds` (a comma list
    /// of `lock`, `semaphore`, `rwlock`, `election`; empty: all), from the next event on;
    /// it resumes by itself after a disconnect. Nothing is sent before the first
    /// [`Events::next`](crate::events::Events::next).
    pub fn events(&self, prefix: &str, kinds: &str) -> Result<Events, StoreError> {
        let mut url = format!("{}/events?prefix={}", self.base, parse::encode_segment(prefix));
        if !kinds.is_empty() {
            url.push_str("&kinds=");
            url.push_str(kinds);
        }
        self.stream(url)
    }

    /// The stream of the election `name` (`GET /elections/{name}/observe`): first its
    /// current state (`leader` or `vacant`), then every change of leader, value or vacancy,
    /// in term order; it resumes by itself after a disconnect.
    pub fn observe(&self, name: &Resource) -> Result<Events, StoreError> {
        self.stream(format!("{}/observe", self.election_url(name.as_str())))
    }

    fn stream(&self, url: String) -> Result<Events, StoreError> {
        // A stream has no end: its requests get no overall timeout.
        let http = http_client(&self.options, false)
            .map_err(|e| StoreError::unavailable("cannot set up an HTTP client", e))?;
        Ok(Events::new(self, http, url))
    }

    /// The server's address, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The options this store was made with.
    pub fn options(&self) -> &HttpOptions {
        &self.options
    }

    /// Acquires `resource` for `owner` on `terms` — its TTL and its cap on holding (as
    /// `max_hold_ms`); the lock-delay is the server's own (`--lock-delay`), whatever `terms`
    /// says. If another owner holds it, the server keeps the request in line for up to
    /// `wait` (at most [`HttpOptions::max_wait_per_request`] is sent; the caller loops for
    /// longer waits).
    pub async fn acquire_waiting(
        &self,
        resource: &Resource,
        owner: &Owner,
        terms: Terms,
        wait: Duration,
    ) -> Result<AcquireOutcome> {
        if let Some(election) = resource.election_name() {
            return self.campaign_waiting(election, owner, &terms, wait).await;
        }
        // The cap and the metadata travel; the lock-delay does not: the server applies its own.
        let body = |wait| AcquireRequest::new(owner, &terms, wait);
        let response = self.post_acquire(self.lock_url(resource), wait, body).await?;
        outcome::decode_acquire(ok_json::<AcquireResponse>(response).await?).map_err(invalid_lease)
    }

    /// Campaigns in the election `name` for `candidate`, with the value `terms`' metadata
    /// keeps, waiting up to `wait` (cut as [`acquire_waiting`](Self::acquire_waiting) cuts
    /// it) while another candidate leads.
    async fn campaign_waiting(
        &self,
        name: &str,
        candidate: &Owner,
        terms: &Terms,
        wait: Duration,
    ) -> Result<AcquireOutcome> {
        let value = election::value_of(terms.meta.as_ref());
        let body = |wait| CampaignBody::new(candidate, value.as_deref(), terms.ttl, wait);
        let response = self.post_acquire(self.election_url(name), wait, body).await?;
        Ok(match ok_json::<CampaignResponse>(response).await? {
            CampaignResponse::Campaigned(won) if won.elected => AcquireOutcome::Granted {
                lease: leadership_lease(won.leadership)?,
                expired: None,
            },
            CampaignResponse::Campaigned(lost) => {
                let holder = leadership_lease(lost.leadership)?;
                AcquireOutcome::Held {
                    expires_in: holder.expires_at.since(Timestamp::now_wall()),
                    holder,
                }
            }
            CampaignResponse::Delayed(delayed) => AcquireOutcome::Delayed {
                resource: election_lock(&delayed.name)?,
                retry_in: Duration::from_millis(delayed.retry_after_ms),
            },
            CampaignResponse::Stopped(_) => return Err(invalid_lease(InvalidLease::ShuttingDown)),
        })
    }

    /// Acquires every lock of `resources` for `owner` on `terms` (as
    /// [`acquire_waiting`](Self::acquire_waiting) sends them), or none, in one request
    /// (`POST /locks`): the server takes them in one step where its store can. While some are
    /// held by others, the server keeps the request in line for up to `wait` (at most
    /// [`HttpOptions::max_wait_per_request`] is sent; the caller loops for longer waits).
    pub async fn acquire_all_waiting(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
        wait: Duration,
    ) -> Result<AcquireAllOutcome> {
        let body = |wait| AcquireAllRequest::new(resources, owner, &terms, wait);
        let url = format!("{}/locks", self.base);
        let response = self.post_acquire(url, wait, body).await?;
        outcome::decode_acquire_all(ok_json::<AcquireAllResponse>(response).await?).map_err(invalid_lease)
    }

    /// Acquires a hold of `claim` on `name` for `owner`; while it is busy, the server keeps
    /// the request in line for up to `wait` (at most [`HttpOptions::max_wait_per_request`]
    /// is sent; the caller loops for longer waits). A writer that waits has its intent
    /// recorded by the server, so that readers arriving later wait behind it. A new hold has
    /// `meta`; an extended one keeps its own unless `meta` is given.
    pub async fn acquire_hold_waiting(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        meta: Option<&Meta>,
        wait: Duration,
    ) -> Result<HoldOutcome> {
        let body = |wait| HoldAcquireRequest::new(owner, claim, ttl, meta, wait);
        let response = self
            .post_acquire(self.hold_url(claim.kind(), name), wait, body)
            .await?;
        if response.status() == StatusCode::OK {
            let answer: HoldAcquireResponse = read_json(response).await?;
            return outcome::decode_hold_acquire(answer).map_err(invalid_lease);
        }
        let refused = Refused::read(response).await;
        match refused.problem.as_ref().and_then(outcome::decode_limit_mismatch) {
            Some(mismatch) => Ok(mismatch),
            None => Err(refused.error()),
        }
    }

    /// Posts the acquire `body(wait)` to `url`: `wait` cut to what one request may wait, and
    /// the request given that long on top of its timeout, so that waiting in line does not
    /// time it out.
    async fn post_acquire<B: serde::Serialize>(
        &self,
        url: String,
        wait: Duration,
        body: impl FnOnce(Duration) -> B,
    ) -> Result<Response> {
        let wait = wait.min(self.options.max_wait_per_request);
        let request = self
            .http
            .post(url)
            .json(&body(wait))
            .timeout(self.options.request_timeout + wait);
        self.send(request).await
    }

    fn hold_url(&self, kind: HoldKind, name: &Resource) -> String {
        format!(
            "{}{}/{}",
            self.base,
            collection(kind),
            parse::encode_segment(name.as_str())
        )
    }

    /// A page of `collection` (`/locks`, `/semaphores`, `/rwlocks`) as `query` asks.
    fn list_url(&self, collection: &str, query: &ListQuery) -> String {
        // Every part is escaped down to unreserved characters, so the query string is safe
        // as it is.
        let mut url = format!(
            "{}{collection}?limit={}&prefix={}",
            self.base,
            query.limit,
            parse::encode_segment(&query.prefix)
        );
        if let Some(after) = &query.after {
            url.push_str("&cursor=");
            url.push_str(&parse::encode_cursor(after));
        }
        url
    }

    fn election_url(&self, name: &str) -> String {
        format!("{}/elections/{}", self.base, parse::encode_segment(name))
    }

    fn lock_url(&self, resource: &Resource) -> String {
        format!("{}/locks/{}", self.base, parse::encode_segment(resource.as_str()))
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Response> {
        request.send().await.map_err(|error| {
            let base = &self.base;
            let message = if error.is_timeout() {
                format!("the fencelock server at {base} did not answer in time")
            } else if let Some(tls) = tls_cause(&error) {
                format!(
                    "the TLS handshake with the fencelock server at {base} failed: {tls} (is the \
                     server's certificate signed by a CA this client trusts, and made for the \
                     host in the address?)"
                )
            } else {
                format!("the fencelock server at {base} cannot be reached")
            };
            StoreError::unavailable(message, error)
        })
    }

    fn key_url(&self, key: &Key) -> String {
        match key.kind {
            Kind::Lock => self.lock_url(&key.name),
            Kind::Semaphore => self.hold_url(HoldKind::Semaphore, &key.name),
            Kind::RwLock => self.hold_url(HoldKind::RwLock, &key.name),
        }
    }
}

/// The HTTP client of `options`: its CA and token, and an overall timeout on each request
/// if `timed`.
fn http_client(options: &HttpOptions, timed: bool) -> reqwest::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(options.connect_timeout)
        .pool_idle_timeout(options.pool_idle_timeout)
        // Lock requests are small: send them at once.
        .tcp_nodelay(true);
    if timed {
        builder = builder.timeout(options.request_timeout);
    }
    if let Some(ca) = &options.ca_certificates {
        builder = builder.tls_certs_only(ca.certificates());
    }
    if let Some(token) = &options.auth_token {
        builder = builder.default_headers(HeaderMap::from_iter([(AUTHORIZATION, token.authorization())]));
    }
    builder.build()
}

/// The TLS error under a failed request, if that is what failed it. rustls's errors reach
/// reqwest inside `io::Error`s (nested), whose `source` skips the error they wrap: look
/// inside each.
fn tls_cause(error: &reqwest::Error) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(mut error) = next {
        while let Some(inner) = error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            error = inner;
        }
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = error.source();
    }
    None
}

#[async_trait]
impl LockStore for HttpStore {
    async fn acquire_with(&self, resource: &Resource, owner: &Owner, terms: Terms) -> Result<AcquireOutcome> {
        self.acquire_waiting(resource, owner, terms, Duration::ZERO).await
    }

    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        self.acquire_all_waiting(resources, owner, terms, Duration::ZERO)
            .await
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        let url = match resource.election_name() {
            Some(election) => self.election_url(election),
            None => self.lock_url(resource),
        };
        let response = self.send(self.http.get(url)).await?;
        if response.status() != StatusCode::OK {
            return nothing_held(response).await.map(|()| None);
        }
        Ok(Some(match resource.election_name() {
            Some(_) => leadership_lease(read_json(response).await?)?,
            None => lease(read_json(response).await?)?,
        }))
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        if let Some(election) = resource.election_name() {
            let body = ResignBody::new(owner, term(token)?);
            let request = self.http.delete(self.election_url(election)).json(&body);
            return judged(self.send(request).await?, async |_| Ok(())).await;
        }
        let body = ReleaseRequest {
            owner: owner.to_string(),
            fencing_token: token.map(|t| t.0),
        };
        let response = self
            .send(self.http.delete(self.lock_url(resource)).json(&body))
            .await?;
        judged(response, async |_| Ok(())).await
    }

    async fn renew_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome> {
        if let Some(election) = resource.election_name() {
            return self
                .renew_leadership(election, owner, ttl, term(token)?, meta)
                .await;
        }
        let body = RenewRequest::new(owner, ttl, token, meta);
        let url = format!("{}/renew", self.lock_url(resource));
        let response = self.send(self.http.post(url).json(&body)).await?;
        judged(response, read_json).await
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        let response = self.send(self.http.get(self.list_url("/locks", query))).await?;
        let page: ListResponse = ok_json(response).await?;
        let leases = page.locks.into_iter().map(lease).collect::<Result<Vec<_>>>()?;
        let next = match page.next_cursor {
            None => None,
            Some(cursor) => Some(parse::cursor(&cursor).map_err(|e| {
                StoreError::Corrupt(format!(
                    "the server answered a cursor it cannot have made: {}",
                    e.message
                ))
            })?),
        };
        Ok(LeasePage { leases, next })
    }

    /// The server purges expired leases by itself: nothing to do here.
    async fn purge_expired(&self) -> Result<Vec<Expired>> {
        Ok(Vec::new())
    }

    /// Acquires without waiting; `intent` is not sent (see [`HttpStore`]'s "Not supported").
    async fn acquire_hold_with(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        _intent: Option<Ttl>,
        meta: Option<&Meta>,
    ) -> Result<HoldOutcome> {
        self.acquire_hold_waiting(name, owner, claim, ttl, meta, Duration::ZERO)
            .await
    }

    async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        let response = self.send(self.http.get(self.hold_url(kind, name))).await?;
        if response.status() != StatusCode::OK {
            return nothing_held(response).await.map(|()| Vec::new());
        }
        let body: HoldsBody = read_json(response).await?;
        outcome::decode_holds(body).map_err(invalid_lease)
    }

    async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        let body = ReleaseRequest {
            owner: owner.to_string(),
            fencing_token: token.map(|t| t.0),
        };
        let response = self
            .send(self.http.delete(self.hold_url(kind, name)).json(&body))
            .await?;
        judged(response, async |_| Ok(())).await
    }

    async fn renew_hold_with(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome<Hold>> {
        let body = RenewRequest::new(owner, ttl, token, meta);
        let url = format!("{}/renew", self.hold_url(kind, name));
        let response = self.send(self.http.post(url).json(&body)).await?;
        judged(response, read_json).await
    }

    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage> {
        let url = self.list_url(collection(kind), query);
        let response = self.send(self.http.get(url)).await?;
        let page: HoldListResponse = ok_json(response).await?;
        outcome::decode_hold_page(page).map_err(invalid_lease)
    }

    /// The server withdraws the intents it records; the client records none.
    async fn withdraw_intent(&self, _: &Resource, _: &Owner) -> Result<()> {
        Ok(())
    }

    /// `DELETE` with `{"force": true}`, which needs the `admin` right on the name. The API
    /// answers an empty 204, so the leases it ended are not known here: `Released(vec![])`.
    async fn force_release(&self, key: &Key) -> Result<ForceOutcome> {
        let body = ForceReleaseRequest { force: true };
        let response = self.send(self.http.delete(self.key_url(key)).json(&body)).await?;
        if response.status() != StatusCode::NO_CONTENT {
            return nothing_held(response).await.map(|()| ForceOutcome::NotFound);
        }
        Ok(ForceOutcome::Released(Vec::new()))
    }

    /// Asks the server's readiness check, which asks its store.
    async fn ping(&self) -> Result<()> {
        let response = self.send(self.http.get(format!("{}/readyz", self.base))).await?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(unexpected(response).await)
        }
    }

    fn releases(&self) -> Option<tokio::sync::broadcast::Receiver<ReleaseNotice>> {
        None
    }

    fn capabilities(&self) -> Capabilities {
        // Whether the server's store is durable cannot be seen from here: promise nothing.
        // A release answers 204 with no body; intents, principals and lock-delays are the
        // server's to apply, never the client's to send.
        Capabilities {
            knows_released_lease: false,
            writer_intents: false,
            principals: false,
            lock_delays: false,
            ..Capabilities::BASELINE
        }
    }
}

impl HttpStore {
    /// Renews the leadership of `name` for `ttl`, or, with `meta`, proclaims the value it
    /// keeps.
    async fn renew_leadership(
        &self,
        name: &str,
        candidate: &Owner,
        ttl: Ttl,
        term: FencingToken,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome> {
        let url = self.election_url(name);
        let request = match meta {
            None => {
                let body = ElectionRenewBody::new(candidate, term, ttl);
                self.http.post(format!("{url}/renew")).json(&body)
            }
            Some(meta) => {
                let value = election::value_of(Some(meta))
                    .ok_or_else(|| StoreError::Invalid("a leader proclaims a value: none given".into()))?;
                let body = ProclaimBody::new(candidate, term, &value);
                self.http.post(format!("{url}/proclaim")).json(&body)
            }
        };
        judged(self.send(request).await?, async |response| {
            let lease = leadership_lease(read_json(response).await?)?;
            Ok(LeaseBody::from(&lease))
        })
        .await
    }
}

/// The term an election's renewal, proclamation or resignation carries: the fencing token,
/// which the API asks for.
fn term(token: Option<FencingToken>) -> Result<FencingToken> {
    token.ok_or_else(|| StoreError::Invalid("a leader renews, proclaims and resigns with its term".into()))
}

/// The lock that keeps the election `name` a server named.
fn election_lock(name: &str) -> Result<Resource> {
    Resource::named(name)
        .and_then(|name| Resource::election(&name))
        .map_err(|e| StoreError::Corrupt(format!("the server answered an invalid election name: {e}")))
}

/// A leadership as the lease of its election's lock: the candidate as owner, the term as
/// token, `since` as `acquired_at`, the value (and `since`) in the metadata.
fn leadership_lease(body: LeadershipBody) -> Result<Lease> {
    let leadership = Leadership::try_from(body).map_err(invalid_lease)?;
    // The API does not say the TTL the leader asked for; the time from its win to its end
    // is what the metadata can say of it (nothing here reads more than value and since).
    let lasts = leadership.expires_at.since(leadership.since).as_millis().max(1);
    let ttl = Ttl::from_millis(u64::try_from(lasts).unwrap_or(u64::MAX), Ttl::CEILING)
        .map_err(|e| StoreError::Corrupt(format!("the server answered an impossible leadership: {e}")))?;
    Ok(Lease {
        resource: election_lock(leadership.name.as_str())?,
        owner: leadership.leader.clone(),
        token: leadership.term,
        acquired_at: leadership.since,
        expires_at: leadership.expires_at,
        hold_until: None,
        lock_delay: Duration::ZERO,
        meta: Some(leadership.meta_with(leadership.value.as_deref(), ttl)),
    })
}

fn lease(body: LeaseBody) -> Result<Lease> {
    Lease::try_from(body).map_err(invalid_lease)
}

fn invalid_lease(error: InvalidLease) -> StoreError {
    match error {
        // No outcome: like a 503, nothing is known, and another server (or this one, once it
        // is back) may be asked.
        InvalidLease::ShuttingDown => StoreError::Unavailable {
            message: error.to_string(),
            source: None,
        },
        error => StoreError::Corrupt(format!("the server answered an invalid lease: {error}")),
    }
}

/// The outcome of a call the server judges (release, renew): done, read from the body by
/// `body`, or the refusal its problem's status tells of.
async fn judged<O: Judged>(
    response: Response,
    body: impl AsyncFnOnce(Response) -> Result<O::Body>,
) -> Result<O> {
    if response.status().as_u16() == O::DONE_STATUS {
        return O::decode(body(response).await?).map_err(invalid_lease);
    }
    let refused = Refused::read(response).await;
    match refused.refusal() {
        Some(refusal) => Ok(O::from(refusal)),
        None => Err(refused.error()),
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(response: Response) -> Result<T> {
    let bytes = response
        .bytes()
        .await
        .map_err(|e| StoreError::unavailable("the answer of the fencelock server was cut off", e))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| StoreError::unavailable("the answer is not what a fencelock server sends", e))
}

/// Nothing, if `response` is the 404 of a name with nothing live on it; else the error it
/// tells of (a 404 `no-route` among them: the server has no such path, which says nothing of
/// the name).
async fn nothing_held(response: Response) -> Result<()> {
    let refused = Refused::read(response).await;
    match refused.refusal() {
        Some(Refusal::NotFound) => Ok(()),
        _ => Err(refused.error()),
    }
}

/// The body of a 200 answer; any other answer is the error it tells of.
async fn ok_json<T: serde::de::DeserializeOwned>(response: Response) -> Result<T> {
    if response.status() != StatusCode::OK {
        return Err(unexpected(response).await);
    }
    read_json(response).await
}

/// The error for an answer that is not an outcome of the call: a problem (503, 422, 401, …),
/// or something that is not a fencelock server at all.
async fn unexpected(response: Response) -> StoreError {
    Refused::read(response).await.error()
}

/// What the server answered instead of doing the call.
struct Refused {
    status: StatusCode,
    /// Its body, if it is a problem.
    problem: Option<Problem>,
    /// Its `Retry-After`, in seconds, if it has one.
    retry_after: Option<Duration>,
}

impl Refused {
    async fn read(response: Response) -> Self {
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|seconds| seconds.trim().parse().ok())
            .map(Duration::from_secs);
        let body = response.bytes().await.unwrap_or_default();
        Self {
            status,
            problem: serde_json::from_slice::<Problem>(&body).ok(),
            retry_after,
        }
    }

    /// The refusal of a release or renewal this tells of: no lease (404), another owner's
    /// (403) or another token (409). A problem of another type with the same status is no
    /// refusal but an error: a 403 `denied` is about the caller's rights, a 404 `no-route`
    /// about the server's paths, neither about the lease.
    fn refusal(&self) -> Option<Refusal> {
        let kind = ProblemKind::from_status(self.status.as_u16())?;
        if !self.is_of_the_lease(kind) {
            return None;
        }
        kind.refusal()
    }

    /// Whether the answer is the problem of `kind`, the refusal its status stands for (an
    /// answer without a problem body is taken by its status).
    fn is_of_the_lease(&self, kind: ProblemKind) -> bool {
        let type_uri = kind.type_uri();
        self.problem.as_ref().is_none_or(|p| p.type_uri == type_uri)
    }

    /// The error this answer tells of.
    fn error(&self) -> StoreError {
        if let Some(problem) = &self.problem
            && ProblemKind::from_type_uri(&problem.type_uri) == Some(ProblemKind::Deadlock)
        {
            return StoreError::Deadlock(Deadlock::Told(problem.detail.clone()));
        }
        let detail = match &self.problem {
            Some(problem) => describe(problem),
            None => format!("HTTP {}", self.status),
        };
        match self.status {
            StatusCode::UNAUTHORIZED => {
                return StoreError::Unauthenticated(format!(
                    "the server knows no principal for this client: the auth token is missing or unknown ({detail})"
                ));
            }
            StatusCode::FORBIDDEN => return StoreError::NotAllowed(detail),
            StatusCode::TOO_MANY_REQUESTS => {
                return StoreError::RateLimited {
                    retry_after: self.retry_after.unwrap_or(Duration::from_secs(1)),
                    detail,
                };
            }
            _ => {}
        }
        match ProblemKind::from_status(self.status.as_u16()) {
            Some(
                ProblemKind::InvalidFields
                | ProblemKind::BadRequest
                | ProblemKind::PayloadTooLarge
                | ProblemKind::UnsupportedMediaType,
            ) => StoreError::Invalid(detail),
            Some(ProblemKind::Unavailable) => StoreError::Unavailable {
                message: format!("the server's store is unavailable: {detail}"),
                source: None,
            },
            _ => StoreError::Unavailable {
                message: format!("unexpected answer from the fencelock server: {detail}"),
                source: None,
            },
        }
    }
}

/// A problem in one line: every invalid field if it lists them, else its detail.
fn describe(problem: &Problem) -> String {
    match problem.errors.as_deref() {
        Some(errors) if !errors.is_empty() => errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect::<Vec<_>>()
            .join("; "),
        _ => problem.detail.clone(),
    }
}
