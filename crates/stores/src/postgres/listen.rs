//! The connection that listens for release notices (`LISTEN`/`NOTIFY`) and feeds them to
//! waiters.

use std::time::Duration;

use fencelock_core::store::Result;
use fencelock_core::{ReleaseFeed, Resource};
use tokio_postgres::{AsyncMessage, NoTls};

use super::STORE;
use super::error::PgError;
use crate::deadline::within;
use crate::remote::AbortOnDrop;

/// The notification channel of releases; the payload is the resource name.
const CHANNEL: &str = "fencelock_released";

/// How often the listening connection checks that the server still answers.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// Opens a connection that listens on [`CHANNEL`]. Returns the session: a future that passes
/// each released resource to `feed` until the connection is lost (closed, failing, or not
/// answering a heartbeat).
pub(super) async fn listen(
    config: tokio_postgres::Config,
    deadline: Duration,
    feed: ReleaseFeed,
) -> Result<impl Future<Output = ()> + Send + 'static> {
    const DOING: &str = "listen for releases";
    let (client, connection) = within(deadline, STORE, DOING, async {
        Ok(config.connect(NoTls).await.map_err(PgError::db(DOING))?)
    })
    .await?;
    let mut driver = AbortOnDrop(tokio::spawn(pass_notices(connection, feed)));
    within(deadline, STORE, DOING, async {
        Ok(client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
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

/// Drives the listening connection, passing the resource of each release notice to `feed`,
/// until the connection ends. Notices only come out of a connection driven by
/// `poll_message`: driving it as a plain future would drop them.
async fn pass_notices<S, T>(mut connection: tokio_postgres::Connection<S, T>, feed: ReleaseFeed)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
        match message {
            Ok(AsyncMessage::Notification(note)) if note.channel() == CHANNEL => {
                match Resource::new(note.payload()) {
                    Ok(resource) => feed.announce(&fencelock_core::Key::lock(&resource)),
                    Err(e) => tracing::warn!(payload = note.payload(), error = %e, "odd release notice"),
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the PostgreSQL listening connection failed");
                return;
            }
        }
    }
}
