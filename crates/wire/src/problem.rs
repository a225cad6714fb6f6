//! RFC 9457 problems, and [`ProblemKind`]: the one place where an outcome becomes an HTTP
//! status (the server reads it one way, the client the other).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Every kind of problem the API answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProblemKind {
    /// 400: the body is not JSON, or not a JSON object.
    BadRequest,
    /// 401: no bearer token, or one the server does not know (with `WWW-Authenticate`).
    Unauthorized,
    /// 403: a live lease of another owner.
    Forbidden,
    /// 403: the caller's principal has no grant of the right this request needs on this
    /// name. Says nothing of whether the name is held.
    Denied,
    /// 404: no live lease.
    NotFound,
    /// 404: the path is no route of the API.
    NoRoute,
    /// 405: the route does not take this method.
    MethodNotAllowed,
    /// 408: the client was too slow sending its request.
    RequestTimeout,
    /// 409: the fencing token given is not the current lease's.
    Conflict,
    /// 409: a semaphore's live permits carry another limit than the one asked for; the
    /// problem's `limit` member gives theirs.
    LimitMismatch,
    /// 409: waiting for this would close a cycle of owners that wait for each other; the
    /// `detail` names the cycle. Nothing was acquired, and nothing the caller held released.
    Deadlock,
    /// 413: the body is over the limit.
    PayloadTooLarge,
    /// 415: the body is not `application/json`.
    UnsupportedMediaType,
    /// 422: one or more fields are invalid; see `errors`.
    InvalidFields,
    /// 429: the caller's principal sent more requests than its rate allows (with
    /// `Retry-After`).
    TooManyRequests,
    /// 500: a bug in the server. Never meant to be sent.
    Internal,
    /// 503: the store is unreachable or failing. The outcome is unknown: a call that timed out
    /// may still have been applied, so read the lease before retrying.
    Unavailable,
}

impl ProblemKind {
    /// Every kind; where two share a status, the first is the one [`Self::from_status`]
    /// reads.
    const ALL: [ProblemKind; 17] = [
        Self::BadRequest,
        Self::Unauthorized,
        Self::Forbidden,
        Self::Denied,
        Self::NotFound,
        Self::NoRoute,
        Self::MethodNotAllowed,
        Self::RequestTimeout,
        Self::Conflict,
        Self::LimitMismatch,
        Self::Deadlock,
        Self::PayloadTooLarge,
        Self::UnsupportedMediaType,
        Self::InvalidFields,
        Self::TooManyRequests,
        Self::Internal,
        Self::Unavailable,
    ];

    /// The HTTP status code.
    pub fn status(self) -> u16 {
        match self {
            Self::BadRequest => 400,
            Self::Unauthorized => 401,
            Self::Forbidden | Self::Denied => 403,
            Self::NotFound | Self::NoRoute => 404,
            Self::MethodNotAllowed => 405,
            Self::RequestTimeout => 408,
            Self::Conflict | Self::LimitMismatch | Self::Deadlock => 409,
            Self::PayloadTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::InvalidFields => 422,
            Self::TooManyRequests => 429,
            Self::Internal => 500,
            Self::Unavailable => 503,
        }
    }

    /// The kind for a status code, as a client reads it. 409 reads as [`Self::Conflict`]:
    /// only acquires answer [`Self::LimitMismatch`] (a semaphore's) and [`Self::Deadlock`],
    /// which a client tells by the problem's type ([`Self::from_type_uri`]). 403 reads as [`Self::Forbidden`]; a
    /// missing right ([`Self::Denied`]) is told by its type likewise, and 404 as
    /// [`Self::NotFound`], a path that is no route ([`Self::NoRoute`]) by its type.
    pub fn from_status(status: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.status() == status)
    }

    /// The kind for a problem's `type` URI.
    pub fn from_type_uri(uri: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.type_uri() == uri)
    }

    /// The problem's `type` URI.
    pub fn type_uri(self) -> String {
        format!("urn:fencelock:problem:{}", self.slug())
    }

    fn slug(self) -> &'static str {
        match self {
            Self::BadRequest => "bad-request",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::Denied => "denied",
            Self::NotFound => "not-found",
            Self::NoRoute => "no-route",
            Self::MethodNotAllowed => "method-not-allowed",
            Self::RequestTimeout => "request-timeout",
            Self::Conflict => "conflict",
            Self::LimitMismatch => "limit-mismatch",
            Self::Deadlock => "deadlock",
            Self::PayloadTooLarge => "payload-too-large",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::InvalidFields => "invalid-fields",
            Self::TooManyRequests => "too-many-requests",
            Self::Internal => "internal",
            Self::Unavailable => "store-unavailable",
        }
    }

    /// The problem's `title`: the same for every problem of a kind.
    pub fn title(self) -> &'static str {
        match self {
            Self::BadRequest => "The body is not a JSON object.",
            Self::Unauthorized => "A valid bearer token is required.",
            Self::Forbidden => "The lock is held by another owner.",
            Self::Denied => "The caller has no right to do this on this name.",
            Self::NotFound => "No live lock.",
            Self::NoRoute => "No such route.",
            Self::MethodNotAllowed => "Method not allowed.",
            Self::RequestTimeout => "The request was not received in time.",
            Self::Conflict => "The fencing token is not the current lease's.",
            Self::LimitMismatch => "The semaphore's live permits have another limit.",
            Self::Deadlock => "Deadlock",
            Self::PayloadTooLarge => "The body is too large.",
            Self::UnsupportedMediaType => "The body must be application/json.",
            Self::InvalidFields => "Invalid fields.",
            Self::TooManyRequests => "Too many requests.",
            Self::Internal => "Internal error.",
            Self::Unavailable => "The lock store is unavailable.",
        }
    }
}

