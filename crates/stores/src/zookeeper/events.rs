//! Servers' events ([`Bulletin`]s) through ZooKeeper: each batch a server writes is one
//! ephemeral sequential node under the events node, `ROOT/events/e-{origin}-{sequence}`, its
//! data the batch's bulletins in order; its server deletes it after [`KEEP`] (or ZooKeeper
//! does, with its session). The sequence is the events node's, so one order for every
//! server; the origin in the name lets a server pass over its own nodes without reading them.
//!
//! Every server keeps a persistent recursive watch on the events node, which tells it of
//! each new node (its path) in the order of their writes, and reads the others' as they come.
//! It lists the children only when it sets the watch: at start, on each new session, and
//! each time its connection comes back — ZooKeeper does not replay to a persistent watch what
//! was written while the connection was lost (ZOOKEEPER-4698), and zookeeper-client 0.11
//! does not set a persistent watch again on the new connection — and the listing catches up
//! from the last sequence read: at first, the newest node listed as the store opened, so that
//! every node made after the open is read, however late the watch is first set. A server's
//! cost per event thus does not grow with how many events are kept; under sustained load a
//! server writes at most one node per [`PACE`], so that the listing stays small.
//!
//! Never a silent gap: a node gone before it was read (its writer deleted it after
//! [`KEEP`], or its writer's session ended), or that cannot be read, and a watch lost for so
//! long that nodes made meanwhile may be gone, tell the feed that events may have been
//! missed ([`BulletinFeed::missed`]: the server's streams reset). A read that fails (the
//! connection) is tried again from that node. The sequence ZooKeeper appends is a 32-bit
//! counter of the events node's children, which wraps: nodes are ordered by their distance
//! from the last read.
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

/// The most bytes of bulletins in one node, written: well under what ZooKeeper keeps in one
/// (`jute.maxbuffer`, 1 MiB by default). A bulletin larger than this has a node of its own.
const NODE_BYTES: usize = 256 * 1024;

/// The most bytes of nodes created in one `multi`, which is one request, under the same
/// limit.
const REQUEST_BYTES: usize = 768 * 1024;

/// The least time between two batches' writes once a server keeps [`PACED_FROM`] nodes:
/// it then makes at most 200 nodes a second, so that the events node's children, which a
/// server lists when it catches up, stay a few thousand per server (their names, about 40
/// bytes each, must fit in one answer of at most `jute.maxbuffer`). An event waits for it
/// only under sustained load (more than 100 batches a second for [`KEEP`]).
const PACE: Duration = Duration::from_millis(5);

/// How many nodes of its own, not yet deleted, a server keeps before it paces its writes.
const PACED_FROM: usize = 2000;

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

/// Lists `folder` (which exists), then starts writing events under it and reading those
/// made after the newest listed.
pub(super) async fn start(session: Arc<Session>, folder: String) -> Result<EventChannel, ZkError> {
    let client = session.client().await?;
    let children = client
        .list_children(&folder)
        .await
        .map_err(ZkError::request("list the events"))?;
    let nodes: Vec<Node> = children.iter().filter_map(|name| Node::parse(name)).collect();
    let last = Node::newest(&nodes);
    let own = Origins::default();
    let (writer, written_under, written) = (session.clone(), folder.clone(), own.clone());
    Ok(EventChannel::start(
        move |outgoing| write(writer, written_under, written, outgoing),
        move |feed| read(session, folder, last, own, feed),
    ))
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
                let started = tokio::time::Instant::now();
                match create(&session, &folder, &own, &batch).await {
                    Ok(made) => written.extend(made),
                    Err(error) => tracing::warn!(%error, events = batch.len(), "events are not told to other servers: ZooKeeper refused them"),
                }
                // Under sustained load the next batch gathers what comes meanwhile.
                if written.len() >= PACED_FROM {
                    tokio::time::sleep_until(started + PACE).await;
                }
            }
            _ = tidy.tick() => delete_old(&session, &mut written).await,
        }
    }
}

