//! The answer of `GET /whoami`: who the server takes the caller for, and what it may do
//! where — so that a client (the dashboard) offers only what the server would allow.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Who the caller is, and its grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"principal": "ops",
    "grants": [{"prefix": "", "rights": ["read", "lock", "admin"]}]}))]
pub struct WhoAmI {
    /// The principal the token authenticates as; `null` on a server without authentication,
    /// where every caller has every right on every name (one grant of the empty prefix).
    pub principal: Option<String>,
    /// What the caller may do over the names that start with each prefix, as the
    /// authentication file says (the empty prefix: every name).
    pub grants: Vec<GrantBody>,
}

/// Rights over every name that starts with `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GrantBody {
    /// The start of the names covered, compared byte for byte.
    pub prefix: String,
    /// What the grant allows over them.
    pub rights: Vec<RightName>,
}

/// A right, as the authentication file names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RightName {
    /// Read one name's lease, permits or holds; see the name in a list and on the stream.
    Read,
    /// Acquire, renew and release.
    Lock,
    /// Force-release, whoever holds the name.
    Admin,
}
