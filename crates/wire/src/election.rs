//! Requests and answers of leader election (`/elections/{name}`) as they travel over HTTP.
//!
//! An election is kept as a lock ([`fencelock_core::election`]); these types say it in the
//! election's words: a `candidate` (an owner), a `term` (the fencing token), a `value`.

use std::time::Duration;

use fencelock_core::election::MAX_VALUE_BYTES;
use fencelock_core::model::MAX_NAME_BYTES;
use fencelock_core::{FencingToken, Leadership, Owner, Principal, Resource, Timestamp, Ttl};
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::body::{InvalidLease, TtlFields, millis};
use crate::fields::{self, Limits};

/// A leadership, as written in every answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"name": "scheduler", "leader": "node-2", "value": "10.0.0.2:8080", "term": 41,
    "since": "2026-11-29T06:30:00.123Z", "expires_at": "2026-11-29T06:30:30.123Z"}))]
pub struct LeadershipBody {
    /// The election.
    pub name: String,
    /// The candidate that leads it.
    pub leader: String,
    /// The principal the leader authenticated as, on a server with authentication (absent
    /// without): only it may proclaim, renew or resign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// What the leader says (at most 1,024 bytes), or `null`.
    pub value: Option<String>,
    /// The term: the fencing token of this leadership, greater than every term of the
    /// election before. Pass it to what the leader writes to.
    pub term: u64,
    /// When the leader won this term (RFC 3339, UTC, milliseconds).
    pub since: String,
    /// When the leadership ends unless renewed (RFC 3339, UTC, milliseconds).
    pub expires_at: String,
}

impl From<&Leadership> for LeadershipBody {
    fn from(leadership: &Leadership) -> Self {
        Self {
            name: leadership.name.to_string(),
            leader: leadership.leader.to_string(),
            principal: leadership.leader.principal().map(|p| p.as_str().to_owned()),
            value: leadership.value.clone(),
            term: leadership.term.0,
            since: leadership.since.to_rfc3339(),
            expires_at: leadership.expires_at.to_rfc3339(),
        }
    }
}

impl TryFrom<LeadershipBody> for Leadership {
    type Error = InvalidLease;

    fn try_from(body: LeadershipBody) -> Result<Self, InvalidLease> {
        let time = |text: String| Timestamp::parse_rfc3339(&text).ok_or(InvalidLease::Timestamp(text));
        Ok(Leadership {
            name: Resource::named(body.name)?,
            leader: Owner::new(&body.leader)?.of(body.principal.map(Principal::new).transpose()?),
            value: body.value,
            term: FencingToken(body.term),
            since: time(body.since)?,
            expires_at: time(body.expires_at)?,
        })
    }
}

/// `POST /elections/{name}`: campaign. Exactly one of `ttl_seconds` and `ttl_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignBody {
    /// Who campaigns.
    pub candidate: String,
    /// What it says once it leads (none if absent); the leader campaigning again replaces
    /// its value with one sent, and keeps it if none is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// How long the leadership lasts unless renewed.
    #[serde(flatten)]
    pub ttl: TtlFields,
    /// How long to wait while another candidate leads (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

impl CampaignBody {
    /// The campaign of `candidate` for `ttl` with `value`, waiting up to `wait` (none if
    /// zero).
    pub fn new(candidate: &Owner, value: Option<&str>, ttl: Ttl, wait: Duration) -> Self {
        Self {
            candidate: candidate.to_string(),
            value: value.map(str::to_owned),
            ttl: TtlFields::ms(ttl.as_millis()),
            wait_ms: (!wait.is_zero()).then(|| millis(wait)),
        }
    }
}

/// `POST /elections/{name}/proclaim`: the leader changes its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProclaimBody {
    /// The leader.
    pub candidate: String,
    /// Its term: the value changes only if this is the current one (else 409).
    pub term: u64,
    /// The new value.
    pub value: String,
}

impl ProclaimBody {
    /// The proclamation of `value` by `candidate` in `term`.
    pub fn new(candidate: &Owner, term: FencingToken, value: &str) -> Self {
        Self {
            candidate: candidate.to_string(),
            term: term.0,
            value: value.to_owned(),
        }
    }
}

