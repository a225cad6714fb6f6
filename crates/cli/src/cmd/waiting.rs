//! The spinner shown while `acquire --wait` or `run` waits for a busy lock, semaphore or
//! read-write lock: who holds it, and when that lease ends. Only on a terminal: scripts see
//! nothing on standard error.

use std::io::IsTerminal;
use std::time::Duration;

use fencelock_client::{Client, HoldKind, Kind, Resource};
use indicatif::ProgressBar;
use tokio::time::{Instant, sleep_until};

use super::common::{describe, describe_hold};

/// How often the holder is looked up while waiting.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Runs `acquiring` (which may wait up to `wait`), showing a spinner that says who holds
/// `names` (of `kind`; several locks are waited for together) until it completes.
///
/// The holders are looked up beside the waiting request rather than by waking it up: a
/// waiter that asked again would lose its place in the server's line.
pub async fn while_waiting<T>(
    client: &Client,
    kind: Kind,
    names: &[Resource],
    wait: Duration,
    acquiring: impl Future<Output = T>,
) -> T {
    if wait.is_zero() || !std::io::stderr().is_terminal() {
        return acquiring.await;
    }
    let spinner = Spinner(ProgressBar::new_spinner());
    let all: Vec<&str> = names.iter().map(Resource::as_str).collect();
    spinner.0.set_message(format!("acquiring {}", all.join(", ")));
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
            message = look_all(client, kind, names) => message,
        };
        spinner.0.set_message(message);
        next_look = Instant::now() + LOOK_EVERY;
    }
}

/// Who holds each of `names` of `kind` now, in words.
async fn look_all(client: &Client, kind: Kind, names: &[Resource]) -> String {
    let mut words = Vec::with_capacity(names.len());
    for name in names {
        words.push(look(client, kind, name).await);
    }
    words.join("; ")
}

/// Who holds `resource` of `kind` now, in words.
async fn look(client: &Client, kind: Kind, resource: &Resource) -> String {
    let holders = match kind {
        Kind::Lock => client
            .get(resource)
            .await
            .map(|lease| lease.map(|l| describe(&l))),
        Kind::Semaphore => holds(client, HoldKind::Semaphore, resource).await,
        Kind::RwLock => holds(client, HoldKind::RwLock, resource).await,
    };
    match holders {
        Ok(Some(holders)) => format!("waiting: {holders}"),
        Ok(None) => format!("waiting: {resource} is being handed over"),
        Err(error) => format!("waiting for {resource}: {error}"),
    }
}

/// The live holds of `resource`, in words (`None` if there are none).
async fn holds(
    client: &Client,
    kind: HoldKind,
    resource: &Resource,
) -> Result<Option<String>, fencelock_client::StoreError> {
    let holds = client.holds(kind, resource).await?;
    let words: Vec<String> = holds.iter().map(describe_hold).collect();
    Ok((!words.is_empty()).then(|| format!("{resource}: {}", words.join("; "))))
}

/// Clears the spinner however the wait ends: done, or cancelled (Ctrl-C while waiting).
struct Spinner(ProgressBar);

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
