//! Strict validation of what a client sends, into the model's newtypes.
//!
//! A request body is read as a JSON object and every field is checked, so that a 422 lists
//! every bad field, not just the first. The rules are the SPEC's: integers are JSON integers
//! (`"3600"`, `60.5`, `60.0`, `1e3`, `true` and `null` are not), `null` is never a value,
//! exactly one of `ttl_seconds` and `ttl_ms`, unknown fields are ignored. A number too large
//! for a double (`1e400`) is valid JSON, out of range: [`object`] reads it so that its field
//! is refused like any other number out of its range.

use std::time::Duration;

use fencelock_core::election::MAX_VALUE_BYTES;
use fencelock_core::{
    Claim, FencingToken, HoldKind, InvalidName, MAX_RESOURCES, Meta, Owner, Resource, Resources, Terms, Ttl,
};
use serde_json::{Map, Value};

pub use crate::fields::Limits;
use crate::fields::{
    self, CANDIDATE, FENCING_TOKEN, FORCE, LIMIT, MAX_HOLD_MS, META, MODE, OWNER, RESOURCES, Range, TERM,
    TTL_MS, TTL_SECONDS, VALUE, WAIT_MS,
};
use crate::problem::FieldError;

/// A valid acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquire {
    /// Who asks.
    pub owner: Owner,
    /// For how long.
    pub ttl: Ttl,
    /// How long to wait if another owner holds the lock.
    pub wait: Duration,
    /// The metadata of the lease, permit or hold, if sent.
    pub meta: Option<Meta>,
}

/// A valid acquire of a lock: an acquire's fields, and the cap on holding it may ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireLock {
    /// Who asks, for how long, and how long it may wait.
    pub acquire: Acquire,
    /// The cap on holding (`max_hold_ms`), if asked for.
    pub max_hold: Option<Ttl>,
}

impl AcquireLock {
    /// The terms of the lease asked for, with the server's `lock_delay`: a client does not
    /// choose how long a lock stays closed after its own lease expires.
    pub fn terms(&self, lock_delay: Duration) -> Terms {
        Terms::ttl(self.acquire.ttl)
            .max_hold(self.max_hold)
            .lock_delay(lock_delay)
            .meta(self.acquire.meta.clone())
    }
}

/// A valid acquire of several locks at once (`POST /locks`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireAll {
    /// The locks, all or none, in the order given.
    pub resources: Resources,
    /// Who asks, on what terms, and how long it may wait for all of them.
    pub lock: AcquireLock,
}

/// A valid acquire of a semaphore's permit or of a read-write lock's hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireHold {
    /// Who asks, for how long, and how long it may wait.
    pub acquire: Acquire,
    /// What it asks for: a permit of a semaphore of `limit` permits, or a `mode`.
    pub claim: Claim,
}

/// A valid release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The owner of the lease.
    pub owner: Owner,
    /// The token the caller holds, if it sent one.
    pub token: Option<FencingToken>,
}

/// A valid renew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renew {
    /// The owner of the lease.
    pub owner: Owner,
    /// The new TTL from now.
    pub ttl: Ttl,
    /// The token the caller holds, if it sent one.
    pub token: Option<FencingToken>,
    /// Metadata to replace the lease's with, if sent.
    pub meta: Option<Meta>,
}

/// Why a request body is not a JSON object (a 400, before any field is looked at).
#[derive(Debug, thiserror::Error)]
pub enum BadBody {
    /// Not JSON, or nested deeper than the JSON parser goes (128 levels).
    #[error("the body is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// JSON, but not an object.
    #[error("the body must be a JSON object")]
    NotAnObject,
}

/// Reads a request body as the JSON object every request of the API is, for the checks
/// below.
///
/// JSON sets no range on numbers (RFC 8259), but the parser refuses one too large for a
/// double, such as `1e400`. Such a number is read as `1e308` of its sign instead: past every
/// range of the API, so the field that holds it gets the 422 of a number out of its range
/// (and a field nobody reads is ignored), rather than the whole body a 400. A field that took
/// any number (none does) would have to tell the two apart.
pub fn object(body: &[u8]) -> Result<Map<String, Value>, BadBody> {
    let value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(error) => within_double_range(body)
            .and_then(|body| serde_json::from_slice(&body).ok())
            .ok_or(BadBody::NotJson(error))?,
    };
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(BadBody::NotAnObject),
    }
}

/// What a number too large for a double is read as (see [`object`]).
const PAST_EVERY_RANGE: &[u8] = b"1e308";

