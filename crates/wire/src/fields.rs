//! The fields of the request bodies: their names and their bounds (with [`Limits`], the ones a
//! server configures), in one place that the parser ([`crate::parse`]) checks and the OpenAPI
//! description ([`crate::body`]) states, so the two cannot drift apart.
//!
//! Serde needs literal field names, so the request structs spell them again; a test holds
//! them to these constants.

use std::time::Duration;

use fencelock_core::Ttl;
use fencelock_core::model::MAX_NAME_BYTES;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::{RefOr, Schema};

/// Who asks, or the owner of the lease.
pub const OWNER: &str = "owner";
/// A TTL in whole seconds.
pub const TTL_SECONDS: &str = "ttl_seconds";
/// A TTL in whole milliseconds.
pub const TTL_MS: &str = "ttl_ms";
/// How long an acquire may wait in line, in milliseconds.
pub const WAIT_MS: &str = "wait_ms";
/// The fencing token the caller holds.
pub const FENCING_TOKEN: &str = "fencing_token";
/// How many permits a semaphore has.
pub const LIMIT: &str = "limit";
/// A read-write lock's mode: `read` or `write`.
pub const MODE: &str = "mode";
/// A release by an administrator, whoever holds the name.
pub const FORCE: &str = "force";
/// A cap on holding a lock, in milliseconds from the grant.
pub const MAX_HOLD_MS: &str = "max_hold_ms";
/// The locks an acquire of several takes together.
pub const RESOURCES: &str = "resources";
/// What the holder says about its lease: a flat JSON object.
pub const META: &str = "meta";
/// Who campaigns in an election, or its leader: an owner.
pub const CANDIDATE: &str = "candidate";
/// A leader's term: the fencing token of its leadership.
pub const TERM: &str = "term";
/// What a leader says: a string.
pub const VALUE: &str = "value";

/// An owner as a client may send it: white space around it is trimmed, what is left is not
/// blank and has no control characters.
const OWNER_PATTERN: &str = r"^\s*[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*\s*$";

/// The largest integer a JavaScript client holds exactly (2^53 − 1): the description caps
/// tokens there, although the server takes any unsigned 64-bit integer.
const JS_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The bounds of one integer field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The smallest value accepted.
    pub min: u64,
    /// The largest value accepted.
    pub max: u64,
}

/// The limits a server enforces (all configurable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest TTL (default one day).
    pub max_ttl: Ttl,
    /// The longest `wait_ms` (default 300,000 ms).
    pub max_wait: Duration,
    /// The largest `limit` of a semaphore (default 10,000).
    pub max_limit: u32,
    /// The most bytes of `meta`, as compact JSON (default 1,024).
    pub max_meta_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_ttl: Ttl::DEFAULT_MAX,
            max_wait: Duration::from_millis(300_000),
            max_limit: Self::DEFAULT_MAX_LIMIT,
            max_meta_bytes: fencelock_core::Meta::DEFAULT_MAX_BYTES,
        }
    }
}

impl Limits {
    /// The largest semaphore `limit` when none is configured.
    pub const DEFAULT_MAX_LIMIT: u32 = 10_000;

    /// The bounds of `ttl_seconds`: 1 to the longest TTL in whole seconds.
    pub fn ttl_seconds(&self) -> Range {
        Range {
            min: 1,
            max: self.max_ttl.as_millis() / 1000,
        }
    }

    /// The bounds of `ttl_ms`: 1 to the longest TTL.
    pub fn ttl_ms(&self) -> Range {
        Range {
            min: 1,
            max: self.max_ttl.as_millis(),
        }
    }

    /// The bounds of a semaphore's `limit`: 1 to the largest limit.
    pub fn limit(&self) -> Range {
        Range {
            min: 1,
            max: u64::from(self.max_limit),
        }
    }

