//! [`detached`]: a call to the store that runs to its end whatever becomes of its request.

use fencelock_wire::ProblemKind;

use crate::problem::ApiError;

/// Runs `work` — a call to the store, with its logging and counting — in a task of its own,
/// and waits for it. When a client hangs up, hyper drops the request's future; `work` still
/// runs to its end, so that nothing the store committed goes unannounced, unlogged or
/// uncounted.
pub(super) async fn detached<T: Send + 'static>(
    work: impl Future<Output = Result<T, ApiError>> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::spawn(work).await {
        Ok(answer) => answer,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(_) => Err(ApiError::Problem(
            ProblemKind::Unavailable,
            "the server is shutting down".into(),
        )),
    }
}
