//! The spinner shown while `acquire --wait` or `run` waits for a busy lock: who holds it, and
//! when that lease ends. Only on a terminal: scripts see nothing on standard error.

use std::io::IsTerminal;
use std::time::Duration;

use fencelock_client::{Client, Resource};
use indicatif::ProgressBar;
use tokio::time::{Instant, sleep_until};

use super::common::describe;

/// How often the holder is looked up while waiting.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Runs `acquiring` (which may wait up to `wait`), showing a spinner that says who holds
/// `resource` until it completes.
///
/// The holder is looked up beside the waiting request rather than by waking it up: a waiter
/// that asked again would lose its place in the server's line.
pub async fn while_waiting<T>(
    client: &Client,
    resource: &Resource,
    wait: Duration,
    acquiring: impl Future<Output = T>,
) -> T {
    if wait.is_zero() || !std::io::stderr().is_terminal() {
        return acquiring.await;
    }
    let spinner = Spinner(ProgressBar::new_spinner());
    spinner.0.set_message(format!("acquiring {resource}"));
    spinner.0.enable_steady_tick(Duration::from_millis(100));
    let mut acquiring = std::pin::pin!(acquiring);
    let mut next_look = Instant::now();
    // The spinner clears itself when dropped, after the loop gives the outcome.
    loop {
        tokio::select! {
            outcome = &mut acquiring => break outcome,
            () = sleep_until(next_look) => {}
        }
        let message = tokio::select! {
            outcome = &mut acquiring => break outcome,
            holder = client.get(resource) => match holder {
                Ok(Some(lease)) => format!("waiting: {}", describe(&lease)),
                Ok(None) => format!("waiting: {resource} is being handed over"),
                Err(error) => format!("waiting for {resource}: {error}"),
            },
        };
        spinner.0.set_message(message);
        next_look = Instant::now() + LOOK_EVERY;
    }
}

/// Clears the spinner however the wait ends: done, or cancelled (Ctrl-C while waiting).
struct Spinner(ProgressBar);

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
