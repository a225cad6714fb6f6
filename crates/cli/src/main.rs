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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("fencelock: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => cmd::serve::run(args).await,
        }
    })
}
