//! The Redis store's own errors, turned into [`StoreError`] in one place.

use std::time::Duration;

use fencelock_core::StoreError;

/// The Redis store's result.
pub(super) type Result<T, E = RedisError> = std::result::Result<T, E>;

/// What went wrong in the Redis store.
#[derive(Debug, thiserror::Error)]
pub(super) enum RedisError {
    /// The driver failed talking to a node: it could not connect, or the connection broke.
    #[error("Redis {node}: {doing}: {source}")]
    Driver {
        node: String,
        doing: &'static str,
        #[source]
        source: redis::RedisError,
    },
    /// A node did not answer in time.
    #[error("Redis {node}: {doing}: no answer within {timeout:?}")]
    Timeout {
        node: String,
        doing: &'static str,
        timeout: Duration,
    },
    /// A Redlock node lost its data and counts for nothing until it is brought up to date.
    #[error("Redis {node}: the node lost its data and is being brought up to date")]
    Amnesiac { node: String },
    /// Fewer than a majority of the nodes answered.
    #[error("Redis: {doing}: {answered} of {nodes} nodes answered, fewer than a majority{}", example.as_ref().map(|e| format!(" (e.g. {e})")).unwrap_or_default())]
    NoMajority {
        doing: &'static str,
        answered: usize,
        nodes: usize,
        example: Option<Box<RedisError>>,
    },
    /// A node answered what the script never says, or keeps what the store cannot read.
    #[error("Redis {node}: {doing}: {what}")]
    Odd {
        node: String,
        doing: &'static str,
        what: String,
    },
    /// The address or the options cannot be used.
    #[error("{0}")]
    Invalid(String),
}

impl RedisError {
    /// A node's answer that the store cannot read.
    pub(super) fn odd(node: &str, doing: &'static str, what: impl Into<String>) -> Self {
        Self::Odd {
            node: node.to_owned(),
            doing,
            what: what.into(),
        }
    }
}

impl From<RedisError> for StoreError {
    fn from(error: RedisError) -> Self {
        let message = error.to_string();
        match error {
            // One node alone: its own failure says more than "no majority".
            RedisError::NoMajority {
                nodes: 1,
                example: Some(example),
                ..
            } => (*example).into(),
            RedisError::Driver { source, .. } => StoreError::unavailable(message, source),
            RedisError::Timeout { .. } | RedisError::Amnesiac { .. } | RedisError::NoMajority { .. } => {
                StoreError::Unavailable {
                    message,
                    source: None,
                }
            }
            RedisError::Odd { .. } => StoreError::Corrupt(message),
            RedisError::Invalid(_) => StoreError::Invalid(message),
        }
    }
}
