//! [`ApiError`]: every way a request can fail, turned into RFC 9457 problems in one place.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fencelock_core::StoreError;
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
    /// The store failed: 503, nothing was done.
    Store(StoreError),
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

/// A problem waiting for [`render_problems`] to add the request's path as `instance`.
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
            Self::Store(error) => {
                tracing::warn!(%error, "store failed");
                Problem::new(ProblemKind::Unavailable, error.to_string(), "")
            }
        };
        let mut response = StatusCode::from_u16(problem.status)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response();
        response.extensions_mut().insert(PendingProblem(problem));
        response
    }
}

/// Middleware: writes every pending problem as `application/problem+json` with the request's
/// path as `instance`. Answers that may leave part of a request body unread carry
/// `Connection: close`, so the next request on the connection cannot be misread.
pub async fn render_problems(request: Request, next: Next) -> Response {
    let instance = request.uri().path().to_owned();
    let mut response = next.run(request).await;
    let Some(PendingProblem(mut problem)) = response.extensions_mut().remove::<PendingProblem>() else {
        return response;
    };
    problem.instance = instance;
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let closes = matches!(problem.status, 408 | 413 | 415);
    let status = response.status();
    let mut response = (status, body).into_response();
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