/// One invalid field of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FieldError {
    /// The field: a body member (`owner`, `ttl_seconds`, …), `resource` for the path, or a
    /// query parameter (`limit`, `cursor`, `prefix`).
    pub field: String,
    /// What is wrong, e.g. `must be a JSON integer >= 1`.
    pub message: String,
}

impl FieldError {
    /// A field error.
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// An RFC 9457 `application/problem+json` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem, e.g. `urn:fencelock:problem:forbidden`.
    #[serde(rename = "type")]
    pub type_uri: String,
    /// A short summary, the same for every problem of a kind.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What happened this time.
    pub detail: String,
    /// The request path.
    pub instance: String,
    /// For 422: every invalid field.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub errors: Option<Vec<FieldError>>,
    /// For a limit mismatch: the limit of the semaphore's live permits.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub limit: Option<u32>,
}

impl Problem {
    /// A problem of `kind` about `instance`.
    pub fn new(kind: ProblemKind, detail: impl Into<String>, instance: impl Into<String>) -> Self {
        Self {
            type_uri: kind.type_uri(),
            title: kind.title().to_owned(),
            status: kind.status(),
            detail: detail.into(),
            instance: instance.into(),
            errors: None,
            limit: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_its_type_and_all_but_four_through_its_status() {
        let shared = [
            ProblemKind::LimitMismatch,
            ProblemKind::Deadlock,
            ProblemKind::Denied,
            ProblemKind::NoRoute,
        ];
        for kind in ProblemKind::ALL {
            assert_eq!(ProblemKind::from_type_uri(&kind.type_uri()), Some(kind));
            if !shared.contains(&kind) {
                assert_eq!(ProblemKind::from_status(kind.status()), Some(kind));
            }
        }
        assert_eq!(ProblemKind::from_status(409), Some(ProblemKind::Conflict));
        assert_eq!(ProblemKind::from_status(403), Some(ProblemKind::Forbidden));
        assert_eq!(ProblemKind::from_status(404), Some(ProblemKind::NotFound));
        assert_eq!(
            (ProblemKind::NoRoute.type_uri(), ProblemKind::NoRoute.title()),
            ("urn:fencelock:problem:no-route".to_owned(), "No such route.")
        );
        assert!(ProblemKind::LimitMismatch.type_uri().ends_with("limit-mismatch"));
        assert_eq!(ProblemKind::Deadlock.type_uri(), "urn:fencelock:problem:deadlock");
        assert_eq!(
            (ProblemKind::Deadlock.status(), ProblemKind::Deadlock.title()),
            (409, "Deadlock")
        );
        assert_eq!(ProblemKind::from_status(200), None);
        assert_eq!(ProblemKind::from_type_uri("urn:fencelock:problem:nope"), None);
    }

    #[test]
    fn a_problem_serializes_as_rfc_9457() {
        let mut problem = Problem::new(ProblemKind::InvalidFields, "bad", "/locks/x");
        problem.errors = Some(vec![FieldError::new("owner", "is required")]);
        let json = serde_json::to_value(&problem).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"type": "urn:fencelock:problem:invalid-fields", "title": "Invalid fields.",
                "status": 422, "detail": "bad", "instance": "/locks/x",
                "errors": [{"field": "owner", "message": "is required"}]})
        );
    }
}