/// Creates the nodes of `batch` (see [`nodes`]) under `folder`, in order, a `multi` of at
/// most [`REQUEST_BYTES`] at a time.
async fn create(
    session: &Session,
    folder: &str,
    own: &Origins,
    batch: &[Bulletin],
) -> Result<Vec<Written>, ZkError> {
    let client = session.client().await?;
    let mut made = Vec::new();
    let mut nodes = nodes(batch).into_iter().peekable();
    while nodes.peek().is_some() {
        let mut multi = client.new_multi_writer();
        let mut bytes = 0;
        while let Some((origin, data)) =
            nodes.next_if(|(_, data)| bytes == 0 || bytes + data.len() <= REQUEST_BYTES)
        {
            bytes += data.len();
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
        made.extend(results.into_iter().filter_map(|result| match result {
            zk::MultiWriteResult::Create { path, .. } => Some(Written {
                path,
                session: client.session_id(),
                at,
            }),
            _ => None,
        }));
    }
    Ok(made)
}

/// The nodes that carry `batch`, in order: each one origin's consecutive bulletins as a JSON
/// array of [`Bulletin::encode`]s, of at most [`NODE_BYTES`] written (a bulletin larger than
/// that has a node of its own). A bulletin too large for any node is left out, with a
/// warning: the other servers see the gap in its server's numbers and reset their streams.
fn nodes(batch: &[Bulletin]) -> Vec<(u64, Vec<u8>)> {
    let mut nodes: Vec<(u64, Vec<u8>)> = Vec::new();
    for bulletin in batch {
        // A string always serialises.
        let line = serde_json::to_vec(&bulletin.encode()).expect("a string serialises");
        if line.len() + 2 > REQUEST_BYTES {
            tracing::warn!(
                origin = bulletin.origin,
                seq = bulletin.seq,
                bytes = line.len(),
                "an event too large for a ZooKeeper node is not told to other servers"
            );
            continue;
        }
        match nodes.last_mut() {
            // With its comma before it and the closing bracket after.
            Some((origin, data))
                if *origin == bulletin.origin && data.len() + line.len() + 2 <= NODE_BYTES =>
            {
                data.push(b',');
                data.extend_from_slice(&line);
            }
            _ => {
                let mut data = Vec::with_capacity(line.len() + 2);
                data.push(b'[');
                data.extend_from_slice(&line);
                nodes.push((bulletin.origin, data));
            }
        }
    }
    for (_, data) in &mut nodes {
        data.push(b']');
    }
    nodes
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
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    /// The events node's child counter when it was made: a 32-bit number that wraps (see
    /// [`Node::after`]).
    sequence: i32,
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

    /// How far after the sequence `last` this node was made, the counter's wrap (after 2³¹
    /// children made) counted: positive for a node made after it.
    fn after(&self, last: i32) -> i32 {
        self.sequence.wrapping_sub(last)
    }

    /// The sequence of the newest of `nodes`, all listed at once; -1 if there is none.
    fn newest(nodes: &[Self]) -> i32 {
        // Every node is within 2³¹ of any other.
        nodes
            .iter()
            .max_by_key(|node| node.after(nodes[0].sequence))
            .map_or(-1, |node| node.sequence)
    }
}

/// Hands on every bulletin of another server written under `folder` after the node of
/// sequence `last`, in sequence order: see the module docs.
async fn read(session: Arc<Session>, folder: String, last: i32, own: Origins, feed: BulletinFeed) {
    let mut reader = Reader {
        folder,
        own,
        feed,
        last,
        lost_at: None,
    };
    loop {
        match session.client().await {
            Ok(client) => reader.follow(&client).await,
            Err(error) => {
                reader.lost();
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
    /// The sequence of the last node read; at first, of the newest listed as the store
    /// opened.
    last: i32,
    /// Since when nodes may have been made that the watch did not name: the connection was
    /// lost, or a read or the watch failed. Cleared by the listing that catches up.
    lost_at: Option<Instant>,
}

impl Reader {
    /// Sets the watch on `client`'s session, catches up with a listing, then reads each node
    /// the watch names, until the connection or a read is lost. It then returns, and is
    /// called again to set the watch again: ZooKeeper does not replay to a persistent watch
    /// what was written while the connection was lost (ZOOKEEPER-4698), and zookeeper-client
    /// 0.11 does not set a persistent watch again when it reconnects (its `resend_watches`
    /// sends only the one-shot ones).
    async fn follow(&mut self, client: &zk::Client) {
        let mut watcher = match client
            .watch(&self.folder, zk::AddWatchMode::PersistentRecursive)
            .await
        {
            Ok(watcher) => watcher,
            Err(error) => {
                self.lost();
                // ZooKeeper before 3.6 has no persistent watches: this would go on for ever.
                tracing::warn!(%error, "ZooKeeper: cannot watch the events of other servers yet");
                return tokio::time::sleep(RETRY).await;
            }
        };
        // Set before the listing: a node made in between is in both, and read once, since
        // only those after the last read are.
        if let Err(error) = self.catch_up(client).await {
            self.lost();
            tracing::debug!(%error, "ZooKeeper: cannot list the events yet");
            return tokio::time::sleep(RETRY).await;
        }
        loop {
            let event = watcher.changed().await;
            match (event.event_type, event.session_state) {
                (zk::EventType::Session, zk::SessionState::Disconnected) => self.lost(),
                // Connected again (the watch is not), or the session is over (its watcher
                // hears nothing more): set it again, on a new session if need be.
                (zk::EventType::Session, state) if state.is_terminated() => return self.lost(),
                (
                    zk::EventType::Session,
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly,
                ) => {
                    return;
                }
                (zk::EventType::NodeCreated, _) => {
                    let name = event.path.rsplit('/').next().unwrap_or_default();
                    if let Some(node) = Node::parse(name)
                        && let Err(error) = self.hand(client, node).await
                    {
                        self.lost();
                        tracing::debug!(%error, "ZooKeeper: an event node is not read yet");
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// Notes that nodes may be made from now on that the watch does not name.
    fn lost(&mut self) {
        self.lost_at.get_or_insert_with(Instant::now);
    }

    /// Lists the events node and reads every node after the last read, in sequence order.
    /// If the watch was lost for so long that nodes made meanwhile may have been deleted
    /// before this listing, the feed is first told that some may have been missed.
    async fn catch_up(&mut self, client: &zk::Client) -> Result<(), ZkError> {
        let children = client
            .list_children(&self.folder)
            .await
            .map_err(ZkError::request("list the events"))?;
        let nodes: Vec<Node> = children.iter().filter_map(|name| Node::parse(name)).collect();
        let last = self.last;
        // A node made just after the connection was lost lives at least KEEP; the client
        // may take up to its session's timeout to notice the loss.
        if self
            .lost_at
            .is_some_and(|at| at.elapsed() + client.session_timeout() >= KEEP)
        {
            tracing::warn!("ZooKeeper: events of other servers may have been deleted before they were read");
            self.feed.missed();
            self.lost_at = None;
        }
        let mut new: Vec<Node> = nodes.into_iter().filter(|node| node.after(last) > 0).collect();
        new.sort_by_key(|node| node.after(last));
        for node in new {
            self.hand(client, node).await?;
        }
        self.lost_at = None;
        Ok(())
    }

    /// Reads `node` and hands on its bulletins, unless it is this server's or was read. A node
    /// gone already, or that cannot be read, tells the feed that some were missed; any other
    /// failure leaves it to be read again.
    async fn hand(&mut self, client: &zk::Client, node: Node) -> Result<(), ZkError> {
        if node.after(self.last) <= 0 {
            return Ok(());
        }
        if !self.own.contains(node.origin) {
            let path = format!("{}/{}", self.folder, node.name);
            match client.get_data(&path).await {
                Ok((data, _)) => self.hand_data(&path, &data),
                // Deleted already: older than its writer keeps them (this server fell
                // behind), or its writer's session ended.
                Err(zk::Error::NoNode) => {
                    tracing::warn!(
                        path,
                        "an event node of another server was gone before it was read"
                    );
                    self.feed.missed();
                }
                Err(error) => return Err(ZkError::request("read events")(error)),
            }
        }
        self.last = node.sequence;
        Ok(())
    }

    /// Hands on the bulletins of a node's `data`.
    fn hand_data(&self, path: &str, data: &[u8]) {
        let Ok(lines) = serde_json::from_slice::<Vec<String>>(data) else {
            tracing::warn!(path, "an event node that cannot be read");
            return self.feed.missed();
        };
        for line in lines {
            match Bulletin::decode(&line) {
                Some(bulletin) => self.feed.hand(bulletin),
                None => {
                    tracing::warn!(path, "an event that cannot be read");
                    self.feed.missed();
                }
            }
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
            // Too large for a request: left out (the others see the gap in 1's numbers).
            bulletin(1, 6, REQUEST_BYTES),
            bulletin(1, 7, 10),
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
                (1, vec![(1, 7)]),
            ]
        );
    }

    #[test]
    fn a_node_holds_at_most_its_bytes_as_written() {
        // Quotes written escaped take twice their bytes.
        let quoted = |seq| Bulletin {
            origin: 1,
            seq,
            body: "\"".repeat(1000),
        };
        let batch: Vec<Bulletin> = (1..=300).map(quoted).collect();
        let nodes = nodes(&batch);
        assert!(nodes.len() > 1, "{} nodes", nodes.len());
        for (_, data) in &nodes {
            assert!(data.len() <= NODE_BYTES, "{} bytes", data.len());
        }
        let seqs: Vec<u64> = nodes
            .iter()
            .flat_map(|(_, data)| decoded(data))
            .map(|(_, seq)| seq)
            .collect();
        assert_eq!(seqs, (1..=300).collect::<Vec<_>>());
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

    #[test]
    fn sequences_are_ordered_across_the_counters_wrap() {
        // ZooKeeper writes the counter with "%010d": past 2^31 - 1 it goes negative.
        let before = Node::parse("e-1-2147483646").unwrap();
        let last = Node::parse("e-1-2147483647").unwrap();
        let wrapped = Node::parse("e-2--2147483648").unwrap();
        let next = Node::parse("e-1--2147483647").unwrap();
        assert!(wrapped.after(last.sequence) > 0);
        assert!(next.after(wrapped.sequence) > 0);
        assert!(before.after(last.sequence) < 0);
        let mut listed = vec![next.clone(), before.clone(), wrapped.clone(), last.clone()];
        listed.sort_by_key(|node| node.after(before.sequence));
        assert_eq!(listed, [before, last, wrapped, next]);
    }
}
