//! The protected side: a resource that checks fencing tokens, so that a holder whose lease
//! ran out (paused, partitioned, slow) cannot write over the work of the next holder.
//!
//! The rule is one comparison: accept a write only if its token is at least the highest the
//! resource has seen, and remember the token. The same holder may write many times with its
//! token; a holder with a lower token — an older lease — is refused, whatever it believes.
//!
//! - [`FencedValue`]: the rule around a value in memory.
//! - [`update_sql`]: the rule as one conditional SQL `UPDATE`, for a table with a
//!   `fencing_token` column: the database checks and records the token in the same
//!   statement as the write, so no check can go stale before the write.

use std::sync::{Mutex, MutexGuard};

use fencelock_core::FencingToken;

/// The column that [`update_sql`] reads and writes.
pub const TOKEN_COLUMN: &str = "fencing_token";

/// A write refused because it carries an older lease's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token {given}: a write with token {highest} was already accepted")]
pub struct StaleToken {
    /// The token the write carried.
    pub given: FencingToken,
    /// The highest token accepted so far.
    pub highest: FencingToken,
}

/// A value that accepts a write only with a fencing token at least as high as every token
/// it accepted before.
///
/// ```
/// use fencelock_client::FencingToken;
/// use fencelock_client::fence::FencedValue;
///
/// let balance = FencedValue::new(100);
/// balance.write(FencingToken(41), 90).unwrap(); // A, lease 41
/// balance.write(FencingToken(42), 80).unwrap(); // B, lease 42: A's lease had expired
/// let late = balance.write(FencingToken(41), 70); // A again, after a pause
/// assert_eq!(late.unwrap_err().highest, FencingToken(42));
/// assert_eq!(balance.get(), 80);
/// ```
#[derive(Debug, Default)]
pub struct FencedValue<T> {
    // A std mutex: held for one comparison and one write, never across an `.await`.
    inner: Mutex<Fenced<T>>,
}

#[derive(Debug, Default)]
struct Fenced<T> {
    highest: Option<FencingToken>,
    value: T,
}

impl<T> FencedValue<T> {
    /// A value that has seen no token yet.
    pub fn new(value: T) -> Self {
        Self {
            inner: Mutex::new(Fenced { highest: None, value }),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Fenced<T>> {
        // The check and the write below cannot panic half-way except inside the caller's
        // closure, which sees the value as it was: a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the value, if `token` is at least the highest token seen.
    pub fn write(&self, token: FencingToken, value: T) -> Result<(), StaleToken> {
        self.update(token, |current| *current = value)
    }

    /// Changes the value with `change`, if `token` is at least the highest token seen; the
    /// check and the change happen under one lock.
    pub fn update<R>(&self, token: FencingToken, change: impl FnOnce(&mut T) -> R) -> Result<R, StaleToken> {
        let mut inner = self.inner();
        if let Some(highest) = inner.highest.filter(|highest| token < *highest) {
            return Err(StaleToken {
                given: token,
                highest,
            });
        }
        inner.highest = Some(token);
        Ok(change(&mut inner.value))
    }

    /// The highest token accepted so far.
    pub fn highest_token(&self) -> Option<FencingToken> {
        self.inner().highest
    }

    /// A copy of the value.
    pub fn get(&self) -> T
    where
        T: Clone,
    {
        self.inner().value.clone()
    }
}

/// A fenced `UPDATE`: sets `assignments` and records the token, only where `condition`
/// holds and the row has not seen a higher token. `token` is the placeholder of the
/// fencing token in your driver's syntax (`$1` for PostgreSQL, `:token` or `?1` for
/// SQLite).
///
/// The table needs a `fencing_token BIGINT NOT NULL DEFAULT 0` column (tokens start at 1
/// and stay far below 2^63). If the statement changes no row, the write was refused (or
/// the row does not exist): the holder's lease has passed to someone else, so it must stop.
///
/// ```
/// use fencelock_client::fence::update_sql;
///
/// let sql = update_sql("accounts", "balance = $2", "id = $3", "$1");
/// assert_eq!(
///     sql,
///     "UPDATE accounts SET balance = $2, fencing_token = $1 \
///      WHERE (id = $3) AND fencing_token <= $1"
/// );
/// ```
pub fn update_sql(table: &str, assignments: &str, condition: &str, token: &str) -> String {
    format!(
        "UPDATE {table} SET {assignments}, {TOKEN_COLUMN} = {token} WHERE ({condition}) AND {TOKEN_COLUMN} <= {token}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_value_takes_equal_and_higher_tokens_and_refuses_lower_ones() {
        let value = FencedValue::new(Vec::new());
        assert_eq!(value.highest_token(), None);
        value.update(FencingToken(5), |v| v.push("a")).unwrap();
        value.update(FencingToken(5), |v| v.push("a again")).unwrap();
        value.update(FencingToken(9), |v| v.push("b")).unwrap();
        let stale = value.update(FencingToken(5), |v| v.push("a late")).unwrap_err();
        assert_eq!(
            stale,
            StaleToken {
                given: FencingToken(5),
                highest: FencingToken(9)
            }
        );
        assert_eq!(value.get(), ["a", "a again", "b"]);
        assert_eq!(value.highest_token(), Some(FencingToken(9)));
    }

    #[test]
    fn the_fenced_update_refuses_a_lower_token_in_sqlite() {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(
            "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL,
                                    fencing_token INTEGER NOT NULL DEFAULT 0);
             INSERT INTO accounts (id, balance) VALUES (1, 100);",
        )
        .unwrap();
        let sql = update_sql("accounts", "balance = :balance", "id = :id", ":token");
        let write = |token: i64, balance: i64| {
            db.execute(
                &sql,
                rusqlite::named_params! {":token": token, ":balance": balance, ":id": 1},
            )
            .unwrap()
        };
        assert_eq!(write(41, 90), 1);
        assert_eq!(write(42, 80), 1);
        assert_eq!(write(42, 75), 1, "the same holder writes again");
        assert_eq!(write(41, 70), 0, "the older lease is refused");
        let (balance, token): (i64, i64) = db
            .query_row(
                "SELECT balance, fencing_token FROM accounts WHERE id = 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!((balance, token), (75, 42));
    }
}
