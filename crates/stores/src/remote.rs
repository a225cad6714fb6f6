//! What the stores of an address with several members and of values they encode themselves
//! share (etcd, Redis, ZooKeeper): reading those members, and the owners in those values.
//! (PostgreSQL, etcd and Redis keep their release subscriptions alive with the
//! `subscription` module; every store's deadline on every call is
//! [`crate::deadline::Deadline`].)

use fencelock_core::store::Result;
use fencelock_core::{Owner, Principal};

/// The members of `SCHEME://host:port[,host:port…]`, each `host:port`, for the store whose
/// scheme is `scheme` (lower case; the address's may be of any case); or why not.
pub(crate) fn members<'a>(url: &'a str, scheme: &str) -> Result<Vec<&'a str>, String> {
    let (given, members) = url
        .split_once("://")
        .ok_or_else(|| format!("expected {scheme}://host:port[,host:port...]"))?;
    if !given.eq_ignore_ascii_case(scheme) {
        return Err(format!("the scheme must be {scheme}://"));
    }
    members
        .split(',')
        .map(|member| {
            let (host, port) = member
                .rsplit_once(':')
                .ok_or_else(|| format!("member {member:?} has no port"))?;
            if host.is_empty() || host.contains('/') {
                return Err(format!("member {member:?} has no host"));
            }
            port.parse::<u16>()
                .map_err(|_| format!("member {member:?} has no valid port"))?;
            Ok(member)
        })
        .collect()
}

/// What a stored value keeps of `owner`'s principal (none: absent).
pub(crate) fn principal_of(owner: &Owner) -> Option<String> {
    owner.principal().map(|p| p.as_str().to_owned())
}

/// The owner `name` of `principal`, as a stored value keeps them (no principal: none).
pub(crate) fn owner(name: &str, principal: Option<&str>) -> Result<Owner, String> {
    let principal = principal
        .map(|p| Principal::new(p).map_err(|e| format!("principal {p:?}: {e}")))
        .transpose()?;
    Ok(Owner::new(name)
        .map_err(|e| format!("owner {name:?}: {e}"))?
        .of(principal))
}
