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
//! A store that many servers share needs only the address of its throwaway server and how
//! to open a store there, and [`shared_suite!`] makes the rest (durability and the checks
//! across servers included):
//!
//! ```ignore
//! fencelock_conformance::shared_suite!(|| shared_postgres().url(), store);
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
//! - [`checks`]: one `async fn` per rule of locks.
//! - [`holds`]: the same for semaphores and read-write locks, with their durable and shared
//!   checks.
//! - [`meta`]: the metadata a holder keeps with its lease, permit or hold.
//! - [`principals`]: leases bound to their principal, and force-release, on every kind.
//! - [`shared`]: the checks a store's declared capabilities call for: durability across a
//!   reopen ([`Harness::reopening`]) and the rules across many servers ([`Harness::sharing`]).
//! - [`terms`]: several locks at once, all or none, and the terms a lease keeps: the cap on
//!   holding and the lock-delay.
//! - [`suite!`]: one `#[tokio::test]` per check; [`shared_suite!`]: the same for a store that
//!   many servers share, from its server's address and how to open it.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Capabilities, Lease, LockStore, ManualClock, Resource, Ttl};
use fencelock_testkit::eventually;

pub mod checks;
pub mod holds;
pub mod meta;
pub mod principals;
pub mod shared;
pub mod terms;

/// Opens a store over the same lock state as the store under test (for [`Harness::reopening`]
/// and [`Harness::sharing`]).
type Opener = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn LockStore>> + Send>> + Send + Sync>;

