//! The file's schema, one migration per version, and the connection that takes the file for
//! one server alone.

use std::path::Path;
use std::time::Duration;

use fencelock_core::store::Result;
use rusqlite::{Connection, TransactionBehavior};

use super::error::SqliteError;

/// The schema, one migration per version; `PRAGMA user_version` counts those applied.
/// Append only: a migration that has shipped is never edited.
pub(super) const MIGRATIONS: &[&str] = &[
    r"
    CREATE TABLE leases (
        resource    TEXT    NOT NULL UNIQUE,
        owner       TEXT    NOT NULL,
        token       INTEGER NOT NULL CHECK (token > 0),
        acquired_at INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE meta (
        id         INTEGER PRIMARY KEY CHECK (id = 1),
        last_token INTEGER NOT NULL CHECK (last_token >= 0)
    ) STRICT;
    INSERT INTO meta (id, last_token) VALUES (1, 0);
    -- Once a lease row is gone, this counter is all that remembers its token: lowering or
    -- losing it would let a token be issued twice.
    CREATE TRIGGER meta_token_never_goes_back BEFORE UPDATE ON meta
        WHEN NEW.last_token < OLD.last_token
        BEGIN SELECT RAISE(ABORT, 'the fencing token counter never goes back'); END;
    CREATE TRIGGER meta_is_never_deleted BEFORE DELETE ON meta
        BEGIN SELECT RAISE(ABORT, 'the fencing token counter is never deleted'); END;
",
    r"
    -- The store's time (ms) of the last committed batch: at open, leases are re-based on it,
    -- so that a wall clock stepped while the store was stopped cannot shorten them.
    ALTER TABLE meta ADD COLUMN last_now INTEGER NOT NULL DEFAULT 0 CHECK (last_now >= 0);
",
    r"
    -- Semaphore permits and read-write holds: one row per owner of a name, each a lease
    -- with a token of its own, drawn from the same counter as the leases' tokens.
    CREATE TABLE holds (
        kind         TEXT    NOT NULL CHECK (kind IN ('semaphore', 'rwlock')),
        name         TEXT    NOT NULL,
        owner        TEXT    NOT NULL,
        claim        TEXT    NOT NULL CHECK (claim IN ('permit', 'read', 'write')),
        -- The semaphore's limit, which every permit carries; no other claim has one.
        permit_limit INTEGER CHECK (permit_limit BETWEEN 1 AND 4294967295),
        token        INTEGER NOT NULL CHECK (token > 0),
        acquired_at  INTEGER NOT NULL,
        expires_at   INTEGER NOT NULL,
        PRIMARY KEY (kind, name, owner),
        CHECK ((claim = 'permit') = (kind = 'semaphore')),
        CHECK ((claim = 'permit') = (permit_limit IS NOT NULL))
    ) STRICT, WITHOUT ROWID;
    -- The counter stays at or above every hold's token, whoever writes the row: once the
    -- row is gone, the counter is all that remembers the token.
    CREATE TRIGGER holds_raise_the_counter_on_insert AFTER INSERT ON holds
        BEGIN UPDATE meta SET last_token = NEW.token WHERE id = 1 AND last_token < NEW.token; END;
    CREATE TRIGGER holds_raise_the_counter_on_update AFTER UPDATE OF token ON holds
        BEGIN UPDATE meta SET last_token = NEW.token WHERE id = 1 AND last_token < NEW.token; END;
",
    r"
    -- The re-base at open moves every live lease and hold later by the time the store was
    -- stopped. Rather than rewrite each row (seconds for a million), meta keeps the sum of
    -- every re-base's move, and each row the sum in force when it was written: a row ends at
    -- its expires_at + (meta's shift - its shift). Rows written before this migration, and
    -- meta, start at 0.
    ALTER TABLE meta ADD COLUMN shift INTEGER NOT NULL DEFAULT 0 CHECK (shift >= 0);
    ALTER TABLE leases ADD COLUMN shift INTEGER NOT NULL DEFAULT 0 CHECK (shift >= 0);
    ALTER TABLE holds ADD COLUMN shift INTEGER NOT NULL DEFAULT 0 CHECK (shift >= 0);
    -- Lowering meta's shift, or a row's shift above it, would end leases and holds early.
    CREATE TRIGGER meta_shift_never_goes_back BEFORE UPDATE OF shift ON meta
        WHEN NEW.shift < OLD.shift
        BEGIN SELECT RAISE(ABORT, 'the re-base shift never goes back'); END;
    CREATE TRIGGER leases_shift_is_never_ahead_on_insert BEFORE INSERT ON leases
        WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
        BEGIN SELECT RAISE(ABORT, 'a lease row is never shifted past the store'); END;
    CREATE TRIGGER leases_shift_is_never_ahead_on_update BEFORE UPDATE OF shift ON leases
        WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
        BEGIN SELECT RAISE(ABORT, 'a lease row is never shifted past the store'); END;
    CREATE TRIGGER holds_shift_is_never_ahead_on_insert BEFORE INSERT ON holds
        WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
        BEGIN SELECT RAISE(ABORT, 'a hold row is never shifted past the store'); END;
    CREATE TRIGGER holds_shift_is_never_ahead_on_update BEFORE UPDATE OF shift ON holds
        WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
        BEGIN SELECT RAISE(ABORT, 'a hold row is never shifted past the store'); END;
",
    r"
    -- The principal each lease and hold belongs to (NULL: none, a server without
    -- authentication). Rows written before this migration belong to none.
    ALTER TABLE leases ADD COLUMN principal TEXT;
    ALTER TABLE holds ADD COLUMN principal TEXT;
",
    r"
    -- The terms a lease keeps for its whole life: its cap on holding (NULL: none), moved by
    -- re-bases as expires_at is, and its lock-delay in ms. Rows written before have neither.
    ALTER TABLE leases ADD COLUMN hold_until INTEGER;
    ALTER TABLE leases ADD COLUMN lock_delay INTEGER NOT NULL DEFAULT 0 CHECK (lock_delay >= 0);
",
    r"
    -- The host's boot and its uptime (ms, suspends included) read with last_now: at open in the
    -- same boot, the time the store was stopped is the uptime's difference, whatever the wall
    -- clock did. NULL: unknown (a host that cannot tell, or a file written before).
    ALTER TABLE meta ADD COLUMN boot_id TEXT;
    ALTER TABLE meta ADD COLUMN since_boot INTEGER CHECK (since_boot >= 0);
",
    r"
    -- What each holder said about its lease or hold: a flat JSON object as compact text
    -- (NULL: nothing). Rows written before this migration have none.
    ALTER TABLE leases ADD COLUMN meta TEXT;
    ALTER TABLE holds ADD COLUMN meta TEXT;
",
    r"
    -- Leases keyed by their resource alone, without a rowid: a scan reads them in the order
    -- of their names (BINARY: byte order, as Resource compares), so the load of millions
    -- needs no sort, and each write changes one b-tree instead of a table and its index.
    CREATE TABLE leases_by_resource (
        resource    TEXT    NOT NULL PRIMARY KEY,
        owner       TEXT    NOT NULL,
        token       INTEGER NOT NULL CHECK (token > 0),
        acquired_at INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL,
        shift       INTEGER NOT NULL DEFAULT 0 CHECK (shift >= 0),
        principal   TEXT,
        hold_until  INTEGER,
        lock_delay  INTEGER NOT NULL DEFAULT 0 CHECK (lock_delay >= 0),
        meta        TEXT
    ) STRICT, WITHOUT ROWID;
    -- In key order: each row goes after the last, at the end of the new b-tree.
    INSERT INTO leases_by_resource (resource, owner, token, acquired_at, expires_at, shift,
            principal, hold_until, lock_delay, meta)
        SELECT resource, owner, token, acquired_at, expires_at, shift, principal, hold_until,
            lock_delay, meta
        FROM leases ORDER BY resource;
    -- Its triggers go with it, and come back below on the new table.
    DROP TABLE leases;
    ALTER TABLE leases_by_resource RENAME TO leases;
    CREATE TRIGGER leases_shift_is_never_ahead_on_insert BEFORE INSERT ON leases
        WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
        BEGIN SELECT RAISE(ABORT, 'a lease row is never shifted past the store'); END;
    CREATE TRIGGER leases_shift_is_never_ahead_on_update BEFORE UPDATE OF shift ON leases
        WHEN NEW.shift > (SELECT shift FROM meta WHERE id = 1)
        BEGIN SELECT RAISE(ABORT, 'a lease row is never shifted past the store'); END;
",
];

/// Opens the file and takes it for this server alone, durably journalled.
pub(super) fn connect(path: &Path) -> Result<Connection, SqliteError> {
    let failed = |what: &'static str, source: rusqlite::Error| SqliteError::Open {
        path: path.to_path_buf(),
        what,
        source,
    };
    let conn = Connection::open(path).map_err(|e| failed("cannot open", e))?;
    // Another server holding the file must make this open fail at once, not wait for it.
    conn.busy_timeout(Duration::ZERO)
        .map_err(|e| failed("cannot configure", e))?;
    // Exclusive before WAL: the lock taken by the first write below is then held until
    // close, and WAL needs no shared memory, since no other connection may read.
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
        .map_err(|e| failed("cannot lock", e))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|e| failed("cannot set the journal mode of", e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(SqliteError::NoWal {
            path: path.to_path_buf(),
            mode,
        });
    }
    // FULL: every commit is fsynced before it returns, so an answered change survives a
    // power loss, not just a crash of this process.
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| failed("cannot configure", e))?;
    Ok(conn)
}