/// `POST /elections/{name}/renew`: the leader renews. Exactly one of `ttl_seconds` and
/// `ttl_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionRenewBody {
    /// The leader.
    pub candidate: String,
    /// Its term: renewed only if this is the current one (else 409).
    pub term: u64,
    /// The new TTL, from now.
    #[serde(flatten)]
    pub ttl: TtlFields,
}

impl ElectionRenewBody {
    /// The renewal by `candidate` of `term` for `ttl` from now.
    pub fn new(candidate: &Owner, term: FencingToken, ttl: Ttl) -> Self {
        Self {
            candidate: candidate.to_string(),
            term: term.0,
            ttl: TtlFields::ms(ttl.as_millis()),
        }
    }
}

/// `DELETE /elections/{name}`: the leader resigns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResignBody {
    /// The leader.
    pub candidate: String,
    /// Its term: it resigns only if this is the current one (else 409).
    pub term: u64,
}

impl ResignBody {
    /// The resignation of `candidate` from `term`.
    pub fn new(candidate: &Owner, term: FencingToken) -> Self {
        Self {
            candidate: candidate.to_string(),
            term: term.0,
        }
    }
}

/// The answer to a campaign: who leads now — the candidate (`elected: true`) or another
/// (`elected: false`) — or, with nobody leading, why the candidate did not win; or, from a
/// server shutting down, nothing known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum CampaignResponse {
    /// `{"elected": true|false, "leadership": LEADERSHIP}`.
    Campaigned(CampaignedBody),
    /// `{"elected": false, "name": "...", "retry_after_ms": N}`: nobody leads, but the last
    /// leadership expired without a resignation less than the server's lock-delay ago.
    Delayed(CampaignDelayed),
    /// `{"elected": false, "name": "...", "shutting_down": true}`.
    Stopped(CampaignStopped),
}

/// The election has a leader: the candidate, or another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CampaignedBody {
    /// `true` if the candidate leads (newly elected, or its leadership extended: same term).
    pub elected: bool,
    /// The leadership: the candidate's, or the current leader's.
    pub leadership: LeadershipBody,
}

/// Nobody leads, but the election stays closed for the server's lock-delay after a
/// leadership expired without a resignation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CampaignDelayed {
    /// Always `false`.
    pub elected: bool,
    /// The election.
    pub name: String,
    /// How long, in milliseconds, until a candidate may win.
    pub retry_after_ms: u64,
}

/// The server is shutting down and stopped waiting for its store: the candidate does not
/// know whether it leads. Campaign again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CampaignStopped {
    /// Always `false`.
    pub elected: bool,
    /// The election.
    pub name: String,
    /// Always `true`.
    pub shutting_down: bool,
}

/// The OpenAPI description of an election request: `candidate` and what `more` adds.
fn election_schema(description: &str, more: impl FnOnce(ObjectBuilder) -> ObjectBuilder) -> RefOr<Schema> {
    more(
        ObjectBuilder::new()
            .description(Some(description))
            .property(
                fields::CANDIDATE,
                fields::owner_schema(&format!(
                    "The candidate (an owner); trimmed of white space, 1 to {MAX_NAME_BYTES} bytes, no control characters."
                )),
            )
            .required(fields::CANDIDATE),
    )
    .into()
}

/// `object` with a required `term`.
fn with_term(object: ObjectBuilder, what: &str) -> ObjectBuilder {
    object
        .property(
            fields::TERM,
            fields::integer_schema(
                &format!("The leader's term: the {what} happens only if it is the current one (else 409)."),
                fields::TOKEN_RANGE,
            ),
        )
        .required(fields::TERM)
}

/// The schema of `value`.
fn value_schema(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(format!(
            "{description} At most {MAX_VALUE_BYTES} bytes of UTF-8."
        )))
}

