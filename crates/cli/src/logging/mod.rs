//! Log setup: human-readable text on a terminal, JSON lines for machines.
//!
//! # Layout
//! - `lease_line`: the JSON line of a lease's change, written without the stock formatter's
//!   machinery (every grant and release is logged).
//! - `queue`: the writer, a queue in memory that a thread of its own writes to standard error.

mod lease_line;
mod queue;

use std::io::{self, IsTerminal};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Format as Formatter;

use lease_line::LeaseLines;
pub use queue::Guard;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// What is logged when `RUST_LOG` is not set.
const DEFAULT_FILTER: &str = "info,rustls_platform_verifier=off";

/// Logs to standard error at the level of `RUST_LOG` (default: `info`, without the
/// certificate verifier's own line for a TLS failure, which the command's error already
/// says in full). Keep the guard until the process ends: dropping it writes out what is
/// still queued. Fails if the writer's thread cannot be started.
///
/// Lines are written by a thread of their own, so that a request never waits for standard
/// error (a slow terminal or pipe) while the queue has room. Nothing is dropped: when the
/// queue is full, the logging call waits for room instead — every grant and release is
/// logged. That thread writes all the lines queued when it wakes with one system call.
pub fn init(format: Format) -> io::Result<Guard> {
    let stderr = io::stderr();
    let ansi = stderr.is_terminal();
    init_to(format, stderr, ansi)
}

/// Logs as [`init`] does, to `sink` (colours only if `ansi`): the allocation bench logs
/// every grant to a sink the same way the server does to standard error.
pub fn init_to(format: Format, sink: impl io::Write + Send + 'static, ansi: bool) -> io::Result<Guard> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let (queue, guard) = queue::start(sink)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(queue);
    match format {
        Format::Text => builder.init(),
        Format::Json => {
            let json = Formatter::default().json().flatten_event(true);
            builder
                .json()
                .flatten_event(true)
                .event_format(LeaseLines::new(json))
                .init()
        }
    }
    Ok(guard)
}