/// `body` with every number too large for a double written as [`PAST_EVERY_RANGE`] of its
/// sign; `None` if `body` is not JSON (a syntax error, which this must not hide) or has no
/// such number.
fn within_double_range(body: &[u8]) -> Option<Vec<u8>> {
    // Checks the syntax (numbers included) and nothing else: no range, no depth. In valid
    // JSON, a number is a maximal run of the bytes below, outside strings.
    serde_json::from_slice::<serde::de::IgnoredAny>(body).ok()?;
    let mut out = Vec::with_capacity(body.len());
    let mut changed = false;
    let mut at = 0;
    while let Some(&byte) = body.get(at) {
        let end = match byte {
            b'"' => string_end(body, at),
            b'-' | b'0'..=b'9' => {
                let end = body[at..]
                    .iter()
                    .position(|b| !matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .map_or(body.len(), |n| at + n);
                let number = &body[at..end];
                // serde_json's own judgement of the number, so that exactly the numbers it
                // refuses are rewritten.
                if serde_json::from_slice::<Value>(number).is_err() {
                    if byte == b'-' {
                        out.push(b'-');
                    }
                    out.extend_from_slice(PAST_EVERY_RANGE);
                    changed = true;
                    at = end;
                    continue;
                }
                end
            }
            _ => at + 1,
        };
        out.extend_from_slice(&body[at..end]);
        at = end;
    }
    changed.then_some(out)
}

/// Where the JSON string that starts at `body[start]` (a `"`) ends: just past its closing
/// quote.
fn string_end(body: &[u8], start: usize) -> usize {
    let mut at = start + 1;
    while let Some(&byte) = body.get(at) {
        match byte {
            b'\\' => at += 2,
            b'"' => return at + 1,
            _ => at += 1,
        }
    }
    body.len()
}

/// The fields of a request body, by name, as the checks below read them.
pub trait Body {
    /// The value of the field `name`, if the body has it.
    fn field(&self, name: &str) -> Option<&Value>;
}

impl Body for Map<String, Value> {
    fn field(&self, name: &str) -> Option<&Value> {
        self.get(name)
    }
}

/// The fields an acquire of a lock reads (see [`acquire`]).
const ACQUIRE_FIELDS: [&str; 6] = [OWNER, TTL_SECONDS, TTL_MS, WAIT_MS, META, MAX_HOLD_MS];

/// A body of which only the fields of one request were read ([`Known::read`]).
struct Known<const N: usize> {
    names: [&'static str; N],
    values: [Option<Value>; N],
}

impl<const N: usize> Known<N> {
    /// Reads `body` if it is a JSON object of no other fields than `names`, each at most
    /// once and with a key written without escapes; `None` for any other body, even a valid
    /// one. Those are the bodies whose fields [`object`] reads the same (it keeps the last of
    /// a field sent twice, and reads an unknown field's number too large for a double, which
    /// this refuses), so a caller that falls back to it for `None` tells every body what it
    /// would have told it anyway, without the map of every field (its nodes and a string
    /// per key) for the usual one.
    fn read(body: &[u8], names: [&'static str; N]) -> Option<Self> {
        let mut reader = serde_json::Deserializer::from_slice(body);
        let known = serde::de::DeserializeSeed::deserialize(
            Self {
                names,
                values: std::array::from_fn(|_| None),
            },
            &mut reader,
        )
        .ok()?;
        reader.end().ok()?;
        Some(known)
    }
}

impl<const N: usize> Body for Known<N> {
    fn field(&self, name: &str) -> Option<&Value> {
        let at = self.names.iter().position(|known| *known == name)?;
        self.values.get(at)?.as_ref()
    }
}

impl<'de, const N: usize> serde::de::DeserializeSeed<'de> for Known<N> {
    type Value = Self;

    fn deserialize<D: serde::Deserializer<'de>>(self, reader: D) -> Result<Self, D::Error> {
        reader.deserialize_map(self)
    }
}

impl<'de, const N: usize> serde::de::Visitor<'de> for Known<N> {
    type Value = Self;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object of known fields")
    }

    fn visit_map<M: serde::de::MapAccess<'de>>(mut self, mut map: M) -> Result<Self, M::Error> {
        use serde::de::Error as _;
        // A key with an escape cannot be borrowed and is refused here: it is read by
        // `object`, as every body this declines.
        while let Some(key) = map.next_key::<&'de str>()? {
            let slot = self
                .names
                .iter()
                .position(|known| *known == key)
                .and_then(|at| self.values.get_mut(at))
                .ok_or_else(|| M::Error::custom("not a field of this request"))?;
            if slot.is_some() {
                return Err(M::Error::custom("a field sent twice"));
            }
            *slot = Some(map.next_value()?);
        }
        Ok(self)
    }
}

/// Reads and checks the body of an acquire of a lock: the outer error is a body that is not
/// a JSON object (a 400, as [`object`] tells it), the inner one its bad fields (as
/// [`acquire`] lists them).
pub fn acquire_body(body: &[u8], limits: &Limits) -> Result<Result<AcquireLock, Vec<FieldError>>, BadBody> {
    match Known::read(body, ACQUIRE_FIELDS) {
        Some(known) => Ok(acquire(&known, limits)),
        None => object(body).map(|map| acquire(&map, limits)),
    }
}

/// Checks the body of an acquire of a lock.
pub fn acquire(body: &dyn Body, limits: &Limits) -> Result<AcquireLock, Vec<FieldError>> {
    let mut fields = Fields::new(body);
    let lock = fields.acquire_lock(limits);
    fields.finish()?;
    lock.ok_or_else(invalid)
}

/// Checks the body of an acquire of several locks: `resources` (1 to 64 distinct names, in
/// the order given), then an acquire's fields.
pub fn acquire_all(body: &Map<String, Value>, limits: &Limits) -> Result<AcquireAll, Vec<FieldError>> {
    let mut fields = Fields::new(body);
    let resources = fields.resources();
    let lock = fields.acquire_lock(limits);
    fields.finish()?;
    match (resources, lock) {
        (Some(resources), Some(lock)) => Ok(AcquireAll { resources, lock }),
        _ => Err(invalid()),
    }
}

/// Checks the body of an acquire of `kind`: an acquire's fields, and `limit` (a semaphore's)
/// or `mode` (a read-write lock's).
pub fn acquire_hold(
    body: &Map<String, Value>,
    limits: &Limits,
    kind: HoldKind,
) -> Result<AcquireHold, Vec<FieldError>> {
    let mut fields = Fields::new(body);
    let acquire = fields.acquire(limits);
    let claim = match kind {
        HoldKind::Semaphore => fields.limit(limits),
        HoldKind::RwLock => fields.mode(),
    };
    fields.finish()?;
    match (acquire, claim) {
        (Some(acquire), Some(claim)) => Ok(AcquireHold { acquire, claim }),
        _ => Err(invalid()),
    }
}

/// What a parser answers if it found no bad field and still has no value, which cannot
/// happen: every `None` comes with an error.
fn invalid() -> Vec<FieldError> {
    vec![FieldError::new("body", "is invalid")]
}

/// Checks the body of a release.
pub fn release(body: &Map<String, Value>) -> Result<Release, Vec<FieldError>> {
    let mut fields = Fields::new(body);
    let owner = fields.owner();
    let token = fields.token();
    fields.finish()?;
    match (owner, token) {
        (Some(owner), Some(token)) => Ok(Release { owner, token }),
        _ => Err(invalid()),
    }
}

