//! Property-based fuzzing of what crosses the wire: request bodies (bytes → JSON object →
//! each request's checks), names and owners, timestamps and leases.
//!
//! Each property holds the code to the SPEC's rules, written out plainly here (and in
//! `fencelock_testkit::fuzz`) as a model: not only "it does not panic", but "it accepts what
//! the SPEC accepts, means by it what the SPEC means, and names every bad field of what it
//! refuses". The number of cases is fixed per property, so the test command runs this in
//! seconds; `PROPTEST_CASES=100000 cargo test -p fencelock-wire --test fuzz` runs longer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fencelock_core::{Claim, FencingToken, HoldKind, Lease, Owner, Principal, Resource, Timestamp, Ttl};
use fencelock_testkit::fuzz::{config, judged_as_spec_says, name_faults, name_like};
use fencelock_wire::parse::{self, BadBody, Limits};
use fencelock_wire::{
    AcquireRequest, FieldError, ForceReleaseRequest, HoldAcquireRequest, LeaseBody, ReleaseRequest,
    RenewRequest, RwLockAcquireRequest, SemaphoreAcquireRequest, TtlFields,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// A JSON value as a client may write it; what the SPEC makes of it is known from how it was
/// made, not from how a parser reads it.
#[derive(Debug, Clone)]
enum Json {
    /// An integer in decimal: negative ones, and ones past 64 bits, too.
    Int(i128),
    /// `-0`.
    MinusZero,
    /// More digits than any 128-bit integer (but fewer than a double's range).
    Huge(String),
    /// A number with a fraction, e.g. `60.5` or `60.0`.
    Fraction(String),
    /// A number with an exponent, e.g. `1e3` or `2E-7`.
    Exponent(String),
    /// A number too large for a double, e.g. `1e400` or 310 digits: valid JSON, past every
    /// range.
    PastDouble(String),
    Str(String),
    Bool(bool),
    Null,
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn text(&self) -> String {
        match self {
            Self::Int(n) => n.to_string(),
            Self::MinusZero => "-0".to_owned(),
            Self::Huge(text) | Self::Fraction(text) | Self::Exponent(text) | Self::PastDouble(text) => {
                text.clone()
            }
            Self::Str(s) => serde_json::to_string(s).unwrap(),
            Self::Bool(b) => b.to_string(),
            Self::Null => "null".to_owned(),
            Self::Array(items) => format!(
                "[{}]",
                items.iter().map(Self::text).collect::<Vec<_>>().join(", ")
            ),
            Self::Object(members) => object_text(members),
        }
    }

    /// What the SPEC's type rules make of this value.
    fn seen(&self) -> Seen {
        match self {
            Self::Int(n) => Seen::Integer(*n),
            Self::Str(s) => Seen::Text(s.clone()),
            Self::Bool(b) => Seen::Bool(*b),
            Self::Null => Seen::Null,
            // `-0` has no fraction, but serde_json reads it as the float −0.0, so it is refused
            // like `0.0`: a limit of the parser, and harmless (no client writes `-0`). `Huge`
            // is past every range, and so is `PastDouble`.
            Self::MinusZero
            | Self::Huge(_)
            | Self::Fraction(_)
            | Self::Exponent(_)
            | Self::PastDouble(_)
            | Self::Array(_)
            | Self::Object(_) => Seen::Other,
        }
    }
}

fn object_text(members: &[(String, Json)]) -> String {
    let members: Vec<String> = members
        .iter()
        .map(|(key, value)| format!("{}: {}", serde_json::to_string(key).unwrap(), value.text()))
        .collect();
    format!("{{{}}}", members.join(", "))
}

/// What a member's value is to the SPEC's rules.
#[derive(Debug, Clone)]
enum Seen {
    /// A JSON integer (no fraction, no exponent).
    Integer(i128),
    Text(String),
    Bool(bool),
    Null,
    /// Any other number, an array or an object.
    Other,
}

impl From<&Value> for Seen {
    fn from(value: &Value) -> Self {
        match value {
            Value::Number(n) => n
                .as_u64()
                .map(i128::from)
                .or(n.as_i64().map(i128::from))
                .map_or(Self::Other, Self::Integer),
            Value::String(s) => Self::Text(s.clone()),
            Value::Bool(b) => Self::Bool(*b),
            Value::Null => Self::Null,
            _ => Self::Other,
        }
    }
}

/// The requests whose bodies are checked: `Release` is the owner's, `Delete` what a `DELETE`
/// is (the owner's release, or a force-release).
#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire,
    Semaphore,
    RwLock,
    Release,
    Delete,
    Renew,
}

