//! In the OpenAPI description: the problems a route may answer besides those of its own
//! operation (a body that cannot be read, no token, no right, a store that fails, …), each
//! written once for every route that has it.

use std::collections::BTreeMap;

use fencelock_wire::ProblemKind;
use utoipa::openapi::response::{Response as Described, ResponseBuilder};
use utoipa::openapi::{Content, Ref, RefOr};

/// In the OpenAPI description: the problems of a request with a JSON body, besides those of
/// its own operation.
pub(super) struct BodyProblems;

impl utoipa::IntoResponses for BodyProblems {
    fn responses() -> BTreeMap<String, RefOr<Described>> {
        problems(&[
            (
                ProblemKind::BadRequest,
                "The body is not a JSON object (or is nested too deep)",
            ),
            (
                ProblemKind::PayloadTooLarge,
                "The body is over the limit (default 16384 bytes)",
            ),
            (
                ProblemKind::UnsupportedMediaType,
                "The body is not application/json",
            ),
            (
                ProblemKind::InvalidFields,
                "Invalid fields, each listed in errors",
            ),
            (
                ProblemKind::Unavailable,
                "The store is unreachable or failing. The outcome is unknown (a call that timed out may still have been applied): read the lease before retrying",
            ),
        ])
    }
}

/// In the OpenAPI description: the problems of a route behind
/// [`authenticate`](crate::auth::authenticate).
pub(super) struct AuthProblems;

impl utoipa::IntoResponses for AuthProblems {
    fn responses() -> BTreeMap<String, RefOr<Described>> {
        problems(&[
            (
                ProblemKind::Unauthorized,
                "No bearer token, or an unknown one (the server has an authentication file); with WWW-Authenticate: Bearer",
            ),
            (
                ProblemKind::TooManyRequests,
                "Over the request rate of the caller's principal (of all callers without authentication); with Retry-After in seconds",
            ),
        ])
    }
}

/// In the OpenAPI description: the 403 of a route that no store refuses with 403.
pub(super) struct Denied;

impl utoipa::IntoResponses for Denied {
    fn responses() -> BTreeMap<String, RefOr<Described>> {
        problems(&[(
            ProblemKind::Denied,
            "The caller's principal has no grant of the right this needs on this name (says nothing of whether it is held)",
        )])
    }
}

/// In the OpenAPI description: the 409 of an acquire whose wait would close a cycle.
pub(super) struct Deadlocked;

impl utoipa::IntoResponses for Deadlocked {
    fn responses() -> BTreeMap<String, RefOr<Described>> {
        problems(&[(ProblemKind::Deadlock, DEADLOCK)])
    }
}

/// What the 409 `deadlock` of an acquire means, for the OpenAPI description.
pub(super) const DEADLOCK: &str = "Waiting would close a cycle of owners that wait for each other on this server (problem type ending in deadlock; detail names the cycle, e.g. `b waits for lock \"x\" held by a; a waits for lock \"y\" held by b`). Answered at once; nothing was acquired, and nothing the caller held was released";

/// In the OpenAPI description: the refusals of a call on a leadership (proclaim, renew,
/// resign), which only the leader may make, in its current term.
pub(super) struct LeaderRefusals;

impl utoipa::IntoResponses for LeaderRefusals {
    fn responses() -> BTreeMap<String, RefOr<Described>> {
        problems(&[
            (
                ProblemKind::Forbidden,
                "Another candidate leads, or the caller has no `lock` right on this name (problem type ending in denied)",
            ),
            (ProblemKind::NotFound, "Nobody leads"),
            (ProblemKind::Conflict, "The term is not the current one"),
        ])
    }
}

/// In the OpenAPI description: the problems of a request without a body.
pub(super) struct PathProblems;

impl utoipa::IntoResponses for PathProblems {
    fn responses() -> BTreeMap<String, RefOr<Described>> {
        problems(&[
            (
                ProblemKind::InvalidFields,
                "Invalid name or parameters, each listed in errors",
            ),
            (
                ProblemKind::Unavailable,
                "The store is unreachable or failing: try again",
            ),
        ])
    }
}

pub(super) fn problems(kinds: &[(ProblemKind, &str)]) -> BTreeMap<String, RefOr<Described>> {
    kinds
        .iter()
        .map(|(kind, description)| {
            let content = Content::new(Some(Ref::from_schema_name("Problem")));
            let response = ResponseBuilder::new()
                .description(*description)
                .content("application/problem+json", content)
                .build();
            (kind.status().to_string(), RefOr::T(response))
        })
        .collect()
}
