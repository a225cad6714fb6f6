//! `GET /whoami`: who the server takes the caller for, and its grants — what the dashboard
//! asks to show a force-release button only to whom may use it.

use axum::Json;
use fencelock_wire::{GrantBody, RightName, WhoAmI};

use crate::auth::{Caller, Grant, Right};

use super::responses::AuthProblems;

/// The caller's principal and grants.
///
/// Without authentication the principal is `null` and the one grant is every right over the
/// empty prefix (every name). Needs a known token, and no right: a principal may always learn
/// its own grants.
#[utoipa::path(get, path = "/whoami", tag = "operations",
    responses(
        (status = 200, description = "The caller and its grants", body = WhoAmI),
        AuthProblems,
    ))]
pub async fn whoami(caller: Caller) -> Json<WhoAmI> {
    let grants = match &caller {
        Caller::Anyone => vec![GrantBody {
            prefix: String::new(),
            rights: Right::ALL.into_iter().map(name).collect(),
        }],
        Caller::Known(identity) => identity.grants.iter().map(body).collect(),
    };
    Json(WhoAmI {
        principal: caller.principal().map(ToString::to_string),
        grants,
    })
}

fn body(grant: &Grant) -> GrantBody {
    GrantBody {
        prefix: grant.prefix.clone(),
        rights: grant.rights.iter().copied().map(name).collect(),
    }
}

fn name(right: Right) -> RightName {
    match right {
        Right::Read => RightName::Read,
        Right::Lock => RightName::Lock,
        Right::Admin => RightName::Admin,
    }
}