const OPS: [Op; 6] = [
    Op::Acquire,
    Op::Semaphore,
    Op::RwLock,
    Op::Release,
    Op::Delete,
    Op::Renew,
];

/// What an accepted body means, whatever its request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Meant {
    /// A force-release, which has no owner (nor any other field).
    force: bool,
    owner: String,
    ttl_ms: Option<u64>,
    wait_ms: Option<u64>,
    claim: Option<Claim>,
    token: Option<u64>,
    /// A lock's cap on holding.
    max_hold_ms: Option<u64>,
}

/// The SPEC's rules for the body of `op`, written out plainly: what it means, or the set of
/// its bad fields.
fn model(op: Op, body: &BTreeMap<String, Seen>, limits: &Limits) -> Result<Meant, BTreeSet<&'static str>> {
    if let Op::Delete = op {
        // `force` decides what the rest is: with a bad one, nothing else is judged.
        return match body.get("force") {
            Some(Seen::Bool(true)) => Ok(Meant {
                force: true,
                ..Meant::default()
            }),
            None | Some(Seen::Bool(false)) => model(Op::Release, body, limits),
            Some(_) => Err(BTreeSet::from(["force"])),
        };
    }
    let mut bad = BTreeSet::new();
    // A JSON integer from `min` to `max`: `Ok(None)` if absent, `Err` (and named) if bad.
    let mut integer = |name: &'static str, min: u64, max: u64| match body.get(name) {
        None => Ok(None),
        Some(Seen::Integer(n)) if (i128::from(min)..=i128::from(max)).contains(n) => {
            Ok(Some(u64::try_from(*n).unwrap()))
        }
        Some(_) => {
            bad.insert(name);
            Err(())
        }
    };
    let max_ttl = limits.max_ttl.as_millis();
    let is_acquire = matches!(op, Op::Acquire | Op::Semaphore | Op::RwLock);
    let ttl = if matches!(op, Op::Release | Op::Delete) {
        Ok(None)
    } else {
        match (
            integer("ttl_seconds", 1, max_ttl / 1000),
            integer("ttl_ms", 1, max_ttl),
        ) {
            (Ok(Some(s)), Ok(None)) => Ok(Some(s * 1000)),
            (Ok(None), Ok(Some(ms))) => Ok(Some(ms)),
            (Ok(None), Ok(None)) => Err(vec!["ttl_seconds"]),
            (Ok(Some(_)), Ok(Some(_))) => Err(vec!["ttl_seconds", "ttl_ms"]),
            _ => Err(vec![]),
        }
    };
    let wait = if is_acquire {
        integer("wait_ms", 0, u64::try_from(limits.max_wait.as_millis()).unwrap())
            .map(|w| Some(w.unwrap_or(0)))
    } else {
        Ok(None)
    };
    let claim = match op {
        Op::Semaphore => match integer("limit", 1, u64::from(limits.max_limit)) {
            Ok(Some(limit)) => Ok(Some(Claim::Permit {
                limit: u32::try_from(limit).unwrap(),
            })),
            Ok(None) => Err(vec!["limit"]),
            Err(()) => Err(vec![]),
        },
        Op::RwLock => match body.get("mode") {
            Some(Seen::Text(mode)) if mode == "read" => Ok(Some(Claim::Read)),
            Some(Seen::Text(mode)) if mode == "write" => Ok(Some(Claim::Write)),
            _ => Err(vec!["mode"]),
        },
        Op::Acquire | Op::Release | Op::Delete | Op::Renew => Ok(None),
    };
    let token = if matches!(op, Op::Release | Op::Delete | Op::Renew) {
        integer("fencing_token", 0, u64::MAX)
    } else {
        Ok(None)
    };
    // A cap is a lock's only: semaphores and read-write locks ignore it as an unknown field.
    let max_hold = if matches!(op, Op::Acquire) {
        integer("max_hold_ms", 1, Ttl::CEILING.as_millis())
    } else {
        Ok(None)
    };
    let owner = match body.get("owner") {
        // Trimmed as Rust's `str::trim` trims (the SPEC says so), then a name.
        Some(Seen::Text(owner)) if name_faults(owner.trim()).is_empty() => Some(owner.trim().to_owned()),
        _ => {
            bad.insert("owner");
            None
        }
    };
    for names in [ttl.as_ref().err(), claim.as_ref().err()].into_iter().flatten() {
        bad.extend(names);
    }
    match (owner, ttl, wait, claim, token, max_hold) {
        (Some(owner), Ok(ttl_ms), Ok(wait_ms), Ok(claim), Ok(token), Ok(max_hold_ms)) if bad.is_empty() => {
            Ok(Meant {
                force: false,
                owner,
                ttl_ms,
                wait_ms,
                claim,
                token,
                max_hold_ms,
            })
        }
        _ => Err(bad),
    }
}

