//! [`Deadline`]: any [`LockStore`], with a deadline on every call.

use std::fmt;
use std::time::Duration;

use fencelock_core::store::Result;
use fencelock_core::{Call, Layer, Layered, Names, StoreError};

/// A [`LockStore`](fencelock_core::LockStore) whose every call gives up with
/// [`StoreError::Unavailable`] after a deadline, so that no call hangs on a server that
/// stopped answering. The stores on a network server ([`crate::postgres`], [`crate::etcd`])
/// are opened wrapped in one.
///
/// A call that ran out of time may still take effect on the server: its outcome is unknown,
/// as the [`LockStore`](fencelock_core::LockStore) contract says of any `Err`.
pub type Deadline<S> = Layered<S, Within>;

/// The [`Layer`] of a [`Deadline`]: at most `limit` per call.
#[derive(Clone, Copy)]
pub struct Within {
    store: &'static str,
    limit: Duration,
}

impl Within {
    /// `limit` on each call; `store` names the store in error messages
    /// (`"PostgreSQL: acquire: no answer within 7s"`).
    pub fn new(store: &'static str, limit: Duration) -> Self {
        Self { store, limit }
    }
}

impl fmt::Debug for Within {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Within").field("limit", &self.limit).finish()
    }
}

impl Layer for Within {
    fn around<T: Send>(
        &self,
        call: Call,
        _names: Names<'_>,
        inner: impl Future<Output = Result<T>> + Send,
    ) -> impl Future<Output = Result<T>> + Send {
        within(self.limit, self.store, call.as_str(), inner)
    }
}

/// Runs `call`, or gives up with [`StoreError::Unavailable`] after `limit`. `store` and
/// `doing` name the store and the call, for the error message. Also used for the work of
/// opening a store, which is no store call.
pub(crate) async fn within<T>(
    limit: Duration,
    store: &str,
    doing: &str,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        Err(StoreError::Unavailable {
            message: format!("{store}: {doing}: no answer within {limit:?}"),
            source: None,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_call_with_no_answer_fails_naming_the_store_and_the_call() {
        let silent = std::future::pending::<Result<()>>();
        let error = Within::new("Silent", Duration::from_secs(7))
            .around(Call::Ping, Names::None, silent)
            .await
            .unwrap_err();
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error}");
        assert_eq!(
            error.to_string(),
            "store unavailable: Silent: ping: no answer within 7s"
        );
    }
}
