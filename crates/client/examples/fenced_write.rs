//! Why a lock needs a fencing token: the timeline where a lease alone fails, and the
//! protected resource that saves the day.
//!
//! ```text
//! A acquires        → token 41 → pauses (GC, swap, a stopped VM)
//! A's lease expires → B acquires → token 42 → writes with 42 → accepted
//! A resumes         → writes with 41                     → REJECTED (41 < 42)
//! ```
//!
//! A checked that it held the lock just before its pause, and nothing in its process ran
//! during the pause, not even the renewal. So A cannot know; only the protected resource
//! can refuse A's write, by comparing tokens. Here the protected resource is both a value
//! in memory ([`FencedValue`]) and a row in SQLite written with the fenced `UPDATE` of
//! [`update_sql`].
//!
//! Run it against a server of its own (started in this process on a free port):
//!
//! ```text
//! cargo run -p fencelock-client --example fenced_write
//! ```
//!
//! or against a running server: `… --example fenced_write -- --server http://127.0.0.1:7070`.

use std::error::Error;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use fencelock_client::fence::{FencedValue, update_sql};
use fencelock_client::{AcquireError, FencingToken, Resource, Timestamp, Ttl, connect};
use tokio::time::Instant;

#[tokio::main]
async fn main() -> ExitCode {
    let server = std::env::args().skip_while(|arg| arg != "--server").nth(1);
    match timeline(server.as_deref(), &mut std::io::stdout()).await {
        Ok(report) if report.late_write_rejected => ExitCode::SUCCESS,
        Ok(_) => {
            eprintln!("A's late write was accepted: the protected resource did not check tokens");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("fenced_write: {error}");
            ExitCode::FAILURE
        }
    }
}

/// What happened.
#[derive(Debug)]
pub struct Report {
    /// A's token.
    pub a: FencingToken,
    /// B's token.
    pub b: FencingToken,
    /// Whether both protected resources refused A's late write.
    pub late_write_rejected: bool,
    /// What the in-memory value holds at the end.
    pub value: String,
    /// The balance in the SQLite row at the end.
    pub balance: i64,
}

/// Plays the timeline against the server at `server` (or one of our own), writing what
/// happens to `out`.
pub async fn timeline(server: Option<&str>, out: &mut impl Write) -> Result<Report, Box<dyn Error>> {
    let url = match server {
        Some(url) => url.to_owned(),
        None => start_server().await?,
    };
    let client = connect(&url).await?;
    let started = Instant::now();
    let mut say = |text: String| writeln!(out, "t={:>5} ms  {text}", started.elapsed().as_millis());

    // The protected resource: a value in memory, and an account row in SQLite.
    let ledger = FencedValue::new(String::from("opening balance"));
    let db = rusqlite::Connection::open_in_memory()?;
    db.execute_batch(
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL,
                                fencing_token INTEGER NOT NULL DEFAULT 0);
         INSERT INTO accounts (id, balance) VALUES (1, 100);",
    )?;
    let set_balance = update_sql("accounts", "balance = :balance", "id = :id", ":token");
    let write_row = |token: FencingToken, balance: i64| -> rusqlite::Result<bool> {
        let token = i64::try_from(token.0).unwrap_or(i64::MAX);
        let changed = db.execute(
            &set_balance,
            rusqlite::named_params! {":token": token, ":balance": balance, ":id": 1},
        )?;
        Ok(changed == 1)
    };

    let resource = Resource::new(format!("ledger:{}", Timestamp::now_wall().as_millis()))?;
    let ttl = Ttl::from_millis(500, Ttl::DEFAULT_MAX)?;
    let a = client.try_acquire(&resource, &"worker-a".parse()?, ttl).await?;
    say(format!("A acquires {resource}: fencing token {}", a.token()))?;
    assert!(
        a.is_held(),
        "A checks that it holds the lock, and is about to write"
    );

    // A's process stops here: nothing in it runs, its lease is not renewed.
    a.pause_renewal();
    say("A pauses (a stop-the-world pause: its lease is not renewed)".into())?;

    let b = loop {
        match client.try_acquire(&resource, &"worker-b".parse()?, ttl).await {
            Ok(b) => break b,
            Err(AcquireError::Busy { .. }) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(error) => return Err(error.into()),
        }
    };
    say(format!(
        "A's lease expired; B acquires: fencing token {}",
        b.token()
    ))?;
    ledger.write(b.token(), "B's entry".into())?;
    let b_wrote = write_row(b.token(), 80)?;
    say(format!(
        "B writes with token {}: accepted (row updated: {b_wrote})",
        b.token()
    ))?;

    // A resumes, still believing it holds the lock, and writes.
    let late = ledger.write(a.token(), "A's entry".into());
    let a_wrote = write_row(a.token(), 90)?;
    match &late {
        Err(stale) => say(format!(
            "A resumes and writes with token {}: REJECTED ({stale})",
            a.token()
        ))?,
        Ok(()) => say(format!(
            "A resumes and writes with token {}: accepted!",
            a.token()
        ))?,
    }
    say(format!("A's fenced UPDATE changed {} row(s)", u8::from(a_wrote)))?;

    let report = Report {
        a: a.token(),
        b: b.token(),
        late_write_rejected: late.is_err() && !a_wrote,
        value: ledger.get(),
        balance: db.query_row("SELECT balance FROM accounts WHERE id = 1", [], |row| row.get(0))?,
    };
    say(format!(
        "the ledger holds {:?}, the balance is {}",
        report.value, report.balance
    ))?;
    b.release().await?;
    drop(a);
    Ok(report)
}

/// A fencelock server of our own on a free port, on an in-memory store; it runs until the
/// runtime stops.
async fn start_server() -> Result<String, Box<dyn Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let store = Arc::new(fencelock_core::MemoryStore::new());
    let config = fencelock_server::Config::default();
    tokio::spawn(fencelock_server::serve(
        listener,
        store,
        config,
        std::future::pending(),
    ));
    Ok(url)
}
