//! Requests and answers as they travel over HTTP.

use std::time::Duration;

use fencelock_core::model::MAX_NAME_BYTES;
use fencelock_core::{
    Claim, FencingToken, InvalidName, Lease, MAX_RESOURCES, Meta, Owner, Principal, Resource, Resources,
    Terms, Timestamp, Ttl, Waiting,
};

use serde::{Deserialize, Serialize};
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{ArrayBuilder, Type};
use utoipa::openapi::{ObjectBuilder, RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::fields::{self, Limits, Range};

/// A lease, as written in every answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"resource": "payment:42", "owner": "worker-7", "fencing_token": 17,
    "acquired_at": "2026-11-29T06:30:00.123Z", "expires_at": "2026-11-29T06:30:30.123Z"}))]
pub struct LeaseBody {
    /// The locked resource.
    pub resource: String,
    /// Who holds it.
    pub owner: String,
    /// The principal the holder authenticated as, on a server with authentication (absent
    /// without): only it may renew or release the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The fencing token of this grant; pass it to the protected resource.
    pub fencing_token: u64,
    /// When the lease was granted or last extended (RFC 3339, UTC, milliseconds).
    pub acquired_at: String,
    /// When the lease ends (RFC 3339, UTC, milliseconds).
    pub expires_at: String,
    /// The cap on holding the acquire set with `max_hold_ms` (RFC 3339, UTC, milliseconds):
    /// `expires_at` never passes it, however the lease is renewed or extended. Absent for a
    /// lease without a cap (never `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub hold_until: Option<String>,
    /// What the holder said about the lease when it acquired or renewed it: a flat JSON
    /// object. Absent for a lease without (never `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>, nullable = false)]
    pub meta: Option<MetaObject>,
}

/// Lease metadata as it travels: a JSON object of strings, numbers, booleans and nulls.
pub type MetaObject = serde_json::Map<String, serde_json::Value>;

/// `meta` as a request carries it.
pub(crate) fn meta_object(meta: Option<&Meta>) -> Option<MetaObject> {
    meta.map(Meta::to_object)
}

/// `meta` as an answer carries it, read back into the model (any size: the server checked
/// the size when it took it).
pub(crate) fn read_meta(meta: Option<MetaObject>) -> Result<Option<Meta>, InvalidLease> {
    meta.map(|object| Meta::from_object(&object, usize::MAX))
        .transpose()
        .map_err(|e| InvalidLease::Answer(format!("meta {e}")))
}

impl From<&Lease> for LeaseBody {
    fn from(lease: &Lease) -> Self {
        Self {
            resource: lease.resource.to_string(),
            owner: lease.owner.to_string(),
            principal: lease.owner.principal().map(|p| p.as_str().to_owned()),
            fencing_token: lease.token.0,
            acquired_at: lease.acquired_at.to_rfc3339(),
            expires_at: lease.expires_at.to_rfc3339(),
            hold_until: lease.hold_until.map(Timestamp::to_rfc3339),
            meta: meta_object(lease.meta.as_ref()),
        }
    }
}

/// Why a lease from a server could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidLease {
    /// The resource or owner breaks the model's rules.
    #[error("invalid name in lease: {0}")]
    Name(#[from] InvalidName),
    /// A timestamp is not RFC 3339.
    #[error("invalid timestamp in lease: {0:?}")]
    Timestamp(String),
    /// The answer is JSON of the right shape that no server sends (e.g. a permit of limit 0).
    #[error("impossible answer: {0}")]
    Answer(String),
    /// The answer is an acquire's `"shutting_down": true` ([`Stopped`]): the server stopped
    /// waiting for its store, and tells no outcome of it.
    #[error("the server shut down before its store answered: nothing is known to be acquired")]
    ShuttingDown,
}

impl TryFrom<LeaseBody> for Lease {
    type Error = InvalidLease;

