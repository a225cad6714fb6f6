//! The writer: the connection and the table, and the batches committed through them (group
//! commit) — by the writer thread for what is queued, or by a caller that found the writer
//! idle.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use fencelock_core::StoreError;
use fencelock_core::store::Result;
use fencelock_core::{LockTable, ReleaseFeed, Resource, Timestamp};
use parking_lot::Mutex;
use rusqlite::{Connection, params};
use tokio::runtime::RuntimeFlavor;
use tokio::sync::{mpsc, watch};

use super::clock::{StoreClock, recorded_uptime_ms};
use super::error::WriteError;
use super::load::{read_lease, read_page};
use super::row::{to_sql, write_hold, write_row};
use super::{Counters, Job, MAX_BATCH, Message, Reach};

/// The writer, and what tells a caller whether it may run its operation at once.
///
/// The writer thread takes what is queued, in batches. A caller that finds the queue empty and
/// the writer free runs its own operation as a batch of one on its own thread — a tokio
/// worker, held for that operation and its commit, which no timeout can cut short — and
/// crosses no thread to the writer and none back, which cost more than the operation itself.
/// Under load the queue is seldom empty, and the thread commits many together as before.
pub(super) struct Shared {
    /// `None` once the file is closed, or the writer stopped by a batch that panicked.
    pub(super) writer: Mutex<Option<Writer>>,
    /// Set while the thread waits for the writer with a batch in hand: callers then queue
    /// behind the batch rather than run before it.
    pub(super) thread_waiting: AtomicBool,
    /// Set once the thread has taken the order to close: from then on no caller runs its
    /// operation at once (what was queued before the order still runs, on the thread).
    pub(super) closing: AtomicBool,
    /// How many messages the thread has taken from the queue and not yet run.
    pub(super) in_hand: AtomicUsize,
    /// Set until the table has every lease of the file (see `load`): meanwhile each call
    /// names the leases it reads or writes.
    pub(super) loading: AtomicBool,
}

/// The connection and the table.
pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) table: LockTable,
    pub(super) clock: StoreClock,
    /// The last token the file holds; written again only when the table's moves past it.
    pub(super) persisted_token: u64,
    /// The file's re-base shift, which every row written carries (see [`rebase`](super::clock::rebase)).
    pub(super) shift: i64,
    /// While the leases load, what the table has of them besides the first chunk.
    pub(super) loading: Option<Loading>,
    pub(super) counters: Arc<Counters>,
    pub(super) released: ReleaseFeed,
    pub(super) closed: watch::Sender<bool>,
}

/// What the table of a store still loading has of the leases the loader reads (those after
/// the first chunk).
pub(super) struct Loading {
    /// The last name of the first chunk: the loader reads the names after it.
    pub(super) after: String,
    /// Every name after it the writer was asked about, whose lease (or none) the table has
    /// as it is now, whatever the loader reads.
    pub(super) known: HashSet<Resource>,
}