    /// The bounds of `wait_ms`: 0 to the longest wait.
    pub fn wait_ms(&self) -> Range {
        Range {
            min: 0,
            max: u64::try_from(self.max_wait.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// The schema of `meta`: a flat JSON object, at most the default size as compact JSON.
pub fn meta_schema(what: &str) -> ObjectBuilder {
    let scalar = utoipa::openapi::schema::OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::String))
        .item(ObjectBuilder::new().schema_type(Type::Number))
        .item(ObjectBuilder::new().schema_type(Type::Boolean))
        .item(ObjectBuilder::new().schema_type(Type::Null));
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(format!(
            "{what} A flat JSON object (string, number, boolean or null values, no nesting), at most {} bytes as \
             compact JSON (the server's `--max-meta-bytes`); anything else is refused with 422 on `meta`.",
            fencelock_core::Meta::DEFAULT_MAX_BYTES
        )))
        .additional_properties(Some(utoipa::openapi::schema::AdditionalProperties::RefOr(RefOr::T(
            Schema::OneOf(scalar.build()),
        ))))
}

/// The bounds of `max_hold_ms`: 1 to one year ([`fencelock_core::Ttl::CEILING`]), whatever the
/// longest TTL: a cap is meant to outlast many renewals.
pub const MAX_HOLD_RANGE: Range = Range {
    min: 1,
    max: 365 * 86_400_000,
};

/// The bounds of `fencing_token`: any unsigned 64-bit integer.
pub const TOKEN_RANGE: Range = Range {
    min: 0,
    max: u64::MAX,
};

/// The schema of an owner field.
pub(crate) fn owner_schema(description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .min_length(Some(1))
        .max_length(Some(MAX_NAME_BYTES))
        .pattern(Some(OWNER_PATTERN))
        .into()
}

/// The schema of an integer field within `range` (a token's, capped at 2^53 − 1).
pub(crate) fn integer_schema(description: &str, range: Range) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .description(Some(description))
        .minimum(Some(range.min))
        .maximum(Some(range.max.min(JS_SAFE_INTEGER)))
        .into()
}