/// The body of `op` as the server's parser reads it.
fn decode(op: Op, body: &Map<String, Value>, limits: &Limits) -> Result<Meant, Vec<FieldError>> {
    let acquired = |a: parse::Acquire, claim| Meant {
        owner: owner_name(&a.owner),
        ttl_ms: Some(a.ttl.as_millis()),
        wait_ms: Some(u64::try_from(a.wait.as_millis()).unwrap()),
        claim,
        ..Meant::default()
    };
    let released = |r: parse::Release| Meant {
        owner: owner_name(&r.owner),
        token: r.token.map(|t| t.0),
        ..Meant::default()
    };
    let hold = |kind| parse::acquire_hold(body, limits, kind).map(|h| acquired(h.acquire, Some(h.claim)));
    match op {
        Op::Acquire => parse::acquire(body, limits).map(|a| Meant {
            max_hold_ms: a.max_hold.map(Ttl::as_millis),
            ..acquired(a.acquire, None)
        }),
        Op::Semaphore => hold(HoldKind::Semaphore),
        Op::RwLock => hold(HoldKind::RwLock),
        Op::Release => parse::release(body).map(released),
        Op::Delete => parse::delete(body).map(|delete| match delete {
            parse::Delete::Release(release) => released(release),
            parse::Delete::Force => Meant {
                force: true,
                ..Meant::default()
            },
        }),
        Op::Renew => parse::renew(body, limits).map(|r| Meant {
            owner: owner_name(&r.owner),
            ttl_ms: Some(r.ttl.as_millis()),
            token: r.token.map(|t| t.0),
            ..Meant::default()
        }),
    }
}

/// The name of a parsed owner, which is of no principal: the server adds that.
fn owner_name(owner: &Owner) -> String {
    assert_eq!(owner.principal(), None);
    owner.as_str().to_owned()
}

/// The body the wire request structs write for `meant`, built as the client builds them.
fn encode(op: Op, meant: &Meant) -> Value {
    if meant.force {
        return serde_json::to_value(ForceReleaseRequest { force: true }).unwrap();
    }
    let owner = Owner::new(&meant.owner).unwrap();
    let ttl_ms = meant.ttl_ms.unwrap_or_default();
    let written = match op {
        Op::Acquire => serde_json::to_value(AcquireRequest {
            owner: owner.to_string(),
            ttl: TtlFields::ms(ttl_ms),
            wait_ms: meant.wait_ms.filter(|&w| w > 0),
            max_hold_ms: meant.max_hold_ms,
            meta: None,
        }),
        Op::Semaphore | Op::RwLock => serde_json::to_value(HoldAcquireRequest::new(
            &owner,
            meant.claim.unwrap(),
            Ttl::from_millis(ttl_ms, Ttl::CEILING).unwrap(),
            None,
            Duration::from_millis(meant.wait_ms.unwrap()),
        )),
        Op::Release | Op::Delete => serde_json::to_value(ReleaseRequest {
            owner: owner.to_string(),
            fencing_token: meant.token,
        }),
        Op::Renew => serde_json::to_value(RenewRequest {
            owner: owner.to_string(),
            ttl: TtlFields::ms(ttl_ms),
            fencing_token: meant.token,
            meta: None,
        }),
    };
    written.unwrap()
}

/// What the wire request struct of `op` (for a `DELETE`, of what it `meant`) reads from
/// `body` and writes back.
fn through_struct(op: Op, meant: &Meant, body: &Map<String, Value>) -> Result<Value, serde_json::Error> {
    fn again<T: Serialize + DeserializeOwned>(body: &Map<String, Value>) -> Result<Value, serde_json::Error> {
        serde_json::to_value(serde_json::from_value::<T>(Value::Object(body.clone()))?)
    }
    match op {
        Op::Acquire => again::<AcquireRequest>(body),
        Op::Semaphore => again::<SemaphoreAcquireRequest>(body),
        Op::RwLock => again::<RwLockAcquireRequest>(body),
        Op::Delete if meant.force => again::<ForceReleaseRequest>(body),
        Op::Release | Op::Delete => again::<ReleaseRequest>(body),
        Op::Renew => again::<RenewRequest>(body),
    }
}