impl Shared {
    /// The writer thread: runs what is queued, in batches, until the queue is closed and
    /// empty, then closes the file — however it ends, a panic included, or `close()` would
    /// wait for ever and the file stay taken.
    pub(super) fn run(&self, mut queue: mpsc::Receiver<Message>) {
        let _closes = CloseOnExit(self);
        // Both kept from batch to batch: a batch allocates no list of its own.
        let mut messages = Vec::with_capacity(MAX_BATCH);
        let mut jobs = Vec::with_capacity(MAX_BATCH);
        // Blocks for the first operation, then waits for the writer, then takes whatever else
        // was queued meanwhile: the batch.
        while queue.blocking_recv_many(&mut messages, MAX_BATCH) > 0 {
            self.in_hand.store(messages.len(), Ordering::Release);
            self.thread_waiting.store(true, Ordering::Release);
            let mut slot = self.writer.lock();
            self.thread_waiting.store(false, Ordering::Release);
            while messages.len() < MAX_BATCH
                && let Ok(message) = queue.try_recv()
            {
                messages.push(message);
            }
            self.in_hand.store(messages.len(), Ordering::Release);
            let mut load_failed = None;
            for message in messages.drain(..) {
                match message {
                    Message::Job(job) => jobs.push(job),
                    // Refuses new operations; those already queued are still taken.
                    Message::Close => {
                        self.closing.store(true, Ordering::Release);
                        queue.close();
                    }
                    Message::Loaded(loaded) => match *loaded {
                        Ok(loaded) => {
                            if let Some(writer) = slot.as_mut() {
                                writer.take_in(loaded);
                            }
                            self.loading.store(false, Ordering::Release);
                        }
                        Err(error) => load_failed = Some(Arc::new(WriteError::Read(error))),
                    },
                }
            }
            self.in_hand.store(0, Ordering::Release);
            if let Some(failure) = load_failed {
                // The table can never have every lease: nothing runs on it again. (A writer
                // already stopped, by a batch that panicked, stopped the loader too.)
                if slot.is_some() {
                    tracing::error!(error = %failure, "the SQLite store could not load its leases: it stops, and refuses every call from now on");
                    close(&mut slot);
                }
                drop(slot);
                for job in jobs.drain(..) {
                    job.answer(Some(&failure));
                }
                break;
            }
            // Stopped: the callers queued are told so (their jobs go unanswered).
            let Ran::Batch(failure) = run_batch(&mut slot, &mut jobs) else {
                break;
            };
            // Free before anyone hears: a caller answered may call again at once.
            drop(slot);
            for job in jobs.drain(..) {
                job.answer(failure.as_ref());
            }
        }
    }

    /// Runs `job` at once, on the caller's thread — which found nothing queued — if the
    /// writer is free; else gives it back, to be queued. The caller's thread is held for one
    /// operation and, if it changed something, one commit.
    pub(super) fn run_if_idle(&self, job: Job) -> Result<(), Job> {
        if self.thread_waiting.load(Ordering::Acquire)
            || self.closing.load(Ordering::Acquire)
            || !another_worker_goes_on()
        {
            return Err(job);
        }
        // Busy, or stopped: the queue takes it, and answers accordingly.
        let Some(mut slot) = self.writer.try_lock() else {
            return Err(job);
        };
        if slot.is_none() {
            return Err(job);
        }
        let mut job = job;
        let failure = run_batch(&mut slot, std::slice::from_mut(&mut job));
        drop(slot);
        // Stopped by this very batch: the job is dropped unanswered, which its caller hears
        // as a stopped writer.
        if let Ran::Batch(failure) = failure {
            job.answer(failure.as_ref());
        }
        Ok(())
    }
}

/// Whether the calling thread may be held for a batch: only on a runtime with another worker
/// to go on serving, and to queue the calls that come meanwhile so that they share a commit.
/// A runtime of one thread held would run every call alone, each with its own fsync.
fn another_worker_goes_on() -> bool {
    tokio::runtime::Handle::try_current().is_ok_and(|runtime| {
        runtime.runtime_flavor() == RuntimeFlavor::MultiThread && runtime.metrics().num_workers() >= 2
    })
}

/// What became of a batch.
enum Ran {
    /// Applied and committed, or undone whole with the commit's failure, which every answer
    /// must then carry.
    Batch(Option<Arc<WriteError>>),
    /// Not run: the writer is stopped, or stopped by this batch.
    Stopped,
}

/// Runs `jobs` on the writer in `slot`, if it is not stopped. A batch that panics half-way
/// stops it: its table no longer matches the file, so nothing runs on it again.
fn run_batch(slot: &mut Option<Writer>, jobs: &mut [Job]) -> Ran {
    let Some(writer) = slot.as_mut() else {
        return Ran::Stopped;
    };
    match std::panic::catch_unwind(AssertUnwindSafe(|| writer.run_batch(jobs))) {
        Ok(failure) => Ran::Batch(failure),
        Err(_) => {
            tracing::error!("an SQLite batch panicked: the store stops, and refuses every call from now on");
            close(slot);
            Ran::Stopped
        }
    }
}

