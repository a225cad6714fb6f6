//! The connection that listens for release notices (`LISTEN`/`NOTIFY`) and feeds them to
//! waiters, and for the events of other servers ([`EVENT_CHANNEL`]).

use std::time::Duration;

use fencelock_core::store::Result;
use fencelock_core::{Bulletin, BulletinFeed, Key, Kind, ReleaseFeed, Resource};
use tokio_postgres::{AsyncMessage, NoTls};

use super::STORE;
use super::error::PgError;
use super::notify::OwnSession;
use super::row::hold_kind;
use crate::deadline::within;
use crate::subscription::AbortOnDrop;

/// The notification channel of locks freed; the payload is the resource name. Servers of
/// every version listen on it.
const CHANNEL: &str = "fencelock_released";

/// The notification channel of semaphores and read-write locks freed (since schema version
/// 2, whose functions notify it); the payload is `kind:name`, e.g. `rwlock:reports`. A
/// channel of its own, so that servers of the previous version, which read every payload of
/// [`CHANNEL`] as a lock's name, are not woken for names that are not locks.
const HOLD_CHANNEL: &str = "fencelock_hold_released";

/// The notification channel of servers' events (`GET /events`); the payload is a
/// [`Bulletin`], encoded.
pub(super) const EVENT_CHANNEL: &str = "fencelock_events";

/// Where the listening connection hands what it hears.
#[derive(Debug, Clone)]
pub(super) struct Feeds {
    /// Names freed.
    pub(super) released: ReleaseFeed,
    /// Other servers' events.
    pub(super) bulletins: BulletinFeed,
}

/// How often the listening connection checks that the server still answers.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// Opens a connection that listens on [`CHANNEL`], [`HOLD_CHANNEL`] and [`EVENT_CHANNEL`].
/// Returns the session: a future that passes each freed name and each event to `feeds`
/// until the connection is lost (closed, failing, or not answering a heartbeat). Notices of
/// `own` session, which the store told its feed itself (and the server's events, which it
/// has), are passed over.
pub(super) async fn listen(
    config: tokio_postgres::Config,
    deadline: Duration,
    feed: Feeds,
    own: OwnSession,
) -> Result<impl Future<Output = ()> + Send + 'static> {
    const DOING: &str = "listen for releases";
    let (client, connection) = within(deadline, STORE, DOING, async {
        Ok(config.connect(NoTls).await.map_err(PgError::db(DOING))?)
    })
    .await?;
    let mut driver = AbortOnDrop(tokio::spawn(pass_notices(connection, feed, own)));
    within(deadline, STORE, DOING, async {
        Ok(client
            .batch_execute(&format!(
                "LISTEN {CHANNEL}; LISTEN {HOLD_CHANNEL}; LISTEN {EVENT_CHANNEL}"
            ))
            .await
            .map_err(PgError::db(DOING))?)
    })
    .await?;
    Ok(async move {
        loop {
            tokio::select! {
                // The connection ended.
                _ = &mut driver.0 => return,
                () = tokio::time::sleep(HEARTBEAT) => {
                    // A connection can hang without closing (a network cut): if the server
                    // does not answer, give it up (dropping `driver` closes it).
                    let alive = tokio::time::timeout(deadline, client.simple_query("")).await;
                    if !matches!(alive, Ok(Ok(_))) {
                        return;
                    }
                }
            }
        }
    })
}

/// Drives the listening connection, passing the name of each release notice and each event
/// but `own` session's to `feeds`, until the connection ends. Notices only come out of a
/// connection driven by `poll_message`: driving it as a plain future would drop them.
async fn pass_notices<S, T>(mut connection: tokio_postgres::Connection<S, T>, feeds: Feeds, own: OwnSession)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
        match message {
            Ok(AsyncMessage::Notification(note)) if own.sent(note.process_id()) => {}
            Ok(AsyncMessage::Notification(note)) if note.channel() == EVENT_CHANNEL => {
                match Bulletin::decode(note.payload()) {
                    Some(bulletin) => feeds.bulletins.hand(bulletin),
                    None => tracing::warn!(payload = note.payload(), "odd event notice"),
                }
            }
            Ok(AsyncMessage::Notification(note)) => match freed(note.channel(), note.payload()) {
                Some(key) => feeds.released.announce(&key),
                None => tracing::warn!(
                    channel = note.channel(),
                    payload = note.payload(),
                    "odd release notice"
                ),
            },
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the PostgreSQL listening connection failed");
                return;
            }
        }
    }
}

/// The channel and the payload of the notice that `key` may be free: what [`freed`] reads.
pub(super) fn notice(key: &Key) -> (&'static str, String) {
    match key.kind {
        Kind::Lock => (CHANNEL, key.name.as_str().to_owned()),
        kind => (HOLD_CHANNEL, format!("{}:{}", kind.as_str(), key.name.as_str())),
    }
}

/// The name a notice on `channel` says may be free.
fn freed(channel: &str, payload: &str) -> Option<Key> {
    match channel {
        CHANNEL => Resource::new(payload).ok().map(|resource| Key::lock(&resource)),
        HOLD_CHANNEL => {
            // Kinds have no colon; names may.
            let (kind, name) = payload.split_once(':')?;
            Some(Key::hold(hold_kind(kind)?, &Resource::new(name).ok()?))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use fencelock_core::HoldKind;

    use super::*;

    #[test]
    fn notices_name_a_lock_or_a_kind_and_a_name() {
        let name = |text: &str| Resource::new(text).unwrap();
        assert_eq!(freed(CHANNEL, "a:b"), Some(Key::lock(&name("a:b"))));
        assert_eq!(
            freed(HOLD_CHANNEL, "rwlock:a:b"),
            Some(Key::hold(HoldKind::RwLock, &name("a:b")))
        );
        assert_eq!(
            freed(HOLD_CHANNEL, "semaphore:x"),
            Some(Key::hold(HoldKind::Semaphore, &name("x")))
        );
        for odd in ["lock:x", "rwlock", "rwlock:", "mutex:x"] {
            assert_eq!(freed(HOLD_CHANNEL, odd), None, "{odd}");
        }
        assert_eq!(freed("elsewhere", "x"), None);
        assert_eq!(freed(CHANNEL, ""), None);
    }

    #[test]
    fn a_notice_reads_back_as_the_name_it_announces() {
        let name = Resource::new("a:b").unwrap();
        for key in [
            Key::lock(&name),
            Key::hold(HoldKind::RwLock, &name),
            Key::hold(HoldKind::Semaphore, &name),
        ] {
            let (channel, payload) = notice(&key);
            assert_eq!(freed(channel, &payload), Some(key));
        }
    }
}
