//! fencelock's own targets: a server (`--server`: over a lean HTTP/1.1 keep-alive connection
//! per client for a plain `http://host:port`, see [`super::lean`], else through the client
//! library) or a store opened in this process (`--store`, through the fencelock client's
//! [`LockStore`]): locks, or with a claim, permits of semaphores or holds of read-write locks.

use std::sync::Arc;

use async_trait::async_trait;
use fencelock_core::{
    AcquireOutcome, Claim, FencingToken, HoldOutcome, LockStore, Owner, ReleaseOutcome, Resource, Ttl,
};

use super::lean::{self, LeanSession};
use super::{Contender, Failure, Load, Session};
use crate::cmd::common::{Target, resource, ttl};

/// Opens fencelock's target: each client gets its own server client (so its own keep-alive
/// connection), or, straight on a store, shares the one store this process may open (the
/// embedded store serves one opener at a time).
pub async fn open(target: &Target, load: &Load, claim: Option<Claim>) -> Result<Box<dyn Contender>, Failure> {
    let names = (0..load.resources)
        .map(|i| resource(&load.name(i)))
        .collect::<Result<Vec<_>, _>>()?;
    let shared = match &target.store {
        Some(_) => Some(target.connect().await?.store().clone()),
        None => None,
    };
    Ok(Box::new(Own {
        target: target.clone(),
        shared,
        names: Arc::new(names),
        ttl: ttl(load.ttl)?,
        claim,
    }))
}

struct Own {
    target: Target,
    shared: Option<Arc<dyn LockStore>>,
    names: Arc<Vec<Resource>>,
    ttl: Ttl,
    claim: Option<Claim>,
}

#[async_trait]
impl Contender for Own {
    async fn session(&self, client: usize) -> Result<Box<dyn Session>, Failure> {
        let owner = Owner::new(&format!("bench-{client}"))
            .map_err(|e| Failure::bad_input(format!("bench owner: {e}")))?;
        let lean = self
            .shared
            .is_none()
            .then(|| lean::authority(&self.target.server))
            .flatten();
        if let Some(authority) = lean {
            let token = self.target.auth_token()?;
            let session = LeanSession::connect(
                authority,
                &self.names,
                owner,
                self.ttl,
                self.claim,
                token.as_ref(),
            )
            .await?;
            return Ok(Box::new(session));
        }
        let store = match &self.shared {
            Some(store) => store.clone(),
            None => self.target.connect().await?.store().clone(),
        };
        Ok(Box::new(OwnSession {
            store,
            owner,
            names: self.names.clone(),
            ttl: self.ttl,
            claim: self.claim,
        }))
    }
}

struct OwnSession {
    store: Arc<dyn LockStore>,
    owner: Owner,
    names: Arc<Vec<Resource>>,
    ttl: Ttl,
    /// A permit or a hold to take instead of a lock.
    claim: Option<Claim>,
}

#[async_trait]
impl Session for OwnSession {
    async fn try_acquire(&mut self, resource: usize) -> anyhow::Result<Option<u64>> {
        let name = &self.names[resource];
        if let Some(claim) = self.claim {
            let outcome = self
                .store
                .acquire_hold(name, &self.owner, claim, self.ttl, None)
                .await?;
            return Ok(match outcome {
                HoldOutcome::Granted { hold, .. } | HoldOutcome::Extended(hold) => Some(hold.lease.token.0),
                HoldOutcome::Busy(_) | HoldOutcome::LimitMismatch { .. } => None,
            });
        }
        Ok(match self.store.acquire(name, &self.owner, self.ttl).await? {
            AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease) => Some(lease.token.0),
            AcquireOutcome::Held { .. } | AcquireOutcome::Delayed { .. } => None,
        })
    }

    async fn release(&mut self, resource: usize, token: u64) -> anyhow::Result<bool> {
        let (name, token) = (&self.names[resource], Some(FencingToken(token)));
        let released = match self.claim {
            Some(claim) => {
                self.store
                    .release_hold(claim.kind(), name, &self.owner, token)
                    .await?
            }
            None => self.store.release(name, &self.owner, token).await?,
        };
        Ok(matches!(released, ReleaseOutcome::Released(_)))
    }
}