/// The description of a TTL field with the default limits, e.g. `… (default 86400).`
pub(crate) fn with_default(text: &str, default: Range) -> String {
    format!("{text} (default {}).", default.max)
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::{Map, Value, json};
    use utoipa::PartialSchema;

    use super::*;
    use crate::body::{
        AcquireAllRequest, AcquireRequest, ForceReleaseRequest, ReleaseRequest, RenewRequest, TtlFields,
    };
    use crate::hold::{HoldAcquireRequest, Mode, RwLockAcquireRequest, SemaphoreAcquireRequest};
    use crate::parse;
    use fencelock_core::HoldKind;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    /// A body the parser accepts reads into the request struct, which writes back the same
    /// values (unknown fields aside), which the parser reads the same again.
    fn round_trips<T, P>(body: Value, parse: impl Fn(&Map<String, Value>) -> P)
    where
        T: Serialize + DeserializeOwned,
        P: PartialEq + std::fmt::Debug,
    {
        let body = object(body);
        let parsed = parse(&body);
        let request: T = serde_json::from_value(Value::Object(body.clone())).unwrap();
        let again = object(serde_json::to_value(&request).unwrap());
        let known: Map<String, Value> = body.into_iter().filter(|(k, _)| k != "x").collect();
        assert_eq!(again, known);
        assert_eq!(parse(&again), parsed);
    }

    #[test]
    fn what_the_parser_accepts_the_request_structs_read_and_write_back() {
        let limits = Limits::default();
        let acquire = |body: &Map<String, Value>| parse::acquire(body, &limits).unwrap();
        let release = |body: &Map<String, Value>| parse::release(body).unwrap();
        let renew = |body: &Map<String, Value>| parse::renew(body, &limits).unwrap();
        round_trips::<AcquireRequest, _>(json!({"owner": " w ", "ttl_seconds": 30, "x": 1}), acquire);
        round_trips::<AcquireRequest, _>(json!({"owner": "w", "ttl_ms": 1, "wait_ms": 300_000}), acquire);
        round_trips::<AcquireRequest, _>(
            json!({"owner": "w", "ttl_seconds": 86_400, "wait_ms": 0}),
            acquire,
        );
        round_trips::<AcquireRequest, _>(json!({"owner": "w", "ttl_ms": 5, "max_hold_ms": 9}), acquire);
        let acquire_all = |body: &Map<String, Value>| parse::acquire_all(body, &limits).unwrap();
        round_trips::<AcquireAllRequest, _>(
            json!({"owner": "w", "resources": ["b", "a"], "ttl_ms": 5, "wait_ms": 3, "max_hold_ms": 9, "x": 1}),
            acquire_all,
        );
        round_trips::<AcquireAllRequest, _>(
            json!({"owner": "w", "resources": ["a"], "ttl_seconds": 5}),
            acquire_all,
        );
        round_trips::<ReleaseRequest, _>(json!({"owner": "w"}), release);
        round_trips::<ReleaseRequest, _>(json!({"owner": "\tw", "fencing_token": u64::MAX}), release);
        round_trips::<RenewRequest, _>(
            json!({"owner": "w", "ttl_ms": 86_400_000, "fencing_token": 0}),
            renew,
        );
        round_trips::<RenewRequest, _>(json!({"owner": "w", "ttl_seconds": 1}), renew);
        let semaphore =
            |body: &Map<String, Value>| parse::acquire_hold(body, &limits, HoldKind::Semaphore).unwrap();
        let rwlock =
            |body: &Map<String, Value>| parse::acquire_hold(body, &limits, HoldKind::RwLock).unwrap();
        round_trips::<SemaphoreAcquireRequest, _>(
            json!({"owner": "w", "limit": 3, "ttl_ms": 9, "wait_ms": 1, "x": 1}),
            semaphore,
        );
        round_trips::<HoldAcquireRequest, _>(json!({"owner": "w", "limit": 1, "ttl_seconds": 2}), semaphore);
        round_trips::<RwLockAcquireRequest, _>(json!({"owner": "w", "mode": "write", "ttl_ms": 9}), rwlock);
        round_trips::<HoldAcquireRequest, _>(
            json!({"owner": "w", "mode": "read", "ttl_ms": 9, "wait_ms": 0}),
            rwlock,
        );
    }

    #[test]
    fn a_hold_request_is_made_from_a_claim_and_parses_back_to_it() {
        use fencelock_core::{Claim, Owner, Ttl};
        let limits = Limits::default();
        let owner = Owner::new("w").unwrap();
        let ttl = Ttl::from_millis(1_500, limits.max_ttl).unwrap();
        for claim in [Claim::Permit { limit: 7 }, Claim::Read, Claim::Write] {
            let request =
                HoldAcquireRequest::new(&owner, claim, ttl, None, std::time::Duration::from_millis(40));
            let body = object(serde_json::to_value(&request).unwrap());
            let parsed = parse::acquire_hold(&body, &limits, request.kind()).unwrap();
            assert_eq!(
                (parsed.claim, parsed.acquire.ttl, parsed.acquire.owner),
                (claim, ttl, owner.clone())
            );
            assert_eq!(parsed.acquire.wait.as_millis(), 40);
        }
        let request = HoldAcquireRequest::new(&owner, Claim::Read, ttl, None, std::time::Duration::ZERO);
        assert_eq!(keys(request), sorted(&[OWNER, MODE, TTL_MS]));
        assert_eq!(serde_json::to_value(Mode::Write).unwrap(), json!("write"));
    }

    fn keys(value: impl Serialize) -> Vec<String> {
        let mut keys: Vec<String> = object(serde_json::to_value(value).unwrap())
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    fn sorted(names: &[&str]) -> Vec<String> {
        let mut names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn the_request_structs_use_these_names() {
        let acquire = AcquireRequest {
            owner: "w".into(),
            ttl: TtlFields {
                ttl_seconds: Some(1),
                ttl_ms: Some(1),
            },
            wait_ms: Some(1),
            max_hold_ms: Some(1),
            meta: Some(Map::new()),
        };
        assert_eq!(
            keys(&acquire),
            sorted(&[OWNER, TTL_SECONDS, TTL_MS, WAIT_MS, MAX_HOLD_MS, META])
        );
        let all = AcquireAllRequest {
            resources: vec!["a".into()],
            acquire,
        };
        assert_eq!(
            keys(all),
            sorted(&[OWNER, TTL_SECONDS, TTL_MS, WAIT_MS, MAX_HOLD_MS, META, RESOURCES])
        );
        let release = ReleaseRequest {
            owner: "w".into(),
            fencing_token: Some(1),
        };
        assert_eq!(keys(release), sorted(&[OWNER, FENCING_TOKEN]));
        let renew = RenewRequest {
            owner: "w".into(),
            ttl: TtlFields {
                ttl_seconds: Some(1),
                ttl_ms: Some(1),
            },
            fencing_token: Some(1),
            meta: Some(Map::new()),
        };
        assert_eq!(
            keys(renew),
            sorted(&[OWNER, TTL_SECONDS, TTL_MS, FENCING_TOKEN, META])
        );
        let semaphore = SemaphoreAcquireRequest {
            owner: "w".into(),
            limit: 1,
            ttl: TtlFields::ms(1),
            wait_ms: Some(1),
            meta: Some(Map::new()),
        };
        assert_eq!(keys(semaphore), sorted(&[OWNER, LIMIT, TTL_MS, WAIT_MS, META]));
    }

    #[test]
    fn the_schemas_state_the_default_limits() {
        let schema = serde_json::to_value(AcquireRequest::schema()).unwrap();
        let bounds = |name: &str| {
            let field = &schema["properties"][name];
            (field["minimum"].as_u64(), field["maximum"].as_u64())
        };
        let limits = Limits::default();
        for (name, range) in [
            (TTL_SECONDS, limits.ttl_seconds()),
            (TTL_MS, limits.ttl_ms()),
            (WAIT_MS, limits.wait_ms()),
        ] {
            assert_eq!(bounds(name), (Some(range.min), Some(range.max)), "{name}");
        }
        assert_eq!(schema["properties"][OWNER]["maxLength"], json!(MAX_NAME_BYTES));
        assert_eq!(schema["required"], json!([OWNER]));
        let exactly_one_ttl = json!([{"required": [TTL_SECONDS]}, {"required": [TTL_MS]}]);
        assert_eq!(schema["oneOf"], exactly_one_ttl);
        assert_eq!(
            serde_json::to_value(RenewRequest::schema()).unwrap()["oneOf"],
            exactly_one_ttl
        );
        assert_eq!(
            serde_json::to_value(SemaphoreAcquireRequest::schema()).unwrap()["oneOf"],
            exactly_one_ttl
        );
        let release = serde_json::to_value(ReleaseRequest::schema()).unwrap();
        assert!(release.get("oneOf").is_none());
        // A DELETE body is a release or a force-release, never both: `force` tells them apart.
        assert_eq!(release["properties"][FORCE]["enum"], json!([false]));
        let force = serde_json::to_value(ForceReleaseRequest::schema()).unwrap();
        assert_eq!(force["properties"][FORCE]["enum"], json!([true]));
        assert_eq!(force["required"], json!([FORCE]));
        let schema = serde_json::to_value(SemaphoreAcquireRequest::schema()).unwrap();
        let limit = &schema["properties"][LIMIT];
        assert_eq!(
            (limit["minimum"].as_u64(), limit["maximum"].as_u64()),
            (Some(1), Some(10_000))
        );
        assert_eq!(schema["required"], json!([OWNER, LIMIT]));
        let schema = serde_json::to_value(RwLockAcquireRequest::schema()).unwrap();
        assert_eq!(schema["properties"][MODE]["enum"], json!(["read", "write"]));
        assert_eq!(schema["required"], json!([OWNER, MODE]));
        assert!(
            schema["properties"].get(MAX_HOLD_MS).is_none(),
            "holds have no cap"
        );
        let max_hold = |schema: &Value| {
            let field = &schema["properties"][MAX_HOLD_MS];
            (field["minimum"].as_u64(), field["maximum"].as_u64())
        };
        let lock = serde_json::to_value(AcquireRequest::schema()).unwrap();
        let year = Some(365 * 86_400_000);
        assert_eq!(max_hold(&lock), (Some(1), year));
        let all = serde_json::to_value(AcquireAllRequest::schema()).unwrap();
        assert_eq!(max_hold(&all), (Some(1), year));
        assert_eq!(all["required"], json!([OWNER, RESOURCES]));
        assert_eq!(all["oneOf"], exactly_one_ttl);
        let resources = &all["properties"][RESOURCES];
        assert_eq!(
            (
                &resources["minItems"],
                &resources["maxItems"],
                &resources["uniqueItems"]
            ),
            (&json!(1), &json!(64), &json!(true))
        );
        assert_eq!(resources["items"]["maxLength"], json!(MAX_NAME_BYTES));
    }
}
