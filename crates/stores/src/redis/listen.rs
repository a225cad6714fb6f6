//! Hearing other servers' releases: a subscription to the release channel of every node.

use std::time::Duration;

use fencelock_core::{Key, ReleaseFeed, StoreError};
use futures_util::StreamExt;

use crate::deadline::within;

use super::STORE;
use super::reply::notice;

/// A subscription to a node's release channel: feeds `feed` until the connection is lost.
pub(super) type Listening = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Subscribes to `channel` on the node of `client` within `timeout`; the future that then
/// feeds `feed`.
pub(super) async fn listen(
    client: redis::Client,
    channel: String,
    feed: ReleaseFeed,
    timeout: Duration,
) -> fencelock_core::store::Result<Listening> {
    let unavailable = |e| StoreError::unavailable("Redis: subscribing to releases", e);
    let subscribing = async {
        let mut pubsub = client.get_async_pubsub().await.map_err(unavailable)?;
        pubsub.subscribe(&channel).await.map_err(unavailable)?;
        Ok(pubsub)
    };
    let pubsub = within(timeout, STORE, "subscribe to releases", subscribing).await?;
    Ok(Box::pin(async move {
        let mut messages = pubsub.into_on_message();
        while let Some(message) = messages.next().await {
            if let Ok(text) = message.get_payload::<String>()
                && let Some((kind, name)) = notice(&text)
            {
                feed.announce(&Key { kind, name });
            }
        }
    }))
}