fn as_object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// Holds the parser of `op` to the model on `body`: the same meaning, or the same bad
/// fields, each named once; and what it accepts, the wire request structs write so that it
/// reads back the same (as the client sends it, and as they read the client's body).
fn judged_by_the_spec(
    op: Op,
    body: &Map<String, Value>,
    seen: &BTreeMap<String, Seen>,
    limits: &Limits,
) -> Result<(), TestCaseError> {
    match (decode(op, body, limits), model(op, seen, limits)) {
        (Ok(meant), Ok(expected)) => {
            prop_assert_eq!(&meant, &expected, "{:?}", op);
            let sent = as_object(encode(op, &meant));
            prop_assert_eq!(
                decode(op, &sent, limits).ok(),
                Some(meant.clone()),
                "{:?} of {:?}",
                op,
                sent
            );
            let read = through_struct(op, &meant, body);
            prop_assert!(
                read.is_ok(),
                "{:?}: the request struct cannot read {:?}: {:?}",
                op,
                body,
                read
            );
            let read = as_object(read.unwrap());
            prop_assert_eq!(
                decode(op, &read, limits).ok(),
                Some(meant),
                "{:?} of {:?}",
                op,
                read
            );
        }
        (Err(errors), Err(bad)) => {
            let named: BTreeSet<&str> = errors.iter().map(|e| e.field.as_str()).collect();
            prop_assert_eq!(&named, &bad, "{:?}: {:?}", op, errors);
            prop_assert_eq!(
                named.len(),
                errors.len(),
                "{:?}: a field named twice: {:?}",
                op,
                errors
            );
            prop_assert!(errors.iter().all(|e| !e.message.is_empty()), "{:?}", errors);
        }
        (got, expected) => prop_assert!(
            false,
            "{:?}: the parser says {:?}, the SPEC {:?}",
            op,
            got,
            expected
        ),
    }
    Ok(())
}

/// Limits a server may be configured with: the defaults, or small ones (down to a TTL under
/// a second, which leaves no valid `ttl_seconds`), or the largest.
fn limits() -> impl Strategy<Value = Limits> {
    let max_ttl = prop_oneof![
        3 => Just(Ttl::DEFAULT_MAX.as_millis()),
        1 => 1..=5_000u64,
        1 => Just(Ttl::CEILING.as_millis()),
    ];
    let max_wait = prop_oneof![3 => Just(300_000u64), 1 => 0..=2_000u64];
    let max_limit = prop_oneof![3 => Just(Limits::DEFAULT_MAX_LIMIT), 1 => 1..=20u32];
    (max_ttl, max_wait, max_limit).prop_map(|(ttl, wait, max_limit)| Limits {
        max_ttl: Ttl::from_millis(ttl, Ttl::CEILING).unwrap(),
        max_wait: Duration::from_millis(wait),
        max_limit,
        max_meta_bytes: fencelock_core::Meta::DEFAULT_MAX_BYTES,
    })
}

/// Integers near the edges of every range (of the default and of small limits), of 64
/// bits, and past them.
fn integer() -> impl Strategy<Value = i128> {
    let max = i128::from(u64::MAX);
    prop_oneof![
        2 => 0..=10i128,
        4 => 0..=12_000i128,
        1 => 299_990..=300_010i128,
        1 => 86_399_990..=86_400_010i128,
        1 => (max - 2)..=(max + 2),
        1 => any::<u64>().prop_map(i128::from),
        1 => any::<i64>().prop_map(i128::from),
        1 => any::<i128>(),
    ]
}