    fn try_from(body: LeaseBody) -> Result<Self, InvalidLease> {
        let time = |text: String| Timestamp::parse_rfc3339(&text).ok_or(InvalidLease::Timestamp(text));
        Ok(Lease {
            resource: Resource::new(body.resource)?,
            owner: Owner::new(&body.owner)?.of(body.principal.map(Principal::new).transpose()?),
            token: FencingToken(body.fencing_token),
            acquired_at: time(body.acquired_at)?,
            expires_at: time(body.expires_at)?,
            hold_until: body.hold_until.map(time).transpose()?,
            // A server does not say the lock-delay of a lease: it keeps it.
            lock_delay: std::time::Duration::ZERO,
            meta: read_meta(body.meta)?,
        })
    }
}

/// `POST /locks/{resource}`: acquire. Exactly one of `ttl_seconds` and `ttl_ms`.
///
/// The names and bounds of the fields are [`fields`]'s; the parser checks them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireRequest {
    /// Who asks.
    pub owner: String,
    /// The TTL.
    #[serde(flatten)]
    pub ttl: TtlFields,
    /// How long to wait in line if another owner holds the lock (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// A cap on holding, from the grant that issues the token (none if absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_hold_ms: Option<u64>,
    /// The lease's metadata (none if absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<MetaObject>,
}

impl AcquireRequest {
    /// The request of `owner` for a lease on `terms` (its TTL, cap and metadata: the
    /// lock-delay is the server's), waiting up to `wait` (none if zero).
    pub fn new(owner: &Owner, terms: &Terms, wait: Duration) -> Self {
        Self {
            owner: owner.to_string(),
            ttl: TtlFields::ms(terms.ttl.as_millis()),
            wait_ms: (!wait.is_zero()).then(|| millis(wait)),
            max_hold_ms: terms.max_hold.map(Ttl::as_millis),
            meta: meta_object(terms.meta.as_ref()),
        }
    }
}

/// `duration` in whole milliseconds, as the API writes durations.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `POST /locks`: acquire every one of several locks, or none. Exactly one of `ttl_seconds`
/// and `ttl_ms`; the other fields are an acquire's, for every lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireAllRequest {
    /// The locks, 1 to 64 distinct names, in the order the answer lists them.
    pub resources: Vec<String>,
    /// Who asks, on what terms, and how long it waits for all of them.
    #[serde(flatten)]
    pub acquire: AcquireRequest,
}

impl AcquireAllRequest {
    /// The request of `owner` for every lock of `resources` on `terms`, waiting up to `wait`.
    pub fn new(resources: &Resources, owner: &Owner, terms: &Terms, wait: Duration) -> Self {
        Self {
            resources: resources.as_slice().iter().map(Resource::to_string).collect(),
            acquire: AcquireRequest::new(owner, terms, wait),
        }
    }
}

/// A TTL as a request gives it: exactly one of the two (the parser checks it).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TtlFields {
    /// In whole seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// In whole milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

impl TtlFields {
    /// A TTL given in milliseconds.
    pub fn ms(ms: u64) -> Self {
        Self {
            ttl_seconds: None,
            ttl_ms: Some(ms),
        }
    }
}

/// `DELETE /locks/{resource}`: release; also of a permit (`/semaphores/{name}`) or a hold
/// (`/rwlocks/{name}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRequest {
    /// The owner of the lease.
    pub owner: String,
    /// Release only if this is the current lease's token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

/// `DELETE /locks/{resource}` (or `/semaphores/{name}`, `/rwlocks/{name}`) with
/// `{"force": true}`: an administrator's release of every lease, permit or hold of the name,
/// whoever holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForceReleaseRequest {
    /// `true`: free the name whoever holds it (needs the `admin` right); `false` or absent is
    /// the owner's release.
    pub force: bool,
}

