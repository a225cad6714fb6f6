//! The one acquire flow: of a lock, of several locks all or none, of a semaphore's permit or
//! a read-write lock's hold. A route parses its request into an `impl` of [`Acquiring`], and
//! [`acquired`] does the rest: authorise, make the owner the caller's, wait or try (to its end
//! even if the client hangs up), observe, give back a grant nobody will hear of, answer.

use std::time::Duration;

use axum::Extension;
use axum::http::StatusCode;
use axum::response::Response;
use fencelock_core::{Acquired, Kind, Lease, Owner, ReleaseOutcome, Resource, StoreError, Waiters};
use fencelock_wire::Op;
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::auth::{Caller, Right};
use crate::listener::{Peer, Waiting};
use crate::observe::{Asked, AskedAll, Contended, Observed, observed};
use crate::problem::ApiError;
use crate::state::App;

use super::answer;
use super::detached::detached;

/// What an acquire asks for, as its log lines tell it.
pub(super) trait Asks: Send + Sync + 'static {
    /// The names asked for: the caller needs the `lock` right on each.
    fn names(&self) -> &[Resource];
    /// The owner asked for, which the caller's principal is given to.
    fn owner(&mut self) -> &mut Owner;
}

/// A lock, a permit or a hold.
impl Asks for Asked {
    fn names(&self) -> &[Resource] {
        std::slice::from_ref(&self.resource)
    }

    fn owner(&mut self) -> &mut Owner {
        &mut self.owner
    }
}

/// Several locks, all or none.
impl Asks for AskedAll {
    fn names(&self) -> &[Resource] {
        self.resources.as_slice()
    }

    fn owner(&mut self) -> &mut Owner {
        &mut self.owner
    }
}

/// An acquire of one kind, parsed: what [`acquired`] needs to know of each kind besides what
/// it asks for and how long it waits.
pub(super) trait Acquiring: Send + Sync + 'static {
    /// The operation, for the metrics and the log lines.
    const OP: Op;
    /// What the request asks for.
    type Asked: Asks;
    /// What the waiters answer.
    type Outcome: Observed<Asked = Self::Asked> + Contended + Send;
    /// The answer's body.
    type Answer: Serialize + Send + 'static;

    /// The kind of lease asked for.
    fn kind(&self) -> Kind;
    /// The answer of a server shutting down without its store's: not acquired.
    fn stopped(&self, asked: &Self::Asked) -> Self::Answer;
    /// Asks the waiters for `asked`, waiting up to `wait` in line unless `gone` is cancelled.
    fn call(
        &self,
        waiters: &Waiters,
        asked: &Self::Asked,
        wait: Duration,
        gone: &CancellationToken,
    ) -> impl Future<Output = Result<Acquired<Self::Outcome>, StoreError>> + Send;
    /// The leases `outcome` granted anew (not the ones it extended, which were the caller's
    /// before it asked).
    fn granted(outcome: &Self::Outcome) -> Vec<&Lease>;
    /// The answer to the client.
    fn answer(&self, asked: &Self::Asked, outcome: &Self::Outcome) -> Result<Self::Answer, ApiError>;
}

/// The whole of an acquire of any kind: `request` for what `asked` tells of, waiting up to
/// `wait`, for `caller` on the connection `peer`.
pub(super) async fn acquired<A: Acquiring>(
    app: App,
    caller: &Caller,
    peer: Option<Extension<Peer>>,
    (mut asked, wait): (A::Asked, Duration),
    request: A,
) -> Result<Response, ApiError> {
    for name in asked.names() {
        caller.may(Right::Lock, name)?;
    }
    let owner = asked.owner();
    *owner = caller.owns(owner.clone());
    // Cancelled when this future is dropped (the client hung up): the wait ends, but a call
    // to the store under way completes and is logged, and a grant nobody will hear of is
    // given back at once instead of blocking the name until its TTL.
    let gone = CancellationToken::new();
    let hung_up = gone.clone().drop_guard();
    let _waiting = waiting(peer, wait);
    let stopped = request.stopped(&asked);
    let caller = caller.clone();
    let work_gone = gone.clone();
    let server = app.clone();
    let work = detached(async move {
        let gone = work_gone;
        let kind = request.kind();
        let call = request.call(&app.waiters, &asked, wait, &gone);
        let outcome = observed(&app, kind, A::OP, &asked, call).await;
        let Acquired { outcome, .. } = outcome.map_err(|error| caller.told(error))?;
        if gone.is_cancelled() {
            // An upgrade or downgrade of a hold given back leaves the owner nothing: its
            // renewal of the replaced hold then answers 404, so it learns it holds nothing.
            for lease in A::granted(&outcome) {
                // Boxed: the work's future would hold it whole, although it seldom runs.
                Box::pin(give_back(&app, kind, lease)).await;
            }
        }
        request.answer(&asked, &outcome)
    });
    let answer = stoppable(server, || stopped, &gone, work);
    // Declared after `answer`, so dropped before it: when the client hangs up, `gone` is
    // cancelled before the call under way moves to a task of its own, which so cannot end
    // without seeing it, and gives back what it was granted.
    let _hung_up = hung_up;
    Ok(answer::json(StatusCode::OK, &answer.await?))
}