/// The store under test, and how its time is moved.
pub struct Harness {
    /// The store under test.
    pub store: Arc<dyn LockStore>,
    clock: Option<Arc<ManualClock>>,
    namespace: String,
    capabilities: Option<Capabilities>,
    reopen: Option<Opener>,
    another: Option<Opener>,
    /// Dropped after the store (fields drop in order): e.g. the folder of its file.
    _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl Harness {
    /// A store whose expiry is decided by `clock`, which the checks move by hand.
    pub fn manual(store: Arc<dyn LockStore>, clock: Arc<ManualClock>) -> Self {
        Self {
            store,
            clock: Some(clock),
            namespace: fencelock_testkit::fixtures::unique_prefix(),
            capabilities: None,
            reopen: None,
            another: None,
            _keep: None,
        }
    }

    /// A store on real time (its own clock): the checks wait for expiry.
    pub fn real(store: Arc<dyn LockStore>) -> Self {
        Self {
            store,
            clock: None,
            namespace: fencelock_testkit::fixtures::unique_prefix(),
            capabilities: None,
            reopen: None,
            another: None,
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

    /// How to close the store under test and open it again over the same state, for the
    /// checks of a durable store ([`Capabilities::durable`]).
    pub fn reopening<F, Fut>(mut self, reopen: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Arc<dyn LockStore>> + Send + 'static,
    {
        self.reopen = Some(Box::new(move || Box::pin(reopen())));
        self
    }

    /// How to open another store over the same state, standing for a second server, for the
    /// checks of a shared store ([`Capabilities::shared`]).
    pub fn sharing<F, Fut>(mut self, another: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Arc<dyn LockStore>> + Send + 'static,
    {
        self.another = Some(Box::new(move || Box::pin(another())));
        self
    }

    /// The harness of a store that many servers share: `open` opens a new store object over
    /// the same database or cluster each time it is called, which stands for the store under
    /// test, for it reopened (durability) and for a second fencelock server.
    pub async fn shared<F, Fut>(open: F) -> Self
    where
        F: Fn() -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Arc<dyn LockStore>> + Send + 'static,
    {
        Self::real(open().await).reopening(open.clone()).sharing(open)
    }

    /// The store under test closed and opened again; fails the check if a durable store did
    /// not say how.
    pub async fn reopened(&self) -> Arc<dyn LockStore> {
        let reopen = self.reopen.as_ref().expect(
            "the store declares itself durable: its harness must say how to reopen it (Harness::reopening)",
        );
        reopen().await
    }

    /// A second server's store over the same state; fails the check if a shared store did not
    /// say how.
    pub async fn another_server(&self) -> Arc<dyn LockStore> {
        let another = self.another.as_ref().expect(
            "the store declares itself shared: its harness must say how to open it again (Harness::sharing)",
        );
        another().await
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
        self.expire_with(lease, async || {
            let current = self
                .store
                .get(&lease.resource)
                .await
                .expect("get while waiting for expiry");
            current.is_some_and(|c| c.token == lease.token)
        })
        .await;
    }

    /// Returns once `lease` (a lock's, or a hold's) has expired by the store's clock: at once
    /// on a manual clock, else when `still_there` — asking the store — says it is gone, with
    /// a deadline.
    pub async fn expire_with(&self, lease: &Lease, mut still_there: impl AsyncFnMut() -> bool) {
        if let Some(clock) = &self.clock {
            clock.advance(lease.expires_at.since(clock_now(clock)) + Duration::from_millis(1));
            return;
        }
        let granularity = self.capabilities().ttl_granularity;
        let limit = lease.expires_at.since(fencelock_core::Timestamp::now_wall())
            + granularity
            + Duration::from_secs(10);
        eventually(limit, &format!("lease {lease:?} to expire"), async || {
            (!still_there().await).then_some(())
        })
        .await;
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

pub use fencelock_testkit::fixtures::{owner, ttl};

/// The address that `server` gives, which may start a throwaway server and so blocks: run off
/// the async workers. For [`shared_suite!`].
#[doc(hidden)]
pub async fn started(server: impl FnOnce() -> String + Send + 'static) -> String {
    tokio::task::spawn_blocking(server)
        .await
        .expect("start the store's server")
}

/// The whole conformance run of a store that many servers share, in one line:
/// `shared_suite!(server, open)`, where `server` (`|| shared_postgres().url()`) gives the
/// address of a throwaway server, and `open` (an `async fn(&str) -> Arc<…>`) opens a store
/// there as one fencelock server would — once for the store under test, and again for each
/// reopen and each second server ([`Harness::shared`]). Defines `shared_harness` and, through
/// [`suite!`], one test per check.
#[macro_export]
macro_rules! shared_suite {
    ($server:expr, $open:expr $(,)?) => {
        async fn shared_harness() -> $crate::Harness {
            let address = $crate::started($server).await;
            $crate::Harness::shared(move || {
                let address = address.clone();
                async move { $open(&address).await as ::std::sync::Arc<dyn ::fencelock_core::LockStore> }
            })
            .await
        }

        $crate::suite!(shared_harness);
    };
}

/// One `#[tokio::test]` per conformance check, each on a fresh harness from `$make`, an
/// `async fn() -> Harness`.
#[macro_export]
macro_rules! suite {
    ($make:path) => {
        $crate::suite!(@each $make;
            grant_is_a_new_lease_with_a_new_token,
            concurrent_acquires_of_a_free_resource_have_one_winner,
            fifty_racers_on_one_name_are_all_answered,
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
            ping_answers,
            a_token_of_zero_is_checked_like_any_other,
            the_shortest_ttl_is_granted
        );
        $crate::suite!(@each $make; holds:
            a_semaphore_grants_up_to_its_limit,
            a_permit_reacquired_is_extended_with_the_same_token,
            a_limit_that_differs_is_refused_until_no_permit_is_live,
            concurrent_permit_acquires_never_exceed_the_limit,
            release_and_renew_of_a_hold_check_presence_then_token,
            renew_of_a_hold_moves_only_the_expiry,
            hold_tokens_increase_across_releases_and_expiries,
            readers_share_and_a_writer_excludes,
            upgrade_only_for_the_sole_reader_and_downgrade_at_once,
            a_waiting_writer_holds_back_new_readers,
            kinds_are_separate_namespaces,
            list_holds_orders_by_name_and_pages,
            an_expired_hold_is_gone,
            hold_releases_are_announced,
            holds_survive_a_reopen,
            the_limit_and_writer_intents_hold_across_servers
        );
        $crate::suite!(@each $make; principals:
            a_lease_belongs_to_its_principal,
            a_hold_belongs_to_its_principal,
            force_release_frees_every_holder_and_tokens_still_increase,
            principals_survive_a_reopen,
            principals_bind_across_servers
        );
        $crate::suite!(@each $make; shared:
            answers_survive_a_reopen,
            a_hundred_acquirers_on_two_servers_have_one_winner,
            tokens_increase_across_servers,
            a_release_on_one_server_is_heard_on_the_other,
            events_published_on_one_server_reach_the_other_in_order,
            a_waiter_on_one_server_gets_the_lock_the_other_releases,
            fifty_acquirers_on_two_servers_get_exactly_the_limit,
            readers_and_writers_on_two_servers_never_overlap
        );
        $crate::suite!(@each $make; terms:
            several_locks_are_acquired_all_or_none,
            opposite_orders_never_both_win,
            a_refused_all_or_none_leaves_the_callers_leases_as_they_were,
            tokens_of_several_locks_follow_the_order_given,
            a_lock_delay_keeps_an_expired_lock_closed,
            a_release_has_no_lock_delay_and_a_delay_refuses_all_or_none,
            the_cap_cuts_the_ttl_renewals_and_extensions,
            terms_survive_a_reopen,
            terms_hold_across_servers
        );
        $crate::suite!(@each $make; meta:
            metadata_stays_with_a_lease_until_its_holder_replaces_it,
            several_locks_share_the_metadata_sent,
            metadata_stays_with_permits_and_holds,
            metadata_survives_a_reopen,
            metadata_is_shared_across_servers,
            an_election_is_kept_as_a_lock_apart_from_the_locks
        );
    };
    (@each $make:path; $($check:ident),* $(,)?) => {
        $crate::suite!(@each $make; checks: $($check),*);
    };
    (@each $make:path; $module:ident: $($check:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() {
            let harness = $make().await;
            $crate::$module::$check(&harness).await;
        }
    )*};
}
