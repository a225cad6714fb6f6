//! # fencelock-conformance
//!
//! The one conformance suite that every [`LockStore`] passes, written once as `async fn`s
//! over a [`Harness`]. A store's test file makes a harness and calls [`suite!`], which turns
//! every check into a test of its own:
//!
//! ```ignore
//! async fn harness() -> fencelock_conformance::Harness {
//!     let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_000_000)));
//!     Harness::manual(Arc::new(MemoryStore::with_clock(clock.clone())), clock)
//! }
//! fencelock_conformance::suite!(harness);
//! ```
//!
//! Differences between stores by nature (TTL granularity, durability) come from
//! [`LockStore::capabilities`], never from skipping a check. Stores whose clock can be
//! injected run on a [`ManualClock`]; the others (PostgreSQL, etcd, a server) run on real
//! time, and a check that needs a lease to expire waits for it with a deadline.
//!
//! # Layout
//!
//! - [`Harness`]: the store under test and how its time moves.
//! - [`checks`]: one `async fn` per rule.
//! - [`suite!`]: one `#[tokio::test]` per check.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fencelock_core::{Capabilities, Lease, LockStore, ManualClock, Owner, Resource, Ttl};

pub mod checks;

/// The store under test, and how its time is moved.
pub struct Harness {
    /// The store under test.
    pub store: Arc<dyn LockStore>,
    clock: Option<Arc<ManualClock>>,
    namespace: String,
    capabilities: Option<Capabilities>,
    /// Dropped after the store (fields drop in order): e.g. the folder of its file.
    _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl Harness {
    /// A store whose expiry is decided by `clock`, which the checks move by hand.
    pub fn manual(store: Arc<dyn LockStore>, clock: Arc<ManualClock>) -> Self {
        Self {
            store,
            clock: Some(clock),
            namespace: namespace(),
            capabilities: None,
            _keep: None,
        }
    }

    /// A store on real time (its own clock): the checks wait for expiry.
    pub fn real(store: Arc<dyn LockStore>) -> Self {
        Self {
            store,
            clock: None,
            namespace: namespace(),
            capabilities: None,
            _keep: None,
        }
    }

    /// Declares how the store under test differs by nature, where it cannot tell itself (a
    /// client of a server on etcd rounds TTLs to whole seconds, as etcd does).
    pub fn declaring(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = Some(capabilities);
        self
    }

    /// The capabilities the checks hold the store to: as declared, else as it says.
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities.unwrap_or_else(|| self.store.capabilities())
    }

    /// Keeps `guard` (a temporary folder, a test server) alive until the store is dropped.
    pub fn keeping(mut self, guard: impl std::any::Any + Send + Sync) -> Self {
        self._keep = Some(Box::new(guard));
        self
    }

    /// A resource name of this harness alone, so checks can share one store.
    pub fn resource(&self, name: &str) -> Resource {
        Resource::new(format!("{}{name}", self.namespace)).expect("test resource names are valid")
    }

    /// The prefix of every resource of this harness.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// A TTL long enough that no check sees it expire unless it waits for it.
    pub fn long_ttl(&self) -> Ttl {
        ttl(Duration::from_secs(600))
    }

    /// A TTL that a check can wait out: short on real time, but not shorter than the
    /// store's granularity.
    pub fn short_ttl(&self) -> Ttl {
        let granularity = self.capabilities().ttl_granularity;
        ttl(granularity.max(Duration::from_millis(300)))
    }

    /// Returns once `lease` has expired by the store's clock: at once on a manual clock,
    /// else by asking the store until it no longer reports the lease (with a deadline).
    pub async fn expire(&self, lease: &Lease) {
        if let Some(clock) = &self.clock {
            clock.advance(lease.expires_at.since(clock_now(clock)) + Duration::from_millis(1));
            return;
        }
        let granularity = self.capabilities().ttl_granularity;
        let deadline = Instant::now()
            + lease.expires_at.since(fencelock_core::Timestamp::now_wall())
            + granularity
            + Duration::from_secs(10);
        loop {
            let current = self
                .store
                .get(&lease.resource)
                .await
                .expect("get while waiting for expiry");
            if current.is_none_or(|c| c.token != lease.token) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "lease {lease:?} did not expire in time"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Moves a manual clock forward by `by`, or lets that much real time pass.
    pub async fn pass(&self, by: Duration) {
        match &self.clock {
            Some(clock) => clock.advance(by),
            None => tokio::time::sleep(by).await,
        }
    }
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("store", &self.store)
            .field("namespace", &self.namespace)
            .finish()
    }
}

fn clock_now(clock: &ManualClock) -> fencelock_core::Timestamp {
    fencelock_core::Clock::now(clock)
}

/// A TTL for tests.
pub fn ttl(duration: Duration) -> Ttl {
    Ttl::from_duration(duration, Ttl::DEFAULT_MAX).expect("test TTLs are valid")
}

/// An owner for tests.
pub fn owner(name: &str) -> Owner {
    Owner::new(name).expect("test owners are valid")
}

fn namespace() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let wall = fencelock_core::Timestamp::now_wall().as_millis();
    format!(
        "t{wall}-{}-{}/",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// One `#[tokio::test]` per conformance check, each on a fresh harness from `$make`, an
/// `async fn() -> Harness`.
#[macro_export]
macro_rules! suite {
    ($make:path) => {
        $crate::suite!(@each $make;
            grant_is_a_new_lease_with_a_new_token,
            concurrent_acquires_of_a_free_resource_have_one_winner,
            reacquire_by_the_holder_extends_with_the_same_token,
            acquire_of_a_held_resource_reports_the_holder,
            tokens_increase_across_releases_and_expiries,
            an_expired_lease_is_gone_and_cannot_be_renewed,
            release_checks_presence_then_owner_then_token,
            renew_checks_presence_then_owner_then_token,
            renew_moves_only_the_expiry,
            a_late_release_with_an_old_token_frees_nothing,
            list_orders_by_bytes_filters_by_prefix_and_pages,
            purge_forgets_only_expired_leases,
            names_are_stored_as_given,
            releases_are_announced,
            shortened_leases_are_announced,
            ping_answers
        );
    };
    (@each $make:path; $($check:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() {
            let harness = $make().await;
            $crate::checks::$check(&harness).await;
        }
    )*};
}
