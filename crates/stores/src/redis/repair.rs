//! Bringing a Redlock node that lost its data up to date before it counts again.
//!
//! A node restarted without persistence comes back empty: it has forgotten the leases and
//! the token counters of every grant it took part in. Were it to vote at once, a majority of
//! it and the nodes that missed a grant could grant a held lock again, or propose a token
//! below one already issued (a grant of tokens 7 on nodes A and B; B restarts empty; B and C,
//! which never saw 7, would agree on less). Redlock's answer is a "delayed restart": keep the
//! node out for longer than the longest TTL. Here it is kept out until it is brought up to
//! date instead, which is both safe and quick:
//!
//! - Every node that keeps Redlock's state has the key `P node` (`mark`). A grant on a node
//!   without it is refused there (`unmarked`), and a proposal ignores its counters, so it
//!   counts for nothing.
//! - A server that finds such a node while others have the key copies into it what the others
//!   keep — every token counter (the greater wins), every live lease and hold — from at least
//!   `N − quorum + 1` of the other nodes, so that at least one node of every majority that
//!   granted anything with it is read; then marks it. (Where other nodes lost their data too,
//!   every node that kept its data is read: there is no more to be had.)
//! - Grants made while it is brought up to date need it not: their majority is of the others,
//!   which keep their data.
//!
//! While fewer than that answer, the node stays out (and with it, maybe, the majority):
//! unavailable, never unsafe.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::error::{RedisError, Result};
use super::node::Node;
use super::redlock::Nodes;
use super::reply::{Arg, Reply};

/// How many keys one step of the copy reads.
const BATCH: u64 = 500;

/// The pause before trying again to bring a node up to date, doubled each time up to
/// [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(5);

impl Nodes {
    /// Brings node `at` up to date from the others and marks it, trying again until it can.
    pub(super) async fn repair(self: Arc<Self>, at: usize) {
        let mut pause = FIRST_PAUSE;
        loop {
            match self.bring_up_to_date(at).await {
                Ok(()) => {
                    self.amnesiac[at].store(false, Ordering::Release);
                    tracing::info!(node = %self.list[at].address, "Redis: a Redlock node that lost its data is up to date and takes part again");
                    return;
                }
                Err(e) => {
                    tracing::warn!(node = %self.list[at].address, error = %e, "Redis: bringing a Redlock node up to date failed; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            }
        }
    }

    async fn bring_up_to_date(&self, at: usize) -> Result<()> {
        let into = &self.list[at];
        let sources: Vec<&Arc<Node>> = (0..self.list.len())
            .filter(|i| *i != at && !self.amnesiac[*i].load(Ordering::Acquire))
            .map(|i| &self.list[i])
            .collect();
        // Others that lost their data too have nothing to give: then every node that kept its
        // data is read, and that is all there is.
        let needed = (self.list.len() - self.quorum + 1).min(sources.len());
        let mut copied = 0;
        let mut failure = None;
        for source in sources {
            match self.copy(source, into).await {
                Ok(()) => copied += 1,
                Err(e) => failure = Some(Box::new(e)),
            }
        }
        if copied < needed {
            return Err(RedisError::NoMajority {
                doing: "bring a node up to date",
                answered: copied,
                nodes: needed,
                example: failure,
            });
        }
        into.call("mark", &[], self.timeout).await.map(drop)
    }

    /// Copies what `source` keeps into `into`, a batch of keys at a time.
    async fn copy(&self, source: &Node, into: &Node) -> Result<()> {
        let pattern = format!("{}*", glob_escape(source.prefix()));
        let mut cursor = String::from("0");
        loop {
            let args = [Arg::Text(cursor), Arg::text(&pattern), Arg::Number(BATCH)];
            let mut reply = source.call("export", &args, self.timeout).await?;
            cursor = reply.text()?;
            let items = reply.rest()?;
            if !items.is_empty() {
                into.call("adopt", &items, self.timeout).await?;
            }
            if cursor == "0" {
                return Ok(());
            }
        }
    }
}

/// `text` with the characters that SCAN's MATCH reads as a pattern escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

impl Reply {
    /// Every item left, as arguments to send on.
    fn rest(&mut self) -> Result<Vec<Arg>> {
        let mut items = Vec::new();
        while !self.is_empty() {
            items.push(self.arg()?);
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_matches_itself_alone() {
        assert_eq!(glob_escape("fencelock:"), "fencelock:");
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
