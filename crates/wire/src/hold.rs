//! Requests and answers of semaphores (`/semaphores/{name}`) and read-write locks
//! (`/rwlocks/{name}`) as they travel over HTTP.
//!
//! Each kind has its own types, which the OpenAPI description names; the `Hold…` enums
//! (untagged: each kind's JSON tells itself apart) carry either kind, so that the server and
//! the client handle both with one code path. Release and renew take the bodies of locks
//! ([`crate::ReleaseRequest`], [`crate::RenewRequest`]). [`crate::outcome`] translates
//! between these and the store's outcomes.

use std::time::Duration;

use fencelock_core::{Claim, Hold, HoldKind, Lease, Meta, Owner, Ttl};
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::body::{self, InvalidLease, LeaseBody, MetaObject, TtlFields};
use crate::fields::{self, Limits};

/// The path of a kind's collection: `/semaphores` or `/rwlocks` (a name follows as
/// `/{name}`, percent-encoded).
pub fn collection(kind: HoldKind) -> &'static str {
    match kind {
        HoldKind::Semaphore => "/semaphores",
        HoldKind::RwLock => "/rwlocks",
    }
}

/// A read-write lock's mode, written `"read"` or `"write"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Shared with other readers.
    Read,
    /// Exclusive.
    Write,
}

impl Mode {
    /// The claim of this mode.
    pub fn claim(self) -> Claim {
        match self {
            Self::Read => Claim::Read,
            Self::Write => Claim::Write,
        }
    }

    /// The mode of a read-write lock's claim; `None` for a permit.
    pub fn of(claim: Claim) -> Option<Self> {
        match claim {
            Claim::Read => Some(Self::Read),
            Claim::Write => Some(Self::Write),
            Claim::Permit { .. } => None,
        }
    }

    /// `read` or `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// A semaphore's permit, as written in every answer: a lease with `name` in place of
/// `resource`, and the semaphore's limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"name": "gpu-pool", "owner": "worker-7", "fencing_token": 17,
    "acquired_at": "2026-11-29T06:30:00.123Z", "expires_at": "2026-11-29T06:30:30.123Z", "limit": 3}))]
pub struct PermitBody {
    /// The semaphore.
    pub name: String,
    /// Who holds the permit.
    pub owner: String,
    /// The principal the holder authenticated as, on a server with authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The fencing token of this permit; pass it to the protected resource.
    pub fencing_token: u64,
    /// When the permit was granted or last extended (RFC 3339, UTC, milliseconds).
    pub acquired_at: String,
    /// When the permit ends (RFC 3339, UTC, milliseconds).
    pub expires_at: String,
    /// How many permits the semaphore has.
    pub limit: u32,
    /// What the holder said about it: a flat JSON object. Absent for one without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>, nullable = false)]
    pub meta: Option<MetaObject>,
}

/// A read-write lock's hold, as written in every answer: a lease with `name` in place of
/// `resource`, and its mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"name": "catalog", "owner": "worker-7", "fencing_token": 18,
    "acquired_at": "2026-11-29T06:30:00.123Z", "expires_at": "2026-11-29T06:30:30.123Z", "mode": "read"}))]
pub struct HoldBody {
    /// The read-write lock.
    pub name: String,
    /// Who holds it.
    pub owner: String,
    /// The principal the holder authenticated as, on a server with authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The fencing token of this hold; pass it to the protected resource.
    pub fencing_token: u64,
    /// When the hold was granted or last extended (RFC 3339, UTC, milliseconds).
    pub acquired_at: String,
    /// When the hold ends (RFC 3339, UTC, milliseconds).
    pub expires_at: String,
    /// What it holds.
    pub mode: Mode,
    /// What the holder said about it: a flat JSON object. Absent for one without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>, nullable = false)]
    pub meta: Option<MetaObject>,
}

/// The lease of a hold as a [`LeaseBody`], whose fields a permit and a hold share.
fn lease_body(hold: &Hold) -> LeaseBody {
    LeaseBody::from(&hold.lease)
}