/// The body of a `DELETE`, as the OpenAPI description tells it: the owner's release, or an
/// administrator's force-release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum DeleteRequest {
    /// `{"owner": …}`: the owner's release.
    Release(ReleaseRequest),
    /// `{"force": true}`: every lease, permit or hold of the name, whoever holds it.
    Force(ForceReleaseRequest),
}

/// `POST /locks/{resource}/renew`: renew; also of a permit or a hold. Exactly one of
/// `ttl_seconds` and `ttl_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewRequest {
    /// The owner of the lease.
    pub owner: String,
    /// The new TTL, from now.
    #[serde(flatten)]
    pub ttl: TtlFields,
    /// Renew only if this is the current lease's token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// Metadata to replace the lease's with (kept if absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<MetaObject>,
}

impl RenewRequest {
    /// The renewal by `owner` for `ttl` from now, of the lease of `token` if given, replacing
    /// its metadata with `meta` if given.
    pub fn new(owner: &Owner, ttl: Ttl, token: Option<FencingToken>, meta: Option<&Meta>) -> Self {
        Self {
            owner: owner.to_string(),
            ttl: TtlFields::ms(ttl.as_millis()),
            fencing_token: token.map(|t| t.0),
            meta: meta_object(meta),
        }
    }
}

/// The OpenAPI description of a request body: its fields, by [`fields`]'s names and with
/// the bounds of the default [`Limits`].
fn request_schema(description: &str, owner: &str, properties: Vec<(&str, String, Range)>) -> ObjectBuilder {
    let object = ObjectBuilder::new()
        .description(Some(description))
        .property(fields::OWNER, fields::owner_schema(owner))
        .required(fields::OWNER);
    properties
        .into_iter()
        .fold(object, |object, (name, text, range)| {
            object.property(name, fields::integer_schema(&text, range))
        })
}

const TOKEN_RULE: &str = "Any unsigned 64-bit integer is accepted; this description caps it at 2^53 − 1, the \
    largest integer a JavaScript client holds exactly (tokens never get near it).";

impl PartialSchema for AcquireRequest {
    fn schema() -> RefOr<Schema> {
        acquire_schema_with(
            "`POST /locks/{resource}`: acquire. Exactly one of `ttl_seconds` and `ttl_ms`.",
            "If another owner holds the lock (or a lock-delay keeps it closed)",
            max_hold,
        )
    }
}

impl PartialSchema for AcquireAllRequest {
    fn schema() -> RefOr<Schema> {
        acquire_schema_with(
            "`POST /locks`: acquire every one of `resources`, or none. Exactly one of `ttl_seconds` and `ttl_ms`; the TTL, the wait and the cap are every lock's.",
            "If other owners hold some of the locks (or a lock-delay keeps one closed)",
            |object| {
                max_hold(object)
                    .property(fields::RESOURCES, resources_schema())
                    .required(fields::RESOURCES)
            },
        )
    }
}

/// `object` with the optional `max_hold_ms` of a lock's acquire.
fn max_hold(object: ObjectBuilder) -> ObjectBuilder {
    object.property(
        fields::MAX_HOLD_MS,
        fields::integer_schema(
            "A cap on holding, in whole milliseconds from the grant that issues the token, 1 to one year: \
             the lease ends then at the latest, however it is renewed or extended (shown as `hold_until`). \
             An extension keeps the cap of the lease whatever it sends. Default: no cap.",
            fields::MAX_HOLD_RANGE,
        ),
    )
}

/// The schema of `resources`: 1 to 64 distinct names.
fn resources_schema() -> ArrayBuilder {
    let name = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_NAME_BYTES))
        .pattern(Some(r"^[^\x00-\x1f\x7f]+$"));
    ArrayBuilder::new()
        .description(Some(format!(
            "The locks to take together, all or none: 1 to {MAX_RESOURCES} distinct resource names \
             (1 to {MAX_NAME_BYTES} bytes, no control characters), in the order the answer lists them."
        )))
        .items(name)
        .min_items(Some(1))
        .max_items(Some(MAX_RESOURCES))
        .unique_items(true)
}