/// Brings the schema up to date. Always writes, even when there is nothing to migrate: the
/// write takes the exclusive lock that keeps other servers out from now on.
pub(super) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), SqliteError> {
    let failed = |source: rusqlite::Error| SqliteError::Open {
        path: path.to_path_buf(),
        what: "cannot prepare",
        source,
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(failed)?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(failed)?;
    let Some(applied) = usize::try_from(version).ok().filter(|v| *v <= MIGRATIONS.len()) else {
        return Err(SqliteError::UnknownSchema {
            path: path.to_path_buf(),
            version,
            known: MIGRATIONS.len(),
        });
    };
    for (version, migration) in (1_i64..).zip(MIGRATIONS).skip(applied) {
        tx.execute_batch(migration).map_err(failed)?;
        tx.pragma_update(None, "user_version", version).map_err(failed)?;
    }
    tx.execute("UPDATE meta SET last_token = last_token WHERE id = 1", [])
        .map_err(failed)?;
    tx.commit().map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::load;

    fn pragma(conn: &Connection, name: &str) -> String {
        conn.pragma_query_value(None, name, |row| row.get::<_, rusqlite::types::Value>(0))
            .map(|value| format!("{value:?}"))
            .unwrap()
    }

    /// A connection to a new file in a folder of its own (kept while the folder is), and the
    /// file's path.
    fn connected() -> (tempfile::TempDir, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        let conn = connect(&path).unwrap();
        (dir, path, conn)
    }

    #[test]
    fn the_connection_is_durable_exclusive_and_never_waits_for_a_lock() {
        let (_dir, path, mut conn) = connected();
        migrate(&mut conn, &path).unwrap();
        assert_eq!(pragma(&conn, "journal_mode"), r#"Text("wal")"#);
        assert_eq!(pragma(&conn, "synchronous"), "Integer(2)", "2 is FULL");
        assert_eq!(pragma(&conn, "locking_mode"), r#"Text("exclusive")"#);
        assert_eq!(pragma(&conn, "busy_timeout"), "Integer(0)");
        assert_eq!(
            pragma(&conn, "user_version"),
            format!("Integer({})", MIGRATIONS.len())
        );
    }

    #[test]
    fn migrating_twice_changes_nothing() {
        let (_dir, path, mut conn) = connected();
        migrate(&mut conn, &path).unwrap();
        conn.execute("UPDATE meta SET last_token = 7", []).unwrap();
        migrate(&mut conn, &path).unwrap();
        assert_eq!(load::open(&conn).unwrap().table.last_token(), 7);
    }

    /// Every lease and hold of `conn`'s file as the load reads them, and the last token.
    fn loaded(conn: &Connection) -> (Vec<fencelock_core::Lease>, Vec<fencelock_core::Hold>, u64) {
        use fencelock_core::{HoldKind, ListQuery, Resource, Timestamp};
        let table = load::open(conn).unwrap().table;
        let all = ListQuery {
            prefix: String::new(),
            after: None,
            limit: 100,
        };
        let never = Timestamp::from_millis(0);
        let holds = table.holds(never, HoldKind::Semaphore, &Resource::new("sem").unwrap());
        (table.list(never, &all).leases, holds, table.last_token())
    }

    /// Column `column` of every row `sql` answers, as text.
    fn texts(conn: &Connection, sql: &str, column: usize) -> Vec<String> {
        conn.prepare(sql)
            .unwrap()
            .query_map([], |row| row.get(column))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn a_version_8_file_keeps_every_row_once_its_leases_are_keyed_by_resource() {
        let (_dir, path, mut conn) = connected();
        // A file of version 8 as that version made it: rows in the order they were written,
        // which is not their names' order, with every column used, and shifts behind meta's.
        for migration in &MIGRATIONS[..8] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", 8).unwrap();
        conn.execute_batch(
            r#"
            UPDATE meta SET last_token = 90, shift = 7;
            INSERT INTO leases (resource, owner, token, acquired_at, expires_at, shift, principal,
                    hold_until, lock_delay, meta)
                VALUES ('scale/10', 'a', 3, 100, 5000, 0, NULL, NULL, 0, NULL),
                       ('scale/2', 'b', 9, 200, 6000, 7, 'alice', 9000, 250, '{"k":"v"}'),
                       ('é', 'c', 1, 300, 7000, 2, NULL, 8000, 0, NULL),
                       ('A', 'd', 5, 400, 8000, 0, NULL, NULL, 1000, NULL),
                       (char(1) || 'leader', 'e', 2, 500, 9000, 3, 'bob', NULL, 0, '{}'),
                       ('a name longer than twenty-four bytes', 'f', 4, 600, 9500, 0, NULL, NULL, 0, NULL);
            INSERT INTO holds (kind, name, owner, claim, permit_limit, token, acquired_at,
                    expires_at, shift)
                VALUES ('semaphore', 'sem', 'g', 'permit', 3, 80, 700, 9900, 1);
            "#,
        )
        .unwrap();
        let before = loaded(&conn);
        assert_eq!(before.0.len(), 6);
        migrate(&mut conn, &path).unwrap();

        assert_eq!(pragma(&conn, "user_version"), "Integer(9)");
        assert_eq!(loaded(&conn), before);
        // A scan gives the rows in the order of their names, bytes compared, as Rust's
        // str does: the load's ORDER BY needs no sort of SQLite's either.
        let scanned = texts(&conn, "SELECT resource FROM leases", 0);
        let mut sorted = scanned.clone();
        sorted.sort();
        assert_eq!(scanned, sorted);
        let plan = texts(
            &conn,
            "EXPLAIN QUERY PLAN SELECT resource FROM leases ORDER BY resource",
            3,
        );
        assert_eq!(plan, ["SCAN leases"], "no index, no temporary b-tree");
        let error = conn
            .execute("UPDATE leases SET shift = 8 WHERE resource = 'A'", [])
            .unwrap_err()
            .to_string();
        assert!(error.contains("never shifted past the store"), "{error}");
    }
}
