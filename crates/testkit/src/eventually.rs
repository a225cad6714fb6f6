//! [`eventually`]: waiting for a state a test cannot be told of, by asking until it holds.

use std::time::Duration;

/// How often [`eventually`] asks again.
const POLL: Duration = Duration::from_millis(5);

/// Asks `check` until it gives a value, and returns it; fails the test, naming `what`, if it
/// has not within `limit`. For a state that comes about in the background (a node a call
/// reaches late, an undo sent after the answer), never a fixed sleep.
pub async fn eventually<T>(limit: Duration, what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually`] for a test that waits on the thread it runs on (a child process, a file,
/// a log line): asks `check` until it gives a value, and returns it; fails the test, naming
/// `what`, if it has not within `limit`.
pub fn eventually_blocking<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(POLL);
    }
}
