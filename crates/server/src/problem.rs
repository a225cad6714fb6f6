//! [`ApiError`]: every way a request can fail, turned into RFC 9457 problems in one place.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use fencelock_core::{Deadlock, StoreError};
use fencelock_wire::{FieldError, Problem, ProblemKind};

/// Why a request was not served.
#[derive(Debug)]
pub enum ApiError {
    /// A problem of a kind with a detail for people.
    Problem(ProblemKind, String),
    /// 422: every invalid field.
    Invalid(Vec<FieldError>),
    /// A problem the wire types built, with its extension members (e.g. a limit mismatch's
    /// `limit`); its `instance` is filled in as every problem's.
    Built(Box<Problem>),
    /// The store failed: 503, nothing was done; or its waiters refused a wait that would
    /// have closed a cycle: 409 `deadlock`, naming it.
    Store(StoreError),
    /// 401: no bearer token (`token_sent` false), or one no principal has.
    Unauthenticated {
        /// Whether a token was sent (and is unknown), as `WWW-Authenticate` tells the client.
        token_sent: bool,
    },
    /// 429: the caller's rate is used up; one more request is allowed after this long.
    RateLimited(Duration),
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        Self::Store(error)
    }
}

impl From<Vec<FieldError>> for ApiError {
    fn from(errors: Vec<FieldError>) -> Self {
        Self::Invalid(errors)
    }
}

/// A problem waiting for [`render_problem`] to add the request's path as `instance`.
#[derive(Debug, Clone)]
struct PendingProblem(Problem);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = match self {
            Self::Problem(kind, detail) => Problem::new(kind, detail, ""),
            Self::Built(problem) => *problem,
            Self::Invalid(errors) => {
                let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
                let detail = format!("invalid: {}", fields.join(", "));
                let mut problem = Problem::new(ProblemKind::InvalidFields, detail, "");
                problem.errors = Some(errors);
                problem
            }
            Self::Store(StoreError::Invalid(detail)) => Problem::new(ProblemKind::InvalidFields, detail, ""),
            // Logged where it was found (target `fencelock::deadlock`), with who waits for what.
            // A route tells the caller the names it may read (`Caller::told`); one that did
            // not would tell no name at all rather than one the caller may not read.
            Self::Store(StoreError::Deadlock(deadlock)) => {
                let detail = match deadlock {
                    Deadlock::Found(cycle) => cycle.describe(|_| false),
                    Deadlock::Told(text) => text,
                };
                Problem::new(ProblemKind::Deadlock, detail, "")
            }
            Self::Store(error) => {
                tracing::warn!(%error, "store failed");
                Problem::new(ProblemKind::Unavailable, error.to_string(), "")
            }
            Self::Unauthenticated { token_sent } => return unauthenticated(token_sent),
            Self::RateLimited(wait) => return rate_limited(wait),
        };
        pending(problem)
    }
}

/// The answer for `problem`, rendered by [`render_problem`].
fn pending(problem: Problem) -> Response {
    let mut response = StatusCode::from_u16(problem.status)
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        .into_response();
    response.extensions_mut().insert(PendingProblem(problem));
    response
}

/// 401 with the challenge of RFC 6750: `error="invalid_token"` when a token was sent.
fn unauthenticated(token_sent: bool) -> Response {
    let (detail, challenge) = if token_sent {
        (
            "the bearer token is not one of this server's",
            r#"Bearer realm="fencelock", error="invalid_token""#,
        )
    } else {
        (
            "this server needs a bearer token: send Authorization: Bearer TOKEN",
            r#"Bearer realm="fencelock""#,
        )
    };
    let mut response = pending(Problem::new(ProblemKind::Unauthorized, detail, ""));
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    response
}

/// 429 with `Retry-After` in whole seconds, at least one (the header has no fractions, and
/// 0 would invite a retry at once).
fn rate_limited(wait: Duration) -> Response {
    let seconds = wait.as_millis().div_ceil(1000).max(1);
    let detail = format!("over the request rate of this principal: retry in {seconds} s");
    let mut response = pending(Problem::new(ProblemKind::TooManyRequests, detail, ""));
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(u64::try_from(seconds).unwrap_or(u64::MAX)),
    );
    response
}

/// Writes the answer's pending problem, if it has one, as `application/problem+json` with
/// `instance` (the request's path), keeping the headers it came with (`WWW-Authenticate`,
/// `Retry-After`), and leaves its [`ProblemKind`] in the answer's extensions for the metrics.
/// Answers that may leave part of a request body unread carry `Connection: close`, so the
/// next request on the connection cannot be misread.
pub fn render_problem(instance: &str, response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let Some(PendingProblem(mut problem)) = parts.extensions.remove::<PendingProblem>() else {
        return Response::from_parts(parts, body);
    };
    if let Some(kind) = ProblemKind::from_type_uri(&problem.type_uri) {
        parts.extensions.insert(kind);
    }
    problem.instance = instance.to_owned();
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let closes = matches!(problem.status, 408 | 413 | 415);
    let mut response = Response::from_parts(parts, Body::from(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if closes {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
