//! The notifier: one session per store that announces what the store's calls freed, and the
//! server's events ([`Bulletin`]s), in batches, so that no call's own transaction runs
//! `NOTIFY`.
//!
//! PostgreSQL takes a lock of the whole cluster for `NOTIFY` from a transaction's pre-commit
//! until its commit is flushed, so every notifying transaction commits alone: group commit is
//! lost, and every other commit waits behind it (docs/PERFORMANCE.md, "Where PostgreSQL's
//! time goes"). So the calls commit without it and hand the names they freed to this
//! session, which announces everything handed in while it was busy in one transaction, with
//! `synchronous_commit = off`: it waits for no flush, so it holds that lock only briefly.
//!
//! A notice is no data. One lost — in a crash between a call's commit and its batch, or when
//! the batch cannot be sent — costs a waiter on another server only its early wake-up: it
//! still asks again when the lease it waits for would have expired, the time the store told
//! it (a lease renewed shorter: when the longer one would have). Waiters on this server do
//! not wait for the round trip: the store tells its own feed first, and the listener passes
//! over this session's notices.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fencelock_core::{Bulletin, Key};
use tokio::sync::Notify;
use tokio_postgres::{Client, NoTls};

use super::error::PgError;
use super::listen::{EVENT_CHANNEL, notice};
use crate::subscription::AbortOnDrop;

/// The most notices sent in one transaction (a name freed is one of at most a name's
/// length): enough to take a whole purge batch, few enough to keep the statement short.
const BATCH: usize = 1024;

/// The longest payload PostgreSQL takes in a notice (8000 bytes, less a margin).
const MAX_PAYLOAD: usize = 7900;

/// Announces one batch: a notice per name, in one statement, so one transaction.
const ANNOUNCE: &str = "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n(c, p)";

/// Hands the names freed by the store's calls to the notifying session; see the module docs.
#[derive(Debug)]
pub(super) struct Notifier {
    queue: Arc<Queue>,
    // Stops the session when the store is dropped.
    _task: AbortOnDrop,
}

/// A notice: its channel and payload.
type Notice = (&'static str, String);

/// The notices waiting for the next batch, and the session that sends them.
#[derive(Debug, Default)]
struct Queue {
    // Held only to push or take notices, never across an `.await`.
    names: Mutex<Vec<Notice>>,
    ready: Notify,
}

impl Queue {
    /// Takes up to [`BATCH`] notices, the first handed in first.
    fn take(&self) -> Vec<Notice> {
        let mut names = lock(&self.names);
        let at = names.len().min(BATCH);
        let rest = names.split_off(at);
        std::mem::replace(&mut *names, rest)
    }
}

/// The backend process of the notifying session (0 before it first connects): the listener
/// passes over its notices, which the store already told its own feed.
#[derive(Debug, Clone, Default)]
pub(super) struct OwnSession(Arc<AtomicI32>);

impl OwnSession {
    /// Whether a notice from the backend process `pid` is this store's own.
    pub(super) fn sent(&self, pid: i32) -> bool {
        pid != 0 && self.0.load(Ordering::Relaxed) == pid
    }
}

impl Notifier {
    /// Starts the notifying session of a store connecting with `config`; a call that takes
    /// longer than `deadline` is given up. The session connects when it first has something
    /// to say, and again after a failure.
    pub(super) fn start(config: &tokio_postgres::Config, deadline: Duration, own: OwnSession) -> Self {
        let mut config = config.clone();
        // A notice is not data (see the module docs): its commit need not wait for a flush,
        // whatever the address asks of the store's other sessions.
        let options = format!("{} -c synchronous_commit=off", config.get_options().unwrap_or(""));
        config.options(options.trim_start());
        let queue = Arc::new(Queue::default());
        let task = tokio::spawn(announce(config, deadline, queue.clone(), own));
        Self {
            queue,
            _task: AbortOnDrop(task),
        }
    }

    /// Hands `names` to the next batch.
    pub(super) fn hand(&self, names: Vec<Key>) {
        if names.is_empty() {
            return;
        }
        lock(&self.queue.names).extend(names.iter().map(notice));
        self.queue.ready.notify_one();
    }

    /// Hands `bulletin` to the next batch, after everything handed in before it. One too
    /// long for a notice (an event with a lease's largest metadata is far from it) is
    /// dropped and logged.
    pub(super) fn tell(&self, bulletin: &Bulletin) {
        let payload = bulletin.encode();
        if payload.len() > MAX_PAYLOAD {
            tracing::warn!(
                bytes = payload.len(),
                "an event too long for a PostgreSQL notice is not told to other servers"
            );
            return;
        }
        lock(&self.queue.names).push((EVENT_CHANNEL, payload));
        self.queue.ready.notify_one();
    }
}

/// Locks `names`; a panic while holding it (there is none: pushes and takes) leaves a list
/// that is still whole.
fn lock(names: &Mutex<Vec<Notice>>) -> MutexGuard<'_, Vec<Notice>> {
    names.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The notifying session: waits for names, then announces them a batch at a time until none
/// is left. A batch that fails is tried once more on a new connection, then given up.
async fn announce(config: tokio_postgres::Config, deadline: Duration, queue: Arc<Queue>, own: OwnSession) {
    let mut session: Option<Session> = None;
    loop {
        queue.ready.notified().await;
        loop {
            let batch = queue.take();
            if batch.is_empty() {
                break;
            }
            let names = batch.len();
            let (channels, payloads): (Vec<&str>, Vec<String>) = batch.into_iter().unzip();
            for attempt in 1..=2 {
                let sent = tokio::time::timeout(deadline, async {
                    if session.is_none() {
                        session = Some(Session::open(&config, &own).await?);
                    }
                    let client = &session.as_ref().expect("opened just above").client;
                    client
                        .execute(ANNOUNCE, &[&channels, &payloads])
                        .await
                        .map_err(PgError::db("announce releases"))
                })
                .await;
                match sent {
                    Ok(Ok(_)) => break,
                    failed => {
                        session = None;
                        let error = match failed {
                            Ok(Err(e)) => e.to_string(),
                            _ => "no answer in time".to_owned(),
                        };
                        tracing::warn!(
                            attempt,
                            names,
                            %error,
                            "announcing releases on PostgreSQL failed"
                        );
                    }
                }
            }
        }
    }
}

/// A connection of the notifying session, driven by a task of its own.
struct Session {
    client: Client,
    _driver: AbortOnDrop,
}

impl Session {
    /// Connects, and records the session's backend process in `own`.
    async fn open(config: &tokio_postgres::Config, own: &OwnSession) -> Result<Self, PgError> {
        const DOING: &str = "connect to announce releases";
        let (client, connection) = config.connect(NoTls).await.map_err(PgError::db(DOING))?;
        let driver = AbortOnDrop(tokio::spawn(async move {
            let _ = connection.await;
        }));
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(PgError::db(DOING))?;
        own.0.store(pid, Ordering::Relaxed);
        Ok(Self {
            client,
            _driver: driver,
        })
    }
}
