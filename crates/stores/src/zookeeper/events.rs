//! Servers' events ([`Bulletin`]s) through ZooKeeper: each batch a server writes is one
//! ephemeral sequential node under the events node, `ROOT/events/e-{origin}-{sequence}`, its
//! data the batch's bulletins in order; its server deletes it after [`KEEP`] (or ZooKeeper
//! does, with its session). The sequence is the events node's, so one order for every
//! server; the origin in the name lets a server pass over its own nodes without reading them.
//!
//! Every server keeps a persistent recursive watch on the events node, which tells it of
//! each new node (its path) in the order of their writes, and reads the others' as they come.
//! It lists the children only when it sets the watch (at start, and on each new session) and
//! when its connection comes back: ZooKeeper does not replay to a persistent watch what was
//! written while the connection was lost (ZOOKEEPER-4698), so the listing catches up from
//! the last sequence read. A server's cost per event thus does not grow with how many events
//! are kept.
//!
//! The format changed with this (2026-12-06, before any release: one node per bulletin,
//! `e-{sequence}`): a server of an earlier build and one of this build do not hear each
//! other's events; every server sharing an ensemble runs the same build.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fencelock_core::{Bulletin, BulletinFeed};
use zookeeper_client as zk;

use super::error::ZkError;
use super::session::Session;
use crate::event_channel::{EventChannel, Outgoing};

/// How long an event's node lives: long enough for every server to read it.
const KEEP: Duration = Duration::from_secs(20);

/// The pause before trying again after a failure.
const RETRY: Duration = Duration::from_millis(250);

/// The most bulletins' bytes in one node: well under what ZooKeeper keeps in one
/// (`jute.maxbuffer`, 1 MiB by default). A bulletin larger than this has a node of its own.
const NODE_BYTES: usize = 256 * 1024;

/// The most nodes deleted in one `multi`, which is one request, under the same limit.
const DELETE_BATCH: usize = 1000;

/// An event's node: ephemeral (gone with the session of the server that wrote it) and
/// sequential.
const EVENT: zk::CreateOptions<'static> =
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());

/// The origins of the bulletins this server wrote (its own: one per server, as it runs), so
/// that its reader passes over their nodes.
#[derive(Debug, Clone, Default)]
struct Origins(Arc<Mutex<BTreeSet<u64>>>);

impl Origins {
    fn add(&self, origin: u64) {
        self.lock().insert(origin);
    }

