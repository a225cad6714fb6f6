//! Moving money between two accounts: both accounts' locks taken together with
//! `acquire_all` (all or none, so two transfers in opposite directions never deadlock), and
//! both rows written in one transaction with fenced `UPDATE`s, each carrying the token of
//! its own account's lock — a transfer whose lease on either account has passed to someone
//! else changes nothing.
//!
//! ```text
//! cargo run -p fencelock-client --example transfer                       # on memory://
//! cargo run -p fencelock-client --example transfer -- --server http://127.0.0.1:7070
//! ```

use std::error::Error;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock_client::fence::update_sql;
use fencelock_client::{Client, FencingToken, MultiGuard, Owner, Resource, Resources, Ttl, connect};

/// What a transfer is given to fail with.
type Failed = Box<dyn Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    let address = std::env::args().skip_while(|arg| arg != "--server").nth(1);
    match transfers(address.as_deref().unwrap_or("memory://")).await {
        Ok(report) => {
            println!("{report:?}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("transfer: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The accounts, each row with the highest fencing token that wrote it.
pub struct Ledger(Mutex<rusqlite::Connection>);

impl Ledger {
    /// Accounts 1 and 2, with 100 and 0.
    pub fn open() -> rusqlite::Result<Self> {
        let db = rusqlite::Connection::open_in_memory()?;
        db.execute_batch(
            "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL,
                                    fencing_token INTEGER NOT NULL DEFAULT 0);
             INSERT INTO accounts (id, balance) VALUES (1, 100), (2, 0);",
        )?;
        Ok(Self(Mutex::new(db)))
    }

    /// Moves `amount` from account `from` to account `to` in one transaction, each row
    /// written only if it has seen no token higher than that account's token. Whether both
    /// rows took the write (if either refused, neither changed).
    pub fn move_money(
        &self,
        (from, from_token): (u32, FencingToken),
        (to, to_token): (u32, FencingToken),
        amount: i64,
    ) -> rusqlite::Result<bool> {
        // A std mutex: held for one transaction, never across an `.await`.
        let mut db = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let tx = db.transaction()?;
        let sql = update_sql("accounts", "balance = balance + :amount", "id = :id", ":token");
        let write = |id: u32, amount: i64, token: FencingToken| -> rusqlite::Result<bool> {
            let token = i64::try_from(token.0).unwrap_or(i64::MAX);
            let changed = tx.execute(
                &sql,
                rusqlite::named_params! {":amount": amount, ":id": id, ":token": token},
            )?;
            Ok(changed == 1)
        };
        if write(from, -amount, from_token)? && write(to, amount, to_token)? {
            tx.commit()?;
            return Ok(true);
        }
        // Dropping the transaction rolls the first write back.
        Ok(false)
    }

    /// The balance of account `id`.
    pub fn balance(&self, id: u32) -> rusqlite::Result<i64> {
        let db = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        db.query_row("SELECT balance FROM accounts WHERE id = ?1", [id], |row| {
            row.get(0)
        })
    }
}

/// The lock of account `id`.
fn account(id: u32) -> Result<Resource, Failed> {
    Ok(Resource::new(format!("account:{id}"))?)
}

/// Takes both accounts' locks at once (waiting up to 10 s for both), returns the guard and
/// the two accounts with their tokens.
async fn lock_both(
    client: &Client,
    owner: &Owner,
    from: u32,
    to: u32,
) -> Result<(MultiGuard, (u32, FencingToken), (u32, FencingToken)), Failed> {
    let (a, b) = (account(from)?, account(to)?);
    let both = Resources::new(vec![a.clone(), b.clone()])?;
    let ttl = Ttl::from_millis(10_000, Ttl::DEFAULT_MAX)?;
    let guard = client
        .acquire_all(&both, owner, ttl, Duration::from_secs(10))
        .await?;
    let token = |r: &Resource| guard.token(r).ok_or("the guard holds both accounts");
    let (from_token, to_token) = (token(&a)?, token(&b)?);
    Ok((guard, (from, from_token), (to, to_token)))
}

/// One transfer of `amount` from `from` to `to` by `owner`.
pub async fn transfer(
    client: &Client,
    ledger: &Ledger,
    owner: &Owner,
    (from, to): (u32, u32),
    amount: i64,
) -> Result<(), Failed> {
    let (guard, debit, credit) = lock_both(client, owner, from, to).await?;
    let written = ledger.move_money(debit, credit, amount);
    guard.release().await?;
    match written? {
        true => Ok(()),
        false => Err("a newer holder of one of the accounts has written: transfer refused".into()),
    }
}

/// What happened.
#[derive(Debug)]
pub struct Report {
    /// The balances of accounts 1 and 2 at the end.
    pub balances: (i64, i64),
    /// Whether a transfer with the tokens of an old pair of leases was refused and changed
    /// nothing.
    pub stale_refused: bool,
}

/// Ten transfers each way at once between accounts 1 and 2, through the server or store at
/// `address`; then a late transfer carrying the first transfer's tokens.
pub async fn transfers(address: &str) -> Result<Report, Failed> {
    let client = connect(address).await?;
    let ledger = Arc::new(Ledger::open()?);
    // Tokens of a pair of leases taken before every transfer below, then given up.
    let (early, old_debit, old_credit) = lock_both(&client, &"early".parse()?, 1, 2).await?;
    early.release().await?;

    let run = |owner: &str, accounts: (u32, u32), amount: i64| {
        let (client, ledger, owner) = (client.clone(), ledger.clone(), Owner::new(owner));
        tokio::spawn(async move {
            let owner = owner?;
            for _ in 0..10 {
                transfer(&client, &ledger, &owner, accounts, amount).await?;
            }
            Ok::<_, Failed>(())
        })
    };
    // Opposite directions, naming the accounts in opposite orders: all or none means
    // neither ever holds one account while it waits for the other.
    let (there, back) = (run("clerk-1", (1, 2), 7), run("clerk-2", (2, 1), 3));
    there.await??;
    back.await??;

    let before = (ledger.balance(1)?, ledger.balance(2)?);
    let stale_refused = !ledger.move_money(old_debit, old_credit, 50)?;
    let balances = (ledger.balance(1)?, ledger.balance(2)?);
    Ok(Report {
        balances,
        stale_refused: stale_refused && balances == before,
    })
}
