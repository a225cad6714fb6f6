//! Log setup: human-readable text on a terminal, JSON lines for machines.

use std::io::IsTerminal;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

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
/// says in full). Keep the guard until
/// the process ends: dropping it writes out what is still queued.
///
/// Lines are written by a thread of their own, so that a request never waits for standard
/// error (a slow terminal or pipe). Nothing is dropped: when the queue is full, the logging
/// call waits for room instead — every grant and release is logged.
pub fn init(format: Format) -> WorkerGuard {
    init_to(format, std::io::stderr(), std::io::stderr().is_terminal())
}

/// Logs as [`init`] does, to `writer` (colours only if `ansi`): the allocation bench logs
/// every grant to a sink the same way the server does to standard error.
pub fn init_to(format: Format, writer: impl std::io::Write + Send + 'static, ansi: bool) -> WorkerGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("fencelock-log")
        .finish(writer);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    match format {
        Format::Text => builder.init(),
        Format::Json => builder.json().flatten_event(true).init(),
    }
    guard
}