/// `object` with the two TTL fields, exactly one required.
fn with_ttl(object: ObjectBuilder, what: &str) -> ObjectBuilder {
    let limits = Limits::default();
    crate::body::exactly_one_ttl(
        object
            .property(
                fields::TTL_SECONDS,
                fields::integer_schema(
                    &fields::with_default(
                        &format!("{what}, in whole seconds, 1 to the server's maximum"),
                        limits.ttl_seconds(),
                    ),
                    limits.ttl_seconds(),
                ),
            )
            .property(
                fields::TTL_MS,
                fields::integer_schema(
                    &fields::with_default(
                        &format!("{what}, in whole milliseconds, 1 to the server's maximum"),
                        limits.ttl_ms(),
                    ),
                    limits.ttl_ms(),
                ),
            ),
    )
}

impl PartialSchema for CampaignBody {
    fn schema() -> RefOr<Schema> {
        let limits = Limits::default();
        election_schema(
            "`POST /elections/{name}`: campaign. Exactly one of `ttl_seconds` and `ttl_ms`.",
            |object| {
                with_ttl(object, "How long the leadership lasts unless renewed")
                    .property(
                        fields::VALUE,
                        value_schema(
                            "What the candidate says once it leads (e.g. its address). The leader campaigning again replaces its value with one sent and keeps it if none is. Default: none (`null`).",
                        ),
                    )
                    .property(
                        fields::WAIT_MS,
                        fields::integer_schema(
                            &(fields::with_default(
                                "If another candidate leads, wait up to this long (first come, first served), 0 to the server's maximum",
                                limits.wait_ms(),
                            ) + " Default 0."),
                            limits.wait_ms(),
                        ),
                    )
            },
        )
    }
}

impl PartialSchema for ProclaimBody {
    fn schema() -> RefOr<Schema> {
        election_schema(
            "`POST /elections/{name}/proclaim`: the leader changes its value.",
            |object| {
                with_term(object, "change")
                    .property(fields::VALUE, value_schema("The new value."))
                    .required(fields::VALUE)
            },
        )
    }
}

impl PartialSchema for ElectionRenewBody {
    fn schema() -> RefOr<Schema> {
        election_schema(
            "`POST /elections/{name}/renew`: the leader renews. Exactly one of `ttl_seconds` and `ttl_ms`.",
            |object| with_ttl(with_term(object, "renewal"), "The new TTL from now"),
        )
    }
}

impl PartialSchema for ResignBody {
    fn schema() -> RefOr<Schema> {
        election_schema("`DELETE /elections/{name}`: the leader resigns.", |object| {
            with_term(object, "resignation")
        })
    }
}

crate::body::named_schema!(CampaignBody, ProclaimBody, ElectionRenewBody, ResignBody);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_leadership_reads_back_as_it_was_written() {
        let leadership = Leadership {
            name: Resource::named("db").unwrap(),
            leader: Owner::new("a").unwrap().of(Some(Principal::new("ops").unwrap())),
            value: Some("10.0.0.1".into()),
            term: FencingToken(9),
            since: Timestamp::from_millis(1_000),
            expires_at: Timestamp::from_millis(2_000),
        };
        let body = LeadershipBody::from(&leadership);
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"name": "db", "leader": "a", "principal": "ops", "value": "10.0.0.1", "term": 9,
                "since": "1970-01-01T00:00:01.000Z", "expires_at": "1970-01-01T00:00:02.000Z"})
        );
        assert_eq!(Leadership::try_from(body).unwrap(), leadership);
    }

    #[test]
    fn the_answers_of_a_campaign_tell_themselves_apart() {
        let read = |value| serde_json::from_value::<CampaignResponse>(value).unwrap();
        let leadership = json!({"name": "db", "leader": "a", "value": null, "term": 1,
            "since": "1970-01-01T00:00:01.000Z", "expires_at": "1970-01-01T00:00:02.000Z"});
        assert!(matches!(
            read(json!({"elected": true, "leadership": leadership})),
            CampaignResponse::Campaigned(CampaignedBody { elected: true, .. })
        ));
        assert!(matches!(
            read(json!({"elected": false, "name": "db", "retry_after_ms": 5})),
            CampaignResponse::Delayed(_)
        ));
        assert!(matches!(
            read(json!({"elected": false, "name": "db", "shutting_down": true})),
            CampaignResponse::Stopped(_)
        ));
    }
}