/// The description of an acquire's body (of any kind): `owner`, the TTL and `wait_ms`
/// (which waits while `busy`), with what `more` adds.
pub(crate) fn acquire_schema_with(
    description: &str,
    busy: &str,
    more: impl FnOnce(ObjectBuilder) -> ObjectBuilder,
) -> RefOr<Schema> {
    let limits = Limits::default();
    let meta = fields::meta_schema(
        "What the holder says about it (e.g. host, pid, job), shown wherever it is shown. A grant that issues \
         a new token takes it (none if absent); an extension keeps the lease's unless one is sent.",
    );
    more(exactly_one_ttl(request_schema(
        description,
        &format!("Who asks; trimmed of white space, 1 to {MAX_NAME_BYTES} bytes, no control characters."),
        vec![
            ttl_seconds("The TTL in whole seconds", &limits),
            ttl_ms("The TTL in whole milliseconds", &limits),
            (
                fields::WAIT_MS,
                fields::with_default(
                    &format!(
                        "{busy}, wait up to this long (first come, first served), 0 to the server's maximum"
                    ),
                    limits.wait_ms(),
                ) + " Default 0.",
                limits.wait_ms(),
            ),
        ],
    ))
    .property(fields::META, meta))
    .into()
}

/// `object`, which takes exactly one of `ttl_seconds` and `ttl_ms` (JSON Schema's `oneOf`
/// of the two `required`s: neither, or both, matches no branch, or two). utoipa's object has
/// no `oneOf`, and writes its extensions as they are, so it goes in there.
pub(crate) fn exactly_one_ttl(object: ObjectBuilder) -> ObjectBuilder {
    let mut members = Extensions::default();
    members.insert(
        "oneOf".to_owned(),
        serde_json::json!([{"required": [fields::TTL_SECONDS]}, {"required": [fields::TTL_MS]}]),
    );
    object.extensions(Some(members))
}

/// [`acquire_schema_with`] one more required integer field.
pub(crate) fn acquire_schema(
    description: &str,
    busy: &str,
    (name, text, range): (&str, String, Range),
) -> RefOr<Schema> {
    acquire_schema_with(description, busy, |object| {
        object
            .property(name, fields::integer_schema(&text, range))
            .required(name)
    })
}

impl PartialSchema for ReleaseRequest {
    fn schema() -> RefOr<Schema> {
        request_schema(
            "`DELETE /locks/{resource}`, `/semaphores/{name}` or `/rwlocks/{name}`: release the owner's lease, permit or hold.",
            "The owner of the lease.",
            vec![token("release")],
        )
        .property(
            fields::FORCE,
            force_schema(false, "Absent or `false`: the owner's release (`true` is a force-release)."),
        )
        .into()
    }
}

impl PartialSchema for ForceReleaseRequest {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some(
                "`DELETE` with `{\"force\": true}`: free the name whoever holds it (needs the `admin` right); no other field is read.",
            ))
            .property(fields::FORCE, force_schema(true, "Always `true`."))
            .required(fields::FORCE)
            .into()
    }
}

/// `force` as a body of one kind of `DELETE` has it: `true` in a force-release's, `false` (or
/// absent) in a release's. The server reads any body with `"force": true` as a force-release,
/// so with both branches pinned every body is exactly one of the two, as the server reads it.
fn force_schema(force: bool, description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .description(Some(description))
        .enum_values(Some([force]))
}