/// The lease written in a permit or a hold.
fn read_lease(
    name: String,
    owner: String,
    principal: Option<String>,
    fencing_token: u64,
    acquired_at: String,
    expires_at: String,
    meta: Option<MetaObject>,
) -> Result<Lease, InvalidLease> {
    Lease::try_from(LeaseBody {
        resource: name,
        owner,
        principal,
        fencing_token,
        acquired_at,
        expires_at,
        hold_until: None,
        meta,
    })
}

impl PermitBody {
    /// The permit `hold` is, of a semaphore of `limit` permits.
    fn new(hold: &Hold, limit: u32) -> Self {
        let lease = lease_body(hold);
        Self {
            name: lease.resource,
            owner: lease.owner,
            principal: lease.principal,
            fencing_token: lease.fencing_token,
            acquired_at: lease.acquired_at,
            expires_at: lease.expires_at,
            limit,
            meta: lease.meta,
        }
    }
}

impl HoldBody {
    /// The hold `hold` is, in `mode`.
    fn new(hold: &Hold, mode: Mode) -> Self {
        let lease = lease_body(hold);
        Self {
            name: lease.resource,
            owner: lease.owner,
            principal: lease.principal,
            fencing_token: lease.fencing_token,
            acquired_at: lease.acquired_at,
            expires_at: lease.expires_at,
            mode,
            meta: lease.meta,
        }
    }
}

impl TryFrom<PermitBody> for Hold {
    type Error = InvalidLease;

    fn try_from(body: PermitBody) -> Result<Self, InvalidLease> {
        if body.limit == 0 {
            return Err(InvalidLease::Answer("a permit of a semaphore of limit 0".into()));
        }
        Ok(Hold {
            lease: read_lease(
                body.name,
                body.owner,
                body.principal,
                body.fencing_token,
                body.acquired_at,
                body.expires_at,
                body.meta,
            )?,
            claim: Claim::Permit { limit: body.limit },
        })
    }
}

impl TryFrom<HoldBody> for Hold {
    type Error = InvalidLease;

    fn try_from(body: HoldBody) -> Result<Self, InvalidLease> {
        Ok(Hold {
            lease: read_lease(
                body.name,
                body.owner,
                body.principal,
                body.fencing_token,
                body.acquired_at,
                body.expires_at,
                body.meta,
            )?,
            claim: body.mode.claim(),
        })
    }
}

/// A permit or a hold (the answer of a renewal), told apart by its `limit` or `mode`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum HoldItem {
    /// A semaphore's permit.
    Permit(PermitBody),
    /// A read-write lock's hold.
    Hold(HoldBody),
}

impl From<&Hold> for HoldItem {
    fn from(hold: &Hold) -> Self {
        match hold.claim {
            Claim::Permit { limit } => Self::Permit(PermitBody::new(hold, limit)),
            Claim::Read => Self::Hold(HoldBody::new(hold, Mode::Read)),
            Claim::Write => Self::Hold(HoldBody::new(hold, Mode::Write)),
        }
    }
}

impl TryFrom<HoldItem> for Hold {
    type Error = InvalidLease;

    fn try_from(item: HoldItem) -> Result<Self, InvalidLease> {
        match item {
            HoldItem::Permit(permit) => permit.try_into(),
            HoldItem::Hold(hold) => hold.try_into(),
        }
    }
}

impl PermitBody {
    /// `hold` as a permit; `None` if it is a read-write lock's.
    pub(crate) fn of(hold: &Hold) -> Option<Self> {
        match hold.claim {
            Claim::Permit { limit } => Some(Self::new(hold, limit)),
            Claim::Read | Claim::Write => None,
        }
    }
}

impl HoldBody {
    /// `hold` as a read-write lock's hold; `None` if it is a permit.
    pub(crate) fn of(hold: &Hold) -> Option<Self> {
        Mode::of(hold.claim).map(|mode| Self::new(hold, mode))
    }
}

/// `POST /semaphores/{name}`: acquire one permit. Exactly one of `ttl_seconds` and `ttl_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SemaphoreAcquireRequest {
    /// Who asks.
    pub owner: String,
    /// How many permits the semaphore has (the live permits' limit, if any is live).
    pub limit: u32,
    /// The TTL.
    #[serde(flatten)]
    pub ttl: TtlFields,
    /// How long to wait in line if every permit is held by others (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// The metadata of the permit or hold (none if absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<MetaObject>,
}