/// Closes the file of the writer in `slot`, if any, for good.
fn close(slot: &mut Option<Writer>) {
    if let Some(Writer { conn, closed, .. }) = slot.take() {
        if let Err((_, error)) = conn.close() {
            tracing::warn!(%error, "closing the SQLite store failed");
        }
        closed.send_replace(true);
    }
}

/// Closes the writer's file when the writer thread ends, however it ends.
struct CloseOnExit<'a>(&'a Shared);

impl Drop for CloseOnExit<'_> {
    fn drop(&mut self) {
        self.0.closing.store(true, Ordering::Release);
        self.0.in_hand.store(0, Ordering::Release);
        close(&mut self.0.writer.lock());
    }
}

impl Writer {
    /// Applies and commits `jobs`, and announces what they freed; returns the batch's failure,
    /// which every job's answer must then carry.
    pub(super) fn run_batch(&mut self, jobs: &mut [Job]) -> Option<Arc<WriteError>> {
        self.read_reach(jobs);
        let failure = self.apply_and_commit(jobs);
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        self.counters
            .operations
            .fetch_add(jobs.len() as u64, Ordering::Relaxed);
        // Only now may anyone hear of the batch — reads included, as they may have seen its
        // changes: the caller answers the jobs, once it has let the writer go.
        failure
    }

    /// While the leases load, before the batch changes anything: reads from the file what each
    /// of `jobs` reaches that the table lacks. A list's page is read and the list answered
    /// from it: the file has every lease as the table would at the batch's start (each batch
    /// before it committed, or was undone in the table too), and a list so answered is one the
    /// batch sees before its other calls, which it may (none of them has been answered). The
    /// leases of the names a call names are read into the table, unless it has them or was
    /// asked about them before. A job whose leases cannot be read is refused with the reason,
    /// and the rest of the batch goes on.
    fn read_reach(&mut self, jobs: &mut [Job]) {
        let Some(Loading { known, .. }) = &mut self.loading else {
            return;
        };
        let now = self.clock.now();
        for job in jobs.iter_mut() {
            let read = match job.reach() {
                None => continue,
                Some(Reach::Page(query)) => match read_page(&self.conn, query, now, self.shift) {
                    Ok(leases) => {
                        job.apply(&mut LockTable::new(0, leases), now);
                        continue;
                    }
                    Err(error) => Err(error),
                },
                Some(Reach::Leases(names)) => names.iter().try_for_each(|name| {
                    if self.table.has_lease(name) || known.contains(name) {
                        return Ok(());
                    }
                    if let Some(lease) = read_lease(&self.conn, name, self.shift)? {
                        self.table.load_lease(lease);
                    }
                    known.insert(name.clone());
                    Ok(())
                }),
            };
            if let Err(error) = read {
                tracing::error!(%error, "a lease of the SQLite store cannot be read: the call that needs it is refused");
                job.refuse(StoreError::from(error));
            }
        }
    }

    /// Panics if the batch changed a lease the loader may read that no call named in its
    /// reach (an operation that forgot to): the loaded lease would undo the change.
    fn check_reach(&self) {
        let Some(Loading { after, known }) = &self.loading else {
            return;
        };
        for (name, _) in self.table.changed() {
            assert!(
                name.as_str() <= after.as_str() || known.contains(name),
                "{name} changed while the leases load, named in no call's reach"
            );
        }
    }

    /// Takes in the leases the loader read: the table has every lease from now on.
    fn take_in(&mut self, loaded: LockTable) {
        let known = self
            .loading
            .take()
            .map(|loading| loading.known)
            .unwrap_or_default();
        self.table.take_in(loaded, &known);
    }

    /// Applies and commits `jobs`, and announces what they freed; returns the batch's failure.
    fn apply_and_commit(&mut self, jobs: &mut [Job]) -> Option<Arc<WriteError>> {
        self.table.begin();
        let mut now = self.clock.now();
        for job in jobs.iter_mut() {
            now = self.clock.now();
            job.apply(&mut self.table, now);
        }
        if cfg!(debug_assertions) {
            self.check_reach();
        }
        match self.persist(now) {
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
