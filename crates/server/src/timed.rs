//! [`Timed`]: the server's store, with the time of every call and every failure counted.

use std::sync::Arc;

use fencelock_core::store::Result;
use fencelock_core::{Call, Layer, Layered, LockStore, Names};
use tokio::time::Instant;

use crate::metrics::Metrics;

/// A [`LockStore`] that times each call to the store underneath and counts those that fail
/// (`fencelock_store_duration_seconds`, `fencelock_store_errors_total`). It wraps the store
/// under the waiters, so a waiting acquire counts each of its tries and never its wait.
pub type Timed = Layered<Arc<dyn LockStore>, Counted>;

/// The [`Layer`] of [`Timed`].
#[derive(Debug)]
pub struct Counted(pub Arc<Metrics>);

impl Layer for Counted {
    async fn around<T: Send>(
        &self,
        call: Call,
        _names: Names<'_>,
        inner: impl Future<Output = Result<T>> + Send,
    ) -> Result<T> {
        let started = Instant::now();
        let result = inner.await;
        self.0.store_call(call, started.elapsed(), result.is_err());
        result
    }
}