/// `POST /rwlocks/{name}`: acquire in a mode. Exactly one of `ttl_seconds` and `ttl_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RwLockAcquireRequest {
    /// Who asks.
    pub owner: String,
    /// `read` (shared) or `write` (exclusive).
    pub mode: Mode,
    /// The TTL.
    #[serde(flatten)]
    pub ttl: TtlFields,
    /// How long to wait in line if the lock is held against this mode (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// The metadata of the permit or hold (none if absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<MetaObject>,
}

/// The acquire of a permit or of a hold, as a client sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HoldAcquireRequest {
    /// `POST /semaphores/{name}`.
    Semaphore(SemaphoreAcquireRequest),
    /// `POST /rwlocks/{name}`.
    RwLock(RwLockAcquireRequest),
}

impl HoldAcquireRequest {
    /// The request of `owner` for `claim`, for `ttl`, with `meta`, waiting up to `wait` (none
    /// if zero).
    pub fn new(owner: &Owner, claim: Claim, ttl: Ttl, meta: Option<&Meta>, wait: Duration) -> Self {
        let owner = owner.to_string();
        let ttl = TtlFields::ms(ttl.as_millis());
        let wait_ms = (!wait.is_zero()).then(|| body::millis(wait));
        let meta = body::meta_object(meta);
        match claim {
            Claim::Permit { limit } => Self::Semaphore(SemaphoreAcquireRequest {
                owner,
                limit,
                ttl,
                wait_ms,
                meta,
            }),
            Claim::Read | Claim::Write => Self::RwLock(RwLockAcquireRequest {
                owner,
                mode: if claim == Claim::Read {
                    Mode::Read
                } else {
                    Mode::Write
                },
                ttl,
                wait_ms,
                meta,
            }),
        }
    }

    /// The namespace the request is made in.
    pub fn kind(&self) -> HoldKind {
        match self {
            Self::Semaphore(_) => HoldKind::Semaphore,
            Self::RwLock(_) => HoldKind::RwLock,
        }
    }
}

impl PartialSchema for SemaphoreAcquireRequest {
    fn schema() -> RefOr<Schema> {
        let limits = Limits::default();
        body::acquire_schema(
            "`POST /semaphores/{name}`: acquire one permit. Exactly one of `ttl_seconds` and `ttl_ms`.",
            "If every permit is held by other owners",
            (
                fields::LIMIT,
                fields::with_default(
                    "How many permits the semaphore has, 1 to the server's maximum; must equal the \
                     limit of the live permits if any is live (else 409 limit-mismatch)",
                    limits.limit(),
                ),
                limits.limit(),
            ),
        )
    }
}

impl PartialSchema for RwLockAcquireRequest {
    fn schema() -> RefOr<Schema> {
        let mode = ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "`read` (shared with other readers) or `write` (exclusive); anything else is 422. \
                 A sole reader asking `write` is upgraded, a writer asking `read` downgraded, \
                 each with a new token.",
            ))
            .enum_values(Some(["read", "write"]));
        body::acquire_schema_with(
            "`POST /rwlocks/{name}`: acquire in a mode. Exactly one of `ttl_seconds` and `ttl_ms`.",
            "If the lock is held against this mode (or, for a reader, a writer waits)",
            |object| object.property(fields::MODE, mode).required(fields::MODE),
        )
    }
}

/// A permit was granted (new or extended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PermitGranted {
    /// Always `true`.
    pub acquired: bool,
    /// `true` if the caller already held a permit and this acquire extended it (same token).
    #[serde(default)]
    pub extended: bool,
    /// The caller's permit.
    pub permit: PermitBody,
}

/// Every permit of the semaphore is held by other owners.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SemaphoreBusy {
    /// Always `false`.
    pub acquired: bool,
    /// The semaphore asked for.
    pub name: String,
    /// How many permits other owners hold.
    pub holders: usize,
    /// Their permits, in token order.
    pub permits: Vec<PermitBody>,
    /// How long, in milliseconds, until the first of them ends unless it is renewed.
    pub retry_in_ms: u64,
}

