//! The store's time across a stop: the re-base at open, and the clock of the writer (see
//! "Time across a stop" in the module's docs).

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::store::Result;
use fencelock_core::{Clock, Timestamp};
use rusqlite::{Connection, params};

use super::error::SqliteError;

/// The store's time: the given clock, moved by how far it read from the store's time at open
/// (see [`rebase`]): ahead when the clock read behind the store's last recorded time, behind
/// when the wall clock was stepped forward while the store was stopped in the same boot.
pub(super) struct StoreClock {
    clock: Arc<dyn Clock>,
    ahead_ms: i64,
}

impl StoreClock {
    pub(super) fn now(&self) -> Timestamp {
        Timestamp::from_millis(
            to_ms(self.clock.now())
                .saturating_add(self.ahead_ms)
                .max(0)
                .unsigned_abs(),
        )
    }

    /// The host's uptime, read after [`StoreClock::now`] for the same batch: so that it is
    /// never earlier than the time recorded with it, and the time counted stopped at the next
    /// open is never more than really passed.
    pub(super) fn uptime(&self) -> Option<fencelock_core::Uptime> {
        self.clock.uptime()
    }
}

/// Re-bases the leases and holds on the store's last recorded time, so that none loses time
/// the store was stopped but the time that really passed, and returns the store's clock from
/// now on (see the module docs).
///
/// With `recorded` the last batch's time: if the host has not rebooted since (the uptime
/// recorded with it is of this boot), the store's time resumes from `recorded` plus the
/// uptime since, and nothing moves. Else, with `now` the clock's reading: if `now` is later,
/// every lease and hold moves later by `now - recorded`, which only raises the file's shift by
/// that much (one row, whatever the number of leases: [`load`](super::load::open) applies it); if it is earlier,
/// the store's clock runs ahead of `clock` by `recorded - now`.
pub(super) fn rebase(conn: &mut Connection, clock: Arc<dyn Clock>) -> Result<StoreClock, SqliteError> {
    let failed = SqliteError::Rebase;
    let tx = conn.transaction().map_err(failed)?;
    let (recorded, boot, since_boot): (i64, Option<String>, Option<i64>) = tx
        .query_row(
            "SELECT last_now, boot_id, since_boot FROM meta WHERE id = 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .map_err(failed)?;
    if recorded == 0 {
        // A new store: nothing to re-base.
        return Ok(StoreClock { clock, ahead_ms: 0 });
    }
    // The uptime before the time: the store's time resumed from it is then a little behind
    // rather than ahead, and no lease ends early.
    let uptime = clock.uptime();
    let now = to_ms(clock.now());
    let stopped = match (uptime, boot, since_boot) {
        (Some(up), Some(boot), Some(since)) if up.boot == boot => uptime_ms(up.since_boot).checked_sub(since),
        _ => None,
    };
    if let Some(stopped) = stopped.filter(|stopped| *stopped >= 0) {
        // The same boot: the store's time goes on from the record by exactly the time that
        // passed, as if the store had kept running, so every lease keeps the `expires_at` it
        // was acknowledged with.
        let resumed = recorded.saturating_add(stopped);
        let ahead_ms = resumed.saturating_sub(now);
        if ahead_ms.unsigned_abs() > WALL_CLOCK_NOTICED {
            let side = if ahead_ms > 0 { "behind" } else { "ahead of" };
            tracing::warn!(
                store_ms = resumed,
                wall_ms = now,
                "the wall clock reads {} ms {side} the embedded store's time: it was stepped \
                 since the store first started in this boot of the host. The store keeps its \
                 own time, and every lease its expires_at, until the host reboots",
                ahead_ms.unsigned_abs()
            );
        }
        return Ok(StoreClock { clock, ahead_ms });
    }
    if now <= recorded {
        // The clock reads earlier than the last batch: run ahead of it by the difference.
        return Ok(StoreClock {
            clock,
            ahead_ms: recorded - now,
        });
    }
    // The store's time is the clock's from now on: record it with this boot's uptime, read
    // after it, so that the next open in this boot counts from here.
    let uptime = clock.uptime();
    tx.execute(
        "UPDATE meta SET shift = shift + (?1 - ?2), last_now = ?1, boot_id = ?3, since_boot = ?4
         WHERE id = 1",
        params![
            now,
            recorded,
            uptime.as_ref().map(|up| up.boot.as_str()),
            uptime.as_ref().map(|up| recorded_uptime_ms(up.since_boot)),
        ],
    )
    .map_err(failed)?;
    tx.commit().map_err(failed)?;
    Ok(StoreClock { clock, ahead_ms: 0 })
}

/// How far (ms) the wall clock may read from the store's time at open before it is said.
pub(super) const WALL_CLOCK_NOTICED: u64 = 1_000;

/// `time` in ms since the epoch, as the file keeps it.
pub(super) fn to_ms(time: Timestamp) -> i64 {
    i64::try_from(time.as_millis()).unwrap_or(i64::MAX)
}

/// An uptime read at open, in whole ms rounded down: compared with one recorded (rounded
/// up), the time counted stopped is never more than really passed.
pub(super) fn uptime_ms(uptime: Duration) -> i64 {
    i64::try_from(uptime.as_millis()).unwrap_or(i64::MAX)
}

/// An uptime to record with the store's time, in whole ms rounded up (see [`uptime_ms`]).
pub(super) fn recorded_uptime_ms(uptime: Duration) -> i64 {
    i64::try_from(uptime.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX)
}
