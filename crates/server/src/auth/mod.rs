//! Who may do what: bearer tokens, principals and their rights per name prefix, and the
//! request rate of each principal.
//!
//! [`authenticate`] runs before every route of the API (not `/healthz`, `/readyz`,
//! `/metrics`, `/openapi.json`): it finds the [`Caller`] from the `Authorization` header
//! (401 if there is none or nobody has that token), takes one request from its rate (429),
//! and hands it to the route, which asks [`Caller::may`] for the right its operation needs
//! on the name (403) and makes the caller's owner [`Caller::owns`] (so that the lease
//! belongs to its principal). Without an authentication file, the caller is
//! [`Caller::Anyone`], who has every right.
//!
//! Nothing here logs a token, or lets one reach a log line: the header is read here and
//! nowhere else, and [`Identity`]'s `Debug` leaves out its hash.

mod file;
mod rate;

use std::sync::{Arc, PoisonError, RwLock};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fencelock_core::{Deadlock, Owner, Principal, Resource, StoreError};
use fencelock_wire::ProblemKind;
use tokio::time::Instant;

pub use file::{AuthFile, AuthFileError, Grant, Identity, Right, token_sha256};
pub use rate::{Limiter, RateLimit};

use crate::problem::ApiError;

/// The authentication file in force, swapped whole when it is read again (on SIGHUP): a
/// request sees the old file or the new one, never a mix.
#[derive(Clone)]
pub struct Keyring {
    current: Arc<RwLock<Arc<AuthFile>>>,
}

impl Keyring {
    /// A keyring holding `file`.
    pub fn new(file: AuthFile) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(file))),
        }
    }

    /// Puts `file` in force from the next request on.
    pub fn replace(&self, file: AuthFile) {
        // Held only to swap an `Arc`, never across an `.await`.
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(file);
    }

    /// The file in force.
    pub fn current(&self) -> Arc<AuthFile> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// How many principals, and nothing of their tokens.
impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("principals", &self.current().len())
            .finish()
    }
}

/// Who sent a request, as [`authenticate`] found.
#[derive(Debug, Clone)]
pub enum Caller {
    /// The server has no authentication file: every right on every name, and leases of no
    /// principal.
    Anyone,
    /// A principal of the authentication file.
    Known(Arc<Identity>),
}

impl Caller {
    /// The principal, if the server checks who calls.
    pub fn principal(&self) -> Option<&Principal> {
        match self {
            Self::Anyone => None,
            Self::Known(identity) => Some(&identity.principal),
        }
    }

    /// `owner` as this caller's: of its principal, so that the store refuses another
    /// principal's lease under the same owner name.
    pub fn owns(&self, owner: Owner) -> Owner {
        owner.of(self.principal().cloned())
    }

    /// Whether the caller has `right` over `name`. The lock that keeps an election is
    /// judged by the election's name: rights are granted on the names clients write.
    pub fn has(&self, right: Right, name: &Resource) -> bool {
        match self {
            Self::Anyone => true,
            Self::Known(identity) => identity.may(right, name.election_name().unwrap_or(name.as_str())),
        }
    }

    /// Nothing if the caller has `right` over `name`; else 403. The answer is decided before
    /// the store is asked, so it is the same whether the name is held or not, and names
    /// neither the name nor the prefixes the caller has.
    pub fn may(&self, right: Right, name: &Resource) -> Result<(), ApiError> {
        match self {
            Self::Known(identity) if !self.has(right, name) => Err(ApiError::Problem(
                ProblemKind::Denied,
                format!(
                    "principal {} has no {} right on this name",
                    identity.principal,
                    right.as_str()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// `error` as this caller is told it: the cycle of a deadlock with only the names it may
    /// read and the owners that hold them ([`Cycle::describe`](fencelock_core::Cycle::describe)),
    /// so that waiting on a name it may lock tells it nothing it could not read otherwise;
    /// every other error as it is. Without authentication, the whole cycle.
    pub fn told(&self, error: StoreError) -> ApiError {
        match error {
            StoreError::Deadlock(Deadlock::Found(cycle)) => ApiError::Problem(
                ProblemKind::Deadlock,
                cycle.describe(|name| self.has(Right::Read, name)),
            ),
            error => ApiError::Store(error),
        }
    }

    /// The prefixes of the names the caller may read (the empty prefix: all of them).
    pub fn readable(&self) -> Vec<&str> {
        match self {
            Self::Anyone => vec![""],
            Self::Known(identity) => identity.prefixes(Right::Read).collect(),
        }
    }
}

/// A route's caller, as [`authenticate`] left it.
impl<S: Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts.extensions.get::<Self>().cloned().ok_or_else(|| {
            ApiError::Problem(
                ProblemKind::Internal,
                "a route was not behind the authentication".into(),
            )
        })
    }
}

/// What [`authenticate`] checks a request against: its part of the server's state, so that
/// the state holds a gate and the gate knows nothing of the state.
#[derive(Debug, Clone)]
pub struct Gate {
    /// The authentication file in force; `None`: every caller is [`Caller::Anyone`].
    pub keyring: Option<Keyring>,
    /// The request rate of each principal, if limited.
    pub limiter: Option<Arc<Limiter>>,
}

/// Middleware of every API route: finds the caller (401 with `WWW-Authenticate` when the
/// token is missing or unknown), takes one request from its rate (429 with `Retry-After`),
/// and leaves the [`Caller`] for the route.
pub async fn authenticate(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    let caller = match &gate.keyring {
        None => Caller::Anyone,
        Some(keyring) => {
            let Some(token) = bearer(request.headers()) else {
                return ApiError::Unauthenticated { token_sent: false }.into_response();
            };
            match keyring.current().authenticate(token) {
                Some(identity) => Caller::Known(identity.clone()),
                None => return ApiError::Unauthenticated { token_sent: true }.into_response(),
            }
        }
    };
    if let Some(limiter) = &gate.limiter
        && let Err(wait) = limiter.take(caller.principal(), Instant::now())
    {
        return ApiError::RateLimited(wait).into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// The token of `Authorization: Bearer TOKEN` (the scheme in any letter case, as RFC 9110
/// has it); `None` if there is none, or it is empty.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn the_token_is_what_follows_bearer() {
        let token = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            bearer(&headers).map(str::to_owned)
        };
        assert_eq!(token("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(token("bearer  abc ").as_deref(), Some("abc"));
        assert_eq!(token("Basic abc"), None);
        assert_eq!(token("Bearer "), None);
        assert_eq!(token("Bearerabc"), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
