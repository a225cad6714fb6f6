//! The thread that owns the connection and the table, and commits what is queued in batches
//! (group commit).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use fencelock_core::store::Result;
use fencelock_core::{LockTable, ReleaseFeed, Timestamp};
use rusqlite::{Connection, params};
use tokio::sync::{mpsc, watch};

use super::clock::{StoreClock, recorded_uptime_ms};
use super::error::WriteError;
use super::row::{to_sql, write_hold, write_row};
use super::{Counters, Job, MAX_BATCH, Message};

/// The thread that owns the connection and the table.
pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) table: LockTable,
    pub(super) clock: StoreClock,
    /// The last token the file holds; written again only when the table's moves past it.
    pub(super) persisted_token: u64,
    /// The file's re-base shift, which every row written carries (see [`rebase`](super::clock::rebase)).
    pub(super) shift: i64,
    pub(super) counters: Arc<Counters>,
    pub(super) released: ReleaseFeed,
    pub(super) closed: watch::Sender<bool>,
}

impl Writer {
    pub(super) fn run(mut self, mut queue: mpsc::Receiver<Message>) {
        // Both kept from batch to batch: a batch allocates no list of its own.
        let mut messages = Vec::with_capacity(MAX_BATCH);
        let mut jobs = Vec::with_capacity(MAX_BATCH);
        // Blocks for the first operation, then takes whatever else is queued: the batch.
        while queue.blocking_recv_many(&mut messages, MAX_BATCH) > 0 {
            for message in messages.drain(..) {
                match message {
                    Message::Job(job) => jobs.push(job),
                    // Refuses new operations; those already queued are still taken.
                    Message::Close => queue.close(),
                }
            }
            self.run_batch(&mut jobs);
        }
        let Self { conn, closed, .. } = self;
        if let Err((_, error)) = conn.close() {
            tracing::warn!(%error, "closing the SQLite store failed");
        }
        closed.send_replace(true);
    }

    /// Applies, commits and answers `jobs`, leaving the list empty.
    pub(super) fn run_batch(&mut self, jobs: &mut Vec<Job>) {
        self.table.begin();
        let mut now = self.clock.now();
        for job in jobs.iter_mut() {
            now = self.clock.now();
            job.apply(&mut self.table, now);
        }
        let failure = match self.persist(now) {
            Ok(wrote) => {
                self.table.commit();
                if wrote {
                    self.counters.commits.fetch_add(1, Ordering::Relaxed);
                }
                // Announced here, once durable, whether or not each caller still listens.
                for key in self.table.take_freed() {
                    self.released.announce(&key);
                }
                None
            }
            Err(error) => {
                // The transaction was rolled back; the table must match the file again.
                self.table.rollback();
                self.counters.failed_commits.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%error, "an SQLite batch failed to commit and was rolled back");
                Some(Arc::new(error))
            }
        };
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        self.counters
            .operations
            .fetch_add(jobs.len() as u64, Ordering::Relaxed);
        // Only now may anyone hear of the batch — reads included, as they may have seen its
        // changes.
        for job in jobs.drain(..) {
            job.answer(failure.as_ref());
        }
    }

    /// Writes the batch's changed leases and holds, the last token and the batch's time
    /// `now` in one transaction, committed and fsynced on return. Returns whether there was
    /// anything to write.
    pub(super) fn persist(&mut self, now: Timestamp) -> Result<bool, WriteError> {
        let hold_changes = self.table.hold_changes();
        let last_token = self.table.last_token();
        if self.table.changed().next().is_none()
            && hold_changes.is_empty()
            && last_token == self.persisted_token
        {
            return Ok(false);
        }
        // Dropped without commit on any error: SQLite rolls the transaction back.
        let tx = self.conn.transaction()?;
        for (resource, lease) in self.table.changed() {
            write_row(&tx, resource, lease, self.shift)?;
        }
        for dirty in &hold_changes {
            write_hold(&tx, dirty, self.shift)?;
        }
        // max(): the counter and the time only ever move forward, whatever the table says.
        // The uptime is recorded only with a time that moved forward (it never goes back,
        // but if it did, the record of an earlier uptime with a later time would end leases
        // early at the next open): else it is forgotten, and the next open re-bases as after
        // a reboot.
        let uptime = self.clock.uptime();
        tx.prepare_cached(
            "UPDATE meta SET last_token = max(last_token, ?1),
                 boot_id = CASE WHEN ?2 >= last_now THEN ?3 END,
                 since_boot = CASE WHEN ?2 >= last_now THEN ?4 END,
                 last_now = max(last_now, ?2)
             WHERE id = 1",
        )?
        .execute(params![
            to_sql("fencing token", last_token)?,
            to_sql("timestamp", now.as_millis())?,
            uptime.as_ref().map(|up| up.boot.as_str()),
            uptime.as_ref().map(|up| recorded_uptime_ms(up.since_boot)),
        ])?;
        tx.commit()?;
        self.persisted_token = last_token;
        Ok(true)
    }
}
