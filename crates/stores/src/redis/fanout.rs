//! Every call on every node at once, answered by the first nodes that settle it: a dead or
//! hung node is never waited for while a majority answers.
//!
//! The calls are driven by the caller, and every one of them is sent (handed to its node's
//! connection) on the first wait, before any answer can come back. So a node that is left
//! behind still gets every call in the order the store made them — a read after a renewal
//! sees the renewal on every node, however slowly one answers — and a call dropped before
//! its answer still runs on the node. A store makes its calls one after another on the
//! connection of each node, and a node carries them out in that order.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use super::error::{RedisError, Result};
use super::node::Node;
use super::reply::{Arg, Reply};

/// One node's call, read.
type Call<T> = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

/// The answers of the nodes to one call, as they come. Calls still under way when it is
/// dropped (the answers so far settled it) are finished in the background: a node that
/// answers late still gets the call.
pub(super) struct Answers<T: Send + 'static> {
    calls: Vec<Option<Call<T>>>,
    /// Each node's answer, `None` while it has not answered.
    pub(super) got: Vec<Option<Result<T>>>,
}

impl<T: Send + 'static> Answers<T> {
    /// Calls `op` with `args` on each node of `nodes` that `ask` allows (the others count as
    /// failed at once, with the reason `ask` gives), each within `timeout`, and reads each
    /// reply with `read`. Nothing is sent before the first wait.
    pub(super) fn start(
        nodes: &[Arc<Node>],
        (op, args): (&'static str, Arc<[Arg]>),
        timeout: Duration,
        ask: impl Fn(usize) -> Option<RedisError>,
        read: fn(Reply) -> Result<T>,
    ) -> Self {
        let mut calls: Vec<Option<Call<T>>> = Vec::with_capacity(nodes.len());
        let mut got = Vec::with_capacity(nodes.len());
        for (at, node) in nodes.iter().enumerate() {
            if let Some(why) = ask(at) {
                calls.push(None);
                got.push(Some(Err(why)));
                continue;
            }
            let (node, args) = (node.clone(), args.clone());
            calls.push(Some(Box::pin(async move {
                node.call(op, &args, timeout).await.and_then(read)
            })));
            got.push(None);
        }
        Self { calls, got }
    }

    /// Calls `op` with `args` on the one node there is: nothing to wait for in parallel.
    pub(super) async fn one(
        node: &Node,
        (op, args): (&'static str, &[Arg]),
        timeout: Duration,
        read: fn(Reply) -> Result<T>,
    ) -> Self {
        let answer = node.call(op, args, timeout).await.and_then(read);
        Self {
            calls: vec![None],
            got: vec![Some(answer)],
        }
    }
}

impl<T: Send + 'static> Drop for Answers<T> {
    fn drop(&mut self) {
        let running: Vec<Call<T>> = self.calls.iter_mut().filter_map(Option::take).collect();
        if !running.is_empty() {
            tokio::spawn(futures_util::future::join_all(running));
        }
    }
}

impl<T: Send + 'static> Answers<T> {
    /// How many nodes have not answered yet.
    pub(super) fn pending(&self) -> usize {
        self.got.iter().filter(|g| g.is_none()).count()
    }

    /// Waits for the next answers (driving every call still under way); `false` once every
    /// node has answered.
    pub(super) async fn next(&mut self) -> bool {
        if self.pending() == 0 {
            return false;
        }
        std::future::poll_fn(|cx| {
            let mut any = false;
            for (call, got) in self.calls.iter_mut().zip(&mut self.got) {
                if let Some(running) = call
                    && let Poll::Ready(answer) = running.as_mut().poll(cx)
                {
                    *got = Some(answer);
                    *call = None;
                    any = true;
                }
            }
            if any { Poll::Ready(()) } else { Poll::Pending }
        })
        .await;
        true
    }

    /// Waits for answers until `settled` says no further answer could change the outcome, or
    /// none is left to wait for.
    pub(super) async fn until(&mut self, mut settled: impl FnMut(&Self) -> bool) {
        while !settled(self) && self.next().await {}
    }

    /// The answers of the nodes that answered, by index.
    pub(super) fn answers(&self) -> impl Iterator<Item = (usize, &T)> {
        self.got.iter().enumerate().filter_map(|(at, g)| match g {
            Some(Ok(answer)) => Some((at, answer)),
            _ => None,
        })
    }

    /// The answers, taken out.
    pub(super) fn into_answers(mut self) -> Vec<T> {
        std::mem::take(&mut self.got)
            .into_iter()
            .filter_map(|g| g.and_then(Result::ok))
            .collect()
    }

    /// How many nodes answered (not failed, not pending).
    pub(super) fn answered(&self) -> usize {
        self.got.iter().filter(|g| matches!(g, Some(Ok(_)))).count()
    }

    /// [`RedisError::NoMajority`] if fewer than `quorum` nodes answered, naming one failure.
    pub(super) fn majority(&mut self, quorum: usize, doing: &'static str) -> Result<()> {
        if self.answered() >= quorum {
            return Ok(());
        }
        let nodes = self.got.len();
        let answered = self.answered();
        let example = self.got.iter_mut().find_map(|g| match g.take() {
            Some(Err(e)) => Some(Box::new(e)),
            other => {
                *g = other;
                None
            }
        });
        Err(RedisError::NoMajority {
            doing,
            answered,
            nodes,
            example,
        })
    }
}