/// The answer to a semaphore's acquire: granted, or every permit held (not an error); or,
/// from a server shutting down, not acquired without its store's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum SemaphoreAcquireResponse {
    /// `{"acquired": true, "extended": false, "permit": PERMIT}`.
    Granted(PermitGranted),
    /// `{"acquired": false, "name": "...", "holders": N, "permits": [...], "retry_in_ms": N}`.
    Busy(SemaphoreBusy),
    /// `{"acquired": false, "name": "...", "shutting_down": true}`.
    Stopped(HoldStopped),
}

/// As [`Stopped`](crate::body::Stopped), for a permit or a hold: the server is shutting down
/// and stopped waiting for its store; not acquired, and who holds the name is not known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HoldStopped {
    /// Always `false`.
    pub acquired: bool,
    /// The semaphore or read-write lock asked for.
    pub name: String,
    /// Always `true`.
    pub shutting_down: bool,
}

/// A hold was granted: new (also an upgrade or a downgrade, with a new token) or extended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HoldGranted {
    /// Always `true`.
    pub acquired: bool,
    /// `true` if the caller already held this mode and this acquire extended it (same token).
    #[serde(default)]
    pub extended: bool,
    /// The caller's hold.
    pub hold: HoldBody,
    /// The caller's hold of the other mode that this one replaced (an upgrade or a
    /// downgrade); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub replaced: Option<HoldBody>,
}

/// The read-write lock is held against the mode asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RwLockBusy {
    /// Always `false`.
    pub acquired: bool,
    /// The read-write lock asked for.
    pub name: String,
    /// The mode that is held; `write` also when nothing is held but a writer waits (it has
    /// the next turn).
    pub mode: Mode,
    /// The live holds of other owners, in token order.
    pub holders: Vec<HoldBody>,
    /// A writer of another owner waits: a new reader waits behind it.
    pub writer_waits: bool,
    /// How long, in milliseconds, until the first hold or waiting writer in the way ends
    /// unless it is renewed.
    pub retry_in_ms: u64,
}

/// The answer to a read-write lock's acquire: granted, or held (not an error); or, from a
/// server shutting down, not acquired without its store's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
#[expect(
    clippy::large_enum_variant,
    reason = "an answer, built once and written at once: boxing would only add an allocation"
)]
pub enum RwLockAcquireResponse {
    /// `{"acquired": true, "extended": false, "hold": HOLD}`.
    Granted(HoldGranted),
    /// `{"acquired": false, "name": "...", "mode": "write", "holders": [...], ...}`.
    Busy(RwLockBusy),
    /// `{"acquired": false, "name": "...", "shutting_down": true}`.
    Stopped(HoldStopped),
}

/// The answer to an acquire of either kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HoldAcquireResponse {
    /// A semaphore's.
    Semaphore(SemaphoreAcquireResponse),
    /// A read-write lock's.
    RwLock(RwLockAcquireResponse),
}

/// `GET /semaphores/{name}`: the live permits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SemaphoreBody {
    /// The semaphore.
    pub name: String,
    /// How many permits it has (the live permits' limit).
    pub limit: u32,
    /// The live permits, in token order.
    pub permits: Vec<PermitBody>,
}

/// `GET /rwlocks/{name}`: the live holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RwLockBody {
    /// The read-write lock.
    pub name: String,
    /// The mode held.
    pub mode: Mode,
    /// The live holds, in token order.
    pub holders: Vec<HoldBody>,
}

/// The live holds of a name of either kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HoldsBody {
    /// A semaphore's permits.
    Semaphore(SemaphoreBody),
    /// A read-write lock's holds.
    RwLock(RwLockBody),
}

/// `GET /semaphores`: one page of semaphores with live permits, ordered by the bytes of
/// their names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SemaphoreListResponse {
    /// The semaphores of this page.
    pub semaphores: Vec<SemaphoreBody>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// `GET /rwlocks`: one page of read-write locks with live holds, ordered by the bytes of
/// their names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RwLockListResponse {
    /// The read-write locks of this page.
    pub rwlocks: Vec<RwLockBody>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// A page of either kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HoldListResponse {
    /// `GET /semaphores`.
    Semaphores(SemaphoreListResponse),
    /// `GET /rwlocks`.
    RwLocks(RwLockListResponse),
}

body::named_schema!(SemaphoreAcquireRequest, RwLockAcquireRequest);
