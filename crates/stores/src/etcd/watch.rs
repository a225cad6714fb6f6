//! The watch on the lock keys that feeds release notices to waiters.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use etcd_client::{Client, EventType, KeyValue, WatchOptions};
use fencelock_core::ReleaseFeed;
use fencelock_core::store::Result;

use super::STORE;
use super::codec::{self, Stored};
use super::error::EtcdError;
use crate::deadline::within;

/// Makes a watch on the changes under `prefix`, from revision `resume` on (from now, if it is
/// 0). Returns the session: a future that passes to `feed` each resource whose key was
/// deleted or rewritten with an earlier expiry, and keeps `resume` just past the last
/// revision seen, until the watch is lost.
pub(super) async fn watch(
    client: Client,
    prefix: String,
    deadline: Duration,
    feed: ReleaseFeed,
    resume: Arc<AtomicI64>,
) -> Result<impl Future<Output = ()> + Send + 'static> {
    const DOING: &str = "watch for releases";
    let mut options = WatchOptions::new().with_prefix().with_prev_key();
    let from = resume.load(Ordering::Acquire);
    if from > 0 {
        options = options.with_start_revision(from);
    }
    let (mut stream, created) = within(deadline, STORE, DOING, async {
        let mut stream = client
            .watch_client()
            .watch(prefix.as_str(), Some(options))
            .await
            .map_err(EtcdError::request(DOING))?;
        let created = stream
            .message()
            .await
            .map_err(EtcdError::request(DOING))?
            .ok_or_else(|| EtcdError::Refused {
                doing: DOING,
                reason: "the watch ended at once".into(),
            })?;
        Ok((stream, created))
    })
    .await?;
    if created.canceled() {
        // The history to resume from was compacted: start again from now. Waiters of what
        // was missed fall back on the expiry of the lease they wait for.
        resume.store(0, Ordering::Release);
        return Err(EtcdError::Refused {
            doing: DOING,
            reason: format!("cancelled: {}", created.cancel_reason()),
        }
        .into());
    }
    if from == 0
        && let Some(header) = created.header()
    {
        resume.store(header.revision() + 1, Ordering::Release);
    }
    Ok(async move {
        loop {
            let answer = match stream.message().await {
                Ok(Some(answer)) => answer,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "the etcd watch was lost; watching anew");
                    return;
                }
            };
            if answer.canceled() {
                tracing::warn!(reason = answer.cancel_reason(), "the etcd watch was cancelled");
                return;
            }
            for event in answer.events() {
                let Some(kv) = event.kv() else { continue };
                resume.store(kv.mod_revision() + 1, Ordering::Release);
                let freed = match event.event_type() {
                    EventType::Delete => true,
                    EventType::Put => event.prev_kv().is_some_and(|before| shortened(before, kv)),
                };
                if !freed {
                    continue;
                }
                match codec::resource(&prefix, kv.key()) {
                    Ok(resource) => feed.announce(&fencelock_core::Key::lock(&resource)),
                    Err(e) => tracing::warn!(error = %e, "odd key under the lock prefix"),
                }
            }
        }
    })
}

/// Whether `after` rewrote the lease of `before` (an extension or a renewal, not a new grant)
/// to end earlier. A value that cannot be read counts as shortened: a spurious notice only
/// makes waiters ask again.
fn shortened(before: &KeyValue, after: &KeyValue) -> bool {
    let expiry = |kv: &KeyValue| serde_json::from_slice::<Stored>(kv.value()).map(|s| s.expires_at);
    before.create_revision() == after.create_revision()
        && match (expiry(before), expiry(after)) {
            (Ok(before), Ok(after)) => after < before,
            _ => true,
        }
}