/// A valid `DELETE` body: the owner's release, or an administrator's release of everything
/// held on the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delete {
    /// `force` absent or `false`: the owner's release.
    Release(Release),
    /// `"force": true`: whoever holds it; no owner is needed.
    Force,
}

/// Checks the body of a `DELETE`: `force`, if given, must be a JSON boolean; with `true` no
/// other field is read, else it is a release's body.
pub fn delete(body: &Map<String, Value>) -> Result<Delete, Vec<FieldError>> {
    let message = match body.get(FORCE) {
        None | Some(Value::Bool(false)) => return release(body).map(Delete::Release),
        Some(Value::Bool(true)) => return Ok(Delete::Force),
        Some(Value::Null) => "must not be null",
        Some(_) => "must be a JSON boolean",
    };
    Err(vec![FieldError::new(FORCE, message)])
}

/// Checks the body of a renew.
pub fn renew(body: &Map<String, Value>, limits: &Limits) -> Result<Renew, Vec<FieldError>> {
    let mut fields = Fields::new(body);
    let owner = fields.owner();
    let ttl = fields.ttl(limits);
    let token = fields.token();
    let meta = fields.meta(limits);
    fields.finish()?;
    match (owner, ttl, token, meta) {
        (Some(owner), Some(ttl), Some(token), Some(meta)) => Ok(Renew {
            owner,
            ttl,
            token,
            meta,
        }),
        _ => Err(invalid()),
    }
}

/// A valid campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Campaign {
    /// Who campaigns.
    pub candidate: Owner,
    /// For how long it leads, once elected, unless it renews.
    pub ttl: Ttl,
    /// How long to wait while another candidate leads.
    pub wait: Duration,
    /// What it says once it leads, if sent.
    pub value: Option<String>,
}

/// A valid proclamation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proclaim {
    /// The leader.
    pub candidate: Owner,
    /// Its term.
    pub term: FencingToken,
    /// Its new value.
    pub value: String,
}

/// A valid renewal of a leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionRenew {
    /// The leader.
    pub candidate: Owner,
    /// Its term.
    pub term: FencingToken,
    /// The new TTL from now.
    pub ttl: Ttl,
}

/// A valid resignation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resign {
    /// The leader.
    pub candidate: Owner,
    /// Its term.
    pub term: FencingToken,
}

/// Checks the body of a campaign.
pub fn campaign(body: &Map<String, Value>, limits: &Limits) -> Result<Campaign, Vec<FieldError>> {
    let mut fields = Fields::new(body);
    let candidate = fields.named(CANDIDATE);
    let ttl = fields.ttl(limits);
    let wait = fields.integer(WAIT_MS, limits.wait_ms());
    let value = fields.value();
    fields.finish()?;
    match (candidate, ttl, wait, value) {
        (Some(candidate), Some(ttl), Some(wait), Some(value)) => Ok(Campaign {
            candidate,
            ttl,
            wait: Duration::from_millis(wait.unwrap_or(0)),
            value,
        }),
        _ => Err(invalid()),
    }
}

/// Checks the body of a proclamation: `value` is required.
pub fn proclaim(body: &Map<String, Value>) -> Result<Proclaim, Vec<FieldError>> {
    let mut fields = Fields::new(body);
    let candidate = fields.named(CANDIDATE);
    let term = fields.term();
    let value = match fields.value() {
        Some(None) => {
            fields.fail(VALUE, "is required");
            None
        }
        value => value.flatten(),
    };
    fields.finish()?;
    match (candidate, term, value) {
        (Some(candidate), Some(term), Some(value)) => Ok(Proclaim {
            candidate,
            term,
            value,
        }),
        _ => Err(invalid()),
    }
}

/// Checks the body of a renewal of a leadership.
pub fn election_renew(body: &Map<String, Value>, limits: &Limits) -> Result<ElectionRenew, Vec<FieldError>> {
    let mut fields = Fields::new(body);
    let candidate = fields.named(CANDIDATE);
    let term = fields.term();
    let ttl = fields.ttl(limits);
    fields.finish()?;
    match (candidate, term, ttl) {
        (Some(candidate), Some(term), Some(ttl)) => Ok(ElectionRenew { candidate, term, ttl }),
        _ => Err(invalid()),
    }
}

/// Checks the body of a resignation.
pub fn resign(body: &Map<String, Value>) -> Result<Resign, Vec<FieldError>> {
    let mut fields = Fields::new(body);
    let candidate = fields.named(CANDIDATE);
    let term = fields.term();
    fields.finish()?;
    match (candidate, term) {
        (Some(candidate), Some(term)) => Ok(Resign { candidate, term }),
        _ => Err(invalid()),
    }
}

/// Reads the fields of one JSON object, collecting every error.
struct Fields<'a> {
    body: &'a dyn Body,
    errors: Vec<FieldError>,
}

impl<'a> Fields<'a> {
    fn new(body: &'a dyn Body) -> Self {
        Self {
            body,
            errors: Vec::new(),
        }
    }

    fn fail(&mut self, field: &str, message: impl Into<String>) -> Option<Option<u64>> {
        self.errors.push(FieldError::new(field, message));
        None
    }