impl PartialSchema for RenewRequest {
    fn schema() -> RefOr<Schema> {
        let limits = Limits::default();
        exactly_one_ttl(request_schema(
            "`POST /locks/{resource}/renew`, `/semaphores/{name}/renew` or `/rwlocks/{name}/renew`: renew the owner's lease, permit or hold. Exactly one of `ttl_seconds` and `ttl_ms`.",
            "The owner of the lease.",
            vec![
                ttl_seconds("The new TTL from now, in whole seconds", &limits),
                ttl_ms("The new TTL from now, in whole milliseconds", &limits),
                token("renewal"),
            ],
        ))
        .property(
            fields::META,
            fields::meta_schema(
                "If given, replaces the metadata of the lease, permit or hold (in the same step, judged as the \
                 renewal is); if absent, it is kept.",
            ),
        )
        .into()
    }
}

fn ttl_seconds(what: &str, limits: &Limits) -> (&'static str, String, Range) {
    let text = format!("{what}, 1 to the server's maximum");
    (
        fields::TTL_SECONDS,
        fields::with_default(&text, limits.ttl_seconds()),
        limits.ttl_seconds(),
    )
}

fn ttl_ms(what: &str, limits: &Limits) -> (&'static str, String, Range) {
    let text = format!("{what}, 1 to the server's maximum");
    (
        fields::TTL_MS,
        fields::with_default(&text, limits.ttl_ms()),
        limits.ttl_ms(),
    )
}

fn token(what: &str) -> (&'static str, String, Range) {
    let text = format!(
        "If given, the {what} happens only if this is the current lease's token (else 409). {TOKEN_RULE}"
    );
    (fields::FENCING_TOKEN, text, fields::TOKEN_RANGE)
}

/// `ToSchema` for request types whose schema is written by hand (`PartialSchema`): the
/// name the description gives them.
macro_rules! named_schema {
    ($($ty:ident),*) => {$(
        impl utoipa::ToSchema for $ty {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed(stringify!($ty))
            }
        }
    )*};
}
pub(crate) use named_schema;

named_schema!(
    AcquireRequest,
    AcquireAllRequest,
    ForceReleaseRequest,
    ReleaseRequest,
    RenewRequest
);

/// The answer to an acquire: granted, held by another owner, or closed by a lock-delay (not
/// an error); or, from a server shutting down, not acquired without its store's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AcquireResponse {
    /// `{"acquired": true, "extended": false, "lock": LEASE}`.
    Granted(Granted),
    /// `{"acquired": false, "resource": "...", "holder": LEASE, "expires_in_ms": N}`.
    Held(Held),
    /// `{"acquired": false, "resource": "...", "retry_after_ms": N}`: nobody holds it, but
    /// its last lease expired without a release less than the lock-delay ago.
    Delayed(Delayed),
    /// `{"acquired": false, "resource": "...", "shutting_down": true}`.
    Stopped(Stopped),
}

/// The answer to an acquire of several locks: every one granted, or none (not an error);
/// or, from a server shutting down, none without its store's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AcquireAllResponse {
    /// `{"acquired": true, "locks": [LEASE, ...], "extended": [...]}`.
    Granted(AllGranted),
    /// `{"acquired": false, "held": ["b", ...], "retry_after_ms": N, "refusals": [...]}`.
    Refused(AllRefused),
    /// `{"acquired": false, "resources": [...], "shutting_down": true}`.
    Stopped(AllStopped),
}

/// The server is shutting down and stopped waiting for its store, which had not answered (or
/// failed): the lock was not acquired, and who holds it is not known. Ask again, of another
/// server or of this one once it is back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Stopped {
    /// Always `false`.
    pub acquired: bool,
    /// The resource asked for.
    pub resource: String,
    /// Always `true`.
    pub shutting_down: bool,
}

/// As [`Stopped`], for several locks: none was acquired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AllStopped {
    /// Always `false`.
    pub acquired: bool,
    /// The resources asked for, in the order asked.
    pub resources: Vec<String>,
    /// Always `true`.
    pub shutting_down: bool,
}

