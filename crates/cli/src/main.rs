//! `fencelock`: the one binary — the server, and (see `cmd/`) the commands for people and
//! scripts. Thin on purpose: it parses flags, sets up logging and calls the library crates.

mod cmd;
mod logging;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// fencelock: leases with fencing tokens, so that many processes can take turns on a shared
/// resource and the resource can reject a holder whose lease ran out.
#[derive(Debug, Parser)]
#[command(name = "fencelock", version, about, long_about = None)]
struct Cli {
    /// How log lines are written.
    #[arg(long, global = true, env = "FENCELOCK_LOG_FORMAT", value_enum, default_value_t = logging::Format::Text)]
    log_format: logging::Format,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server.
    Serve(cmd::serve::Args),
    /// Acquire a lease — of a lock, a semaphore's permit (--limit) or a read-write lock
    /// (--mode) — and print it as JSON (exit 0 granted, 1 held by others, 2 bad input, 3
    /// unreachable).
    Acquire(cmd::acquire::Args),
    /// Renew a lease and print it as JSON (exit 0 renewed, 1 not found, forbidden or token
    /// conflict).
    Renew(cmd::renew::Args),
    /// Release a lease (exit 0 released, 1 not found, forbidden or token conflict); with
    /// --force, whoever holds it (an administrator's release).
    Release(cmd::release::Args),
    /// Show the live lease on a resource, or a semaphore's permits or a read-write lock's
    /// holds with --kind (exit 0 held, 1 free).
    Status(cmd::status::Args),
    /// Show every live lease (or, with --kind, permit or hold), ordered by name.
    List(cmd::list::Args),
    /// Print every change (grant, release, expire, …) under a prefix as it happens, from a
    /// server's event stream; resumes by itself after a disconnect (--json: one JSON object
    /// per line).
    Events(cmd::events::Args),
    /// Run a command while holding a lock (or several, all or none: --lock A --lock B), a
    /// semaphore's permit (--limit) or a read-write lock (--mode); stop it before the lease
    /// could pass to anyone else, or before --max-hold (exit: the command's status; 75 busy;
    /// 124 lease lost or cap reached).
    Run(cmd::run::Args),
    /// Campaign for the leadership of an election and run a command only while leader: it is
    /// stopped before the leadership could pass to anyone else, and the campaign starts
    /// again when it ends or the leadership is lost (ends on SIGINT/SIGTERM/SIGHUP: 128+N).
    Elect(cmd::elect::Args),
    /// Show who leads an election: leader, term, value (exit 0 led, 1 vacant); with --watch,
    /// every change as it happens.
    Leader(cmd::leader::Args),
    /// Load generator: acquire/release cycles against a server or a store, with latency
    /// percentiles.
    Bench(cmd::bench::Args),
    /// Tokens for a server with authentication on (`serve --auth FILE`).
    #[command(subcommand)]
    Auth(cmd::auth::Command),
    /// The supervisor `run` starts its command under (not for people: `run` starts it).
    #[command(hide = true)]
    Supervise(cmd::run::supervisor::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The supervisor must block signals before any thread starts (the log writer's, the
    // runtime's), and needs neither.
    let command = match cli.command {
        Command::Supervise(args) => return cmd::run::supervisor::run(args),
        command => command,
    };
    let _logs = match logging::init(cli.log_format) {
        Ok(guard) => guard,
        Err(error) => {
            eprintln!("fencelock: cannot start the log writer: {error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("fencelock: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        match command {
            Command::Serve(args) => cmd::serve::run(args).await,
            Command::Acquire(args) => cmd::acquire::run(args).await,
            Command::Renew(args) => cmd::renew::run(args).await,
            Command::Release(args) => cmd::release::run(args).await,
            Command::Status(args) => cmd::status::run(args).await,
            Command::List(args) => cmd::list::run(args).await,
            Command::Events(args) => cmd::events::run(args).await,
            Command::Run(args) => cmd::run::run(args).await,
            Command::Elect(args) => cmd::elect::run(args).await,
            Command::Leader(args) => cmd::leader::run(args).await,
            Command::Bench(args) => cmd::bench::run(args).await,
            Command::Auth(command) => cmd::auth::run(command),
            // Taken before the runtime started (above).
            Command::Supervise(args) => cmd::run::supervisor::run(args),
        }
    })
}