    /// An optional integer in `range`: `Some(None)` if absent, `None` if invalid.
    fn integer(&mut self, name: &str, Range { min, max }: Range) -> Option<Option<u64>> {
        // The message is written only when it is sent: a valid integer costs no allocation.
        let range = || format!("must be a JSON integer from {min} to {max}");
        match self.body.field(name) {
            None => Some(None),
            Some(Value::Null) => self.fail(name, "must not be null"),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if (min..=max).contains(&v) => Some(Some(v)),
                _ => self.fail(name, range()),
            },
            Some(_) => self.fail(name, range()),
        }
    }

    /// The fields of every acquire: `owner`, the TTL and `wait_ms`.
    fn acquire(&mut self, limits: &Limits) -> Option<Acquire> {
        let owner = self.owner();
        let ttl = self.ttl(limits);
        let wait = self.integer(WAIT_MS, limits.wait_ms());
        let meta = self.meta(limits);
        Some(Acquire {
            owner: owner?,
            ttl: ttl?,
            wait: Duration::from_millis(wait?.unwrap_or(0)),
            meta: meta?,
        })
    }

    /// The fields of a lock's acquire: an acquire's, and an optional `max_hold_ms`.
    fn acquire_lock(&mut self, limits: &Limits) -> Option<AcquireLock> {
        let acquire = self.acquire(limits);
        // In range, so a valid TTL below the ceiling.
        let max_hold = self
            .integer(MAX_HOLD_MS, fields::MAX_HOLD_RANGE)
            .map(|ms| ms.and_then(|ms| Ttl::from_millis(ms, Ttl::CEILING).ok()));
        Some(AcquireLock {
            acquire: acquire?,
            max_hold: max_hold?,
        })
    }

    /// The `resources` of an acquire of several locks: a JSON array of 1 to 64 distinct
    /// names, each checked as a path's resource is.
    fn resources(&mut self) -> Option<Resources> {
        let message = match self.body.field(RESOURCES) {
            None => "is required".to_owned(),
            Some(Value::Null) => "must not be null".to_owned(),
            Some(Value::Array(items)) => match resource_list(items) {
                Ok(resources) => return Some(resources),
                Err(message) => message,
            },
            Some(_) => format!("must be a JSON array of 1 to {MAX_RESOURCES} resource names"),
        };
        self.errors.push(FieldError::new(RESOURCES, message));
        None
    }

    /// A semaphore's `limit`: required, 1 to the largest limit.
    fn limit(&mut self, limits: &Limits) -> Option<Claim> {
        match self.integer(LIMIT, limits.limit())? {
            // In range, so at most `max_limit`, a u32.
            Some(limit) => u32::try_from(limit).ok().map(|limit| Claim::Permit { limit }),
            None => {
                self.fail(LIMIT, "is required");
                None
            }
        }
    }

    /// A read-write lock's `mode`: exactly `"read"` or `"write"`.
    fn mode(&mut self) -> Option<Claim> {
        let message = match self.body.field(MODE) {
            Some(Value::String(mode)) if mode == "read" => return Some(Claim::Read),
            Some(Value::String(mode)) if mode == "write" => return Some(Claim::Write),
            None => "is required",
            Some(Value::Null) => "must not be null",
            Some(_) => r#"must be "read" or "write""#,
        };
        self.errors.push(FieldError::new(MODE, message));
        None
    }

    fn owner(&mut self) -> Option<Owner> {
        self.named(OWNER)
    }

    /// A required owner in the field `field` (`owner`, or an election's `candidate`).
    fn named(&mut self, field: &str) -> Option<Owner> {
        let message = match self.body.field(field) {
            None => "is required".to_owned(),
            Some(Value::Null) => "must not be null".to_owned(),
            Some(Value::String(s)) => match Owner::new(s) {
                Ok(owner) => return Some(owner),
                Err(e) => e.to_string(),
            },
            Some(_) => "must be a JSON string".to_owned(),
        };
        self.errors.push(FieldError::new(field, message));
        None
    }

    /// A required `term`: any unsigned 64-bit integer.
    fn term(&mut self) -> Option<FencingToken> {
        match self.integer(TERM, fields::TOKEN_RANGE)? {
            Some(term) => Some(FencingToken(term)),
            None => {
                self.fail(TERM, "is required");
                None
            }
        }
    }

    /// An optional leader's `value`: a string of at most 1,024 bytes; `Some(None)` if
    /// absent, `None` if invalid.
    fn value(&mut self) -> Option<Option<String>> {
        let message = match self.body.field(VALUE) {
            None => return Some(None),
            Some(Value::Null) => "must not be null".to_owned(),
            Some(Value::String(value)) if value.len() <= MAX_VALUE_BYTES => return Some(Some(value.clone())),
            Some(Value::String(_)) => format!("must be at most {MAX_VALUE_BYTES} bytes of UTF-8"),
            Some(_) => "must be a JSON string".to_owned(),
        };
        self.errors.push(FieldError::new(VALUE, message));
        None
    }

    /// Exactly one of `ttl_seconds` and `ttl_ms`, within the longest TTL.
    fn ttl(&mut self, limits: &Limits) -> Option<Ttl> {
        let seconds = self.integer(TTL_SECONDS, limits.ttl_seconds());
        let ms = self.integer(TTL_MS, limits.ttl_ms());
        let ms = match (seconds?, ms?) {
            (Some(_), Some(_)) => {
                let both = format!("give exactly one of {TTL_SECONDS} and {TTL_MS}");
                self.fail(TTL_SECONDS, both.clone());
                self.fail(TTL_MS, both);
                return None;
            }
            (None, None) => {
                self.fail(TTL_SECONDS, format!("is required (or {TTL_MS})"));
                return None;
            }
            // Cannot overflow: seconds are at most the longest TTL in milliseconds / 1000.
            (Some(seconds), None) => seconds * 1000,
            (None, Some(ms)) => ms,
        };
        // Both fields were checked against `max` above, so this refuses nothing new.
        Ttl::from_millis(ms, limits.max_ttl).ok()
    }

    /// Optional metadata: a flat JSON object within the server's size: `Some(None)` if
    /// absent, `None` if invalid.
    fn meta(&mut self, limits: &Limits) -> Option<Option<Meta>> {
        let message = match self.body.field(META) {
            None => return Some(None),
            Some(Value::Null) => "must not be null".to_owned(),
            Some(value) => match Meta::from_value(value, limits.max_meta_bytes) {
                Ok(meta) => return Some(Some(meta)),
                Err(e) => e.to_string(),
            },
        };
        self.errors.push(FieldError::new(META, message));
        None
    }

    /// An optional fencing token: `Some(None)` if absent, `None` if invalid.
    fn token(&mut self) -> Option<Option<FencingToken>> {
        self.integer(FENCING_TOKEN, fields::TOKEN_RANGE)
            .map(|t| t.map(FencingToken))
    }

    fn finish(self) -> Result<(), Vec<FieldError>> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self.errors)
        }
    }
}

