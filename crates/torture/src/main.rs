//! `fencelock-torture`: a seeded, time-bounded run of one store through faults
//! (`run`), the client processes it starts (`client`), and the judging of a saved history
//! (`check`). `scripts/torture` builds it and runs `run`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fencelock_torture::{client, run, verdict};

#[derive(Debug, Parser)]
#[command(name = "fencelock-torture", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs one store through faults, writes the history and judges it.
    Run(run::RunArgs),
    /// Judges a history a run wrote.
    Check {
        /// The history (JSON lines).
        file: PathBuf,
    },
    /// One client process of a run (started by `run`).
    #[command(hide = true)]
    Client(client::ClientArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => match run::run(&args) {
            Ok(ran) => {
                let judged = verdict::judge_file(&ran.history);
                if ran.problems.is_empty() && judged == Some(true) {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(error) => {
                eprintln!("fencelock-torture run: {error:#}");
                ExitCode::from(2)
            }
        },
        Command::Check { file } => match verdict::judge_file(&file) {
            Some(true) => ExitCode::SUCCESS,
            Some(false) => ExitCode::FAILURE,
            None => ExitCode::from(2),
        },
        Command::Client(args) => match client::main(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("fencelock-torture client: {error:#}");
                ExitCode::FAILURE
            }
        },
    }
}