    fn contains(&self, origin: u64) -> bool {
        self.lock().contains(&origin)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
        // Only an insert or a lookup is done under it: a poisoned one is whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Starts writing and reading events under `folder` (which exists).
pub(super) fn start(session: Arc<Session>, folder: String) -> EventChannel {
    let own = Origins::default();
    let (writer, written_under, written) = (session.clone(), folder.clone(), own.clone());
    EventChannel::start(
        move |outgoing| write(writer, written_under, written, outgoing),
        move |feed| read(session, folder, own, feed),
    )
}

/// A node this server wrote, to delete after [`KEEP`].
struct Written {
    path: String,
    session: zk::SessionId,
    at: Instant,
}

/// Writes the bulletins of `outgoing`, in order, a batch per request, and deletes this
/// server's nodes older than [`KEEP`].
async fn write(session: Arc<Session>, folder: String, own: Origins, mut outgoing: Outgoing) {
    let mut written = VecDeque::new();
    let mut tidy = tokio::time::interval(KEEP / 4);
    loop {
        tokio::select! {
            batch = outgoing.next() => {
                if batch.is_empty() {
                    return;
                }
                match create(&session, &folder, &own, &batch).await {
                    Ok(made) => written.extend(made),
                    Err(error) => tracing::warn!(%error, events = batch.len(), "events are not told to other servers: ZooKeeper refused them"),
                }
            }
            _ = tidy.tick() => delete_old(&session, &mut written).await,
        }
    }
}

/// Creates the nodes of `batch` (see [`nodes`]) under `folder`, in order, in one request.
async fn create(
    session: &Session,
    folder: &str,
    own: &Origins,
    batch: &[Bulletin],
) -> Result<Vec<Written>, ZkError> {
    let client = session.client().await?;
    let mut multi = client.new_multi_writer();
    for (origin, data) in nodes(batch) {
        own.add(origin);
        multi
            .add_create(&format!("{folder}/e-{origin}-"), &data, &EVENT)
            .map_err(ZkError::request("tell events"))?;
    }
    let results = multi
        .commit()
        .await
        .map_err(|e| ZkError::request("tell events")(e.into()))?;
    let at = Instant::now();
    Ok(results
        .into_iter()
        .filter_map(|result| match result {
            zk::MultiWriteResult::Create { path, .. } => Some(Written {
                path,
                session: client.session_id(),
                at,
            }),
            _ => None,
        })
        .collect())
}

/// The nodes that carry `batch`, in order: each one origin's consecutive bulletins, up to
/// [`NODE_BYTES`], as a JSON array of [`Bulletin::encode`]s.
fn nodes(batch: &[Bulletin]) -> Vec<(u64, Vec<u8>)> {
    let mut nodes: Vec<(u64, usize, Vec<String>)> = Vec::new();
    for bulletin in batch {
        let line = bulletin.encode();
        match nodes.last_mut() {
            Some((origin, bytes, lines))
                if *origin == bulletin.origin && *bytes + line.len() <= NODE_BYTES =>
            {
                *bytes += line.len();
                lines.push(line);
            }
            _ => nodes.push((bulletin.origin, line.len(), vec![line])),
        }
    }
    nodes
        .into_iter()
        // A list of strings always serialises.
        .map(|(origin, _, lines)| (origin, serde_json::to_vec(&lines).expect("strings serialise")))
        .collect()
}

/// Deletes this server's nodes older than [`KEEP`], [`DELETE_BATCH`] to a request. Those of
/// an ended session went with it; one that fails is tried again at the next tick.
async fn delete_old(session: &Session, written: &mut VecDeque<Written>) {
    let Ok(client) = session.client().await else {
        return;
    };
    written.retain(|node| node.session == client.session_id());
    while written.front().is_some_and(|node| node.at.elapsed() > KEEP) {
        let old = written
            .iter()
            .take(DELETE_BATCH)
            .take_while(|node| node.at.elapsed() > KEEP)
            .count();
        let mut paths: Vec<&str> = written.range(..old).map(|node| node.path.as_str()).collect();
        while !paths.is_empty() {
            let mut multi = client.new_multi_writer();
            for path in &paths {
                if let Err(error) = multi.add_delete(path, None) {
                    tracing::warn!(%error, path, "an event node that cannot be deleted");
                    return;
                }
            }
            match multi.commit().await {
                Ok(_) => break,
                // Gone already (none should be): deleted without it.
                Err(zk::MultiWriteError::OperationFailed {
                    index,
                    source: zk::Error::NoNode,
                }) => {
                    paths.remove(index);
                }
                Err(error) => {
                    tracing::debug!(%error, "ZooKeeper: old event nodes are not deleted yet");
                    return;
                }
            }
        }
        written.drain(..old);
    }
}

/// An event node's name, `e-{origin}-{sequence}`, read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Node {
    sequence: i64,
    origin: u64,
    name: String,
}

impl Node {
    /// The node named `name`; `None` for any other name (an earlier build's, one per event).
    fn parse(name: &str) -> Option<Self> {
        let (origin, sequence) = name.strip_prefix("e-")?.split_once('-')?;
        Some(Self {
            sequence: sequence.parse().ok()?,
            origin: origin.parse().ok()?,
            name: name.to_owned(),
        })
    }
}

/// Hands on every bulletin of another server written under `folder` after this server
/// started, in sequence order: see the module docs.
async fn read(session: Arc<Session>, folder: String, own: Origins, feed: BulletinFeed) {
    let mut reader = Reader {
        folder,
        own,
        feed,
        last: None,
    };
    loop {
        match session.client().await {
            Ok(client) => reader.follow(&client).await,
            Err(error) => {
                tracing::debug!(%error, "ZooKeeper: cannot watch the events yet");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// What reads the other servers' events, across watches and sessions.
struct Reader {
    folder: String,
    own: Origins,
    feed: BulletinFeed,
    /// The sequence of the last node read; `None` until the first listing, which passes over
    /// what was there.
    last: Option<i64>,
}

impl Reader {
    /// Watches the events node on `client`'s session and reads each new node, until the
    /// session ends.
    async fn follow(&mut self, client: &zk::Client) {
        let mut watcher = match client
            .watch(&self.folder, zk::AddWatchMode::PersistentRecursive)
            .await
        {
            Ok(watcher) => watcher,
            Err(error) => {
                tracing::debug!(%error, "ZooKeeper: cannot watch the events yet");
                return tokio::time::sleep(RETRY).await;
            }
        };
        // Set before the listing: a node made in between is in both, and read once, since
        // only those after the last read are.
        let mut behind = true;
        loop {
            if behind {
                match self.catch_up(client).await {
                    Ok(()) => behind = false,
                    // Its watcher was told, or is about to be.
                    Err(_) if client.state().is_terminated() => return,
                    Err(error) => tracing::debug!(%error, "ZooKeeper: cannot list the events yet"),
                }
            }
            let event = if behind {
                tokio::select! {
                    event = watcher.changed() => event,
                    () = tokio::time::sleep(RETRY) => continue,
                }
            } else {
                watcher.changed().await
            };
            match (event.event_type, event.session_state) {
                // What was written while the connection was lost is not replayed.
                (zk::EventType::Session, zk::SessionState::SyncConnected) => behind = true,
                // The watcher hears nothing more: a new session, and a new watch.
                (zk::EventType::Session, state) if state.is_terminated() => return,
                // While behind, the listing to come has it.
                (zk::EventType::NodeCreated, _) if !behind => {
                    let name = event.path.rsplit('/').next().unwrap_or_default();
                    if let Some(node) = Node::parse(name) {
                        self.hand(client, node).await;
                    }
                }
                _ => {}
            }
        }
    }

    /// Lists the events node and reads every node after the last read, in sequence order.
    async fn catch_up(&mut self, client: &zk::Client) -> Result<(), ZkError> {
        let children = client
            .list_children(&self.folder)
            .await
            .map_err(ZkError::request("list the events"))?;
        let mut nodes: Vec<Node> = children.iter().filter_map(|name| Node::parse(name)).collect();
        nodes.sort();
        if self.last.is_none() {
            self.last = Some(nodes.last().map_or(-1, |node| node.sequence));
        }
        for node in nodes {
            self.hand(client, node).await;
        }
        Ok(())
    }

    /// Reads `node` and hands on its bulletins, unless it is this server's or was read.
    async fn hand(&mut self, client: &zk::Client, node: Node) {
        if self.last.is_some_and(|last| node.sequence <= last) {
            return;
        }
        self.last = Some(node.sequence);
        if self.own.contains(node.origin) {
            return;
        }
        let path = format!("{}/{}", self.folder, node.name);
        match client.get_data(&path).await {
            Ok((data, _)) => match serde_json::from_slice::<Vec<String>>(&data) {
                Ok(lines) => {
                    for line in lines {
                        match Bulletin::decode(&line) {
                            Some(bulletin) => self.feed.hand(bulletin),
                            None => tracing::warn!(path, "an event that cannot be read"),
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, path, "an event node that cannot be read"),
            },
            // Deleted already: older than anyone waits for.
            Err(zk::Error::NoNode) => {}
            Err(error) => tracing::warn!(%error, path, "events of another server could not be read"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulletin(origin: u64, seq: u64, body_bytes: usize) -> Bulletin {
        Bulletin {
            origin,
            seq,
            body: "x".repeat(body_bytes),
        }
    }

    fn decoded(data: &[u8]) -> Vec<(u64, u64)> {
        let lines: Vec<String> = serde_json::from_slice(data).unwrap();
        lines
            .iter()
            .map(|line| Bulletin::decode(line).unwrap())
            .map(|b| (b.origin, b.seq))
            .collect()
    }

    #[test]
    fn a_batch_is_one_node_per_origin_and_size_in_order() {
        let big = NODE_BYTES / 2;
        let batch = [
            bulletin(1, 1, 10),
            bulletin(1, 2, 10),
            bulletin(2, 1, 10),
            bulletin(1, 3, big),
            bulletin(1, 4, big),
            bulletin(1, 5, NODE_BYTES * 2),
        ];
        let nodes: Vec<(u64, Vec<(u64, u64)>)> = nodes(&batch)
            .iter()
            .map(|(origin, data)| (*origin, decoded(data)))
            .collect();
        assert_eq!(
            nodes,
            [
                (1, vec![(1, 1), (1, 2)]),
                (2, vec![(2, 1)]),
                (1, vec![(1, 3)]),
                (1, vec![(1, 4)]),
                (1, vec![(1, 5)]),
            ]
        );
    }

    #[test]
    fn node_names_carry_origin_and_sequence() {
        let node = Node::parse("e-42-0000000007").unwrap();
        assert_eq!((node.origin, node.sequence), (42, 7));
        // An earlier build's (one per event), and strangers.
        for other in ["e-0000000007", "e-x-0000000007", "lease-1-0000000007", "e-1-"] {
            assert_eq!(Node::parse(other), None, "{other}");
        }
    }
}