/// Any JSON value: nested, big numbers, fractions and exponents, strings with control
/// characters, `null`.
fn json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        integer().prop_map(Json::Int),
        Just(Json::MinusZero),
        "-?[1-9][0-9]{39,300}".prop_map(Json::Huge),
        (any::<i64>(), "[0-9]{1,6}").prop_map(|(i, f)| Json::Fraction(format!("{i}.{f}"))),
        (0..=9_999u32, "[eE][+-]?", 0..=300u32).prop_map(|(m, e, x)| Json::Exponent(format!("{m}{e}{x}"))),
        prop_oneof![
            (1..=9_999u32, "(\\.[0-9]{1,3})?[eE]\\+?", 309..=99_999u32)
                .prop_map(|(m, f, x)| format!("{m}{f}{x}")),
            "-?[1-9][0-9]{309,400}",
        ]
        .prop_map(|n| Json::PastDouble(n.to_owned())),
        name_like().prop_map(Json::Str),
        any::<bool>().prop_map(Json::Bool),
        Just(Json::Null),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Json::Array),
            prop::collection::vec((any::<String>(), inner), 0..5).prop_map(Json::Object),
        ]
    })
}

const FIELDS: [&str; 9] = [
    "owner",
    "ttl_seconds",
    "ttl_ms",
    "wait_ms",
    "fencing_token",
    "limit",
    "mode",
    "force",
    "max_hold_ms",
];

/// A value for the member `key`: most often one of the kind the field takes, near its
/// edges; else any JSON value.
fn value_of(key: &str) -> BoxedStrategy<Json> {
    let typed = match key {
        "owner" => prop_oneof![
            2 => "\\s?[a-z0-9:-]{1,20}\\s?",
            1 => name_like(),
        ]
        .prop_map(Json::Str)
        .boxed(),
        "mode" => prop::sample::select(vec!["read", "write", "read", "write", "Read", "write ", ""])
            .prop_map(|m| Json::Str(m.to_owned()))
            .boxed(),
        "ttl_seconds" => prop_oneof![1..=100i128, integer()].prop_map(Json::Int).boxed(),
        "ttl_ms" | "wait_ms" | "max_hold_ms" => prop_oneof![0..=100_000i128, integer()]
            .prop_map(Json::Int)
            .boxed(),
        "limit" => prop_oneof![1..=20i128, integer()].prop_map(Json::Int).boxed(),
        "fencing_token" => integer().prop_map(Json::Int).boxed(),
        "force" => any::<bool>().prop_map(Json::Bool).boxed(),
        _ => return json().boxed(),
    };
    prop_oneof![9 => typed, 1 => json()].boxed()
}

/// The members of a request body: each field of some request or not, and a few others
/// (a field may come twice: the last one counts, as in serde_json), in any order.
fn members() -> impl Strategy<Value = Vec<(String, Json)>> {
    let fields: Vec<_> = FIELDS
        .iter()
        .map(|&key| {
            let present = match key {
                "owner" => 0.95,
                "limit" | "mode" => 0.8,
                _ => 0.5,
            };
            proptest::option::weighted(present, value_of(key))
                .prop_map(move |v| v.map(|v| (key.to_owned(), v)))
        })
        .collect();
    let key = prop_oneof![
        2 => prop::sample::select(FIELDS.to_vec()).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["Owner", "ttl", "owner ", "TTL_MS", ""]).prop_map(str::to_owned),
        1 => any::<String>(),
    ];
    let others = prop::collection::vec(key.prop_flat_map(|key| (Just(key.clone()), value_of(&key))), 0..3);
    (fields, others)
        .prop_map(|(fields, others)| fields.into_iter().flatten().chain(others).collect::<Vec<_>>())
        .prop_shuffle()
}

/// Bytes that are sometimes JSON and sometimes almost: anything, a soup of JSON's tokens,
/// a request body with bytes changed, or objects and arrays nested deep.
fn body_bytes() -> impl Strategy<Value = Vec<u8>> {
    let tokens = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        " ",
        "\"owner\"",
        "\"ttl_ms\"",
        "\"ttl_seconds\"",
        "\"wait_ms\"",
        "\"fencing_token\"",
        "\"limit\"",
        "\"mode\"",
        "\"read\"",
        "\"w\"",
        "1",
        "-1",
        "0",
        "1.0",
        "1e3",
        "null",
        "true",
        "\"\\u0000\"",
        "\"\\ud800\"",
        "\"\\\"",
        "\u{feff}",
        "\u{0}",
    ]);
    let soup = prop::collection::vec(tokens, 0..40).prop_map(|t| t.concat().into_bytes());
    let changed = (
        members(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    )
        .prop_map(|(members, edits)| {
            let mut bytes = object_text(&members).into_bytes();
            for (at, byte) in edits {
                let at = at.index(bytes.len());
                bytes[at] = byte;
            }
            bytes
        });
    let deep = (1..400usize, any::<bool>()).prop_map(|(depth, array)| {
        let (open, close) = if array { ("[", "]") } else { ("{\"a\":", "}") };
        format!("{}1{}", open.repeat(depth), close.repeat(depth)).into_bytes()
    });
    prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..64),
        3 => soup,
        3 => changed,
        1 => deep,
    ]
}