/// The names of `items`, as [`Resources`]; what is wrong with the first bad one otherwise.
fn resource_list(items: &[Value]) -> Result<Resources, String> {
    let names = items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(name) => Resource::named(name.as_str()).map_err(|e| format!("item {i}: {e}")),
            _ => Err(format!("item {i}: must be a JSON string")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Resources::new(names).map_err(|e| e.to_string())
}

/// The resource named by a raw (still percent-encoded) path segment: strict percent
/// decoding, then UTF-8, then the model's rules. Errors name the field `resource`.
pub fn resource(raw: &str) -> Result<Resource, FieldError> {
    segment(raw, "resource")
}

/// The semaphore or read-write lock named by a raw path segment, checked as [`resource`]
/// checks a lock's. Errors name the field `name`.
pub fn name(raw: &str) -> Result<Resource, FieldError> {
    segment(raw, "name")
}

fn segment(raw: &str, field: &str) -> Result<Resource, FieldError> {
    let fail = |message: String| FieldError::new(field, message);
    let bytes = percent_decode(raw).ok_or_else(|| fail("has a malformed %-escape".into()))?;
    let name = String::from_utf8(bytes).map_err(|_| fail("is not valid UTF-8".into()))?;
    Resource::named(name).map_err(|e| fail(e.to_string()))
}

/// Decodes `%XX` escapes; `None` if a `%` is not followed by two hex digits.
fn percent_decode(raw: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut bytes = raw.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hi = hex(bytes.next()?)?;
            let lo = hex(bytes.next()?)?;
            out.push(hi << 4 | lo);
        } else {
            out.push(b);
        }
    }
    Some(out)
}

/// The `key=value` pairs of a raw query string: `+` is a space, `%XX` escapes are decoded
/// strictly and the result must be UTF-8 (nothing is replaced). A bad value is an error on the
/// field its key names; a bad key, on `query`.
pub fn query_pairs(raw: &str) -> Result<Vec<(String, String)>, FieldError> {
    let decode = |text: &str| String::from_utf8(percent_decode(&text.replace('+', " "))?).ok();
    raw.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(key)
                .ok_or_else(|| FieldError::new("query", "has a malformed %-escape or invalid UTF-8"))?;
            let value = decode(value)
                .ok_or_else(|| FieldError::new(&key, "has a malformed %-escape or is not valid UTF-8"))?;
            Ok((key, value))
        })
        .collect()
}

fn hex(digit: u8) -> Option<u8> {
    char::from(digit).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Percent-encodes a resource name as one path segment (everything but unreserved
/// characters is escaped, so `/` travels as `%2F`).
pub fn encode_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A list cursor: the hex of the last resource name of the previous page, opaque to
/// clients and safe in a query string.
pub fn encode_cursor(after: &Resource) -> String {
    after.as_str().bytes().map(|b| format!("{b:02x}")).collect()
}

/// Reads a cursor made by [`encode_cursor`].
pub fn cursor(text: &str) -> Result<Resource, FieldError> {
    let fail = || FieldError::new("cursor", "is not a cursor this server gave");
    if !text.len().is_multiple_of(2) {
        return Err(fail());
    }
    let bytes: Option<Vec<u8>> = text
        .as_bytes()
        .chunks(2)
        .map(|pair| Some(hex(pair[0])? << 4 | hex(pair[1])?))
        .collect();
    let name = String::from_utf8(bytes.ok_or_else(fail)?).map_err(|_| fail())?;
    Resource::named(name).map_err(|_| fail())
}

/// The largest page of a list.
pub const MAX_LIST_LIMIT: usize = 1000;
/// The page size when none is asked.
pub const DEFAULT_LIST_LIMIT: usize = 100;

/// A list's `limit` query parameter: 1 to 1,000, default 100.
pub fn list_limit(text: Option<&str>) -> Result<usize, FieldError> {
    match text {
        None => Ok(DEFAULT_LIST_LIMIT),
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIST_LIMIT).contains(n))
            .ok_or_else(|| FieldError::new("limit", "must be an integer from 1 to 1000")),
    }
}