/// [`acquired`] of one name (a lock, a permit, a hold, an election's lock): `owner` asks for
/// `name`, waiting up to `wait`.
pub(super) async fn acquired_one<A: Acquiring<Asked = Asked>>(
    app: App,
    caller: &Caller,
    peer: Option<Extension<Peer>>,
    (name, owner, wait): (Resource, Owner, Duration),
    request: A,
) -> Result<Response, ApiError> {
    let asked = Asked {
        resource: name,
        owner,
        token: None,
    };
    acquired(app, caller, peer, (asked, wait), request).await
}

/// The connection's watch on its client, for an acquire that waits up to `wait` (none for one
/// that does not wait): see [`Peer::waiting`].
fn waiting(peer: Option<Extension<Peer>>, wait: Duration) -> Option<Waiting> {
    peer.filter(|_| !wait.is_zero())
        .map(|Extension(peer)| peer.waiting())
}

/// Awaits an acquire's `work`, [`detached`], and answers it — but once the server is
/// shutting down, for at most a third of [`Config::shutdown_grace`](crate::Config): then, or
/// if the store fails meanwhile, the answer is `stopped()`, `acquired: false` with
/// `"shutting_down": true`. At shutdown every waiter makes one last try; a store that hangs
/// (or fails) must not leave a waiter unanswered when its connection is closed, whatever the
/// store does. The work goes on in a task of its own, `gone` cancelled before it moves there,
/// so a grant the store makes after all is given back.
async fn stoppable<T: Send + 'static>(
    app: App,
    stopped: impl FnOnce() -> T,
    gone: &CancellationToken,
    mut answer: impl Future<Output = Result<T, ApiError>> + Send + Unpin,
) -> Result<T, ApiError> {
    tokio::select! {
        answer = &mut answer => return answer,
        () = app.waiters.shutting_down() => {}
    }
    match tokio::time::timeout(app.config.shutdown_grace / 3, answer).await {
        Ok(Err(ApiError::Store(StoreError::Unavailable { .. }))) | Err(_) => {
            tracing::warn!(
                "shutting down: an acquire is answered acquired: false without its store's answer"
            );
            // Before the work, dropped on return, moves to a task of its own and may end there.
            gone.cancel();
            Ok(stopped())
        }
        Ok(answer) => answer,
    }
}

/// Releases a lease of `kind` (a lock's, a permit's or a hold's) granted to a caller who hung
/// up before hearing of it. Not counted as a release asked for: only its log line and the
/// lease's metrics are written.
async fn give_back(app: &App, kind: Kind, lease: &Lease) {
    let started = Instant::now();
    let (store, token) = (app.waiters.store(), Some(lease.token));
    let outcome = match kind.hold_kind() {
        None => store.release(&lease.resource, &lease.owner, token).await,
        Some(kind) => {
            store
                .release_hold(kind, &lease.resource, &lease.owner, token)
                .await
        }
    };
    let asked = Asked {
        resource: lease.resource.clone(),
        owner: lease.owner.clone(),
        token: Some(lease.token),
    };
    match outcome {
        Ok(released @ ReleaseOutcome::Released(_)) => {
            released.record(kind, Op::Release, &asked, started.elapsed(), app);
        }
        // Renewed or released by someone else meanwhile; it ends at its TTL.
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, resource = %lease.resource,
            "giving back a lease whose caller hung up failed; it ends at its TTL"),
    }
}