proptest! {
    #![proptest_config(config(1024))]

    /// Any body a client may write is accepted exactly when the SPEC accepts it, with the
    /// SPEC's meaning; refused with each bad field named.
    #[test]
    fn every_request_body_is_judged_by_the_spec(members in members(), limits in limits()) {
        let text = object_text(&members);
        let body = parse::object(text.as_bytes());
        prop_assert!(body.is_ok(), "{} is refused: {:?}", text, body);
        let body = body.unwrap();
        let seen: BTreeMap<String, Seen> = members.iter().map(|(k, v)| (k.clone(), v.seen())).collect();
        prop_assert_eq!(body.len(), seen.len());
        for op in OPS {
            judged_by_the_spec(op, &body, &seen, &limits)?;
        }
    }

    /// Any bytes are either refused as a body (never a panic, never a stack overflow) or
    /// are an object that every request's checks judge by the SPEC.
    #[test]
    fn any_bytes_are_refused_or_judged_by_the_spec(bytes in body_bytes(), limits in limits()) {
        match parse::object(&bytes) {
            Ok(body) => {
                let seen: BTreeMap<String, Seen> = body.iter().map(|(k, v)| (k.clone(), Seen::from(v))).collect();
                for op in OPS {
                    judged_by_the_spec(op, &body, &seen, &limits)?;
                }
            }
            Err(BadBody::NotAnObject) => {
                // JSON (numbers past a double's range included), of another type.
                let json = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes);
                prop_assert!(json.is_ok(), "{:?}", json);
                let first = bytes.iter().find(|b| !b" \t\r\n".contains(b));
                prop_assert_ne!(first, Some(&b'{'));
            }
            Err(BadBody::NotJson(_)) => prop_assert!(serde_json::from_slice::<Value>(&bytes).is_err()),
        }
    }

    /// Resource, semaphore and principal names are 1 to 255 bytes without control
    /// characters, taken as given; owners are the same after trimming, and only that.
    #[test]
    fn names_and_owners_are_accepted_exactly_as_the_spec_says(name in name_like()) {
        let resource = Resource::named(name.clone());
        prop_assert!(judged_as_spec_says(&name, &resource), "{:?}: {:?}", name, resource);
        prop_assert!(resource.is_err() || resource.unwrap().as_str() == name);
        let principal = Principal::new(name.clone());
        prop_assert!(judged_as_spec_says(&name, &principal), "{:?}: {:?}", name, principal);
        prop_assert!(principal.is_err() || principal.unwrap().as_str() == name);
        let owner = Owner::new(&name);
        let trimmed = name.trim();
        prop_assert!(judged_as_spec_says(trimmed, &owner), "{:?}: {:?}", name, owner);
        if let Ok(owner) = owner {
            prop_assert_eq!(owner.as_str(), trimmed);
            prop_assert_eq!(owner.to_string(), trimmed);
            prop_assert_eq!(owner.principal(), None);
            prop_assert_eq!(Owner::new(owner.as_str()), Ok(owner));
        }
    }

    /// Every time of the RFC 3339 range is written in UTC with exactly three fraction
    /// digits and `Z`, as the calendar says, and reads back the same.
    #[test]
    fn timestamps_are_written_with_milliseconds_and_read_back(ms in 0..=LAST_RFC3339_MS) {
        let time = Timestamp::from_millis(ms);
        let text = time.to_rfc3339();
        prop_assert_eq!(&text, &calendar(ms));
        prop_assert_eq!(Timestamp::parse_rfc3339(&text), Some(time));
    }

    /// What the client reads as a time (from any text) it writes back in milliseconds, and
    /// reads back the same; a time written as the SPEC writes it reads as the calendar says.
    #[test]
    fn times_read_from_any_text_write_back_in_milliseconds(
        (text, meant) in prop_oneof![
            3 => rfc3339_like(),
            1 => any::<String>().prop_map(|text| (text, None)),
        ]
    ) {
        let read = Timestamp::parse_rfc3339(&text);
        if let Some(ms) = meant {
            prop_assert_eq!(read, Some(Timestamp::from_millis(ms)), "{}", text);
        }
        if let Some(time) = read {
            prop_assert!(time.as_millis() <= LAST_RFC3339_MS);
            prop_assert_eq!(Timestamp::parse_rfc3339(&time.to_rfc3339()), Some(time));
        }
    }

    /// A lease travels as JSON (with its principal if it has one) and reads back the same.
    #[test]
    fn a_lease_travels_as_json_and_reads_back_the_same(
        resource in good_name().prop_filter_map("a resource", |n| Resource::new(n).ok()),
        owner in good_name().prop_filter_map("an owner", |n| Owner::new(&n).ok()),
        principal in proptest::option::of(good_name().prop_filter_map("a principal", |n| Principal::new(n).ok())),
        token in any::<u64>(),
        acquired_at in 0..=LAST_RFC3339_MS,
        expires_at in 0..=LAST_RFC3339_MS,
        hold_until in proptest::option::of(0..=LAST_RFC3339_MS),
    ) {
        let lease = Lease {
            resource,
            owner: owner.of(principal.clone()),
            token: FencingToken(token),
            acquired_at: Timestamp::from_millis(acquired_at),
            expires_at: Timestamp::from_millis(expires_at),
            hold_until: hold_until.map(Timestamp::from_millis),
            lock_delay: std::time::Duration::ZERO,
            meta: None,
        };
        let json = serde_json::to_value(LeaseBody::from(&lease)).unwrap();
        prop_assert_eq!(json.get("principal").is_some(), principal.is_some());
        prop_assert_eq!(json.get("hold_until").is_some(), hold_until.is_some());
        let body: LeaseBody = serde_json::from_value(json).unwrap();
        prop_assert_eq!(Lease::try_from(body), Ok(lease));
    }
}

