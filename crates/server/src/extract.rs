//! Reading requests: the name from the raw path (a lock's resource, a semaphore's or a
//! read-write lock's name), and a JSON object body, with every check the SPEC asks for
//! (content type, size, read time, JSON, object) done here once.

use std::error::Error as _;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{Uri, header};
use fencelock_core::{HoldKind, Resource};
use fencelock_wire::{FieldError, ProblemKind, hold, parse};
use serde_json::{Map, Value};

use crate::problem::ApiError;
use crate::state::App;

/// The resource of a `/locks/{resource}…` path, decoded from the raw (percent-encoded)
/// segment right after `/locks/`. Router parameters are not used because they decode before
/// we can tell a malformed escape or invalid UTF-8 apart from a valid name.
pub fn resource(uri: &Uri) -> Result<Resource, FieldError> {
    parse::resource(segment_after(uri, "/locks"))
}

/// The name of a `/semaphores/{name}…` or `/rwlocks/{name}…` path (as `kind` says), decoded
/// from the raw segment right after the collection as [`resource`] decodes a lock's (so
/// `POST /semaphores/renew` acquires the semaphore named `renew`). Errors name the field
/// `name`.
pub fn hold_name(kind: HoldKind, uri: &Uri) -> Result<Resource, FieldError> {
    parse::name(segment_after(uri, hold::collection(kind)))
}

/// The raw path segment after `collection` and a `/`; empty if there is none.
fn segment_after<'a>(uri: &'a Uri, collection: &str) -> &'a str {
    let rest = uri
        .path()
        .strip_prefix(collection)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or_default();
    rest.split('/').next().unwrap_or_default()
}

/// Combines a checked name from the path (a resource, or an election's name and lock) and a
/// checked body, listing every bad field of both.
pub fn both<N, T>(name: Result<N, FieldError>, body: Result<T, Vec<FieldError>>) -> Result<(N, T), ApiError> {
    match (name, body) {
        (Ok(name), Ok(body)) => Ok((name, body)),
        (name, body) => {
            let mut errors: Vec<FieldError> = name.err().into_iter().collect();
            errors.extend(body.err().unwrap_or_default());
            Err(ApiError::Invalid(errors))
        }
    }
}

/// A request body that is a JSON object.
#[derive(Debug)]
pub struct JsonObject(pub Map<String, Value>);

impl FromRequest<App> for JsonObject {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &App) -> Result<Self, ApiError> {
        let JsonBody(bytes) = JsonBody::from_request(request, app).await?;
        parse::object(&bytes).map(Self).map_err(bad_body)
    }
}

/// The 400 of a body that is not a JSON object.
pub fn bad_body(error: parse::BadBody) -> ApiError {
    ApiError::Problem(ProblemKind::BadRequest, error.to_string())
}

/// A request body sent as JSON, read within the server's size and time, not parsed yet: for
/// a route that reads it field by field (an acquire) instead of as a [`JsonObject`].
#[derive(Debug)]
pub struct JsonBody(pub Bytes);

impl FromRequest<App> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &App) -> Result<Self, ApiError> {
        let problem = |kind, detail: String| ApiError::Problem(kind, detail);
        if !is_json(request.headers().get(header::CONTENT_TYPE)) {
            return Err(problem(
                ProblemKind::UnsupportedMediaType,
                "send the body as Content-Type: application/json".into(),
            ));
        }
        let limit = app.config.max_body_bytes;
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let too_large = || {
            problem(
                ProblemKind::PayloadTooLarge,
                format!("the body is over {limit} bytes"),
            )
        };
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(too_large());
        }
        let read = axum::body::to_bytes(request.into_body(), limit);
        let bytes = match tokio::time::timeout(app.config.body_read_timeout, read).await {
            Err(_) => {
                return Err(problem(
                    ProblemKind::RequestTimeout,
                    "the body did not arrive in time".into(),
                ));
            }
            Ok(Err(e)) if is_length_limit(&e) => return Err(too_large()),
            Ok(Err(e)) => {
                return Err(problem(
                    ProblemKind::BadRequest,
                    format!("cannot read the body: {e}"),
                ));
            }
            Ok(Ok(bytes)) => bytes,
        };
        Ok(Self(bytes))
    }
}

/// `application/json`, with any parameters (`; charset=utf-8`), in any letter case.
fn is_json(content_type: Option<&header::HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

fn is_length_limit(error: &axum::Error) -> bool {
    let mut source = error.source();
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_that_are_json() {
        let ok = [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
        ];
        for v in ok {
            assert!(is_json(Some(&header::HeaderValue::from_static(v))), "{v}");
        }
        for v in [
            "text/plain",
            "application/jsonx",
            "application/x-www-form-urlencoded",
            "",
        ] {
            assert!(!is_json(Some(&header::HeaderValue::from_static(v))), "{v}");
        }
        assert!(!is_json(None));
    }

    #[test]
    fn the_resource_is_the_segment_after_locks() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        assert_eq!(
            resource(&uri("/locks/payment%3A42")).unwrap().as_str(),
            "payment:42"
        );
        assert_eq!(resource(&uri("/locks/a%2Fb/renew")).unwrap().as_str(), "a/b");
        assert_eq!(resource(&uri("/locks/renew")).unwrap().as_str(), "renew");
        assert_eq!(resource(&uri("/locks/")).unwrap_err().field, "resource");
        assert_eq!(resource(&uri("/locks/%ZZ")).unwrap_err().field, "resource");
    }

    #[test]
    fn the_name_is_the_segment_after_the_kinds_collection() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        let semaphore = |path| hold_name(HoldKind::Semaphore, &uri(path));
        let rwlock = |path| hold_name(HoldKind::RwLock, &uri(path));
        assert_eq!(semaphore("/semaphores/gpu%3A1").unwrap().as_str(), "gpu:1");
        assert_eq!(semaphore("/semaphores/a%2Fb/renew").unwrap().as_str(), "a/b");
        assert_eq!(semaphore("/semaphores/renew").unwrap().as_str(), "renew");
        assert_eq!(rwlock("/rwlocks/renew/renew").unwrap().as_str(), "renew");
        assert_eq!(semaphore("/semaphores/").unwrap_err().field, "name");
        assert_eq!(rwlock("/rwlocks/%FF").unwrap_err().field, "name");
    }
}
