//! Servers' events ([`Bulletin`]s) through ZooKeeper: each is an ephemeral sequential node
//! under the events node (`ROOT/events/e-SEQUENCE`), which its server deletes after
//! [`KEEP`] (or ZooKeeper with its session). Every server watches the events node's
//! children and reads each new one in sequence order (the sequence is the parent's, so one
//! order for every server), from the last it read.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock_core::{Bulletin, BulletinFeed};
use zookeeper_client as zk;

use super::session::Session;
use crate::event_channel::{EventChannel, Outgoing};

/// How long an event's node lives: long enough for every server to read it.
const KEEP: Duration = Duration::from_secs(20);

/// The pause before trying again after a failure.
const RETRY: Duration = Duration::from_millis(250);

/// An event's node: ephemeral (gone with the session of the server that wrote it) and
/// sequential.
const EVENT: zk::CreateOptions<'static> =
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());

/// Starts writing and reading events under `folder` (which exists).
pub(super) fn start(session: Arc<Session>, folder: String) -> EventChannel {
    let (writer, written_under) = (session.clone(), folder.clone());
    EventChannel::start(
        move |outgoing| write(writer, written_under, outgoing),
        move |feed| read(session, folder, feed),
    )
}

/// Writes the bulletins of `outgoing`, in order, a batch per request, and deletes this
/// server's nodes older than [`KEEP`].
async fn write(session: Arc<Session>, folder: String, mut outgoing: Outgoing) {
    let prefix = format!("{folder}/e-");
    let mut written: VecDeque<(String, Instant)> = VecDeque::new();
    let mut tidy = tokio::time::interval(KEEP / 4);
    loop {
        tokio::select! {
            batch = outgoing.next() => {
                if batch.is_empty() {
                    return;
                }
                match create(&session, &prefix, &batch).await {
                    Ok(paths) => written.extend(paths.into_iter().map(|path| (path, Instant::now()))),
                    Err(error) => tracing::warn!(%error, events = batch.len(), "events are not told to other servers: ZooKeeper refused them"),
                }
            }
            _ = tidy.tick() => {}
        }
        while written.front().is_some_and(|(_, at)| at.elapsed() > KEEP) {
            let Some((path, _)) = written.pop_front() else {
                break;
            };
            if let Ok(client) = session.client().await {
                // Gone already (its session ended) is as good.
                let _ = client.delete(&path, None).await;
            }
        }
    }
}

/// Creates a node under `prefix` for each of `batch`, in order, in one request; the paths
/// created.
async fn create(session: &Session, prefix: &str, batch: &[Bulletin]) -> Result<Vec<String>, String> {
    let client = session.client().await.map_err(|e| e.to_string())?;
    let mut multi = client.new_multi_writer();
    for bulletin in batch {
        multi
            .add_create(prefix, bulletin.encode().as_bytes(), &EVENT)
            .map_err(|e| e.to_string())?;
    }
    let results = multi.commit().await.map_err(|e| e.to_string())?;
    Ok(results
        .into_iter()
        .filter_map(|result| match result {
            zk::MultiWriteResult::Create { path, .. } => Some(path),
            _ => None,
        })
        .collect())
}

/// The sequence of an event's node, from its name (`e-0000000042`).
fn sequence(child: &str) -> Option<i64> {
    child.strip_prefix("e-")?.parse().ok()
}

/// Hands on every event node written under `folder` after this server started, in sequence
/// order, watching the folder's children for new ones.
async fn read(session: Arc<Session>, folder: String, feed: BulletinFeed) {
    // The last sequence read; `None` until the first listing, which skips what was there.
    let mut last: Option<i64> = None;
    loop {
        let listed = match session.client().await {
            Ok(client) => client
                .get_and_watch_children(&folder)
                .await
                .map(|(children, _, watcher)| (client, children, watcher))
                .map_err(|e| e.to_string()),
            Err(error) => Err(error.to_string()),
        };
        let (client, children, watcher) = match listed {
            Ok(listed) => listed,
            Err(error) => {
                tracing::debug!(%error, "ZooKeeper: cannot watch the events yet");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let mut new: Vec<(i64, String)> = children
            .iter()
            .filter_map(|child| sequence(child).map(|seq| (seq, child.clone())))
            .filter(|(seq, _)| last.is_some_and(|last| *seq > last))
            .collect();
        new.sort();
        if last.is_none() {
            last = children.iter().filter_map(|c| sequence(c)).max().or(Some(-1));
        }
        for (seq, child) in new {
            last = Some(seq);
            match client.get_data(&format!("{folder}/{child}")).await {
                Ok((data, _)) => match std::str::from_utf8(&data).ok().and_then(Bulletin::decode) {
                    Some(bulletin) => feed.hand(bulletin),
                    None => tracing::warn!(child, "an event node that cannot be read"),
                },
                // Deleted already: older than anyone waits for.
                Err(zk::Error::NoNode) => {}
                Err(error) => tracing::warn!(%error, child, "an event of another server could not be read"),
            }
        }
        // A change of the children, or the end of the session: list again either way.
        watcher.changed().await;
    }
}