/// Names that are mostly good ones (few to filter out): no control characters, 1 to 64 of
/// them; or near the rules' edges.
fn good_name() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[^\\x00-\\x1f\\x7f]{1,64}", 1 => name_like()]
}

/// The last millisecond RFC 3339 can write (four-digit years): 9999-12-31T23:59:59.999Z.
const LAST_RFC3339_MS: u64 = 253_402_300_799_999;

/// `ms` after the epoch as RFC 3339 text, from the proleptic Gregorian calendar (the days
/// to a civil date as in H. Hinnant's `civil_from_days`).
fn calendar(ms: u64) -> String {
    let (days, ms) = (ms / 86_400_000, ms % 86_400_000);
    let (year, month, day) = civil_from_days(i64::try_from(days).unwrap());
    let (h, m, s, f) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{f:03}Z")
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Text shaped like RFC 3339 with parts in and out of range, and the milliseconds it means
/// when it is a time the SPEC writes (`Z`, 1970 to 9999, a real date, no leap second) with
/// any number of fraction digits up to nine (the rest truncated).
fn rfc3339_like() -> impl Strategy<Value = (String, Option<u64>)> {
    let date = (1960..=10_000i64, 0..=13i64, 0..=32i64);
    let time = (0..=25i64, 0..=61i64, 0..=61i64);
    let fraction = "(\\.[0-9]{0,10})?";
    let zone = prop::sample::select(vec!["Z", "Z", "Z", "z", "+00:00", "-01:30", ""]);
    (date, time, fraction, zone).prop_map(|((y, mo, d), (h, mi, s), fraction, zone)| {
        let text = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{fraction}{zone}");
        let days = days_from_civil(y, mo, d).filter(|_| {
            (1970..=9999).contains(&y) && h < 24 && mi < 60 && s < 60 && zone == "Z" && fraction.len() <= 10
        });
        let meant = days.map(|days| {
            let digits = fraction.trim_start_matches('.');
            let ms = format!("{digits:0<3}")[..3].parse::<u64>().unwrap();
            let seconds = u64::try_from(days * 86_400 + h * 3600 + mi * 60 + s).unwrap();
            seconds * 1000 + ms
        });
        (text, meant)
    })
}

/// The days from the epoch to a date, if it is one (the inverse of [`civil_from_days`]).
fn days_from_civil(year: i64, month: i64, day: i64) -> Option<i64> {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let length = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month) || day < 1 || day > length[usize::try_from(month - 1).unwrap()] {
        return None;
    }
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}
