//! [`EtcdStore`] (`etcd://host:port[,host:port…]`): leases — of locks, of semaphores' permits
//! and of read-write locks' holds — as etcd keys bound to etcd leases, shared by any number of
//! fencelock servers.
//!
//! Its guarantees are in the [crate's guarantee table](crate#guarantees).
//!
//! # How the rules of locks are kept
//!
//! - A lock on resource `r` is the key `/fencelock/locks/` + `r` (so listing in key order is
//!   listing in the order of the names' bytes). Its value is JSON with the owner, the
//!   owner's `principal` if it has one, `acquired_at` and `expires_at` (milliseconds since
//!   the epoch), and the lease's terms if it has any: its cap `hold_until` (milliseconds
//!   since the epoch) and its `lock_delay` (milliseconds). Each key is attached to an etcd
//!   lease of its own, of whole seconds: the TTL (cut at the cap), then the lock-delay.
//! - The **fencing token is the key's create revision**. etcd's revision counts every change
//!   in the whole cluster and never goes back, so a key created after another (after a
//!   release or an expiry) always has a greater create revision; rewriting the key (an
//!   extension or a renewal) keeps it. So a new lease is always a new key: the key of a
//!   lease that is over is deleted before the next one is created, never overwritten.
//! - **Which lease is live.** A lease without terms lives exactly as long as its etcd lease,
//!   which etcd's clock counts down: its key is live while it exists (etcd deletes it at its
//!   `expires_at` or a little after), whatever the servers' clocks say. A lease with terms
//!   has a key that outlives it — its etcd lease also covers the lock-delay, and its whole
//!   seconds may pass the cap — so its `expires_at` decides, by the clock of the server that
//!   reads it: `get`, `list`, release and renew see it no more from then, an acquire is
//!   refused with [`AcquireOutcome::Delayed`] until `expires_at + lock_delay`, and from then
//!   on an acquire deletes the key (if unchanged) and creates it anew. A release deletes the
//!   key, so no delay follows it.
//! - Acquire, of one lock or of several ([`LockStore::acquire_all`]), is one transaction
//!   for all the keys. It first reads them all (a read-only transaction: one revision, no
//!   write to the log), and judges each key on what it read: another owner's live lease or a
//!   lock-delay refuses the whole acquire (every refusal, in the order given, nothing
//!   changed, no etcd lease asked for); a key that is over is deleted first, and the keys
//!   read again; otherwise it takes an etcd lease per key (asked for after the read: see
//!   "Times"), and a transaction whose compares cover every key — absent
//!   (`create_revision == 0`), or the exact version read (`mod_revision`) for the caller's
//!   own live leases, which it extends, keeping their terms — writes them all and reads them
//!   back, or, if any compare fails, reads them all for the next try. The keys created by
//!   one transaction share its revision as their token. Its success branch has two
//!   operations per key, a put and a get: 128 for the most locks one acquire may take (64),
//!   which is etcd's default `--max-txn-ops`; a cluster that allows fewer refuses the largest
//!   acquires. An etcd lease known to be unused is revoked; after an error it is left to run
//!   out instead, since a lost answer may hide that a key was put on it.
//! - Release and renew read the key (a linearizable read), judge the caller on what they
//!   read (absent or over, other owner, other token), and then delete or rewrite the key in
//!   a transaction that only succeeds if the key is still that same version
//!   (`mod_revision`) with that token (`create_revision`); otherwise they start over.
//! - **Contention.** A compare fails only when another call changed a key between the read
//!   and the write: another server's, since the calls of one server on a name take turns
//!   ([`fencelock_core::Turns`], where [`crate::open`] opens the store). The call then reads
//!   and judges again, after a random pause that doubles with each try, until its deadline:
//!   contention costs time, not an error.
//! - **Times.** etcd has no clock to read: a lease's times are the servers'. The time of a
//!   call — the `acquired_at` of what it grants or extends, the `ended_at` of what it
//!   releases — is this server's clock read *after* the read that the call judged on and
//!   *before* its write, which succeeds only if the keys are still as read. So a grant's
//!   `acquired_at` comes after the release (or expiry) that freed the lock, and no earlier
//!   than that release's `ended_at`, whichever servers made them (with their clocks
//!   synchronised). Only a lock granted and released again by another server between this
//!   call's read and its write — a whole lease within one round trip — could end after this
//!   grant's `acquired_at`. The etcd lease is asked for after that time (a try after a
//!   failed compare asks for another), and `expires_at` is `acquired_at` plus the whole
//!   seconds etcd granted: etcd starts counting later still, so a lease never outlives its
//!   etcd lease, and lasts at least its TTL. (A renewal's `expires_at` is counted from its
//!   time before it asked for the new etcd lease.) Reading first costs a grant one round
//!   trip more than writing at once did (a linearizable read, no write to the log), and
//!   saves a refused acquire the etcd lease and the transaction it wrote.
//! - Renew grants a **new** etcd lease with the new TTL and moves the key onto it (then
//!   revokes the old lease): an etcd keep-alive could only restart the old lease's original
//!   TTL, while a renew may ask for a shorter one. Renewals and extensions are cut at the
//!   cap, and keep the cap and the lock-delay of the lease.
//! - All reads are linearizable (etcd's default), never served from a member's possibly
//!   stale copy.
//! - Values without terms are written byte for byte as before terms were kept, and values
//!   written before read as of no cap and no delay. A server of an earlier version sharing
//!   the cluster sees a lease with terms as held until etcd deletes its key (the end of its
//!   lock-delay), and its renewals and extensions would drop the terms: upgrade every server
//!   before giving leases terms.
//!
//! # Semaphores and read-write locks
//!
//! Their keys are under a prefix of their own ([`EtcdOptions::holds_prefix`], by default
//! `/fencelock/holds/`), where names and owners are followed by a zero byte (which neither
//! may contain, and which sorts before every byte they may hold, so that key order is the
//! order of the names' bytes):
//!
//! - each hold is one key, `semaphore/{name}` 0 `{owner}` 0 `permit`, or `rwlock/{name}` 0
//!   `{owner}` 0 `read` (or `write`), attached to an etcd lease of the hold's TTL (whole
//!   seconds, rounded up), its value JSON with the owner's `principal` if it has one,
//!   `acquired_at`, `expires_at` and a permit's `limit`. Its **token is its create
//!   revision**, as for locks: an extension or a renewal rewrites the key and keeps it,
//!   while an upgrade or a downgrade deletes the key of one mode and creates the other's,
//!   with a new token;
//! - a waiting writer's intent is the key `intent/{name}` 0 `{owner}`, on an etcd lease of
//!   the intent's TTL, its value JSON with the writer's `principal` if it has one and
//!   `expires_at`.
//!
//! An acquire reads every hold on the name (and, for a read-write lock, every intent on it)
//! in one transaction, at one revision `R`; decides with [`fencelock_core::hold::judge`];
//! and writes what it decided in a transaction that succeeds only if no key in the name's
//! range was created or rewritten after `R` (a compare of `mod_revision` over the whole
//! range) — nor, for a reader, in its range of intents — and the owner's own hold, if it
//! extends or replaces one, is still there. Keys deleted meanwhile (released or expired) can
//! only have made the decision more cautious than it needed to be. If the compare fails,
//! another server changed the name: the acquire reads and decides again, after a pause, as
//! an acquire of a lock does. So the limit, the exclusion of readers and writer, and the
//! intents hold across every server. A refusal writes nothing (but an intent): it is what
//! the name was at `R`. A hold's times are taken as a lock's are.
//!
//! - A key exists as long as etcd keeps its lease alive, so every hold and intent read is
//!   judged live, as a lock's key is, even past its `expires_at` by this server's clock
//!   (etcd deletes it soon; a caller it stands in the way of is told to ask again in a
//!   quarter of a second).
//! - A refused writer with an intent to record writes it in a transaction with the same
//!   compare, so that it is refused and recorded at one revision; a granted writer deletes
//!   its intent in the grant's transaction; [`LockStore::withdraw_intent`] deletes it.
//! - Release and renew read the owner's key (`NotFound` without one, `Conflict` on another
//!   token: [`fencelock_core::Refusal::check`]) and delete it, or move it onto a new etcd
//!   lease, only if it is still that version, as for locks.
//! - The holds of a kind are listed from one revision, in key order, a batch at a time.
//!
//! # Principals
//!
//! Every value keeps its owner's principal, and every read gives it back with the owner, so
//! that [`fencelock_core::Refusal::check`] and [`fencelock_core::hold::judge`] compare whole
//! owners: a namesake of another principal (or of none) is told a lock is held, may neither
//! renew nor release it, and is refused a semaphore or read-write lock whatever the room.
//! The compares that guard every write (a key's revisions, a name's range) cover the value,
//! so no two servers decide on different principals. Values written before principals were
//! kept have none, and so are of no principal; and a value of no principal is written as
//! they were, so a server of the earlier version reads it alike.
//!
//! Holds and intents are keyed by the owner's *name*, as the rules have it: on one name,
//! a name is held by one principal at a time, and the latest writer to wait under a name
//! has its intent. An intent is withdrawn, or taken away by a grant, only by its principal.
//!
//! [`LockStore::force_release`] deletes the key of a live lock if it is still the version
//! read, or every hold key of the name in one request that answers with the keys as they
//! were, so it ends exactly what it reports; a lock in its lock-delay stays closed, and
//! writers' intents stay. The watch announces the deletions as it does releases.
//!
//! # Release notices
//!
//! [`LockStore::releases`] is fed by two watches, on the locks' prefix and on the holds'
//! prefix: every deletion (a release, the expiry of an etcd lease, a lease over whose key an
//! acquire deleted, an upgrade's or a downgrade's
//! old key, a writer's intent withdrawn, granted or run out), and every rewrite that moves an
//! expiry earlier (a shortening renewal or extension), wakes the waiters of that lock,
//! semaphore or read-write lock, on every server. When a watch is lost both resume from the
//! last revision each saw, so no deletion is missed unless etcd compacted that history
//! meanwhile. A lease with terms ends with no change to its key (it is over by its
//! `expires_at`, and its lock-delay by `expires_at + lock_delay`), so nothing is announced
//! then: those who wait for it are told when in the refusal (`expires_in`, `retry_in`), and
//! the next try is granted.
//!
//! # Expiries
//!
//! etcd deletes an expired lease's key by itself, so no server purges it; instead the
//! watches above see every expiry, and [`LockStore::purge_expired`] returns those this
//! server claimed first:
//!
//! - every deletion a server tells of itself (a release, a force-release, the old hold of an
//!   upgrade or a downgrade) is made in a transaction that also puts the **mark**, the key
//!   that is the bare prefix (`/fencelock/locks/`, `/fencelock/holds/`), which no lock or
//!   hold has (a name is never empty) and `list` skips. etcd gives a transaction's changes
//!   one revision and a watch gets a revision's changes in one answer, so a deletion of a
//!   lease's key with no mark at its revision is an **expiry**: etcd's, or a lease with terms
//!   whose key an acquire cleared after its end (its `expires_at` is in the key's last value,
//!   which the watch gets);
//! - every server's watch sees it, so it is **claimed**: the server puts
//!   `/fencelock/events/expired/{revision}/{key}` (on a 120 s lease) unless a server put it
//!   first, and only the one that put it returns it. An expiry seen while no claim can be
//!   made waits for the next purge. A watch that cannot resume where it was lost (etcd
//!   compacted the history) tells the server's event streams that events may be missing
//!   (`reset`), as does a server that saw 100,000 expiries it could not claim yet.
//!
//! A server of an earlier version writes no mark: its releases would be told as expiries
//! too by the servers of this one. Upgrade every server together.
//!
//! # Failure
//!
//! Requests carry etcd's "require leader" flag, so a member cut off from the quorum refuses
//! them at once instead of holding them; every request also has a timeout, and every call an
//! overall deadline (the store is opened in a [`Deadline`]). Without a quorum, calls return
//! [`StoreError::Unavailable`] and nothing is granted; while a new leader is elected (about
//! a second after the leader is lost) they do too, and the caller may retry. A request that
//! a member refused at connection time (a member that is down) reached nothing, so it is
//! sent again to another member.
//!
//! Tested with etcd 3.4.
//!
//! [`StoreError::Unavailable`]: fencelock_core::StoreError::Unavailable

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, ConnectOptions};
use fencelock_core::store::{PURGE_BATCH, Result};
use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Bulletin, Capabilities, Claim, Expired, FencingToken, ForceOutcome,
    Hold, HoldKind, HoldOutcome, HoldPage, Key, Lease, LeasePage, ListQuery, LockStore, Meta, Owner,
    ReleaseFeed, ReleaseNotice, ReleaseOutcome, RenewOutcome, Resource, Resources, Terms, Ttl,
};
use tokio::sync::broadcast;

