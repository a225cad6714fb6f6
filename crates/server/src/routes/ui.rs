//! `GET /ui` and `GET /ui/{asset}`: the dashboard — plain HTML, CSS and JavaScript modules
//! built into the binary (no CDN, no separate web server: it works offline), which read the
//! API as any client does, with the caller's token.
//!
//! The pages hold no data, so they need no token; every request the page makes for data
//! carries one. Every answer under `/ui` (a 404 too) carries a strict Content-Security-Policy:
//! only this server's scripts, styles and API, no inline script or style, no framing — so
//! that a name or a lease's metadata shown on the page can never run as code.

use std::sync::LazyLock;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fencelock_wire::{Problem, ProblemKind};
use sha2::{Digest, Sha256};

use crate::problem::ApiError;

/// The policy of every answer under `/ui`.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// A file of the dashboard, as built into the binary.
struct Asset {
    /// Its name under `/ui/` (the page itself: the empty name, served at `/ui`).
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// The [`Asset`] of `crates/server/ui/FILE`, served as `NAME` with `TYPE`.
macro_rules! asset {
    ($name:literal, $file:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("../../ui/", $file)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the dashboard (`crates/server/ui/`).
const ASSETS: [Asset; 8] = [
    asset!("", "index.html", "text/html; charset=utf-8"),
    asset!("app.css", "app.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "icon.svg", "image/svg+xml"),
    asset!("app.js", "app.js", JS),
    asset!("api.js", "api.js", JS),
    asset!("live.js", "live.js", JS),
    asset!("tables.js", "tables.js", JS),
    asset!("charts.js", "charts.js", JS),
];

/// The entity tag of each asset, in the order of [`ASSETS`]: the start of its SHA-256, so
/// that a browser revalidates cheaply and a new binary's files are never taken for old ones.
static ETAGS: LazyLock<Vec<HeaderValue>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|asset| {
            let digest = Sha256::digest(asset.body);
            let hex: String = digest[..12].iter().map(|byte| format!("{byte:02x}")).collect();
            // Hex digits between quotes: always a valid header value.
            HeaderValue::from_str(&format!("\"{hex}\"")).unwrap_or(HeaderValue::from_static("\"\""))
        })
        .collect()
});

/// The dashboard: live tables of locks, semaphores and read-write locks, each name's history
/// and waiters, charts of the metrics, force-release for an administrator.
///
/// Needs no token: the page holds no data, and asks for a token (with `--auth`) to read the
/// API. Every answer under `/ui` carries a strict Content-Security-Policy.
#[utoipa::path(get, path = "/ui", tag = "operations",
    responses(
        (status = 200, description = "The page", body = String, content_type = "text/html"),
        (status = 304, description = "The browser's copy is current (`If-None-Match`)"),
    ))]
pub async fn page(headers: HeaderMap) -> Response {
    serve(0, &headers)
}

/// `/ui/`, as a browser or a person may write it: a permanent redirect to the page's one
/// address, `/ui` (with the security headers, as every answer under `/ui`).
pub async fn to_page() -> Response {
    (
        StatusCode::PERMANENT_REDIRECT,
        [(header::LOCATION, HeaderValue::from_static("/ui"))],
    )
        .into_response()
}

/// A file of the dashboard: a script, the style sheet or the icon.
#[utoipa::path(get, path = "/ui/{asset}", tag = "operations",
    params(("asset" = String, Path, description = "The file's name, e.g. `app.js`")),
    responses(
        (status = 200, description = "The file, with its content type", body = String),
        (status = 304, description = "The browser's copy is current (`If-None-Match`)"),
        (status = 404, description = "No such file", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn asset(uri: Uri, headers: HeaderMap) -> Response {
    let name = uri.path().strip_prefix("/ui/").unwrap_or_default();
    match ASSETS
        .iter()
        .position(|asset| !asset.name.is_empty() && asset.name == name)
    {
        Some(index) => serve(index, &headers),
        None => ApiError::Problem(
            ProblemKind::NoRoute,
            format!("no such file of the dashboard: {name}"),
        )
        .into_response(),
    }
}

/// The asset at `index` of [`ASSETS`], or 304 if the browser has it already.
fn serve(index: usize, request: &HeaderMap) -> Response {
    let asset = &ASSETS[index];
    let etag = ETAGS[index].clone();
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag || tag.trim() == "*"));
    // `no-cache`: the browser keeps the files but asks each time (a 304 when unchanged), so
    // a new binary's dashboard is seen at the next load.
    let cache = [
        (header::ETAG, etag),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    if fresh {
        return (StatusCode::NOT_MODIFIED, cache).into_response();
    }
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type))],
        cache,
        asset.body,
    )
        .into_response()
}

/// Middleware of the routes under `/ui`: the security headers on every answer, the 404s
/// and 304s included.
pub(super) async fn guard(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let fixed: [(HeaderName, &'static str); 3] = [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
