//! One Redis node: its connection and the script ([`fencelock.lua`](self)).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{ErrorKind, ServerErrorKind, Value};
use tokio::sync::OnceCell;

use super::error::{RedisError, Result};
use super::reply::{Arg, Reply};

/// The script of every operation, loaded once per node and called by its SHA (loaded again
/// by the driver when the node answers `NOSCRIPT`, e.g. after a restart).
static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(include_str!("fencelock.lua")));

/// One Redis node, connected on first use and reconnected by the driver whenever the
/// connection is lost; every call has a timeout. Every call is sent, even to a node that
/// failed a moment ago: under Redlock a majority decides without waiting for it (see
/// `fanout`), and a node that answers late must still get every change, in order.
pub(super) struct Node {
    /// `host:port`, for messages.
    pub(super) address: String,
    client: redis::Client,
    connection: OnceCell<ConnectionManager>,
    timeout: Duration,
    prefix: String,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Node {
    pub(super) fn new(address: &str, prefix: &str, timeout: Duration) -> Result<Self> {
        let client = redis::Client::open(format!("redis://{address}"))
            .map_err(|e| RedisError::Invalid(format!("Redis node {address:?}: {e}")))?;
        Ok(Self {
            address: address.to_owned(),
            client,
            connection: OnceCell::new(),
            timeout,
            prefix: prefix.to_owned(),
        })
    }

    /// Connects in a task of its own, trying again until the node answers: so a connection
    /// does not depend on a call that may be dropped before it is made (a majority answered
    /// without this node), and a node that comes back is connected to without being asked.
    pub(super) fn connect_in_background(self: &Arc<Self>) {
        let node = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(50);
            while let Some(node) = node.upgrade() {
                if node.connection("connect").await.is_ok() {
                    return;
                }
                drop(node);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        });
    }

    /// The driver's client, for subscriptions.
    pub(super) fn client(&self) -> &redis::Client {
        &self.client
    }

    /// The start of every key of the store on this node.
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The channel where the script announces freed names.
    pub(super) fn channel(&self) -> String {
        format!("{}released", self.prefix)
    }

    /// The channel where servers publish their events.
    pub(super) fn event_channel(&self) -> String {
        format!("{}events", self.prefix)
    }

    /// Publishes each of `payloads` on [`Node::event_channel`], in order, in one round trip.
    pub(super) async fn publish(&self, payloads: &[String]) -> Result<()> {
        let channel = self.event_channel();
        let mut pipe = redis::pipe();
        for payload in payloads {
            pipe.cmd("PUBLISH").arg(&channel).arg(payload).ignore();
        }
        self.guarded("publish", self.timeout, async |connection| {
            pipe.query_async::<()>(connection).await
        })
        .await
    }

    async fn connection(&self, doing: &'static str) -> Result<ConnectionManager> {
        let connect = || async {
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(self.timeout))
                .set_response_timeout(Some(self.timeout))
                .set_number_of_retries(0);
            redis::aio::ConnectionManager::new_with_config(self.client.clone(), config)
                .await
                .map_err(|source| self.driver(doing, source))
        };
        self.connection.get_or_try_init(connect).await.cloned()
    }

    fn driver(&self, doing: &'static str, source: redis::RedisError) -> RedisError {
        RedisError::Driver {
            node: self.address.clone(),
            doing,
            source,
        }
    }

    /// Runs operation `op` of the script with `args` within `timeout` (at most the node's
    /// own); the reply after its first item, the node's time.
    pub(super) async fn call(&self, op: &'static str, args: &[Arg], timeout: Duration) -> Result<Reply> {
        // `EVALSHA` built here rather than through the driver's `ScriptInvocation`, which
        // copies every argument into a buffer of its own and then again into the command.
        let mut evalsha = redis::Cmd::with_capacity(args.len() + 5, 64 + args.len() * 16);
        evalsha
            .arg("EVALSHA")
            .arg(SCRIPT.get_hash())
            .arg(1)
            .arg(&self.prefix)
            .arg(op);
        for arg in args {
            match arg {
                Arg::Text(text) => evalsha.arg(text),
                Arg::Bytes(bytes) => evalsha.arg(bytes),
                Arg::Number(n) => evalsha.arg(*n),
            };
        }
        let answer = self
            .guarded(op, timeout, async |connection| {
                match evalsha.query_async::<Vec<Value>>(connection).await {
                    // Not loaded on this node yet (or any more: a restart, `SCRIPT FLUSH`).
                    Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        SCRIPT.load_async(connection).await?;
                        evalsha.query_async(connection).await
                    }
                    answer => answer,
                }
            })
            .await?;
        Reply::new(&self.address, op, answer)
    }

    /// Answers if the node does.
    pub(super) async fn ping(&self) -> Result<()> {
        self.guarded("ping", self.timeout, async |connection| {
            redis::cmd("PING").query_async::<String>(connection).await
        })
        .await
        .map(drop)
    }

    /// `ask` on the node's connection within `timeout` (at most the node's own).
    async fn guarded<T>(
        &self,
        doing: &'static str,
        timeout: Duration,
        ask: impl AsyncFnOnce(&mut ConnectionManager) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let timeout = timeout.min(self.timeout);
        let asked = async {
            let mut connection = self.connection(doing).await?;
            ask(&mut connection)
                .await
                .map_err(|source| self.driver(doing, source))
        };
        tokio::time::timeout(timeout, asked).await.unwrap_or_else(|_| {
            Err(RedisError::Timeout {
                node: self.address.clone(),
                doing,
                timeout,
            })
        })
    }
}