use crate::deadline::{Deadline, Within, within};
use crate::retry::Backoff;
use crate::subscription::{AbortOnDrop, keep_subscribed};

mod codec;
mod error;
mod events;
mod holds;
mod txn;
mod watch;

use codec::HoldKeys;
use error::EtcdError;
use watch::{Expiries, Seeing, Watch, Watched};

/// The store's name in error messages.
const STORE: &str = "etcd";

/// How long a caller told "held" is asked to wait when the holder's `expires_at` has passed
/// but etcd has not yet deleted the key (it finds expired leases about every half second).
/// The deletion itself also wakes waiters, through the watch.
const EXPIRY_RECHECK: Duration = Duration::from_millis(250);

/// How an [`EtcdStore`] connects, where it keeps its keys, and how long it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdOptions {
    /// The most one etcd request may take.
    pub request_timeout: Duration,
    /// How long to wait for a connection to a member.
    pub connect_timeout: Duration,
    /// The prefix of every lock key; the resource name follows it.
    pub prefix: String,
    /// The prefix of every key of a semaphore or read-write lock (see the module docs).
    pub holds_prefix: String,
    /// The prefix of the servers' events (`GET /events`), each a key with a short lease.
    pub events_prefix: String,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            prefix: "/fencelock/locks/".into(),
            holds_prefix: "/fencelock/holds/".into(),
            events_prefix: "/fencelock/events/".into(),
        }
    }
}

