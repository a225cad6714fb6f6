//! [`detached`]: a call to the store that runs to its end whatever becomes of its request.

use std::pin::Pin;
use std::task::{Context, Poll};

use crate::problem::ApiError;

/// Runs `work` — a call to the store, with its logging and counting — to its end whatever
/// becomes of its request. While the request lasts, `work` runs in the request's own task: no
/// task is spawned and no thread wakes another for an answer (what every call used to pay).
/// When a client hangs up, hyper drops the request's future; only then is what is left of
/// `work` moved to a task of its own, so that nothing the store committed goes unannounced,
/// unlogged or uncounted.
///
/// `work` is boxed here, when it is made: the future returned is a pointer, so the request's
/// future, which holds it, stays small (it is moved whole, into a box of axum's, and held
/// whole by every future around it).
pub(super) fn detached<T: Send + 'static>(
    work: impl Future<Output = Result<T, ApiError>> + Send + 'static,
) -> impl Future<Output = Result<T, ApiError>> + Send + Unpin {
    Outliving(Some(Box::pin(work)))
}

/// A future that, dropped before its end, goes on in a task of its own. Boxed from the start
/// (one allocation, what a spawned task's cell cost), so that it can move once polled.
struct Outliving<F: Future<Output: Send + 'static> + Send + 'static>(Option<Pin<Box<F>>>);

impl<F: Future<Output: Send + 'static> + Send + 'static> Future for Outliving<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // `Outliving` is `Unpin` (it holds the work by its box): it may be borrowed mutably.
        let Some(work) = self.0.as_mut() else {
            // Polled after its end: a future may then stay pending (only `.await` polls this
            // one, and it stops at the end).
            return Poll::Pending;
        };
        let answer = std::task::ready!(work.as_mut().poll(cx));
        self.0 = None;
        Poll::Ready(answer)
    }
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Drop for Outliving<F> {
    fn drop(&mut self) {
        let Some(work) = self.0.take() else {
            return;
        };
        // Outside a runtime (one being torn down) nothing could run it any more.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(work);
        }
    }
}