/// A list's `prefix` query parameter: at most 255 bytes, no control characters; may be empty.
pub fn list_prefix(text: Option<&str>) -> Result<String, FieldError> {
    let prefix = text.unwrap_or("");
    match Resource::named(prefix) {
        Ok(_) | Err(InvalidName::Empty) => Ok(prefix.to_owned()),
        Err(e) => Err(FieldError::new("prefix", e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn query_pairs_decode_strictly() {
        let pairs = query_pairs("prefix=pay%3Ament+x&limit=5&&cursor").unwrap();
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(pairs, [("prefix", "pay:ment x"), ("limit", "5"), ("cursor", "")]);
        for bad in ["prefix=%FF", "prefix=%E2%82", "prefix=%G1", "prefix=50%"] {
            let error = query_pairs(bad).unwrap_err();
            assert_eq!(error.field, "prefix", "{bad}");
        }
        assert_eq!(query_pairs("%FF=1").unwrap_err().field, "query");
    }

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn fields(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn a_valid_acquire_is_read_into_the_model() {
        let limits = Limits::default();
        let a = acquire(
            &object(json!({"owner": " w ", "ttl_seconds": 30, "x": 1})),
            &limits,
        )
        .unwrap();
        assert_eq!(a.acquire.owner.as_str(), "w");
        assert_eq!(a.acquire.ttl.as_millis(), 30_000);
        assert_eq!((a.acquire.wait, a.max_hold), (Duration::ZERO, None));
        let a = acquire(
            &object(json!({"owner": "w", "ttl_ms": 1, "wait_ms": 300000})),
            &limits,
        )
        .unwrap()
        .acquire;
        assert_eq!((a.ttl.as_millis(), a.wait), (1, Duration::from_millis(300_000)));
        let a = acquire(&object(json!({"owner": "w", "ttl_seconds": 86400})), &limits).unwrap();
        assert_eq!(a.acquire.ttl.as_millis(), 86_400_000);
    }

    #[test]
    fn a_cap_on_holding_is_a_json_integer_from_one_ms_to_a_year_and_the_delay_is_the_servers() {
        let limits = Limits::default();
        let year = 365 * 86_400_000u64;
        for ms in [1, 30_000, year] {
            let a = acquire(
                &object(json!({"owner": "w", "ttl_ms": 10, "max_hold_ms": ms})),
                &limits,
            )
            .unwrap();
            assert_eq!(a.max_hold.map(Ttl::as_millis), Some(ms));
            let terms = a.terms(Duration::from_millis(300));
            assert_eq!(terms.max_hold, a.max_hold);
            assert_eq!(
                (terms.ttl.as_millis(), terms.lock_delay),
                (10, Duration::from_millis(300))
            );
        }
        assert_eq!(Ttl::CEILING.as_millis(), fields::MAX_HOLD_RANGE.max);
        for bad in [
            json!(0),
            json!(year + 1),
            json!(-1),
            json!("1000"),
            json!(1000.0),
            json!(1e3),
            json!(true),
            json!(null),
            json!([1000]),
        ] {
            let errors = acquire(
                &object(json!({"owner": "w", "ttl_ms": 10, "max_hold_ms": bad})),
                &limits,
            )
            .unwrap_err();
            assert_eq!(fields(&errors), ["max_hold_ms"], "{bad}");
        }
        let errors = acquire(&object(json!({"ttl_ms": 0, "max_hold_ms": 0})), &limits).unwrap_err();
        assert_eq!(fields(&errors), ["owner", "ttl_ms", "max_hold_ms"]);
    }

    #[test]
    fn an_acquire_of_several_locks_reads_its_names_in_the_order_given() {
        let limits = Limits::default();
        let all = acquire_all(
            &object(json!({"owner": "w", "resources": ["b", "a", "c/d"], "ttl_ms": 5, "max_hold_ms": 9})),
            &limits,
        )
        .unwrap();
        let names: Vec<&str> = all.resources.as_slice().iter().map(Resource::as_str).collect();
        assert_eq!(names, ["b", "a", "c/d"]);
        assert_eq!(all.lock.max_hold.map(Ttl::as_millis), Some(9));
        assert_eq!(all.lock.acquire.owner.as_str(), "w");
        let many: Vec<String> = (0..64).map(|i| format!("r{i}")).collect();
        let all = acquire_all(
            &object(json!({"owner": "w", "resources": many, "ttl_ms": 5})),
            &limits,
        );
        assert_eq!(all.unwrap().resources.as_slice().len(), 64);
    }

    #[test]
    fn every_bad_list_of_names_is_a_422_on_resources() {
        let limits = Limits::default();
        let too_many: Vec<String> = (0..65).map(|i| format!("r{i}")).collect();
        for (bad, message) in [
            (json!([]), "must name 1 to 64 resources"),
            (json!(too_many), "must name 1 to 64 resources"),
            (json!(["a", "b", "a"]), "must not name a twice"),
            (json!(["a", ""]), "item 1: must not be empty or blank"),
            (json!(["a\u{7}"]), "item 0: must not contain control characters"),
            (
                json!(["a".repeat(256)]),
                "item 0: must be at most 255 bytes of UTF-8",
            ),
            (json!(["a", 1]), "item 1: must be a JSON string"),
            (json!(["a", null]), "item 1: must be a JSON string"),
            (json!("a"), "must be a JSON array of 1 to 64 resource names"),
            (json!({"a": 1}), "must be a JSON array of 1 to 64 resource names"),
            (json!(null), "must not be null"),
        ] {
            let errors = acquire_all(
                &object(json!({"owner": "w", "resources": bad, "ttl_ms": 5})),
                &limits,
            )
            .unwrap_err();
            assert_eq!(errors, [FieldError::new("resources", message)], "{bad}");
        }
        let missing = acquire_all(&object(json!({"owner": "w", "ttl_ms": 5})), &limits).unwrap_err();
        assert_eq!(missing, [FieldError::new("resources", "is required")]);
        let errors = acquire_all(&object(json!({"resources": [], "wait_ms": -1})), &limits).unwrap_err();
        assert_eq!(fields(&errors), ["resources", "owner", "ttl_seconds", "wait_ms"]);
    }

    #[test]
    fn an_acquire_body_read_field_by_field_is_told_what_its_object_is_told() {
        let limits = Limits::default();
        let deep = format!(
            r#"{{"owner": "w", "ttl_ms": 5, "x": {}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let bodies = [
            r#"{"owner": "w", "ttl_ms": 5}"#,
            r#" {"ttl_seconds": 60, "owner": "w\u00e9", "wait_ms": 10, "max_hold_ms": 99} "#,
            r#"{"owner": "w", "ttl_ms": 5, "meta": {"job": "a", "n": 1}}"#,
            r#"{"owner": "w", "ttl_ms": 5, "unknown": [1, {"a": null}]}"#,
            r#"{"owner": "w", "ttl_ms": 5, "unknown": 1e400}"#,
            r#"{"owner": "w", "ttl_ms": 1e400}"#,
            r#"{"owner": "a", "owner": "b", "ttl_ms": 5}"#,
            r#"{"owner": "w", "ttl_ms": 5, "ttl_ms": 0}"#,
            r#"{"own\u0065r": "w", "ttl_ms": 5}"#,
            r#"{"owner": null, "ttl_seconds": "1", "ttl_ms": 5.0, "wait_ms": -1, "meta": 3}"#,
            r#"{"owner": " ", "max_hold_ms": 0}"#,
            r#"{}"#,
            r#"{"owner": "w", "ttl_ms": 5} x"#,
            r#"{"owner": "w", "ttl_ms": 5"#,
            r#"{"owner": "\ud800", "ttl_ms": 5}"#,
            r#"["w", 5]"#,
            r#"null"#,
            "",
            deep.as_str(),
        ];
        for body in bodies {
            let told = |answer: Result<Result<AcquireLock, Vec<FieldError>>, BadBody>| {
                answer.map_err(|bad| bad.to_string())
            };
            let by_object = super::object(body.as_bytes()).map(|map| acquire(&map, &limits));
            assert_eq!(
                told(acquire_body(body.as_bytes(), &limits)),
                told(by_object),
                "{body}"
            );
        }
        // The last of a field sent twice counts, as in the object.
        let twice = acquire_body(br#"{"owner": "a", "owner": "b", "ttl_ms": 5}"#, &limits);
        assert_eq!(twice.unwrap().unwrap().acquire.owner.as_str(), "b");
    }

    #[test]
    fn a_number_too_large_for_a_double_is_its_fields_422_not_the_bodys_400() {
        let limits = Limits::default();
        let huge = format!("1{}", "0".repeat(400));
        for number in ["1e400", "-1e400", "2E+308", "1.5e99999", huge.as_str()] {
            let text = format!(r#"{{"owner": "w", "ttl_ms": {number}, "x": [{number}, "{number}"]}}"#);
            let body = super::object(text.as_bytes()).unwrap();
            assert_eq!(body["x"][1], json!(number), "strings are left alone");
            let errors = acquire(&body, &limits).unwrap_err();
            assert_eq!(
                errors,
                [FieldError::new(
                    "ttl_ms",
                    "must be a JSON integer from 1 to 86400000"
                )],
                "{number}"
            );
        }
        let text = r#"{"owner": 1e400, "fencing_token": -1e400, "note": "a \"1e400\" in \\ words"}"#;
        let body = super::object(text.as_bytes()).unwrap();
        assert_eq!(body["note"], json!(r#"a "1e400" in \ words"#));
        assert_eq!(fields(&release(&body).unwrap_err()), ["owner", "fencing_token"]);
        // Underflow is no error: a tiny number reads as zero, as serde_json reads it.
        assert_eq!(super::object(br#"{"a": 1e-400}"#).unwrap()["a"], json!(0.0));
        // Only numbers are forgiven: bad syntax, depth and arrays stay what they were.
        for bad in [
            r#"{"a": 1e400"#.to_owned(),
            r#"{"a": 01e400}"#.to_owned(),
            r#"{"a": 1.e400}"#.to_owned(),
            format!(r#"{{"a": 1e400, "b": {}{}}}"#, "[".repeat(200), "]".repeat(200)),
        ] {
            assert!(
                matches!(super::object(bad.as_bytes()), Err(BadBody::NotJson(_))),
                "{bad}"
            );
        }
        assert!(matches!(super::object(b"[1e400]"), Err(BadBody::NotAnObject)));
    }

    #[test]
    fn every_bad_ttl_is_refused() {
        let limits = Limits::default();
        for bad in [
            json!("3600"),
            json!(60.5),
            json!(60.0),
            json!(1e3),
            json!(true),
            json!(null),
            json!(-100),
            json!(0),
            json!(86401),
            json!([1]),
            json!({"v": 1}),
        ] {
            let errors = acquire(&object(json!({"owner": "w", "ttl_seconds": bad})), &limits).unwrap_err();
            assert_eq!(fields(&errors), ["ttl_seconds"], "{bad}");
        }
        let past_u64: Value = serde_json::from_str("18446744073709551616").unwrap();
        let errors = acquire(&object(json!({"owner": "w", "ttl_ms": past_u64})), &limits).unwrap_err();
        assert_eq!(fields(&errors), ["ttl_ms"]);
        let errors = acquire(&object(json!({"owner": "w", "ttl_ms": 86_400_001})), &limits).unwrap_err();
        assert_eq!(fields(&errors), ["ttl_ms"]);
    }

    #[test]
    fn ttl_must_be_given_exactly_once() {
        let limits = Limits::default();
        let both = acquire(
            &object(json!({"owner": "w", "ttl_seconds": 1, "ttl_ms": 5})),
            &limits,
        );
        assert_eq!(fields(&both.unwrap_err()), ["ttl_seconds", "ttl_ms"]);
        let neither = acquire(&object(json!({"owner": "w"})), &limits);
        assert_eq!(fields(&neither.unwrap_err()), ["ttl_seconds"]);
    }

    #[test]
    fn every_bad_field_is_listed_at_once() {
        let body = object(json!({"owner": " ", "ttl_seconds": "1", "wait_ms": -1}));
        let errors = acquire(&body, &Limits::default()).unwrap_err();
        assert_eq!(fields(&errors), ["owner", "ttl_seconds", "wait_ms"]);
        let errors = renew(
            &object(json!({"owner": 7, "fencing_token": 1.5})),
            &Limits::default(),
        )
        .unwrap_err();
        assert_eq!(fields(&errors), ["owner", "ttl_seconds", "fencing_token"]);
    }

    #[test]
    fn owners_are_checked() {
        for (bad, message) in [
            (json!(""), "must not be empty or blank"),
            (json!("  \t"), "must not be empty or blank"),
            (json!("a".repeat(256)), "must be at most 255 bytes of UTF-8"),
            (json!("a\u{7}b"), "must not contain control characters"),
            (json!(null), "must not be null"),
            (json!(12), "must be a JSON string"),
        ] {
            let errors = release(&object(json!({ "owner": bad }))).unwrap_err();
            assert_eq!(errors, [FieldError::new("owner", message)]);
        }
        let missing = release(&object(json!({}))).unwrap_err();
        assert_eq!(missing, [FieldError::new("owner", "is required")]);
    }

    #[test]
    fn a_hold_acquire_reads_its_limit_or_mode() {
        let limits = Limits::default();
        let semaphore = |body| acquire_hold(&object(body), &limits, HoldKind::Semaphore);
        let rwlock = |body| acquire_hold(&object(body), &limits, HoldKind::RwLock);
        let a = semaphore(json!({"owner": "w", "limit": 10_000, "ttl_ms": 5, "wait_ms": 9})).unwrap();
        assert_eq!(a.claim, Claim::Permit { limit: 10_000 });
        assert_eq!((a.acquire.owner.as_str(), a.acquire.ttl.as_millis()), ("w", 5));
        assert_eq!(a.acquire.wait, Duration::from_millis(9));
        assert_eq!(
            rwlock(json!({"owner": "w", "mode": "read", "ttl_ms": 5}))
                .unwrap()
                .claim,
            Claim::Read
        );
        assert_eq!(
            rwlock(json!({"owner": "w", "mode": "write", "ttl_ms": 5}))
                .unwrap()
                .claim,
            Claim::Write
        );
        for bad in [
            json!(0),
            json!(10_001),
            json!("5"),
            json!(5.0),
            json!(null),
            json!(-1),
            json!(true),
        ] {
            let errors = semaphore(json!({"owner": "w", "limit": bad, "ttl_ms": 5})).unwrap_err();
            assert_eq!(fields(&errors), ["limit"], "{bad}");
        }
        let missing = semaphore(json!({"owner": "w", "ttl_ms": 5})).unwrap_err();
        assert_eq!(missing, [FieldError::new("limit", "is required")]);
        for bad in [
            json!("READ"),
            json!("Write"),
            json!(" read"),
            json!(null),
            json!(1),
            json!(["read"]),
        ] {
            let errors = rwlock(json!({"owner": "w", "mode": bad, "ttl_ms": 5})).unwrap_err();
            assert_eq!(fields(&errors), ["mode"], "{bad}");
        }
        let errors = rwlock(json!({"owner": "", "ttl_seconds": 1, "ttl_ms": 1})).unwrap_err();
        assert_eq!(fields(&errors), ["owner", "ttl_seconds", "ttl_ms", "mode"]);
        let small = Limits {
            max_limit: 3,
            ..limits
        };
        let errors = acquire_hold(
            &object(json!({"owner": "w", "limit": 4, "ttl_ms": 5})),
            &small,
            HoldKind::Semaphore,
        );
        assert_eq!(fields(&errors.unwrap_err()), ["limit"]);
    }

    #[test]
    fn names_are_checked_as_resources_and_named_name() {
        assert_eq!(name("gpu%3Apool").unwrap().as_str(), "gpu:pool");
        for bad in ["", "%ZZ", "%FF", &"a".repeat(256)] {
            assert_eq!(name(bad).unwrap_err().field, "name", "{bad:?}");
        }
    }

    #[test]
    fn release_and_renew_take_an_optional_token() {
        let r = release(&object(json!({"owner": "w", "fencing_token": 7}))).unwrap();
        assert_eq!(r.token, Some(FencingToken(7)));
        assert_eq!(release(&object(json!({"owner": "w"}))).unwrap().token, None);
        for bad in [json!(null), json!("7"), json!(-1), json!(7.0)] {
            let errors = release(&object(json!({"owner": "w", "fencing_token": bad}))).unwrap_err();
            assert_eq!(fields(&errors), ["fencing_token"]);
        }
    }

    #[test]
    fn a_delete_is_a_release_unless_force_is_true() {
        let delete = |body: Value| delete(&object(body));
        assert_eq!(delete(json!({"force": true})), Ok(Delete::Force));
        assert_eq!(delete(json!({"force": true, "owner": 7})), Ok(Delete::Force));
        let release = Release {
            owner: Owner::new("w").unwrap(),
            token: None,
        };
        assert_eq!(
            delete(json!({"owner": "w"})),
            Ok(Delete::Release(release.clone()))
        );
        assert_eq!(
            delete(json!({"owner": "w", "force": false})),
            Ok(Delete::Release(release))
        );
        assert_eq!(fields(&delete(json!({"force": false})).unwrap_err()), ["owner"]);
        for bad in [json!(null), json!("true"), json!(1), json!([true])] {
            assert_eq!(
                fields(&delete(json!({"owner": "w", "force": bad})).unwrap_err()),
                ["force"]
            );
        }
    }

    #[test]
    fn resources_are_percent_decoded_strictly() {
        assert_eq!(resource("payment%3A42").unwrap().as_str(), "payment:42");
        assert_eq!(resource("payment:42").unwrap().as_str(), "payment:42");
        assert_eq!(resource("a%2Fb").unwrap().as_str(), "a/b");
        assert_eq!(resource("%C3%A9").unwrap().as_str(), "é");
        for bad in [
            "",
            "%",
            "%4",
            "%zz",
            "a%2",
            "%FF",
            "%C3",
            "a%00b",
            "%7F",
            &"a".repeat(256),
        ] {
            let error = resource(bad).unwrap_err();
            assert_eq!(error.field, "resource", "{bad:?}");
        }
        assert!(resource(&"%41".repeat(255)).is_ok());
    }

    #[test]
    fn segments_and_cursors_round_trip() {
        for name in ["payment:42", "a/b c%é", "resource'; DROP TABLE x; --"] {
            let r = Resource::new(name).unwrap();
            assert_eq!(resource(&encode_segment(name)).unwrap(), r);
            assert_eq!(cursor(&encode_cursor(&r)).unwrap(), r);
        }
        assert_eq!(encode_segment("a/b"), "a%2Fb");
        for bad in ["0", "zz", "ff", "00"] {
            assert_eq!(cursor(bad).unwrap_err().field, "cursor");
        }
    }

    #[test]
    fn list_parameters_are_checked() {
        assert_eq!(list_limit(None), Ok(100));
        assert_eq!(list_limit(Some("1000")), Ok(1000));
        for bad in ["0", "1001", "-1", "x", "1.5", ""] {
            assert_eq!(list_limit(Some(bad)).unwrap_err().field, "limit");
        }
        assert_eq!(list_prefix(None), Ok(String::new()));
        assert_eq!(list_prefix(Some("pay")), Ok("pay".into()));
        assert_eq!(list_prefix(Some("a\nb")).unwrap_err().field, "prefix");
    }
}
