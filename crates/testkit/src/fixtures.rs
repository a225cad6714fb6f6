//! Names, owners and TTLs for tests, valid by construction (each panics on a bad value), and
//! resource names no other test uses — one set for every test folder.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fencelock_core::{Owner, Principal, Resource, Timestamp, Ttl};

/// The resource `name`.
pub fn resource(name: &str) -> Resource {
    Resource::new(name).expect("test resource names are valid")
}

/// The owner `name`.
pub fn owner(name: &str) -> Owner {
    Owner::new(name).expect("test owners are valid")
}

/// The owner `name` of the principal `principal` (as a server with authentication makes it).
pub fn owner_of(principal: &str, name: &str) -> Owner {
    owner(name).of(Some(
        Principal::new(principal).expect("test principals are valid"),
    ))
}

/// A TTL of `duration`.
pub fn ttl(duration: Duration) -> Ttl {
    Ttl::from_duration(duration, Ttl::DEFAULT_MAX).expect("test TTLs are valid")
}

/// A TTL of `ms` milliseconds.
pub fn ttl_ms(ms: u64) -> Ttl {
    ttl(Duration::from_millis(ms))
}

/// A prefix no other test uses, in this run or an earlier one on the same server (the time,
/// this process, and a counter): `t{ms}-{pid}-{n}/`.
pub fn unique_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let wall = Timestamp::now_wall().as_millis();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("t{wall}-{}-{n}/", std::process::id())
}

/// A resource named `name` under a [`unique_prefix`].
pub fn unique(name: &str) -> Resource {
    resource(&format!("{}{name}", unique_prefix()))
}