/// Every lock was granted (new, or the caller's own extended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AllGranted {
    /// Always `true`.
    pub acquired: bool,
    /// The caller's leases, in the order asked. Each is an ordinary lease from now on:
    /// renewed and released one by one at `/locks/{resource}`.
    pub locks: Vec<LeaseBody>,
    /// The resources the caller already held, whose leases this extended (same token); the
    /// others are new leases with new tokens.
    #[serde(default)]
    pub extended: Vec<String>,
}

/// Some lock was held by another owner or closed by a lock-delay: none was acquired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AllRefused {
    /// Always `false`.
    pub acquired: bool,
    /// Every lock in the way (held by another owner, or closed by a lock-delay), in the
    /// order asked.
    pub held: Vec<String>,
    /// How long, in milliseconds, until the first of what stands in the way ends (unless
    /// renewed): the soonest asking again may succeed.
    pub retry_after_ms: u64,
    /// Why each lock in `held` is in the way, as an acquire of it alone answers.
    pub refusals: Vec<LockRefusal>,
}

/// Why one lock of several was not granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum LockRefusal {
    /// Held by another owner.
    Held(Held),
    /// Closed by a lock-delay.
    Delayed(Delayed),
}

/// Nobody holds the lock, but the lock-delay after its last lease's expiry has not ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Delayed {
    /// Always `false`.
    pub acquired: bool,
    /// The resource asked for.
    pub resource: String,
    /// How long, in milliseconds, until the lock-delay ends and the lock may be granted.
    pub retry_after_ms: u64,
}

/// The lease was granted (new or extended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Granted {
    /// Always `true`.
    pub acquired: bool,
    /// `true` if the caller already held the lease and this acquire extended it (same
    /// token); `false` for a new lease with a new token.
    #[serde(default)]
    pub extended: bool,
    /// The caller's lease.
    pub lock: LeaseBody,
}

/// Another owner holds a live lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Held {
    /// Always `false`.
    pub acquired: bool,
    /// The resource asked for.
    pub resource: String,
    /// The live lease of the other owner.
    pub holder: LeaseBody,
    /// How long, in milliseconds, until that lease ends unless it is renewed.
    pub expires_in_ms: u64,
}

/// `GET /locks`: one page of live leases, ordered by the bytes of the resource name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ListResponse {
    /// The leases of this page.
    pub locks: Vec<LeaseBody>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// An answer of `GET` on one name (`/locks/{resource}`, `/semaphores/{name}`,
/// `/rwlocks/{name}`): what is held, and who waits for it in this server's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Watched<T> {
    /// The lease, permits or holds, as without waiters.
    #[serde(flatten)]
    pub body: T,
    /// The acquires waiting on this name at the server that answers, head of the line first.
    /// Only that server's: those at other servers sharing the store wait in their own lines.
    /// Absent when nobody waits, so that the answer is as it always was for every client
    /// that does not look for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiters: Vec<WaiterBody>,
}

/// An acquire waiting in a server's line for a name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"owner": "worker-9", "since": "2026-11-29T06:30:01.000Z",
    "until": "2026-11-29T06:30:31.000Z"}))]
pub struct WaiterBody {
    /// Who waits.
    pub owner: String,
    /// The principal it authenticated as, on a server with authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// For a read-write lock, the mode it asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<crate::hold::Mode>,
    /// When it began to wait, by the server's wall clock (RFC 3339, UTC, milliseconds).
    pub since: String,
    /// When it gives up (its `wait_ms` after `since`).
    pub until: String,
}

impl From<&Waiting> for WaiterBody {
    fn from(waiting: &Waiting) -> Self {
        Self {
            owner: waiting.owner.to_string(),
            principal: waiting.owner.principal().map(|p| p.as_str().to_owned()),
            mode: match waiting.claim {
                Some(Claim::Read) => Some(crate::hold::Mode::Read),
                Some(Claim::Write) => Some(crate::hold::Mode::Write),
                Some(Claim::Permit { .. }) | None => None,
            },
            since: waiting.since.to_rfc3339(),
            until: waiting.until.to_rfc3339(),
        }
    }
}
