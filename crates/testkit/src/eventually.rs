//! [`eventually`]: waiting for a state a test cannot be told of, by asking until it holds.

use std::fmt::Display;
use std::time::Duration;

/// How often [`eventually`] asks again.
const POLL: Duration = Duration::from_millis(5);

/// What a check gives [`eventually`]: the value waited for, or not yet. An `Option` says only
/// that; a `Result` says, in its `Err`, what was there instead, and a timeout names the last
/// one — a test that times out says what it saw, not only what it waited for.
pub trait Outcome {
    /// What the wait returns.
    type Value;
    /// The value, or what was seen instead of it (`None` if the check does not say).
    fn ready(self) -> Result<Self::Value, Option<String>>;
}

impl<T> Outcome for Option<T> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Outcome for Result<T, E> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.map_err(|seen| Some(seen.to_string()))
    }
}

/// Asks `check` until it gives a value, and returns it; fails the test, naming `what` (and
/// the last thing `check` saw instead, if it says), if it has not within `limit`. For a state
/// that comes about in the background (a node a call reaches late, an undo sent after the
/// answer), never a fixed sleep.
pub async fn eventually<R: Outcome>(
    limit: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> R,
) -> R::Value {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let seen = match check().await.ready() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() >= deadline {
            timed_out(limit, what, seen);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually`] for a test that waits on the thread it runs on (a child process, a file,
/// a log line): asks `check` until it gives a value, and returns it; fails the test, naming
/// `what` (and the last thing `check` saw instead, if it says), if it has not within `limit`.
pub fn eventually_blocking<R: Outcome>(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> R,
) -> R::Value {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let seen = match check().ready() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if std::time::Instant::now() >= deadline {
            timed_out(limit, what, seen);
        }
        std::thread::sleep(POLL);
    }
}

/// Fails the test that waited `limit` for `what`, with what it last `seen`.
fn timed_out(limit: Duration, what: &str, seen: Option<String>) -> ! {
    match seen {
        Some(seen) => panic!("timed out after {limit:?} waiting for {what}; last saw: {seen}"),
        None => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_returned_as_soon_as_the_check_gives_it() {
        let mut asked = 0;
        let value = eventually_blocking(Duration::from_secs(10), "the third try", || {
            asked += 1;
            if asked == 3 {
                Ok(asked)
            } else {
                Err(format!("try {asked}"))
            }
        });
        assert_eq!(value, 3);
    }

    #[test]
    #[should_panic(expected = "waiting for a seven; last saw: 6")]
    fn a_timeout_names_what_the_check_saw_last() {
        let mut asked = 0;
        eventually_blocking(Duration::from_millis(30), "a seven", || {
            asked = (asked + 1).min(6);
            if asked == 7 { Ok(()) } else { Err(asked) }
        });
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 30ms waiting for nothing")]
    async fn a_check_that_says_nothing_is_named_by_what_it_waited_for() {
        eventually(Duration::from_millis(30), "nothing", async || None::<()>).await;
    }
}