impl EtcdOptions {
    /// Refuses prefixes under which the keys of locks, of holds and of events would mix:
    /// listing locks would then read holds, and the other way round.
    fn check(&self) -> Result<(), EtcdError> {
        let prefixes = [
            ("locks", &self.prefix),
            ("holds", &self.holds_prefix),
            ("events", &self.events_prefix),
        ];
        for (i, (one, a)) in prefixes.iter().enumerate() {
            for (other, b) in &prefixes[i + 1..] {
                if a.starts_with(b.as_str()) || b.starts_with(a.as_str()) {
                    return Err(EtcdError::Invalid(format!(
                        "the prefixes of {one} ({a:?}) and of {other} ({b:?}) overlap: neither may start with the other"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The most one call (a few requests) may take, whatever happens on the network.
    fn call_deadline(&self) -> Duration {
        self.request_timeout * 3 + self.connect_timeout
    }
}

/// Opens `etcd://…` for [`crate::open`]: `rest` is what follows the scheme.
pub(crate) fn open<'a>(address: &'a str, rest: &'a str) -> crate::Opening<'a> {
    Box::pin(async move { crate::opened(address, EtcdStore::connect(&format!("etcd://{rest}")).await) })
}

/// A [`LockStore`] in an etcd cluster; see the module docs for how it keeps the rules.
/// [`connect`](EtcdStore::connect) gives it wrapped in its call [`Deadline`].
pub struct EtcdStore {
    client: Client,
    endpoints: Vec<String>,
    options: EtcdOptions,
    holds: HoldKeys,
    /// The release notices of every server, fed by the watch.
    feed: ReleaseFeed,
    // Stops watching when the store is dropped.
    _released: AbortOnDrop,
    /// This server's events told to the others, and theirs heard.
    events: crate::event_channel::EventChannel,
    /// The expiries the watches saw, for [`LockStore::purge_expired`] to claim.
    expiries: Arc<Expiries>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.endpoints)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to the members in `url` (`etcd://host:port[,host:port…]`) with default
    /// options, checks that the cluster answers, and starts watching for releases. Must be
    /// called within a Tokio runtime.
    pub async fn connect(url: &str) -> Result<Deadline<Self>> {
        Self::connect_with(url, EtcdOptions::default()).await
    }

    /// As [`EtcdStore::connect`], with `options`.
    pub async fn connect_with(url: &str, options: EtcdOptions) -> Result<Deadline<Self>> {
        let endpoints = endpoints(url)?;
        options.check()?;
        let connect = ConnectOptions::new()
            .with_timeout(options.request_timeout)
            .with_connect_timeout(options.connect_timeout)
            .with_keep_alive(Duration::from_secs(5), options.request_timeout)
            // A member cut off from the quorum refuses at once rather than holding requests.
            .with_require_leader(true);
        let deadline = options.call_deadline();
        let client = within(deadline, STORE, "connect", async {
            Ok(Client::connect(&endpoints, Some(connect))
                .await
                .map_err(EtcdError::request("connect"))?)
        })
        .await?;
        let released = ReleaseFeed::new();
        let holds = HoldKeys::new(&options.holds_prefix);
        // Other servers' events are heard from here on, however late the events watch is
        // first made: none told once this answers is skipped.
        let events = within(
            deadline,
            STORE,
            "connect",
            events::start(&client, &options.events_prefix),
        )
        .await?;
        let expiries = Expiries::new(events.feed().clone());
        let open = {
            let client = client.clone();
            let seeing = Seeing {
                released: released.clone(),
                expiries: expiries.clone(),
            };
            let watches = [
                Watch::new(Watched::Locks(options.prefix.clone())),
                Watch::new(Watched::Holds(holds.clone())),
            ];
            move || watch::watch(client.clone(), watches.clone(), deadline, seeing.clone())
        };
        // Only answer once the watch is in place, so that no release after this is missed;
        // making the watch also proves that the cluster answers.
        let first = open().await?;
        let store = Self {
            events,
            expiries,
            client,
            endpoints,
            options,
            holds,
            // Events have a watch of their own, which resumes where it was lost.
            _released: keep_subscribed(STORE, first, open, released.clone(), None),
            feed: released,
        };
        Ok(Deadline::new(store, Within::new(STORE, deadline)))
    }

    fn key(&self, resource: &Resource) -> Vec<u8> {
        [self.options.prefix.as_bytes(), resource.as_str().as_bytes()].concat()
    }

    /// The pauses of a call between its tries, for as long as its deadline allows.
    fn backoff(&self) -> Backoff {
        Backoff::within(self.options.call_deadline())
    }
}

#[async_trait]
impl LockStore for EtcdStore {
    async fn acquire_with(&self, resource: &Resource, owner: &Owner, terms: Terms) -> Result<AcquireOutcome> {
        let (AcquireAllOutcome::Granted(outcomes) | AcquireAllOutcome::Refused(outcomes)) = self
            .try_acquire_all(std::slice::from_ref(resource), owner, terms)
            .await?;
        Ok(outcomes
            .into_iter()
            .next()
            .ok_or_else(|| EtcdError::Corrupt(format!("an acquire of {resource} answered nothing")))?)
    }

    /// In one transaction: see the module docs.
    async fn acquire_all(
        &self,
        resources: &Resources,
        owner: &Owner,
        terms: Terms,
    ) -> Result<AcquireAllOutcome> {
        self.try_acquire_all(resources.as_slice(), owner, terms).await
    }

    async fn get(&self, resource: &Resource) -> Result<Option<Lease>> {
        Ok(self.read_live(resource).await?.map(|(_, lease)| lease))
    }

    async fn release(
        &self,
        resource: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        self.try_release(resource, owner, token).await
    }

    async fn renew_with(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome> {
        self.try_renew(resource, owner, ttl, token, meta).await
    }

    async fn list(&self, query: &ListQuery) -> Result<LeasePage> {
        self.try_list(query).await
    }

    /// etcd deletes the key of an expired lease by itself, and every server's watch sees it
    /// (see "Expiries" in the module docs): this returns those this server's watch saw and
    /// it claimed first of all the servers, so that each is told once.
    async fn purge_expired(&self) -> Result<Vec<Expired>> {
        self.claim(self.expiries.take(PURGE_BATCH)).await
    }

    async fn acquire_hold_with(
        &self,
        name: &Resource,
        owner: &Owner,
        claim: Claim,
        ttl: Ttl,
        intent: Option<Ttl>,
        meta: Option<&Meta>,
    ) -> Result<HoldOutcome> {
        self.try_acquire_hold(name, owner, claim, ttl, intent, meta).await
    }

    async fn holds(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        self.try_holds(kind, name).await
    }

    async fn release_hold(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        token: Option<FencingToken>,
    ) -> Result<ReleaseOutcome> {
        self.try_release_hold(kind, name, owner, token).await
    }

    async fn renew_hold_with(
        &self,
        kind: HoldKind,
        name: &Resource,
        owner: &Owner,
        ttl: Ttl,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<RenewOutcome<Hold>> {
        self.try_renew_hold(kind, name, owner, ttl, token, meta).await
    }

    async fn list_holds(&self, kind: HoldKind, query: &ListQuery) -> Result<HoldPage> {
        self.try_list_holds(kind, query).await
    }

    async fn withdraw_intent(&self, name: &Resource, owner: &Owner) -> Result<()> {
        self.try_withdraw_intent(name, owner).await
    }

    async fn force_release(&self, key: &Key) -> Result<ForceOutcome> {
        let ended: Vec<_> = match key.kind.hold_kind() {
            None => self.force_release_lock(&key.name).await?.into_iter().collect(),
            Some(kind) => self.force_release_holds(kind, &key.name).await?,
        };
        // The watch announces each deleted key, as it does a release.
        Ok(if ended.is_empty() {
            ForceOutcome::NotFound
        } else {
            ForceOutcome::Released(ended)
        })
    }

    async fn ping(&self) -> Result<()> {
        // A linearizable read needs the leader and a quorum, which is what serving needs.
        // The bare prefix is never a lock key (names are not empty).
        let key = self.options.prefix.clone().into_bytes();
        self.read(&key).await.map(drop)
    }

    fn releases(&self) -> Option<broadcast::Receiver<ReleaseNotice>> {
        Some(self.feed.subscribe())
    }

    fn publish(&self, bulletin: &Bulletin) {
        self.events.tell(bulletin);
    }

    fn bulletins(&self) -> Option<broadcast::Receiver<fencelock_core::Heard>> {
        Some(self.events.feed().subscribe())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ttl_granularity: Duration::from_secs(1),
            durable: true,
            shared: true,
            ..Capabilities::BASELINE
        }
    }
}

/// The member addresses of `etcd://host:port[,host:port…]`, as `http://host:port`.
fn endpoints(url: &str) -> Result<Vec<String>, EtcdError> {
    let members = crate::remote::members(url, "etcd")
        .map_err(|why| EtcdError::Invalid(format!("{url:?} is not an etcd address: {why}")))?;
    Ok(members
        .into_iter()
        .map(|member| format!("http://{member}"))
        .collect())
}
